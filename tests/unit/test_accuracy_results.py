"""Accuracy entries (spec §3.4) from a dataset, the scored texts and the
issued queries: what is scored, what counts as failed, per-subset grading,
and the MLPerf gate (spec §2.6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.accuracy.results import (
    accuracy_entry,
    gate_failures,
    output_text,
    write_accuracy_results,
)
from mlpe_fast.artifacts.events import TextModelOutput
from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import AccuracyConfig, Dataset, DatasetSpec, load_dataset
from tests.data_files import LCB_TINY


def dataset(tmp_path: Path, rows: list[dict[str, Any]], **accuracy: Any) -> Dataset:
    path = tmp_path / "acc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = DatasetSpec(path=str(path), type="accuracy", accuracy=AccuracyConfig(**accuracy))
    return load_dataset(spec)


def test_output_text_is_reasoning_content_then_tool_calls() -> None:
    out = TextModelOutput(
        output=("4", "2"),
        reasoning=("think ", "hard"),
        tool_calls=(({"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}},),),
    )
    calls = '[{"type":"function","function":{"arguments":"{}","name":"f"},"id":"c"}]'
    assert output_text(out) == "think hard42" + calls
    assert output_text(None) == ""


def test_multiple_choice_counts_every_issued_query(tmp_path: Path) -> None:
    data = dataset(
        tmp_path,
        [{"prompt": f"q{i}", "ground_truth": f"choice{i + 1}"} for i in range(4)],
        eval_method="pass_at_1",
        extractor="abcd_extractor",
        num_repeats=2,
    )
    indices = {f"u{k}": k % 4 for k in range(8)}  # two passes
    texts = {
        "u0": "Answer: A",  # right
        "u1": "**Answer:** B",  # right
        "u2": "I think (D)",  # wrong
        "u4": "Answer: A",  # right; u3, u5-u7 never completed
        "u6": "",
    }
    entry = accuracy_entry(data, texts, indices, duration_s=1.23456)
    assert entry["score"] == {"exact_match": pytest.approx(100 * 3 / 8)}  # over the 8 issued
    assert entry["unit_samples"] == 4 and entry["num_repeats"] == 2
    assert entry["total_samples"] == 8
    assert entry["response_counts"] == {"issued": 8, "completed": 5, "failed": 3, "empty": 1}
    assert entry["complete"] is False
    assert entry["duration_s"] == 1.235
    assert (entry["extractor"], entry["ground_truth_column"]) == ("abcd_extractor", "ground_truth")


def test_deepseek_r1_is_graded_per_subset(tmp_path: Path) -> None:
    rows = [
        {"prompt": "a", "ground_truth": "A", "dataset": "gpqa"},
        {"prompt": "b", "ground_truth": "3", "dataset": "aime"},
        {"prompt": "c", "ground_truth": "4", "dataset": "aime"},
        {"prompt": "d", "ground_truth": "id", "dataset": "livecodebench"},
    ]
    data = dataset(tmp_path, rows, eval_method="legacy_mlperf_deepseek_r1")
    texts = {"u0": "ANSWER: A", "u1": "\\boxed{3}", "u2": "\\boxed{5}", "u3": "code"}
    entry = accuracy_entry(data, texts, {f"u{i}": i for i in range(4)}, duration_s=0)
    assert entry["score"] == {"exact_match": pytest.approx(100 * 2 / 3)}  # LCB: not graded
    assert entry["breakdown"]["subset_scores"] == {"gpqa": 100.0, "aime": 50.0}
    assert entry["complete"] is False  # a subset left ungraded


def test_deepseek_r1_livecodebench_samples_are_run_when_allowed(tmp_path: Path) -> None:
    # MLPerf's evaluator grades the first Python block: the tiny set's two-sum
    # answer holds a wrong draft first, so it fails here (it passes for
    # gpt-oss's scorer, which takes the last block)
    lcb = [json.loads(line) for line in LCB_TINY.read_text().splitlines()]
    rows = [{"prompt": "a", "ground_truth": "A", "dataset": "gpqa"}] + [
        {"prompt": r["question"], "ground_truth": r["question_id"], "dataset": "livecodebench"}
        for r in lcb
    ]
    texts = {"u0": "ANSWER: A", **{f"u{i + 1}": r["response"] for i, r in enumerate(lcb)}}
    indices = {f"u{i}": i for i in range(len(rows))}
    extras = {"local_eval": True, "test_cases_dir": str(LCB_TINY.parent / "test_cases")}
    data = dataset(tmp_path, rows, eval_method="legacy_mlperf_deepseek_r1", extras=extras)
    entry = accuracy_entry(data, texts, indices, duration_s=0)
    assert entry["complete"] is True
    # lcb_sum and lcb_half pass; two-sum's first block, lcb_max's wrong
    # answer and the answer without code fail: 2 of 5 (gpt-oss's scorer: 3)
    assert entry["breakdown"]["subset_scores"] == {"gpqa": 100.0, "livecodebench": 40.0}
    # without a way to run code, as before: ungraded, incomplete
    plain = dataset(tmp_path, rows, eval_method="legacy_mlperf_deepseek_r1")
    assert accuracy_entry(plain, texts, indices, duration_s=0)["complete"] is False


def test_mistakes_are_usage_errors(tmp_path: Path) -> None:
    data = dataset(tmp_path, [{"prompt": "q", "ground_truth": "x"}], eval_method="bleu")
    with pytest.raises(UsageError, match="unknown eval_method 'bleu'"):
        accuracy_entry(data, {}, {"u": 0}, duration_s=0)
    data = dataset(
        tmp_path, [{"prompt": "q", "ground_truth": "x"}], eval_method="legacy_mlperf_deepseek_r1"
    )
    with pytest.raises(UsageError, match="'dataset' column"):
        accuracy_entry(data, {}, {"u": 0}, duration_s=0)
    with pytest.raises(UsageError, match="ground-truth column 'answer' not found"):
        dataset(tmp_path, [{"prompt": "q"}], ground_truth="answer")


def test_gate_on_combined_entries(tmp_path: Path) -> None:
    perfect = {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0, "rougeLsum": 100.0}
    entry = {
        "dataset_name": "cnn",
        "unit_samples": 13_368,
        "num_repeats": 1,
        "score": {**perfect, "gen_len": 8_167_644, "gen_num": 13_368},
    }
    assert gate_failures("llama3_1-8b", [entry]) == []
    low = {**entry, "score": {**entry["score"], "rouge1": 30.0}}
    failures = gate_failures("llama3_1-8b", [low])
    assert failures is not None and len(failures) == 1 and "rouge1" in failures[0]
    assert gate_failures("my-model", [entry]) is None
    path = tmp_path / "accuracy" / "accuracy_results.json"
    write_accuracy_results(path, [entry])
    assert msgspec.json.decode(path.read_bytes()) == {"accuracy_scores": [entry]}
