"""Soak: a million requests against the simulated endpoint with 1 % of them
faulty, through the engine; no request may be lost and resident memory must
stay flat.

The endpoint runs in its own process and answers 8-token streams; 1 % of the
requests meet one of five faults (a reset mid-stream, a 500, a malformed
event between good ones, a truncated chunk, a keep-alive connection closed
just after its response).  The client keeps 64 requests in flight and keeps
no records (a run folder keeps one per request by design, so the engine is
what must not grow); resident memory is read at 10 %, 50 % and 100 % of the
requests.  Bar: every request ends in exactly one record, and the last
reading is within 10 % of the first.

    pytest bench/bench_soak.py -o python_files='bench_*.py' -s

``MLPE_SOAK_REQUESTS`` shortens it (the figures in docs/performance.md are from the
full million).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from collections import Counter
from typing import Any

from mlpe_fast.demo import simulated_endpoint

REQUESTS = int(os.environ.get("MLPE_SOAK_REQUESTS", "1000000"))
CONCURRENCY = 64
# 1 % in all, spread over faults of every layer.
FAULTS = (
    "reset-mid-stream=0.002",
    "status-500=0.002",
    "malformed-event=0.002",
    "truncated-chunk=0.002",
    "close-after-response=0.002",
)
CHECKPOINTS = (0.1, 0.5, 1.0)


def resident_mib() -> float:
    """The process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


async def soak(url: str) -> dict[str, Any]:
    from mlpe_fast.engine import Client

    payload = json.dumps(
        {
            "model": "mlpe-sim",
            "messages": [{"role": "user", "content": "hello"}],
            "stream": True,
            "max_completion_tokens": 8,
        }
    ).encode()
    outcomes: Counter[str] = Counter()
    tokens = 0
    resident: dict[float, float] = {}
    marks = [int(REQUESTS * c) for c in CHECKPOINTS]
    done = asyncio.Event()
    issued = 0
    ended = 0
    async with Client(url, idle_timeout=30) as client:

        def on_done(record: Any) -> None:
            nonlocal issued, ended, tokens
            ended += 1
            outcomes[record.error_class or "ok"] += 1
            if record.ok:
                tokens += record.response.content_events
            if ended in marks:
                resident[CHECKPOINTS[marks.index(ended)]] = resident_mib()
            if issued < REQUESTS:
                issued += 1
                client.issue(payload, on_done)
            elif ended == REQUESTS:
                done.set()

        start = time.perf_counter()
        for _ in range(min(CONCURRENCY, REQUESTS)):
            issued += 1
            client.issue(payload, on_done)
        await done.wait()
        elapsed = time.perf_counter() - start
    return {
        "issued": issued,
        "ended": ended,
        "outcomes": dict(outcomes),
        "tokens": tokens,
        "resident_mib": resident,
        "seconds": elapsed,
    }


def test_soak(benchmark: Any) -> None:
    import uvloop

    flags = ["--output-len", "8", "--seed", "1"]
    for fault in FAULTS:
        flags += ["--fault", fault]
    results: dict[str, Any] = {}

    def measure() -> None:
        with simulated_endpoint(tuple(flags)) as url:
            results.update(uvloop.run(soak(url)))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    outcomes = results["outcomes"]
    resident = results["resident_mib"]
    benchmark.extra_info.update(results)
    failed = REQUESTS - outcomes.get("ok", 0)
    print(
        f"\n{REQUESTS:,} requests in {results['seconds']:.0f} s: "
        f"{outcomes.get('ok', 0):,} ok, {failed:,} failed {outcomes}; resident memory "
        + ", ".join(f"{int(c * 100)} %: {mib:.1f} MiB" for c, mib in sorted(resident.items()))
    )
    # Every request ends in exactly one record.
    assert results["issued"] == results["ended"] == sum(outcomes.values()) == REQUESTS
    # The faults happened and were recorded, about 1 % in all.
    assert 0.003 * REQUESTS < failed < 0.02 * REQUESTS
    # Flat memory: the last reading within 10 % of the first.
    assert resident[1.0] <= 1.10 * resident[0.1]
