"""One engine: the single-process engine on its own event loop, issuing
the queries the driver leases to it (``scale/leases.py``).

:func:`run_engine` runs one engine's share of a point over an
:class:`EngineLink`, whatever carries it.  The engine loads the dataset
and encodes its bodies itself (the same code, hence the same bytes, as a
single-process run), opens its client, says :class:`~.messages.Ready`, and
waits for :class:`~.messages.Start`.  From ``t0_ns`` it runs the closed
loop (or its Offline block) of ``load/scheduler.py`` at its share of the
concurrency, and every ``BATCH_PERIOD_S`` sends the records that ended,
each with its global index: that batch is also its heartbeat
(``engine_ledger.py`` keeps them in between).  It ends
with its :class:`~.messages.EngineTotals`.

:func:`engine_main` is an engine process on this machine (``local.py``):
its link is a pipe served by two threads, so the event loop never blocks
on it: one reads (leases go to a queue the feed takes from, Stop is handed
to the loop), one writes.  SIGINT is ignored: Ctrl-C reaches the whole
process group, and the driver decides how the point stops.  On a Ray
cluster the link is the actor's (``ray_cluster.py``).
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from types import EllipsisType

import msgspec

from ..clients import client_for
from ..config import RunConfig
from ..engine.audit import ClientTotals, LoopLagProbe
from ..engine.clock import monotonic_ns
from ..engine.loop import loop_runner_for_platform
from ..heap import fix_malloc_thresholds
from ..load.dataset import load_dataset
from ..load.requests import templates_for
from ..load.scheduler import Phase, run_phase
from .engine_ledger import EngineLedger
from .leases import Lease, LeaseChannel, LeasedFeed
from .messages import (
    Ask,
    DriverMessage,
    EngineMessage,
    EngineTotals,
    Failed,
    Grant,
    Ready,
    Start,
    Stop,
    decode_for_engine,
    encode,
)

__all__ = ("BATCH_PERIOD_S", "EngineLink", "EngineSetup", "engine_main", "run_engine")

BATCH_PERIOD_S = 0.1
"""How often an engine sends its finished records (and so its heartbeat)."""


class EngineSetup(msgspec.Struct, frozen=True):
    """What one engine runs: its share of a point.

    ``duration_ns`` stops issuing that long after the start (None: the
    leases end the phase); ``block`` is the lease size it asks for.
    """

    index: int
    config: RunConfig
    endpoints: tuple[str, ...]
    pattern: str
    concurrency: int
    duration_ns: int | None
    block: int


def engine_main(conn: Connection, setup: EngineSetup) -> None:
    """The process entry point (``multiprocessing`` target)."""
    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    link = _PipeLink(conn)
    try:
        loop_runner_for_platform()(run_engine(link, setup))
    except BaseException as error:  # the driver must hear why, never a traceback
        link.send(Failed(f"engine {setup.index}: {type(error).__name__}: {error}"))
    finally:
        link.close()


async def run_engine(link: EngineLink, setup: EngineSetup) -> None:
    """Runs one engine's share of a point over ``link`` (module doc)."""
    fix_malloc_thresholds()  # its own process: the heap flat in the run's length
    config = setup.config
    dataset = load_dataset(config.performance_datasets[0])
    templates = templates_for(dataset, config, salt=config.salt)
    client = client_for(config, setup.endpoints)
    loop = asyncio.get_running_loop()
    link.attach(loop)
    async with client:
        # its connections open before it says it is ready: none of the
        # start's first wave waits for a setup (issue 23)
        samples = setup.concurrency if setup.pattern == "offline" else None
        if (count := config.connections_to_open(setup.concurrency, samples)) > 0:
            await client.warm_up(count)
        link.send(Ready(os.getpid()))
        start = await link.started
        feed = LeasedFeed(templates, link, block=setup.block, first=start.lease)
        phase = Phase(
            setup.pattern,
            concurrency=setup.concurrency,
            duration_ns=setup.duration_ns,
            seed=config.seeds.scheduler,
            source_ends=True,
        )

        cancelling: list[asyncio.Task[object]] = []

        def on_stop(cancel: bool) -> None:
            phase.stop()
            if cancel:
                cancelling.append(loop.create_task(client.cancel_in_flight()))

        link.on_stop = on_stop
        await _until(start.t0_ns)
        ledger = EngineLedger(monotonic_ns(), int(BATCH_PERIOD_S * 1e9))

        def on_issue(sample_index: int, sample_id: str, t_sched: int) -> None:
            ledger.issued(sample_id, feed.last_k)

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(max(0.0, (ledger.due_ns - monotonic_ns()) / 1e9))
                link.send(ledger.batch(monotonic_ns(), phase.issued))

        beat = loop.create_task(heartbeat())
        probe = LoopLagProbe()
        probe.start()
        try:
            await run_phase(client, feed, phase, ledger.ended, path=config.route, on_issue=on_issue)
        finally:
            lags, cpu_ns, cpu_system_ns = probe.stop()
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
        link.send(ledger.batch(monotonic_ns(), phase.issued))
        totals = EngineTotals(
            lags_ns=lags.tobytes(),
            cpu_ns=cpu_ns,
            cpu_system_ns=cpu_system_ns,
            client=ClientTotals.of(client),
            issued=phase.issued,
            lease_waits=feed.waits,
            lease_wait_ns=feed.wait_ns,
        )
    link.send(totals)


async def _until(t0_ns: int) -> None:
    """Waits for ``t0_ns``: a sleep to the last 2 ms, then a spin, so that
    every engine starts within microseconds of the same instant
    (``docs/distributed.md`` §2.3: a time-triggered start)."""
    ahead = t0_ns - monotonic_ns()
    if ahead > 2_000_000:
        await asyncio.sleep((ahead - 2_000_000) / 1e9)
    while monotonic_ns() < t0_ns:
        pass


class EngineLink(LeaseChannel):
    """The engine's end of its connection to the driver, whatever carries
    it: :meth:`send` for the engine's messages, :meth:`dispatch` for the
    driver's (leases go to a queue the feed takes from; Start and Stop are
    handed to the loop).  Subclasses carry the bytes."""

    def __init__(self) -> None:
        self._leases: queue.SimpleQueue[Lease | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started: asyncio.Future[Start]
        self.on_stop: Callable[[bool], object] = self._stop_before_start

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Binds the link to the engine's loop, before any message."""
        self._loop = loop
        self.started = loop.create_future()

    def send(self, message: EngineMessage) -> None:
        raise NotImplementedError

    def ask(self, size: int) -> None:
        self.send(Ask(size))

    def take(self, wait: bool) -> Lease | EllipsisType | None:
        try:
            return self._leases.get(block=wait)
        except queue.Empty:
            return ...

    def dispatch(self, message: DriverMessage) -> None:
        """Acts on one of the driver's messages (any thread)."""
        assert self._loop is not None
        loop = self._loop
        if isinstance(message, Grant):
            self._leases.put(message.lease)
        elif isinstance(message, Start):
            loop.call_soon_threadsafe(_settle, self.started, message)
        elif isinstance(message, Stop):
            self._leases.put(None)  # a feed waiting for a lease ends
            loop.call_soon_threadsafe(self.on_stop, message.cancel)

    def driver_gone(self) -> None:
        """The driver went away (any thread): stop, cancel, and end."""
        assert self._loop is not None
        self._leases.put(None)
        self._loop.call_soon_threadsafe(self._driver_gone)

    def _driver_gone(self) -> None:
        if not self.started.done():
            self.started.set_exception(ConnectionError("the driver went away before the start"))
        else:
            self.on_stop(True)

    def _stop_before_start(self, cancel: bool) -> None:
        if not self.started.done():
            self.started.set_exception(ConnectionError("stopped before the start"))


class _PipeLink(EngineLink):
    """The link over a ``multiprocessing`` pipe (module doc)."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self._conn = conn
        self._out: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write, name="mlpe-engine-out", daemon=True)
        self._writer.start()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        super().attach(loop)
        threading.Thread(target=self._read, name="mlpe-engine-in", daemon=True).start()

    def send(self, message: EngineMessage) -> None:
        self._out.put(encode(message))

    def close(self) -> None:
        self._out.put(None)
        self._writer.join(timeout=10)
        self._conn.close()

    def _write(self) -> None:
        while (frame := self._out.get()) is not None:
            try:
                self._conn.send_bytes(frame)
            except OSError:  # the driver is gone; the reader ends the engine
                return

    def _read(self) -> None:
        while True:
            try:
                message = decode_for_engine(self._conn.recv_bytes())
            except (EOFError, OSError, msgspec.DecodeError):
                self.driver_gone()
                return
            self.dispatch(message)


def _settle(future: asyncio.Future[Start], message: Start) -> None:
    if not future.done():
        future.set_result(message)
