"""Pure-Python twin of the OpenAI chunk decoder (``csrc/mlpe_oai.c``).

It implements rules J1-J6 and S1-S10 of ``csrc/mlpe_oai.h`` and gives the
same results as the compiled decoder for every input (the tests run both on
the same payloads, and a Hypothesis test compares them on random ones).

Theory of operation
-------------------
The fast path is the standard library: strict UTF-8 decoding (which refuses
overlong forms, surrogates and code points above U+10FFFF exactly as J1 does)
and :mod:`json` (which, with ``NaN``/``Infinity`` refused, accepts exactly
RFC 8259 text and keeps the last of duplicate keys, J6).  What remains is
the depth limit (J3), replacing lone surrogate escapes by U+FFFD (J5), and
the shape rules walked over the dicts in the fixed S9 order.

When the fast path fails, the code of the failure must be the *first*
problem in text order (J4), which neither the codec nor :mod:`json` can tell:
a byte-level validator, :func:`_first_problem`, mirrors the C scanner and
decides between ``JSON_SYNTAX``, ``JSON_UTF8`` and ``JSON_DEPTH``.  The only
valid JSON the fast path refuses has an integer longer than :func:`int`
accepts (``sys.get_int_max_str_digits``); it is decoded again with such
integers as +-2**63.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ..errors import ErrorCode
from .events import ChunkError, Delta, ToolCallDelta

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ("ChunkDecoder", "decode_usage")

#: MLPE_JSON_MAX_DEPTH: objects and arrays may nest this deep (J3).
MAX_DEPTH = 64
# Tool-call indices (and the positions standing in for them) are int32 (S6).
_INDEX_LIMIT = 2**31

_SYNTAX = int(ErrorCode.JSON_SYNTAX)
_UTF8 = int(ErrorCode.JSON_UTF8)
_DEPTH = int(ErrorCode.JSON_DEPTH)
_SHAPE = int(ErrorCode.CHUNK_SHAPE)
_ENDPOINT = int(ErrorCode.ENDPOINT_ERROR)

_NO_TOOLS: tuple[ToolCallDelta, ...] = ()


# ---- fast path ------------------------------------------------------------


class _RefusedConstant(ValueError):
    """NaN, Infinity and -Infinity are not RFC 8259 JSON (J2)."""


def _refuse_constant(name: str) -> Any:
    raise _RefusedConstant(name)


# What an integer literal too long for int() stands for.  It is still an
# integer (S8) and can be no index; its exact value would cost time quadratic
# in its length, which is why CPython limits int() (sys.get_int_max_str_digits).
_HUGE = 2**63


def _wide_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -_HUGE if text.startswith("-") else _HUGE


_decode_json = json.JSONDecoder(parse_constant=_refuse_constant).decode
_decode_json_wide = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=_wide_int).decode

_SURROGATE = re.compile("[\ud800-\udfff]")


def _fix(text: str) -> str:
    """J5: a lone surrogate escape decodes to U+FFFD (the codec never yields
    surrogates, so any here came from a \\u escape that was not a pair)."""
    return _SURROGATE.sub("\ufffd", text)


def _fix_tree(value: Any) -> Any:
    if isinstance(value, str):
        return _fix(value)
    if isinstance(value, dict):
        return {_fix(k): _fix_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_tree(v) for v in value]
    return value


def decode_usage(raw: bytes) -> dict[str, Any]:
    """The ``usage`` dict from the raw JSON text of the object (S7).

    Both implementations make ``Delta.usage`` this way: :mod:`json` semantics
    (duplicate keys last-wins), integers too long for :func:`int` as +-2**63,
    and lone surrogate escapes as U+FFFD (J5).  ``raw`` has been validated.
    """
    text = raw.decode("utf-8")
    try:
        usage = _decode_json(text)
    except ValueError:
        usage = _decode_json_wide(text)
    if "\\u" in text:
        usage = _fix_tree(usage)
    assert isinstance(usage, dict)
    return usage


# ---- slow path: the first problem in text order (J1-J4) --------------------

_WS = b" \t\n\r"
# A run of string content that needs no attention: printable ASCII other
# than '"' and '\\', and well-formed UTF-8 sequences (RFC 3629 section 4).
_STRING_RUN = re.compile(
    rb"(?:[\x20\x21\x23-\x5b\x5d-\x7f]+"
    rb"|[\xc2-\xdf][\x80-\xbf]"
    rb"|\xe0[\xa0-\xbf][\x80-\xbf]"
    rb"|[\xe1-\xec\xee\xef][\x80-\xbf]{2}"
    rb"|\xed[\x80-\x9f][\x80-\xbf]"
    rb"|\xf0[\x90-\xbf][\x80-\xbf]{2}"
    rb"|[\xf1-\xf3][\x80-\xbf]{3}"
    rb"|\xf4[\x80-\x8f][\x80-\xbf]{2})+"
)
_ESCAPE = re.compile(rb'\\(?:["\\/bfnrt]|u[0-9A-Fa-f]{4})')
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = {0x6E: b"null", 0x74: b"true", 0x66: b"false"}


def _string_end(b: bytes, i: int) -> int:
    """Past the string whose opening quote is at i, or minus an error code."""
    i += 1
    while True:
        run = _STRING_RUN.match(b, i)
        if run is not None:
            i = run.end()
        c = b[i]
        if c == 0x22:
            return i + 1
        if c == 0x5C:
            escape = _ESCAPE.match(b, i)
            if escape is None:
                return -_SYNTAX
            i = escape.end()
        elif c >= 0x80:  # the run stopped on a sequence that is not UTF-8
            return -_UTF8
        else:  # a control character, or the end of the payload
            return -_SYNTAX


def _ws(b: bytes, i: int) -> int:
    """Past the whitespace at i (RFC 8259 section 2); the sentinel is none."""
    while b[i] in _WS:
        i += 1
    return i


def _first_problem(raw: bytes) -> int:
    """The code of the first problem in ``raw`` in text order, or 0 when it is
    RFC 8259 JSON nesting at most MAX_DEPTH deep.

    Mirrors the C scanner: a NUL sentinel stands for the end of the payload
    (no NUL is valid JSON), an invalid UTF-8 sequence counts from its first
    byte, and the depth is tested when a container opens.
    """
    b = raw + b"\x00"
    ws = _ws
    objects: list[bool] = []  # the open containers, True for an object
    i = ws(b, 0)
    state = 0  # 0: a value, 1: after a value, 2: a member name
    while True:
        if state == 0:
            c = b[i]
            if c in (0x7B, 0x5B):  # '{' '['
                if len(objects) >= MAX_DEPTH:
                    return _DEPTH
                i = ws(b, i + 1)
                if b[i] == c + 2:  # '}' ']'
                    i += 1
                    state = 1
                else:
                    objects.append(c == 0x7B)
                    state = 2 if c == 0x7B else 0
                continue
            if c == 0x22:
                i = _string_end(b, i)
                if i < 0:
                    return -i
            elif c in _LITERALS:
                word = _LITERALS[c]
                if not b.startswith(word, i):
                    return _SYNTAX
                i += len(word)
            else:
                number = _NUMBER.match(b, i)
                if number is None:
                    return _SYNTAX
                i = number.end()
            state = 1
        elif state == 1:
            i = ws(b, i)
            if not objects:
                return 0 if i == len(raw) else _SYNTAX
            c = b[i]
            if c == 0x2C:  # ','
                i = ws(b, i + 1)
                state = 2 if objects[-1] else 0
            elif c == (0x7D if objects[-1] else 0x5D):
                i += 1
                objects.pop()
            else:
                return _SYNTAX
        else:
            if b[i] != 0x22:
                return _SYNTAX
            i = _string_end(b, i)
            if i < 0:
                return -i
            i = ws(b, i)
            if b[i] != 0x3A:  # ':'
                return _SYNTAX
            i = ws(b, i + 1)
            state = 0


# ---- shape (S1-S10) ---------------------------------------------------------


def _is_str(value: Any) -> bool:
    return value is None or type(value) is str


def _check_container(c: dict[str, Any]) -> str | None:
    """S5/S6 checks of a delta or message: the failing path below it, or None."""
    for key in ("content", "reasoning_content", "reasoning"):
        if not _is_str(c.get(key)):
            return key
    calls = c.get("tool_calls")
    if calls is None:
        return None
    if type(calls) is not list:
        return "tool_calls"
    for j, call in enumerate(calls):
        if type(call) is not dict:
            return f"tool_calls[{j}]"
        index = call.get("index")
        if index is None:
            if j >= _INDEX_LIMIT:  # the position stands in for the index
                return f"tool_calls[{j}].index"
        elif type(index) is not int or not 0 <= index < _INDEX_LIMIT:
            return f"tool_calls[{j}].index"
        for key in ("id", "type"):
            if not _is_str(call.get(key)):
                return f"tool_calls[{j}].{key}"
        function = call.get("function")
        if function is None:
            continue
        if type(function) is not dict:
            return f"tool_calls[{j}].function"
        for key in ("name", "arguments"):
            if not _is_str(function.get(key)):
                return f"tool_calls[{j}].function.{key}"
    return None


def _check_choice(choice: dict[str, Any]) -> str | None:
    """S3/S4 checks of one choice, depth first: the failing path, or None."""
    index = choice.get("index")
    if index is not None and type(index) is not int:
        return "index"
    for key in ("delta", "message"):
        c = choice.get(key)
        if c is None:
            continue
        if type(c) is not dict:
            return key
        below = _check_container(c)
        if below is not None:
            return f"{key}.{below}"
    for key in ("text", "finish_reason"):
        if not _is_str(choice.get(key)):
            return key
    return None


def _tool_call(call: dict[str, Any], position: int, fix: bool) -> ToolCallDelta:
    index = call.get("index")
    function = call.get("function")
    texts: list[str | None] = [call.get("id"), call.get("type"), None, None]
    if function is not None:
        texts[2] = function.get("name")
        texts[3] = function.get("arguments")
    if fix:
        texts = [None if t is None else _fix(t) for t in texts]
    return ToolCallDelta(
        index=position if index is None else index,
        id=texts[0],
        type=texts[1],
        name=texts[2],
        arguments=texts[3],
    )


def _shape(doc: Any, fix: bool, raw: bytes, t_ns: int) -> Delta | ChunkError:
    """S1-S10 over a decoded payload; ``fix`` when it may hold lone surrogates."""
    if type(doc) is not dict:
        return ChunkError(_SHAPE, "$", raw, t_ns)
    error = doc.get("error")
    if error is not None:
        message = ""
        if type(error) is str:
            message = error
        elif type(error) is dict and type(error.get("message")) is str:
            message = error["message"]
        return ChunkError(_ENDPOINT, _fix(message) if fix else message, raw, t_ns)
    choices = doc.get("choices")
    selected: dict[str, Any] | None = None
    if choices is not None:
        if type(choices) is not list:
            return ChunkError(_SHAPE, "choices", raw, t_ns)
        for i, choice in enumerate(choices):
            if type(choice) is not dict:
                return ChunkError(_SHAPE, f"choices[{i}]", raw, t_ns)
            below = _check_choice(choice)
            if below is not None:
                return ChunkError(_SHAPE, f"choices[{i}].{below}", raw, t_ns)
            if selected is None and choice.get("index") in (None, 0):
                selected = choice
    usage = doc.get("usage")
    if usage is not None and type(usage) is not dict:
        return ChunkError(_SHAPE, "usage", raw, t_ns)
    if fix and usage is not None:
        usage = _fix_tree(usage)

    content: str | None = None
    reasoning: str | None = None
    finish_reason: str | None = None
    tools = _NO_TOOLS
    if selected is not None:
        content = selected.get("text")
        finish_reason = selected.get("finish_reason")
        c = selected.get("delta")
        if c is None:
            c = selected.get("message")
        if c is not None:
            if c.get("content") is not None:
                content = c["content"]
            reasoning = c.get("reasoning_content")
            if reasoning is None:
                reasoning = c.get("reasoning")
            calls = c.get("tool_calls")
            if calls:
                tools = tuple(_tool_call(call, j, fix) for j, call in enumerate(calls))
        if fix:
            content = None if content is None else _fix(content)
            reasoning = None if reasoning is None else _fix(reasoning)
            finish_reason = None if finish_reason is None else _fix(finish_reason)
    return Delta(
        content=content,
        reasoning=reasoning,
        tool_calls=tools,
        finish_reason=finish_reason,
        usage=usage,
        t_ns=t_ns,
    )


class ChunkDecoder:
    """Decodes the data of one OpenAI SSE event, or one completion body.

    Stateless; one object can serve any number of payloads.
    """

    __slots__ = ()

    def decode(self, data: Buffer, t_ns: int) -> Delta | ChunkError:
        """The fragments of one chunk, or why there are none.

        Args:
            data: the event's data (never ``[DONE]``: test for it first), or
                a whole non-streaming response body; any bytes-like object.
            t_ns: the arrival stamp to put on the result.

        Returns:
            A :class:`Delta`, or a :class:`ChunkError` whose ``code`` says
            why the payload gave none: ``JSON_SYNTAX``, ``JSON_UTF8`` or
            ``JSON_DEPTH`` (the first problem in text order), ``CHUNK_SHAPE``
            (``detail`` is the path of the first mistyped member in the S9
            order) or ``ENDPOINT_ERROR`` (``detail`` is the endpoint's
            message).  Neither is an exception: the events around a bad one
            still decode.
        """
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
            doc = _decode_json(text)
        except (ValueError, RecursionError):
            code = _first_problem(raw)
            if code:
                return ChunkError(code, "", raw, t_ns)
            text = raw.decode("utf-8")
            doc = _decode_json_wide(text)
        # Counting brackets (some may sit in strings) bounds the depth cheaply.
        # Past the bound the text decides, not the decoded document: a
        # duplicate key can drop a deep value from the document (J6) that
        # the text still nests too deeply (J3).
        if text.count("{") + text.count("[") > MAX_DEPTH:
            code = _first_problem(raw)
            if code:
                return ChunkError(code, "", raw, t_ns)
        return _shape(doc, "\\u" in text, raw, t_ns)
