"""The schedulers' own cost per request, without a network: ``run_phase`` (the
closed loop, Offline, Poisson) and ``run_agentic`` over a client that answers
every request on the next loop iteration with a prebuilt record.

What is measured is the issue path a real client sits under (source, sample
id, callbacks, the scheduler's decisions, the completion callback) plus one
``call_soon`` per request, the floor of any asyncio completion; the client's
own work is ``bench_engine.py``'s.  ``ns_per_request`` in the extra info is
the wall time of a phase divided by its requests.

    pytest bench/bench_scheduler.py -o python_files='bench_*.py' --benchmark-disable-gc
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.load.agentic import AgenticDataset, ClientTurn, Trajectory
from mlpe_fast.load.agentic_scheduler import AgenticPhase, TurnIssued, run_agentic
from mlpe_fast.load.scheduler import Phase, run_phase
from mlpe_fast.wire.events import NO_RESPONSE

REQUESTS = 20_000
CONCURRENCY = 64
ROUTE = "/v1/chat/completions"


class InstantClient:
    """Answers each request on the next loop iteration, always with success."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._loop = asyncio.get_running_loop()

    def new_sample_id(self) -> str:
        return f"{next(self._ids):032x}"

    def issue(self, body: bytes, on_done: Callable[[RequestRecord], object], **kw: Any) -> None:
        record = RequestRecord(kw["sample_index"], kw["sample_id"], 0, 0, 0, NO_RESPONSE)
        self._loop.call_soon(on_done, record)


class Samples:
    """A request source of ``count`` identical bodies."""

    def __init__(self, count: int) -> None:
        self.left = count

    def next_request(self) -> tuple[int, bytes] | None:
        if not self.left:
            return None
        self.left -= 1
        return self.left, b"{}"


def run_one_phase(pattern: str) -> None:
    async def main() -> None:
        phase = Phase(
            pattern,
            concurrency=CONCURRENCY,
            target_qps=1e9,  # Poisson: arrivals as fast as the loop turns
            max_requests=REQUESTS,
            seed=1,
        )
        await run_phase(
            InstantClient(),  # type: ignore[arg-type]
            Samples(REQUESTS),
            phase,
            lambda record: None,
            path=ROUTE,
            on_issue=lambda index, sample_id, t_sched: None,
        )
        assert phase.completed == REQUESTS

    asyncio.run(main())


def agentic_dataset(trajectories: int, turns: int) -> AgenticDataset:
    def trajectory(n: int) -> Trajectory:
        client_turns = tuple(
            ClientTurn(2 * t + 1, 2 * t + 1, 0.0, None, None, None, None) for t in range(turns)
        )
        return Trajectory(f"c{n}", None, (), (), client_turns)

    return AgenticDataset("bench", tuple(trajectory(n) for n in range(trajectories)))


def run_one_agentic() -> None:
    data = agentic_dataset(REQUESTS // 10, 10)

    async def main() -> None:
        phase = AgenticPhase(CONCURRENCY, inject_tool_delay=False, salt=False)

        def on_record(record: RequestRecord, turned: TurnIssued) -> None:
            pass

        await run_agentic(
            InstantClient(),  # type: ignore[arg-type]
            data,
            phase,
            lambda trajectory, turn, salt: b"{}",
            on_record,
            path=ROUTE,
        )
        assert phase.completed == REQUESTS

    asyncio.run(main())


@pytest.mark.parametrize("pattern", ["concurrency", "offline", "poisson", "agentic"])
def test_scheduler_cost_per_request(benchmark: Any, pattern: str) -> None:
    run = run_one_agentic if pattern == "agentic" else lambda: run_one_phase(pattern)
    benchmark.pedantic(run, rounds=7, iterations=1, warmup_rounds=1)
    stats = benchmark.stats.stats
    benchmark.extra_info["ns_per_request_median"] = stats.median * 1e9 / REQUESTS
    benchmark.extra_info["ns_per_request_min"] = stats.min * 1e9 / REQUESTS
