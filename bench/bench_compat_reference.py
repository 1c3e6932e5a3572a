"""The reference client (``inference-endpoint``) as it is, and through
``mlpe-fast endpoints`` (mlpe-fast's engine under it), against the simulated
endpoint at concurrency 16 and 64.

For each run it reports:

* TTFT p50/p99 against the endpoint's send stamps: the reference's
  RECV_FIRST (its ``events.jsonl``) minus the moment the simulated endpoint
  sent that request's first token (same CLOCK_MONOTONIC, so Linux only);
* TTFT p50/p99 as the reference's own ``result_summary.json`` says
  (RECV_FIRST minus ISSUED);
* client CPU (user + system of the client process and the services it
  spawned and reaped), wall time, start-up time (process start to the
  first ISSUED), and the samples whose COMPLETE precedes their RECV_FIRST
  (must be 0).

The send stamps: the endpoint runs in its own process (this file, run as a
script) with its stream jobs wrapped so that each request's first-token
send stamp (``ResponseJob.first_send``, the stamp of ``usage.mlpe_first_send_ns``)
is logged beside its oracle answer.  The endpoint answers in oracle mode
from a dataset whose reference output starts with the row number, so each
logged stamp names its dataset row; the reference's ``sample_idx_map.json``
names each sample's row, which pairs every RECV_FIRST with its send stamp.

    PYTHONPATH=src /work/ref312/bin/python -m pytest bench/bench_compat_reference.py \
        -o python_files='bench_*.py' -s

``MLPE_BENCH_REPEATS`` (default 2) runs each configuration that many times;
``MLPE_BENCH_OUT`` names a JSON file for the figures.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.demo import stop_process

ROOT = Path(__file__).resolve().parents[1]
# tests/data_files.py names these; this file also runs as a plain script
# (--serve-logged, below), where the tests package is not importable.
DATA = ROOT / "tests" / "data"
TOKENIZER = DATA / "tokenizers" / "char"
SOURCE_DATASET = DATA / "datasets" / "dummy_1k.jsonl"

TTFT_MS = 50
ITL_MS = 2
OUTPUT_TOKENS = 50
TOKEN_CHARS = 4
#: concurrency -> samples (at most the dataset's 1,000 rows, so that every
#: sample's prompt, and so its oracle answer, is its own).
CONFIGS = {16: 640, 64: 1000}
TIMEOUT_S = 300

HAVE_REFERENCE = importlib.util.find_spec("inference_endpoint") is not None

pytestmark = [
    pytest.mark.skipif(
        not HAVE_REFERENCE,
        reason="reference client not installed: module inference_endpoint (package "
        "inference-endpoint 0.1.0, Python >= 3.12) is not importable",
    ),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"),
        reason="needs one monotonic clock for two processes",
    ),
]


# -- the simulated endpoint, logging its first-token send stamps ---------------


def serve_logged(log_path: str, flags: Sequence[str]) -> int:
    """Runs ``mlpe-fast serve FLAGS`` until SIGTERM, then writes one line
    per streamed response: its oracle answer's row, when the request was
    read and when its first token was sent."""
    from mlpe_fast.sim import _jobs
    from mlpe_fast.sim.server import main

    sent: list[tuple[str, int, int]] = []
    fire = _jobs.StreamJob.fire

    def logged_fire(self: Any, now_ns: int) -> int | None:
        before = self.first_send
        due = fire(self, now_ns)
        if not before and self.first_send:
            sent.append((self.answer[:4] if self.answer else "", self.recv, self.first_send))
        return due

    _jobs.StreamJob.fire = logged_fire  # type: ignore[method-assign]
    status = main(list(flags))
    with open(log_path, "w", encoding="utf-8") as out:
        for row, recv_ns, first_send_ns in sent:
            out.write(json.dumps({"row": row, "recv_ns": recv_ns, "first_send_ns": first_send_ns}))
            out.write("\n")
    return status


def oracle_dataset(path: Path) -> None:
    """dummy_1k's prompts; each reference output is its row number padded
    to exactly ``OUTPUT_TOKENS`` tokens of ``TOKEN_CHARS`` characters."""
    with SOURCE_DATASET.open(encoding="utf-8") as source, path.open("w", encoding="utf-8") as out:
        for i, line in enumerate(source):
            row = json.loads(line)
            answer = f"{i:04d}" + " abc" * (OUTPUT_TOKENS - 1)
            out.write(json.dumps({"text_input": row["text_input"], "ground_truth": answer}))
            out.write("\n")


@contextmanager
def logged_endpoint(dataset: Path, log: Path) -> Iterator[str]:
    flags = [
        "--port", "0",
        "--ttft-ms", str(TTFT_MS), "--ttft-dist", "fixed",
        "--itl-ms", str(ITL_MS), "--itl-dist", "fixed",
        "--oracle", f"{dataset},parser.prompt=text_input,ground_truth=ground_truth",
        "--oracle-token-chars", str(TOKEN_CHARS),
    ]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-logged", str(log), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if " at http" not in line:
            proc.kill()
            raise RuntimeError(f"the simulated endpoint did not start: {line or proc.stderr}")
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        stop_process(proc, grace_s=30)  # SIGTERM: the endpoint stops and writes its log


# -- one client run ---------------------------------------------------------------


def client_command(kind: str) -> list[str]:
    if kind == "launcher":
        return [sys.executable, "-m", "mlpe_fast.compat.endpoints"]
    script = Path(sys.executable).parent / "inference-endpoint"
    if script.exists():  # the reference's own console script, unmodified
        return [str(script)]
    return [sys.executable, "-c", "from inference_endpoint.main import run; run()"]


def run_client(
    kind: str, url: str, dataset: Path, concurrency: int, samples: int, report: Path
) -> dict[str, Any]:
    args = [
        "benchmark", "online",
        "--endpoints", url, "--model", "mlpe-sim",
        "--tokenizer", str(TOKENIZER),
        "--dataset", f"{dataset},parser.prompt=text_input",
        "--no-cpu-affinity", "--workers", "1",
        "--load-pattern", "concurrency", "--concurrency", str(concurrency),
        "--num-samples", str(samples), "--duration", "0",
        "--client.warmup-connections", str(concurrency),
        "--report-dir", str(report),
    ]  # fmt: skip
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t_start = time.monotonic_ns()
    done = subprocess.run(
        [*client_command(kind), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    wall_s = (time.monotonic_ns() - t_start) / 1e9
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        # The reference logs to stdout; its errors are the lines that say so.
        errors = [line for line in done.stdout.splitlines() if " ERROR " in line]
        raise AssertionError(
            f"{kind} exited {done.returncode}: {' / '.join(errors[-5:]) or done.stderr[-2000:]}"
        )
    return {
        "kind": kind,
        "concurrency": concurrency,
        "samples": samples,
        "load_1min": load,
        "t_start": t_start,
        "wall_s": wall_s,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
    }


def percentile(values: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="lower"))


def analyse(run: dict[str, Any], report: Path, log: Path) -> dict[str, Any]:
    events: dict[str, dict[str, int]] = defaultdict(dict)
    first_issued: int | None = None
    with (report / "events.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            uuid, kind, t_ns = event["sample_uuid"], event["event_type"], event["timestamp_ns"]
            if not uuid:
                continue
            events[uuid].setdefault(kind, t_ns)
            if kind == "sample.issued" and (first_issued is None or t_ns < first_issued):
                first_issued = t_ns
    rows = json.loads((report / "sample_idx_map.json").read_text())["performance"]
    sent: dict[int, list[tuple[int, int]]] = defaultdict(list)
    with log.open(encoding="utf-8") as lines:
        for line in lines:
            entry = json.loads(line)
            sent[int(entry["row"])].append((entry["recv_ns"], entry["first_send_ns"]))
    # A row asked more than once: pair its samples in issue order with its
    # sends in arrival order.
    by_row: dict[int, list[str]] = defaultdict(list)
    for uuid, row in rows.items():
        by_row[int(row)].append(uuid)
    against_send: list[float] = []
    true_ttft: list[float] = []
    for row, uuids in by_row.items():
        uuids.sort(key=lambda u: events[u].get("sample.issued", 0))
        for uuid, (recv_ns, first_send_ns) in zip(uuids, sorted(sent[row]), strict=False):
            recv_first = events[uuid].get("sample.recv_first")
            if recv_first is not None:
                against_send.append((recv_first - first_send_ns) / 1e6)
                true_ttft.append((first_send_ns - recv_ns) / 1e6)
    inverted = sum(
        1
        for row in events.values()
        if "sample.complete" in row
        and "sample.recv_first" in row
        and row["sample.complete"] < row["sample.recv_first"]
    )
    summary = json.loads((report / "performance" / "result_summary.json").read_text())
    ttft = summary["ttft"]["percentiles"]
    assert first_issued is not None
    return {
        **run,
        "matched": len(against_send),
        "completed": summary["n_samples_completed"],
        "failed": summary["n_samples_failed"],
        "send_ttft_p50_ms": percentile(against_send, 50),
        "send_ttft_p99_ms": percentile(against_send, 99),
        "summary_ttft_p50_ms": ttft["50.0"] / 1e6,
        "summary_ttft_p99_ms": ttft["99.0"] / 1e6,
        "server_ttft_p50_ms": percentile(true_ttft, 50),
        "startup_s": (first_issued - run["t_start"]) / 1e9,
        "complete_before_recv_first": inverted,
    }


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| client | conc. | samples | RECV_FIRST - send stamp p50 / p99 (ms) | result_summary TTFT "
        "p50 / p99 (ms) | client CPU (s) | wall (s) | start-up (s) | COMPLETE < RECV_FIRST "
        "| load (1 min) |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    names = {"reference": "reference, 1 worker", "launcher": "mlpe-fast endpoints"}
    lines = [head]
    for r in results:
        lines.append(
            f"| {names[r['kind']]} | {r['concurrency']} | {r['matched']}/{r['samples']} "
            f"| {r['send_ttft_p50_ms']:.2f} / {r['send_ttft_p99_ms']:.2f} "
            f"| {r['summary_ttft_p50_ms']:.2f} / {r['summary_ttft_p99_ms']:.2f} "
            f"| {r['cpu_s']:.2f} | {r['wall_s']:.2f} | {r['startup_s']:.2f} "
            f"| {r['complete_before_recv_first']} | {r['load_1min']:.2f} |"
        )
    return "\n".join(lines)


def test_reference_and_launcher_against_send_stamps(tmp_path: Path) -> None:
    repeats = int(os.environ.get("MLPE_BENCH_REPEATS", "2"))
    dataset = tmp_path / "oracle.jsonl"
    oracle_dataset(dataset)
    results: list[dict[str, Any]] = []
    for concurrency, samples in CONFIGS.items():
        for repeat in range(repeats):
            for kind in ("reference", "launcher"):
                where = tmp_path / f"{kind}-c{concurrency}-r{repeat}"
                log = where.with_suffix(".sent.jsonl")
                with logged_endpoint(dataset, log) as url:
                    run = run_client(kind, url, dataset, concurrency, samples, where)
                result = analyse(run, where, log)
                results.append(result)
                print(
                    f"\n{kind} c{concurrency} run {repeat + 1}: RECV_FIRST - send stamp p50 "
                    f"{result['send_ttft_p50_ms']:.2f} ms, p99 {result['send_ttft_p99_ms']:.2f} ms",
                    flush=True,
                )
                shutil.rmtree(where, ignore_errors=True)
    print("\n" + table(results))
    out = os.environ.get("MLPE_BENCH_OUT")
    if out:
        Path(out).write_text(json.dumps(results, indent=1))
    for result in results:
        assert result["complete_before_recv_first"] == 0, result
        assert result["failed"] == 0 and result["completed"] == result["samples"], result
        assert result["matched"] == result["samples"], result


if __name__ == "__main__" and sys.argv[1:2] == ["--serve-logged"]:
    sys.exit(serve_logged(sys.argv[2], sys.argv[3:]))
