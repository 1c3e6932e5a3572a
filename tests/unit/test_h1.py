"""HTTP/1.1 response framing (``csrc/mlpe_h1.h`` rules 1-10), over both
implementations.

Every test runs on the compiled decoder and on the pure-Python twin through
the ``h1`` fixture.  Error positions are absolute stream offsets, written out
by hand: ``OK_LINE`` (17 bytes) starts most streams, so the first field line
starts at byte 17.  The split tests at the end feed every fixture stream
whole, one byte at a time and cut in two at every index, and require the same
events, timestamps and errors every time and from both implementations.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from mlpe_fast.errors import (
    ChunkSizeTooLong,
    HeadTooLarge,
    IncompleteResponse,
    InvalidChunkData,
    InvalidChunkSize,
    InvalidContentLength,
    InvalidHeader,
    InvalidStatusLine,
    LineTooLong,
    LocalProtocolError,
    ProtocolError,
    TooManyHeaders,
    UnexpectedData,
    UnexpectedUpgrade,
    UnsupportedTransferCoding,
    UnsupportedVersion,
)
from mlpe_fast.wire.events import BodyData, ResponseComplete, ResponseHead
from tests.conftest import IMPLS, wire_module

OK_LINE = b"HTTP/1.1 200 OK\r\n"
CHUNKED = b"Transfer-Encoding: chunked\r\n"

Event = ResponseHead | BodyData | ResponseComplete


# -- helpers --------------------------------------------------------------------------------------


def decode(h1: ModuleType, stream: bytes, *, eof: bool = False, **limits: int) -> list[Event]:
    """Feeds ``stream`` whole with t_ns=1 (and EOF with t_ns=2)."""
    decoder = h1.H1Decoder(**limits)
    events: list[Event] = decoder.feed(stream, 1)
    if eof:
        events += decoder.feed_eof(2)
    return events


def failure(
    h1: ModuleType, stream: bytes, *, eof: bool = False, **limits: int
) -> tuple[type[ProtocolError], int]:
    """The (class, position) of the error ``stream`` raises."""
    with pytest.raises(ProtocolError) as info:
        decode(h1, stream, eof=eof, **limits)
    return type(info.value), info.value.position


def head_of(h1: ModuleType, stream: bytes, **limits: int) -> ResponseHead:
    events = decode(h1, stream, **limits)
    heads = [e for e in events if isinstance(e, ResponseHead)]
    assert len(heads) == 1, events
    return heads[0]


def body_of(events: list[Event]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, BodyData))


def kinds(events: list[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def field(name: bytes, value: bytes) -> bytes:
    return name + b": " + value + b"\r\n"


def chunked_response(*chunks: bytes, trailers: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    return OK_LINE + CHUNKED + b"\r\n" + body + b"0\r\n" + trailers + b"\r\n"


# -- status line (RFC 9112 section 4) -------------------------------------------------------------


def test_minimal_response(h1: ModuleType) -> None:
    events = decode(h1, OK_LINE + b"Content-Length: 2\r\n\r\nhi")
    assert events == [
        ResponseHead(200, b"OK", ((b"content-length", b"2"),), b"1.1", True, 1),
        BodyData(b"hi", 1),
        ResponseComplete((), True, 1),
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"HTTP/1.1 200 OK\r\n", b"OK"),
        (b"HTTP/1.1 200 \r\n", b""),  # empty reason
        (b"HTTP/1.1 200\r\n", b""),  # SP absent too, as many servers send it
        (b"HTTP/1.1 404 Not  Found\t!\r\n", b"Not  Found\t!"),
        (b"HTTP/1.1 200 \xc3\xa9t\xc3\xa9 \xff\r\n", b"\xc3\xa9t\xc3\xa9 \xff"),  # obs-text
        (b"HTTP/1.1 200 OK\n", b"OK"),  # bare LF (rule 3)
    ],
)
def test_reason_phrase(h1: ModuleType, line: bytes, reason: bytes) -> None:
    assert head_of(h1, line + b"Content-Length: 0\r\n\r\n").reason == reason


@pytest.mark.parametrize(
    ("line", "position"),
    [
        (b"", 0),  # an empty line: its terminator is the offending byte
        (b"http/1.1 200 OK", 0),  # HTTP-name is case-sensitive
        (b"HTTX/1.1 200 OK", 3),
        (b"HTTP/A.1 200 OK", 5),
        (b"HTTP/1,1 200 OK", 6),
        (b"HTTP/1.x 200 OK", 7),
        (b"HTTP/1.1", 8),  # ends too early: the CR
        (b"HTTP/1.1  200 OK", 9),
        (b"HTTP/1.1 2x0 OK", 10),
        (b"HTTP/1.1 20 OK", 11),
        (b"HTTP/1.1 2000 OK", 12),
        (b"HTTP/1.1 200\tOK", 12),
        (b"HTTP/1.1 200 O\x01K", 14),
        (b"HTTP/1.1 200 OK\x7f", 15),
        (b"HTTP/1.1 200 OK\x00", 15),
        (b"HTTP/1.1 200 OK\rX", 15),  # a stray CR is itself the offending byte
        (b"\x16\x03\x01\x02\x00", 0),  # a TLS record on a plain connection
    ],
)
def test_bad_status_line(h1: ModuleType, line: bytes, position: int) -> None:
    assert failure(h1, line + b"\r\n\r\n") == (InvalidStatusLine, position)


@pytest.mark.parametrize(
    ("status", "expected"),
    [(b"000", 0), (b"099", 99), (b"299", 299), (b"600", 600), (b"999", 999)],
)
def test_any_three_digit_code_is_a_final_response(
    h1: ModuleType, status: bytes, expected: int
) -> None:
    # RFC 9110 section 15: the caller treats codes outside 100-599 as 5xx
    events = decode(h1, b"HTTP/1.1 " + status + b" X\r\nContent-Length: 1\r\n\r\nz")
    assert kinds(events) == ["ResponseHead", "BodyData", "ResponseComplete"]
    assert events[0].status == expected  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("version", "keep_alive"),
    [(b"1.0", False), (b"1.1", True), (b"1.2", True), (b"1.9", True)],
)
def test_http_1_versions(h1: ModuleType, version: bytes, keep_alive: bool) -> None:
    head = head_of(h1, b"HTTP/" + version + b" 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert head.http_version == version  # as received; 1.x >= 1.1 is handled as 1.1
    assert head.keep_alive is keep_alive


@pytest.mark.parametrize("version", [b"HTTP/2.0 200 OK", b"HTTP/2 200", b"HTTP/0.9 200 OK"])
def test_other_major_versions(h1: ModuleType, version: bytes) -> None:
    assert failure(h1, version + b"\r\n\r\n") == (UnsupportedVersion, 5)


def test_status_line_errors_are_absolute_offsets(h1: ModuleType) -> None:
    first = OK_LINE + b"Content-Length: 0\r\n\r\n"
    assert failure(h1, first + b"HTTP/1.1 20 OK\r\n") == (InvalidStatusLine, len(first) + 11)


# -- header fields (RFC 9112 section 5, RFC 9110 section 5) ---------------------------------------


def test_field_names_lower_cased_values_trimmed(h1: ModuleType) -> None:
    head = head_of(
        h1,
        OK_LINE
        + b"Content-TYPE: text/plain\r\n"
        + b"X-Padded: \t a  b \t \r\n"
        + b"X-Empty:\r\n"
        + b"X-Empty-Too:   \r\n"
        + b"x-obs-text: caf\xc3\xa9 \xff\r\n"
        + b"X-Ctl: a\x01b\r\n"  # other CTLs may be kept (RFC 9110 section 5.5)
        + b"X-Token: !#$%&'*+-.^_`|~09azAZ\r\n"
        + b"!#$%&'*+-.^_`|~: token chars\r\n"
        + b"X-Bare-LF: yes\n"
        + b"Content-Length: 0\r\n\r\n",
    )
    assert head.headers == (
        (b"content-type", b"text/plain"),
        (b"x-padded", b"a  b"),
        (b"x-empty", b""),
        (b"x-empty-too", b""),
        (b"x-obs-text", b"caf\xc3\xa9 \xff"),
        (b"x-ctl", b"a\x01b"),
        (b"x-token", b"!#$%&'*+-.^_`|~09azAZ"),
        (b"!#$%&'*+-.^_`|~", b"token chars"),
        (b"x-bare-lf", b"yes"),
        (b"content-length", b"0"),
    )


def test_repeated_fields_keep_order(h1: ModuleType) -> None:
    head = head_of(h1, OK_LINE + b"A: 1\r\nB: 2\r\nA: 3\r\nContent-Length: 0\r\n\r\n")
    assert head.headers == ((b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"content-length", b"0"))


@pytest.mark.parametrize(
    ("lines", "value"),
    [
        (b"X: a\r\n  b\r\n\tc\r\n", b"a b c"),
        (b"X: a  \r\n \t b  \r\n", b"a b"),  # the fold and the OWS around it: one SP
        (b"X:\r\n  b\r\n", b"b"),  # folded onto an empty value
        (b"X: a\r\n   \r\n", b"a"),  # a fold line of whitespace only
        (b"X: a\n b\n", b"a b"),
    ],
)
def test_obs_fold(h1: ModuleType, lines: bytes, value: bytes) -> None:
    head = head_of(h1, OK_LINE + lines + b"Y: z\r\nContent-Length: 0\r\n\r\n")
    assert head.headers[0] == (b"x", value)
    assert head.headers[1] == (b"y", b"z")


@pytest.mark.parametrize(
    ("line", "position"),
    [
        (b" X: v", 17),  # whitespace before the first field: nothing to continue
        (b"\tX: v", 17),
        (b"X : v", 18),  # whitespace before the colon (RFC 9112 section 5.1)
        (b"X\t: v", 18),
        (b"Bad Name: v", 20),
        (b"X(y): v", 18),
        (b"X\xc3\xa9: v", 18),
        (b": v", 17),  # empty name
        (b"NoColon", 24),  # ends too early: the CR
        (b"X: a\x00b", 21),
        (b"X: a\rb", 21),
        (b"X: a\r", 21),  # CR CR LF: the first CR is in the value
        (b"\rX: a", 17),
    ],
)
def test_bad_field_line(h1: ModuleType, line: bytes, position: int) -> None:
    assert failure(h1, OK_LINE + line + b"\r\nContent-Length: 0\r\n\r\n") == (
        InvalidHeader,
        position,
    )


def test_bad_field_line_after_good_ones(h1: ModuleType) -> None:
    stream = OK_LINE + b"A: 1\r\n" + b"B: 2\r\n  folded\r\n" + b"C : 3\r\n\r\n"
    assert failure(h1, stream) == (InvalidHeader, 17 + 6 + 6 + 10 + 1)


# -- Content-Length (RFC 9110 section 8.6, RFC 9112 section 6.3) ----------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        [b"5"],
        [b"5, 5"],
        [b"5,5 ,\t5"],
        [b"5", b"5"],
        [b"5, 5", b"5"],
        [b"005"],
        [b"0000000000000000000000000000005"],  # leading zeros are not an overflow
    ],
)
def test_content_length(h1: ModuleType, fields: list[bytes]) -> None:
    head = b"".join(field(b"Content-Length", v) for v in fields)
    events = decode(h1, OK_LINE + head + b"\r\nhello")
    assert kinds(events) == ["ResponseHead", "BodyData", "ResponseComplete"]
    assert body_of(events) == b"hello"
    assert events[-1] == ResponseComplete((), True, 1)


def test_content_length_zero(h1: ModuleType) -> None:
    events = decode(h1, OK_LINE + b"Content-Length: 0\r\n\r\n")
    assert kinds(events) == ["ResponseHead", "ResponseComplete"]


def test_largest_content_length(h1: ModuleType) -> None:
    stream = OK_LINE + b"Content-Length: 9223372036854775807\r\n\r\nabc"
    assert kinds(decode(h1, stream)) == ["ResponseHead", "BodyData"]


@pytest.mark.parametrize(
    ("fields", "position"),
    [
        ([b"5, 6"], 17),
        ([b"5", b"6"], 17 + 19),  # the second field, where the conflict shows
        ([b"5", b"5", b"4, 4"], 17 + 19 * 2),
        ([b"5x"], 17),
        ([b"-5"], 17),
        ([b"+5"], 17),
        ([b"0x5"], 17),
        ([b"5 5"], 17),
        ([b""], 17),
        ([b"5,"], 17),  # an empty element is no value
        ([b"\xd9\xa5"], 17),  # ARABIC-INDIC DIGIT FIVE is not a DIGIT
        ([b"9223372036854775808"], 17),  # 2^63
        ([b"99999999999999999999999"], 17),
    ],
)
def test_bad_content_length(h1: ModuleType, fields: list[bytes], position: int) -> None:
    head = b"".join(field(b"Content-Length", v) for v in fields)
    assert failure(h1, OK_LINE + head + b"\r\nhello") == (InvalidContentLength, position)


def test_content_length_error_waits_for_the_head(h1: ModuleType) -> None:
    # framing fields are judged when the head is complete (rule 5), so a
    # later malformed line is reported first
    stream = OK_LINE + b"Content-Length: x\r\nBad Name: 1\r\n\r\n"
    assert failure(h1, stream) == (InvalidHeader, 17 + 19 + 3)


def test_content_length_folded(h1: ModuleType) -> None:
    stream = OK_LINE + b"Content-Length: 5\r\n 5\r\n\r\nhello"  # the value is "5 5"
    assert failure(h1, stream) == (InvalidContentLength, 17)


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_no_body_statuses(h1: ModuleType, status: bytes) -> None:
    # RFC 9112 section 6.3 item 1: no body whatever the fields say
    for framing in (b"Content-Length: 100\r\n", CHUNKED, b"Content-Length: x\r\n", b""):
        stream = b"HTTP/1.1 " + status + b"\r\n" + framing + b"\r\n"
        events = decode(h1, stream + OK_LINE + b"Content-Length: 1\r\n\r\nz")
        assert kinds(events) == [
            "ResponseHead",
            "ResponseComplete",
            "ResponseHead",
            "BodyData",
            "ResponseComplete",
        ]
        assert events[1] == ResponseComplete((), True, 1)


# -- Transfer-Encoding and chunked coding (RFC 9112 sections 6.1, 7.1) ----------------------------


def test_chunked(h1: ModuleType) -> None:
    events = decode(h1, chunked_response(b"hello", b" ", b"world"))
    assert events == [
        ResponseHead(200, b"OK", ((b"transfer-encoding", b"chunked"),), b"1.1", True, 1),
        BodyData(b"hello world", 1),
        ResponseComplete((), True, 1),
    ]


@pytest.mark.parametrize(
    "value",
    [b"chunked", b"Chunked", b"CHUNKED", b" chunked ", b", chunked", b"chunked ,", b", , chunked"],
)
def test_chunked_spellings(h1: ModuleType, value: bytes) -> None:
    stream = OK_LINE + field(b"Transfer-Encoding", value) + b"\r\n3\r\nabc\r\n0\r\n\r\n"
    assert body_of(decode(h1, stream)) == b"abc"


def test_transfer_encoding_split_over_fields(h1: ModuleType) -> None:
    stream = OK_LINE + b"Transfer-Encoding:\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert kinds(decode(h1, stream)) == ["ResponseHead", "ResponseComplete"]


@pytest.mark.parametrize(
    "size_line",
    [
        b"5",
        b"05",
        b"0000000000000005",  # 16 digits, counting leading zeros
        b"5;name=value",
        b"5;name",
        b'5;a=1;b;c="x;y \\" z"',  # quoted strings pass unparsed
        b"5 ;name=value",  # BWS
        b"5\t; name = value",
        b"5   ",
        b"5;\xff obs-text",
    ],
)
def test_chunk_size_lines(h1: ModuleType, size_line: bytes) -> None:
    stream = OK_LINE + CHUNKED + b"\r\n" + size_line + b"\r\nhello\r\n0;last=1\r\n\r\n"
    events = decode(h1, stream)
    assert body_of(events) == b"hello"
    assert kinds(events)[-1] == "ResponseComplete"


def test_chunk_size_hex_digits(h1: ModuleType) -> None:
    data = bytes(range(256)) * 2
    stream = OK_LINE + CHUNKED + b"\r\n" + b"1Ff\r\n" + data[:0x1FF] + b"\r\n0\r\n\r\n"
    assert body_of(decode(h1, stream)) == data[:0x1FF]


def test_bare_lf_everywhere(h1: ModuleType) -> None:
    stream = b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\nhello\n0\nT: v\n\n"
    events = decode(h1, stream)
    assert body_of(events) == b"hello"
    assert events[-1] == ResponseComplete(((b"t", b"v"),), True, 1)


def test_trailers(h1: ModuleType) -> None:
    stream = chunked_response(b"abc", trailers=b"X-Trailer: v\r\nY: w\r\n  folded\r\n")
    events = decode(h1, stream)
    assert events[-1] == ResponseComplete(((b"x-trailer", b"v"), (b"y", b"w folded")), True, 1)
    # trailers are apart from the head's fields and never frame the message
    assert events[0].headers == ((b"transfer-encoding", b"chunked"),)  # type: ignore[union-attr]
    stream = chunked_response(b"abc", trailers=b"Connection: close\r\nContent-Length: x\r\n")
    assert decode(h1, stream)[-1].keep_alive is True  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("trailers", "error"),
    [
        (b" folded\r\n", (InvalidHeader, 0)),  # nothing to continue
        (b"Bad Name: v\r\n", (InvalidHeader, 3)),
        (b"T: a\x00\r\n", (InvalidHeader, 4)),
    ],
)
def test_bad_trailers(
    h1: ModuleType, trailers: bytes, error: tuple[type[ProtocolError], int]
) -> None:
    stream = chunked_response(b"abc", trailers=trailers)
    start = stream.index(b"0\r\n", len(OK_LINE)) + 3
    assert failure(h1, stream) == (error[0], start + error[1])


@pytest.mark.parametrize(
    ("size_line", "error", "index"),
    [
        (b"g", InvalidChunkSize, 0),
        (b"", InvalidChunkSize, 0),  # empty: the terminator
        (b" 5", InvalidChunkSize, 0),
        (b"-5", InvalidChunkSize, 0),
        (b"0x5", InvalidChunkSize, 1),
        (b"5x", InvalidChunkSize, 1),
        (b"5 x", InvalidChunkSize, 2),
        (b"5;a\x01", InvalidChunkSize, 3),
        (b"5;a\x7f", InvalidChunkSize, 3),
        (b"5\rx", InvalidChunkSize, 1),  # a stray CR
        (b"00000000000000005", ChunkSizeTooLong, 16),  # 17 digits
        (b"123456789abcdef01", ChunkSizeTooLong, 16),
        (b"8000000000000000", ChunkSizeTooLong, 15),  # 2^63
        (b"ffffffffffffffff", ChunkSizeTooLong, 15),
        (b"ffffffffffffffffffff;x", ChunkSizeTooLong, 15),
    ],
)
def test_bad_chunk_size(
    h1: ModuleType, size_line: bytes, error: type[ProtocolError], index: int
) -> None:
    head = OK_LINE + CHUNKED + b"\r\n"
    first = b"1\r\nA\r\n"
    stream = head + first + size_line + b"\r\nhello\r\n0\r\n\r\n"
    assert failure(h1, stream) == (error, len(head) + len(first) + index)


def test_largest_chunk_size(h1: ModuleType) -> None:
    stream = OK_LINE + CHUNKED + b"\r\n7fffffffffffffff\r\nabc"
    events = decode(h1, stream)
    assert kinds(events) == ["ResponseHead", "BodyData"]


@pytest.mark.parametrize(
    ("after_data", "index"),
    [(b"X", 0), (b"\rX", 1), (b"\r\r\n", 1), (b" \r\n", 0), (b"\n\n", 1)],
)
def test_chunk_data_not_followed_by_crlf(h1: ModuleType, after_data: bytes, index: int) -> None:
    head = OK_LINE + CHUNKED + b"\r\n3\r\nabc"
    stream = head + after_data + b"0\r\n\r\n"
    error = failure(h1, stream)
    if after_data == b"\n\n":  # LF ends the data; the empty line is no chunk size
        assert error == (InvalidChunkSize, len(head) + index)
    else:
        assert error == (InvalidChunkData, len(head) + index)


@pytest.mark.parametrize(
    ("fields", "position"),
    [
        ([b"gzip, chunked"], 17),
        ([b"gzip"], 17),
        ([b"chunked, gzip"], 17),
        ([b"identity"], 17),
        ([b"chunked;q=1"], 17),
        ([b"chunked, chunked"], 17),
        ([b"chunked", b"chunked"], 17 + 28),
        ([b"gzip", b"chunked"], 17),
        ([b"chunked", b"gzip"], 17 + 28),
        ([b""], 17),  # lists no coding at all
        ([b" , "], 17),
    ],
)
def test_unsupported_transfer_coding(h1: ModuleType, fields: list[bytes], position: int) -> None:
    head = b"".join(field(b"Transfer-Encoding", v) for v in fields)
    stream = OK_LINE + head + b"\r\n0\r\n\r\n"
    assert failure(h1, stream) == (UnsupportedTransferCoding, position)


def test_transfer_encoding_overrides_content_length(h1: ModuleType) -> None:
    for content_length in (b"100", b"3", b"x"):  # even an invalid one is ignored
        stream = (
            OK_LINE
            + field(b"Content-Length", content_length)
            + CHUNKED
            + b"\r\n3\r\nabc\r\n0\r\n\r\n"
        )
        events = decode(h1, stream)
        assert body_of(events) == b"abc"
        # RFC 9112 section 6.3 item 3: the connection must close afterwards
        assert events[0].keep_alive is False  # type: ignore[union-attr]
        assert events[-1] == ResponseComplete((), False, 1)


def test_http_1_0_with_transfer_encoding_must_close(h1: ModuleType) -> None:
    stream = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n" + CHUNKED + b"\r\n0\r\n\r\n"
    events = decode(h1, stream)
    assert [e.keep_alive for e in events] == [False, False]  # type: ignore[union-attr]


# -- close-delimited bodies (RFC 9112 section 6.3 item 8) -----------------------------------------


def test_close_delimited_body(h1: ModuleType) -> None:
    decoder = h1.H1Decoder()
    assert decoder.feed(OK_LINE + b"X: y\r\n\r\nabc", 1) == [
        ResponseHead(200, b"OK", ((b"x", b"y"),), b"1.1", False, 1),
        BodyData(b"abc", 1),
    ]
    assert decoder.feed(b"def", 2) == [BodyData(b"def", 2)]
    assert decoder.feed(b"", 3) == []
    assert decoder.feed_eof(4) == [ResponseComplete((), False, 4)]
    assert decoder.keep_alive is False
    assert decoder.offset == len(OK_LINE) + 8 + 6


def test_close_delimited_empty_body(h1: ModuleType) -> None:
    events = decode(h1, b"HTTP/1.0 200 OK\r\n\r\n", eof=True)
    assert kinds(events) == ["ResponseHead", "ResponseComplete"]


# -- interim responses (rule 2) -------------------------------------------------------------------


def test_interim_responses_are_skipped(h1: ModuleType) -> None:
    stream = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        + b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nContent-Length: 9\r\n\r\n"
        + OK_LINE
        + b"Content-Length: 2\r\n\r\nhi"
    )
    assert decode(h1, stream) == [
        ResponseHead(200, b"OK", ((b"content-length", b"2"),), b"1.1", True, 1),
        BodyData(b"hi", 1),
        ResponseComplete((), True, 1),
    ]


def test_interim_framing_fields_are_ignored(h1: ModuleType) -> None:
    stream = (
        b"HTTP/1.1 100 Continue\r\nContent-Length: x\r\nTransfer-Encoding: gzip\r\n\r\n"
        + OK_LINE
        + b"Content-Length: 0\r\n\r\n"
    )
    assert kinds(decode(h1, stream)) == ["ResponseHead", "ResponseComplete"]


def test_switching_protocols_is_an_error(h1: ModuleType) -> None:
    upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n"
    assert failure(h1, upgrade) == (UnexpectedUpgrade, 9)
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    assert failure(h1, interim + upgrade) == (UnexpectedUpgrade, len(interim) + 9)
    # 101 is judged before the rest of its line
    assert failure(h1, b"HTTP/1.1 101 \x00\r\n\r\n") == (UnexpectedUpgrade, 9)


def test_eof_after_interim_response_is_incomplete(h1: ModuleType) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    assert failure(h1, interim, eof=True) == (IncompleteResponse, len(interim))


# -- keep-alive (rule 7, RFC 9112 section 9.3) ----------------------------------------------------


@pytest.mark.parametrize(
    ("version", "fields", "keep_alive"),
    [
        (b"1.1", b"Content-Length: 0\r\n", True),
        (b"1.1", b"Connection: close\r\nContent-Length: 0\r\n", False),
        (b"1.1", b"Connection: Close\r\nContent-Length: 0\r\n", False),
        (b"1.1", b"Connection: keep-alive, close\r\nContent-Length: 0\r\n", False),
        (b"1.1", b"Connection: keep-alive\r\nConnection: close\r\nContent-Length: 0\r\n", False),
        (b"1.1", b"Connection: Keep-Alive, Upgrade\r\nContent-Length: 0\r\n", True),
        (b"1.1", b"Connection: upgrade\r\nContent-Length: 0\r\n", True),
        (b"1.1", b"Connection: closed\r\nContent-Length: 0\r\n", True),
        (b"1.1", b"Connection:\r\n close\r\nContent-Length: 0\r\n", False),  # folded
        (b"1.1", CHUNKED, True),
        (b"1.1", b"", False),  # close-delimited
        (b"1.1", b"Content-Length: 0\r\n" + CHUNKED, False),
        (b"1.2", b"Content-Length: 0\r\n", True),
        (b"1.0", b"Content-Length: 0\r\n", False),
        (b"1.0", b"Connection: keep-alive\r\nContent-Length: 0\r\n", True),
        (b"1.0", b"Connection: Keep-Alive, Upgrade\r\nContent-Length: 0\r\n", True),
        (b"1.0", b"Connection: keep-alive, close\r\nContent-Length: 0\r\n", False),
        (b"1.0", b"Connection: keep-alive\r\n", False),  # close-delimited
        (b"1.0", b"Connection: keep-alive\r\n" + CHUNKED, False),
    ],
)
def test_keep_alive(h1: ModuleType, version: bytes, fields: bytes, keep_alive: bool) -> None:
    stream = b"HTTP/" + version + b" 200 OK\r\n" + fields + b"\r\n"
    if CHUNKED in fields:
        stream += b"0\r\n\r\n"
    decoder = h1.H1Decoder()
    events = decoder.feed(stream, 1) + decoder.feed_eof(2)
    assert events[0].keep_alive is keep_alive
    assert events[-1].keep_alive is keep_alive
    assert decoder.keep_alive is keep_alive


def test_keep_alive_property_follows_complete_messages(h1: ModuleType) -> None:
    decoder = h1.H1Decoder()
    assert decoder.keep_alive is False  # no message yet
    decoder.feed(OK_LINE + b"Content-Length: 1\r\n\r\nx", 1)
    assert decoder.keep_alive is True
    decoder.feed(OK_LINE + b"Connection: close\r\nContent-Length: 1\r\n\r\n", 2)
    assert decoder.keep_alive is True  # the second message is not complete yet
    decoder.feed(b"x", 3)
    assert decoder.keep_alive is False


# -- several responses on one connection (rule 8) -------------------------------------------------


def test_back_to_back_responses(h1: ModuleType) -> None:
    first = OK_LINE + b"Content-Length: 3\r\n\r\nabc"
    second = b"HTTP/1.1 404 Not Found\r\n" + CHUNKED + b"\r\n2\r\nno\r\n0\r\n\r\n"
    third = b"HTTP/1.1 204 No Content\r\n\r\n"
    decoder = h1.H1Decoder()
    events = decoder.feed(first + second + third, 7)
    assert events == [
        ResponseHead(200, b"OK", ((b"content-length", b"3"),), b"1.1", True, 7),
        BodyData(b"abc", 7),
        ResponseComplete((), True, 7),
        ResponseHead(404, b"Not Found", ((b"transfer-encoding", b"chunked"),), b"1.1", True, 7),
        BodyData(b"no", 7),
        ResponseComplete((), True, 7),
        ResponseHead(204, b"No Content", (), b"1.1", True, 7),
        ResponseComplete((), True, 7),
    ]
    assert decoder.offset == len(first + second + third)
    assert decoder.feed_eof(8) == []  # a clean close between messages


@pytest.mark.parametrize(
    "response",
    [
        OK_LINE + b"Connection: close\r\nContent-Length: 2\r\n\r\nhi",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi",
        OK_LINE + b"Connection: close\r\n" + CHUNKED + b"\r\n0\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
    ],
)
def test_unexpected_data_after_closing_response(h1: ModuleType, response: bytes) -> None:
    decoder = h1.H1Decoder()
    assert kinds(decoder.feed(response, 1))[-1] == "ResponseComplete"
    assert decoder.feed(b"", 2) == []
    with pytest.raises(UnexpectedData) as info:
        decoder.feed(b"HTTP/1.1 200 OK\r\n", 3)
    assert info.value.position == len(response)
    assert failure(h1, response + b"\r\n") == (UnexpectedData, len(response))


# -- limits (rule 10) -----------------------------------------------------------------------------


def test_max_line(h1: ModuleType) -> None:
    status = b"HTTP/1.1 200 " + b"x" * 7  # 20 bytes
    assert len(status) == 20
    fine = status + b"\r\nContent-Length: 0\r\n\r\n"
    assert kinds(decode(h1, fine, max_line=20)) == ["ResponseHead", "ResponseComplete"]
    assert failure(h1, fine, max_line=19) == (LineTooLong, 19)
    assert kinds(decode(h1, fine.replace(b"\r\n", b"\n"), max_line=20))[-1] == "ResponseComplete"
    # a field line of exactly max_line bytes, then one byte more
    line = b"X-Long: " + b"v" * 12
    for terminator in (b"\r\n", b"\n"):
        stream = OK_LINE + line + terminator + b"Content-Length: 0" + terminator * 2
        assert kinds(decode(h1, stream, max_line=20))[-1] == "ResponseComplete"
        assert failure(h1, stream, max_line=19) == (LineTooLong, 17 + 19)


def test_max_line_counts_bytes_as_they_arrive(h1: ModuleType) -> None:
    # no line end in sight: the byte over the limit is enough to fail
    decoder = h1.H1Decoder(max_line=20)
    decoder.feed(OK_LINE + b"X: " + b"v" * 17, 1)
    with pytest.raises(LineTooLong) as info:
        decoder.feed(b"v", 2)
    assert info.value.position == 17 + 20
    # a CR at the limit may be the terminator's: it waits for the next byte
    decoder = h1.H1Decoder(max_line=20)
    assert decoder.feed(OK_LINE + b"X: " + b"v" * 17 + b"\r", 1) == []
    with pytest.raises(LineTooLong) as info:
        decoder.feed(b"v", 2)
    assert info.value.position == 17 + 20


def test_max_line_on_chunk_lines_and_trailers(h1: ModuleType) -> None:
    head = OK_LINE + CHUNKED + b"\r\n"  # its longest line has 26 bytes
    size_line = b"3;" + b"e" * 30  # 32 bytes
    stream = head + size_line + b"\r\nabc\r\n0\r\n\r\n"
    assert body_of(decode(h1, stream, max_line=32)) == b"abc"
    assert failure(h1, stream, max_line=31) == (LineTooLong, len(head) + 31)
    trailer = b"T: " + b"t" * 25  # 28 bytes
    stream = head + b"0\r\n" + trailer + b"\r\n\r\n"
    assert kinds(decode(h1, stream, max_line=28))[-1] == "ResponseComplete"
    assert failure(h1, stream, max_line=27) == (LineTooLong, len(head) + 3 + 27)


def test_max_head(h1: ModuleType) -> None:
    stream = OK_LINE + b"X: 12345\r\n\r\n"  # 29 bytes, blank line included
    assert kinds(decode(h1, stream + b"abc", max_head=29)) == ["ResponseHead", "BodyData"]
    assert failure(h1, stream, max_head=28) == (HeadTooLarge, 28)
    assert failure(h1, stream, max_head=10) == (HeadTooLarge, 10)
    # each interim head has a budget of its own
    interim = b"HTTP/1.1 100 Continue\r\nX: 123\r\n\r\n"  # 33 bytes
    final = OK_LINE + b"Content-Length: 0\r\n\r\n"  # 38 bytes
    assert kinds(decode(h1, interim + final, max_head=38))[-1] == "ResponseComplete"
    assert failure(h1, interim + final, max_head=37) == (HeadTooLarge, len(interim) + 37)
    # and so has the head of a later response on the connection
    assert kinds(decode(h1, final * 3, max_head=38)) == ["ResponseHead", "ResponseComplete"] * 3


def test_max_head_wins_a_tie_with_max_line(h1: ModuleType) -> None:
    stream = b"HTTP/1.1 200\r\n" + b"X: 1234567890123\r\n\r\n"
    # the byte at 14 + 14 is over both budgets
    assert failure(h1, stream, max_line=14, max_head=28) == (HeadTooLarge, 28)
    assert failure(h1, stream, max_line=14, max_head=29) == (LineTooLong, 28)
    assert failure(h1, stream, max_line=15, max_head=28) == (HeadTooLarge, 28)


def test_max_head_on_trailer_section(h1: ModuleType) -> None:
    head = OK_LINE + CHUNKED + b"\r\n"  # 47 bytes
    trailers = b"A: " + b"a" * 45 + b"\r\n\r\n"  # 52 bytes
    stream = head + b"0\r\n" + trailers
    assert kinds(decode(h1, stream, max_head=52))[-1] == "ResponseComplete"
    assert failure(h1, stream, max_head=51) == (HeadTooLarge, len(head) + 3 + 51)


def test_max_headers(h1: ModuleType) -> None:
    fields = b"A: 1\r\nB: 2\r\n folded\r\nC: 3\r\n"  # 3 fields: folds do not count
    stream = OK_LINE + fields + b"\r\n"
    assert decode(h1, stream, max_headers=3, eof=True)[0].headers[1] == (b"b", b"2 folded")  # type: ignore[union-attr]
    assert failure(h1, stream, max_headers=2) == (TooManyHeaders, 17 + 6 + 6 + 9)
    # trailers are counted apart
    stream = OK_LINE + CHUNKED + b"\r\n0\r\n" + fields + b"\r\n"
    assert kinds(decode(h1, stream, max_headers=3))[-1] == "ResponseComplete"
    trailer_start = len(OK_LINE + CHUNKED) + 5
    assert failure(h1, stream, max_headers=2) == (TooManyHeaders, trailer_start + 21)


def test_max_chunk_size_digits(h1: ModuleType) -> None:
    head = OK_LINE + CHUNKED + b"\r\n"
    stream = head + b"0003\r\nabc\r\n0\r\n\r\n"
    assert body_of(decode(h1, stream, max_chunk_size_digits=4)) == b"abc"
    assert failure(h1, stream, max_chunk_size_digits=3) == (ChunkSizeTooLong, len(head) + 3)
    # the last chunk's size too
    stream = head + b"0000\r\n\r\n"
    assert failure(h1, stream, max_chunk_size_digits=3) == (ChunkSizeTooLong, len(head) + 3)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_line": 0},
        {"max_head": -1},
        {"max_headers": 2**30 + 1},
        {"max_chunk_size_digits": True},
        {"max_line": 8.0},
        {"max_line": "8"},
    ],
)
def test_bad_limits(h1: ModuleType, limits: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        h1.H1Decoder(**limits)


def test_largest_limits(h1: ModuleType) -> None:
    big = 2**30
    decoder = h1.H1Decoder(big, big, big, big)
    assert kinds(decoder.feed(chunked_response(b"x"), 1))[-1] == "ResponseComplete"


# -- end of stream --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stream",
    [
        b"H",
        b"HTTP/1.1 200 OK\r",
        OK_LINE,
        OK_LINE + b"Content-Length: 5\r\n",
        OK_LINE + b"Content-Length: 5\r\n\r\n",
        OK_LINE + b"Content-Length: 5\r\n\r\nhell",
        OK_LINE + CHUNKED + b"\r\n",
        OK_LINE + CHUNKED + b"\r\n5",
        OK_LINE + CHUNKED + b"\r\n5\r\nhel",
        OK_LINE + CHUNKED + b"\r\n5\r\nhello",
        OK_LINE + CHUNKED + b"\r\n5\r\nhello\r",
        OK_LINE + CHUNKED + b"\r\n0\r\n",
        OK_LINE + CHUNKED + b"\r\n0\r\nT: v\r\n",
        OK_LINE + b"Content-Length: 0\r\n\r\nH",  # the next response had begun
    ],
)
def test_incomplete_response(h1: ModuleType, stream: bytes) -> None:
    decoder = h1.H1Decoder()
    decoder.feed(stream, 1)
    with pytest.raises(IncompleteResponse) as info:
        decoder.feed_eof(2)
    assert info.value.position == len(stream) == decoder.offset


def test_clean_close(h1: ModuleType) -> None:
    assert decode(h1, b"", eof=True) == []
    assert kinds(decode(h1, OK_LINE + b"Content-Length: 0\r\n\r\n", eof=True)) == [
        "ResponseHead",
        "ResponseComplete",
    ]


# -- error state and API misuse -------------------------------------------------------------------


def test_errors_are_sticky(h1: ModuleType) -> None:
    decoder = h1.H1Decoder()
    good = OK_LINE + b"Content-Length: 0\r\n\r\n"
    assert len(decoder.feed(good, 1)) == 2
    with pytest.raises(InvalidStatusLine) as first:
        decoder.feed(b"HTTP/1.1 20 OK\r\n" + good, 2)  # the events of this call are lost
    assert first.value.position == len(good) + 11
    assert decoder.offset == len(good)  # as before the failing call
    for _ in range(2):
        with pytest.raises(InvalidStatusLine) as again:
            decoder.feed(good, 3)
        assert again.value == first.value
        assert again.value is not first.value
    with pytest.raises(InvalidStatusLine) as at_eof:
        decoder.feed_eof(4)
    assert at_eof.value == first.value
    with pytest.raises(LocalProtocolError):
        decoder.feed(good, 5)
    assert decoder.offset == len(good)


def test_feed_after_feed_eof(h1: ModuleType) -> None:
    decoder = h1.H1Decoder()
    decoder.feed(OK_LINE + b"\r\nbody", 1)
    assert kinds(decoder.feed_eof(2)) == ["ResponseComplete"]
    with pytest.raises(LocalProtocolError):
        decoder.feed(b"", 3)
    with pytest.raises(LocalProtocolError):
        decoder.feed_eof(4)


def test_feed_eof_error_then_misuse(h1: ModuleType) -> None:
    decoder = h1.H1Decoder()
    decoder.feed(b"HTTP/1.1", 1)
    with pytest.raises(IncompleteResponse):
        decoder.feed_eof(2)
    with pytest.raises(LocalProtocolError):
        decoder.feed(b"", 3)


def test_protocol_errors_are_value_errors(h1: ModuleType) -> None:
    with pytest.raises(ValueError, match="malformed HTTP status line at byte 0"):
        decode(h1, b"garbage\r\n")


@pytest.mark.parametrize(
    "wrap",
    [bytes, bytearray, memoryview, lambda b: memoryview(b"--" + b + b"--")[2:-2]],
    ids=["bytes", "bytearray", "memoryview", "memoryview-slice"],
)
def test_buffer_inputs(h1: ModuleType, wrap: Any) -> None:
    stream = chunked_response(b"hello")
    decoder = h1.H1Decoder()
    events = decoder.feed(wrap(stream[:40]), 1) + decoder.feed(wrap(stream[40:]), 2)
    assert body_of(events) == b"hello"
    assert all(type(e.data) is bytes for e in events if isinstance(e, BodyData))
    assert events[0].reason == b"OK" and type(events[0].reason) is bytes  # type: ignore[union-attr]


def test_buffer_inputs_rejected(h1: ModuleType) -> None:
    decoder = h1.H1Decoder()
    with pytest.raises(TypeError):
        decoder.feed("HTTP/1.1 200 OK\r\n", 1)
    with pytest.raises(BufferError):
        decoder.feed(memoryview(b"HTTP/1.1 200 OK\r\n")[::2], 1)
    assert decoder.offset == 0


def test_twin_feed_into() -> None:
    """The twin's result-by-result entry point, used by the whole-response
    twin as mlpe_response.c uses mlpe_h1_feed."""
    twin = wire_module("h1", "py")
    first = OK_LINE + b"Content-Length: 3\r\n\r\nabc"
    decoder = twin.H1Decoder()
    events: list[Event] = []
    assert decoder.feed_into(first + b"rest", 1, events, stop_after_message=True) == len(first)
    assert kinds(events) == ["ResponseHead", "BodyData", "ResponseComplete"]
    assert decoder.offset == len(first)
    # without stopping, everything is used; events before an error are kept
    decoder = twin.H1Decoder()
    events = []
    with pytest.raises(InvalidChunkData):
        decoder.feed_into(first + OK_LINE + CHUNKED + b"\r\n2\r\nxyZ", 1, events)
    assert kinds(events) == [
        *("ResponseHead", "BodyData", "ResponseComplete"),
        *("ResponseHead", "BodyData"),
    ]
    assert body_of(events) == b"abcxy"


# -- timestamps and body runs ---------------------------------------------------------------------


def test_each_event_carries_the_stamp_of_the_piece_that_completed_it(h1: ModuleType) -> None:
    decoder = h1.H1Decoder()
    head = OK_LINE + b"Content-Length: 4\r\n\r\n"
    assert decoder.feed(head[:-1], 10) == []
    assert decoder.feed(head[-1:] + b"ab", 20) == [
        ResponseHead(200, b"OK", ((b"content-length", b"4"),), b"1.1", True, 20),
        BodyData(b"ab", 20),
    ]
    assert decoder.feed(b"cd" + OK_LINE, 30) == [
        BodyData(b"cd", 30),
        ResponseComplete((), True, 30),
    ]
    assert decoder.feed(b"\r\n", 40) == [
        ResponseHead(200, b"OK", (), b"1.1", False, 40),
    ]


def test_one_body_event_per_message_and_piece(h1: ModuleType) -> None:
    chunks = [bytes([65 + i % 26]) * 160 for i in range(400)]
    stream = chunked_response(*chunks)
    decoder = h1.H1Decoder()
    events = decoder.feed(stream[:60], 1) + decoder.feed(stream[60:], 2)
    assert kinds(events) == ["ResponseHead", "BodyData", "BodyData", "ResponseComplete"]
    assert [len(e.data) for e in events if isinstance(e, BodyData)] == [60 - 51, 400 * 160 - 9]
    assert body_of(events) == b"".join(chunks)
    # two messages in one piece: one BodyData each
    twice = decode(h1, stream + stream)
    assert kinds(twice) == ["ResponseHead", "BodyData", "ResponseComplete"] * 2


# -- every split (rule 1) -------------------------------------------------------------------------

# (id, stream, feed_eof at the end, limits)
SPLIT_STREAMS: list[tuple[str, bytes, bool, dict[str, int]]] = [
    ("content-length", OK_LINE + b"Content-Length: 5\r\nX: y\r\n\r\nhello", False, {}),
    ("chunked", chunked_response(b"hello", b", ", b"world!"), False, {}),
    (
        "chunked-ext-trailers",
        OK_LINE
        + CHUNKED
        + b'\r\n5;a="b;c"\r\nhello\r\n001 \r\n!\r\n0;x\r\nT: 1\r\nU: 2\r\n  3\r\n\r\n',
        False,
        {},
    ),
    (
        "bare-lf",
        b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\nhello\n0\n\n",
        False,
        {},
    ),
    (
        "interim-and-two-responses",
        b"HTTP/1.1 100 Continue\r\n\r\n"
        + OK_LINE
        + b"Content-Length: 2\r\n\r\nhi"
        + b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
        False,
        {},
    ),
    ("close-delimited", b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nto the end", True, {}),
    ("folded-head", OK_LINE + b"A: 1\r\n 2\r\n\t3\r\nContent-Length: 1\r\n\r\nz", False, {}),
    ("clean-close", OK_LINE + b"Content-Length: 1\r\n\r\nz", True, {}),
    ("incomplete-body", OK_LINE + b"Content-Length: 9\r\n\r\nshort", True, {}),
    ("incomplete-chunk", OK_LINE + CHUNKED + b"\r\n5\r\nhel", True, {}),
    ("bad-status", b"HTTP/1.1 2x0 OK\r\n\r\n", False, {}),
    ("bad-version", b"HTTP/2.0 200 OK\r\n\r\n", False, {}),
    ("upgrade", b"HTTP/1.1 101 Switching Protocols\r\n\r\n", False, {}),
    ("bad-header", OK_LINE + b"A: 1\r\nB : 2\r\n\r\n", False, {}),
    ("nul-in-value", OK_LINE + b"A: 1\x002\r\n\r\n", False, {}),
    ("stray-cr", OK_LINE + b"A: 1\r2\r\n\r\n", False, {}),
    ("conflicting-length", OK_LINE + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nz", False, {}),
    ("gzip", OK_LINE + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", False, {}),
    ("bad-chunk-size", OK_LINE + CHUNKED + b"\r\n5\r\nhello\r\nzz\r\n", False, {}),
    ("chunk-too-long", OK_LINE + CHUNKED + b"\r\n00000000000000001\r\nx\r\n", False, {}),
    ("chunk-2-63", OK_LINE + CHUNKED + b"\r\n8000000000000000\r\n", False, {}),
    ("bad-chunk-end", OK_LINE + CHUNKED + b"\r\n2\r\nab\rX0\r\n\r\n", False, {}),
    (
        "unexpected-data",
        OK_LINE + b"Connection: close\r\nContent-Length: 1\r\n\r\nzHTTP",
        False,
        {},
    ),
    ("line-limit", OK_LINE + b"X: " + b"v" * 17 + b"\r\r\n\r\n", False, {"max_line": 20}),
    ("line-limit-cr", OK_LINE + b"X: " + b"v" * 17 + b"\r\n\r\n", False, {"max_line": 19}),
    ("head-limit", OK_LINE + b"X: 12345\r\n\r\n", False, {"max_head": 28}),
    (
        "head-limit-tie",
        b"HTTP/1.1 200\r\nX: 1234567890123\r\n\r\n",
        False,
        {"max_line": 14, "max_head": 28},
    ),
    ("headers-limit", OK_LINE + b"A: 1\r\nB: 2\r\nC: 3\r\n\r\n", False, {"max_headers": 2}),
    (
        "trailer-limit",
        OK_LINE + CHUNKED + b"\r\n0\r\nA: " + b"a" * 45 + b"\r\n\r\n",
        False,
        {"max_head": 51},
    ),
    (
        "digits-limit",
        OK_LINE + CHUNKED + b"\r\n0003\r\nabc\r\n",
        False,
        {"max_chunk_size_digits": 3},
    ),
]

Normalised = list[tuple[Any, ...]]
Outcome = tuple[Normalised, tuple[type[ProtocolError], int] | None]


def run_pieces(
    h1: ModuleType, pieces: list[tuple[bytes, int]], eof_t_ns: int | None, limits: dict[str, int]
) -> Outcome:
    """Feeds (bytes, t_ns) pieces, then EOF; returns the normalised events and
    the error, if any: body bytes joined per message (their stamps depend on
    the split), head and completion events kept whole."""
    decoder = h1.H1Decoder(**limits)
    events: list[Event] = []
    try:
        for data, t_ns in pieces:
            events += decoder.feed(data, t_ns)
        if eof_t_ns is not None:
            events += decoder.feed_eof(eof_t_ns)
    except ProtocolError as exc:
        return normalise(events), (type(exc), exc.position)
    return normalise(events), None


def normalise(events: list[Event]) -> Normalised:
    out: Normalised = []
    for event in events:
        if isinstance(event, BodyData):
            if out and out[-1][0] == "body":
                out[-1] = ("body", out[-1][1] + event.data)
            else:
                out.append(("body", event.data))
        else:
            out.append(
                (type(event).__name__, *(getattr(event, f) for f in event.__struct_fields__))
            )
    return out


def restamp(events: Normalised, stamp_of: dict[int, int]) -> Normalised:
    """Replaces each completion index (the t_ns of a byte-at-a-time run) by
    the stamp a split gives that byte."""
    return [e if e[0] == "body" else (*e[:-1], stamp_of[e[-1]]) for e in events]


def bytewise(h1: ModuleType, stream: bytes, eof: bool, limits: dict[str, int]) -> Outcome:
    """One byte per piece, stamped with its index; EOF stamped len(stream)."""
    pieces = [(stream[i : i + 1], i) for i in range(len(stream))]
    return run_pieces(h1, pieces, len(stream) if eof else None, limits)


@pytest.mark.parametrize(
    ("stream", "eof", "limits"),
    [pytest.param(s, e, lim, id=name) for name, s, e, lim in SPLIT_STREAMS],
)
def test_every_split(h1: ModuleType, stream: bytes, eof: bool, limits: dict[str, int]) -> None:
    n = len(stream)
    reference, error = bytewise(h1, stream, eof, limits)
    # whole, with one stamp for every byte
    whole = run_pieces(h1, [(stream, 5)], 6 if eof else None, limits)
    if error is None:
        assert whole == (restamp(reference, {**dict.fromkeys(range(n), 5), n: 6}), None)
    else:
        assert whole[1] == error
    # cut in two at every index; the pieces have different stamps
    for cut in range(n + 1):
        stamps = {i: 100 if i < cut else 200 for i in range(n)} | {n: 300}
        events, split_error = run_pieces(
            h1, [(stream[:cut], 100), (stream[cut:], 200)], 300 if eof else None, limits
        )
        assert split_error == error, cut
        if error is None:
            assert events == restamp(reference, stamps), cut


@pytest.mark.parametrize(
    ("stream", "eof", "limits"), [(s, e, lim) for _, s, e, lim in SPLIT_STREAMS]
)
def test_implementations_agree(stream: bytes, eof: bool, limits: dict[str, int]) -> None:
    compiled, twin = (wire_module("h1", impl) for impl in IMPLS)
    assert bytewise(compiled, stream, eof, limits) == bytewise(twin, stream, eof, limits)


def test_split_expectations_are_not_vacuous() -> None:
    # The streams above must cover events and errors alike.
    twin = wire_module("h1", "py")
    outcomes = [bytewise(twin, s, e, lim) for _, s, e, lim in SPLIT_STREAMS]
    errors = {error[0] for _, error in outcomes if error is not None}
    assert len(errors) == 14
    assert sum(error is None for _, error in outcomes) == 8


TRICKY = [
    OK_LINE + b"Content-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc" * 2,
    chunked_response(*(b"x" * n for n in range(1, 40)), trailers=b"A: b\r\n c\r\n"),
    b"HTTP/1.1 103 Early Hints\r\nLink: </>\r\n\r\n" * 3 + OK_LINE + b"\r\ntail",
    OK_LINE + CHUNKED + b"\r\n" + b"1;" + b"e" * 30 + b"\r\nx\r\n" * 5 + b"0\r\n\r\n",
    OK_LINE + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\nabc\n0\n\nX",
    b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nz" * 3,
    OK_LINE + b"X: \x80\xff\x01\x7f\r\nContent-Length: 0\r\n\r\n" + OK_LINE + b"\r",
    OK_LINE + CHUNKED + b"\r\nFFFFFFFFFFFFFFF\r\nabc",
]


@pytest.mark.parametrize("stream", TRICKY)
def test_cross_check_tricky_inputs(stream: bytes) -> None:
    compiled = wire_module("h1", "c")
    twin = wire_module("h1", "py")
    for limits in ({}, {"max_line": 12, "max_head": 60, "max_headers": 2}):
        for eof in (False, True):
            assert bytewise(compiled, stream, eof, limits) == bytewise(twin, stream, eof, limits)
            assert run_pieces(compiled, [(stream, 1)], 2 if eof else None, limits) == run_pieces(
                twin, [(stream, 1)], 2 if eof else None, limits
            )


# -- the twin's fast path for runs of plain chunks ------------------------------------------------

# Streams that enter the twin's _take_whole_chunks and leave it every way it
# can: a run of plain chunks, a chunk cut by the end of a piece (in its data,
# right after its size line, right after its data), size lines it leaves to
# the general path (extension, BWS, bare CR, too many digits, 2^63, the last
# chunk), and chunk data not followed by CRLF.
RUNS = [
    chunked_response(*(bytes([97 + n % 26]) * n for n in (1, 2, 15, 16, 17, 255, 256))),
    OK_LINE + CHUNKED + b"\r\n3\nabc\r\n0A\r\n0123456789\n00f\r\n" + b"e" * 15 + b"\r\n0\r\n\r\n",
    OK_LINE + CHUNKED + b"\r\n2\r\nab\r\n2;x=y\r\ncd\r\n2 \r\nef\r\n2\r\r\ngh\r\n0\r\n\r\n",
    OK_LINE + CHUNKED + b"\r\n2\r\nab\r\n3\r\nabc\nX",
    OK_LINE + CHUNKED + b"\r\n2\r\nab\r\n3\r\nabcX\r\n",
    OK_LINE + CHUNKED + b"\r\n1\r\na\r\n8000000000000000\r\n",
    OK_LINE + CHUNKED + b"\r\n1\r\na\r\n10000000000000000\r\nx\r\n",
    OK_LINE + CHUNKED + b"\r\n1\r\na\r\nFFF\r\nabc",
    chunked_response(b"x" * 5, b"y" * 5, trailers=b"T: 1\r\n") + chunked_response(b"z"),
]


@pytest.mark.parametrize("stream", RUNS)
@pytest.mark.parametrize(
    "limits", [{}, {"max_chunk_size_digits": 2}, {"max_line": 2}], ids=["default", "digits", "line"]
)
def test_twin_chunk_runs_match_compiled_exactly(stream: bytes, limits: dict[str, int]) -> None:
    """Events compared as they come (body runs not joined), whole and cut in
    two and three pieces everywhere."""
    compiled, twin = (wire_module("h1", impl) for impl in IMPLS)

    def run(h1: ModuleType, cuts: list[int]) -> tuple[list[Event], object, int]:
        decoder = h1.H1Decoder(**limits)
        events: list[Event] = []
        bounds = [0, *cuts, len(stream)]
        try:
            for k in range(len(bounds) - 1):
                events += decoder.feed(stream[bounds[k] : bounds[k + 1]], k)
            events += decoder.feed_eof(99)
        except ProtocolError as exc:
            return events, (type(exc), exc.position), decoder.offset
        return events, None, decoder.offset

    n = len(stream)
    splits = [[], *([cut] for cut in range(n + 1))]
    splits += [[a, b] for a in range(0, n + 1, 3) for b in range(a, n + 1, 2)]
    for cuts in splits:
        assert run(twin, cuts) == run(compiled, cuts), cuts


def test_twin_chunk_runs_many_sizes() -> None:
    """More distinct plain size lines than the twin remembers, upper and
    lower case, with and without CR."""
    compiled, twin = (wire_module("h1", impl) for impl in IMPLS)
    chunks = b"".join(
        (b"%X\r\n" if n % 2 else b"%x\n") % n + b"z" * n + b"\r\n" for n in range(1, 160)
    )
    stream = OK_LINE + CHUNKED + b"\r\n" + chunks * 2 + b"0\r\n\r\n"
    for size in (1, 7, 100, 1000, len(stream)):
        pieces = [(stream[i : i + size], i) for i in range(0, len(stream), size)]
        assert run_pieces(twin, pieces, 1, {}) == run_pieces(compiled, pieces, 1, {})
        decoders = twin.H1Decoder(), compiled.H1Decoder()
        twin_events, compiled_events = (
            [e for data, t in pieces for e in decoder.feed(data, t)] for decoder in decoders
        )
        assert twin_events == compiled_events
