"""The concurrency regions of a curve, from ``C_max`` and ``C_min``.

Definitions (``mlperf-endpoints-spec.md`` §2.2, rules §5.4-5.5 and
Appendix B, as checker 1.5.3.0 implements them in
``submission_checker/models/regions.py``):

* ``C_max`` is the declared ``max_supported_concurrency``, an integer
  greater than 32.
* ``C_min`` is the lowest submitted concurrency clamped to at most 32, or a
  declared ``c_min_override`` k (1 <= k <= 32, equal to a measured
  fixed-concurrency point).
* With ``I = log2(C_max - C_min) / 3``, the inclusive regions are::

      low_latency      = [1,               C_min]
      low_concurrency  = [C_min + 1,       round(C_min + 2**I)]
      med_concurrency  = [low.last + 1,    round(C_min + 2**(2*I))]
      high_concurrency = [med.last + 1,    C_max]
      margin           = [C_max + 1,       ceil(1.10 * C_max)]

The arithmetic is the checker's, float for float, because the checker
decides pass or fail: ``round`` is Python's (half to even) and the margin is
``math.ceil(1.10 * c_max)`` in binary floating point.  Two consequences:

* Half to even never decides a boundary for integer inputs: ``2**I`` is the
  cube root of the integer ``C_max - C_min`` and ``2**(2*I)`` its square,
  and neither is ever an odd multiple of 1/2 (such a number cubed, or the
  3/2 power of an integer, is not an integer).  We still call ``round`` so
  that nothing can differ from the checker.
* ``1.10 * c_max`` is a little above the exact product for some ``C_max``,
  so the margin then ends one higher than ``ceil(11 * C_max / 10)``: for
  ``C_max = 100`` the checker's margin is 101-111, not 101-110.

A region can come out empty after rounding (``first > last``).  With
``C_max > 32`` that happens only when ``C_max - C_min`` is 1 or 2: High is
empty, and Medium too when it is 1.  No point can then cover High, so a curve
with ``C_min = 32`` needs ``C_max >= 35`` (checked for every ``C_max`` up to
5000 against the checker's function).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import msgspec

from ..errors import UsageError

__all__ = (
    "OUT_OF_RANGE",
    "REGION_NAMES",
    "ULTRA_LOW_MAX",
    "Regions",
    "Span",
    "c_min_from_points",
    "region_of",
    "regions",
)

#: Upper end of the Ultra Low band, the largest ``C_min`` and the value the
#: lowest point is clamped to (spec §2.2).
ULTRA_LOW_MAX = 32

#: The checker's region vocabulary, in ascending concurrency order (spec §2.2).
REGION_NAMES: tuple[str, ...] = (
    "low_latency",
    "low_concurrency",
    "med_concurrency",
    "high_concurrency",
    "margin",
)

#: What :func:`region_of` answers above the margin; the checker rejects such a
#: point (``concurrency-in-range``, spec §4.2).
OUT_OF_RANGE = "out_of_range"


class Span(NamedTuple):
    """An inclusive range of concurrencies; empty when ``first > last``."""

    first: int
    last: int

    def contains(self, concurrency: int) -> bool:
        """Whether ``first <= concurrency <= last``."""
        return self.first <= concurrency <= self.last

    @property
    def empty(self) -> bool:
        """Whether rounding left the region without any concurrency."""
        return self.first > self.last

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


class Regions(msgspec.Struct, frozen=True, gc=False):
    """The regions of one curve (module docstring; spec §2.2).

    Attributes:
        c_max: the declared ``C_max``.
        c_min: the ``C_min`` the regions were computed from.
        low_latency: ``1 .. C_min``.
        low_concurrency, med_concurrency, high_concurrency: the three
            logarithmic regions; High ends at ``C_max``.
        margin: ``C_max + 1 .. ceil(1.10 * C_max)``: legal concurrencies
            that cover no region (spec §2.2).
        c_min_overridden: ``C_min`` came from ``c_min_override``; then the
            Ultra Low band is ``1 .. C_min`` instead of ``1 .. 32``.
    """

    c_max: int
    c_min: int
    low_latency: Span
    low_concurrency: Span
    med_concurrency: Span
    high_concurrency: Span
    margin: Span
    c_min_overridden: bool = False

    @property
    def ultra_low(self) -> Span:
        """The Ultra Low coverage band: ``1 .. 32`` by default, ``1 .. C_min``
        with an override (spec §2.2, policies PR #150)."""
        return self.low_latency if self.c_min_overridden else Span(1, ULTRA_LOW_MAX)

    def span(self, name: str) -> Span:
        """The region called ``name``, one of :data:`REGION_NAMES`."""
        if name not in REGION_NAMES:
            raise ValueError(f"unknown region {name!r}; expected one of {REGION_NAMES}")
        span: Span = getattr(self, name)
        return span


def _is_int(value: object) -> bool:
    # bool is an int subclass, but True is no concurrency.
    return isinstance(value, int) and not isinstance(value, bool)


def regions(c_max: int, c_min: int, *, c_min_overridden: bool = False) -> Regions:
    """The regions of a curve with this ``C_max`` and ``C_min`` (spec §2.2).

    Args:
        c_max: the declared maximum supported concurrency, an integer > 32.
        c_min: from :func:`c_min_from_points`, 1 <= ``c_min`` <= 32.
        c_min_overridden: ``c_min`` is a declared ``c_min_override``.

    Raises:
        UsageError: ``c_max`` or ``c_min`` out of range, as the checker's
            ``region-computation`` rule rejects them.
    """
    if not _is_int(c_max) or c_max <= ULTRA_LOW_MAX:
        raise UsageError(
            f"C_max (--max-concurrency) must be an integer above {ULTRA_LOW_MAX}"
            f" (spec §2.2), got {c_max!r}"
        )
    if not _is_int(c_min) or not 1 <= c_min <= ULTRA_LOW_MAX:
        raise UsageError(
            f"C_min must be an integer from 1 to {ULTRA_LOW_MAX} (spec §2.2), got {c_min!r}"
        )
    # The same expressions as the checker, so that the floats round alike.
    interval = math.log2(c_max - c_min) / 3
    low_last = round(c_min + 2**interval)
    med_last = round(c_min + 2 ** (2 * interval))
    return Regions(
        c_max=c_max,
        c_min=c_min,
        low_latency=Span(1, c_min),
        low_concurrency=Span(c_min + 1, low_last),
        med_concurrency=Span(low_last + 1, med_last),
        high_concurrency=Span(med_last + 1, c_max),
        margin=Span(c_max + 1, math.ceil(1.10 * c_max)),
        c_min_overridden=c_min_overridden,
    )


def c_min_from_points(concurrencies: Iterable[int], override: int | None = None) -> int:
    """``C_min`` of a curve (spec §2.2).

    Without ``override``: the lowest concurrency of all the curve's points,
    clamped to 32 (the checker takes every ``r<N>`` point, a dedicated
    Offline run included; its concurrency, the dataset size, is at least
    ``C_max`` and so never the lowest).  With ``override`` (the
    ``c_min_override`` every point's ``system_desc.json`` declares): that
    value, which must be an integer from 1 to 32 and one of the measured
    fixed-concurrency points, so pass those in ``concurrencies``.

    Raises:
        UsageError: no points, or an override the checker would reject
            (``c-min-override``).
    """
    levels = list(concurrencies)
    if override is not None:
        if not _is_int(override) or not 1 <= override <= ULTRA_LOW_MAX:
            raise UsageError(
                f"c_min_override must be an integer from 1 to {ULTRA_LOW_MAX}"
                f" (spec §2.2), got {override!r}"
            )
        if override not in levels:
            raise UsageError(
                f"c_min_override {override} is not one of the measured points"
                f" {sorted(levels)} (spec §2.2)"
            )
        return override
    if not levels:
        raise UsageError("C_min needs at least one measured point (spec §2.2)")
    return min(*levels, ULTRA_LOW_MAX)


def region_of(concurrency: int, regions: Regions) -> str:
    """The checker's region for ``concurrency``: one of :data:`REGION_NAMES`,
    or :data:`OUT_OF_RANGE` below 1 or above the margin.

    Regions are tried from the lowest, as the checker does, so an empty
    region never claims a concurrency.
    """
    for name in REGION_NAMES:
        if regions.span(name).contains(concurrency):
            return name
    return OUT_OF_RANGE
