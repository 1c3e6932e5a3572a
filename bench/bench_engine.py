"""Client CPU per SSE event and per request, mlpe-fast over HTTP/1.1 and over
HTTP/2 (h2c) against an aiohttp streaming client (what vLLM's and SGLang's
benchmark scripts use), in one run.

The simulated endpoint runs in its own process with no delays and streams
1,000 one-character events per response; each benchmark round sends
``REQUESTS`` requests at concurrency 64 and measures the client process's
CPU time (``time.process_time``, all threads).  The per-request cost comes
from a second run with one-token responses; the per-event cost is what the
1,000-event responses add on top, divided by the events.

    pytest bench/bench_engine.py -o python_files='bench_*.py' --benchmark-disable-gc -s
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from mlpe_fast.runner import simulated_endpoint

CONCURRENCY = 64
REQUESTS = 640
EVENTS = 1000


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """The simulated endpoint in its own process."""
    # --http2: the same server answers HTTP/1.1 and h2c (by the preface).
    with simulated_endpoint(("--output-len", "1000", "--http2")) as url:
        yield url


def body(tokens: int) -> dict[str, Any]:
    return {
        "model": "mlpe-sim",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": True,
        "max_completion_tokens": tokens,
    }


async def run_mlpe_fast(url: str, tokens: int, **options: Any) -> int:
    from mlpe_fast.engine import Client

    events = 0
    async with Client(url, **options) as client:
        done = asyncio.Event()
        issued = 0
        completed = 0
        payload = json.dumps(body(tokens)).encode()

        def on_done(record: Any) -> None:
            nonlocal issued, completed, events
            completed += 1
            assert record.ok, record.error_message
            events += record.response.content_events
            if issued < REQUESTS:
                issued += 1
                client.issue(payload, on_done)
            elif completed == REQUESTS:
                done.set()

        for _ in range(CONCURRENCY):
            issued += 1
            client.issue(payload, on_done)
        await done.wait()
    return events


async def run_aiohttp(url: str, tokens: int) -> int:
    """A streaming client written the way benchmark_serving-style scripts
    are: aiohttp, iterate the body by lines, json-decode each event, stamp
    the first and every later token with perf_counter."""
    import aiohttp

    events = 0
    queue = iter(range(REQUESTS))
    payload = body(tokens)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal events
        for _ in queue:
            generated = ""
            stamps: list[float] = []
            async with session.post(f"{url}/v1/chat/completions", json=payload) as response:
                async for raw in response.content:
                    line = raw.strip()
                    if not line:
                        continue
                    chunk = line.decode("utf-8").removeprefix("data: ")
                    if chunk == "[DONE]":
                        continue
                    data = json.loads(chunk)
                    if data["choices"] and (text := data["choices"][0]["delta"].get("content")):
                        stamps.append(time.perf_counter())
                        generated += text
            events += len(stamps)

    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(CONCURRENCY)))
    return events


def cpu_of(run: Callable[[str, int], Awaitable[int]], url: str, tokens: int) -> tuple[float, int]:
    loop_factory: Any = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = asyncio.new_event_loop
    loop = loop_factory()
    try:
        start = time.process_time()
        events = loop.run_until_complete(run(url, tokens))
        return time.process_time() - start, events
    finally:
        loop.close()


async def run_mlpe_fast_h2c(url: str, tokens: int) -> int:
    return await run_mlpe_fast(url, tokens, http2=True)


async def run_mlpe_fast_loop_reads(url: str, tokens: int) -> int:
    """Kernel stamps, read on the event loop (no receive thread)."""
    return await run_mlpe_fast(url, tokens, receive_thread=False)


async def run_mlpe_fast_read_stamps(url: str, tokens: int) -> int:
    """Read-time stamps through the loop's own transport."""
    return await run_mlpe_fast(url, tokens, kernel_stamps=False)


CLIENTS = {
    "mlpe-fast": run_mlpe_fast,
    "mlpe-fast, kernel stamps read on the loop": run_mlpe_fast_loop_reads,
    "mlpe-fast, read-time stamps": run_mlpe_fast_read_stamps,
    "mlpe-fast h2c": run_mlpe_fast_h2c,
    "aiohttp": run_aiohttp,
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_cpu(benchmark: Any, endpoint: str, client: str) -> None:
    run = CLIENTS[client]
    cpu_of(run, endpoint, 1)  # warm connections, imports and caches

    samples: list[tuple[float, float]] = []

    def measure() -> None:
        per_request_cpu, _ = cpu_of(run, endpoint, 1)
        streaming_cpu, events = cpu_of(run, endpoint, EVENTS)
        assert events == REQUESTS * EVENTS
        samples.append((per_request_cpu, streaming_cpu))

    benchmark.pedantic(measure, rounds=3, iterations=1)
    per_request_cpu = min(s[0] for s in samples)
    streaming_cpu = min(s[1] for s in samples)
    us_per_request = per_request_cpu / REQUESTS * 1e6
    us_per_event = (streaming_cpu - per_request_cpu) / (REQUESTS * (EVENTS - 1)) * 1e6
    benchmark.extra_info["cpu_us_per_request"] = us_per_request
    benchmark.extra_info["cpu_us_per_event"] = us_per_event
    print(f"\n{client}: {us_per_request:.1f} µs CPU per request, {us_per_event:.3f} µs per event")


class _AnsweringTransport:
    """A transport that answers every request with one canned response on
    the next loop iteration: the engine's own per-request work, no I/O."""

    def __init__(self, connection: Any, response: bytes) -> None:
        self._connection = connection
        self._response = response
        self._call_soon = asyncio.get_running_loop().call_soon

    def write(self, data: bytes) -> None:
        self._call_soon(self._answer)

    def _answer(self) -> None:
        buffer = self._connection.get_buffer(-1)
        buffer[: len(self._response)] = self._response
        self._connection.buffer_updated(len(self._response))

    def get_extra_info(self, name: str) -> None:
        return None

    def abort(self) -> None:
        pass


async def run_without_io(requests: int) -> None:
    from mlpe_fast.engine import Client
    from mlpe_fast.engine.connection import Connection
    from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event

    response = http_response(
        [
            sse_event(chat_chunk(role="assistant", content="")),
            sse_event(chat_chunk(content="a")),
            sse_event(chat_chunk(finish_reason="stop")),
            sse_event(b"[DONE]"),
        ]
    )
    client = Client("http://127.0.0.1:1")
    client.open()
    pool = client._pool
    assert pool is not None
    connection = Connection(pool)
    connection.connection_made(_AnsweringTransport(connection, response))  # type: ignore[arg-type]
    pool.release(connection, True)
    done = asyncio.Event()
    count = 0

    def on_done(record: Any) -> None:
        nonlocal count
        count += 1
        if count < requests:
            client.issue(b"{}", on_done)
        else:
            done.set()

    client.issue(b"{}", on_done)
    await done.wait()
    await client.aclose()


def test_engine_work_per_request_without_io(benchmark: Any) -> None:
    """What mlpe-fast itself spends per request (issue, decode a one-token
    response, summary, record, callback), with the sockets taken away: the
    rest of test_client_cpu's per-request figure is the system's I/O."""
    import uvloop

    requests = 20000
    cpu: list[float] = []

    def measure() -> None:
        start = time.process_time()
        uvloop.run(run_without_io(requests))
        cpu.append(time.process_time() - start)

    benchmark.pedantic(measure, rounds=3, iterations=1)
    us = min(cpu) / requests * 1e6
    benchmark.extra_info["cpu_us_per_request"] = us
    print(f"\nmlpe-fast without I/O: {us:.1f} µs CPU per request")
