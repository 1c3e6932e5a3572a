"""SIGINT/SIGTERM during a point (spec §3.1): the point ends early but
normally, and its run folder says ``state: "interrupted"``."""

from __future__ import annotations

import asyncio
import signal
from typing import Protocol

from ..engine.replicas import AnyClient
from ..metrics.tokens import TokenCounter, TokenCounts

__all__ = ("Interrupt", "Stoppable", "count_tokens")


class Stoppable(Protocol):
    """What a signal stops: a phase, or the engines running one."""

    def stop(self) -> None: ...


class Interrupt:
    """The first signal stops issuing (the phase being :meth:`watch`-ed) and
    cancels what is in flight, which then ends as ``Cancelled`` records; a
    second one, while tokens are counted, stops counting.  Where the loop
    cannot take signal handlers (Windows, or not the main thread), Ctrl-C
    raises KeyboardInterrupt as usual."""

    def __init__(self, client: AnyClient) -> None:
        self.client = client
        self.phase: Stoppable | None = None
        self.counter: TokenCounter | None = None
        self.requested = 0
        self._installed: list[int] = []

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._on_signal)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # no signal handlers here
            self._installed.append(sig)

    def watch(self, phase: Stoppable) -> None:
        """Makes a signal stop ``phase`` (a phase, or a group of engines)."""
        self.phase = phase

    def uninstall(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)
        self._installed.clear()

    def _on_signal(self) -> None:
        self.requested += 1
        if self.requested == 1:
            self._stop_issuing()
        elif self.counter is not None:
            self.counter.close()

    def stop(self) -> None:
        """Stops the point as a first signal does (the disk refused the run
        folder: ``point/writer.py``); a later signal then stops the counting."""
        if not self.requested:
            self.requested = 1
            self._stop_issuing()

    def _stop_issuing(self) -> None:
        if self.phase is not None:
            self.phase.stop()
        asyncio.get_running_loop().create_task(self.client.cancel_in_flight())


async def count_tokens(counter: TokenCounter, interrupt: Interrupt) -> TokenCounts:
    """Counts what was submitted, off the loop; a second signal cuts it short."""
    interrupt.counter = counter
    return await asyncio.get_running_loop().run_in_executor(None, counter.finish, None)
