"""An HTTP/2 connection carrying many requests, one stream each.

The ``h2`` library keeps the connection's state (HPACK, stream states,
SETTINGS, outbound flow control); the per-read path is the
:class:`H2ReadCore` of ``_h2_reader``, whose DATA de-framer feeds each
registered stream's decoder in C, stamped at the read, so a record means
the same over HTTP/2 as over HTTP/1.1.  Here is what runs once per request
and once per control frame.

Rules (RFC 9113 sections in brackets):
 1. A stream's response head goes to its decoder (body mode); the stream is
    then registered with the de-framer, unless the head has a
    ``content-length`` (a whole JSON or error body): those few DATA frames
    go through ``h2``, which checks the length [8.1.1].
 2. Receive windows: the stream window is ``STREAM_WINDOW`` (SETTINGS), the
    connection's is raised to ``CONNECTION_WINDOW`` at once; the de-framer
    acknowledges DATA as its decoder consumes it, ``h2`` what it delivers
    itself, so a long stream never stalls [6.9].
 3. Request bodies are sent as the server's windows allow; the rest waits
    for its WINDOW_UPDATE [6.9].
 4. RST_STREAM from the server fails the stream (``StreamReset``), except
    REFUSED_STREAM before any response, which the server did not process:
    the request is sent again, on any connection [8.7].
 5. GOAWAY: no new streams here; streams above its last stream id were not
    processed and are sent again elsewhere; the others run to their end
    [6.8].  (``h2`` closes its state machine on GOAWAY and would reject the
    frames of those streams, so the connection puts it back to open and
    itself never opens a stream again.)
 6. A request is retried at most ``MAX_RETRIES`` times (rules 4 and 5)
    and then fails with the reason of the last refusal.
 7. As over HTTP/1.1, the end of a stream is stamped in the read that
    completed it, and the record is made after the loop has handled the
    other reads that were ready at the same time.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Protocol, cast

from h2.config import H2Configuration
from h2.connection import ConnectionState
from h2.connection import H2Connection as _H2State
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import FlowControlError, ProtocolError, StreamClosedError
from h2.settings import SettingCodes, Settings

from ..errors import ProtocolError as DecodeError
from ..errors import error_name
from ..wire._h2 import DONE, ERROR, FIRST
from ..wire._response import ResponseDecoder
from ..wire.events import ResponseSummary
from ._h2_reader import H2ReadCore
from .clock import monotonic_ns
from .dial import NO_H2C, Endpoint
from .exchange import Exchange, ReadStamps
from .framing import RequestFraming

__all__ = ("CONNECTION_WINDOW", "MAX_RETRIES", "STREAM_WINDOW", "H2Connection", "H2ConnectionOwner")

# Receive windows (rule 2): a stream's 1 MiB holds a whole streamed answer
# between two acknowledgements; the connection's 16 MiB, 16 such streams.
STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 16 << 20
MAX_FRAME_SIZE = 16384  # SETTINGS_MAX_FRAME_SIZE's initial value [6.5.2]
# Streams per connection when the server sets no lower limit.
MAX_STREAMS = 1000
# Rule 6: enough for a server that sends GOAWAY every few streams under
# load (a per-connection request limit), few enough to end a loop.
MAX_RETRIES = 10


class H2ConnectionOwner(Protocol):
    """What an HTTP/2 connection needs of the pool that holds it
    (:class:`mlpe_fast.engine.pool.ConnectionPool`).  Declared here, by the
    connection, so that the pool depends on the connection and not back."""

    @property
    def decoder_options(self) -> dict[str, Any]: ...

    @property
    def framing(self) -> RequestFraming: ...

    @property
    def endpoint(self) -> Endpoint: ...

    #: The server's stream limit as its last SETTINGS said (pool rule 2);
    #: the connection updates it when a SETTINGS frame arrives.
    stream_limit: int

    def start(self, exchange: Exchange) -> None:
        """Sends ``exchange`` again, on another connection (rules 4 to 6)."""
        ...

    def room_freed(self, connection: H2Connection) -> None:
        """``connection`` can take more streams."""
        ...

    def draining(self, connection: H2Connection) -> None:
        """``connection`` takes no new streams (GOAWAY)."""
        ...

    def forget(self, connection: H2Connection) -> None:
        """``connection`` closed: it is no longer the pool's."""
        ...


class _Stream:
    """One request on the connection (the watchdog's view of it too)."""

    __slots__ = (
        "body_sent",
        "connection",
        "decoder",
        "done_at",
        "done_read",
        "exchange",
        "first_later",
        "first_read",
        "kernel_done",
        "kernel_first",
        "registered",
        "segment_first",
        "stream_id",
    )

    def __init__(self, connection: H2Connection, stream_id: int, exchange: Exchange) -> None:
        self.connection = connection
        self.stream_id = stream_id
        self.exchange = exchange
        self.decoder: Any = ResponseDecoder(**connection.pool.decoder_options)
        self.body_sent = 0
        self.registered = False
        self.done_at = 0  # the stamp of the read that completed the response
        # When the reads that carried the first token and the end were read,
        # and whether their stamps are the kernel's (RequestRecord).
        self.first_read = self.done_read = 0
        self.kernel_first = self.kernel_done = False
        self.segment_first = 0  # _receive_py.SEGMENT_*
        # Bytes the first token's read carried past its frame (RequestRecord).
        self.first_later = 0

    def reads(self, summary: ResponseSummary) -> ReadStamps:
        """The read stamps for :meth:`Exchange.record`: the end's only when
        the read that ended the stream also carried ``t_done``."""
        done_read = self.done_read if summary.t_done == self.done_at else 0
        return (
            self.first_read,
            done_read,
            self.kernel_first,
            self.kernel_done,
            self.segment_first,
            self.first_later,
        )

    @property
    def t_issue(self) -> int:
        return self.exchange.t_issue

    @property
    def last_read_ns(self) -> int:
        return self.connection.last_read_ns

    def fail(self, t_ns: int, error_class: str, message: str) -> None:
        self.connection.fail_stream(self, t_ns, error_class, message)


class H2Connection(H2ReadCore, asyncio.BufferedProtocol):
    """One HTTP/2 connection to the endpoint."""

    def __init__(self, pool: H2ConnectionOwner) -> None:
        H2ReadCore.__init__(self, MAX_FRAME_SIZE, CONNECTION_WINDOW, STREAM_WINDOW)
        self.pool = pool
        self._call_soon = asyncio.get_running_loop().call_soon
        self.state = _H2State(
            config=H2Configuration(
                client_side=True,
                header_encoding=None,
                # The request's fields are built by RequestFraming, lowercase
                # and valid; checking them again costs ~45 µs per request.
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        # Set whole before the preface, so that they are what it announces.
        self.state.local_settings = Settings(
            client=True,
            initial_values={
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.MAX_CONCURRENT_STREAMS: 100,
                SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                SettingCodes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
                SettingCodes.MAX_HEADER_LIST_SIZE: 64 << 10,
            },
        )
        self.streams: dict[int, _Stream] = {}
        self._blocked: list[_Stream] = []  # rule 3: bodies waiting for window
        self._finished: list[_Stream] = []  # rule 7
        self.draining = False
        self._last_stream_id: int | None = None
        self._settings_seen = False

    # -- asyncio protocol -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state = self.state
        state.initiate_connection()
        state.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        if not self._settings_seen and self.pool.endpoint.tls is None:
            # h2c closed before the server's SETTINGS, its first frame: an
            # HTTP/1.1 server answering our preface with an error (dial.NO_H2C).
            why = f"{NO_H2C}; it closed the connection before any HTTP/2 frame"
            self._end_all(monotonic_ns(), "HTTP2Unsupported", why)
            return
        self._end_all(monotonic_ns(), "IncompleteResponse", "the connection closed mid-stream")

    def eof_received(self) -> bool:
        return False

    # -- requests -------------------------------------------------------------

    def room(self) -> int:
        """Streams that can be started now (pool rule 1)."""
        if self.closed or self.draining:
            return 0
        # Before this connection's SETTINGS, what the server said on another one.
        limit = self._stream_limit() if self._settings_seen else self.pool.stream_limit
        return limit - len(self.streams)

    def _stream_limit(self) -> int:
        """The server's SETTINGS_MAX_CONCURRENT_STREAMS, at most
        ``MAX_STREAMS`` (an unlimited server still gets its load spread)."""
        return max(0, min(self.state.remote_settings.max_concurrent_streams, MAX_STREAMS))

    def start(self, exchange: Exchange) -> None:
        state = self.state
        stream_id = state.get_next_available_stream_id()
        stream = _Stream(self, stream_id, exchange)
        self.streams[stream_id] = stream
        body = exchange.body
        headers = self.pool.framing.h2(exchange.path, len(body))
        t_write = monotonic_ns()
        # The first request on a new connection began with the connect.
        exchange.t_issue = exchange.t_opened or t_write
        exchange.t_opened = 0
        state.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self._send_body(stream)
        self._flush()

    def _send_body(self, stream: _Stream) -> None:
        """Rule 3: as much of the body as the windows take."""
        state = self.state
        body = stream.exchange.body
        stream_id = stream.stream_id
        while stream.body_sent < len(body):
            room = min(state.local_flow_control_window(stream_id), state.max_outbound_frame_size)
            if room <= 0:
                if stream not in self._blocked:
                    self._blocked.append(stream)
                return
            end = min(len(body), stream.body_sent + room)
            state.send_data(stream_id, body[stream.body_sent : end], end_stream=end == len(body))
            stream.body_sent = end

    def in_flight(self) -> list[_Stream]:
        return [s for s in self.streams.values() if not s.done_at]

    # -- the read path's hooks ------------------------------------------------

    def on_stream_event(self, stream_id: int, flags: int, t_ns: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None or stream.done_at:
            return
        exchange = stream.exchange
        if flags & FIRST:
            self._first_read(stream, self.event_later_bytes)
            if exchange.on_first is not None:
                exchange.on_first(exchange, t_ns)
        if flags & ERROR:
            # The decoder failed (an event over max_event, say): stop the stream.
            self._reset(stream, ErrorCodes.CANCEL)
            self._done(stream, t_ns)
        elif flags & DONE:
            stream.registered = False  # the de-framer let it go (D4)
            self._done(stream, t_ns)

    def on_frames(self, data: bytes, t_ns: int) -> None:
        state = self.state
        try:
            events = state.receive_data(data)
        except (ProtocolError, FlowControlError) as error:
            self._flush()  # h2 queued a GOAWAY saying why
            self._abort(t_ns, "HTTP2ProtocolError", f"the endpoint broke HTTP/2: {error}")
            return
        for event in events:
            if isinstance(event, ResponseReceived):
                self._on_head(event, t_ns)
            elif isinstance(event, DataReceived):
                self._on_data(event, t_ns)
            elif isinstance(event, StreamEnded):
                self._on_end(event.stream_id, t_ns)
            elif isinstance(event, StreamReset):
                self._on_reset(event, t_ns)
            elif isinstance(event, WindowUpdated):
                self._on_window()
            elif isinstance(event, RemoteSettingsChanged):
                self._settings_seen = True
                self.pool.stream_limit = self._stream_limit()
                self.pool.room_freed(self)
            elif isinstance(event, ConnectionTerminated):
                self._on_goaway(event, t_ns)
        self._flush()

    def on_deframe_error(self, error_code: int, t_ns: int) -> None:
        self.state.close_connection(error_code=error_code)
        self._flush()
        self._abort(t_ns, "HTTP2ProtocolError", "the endpoint sent a DATA frame with bad padding")

    # -- events ---------------------------------------------------------------

    def _on_head(self, event: ResponseReceived, t_ns: int) -> None:
        stream = self.streams.get(event.stream_id)
        if stream is None or stream.done_at:
            return
        status = 0
        fields: list[tuple[bytes, bytes]] = []
        has_length = False
        for name, value in event.headers:
            if name == b":status":
                status = int(value)
            elif name[:1] != b":":
                fields.append((name, value))
                has_length = has_length or name == b"content-length"
        try:
            stream.decoder.set_head(status, fields, t_ns)
        except DecodeError:
            self._reset(stream, ErrorCodes.CANCEL)
            self._done(stream, t_ns)
            return
        if not has_length and not event.stream_ended:
            self.register(event.stream_id, stream.decoder)  # rule 1
            stream.registered = True

    def _on_data(self, event: DataReceived, t_ns: int) -> None:
        stream_id = event.stream_id
        if event.flow_controlled_length:
            try:
                self.state.acknowledge_received_data(event.flow_controlled_length, stream_id)
            except StreamClosedError:
                pass
        stream = self.streams.get(stream_id)
        if stream is None or stream.done_at or not event.data:
            return
        try:
            milestones = stream.decoder.feed_body(event.data, t_ns)
        except DecodeError:
            self._reset(stream, ErrorCodes.CANCEL)
            self._done(stream, t_ns)
            return
        exchange = stream.exchange
        if milestones:  # only a FirstToken comes from feed_body
            # h2 hands over one frame's data: where it ends in the read is not known.
            self._first_read(stream, 0)
            if exchange.on_first is not None:
                exchange.on_first(exchange, t_ns)

    def _on_end(self, stream_id: int, t_ns: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None or stream.done_at:
            return  # the de-framer ended it (D4)
        try:
            stream.decoder.end_body(t_ns)
        except DecodeError:
            pass  # the summary carries the error
        self._done(stream, t_ns)

    def _on_reset(self, event: StreamReset, t_ns: int) -> None:
        stream = self.streams.get(event.stream_id)
        if stream is None or stream.done_at:
            return
        code = event.error_code
        if stream.registered:
            self.unregister(stream.stream_id)
            stream.registered = False
        summary = stream.decoder.summary()
        if self._ended_after_done(stream, t_ns, summary):
            return
        if code == ErrorCodes.REFUSED_STREAM and summary.status == 0:
            self._retry(stream, t_ns, "StreamRefused", "the endpoint refused the stream")
            return
        name = code.name if isinstance(code, ErrorCodes) else str(code)
        self._fail(stream, t_ns, "StreamReset", f"the endpoint reset the stream ({name})")

    def _ended_after_done(
        self, stream: _Stream, t_ns: int, summary: ResponseSummary | None = None
    ) -> bool:
        """A stream cut after its ``[DONE]`` is complete, as over HTTP/1.1
        (rule R4 of ``csrc/mlpe_response.h``): only its END_STREAM is missing."""
        if not (summary or stream.decoder.summary()).done:
            return False
        try:
            stream.decoder.end_body(t_ns)
        except DecodeError:
            pass  # the summary carries the error
        self._done(stream, t_ns)
        return True

    def _on_window(self) -> None:
        blocked, self._blocked = self._blocked, []
        for stream in blocked:
            if not stream.done_at and stream.stream_id in self.streams:
                self._send_body(stream)

    def _on_goaway(self, event: ConnectionTerminated, t_ns: int) -> None:
        # Rule 5; see the module doc for the state machine.
        self.state.state_machine.state = ConnectionState.CLIENT_OPEN
        last = event.last_stream_id if event.last_stream_id is not None else 0
        self._last_stream_id = last
        if not self.draining:
            self.draining = True
            self.pool.draining(self)
        for stream in [s for s in self.streams.values() if s.stream_id > last and not s.done_at]:
            if stream.registered:
                self.unregister(stream.stream_id)
            self._retry(stream, t_ns, "GoAway", "the endpoint went away before the stream")
        self._close_if_drained()

    # -- ends -----------------------------------------------------------------

    def _first_read(self, stream: _Stream, later: int) -> None:
        if not stream.first_read:
            stream.first_read = self.last_read_ns
            stream.kernel_first = self.last_read_kernel
            stream.segment_first = self.last_read_segment
            stream.first_later = later

    def _done(self, stream: _Stream, t_ns: int) -> None:
        """Rule 7: stamp now, make the record after this iteration's reads."""
        stream.done_at = t_ns
        stream.done_read = self.last_read_ns
        stream.kernel_done = self.last_read_kernel
        if not self._finished:
            self._call_soon(self._finish_streams)
        self._finished.append(stream)

    def _finish_streams(self) -> None:
        finished, self._finished = self._finished, []
        for stream in finished:
            self._finish(stream)
        self._close_if_drained()

    def _finish(self, stream: _Stream) -> None:
        if self.streams.pop(stream.stream_id, None) is None:
            return  # already ended (failed meanwhile)
        if stream.registered:
            self.unregister(stream.stream_id)
        summary: ResponseSummary = stream.decoder.summary()
        exchange = stream.exchange
        reads = stream.reads(summary)
        if summary.error_code:
            record = exchange.record(
                stream.done_at,
                summary,
                error_name(summary.error_code),
                summary.error_message,
                reads,
            )
        else:
            record = exchange.record(stream.done_at, summary, reads=reads)
        self.pool.room_freed(self)
        exchange.on_done(record)

    def _fail(self, stream: _Stream, t_ns: int, error_class: str, message: str) -> None:
        if self.streams.pop(stream.stream_id, None) is None:
            return
        if stream.registered:
            self.unregister(stream.stream_id)
        stream.done_at = t_ns
        exchange = stream.exchange
        summary = stream.decoder.summary()
        record = exchange.record(t_ns, summary, error_class, message, stream.reads(summary))
        if not self.closed:
            self.pool.room_freed(self)
        exchange.on_done(record)

    def _retry(self, stream: _Stream, t_ns: int, error_class: str, message: str) -> None:
        """Rules 4-6: the server did not process the request."""
        exchange = stream.exchange
        if exchange.retries >= MAX_RETRIES:
            self._fail(stream, t_ns, error_class, f"{message}, {exchange.retries + 1} times")
            return
        self.streams.pop(stream.stream_id, None)
        stream.done_at = t_ns
        exchange.retries += 1
        exchange.connect_ns = 0
        self._call_soon(self.pool.start, exchange)

    def fail_stream(self, stream: _Stream, t_ns: int, error_class: str, message: str) -> None:
        """Ends a stream as failed now (timeouts, cancellation) and tells the
        server to stop it."""
        if stream.done_at and stream in self._finished:
            return  # completed; its record is on its way (rule 7)
        if not self.closed and stream.stream_id in self.streams:
            self._reset(stream, ErrorCodes.CANCEL)
            self._flush()
        self._fail(stream, t_ns, error_class, message)

    def _reset(self, stream: _Stream, code: ErrorCodes) -> None:
        if stream.registered:
            self.unregister(stream.stream_id)
            stream.registered = False
        try:
            self.state.reset_stream(stream.stream_id, code)
        except (ProtocolError, StreamClosedError):
            pass  # already closed on the server's side

    def _end_all(self, t_ns: int, error_class: str, message: str) -> None:
        """The connection is gone: streams not processed (GOAWAY) are sent
        again, the rest fail."""
        for stream in list(self.streams.values()):
            if stream in self._finished:
                continue
            last = self._last_stream_id
            if last is not None and stream.stream_id > last:
                self._retry(stream, t_ns, "GoAway", "the endpoint went away before the stream")
            elif not self._ended_after_done(stream, t_ns):
                self._fail(stream, t_ns, error_class, message)
        self._blocked.clear()

    def _abort(self, t_ns: int, error_class: str, message: str) -> None:
        self._finish_streams()
        self.close()
        self._end_all(t_ns, error_class, message)

    def _close_if_drained(self) -> None:
        if self.draining and not self.streams and not self.closed:
            self.state.close_connection()
            self._flush()
            self.close(graceful=True)

    def close(self, graceful: bool = False) -> None:
        """Closes the connection (``graceful``: after what is written is sent)."""
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
            if self.transport is not None:
                if graceful:
                    self.transport.close()
                else:
                    self.transport.abort()

    def _flush(self) -> None:
        data = self.state.data_to_send()
        if data and self.transport is not None and not self.closed:
            self.transport.write(data)
