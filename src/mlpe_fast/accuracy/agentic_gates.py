"""The accuracy gates of the agentic benchmarks (spec §2.6), as data, and
checks of a point's and a curve's results against them.

Three quantities, each aggregated its own way, so none reduces to the
single-turn gate of :mod:`.gates` (checker 1.5.3.0, ``agentic_targets.py``
and ``models/aggregate/context.py`` ``_check_agentic_accuracy``):

* **inline accuracy**, the score of every performance run's own answers
  (``accuracy/agentic_inline.py``), at **every** point;
* the **full-run output length per turn**
  (``output_sequence_lengths_full_run.output_sequence_lengths.avg``, not the
  windowed block), in an inclusive range at every point;
* **SWE-bench**, the mean of the four mandatory bands' results: individual
  results need not pass (rules §4.3, the multi-turn branch).

Both scores are written as fractions; the thresholds are percentages, and
the checker always rescales (never guessing the unit from the value), so a
score is multiplied by 100 here too.  A bound is met when it is equalled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import msgspec

__all__ = (
    "AGENTIC_THRESHOLDS",
    "SWE_BENCH_BANDS",
    "SWE_BENCH_DATASET",
    "AgenticTarget",
    "check_agentic_point",
    "check_swe_bench_mean",
)

#: §4.3: SWE-bench is gated on the mean over the four mandatory bands.
SWE_BENCH_BANDS = 4

#: The accuracy dataset name the checker reads SWE-bench results under.
SWE_BENCH_DATASET = "swe_bench"


class AgenticTarget(msgspec.Struct, frozen=True, gc=False):
    """One agentic model's gates (module docstring): ``inline_min`` and
    ``swe_bench_min`` in percent, ``osl_range`` in tokens per turn."""

    inline_min: float
    swe_bench_min: float
    osl_range: tuple[float, float]


AGENTIC_THRESHOLDS: Mapping[str, AgenticTarget] = MappingProxyType(
    {
        "kimi-k3": AgenticTarget(inline_min=58.32, swe_bench_min=93.5, osl_range=(425.0, 520.0)),
        "qwen3_6-35b-a3b": AgenticTarget(
            inline_min=55.86, swe_bench_min=69.0, osl_range=(344.0, 422.0)
        ),
        "deepseek-v4_1-flash": AgenticTarget(
            inline_min=52.36, swe_bench_min=96.4, osl_range=(793.0, 970.0)
        ),
    }
)
"""Canonical ``model_name`` (spec §2.8) -> its agentic gates."""


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _target(model_name: str) -> AgenticTarget:
    try:
        return AGENTIC_THRESHOLDS[model_name]
    except KeyError:
        known = ", ".join(AGENTIC_THRESHOLDS)
        raise KeyError(f"no agentic gate for model {model_name!r} (known: {known})") from None


def check_agentic_point(
    model_name: str, *, inline_score: object, osl_per_turn: object
) -> list[str]:
    """The ways one agentic point fails ``model_name``'s per-point gates, one
    line each; empty if it passes.  ``inline_score`` is the inline entry's
    fraction, ``osl_per_turn`` the full-run output length per turn (None
    when the run has none).  Raises ``KeyError`` for a model with no gate."""
    target = _target(model_name)
    failures = []
    score = _finite(inline_score)
    if score is None:
        failures.append("inline accuracy: no score (no turn was scored)")
    elif not 0.0 <= score <= 1.0:
        failures.append(f"inline accuracy: {score!r} is not a fraction")
    elif score * 100.0 < target.inline_min:
        failures.append(
            f"inline accuracy: {score * 100.0:.2f} below the minimum {target.inline_min:.2f}"
        )
    osl = _finite(osl_per_turn)
    low, high = target.osl_range
    if osl is None:
        failures.append("full-run OSL per turn: missing")
    elif not low <= osl <= high:
        failures.append(f"full-run OSL per turn: {osl:.1f} outside [{low:.0f}, {high:.0f}]")
    return failures


def check_swe_bench_mean(model_name: str, band_scores: Sequence[object]) -> list[str]:
    """The ways a curve's SWE-bench results (one fraction per mandatory band)
    fail ``model_name``'s gate on their mean, one line each; empty if they
    pass.  Fewer than four bands is a failure of its own: the mean of the
    bands present cannot stand for the four.  Raises ``KeyError`` for a
    model with no gate."""
    target = _target(model_name)
    scores = [_finite(s) for s in band_scores]
    if any(s is None or not 0.0 <= s <= 1.0 for s in scores):
        return [f"SWE-bench: scores {list(band_scores)!r} are not all fractions"]
    failures = []
    if len(scores) != SWE_BENCH_BANDS:
        failures.append(
            f"SWE-bench: {len(scores)} band results, the gate needs one in each of the "
            f"{SWE_BENCH_BANDS} mandatory bands"
        )
    if scores:
        mean = 100.0 * sum(s for s in scores if s is not None) / len(scores)
        if mean < target.swe_bench_min:
            failures.append(
                f"SWE-bench: mean {mean:.2f} below the minimum {target.swe_bench_min:.2f}"
            )
    return failures
