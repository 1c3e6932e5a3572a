"""A curve end to end: `mlpe-fast run --concurrency 1,2,4` against the
simulated endpoint, one run folder per point plus the dedicated Offline
point, `pareto.json`, and a resumed sweep that skips what is complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlpe_fast.cli import main
from mlpe_fast.sim import __file__ as sim_init

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
    html = (report / "pareto.html").read_text(encoding="utf-8")
    assert "Offline (dedicated)" in html and "http://" not in html

    # Again: every point is complete, nothing is measured.
    before = {p: p.stat().st_mtime_ns for p in report.rglob("result_summary.json")}
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("complete already: skipped") == 4
    assert {p: p.stat().st_mtime_ns for p in report.rglob("result_summary.json")} == before


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
