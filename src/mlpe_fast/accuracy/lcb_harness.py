"""The child side of LiveCodeBench grading: one program against its tests.

Run inside :mod:`.sandbox` (``sandbox_guard.py`` runs this file), never
imported for its effect; standard library only.  It reads one job as JSON
from standard input -- ``{"code", "fn_name", "inputs", "outputs",
"timeout_s"}`` -- and writes ``{"results": [...], "error": ...}`` to the
standard output it was given (fd 1 is then pointed at ``/dev/null``, so
what the program writes there is not taken for the verdict).

The rules are LiveCodeBench's (``lcb_runner/evaluation/testing_util.py``,
which the reference's ``lcb_serve`` runs; rewritten here):

* every program first gets the names of a fixed set of standard modules
  (``from collections import *`` and so on, and the modules themselves) and
  a recursion limit of 50,000, as LiveCodeBench's prelude gives them;
* a *functional* problem (``fn_name`` set, LeetCode style) runs the program
  once; when it defines ``class Solution`` the method is looked up on an
  instance of it, else as a module-level function.  Each test input is one
  JSON value per line, the positional arguments; the output is one JSON
  value; a returned tuple counts as a list; the comparison is ``==``;
* a *standard input* problem runs the whole program once per test as
  ``__main__`` with the test's input as its standard input (``input()``,
  ``sys.stdin``, ``open(0)`` alike) and its ``sys.stdout`` captured.  The
  output matches when, both stripped and split into lines, each stripped,
  there are as many lines and every line is equal, or else holds the same
  numbers as :class:`decimal.Decimal` (so ``1.50`` equals ``1.5``);
* each test may take ``timeout_s`` seconds; ``SystemExit`` ends a run
  normally;
* tests run in order and stop at the first that fails.  A result is
  ``true`` (passed), ``-2`` (wrong answer), ``-3`` (time limit) or ``-4``
  (runtime or compile error), LiveCodeBench's codes.
"""

from __future__ import annotations

import builtins
import decimal
import io
import json
import os
import signal
import sys
from typing import Any

WRONG_ANSWER, TIME_LIMIT, RUNTIME_ERROR = -2, -3, -4

_PRELUDE_MODULES = (
    *("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random"),
    *("statistics", "itertools", "functools", "operator", "io", "sys", "json"),
)
_PRELUDE_STAR = (*_PRELUDE_MODULES, "builtins", "typing")
PRELUDE = (
    "".join(f"from {m} import *\n" for m in _PRELUDE_STAR)
    + "".join(f"import {m}\n" for m in _PRELUDE_MODULES)
    + "sys.setrecursionlimit(50000)\n"
)


class OutOfTime(BaseException):
    """A test ran out of time.  A BaseException, so that a program's own
    ``except Exception`` cannot swallow it and run on."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise OutOfTime


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _as_decimals(line: str) -> list[decimal.Decimal] | None:
    try:
        return [decimal.Decimal(word) for word in line.split()]
    except decimal.InvalidOperation:
        return None


def stdio_output_matches(got: str, expected: str) -> bool:
    """The output rule of a standard input problem (module docstring)."""
    got_lines, expected_lines = _stripped_lines(got), _stripped_lines(expected)
    if len(got_lines) != len(expected_lines):
        return False
    for mine, theirs in zip(got_lines, expected_lines, strict=True):
        if mine == theirs:
            continue
        mine_numbers, their_numbers = _as_decimals(mine), _as_decimals(theirs)
        if mine_numbers is None or their_numbers is None or mine_numbers != their_numbers:
            return False
    return True


def _prelude_globals() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    exec(PRELUDE, namespace)
    return namespace


def _failed(code: int, results: list[Any], error: str) -> dict[str, Any]:
    return {"results": [*results, code], "error": error}


def grade_functional(job: dict[str, Any]) -> dict[str, Any]:
    timeout, name = job["timeout_s"], job["fn_name"]
    namespace = _prelude_globals()
    namespace["__name__"] = "solution"
    try:
        with _Deadline(timeout):
            exec(compile(job["code"], "<solution>", "exec"), namespace)
            holder = namespace["Solution"]() if "class Solution" in job["code"] else None
    except OutOfTime:
        return _failed(TIME_LIMIT, [], "time limit while loading")
    except BaseException as error:  # the program's own failure, whatever it is
        return _failed(RUNTIME_ERROR, [], f"does not load: {error!r}")
    method = getattr(holder, name, None) if holder is not None else namespace.get(name)
    if method is None:
        return _failed(RUNTIME_ERROR, [], f"no function {name!r}")
    results: list[Any] = []
    for given, expected in zip(job["inputs"], job["outputs"], strict=True):
        arguments = [json.loads(line) for line in given.split("\n")]
        want = json.loads(expected)
        try:
            with _Deadline(timeout):
                got = method(*arguments)
        except OutOfTime:
            return _failed(TIME_LIMIT, results, "time limit")
        except BaseException as error:
            return _failed(RUNTIME_ERROR, results, repr(error))
        if isinstance(got, tuple):
            got = list(got)
        if got != want:
            return _failed(WRONG_ANSWER, results, "wrong answer")
        results.append(True)
    return {"results": results, "error": None}


def _run_as_main(program: Any, given: str) -> str:
    """Runs ``program`` once as ``__main__`` on ``given`` as standard input,
    returning what it printed."""
    with open("stdin.txt", "w", encoding="utf-8") as f:
        f.write(given)
    fd = os.open("stdin.txt", os.O_RDONLY)
    if fd != 0:  # 0 when the last test's program closed its stdin (open(0))
        os.dup2(fd, 0)
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "rb", closefd=False), encoding="utf-8")
    captured = io.BytesIO()
    stdout = io.TextIOWrapper(captured, encoding="utf-8", write_through=True)
    sys.stdout = stdout
    try:
        exec(program, _prelude_globals())
    except SystemExit:
        pass
    finally:
        sys.stdout = sys.__stdout__
        stdout.flush()
        stdout.detach()  # else collecting the wrapper would close the buffer
    return captured.getvalue().decode("utf-8", errors="replace")


def grade_stdio(job: dict[str, Any]) -> dict[str, Any]:
    try:
        program = compile(job["code"], "<solution>", "exec")
    except BaseException as error:
        return _failed(RUNTIME_ERROR, [], f"does not compile: {error!r}")
    results: list[Any] = []
    for given, expected in zip(job["inputs"], job["outputs"], strict=True):
        try:
            with _Deadline(job["timeout_s"]):
                got = _run_as_main(program, given)
        except OutOfTime:
            return _failed(TIME_LIMIT, results, "time limit")
        except BaseException as error:
            return _failed(RUNTIME_ERROR, results, repr(error))
        if not stdio_output_matches(got, expected):
            return _failed(WRONG_ANSWER, results, "wrong answer")
        results.append(True)
    return {"results": results, "error": None}


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    verdict_fd = os.dup(1)
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGALRM, _on_alarm)
    verdict = grade_functional(job) if job.get("fn_name") else grade_stdio(job)
    with os.fdopen(verdict_fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(verdict))


if __name__ == "__main__":
    main()
