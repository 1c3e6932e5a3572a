"""The simulated endpoint's replay mode (``--replay PATH``): each turn of an
agentic dataset is answered with the assistant row the dataset recorded
after it, so that an agentic run against the simulator replays its
trajectories exactly and scores 1.0 inline (``docs/agentic.md`` §5.2).

Which turn a request is
-----------------------
A turn's request carries the trajectory's recorded history up to it
(:mod:`mlpe_fast.load.agentic`): its first user message is the
trajectory's task, and its message count and last message pin the turn.
So a request is looked up by (the first user message's content, the number
of messages, the last message as JSON, its members sorted and nulls left
out: clients differ in both, the reference client among them).  The salt only touches the system
message, which the key leaves out.  A request the dataset does not have is
answered 404 (``code`` ``"replay_turn_not_found"``), as the oracle mode's
misses are: a mismatch must fail loudly.

What the answer looks like
--------------------------
The row's reasoning, then its content, each cut into runs of
``token_chars`` characters, one event per run, then its tool calls: per
call a first fragment with the id, type, name and the first run of its
arguments, then one fragment per further run (the deltas a server
streams).  The finish reason is ``tool_calls`` when the row has calls,
else ``stop``; ``usage`` counts the events that carried text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from ..load.agentic import load_agentic
from .stream import tool_call_fragment

__all__ = ("MISS_CODE", "Replay", "ReplayAnswer", "load_replay")

MISS_CODE = "replay_turn_not_found"

_encode = msgspec.json.Encoder().encode


class ReplayAnswer(NamedTuple):
    """A recorded answer as deltas: each a ``delta`` mapping in order."""

    deltas: tuple[dict[str, Any], ...]
    finish: str
    completion_tokens: int


class Replay:
    """The recorded answers of a dataset's turns, by request (module doc)."""

    def __init__(
        self,
        answers: Mapping[tuple[str, int, bytes], dict[str, Any]],
        token_chars: int,
        source: str,
    ) -> None:
        if token_chars < 1:
            raise ValueError(f"token_chars must be >= 1, not {token_chars}")
        self._answers = answers
        self.token_chars = token_chars
        self.source = source

    def __len__(self) -> int:
        return len(self._answers)

    def answer(self, doc: Any) -> ReplayAnswer | None:
        """The recorded answer to a chat request ``doc``; None when the
        dataset has no such turn."""
        messages = doc.get("messages") if isinstance(doc, dict) else None
        key = request_key(messages) if isinstance(messages, list) else None
        row = None if key is None else self._answers.get(key)
        return None if row is None else self._deltas(row)

    def miss_message(self) -> str:
        return f"no turn of {self.source} has this request's history"

    def _deltas(self, row: Mapping[str, Any]) -> ReplayAnswer:
        c = self.token_chars
        deltas: list[dict[str, Any]] = []
        for field, key in (("reasoning_content", "reasoning_content"), ("content", "content")):
            text = row.get(field)
            if isinstance(text, str):
                deltas.extend({key: text[i : i + c]} for i in range(0, len(text), c))
        texts = len(deltas)
        calls = row.get("tool_calls") or []
        for index, call in enumerate(calls):
            function = call["function"]
            arguments = function["arguments"]
            if not isinstance(arguments, str):
                arguments = _encode(arguments).decode()
            pieces = [arguments[i : i + c] for i in range(0, len(arguments), c)] or [""]
            deltas.append(
                {
                    "tool_calls": [
                        tool_call_fragment(
                            index, call_id=call["id"], name=function["name"], arguments=pieces[0]
                        )
                    ]
                }
            )
            deltas.extend(
                {"tool_calls": [tool_call_fragment(index, arguments=piece)]} for piece in pieces[1:]
            )
        return ReplayAnswer(tuple(deltas), "tool_calls" if calls else "stop", texts + len(calls))


def request_key(messages: Sequence[Any]) -> tuple[str, int, bytes] | None:
    """The key of a request's history (module doc)."""
    task = next(
        (
            m.get("content")
            for m in messages
            if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str)
        ),
        None,
    )
    if task is None or not messages:
        return None
    last = messages[-1]
    if isinstance(last, dict):  # clients order members and write nulls differently
        last = {k: v for k, v in sorted(last.items()) if v is not None}
    return task, len(messages), _encode(last)


def load_replay(path: str | Path, token_chars: int) -> Replay:
    """Reads an agentic dataset (:func:`mlpe_fast.load.agentic.load_agentic`)
    into the answers of its turns.

    Raises:
        UsageError: the dataset cannot be read (one line).
    """
    data = load_agentic(path)
    answers: dict[tuple[str, int, bytes], dict[str, Any]] = {}
    for trajectory in data.trajectories:
        for turn in trajectory.turns:
            if turn.reply is None:
                continue
            # The history as sent, JSON round-tripped as the server will see it.
            sent = msgspec.json.decode(trajectory.messages_body(turn))
            key = request_key(sent)
            if key is not None:
                answers[key] = turn.reply
    return Replay(answers, token_chars, str(path))
