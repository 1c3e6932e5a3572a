"""The client's throughput ceiling on one engine and on two (``--engines``).

The bar (``--engines N``): with ``--engines 2`` on two cores against nginx
or the simulated endpoint, the client's ceiling in requests/s and SSE
events/s rises compared to one engine.  The figure is reported, not
asserted: this bench only fails when a request fails or the two points did
not issue and record the same requests.

To find the client's ceiling rather than the server's, the server costs as
little CPU as it can and adds no delay, and each response carries many
small events.  Two servers, in this order:

* nginx (``static_sse.py``; skipped with the reason when it is not
  installed) serving a pre-built OpenAI chat-completion stream of
  ``EVENTS`` one-character content chunks between a role chunk and a
  ``finish_reason`` chunk, ending with ``data: [DONE]``.
* the simulated endpoint, with no TTFT, no inter-token delay and
  ``--framing length`` (the whole stream in one write), which always runs.
  It is a Python process, so on two cores it competes with the client for
  CPU more than nginx does: its ceiling is the lower one.

For each server, ``run_point`` (what ``mlpe-fast run`` does, run folder
included) measures one point at concurrency ``CONCURRENCY`` with the
server's ``REQUESTS`` of ``EVENTS`` tokens each, with ``engines=1`` and
then ``engines=2`` (``min_streams_per_engine=1``, so the second point
really is split over two engine processes), ``ROUNDS`` times; the table
shows each one's best round (highest requests/s, the least disturbed) and
the ratio of two engines to one:

* requests/s and SSE events/s (all ``data:`` events, ``[DONE]`` included)
  over the point's tracked duration (``duration_ns`` of
  ``performance/result_summary.json``);
* the client's CPU (all its processes: the driver and the engines, the
  self-audit's ``client CPU``) per request and in cores;
* the server's CPU (its processes' user + system time) in cores, and the
  rest of the machine's busy time (/proc/stat over the records' span):
  other processes, such as tests running beside the bench, give or take
  about 0.1 core (clock ticks; the client's CPU also counts its
  connections' set-up and teardown around the tracked duration).  With
  the machine busy near 2.0 cores the point is at the machine's ceiling;
  a server near 1.0 core is at its own.  One engine is already more than
  one thread (the receive thread reads the sockets beside the event
  loop), so it can use more than one core.

    pytest bench/bench_engines.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.data_files import CHAR_TOKENIZER as TOKENIZER
from tests.data_files import DUMMY_1K as DATASET

from mlpe_fast.config import RunConfig, add_run_arguments, resolve
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.point import PointResult, run_point

from .static_sse import nginx_endpoint, sse_body

MODEL = "mlpe-bench"
CONCURRENCY = 256
EVENTS = 128
# Requests per point: a few seconds of load at each server's ceiling.
REQUESTS = {"nginx": 40960, "simulated": 12288}
ENGINES = (1, 2)
ROUNDS = 3
"""Rounds of (engines=1, engines=2); the table shows each one's best round
(the highest requests/s: the least disturbed by other processes)."""

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the server's CPU time in /proc"
)


# -- the servers --------------------------------------------------------------


@contextlib.contextmanager
def server(name: str, root: Path) -> Iterator[tuple[str, int]]:
    """The server's URL and the pid of its (master) process."""
    if name == "nginx":
        with nginx_endpoint(root, sse_body(EVENTS, MODEL)) as running:
            yield running
    else:
        flags = ("--framing", "length", "--model", MODEL, "--max-output-tokens", str(EVENTS))
        with simulated_endpoint(flags) as url:
            pids = [p for p in _children(os.getpid()) if b"mlpe_fast.sim.server" in _cmdline(p)]
            assert len(pids) == 1, pids
            yield url, pids[0]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3 on)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants: the
    server's CPU, read before and after a point."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        fields = _stat(current)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
            pending += _children(current)
    return total / os.sysconf("SC_CLK_TCK")


# -- the points ---------------------------------------------------------------


class MachineCpu:
    """Samples the machine's busy CPU (/proc/stat) every 50 ms in a thread,
    so that a point's window can be read afterwards: what the client, the
    server and everything else on the machine used while it ran."""

    PERIOD_S = 0.05

    def __init__(self) -> None:
        self._samples: list[tuple[int, int]] = []  # (monotonic ns, busy ticks)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpu", daemon=True)

    @staticmethod
    def _busy_ticks() -> int:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal ...: busy is all but
        # idle, iowait and steal (guest time is already in user).
        return fields[0] + fields[1] + fields[2] + fields[5] + fields[6]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._samples.append((time.monotonic_ns(), self._busy_ticks()))
            self._stop.wait(self.PERIOD_S)

    def __enter__(self) -> MachineCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def cores(self, start_ns: int, end_ns: int) -> float:
        """Busy cores on average from the first sample at or after
        ``start_ns`` to the last one at or before ``end_ns``."""
        inside = [s for s in self._samples if start_ns <= s[0] <= end_ns]
        if len(inside) < 2:
            return float("nan")
        (t_a, busy_a), (t_b, busy_b) = inside[0], inside[-1]
        return (busy_b - busy_a) / os.sysconf("SC_CLK_TCK") / ((t_b - t_a) / 1e9)


def point_config(
    endpoint: str, engines: int, requests: int, report_dir: Path, stamps: str = "kernel"
) -> RunConfig:
    """The configuration ``mlpe-fast run`` builds from these flags."""
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    args = parser.parse_args(
        [
            *("--endpoints", endpoint, "--model", MODEL),
            *("--dataset", f"{DATASET},parser.prompt=text_input"),
            *("--tokenizer", str(TOKENIZER)),
            *("--concurrency", str(CONCURRENCY), "--num-samples", str(requests)),
            *("--max-output-tokens", str(EVENTS)),
            *("--engines", str(engines), "--min-streams-per-engine", "1"),
            *("--report-dir", str(report_dir)),
            *("--receive-stamps", stamps),
        ]
    )
    return resolve(args)


def measure(
    endpoint: str, server_pid: int, engines: int, requests: int, report_dir: Path, stamps: str
) -> dict[str, float]:
    import uvloop

    config = point_config(endpoint, engines, requests, report_dir, stamps)
    server_before = tree_cpu_s(server_pid)
    with MachineCpu() as machine:
        result: PointResult = uvloop.run(run_point(config, endpoint, progress=False))
    server_cpu_s = tree_cpu_s(server_pid) - server_before
    records = result.records
    failed = [r for r in records if r.error_class is not None]
    assert not failed, f"{len(failed)} requests failed: {failed[0].error_class}: " + (
        failed[0].error_message or ""
    )
    assert result.state == "complete" and result.failure is None, result.failure
    assert len(records) == requests == result.stats.issued == result.stats.completed
    assert result.stats.failed == 0
    assert result.audit.engines == engines
    assert result.audit.duplicate_queries == 0
    assert len({r.sample_id for r in records}) == requests
    for record in records:
        assert record.response.content_events == EVENTS
        assert record.response.done and record.response.finish_reason in ("stop", "length")
    summary = json.loads((report_dir / "performance" / "result_summary.json").read_text())
    assert summary["duration_ns"] == result.summary["duration_ns"]
    duration_s = summary["duration_ns"] / 1e9
    # Linux: the records' stamps are on CLOCK_MONOTONIC, as the sampler's.
    start_ns, end_ns = min(r.t_issue for r in records), max(r.t_end for r in records)
    client_cores = result.audit.cpu_s / duration_s
    server_cores = server_cpu_s / duration_s
    machine_cores = machine.cores(start_ns, end_ns)
    events = sum(r.response.events for r in records)
    return {
        "duration_s": duration_s,
        "span_s": (end_ns - start_ns) / 1e9,
        "requests_per_s": requests / duration_s,
        "events_per_s": events / duration_s,
        "cpu_s": result.audit.cpu_s,
        "cpu_us_per_request": result.audit.cpu_s / requests * 1e6,
        "client_cores": client_cores,
        "server_cores": server_cores,
        "machine_cores": machine_cores,
        "other_cores": machine_cores - client_cores - server_cores,
        "events": events,
    }


@pytest.mark.parametrize(
    ("name", "stamps"), [("nginx", "kernel"), ("nginx", "read"), ("simulated", "kernel")]
)
def test_engines_ceiling(
    benchmark: Any, name: str, stamps: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``stamps``: with kernel receive stamps (the default) each engine has
    a receive thread beside its loop, so one engine already uses more than
    a core; with read-time stamps one engine is one thread."""
    root = tmp_path_factory.mktemp(f"engines-{name}-{stamps}")
    rounds: dict[int, list[dict[str, float]]] = {e: [] for e in ENGINES}
    requests = REQUESTS[name]
    with server(name, root / "server") as (endpoint, pid):

        def run_both() -> None:
            n = len(rounds[1])
            for engines in ENGINES:
                folder = root / f"run-e{engines}-{n}"
                rounds[engines].append(measure(endpoint, pid, engines, requests, folder, stamps))

        benchmark.pedantic(run_both, rounds=ROUNDS, iterations=1)
    assert len({f["events"] for runs in rounds.values() for f in runs}) == 1
    best = {e: max(runs, key=lambda f: f["requests_per_s"]) for e, runs in rounds.items()}
    benchmark.extra_info.update({f"e{e}_{k}": v for e, f in best.items() for k, v in f.items()})
    print()
    print(table(f"{name}, {stamps} receive stamps", requests, best))
    for engines, runs in rounds.items():
        each = ", ".join(f"{f['requests_per_s']:,.0f}" for f in runs)
        print(f"  engines={engines}, requests/s by round: {each}")


def table(name: str, requests: int, best: dict[int, dict[str, float]]) -> str:
    one, two = best[1], best[2]
    rows = [
        ("requests/s", "requests_per_s", "{:,.0f}"),
        ("SSE events/s", "events_per_s", "{:,.0f}"),
        ("client CPU µs/request", "cpu_us_per_request", "{:,.1f}"),
        ("client CPU, cores", "client_cores", "{:,.2f}"),
        ("server CPU, cores", "server_cores", "{:,.2f}"),
        ("rest of machine, cores", "other_cores", "{:,.2f}"),
        ("machine busy, cores", "machine_cores", "{:,.2f}"),
        ("duration s", "duration_s", "{:,.2f}"),
    ]
    title = (
        f"{name}: c={CONCURRENCY}, {requests} requests x {EVENTS} tokens "
        f"({one['events'] / requests:.0f} SSE events each), "
        f"{os.cpu_count()} cores, best of {ROUNDS} rounds"
    )
    lines = [title, f"{'':24}{'engines=1':>14}{'engines=2':>14}{'2 / 1':>9}"]
    for label, key, fmt in rows:
        # No ratio for what other processes did (it may be 0 or negative).
        ratio = f"{two[key] / one[key]:>8.2f}x" if key != "other_cores" and one[key] else ""
        lines.append(f"{label:24}{fmt.format(one[key]):>14}{fmt.format(two[key]):>14}{ratio}")
    return "\n".join(lines)
