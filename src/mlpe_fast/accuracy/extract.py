"""Answer extraction: the value an accuracy scorer compares with the ground truth.

Each function takes one model output (the text the reference client scores,
``str(TextModelOutput)``) and returns the answer it holds, or ``None`` when it
holds none.  The rules are the reference client's extractors
(mlcommons/endpoints ``evaluation/extractor.py`` at ea332753, the names its
YAML ``accuracy_config.extractor`` uses), themselves ports of OpenAI's
gpt-oss evals, rewritten here:

* :func:`extract_abcd` (``abcd_extractor``, GPQA): the letter of a
  multiple-choice answer, returned as the GPQA ground-truth column holds it,
  ``"choice1"`` .. ``"choice4"``;
* :func:`extract_boxed_math` (``boxed_math_extractor``, AIME25 for
  gpt-oss-120b): the *lazy* ``boxed{...}`` match of the reference -- not
  brace-balanced, last comma-separated part, falling back to the last
  integer in the text;
* :func:`extract_identity` (``identity_extractor``, CNN/DailyMail): the text;
* :func:`extract_python_code` (``python_code_extractor``, LiveCodeBench): the
  program of the last fenced code block.

:func:`extract_boxed` is the brace-balanced ``\\boxed{...}`` of MLPerf's
DeepSeek-R1 evaluator (``parse_boxed_math``), used for its MATH500 subset.
The two boxed rules differ on purpose, each faithful to the scorer that uses
it: on ``\\boxed{\\frac{1}{2}}`` the gpt-oss rule gives ``\\frac{1`` and the
DeepSeek-R1 rule ``\\frac{1}{2}``.

The reference returns ``""`` where these return ``None``; neither equals a
ground truth, so scores are the same.
"""

from __future__ import annotations

import re

__all__ = (
    "extract_abcd",
    "extract_boxed",
    "extract_boxed_math",
    "extract_identity",
    "extract_python_code",
)

_WRAP = r"(?:\*{1,2}|_{1,2})"
"""A markdown emphasis marker: ``*``, ``**``, ``_`` or ``__``."""

_SEP = "[:\\-\u2013]"
"""An optional separator after "Answer": colon, hyphen or en dash."""

# The GPQA answer patterns, best first.  The first pattern that matches
# anywhere in the text decides; within one pattern the first match counts.
# (The reference sorts all matches by (priority, match length), and as each
# pattern contributes at most one match, that order is the list order.)
# Only the patterns flagged (?i) accept a lower-case letter; it is
# upper-cased.
_ABCD_PATTERNS: tuple[re.Pattern[str], ...] = (
    # "**Answer:** A", "*Answers* - B": wrapped word, then a bare letter
    re.compile(rf"(?i){_WRAP}Answers?\s*{_SEP}?{_WRAP}\s*([ABCD])\b"),
    # a line opening with "Answer", optional colon and wrappers, then the letter
    re.compile(
        rf"(?im)^\s*{_WRAP}?Answer:?{_WRAP}?\s*:?\s*{_WRAP}?([ABCD]){_WRAP}?\s*",
    ),
    # "Answer: (C)"
    re.compile(rf"(?i)\bAnswers?\b\s*{_SEP}?\s*\(\s*([ABCD])\s*\)"),
    # "Answer: C", "Answers - D"
    re.compile(rf"(?i)\bAnswers?\b\s*{_SEP}?\s*([ABCD])\b"),
    # "Option B", "Choice: C"
    re.compile(rf"(?i)\b(?:Option|Choice)\b\s*{_SEP}?\s*([ABCD])\b"),
    # a letter anywhere inside \boxed{...} (up to its first closing brace)
    re.compile(r"\\boxed\{[^}]*?([ABCD])[^}]*\}"),
    # \boxed{\textbf{...C...}}
    re.compile(r"\\boxed\{[^}]*?\\textbf\{[^}]*?([ABCD])[^}]*\}[^}]*\}"),
    # \boxed{\text{...C...}}
    re.compile(r"\\boxed\{[^}]*?\\text\{[^}]*?([ABCD])[^}]*\}[^}]*\}"),
    # a bracketed letter standing alone: "(A)", "[B]"
    re.compile(r"(?<![A-Za-z0-9])[(\[]\s*([ABCD])\s*[)\]](?![A-Za-z0-9])"),
    # an emphasised letter standing alone: "*A*", "**B**", "_C_", "__D__"
    re.compile(rf"(?<![A-Za-z0-9]){_WRAP}([ABCD]){_WRAP}(?![A-Za-z0-9])"),
    # \textbf{...C...}
    re.compile(r"\\textbf\{[^}]*?([ABCD])[^}]*\}"),
    # an emphasised "D) description" on one line: "**D) 42 m**"
    re.compile(rf"(?<![A-Za-z0-9]){_WRAP}\s*([ABCD])\)[^*_\n]+?{_WRAP}(?![A-Za-z0-9])"),
    # a line that opens with the letter: "A", "B.", "C)", "**D**: because ..."
    re.compile(rf"(?m)^\s*{_WRAP}?([ABCD]){_WRAP}?\s*[.)\-\u2013:]?\s*.*$"),
)

_CHOICE_OF_LETTER = {"A": "choice1", "B": "choice2", "C": "choice3", "D": "choice4"}


def extract_abcd(text: str) -> str | None:
    """The GPQA choice ``text`` answers, as ``"choice1"`` (A) .. ``"choice4"`` (D).

    The reference dataset shuffles the four options per question and stores
    the correct one's column name in ``ground_truth``, so the letter is mapped
    to that name.  When no pattern matches, the first character of the text
    (after one leading ``**``) is taken if it is a letter A-D in either case,
    the last resort of OpenAI's ``extract_abcd``.
    """
    for pattern in _ABCD_PATTERNS:
        match = pattern.search(text)
        if match is not None:
            return _CHOICE_OF_LETTER[match.group(1).upper()]
    rest = text.removeprefix("**")
    if rest:
        return _CHOICE_OF_LETTER.get(rest[0].upper())
    return None


_LAZY_BOXED = re.compile(r"(?:boxed|framebox)\{(.*?)\}", re.DOTALL)
_INTEGER = re.compile(r"\d+")


def extract_boxed_math(text: str) -> str | None:
    """The answer of the reference's ``boxed_math_extractor`` (gpt-oss AIME25).

    The last non-empty ``boxed{...}`` or ``framebox{...}`` body, cut at its
    *first* closing brace (no nesting: ``\\boxed{\\frac{1}{2}}`` gives
    ``\\frac{1``), and of that the part after the last comma, stripped.  With
    no such body, the last run of digits in the text; else ``None``.  The
    gpt-oss AIME ground truth is the integer as a string, compared exactly.
    """
    for body in reversed(_LAZY_BOXED.findall(text)):
        if body:
            return str(body).rsplit(",", 1)[-1].strip()
    integers = _INTEGER.findall(text)
    return str(integers[-1]) if integers else None


_BOXED_OPEN = "\\boxed{"


def extract_boxed(text: str) -> str | None:
    """The body of the last ``\\boxed{`` in ``text``, braces balanced, stripped.

    MLPerf's DeepSeek-R1 evaluator (``parse_boxed_math``): the last
    occurrence of ``\\boxed{`` is taken and read up to the brace that closes
    it, so ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``.  ``None`` when the
    text has no ``\\boxed{`` or the last one is never closed; ``""`` for an
    empty box.
    """
    text = text.strip()
    start = text.rfind(_BOXED_OPEN)
    if start < 0:
        return None
    body_start = start + len(_BOXED_OPEN)
    depth = 0
    for index in range(body_start, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return text[body_start:index].strip()
            depth -= 1
    return None


def extract_identity(text: str) -> str:
    """The text itself (``identity_extractor``)."""
    return text


_PYTHON_FENCE = re.compile(r"```python(.*?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```(.*?)```", re.DOTALL)
_LANGUAGE_TAG = re.compile(r"^(?:python|py)\s*\n", re.IGNORECASE)


def extract_first_python_code(text: str) -> str | None:
    """The program MLPerf's DeepSeek-R1 evaluator grades of a LiveCodeBench
    sample: the body of the *first* ```` ```python ```` block, else of the
    first plain fence (tag line dropped), stripped; None without a closed
    fence (:func:`extract_python_code` takes the last, as gpt-oss's)."""
    text = text.strip()
    blocks = _PYTHON_FENCE.findall(text)
    if blocks:
        return str(blocks[0]).strip()
    blocks = _ANY_FENCE.findall(text)
    if blocks:
        return _LANGUAGE_TAG.sub("", str(blocks[0]).strip())
    return None


def extract_python_code(text: str) -> str | None:
    """The program of the reference's ``python_code_extractor`` (gpt-oss's
    LiveCodeBench ``parse_code``): the body of the last ```` ```python ````
    block, else of the last plain ```` ``` ```` block (without a leading
    ``py``/``python`` tag line), stripped; ``None`` when the text has no
    closed fence.  Fences are matched left to right, so an unclosed last
    fence is ignored.
    """
    text = text.strip()
    blocks = _PYTHON_FENCE.findall(text)
    if blocks:
        return str(blocks[-1]).strip()
    blocks = _ANY_FENCE.findall(text)
    if blocks:
        return _LANGUAGE_TAG.sub("", str(blocks[-1]).strip())
    return None
