"""``mlpe-fast run`` says so when answers are not what was asked for, end to
end against ``mlpe-fast serve`` committing what llama-cpp-python does.

Two endpoint behaviours, each reproduced on purpose by the simulated
endpoint:

* ``--fault interrupt`` / ``--fault empty-done``: llama.cpp's
  ``interrupt_requests`` ends the streams in flight with ``data: [DONE]``
  and no finish reason; before their first token they are empty.  Empty
  ones fail as ``EmptyAnswer``, cut ones complete but count as
  ``unfinished``.
* ``--max-tokens-field max_tokens``: the endpoint honours ``max_tokens``
  only, so a run that sends ``max_completion_tokens`` gets answers longer
  than asked (``longer_than_asked``) unless it adds ``--send-max-tokens``.

Each is checked everywhere a run says it: the exit status (6), the WARNING
lines of the terminal table, ``mlpe_fast.answers`` in
``result_summary.json`` (cross-checked against ``events.jsonl`` and, for
the faults, against the server's seeded draws), the WARNINGS section of
``report.txt``; and ``mlpe-fast analyze`` still reads the folder.  The runs
are in-process (``mlpe_fast.cli.main``), the servers in their own processes.
"""

from __future__ import annotations

import http.client
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import mlpe_fast.sim
from mlpe_fast.artifacts.events import ErrorData, EventRecord, TextModelOutput, read_events
from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.sim._state import ServerState
from mlpe_fast.sim.server import SimServer, build_arg_parser, config_from_args
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

DEMO_DATASET = str(Path(mlpe_fast.sim.__file__).parent / "demo_prompts.jsonl")
N = 32
TOKENS = 8  # asked of the faulty endpoint
ASKED = 16  # asked of the endpoints with long answers
CONTEXT = 48  # their simulated context, which caps the answers
FAULTY = ("--seed", "7", "--fault", "empty-done=0.5", "--fault", "interrupt=0.5")
# answers of about 40 tokens when the request's limit is not read, at most CONTEXT
LONG = ("--seed", "3", "--output-len", "40", "--output-len-dist", "normal")
LONG += ("--output-len-spread", "0.5", "--max-output-tokens", str(CONTEXT))
ANSWER_KEYS = {"asked_tokens", "empty", "unfinished", "longer_than_asked", "longest", "warnings"}


# --- servers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faulty_server() -> Iterator[str]:
    with simulated_endpoint(FAULTY) as url:
        yield url


@pytest.fixture(scope="module")
def max_tokens_only_server() -> Iterator[str]:
    """Honours ``max_tokens`` only, as llama-cpp-python does."""
    with simulated_endpoint((*LONG, "--max-tokens-field", "max_tokens")) as url:
        yield url


@pytest.fixture(scope="module")
def honest_server() -> Iterator[str]:
    """The same lengths, but ``max_completion_tokens`` is honoured (the default)."""
    with simulated_endpoint(LONG) as url:
        yield url


# --- helpers -------------------------------------------------------------------------


def _run(
    capsys: pytest.CaptureFixture[str], url: str, folder: Path, *extra: str
) -> tuple[int, str, str]:
    """``mlpe-fast run`` of N demo prompts at concurrency 4: (status, stdout, stderr)."""
    capsys.readouterr()
    code = main(
        [
            *("run", "--no-progress", "--endpoints", url, "--model", "mlpe-sim"),
            *("--tokenizer", DEMO_TOKENIZER, "--dataset", DEMO_DATASET),
            *("--num-samples", str(N), "--concurrency", "4", "--report-dir", str(folder)),
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def _summary(folder: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(
        (folder / "performance" / "result_summary.json").read_bytes()
    )
    assert summary["n_samples_issued"] == N
    assert summary["n_samples_completed"] + summary["n_samples_failed"] == N
    return summary


def _text(event: EventRecord) -> str:
    assert isinstance(event.data, TextModelOutput)
    output = event.data.output
    return output if isinstance(output, str) else "".join(output)


def _answers(folder: Path) -> tuple[list[EventRecord], list[EventRecord]]:
    """The ``sample.complete`` events of the answers, and the ``error.*`` ones."""
    events = read_events(folder / "events.jsonl")
    errors = [e for e in events if e.event_type.startswith("error.")]
    failed = {e.sample_uuid for e in errors}
    completes = [e for e in events if e.event_type == "sample.complete"]
    assert len(completes) == N and len({e.sample_uuid for e in completes}) == N
    return [e for e in completes if e.sample_uuid not in failed], errors


def _warning_lines(out: str) -> list[str]:
    """The terminal table's warnings, one per line (the first says WARNING)."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("  WARNING ")), None)
    if start is None:
        return []
    found = [lines[start].removeprefix("  WARNING").strip()]
    for line in lines[start + 1 :]:
        if not line.startswith("   ") or not line.strip():
            break
        found.append(line.strip())
    return found


def _report_warnings(folder: Path) -> list[str]:
    report = (folder / "report.txt").read_text()
    if "\nWARNINGS\n" not in report:
        return []
    section = report.split("\nWARNINGS\n", 1)[1]
    return [line.strip() for line in section.splitlines() if line.startswith("  ")]


def _analyze_reproduces(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``analyze`` reproduces the summary, and finds the empty and
    unfinished answers again from the log alone (the endpoint's usage is not
    logged, so lengths are its own count's)."""
    capsys.readouterr()
    assert main(["analyze", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"reproduces {folder / 'performance' / 'result_summary.json'}" in out, out[-400:]
    stored = _summary(folder)["mlpe_fast"]["answers"]
    again = json.loads((folder / "analysis" / "result_summary.json").read_bytes())
    found = again["mlpe_fast"]["answers"]
    assert (found["empty"], found["unfinished"]) == (stored["empty"], stored["unfinished"])
    if stored["empty"] or stored["unfinished"]:
        assert "WARNINGS" in out


def _seeded_faults(flags: tuple[str, ...], requests: int) -> Counter[str]:
    """The faults the server's seeded draws give its first ``requests``
    completion requests (every fault here applies to any request)."""
    config = config_from_args(build_arg_parser().parse_args(list(flags)))
    state = ServerState(config, pacer=None)  # type: ignore[arg-type]  # no request is served
    picker = state.faults
    assert picker is not None
    picks = [
        picker.pick(state.started_ns, streamed=True, http1=True, chunked=True, keep_alive=True)
        for _ in range(requests)
    ]
    return Counter(spec.name for spec in picks if spec is not None)


# --- interrupted and empty answers ---------------------------------------------------


def test_interrupted_and_empty_answers_are_counted_and_warned_about(
    faulty_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    code, out, err = _run(capsys, faulty_server, run, "--max-output-tokens", str(TOKENS))
    assert code == 6, err
    assert "some answers are not what was asked for" in err

    # each request reached the server once: the counts are the seed's
    seeded = _seeded_faults(FAULTY, N)
    empty, cut = seeded["empty-done"], seeded["interrupt"]
    assert empty > 0 and cut > 0 and empty + cut < N

    summary = _summary(run)
    assert summary["n_samples_failed"] == empty
    assert summary["mlpe_fast"]["errors"] == {"EmptyAnswer": empty}
    answers = summary["mlpe_fast"]["answers"]
    assert set(answers) == ANSWER_KEYS
    assert answers["asked_tokens"] == TOKENS
    assert (answers["empty"], answers["unfinished"]) == (empty, cut)
    assert (answers["longer_than_asked"], answers["longest"]) == (0, TOKENS)
    warnings = answers["warnings"]
    assert len(warnings) == 2
    assert warnings[0].startswith(f"{empty} answer") and "EmptyAnswer" in warnings[0]
    assert warnings[1].startswith(f"{cut} answer") and "without a finish reason" in warnings[1]

    # events.jsonl: the failures, and the answers with and without a finish reason
    completed, errors = _answers(run)
    assert len(errors) == empty
    for event in errors:
        assert event.event_type == "error.generic" and isinstance(event.data, ErrorData)
        assert event.data.error_type == "EmptyAnswer"
        assert "no output and no finish reason" in event.data.error_message
    unfinished = [e for e in completed if e.finish_reason is msgspec.UNSET]
    assert len(unfinished) == cut
    assert all(len(_text(e)) == TOKENS // 2 for e in unfinished)  # [DONE] after half
    whole = [e for e in completed if e.finish_reason is not msgspec.UNSET]
    assert len(whole) == N - empty - cut
    assert all(e.finish_reason == "length" and len(_text(e)) == TOKENS for e in whole)

    # the terminal and report.txt
    assert f"{N - empty} done, {empty} failed of {N} issued" in out
    assert f"EmptyAnswer {empty}" in out
    assert _warning_lines(out) == warnings
    assert _report_warnings(run) == warnings

    _analyze_reproduces(run, capsys)


# --- answers longer than asked -------------------------------------------------------


def test_an_endpoint_that_honours_only_max_tokens_gives_longer_answers(
    max_tokens_only_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    code, out, err = _run(capsys, max_tokens_only_server, run, "--max-output-tokens", str(ASKED))
    assert code == 6, err

    answers = _summary(run)["mlpe_fast"]["answers"]
    completed, errors = _answers(run)
    assert not errors and len(completed) == N
    assert {e.finish_reason for e in completed} == {"stop"}  # the limit was not read
    lengths = [len(_text(e)) for e in completed]  # one character, one token
    longer = sum(1 for n in lengths if n > ASKED)
    assert longer > 0
    assert (answers["longer_than_asked"], answers["longest"]) == (longer, max(lengths))
    assert ASKED < max(lengths) <= CONTEXT  # capped by the simulated context
    assert (answers["empty"], answers["unfinished"]) == (0, 0)
    (warning,) = answers["warnings"]
    assert warning.startswith(f"{longer} answer") and f"the {ASKED} tokens asked" in warning
    assert "--send-max-tokens" in warning
    assert _warning_lines(out) == [warning]
    assert _report_warnings(run) == [warning]

    # the remedy: max_tokens too
    fixed = tmp_path / "fixed"
    code, out, err = _run(
        capsys,
        max_tokens_only_server,
        fixed,
        *("--max-output-tokens", str(ASKED), "--send-max-tokens"),
    )
    assert code == 0, err
    assert "WARNING" not in out and "not what was asked" not in err
    answers = _summary(fixed)["mlpe_fast"]["answers"]
    assert answers["longer_than_asked"] == 0 and answers["warnings"] == []
    assert answers["longest"] == ASKED
    completed, errors = _answers(fixed)
    assert not errors
    assert all(e.finish_reason == "length" and len(_text(e)) == ASKED for e in completed)
    assert _report_warnings(fixed) == []


def test_a_clean_run_exits_0_without_a_warning(
    honest_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    code, out, err = _run(capsys, honest_server, run, "--max-output-tokens", str(ASKED))
    assert code == 0, err
    assert "WARNING" not in out and "not what was asked" not in err
    assert f"{N} done, 0 failed of {N} issued" in out
    answers = _summary(run)["mlpe_fast"]["answers"]
    assert answers == {
        "asked_tokens": ASKED,
        "empty": 0,
        "unfinished": 0,
        "longer_than_asked": 0,
        "longest": ASKED,
        "warnings": [],
    }
    completed, errors = _answers(run)
    assert not errors
    assert all(e.finish_reason == "length" and len(_text(e)) == ASKED for e in completed)
    assert "WARNINGS" not in (run / "report.txt").read_text()


# --- the simulated endpoint's side ---------------------------------------------------


@pytest.mark.parametrize(
    ("field", "chat", "completions"),
    [
        ("both", 5, 7),  # max_completion_tokens first, then max_tokens
        ("max_tokens", 6, 7),
        ("max_completion_tokens", 5, 7),  # completions have max_tokens only
        ("none", 40, 40),
    ],
)
def test_max_tokens_field_says_which_limit_is_read(field: str, chat: int, completions: int) -> None:
    """The answer's length: the limit read, else an --output-len draw."""
    flags = ["--output-len", "40", "--max-output-tokens", "100", "--max-tokens-field", field]
    config = config_from_args(build_arg_parser().parse_args(flags))
    assert config.max_tokens_field == field
    messages = [{"role": "user", "content": "hi"}]
    with SimServer.start_in_thread(config) as sim:
        conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)

        def ask(path: str, **body: Any) -> tuple[int, int | None]:
            conn.request("POST", path, json.dumps({"model": "m", **body}))
            response = conn.getresponse()
            doc = json.loads(response.read())
            if response.status != 200:
                return response.status, None
            choice = doc["choices"][0]
            text = choice["message"]["content"] if "message" in choice else choice["text"]
            assert choice["finish_reason"] == ("stop" if len(text) == 40 else "length")
            return response.status, len(text)

        chat_path, completions_path = "/v1/chat/completions", "/v1/completions"
        both = ask(chat_path, messages=messages, max_completion_tokens=5, max_tokens=6)
        assert both == (200, chat)
        assert ask(completions_path, prompt="hi", max_tokens=7) == (200, completions)
        # a limit read must fit the simulated context; one ignored is not checked
        status, _ = ask(chat_path, messages=messages, max_completion_tokens=1000)
        assert status == (400 if field in ("both", "max_completion_tokens") else 200)
        conn.close()
