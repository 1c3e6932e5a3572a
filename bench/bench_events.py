"""The event log's cost per record (issue 23): ``events.jsonl`` of a point.

Records of 64-event prose answers (256 characters, salted prompts) through
``EventsWriter`` as a point drives it: session lines around them, a flush
every 1,000 records (the runner flushes every second), then ``close``.
Side by side, per record, in one run:

- ``in order``: every record issued after the last session line (a run
  whose queries all finish before ``stop_performance_tracking``): each line
  is written once, to the live file, which ``close`` keeps;
- ``64 late``: the last 64 records issued before the stop line (a point cut
  by its duration with 64 queries in flight): ``close`` rebuilds the file
  from the live one with them moved back;
- ``every line kept``: ``live=False``, every line kept in memory and side
  files and written by ``close``: the work the live writer did for every
  line on top of its live writes before it kept only the late ones.

Run::

    PYTHONPATH=src pytest bench/bench_events.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.artifacts.events import (
    SESSION_ENDED,
    SESSION_START_PERFORMANCE_TRACKING,
    SESSION_STARTED,
    SESSION_STOP_PERFORMANCE_TRACKING,
    EventsWriter,
    PromptData,
    text_model_output,
)
from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.wire.events import ResponseSummary

RECORDS = 20_000
FLUSH_EVERY = 1_000
LATE = 64
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "for",
    "was",
    "on",
    "are",
    "with",
    "as",
    "his",
    "they",
    "be",
    "at",
    "one",
    "have",
    "this",
]


def make_records() -> list[tuple[RequestRecord, PromptData]]:
    empty = {"t_head": None, "reasoning": "", "tool_calls": (), "reasoning_after_first": "",
             "tool_calls_after_first": (), "usage": None, "events_after_done": 0, "done": True,
             "complete": True, "keep_alive": True, "chunk_errors": 0, "first_chunk_error": None,
             "unexpected_bytes": 0, "error_code": 0, "error_message": "", "chunk_times": None,
             "t_first_content": None, "t_second": None, "gaps": None}  # fmt: skip
    out = []
    for i in range(RECORDS):
        text = " ".join(WORDS[(i * 7 + k * k) % len(WORDS)] for k in range(64))[:256]
        t = 1_000 + 10 * i
        fields = {**empty, "status": 200, "t_first": t + 5, "t_done": t + 9, "content": text,
                  "content_after_first": text[4:], "finish_reason": "stop", "events": 66,
                  "content_events": 64}  # fmt: skip
        summary = ResponseSummary(**{n: fields[n] for n in ResponseSummary.__struct_fields__})
        record = RequestRecord(
            sample_index=i % 200, sample_id=f"{i:032x}", t_sched=t, t_issue=t, t_end=t + 9,
            response=summary, error_class=None, error_message=None,
        )  # fmt: skip
        prompt = PromptData(messages=({"role": "user", "content": f"[{i:016x}] Question {i}"},))
        out.append((record, prompt))
    return out


def write_point(path: Path, records: list[tuple[RequestRecord, PromptData]], variant: str) -> None:
    writer = EventsWriter(path, streaming=True, live=variant != "every line kept")
    writer.session(SESSION_STARTED, 10)
    writer.session(SESSION_START_PERFORMANCE_TRACKING, 20)
    late = LATE if variant == "64 late" else 0
    stop_at = records[len(records) - late - 1][0].t_issue + 1
    for n, (record, prompt) in enumerate(records):
        if n == len(records) - late:
            writer.session(SESSION_STOP_PERFORMANCE_TRACKING, stop_at + 20 * LATE)
        output = text_model_output(record.response, streaming=True)
        writer.record(record, prompt, output=output)
        if n % FLUSH_EVERY == FLUSH_EVERY - 1:
            writer.flush()
    if not late:
        writer.session(SESSION_STOP_PERFORMANCE_TRACKING, stop_at + 20 * LATE)
    writer.session(SESSION_ENDED, stop_at + 40 * LATE)
    writer.close()
    writer.sample_index_map.close()


@pytest.fixture(scope="module")
def records() -> list[tuple[RequestRecord, PromptData]]:
    return make_records()


@pytest.mark.parametrize("variant", ["in order", "64 late", "every line kept"])
@pytest.mark.benchmark(group="events.jsonl: 20,000 records of 64-event answers")
def test_event_log(benchmark: Any, records: Any, variant: str, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    benchmark.pedantic(
        write_point, args=(path, records, variant), rounds=5, iterations=1, warmup_rounds=1
    )
    per_record = benchmark.stats.stats.median / RECORDS * 1e6
    benchmark.extra_info["us_per_record"] = round(per_record, 2)
    print(f"\n{variant}: {per_record:.2f} us per record")
    lines = path.read_bytes().count(b"\n")
    assert lines == 4 + 3 * RECORDS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl"]
