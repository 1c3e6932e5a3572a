"""Planning a curve: which concurrencies to measure, for how long, and what
is wrong with a list the user chose.

Rules (``mlperf-endpoints-spec.md``; checker 1.5.3.0 rule IDs in quotes):

* **Point count** (§2.1, ``point-count`` / ``point-cap``): every ``r<N>``
  folder counts, a dedicated Offline run included.  At least 8 with a
  dedicated Offline run (7 fixed-concurrency points + the run), at least 7
  when the ``C_max`` point is elected Offline or the benchmark is agentic
  (no Offline point at all); at most 32.
* **Coverage** (§2.2, ``*-coverage``): a point at concurrency <= 32 (Ultra
  Low) and at least one point in each of Low, Medium and High as
  :mod:`.regions` computes them; margin points cover nothing.
* **Range** (§2.2, ``concurrency-in-range``): no fixed-concurrency point
  above the margin, ``ceil(1.10 * C_max)``.
* **Offline** (§2.3): an elected Offline point is the point at exactly
  ``C_max``; a dedicated run is compared with that point's throughput
  (``offline-ordering``), so a curve needs it either way.
* **Duration** (§2.4, ``point-duration``): 600 s of issue time at
  concurrency <= 32, 1200 s above (2400 s for agentic benchmarks).
* **Query count** (§2.4): at least one full dataset pass, and the issued
  count a whole number of passes.

**How** :func:`plan_points` **chooses the points.**  Given ``C_max`` (and
optionally the lowest point ``C_min``, default 1):

1. ``C_min`` and ``C_max`` are always measured: ``C_min`` is the Ultra Low
   point, ``C_max`` a High point and the one Offline is judged against.
2. Low and Medium each get one point: the power of two nearest (in log
   scale) to the region's geometric centre, or, when no power of two falls
   in the region, the integer nearest that centre.
3. The rest go, one at a time, into the widest gap between neighbouring
   points (widest by ratio ``high / low``), by the same rule applied to the
   integers strictly inside the gap.

Powers of two make a plan one can read at a glance and compare across
systems; splitting the widest ratio spreads the points evenly in log scale,
the scale the Pareto curve and the regions live on.  Ties (two gaps of the
same ratio, or a centre halfway between two powers of two) go to the higher
concurrency: low-concurrency points are the slowest to complete the full
dataset pass each point needs (§2.4), so, other things equal, the cheaper
point wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from itertools import pairwise

from ..config import OfflineKind
from ..errors import UsageError
from .regions import (
    OUT_OF_RANGE,
    ULTRA_LOW_MAX,
    Regions,
    Span,
    c_min_from_points,
    region_of,
    regions,
)

# OfflineKind: how a curve satisfies the Offline requirement (spec §2.3): a
# dedicated run, the C_max point elected, or none (agentic benchmarks, §2.1).

__all__ = (
    "MAX_POINTS",
    "MIN_POINTS",
    "MIN_POINTS_DEDICATED_OFFLINE",
    "OfflineKind",
    "check_plan",
    "count_problems",
    "issued_count",
    "min_points",
    "plan_points",
    "point_duration_s",
)

_OFFLINE_KINDS: tuple[str, ...] = ("dedicated", "elected", "none")

#: Fewest points of a curve whose Offline point is a dedicated run (§2.1).
MIN_POINTS_DEDICATED_OFFLINE = 8
#: Fewest points otherwise: elected Offline, or agentic (§2.1).
MIN_POINTS = 7
#: Most points of a curve, Offline included (§2.1).
MAX_POINTS = 32

#: Minimum issue-time span of a point, seconds (§2.4; checker
#: ``MIN_DURATION_MS`` / ``AGENTIC_MIN_DURATION_MS``).
_ULTRA_LOW_DURATION_S = 600.0
_DURATION_S = 1200.0
_AGENTIC_DURATION_S = 2400.0

#: Display names of the regions in problems (the rules' names, §2.1).
_LABELS = {
    "low_concurrency": "Low Concurrency",
    "med_concurrency": "Medium Concurrency",
    "high_concurrency": "High Concurrency",
}


def _check_offline(offline: str) -> None:
    if offline not in _OFFLINE_KINDS:
        raise UsageError(f"--offline must be one of {', '.join(_OFFLINE_KINDS)}, got {offline!r}")


def min_points(offline: OfflineKind) -> int:
    """The fewest points the checker accepts for a curve (§2.1).

    Raises:
        UsageError: an unknown ``offline`` kind.
    """
    _check_offline(offline)
    return MIN_POINTS_DEDICATED_OFFLINE if offline == "dedicated" else MIN_POINTS


def _pick(span: Span) -> int:
    """The power of two nearest the geometric centre of ``span``, else the
    integer nearest that centre (module docstring, steps 2-3).

    When any power of two lies in ``span``, the one nearest the centre
    does: a power inside is at most half the span's log width from the
    centre, one outside more than that.
    """
    centre = (math.log2(span.first) + math.log2(span.last)) / 2
    power = 1 << math.floor(centre + 0.5)  # ties go up; centre >= 0
    if span.contains(power):
        return power
    return min(max(math.floor(2**centre + 0.5), span.first), span.last)


def _fill(chosen: set[int], wanted: int) -> list[int]:
    """``chosen`` grown to ``wanted`` points by splitting the widest gap
    (module docstring, step 3); the caller ensures enough integers exist."""
    levels = sorted(chosen)
    while len(levels) < wanted:
        # max() on (ratio, low) prefers the widest gap, then the higher one;
        # exact fractions so that equal ratios tie exactly.
        _, low, high = max(
            (Fraction(high, low), low, high) for low, high in pairwise(levels) if high - low >= 2
        )
        levels.append(_pick(Span(low + 1, high - 1)))
        levels.sort()
    return levels


def plan_points(
    c_max: int,
    *,
    c_min: int | None = None,
    count: int = MIN_POINTS_DEDICATED_OFFLINE,
    offline: OfflineKind = "dedicated",
) -> list[int]:
    """The fixed-concurrency points to measure for ``--max-concurrency C_MAX``.

    The choice is explained in the module docstring; it is deterministic.

    Args:
        c_max: the system's ``C_max``, an integer above 32.
        c_min: the lowest point (and so ``C_min``), 1 to 32; default 1,
            the lowest latency a system offers and the widest Low region.
        count: the curve's points as the checker counts them, Offline
            included: from :func:`min_points` to 32.
        offline: ``"dedicated"``: the Offline run is one of ``count`` and
            is not returned (its concurrency is the dataset size, §2.3);
            ``"elected"``: the ``C_max`` point doubles as Offline;
            ``"none"``: an agentic curve, without Offline.

    Returns:
        Sorted distinct concurrencies from ``c_min`` to ``c_max``, both
        included: ``count - 1`` of them with a dedicated Offline run, else
        ``count``.

    Raises:
        UsageError: a bad argument, a ``count`` outside the checker's limits
            or above the number of concurrencies from ``c_min`` to
            ``c_max``, or regions that no plan can cover (a region left
            empty by rounding, see :mod:`.regions`).
    """
    _check_offline(offline)
    lowest = 1 if c_min is None else c_min
    bounds = regions(c_max, lowest)
    least = min_points(offline)
    if isinstance(count, bool) or not isinstance(count, int) or not least <= count <= MAX_POINTS:
        raise UsageError(
            f"a curve with offline {offline!r} has {least} to {MAX_POINTS} points"
            f" (spec §2.1), got {count!r}"
        )
    for name, label in _LABELS.items():
        if bounds.span(name).empty:
            raise UsageError(
                f"{label} is empty for C_max {c_max} and C_min {lowest} (spec §2.2):"
                " lower the lowest point or raise --max-concurrency"
            )
    wanted = count - 1 if offline == "dedicated" else count
    available = c_max - lowest + 1
    if wanted > available:
        raise UsageError(
            f"{wanted} points do not fit between C_min {lowest} and C_max {c_max}"
            f" ({available} concurrencies)"
        )
    chosen = {lowest, c_max}
    for name in _LABELS:
        span = bounds.span(name)
        if not any(span.contains(level) for level in chosen):
            chosen.add(_pick(span))
    return _fill(chosen, wanted)


def point_duration_s(concurrency: int, *, agentic: bool = False) -> float:
    """The minimum steady-state issue-time span of a point, in seconds (§2.4).

    600 s at concurrency <= 32 (keyed to the fixed 1-32 Ultra Low window,
    not to ``C_min``, as the checker's ``min_duration_ms`` does), 1200 s
    above, 2400 s above 32 for an agentic benchmark.  A dedicated Offline
    run drains a queue and has no such minimum settled (§6, open item C7).

    Raises:
        UsageError: ``concurrency`` is not a positive integer.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise UsageError(f"concurrency must be a positive integer, got {concurrency!r}")
    if concurrency <= ULTRA_LOW_MAX:
        return _ULTRA_LOW_DURATION_S
    return _AGENTIC_DURATION_S if agentic else _DURATION_S


def issued_count(dataset_size: int, completed_needed: int) -> int:
    """How many queries a point issues: the fewest whole dataset passes that
    make at least ``completed_needed`` queries, and at least one pass (§2.4:
    "at least one full dataset pass", "issued count a whole number of
    passes").

    Raises:
        UsageError: an empty dataset or a negative ``completed_needed``.
    """
    if dataset_size < 1:
        raise UsageError(f"the dataset is empty (size {dataset_size})")
    if completed_needed < 0:
        raise UsageError(f"completed query count must be >= 0, got {completed_needed}")
    passes = max(1, -(-completed_needed // dataset_size))
    return passes * dataset_size


def count_problems(listed: int, offline: OfflineKind) -> list[str]:
    """The checker's ``point-count`` and ``point-cap`` problems of a curve of
    ``listed`` fixed-concurrency points (§2.1), whatever its ``C_max``.

    Raises:
        UsageError: an unknown ``offline`` kind.
    """
    total = listed + (offline == "dedicated")
    least = min_points(offline)
    why = {
        "dedicated": "7 at fixed concurrency and the dedicated Offline run",
        "elected": "the C_max point doubles as Offline",
        "none": "no Offline point, as in an agentic curve",
    }[offline]
    problems = []
    if total < least:
        problems.append(
            f"point-count: {total} points, the checker needs at least {least} ({why}; spec §2.1)"
        )
    if total > MAX_POINTS:
        problems.append(
            f"point-cap: {total} points, at most {MAX_POINTS} including Offline (spec §2.1)"
        )
    return problems


def _coverage_problems(levels: Sequence[int], bounds: Regions) -> list[str]:
    problems = []
    ultra_low = bounds.ultra_low
    if not any(ultra_low.contains(level) for level in levels):
        problems.append(
            f"ultra-low-concurrency-coverage: no point at concurrency {ultra_low}"
            " (the lowest point sets C_min; spec §2.2)"
        )
    where = f"C_max {bounds.c_max}, C_min {bounds.c_min}"
    found = {region_of(level, bounds) for level in levels}
    for name, label in _LABELS.items():
        span = bounds.span(name)
        rule = name.replace("_", "-") + "-coverage"
        if span.empty:
            problems.append(
                f"{rule}: {label} is empty for {where}, so nothing can cover it (spec §2.2)"
            )
        elif name not in found:
            problems.append(f"{rule}: no point in {label} {span} ({where}; spec §2.2)")
    return problems


def check_plan(
    points: Sequence[int],
    c_max: int,
    offline: OfflineKind = "dedicated",
    *,
    c_min_override: int | None = None,
) -> list[str]:
    """What the checker would reject in a curve with these points, said
    before hours are spent measuring it (module docstring; spec §2.1-2.3).

    Args:
        points: the fixed-concurrency points (``--concurrency``), without a
            dedicated Offline run, which ``offline`` accounts for.
        c_max: the declared ``C_max``.
        offline: how the curve satisfies Offline (:func:`plan_points`).
        c_min_override: a ``c_min_override`` to be declared, if any.

    Returns:
        One line per problem, each starting with the checker's rule ID;
        empty when the plan is fine.

    Raises:
        UsageError: an unknown ``offline`` kind.
    """
    _check_offline(offline)
    problems: list[str] = []
    levels: list[int] = []
    for level in points:
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            problems.append(f"load-pattern: concurrency {level!r} is not a positive integer")
        elif level in levels:
            problems.append(f"duplicate: concurrency {level} is listed twice (one r<N> per point)")
        else:
            levels.append(level)
    levels.sort()
    problems += count_problems(len(levels), offline)
    if not levels:
        return problems
    try:
        c_min = c_min_from_points(levels, c_min_override)
    except UsageError as exc:
        return [*problems, f"c-min-override: {exc}"]
    try:
        bounds = regions(c_max, c_min, c_min_overridden=c_min_override is not None)
    except UsageError as exc:
        return [*problems, f"region-computation: {exc}"]
    problems += _coverage_problems(levels, bounds)
    for level in levels:
        if region_of(level, bounds) == OUT_OF_RANGE:
            problems.append(
                f"concurrency-in-range: {level} is above the 10 % margin of C_max {c_max}"
                f" (which ends at {bounds.margin.last}; spec §2.2)"
            )
    if c_max not in levels:
        if offline == "elected":
            problems.append(
                f"offline-point-present: an elected Offline point must be at exactly"
                f" C_max {c_max}, and no point is (spec §2.3)"
            )
        elif offline == "dedicated":
            problems.append(
                f"offline-ordering: no point at exactly C_max {c_max}; the checker then"
                " skips comparing the Offline run's throughput with it (spec §2.3)"
            )
    return problems
