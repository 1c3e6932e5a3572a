"""final_snapshot.json, result_summary.json and report.txt (mlpe_fast.artifacts.summary).

Spec §1.4, §1.6, §3.3, §3.5; shapes from the reference client (mlcommons/endpoints
@ ea332753: metrics_aggregator/aggregator.py, snapshot.py, metrics/report.py).  The
last tests feed our files through the submission checker's own parser and
consistency rules (endpoints-submission-cli, spec §4.2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from mlpe_fast.artifacts.summary import (
    COUNTER_NAMES,
    final_snapshot,
    report_text,
    result_summary,
    snapshot_json_bytes,
    summary_json_bytes,
    write_json,
)

REFERENCE_SUMMARY_KEYS = [
    "version",
    "git_sha",
    "test_started_at",
    "n_samples_issued",
    "n_samples_completed",
    "n_samples_failed",
    "duration_ns",
    "state",
    "complete",
    "ttft",
    "tpot",
    "latency",
    "output_sequence_lengths",
    "input_sequence_lengths",
    "legacy_loadgen_window_duration_ns",
    "qps",
    "tps",
    "finish_reason_counts",
    "run_config",
]
ES_KEYS = ["99.9", "99.0", "97.0", "95.0", "90.0", "80.0", "75.0", "50.0"]
RUN_CONFIG = {"load_pattern": {"type": "concurrency", "target_concurrency": 8}}


def _arrays(n: int, seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return {
        "sample_latency_ns": rng.integers(2_000_000_000, 40_000_000_000, n),
        "isl": rng.integers(100, 2000, n),
        "osl": rng.integers(1, 1000, n),
        "ttft_ns": rng.integers(10_000_000, 900_000_000, n),
        "chunk_delta_ns": rng.integers(1, 90_000_000, 5 * n),
        "tpot_ns": rng.uniform(5e6, 40e6, n),
    }


def _counters(completed: int, failed: int = 0, **more: int) -> dict[str, int]:
    return {
        "total_samples_issued": completed + failed,
        "total_samples_completed": completed,
        "total_samples_failed": failed,
        "tracked_samples_issued": completed + failed,
        "tracked_samples_completed": completed,
        "tracked_samples_failed": failed,
        "tracked_finish_reason_stop": completed,
        **more,
    }


def _snapshot(
    n: int = 50,
    *,
    duration_ns: int = 10_000_000_000,
    window_ns: int = 8_000_000_000,
    state: str = "complete",
    pending: int = 0,
    **series: Any,
) -> dict[str, Any]:
    arrays = _arrays(n)
    arrays.update(series)
    counters = _counters(
        n, tracked_duration_ns=duration_ns, legacy_loadgen_window_duration_ns=window_ns
    )
    return final_snapshot(counters, arrays, state=state, n_pending_tasks=pending, timestamp_ns=123)


def _summary(snapshot: dict[str, Any], *, legacy: bool = False, **kwargs: Any) -> dict[str, Any]:
    return result_summary(
        snapshot,
        run_config=RUN_CONFIG,
        use_legacy_loadgen_qps_metrics=legacy,
        version="0.1.0",
        git_sha="abc123",
        **kwargs,
    )


# -- final_snapshot ---------------------------------------------------------------------


def test_snapshot_shape_counters_and_series_order() -> None:
    snap = _snapshot()
    assert list(snap) == ["counter", "timestamp_ns", "state", "n_pending_tasks", "metrics"]
    assert (snap["counter"], snap["timestamp_ns"], snap["state"]) == (1, 123, "complete")
    counters = [m for m in snap["metrics"] if m["type"] == "counter"]
    series = [m for m in snap["metrics"] if m["type"] == "series"]
    assert snap["metrics"] == counters + series  # counters first
    assert [c["name"] for c in counters] == list(COUNTER_NAMES)
    assert len(COUNTER_NAMES) == 15
    by_name = {c["name"]: c["value"] for c in counters}
    assert by_name["tracked_samples_completed"] == 50
    assert by_name["tracked_finish_reason_other"] == 0  # never set: written as 0
    assert all(list(c) == ["type", "name", "value"] for c in counters)
    assert [s["name"] for s in series] == [
        "sample_latency_ns",
        "isl",
        "osl",
        "ttft_ns",
        "chunk_delta_ns",
        "tpot_ns",
    ]
    with_estimates = {s["name"] for s in series if "early_stopping_percentiles" in s}
    assert with_estimates == {"sample_latency_ns", "ttft_ns", "tpot_ns"}


def test_interrupted_snapshot_has_no_estimates() -> None:
    # the reference's interrupted snapshot comes from its live (HDR) path, without them
    snap = _snapshot(state="interrupted")
    assert not any("early_stopping_percentiles" in m for m in snap["metrics"])


def test_snapshot_series_types() -> None:
    series = {m["name"]: m for m in _snapshot()["metrics"] if m["type"] == "series"}
    assert type(series["osl"]["total"]) is int
    assert type(series["tpot_ns"]["total"]) is float
    assert series["chunk_delta_ns"]["count"] == 250


def test_non_streaming_snapshot_has_no_streaming_series() -> None:
    arrays = _arrays(5)
    for name in ("ttft_ns", "chunk_delta_ns", "tpot_ns"):
        del arrays[name]
    snap = final_snapshot(
        _counters(5), arrays, state="complete", n_pending_tasks=0, timestamp_ns=1, streaming=False
    )
    names = [m["name"] for m in snap["metrics"] if m["type"] == "series"]
    assert names == ["sample_latency_ns", "isl", "osl"]
    with pytest.raises(ValueError, match="unknown series"):
        final_snapshot(
            {}, _arrays(5), state="complete", n_pending_tasks=0, timestamp_ns=1, streaming=False
        )


def test_missing_series_is_written_empty_and_estimates_can_be_off() -> None:
    snap = final_snapshot(
        _counters(3),
        {"osl": np.array([1, 2, 3])},
        state="complete",
        n_pending_tasks=0,
        timestamp_ns=1,
        early_stopping=False,
    )
    series = {m["name"]: m for m in snap["metrics"] if m["type"] == "series"}
    assert series["tpot_ns"]["count"] == 0 and series["tpot_ns"]["total"] == 0.0
    assert series["ttft_ns"]["histogram"] == [] and series["ttft_ns"]["total"] == 0
    assert not any("early_stopping_percentiles" in s for s in series.values())
    assert series["osl"]["total"] == 6


@pytest.mark.parametrize(
    ("counters", "series", "state", "message"),
    [
        ({"tracked_samples_issue": 1}, {}, "complete", "unknown counters"),
        ({"tracked_duration_ns": 1.5}, {}, "complete", "integer"),
        ({}, {"osl": np.array([1.5])}, "complete", "integers"),
        ({}, {}, "live", "state"),
    ],
)
def test_snapshot_refuses_bad_input(
    counters: dict[str, Any], series: dict[str, Any], state: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        final_snapshot(counters, series, state=state, n_pending_tasks=0, timestamp_ns=0)


# -- result_summary -----------------------------------------------------------------------


def test_summary_keys_in_reference_order_then_ours() -> None:
    summary = _summary(_snapshot(), extra={"usage_check": {"ok": True}})
    assert list(summary) == [*REFERENCE_SUMMARY_KEYS, "system_tps", "tps_per_user", "usage_check"]
    assert summary["version"] == "0.1.0" and summary["git_sha"] == "abc123"
    assert summary["test_started_at"] == 0
    assert summary["run_config"] == RUN_CONFIG
    with pytest.raises(ValueError, match="collides"):
        _summary(_snapshot(), extra={"qps": 1})


def test_summary_counts_blocks_and_finish_reasons() -> None:
    counters = _counters(
        7,
        2,
        tracked_duration_ns=10**9,
        tracked_finish_reason_length=3,
        tracked_finish_reason_other=1,
    )
    counters["tracked_finish_reason_stop"] = 3
    snap = final_snapshot(
        counters, {"osl": np.array([4, 6])}, state="complete", n_pending_tasks=0, timestamp_ns=0
    )
    summary = _summary(snap)
    assert (summary["n_samples_issued"], summary["n_samples_completed"]) == (9, 7)
    assert summary["n_samples_failed"] == 2
    assert summary["finish_reason_counts"] == {
        "stop": 3,
        "length": 3,
        "tool_calls": 0,
        "content_filter": 0,
        "function_call": 0,
        "other": 1,
    }
    assert summary["output_sequence_lengths"]["total"] == 10
    assert summary["output_sequence_lengths"]["avg"] == 5.0
    assert summary["input_sequence_lengths"] == {}  # no samples
    # empty tail series keep their all-null estimate map
    assert summary["ttft"] == {"early_stopping_percentiles": dict.fromkeys(ES_KEYS)}


def test_native_window() -> None:
    snap = _snapshot(osl=np.full(50, 20))
    summary = _summary(snap)
    assert summary["duration_ns"] == 10_000_000_000
    assert summary["legacy_loadgen_window_duration_ns"] is None
    assert summary["qps"] == 5.0  # 50 completed / 10 s
    assert summary["tps"] == 100.0  # 1000 tokens / 10 s


def test_legacy_loadgen_window_for_poisson() -> None:
    snap = _snapshot(osl=np.full(50, 20))
    summary = _summary(snap, legacy=True)
    assert summary["legacy_loadgen_window_duration_ns"] == 8_000_000_000
    assert summary["qps"] == 49 / 8  # (completed - 1) / window
    assert summary["tps"] == 1000 / 8
    # system_tps stays on the whole-run duration the checker divides by
    assert summary["system_tps"] == 100.0


def test_legacy_window_falls_back_to_the_native_one() -> None:
    for snap in (
        _snapshot(osl=np.full(50, 20), window_ns=0),  # no window recorded
        _snapshot(1, osl=np.array([20])),  # fewer than 2 completions
    ):
        summary = _summary(snap, legacy=True)
        assert summary["legacy_loadgen_window_duration_ns"] is None
        completed = summary["n_samples_completed"]
        assert summary["qps"] == completed / 10.0


def test_no_duration_and_no_tokens() -> None:
    summary = _summary(_snapshot(duration_ns=0, window_ns=0))
    assert summary["duration_ns"] is None
    assert summary["qps"] is None and summary["tps"] is None
    assert "system_tps" not in summary
    no_tokens = _summary(_snapshot(osl=np.array([], np.int64)))
    assert no_tokens["output_sequence_lengths"] == {}
    assert no_tokens["tps"] is None and "system_tps" not in no_tokens
    assert no_tokens["qps"] == 5.0


def test_no_tpot_means_no_tps_per_user() -> None:
    summary = _summary(_snapshot(tpot_ns=np.array([], np.float64)))
    assert "tps_per_user" not in summary


@pytest.mark.parametrize(
    ("state", "pending", "complete"),
    [("complete", 0, True), ("complete", 3, False), ("interrupted", 0, False)],
)
def test_complete_flag(state: str, pending: int, complete: bool) -> None:
    summary = _summary(_snapshot(state=state, pending=pending))
    assert summary["state"] == state
    assert summary["complete"] is complete


def test_system_tps_and_tps_per_user_by_hand() -> None:
    snap = _snapshot(
        10,
        duration_ns=2_000_000_000,
        osl=np.array([100, 200, 300, 0, 0, 0, 0, 0, 0, 0]),
        tpot_ns=np.arange(1, 11) * 1e6,  # 1..10 ms
    )
    summary = _summary(snap)
    assert summary["system_tps"] == 300.0  # 600 tokens / 2 s
    # TPOT p90 (method lower) = sorted[floor(0.9 * 9)] = 9 ms -> 1000 / 9 tokens/s
    assert summary["tpot"]["percentiles"]["90.0"] == 9e6
    assert summary["tps_per_user"] == pytest.approx(1000 / 9, rel=1e-15)


def test_summary_of_a_json_round_tripped_snapshot_is_the_same() -> None:
    # the reference builds its Report from the final_snapshot.json it wrote
    snap = _snapshot(200)
    assert _summary(json.loads(snapshot_json_bytes(snap))) == _summary(snap)


# -- files ------------------------------------------------------------------------------


def test_write_json_encoders(tmp_path: Path) -> None:
    obj = {"a": 1e20, "b": [[1.0, 2.5]], "c": None}
    write_json(tmp_path / "s.json", obj)
    data = (tmp_path / "s.json").read_bytes()
    assert data == msgspec.json.format(msgspec.json.encode(obj), indent=2)
    assert b'"a": 1e20' in data and not data.endswith(b"\n")
    write_json(tmp_path / "f.json", obj, encoder="stdlib")
    data = (tmp_path / "f.json").read_bytes()
    assert data == json.dumps(obj, indent=2).encode()
    assert b'"a": 1e+20' in data and not data.endswith(b"\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json", "s.json"]
    assert summary_json_bytes(obj) == (tmp_path / "s.json").read_bytes()


def test_report_text() -> None:
    summary = _summary(_snapshot(700, osl=np.full(700, 20), duration_ns=7_000_000_000))
    text = report_text(summary)
    lines = text.splitlines()
    assert text.endswith("\n")
    assert lines[0] == "----------------- Summary -----------------"
    assert lines[-1] == "----------------- End of Report -----------------"
    assert "Total samples completed: 700" in lines
    assert "Duration: 7.00 seconds" in lines
    assert "QPS: 100.00" in lines and "TPS: 2000.00" in lines
    assert "System TPS (output tokens / duration): 2000.00" in lines
    assert "  load_pattern: type=concurrency, target_concurrency=8" in lines
    for heading in ("TTFT:", "TPOT:", "Latency:", "Input sequence lengths:"):
        assert heading in lines
    p90_ms = summary["ttft"]["percentiles"]["90.0"] / 1e6
    assert f"    90.0: {p90_ms:.2f} ms" in lines
    assert "    99.9: N/A ms" in lines  # 700 samples cannot certify p99.9
    histogram_rows = [line for line in lines if " |" in line]
    assert len(histogram_rows) == 5 * 30
    incomplete = report_text(_summary(_snapshot(state="interrupted")), title="Point c=8")
    assert incomplete.splitlines()[0] == "----------------- Point c=8 -----------------"
    assert incomplete.splitlines()[1].startswith("WARNING: run was interrupted")


# -- the submission checker's own parsing and consistency rules ---------------------------

_CHECKER_REASON = "endpoints-submission-cli (the MLPerf Endpoints submission checker) not installed"


def _checker_results(path: Path) -> list[Any]:
    """Parse ``path`` as the checker does and run its per-point metric rules."""
    loader = pytest.importorskip("submission_checker.models.loader", reason=_CHECKER_REASON)
    point_result = pytest.importorskip(
        "submission_checker.models.aggregate.point_result", reason=_CHECKER_REASON
    )
    point_config = pytest.importorskip(
        "submission_checker.models.file.point_config", reason=_CHECKER_REASON
    )
    summary, load_errors = loader.load_result_summary(path)
    assert load_errors == []
    config = point_config.PointConfig.model_validate(
        {"concurrency": 8, "runtime_settings": {"load_pattern": "concurrency", "runtime": {}}},
        context={"yaml_path": path.with_name("point.yaml")},
    )
    checked = point_result.PointResult.model_validate(
        {"config": config, "summary": summary, "yaml_path": path.with_name("point.yaml")},
        context={"regions": None, "summary_path": path},
    )
    results: list[Any] = checked._check_results
    return results


def _realistic_summary() -> dict[str, Any]:
    arrays = _arrays(700, seed=9)
    counters = _counters(
        697,
        3,
        tracked_duration_ns=61_234_567_890,
        legacy_loadgen_window_duration_ns=60_000_000_000,
    )
    arrays = {
        name: values[: 5 * 697 if name == "chunk_delta_ns" else 697]
        for name, values in arrays.items()
    }
    snap = final_snapshot(counters, arrays, state="complete", n_pending_tasks=0, timestamp_ns=5)
    return _summary(json.loads(snapshot_json_bytes(snap)))


def test_checker_accepts_our_summary_and_agrees_on_the_derived_values(tmp_path: Path) -> None:
    summary = _realistic_summary()
    path = tmp_path / "result_summary.json"
    write_json(path, summary)
    results = _checker_results(path)
    errors = [r for r in results if r.severity.value == "error"]
    assert errors == []
    passed = {r.rule for r in results if r.key == "pass"}
    assert {
        "metric-consistency-duration",
        "metric-consistency-accounting",
        "metric-consistency-system-tps",
        "metric-consistency-tpot-p90",
        "metric-consistency-tps-per-user",
    } <= passed
    # the checker's own derivation equals what we stored
    from submission_checker.models.file.point_summary import PointSummary

    parsed = PointSummary.model_validate(json.loads(path.read_bytes()))
    assert parsed.system_tps == summary["system_tps"]
    assert parsed.tpot_p90_ms is not None
    assert 1000.0 / parsed.tpot_p90_ms == summary["tps_per_user"]


@pytest.mark.parametrize(
    ("key", "rule"),
    [
        ("system_tps", "metric-consistency-system-tps"),
        ("tps_per_user", "metric-consistency-tps-per-user"),
    ],
)
def test_checker_rejects_a_tampered_stored_value(tmp_path: Path, key: str, rule: str) -> None:
    summary = _realistic_summary()
    summary[key] *= 1.05
    path = tmp_path / "result_summary.json"
    write_json(path, summary)
    errors = [(r.rule, r.key) for r in _checker_results(path) if r.severity.value == "error"]
    assert errors == [(rule, "fail")]
