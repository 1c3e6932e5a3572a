"""When to issue an agentic run's turns (``--load-pattern agentic_inference``;
``docs/agentic.md`` §2).

* **Concurrency is active trajectories.** At most ``concurrency``
  trajectories are active; each has at most one turn in flight, or waits
  out its recorded ``delay_seconds`` when ``inject_tool_delay`` is on.  The
  next turn goes from inside the completion callback of the previous one
  (no task, no queue hop), and a finished trajectory's slot starts the next
  trajectory at once.
* **Which trajectories.** Trajectory instance k (in start order) replays
  source ``k mod N`` in file order, repeat ``k div N + 1`` with the logical
  id ``<id>__repeat_<r>`` after the first pass; ``budget`` instances in
  all.  No RNG: the seeds do not touch agentic issuing.
* **The window.** Tracking starts with the phase and stops the first time a
  trajectory ends while no instance is left to start (a finished slot that
  cannot be refilled).  A turn counts when it was *issued* while tracking
  was on.  With ``stop_issuing_on_first_user_complete`` (debug) the run
  then drops its active trajectories; otherwise (official) they run to
  their end, outside the window.
* **Failures.** A turn that fails (an error response, a broken stream, its
  timeout: the client's total timeout is the turn timeout) ends its
  trajectory: each of its remaining turns is issued as a failed record
  (``TurnAbortedByPriorFailure``), so every turn of a started trajectory
  has one record and ``completed + failed == issued`` holds.  A stop (a
  signal) issues nothing more and awaits what is in flight; turns never
  issued get no record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple

from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..engine.replicas import AnyClient
from ..wire.events import NO_RESPONSE
from .agentic import AgenticDataset, ClientTurn, Trajectory, instance_of, salt_markers

__all__ = ("ABORTED", "AgenticPhase", "TurnIssued", "run_agentic")

ABORTED = "TurnAbortedByPriorFailure"
"""The error class of the turns a failed turn leaves unissued (the reference's)."""


class TurnIssued(NamedTuple):
    """What the phase tells its caller about each turn it issues."""

    sample_id: str
    sample_index: int  # the turn's index among the dataset's client turns
    conversation_id: str  # the logical id (``__repeat_<r>`` after the first pass)
    trajectory: Trajectory
    turn: ClientTurn
    salt: tuple[str, str] | None
    tracked: bool  # issued inside the performance window


class AgenticPhase:
    """An agentic phase's settings, counters and window.

    Args:
        concurrency: active trajectories at most.
        budget: trajectory instances to start (None: one pass of the file).
        inject_tool_delay: wait each client turn's ``delay_seconds``.
        salt: mark every request's system prompt (``agentic.py``).
        stop_issuing_on_first_user_complete: end active trajectories at the
            window's end (debug; the official runs keep them going).
        routing_headers: header names that carry the logical conversation id.
    """

    def __init__(
        self,
        concurrency: int,
        *,
        budget: int | None = None,
        inject_tool_delay: bool = True,
        salt: bool = True,
        stop_issuing_on_first_user_complete: bool = False,
        routing_headers: tuple[str, ...] = ("X-Session-ID",),
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"an agentic phase needs concurrency >= 1, not {concurrency}")
        if budget is not None and budget < 1:
            raise ValueError(f"an agentic phase starts at least one trajectory, not {budget}")
        self.concurrency = concurrency
        self.budget = budget
        self.inject_tool_delay = inject_tool_delay
        self.salt = salt
        self.stop_issuing_on_first_user_complete = stop_issuing_on_first_user_complete
        self.routing_headers = routing_headers
        self.issued = 0
        self.completed = 0
        self.failed = 0
        self.started = 0  # trajectory instances started
        self.finished = 0
        self.t_start = 0
        self.t_window_end: int | None = None  # STOP_PERFORMANCE_TRACKING
        self.stop_requested = False
        self._on_stop: Callable[[], None] | None = None

    def stop(self) -> None:
        """Issues nothing more (a signal); what is in flight is awaited."""
        self.stop_requested = True
        if self._on_stop is not None:
            self._on_stop()


class _Active:
    """One active trajectory instance: what it replays and where it is."""

    __slots__ = ("cursor", "first_index", "logical_id", "salt", "source", "timer")

    def __init__(
        self,
        source: Trajectory,
        first_index: int,
        logical_id: str,
        salt: tuple[str, str] | None,
    ) -> None:
        self.source = source
        self.first_index = first_index  # the dataset-wide index of its first client turn
        self.logical_id = logical_id
        self.salt = salt
        self.cursor = 0
        self.timer: asyncio.TimerHandle | None = None


async def run_agentic(
    client: AnyClient,
    dataset: AgenticDataset,
    phase: AgenticPhase,
    body_of: Callable[[Trajectory, ClientTurn, tuple[str, str] | None], bytes],
    on_record: Callable[[RequestRecord, TurnIssued], object],
    *,
    path: str,
    on_issue: Callable[[TurnIssued], object] | None = None,
    on_window_end: Callable[[int], object] | None = None,
) -> None:
    """Runs an agentic phase to its end (module doc): every issued turn has
    its record, passed to ``on_record`` with what was issued."""
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    trajectories = dataset.trajectories
    budget = phase.budget if phase.budget is not None else len(trajectories)
    first_index = []  # the dataset-wide index of each trajectory's first client turn
    count = 0
    for trajectory in trajectories:
        first_index.append(count)
        count += len(trajectory.turns)
    active: set[_Active] = set()
    in_flight = 0
    phase.t_start = monotonic_ns()

    def window_open() -> bool:
        return phase.t_window_end is None

    def end_window() -> None:
        if phase.t_window_end is None:
            phase.t_window_end = monotonic_ns()
            if on_window_end is not None:
                on_window_end(phase.t_window_end)
            if phase.stop_issuing_on_first_user_complete:
                for trajectory in list(active):
                    drop(trajectory)

    def start_next() -> None:
        """Fills a slot with the next instance, if any is left."""
        if phase.stop_requested or phase.started >= budget:
            return
        source_index, repeat, suffix = instance_of(phase.started, len(trajectories))
        phase.started += 1
        source = trajectories[source_index]
        logical = source.conversation_id + (suffix or "")
        salt = salt_markers(repeat, source.conversation_id) if phase.salt else None
        instance = _Active(source, first_index[source_index], logical, salt)
        active.add(instance)
        advance(instance)

    def advance(instance: _Active) -> None:
        """Issues the instance's next turn (after its delay), or ends it."""
        if instance.cursor >= len(instance.source.turns):
            finish(instance)
            return
        if phase.stop_requested:
            drop(instance)
            return
        delay = instance.source.turns[instance.cursor].delay_s
        if phase.inject_tool_delay and delay > 0:
            instance.timer = loop.call_later(delay, issue, instance)
        else:
            issue(instance)

    def issue(instance: _Active) -> None:
        nonlocal in_flight
        instance.timer = None
        if phase.stop_requested or instance not in active:
            drop(instance)
            return
        turned = take_turn(instance)
        in_flight += 1
        client.issue(
            body_of(instance.source, turned.turn, instance.salt),
            lambda record: done(instance, turned, record),
            path=path,
            sample_index=turned.sample_index,
            sample_id=turned.sample_id,
            headers={name: instance.logical_id for name in phase.routing_headers},
        )

    def take_turn(instance: _Active) -> TurnIssued:
        """The instance's next turn, counted as issued."""
        turned = TurnIssued(
            client.new_sample_id(),
            instance.first_index + instance.cursor,
            instance.logical_id,
            instance.source,
            instance.source.turns[instance.cursor],
            instance.salt,
            window_open(),
        )
        instance.cursor += 1
        phase.issued += 1
        if on_issue is not None:
            on_issue(turned)
        return turned

    def done(instance: _Active, turned: TurnIssued, record: RequestRecord) -> None:
        nonlocal in_flight
        in_flight -= 1
        phase.completed += record.ok
        phase.failed += not record.ok
        on_record(record, turned)
        if instance in active:
            if record.ok:
                advance(instance)
            else:
                abort(instance, turned, record)
        settle_if_drained()

    def abort(instance: _Active, failed: TurnIssued, failure: RequestRecord) -> None:
        """The failed turn's trajectory ends: its remaining turns are
        issued as failed records (module doc)."""
        while instance.cursor < len(instance.source.turns):
            turned = take_turn(instance)
            now = monotonic_ns()
            phase.failed += 1
            on_record(
                RequestRecord(
                    turned.sample_index,
                    turned.sample_id,
                    t_sched=now,
                    t_issue=now,
                    t_end=now,
                    response=NO_RESPONSE,
                    error_class=ABORTED,
                    error_message=(
                        f"turn {failed.turn.turn} of {instance.logical_id} failed "
                        f"({failure.error_class}); the rest of the trajectory depends on it"
                    ),
                ),
                turned,
            )
        finish(instance)

    def finish(instance: _Active) -> None:
        active.discard(instance)
        phase.finished += 1
        if phase.started >= budget:  # a slot that cannot be refilled
            end_window()
        start_next()

    def drop(instance: _Active) -> None:
        """Ends an instance without issuing the rest (a stop, or the debug
        window end)."""
        if instance.timer is not None:
            instance.timer.cancel()
            instance.timer = None
        active.discard(instance)

    def settle_if_drained() -> None:
        if finished.done() or in_flight or any(a.timer for a in active):
            return
        if not active or phase.stop_requested:
            finished.set_result(None)

    def on_stop() -> None:
        for instance in list(active):
            if instance.timer is not None:
                drop(instance)
        settle_if_drained()

    phase._on_stop = on_stop
    for _ in range(min(phase.concurrency, budget)):
        start_next()
    settle_if_drained()
    await finished
