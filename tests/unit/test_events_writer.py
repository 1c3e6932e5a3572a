"""events.jsonl and sample_idx_map.json in the reference client's format.

The golden lines below are what the reference's own msgspec types
(mlcommons/endpoints core/record.py + core/types.py, encoded as its
JSONLWriter does) produce for the same events; the topics are the
"<category>.<value>" strings its enc_hook writes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.artifacts.events import (
    ERROR_LOADGEN,
    SAMPLE_COMPLETE,
    SAMPLE_ISSUED,
    SESSION_ENDED,
    SESSION_START_PERFORMANCE_TRACKING,
    SESSION_STARTED,
    SESSION_STOP_PERFORMANCE_TRACKING,
    EventsWriter,
    PromptData,
    TextModelOutput,
    read_events,
    text_model_output,
    write_sample_idx_map,
)
from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.wire.events import ResponseSummary, ToolCall

A, B, C, D = ("a" * 32, "b" * 32, "c" * 32, "d" * 32)


def summary(**fields: Any) -> ResponseSummary:
    values: dict[str, Any] = {
        "status": 200,
        "t_head": None,
        "t_first": None,
        "t_done": None,
        "content": "",
        "reasoning": "",
        "tool_calls": (),
        "content_after_first": "",
        "reasoning_after_first": "",
        "tool_calls_after_first": (),
        "finish_reason": None,
        "usage": None,
        "events": 0,
        "content_events": 0,
        "events_after_done": 0,
        "done": True,
        "complete": True,
        "keep_alive": True,
        "chunk_errors": 0,
        "first_chunk_error": None,
        "unexpected_bytes": 0,
        "error_code": 0,
        "error_message": "",
        "chunk_times": None,
        "t_first_content": None,
        "t_second": None,
        "gaps": None,
    }
    values.update(fields)
    return ResponseSummary(**{name: values[name] for name in ResponseSummary.__struct_fields__})


def record(
    uuid: str,
    index: int,
    t_issue: int,
    t_end: int,
    error: tuple[str, str] | None = None,
    **fields: Any,
) -> RequestRecord:
    return RequestRecord(
        sample_index=index,
        sample_id=uuid,
        t_sched=t_issue,
        t_issue=t_issue,
        t_end=t_end,
        response=summary(**fields),
        error_class=None if error is None else error[0],
        error_message=None if error is None else error[1],
    )


def session(path: Path, spill_bytes: int = 64 << 20) -> EventsWriter:
    writer = EventsWriter(path, streaming=True, spill_bytes=spill_bytes)
    writer.session(SESSION_STARTED, 100)
    # a warmup query issued before tracking started, finishing after it
    writer.session(SESSION_START_PERFORMANCE_TRACKING, 200)
    writer.record(
        record(A, 7, 300, 401, t_first=350, t_done=400, content="Hello world",
               content_after_first="lo world", finish_reason="stop"),
        "[0011223344556677] Hi",
    )  # fmt: skip
    writer.record(
        record(B, 2, 310, 320, error=("HTTPStatusError", "HTTP 503 Service Unavailable"),
               status=503, finish_reason="stop"),
        "[8899aabbccddeeff] p",
    )  # fmt: skip
    writer.record(
        record(C, 4, 150, 171, t_first=160, t_done=170, content="w"),
        "[0123456789abcdef] warm",
        phase="warmup",
    )
    writer.session(SESSION_STOP_PERFORMANCE_TRACKING, 500)
    # issued inside the window, finished after it
    writer.record(
        record(D, 5, 450, 601, t_first=460, t_done=600, content="x", finish_reason="length"),
        None,
    )
    writer.session(SESSION_ENDED, 700)
    return writer


def line(event_type: str, t: int, uuid: str = "", data: str = "null", tail: str = "") -> str:
    return (
        f'{{"event_type":"{event_type}","timestamp_ns":{t},"sample_uuid":"{uuid}",'
        f'"conversation_id":"","turn":null,"data":{data}{tail}}}'
    )


def prompt(text: str) -> str:
    return f'["PromptData","{text}",null,null,null,null,null,null]'


GOLDEN = [
    line("session.started", 100),
    line("sample.issued", 150, C, prompt("[0123456789abcdef] warm")),
    line("sample.recv_first", 160, C),
    # warmup queries are logged in full (their own log in a run folder)
    line("sample.complete", 170, C, '["TextModelOutput",["w"],null,null]', ',"worker_id":0'),
    line("session.start_performance_tracking", 200),
    line("sample.issued", 300, A, prompt("[0011223344556677] Hi")),
    line("sample.recv_first", 350, A),
    line(
        "sample.complete",
        400,
        A,
        '["TextModelOutput",["Hel","lo world"],null,null]',
        ',"finish_reason":"stop","worker_id":0',
    ),
    line("sample.issued", 310, B, prompt("[8899aabbccddeeff] p")),
    line("error.generic", 320, B, '["ErrorData","HTTPStatusError","HTTP 503 Service Unavailable"]'),
    line("sample.complete", 320, B, "null", ',"worker_id":0'),
    line("sample.issued", 450, D, '["PromptData",null,null,null,null,null,null,null]'),
    line("sample.recv_first", 460, D),
    line(
        "sample.complete",
        600,
        D,
        '["TextModelOutput",["x"],null,null]',
        ',"finish_reason":"length","worker_id":0',
    ),
    line("session.stop_performance_tracking", 500),
    line("session.ended", 700),
]


def test_golden_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    session(path).close()
    assert path.read_text(encoding="utf-8").splitlines() == GOLDEN
    assert path.read_bytes().endswith(b"}\n")


def test_round_trip_with_json(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    session(path).close()
    events = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
    for event in events:
        assert set(event) >= {"event_type", "timestamp_ns", "sample_uuid", "conversation_id"}
        category, _, value = event["event_type"].partition(".")
        assert category in ("session", "sample", "error") and value
        assert isinstance(event["timestamp_ns"], int)
        if category != "session":
            assert len(event["sample_uuid"]) == 32
            int(event["sample_uuid"], 16)
        assert ("worker_id" in event) == (event["event_type"] == SAMPLE_COMPLETE)
    by_uuid: dict[str, dict[str, int]] = {}
    for event in events:
        if event["sample_uuid"]:
            by_uuid.setdefault(event["sample_uuid"], {})[event["event_type"]] = event[
                "timestamp_ns"
            ]
    for times in by_uuid.values():  # issued <= first token <= complete
        ordered = [
            times[k] for k in ("sample.issued", "sample.recv_first", SAMPLE_COMPLETE) if k in times
        ]
        assert ordered == sorted(ordered)
    assert SAMPLE_COMPLETE in by_uuid[C]  # warmup logged in full (spec §2.4)


def test_tracking_window_by_line_order(tmp_path: Path) -> None:
    """Line-order consumers (the reference's early-stopping script) see
    exactly the queries issued inside the window."""
    path = tmp_path / "events.jsonl"
    session(path).close()
    tracking = False
    tracked: list[str] = []
    for event in read_events(path):
        if event.event_type == SESSION_START_PERFORMANCE_TRACKING:
            tracking = True
        elif event.event_type == SESSION_STOP_PERFORMANCE_TRACKING:
            tracking = False
        elif event.event_type == SAMPLE_ISSUED and tracking:
            tracked.append(event.sample_uuid)
    assert tracked == [A, B, D]


def test_read_events_types(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    session(path).close()
    events = read_events(path)
    assert len(events) == len(GOLDEN)
    issued = events[5]
    assert issued.data == PromptData(text="[0011223344556677] Hi")
    complete = events[7]
    assert complete.data == TextModelOutput(output=("Hel", "lo world"))
    assert (complete.finish_reason, complete.worker_id) == ("stop", 0)


def test_spilling_gives_the_same_file(tmp_path: Path) -> None:
    whole = tmp_path / "whole.jsonl"
    spilled = tmp_path / "spilled.jsonl"
    session(whole).close()
    writer = session(spilled, spill_bytes=1)
    assert list(tmp_path.glob("spilled.jsonl.part*"))  # it did spill
    writer.close()
    assert spilled.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spilled.jsonl", "whole.jsonl"]


def test_sample_idx_map(tmp_path: Path) -> None:
    writer = session(tmp_path / "events.jsonl")
    writer.record(record("e" * 32, 0, 800, 900, t_done=900, content="y"), "q", phase="gpqa")
    writer.close()
    assert writer.sample_index_map == {"performance": {A: 7, B: 2, D: 5}, "gpqa": {"e" * 32: 0}}
    path = tmp_path / "sample_idx_map.json"
    write_sample_idx_map(path, writer.sample_index_map)
    assert path.read_text(encoding="utf-8") == (
        "{\n"
        '  "performance": {\n'
        f'    "{A}": 7,\n'
        f'    "{B}": 2,\n'
        f'    "{D}": 5\n'
        "  },\n"
        '  "gpqa": {\n'
        f'    "{"e" * 32}": 0\n'
        "  }\n"
        "}"
    )


def test_non_streaming_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventsWriter(path, streaming=False, worker_id=3) as writer:
        writer.record(
            record(A, 1, 10, 20, t_first=20, t_done=20, content="ans", reasoning="why",
                   finish_reason="stop"),
            ({"role": "user", "content": "q"},),
        )  # fmt: skip
    assert path.read_text(encoding="utf-8").splitlines() == [
        line(
            "sample.issued",
            10,
            A,
            '["PromptData",null,null,[{"role":"user","content":"q"}],null,null,null,null]',
        ),
        line(
            "sample.complete",
            20,
            A,
            '["TextModelOutput","ans","why",null]',
            ',"finish_reason":"stop","worker_id":3',
        ),
    ]


def test_recv_non_first_and_error_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventsWriter(path, streaming=True, recv_non_first=True) as writer:
        writer.session(SESSION_STARTED, 1)
        writer.record(
            record(A, 0, 10, 41, t_first=20, t_done=40, content="abc", content_after_first="bc",
                   chunk_times=(20, 30, 35)),
        )  # fmt: skip
        writer.error(ERROR_LOADGEN, "RuntimeError", "scheduler fell behind", timestamp_ns=50)
    assert [json.loads(t)["event_type"] for t in path.read_text().splitlines()] == [
        "session.started",
        "sample.issued",
        "sample.recv_first",
        "sample.recv_non_first",
        "sample.recv_non_first",
        "sample.complete",
        "error.loadgen",
    ]
    assert path.read_text().splitlines()[-1] == line(
        "error.loadgen", 50, "", '["ErrorData","RuntimeError","scheduler fell behind"]'
    )


def test_writer_misuse(tmp_path: Path) -> None:
    writer = EventsWriter(tmp_path / "events.jsonl", streaming=True)
    with pytest.raises(ValueError, match="not a session topic"):
        writer.session("session.paused")
    with pytest.raises(ValueError, match="not an error topic"):
        writer.error("sample.issued", "X")
    writer.session(SESSION_STARTED, 10)
    with pytest.raises(ValueError, match="time order"):
        writer.session(SESSION_ENDED, 5)
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        writer.record(record(A, 0, 1, 2))


# Output shapes (the reference accumulator's) -----------------------------------------------


def test_streamed_output_shapes() -> None:
    def out(**fields: Any) -> TextModelOutput:
        return text_model_output(summary(**fields), streaming=True)

    assert out(content="") == TextModelOutput(output=())
    assert out(content="one") == TextModelOutput(output=("one",))
    assert out(content="one two", content_after_first=" two") == TextModelOutput(
        output=("one", " two")
    )
    # reasoning first: reasoning = [first, rest], output = the whole content
    assert out(
        content="answer",
        content_after_first="answer",
        reasoning="think",
        reasoning_after_first="nk",
    ) == TextModelOutput(output="answer", reasoning=("thi", "nk"))
    # content first, reasoning later: the reasoning stays in the TPOT text
    assert out(
        content="ab", content_after_first="b", reasoning="r", reasoning_after_first="r"
    ) == TextModelOutput(output="ab", reasoning=("", "r"))


def test_streamed_tool_calls_split_at_the_first_token() -> None:
    calls = (
        ToolCall(index=0, id="c0", type="function", name="get", arguments='{"a":1}'),
        ToolCall(index=1, id="c1", type="function", name="put", arguments="{}"),
    )
    after = (
        ToolCall(index=0, id="c0", type="function", name="", arguments='"a":1}'),
        ToolCall(index=1, id="c1", type="function", name="put", arguments="{}"),
    )
    result = text_model_output(
        summary(tool_calls=calls, tool_calls_after_first=after), streaming=True
    )
    get_first = {"index": 0, "id": "c0", "type": "function"}
    get_first["function"] = {"name": "get", "arguments": "{"}
    put = {
        "index": 1,
        "id": "c1",
        "type": "function",
        "function": {"name": "put", "arguments": "{}"},
    }
    assert result == TextModelOutput(
        output=(),
        tool_calls=((get_first,), ({"index": 0, "function": {"arguments": '"a":1}'}}, put)),
    )


def test_non_streamed_tool_calls() -> None:
    calls = (ToolCall(index=0, id="c0", type="function", name="get", arguments="{}"),)
    result = text_model_output(summary(tool_calls=calls), streaming=False)
    call = {"id": "c0", "type": "function", "function": {"name": "get", "arguments": "{}"}}
    assert result == TextModelOutput(output="", tool_calls=(call,))


def test_lines_reach_the_file_as_they_are_made(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventsWriter(path, streaming=False)
    writer.session(SESSION_STARTED, 10)
    writer.session(SESSION_START_PERFORMANCE_TRACKING, 20)
    writer.record(record(A, 0, 30, 40), "p")
    assert path.read_bytes() == b""  # nothing before a flush
    writer.flush()
    live = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["event_type"] for e in live] == [
        "session.started",
        "session.start_performance_tracking",
        "sample.issued",
        "sample.complete",
    ]
    # Completion order in the live file; the final file orders by t_issue.
    writer.session(SESSION_STOP_PERFORMANCE_TRACKING, 50)
    writer.record(record(B, 1, 25, 60), "q")  # issued inside the window
    writer.flush()
    live_types = [json.loads(line)["event_type"] for line in path.read_text().splitlines()]
    stop = "session.stop_performance_tracking"
    assert live_types[4:] == [stop, "sample.issued", "sample.complete"]
    writer.session(SESSION_ENDED, 70)
    writer.close()
    final = [(e.event_type, e.sample_uuid) for e in read_events(path)]
    assert final.index(("sample.issued", B)) < final.index((stop, ""))
    assert not list(tmp_path.glob("events.jsonl.*"))  # no side or final files left


def test_a_run_killed_mid_way_leaves_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventsWriter(path, streaming=False)
    writer.session(SESSION_STARTED, 10)
    for i in range(100):
        writer.record(record(f"{i:032x}", i, 100 + i, 200 + i), "p" * 300)
    writer.flush()
    # (no close: as after a kill) every line is whole and parses
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert len(lines) - 1 == 1 + 2 * 100
    writer.close()


class _ShortWrites:
    """A file whose every write takes at most ``most`` bytes (as an
    unbuffered write may, interrupted or on a full disk); it fails once when
    ``fail_at`` bytes are in."""

    def __init__(self, file: Any, most: int, fail_at: int | None = None) -> None:
        self.file, self.most, self.fail_at = file, most, fail_at
        self.written = 0

    def write(self, data: Any) -> int:
        if self.fail_at is not None and self.written >= self.fail_at:
            self.fail_at = None
            raise OSError(28, "No space left on device")
        n = self.file.write(bytes(data[: self.most]))
        self.written += n
        return int(n)

    def close(self) -> None:
        self.file.close()


def test_a_flush_writes_every_byte_even_in_short_writes(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventsWriter(path, streaming=False)
    writer._live = _ShortWrites(writer._live, most=7)
    writer.session(SESSION_STARTED, 10)
    for i in range(20):
        writer.record(record(f"{i:032x}", i, 100 + i, 200 + i), "p" * 50)
    writer.flush()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == 1 + 2 * 20
    assert all(json.loads(line) for line in lines[:-1])
    # A write that fails: it raises nothing, the refusal is kept, and what it
    # did not take goes first in the next flush.
    writer._live = _ShortWrites(writer._live.file, most=5, fail_at=12)
    writer.record(record("f" * 32, 99, 300, 400), "q")
    writer.flush()
    assert writer.write_error == f"{path}: No space left on device"
    writer.flush()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert len(lines) - 1 == 1 + 2 * 21
    writer.close()


def test_lines_past_a_mib_are_written_before_the_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the second's flushes a fast run made megabytes of lines, held
    twice while the flush joined them (issue 23): past LIVE_FLUSH_BYTES they
    are written at once, whole; a disk that refuses them keeps them for the
    flush, which says so."""
    from mlpe_fast.artifacts import events

    monkeypatch.setattr(events, "LIVE_FLUSH_BYTES", 2_000)
    path = tmp_path / "events.jsonl"
    writer = EventsWriter(path, streaming=False)
    writer.session(SESSION_STARTED, 10)
    for i in range(40):
        writer.record(record(f"{i:032x}", i, 100 + i, 200 + i), "p" * 300)
        assert writer._live_waiting <= 2_000 + 2_000  # one query's lines past the bound
    written = path.read_bytes()
    assert len(written) > 40 * 300 * 3 // 4 and written.endswith(b"\n")  # without a flush
    assert all(json.loads(line) for line in written.split(b"\n")[:-1])
    writer._live = _ShortWrites(writer._live, most=10**9, fail_at=0)
    writer.record(record("e" * 32, 98, 300, 400), "p" * 300)  # refused: kept, no raise
    writer.record(record("f" * 32, 99, 301, 401), "p" * 300)
    assert writer.write_error == f"{path}: No space left on device"
    writer._live = writer._live.file
    writer.flush()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == 1 + 2 * 42
    writer.close()
    assert writer.unwritten_bytes == 0  # all written in the end


class _FullDisk:
    """A file on a disk that fills after ``room`` bytes: the write that
    reaches it takes what fits, every later one is refused."""

    def __init__(self, file: Any, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data: Any) -> int:
        if self.room == 0:
            raise OSError(28, "No space left on device")
        n = self.file.write(bytes(data[: self.room]))
        self.room -= n
        return int(n)

    def close(self) -> None:
        self.file.close()


@pytest.mark.parametrize("late", [False, True])
def test_a_full_disk_ends_the_log_where_it_filled_without_raising(
    tmp_path: Path, late: bool
) -> None:
    # The flush task and the point call flush and record on the event loop:
    # an OSError there ended the task silently, then close raised it as a
    # traceback and no result was written (issue 23's note).
    path = tmp_path / "events.jsonl"
    writer = EventsWriter(path, streaming=False)
    writer.session(SESSION_STARTED, 10)
    writer.session(SESSION_START_PERFORMANCE_TRACKING, 20)
    for i in range(10):
        writer.record(record(f"{i:032x}", i, 100 + i, 200 + i), "p" * 50)
    writer.flush()
    whole = path.stat().st_size
    writer._live = _FullDisk(writer._live, room=300)
    for i in range(10, 30):
        writer.record(record(f"{i:032x}", i, 100 + i, 200 + i), "p" * 50)
        writer.flush()
    writer.session(SESSION_STOP_PERFORMANCE_TRACKING, 500)
    if late:  # issued before the stop line: close would move it back
        writer.record(record("e" * 32, 99, 400, 600), "p")
    writer.session(SESSION_ENDED, 700)
    writer.close()
    assert writer.write_error == f"{path}: No space left on device"
    assert path.stat().st_size == whole + 300  # the file as far as the disk took it
    lines = path.read_bytes().split(b"\n")
    assert all(json.loads(line) for line in lines[:-1])  # whole lines, then one cut
    assert writer.unwritten_bytes > 20 * 100
    assert not list(tmp_path.glob("events.jsonl.*"))  # no final file left behind


def test_in_order_lines_are_written_once(tmp_path: Path) -> None:
    # Every record issued after the last session line is where the final file
    # wants it: the live file is kept as it is, no side file even past
    # spill_bytes, not rewritten (issue 23: lines were written three times).
    path = tmp_path / "events.jsonl"
    writer = EventsWriter(path, streaming=True, spill_bytes=1)
    writer.session(SESSION_STARTED, 10)
    writer.session(SESSION_START_PERFORMANCE_TRACKING, 20)
    for i in range(50):
        writer.record(record(f"{i:032x}", i, 30 + i, 100 + i, t_first=90, t_done=99), "p")
    writer.session(SESSION_STOP_PERFORMANCE_TRACKING, 200)
    writer.session(SESSION_ENDED, 210)
    inode = path.stat().st_ino
    assert not list(tmp_path.glob("events.jsonl.*"))
    writer.close()
    assert path.stat().st_ino == inode  # the live file itself
    kept = tmp_path / "kept.jsonl"
    reference = EventsWriter(kept, streaming=True, live=False)
    reference.session(SESSION_STARTED, 10)
    reference.session(SESSION_START_PERFORMANCE_TRACKING, 20)
    for i in range(50):
        reference.record(record(f"{i:032x}", i, 30 + i, 100 + i, t_first=90, t_done=99), "p")
    reference.session(SESSION_STOP_PERFORMANCE_TRACKING, 200)
    reference.session(SESSION_ENDED, 210)
    reference.close()
    assert path.read_bytes() == kept.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl", "kept.jsonl"]


@pytest.mark.parametrize("seed", range(12))
def test_late_records_are_moved_back_as_when_every_line_is_kept(tmp_path: Path, seed: int) -> None:
    # The live file rebuilt with its late records moved back must equal the
    # file written from every kept line (live=False), spilled or not, with
    # late records at the start and end of segments, several per segment.
    rng = random.Random(seed)
    spill = rng.choice([1, 300, 64 << 20])
    writers = [
        EventsWriter(tmp_path / "live.jsonl", streaming=True, spill_bytes=spill),
        EventsWriter(tmp_path / "kept.jsonl", streaming=True, live=False),
    ]
    topics = [SESSION_STARTED, SESSION_START_PERFORMANCE_TRACKING,
              SESSION_STOP_PERFORMANCE_TRACKING, SESSION_ENDED]  # fmt: skip
    now, sessions = 100, 0
    for i in range(rng.randint(5, 60)):
        now += rng.randint(1, 20)
        if sessions < len(topics) and rng.random() < 0.1:
            for w in writers:
                w.session(topics[sessions], now)
            sessions += 1
            continue
        issued = now - rng.choice([0, 0, 1, rng.randint(0, now - 1)])
        done = max(issued, now)
        error = rng.random() < 0.05
        flush = rng.random() < 0.3
        for w in writers:
            if error:  # placed by its stamp, as a record by its t_issue
                w.error(ERROR_LOADGEN, "RuntimeError", "fell behind", timestamp_ns=issued)
            w.record(record(f"{i:032x}", i, issued, done, t_first=done, t_done=done,
                            content="x" * i))  # fmt: skip
            if flush:
                w.flush()
    for w in writers:
        w.close()
    assert (tmp_path / "live.jsonl").read_bytes() == (tmp_path / "kept.jsonl").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsonl", "live.jsonl"]
