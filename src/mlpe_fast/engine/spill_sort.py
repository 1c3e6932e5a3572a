"""A stable sort of columns longer than a point should hold at once: sorted
runs in spill files, merged a bounded step at a time (issue 23: the
steady-state analysis puts a point's queries in issue order, and a whole
``argsort`` of a million issue stamps held 20 B a query while it sorted).

:func:`sort_by_key` takes the rows a block at a time -- a key (int64) and
value columns for each -- and gives back the key and the values in the
order of ``np.argsort(keys, kind="stable")`` over all the rows: by key, and
rows of equal keys in their input order.  One block is sorted in memory and
comes back as numpy arrays.  More are each sorted in memory and appended to
spill files (:class:`~.spill.SpilledArray`, one a column, the runs one
after the other), then merged into new spill files.

The merge holds a window of the next keys of the runs whose next rows are
near the front.  A row's place in the order is (key, run, position in the
run), and the smallest last row of the windows bounds what can go out now:
a row not yet in a window comes after the last row of its own window, or
is in a run whose next row is already past the bound.  Every row up to the
bound goes out in one step, sorted in memory; the bounding run's whole
window is among them, so each step moves forward.  The windows share about
:data:`MERGE_ROWS` rows (at least :data:`MIN_WINDOW` each), so a step holds
about that many rows of every column whatever the number of runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .spill import SpilledArray

__all__ = ("MERGE_ROWS", "MIN_WINDOW", "SortedColumn", "sort_by_key")

#: The rows the merge's windows hold in all ...
MERGE_ROWS = 65_536
#: ... and at least this many a run, so that a step of many runs still
#: moves a few hundred rows (read at call time: the tests make both small).
MIN_WINDOW = 256

#: A column in sorted order: numpy for one block, else in a spill file.
SortedColumn = npt.NDArray[Any] | SpilledArray


def _typecode(dtype: np.dtype[Any]) -> str:
    if dtype == np.float64:
        return "d"
    if dtype == np.int64:
        return "q"
    raise TypeError(f"sort_by_key sorts int64 or float64 columns, not {dtype}")


def sort_by_key(
    blocks: Iterable[tuple[npt.NDArray[np.int64], Sequence[npt.NDArray[Any]]]],
    directory: str | None = None,
) -> list[SortedColumn]:
    """``[keys, *values]`` in the stable order of the keys (module doc).

    ``blocks``: the rows in their input order, a block at a time, each a
    key array and one array a value column (int64 or float64), all of one
    length; every block has the same number of value columns.
    ``directory``: where the spill files are made (None: ``TMPDIR``; a disk
    that refuses them keeps the rows in memory, in the same order).

    Raises:
        ValueError: a block's columns differ in length, or blocks differ in
            their number of columns.
        TypeError: a column is neither int64 nor float64.
    """
    held: list[npt.NDArray[Any]] | None = None  # the first rows, until more come
    runs: list[SpilledArray] | None = None
    spans: list[tuple[int, int]] = []  # each run's rows in the stores
    width: int | None = None
    for keys, values in blocks:
        columns = [np.asarray(keys), *(np.asarray(v) for v in values)]
        if width is None:
            width = len(columns)
        elif len(columns) != width:
            raise ValueError("blocks differ in their number of columns")
        if any(len(column) != len(columns[0]) for column in columns):
            raise ValueError("a block's columns differ in length")
        typecodes = [_typecode(column.dtype) for column in columns]
        if typecodes[0] != "q":
            raise TypeError(f"sort_by_key sorts int64 keys, not {columns[0].dtype}")
        if held is None or not len(held[0]):  # the first rows (or nothing yet)
            held = columns if not len(columns[0]) else _sorted(columns)
            continue
        if not len(columns[0]):
            continue
        if runs is None:
            runs = [SpilledArray(code, directory) for code in typecodes]
            _append(runs, spans, held)
        _append(runs, spans, _sorted(columns))
    if runs is None:
        return [] if held is None else list[SortedColumn](held)
    return _merge(runs, spans, directory)


def _sorted(columns: Sequence[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
    order = np.argsort(columns[0], kind="stable")
    return [column[order] for column in columns]


def _append(
    stores: Sequence[SpilledArray],
    spans: list[tuple[int, int]],
    columns: Sequence[npt.NDArray[Any]],
) -> None:
    start = len(stores[0])
    for store, column in zip(stores, columns, strict=True):
        store.spill_block(column)
    spans.append((start, len(stores[0])))


def _merge(
    runs: Sequence[SpilledArray], spans: Sequence[tuple[int, int]], directory: str | None
) -> list[SortedColumn]:
    """The runs (``spans`` of the stores, each sorted) merged into new
    stores, a step at a time (module doc)."""
    keys = runs[0]
    out = [SpilledArray(store.tail.typecode, directory) for store in runs]
    cursor = [start for start, _ in spans]  # each run's next row in the stores
    stop = [end for _, end in spans]
    head = [int(keys[start]) for start in cursor]  # each run's next key
    windows: dict[int, npt.NDArray[np.int64]] = {}  # the next keys of the runs near the bound
    live = list(range(len(spans)))
    while live:
        # The bound: the smallest (key, run) of the windows' last rows.  Only
        # a run whose next row is before the bound found so far can lower
        # it or give rows to this step, so runs are looked at in the order
        # of their next rows and only those get a window (in a point's
        # records, nearly in issue order, a few).
        bound: tuple[int, int] | None = None
        near: list[int] = []
        for r in sorted(live, key=lambda r: (head[r], r)):
            if bound is not None and (head[r], r) > bound:
                break
            window = windows.get(r)
            rows = max(MIN_WINDOW, MERGE_ROWS // (len(windows) + 1), 1)
            if window is None or len(window) <= rows // 2:  # short windows: small steps
                window = windows[r] = keys[cursor[r] : min(stop[r], cursor[r] + rows)]
            near.append(r)
            last = (int(window[-1]), r)
            bound = last if bound is None or last < bound else bound
        assert bound is not None
        key, bound_run = bound
        taken: list[tuple[int, int]] = []  # (run, rows) that go out now
        for r in sorted(near):  # in run order, for the ties below
            # equal keys: the earlier runs' first (their input order)
            if r <= bound_run:
                rows = int(np.searchsorted(windows[r], key, side="right"))
            else:
                rows = int(np.searchsorted(windows[r], key, side="left"))
            if rows:
                taken.append((r, rows))
        parts = [[store[cursor[r] : cursor[r] + rows] for r, rows in taken] for store in runs]
        order = np.argsort(np.concatenate(parts[0]), kind="stable")  # ties: in run order
        for store, column in zip(out, parts, strict=True):
            store.spill_block(np.concatenate(column)[order])
        for r, rows in taken:
            cursor[r] += rows
            window = windows[r][rows:]
            if len(window):
                windows[r], head[r] = window, int(window[0])
            else:
                del windows[r]
                if cursor[r] < stop[r]:
                    head[r] = int(keys[cursor[r]])
        live = [r for r in live if cursor[r] < stop[r]]
    for store in runs:
        store.file.close()  # the runs' bytes go now, not with the stores
    return list(out)
