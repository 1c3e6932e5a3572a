"""Agentic trajectories: the dataset, its replayed requests and their salt
(``docs/agentic.md`` §1; spec §1.1, §2.5).

A trajectory is a recorded conversation, one JSONL row per message
(``conversation_id``, ``turn`` = the row's number from 1, ``role``).  Only
the *client turns* (``user`` and ``tool`` rows) are sent.  Each carries the
whole **recorded** history before it -- the system prompt, earlier client
rows and the dataset's own assistant rows with their reasoning and tool
calls -- so nothing the model answers is fed back and no tool is run: tool
results are replayed from ``tool_results``.  The assistant row after a
client turn is what the model was recorded to answer (the inline accuracy's
ground truth).

Rules kept from the reference loader
(``mlcommons/endpoints:src/inference_endpoint/dataset_manager/agentic_inference_dataset.py``):

* rows of a conversation are contiguous and numbered 1..N; ``_type:
  dataset_metadata`` rows are dropped; ids are printable ASCII (they become
  an HTTP header);
* roles follow start -> user -> assistant -> {tool, user}, tool ->
  {assistant, user}; a tool row follows an assistant row with tool calls,
  and a user row never does;
* the system prompt is the conversation's first non-empty ``system``; a
  tool row becomes one ``tool`` message per result; an assistant row with
  tool calls and no content gets ``content: null``; tool-call arguments
  given as objects are sent as JSON strings;
* ``tools`` and the generation fields (``model``, ``max_new_tokens`` /
  ``max_completion_tokens`` / ``max_tokens``, ``stream``) come from the row,
  else from the conversation's first user row; ``delay_seconds`` is the
  pause before a client turn (used with ``inject_tool_delay``).

Salt (§1.4): the first string system message becomes ``"[salt: R]\\n\\n" +
system + "\\n\\n[salt: C]"`` with R = blake2b-16 of the repeat number (1 on
the first pass) and C = blake2b-16 of the source conversation id:
deterministic, so each pass is a fresh prefix for the server's cache while
a trajectory's own turns still share theirs.

Requests are encoded without re-encoding histories: each message is
encoded once, and a turn's body joins the encoded messages of its history.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..errors import UsageError

__all__ = (
    "AgenticBodies",
    "AgenticDataset",
    "AgenticSettings",
    "ClientTurn",
    "Trajectory",
    "instance_of",
    "load_agentic",
    "salt_markers",
    "salted_system",
)

_ROLES = ("user", "assistant", "tool")
_NEXT_ROLES = {
    None: ("user",),
    "user": ("assistant",),
    "assistant": ("tool", "user"),
    "tool": ("assistant", "user"),
}
_MAX_TOKEN_KEYS = ("max_new_tokens", "max_completion_tokens", "max_tokens")


class AgenticSettings(msgspec.Struct, frozen=True, kw_only=True):
    """A performance dataset's ``agentic_inference:`` block (the reference's
    fields and defaults, ``config/schema.py``).

    ``num_trajectories_to_issue``: trajectory instances to start (None: one
    pass of the file; official runs use a multiple of the trajectory count).
    ``turn_timeout_s``: from a turn's issue to its end; a turn that takes
    longer fails and ends its trajectory.
    """

    turn_timeout_s: float = 86400.0
    enable_salt: bool = True
    inject_tool_delay: bool = True
    routing_headers: tuple[str, ...] = ("X-Session-ID",)
    num_trajectories_to_issue: int | None = None
    stop_issuing_on_first_user_complete: bool = False


class ClientTurn(msgspec.Struct, frozen=True):
    """One request of a trajectory: the dataset row ``turn`` (a user or tool
    row), the first ``history`` messages of the trajectory as its
    ``messages``, its pause before issue, its generation fields, and the
    recorded assistant row that answered it (None after the last row)."""

    turn: int
    history: int
    delay_s: float
    tools: tuple[dict[str, Any], ...] | None
    max_tokens: int | None
    model: str | None
    reply: dict[str, Any] | None


class Trajectory(msgspec.Struct, frozen=True):
    """A conversation: its id, system prompt, every message in order (the
    replayed history) with each one's JSON, and its client turns."""

    conversation_id: str
    system: str | None
    messages: tuple[dict[str, Any], ...]
    messages_json: tuple[bytes, ...]
    turns: tuple[ClientTurn, ...]

    def request_messages(
        self, turn: ClientTurn, salt: tuple[str, str] | None = None
    ) -> tuple[dict[str, Any], ...]:
        """The messages ``turn`` sends (salted with markers ``salt``)."""
        messages = self.messages[: turn.history]
        if salt is None or self.system is None:
            return messages
        first = messages[0]
        return ({**first, "content": salted_system(self.system, *salt)}, *messages[1:])

    def messages_body(self, turn: ClientTurn, salt: tuple[str, str] | None = None) -> bytes:
        """The JSON array of :meth:`request_messages`, from the encoded
        messages (the history is never encoded again)."""
        encoded = self.messages_json[: turn.history]
        if salt is not None and self.system is not None:
            system = {"role": "system", "content": salted_system(self.system, *salt)}
            encoded = (msgspec.json.encode(system), *encoded[1:])
        return b"[" + b",".join(encoded) + b"]"


class AgenticDataset(msgspec.Struct, frozen=True):
    """The trajectories of a file, in file order."""

    path: str
    trajectories: tuple[Trajectory, ...]

    @property
    def client_turns(self) -> int:
        return sum(len(t.turns) for t in self.trajectories)

    def __len__(self) -> int:
        return len(self.trajectories)


def salt_markers(repeat_id: int, conversation_id: str) -> tuple[str, str]:
    """R and C of the salt (module doc): 4 hex digits each."""
    r = hashlib.blake2b(str(repeat_id).encode(), digest_size=2).hexdigest()
    c = hashlib.blake2b(conversation_id.encode(), digest_size=2).hexdigest()
    return r, c


def salted_system(system: str, r: str, c: str) -> str:
    return f"[salt: {r}]\n\n{system}\n\n[salt: {c}]"


def instance_of(k: int, trajectories: int) -> tuple[int, int, str | None]:
    """The k-th trajectory started (0-based): its source index (file order,
    cycling), its repeat number (1 on the first pass), and the suffix of its
    logical id (``__repeat_<r>`` after the first pass, else None)."""
    passes, source = divmod(k, trajectories)
    repeat = passes + 1
    return source, repeat, None if repeat == 1 else f"__repeat_{repeat}"


def load_agentic(path: str | Path) -> AgenticDataset:
    """Reads and checks an agentic JSONL file (module doc).

    Raises:
        UsageError: the file cannot be read, or a row breaks a rule (the
            message names the line and the rule).
    """
    where = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"agentic dataset {where}: cannot read it ({error})") from None
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    last: str | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(f"{where}:{number}: not JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise UsageError(f"{where}:{number}: a row is a JSON object, got {type(row).__name__}")
        if row.get("_type") == "dataset_metadata":
            continue
        conversation = row.get("conversation_id")
        if (
            not isinstance(conversation, str)
            or not conversation
            or not conversation.isascii()
            or not conversation.isprintable()
        ):
            raise UsageError(
                f"{where}:{number}: conversation_id must be non-empty printable ASCII "
                f"(it is sent as a header), got {conversation!r}"
            )
        if conversation != last and conversation in groups:
            raise UsageError(
                f"{where}:{number}: the rows of conversation {conversation!r} are not contiguous"
            )
        groups.setdefault(conversation, []).append((number, row))
        last = conversation
    if not groups:
        raise UsageError(f"agentic dataset {where}: no rows")
    trajectories = tuple(_trajectory(where, cid, rows) for cid, rows in groups.items())
    return AgenticDataset(where, trajectories)


def _trajectory(where: str, cid: str, rows: Sequence[tuple[int, dict[str, Any]]]) -> Trajectory:
    system = next(
        (r["system"] for _, r in rows if isinstance(r.get("system"), str) and r["system"]), None
    )
    first_user = next((r for _, r in rows if r.get("role") == "user"), {})
    history: list[dict[str, Any]] = []
    if system is not None:
        history.append({"role": "system", "content": system})
    turns: list[ClientTurn] = []
    tool_sets: dict[str, tuple[dict[str, Any], ...]] = {}  # one object per distinct tool list
    previous: dict[str, Any] | None = None
    for position, (number, row) in enumerate(rows):
        at = f"{where}:{number}"
        _check_row(at, row, position + 1, previous)
        role = row["role"]
        if role == "assistant":
            history.append(_assistant_message(row))
            if turns and turns[-1].turn == row["turn"] - 1:  # the answer to that turn
                turns[-1] = msgspec.structs.replace(turns[-1], reply=row)
        else:
            history.extend(_client_messages(row))
            turns.append(
                ClientTurn(
                    turn=row["turn"],
                    history=len(history),
                    delay_s=_delay(at, row.get("delay_seconds")),
                    tools=_interned(
                        tool_sets, _tools(at, row.get("tools", first_user.get("tools")))
                    ),
                    max_tokens=_max_tokens(at, row, first_user),
                    model=_string_or_none(row.get("model", first_user.get("model"))),
                    reply=None,
                )
            )
        previous = row
    if not turns:
        raise UsageError(f"{where}: conversation {cid!r} has no user or tool row to send")
    messages = tuple(history)
    return Trajectory(
        conversation_id=cid,
        system=system,
        messages=messages,
        messages_json=tuple(msgspec.json.encode(m) for m in messages),
        turns=tuple(turns),
    )


def _check_row(
    at: str, row: Mapping[str, Any], turn: int, previous: Mapping[str, Any] | None
) -> None:
    if row.get("turn") != turn or isinstance(row.get("turn"), bool):
        raise UsageError(
            f"{at}: turn should be {turn} (rows are numbered 1..N), got {row.get('turn')!r}"
        )
    role = row.get("role")
    if role not in _ROLES:
        raise UsageError(f"{at}: role must be user, assistant or tool, got {role!r}")
    before = None if previous is None else previous["role"]
    if role not in _NEXT_ROLES[before]:
        raise UsageError(f"{at}: a {role} row cannot follow {before or 'the start'}")
    called = previous is not None and before == "assistant" and bool(previous.get("tool_calls"))
    if role == "tool" and not called:
        raise UsageError(f"{at}: a tool row must follow an assistant row with tool_calls")
    if role == "user" and called:
        raise UsageError(f"{at}: a user row cannot follow an assistant row with tool_calls")
    content = row.get("content")
    if role == "user" and (not isinstance(content, str) or not content):
        raise UsageError(f"{at}: a user row needs non-empty text content")
    if role == "assistant":
        calls = row.get("tool_calls")
        if calls is not None:
            _check_tool_calls(at, calls)
        elif not isinstance(content, str):
            raise UsageError(f"{at}: an assistant row needs content or tool_calls")
    if role == "tool":
        results = row.get("tool_results")
        if not isinstance(results, list) or not results:
            raise UsageError(f"{at}: a tool row needs a non-empty tool_results list")
        for result in results:
            if not isinstance(result, dict) or not isinstance(result.get("tool_call_id"), str):
                raise UsageError(f"{at}: each tool result needs a tool_call_id and content")
            if not isinstance(result.get("content"), str):
                raise UsageError(
                    f"{at}: tool result {result.get('tool_call_id')!r} needs text content"
                )


def _check_tool_calls(at: str, calls: Any) -> None:
    if not isinstance(calls, list) or not calls:
        raise UsageError(f"{at}: tool_calls must be a non-empty list")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or call.get("type", "function") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str | dict)
        ):
            raise UsageError(
                f"{at}: a tool call is {{id, type: function, function: {{name, arguments}}}}, "
                f"got {json.dumps(call)[:120]}"
            )


def _assistant_message(row: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": row.get("content")}
    if row.get("name") is not None:
        message["name"] = row["name"]
    calls = row.get("tool_calls")
    if calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": _arguments(call["function"]["arguments"]),
                },
            }
            for call in calls
        ]
    if isinstance(row.get("reasoning_content"), str):
        message["reasoning_content"] = row["reasoning_content"]
    return message


def _arguments(arguments: str | dict[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _client_messages(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    if row["role"] == "tool":
        return [
            {"role": "tool", "tool_call_id": r["tool_call_id"], "content": r["content"]}
            for r in row["tool_results"]
        ]
    message: dict[str, Any] = {"role": "user", "content": row["content"]}
    if row.get("name") is not None:
        message["name"] = row["name"]
    return [message]


def _delay(at: str, value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise UsageError(f"{at}: delay_seconds must be a number >= 0, got {value!r}")
    return float(value)


def _tools(at: str, value: Any) -> tuple[dict[str, Any], ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise UsageError(f"{at}: tools must be a list of function definitions")
    return tuple(value)


def _interned(
    seen: dict[str, tuple[dict[str, Any], ...]], tools: tuple[dict[str, Any], ...] | None
) -> tuple[dict[str, Any], ...] | None:
    """The same tool list as one object, so its encoding is made once."""
    if tools is None:
        return None
    return seen.setdefault(json.dumps(tools, sort_keys=True), tools)


def _max_tokens(at: str, row: Mapping[str, Any], first_user: Mapping[str, Any]) -> int | None:
    """The row's cap, else the first user row's, in the reference's order
    of precedence; None: the run's ``max_output_tokens``."""
    for source in (row, first_user):
        for key in _MAX_TOKEN_KEYS:
            value = source.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{at}: {key} must be a positive integer, got {value!r}")
            return value
    return None


def _string_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class AgenticBodies:
    """Request bodies of agentic turns (chat completions, streamed): the
    turn's messages verbatim, its tools, its output cap (else
    ``max_output_tokens``), the run's sampling fields and ``--extra-body``;
    ``model`` is the run's unless the row names one.  The part after the messages is
    encoded once per distinct (tools, cap, model)."""

    def __init__(
        self,
        *,
        model: str,
        max_output_tokens: int,
        sampling: Mapping[str, Any] | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        self._model = model
        self._extra_body = dict(extra_body or {})
        self._max_output_tokens = max_output_tokens
        self._sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        self._tails: dict[tuple[int, int, str], bytes] = {}

    def __call__(
        self, trajectory: Trajectory, turn: ClientTurn, salt: tuple[str, str] | None
    ) -> bytes:
        cap = turn.max_tokens or self._max_output_tokens
        model = turn.model or self._model
        key = (id(turn.tools), cap, model)
        tail = self._tails.get(key)
        if tail is None:
            rest: dict[str, Any] = {}
            if turn.tools is not None:
                rest["tools"] = list(turn.tools)
            if "temperature" in self._sampling:
                rest["temperature"] = self._sampling["temperature"]
            rest["max_completion_tokens"] = cap
            rest["stream"] = True
            rest["stream_options"] = {"include_usage": True}
            rest.update({k: v for k, v in self._sampling.items() if k != "temperature"})
            rest.update(self._extra_body)  # last: --extra-body (load/requests.py)
            tail = msgspec.json.encode(rest)[1:]  # without its opening brace
            self._tails[key] = tail
        head = b'{"model":' + msgspec.json.encode(model) + b',"messages":'
        return head + trajectory.messages_body(turn, salt) + b"," + tail
