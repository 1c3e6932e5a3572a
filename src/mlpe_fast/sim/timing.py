"""Seeded distributions for the simulated endpoint's TTFT, inter-token delay
and output length.

A :class:`Dist` is a plain description (kind, mean, spread, bounds); its
:meth:`Dist.sampler` binds it to a :class:`random.Random` and returns a
zero-argument callable, so the hot path pays one call per draw and no
branching on the kind.

``spread`` is the coefficient of variation (standard deviation / mean), the
same convention as the reference client's ``--*-spread`` flags, so one
number means "how noisy" whatever the unit of the mean.

- ``fixed``: always ``mean`` (``spread`` ignored).
- ``normal``: mean ``mean``, standard deviation ``spread * mean``.
- ``lognormal``: the log-normal whose *arithmetic* mean is ``mean`` and
  whose coefficient of variation is ``spread``: ``sigma**2 = log(1 +
  spread**2)``, ``mu = log(mean) - sigma**2 / 2``.  (The reference's
  ``VariableResponseServer`` plugs the mean into ``mu`` directly and so
  drifts above the requested mean.)

Every draw is clamped to ``[min, max]``; ``min`` defaults to 0, so a delay
is never negative.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ("DIST_KINDS", "Dist", "DistKind")

DistKind = Literal["fixed", "normal", "lognormal"]
DIST_KINDS: tuple[DistKind, ...] = ("fixed", "normal", "lognormal")


@dataclass(frozen=True)
class Dist:
    """A distribution of non-negative numbers (the unit is the user's: the
    endpoint's config says milliseconds for delays, tokens for lengths).

    Args:
        kind: ``"fixed"``, ``"normal"`` or ``"lognormal"``.
        mean: the arithmetic mean (the value itself for ``fixed``).
        spread: coefficient of variation, ``stdev / mean``; ignored by
            ``fixed``.
        min: lower clamp (default 0: delays and lengths are never negative).
        max: upper clamp (default: none).

    Raises:
        ValueError: on an unknown kind, a negative or non-finite mean or
            spread, or ``min > max``.
    """

    kind: DistKind = "fixed"
    mean: float = 0.0
    spread: float = 0.0
    min: float = 0.0
    max: float = math.inf

    def __post_init__(self) -> None:
        if self.kind not in DIST_KINDS:
            raise ValueError(f"unknown distribution {self.kind!r}; expected one of {DIST_KINDS}")
        if not (math.isfinite(self.mean) and self.mean >= 0):
            raise ValueError(f"mean must be finite and >= 0, got {self.mean!r}")
        if not (math.isfinite(self.spread) and self.spread >= 0):
            raise ValueError(f"spread must be finite and >= 0, got {self.spread!r}")
        if math.isnan(self.min) or math.isnan(self.max) or self.min > self.max:
            raise ValueError(f"need min <= max, got min={self.min!r} max={self.max!r}")

    @classmethod
    def fixed(cls, value: float) -> Dist:
        """Always ``value``."""
        return cls("fixed", value)

    def _clamp(self, x: float) -> float:
        return min(max(x, self.min), self.max)

    def sampler(self, rng: random.Random) -> Callable[[], float]:
        """A callable drawing one value per call from ``rng``."""
        lo, hi, mean = self.min, self.max, self.mean
        if self.kind == "fixed" or self.spread == 0 or mean == 0:
            value = self._clamp(mean)
            return lambda: value
        if self.kind == "normal":
            gauss, sd = rng.gauss, self.spread * mean
            return lambda: min(max(gauss(mean, sd), lo), hi)
        sigma = math.sqrt(math.log1p(self.spread * self.spread))
        mu = math.log(mean) - sigma * sigma / 2
        lognorm = rng.lognormvariate
        return lambda: min(max(lognorm(mu, sigma), lo), hi)

    def ns_sampler(self, rng: random.Random, *, unit_ns: int = 1_000_000) -> Callable[[], int]:
        """Like :meth:`sampler`, scaled by ``unit_ns`` (default: the mean is
        in milliseconds) and rounded to whole nanoseconds."""
        draw = self.sampler(rng)
        if self.kind == "fixed" or self.spread == 0 or self.mean == 0:
            value = round(draw() * unit_ns)
            return lambda: value
        return lambda: round(draw() * unit_ns)

    def int_sampler(self, rng: random.Random) -> Callable[[], int]:
        """Like :meth:`sampler`, rounded to the nearest integer (lengths)."""
        draw = self.sampler(rng)
        if self.kind == "fixed" or self.spread == 0 or self.mean == 0:
            value = round(draw())
            return lambda: value
        return lambda: round(draw())
