"""``mlpe-fast score RUN_FOLDER``: score a finished run again from its log.

Reads the accuracy datasets from the folder's ``config.yaml`` (or
``--dataset acc:PATH,...`` given again, e.g. when the files moved), the
outputs from ``events.jsonl`` (each COMPLETE line's ``TextModelOutput``)
and which query answered which sample from ``sample_idx_map.json``, and
scores them with the same code a live run uses
(:func:`mlpe_fast.accuracy.results.accuracy_entry`): a run scored again
gives the same ``accuracy_results.json``.  Written to ``RUN_FOLDER/accuracy/``
unless ``--output`` says otherwise.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..artifacts.events import (
    SAMPLE_COMPLETE,
    SAMPLE_ISSUED,
    TextModelOutput,
    iter_events,
)
from ..artifacts.run_folder import read_config_yaml
from ..config import dataset_from_yaml
from ..errors import UsageError
from ..load.dataset import DatasetSpec, load_dataset, parse_dataset_arg
from .methods import check_scorer_packages
from .results import accuracy_entry, gate_failures, output_text, write_accuracy_results

__all__ = ("add_arguments", "main", "rescore")


def _specs(config: Mapping[str, Any], given: Sequence[str]) -> list[DatasetSpec]:
    if given:
        specs = [parse_dataset_arg(text) for text in given]
    else:
        entries = config.get("datasets") or []
        if not isinstance(entries, list):
            raise UsageError("config.yaml: datasets is not a list")
        specs = [dataset_from_yaml(e, f"datasets[{i}]") for i, e in enumerate(entries)]
    accuracy = [s for s in specs if s.type == "accuracy"]
    if not accuracy:
        raise UsageError(
            "no accuracy dataset in the run's config.yaml; pass --dataset acc:PATH,"
            "accuracy_config.ground_truth=COLUMN"
        )
    return accuracy


def _outputs(path: Path) -> tuple[dict[str, str], dict[str, tuple[int, int]]]:
    """Scored text per completed query, and (first issue, completion) per query."""
    texts: dict[str, str] = {}
    times: dict[str, tuple[int, int]] = {}
    for event in iter_events(path):
        if event.event_type == SAMPLE_ISSUED:
            times[event.sample_uuid] = (event.timestamp_ns, event.timestamp_ns)
        elif event.event_type == SAMPLE_COMPLETE:
            issued = times.get(event.sample_uuid, (event.timestamp_ns, 0))[0]
            times[event.sample_uuid] = (issued, event.timestamp_ns)
            if isinstance(event.data, TextModelOutput):
                texts[event.sample_uuid] = output_text(event.data)
    return texts, times


def rescore(folder: str | Path, datasets: Sequence[str] = ()) -> tuple[list[dict[str, Any]], str]:
    """The accuracy entries of a run folder, and its MLPerf model name ("" if
    the config names none).

    Raises:
        UsageError: no log, no index map, no accuracy dataset, a dataset the
            log has no queries of, or a bad file.
    """
    root = Path(folder)
    events = root / "events.jsonl"
    index_path = root / "sample_idx_map.json"
    for needed in (events, index_path):
        if not needed.is_file():
            raise UsageError(f"{root}: no {needed.name} (is this a run folder?)")
    config = read_config_yaml(root)
    try:
        index_map = msgspec.json.decode(index_path.read_bytes(), type=dict[str, dict[str, int]])
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise UsageError(f"{index_path}: {error}") from None
    specs = _specs(config, datasets)
    check_scorer_packages(spec.accuracy for spec in specs)  # before reading the whole log
    texts, times = _outputs(events)
    entries = []
    for spec in specs:
        dataset = load_dataset(spec)
        indices = index_map.get(dataset.name)
        if indices is None:
            raise UsageError(f"{index_path}: no queries of accuracy dataset {dataset.name!r}")
        spans = [times[u] for u in indices if u in times]
        duration = (max(e for _, e in spans) - min(s for s, _ in spans)) / 1e9 if spans else 0.0
        entries.append(accuracy_entry(dataset, texts, indices, duration_s=max(0.0, duration)))
    model = (config.get("submission_ref") or {}).get("model") if config else None
    return entries, model if isinstance(model, str) else ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_folder", metavar="RUN_FOLDER", help="a run folder with events.jsonl")
    parser.add_argument(
        "--dataset",
        action="append",
        metavar="acc:PATH[,...]",
        help="the accuracy dataset(s), if not as in the run's config.yaml",
    )
    parser.add_argument("--mlperf-model", metavar="NAME", help="model name for the accuracy gate")
    parser.add_argument("--output", metavar="DIR", help="where to write accuracy_results.json")


def main(args: argparse.Namespace) -> int:
    entries, model = rescore(args.run_folder, args.dataset or ())
    model = args.mlperf_model or model
    out = Path(args.output) if args.output else Path(args.run_folder) / "accuracy"
    try:
        write_accuracy_results(out / "accuracy_results.json", entries)
    except OSError as error:
        raise UsageError(f"cannot write {out}: {error.strerror or error}") from None
    for entry in entries:
        print(f"{entry['dataset_name']}: {entry['score']}")
    failures = gate_failures(model, entries) if model else None
    if failures:
        print(f"gate ({model}): FAIL: " + "; ".join(failures))
    elif failures is not None:
        print(f"gate ({model}): pass")
    print(f"written: {out / 'accuracy_results.json'}")
    return 0
