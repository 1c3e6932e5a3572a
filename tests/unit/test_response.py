"""The whole-response decoder: HTTP/1.1 framing -> SSE -> OpenAI chunks -> summary.

Rules R1-R8 are those of csrc/mlpe_response.h.  Every fixture is checked whole,
one byte at a time and split at every index, with a distinct stamp per piece:
the summary must be the same and each milestone must carry the stamp of the
piece holding the byte that completed it.  Both implementations run every
test, and a cross-check compares them directly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import msgspec
import pytest

from mlpe_fast.errors import (
    BodyTooLarge,
    ErrorCode,
    EventTooLarge,
    IncompleteResponse,
    InvalidChunkSize,
    LocalProtocolError,
    UnsupportedContentEncoding,
)
from mlpe_fast.sim.stream import (
    chat_chunk,
    completion_chunk,
    http_response,
    sse_event,
    tool_call_fragment,
)
from mlpe_fast.wire.events import (
    FirstToken,
    ResponseComplete,
    ResponseHead,
    ResponseSummary,
    TokenGaps,
    ToolCall,
)
from mlpe_fast.wire.gaps import bucket_of, pack_buckets
from tests.conftest import IMPLS, wire_module

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def sse_body(*payloads: bytes, eol: bytes = b"\n", done: bool = True) -> list[bytes]:
    events = [sse_event(p, eol=eol) for p in payloads]
    if done:
        events.append(sse_event(b"[DONE]", eol=eol))
    return events


def simple_stream(eol: bytes = b"\n") -> bytes:
    return http_response(
        sse_body(
            chat_chunk(role="assistant", content=""),
            chat_chunk(content="Hel"),
            chat_chunk(content="lo"),
            chat_chunk(content=" é世😀"),
            chat_chunk(finish_reason="stop"),
            chat_chunk(choices=False, usage=USAGE),
            eol=eol,
        )
    )


def reasoning_tool_stream() -> bytes:
    return http_response(
        sse_body(
            chat_chunk(role="assistant"),
            chat_chunk(reasoning="Think"),
            chat_chunk(reasoning="ing."),
            chat_chunk(
                tool_calls=[tool_call_fragment(0, call_id="call_1", name="get", arguments="")]
            ),
            chat_chunk(tool_calls=[tool_call_fragment(0, arguments='{"city": ')]),
            chat_chunk(tool_calls=[tool_call_fragment(0, arguments='"Paris"}')]),
            chat_chunk(
                tool_calls=[tool_call_fragment(1, call_id="call_2", name="now", arguments="{}")]
            ),
            chat_chunk(content="ok", finish_reason="tool_calls"),
        )
    )


FIXTURES: dict[str, bytes] = {
    "lf": simple_stream(b"\n"),
    "crlf": simple_stream(b"\r\n"),
    "cr": simple_stream(b"\r"),
    "reasoning_tools": reasoning_tool_stream(),
    "content_length": http_response(
        sse_body(chat_chunk(content="a"), chat_chunk(content="b")), transfer="length"
    ),
    "completions_api": http_response(
        sse_body(completion_chunk("x"), completion_chunk("yz", finish_reason="length"))
    ),
    "no_done": http_response(sse_body(chat_chunk(content="a"), done=False)),
    "malformed_between": http_response(
        sse_body(chat_chunk(content="a"), b'{"choices": [', chat_chunk(content="b"))
    ),
    "after_done": http_response(
        [*sse_body(chat_chunk(content="a")), sse_event(chat_chunk(content="late"))]
    ),
    "non_streaming": http_response(
        [
            b'{"id":"c","object":"chat.completion","choices":[{"index":0,"message":'
            b'{"role":"assistant","content":"Hi there"},"finish_reason":"stop"}],'
            b'"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}'
        ],
        content_type=b"application/json",
        transfer="length",
    ),
    "http_429": http_response(
        [b'{"error": {"message": "Rate limit reached", "type": "rate_limit", "code": 429}}'],
        status=429,
        reason=b"Too Many Requests",
        content_type=b"application/json",
        transfer="length",
    ),
    "endpoint_error_event": http_response(
        sse_body(chat_chunk(content="a"), b'{"error": {"message": "engine died"}}')
    ),
}


def feed_pieces(mod: ModuleType, pieces: list[bytes], **kwargs: Any) -> tuple[list[Any], Any]:
    decoder = mod.ResponseDecoder(**kwargs)
    events: list[Any] = []
    for i, piece in enumerate(pieces):
        events += decoder.feed(piece, 1000 + i)
    return events, decoder


def milestone_bytes(mod: ModuleType, data: bytes) -> dict[str, Any]:
    """The index of the byte completing each milestone, from a byte-by-byte
    run (R12's stamps too, and ``chunk_times``: every content-bearing event's)."""
    decoder = mod.ResponseDecoder(record_chunk_times=True)
    at: dict[str, Any] = {}
    for i in range(len(data)):
        for event in decoder.feed(data[i : i + 1], i):
            at.setdefault(type(event).__name__, i)
    summary = decoder.summary()
    at["t_done"] = summary.t_done
    at["t_first_content"] = summary.t_first_content
    at["t_second"] = summary.t_second
    at["chunk_times"] = summary.chunk_times
    return at


def expected_gaps(stamps: Sequence[int]) -> TokenGaps | None:
    """R12 by its definition: each content-bearing event's stamp minus the
    latest before it, floored at 0, in exact figures and buckets."""
    gaps = [max(0, t - max(stamps[:i])) for i, t in enumerate(stamps) if i]
    if not gaps:
        return None
    counts = Counter(bucket_of(g) for g in gaps)
    return TokenGaps(
        count=len(gaps),
        zero=gaps.count(0),
        sum_ns=sum(gaps),
        min_ns=min(gaps),
        max_ns=max(gaps),
        buckets=pack_buckets(sorted(counts.items())),
    )


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_split_gives_the_same_summary_and_exact_stamps(
    response: ModuleType, name: str
) -> None:
    data = FIXTURES[name]
    _, whole = feed_pieces(response, [data])
    reference = whole.summary()
    assert reference.complete
    at = milestone_bytes(response, data)
    for k in range(1, len(data)):
        events, decoder = feed_pieces(response, [data[:k], data[k:]])
        summary = decoder.summary()

        def stamp(byte_index: int, split: int = k) -> int:
            return 1000 if byte_index < split else 1001

        assert [type(e).__name__ for e in events] == [
            type(e).__name__ for e in feed_pieces(response, [data])[0]
        ]
        for event in events:
            assert event.t_ns == stamp(at[type(event).__name__]), (k, event)
        assert summary.t_done == stamp(at["t_done"])
        if reference.t_first is not None:
            assert summary.t_first == stamp(at["FirstToken"])
        assert summary.t_head == stamp(at["ResponseHead"])
        for field in ("t_first_content", "t_second"):  # R12
            byte = at[field]
            assert getattr(summary, field) == (None if byte is None else stamp(byte)), (k, field)
        assert summary.gaps == expected_gaps([stamp(t) for t in at["chunk_times"]]), k
        timeless = {
            "t_head": 0,
            "t_first": 0,
            "t_done": 0,
            "first_chunk_error": None,
            "t_first_content": None,
            "t_second": None,
            "gaps": None,
        }
        assert _replace(summary, **timeless) == _replace(reference, **timeless), k


def _replace(summary: ResponseSummary, **fields: Any) -> ResponseSummary:
    return msgspec.structs.replace(summary, **fields)


def test_simple_stream_summary(response: ModuleType) -> None:
    events, decoder = feed_pieces(response, [FIXTURES["lf"]])
    assert [type(e) for e in events] == [ResponseHead, FirstToken, ResponseComplete]
    s = decoder.summary()
    assert s.status == 200
    assert s.content == "Hello é世😀"
    assert s.content_after_first == "lo é世😀"
    assert s.reasoning == s.reasoning_after_first == ""
    assert s.finish_reason == "stop"
    assert s.usage == USAGE
    assert s.events == 7  # six chunks and [DONE]
    assert s.content_events == 3  # the role chunk's "" is not a first token
    assert s.done and s.complete and s.keep_alive and s.ok
    assert s.chunk_errors == 0 and s.first_chunk_error is None
    assert s.error_code == 0 and s.error_message == ""
    assert s.chunk_times is None


def test_one_byte_at_a_time(response: ModuleType) -> None:
    data = FIXTURES["crlf"]
    _, whole = feed_pieces(response, [data])
    _, bytewise = feed_pieces(response, [data[i : i + 1] for i in range(len(data))])
    assert bytewise.summary().content == whole.summary().content == "Hello é世😀"


def test_reasoning_and_tool_calls_rebuilt_per_index(response: ModuleType) -> None:
    _, decoder = feed_pieces(response, [FIXTURES["reasoning_tools"]])
    s = decoder.summary()
    assert s.reasoning == "Thinking."
    assert s.reasoning_after_first == "ing."
    assert s.content == s.content_after_first == "ok"
    assert s.tool_calls == (
        ToolCall(index=0, id="call_1", type="function", name="get", arguments='{"city": "Paris"}'),
        ToolCall(index=1, id="call_2", type="function", name="now", arguments="{}"),
    )
    # The first token was reasoning: every tool-call byte came after it.
    assert s.tool_calls_after_first == s.tool_calls
    assert s.finish_reason == "tool_calls"
    assert s.content_events == 7


def test_tool_call_as_first_token(response: ModuleType) -> None:
    data = http_response(
        sse_body(
            chat_chunk(tool_calls=[tool_call_fragment(0, call_id="c", name="f", arguments="{")]),
            chat_chunk(tool_calls=[tool_call_fragment(0, arguments="}")]),
        )
    )
    _, decoder = feed_pieces(response, [data])
    s = decoder.summary()
    assert s.t_first == 1000
    assert s.tool_calls_after_first == (ToolCall(0, "c", "function", "", "}"),)


def test_non_streaming_body_is_one_chunk(response: ModuleType) -> None:
    data = FIXTURES["non_streaming"]
    events, decoder = feed_pieces(response, [data[:-5], data[-5:]])
    assert [type(e) for e in events] == [ResponseHead, FirstToken, ResponseComplete]
    s = decoder.summary()
    assert s.content == "Hi there"
    assert s.content_after_first == ""
    assert s.t_first == s.t_done == 1001
    assert s.events == 0 and s.content_events == 1
    assert s.usage == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}


def test_http_error_status_is_reported_not_raised(response: ModuleType) -> None:
    _, decoder = feed_pieces(response, [FIXTURES["http_429"]])
    s = decoder.summary()
    assert s.status == 429 and s.complete and not s.ok
    assert s.error_code == ErrorCode.HTTP_STATUS
    assert s.error_message == "HTTP 429: Rate limit reached"
    assert s.content == "" and s.t_first is None


def test_error_body_without_json(response: ModuleType) -> None:
    data = http_response(
        [b"upstream\n  connect error " + b"x" * 400],
        status=502,
        content_type=b"text/plain",
        transfer="length",
    )
    _, decoder = feed_pieces(response, [data])
    message = decoder.summary().error_message
    assert message.startswith("HTTP 502: upstream connect error xxx")
    assert len(message) == len("HTTP 502: ") + 300 and message.endswith("...")


def test_malformed_event_is_isolated(response: ModuleType) -> None:
    _, decoder = feed_pieces(response, [FIXTURES["malformed_between"]])
    s = decoder.summary()
    assert s.content == "ab"
    assert s.chunk_errors == 1
    assert s.first_chunk_error is not None
    assert s.first_chunk_error.code == ErrorCode.JSON_SYNTAX
    assert s.first_chunk_error.data == b'{"choices": ['
    assert s.first_chunk_error.t_ns == 1000
    assert s.ok


def test_endpoint_error_event(response: ModuleType) -> None:
    _, decoder = feed_pieces(response, [FIXTURES["endpoint_error_event"]])
    s = decoder.summary()
    assert s.chunk_errors == 1
    assert s.first_chunk_error is not None
    assert s.first_chunk_error.code == ErrorCode.ENDPOINT_ERROR
    assert s.first_chunk_error.detail == "engine died"
    assert s.first_chunk_error.message == "endpoint sent an error: engine died"


def test_missing_done_ends_at_end_of_message(response: ModuleType) -> None:
    data = FIXTURES["no_done"]
    _, decoder = feed_pieces(response, [data[:-3], data[-3:]])
    s = decoder.summary()
    assert not s.done and s.complete
    assert s.t_done == 1001  # the read that completed the message


def test_events_after_done_are_counted_and_ignored(response: ModuleType) -> None:
    _, decoder = feed_pieces(response, [FIXTURES["after_done"]])
    s = decoder.summary()
    assert s.content == "a" and s.events_after_done == 1 and s.events == 3


def test_record_chunk_times(response: ModuleType) -> None:
    data = FIXTURES["lf"]
    cut = data.index(b'"lo"')
    _, decoder = feed_pieces(response, [data[:cut], data[cut:]], record_chunk_times=True)
    assert decoder.summary().chunk_times == (1000, 1001, 1001)


def test_utf8_split_inside_a_character(response: ModuleType) -> None:
    data = FIXTURES["lf"]
    cut = data.index("😀".encode()) + 2
    _, decoder = feed_pieces(response, [data[:cut], data[cut:]])
    assert decoder.summary().content.endswith("😀")


def test_close_delimited_body_ends_at_eof(response: ModuleType) -> None:
    data = http_response(sse_body(chat_chunk(content="a"), done=False), transfer="close")
    decoder = response.ResponseDecoder()
    assert [type(e) for e in decoder.feed(data, 1)] == [ResponseHead, FirstToken]
    events = decoder.feed_eof(2)
    assert [type(e) for e in events] == [ResponseComplete]
    assert not events[0].keep_alive
    s = decoder.summary()
    assert s.complete and s.t_done == 2 and not s.keep_alive
    with pytest.raises(LocalProtocolError):
        decoder.feed(b"x", 3)


def test_eof_mid_stream_is_incomplete(response: ModuleType) -> None:
    data = FIXTURES["lf"]
    decoder = response.ResponseDecoder()
    decoder.feed(data[:200], 1)
    with pytest.raises(IncompleteResponse) as info:
        decoder.feed_eof(2)
    assert info.value.position == 200
    s = decoder.summary()
    assert not s.complete and s.error_code == ErrorCode.INCOMPLETE
    assert "at byte 200" in s.error_message
    with pytest.raises(IncompleteResponse):  # sticky
        decoder.feed(b"x", 3)


@pytest.mark.parametrize("transfer", ["chunked", "length"])
def test_eof_after_done_completes_the_response(response: ModuleType, transfer: str) -> None:
    """R4: [DONE] came, only the framing's end (the last chunk, the rest of
    a Content-Length) is missing when the connection closes."""
    # a comment after [DONE], so that the Content-Length runs past it too
    body = [*sse_body(chat_chunk(content="a"), chat_chunk(content="b")), b": bye\n\n"]
    data = http_response(body, transfer=transfer)
    cut = data.rindex(b"[DONE]") + len(b"[DONE]\n\n")
    decoder = response.ResponseDecoder()
    decoder.feed(data[:cut], 1)
    events = decoder.feed_eof(2)
    assert [type(e) for e in events] == [ResponseComplete]
    assert not events[0].keep_alive
    s = decoder.summary()
    assert s.ok and s.complete and s.done and not s.keep_alive
    assert s.content == "ab" and s.t_done == 1  # the [DONE] read, not the close


def test_eof_before_any_byte_is_incomplete(response: ModuleType) -> None:
    decoder = response.ResponseDecoder()
    with pytest.raises(IncompleteResponse) as info:
        decoder.feed_eof(1)
    assert info.value.position == 0


def test_eof_after_completion_is_clean(response: ModuleType) -> None:
    decoder = response.ResponseDecoder()
    decoder.feed(FIXTURES["lf"], 1)
    assert decoder.feed_eof(2) == []
    assert decoder.summary().ok


def test_bytes_after_the_response_are_counted(response: ModuleType) -> None:
    decoder = response.ResponseDecoder()
    events = decoder.feed(FIXTURES["lf"] + b"HTTP/1.1 200 OK\r\n", 1)
    assert isinstance(events[-1], ResponseComplete) and not events[-1].keep_alive
    decoder.feed(b"more", 2)
    s = decoder.summary()
    assert s.unexpected_bytes == len(b"HTTP/1.1 200 OK\r\n") + 4
    assert not s.keep_alive and s.ok


def test_an_empty_read_after_the_message_is_no_unexpected_byte(response: ModuleType) -> None:
    # R7 counts bytes; an empty piece (a read of nothing) keeps the
    # connection reusable (the twin used to drop keep_alive on it)
    data = http_response(sse_body(chat_chunk(content="a")), transfer="length")
    _, decoder = feed_pieces(response, [data, b""])
    summary = decoder.summary()
    assert summary.complete and summary.keep_alive and summary.unexpected_bytes == 0


def test_framing_error_after_good_events(response: ModuleType) -> None:
    data = FIXTURES["lf"]
    last_chunk = data.rindex(b"\r\n0\r\n") + 2
    decoder = response.ResponseDecoder()
    with pytest.raises(InvalidChunkSize):
        decoder.feed(data[:last_chunk] + b"zz\r\n", 1)
    s = decoder.summary()
    assert s.content == "Hello é世😀"  # what came before the error counts
    assert s.error_code == ErrorCode.CHUNK_SIZE and not s.complete


def test_content_encoding_is_refused(response: ModuleType) -> None:
    data = http_response(
        sse_body(chat_chunk(content="a")), headers=[(b"Content-Encoding", b"gzip")]
    )
    decoder = response.ResponseDecoder()
    with pytest.raises(UnsupportedContentEncoding) as info:
        decoder.feed(data, 1)
    assert info.value.position == 0
    ok = http_response(
        sse_body(chat_chunk(content="a")), headers=[(b"content-encoding", b"Identity")]
    )
    assert feed_pieces(response, [ok])[1].summary().ok


def test_event_too_large_counts_body_bytes(response: ModuleType) -> None:
    first = sse_event(chat_chunk(content="a"))
    data = http_response([first, b"data: " + b"x" * 400])
    decoder = response.ResponseDecoder(max_event=300)
    with pytest.raises(EventTooLarge) as info:
        decoder.feed(data, 1)
    assert info.value.position == len(first) + 300
    assert decoder.summary().content == "a"


def test_body_too_large(response: ModuleType) -> None:
    data = http_response([b"{" + b" " * 99 + b"}"], content_type=b"application/json")
    decoder = response.ResponseDecoder(max_body=64)
    with pytest.raises(BodyTooLarge) as info:
        decoder.feed(data, 1)
    assert info.value.position == 64


def test_accepts_any_buffer(response: ModuleType) -> None:
    data = FIXTURES["lf"]
    for piece in (bytearray(data), memoryview(data)):
        decoder = response.ResponseDecoder()
        decoder.feed(piece, 1)
        assert decoder.summary().content == "Hello é世😀"


def test_media_type_with_parameters(response: ModuleType) -> None:
    data = http_response(
        sse_body(chat_chunk(content="a")), content_type=b"Text/Event-Stream; charset=utf-8"
    )
    assert feed_pieces(response, [data])[1].summary().content == "a"


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_implementations_agree(name: str) -> None:
    decoders = {impl: wire_module("response", impl) for impl in IMPLS}
    data = FIXTURES[name]
    results = []
    for mod in decoders.values():
        for step in (1, 7, 64, len(data)):
            pieces = [data[i : i + step] for i in range(0, len(data), step)]
            events, decoder = feed_pieces(mod, pieces, record_chunk_times=True)
            results.append((step, events, decoder.summary()))
    half = len(results) // 2
    assert results[:half] == results[half:]


def test_long_stream_of_alternating_shapes_agrees() -> None:
    # One OpenAI decoder serves every event of a response, and the compiled
    # one remembers the shape of the last chunk (mlpe_oai.c, "The
    # template"): runs of chunks of one shape, shapes switching, strings
    # with escapes and non-ASCII text, and broken chunks between them.
    texts = ["a", "", " é", "世界", "😀", '"q"', "\\", "\n\t", "\u2028", "x" * 40]
    chunks = [chat_chunk(role="assistant", content="")]
    expected_content, expected_reasoning, expected_arguments = [], [], []
    for i in range(600):
        text = texts[i % len(texts)] + str(i)
        shape = (i // 7) % 5 if i % 11 else i % 3
        if shape in (0, 3):
            chunks.append(chat_chunk(content=text))
            expected_content.append(text)
        elif shape == 1:
            chunks.append(chat_chunk(reasoning=text))
            expected_reasoning.append(text)
        elif shape == 2:
            chunks.append(chat_chunk(tool_calls=[tool_call_fragment(0, arguments=text)]))
            expected_arguments.append(text)
        else:  # broken: a raw control character, invalid UTF-8, a stray quote
            bad = [b"\x01", b"\xff", b'"'][i % 3]
            chunks.append(chat_chunk(content="X").replace(b'"X"', b'"X' + bad + b'"'))
        if i % 97 == 0:
            chunks.append(chat_chunk(content=text, extra={"stamp": i}))
            expected_content.append(text)
    chunks += [chat_chunk(finish_reason="stop"), chat_chunk(choices=False, usage=USAGE)]
    data = http_response(sse_body(*chunks))
    results = []
    for impl in IMPLS:
        mod = wire_module("response", impl)
        for step in (len(data), 1500, 61):
            pieces = [data[i : i + step] for i in range(0, len(data), step)]
            events, decoder = feed_pieces(mod, pieces, record_chunk_times=True)
            summary = decoder.summary()
            assert summary.content == "".join(expected_content)
            assert summary.reasoning == "".join(expected_reasoning)
            assert summary.tool_calls[0].arguments == "".join(expected_arguments)
            assert summary.chunk_errors == sum(1 for c in chunks if b'"X' in c)
            results.append((step, events, summary))
    half = len(results) // 2
    assert results[:half] == results[half:]
