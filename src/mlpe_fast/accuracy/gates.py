"""The accuracy gates of spec §2.6, as data, and a check of scores against them.

Every single-turn accuracy run must reach 99 % of the MLPerf Inference
reference score on each gated metric, with no allowance for variability;
Llama 3.1 8B's total generated length ``gen_len`` must also lie within 10 %
of the reference.  The numbers and the comparison are the submission
checker's (``endpoints-submission-cli`` 1.5.3.0, ``accuracy_targets.py`` and
``models/aggregate/context.py`` ``_gate_accuracy``):

* metric keys are matched case-insensitively;
* a score in [0, 1] checked against a bound above 1 is a fraction and is
  multiplied by 100 first (the reference writes ``pass_at_1`` scores as
  fractions);
* a bound is met when the score equals it.

A point's accuracy file may hold several data sets (gpt-oss-120b: AIME25,
GPQA, LiveCodeBench); :func:`combine_entries` merges their entries as the
checker does before gating: per metric, the mean weighted by each entry's
``unit_samples``, and the issued count summed over ``unit_samples x
num_repeats``.

Where the checker skips a metric that a run did not report, :func:`check_gate`
reports it as missing: a run cannot be shown to pass without it.  The
agentic models' gates (mean of runs, per-turn OSL ranges) are not here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

import msgspec

__all__ = ("THRESHOLDS", "AccuracyTarget", "CombinedScores", "check_gate", "combine_entries")


class AccuracyTarget(msgspec.Struct, frozen=True, gc=False):
    """One model's accuracy gate (spec §2.6).

    ``minimums`` maps a metric to the lowest passing score (percent);
    ``ranges`` maps a metric to its inclusive ``(low, high)`` bounds;
    ``min_issued_samples`` is the least number of samples an accuracy run
    must issue (repeats counted).
    """

    minimums: Mapping[str, float]
    ranges: Mapping[str, tuple[float, float]]
    min_issued_samples: int


_LLAMA_GEN_LEN = 8_167_644

THRESHOLDS: Mapping[str, AccuracyTarget] = MappingProxyType(
    {
        "llama3_1-8b": AccuracyTarget(
            minimums=MappingProxyType(
                {
                    "rouge1": 38.7792 * 0.99,
                    "rouge2": 15.9075 * 0.99,
                    "rougeL": 24.4957 * 0.99,
                    "rougeLsum": 35.793 * 0.99,
                }
            ),
            ranges=MappingProxyType({"gen_len": (_LLAMA_GEN_LEN * 0.9, _LLAMA_GEN_LEN * 1.1)}),
            min_issued_samples=13_368,
        ),
        # AIME25 x 8 + GPQA x 5 + LiveCodeBench x 3, combined as a sample-weighted mean
        "gpt-oss-120b": AccuracyTarget(
            minimums=MappingProxyType({"exact_match": 83.13 * 0.99}),
            ranges=MappingProxyType({}),
            min_issued_samples=4_395,
        ),
        "deepseek-r1": AccuracyTarget(
            minimums=MappingProxyType({"exact_match": 81.3582 * 0.99}),
            ranges=MappingProxyType({}),
            min_issued_samples=4_388,
        ),
    }
)
"""Canonical ``model_name`` (spec §2.8) -> its accuracy gate."""


def _as_number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, str)):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _percent(score: float, lowest: float) -> float:
    return score * 100.0 if 0.0 <= score <= 1.0 and lowest > 1.0 else score


def check_gate(
    model_name: str,
    scores: Mapping[str, object],
    *,
    issued_samples: int | None = None,
) -> list[str]:
    """The ways ``scores`` fail ``model_name``'s gate, one line each; empty if it passes.

    ``scores`` maps metric names (any case) to numbers or numeric strings, as
    an ``accuracy_results.json`` ``score`` holds them; for a model gated on
    one metric, a bare ``"score"`` key stands for it, as the checker reads
    the scalar score of a data set.  ``issued_samples``, when given, is
    checked against the model's minimum.  Raises ``KeyError`` for a model
    with no gate.
    """
    try:
        target = THRESHOLDS[model_name]
    except KeyError:
        known = ", ".join(THRESHOLDS)
        raise KeyError(f"no accuracy gate for model {model_name!r} (known: {known})") from None
    by_lower = {str(key).lower(): value for key, value in scores.items()}
    bounds: dict[str, tuple[float, float | None]] = {
        **{metric: (low, None) for metric, low in target.minimums.items()},
        **{metric: (low, high) for metric, (low, high) in target.ranges.items()},
    }
    if len(bounds) == 1 and "score" in by_lower:
        only = next(iter(bounds)).lower()
        by_lower.setdefault(only, by_lower["score"])
    failures: list[str] = []
    for metric, (low, high) in bounds.items():
        if metric.lower() not in by_lower:
            failures.append(f"{metric}: missing from the scores")
            continue
        raw = by_lower[metric.lower()]
        number = _as_number(raw)
        if number is None:
            failures.append(f"{metric}: {raw!r} is not a finite number")
            continue
        score = _percent(number, low)
        if high is None:
            if score < low:
                failures.append(f"{metric}: {score:.4f} below the minimum {low:.4f}")
        elif not low <= score <= high:
            failures.append(f"{metric}: {score:.1f} outside [{low:.1f}, {high:.1f}]")
    if issued_samples is not None and issued_samples < target.min_issued_samples:
        failures.append(
            f"issued samples: {issued_samples} below the minimum {target.min_issued_samples}"
        )
    return failures


class CombinedScores(msgspec.Struct, frozen=True, gc=False):
    """The scores of a point's accuracy entries merged as the checker merges
    them, and the samples they issued (``None`` if no entry says)."""

    scores: dict[str, float]
    issued_samples: int | None


# Entry keys that are bookkeeping, not metrics (the checker's ``_META_KEYS``).
_NOT_METRICS = frozenset(
    {
        "dataset_name",
        "num_samples",
        "status",
        "extractor",
        "ground_truth_column",
        "n_repeats",
        "complete",
        "unit_samples",
        "total_samples",
        "num_repeats",
        "duration_s",
        "dataset_type",
        "response_counts",
    }
)


def _entry_metrics(entry: Mapping[str, Any]) -> dict[str, float]:
    raw = entry.get("score")
    if isinstance(raw, Mapping):
        items = raw.items()
    elif raw is not None:
        items = {"score": raw}.items()
    else:  # metrics written straight on the entry
        items = {k: v for k, v in entry.items() if k not in _NOT_METRICS}.items()
    metrics: dict[str, float] = {}
    for name, value in items:
        try:
            metrics[str(name)] = float(value)
        except (TypeError, ValueError):
            continue
    return metrics


def _int_or_none(value: object) -> int | None:
    if value is None:
        return None
    try:
        return int(cast(Any, value))
    except (TypeError, ValueError):
        return None


def _weighted_mean(pairs: list[tuple[float, float | None]]) -> float:
    weights = [weight for _, weight in pairs]
    total = sum(weight for weight in weights if weight is not None)
    if all(weight is not None for weight in weights) and total > 0:
        return sum(value * weight for value, weight in pairs if weight is not None) / total
    return sum(value for value, _ in pairs) / len(pairs)


def combine_entries(entries: Sequence[Mapping[str, Any]]) -> CombinedScores:
    """Merge ``accuracy_scores`` entries into one score per metric (module docstring).

    A scalar ``score`` stays under the key ``"score"`` (see :func:`check_gate`);
    values that are not numbers are skipped, as the checker skips them.
    """
    pairs: dict[str, list[tuple[float, float | None]]] = {}
    issued: list[int] = []
    for entry in entries:
        unit = entry.get("unit_samples", entry.get("num_samples"))
        repeats = _int_or_none(entry.get("num_repeats", entry.get("n_repeats", 1))) or 1
        unit_count = _int_or_none(unit)
        if unit_count is not None:
            issued.append(unit_count * max(repeats, 1))
        try:
            weight: float | None = None if unit is None else float(unit)
        except (TypeError, ValueError):
            weight = None
        for metric, value in _entry_metrics(entry).items():
            pairs.setdefault(metric, []).append((value, weight))
    return CombinedScores(
        scores={metric: _weighted_mean(values) for metric, values in pairs.items()},
        issued_samples=sum(issued) if issued else None,
    )
