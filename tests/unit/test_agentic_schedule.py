"""The agentic schedule (``load/agentic_schedule.py``) driven by a fake clock
and fake completions, with no event loop and no client: slots, instance
order, turn order, think times, failures, the window, stops."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlpe_fast.load.agentic import AgenticDataset, ClientTurn, Trajectory
from mlpe_fast.load.agentic_schedule import (
    Abort,
    Action,
    AgenticSchedule,
    CancelWait,
    Conversation,
    Issue,
    Wait,
    WindowEnded,
)
from mlpe_fast.load.agentic_scheduler import AgenticPhase

T0 = 5_000_000_000
FEW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def trajectory(cid: str, turns: int = 3, delay_s: float = 0.0) -> Trajectory:
    """``turns`` client turns (rows 1, 3, 5...), each after ``delay_s``
    but the first."""
    client_turns = tuple(
        ClientTurn(2 * t + 1, 2 * t + 1, delay_s if t else 0.0, None, None, None, None)
        for t in range(turns)
    )
    return Trajectory(cid, "S", (), (), client_turns)


class FakeDriver:
    """What ``run_agentic`` does around the schedule, with a clock the test
    moves: the turns out, the think times under way, and a log."""

    def __init__(self, schedule: AgenticSchedule) -> None:
        self.schedule = schedule
        self.now = schedule.t_start
        self.out: list[Issue] = []
        self.waits: dict[Conversation, int] = {}  # due times
        self.log: list[tuple[str, str, int, int]] = []  # (what, logical id, row, now)
        self.records: list[tuple[Issue | Abort, str | None]] = []  # (turn, error class)
        self.window_end: list[int] = []
        self.finishes: list[tuple[int, bool]] = []  # (when, every instance started before it)
        self.tracked_before_window: list[bool] = []  # each taken turn: window still open?

    def perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, (Issue, Abort)):
                assert action.tracked == (not self.window_end)
                self.tracked_before_window.append(action.tracked)
                what = "issue" if isinstance(action, Issue) else "abort"
                self.log.append((what, action.conversation.logical_id, action.turn.turn, self.now))
            if isinstance(action, Issue):
                self.out.append(action)
            elif isinstance(action, Abort):
                self.records.append((action, "Aborted"))
            elif isinstance(action, Wait):
                assert action.conversation not in self.waits
                self.waits[action.conversation] = action.due_ns
            elif isinstance(action, CancelWait):
                del self.waits[action.conversation]
            else:
                assert isinstance(action, WindowEnded) and not self.window_end
                self.window_end.append(action.t_ns)

    def open(self) -> None:
        for _ in range(self.schedule.opening_slots):
            self.perform(self.schedule.start_next(self.now))

    def complete(self, position: int = 0, failure: str | None = None, after_ns: int = 0) -> None:
        self.now += after_ns
        turn = self.out.pop(position)
        self.schedule.turn_ended(failure is None)
        self.records.append((turn, failure))
        what = "done" if failure is None else "failed"
        self.log.append((what, turn.conversation.logical_id, turn.turn.turn, self.now))
        finished, all_started = (
            self.schedule.finished,
            self.schedule.started >= self.schedule.budget,
        )
        self.perform(self.schedule.resume(turn.conversation, failure, self.now))
        if self.schedule.finished > finished:
            self.finishes.append((self.now, all_started))

    def wake_first(self) -> None:
        conversation, due = min(self.waits.items(), key=lambda item: item[1])
        del self.waits[conversation]
        self.now = max(self.now, due)
        self.perform(self.schedule.woken(conversation, self.now))

    def check_slots(self, concurrency: int) -> None:
        busy = [t.conversation for t in self.out] + list(self.waits)
        assert len(busy) == len(set(busy))  # one turn out or one wait per conversation
        assert len(self.schedule.active) <= concurrency
        assert set(busy) <= set(self.schedule.active)


@st.composite
def agentic_cases(draw: st.DrawFn) -> tuple[AgenticSchedule, tuple[Trajectory, ...], int, bool]:
    count = draw(st.integers(1, 3))
    trajectories = tuple(
        trajectory(f"t{n}", draw(st.integers(1, 4)), draw(st.sampled_from([0.0, 0.001, 0.5])))
        for n in range(count)
    )
    concurrency = draw(st.integers(1, 4))
    inject = draw(st.booleans())
    schedule = AgenticSchedule(
        trajectories,
        T0,
        concurrency=concurrency,
        budget=draw(st.integers(1, 8)),
        inject_tool_delay=inject,
        salt=draw(st.booleans()),
    )
    return schedule, trajectories, concurrency, inject


# Each step: which turn out comes back (modulo how many), its error class (a
# quarter fail), after how long, or else whether the first think time ends.
STEPS = st.lists(
    st.tuples(
        st.integers(0, 7),
        st.sampled_from([None, None, None, "HTTPStatusError"]),
        st.integers(0, 10**8),
        st.booleans(),
    ),
    max_size=80,
)


@pytest.mark.hypothesis
@FEW
@given(case=agentic_cases(), steps=STEPS)
def test_every_rule_holds_whatever_the_order_of_completions(
    case: tuple[AgenticSchedule, tuple[Trajectory, ...], int, bool],
    steps: list[tuple[int, str | None, int, bool]],
) -> None:
    schedule, trajectories, concurrency, inject = case
    driver = FakeDriver(schedule)
    driver.open()
    driver.check_slots(concurrency)
    moves = iter(steps)
    while driver.out or driver.waits:
        position, failure, gap, wake = next(moves, (0, None, 0, False))
        if driver.waits and (wake or not driver.out):
            driver.wake_first()
        else:
            driver.complete(position % len(driver.out), failure, gap)
        driver.check_slots(concurrency)
    assert schedule.done
    assert schedule.started == schedule.finished == schedule.budget
    assert schedule.issued == schedule.completed + schedule.failed == len(driver.records)
    # Instance k replays trajectory k mod N, with the repeat suffix after the first pass.
    starts = [cid for what, cid, row, _ in driver.log if what == "issue" and row == 1]
    n = len(trajectories)
    assert starts == [
        trajectories[k % n].conversation_id + ("" if k < n else f"__repeat_{k // n + 1}")
        for k in range(schedule.budget)
    ]
    # Each conversation: its turns in order, each issued after the previous came
    # back (and after its think time); after a failure, the rest aborted.
    by_id: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for what, cid, row, now in driver.log:
        by_id[cid].append((what, row, now))
    for cid, events in by_id.items():
        source = next(t for t in trajectories if t.conversation_id == cid.split("__")[0])
        taken = [row for what, row, _ in events if what in ("issue", "abort")]
        assert taken == [turn.turn for turn in source.turns], cid
        for (before, prev_row, prev_now), (what, row, now) in pairwise(events):
            if what == "issue":
                assert before == "done" and prev_row == row - 2
                delay_s = source.turns[row // 2].delay_s if inject else 0.0
                assert now - prev_now >= delay_s * 1e9
            elif what == "abort":
                assert before in ("failed", "abort")
            else:
                assert before == "issue" and prev_row == row
    # The window ends once, at the first finish after the last start; the
    # turns taken before it are tracked, the later ones not.
    first = next(when for when, all_started in driver.finishes if all_started)
    assert driver.window_end == [first]
    assert driver.tracked_before_window == sorted(driver.tracked_before_window, reverse=True)


def test_the_window_ends_at_the_first_finish_with_no_instance_left_to_start() -> None:
    schedule = AgenticSchedule(
        (trajectory("a", 2), trajectory("b", 2)), T0, concurrency=2, budget=3
    )
    driver = FakeDriver(schedule)
    driver.open()
    driver.complete(0, after_ns=10)  # a turn 1
    driver.complete(0, after_ns=10)  # b turn 1
    driver.complete(0, after_ns=10)  # a turn 3: a finishes, a__repeat_2 starts
    assert driver.window_end == [] and schedule.started == 3
    driver.complete(0, after_ns=10)  # b turn 3: a finish with nothing left to start
    assert driver.window_end == [T0 + 40] == [schedule.t_window_end]
    assert [t.tracked for t in driver.out] == [True]  # a__repeat_2's turn 1, taken before
    driver.complete(0, after_ns=10)
    assert [t.tracked for t in driver.out] == [False] and driver.out[0].turn.turn == 3
    driver.complete(0)
    assert schedule.done and schedule.issued == 6


def test_a_think_time_is_waited_before_its_turn_and_only_when_asked() -> None:
    for inject in (True, False):
        schedule = AgenticSchedule(
            (trajectory("a", 2, delay_s=0.25),), T0, concurrency=1, inject_tool_delay=inject
        )
        driver = FakeDriver(schedule)
        driver.open()
        driver.complete(after_ns=1000)
        if inject:
            assert driver.out == [] and list(driver.waits.values()) == [T0 + 1000 + 250_000_000]
            assert not schedule.done
            driver.wake_first()
        assert driver.out[0].turn.turn == 3 and not driver.waits
        driver.complete()
        assert schedule.done


def test_a_failed_turn_aborts_the_rest_of_its_trajectory_and_the_slot_moves_on() -> None:
    schedule = AgenticSchedule((trajectory("a", 3), trajectory("b", 2)), T0, concurrency=1)
    driver = FakeDriver(schedule)
    actions = schedule.start_next(T0)
    assert [type(a) for a in actions] == [Issue]
    driver.perform(actions)
    driver.complete()  # a turn 1 fine
    driver.now += 5
    driver.out.pop()
    schedule.turn_ended(False)
    actions = schedule.resume(next(iter(schedule.active)), "TotalTimeout", driver.now)
    aborts = [a for a in actions if isinstance(a, Abort)]
    assert [(a.turn.turn, a.failed_turn, a.failure) for a in aborts] == [(5, 3, "TotalTimeout")]
    assert isinstance(actions[-1], Issue) and actions[-1].conversation.logical_id == "b"
    assert schedule.failed == 2 and schedule.issued == 4 and schedule.finished == 1


def test_a_stop_drops_the_waits_issues_nothing_more_and_awaits_the_turns_out() -> None:
    schedule = AgenticSchedule(
        (trajectory("a", 3, delay_s=5.0), trajectory("b", 3, delay_s=5.0)),
        T0,
        concurrency=2,
        budget=10,
    )
    driver = FakeDriver(schedule)
    driver.open()
    driver.complete(0)  # a turn 1: a waits 5 s for its turn 3
    assert len(driver.waits) == 1 and len(driver.out) == 1
    driver.perform(schedule.stop(T0 + 1))
    assert driver.waits == {} and not schedule.done  # b's turn 1 is still out
    driver.complete(0)  # b turn 1: b does not wait for a turn it will not issue
    assert driver.out == [] and driver.waits == {} and schedule.done
    assert schedule.issued == schedule.completed == 2 and schedule.started == 2


def test_the_debug_window_end_drops_the_conversations_under_way() -> None:
    schedule = AgenticSchedule(
        (trajectory("a", 1), trajectory("b", 3), trajectory("c", 3, delay_s=1.0)),
        T0,
        concurrency=3,
        stop_issuing_on_first_user_complete=True,
    )
    driver = FakeDriver(schedule)
    driver.open()
    driver.complete(2)  # c turn 1: c waits
    driver.complete(0)  # a finishes with nothing left to start: the window ends
    assert len(driver.window_end) == 1 and driver.waits == {} and schedule.active == ()
    driver.complete(0)  # b's turn 1 comes back; nothing follows it
    assert driver.out == [] and schedule.done and schedule.issued == 3


def test_the_phase_reads_its_tallies_from_its_schedule() -> None:
    phase = AgenticPhase(2, budget=2)
    assert (phase.issued, phase.started, phase.finished, phase.t_window_end) == (0, 0, 0, None)
    data = AgenticDataset("x", (trajectory("a", 1),))
    phase.stop()
    schedule = phase.schedule(data, T0)
    assert schedule.start_next(T0) == [] and schedule.done and phase.t_start == T0
    fresh = AgenticPhase(2, budget=2)
    driver = FakeDriver(fresh.schedule(data, T0))
    driver.open()
    driver.complete(0, "HTTPStatusError")
    assert (fresh.issued, fresh.completed, fresh.failed, fresh.started) == (2, 0, 1, 2)
