"""Submission bundles (mlpe_fast.submission): system file, disclosures, bundle, checker.

The fixture is the verified minimal passing curve of spec §7: Llama-3.1-8B, C_max
1024, points r1 r4 r8 r16 r64 r512 r1024 and a dedicated Offline r13368, accuracy at
r1 r8 r64 r1024 r13368, seed set A, no warmup, windowable steady-state blocks over 4
super-passes, Appendix E power (component_sum, air).  Its run folders are written
with mlpe-fast's own writers from synthetic samples, bundled, and judged by the
official checker (endpoints-submission-cli) with ``--strict`` semantics; then each
mutation of spec §7 must fail on its rule.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mlpe_fast.accuracy.results import write_accuracy_results
from mlpe_fast.artifacts.config_yaml import write_config_yaml
from mlpe_fast.artifacts.run_folder import RunFolder
from mlpe_fast.artifacts.summary import final_snapshot, report_text, result_summary, write_json
from mlpe_fast.cli import main
from mlpe_fast.config import SEED_SET_A_SAMPLE_INDEX, SEED_SET_A_SCHEDULER, resolve
from mlpe_fast.errors import UsageError
from mlpe_fast.submission import (
    PENDING_SUBMISSION_ID,
    PointFolder,
    build_bundle,
    init_template,
    load_system,
    point_yaml,
    read_run,
    run_checker,
    system_power_json,
)
from mlpe_fast.submission.system import SystemDescription, adoption_window, directory_name

DATASET_SIZE = 13_368
SUPER_PASSES = 4
SAMPLES = DATASET_SIZE * SUPER_PASSES
C_MAX = 1024
OFFLINE = DATASET_SIZE
# (concurrency, region for C_max 1024 / C_min 1, system tokens/s); spec §2.2's table:
# Low 2-11, Medium 12-103, High 104-1024.
CURVE = (
    (1, "low_latency", 90.0),
    (4, "low_concurrency", 330.0),
    (8, "low_concurrency", 620.0),
    (16, "med_concurrency", 1100.0),
    (64, "med_concurrency", 2600.0),
    (512, "high_concurrency", 4300.0),
    (1024, "high_concurrency", 5000.0),
)
OFFLINE_TPS = 5100.0  # >= 0.98 x the C_max point's (offline-ordering)
ACCURACY_AT = (1, 8, 64, 1024, OFFLINE)  # the four mandatory bands + Offline (spec §2.6)
PASSING_SCORES = {
    "rouge1": 38.9,
    "rouge2": 15.95,
    "rougeL": 24.6,
    "rougeLsum": 35.9,
    "gen_len": 8_167_000,
}


@pytest.fixture(scope="module")
def checker() -> None:
    pytest.importorskip(
        "submission_checker.checker",
        reason="endpoints-submission-cli (the MLPerf Endpoints submission checker) not installed",
    )


# -- synthetic run folders ------------------------------------------------------------


def _run_config(concurrency: int, *, offline: bool, **load: Any) -> Any:
    pattern = "offline" if offline else str(load.pop("load_pattern", "concurrency"))
    flags = argparse.Namespace(
        load_pattern=pattern,
        model="meta-llama/Llama-3.1-8B-Instruct",
        endpoints=["http://127.0.0.1:8000"],
        **({} if offline or pattern != "concurrency" else {"concurrency": concurrency}),
        **load,
    )
    return resolve(flags)


def write_run_folder(
    folder: Path,
    concurrency: int,
    tps: float,
    *,
    offline: bool = False,
    accuracy: bool = False,
    **load: Any,
) -> Path:
    """A complete run folder as ``mlpe-fast run`` leaves it, from synthetic samples."""
    config = _run_config(concurrency, offline=offline, **load)
    rng = np.random.default_rng(concurrency)
    osl = rng.integers(96, 160, SAMPLES)
    duration_ns = int(int(osl.sum()) / tps * 1e9)
    series: dict[str, Any] = {
        "sample_latency_ns": rng.integers(10**9, 10**10, SAMPLES),
        "isl": rng.integers(600, 1000, SAMPLES),
        "osl": osl,
    }
    if not offline:  # the Offline burst is not streamed: no TTFT/TPOT (spec §2.3)
        tpot_ms = concurrency / tps * 1000  # Little's law per user
        series |= {
            "ttft_ns": rng.integers(10**7, 10**8, SAMPLES),
            "chunk_delta_ns": rng.integers(10**6, 10**7, SAMPLES),
            "tpot_ns": rng.uniform(0.9, 1.1, SAMPLES) * tpot_ms * 1e6,
        }
    counters = {
        "total_samples_issued": SAMPLES,
        "total_samples_completed": SAMPLES,
        "tracked_samples_issued": SAMPLES,
        "tracked_samples_completed": SAMPLES,
        "tracked_finish_reason_stop": SAMPLES,
        "tracked_duration_ns": duration_ns,
        "total_duration_ns": duration_ns,
    }
    snapshot = final_snapshot(
        counters,
        series,
        state="complete",
        n_pending_tasks=0,
        timestamp_ns=1,
        streaming=not offline,
        early_stopping=False,
    )
    write_config_yaml(folder / "config.yaml", config)
    settings = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))["settings"]
    run_config = {
        "load_pattern": settings["load_pattern"],
        "warmup": settings["warmup"],
        "scheduler_random_seed": config.seeds.scheduler,
        "dataloader_random_seed": config.seeds.sample_index,
    }
    summary = result_summary(
        snapshot,
        run_config=run_config,
        use_legacy_loadgen_qps_metrics=False,
        version="0.1.0",
        git_sha=None,
    )
    run = RunFolder(folder)
    run.prepare()
    run.write_results(summary, snapshot, report_text(summary))
    run.sample_idx_map.write_text('{"performance": {}}', encoding="utf-8")
    if accuracy:
        write_accuracy_results(run.accuracy_results, [_accuracy_entry()])
    return folder


def _accuracy_entry() -> dict[str, Any]:
    return {
        "dataset_name": "cnn_dailymail::llama3_8b",
        "extractor": None,
        "ground_truth_column": "highlights",
        "score": PASSING_SCORES,
        "unit_samples": DATASET_SIZE,
        "num_repeats": 1,
        "total_samples": DATASET_SIZE,
        "duration_s": 900.0,
        "complete": True,
        "dataset_type": "accuracy",
        "response_counts": {"issued": DATASET_SIZE, "completed": DATASET_SIZE},
    }


def steady_state(duration_s: float) -> dict[str, Any]:
    """A windowable block over 4 super-passes (what the steady-state module reports)."""
    return {
        "status": "windowable",
        "verdict": "STEADY STATE",
        "window": {
            "super_pass_start": 1,
            "super_pass_end": SUPER_PASSES,
            "super_pass_size": DATASET_SIZE,
            "n_samples": SAMPLES,
            "duration_s": np.float64(round(0.95 * duration_s, 3)),  # numpy, as computed
        },
        "state": {"tpot_p50": "Plateau", "tpot_p90": "Plateau"},
    }


def point_folder(path: Path, concurrency: int, region: str, offline: str = "none") -> PointFolder:
    summary = json.loads((path / "performance" / "result_summary.json").read_bytes())
    return PointFolder(
        path=path,
        concurrency=concurrency,
        region=region,
        offline=offline,
        steady_state=steady_state(summary["duration_ns"] / 1e9),
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, PointFolder]:
    """The curve's run folders, written once for the module."""
    root = tmp_path_factory.mktemp("runs")
    points: dict[int, PointFolder] = {}
    for concurrency, region, tps in CURVE:
        folder = write_run_folder(
            root / f"c{concurrency}", concurrency, tps, accuracy=concurrency in ACCURACY_AT
        )
        points[concurrency] = point_folder(folder, concurrency, region)
    folder = write_run_folder(root / "offline", OFFLINE, OFFLINE_TPS, offline=True, accuracy=True)
    points[OFFLINE] = point_folder(folder, OFFLINE, "submitters_choice", "dedicated")
    return points


def system_file(tmp_path: Path, **changes: Any) -> Path:
    """The template, which is the spec §7 system, with top-level keys changed."""
    path = init_template(tmp_path / "system.yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def system(tmp_path: Path) -> SystemDescription:
    return load_system(system_file(tmp_path))


# -- the verified minimal passing bundle ----------------------------------------------


def test_minimal_curve_passes_the_checker_strictly(
    checker: None, runs: dict[int, PointFolder], system: SystemDescription, tmp_path: Path
) -> None:
    submission = build_bundle(list(runs.values()), system, tmp_path / "out")
    assert submission == tmp_path / "out" / "Example_Org" / PENDING_SUBMISSION_ID
    outcome = run_checker(submission.parent, strict=True)
    assert (outcome.errors, outcome.warnings) == ((), ()), outcome
    assert outcome.passed

    model = submission / "results" / "Example_8-GPU_server" / "llama3_1-8b"
    assert sorted(p.name for p in model.iterdir()) == sorted(f"r{c}" for c in runs)
    r64 = model / "r64"
    assert sorted(p.name for p in r64.iterdir()) == [
        "accuracy_results.json",
        "config.yaml",
        "metrics",
        "point.yaml",
        "report.txt",
        "result_summary.json",
        "sample_idx_map.json",
        "system_desc.json",
    ]
    assert not (model / "r16" / "accuracy_results.json").exists()
    assert (r64 / "result_summary.json").read_bytes() == (
        runs[64].path / "performance" / "result_summary.json"
    ).read_bytes()
    assert (submission / "src" / "vllm" / "README.md").is_file()

    point = yaml.safe_load((r64 / "point.yaml").read_text(encoding="utf-8"))
    assert point["runtime_settings"]["runtime"] == {
        "scheduler_rng_seed": 10487924139932647040,
        "sample_index_rng_seed": 586478644936801402,
        "model_seed": 9315206023656308754,
    }
    assert point["warmup"]["concurrency"] == 0 and point["warmup"]["requests_issued"] == 0
    assert (point["region"], point["offline"], point["shared_src"]) == (
        "med_concurrency",
        "none",
        "src/vllm",
    )
    assert point["dataset_type"] == "Accuracy + Performance"
    offline_point = yaml.safe_load((model / "r13368" / "point.yaml").read_text(encoding="utf-8"))
    assert offline_point["runtime_settings"]["load_pattern"] == "max_throughput"
    utilization = {
        c: json.loads((model / f"r{c}" / "system_desc.json").read_bytes())["tps_utilization"]
        for c in runs
    }
    assert utilization[OFFLINE] == 1.0
    assert utilization[1] == pytest.approx(90 / 5100, rel=0.02)


def test_mlpe_fast_s_request_settings_and_server_calls_pass_the_checker(
    checker: None, runs: dict[int, PointFolder], system: SystemDescription, tmp_path: Path
) -> None:
    # What docs/workloads.md adds to a run folder -- config.yaml's synthetic
    # dataset, headers, extra body, reset route, and server_calls.json beside
    # it -- must not cost a curve its checker pass.
    own = {
        "header": ["X-Team:perf", "Authorization:Bearer sk-secret"],
        "extra_body": '{"ignore_eos": true}',
        "reset_prefix_cache": "vllm",
        "tokenizer_check": "on",
        "dataset": ["synthetic:isl=normal(1024,128),osl=128,prefix=64,samples=13368"],
    }
    curve = []
    for concurrency, point in runs.items():
        folder = _copy_run(runs, concurrency, tmp_path / "runs" / point.path.name)
        config = _run_config(concurrency, offline=point.offline == "dedicated", **own)
        write_config_yaml(folder / "config.yaml", config)
        (folder / "server_calls.json").write_text('{"prefix_cache_reset": []}', encoding="utf-8")
        curve.append(point_folder(folder, concurrency, point.region, point.offline))
    submission = build_bundle(curve, system, tmp_path / "out")
    outcome = run_checker(submission.parent, strict=True)
    assert (outcome.errors, outcome.warnings) == ((), ()), outcome
    written = (submission / "results" / "Example_8-GPU_server" / "llama3_1-8b" / "r64").iterdir()
    assert "server_calls.json" not in {p.name for p in written}
    bundled = next(submission.glob("results/*/*/r64/config.yaml")).read_text(encoding="utf-8")
    assert "sk-secret" not in bundled and "synthetic:" in bundled


# -- mutations (spec §7): each is rejected on its rule ------------------------------------


def _copy_run(runs: dict[int, PointFolder], concurrency: int, target: Path) -> Path:
    return Path(shutil.copytree(runs[concurrency].path, target))


def _without_offline(runs: dict[int, PointFolder], tmp: Path) -> list[PointFolder]:
    return [p for c, p in runs.items() if c != OFFLINE]


def _extra_accuracy(runs: dict[int, PointFolder], tmp: Path) -> list[PointFolder]:
    folder = _copy_run(runs, 16, tmp / "c16")
    write_accuracy_results(folder / "accuracy" / "accuracy_results.json", [_accuracy_entry()])
    return [p if c != 16 else point_folder(folder, 16, p.region) for c, p in runs.items()]


def _inflated_system_tps(runs: dict[int, PointFolder], tmp: Path) -> list[PointFolder]:
    folder = _copy_run(runs, 64, tmp / "c64")
    path = folder / "performance" / "result_summary.json"
    summary = json.loads(path.read_bytes())
    summary["system_tps"] *= 1.05
    write_json(path, summary)
    return [p if c != 64 else point_folder(folder, 64, p.region) for c, p in runs.items()]


def _poisson(runs: dict[int, PointFolder], tmp: Path) -> list[PointFolder]:
    folder = write_run_folder(tmp / "c4", 4, 330.0, load_pattern="poisson", target_qps=3.0)
    return [p if c != 4 else point_folder(folder, 4, p.region) for c, p in runs.items()]


def _noncanonical_model_name(submission: Path) -> None:
    for path in submission.glob("results/*/*/r*/point.yaml"):
        point = yaml.safe_load(path.read_text(encoding="utf-8"))
        point["model_name"] = "llama3.1-8b"
        path.write_text(yaml.safe_dump(point, sort_keys=False), encoding="utf-8")


Mutation = Callable[[dict[int, PointFolder], Path], list[PointFolder]]


@pytest.mark.parametrize(
    ("points", "edit", "expected"),
    [
        (_without_offline, None, {"offline-point-present"}),
        # the folder keeps the canonical name, so the two now disagree as well
        (None, _noncanonical_model_name, {"model-name-valid", "model-name-consistency"}),
        (_inflated_system_tps, None, {"metric-consistency-system-tps"}),
        (_extra_accuracy, None, {"accuracy-coverage"}),
        (_poisson, None, {"load-pattern", "benchmark-type-consistency"}),
    ],
    ids=["no-offline", "llama3.1-8b", "system-tps+5%", "extra-accuracy", "poisson"],
)
def test_spec_mutations_are_rejected(
    checker: None,
    runs: dict[int, PointFolder],
    system: SystemDescription,
    tmp_path: Path,
    points: Mutation | None,
    edit: Callable[[Path], None] | None,
    expected: set[str],
) -> None:
    curve = points(runs, tmp_path) if points is not None else list(runs.values())
    submission = build_bundle(curve, system, tmp_path / "out")
    if edit is not None:
        edit(submission)
    outcome = run_checker(submission, strict=True)
    assert not outcome.passed
    assert {r for r, _ in outcome.errors} == expected and outcome.warnings == (), outcome


# -- the system file -----------------------------------------------------------------------


def test_template_is_the_spec_example_and_validates(tmp_path: Path) -> None:
    system = load_system(init_template(tmp_path / "system.yaml"))
    assert system.model.model_name == "llama3_1-8b"
    assert (system.max_supported_concurrency, system.seed_set) == (1024, "A")
    assert system.target_cohort in adoption_window(system.seeds.published_cohort)
    power = system_power_json(system)
    assert power["provisioned_power_kw"] == 12.45  # spec §3.8: 8,300 W x 1.5
    assert power["computed"]["total_system_power_w"] == 12_450
    with pytest.raises(UsageError, match="already exists"):
        init_template(tmp_path / "system.yaml")


def test_init_where_the_name_is_refused_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The system's reason in one line, status 2 (it was a traceback)."""
    target = tmp_path / f"{'x' * 300}.yaml"
    assert main(["init", "--system-file", str(target)]) == 2
    expected = f"mlpe-fast: {target}: cannot write: File name too long"
    assert capsys.readouterr().err.splitlines() == [expected]


def test_init_under_a_file_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file where a folder is needed is named (it said "File exists")."""
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "deeper" / "x.yaml"
    assert main(["init", "--system-file", str(target)]) == 2
    expected = f"mlpe-fast: {target}: cannot write: {tmp_path / 'a-file'} is a file, not a folder"
    assert capsys.readouterr().err.splitlines() == [expected]


def test_adoption_window_counts_four_cohorts_across_a_year() -> None:
    assert adoption_window("2026-10-C1") == ("2026-10-C1", "2026-11-C0", "2026-11-C1", "2026-12-C0")
    assert adoption_window("2026-12-C1")[-1] == "2027-02-C0"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"colour": "blue"}, "unknown key colour"),
        ({"model": {"model_name": "llama3_1-8b", "colour": 1}}, "unknown key model.colour"),
        ({"max_supported_concurrency": 32}, "max_supported_concurrency: C_max must be above 32"),
        ({"max_supported_concurrency": "many"}, "max_supported_concurrency: expected int"),
        ({"availability_url": None}, "availability_url: required when availability is Available"),
        ({"availability": "Preview"}, "target_availability_date: required"),
        ({"shortened_system_name": "x" * 21}, "shortened_system_name: at most 20"),
        ({"target_cohort": "2027-01-C0"}, "target_cohort: seed set A can be adopted for"),
        ({"target_cohort": "2026-13-C0"}, "target_cohort: expected YYYY-MM-C0"),
        ({"seed_set": "B"}, "seed_set: 'B' is not a published seed set"),
        ({"power": None}, "power: required in the Standardized division"),
        ({"implementation": "../x"}, "implementation: a folder name"),
        ({"cooling": "water"}, "cooling: invalid enum value 'water'"),
    ],
)
def test_system_file_mistakes_are_one_line_naming_the_key(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    path = system_file(tmp_path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        elif isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = data[key] | value
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(UsageError) as raised:
        load_system(path)
    text = str(raised.value)
    assert message in text and "\n" not in text and text.startswith(str(path))


@pytest.mark.parametrize(
    ("name", "hint"),
    [("llama3.1-8b", "did you mean llama3_1-8b?"), ("../../etc", "expected one of")],
)
def test_model_name_must_be_canonical(tmp_path: Path, name: str, hint: str) -> None:
    path = system_file(tmp_path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["model"]["model_name"] = name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(UsageError, match=rf"model\.model_name: .*{re.escape(hint)}"):
        load_system(path)


def test_nested_schema_mistakes_name_their_path(tmp_path: Path) -> None:
    path = system_file(tmp_path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    node = data["system_desc"]["node_types"][0]
    del node["driver"]
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(UsageError, match=r"missing key system_desc\.node_types\[0\]\.driver"):
        load_system(path)
    node["driver"] = "d"
    del node["host_processor_core_count"]
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(UsageError, match="host_processor_core_count or host_processor_vcpu"):
        load_system(path)
    node["host_processor_vcpu_count"] = 96
    cpu = data["power"]["node_sets"][0]["components"]["cpu"]
    cpu["tdp_per_unit"]["source"] = "the vendor told us"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(UsageError, match=r"cpu\.tdp_per_unit\.source: .* needs a public URL"):
        load_system(path)


# -- power: our arithmetic is the checker's ------------------------------------------------


def _sourced(watts: float) -> dict[str, Any]:
    return {"value_w": watts, "source_type": "vendor_spec", "source": "https://example.com/x"}


def test_power_figures_match_the_checkers_recomputation(checker: None, tmp_path: Path) -> None:
    from submission_checker.models.file.system_power import SystemPower

    path = system_file(tmp_path, cooling="liquid")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["system_desc"]["node_types"][0]["number_of_nodes"] = 4
    data["system_desc"]["node_types"].append(
        dict(data["system_desc"]["node_types"][0], system_node_ensemble_id=1)
    )
    components = data["power"]["node_sets"][0]["components"]
    components["scale_up_network"] = {
        "method": "bandwidth_estimate",
        "aggregate_bandwidth_tbps": 14.4,
        "energy_per_bit_pj": {"value_pj": 5, "source_type": "mlc_default", "source": "D.1"},
    }
    data["power"]["node_sets"][0]["nodes_provisioned"] = 4
    data["power"]["node_sets"].append(
        {
            "node_set_id": 1,
            "system_node_ensemble_id": 1,
            "nodes_provisioned": 2,
            "power_method": "node_scaling",
            "nodes_in_published_rack": 18,
            "published_power": {
                "value_kw": 120.5,
                "source_type": "publication",
                "source": "https://e.com",
            },
        }
    )
    data["power"]["scale_out"] = {
        "present": True,
        "cabling": "active_optical",
        "required_bandwidth_tbps": 4.8,
        "nics": {
            "count_per_node": 4,
            "bandwidth_per_nic_gbps": 200,
            "counted": True,
            "tdp_per_nic": _sourced(25),
        },
        "switches": [
            {
                "model": "Example switch",
                "count": 2,
                "bandwidth_tbps": 25.6,
                "power_per_switch": _sourced(1500),
            }
        ],
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    ours = system_power_json(load_system(path))
    recomputed = SystemPower.model_validate(ours).compute({0: 48, 1: 48})
    assert recomputed.problems == [] and recomputed.warnings == []
    assert ours["provisioned_power_kw"] == recomputed.provisioned_power_kw
    assert ours["computed"]["total_system_power_w"] == recomputed.total_system_power_w
    assert ours["computed"]["major_components_w"] == recomputed.major_components_w
    assert ours["mlc_estimated_power"] is True  # the Appendix D energy-per-bit figure
    assert recomputed.estimated


# -- disclosures from run folders ------------------------------------------------------------


def test_a_warmup_is_disclosed_from_its_log(tmp_path: Path, system: SystemDescription) -> None:
    folder = write_run_folder(tmp_path / "c8", 8, 620.0, warmup_requests=3)
    assert not (folder / "warmup_events.jsonl").exists()
    with pytest.raises(UsageError, match=r"warmup_events\.jsonl: missing"):
        read_run(folder)
    events = [
        ("sample.issued", 1_000_000_000, None),
        ("sample.issued", 1_100_000_000, None),
        ("sample.issued", 1_200_000_000, None),
        ("sample.complete", 2_000_000_000, ["TextModelOutput", ["a"], None, None]),
        ("sample.complete", 2_100_000_000, ["TextModelOutput", ["b"], None, None]),
        ("sample.complete", 2_200_000_000, None),  # a failed warmup query
    ]
    lines = [json.dumps({"event_type": k, "timestamp_ns": t, "data": d}) for k, t, d in events]
    (folder / "warmup_events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "events.jsonl").write_text(
        '{"event_type":"session.started","timestamp_ns":900000000}\n'
        '{"event_type":"session.start_performance_tracking","timestamp_ns":3500000000}\n',
        encoding="utf-8",
    )
    facts = read_run(folder)
    assert facts.warmup is not None
    point = point_yaml(
        system,
        concurrency=8,
        region="low_concurrency",
        offline="none",
        steady_state=None,
        warmup=facts.warmup,
        load_pattern=facts.load_pattern,
        run_config=facts.run_config,
    )
    assert point["warmup"] == {
        "duration_s": 2.5,
        "requests_issued": 3,
        "requests_completed": 2,
        "concurrency": 8,
        "data_source": "samples of the performance dataset, salted (mlpe-fast warmup)",
        "initialization_steps": [],
        "logs_retained": True,
    }
    assert point["runtime_settings"]["warmup"] == {"salt": True}
    assert "steady_state" not in point


def test_an_agentic_point_discloses_its_agentic_settings(
    tmp_path: Path, system: SystemDescription
) -> None:
    folder = write_run_folder(tmp_path / "a8", 8, 620.0)
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    config["settings"]["load_pattern"] = {"type": "agentic_inference", "target_concurrency": 8}
    config["datasets"] = [
        {
            "name": "agentic",
            "type": "performance",
            "path": "agentic.jsonl",
            "agentic_inference": {
                "turn_timeout_s": 14400.0,
                "enable_salt": True,
                "inject_tool_delay": True,
                "routing_headers": ["X-Session-ID"],
                "num_trajectories_to_issue": 1226,
                "stop_issuing_on_first_user_complete": False,
            },
        }
    ]
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    summary_path = folder / "performance" / "result_summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    summary["run_config"]["load_pattern"] = config["settings"]["load_pattern"]
    summary_path.write_text(json.dumps(summary), encoding="utf-8")
    facts = read_run(folder)
    assert facts.load_pattern == "agentic_inference" and facts.agentic is not None
    point = point_yaml(
        system,
        concurrency=8,
        region="low_concurrency",
        offline="none",
        steady_state=None,
        warmup=facts.warmup,
        load_pattern=facts.load_pattern,
        run_config=facts.run_config,
        agentic=facts.agentic,
    )
    # What a reviewer checks of an agentic run (docs/agentic.md §5.1), not the
    # routing headers.
    assert point["runtime_settings"]["load_pattern"] == "agentic_inference"
    assert point["runtime_settings"]["agentic_inference"] == {
        "num_trajectories_to_issue": 1226,
        "enable_salt": True,
        "inject_tool_delay": True,
        "stop_issuing_on_first_user_complete": False,
        "turn_timeout_s": 14400.0,
    }
    # ... and a run at another concurrency cannot pass for this point.
    with pytest.raises(UsageError, match="ran at concurrency 8, not 16"):
        build_bundle([PointFolder(folder, 16, "med_concurrency")], system, tmp_path / "out")
    # A non-agentic run has no such block.
    assert read_run(write_run_folder(tmp_path / "c8", 8, 620.0)).agentic is None


def test_an_inline_score_alone_is_not_an_accuracy_run(
    runs: dict[int, PointFolder], tmp_path: Path
) -> None:
    assert read_run(runs[64].path).has_accuracy
    assert not read_run(runs[16].path).has_accuracy
    folder = Path(shutil.copytree(runs[16].path, tmp_path / "c16"))
    inline = _accuracy_entry() | {"dataset_name": "performance", "dataset_type": "performance"}
    write_accuracy_results(folder / "accuracy" / "accuracy_results.json", [inline])
    assert not read_run(folder).has_accuracy


def test_runs_with_other_seeds_are_refused(
    tmp_path: Path, runs: dict[int, PointFolder], system: SystemDescription
) -> None:
    folder = write_run_folder(tmp_path / "c8", 8, 620.0, scheduler_seed=42)
    curve = [p if c != 8 else point_folder(folder, 8, p.region) for c, p in runs.items()]
    with pytest.raises(
        UsageError, match="r8: the run used scheduler_random_seed 42, not seed set A"
    ):
        build_bundle(curve, system, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # checked before anything is written
    assert (
        system.seeds.scheduler_rng_seed,
        system.seeds.sample_index_rng_seed,
    ) == (SEED_SET_A_SCHEDULER, SEED_SET_A_SAMPLE_INDEX)


def test_a_point_at_the_wrong_concurrency_is_refused(
    tmp_path: Path, runs: dict[int, PointFolder], system: SystemDescription
) -> None:
    wrong = PointFolder(runs[64].path, 65, "med_concurrency")
    with pytest.raises(UsageError, match="ran at concurrency 64, not 65"):
        build_bundle([wrong], system, tmp_path / "out")
    twice = [runs[64], PointFolder(runs[8].path, 64, "med_concurrency")]
    with pytest.raises(UsageError, match="r64: two run folders"):
        build_bundle(twice, system, tmp_path / "out")


# -- path safety -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("Example Org", "Example_Org"),
        ("../../escape", "escape"),
        ("/etc/passwd", "etc_passwd"),
        ("a/../../b", "a_.._.._b"),
        ("nul\x00byte", "nul_byte"),
        ("C:\\Windows", "C_Windows"),
        ("~root", "root"),
    ],
)
def test_folder_names_cannot_climb(name: str, folder: str) -> None:
    assert directory_name(name, "system_name") == folder


@pytest.mark.parametrize("name", ["..", ".", "/", "\x00", " ", "../.."])
def test_names_with_nothing_left_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match=r"system_name: .* no letters or digits"):
        directory_name(name, "system_name")


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_hostile_names_stay_inside_out_dir(tmp_path: Path, runs: dict[int, PointFolder]) -> None:
    sandbox = tmp_path / "sandbox"
    out = sandbox / "a" / "out"
    out.mkdir(parents=True)
    path = system_file(
        tmp_path, submitter_org_names="../../../escaped-org", system_name="../../sys/../../x"
    )
    system = load_system(path)
    before = _files(sandbox) - _files(out)
    submission = build_bundle([runs[64]], system, out)
    assert _files(sandbox) - _files(out) == before
    assert submission.relative_to(out).parts == ("escaped-org", PENDING_SUBMISSION_ID)
    assert [p.name for p in (submission / "results").iterdir()] == ["sys_.._.._x"]
    with pytest.raises(UsageError, match="already exists"):
        build_bundle([runs[64]], system, out)
    assert build_bundle([runs[64]], system, out, overwrite=True) == submission


def test_a_linked_folder_cannot_lead_outside(
    tmp_path: Path, runs: dict[int, PointFolder], system: SystemDescription
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / system.org_dir).symlink_to(outside, target_is_directory=True)
    with pytest.raises(UsageError, match="resolves outside"):
        build_bundle([runs[64]], system, out)
    assert list(outside.iterdir()) == []


def test_source_and_docs_folders_are_copied(
    tmp_path: Path, runs: dict[int, PointFolder], system: SystemDescription
) -> None:
    src = tmp_path / "sut"
    src.mkdir()
    with pytest.raises(UsageError, match=r"README\.md"):
        build_bundle([runs[64]], system, tmp_path / "out", src_dir=src)
    (src / "README.md").write_text("# how to start the server\n", encoding="utf-8")
    (src / "launch.sh").write_text("vllm serve\n", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "software_disclosure.md").write_text("stack\n", encoding="utf-8")
    submission = build_bundle([runs[64]], system, tmp_path / "out", src_dir=src, docs_dir=docs)
    assert (submission / "src" / "vllm" / "launch.sh").read_text() == "vllm serve\n"
    assert [p.name for p in (submission / "docs").iterdir()] == ["software_disclosure.md"]


# -- the checker ---------------------------------------------------------------------------------


def test_a_missing_checker_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "submission_checker.checker", None)
    with pytest.raises(UsageError, match="pip install endpoints-submission-cli"):
        run_checker(tmp_path)
    with pytest.raises(UsageError, match="no such bundle folder"):
        run_checker(tmp_path / "nothing")


def test_a_point_is_dated_by_test_started_at_else_by_its_summary(tmp_path: Path) -> None:
    folder = write_run_folder(tmp_path / "c8", 8, 620.0)
    summary_path = folder / "performance" / "result_summary.json"
    # The reference's 0: the day the summary was written.
    os.utime(summary_path, (1_700_000_000, 1_700_000_000))  # 2023-11-14 22:13 UTC
    assert read_run(folder).run_date == "2023-11-14"
    # The wall clock at TEST_STARTED, in ns, wins: 2026-03-14 23:59:59 UTC.
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    summary["test_started_at"] = 1_773_532_799 * 10**9
    summary_path.write_text(json.dumps(summary), encoding="utf-8")
    assert read_run(folder).run_date == "2026-03-14"
