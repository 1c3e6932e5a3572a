"""MLPerf LoadGen early-stopping percentile estimates, as the reference client reports them.

The reference client adds an ``early_stopping_percentiles`` map to the
``ttft``/``tpot``/``latency`` blocks of ``result_summary.json`` and to the
matching series of ``metrics/final_snapshot.json`` (spec §1.6, §3.3, §3.5;
reference-client.md §2.2).  Definitions from the reference client
(mlcommons/endpoints @ ea332753, ``src/inference_endpoint/metrics/early_stopping.py``
and ``docs/early_stopping.md``), which port LoadGen's SingleStream estimate
(``loadgen/early_stopping.cc``, ``results.cc``):

* confidence ``c = 0.99`` and tolerance ``d = 0`` are constants, not settings;
* the targets are the entries of the series' percentile grid with
  ``50 <= p < 100``, keyed by ``str()`` of the grid entry, in grid order;
* with ``n`` ascending-sorted samples and ``q = p / 100``, the estimate is
  ``sorted[n - t]``, where ``t`` is the largest over-latency budget with
  ``n >= min_passing(t) + t``; ``min_passing(t)`` is the least number ``h`` of
  under-latency samples for which ``P(<= t over-latency samples among h + t |
  over-latency rate 1 - q) = I_q(h, t + 1) < 1 - c``;
* below ``min_passing(1) + 1`` samples (p50 11, p90 64, p95 130, p99 662,
  p99.9 6636) the estimate is ``None``.

Why the numerics mirror the reference's line for line: the estimate is a
sample of the series, chosen by comparisons of ``I_q`` against ``0.01``.  A
different incomplete-beta routine (``scipy.special.betainc``, say) agrees to
~1e-15, which could still flip a comparison that sits exactly on the
boundary and select a neighbouring sample.  So ``I_x(a, b)`` here is the same
textbook evaluation the reference uses: Numerical Recipes 3rd ed. §6.4
``betai``/``betacf`` (modified Lentz continued fraction, ``eps = 3e-16``,
``fpmin = 1e-300``, at most 399 double steps), and both searches use the same
exponential bracketing and bisection, so every ``I_x`` evaluated is the same.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Final, Protocol, SupportsFloat

__all__ = (
    "CONFIDENCE",
    "MIN_TARGET_PERCENTILE",
    "SortedSamples",
    "estimate",
    "estimate_targets",
    "min_passing",
    "min_sample_count",
    "over_latency_budget",
)

#: LoadGen's fixed confidence (``results.cc``); the reference exposes no knob.
CONFIDENCE: Final[float] = 0.99
#: Grid entries below the median are not tail certifications and get no estimate.
MIN_TARGET_PERCENTILE: Final[float] = 50.0


class SortedSamples(Protocol):
    """Ascending samples indexable by position: a list, a tuple or a 1-d numpy array."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> SupportsFloat: ...


# Numerical Recipes continued-fraction constants (see the module docstring).
_CF_EPS: Final[float] = 3e-16
_CF_FPMIN: Final[float] = 1e-300
_CF_MAX_STEPS: Final[int] = 400  # range(1, 400): at most 399 double steps


def estimate_targets(grid: Iterable[float | str]) -> dict[str, float]:
    """``{key: percentile}`` for the grid entries that get an estimate.

    Keys are ``str()`` of the grid entries as given (so the default float grid
    keys ``"99.9"``, ``"90.0"``, ``"50.0"``), in grid order; entries below
    :data:`MIN_TARGET_PERCENTILE` and at or above 100 are left out (p100 is
    outside the binomial test's domain).
    """
    targets: dict[str, float] = {}
    for entry in grid:
        percentile = float(entry)
        if MIN_TARGET_PERCENTILE <= percentile < 100.0:
            targets[str(entry)] = percentile
    return targets


def _clamp_tiny(value: float) -> float:
    return _CF_FPMIN if abs(value) < _CF_FPMIN else value


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of ``I_x(a, b)`` by modified Lentz (NR 3rd ed. §6.4 ``betacf``).

    Each step applies the even term ``d_2m`` and then the odd term ``d_2m+1``;
    convergence is judged on the odd step's factor.  Hitting the step cap
    returns the truncated value (it only happens near the distribution's
    middle, far from the ``0.01`` the callers compare with).

    The loop clamps inline (``fpmin if -fpmin < v < fpmin else v``, the same
    test as :func:`_clamp_tiny`) rather than calling it: the same operations
    in the same order, so the same doubles, at half the cost; a run's
    summaries evaluate this loop some 400,000 times (issue 23).
    """
    fpmin = _CF_FPMIN
    a_plus_b = a + b
    a_plus_1 = a + 1.0
    a_minus_1 = a - 1.0
    numerator_factor = 1.0
    denominator_factor = 1.0 / _clamp_tiny(1.0 - a_plus_b * x / a_plus_1)
    result = denominator_factor
    for m in range(1, _CF_MAX_STEPS):
        two_m = 2 * m
        even_term = m * (b - m) * x / ((a_minus_1 + two_m) * (a + two_m))
        value = 1.0 + even_term * denominator_factor
        denominator_factor = 1.0 / (fpmin if -fpmin < value < fpmin else value)
        value = 1.0 + even_term / numerator_factor
        numerator_factor = fpmin if -fpmin < value < fpmin else value
        result *= denominator_factor * numerator_factor
        odd_term = -(a + m) * (a_plus_b + m) * x / ((a + two_m) * (a_plus_1 + two_m))
        value = 1.0 + odd_term * denominator_factor
        denominator_factor = 1.0 / (fpmin if -fpmin < value < fpmin else value)
        value = 1.0 + odd_term / numerator_factor
        numerator_factor = fpmin if -fpmin < value < fpmin else value
        step = denominator_factor * numerator_factor
        result *= step
        if -_CF_EPS < step - 1.0 < _CF_EPS:
            break
    return result


def _regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b)`` (NR 3rd ed. §6.4 ``betai``).

    The prefactor ``x^a (1-x)^b / B(a, b)`` goes through ``lgamma`` so it
    cannot overflow; the continued fraction is evaluated directly below
    ``x = (a + 1) / (a + b + 2)`` and through ``I_x(a, b) = 1 - I_{1-x}(b, a)``
    above, where it converges faster.
    """
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_prefactor = (
        math.lgamma(a + b)
        - math.lgamma(a)
        - math.lgamma(b)
        + a * math.log(x)
        + b * math.log(1.0 - x)
    )
    prefactor = math.exp(log_prefactor)
    if x < (a + 1.0) / (a + b + 2.0):
        return prefactor * _beta_continued_fraction(a, b, x) / a
    return 1.0 - prefactor * _beta_continued_fraction(b, a, 1.0 - x) / b


def _odds(under: int, over: int, fraction: float) -> float:
    """``P(<= over over-latency samples among under + over)`` at rate ``1 - fraction``.

    By the binomial-CDF/incomplete-beta identity this is
    ``I_fraction(under, over + 1)`` (LoadGen ``odds()`` with tolerance 0).
    """
    return _regularized_incomplete_beta(under, 1 + over, fraction)


def _check_domain(fraction: float, confidence: float) -> None:
    # fraction >= 1 makes the odds identically 1 and the doubling search endless.
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"percentile fraction must be in (0, 1), got {fraction}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def min_passing(over: int, fraction: float, confidence: float = CONFIDENCE) -> int:
    """Least ``h`` with ``odds(h, over) < 1 - confidence`` (LoadGen ``MinPassingQueriesFinder``).

    ``fraction`` is the percentile as a fraction (0.99 for p99).  The odds fall
    as ``h`` grows, so doubling brackets the boundary and bisection finds it;
    e.g. ``min_passing(0, 0.99) == 459`` and ``min_passing(1, 0.99) == 661``.
    """
    _check_domain(fraction, confidence)
    return _min_passing(over, fraction, confidence)


# The answer depends on its three numbers only, never on the samples, and the
# searches ask the same ones again: each series of a point (TTFT, TPOT,
# latency: the same n, or nearly) and each point of a curve walks the same
# bisection.  Remembering them makes the second series free (issue 23: the
# summaries' estimates were a third of a point's end-of-run CPU).  A few
# hundred entries per percentile at most; the bound only guards a long sweep.
@functools.lru_cache(maxsize=16_384)
def _min_passing(over: int, fraction: float, confidence: float) -> int:
    threshold = 1.0 - confidence
    low, high = 1, 2
    while _odds(high, over, fraction) >= threshold:
        high *= 2
    while low < high:
        middle = (low + high) // 2
        if _odds(middle, over, fraction) < threshold:
            high = middle
        else:
            low = middle + 1
    return low


def over_latency_budget(n: int, fraction: float, confidence: float = CONFIDENCE) -> int:
    """Largest ``t >= 1`` with ``n >= min_passing(t) + t``; 0 when even ``t = 1`` does not fit.

    The estimate is then the ``t``-th highest of the ``n`` samples (LoadGen
    SingleStream, ``results.cc``).  The slack ``n - min_passing(t) - t`` falls
    as ``t`` grows, hence the same doubling and bisection as :func:`min_passing`.
    """
    if min_passing(1, fraction, confidence) + 1 > n:
        return 0
    low, high = 1, 2
    while min_passing(high, fraction, confidence) + high <= n:
        high *= 2
    while low < high - 1:
        middle = (low + high) // 2
        if min_passing(middle, fraction, confidence) + middle <= n:
            low = middle
        else:
            high = middle
    return low


def _fraction_of(percentile: float) -> float:
    # Grid convention (0-100) everywhere; a fraction such as 0.99 is a caller bug.
    if not 1.0 <= percentile < 100.0:
        raise ValueError(f"percentile must be in [1, 100) (grid convention), got {percentile}")
    return percentile / 100.0


def min_sample_count(percentile: float, confidence: float = CONFIDENCE) -> int:
    """Fewest samples for which ``percentile`` (0-100) gets an estimate.

    ``min_passing(1) + 1``: 11 for p50, 64 for p90, 130 for p95, 662 for p99,
    6636 for p99.9 (reference ``docs/early_stopping.md`` cheat sheet).
    """
    return min_passing(1, _fraction_of(percentile), confidence) + 1


def estimate(
    sorted_values: SortedSamples,
    percentile: float,
    confidence: float = CONFIDENCE,
) -> float | None:
    """Early-stopping estimate of ``percentile`` (0-100) over ascending ``sorted_values``.

    ``None`` below :func:`min_sample_count` samples; otherwise the ``t``-th
    highest sample as a float (``t`` from :func:`over_latency_budget`), which is
    never below the ``method="lower"`` percentile of the same samples.
    """
    fraction = _fraction_of(percentile)
    n = len(sorted_values)
    if n < min_passing(1, fraction, confidence) + 1:
        return None
    budget = over_latency_budget(n, fraction, confidence)
    return float(sorted_values[n - budget])
