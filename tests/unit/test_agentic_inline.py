"""The inline accuracy of agentic runs (``accuracy/agentic_inline.py``):
the executable normaliser, the intent reader, and the score over a
hand-written dataset with repeats, failures and excluded turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.accuracy.agentic_inline import (
    InlineTurn,
    bash_actions,
    inline_entry,
    model_intent,
    score_inline,
)
from mlpe_fast.artifacts.events import TextModelOutput
from mlpe_fast.load.agentic import load_agentic
from tests.unit.test_agentic import write


def bash(command: str, key: str = "command", as_text: bool = True) -> dict[str, Any]:
    arguments: Any = {key: command}
    return {
        "function": {"name": "bash", "arguments": json.dumps(arguments) if as_text else arguments}
    }


@pytest.mark.parametrize(
    ("command", "actions"),
    [
        ("CUDA_VISIBLE_DEVICES=0 /usr/bin/python3 -m pytest", ["python"]),
        ("python3.11 -c 'import x; y' && grep -rn foo . | head -5", ["python", "grep", "head"]),
        ("sudo env A=1 time nice rg pattern || echo no", ["grep"]),  # echo: not an action
        ("cat a; ls\nwget http://x", ["cat", "ls", "curl"]),
        ('sed -i "s/a|b;c/d/" f.py', ["sed"]),  # the quoted | and ; are not separators
        ("./configure && make -j4", ["make"]),
        ("A=1 B=2", []),
        ("", []),
    ],
)
def test_executables_are_normalised(command: str, actions: list[str]) -> None:
    assert bash_actions([bash(command)]) == actions


def test_only_bash_calls_with_a_command_count() -> None:
    assert bash_actions([bash("ls", key="cmd", as_text=False)]) == ["ls"]
    assert bash_actions([{"function": {"name": "edit", "arguments": '{"command": "ls"}'}}]) == []
    assert bash_actions([{"function": {"name": "bash", "arguments": "not json"}}]) == []
    assert bash_actions([bash("ls", key="script")]) == []
    assert bash_actions(None) == [] and bash_actions(["nonsense"]) == []


@pytest.mark.parametrize(
    ("reasoning", "content", "intent"),
    [
        ("thinking... Intent: i042 fits", "I007", "I042"),
        ("", "the intent: I100", "I100"),
        ("maybe I001 or I002", "I003", "I002"),  # the last bare code, reasoning first
        ("", "see I010 then I011", "I011"),
        ("nothing", "nothing", None),
    ],
)
def test_the_stated_intent(reasoning: str, content: str, intent: str | None) -> None:
    assert model_intent(reasoning, content) == intent


def _rows() -> list[dict[str, Any]]:
    call = {"id": "c", "type": "function", "function": bash("python a.py | grep x")["function"]}
    coding = [
        {"conversation_id": "fix", "turn": 1, "role": "user", "content": "go", "system": "S"},
        {
            "conversation_id": "fix",
            "turn": 2,
            "role": "assistant",
            "content": None,
            "tool_calls": [call],
        },
        {
            "conversation_id": "fix",
            "turn": 3,
            "role": "tool",
            "tool_results": [{"tool_call_id": "c", "content": "ok"}],
        },
        {"conversation_id": "fix", "turn": 4, "role": "assistant", "content": "done"},
    ]
    workflow = [
        {"conversation_id": "sim_7", "turn": 1, "role": "user", "content": "book", "system": "S"},
        {
            "conversation_id": "sim_7",
            "turn": 2,
            "role": "assistant",
            "content": "intent: I005",
            "intent_codes": ["i005", "I006"],
        },
    ]
    return coding + workflow  # fmt: skip


def _output(content: str = "", reasoning: str = "", calls: Any = None) -> TextModelOutput:
    return TextModelOutput(output=content, reasoning=reasoning or None, tool_calls=calls)


def test_a_hand_checked_score(tmp_path: Path) -> None:
    data = load_agentic(write(tmp_path, _rows()))
    call = {"id": "c", "type": "function", "function": bash("python3 b.py; cat f")["function"]}
    issued = [
        InlineTurn("fix", 1, _output(calls=(call,))),  # {python, grep} vs {python, cat}: 1/3
        InlineTurn("fix", 3, _output("done")),  # turn 3's truth has no bash call: excluded
        InlineTurn("sim_7", 1, _output("I will say intent: I006")),  # in the truth: 1
        InlineTurn("fix__repeat_2", 1, None),  # failed: 0
        InlineTurn("sim_7__repeat_2", 1, _output("", "I099")),  # wrong intent: 0
    ]
    scores = score_inline(data, issued)
    assert scores["turns"] == {
        "issued": 5, "expected": 4, "observed": 3, "missing": 1, "scored": 4, "answered": 4,
    }  # fmt: skip
    assert scores["score"] == round((1 / 3 + 1 + 0 + 0) / 4, 4) == 0.3333
    assert scores["domains"] == {
        "coding": {"score": round(1 / 6, 4), "scored": 2},
        "workflow": {"score": 0.5, "scored": 2},
    }
    first = scores["per_turn"][0]
    assert first["gt_actions"] == ["python", "grep"] and first["model_actions"] == ["python", "cat"]
    assert first["turn"] == 2 and first["score"] == 0.3333
    assert scores["excluded_turns"] == [
        {
            "conversation_id": "fix",
            "turn": 4,
            "domain": "coding",
            "exclude_reason": "no ground truth",
        }
    ]
    assert any(t.get("missing") for t in scores["per_turn"])
    entry = inline_entry(data, scores, issued=5, duration_s=1.23456)
    assert entry["dataset_type"] == "performance" and entry["dataset_name"] == "performance"
    assert entry["score"] == 0.3333 and entry["unit_samples"] == 3 and entry["num_repeats"] == 1
    assert entry["complete"] is False and entry["duration_s"] == 1.235


def test_streamed_tool_call_deltas_are_merged_before_scoring(tmp_path: Path) -> None:
    data = load_agentic(write(tmp_path, _rows()))
    arguments = json.dumps({"command": "python a.py | grep x"})
    deltas = (
        ({"index": 0, "id": "c", "type": "function",
          "function": {"name": "bash", "arguments": arguments[:9]}},),
        ({"index": 0, "function": {"arguments": arguments[9:]}},),
    )  # fmt: skip
    scores = score_inline(data, [InlineTurn("fix", 1, _output(calls=deltas))])
    assert scores["score"] == 1.0


def test_nothing_scorable_is_no_score(tmp_path: Path) -> None:
    data = load_agentic(write(tmp_path, _rows()))
    scores = score_inline(data, [InlineTurn("fix", 3, _output("x"))])
    assert scores["score"] is None and scores["turns"]["scored"] == 0
    assert inline_entry(data, scores, issued=1, duration_s=0)["complete"] is False
