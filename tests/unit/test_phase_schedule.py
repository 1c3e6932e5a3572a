"""The phase schedule (``load/phase_schedule.py``) driven by a fake clock and
fake completions, with no event loop and no client: the closed loop's
slots, the Offline burst, Poisson arrivals, counts, durations, whole passes,
stops, and the end of issuing a warmup hands the measured phase."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlpe_fast.load.phase_schedule import PhaseSchedule
from mlpe_fast.load.scheduler import Phase

T0 = 1_000_000_000
FEW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class FakeDriver:
    """What ``run_phase`` does around the schedule, with a clock the test
    moves: a source of ``size`` requests (None: endless), the requests out
    by number, and their send times."""

    def __init__(self, schedule: PhaseSchedule, size: int | None = None) -> None:
        self.schedule = schedule
        self.now = schedule.t_start
        self.left = size
        self.out: list[int] = []  # numbers of the requests in flight, in send order
        self.sent: list[int] = []  # each request's send (or scheduled) time
        self.most_out = 0

    def issue(self, t_sched: int | None = None) -> None:
        if self.left is not None:
            if self.left == 0:
                self.schedule.source_ended(self.now)
                return
            self.left -= 1
        self.schedule.sent(self.now)
        self.out.append(len(self.sent))
        self.sent.append(self.now if t_sched is None else t_sched)
        self.most_out = max(self.most_out, len(self.out))

    def open(self) -> None:
        while self.schedule.opening(self.now):
            self.issue()
        self.schedule.opened(self.now)

    def complete(self, position: int = 0, *, ok: bool = True, after_ns: int = 0) -> None:
        """The request at ``position`` among those out comes back."""
        self.now += after_ns
        self.out.pop(position)
        self.schedule.ended(ok)
        if self.schedule.refill(self.now):
            self.issue()

    def drain(self) -> None:
        while self.out:
            self.complete()


def test_offline_issues_every_request_at_the_start() -> None:
    schedule = PhaseSchedule("offline", T0, max_requests=50)
    driver = FakeDriver(schedule)
    driver.open()
    assert driver.sent == [T0] * 50 and schedule.in_flight == 50
    assert not schedule.issuing and schedule.t_stop_issuing == T0 and not schedule.done
    driver.complete(after_ns=5)
    assert len(driver.sent) == 50  # a completion frees no slot in Offline
    driver.drain()
    assert schedule.done and schedule.completed == 50


def test_offline_with_a_source_that_ends_issues_what_the_source_has() -> None:
    schedule = PhaseSchedule("offline", T0, duration_ns=10**12)
    driver = FakeDriver(schedule, size=7)
    driver.open()
    assert len(driver.sent) == 7 and not schedule.issuing


@pytest.mark.hypothesis
@FEW
@given(
    concurrency=st.integers(1, 8),
    count=st.integers(0, 40),
    picks=st.lists(st.tuples(st.integers(0, 7), st.booleans(), st.integers(0, 50)), max_size=60),
)
def test_the_closed_loop_keeps_its_slots_full_and_never_exceeds_them(
    concurrency: int, count: int, picks: list[tuple[int, bool, int]]
) -> None:
    schedule = PhaseSchedule("concurrency", T0, concurrency=concurrency, max_requests=count)
    driver = FakeDriver(schedule)
    driver.open()
    for position, ok, gap in picks:
        if not driver.out:
            break
        left = count - schedule.issued
        assert len(driver.out) == min(concurrency, schedule.in_flight + left)
        driver.complete(position % len(driver.out), ok=ok, after_ns=gap)
    driver.drain()
    assert driver.most_out <= concurrency
    assert schedule.issued == len(driver.sent) == count
    assert schedule.completed + schedule.failed == count and schedule.done


def test_the_last_request_of_the_count_ends_issuing_as_it_goes() -> None:
    """What a warmup that is not drained waits for: issuing ends when the
    last request is out, while the others are still in flight."""
    schedule = PhaseSchedule("concurrency", T0, concurrency=2, max_requests=3)
    driver = FakeDriver(schedule)
    driver.open()
    assert schedule.issuing
    driver.complete(after_ns=40)
    assert not schedule.issuing and schedule.t_stop_issuing == T0 + 40
    assert schedule.in_flight == 2 and not schedule.done
    driver.drain()
    assert schedule.done and len(driver.sent) == 3


def test_a_duration_stops_issuing_and_awaits_what_is_in_flight() -> None:
    schedule = PhaseSchedule("concurrency", T0, concurrency=2, duration_ns=100)
    driver = FakeDriver(schedule)
    driver.open()
    driver.complete(after_ns=99)
    assert len(driver.sent) == 3 and schedule.issuing  # before the deadline: refilled
    driver.complete(after_ns=1)
    assert len(driver.sent) == 3 and not schedule.issuing
    assert schedule.t_stop_issuing == T0 + 100 and not schedule.done
    driver.complete(after_ns=500)
    assert schedule.done and schedule.completed == 3


def test_a_duration_with_whole_passes_ends_at_the_end_of_a_pass() -> None:
    schedule = PhaseSchedule("concurrency", T0, concurrency=1, duration_ns=10, pass_size=3)
    driver = FakeDriver(schedule)
    driver.open()
    driver.complete(after_ns=50)  # past the deadline with 1 of a pass of 3 issued
    driver.complete()
    assert schedule.issuing and len(driver.sent) == 3
    driver.complete()
    assert not schedule.issuing and schedule.issued == 3
    driver.drain()
    assert schedule.done


def test_a_duration_with_a_minimum_of_passes_issues_them_all() -> None:
    # --min-passes 3 of a 2-sample dataset: the steady-state window's
    # super-passes (spec §1.4), however early the duration is over
    schedule = PhaseSchedule(
        "concurrency", T0, concurrency=1, duration_ns=10, pass_size=2, min_requests=6
    )
    driver = FakeDriver(schedule)
    driver.open()
    for _ in range(5):
        driver.complete(after_ns=50)
        assert schedule.issuing
    driver.complete()
    assert not schedule.issuing and schedule.issued == 6
    # a stop still ends it at once
    stopped = PhaseSchedule("concurrency", T0, concurrency=1, duration_ns=10, min_requests=6)
    other = FakeDriver(stopped)
    other.open()
    stopped.stop(T0 + 1)
    other.drain()
    assert stopped.done and stopped.issued == 1


def test_a_stop_ends_issuing_at_once_and_awaits_what_is_in_flight() -> None:
    schedule = PhaseSchedule("concurrency", T0, concurrency=4, max_requests=100)
    driver = FakeDriver(schedule)
    driver.open()
    schedule.stop(T0 + 7)
    assert not schedule.issuing and schedule.t_stop_issuing == T0 + 7
    driver.drain()
    assert len(driver.sent) == 4 and schedule.done


def test_a_phase_stopped_before_its_start_issues_nothing() -> None:
    for pattern in ("concurrency", "offline"):
        schedule = PhaseSchedule(pattern, T0, concurrency=3, max_requests=9, stopped=True)
        driver = FakeDriver(schedule)
        driver.open()
        assert driver.sent == [] and schedule.done
    poisson = PhaseSchedule("poisson", T0, target_qps=10, max_requests=9, stopped=True)
    assert poisson.arrival(T0) is None and poisson.done


def test_a_count_of_zero_is_done_at_the_start() -> None:
    schedule = PhaseSchedule("concurrency", T0, concurrency=3, max_requests=0)
    FakeDriver(schedule).open()
    assert schedule.done and schedule.issued == 0


def poisson_arrivals(seed: int, lateness: list[int], count: int = 30) -> list[int]:
    """The scheduled times of a Poisson phase's arrivals, each woken
    ``lateness`` ns after its due time."""
    schedule = PhaseSchedule("poisson", T0, target_qps=1000, max_requests=count, seed=seed)
    driver = FakeDriver(schedule)
    driver.open()
    assert driver.sent == []  # Poisson's arrivals are timed, none at the opening
    for late in lateness:
        driver.now = schedule.next_arrival_ns + late
        t_sched = schedule.arrival(driver.now)
        if t_sched is None:
            break
        driver.issue(t_sched)
    return driver.sent


@pytest.mark.hypothesis
@FEW
@given(seed=st.integers(0, 2**32), lateness=st.lists(st.integers(0, 10**7), min_size=30))
def test_poisson_arrivals_follow_the_seed_however_late_they_are_woken(
    seed: int, lateness: list[int]
) -> None:
    on_time = poisson_arrivals(seed, [0] * 30)
    assert poisson_arrivals(seed, lateness) == on_time  # lateness is measured, not hidden
    assert on_time[0] == T0 and on_time == sorted(on_time) and len(on_time) == 30


def test_poisson_gaps_have_the_target_mean_and_differ_by_seed() -> None:
    schedule = PhaseSchedule("poisson", T0, target_qps=200, max_requests=4000, seed=7)
    times = []
    while (t_sched := schedule.arrival(schedule.next_arrival_ns)) is not None:
        times.append(t_sched)
        schedule.sent(t_sched)
    assert len(times) == 4000
    mean_gap_s = (times[-1] - times[0]) / (len(times) - 1) / 1e9
    assert mean_gap_s == pytest.approx(1 / 200, rel=0.05)
    assert poisson_arrivals(7, [0] * 30) != poisson_arrivals(8, [0] * 30)


def test_poisson_issues_on_arrivals_only_and_they_end_with_issuing() -> None:
    schedule = PhaseSchedule("poisson", T0, target_qps=100, duration_ns=50_000_000)
    driver = FakeDriver(schedule)
    driver.issue(schedule.arrival(driver.now))
    driver.complete(after_ns=1)
    assert len(driver.sent) == 1 and schedule.issuing  # a completion frees no slot
    driver.now = schedule.next_arrival_ns
    while (t_sched := schedule.arrival(driver.now)) is not None:
        driver.issue(t_sched)
        driver.now = schedule.next_arrival_ns
    assert driver.now >= T0 + 50_000_000 and not schedule.issuing
    assert schedule.arrival(driver.now + 10**9) is None


def test_unknown_patterns_and_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown load pattern 'burst'"):
        PhaseSchedule("burst", T0, max_requests=1)
    for qps in (None, 0.0, -1.0):
        with pytest.raises(ValueError, match="poisson needs a positive target_qps"):
            PhaseSchedule("poisson", T0, target_qps=qps, max_requests=1)


def test_a_phase_reads_its_tallies_from_its_schedule() -> None:
    phase = Phase("concurrency", concurrency=2, max_requests=4)
    assert (phase.issued, phase.completed, phase.failed, phase.t_start) == (0, 0, 0, 0)
    phase.stop()  # before the start: the schedule begins stopped
    schedule = phase.schedule(T0)
    assert schedule.stopped and phase.t_start == T0
    fresh = Phase("concurrency", concurrency=2, max_requests=4)
    driver = FakeDriver(fresh.schedule(T0))
    driver.open()
    driver.complete(ok=False, after_ns=3)
    assert (fresh.issued, fresh.completed, fresh.failed) == (3, 0, 1)
