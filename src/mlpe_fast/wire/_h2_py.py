"""Pure-Python twin of the HTTP/2 DATA de-framer (``csrc/mlpe_h2.h``).

The ``h2`` library owns an HTTP/2 connection: HPACK, stream states,
SETTINGS, PING, GOAWAY, RST_STREAM and the outbound flow-control windows.
It parses frames in Python at about 20 µs each, and a streamed completion
arrives as one DATA frame per token.  So a de-framer sits in front of it and
takes over the one frame type that is per token: the DATA frames of the
streams the caller registered, whose payloads go straight to each stream's
:class:`~mlpe_fast.wire._response_py.ResponseDecoder` (body mode) stamped
with the read that carried them, exactly as an HTTP/1.1 body does.  Every
other byte is handed to ``h2`` unchanged.

Rules (RFC 9113 sections in brackets):

 D1. The input is every byte the server sent after the client's connection
     preface: a sequence of frames, each a 9-byte header and its payload
     [4.1].
 D2. A DATA frame (type 0) is consumed here when its stream is registered
     and its length is at most ``max_frame_size`` [4.2]; its payload, less
     the Pad Length byte and the padding of a PADDED frame [6.1], is fed to
     the stream's decoder as it arrives (a frame split across reads is fed
     piece by piece, each piece with its read's stamp).  A Pad Length at or
     beyond the frame's length is a connection error of type
     PROTOCOL_ERROR [6.1]: ``error`` is set and nothing more is consumed.
 D3. Flow control [6.9]: the whole payload of a consumed frame (padding
     included) counts against the connection's and the stream's receive
     windows.  It is acknowledged at once, since the decoder has consumed
     it: when the unacknowledged bytes of the connection reach half of
     ``connection_window``, a WINDOW_UPDATE for stream 0 goes to the
     output; the same for a stream and ``stream_window``, while its stream
     is open.  The thresholds are checked at the end of each frame.
 D4. END_STREAM on a consumed frame [6.1]: after the payload the decoder's
     body ends (``end_body``), the stream is unregistered, and a zero-length
     DATA frame with END_STREAM for that stream is appended to the
     pass-through bytes, so that ``h2``'s stream state closes as if it had
     seen the frame (flow-controlled length 0: its windows are unaffected).
 D5. Every other frame (any other type, DATA of an unregistered stream or
     stream 0, DATA over ``max_frame_size``) is appended unchanged, header
     and payload, to the pass-through bytes.  ``feed`` returns right after
     such a frame is complete, so that the caller can run ``h2`` over it
     (and register the stream whose HEADERS it was) before the next frame
     is looked at.  Bytes of an incomplete frame are passed through as they
     come (``h2`` buffers partial frames).
 D6. Each decoder call that returns milestones adds one event
     ``(stream_id, flags)`` (``FIRST``, ``DONE``, ``ERROR``: the
     ``MLPE_RESPONSE_*`` values) in order.  A decoder fails when it raises
     a :class:`~mlpe_fast.errors.ProtocolError` (a terminal error of the
     body) or a :class:`~mlpe_fast.errors.LocalProtocolError` (it refused
     the call: no head set, say -- the C decoder returns ``ERROR`` for both).
     A stream whose decoder failed reports ``ERROR`` once; its later
     payloads are dropped but still count for flow control (D3), and
     END_STREAM still unregisters it and is passed through (D4), without
     ``DONE``.
 D7. Each event also says where its frame ends in the input (``end``, an
     offset like :attr:`DataDeframer.offset`): just past the payload piece
     whose decoder call gave it and the frame's padding that follows within
     the same ``feed``'s input, or, for ``end_body``, just past the frame.
     A caller that knows where its read ends learns how many bytes the read
     carried past the frame that completed a stream's first token: frames
     of other streams (or the stream's own next token) that the read's one
     arrival stamp covers too (issue 23; the self-audit).
"""

from __future__ import annotations

from typing import Any

from ..errors import LocalProtocolError, ProtocolError
from .events import FirstToken, ResponseComplete

__all__ = (
    "DONE",
    "ERROR",
    "FIRST",
    "FRAME_HEADER_SIZE",
    "PROTOCOL_ERROR",
    "DataDeframer",
    "window_update",
)

# Milestone flags, as MLPE_RESPONSE_* in csrc/mlpe_response.h.
FIRST = 2
DONE = 4
ERROR = 8

PROTOCOL_ERROR = 0x1  # RFC 9113 section 7

FRAME_HEADER_SIZE = 9
_DATA = 0x0
_WINDOW_UPDATE = 0x8
_END_STREAM = 0x1
_PADDED = 0x8

# Where the de-framer is within the current frame.
_HEADER, _PASS, _PAD_LENGTH, _PAYLOAD, _PADDING = range(5)


def window_update(stream_id: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame [6.9]."""
    return (
        (4).to_bytes(3, "big")
        + bytes((_WINDOW_UPDATE, 0))
        + stream_id.to_bytes(4, "big")
        + increment.to_bytes(4, "big")
    )


def _end_stream_frame(stream_id: int) -> bytes:
    return b"\x00\x00\x00" + bytes((_DATA, _END_STREAM)) + stream_id.to_bytes(4, "big")


def _flags(events: list[Any]) -> int:
    flags = 0
    for event in events:
        if isinstance(event, FirstToken):
            flags |= FIRST
        elif isinstance(event, ResponseComplete):
            flags |= DONE
    return flags


class _Stream:
    __slots__ = ("decoder", "failed", "unacked")

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.unacked = 0
        self.failed = False


class DataDeframer:
    """Splits an HTTP/2 connection's input into decoded DATA and the rest.

    Args:
        max_frame_size: the SETTINGS_MAX_FRAME_SIZE the client advertised
            (a larger DATA frame is left to ``h2``, which rejects it).
        connection_window: the connection's receive window the client keeps
            open (its initial size plus the client's own increments).
        stream_window: SETTINGS_INITIAL_WINDOW_SIZE the client advertised.

    After each :meth:`feed`, the caller takes the events, the pass-through
    bytes (for ``h2.receive_data``) and the WINDOW_UPDATE frames to send.
    """

    def __init__(
        self,
        *,
        max_frame_size: int = 16384,
        connection_window: int = 65535,
        stream_window: int = 65535,
    ) -> None:
        if not 16384 <= max_frame_size <= (1 << 24) - 1:
            raise ValueError(f"max_frame_size out of range: {max_frame_size}")
        for name, window in (
            ("connection_window", connection_window),
            ("stream_window", stream_window),
        ):
            if not 1 <= window <= (1 << 31) - 1:
                raise ValueError(f"{name} out of range: {window}")
        self.max_frame_size = max_frame_size
        self._conn_threshold = max(1, connection_window // 2)
        self._stream_threshold = max(1, stream_window // 2)
        self._streams: dict[int, _Stream] = {}
        self._pass = bytearray()
        self._out = bytearray()
        self._events: list[tuple[int, int, int]] = []  # stream, flags, end (D7)
        self._conn_unacked = 0
        self._state = _HEADER
        self._header = bytearray()
        self._remaining = 0  # bytes left of the current frame's payload
        self._padding = 0  # padding bytes after the data of a PADDED frame
        self._end_stream = False
        self._stream_id = 0
        self._stream: _Stream | None = None
        self.error = 0
        self.error_pos = 0
        self._offset = 0  # input bytes consumed so far
        self._at = 0  # where the frame that ends now ends (D7)

    # -- streams --------------------------------------------------------------

    def register(self, stream_id: int, decoder: Any) -> None:
        """Takes over the DATA frames of ``stream_id`` (its decoder's head is set)."""
        if not 0 < stream_id < (1 << 31):
            raise ValueError(f"stream id out of range: {stream_id}")
        if stream_id in self._streams:
            raise ValueError(f"stream {stream_id} is already registered")
        self._streams[stream_id] = _Stream(decoder)

    def unregister(self, stream_id: int) -> bool:
        """Hands the stream's later DATA frames back to ``h2``; returns
        whether it was registered.  A frame already half consumed is
        finished here (its payload dropped, its bytes still counted)."""
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return False
        if self._stream is stream:
            stream.failed = True  # finish the frame in progress without feeding it
        return True

    @property
    def streams(self) -> int:
        """Registered streams."""
        return len(self._streams)

    # -- input ----------------------------------------------------------------

    def feed(self, data: bytes | bytearray | memoryview, t_ns: int) -> int:
        """Consumes input read at ``t_ns``; returns how many bytes were used
        (fewer than given only after a pass-through frame or an error)."""
        if self.error:
            return 0
        view = memoryview(data)
        n = len(view)
        pos = 0
        while pos < n:
            state = self._state
            if state == _HEADER:
                take = min(FRAME_HEADER_SIZE - len(self._header), n - pos)
                self._header += view[pos : pos + take]
                pos += take
                if len(self._header) < FRAME_HEADER_SIZE:
                    break
                if self._on_header():  # an empty pass-through frame
                    break
                if self._state == _HEADER:  # an empty DATA frame, consumed
                    self._at = self._offset + pos
                    self._frame_done(t_ns)
            elif state == _PASS:
                take = min(self._remaining, n - pos)
                self._pass += view[pos : pos + take]
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = _HEADER
                    break  # D5: the caller runs h2 over it first
            elif state == _PAD_LENGTH:
                pad = view[pos]
                pos += 1
                self._remaining -= 1
                if pad > self._remaining:  # D2: Pad Length >= the frame's length
                    self.error = PROTOCOL_ERROR
                    self.error_pos = self._offset + pos - 1
                    break
                self._padding = pad
                self._remaining -= pad
                self._state = _PAYLOAD
                if self._remaining == 0:
                    self._at = self._offset + pos
                    self._end_payload(t_ns)
            elif state == _PAYLOAD:
                take = min(self._remaining, n - pos)
                # D7: the piece, and the padding after it that this input holds.
                end = pos + take
                if take == self._remaining:
                    end += min(self._padding, n - end)
                self._deliver(view[pos : pos + take], t_ns, self._offset + end)
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._at = self._offset + pos
                    self._end_payload(t_ns)
            else:  # _PADDING
                take = min(self._padding, n - pos)
                pos += take
                self._padding -= take
                if self._padding == 0:
                    self._at = self._offset + pos
                    self._frame_done(t_ns)
        self._offset += pos
        return pos

    def _on_header(self) -> bool:
        """Starts a frame; returns True when it is an empty pass-through
        frame, already complete (``feed`` returns, D5)."""
        h = self._header
        self._header = bytearray()
        length = int.from_bytes(h[0:3], "big")
        kind = h[3]
        flags = h[4]
        stream_id = int.from_bytes(h[5:9], "big") & 0x7FFFFFFF
        stream = self._streams.get(stream_id) if kind == _DATA else None
        if (
            stream is None
            or length > self.max_frame_size
            # too short for its Pad Length field: h2 reports the error [4.2]
            or (flags & _PADDED and length == 0)
        ):
            self._pass += h  # D5: h2's frame, header and all
            self._remaining = length
            self._state = _PASS if length else _HEADER
            return length == 0
        self._stream = stream
        self._stream_id = stream_id
        self._end_stream = bool(flags & _END_STREAM)
        self._padding = 0
        self._remaining = length
        # D3: the whole payload counts, padding included.
        self._conn_unacked += length
        stream.unacked += length
        if flags & _PADDED:
            self._state = _PAD_LENGTH
        else:
            self._state = _PAYLOAD if length else _HEADER
        return False

    def _deliver(self, piece: memoryview, t_ns: int, end: int) -> None:
        stream = self._stream
        if stream is None or stream.failed or not piece:
            return
        try:
            flags = _flags(stream.decoder.feed_body(piece, t_ns))
        except (ProtocolError, LocalProtocolError):
            stream.failed = True
            flags = ERROR
        if flags:
            self._events.append((self._stream_id, flags, end))

    def _end_payload(self, t_ns: int) -> None:
        if self._padding:
            self._state = _PADDING
        else:
            self._frame_done(t_ns)

    def _frame_done(self, t_ns: int) -> None:
        """Ends a consumed DATA frame (D3, D4)."""
        self._state = _HEADER
        stream = self._stream
        stream_id = self._stream_id
        self._stream = None
        if stream is not None:
            registered = self._streams.get(stream_id) is stream
            if self._end_stream:
                if registered:
                    del self._streams[stream_id]
                if not stream.failed:
                    stream.failed = True  # no more input for it
                    try:
                        flags = _flags(stream.decoder.end_body(t_ns))
                    except (ProtocolError, LocalProtocolError):
                        flags = ERROR
                    if flags:
                        self._events.append((stream_id, flags, self._at))
                self._pass += _end_stream_frame(stream_id)
            elif registered and stream.unacked >= self._stream_threshold:
                self._out += window_update(stream_id, stream.unacked)
                stream.unacked = 0
        if self._conn_unacked >= self._conn_threshold:
            self._out += window_update(0, self._conn_unacked)
            self._conn_unacked = 0

    # -- output ---------------------------------------------------------------

    def take_events(self) -> list[tuple[int, int]]:
        """``(stream_id, flags)`` per decoder call that returned milestones (D6)."""
        return [(stream_id, flags) for stream_id, flags, _ in self.take_events_ending()]

    def take_events_ending(self) -> list[tuple[int, int, int]]:
        """``(stream_id, flags, end)``: the events of :meth:`take_events` with
        the input offset just past the frame's bytes (D7)."""
        events, self._events = self._events, []
        return events

    @property
    def offset(self) -> int:
        """Input bytes consumed since the de-framer was made."""
        return self._offset

    def take_passthrough(self) -> bytes:
        """The bytes for ``h2.receive_data`` (D4, D5)."""
        data = bytes(self._pass)
        self._pass.clear()
        return data

    def take_window_updates(self) -> bytes:
        """WINDOW_UPDATE frames to send (D3)."""
        data = bytes(self._out)
        self._out.clear()
        return data
