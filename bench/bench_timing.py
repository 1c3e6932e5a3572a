"""Timing fidelity: how late is the client's ``t_first`` after the server
really sent the first token?

The simulated endpoint runs in its own process with a fixed 20 ms TTFT and
reports, in each response's ``usage``, the CLOCK_MONOTONIC time it sent the
first token (``mlpe_first_send_ns``).  On Linux the client's stamps are on
the same clock, so ``t_first - mlpe_first_send_ns`` is the delay between the
send and the client's stamp: loopback transit plus the client's own lag.
Measured at concurrency 64 on whatever cores the machine has (2 in CI).

    pytest bench/bench_timing.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.engine import Client, RequestRecord

CONCURRENCY = 64
REQUESTS = 1280
TOKENS = 16

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs one monotonic clock for two processes"
)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """The simulated endpoint in its own process."""
    with simulated_endpoint(("--ttft-ms", "20")) as url:
        yield url


async def closed_loop(
    url: str,
    *,
    concurrency: int = CONCURRENCY,
    requests: int = REQUESTS,
    tokens: int = TOKENS,
    **client_options: Any,
) -> tuple[list[RequestRecord], Client]:
    """``requests`` streamed requests, ``concurrency`` at a time, each sent
    as the last one ends; the records and the (closed) client."""
    body = json.dumps(
        {
            "model": "mlpe-sim",
            "messages": [{"role": "user", "content": "hello"}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_completion_tokens": tokens,
        }
    ).encode()
    records: list[RequestRecord] = []
    done = asyncio.Event()
    client = Client(url, **client_options)
    async with client:
        issued = 0

        def on_done(record: RequestRecord) -> None:
            nonlocal issued
            records.append(record)
            if issued < requests:
                issued += 1
                client.issue(body, on_done)
            elif len(records) == requests:
                done.set()

        for _ in range(concurrency):
            issued += 1
            client.issue(body, on_done)
        await done.wait()
    return records, client


def test_first_token_stamp_delay(benchmark: Any, endpoint: str) -> None:
    import uvloop

    runs: list[list[RequestRecord]] = []
    benchmark.pedantic(lambda: runs.append(uvloop.run(closed_loop(endpoint))[0]), rounds=1)
    records = runs[-1]
    assert all(r.ok for r in records)
    delays = np.array(
        [r.t_first - r.response.usage["mlpe_first_send_ns"] for r in records],  # type: ignore[index,operator]
        dtype=np.int64,
    )
    ttft = np.array([r.ttft_ns for r in records], dtype=np.int64)
    assert (delays >= 0).all(), "a first token stamped before the server sent it"
    p50, p99 = (float(np.percentile(delays, q, method="lower")) / 1e3 for q in (50, 99))
    benchmark.extra_info.update(
        delay_us_p50=p50,
        delay_us_p99=p99,
        delay_us_max=float(delays.max()) / 1e3,
        ttft_ms_p50=float(np.percentile(ttft, 50, method="lower")) / 1e6,
    )
    print(
        f"\nt_first - server send: p50 {p50:.1f} µs, p99 {p99:.1f} µs, max "
        f"{delays.max() / 1e3:.1f} µs; TTFT p50 "
        f"{np.percentile(ttft, 50, method='lower') / 1e6:.3f} ms (20 ms injected)"
    )
