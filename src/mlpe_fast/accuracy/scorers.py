"""Accuracy scorers by the names the reference client's YAML uses.

A reference config's accuracy data set carries ``accuracy_config:
{eval_method, ground_truth, extractor, num_repeats}`` (mlcommons/endpoints
``examples/04_GPTOSS120B_Example``, ``examples/05_Llama_Examples``).  This
module maps those names to pure functions over (outputs, ground truths):

===================  ==========================================================
``eval_method``      score
===================  ==========================================================
``rouge``            :func:`~.rouge.rouge_scores` -- ROUGE-1/2/L/Lsum, ``gen_len``
                     (CNN/DailyMail, ``ground_truth: highlights``)
``pass_at_1``        :func:`exact_match` -- extracted answer ``==`` ground truth
                     (AIME25 ``answer`` + ``boxed_math_extractor``, GPQA
                     ``ground_truth`` + ``abcd_extractor``)
``string_match``     :func:`string_match` -- the same after stripping both sides
===================  ==========================================================

and :data:`EXTRACTORS` maps ``abcd_extractor``, ``boxed_math_extractor``,
``identity_extractor`` and ``python_code_extractor`` to :mod:`.extract`.
The DeepSeek-R1 data set (the reference's ``legacy_mlperf_deepseek_r1``
scorer) has its own per-subset grading,
:func:`~.deepseek_r1.deepseek_r1_exact_match`; LiveCodeBench (code
execution, ``code_bench_scorer``) runs programs, :mod:`.livecodebench`.

Units.  :func:`exact_match` returns a percentage.  The reference's
``pass_at_1`` writes a fraction in [0, 1] (correct / issued) into
``accuracy_results.json``; the checker multiplies fractions by 100 before
gating (spec §2.6), so either unit passes the same gate.

Denominator.  The reference divides by the samples *issued* for the data
set, so a sample that never completed counts as wrong: pass one prediction
per issued sample (``""`` for one with no output) to get the same number.

This module and its siblings import nothing heavy at import time: ``rouge``
loads ``rouge-score``/NLTK and the MATH grader ``sympy``/``pylatexenc`` on
first use, so accuracy support costs nothing to a run without an accuracy
phase.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from .deepseek_r1 import DeepSeekR1Score, deepseek_r1_exact_match, grade_deepseek_r1_sample
from .extract import (
    extract_abcd,
    extract_boxed,
    extract_boxed_math,
    extract_identity,
    extract_python_code,
)
from .gates import THRESHOLDS, AccuracyTarget, CombinedScores, check_gate, combine_entries
from .math_answers import grade_answer
from .rouge import prepare_for_rouge, rouge_scores, split_sentences

__all__ = (
    "EVAL_METHODS",
    "EXTRACTORS",
    "THRESHOLDS",
    "AccuracyTarget",
    "CombinedScores",
    "DeepSeekR1Score",
    "check_gate",
    "combine_entries",
    "deepseek_r1_exact_match",
    "exact_match",
    "extract_abcd",
    "extract_boxed",
    "extract_boxed_math",
    "extract_identity",
    "extract_python_code",
    "grade_answer",
    "grade_deepseek_r1_sample",
    "prepare_for_rouge",
    "rouge_scores",
    "score_dataset",
    "split_sentences",
    "string_match",
)

Extractor = Callable[[str], str | None]

EXTRACTORS: Mapping[str, Extractor] = MappingProxyType(
    {
        "abcd_extractor": extract_abcd,
        "boxed_math_extractor": extract_boxed_math,
        "identity_extractor": extract_identity,
        "python_code_extractor": extract_python_code,
    }
)
"""The reference's ``accuracy_config.extractor`` names -> extraction functions."""


def _extractor(name: str) -> Extractor:
    try:
        return EXTRACTORS[name]
    except KeyError:
        known = ", ".join(EXTRACTORS)
        raise KeyError(f"unknown extractor {name!r} (known: {known})") from None


def _check_pairs(predictions: Sequence[str], references: Sequence[str]) -> None:
    if len(predictions) != len(references):
        raise ValueError(
            f"{len(predictions)} predictions for {len(references)} references: one each"
        )


def _percent_correct(hits: int, total: int) -> float:
    return 100.0 * hits / total if total else 0.0


def exact_match(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    extractor: str,
) -> float:
    """Percentage of predictions whose extracted answer equals the reference.

    The reference's ``pass_at_1``: the answer ``extractor`` (a name in
    :data:`EXTRACTORS`) takes from each prediction must equal the ground
    truth exactly, as strings -- ``"070"`` is not ``"70"``.  A prediction
    with no answer is wrong.  No predictions score 0.
    """
    _check_pairs(predictions, references)
    extract = _extractor(extractor)
    hits = sum(
        1
        for prediction, reference in zip(predictions, references, strict=True)
        if extract(prediction) == reference
    )
    return _percent_correct(hits, len(predictions))


def string_match(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    extractor: str = "identity_extractor",
) -> float:
    """Percentage of predictions whose extracted answer equals the reference
    once both are stripped of surrounding white space (``string_match``)."""
    _check_pairs(predictions, references)
    extract = _extractor(extractor)
    hits = 0
    for prediction, reference in zip(predictions, references, strict=True):
        answer = extract(prediction)
        hits += answer is not None and answer.strip() == reference.strip()
    return _percent_correct(hits, len(predictions))


def _rouge(
    predictions: Sequence[str], references: Sequence[str], *, extractor: str
) -> dict[str, float]:
    # The reference's RougeScorer never applies its (identity) extractor.
    del extractor
    return rouge_scores(predictions, references)


EVAL_METHODS: Mapping[str, Callable[..., float | dict[str, float]]] = MappingProxyType(
    {"rouge": _rouge, "pass_at_1": exact_match, "string_match": string_match}
)
"""The reference's ``accuracy_config.eval_method`` names -> scoring functions,
each called as ``f(predictions, references, extractor=name)``."""


def score_dataset(
    eval_method: str,
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    extractor: str | None = None,
) -> float | dict[str, float]:
    """Score one accuracy data set as its ``accuracy_config`` names it.

    ``pass_at_1`` and ``string_match`` give a percentage; ``rouge`` gives
    the dictionary of :func:`~.rouge.rouge_scores`.  No ``extractor``
    means ``identity_extractor``.
    """
    try:
        method = EVAL_METHODS[eval_method]
    except KeyError:
        known = ", ".join(EVAL_METHODS)
        raise KeyError(f"unknown eval_method {eval_method!r} (known: {known})") from None
    return method(predictions, references, extractor=extractor or "identity_extractor")
