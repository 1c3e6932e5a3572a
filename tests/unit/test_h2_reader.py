"""The engine's HTTP/2 read path: H2ReadCore (``_h2_reader_c`` and its twin).

A subclass (with asyncio.BufferedProtocol, as the engine's owner is) records
its hook calls; reads go through get_buffer / buffer_updated as the event
loop drives them, with a fake transport, and once over a real socket.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hyperframe.frame import Frame, HeadersFrame, PingFrame, SettingsFrame

from mlpe_fast._native import USE_EXTENSIONS
from mlpe_fast.sim.stream import chat_chunk, sse_event
from tests.conftest import wire_module
from tests.unit.test_h2_deframer import (
    DONE,
    FIRST,
    data_frame,
    end_stream_frame,
    raw_frame,
    tokens,
    updates_of,
)

SSE_HEAD = [(b"content-type", b"text/event-stream")]
SETTINGS = bytes(SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 10}).serialize())
PING = bytes(PingFrame(0, opaque_data=b"pingpong").serialize())


@pytest.fixture
def reader(impl: str) -> ModuleType:
    if impl == "c" and not USE_EXTENSIONS:
        pytest.skip("compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
    return importlib.import_module(f"mlpe_fast.engine._h2_reader_{impl}")


@pytest.fixture
def resp(impl: str) -> ModuleType:
    return wire_module("response", impl)


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))


def recorder_class(reader: ModuleType) -> type[Any]:
    """The owner's shape: the core's hooks overridden in a Python subclass
    that is also an asyncio.BufferedProtocol."""

    class Recorder(reader.H2ReadCore, asyncio.BufferedProtocol):  # type: ignore[name-defined,misc]
        def __init__(self, **windows: int) -> None:
            reader.H2ReadCore.__init__(
                self,
                windows.get("max_frame_size", 16384),
                windows.get("connection_window", 65535),
                windows.get("stream_window", 65535),
            )
            self.calls: list[tuple[Any, ...]] = []
            self.later: list[tuple[int, int, int]] = []  # event_later_bytes per event
            self.react: Callable[[str, Any], None] | None = None

        def on_stream_event(self, stream_id: int, flags: int, t_ns: int) -> None:
            self.calls.append(("event", stream_id, flags, t_ns))
            self.later.append((stream_id, flags, self.event_later_bytes))
            if self.react is not None:
                self.react("event", (stream_id, flags))

        def on_frames(self, data: bytes, t_ns: int) -> None:
            assert isinstance(data, bytes)
            self.calls.append(("frames", data, t_ns))
            if self.react is not None:
                self.react("frames", data)

        def on_deframe_error(self, error_code: int, t_ns: int) -> None:
            self.calls.append(("error", error_code, t_ns))

    return Recorder


def make(reader: ModuleType, **windows: int) -> Any:
    core = recorder_class(reader)(**windows)
    core.transport = FakeTransport()
    return core


def read(core: Any, data: bytes) -> None:
    """What the event loop does with bytes from the socket."""
    buffer = core.get_buffer(-1)
    assert len(buffer) >= len(data)
    buffer[: len(data)] = data
    core.buffer_updated(len(data))


def decoder(resp: ModuleType) -> Any:
    d = resp.ResponseDecoder()
    d.set_head(200, SSE_HEAD, 0)
    return d


def without_stamps(calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [call[:-1] for call in calls]


def test_is_a_buffered_protocol(reader: ModuleType) -> None:
    core = make(reader)
    assert isinstance(core, asyncio.BufferedProtocol)
    assert isinstance(core, reader.H2ReadCore)
    core.anything = 1  # the subclass has a __dict__, as the owner needs
    assert (core.closed, core.last_read_ns) == (False, 0)
    assert core.deframer.streams == 0
    with pytest.raises(NotImplementedError):
        reader.H2ReadCore(16384, 65535, 65535).on_frames(b"", 0)


def test_hooks_in_input_order(reader: ModuleType, resp: ModuleType) -> None:
    core = make(reader)
    dec = decoder(resp)
    core.register(1, dec)
    body = tokens("a", "b")
    read(core, data_frame(1, body[:-20]) + SETTINGS + data_frame(1, body[-20:], end_stream=True))
    t_ns = core.last_read_ns
    assert t_ns > 0
    assert core.calls == [
        ("event", 1, FIRST, t_ns),
        ("frames", SETTINGS, t_ns),
        ("event", 1, DONE, t_ns),
        ("frames", end_stream_frame(1), t_ns),
    ]
    assert dec.summary().content == "ab" and dec.summary().t_first == t_ns
    assert core.deframer.streams == 0


def test_headers_register_the_stream_within_the_read(reader: ModuleType, resp: ModuleType) -> None:
    """Pass-through is handed over before the next frame is looked at: the
    stream registered by on_frames gets the DATA behind its HEADERS, in the
    same read."""
    core = make(reader)
    decoders: dict[int, Any] = {}

    def react(kind: str, data: Any) -> None:
        if kind != "frames":
            return
        frame, _ = Frame.parse_frame_header(memoryview(data[:9]))
        if isinstance(frame, HeadersFrame):
            decoders[frame.stream_id] = decoder(resp)
            core.register(frame.stream_id, decoders[frame.stream_id])

    core.react = react
    headers = bytes(HeadersFrame(3, data=b"\x88", flags=["END_HEADERS"]).serialize())
    read(core, headers + data_frame(3, tokens("x")) + data_frame(3, end_stream=True) + PING)
    assert without_stamps(core.calls) == [
        ("frames", headers),
        ("event", 3, FIRST),
        ("event", 3, DONE),
        ("frames", end_stream_frame(3) + PING),
    ]
    assert decoders[3].summary().content == "x"


def test_window_updates_written_once_per_read(reader: ModuleType, resp: ModuleType) -> None:
    core = make(reader, connection_window=1, stream_window=1)
    core.register(1, decoder(resp))
    core.register(3, decoder(resp))
    frames = [data_frame(1, b": a\n"), data_frame(3, b": bb\n"), SETTINGS, data_frame(1, b":\n")]
    read(core, b"".join(frames))
    assert len(core.transport.writes) == 1
    assert updates_of(core.transport.writes[0]) == [(1, 4), (0, 4), (3, 5), (0, 5), (1, 2), (0, 2)]
    read(core, PING)  # nothing to acknowledge: nothing written
    assert len(core.transport.writes) == 1
    frame = data_frame(3, b":" * 10)
    read(core, frame[:12])  # not at the frame's end yet
    assert len(core.transport.writes) == 1
    read(core, frame[12:])
    assert updates_of(core.transport.writes[1]) == [(3, 10), (0, 10)]


def test_no_transport(reader: ModuleType, resp: ModuleType) -> None:
    core = make(reader, connection_window=1)
    core.transport = None
    core.register(1, decoder(resp))
    read(core, data_frame(1, b": c\n"))
    read(core, data_frame(1, b": c\n"))
    assert core.calls == []


def test_closed_by_on_frames_stops_the_read(reader: ModuleType, resp: ModuleType) -> None:
    core = make(reader, connection_window=1, stream_window=1)
    dec = decoder(resp)
    core.register(1, dec)

    def react(kind: str, data: Any) -> None:
        core.closed = True

    core.react = react
    read(core, data_frame(1, b": c\n") + SETTINGS + data_frame(1, tokens("late")) + PING)
    assert without_stamps(core.calls) == [("frames", SETTINGS)]
    assert core.transport.writes == []  # the read was dropped, updates included
    assert dec.summary().content == ""  # the frame behind SETTINGS was not looked at
    t_ns = core.last_read_ns
    read(core, PING)  # a closed core reads no further
    assert len(core.calls) == 1 and core.last_read_ns == t_ns


def test_closed_by_an_event_stops_the_read(reader: ModuleType, resp: ModuleType) -> None:
    core = make(reader)
    core.register(1, decoder(resp))
    core.register(3, decoder(resp))

    def react(kind: str, data: Any) -> None:
        core.closed = True

    core.react = react
    read(core, data_frame(1, tokens("a")) + data_frame(3, tokens("b")) + SETTINGS)
    assert without_stamps(core.calls) == [("event", 1, FIRST)]


def test_deframe_error(reader: ModuleType, resp: ModuleType) -> None:
    core = make(reader, connection_window=1)
    core.register(1, decoder(resp))
    bad = raw_frame(0, 0x8, 1, b"\x05abc")  # Pad Length beyond the frame [6.1]
    read(core, data_frame(1, b": c\n") + SETTINGS + bad + PING)
    t_ns = core.last_read_ns
    assert core.calls == [("frames", SETTINGS, t_ns), ("error", 1, t_ns)]
    assert core.transport.writes == []
    assert core.deframer.error == 1 and core.deframer.error_pos == 13 + len(SETTINGS) + 9
    read(core, PING)  # the de-framer takes nothing more
    assert core.calls[-1] == ("error", 1, core.last_read_ns)


def test_register_and_unregister(reader: ModuleType, resp: ModuleType) -> None:
    core = make(reader)
    dec = decoder(resp)
    core.register(1, dec)
    with pytest.raises(ValueError, match="already registered"):
        core.register(1, decoder(resp))
    assert core.deframer.streams == 1
    assert core.unregister(1) is True and core.unregister(1) is False
    frame = data_frame(1, tokens("x"))
    read(core, frame)
    assert without_stamps(core.calls) == [("frames", frame)]


@pytest.mark.c_extension
def test_compiled_core_takes_compiled_decoders() -> None:
    if not USE_EXTENSIONS:
        pytest.skip("compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
    core = make(importlib.import_module("mlpe_fast.engine._h2_reader_c"))
    with pytest.raises(TypeError):
        core.register(1, decoder(wire_module("response", "py")))


def test_over_a_socket(reader: ModuleType, resp: ModuleType) -> None:
    """The event loop drives the subclass as a BufferedProtocol."""
    body = b"".join(sse_event(chat_chunk(content=f"{k} ")) for k in range(200))
    frames = b"".join(data_frame(1, body[i : i + 100]) for i in range(0, len(body), 100))
    frames += data_frame(1, sse_event(b"[DONE]"), end_stream=True)

    async def main() -> tuple[Any, bytes]:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        core = recorder_class(reader)(connection_window=2000, stream_window=1000)
        dec = decoder(resp)
        core.register(1, dec)
        done = loop.create_future()

        def react(kind: str, data: Any) -> None:
            if kind == "event" and data[1] & DONE:
                done.set_result(None)

        core.react = react
        transport, _ = await loop.connect_accepted_socket(lambda: core, ours)
        core.transport = transport
        theirs.setblocking(False)
        await loop.sock_sendall(theirs, frames)
        await asyncio.wait_for(done, 10)
        await asyncio.sleep(0.01)
        received = b""
        try:
            while chunk := theirs.recv(65536):
                received += chunk
        except BlockingIOError:
            pass
        transport.close()
        theirs.close()
        return core, received

    core, received = asyncio.run(main())
    events = [call[1:3] for call in core.calls if call[0] == "event"]
    assert events == [(1, FIRST), (1, DONE)]
    assert core.calls[-1][:2] == ("frames", end_stream_frame(1))
    increments = updates_of(received)
    assert sum(inc for sid, inc in increments if sid == 0) > len(body) - 2000
    assert all(sid in (0, 1) for sid, _ in increments)


def test_later_bytes_of_a_first_token_at_every_split(reader: ModuleType, resp: ModuleType) -> None:
    """A read that completes a stream's first token says how many of its
    bytes lie past that token's frame: the later frames its one arrival
    stamp covers too (other streams' DATA, control frames)."""
    first = data_frame(1, sse_event(chat_chunk(content="a")), pad=2)
    other = data_frame(3, sse_event(chat_chunk(content="b")))
    total = first + other + PING
    payload_end = len(first) - 2
    for i in range(1, len(total)):
        core = make(reader)
        core.register(1, decoder(resp))
        core.register(3, decoder(resp))
        read(core, total[:i])
        read(core, total[i:])
        # Where the first token's last byte is, there is its read.
        one = i - min(len(first), i) if i >= payload_end else len(total) - len(first)
        three = i - len(first) - len(other) if i >= len(first) + len(other) else len(PING)
        assert core.later == [(1, FIRST, one), (3, FIRST, three)], i
    core = make(reader)
    assert core.event_later_bytes == 0


def test_later_bytes_within_one_read(reader: ModuleType, resp: ModuleType) -> None:
    """Frames of 32 streams in one read: each first token has every frame
    after its own behind it, the last none."""
    core = make(reader)
    frames = [data_frame(s, sse_event(chat_chunk(content="t"))) for s in range(1, 65, 2)]
    for s in range(1, 65, 2):
        core.register(s, decoder(resp))
    read(core, b"".join(frames))
    after = [sum(map(len, frames[k + 1 :])) for k in range(len(frames))]
    assert core.later == [(s, FIRST, n) for s, n in zip(range(1, 65, 2), after, strict=True)]
