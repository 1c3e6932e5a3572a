"""The stable sort of spilled columns (engine/spill_sort.py): the order of
``np.argsort(keys, kind="stable")`` over every row, whatever the blocks,
the ties, the windows and the disk."""

from __future__ import annotations

import errno
import os
import tempfile
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from mlpe_fast.engine import spill_sort
from mlpe_fast.engine.spill import SpilledArray
from mlpe_fast.engine.spill_sort import sort_by_key

I64 = np.iinfo(np.int64)


def _blocks(
    keys: npt.NDArray[np.int64], values: list[npt.NDArray[Any]], sizes: list[int]
) -> list[tuple[npt.NDArray[np.int64], list[npt.NDArray[Any]]]]:
    out, lo = [], 0
    for size in sizes:
        out.append((keys[lo : lo + size], [v[lo : lo + size] for v in values]))
        lo += size
    assert lo == len(keys)
    return out


def _check(keys: npt.NDArray[np.int64], sizes: list[int], directory: str) -> list[Any]:
    n = len(keys)
    rows = np.arange(n, dtype=np.int64)  # each row's input position: ties show
    floats = np.linspace(-1.0, 1.0, n) if n else np.zeros(0)
    floats[::7] = np.nan
    got = sort_by_key(_blocks(keys, [rows, floats], sizes), directory)
    order = np.argsort(keys, kind="stable")
    assert len(got) == 3
    assert np.asarray(got[0]).tolist() == keys[order].tolist()
    assert np.asarray(got[1]).tolist() == order.tolist()
    np.testing.assert_array_equal(np.asarray(got[2]), floats[order])
    return got


def _sizes(rng: np.random.Generator, n: int, most: int) -> list[int]:
    sizes = []
    while n:
        size = int(rng.integers(0, most + 1))  # empty blocks too
        size = min(size, n)
        sizes.append(size)
        n -= size
    return sizes


@pytest.mark.parametrize("seed", range(12))
def test_the_order_is_argsort_s_stable_order(
    seed: int, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(spill_sort, "MERGE_ROWS", int(rng.integers(1, 200)))
    monkeypatch.setattr(spill_sort, "MIN_WINDOW", int(rng.integers(1, 9)))
    n = int(rng.integers(0, 3_000))
    kind = seed % 4
    if kind == 0:  # heavy ties
        keys = rng.integers(0, 5, n)
    elif kind == 1:  # nearly sorted, as completion order is to issue order
        keys = np.arange(n) * 10 + rng.integers(-300, 300, n)
    elif kind == 2:  # the int64 extremes
        keys = rng.choice(np.array([I64.min, I64.min + 1, -1, 0, 1, I64.max - 1, I64.max]), n)
    else:  # reversed
        keys = np.arange(n)[::-1] // 3
    keys = keys.astype(np.int64)
    _check(keys, _sizes(rng, n, int(rng.integers(1, 400))), str(tmp_path))


def test_one_block_sorts_in_memory_and_more_go_to_files(tmp_path: Any) -> None:
    keys = np.array([3, 1, 2, 1], np.int64)
    got = _check(keys, [4], str(tmp_path))
    assert all(isinstance(column, np.ndarray) for column in got)
    got = _check(keys, [0, 4, 0], str(tmp_path))  # empty blocks around it
    assert all(isinstance(column, np.ndarray) for column in got)
    got = _check(keys, [2, 2], str(tmp_path))
    assert all(isinstance(column, SpilledArray) for column in got)
    assert sort_by_key([]) == []
    empty = sort_by_key([(np.zeros(0, np.int64), [np.zeros(0)])])
    assert [len(column) for column in empty] == [0, 0]


def test_a_disk_that_refuses_keeps_the_rows_in_memory_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def full(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    monkeypatch.setattr(spill_sort, "MERGE_ROWS", 8)
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 50, 500).astype(np.int64)
    got = _check(keys, [100] * 5, "unused")
    assert all(isinstance(c, SpilledArray) and c.spilled == 0 for c in got)


def test_blocks_that_do_not_fit_are_refused() -> None:
    keys = np.arange(4, dtype=np.int64)
    with pytest.raises(ValueError, match="differ in length"):
        sort_by_key([(keys, [np.zeros(3)])])
    with pytest.raises(ValueError, match="number of columns"):
        sort_by_key([(keys, [np.zeros(4)]), (keys, [])])
    with pytest.raises(TypeError, match="int64 keys"):
        sort_by_key([(np.zeros(4), [])])
    with pytest.raises(TypeError, match="int64 or float64"):
        sort_by_key([(keys, [np.zeros(4, np.int32)])])
