"""A measured point's run folder, end to end against the simulated endpoint:
the files of spec §3.1, the checker's reading of the summary, token counts
through the chat template (spec §1.2), `mlpe-fast analyze` reproducing the
summary, and an interrupted run (SIGINT) that still leaves its results."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

import mlpe_fast.sim
from mlpe_fast.analyze import analyze, summary_differences
from mlpe_fast.artifacts.events import PromptData, iter_events
from mlpe_fast.cli import main
from mlpe_fast.config import RunConfig
from mlpe_fast.demo import demo_config, simulated_endpoint
from mlpe_fast.point import PointResult, run_point
from tests.data_files import CHAR_CHAT_TOKENIZER as CHAR_CHAT
from tests.unit.test_summary import _checker_results

RUN_FILES = {
    "config.yaml",
    "events.jsonl",
    "report.txt",
    "sample_idx_map.json",
    "performance/result_summary.json",
    "metrics/final_snapshot.json",
    "metrics/.ready",
    "steady_state.json",
    # the simulated endpoint's /metrics: its probe, then the point's scrapes
    "server_calls.json",
    "server_metrics.jsonl",
}


def _config(tmp_path: Path, **changes: object) -> RunConfig:
    config = demo_config(RunConfig(report_dir=str(tmp_path / "run")), set())
    fields: dict[str, object] = {"concurrency": 8, "num_samples": 48, "max_output_tokens": 16}
    return msgspec.structs.replace(config, **{**fields, **changes})


def _run(config: RunConfig, *flags: str) -> PointResult:
    with simulated_endpoint(("--ttft-ms", "2", "--itl-ms", "0.2", *flags)) as endpoint:
        return asyncio.run(run_point(config, endpoint, progress=False))


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_run_folder_files_and_the_checker(tmp_path: Path) -> None:
    result = _run(_config(tmp_path))
    run = tmp_path / "run"
    assert _files(run) == RUN_FILES  # no warmup: no warmup log
    summary = json.loads((run / "performance" / "result_summary.json").read_bytes())
    assert summary == result.summary
    assert summary["state"] == "complete" and summary["complete"] is True
    issued, done = summary["n_samples_issued"], summary["n_samples_completed"]
    assert issued == done + summary["n_samples_failed"] == 48
    # 16 one-character tokens per response (the demo tokenizer)
    assert summary["output_sequence_lengths"]["total"] == 48 * 16
    assert summary["system_tps"] == 48 * 16 / (summary["duration_ns"] / 1e9)
    assert summary["usage_cross_check"]["output_relative_difference"] == 0.0
    errors = [r for r in _checker_results(run / "performance" / "result_summary.json")]
    assert [r for r in errors if r.severity.value == "error"] == []
    snapshot = json.loads((run / "metrics" / "final_snapshot.json").read_bytes())
    counters = {m["name"]: m["value"] for m in snapshot["metrics"] if m["type"] == "counter"}
    assert counters["tracked_samples_completed"] == 48
    assert counters["tracked_duration_ns"] == summary["duration_ns"]
    # the steady-state window (spec §1.4): a short point's falls back to the
    # whole run, said in the summary, the report and the table alike
    steady = summary["mlpe_fast"]["steady_state"]
    stored = json.loads((run / "steady_state.json").read_bytes())["point_yaml"]
    assert steady["status"] == stored["status"] and steady["basis"] == "total"
    line = f"steady state: {steady['status']} ("
    assert line in (run / "report.txt").read_text() and line in result.table
    assert "the whole-run figures above are the result" in result.table


def test_warmup_has_its_own_log(tmp_path: Path) -> None:
    _run(_config(tmp_path, warmup_requests=8))
    run = tmp_path / "run"
    assert _files(run) == RUN_FILES | {"warmup_events.jsonl"}
    warm = [json.loads(x) for x in (run / "warmup_events.jsonl").read_text().splitlines()]
    assert sum(e["event_type"] == "sample.complete" for e in warm) == 8
    measured = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    warm_ids = {e["sample_uuid"] for e in warm}
    assert not warm_ids & {e["sample_uuid"] for e in measured}
    summary = json.loads((run / "performance" / "result_summary.json").read_bytes())
    assert summary["n_samples_issued"] == 48
    # one salt stream for both phases (the reference's one generator): no
    # measured query repeats a warmup query's salt
    assert not _salts(warm) & _salts(measured)
    assert len(_salts(measured)) == 48 and len(_salts(warm)) == 8


def _salts(events: list[dict[str, object]]) -> set[str]:
    """The salts of the ISSUED lines' prompts (``[<16 hex>] ...``)."""
    found: set[str] = set()
    for event in events:
        if event["event_type"] == "sample.issued":
            found.update(re.findall(r"\[([0-9a-f]{16})\] ", json.dumps(event["data"])))
    return found


def test_reasoning_is_counted_through_the_chat_template(tmp_path: Path) -> None:
    config = _config(tmp_path, tokenizer=str(CHAR_CHAT))
    result = _run(config, "--reasoning-tokens", "4")
    summary = result.summary
    # char_chat renders "<content><think><reasoning></think>" inside the
    # assistant turn (the newline after "{% if ... %}" goes: transformers
    # renders with trim_blocks), one token per character, and the empty
    # turn is subtracted: 12 content + 4 reasoning + 7 + 8 markup.
    osl = summary["output_sequence_lengths"]
    assert osl["min"] == osl["max"] == 12 + 4 + 7 + 8
    # ISL: the chat prompt rendered with the generation prompt, salt included;
    # the endpoint counts the message text only.
    framing = len("<|im_start|>user\n") + len("<|im_end|>\n") + len("<|im_start|>assistant\n")
    check = summary["usage_cross_check"]
    assert check["responses"] == 48
    assert check["client_input_tokens"] - check["server_input_tokens"] == 48 * framing
    assert check["server_output_tokens"] == 48 * 16
    assert check["client_output_tokens"] == 48 * 31


def test_tpot_count_of_a_reasoning_response(tmp_path: Path) -> None:
    result = _run(
        _config(tmp_path, tokenizer=str(CHAR_CHAT), num_samples=8), "--reasoning-tokens", "4"
    )
    # (t_done - t_first) / (12 content + 3 reasoning after the first + 15 markup)
    # (a response read whole in one read has t_done == t_first: TPOT 0, which
    # is not a sample, spec §1.2)
    expected = sorted(
        v
        for r in result.records
        if (v := (r.response.t_done - r.response.t_first) / 30) > 0  # type: ignore[operator]
    )
    assert sorted(result.stats.raw.series["tpot_ns"].tolist()) == expected


def test_analyze_reproduces_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(_config(tmp_path, tokenizer=str(CHAR_CHAT)), "--reasoning-tokens", "3")
    run = tmp_path / "run"
    analysis = analyze(run)
    assert summary_differences(result.summary, analysis.summary) == []
    assert analysis.summary["tpot"] == result.summary["tpot"]
    assert main(["analyze", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"reproduces {run / 'performance' / 'result_summary.json'}" in out
    assert (run / "analysis" / "result_summary.json").is_file()


def test_sample_idx_map_past_its_spool_buffer(tmp_path: Path) -> None:
    """1,600 queries: the index map's entries outgrew its 64 KiB buffer and
    went through its side file (issue 23).  The file is the dict-based
    writer's, byte for byte; each measured uuid once, in the log's order;
    each index the dataset row whose prompt the query sent."""
    run = tmp_path / "run"
    argv = ["run", "--no-progress", "--num-samples", "1600", "--concurrency", "64"]
    assert main([*argv, "--max-output-tokens", "2", "--report-dir", str(run)]) == 0
    raw = (run / "sample_idx_map.json").read_bytes()
    assert len(raw) > 64 << 10
    mapping = json.loads(raw)
    assert msgspec.json.format(msgspec.json.encode(mapping), indent=2) == raw
    issued = [e for e in iter_events(run / "events.jsonl") if e.event_type == "sample.issued"]
    assert list(mapping) == ["performance"]
    assert list(mapping["performance"]) == [e.sample_uuid for e in issued]
    assert len(issued) == 1600
    rows = (Path(mlpe_fast.sim.__file__).parent / "demo_prompts.jsonl").read_text().splitlines()
    prompts = [json.loads(row)["prompt"] for row in rows]
    for event in issued:
        assert isinstance(event.data, PromptData) and event.data.messages is not None
        sent = event.data.messages[-1]["content"]
        assert sent.endswith("] " + prompts[mapping["performance"][event.sample_uuid]])
    assert _files(run) == RUN_FILES  # no side file left


def test_analyze_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path)]) == 2
    (tmp_path / "events.jsonl").write_text('{"event_type": 5}\n')
    assert main(["analyze", str(tmp_path), "--tokenizer", str(CHAR_CHAT)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no events.jsonl" in err and "events.jsonl:1" in err


def _start_run(endpoint: str, run: Path, concurrency: int = 4) -> subprocess.Popen[str]:
    """`mlpe-fast run` for two minutes at ``concurrency`` into ``run`` (about
    0.2 s a request against the slow endpoint most callers give)."""
    src = Path(__file__).resolve().parents[2] / "src/mlpe_fast/sim"
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "mlpe_fast", "run", "--no-progress", "--endpoints", endpoint),
            *("--model", "m", "--tokenizer", str(src / "tokenizer")),
            *("--dataset", str(src / "demo_prompts.jsonl"), "--concurrency", str(concurrency)),
            *("--duration", "120s", "--max-output-tokens", "10", "--report-dir", str(run)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_for_logged_queries(proc: subprocess.Popen[str], events: Path, n: int) -> None:
    """Until ``events`` (flushed every second) holds ``n`` COMPLETE lines."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if events.is_file() and events.read_bytes().count(b'"sample.complete"') >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {n} queries in {events} in time (exit status {proc.poll()})")


def test_sigint_leaves_an_interrupted_summary_and_every_record(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with simulated_endpoint(("--ttft-ms", "5", "--itl-ms", "20")) as endpoint:
        proc = _start_run(endpoint, run)
        try:
            _wait_for_logged_queries(proc, run / "events.jsonl", 4)
            assert not (run / "metrics" / ".ready").exists()  # not before the snapshot
            proc.send_signal(signal.SIGINT)  # some requests done, some in flight
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    summary = json.loads((run / "performance" / "result_summary.json").read_bytes())
    assert summary["state"] == "interrupted" and summary["complete"] is False
    assert summary["n_samples_completed"] >= 4
    assert summary["n_samples_failed"] >= 1  # in flight at the signal: Cancelled
    assert summary["mlpe_fast"]["errors"].keys() == {"Cancelled"}
    lines = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    issued = {e["sample_uuid"] for e in lines if e["event_type"] == "sample.issued"}
    completed = {e["sample_uuid"] for e in lines if e["event_type"] == "sample.complete"}
    assert issued == completed
    assert len(issued) == summary["n_samples_issued"]
    assert lines[-1]["event_type"] == "session.ended"
    assert (run / "metrics" / "final_snapshot.json").is_file()
    assert (run / "metrics" / ".ready").is_file()
    # analyze reads the Cancelled records as the interruption they were
    analysis = analyze(run)
    assert analysis.summary["state"] == "interrupted" and analysis.summary["complete"] is False
    assert summary_differences(summary, analysis.summary) == []
    assert analysis.interrupted is not None and "were cancelled" in analysis.interrupted


#: What a killed point leaves: what was flushed, and no sign of a finished
#: point (the metrics probe's record and the scrapes are written as they come).
KILLED_POINT_FILES = {"config.yaml", "events.jsonl", "server_calls.json", "server_metrics.jsonl"}


def _kill_after(
    run: Path, queries: int, server_flags: tuple[str, ...] | None = None, concurrency: int = 4
) -> None:
    """Starts ``mlpe-fast run`` into ``run``, SIGKILLs it once ``queries``
    are logged, and checks it died by the signal."""
    server = simulated_endpoint() if server_flags is None else simulated_endpoint(server_flags)
    with server as endpoint:
        proc = _start_run(endpoint, run, concurrency)
        try:
            _wait_for_logged_queries(proc, run / "events.jsonl", queries)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_past_the_index_maps_buffer_leaves_no_index_file(tmp_path: Path) -> None:
    """Killed with 2,000 queries logged, the index map's entries past its
    64 KiB buffer in its side file: no sample_idx_map.json, half or whole,
    and no side file (it has no name: issue 23)."""
    run = tmp_path / "run"
    _kill_after(run, 2_000, concurrency=64)
    assert _files(run) == KILLED_POINT_FILES


def test_sigkill_leaves_a_log_that_analyze_calls_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _kill_after(run, 4, ("--ttft-ms", "5", "--itl-ms", "20"))
    assert _files(run) == KILLED_POINT_FILES
    text = (run / "events.jsonl").read_text()
    whole = text[: text.rfind("\n") + 1]  # a kill in mid-write may cut the last line
    lines = [json.loads(x) for x in whole.splitlines()]
    issued = [e for e in lines if e["event_type"] == "sample.issued"]
    completed = [e for e in lines if e["event_type"] == "sample.complete"]
    assert "session.ended" not in {e["event_type"] for e in lines}
    analysis = analyze(run)
    summary = analysis.summary
    assert summary["state"] == analysis.snapshot["state"] == "interrupted"
    assert summary["complete"] is False
    assert summary["n_samples_issued"] == len(issued) >= 4
    assert summary["n_samples_completed"] == len(completed)
    assert analysis.interrupted is not None
    assert analysis.interrupted.startswith(
        "the log has no session.ended line: the run did not end (killed?); "
        f"the figures cover the {len(issued)} queries that were logged"
    )
    assert main(["analyze", str(run)]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"mlpe-fast analyze: interrupted: {analysis.interrupted}\n"
    assert "WARNING: run was interrupted" in captured.out
