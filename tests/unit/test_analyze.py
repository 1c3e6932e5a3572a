"""`mlpe-fast analyze` over a hand-built events.jsonl in the reference
client's format, counted with the `char_chat` tokenizer of tests/data (one
character = one token; its chat template renders reasoning and tool calls).
Every expected number is worked out by hand below (spec §1.1-1.2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.analyze import analyze
from mlpe_fast.errors import UsageError
from tests.data_files import CHAR_CHAT_TOKENIZER as CHAR_CHAT

A, B, C, D = ("a" * 32, "b" * 32, "c" * 32, "d" * 32)
MS = 1_000_000


def ev(kind: str, t: int, uuid: str = "", data: Any = None, **extra: Any) -> str:
    line = {
        "event_type": kind,
        "timestamp_ns": t,
        "sample_uuid": uuid,
        "conversation_id": "",
        "turn": None,
        "data": data,
        **extra,
    }
    return json.dumps(line)


def prompt_text(text: str) -> list[Any]:
    return ["PromptData", text, None, None, None, None, None, None]


def prompt_messages(messages: list[dict[str, str]]) -> list[Any]:
    return ["PromptData", None, None, messages, None, None, None, None]


def output(out: Any, reasoning: Any = None, tool_calls: Any = None) -> list[Any]:
    return ["TextModelOutput", out, reasoning, tool_calls]


LOG = [
    ev("session.started", 0),
    ev("session.start_performance_tracking", 10 * MS),
    # A: plain text, streamed as "He" then "llo world"
    ev("sample.issued", 10 * MS, A, prompt_text("hello")),
    ev("sample.recv_first", 30 * MS, A),
    ev("sample.complete", 48 * MS, A, output(["He", "llo world"]), finish_reason="stop"),
    # B: reasoning first ("ab" then "cd"), then content "xyz"
    ev("sample.issued", 11 * MS, B, prompt_messages([{"role": "user", "content": "q?"}])),
    ev("sample.recv_first", 21 * MS, B),
    ev("sample.complete", 61 * MS, B, output("xyz", ["ab", "cd"]), finish_reason="stop"),
    # C: one tool call whose arguments came in two chunks
    ev("sample.issued", 12 * MS, C, prompt_text("call")),
    ev("sample.recv_first", 40 * MS, C),
    ev(
        "sample.complete",
        70 * MS,
        C,
        output(
            [],
            None,
            [
                [
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get", "arguments": '{"x"'},
                    }
                ],
                [{"index": 0, "function": {"arguments": ": 1}"}}],
            ],
        ),
        finish_reason="tool_calls",
    ),
    # D: failed after its first token
    ev("sample.issued", 13 * MS, D, prompt_text("boom")),
    ev("sample.recv_first", 20 * MS, D),
    ev("error.generic", 90 * MS, D, ["ErrorData", "IdleTimeout", "no byte for 300 s"]),
    ev("sample.complete", 90 * MS, D, None),
    ev("session.stop_performance_tracking", 95 * MS),
    ev("session.ended", 96 * MS),
]

# char_chat's template (transformers renders it with trim_blocks: the newline
# right after a "{% ... %}" tag is dropped):
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
THINK = len("<think>") + len("</think>")
TOOL = len("<tool_call>") + len("</tool_call>")

OSL = {
    A: len("Hello world"),
    B: len("xyz") + THINK + len("abcd"),
    C: TOOL + len('get({"x": 1})'),  # arguments parsed, then rendered with tojson
}
TPOT_TOKENS = {
    A: len("llo world"),
    B: len("xyz") + THINK + len("cd"),  # all content, reasoning after its first chunk
    # The first tool-call group held the first token; the rest is a call with
    # no name whose arguments ": 1}" are not JSON, so tojson quotes them.
    C: TOOL + len('(": 1}")'),
}
ISL = {
    A: len("hello"),  # a text prompt is counted as text, as the reference does
    B: len(f"{IM_START}user\nq?{IM_END}\n{IM_START}assistant\n"),
    C: len("call"),
    D: len("boom"),
}


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    (tmp_path / "events.jsonl").write_text("\n".join(LOG) + "\n")
    (tmp_path / "config.yaml").write_text(
        f"model_params:\n  name: m\n  streaming: 'on'\n  tokenizer_name: {CHAR_CHAT}\n"
        "settings:\n  load_pattern:\n    type: concurrency\n    target_concurrency: 4\n"
    )
    return tmp_path


def test_counts_and_metrics_by_hand(run_folder: Path) -> None:
    summary = analyze(run_folder).summary
    assert (summary["n_samples_issued"], summary["n_samples_completed"]) == (4, 3)
    assert summary["n_samples_failed"] == 1
    osl = summary["output_sequence_lengths"]
    assert osl["total"] == sum(OSL.values())
    assert (osl["min"], osl["max"]) == (min(OSL.values()), max(OSL.values()))
    isl = summary["input_sequence_lengths"]
    assert isl["total"] == sum(ISL.values())  # the failed query's prompt counts too
    assert (isl["min"], isl["max"]) == (min(ISL.values()), max(ISL.values()))
    # TTFT of the completed queries only: 20, 10, 28 ms
    ttft = summary["ttft"]
    assert (ttft["min"], ttft["max"], ttft["total"]) == (10 * MS, 28 * MS, 58 * MS)
    tpot = summary["tpot"]
    expected = sorted(
        [18 * MS / TPOT_TOKENS[A], 40 * MS / TPOT_TOKENS[B], 30 * MS / TPOT_TOKENS[C]]
    )
    assert (tpot["min"], tpot["max"]) == (expected[0], expected[-1])
    assert tpot["percentiles"]["90.0"] == expected[1]  # numpy "lower" on 3 samples
    assert summary["tps_per_user"] == 1000 / (expected[1] / 1e6)
    # window: tracking start (10 ms) to the last completion (the failure, 90 ms)
    assert summary["duration_ns"] == 80 * MS
    assert summary["system_tps"] == sum(OSL.values()) / 0.080
    assert summary["finish_reason_counts"]["stop"] == 2
    assert summary["finish_reason_counts"]["tool_calls"] == 1


def test_bad_logs_are_one_line_usage_errors(run_folder: Path) -> None:
    (run_folder / "events.jsonl").write_text(LOG[0] + "\nnot json\n")
    with pytest.raises(UsageError, match=r"events.jsonl:2: not an event record"):
        analyze(run_folder)
    (run_folder / "config.yaml").write_text("model_params: {name: ''}\n")
    (run_folder / "events.jsonl").write_text(LOG[0] + "\n")
    with pytest.raises(UsageError, match="names no tokenizer"):
        analyze(run_folder)


# Partial and odd run folders, counted with the demo tokenizer (one printable
# character, one token) that ships with the package.

E, F = ("e" * 32, "f" * 32)
SMALL = [
    ev("session.started", 0),
    ev("session.start_performance_tracking", 10 * MS),
    ev("sample.issued", 10 * MS, E, prompt_text("hello")),
    ev("sample.recv_first", 30 * MS, E),
    ev("sample.complete", 48 * MS, E, output(["He", "llo world"]), finish_reason="stop"),
    ev("sample.issued", 13 * MS, F, prompt_text("boom")),
    ev("sample.recv_first", 20 * MS, F),
    ev("error.generic", 90 * MS, F, ["ErrorData", "IdleTimeout", "no byte for 300 s"]),
    ev("sample.complete", 90 * MS, F, None),
    ev("session.stop_performance_tracking", 95 * MS),
    ev("session.ended", 96 * MS),
]
ENDED, STOPPED = SMALL[-1], SMALL[-2]
F_ERROR, F_COMPLETE = SMALL[7], SMALL[8]


def demo_folder(
    root: Path, lines: list[str], *, config: str | None = None, end: str = "\n"
) -> Path:
    from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

    root.mkdir(parents=True, exist_ok=True)
    (root / "events.jsonl").write_text("\n".join(lines) + end)
    if config is None:
        config = f"model_params:\n  name: m\n  tokenizer_name: {DEMO_TOKENIZER}\n"
    (root / "config.yaml").write_text(config)
    return root


def _without(*dropped: str) -> list[str]:
    return [line for line in SMALL if line not in dropped]


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        (SMALL, None),
        # SIGKILL: the lines flushed so far, no session end
        (_without(STOPPED, ENDED), "the log has no session.ended line: the run did not end"),
        # the reference's Ctrl-C: the session ends with F still in flight
        (_without(F_ERROR, F_COMPLETE), "1 of the 2 measured queries have no COMPLETE or error"),
        # mlpe-fast's Ctrl-C: F ended as Cancelled, then the session
        (
            [F_ERROR.replace("IdleTimeout", "Cancelled") if x == F_ERROR else x for x in SMALL],
            "1 of the 2 measured queries were cancelled",
        ),
        ([SMALL[0], ENDED], "the log has no session.start_performance_tracking line"),
    ],
    ids=["complete", "killed", "reference-ctrl-c", "mlpe-fast-ctrl-c", "no-window"],
)
def test_the_state_follows_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], why: str | None
) -> None:
    from mlpe_fast.cli import main

    folder = demo_folder(tmp_path / "run", lines)
    analysis = analyze(folder)
    summary, snapshot = analysis.summary, analysis.snapshot
    state = "complete" if why is None else "interrupted"
    assert summary["state"] == snapshot["state"] == state
    assert summary["complete"] is (why is None)
    # an interrupted run's stat blocks have no early-stopping estimates (as a live run's)
    assert ("early_stopping_percentiles" in summary["latency"]) is (why is None)
    if why is None:
        assert analysis.interrupted is None and "interrupted" not in summary["mlpe_fast"]
    else:
        assert analysis.interrupted is not None and analysis.interrupted.startswith(why)
        assert summary["mlpe_fast"]["interrupted"] == analysis.interrupted
    if lines is not SMALL and len(lines) > 2:  # the queries logged are all counted
        assert summary["n_samples_issued"] == 2
        assert summary["n_samples_completed"] + summary["n_samples_failed"] == 2
    assert main(["analyze", str(folder)]) == 0
    err = capsys.readouterr().err
    assert err == (
        "" if why is None else f"mlpe-fast analyze: interrupted: {analysis.interrupted}\n"
    )


def test_a_killed_log_counts_what_was_logged(tmp_path: Path) -> None:
    analysis = analyze(demo_folder(tmp_path / "run", _without(STOPPED, ENDED)))
    assert analysis.interrupted is not None and "the figures cover the 2 queries" in (
        analysis.interrupted
    )
    summary = analysis.summary
    assert (summary["n_samples_issued"], summary["n_samples_completed"]) == (2, 1)
    assert summary["output_sequence_lengths"]["total"] == len("Hello world")


def test_a_cut_last_line_is_left_out(tmp_path: Path) -> None:
    killed = _without(STOPPED, ENDED)
    # killed in the middle of writing F's COMPLETE line
    cut = demo_folder(tmp_path / "cut", [*killed[:-1], killed[-1][:40]], end="")
    analysis = analyze(cut)
    assert analysis.interrupted is not None
    assert "no session.ended line" in analysis.interrupted
    assert "its last line (9) is cut short and left out" in analysis.interrupted
    # F has its error line: failed, as without the cut line
    assert (analysis.summary["n_samples_completed"], analysis.summary["n_samples_failed"]) == (1, 1)
    ended_then_cut = demo_folder(tmp_path / "ended", [*SMALL, SMALL[2][:30]], end="")
    why = analyze(ended_then_cut).interrupted
    assert why == "events.jsonl: the last line (12) is cut short and left out"
    # a broken line with a newline after it is no cut: the log is wrong
    broken = demo_folder(tmp_path / "broken", [*SMALL[:3], SMALL[3][:30], *SMALL[4:]])
    with pytest.raises(UsageError, match=r"events.jsonl:4: not an event record"):
        analyze(broken)
    # nor is a file of one line that is not a record
    one = demo_folder(tmp_path / "one", [SMALL[0][:20]], end="")
    with pytest.raises(UsageError, match=r"events.jsonl:1: not an event record"):
        analyze(one)


def test_a_partial_non_streaming_folder(tmp_path: Path) -> None:
    """What `mlpe-fast run --streaming off` left when it crashed at the end:
    config.yaml (``streaming: off``, which YAML reads as false), the lines
    flushed so far, no session end, no sample_idx_map.json."""
    from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

    lines = [
        ev("session.started", 0),
        ev("session.start_performance_tracking", 10 * MS),
        ev("sample.issued", 10 * MS, E, prompt_text("hello")),
        ev("sample.complete", 48 * MS, E, output("Hello world"), finish_reason="length"),
        ev("sample.issued", 12 * MS, F, prompt_text("hi")),
        ev("sample.complete", 50 * MS, F, output("abc"), finish_reason="length"),
    ]
    config = f"model_params:\n  name: m\n  streaming: off\n  tokenizer_name: {DEMO_TOKENIZER}\n"
    analysis = analyze(demo_folder(tmp_path / "run", lines, config=config))
    summary = analysis.summary
    assert summary["state"] == "interrupted"
    assert (summary["n_samples_issued"], summary["n_samples_completed"]) == (2, 2)
    assert summary["output_sequence_lengths"]["total"] == len("Hello world") + len("abc")
    series = [m["name"] for m in analysis.snapshot["metrics"] if m["type"] == "series"]
    assert series == ["sample_latency_ns", "isl", "osl"]  # no streaming series
    assert summary["ttft"] == summary["tpot"] == {}
    # without a streaming setting the log says it: no RECV_FIRST line
    no_setting = f"model_params:\n  name: m\n  tokenizer_name: {DEMO_TOKENIZER}\n"
    again = analyze(demo_folder(tmp_path / "again", lines, config=no_setting))
    assert again.summary == {
        **summary,
        "mlpe_fast": {
            **summary["mlpe_fast"],
            "analyzed_from": str(tmp_path / "again/events.jsonl"),
        },
    }


def _odd(root: Path, case: str) -> str:
    """Builds one odd folder; returns what its one-line error names."""
    demo_folder(root, SMALL)
    events = root / "events.jsonl"
    if case == "empty log":
        events.write_bytes(b"")
        return "events.jsonl: no event in it"
    if case == "log is a folder":
        events.unlink()
        events.mkdir()
        return "no events.jsonl"
    if case == "binary log":
        events.write_bytes(bytes(range(256)) * 8)
        return "events.jsonl:1: not an event record"
    if case == "stamp beyond int64":
        events.write_text("\n".join([*SMALL[:2], ev("sample.issued", 2**63, E), *SMALL[3:]]) + "\n")
        return "events.jsonl:3: not an event record"
    if case == "binary config":
        (root / "config.yaml").write_bytes(b"\xff\xfe\x00garbage")
        return "cannot read"
    if case == "no config":
        (root / "config.yaml").unlink()
        return "config.yaml names no tokenizer: pass --tokenizer DIR"
    if case == "config is a list":
        (root / "config.yaml").write_text("- a\n- b\n")
        return "config.yaml names no tokenizer"
    if case == "tokenizer gone":
        (root / "config.yaml").write_text("model_params:\n  tokenizer_name: /no/such/tokenizer\n")
        return "/no/such/tokenizer"
    if case == "index map of strings":
        (root / "sample_idx_map.json").write_text(json.dumps({"performance": {E: "seven"}}))
        return "sample_idx_map.json: not a {phase: {uuid: index}} map"
    if case == "index map is a list":
        (root / "sample_idx_map.json").write_text("[1, 2]")
        return "sample_idx_map.json: not a {phase: {uuid: index}} map"
    assert case == "binary index map", case
    (root / "sample_idx_map.json").write_bytes(bytes(range(256)))
    return "sample_idx_map.json"


@pytest.mark.parametrize(
    "case",
    [
        "empty log",
        "log is a folder",
        "binary log",
        "stamp beyond int64",
        "binary config",
        "no config",
        "config is a list",
        "tokenizer gone",
        "index map of strings",
        "index map is a list",
        "binary index map",
    ],
)
def test_odd_folders_are_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    from mlpe_fast.cli import main

    named = _odd(tmp_path / "run", case)
    assert main(["analyze", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert named in err


def test_a_stored_summary_that_is_no_summary_is_not_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlpe_fast.cli import main

    folder = demo_folder(tmp_path / "run", SMALL)
    stored = folder / "performance" / "result_summary.json"
    stored.parent.mkdir()
    for garbage in (b"[1, 2]", b"\x00\xff not json"):
        stored.write_bytes(garbage)
        assert main(["analyze", str(folder)]) == 0
        out = capsys.readouterr().out
        assert f"not compared: {stored} is not a JSON object" in out
