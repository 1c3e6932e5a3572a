"""The agentic load pattern (``load/agentic_scheduler.py``) against the
simulated endpoint: slots, turn order, trajectory recycling, the window,
tool delays, failures that end a trajectory, and a stop."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.engine import Client, RequestRecord
from mlpe_fast.load.agentic import AgenticBodies, AgenticDataset, load_agentic
from mlpe_fast.load.agentic_scheduler import ABORTED, AgenticPhase, TurnIssued, run_agentic
from tests.unit.test_agentic import conversation, write

ROUTE = "/v1/chat/completions"


def dataset(tmp_path: Path, delay: float | None = None) -> AgenticDataset:
    """Three trajectories of 3 client turns each (the last with a delay)."""
    rows = conversation("a") + conversation("b", delay=delay) + conversation("c")
    return load_agentic(write(tmp_path, rows))


class Log:
    """Everything the phase did, in order, with stamps."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, int]] = []  # (what, id, turn, ns)
        self.records: list[tuple[RequestRecord, TurnIssued]] = []
        self.window_end: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.per_id: Counter[str] = Counter()

    def issue(self, turned: TurnIssued) -> None:
        self.events.append(("issue", turned.conversation_id, turned.turn.turn, time.monotonic_ns()))

    def record(self, record: RequestRecord, turned: TurnIssued) -> None:
        self.records.append((record, turned))
        self.events.append(("done", turned.conversation_id, turned.turn.turn, time.monotonic_ns()))


async def run(url: str, data: AgenticDataset, phase: AgenticPhase, log: Log, **client: Any) -> None:
    bodies = AgenticBodies(model="mlpe-sim", max_output_tokens=4)
    async with Client(url, **client) as c:
        in_flight: Counter[str] = Counter()
        most = [0]

        def on_issue(turned: TurnIssued) -> None:
            log.issue(turned)

        def on_record(record: RequestRecord, turned: TurnIssued) -> None:
            log.record(record, turned)

        original = c.issue

        def counting_issue(*args: Any, **kwargs: Any) -> None:
            session = kwargs["headers"]["X-Session-ID"]
            in_flight[session] += 1
            assert in_flight[session] == 1, f"two turns of {session} in flight"
            most[0] = max(most[0], sum(in_flight.values()))
            done = args[1]

            def wrapped(record: RequestRecord) -> object:
                in_flight[session] -= 1
                return done(record)

            original(args[0], wrapped, **kwargs)

        c.issue = counting_issue  # type: ignore[method-assign]
        await run_agentic(
            c, data, phase, bodies, on_record, path=ROUTE, on_issue=on_issue,
            on_window_end=log.window_end.append,
        )  # fmt: skip
        log.most_in_flight = most[0]


@pytest.fixture(scope="module")
def endpoint() -> Any:
    with simulated_endpoint(("--ttft-ms", "2", "--itl-ms", "1", "--seed", "5")) as url:
        yield url


def test_slots_order_recycling_and_the_window(tmp_path: Path, endpoint: str) -> None:
    data = dataset(tmp_path)
    phase = AgenticPhase(2, budget=5, inject_tool_delay=False)
    log = Log()
    asyncio.run(run(endpoint, data, phase, log))
    assert phase.started == phase.finished == 5
    assert phase.issued == phase.completed == 15 and phase.failed == 0
    assert log.most_in_flight <= 2
    # Instances in file order, cycling, with the repeat suffix on the second pass.
    starts = [e[1] for e in log.events if e[0] == "issue" and e[2] == 1]
    assert starts == ["a", "b", "c", "a__repeat_2", "b__repeat_2"]
    # Each trajectory's turns in order, each issued after the previous one came back.
    by_id: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for what, cid, turn, _ in log.events:
        by_id[cid].append((what, turn))
    for steps in by_id.values():
        assert steps == [("issue", 1), ("done", 1), ("issue", 3), ("done", 3), ("issue", 5),
                         ("done", 5)]  # fmt: skip
    # The window closes at the first finish after the last start; later turns are untracked.
    assert len(log.window_end) == 1 and phase.t_window_end == log.window_end[0]
    tracked = [t.tracked for _, t in log.records]
    assert tracked.count(False) > 0 and tracked.count(True) > 0
    for record, turned in log.records:
        assert turned.tracked == (record.t_issue < log.window_end[0])
    # Sample indices are the dataset's client-turn indices; salts differ per repeat.
    assert {t.sample_index for _, t in log.records} == set(range(9))
    salts = {t.conversation_id: t.salt for _, t in log.records}
    assert salts["a"] != salts["a__repeat_2"] and salts["a"][1] == salts["a__repeat_2"][1]


def test_when_concurrency_covers_the_budget_the_first_finish_ends_the_window(
    tmp_path: Path, endpoint: str
) -> None:
    phase = AgenticPhase(5, budget=3, inject_tool_delay=False)
    log = Log()
    asyncio.run(run(endpoint, dataset(tmp_path), phase, log))
    first_finish = min(ns for what, _, turn, ns in log.events if what == "done" and turn == 5)
    assert log.window_end[0] >= first_finish
    assert phase.issued == 9 and log.most_in_flight == 3


def test_tool_delays_are_waited_only_when_asked(tmp_path: Path, endpoint: str) -> None:
    data = dataset(tmp_path, delay=0.3)
    for inject, least in ((True, 0.3), (False, 0.0)):
        log = Log()
        asyncio.run(run(endpoint, data, AgenticPhase(3, inject_tool_delay=inject), log))
        steps = [(w, t, ns) for w, cid, t, ns in log.events if cid == "b"]
        gap = (steps[2][2] - steps[1][2]) / 1e9  # done turn 1 -> issue turn 3
        assert steps[1][:2] == ("done", 1) and steps[2][:2] == ("issue", 3)
        assert gap >= least and (inject or gap < 0.1)


def test_a_failed_turn_ends_its_trajectory_with_every_turn_recorded(tmp_path: Path) -> None:
    flags = ("--ttft-ms", "1", "--itl-ms", "0", "--seed", "11", "--fault", "status-500=0.25")
    data = dataset(tmp_path)
    phase = AgenticPhase(3, budget=6, inject_tool_delay=False)
    log = Log()
    with simulated_endpoint(flags) as url:
        asyncio.run(run(url, data, phase, log))
    records = [r for r, _ in log.records]
    assert phase.issued == len(records) == 18 == phase.completed + phase.failed
    failed = [r for r in records if not r.ok]
    assert failed and any(r.error_class == "HTTPStatusError" for r in failed)
    by_id: dict[str, list[RequestRecord]] = defaultdict(list)
    for record, turned in log.records:
        by_id[turned.conversation_id].append(record)
    for cid, turns in by_id.items():
        assert len(turns) == 3, cid  # every turn of a started trajectory has a record
        bad = next((i for i, r in enumerate(turns) if not r.ok), None)
        if bad is not None:  # the turns after a failure are aborted, never sent
            assert all(r.error_class == ABORTED for r in turns[bad + 1 :])
            assert all(r.response.status == 0 for r in turns[bad + 1 :])


def test_a_stop_issues_nothing_more_and_awaits_what_is_in_flight(
    tmp_path: Path, endpoint: str
) -> None:
    data = dataset(tmp_path, delay=5.0)  # trajectory b waits 5 s before its turn 3
    phase = AgenticPhase(3, budget=30, inject_tool_delay=True)
    log = Log()

    async def stop_soon() -> None:
        task = asyncio.ensure_future(run(endpoint, data, phase, log))
        await asyncio.sleep(0.3)
        phase.stop()
        began = time.monotonic()
        await task
        assert time.monotonic() - began < 2  # the pending delay was dropped, not waited

    asyncio.run(stop_soon())
    assert phase.issued == phase.completed + phase.failed == len(log.records)
    assert phase.started < 30 and not any(r.error_class == ABORTED for r, _ in log.records)
