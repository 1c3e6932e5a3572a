"""``accuracy/accuracy_results.json``: one scored entry per accuracy dataset.

The client's native format (spec §3.4; the reference client's
``commands/benchmark/accuracy.py`` ``score_accuracy``)::

    {"accuracy_scores": [
       {"dataset_name": "cnn_dailymail", "extractor": null, "ground_truth_column": "highlights",
        "score": {"rouge1": 38.9, ...} | 83.1, "unit_samples": 13368, "num_repeats": 1,
        "total_samples": 13368, "duration_s": 812.4, "complete": true,
        "dataset_type": "accuracy", "response_counts": {...}}]}

What a response is scored on is the whole text it produced, as the
reference reads it from ``events.jsonl``: reasoning, then content, then the
tool calls as JSON (``TextModelOutput.__str__``).  Every *issued* sample
counts: a query that failed scores as wrong (the reference divides by the
issued count), so a run cannot look better by losing its hard answers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..artifacts.events import TextModelOutput
from ..errors import UsageError
from ..load.dataset import AccuracyConfig, Dataset
from ..metrics.count_inputs import merge_tool_call_chunks
from .deepseek_r1 import CodeGrader
from .extract import extract_first_python_code
from .livecodebench import (
    CODE_BENCH_METHOD,
    LiveCodeBenchError,
    LiveCodeBenchOptions,
    score_livecodebench,
)
from .methods import DEEPSEEK_R1_METHOD, default_method
from .scorers import THRESHOLDS, check_gate, combine_entries, deepseek_r1_exact_match, score_dataset

#: The metric name of exact-match scores (the checker's threshold key, spec §2.6).
EXACT_MATCH = "exact_match"

__all__ = (
    "accuracy_entry",
    "gate_failures",
    "holds_accuracy_run",
    "output_text",
    "read_accuracy_entries",
    "write_accuracy_results",
)


def _deepseek_code_grader(extras: Mapping[str, Any], dataset_path: str) -> CodeGrader | None:
    """The DeepSeek-R1 set's LiveCodeBench grader, where its extras name a
    way to run the code (the service, or ``local_eval``); MLPerf's evaluator
    grades the first Python block."""
    try:
        options = LiveCodeBenchOptions.from_extras(extras, dataset_path=dataset_path)
    except LiveCodeBenchError as error:
        raise UsageError(f"dataset {dataset_path}: {error}") from None
    if options.service_url is None and not options.local_eval:
        return None

    def grade(outputs: Sequence[str], question_ids: Sequence[str]) -> Sequence[bool] | None:
        score = score_livecodebench(
            outputs, question_ids, options, extract=extract_first_python_code
        )
        return score.verdicts if score.complete else None

    return grade


def output_text(output: TextModelOutput | None) -> str:
    """The text a response is scored on (module docstring); "" when the
    query failed."""
    if output is None:
        return ""

    def joined(value: str | tuple[str, ...] | None) -> str:
        if not value:
            return ""
        return value if isinstance(value, str) else "".join(value)

    text = joined(output.reasoning) + joined(output.output)
    calls = merge_tool_call_chunks(output.tool_calls)
    if calls:
        text += msgspec.json.encode(list(calls)).decode()
    return text


def accuracy_entry(
    dataset: Dataset,
    texts: Mapping[str, str],
    indices: Mapping[str, int],
    *,
    duration_s: float,
) -> dict[str, Any]:
    """The ``accuracy_scores`` entry of one accuracy dataset.

    Args:
        dataset: the accuracy dataset, with its ground truth.
        texts: sample uuid -> scored text, for every query that completed.
        indices: sample uuid -> dataset index, for every query issued
            (``sample_idx_map.json``).
        duration_s: the wall time of the dataset's phase.

    Raises:
        UsageError: an unknown scorer or extractor name.
    """
    config = dataset.spec.accuracy or AccuracyConfig()
    truth = dataset.ground_truth
    if truth is None:
        raise UsageError(f"dataset {dataset.spec.path}: no ground truth loaded")
    method = default_method(config)
    issued = list(indices.items())
    predictions = [texts.get(uuid, "") for uuid, _ in issued]
    references = [truth[index] for _, index in issued]
    breakdown: dict[str, Any] | None = None
    graded_all = True
    if method == DEEPSEEK_R1_METHOD:
        # An ensemble graded per subset (MLPerf's DeepSeek-R1 evaluator).
        if dataset.subsets is None:
            raise UsageError(
                f"dataset {dataset.spec.path}: {DEEPSEEK_R1_METHOD} needs a "
                f"'dataset' column naming each sample's subset"
            )
        subsets = [dataset.subsets[index] for _, index in issued]
        grader = _deepseek_code_grader(config.extras or {}, dataset.spec.path)
        result = deepseek_r1_exact_match(predictions, references, subsets, grade_code=grader)
        score: Any = {EXACT_MATCH: result.exact_match}
        graded_all = result.complete
        breakdown = {
            "subset_scores": {k: round(v, 2) for k, v in result.subset_exact_match.items()},
            "total_samples": result.graded,
            "complete": result.complete,
        }
    elif method == CODE_BENCH_METHOD:
        # Programs run against each problem's tests (the sandbox or the service).
        try:
            options = LiveCodeBenchOptions.from_extras(
                config.extras or {}, dataset_path=dataset.spec.path
            )
        except LiveCodeBenchError as error:
            raise UsageError(f"dataset {dataset.spec.path}: {error}") from None
        code = score_livecodebench(predictions, references, options)
        score = {EXACT_MATCH: code.pass_at_1}
        graded_all = code.complete
        breakdown = {
            "route": code.route,
            "passed": code.passed,
            "total_samples": code.graded,
            "complete": code.complete,
        }
        if code.network is not None:
            breakdown["network_isolation"] = code.network
        if code.error is not None:
            breakdown["error"] = code.error
    else:
        try:
            score = score_dataset(method, predictions, references, extractor=config.extractor)
        except KeyError as error:  # an unknown eval_method or extractor name
            raise UsageError(f"dataset {dataset.spec.path}: {error.args[0]}") from None
        if not isinstance(score, dict):
            # Named, so that the checker gates it by name rather than warning
            # about an unnamed scalar (the reference writes the bare number).
            score = {EXACT_MATCH: score}
    unit = len(dataset)
    completed = sum(1 for uuid, _ in issued if uuid in texts)
    empty = sum(1 for uuid, _ in issued if uuid in texts and not texts[uuid].strip())
    entry: dict[str, Any] = {
        "dataset_name": dataset.name,
        "extractor": config.extractor,
        "ground_truth_column": config.ground_truth,
        "score": score,
        "unit_samples": unit,
        "num_repeats": config.num_repeats,
        "total_samples": unit * config.num_repeats,
        "duration_s": round(duration_s, 3),
        "complete": graded_all
        and len(issued) == unit * config.num_repeats
        and completed == len(issued),
        "dataset_type": "accuracy",
        "response_counts": {
            "issued": len(issued),
            "completed": completed,
            "failed": len(issued) - completed,
            "empty": empty,
        },
    }
    if breakdown is not None:
        entry["breakdown"] = breakdown
    return entry


def gate_failures(model: str, entries: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """Failures of the MLPerf accuracy gate of ``model`` (spec §2.6) over
    the entries' scores combined as the checker combines them; None when
    the model has no gate."""
    if model not in THRESHOLDS:
        return None
    combined = combine_entries(entries)
    return check_gate(model, combined.scores, issued_samples=combined.issued_samples)


def write_accuracy_results(
    path: str | os.PathLike[str], entries: Sequence[Mapping[str, Any]]
) -> None:
    """Writes ``{"accuracy_scores": [...]}`` indented by two spaces."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"accuracy_scores": list(entries)}
    out.write_bytes(msgspec.json.format(msgspec.json.encode(payload), indent=2))


def read_accuracy_entries(path: str | os.PathLike[str]) -> list[Mapping[str, Any]]:
    """The entries of an ``accuracy_results.json`` (the list form, or the
    legacy form keyed by dataset); none when there is no file.

    Raises:
        UsageError: the file cannot be read or holds no ``accuracy_scores``.
    """
    source = Path(path)
    if not source.is_file():
        return []
    try:
        data = msgspec.json.decode(source.read_bytes())
    except (OSError, msgspec.DecodeError) as error:
        raise UsageError(f"{source}: cannot read: {error}") from None
    entries = data.get("accuracy_scores") if isinstance(data, dict) else None
    if isinstance(entries, dict):  # the legacy form, keyed by dataset
        entries = list(entries.values())
    if not isinstance(entries, list):
        raise UsageError(f"{source}: expected an accuracy_scores list")
    return [entry for entry in entries if isinstance(entry, dict)]


def holds_accuracy_run(path: str | os.PathLike[str]) -> bool:
    """Whether an ``accuracy_results.json`` scores an accuracy run: an entry
    other than the performance run's inline score (``dataset_type:
    performance``, which every agentic point carries and which never counts
    as an accuracy run; spec §2.6, §3.4).  False when there is no file.

    Raises:
        UsageError: as :func:`read_accuracy_entries`.
    """
    return any(entry.get("dataset_type") != "performance" for entry in read_accuracy_entries(path))
