"""`mlpe-fast analyze` over a hand-built events.jsonl in the reference
client's format, counted with the shared `char_chat` tokenizer (one
character = one token; its chat template renders reasoning and tool calls).
Every expected number is worked out by hand below (spec §1.1-1.2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.analyze import analyze
from mlpe_fast.errors import UsageError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
CHAR_CHAT = SHARED / "tokenizers" / "char_chat"

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
    if not CHAR_CHAT.is_dir():
        pytest.skip("../shared/data is not beside the checkout")
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
