"""When an agentic run's turns go, as state without a loop or a client
(sans-IO; the rules are ``load/agentic_scheduler.py``'s module doc and
``docs/agentic.md`` §2).

:class:`AgenticSchedule` holds the conversations under way (each one's next
turn, whether it waits out a think time), the tallies, the window and the
stop.  It never reads a clock: its events take ``now_ns`` from the caller
(a slot opens, a turn has come back, a think time is over, a stop), and
each returns the actions to perform, in order:

* :class:`Issue` -- send this turn now;
* :class:`Abort` -- record this turn as failed without sending it (a
  previous turn of its conversation failed);
* :class:`Wait` -- call :meth:`AgenticSchedule.woken` for this
  conversation at ``due_ns`` (its turn's recorded think time);
* :class:`CancelWait` -- that call will not be wanted;
* :class:`WindowEnded` -- the performance window ended at ``t_ns``.

An :class:`Issue` or a :class:`Wait` is always its batch's last action:
the state is settled when the driver sends, so a client that ends a
request inside its ``issue`` call (a nested event) finds it as a direct
call would.  ``run_agentic`` (``load/agentic_scheduler.py``) is the driver.
"""

from __future__ import annotations

import math
from typing import TypeAlias

import msgspec

from .agentic import ClientTurn, Trajectory, instance_of, salt_markers

__all__ = (
    "Abort",
    "Action",
    "AgenticSchedule",
    "CancelWait",
    "Conversation",
    "Issue",
    "Wait",
    "WindowEnded",
)


class Conversation:
    """One trajectory instance under way: what it replays and where it is."""

    __slots__ = ("cursor", "first_index", "logical_id", "salt", "source", "waiting")

    def __init__(
        self,
        source: Trajectory,
        first_index: int,
        logical_id: str,
        salt: tuple[str, str] | None,
    ) -> None:
        self.source = source
        self.first_index = first_index  # the dataset-wide index of its first client turn
        self.logical_id = logical_id  # ``<id>__repeat_<r>`` after the first pass
        self.salt = salt
        self.cursor = 0  # its next client turn
        self.waiting = False  # its next turn waits out a think time

    def __repr__(self) -> str:
        return f"Conversation({self.logical_id!r}, cursor={self.cursor})"


# The actions are Structs for their cost: one is made per turn on the issue
# path (a NamedTuple's is several times slower).  gc=False: nothing an action
# holds refers back to it, so it is never part of a cycle.


class Issue(msgspec.Struct, frozen=True, gc=False):
    """Send this turn now (counted as issued and in flight)."""

    conversation: Conversation
    sample_index: int  # the turn's index among the dataset's client turns
    turn: ClientTurn
    tracked: bool  # taken inside the performance window


class Abort(msgspec.Struct, frozen=True, gc=False):
    """Record this turn as failed without sending it (counted as issued and
    failed): a previous turn of its conversation failed."""

    conversation: Conversation
    sample_index: int
    turn: ClientTurn
    tracked: bool
    failed_turn: int  # the row number of the conversation's turn that failed
    failure: str  # that turn's error class


class Wait(msgspec.Struct, frozen=True, gc=False):
    """Call :meth:`AgenticSchedule.woken` for the conversation at ``due_ns``."""

    conversation: Conversation
    due_ns: int


class CancelWait(msgspec.Struct, frozen=True, gc=False):
    """The conversation's pending :class:`Wait` is not wanted any more."""

    conversation: Conversation


class WindowEnded(msgspec.Struct, frozen=True, gc=False):
    """The performance window ended at ``t_ns`` (STOP_PERFORMANCE_TRACKING)."""

    t_ns: int


Action: TypeAlias = Issue | Abort | Wait | CancelWait | WindowEnded


class AgenticSchedule:
    """The state of an agentic phase from its start (module doc).

    Args:
        trajectories: the dataset's, in file order.
        now_ns: the phase's start.
        concurrency: conversations under way at most.
        budget: conversations to start (None: one pass of the file).
        inject_tool_delay: wait each client turn's ``delay_s`` before it.
        salt: give each conversation its salt markers (``agentic.py``).
        stop_issuing_on_first_user_complete: drop the conversations under
            way when the window ends (debug; official runs finish them).
        stopped: the phase was stopped before it started.
    """

    def __init__(
        self,
        trajectories: tuple[Trajectory, ...],
        now_ns: int,
        *,
        concurrency: int,
        budget: int | None = None,
        inject_tool_delay: bool = True,
        salt: bool = True,
        stop_issuing_on_first_user_complete: bool = False,
        stopped: bool = False,
    ) -> None:
        self._trajectories = trajectories
        self.budget = len(trajectories) if budget is None else budget
        self._first_index = []  # the dataset-wide index of each trajectory's first client turn
        count = 0
        for trajectory in trajectories:
            self._first_index.append(count)
            count += len(trajectory.turns)
        self._inject_tool_delay = inject_tool_delay
        self._salt = salt
        self._drop_at_window_end = stop_issuing_on_first_user_complete
        #: How many times the opening calls :meth:`start_next`.
        self.opening_slots = min(concurrency, self.budget)
        # A dict for its order: a stop or a window end drops in start order.
        self._active: dict[Conversation, None] = {}
        self.stopped = stopped
        self.t_start = now_ns
        self.t_window_end: int | None = None  # STOP_PERFORMANCE_TRACKING
        self.started = 0
        self.finished = 0
        self.issued = 0
        self.in_flight = 0
        self.waiting = 0  # conversations waiting out a think time
        self.completed = 0
        self.failed = 0

    @property
    def active(self) -> tuple[Conversation, ...]:
        """The conversations under way, in start order."""
        return tuple(self._active)

    @property
    def done(self) -> bool:
        """Nothing in flight or waiting, and nothing left to go on: every
        conversation has finished, or a stop holds the rest."""
        return not self.in_flight and not self.waiting and (not self._active or self.stopped)

    def start_next(self, now_ns: int) -> list[Action]:
        """Fills a slot with the next instance, if one is left (none after a
        stop): instance k replays trajectory ``k mod N`` (module doc)."""
        actions: list[Action] = []
        self._start_next(now_ns, actions)
        return actions

    def turn_ended(self, ok: bool) -> None:
        """A turn has come back, complete (``ok``) or failed: counted, before
        its record is handed on; :meth:`resume` then moves its conversation."""
        self.in_flight -= 1
        self.completed += ok
        self.failed += not ok

    def resume(self, conversation: Conversation, failure: str | None, now_ns: int) -> list[Action]:
        """What follows a turn of ``conversation`` that ended with error
        class ``failure`` (None: complete): its next turn, its end (and the
        next instance), or, after a failure, its remaining turns aborted."""
        actions: list[Action] = []
        if conversation in self._active:  # not dropped while the turn was out
            if failure is None:
                self._advance(conversation, now_ns, actions)
            else:
                self._abort(conversation, failure, now_ns, actions)
        return actions

    def woken(self, conversation: Conversation, now_ns: int) -> list[Action]:
        """``conversation``'s think time is over: its turn goes now."""
        if conversation.waiting:
            conversation.waiting = False
            self.waiting -= 1
        actions: list[Action] = []
        if self.stopped or conversation not in self._active:
            self._drop(conversation, actions)
        else:
            self._issue(conversation, actions)
        return actions

    def stop(self, now_ns: int) -> list[Action]:
        """Issues nothing more (a signal): the conversations waiting out a
        think time end now; the turns in flight are awaited."""
        self.stopped = True
        actions: list[Action] = []
        for conversation in list(self._active):
            if conversation.waiting:
                self._drop(conversation, actions)
        return actions

    # -- the transitions ------------------------------------------------------

    def _start_next(self, now_ns: int, actions: list[Action]) -> None:
        if self.stopped or self.started >= self.budget:
            return
        source_index, repeat, suffix = instance_of(self.started, len(self._trajectories))
        self.started += 1
        source = self._trajectories[source_index]
        conversation = Conversation(
            source,
            self._first_index[source_index],
            source.conversation_id + (suffix or ""),
            salt_markers(repeat, source.conversation_id) if self._salt else None,
        )
        self._active[conversation] = None
        self._advance(conversation, now_ns, actions)

    def _advance(self, conversation: Conversation, now_ns: int, actions: list[Action]) -> None:
        """The conversation's next turn (after its think time), or its end."""
        turns = conversation.source.turns
        if conversation.cursor >= len(turns):
            self._finish(conversation, now_ns, actions)
            return
        if self.stopped:
            self._drop(conversation, actions)
            return
        delay_s = turns[conversation.cursor].delay_s
        if self._inject_tool_delay and delay_s > 0:
            conversation.waiting = True
            self.waiting += 1
            # rounded up: a think time is never cut short
            actions.append(Wait(conversation, now_ns + math.ceil(delay_s * 1e9)))
        else:
            self._issue(conversation, actions)

    def _issue(self, conversation: Conversation, actions: list[Action]) -> None:
        """The conversation's next turn goes (it is under way, and no stop holds)."""
        cursor = conversation.cursor
        conversation.cursor = cursor + 1
        self.issued += 1
        self.in_flight += 1
        actions.append(
            Issue(
                conversation,
                conversation.first_index + cursor,
                conversation.source.turns[cursor],
                self.t_window_end is None,
            )
        )

    def _abort(
        self, conversation: Conversation, failure: str, now_ns: int, actions: list[Action]
    ) -> None:
        """The failed turn's conversation ends: its remaining turns are
        issued as failed records (``agentic_scheduler.py``'s module doc)."""
        turns = conversation.source.turns
        failed_turn = turns[conversation.cursor - 1].turn  # its one turn out was the last taken
        for cursor in range(conversation.cursor, len(turns)):
            actions.append(
                Abort(
                    conversation,
                    conversation.first_index + cursor,
                    turns[cursor],
                    self.t_window_end is None,
                    failed_turn,
                    failure,
                )
            )
        self.issued += len(turns) - conversation.cursor
        self.failed += len(turns) - conversation.cursor
        conversation.cursor = len(turns)
        self._finish(conversation, now_ns, actions)

    def _finish(self, conversation: Conversation, now_ns: int, actions: list[Action]) -> None:
        self._active.pop(conversation, None)
        self.finished += 1
        if self.started >= self.budget:  # a slot that cannot be refilled
            self._end_window(now_ns, actions)
        self._start_next(now_ns, actions)

    def _end_window(self, now_ns: int, actions: list[Action]) -> None:
        if self.t_window_end is not None:
            return
        self.t_window_end = now_ns
        actions.append(WindowEnded(now_ns))
        if self._drop_at_window_end:
            for conversation in list(self._active):
                self._drop(conversation, actions)

    def _drop(self, conversation: Conversation, actions: list[Action]) -> None:
        """Ends a conversation without issuing the rest (a stop, or the
        debug window end)."""
        if conversation.waiting:
            conversation.waiting = False
            self.waiting -= 1
            actions.append(CancelWait(conversation))
        self._active.pop(conversation, None)
