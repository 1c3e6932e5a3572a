"""When to issue: closed-loop concurrency, the Offline burst, Poisson arrivals.

The scheduler decides *when* a request goes and hands records on; it never
sees response bytes (``docs/architecture.md``, data flow).  The decisions
and their state are :class:`~.phase_schedule.PhaseSchedule`'s, which holds
no loop and no client; :func:`run_phase` is its driver, translating between
the event loop, the client and the schedule.  Issuing happens inside the
completion callback of the request that frees a slot, so a closed loop
costs no task and no queue hop per request.

Stopping (reference client §3.2, spec §2.4): a phase issues until its sample
count is reached or its duration has passed, whichever comes first, then
waits for what is in flight.  A duration stops *issuing*; responses already
on their way are awaited, so every issued request yields one record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..engine.replicas import AnyClient
from .phase_schedule import POISSON, PhaseSchedule
from .tallies import ScheduleTallies

__all__ = ("Phase", "RequestSource", "run_phase")


class RequestSource(Protocol):
    """Where request bodies come from (sample order and salt are its job)."""

    def next_request(self) -> tuple[int, bytes] | None:
        """The next sample's index and its request body, salted if need be;
        None when the source has ended (an engine's leases ran out), which
        ends the phase's issuing."""
        ...


class Phase(ScheduleTallies):
    """One phase of a run (warmup or performance) and its stop rule.

    Its tallies (``issued``, ``completed``, ``failed``, ``t_start``,
    ``t_stop_issuing``) are those of the schedule it runs on, zero before.

    Args:
        pattern: "concurrency", "offline" or "poisson".
        concurrency: requests in flight for "concurrency".
        target_qps: mean arrival rate for "poisson".
        max_requests: stop issuing after this many (None: no limit).
        duration_ns: stop issuing this long after the phase started.
        pass_size: with a duration, issue on to the end of the dataset pass
            under way (spec §2.4: at least one full pass, and the issued
            count a whole number of passes); None or 0: stop at once.
        min_requests: with a duration, issue at least this many
            (``--min-passes`` whole passes, spec §1.4).
        seed: the scheduler RNG seed (Poisson inter-arrival times).
        source_ends: the request source ends the phase (returns None); a
            phase needs this, a request count or a duration.
    """

    def __init__(
        self,
        pattern: str,
        *,
        concurrency: int = 1,
        target_qps: float | None = None,
        max_requests: int | None = None,
        duration_ns: int | None = None,
        seed: int = 0,
        pass_size: int | None = None,
        min_requests: int = 0,
        source_ends: bool = False,
    ) -> None:
        if max_requests is None and duration_ns is None and not source_ends:
            raise ValueError("a phase needs a request count, a duration or a source that ends")
        self.pattern = pattern
        self.concurrency = concurrency
        self.target_qps = target_qps
        self.max_requests = max_requests
        self.duration_ns = duration_ns
        self.seed = seed
        self.pass_size = pass_size
        self.min_requests = min_requests
        self.stop_requested = False
        self._schedule: PhaseSchedule | None = None
        self._on_stop: Callable[[], None] | None = None
        #: Called once when the phase stops issuing (its last request is
        #: out; what is in flight is still awaited): a warmup that is not
        #: drained lets the measured phase start then.
        self.on_issuing_ended: Callable[[], object] | None = None

    def schedule(self, now_ns: int) -> PhaseSchedule:
        """The phase's schedule, starting at ``now_ns``; the phase's tallies
        are its from then on."""
        self._schedule = PhaseSchedule(
            self.pattern,
            now_ns,
            concurrency=self.concurrency,
            target_qps=self.target_qps,
            max_requests=self.max_requests,
            duration_ns=self.duration_ns,
            pass_size=self.pass_size,
            min_requests=self.min_requests,
            seed=self.seed,
            stopped=self.stop_requested,
        )
        return self._schedule

    @property
    def t_stop_issuing(self) -> int:
        return 0 if self._schedule is None else self._schedule.t_stop_issuing

    def stop(self) -> None:
        """Stops issuing now (an interrupted run); what is in flight is
        still awaited, so the phase ends when it has come back."""
        self.stop_requested = True
        if self._on_stop is not None:
            self._on_stop()


async def run_phase(
    client: AnyClient,
    source: RequestSource,
    phase: Phase,
    on_record: Callable[[RequestRecord], object],
    *,
    path: str,
    on_issue: Callable[[int, str, int], object] | None = None,
) -> None:
    """Runs one phase to its end: every issued request has its record.

    ``on_issue(sample_index, sample_id, t_sched)`` runs as each request is
    handed to the client; ``on_record`` as each one ends.
    """
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    schedule = phase.schedule(monotonic_ns())
    loop_origin = loop.time()  # the loop's clock at the schedule's start, for Poisson's timers
    announced = False  # phase.on_issuing_ended has run
    next_arrival: asyncio.TimerHandle | None = None  # Poisson's, once armed

    def settle() -> None:
        """Tells the phase when issuing has ended, and ends the run when
        nothing is left in flight either."""
        nonlocal announced
        if schedule.issuing:
            return
        if not announced:
            announced = True
            if phase.on_issuing_ended is not None:
                phase.on_issuing_ended()
        if not schedule.in_flight and not finished.done():
            finished.set_result(None)

    def issue(t_sched: int | None = None) -> None:
        request = source.next_request()
        if request is None:  # the source has ended: so has issuing
            schedule.source_ended(monotonic_ns())
            settle()
            return
        sample_index, body = request
        sample_id = client.new_sample_id()
        now = monotonic_ns()
        schedule.sent(now)
        if on_issue is not None:
            on_issue(sample_index, sample_id, now if t_sched is None else t_sched)
        client.issue(
            body,
            on_done,
            path=path,
            sample_index=sample_index,
            sample_id=sample_id,
            t_sched=t_sched,
        )
        if not schedule.issuing:  # the last one is out
            settle()

    def on_done(record: RequestRecord) -> None:
        schedule.ended(record.ok)
        on_record(record)
        if schedule.refill(monotonic_ns()):
            issue()
        settle()

    def arrive() -> None:
        nonlocal next_arrival
        t_sched = schedule.arrival(monotonic_ns())
        if t_sched is None:
            settle()
            return
        issue(t_sched)
        due = loop_origin + (schedule.next_arrival_ns - schedule.t_start) / 1e9
        next_arrival = loop.call_at(due, arrive)

    def on_stop() -> None:
        schedule.stop(monotonic_ns())
        settle()

    phase._on_stop = on_stop
    while schedule.opening(monotonic_ns()):
        issue()
    schedule.opened(monotonic_ns())
    if schedule.pattern == POISSON:
        loop.call_soon(arrive)
    settle()
    try:
        await finished
    finally:
        if next_arrival is not None:  # armed before issuing ended: nothing for it to do
            next_arrival.cancel()
