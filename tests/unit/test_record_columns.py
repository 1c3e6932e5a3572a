"""A point's records as compact columns (``engine/record_columns.py``, issue
23): every record built back equal to the record without its texts, the
side tables bounded, and the columns a few hundred bytes a record."""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc
from array import array
from pathlib import Path

import msgspec
import numpy as np
import pytest

from mlpe_fast.config.slo import Slo
from mlpe_fast.engine import record_columns
from mlpe_fast.engine.audit import audit_records
from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.engine.record_columns import (
    CHUNK_ERRORS_KEPT,
    COLUMNS,
    DROPPED_MESSAGE,
    MESSAGES_PER_CLASS,
    NONE,
    RecordColumns,
    as_columns,
)
from mlpe_fast.engine.replicas import endpoint_shares
from mlpe_fast.engine.spill import SpilledArray
from mlpe_fast.metrics.answers import check_answers
from mlpe_fast.metrics.goodput import goodput_of
from mlpe_fast.metrics.latency_detail import latency_detail
from mlpe_fast.metrics.stats import point_stats
from mlpe_fast.metrics.tokens import TokenCounts
from mlpe_fast.metrics.usage_check import usage_cross_check
from mlpe_fast.point import figures
from mlpe_fast.wire.events import NO_RESPONSE, ChunkError, TokenGaps, ToolCall
from mlpe_fast.wire.gaps import BUCKETS


def _record(i: int, **changes: object) -> RequestRecord:
    """A streamed answer with every field set, texts included; ``changes``
    replace the record's fields and, under ``response_*``, the response's."""
    response = msgspec.structs.replace(
        NO_RESPONSE,
        status=200,
        t_head=1_000 + i,
        t_first=2_000 + i,
        t_done=9_000 + i,
        content="hello world" * 3,
        reasoning="think",
        tool_calls=(ToolCall(0, "id", "function", "f", "{}"),),
        content_after_first="world",
        reasoning_after_first="k",
        tool_calls_after_first=(ToolCall(0, "id", "function", "", "}"),),
        finish_reason="stop",
        usage={"prompt_tokens": 7, "completion_tokens": 5 + i, "total_tokens": 12 + i},
        events=6,
        content_events=5,
        events_after_done=1,
        done=True,
        complete=True,
        keep_alive=True,
        t_first_content=2_500 + i,
        t_second=3_000 + i,
        gaps=TokenGaps(4, 1, 7_000, 0, 3_000, bytes(range(16))),
    )
    fields = {k: v for k, v in changes.items() if not k.startswith("response_")}
    response = msgspec.structs.replace(
        response, **{k[9:]: v for k, v in changes.items() if k.startswith("response_")}
    )
    record = RequestRecord(
        sample_index=i,
        sample_id=f"{'ab' * 8}{i:016x}",
        t_sched=100 + i,
        t_issue=500 + i,
        t_end=9_500 + i,
        response=response,
        retries=1,
        connect_ns=40,
        t_first_read=2_100 + i,
        t_done_read=9_100 + i,
        kernel_stamps=True,
        endpoint=i % 3,
    )
    return msgspec.structs.replace(record, **fields)


#: The changes that make a record of every shape a point keeps.
SHAPES: list[dict[str, object]] = [
    {},
    {"sample_id": "not-a-hex-id", "kernel_stamps": False, "t_first_read": None},
    {"sample_id": "AB" * 16},  # upper-case hex: kept as itself
    {
        "error_class": "HTTPStatusError",
        "error_message": "HTTP 400: too long",
        "response_status": 400,
        "response_error_code": 7,
        "response_error_message": "status 400",
        "response_t_first": None,
        "response_t_done": None,
        "response_complete": False,
        "response_gaps": None,
        "response_usage": None,
        "response_finish_reason": None,
    },
    {
        "response_usage": {"prompt_tokens": 3, "details": {"reasoning_tokens": 2}, "x": None},
        "response_chunk_errors": 2,
        "response_first_chunk_error": ChunkError(402, "$.choices", b"{}", 2_200),
        "response_chunk_times": (1, 2, 3),
        "response_finish_reason": "length",
    },
    {"response_usage": {}, "response_gaps": TokenGaps(0, 0, 0, 0, 0, b"")},
    {"response_usage": {"completion_tokens": True, "prompt_tokens": 2**70}},
    {"response_events": 0, "response_t_second": None, "response_t_first_content": None},
    # flat integers, one past int64 after one that fits; int64's extremes
    {"response_usage": {"prompt_tokens": 5, "completion_tokens": 2**63}},
    {"response_usage": {"prompt_tokens": -(2**63), "completion_tokens": 2**63 - 1}},
]


def _variety() -> list[RequestRecord]:
    """Records of every shape a point keeps."""
    return [_record(i, **shape) for i, shape in enumerate(SHAPES)]


def _random_counts(rng: np.random.Generator, n: int) -> TokenCounts:
    """Token counts of ``n`` records, some of them not counted (-1)."""
    return TokenCounts(
        osl=rng.integers(-1, 40, n),
        tpot_tokens=rng.integers(-1, 40, n),
        isl=rng.integers(-1, 90, n),
        complete=False,
        pending=0,
        seconds=0.0,
    )


def _many(n: int) -> list[RequestRecord]:
    """``n`` records of every shape in turn, each with its own stamps and
    counts, and gap histograms of different lengths."""
    records = []
    for i in range(n):
        shape = dict(SHAPES[i % len(SHAPES)])
        if "response_gaps" not in shape:  # (index, count) pairs, ascending
            pairs = [(3 * k + i % 7, 1 + (i + k) % 4) for k in range(i % 5)]
            buckets = b"".join(a.to_bytes(4, "little") + n.to_bytes(4, "little") for a, n in pairs)
            count = sum(n for _, n in pairs)
            shape["response_gaps"] = TokenGaps(count, 0, 7 * i, i, 9 * i, buckets)
        if i % len(SHAPES) == 4 and i // len(SHAPES) % 2:  # a first chunk error past the bound
            shape.pop("response_first_chunk_error")
        records.append(_record(i, **shape))
    return records


def test_every_record_comes_back_as_it_was_without_its_texts() -> None:
    records = _variety()
    columns = RecordColumns(records)
    assert len(columns) == len(records)
    for i, record in enumerate(records):
        assert columns[i] == record.without_texts(), i
        assert columns[i - len(records)] == columns[i]
    assert list(columns) == [r.without_texts() for r in records]
    assert columns[1:3] == [r.without_texts() for r in records[1:3]]
    with pytest.raises(IndexError):
        columns[len(records)]


@pytest.mark.parametrize("memory_rows", [3, 2**62])
def test_a_read_between_appends_sees_every_row_so_far(memory_rows: int) -> None:
    # rows wait packed in a buffer until a block of them moves to the
    # columns: every read (a record, a column, a block) must see them
    records = _many(40)
    columns = RecordColumns(memory_rows=memory_rows)
    for i, record in enumerate(records):
        columns.append(record)
        assert columns[i] == record.without_texts(), i
        assert columns.column("t_issue").tolist() == [r.t_issue for r in records[: i + 1]]
        assert columns.sample_id(i) == record.sample_id
        blocks = list(columns.blocks(7))
        assert sum(len(block) for block in blocks) == i + 1
        assert blocks[-1].column("events")[-1] == record.response.events
    assert list(columns) == [r.without_texts() for r in records]


def test_where_a_first_token_stamp_came_from_is_kept() -> None:
    # segment stamps (the capture's verdict) and, over HTTP/2, the bytes the
    # first token's read carried past its frame: the audit reads both
    record = _record(0, segment_stamp=1, first_read_later_bytes=4_096)
    columns = RecordColumns([record, _record(1)])
    assert columns[0] == record.without_texts()
    assert columns.column("segment_stamp").tolist() == [1, 0]
    assert columns.column("first_read_later_bytes").tolist() == [4_096, 0]


def test_columns_hold_the_stamps_codes_and_official_counts() -> None:
    records = _variety()
    columns = RecordColumns(records)
    t_first = columns.column("t_first")
    assert t_first[3] == NONE and t_first[0] == 2_000
    assert columns.ok.tolist() == [r.ok for r in records]
    assert columns.t_finish().tolist() == [
        r.t_end if r.response.t_done is None else r.response.t_done for r in records
    ]
    assert columns.flag("kernel_stamps").tolist() == [r.kernel_stamps for r in records]
    assert columns.flag("gaps").tolist() == [r.response.gaps is not None for r in records]
    # the official counts: ints only (not a bool, nor one past int64)
    completion = columns.column("usage_completion_tokens").tolist()
    assert completion == [5, 6, 7, NONE, NONE, NONE, NONE, 12, NONE, 2**63 - 1]
    assert columns.column("usage_prompt_tokens").tolist()[4:7] == [3, NONE, NONE]
    codes, names = columns.codes("finish_reason")
    assert [None if c < 0 else names[c] for c in codes] == [
        r.response.finish_reason for r in records
    ]
    assert columns.gaps_buckets(np.array([True] + [False] * 9)) == bytes(range(16))


def test_an_error_class_keeps_its_first_messages_and_counts_the_rest() -> None:
    records = [
        _record(i, error_class="IncompleteResponse", error_message=f"reset, request {i}")
        for i in range(MESSAGES_PER_CLASS + 10)
    ]
    records.append(_record(99, error_class="IncompleteResponse", error_message="reset, request 0"))
    records.append(_record(98, error_class="ConnectError", error_message="refused"))
    columns = RecordColumns(records)
    messages = [columns[i].error_message for i in range(len(records))]
    assert messages[:MESSAGES_PER_CLASS] == [f"reset, request {i}" for i in range(16)]
    assert messages[MESSAGES_PER_CLASS:-2] == [DROPPED_MESSAGE] * 10
    assert messages[-2:] == ["reset, request 0", "refused"]  # known, and another class
    assert columns.messages_dropped == 10
    stats = point_stats(columns)
    assert stats.errors == {"IncompleteResponse": MESSAGES_PER_CLASS + 11, "ConnectError": 1}
    assert stats.error_examples == {
        "IncompleteResponse": "reset, request 0",
        "ConnectError": "refused",
    }


def test_first_chunk_errors_are_kept_up_to_their_bound() -> None:
    error = ChunkError(402, "$.choices", b"{}", 2_200)
    columns = RecordColumns(
        _record(i, response_first_chunk_error=error) for i in range(CHUNK_ERRORS_KEPT + 5)
    )
    kept = [columns[i].response.first_chunk_error for i in range(len(columns))]
    assert kept == [error] * CHUNK_ERRORS_KEPT + [None] * 5


def test_whole_records_when_asked() -> None:
    records = _variety()
    columns = RecordColumns(records, keep_whole=True)
    assert list(columns) == records and columns[3] is records[3]
    window = columns.subset([i % 2 == 0 for i in range(len(records))])
    assert list(window) == records[::2]
    assert as_columns(columns) is columns and list(as_columns(records)) == list(
        RecordColumns(records)
    )


def test_statistics_from_the_columns_are_the_records_own() -> None:
    """TTFT, latency, counts and finish reasons, each from the records'
    own properties (``RequestRecord.ttft_ns``, ``latency_ns``)."""
    records = _variety()
    stats = point_stats(RecordColumns(records))
    ok = [r for r in records if r.ok]
    assert stats.raw.series["ttft_ns"].tolist() == [
        r.ttft_ns for r in ok if r.response.events and r.ttft_ns is not None
    ]
    assert stats.raw.series["sample_latency_ns"].tolist() == [r.latency_ns for r in ok]
    assert (stats.completed, stats.failed, stats.errors) == (9, 1, {"HTTPStatusError": 1})
    assert stats.error_examples == {"HTTPStatusError": "HTTP 400: too long"}
    assert stats.finish_reasons == {"stop": 8, "length": 1}
    assert stats.chunk_errors == 2
    assert stats.window_end_ns == max(
        r.t_end if r.response.t_done is None else r.response.t_done for r in records
    )


def test_a_record_costs_a_few_hundred_bytes() -> None:
    """tracemalloc's count of what 20,000 rows hold (a record as objects,
    texts dropped, held ~1.3 KB: ``docs/performance.md``)."""
    records = [_record(i).without_texts() for i in range(20_000)]
    gc.collect()
    tracemalloc.start()
    try:
        columns = RecordColumns(records)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(columns) == 20_000
    assert held / 20_000 < 320, held / 20_000


# -- past the rows kept in memory: the spill file (issue 23)


@pytest.mark.parametrize("rows", [1, 3, 8, 64])
def test_rows_across_the_spill_boundary_come_back_as_they_were(rows: int, tmp_path: Path) -> None:
    records = _many(50)
    columns = RecordColumns(records, memory_rows=rows, spill_dir=str(tmp_path))
    assert columns.spilled_rows == 50 // rows * rows and columns.spill_error is None
    expected = [r.without_texts() for r in records]
    assert len(columns) == 50
    for i in range(50):
        assert columns[i] == expected[i], i
        assert columns[i - 50] == expected[i]
        assert columns.sample_id(i) == records[i].sample_id
        assert columns.error_message(i) == records[i].error_message
    assert list(columns) == expected
    for start, stop in [(0, 50), (rows - 1, rows + 5), (45, 50), (7, 7), (49, 60)]:
        assert columns[start:stop] == expected[start:stop], (start, stop)
    assert columns[::3] == expected[::3] and columns[-4:] == expected[-4:]
    with pytest.raises(IndexError):
        columns[50]


def test_a_spilled_store_gives_the_columns_and_figures_of_one_kept_in_memory() -> None:
    records = _many(300)
    kept = RecordColumns(records)  # fewer rows than MEMORY_ROWS: never spilled
    spilled = RecordColumns(records, memory_rows=16)
    assert (kept.spilled_rows, spilled.spilled_rows) == (0, 288)
    for name in COLUMNS:
        assert spilled.column(name).dtype == np.int64
        assert np.array_equal(spilled.column(name), kept.column(name)), name
    for name in ("done", "complete", "keep_alive", "kernel_stamps", "gaps"):
        assert np.array_equal(spilled.flag(name), kept.flag(name)), name
    assert np.array_equal(spilled.ok, kept.ok)
    assert np.array_equal(spilled.t_finish(), kept.t_finish())
    rng = np.random.default_rng(1)
    for mask in (np.ones(300, np.bool_), rng.random(300) < 0.3, np.arange(300) >= 290):
        assert spilled.gaps_buckets(mask) == kept.gaps_buckets(mask)
        pairs = np.frombuffer(kept.gaps_buckets(mask), "<u4").reshape(-1, 2)
        expected = np.zeros(BUCKETS, np.int64)
        np.add.at(expected, pairs[:, 0], pairs[:, 1])
        assert np.array_equal(spilled.gaps_histogram(mask), expected)
        assert expected.sum() > 0
    # the figures, exact percentiles included, from either
    figures = [point_stats(c) for c in (kept, spilled)]
    for name, series in figures[0].raw.series.items():
        assert np.array_equal(figures[1].raw.series[name], series), name
    assert figures[0].ttft == figures[1].ttft and figures[0].latency == figures[1].latency
    assert figures[0].errors == figures[1].errors
    assert figures[0].error_examples == figures[1].error_examples
    assert figures[0].finish_reasons == figures[1].finish_reasons
    detail = [latency_detail(c, figures[0].raw.tracked_ok) for c in (kept, spilled)]
    assert detail[0] == detail[1] and detail[0].itl is not None


@pytest.mark.parametrize("rows", [1, 7, 64, 299, 300, 10_000])
def test_figures_read_a_block_at_a_time_are_those_of_whole_columns(
    rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The self-audit and the latency detail read BLOCK_ROWS rows at a time
    (issue 23); any block size gives the figures whole columns give."""
    records = _many(300)
    columns = RecordColumns(records, memory_rows=16)
    tracked = point_stats(columns).raw.tracked_ok
    whole = (audit_records(columns, array("q"), 0, 0, 0), latency_detail(columns, tracked))
    blocks = list(columns.blocks(rows))
    assert [(b.start, b.stop) for b in blocks][:2] == [
        (0, min(rows, 300)),
        *([(rows, min(2 * rows, 300))] if rows < 300 else []),
    ]
    assert sum(len(b) for b in blocks) == 300
    for name in ("t_first", "events", "segment_stamp"):
        assert np.array_equal(
            np.concatenate([b.column(name) for b in blocks]), columns.column(name)
        )
    assert np.array_equal(np.concatenate([b.flag("gaps") for b in blocks]), columns.flag("gaps"))
    assert np.array_equal(np.concatenate([b.ok for b in blocks]), columns.ok)
    rng = np.random.default_rng(rows)
    counts = _random_counts(rng, 300)
    start = int(np.sort(columns.column("t_issue"))[40])  # some records before tracking
    stats = [point_stats(columns, counts), point_stats(columns, counts, tracking_start_ns=start)]
    urls = [f"http://replica-{i}" for i in range(int(columns.column("endpoint").max()) + 1)]
    checks = (
        check_answers(columns, counts, 30),
        usage_cross_check(columns, counts),
        endpoint_shares(columns, urls),
    )
    monkeypatch.setattr(record_columns, "BLOCK_ROWS", rows)
    assert (
        check_answers(columns, counts, 30),
        usage_cross_check(columns, counts),
        endpoint_shares(columns, urls),
    ) == checks
    assert checks[0].longer_than_asked and checks[1]["responses"]
    by_blocks = (audit_records(columns, array("q"), 0, 0, 0), latency_detail(columns, tracked))
    assert by_blocks == whole
    assert stats[0].ttft is not None and stats[0].latency is not None
    slo = Slo(ttft=stats[0].ttft.p50 / 1e6, e2el=stats[0].latency.p90 / 1e6)
    good = goodput_of(stats[0], counts.osl, slo)
    assert good.good and good.met["ttft"] < stats[0].completed
    for before, start_ns in zip(stats, (None, start), strict=True):
        after = point_stats(columns, counts, tracking_start_ns=start_ns)
        # past BLOCK_ROWS records the per-record samples are in spill files
        assert isinstance(after.raw.tpot_per_record, SpilledArray) == (rows < 300)
        if start_ns is None:
            assert goodput_of(after, counts.osl, slo) == good
        for field in ("ttft", "tpot", "latency", "osl", "errors", "error_examples"):
            assert getattr(after, field) == getattr(before, field), field
        assert after.finish_reasons == before.finish_reasons
        assert after.raw.counters == before.raw.counters
        assert (after.window_start_ns, after.window_end_ns) == (
            before.window_start_ns,
            before.window_end_ns,
        )
        for name, series in before.raw.series.items():
            assert np.array_equal(after.raw.series[name], series), name
    assert stats[0].errors and stats[0].tpot is not None
    assert stats[1].issued < stats[0].issued
    assert whole[0].first_reads > 0 and whole[1].itl is not None and whole[1].ttst is not None


def test_a_subset_of_spilled_rows_is_those_rows() -> None:
    records = _many(100)
    mask = [i % 3 == 0 or 40 <= i < 60 for i in range(100)]
    for keep_whole in (False, True):
        columns = RecordColumns(records, memory_rows=8, keep_whole=keep_whole)
        window = columns.subset(mask)
        assert list(window) == [
            r if keep_whole else r.without_texts() for r, m in zip(records, mask, strict=True) if m
        ]
        assert window.spilled_rows == len(window) // 8 * 8


def _spill_files(directory: Path) -> list[str]:
    """This process's open files in ``directory`` (Linux: /proc/self/fd)."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed since
            continue
    return [link for link in links if link.startswith(str(directory) + "/")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd: Linux")
def test_the_spill_file_has_no_name_in_its_directory_and_goes_with_its_store(
    tmp_path: Path,
) -> None:
    few = RecordColumns(_many(7), memory_rows=8, spill_dir=str(tmp_path))
    assert few.spilled_rows == 0 and _spill_files(tmp_path) == []  # no file below the budget
    columns = RecordColumns(_many(40), memory_rows=8, spill_dir=str(tmp_path))
    files = _spill_files(tmp_path)
    # one for the fixed-width rows, one for the usage values, one for the gap
    # buckets, one for the packed usage: unlinked, so no name in the listing
    assert len(files) == 4 and all(f.endswith("(deleted)") for f in files), files
    assert os.listdir(tmp_path) == []
    columns.close()
    assert _spill_files(tmp_path) == []
    with pytest.raises(ValueError, match="closed"):
        columns[0]
    with pytest.raises(ValueError, match="closed"):
        columns.column("t_issue")
    assert len(columns) == 40
    dropped = RecordColumns(_many(40), memory_rows=8, spill_dir=str(tmp_path))
    assert len(_spill_files(tmp_path)) == 4
    del dropped
    gc.collect()
    assert _spill_files(tmp_path) == []


def test_rows_stay_in_memory_when_the_spill_file_cannot_be_made(tmp_path: Path) -> None:
    records = _many(40)
    columns = RecordColumns(records, memory_rows=8, spill_dir=str(tmp_path / "missing"))
    assert columns.spill_error is not None and columns.spilled_rows == 0
    assert columns.spill_error.startswith(f"records kept in memory: cannot write to {tmp_path}")
    assert list(columns) == [r.without_texts() for r in records]
    assert np.array_equal(columns.column("t_issue"), RecordColumns(records).column("t_issue"))


def test_memory_held_past_the_rows_kept_does_not_grow_with_rows() -> None:
    """tracemalloc's count of what 65,536 rows more hold, once 16,384 are
    in: the tails' few KB, nothing per row (0.25 B a row would fail it; the
    rare maps left out: ids that are not hex, odd usage, chunk_times)."""
    shapes = [dict(SHAPES[k]) for k in (0, 3, 4, 5, 7)]
    del shapes[2]["response_chunk_times"]
    pool = [_record(i, **shapes[i % len(shapes)]).without_texts() for i in range(40)]
    rows = 256
    columns = RecordColumns(memory_rows=rows)
    for i in range(64 * rows):  # whole blocks: the fixed-width tails empty
        columns.append(pool[i % 40])
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(64 * rows, 320 * rows):
            columns.append(pool[i % 40])
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(columns) == columns.spilled_rows == 320 * rows
    # each variable-width store keeps under 16 B a row of the budget: 4 KiB
    assert grown < 16 * 1024, grown
    for i in (0, 12_345, 70_001, 320 * rows - 1):
        assert columns[i] == pool[i % 40], i


def test_the_steady_state_of_spilled_issue_order_columns_is_that_of_arrays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past BLOCK_ROWS queries the steady state's columns are put in issue
    order by merging sorted blocks in spill files (issue 23); the analysis
    is the one numpy arrays give, for any block size and merge window."""
    from mlpe_fast.engine import spill_sort

    rng = np.random.default_rng(3)
    made_in_order = _many(300)
    records = [made_in_order[int(i)] for i in rng.permutation(300)]  # not in issue order
    columns = RecordColumns(records, memory_rows=16)
    counts = _random_counts(rng, 300)
    stats = point_stats(columns, counts)
    whole = figures.steady_state(columns, stats, counts, dataset_size=40, concurrency=4)
    made: list[SpilledArray] = []

    class Spy(SpilledArray):
        def __init__(self, typecode: str, directory: str | None = None) -> None:
            super().__init__(typecode, directory)
            made.append(self)

    monkeypatch.setattr(spill_sort, "SpilledArray", Spy)
    monkeypatch.setattr(spill_sort, "MIN_WINDOW", 1)
    for rows, merge_rows in ((1, 300), (7, 20), (64, 1), (299, 65_536)):
        monkeypatch.setattr(record_columns, "BLOCK_ROWS", rows)
        monkeypatch.setattr(spill_sort, "MERGE_ROWS", merge_rows)
        made.clear()
        assert figures.steady_state(columns, stats, counts, 40, 4) == whole, rows
        # five columns: their sorted runs, then the merged columns
        assert len(made) == 10 and all(s.spilled == 300 for s in made[5:]), rows
    assert whole.figures is not None and len(whole.super_passes) > 2  # a real analysis


def test_a_point_s_figures_past_gather_are_read_a_block_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past order_stats.GATHER samples a point's series and distributions
    are read from the per-record arrays a block at a time (issue 23): the
    final snapshot's series bit for bit, the distributions' counts,
    extremes and percentiles exactly, their means and deviations to the
    last bits."""
    from mlpe_fast.artifacts.summary import final_snapshot
    from mlpe_fast.metrics import order_stats

    columns = RecordColumns(_many(300), memory_rows=16)
    rng = np.random.default_rng(9)
    counts = _random_counts(rng, 300)

    def figures() -> tuple[object, dict[str, object]]:
        stats = point_stats(columns, counts)
        snapshot = final_snapshot(
            stats.raw.counters,
            stats.raw.series,
            state="complete",
            n_pending_tasks=0,
            timestamp_ns=0,
        )
        return stats, snapshot

    whole, whole_snapshot = figures()
    monkeypatch.setattr(order_stats, "GATHER", 20)
    monkeypatch.setattr(record_columns, "BLOCK_ROWS", 37)
    streamed, streamed_snapshot = figures()
    assert isinstance(streamed.raw.series["ttft_ns"], order_stats.Sample)  # type: ignore[attr-defined]
    assert streamed_snapshot == whole_snapshot
    for field in ("ttft", "tpot", "latency", "osl"):
        before, after = getattr(whole, field), getattr(streamed, field)
        assert before is not None and before.count > 20, field
        assert (after.count, after.min, after.max, after.percentiles) == (
            before.count,
            before.min,
            before.max,
            before.percentiles,
        ), field
        for moment in ("total", "mean", "std"):
            assert getattr(after, moment) == pytest.approx(getattr(before, moment), rel=1e-12)
    for field in ("osl_total", "tokens_complete", "completed", "system_tps", "tps_per_user"):
        assert getattr(streamed, field) == getattr(whole, field), field


def test_a_spilled_block_is_read_back_and_kept_in_memory_when_the_disk_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SpilledArray.spill_block`` (the figures' spilled copies, issue 23):
    each block goes to the file and reads back as it was; a file that cannot
    be written keeps the block in memory, read back the same."""
    import errno
    import tempfile

    floats = SpilledArray("d")
    for lo in range(0, 100, 30):
        floats.spill_block(np.arange(lo, min(100, lo + 30), dtype=np.float64) / 4)
    assert floats.spilled == 100 and not floats.tail
    assert np.array_equal(floats[10:95], np.arange(10, 95) / 4)

    def full(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "no room")

    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    ints = SpilledArray("q")
    ints.spill_block(np.arange(5))
    assert ints.spilled == 0 and list(ints.tail) == [0, 1, 2, 3, 4]
    assert np.array_equal(ints[1:4], [1, 2, 3])
