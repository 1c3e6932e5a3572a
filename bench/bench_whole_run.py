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

Run::

    PYTHONPATH=src pytest bench/bench_whole_run.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
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


def run_cpu(
    url: str, dataset: Path, tokenizer: Path, samples: int, out: Path, counter: str, *extra: str
) -> float:
    command = [
        sys.executable, "-c", WRAPPER, "run", "--endpoints", url, "--model", "mlpe-sim",
        "--dataset", str(dataset), "--tokenizer", str(tokenizer),
        "--concurrency", str(CONCURRENCY), "--num-samples", str(samples),
        "--warmup-requests", "0", "--no-progress", "--report-dir", str(out), *extra,
    ]  # fmt: skip
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
    for name, values in (("whole run", whole), ("load phase", load)):
        shown = " · ".join(f"{v * 1e6:.2f}" for v in values)
        print(f"  {name:10} median {statistics.median(values) * 1e6:8.2f} us (rounds {shown})")
