"""``--goodput`` end to end (not an MLPerf metric): a point's line and
summary block, a curve's per-point attainment and its best point, the
mistakes in one line.  The simulated endpoint's TTFT is fixed at 20 ms, so
which bound every request meets is known."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from tests.data_files import CHAR_TOKENIZER, DUMMY_1K

DATA = ("--dataset", f"{DUMMY_1K},parser.prompt=text_input", "--tokenizer", str(CHAR_TOKENIZER))


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(("--ttft-ms", "20", "--itl-ms", "0.5")) as url:
        yield url


def _run(endpoint: str, *flags: str) -> list[str]:
    return [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "m", *DATA),
        *("--num-samples", "12", "--concurrency", "3", "--max-output-tokens", "4"),
        *flags,
    ]


def test_a_point_reports_its_goodput_beside_its_figures(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    argv = _run(endpoint, "--goodput", "ttft:1000", "e2el:5", "--report-dir", str(folder))
    assert main(argv) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("goodput"))
    # every TTFT (~20 ms) meets 1 s; no latency meets 5 ms
    assert line.startswith("goodput (TTFT <= 1000 ms, latency <= 5 ms; not an MLPerf metric): ")
    assert "0 of 12 requests good = 0.0 %" in line and "(missed: latency 12)" in line
    summary = json.loads((folder / "performance" / "result_summary.json").read_text())
    block = summary["mlpe_fast"]["goodput"]
    assert block["slo_ms"] == {"ttft": 1000.0, "e2el": 5.0}
    assert (block["issued"], block["good"], block["met"]) == (12, 0, {"ttft": 12, "e2el": 0})
    assert "goodput" not in {k for k in summary if k != "mlpe_fast"}  # never an official key
    assert line in (folder / "report.txt").read_text()

    assert main(_run(endpoint, "--goodput", "ttft:1000", "--report-dir", str(folder))) == 0
    summary = json.loads((folder / "performance" / "result_summary.json").read_text())
    block = summary["mlpe_fast"]["goodput"]
    assert block["good"] == 12 and block["attainment_pct"] == 100.0
    assert block["goodput_rps"] == pytest.approx(12 / summary["duration_ns"] * 1e9, rel=1e-6)


def test_a_curve_names_its_best_point_under_the_slo(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "curve"
    argv = [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "m", *DATA),
        *("--concurrency", "1,4", "--offline", "none", "--num-samples", "8"),
        *("--max-output-tokens", "4", "--goodput", "ttft:1000", "--report-dir", str(report)),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    curve = json.loads((report / "pareto.json").read_text())["points"]
    assert [p["goodput"]["good"] for p in curve] == [8, 8]
    best = max(curve, key=lambda p: p["goodput"]["goodput_rps"])
    assert f"best under the SLO: concurrency {best['concurrency']} (" in out
    assert "goodput (TTFT <= 1000 ms; not an MLPerf metric)" in out


def test_a_point_not_streamed_says_its_ttft_bound_is_not_measured(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A curve's dedicated Offline point is not streamed: it has no TTFT, so
    the bound is not measured there (it said 0 of 96 good, 'missed: TTFT 96')."""
    report = tmp_path / "curve"
    six = ("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=6")  # Offline: r6
    argv = [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "m", *six),
        *("--tokenizer", str(CHAR_TOKENIZER), "--concurrency", "1,2", "--num-samples", "4"),
        *("--max-output-tokens", "4", "--goodput", "ttft:1000", "--report-dir", str(report)),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    offline = json.loads((report / "r6" / "performance" / "result_summary.json").read_text())
    block = offline["mlpe_fast"]["goodput"]
    assert block["good"] is None and block["attainment_pct"] is None
    assert block["unmeasured"] == {"metrics": ["ttft"], "why": "not streamed: no TTFT"}
    assert "not measured (not streamed: no TTFT; --streaming on measures them)" in out
    assert "            6  not measured (not streamed: no TTFT)" in out.splitlines()
    assert "best under the SLO: concurrency" in out  # a streamed point
    assert "missed: TTFT" not in out


def test_a_run_folder_run_again_from_its_config_yaml_reports_its_goodput(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``config.yaml`` holds the bounds: ``run -c`` repeats the report (it
    dropped them), and a curve run again with other bounds still reuses its
    points, which keep the block they were measured with."""
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(_run(endpoint, "--goodput", "ttft:1000", "--report-dir", str(first))) == 0
    capsys.readouterr()
    argv = ["run", "--no-progress", "-c", str(first / "config.yaml"), "--report-dir", str(again)]
    assert main(argv) == 0
    assert "goodput (TTFT <= 1000 ms; not an MLPerf metric): 12 of 12" in capsys.readouterr().out
    summary = json.loads((again / "performance" / "result_summary.json").read_text())
    assert summary["mlpe_fast"]["goodput"]["slo_ms"] == {"ttft": 1000.0}

    curve = [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "m", *DATA),
        *("--concurrency", "1,2", "--offline", "none", "--num-samples", "4"),
        *("--max-output-tokens", "4", "--report-dir", str(tmp_path / "curve")),
    ]
    assert main([*curve, "--goodput", "ttft:1000"]) == 0
    capsys.readouterr()
    assert main([*curve, "--goodput", "ttft:500"]) == 0
    assert "mlpe-fast results" not in capsys.readouterr().out  # nothing measured again
    points = json.loads((tmp_path / "curve" / "pareto.json").read_text())["points"]
    assert [p["goodput"]["slo_ms"] for p in points] == [{"ttft": 1000.0}] * 2


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        (["ttft"], "--goodput: 'ttft' is not METRIC:MS (e.g. ttft:500)"),
        (["ttft:-1"], "--goodput: ttft: '-1' is not a positive number of milliseconds"),
        (["itl:5"], "--goodput: 'itl' is not one of ttft, tpot, e2el"),
    ],
)
def test_bad_bounds_are_one_line_and_status_2(
    endpoint: str, bounds: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_run(endpoint, "--goodput", *bounds)) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"mlpe-fast: {message}"]
