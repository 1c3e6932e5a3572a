"""Latency detail end to end (not MLPerf metrics): ``mlpe-fast run``
against the simulated endpoint, whose timing is fixed, so the figures are
known.  With ``--reasoning-tokens 3`` every answer thinks for three tokens
before its content: the official TTFT is to the first reasoning token, the
TTFOT three inter-token delays later.  The ITL is the endpoint's
``--itl-ms``, within the histogram's resolution (and the endpoint's timer
lateness, under 0.1 ms at the median on Linux, sim/server.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.report.latency_detail import HEADING
from mlpe_fast.wire.gaps import RELATIVE_ERROR
from tests.data_files import CHAR_TOKENIZER, DUMMY_1K
from tests.unit.test_summary import REFERENCE_SUMMARY_KEYS

DATA = ("--dataset", f"{DUMMY_1K},parser.prompt=text_input", "--tokenizer", str(CHAR_TOKENIZER))
TTFT_MS, ITL_MS, THOUGHT = 10.0, 4.0, 3
TIMING = ("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--seed", "1")
#: what the endpoint's wake-ups may add to one figure on a loaded machine
SLACK_MS = 1.0
#: A token is never sent before its time (the timer's resolution aside),
#: but on a loaded machine (the suite's other worker, a build) it may go out
#: milliseconds late, and the endpoint's later tokens keep their own
#: schedule.  So the bounds below are early by EARLY_MS and late by LATE_MS:
#: still far from the wrong answers (TTFT 0 or 22 ms, a thought of 8 or 16).
EARLY_MS, LATE_MS = 0.5, 3.0


def _within(value_ms: float, expected_ms: float) -> bool:
    return expected_ms - EARLY_MS <= value_ms <= expected_ms + LATE_MS


#: The official keys of result_summary.json, in the reference's order, and
#: the two the curve reads: the detail adds none (it lives in the mlpe_fast block).
OFFICIAL_KEYS = [*REFERENCE_SUMMARY_KEYS, "system_tps", "tps_per_user"]


@pytest.fixture(scope="module")
def thinking() -> Iterator[str]:
    with simulated_endpoint((*TIMING, "--reasoning-tokens", str(THOUGHT))) as url:
        yield url


@pytest.fixture(scope="module")
def plain() -> Iterator[str]:
    with simulated_endpoint(TIMING) as url:
        yield url


def _run(
    endpoint: str, folder: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[str, dict[str, Any]]:
    argv = [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "m", *DATA),
        *("--num-samples", "8", "--concurrency", "4", "--max-output-tokens", "8"),
        *("--report-dir", str(folder), *flags),
    ]
    assert main(argv) == 0
    summary = json.loads((folder / "performance" / "result_summary.json").read_text())
    return capsys.readouterr().out, summary


def _ms(ns: float) -> float:
    return ns / 1e6


def test_reasoning_first_puts_the_first_content_token_after_the_thought(
    thinking: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, summary = _run(thinking, tmp_path / "run", capsys)
    detail = summary["mlpe_fast"]["latency_detail"]
    assert detail["note"].startswith("not MLPerf metrics")
    assert (detail["responses"], detail["content_later"], detail["without_content"]) == (8, 8, 0)
    ttft, ttfot = summary["ttft"], detail["ttfot_ns"]
    assert ttfot["count"] == 8
    # the official TTFT is to the first (reasoning) token; TTFOT to content,
    # THOUGHT inter-token delays later
    assert _within(_ms(ttft["percentiles"]["50.0"]), TTFT_MS), ttft
    assert _within(_ms(ttfot["percentiles"]["50.0"]), TTFT_MS + THOUGHT * ITL_MS), ttfot
    # a late first token narrows the gap to the content, which keeps its time
    later = _ms(ttfot["percentiles"]["50.0"] - ttft["percentiles"]["50.0"])
    assert THOUGHT * ITL_MS - LATE_MS <= later <= THOUGHT * ITL_MS + LATE_MS, later
    assert _ms(ttfot["min"] - ttft["min"]) > THOUGHT * ITL_MS - LATE_MS
    ttst = _ms(detail["ttst_ns"]["percentiles"]["50.0"])  # a difference too
    assert ITL_MS - LATE_MS <= ttst <= ITL_MS + LATE_MS, detail["ttst_ns"]

    table = out[out.index(HEADING) :]
    assert "TTFOT, to the first content token" in table
    assert "8 of 8 responses began with reasoning or a tool call" in table
    report = (tmp_path / "run" / "report.txt").read_text()
    assert HEADING in report and "TTFOT, to the first content token" in report
    assert [k for k in summary if k not in ("usage_cross_check", "mlpe_fast")] == OFFICIAL_KEYS


def test_itl_is_the_endpoints_inter_token_delay_within_the_resolution(
    plain: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, summary = _run(plain, tmp_path / "run", capsys)
    detail = summary["mlpe_fast"]["latency_detail"]
    itl = detail["itl_ns"]
    assert itl["count"] == 8 * 7  # 8 tokens each: 7 gaps
    assert _ms(itl["avg"]) == pytest.approx(ITL_MS, abs=SLACK_MS / 4)  # exact mean
    bound = ITL_MS * RELATIVE_ERROR + SLACK_MS / 4
    # the median only: on a busy machine a late token shortens the next gap,
    # which moves the quartiles by more than the histogram's resolution
    assert _ms(itl["percentiles"]["50.0"]) == pytest.approx(ITL_MS, abs=2 * bound)
    assert itl["min"] <= itl["percentiles"]["1.0"] <= itl["percentiles"]["99.9"] <= itl["max"]
    assert "3.1%" in itl["resolution"]
    # content came first: TTFOT is the TTFT, and the table does not repeat it
    assert detail["content_later"] == 0
    assert detail["ttfot_ns"]["percentiles"] == summary["ttft"]["percentiles"]
    table = out[out.index(HEADING) :]
    assert "TTFOT" not in table
    assert "TTST, first to second token" in table and "ITL, per gap (±3.1%)" in table


def test_a_non_streaming_run_has_no_detail(
    plain: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, summary = _run(plain, tmp_path / "run", capsys, "--streaming", "off")
    assert "latency_detail" not in summary["mlpe_fast"]
    assert HEADING not in out
