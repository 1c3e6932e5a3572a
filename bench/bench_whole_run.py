"""Whole-run CPU of ``mlpe-fast run`` with token counting (issue 23).

The user's command, in its own process, against the simulated endpoint (its
oracle mode: each prompt answered with its dataset row's text, 4 characters
per event, no delays), concurrency 64, a byte-level BPE tokenizer trained on
the spot (GPT-2 pre-tokenizer: the native counter's ``gpt2`` family).  The
client process's CPU (user + system, all threads, from ``wait4``) is taken
at two run sizes; the difference over the difference in requests is the
marginal cost of a request, free of start-up (imports, tokenizer loading,
the run folder's fixed part).  Per request: 64-event answers; per event:
512-event answers, the marginal cost over their events.

Two texts: prose (a Zipf-like vocabulary of 300 words) and one repeated
character.  Two counters: the C one (the default) and, for "before", the
Python twin (the command run with the native counter's class taken away,
as where it is not built).  Each case runs ``ROUNDS`` times, interleaved,
and the median is reported.

``test_whole_run_cpu_static``: the same command against nginx serving one
prebuilt stream (``static_sse.py``: the first prose answer of the dataset,
4 characters per event, as the oracle would send it), the server costing
next to nothing and sending each answer in one ``sendfile``; the C counter
only, run sizes 2,000 -> 14,000 requests (300 -> 2,100 for per event), and
the load phase's CPU (the self-audit's ``cpu_s``) beside the whole run's.

``test_whole_run_instructions`` (opt in: ``MLPE_BENCH_CALLGRIND=1``, needs
valgrind; about 2 minutes a tree): the same command against nginx (64-event
prose answers) under ``valgrind --tool=callgrind``, whose count of the
instructions the process ran in user space (all threads, the kernel's
excluded) does not move with the machine's load.  Marginal per request
between 500 and 2,000 requests, for this tree and, side by side, for the
tree whose ``src`` (extensions built in place) ``MLPE_BENCH_BASELINE_SRC``
names: the A/B that the wall-clock CPU above cannot resolve on a shared
VM.  Valgrind runs the threads one at a time, so the load's timing differs
from a real run; the instructions a request costs do not.

Each test also prints this machine's interpreter speed (``sum(range(1000))``,
best of 5): the absolute figures move with it from one VM to the next
(``docs/performance.md``), the ratios in one run do not.

Run::

    PYTHONPATH=src pytest bench/bench_whole_run.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import timeit
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.demo import simulated_endpoint

from .bench_tokens import TextMaker, prose_answers, train_bpe
from .static_sse import nginx_endpoint, sse_body

CONCURRENCY = 64
ROUNDS = int(os.environ.get("MLPE_BENCH_WHOLE_RUN_ROUNDS", "3"))
TOKEN_CHARS = 4
# (events per answer, smaller run, larger run)
SHAPES = {"per request": (64, 2_000, 8_000), "per event": (512, 300, 1_200)}

# The command itself; for "twin" the C counter's class is removed first, so
# that the selector takes the Python fast path (metrics/_bpe.py).
WRAPPER = """
import os, sys
if os.environ.get("MLPE_BENCH_COUNTER") == "twin":
    import mlpe_fast.metrics._bpe as selector
    selector.NativeBPECounter = None
from mlpe_fast.cli import main
sys.exit(main(sys.argv[1:]))
"""


def interpreter_speed() -> str:
    """One line on how fast this machine runs Python bytecode."""
    best = min(timeit.repeat("sum(range(1000))", number=20_000, repeat=5)) / 20_000
    return f"(this machine: sum(range(1000)) in {best * 1e6:.1f} us, best of 5)"


def write_dataset(path: Path, kind: str, events: int) -> None:
    chars = events * TOKEN_CHARS
    if kind == "prose":
        texts = ["".join(a)[:chars] for a in prose_answers(200, chars // 3 + 8)]
    else:
        texts = ["a" * chars] * 200
    with path.open("w") as rows:
        for i, text in enumerate(texts):
            assert len(text) == chars
            row = {"prompt": f"Question {i}: tell me more.", "ground_truth": text}
            rows.write(json.dumps(row) + "\n")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("whole-run")
    tokenizer = root / "tokenizer"
    tokenizer.mkdir()
    train_bpe(TextMaker(), tokenizer / "tokenizer.json")
    return {"root": root, "tokenizer": tokenizer}


def run_command(
    url: str, dataset: Path, tokenizer: Path, samples: int, out: Path, *extra: str
) -> list[str]:
    """The user's ``mlpe-fast run`` (through :data:`WRAPPER`)."""
    return [
        sys.executable, "-c", WRAPPER, "run", "--endpoints", url, "--model", "mlpe-sim",
        "--dataset", str(dataset), "--tokenizer", str(tokenizer),
        "--concurrency", str(CONCURRENCY), "--num-samples", str(samples),
        "--warmup-requests", "0", "--no-progress", "--report-dir", str(out), *extra,
    ]  # fmt: skip


def run_cpu(
    url: str, dataset: Path, tokenizer: Path, samples: int, out: Path, counter: str, *extra: str
) -> float:
    command = run_command(url, dataset, tokenizer, samples, out, *extra)
    env = {**os.environ, "MLPE_BENCH_COUNTER": counter}
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    # wait4 gives this child's own rusage (all its threads), not the server's.
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout.read()
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == 0, stderr[-2000:]
    expected = "native" if counter == "C" else "python"
    counted = [p for p in out.rglob("*.json") if f"exact fast path ({expected})" in p.read_text()]
    assert counted, f"no {expected} counting recorded in {out}: {stdout[-800:]}"
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("kind", ["prose", "one character"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_whole_run_cpu(setup: dict[str, Any], kind: str, shape: str) -> None:
    events, small, large = SHAPES[shape]
    root: Path = setup["root"]
    dataset = root / f"{kind.replace(' ', '_')}_{events}.jsonl"
    write_dataset(dataset, kind, events)
    flags = ("--oracle", str(dataset), "--oracle-token-chars", str(TOKEN_CHARS))
    marginal: dict[str, list[float]] = {"C": [], "twin": []}
    with simulated_endpoint(flags) as url:
        for round_ in range(ROUNDS):
            for counter, values in marginal.items():
                cpu = [
                    run_cpu(
                        url,
                        dataset,
                        setup["tokenizer"],
                        n,
                        root / f"r{round_}{counter}{n}",
                        counter,
                    )
                    for n in (small, large)
                ]
                per_request = (cpu[1] - cpu[0]) / (large - small)
                values.append(per_request if shape == "per request" else per_request / events)
    unit = "request" if shape == "per request" else "event"
    medians = {name: statistics.median(v) for name, v in marginal.items()}
    print(f"\nwhole-run CPU per {unit}, {kind}, {events}-event answers, concurrency {CONCURRENCY}:")
    print(f"  {interpreter_speed()}")
    for name, values in marginal.items():
        shown = " · ".join(f"{v * 1e6:.2f}" for v in values)
        print(f"  {name:5} median {medians[name] * 1e6:8.2f} us (rounds {shown})")
    print(f"  twin / C: {medians['twin'] / medians['C']:.2f}x")


STATIC_SHAPES = {"per request": (64, 2_000, 14_000), "per event": (512, 300, 2_100)}


def load_phase_cpu(out: Path) -> float:
    summary = json.loads((out / "performance" / "result_summary.json").read_text())
    cpu: float = summary["mlpe_fast"]["self_audit"]["cpu_s"]
    return cpu


@pytest.mark.parametrize("shape", list(STATIC_SHAPES))
def test_whole_run_cpu_static(setup: dict[str, Any], shape: str) -> None:
    events, small, large = STATIC_SHAPES[shape]
    root: Path = setup["root"]
    dataset = root / f"prose_{events}.jsonl"
    write_dataset(dataset, "prose", events)
    text = json.loads(dataset.read_text().splitlines()[0])["ground_truth"]
    contents = [text[i : i + TOKEN_CHARS] for i in range(0, len(text), TOKEN_CHARS)]
    assert len(contents) == events
    served = root / f"nginx_{events}"
    served.mkdir()
    whole: list[float] = []
    load: list[float] = []
    per = (large - small) * (1 if shape == "per request" else events)
    with nginx_endpoint(served, sse_body(events, "mlpe-sim", contents)) as (url, _):
        for round_ in range(ROUNDS):
            outs = [root / f"static{events}r{round_}n{n}" for n in (small, large)]
            cpu = [
                run_cpu(url, dataset, setup["tokenizer"], n, out, "C", "--server-metrics", "off")
                for n, out in zip((small, large), outs, strict=True)
            ]
            whole.append((cpu[1] - cpu[0]) / per)
            load.append((load_phase_cpu(outs[1]) - load_phase_cpu(outs[0])) / per)
    unit = "request" if shape == "per request" else "event"
    print(f"\nwhole-run CPU per {unit}, nginx, prose, {events}-event answers, c={CONCURRENCY}:")
    print(f"  {interpreter_speed()}")
    for name, values in (("whole run", whole), ("load phase", load)):
        shown = " · ".join(f"{v * 1e6:.2f}" for v in values)
        print(f"  {name:10} median {statistics.median(values) * 1e6:8.2f} us (rounds {shown})")


CALLGRIND_SIZES = (500, 2_000)


def run_instructions(
    url: str, dataset: Path, tokenizer: Path, samples: int, out: Path, src: str
) -> int:
    """User-space instructions of one run under callgrind (all threads)."""
    out.mkdir(parents=True, exist_ok=True)
    counts = out / "callgrind.out"
    command = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={counts}", "--dump-instr=no",
        *run_command(url, dataset, tokenizer, samples, out / "run", "--server-metrics", "off"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": src, "MLPE_BENCH_COUNTER": "C"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    for line in counts.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise AssertionError(f"no totals in {counts}")


@pytest.mark.skipif(
    os.environ.get("MLPE_BENCH_CALLGRIND") != "1" or shutil.which("valgrind") is None,
    reason="opt in with MLPE_BENCH_CALLGRIND=1 (needs valgrind)",
)
def test_whole_run_instructions(setup: dict[str, Any]) -> None:
    events = 64
    root: Path = setup["root"]
    dataset = root / f"prose_{events}.jsonl"
    write_dataset(dataset, "prose", events)
    text = json.loads(dataset.read_text().splitlines()[0])["ground_truth"]
    contents = [text[i : i + TOKEN_CHARS] for i in range(0, len(text), TOKEN_CHARS)]
    served = root / "nginx_callgrind"
    served.mkdir()
    trees = {"this tree": str(Path(__file__).resolve().parents[1] / "src")}
    if baseline := os.environ.get("MLPE_BENCH_BASELINE_SRC"):
        trees["baseline"] = baseline
    small, large = CALLGRIND_SIZES
    per_request: dict[str, float] = {}
    with nginx_endpoint(served, sse_body(events, "mlpe-sim", contents)) as (url, _):
        for name, src in trees.items():
            counts = [
                run_instructions(url, dataset, setup["tokenizer"], n, root / f"cg{name}{n}", src)
                for n in (small, large)
            ]
            per_request[name] = (counts[1] - counts[0]) / (large - small)
    print(f"\nuser-space instructions per request, nginx, prose, {events}-event answers:")
    for name, value in per_request.items():
        print(f"  {name:10} {value / 1e3:8.1f} k ({trees[name]})")
    if "baseline" in per_request:
        ratio = per_request["baseline"] / per_request["this tree"]
        print(f"  baseline / this tree: {ratio:.3f}x")
