"""LiveCodeBench scoring (the reference's ``code_bench_scorer``): each
sample's extracted program run against its problem's tests.

A LiveCodeBench accuracy dataset (gpt-oss-120b: ``livecodebench`` x 3
repeats) holds prompts and each problem's ``question_id`` -- its ground
truth column (``accuracy_config.ground_truth``, ``question_id`` by default
for this scorer).  The program is the last fenced Python block of the
output (``python_code_extractor``, :func:`~.extract.extract_python_code`).
A sample passes when its program passes every test of its problem (public
then private, in order); the score is pass@1 over every *issued* sample,
repeats included -- a query that failed or gave no code fails -- as the
reference's ``code_bench_scorer`` computes it, in percent here.

Two routes, chosen by ``accuracy_config.extras``:

* the reference's ``lcb_serve`` service (``lcb_service_url``, or the
  reference's ``lcb_websocket_port`` on localhost): :mod:`.lcb_service`;
* local, only when the dataset allows it (``local_eval: true``, as the
  reference asks for ``ALLOW_LCB_LOCAL_EVAL``: the model's programs then run
  on this machine, isolated as :mod:`.sandbox` says and no more): the tests
  are read from
  ``test_cases_dir`` (default ``test_cases/`` beside the dataset), one
  ``<question_id>.json`` per problem in the layout the reference's
  ``generate.py`` writes (``public_test_cases``, ``private_test_cases``
  -- JSON, or base64 of zlib of a pickled JSON string, as the Hugging Face
  set stores them -- and ``func_name``), and every program runs in its own
  :mod:`.sandbox` child under :mod:`.lcb_harness`, as many at once as there
  are cores (``workers``).

The time limit of each test is ``timeout`` seconds (the reference's extra,
default 60); a program's whole run may take ``(timeout + 1) x tests + 5``
seconds, the reference's global bound, and its CPU time the same.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from ..errors import MlpeError
from .extract import extract_python_code
from .lcb_service import LcbServiceError, check_service, evaluate_on_service
from .sandbox import SandboxLimits, network_isolation, run_sandboxed

__all__ = (
    "CODE_BENCH_METHOD",
    "LiveCodeBenchError",
    "LiveCodeBenchOptions",
    "LiveCodeBenchScore",
    "ProblemTests",
    "check_ready",
    "grade_programs",
    "load_test_suite",
    "score_livecodebench",
)

CODE_BENCH_METHOD = "code_bench_scorer"
"""The reference's ``eval_method`` name of LiveCodeBench scoring."""

_HARNESS = Path(__file__).with_name("lcb_harness.py")
_DEFAULT_PORT_HOST = "http://localhost"


class LiveCodeBenchError(MlpeError, RuntimeError):
    """LiveCodeBench cannot be scored (no tests, a bad option, the service)."""


class LiveCodeBenchOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a LiveCodeBench dataset is scored (module docstring)."""

    service_url: str | None = None
    local_eval: bool = False
    test_cases_dir: Path | None = None
    timeout_s: int = 60
    workers: int = 1
    memory_bytes: int = 4 << 30
    version_tag: str | None = None
    service_timeout_s: float = 7200.0

    @classmethod
    def from_extras(cls, extras: Mapping[str, Any], *, dataset_path: str) -> LiveCodeBenchOptions:
        """The options of an ``accuracy_config.extras`` mapping.

        Raises:
            LiveCodeBenchError: a value of the wrong kind.
        """
        try:
            url = extras.get("lcb_service_url")
            port = extras.get("lcb_websocket_port")
            if url is None and port is not None:
                url = f"{_DEFAULT_PORT_HOST}:{int(port)}"
            cases = extras.get("test_cases_dir")
            default_cases = Path(dataset_path).parent / "test_cases"
            local = extras.get("local_eval", False)
            if not isinstance(local, bool):
                raise TypeError(f"local_eval: expected true or false, got {local!r}")
            return cls(
                service_url=None if url is None else str(url).rstrip("/") + "/",
                local_eval=local,
                test_cases_dir=Path(cases) if cases is not None else default_cases,
                timeout_s=int(extras.get("timeout", 60)),
                workers=int(extras.get("workers", len(os.sched_getaffinity(0)))),
                memory_bytes=int(extras.get("memory_mb", 4096)) << 20,
                version_tag=None if "lcb_version" not in extras else str(extras["lcb_version"]),
                service_timeout_s=float(extras.get("service_timeout_s", 7200.0)),
            )
        except (TypeError, ValueError) as error:
            raise LiveCodeBenchError(f"accuracy_config.extras: {error}") from None


class ProblemTests(msgspec.Struct, frozen=True):
    """One problem's tests: inputs and expected outputs in order, and the
    function to call (None: a standard input problem)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn_name: str | None = None


class _OnlyText(pickle.Unpickler):
    """Unpickles a plain string and nothing else: a pickle that names any
    class or function (which could run code) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused: {module}.{name}")


def _test_cases(value: Any, where: str) -> list[Any]:
    """The test cases of a ``*_test_cases`` value: a list, JSON text, or the
    Hugging Face set's base64 of zlib of a pickled JSON string."""
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        raise LiveCodeBenchError(f"{where}: test cases are {type(value).__name__}")
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError:
        try:
            raw = zlib.decompress(base64.b64decode(value))
            decoded = json.loads(_OnlyText(io.BytesIO(raw)).load())
        except (ValueError, zlib.error, pickle.UnpicklingError, TypeError) as error:
            raise LiveCodeBenchError(f"{where}: unreadable test cases: {error}") from None
    if not isinstance(decoded, list):
        raise LiveCodeBenchError(f"{where}: test cases are not a list")
    return decoded


def _case_path(directory: Path, question_id: str) -> Path:
    if not question_id or "/" in question_id or question_id.startswith("."):
        raise LiveCodeBenchError(f"question id {question_id!r} cannot name a test-case file")
    return directory / f"{question_id}.json"


def load_test_suite(directory: Path, question_id: str) -> ProblemTests:
    """The tests of one problem from ``directory/<question_id>.json``.

    Raises:
        LiveCodeBenchError: the file is missing, unreadable or holds no test.
    """
    path = _case_path(directory, question_id)
    try:
        data = json.loads(path.read_bytes())
    except (OSError, json.JSONDecodeError) as error:
        raise LiveCodeBenchError(f"LiveCodeBench tests of {question_id!r}: {error}") from None
    where = str(path)
    cases = _test_cases(data.get("public_test_cases", []), where) + _test_cases(
        data.get("private_test_cases", []), where
    )
    if not cases:
        raise LiveCodeBenchError(f"{where}: no test cases")
    try:
        inputs = tuple(str(case["input"]) for case in cases)
        outputs = tuple(str(case["output"]) for case in cases)
    except (KeyError, TypeError):
        raise LiveCodeBenchError(f"{where}: a test case without input or output") from None
    fn_name = data.get("func_name") or data.get("fn_name") or None
    return ProblemTests(inputs, outputs, None if fn_name is None else str(fn_name))


def check_test_cases(directory: Path, question_ids: Sequence[str]) -> None:
    """Every problem has its test-case file (read at scoring time).

    Raises:
        LiveCodeBenchError: one line naming the first problem without one.
    """
    if not directory.is_dir():
        raise LiveCodeBenchError(
            f"LiveCodeBench: no test cases at {directory} (set accuracy_config.extras."
            f"test_cases_dir, or lcb_service_url to score with the lcb_serve service)"
        )
    for question_id in dict.fromkeys(question_ids):
        if not _case_path(directory, question_id).is_file():
            raise LiveCodeBenchError(
                f"LiveCodeBench: no test cases for {question_id!r} in {directory}"
            )


def check_ready(options: LiveCodeBenchOptions, question_ids: Sequence[str]) -> None:
    """That the dataset can be scored, before any load: the service answers
    its health check, or every problem has its tests here.

    Raises:
        LiveCodeBenchError: one line saying what is missing.
    """
    if options.service_url is not None:
        try:
            check_service(options.service_url, version_tag=options.version_tag)
        except LcbServiceError as error:
            raise LiveCodeBenchError(str(error)) from None
    elif not options.local_eval:
        raise LiveCodeBenchError(
            "LiveCodeBench: name the lcb_serve service (accuracy_config.extras.lcb_service_url) "
            "or let the model's programs run on this machine in the sandbox "
            "(accuracy_config.extras.local_eval: true; docs/accuracy.md says what it isolates)"
        )
    else:
        check_test_cases(options.test_cases_dir or Path("test_cases"), question_ids)


def _limits(suite: ProblemTests, timeout_s: int, memory_bytes: int) -> SandboxLimits:
    # The reference's bound on one program's run (lcb_serve.run_code_subprocess).
    whole = (timeout_s + 1) * len(suite.inputs) + 5
    return SandboxLimits(wall_s=float(whole), cpu_s=whole, memory_bytes=memory_bytes)


def _passes(code: str, suite: ProblemTests, options: LiveCodeBenchOptions) -> bool:
    """Whether ``code`` passes every test of ``suite`` in the sandbox; a
    crash, a kill at the time limit or an unreadable verdict is a failure."""
    job = msgspec.json.encode(
        {
            "code": code,
            "fn_name": suite.fn_name,
            "inputs": suite.inputs,
            "outputs": suite.outputs,
            "timeout_s": options.timeout_s,
        }
    )
    result = run_sandboxed(_HARNESS, job, _limits(suite, options.timeout_s, options.memory_bytes))
    if result.timed_out or result.returncode != 0:
        return False
    try:
        verdict = json.loads(result.stdout)
        results = verdict["results"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return False
    return len(results) == len(suite.inputs) and all(r is True for r in results)


def grade_programs(
    programs: Sequence[tuple[str, ProblemTests]], options: LiveCodeBenchOptions
) -> list[bool]:
    """Whether each ``(code, suite)`` passes, in order, ``options.workers``
    sandboxes at a time (threads: each waits on its child)."""
    with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
        return list(pool.map(lambda p: _passes(p[0], p[1], options), programs))


class LiveCodeBenchScore(msgspec.Struct, frozen=True, kw_only=True):
    """pass@1 in percent over the issued samples (None when they could not
    be graded), how many passed and were graded, the route taken and, when
    grading failed, why."""

    pass_at_1: float | None
    passed: int
    graded: int
    route: str
    network: str | None = None
    error: str | None = None
    verdicts: tuple[bool, ...] = ()  # each sample's, in order (empty when ungraded)

    @property
    def complete(self) -> bool:
        return self.error is None


# A program that cannot pass, for an output with no code block (the reference
# sends such a placeholder so that every problem has its full list of codes).
NO_CODE = "raise SystemExit('no code block in the output')"


def _ungraded(route: str, error: str) -> LiveCodeBenchScore:
    return LiveCodeBenchScore(pass_at_1=None, passed=0, graded=0, route=route, error=error)


def score_livecodebench(
    predictions: Sequence[str],
    question_ids: Sequence[str],
    options: LiveCodeBenchOptions,
    *,
    extract: Callable[[str], str | None] = extract_python_code,
) -> LiveCodeBenchScore:
    """pass@1 of LiveCodeBench outputs, one per issued sample (module doc);
    ``extract`` takes the program from an output (the last Python block by
    default; DeepSeek-R1's evaluator takes the first)."""
    codes = [extract(text) for text in predictions]
    if options.service_url is not None:
        programs = [(qid, code or NO_CODE) for qid, code in zip(question_ids, codes, strict=True)]
        try:
            passed = evaluate_on_service(
                options.service_url,
                programs,
                timeout_s=options.timeout_s,
                deadline_s=options.service_timeout_s,
            )
        except LcbServiceError as error:
            return LiveCodeBenchScore(
                pass_at_1=None, passed=0, graded=0, route="service", error=str(error)
            )
        route, network = "service", None
    elif not options.local_eval:  # check_ready says so before a run; `score` here
        return LiveCodeBenchScore(
            pass_at_1=None,
            passed=0,
            graded=0,
            route="local",
            error="no lcb_service_url, and local_eval is not true (module docstring)",
        )
    else:
        directory = options.test_cases_dir or Path("test_cases")
        try:
            suites = {qid: load_test_suite(directory, qid) for qid in dict.fromkeys(question_ids)}
        except LiveCodeBenchError as error:
            return LiveCodeBenchScore(
                pass_at_1=None, passed=0, graded=0, route="local", error=str(error)
            )
        runnable = [(i, code) for i, code in enumerate(codes) if code]
        verdicts = grade_programs(
            [(code, suites[question_ids[i]]) for i, code in runnable], options
        )
        passed = [False] * len(codes)
        for (i, _), verdict in zip(runnable, verdicts, strict=True):
            passed[i] = verdict
        route, network = "local", network_isolation()
    hits = sum(passed)
    total = len(predictions)
    return LiveCodeBenchScore(
        pass_at_1=100.0 * hits / total if total else 0.0,
        passed=hits,
        graded=total,
        route=route,
        network=network,
        verdicts=tuple(bool(v) for v in passed),
    )
