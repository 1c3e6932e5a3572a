"""Segment stamps (``--receive-stamps packet``) against kernel and read
stamps, idle and beside other load (issue 23).

The simulated endpoint reports, in each response's ``usage``, the
CLOCK_MONOTONIC time it wrote the first token (``mlpe_first_send_ns``, taken
just before the write); the client's stamps are on the same clock, so
``t_first - mlpe_first_send_ns`` is how far the client's first-token stamp
is from the server's own.  Rows: the machine as it is ("idle"), two
busy-loop processes ("hogs", one per core of a 2-core machine), and a
``nice 19`` compile loop ("compile"); for HTTP/1.1 at concurrency 64 and
for HTTP/2 with 32 streams on one connection.  Each figure line carries the
load average (``/proc/loadavg``) as it was, the machine being shared.

    pytest bench/bench_packet_stamps.py -o python_files='bench_*.py' -s

Skipped where a packet socket cannot be opened (CAP_NET_RAW).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.engine import RequestRecord

from .bench_timing import closed_loop

ROOT = Path(__file__).resolve().parents[1]
REQUESTS = 1024
TOKENS = 16


def _capture_problem() -> str:
    if not sys.platform.startswith("linux"):
        return "packet sockets are Linux's"
    from mlpe_fast.engine._pktstamp import PacketCapture

    try:
        PacketCapture(9, "127.0.0.1").close()
    except OSError as error:
        return str(error)
    return ""


PROBLEM = _capture_problem()
pytestmark = pytest.mark.skipif(bool(PROBLEM), reason=f"no packet capture: {PROBLEM}")


@contextlib.contextmanager
def background(row: str, tmp: Path) -> Iterator[None]:
    """The row's other load, stopped on the way out."""
    if row == "idle":
        yield
        return
    if row == "hogs":
        commands = [[sys.executable, "-c", "while True: pass"]] * 2
    else:
        out = tmp / "unit.o"
        loop = f"while :; do gcc -O2 -c {ROOT / 'csrc' / 'mlpe_oai.c'} -o {out}; done"
        commands = [["nice", "-n", "19", "sh", "-c", loop]]
    processes = [subprocess.Popen(c, start_new_session=True) for c in commands]
    try:
        yield
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                import os
                import signal

                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module", params=["h1", "h2"])
def endpoint(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    flags = ("--ttft-ms", "20", *(("--http2",) if request.param == "h2" else ()))
    with simulated_endpoint(flags) as url:
        yield request.param, url


OPTIONS = {
    "packet": {"kernel_stamps": True, "packet_stamps": True},
    "kernel": {"kernel_stamps": True},
    "read": {"kernel_stamps": False},
}


def _us(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q, method="lower")) / 1e3


@pytest.mark.parametrize("row", ["idle", "hogs", "compile"])
@pytest.mark.parametrize("stamps", ["packet", "kernel", "read"])
def test_first_token_stamp_against_the_servers(
    benchmark: Any, endpoint: tuple[str, str], row: str, stamps: str, tmp_path: Path
) -> None:
    import uvloop

    protocol, url = endpoint
    shape: dict[str, Any] = (
        {"concurrency": 32, "http2": True, "max_connections": 1}
        if protocol == "h2"
        else {"concurrency": 64}
    )
    runs: list[tuple[list[RequestRecord], Any]] = []
    with background(row, tmp_path):
        load = Path("/proc/loadavg").read_text().split()[0]
        benchmark.pedantic(
            lambda: runs.append(
                uvloop.run(
                    closed_loop(url, requests=REQUESTS, tokens=TOKENS, **shape, **OPTIONS[stamps])
                )
            ),
            rounds=1,
        )
    records, client = runs[-1]
    assert all(r.ok for r in records), [r.error_message for r in records if not r.ok][:3]
    if stamps == "packet":
        assert client.packet_note == "", client.packet_note
    send = np.array([r.response.usage["mlpe_first_send_ns"] for r in records], dtype=np.int64)  # type: ignore[index]
    first = np.array([r.t_first for r in records], dtype=np.int64)
    delays = first - send
    segment = float(np.mean([r.segment_stamp == 1 for r in records]))
    figures = {
        "delay_us_p50": _us(delays, 50),
        "delay_us_p99": _us(delays, 99),
        "segment_stamped_share": segment,
        "load_1min": float(load),
    }
    benchmark.extra_info.update(figures)
    print(
        f"\n{protocol} {row:8s} {stamps:7s} t_first - server send: p50 "
        f"{figures['delay_us_p50']:8.1f} µs  p99 {figures['delay_us_p99']:8.1f} µs  "
        f"segment-stamped {segment:.1%}  load {load}"
    )
