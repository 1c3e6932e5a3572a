"""What each count tokenizes (spec §1.2), from the records events.jsonl holds.

The expected inputs follow the reference client's triggers (OSL: a message
when the output has reasoning or tool calls, else its text; TPOT: the same
after the first chunk; ISL: token ids, text or messages), worked out by
hand from how our events writer stores streamed output."""

from __future__ import annotations

import msgspec
import pytest

from mlpe_fast.artifacts.events import PromptData, TextModelOutput, text_model_output
from mlpe_fast.metrics.count_inputs import (
    MessageText,
    PromptMessages,
    osl_input,
    prompt_input,
    tpot_input,
)
from mlpe_fast.wire.events import NO_RESPONSE, ResponseSummary, ToolCall


def summary(**fields: object) -> ResponseSummary:
    base = {"status": 200, "t_head": 1, "t_first": 2, "t_done": 3, "events": 3, "done": True}
    return msgspec.structs.replace(NO_RESPONSE, **{**base, **fields})


def test_plain_streamed_text() -> None:
    out = text_model_output(
        summary(content="Hello world", content_after_first="lo world"), streaming=True
    )
    assert out.output == ("Hel", "lo world")
    assert osl_input(out) == "Hello world"
    assert tpot_input(out) == "lo world"


def test_one_chunk_has_no_tpot_text() -> None:
    out = text_model_output(summary(content="Hi", content_after_first=""), streaming=True)
    assert osl_input(out) == "Hi"
    assert tpot_input(out) is None


def test_non_streamed_text_has_no_tpot_text() -> None:
    out = text_model_output(summary(content="Hi there"), streaming=False)
    assert osl_input(out) == "Hi there"
    assert tpot_input(out) is None


def test_reasoning_makes_a_message_and_the_first_token_was_reasoning() -> None:
    out = text_model_output(
        summary(
            content="42",
            content_after_first="42",
            reasoning="let me think",
            reasoning_after_first="me think",
        ),
        streaming=True,
    )
    assert osl_input(out) == MessageText(content="42", reasoning="let me think")
    # Everything after reasoning's first chunk: the rest of it and all content.
    assert tpot_input(out) == MessageText(content="42", reasoning="me think")


def test_reasoning_in_one_chunk_leaves_content_only() -> None:
    out = text_model_output(
        summary(content="ok", content_after_first="ok", reasoning="hm", reasoning_after_first=""),
        streaming=True,
    )
    assert tpot_input(out) == MessageText(content="ok", reasoning=None)


def test_tool_calls_are_rebuilt_per_index() -> None:
    calls = (
        ToolCall(index=1, id="b", type="function", name="second", arguments='{"y": 2}'),
        ToolCall(index=0, id="a", type="function", name="first", arguments='{"x": 1}'),
    )
    after = (
        ToolCall(index=1, id="b", type="function", name="", arguments=" 2}"),
        ToolCall(index=0, id="a", type="function", name="", arguments=""),
    )
    out = text_model_output(summary(tool_calls=calls, tool_calls_after_first=after), streaming=True)
    osl = osl_input(out)
    assert isinstance(osl, MessageText)
    assert osl.content == "" and osl.reasoning is None
    assert osl.tool_calls == (
        {"type": "function", "function": {"arguments": '{"x": 1}', "name": "first"}, "id": "a"},
        {"type": "function", "function": {"arguments": '{"y": 2}', "name": "second"}, "id": "b"},
    )
    # The first tool-call group held the first token: TPOT counts the rest.
    tpot = tpot_input(out)
    assert isinstance(tpot, MessageText)
    assert tpot.tool_calls == ({"type": "function", "function": {"arguments": " 2}"}},)


def test_json_round_trip_gives_the_same_inputs() -> None:
    calls = (ToolCall(index=0, id="a", type="function", name="f", arguments='{"k": "v"}'),)
    out = text_model_output(
        summary(
            content="done",
            content_after_first="done",
            reasoning="r1r2",
            reasoning_after_first="r2",
            tool_calls=calls,
            tool_calls_after_first=calls,
        ),
        streaming=True,
    )
    again = msgspec.json.decode(msgspec.json.encode(out), type=TextModelOutput)
    assert osl_input(again) == osl_input(out)
    assert tpot_input(again) == tpot_input(out)


USER_Q = {"role": "user", "content": "q"}


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        (None, None),
        (PromptData(token_ids=(1, 2, 3)), (1, 2, 3)),
        (PromptData(text="[00ff] hi"), "[00ff] hi"),
        (
            PromptData(messages=({"role": "user", "content": "q"},), chat_template_kwargs={"a": 1}),
            PromptMessages(
                messages=({"role": "user", "content": "q"},), chat_template_kwargs={"a": 1}
            ),
        ),
        (PromptData(), None),
    ],
)
def test_prompt_inputs(prompt: PromptData | None, expected: object) -> None:
    assert prompt_input(prompt) == expected


def test_failed_query_has_no_output() -> None:
    assert osl_input(None) is None and tpot_input(None) is None
