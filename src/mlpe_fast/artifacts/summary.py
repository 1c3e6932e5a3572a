"""``metrics/final_snapshot.json``, ``performance/result_summary.json`` and ``report.txt``.

The first two in exactly the reference client's shapes and numbers (spec
§1.3, §1.6, §3.3, §3.5; reference-client.md §2.2, §4), so a consumer of the
reference's run folder reads ours unchanged.  Sources, all in
mlcommons/endpoints @ ea332753:

* counters and series, their names and order:
  ``src/inference_endpoint/async_utils/services/metrics_aggregator/aggregator.py``
  (``MetricCounterKey``, every counter registered, then the series
  ``sample_latency_ns``, ``isl``, ``osl`` and, for streaming runs,
  ``ttft_ns``, ``chunk_delta_ns``, ``tpot_ns``; early stopping on the
  ``tail_latency`` ones);
* the snapshot dict: ``.../metrics_aggregator/snapshot.py`` (``snapshot_to_dict``),
  written by ``.../metrics_aggregator/publisher.py`` with
  ``json.dumps(indent=2, allow_nan=False)``, no trailing newline;
* the summary: ``src/inference_endpoint/metrics/report.py``
  (``Report.from_snapshot``, ``Report.to_json``: ``msgspec.json.format(...,
  indent=2)``, no trailing newline; ``Report.display`` for ``report.txt``).

On top of the reference's keys :func:`result_summary` writes the two stored
values the submission checker compares with its own derivation (spec §0
item 2, §3.3, checker ``models/aggregate/point_result.py``), so that they
agree with it by construction:

* ``system_tps = int(output_sequence_lengths.total) / (duration_ns / 1e9)``;
* ``tps_per_user = 1000 / (tpot.percentiles["90.0"] / 1e6)``.

Everything here is pure except :func:`write_json`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from ..metrics.order_stats import Sample
from ..metrics.series import series_stat, summary_block

__all__ = (
    "COUNTER_NAMES",
    "FINISH_REASONS",
    "SERIES_NAMES",
    "STREAMING_SERIES_NAMES",
    "final_snapshot",
    "report_text",
    "result_summary",
    "snapshot_json_bytes",
    "summary_json_bytes",
    "warnings_text",
    "write_json",
)

#: Every counter of the reference's final snapshot, in its order (``MetricCounterKey``).
COUNTER_NAMES: Final[tuple[str, ...]] = (
    "total_samples_issued",
    "total_samples_completed",
    "total_samples_failed",
    "tracked_samples_issued",
    "tracked_samples_completed",
    "tracked_samples_failed",
    "tracked_finish_reason_stop",
    "tracked_finish_reason_length",
    "tracked_finish_reason_tool_calls",
    "tracked_finish_reason_content_filter",
    "tracked_finish_reason_function_call",
    "tracked_finish_reason_other",
    "tracked_duration_ns",
    "legacy_loadgen_window_duration_ns",
    "total_duration_ns",
)

#: ``finish_reason_counts`` keys: the ``tracked_finish_reason_*`` counters without the prefix.
FINISH_REASONS: Final[tuple[str, ...]] = (
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    "function_call",
    "other",
)
_FINISH_REASON_PREFIX: Final[str] = "tracked_finish_reason_"

#: Series the reference always registers, in its order.
SERIES_NAMES: Final[tuple[str, ...]] = ("sample_latency_ns", "isl", "osl")
#: Series it adds for streaming runs, after those.
STREAMING_SERIES_NAMES: Final[tuple[str, ...]] = ("ttft_ns", "chunk_delta_ns", "tpot_ns")
# Series with early-stopping estimates (registered ``tail_latency=True``).
_TAIL_LATENCY_SERIES: Final[frozenset[str]] = frozenset({"sample_latency_ns", "ttft_ns", "tpot_ns"})
# The one float series: the reference keeps TPOT unrounded.
_FLOAT_SERIES: Final[frozenset[str]] = frozenset({"tpot_ns"})
# result_summary.json stat blocks from series, in the Report's field order.
_LATENCY_BLOCKS: Final[tuple[tuple[str, str], ...]] = (
    ("ttft", "ttft_ns"),
    ("tpot", "tpot_ns"),
    ("latency", "sample_latency_ns"),
)
_TERMINAL_STATES: Final[frozenset[str]] = frozenset({"complete", "interrupted"})


def _integral_counter(name: str, value: int | float) -> int:
    # The reference registers every counter as an int; a fractional value is a caller bug.
    if isinstance(value, bool) or not float(value).is_integer():
        raise ValueError(f"counter {name} must be an integer, got {value!r}")
    return int(value)


def _series_values(name: str, values: npt.ArrayLike | Sample | None) -> npt.NDArray[Any] | Sample:
    if isinstance(values, Sample):  # read a block at a time (issue 23)
        if name in _FLOAT_SERIES:
            return values if values.dtype.kind == "f" else Sample(values.blocks, np.float64)
        if values.dtype.kind in "iub":
            return values
        raise ValueError(f"series {name} holds integers (ns or tokens), got dtype {values.dtype}")
    if values is None:
        return np.empty(0, np.float64 if name in _FLOAT_SERIES else np.int64)
    array = np.asarray(values)
    if name in _FLOAT_SERIES:
        return array.astype(np.float64, copy=False)
    if array.size and array.dtype.kind not in "iub":
        raise ValueError(f"series {name} holds integers (ns or tokens), got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def final_snapshot(
    counters: Mapping[str, int | float],
    series: Mapping[str, npt.ArrayLike | Sample],
    *,
    state: str,
    n_pending_tasks: int,
    timestamp_ns: int,
    counter: int = 1,
    streaming: bool = True,
    early_stopping: bool = True,
) -> dict[str, Any]:
    """The ``metrics/final_snapshot.json`` dict of one measured point (spec §3.5).

    Args:
        counters: counter values by name (:data:`COUNTER_NAMES`); missing
            counters are written as 0, as the reference writes a counter that
            was never incremented.
        series: raw samples by series name (:data:`SERIES_NAMES`,
            :data:`STREAMING_SERIES_NAMES`), integer arrays except ``tpot_ns``
            (float), each in recording order; a missing series is written
            empty, as the reference writes a registered series without samples.
        state: ``"complete"`` or ``"interrupted"``.  The reference builds an
            interrupted run's snapshot from its live HDR histograms, so its
            percentiles and buckets are approximations there and it has no
            early-stopping maps; ours are exact either way and, like it,
            without the maps when interrupted.
        n_pending_tasks: token counts still missing at the end (0 when all
            were counted); with ``state`` it decides ``complete``.
        timestamp_ns: ``time.monotonic_ns()`` when the snapshot was made.
        counter: the snapshot sequence number (the reference counts its live
            ticks too; diagnostic only).
        streaming: whether the streaming-only series are part of the run (the
            reference registers them only for streaming runs).
        early_stopping: add early-stopping estimates to the tail-latency
            series of a complete run (the reference's default;
            ``--no-early-stopping`` drops them).

    Raises:
        ValueError: an unknown counter or series name, a fractional counter,
            a non-integer array for an integer series, or an unknown state.
    """
    if state not in _TERMINAL_STATES:
        raise ValueError(f"state must be one of {sorted(_TERMINAL_STATES)}, got {state!r}")
    unknown_counters = set(counters) - set(COUNTER_NAMES)
    if unknown_counters:
        raise ValueError(f"unknown counters: {sorted(unknown_counters)}")
    series_names = SERIES_NAMES + (STREAMING_SERIES_NAMES if streaming else ())
    unknown_series = set(series) - set(series_names)
    if unknown_series:
        raise ValueError(f"unknown series for this run: {sorted(unknown_series)}")

    metrics: list[dict[str, Any]] = [
        {"type": "counter", "name": name, "value": _integral_counter(name, counters.get(name, 0))}
        for name in COUNTER_NAMES
    ]
    metrics.extend(
        series_stat(
            name,
            _series_values(name, series.get(name)),
            early_stopping_estimates=(
                early_stopping and state == "complete" and name in _TAIL_LATENCY_SERIES
            ),
        )
        for name in series_names
    )
    return {
        "counter": counter,
        "timestamp_ns": timestamp_ns,
        "state": state,
        "n_pending_tasks": n_pending_tasks,
        "metrics": metrics,
    }


def _checker_system_tps(osl_block: Mapping[str, Any], duration_ns: int | None) -> float | None:
    # The checker's PointSummary.system_tps: int(osl.total) / (duration_ns / 1e9).
    if duration_ns is None or "total" not in osl_block:
        return None
    return int(osl_block["total"]) / (duration_ns / 1e9)


def _checker_tps_per_user(tpot_block: Mapping[str, Any]) -> float | None:
    # The checker's 1000 / tpot_p90_ms with tpot_p90_ms = percentiles["90"] / 1e6.
    grid: Mapping[str, Any] = tpot_block.get("percentiles", {})
    raw = grid.get("90.0", grid.get("90"))
    if raw is None:
        return None
    p90_ms = float(raw) / 1_000_000
    if not math.isfinite(p90_ms) or p90_ms <= 0:
        return None
    return 1000.0 / p90_ms


def result_summary(
    snapshot: Mapping[str, Any],
    *,
    run_config: dict[str, Any] | None,
    use_legacy_loadgen_qps_metrics: bool,
    version: str,
    git_sha: str | None,
    extra: Mapping[str, Any] | None = None,
    test_started_at: int = 0,
) -> dict[str, Any]:
    """The ``performance/result_summary.json`` dict built from a final snapshot (spec §3.3).

    Mirrors ``Report.from_snapshot`` + ``Report.to_json``; keys in its order:
    ``version, git_sha, test_started_at, n_samples_issued,
    n_samples_completed, n_samples_failed`` (the ``tracked_*`` counters),
    ``duration_ns`` (``tracked_duration_ns``, ``None`` unless > 0), ``state``,
    ``complete`` (``state == "complete"`` and no pending token counts),
    ``ttft, tpot, latency, output_sequence_lengths, input_sequence_lengths``
    (:func:`summary_block`), ``legacy_loadgen_window_duration_ns, qps, tps,
    finish_reason_counts, run_config``; then ``system_tps`` and
    ``tps_per_user`` when defined (module docstring); then ``extra``.

    ``test_started_at``: the wall-clock time of ``TEST_STARTED`` in ns
    since the Unix epoch, 0 when unknown.  The reference writes 0 (its
    ``Report`` has a TODO to fill it); the submission CLI reads a positive
    value as the run's start and date (``runs/parser.py``
    ``_extract_timestamps``, any epoch unit), and falls back to "now minus
    the duration" on 0, which dates a bundle built later wrongly.

    Throughput window (spec §1.4): with ``use_legacy_loadgen_qps_metrics``
    (pass ``load pattern is poisson and the setting is on``, as the reference
    does), a positive ``legacy_loadgen_window_duration_ns`` counter and at
    least 2 completions, ``qps = (completed - 1) / window`` and ``tps = OSL
    total / window`` and the window is recorded; otherwise both use
    ``duration_ns`` and ``legacy_loadgen_window_duration_ns`` is ``None``;
    without either, both are ``None``.  ``tps`` is also ``None`` without OSL.

    Raises:
        ValueError: an ``extra`` key collides with a summary key.
    """
    counters: dict[str, Any] = {}
    series: dict[str, Mapping[str, Any]] = {}
    for metric in snapshot.get("metrics", []):
        name = metric.get("name", "")
        if not name:
            continue
        if metric.get("type") == "counter":
            counters[name] = metric.get("value", 0)
        elif metric.get("type") == "series":
            series[name] = metric

    def counter_value(name: str) -> int:
        return int(counters.get(name, 0))

    def block(name: str) -> dict[str, Any]:
        stat = series.get(name)
        return summary_block(stat) if stat is not None else {}

    tracked_duration_ns = counter_value("tracked_duration_ns")
    duration_ns = tracked_duration_ns if tracked_duration_ns > 0 else None
    completed = counter_value("tracked_samples_completed")
    isl = block("isl")
    osl = block("osl")
    loadgen_window_ns = counter_value("legacy_loadgen_window_duration_ns")
    use_loadgen_window = use_legacy_loadgen_qps_metrics and loadgen_window_ns > 0 and completed >= 2
    qps: float | None
    tps: float | None
    if use_loadgen_window:
        window_s = loadgen_window_ns / 1e9
        qps = (completed - 1) / window_s
        tps = osl.get("total", 0) / window_s if osl else None
    elif duration_ns is not None:
        duration_s = duration_ns / 1e9
        qps = completed / duration_s
        tps = osl.get("total", 0) / duration_s if osl else None
    else:
        qps = tps = None

    state = snapshot.get("state", "interrupted")
    n_pending_tasks = snapshot.get("n_pending_tasks", 0)
    latency_blocks = {field: block(name) for field, name in _LATENCY_BLOCKS}
    summary: dict[str, Any] = {
        "version": version,
        "git_sha": git_sha,
        "test_started_at": test_started_at,
        "n_samples_issued": counter_value("tracked_samples_issued"),
        "n_samples_completed": completed,
        "n_samples_failed": counter_value("tracked_samples_failed"),
        "duration_ns": duration_ns,
        "state": state,
        "complete": state == "complete" and n_pending_tasks == 0,
        **latency_blocks,
        "output_sequence_lengths": osl,
        "input_sequence_lengths": isl,
        "legacy_loadgen_window_duration_ns": loadgen_window_ns if use_loadgen_window else None,
        "qps": qps,
        "tps": tps,
        "finish_reason_counts": {
            reason: counter_value(_FINISH_REASON_PREFIX + reason) for reason in FINISH_REASONS
        },
        "run_config": run_config,
    }
    system_tps = _checker_system_tps(osl, duration_ns)
    if system_tps is not None:
        summary["system_tps"] = system_tps
    tps_per_user = _checker_tps_per_user(latency_blocks["tpot"])
    if tps_per_user is not None:
        summary["tps_per_user"] = tps_per_user
    for key, value in (extra or {}).items():
        if key in summary:
            raise ValueError(f"extra key {key!r} collides with a result_summary.json key")
        summary[key] = value
    return summary


def summary_json_bytes(obj: Any) -> bytes:
    """``obj`` as the reference writes ``result_summary.json``: msgspec, indent 2.

    No final newline (``Report.to_json`` writes the formatted bytes as they are).
    """
    return msgspec.json.format(msgspec.json.encode(obj), indent=2)


def snapshot_json_bytes(obj: Any) -> bytes:
    """``obj`` as the reference writes ``final_snapshot.json``: stdlib ``json``, indent 2.

    ``allow_nan=False`` as in the reference: a non-finite float is a bug
    upstream (the series dicts already write them as ``null``).  The two
    encoders spell floats differently (``1e+20`` here, ``1e20`` in msgspec).
    """
    return json.dumps(obj, indent=2, allow_nan=False).encode("utf-8")


def write_json(
    path: str | os.PathLike[str],
    obj: Any,
    *,
    encoder: Literal["msgspec", "stdlib"] = "msgspec",
) -> None:
    """Write ``obj`` to ``path`` the way the reference writes that file.

    ``encoder="msgspec"`` for ``result_summary.json`` (:func:`summary_json_bytes`),
    ``"stdlib"`` for ``final_snapshot.json`` (:func:`snapshot_json_bytes`).
    The bytes go to a temporary file in the same folder that then replaces
    ``path``, so a reader never sees half a file.
    """
    encode: Callable[[Any], bytes] = (
        summary_json_bytes if encoder == "msgspec" else snapshot_json_bytes
    )
    payload = encode(obj)
    target = Path(path)
    temporary = target.with_name(target.name + ".tmp")
    try:
        temporary.write_bytes(payload)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------
# report.txt
# ---------------------------------------------------------------------------

# (heading, summary key, unit, scale from the stored unit) in the reference's order.
_REPORT_SECTIONS: Final[tuple[tuple[str, str, str, float], ...]] = (
    ("TTFT", "ttft", "ms", 1e-6),
    ("TPOT", "tpot", "ms", 1e-6),
    ("Latency", "latency", "ms", 1e-6),
    ("Input sequence lengths", "input_sequence_lengths", "tokens", 1.0),
    ("Output sequence lengths", "output_sequence_lengths", "tokens", 1.0),
)
_HISTOGRAM_BAR_WIDTH: Final[int] = 30


def warnings_text(warnings: Sequence[str]) -> str:
    """report.txt's WARNINGS section (the answers that are not what was
    asked for, ``metrics/answers.py``); empty without warnings."""
    if not warnings:
        return ""
    return "\nWARNINGS\n" + "".join(f"  {line}\n" for line in warnings)


def _scaled(value: Any, scale: float) -> str:
    # None stands for a non-finite value or an uncertifiable estimate.
    return "N/A" if value is None else f"{value * scale:.2f}"


def _optional_rate(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f}"


def _summary_lines(summary: Mapping[str, Any], title: str) -> list[str]:
    lines = [f"----------------- {title} -----------------"]
    if summary.get("state") == "interrupted":
        lines.append("WARNING: run was interrupted; the figures below are partial.")
    elif not summary.get("complete", False):
        lines.append("WARNING: report is incomplete; some token counts are missing.")
    lines.append(f"Version: {summary.get('version')}")
    if summary.get("git_sha"):
        lines.append(f"Git SHA: {summary['git_sha']}")
    run_config = summary.get("run_config")
    if run_config:
        lines.append("Run config:")
        for section, params in run_config.items():
            if isinstance(params, Mapping):
                joined = ", ".join(f"{key}={value}" for key, value in params.items())
                lines.append(f"  {section}: {joined}")
            else:
                lines.append(f"  {section}: {params}")
    lines.append(f"Total samples issued: {summary.get('n_samples_issued', 0)}")
    lines.append(f"Total samples completed: {summary.get('n_samples_completed', 0)}")
    lines.append(f"Total samples failed: {summary.get('n_samples_failed', 0)}")
    duration_ns = summary.get("duration_ns")
    duration = "N/A" if duration_ns is None else f"{duration_ns / 1e9:.2f} seconds"
    lines.append(f"Duration: {duration}")
    window_ns = summary.get("legacy_loadgen_window_duration_ns")
    if window_ns is not None:
        lines.append(f"QPS/TPS window (legacy LoadGen): {window_ns / 1e9:.2f} seconds")
    lines.append(f"QPS: {_optional_rate(summary.get('qps'))}")
    lines.append(f"TPS: {_optional_rate(summary.get('tps'))}")
    lines.append(
        f"System TPS (output tokens / duration): {_optional_rate(summary.get('system_tps'))}"
    )
    lines.append(
        f"TPS per user (1000 / TPOT p90 ms): {_optional_rate(summary.get('tps_per_user'))}"
    )
    reasons = summary.get("finish_reason_counts") or {}
    if any(reasons.values()):
        joined = ", ".join(f"{reason}={count}" for reason, count in reasons.items() if count)
        lines.append(f"Finish reasons: {joined}")
    return lines


def _block_lines(block: Mapping[str, Any], unit: str, scale: float) -> list[str]:
    lines = [
        f"  {label}: {_scaled(block.get(key), scale)} {unit}"
        for label, key in (
            ("Min", "min"),
            ("Max", "max"),
            ("Median", "median"),
            ("Avg.", "avg"),
            ("Std Dev.", "std_dev"),
        )
    ]
    lines += ["", "  Histogram:"]
    histogram = block.get("histogram") or {"buckets": [], "counts": []}
    buckets = histogram["buckets"]
    counts = histogram["counts"]
    if buckets:
        # Buckets are half-open except the last, which holds the maximum.
        labels = [
            f"  [{_scaled(lo, scale)}, {_scaled(hi, scale)}"
            + ("]" if i == len(buckets) - 1 else ")")
            for i, (lo, hi) in enumerate(buckets)
        ]
        widest = max(len(label) for label in labels)
        largest = max(counts)
        per_count = _HISTOGRAM_BAR_WIDTH / largest if largest > 0 else 1
        lines += [
            f"  {label:>{widest}} |{'#' * int(count * per_count)} {count}"
            for label, count in zip(labels, counts, strict=True)
        ]
    lines += ["", "  Percentiles:"]
    lines += [
        f"  {key:>6}: {_scaled(value, scale)} {unit}"
        for key, value in block.get("percentiles", {}).items()
    ]
    estimates = block.get("early_stopping_percentiles")
    if estimates:
        lines += ["", "  Early-stopping percentile estimates (N/A = insufficient samples):"]
        lines += [f"  {key:>6}: {_scaled(value, scale)} {unit}" for key, value in estimates.items()]
    return lines


def report_text(summary: Mapping[str, Any], *, title: str = "Summary") -> str:
    """``report.txt`` for a :func:`result_summary` dict (spec §3.5; reference ``Report.display``).

    The summary lines (version, run config, sample counts, duration, QPS,
    TPS, and our checker-form ``system_tps``/``tps_per_user``), then per stat
    block min/max/median/avg/std dev, a 30-bucket text histogram, the
    percentile grid and the early-stopping estimates; times in ms, lengths in
    tokens.  Not a checked format (the reference's is not documented); ends
    with a newline.
    """
    lines = _summary_lines(summary, title)
    lines += ["", "------------------- Latency Breakdowns -------------------"]
    for heading, key, unit, scale in _REPORT_SECTIONS:
        block = summary.get(key)
        if not block:
            continue
        lines.append(f"{heading}:")
        lines += _block_lines(block, unit, scale)
        lines.append("")
    lines.append("----------------- End of Report -----------------")
    return "\n".join(lines) + "\n"
