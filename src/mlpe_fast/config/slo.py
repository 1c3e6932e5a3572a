"""The ``--goodput`` setting: latency bounds a request must meet to be
good (``metrics/goodput.py`` computes the goodput; not an MLPerf metric)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

__all__ = ("SLO_METRICS", "SLO_NAMES", "Slo", "SloMetric", "parse_slo")

SloMetric = Literal["ttft", "tpot", "e2el"]
SLO_METRICS: tuple[SloMetric, ...] = ("ttft", "tpot", "e2el")
SLO_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "latency"}


class Slo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The bounds, in milliseconds; None: not bounded."""

    ttft: float | None = None
    tpot: float | None = None
    e2el: float | None = None

    def bounds(self) -> dict[str, float]:
        """The bounds given, by metric."""
        return {m: b for m in SLO_METRICS if (b := getattr(self, m)) is not None}

    def text(self) -> str:
        """``TTFT <= 500 ms, TPOT <= 50 ms``."""
        return ", ".join(f"{SLO_NAMES[m]} <= {b:g} ms" for m, b in self.bounds().items())


def parse_slo(items: Sequence[str] | Mapping[str, Any]) -> Slo:
    """``["ttft:500", "tpot:50"]`` (the flag's words; ``ttft=500`` too) or
    ``{"ttft": 500}`` (YAML) as an :class:`Slo`.

    Raises:
        ValueError: an unknown metric, a bound that is not a positive
            number of milliseconds, a metric given twice, or no bound.
    """
    pairs: list[tuple[object, object]] = []
    if isinstance(items, Mapping):
        pairs = list(items.items())
    else:
        for item in items:
            for word in str(item).replace(",", " ").split():
                metric, sep, ms = word.replace("=", ":").partition(":")
                if not sep:
                    raise ValueError(f"{word!r} is not METRIC:MS (e.g. ttft:500)")
                pairs.append((metric, ms))
    bounds: dict[str, float] = {}
    for name, value in pairs:
        key = str(name).strip().lower()
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"{key}: {value!r} is not a number of milliseconds")
        if key not in SLO_METRICS:
            raise ValueError(f"{name!r} is not one of {', '.join(SLO_METRICS)}")
        if key in bounds:
            raise ValueError(f"{key} is given twice")
        try:
            bound = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key}: {value!r} is not a number of milliseconds") from None
        if not math.isfinite(bound) or bound <= 0:
            raise ValueError(f"{key}: {value!r} is not a positive number of milliseconds")
        bounds[key] = bound
    if not bounds:
        raise ValueError("no bound given (e.g. ttft:500 tpot:50 e2el:20000)")
    return Slo(**bounds)
