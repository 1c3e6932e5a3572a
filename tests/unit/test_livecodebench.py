"""LiveCodeBench scoring, locally: the ``python_code_extractor``, the
sandbox (limits, isolation, clean-up), LiveCodeBench's grading rules
(standard input and functional problems) and the test-case files."""

from __future__ import annotations

import base64
import json
import os
import pickle
import socket
import threading
import time
import zlib
from pathlib import Path

import pytest

from mlpe_fast.accuracy.extract import extract_python_code
from mlpe_fast.accuracy.lcb_harness import stdio_output_matches
from mlpe_fast.accuracy.livecodebench import (
    LiveCodeBenchError,
    LiveCodeBenchOptions,
    ProblemTests,
    grade_programs,
    load_test_suite,
    score_livecodebench,
)
from mlpe_fast.accuracy.sandbox import SandboxLimits, network_isolation, run_sandboxed
from mlpe_fast.accuracy.scorers import EXTRACTORS
from tests.data_files import LCB_TINY

F = "```"
SUM = ProblemTests(("1 2\n", "-4 4\n"), ("3\n", "0\n"))
OPTIONS = LiveCodeBenchOptions(timeout_s=2, workers=2, memory_bytes=256 << 20)


def passes(code: str, suite: ProblemTests = SUM, options: LiveCodeBenchOptions = OPTIONS) -> bool:
    [verdict] = grade_programs([(code, suite)], options)
    return verdict


# --- the extractor -----------------------------------------------------------------


def test_the_extractor_takes_the_last_python_block() -> None:
    text = f"first\n{F}python\nprint(1)\n{F}\nthen\n{F}python\nprint(2)\n{F}\n{F}\nnot code\n{F}"
    assert extract_python_code(text) == "print(2)"
    assert EXTRACTORS["python_code_extractor"] is extract_python_code


def test_the_extractor_falls_back_to_a_plain_block_without_its_tag() -> None:
    assert extract_python_code(f"{F}\nx = 1\n{F} and {F}py\nx = 2\n{F}") == "x = 2"
    assert extract_python_code(f"{F}\nprint('a')\n{F}") == "print('a')"


def test_the_extractor_without_a_closed_fence() -> None:
    assert extract_python_code("just prose, no code") is None
    assert extract_python_code(f"{F}python\nprint(1)") is None


# --- the sandbox ---------------------------------------------------------------------


def test_a_program_that_passes_and_one_that_is_wrong() -> None:
    assert passes("a, b = map(int, input().split())\nprint(a + b)")
    assert passes("import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))")
    assert passes("print(sum(map(int, open(0).read().split())))")
    assert not passes("print(3)")  # right on the first test only


def test_a_hang_is_stopped_at_the_time_limit_and_fails() -> None:
    began = time.monotonic()
    assert not passes("import time\ntime.sleep(60)")
    # A program that ignores the per-test alarm is killed by the CPU or wall limit.
    assert not passes("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile 1: pass")
    assert time.monotonic() - began < 20


def test_crashes_fail() -> None:
    assert not passes("raise ValueError('no')")
    assert not passes("import os\nos.kill(os.getpid(), 11)")
    assert not passes("def f(:\n")


def test_memory_past_the_limit_fails() -> None:
    assert not passes("x = bytearray(1 << 30)\nprint(3)")
    assert passes("x = bytearray(1 << 20)\na, b = map(int, input().split())\nprint(a + b)")


def test_a_write_outside_the_scratch_directory_does_not_happen(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    answer = "\na, b = map(int, input().split())\nprint(a + b)"
    for attempt in (
        f"open({str(target)!r}, 'w').write('x')",
        f"import os\nos.close(os.open({str(target)!r}, os.O_CREAT | os.O_WRONLY))",
        f"import pathlib\npathlib.Path({str(target)!r}).write_text('x')",
    ):
        assert not passes(attempt + answer)
    assert not target.exists()
    # inside its own scratch directory a program may write
    assert passes("open('note.txt', 'w').write('x')" + answer)


def test_the_scratch_directory_is_removed(tmp_path: Path) -> None:
    script = tmp_path / "where.py"
    script.write_text("import os\nopen('left.txt', 'w').write('x')\nprint(os.getcwd())")
    result = run_sandboxed(script, b"", SandboxLimits(wall_s=10))
    assert result.returncode == 0, result.stderr
    scratch = Path(result.stdout.decode().strip())
    assert scratch.name.startswith("mlpe-sandbox-") and not scratch.exists()


def test_the_environment_is_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLPE_SECRET_TOKEN", "s3cret")
    script = tmp_path / "env.py"
    script.write_text("import os, json\nprint(json.dumps(dict(os.environ)))")
    result = run_sandboxed(script, b"", SandboxLimits(wall_s=10))
    env = json.loads(result.stdout)
    assert "MLPE_SECRET_TOKEN" not in env and set(env) <= {"PATH", "HOME", "TMPDIR", "LANG"}


def test_no_connection_reaches_a_loopback_server() -> None:
    connected = threading.Event()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    server.accept()[0].close()
                    connected.set()
                except TimeoutError:
                    continue

        thread = threading.Thread(target=accept)
        thread.start()
        try:
            dial = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            assert not passes(dial + "a, b = map(int, input().split())\nprint(a + b)")
            # the host can reach it: the refusal is the sandbox's
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            assert connected.wait(2)
            connected.clear()
            assert not passes(dial + "print(3)")
            time.sleep(0.3)
            assert not connected.is_set()
        finally:
            stop.set()
            thread.join()
    assert network_isolation() in ("netns", "audit-hook")


def test_no_program_is_started() -> None:
    assert not passes("import subprocess\nsubprocess.run(['true'])\nprint(3)\nprint(0)")
    assert not passes("import os\nos.system('true')")
    assert not passes("import ctypes")


# --- LiveCodeBench's rules ---------------------------------------------------------


def test_stdio_outputs_compare_by_lines_then_decimals() -> None:
    assert stdio_output_matches("1 2\n3  \n\n", "1 2\n3")
    assert stdio_output_matches("1.50 2\n", "1.5 2.0")
    assert not stdio_output_matches("1 2", "1 2\n3")
    assert not stdio_output_matches("1.5 x", "1.50 x")  # not all numbers: exact only
    assert not stdio_output_matches("0.333", "0.3333")


def test_functional_problems_call_the_solution_method() -> None:
    suite = ProblemTests(("[1, 2, 3]\n2", "[4]\n4"), ("[0, 2]", "[0, 0]"), "pairs")
    leetcode = "class Solution:\n    def pairs(self, xs: List[int], k: int):\n"
    assert passes(leetcode + "        return (0, len(xs) - 1) if k == 2 else [0, 0]", suite)
    assert not passes(leetcode + "        return [0, 1]", suite)
    assert passes("def pairs(xs, k):\n    return [0, len(xs) - 1] if k == 2 else [0, 0]", suite)
    assert not passes("class Solution:\n    def other(self, xs, k):\n        return 1", suite)


def test_a_timeout_counts_per_test() -> None:
    suite = ProblemTests(("1", "2"), ("1", "2"), "f")
    slow = "import time\ndef f(n):\n    time.sleep(1.5 * n)\n    return n"
    assert passes(slow, suite, LiveCodeBenchOptions(timeout_s=4, workers=1))
    assert not passes(slow, suite, LiveCodeBenchOptions(timeout_s=2, workers=1))


# --- test cases and the score -------------------------------------------------------


def test_test_cases_in_every_stored_form() -> None:
    suite = load_test_suite(LCB_TINY.parent / "test_cases", "lcb_half")
    assert suite.inputs == ("3\n", "8\n") and suite.outputs == ("1.5\n", "4.000\n")
    assert load_test_suite(LCB_TINY.parent / "test_cases", "lcb_two_sum").fn_name == "twoSum"


def test_a_pickle_that_is_not_plain_text_is_refused(tmp_path: Path) -> None:
    hostile = base64.b64encode(zlib.compress(pickle.dumps(os.getcwd))).decode()
    (tmp_path / "q.json").write_text(json.dumps({"private_test_cases": hostile}))
    with pytest.raises(LiveCodeBenchError, match="unreadable test cases"):
        load_test_suite(tmp_path, "q")
    with pytest.raises(LiveCodeBenchError):
        load_test_suite(tmp_path, "../q")


def test_pass_at_1_over_issued_samples_and_repeats() -> None:
    rows = [json.loads(line) for line in LCB_TINY.read_text().splitlines()]
    texts = [r["response"] for r in rows] * 2
    ids = [r["question_id"] for r in rows] * 2
    texts[-1] = ""  # a query that failed, on the second repeat
    cases = LCB_TINY.parent / "test_cases"
    options = LiveCodeBenchOptions(test_cases_dir=cases, workers=2, local_eval=True)
    score = score_livecodebench(texts, ids, options)
    assert (score.passed, score.graded, score.route, score.complete) == (6, 10, "local", True)
    assert score.pass_at_1 == 60.0
    # without local_eval nothing runs here: no score, and the reason
    refused = score_livecodebench(texts, ids, LiveCodeBenchOptions(test_cases_dir=cases))
    assert refused.pass_at_1 is None and not refused.complete and "local_eval" in str(refused.error)
