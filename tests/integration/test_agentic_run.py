"""An agentic point end to end: ``mlpe-fast run`` with the
``agentic_inference`` load pattern on the recorded agentic dataset against
the simulated endpoint, its run folder read back by ``analyze`` and by the
official checker's parser and rules."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.cli import main
from mlpe_fast.config import RunConfig, resolve
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.load.agentic import AgenticSettings
from mlpe_fast.load.agentic_scheduler import ABORTED
from mlpe_fast.load.dataset import DatasetSpec
from mlpe_fast.point import PointResult, run_point
from tests.data_files import AGENTIC_CODING as AGENTIC
from tests.data_files import CHAR_CHAT_TOKENIZER as CHAR_CHAT

pytestmark = pytest.mark.pipeline

SERVER = ("--ttft-ms", "2", "--itl-ms", "0.5", "--seed", "7")


def _config(tmp_path: Path, name: str, concurrency: int, **settings: Any) -> RunConfig:
    agentic = AgenticSettings(
        **{"inject_tool_delay": False, "num_trajectories_to_issue": 5, **settings}
    )
    return RunConfig(
        model="mlpe-sim",
        datasets=(DatasetSpec(path=str(AGENTIC), agentic=agentic),),
        tokenizer=str(CHAR_CHAT),
        load_pattern="agentic_inference",
        concurrency=concurrency,
        max_output_tokens=6,
        report_dir=str(tmp_path / name),
    )


def _run(config: RunConfig, endpoint: str) -> PointResult:
    return asyncio.run(run_point(config, endpoint, progress=False))


def _checked(summary_path: Path, concurrency: int) -> list[Any]:
    loader = pytest.importorskip("submission_checker.models.loader")
    point_result = pytest.importorskip("submission_checker.models.aggregate.point_result")
    point_config = pytest.importorskip("submission_checker.models.file.point_config")
    summary, errors = loader.load_result_summary(summary_path)
    assert errors == []
    config = point_config.PointConfig.model_validate(
        {
            "concurrency": concurrency,
            "runtime_settings": {"load_pattern": "agentic_inference", "runtime": {}},
        },
        context={"yaml_path": summary_path.with_name("point.yaml")},
    )
    checked = point_result.PointResult.model_validate(
        {"config": config, "summary": summary, "yaml_path": summary_path.with_name("point.yaml")},
        context={"regions": None, "summary_path": summary_path},
    )
    results: list[Any] = checked._check_results
    return results


@pytest.fixture(scope="module")
def endpoint() -> Any:
    with simulated_endpoint(SERVER) as url:
        yield url


@pytest.mark.parametrize("concurrency", [2, 4])
def test_an_agentic_point_and_its_summary(
    tmp_path: Path, endpoint: str, concurrency: int, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _run(_config(tmp_path, "run", concurrency), endpoint)
    assert result.state == "complete" and result.stats.failed == 0
    folder = tmp_path / "run"
    summary = json.loads((folder / "performance" / "result_summary.json").read_text())
    issued = summary["n_samples_issued"]
    assert issued == summary["n_samples_completed"] + summary["n_samples_failed"]
    # Every turn of the 5 trajectories has a record; the window holds fewer.
    assert len(result.records) > issued > 0
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    issued_lines = [e for e in events if e["event_type"] == "sample.issued"]
    assert len(issued_lines) == len(result.records)
    ids = [e["conversation_id"] for e in issued_lines]
    assert len(set(ids)) == 5 and all(e["turn"] for e in issued_lines)
    assert ids.count("django__django-16899") == 58  # its client turns, each once
    topics = [e["event_type"] for e in events if e["event_type"].startswith("session.")]
    assert topics == [
        "session.started",
        "session.start_performance_tracking",
        "session.stop_performance_tracking",
        "session.ended",
    ]
    # The requests replay the recorded history: the ISSUED messages grow turn by turn
    # and each carries the salted system prompt.
    first = [e for e in issued_lines if e["conversation_id"] == "django__django-16899"]
    sizes = [len(e["data"][3]) for e in first]
    assert sizes == sorted(sizes) and sizes[0] == 2
    assert first[0]["data"][3][0]["content"].startswith("[salt: 4461]\n\n")
    # The agentic fields, as the checker derives them.
    ratio = summary["output_sequence_lengths"]["total"] / (summary["latency"]["total"] / 1e9)
    assert summary["e2e_avg_interactivity"] == pytest.approx(ratio, rel=1e-9)
    assert summary["output_tokens_per_turn_total"] == summary["output_sequence_lengths"]["total"]
    full = summary["output_sequence_lengths_full_run"]["output_sequence_lengths"]
    assert full["total"] == 6 * len(result.records) > summary["output_sequence_lengths"]["total"]
    checked = _checked(folder / "performance" / "result_summary.json", concurrency)
    assert [r for r in checked if r.severity.value == "error"] == []
    assert any(r.rule == "agentic-metric-consistency" and r.key == "pass" for r in checked)
    assert main(["analyze", str(folder)]) == 0
    assert "reproduces" in capsys.readouterr().out


def test_failed_turns_are_counted_and_withhold_the_interactivity(tmp_path: Path) -> None:
    flags = (*SERVER[:4], "--seed", "3", "--fault", "status-500=0.05")
    with simulated_endpoint(flags) as url:
        result = _run(_config(tmp_path, "faults", 3), url)
    summary = json.loads((tmp_path / "faults" / "performance" / "result_summary.json").read_text())
    assert summary["n_samples_failed"] > 0
    assert (
        summary["n_samples_issued"] == summary["n_samples_completed"] + summary["n_samples_failed"]
    )
    assert "e2e_avg_interactivity" not in summary
    aborted = [r for r in result.records if r.error_class == ABORTED]
    assert aborted and all(r.response.status == 0 for r in aborted)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--num-samples", "10"], "--num-samples: not for an agentic_inference run"),
        (["--warmup-requests", "4"], "has no warmup"),
        (["--engines", "2"], "--engines: an agentic_inference run uses one engine"),
        (["--concurrency", "1,2", "--offline", "dedicated"], "has no Offline point"),
        (["--max-concurrency", "40", "--offline", "elected"], "has no Offline point"),
    ],
)
def test_agentic_mistakes_are_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    agentic = ["--load-pattern", "agentic_inference", "--dataset", str(AGENTIC)]
    status = main(["run", *agentic, "--model", "m", "--endpoints", "http://127.0.0.1:9", *flags])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and said in err, err


def test_an_agentic_block_needs_the_agentic_load_pattern(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"datasets:\n  - path: {AGENTIC}\n    agentic_inference: {{enable_salt: true, bogus: 1}}\n"
    )
    assert main(["run", "-c", str(config), "--model", "m", "--endpoints", "http://x:9"]) == 2
    assert "unknown key 'datasets[0].agentic_inference.bogus'" in capsys.readouterr().err
    config.write_text(f"datasets:\n  - path: {AGENTIC}\n    agentic_inference: {{}}\n")
    assert main(["run", "-c", str(config), "--model", "m", "--endpoints", "http://x:9"]) == 2
    assert "needs the agentic_inference load pattern" in capsys.readouterr().err


def test_the_yaml_block_round_trips_through_config_yaml(tmp_path: Path, endpoint: str) -> None:
    from mlpe_fast.artifacts.run_folder import read_config_yaml

    config = _config(tmp_path, "yaml", 2, num_trajectories_to_issue=2)
    _run(config, endpoint)
    written = read_config_yaml(tmp_path / "yaml")
    block = written["datasets"][0]["agentic_inference"]
    assert block["num_trajectories_to_issue"] == 2 and block["inject_tool_delay"] is False
    assert written["settings"]["load_pattern"] == {
        "type": "agentic_inference",
        "target_concurrency": 2,
    }
    assert "n_samples_to_issue" not in written["settings"]["runtime"]
    # ... and reads back as the same run.
    again = resolve(argparse.Namespace(), written)
    assert again.load_pattern == "agentic_inference" and again.concurrency == 2
    assert again.datasets[0].agentic == config.datasets[0].agentic


@pytest.mark.parametrize("concurrency", [2, 5])
def test_a_replayed_run_scores_one_inline(tmp_path: Path, concurrency: int) -> None:
    flags = ("--ttft-ms", "1", "--itl-ms", "0", "--replay", str(AGENTIC))
    with simulated_endpoint(flags) as url:
        result = _run(_config(tmp_path, "replay", concurrency), url)
    assert result.stats.failed == 0
    folder = tmp_path / "replay"
    entries = json.loads((folder / "accuracy" / "accuracy_results.json").read_text())
    (entry,) = entries["accuracy_scores"]
    assert entry["dataset_type"] == "performance" and entry["score"] == 1.0
    assert entry["complete"] is True and entry["total_samples"] == len(result.records)
    scores = json.loads((folder / "scores.json").read_text())
    assert scores["turns"]["scored"] == scores["turns"]["issued"] == len(result.records)
    summary = json.loads((folder / "performance" / "result_summary.json").read_text())
    # The recorded answers end in tool calls: the finish reasons say so.
    assert summary["finish_reason_counts"]["tool_calls"] == summary["n_samples_completed"]
    assert "performance: 1.0000" in result.table


def test_the_replay_refuses_a_turn_it_does_not_have() -> None:
    from mlpe_fast.engine import Client

    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "not in the dataset"}],
        "stream": True,
    }

    async def ask(url: str) -> Any:
        async with Client(url) as client:
            return await client.request(body)

    with simulated_endpoint(("--replay", str(AGENTIC))) as url:
        record = asyncio.run(ask(url))
    assert record.response.status == 404
    assert "has this request's history" in (record.error_message or "")


def test_every_load_metric_on_a_hand_checked_example(tmp_path: Path) -> None:
    """Three trajectories of two turns each, answered by the replay endpoint
    with content of 8, 12 and 16 characters in runs of 4 (2, 3 and 4
    events), 20 ms to the first event and 5 ms between events; the char
    tokenizer counts one token per character."""
    from tests.unit.test_agentic import write

    rows = []
    for cid, size in (("a", 8), ("b", 12), ("c", 16)):
        answer = "x" * size
        rows += [
            {"conversation_id": cid, "turn": 1, "role": "user", "content": f"task {cid}",
             "system": "S"},
            {"conversation_id": cid, "turn": 2, "role": "assistant", "content": answer},
            {"conversation_id": cid, "turn": 3, "role": "user", "content": "again"},
            {"conversation_id": cid, "turn": 4, "role": "assistant", "content": answer},
        ]  # fmt: skip
    path = write(tmp_path, rows)
    config = msgspec.structs.replace(
        _config(tmp_path, "hand", 3, num_trajectories_to_issue=3),
        datasets=(DatasetSpec(path=str(path), agentic=AgenticSettings(inject_tool_delay=False)),),
        max_output_tokens=64,
    )
    flags = ("--ttft-ms", "20", "--itl-ms", "5", "--replay", str(path), "--replay-token-chars", "4")
    with simulated_endpoint(flags) as url:
        result = _run(config, url)
    records = result.records
    assert len(records) == 6 and all(r.ok for r in records)
    summary = json.loads((tmp_path / "hand" / "performance" / "result_summary.json").read_text())
    # The window closed when the first trajectory (a: the shortest answers, 2 x 30 ms)
    # ended with none left to start; the turns issued before that are measured.
    events = [
        json.loads(line) for line in (tmp_path / "hand" / "events.jsonl").read_text().splitlines()
    ]
    stop = next(
        e["timestamp_ns"] for e in events if e["event_type"].endswith("stop_performance_tracking")
    )
    tracked = [r for r in records if r.t_issue < stop]
    assert summary["n_samples_issued"] == len(tracked)
    a_turns = [r for r in records if len(r.response.content) == 8]
    assert len(a_turns) == 2 and stop >= max(r.t_end for r in a_turns)
    for record in records:
        size = len(record.response.content)
        assert size in (8, 12, 16) and record.response.content_events == size // 4
        ttft_ms = record.ttft_ns / 1e6  # type: ignore[operator]
        assert 19.5 < ttft_ms < 60  # 20 ms to the first event
        latency_ms = record.latency_ns / 1e6
        gaps = size // 4  # the other content events and the finish event, 5 ms apart
        assert 20 + 5 * gaps - 0.5 < latency_ms < 60 + 5 * gaps + 30
    # OSL is each answer's length; e2e = the window's tokens over its turns' times.
    lengths = sorted(len(r.response.content) for r in tracked)
    assert summary["output_sequence_lengths"]["total"] == sum(lengths)
    seconds = sum(r.latency_ns for r in tracked) / 1e9
    assert summary["e2e_avg_interactivity"] == pytest.approx(sum(lengths) / seconds, rel=1e-9)
    assert summary["e2e_turn_time_seconds_total"] == pytest.approx(seconds, rel=1e-9)
    assert summary["latency"]["total"] == sum(r.latency_ns for r in tracked)
    assert summary["ttft"]["min"] == min(r.ttft_ns for r in tracked)  # type: ignore[type-var]
    assert summary["ttft"]["max"] == max(r.ttft_ns for r in tracked)  # type: ignore[type-var]
    full = summary["output_sequence_lengths_full_run"]["output_sequence_lengths"]
    assert full["total"] == 2 * (8 + 12 + 16) and full["avg"] == pytest.approx(12.0)
    # TPOT: (done - first) / the tokens after the first event: the done event comes
    # size/4 gaps of 5 ms after the first, over size - 4 tokens (2.5 ms for 8 characters,
    # 1.875 for 12, 1.667 for 16).
    tpots, ratios = [], []
    for record in tracked:
        size = len(record.response.content)
        after = len(record.response.content_after_first)
        assert after == size - 4
        tpot_ns = (record.t_done - record.t_first) / after  # type: ignore[operator]
        assert tpot_ns > 0
        ratios.append(tpot_ns / 1e6 / (5 * (size // 4) / (size - 4)))
        tpots.append(tpot_ns)
    # On the median: on a busy machine the endpoint may send one turn's first
    # event late and the rest on time, which shortens that turn's TPOT.
    assert 0.5 < statistics.median(ratios) < 2.5
    assert summary["tpot"]["min"] == pytest.approx(min(tpots), rel=1e-9)
    assert summary["tpot"]["max"] == pytest.approx(max(tpots), rel=1e-9)
