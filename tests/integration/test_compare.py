"""``mlpe-fast compare`` and the request-rate curve, end to end against the
simulated endpoint: two short concurrency curves and a rate curve measured
once for the module, compared through ``mlpe-fast compare``; the rate
curve's folders, plan and refusal by ``bundle``; the mistakes, one line and
exit status 2."""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.report.pareto import SERIES_COLOURS
from mlpe_fast.sim import __file__ as sim_init
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

pytestmark = pytest.mark.pipeline

DEMO_PROMPTS = Path(sim_init).parent / "demo_prompts.jsonl"


class Measured:
    """The module's curves: ``a`` and ``b`` (concurrency 1, 2; ``b`` asks
    for more output tokens), ``rates`` (Poisson at 40 and 80 queries/s),
    and the wall clock around them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.a = root / "a"
        self.b = root / "b"
        self.rates = root / "rates"
        self.rerun = ""
        self.started_ns = 0
        self.ended_ns = 0


def _run(endpoint: str, report: Path, *flags: str) -> None:
    argv = ["run", "--no-progress", "--endpoints", endpoint, "--model", "m"]
    argv += ["--tokenizer", DEMO_TOKENIZER, "--dataset", str(DEMO_PROMPTS)]
    assert main([*argv, "--num-samples", "8", "--report-dir", str(report), *flags]) == 0


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Measured]:
    found = Measured(tmp_path_factory.mktemp("compare"))
    found.started_ns = time.time_ns()
    with simulated_endpoint(("--ttft-ms", "2", "--itl-ms", "0.2")) as endpoint:
        common = ("--offline", "none")
        _run(endpoint, found.a, "--concurrency", "1,2", "--max-output-tokens", "4", *common)
        _run(endpoint, found.b, "--concurrency", "1,2", "--max-output-tokens", "8", *common)
        rates = ("--target-qps", "80,40", "--max-output-tokens", "4")
        _run(endpoint, found.rates, *rates)
        with contextlib.redirect_stdout(io.StringIO()) as again:
            _run(endpoint, found.rates, *rates)  # complete: nothing measured
        found.rerun = again.getvalue()
    found.ended_ns = time.time_ns()
    yield found


def _points(curve: Path) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = json.loads((curve / "pareto.json").read_text())["points"]
    return points


def test_two_curves_side_by_side_with_their_differences(
    measured: Measured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    page = tmp_path / "both.html"
    assert main(["compare", str(measured.a), str(measured.b), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "compare: 2 concurrency curves, baseline a"
    assert lines[1].split() == ["a", "b", "diff", "%"]
    assert "not MLPerf metrics" in out and lines[-2].endswith("where it is the result)")
    assert lines[-1] == f"compare: wrote {page}"
    a = {p["concurrency"]: p for p in _points(measured.a)}
    b = {p["concurrency"]: p for p in _points(measured.b)}
    for level in (1, 2):
        block = lines[lines.index(f"  c={level}") + 1 :]
        cells = block[0].split()
        assert cells[:2] == ["system_tps", "(tok/s)"]
        base, other = a[level]["system_tps"], b[level]["system_tps"]
        assert cells[2] == f"{base:,.1f}" and cells[3] == f"{other:,.1f}"
        assert float(cells[4].replace(",", "")) == pytest.approx(other - base, abs=0.06)
        assert cells[5] == f"{100 * (other - base) / base:+.1f}%"
    text = page.read_text(encoding="utf-8")
    assert "<h1>compare 2 concurrency curves: a, b</h1>" in text
    for colour in SERIES_COLOURS[:2]:
        assert f'stroke="{colour}"' in text  # each curve's own steps and markers
    assert text.count("<circle") == 2 * 2 * 4  # two curves, two points, four charts


def test_two_run_folders_and_the_png(
    measured: Measured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (mlpe-fast[plots])")
    capsys.readouterr()
    page, png = tmp_path / "runs.html", tmp_path / "runs.png"
    argv = ["compare", str(measured.a / "r2"), str(measured.b / "r2"), str(measured.a / "r1")]
    assert main([*argv, "--html", str(page), "--png", str(png)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "compare: 3 concurrency runs, baseline a/r2"
    assert out[2].split() == ["load", "c=2", "c=2", "c=1"]
    completed = next(line for line in out if line.strip().startswith("completed"))
    assert completed.split() == ["completed", "8", "8", "0", "+0.0%", "8", "0", "+0.0%"]
    assert out[-1] == f"compare: wrote {page}, {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_rate_curve_has_a_folder_per_rate_and_is_no_mlperf_curve(
    measured: Measured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = measured.rates
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["qps40", "qps80"]
    curve = json.loads((root / "pareto.json").read_text())
    assert curve["load"] == "rate" and curve["model"] == "m"
    assert [p["target_qps"] for p in curve["points"]] == [40.0, 80.0]
    for point in curve["points"]:
        folder = root / f"qps{point['target_qps']:g}"
        summary = json.loads((folder / "performance" / "result_summary.json").read_text())
        pattern = summary["run_config"]["load_pattern"]
        assert pattern["type"] == "poisson" and pattern["target_qps"] == point["target_qps"]
        assert summary["n_samples_issued"] == 8
        assert point["qps"] == summary["qps"] and point["system_tps"] == summary["system_tps"]
        # The wall clock of TEST_STARTED dates the point (the reference writes 0).
        assert measured.started_ns < summary["test_started_at"] < measured.ended_ns
    text = (root / "pareto.html").read_text(encoding="utf-8")
    assert "not an MLPerf curve" in text and "achieved qps vs target rate" in text
    # Run again with the same settings: both points are reused.
    assert measured.rerun.count("is complete already: skipped") == 2
    assert "expected: nothing to measure (2 reused)" in measured.rerun
    # Refused by bundle in one line, before anything is read or written.
    system = tmp_path / "system.yaml"
    assert main(["init", "--system-file", str(system)]) == 0
    capsys.readouterr()
    out = tmp_path / "bundle"
    assert main(["bundle", str(root), "--system", str(system), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"mlpe-fast: {root} is a request-rate curve (Poisson points), not an MLPerf submission: "
        "the checker refuses the poisson load pattern (spec §2.4); bundle a concurrency curve "
        "(mlpe-fast run --concurrency N,N,... or --max-concurrency C_MAX)"
    )
    assert not out.exists()


def test_two_rate_curves_compare_by_rate(
    measured: Measured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    page = tmp_path / "rates.html"
    assert main(["compare", str(measured.rates), str(measured.rates), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "compare: 2 request-rate curves" in out
    assert "  40/s" in out.splitlines() and "  80/s" in out.splitlines()
    assert re.search(r"qps \(/s\) +[\d.]+ +[\d.]+ +0 +\+0\.0%", out)
    assert "Poisson rates: not an MLPerf curve" in page.read_text(encoding="utf-8")


def test_compare_mistakes_are_one_line(
    measured: Measured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, rates = str(measured.a), str(measured.rates)
    cases = [
        ([a], "compare needs two or more run or curve folders"),
        ([a, str(tmp_path / "none")], f"{tmp_path / 'none'}: no such folder"),
        ([a, str(tmp_path)], f"{tmp_path}: neither a run folder"),
        ([a, str(measured.a / "r1")], "a is a concurrency curve; r1 is a concurrency run"),
        ([a, rates], "a is a concurrency curve; rates is a request-rate curve"),
        ([str(measured.a / "r1"), str(measured.rates / "qps40")], "qps40 is a Poisson run"),
        ([a, a, "--html", str(tmp_path / "no" / "x.html")], "no such folder"),
        # a folder that is there but refuses the name: the system's reason, in one line
        ([a, a, "--html", str(tmp_path / f"{'x' * 300}.html")], "cannot write: File name too long"),
        (
            [a, a, "--html", str(tmp_path / "c.html"), "--png", str(tmp_path / f"{'x' * 300}.png")],
            "cannot write: File name too long",
        ),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert main(["compare", *argv]) == 2, argv
        (line,) = capsys.readouterr().err.splitlines()
        assert message in line, (argv, line)


def test_rate_curve_mistakes_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = ["--report-dir", str(tmp_path / "r")]
    cases = [
        (["--target-qps", "2,4", "--max-concurrency", "64", *report], "--max-concurrency"),
        (["--target-qps", "2,4", "--offline", "elected", *report], "Offline point"),
        (["--target-qps", "0,4", *report], "expected a positive number, got '0'"),
        (["--target-qps", "2,x", *report], "expected a positive number"),
        (["--target-qps", "2,4"], "a curve needs --report-dir"),
        (["--target-qps", "2,4", "--concurrency", "3", *report], "not for --load-pattern poisson"),
        (["--target-qps", "2,4", "--mode", "acc", *report], "a request-rate curve measures"),
        (["--target-qps", "2,4", "--load-pattern", "concurrency", *report], "--target-qps"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert main(["run", "--no-progress", "--dry-run", *argv]) == 2, argv
        (line,) = capsys.readouterr().err.splitlines()
        assert message in line, (argv, line)
    assert not (tmp_path / "r").exists()


def test_a_rate_curve_dry_run_prints_its_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r"
    argv = ["run", "--target-qps", "4,1,2", "--duration", "2s", "--report-dir", str(report)]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"plan: a request-rate curve of 3 Poisson points in {report}"
    assert [line.split()[:2] for line in out[2:5]] == [["qps1", "1"], ["qps2", "2"], ["qps4", "4"]]
    assert out[5] == "expected: at least 6 s for 3 points sized by duration"
    assert out[6].startswith("note: not an MLPerf curve: the checker refuses the poisson")
    assert not report.exists()


def test_a_yaml_list_of_rates_is_a_rate_curve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "rates.yaml"
    config.write_text(
        "settings:\n  load_pattern:\n    type: poisson\n    target_qps: [8, 0.5]\n"
        f"  runtime:\n    n_samples_to_issue: 4\nreport_dir: {tmp_path / 'r'}\n",
        encoding="utf-8",
    )
    assert main(["run", "-c", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"plan: a request-rate curve of 2 Poisson points in {tmp_path / 'r'}"
    assert [line.split()[:2] for line in out[2:4]] == [["qps0.5", "0.5"], ["qps8", "8"]]
