"""Pieces of a response summary that both implementations build the same way.

They run once per response (never per event), so they stay in Python.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .events import ToolCall

__all__ = ("http_error_message", "tool_calls_after_first")

_MAX_MESSAGE = 300


def http_error_message(status: int, body: bytes) -> str:
    """One line for a non-2xx answer: ``"HTTP 429: Rate limit reached"``.

    Takes the message of an OpenAI error body (``{"error": {"message": ...}}``),
    else ``error`` as a string, else FastAPI's ``detail`` or a bare
    ``message``, else the body text; whitespace is collapsed and the result
    capped at 300 characters so that it fits a log line.
    """
    detail = ""
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            detail = error["message"]
        elif isinstance(error, str):
            detail = error
        elif isinstance(doc.get("detail"), str):
            detail = doc["detail"]
        elif isinstance(doc.get("message"), str):
            detail = doc["message"]
    if not detail:
        detail = body.decode("utf-8", "replace")
    detail = " ".join(detail.split())
    if len(detail) > _MAX_MESSAGE:
        detail = detail[: _MAX_MESSAGE - 3] + "..."
    return f"HTTP {status}: {detail}" if detail else f"HTTP {status}"


def tool_calls_after_first(
    calls: Iterable[tuple[ToolCall, int, int]],
) -> tuple[ToolCall, ...]:
    """The tool-call text that arrived after the first content-bearing event.

    ``calls`` pairs each rebuilt call with the length of its name and
    arguments right after that event (rule R3 of ``csrc/mlpe_response.h``);
    calls with nothing new are left out.
    """
    after: list[ToolCall] = []
    for call, name_len, arguments_len in calls:
        name = call.name[name_len:]
        arguments = call.arguments[arguments_len:]
        if name or arguments:
            after.append(
                ToolCall(
                    index=call.index, id=call.id, type=call.type, name=name, arguments=arguments
                )
            )
    return tuple(after)
