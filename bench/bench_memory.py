"""Peak resident memory of ``mlpe-fast run`` by concurrency and run length
(issue 23), beside the issue's figures from before the fix.

The simulated endpoint runs in its own process (64-token answers, no delay);
``mlpe-fast run`` runs in another, as a user runs it (synthetic 64-token
prompts, the char tokenizer, a run folder), and its peak resident set is
the kernel's (``wait4``'s ``ru_maxrss``).  Cases: concurrency 16 and 1,024
at 2,000 requests, 1,024 at 100,000 and at 300,000 (``MLPE_MEMORY_LONG=1``
adds 1,000,000, about five minutes here).  The issue's bars: at most 32 KiB
per idle connection, at most 150 MB at concurrency 1,024 and 100,000
requests, flat from 100,000 to 1,000,000.  The figures are reported, and
each case must end with every request recorded; the bars are the docs',
measured here (``docs/performance.md``).

With ``--engines 2`` (concurrency 256 at 20,000 and 100,000 requests) the
peak of each process is its own ``VmHWM`` (``/proc/<pid>/status``, read
every 20 ms from the run and each process under it while they live; the
kernel's ``ru_maxrss`` of the run would be the largest of them, not each):
the driver's, each engine's, and their sum.

    pytest bench/bench_memory.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.demo import simulated_endpoint

CHAR_TOKENIZER = Path(__file__).resolve().parents[1] / "tests" / "data" / "tokenizers" / "char"
TOKENS = 64
# (concurrency, requests): the figures before the fix, in MB
# (88 MB, 393 MB, 780 MB; "about 4 KB more per request" past that).
BASELINE_MB = {(16, 2_000): 88.0, (1024, 2_000): 393.0, (1024, 100_000): 780.0}
# After idle connections were bounded and records kept without their texts,
# before they were kept as columns (docs/performance.md), in MB.
RECORDS_AS_OBJECTS_MB = {(16, 2_000): 91.0, (1024, 2_000): 118.0, (1024, 100_000): 371.0}
RECORDS_AS_OBJECTS_MB[1024, 300_000] = 897.0
# Records as columns, all in memory, before their rows were spilled to disk, in MB.
COLUMNS_IN_MEMORY_MB = {(16, 2_000): 87.0, (1024, 2_000): 94.0, (1024, 100_000): 268.0}
COLUMNS_IN_MEMORY_MB[1024, 300_000] = 581.0
# Counter jobs, index map and rows on disk, before glibc's thresholds were
# fixed and the end-of-point figures read a block at a time, in MB.
FIGURES_WHOLE_MB = {(16, 2_000): 82.0, (1024, 2_000): 86.0, (1024, 100_000): 129.0}
FIGURES_WHOLE_MB.update({(1024, 300_000): 188.0, (1024, 1_000_000): 376.0})
CASES = [(16, 2_000), (1024, 2_000), (1024, 100_000), (1024, 300_000)]
if os.environ.get("MLPE_MEMORY_LONG"):
    CASES.append((1024, 1_000_000))
ENGINE_CASES = [(256, 20_000), (256, 100_000)]
# --engines 2 before the index map was spooled (docs/performance.md), in MB:
# the driver's peak and the sum over its processes.
ENGINES_BEFORE_MB = {(256, 20_000): (133.0, 273.0), (256, 100_000): (262.0, 403.0)}


def baseline_mb(concurrency: int, requests: int) -> float:
    """The issue's figure, extrapolated at 4 KB per request past 100,000."""
    if (concurrency, requests) in BASELINE_MB:
        return BASELINE_MB[concurrency, requests]
    return BASELINE_MB[1024, 100_000] + (requests - 100_000) * 4e-3


def run_argv(url: str, concurrency: int, requests: int, folder: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mlpe_fast",
        "run",
        *("--endpoints", url, "--model", "mlpe-sim", "--tokenizer", str(CHAR_TOKENIZER)),
        *("--dataset", f"synthetic:isl={TOKENS},osl={TOKENS},samples=1000,seed=1"),
        *("--concurrency", str(concurrency), "--num-samples", str(requests)),
        *("--max-output-tokens", str(TOKENS), "--no-progress", "--report-dir", str(folder)),
    ]


def peak_of_run(url: str, concurrency: int, requests: int, folder: Path) -> tuple[float, int]:
    """``mlpe-fast run``'s peak resident memory in MB and its exit status."""
    argv = run_argv(url, concurrency, requests, folder)
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as process:
        assert process.stderr is not None
        err = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return usage.ru_maxrss / 1000, process.returncode  # KiB on Linux -> MB


@pytest.mark.parametrize(("concurrency", "requests"), CASES, ids=lambda v: f"{v:,}")
def test_peak_memory(benchmark: Any, tmp_path: Path, concurrency: int, requests: int) -> None:
    if sys.platform != "linux":
        pytest.skip("ru_maxrss of a child in KiB, the receive thread: Linux")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * concurrency + 256:  # the child inherits it: a socket per connection
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * concurrency + 1024), hard))
    flags = ("--output-len", str(TOKENS), "--output-len-dist", "fixed", "--seed", "1")
    result: dict[str, float] = {}

    def measure() -> None:
        with simulated_endpoint(flags) as url:
            result["mb"], _ = peak_of_run(url, concurrency, requests, tmp_path / "run")

    benchmark.pedantic(measure, rounds=1, iterations=1)
    summary = json.loads((tmp_path / "run" / "performance" / "result_summary.json").read_text())
    assert summary["n_samples_issued"] == summary["n_samples_completed"] == requests
    before = baseline_mb(concurrency, requests)
    benchmark.extra_info.update(peak_mb=result["mb"], baseline_mb=before)
    print(
        f"\nconcurrency {concurrency:,}, {requests:,} requests: peak {result['mb']:.0f} MB, "
        f"before {before:.0f} MB{'' if (concurrency, requests) in BASELINE_MB else ' (est.)'}"
        f" = {result['mb'] / before:.2f}x"
        + (
            f"; records as objects {objects:.0f} MB = {result['mb'] / objects:.2f}x"
            if (objects := RECORDS_AS_OBJECTS_MB.get((concurrency, requests)))
            else ""
        )
        + (
            f"; columns in memory {columns:.0f} MB = {result['mb'] / columns:.2f}x"
            if (columns := COLUMNS_IN_MEMORY_MB.get((concurrency, requests)))
            else ""
        )
        + (
            f"; figures of whole columns {whole:.0f} MB = {result['mb'] / whole:.2f}x"
            if (whole := FIGURES_WHOLE_MB.get((concurrency, requests)))
            else ""
        )
    )


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every process under it (``/proc/<pid>/task/*/children``)."""
    found = [pid]
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            for child in children:
                found += _process_tree(int(child))
    return found


def _high_water_kb(pid: int) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def peaks_by_process(argv: list[str]) -> tuple[float, list[float]]:
    """The run's own peak and those of the processes under it, in MB
    (module doc), largest first; the run must succeed."""
    peaks: dict[int, int] = {}
    done = threading.Event()
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as process:

        def sample() -> None:
            while not done.is_set():
                for pid in _process_tree(process.pid):
                    if (kb := _high_water_kb(pid)) is not None:
                        peaks[pid] = max(peaks.get(pid, 0), kb)
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert process.stderr is not None
        err = process.stderr.read()
        process.wait()
        done.set()
        sampler.join()
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    own = peaks.pop(process.pid)
    return own / 1000, sorted((kb / 1000 for kb in peaks.values()), reverse=True)


@pytest.mark.parametrize(("concurrency", "requests"), ENGINE_CASES, ids=lambda v: f"{v:,}")
def test_peak_memory_on_two_engines(
    benchmark: Any, tmp_path: Path, concurrency: int, requests: int
) -> None:
    if sys.platform != "linux":
        pytest.skip("/proc/<pid>/status: Linux")
    flags = ("--output-len", str(TOKENS), "--output-len-dist", "fixed", "--seed", "1")
    result: dict[str, Any] = {}

    def measure() -> None:
        with simulated_endpoint(flags) as url:
            argv = [*run_argv(url, concurrency, requests, tmp_path / "run"), "--engines", "2"]
            result["driver"], result["others"] = peaks_by_process(argv)

    benchmark.pedantic(measure, rounds=1, iterations=1)
    summary = json.loads((tmp_path / "run" / "performance" / "result_summary.json").read_text())
    assert summary["n_samples_issued"] == summary["n_samples_completed"] == requests
    report = json.loads((tmp_path / "run" / "distributed" / "engines.json").read_text())
    assert report["engines"] == 2
    driver, others = result["driver"], result["others"]
    total = driver + sum(others)
    before_driver, before_total = ENGINES_BEFORE_MB[concurrency, requests]
    benchmark.extra_info.update(driver_mb=driver, processes_mb=others, total_mb=total)
    print(
        f"\n--engines 2, concurrency {concurrency:,}, {requests:,} requests: driver {driver:.0f} MB"
        f" ({driver / before_driver:.2f}x of {before_driver:.0f}), under it "
        + ", ".join(f"{mb:.0f}" for mb in others)
        + f" MB; all {total:.0f} MB ({total / before_total:.2f}x of {before_total:.0f})"
    )
