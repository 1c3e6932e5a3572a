"""The HTTP/2 DATA de-framer (rules D1-D6 of csrc/mlpe_h2.h and _h2_py.py).

Every test runs on both implementations with the matching decoders.  Frames
are built with ``hyperframe``; the realistic cases run a real ``h2`` server
against an ``h2`` client that has the de-framer in front of it, in memory,
and compare it with a plain ``h2`` client.  Split invariance: a fixture fed
whole, one byte at a time and cut at every index gives the same outputs,
and each event carries the stamp of the piece holding the byte that
completed it.  A hypothesis test compares the two implementations on random
frame sequences and splits.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlpe_fast.errors import ErrorCode, EventTooLarge, UnsupportedContentEncoding
from mlpe_fast.sim.stream import chat_chunk, sse_event
from tests.conftest import wire_module

FIRST, DONE, ERROR = 2, 4, 8
DATA, HEADERS, WINDOW_UPDATE = 0x0, 0x1, 0x8
END_STREAM, PADDED = 0x1, 0x8
SSE_HEAD = [(b"content-type", b"text/event-stream")]


@pytest.fixture
def h2w(impl: str) -> ModuleType:
    return wire_module("h2", impl)


@pytest.fixture
def resp(impl: str) -> ModuleType:
    return wire_module("response", impl)


# --- frames -------------------------------------------------------------------------


def raw_frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """A frame as bytes, whatever it says (hyperframe refuses invalid ones)."""
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


def data_frame(
    stream_id: int, data: bytes = b"", *, end_stream: bool = False, pad: int | None = None
) -> bytes:
    flags = ["END_STREAM"] if end_stream else []
    kwargs: dict[str, Any] = {}
    if pad is not None:
        flags.append("PADDED")
        kwargs["pad_length"] = pad
    return bytes(DataFrame(stream_id, data=data, flags=flags, **kwargs).serialize())


def end_stream_frame(stream_id: int) -> bytes:
    return raw_frame(DATA, END_STREAM, stream_id)


def parse_frames(data: bytes) -> list[Frame]:
    frames = []
    view = memoryview(data)
    while view:
        frame, length = Frame.parse_frame_header(view[:9])
        frame.parse_body(view[9 : 9 + length])
        frames.append(frame)
        view = view[9 + length :]
    return frames


def updates_of(data: bytes) -> list[tuple[int, int]]:
    frames = parse_frames(data)
    assert all(isinstance(f, WindowUpdateFrame) for f in frames)
    return [(f.stream_id, f.window_increment) for f in frames]


def tokens(*texts: str, done: bool = True) -> bytes:
    body = b"".join(sse_event(chat_chunk(content=text)) for text in texts)
    return body + (sse_event(b"[DONE]") if done else b"")


def decoder(resp: ModuleType, *, t_ns: int = 0, **options: Any) -> Any:
    d = resp.ResponseDecoder(**options)
    d.set_head(200, SSE_HEAD, t_ns)
    return d


# --- running the de-framer ------------------------------------------------------------


@dataclass
class Trace:
    """What a de-framer did with a sequence of pieces (outputs joined)."""

    steps: list[int] = field(default_factory=list)  # feed's return values
    events: list[tuple[int, int, int]] = field(default_factory=list)  # (stream, flags, stamp)
    passthrough: bytes = b""
    updates: bytes = b""
    error: int = 0
    error_pos: int = 0

    def flags(self) -> list[tuple[int, int]]:
        return [(s, f) for s, f, _ in self.events]


def run(
    deframer: Any,
    pieces: Iterable[bytes],
    stamps: Iterable[int],
    between: Callable[[int], None] | None = None,
) -> Trace:
    """Feeds each piece to the end as H2ReadCore does (again after every
    pass-through frame), until an error; ``between(k)`` runs before piece k."""
    trace = Trace()
    for k, (piece, t_ns) in enumerate(zip(pieces, stamps, strict=True)):
        if between is not None:
            between(k)
        view = memoryview(piece)
        pos = 0
        while True:
            used = deframer.feed(view[pos:], t_ns)
            assert 0 <= used <= len(view) - pos
            pos += used
            trace.steps.append(used)
            trace.events += [(s, f, t_ns) for s, f in deframer.take_events()]
            trace.passthrough += deframer.take_passthrough()
            trace.updates += deframer.take_window_updates()
            if deframer.error or pos >= len(view):
                break
            assert used, "feed made no progress"
        if deframer.error:
            trace.error, trace.error_pos = deframer.error, deframer.error_pos
            assert deframer.feed(b"\x00" * 9, t_ns) == 0  # terminal
            break
    return trace


def feed_all(deframer: Any, data: bytes, t_ns: int = 1) -> Trace:
    return run(deframer, [data], [t_ns])


def cuts(data: bytes) -> Iterable[list[bytes]]:
    """The input whole, one byte at a time, and cut in two at every index."""
    yield [data]
    yield [data[i : i + 1] for i in range(len(data))]
    for i in range(1, len(data)):
        yield [data[:i], data[i:]]


def summary_key(summary: Any) -> tuple[Any, ...]:
    return (
        summary.content,
        summary.complete,
        summary.done,
        summary.events,
        summary.error_code,
        summary.error_message,
    )


def assert_split_invariant(make: Callable[[], tuple[Any, dict[int, Any]]], data: bytes) -> Trace:
    """Every cut of data gives the outputs of the byte-at-a-time run; an
    event (and the decoder's t_first / t_done) carries the stamp of the
    piece holding the byte that completed it."""
    deframer, decoders = make()
    # Byte k is stamped k: the reference says which byte completed what.
    ref = run(deframer, [data[i : i + 1] for i in range(len(data))], range(len(data)))
    ref_summaries = {sid: d.summary() for sid, d in decoders.items()}
    for pieces in cuts(data):
        starts = list(itertools.accumulate([0] + [len(p) for p in pieces]))
        stamps = [10_000 + 10 * k for k in range(len(pieces))]

        def stamp_of(byte: int, starts: list[int] = starts, stamps: list[int] = stamps) -> int:
            k = max(i for i in range(len(stamps)) if starts[i] <= byte)
            return stamps[k]

        deframer, decoders = make()
        trace = run(deframer, pieces, stamps)
        assert trace.passthrough == ref.passthrough
        assert trace.updates == ref.updates
        assert (trace.error, trace.error_pos) == (ref.error, ref.error_pos)
        assert trace.flags() == ref.flags()
        assert [t for _, _, t in trace.events] == [stamp_of(t) for _, _, t in ref.events]
        for sid, d in decoders.items():
            got, want = d.summary(), ref_summaries[sid]
            assert summary_key(got) == summary_key(want)
            for name in ("t_first", "t_done"):
                value = getattr(want, name)
                assert getattr(got, name) == (None if value is None else stamp_of(value))
    return ref


# --- module surface ---------------------------------------------------------------------


def test_constants(h2w: ModuleType) -> None:
    assert (h2w.FIRST, h2w.DONE, h2w.ERROR) == (FIRST, DONE, ERROR)
    assert h2w.PROTOCOL_ERROR == 1
    assert h2w.FRAME_HEADER_SIZE == 9


def test_window_update(h2w: ModuleType) -> None:
    frame = h2w.window_update(5, 70000)
    assert frame == bytes(WindowUpdateFrame(5, window_increment=70000).serialize())
    assert updates_of(h2w.window_update(0, (1 << 31) - 1)) == [(0, (1 << 31) - 1)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_frame_size": 16383}, "max_frame_size out of range: 16383"),
        ({"max_frame_size": 1 << 24}, "max_frame_size out of range: 16777216"),
        ({"connection_window": 0}, "connection_window out of range: 0"),
        ({"connection_window": 1 << 31}, "connection_window out of range: 2147483648"),
        ({"stream_window": 0}, "stream_window out of range: 0"),
        ({"stream_window": -1}, "stream_window out of range: -1"),
        ({"stream_window": 1 << 40}, "stream_window out of range: 1099511627776"),
    ],
)
def test_settings_out_of_range(h2w: ModuleType, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        h2w.DataDeframer(**kwargs)


def test_settings_at_their_limits(h2w: ModuleType) -> None:
    d = h2w.DataDeframer(
        max_frame_size=(1 << 24) - 1, connection_window=(1 << 31) - 1, stream_window=1
    )
    assert d.max_frame_size == (1 << 24) - 1
    assert h2w.DataDeframer().max_frame_size == 16384
    assert (d.error, d.error_pos, d.streams) == (0, 0, 0)


def test_register_and_unregister(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer()
    for bad in (0, -1, 1 << 31, 1 << 40):
        with pytest.raises(ValueError, match=f"stream id out of range: {bad}"):
            d.register(bad, decoder(resp))
    d.register(1, decoder(resp))
    d.register((1 << 31) - 1, decoder(resp))
    with pytest.raises(ValueError, match="stream 1 is already registered"):
        d.register(1, decoder(resp))
    assert d.streams == 2
    assert d.unregister(1) is True
    assert d.unregister(1) is False
    assert d.unregister(3) is False
    assert d.unregister(0) is False
    assert d.unregister(1 << 40) is False
    assert d.streams == 1
    d.register(1, decoder(resp))  # again, after unregister
    assert d.streams == 2


def test_many_streams(h2w: ModuleType, resp: ModuleType) -> None:
    """The stream table grows and shrinks: thousands of streams, removed in
    an order unlike the insertion order, each still found."""
    d = h2w.DataDeframer()
    ids = list(range(1, 8001, 2))
    decoders = {sid: decoder(resp) for sid in ids}
    for sid in ids:
        d.register(sid, decoders[sid])
    assert d.streams == len(ids)
    rng = random.Random(7)
    gone = set(rng.sample(ids, 2500))
    for sid in sorted(gone, key=lambda s: (s * 7919) % 10007):
        assert d.unregister(sid)
    assert d.streams == len(ids) - len(gone)
    body = tokens("x")
    stream = b"".join(data_frame(sid, body) for sid in ids)
    trace = feed_all(d, stream)
    # Frames of removed streams are h2's; the others are consumed.
    assert trace.passthrough == b"".join(data_frame(sid, body) for sid in ids if sid in gone)
    assert trace.flags() == [(sid, FIRST) for sid in ids if sid not in gone]
    assert all(not d.unregister(sid) for sid in gone)


def test_stream_table_against_a_set(h2w: ModuleType, resp: ModuleType) -> None:
    """Random ids collide in the table (sequential ones hardly do): each
    register / unregister answers as a set would, through growth and
    removals from the middle of clusters."""
    rng = random.Random(11)
    pool = rng.sample(range(1, 1 << 31), 1500)
    d = h2w.DataDeframer()
    dec = decoder(resp)
    model: set[int] = set()
    for _ in range(12000):
        sid = rng.choice(pool)
        if rng.random() < 0.5:
            assert d.unregister(sid) is (sid in model)
            model.discard(sid)
        elif sid in model:
            with pytest.raises(ValueError, match="already registered"):
                d.register(sid, dec)
        else:
            d.register(sid, dec)
            model.add(sid)
        assert d.streams == len(model)
    # Each registered stream takes its DATA; the others' goes to h2.
    stream = b"".join(data_frame(sid) for sid in pool)
    trace = feed_all(d, stream)
    assert trace.passthrough == b"".join(data_frame(sid) for sid in pool if sid not in model)


def test_stream_table_wraps_around(h2w: ModuleType, resp: ModuleType) -> None:
    """White-box for the C table (16 slots up to 8 streams, home slot = the
    top 4 bits of id * 2^32/phi): ids that all want the last slot form a
    cluster that wraps to the start; look-ups and removals must follow it."""
    last = [sid for sid in range(1, 400, 2) if ((sid * 2654435769) & 0xFFFFFFFF) >> 28 == 15]
    ids = last[:5]
    d = h2w.DataDeframer()
    decoders = {sid: decoder(resp) for sid in ids}
    for sid in ids:
        d.register(sid, decoders[sid])
    assert d.unregister(ids[0]) and d.unregister(ids[2])
    kept = [ids[1], ids[3], ids[4]]
    trace = feed_all(d, b"".join(data_frame(sid, tokens(str(sid))) for sid in ids))
    assert trace.flags() == [(sid, FIRST) for sid in kept]
    assert all(decoders[sid].summary().content == str(sid) for sid in kept)
    assert [d.unregister(sid) for sid in ids] == [False, True, False, True, True]


@pytest.mark.c_extension
def test_register_needs_a_compiled_decoder() -> None:
    c = wire_module("h2", "c")
    py_decoder = decoder(wire_module("response", "py"))
    with pytest.raises(TypeError):
        c.DataDeframer().register(1, py_decoder)


# --- D1, D5: frames for h2 ------------------------------------------------------------------


def test_other_frames_pass_through_one_at_a_time(h2w: ModuleType, resp: ModuleType) -> None:
    frames = [
        bytes(SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 100}).serialize()),
        bytes(SettingsFrame(0, flags=["ACK"]).serialize()),
        bytes(PingFrame(0, opaque_data=b"12345678").serialize()),
        bytes(HeadersFrame(1, data=b"\x88", flags=["END_HEADERS"]).serialize()),
        bytes(RstStreamFrame(1, error_code=8).serialize()),
        bytes(WindowUpdateFrame(0, window_increment=1000).serialize()),
        bytes(GoAwayFrame(0, last_stream_id=1, error_code=0).serialize()),
        raw_frame(0xFA, 0xFF, 1, b"unknown type"),  # ignored by h2 [5.5]
        raw_frame(HEADERS, 0x4, 1),  # empty: complete at its header
    ]
    d = h2w.DataDeframer()
    d.register(1, decoder(resp))
    stream = b"".join(frames)
    pos = 0
    for frame in frames:  # D5: feed returns after each frame
        assert d.feed(stream[pos:], 1) == len(frame)
        assert d.take_passthrough() == frame
        pos += len(frame)
    assert d.take_events() == [] and d.take_window_updates() == b""
    assert d.feed(b"", 1) == 0


def test_incomplete_frames_pass_through_as_they_come(h2w: ModuleType) -> None:
    frame = bytes(PingFrame(0, opaque_data=b"abcdefgh").serialize())
    d = h2w.DataDeframer()
    assert d.feed(frame[:5], 1) == 5  # a header cut: held back
    assert d.take_passthrough() == b""
    assert d.feed(frame[5:12], 1) == 7  # header complete, payload begun
    assert d.take_passthrough() == frame[:12]
    assert d.feed(frame[12:] + frame, 1) == len(frame) - 12  # stops at the frame's end
    assert d.take_passthrough() == frame[12:]


def test_data_for_unregistered_streams_and_stream_0(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer(stream_window=1, connection_window=1)
    d.register(1, decoder(resp))
    others = [data_frame(3, b"abc"), raw_frame(DATA, 0, 0, b"zero"), data_frame(5, end_stream=True)]
    trace = feed_all(d, b"".join(others))
    assert trace.passthrough == b"".join(others)
    assert trace.steps == [len(f) for f in others]
    assert trace.events == [] and trace.updates == b""


def test_reserved_bit_is_ignored(h2w: ModuleType, resp: ModuleType) -> None:
    """D1 [4.1]: the R bit of the stream identifier does not make another stream."""
    d = h2w.DataDeframer()
    dec = decoder(resp)
    d.register(1, dec)
    body = tokens("hi")
    frame = raw_frame(DATA, END_STREAM, 1 | 1 << 31, body)
    trace = feed_all(d, frame)
    assert trace.flags() == [(1, FIRST), (1, DONE)]
    assert trace.passthrough == end_stream_frame(1)
    assert dec.summary().content == "hi"


def test_frame_over_max_frame_size_passes_through(h2w: ModuleType, resp: ModuleType) -> None:
    body = tokens("x" * 17000)
    big = data_frame(1, body[:16385])
    at_limit = data_frame(1, body[16385:] + b"\n" * (16384 - len(body[16385:])))
    d = h2w.DataDeframer()
    d.register(1, decoder(resp))
    trace = feed_all(d, big + at_limit)
    assert trace.passthrough == big  # h2 raises FrameTooLargeError on it
    assert trace.steps == [len(big), len(at_limit)]
    # A larger max_frame_size takes it.
    d = h2w.DataDeframer(max_frame_size=16385)
    dec = decoder(resp)
    d.register(1, dec)
    assert feed_all(d, big).passthrough == b""


# --- D2: payloads, padding -------------------------------------------------------------


def test_payload_goes_to_the_decoder(h2w: ModuleType, resp: ModuleType) -> None:
    body = tokens("Hel", "lo", " é世😀")
    d = h2w.DataDeframer()
    dec = decoder(resp)
    d.register(1, dec)
    frames = [data_frame(1, body[i : i + 50]) for i in range(0, len(body), 50)]
    trace = feed_all(d, b"".join(frames), 7)
    assert trace.passthrough == b"" and trace.updates == b""
    assert trace.events == [(1, FIRST, 7)]
    assert trace.steps == [sum(map(len, frames))]
    summary = dec.summary()
    assert summary.content == "Hello é世😀"
    assert summary.done and not summary.complete  # [DONE] came; END_STREAM did not


@pytest.mark.parametrize("pad", [0, 1, 5, 255])
def test_padded_frames(h2w: ModuleType, resp: ModuleType, pad: int) -> None:
    body = tokens("pad")
    d = h2w.DataDeframer(connection_window=1000, stream_window=2)
    dec = decoder(resp)
    d.register(1, dec)
    frame = data_frame(1, body, pad=pad)
    trace = feed_all(d, frame)
    assert dec.summary().content == "pad"
    # D3: the Pad Length byte and the padding count.
    length = len(body) + 1 + pad
    assert updates_of(trace.updates) == [(1, length)]


def test_pad_length_of_length_minus_one(h2w: ModuleType, resp: ModuleType) -> None:
    """Pad Length = length - 1: all padding, no data; the decoder is not called."""
    d = h2w.DataDeframer(stream_window=1, connection_window=1)
    dec = resp.ResponseDecoder()  # no head: any call would fail it
    d.register(1, dec)
    frame = raw_frame(DATA, PADDED, 1, bytes([9]) + b"\x00" * 9)
    trace = feed_all(d, frame + raw_frame(DATA, PADDED, 1, b"\x00"))
    assert trace.events == [] and trace.error == 0
    assert updates_of(trace.updates) == [(1, 10), (0, 10), (1, 1), (0, 1)]


@pytest.mark.parametrize(("length", "pad"), [(1, 1), (5, 5), (5, 200), (1, 255)])
def test_pad_length_too_large(h2w: ModuleType, resp: ModuleType, length: int, pad: int) -> None:
    """D2 [6.1]: Pad Length >= the frame's length is PROTOCOL_ERROR at the Pad
    Length byte; nothing more is consumed."""
    d = h2w.DataDeframer()
    d.register(1, decoder(resp))
    before = bytes(PingFrame(0, opaque_data=b"12345678").serialize())
    bad = raw_frame(DATA, PADDED, 1, bytes([pad]) + b"x" * (length - 1))
    trace = feed_all(d, before + bad + data_frame(1, b"more"))
    assert trace.error == h2w.PROTOCOL_ERROR == 1
    assert trace.error_pos == len(before) + 9
    assert trace.steps == [len(before), 10]  # the Pad Length byte is the last used
    assert trace.passthrough == before
    assert d.feed(b"more", 2) == 0 and d.take_passthrough() == b""
    assert (d.error, d.error_pos) == (1, len(before) + 9)


def test_padded_with_length_0_passes_through(h2w: ModuleType, resp: ModuleType) -> None:
    """Too short for its Pad Length field: h2 reports that error."""
    d = h2w.DataDeframer()
    d.register(1, decoder(resp))
    frame = raw_frame(DATA, PADDED | END_STREAM, 1)
    trace = feed_all(d, frame + data_frame(1, b"x"))
    assert trace.passthrough == frame and trace.steps == [9, 10]
    assert trace.error == 0 and d.streams == 1


def test_empty_data_frames(h2w: ModuleType, resp: ModuleType) -> None:
    """Consumed, without a decoder call or an increment of 0 [6.9]."""
    d = h2w.DataDeframer(stream_window=1, connection_window=1)
    dec = resp.ResponseDecoder()  # no head: any call would fail it
    d.register(1, dec)
    trace = feed_all(d, data_frame(1) * 3 + data_frame(1, pad=0))
    assert trace.passthrough == b"" and trace.events == []
    assert updates_of(trace.updates) == [(1, 1), (0, 1)]  # the Pad Length byte


# --- D3: flow control ---------------------------------------------------------------------


def test_window_update_thresholds(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer(connection_window=100, stream_window=61)
    d.register(1, decoder(resp))
    d.register(3, decoder(resp))
    twenty = b"data: " + b"x" * 12 + b"\n\n"
    assert len(twenty) == 20
    out = []
    for sid in (1, 3, 1, 3, 1, 1):
        out.append(updates_of(feed_all(d, data_frame(sid, twenty)).updates))
    # Connection threshold 50, stream threshold 30, checked at each frame end.
    assert out == [[], [], [(1, 40), (0, 60)], [(3, 40)], [], [(1, 40), (0, 60)]]
    assert updates_of(feed_all(d, data_frame(3, b"\n" * 29)).updates) == []
    assert updates_of(feed_all(d, data_frame(3, b"\n")).updates) == [(3, 30)]
    assert updates_of(feed_all(d, data_frame(1, b"\n" * 20)).updates) == [(0, 50)]


def test_thresholds_at_least_one(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer(connection_window=1, stream_window=1)
    d.register(1, decoder(resp))
    trace = feed_all(d, data_frame(1, b": c\n") + data_frame(1, b":\n"))
    assert updates_of(trace.updates) == [(1, 4), (0, 4), (1, 2), (0, 2)]


def test_no_stream_update_after_end_stream(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer(connection_window=1, stream_window=1)
    d.register(1, decoder(resp))
    trace = feed_all(d, data_frame(1, tokens("a"), end_stream=True))
    assert updates_of(trace.updates) == [(0, len(tokens("a")))]


def test_updates_wait_for_the_frame_end(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer(connection_window=1, stream_window=1)
    d.register(1, decoder(resp))
    frame = data_frame(1, b":" * 100, pad=3)
    assert feed_all(d, frame[:-1]).updates == b""
    assert updates_of(feed_all(d, frame[-1:]).updates) == [(1, 104), (0, 104)]


# --- D4: END_STREAM ------------------------------------------------------------------------


def test_end_stream(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer()
    dec = decoder(resp)
    d.register(5, dec)
    body = tokens("a", "b")
    trace = feed_all(d, data_frame(5, body[:30]) + data_frame(5, body[30:], end_stream=True), 3)
    assert trace.events == [(5, FIRST, 3), (5, DONE, 3)]
    assert trace.passthrough == end_stream_frame(5) == b"\x00\x00\x00\x00\x01\x00\x00\x00\x05"
    assert d.streams == 0 and not d.unregister(5)
    summary = dec.summary()
    assert summary.complete and summary.content == "ab" and summary.t_done == 3
    # Later DATA of the stream is h2's (which calls it STREAM_CLOSED).
    late = data_frame(5, b"late")
    assert feed_all(d, late).passthrough == late


def test_end_stream_on_padded_and_empty_frames(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer()
    one, three = decoder(resp), decoder(resp)
    d.register(1, one)
    d.register(3, three)
    stream = data_frame(1, tokens("p"), end_stream=True, pad=4) + data_frame(3, end_stream=True)
    trace = feed_all(d, stream)
    # Stream 3's event stream ended without an event: no answer (R10).
    assert trace.flags() == [(1, FIRST), (1, DONE), (3, ERROR)]
    assert trace.passthrough == end_stream_frame(1) + end_stream_frame(3)
    assert one.summary().complete and three.summary().error_code == ErrorCode.NO_EVENTS


def test_json_body_decoded_at_the_end(h2w: ModuleType, resp: ModuleType) -> None:
    """A non-streaming body completes at END_STREAM with FIRST and DONE in one event."""
    d = h2w.DataDeframer()
    dec = resp.ResponseDecoder()
    dec.set_head(200, [(b"content-type", b"application/json")], 0)
    d.register(1, dec)
    body = (
        b'{"id":"x","object":"chat.completion","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}]}'
    )
    trace = feed_all(d, data_frame(1, body[:40]) + data_frame(1, body[40:], end_stream=True))
    assert trace.flags() == [(1, FIRST | DONE)]
    assert dec.summary().content == "whole"


# --- D6: failures -----------------------------------------------------------------------------


def test_failed_stream_reports_error_once(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer(stream_window=1, connection_window=1000)
    dec = decoder(resp, max_event=16)
    d.register(1, dec)
    frames = [data_frame(1, b"data: " + b"x" * 20), data_frame(1, b"more"), data_frame(1, b"!")]
    trace = feed_all(d, b"".join(frames))
    assert trace.flags() == [(1, ERROR)]
    # Dropped, but still counted (D3).
    assert updates_of(trace.updates) == [(1, len(f) - 9) for f in frames]
    with pytest.raises(EventTooLarge):
        dec.feed_body(b"x", 0)
    # END_STREAM: unregistered and passed through, without DONE.
    trace = feed_all(d, data_frame(1, b"end", end_stream=True))
    assert trace.events == [] and trace.passthrough == end_stream_frame(1)
    assert d.streams == 0


def test_error_in_the_head_fails_the_first_payload(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer()
    dec = resp.ResponseDecoder()
    with pytest.raises(UnsupportedContentEncoding):
        dec.set_head(200, [(b"content-encoding", b"gzip")], 0)
    d.register(1, dec)
    trace = feed_all(d, data_frame(1, b"x") + data_frame(1, end_stream=True))
    assert trace.flags() == [(1, ERROR)]


def test_refused_calls_fail_the_stream(h2w: ModuleType, resp: ModuleType) -> None:
    """A decoder without a head refuses feed_body (LocalProtocolError in the
    twin, ERROR in C): the stream fails either way."""
    d = h2w.DataDeframer()
    d.register(1, resp.ResponseDecoder())
    d.register(3, resp.ResponseDecoder())
    trace = feed_all(d, data_frame(1, b"x") + data_frame(3, end_stream=True))
    assert trace.flags() == [(1, ERROR), (3, ERROR)]
    assert trace.passthrough == end_stream_frame(3)


def test_stream_of_an_ended_decoder_fails(h2w: ModuleType, resp: ModuleType) -> None:
    d = h2w.DataDeframer()
    dec = decoder(resp)
    dec.feed_body(tokens("x"), 0)
    dec.end_body(0)
    d.register(1, dec)
    assert feed_all(d, data_frame(1, b"late")).flags() == [(1, ERROR)]


# --- unregister in the middle of a frame -------------------------------------------------


@pytest.mark.parametrize("end_stream", [False, True])
def test_unregister_mid_frame(h2w: ModuleType, resp: ModuleType, end_stream: bool) -> None:
    d = h2w.DataDeframer(stream_window=1, connection_window=1)
    dec = decoder(resp)
    d.register(1, dec)
    body = tokens("one", "two")
    frame = data_frame(1, body, end_stream=end_stream, pad=2)
    half = 9 + 1 + len(sse_event(chat_chunk(content="one")))
    first = feed_all(d, frame[:half])
    assert first.flags() == [(1, FIRST)]
    assert d.unregister(1) and d.streams == 0
    del dec  # C holds no pointer to it any more
    rest = feed_all(d, frame[half:] + data_frame(1, b"next"))
    assert rest.events == []  # finished without feeding
    # Its bytes still count for the connection; the stream is gone (D3).
    assert updates_of(rest.updates) == [(0, len(frame) - 9)]
    assert rest.passthrough == (end_stream_frame(1) if end_stream else b"") + data_frame(1, b"next")


def test_unregister_and_register_again_mid_frame(h2w: ModuleType, resp: ModuleType) -> None:
    """The frame in progress stays with the registration it began with."""
    d = h2w.DataDeframer(stream_window=1, connection_window=1000)
    old, new = decoder(resp), decoder(resp)
    d.register(1, old)
    frame = data_frame(1, tokens("old"), end_stream=True)
    feed_all(d, frame[:20])
    d.unregister(1)
    d.register(1, new)
    trace = feed_all(d, frame[20:] + data_frame(1, tokens("new")))
    assert trace.flags() == [(1, FIRST)]
    assert trace.passthrough == end_stream_frame(1)  # h2 still learns of END_STREAM
    assert d.streams == 1  # the new registration survives the old frame's END_STREAM
    assert old.summary().content == "" and new.summary().content == "new"


def test_unregister_another_stream_mid_frame(h2w: ModuleType, resp: ModuleType) -> None:
    """Removing and adding other streams moves table entries; the frame in
    progress is not affected."""
    d = h2w.DataDeframer(stream_window=1, connection_window=1000)
    mine = decoder(resp)
    d.register(1, mine)
    others = {sid: decoder(resp) for sid in range(3, 200, 2)}
    for sid, dec in others.items():
        d.register(sid, dec)
    frame = data_frame(1, tokens("mine"))
    feed_all(d, frame[:15])
    for sid in others:
        d.unregister(sid)
    for sid in range(201, 400, 2):
        d.register(sid, decoder(resp))
    trace = feed_all(d, frame[15:])
    assert trace.flags() == [(1, FIRST)]
    assert updates_of(trace.updates) == [(1, len(frame) - 9)]
    assert mine.summary().content == "mine"


# --- interleaving, splits ------------------------------------------------------------------


def interleaved(n_streams: int = 3, n_tokens: int = 6) -> tuple[bytes, dict[int, str]]:
    ids = [1 + 2 * i for i in range(n_streams)]
    bodies = {sid: [f"s{sid}t{k} " for k in range(n_tokens)] for sid in ids}
    frames = []
    for k in range(n_tokens):
        for sid in ids:
            payload = sse_event(chat_chunk(content=bodies[sid][k]))
            pad = k if (k + sid) % 3 == 0 else None
            frames.append(data_frame(sid, payload, pad=pad))
    for sid in ids:
        frames.append(data_frame(sid, sse_event(b"[DONE]"), end_stream=True))
    return b"".join(frames), {sid: "".join(texts) for sid, texts in bodies.items()}


def test_interleaved_streams(h2w: ModuleType, resp: ModuleType) -> None:
    stream, texts = interleaved()
    d = h2w.DataDeframer(stream_window=200, connection_window=400)
    decoders = {sid: decoder(resp) for sid in texts}
    for sid, dec in decoders.items():
        d.register(sid, dec)
    trace = feed_all(d, stream)
    assert trace.flags() == [(1, FIRST), (3, FIRST), (5, FIRST), (1, DONE), (3, DONE), (5, DONE)]
    assert trace.passthrough == b"".join(end_stream_frame(sid) for sid in texts)
    assert {sid: dec.summary().content for sid, dec in decoders.items()} == texts
    increments: dict[int, int] = {}
    for sid, inc in updates_of(trace.updates):
        increments[sid] = increments.get(sid, 0) + inc
    # Everything consumed was acknowledged on the connection, up to less than
    # a threshold; ended streams were not topped up at their end.
    assert 0 <= len(stream) - 9 * 21 - increments[0] < 200


def mixed_stream() -> bytes:
    """Every kind of frame, for the split tests: streams 1 and 3 registered."""
    return b"".join(
        [
            bytes(SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 100}).serialize()),
            data_frame(1, sse_event(chat_chunk(content="Hel"))),
            bytes(HeadersFrame(7, data=b"\x88", flags=["END_HEADERS"]).serialize()),
            data_frame(3, sse_event(chat_chunk(content="pad")), pad=7),
            data_frame(1),
            bytes(PingFrame(0, opaque_data=b"pingpong").serialize()),
            data_frame(1, sse_event(chat_chunk(content="lo")) + b"data: [DO", pad=0),
            data_frame(5, b"unregistered"),
            raw_frame(DATA, PADDED, 3),
            data_frame(1, b"NE]\n\n", end_stream=True),
            data_frame(3, sse_event(b"[DONE]")),
            data_frame(3, end_stream=True, pad=3),
            raw_frame(DATA, 0, 0, b"stream zero"),
        ]
    )


def test_every_split(h2w: ModuleType, resp: ModuleType) -> None:
    def make() -> tuple[Any, dict[int, Any]]:
        d = h2w.DataDeframer(connection_window=100, stream_window=60)
        decoders = {1: decoder(resp), 3: decoder(resp)}
        for sid, dec in decoders.items():
            d.register(sid, dec)
        return d, decoders

    ref = assert_split_invariant(make, mixed_stream())
    assert ref.flags() == [(1, FIRST), (3, FIRST), (1, DONE), (3, DONE)]
    assert ref.error == 0


def test_every_split_with_an_error_and_a_failed_stream(h2w: ModuleType, resp: ModuleType) -> None:
    stream = (
        data_frame(1, b"data: " + b"y" * 40 + b"\n\n")
        + data_frame(3, sse_event(chat_chunk(content="ok")), end_stream=True)
        + data_frame(1, b"dropped", end_stream=True)
        + raw_frame(DATA, PADDED, 5, b"\x04abc")
        + data_frame(5, b"never")
    )

    def make() -> tuple[Any, dict[int, Any]]:
        d = h2w.DataDeframer(connection_window=30, stream_window=10)
        decoders = {1: decoder(resp, max_event=10), 3: decoder(resp), 5: decoder(resp)}
        for sid, dec in decoders.items():
            d.register(sid, dec)
        return d, decoders

    ref = assert_split_invariant(make, stream)
    assert ref.flags() == [(1, ERROR), (3, FIRST), (3, DONE)]
    assert ref.error == 1 and ref.error_pos == len(stream) - len(data_frame(5, b"never")) - 4


def test_byte_at_a_time_equals_whole_on_interleaved(h2w: ModuleType, resp: ModuleType) -> None:
    stream, texts = interleaved(4, 10)
    results = []
    for pieces in ([stream], [stream[i : i + 1] for i in range(len(stream))]):
        d = h2w.DataDeframer(connection_window=64, stream_window=32)
        decoders = {sid: decoder(resp) for sid in texts}
        for sid, dec in decoders.items():
            d.register(sid, dec)
        trace = run(d, pieces, [1] * len(pieces))
        results.append((trace.flags(), trace.passthrough, trace.updates))
        assert {sid: dec.summary().content for sid, dec in decoders.items()} == texts
    assert results[0] == results[1]


# --- a real h2 server and client ----------------------------------------------------------


def h2_config(client_side: bool) -> h2.config.H2Configuration:
    return h2.config.H2Configuration(client_side=client_side, header_encoding=None)


REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":authority", b"endpoint"),
    (b":path", b"/v1/chat/completions"),
]


class DeframedClient:
    """An h2 client with the de-framer in front, run as the engine runs it."""

    def __init__(self, h2w: ModuleType, resp: ModuleType, **windows: int) -> None:
        self.conn = h2.connection.H2Connection(config=h2_config(True))
        self.deframer = h2w.DataDeframer(**windows)
        self.resp = resp
        self.decoders: dict[int, Any] = {}
        self.milestones: list[tuple[int, int]] = []
        self.h2_events: list[Any] = []

    def receive(self, data: bytes, t_ns: int) -> bytes:
        """Handles bytes from the server; returns the bytes to send back."""
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            pos += self.deframer.feed(view[pos:], t_ns)
            self.milestones += self.deframer.take_events()
            passthrough = self.deframer.take_passthrough()
            if passthrough:
                for event in self.conn.receive_data(passthrough):
                    self.h2_events.append(event)
                    if isinstance(event, h2.events.ResponseReceived):
                        self.on_response(event, t_ns)
            assert self.deframer.error == 0
        return self.deframer.take_window_updates() + self.conn.data_to_send()

    def on_response(self, event: Any, t_ns: int) -> None:
        headers = [(n, v) for n, v in event.headers if not n.startswith(b":")]
        status = int(dict(event.headers)[b":status"])
        dec = self.resp.ResponseDecoder()
        dec.set_head(status, headers, t_ns)
        self.decoders[event.stream_id] = dec
        self.deframer.register(event.stream_id, dec)


class PlainClient:
    """The reference: h2 alone, decoding DATA in Python and acknowledging it."""

    def __init__(self, resp: ModuleType) -> None:
        self.conn = h2.connection.H2Connection(config=h2_config(True))
        self.resp = resp
        self.decoders: dict[int, Any] = {}

    def receive(self, data: bytes, t_ns: int) -> bytes:
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                headers = [(n, v) for n, v in event.headers if not n.startswith(b":")]
                dec = self.resp.ResponseDecoder()
                dec.set_head(int(dict(event.headers)[b":status"]), headers, t_ns)
                self.decoders[event.stream_id] = dec
            elif isinstance(event, h2.events.DataReceived):
                if event.data:
                    self.decoders[event.stream_id].feed_body(event.data, t_ns)
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.decoders[event.stream_id].end_body(t_ns)
        return self.conn.data_to_send()


def stream_states(conn: h2.connection.H2Connection) -> dict[int, tuple[bool, bool]]:
    return {sid: (s.open, s.closed) for sid, s in conn.streams.items()}


def sse_body(sid: int, n_tokens: int) -> tuple[bytes, str]:
    texts = [f"<{sid}:{k}>" for k in range(n_tokens)]
    body = b"".join(sse_event(chat_chunk(content=t)) for t in texts) + sse_event(b"[DONE]")
    return body, "".join(texts)


def open_connection(
    clients: Sequence[Any], server: h2.connection.H2Connection, ids: Sequence[int]
) -> bytes:
    """Client prefaces and requests to the server; returns the server's
    first bytes (SETTINGS and its ACK), for every client."""
    for client in clients:
        client.conn.initiate_connection()
        for sid in ids:
            client.conn.send_headers(sid, REQUEST, end_stream=True)
    # Each client wrote the same bytes; the server reads one copy.
    sent = clients[0].conn.data_to_send()
    for client in clients[1:]:
        assert client.conn.data_to_send() == sent
    server.initiate_connection()
    server.receive_data(sent)
    return server.data_to_send()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_against_h2_alone(h2w: ModuleType, resp: ModuleType, seed: int) -> None:
    """Same h2 stream states and decoded bodies as h2 alone, for interleaved
    streams cut into random reads; HEADERS registers the stream before the
    DATA behind it in the same read is looked at."""
    rng = random.Random(seed)
    ids = [1, 3, 5, 7]
    server = h2.connection.H2Connection(config=h2_config(False))
    deframed = DeframedClient(h2w, resp, connection_window=65535, stream_window=65535)
    plain = PlainClient(resp)
    wire = [open_connection([deframed, plain], server, ids)]
    bodies = {sid: sse_body(sid, 40) for sid in ids}
    for sid in ids:
        server.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/event-stream")])
    offsets = dict.fromkeys(ids, 0)
    while offsets:
        sid = rng.choice(sorted(offsets))
        body = bodies[sid][0]
        n = rng.randint(1, 120)
        chunk = body[offsets[sid] : offsets[sid] + n]
        offsets[sid] += len(chunk)
        end = offsets[sid] >= len(body)
        pad = rng.choice([None, None, 0, 7])
        server.send_data(sid, chunk, end_stream=end, pad_length=pad)
        if end:
            del offsets[sid]
        if rng.random() < 0.1:
            server.ping(b"12345678")
        if rng.random() < 0.2:
            wire.append(server.data_to_send())
    wire.append(server.data_to_send())
    data = b"".join(wire)
    # Random reads, the same for both clients; states compared after each.
    bounds = sorted({0, len(data), *rng.sample(range(1, len(data)), 60)})
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        server.receive_data(deframed.receive(data[a:b], k))
        plain.receive(data[a:b], k)
        assert stream_states(deframed.conn) == stream_states(plain.conn)
    assert deframed.conn.state_machine.state == plain.conn.state_machine.state
    assert deframed.conn.open_outbound_streams == plain.conn.open_outbound_streams == 0
    ended = [e.stream_id for e in deframed.h2_events if isinstance(e, h2.events.StreamEnded)]
    assert sorted(ended) == ids
    for sid in ids:
        mine, theirs = deframed.decoders[sid].summary(), plain.decoders[sid].summary()
        assert mine.content == theirs.content == bodies[sid][1]
        assert mine.complete and theirs.complete and mine.done
        # h2 reports a DATA frame once it is whole; the de-framer feeds
        # what a read brought of it, so its stamps are never later.
        assert mine.t_first <= theirs.t_first and mine.t_done <= theirs.t_done
    assert sorted(sid for sid, f in deframed.milestones if f & DONE) == ids
    assert deframed.deframer.streams == 0


def test_windows_replenished_by_the_deframer_alone(h2w: ModuleType, resp: ModuleType) -> None:
    """The server keeps sending well beyond the initial 65,535-byte windows
    with only the de-framer's WINDOW_UPDATEs replenishing them (the h2 client
    acknowledges nothing: it never sees the DATA)."""
    ids = [1, 3]
    server = h2.connection.H2Connection(config=h2_config(False))
    client = DeframedClient(h2w, resp, connection_window=100, stream_window=1)
    preface = open_connection([client], server, ids)
    bodies = {sid: sse_body(sid, 1000) for sid in ids}
    assert all(len(body) > 100_000 for body, _ in bodies.values())
    for sid in ids:
        server.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/event-stream")])
    offsets = dict.fromkeys(ids, 0)
    t_ns = 0
    server.receive_data(client.receive(preface + server.data_to_send(), t_ns))
    while offsets:
        progressed = False
        for sid in sorted(offsets):
            body = bodies[sid][0]
            window = min(server.local_flow_control_window(sid), 1000)
            if window <= 0:
                continue
            chunk = body[offsets[sid] : offsets[sid] + window]
            offsets[sid] += len(chunk)
            end = offsets[sid] >= len(body)
            server.send_data(sid, chunk, end_stream=end)
            progressed = True
            if end:
                del offsets[sid]
        assert progressed, "the server is blocked on flow control"
        t_ns += 1
        back = client.receive(server.data_to_send(), t_ns)
        server.receive_data(back)
    for sid in ids:
        assert client.decoders[sid].summary().content == bodies[sid][1]
    assert client.conn.open_outbound_streams == 0
    assert client.deframer.streams == 0


# --- C against the twin, hypothesis -----------------------------------------------------------

IDS = (1, 3, 5, 7)


@st.composite
def frame_sequence(draw: st.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["data", "data", "data", "padded", "other", "empty", "big"]))
        sid = draw(st.sampled_from([*IDS, *IDS, 0, 9, 1 | 1 << 31]))
        flags = draw(st.sampled_from([0, 0, END_STREAM])) | draw(st.sampled_from([0, 0, 0, 0xF6]))
        if kind == "data":
            payload = draw(
                st.one_of(
                    st.binary(max_size=40),
                    st.sampled_from([b"data: [DONE]\n\n", sse_event(chat_chunk(content="t"))]),
                )
            )
            out += raw_frame(DATA, flags & ~PADDED, sid, payload)
        elif kind == "padded":
            data = draw(st.binary(max_size=20))
            pad = draw(st.integers(0, 30))
            padding = b"\x00" * min(pad, draw(st.integers(0, 30)))
            out += raw_frame(DATA, flags | PADDED, sid, bytes([pad]) + data + padding)
        elif kind == "empty":
            out += raw_frame(DATA, flags, sid)
        elif kind == "big":
            out += raw_frame(
                DATA, flags & ~PADDED, sid, b":" * draw(st.sampled_from([16384, 16385]))
            )
        else:
            out += raw_frame(draw(st.integers(1, 255)), flags, sid, draw(st.binary(max_size=12)))
    if draw(st.booleans()):
        out += draw(st.binary(max_size=20))  # noise, or a cut frame
    return out


@st.composite
def split(draw: st.DrawFn, data: bytes) -> list[bytes]:
    n = len(data)
    mode = draw(st.sampled_from(["random", "random", "bytes", "whole"]))
    if mode == "whole" or n == 0:
        points: list[int] = []
    elif mode == "bytes":
        points = list(range(1, n))
    else:
        points = sorted(draw(st.lists(st.integers(0, n), max_size=12)))
    bounds = [0, *points, n]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def scenario(draw: st.DrawFn, streams: st.SearchStrategy[bytes] | None = None) -> dict[str, Any]:
    """A stream (frame_sequence() unless given), its pieces, the settings,
    the streams registered at the start and the ops between pieces."""
    data = draw(frame_sequence() if streams is None else streams)
    pieces = draw(split(data))
    return {
        "pieces": pieces,
        "windows": draw(
            st.fixed_dictionaries(
                {
                    "connection_window": st.sampled_from([1, 2, 100, 65535, (1 << 31) - 1]),
                    "stream_window": st.sampled_from([1, 3, 40, 65535]),
                }
            )
        ),
        "registered": draw(st.lists(st.sampled_from(IDS), unique=True)),
        # per stream: 0 normal, 1 small max_event, 2 no head (refusals)
        "kinds": draw(st.lists(st.integers(0, 2), min_size=len(IDS), max_size=len(IDS))),
        # (piece index, "unregister" | "register", stream) between pieces
        "ops": draw(
            st.lists(
                st.tuples(
                    st.integers(0, max(0, len(pieces) - 1)),
                    st.sampled_from(["register", "unregister"]),
                    st.sampled_from(IDS),
                ),
                max_size=4,
            )
        ),
    }


def run_scenario(h2w: ModuleType, resp: ModuleType, sc: dict[str, Any]) -> tuple[Any, ...]:
    d = h2w.DataDeframer(**sc["windows"])
    decoders: list[Any] = []

    def new_decoder(sid: int) -> Any:
        kind = sc["kinds"][IDS.index(sid)]
        dec = resp.ResponseDecoder() if kind == 2 else decoder(resp, max_event=8 if kind else 64)
        decoders.append(dec)
        return dec

    for sid in sc["registered"]:
        d.register(sid, new_decoder(sid))
    log: list[Any] = []

    def between(k: int) -> None:
        for at, op, sid in sc["ops"]:
            if at != k:
                continue
            if op == "unregister":
                log.append(("unregister", sid, d.unregister(sid)))
            else:
                try:
                    d.register(sid, new_decoder(sid))
                    log.append(("register", sid))
                except ValueError as exc:
                    log.append(("register", sid, str(exc)))
            log.append(("streams", d.streams))

    trace = run(d, sc["pieces"], range(1, len(sc["pieces"]) + 1), between)
    summaries = [(*summary_key(dec.summary()), dec.summary().t_first) for dec in decoders]
    return (trace, log, summaries, d.streams, d.error, d.error_pos)


H2_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.hypothesis
@pytest.mark.c_extension
@H2_SETTINGS
@given(sc=scenario())
def test_c_matches_twin(sc: dict[str, Any]) -> None:
    c = run_scenario(wire_module("h2", "c"), wire_module("response", "c"), sc)
    py = run_scenario(wire_module("h2", "py"), wire_module("response", "py"), sc)
    assert c == py


# --- D7: where an event's frame ends ------------------------------------------------


def _ends(d: Any, pieces: Sequence[bytes]) -> list[tuple[int, int, int, int]]:
    """(stream, flags, end, end of the piece) per event, fed as H2ReadCore does."""
    out: list[tuple[int, int, int, int]] = []
    for piece in pieces:
        piece_end = d.offset + len(piece)
        pos = 0
        while True:
            pos += d.feed(memoryview(piece)[pos:], 1)
            out += [(s, f, end, piece_end) for s, f, end in d.take_events_ending()]
            d.take_passthrough()
            if d.error or pos >= len(piece):
                break
    assert d.offset == sum(map(len, pieces))
    return out


@pytest.mark.parametrize("pad", [None, 0, 3])
def test_event_ends_past_its_frame_at_every_split(
    h2w: ModuleType, resp: ModuleType, pad: int | None
) -> None:
    """D7: a first token's event ends past its frame, padding within the
    piece included; the bytes after it in the piece are the later frames."""
    first = data_frame(1, sse_event(chat_chunk(content="a")), pad=pad)
    other = data_frame(3, sse_event(chat_chunk(content="b")))
    ping = bytes(PingFrame(0, opaque_data=b"12345678").serialize())
    total = first + other + ping
    payload_end = len(first) - (pad or 0)  # just past the first token's last byte
    for i in range(len(total) + 1):
        d = h2w.DataDeframer()
        d.register(1, decoder(resp))
        d.register(3, decoder(resp))
        events = _ends(d, [total[:i], total[i:]])
        one = min(len(first), i) if i >= payload_end else len(first)
        assert events == [
            (1, FIRST, one, i if i >= payload_end else len(total)),
            (3, FIRST, len(first) + len(other), i if i >= len(first) + len(other) else len(total)),
        ], i


def test_event_of_end_body_ends_past_the_frame(h2w: ModuleType, resp: ModuleType) -> None:
    """D7: END_STREAM's events (end_body) end where the frame does."""
    d = h2w.DataDeframer()
    d.register(1, decoder(resp))
    first = data_frame(1, tokens("x"))
    end = data_frame(1, end_stream=True, pad=2)
    events = _ends(d, [first + end + data_frame(9, b"later")])
    assert [(s, f, e) for s, f, e, _ in events] == [
        (1, FIRST, len(first)),
        (1, DONE, len(first) + len(end)),
    ]
