"""Body mode of the whole-response decoder (rule R9 of csrc/mlpe_response.h).

A response framed elsewhere (HTTP/2) comes as a head (``set_head``), de-framed
body pieces (``feed_body``) and an end (``end_body``), and must decode exactly
as the same head and body over HTTP/1.1 (``feed``), ``keep_alive`` aside.
Most tests say so directly: they run the body both ways and compare.  Both
implementations run every test, and a cross-check compares them directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlpe_fast.errors import (
    BodyTooLarge,
    ErrorCode,
    EventTooLarge,
    IncompleteResponse,
    LocalProtocolError,
    NoEvents,
    ProtocolError,
    UnsupportedContentEncoding,
)
from mlpe_fast.sim.stream import (
    LAST_CHUNK,
    chat_chunk,
    chat_completion,
    chunk_frame,
    completion_chunk,
    sse_event,
    tool_call_fragment,
)
from mlpe_fast.wire.events import (
    FirstToken,
    ResponseComplete,
    ResponseHead,
    ResponseSummary,
    ToolCall,
)
from tests.conftest import IMPLS, wire_module

Headers = Sequence[tuple[bytes, bytes]]

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
SSE = [(b"content-type", b"text/event-stream")]
AN_EVENT = sse_event(chat_chunk(content="a"))
JSON = [(b"content-type", b"application/json")]
T_HEAD = 1000  # set_head's stamp; piece i is fed at T_HEAD + 1 + i


def sse_body(*payloads: bytes, eol: bytes = b"\n", done: bool = True) -> list[bytes]:
    events = [sse_event(p, eol=eol) for p in payloads]
    if done:
        events.append(sse_event(b"[DONE]", eol=eol))
    return events


SIMPLE = sse_body(
    chat_chunk(role="assistant", content=""),
    chat_chunk(content="Hel"),
    chat_chunk(content="lo"),
    chat_chunk(content=" é世😀"),
    chat_chunk(finish_reason="stop"),
    chat_chunk(choices=False, usage=USAGE),
)

REASONING_TOOLS = sse_body(
    chat_chunk(role="assistant"),
    chat_chunk(reasoning="Think"),
    chat_chunk(reasoning="ing."),
    chat_chunk(tool_calls=[tool_call_fragment(0, call_id="call_1", name="get", arguments="")]),
    chat_chunk(tool_calls=[tool_call_fragment(0, arguments='{"city": ')]),
    chat_chunk(tool_calls=[tool_call_fragment(0, arguments='"Paris"}')]),
    chat_chunk(tool_calls=[tool_call_fragment(1, call_id="call_2", name="now", arguments="{}")]),
    chat_chunk(content="ok", finish_reason="tool_calls"),
)

NON_STREAMING = chat_completion(
    content="Hi there", usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
)

RATE_LIMITED = b'{"error": {"message": "Rate limit reached", "type": "rate_limit", "code": 429}}'

# name: (status, headers, body)
BODIES: dict[str, tuple[int, Headers, bytes]] = {
    "sse": (200, SSE, b"".join(SIMPLE)),
    "sse_crlf": (200, SSE, b"".join(sse_body(chat_chunk(content="a"), eol=b"\r\n"))),
    "sse_cr": (200, SSE, b"".join(sse_body(chat_chunk(content="a"), eol=b"\r"))),
    "reasoning_tools": (200, SSE, b"".join(REASONING_TOOLS)),
    "completions_api": (
        200,
        SSE,
        b"".join(sse_body(completion_chunk("x"), completion_chunk("yz", finish_reason="length"))),
    ),
    "no_done": (200, SSE, b"".join(sse_body(chat_chunk(content="a"), done=False))),
    "malformed_between": (
        200,
        SSE,
        b"".join(sse_body(chat_chunk(content="a"), b'{"choices": [', chat_chunk(content="b"))),
    ),
    "after_done": (
        200,
        SSE,
        b"".join([*sse_body(chat_chunk(content="a")), sse_event(chat_chunk(content="late"))]),
    ),
    "non_streaming": (200, JSON, NON_STREAMING),
    "no_content_type": (200, [(b"server", b"x")], NON_STREAMING),
    "http_429": (429, JSON, RATE_LIMITED),
    "http_500_sse": (500, SSE, b"".join(sse_body(chat_chunk(content="a")))),
}


# ---- drivers ----------------------------------------------------------------


def via_body(
    mod: ModuleType,
    status: int,
    headers: Headers,
    pieces: Sequence[bytes],
    *,
    t_end: int | None = None,
    **kwargs: Any,
) -> tuple[list[Any], Any]:
    """Body mode: the head at T_HEAD, piece i at T_HEAD + 1 + i, the end at
    ``t_end`` (default: the stamp after the last piece)."""
    decoder = mod.ResponseDecoder(**kwargs)
    events = decoder.set_head(status, headers, T_HEAD)
    for i, piece in enumerate(pieces):
        events += decoder.feed_body(piece, T_HEAD + 1 + i)
    events += decoder.end_body(T_HEAD + 1 + len(pieces) if t_end is None else t_end)
    return events, decoder


def h1_head(status: int, headers: Headers, framing: bytes) -> bytes:
    lines = [b"HTTP/1.1 %d X" % status, *(name + b": " + value for name, value in headers)]
    return b"\r\n".join([*lines, framing]) + b"\r\n\r\n"


def via_h1(
    mod: ModuleType, status: int, headers: Headers, pieces: Sequence[bytes], **kwargs: Any
) -> tuple[list[Any], Any]:
    """The same over HTTP/1.1, chunked, with the same stamps: the head at
    T_HEAD, the chunk of piece i at T_HEAD + 1 + i, the last chunk after."""
    decoder = mod.ResponseDecoder(**kwargs)
    events = decoder.feed(h1_head(status, headers, b"transfer-encoding: chunked"), T_HEAD)
    for i, piece in enumerate(pieces):
        events += decoder.feed(chunk_frame(piece), T_HEAD + 1 + i)
    events += decoder.feed(LAST_CHUNK, T_HEAD + 1 + len(pieces))
    return events, decoder


def stamps(events: list[Any]) -> list[tuple[str, int]]:
    return [(type(e).__name__, e.t_ns) for e in events]


def replace(summary: ResponseSummary, **fields: Any) -> ResponseSummary:
    return msgspec.structs.replace(summary, **fields)


def assert_same_as_h1(body: ResponseSummary, h1: ResponseSummary) -> None:
    """R9: the summary of body mode is HTTP/1.1's, keep_alive aside."""
    assert not body.keep_alive and body.unexpected_bytes == 0
    assert replace(body, keep_alive=h1.keep_alive) == h1


def split(data: bytes, *cuts: int) -> list[bytes]:
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in pairwise(bounds) if b > a]


# ---- every body, both ways ----------------------------------------------------


@pytest.mark.parametrize("name", sorted(BODIES))
def test_same_as_h1(response: ModuleType, name: str) -> None:
    status, headers, body = BODIES[name]
    for step in (len(body), 64, 7, 1):
        pieces = [body[i : i + step] for i in range(0, len(body), step)]
        events, decoder = via_body(response, status, headers, pieces, record_chunk_times=True)
        h1_events, h1 = via_h1(response, status, headers, pieces, record_chunk_times=True)
        assert stamps(events) == stamps(h1_events)
        assert_same_as_h1(decoder.summary(), h1.summary())


@pytest.mark.parametrize("name", sorted(BODIES))
def test_every_split_gives_the_same_summary_and_exact_stamps(
    response: ModuleType, name: str
) -> None:
    status, headers, body = BODIES[name]
    # The byte completing each milestone, from a byte-by-byte run.
    _, bytewise = via_body(response, status, headers, [body[i : i + 1] for i in range(len(body))])
    reference = bytewise.summary()
    end = T_HEAD + 1 + len(body)

    def byte_of(t: int | None) -> int | None:
        return None if t is None or t == end else t - T_HEAD - 1

    first_byte, done_byte = byte_of(reference.t_first), byte_of(reference.t_done)
    for k in range(1, len(body)):
        _, decoder = via_body(response, status, headers, [body[:k], body[k:]])
        s = decoder.summary()

        def stamp(byte: int | None, split: int = k) -> int | None:
            if byte is None:  # at the end of the body
                return T_HEAD + 3
            return T_HEAD + 1 if byte < split else T_HEAD + 2

        if reference.t_first is not None:
            assert s.t_first == stamp(first_byte), k
        assert s.t_done == stamp(done_byte), k
        for field in ("t_first_content", "t_second"):  # R12
            at = getattr(reference, field)
            assert getattr(s, field) == (None if at is None else stamp(byte_of(at))), (k, field)
        if s.gaps is not None:  # R12: two reads, so every gap but one is 0
            assert reference.gaps is not None and s.gaps.count == reference.gaps.count
            assert s.gaps.zero >= s.gaps.count - 1 and s.gaps.max_ns <= 2
        timeless = {
            "t_first": 0,
            "t_done": 0,
            "first_chunk_error": None,
            "t_first_content": None,
            "t_second": None,
            "gaps": None,
        }
        assert replace(s, **timeless) == replace(reference, **timeless), k


# ---- what body mode reports ------------------------------------------------------


def test_sse_stream(response: ModuleType) -> None:
    headers = [(b"content-type", b"text/event-stream"), (b"server", b"vllm")]
    events, decoder = via_body(response, 200, headers, SIMPLE)
    assert events == [
        ResponseHead(200, b"", tuple(headers), b"2", False, T_HEAD),
        FirstToken(T_HEAD + 2),  # the "Hel" event, piece 1
        ResponseComplete((), False, T_HEAD + 1 + len(SIMPLE)),
    ]
    s = decoder.summary()
    assert s.status == 200 and s.t_head == T_HEAD
    assert s.content == "Hello é世😀" and s.content_after_first == "lo é世😀"
    assert s.finish_reason == "stop" and s.usage == USAGE
    assert s.events == 7 and s.content_events == 3
    assert s.t_done == T_HEAD + len(SIMPLE)  # the [DONE] piece, not the end
    assert s.done and s.complete and s.ok
    assert not s.keep_alive and s.unexpected_bytes == 0
    assert s.error_code == 0 and s.error_message == ""


def test_json_body_is_decoded_at_the_end(response: ModuleType) -> None:
    events, decoder = via_body(response, 200, JSON, split(NON_STREAMING, 20), t_end=5000)
    assert events[1:] == [FirstToken(5000), ResponseComplete((), False, 5000)]
    s = decoder.summary()
    assert s.content == "Hi there" and s.content_after_first == ""
    assert s.t_first == s.t_done == 5000
    assert s.events == 0 and s.content_events == 1
    assert s.usage == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert s.ok and not s.keep_alive


def test_json_body_without_content_has_no_first_token(response: ModuleType) -> None:
    events, decoder = via_body(response, 200, JSON, [chat_completion(content="")])
    assert [type(e) for e in events] == [ResponseHead, ResponseComplete]
    assert decoder.summary().t_first is None and decoder.summary().ok


def test_missing_content_type_means_json(response: ModuleType) -> None:
    _, decoder = via_body(response, 200, [], [NON_STREAMING])
    assert decoder.summary().content == "Hi there"
    # An event stream without the media type is one (broken) JSON body.
    _, decoder = via_body(response, 200, [], SIMPLE)
    s = decoder.summary()
    assert s.content == "" and s.events == 0 and s.chunk_errors == 1


def test_error_status_keeps_the_body_for_its_message(response: ModuleType) -> None:
    events, decoder = via_body(response, 429, JSON, split(RATE_LIMITED, 10, 30))
    assert [type(e) for e in events] == [ResponseHead, ResponseComplete]
    s = decoder.summary()
    assert s.status == 429 and s.complete and not s.ok
    assert s.error_code == ErrorCode.HTTP_STATUS
    assert s.error_message == "HTTP 429: Rate limit reached"


def test_error_status_with_an_event_stream_is_not_decoded(response: ModuleType) -> None:
    _, decoder = via_body(response, 503, SSE, SIMPLE)
    s = decoder.summary()
    assert s.content == "" and s.events == 0 and s.t_first is None
    assert s.error_code == ErrorCode.HTTP_STATUS and s.error_message.startswith("HTTP 503: ")


def test_long_error_body_is_truncated_as_over_h1(response: ModuleType) -> None:
    body = b'{"error": {"message": "' + b"x" * (70 << 10) + b'"}}'
    pieces = split(body, 1000, 40000, 65535, 65537)
    _, decoder = via_body(response, 500, JSON, pieces)
    _, h1 = via_h1(response, 500, JSON, pieces)
    assert_same_as_h1(decoder.summary(), h1.summary())
    # 64 KiB of it is not JSON any more: the text itself is the message.
    assert decoder.summary().error_message.startswith('HTTP 500: {"error": {"message": "xxx')


def test_reasoning_and_tool_calls(response: ModuleType) -> None:
    _, decoder = via_body(response, 200, SSE, REASONING_TOOLS)
    s = decoder.summary()
    assert s.reasoning == "Thinking." and s.reasoning_after_first == "ing."
    assert s.content == s.content_after_first == "ok"
    assert s.tool_calls == (
        ToolCall(index=0, id="call_1", type="function", name="get", arguments='{"city": "Paris"}'),
        ToolCall(index=1, id="call_2", type="function", name="now", arguments="{}"),
    )
    assert s.tool_calls_after_first == s.tool_calls
    assert s.finish_reason == "tool_calls" and s.content_events == 7
    assert s.t_first == T_HEAD + 2


def test_tool_call_as_first_token(response: ModuleType) -> None:
    pieces = sse_body(
        chat_chunk(tool_calls=[tool_call_fragment(0, call_id="c", name="f", arguments="{")]),
        chat_chunk(tool_calls=[tool_call_fragment(0, arguments="}")]),
    )
    _, decoder = via_body(response, 200, SSE, pieces)
    s = decoder.summary()
    assert s.t_first == T_HEAD + 1
    assert s.tool_calls_after_first == (ToolCall(0, "c", "function", "", "}"),)


def test_events_after_done_are_counted_and_ignored(response: ModuleType) -> None:
    pieces = [*sse_body(chat_chunk(content="a")), sse_event(chat_chunk(content="late"))]
    _, decoder = via_body(response, 200, SSE, pieces)
    s = decoder.summary()
    assert s.content == "a" and s.events == 3 and s.events_after_done == 1
    assert s.t_done == T_HEAD + 2  # the [DONE] piece


def test_missing_done_ends_at_end_body(response: ModuleType) -> None:
    _, decoder = via_body(response, 200, SSE, sse_body(chat_chunk(content="a"), done=False))
    s = decoder.summary()
    assert not s.done and s.complete and s.t_done == T_HEAD + 2


def test_unterminated_last_event_is_dropped(response: ModuleType) -> None:
    # As at the end of an HTTP/1.1 message: an event needs its blank line.
    pieces = [sse_event(chat_chunk(content="a")), b"data: " + chat_chunk(content="b")]
    _, decoder = via_body(response, 200, SSE, pieces)
    _, h1 = via_h1(response, 200, SSE, pieces)
    assert decoder.summary().content == "a"
    assert_same_as_h1(decoder.summary(), h1.summary())


def test_malformed_chunk_is_isolated(response: ModuleType) -> None:
    pieces = sse_body(chat_chunk(content="a"), b'{"choices": [', chat_chunk(content="b"))
    _, decoder = via_body(response, 200, SSE, pieces)
    s = decoder.summary()
    assert s.content == "ab" and s.chunk_errors == 1 and s.ok
    assert s.first_chunk_error is not None
    assert s.first_chunk_error.code == ErrorCode.JSON_SYNTAX
    assert s.first_chunk_error.data == b'{"choices": ['
    assert s.first_chunk_error.t_ns == T_HEAD + 2


def test_endpoint_error_event(response: ModuleType) -> None:
    pieces = sse_body(chat_chunk(content="a"), b'{"error": {"message": "engine died"}}')
    _, decoder = via_body(response, 200, SSE, pieces)
    error = decoder.summary().first_chunk_error
    assert error is not None and error.message == "endpoint sent an error: engine died"


def test_record_chunk_times(response: ModuleType) -> None:
    _, decoder = via_body(response, 200, SSE, SIMPLE, record_chunk_times=True)
    assert decoder.summary().chunk_times == (T_HEAD + 2, T_HEAD + 3, T_HEAD + 4)


def test_utf8_split_inside_a_character(response: ModuleType) -> None:
    body = b"".join(SIMPLE)
    _, decoder = via_body(response, 200, SSE, split(body, body.index("😀".encode()) + 2))
    assert decoder.summary().content.endswith("😀")


def test_empty_pieces_and_any_buffer(response: ModuleType) -> None:
    body = b"".join(SIMPLE)
    cut = len(SIMPLE[0]) + len(SIMPLE[1])  # up to the end of the "Hel" event
    decoder = response.ResponseDecoder()
    decoder.set_head(200, SSE, 1)
    assert decoder.feed_body(b"", 2) == []
    assert decoder.feed_body(bytearray(body[:cut]), 3) == [FirstToken(3)]
    assert decoder.feed_body(memoryview(body)[cut:], 4) == []
    assert decoder.feed_body(b"", 5) == []
    assert decoder.end_body(6) == [ResponseComplete((), False, 6)]
    assert decoder.summary().content == "Hello é世😀"


def test_empty_event_stream_is_no_answer(response: ModuleType) -> None:
    """R10, as over HTTP/1.1: a 2xx event stream without a single event."""
    decoder = response.ResponseDecoder()
    decoder.set_head(200, SSE, T_HEAD)
    with pytest.raises(NoEvents) as info:
        decoder.end_body(T_HEAD + 1)
    assert info.value.position == 0
    s = decoder.summary()
    assert not s.complete and s.error_code == ErrorCode.NO_EVENTS and s.events == 0


def test_empty_json_body_completes(response: ModuleType) -> None:
    events, decoder = via_body(response, 200, JSON, [])
    assert [type(e) for e in events] == [ResponseHead, ResponseComplete]
    s = decoder.summary()
    assert s.complete and s.events == 0 and s.t_done == T_HEAD + 1


# ---- the head: R1 and R2 as over HTTP/1.1 --------------------------------------------

CONTENT_TYPES = [
    b"text/event-stream",
    b"Text/Event-Stream; charset=utf-8",
    b"TEXT/EVENT-STREAM;charset=utf-8",
    b"text/event-stream\t; x=1",
    b"text/event-stream ",
    b"text/event-streams",
    b"text/event-strea",
    b"text/event",
    b"application/json",
    b"",
]


@pytest.mark.parametrize("content_type", CONTENT_TYPES)
def test_content_type_as_over_h1(response: ModuleType, content_type: bytes) -> None:
    headers = [(b"content-type", content_type)]
    pieces = sse_body(chat_chunk(content="a"))
    _, decoder = via_body(response, 200, headers, pieces)
    _, h1 = via_h1(response, 200, headers, pieces)
    assert_same_as_h1(decoder.summary(), h1.summary())
    stream = content_type.lower().startswith(b"text/event-stream") and content_type[17:18] in (
        b"",
        b";",
        b" ",
        b"\t",
    )
    assert (decoder.summary().content == "a") == stream


def test_first_content_type_field_counts(response: ModuleType) -> None:
    # Headers as the h2 library delivers them: the first field of a name is read.
    headers = [(b"content-type", b"application/json"), (b"content-type", b"text/event-stream")]
    _, decoder = via_body(response, 200, headers, [NON_STREAMING])
    assert decoder.summary().content == "Hi there"
    headers = [(b"content-type", b"text/event-stream"), (b"content-type", b"application/json")]
    _, decoder = via_body(response, 200, headers, sse_body(chat_chunk(content="a")))
    assert decoder.summary().content == "a"


@pytest.mark.parametrize(
    "encoding", [b"identity", b"Identity", b"IDENTITY; q=1", b"identity\t", b"gzip", b"br", b""]
)
def test_content_encoding_as_over_h1(response: ModuleType, encoding: bytes) -> None:
    headers = [*SSE, (b"content-encoding", encoding)]
    pieces = sse_body(chat_chunk(content="a"))
    body_error = h1_error = None
    decoder = response.ResponseDecoder()
    try:
        decoder.set_head(200, headers, T_HEAD)
        for piece in pieces:
            decoder.feed_body(piece, T_HEAD + 1)
        decoder.end_body(T_HEAD + 2)
    except ProtocolError as exc:
        body_error = exc
    h1 = response.ResponseDecoder()
    body = b"".join(pieces)
    try:
        h1.feed(h1_head(200, headers, b"content-length: %d" % len(body)) + body, T_HEAD)
    except ProtocolError as exc:
        h1_error = exc
    assert body_error == h1_error
    identity = encoding.strip().lower().startswith(b"identity")
    assert (body_error is None) == identity


def test_content_encoding_is_refused_at_the_head(response: ModuleType) -> None:
    decoder = response.ResponseDecoder()
    with pytest.raises(UnsupportedContentEncoding) as info:
        decoder.set_head(200, [*SSE, (b"content-encoding", b"gzip")], T_HEAD)
    assert info.value.position == 0
    s = decoder.summary()
    assert s.status == 200 and s.t_head == T_HEAD and not s.complete
    assert s.error_code == ErrorCode.CONTENT_ENCODING and s.error_message == str(info.value)
    assert_sticky(decoder, info.value)


# ---- limits and terminal errors (R8: positions count body bytes) ---------------------


def test_event_too_large_counts_body_bytes(response: ModuleType) -> None:
    first = sse_event(chat_chunk(content="a"))
    body = first + b"data: " + b"x" * 400
    decoder = response.ResponseDecoder(max_event=300)
    decoder.set_head(200, SSE, T_HEAD)
    assert decoder.feed_body(body[:10], T_HEAD + 1) == []
    assert decoder.feed_body(body[10:200], T_HEAD + 2) == [FirstToken(T_HEAD + 2)]
    with pytest.raises(EventTooLarge) as info:
        decoder.feed_body(body[200:], T_HEAD + 3)
    assert info.value.position == len(first) + 300
    s = decoder.summary()
    assert s.content == "a" and s.error_code == ErrorCode.EVENT_TOO_LARGE
    assert s.error_message == str(info.value) and not s.complete
    assert_sticky(decoder, info.value)


def test_body_too_large_counts_body_bytes(response: ModuleType) -> None:
    body = b"{" + b" " * 99 + b"}"
    decoder = response.ResponseDecoder(max_body=64)
    decoder.set_head(200, JSON, T_HEAD)
    decoder.feed_body(body[:30], T_HEAD + 1)
    decoder.feed_body(body[30:60], T_HEAD + 2)
    with pytest.raises(BodyTooLarge) as info:
        decoder.feed_body(body[60:], T_HEAD + 3)
    assert info.value.position == 64
    s = decoder.summary()
    assert s.error_code == ErrorCode.BODY_TOO_LARGE and "at byte 64" in s.error_message
    assert not s.complete and not s.keep_alive
    assert_sticky(decoder, info.value)


def test_body_at_the_limit_is_fine(response: ModuleType) -> None:
    _, decoder = via_body(
        response, 200, JSON, split(NON_STREAMING, 50), max_body=len(NON_STREAMING)
    )
    assert decoder.summary().content == "Hi there"


def test_error_body_is_not_limited_by_max_body(response: ModuleType) -> None:
    _, decoder = via_body(response, 429, JSON, [RATE_LIMITED], max_body=8)
    assert decoder.summary().error_message == "HTTP 429: Rate limit reached"


def assert_sticky(decoder: Any, error: Exception) -> None:
    """After a terminal error every call raises it again, misuse or not."""
    calls: list[Callable[[], object]] = [
        lambda: decoder.set_head(200, SSE, 1),
        lambda: decoder.feed_body(b"data: x\n\n", 2),
        lambda: decoder.end_body(3),
        lambda: decoder.feed(b"HTTP/1.1 200 OK\r\n", 4),
        lambda: decoder.feed_eof(5),
        lambda: decoder.end_body(6),
    ]
    before = decoder.summary()
    for call in calls:
        with pytest.raises(type(error)) as info:
            call()
        assert info.value == error
    assert decoder.summary() == before


# ---- misuse --------------------------------------------------------------------------

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 9\r\n\r\n"

# Each: the calls that are fine, then the one refused.
MISUSE: dict[str, tuple[list[tuple[str, tuple[Any, ...]]], tuple[str, tuple[Any, ...]]]] = {
    "set_head_after_feed": ([("feed", (HEAD[:5], 1))], ("set_head", (200, SSE, 2))),
    "set_head_after_empty_feed": ([("feed", (b"", 1))], ("set_head", (200, SSE, 2))),
    "set_head_after_complete_feed": (
        [("feed", (HEAD + b"data: x\n\n", 1)), ("feed_eof", (2,))],
        ("set_head", (200, SSE, 3)),
    ),
    "set_head_twice": ([("set_head", (200, SSE, 1))], ("set_head", (200, SSE, 2))),
    "set_head_after_end": (
        [("set_head", (200, SSE, 1)), ("feed_body", (AN_EVENT, 1)), ("end_body", (2,))],
        ("set_head", (200, SSE, 3)),
    ),
    "feed_after_set_head": ([("set_head", (200, SSE, 1))], ("feed", (HEAD, 2))),
    "feed_eof_after_set_head": ([("set_head", (200, SSE, 1))], ("feed_eof", (2,))),
    "feed_after_end_body": (
        [("set_head", (200, SSE, 1)), ("feed_body", (AN_EVENT, 1)), ("end_body", (2,))],
        ("feed", (b"x", 3)),
    ),
    "feed_body_first": ([], ("feed_body", (b"data: x\n\n", 1))),
    "feed_body_after_feed": ([("feed", (HEAD, 1))], ("feed_body", (b"data: x\n\n", 2))),
    "feed_body_after_end": (
        [("set_head", (200, SSE, 1)), ("feed_body", (AN_EVENT, 1)), ("end_body", (2,))],
        ("feed_body", (b"data: x\n\n", 3)),
    ),
    "feed_body_empty_after_end": (
        [("set_head", (200, SSE, 1)), ("feed_body", (AN_EVENT, 1)), ("end_body", (2,))],
        ("feed_body", (b"", 3)),
    ),
    "end_body_first": ([], ("end_body", (1,))),
    "end_body_after_feed": ([("feed", (HEAD, 1))], ("end_body", (2,))),
    "end_body_twice": (
        [("set_head", (200, SSE, 1)), ("feed_body", (AN_EVENT, 1)), ("end_body", (2,))],
        ("end_body", (3,)),
    ),
    "status_199": ([], ("set_head", (199, SSE, 1))),
    "status_100": ([], ("set_head", (100, SSE, 1))),
    "status_101": ([], ("set_head", (101, SSE, 1))),
    "status_0": ([], ("set_head", (0, SSE, 1))),
    "status_600": ([], ("set_head", (600, SSE, 1))),
    "status_negative": ([], ("set_head", (-200, SSE, 1))),
}


@pytest.mark.parametrize("name", sorted(MISUSE))
def test_misuse_is_refused_and_changes_nothing(response: ModuleType, name: str) -> None:
    before, (method, args) = MISUSE[name]
    decoder = response.ResponseDecoder()
    for call, call_args in before:
        getattr(decoder, call)(*call_args)
    summary = decoder.summary()
    with pytest.raises(LocalProtocolError):
        getattr(decoder, method)(*args)
    assert decoder.summary() == summary
    with pytest.raises(LocalProtocolError):  # and again
        getattr(decoder, method)(*args)


def test_refused_calls_leave_body_mode_usable(response: ModuleType) -> None:
    decoder = response.ResponseDecoder()
    with pytest.raises(LocalProtocolError):
        decoder.set_head(199, SSE, 1)
    with pytest.raises(LocalProtocolError):
        decoder.feed_body(b"data: x\n\n", 1)
    decoder.set_head(200, SSE, 2)
    with pytest.raises(LocalProtocolError):
        decoder.feed(HEAD, 3)
    with pytest.raises(LocalProtocolError):
        decoder.feed_eof(3)
    assert decoder.feed_body(b"".join(SIMPLE), 4) == [FirstToken(4)]
    assert decoder.end_body(5) == [ResponseComplete((), False, 5)]
    assert decoder.summary().content == "Hello é世😀"


def test_refused_calls_leave_wire_mode_usable(response: ModuleType) -> None:
    decoder = response.ResponseDecoder()
    decoder.feed(HEAD[:10], 1)
    refused: list[Callable[[], object]] = [
        lambda: decoder.set_head(200, SSE, 2),
        lambda: decoder.feed_body(b"x", 2),
        lambda: decoder.end_body(2),
    ]
    for call in refused:
        with pytest.raises(LocalProtocolError):
            call()
    events = decoder.feed(HEAD[10:] + b"data: x\n\n", 3)
    assert [type(e) for e in events] == [ResponseHead, ResponseComplete]
    assert events[-1].keep_alive and decoder.summary().keep_alive


def test_eof_error_stays_ahead_of_misuse(response: ModuleType) -> None:
    decoder = response.ResponseDecoder()
    with pytest.raises(IncompleteResponse) as info:
        decoder.feed_eof(1)
    assert_sticky(decoder, info.value)


# ---- the implementations agree ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BODIES))
def test_implementations_agree(name: str) -> None:
    status, headers, body = BODIES[name]
    results = []
    for impl in IMPLS:
        mod = wire_module("response", impl)
        for step in (1, 7, 64, len(body)):
            pieces = [body[i : i + step] for i in range(0, len(body), step)]
            events, decoder = via_body(mod, status, headers, pieces, record_chunk_times=True)
            results.append((step, events, decoder.summary()))
    half = len(results) // 2
    assert results[:half] == results[half:]


def _call(log: list[Any], method: Callable[..., list[Any]], *args: Any) -> None:
    """Logs the stamps of what a call returned, or what it raised."""
    try:
        log += stamps(method(*args))
    except (ProtocolError, LocalProtocolError) as exc:
        log.append(("raised", type(exc).__name__, str(exc)))


def body_mode_log(
    mod: ModuleType,
    status: int,
    headers: Headers,
    pieces: Sequence[bytes],
    t_end: int,
    **kwargs: Any,
) -> tuple[list[Any], ResponseSummary]:
    """``via_body``, logging every call's outcome instead of stopping at an error."""
    log: list[Any] = []
    decoder = mod.ResponseDecoder(**kwargs)
    _call(log, decoder.set_head, status, headers, T_HEAD)
    for i, piece in enumerate(pieces):
        _call(log, decoder.feed_body, piece, T_HEAD + 1 + i)
    _call(log, decoder.end_body, t_end)
    return log, decoder.summary()


@pytest.mark.parametrize(
    ("status", "headers", "kwargs"),
    [
        (200, [*SSE, (b"content-encoding", b"gzip")], {}),
        (199, SSE, {}),
        (200, SSE, {"max_event": 40}),
        (200, JSON, {"max_body": 40}),
    ],
)
def test_implementations_agree_on_errors(
    status: int, headers: Headers, kwargs: dict[str, Any]
) -> None:
    for pieces in (SIMPLE, [NON_STREAMING]):
        c_out, py_out = (
            body_mode_log(wire_module("response", impl), status, headers, pieces, 2000, **kwargs)
            for impl in IMPLS
        )
        assert c_out == py_out
        assert c_out[0][-1][0] == "raised"


# ---- property: body mode equals HTTP/1.1 ---------------------------------------------------

TEXT = st.text(max_size=12)


@st.composite
def _chunks(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["content", "reasoning", "tool", "finish", "usage", "broken"]))
    if kind == "content":
        return chat_chunk(content=draw(TEXT))
    if kind == "reasoning":
        return chat_chunk(reasoning=draw(TEXT))
    if kind == "tool":
        fragment = tool_call_fragment(
            draw(st.integers(0, 2)),
            call_id=draw(st.none() | st.just("call")),
            name=draw(st.none() | TEXT),
            arguments=draw(st.none() | TEXT),
        )
        return chat_chunk(tool_calls=[fragment])
    if kind == "finish":
        return chat_chunk(finish_reason=draw(st.sampled_from(["stop", "length"])))
    if kind == "usage":
        return chat_chunk(choices=False, usage=USAGE)
    return draw(st.sampled_from([b'{"choices": [', b"\xff", b'{"error": {"message": "x"}}']))


@st.composite
def _streams(draw: st.DrawFn) -> tuple[list[bytes], dict[str, Any]]:
    """An SSE body cut into non-empty pieces, and decoder options."""
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    # at least one event: an empty stream fails at its head read over HTTP/1.1 (R10)
    chunks = draw(st.lists(_chunks(), min_size=1, max_size=12))
    events = [sse_event(c, eol=eol) for c in chunks]
    if draw(st.booleans()):
        events.append(sse_event(b"[DONE]", eol=eol))
        events += [sse_event(c, eol=eol) for c in draw(st.lists(_chunks(), max_size=2))]
    if draw(st.booleans()):  # an event without its blank line
        events.append(b"data: " + chat_chunk(content="cut"))
    body = b"".join(events)
    cuts = draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=8, unique=True))
    pieces = split(body, *sorted(c for c in cuts if c < len(body)))
    options = {
        "max_event": draw(st.sampled_from([1 << 20, 300, 64])),
        "record_chunk_times": True,
    }
    return pieces, options


def _settled(log: list[Any]) -> list[Any]:
    """The log up to its first error: every call after it raised it again."""
    for i, entry in enumerate(log):
        if entry[0] == "raised":
            assert all(later == entry for later in log[i + 1 :])
            return log[: i + 1]
    return log


@pytest.mark.hypothesis
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_streams(), st.sampled_from(["chunked", "length"]))
def test_hypothesis_body_mode_equals_h1(
    response: ModuleType, stream: tuple[list[bytes], dict[str, Any]], transfer: str
) -> None:
    """For a random event stream split at random points, body mode gives the
    summary and milestone stamps that HTTP/1.1 gives when each piece of body
    arrives with the same stamp, keep_alive aside (R9).  Chunked, the last
    chunk comes with a stamp of its own, which end_body gets; with a
    Content-Length the message ends with its last byte, so end_body gets
    that piece's stamp."""
    pieces, options = stream
    n = len(pieces)
    t_end = T_HEAD + n + (transfer == "chunked")

    body_log, body_summary = body_mode_log(response, 200, SSE, pieces, t_end, **options)

    h1_log: list[Any] = []
    h1 = response.ResponseDecoder(**options)
    if transfer == "chunked":
        wire = [*map(chunk_frame, pieces), LAST_CHUNK]
        head = h1_head(200, SSE, b"transfer-encoding: chunked")
    else:
        wire = list(pieces)
        head = h1_head(200, SSE, b"content-length: %d" % sum(map(len, pieces)))
    _call(h1_log, h1.feed, head, T_HEAD)
    for i, piece in enumerate(wire):
        _call(h1_log, h1.feed, piece, T_HEAD + 1 + i)

    assert _settled(body_log) == _settled(h1_log)
    assert_same_as_h1(body_summary, h1.summary())
