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

The decisions and their state are :class:`~.agentic_schedule.AgenticSchedule`'s,
which holds no loop and no client; :func:`run_agentic` is its driver: it
sends the turns, keeps the think-time timers and hands the records on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple

from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..engine.replicas import AnyClient
from ..wire.events import NO_RESPONSE
from .agentic import AgenticDataset, ClientTurn, Trajectory
from .agentic_schedule import (
    Abort,
    Action,
    AgenticSchedule,
    CancelWait,
    Conversation,
    Issue,
    Wait,
    WindowEnded,
)
from .tallies import ScheduleTallies

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


class AgenticPhase(ScheduleTallies):
    """An agentic phase's settings, counters and window.

    Its tallies (``issued``, ``completed``, ``failed``, ``started``,
    ``finished``, ``t_start``, ``t_window_end``) are those of the schedule
    it runs on, zero (None for the window's end) before.

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
        self.stop_requested = False
        self._schedule: AgenticSchedule | None = None
        self._on_stop: Callable[[], None] | None = None

    def schedule(self, dataset: AgenticDataset, now_ns: int) -> AgenticSchedule:
        """The phase's schedule over ``dataset``, starting at ``now_ns``; the
        phase's tallies are its from then on."""
        self._schedule = AgenticSchedule(
            dataset.trajectories,
            now_ns,
            concurrency=self.concurrency,
            budget=self.budget,
            inject_tool_delay=self.inject_tool_delay,
            salt=self.salt,
            stop_issuing_on_first_user_complete=self.stop_issuing_on_first_user_complete,
            stopped=self.stop_requested,
        )
        return self._schedule

    @property
    def started(self) -> int:
        """Trajectory instances started."""
        return 0 if self._schedule is None else self._schedule.started

    @property
    def finished(self) -> int:
        return 0 if self._schedule is None else self._schedule.finished

    @property
    def t_window_end(self) -> int | None:
        """STOP_PERFORMANCE_TRACKING (None while the window is open)."""
        return None if self._schedule is None else self._schedule.t_window_end

    def stop(self) -> None:
        """Issues nothing more (a signal); what is in flight is awaited."""
        self.stop_requested = True
        if self._on_stop is not None:
            self._on_stop()


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
    schedule = phase.schedule(dataset, monotonic_ns())
    timers: dict[Conversation, asyncio.TimerHandle] = {}  # think times under way

    def perform(actions: list[Action], now: int) -> None:
        """Carries out the schedule's actions, in order (``now``: the time
        the schedule was given)."""
        for action in actions:
            if isinstance(action, Issue):
                send(action)
            elif isinstance(action, Abort):
                record_aborted(action)
            elif isinstance(action, Wait):
                conversation = action.conversation
                timers[conversation] = loop.call_later(
                    (action.due_ns - now) / 1e9, wake, conversation
                )
            elif isinstance(action, CancelWait):
                timers.pop(action.conversation).cancel()
            elif isinstance(action, WindowEnded) and on_window_end is not None:
                on_window_end(action.t_ns)

    def issued(action: Issue | Abort) -> TurnIssued:
        """What the caller hears of a turn: the schedule's, with its sample id."""
        conversation = action.conversation
        turned = TurnIssued(
            client.new_sample_id(),
            action.sample_index,
            conversation.logical_id,
            conversation.source,
            action.turn,
            conversation.salt,
            action.tracked,
        )
        if on_issue is not None:
            on_issue(turned)
        return turned

    def send(action: Issue) -> None:
        conversation = action.conversation
        turned = issued(action)
        client.issue(
            body_of(conversation.source, action.turn, conversation.salt),
            lambda record: done(conversation, turned, record),
            path=path,
            sample_index=turned.sample_index,
            sample_id=turned.sample_id,
            headers={name: conversation.logical_id for name in phase.routing_headers},
        )

    def record_aborted(action: Abort) -> None:
        turned = issued(action)
        on_record(_aborted_record(turned, action, monotonic_ns()), turned)

    def settle() -> None:
        if schedule.done and not finished.done():
            finished.set_result(None)

    def done(conversation: Conversation, turned: TurnIssued, record: RequestRecord) -> None:
        schedule.turn_ended(record.ok)
        on_record(record, turned)
        now = monotonic_ns()
        perform(schedule.resume(conversation, record.error_class, now), now)
        settle()

    def wake(conversation: Conversation) -> None:
        del timers[conversation]
        now = monotonic_ns()
        perform(schedule.woken(conversation, now), now)
        settle()

    def on_stop() -> None:
        now = monotonic_ns()
        perform(schedule.stop(now), now)
        settle()

    phase._on_stop = on_stop
    for _ in range(schedule.opening_slots):
        now = monotonic_ns()
        perform(schedule.start_next(now), now)
    settle()
    await finished


def _aborted_record(turned: TurnIssued, action: Abort, now_ns: int) -> RequestRecord:
    """The failed record of a turn never sent: its conversation's turn
    ``action.failed_turn`` failed first (module doc)."""
    return RequestRecord(
        turned.sample_index,
        turned.sample_id,
        t_sched=now_ns,
        t_issue=now_ns,
        t_end=now_ns,
        response=NO_RESPONSE,
        error_class=ABORTED,
        error_message=(
            f"turn {action.failed_turn} of {turned.conversation_id} failed "
            f"({action.failure}); the rest of the trajectory depends on it"
        ),
    )
