"""What spilling a point's records to disk costs (issue 23): the same
200,000 records kept as columns, side by side in one run,

- ``in memory``: every row in memory (``memory_rows`` past the run's
  length: the store as it was before the spill);
- ``spilled``: the default (``MEMORY_ROWS`` = 8,192 rows in memory, the
  rest in the spill file in ``TMPDIR``).

Two costs, each per row: appending (what the event loop pays as each
record completes, the writes of the spill file included) and the point's
figures read back (``point_stats`` and ``latency_detail``: every column
they read, from the file for the spilled store).  ``test_ratios`` prints
spilled / in memory.

``test_row_moves``: how a row's 37 stamps and small values reach their
columns, side by side on the same rows: ``a column at a time`` (one
``array.append`` a column, as the store appended before issue 23's CPU
work) against ``packed rows`` (the store's way: one ``struct.pack`` a row
into a buffer, moved to the columns a block at a time).

    PYTHONPATH=src pytest bench/bench_record_columns.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

from array import array
from typing import Any

import msgspec
import pytest

from mlpe_fast.engine import record_columns
from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.engine.record_columns import MEMORY_ROWS, RecordColumns
from mlpe_fast.metrics.latency_detail import latency_detail
from mlpe_fast.metrics.stats import point_stats
from mlpe_fast.wire.events import NO_RESPONSE, TokenGaps

ROWS = 200_000
VARIANTS = {"in memory": 2**62, "spilled": MEMORY_ROWS}
_PER_ROW: dict[tuple[str, str], float] = {}


def _pool() -> list[RequestRecord]:
    """Records as a 64-token streamed answer leaves them (texts dropped):
    stamps, usage, a gap histogram of a few buckets."""
    out = []
    for i in range(64):
        buckets = b"".join(
            (200 + k).to_bytes(4, "little") + (10 + k).to_bytes(4, "little") for k in range(6)
        )
        response = msgspec.structs.replace(
            NO_RESPONSE,
            status=200,
            t_head=1_000 + i,
            t_first=2_000 + i,
            t_done=90_000 + i,
            finish_reason="stop",
            usage={"prompt_tokens": 64, "completion_tokens": 64, "total_tokens": 128},
            events=66,
            content_events=64,
            done=True,
            complete=True,
            keep_alive=True,
            t_first_content=2_000 + i,
            t_second=3_000 + i,
            gaps=TokenGaps(63, 0, 88_000, 100, 3_000, buckets),
        )
        out.append(
            RequestRecord(
                sample_index=i,
                sample_id=f"{i:032x}",
                t_sched=100 + i,
                t_issue=500 + i,
                t_end=90_500 + i,
                response=response,
                t_first_read=2_000 + i,
                t_done_read=90_000 + i,
            )
        )
    return out


def _filled(memory_rows: int) -> RecordColumns:
    pool = _pool()
    columns = RecordColumns(memory_rows=memory_rows)
    for i in range(ROWS):
        columns.append(pool[i % 64])
    return columns


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.benchmark(group="record columns: append 200,000 rows")
def test_append(benchmark: Any, variant: str) -> None:
    columns = benchmark.pedantic(
        _filled, args=(VARIANTS[variant],), rounds=3, iterations=1, warmup_rounds=1
    )
    assert len(columns) == ROWS
    assert columns.spilled_rows == (
        0 if variant == "in memory" else ROWS // MEMORY_ROWS * MEMORY_ROWS
    )
    _PER_ROW["append", variant] = benchmark.stats.stats.median * 1e9 / ROWS
    benchmark.extra_info["ns_per_row_median"] = _PER_ROW["append", variant]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.benchmark(group="record columns: the figures of 200,000 rows")
def test_figures(benchmark: Any, variant: str) -> None:
    columns = _filled(VARIANTS[variant])

    def figures() -> Any:
        stats = point_stats(columns)
        return stats, latency_detail(columns, stats.raw.tracked_ok)

    stats, detail = benchmark.pedantic(figures, rounds=3, iterations=1, warmup_rounds=1)
    assert stats.completed == ROWS and detail.itl is not None
    _PER_ROW["figures", variant] = benchmark.stats.stats.median * 1e9 / ROWS
    benchmark.extra_info["ns_per_row_median"] = _PER_ROW["figures", variant]


def test_ratios() -> None:
    if not _PER_ROW:
        pytest.skip("no figures in this run")
    print(f"\n{'per row':<10} {'in memory':>12} {'spilled':>12} {'spilled / in memory':>20}")
    for what in ("append", "figures"):
        kept, spilled = _PER_ROW.get((what, "in memory")), _PER_ROW.get((what, "spilled"))
        if kept is None or spilled is None:
            continue
        print(f"{what:<10} {kept:>9.0f} ns {spilled:>9.0f} ns {spilled / kept:>19.2f}x")


def _row_values() -> list[tuple[int, ...]]:
    """Each pool record's row as the store packs it (37 ints)."""
    columns = RecordColumns(_pool())
    stamps = [columns.column(name).tolist() for name in record_columns.COLUMNS]
    return list(zip(*stamps, strict=True))


def _by_column(rows: list[tuple[int, ...]]) -> list[array[int]]:
    tails = [array("q") for _ in record_columns._STAMPS]
    tails += [array("i") for _ in record_columns._SMALL]
    for i in range(ROWS):
        for tail, value in zip(tails, rows[i % 64], strict=True):
            tail.append(value)
    return tails


def _packed(rows: list[tuple[int, ...]]) -> list[array[int]]:
    tails = [array("q") for _ in record_columns._STAMPS]
    tails += [array("i") for _ in record_columns._SMALL]
    pack, buffer, settle = record_columns._ROW.pack, bytearray(), record_columns._SETTLE_ROWS
    for i in range(ROWS):
        buffer += pack(*rows[i % 64])
        if i % settle == settle - 1 or i == ROWS - 1:
            record_columns.move_rows(buffer, tails)
    return tails


_MOVES = {"a column at a time": _by_column, "packed rows": _packed}


@pytest.mark.parametrize("way", list(_MOVES))
@pytest.mark.benchmark(group="record columns: a row's 37 values to their columns, 200,000 rows")
def test_row_moves(benchmark: Any, way: str) -> None:
    rows = _row_values()
    tails = benchmark.pedantic(_MOVES[way], args=(rows,), rounds=3, iterations=1, warmup_rounds=1)
    assert [tail[ROWS - 1] for tail in tails] == list(rows[(ROWS - 1) % 64])
    _PER_ROW["move", way] = benchmark.stats.stats.median * 1e9 / ROWS
    if len([key for key in _PER_ROW if key[0] == "move"]) == len(_MOVES):
        before, after = _PER_ROW["move", "a column at a time"], _PER_ROW["move", "packed rows"]
        print(
            f"\na row to its columns: a column at a time {before:.0f} ns, packed rows "
            f"{after:.0f} ns ({before / after:.2f}x)"
        )
