"""The OpenAI chunk decoder: one SSE event's data (or a completion body) to fragments.

Rules J1-J6 and S1-S10 are those of csrc/mlpe_oai.h.  Every test runs on both
implementations through the ``oai`` fixture; a cross-check runs the C and the
Python decoder side by side on every payload of this file, and a Hypothesis
test does so on random (valid and corrupted) documents.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlpe_fast.errors import ErrorCode
from mlpe_fast.sim.stream import chat_chunk
from mlpe_fast.wire.events import ChunkError, Delta, ToolCallDelta
from tests.conftest import IMPLS, wire_module

SYNTAX = ErrorCode.JSON_SYNTAX
UTF8 = ErrorCode.JSON_UTF8
DEPTH = ErrorCode.JSON_DEPTH
SHAPE = ErrorCode.CHUNK_SHAPE
ENDPOINT = ErrorCode.ENDPOINT_ERROR

T = 1_700_000_000_123_456_789


def delta(
    content: str | None = None,
    reasoning: str | None = None,
    tool_calls: tuple[ToolCallDelta, ...] = (),
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
) -> Delta:
    return Delta(content, reasoning, tool_calls, finish_reason, usage, T)


def tool(
    index: int,
    id: str | None = None,
    type: str | None = None,
    name: str | None = None,
    arguments: str | None = None,
) -> ToolCallDelta:
    return ToolCallDelta(index, id, type, name, arguments)


def decode(oai: ModuleType, payload: bytes | str) -> Delta | ChunkError:
    if isinstance(payload, str):
        payload = payload.encode()
    return oai.ChunkDecoder().decode(payload, T)  # type: ignore[no-any-return]


def in_delta(members: str, **choice: str) -> str:
    """A streaming chunk whose first choice has ``members`` in its delta."""
    extra = "".join(f',"{k}":{v}' for k, v in choice.items())
    return f'{{"choices":[{{"index":0,"delta":{{{members}}}{extra}}}]}}'


# ---- real chunks ------------------------------------------------------------

VLLM_ROLE = (
    b'{"id":"chatcmpl-9f3c","object":"chat.completion.chunk","created":1718000000,'
    b'"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":'
    b'{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
)
OPENAI_ROLE = (
    b'{"id":"chatcmpl-AbC","object":"chat.completion.chunk","created":1727000000,'
    b'"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5f20662549","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},'
    b'"logprobs":null,"finish_reason":null}],"usage":null}'
)
TYPICAL = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"m","choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,'
    b'"finish_reason":null}]}'
)
SGLANG_REASONING = (
    b'{"id":"5a1c","object":"chat.completion.chunk","created":1740000000,"model":'
    b'"deepseek-ai/DeepSeek-R1","choices":[{"index":0,"delta":{"role":null,'
    b'"content":null,"reasoning_content":"Okay","tool_calls":null},"logprobs":null,'
    b'"finish_reason":null,"matched_stop":null}],"usage":null}'
)
VLLM_REASONING = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"reasoning":" so"},"logprobs":null,'
    b'"finish_reason":null}]}'
)
VLLM_BOTH_REASONING = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"reasoning_content":" so","reasoning":" so"},'
    b'"logprobs":null,"finish_reason":null}]}'
)
TOOL_FIRST = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":'
    b'[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather",'
    b'"arguments":""}}]},"logprobs":null,"finish_reason":null}]}'
)
TOOL_ARGS = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
    b'{"arguments":"{\\"lo"}}]},"logprobs":null,"finish_reason":null}]}'
)
TOOL_NO_INDEX = (
    b'{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_1","type":"function",'
    b'"function":{"name":"a","arguments":"{}"}},{"id":"call_2","type":"function",'
    b'"function":{"name":"b","arguments":"{}"}}]}}]}'
)
TOOL_TWO = (
    b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":'
    b'{"arguments":"1}"}},{"index":0,"function":{"arguments":"0}"}}]}}]}'
)
FINISH = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop",'
    b'"stop_reason":null}]}'
)
FINISH_TOOL = b'{"choices":[{"index":0,"delta":{"content":null},"finish_reason":"tool_calls"}]}'
USAGE_ONLY = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":12,"total_tokens":112,'
    b'"completion_tokens":100,"prompt_tokens_details":null}}'
)
SGLANG_FINAL = (
    b'{"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"content":"."},"finish_reason":"length"}],"usage":'
    b'{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,'
    b'"completion_tokens_details":{"reasoning_tokens":3}}}'
)
COMPLETIONS = (
    b'{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
    b'[{"index":0,"text":" world","logprobs":null,"finish_reason":null,'
    b'"stop_reason":null}]}'
)
MESSAGE_BODY = (
    b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"Hello!",'
    b'"reasoning_content":"Think.","tool_calls":[]},"logprobs":null,'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"total_tokens":5,'
    b'"completion_tokens":2}}'
)
MESSAGE_TOOLS = (
    b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":null,'
    b'"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f",'
    b'"arguments":"{\\"x\\": 1}"}}]},"finish_reason":"tool_calls"}]}'
)
N2_OTHER = b'{"choices":[{"index":1,"delta":{"content":"b"},"finish_reason":null}]}'
N2_BOTH = (
    b'{"choices":[{"index":1,"delta":{"content":"b"}},'
    b'{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}'
)

REAL: list[tuple[bytes, Delta]] = [
    (VLLM_ROLE, delta(content="")),
    (OPENAI_ROLE, delta(content="")),
    (TYPICAL, delta(content="a")),
    (SGLANG_REASONING, delta(reasoning="Okay")),
    (VLLM_REASONING, delta(reasoning=" so")),
    (VLLM_BOTH_REASONING, delta(reasoning=" so")),
    (TOOL_FIRST, delta(tool_calls=(tool(0, "call_abc", "function", "get_weather", ""),))),
    (TOOL_ARGS, delta(tool_calls=(tool(0, arguments='{"lo'),))),
    (
        TOOL_NO_INDEX,
        delta(
            tool_calls=(
                tool(0, "call_1", "function", "a", "{}"),
                tool(1, "call_2", "function", "b", "{}"),
            )
        ),
    ),
    (TOOL_TWO, delta(tool_calls=(tool(1, arguments="1}"), tool(0, arguments="0}")))),
    (FINISH, delta(finish_reason="stop")),
    (FINISH_TOOL, delta(finish_reason="tool_calls")),
    (
        USAGE_ONLY,
        delta(
            usage={
                "prompt_tokens": 12,
                "total_tokens": 112,
                "completion_tokens": 100,
                "prompt_tokens_details": None,
            }
        ),
    ),
    (
        SGLANG_FINAL,
        delta(
            content=".",
            finish_reason="length",
            usage={
                "prompt_tokens": 5,
                "completion_tokens": 7,
                "total_tokens": 12,
                "completion_tokens_details": {"reasoning_tokens": 3},
            },
        ),
    ),
    (COMPLETIONS, delta(content=" world")),
    (
        MESSAGE_BODY,
        delta(
            content="Hello!",
            reasoning="Think.",
            finish_reason="stop",
            usage={"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2},
        ),
    ),
    (
        MESSAGE_TOOLS,
        delta(
            tool_calls=(tool(0, "call_1", "function", "f", '{"x": 1}'),), finish_reason="tool_calls"
        ),
    ),
    (N2_OTHER, delta()),
    (N2_BOTH, delta(content="a", finish_reason="stop")),
]


@pytest.mark.parametrize(("payload", "expected"), REAL)
def test_real_chunks(oai: ModuleType, payload: bytes, expected: Delta) -> None:
    assert decode(oai, payload) == expected


@pytest.mark.parametrize(("payload", "expected"), REAL)
def test_real_chunks_pretty_printed(oai: ModuleType, payload: bytes, expected: Delta) -> None:
    # Any insignificant whitespace (RFC 8259 section 2), inside and around.
    pretty = json.dumps(json.loads(payload), indent="\t", separators=(" ,\r\n", " : "))
    assert decode(oai, f" \r\n\t{pretty}\n\n") == expected


CHOICE_FORMS: list[tuple[str, Delta]] = [
    ("{}", delta()),
    ('{"choices":null,"usage":null,"error":null}', delta()),
    ('{"choices":[{}]}', delta()),
    (
        '{"choices":[{"index":null,"delta":null,"message":null,"text":null,"finish_reason":null}]}',
        delta(),
    ),
    (
        in_delta('"content":null,"reasoning_content":null,"reasoning":null,"tool_calls":null'),
        delta(),
    ),
    (
        in_delta('"tool_calls":[{"index":null,"id":null,"type":null,"function":null}]'),
        delta(tool_calls=(tool(0),)),
    ),
    (
        in_delta('"tool_calls":[{"function":{"name":null,"arguments":null}}]'),
        delta(tool_calls=(tool(0),)),
    ),
    (in_delta('"tool_calls":[{}]'), delta(tool_calls=(tool(0),))),
    (in_delta('"tool_calls":[]'), delta()),
    (in_delta('"reasoning_content":null,"reasoning":"r"'), delta(reasoning="r")),
    (in_delta('"reasoning_content":"a","reasoning":"b"'), delta(reasoning="a")),
    (in_delta('"reasoning":"b","reasoning_content":"a"'), delta(reasoning="a")),
    (
        in_delta('"tool_calls":[{"index":2147483647},{"index":-0}]'),
        delta(tool_calls=(tool(2147483647), tool(0))),
    ),
    # delta wins over message when it is an object; message when delta is null
    ('{"choices":[{"message":{"content":"m"},"delta":{"content":"d"}}]}', delta(content="d")),
    ('{"choices":[{"message":{"content":"m"},"delta":null}]}', delta(content="m")),
    ('{"choices":[{"message":{"content":"m"},"delta":{}}]}', delta()),
    # text is the content unless the delta/message has a non-null content
    ('{"choices":[{"text":"t"}]}', delta(content="t")),
    ('{"choices":[{"text":"t","delta":{}}]}', delta(content="t")),
    ('{"choices":[{"text":"t","delta":{"content":null}}]}', delta(content="t")),
    ('{"choices":[{"text":"t","delta":{"content":"c"}}]}', delta(content="c")),
    ('{"choices":[{"text":"t","message":{"content":""}}]}', delta(content="")),
    # the first choice whose index is 0, null or absent
    (
        '{"choices":[{"index":2,"text":"x"},{"text":"y"},{"index":0,"text":"z"}]}',
        delta(content="y"),
    ),
    ('{"choices":[{"index":-1,"text":"x"},{"index":99999999999999999999,"text":"y"}]}', delta()),
    ('{"choices":[{"index":-0,"text":"x"}]}', delta(content="x")),
    # tool calls of choices that are not selected are checked, not reported
    (
        '{"choices":[{"index":1,"delta":{"tool_calls":[{"id":"x"},{"id":"z"}]}},'
        '{"index":0,"delta":{"tool_calls":[{"index":4},{"id":"y"}]}},'
        '{"delta":{"tool_calls":[{"id":"w"}]}}]}',
        delta(tool_calls=(tool(4), tool(1, "y"))),
    ),
    # members that are not the schema's are validated and ignored (S10)
    (
        '{"x":{"choices":[1],"usage":1},"choices":[{"delta":{"content":"a",'
        '"x":[true,false,null,-1.5e+3,{"content":1}]},"logprobs":{"content":[{"token":"a",'
        '"logprob":-0.1,"bytes":[97],"top_logprobs":[]}]}}],"y":[]}',
        delta(content="a"),
    ),
]


@pytest.mark.parametrize(("payload", "expected"), CHOICE_FORMS)
def test_choice_forms(oai: ModuleType, payload: str, expected: Delta) -> None:
    assert decode(oai, payload) == expected


def test_any_buffer_and_stamp(oai: ModuleType) -> None:
    decoder = oai.ChunkDecoder()
    for data in (TYPICAL, bytearray(TYPICAL), memoryview(TYPICAL), memoryview(b"xx" + TYPICAL)[2:]):
        assert decoder.decode(data, 5) == Delta("a", None, (), None, None, 5)
    for data in (b"{", bytearray(b"{"), memoryview(b"{")):
        result = decoder.decode(data, 6)
        assert result == ChunkError(SYNTAX, "", b"{", 6)
        assert type(result.data) is bytes


def test_decoder_is_reusable(oai: ModuleType) -> None:
    decoder = oai.ChunkDecoder()
    big = in_delta('"content":"' + "\\u00e9" * 5000 + '"').encode()
    first = decoder.decode(big, 1)
    assert decoder.decode(TOOL_FIRST, 2) == Delta(
        None, None, (tool(0, "call_abc", "function", "get_weather", ""),), None, None, 2
    )
    assert decoder.decode(b"[", 3) == ChunkError(SYNTAX, "", b"[", 3)
    assert decoder.decode(TYPICAL, 4) == Delta("a", None, (), None, None, 4)
    assert first == Delta("\u00e9" * 5000, None, (), None, None, 1)


def test_many_tool_calls(oai: ModuleType) -> None:
    calls = ",".join(f'{{"index":{i},"function":{{"arguments":"{i}"}}}}' for i in range(1000))
    result = decode(oai, in_delta(f'"tool_calls":[{calls}]'))
    assert result == delta(tool_calls=tuple(tool(i, arguments=str(i)) for i in range(1000)))


# ---- strings (J5) -------------------------------------------------------------

ESCAPES: list[tuple[str, str]] = [
    (r"\"", '"'),
    (r"\\", "\\"),
    (r"\/", "/"),
    (r"a\/b", "a/b"),
    (r"\b\f\n\r\t", "\b\f\n\r\t"),
    (r"\u0000", "\x00"),
    (r"x\u0000y", "x\x00y"),
    (r"\u001f\u007f", "\x1f\x7f"),
    (r"\u00e9\u00E9\u00c9", "ééÉ"),
    (r"\u20ac", "€"),
    (r"\uFFFF\uffff", "\uffff\uffff"),
    (r"\ud83d\ude00", "😀"),
    (r"\uD83D\uDE00", "😀"),
    (r"\udbff\udfff", "\U0010ffff"),
    (r"\ud800", "\ufffd"),
    (r"\ud800x", "\ufffdx"),
    (r"\udc00", "\ufffd"),
    (r"\udfff\ud800", "\ufffd\ufffd"),
    (r"\ude00\ud83d", "\ufffd\ufffd"),
    (r"\ud800\ud83d\ude00", "\ufffd😀"),
    (r"\ud83d\u0041", "\ufffdA"),
    (r"\ud83d\n", "\ufffd\n"),
    (r"\ud83d\\ude00", "\ufffd\\ude00"),
    (r"\ud83d ude00", "\ufffd ude00"),
    ('{\\"location\\": \\"Paris\\"}', '{"location": "Paris"}'),
    ("h\u00e9llo \u4f60\u597d \U0001f600 \u00ff", "héllo 你好 😀 ÿ"),
    ("\x7f", "\x7f"),
    ("", ""),
]


@pytest.mark.parametrize(("escaped", "text"), ESCAPES)
def test_escapes(oai: ModuleType, escaped: str, text: str) -> None:
    assert decode(oai, in_delta(f'"content":"{escaped}"')) == delta(content=text)
    # The same decoding applies to every string the decoder reports.
    function = f'{{"name":"{escaped}","arguments":"{escaped}"}}'
    calls = f'"tool_calls":[{{"id":"{escaped}","type":"{escaped}","function":{function}}}]'
    assert decode(oai, in_delta(calls, finish_reason=f'"{escaped}"')) == delta(
        tool_calls=(tool(0, text, text, text, text),), finish_reason=text
    )
    assert decode(oai, in_delta(f'"reasoning":"{escaped}"')) == delta(reasoning=text)
    assert decode(oai, f'{{"error":{{"message":"{escaped}"}}}}') == ChunkError(
        ENDPOINT, text, f'{{"error":{{"message":"{escaped}"}}}}'.encode(), T
    )


def test_escaped_member_names(oai: ModuleType) -> None:
    payload = r'{"\u0063hoices":[{"d\u0065lta":{"con\u0074ent":"x","\u0072easoning":"r"}}]}'
    assert decode(oai, payload) == delta(content="x", reasoning="r")
    # A lone surrogate makes a name no schema member has.
    assert decode(oai, in_delta(r'"content\ud800":1')) == delta()


@pytest.mark.parametrize("length", range(40))
def test_string_lengths_and_positions(oai: ModuleType, length: int) -> None:
    # Special bytes at every offset of strings on both sides of the 8- and
    # 16-byte scanning blocks, with a string ending near the end of the input.
    base = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH"[:length]
    cases = [base]
    for at in range(length + 1):
        for insert in ("\\n", "\\u00e9", "\u00e9", "\u4f60", "\U0001f600", "\\\\"):
            cases.append(base[:at] + insert + base[at:])
    for text in cases:
        expected = json.loads(f'"{text}"')
        assert decode(oai, in_delta(f'"content":"{text}"')) == delta(content=expected)
        assert decode(oai, f'{{"error":"{text}"}}') == ChunkError(
            ENDPOINT, expected, f'{{"error":"{text}"}}'.encode(), T
        )


def test_long_strings(oai: ModuleType) -> None:
    text = ("x" * 997 + "\u00e9\u4f60\U0001f600") * 50
    assert decode(oai, in_delta(json.dumps({"content": text})[1:-1])) == delta(content=text)
    escaped = json.dumps({"content": text}, ensure_ascii=True)[1:-1]
    assert decode(oai, in_delta(escaped)) == delta(content=text)


# ---- JSON errors (J1-J4) --------------------------------------------------------

SYNTAX_ERRORS: list[bytes] = [
    b"",
    b" \t\r\n",
    b"{",
    b'{"choices":[',
    b'{"choices":[{"delta":{"content":"a"}}]',
    b'{"a":"abc',
    b'{"a":tru',
    b'{"a":nul',
    b'{"a":1',
    b'{"a"',
    b'{"a":',
    b'{"a" 1}',
    b'{"a":1 "b":2}',
    b'{"a":1,}',
    b'{,"a":1}',
    b"[1,]",
    b"[,1]",
    b"[1 2]",
    b"[1,,2]",
    b'{"a":1}}',
    b"{} {}",
    b"{}x",
    b"{}\x00",
    b"\x00{}",
    b'{"a":01}',
    b"-01",
    b"[00]",
    b"[1.]",
    b"[.5]",
    b"[-]",
    b"[-a]",
    b"[1e]",
    b"[1e+]",
    b"[1E-]",
    b"[+1]",
    b"[0x10]",
    b"[1.5e]",
    b"[--1]",
    b'{"a":NaN}',
    b'{"a":Infinity}',
    b'{"a":-Infinity}',
    b'{"a":nan}',
    b"NaN",
    b'{"a":1 /* c */}',
    b"// c\n{}",
    b'{"a":1} # x',
    b"{'a':1}",
    b"{\"a\":'x'}",
    b"{a:1}",
    b'{"a":True}',
    b'{"a":None}',
    b'{"a":nulls}',
    b'{"a":"x\ty"}',
    b'{"a":"x\ny"}',
    b'{"a":"\x00"}',
    b'{"a":"\x1f"}',
    b'"\\x41"',
    b'"\\a"',
    b'"\\U0041"',
    b'"\\u12"',
    b'"\\u12G4"',
    b'"\\u"',
    b'"\\',
    b'"\\ud800\\u12"',
    b'"\\ud800\\uzzzz"',
    b'{"a\\x":1}',
    b'{"a":1}\xc3\xa9',
    b"\xef\xbb\xbf{}",
    b"{\xc3\xa9:1}",
    b"[\xff]",
    b'{"a":1,\x80}',
    b'{"a":[1,2}',
    b'{"a":{"b":1]}',
    b"[1}",
    b"]",
    b"}",
    b":",
    b'"a":1',
]


@pytest.mark.parametrize("payload", SYNTAX_ERRORS)
def test_syntax_errors(oai: ModuleType, payload: bytes) -> None:
    assert decode(oai, payload) == ChunkError(SYNTAX, "", payload, T)


UTF8_ERRORS: list[bytes] = [
    b"\xc0\x80",  # overlong 2-byte
    b"\xc1\xbf",
    b"\xe0\x80\x80",  # overlong 3-byte
    b"\xe0\x9f\xbf",
    b"\xf0\x80\x80\x80",  # overlong 4-byte
    b"\xf0\x8f\xbf\xbf",
    b"\xed\xa0\x80",  # surrogates
    b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"\xf5\x80\x80\x80",
    b"\xf8\x88\x80\x80\x80",
    b"\xfe",
    b"\xff",
    b"\xc3",  # truncated sequences
    b"\xe2\x82",
    b"\xf0\x9f\x98",
    b"\xc3A",
    b"\xe2\x82A",
    b"\xf0\x9f\x98A",
    b"\x80",  # stray continuation bytes
    b"\xbf",
    b"a\xc3\xa9\x80",
    b"\xc3\xa9\xa9",
]


@pytest.mark.parametrize("bad", UTF8_ERRORS)
def test_utf8_errors(oai: ModuleType, bad: bytes) -> None:
    for payload in (
        b'"' + bad + b'"',
        in_delta('"content":"x').encode() + bad + b'"}}]}',
        b'{"ignored":"' + b"y" * 20 + bad + b'","choices":[]}',
        b'{"na' + bad + b'me":1}',
        b'{"a":"' + bad,  # cut short: the UTF-8 problem comes first
    ):
        assert decode(oai, payload) == ChunkError(UTF8, "", payload, T)


VALID_UTF8 = [
    "\u0080",
    "\u07ff",
    "\u0800",
    "\ud7ff",
    "\ue000",
    "\uffff",
    "\U00010000",
    "\U0010ffff",
]


@pytest.mark.parametrize("char", VALID_UTF8)
def test_utf8_boundaries(oai: ModuleType, char: str) -> None:
    assert decode(oai, in_delta(f'"content":"{char}"')) == delta(content=char)


PRECEDENCE: list[tuple[bytes, ErrorCode]] = [
    (b'{"a":"\xff", }', UTF8),
    (b'{"a":"\xff\\x"}', UTF8),
    (b'{"a":"\xe2\x82', UTF8),
    (b'{"a":01,"b":"\xff"}', SYNTAX),
    (b'{"a":"\\x","b":"\xff"}', SYNTAX),
    (b'"\x01\xff"', SYNTAX),
    (b'{"a":"abc', SYNTAX),
    (b'{"a":1}\xff', SYNTAX),
    (b'["\xff",' + b"[" * 70, UTF8),
    (b"[" * 10 + b'x"\xff"', SYNTAX),
    (b"[" * 65 + b'"\xff"', DEPTH),
    (b"[" * 64 + b'"\xff"', UTF8),
    (b"[" * 65, DEPTH),
    (b"[" * 64, SYNTAX),
    (b"[" * 65 + b"]" * 64, DEPTH),
    (b'{"a":[1,]' + b"[" * 70, SYNTAX),
]


@pytest.mark.parametrize(("payload", "code"), PRECEDENCE)
def test_first_problem_decides(oai: ModuleType, payload: bytes, code: ErrorCode) -> None:
    assert decode(oai, payload) == ChunkError(code, "", payload, T)


def nested(levels: int, inner: str = "1") -> str:
    """``levels`` containers, arrays and objects alternating, around ``inner``."""
    opens = ['{"k":' if i % 2 else "[" for i in range(levels)]
    closes = ["}" if i % 2 else "]" for i in range(levels)]
    return "".join(reversed(opens)) + inner + "".join(closes)


@pytest.mark.parametrize("levels", [63, 64])
def test_depth_limit_is_inclusive(oai: ModuleType, levels: int) -> None:
    assert decode(oai, "[" * levels + "]" * levels) == ChunkError(
        SHAPE, "$", ("[" * levels + "]" * levels).encode(), T
    )
    # 64 counted from the top-level object, through the schema's own levels.
    body = nested(levels - 5, "{}")
    payload = in_delta(f'"content":"a","extra":{body}')
    assert decode(oai, payload) == delta(content="a")
    top = '{"x":' + nested(levels - 1, "[]" if levels < 64 else "0") + "}"
    assert isinstance(decode(oai, top), Delta)


@pytest.mark.parametrize("levels", [65, 66, 1000, 100_000])
def test_too_deep(oai: ModuleType, levels: int) -> None:
    for payload in (
        "[" * levels + "]" * levels,
        "{" + '"a":{' * (levels - 1) + "}" * levels,
        in_delta(f'"content":"a","extra":{nested(levels - 4, "{}")}'),
        in_delta(f'"content":"a","extra":{nested(levels - 4, "[]")}'),
        '{"usage":' + nested(levels - 1) + "}",
        "[" * (levels - 1) + "{}" + "]" * (levels - 1),
    ):
        assert decode(oai, payload) == ChunkError(DEPTH, "", payload.encode(), T)


def test_large_integers(oai: ModuleType) -> None:
    # Longer than int() takes (sys.get_int_max_str_digits): still integers
    # (S8), reported as +-2**63 in usage.
    huge = "9" * 5000
    payload = (
        f'{{"created":{huge},"choices":[{{"index":{huge},"text":"x"}},{{"index":-{huge}}}],'
        f'"usage":{{"n":{huge},"m":-{huge},"k":1}}}}'
    )
    assert decode(oai, payload) == delta(usage={"n": 2**63, "m": -(2**63), "k": 1})
    payload = in_delta(f'"tool_calls":[{{"index":{huge}}}]')
    assert decode(oai, payload) == ChunkError(
        SHAPE, "choices[0].delta.tool_calls[0].index", payload.encode(), T
    )


def test_usage_values(oai: ModuleType) -> None:
    payload = (
        r'{"usage":{"a":1,"a":2,"b":[1.5,-0,1e400,true,null,"\ud800x\u00e9"],'
        r'"c":{"d":{}},"\udc00":0,"big":123456789012345678901234567890}}'
    )
    assert decode(oai, payload) == delta(
        usage={
            "a": 2,
            "b": [1.5, 0, float("inf"), True, None, "\ufffdxé"],
            "c": {"d": {}},
            "\ufffd": 0,
            "big": 123456789012345678901234567890,
        }
    )


def test_usage_values_without_escapes_take_the_fast_decoder_and_agree(oai: ModuleType) -> None:
    """The same object without escapes goes through msgspec (decode_usage's
    fast path); what msgspec refuses falls back to json's rules, alike."""
    payload = (
        '{"usage":{"a":1,"a":2,"b":[1.5,-0,1e400,true,null,"xé"],'
        '"c":{"d":{}},"big":123456789012345678901234567890,"n":-9223372036854775809}}'
    )
    assert decode(oai, payload) == delta(
        usage={
            "a": 2,
            "b": [1.5, 0, float("inf"), True, None, "xé"],
            "c": {"d": {}},
            "big": 123456789012345678901234567890,
            "n": -9223372036854775809,
        }
    )


_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_JSON_VALUES = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(usage=st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=6))
def test_usage_objects_decode_as_json_does(usage: dict[str, Any]) -> None:
    """decode_usage (either path) agrees with json's own decoding of valid
    JSON objects, escaped or not, ASCII or not."""
    from mlpe_fast.wire._oai_py import decode_usage

    for ensure_ascii in (False, True):
        raw = json.dumps(usage, ensure_ascii=ensure_ascii).encode()
        if "\\ud8" in raw.decode() or any("\ud800" <= c <= "\udfff" for c in raw.decode()):
            continue  # lone surrogates: J5's replacement, tested above
        assert decode_usage(raw) == json.loads(raw)


# ---- shape (S1-S10) ----------------------------------------------------------------

SHAPE_ERRORS: list[tuple[str, str]] = [
    ("[]", "$"),
    ('"x"', "$"),
    ("1", "$"),
    ("null", "$"),
    ("true", "$"),
    ('{"choices":{}}', "choices"),
    ('{"choices":"x"}', "choices"),
    ('{"choices":1}', "choices"),
    ('{"choices":true}', "choices"),
    ('{"choices":[1]}', "choices[0]"),
    ('{"choices":[null]}', "choices[0]"),
    ('{"choices":[[]]}', "choices[0]"),
    ('{"choices":[{"index":0},"x"]}', "choices[1]"),
    ('{"choices":[{"index":"0"}]}', "choices[0].index"),
    ('{"choices":[{"index":0.0}]}', "choices[0].index"),
    ('{"choices":[{"index":1e0}]}', "choices[0].index"),
    ('{"choices":[{"index":true}]}', "choices[0].index"),
    ('{"choices":[{"index":[]}]}', "choices[0].index"),
    ('{"choices":[{"delta":[]}]}', "choices[0].delta"),
    ('{"choices":[{"delta":"x"}]}', "choices[0].delta"),
    ('{"choices":[{"message":1}]}', "choices[0].message"),
    ('{"choices":[{"text":1}]}', "choices[0].text"),
    ('{"choices":[{"text":{}}]}', "choices[0].text"),
    ('{"choices":[{"finish_reason":0}]}', "choices[0].finish_reason"),
    ('{"choices":[{"finish_reason":false}]}', "choices[0].finish_reason"),
    (in_delta('"content":1'), "choices[0].delta.content"),
    (in_delta('"content":["a"]'), "choices[0].delta.content"),
    (in_delta('"content":{}'), "choices[0].delta.content"),
    (in_delta('"content":true'), "choices[0].delta.content"),
    (in_delta('"reasoning_content":1'), "choices[0].delta.reasoning_content"),
    (in_delta('"reasoning":[]'), "choices[0].delta.reasoning"),
    (in_delta('"tool_calls":{}'), "choices[0].delta.tool_calls"),
    (in_delta('"tool_calls":"x"'), "choices[0].delta.tool_calls"),
    (in_delta('"tool_calls":[1]'), "choices[0].delta.tool_calls[0]"),
    (in_delta('"tool_calls":[{"index":0},null]'), "choices[0].delta.tool_calls[1]"),
    (in_delta('"tool_calls":[{"index":0},{"index":-1}]'), "choices[0].delta.tool_calls[1].index"),
    (in_delta('"tool_calls":[{"index":2147483648}]'), "choices[0].delta.tool_calls[0].index"),
    (in_delta('"tool_calls":[{"index":1.0}]'), "choices[0].delta.tool_calls[0].index"),
    (in_delta('"tool_calls":[{"index":"1"}]'), "choices[0].delta.tool_calls[0].index"),
    (in_delta('"tool_calls":[{"index":true}]'), "choices[0].delta.tool_calls[0].index"),
    (in_delta('"tool_calls":[{"id":1}]'), "choices[0].delta.tool_calls[0].id"),
    (in_delta('"tool_calls":[{"type":{}}]'), "choices[0].delta.tool_calls[0].type"),
    (in_delta('"tool_calls":[{"function":"f"}]'), "choices[0].delta.tool_calls[0].function"),
    (in_delta('"tool_calls":[{"function":[]}]'), "choices[0].delta.tool_calls[0].function"),
    (
        in_delta('"tool_calls":[{"function":{"name":1}}]'),
        "choices[0].delta.tool_calls[0].function.name",
    ),
    (
        in_delta('"tool_calls":[{"function":{"arguments":{"x":1}}}]'),
        "choices[0].delta.tool_calls[0].function.arguments",
    ),
    ('{"choices":[{"message":{"content":1}}]}', "choices[0].message.content"),
    (
        '{"choices":[{"message":{"tool_calls":[{},{},{"function":{"name":2}}]}}]}',
        "choices[0].message.tool_calls[2].function.name",
    ),
    ('{"usage":[]}', "usage"),
    ('{"usage":1}', "usage"),
    ('{"usage":"x"}', "usage"),
    # every choice is checked, the selected one or not
    (
        '{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":5}}]}',
        "choices[1].delta.content",
    ),
    (
        '{"choices":[' + "{}," * 12 + '{"delta":{"tool_calls":[{},{"id":0}]}}]}',
        "choices[12].delta.tool_calls[1].id",
    ),
    # the fixed order (S9) decides between two wrong members, not text order
    ('{"usage":1,"choices":1}', "choices"),
    ('{"usage":1,"choices":[1]}', "choices[0]"),
    ('{"choices":[{"index":0},{"index":"x"}],"usage":1}', "choices[1].index"),
    ('{"choices":[{"finish_reason":1,"index":"x"}]}', "choices[0].index"),
    ('{"choices":[{"finish_reason":1,"text":1}]}', "choices[0].text"),
    ('{"choices":[{"text":1,"message":1,"delta":1}]}', "choices[0].delta"),
    (in_delta('"tool_calls":1,"content":1'), "choices[0].delta.content"),
    (in_delta('"reasoning":1,"reasoning_content":1'), "choices[0].delta.reasoning_content"),
    ('{"choices":[{"message":{"content":1},"delta":{"content":1}}]}', "choices[0].delta.content"),
    ('{"choices":[{"text":1,"delta":{"content":1}}]}', "choices[0].delta.content"),
    ('{"choices":[{"message":1,"delta":{"reasoning":1}}]}', "choices[0].delta.reasoning"),
    ('{"choices":[{"message":{"reasoning":1},"delta":{}}]}', "choices[0].message.reasoning"),
    ('{"choices":[{"text":1,"message":{"tool_calls":[2]}}]}', "choices[0].message.tool_calls[0]"),
    (
        in_delta('"tool_calls":[{"function":{"name":1}},{"index":-1}]'),
        "choices[0].delta.tool_calls[0].function.name",
    ),
    (
        in_delta('"tool_calls":[{"function":1,"type":1,"id":1,"index":"x"}]'),
        "choices[0].delta.tool_calls[0].index",
    ),
    (
        in_delta('"tool_calls":[{"function":1,"type":1,"id":1}]'),
        "choices[0].delta.tool_calls[0].id",
    ),
    (in_delta('"tool_calls":[{"function":1,"type":1}]'), "choices[0].delta.tool_calls[0].type"),
    (
        in_delta('"tool_calls":[{"function":{"arguments":1,"name":1}}]'),
        "choices[0].delta.tool_calls[0].function.name",
    ),
]


@pytest.mark.parametrize(("payload", "path"), SHAPE_ERRORS)
def test_shape_errors(oai: ModuleType, payload: str, path: str) -> None:
    result = decode(oai, payload)
    assert result == ChunkError(SHAPE, path, payload.encode(), T)
    assert result.message == f"unexpected type for {path}"


def test_shape_is_checked_only_for_json(oai: ModuleType) -> None:
    assert decode(oai, '{"choices":1,') == ChunkError(SYNTAX, "", b'{"choices":1,', T)
    assert decode(oai, b'{"choices":1,"x":"\xff"}') == ChunkError(
        UTF8, "", b'{"choices":1,"x":"\xff"}', T
    )


# ---- duplicates (J6) --------------------------------------------------------------------

DUPLICATES: list[tuple[str, Delta | str]] = [
    (in_delta('"content":"a","content":"b"'), delta(content="b")),
    (in_delta('"content":"a","content":null'), delta()),
    (in_delta('"content":1,"content":"b"'), delta(content="b")),
    (in_delta('"content":"a","content":1'), "choices[0].delta.content"),
    ('{"choices":1,"choices":[]}', delta()),
    ('{"choices":[],"choices":1}', "choices"),
    (
        '{"choices":[{"delta":{"content":1}}],"choices":[{"delta":{"content":"ok"}}]}',
        delta(content="ok"),
    ),
    ('{"choices":[{"delta":{"content":"a"}}],"choices":null}', delta()),
    ('{"choices":[{"delta":{"content":"a"},"delta":{"reasoning":"r"}}]}', delta(reasoning="r")),
    (
        '{"choices":[{"delta":{"content":1},"delta":null,"message":{"content":"m"}}]}',
        delta(content="m"),
    ),
    (
        in_delta('"tool_calls":[{"index":0},{"index":1}],"tool_calls":[{"index":5,"id":"x"}]'),
        delta(tool_calls=(tool(5, "x"),)),
    ),
    (in_delta('"tool_calls":[{"index":-1}],"tool_calls":null'), delta()),
    (
        '{"choices":[{"delta":{"tool_calls":[{"id":"d"}]},"message":{"tool_calls":[{"id":"m"}]},'
        '"delta":{"tool_calls":[{"id":"d2"}]},"message":{"tool_calls":[{"id":"m2"}]},"delta":null}]}',
        delta(tool_calls=(tool(0, "m2"),)),
    ),
    (
        '{"choices":[{"delta":{"tool_calls":[{"id":"d"}]},"message":{"tool_calls":[{"id":"m"}]},'
        '"delta":{"tool_calls":[{"id":"d2"}]}}]}',
        delta(tool_calls=(tool(0, "d2"),)),
    ),
    (
        in_delta('"tool_calls":[{"function":{"name":"a"},"function":{"arguments":"x"}}]'),
        delta(tool_calls=(tool(0, arguments="x"),)),
    ),
    (
        in_delta('"tool_calls":[{"function":{"name":1},"function":null}]'),
        delta(tool_calls=(tool(0),)),
    ),
    (in_delta('"tool_calls":[{"index":3,"index":null}]'), delta(tool_calls=(tool(0),))),
    (
        in_delta('"tool_calls":[{"id":"a","id":"b","type":"c","type":"d"}]'),
        delta(tool_calls=(tool(0, "b", "d"),)),
    ),
    ('{"choices":[{"index":1,"index":0,"text":"x"}]}', delta(content="x")),
    ('{"choices":[{"index":0,"index":1,"text":"x"}]}', delta()),
    (
        '{"choices":[{"text":"a","finish_reason":"x","finish_reason":"stop","text":"b"}]}',
        delta(content="b", finish_reason="stop"),
    ),
    ('{"error":{"message":"x"},"error":null,"choices":[{"text":"t"}]}', delta(content="t")),
    ('{"usage":{"a":1},"usage":{"b":2}}', delta(usage={"b": 2})),
    ('{"usage":{"a":1},"usage":null}', delta()),
    ('{"usage":1,"usage":{"a":1}}', delta(usage={"a": 1})),
]


@pytest.mark.parametrize(("payload", "expected"), DUPLICATES)
def test_duplicates_last_wins(oai: ModuleType, payload: str, expected: Delta | str) -> None:
    if isinstance(expected, str):
        assert decode(oai, payload) == ChunkError(SHAPE, expected, payload.encode(), T)
    else:
        assert decode(oai, payload) == expected


# ---- endpoint errors (S2) ------------------------------------------------------------------

ENDPOINT_ERRORS: list[tuple[str, str]] = [
    (
        '{"error":{"object":"error","message":"This model\'s maximum context length is 4096 '
        'tokens.","type":"BadRequestError","param":null,"code":400}}',
        "This model's maximum context length is 4096 tokens.",
    ),
    (
        '{"error":{"message":"Rate limit","type":"requests","code":"rate_limit_exceeded"}}',
        "Rate limit",
    ),
    ('{"error":"boom"}', "boom"),
    ('{"error":""}', ""),
    ('{"error":{"code":500}}', ""),
    ('{"error":{}}', ""),
    ('{"error":{"message":5}}', ""),
    ('{"error":{"message":null}}', ""),
    ('{"error":{"message":"a","message":"b"}}', "b"),
    ('{"error":{"message":"a\\nb \\u00e9"}}', "a\nb é"),
    ('{"error":123}', ""),
    ('{"error":true}', ""),
    ('{"error":false}', ""),
    ('{"error":[]}', ""),
    ('{"error":"x","choices":5,"usage":[]}', "x"),
    ('{"choices":[{"delta":{"content":1}}],"error":{"message":"late"}}', "late"),
    ('{"error":{"message":"obj"},"error":"str"}', "str"),
]


@pytest.mark.parametrize(("payload", "message"), ENDPOINT_ERRORS)
def test_endpoint_errors(oai: ModuleType, payload: str, message: str) -> None:
    result = decode(oai, payload)
    assert result == ChunkError(ENDPOINT, message, payload.encode(), T)
    assert result.message == (
        f"endpoint sent an error: {message}" if message else "endpoint sent an error"
    )


# ---- both implementations agree ----------------------------------------------------------

ALL_PAYLOADS: list[bytes] = [
    *(p for p, _ in REAL),
    *(p.encode() for p, _ in CHOICE_FORMS),
    *SYNTAX_ERRORS,
    *(b'"' + bad + b'"' for bad in UTF8_ERRORS),
    *(p for p, _ in PRECEDENCE),
    *(p.encode() for p, _ in SHAPE_ERRORS),
    *(p.encode() for p, _ in DUPLICATES),
    *(p.encode() for p, _ in ENDPOINT_ERRORS),
    *(in_delta(f'"content":"{e}"').encode() for e, _ in ESCAPES),
]


def test_cross_check() -> None:
    c_impl, py_impl = (wire_module("oai", impl).ChunkDecoder() for impl in IMPLS)
    for payload in ALL_PAYLOADS:
        variants = [payload, payload[:-1], payload[1:], payload + b" ", b"[" + payload + b"]"]
        variants += [payload[:i] for i in range(0, len(payload), 7)]
        for data in variants:
            assert c_impl.decode(data, 3) == py_impl.decode(data, 3), data


# ---- random documents (Hypothesis) ----------------------------------------------------------

_KEYS = [
    "choices", "usage", "error", "index", "delta", "message", "text", "finish_reason",
    "content", "reasoning_content", "reasoning", "tool_calls", "id", "type", "function",
    "name", "arguments", "x",
]  # fmt: skip

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, -0.0, 1.5, 1e300]),
    st.text(max_size=12),
    st.sampled_from(["\ud800", "a\udc00", "\ud83d\ude00", "\x00", "\u00e9"]),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(st.tuples(st.sampled_from(_KEYS), inner), max_size=5),
    ),
    max_leaves=20,
)


def _dump(value: Any, ascii_only: bool) -> str:
    # Pairs lists stand for objects, so that duplicate keys occur.
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        members = ",".join(f"{json.dumps(k)}:{_dump(v, ascii_only)}" for k, v in value)
        return "{" + members + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v, ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


@st.composite
def _documents(draw: Any) -> bytes:
    top = draw(st.lists(st.tuples(st.sampled_from(_KEYS), _json), max_size=5))
    text = _dump(top, draw(st.booleans())) if top else "{}"
    data: bytes = text.encode("utf-8", "surrogatepass")
    wrap = draw(st.sampled_from([0, 0, 0, 62, 63, 64]))  # around the depth limit
    data = b"[" * wrap + data + b"]" * wrap
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        edit = draw(st.sampled_from(["insert", "delete", "replace", "truncate"]))
        byte = bytes(
            [
                draw(
                    st.sampled_from(
                        [
                            0,
                            0x22,
                            0x5C,
                            0x7B,
                            0x7D,
                            0x5B,
                            0x5D,
                            0x2C,
                            0x3A,
                            0x80,
                            0xC3,
                            0xED,
                            0xF4,
                            0xFF,
                            0x31,
                            0x20,
                        ]
                    )
                )
            ]
        )
        if edit == "insert":
            data = data[:at] + byte + data[at:]
        elif edit == "delete":
            data = data[:at] + data[at + 1 :]
        elif edit == "replace":
            data = data[:at] + byte + data[at + 1 :]
        else:
            data = data[:at]
    return data


@pytest.mark.hypothesis
@settings(max_examples=300, deadline=None)
@given(_documents())
def test_hypothesis_agreement(data: bytes) -> None:
    c_impl, py_impl = (wire_module("oai", impl).ChunkDecoder() for impl in IMPLS)
    assert c_impl.decode(data, 9) == py_impl.decode(data, 9)


def test_depth_counts_values_a_duplicate_key_drops(oai: ModuleType) -> None:
    # J3 is about the text: the deep first "choices" is dropped by J6, yet
    # the payload still nests 65 deep.
    data = b"[" * 62 + b'{"choices":[[]],"choices":null}' + b"]" * 62
    error = oai.ChunkDecoder().decode(data, 1)
    assert isinstance(error, ChunkError) and error.code == ErrorCode.JSON_DEPTH


# ---- the template: one decoder, many chunks ----------------------------------------------
#
# The compiled decoder remembers the last chunk whose result is one string
# fragment, and decodes a chunk that differs from it only inside that
# string's literal without the full pass (mlpe_oai.c, "The template").  No
# result may depend on the chunks decoded before: the sequences below run
# through ONE decoder, and are compared with a fresh decoder per chunk and
# with the other implementation's single decoder.


class Hole:
    """A chunk with the body of one string literal cut out: ``hole(body)``
    puts the raw bytes ``body`` in its place, ``hole.expect(text)`` is the
    result when they are the JSON string body of ``text``."""

    def __init__(self, payload: bytes | str, literal: bytes, expect: Any) -> None:
        if isinstance(payload, str):
            payload = payload.encode()
        at = payload.index(literal)  # the first occurrence
        self.prefix = payload[: at + 1]
        self.suffix = payload[at + len(literal) - 1 :]
        self.expect = expect

    def __call__(self, body: bytes) -> bytes:
        return self.prefix + body + self.suffix


def _content(text: str) -> Delta:
    return delta(content=text)


def _reasoning(text: str) -> Delta:
    return delta(reasoning=text)


HOLES: dict[str, Hole] = {
    "content": Hole(TYPICAL, b'"a"', _content),
    "role": Hole(VLLM_ROLE, b'""', _content),
    "reasoning": Hole(VLLM_REASONING, b'" so"', _reasoning),
    "reasoning_content": Hole(SGLANG_REASONING, b'"Okay"', _reasoning),
    # reasoning_content's literal; "reasoning" stays " so" in the suffix
    "both_reasoning": Hole(VLLM_BOTH_REASONING, b'" so"', _reasoning),
    "arguments": Hole(TOOL_ARGS, b'"{\\"lo"', lambda t: delta(tool_calls=(tool(0, arguments=t),))),
    "name": Hole(
        in_delta('"tool_calls":[{"index":3,"function":{"name":"n"}}]'),
        b'"n"',
        lambda t: delta(tool_calls=(tool(3, name=t),)),
    ),
    "id": Hole(
        in_delta('"tool_calls":[{"id":"i","function":null}]'),
        b'"i"',
        lambda t: delta(tool_calls=(tool(0, id=t),)),
    ),
    "type": Hole(
        in_delta('"tool_calls":[{"type":"t","index":null}]'),
        b'"t"',
        lambda t: delta(tool_calls=(tool(0, type=t),)),
    ),
    # the selected choice's call, after calls of a choice that is not selected
    "second_choice_arguments": Hole(
        '{"choices":[{"index":1,"delta":{"tool_calls":[{"id":"x"},{"id":"y"}]}},'
        '{"index":0,"delta":{"tool_calls":[{"index":4,"function":{"arguments":"A"}}]}}]}',
        b'"A"',
        lambda t: delta(tool_calls=(tool(4, arguments=t),)),
    ),
    # four strings in the call: never a template, but the same results
    "tool_first": Hole(
        TOOL_FIRST,
        b'""',
        lambda t: delta(tool_calls=(tool(0, "call_abc", "function", "get_weather", t),)),
    ),
    "text": Hole(COMPLETIONS, b'" world"', _content),
    "text_under_null_content": Hole(
        '{"choices":[{"text":"t","delta":{"content":null}}]}', b'"t"', _content
    ),
    "content_over_text": Hole(
        '{"choices":[{"text":"t","delta":{"content":"c"}}]}', b'"c"', _content
    ),
    "short_suffix": Hole('{"choices":[{"text":"t"}]}', b'"t"', _content),
    "message": Hole('{"choices":[{"index":0,"message":{"content":"m"}}]}', b'"m"', _content),
    "pretty": Hole(
        json.dumps(json.loads(TYPICAL), indent="\t", separators=(" ,\r\n", " : ")),
        b'"a"',
        _content,
    ),
    "finish": Hole(
        TYPICAL.replace(b'"finish_reason":null', b'"finish_reason":"stop"'),
        b'"a"',
        lambda t: delta(content=t, finish_reason="stop"),
    ),
    "usage": Hole(
        TYPICAL[:-1] + b',"usage":{"total_tokens":3}}',
        b'"a"',
        lambda t: delta(content=t, usage={"total_tokens": 3}),
    ),
    "duplicate": Hole(in_delta('"content":"a","content":"zz"'), b'"zz"', _content),
    "top_duplicate": Hole(
        '{"choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"content":"b"}}]}',
        b'"b"',
        _content,
    ),
}

# String bodies, as raw bytes: valid ones with the text they stand for ...
GOOD_BODIES: list[tuple[bytes, str]] = [
    (b"b", "b"),
    (b"", ""),
    (b"hello world", "hello world"),
    (b"x" * 15, "x" * 15),
    (b"x" * 16, "x" * 16),
    (b"x" * 17, "x" * 17),
    (b"y" * 300, "y" * 300),
    ("é世😀".encode(), "é世😀"),
    ("\u00e9".encode(), "\u00e9"),
    ("\U0010ffff".encode(), "\U0010ffff"),
    (rb"\n", "\n"),
    (rb"\"", '"'),
    (rb"a\"b", 'a"b'),
    (rb"\\", "\\"),
    (rb"\\\\", "\\\\"),
    (rb"\\\"", '\\"'),
    (rb"\/", "/"),
    (rb"\u00e9\u00E9", "éé"),
    (rb"\ud83d\ude00", "😀"),
    (rb"\ud800", "\ufffd"),
    (rb"\ud83d", "\ufffd"),
    (rb"x\udc00", "x\ufffd"),
    (rb"\u0000", "\x00"),
    (rb"\t" * 20 + "é".encode() * 20, "\t" * 20 + "é" * 20),
    (b"\x7f", "\x7f"),
]

# ... and bytes that are not one string body, with the code of the chunk
# (None: it depends on the chunk; these make valid JSON of other shapes, or
# errors further on).
BAD_BODIES: list[tuple[bytes, ErrorCode | None]] = [
    (b"\xff", UTF8),
    (b"\xc3", UTF8),  # cut short by the closing quote
    (b"\xe2\x82", UTF8),
    (b"\xf0\x9f\x98", UTF8),
    (b"\xed\xa0\x80", UTF8),
    (b"\xc0\x80", UTF8),
    (b"a\x80", UTF8),
    (b"\x00", SYNTAX),
    (b"\x01", SYNTAX),
    (b"\x1f", SYNTAX),
    (b"a\nb", SYNTAX),
    (b"\t", SYNTAX),
    (b"\\", SYNTAX),  # escapes the closing quote
    (b"abc\\", SYNTAX),
    (b"\\\\\\", SYNTAX),
    (b"\\x", SYNTAX),
    (b"\\u12", SYNTAX),
    (b"\\u", SYNTAX),
    (b"\\ud83d\\u12", SYNTAX),
    (b'"', SYNTAX),
    (b'a"b', SYNTAX),
    (b'a" ', SYNTAX),
    (b'a","content":"b', None),
    (b'a","reasoning":"r', None),
    (b'a","finish_reason":"stop', None),
    (b'a","x":"', None),
    (b'a","x":["', None),
]


def _sequence(mod: ModuleType, payloads: list[bytes]) -> list[Delta | ChunkError]:
    decoder = mod.ChunkDecoder()
    return [decoder.decode(p, T) for p in payloads]


def _assert_history_free(mod: ModuleType, payloads: list[bytes]) -> list[Delta | ChunkError]:
    """One decoder gives what a fresh decoder per chunk gives."""
    results = _sequence(mod, payloads)
    for payload, result in zip(payloads, results, strict=True):
        assert result == mod.ChunkDecoder().decode(payload, T), payload
    return results


def _good_strings(hole: Hole) -> list[bytes]:
    return [hole(body) for _ in range(2) for body, _ in [(b"a", "a"), *GOOD_BODIES]]


def _bad_strings(hole: Hole) -> list[bytes]:
    return [x for body, _ in BAD_BODIES for x in (hole(b"ok"), hole(body), hole(body))]


def _shape_switches() -> list[bytes]:
    # Runs of 1 to 3 chunks of one shape, then of another, for every pair.
    names = ["role", "content", "reasoning", "reasoning_content", "arguments", "text", "name"]
    payloads = []
    for a in names:
        for b in names:
            for run in range(1, 4):
                payloads += [HOLES[a](b"%s%d" % (b.encode(), i)) for i in range(run)]
                payloads += [HOLES[b](b"\\u00e9%d" % i) for i in range(run)]
    return payloads


def _edits(hole: Hole) -> list[bytes]:
    # Every one-byte change, deletion and inserted space, each right after a
    # chunk that fits the template, and followed by one.
    base = hole(b"tok")
    payloads = []
    for at in range(len(base)):
        for edited in (
            base[:at] + bytes([base[at] ^ 1]) + base[at + 1 :],
            base[:at] + base[at + 1 :],
            base[:at] + b" " + base[at:],
        ):
            payloads += [hole(b"t%d" % at), edited, hole(b"t\\n%d" % at)]
    return payloads


def _missing_quotes() -> list[bytes]:
    prefix, suffix = HOLES["content"].prefix, HOLES["content"].suffix
    cases = [
        prefix + b"abc" + suffix[1:],  # no closing quote
        prefix[:-1] + b"abc" + suffix,  # no opening quote
        prefix + b"abc" + suffix[1:] + b'"',
        prefix + suffix,
        prefix + suffix[1:],
        prefix[:-1] + suffix,
        prefix + b'"' + suffix,
        prefix,
        suffix,
        prefix + b"a",
        b"a" + suffix,
        suffix + prefix,
        prefix + b"a" + suffix + b" ",
        b" " + prefix + b"a" + suffix,
        prefix + b"a" + suffix + suffix,
        prefix + b"a" + suffix[:-1],
    ]
    return [x for case in cases for x in (HOLES["content"](b"b"), case)]


def _stamped(n: int) -> bytes:
    # Differs outside the string every time (a per-chunk stamp, a string: an
    # integer stamp would be an integer hole of the template).
    return TYPICAL[:-1].replace(b'"a"', b'"s%d"' % n) + b',"stamp":"%d"}' % n


def _misses_then_hits() -> list[bytes]:
    # Long enough for the compiled decoder to stop trying for a while.
    payloads = []
    for i in range(700):
        payloads.append(_stamped(i))
        if i % 97 == 0:
            payloads += [b"{", HOLES["content"](b"%d" % i)]
    return payloads + [HOLES["content"](b"p%d" % i) for i in range(300)]


SEQUENCES: dict[str, Any] = {
    **{f"good_{name}": (lambda h=hole: _good_strings(h)) for name, hole in HOLES.items()},
    **{f"bad_{name}": (lambda h=hole: _bad_strings(h)) for name, hole in HOLES.items()},
    **{
        f"edits_{name}": (lambda h=HOLES[name]: _edits(h))
        for name in ("content", "reasoning_content", "arguments", "short_suffix", "duplicate")
    },
    "shape_switches": _shape_switches,
    "missing_quotes": _missing_quotes,
    "misses_then_hits": _misses_then_hits,
}


@pytest.mark.parametrize("name", sorted(HOLES))
def test_template_good_strings(oai: ModuleType, name: str) -> None:
    hole = HOLES[name]
    results = _assert_history_free(oai, _good_strings(hole))
    texts = [text for _ in range(2) for text in ["a", *(t for _, t in GOOD_BODIES)]]
    assert results == [hole.expect(text) for text in texts]


@pytest.mark.parametrize("name", sorted(HOLES))
def test_template_bad_strings(oai: ModuleType, name: str) -> None:
    hole = HOLES[name]
    results = _assert_history_free(oai, _bad_strings(hole))
    for i, (_, code) in enumerate(BAD_BODIES):
        ok, bad, again = results[3 * i : 3 * i + 3]
        assert ok == hole.expect("ok")
        assert bad == again
        if code is not None:
            assert isinstance(bad, ChunkError) and bad.code == code, BAD_BODIES[i]


def test_template_switching_shapes(oai: ModuleType) -> None:
    payloads = _shape_switches()
    results = _assert_history_free(oai, payloads)
    expected = []
    for payload in payloads:
        hole = next(h for h in HOLES.values() if payload.startswith(h.prefix))
        body = payload[len(hole.prefix) : len(payload) - len(hole.suffix)]
        expected.append(hole.expect(json.loads(b'"' + body + b'"')))
    assert results == expected


@pytest.mark.parametrize("name", ["content", "reasoning_content", "arguments", "short_suffix"])
def test_template_prefix_and_suffix_edits(oai: ModuleType, name: str) -> None:
    _assert_history_free(oai, _edits(HOLES[name]))


def test_template_missing_quotes(oai: ModuleType) -> None:
    results = _assert_history_free(oai, _missing_quotes())
    assert results[0] == delta(content="b")
    assert results[1] == ChunkError(SYNTAX, "", _missing_quotes()[1], T)


def test_template_duplicate_keys(oai: ModuleType) -> None:
    content = HOLES["content"]

    def dup(first: str, second: str) -> bytes:
        return in_delta(f'"content":{first},"content":{second}').encode()

    cases: list[tuple[bytes, Delta | ErrorCode]] = [
        (content(b"a"), delta(content="a")),
        # A duplicate "content" inside the hole or added to the suffix wins.
        (content(b'b","content":"c'), delta(content="c")),
        (content(b"b").replace(b'"}', b'","content":"c"}', 1), delta(content="c")),
        (content(b"b").replace(b'"}', b'","content":null}', 1), delta()),
        (content(b"b").replace(b'"}', b'","content":7}', 1), SHAPE),
        (content(b"d"), delta(content="d")),
        # A template taken from a chunk with a duplicate: its hole is the winner.
        (dup('"a"', '"b"'), delta(content="b")),
        (dup('"a"', '"c"'), delta(content="c")),
        (dup('"x"', '"c"'), delta(content="c")),
        (dup('"x"', '"\\u00e9"'), delta(content="é")),
        (dup('"x"', "null"), delta()),
        (dup('"x"', "1"), SHAPE),
        (dup('"y"', '"z"'), delta(content="z")),
        (dup("null", '"z"'), delta(content="z")),
        (dup("1", '"z"'), delta(content="z")),
        (dup("1", '"w"'), delta(content="w")),
        (dup('"a"', "null"), delta()),
        (dup('"v"', "null"), delta()),
        (dup('"a"', "1"), SHAPE),
        (dup('"q"', "1"), SHAPE),
        (HOLES["top_duplicate"](b"k"), delta(content="k")),
        (HOLES["top_duplicate"](b"l"), delta(content="l")),
        (HOLES["top_duplicate"](b"l").replace(b'"a"', b'"m"'), delta(content="l")),
        (HOLES["top_duplicate"](b"l").replace(b'"a"', b"1"), delta(content="l")),
        (HOLES["top_duplicate"](b"l").replace(b'{"content":"l"}', b"1"), SHAPE),
    ]
    results = _assert_history_free(oai, [p for p, _ in cases])
    for (payload, expected), result in zip(cases, results, strict=True):
        if isinstance(expected, Delta):
            assert result == expected, payload
        else:
            assert isinstance(result, ChunkError) and result.code == expected, payload


def test_template_finish_reason_and_usage(oai: ModuleType) -> None:
    content, finish, usage = HOLES["content"], HOLES["finish"], HOLES["usage"]
    real = dict(REAL)
    cases: list[tuple[bytes, Delta]] = [
        (content(b"a"), delta(content="a")),
        (finish(b"b"), delta(content="b", finish_reason="stop")),
        (content(b"c"), delta(content="c")),
        (content(b"d"), delta(content="d")),
        (finish(b"e"), delta(content="e", finish_reason="stop")),
        (finish(b"f"), delta(content="f", finish_reason="stop")),
        (content(b"g"), delta(content="g")),
        (usage(b"u"), delta(content="u", usage={"total_tokens": 3})),
        (usage(b"v"), delta(content="v", usage={"total_tokens": 3})),
        (content(b"h"), delta(content="h")),
        (FINISH, real[FINISH]),
        (USAGE_ONLY, real[USAGE_ONLY]),
        (SGLANG_FINAL, real[SGLANG_FINAL]),
        (content(b"i"), delta(content="i")),
    ]
    assert _assert_history_free(oai, [p for p, _ in cases]) == [e for _, e in cases]


def test_template_many_misses_then_hits(oai: ModuleType) -> None:
    payloads = _misses_then_hits()
    results = _assert_history_free(oai, payloads)
    assert results[0] == delta(content="s0")
    assert results[-1] == delta(content="p299")


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_template_sequences_agree(name: str) -> None:
    payloads = SEQUENCES[name]()
    c_impl, py_impl = (wire_module("oai", impl) for impl in IMPLS)
    for payload, c_result, py_result in zip(
        payloads, _sequence(c_impl, payloads), _sequence(py_impl, payloads), strict=True
    ):
        assert c_result == py_result, payload


_HOLE_BYTES = [0x00, 0x01, 0x0A, 0x22, 0x5C, 0x75, 0x80, 0xBF, 0xC3, 0xE2, 0xED, 0xF0, 0xFF]
_EDIT_BYTES = [0x00, 0x20, 0x22, 0x2C, 0x30, 0x3A, 0x5B, 0x5C, 0x5D, 0x7B, 0x7D, 0x80, 0xC3, 0xFF]
_TEXTS = st.one_of(
    st.text(max_size=24),
    st.sampled_from(
        ["", "a", " ", '"', "\\", "é", "世", "😀", "\ud800", "\udc00x", "\x00", "\x7f"]
    ),
)


@st.composite
def _chunk_sequences(draw: Any) -> list[bytes]:
    """Chunks of one to three shapes with random strings, some corrupted
    (inside the string's literal or anywhere)."""
    holes = draw(st.lists(st.sampled_from(sorted(HOLES)), min_size=1, max_size=3))
    sequence = []
    for _ in range(draw(st.integers(1, 14))):
        hole = HOLES[draw(st.sampled_from(holes))]
        text = draw(_TEXTS)
        body = json.dumps(text, ensure_ascii=draw(st.booleans()))[1:-1].encode(
            "utf-8", "surrogatepass"
        )
        data = hole(body)
        for _ in range(draw(st.sampled_from([0, 0, 0, 0, 1, 1, 2]))):
            inside = draw(st.booleans())
            at = draw(
                st.integers(len(hole.prefix) - 1, len(hole.prefix) + len(body))
                if inside
                else st.integers(0, len(data))
            )
            at = min(at, len(data))
            byte = bytes([draw(st.sampled_from(_HOLE_BYTES if inside else _EDIT_BYTES))])
            edit = draw(st.sampled_from(["insert", "delete", "replace", "truncate"]))
            if edit == "insert":
                data = data[:at] + byte + data[at:]
            elif edit == "delete":
                data = data[:at] + data[at + 1 :]
            elif edit == "replace":
                data = data[:at] + byte + data[at + 1 :]
            elif not inside:
                data = data[:at]
        sequence.append(data)
    return sequence


@pytest.mark.hypothesis
@settings(max_examples=300, deadline=None)
@given(_chunk_sequences())
def test_hypothesis_template_sequences(payloads: list[bytes]) -> None:
    c_impl, py_impl = (wire_module("oai", impl) for impl in IMPLS)
    c_results = _sequence(c_impl, payloads)
    assert c_results == _sequence(py_impl, payloads)
    assert c_results == [c_impl.ChunkDecoder().decode(p, T) for p in payloads]


# ---- the template's integer holes --------------------------------------------------------
#
# Integer values of ignored top-level members (a per-chunk "created", the
# simulator's mlpe_recv_ns / mlpe_send_ns) may differ from the template's:
# the compiled decoder then still takes its fast path.  Integers anywhere
# else, other numbers and other tokens must not.


def _chunk(text: bytes = b"a", before: bytes = b"", after: bytes = b"") -> bytes:
    """A content chunk with raw top-level members around "choices"."""
    choices = b'"choices":[{"index":0,"delta":{"content":"' + text + b'"},"finish_reason":null}]'
    return b"{" + before + choices + after + b"}"


def _created(value: bytes, text: bytes = b"a") -> bytes:
    return TYPICAL.replace(b"1700000000", value).replace(b'"a"', b'"' + text + b'"')


def _sim(text: str, recv: int, send: int) -> bytes:
    return chat_chunk(content=text, extra={"mlpe_recv_ns": recv, "mlpe_send_ns": send})


_INTS = [
    b"0",
    b"-0",
    b"7",
    b"-7",
    b"10",
    b"1700000000",
    b"-1700000001",
    b"9" * 30,
    b"-" + b"1" * 25,
]
_NOT_INTS = [b"1e5", b"1E5", b"01", b"00", b"-01", b"-", b"--1", b"+1", b"1.", b"1.0", b"-0.5"]
_NOT_INTS += [b"true", b"null", b'"1"', b"[1]", b"{}", b"", b"1 2", b"0x1", b"1e", b"1a"]


def _int_sequences() -> dict[str, list[bytes]]:
    ints, tokens = _INTS, _INTS + _NOT_INTS
    return {
        "created": [_created(v, b"t%d" % i) for i, v in enumerate(ints * 2)],
        "created_tokens": [
            x
            for i, v in enumerate(tokens)
            for x in (_created(b"12", b"%d" % i), _created(v), _created(b"3"))
        ],
        "sim_stamps": [
            _sim(f"tok{i}", 1234567890123 + (i // 3), 1234567890123 + i * 1000) for i in range(40)
        ]
        + [_sim("x", r, s) for r, s in [(0, 0), (5, -5), (10**20, 1), (1, 10**20), (0, 0)]],
        "lengths": [
            _chunk(b"%d" % i, b'"a":%d,' % v, b',"b":%d,"c":%d' % (-v, v * 7))
            for i, v in enumerate([0, 1, 12, 123, -1, -12, 10**15, 0, 5, 10**40, 3])
        ],
        "choices_index": [
            TYPICAL,
            TYPICAL.replace(b'"index":0', b'"index":1'),
            TYPICAL.replace(b'"index":0', b'"index":0'),
            TYPICAL.replace(b'"index":0', b'"index":-0'),
            TYPICAL.replace(b'"index":0', b'"index":-1'),
            TYPICAL.replace(b'"index":0', b'"index":10'),
            TYPICAL,
        ],
        "float": [
            _chunk(b"f%d" % i, b'"t":%s,' % v)
            for i, v in enumerate([b"1.5", b"2.5", b"1.25", b"3e2", b"1.5"])
        ]
        + [_chunk(b"g", b'"t":1.5,'), _chunk(b"g", b'"t":2,'), _chunk(b"g", b'"t":1.5,')],
        "top_string": [_chunk(b"s", b'"model":"%d",' % v) for v in (1, 2, 12, 1, 3)]
        + [_chunk(b"s", b'"model":%s,' % v) for v in (b"1", b'"1"', b"2", b'"12"')],
        "whitespace": [
            _chunk(b"w%d" % i, b'"a":%d ,"b" : %d\t\n,' % (v, v), b', "c" :%d\r ' % v)
            for i, v in enumerate([1, 22, -333, 0, 4444])
        ]
        + [_chunk(b"w", b'"a":1 ,"b" : 2\t\n,', b', "c" :%s\r ' % v) for v in tokens],
        "nested": [_chunk(b"n", b'"x":{"a":%d},"y":[%d],' % (v, v)) for v in (1, 2, 33, -4, 0)],
        "reserved_keys": [
            x
            for v in (b"0", b"1", b"-2", b"33", b"0")
            for x in (
                _chunk(b"r", b'"usage":%s,' % v),
                _chunk(b"r"),
                _chunk(b"r", b'"error":%s,' % v),
                _chunk(b"r"),
                _chunk(b"r", b'"x":1,', b',"choices":%s' % v),
                _chunk(b"r", b'"x":1,'),
                _chunk(b"r", b'"usage":%s,"x":%s,' % (v, v), b',"usage":null'),
                _chunk(b"r", b'"x":%s,"error":%s,' % (v, v), b',"error":null'),
                _chunk(b"r", b'"choices":%s,"x":%s,' % (v, v)),
                _chunk(b"r", b'"\\u0075sage":%s,' % v),
                _chunk(b"r", b'"\\u0065rror":%s,' % v),
            )
        ],
        "many_ints": [
            _chunk(
                b"m%d" % i,
                b"".join(b'"k%d":%d,' % (k, i * k) for k in range(4)),
                b"".join(b',"j%d":%d' % (k, i + k) for k in range(4)),
            )
            for i in range(12)
        ],
        "duplicate_ignored": [
            _chunk(b"d", b'"a":%d,' % v, b',"a":%d' % (v + 1)) for v in (1, 2, 30, -4)
        ],
        "tool_call": [
            b'{"created":%d,"choices":[{"delta":{"tool_calls":[{"index":2,"function":{"arguments":"%d"}}]}}],"s":%d}'
            % (v, v, -v)
            for v in (1, 22, 333, 0, 5)
        ],
    }


INT_SEQUENCES = _int_sequences()


@pytest.mark.parametrize("name", sorted(INT_SEQUENCES))
def test_template_int_sequences_agree(name: str) -> None:
    payloads = INT_SEQUENCES[name]
    c_impl, py_impl = (wire_module("oai", impl) for impl in IMPLS)
    for payload, c_result, py_result in zip(
        payloads, _sequence(c_impl, payloads), _sequence(py_impl, payloads), strict=True
    ):
        assert c_result == py_result, payload


@pytest.mark.parametrize("name", sorted(INT_SEQUENCES))
def test_template_int_sequences_history_free(oai: ModuleType, name: str) -> None:
    _assert_history_free(oai, INT_SEQUENCES[name])


def test_template_int_holes_results(oai: ModuleType) -> None:
    cases: list[tuple[bytes, Any]] = [
        (_sim("a", 1, 2), delta(content="a")),
        (_sim("b", 1, 3000), delta(content="b")),
        (_sim("c", 22, -4), delta(content="c")),
        (_created(b"-0", b"d"), delta(content="d")),
        (_created(b"1e5", b"e"), delta(content="e")),
        (_created(b"01"), (ErrorCode.JSON_SYNTAX, "")),
        (_created(b"-"), (ErrorCode.JSON_SYNTAX, "")),
        (_created(b"true", b"f"), delta(content="f")),
        (_created(b"5", b"g"), delta(content="g")),
        (TYPICAL.replace(b'"index":0', b'"index":1'), delta()),
        (
            TYPICAL.replace(b'"index":0', b'"index":1.0'),
            (ErrorCode.CHUNK_SHAPE, "choices[0].index"),
        ),
        (_chunk(b"h", b'"usage":1,'), (ErrorCode.CHUNK_SHAPE, "usage")),
        (_chunk(b"h", b'"usage":2,'), (ErrorCode.CHUNK_SHAPE, "usage")),
        (_chunk(b"h", b'"usage":2,"x":1,', b',"usage":null'), delta(content="h")),
        (_chunk(b"i", b'"usage":3,"x":2,', b',"usage":null'), delta(content="i")),
        (
            _chunk(b"i", b'"usage":3,"x":2,', b',"usage":4'),
            (ErrorCode.CHUNK_SHAPE, "usage"),
        ),
        (_chunk(b"j", b'"x":1,', b',"choices":2'), (ErrorCode.CHUNK_SHAPE, "choices")),
        (_chunk(b"k", b'"x":1,', b',"error":0'), (ErrorCode.ENDPOINT_ERROR, "")),
    ]
    expected = [e if isinstance(e, Delta) else ChunkError(e[0], e[1], p, T) for p, e in cases]
    assert _assert_history_free(oai, [p for p, _ in cases]) == expected


_RAW_VALUES = st.one_of(
    st.integers(-(10**25), 10**25).map(lambda v: str(v).encode()),
    st.sampled_from(_INTS + _NOT_INTS),
)


@st.composite
def _int_chunk_sequences(draw: Any) -> list[bytes]:
    """Chunks with top-level members around "choices" whose values vary
    between chunks: mostly integers, sometimes other tokens, names among
    the ones the shape rules read too; now and then another layout."""
    names = st.sampled_from(["created", "mlpe_send_ns", "x", "usage", "error", "choices", "id"])

    def layout() -> tuple[list[bytes], list[bytes]]:
        pick = st.lists(names.map(str.encode), max_size=3)
        return draw(pick), draw(pick)

    before, after = layout()
    sequence = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.integers(0, 9)) == 0:
            before, after = layout()
        space = st.sampled_from([b"", b"", b" ", b"\n "])
        head = b"".join(b'"%s":%s%s,' % (k, draw(_RAW_VALUES), draw(space)) for k in before)
        tail = b"".join(b',"%s":%s%s' % (k, draw(_RAW_VALUES), draw(space)) for k in after)
        text = json.dumps(draw(_TEXTS))[1:-1].encode()
        sequence.append(_chunk(text, head, tail))
    return sequence


@pytest.mark.hypothesis
@settings(max_examples=300, deadline=None)
@given(_int_chunk_sequences())
def test_hypothesis_template_int_sequences(payloads: list[bytes]) -> None:
    c_impl, py_impl = (wire_module("oai", impl) for impl in IMPLS)
    c_results = _sequence(c_impl, payloads)
    assert c_results == _sequence(py_impl, payloads)
    assert c_results == [c_impl.ChunkDecoder().decode(p, T) for p in payloads]


# ---- the Python twin's template (white box) ------------------------------------------------
#
# The twin keeps a template for a content or reasoning fragment (never a tool
# call's), found by searching the payload for the fragment's literal and
# proved by two probe decodes; the sequences above then run through its fast
# path.  These tests check that it is taken where it should be, and refused
# where the literal found is not the fragment's.

_TWIN_HOLES = ["content", "role", "reasoning", "reasoning_content", "both_reasoning", "text"]


@pytest.mark.parametrize("name", _TWIN_HOLES)
def test_twin_template_is_taken(name: str) -> None:
    twin = wire_module("oai", "py")
    hole = HOLES[name]
    decoder = twin.ChunkDecoder()
    decoder.decode(hole(b"a"), T)
    assert decoder._template[:2] == (hole.prefix, hole.suffix)
    payloads = [hole(body) for body in (b"b", b"\\u00e9\\\\", b"\\ud800x", b'x"', b"\xff", b"\\")]
    payloads += [hole(b"c")]
    results = _assert_history_free(twin, payloads)
    assert results[0] == hole.expect("b") and results[-1] == hole.expect("c")
    assert results[1] == hole.expect("é\\") and results[2] == hole.expect("\ufffdx")


@pytest.mark.parametrize(
    "payload",
    [
        b'{"choices":[{"delta":{"content":"a"}}],"model":"a"}',  # found: "model"'s literal
        b'{"choices":[{"delta":{"content":"a","content":"b"}}],"x":"b"}',
        b'{"choices":[{"delta":{"content":"\\u00e9"}}]}',  # spelt otherwise
        b'{"choices":[{"delta":{"content":"a","reasoning":"b"}}]}',  # two fragments
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}',
    ],
)
def test_twin_template_refused(payload: bytes) -> None:
    twin = wire_module("oai", "py")
    decoder = twin.ChunkDecoder()
    decoder.decode(payload, T)
    assert decoder._template is None
    edits = [payload.replace(b'"a"', b'"z"'), payload.replace(b'"b"', b'"z"'), payload]
    _assert_history_free(twin, edits)


def test_twin_template_winner_of_a_duplicate() -> None:
    twin = wire_module("oai", "py")
    hole = Hole('{"choices":[{"delta":{"content":"b","content":"a"}}]}', b'"a"', _content)
    decoder = twin.ChunkDecoder()
    assert decoder.decode(hole(b"a"), T) == delta(content="a")
    assert decoder._template[:2] == (hole.prefix, hole.suffix)
    assert _assert_history_free(twin, [hole(b"a"), hole(b"q")])[1] == delta(content="q")


def test_twin_template_backs_off() -> None:
    """Chunks that differ outside the string: arming is tried on the first
    misses, then at powers of two only; results never change."""
    twin = wire_module("oai", "py")
    payloads = [_stamped(n) for n in range(40)]
    decoder = twin.ChunkDecoder()
    probes = 0
    original = twin._decode_full

    def counting(raw: bytes, t_ns: int) -> Delta | ChunkError:
        nonlocal probes
        probes += 1
        return original(raw, t_ns)

    twin._decode_full = counting
    try:
        results = [decoder.decode(p, T) for p in payloads]
    finally:
        twin._decode_full = original
    assert results == [twin.ChunkDecoder().decode(p, T) for p in payloads]
    # 40 full decodes, plus two probes per arming: misses 1-8, 16 and 32
    assert probes == 40 + 2 * 10
