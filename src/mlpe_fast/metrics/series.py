"""Final series statistics and stat blocks, number for number as the reference client writes them.

Two shapes, both from the reference client (mlcommons/endpoints @ ea332753):

* the **series stat** of ``metrics/final_snapshot.json`` (spec §3.5),
  :func:`series_stat`: what ``SeriesSampler`` builds on the exact (COMPLETE)
  path (``src/inference_endpoint/async_utils/services/metrics_aggregator/registry.py``)
  and ``_metric_to_dict`` turns into a dict (``.../metrics_aggregator/snapshot.py``)::

      {"type": "series", "name", "count", "total", "min", "max", "sum_sq",
       "percentiles": {"99.9": v, ..., "1.0": v},
       "early_stopping_percentiles": {"99.9": v|None, ..., "50.0": v|None},  # tail series only
       "histogram": [[[lo, hi], count], ...]}

* the **stat block** of ``performance/result_summary.json`` (spec §1.6, §3.3),
  :func:`summary_block`: ``_series_to_metric_dict`` in
  ``src/inference_endpoint/metrics/report.py``::

      {"total", "min", "max", "median", "avg", "std_dev", "percentiles",
       "early_stopping_percentiles"?, "histogram": {"buckets": [[lo, hi], ...],
       "counts": [...]}}

The rules that make the numbers identical:

* Number types follow the series' dtype: integer series (ns, token counts)
  keep ``total``/``min``/``max`` as exact ints, float series (TPOT) as floats;
  ``sum_sq`` is always written as a float (the exact sum of squares, rounded
  once); ``percentiles`` and histogram edges are floats.
* Integer sums are exact (the reference accumulates Python ints); float sums
  are accumulated one sample at a time in the order given, as the reference's
  ``+=`` does, so pass float series in recording (completion) order.
* Percentiles: ``numpy.percentile(sorted, grid, method="lower")`` on the grid
  :data:`PERCENTILES`, keyed ``str(p)`` (``"99.9"``, ``"90.0"``), spec §1.3.
* Histogram: :data:`HISTOGRAM_BUCKETS` log-spaced buckets over the observed
  ``[min, max]`` (lower edge at least 1, upper edge at least 10x the lower),
  values clipped into the edge range and counted by ``numpy.histogram``
  (half-open buckets, the last one closed).
* Early stopping (:mod:`.early_stopping`) on the tail-latency series only.
* An empty series is ``count 0, total 0, min 0, max 0, sum_sq 0``, all
  percentiles ``0.0``, an all-``None`` early-stopping map on tail series and
  no histogram; its stat block is ``{}`` (or just the all-``None`` map).
* Samples must be finite (TPOT drops the others, spec §1.2); a non-finite
  float that still arises (an overflowing sum) is written as ``None``, as the
  reference's JSON scrub does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from . import order_stats
from .early_stopping import SortedSamples, estimate, estimate_targets
from .order_stats import Sample, lower_ranks, order_statistics

__all__ = (
    "HISTOGRAM_BUCKETS",
    "PERCENTILES",
    "log_spaced_edges",
    "series_stat",
    "summary_block",
)

#: The reference's percentile grid (``registry.py`` ``DEFAULT_PERCENTILES``), descending.
PERCENTILES: Final[tuple[float, ...]] = (
    99.9,
    99.0,
    97.0,
    95.0,
    90.0,
    80.0,
    75.0,
    50.0,
    25.0,
    10.0,
    5.0,
    1.0,
)
#: Buckets per histogram (the reference aggregator's ``--n-histogram-buckets`` default).
HISTOGRAM_BUCKETS: Final[int] = 30

# Exact integer sums in numpy: values are split into 21-bit limbs so that every
# partial product is below 2**42, and summed in chunks of at most 2**20 so that
# no int64 partial sum can overflow (2**42 * 2**20 = 2**62).
_LIMB_BITS: Final[int] = 21
_LIMB_MASK: Final[int] = (1 << _LIMB_BITS) - 1
_CHUNK: Final[int] = 1 << 20


def _finite_or_none(value: Any) -> Any:
    """``None`` for a non-finite float, the value otherwise (the reference's JSON scrub)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def log_spaced_edges(low: float, high: float, n_buckets: int = HISTOGRAM_BUCKETS) -> list[float]:
    """``n_buckets + 1`` log-spaced edges over the observed range (reference ``registry.py``).

    The lower edge is raised to 1 so the logarithm is defined for zero-based
    series, and the upper edge to ten times the lower one so a constant series
    still gets a range.  Edge ``i`` is ``exp(log(low) + i * step)``, computed
    in that order, which is what makes the edges bit-identical.
    """
    lower = max(float(low), 1.0)
    upper = max(float(high), lower * 10.0)
    log_lower = math.log(lower)
    step = (math.log(upper) - log_lower) / n_buckets
    return [math.exp(log_lower + i * step) for i in range(n_buckets + 1)]


def _chunked_exact_sum(values: npt.NDArray[np.int64]) -> int:
    """Exact sum of int64 values whose magnitude is below 2**42."""
    return sum(
        int(values[start : start + _CHUNK].sum(dtype=np.int64))
        for start in range(0, values.size, _CHUNK)
    )


def _exact_int_sums(values: npt.NDArray[np.int64]) -> tuple[int, int]:
    """``(sum, sum of squares)`` of int64 values as exact Python ints.

    numpy wraps silently on int64 overflow and nanosecond latencies square to
    ~1e20, so each value is split into three 21-bit limbs (``v = a*2**42 +
    b*2**21 + c``, arithmetic shift, so ``a`` carries the sign and ``b``, ``c``
    are non-negative) and the limb sums and cross products are summed
    exactly, then recombined with Python ints.
    """
    if values.size == 0:
        return 0, 0
    high = values >> (2 * _LIMB_BITS)
    middle = (values >> _LIMB_BITS) & _LIMB_MASK
    low = values & _LIMB_MASK
    s_high, s_middle, s_low = (_chunked_exact_sum(x) for x in (high, middle, low))
    total = (s_high << (2 * _LIMB_BITS)) + (s_middle << _LIMB_BITS) + s_low
    sum_sq = (
        (_chunked_exact_sum(high * high) << (4 * _LIMB_BITS))
        + (_chunked_exact_sum(high * middle) << (3 * _LIMB_BITS + 1))
        + (
            (2 * _chunked_exact_sum(high * low) + _chunked_exact_sum(middle * middle))
            << (2 * _LIMB_BITS)
        )
        + (_chunked_exact_sum(middle * low) << (_LIMB_BITS + 1))
        + _chunked_exact_sum(low * low)
    )
    return total, sum_sq


def _sequential_float_sum(values: npt.NDArray[np.float64]) -> float:
    """Left-to-right float sum, as a ``total += v`` loop makes it.

    ``numpy.sum`` adds pairwise and ``math.fsum`` exactly; both can differ from
    the reference's running sum in the last bits.  ``cumsum`` adds strictly in
    order.
    """
    if values.size == 0:
        return 0.0
    with np.errstate(over="ignore"):  # an overflow gives inf, written as null
        return float(np.cumsum(values)[-1])


def _as_series_array(name: str, values: npt.ArrayLike) -> npt.NDArray[Any]:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d array, got shape {array.shape}")
    if array.dtype.kind in "iub":
        if array.dtype.kind == "u" and array.size and int(array.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"{name}: values beyond int64")
        return array.astype(np.int64, copy=False)
    if array.dtype.kind == "f":
        # The reference cannot bin a non-finite sample either (its histogram
        # edges become NaN); TPOT drops such samples before they get here (spec §1.2).
        if not np.isfinite(array).all():
            raise ValueError(f"{name}: non-finite samples; drop them first (spec §1.2)")
        return array.astype(np.float64, copy=False)
    raise ValueError(f"{name}: expected an integer or float array, got dtype {array.dtype}")


def _early_stopping_map(
    sorted_values: SortedSamples, grid: Sequence[float]
) -> dict[str, float | None]:
    return {
        key: estimate(sorted_values, percentile)
        for key, percentile in estimate_targets(grid).items()
    }


def series_stat(
    name: str,
    values: npt.ArrayLike | Sample,
    *,
    early_stopping_estimates: bool = False,
    percentiles: Sequence[float] = PERCENTILES,
    n_buckets: int = HISTOGRAM_BUCKETS,
) -> dict[str, Any]:
    """The final-snapshot series dict of ``values`` (see the module docstring).

    Args:
        name: the series name (``"ttft_ns"``, ``"tpot_ns"``, ...).
        values: the raw samples in recording order; an integer array makes an
            integer series, a float array (TPOT) a float series.  A
            :class:`~.order_stats.Sample` of more than ``GATHER`` samples is
            read a block at a time, never whole (:func:`_streamed_stat`: the
            same numbers, issue 23).
        early_stopping_estimates: add ``early_stopping_percentiles`` (the
            reference does for ``ttft_ns``, ``tpot_ns`` and ``sample_latency_ns``
            when early stopping is on, its default).
        percentiles: the grid; keys are ``str()`` of its entries.
        n_buckets: histogram buckets.

    Raises:
        ValueError: ``values`` is not a 1-d integer or float array, or holds
            a non-finite float.
    """
    if isinstance(values, Sample):
        if len(values) > order_stats.GATHER:
            return _streamed_stat(name, values, early_stopping_estimates, percentiles, n_buckets)
        values = values.to_numpy()
    array = _as_series_array(name, values)
    integral = array.dtype.kind == "i"
    grid = list(percentiles)
    stat: dict[str, Any] = {"type": "series", "name": name}
    if array.size == 0:
        zero: int | float = 0 if integral else 0.0
        stat.update(
            count=0,
            total=zero,
            min=0,
            max=0,
            sum_sq=zero,
            percentiles={str(p): 0.0 for p in grid},
        )
        if early_stopping_estimates:
            stat["early_stopping_percentiles"] = _early_stopping_map((), grid)
        stat["histogram"] = []
        return stat

    ordered = np.sort(array)
    total: int | float
    sum_sq: float
    if integral:
        exact_total, exact_sum_sq = _exact_int_sums(array)
        total = exact_total
        sum_sq = float(exact_sum_sq)
        minimum: int | float = int(ordered[0])
        maximum: int | float = int(ordered[-1])
    else:
        total = _sequential_float_sum(array)
        with np.errstate(over="ignore"):
            squares = array * array
        sum_sq = _sequential_float_sum(squares)
        minimum = float(ordered[0])
        maximum = float(ordered[-1])

    grid_values = np.percentile(ordered, grid, method="lower")
    edges = log_spaced_edges(float(minimum), float(maximum), n_buckets)
    counts, _ = np.histogram(np.clip(ordered, edges[0], edges[-1]), bins=edges)

    stat.update(
        count=int(array.size),
        total=_finite_or_none(total),
        min=_finite_or_none(minimum),
        max=_finite_or_none(maximum),
        sum_sq=_finite_or_none(sum_sq),
        percentiles={
            str(p): _finite_or_none(float(v)) for p, v in zip(grid, grid_values, strict=True)
        },
    )
    if early_stopping_estimates:
        stat["early_stopping_percentiles"] = {
            key: _finite_or_none(v) for key, v in _early_stopping_map(ordered, grid).items()
        }
    stat["histogram"] = [
        [[_finite_or_none(edges[i]), _finite_or_none(edges[i + 1])], int(counts[i])]
        for i in range(len(edges) - 1)
    ]
    return stat


class _Asked:
    """Ascending samples of which only the length is known: it notes the
    positions an early-stopping estimate reads (the estimate's arithmetic
    depends on the count alone), so that they are found in one go."""

    def __init__(self, n: int, known: dict[int, Any] | None = None) -> None:
        self.n = n
        self.known = known
        self.asked: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> float:
        self.asked.append(index)
        return 0.0 if self.known is None else float(self.known[index])


def _streamed_stat(
    name: str,
    sample: Sample,
    early_stopping_estimates: bool,
    percentiles: Sequence[float],
    n_buckets: int,
) -> dict[str, Any]:
    """:func:`series_stat` of a sample read a block at a time: the sums,
    extremes and histogram add up block by block (the float sums carried
    from block to block, so in the same order, to the same bits), and the
    percentiles and early-stopping estimates are the exact order statistics
    of :func:`~.order_stats.order_statistics`.  The same dict the whole
    array gives (``tests/unit/test_series.py`` holds them equal)."""
    integral = sample.dtype.kind in "iub"
    grid = list(percentiles)
    count = 0
    int_total = int_sum_sq = 0
    float_total = float_sum_sq = None
    minimum: Any = None
    maximum: Any = None
    for block in sample.blocks():
        array = _as_series_array(name, block)
        if not array.size:
            continue
        count += int(array.size)
        low, high = array.min(), array.max()
        minimum = low if minimum is None else min(minimum, low)
        maximum = high if maximum is None else max(maximum, high)
        if integral:
            block_total, block_sum_sq = _exact_int_sums(array)
            int_total += block_total
            int_sum_sq += block_sum_sq
        else:
            with np.errstate(over="ignore"):
                squares = array * array
            float_total = _carried_sum(float_total, array)
            float_sum_sq = _carried_sum(float_sum_sq, squares)
    total: int | float = int_total if integral else float(float_total or 0.0)
    sum_sq = float(int_sum_sq) if integral else float(float_sum_sq or 0.0)
    low_value: int | float = int(minimum) if integral else float(minimum)
    high_value: int | float = int(maximum) if integral else float(maximum)
    edges = log_spaced_edges(float(low_value), float(high_value), n_buckets)
    counts = np.zeros(len(edges) - 1, np.int64)
    for block in sample.blocks():
        counts += np.histogram(np.clip(block, edges[0], edges[-1]), bins=edges)[0]
    grid_ranks = lower_ranks(count, grid)
    asked = _Asked(count)
    if early_stopping_estimates:
        _early_stopping_map(asked, grid)
    found = order_statistics(sample, [*grid_ranks, *asked.asked])
    stat: dict[str, Any] = {
        "type": "series",
        "name": name,
        "count": count,
        "total": _finite_or_none(total),
        "min": _finite_or_none(low_value),
        "max": _finite_or_none(high_value),
        "sum_sq": _finite_or_none(sum_sq),
        "percentiles": {
            str(p): _finite_or_none(float(found[k])) for p, k in zip(grid, grid_ranks, strict=True)
        },
    }
    if early_stopping_estimates:
        stat["early_stopping_percentiles"] = {
            key: _finite_or_none(v)
            for key, v in _early_stopping_map(_Asked(count, found), grid).items()
        }
    stat["histogram"] = [
        [[_finite_or_none(edges[i]), _finite_or_none(edges[i + 1])], int(counts[i])]
        for i in range(len(edges) - 1)
    ]
    return stat


def _carried_sum(carry: float | None, values: npt.NDArray[np.float64]) -> float:
    """:func:`_sequential_float_sum` of the values after ``carry`` (None:
    the first block): the running sum goes on where it stopped."""
    if carry is None:
        return _sequential_float_sum(values)
    with np.errstate(over="ignore"):
        return float(np.cumsum(np.concatenate(([carry], values)))[-1])


def _sample_std_dev(count: int, total: int | float, sum_sq: int | float) -> float:
    """Sample standard deviation from the rollups, as ``report.py`` computes it.

    With integer ``total`` and ``sum_sq`` the exact form
    ``sqrt(n*sum_sq - total**2) / sqrt(n*(n-1))``; otherwise
    ``sqrt((sum_sq - total**2/n) / (n-1))`` in floats.  A final snapshot
    always stores ``sum_sq`` as a float, so the float form is the one real
    reports use; with an integer ``total``, ``total**2/n`` is still computed
    exactly and rounded once (Python int true division).
    """
    if count <= 1:
        return 0.0
    if isinstance(total, int) and isinstance(sum_sq, int):
        numerator = count * sum_sq - total * total
        return math.sqrt(max(0, numerator)) / math.sqrt(count * (count - 1))
    spread = sum_sq - total * total / count
    return math.sqrt(max(0.0, spread / (count - 1)))


def summary_block(stat: Mapping[str, Any]) -> dict[str, Any]:
    """The ``result_summary.json`` block of a final-snapshot series dict.

    ``avg = total / count``; ``std_dev`` the sample standard deviation
    (:func:`_sample_std_dev`); ``median`` the ``"50.0"`` (or ``"50"``)
    percentile, else the midrange; ``percentiles`` copied;
    ``early_stopping_percentiles`` (when the series has it) placed right after
    ``percentiles``; ``histogram`` as ``{"buckets": [[lo, hi], ...], "counts":
    [...]}``.  An empty series gives ``{}``, or only its all-``None``
    early-stopping map.
    """
    count = int(stat.get("count", 0))
    early = stat.get("early_stopping_percentiles")
    if count == 0:
        return {} if early is None else {"early_stopping_percentiles": early}
    total = stat.get("total", 0)
    sum_sq = stat.get("sum_sq", 0)
    minimum = stat.get("min", 0)
    maximum = stat.get("max", 0)
    grid: Mapping[str, Any] = stat.get("percentiles", {})
    if "50" in grid:
        median = grid["50"]
    elif "50.0" in grid:
        median = grid["50.0"]
    else:
        median = (minimum + maximum) / 2
    histogram: Sequence[Sequence[Any]] = stat.get("histogram", [])
    block: dict[str, Any] = {
        "total": total,
        "min": minimum,
        "max": maximum,
        "median": median,
        "avg": total / count,
        "std_dev": _sample_std_dev(count, total, sum_sq),
        "percentiles": dict(grid),
    }
    if early is not None:
        block["early_stopping_percentiles"] = early
    block["histogram"] = {
        "buckets": [[bucket[0][0], bucket[0][1]] for bucket in histogram],
        "counts": [bucket[1] for bucket in histogram],
    }
    return block
