"""The steady-state window of a performance point and its ``point.yaml`` block.

Spec §1.4 (``mlperf-endpoints-spec.md``) makes the steady-state window the
official basis of a fixed-concurrency point: the figures are taken over a run
of whole *super-passes* (contiguous issue-order blocks of one dataset pass),
the throughput denominator is the window's **issue-time** span
(``last_issue - first_issue``, so the drain is left out without an end crop),
and the latency figures use the full lifetime of the queries issued in it.
The result is official only with status ``windowable``: at least
:data:`MIN_TREND_N` super-passes, every gating metric a ``Plateau``, and an
issue-time span of at least the §2.4 minimum.  Nothing else writes the
``steady_state`` block of ``point.yaml`` (spec §3.6), so
:meth:`SteadyState.to_point_yaml` gives the mapping the checker
(``endpoints-submission-cli`` 1.5.3.0, ``models/file/steady_state.py`` and the
``steady-state-valid`` / ``-consistency`` rules of ``point_config.py``, spec
§4.2) validates.

The detector follows the reference client's outline (spec §1.4; the reference's
``docs/steady-state-detection.md`` §5.3-5.6 and
``docs/steady_state_diagnostics.md`` in mlcommons/endpoints).  Theory of
operation, in order:

1. **Super-passes.**  Query ``i`` (issue order) belongs to super-pass
   ``i // super_pass_size`` (default: the dataset size).  Per super-pass the
   gating series are TPOT p50 and p90, the diagnostic series TTFT p50 and p90
   (``numpy.percentile(..., method="lower")``, spec §1.3), over the queries that
   completed.  A super-pass with no TPOT sample makes every window holding it
   inadmissible: an absent metric never fakes convergence.
2. **Guarded drain-tail cut.**  The last super-pass is left out when it is
   incomplete (fewer queries than a super-pass; it is not a representative
   workload mix) or when its issue span is under :data:`TAIL_SPAN_RATIO` of the
   median span of the others (issuance was cut short).  Only measured evidence
   cuts, and never more than that one super-pass.
3. **Adaptive warm-up crop** (reference ``adaptive_warmup``): the steady level
   is the median TPOT p50 of the back half of the run; leading super-passes
   whose TPOT p50 is more than :data:`WARMUP_BAND` (relative) away from it, in
   either direction, are dropped, at most half the run.  Deviation, documented:
   a would-be warm-up that ends in a *level* -- at least
   :data:`LEVEL_PREFIX_MIN` super-passes that are flat under the tight CoV
   bounds and have no practically large trend -- is kept, because a transient
   does not hold still for that long; the reference would crop a level shift
   in the first half of the run as warm-up and so hide it, against its own
   rule that level shifts are flagged, never hidden (design doc §5.5).
4. **Plateaus** (reference ``window_admissible`` / ``segment_plateaus``).  A
   window of at least :data:`MIN_TREND_N` super-passes is *admissible* when,
   for each gating metric, the trend test does not find a practically large
   trend and the coefficient of variation is at most :data:`COV_ADMISSIBLE`.
   The per-metric state is ``Drifting Up``/``Drifting Down`` when the
   Mann-Kendall test with the Hamed-Rao correction is significant at
   :data:`ALPHA` **and** the OLS end-to-end change is at least
   :data:`TREND_REL_DRIFT_MIN` of the median (the reference's effect-size
   floor: a significant but tiny drift does not fragment a plateau), else
   ``Plateau``.  Windows grow from the left while admissible; a maximal one is
   a plateau and the search resumes after it.  Deviation, documented: when a
   confirmed level shift (point 6) starts inside a grown plateau, the plateau
   is cut at the change point, so a step is not averaged into the level before
   it (a small step never breaks the CoV bound, and a step's ranks look
   autocorrelated, so Hamed-Rao alone does not break on it either).
5. **Selection** (MSER-style, never chosen by throughput): the first plateau
   whose issue-time span clears the minimum duration is reported.  The minimum
   is the reference's ``max(floor, relaxation, precision)``: the floor is
   ``min_duration_s`` (§2.4: 600 s at concurrency <= 32, 1200 s above), the
   relaxation term :data:`RELAXATION_MULT` x the window's p90 query latency,
   the precision term ``k* x`` the median super-pass span when
   ``k* = ceil((1.96 CoV_b / 0.05)^2)`` (``CoV_b`` of TPOT p50) exceeds
   :data:`MIN_TREND_N` (reference ``min_steady_duration``).
6. **Level shift** (Pettitt).  Over the TPOT p50 series from the window's
   start to the end of the run, a level shift is confirmed when Pettitt's test
   is significant at :data:`ALPHA`, the mean after the change point (placed
   by least squares) differs from the mean before it by more than
   :data:`LEVEL_BAND`, and a two-level model at the change point fits better
   (smaller squared error) than a straight line -- Pettitt also fires on a
   drift, which is reported as a drift, not a level shift (deviation,
   documented; the reference asks for a second admissible plateau instead,
   which a drift cut into short plateaus also provides).

What the three CoV bounds of the reference (0.03 / 0.05 / 0.08) do here:
``0.08`` (:data:`COV_ADMISSIBLE`) is the admissibility bound for every gating
metric -- the reference passes a window when any setting of its ensemble
certifies it, which is the loosest bound; ``0.03`` for TPOT p50 and ``0.05``
for TPOT p90 (:data:`COV_TIGHT`, looser toward the tail, design doc §5.5) decide
whether a would-be warm-up is a level (point 3); ``0.05`` is also the level
band of point 6, the warm-up band and the effect-size floor, as in the
reference.

Status and verdict (the checker allows ``windowable`` only with at least
:data:`MIN_TREND_N` super-passes and no drifting state, and
``insufficient_passes`` only with fewer):

* ``partial_dataset``: fewer than one dataset pass issued or completed
  (spec §2.4); best effort over everything issued, verdict ``not found``.
* ``insufficient_passes``: fewer than :data:`MIN_TREND_N` whole super-passes
  left after the cuts; the window is what is left, no trend is tested.
* ``windowable``: a plateau clears the minimum duration.  Verdict ``anomaly``
  when a level shift follows it, else ``drifting_up``/``drifting_down`` when
  a gating metric drifts from the window's start to the end of the run (the
  window is a local plateau: the reference's drift warning), else
  ``STEADY STATE``.
* ``insufficient_duration``: otherwise -- no admissible window of the required
  duration exists.  The window is the longest plateau (verdict ``anomaly`` or
  ``STEADY STATE``), or, when none or a drift is found, every super-pass left
  after the cuts, with ``drifting_up``/``drifting_down``/``anomaly``/``not
  found`` from the trend and level-shift tests over it.

TTFT is a diagnostic only (spec §1.4: the definition table gates on TPOT p50
and p90): its states are in :attr:`SteadyState.diagnostic_state` and a TTFT
climb is in :attr:`SteadyState.drifting_up`, never in ``point.yaml``'s
``state`` (the checker treats every entry there as gating).

Statistics, implemented here (no scipy):

* Mann-Kendall ``S``, its variance with ties ``[n(n-1)(2n+5) - sum t(t-1)(2t+5)]/18``,
  ``Z = (S - sgn S)/sqrt(Var)``, two-sided normal p (Mann 1945, Kendall 1975;
  Gilbert 1987);
* Hamed & Rao (1998), J. Hydrology 204:182-196: ``Var* = Var x n/n*`` with
  ``n/n* = 1 + 2/(n(n-1)(n-2)) sum_k (n-k)(n-k-1)(n-k-2) rho_k`` over the lags
  whose rank autocorrelation ``rho_k`` of the Sen-detrended series is outside
  ``+-z(1-alpha/2)/sqrt(n)``; a non-positive factor falls back to 1 (the
  reference's guard against over-correction);
* Sen's (1968) slope: median of pairwise slopes;
* Pettitt (1979), Appl. Statist. 28:126-135: ``U_t = sum_{i<=t} sum_{j>t}
  sgn(x_i - x_j) = 2 sum_{i<=t} r_i - t(n+1)``, ``K = max |U_t|``,
  ``p ~= 2 exp(-6K^2/(n^3 + n^2))``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from statistics import NormalDist
from typing import Any, Final, Literal, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from . import order_stats
from .order_stats import Sample, lower_ranks, order_statistics
from .stats import Distribution, distribution

__all__ = (
    "ALPHA",
    "COV_ADMISSIBLE",
    "COV_BOUNDS",
    "COV_TIGHT",
    "DIAGNOSTIC_METRICS",
    "GATING_METRICS",
    "LEVEL_BAND",
    "LEVEL_PREFIX_MIN",
    "MIN_TREND_N",
    "RELAXATION_MULT",
    "STATES",
    "STATUSES",
    "TAIL_SPAN_RATIO",
    "TREND_REL_DRIFT_MIN",
    "VERDICTS",
    "WARMUP_BAND",
    "Anomaly",
    "ChangePoint",
    "MinDuration",
    "PointQueries",
    "SteadyState",
    "SuperPass",
    "TrendTest",
    "Window",
    "WindowFigures",
    "default_min_duration_s",
    "detect_steady_state",
    "mann_kendall",
    "pettitt",
)

#: The trend test's floor: a window spans at least this many super-passes
#: (spec §1.4 ``MIN_TREND_N``; the checker's ``MIN_TREND_N``).
MIN_TREND_N: Final = 4
#: Significance level of the Mann-Kendall/Hamed-Rao and Pettitt tests (spec §1.4).
ALPHA: Final = 0.05
#: The reference's CoV ensemble (spec §1.4); see the module docstring for each one's use.
COV_BOUNDS: Final = (0.03, 0.05, 0.08)
#: Admissibility bound for every gating metric: the loosest of the ensemble.
COV_ADMISSIBLE: Final = 0.08
#: Tight bounds per gating metric, for telling a level from a warm-up.
COV_TIGHT: Final[dict[str, float]] = {"tpot_p50": 0.03, "tpot_p90": 0.05}
#: Warm-up band around the back-half median of TPOT p50 (spec §1.4).
WARMUP_BAND: Final = 0.05
#: The warm-up crop takes at most this fraction of the super-passes (spec §1.4).
WARMUP_MAX_FRACTION: Final = 0.5
#: A flat run of this many super-passes is a level, not a warm-up (point 3).
LEVEL_PREFIX_MIN: Final = 2 * MIN_TREND_N
#: Relative end-to-end change below which a significant trend does not count
#: (reference ``TREND_REL_DRIFT_MIN``).
TREND_REL_DRIFT_MIN: Final = 0.05
#: Relative level difference above which a change point is a level shift.
LEVEL_BAND: Final = 0.05
#: The last super-pass is cut when its issue span is below this fraction of the others'.
TAIL_SPAN_RATIO: Final = 0.5
#: Relaxation term of the minimum duration: this many p90 query lifetimes
#: (reference ``MIN_DUR_RELAX_MULT``).
RELAXATION_MULT: Final = 5.0
#: Precision target of the minimum duration (reference ``MIN_DUR_EPS``) and its z.
PRECISION_EPS: Final = 0.05
PRECISION_Z: Final = 1.96
#: §2.4 minimum issue-time span (s) at concurrency <= 32 and above.
MIN_DURATION_LOW_S: Final = 600.0
MIN_DURATION_HIGH_S: Final = 1200.0
LOW_CONCURRENCY_MAX: Final = 32

#: Gating and diagnostic per-super-pass series (TPOT / TTFT at p50 and p90).
GATING_METRICS: Final = ("tpot_p50", "tpot_p90")
DIAGNOSTIC_METRICS: Final = ("ttft_p50", "ttft_p90")

PLATEAU: Final = "Plateau"
DRIFTING_UP: Final = "Drifting Up"
DRIFTING_DOWN: Final = "Drifting Down"
STATES: Final = (PLATEAU, DRIFTING_UP, DRIFTING_DOWN)

WINDOWABLE: Final = "windowable"
INSUFFICIENT_DURATION: Final = "insufficient_duration"
INSUFFICIENT_PASSES: Final = "insufficient_passes"
PARTIAL_DATASET: Final = "partial_dataset"
STATUSES: Final = (WINDOWABLE, INSUFFICIENT_DURATION, INSUFFICIENT_PASSES, PARTIAL_DATASET)

STEADY: Final = "STEADY STATE"
VERDICT_UP: Final = "drifting_up"
VERDICT_DOWN: Final = "drifting_down"
ANOMALY: Final = "anomaly"
NOT_FOUND: Final = "not found"
VERDICTS: Final = (STEADY, VERDICT_UP, VERDICT_DOWN, ANOMALY, NOT_FOUND)

_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]


#: Queries read at a time by :meth:`_Run.samples`.
_READ_QUERIES = 65_536


class QueryColumn(Protocol):
    """One column of :class:`PointQueries`: a numpy array, or a store that
    reads a slice back as one (``engine/spill.py``'s ``SpilledArray``: a
    long point's columns on disk, issue 23).  The detector only ever reads
    slices of it."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice) -> npt.NDArray[Any]: ...


# --------------------------------------------------------------------------- statistics


class TrendTest(msgspec.Struct, frozen=True):
    """A Mann-Kendall test (see the module docstring for the formulas).

    ``var_s`` is the tie-corrected variance of ``S`` under no trend,
    ``correction`` the Hamed-Rao factor ``n/n*`` it was multiplied by (1.0
    when not applied), ``slope`` Sen's slope per step, ``trend`` the sign of
    ``S`` when ``p < alpha``.
    """

    n: int
    s: int
    var_s: float
    correction: float
    z: float
    p: float
    slope: float
    trend: Literal["up", "down", "none"]


class ChangePoint(msgspec.Struct, frozen=True):
    """Pettitt's test: ``k = max |U_t|``, ``index`` = the ``t`` reaching it
    (the size of the first segment, so the new level starts at ``x[index]``;
    0 when ``n < 2``) and the approximate two-sided p-value."""

    n: int
    k: float
    index: int
    p: float


def _average_ranks(x: _F64) -> _F64:
    """1-based ranks, tied values sharing the average of their ranks."""
    n = x.size
    order = np.argsort(x, kind="mergesort")
    ordered = x[order]
    new_group = np.empty(n, np.bool_)
    new_group[:1] = True
    new_group[1:] = ordered[1:] != ordered[:-1]
    group = np.cumsum(new_group) - 1
    starts = np.flatnonzero(new_group)
    ends = np.append(starts[1:], n)  # exclusive
    mean_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(n, np.float64)
    ranks[order] = mean_rank[group]
    return ranks


def _pairs(x: _F64) -> tuple[int, _F64]:
    """Mann-Kendall's ``S`` (the sum of ``sign(x[j] - x[i])`` over ``i < j``)
    and every pair's slope ``(x[j] - x[i]) / (j - i)``, in blocks of rows:
    one array of ``n(n-1)/2`` slopes, not beside the pairs' two index arrays
    and their differences (issue 23: a run of a thousand super-passes held
    25 MB in each test of a window, now 4 MB and a block).  The signs are
    the differences', taken before the division."""
    n = x.size
    slopes = np.empty(n * (n - 1) // 2, np.float64)
    columns = np.arange(n)
    rows = max(1, _PAIR_BLOCK // n)
    s = at = 0
    for lo in range(0, n - 1, rows):
        first = np.arange(lo, min(n - 1, lo + rows))
        lags = columns[None, :] - first[:, None]
        later = lags > 0  # the pairs (i, j) with i in this block, j > i
        diff = (x[None, :] - x[first, None])[later]
        s += int(np.count_nonzero(diff > 0)) - int(np.count_nonzero(diff < 0))
        np.divide(diff, lags[later], out=slopes[at : at + diff.size])
        at += diff.size
    return s, slopes


#: Pairs of a series handled at a time by :func:`_pairs` (about 1 MB each
#: of the block's arrays).
_PAIR_BLOCK = 131_072


def _median_slope(slopes: _F64) -> float:
    # in place: the slopes are not needed after (their median is the same)
    return float(np.median(slopes, overwrite_input=True))


def _two_sided_p(z: float) -> float:
    # 2 (1 - Phi(|z|)) = erfc(|z| / sqrt 2), without cancellation in the tail.
    return math.erfc(abs(z) / math.sqrt(2.0))


def mann_kendall(
    values: Sequence[float] | _F64, *, alpha: float = ALPHA, hamed_rao: bool = True
) -> TrendTest:
    """The Mann-Kendall trend test, by default with the Hamed-Rao correction.

    Hamed-Rao: the ranks of the series detrended by Sen's slope are
    autocorrelated at lags ``1 .. n-1``; the lags outside the
    ``z(1-alpha/2)/sqrt(n)`` band inflate (or deflate) the variance of ``S``
    so serial correlation does not fake a trend.  Needs ``n >= 3`` (else no
    correction); with ``n < 2`` or all values tied there is no trend.

    Raises:
        ValueError: a value is not finite.
    """
    x = np.asarray(values, dtype=np.float64)
    if not np.isfinite(x).all():
        raise ValueError("mann_kendall needs finite values")
    n = int(x.size)
    if n < 2:
        return TrendTest(n, 0, 0.0, 1.0, 0.0, 1.0, 0.0, "none")
    s, slopes = _pairs(x)
    _, ties = np.unique(x, return_counts=True)
    tie_term = float(np.sum(ties * (ties - 1) * (2 * ties + 5)))
    var_s = (n * (n - 1) * (2 * n + 5) - tie_term) / 18.0
    slope = _median_slope(slopes)
    del slopes
    correction = 1.0
    if hamed_rao and n >= 3 and var_s > 0:
        ranks = _average_ranks(x - slope * np.arange(1, n + 1))
        dev = ranks - ranks.mean()
        denom = float(dev @ dev)
        if denom > 0:
            # rho_k = sum_t dev_t dev_{t+k} / sum dev^2, k = 1 .. n-1
            rho = np.correlate(dev, dev, "full")[n:] / denom
            bound = NormalDist().inv_cdf(1.0 - alpha / 2.0) / math.sqrt(n)
            k = np.arange(1, n)
            weight = (n - k) * (n - k - 1) * (n - k - 2)
            significant = np.abs(rho) > bound
            total = float(np.sum(weight[significant] * rho[significant]))
            correction = 1.0 + 2.0 / (n * (n - 1) * (n - 2)) * total
            if correction <= 0:
                correction = 1.0
    var = var_s * correction
    # continuity-corrected: Z = (S - sgn S) / sqrt(Var)
    z = 0.0 if var <= 0 or s == 0 else (s - math.copysign(1.0, s)) / math.sqrt(var)
    p = _two_sided_p(z)
    trend: Literal["up", "down", "none"] = "none"
    if p < alpha:
        trend = "up" if s > 0 else "down"
    return TrendTest(n, s, var_s, correction, z, p, slope, trend)


def pettitt(values: Sequence[float] | _F64) -> ChangePoint:
    """Pettitt's single change-point test (see the module docstring).

    Raises:
        ValueError: a value is not finite.
    """
    x = np.asarray(values, dtype=np.float64)
    if not np.isfinite(x).all():
        raise ValueError("pettitt needs finite values")
    n = int(x.size)
    if n < 2:
        return ChangePoint(n, 0.0, 0, 1.0)
    t = np.arange(1, n)
    u = 2.0 * np.cumsum(_average_ranks(x))[:-1] - t * (n + 1)
    at = int(np.argmax(np.abs(u)))
    k = float(abs(u[at]))
    p = min(1.0, 2.0 * math.exp(-6.0 * k * k / (n**3 + n**2)))
    return ChangePoint(n, k, int(t[at]), p)


def _cov(x: _F64) -> float:
    """Population coefficient of variation (reference ``cov``)."""
    mean = float(x.mean())
    return float(x.std()) / abs(mean) if mean != 0 else math.inf


def _rel_drift(x: _F64) -> float:
    """OLS end-to-end change over the median: the reference's effect size."""
    n = x.size
    steps = np.arange(n, dtype=np.float64)
    steps -= steps.mean()
    slope = float(steps @ (x - x.mean())) / float(steps @ steps)
    median = float(np.median(x))
    return slope * (n - 1) / (median if median != 0 else 1e-9)


def _state(x: _F64) -> str:
    """Per-metric state: a trend counts when significant and practically large."""
    test = mann_kendall(x)
    if test.trend == "none" or abs(_rel_drift(x)) < TREND_REL_DRIFT_MIN:
        return PLATEAU
    return DRIFTING_UP if test.trend == "up" else DRIFTING_DOWN


def _level_shift(x: _F64) -> tuple[int, float, ChangePoint] | None:
    """A confirmed level shift in ``x``: (first index of the new level,
    relative change, Pettitt's test), or None (module docstring, point 6).

    Pettitt's test decides whether there is a change; its ``argmax |U_t|``
    can land a few points early when the last values of the old level
    happen to be its largest, so the change is placed at the split that
    minimises the two-level squared error, the least-squares estimate of a
    single mean shift (Hinkley 1970, Biometrika 57:1-17).
    """
    n = x.size
    if n < 3 or not np.isfinite(x).all():
        return None
    cp = pettitt(x)
    if cp.p >= ALPHA:
        return None
    t = np.arange(1, n)
    head = np.cumsum(x)[:-1]
    total = float(x.sum())
    # SSE(t) = sum x^2 - head_t^2 / t - (total - head_t)^2 / (n - t)
    explained = head**2 / t + (total - head) ** 2 / (n - t)
    split = int(t[int(np.argmax(explained))])
    before, after = x[:split], x[split:]
    base = float(before.mean())
    if base == 0:
        return None
    delta = (float(after.mean()) - base) / base
    if abs(delta) <= LEVEL_BAND:
        return None
    sse_step = float(((before - base) ** 2).sum() + ((after - after.mean()) ** 2).sum())
    steps = np.arange(n, dtype=np.float64)
    slope, intercept = np.polyfit(steps, x, 1)
    sse_line = float(((x - (slope * steps + intercept)) ** 2).sum())
    if sse_step >= sse_line:
        return None
    return split, delta, cp


# --------------------------------------------------------------------------- input


class PointQueries(msgspec.Struct, frozen=True):
    """The queries of one performance point, in issue order, as columns.

    ``t_issue_ns``: issue time; ``t_done_ns``: completion time, ``-1`` for a
    query that did not complete successfully; ``ttft_ns`` and ``tpot_ns``: the
    query's TTFT and TPOT sample (spec §1.1-1.2), NaN when it has none;
    ``osl``: output tokens, ``-1`` when not counted.  Only completed queries
    contribute samples.  Build from Python values with :meth:`from_columns`.
    Each column is a numpy array or a store read a slice at a time
    (:class:`QueryColumn`).

    Raises:
        ValueError: the columns differ in length.
    """

    t_issue_ns: QueryColumn
    t_done_ns: QueryColumn
    ttft_ns: QueryColumn
    tpot_ns: QueryColumn
    osl: QueryColumn

    def __post_init__(self) -> None:
        n = len(self.t_issue_ns)
        for name in ("t_done_ns", "ttft_ns", "tpot_ns", "osl"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries, expected {n}")

    def __len__(self) -> int:
        return len(self.t_issue_ns)

    @classmethod
    def from_columns(
        cls,
        t_issue_ns: Sequence[int],
        t_done_ns: Sequence[int | None],
        ttft_ns: Sequence[float | None],
        tpot_ns: Sequence[float | None],
        osl: Sequence[int | None],
    ) -> PointQueries:
        """Columns with ``None`` for absent values.  TPOT samples that are not
        finite and positive are dropped, as spec §1.2 says."""
        tpot = np.array([np.nan if v is None else v for v in tpot_ns], np.float64)
        tpot[~(np.isfinite(tpot) & (tpot > 0))] = np.nan
        return cls(
            t_issue_ns=np.asarray(t_issue_ns, np.int64),
            t_done_ns=np.array([-1 if v is None else v for v in t_done_ns], np.int64),
            ttft_ns=np.array([np.nan if v is None else v for v in ttft_ns], np.float64),
            tpot_ns=tpot,
            osl=np.array([-1 if v is None else v for v in osl], np.int64),
        )


# --------------------------------------------------------------------------- output


class SuperPass(msgspec.Struct, frozen=True):
    """One super-pass: counts, issue span and its per-pass percentiles (ns;
    None without samples).  ``complete`` is False for a trailing partial pass."""

    index: int
    complete: bool
    n_issued: int
    n_completed: int
    first_issue_ns: int
    last_issue_ns: int
    tpot_p50_ns: float | None
    tpot_p90_ns: float | None
    ttft_p50_ns: float | None
    ttft_p90_ns: float | None


class Window(msgspec.Struct, frozen=True):
    """The checker's ``window``: super-passes ``super_pass_start`` ..
    ``super_pass_end`` inclusive (0-based, counted from the first measured
    query), completed queries in it (``n_samples``), issue-time span (s)."""

    super_pass_start: int
    super_pass_end: int
    super_pass_size: int
    n_samples: int
    duration_s: float

    @property
    def super_passes(self) -> int:
        return self.super_pass_end - self.super_pass_start + 1


class WindowFigures(msgspec.Struct, frozen=True):
    """The point's figures over the window (spec §1.4): ``system_tps`` =
    output tokens of its completed queries / its issue-time span (None without
    a span or token counts), ``tps_per_user = 1000 / tpot_p90_ms`` (spec §1.1);
    TTFT, TPOT and latency distributions over the queries issued in it
    (reference grid, ``method="lower"``)."""

    n_issued: int
    n_completed: int
    duration_s: float
    osl_total: int
    tokens_complete: bool
    system_tps: float | None
    tps_per_user: float | None
    ttft: Distribution | None
    tpot: Distribution | None
    latency: Distribution | None


class Anomaly(msgspec.Struct, frozen=True):
    """A confirmed level shift after the window's start: the first super-pass
    of the new level, the signed TPOT p50 change in percent (+ = slower), the
    Pettitt statistic and p-value, and every plateau found (inclusive pairs)."""

    change_point_super_pass: int
    delta_pct: float
    pettitt_k: float
    pettitt_p: float
    plateaus: tuple[tuple[int, int], ...]


class MinDuration(msgspec.Struct, frozen=True):
    """The minimum issue-time span a window needed (module docstring, point 5)."""

    required_s: float
    window_s: float
    floor_s: float
    relaxation_s: float
    precision_s: float
    dominant: Literal["floor", "relaxation", "precision"]
    kstar: int
    cov_b: float
    tau_sp_s: float
    latency_p90_s: float


class SteadyState(msgspec.Struct, frozen=True):
    """The detector's result; :meth:`to_point_yaml` is the ``point.yaml`` block.

    ``state`` holds the gating metrics only; ``diagnostic_state`` TTFT over
    the same window; ``drifting_up`` the TPOT/TTFT series that climb from the
    window's start to the end of the run.  ``warmup_passes`` super-passes were
    cropped, ``tail_cut`` says why the last one was cut (None when not);
    ``plateaus`` are inclusive super-pass pairs; ``reason`` explains the
    status in words.
    """

    status: str
    verdict: str
    state: dict[str, str]
    diagnostic_state: dict[str, str]
    window: Window | None
    figures: WindowFigures | None
    anomaly: Anomaly | None
    min_duration: MinDuration | None
    drifting_up: tuple[str, ...]
    plateaus: tuple[tuple[int, int], ...]
    warmup_passes: int
    tail_cut: str | None
    n_super_passes: int
    super_pass_size: int
    super_passes: tuple[SuperPass, ...]
    reason: str

    @property
    def is_official(self) -> bool:
        """Spec §1.4: only ``windowable`` makes the window the official basis."""
        return self.status == WINDOWABLE

    def to_point_yaml(self) -> dict[str, Any]:
        """The ``steady_state`` mapping of ``point.yaml`` (spec §3.6), plain
        Python values only: ``status``, ``verdict``, ``window`` (when there is
        one), ``state`` and, only on a level shift, ``anomaly``."""
        block: dict[str, Any] = {"status": self.status, "verdict": self.verdict}
        if self.window is not None:
            w = self.window
            block["window"] = {
                "super_pass_start": int(w.super_pass_start),
                "super_pass_end": int(w.super_pass_end),
                "super_pass_size": int(w.super_pass_size),
                "n_samples": int(w.n_samples),
                "duration_s": float(w.duration_s),
            }
        block["state"] = {k: str(v) for k, v in self.state.items()}
        if self.anomaly is not None:
            a = self.anomaly
            block["anomaly"] = {
                "change_point_super_pass": int(a.change_point_super_pass),
                "delta_pct": round(float(a.delta_pct), 3),
                "pettitt_p": float(a.pettitt_p),
                "plateaus": [[int(lo), int(hi)] for lo, hi in a.plateaus],
            }
        return block

    def headline(self) -> dict[str, Any]:
        """The block ``result_summary.json`` carries under
        ``mlpe_fast.steady_state`` (plain values): the status, verdict and
        reason; ``basis``, which figures are the point's official result
        (``steady_state`` only when ``windowable``, spec §1.4, else
        ``total``, the whole-run figures at the top level); the window and
        its figures (``system_tps`` over its issue-time span, ``tps_per_user
        = 1000 / tpot_p90_ms``, TTFT/TPOT p50 and p90 in ms) when there is
        one.  The top-level figures stay whole-run: the checker's
        consistency rules read them against ``duration_ns`` (spec §1.4)."""
        block = self.to_point_yaml()
        block.pop("anomaly", None)
        block.update(
            basis="steady_state" if self.is_official else "total",
            reason=self.reason,
            n_super_passes=int(self.n_super_passes),
            super_pass_size=int(self.super_pass_size),
        )
        f = self.figures
        if f is not None:

            def ms(d: Distribution | None, p: float) -> float | None:
                return None if d is None else float(d.percentile(p)) / 1e6

            block["figures"] = {
                "system_tps": f.system_tps,
                "tps_per_user": f.tps_per_user,
                "ttft_p50_ms": ms(f.ttft, 50),
                "ttft_p90_ms": ms(f.ttft, 90),
                "tpot_p50_ms": ms(f.tpot, 50),
                "tpot_p90_ms": ms(f.tpot, 90),
                "n_issued": int(f.n_issued),
                "n_completed": int(f.n_completed),
                "duration_s": float(f.duration_s),
                "osl_total": int(f.osl_total),
                "tokens_complete": bool(f.tokens_complete),
            }
        return block


def default_min_duration_s(concurrency: int) -> float:
    """Spec §2.4: the window's issue-time span must reach 600 s at concurrency
    <= 32 and 1200 s above (fixed-concurrency points; "example values, pending
    ratification")."""
    return MIN_DURATION_LOW_S if concurrency <= LOW_CONCURRENCY_MAX else MIN_DURATION_HIGH_S


# --------------------------------------------------------------------------- detector


def _lower(values: _F64, p: float) -> float:
    return float(np.percentile(values, p, method="lower"))


def _lower_of(sample: Sample, p: float) -> float:
    """:func:`_lower` of a sample read a block at a time (the same value)."""
    if len(sample) <= order_stats.GATHER:
        return _lower(sample.to_numpy(), p)
    (rank,) = lower_ranks(len(sample), [p])
    return float(order_statistics(sample, [rank])[rank])


class _Run:
    """Per-super-pass series of one point and the window computations on them.

    Index ranges ``[lo, hi)`` are in super-passes; query ``i`` is in
    super-pass ``i // size``.
    """

    def __init__(self, q: PointQueries, size: int) -> None:
        self.q = q
        self.size = size
        n = len(q)
        n_passes = -(-n // size)
        self.n_full = n // size
        self.passes: list[SuperPass] = []
        self.series: dict[str, _F64] = {
            name: np.full(n_passes, np.nan) for name in (*GATING_METRICS, *DIAGNOSTIC_METRICS)
        }
        self.first = np.zeros(n_passes, np.int64)
        self.last = np.zeros(n_passes, np.int64)
        self.n_completed = 0
        for k in range(n_passes):
            sl = slice(k * size, min(n, (k + 1) * size))
            issue = q.t_issue_ns[sl]
            n_done = int(np.count_nonzero(self.done(sl)))
            self.n_completed += n_done
            self.first[k] = int(issue.min())
            self.last[k] = int(issue.max())
            values: dict[str, float | None] = {}
            tpot, ttft = self.samples("tpot", sl), self.samples("ttft", sl)
            for samples, name, pct in (
                (tpot, "tpot_p50", 50.0),
                (tpot, "tpot_p90", 90.0),
                (ttft, "ttft_p50", 50.0),
                (ttft, "ttft_p90", 90.0),
            ):
                value = _lower(samples, pct) if samples.size else None
                values[name] = value
                if value is not None:
                    self.series[name][k] = value
            self.passes.append(
                SuperPass(
                    index=k,
                    complete=k < self.n_full,
                    n_issued=int(issue.size),
                    n_completed=n_done,
                    first_issue_ns=int(self.first[k]),
                    last_issue_ns=int(self.last[k]),
                    tpot_p50_ns=values["tpot_p50"],
                    tpot_p90_ns=values["tpot_p90"],
                    ttft_p50_ns=values["ttft_p50"],
                    ttft_p90_ns=values["ttft_p90"],
                )
            )

    def done(self, sl: slice) -> npt.NDArray[np.bool_]:
        """Which queries in ``sl`` completed."""
        done: npt.NDArray[np.bool_] = self.q.t_done_ns[sl] >= 0
        return done

    def samples(self, name: Literal["tpot", "ttft", "latency"], sl: slice) -> _F64:
        """The finite samples of the completed queries in ``sl`` (a super
        pass), in issue order, as one array."""
        return self.sample(name, sl).to_numpy()

    def sample(self, name: Literal["tpot", "ttft", "latency"], sl: slice) -> Sample:
        """The same samples, handed over :data:`_READ_QUERIES` queries at a
        time: a window of a million queries is never one array (issue 23:
        8 MB a metric and its temporaries); its percentiles are exact order
        statistics (:mod:`.order_stats`)."""
        q = self.q

        def blocks() -> Iterator[_F64]:
            for lo in range(sl.start, sl.stop, _READ_QUERIES):
                part = slice(lo, min(sl.stop, lo + _READ_QUERIES))
                t_done = q.t_done_ns[part]
                done = t_done >= 0
                if name == "latency":
                    values = (t_done[done] - q.t_issue_ns[part][done]).astype(np.float64)
                else:
                    values = (q.tpot_ns if name == "tpot" else q.ttft_ns)[part][done]
                yield values[np.isfinite(values)]

        return Sample(blocks, np.float64)

    # -- windows

    def queries(self, lo: int, hi: int) -> slice:
        return slice(lo * self.size, min(len(self.q), hi * self.size))

    def span_s(self, lo: int, hi: int) -> float:
        return (int(self.last[lo:hi].max()) - int(self.first[lo:hi].min())) / 1e9

    def states(self, lo: int, hi: int, names: Sequence[str]) -> dict[str, str]:
        """States of the named series over ``[lo, hi)``; a series with a gap
        or fewer than MIN_TREND_N points has none."""
        out: dict[str, str] = {}
        if hi - lo < MIN_TREND_N:
            return out
        for name in names:
            x = self.series[name][lo:hi]
            if np.isfinite(x).all():
                out[name] = _state(x)
        return out

    def admissible(self, lo: int, hi: int) -> bool:
        if hi - lo < MIN_TREND_N:
            return False
        for name in GATING_METRICS:
            x = self.series[name][lo:hi]
            if not np.isfinite(x).all() or _cov(x) > COV_ADMISSIBLE or _state(x) != PLATEAU:
                return False
        return True

    def is_level(self, lo: int, hi: int) -> bool:
        """Flat under the tight bounds: a level, not a warm-up transient."""
        for name in GATING_METRICS:
            x = self.series[name][lo:hi]
            if not np.isfinite(x).all() or _cov(x) > COV_TIGHT[name] or _state(x) != PLATEAU:
                return False
        return True

    def level_shift(self, lo: int, hi: int) -> tuple[int, float, ChangePoint] | None:
        found = _level_shift(self.series["tpot_p50"][lo:hi])
        if found is None:
            return None
        index, delta, cp = found
        return lo + index, delta, cp

    # -- the stages

    def tail_cut(self) -> tuple[int, str | None]:
        """Super-passes kept (whole ones, from 0) and why the tail was cut."""
        if self.n_full < len(self.passes):
            return self.n_full, "incomplete"
        m = self.n_full
        if m >= 2:
            spans = (self.last[:m] - self.first[:m]).astype(np.float64)
            typical = float(np.median(spans[: m - 1]))
            if typical > 0 and spans[m - 1] < TAIL_SPAN_RATIO * typical:
                return m - 1, "short_issue_span"
        return m, None

    def warmup(self, m: int) -> int:
        """Leading super-passes of ``[0, m)`` to crop (module docstring, point 3)."""
        driver = self.series["tpot_p50"][:m]
        if m < MIN_TREND_N:
            return 0
        back = driver[m // 2 :]
        back = back[np.isfinite(back)]
        if back.size == 0:
            return 0
        steady = float(np.median(back))
        if steady == 0:
            return 0
        cap = int(m * WARMUP_MAX_FRACTION)
        w = 0
        while w < cap and not abs(driver[w] - steady) <= WARMUP_BAND * abs(steady):
            w += 1  # a NaN driver is outside the band
        if w >= LEVEL_PREFIX_MIN:
            for j in range(w - LEVEL_PREFIX_MIN + 1):
                if self.is_level(j, w):
                    return j
        return w

    def plateaus(self, c0: int, c1: int) -> list[tuple[int, int]]:
        """Grow-from-left segmentation of ``[c0, c1)``, cut at level shifts."""
        found: list[tuple[int, int]] = []
        start = c0
        while start + MIN_TREND_N <= c1:
            hi = None
            for end in range(start + MIN_TREND_N, c1 + 1):
                if not self.admissible(start, end):
                    break
                hi = end
            if hi is None:
                start += 1
                continue
            shift = self.level_shift(start, c1)
            if shift is not None and start < shift[0] < hi:
                if shift[0] - start >= MIN_TREND_N:
                    found.append((start, shift[0]))
                start = shift[0]
                continue
            found.append((start, hi))
            start = hi
        return found

    def min_duration(self, lo: int, hi: int, floor_s: float) -> MinDuration:
        p50 = self.series["tpot_p50"][lo:hi]
        p50 = p50[np.isfinite(p50)]
        cov_b = _cov(p50) if p50.size >= 2 else 0.0
        tau = float(np.median((self.last[lo:hi] - self.first[lo:hi]) / 1e9))
        lat = self.sample("latency", self.queries(lo, hi))
        l_p90 = _lower_of(lat, 90.0) / 1e9 if len(lat) else 0.0
        kstar = MIN_TREND_N
        if math.isfinite(cov_b):
            kstar = max(math.ceil((PRECISION_Z * cov_b / PRECISION_EPS) ** 2), MIN_TREND_N)
        precision = kstar * tau if kstar > MIN_TREND_N else 0.0
        relaxation = RELAXATION_MULT * l_p90
        required = max(floor_s, relaxation, precision)
        dominant: Literal["floor", "relaxation", "precision"] = (
            "precision"
            if required == precision
            else "relaxation"
            if required == relaxation
            else "floor"
        )
        return MinDuration(
            required_s=required,
            window_s=self.span_s(lo, hi),
            floor_s=floor_s,
            relaxation_s=relaxation,
            precision_s=precision,
            dominant=dominant,
            kstar=kstar,
            cov_b=cov_b,
            tau_sp_s=tau,
            latency_p90_s=l_p90,
        )

    def window(self, lo: int, hi: int) -> tuple[Window, WindowFigures]:
        sl = self.queries(lo, hi)
        n_completed = n_counted = osl_total = 0
        for start in range(sl.start, sl.stop, _READ_QUERIES):
            part = slice(start, min(sl.stop, start + _READ_QUERIES))
            osl = self.q.osl[part][self.done(part)]
            counted = osl[osl >= 0]
            n_completed += int(osl.size)
            n_counted += int(counted.size)
            osl_total += int(counted.sum())
        duration = self.span_s(lo, hi)
        tpot_dist = distribution(self.sample("tpot", sl))
        window = Window(
            super_pass_start=lo,
            super_pass_end=hi - 1,
            super_pass_size=self.size,
            n_samples=n_completed,
            duration_s=duration,
        )
        figures = WindowFigures(
            n_issued=int(sl.stop - sl.start),
            n_completed=n_completed,
            duration_s=duration,
            osl_total=osl_total,
            tokens_complete=n_counted == n_completed,
            system_tps=float(osl_total) / duration if duration > 0 and n_counted else None,
            tps_per_user=1e9 / tpot_dist.p90 if tpot_dist is not None and tpot_dist.p90 else None,
            ttft=distribution(self.sample("ttft", sl)),
            tpot=tpot_dist,
            latency=distribution(self.sample("latency", sl)),
        )
        return window, figures


def _drift_verdict(states: dict[str, str]) -> str | None:
    values = [states.get(name) for name in GATING_METRICS]
    if DRIFTING_UP in values:
        return VERDICT_UP
    if DRIFTING_DOWN in values:
        return VERDICT_DOWN
    return None


def _inclusive(pairs: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple((lo, hi - 1) for lo, hi in pairs)


def detect_steady_state(
    queries: PointQueries,
    *,
    dataset_size: int,
    concurrency: int,
    min_duration_s: float | None = None,
    super_pass_size: int | None = None,
    warmup_passes: int | None = None,
) -> SteadyState:
    """Finds the steady-state window of one fixed-concurrency point (spec §1.4).

    Args:
        queries: the point's measured queries in issue order.
        dataset_size: queries in one dataset pass.
        concurrency: the point's concurrency (for the §2.4 minimum).
        min_duration_s: the minimum window issue-time span; default
            :func:`default_min_duration_s` (a development run may lower it).
        super_pass_size: queries per super-pass; default one dataset pass.
        warmup_passes: a fixed warm-up crop instead of the adaptive one.

    Raises:
        ValueError: a size or the concurrency is not positive, the minimum
            duration or the fixed crop is negative.
    """
    if dataset_size <= 0 or concurrency <= 0:
        raise ValueError("dataset_size and concurrency must be positive")
    size = dataset_size if super_pass_size is None else super_pass_size
    if size <= 0:
        raise ValueError("super_pass_size must be positive")
    floor_s = default_min_duration_s(concurrency) if min_duration_s is None else min_duration_s
    if floor_s < 0 or (warmup_passes is not None and warmup_passes < 0):
        raise ValueError("min_duration_s and warmup_passes must not be negative")

    n = len(queries)
    if n == 0:
        return _result(PARTIAL_DATASET, NOT_FOUND, size, reason="no measured queries", run=None)
    run = _Run(queries, size)
    n_completed = run.n_completed
    if n < dataset_size or n_completed < dataset_size:
        window, figures = run.window(0, len(run.passes))
        return _result(
            PARTIAL_DATASET,
            NOT_FOUND,
            size,
            run=run,
            window=window,
            figures=figures,
            reason=f"{n} issued and {n_completed} completed of a {dataset_size}-query dataset",
        )

    kept, tail_cut = run.tail_cut()
    crop = run.warmup(kept) if warmup_passes is None else min(warmup_passes, kept)
    c0, c1 = crop, kept
    common: dict[str, Any] = {"run": run, "warmup_passes": crop, "tail_cut": tail_cut}
    if c1 - c0 < MIN_TREND_N:
        left = run.window(c0, c1) if c1 > c0 else None
        return _result(
            INSUFFICIENT_PASSES,
            NOT_FOUND,
            size,
            window=None if left is None else left[0],
            figures=None if left is None else left[1],
            reason=f"{c1 - c0} whole super-passes after the cuts, {MIN_TREND_N} needed",
            **common,
        )

    plateaus = run.plateaus(c0, c1)
    needs = [run.min_duration(lo, hi, floor_s) for lo, hi in plateaus]
    chosen = next((i for i, need in enumerate(needs) if need.window_s >= need.required_s), None)
    common["plateaus"] = _inclusive(plateaus)

    def anomaly_after(lo: int) -> Anomaly | None:
        shift = run.level_shift(lo, c1)
        if shift is None:
            return None
        index, delta, cp = shift
        return Anomaly(index, 100.0 * delta, cp.k, cp.p, _inclusive(plateaus))

    if chosen is not None:
        lo, hi = plateaus[chosen]
        anomaly = anomaly_after(lo)
        drift = _drift_verdict(run.states(lo, c1, GATING_METRICS))
        verdict = ANOMALY if anomaly else drift or STEADY
        window, figures = run.window(lo, hi)
        return _result(
            WINDOWABLE,
            verdict,
            size,
            window=window,
            figures=figures,
            anomaly=anomaly,
            min_duration=needs[chosen],
            lo=lo,
            hi=hi,
            c1=c1,
            reason=f"plateau {chosen + 1} of {len(plateaus)}, {window.super_passes} super-passes",
            **common,
        )

    if plateaus:
        longest = max(range(len(plateaus)), key=lambda i: needs[i].window_s)
        lo, hi = plateaus[longest]
        anomaly = anomaly_after(lo)
        overall = _drift_verdict(run.states(c0, c1, GATING_METRICS))
        if anomaly is not None or overall is None:
            window, figures = run.window(lo, hi)
            need = needs[longest]
            return _result(
                INSUFFICIENT_DURATION,
                ANOMALY if anomaly else STEADY,
                size,
                window=window,
                figures=figures,
                anomaly=anomaly,
                min_duration=need,
                lo=lo,
                hi=hi,
                c1=c1,
                reason=(
                    f"longest plateau spans {need.window_s:.0f} s of issue time, "
                    f"{need.required_s:.0f} s needed ({need.dominant})"
                ),
                **common,
            )

    # No plateau clears the gate and none explains the run: report the whole
    # range after the cuts with its trend (module docstring, status list).
    overall_states = run.states(c0, c1, GATING_METRICS)
    anomaly = anomaly_after(c0)
    verdict = _drift_verdict(overall_states) or (ANOMALY if anomaly else NOT_FOUND)
    window, figures = run.window(c0, c1)
    return _result(
        INSUFFICIENT_DURATION,
        verdict,
        size,
        window=window,
        figures=figures,
        anomaly=anomaly if verdict == ANOMALY else None,
        min_duration=run.min_duration(c0, c1, floor_s),
        lo=c0,
        hi=c1,
        c1=c1,
        reason="no admissible plateau" if not plateaus else "the run drifts",
        **common,
    )


def _result(
    status: str,
    verdict: str,
    size: int,
    *,
    run: _Run | None,
    reason: str,
    window: Window | None = None,
    figures: WindowFigures | None = None,
    anomaly: Anomaly | None = None,
    min_duration: MinDuration | None = None,
    lo: int | None = None,
    hi: int | None = None,
    c1: int | None = None,
    plateaus: tuple[tuple[int, int], ...] = (),
    warmup_passes: int = 0,
    tail_cut: str | None = None,
) -> SteadyState:
    state: dict[str, str] = {}
    diagnostic: dict[str, str] = {}
    drifting: tuple[str, ...] = ()
    if run is not None and lo is not None and hi is not None and c1 is not None:
        state = run.states(lo, hi, GATING_METRICS)
        diagnostic = run.states(lo, hi, DIAGNOSTIC_METRICS)
        onward = run.states(lo, c1, (*GATING_METRICS, *DIAGNOSTIC_METRICS))
        drifting = tuple(name for name, s in onward.items() if s == DRIFTING_UP)
    return SteadyState(
        status=status,
        verdict=verdict,
        state=state,
        diagnostic_state=diagnostic,
        window=window,
        figures=figures,
        anomaly=anomaly,
        min_duration=min_duration,
        drifting_up=drifting,
        plateaus=plateaus,
        warmup_passes=warmup_passes,
        tail_cut=tail_cut,
        n_super_passes=0 if run is None else run.n_full,
        super_pass_size=size,
        super_passes=() if run is None else tuple(run.passes),
        reason=reason,
    )
