"""Final series stats and stat blocks (mlpe_fast.metrics.series, .early_stopping).

Expected numbers are worked out by hand or recomputed here another way
(Python ints, explicit loops, an independent binomial sum), never read off
the code under test.  Spec §1.3, §1.6, §3.3, §3.5.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mlpe_fast.metrics import early_stopping
from mlpe_fast.metrics.series import (
    HISTOGRAM_BUCKETS,
    PERCENTILES,
    log_spaced_edges,
    series_stat,
    summary_block,
)

GRID_KEYS = ["99.9", "99.0", "97.0", "95.0", "90.0", "80.0", "75.0", "50.0", "25.0", "10.0"]
GRID_KEYS += ["5.0", "1.0"]
ES_KEYS = ["99.9", "99.0", "97.0", "95.0", "90.0", "80.0", "75.0", "50.0"]
STAT_KEYS = ["type", "name", "count", "total", "min", "max", "sum_sq", "percentiles"]
BLOCK_KEYS = ["total", "min", "max", "median", "avg", "std_dev", "percentiles", "histogram"]


# -- series_stat: rollups and number types -------------------------------------------


def test_integer_series_rollups_and_types() -> None:
    stat = series_stat("isl", np.array([5, 1, 4, 2, 3], np.int64))
    assert list(stat) == [*STAT_KEYS, "histogram"]
    assert (stat["type"], stat["name"], stat["count"]) == ("series", "isl", 5)
    assert stat["total"] == 15 and type(stat["total"]) is int
    assert (stat["min"], stat["max"]) == (1, 5)
    assert type(stat["min"]) is int and type(stat["max"]) is int
    # 1 + 4 + 9 + 16 + 25, written as a float like the reference's float(sum_sq)
    assert stat["sum_sq"] == 55.0 and type(stat["sum_sq"]) is float


def test_float_series_keeps_floats() -> None:
    stat = series_stat("tpot_ns", np.array([2.5, 0.5, 1.0]))
    assert stat["total"] == 4.0 and type(stat["total"]) is float
    assert (stat["min"], stat["max"]) == (0.5, 2.5)
    assert type(stat["min"]) is float
    assert stat["sum_sq"] == 6.25 + 0.25 + 1.0


def test_float_total_is_a_running_sum_in_the_given_order() -> None:
    # 1e16 + 1 is a tie between 1e16 and 1e16 + 2 and rounds to even (1e16), so a
    # left-to-right running sum never moves; an exact sum would be 1e16 + 4.
    values = np.array([1e16, 1.0, 1.0, 1.0, 1.0])
    assert math.fsum(values.tolist()) == 1e16 + 4
    assert series_stat("tpot_ns", values)["total"] == 1e16
    # the other order accumulates the ones first
    assert series_stat("tpot_ns", values[::-1].copy())["total"] == 1e16 + 4


def test_float_sums_match_an_explicit_loop() -> None:
    values = np.random.default_rng(7).lognormal(16, 0.7, 2000)
    total = 0.0
    sum_sq = 0.0
    for v in values.tolist():
        total += v
        sum_sq += v * v
    stat = series_stat("tpot_ns", values)
    assert stat["total"] == total
    assert stat["sum_sq"] == sum_sq


def test_integer_sums_are_exact_beyond_int64() -> None:
    # ns latencies square past 2**63; the sum of squares must be the exact
    # integer, rounded once.
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            rng.integers(2_000_000_000, 3_600_000_000_000, 5000),
            np.array([2**62, -(2**62), 0, -7], np.int64),
        ]
    )
    as_ints = [int(v) for v in values]
    stat = series_stat("sample_latency_ns", values)
    assert stat["total"] == sum(as_ints)
    assert stat["sum_sq"] == float(sum(v * v for v in as_ints))
    assert float(np.dot(values, values)) != stat["sum_sq"]  # int64 wraps


def test_rejects_arrays_that_are_not_series() -> None:
    with pytest.raises(ValueError, match="1-d"):
        series_stat("x", np.zeros((2, 2), np.int64))
    with pytest.raises(ValueError, match="dtype"):
        series_stat("x", np.array(["a"]))


# -- percentiles ------------------------------------------------------------------------


def test_percentile_grid_keys_and_method_lower() -> None:
    assert [str(p) for p in PERCENTILES] == GRID_KEYS
    # 1..10 in shuffled order: method "lower" takes sorted[floor(p/100 * 9)]
    values = np.array([7, 3, 10, 1, 9, 2, 8, 5, 4, 6], np.int64)
    stat = series_stat("osl", values)
    assert list(stat["percentiles"]) == GRID_KEYS
    by_hand = {
        "99.9": 9,  # floor(8.991) = 8
        "99.0": 9,  # floor(8.91)
        "97.0": 9,  # floor(8.73)
        "95.0": 9,  # floor(8.55)
        "90.0": 9,  # floor(8.1)
        "80.0": 8,  # floor(7.2)
        "75.0": 7,  # floor(6.75)
        "50.0": 5,  # floor(4.5)
        "25.0": 3,  # floor(2.25)
        "10.0": 1,  # floor(0.9)
        "5.0": 1,
        "1.0": 1,
    }
    assert stat["percentiles"] == {k: float(v) for k, v in by_hand.items()}
    assert all(type(v) is float for v in stat["percentiles"].values())


# -- histogram --------------------------------------------------------------------------


def test_log_spaced_edges() -> None:
    edges = log_spaced_edges(1, 1000, 3)
    assert edges == pytest.approx([1.0, 10.0, 100.0, 1000.0], rel=1e-12)
    # lower edge raised to 1, upper edge to at least 10x the lower one
    assert log_spaced_edges(0, 5, 1) == pytest.approx([1.0, 10.0])
    assert log_spaced_edges(7, 7, 1) == pytest.approx([7.0, 70.0])


def test_histogram_buckets_and_counting_rule() -> None:
    values = np.array([1, 5, 20, 50, 500, 1000], np.int64)
    stat = series_stat("osl", values, n_buckets=3)
    edges = [edge for bucket in stat["histogram"] for edge in bucket[0]]
    assert edges == pytest.approx([1, 10, 10, 100, 100, 1000], rel=1e-12)
    # the maximum lands in the last (closed) bucket
    assert [bucket[1] for bucket in stat["histogram"]] == [2, 2, 2]


def test_histogram_default_size_and_values_below_one() -> None:
    values = np.array([0, 0, 3, 40, 41], np.int64)
    stat = series_stat("isl", values)
    assert len(stat["histogram"]) == HISTOGRAM_BUCKETS
    assert stat["histogram"][0][0][0] == 1.0  # lower edge raised to 1
    counts = [bucket[1] for bucket in stat["histogram"]]
    assert sum(counts) == 5
    assert counts[0] == 2  # the zeros are clipped into the first bucket
    # edges are contiguous
    for left, right in zip(stat["histogram"], stat["histogram"][1:], strict=False):
        assert left[0][1] == right[0][0]


def test_constant_series_histogram() -> None:
    stat = series_stat("osl", np.array([7, 7, 7], np.int64), n_buckets=2)
    assert stat["histogram"][0][0][0] == pytest.approx(7.0)
    assert stat["histogram"][-1][0][1] == pytest.approx(70.0)
    assert [bucket[1] for bucket in stat["histogram"]] == [3, 0]


# -- empty series -----------------------------------------------------------------------


def test_empty_integer_series() -> None:
    stat = series_stat("isl", np.array([], np.int64))
    assert stat == {
        "type": "series",
        "name": "isl",
        "count": 0,
        "total": 0,
        "min": 0,
        "max": 0,
        "sum_sq": 0,
        "percentiles": dict.fromkeys(GRID_KEYS, 0.0),
        "histogram": [],
    }
    assert type(stat["total"]) is int and type(stat["sum_sq"]) is int
    assert summary_block(stat) == {}


def test_empty_tail_series_keeps_an_all_null_estimate_map() -> None:
    stat = series_stat("tpot_ns", np.array([], np.float64), early_stopping_estimates=True)
    assert type(stat["total"]) is float and type(stat["sum_sq"]) is float
    assert stat["early_stopping_percentiles"] == dict.fromkeys(ES_KEYS)
    assert list(stat) == [*STAT_KEYS, "early_stopping_percentiles", "histogram"]
    assert summary_block(stat) == {"early_stopping_percentiles": dict.fromkeys(ES_KEYS)}


# -- early stopping ---------------------------------------------------------------------


def _log_binomial_term(trials: int, k: int, rate: float) -> float:
    return (
        math.lgamma(trials + 1)
        - math.lgamma(k + 1)
        - math.lgamma(trials - k + 1)
        + k * math.log(rate)
        + (trials - k) * math.log1p(-rate)
    )


def _at_most(over: int, trials: int, over_rate: float) -> float:
    """P(X <= over) for X ~ Binomial(trials, over_rate), summed term by term."""
    return sum(math.exp(_log_binomial_term(trials, k, over_rate)) for k in range(over + 1))


def _brute_min_passing(over: int, fraction: float) -> int:
    """Least h with P(<= over over-latency among h + over) < 0.01, by bisection on h."""
    low, high = 1, 1
    while _at_most(over, high + over, 1 - fraction) >= 0.01:
        high *= 2
    while low < high:
        middle = (low + high) // 2
        if _at_most(over, middle + over, 1 - fraction) < 0.01:
            high = middle
        else:
            low = middle + 1
    return low


def test_min_passing_matches_loadgen_reference_values() -> None:
    # t = 0: P = q**h < 0.01  <=>  h > ln(0.01) / ln(q)
    assert early_stopping.min_passing(0, 0.99) == math.ceil(math.log(0.01) / math.log(0.99))
    assert early_stopping.min_passing(0, 0.99) == 459
    assert early_stopping.min_passing(0, 0.90) == 44
    assert early_stopping.min_passing(1, 0.99) == _brute_min_passing(1, 0.99) == 661


@pytest.mark.parametrize(
    ("percentile", "documented"),
    [(50.0, 11), (75.0, 24), (80.0, 31), (90.0, 64), (95.0, 130), (97.0, 219), (99.0, 662)],
)
def test_minimum_sample_counts(percentile: float, documented: int) -> None:
    # the reference's cheat sheet (docs/early_stopping.md), re-derived by brute force
    assert _brute_min_passing(1, percentile / 100) + 1 == documented
    assert early_stopping.min_sample_count(percentile) == documented


def test_minimum_sample_count_p999() -> None:
    assert early_stopping.min_sample_count(99.9) == 6636


def test_estimate_is_null_below_the_floor_and_the_maximum_at_it() -> None:
    assert early_stopping.estimate(list(range(63)), 90.0) is None
    assert early_stopping.estimate(list(range(64)), 90.0) == 63.0  # t = 1: the maximum
    assert early_stopping.estimate(list(range(10)), 50.0) is None
    assert early_stopping.estimate([], 50.0) is None


def test_worked_example_p99_at_10000_samples() -> None:
    # docs/early_stopping.md: n = 10,000, p99 -> budget t = 77, the 77th-highest sample.
    n = 10_000
    budget = max(t for t in range(1, 120) if _brute_min_passing(t, 0.99) + t <= n)
    assert budget == 77
    assert early_stopping.over_latency_budget(n, 0.99) == budget
    samples = [float(i) for i in range(n)]
    assert early_stopping.estimate(samples, 99.0) == samples[n - budget]


def test_estimate_domain() -> None:
    with pytest.raises(ValueError):
        early_stopping.estimate([1.0, 2.0], 0.99)  # a fraction, not a grid percentile
    with pytest.raises(ValueError):
        early_stopping.estimate([1.0, 2.0], 100.0)
    with pytest.raises(ValueError):
        early_stopping.min_passing(1, 1.0)


def test_estimate_targets_follow_the_grid() -> None:
    assert list(early_stopping.estimate_targets(PERCENTILES)) == ES_KEYS
    assert list(early_stopping.estimate_targets((100.0, 99, 90, 50, 25))) == ["99", "90", "50"]


def test_series_estimates_are_conservative_and_keyed_like_the_grid() -> None:
    values = np.random.default_rng(11).integers(1, 10**9, 1000)
    stat = series_stat("ttft_ns", values, early_stopping_estimates=True)
    estimates = stat["early_stopping_percentiles"]
    assert list(estimates) == ES_KEYS
    assert estimates["99.9"] is None  # 1000 samples < 6636
    ordered = np.sort(values)
    for key in ES_KEYS[1:]:
        assert estimates[key] >= stat["percentiles"][key]
        assert estimates[key] in ordered
    # placed right after the percentiles it overlays
    assert list(stat) == [*STAT_KEYS, "early_stopping_percentiles", "histogram"]


# -- summary_block --------------------------------------------------------------------


def test_summary_block_shape_and_values() -> None:
    values = np.arange(1, 11, dtype=np.int64)
    stat = series_stat("osl", values, n_buckets=2)
    block = summary_block(stat)
    assert list(block) == BLOCK_KEYS
    assert block["total"] == 55 and type(block["total"]) is int
    assert (block["min"], block["max"]) == (1, 10)
    assert block["median"] == 5.0  # the "50.0" grid value, method lower
    assert block["avg"] == 5.5
    # sample standard deviation: sum((x - 5.5)**2) = 82.5 over n - 1 = 9
    assert block["std_dev"] == pytest.approx(math.sqrt(82.5 / 9), rel=1e-15)
    assert block["percentiles"] == stat["percentiles"]
    assert block["histogram"] == {
        "buckets": [bucket[0] for bucket in stat["histogram"]],
        "counts": [bucket[1] for bucket in stat["histogram"]],
    }


def test_summary_block_places_estimates_after_percentiles() -> None:
    stat = series_stat("sample_latency_ns", np.arange(100), early_stopping_estimates=True)
    block = summary_block(stat)
    assert list(block) == [*BLOCK_KEYS[:7], "early_stopping_percentiles", "histogram"]
    assert block["early_stopping_percentiles"] == stat["early_stopping_percentiles"]


def test_std_dev_uses_the_exact_integer_form_for_integer_rollups() -> None:
    # x = 10**12 + (0, 1, 2): n*sum_sq - total**2 = 3*5 - 3**2 = 6 exactly, so the
    # sample std is sqrt(6) / sqrt(3 * 2) = 1; the float form loses it to rounding.
    values = [10**12, 10**12 + 1, 10**12 + 2]
    rollups = {
        "count": 3,
        "total": sum(values),
        "sum_sq": sum(v * v for v in values),
        "min": values[0],
        "max": values[-1],
        "percentiles": {"50.0": float(values[1])},
        "histogram": [],
    }
    assert summary_block(rollups)["std_dev"] == 1.0
    as_float = dict(rollups, sum_sq=float(rollups["sum_sq"]))
    assert summary_block(as_float)["std_dev"] != 1.0


def test_single_sample_std_dev_is_zero_and_median_falls_back_to_midrange() -> None:
    one = summary_block(series_stat("osl", np.array([42], np.int64)))
    assert (one["std_dev"], one["median"], one["avg"]) == (0.0, 42.0, 42.0)
    no_grid = {"count": 2, "total": 6, "sum_sq": 20.0, "min": 2, "max": 4}
    assert summary_block(no_grid)["median"] == 3.0


def test_stat_survives_a_json_round_trip() -> None:
    stat = series_stat(
        "tpot_ns", np.random.default_rng(5).lognormal(15, 1, 300), early_stopping_estimates=True
    )
    assert json.loads(json.dumps(stat, allow_nan=False)) == stat


def test_non_finite_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        series_stat("tpot_ns", np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="non-finite"):
        series_stat("tpot_ns", np.array([np.nan]))


def test_an_overflowing_float_sum_is_written_as_null() -> None:
    stat = series_stat("tpot_ns", np.full(20, 1e307))
    assert stat["total"] is None and stat["sum_sq"] is None
    assert stat["max"] == 1e307
    json.dumps(stat, allow_nan=False)


def _textbook_continued_fraction(a: float, b: float, x: float) -> float:
    """NR 3rd ed. §6.4 ``betacf`` as printed: a clamp call at every factor."""

    def clamp(value: float) -> float:
        return 1e-300 if abs(value) < 1e-300 else value

    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 / clamp(1.0 - qab * x / qap)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 / clamp(1.0 + aa * d)
        c = clamp(1.0 + aa / c)
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 / clamp(1.0 + aa * d)
        c = clamp(1.0 + aa / c)
        step = d * c
        h *= step
        if abs(step - 1.0) < 3e-16:
            break
    return h


def test_continued_fraction_is_the_textbook_one_to_the_last_bit() -> None:
    # The clamp is inlined for speed (issue 23); every double must stay the
    # reference's, including near the clamp (x where 1 - (a+b)x/(a+1) is 0).
    cases = [(h, t + 1.0, q) for h in (1.0, 11.0, 459.0, 661.0, 6636.0, 99_073.0)
             for t in (0.0, 1.0, 77.0, 940.0) for q in (0.5, 0.9, 0.99, 0.999)]  # fmt: skip
    cases += [(3.0, 1.0, 1.0), (2.0, 2.0, 0.75), (1.0, 1.0, 1.0)]
    for a, b, x in cases:
        assert early_stopping._beta_continued_fraction(a, b, x) == _textbook_continued_fraction(
            a, b, x
        ), (a, b, x)


def test_remembered_searches_answer_as_fresh_ones() -> None:
    pairs = [(n, q) for n in (700, 8_000, 20_000) for q in (0.5, 0.9, 0.99)]
    early_stopping._min_passing.cache_clear()
    warm = {pair: early_stopping.over_latency_budget(*pair) for pair in pairs + pairs}
    assert early_stopping._min_passing.cache_info().hits > 0
    fresh = {}
    for pair in reversed(pairs):
        early_stopping._min_passing.cache_clear()
        fresh[pair] = early_stopping.over_latency_budget(*pair)
    assert fresh == warm
    # a domain error is raised every time, before the remembered answers
    for _ in range(2):
        with pytest.raises(ValueError):
            early_stopping.min_passing(1, 1.0)


@pytest.mark.parametrize("kind", ["ns", "tpot", "tokens"])
@pytest.mark.parametrize("block", [1, 97, 5000])
def test_a_series_read_a_block_at_a_time_is_the_whole_array_s(
    kind: str, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past GATHER samples a series is read a block at a time (issue 23):
    the same dict, bit for bit, as the whole array gives, estimates
    included; at most GATHER it is gathered and computed as an array."""
    from mlpe_fast.metrics import order_stats, series
    from mlpe_fast.metrics.order_stats import Sample

    rng = np.random.default_rng(block)
    n = 400 if block == 1 else 12_000
    values = {
        "ns": rng.integers(10**6, 10**11, n),
        "tpot": rng.lognormal(16, 1, n),
        "tokens": rng.integers(0, 5, n),
    }[kind]
    whole = series_stat("tpot_ns", values, early_stopping_estimates=True)
    sample = Sample(lambda: (values[i : i + block] for i in range(0, n, block)), values.dtype)
    assert series_stat("tpot_ns", sample, early_stopping_estimates=True) == whole
    streamed: list[int] = []
    real = series._streamed_stat
    monkeypatch.setattr(
        series,
        "_streamed_stat",
        lambda *a: streamed.append(1) or real(*a),  # type: ignore[func-returns-value]
    )
    monkeypatch.setattr(order_stats, "GATHER", 50)
    assert series_stat("tpot_ns", sample, early_stopping_estimates=True) == whole
    assert streamed and any(v is not None for v in whole["early_stopping_percentiles"].values())
