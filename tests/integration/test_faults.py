"""Every fault an endpoint can commit ends in exactly one correct record per
request, and the run goes on.

Each test drives the simulated endpoint with one fault (``mlpe-fast serve
--fault``, :mod:`mlpe_fast.sim.faults`) on a seeded half of the requests
and checks the records against the server's own count of faulted
requests: a faulted request fails with the class that says what the
endpoint did, or completes when its response is whole despite the noise;
the others complete normally.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.config import RunConfig
from mlpe_fast.demo import demo_config, simulated_endpoint
from mlpe_fast.engine import Client, RequestRecord
from mlpe_fast.point import run_point
from mlpe_fast.sim.config import SimConfig, SimStats
from mlpe_fast.sim.faults import parse_fault
from mlpe_fast.sim.server import SimServer
from tests.data_files import CHAR_TOKENIZER, DUMMY_1K

TOKENS = 8
REQUESTS = 16


def body(i: int, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "mlpe-sim",
        "messages": [{"role": "user", "content": f"hello {i}"}],
        "stream": stream,
        "max_completion_tokens": TOKENS,
    }


def run_with(
    fault: str,
    *,
    http2: bool = False,
    requests: int = REQUESTS,
    concurrency: int = 4,
    client: dict[str, Any] | None = None,
    stream: bool = True,
    **server: Any,
) -> tuple[list[RequestRecord], SimStats]:
    """``requests`` requests, ``concurrency`` at a time (closed loop), against
    an endpoint that commits ``fault``; the records and the server's counters."""
    config = SimConfig(faults=(parse_fault(fault),), seed=3, http2=http2, **server)

    async def main(url: str) -> list[RequestRecord]:
        records: list[RequestRecord] = []
        done = asyncio.Event()
        issued = 0
        async with Client(url, http2=http2, **(client or {})) as c:

            def on_done(record: RequestRecord) -> None:
                nonlocal issued
                records.append(record)
                if issued < requests:
                    c.issue(body(issued, stream), on_done, sample_index=issued)
                    issued += 1
                elif len(records) == requests:
                    done.set()

            for _ in range(concurrency):
                c.issue(body(issued, stream), on_done, sample_index=issued)
                issued += 1
            await asyncio.wait_for(done.wait(), 30)
        return records

    with SimServer.start_in_thread(config) as running:
        records = asyncio.run(main(running.url))
        stats = running.stats
    assert len(records) == requests  # exactly one record each
    assert sorted(r.sample_index for r in records) == list(range(requests))
    return records, stats


def faulted(stats: SimStats, fault: str) -> int:
    name = fault.partition("=")[0]
    count = stats.faults.get(name, 0)
    assert 0 < count < stats.requests, f"{name}: {count} of {stats.requests}"
    return count


def split(records: list[RequestRecord]) -> tuple[list[RequestRecord], list[RequestRecord]]:
    ok = [r for r in records if r.ok]
    return ok, [r for r in records if not r.ok]


def assert_whole(record: RequestRecord) -> None:
    assert record.ok, record.error_message
    assert record.response.content_events == TOKENS == len(record.response.content)


@pytest.mark.parametrize(
    ("fault", "error_class", "says"),
    [
        ("reset-mid-stream=0.5", "IncompleteResponse", "closed before the response was complete"),
        ("truncated-chunk=0.5", "IncompleteResponse", "closed before the response was complete"),
        ("bad-chunk-size=0.5", "InvalidChunkSize", "chunk"),
        ("garbage=0.5", "IncompleteResponse", "closed before the response was complete"),
        ("status-503=0.5", "HTTPStatusError", "503"),
        ("status-429=0.5", "HTTPStatusError", "429"),
        ("oversized-event=0.5", "EventTooLarge", "event"),
    ],
)
def test_a_fault_fails_its_request_alone(fault: str, error_class: str, says: str) -> None:
    records, stats = run_with(fault)
    ok, failed = split(records)
    assert len(failed) == faulted(stats, fault)
    for record in failed:
        assert record.error_class == error_class, record.error_message
        assert says in (record.error_message or "").lower()
        assert record.retries == 0  # no automatic retry once a byte came back
    for record in ok:
        assert_whole(record)
    if fault.startswith("reset-mid-stream"):
        # what arrived before the reset is kept
        assert all(0 < r.response.content_events < TOKENS for r in failed)


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_an_empty_answer_fails_as_such(http2: bool, stream: bool) -> None:
    """``empty-done``: ``[DONE]`` at once (or a body with empty content),
    no finish reason: not an answer, whatever the framing."""
    fault = "empty-done=0.5"
    records, stats = run_with(fault, http2=http2, stream=stream)
    ok, failed = split(records)
    assert len(failed) == faulted(stats, fault)
    for record in failed:
        assert record.error_class == "EmptyAnswer", record.error_message
        assert "no output and no finish reason" in (record.error_message or "")
        assert record.response.status == 200 and record.response.finish_reason is None
        assert record.response.done == stream
        assert record.retries == 0  # a whole response came back
    for record in ok:
        assert record.response.finish_reason == "length"
        assert len(record.response.content) == TOKENS


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_an_interrupted_answer_completes_without_a_finish_reason(http2: bool, stream: bool) -> None:
    """``interrupt`` (llama.cpp's ``interrupt_requests``): ``[DONE]`` after
    half of the tokens, no finish reason, no usage chunk, then a close: the
    record completes with what came (``metrics/answers.py`` flags it)."""
    fault = "interrupt=0.5"
    records, stats = run_with(fault, http2=http2, stream=stream)
    ok, failed = split(records)
    assert not failed, [r.error_message for r in failed]
    cut = [r for r in ok if r.response.finish_reason is None]
    assert len(cut) == faulted(stats, fault)
    for record in cut:
        assert len(record.response.content) == TOKENS // 2
        assert record.response.done == stream
        if stream:
            assert record.response.content_events == TOKENS // 2
            assert record.response.usage is None
        assert record.retries <= 1  # a request sent on the connection it closed
    for record in ok:
        if record.response.finish_reason is not None:
            assert record.response.finish_reason == "length"
            assert len(record.response.content) == TOKENS


def test_a_reset_before_the_head_is_retried_once_only_on_a_reused_connection() -> None:
    fault = "reset-before-head=0.5"
    records, stats = run_with(fault)
    ok, failed = split(records)
    # Every faulted request either failed or was sent again (nothing came back).
    assert len(failed) + sum(r.retries for r in records) == faulted(stats, fault)
    assert all(r.retries <= 1 for r in records)
    assert {r.error_class for r in failed} <= {"IncompleteResponse"}
    for record in ok:
        assert_whole(record)


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        ("malformed-event=0.5", lambda r: r.response.chunk_errors == 1),
        ("invalid-utf8=0.5", lambda r: r.response.chunk_errors == 1),
        ("no-done=0.5", lambda r: not r.response.done),
        ("double-done=0.5", lambda r: r.response.events_after_done == 1),
        ("reset-after-last=0.5", lambda r: not r.response.keep_alive),
    ],
)
def test_noise_around_a_whole_response_does_not_fail_it(fault: str, check: Any) -> None:
    records, stats = run_with(fault)
    for record in records:
        assert_whole(record)
    assert sum(1 for r in records if check(r)) == faulted(stats, fault)


def test_a_stall_past_the_idle_timeout_fails_its_request() -> None:
    fault = "stall=0.5"
    records, stats = run_with(fault, fault_stall_s=2.0, client={"idle_timeout": 0.3})
    ok, failed = split(records)
    assert len(failed) == faulted(stats, fault)
    assert {r.error_class for r in failed} == {"IdleTimeout"}
    assert all(r.response.content_events >= 1 for r in failed)  # the first token came
    for record in ok:
        assert_whole(record)


def test_a_slow_head_is_slow_but_whole() -> None:
    fault = "slow-head=0.25"
    records, stats = run_with(fault, requests=8, fault_slow_head_s=0.002)
    for record in records:
        assert_whole(record)
    slow = [r for r in records if r.ttft_ns is not None and r.ttft_ns > 100 * 0.002e9]
    assert len(slow) == faulted(stats, fault)


def test_a_keep_alive_connection_closed_under_a_request_is_retried_once() -> None:
    fault = "close-after-response=0.5"
    records, stats = run_with(fault, concurrency=1, requests=24)
    for record in records:
        assert_whole(record)
        assert record.retries <= 1
    assert sum(r.retries for r in records) <= faulted(stats, fault)


@pytest.mark.parametrize(
    ("fault", "error_class"),
    [
        ("status-500=0.5", "HTTPStatusError"),
        ("reset-mid-stream=0.5", "StreamReset"),
        ("reset-before-head=0.5", "StreamReset"),
        ("reset-after-last=0.5", None),
        ("garbage=0.5", "NoEvents"),  # cleanly ended there, but no event came
        ("malformed-event=0.5", None),
        ("no-done=0.5", None),
        ("double-done=0.5", None),
    ],
)
def test_faults_over_http2(fault: str, error_class: str | None) -> None:
    records, stats = run_with(fault, http2=True)
    ok, failed = split(records)
    n = faulted(stats, fault)
    if error_class is None:
        assert not failed
    else:
        assert len(failed) == n and {r.error_class for r in failed} == {error_class}
    for record in ok:
        assert_whole(record)


def test_a_run_with_faults_counts_every_request_once_everywhere(tmp_path: Path) -> None:
    """completed + failed == issued, in the result, result_summary.json,
    report.txt and the terminal table alike."""
    config = demo_config(RunConfig(report_dir=str(tmp_path / "run")), set())
    config = msgspec.structs.replace(
        config, concurrency=8, num_samples=200, max_output_tokens=TOKENS
    )
    flags = ("--seed", "5", "--fault", "status-500=0.05", "--fault", "reset-mid-stream=0.05")
    flags += ("--fault", "malformed-event=0.05", "--fault", "truncated-chunk=0.05")
    with simulated_endpoint(flags) as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    stats = result.stats
    assert stats.issued == 200 == stats.completed + stats.failed
    assert 0 < stats.failed < 60
    summary = json.loads((tmp_path / "run" / "performance" / "result_summary.json").read_text())
    assert summary["n_samples_issued"] == 200
    assert summary["n_samples_completed"] == stats.completed
    assert summary["n_samples_failed"] == stats.failed
    report = (tmp_path / "run" / "report.txt").read_text()
    assert f"Total samples failed: {stats.failed}" in report
    assert f"{stats.completed} done, {stats.failed} failed of 200 issued" in result.table
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    topics = [json.loads(line)["event_type"] for line in lines]
    assert topics.count("sample.issued") == topics.count("sample.complete") == 200
    assert topics.count("error.generic") == stats.failed


def test_a_killed_run_keeps_what_completed_up_to_the_last_second(tmp_path: Path) -> None:
    """SIGKILL mid-run: events.jsonl holds whole lines, among them the
    records completed until about a second before the kill."""
    import os
    import signal
    import subprocess
    import time

    report = tmp_path / "run"
    with simulated_endpoint(("--ttft-ms", "5", "--itl-ms", "2", "--output-len", "8")) as url:
        argv = [
            *(sys.executable, "-m", "mlpe_fast", "run", "--no-progress", "--endpoints", url),
            *("--model", "mlpe-sim", "--tokenizer", str(CHAR_TOKENIZER)),
            *("--dataset", f"{DUMMY_1K},parser.prompt=text_input", "--max-output-tokens", "8"),
            *("--concurrency", "8", "--duration", "60s", "--report-dir", str(report)),
        ]
        run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            events = report / "events.jsonl"
            # wait until records have been flushed, then one second more
            while time.monotonic() < deadline and b"sample.complete" not in (
                events.read_bytes() if events.exists() else b""
            ):
                time.sleep(0.1)
            time.sleep(1.5)
            before_kill = events.read_bytes()
            os.kill(run.pid, signal.SIGKILL)
        finally:
            run.wait(10)
    text = events.read_bytes()
    assert text.startswith(before_kill) and text.endswith(b"\n")
    lines = [json.loads(line) for line in text.splitlines()]
    completes = sum(1 for line in lines if line["event_type"] == "sample.complete")
    # at ~100 responses per second, more than a second of them
    assert completes > 50 and lines[0]["event_type"] == "session.started"
