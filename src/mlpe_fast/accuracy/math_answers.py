"""Whether a MATH-style answer equals the ground truth, as MLPerf grades MATH500.

MLPerf's DeepSeek-R1 evaluator (mlcommons/inference
``language/deepseek-r1/eval_accuracy.py`` at e59ce58, vendored by the
reference client under ``evaluation/legacy_mlperf_deepseek_r1``) grades its
MATH500 subset with OpenAI's PRM800K grader (openai/prm800k
``prm800k/grading/grader.py`` and ``math_normalize.py`` at 7ecc794, the
commit the reference pins).  :func:`grade_answer` reproduces that grader
step by step, in our own code:

1. **Hendrycks normalisation** (:func:`normalize_hendrycks`, the MATH
   release's ``math_equivalence``): strip line breaks, ``\\!``, ``\\left`` /
   ``\\right``, degrees (``^\\circ``), ``\\$``, ``\\%`` and units after
   ``\\text{ ``; ``tfrac``/``dfrac`` to ``frac``; ``.5`` to ``0.5``; drop a
   short ``k =`` prefix; ``\\sqrt3`` to ``\\sqrt{3}``; remove spaces;
   ``\\frac12`` to ``\\frac{1}{2}``; ``0.5`` to ``\\frac{1}{2}``; ``a/b`` of
   integers to ``\\frac{a}{b}``.  Equal strings are correct.
2. **PRM800K normalisation** (:func:`normalize_prm800k`): drop ``\\text{}``,
   ``$``, ``%``, units, thousands commas and braces; integers in float form
   to integers; remaining LaTeX rendered to text with ``pylatexenc``;
   mixed numbers (``7 3/4``) to sums; lower case.  Equal strings are correct.
3. **Element-wise comparison** of tuples and intervals: the brackets must
   agree, unreduced fractions must match exactly, an integer ground truth
   needs an integer answer, and anything else is correct when ``sympy``
   simplifies the difference to 0 (skipped for expressions with more than
   two distinct letters or with exponents that could hang ``sympy``).

Nothing is left out.  Like the original, a ``sympy`` simplification has no
time limit, and ``sympy`` parses the (filtered) answer text by evaluating it
as Python, as PRM800K does.

``sympy`` and ``pylatexenc`` are imported on first use (about 0.5 s).
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
from collections.abc import Callable
from typing import Any

__all__ = ("grade_answer", "normalize_hendrycks", "normalize_prm800k")


class _Unnormalizable(Exception):
    """Raised where the MATH release's normaliser fails on malformed LaTeX
    (the answer is then compared as given)."""


# ---------------------------------------------------------------------------
# Step 1: the MATH release's normalisation (PRM800K ``math_normalize.py``)
# ---------------------------------------------------------------------------

_WHOLE_TEXT = re.compile(r"^\\text\{(?P<text>.+?)\}$")


def normalize_hendrycks(answer: str) -> str:
    """``answer`` in the MATH release's normal form (``normalize_answer``).

    When the normaliser cannot handle the LaTeX (``\\sqrt`` or ``\\frac`` with
    nothing after it, or ``\\text{ `` twice), the answer is returned stripped
    and without an enclosing ``\\text{}``, as PRM800K does.
    """
    answer = answer.strip()
    whole_text = _WHOLE_TEXT.search(answer)
    if whole_text is not None:
        answer = whole_text.group("text").strip()
    try:
        return _strip_string(answer)
    except _Unnormalizable:
        return answer


def _strip_string(text: str) -> str:
    for old, new in (
        ("\n", ""),
        ("\\!", ""),
        ("\\\\", "\\"),
        ("tfrac", "frac"),
        ("dfrac", "frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\$", ""),
    ):
        text = text.replace(old, new)
    text = _drop_units_after_text(text)
    text = text.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    # "k = 3" and "x=3" become "3" (a left side of at most two characters)
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        text = sides[1]
    text = _brace_sqrt_argument(text).replace(" ", "")
    text = _brace_frac_arguments(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _slash_to_frac(text)


def _drop_units_after_text(text: str) -> str:
    # "\text{ " only ever introduces units in the MATH data: keep what precedes it
    if "\\text{ " not in text:
        return text
    parts = text.split("\\text{ ")
    if len(parts) != 2:
        raise _Unnormalizable(text)
    return parts[0]


def _brace_sqrt_argument(text: str) -> str:
    # "\sqrt3" -> "\sqrt{3}": a one-character argument gets braces
    parts = text.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        if not part:
            raise _Unnormalizable(text)
        out += "\\sqrt" + (part if part[0] == "{" else "{" + part[0] + "}" + part[1:])
    return out


def _brace_frac_arguments(text: str) -> str:
    # "\frac12" -> "\frac{1}{2}", "\frac1{72}" -> "\frac{1}{72}"
    parts = text.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if not part:
            raise _Unnormalizable(text)
        if part[0] == "{":
            out += part
        elif len(part) < 2:
            return text  # "\fracx": left as it was
        elif part[1] == "{":
            out += "{" + part[0] + "}" + part[1:]
        else:
            out += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
    return out


def _slash_to_frac(text: str) -> str:
    # "3/4" -> "\frac{3}{4}", only for two integers written plainly
    parts = text.split("/")
    if len(parts) != 2:
        return text
    try:
        numerator, denominator = int(parts[0]), int(parts[1])
    except ValueError:
        return text
    if text != f"{numerator}/{denominator}":
        return text
    return f"\\frac{{{numerator}}}{{{denominator}}}"


# ---------------------------------------------------------------------------
# Step 2: PRM800K's own normalisation (``grader.py`` ``_normalize``)
# ---------------------------------------------------------------------------

_UNITS = (
    "degree",
    "cm",
    "centimeter",
    "meter",
    "mile",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "foot",
    "feet",
    "inch",
    "yard",
)
_UNIT_PATTERNS = tuple(re.compile(unit + r"(es)?(s)? *(\^[0-9]+)?") for unit in _UNITS)
_DEGREE_SIGN = re.compile(r"\^ *\\circ")
_THIN_SPACE_AFTER_COMMA = re.compile(r",\\! *")
_MINUS_SPACE = re.compile(r"- *")
_MIXED_NUMBER = re.compile(r"([0-9]) +([0-9])")
_THOUSANDS_COMMA = re.compile(r"(\d)(,)(\d\d\d)($|\D)")


def normalize_prm800k(answer: str) -> str:
    """``answer`` in PRM800K's normal form (``grader._normalize``)."""
    whole_text = _WHOLE_TEXT.search(answer)
    if whole_text is not None:
        answer = whole_text.group("text")
    for old, new in (
        ("\\%", "%"),
        ("\\$", "$"),
        ("$", ""),
        ("%", ""),
        (" or ", " , "),
        (" and ", " , "),
        ("million", "*10^6"),
        ("billion", "*10^9"),
        ("trillion", "*10^12"),
    ):
        answer = answer.replace(old, new)
    for unit in _UNIT_PATTERNS:
        answer = unit.sub("", answer)
    answer = _DEGREE_SIGN.sub("", answer)
    if answer[:1] == "{" and answer[-1:] == "}":
        answer = answer[1:-1]
    answer = _THIN_SPACE_AFTER_COMMA.sub("", answer)
    as_float = _float_or_none(answer)
    if as_float is not None and _is_whole(as_float):
        answer = str(round(as_float))
    if "\\" in answer:
        try:
            answer = _latex_to_text(answer)
        except Exception:  # pylatexenc's failures are not part of its API
            pass
    answer = _MINUS_SPACE.sub("-", answer)
    answer = _MIXED_NUMBER.sub(r"\1+\2", answer)
    answer = answer.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _is_integer_text(answer):
        answer = str(int(float(answer.replace(",", ""))))
    return answer


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _is_whole(value: float) -> bool:
    try:
        return abs(value - round(value)) <= 1e-7
    except (OverflowError, ValueError):  # infinities and NaN
        return False


def _strip_thousands_commas(text: str) -> str:
    # "1,000,000" -> "1000000", leaving tuple commas ("1,2") alone
    while True:
        stripped = _THOUSANDS_COMMA.sub(r"\1\3\4", text)
        if stripped == text:
            return text
        text = stripped


def _is_integer_text(text: str) -> bool:
    value = _float_or_none(_strip_thousands_commas(text))
    return value is not None and _is_whole(value)


@functools.cache
def _latex_renderer() -> Any:
    # pylatexenc logs a warning for each malformed macro it tolerates
    # ("\frac" with one argument, ...): common in model answers, and noise.
    logging.getLogger("pylatexenc").setLevel(logging.ERROR)
    latex2text = importlib.import_module("pylatexenc.latex2text")
    return latex2text.LatexNodes2Text()


def _latex_to_text(expr: str) -> str:
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac")
    expr = expr.replace("\\frac", " \\frac")  # keeps "1\frac{1}{2}" a mixed number
    expr = str(_latex_renderer().latex_to_text(expr))
    # the characters pylatexenc renders that sympy cannot read
    for symbol, name in (
        ("\u221a", "sqrt"),  # square root sign
        ("\u03c0", "pi"),  # Greek small letter pi
        ("\u221e", "inf"),  # infinity
        ("\u222a", "U"),  # union
        ("\u00b7", "*"),  # middle dot
        ("\u00d7", "*"),  # multiplication sign
    ):
        expr = expr.replace(symbol, name)
    return expr.strip()


# ---------------------------------------------------------------------------
# Step 3: element-wise comparison (``grader.grade_answer``)
# ---------------------------------------------------------------------------

_BRACKETS = "()[]"
_HANG_RISK_SUBSTRINGS = ("^{", "^(")
_HANG_RISK_PATTERNS = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
_PLAIN_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")


def grade_answer(given: str | None, ground_truth: str) -> bool:
    """Whether ``given`` is a correct answer for ``ground_truth`` (PRM800K).

    Correct when the two agree after either normalisation, or element by
    element (for tuples and intervals, with matching brackets) when ``sympy``
    finds each difference to be zero.  ``None`` (no answer) is wrong.
    """
    if given is None:
        return False
    if normalize_hendrycks(ground_truth) == normalize_hendrycks(given):
        return True
    truth = normalize_prm800k(ground_truth)
    answer = normalize_prm800k(given)
    if truth == answer:
        return True
    if not answer:
        return False
    truth_parts = _split_tuple(truth)
    answer_parts = _split_tuple(answer)
    if len(truth_parts) > 1 and (truth[0] != answer[0] or truth[-1] != answer[-1]):
        return False
    if len(truth_parts) != len(answer_parts):
        return False
    return all(_elements_equal(t, a) for t, a in zip(truth_parts, answer_parts, strict=True))


def _split_tuple(expr: str) -> list[str]:
    expr = _strip_thousands_commas(expr)
    if not expr:
        return []
    inner = expr[1:-1]
    if (
        len(expr) > 2
        and expr[0] in _BRACKETS
        and expr[-1] in _BRACKETS
        and not any(bracket in inner for bracket in _BRACKETS)
    ):
        return [part.strip() for part in inner.split(",")]
    return [expr]


def _elements_equal(truth: str, answer: str) -> bool:
    if _PLAIN_FRACTION.search(truth) and _PLAIN_FRACTION.search(answer):
        return truth == answer  # an unreduced fraction is not accepted
    if _is_integer_text(truth) != _is_integer_text(answer):
        return False  # an integer ground truth needs an integer answer
    return _equal_under_sympy(truth, answer)


def _worth_evaluating(expr: str) -> bool:
    letters = {char for char in expr.replace("sqrt", "").replace("frac", "") if char.isalpha()}
    if len(letters) > 2:
        return False
    if any(risk in expr for risk in _HANG_RISK_SUBSTRINGS):
        return False
    return not any(pattern.search(expr) for pattern in _HANG_RISK_PATTERNS)


def _equal_under_sympy(truth: str, answer: str) -> bool:
    difference = f"({truth})-({answer})"
    if not _worth_evaluating(difference):
        return False
    try:
        sympy, parse = _sympy_tools()
        return bool(sympy.simplify(parse(difference)) == 0)
    except Exception:  # any parse or simplification failure means "not shown equal"
        return False


@functools.cache
def _sympy_tools() -> tuple[Any, Callable[[str], Any]]:
    sympy = importlib.import_module("sympy")
    parser = importlib.import_module("sympy.parsing.sympy_parser")
    transformations = (
        *parser.standard_transformations,
        parser.implicit_multiplication_application,
    )

    def parse(expr: str) -> Any:
        return parser.parse_expr(expr.replace("^", "**"), transformations=transformations)

    return sympy, parse
