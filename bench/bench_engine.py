"""Client CPU per SSE event and per request, mlpe-fast over HTTP/1.1 and over
HTTP/2 (h2c) against an aiohttp streaming client (what vLLM's and SGLang's
benchmark scripts use), in one run.

Each benchmark round sends ``REQUESTS`` requests at concurrency 64 and
measures the client process's CPU time (``time.process_time``, all
threads) over them, after a first round of 64 has opened every connection:
the steady state a point spends its time in, without the client's setup
and teardown (64 connections dialled and closed, a thread pool, the
receive thread), which a point pays once.  The per-request cost comes from
a run with one-token responses; the per-event cost is what the 1,000-event
responses add on top, divided by the events.  Two servers:

* the simulated endpoint in its own process, with no delays, streaming
  1,000 one-character events per response (``test_client_cpu``);
* a static SSE server (nginx, ``static_sse.py``; skipped when it is not
  installed), one pre-built response of one event and one of 1,000 events,
  each sent in as few writes as the socket allows (``test_client_cpu_static``).
  Beside the clients it measures two floors, what any client costs on this
  machine: ``wrk`` (C, epoll, keep-alive, reads and discards; skipped when
  not installed) and a do-nothing uvloop protocol (one write per request,
  counts the response's bytes, writes the next).  ``test_static_ratios``
  prints them side by side, as ratios.

    pytest bench/bench_engine.py -o python_files='bench_*.py' --benchmark-disable-gc -s
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.demo import simulated_endpoint

from .static_sse import nginx_endpoint, sse_body

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


async def run_mlpe_fast(url: str, tokens: int, **options: Any) -> tuple[float, int]:
    from mlpe_fast.engine import Client

    async with Client(url, **options) as client:
        payload = json.dumps(body(tokens)).encode()

        async def batch(requests: int) -> int:
            done = asyncio.Event()
            issued = completed = events = 0

            def on_done(record: Any) -> None:
                nonlocal issued, completed, events
                completed += 1
                assert record.ok, record.error_message
                events += record.response.content_events
                if issued < requests:
                    issued += 1
                    client.issue(payload, on_done)
                elif completed == requests:
                    done.set()

            for _ in range(min(CONCURRENCY, requests)):
                issued += 1
                client.issue(payload, on_done)
            await done.wait()
            return events

        return await measured(batch)


async def measured(batch: Callable[[int], Awaitable[int]]) -> tuple[float, int]:
    """CPU seconds (the process's, all threads) and events of ``REQUESTS``
    requests, after a first round of ``CONCURRENCY`` has opened every
    connection: the steady state a point spends its time in, without the
    client's setup and teardown."""
    await batch(CONCURRENCY)
    start = time.process_time()
    events = await batch(REQUESTS)
    return time.process_time() - start, events


async def run_aiohttp(url: str, tokens: int) -> tuple[float, int]:
    """A streaming client written the way benchmark_serving-style scripts
    are: aiohttp, iterate the body by lines, json-decode each event, stamp
    the first and every later token with perf_counter."""
    import aiohttp

    payload = body(tokens)

    async def batch(requests: int) -> int:
        events = 0
        queue = iter(range(requests))

        async def worker() -> None:
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

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return events

    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:
        return await measured(batch)


def cpu_of(
    run: Callable[[str, int], Awaitable[tuple[float, int]]], url: str, tokens: int
) -> tuple[float, int]:
    """``run``'s measured CPU seconds and events, on a fresh uvloop loop."""
    loop_factory: Any = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = asyncio.new_event_loop
    loop = loop_factory()
    try:
        return loop.run_until_complete(run(url, tokens))
    finally:
        loop.close()


async def run_mlpe_fast_h2c(url: str, tokens: int) -> tuple[float, int]:
    return await run_mlpe_fast(url, tokens, http2=True)


async def run_mlpe_fast_loop_reads(url: str, tokens: int) -> tuple[float, int]:
    """Kernel stamps, read on the event loop (no receive thread)."""
    return await run_mlpe_fast(url, tokens, receive_thread=False)


async def run_mlpe_fast_read_stamps(url: str, tokens: int) -> tuple[float, int]:
    """Read-time stamps through the loop's own transport."""
    return await run_mlpe_fast(url, tokens, kernel_stamps=False)


CLIENTS = {
    "mlpe-fast": run_mlpe_fast,
    "mlpe-fast, kernel stamps read on the loop": run_mlpe_fast_loop_reads,
    "mlpe-fast, read-time stamps": run_mlpe_fast_read_stamps,
    "mlpe-fast h2c": run_mlpe_fast_h2c,
    "aiohttp": run_aiohttp,
}


def per_request_and_event(
    benchmark: Any,
    run: Callable[[str, int], Awaitable[tuple[float, int]]],
    short: str,
    long: str,
) -> tuple[float, float]:
    """CPU µs per request (one-token responses from ``short``) and per event
    (what the ``EVENTS``-event responses from ``long`` add), best of three
    rounds each."""
    cpu_of(run, short, 1)  # warm connections, imports and caches
    samples: list[tuple[float, float]] = []

    def measure() -> None:
        per_request_cpu, _ = cpu_of(run, short, 1)
        streaming_cpu, events = cpu_of(run, long, EVENTS)
        assert events == REQUESTS * EVENTS
        samples.append((per_request_cpu, streaming_cpu))

    benchmark.pedantic(measure, rounds=3, iterations=1)
    per_request_cpu = min(s[0] for s in samples)
    streaming_cpu = min(s[1] for s in samples)
    us_per_request = per_request_cpu / REQUESTS * 1e6
    us_per_event = (streaming_cpu - per_request_cpu) / (REQUESTS * (EVENTS - 1)) * 1e6
    benchmark.extra_info["cpu_us_per_request"] = us_per_request
    benchmark.extra_info["cpu_us_per_event"] = us_per_event
    return us_per_request, us_per_event


@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_cpu(benchmark: Any, endpoint: str, client: str) -> None:
    request, event = per_request_and_event(benchmark, CLIENTS[client], endpoint, endpoint)
    print(f"\n{client}: {request:.1f} µs CPU per request, {event:.3f} µs per event")


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


# -- against a static SSE server, beside the floors ------------------------------------

#: Per client: (CPU µs per request, CPU µs per event) against the static server.
_STATIC: dict[str, tuple[float, float]] = {}


@pytest.fixture(scope="module")
def static_endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, str]]:
    """nginx serving a one-event and a 1,000-event response: events -> URL."""
    with contextlib.ExitStack() as stack:
        urls = {}
        for events in (1, EVENTS):
            root = tmp_path_factory.mktemp(f"nginx{events}")
            url, _ = stack.enter_context(nginx_endpoint(root, sse_body(events, "mlpe-sim")))
            urls[events] = url
        yield urls


_FLOOR_REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)


def _response_size(url: str) -> int:
    """The bytes of the static server's whole response (head and body)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(_FLOOR_REQUEST)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += sock.recv(65536)
        return len(head) + 4 + length


class _FloorProtocol(asyncio.BufferedProtocol):
    """One write per request; counts the response's bytes, then writes the
    next request.  Nothing is parsed or recorded: what the loop costs."""

    def __init__(self, size: int, state: dict[str, Any]) -> None:
        self._view = memoryview(bytearray(256 * 1024))
        self._size = size
        self._state = state
        self._got = 0
        self._transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def next(self) -> None:
        state = self._state
        if state["issued"] < state["requests"]:
            state["issued"] += 1
            self._got = 0
            self._transport.write(_FLOOR_REQUEST)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self._got += nbytes
        if self._got >= self._size:
            state = self._state
            state["done"] += 1
            if state["done"] == state["requests"]:
                state["finished"].set_result(None)
            else:
                self.next()


async def run_uvloop_floor(url: str, tokens: int) -> tuple[float, int]:
    """The do-nothing uvloop client (module docstring); ``url`` serves
    responses of ``tokens`` events."""
    loop = asyncio.get_running_loop()
    size = await loop.run_in_executor(None, _response_size, url)
    host, port = url.removeprefix("http://").split(":")
    state: dict[str, Any] = {}
    protocols = [
        (await loop.create_connection(lambda: _FloorProtocol(size, state), host, int(port)))[1]
        for _ in range(CONCURRENCY)
    ]

    async def batch(requests: int) -> int:
        state.update(requests=requests, issued=0, done=0, finished=loop.create_future())
        for protocol in protocols:
            protocol.next()
        await state["finished"]
        return requests * tokens

    try:
        return await measured(batch)
    finally:
        for protocol in protocols:
            protocol._transport.close()


STATIC_CLIENTS = {
    "mlpe-fast": run_mlpe_fast,
    "mlpe-fast, kernel stamps read on the loop": run_mlpe_fast_loop_reads,
    "mlpe-fast, read-time stamps": run_mlpe_fast_read_stamps,
    "aiohttp": run_aiohttp,
    "floor: do-nothing uvloop protocol": run_uvloop_floor,
}


@pytest.mark.parametrize("client", list(STATIC_CLIENTS))
def test_client_cpu_static(benchmark: Any, static_endpoints: dict[int, str], client: str) -> None:
    # The URL says how many events a response has; the token count is ignored.
    request, event = per_request_and_event(
        benchmark, STATIC_CLIENTS[client], static_endpoints[1], static_endpoints[EVENTS]
    )
    _STATIC[client] = (request, event)
    print(f"\nstatic, {client}: {request:.1f} µs per request, {event:.3f} µs per event")


def _wrk_cpu_per_request(url: str, lua: Path) -> float:
    """wrk's own CPU (user + system, from its rusage) per request it made."""
    argv = ["wrk", "-t1", f"-c{CONCURRENCY}", "-d5s", "-s", str(lua), f"{url}/v1/chat/completions"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read() if proc.stdout is not None else ""
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, out
    requests = int(out.split(" requests in")[0].split()[-1])
    return (usage.ru_utime + usage.ru_stime) / requests * 1e6


def _wrk_script(path: Path, tokens: int) -> Path:
    """A wrk script that POSTs :func:`body` (``tokens`` output tokens)."""
    payload = json.dumps(json.dumps(body(tokens)))  # a Lua string literal
    path.write_text(
        f'wrk.method = "POST"\nwrk.body = {payload}\n'
        'wrk.headers["Content-Type"] = "application/json"\n',
        encoding="utf-8",
    )
    return path


def _wrk_floor(short: tuple[str, Path], long: tuple[str, Path]) -> tuple[float, float]:
    """wrk's CPU per request (one-token responses) and per event (what the
    1,000-event responses add), best of three each."""
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install wrk)")
    per_request = min(_wrk_cpu_per_request(*short) for _ in range(3))
    streaming = min(_wrk_cpu_per_request(*long) for _ in range(3))
    return per_request, (streaming - per_request) / (EVENTS - 1)


def test_wrk_floor(tmp_path: Path, endpoint: str) -> None:
    """wrk (C) on the simulated endpoint: what its writes cost any client."""
    request, event = _wrk_floor(
        (endpoint, _wrk_script(tmp_path / "one.lua", 1)),
        (endpoint, _wrk_script(tmp_path / "many.lua", EVENTS)),
    )
    print(f"\nwrk: {request:.1f} µs CPU per request, {event:.3f} µs per event")


def test_wrk_floor_static(tmp_path: Path, static_endpoints: dict[int, str]) -> None:
    """wrk (C) on the same static server: the floor of this machine's loopback."""
    lua = _wrk_script(tmp_path / "post.lua", 1)  # the static server ignores the body
    request, event = _wrk_floor((static_endpoints[1], lua), (static_endpoints[EVENTS], lua))
    _STATIC["floor: wrk"] = (request, event)
    print(f"\nstatic, wrk: {request:.1f} µs per request, {event:.3f} µs per event")


def test_static_ratios() -> None:
    """The static-server figures side by side: each client's CPU, and the
    aiohttp client's over it (the issue's "10x less"), and it over wrk's."""
    if not _STATIC:
        pytest.skip("no static-server figures in this run")
    aiohttp = _STATIC.get("aiohttp")
    wrk = _STATIC.get("floor: wrk")
    print(f"\n{'client':<44} {'µs/request':>10} {'µs/event':>9} {'aiohttp/x':>17} {'x/wrk':>17}")
    for name, (request, event) in _STATIC.items():
        vs_aiohttp = f"{aiohttp[0] / request:5.1f}x {aiohttp[1] / event:6.1f}x" if aiohttp else ""
        vs_wrk = f"{request / wrk[0]:5.2f}x {event / wrk[1]:6.2f}x" if wrk else ""
        print(f"{name:<44} {request:>10.1f} {event:>9.3f} {vs_aiohttp:>17} {vs_wrk:>17}")
