"""What a run folder says about its point, for the disclosures and the bundle.

A run folder (docs/running.md, "The run folder"; spec §3.1) holds everything a point's
disclosures need that the system file cannot know: the throughput the curve is
normalised by, the load pattern and seeds the run used, whether it carries an
accuracy run, and what its warmup did.  :func:`read_run` reads them once, from the
files the checker and the reference client agree on:

* ``system_tps`` the way the checker derives it, ``output_sequence_lengths.total /
  (duration_ns / 1e9)`` from ``performance/result_summary.json`` (spec §0 item 2),
  not the stored value, which the checker only compares;
* load pattern, seeds and warmup settings from the summary's ``run_config``, else
  from ``config.yaml`` (``settings.load_pattern``, ``settings.runtime``,
  ``settings.warmup``);
* an agentic point's ``agentic_inference`` settings (its trajectory budget, salt,
  tool delays) from its performance dataset's entry in ``config.yaml``;
* the day the point was measured (``run_date``, which mlperf-viz shows): the
  UTC date of the summary's ``test_started_at`` (the wall clock at
  ``TEST_STARTED``), or, in a summary without one (a run folder of an older
  mlpe-fast, or of the reference client, which writes 0), of the time the
  summary was written (its modification time);
* the warmup's figures from ``warmup_events.jsonl``: queries issued, queries answered
  without error, and the time from the first warmup query to the start of
  measurement (``session.start_performance_tracking`` in ``events.jsonl``, the rules'
  ``TEST_STARTED``; spec §2.4, §3.6).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..accuracy.results import holds_accuracy_run
from ..artifacts.run_folder import read_config_yaml
from ..errors import UsageError
from .disclosure import WarmupRun

__all__ = ("RunFacts", "read_run")

_TRACKING_STARTED = b"session.start_performance_tracking"


@dataclass(frozen=True)
class RunFacts:
    """One run folder's facts (module docstring).

    Attributes:
        path: the run folder.
        system_tps: output tokens per second, as the checker derives it.
        load_pattern: ``concurrency``, ``max_throughput`` (Offline), ``poisson`` or
            ``agentic_inference``.
        target_concurrency: the configured concurrency, None for an Offline burst.
        run_config: load pattern, warmup and seeds in ``result_summary.json``'s
            ``run_config`` shape, gaps filled from ``config.yaml``.
        has_accuracy: ``accuracy/accuracy_results.json`` scores an accuracy run, not
            only the performance run's inline score.
        warmup: the measured warmup, None when the run had none.
        agentic: an agentic run's ``agentic_inference`` settings, else None.
        run_date: the day the point was measured, ``YYYY-MM-DD`` (UTC).
    """

    path: Path
    system_tps: float
    load_pattern: str
    target_concurrency: int | None
    run_config: Mapping[str, Any] = field(default_factory=dict)
    has_accuracy: bool = False
    warmup: WarmupRun | None = None
    agentic: Mapping[str, Any] | None = None
    run_date: str = ""


def _run_date(summary: Mapping[str, Any], path: Path) -> str:
    """The UTC day of ``test_started_at`` (ns since the epoch), else of the
    summary file's modification time (module docstring)."""
    started = summary.get("test_started_at")
    if isinstance(started, int) and not isinstance(started, bool) and started > 0:
        seconds = started / 1e9
    else:
        seconds = path.stat().st_mtime
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).date().isoformat()


def _section(data: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    for key in keys:
        value = data.get(key)
        data = value if isinstance(value, Mapping) else {}
    return data


def _read_config_yaml(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise UsageError(f"{path}: missing (every point needs its config.yaml)")
    data = read_config_yaml(path.parent)
    if not data:
        raise UsageError(f"{path}: expected a YAML mapping")
    return data


def _read_summary(path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        raise UsageError(f"{path}: missing (a point needs a performance run)")
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path}: cannot read: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data


def _system_tps(summary: Mapping[str, Any], where: Path) -> float:
    duration_ns = summary.get("duration_ns")
    total = _section(summary, "output_sequence_lengths").get("total")
    numbers = (duration_ns, total)
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in numbers):
        raise UsageError(f"{where}: no duration_ns or output_sequence_lengths.total")
    assert isinstance(duration_ns, (int, float)) and isinstance(total, (int, float))
    if duration_ns <= 0:
        raise UsageError(f"{where}: duration_ns must be positive, got {duration_ns}")
    return float(total) / (duration_ns / 1e9)


def _agentic_settings(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The performance dataset's ``agentic_inference`` block in ``config.yaml``."""
    datasets = config.get("datasets")
    for entry in datasets if isinstance(datasets, list) else ():
        if isinstance(entry, Mapping) and entry.get("type", "performance") == "performance":
            block = entry.get("agentic_inference")
            if isinstance(block, Mapping):
                return block
    return None


def _tracking_started_ns(events: Path) -> int | None:
    """``session.start_performance_tracking``'s stamp; it sits near the top."""
    if not events.is_file():
        return None
    with events.open("rb") as lines:
        for line in lines:
            if _TRACKING_STARTED in line:
                stamp = msgspec.json.decode(line).get("timestamp_ns")
                return stamp if isinstance(stamp, int) else None
    return None


def _measured_warmup(folder: Path, concurrency: int | None, salted: bool) -> WarmupRun:
    log = folder / "warmup_events.jsonl"
    if not log.is_file():
        raise UsageError(
            f"{log}: missing; the run warmed up, and its warmup log is what the "
            f"disclosure counts (spec §2.4)"
        )
    issued = completed = 0
    first_issue: int | None = None
    last_event: int | None = None
    try:
        with log.open("rb") as lines:
            for line in lines:
                if not line.strip():
                    continue
                event = msgspec.json.decode(line)
                stamp = event.get("timestamp_ns")
                kind = event.get("event_type")
                if isinstance(stamp, int):
                    last_event = stamp if last_event is None else max(last_event, stamp)
                if kind == "sample.issued":
                    issued += 1
                    if isinstance(stamp, int):
                        first_issue = stamp if first_issue is None else min(first_issue, stamp)
                elif kind == "sample.complete" and event.get("data") is not None:
                    completed += 1
    except (OSError, msgspec.DecodeError) as error:
        raise UsageError(f"{log}: cannot read: {error}") from None
    started = _tracking_started_ns(folder / "events.jsonl")
    end = started if started is not None else last_event
    duration_s = 0.0
    if first_issue is not None and end is not None:
        duration_s = max(0, end - first_issue) / 1e9
    return WarmupRun(
        duration_s=duration_s,
        requests_issued=issued,
        requests_completed=completed,
        # An Offline burst has no target concurrency: its warmup issued all at once.
        concurrency=concurrency if concurrency is not None else issued,
        salted=salted,
    )


def read_run(path: str | Path) -> RunFacts:
    """Reads a run folder's facts (module docstring).

    Raises:
        UsageError: no such folder, no ``config.yaml`` or
            ``performance/result_summary.json``, no derivable ``system_tps``, no
            load pattern, or a warmup without its log.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such run folder")
    config = _read_config_yaml(folder / "config.yaml")
    summary_path = folder / "performance" / "result_summary.json"
    summary = _read_summary(summary_path)
    recorded = summary.get("run_config")
    run_config: dict[str, Any] = dict(recorded) if isinstance(recorded, Mapping) else {}
    settings = _section(config, "settings")
    if not isinstance(run_config.get("load_pattern"), Mapping):
        run_config["load_pattern"] = dict(_section(settings, "load_pattern"))
    if not isinstance(run_config.get("warmup"), Mapping):
        run_config["warmup"] = dict(_section(settings, "warmup"))
    runtime = _section(settings, "runtime")
    for name in ("scheduler_random_seed", "dataloader_random_seed"):
        if run_config.get(name) is None and runtime.get(name) is not None:
            run_config[name] = runtime[name]
    load_pattern = run_config["load_pattern"].get("type")
    if not isinstance(load_pattern, str) or not load_pattern:
        raise UsageError(
            f"{folder}: neither result_summary.json nor config.yaml names a load pattern"
        )
    target = run_config["load_pattern"].get("target_concurrency")
    target_concurrency = (
        target if isinstance(target, int) and not isinstance(target, bool) else None
    )
    warmup_settings = run_config["warmup"]
    warmup = None
    if warmup_settings.get("enabled"):
        warmup = _measured_warmup(
            folder, target_concurrency, salted=bool(warmup_settings.get("salt", False))
        )
    return RunFacts(
        path=folder,
        system_tps=_system_tps(summary, summary_path),
        load_pattern=load_pattern,
        target_concurrency=target_concurrency,
        run_config=run_config,
        has_accuracy=holds_accuracy_run(folder / "accuracy" / "accuracy_results.json"),
        warmup=warmup,
        agentic=_agentic_settings(config) if load_pattern == "agentic_inference" else None,
        run_date=_run_date(summary, summary_path),
    )
