"""Agentic curves (``sweep/runner.py``): the configuration they accept, the
points they plan, each point's run configuration, the duration notes and the
budget warnings, and what counts as a point measured completely before
(spec §2.1, §2.4, §2.6; ``docs/agentic.md`` §2.4-2.5)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.accuracy.results import holds_accuracy_run, write_accuracy_results
from mlpe_fast.config import RunConfig, add_run_arguments, resolve
from mlpe_fast.errors import UsageError
from mlpe_fast.sweep.runner import (
    SweepPoint,
    _done,
    _point_config,
    agentic_duration_note,
    plan_problems,
    plan_sweep,
)

AGENTIC = ("--load-pattern", "agentic_inference", "--dataset", "trajectories.jsonl")


def run(*argv: str, config: dict[str, Any] | None = None) -> RunConfig:
    parser = argparse.ArgumentParser(prog="mlpe-fast run")
    add_run_arguments(parser)
    return resolve(parser.parse_args(list(argv)), {} if config is None else config)


def test_an_agentic_curve_has_no_offline_point() -> None:
    config = run(*AGENTIC, "--concurrency", "4,6,10", "--report-dir", "out")
    assert config.sweep == (4, 6, 10) and config.offline == "none"
    planned = run(*AGENTIC, "--max-concurrency", "40", "--report-dir", "out")
    assert planned.offline == "none" and planned.max_concurrency == 40
    assert run(*AGENTIC, "--concurrency", "4,6", "--offline", "none").offline == "none"


@pytest.mark.parametrize(
    ("argv", "config", "message"),
    [
        (
            ("--concurrency", "4,6", "--offline", "dedicated"),
            None,
            "--offline dedicated: an agentic curve has no Offline point (spec §2.1); leave it out",
        ),
        (
            ("--max-concurrency", "40", "--offline", "elected"),
            None,
            "--offline elected: an agentic curve has no Offline point (spec §2.1); leave it out",
        ),
    ],
)
def test_an_offline_point_on_an_agentic_curve_is_one_line(
    argv: tuple[str, ...], config: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(UsageError) as info:
        run(*AGENTIC, *argv, config=config)
    assert str(info.value) == message


def test_a_planned_agentic_curve_has_no_offline_point_and_four_accuracy_runs() -> None:
    config = run(*AGENTIC, "--max-concurrency", "40", "--report-dir", "out")
    config = msgspec.structs.replace(config, mode="both")
    points = plan_sweep(config, 20)
    # The planner's eight (one spare above the checker's seven), none Offline.
    assert len(points) == 8 and all(p.offline == "none" for p in points)
    assert points[0].concurrency == 1 and points[-1].concurrency == 40
    bands = {p.region for p in points if p.accuracy}
    assert bands == {"low_latency", "low_concurrency", "med_concurrency", "high_concurrency"}
    assert sum(p.accuracy for p in points) == 4
    assert plan_problems(config, points, trajectories=None) == []


def test_an_agentic_point_runs_its_budget_not_a_duration() -> None:
    config = run(*AGENTIC, "--concurrency", "4,40", "--report-dir", "out")
    point = SweepPoint(40, "high_concurrency", "none", False, "out/r40")
    point_config, note = _point_config(config, point)
    assert note is None
    assert point_config.load_pattern == "agentic_inference"
    assert point_config.concurrency == 40 and point_config.sweep == ()
    assert point_config.duration_s is None and point_config.num_samples is None
    assert point_config.whole_passes is False and point_config.report_dir == "out/r40"


@pytest.mark.parametrize(
    ("concurrency", "seconds", "rule"),
    [(32, 599.9, 600), (33, 2399.0, 2400), (1, 0.5, 600)],
)
def test_a_short_window_is_a_development_duration(
    concurrency: int, seconds: float, rule: int
) -> None:
    note = agentic_duration_note(concurrency, {"duration_ns": int(seconds * 1e9)})
    assert note is not None and f"the rules ask for {rule} s of an agentic point" in note
    assert f"at concurrency {concurrency} " in note


@pytest.mark.parametrize(
    ("concurrency", "summary"),
    [(32, {"duration_ns": 600 * 10**9}), (33, {"duration_ns": 2400 * 10**9}), (4, {})],
)
def test_a_long_enough_window_draws_no_note(concurrency: int, summary: dict[str, Any]) -> None:
    assert agentic_duration_note(concurrency, summary) is None


def test_the_budget_is_questioned_before_the_curve() -> None:
    config = run(*AGENTIC, "--concurrency", "4,6,10", "--num-trajectories", "6")
    points = [SweepPoint(n, "low_latency", "none", False, f"r{n}") for n in (4, 6, 10)]
    problems = plan_problems(config, points, trajectories=20)
    # A short list, C_max 10: the checker's count rules first (as for every curve).
    assert [p.split(":")[0] for p in problems[:3]] == ["c-max", "point-count", "region-computation"]
    assert problems[3:] == [
        "num_trajectories_to_issue 6 is not a whole number of passes over the dataset's 20 "
        "trajectories (the rules ask for k x 613 on the official set)",
        "r6, r10: concurrency at or above the trajectory budget 6, so the window closes when "
        "the first trajectory ends; raise --num-trajectories well above the highest concurrency",
    ]
    # The budget defaults to the dataset's trajectories: one whole pass.
    whole = run(*AGENTIC, "--concurrency", "4,6,10")
    assert plan_problems(whole, points, trajectories=20) == problems[:3]


def _complete_point(folder: Path, entries: list[dict[str, Any]]) -> SweepPoint:
    (folder / "performance").mkdir(parents=True)
    summary = {"state": "complete", "duration_ns": 1}
    (folder / "performance" / "result_summary.json").write_text(json.dumps(summary))
    write_accuracy_results(folder / "accuracy" / "accuracy_results.json", entries)
    return SweepPoint(4, "low_latency", "none", True, str(folder))


INLINE = {"dataset_name": "performance", "dataset_type": "performance", "score": 1.0}
SWE_BENCH = {"dataset_name": "swe_bench", "dataset_type": "accuracy", "score": 0.9}


def test_an_inline_score_alone_does_not_complete_an_accuracy_point(tmp_path: Path) -> None:
    assert _done(_complete_point(tmp_path / "inline", [INLINE])) is None
    assert _done(_complete_point(tmp_path / "both", [INLINE, SWE_BENCH])) is not None
    broken = _complete_point(tmp_path / "broken", [])
    Path(broken.folder, "accuracy", "accuracy_results.json").write_text("{not json")
    assert _done(broken) is None  # measured again, not a traceback


def test_holds_accuracy_run_reads_both_layouts(tmp_path: Path) -> None:
    path = tmp_path / "accuracy_results.json"
    assert not holds_accuracy_run(path)
    path.write_text(json.dumps({"accuracy_scores": {"swe_bench": SWE_BENCH}}))
    assert holds_accuracy_run(path)
    path.write_text(json.dumps({"accuracy_scores": [INLINE]}))
    assert not holds_accuracy_run(path)
    path.write_text(json.dumps({"scores": []}))
    with pytest.raises(UsageError, match="expected an accuracy_scores list"):
        holds_accuracy_run(path)


def test_a_swe_bench_dataset_under_another_name_is_questioned() -> None:
    swe = (
        "acc:ids.jsonl,name=swebench_verified,parser.prompt=problem_statement,"
        "accuracy_config.eval_method=swe_bench_scorer,accuracy_config.ground_truth=instance_id"
    )
    config = run(*AGENTIC, "--dataset", swe, "--concurrency", "4,6", "--mode", "both")
    points = [SweepPoint(n, "low_latency", "none", True, f"r{n}") for n in (4, 6)]
    # (after the checker's count rules of this short list: c-max, point-count, region-computation)
    assert plan_problems(config, points, trajectories=20)[3:] == [
        "dataset swebench_verified: the checker reads SWE-bench results under the name "
        "swe_bench (spec §2.6); name it so"
    ]
    named = run(
        *AGENTIC,
        "--dataset",
        swe.replace("swebench_verified", "swe_bench"),
        "--concurrency",
        "4,6",
        "--mode",
        "both",
    )
    assert len(plan_problems(named, points, trajectories=20)) == 3
