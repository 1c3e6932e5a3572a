"""``--server-metrics`` end to end through ``mlpe-fast run`` against the
simulated endpoint, whose ``/metrics`` reflects its own state
(``sim/_metrics.py``): the series in the run folder, the summary beside
the client's figures, the cost in the self-audit, a server without the
page, a page that breaks mid-point, a curve's report, the mistakes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from tests.data_files import CHAR_TOKENIZER, DUMMY_1K
from tests.integration.metrics_trouble_sim import SCRIPT as TROUBLE

DATA = ("--dataset", f"{DUMMY_1K},parser.prompt=text_input", "--tokenizer", str(CHAR_TOKENIZER))
# 60 tokens 2 ms apart: each request runs about 0.12 s, long beside a 0.1 s interval
SLOW = ("--ttft-ms", "5", "--itl-ms", "2", "--seed", "3")


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(SLOW) as url:
        yield url


def _run(endpoint: str, folder: Path, *flags: str, concurrency: str = "4") -> list[str]:
    return [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "m", *DATA),
        *("--num-samples", "24", "--concurrency", concurrency, "--max-output-tokens", "60"),
        *("--server-metrics-interval", "0.1", "--report-dir", str(folder), "--tokenizer-check"),
        "off",
        *flags,
    ]


def _summary(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "performance" / "result_summary.json").read_bytes())
    return data


def _lines(folder: Path) -> list[dict[str, Any]]:
    text = (folder / "server_metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_on_by_default_the_series_tracks_the_load_and_is_summed_up(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    assert main(_run(endpoint, folder, "--warmup-requests", "4")) == 0
    out = capsys.readouterr().out
    lines = _lines(folder)
    assert len(lines) >= 5  # about a second of load, a scrape every 0.1 s
    stamps = [line["t_ns"] for line in lines]
    assert stamps == sorted(stamps) and all("error" not in line for line in lines)
    assert all(line["at"] > 1.6e18 for line in lines)  # wall clock, ns since the epoch
    first = lines[0]
    last = lines[-1]["values"]
    assert first["values"]["prefix_cache_queries"] < last["prefix_cache_queries"]  # a counter
    assert 'vllm:num_requests_running{model_name="mlpe-sim"}' in first["raw"]
    assert "vllm:e2e_request_latency_seconds_bucket" in " ".join(first["raw"])
    running = [line["values"]["running"] for line in lines]
    # never more than the point's concurrency, but for the warmup's tail: the
    # measured phase starts as the last warmup request goes out (no --warmup-drain)
    assert max(running) <= 4 + 4
    assert 2 <= sorted(running)[len(running) // 2] <= 4  # most of the time near it
    block = _summary(folder)["mlpe_fast"]["server_metrics"]
    assert block["offered"] and block["family"] == "vllm"
    assert block["scrapes"] == len(lines) and block["failures"] == 0
    assert 2 <= block["running"]["mean"] <= 4 + 4 and block["running"]["max"] <= 4 + 4
    assert block["waiting"] == {"mean": 0.0, "max": 0.0}
    assert block["prefix_cache_hit_rate"] == 0.0  # the simulated endpoint caches nothing
    assert block["prefix_cache_queries"] > 0 and block["preemptions"] == 0
    audit = _summary(folder)["mlpe_fast"]["self_audit"]
    assert audit["metrics_scrapes"] == len(lines) and audit["metrics_bytes"] > 1000
    assert audit["metrics_parse_cpu_ms"] > 0 and audit["metrics_scrape_ms_mean"] > 0
    assert "server metrics scrapes" in out and "server metrics (http://" in out
    assert "server metrics (http://" in (folder / "report.txt").read_text()
    probe = json.loads((folder / "server_calls.json").read_bytes())["server_metrics_probe"]
    assert (probe["status"], probe["ok"]) == (200, True)


def test_sglang_names_are_read_as_sglang_s(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    with simulated_endpoint((*SLOW, "--metrics-names", "sglang")) as url:
        assert main(_run(url, folder)) == 0
    block = _summary(folder)["mlpe_fast"]["server_metrics"]
    assert block["family"] == "sglang" and 1 <= block["running"]["max"] <= 4
    assert "sglang:num_running_reqs" in " ".join(_lines(folder)[0]["raw"])


def test_off_scrapes_nothing(endpoint: str, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    assert main(_run(endpoint, folder, "--server-metrics", "off")) == 0
    assert not (folder / "server_metrics.jsonl").exists()
    assert "server_metrics" not in _summary(folder)["mlpe_fast"]
    assert _summary(folder)["mlpe_fast"]["self_audit"]["metrics_scrapes"] == 0
    assert not (folder / "server_calls.json").exists()


def test_a_server_without_the_page_is_said_once_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    with simulated_endpoint((*SLOW, "--metrics-names", "off")) as url:
        assert main(_run(url, folder)) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "server metrics:" in line]
    assert said == [
        f"mlpe-fast: server metrics: GET {url}/metrics answered 404: not offered; the point "
        "is measured without them (--server-metrics URL names another page)"
    ]
    block = _summary(folder)["mlpe_fast"]["server_metrics"]
    assert block["offered"] is False and block["note"] == f"GET {url}/metrics answered 404"
    assert not (folder / "server_metrics.jsonl").exists()
    assert _summary(folder)["n_samples_completed"] == 24
    assert "server metrics: not offered" in (folder / "report.txt").read_text()


def test_a_curve_says_a_missing_page_once_and_each_point_records_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "curve"
    with simulated_endpoint((*SLOW, "--metrics-names", "off")) as url:
        assert main(_run(url, folder, concurrency="2,4")) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "server metrics:" in line]
    assert len(said) == 1 and "not offered" in said[0]  # it was said at every point
    points = sorted(p.parent.parent for p in folder.rglob("result_summary.json"))
    assert len(points) == 3  # 2, 4 and the Offline point
    for point in points:
        block = _summary(point)["mlpe_fast"]["server_metrics"]
        assert block["offered"] is False and block["note"] == f"GET {url}/metrics answered 404"


@pytest.mark.parametrize("trouble", ["garbage", "hang"])
def test_a_page_that_breaks_mid_point_is_counted_and_leaves_the_figures_alone(
    trouble: str, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    with simulated_endpoint((*SLOW, "--trouble", trouble), script=TROUBLE) as url:
        # the probe is the page's first ask, answered; every scrape after it breaks
        assert main(_run(url, folder)) == 0
    summary = _summary(folder)
    assert summary["n_samples_completed"] == 24 and summary["n_samples_failed"] == 0
    block = summary["mlpe_fast"]["server_metrics"]
    assert block["scrapes"] >= 1 and block["failures"] == block["scrapes"]
    expected = "not a Prometheus text page" if trouble == "garbage" else "no answer within 1 s"
    assert expected in block["first_error"]
    lines = _lines(folder)
    assert len(lines) == block["scrapes"] and all(expected in line["error"] for line in lines)
    assert summary["mlpe_fast"]["self_audit"]["metrics_scrape_failures"] == block["failures"]
    assert f"{block['failures']} FAILED" in (folder / "report.txt").read_text()


@pytest.mark.pipeline
def test_each_point_of_a_curve_has_its_series_and_the_report_plots_them(
    endpoint: str, tmp_path: Path
) -> None:
    root = tmp_path / "curve"
    argv = _run(endpoint, root, "--offline", "none", concurrency="1,3")
    assert main(argv) == 0
    for level in (1, 3):
        lines = _lines(root / f"r{level}")
        assert lines and max(line["values"]["running"] for line in lines) <= level
    page = (root / "pareto.html").read_text()
    assert page.count('class="server-metrics"') == 2
    assert "running" in page and "concurrency 3" in page


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--server-metrics", "metrics"],
            "mlpe-fast: --server-metrics: expected auto, off or an http(s):// URL of a "
            "/metrics page, got 'metrics'",
        ),
        (
            ["--server-metrics-interval", "0.01"],
            "mlpe-fast: --server-metrics-interval: 0.01 s is below 0.1 s: scraping must stay "
            "a low rate beside the load",
        ),
        (
            ["--server-metrics-interval", "soon"],
            "mlpe-fast: --server-metrics-interval: expected a positive number, got 'soon'",
        ),
    ],
)
def test_flag_mistakes_are_one_line_and_status_2(
    endpoint: str,
    tmp_path: Path,
    flags: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_run(endpoint, tmp_path / "run", *flags)) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_a_url_given_that_is_not_there_stops_the_run_before_the_load(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    assert main(_run(endpoint, folder, "--server-metrics", f"{endpoint}/no/metrics")) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"mlpe-fast: --server-metrics: GET {endpoint}/no/metrics answered 404; the point was "
        "not measured: give the URL of the server's Prometheus page, or --server-metrics off"
    ]
    assert not folder.exists()
