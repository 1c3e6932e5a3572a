"""Several engine processes on this machine (``--engines N``): the
:class:`~.driver.EngineGroup` transport over ``multiprocessing`` pipes.

Every process here reads the same ``CLOCK_MONOTONIC``, so stamps need no
mapping.  Engines are spawned (not forked: the driver has threads and a
running loop), each with one end of a duplex pipe; one thread per engine
reads its pipe.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import msgspec

from .driver import STOP_GRACE_S, EngineGroup
from .engine_process import EngineSetup, engine_main
from .leases import LeaseBook
from .messages import DriverMessage, decode_for_driver, encode

__all__ = ("LocalEngines",)


class LocalEngines(EngineGroup):
    """Engine processes on this machine, reached over pipes."""

    def __init__(self, setups: list[EngineSetup], book: LeaseBook) -> None:
        super().__init__(setups, book)
        context = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[BaseProcess] = []
        self._send_locks = [threading.Lock() for _ in setups]
        with _interrupts_ignored_from_birth():
            for setup in setups:
                mine, theirs = context.Pipe(duplex=True)
                proc = context.Process(
                    target=engine_main,
                    args=(theirs, setup),
                    name=f"mlpe-fast-engine-{setup.index}",
                    daemon=True,
                )
                proc.start()
                theirs.close()
                self._conns.append(mine)
                self._procs.append(proc)
        self.pids = [proc.pid or 0 for proc in self._procs]
        self._readers = [
            threading.Thread(target=self._read, args=(e,), name=f"mlpe-driver-in-{e}", daemon=True)
            for e in range(len(setups))
        ]
        for reader in self._readers:
            reader.start()

    def _send(self, engine: int, message: DriverMessage) -> None:
        with self._send_locks[engine]:
            try:
                self._conns[engine].send_bytes(encode(message))
            except OSError:
                pass  # its reader sees the end and reports the engine lost

    def _kill(self, engine: int) -> None:
        proc = self._procs[engine]
        if proc.is_alive():
            proc.kill()

    def _shutdown(self) -> None:
        for proc in self._procs:
            proc.join(timeout=STOP_GRACE_S if proc.is_alive() else 0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for reader in self._readers:
            reader.join(timeout=5)
        for conn in self._conns:
            conn.close()

    def _read(self, engine: int) -> None:
        conn = self._conns[engine]
        while True:
            try:
                message = decode_for_driver(conn.recv_bytes())
            except (EOFError, OSError, msgspec.DecodeError) as error:
                if isinstance(error, msgspec.DecodeError):
                    reason = f"engine {engine} sent a garbled message ({error})"
                else:
                    reason = f"engine {engine} ended ({self._exit_of(engine)})"
                self._lost_from_thread(engine, reason)
                return
            self._received(engine, message)

    def _exit_of(self, engine: int) -> str:
        proc = self._procs[engine]
        proc.join(timeout=2)
        code = proc.exitcode
        if code is None:
            return "its pipe closed"
        if code < 0:
            return f"killed by signal {-code}"
        return f"its process exited with status {code}"


@contextlib.contextmanager
def _interrupts_ignored_from_birth() -> Iterator[None]:
    """Starts engines with SIGINT ignored: a Ctrl-C reaches the terminal's
    whole process group, and an engine still importing would die of it
    with a "Fatal Python error" (an ignored signal stays ignored across
    exec, and Python keeps it so).  The driver's own handler is put back at
    once; a Ctrl-C in those few milliseconds is lost."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGINT"):
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler not set from Python: cannot be put back
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
