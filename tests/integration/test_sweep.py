"""A curve end to end: `mlpe-fast run --concurrency 1,2,4` against the
simulated endpoint, one run folder per point plus the dedicated Offline
point, `pareto.json`, and a resumed sweep that skips what is complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlpe_fast import demo
from mlpe_fast.cli import main
from mlpe_fast.sim import __file__ as sim_init
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

pytestmark = pytest.mark.pipeline

DEMO_PROMPTS = Path(sim_init).parent / "demo_prompts.jsonl"
DEMO_SIZE = sum(1 for line in DEMO_PROMPTS.read_text().splitlines() if line.strip())


def test_a_curve_writes_a_folder_per_point_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "curve"
    argv = [
        "run",
        "--no-progress",
        "--concurrency",
        "4,1,2",
        "--num-samples",
        "12",
        "--max-output-tokens",
        "4",
        "--report-dir",
        str(report),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    folders = sorted(p.name for p in report.iterdir() if p.is_dir())
    assert folders == sorted(["r1", "r2", "r4", f"r{DEMO_SIZE}"])
    for n in (1, 2, 4):
        summary = json.loads((report / f"r{n}" / "performance" / "result_summary.json").read_text())
        assert summary["n_samples_issued"] == 12 and summary["state"] == "complete"
        assert summary["run_config"]["load_pattern"]["target_concurrency"] == n
    offline = json.loads(
        (report / f"r{DEMO_SIZE}" / "performance" / "result_summary.json").read_text()
    )
    assert offline["n_samples_issued"] == DEMO_SIZE  # the whole dataset at once
    assert offline["run_config"]["load_pattern"]["type"] == "max_throughput"
    curve = json.loads((report / "pareto.json").read_text())["points"]
    assert [p["concurrency"] for p in curve] == [1, 2, 4, DEMO_SIZE]
    assert [p["offline"] for p in curve] == ["none", "none", "none", "dedicated"]
    assert all(p["system_tps"] > 0 for p in curve)
    assert "curve" in out and "Offline (dedicated)" in out
    # The plan comes before the first point, the short list is warned about.
    plan = out[: out.index("run folder:")]
    assert "plan: a curve of 4 points (3 at fixed concurrency + a dedicated Offline point" in plan
    assert f"  r{DEMO_SIZE}  " in plan and "dedicated" in plan and "12 samples" in plan
    assert "warning: point-count: 4 points, the checker needs at least 8" in plan
    html = (report / "pareto.html").read_text(encoding="utf-8")
    assert "Offline (dedicated)" in html and "http://" not in html

    # Again: every point is complete, nothing is measured.
    before = {p: p.stat().st_mtime_ns for p in report.rglob("result_summary.json")}
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("complete already: skipped") == 4
    assert "expected: nothing to measure (4 reused)" in out
    assert {p: p.stat().st_mtime_ns for p in report.rglob("result_summary.json")} == before


def test_a_point_measured_with_other_settings_is_not_reused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "curve"
    argv = ["run", "--no-progress", "--concurrency", "1,2", "--offline", "none"]
    argv += ["--num-samples", "4", "--report-dir", str(report)]
    assert main([*argv, "--max-output-tokens", "2"]) == 0
    r1 = report / "r1" / "performance" / "result_summary.json"
    summary = json.loads(r1.read_text())
    summary["state"] = "interrupted"  # r1 would be measured again, r2 reused
    r1.write_text(json.dumps(summary))
    before = {p: p.stat().st_mtime_ns for p in report.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*argv, "--max-output-tokens", "3"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert f"{report / 'r2'} was measured with other settings than this run's: " in line
    assert "model_params.max_new_tokens (--max-output-tokens) 2 -> 3;" in line
    assert f"another --report-dir, or remove r2 from {report}" in line
    # Refused before anything was measured: r1 is still the interrupted one.
    assert {p: p.stat().st_mtime_ns for p in report.rglob("*") if p.is_file()} == before


def test_a_dedicated_offline_point_may_not_take_a_levels_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "curve"
    argv = ["run", "--no-progress", "--concurrency", f"1,{DEMO_SIZE}", "--num-samples", "4"]
    argv += ["--max-output-tokens", "2", "--report-dir", str(report)]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"the dedicated Offline point and the concurrency-{DEMO_SIZE} point" in line
    assert f"share the folder r{DEMO_SIZE}" in line
    assert f"drop {DEMO_SIZE} from --concurrency, use --offline elected" in line
    assert not report.exists()


def test_a_dry_run_prints_the_plan_and_measures_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_endpoint(*args: object) -> None:
        raise AssertionError("a dry run started the simulated endpoint")

    monkeypatch.setattr(demo, "simulated_endpoint", no_endpoint)
    report = tmp_path / "curve"
    argv = ["run", "--concurrency", "1,2", "--duration", "300ms", "--report-dir", str(report)]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("plan: a curve of 3 points")
    assert out[2].split() == ["r1", "1", "low_latency", "-", "no", "0.3", "s", "or", "more"]
    assert out[4].split()[:4] == [f"r{DEMO_SIZE}", str(DEMO_SIZE), "submitters_choice", "dedicated"]
    assert out[5] == (
        "expected: at least 0.6 s for 2 points sized by duration, plus 1 point sized by"
        " sample count, as long as the endpoint takes"
    )
    assert any("warning: point-count: 3 points" in line for line in out)
    assert out[-1].startswith("mlpe-fast: dry run: no request sent")
    assert not report.exists()
    # One point, against an endpoint that is not there: never contacted.
    # (the dry run loads the tokenizer, as the run would: the demo's, not model m's)
    one = [
        "run",
        "--endpoints",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--tokenizer",
        DEMO_TOKENIZER,
    ]
    one += ["--dataset", str(DEMO_PROMPTS), "--report-dir", str(report), "--dry-run"]
    assert main(one) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"plan: one point: concurrency 1, {DEMO_SIZE} samples (one dataset pass), into {report}"
    )
    assert not report.exists()
    # A bad dataset fails as it would in a run.
    bad = ["run", "--endpoints", "http://127.0.0.1:9", "--model", "m", "--dry-run"]
    assert main([*bad, "--dataset", str(tmp_path / "none.jsonl")]) == 2
    assert "not found" in capsys.readouterr().err


def test_an_interrupted_point_is_measured_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "curve"
    argv = ["run", "--no-progress", "--concurrency", "1,2", "--offline", "none"]
    argv += ["--num-samples", "6", "--max-output-tokens", "2", "--report-dir", str(report)]
    assert main(argv) == 0
    summary_path = report / "r2" / "performance" / "result_summary.json"
    summary = json.loads(summary_path.read_text())
    summary["state"] = "interrupted"
    summary_path.write_text(json.dumps(summary))
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("complete already: skipped") == 1
    assert json.loads(summary_path.read_text())["state"] == "complete"


def test_a_short_duration_is_called_a_development_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "curve"
    argv = ["run", "--no-progress", "--concurrency", "1,2", "--offline", "none"]
    argv += ["--duration", "300ms", "--max-output-tokens", "2", "--report-dir", str(report)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("development duration: 0.3 s") == 2
    for n in (1, 2):
        summary = json.loads((report / f"r{n}" / "performance" / "result_summary.json").read_text())
        # a duration ends at the end of a dataset pass: whole passes issued
        assert summary["n_samples_issued"] % DEMO_SIZE == 0


def test_curve_mistakes_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--concurrency", "1,2"]) == 2
    assert "needs --report-dir" in capsys.readouterr().err
