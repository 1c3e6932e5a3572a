"""DeepSeek-R1 accuracy: MLPerf's per-subset grading of the combined data set.

The DeepSeek-R1 accuracy set (4,388 samples, spec §2.6) mixes five subsets,
named in its ``dataset`` column, each graded its own way by MLPerf's
evaluator (mlcommons/inference ``language/deepseek-r1/eval_accuracy.py`` at
e59ce58, which the reference client runs out of process as
``legacy_mlperf_deepseek_r1``).  The rules, in our own code:

==============  ==============================================  =====================
subset          answer taken from the output                    correct when
==============  ==============================================  =====================
gpqa            last "ANSWER: X" / "FINAL ANSWER: (X)", A-D     letter == ground truth
mmlu_pro        the same, A-J; else the last lone letter A-J    letter == ground truth
math500         last ``\\boxed{...}``, braces balanced          PRM800K grader
aime            last ``\\boxed{N}``, else last "Answer: N"      int(N) == int(truth),
                (0 <= N <= 999)                                 N in 0-999
livecodebench   first python code block                         its tests pass
==============  ==============================================  =====================

A subset is chosen by the first of these names contained in the lower-cased
``dataset`` value, in the table's order.  Each sample scores 100 or 0 and the
exact match is the mean.  LiveCodeBench needs the generated code run against
its tests: the caller passes ``grade_code`` (``accuracy/results.py`` builds
it from the dataset's LiveCodeBench settings, ``accuracy/livecodebench.py``:
the ``lcb_serve`` service or, with ``local_eval``, the local sandbox);
without it, or when grading fails, its samples are counted as ungraded and
left out of the mean, as the reference reports a run whose code-execution
service was unreachable (``complete`` false).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .extract import extract_boxed
from .math_answers import grade_answer

__all__ = (
    "SUBSETS",
    "CodeGrader",
    "DeepSeekR1Score",
    "UngradedSubsetError",
    "deepseek_r1_exact_match",
    "grade_deepseek_r1_sample",
    "is_code_subset",
    "parse_aime_answer",
    "parse_multiple_choice",
    "subset_of",
)

SUBSETS = ("gpqa", "mmlu_pro", "math500", "aime", "livecodebench")
"""The subset names, in the order a ``dataset`` value is matched against them."""

CODE_SUBSET = "livecodebench"


def is_code_subset(dataset: str) -> bool:
    """Whether a ``dataset`` value names the subset graded by running code
    (False for a name no grader knows: grading says so)."""
    try:
        return subset_of(dataset) == CODE_SUBSET
    except ValueError:
        return False


class UngradedSubsetError(ValueError):
    """The sample belongs to a subset graded by running code (LiveCodeBench)."""


class DeepSeekR1Score(msgspec.Struct, frozen=True, gc=False):
    """Exact match over the graded samples, overall and per subset (percent).

    The per-subset maps are keyed by the ``dataset`` values as given, as the
    reference's ``per_dataset`` breakdown is.

    ``exact_match`` is ``None`` when nothing was graded; ``complete`` is true
    only when every sample was graded (no LiveCodeBench sample was left out).
    """

    exact_match: float | None
    subset_exact_match: dict[str, float]
    subset_samples: dict[str, int]
    graded: int
    ungraded: int

    @property
    def complete(self) -> bool:
        return self.ungraded == 0 and self.graded > 0


def subset_of(dataset: str) -> str:
    """The subset a ``dataset`` column value names (first contained name wins)."""
    name = str(dataset).lower()
    if not name:
        raise ValueError("DeepSeek-R1 sample has an empty dataset name")
    for subset in SUBSETS:
        if subset in name:
            return subset
    raise ValueError(f"no DeepSeek-R1 grader for dataset {dataset!r}")


def _clean(text: str | None) -> str:
    return "" if text is None else str(text).strip()


_LAST_LETTER = {
    max_letter: re.compile(
        rf"\b(?:ANSWER|FINAL\s*ANSWER)\b\s*[:=]?\s*(?:\(?\s*([A-{max_letter}])\s*\)?)"
        r"(?:\s*$|[^A-Za-z])",
        re.IGNORECASE,
    )
    for max_letter in ("D", "J")
}
_LONE_LETTER_A_TO_J = re.compile(r"\b([A-J])\b", re.IGNORECASE)


def parse_multiple_choice(text: str | None, max_letter: str = "D") -> str | None:
    """The letter of the last "ANSWER: X" in ``text`` (``parse_multiple_choice``).

    ``max_letter`` is ``"D"`` (GPQA) or ``"J"`` (MMLU-Pro, which falls back to
    the last lone letter A-J).  A text that is a stringified one-item list
    (``['...']``) is unwrapped, and literal ``\\n`` and ``\\'`` escapes are
    decoded, as MLPerf's evaluator does.
    """
    text = _clean(text)
    if not text:
        return None
    if text.startswith(("['", '["')) and text.endswith(("']", '"]')):
        text = text[2:-2].strip()
    text = text.replace("\\n", "\n").replace("\\'", "'")
    matches = list(_LAST_LETTER[max_letter].finditer(text))
    if matches:
        return matches[-1].group(1).upper()
    if max_letter == "J":
        lone = list(_LONE_LETTER_A_TO_J.finditer(text))
        if lone:
            return lone[-1].group(1).upper()
    return None


_BOXED_INTEGER = re.compile(r"\\boxed\{\s*(\d+)\s*\}")
_ANSWER_INTEGER = re.compile(r"Answer:\s*(\d+)(?!\.)\b", re.IGNORECASE | re.MULTILINE)


def parse_aime_answer(text: str | None) -> int | None:
    """The AIME answer in ``text``: the last ``\\boxed{N}``, else the last
    "Answer: N"; ``None`` unless 0 <= N <= 999 (``parse_aime_answer``)."""
    text = _clean(text)
    if not text:
        return None
    boxed = list(_BOXED_INTEGER.finditer(text))
    matches = boxed or list(_ANSWER_INTEGER.finditer(text))
    if not matches:
        return None
    value = int(matches[-1].group(1))
    return value if 0 <= value <= 999 else None


def _is_missing(ground_truth: object) -> bool:
    return ground_truth is None or (isinstance(ground_truth, float) and math.isnan(ground_truth))


def _same_letter(letter: str | None, ground_truth: object, letters: str) -> bool:
    if not letter or not ground_truth:
        return False
    letter = letter.upper()
    return letter in letters and letter == str(ground_truth).upper()


def _same_integer(value: int | None, ground_truth: object) -> bool:
    if value is None:
        return False
    truth: Any = ground_truth  # a string or a number of any numeric type
    try:
        return value == int(truth)
    except (TypeError, ValueError):
        return False


def _math500_correct(answer: str | None, ground_truth: object) -> bool:
    if not answer or not ground_truth:
        return False
    answer = answer.strip()
    return bool(answer) and grade_answer(answer, str(ground_truth))


def grade_deepseek_r1_sample(output: str | None, ground_truth: object, dataset: str) -> bool:
    """Whether one DeepSeek-R1 output is correct, by its subset's rule.

    ``output`` is the model's text (``None`` or ``""`` for a failed sample:
    wrong); ``ground_truth`` the ``ground_truth`` column (a letter, a LaTeX
    answer or an integer); ``dataset`` the ``dataset`` column.  Raises
    :class:`UngradedSubsetError` for LiveCodeBench and ``ValueError`` for an
    unknown subset.
    """
    subset = subset_of(dataset)
    if subset == CODE_SUBSET:
        raise UngradedSubsetError("LiveCodeBench samples are graded by running code")
    if _is_missing(ground_truth):
        return False
    text = _clean(output)
    if subset == "gpqa":
        return _same_letter(parse_multiple_choice(text, "D"), ground_truth, "ABCD")
    if subset == "mmlu_pro":
        return _same_letter(parse_multiple_choice(text, "J"), ground_truth, "ABCDEFGHIJ")
    if subset == "math500":
        return _math500_correct(extract_boxed(text), ground_truth)
    return _same_integer(parse_aime_answer(text), ground_truth)


CodeGrader = Callable[[Sequence[str], Sequence[str]], Sequence[bool] | None]
"""Grades LiveCodeBench outputs against their question ids: each sample's
verdict in order, or None when they could not be graded."""


def deepseek_r1_exact_match(
    outputs: Sequence[str | None],
    ground_truths: Sequence[object],
    datasets: Sequence[str],
    *,
    grade_code: CodeGrader | None = None,
) -> DeepSeekR1Score:
    """Exact match (percent) of DeepSeek-R1 outputs, overall and per subset.

    One entry per issued sample, in the same order in the three sequences.
    Per subset and overall, the mean of 100/0 per graded sample, as MLPerf's
    evaluator computes ``exact_match``; LiveCodeBench samples are counted in
    ``ungraded`` and left out (see the module docstring).
    """
    if not len(outputs) == len(ground_truths) == len(datasets):
        raise ValueError(
            f"{len(outputs)} outputs, {len(ground_truths)} ground truths and "
            f"{len(datasets)} dataset names: one each per sample"
        )
    correct: dict[str, int] = {}
    samples: dict[str, int] = {}
    code: list[tuple[str, str, str]] = []  # LiveCodeBench: (output, question id, dataset)
    for output, ground_truth, dataset in zip(outputs, ground_truths, datasets, strict=True):
        if subset_of(dataset) == CODE_SUBSET:
            code.append((output or "", str(ground_truth), str(dataset)))
            continue
        name = str(dataset)
        samples[name] = samples.get(name, 0) + 1
        hit = grade_deepseek_r1_sample(output, ground_truth, dataset)
        correct[name] = correct.get(name, 0) + int(hit)
    verdicts = None
    if code and grade_code is not None:
        verdicts = grade_code([c[0] for c in code], [c[1] for c in code])
    ungraded = len(code) if verdicts is None else 0
    for (_, _, name), hit in zip(code, verdicts or (), strict=verdicts is not None):
        samples[name] = samples.get(name, 0) + 1
        correct[name] = correct.get(name, 0) + int(hit)
    graded = sum(samples.values())
    overall = 100.0 * sum(correct.values()) / graded if graded else None
    return DeepSeekR1Score(
        exact_match=overall,
        subset_exact_match={s: 100.0 * correct[s] / samples[s] for s in samples},
        subset_samples=samples,
        graded=graded,
        ungraded=ungraded,
    )
