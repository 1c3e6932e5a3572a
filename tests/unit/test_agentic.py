"""The agentic dataset (``load/agentic.py``): rows, histories, salt and
request bodies, on hand-written trajectories and the recorded dataset
(``tests/data``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.errors import UsageError
from mlpe_fast.load.agentic import (
    AgenticBodies,
    instance_of,
    load_agentic,
    salt_markers,
    salted_system,
)
from tests.data_files import AGENTIC_CODING

CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": {"cmd": "ls"}}}


def write(tmp_path: Path, rows: list[dict[str, Any]], name: str = "a.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def conversation(cid: str, *, delay: float | None = None) -> list[dict[str, Any]]:
    """user -> assistant (tool call) -> tool (two results) -> assistant -> user -> assistant."""
    return [
        {"conversation_id": cid, "turn": 1, "role": "user", "content": "fix it", "system": "S",
         "tools": [{"type": "function", "function": {"name": "bash"}}]},
        {"conversation_id": cid, "turn": 2, "role": "assistant", "content": None,
         "reasoning_content": "think", "tool_calls": [CALL]},
        {"conversation_id": cid, "turn": 3, "role": "tool", "delay_seconds": delay,
         "tool_results": [{"tool_call_id": "c1", "content": "a.py"},
                          {"tool_call_id": "c1", "content": "b.py"}]},
        {"conversation_id": cid, "turn": 4, "role": "assistant", "content": "done?"},
        {"conversation_id": cid, "turn": 5, "role": "user", "content": "yes"},
        {"conversation_id": cid, "turn": 6, "role": "assistant", "content": "ok"},
    ]  # fmt: skip


def test_the_reference_salt_vectors() -> None:
    # mlcommons/endpoints tests/unit/load_generator/test_agentic_inference_strategy.py
    assert salt_markers(1, "conv1") == ("4461", "e643")
    assert salt_markers(2, "conv1")[0] == "ba75" and salt_markers(3, "conv1")[0] == "0967"
    assert salt_markers(1, "django__django-16899")[1] == "edc0"
    assert salted_system("S", "4461", "e643") == "[salt: 4461]\n\nS\n\n[salt: e643]"


def test_instances_cycle_in_file_order() -> None:
    assert [instance_of(k, 3) for k in range(7)] == [
        (0, 1, None), (1, 1, None), (2, 1, None),
        (0, 2, "__repeat_2"), (1, 2, "__repeat_2"), (2, 2, "__repeat_2"),
        (0, 3, "__repeat_3"),
    ]  # fmt: skip


def test_histories_are_the_recorded_rows(tmp_path: Path) -> None:
    data = load_agentic(write(tmp_path, conversation("a") + conversation("b", delay=0.5)))
    assert [t.conversation_id for t in data.trajectories] == ["a", "b"]
    assert data.client_turns == 6
    a = data.trajectories[0]
    assert [t.turn for t in a.turns] == [1, 3, 5]
    first, tool, last = (a.request_messages(t) for t in a.turns)
    assert first == ({"role": "system", "content": "S"}, {"role": "user", "content": "fix it"})
    # The recorded assistant row, with its reasoning and its call's arguments as a string,
    # then one tool message per result.
    assert tool[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
        ],
        "reasoning_content": "think",
    }  # fmt: skip
    assert [m["content"] for m in tool[3:]] == ["a.py", "b.py"] and len(tool) == 5
    assert len(last) == 7 and last[-1] == {"role": "user", "content": "yes"}
    # Each turn knows the answer recorded for it; tools come from the first user row.
    assert [t.reply["turn"] for t in a.turns if t.reply] == [2, 4, 6]
    assert a.turns[1].tools == a.turns[0].tools and a.turns[1].tools is a.turns[0].tools
    assert data.trajectories[1].turns[1].delay_s == 0.5 and a.turns[0].delay_s == 0.0


def test_bodies_join_the_encoded_history_and_salt_the_system_prompt(tmp_path: Path) -> None:
    data = load_agentic(write(tmp_path, conversation("a")))
    a = data.trajectories[0]
    bodies = AgenticBodies(model="m", max_output_tokens=64, sampling={"temperature": 1.0})
    salt = salt_markers(2, "a")
    body = json.loads(bodies(a, a.turns[1], salt))
    assert body["model"] == "m" and body["stream"] is True and body["max_completion_tokens"] == 64
    assert body["temperature"] == 1.0 and body["tools"] == [
        {"type": "function", "function": {"name": "bash"}}
    ]
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == json.loads(json.dumps(a.request_messages(a.turns[1], salt)))
    assert body["messages"][0]["content"] == f"[salt: {salt[0]}]\n\nS\n\n[salt: {salt[1]}]"
    assert "delay_seconds" not in json.dumps(body) and "tool_results" not in json.dumps(body)
    plain = json.loads(bodies(a, a.turns[1], None))
    assert plain["messages"][0]["content"] == "S"


def test_a_row_cap_beats_the_run_cap(tmp_path: Path) -> None:
    rows = conversation("a")
    rows[0]["max_new_tokens"] = 9
    a = load_agentic(write(tmp_path, rows)).trajectories[0]
    bodies = AgenticBodies(model="m", max_output_tokens=64)
    assert all(json.loads(bodies(a, t, None))["max_completion_tokens"] == 9 for t in a.turns)


def _broken(rows: list[dict[str, Any]], row: int, **change: Any) -> list[dict[str, Any]]:
    rows = [dict(r) for r in rows]
    rows[row].update(change)
    for key, value in change.items():
        if value is ...:
            del rows[row][key]
    return rows


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        (_broken(conversation("a"), 1, turn=7), "turn should be 2"),
        (_broken(conversation("a"), 0, role="assistant"), "cannot follow the start"),
        (_broken(conversation("a"), 0, role="robot"), "role must be user, assistant or tool"),
        (_broken(conversation("a"), 0, content=""), "non-empty text content"),
        (_broken(conversation("a"), 1, tool_calls=..., content="x"), "a tool row must follow"),
        (_broken(conversation("a"), 1, tool_calls=...), "needs content or tool_calls"),
        (_broken(conversation("a"), 2, tool_results=[]), "non-empty tool_results"),
        (_broken(conversation("a"), 1, tool_calls=[{"id": 1}]), "a tool call is"),
        (_broken(conversation("a"), 2, delay_seconds=-1), "delay_seconds must be"),
        (_broken(conversation("a"), 0, conversation_id=""), "printable ASCII"),
        (conversation("a") + conversation("b") + conversation("a")[:1], "not contiguous"),
        (_broken(conversation("a"), 0, max_new_tokens=0), "max_new_tokens must be"),
    ],
)
def test_rule_breaking_rows_are_one_line_with_the_line(
    tmp_path: Path, rows: list[dict[str, Any]], said: str | None
) -> None:
    path = write(tmp_path, rows)
    with pytest.raises(UsageError, match=said) as caught:
        load_agentic(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_conversation_ids_are_header_values(tmp_path: Path) -> None:
    assert load_agentic(write(tmp_path, conversation("a\\b#1"))).trajectories[0].conversation_id
    with pytest.raises(UsageError, match="printable ASCII"):
        load_agentic(write(tmp_path, conversation("a\tb")))
    with pytest.raises(UsageError, match="printable ASCII"):
        load_agentic(write(tmp_path, conversation("café")))


def test_files_that_are_not_datasets(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        load_agentic(tmp_path / "missing.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"conversation_id": "a"\n')
    with pytest.raises(UsageError, match=r"bad\.jsonl:1: not JSON"):
        load_agentic(tmp_path / "bad.jsonl")
    (tmp_path / "meta.jsonl").write_text('{"_type": "dataset_metadata"}\n')
    with pytest.raises(UsageError, match="no rows"):
        load_agentic(tmp_path / "meta.jsonl")


def test_the_recorded_dataset() -> None:
    data = load_agentic(AGENTIC_CODING)
    assert len(data) == 20 and data.client_turns == 1007
    first = data.trajectories[0]
    assert first.conversation_id == "django__django-16899" and first.system is not None
    for trajectory in data.trajectories:
        histories = [t.history for t in trajectory.turns]
        assert histories == sorted(histories) and trajectory.turns[-1].reply is not None
        assert all(t.reply is not None and t.reply["role"] == "assistant" for t in trajectory.turns)


def test_the_replay_key_ignores_member_order_and_nulls() -> None:
    from mlpe_fast.sim.replay import load_replay, request_key

    tool = {"role": "tool", "tool_call_id": "c1", "content": "a.py"}
    reordered = {"content": "a.py", "role": "tool", "tool_call_id": "c1", "name": None}
    user = {"role": "user", "content": "fix it"}
    assert request_key([user, tool]) == request_key([user, reordered])
    assert request_key([user, tool]) != request_key([user, {**tool, "content": "b.py"}])
    assert request_key([{"role": "system", "content": "S"}]) is None  # no task
    # Every turn of the recorded dataset has a key of its own.
    assert len(load_replay(AGENTIC_CODING, 4)) == 1007
