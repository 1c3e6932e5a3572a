"""The exit status of ``mlpe-fast run`` from its points' results
(``run_status.py``): which outcome wins, and the line each one says."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import pytest

from mlpe_fast.metrics.answers import AnswerChecks
from mlpe_fast.run_status import (
    EXIT_ENGINE_LOST,
    EXIT_FOLDER_REFUSED,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_SUCCEEDED,
    EXIT_SUSPECT_ANSWERS,
    RunStatus,
)


def _result(
    *,
    issued: int = 4,
    completed: int = 4,
    failure: str | None = None,
    suspect: bool = False,
    folder_error: str | None = None,
) -> Any:
    stats = SimpleNamespace(
        issued=issued,
        completed=completed,
        error_examples={"ConnectError": "connection refused"} if completed < issued else {},
    )
    answers = AnswerChecks(asked=8, unfinished=1 if suspect else 0)
    return SimpleNamespace(stats=stats, failure=failure, answers=answers, folder_error=folder_error)


def _config(concurrency: int, report_dir: str = "") -> Any:
    return SimpleNamespace(concurrency=concurrency, report_dir=report_dir)


def test_a_clean_run_is_0_and_says_nothing() -> None:
    err = io.StringIO()
    status = RunStatus(err)
    status.took(_config(1), _result())
    assert status.exit_status(interrupted=False, curve=False) == 0
    assert err.getvalue() == ""


def test_an_engine_lost_wins_over_everything_and_is_said_when_it_happens() -> None:
    err = io.StringIO()
    status = RunStatus(err)
    status.took(_config(4, "out/r4"), _result(failure="engine 1 exited", suspect=True))
    assert err.getvalue() == (
        "mlpe-fast: the point was cut short: engine 1 exited; partial results in out/r4\n"
    )
    assert status.exit_status(interrupted=True, curve=True) == EXIT_ENGINE_LOST


def test_a_refused_run_folder_is_said_when_the_point_ends_and_wins_over_an_interrupt() -> None:
    # The point stopped itself (an interrupt of its own): the disk is why.
    err = io.StringIO()
    status = RunStatus(err)
    status.took(_config(4, "out/r4"), _result(folder_error="out/r4/events.jsonl: File too large"))
    assert err.getvalue() == (
        "mlpe-fast: the disk refused the run folder (out/r4/events.jsonl: File too large): the "
        "point stopped there; the figures above cover what completed, the folder is incomplete\n"
    )
    assert status.exit_status(interrupted=True, curve=False) == EXIT_FOLDER_REFUSED
    assert err.getvalue().count("\n") == 1  # and nothing more


@pytest.mark.parametrize(
    ("curve", "line"),
    [
        (True, "interrupted; the curve stops at that point"),
        (False, "interrupted; the results cover what completed"),
    ],
)
def test_an_interruption_comes_before_what_its_points_lack(curve: bool, line: str) -> None:
    err = io.StringIO()
    status = RunStatus(err)
    status.took(_config(2), _result(completed=0))
    assert status.exit_status(interrupted=True, curve=curve) == EXIT_INTERRUPTED
    assert err.getvalue() == f"mlpe-fast: {line}\n"


def test_nothing_succeeded_names_the_points_when_there_are_several() -> None:
    err = io.StringIO()
    status = RunStatus(err)
    status.took(_config(1), _result(completed=0))
    status.took(_config(8), _result(completed=0, suspect=True))
    assert status.exit_status(interrupted=False, curve=True) == EXIT_NOTHING_SUCCEEDED
    assert err.getvalue() == (
        "mlpe-fast: no request succeeded at concurrency 1, concurrency 8: connection refused\n"
    )


def test_suspect_answers_are_the_last_to_count() -> None:
    err = io.StringIO()
    status = RunStatus(err)
    status.took(_config(1), _result(suspect=True))
    status.took(_config(2), _result())
    status.took(_config(4), _result(suspect=True))
    assert status.exit_status(interrupted=False, curve=True) == EXIT_SUSPECT_ANSWERS
    assert "(at concurrency 1, concurrency 4)" in err.getvalue()
