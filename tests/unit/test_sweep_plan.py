"""A curve checked before anything is measured: which stored points may be
reused (same settings only), a dedicated Offline point that would share a
point's folder, the checker's count rules on every list, and the plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.artifacts.config_yaml import write_config_yaml
from mlpe_fast.config import Generation, RunConfig, Seeds
from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import DatasetSpec
from mlpe_fast.sim import __file__ as sim_init
from mlpe_fast.sweep.preview import point_line, size_text
from mlpe_fast.sweep.reuse import differences, point_settings
from mlpe_fast.sweep.runner import plan_problems, plan_sweep, plan_text, prepare_sweep

DEMO_PROMPTS = str(Path(sim_init).parent / "demo_prompts.jsonl")
URL = "http://10.0.0.1:8000"
BASE = RunConfig(
    endpoints=(URL,),
    model="m",
    datasets=(DatasetSpec(path=DEMO_PROMPTS),),
    num_samples=8,
    max_output_tokens=4,
    report_dir="/tmp/curve/r1",
)


def diff(old: RunConfig, new: RunConfig, **kwargs: Any) -> list[str]:
    return differences(
        point_settings(old, old.endpoints), point_settings(new, new.endpoints), **kwargs
    )


# which settings make a stored point another point ---------------------------


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"endpoints": ("http://10.0.0.2:8000",)}, "endpoint_config.endpoints (--endpoints)"),
        ({"num_samples": 9}, "settings.runtime.n_samples_to_issue (--num-samples) 8 -> 9"),
        ({"num_samples": None, "duration_s": 60.0}, "settings.runtime.min_duration_ms"),
        ({"max_output_tokens": 8}, "model_params.max_new_tokens (--max-output-tokens) 4 -> 8"),
        ({"model": "other"}, "model_params.name (--model) m -> other"),
        ({"tokenizer": "/tok"}, "model_params.tokenizer_name (--tokenizer) unset -> /tok"),
        ({"datasets": (DatasetSpec(path="/other.jsonl"),)}, "datasets[0].path (--dataset)"),
        ({"datasets": (DatasetSpec(path=DEMO_PROMPTS, samples=4),)}, "datasets[0].samples"),
        ({"seeds": Seeds(scheduler=1)}, "settings.runtime.scheduler_random_seed"),
        ({"seeds": Seeds(sample_index=1)}, "settings.runtime.dataloader_random_seed"),
        ({"seeds": Seeds(salt=1)}, "mlpe_fast.salt_random_seed (--salt-seed)"),
        ({"streaming": "off"}, "model_params.streaming (--streaming) on -> off"),
        ({"api_type": "openai-completions"}, "endpoint_config.api_type (--api-type)"),
        ({"salt": False}, "mlpe_fast.salt (--salt) true -> false"),
        ({"generation": Generation(temperature=0.5)}, "model_params.temperature unset -> 0.5"),
        ({"warmup_requests": 4}, "settings.warmup.enabled (--warmup-*) false -> true"),
        ({"http2": True}, "mlpe_fast.http2 (--http2) unset -> true"),
        ({"send_max_tokens": True}, "mlpe_fast.send_max_tokens (--send-max-tokens) unset -> true"),
        ({"max_duration_s": 5.0}, "settings.runtime.max_duration_ms (--max-duration) 0 -> 5000"),
        ({"concurrency": 2}, "settings.load_pattern.target_concurrency"),
        ({"mlperf_model": "gpt-oss-120b"}, "submission_ref.model (--mlperf-model)"),
        ({"mode": "acc"}, "mlpe_fast.mode (--mode) perf -> acc"),
    ],
)
def test_a_setting_that_changes_the_numbers_is_a_difference(
    changes: dict[str, Any], key: str
) -> None:
    found = diff(BASE, msgspec.structs.replace(BASE, **changes))
    assert any(key in line for line in found), found


def test_what_does_not_change_the_numbers_is_no_difference() -> None:
    same = msgspec.structs.replace(
        BASE, report_dir="/elsewhere/r1", name="renamed", api_key="secret", insecure=True
    )
    assert diff(BASE, same) == []
    # A point measured with its accuracy run serves one without.
    accuracy = DatasetSpec(path=DEMO_PROMPTS, type="accuracy", name="acc")
    both = msgspec.structs.replace(BASE, mode="both", datasets=(*BASE.datasets, accuracy))
    assert diff(both, BASE) == []
    assert diff(BASE, both) != []  # the other way round it lacks one (and its dataset)
    # An accuracy dataset does not change a point without an accuracy run.
    other = msgspec.structs.replace(accuracy, path="/other.jsonl")
    assert (
        diff(both, msgspec.structs.replace(both, mode="perf", datasets=(BASE.datasets[0], other)))
        == []
    )


def test_the_demo_endpoint_matches_any_loopback_port() -> None:
    demo = point_settings(BASE, None)
    stored = point_settings(
        msgspec.structs.replace(BASE, endpoints=("http://127.0.0.1:41234",)), None
    )
    stored["endpoint_config"]["endpoints"] = ["http://127.0.0.1:41234"]
    assert differences(stored, demo, simulated=True) == []
    stored["endpoint_config"]["endpoints"] = [URL]
    (found,) = differences(stored, demo, simulated=True)
    assert found.startswith("endpoint_config.endpoints (--endpoints) http://10.0.0.1:8000 ->")
    # Against a real endpoint the port counts.
    stored["endpoint_config"]["endpoints"] = ["http://127.0.0.1:41234"]
    real = point_settings(BASE, ["http://127.0.0.1:41235"])
    assert differences(stored, real) == [
        "endpoint_config.endpoints (--endpoints) http://127.0.0.1:41234 -> http://127.0.0.1:41235"
    ]


def _complete(folder: Path, config: RunConfig | None) -> None:
    (folder / "performance").mkdir(parents=True)
    (folder / "performance" / "result_summary.json").write_text(json.dumps({"state": "complete"}))
    if config is not None:
        write_config_yaml(folder / "config.yaml", config, endpoints=list(config.endpoints))


def test_prepare_sweep_reuses_only_same_settings(tmp_path: Path) -> None:
    curve = msgspec.structs.replace(BASE, sweep=(1, 2), offline="none", report_dir=str(tmp_path))
    point = msgspec.structs.replace(BASE, whole_passes=True, report_dir=str(tmp_path / "r1"))
    _complete(tmp_path / "r1", point)
    plan = prepare_sweep(curve, curve.endpoints)
    assert list(plan.reused) == [str(tmp_path / "r1")]
    assert "8 samples (measured already: reused)" in plan_text(plan)
    # r2 complete but measured with 16 output tokens; r1 still fine.
    _complete(tmp_path / "r2", msgspec.structs.replace(point, concurrency=2, max_output_tokens=16))
    with pytest.raises(UsageError) as error:
        prepare_sweep(curve, curve.endpoints)
    message = str(error.value)
    assert f"{tmp_path / 'r2'} was measured with other settings" in message
    assert "model_params.max_new_tokens (--max-output-tokens) 16 -> 4" in message
    assert "another --report-dir" in message and f"remove r2 from {tmp_path}" in message


def test_a_complete_point_without_config_yaml_is_not_reused(tmp_path: Path) -> None:
    curve = msgspec.structs.replace(BASE, sweep=(1, 2), offline="none", report_dir=str(tmp_path))
    _complete(tmp_path / "r2", None)
    with pytest.raises(UsageError, match=r"r2 was measured with other settings.*no config\.yaml"):
        prepare_sweep(curve, curve.endpoints)


# a dedicated Offline point in a level's folder -------------------------------


def test_a_dedicated_offline_point_cannot_share_a_levels_folder() -> None:
    curve = msgspec.structs.replace(BASE, sweep=(1, 2, 4), report_dir="/tmp/curve")
    with pytest.raises(UsageError) as error:
        plan_sweep(curve, 4)
    message = str(error.value)
    assert "would share the folder r4" in message
    assert "drop 4 from --concurrency" in message and "--offline elected (4 is C_max)" in message
    assert "--offline none" in message
    with pytest.raises(UsageError) as error:
        plan_sweep(curve, 2)
    assert "drop 2 from" in str(error.value) and "elected" not in str(error.value)
    # A planned curve whose C_max is the dataset size.
    planned = msgspec.structs.replace(BASE, max_concurrency=64, report_dir="/tmp/curve")
    with pytest.raises(UsageError, match="list the points with --concurrency, without 64"):
        plan_sweep(planned, 64)
    # Elected, or no Offline point at all: no dedicated folder to collide.
    for offline in ("elected", "none"):
        points = plan_sweep(msgspec.structs.replace(curve, offline=offline), 4)
        assert [p.folder for p in points] == ["/tmp/curve/r1", "/tmp/curve/r2", "/tmp/curve/r4"]


# the checker's rules on every list --------------------------------------------


def rules(problems: list[str]) -> list[str]:
    return [problem.split(":", 1)[0] for problem in problems]


def test_a_short_list_is_warned_without_max_concurrency() -> None:
    curve = msgspec.structs.replace(BASE, sweep=(1, 2, 4), report_dir="/tmp/curve")
    problems = plan_problems(curve, plan_sweep(curve, 96))
    assert rules(problems) == ["c-max", "point-count", "region-computation"]
    assert "the checks take C_max 4, the highest point" in problems[0]
    assert problems[1].startswith("point-count: 4 points, the checker needs at least 8")
    # Above 32, the regions too; elected needs 7.
    curve = msgspec.structs.replace(curve, sweep=(1, 8, 64), offline="elected")
    problems = plan_problems(curve, plan_sweep(curve, 96))
    assert rules(problems) == ["c-max", "point-count", "low-concurrency-coverage"]
    assert "3 points, the checker needs at least 7" in problems[1]
    # A good list without --max-concurrency says nothing.
    curve = msgspec.structs.replace(curve, sweep=(1, 4, 8, 16, 32, 48, 64))
    assert plan_problems(curve, plan_sweep(curve, 96)) == []
    # A dedicated Offline point below C_max is flagged (spec §2.3).
    curve = msgspec.structs.replace(curve, offline="dedicated", max_concurrency=64)
    problems = plan_problems(curve, plan_sweep(curve, 40))
    assert rules(problems) == ["offline-concurrency"]


# the plan ---------------------------------------------------------------------


def test_the_plan_says_what_each_point_is_and_how_long_it_takes() -> None:
    curve = msgspec.structs.replace(
        BASE,
        max_concurrency=64,
        num_samples=None,
        report_dir="/tmp/curve",
        mode="both",
        datasets=(*BASE.datasets, DatasetSpec(path=DEMO_PROMPTS, type="accuracy", name="acc")),
    )
    points = plan_sweep(curve, 96)
    from mlpe_fast.sweep.runner import SweepPlan

    text = plan_text(SweepPlan(curve, points, [], {}, 96))
    lines = text.splitlines()
    assert lines[0] == (
        "plan: a curve of 8 points (7 at fixed concurrency + a dedicated Offline point;"
        " C_max 64) in /tmp/curve"
    )
    assert lines[1].split() == ["folder", "concurrency", "region", "offline", "accuracy", "size"]
    # each fixed-concurrency point: the rules' duration and the four
    # super-passes of an official steady-state window (spec §1.4, §2.4)
    passes = ["and", "at", "least", "4", "dataset", "passes", "(384", "samples)"]
    first = ["r1", "1", "low_latency", "-", "yes", "600", "s", "or", "more"]
    assert lines[2].split() == [*first, *passes]
    assert lines[8].split() == [
        "r64",
        "64",
        "high_concurrency",
        "-",
        "no",
        "1200",
        "s",
        "or",
        "more",
        *passes,
    ]
    assert lines[9].split() == [
        "r96",
        "96",
        "submitters_choice",
        "dedicated",
        "yes",
        "96",
        "samples",
    ]
    assert lines[10] == (
        "expected: at least 1h 20m for 7 points sized by duration, plus 1 point sized by"
        " sample count and 5 accuracy runs, as long as the endpoint takes"
    )


def test_a_single_points_line() -> None:
    assert point_line(BASE, None) == "plan: one point: concurrency 1, 8 samples, into /tmp/curve/r1"
    poisson = msgspec.structs.replace(
        BASE, load_pattern="poisson", target_qps=5.0, num_samples=None, duration_s=600.0
    )
    assert point_line(poisson, 96).startswith(
        "plan: one point: poisson at 5 queries/s, 600 s or more"
    )
    assert size_text(msgspec.structs.replace(BASE, num_samples=None), 96) == (
        "96 samples (one dataset pass)",
        None,
    )
    assert size_text(msgspec.structs.replace(BASE, duration_s=0.3), 96)[0] == (
        "8 samples or 0.3 s, whichever comes first"
    )


def _summary(steady: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "system_tps": 100.0,
        "tps_per_user": 20.0,
        "ttft": {"percentiles": {"90.0": 50e6}},
        "mlpe_fast": {"steady_state": steady},
    }


def test_a_windowable_point_takes_its_window_figures_into_the_curve() -> None:
    # spec §1.4: the window is the official result when windowable; the
    # whole-run figures stay beside it in the row
    from mlpe_fast.sweep.runner import SweepPoint, _row, _table

    point = SweepPoint(8, "low_latency", "none", False, "out/r8")
    window = {"system_tps": 120.0, "tps_per_user": 25.0, "ttft_p90_ms": 40.0}
    official = _row(point, _summary({"basis": "steady_state", "figures": window}))
    assert {k: official[k] for k in window} == window
    assert official["basis"] == "steady_state"
    assert official["total"] == {"system_tps": 100.0, "tps_per_user": 20.0, "ttft_p90_ms": 50.0}
    assert "steady-state window" in _table([official])
    fallback = _row(point, _summary({"basis": "total", "figures": window}))
    assert fallback["system_tps"] == 100.0 and fallback["basis"] == "total"
    assert "total" not in fallback and "steady-state window" not in _table([fallback])
    assert _row(point, _summary(None))["basis"] == "total"


def test_the_plan_says_when_no_window_can_be_official() -> None:
    # spec §1.4: windowable needs 4 super-passes (dataset passes)
    from mlpe_fast.sweep.runner import steady_state_problems

    short = msgspec.structs.replace(BASE, num_samples=300, duration_s=None)
    [line] = steady_state_problems(short, 96)
    assert line.startswith("steady-state: 300 samples per point are fewer than 4 passes")
    assert steady_state_problems(msgspec.structs.replace(short, num_samples=384), 96) == []
    timed = msgspec.structs.replace(BASE, num_samples=None, duration_s=30.0)
    [line] = steady_state_problems(timed, 96)
    assert line.endswith("add --min-passes 4")
    assert steady_state_problems(msgspec.structs.replace(timed, min_passes=4), 96) == []
    # sized by the rules: four passes are asked of every point
    ruled = msgspec.structs.replace(BASE, num_samples=None, duration_s=None, max_concurrency=64)
    assert steady_state_problems(ruled, 96) == []


def test_an_elected_offline_point_carries_the_high_bands_accuracy_run() -> None:
    # The checker counts an elected C_max point's result once for its region
    # and once for Offline (spec §2.6, §5.7.2): four accuracy runs cover the
    # five slots, and a fifth at another High point would be spent for nothing.
    curve = msgspec.structs.replace(
        BASE,
        mode="both",
        datasets=(*BASE.datasets, DatasetSpec(path=DEMO_PROMPTS, type="accuracy", name="acc")),
        report_dir="/tmp/curve",
        sweep=(1, 8, 64, 512, 768, 1024),
        max_concurrency=1024,
        offline="elected",
    )
    points = plan_sweep(curve, dataset_size=8)
    assert {p.concurrency for p in points if p.accuracy} == {1, 8, 64, 1024}
    # A dedicated Offline point's result counts for Offline only: the High
    # band then takes its lowest point, as before.
    dedicated = msgspec.structs.replace(curve, offline="dedicated")
    points = plan_sweep(dedicated, dataset_size=8192)
    assert {p.concurrency for p in points if p.accuracy} == {1, 8, 64, 512, 8192}
