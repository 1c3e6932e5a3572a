"""Throughput and timing precision of the simulated endpoint.

The server runs as ``python -m mlpe_fast.sim.server`` in its own process
(one event loop, one core at most); the client here is a plain blocking
socket that only counts ``data: `` lines, so the figure is what the server
can serve, not what a decoder can parse.

- ``test_zero_delay_events_per_second``: TTFT 0 and ITL 0, streamed chat
  responses of 10, 100 and 1,000 tokens on one keep-alive connection, either
  one request at a time or eight pipelined.  ``extra_info["events_per_s"]``
  counts every SSE event (role, tokens, ``[DONE]``) per second of wall time.
- ``test_h2c_zero_delay_events_per_second``: the same over HTTP/2 with prior
  knowledge (``--http2``): 1 or 64 concurrent streams of 1,000 tokens on one
  connection.  The client is the ``h2`` library with 16 MiB windows, so the
  figure is a floor: part of the core time goes to the client's parsing.
- ``test_timer_lateness``: 20 ms TTFT and 2 ms ITL; ``extra_info`` has the
  percentiles of ``mlpe_send_ns - deadline`` over every token, per timer.

Run::

    PYTHONPATH=src pytest bench/bench_sim_server.py -o python_files='bench_*.py' \\
        --benchmark-disable-gc -s
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


class Served:
    def __init__(self, *flags: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlpe_fast.sim.server", "--port", "0", *flags],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        url = next(word for word in line.split() if word.startswith("http://"))
        self.port = int(url.rsplit(":", 1)[1])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def zero_delay() -> Iterator[Served]:
    served = Served()
    yield served
    served.close()


@pytest.fixture(scope="module")
def zero_delay_h2c() -> Iterator[Served]:
    served = Served("--http2")
    yield served
    served.close()


def chat_request(max_tokens: int) -> bytes:
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
         "max_tokens": max_tokens}
    ).encode()  # fmt: skip
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body


def read_responses(sock: socket.socket, count: int) -> int:
    """Reads ``count`` chunked responses; returns the SSE events seen."""
    buf = bytearray()
    events = done = 0
    while done < count:
        data = sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed")
        buf += data
        # Count whole responses only; keep a tail that may hold a partial marker.
        while (end := buf.find(b"\r\n0\r\n\r\n")) >= 0:
            events += buf.count(b"data: ", 0, end)
            del buf[: end + 7]
            done += 1
    return events


@pytest.mark.parametrize("pipeline", [1, 8], ids=lambda n: f"pipeline{n}")
@pytest.mark.parametrize("tokens", [10, 100, 1000], ids=lambda n: f"tokens{n}")
def test_zero_delay_events_per_second(
    benchmark: Any, zero_delay: Served, tokens: int, pipeline: int
) -> None:
    request = chat_request(tokens)
    batch = request * pipeline
    rounds = max(1, 20_000 // (tokens * pipeline))
    with socket.create_connection(("127.0.0.1", zero_delay.port)) as sock:

        def run() -> int:
            events = 0
            for _ in range(rounds):
                sock.sendall(batch)
                events += read_responses(sock, pipeline)
            return events

        events = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    per_response = tokens + 2  # role chunk, tokens, [DONE]
    assert events == rounds * pipeline * per_response
    median = benchmark.stats.stats.median
    benchmark.extra_info["events"] = events
    benchmark.extra_info["events_per_s"] = round(events / median)
    benchmark.extra_info["responses_per_s"] = round(rounds * pipeline / median)
    print(
        f"\n{tokens} tokens, pipeline {pipeline}: {events / median:,.0f} events/s, "
        f"{rounds * pipeline / median:,.0f} responses/s"
    )


def h2_streams(sock: socket.socket, conn: Any, body: bytes, streams: int) -> int:
    """Opens ``streams`` streams with ``body`` on one HTTP/2 connection, reads
    them to their end; returns the SSE events seen."""
    from h2.events import DataReceived, StreamEnded

    headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"bench"),
               (b":path", b"/v1/chat/completions"), (b"content-type", b"application/json"),
               (b"content-length", b"%d" % len(body))]  # fmt: skip
    bodies: dict[int, list[bytes]] = {}
    for _ in range(streams):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers)
        conn.send_data(sid, body, end_stream=True)
        bodies[sid] = []
    sock.sendall(conn.data_to_send())
    open_streams = streams
    while open_streams:
        data = sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed")
        for event in conn.receive_data(data):
            if isinstance(event, DataReceived):
                bodies[event.stream_id].append(event.data)
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded):
                open_streams -= 1
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
    # Counted at the end: a frame may split an event's "data: ".
    return sum(b"".join(parts).count(b"data: ") for parts in bodies.values())


@pytest.mark.parametrize("streams", [1, 64], ids=lambda n: f"streams{n}")
def test_h2c_zero_delay_events_per_second(
    benchmark: Any, zero_delay_h2c: Served, streams: int
) -> None:
    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.settings import SettingCodes

    tokens = 1000
    body = chat_request(tokens).partition(b"\r\n\r\n")[2]
    rounds = max(1, 64_000 // (tokens * streams))
    window = 16 << 20
    with socket.create_connection(("127.0.0.1", zero_delay_h2c.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        conn.initiate_connection()
        conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: window})
        conn.increment_flow_control_window(window - 65535)

        def run() -> int:
            return sum(h2_streams(sock, conn, body, streams) for _ in range(rounds))

        events = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    per_response = tokens + 2  # role chunk, tokens, [DONE]
    assert events == rounds * streams * per_response
    median = benchmark.stats.stats.median
    benchmark.extra_info["events"] = events
    benchmark.extra_info["events_per_s"] = round(events / median)
    print(f"\nh2c, {streams} streams of {tokens} tokens: {events / median:,.0f} events/s")


@pytest.mark.parametrize("timer", ["timerfd", "loop"])
def test_timer_lateness(benchmark: Any, timer: str) -> None:
    if timer == "timerfd" and not sys.platform.startswith("linux"):
        pytest.skip("timerfd is Linux-only")
    served = Served("--ttft-ms", "20", "--itl-ms", "2", "--timer", timer)
    lateness: list[int] = []
    try:
        with socket.create_connection(("127.0.0.1", served.port)) as sock:
            request = chat_request(25)

            def run() -> None:
                sock.sendall(request)
                buf = bytearray()
                while not buf.endswith(b"\r\n0\r\n\r\n"):
                    buf += sock.recv(1 << 16)
                docs = [
                    json.loads(line[6:])
                    for line in bytes(buf).split(b"\n")
                    if line.startswith(b"data: {")
                ]
                recv = docs[0]["mlpe_recv_ns"]
                for i, doc in enumerate(docs[1:]):
                    lateness.append(doc["mlpe_send_ns"] - (recv + 20_000_000 + i * 2_000_000))

            benchmark.pedantic(run, rounds=20, iterations=1, warmup_rounds=1)
    finally:
        served.close()
    lateness.sort()

    def pct(q: float) -> float:
        return lateness[min(len(lateness) - 1, int(q * len(lateness)))] / 1000

    assert lateness[0] >= 0, "a token left before its deadline"
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        benchmark.extra_info[f"late_us_{name}"] = pct(q)
    benchmark.extra_info["late_us_max"] = lateness[-1] / 1000
    print(
        f"\n{timer}: lateness p50 {pct(0.5):.0f} us, p90 {pct(0.9):.0f} us, "
        f"p99 {pct(0.99):.0f} us, max {lateness[-1] / 1000:.0f} us"
    )
