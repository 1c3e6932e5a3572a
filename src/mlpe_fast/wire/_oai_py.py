"""Pure-Python twin of the OpenAI chunk decoder (``csrc/mlpe_oai.c``).

It implements rules J1-J6 and S1-S10 of ``csrc/mlpe_oai.h`` -- and G1-G7 in
the SGLang dialect -- and gives the same results as the compiled decoder for
every input (the tests run both on the same payloads, and a Hypothesis test
compares them on random ones).

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

In front of all this sits a cache, as in the C: the template ("the
template" below), which decodes a chunk that differs from the last suitable
one only inside its one string fragment without the full path.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import ErrorCode
from .events import ChunkError, Delta, ToolCallDelta

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ("DIALECTS", "ChunkDecoder", "check_dialect", "decode_usage")

#: The chunk schemas (``mlpe_dialect`` of ``csrc/mlpe_oai.h``), by name:
#: OpenAI's chat and completions chunks, or SGLang's native ``/generate``.
DIALECTS = ("openai", "sglang")

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

_decode_plain = msgspec.json.Decoder(dict[str, Any]).decode

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
    if b"\\" not in raw:
        # Without escapes msgspec's decoder gives what json's does (the last
        # of duplicate keys, integers and floats exactly) at a ninth of the
        # cost (0.13 against 1.2 µs a usage object, once per response);
        # what it refuses (integers past its range, numbers past a double)
        # takes json's path below, which decides them as before.
        try:
            fast: dict[str, Any] = _decode_plain(raw)
        except msgspec.DecodeError:
            pass
        else:
            return fast
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


def _object_or_error(doc: Any, raw: bytes, t_ns: int, fix: bool) -> ChunkError | None:
    """S1 and S2 (G1 and G2 for SGLang): a top level that is no object is a
    shape error at ``$``; a non-null ``error`` is the endpoint's error, with
    its message; None for an object to read on."""
    if type(doc) is not dict:
        return ChunkError(_SHAPE, "$", raw, t_ns)
    error = doc.get("error")
    if error is None:
        return None
    message = ""
    if type(error) is str:
        message = error
    elif type(error) is dict and type(error.get("message")) is str:
        message = error["message"]
    return ChunkError(_ENDPOINT, _fix(message) if fix else message, raw, t_ns)


def _shape(doc: Any, fix: bool, raw: bytes, t_ns: int) -> Delta | ChunkError:
    """S1-S10 over a decoded payload; ``fix`` when it may hold lone surrogates."""
    if (refused := _object_or_error(doc, raw, t_ns, fix)) is not None:
        return refused
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


# ---- SGLang's /generate chunk (G1-G7) ---------------------------------------

_COUNTS = ("prompt_tokens", "completion_tokens")


def _shape_sglang(doc: Any, fix: bool, raw: bytes, t_ns: int) -> Delta | ChunkError:
    """G1-G7 over a decoded payload; ``fix`` when it may hold lone surrogates."""
    if (refused := _object_or_error(doc, raw, t_ns, fix)) is not None:  # G1, G2 as S1, S2
        return refused
    text = doc.get("text")
    if not _is_str(text):
        return ChunkError(_SHAPE, "text", raw, t_ns)
    meta = doc.get("meta_info")
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    if meta is not None:
        if type(meta) is not dict:
            return ChunkError(_SHAPE, "meta_info", raw, t_ns)
        finish = meta.get("finish_reason")
        if finish is not None:
            if type(finish) is not dict:
                return ChunkError(_SHAPE, "meta_info.finish_reason", raw, t_ns)
            finish_reason = finish.get("type")
            if not _is_str(finish_reason):
                return ChunkError(_SHAPE, "meta_info.finish_reason.type", raw, t_ns)
        for key in _COUNTS:
            count = meta.get(key)
            if count is not None and type(count) is not int:
                return ChunkError(_SHAPE, f"meta_info.{key}", raw, t_ns)
        # G5: the counts present, in this order (the C writes their text so)
        usage = {key: meta[key] for key in _COUNTS if meta.get(key) is not None} or None
    if fix:
        text = None if text is None else _fix(text)
        finish_reason = None if finish_reason is None else _fix(finish_reason)
    return Delta(text, None, _NO_TOOLS, finish_reason, usage, t_ns)


# ---- the template (a cache in front of the full path) ----------------------
#
# The chunks of one stream differ, as a rule, in one string: the token's
# text.  After a full decode whose result has exactly one string fragment
# (content or reasoning; no tool call, finish_reason or usage), the decoder
# keeps the payload's bytes before that fragment's string body (the prefix,
# which ends with its opening quote) and from its closing quote on (the
# suffix).  A later payload that starts with the prefix, ends with the
# suffix, and has between them one valid string body gets the template's
# result with its own string as that fragment.  Anything else goes to the
# full path, which decides everything, errors included.
#
# Why that is exact (the argument of csrc/mlpe_oai.c, "The template"): a JSON
# scanner is in the same state after the prefix P in the template's payload
# P h S and in a new payload P h' S.  When that state is "inside a string,
# right after its opening quote" and h' is one whole string body (no
# unescaped quote, no control character, valid escapes, valid UTF-8: what
# _string_body checks, with json as the full path does), both payloads read
# S in the same state: same tokens at the same depths, same member names,
# kinds and numbers; one string value differs.  No rule (J1-J6, S1-S10)
# looks at the text of a string value, only at names, kinds, integers and
# positions, so every decision is the same and the results differ only in
# the fragment that string feeds.  (The depth bound and the huge-integer
# fallback depend on the structure only; _fix of the new string is the full
# path's, since a lone surrogate in it needs a \u escape in h'.)
#
# _find_template establishes the premises by decoding, not by parsing: with two
# markers m (b"#0", b"#1": '#' can stand nowhere outside a string), P m S
# must decode, through the full path, to exactly the one-fragment result
# whose fragment is m.  P m S being valid puts the scanner inside a string
# after P; the scanner reads either marker the same way, so the fragment
# comes from the same literal in both probes; a literal of P or S cannot
# decode to both markers, so it is the literal holding m, whose decoded text
# X + m + Y is m only when nothing stands between its opening quote and P's
# end (X) or between m and S's first byte (Y).  With h a valid string body
# too, the template's own result is the one-fragment result with h's text.

_MARKERS = (b"#0", b"#1")
# Full-path results in a row after which arming backs off: further attempts
# are made at powers of two only, so that a stream whose chunks differ
# elsewhere (a per-chunk stamp, say) pays next to nothing for the cache.
_MISS_LIMIT = 8


def _string_body(body: bytes) -> str | None:
    """The text of ``body`` when ``b'"' + body + b'"'`` is one JSON string
    literal that strict UTF-8 decoding and :mod:`json` accept, with J5
    applied; else None."""
    try:
        text = body.decode()  # strict UTF-8
    except UnicodeDecodeError:
        return None
    # Without a quote, a backslash or a control character (printable text
    # has none), the body is its text.
    if '"' not in text and "\\" not in text and text.isprintable():
        return text
    try:
        # An unescaped quote in ``text`` ends the literal early and leaves a
        # quote after it: "Extra data", a ValueError.
        value = _decode_json('"' + text + '"')
    except ValueError:
        return None
    assert type(value) is str
    return _fix(value) if "\\u" in text else value


def _one_fragment(field: str, text: str, t_ns: int) -> Delta:
    """A template's result: ``text`` as content or reasoning (as decode
    builds it inline)."""
    if field == "content":
        return Delta(text, None, _NO_TOOLS, None, None, t_ns)
    return Delta(None, text, _NO_TOOLS, None, None, t_ns)


def _decode_full(raw: bytes, t_ns: int, sglang: bool = False) -> Delta | ChunkError:
    """The full path: rules J1-J6 and S1-S10 (G1-G7 when ``sglang``) on any
    payload."""
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
    if sglang:
        return _shape_sglang(doc, "\\u" in text, raw, t_ns)
    return _shape(doc, "\\u" in text, raw, t_ns)


def _find_template(raw: bytes, result: Delta) -> tuple[bytes, bytes, str] | None:
    """The template of ``raw``, whose full decode is ``result``, or None when
    its result has not exactly one string fragment or the hole cannot be
    found (see the comment above)."""
    if result.tool_calls or result.finish_reason is not None or result.usage is not None:
        return None
    if result.content is not None and result.reasoning is None:
        field, text = "content", result.content
    elif result.reasoning is not None and result.content is None:
        field, text = "reasoning", result.reasoning
    else:
        return None
    # The literal as servers usually write it; any other spelling just
    # leaves the stream without a template.
    literal = json.dumps(text, ensure_ascii=False).encode("utf-8")
    at = raw.rfind(literal)
    if at < 0:
        return None
    prefix, suffix = raw[: at + 1], raw[at + len(literal) - 1 :]
    if _string_body(raw[at + 1 : at + len(literal) - 1]) is None:
        return None
    for marker in _MARKERS:
        probe = _decode_full(prefix + marker + suffix, 0)
        if probe != _one_fragment(field, marker.decode(), 0):
            return None
    return prefix, suffix, field


def check_dialect(dialect: str) -> bool:
    """Whether ``dialect`` (one of :data:`DIALECTS`) is SGLang's.

    Raises:
        ValueError: it is none of them.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, not {dialect!r}")
    return dialect == "sglang"


class ChunkDecoder:
    """Decodes the data of one OpenAI SSE event, or one completion body; with
    ``dialect="sglang"``, one event (or body) of SGLang's native
    ``/generate`` (rules G1-G7: its ``text`` is the content as sent, the
    whole text so far).

    One object can serve any number of payloads: a result never depends on
    the payloads before it.  The decoder only caches a template of the last
    suitable OpenAI payload, to decode the chunks of a stream faster.
    """

    __slots__ = ("_misses", "_sglang", "_template")

    def __init__(self, dialect: str = "openai") -> None:
        self._sglang = check_dialect(dialect)
        # prefix, suffix, their lengths, and whether the hole is reasoning
        self._template: tuple[bytes, bytes, int, int, bool] | None = None
        self._misses = 0  # full-path results in a row

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
        hit = self._template_hit(raw)
        if hit is not None:
            reasoning, text = hit
            if reasoning:
                return Delta(None, text, _NO_TOOLS, None, None, t_ns)
            return Delta(text, None, _NO_TOOLS, None, None, t_ns)
        return self._decode_miss(raw, t_ns)

    # The two halves of decode, for the whole-response twin, which takes a
    # template hit without building a Delta.

    def _template_hit(self, raw: bytes) -> tuple[bool, str] | None:
        """The template's result for ``raw``, as (whether the fragment is
        reasoning, its text), or None when ``raw`` does not fit it."""
        template = self._template
        if template is None:
            return None
        prefix, suffix, start, after, reasoning = template
        stop = len(raw) - after
        if start <= stop and raw.startswith(prefix) and raw.endswith(suffix):
            text = _string_body(raw[start:stop])
            if text is not None:
                self._misses = 0
                return reasoning, text
        return None

    def _decode_miss(self, raw: bytes, t_ns: int) -> Delta | ChunkError:
        """:meth:`decode` of ``raw`` when :meth:`_template_hit` gave None:
        the full path, which may take ``raw`` as the new template."""
        if self._sglang:  # never a template (csrc/mlpe_oai.h)
            return _decode_full(raw, t_ns, True)
        result = _decode_full(raw, t_ns)
        self._misses = misses = self._misses + 1
        if type(result) is Delta and (misses <= _MISS_LIMIT or misses & (misses - 1) == 0):
            found = _find_template(raw, result)
            if found is not None:
                prefix, suffix, field = found
                self._template = (prefix, suffix, len(prefix), len(suffix), field == "reasoning")
        return result
