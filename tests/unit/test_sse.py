"""The SSE decoder: WHATWG HTML section 9.2.6 ("Interpreting an event stream").

Every test runs over both implementations through the ``sse`` fixture (the
compiled ``_sse_c`` and the pure-Python ``_sse_py``).  Rule numbers are those
of ``csrc/mlpe_sse.h``.

Timestamps: an event carries the ``t_ns`` of the ``feed`` call that completed
it, i.e. of the piece holding the first byte of the line end of the blank line
that dispatched it.  The split tests state each fixture's events with the
offset of that byte (a ``DISPATCH`` mark in the fixture) and derive the stamps
any split must give.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType

import pytest

from mlpe_fast.errors import EventTooLarge, LocalProtocolError, ProtocolError
from mlpe_fast.wire.events import SSEEvent
from tests.conftest import IMPLS, wire_module

T0 = 1_000  # t_ns of the first piece; piece k is stamped T0 + k


def decode(sse: ModuleType, *pieces: bytes, max_event: int | None = None) -> list[SSEEvent]:
    """Feeds the pieces (piece k stamped T0 + k) and returns every event."""
    decoder = sse.SSEDecoder() if max_event is None else sse.SSEDecoder(max_event)
    events: list[SSEEvent] = []
    for k, piece in enumerate(pieces):
        events += decoder.feed(piece, T0 + k)
    return events


def event(data: str, event: str = "message", id: str = "", t_ns: int = T0) -> SSEEvent:
    return SSEEvent(data=data, event=event, id=id, t_ns=t_ns)


def texts(events: Iterable[SSEEvent]) -> list[str]:
    return [e.data for e in events]


# --- rule 1: line ends --------------------------------------------------------------


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_line_ends(sse: ModuleType, end: bytes) -> None:
    stream = b"event: e" + end + b"data: a" + end + b"data: b" + end + end
    assert decode(sse, stream) == [event("a\nb", "e")]


def test_mixed_line_ends(sse: ModuleType) -> None:
    stream = b"data: a\rdata: b\ndata: c\r\n\r\ndata: d\n\r\n"
    assert texts(decode(sse, stream)) == ["a\nb\nc", "d"]


def test_cr_cr_is_a_line_end_and_a_blank_line(sse: ModuleType) -> None:
    assert texts(decode(sse, b"data: a\r\rdata: b\r\r")) == ["a", "b"]


def test_lf_cr_is_a_line_end_and_a_blank_line(sse: ModuleType) -> None:
    assert texts(decode(sse, b"data: a\n\rdata: b\n\r")) == ["a", "b"]


def test_crlf_split_between_pieces_is_one_line_end(sse: ModuleType) -> None:
    # Were the LF a second line end, it would be a blank line dispatching "a".
    assert decode(sse, b"data: a\r", b"\ndata: b\n\n") == [event("a\nb", t_ns=T0 + 1)]


def test_split_crlf_survives_empty_pieces(sse: ModuleType) -> None:
    pieces = (b"data: a\r", b"", b"", b"\ndata: b\n\n")
    assert decode(sse, *pieces) == [event("a\nb", t_ns=T0 + 3)]


def test_cr_at_piece_end_skips_only_one_lf(sse: ModuleType) -> None:
    assert decode(sse, b"data: a\r", b"\n\n") == [event("a", t_ns=T0 + 1)]


def test_cr_at_piece_end_then_other_byte(sse: ModuleType) -> None:
    assert decode(sse, b"data: a\r", b"data: b\r\r") == [event("a\nb", t_ns=T0 + 1)]
    assert decode(sse, b"data: a\r", b"\r") == [event("a", t_ns=T0 + 1)]


def test_cr_inside_a_piece_before_a_later_lf(sse: ModuleType) -> None:
    # Only an LF directly after the CR pairs with it.
    assert texts(decode(sse, b"data: a\rx\n\n")) == ["a"]


# --- rule 2: byte order mark ----------------------------------------------------------


def test_bom_at_stream_start_is_dropped(sse: ModuleType) -> None:
    assert decode(sse, b"\xef\xbb\xbfdata: a\n\n") == [event("a")]


def test_bom_split_across_pieces(sse: ModuleType) -> None:
    pieces = (b"\xef", b"\xbb", b"\xbf", b"data: a\n\n")
    assert decode(sse, *pieces) == [event("a", t_ns=T0 + 3)]


def test_only_one_bom_is_dropped(sse: ModuleType) -> None:
    # The second BOM starts the field name, which is then not "data".
    assert decode(sse, b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n") == []


def test_bom_after_stream_start_is_ordinary_bytes(sse: ModuleType) -> None:
    stream = b"data: a\n\n\xef\xbb\xbfdata: b\n\ndata: \xef\xbb\xbfc\n\n"
    assert texts(decode(sse, stream)) == ["a", "\ufeffc"]


@pytest.mark.parametrize("prefix", [b"\xef", b"\xef\xbb"])
def test_bom_prefix_that_is_not_a_bom_starts_the_first_line(sse: ModuleType, prefix: bytes) -> None:
    # The prefix is the start of a field name: the line is an unknown field.
    assert decode(sse, prefix + b"data: a\n\ndata: b\n\n") == [event("b")]
    # Once a line end follows, the prefix was a line of its own.
    assert decode(sse, prefix + b"\ndata: a\n\n") == [event("a")]
    assert decode(sse, prefix, b"\ndata: a\n\n") == [event("a", t_ns=T0 + 1)]
    assert decode(sse, prefix + b"\rdata: a\n\n") == [event("a")]


def test_bom_prefix_inside_a_value(sse: ModuleType) -> None:
    # Decoded with U+FFFD replacement, as the standard decodes the stream.
    assert decode(sse, b"data: \xef\xbbx\n\n") == [event("\ufffdx")]


def test_partial_bom_is_pending(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    assert decoder.feed(b"\xef\xbb", T0) == []
    assert decoder.pending
    assert decoder.feed(b"\xbf", T0 + 1) == []
    assert not decoder.pending
    assert decoder.feed(b"data: a\n\n", T0 + 2) == [event("a", t_ns=T0 + 2)]


# --- rule 3: dispatch ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "stream",
    [b"\n", b"\n\n\n", b"\r\n\r\n", b"event: x\n\n", b"id: 1\n\n", b": c\n\n", b"retry: 5\n\n"],
)
def test_empty_data_buffer_dispatches_nothing(sse: ModuleType, stream: bytes) -> None:
    assert decode(sse, stream) == []


def test_empty_dispatch_resets_the_event_type(sse: ModuleType) -> None:
    assert decode(sse, b"event: x\n\ndata: a\n\n") == [event("a")]


def test_only_one_trailing_lf_is_removed(sse: ModuleType) -> None:
    assert texts(decode(sse, b"data: a\ndata:\n\n")) == ["a\n"]
    assert texts(decode(sse, b"data:\ndata:\n\n")) == ["\n"]


def test_empty_data_value_is_an_event(sse: ModuleType) -> None:
    # The data buffer is "\n", not empty: an event with empty data.
    assert decode(sse, b"data:\n\n") == [event("")]
    assert decode(sse, b"data: \n\n") == [event("")]


# --- rules 4 and 5: comments and field parsing ---------------------------------------------


def test_comments_are_ignored(sse: ModuleType) -> None:
    stream = b": hello\ndata: a\n:\n: data: b\ndata: c\n:\n\n"
    assert texts(decode(sse, stream)) == ["a\nc"]


def test_comment_only_block_dispatches_nothing(sse: ModuleType) -> None:
    assert decode(sse, b": keep-alive\n\n: ping\n\n") == []


@pytest.mark.parametrize(
    ("line", "data"),
    [
        (b"data:a", "a"),
        (b"data: a", "a"),
        (b"data:  a", " a"),  # only one space removed
        (b"data:\ta", "\ta"),  # a tab is not a space
        (b"data: a ", "a "),  # trailing spaces kept
        (b"data: a:b: c", "a:b: c"),  # only the first colon splits
        (b"data::", ":"),
        (b"data", ""),  # no colon: the whole line is the name, the value is empty
        (b"data: a\x00b", "a\x00b"),  # NUL is ordinary in data
    ],
)
def test_field_value(sse: ModuleType, line: bytes, data: str) -> None:
    assert decode(sse, line + b"\n\n") == [event(data)]


@pytest.mark.parametrize("line", [b"Data: a", b"DATA: a", b"data : a", b" data: a", b"dat: a"])
def test_field_names_are_exact(sse: ModuleType, line: bytes) -> None:
    assert decode(sse, line + b"\n\n") == []


def test_unknown_fields_are_ignored(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    assert decoder.feed(b"foo: bar\nx\n:\n", T0) == []
    assert not decoder.pending
    assert decoder.feed(b"data: a\nfoo\n\n", T0) == [event("a")]


# --- rule 6: fields ----------------------------------------------------------------------


def test_multi_line_data(sse: ModuleType) -> None:
    assert texts(decode(sse, b"data: a\ndata:\ndata: b\n\n")) == ["a\n\nb"]


def test_event_type(sse: ModuleType) -> None:
    stream = b"event: add\ndata: a\n\ndata: b\n\nevent: x\nevent: y\ndata: c\n\nevent:\ndata: d\n\n"
    assert decode(sse, stream) == [event("a", "add"), event("b"), event("c", "y"), event("d")]


def test_event_type_after_data(sse: ModuleType) -> None:
    assert decode(sse, b"data: a\nevent: late\n\n") == [event("a", "late")]


def test_id_persists_across_events(sse: ModuleType) -> None:
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\n\ndata: c\n\nid\ndata: d\n\n"
    expected = [event("a", id="1"), event("b", id="1"), event("c", id="2"), event("d", id="")]
    assert decode(sse, stream) == expected


def test_id_with_nul_is_ignored(sse: ModuleType) -> None:
    stream = b"id: 1\n\nid: a\x00b\ndata: x\n\nid: \x00\ndata: y\n\n"
    assert decode(sse, stream) == [event("x", id="1"), event("y", id="1")]


def test_id_after_data_applies_to_that_event(sse: ModuleType) -> None:
    assert decode(sse, b"data: a\nid: 7\n\n") == [event("a", id="7")]


def test_last_event_id_is_set_by_the_blank_line(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    assert decoder.last_event_id == ""
    decoder.feed(b"id: 7\n", T0)
    # The field awaits its blank line: a reconnection would still send "".
    assert decoder.last_event_id == ""
    assert decoder.pending
    decoder.feed(b"\n", T0)
    assert decoder.last_event_id == "7"
    assert not decoder.pending
    decoder.feed(b"id: 8\ndata: x\n", T0)
    assert decoder.last_event_id == "7"
    assert decoder.feed(b"\n", T0) == [event("x", id="8")]
    assert decoder.last_event_id == "8"


@pytest.mark.parametrize(
    ("value", "retry"),
    [
        (b"1500", 1500),
        (b"0", 0),
        (b"007", 7),
        (str((1 << 63) - 1).encode(), (1 << 63) - 1),
        (str(1 << 63).encode(), None),  # overflow: ignored
        (b"1" * 40, None),
        (b"", None),
        (b" 15", None),  # only one space is removed from the value
        (b"15 ", None),
        (b"-1", None),
        (b"+1", None),
        (b"1.5", None),
        (b"1e3", None),
        (b"0x10", None),
        ("\u0661\u0662".encode(), None),  # Arabic-Indic digits are not ASCII digits
    ],
)
def test_retry(sse: ModuleType, value: bytes, retry: int | None) -> None:
    decoder = sse.SSEDecoder()
    assert decoder.retry is None
    assert decoder.feed(b"retry: " + value + b"\n", T0) == []
    assert decoder.retry == retry
    assert not decoder.pending  # retry applies at once, it opens no event


def test_invalid_retry_keeps_the_previous_value(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    decoder.feed(b"retry: 10\nretry: x\nretry:\nretry\n", T0)
    assert decoder.retry == 10
    decoder.feed(b"retry:20\n", T0)
    assert decoder.retry == 20


# --- rule 7: end of stream --------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream", "pending"),
    [
        (b"", False),
        (b"data: a\n\n", False),
        (b"data: a\n", True),  # no blank line
        (b"data: a", True),  # a partial line
        (b"data: a\n\nevent: x\n", True),
        (b"id: 1\n", True),
        (b"id: \x00\n", False),  # an ignored id
        (b"event:\n", True),
        (b": comment\n", False),  # keep-alives do not open an event
        (b"retry: 1\n", False),
        (b"foo: bar\n", False),
        (b":", True),  # but a partial comment line is a partial line
        (b"data: a\r", True),  # the CR ends the line; the blank line is still to come
        (b"data: a\r\r", False),
        (b"\xef\xbb\xbf", False),
    ],
)
def test_pending(sse: ModuleType, stream: bytes, pending: bool) -> None:
    decoder = sse.SSEDecoder()
    assert not decoder.pending
    decoder.feed(stream, T0)
    assert decoder.pending is pending


def test_incomplete_event_is_discarded_at_eof(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b\n", T0) == [event("a")]
    assert decoder.feed_eof(T0 + 1) == []
    assert decoder.pending  # the caller can tell the stream was cut mid-event


def test_feed_eof_after_complete_stream(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    decoder.feed(b"data: [DONE]\n\n", T0)
    assert decoder.feed_eof(T0) == []
    assert not decoder.pending


def test_decoder_is_closed_after_eof(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    decoder.feed_eof(T0)
    with pytest.raises(LocalProtocolError):
        decoder.feed(b"data: a\n\n", T0)
    with pytest.raises(LocalProtocolError):
        decoder.feed(b"", T0)
    with pytest.raises(LocalProtocolError):
        decoder.feed_eof(T0)


# --- values: [DONE] and UTF-8 ---------------------------------------------------------------


def test_done_sentinel(sse: ModuleType) -> None:
    events = decode(sse, b'data: {"x":1}\n\ndata: [DONE]\n\ndata: [DONE] \n\ndata:[DONE]\n\n')
    assert [e.done for e in events] == [False, True, False, True]


def test_invalid_utf8_is_replaced(sse: ModuleType) -> None:
    stream = b"event: \xffx\nid: \xc3\ndata: \xe2\x82\ndata: \xed\xa0\x80\xf5\n\n"
    expected = event("\ufffd\n\ufffd\ufffd\ufffd\ufffd", "\ufffdx", "\ufffd")
    assert decode(sse, stream) == [expected]
    assert stream.decode("utf-8", "replace").count("\ufffd") == 7  # what the standard decodes


def test_multibyte_utf8_split_across_pieces(sse: ModuleType) -> None:
    stream = "data: é€😀\n\n".encode()
    for cut in range(len(stream) + 1):
        assert texts(decode(sse, stream[:cut], stream[cut:])) == ["é€😀"]


# --- timestamps over every split -------------------------------------------------------------

DISPATCH = None  # in a fixture: the next byte completes an event


@dataclass(frozen=True)
class Case:
    """A stream whose DISPATCH marks precede the byte that completes each event."""

    parts: tuple[bytes | None, ...]
    events: tuple[tuple[str, str, str], ...]  # data, event type, id

    @property
    def stream(self) -> bytes:
        return b"".join(part for part in self.parts if part is not None)

    @property
    def ends(self) -> list[int]:
        """Offset of the byte completing each event."""
        ends: list[int] = []
        offset = 0
        for part in self.parts:
            if part is None:
                ends.append(offset)
            else:
                offset += len(part)
        return ends


CASES = {
    "openai": Case(
        (
            b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n',
            DISPATCH,
            b"\n",
            b'data: {"choices":[{"delta":{"content":"!"}}]}\n',
            DISPATCH,
            b"\n",
            b"data: [DONE]\n",
            DISPATCH,
            b"\n",
        ),
        (
            ('{"choices":[{"delta":{"content":"Hi"}}]}', "message", ""),
            ('{"choices":[{"delta":{"content":"!"}}]}', "message", ""),
            ("[DONE]", "message", ""),
        ),
    ),
    "crlf": Case(
        (
            b"event: a\r\ndata: 1\r\ndata: 2\r\n",
            DISPATCH,
            b"\r\n",
            b"data: 3\r\n",
            DISPATCH,
            b"\r\n",
        ),
        (("1\n2", "a", ""), ("3", "message", "")),
    ),
    "cr": Case(
        (b"id: x\rdata: 1\r", DISPATCH, b"\r\rdata: 2\r", DISPATCH, b"\r"),
        (("1", "message", "x"), ("2", "message", "x")),
    ),
    "mixed": Case(
        # "\r" then "\n" would be one CRLF line end; "\n" then "\r" are two.
        (b"data: 1\r\ndata: 2\rdata: 3\n", DISPATCH, b"\r\n\ndata: 4\n", DISPATCH, b"\r"),
        (("1\n2\n3", "message", ""), ("4", "message", "")),
    ),
    "bom": Case(
        (b"\xef\xbb\xbfevent: e\ndata: 1\n", DISPATCH, b"\n"),
        (("1", "e", ""),),
    ),
    "bom-prefix": Case(
        (b"\xef\xbb\ndata: 1\n", DISPATCH, b"\n", b"\xef\xbb\xbfdata: 2\n\n"),
        (("1", "message", ""),),
    ),
    "fields": Case(
        (
            b": hi\nretry: 10\nid: 7\nevent: t\ndata:a\ndata:  b\nfoo: bar\ndata\n",
            DISPATCH,
            b"\n",
            b"id: \x00\ndata: c\n",
            DISPATCH,
            b"\n",
            b"id\n",
            b"\n",
            b"data: d\n",
            DISPATCH,
            b"\n",
        ),
        (("a\n b\n", "t", "7"), ("c", "message", "7"), ("d", "message", "")),
    ),
    "utf8": Case(
        ("data: é€😀\n".encode(), DISPATCH, b"\n", b"data: \xff\xe2\x82\n", DISPATCH, b"\n"),
        (("é€😀", "message", ""), ("\ufffd\ufffd", "message", "")),
    ),
    "blank-runs": Case(
        (b"\n\n\r\n\r\ndata: x\n", DISPATCH, b"\n\n\n", b"data: y\r\n", DISPATCH, b"\r\n\r\n"),
        (("x", "message", ""), ("y", "message", "")),
    ),
    "incomplete-tail": Case(
        (b"data: 1\n", DISPATCH, b"\n", b"data: 2\n", b"event: never\n"),
        (("1", "message", ""),),
    ),
    "long-line": Case(
        (
            b"data: " + b"x" * 300 + b"\n",
            DISPATCH,
            b"\n",
            b"data: " + b"y" * 70 + b"\n",
            b"data: z\n",
            DISPATCH,
            b"\n",
        ),
        (("x" * 300, "message", ""), ("y" * 70 + "\nz", "message", "")),
    ),
}


def expected_events(case: Case, cuts: Sequence[int]) -> list[SSEEvent]:
    """The events of ``case`` fed as pieces starting at ``cuts`` (piece k stamped T0 + k):
    each carries the stamp of the piece holding the byte that completed it."""
    stamps = [T0 + sum(1 for cut in cuts[1:] if cut <= end) for end in case.ends]
    return [event(d, t, i, stamp) for (d, t, i), stamp in zip(case.events, stamps, strict=True)]


def feed_cuts(sse: ModuleType, stream: bytes, cuts: Sequence[int]) -> tuple[list[SSEEvent], object]:
    """Feeds ``stream`` cut at ``cuts`` (the first is 0); returns the events
    and the decoder's final (retry, last_event_id, pending)."""
    decoder = sse.SSEDecoder()
    bounds = [*cuts, len(stream)]
    events: list[SSEEvent] = []
    for k in range(len(cuts)):
        events += decoder.feed(stream[bounds[k] : bounds[k + 1]], T0 + k)
    return events, (decoder.retry, decoder.last_event_id, decoder.pending)


@pytest.mark.parametrize("name", CASES)
def test_split_whole(sse: ModuleType, name: str) -> None:
    case = CASES[name]
    events, _ = feed_cuts(sse, case.stream, [0])
    assert events == expected_events(case, [0])


@pytest.mark.parametrize("name", CASES)
def test_split_byte_at_a_time(sse: ModuleType, name: str) -> None:
    case = CASES[name]
    cuts = list(range(len(case.stream)))
    events, state = feed_cuts(sse, case.stream, cuts)
    assert events == expected_events(case, cuts)
    assert [e.t_ns for e in events] == [T0 + end for end in case.ends]
    assert state == feed_cuts(sse, case.stream, [0])[1]


@pytest.mark.parametrize("name", CASES)
def test_split_at_every_index(sse: ModuleType, name: str) -> None:
    case = CASES[name]
    whole_state = feed_cuts(sse, case.stream, [0])[1]
    for cut in range(len(case.stream) + 1):
        cuts = [0, cut]
        events, state = feed_cuts(sse, case.stream, cuts)
        assert events == expected_events(case, cuts), cut
        assert state == whole_state, cut


@pytest.mark.parametrize("name", ["crlf", "cr", "mixed", "bom", "bom-prefix", "blank-runs"])
def test_split_at_every_pair_of_indices(sse: ModuleType, name: str) -> None:
    # Three pieces, the middle one possibly empty: a CR, an empty piece, an LF.
    case = CASES[name]
    n = len(case.stream)
    for first in range(n + 1):
        for second in range(first, n + 1):
            cuts = [0, first, second]
            assert feed_cuts(sse, case.stream, cuts)[0] == expected_events(case, cuts), cuts


def test_events_completed_by_one_piece_share_its_stamp(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b", 5) == [event("a", t_ns=5)]
    assert decoder.feed(b"\n\ndata: c\n\n", 9) == [event("b", t_ns=9), event("c", t_ns=9)]


def test_t_ns_is_passed_through(sse: ModuleType) -> None:
    big = 1 << 70
    assert sse.SSEDecoder().feed(b"data: a\n\n", big) == [event("a", t_ns=big)]


# --- max_event -------------------------------------------------------------------------------


def first_error(
    sse: ModuleType, stream: bytes, cuts: Sequence[int], max_event: int
) -> tuple[list[SSEEvent], ProtocolError | None]:
    """Feeds until an error; returns the events returned before it and the error."""
    decoder = sse.SSEDecoder(max_event)
    bounds = [*cuts, len(stream)]
    events: list[SSEEvent] = []
    for k in range(len(cuts)):
        try:
            events += decoder.feed(stream[bounds[k] : bounds[k + 1]], T0 + k)
        except ProtocolError as exc:
            return events, exc
    return events, None


LIMIT_CASES = {
    # One line: its raw bytes, field name included, line end excluded.
    "one-line": (Case((b"data: 12345\n", DISPATCH, b"\n"), (("12345", "message", ""),)), 11, 10),
    "one-line-crlf": (
        Case((b"data: 12345\r\n", DISPATCH, b"\r\n"), (("12345", "message", ""),)),
        11,
        10,
    ),
    # The data buffer counts each value plus its LF: 4 + 9 bytes.
    "two-lines": (
        Case((b"data: aaa\ndata: bbb\n", DISPATCH, b"\n"), (("aaa\nbbb", "message", ""),)),
        13,
        18,
    ),
    # Empty values add their LF: 2 + 5 bytes at the third line.
    "empty-values": (
        Case((b"data:\ndata:\ndata:\n", DISPATCH, b"\n"), (("\n\n", "message", ""),)),
        7,
        16,
    ),
    # An earlier event does not count, and the BOM is not part of a line.
    "after-event": (
        Case(
            (b"\xef\xbb\xbfdata: a\n", DISPATCH, b"\ndata: 12345\n", DISPATCH, b"\n"),
            (("a", "message", ""), ("12345", "message", "")),
        ),
        11,
        22,
    ),
    # Every line is bounded: comments, event types.
    "comment": (
        Case((b": " + b"c" * 20 + b"\ndata: x\n", DISPATCH, b"\n"), (("x", "message", ""),)),
        22,
        21,
    ),
    "event-type": (
        Case((b"data: x\nevent: " + b"e" * 20 + b"\n", DISPATCH, b"\n"), (("x", "e" * 20, ""),)),
        2 + 27,
        8 + 26,
    ),
    # A BOM prefix that is no BOM is the start of the first line.
    "bom-prefix": (Case((b"\xef\xbbxy\ndata\n", DISPATCH, b"\n"), (("", "message", ""),)), 4, 3),
}


@pytest.mark.parametrize("name", LIMIT_CASES)
def test_max_event_boundary_at_every_split(sse: ModuleType, name: str) -> None:
    """max_event = the peak size decodes; one less fails at the first byte over
    it, whatever the split, after returning the events of earlier pieces."""
    case, peak, error_at = LIMIT_CASES[name]
    for cut in range(len(case.stream) + 1):
        cuts = [0, cut]
        assert first_error(sse, case.stream, cuts, peak) == (expected_events(case, cuts), None)
        events, error = first_error(sse, case.stream, cuts, peak - 1)
        assert error == EventTooLarge(error_at), cut
        if error_at < cut:  # the first piece fails: its events are lost with the raise
            assert events == [], cut
        else:  # the first piece's events come first
            expected = zip(expected_events(case, cuts), case.ends, strict=True)
            assert events == [e for e, end in expected if end < cut], cut


def test_max_event_error_position_is_absolute(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder(10)
    assert decoder.feed(b"data: 1234\n\n", T0) == [event("1234")]  # offsets 0-11
    assert decoder.feed(b"da", T0 + 1) == []
    with pytest.raises(EventTooLarge) as info:
        decoder.feed(b"ta: 123456789", T0 + 2)  # line byte 11 is at offset 22
    assert info.value.position == 22
    assert info.value == EventTooLarge(22)


def test_max_event_one(sse: ModuleType) -> None:
    assert decode(sse, b"\n\r\n\r", max_event=1) == []
    assert decode(sse, b"a\n:\n\n", max_event=1) == []
    with pytest.raises(EventTooLarge) as info:
        decode(sse, b"\nab", max_event=1)
    assert info.value.position == 2
    with pytest.raises(EventTooLarge) as info:
        decode(sse, b"\xef", b"\xbb", b"x", max_event=1)  # found out at "x"
    assert info.value.position == 1


def test_max_event_resets_after_dispatch(sse: ModuleType) -> None:
    stream = b"data: 1234\n\n" * 100
    assert len(decode(sse, stream, max_event=10)) == 100


def test_default_max_event_is_1_mib(sse: ModuleType) -> None:
    line = b"data:" + b"x" * ((1 << 20) - 5)  # exactly 1 MiB
    assert texts(decode(sse, line + b"\n\n")) == ["x" * ((1 << 20) - 5)]
    with pytest.raises(EventTooLarge) as info:
        decode(sse, line + b"x\n\n")
    assert info.value.position == 1 << 20


def test_error_state_is_sticky(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder(8)
    with pytest.raises(EventTooLarge) as first:
        decoder.feed(b"data: 123456789\n\n", T0)
    for call in (
        lambda: decoder.feed(b"", T0),
        lambda: decoder.feed(b"\n\n", T0),
        lambda: decoder.feed_eof(T0),
        lambda: decoder.feed(b"data: a\n\n", T0),
    ):
        with pytest.raises(EventTooLarge) as again:
            call()
        assert again.value == first.value
        assert again.value is not first.value


def test_error_loses_events_of_the_same_piece(sse: ModuleType) -> None:
    # Documented: the raise replaces the list of the failing call.
    decoder = sse.SSEDecoder(8)
    with pytest.raises(EventTooLarge):
        decoder.feed(b"data: a\n\ndata: 123456789\n\n", T0)


@pytest.mark.parametrize("max_event", [0, -1, sys.maxsize + 1])
def test_max_event_out_of_range(sse: ModuleType, max_event: int) -> None:
    with pytest.raises(ValueError, match="max_event"):
        sse.SSEDecoder(max_event)


def test_max_event_must_be_an_integer(sse: ModuleType) -> None:
    with pytest.raises(TypeError):
        sse.SSEDecoder(1.5)
    assert sse.SSEDecoder(sys.maxsize).feed(b"data: a\n\n", T0) == [event("a")]


# --- the API ---------------------------------------------------------------------------------


def test_initial_state(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    assert decoder.retry is None
    assert decoder.last_event_id == ""
    assert decoder.pending is False
    assert decoder.feed(b"", T0) == []


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_feed_accepts_buffers(sse: ModuleType, kind: type) -> None:
    decoder = sse.SSEDecoder()
    events = decoder.feed(kind(b"data: a\n\ndata: b"), T0) + decoder.feed(kind(b"\n\n"), T0)
    assert events == [event("a"), event("b")]
    assert all(type(e) is SSEEvent for e in events)


def test_feed_accepts_a_memoryview_slice(sse: ModuleType) -> None:
    raw = memoryview(b"xxdata: a\n\nyy")
    assert sse.SSEDecoder().feed(raw[2:-2], T0) == [event("a")]


def test_feed_rejects_non_buffers(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    with pytest.raises(TypeError):
        decoder.feed("data: a\n\n", T0)
    with pytest.raises(BufferError):
        decoder.feed(memoryview(b"data: a\n\n")[::2], T0)


def test_input_is_not_retained(sse: ModuleType) -> None:
    # An event still open when feed returns must not point into the caller's
    # buffer, which the caller may reuse.
    decoder = sse.SSEDecoder()
    buffer = bytearray(b"data: abc\nevent: t\n")
    assert decoder.feed(buffer, T0) == []
    buffer[:] = b"X" * len(buffer)
    buffer2 = bytearray(b"data: d")
    assert decoder.feed(buffer2, T0) == []
    buffer2[:] = b"Y" * len(buffer2)
    assert decoder.feed(b"\n\n", T0 + 1) == [event("abc\nd", "t", t_ns=T0 + 1)]


def test_feed_raw_reports_undecoded_data(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    out: list[bytes] = [b"earlier"]
    assert decoder.feed_raw(b"event: t\nid: 1\ndata: \xff\xe2\x82\ndata: b\n\ndata:", out) is None
    assert decoder.feed_raw(memoryview(b" [DONE]\r\n\r\n"), out) is None
    assert out == [b"earlier", b"\xff\xe2\x82\nb", b"[DONE]"]
    assert decoder.last_event_id == "1"
    assert decoder.feed(b"data: c\n\n", T0) == [event("c", id="1")]  # one decoder, both ways


def test_feed_raw_keeps_the_events_before_an_error(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder(8)
    out: list[bytes] = []
    with pytest.raises(EventTooLarge) as first:
        decoder.feed_raw(b"data: a\n\ndata: b\n\ndata: 123456789\n\n", out)
    assert out == [b"a", b"b"]
    assert first.value.position == 26
    with pytest.raises(EventTooLarge) as again:
        decoder.feed_raw(b"data: c\n\n", out)
    assert again.value == first.value
    assert out == [b"a", b"b"]


def test_feed_raw_after_eof(sse: ModuleType) -> None:
    decoder = sse.SSEDecoder()
    decoder.feed_eof(T0)
    with pytest.raises(LocalProtocolError):
        decoder.feed_raw(b"data: a\n\n", [])


# --- C against Python ------------------------------------------------------------------------

TRICKY = [
    b"",
    b"\xef\xbb\xbf",
    b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n",
    b"\xef\xbb",
    b"\xefdata: a\n\n\xef\xbb\n\n",
    b"data: a\r\r\n\n\r\rdata: b\r",
    b"data: a\rdata: b\n\rdata: c\r\n\r\n",
    b"data\ndata:\ndata: \ndata:  \n\n",
    b": c\r:\n\rid: 1\rid: \x00\rretry: 12\rretry: 9223372036854775808\r\rdata: x\r\r",
    b"event: \xff\nid: \xe2\x82\ndata: \xed\xa0\x80\n\n",
    b"data: " + b"x" * 200 + b"\ndata: " + b"y" * 200 + b"\n\n",
    b"foo\nfoo: bar\nData: x\n\ndata:[DONE]\n\n",
    b"data: 1\n\ndata: 2\n\ndata: 3",
    b"id: 5\n",
]


def run_everything(
    module: ModuleType, stream: bytes, cuts: Sequence[int], max_event: int
) -> object:
    decoder = module.SSEDecoder(max_event)
    bounds = [*cuts, len(stream)]
    log: list[object] = []
    for k in range(len(cuts)):
        piece = stream[bounds[k] : bounds[k + 1]]
        raw: list[bytes] = []
        try:
            if k % 2:
                decoder.feed_raw(piece, raw)
            else:
                log.append(decoder.feed(piece, T0 + k))
        except ProtocolError as exc:
            log.append((raw, exc))
            break
        log.append((raw, decoder.retry, decoder.last_event_id, decoder.pending))
    return log


def test_c_and_python_agree_on_tricky_inputs() -> None:
    modules = [wire_module("sse", impl) for impl in IMPLS]
    for stream in TRICKY:
        chunkings = [[0], list(range(len(stream)))] + [[0, cut] for cut in range(len(stream) + 1)]
        for cuts in chunkings:
            for max_event in (1, 2, 5, 16, 250, 1 << 20):
                logs = [run_everything(m, stream, cuts, max_event) for m in modules]
                assert logs[0] == logs[1], (stream, cuts, max_event)


# The twin takes "data:" line + blank line events whole while nothing is
# pending; these streams enter that path and leave it every way it can: a
# CR or CRLF line end, a second data line, a field before or after, a comment,
# a BOM, an empty value, a partial line carried over, the max_event bounds.
FAST_PATH = [
    b"data: a\n\ndata:b\n\ndata:\n\ndata: \n\ndata:  c\n\n",
    b"data: a\r\n\r\ndata: b\n\r\ndata: c\r\n\ndata: d\n\rdata: e\r\r",
    b"data: a\ndata: b\n\ndata: c\n\n",
    b"event: e\ndata: a\n\ndata: b\n\nid: 7\ndata: c\n\ndata: d\n\nid:\n\ndata: e\n\n",
    b"data: a\nevent: x\n\ndata: b\n\n: c\ndata: c\n\n\ndata: d\n\n",
    b"\xef\xbb\xbfdata: a\n\ndata: b\n\n",
    b"data: 12345\n\ndata: 123456\n\ndata: 1234567\n\ndata:12345678\n\n",
    b"data: \xff\xfe\n\ndata\n\ndata: a:b\n\ndatum: x\n\ndata: y",
    b"retry: 5\ndata: a\n\n" * 3 + b"data: [DONE]\n\n",
]


def test_c_and_python_agree_on_the_fast_path() -> None:
    modules = [wire_module("sse", impl) for impl in IMPLS]
    for stream in FAST_PATH:
        n = len(stream)
        chunkings = [[0], list(range(n))] + [[0, cut] for cut in range(n + 1)]
        chunkings += [[0, a, b] for a in range(0, n + 1, 3) for b in range(a, n + 1, 4)]
        for cuts in chunkings:
            for max_event in (1, 5, 11, 12, 13, 14, 1 << 20):
                logs = [run_everything(m, stream, cuts, max_event) for m in modules]
                assert logs[0] == logs[1], (stream, cuts, max_event)
