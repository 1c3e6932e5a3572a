"""When to issue: closed-loop concurrency, the Offline burst, Poisson arrivals.

The scheduler decides *when* a request goes and hands records on; it never
sees response bytes (``docs/architecture.md``, data flow).  Issuing happens
inside the completion callback of the request that frees a slot, so a
closed loop costs no task and no queue hop per request.

Stopping (reference client §3.2, spec §2.4): a phase issues until its sample
count is reached or its duration has passed, whichever comes first, then
waits for what is in flight.  A duration stops *issuing*; responses already
on their way are awaited, so every issued request yields one record.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from typing import Protocol

from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..engine.replicas import AnyClient

__all__ = ("Phase", "RequestSource", "run_phase")


class RequestSource(Protocol):
    """Where request bodies come from (sample order and salt are its job)."""

    def next_request(self) -> tuple[int, bytes] | None:
        """The next sample's index and its request body, salted if need be;
        None when the source has ended (an engine's leases ran out), which
        ends the phase's issuing."""
        ...


class Phase:
    """One phase of a run (warmup or performance) and its stop rule.

    Args:
        pattern: "concurrency", "offline" or "poisson".
        concurrency: requests in flight for "concurrency".
        target_qps: mean arrival rate for "poisson".
        max_requests: stop issuing after this many (None: no limit).
        duration_ns: stop issuing this long after the phase started.
        pass_size: with a duration, issue on to the end of the dataset pass
            under way (spec §2.4: at least one full pass, and the issued
            count a whole number of passes); None or 0: stop at once.
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
        self.issued = 0
        self.completed = 0
        self.failed = 0
        self.t_start = 0
        self.t_stop_issuing = 0
        self.stop_requested = False
        self._on_stop: Callable[[], None] | None = None
        #: Called once when the phase stops issuing (its last request is
        #: out; what is in flight is still awaited): a warmup that is not
        #: drained lets the measured phase start then.
        self.on_issuing_ended: Callable[[], object] | None = None

    def _issuing_ended(self) -> None:
        self.t_stop_issuing = monotonic_ns()
        if self.on_issuing_ended is not None:
            self.on_issuing_ended()

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
    phase.t_start = monotonic_ns()
    deadline = None if phase.duration_ns is None else phase.t_start + phase.duration_ns
    in_flight = 0
    issuing = True

    def may_issue() -> bool:
        nonlocal issuing
        if issuing and (
            phase.stop_requested
            or (phase.max_requests is not None and phase.issued >= phase.max_requests)
            or (
                deadline is not None
                and monotonic_ns() >= deadline
                # whole passes: a duration ends at the end of a dataset pass
                and (not phase.pass_size or phase.issued % phase.pass_size == 0)
            )
        ):
            issuing = False
            phase._issuing_ended()
        return issuing

    def issue(t_sched: int | None = None) -> None:
        nonlocal in_flight, issuing
        request = source.next_request()
        if request is None:  # the source has ended: so has issuing
            if issuing:
                issuing = False
                phase._issuing_ended()
            return
        sample_index, body = request
        phase.issued += 1
        in_flight += 1
        sample_id = client.new_sample_id()
        if on_issue is not None:
            on_issue(sample_index, sample_id, monotonic_ns() if t_sched is None else t_sched)
        client.issue(
            body,
            on_done,
            path=path,
            sample_index=sample_index,
            sample_id=sample_id,
            t_sched=t_sched,
        )
        if phase.max_requests is not None and phase.issued >= phase.max_requests:
            may_issue()  # the last one is out: issuing ends now, not at the next completion

    def settle_if_drained() -> None:
        if in_flight == 0 and not issuing and not finished.done():
            finished.set_result(None)

    def on_stop() -> None:
        may_issue()
        settle_if_drained()

    phase._on_stop = on_stop

    def on_done(record: RequestRecord) -> None:
        nonlocal in_flight
        in_flight -= 1
        phase.completed += record.ok
        phase.failed += not record.ok
        on_record(record)
        if phase.pattern == "concurrency" and may_issue():
            issue()
        settle_if_drained()

    if phase.pattern == "concurrency":
        for _ in range(phase.concurrency):
            if not may_issue():
                break
            issue()
    elif phase.pattern == "offline":
        # Every sample at once (spec §2.3): reported concurrency = count.
        while may_issue():
            issue()
    elif phase.pattern == "poisson":
        _start_poisson(loop, phase, may_issue, issue, settle_if_drained)
        await finished
        return
    else:
        raise ValueError(f"unknown load pattern {phase.pattern!r}")
    may_issue()
    settle_if_drained()
    await finished


def _start_poisson(
    loop: asyncio.AbstractEventLoop,
    phase: Phase,
    may_issue: Callable[[], bool],
    issue: Callable[[int | None], None],
    settle_if_drained: Callable[[], None],
) -> None:
    """Exponential inter-arrival times from the scheduler seed; each arrival
    keeps its scheduled time, so lateness is measured, not hidden."""
    if not phase.target_qps or phase.target_qps <= 0:
        raise ValueError("poisson needs a positive target_qps")
    rng = random.Random(phase.seed)
    mean_gap_ns = 1e9 / phase.target_qps
    origin_ns = monotonic_ns()
    origin_loop = loop.time()
    next_ns = origin_ns

    def arrive() -> None:
        nonlocal next_ns
        if not may_issue():
            settle_if_drained()
            return
        issue(next_ns)
        next_ns += math.ceil(rng.expovariate(1.0) * mean_gap_ns)
        loop.call_at(origin_loop + (next_ns - origin_ns) / 1e9, arrive)

    loop.call_soon(arrive)
