"""Exact order statistics a block at a time (``metrics/order_stats.py``,
issue 23): the k-th smallest of every kind of sample, however it is cut
into blocks and however few samples are gathered at once, is numpy's."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from mlpe_fast.metrics import order_stats
from mlpe_fast.metrics.order_stats import Sample, lower_ranks, order_statistics
from mlpe_fast.metrics.stats import PERCENTILES


def _cut(values: npt.NDArray[np.generic], size: int) -> Sample:
    return Sample(lambda: (values[i : i + size] for i in range(0, len(values), size)), values.dtype)


def _kinds(rng: np.random.Generator, n: int) -> dict[str, npt.NDArray[np.generic]]:
    return {
        "latency ns": rng.integers(10**6, 10**9, n),
        "negative and positive ints": rng.integers(-(2**62), 2**62, n),
        "int64 extremes": np.array(
            [np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1, 1] * (n // 5 + 1)
        )[:n],
        "a few distinct values": rng.integers(0, 3, n),
        "one value": np.full(n, 7),
        "tpot floats": rng.lognormal(15, 1, n),
        "signed floats": rng.normal(0, 1e3, n),
        "floats one ulp apart": np.nextafter(1.0, 2.0) ** rng.integers(0, 4, n).astype(float),
        "infinities": np.where(rng.random(n) < 0.1, np.inf, rng.random(n)) * rng.choice([-1, 1], n),
    }


@pytest.mark.parametrize("gather", [1, 4, 1000, order_stats.GATHER])
@pytest.mark.parametrize("block", [1, 7, 4096])
def test_the_kth_smallest_is_numpys(
    gather: int, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(order_stats, "GATHER", gather)
    rng = np.random.default_rng(gather * 31 + block)
    n = 3001 if block > 1 else 301
    for name, values in _kinds(rng, n).items():
        ordered = np.sort(values)
        ranks = [0, 1, n // 2, n - 2, n - 1, *rng.integers(0, n, 5).tolist()]
        got = order_statistics(_cut(values, block), ranks)
        assert sorted(got) == sorted(set(ranks))
        for rank, value in got.items():
            assert value == ordered[rank], (name, rank)
            assert value.dtype == values.dtype, name


def test_lower_ranks_are_the_samples_numpy_percentile_takes() -> None:
    grid = [*PERCENTILES, 0.0, 100.0, 33.3, 66.7, 99.99]
    for n in [*range(1, 400), 1_000, 65_537, 999_999, 1_000_000, 10_000_001]:
        index = np.arange(n)
        assert lower_ranks(n, grid) == np.percentile(index, grid, method="lower").tolist(), n


def test_a_percentile_grid_from_blocks_is_numpy_percentile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(order_stats, "GATHER", 100)
    values = np.random.default_rng(5).lognormal(17, 0.5, 20_000)
    ranks = lower_ranks(values.size, PERCENTILES)
    got = order_statistics(_cut(values, 1024), ranks)
    assert [got[r] for r in ranks] == np.percentile(values, PERCENTILES, method="lower").tolist()


def test_ranks_outside_the_sample_and_changing_blocks_are_refused() -> None:
    sample = Sample.of(np.arange(10))
    assert order_statistics(sample, []) == {}
    with pytest.raises(ValueError, match="outside 10 samples"):
        order_statistics(sample, [10])
    with pytest.raises(ValueError, match="outside"):
        order_statistics(sample, [-1])
    calls = []

    def shrinking() -> list[npt.NDArray[np.int64]]:
        calls.append(1)
        return [np.arange(10 - len(calls))]

    with pytest.raises(ValueError, match="gave"):
        order_statistics(Sample(shrinking, np.int64), [0])


def test_a_sample_reads_as_one_array() -> None:
    values = np.arange(10, dtype=np.int64)
    sample = _cut(values, 3)
    assert len(sample) == 10 and np.array_equal(sample.to_numpy(), values)
    assert np.array_equal(np.asarray(sample), values)
    assert Sample(lambda: (), np.float64).to_numpy().dtype == np.float64
