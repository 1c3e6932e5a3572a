"""LiveCodeBench grading throughput: programs per second through the
sandbox (:func:`mlpe_fast.accuracy.livecodebench.grade_programs`, a pool as
wide as the cores), and its overhead against the same program and tests run
with a plain ``subprocess.run`` of the harness in a temporary directory (no
guard, no limits, no network namespace, no clean environment), side by side
in one run.

    PYTHONPATH=src pytest bench/bench_livecodebench.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import msgspec
import pytest

from mlpe_fast.accuracy import lcb_harness
from mlpe_fast.accuracy.livecodebench import LiveCodeBenchOptions, ProblemTests, grade_programs
from mlpe_fast.accuracy.sandbox import network_isolation

PROGRAMS = 64
CODE = "a, b = map(int, input().split())\nprint(a + b)"
TESTS = ProblemTests(tuple(f"{i} {i}\n" for i in range(10)), tuple(f"{2 * i}\n" for i in range(10)))
WORKERS = len(os.sched_getaffinity(0))
OPTIONS = LiveCodeBenchOptions(timeout_s=6, workers=WORKERS)


def _plain(_: int) -> bool:
    job = msgspec.json.encode(
        {"code": CODE, "fn_name": None, "inputs": TESTS.inputs, "outputs": TESTS.outputs,
         "timeout_s": 6}
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as cwd:  # the harness writes each test's stdin there
        done = subprocess.run(
            [sys.executable, lcb_harness.__file__],
            input=job,
            capture_output=True,
            check=True,
            cwd=cwd,
        )
    return b'error": null' in done.stdout


def _sandboxed() -> list[bool]:
    return grade_programs([(CODE, TESTS)] * PROGRAMS, OPTIONS)


def _unsandboxed() -> list[bool]:
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(_plain, range(PROGRAMS)))


def test_sandbox_throughput_and_overhead(benchmark: pytest.FixtureRequest) -> None:
    began = time.perf_counter()
    assert all(_unsandboxed())
    plain_s = time.perf_counter() - began
    verdicts = benchmark.pedantic(_sandboxed, rounds=3, iterations=1)  # type: ignore[attr-defined]
    assert all(verdicts)
    sandbox_s = benchmark.stats.stats.mean  # type: ignore[attr-defined]
    print(
        f"\n{PROGRAMS} programs x {len(TESTS.inputs)} tests, {WORKERS} workers, "
        f"network isolation {network_isolation()}: sandbox {PROGRAMS / sandbox_s:.1f} programs/s, "
        f"plain subprocess.run {PROGRAMS / plain_s:.1f} programs/s, "
        f"overhead x{sandbox_s / plain_s:.2f}"
    )
