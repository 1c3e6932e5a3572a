"""Running the official MLPerf Endpoints submission checker on a bundle.

The checker is the authority on what a submission must be (spec §4), so mlpe-fast
runs it rather than imitating it: ``submission_checker.checker.SubmissionChecker``
from ``endpoints-submission-cli`` (spec §4.3; the same rules ``check-submission``
and PRISM's ``submissions create`` apply).  It is an optional dependency, installed
with ``pip install endpoints-submission-cli``.

With ``strict`` a warning fails the check too, as ``check-submission --strict``
does; findings come back as ``(rule, message)`` pairs in the checker's order.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import UsageError

__all__ = ("CheckOutcome", "checker_version", "run_checker")

_INSTALL_HINT = (
    "the MLPerf Endpoints submission checker is not installed: "
    'pip install endpoints-submission-cli (or pip install "mlpe-fast[submission]")'
)


@dataclass(frozen=True)
class CheckOutcome:
    """The checker's verdict on a bundle.

    Attributes:
        passed: no errors, and with ``strict`` no warnings either.
        strict: whether warnings counted as failures.
        errors: ``(rule, message)`` of every error.
        warnings: ``(rule, message)`` of every warning.
        checker_version: the installed ``endpoints-submission-cli`` version.
    """

    passed: bool
    strict: bool
    errors: tuple[tuple[str, str], ...]
    warnings: tuple[tuple[str, str], ...]
    checker_version: str

    @property
    def rules_failed(self) -> set[str]:
        """Rules with an error (with ``strict``, with a warning too)."""
        failed = {rule for rule, _ in self.errors}
        if self.strict:
            failed |= {rule for rule, _ in self.warnings}
        return failed


def checker_version() -> str:
    """The installed checker's version, or ``"unknown"``."""
    try:
        return metadata.version("endpoints-submission-cli")
    except metadata.PackageNotFoundError:
        return "unknown"


def run_checker(bundle_root: str | Path, *, strict: bool = False) -> CheckOutcome:
    """Checks the bundle at ``bundle_root`` (the org folder or the submission folder).

    Raises:
        UsageError: the checker is not installed, or ``bundle_root`` is not a folder.
    """
    root = Path(bundle_root)
    if not root.is_dir():
        raise UsageError(f"{root}: no such bundle folder")
    try:
        checker: Any = importlib.import_module("submission_checker.checker")
    except ImportError:
        raise UsageError(_INSTALL_HINT) from None
    report = checker.SubmissionChecker(root).run()
    errors = tuple((result.rule, result.message) for result in report.errors)
    warnings = tuple((result.rule, result.message) for result in report.warnings)
    return CheckOutcome(
        passed=not errors and not (strict and warnings),
        strict=strict,
        errors=errors,
        warnings=warnings,
        checker_version=checker_version(),
    )
