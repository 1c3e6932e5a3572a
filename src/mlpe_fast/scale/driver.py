"""The driver of a point shared among engines (``--engines N`` on this
machine, ``--ray`` on a cluster; ``docs/distributed.md`` §4.2-4.7).

The driver (the process that runs the point) starts the engines, leases
them the global query sequence (``leases.py``), starts them all at one
instant ``t0``, and merges the record batches they stream back into one
list, as if one engine had made them, with every stamp on the driver's
clock.  Metrics, events and the run folder are then the single-process
code's, run over the merged records: each percentile over all raw samples,
never merged from per-engine figures.

The driver stays out of the per-request path: it answers lease requests
from the threads that read the engines' links, and handles finished
records in batches.  Failures close the point rather than let it run on at
the wrong concurrency: an engine that dies, reports a failure, or sends no
batch (its heartbeat) for ``HEARTBEAT_TIMEOUT_S`` stops the others, and
the point ends with what arrived and a ``failure`` that says why.

How the engines are started and reached is the transport's part
(:class:`EngineGroup` subclasses): processes and pipes on this machine
(``local.py``), actors on a Ray cluster (``ray_cluster.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..artifacts.summary import write_json
from ..config import RunConfig
from ..engine.audit import Audit
from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..engine.record_columns import RecordColumns, as_columns
from ..errors import MlpeError
from ..load.dataset import Dataset
from ..load.requests import IssuedPrompts, Prompt, shuffled_order
from ..load.salt import Salter
from .engine_process import EngineSetup
from .leases import LeaseBook
from .messages import (
    Ask,
    Batch,
    DriverMessage,
    EngineMessage,
    EngineTotals,
    Failed,
    Grant,
    Ready,
    Start,
    Stop,
)
from .split import lease_block, split_concurrency

__all__ = (
    "HEARTBEAT_TIMEOUT_S",
    "READY_TIMEOUT_S",
    "EngineGroup",
    "EngineRun",
    "EngineStartError",
    "audit_engines",
    "lag_p99_ns",
    "run_on_engines",
    "write_engines_report",
)

READY_TIMEOUT_S = 120.0
"""How long the engines may take to start (spawn, dataset, bodies)."""

HEARTBEAT_TIMEOUT_S = 5.0
"""An engine that sends nothing for this long is taken as lost
(``docs/distributed.md`` §4.7: Ray, like the OS, sees a dead process but
not a stuck event loop)."""

START_LEAD_NS = 100_000_000
"""From "all ready" to the common start: room for every engine to receive
its Start and to be waiting (pipe round trips are tens of µs)."""

STOP_GRACE_S = 10.0
"""After a failure, how long the other engines get to return their records."""


class EngineStartError(MlpeError, RuntimeError):
    """The engines could not be started (the point is not measured)."""


class EngineRun(msgspec.Struct):
    """What the engines of one point produced, merged.

    ``records`` come in arrival order at the driver; ``engine_of[i]`` and
    ``keys[i]`` are the engine and the global query index of
    ``records[i]``.  ``totals[e]`` is None for an engine that never sent
    its totals (it was lost).  ``failure`` says why the point was cut short.
    """

    t0_ns: int
    concurrency: tuple[int, ...]
    records: Sequence[RequestRecord]
    engine_of: array[int]
    keys: array[int]
    totals: list[EngineTotals | None]
    pids: list[int]
    granted: int
    driver_cpu_ns: int
    driver_cpu_system_ns: int
    failure: str | None = None
    files: dict[str, Any] = msgspec.field(default_factory=dict)
    verdict: str | None = None

    def first_issues(self) -> list[int | None]:
        """Each engine's first issue stamp (None: it issued nothing)."""
        t_issue = as_columns(self.records).column("t_issue")
        engine_of = np.array(self.engine_of, dtype=np.int64)
        return [
            int(t_issue[mine].min()) if (mine := engine_of == e).any() else None
            for e in range(len(self.concurrency))
        ]

    def concurrency_held(self) -> list[float]:
        """Each engine's mean number of requests in flight from ``t0`` to the
        point's last completion (Little's law: the time its requests were in
        flight, summed, over that span); its share if it held it."""
        columns = as_columns(self.records)
        t_end = columns.column("t_end")
        in_flight = t_end - columns.column("t_issue")
        engine_of = np.array(self.engine_of, dtype=np.int64)
        held = [int(in_flight[engine_of == e].sum()) for e in range(len(self.concurrency))]
        end = max(self.t0_ns, int(t_end.max())) if len(t_end) else self.t0_ns
        span = end - self.t0_ns
        return [h / span if span > 0 else 0.0 for h in held]

    def duplicate_keys(self) -> int:
        """Global query indices that came back more than once (a lease
        fault: it must be 0).  Counted on a sorted copy, 8 bytes a key: a
        set of the keys held some 70 bytes each at the point's end, 70 MB
        at 1,000,000 requests (issue 23)."""
        ordered = np.sort(np.frombuffer(self.keys, dtype=np.int64))
        return int(np.count_nonzero(ordered[1:] == ordered[:-1]))

    def report(self) -> dict[str, Any]:
        """``distributed/engines.json``: the split, the leases, the start
        and each engine's own figures."""
        first = self.first_issues()
        held = self.concurrency_held()
        per_engine = []
        for e, share in enumerate(self.concurrency):
            totals = self.totals[e]
            lag_p99 = None if totals is None else lag_p99_ns(totals.lags_ns)
            start = first[e]
            per_engine.append(
                {
                    "engine": e,
                    "pid": self.pids[e],
                    "concurrency": share,
                    "concurrency_held": round(held[e], 3),
                    "records": sum(1 for x in self.engine_of if x == e),
                    "issued": None if totals is None else totals.issued,
                    "first_issue_after_t0_us": (
                        None if start is None else (start - self.t0_ns) / 1e3
                    ),
                    "cpu_s": None if totals is None else totals.cpu_ns / 1e9,
                    "loop_lag_p99_ms": None if lag_p99 is None else lag_p99 / 1e6,
                    "connections_opened": (
                        None if totals is None else totals.client.connections_opened
                    ),
                    "lease_waits": None if totals is None else totals.lease_waits,
                    "lease_wait_ms": None if totals is None else totals.lease_wait_ns / 1e6,
                    "lost": totals is None,
                }
            )
        return {
            "engines": len(self.concurrency),
            "concurrency": list(self.concurrency),
            "t0_ns": self.t0_ns,
            "leases": {
                "granted": self.granted,
                "recorded": len(self.keys),
                "duplicates": self.duplicate_keys(),
            },
            "start_skew_us": self.start_skew_ns() / 1e3,
            "driver_cpu_s": self.driver_cpu_ns / 1e9,
            "verdict": self.verdict,
            "per_engine": per_engine,
            "failure": self.failure,
        }

    def start_skew_ns(self) -> int:
        """The spread of the engines' first issues: the latest minus the
        earliest (0 when fewer than two issued); ``docs/distributed.md``
        §4.5, the skew of a time-triggered start."""
        stamps = [t for t in self.first_issues() if t is not None]
        return max(stamps) - min(stamps) if len(stamps) > 1 else 0


def lag_p99_ns(lags: bytes) -> int | None:
    """The p99 (nearest rank, lower) of loop-lag samples sent as an
    ``array('q')``'s bytes; None without samples."""
    ordered = sorted(array("q", lags))
    return ordered[int(0.99 * (len(ordered) - 1))] if ordered else None


async def run_on_engines(
    config: RunConfig,
    endpoints: tuple[str, ...],
    dataset: Dataset,
    *,
    engines: int,
    max_requests: int | None,
    on_record: Callable[[RequestRecord, Prompt], object],
    on_start: Callable[[int], object] = lambda t0: None,
    on_group: Callable[[EngineGroup], object] = lambda group: None,
    make_group: Callable[[list[EngineSetup], LeaseBook], EngineGroup],
    salter: Salter | None = None,
) -> EngineRun:
    """Runs the performance phase of ``config`` on ``engines`` processes.

    ``salter``: the salt stream to continue (the warmup's), else the
    performance seed's own.

    ``on_record(record, prompt)`` runs on the loop for each record as its
    batch arrives, ``on_start(t0)`` once the start instant is fixed, and
    ``on_group`` with the running group (its ``stop()`` ends the point as
    a signal does).  ``make_group`` starts the engines: processes on this
    machine (``local.py``) or actors on a Ray cluster (``ray_cluster.py``).

    Raises:
        EngineStartError: an engine failed or timed out before the start.
    """
    offline = config.load_pattern == "offline"
    if offline:
        if max_requests is None:
            raise ValueError("an Offline point has a query count")
        shares = tuple(1 for _ in range(engines))
        blocks = [len(part) for part in _blocks(max_requests, engines)]
    else:
        shares = split_concurrency(config.concurrency, engines)
        blocks = [lease_block(share) for share in shares]
    seeds = config.seeds
    book = LeaseBook(
        shuffled_order(len(dataset), seeds.sample_index),
        (salter or Salter(seeds.salt_seed)) if config.salt else None,
        limit=max_requests,
        sharers=1 if offline else engines,
    )
    # With whole passes or a minimum of passes the driver ends the duration
    # by closing the book (spec §2.4, §1.4), so the engines drain their leases.
    book_ends = config.duration_s is not None and (config.whole_passes or config.min_passes > 0)
    duration_ns = None if config.duration_s is None else int(config.duration_s * 1e9)
    setups = [
        EngineSetup(
            index=e,
            config=config,
            endpoints=endpoints,
            pattern=config.load_pattern,
            concurrency=shares[e],
            duration_ns=None if book_ends else duration_ns,
            block=blocks[e],
        )
        for e in range(engines)
    ]
    # Before any engine starts: a salt that cannot be placed is refused here.
    prompts = IssuedPrompts.for_run(dataset, config, salt=config.salt)
    group = make_group(setups, book)
    on_group(group)
    cpu_before = os.times()
    t0 = monotonic_ns()
    try:
        if not await group.ready():
            return _stopped_before_start(t0, shares, group, book)
        t0 = monotonic_ns() + START_LEAD_NS
        on_start(t0)
        loop = asyncio.get_running_loop()
        if book_ends and duration_ns is not None:
            loop.call_later(
                (t0 + duration_ns - monotonic_ns()) / 1e9,
                book.close,
                len(dataset) if config.whole_passes else None,
                config.min_passes * len(dataset),
            )
        if config.max_duration_s is not None:  # --max-duration: a cap on issuing
            loop.call_later((t0 - monotonic_ns()) / 1e9 + config.max_duration_s, group.stop_issuing)

        def merge(engine: int, batch: Batch) -> None:
            for k, record in zip(batch.keys, batch.records, strict=True):
                index, salt = book.query(k)
                on_record(record, prompts(index, salt))

        await group.run(t0, merge)
    finally:
        group.close()
    cpu_after = os.times()
    run = EngineRun(
        t0_ns=t0,
        concurrency=shares,
        records=group.records,
        engine_of=group.engine_of,
        keys=group.keys,
        totals=group.totals,
        pids=group.pids,
        granted=book.granted,
        driver_cpu_ns=int(
            (cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system) * 1e9
        ),
        driver_cpu_system_ns=int((cpu_after.system - cpu_before.system) * 1e9),
        failure=group.failure,
    )
    run.files, run.verdict = group.extra_report(run)
    return run


def _stopped_before_start(
    t0: int, shares: tuple[int, ...], group: EngineGroup, book: LeaseBook
) -> EngineRun:
    """The run of a point stopped before its engines started: no records."""
    return EngineRun(
        t0_ns=t0,
        concurrency=shares,
        records=RecordColumns(),
        engine_of=array("q"),
        keys=array("q"),
        totals=group.totals,
        pids=group.pids,
        granted=book.granted,
        driver_cpu_ns=0,
        driver_cpu_system_ns=0,
    )


def _blocks(count: int, engines: int) -> list[range]:
    """``range(count)`` in ``engines`` contiguous parts, sizes differing by
    at most one (the Offline split)."""
    sizes = split_concurrency(count, engines) if count >= engines else (count,)
    parts, start = [], 0
    for size in sizes:
        parts.append(range(start, start + size))
        start += size
    return parts


class EngineGroup:
    """Running engines and the driver's end of their links, whatever the
    transport.  A subclass starts the engines and carries the bytes: it
    calls :meth:`_received` (or :meth:`_lost_from_thread`) from the threads
    that read its engines, and provides :meth:`_send`, :meth:`_kill` and
    :meth:`_shutdown`.  A transport whose engines run on other clocks maps
    their stamps with :meth:`to_driver` and :meth:`start_instant`.

    ``pids`` are the engines' process ids (for the report), filled in by
    the subclass.
    """

    def __init__(self, setups: list[EngineSetup], book: LeaseBook) -> None:
        self._setups = setups
        self._book = book
        self._loop = asyncio.get_running_loop()
        self.pids: list[int] = [0] * len(setups)
        # Compact columns (issue 23): the texts were counted and logged by
        # the handler of each batch (point/performance.py).
        self.records = RecordColumns()
        self.engine_of = array("q")
        self.keys = array("q")
        self.totals: list[EngineTotals | None] = [None] * len(setups)
        self.failure: str | None = None
        self._on_batch: Callable[[int, Batch], None] | None = None
        self._ready = [False] * len(setups)
        self._ended = [False] * len(setups)  # totals received, or lost
        self._last_heard = [monotonic_ns()] * len(setups)
        self._all_ready: asyncio.Future[None] = self._loop.create_future()
        self._all_ended: asyncio.Future[None] = self._loop.create_future()
        self._stopping = False

    # -- what a transport provides ----------------------------------------------

    def _send(self, engine: int, message: DriverMessage) -> None:
        """Delivers ``message`` to ``engine`` (any thread); a failure to
        deliver is seen by the reading side, which reports the engine lost."""
        raise NotImplementedError

    def _kill(self, engine: int) -> None:
        """Ends ``engine`` at once (it is lost)."""
        raise NotImplementedError

    def _shutdown(self) -> None:
        """Waits for the engines to end (killing the late) and frees the links."""
        raise NotImplementedError

    def extra_report(self, run: EngineRun) -> tuple[dict[str, Any], str | None]:
        """More files for ``distributed/`` (name -> JSON content) and the
        point's verdict, where the transport has them (none here)."""
        return {}, None

    def to_driver(self, engine: int, record: RequestRecord) -> RequestRecord:
        """``record`` with its stamps on the driver's clock (same clock here)."""
        return record

    def start_instant(self, engine: int, t0: int) -> int:
        """The driver's start instant ``t0`` on ``engine``'s clock."""
        return t0

    # -- the point ------------------------------------------------------------

    async def ready(self) -> bool:
        """Waits for every engine's Ready; False when the point was stopped
        (a signal) before they all were: there is nothing to start."""
        try:
            await asyncio.wait_for(asyncio.shield(self._all_ready), READY_TIMEOUT_S)
        except TimeoutError:
            late = [e for e, ready in enumerate(self._ready) if not ready]
            raise EngineStartError(
                f"engines {late} were not ready within {READY_TIMEOUT_S:.0f} s"
            ) from None
        return not self._stopping

    async def run(self, t0: int, on_batch: Callable[[int, Batch], None]) -> None:
        self._on_batch = on_batch
        for e, setup in enumerate(self._setups):
            self._send(e, Start(self.start_instant(e, t0), self._book.grant(setup.block)))
        watch = self._loop.create_task(self._watch())
        try:
            await self._all_ended
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)

    def stop(self) -> None:
        """Stops issuing everywhere and cancels what is in flight (a signal,
        or a lost engine); every engine still returns its records."""
        if self._stopping:
            return
        self._stopping = True
        self._book.close()
        for e in range(len(self._setups)):
            if not self._ended[e]:
                self._send(e, Stop(cancel=True))

    def stop_issuing(self) -> None:
        """Stops issuing everywhere, awaiting what is in flight (the
        point's ``--max-duration``)."""
        if self._stopping:
            return
        self._book.close()
        for e in range(len(self._setups)):
            if not self._ended[e]:
                self._send(e, Stop(cancel=False))

    def close(self) -> None:
        if not all(self._ended):
            self.stop()
        self._shutdown()

    # -- messages -------------------------------------------------------------

    def _received(self, engine: int, message: EngineMessage) -> None:
        """One of ``engine``'s messages, from a reading thread.  Leases are
        granted right here (the loop may be busy); the rest goes to the loop."""
        if isinstance(message, Ask):
            lease = None if self._stopping else self._book.grant(message.size)
            self._send(engine, Grant(lease))
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: the point is over
            self._loop.call_soon_threadsafe(self._handle, engine, message)

    def _lost_from_thread(self, engine: int, reason: str) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._lost, engine, reason)

    def _handle(self, engine: int, message: EngineMessage) -> None:
        self._last_heard[engine] = monotonic_ns()
        if isinstance(message, Batch):
            records = [self.to_driver(engine, record) for record in message.records]
            message = msgspec.structs.replace(message, records=records)
            for k, record in zip(message.keys, records, strict=True):
                self.records.append(record)
                self.engine_of.append(engine)
                self.keys.append(k)
            if self._on_batch is not None:
                self._on_batch(engine, message)
        elif isinstance(message, EngineTotals):
            self.totals[engine] = message
            self._end(engine)
        elif isinstance(message, Ready):
            self._ready[engine] = True
            if all(self._ready) and not self._all_ready.done():
                self._all_ready.set_result(None)
        elif isinstance(message, Failed):
            self._lost(engine, message.message)

    def _lost(self, engine: int, reason: str) -> None:
        if self._ended[engine]:
            return
        if self._stopping and self._on_batch is None:
            # Stopped (a signal) before the start: engines end as told.
            self._end(engine)
            if all(self._ended) and not self._all_ready.done():
                self._all_ready.set_result(None)
            return
        if not self._all_ready.done():
            self._all_ready.set_exception(EngineStartError(reason))
            self._all_ready.exception()  # retrieved: the start reports it
        if self.failure is None:
            self.failure = reason
            self._loop.call_later(STOP_GRACE_S, self._give_up)
        self._kill(engine)
        self._end(engine)
        self.stop()

    def _end(self, engine: int) -> None:
        self._ended[engine] = True
        if all(self._ended) and not self._all_ended.done():
            self._all_ended.set_result(None)

    async def _watch(self) -> None:
        """Heartbeats: an engine silent for ``HEARTBEAT_TIMEOUT_S`` is lost."""
        limit = int(HEARTBEAT_TIMEOUT_S * 1e9)
        while True:
            await asyncio.sleep(0.25)
            now = monotonic_ns()
            for e, heard in enumerate(self._last_heard):
                if not self._ended[e] and now - heard > limit:
                    self._lost(
                        e,
                        f"engine {e} sent nothing for {(now - heard) / 1e9:.1f} s "
                        "(its event loop is stuck or its process is stopped)",
                    )

    def _give_up(self) -> None:
        for e in range(len(self._setups)):
            if not self._ended[e]:
                self._lost(e, f"engine {e} did not stop within {STOP_GRACE_S:.0f} s")


def audit_engines(audit: Audit, run: EngineRun) -> Audit:
    """``audit`` (made over the merged records) with the engines' own
    figures: the split, the start skew, lease stalls and duplicates."""
    done = [t for t in run.totals if t is not None]
    return msgspec.structs.replace(
        audit,
        engines=len(run.concurrency),
        engine_concurrency=list(run.concurrency),
        start_skew_ms=run.start_skew_ns() / 1e6,
        lease_waits=sum(t.lease_waits for t in done),
        lease_wait_ms=sum(t.lease_wait_ns for t in done) / 1e6,
        duplicate_queries=run.duplicate_keys(),
        verdict=run.verdict or "",
    )


def write_engines_report(folder: Path, run: EngineRun) -> None:
    """``distributed/engines.json`` beside the ordinary run folder, and
    ``distributed/INCOMPLETE`` (the reason, one line) when the point was
    cut short (``docs/distributed.md`` §4.6-4.7): the top level stays the
    reference layout, so the checker and ``analyze`` see one run."""
    where = folder / "distributed"
    where.mkdir(parents=True, exist_ok=True)
    write_json(where / "engines.json", run.report(), encoder="stdlib")
    for name, content in run.files.items():
        write_json(where / name, content, encoder="stdlib")
    if run.failure is not None:
        (where / "INCOMPLETE").write_text(run.failure + "\n", encoding="utf-8")
