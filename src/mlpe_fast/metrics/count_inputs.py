"""What is tokenized for each count: OSL, TPOT tokens and ISL (spec §1.2).

The counts are taken from the same objects ``events.jsonl`` holds -- the
``TextModelOutput`` of a COMPLETE line and the ``PromptData`` of an ISSUED
line (:mod:`mlpe_fast.artifacts.events`) -- so that a run analysed again
from its event log (``mlpe-fast analyze``) reproduces its own numbers, and
so that an event log written by the reference client is counted by the same
rules.  The rules are the reference client's (mlcommons/endpoints,
``metrics_aggregator/metrics_table.py`` ``OslTrigger``/``TpotTrigger``/
``IslTrigger`` and ``core/types.py`` ``TextModelOutput``, at ea332753),
which implement spec §1.2:

* **OSL**: an output with reasoning or tool calls is counted as one
  assistant message through the chat template (:class:`MessageText`: all
  content, all reasoning, the tool calls merged per index); any other
  output as its plain text.
* **TPOT tokens** (streamed responses with a first token only): the same,
  over what arrived *after* the first content-bearing chunk.  Streamed
  output is stored as ``(first_chunk, rest)``: the first chunk is
  ``output[0]`` -- or ``reasoning[0]`` when the response has reasoning,
  whose first token came first -- and tool-call chunks are grouped the same
  way.
* **ISL**: token ids count themselves; a text prompt is its text; chat
  messages are rendered as sent with the generation prompt
  (:class:`PromptMessages`).

An input of None counts nothing (no output, no TPOT sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..artifacts.events import PromptData, TextModelOutput

__all__ = (
    "CountInput",
    "MessageText",
    "PromptMessages",
    "merge_tool_call_chunks",
    "osl_input",
    "prompt_input",
    "tpot_input",
)


class MessageText(msgspec.Struct, frozen=True, gc=False, tag="message"):
    """An assistant message, counted through the chat template (spec §1.2).

    ``tool_calls`` are whole calls (``{"id", "type", "function": {"name",
    "arguments"}}``), in ascending index.
    """

    content: str
    reasoning: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None


class PromptMessages(msgspec.Struct, frozen=True, gc=False, tag="prompt"):
    """A chat prompt as sent, rendered with the generation prompt (ISL);
    the fields of the ISSUED line's ``PromptData``."""

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: str | None = None
    tool_choice: str | dict[str, Any] | None = None


CountInput = str | MessageText | PromptMessages | tuple[int, ...] | None
"""Plain text, a message for the chat template, a prompt, token ids, or nothing."""


def merge_tool_call_chunks(tool_calls: Sequence[Any] | None) -> tuple[dict[str, Any], ...] | None:
    """Whole tool calls from what a ``TextModelOutput`` holds.

    Non-streamed output holds whole calls already; streamed output holds
    groups of deltas (``[[delta, ...], [delta, ...]]``), merged here per
    ``index``: id, type and name taken when present, argument fragments
    appended in order, calls in ascending index (spec §1.2: "tool calls
    rebuilt per index").
    """
    if not tool_calls:
        return None
    if not isinstance(tool_calls[0], list | tuple):
        return tuple(tool_calls)
    merged: dict[int, dict[str, Any]] = {}
    for group in tool_calls:
        for delta in group:
            index = delta.get("index", 0)
            call = merged.get(index)
            if call is None:
                call = merged[index] = {"type": "function", "function": {"arguments": ""}}
            if delta.get("id"):
                call["id"] = delta["id"]
            if delta.get("type"):
                call["type"] = delta["type"]
            function = delta.get("function") or {}
            if function.get("name"):
                call["function"]["name"] = function["name"]
            if function.get("arguments"):
                call["function"]["arguments"] += function["arguments"]
    return tuple(merged[i] for i in sorted(merged))


def _joined(value: str | tuple[str, ...] | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else "".join(value)


def osl_input(output: TextModelOutput | None) -> CountInput:
    """What the OSL of a completed response counts (module docstring)."""
    if output is None:
        return None
    if output.reasoning or output.tool_calls:
        return MessageText(
            content=_joined(output.output),
            reasoning=_joined(output.reasoning) or None,
            tool_calls=merge_tool_call_chunks(output.tool_calls),
        )
    return _joined(output.output) or None


def tpot_input(output: TextModelOutput | None) -> CountInput:
    """What the TPOT token count of a streamed response counts: the output
    after its first content-bearing chunk (module docstring).

    Call it only for a response with a first token; a non-streamed output
    (plain strings) has no first chunk and yields None unless its reasoning
    was streamed.
    """
    if output is None:
        return None
    reasoning = output.reasoning
    reasoning_tail = (
        "".join(reasoning[1:]) if isinstance(reasoning, tuple) and len(reasoning) > 1 else None
    )
    first_was_reasoning = bool(reasoning) and isinstance(reasoning, tuple)
    out = output.output
    content_after = ""
    if out:
        if isinstance(out, str):
            if reasoning_tail is not None or first_was_reasoning:
                content_after = out
        elif reasoning_tail is not None or reasoning:
            content_after = "".join(out)
        elif len(out) > 1:
            content_after = "".join(out[1:])
    tool_calls = output.tool_calls
    if tool_calls and isinstance(tool_calls[0], list | tuple) and not (out or reasoning):
        tool_calls = tool_calls[1:]  # the first group held the first token
    if reasoning or output.tool_calls:
        return MessageText(
            content=content_after,
            reasoning=reasoning_tail,
            tool_calls=merge_tool_call_chunks(tool_calls),
        )
    return content_after or None


def prompt_input(prompt: PromptData | None) -> CountInput:
    """What the ISL of an issued query counts (module docstring)."""
    if prompt is None:
        return None
    if prompt.token_ids is not None:
        return prompt.token_ids
    if prompt.text:
        return prompt.text
    if prompt.messages is not None:
        return PromptMessages(
            messages=prompt.messages,
            tools=prompt.tools,
            chat_template_kwargs=prompt.chat_template_kwargs,
            chat_template=prompt.chat_template,
            tool_choice=prompt.tool_choice,
        )
    return None
