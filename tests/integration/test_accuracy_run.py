"""Accuracy runs end to end (spec §2.6, §3.4): the simulated endpoint in
oracle mode answers every prompt with its reference output, so a whole
accuracy pipeline -- issue, stream, record, score, write -- must come out as
a perfect run that the official checker accepts; a degraded oracle must fail
the gate; `mlpe-fast score` must reproduce the file from the run's log."""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.cli import main
from mlpe_fast.config import RunConfig
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.load.dataset import AccuracyConfig, DatasetSpec
from mlpe_fast.point import PointResult, run_point
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

from .known_answers import LLAMA_SAMPLES
from .known_answers import summaries as _dataset

pytestmark = pytest.mark.pipeline


def _config(tmp_path: Path, data: Path, **changes: Any) -> RunConfig:
    spec = DatasetSpec(
        path=str(data),
        type="accuracy",
        name="cnn_dailymail",
        prompt_column="article",
        accuracy=AccuracyConfig(eval_method="rouge", ground_truth="highlights"),
    )
    fields: dict[str, Any] = {
        "endpoints": (),
        "model": "m",
        "datasets": (spec,),
        "tokenizer": DEMO_TOKENIZER,
        "mode": "acc",
        "concurrency": 64,
        "max_output_tokens": 8,  # the oracle sends whole answers regardless
        "report_dir": str(tmp_path / "run"),
        "mlperf_model": "llama3_1-8b",
    }
    return RunConfig(**{**fields, **changes})


def _run(config: RunConfig, data: Path, *flags: str) -> PointResult:
    oracle = f"{data},parser.prompt=article,ground_truth=highlights"
    server = ("--ttft-ms", "0", "--itl-ms", "0", "--oracle", oracle, "--oracle-token-chars", "64")
    with simulated_endpoint((*server, *flags)) as endpoint:
        return asyncio.run(run_point(config, endpoint, progress=False))


def _checker_gate(path: Path) -> list[tuple[str, str, str]]:
    """The checker's own accuracy parsing and gate for a llama3_1-8b point."""
    accuracy = pytest.importorskip(
        "submission_checker.models.file.accuracy", reason="the submission checker is not installed"
    )
    context = pytest.importorskip("submission_checker.models.aggregate.context")
    parsed = accuracy.AccuracyResult.model_validate(json.loads(path.read_bytes()))
    model_dir = path.parent / "results" / "sys" / "llama3_1-8b"
    holder = types.SimpleNamespace(accuracy_dir=path.parent, model_dir=model_dir, _check_results=[])
    context.ModelContext._gate_accuracy(holder, parsed)
    return [(r.rule, r.key, r.severity.value) for r in holder._check_results]


@pytest.mark.slow
def test_a_perfect_accuracy_run_passes_the_gate_and_the_checker(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "cnn.jsonl", LLAMA_SAMPLES)
    result = _run(_config(tmp_path, data), data)
    [entry] = result.accuracy
    assert entry["dataset_name"] == "cnn_dailymail" and entry["dataset_type"] == "accuracy"
    assert entry["response_counts"] == {
        "issued": LLAMA_SAMPLES,
        "completed": LLAMA_SAMPLES,
        "failed": 0,
        "empty": 0,
    }
    score = entry["score"]
    for metric in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert float(score[metric]) == 100.0
    assert abs(int(score["gen_len"]) - 8_167_644) <= 816_764
    assert entry["complete"] is True
    assert "gate (llama3_1-8b): pass" in result.table

    run = tmp_path / "run"
    path = run / "accuracy" / "accuracy_results.json"
    stored = json.loads(path.read_bytes())
    assert stored == {"accuracy_scores": result.accuracy}
    assert not (run / "performance").exists()  # acc mode: no performance summary
    checks = _checker_gate(path)
    assert [c for c in checks if c[2] == "error"] == []
    assert ("accuracy-sample-count", "pass", "info") in checks
    assert sum(1 for c in checks if c[:2] == ("accuracy-gate", "pass")) == 5


def test_a_degraded_oracle_fails_the_gate(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "cnn.jsonl", 300)
    # every answer cut to its first 100 characters (of ~611)
    result = _run(_config(tmp_path, data), data, "--oracle-degrade", "100")
    [entry] = result.accuracy
    assert float(entry["score"]["rouge1"]) < 38.7792 * 0.99
    assert "gate (llama3_1-8b): FAIL" in result.table and "rouge1" in result.table
    checks = _checker_gate(tmp_path / "run" / "accuracy" / "accuracy_results.json")
    errors = {(rule, key) for rule, key, severity in checks if severity == "error"}
    assert ("accuracy-gate", "fail") in errors
    assert ("accuracy-sample-count", "fail") in errors  # 300 < 13,368


def test_both_modes_write_performance_and_accuracy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _dataset(tmp_path / "cnn.jsonl", 64)
    perf = DatasetSpec(path=str(data), name="perf", prompt_column="article")
    config = _config(tmp_path, data)
    config = msgspec.structs.replace(
        config, mode="both", datasets=(perf, *config.datasets), num_samples=32, concurrency=8
    )
    result = _run(config, data)
    run = tmp_path / "run"
    assert (run / "performance" / "result_summary.json").is_file()
    assert (run / "accuracy" / "accuracy_results.json").is_file()
    assert result.stats.completed == 32  # the performance phase alone is measured
    mapping = json.loads((run / "sample_idx_map.json").read_bytes())
    assert len(mapping["performance"]) == 32 and len(mapping["cnn_dailymail"]) == 64
    # accuracy queries are unsalted and answered in full: a perfect score
    assert float(result.accuracy[0]["score"]["rouge1"]) == 100.0
    # scored again from the log: the same file
    assert main(["score", str(run), "--output", str(tmp_path / "again")]) == 0
    again = (tmp_path / "again" / "accuracy_results.json").read_bytes()
    assert again == (run / "accuracy" / "accuracy_results.json").read_bytes()
    out = capsys.readouterr().out
    assert "cnn_dailymail" in out and "gate (llama3_1-8b): FAIL" in out  # 64 < 13,368 samples


def test_score_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["score", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "events.jsonl" in err
