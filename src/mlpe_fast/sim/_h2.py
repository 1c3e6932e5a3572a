"""The simulated endpoint's HTTP/2 connection (RFC 9113), on the ``h2``
library's connection state, HPACK and flow-control accounting.

Each stream carries one request.  When its request is complete (END_STREAM
read) the stream hands it to :func:`mlpe_fast.sim._handling.handle_request`
and is the :class:`~mlpe_fast.sim._responder.Responder` of its answer, so
the routes, errors, oracle answers, jobs and deadlines are those of
HTTP/1.1; streams are independent, each job paced by the server's pacer.

Framing
-------
A whole response is HEADERS (``:status``, ``content-type``,
``content-length``) then its body in DATA, END_STREAM on the last frame (on
the HEADERS when the body is empty).  A streamed one is HEADERS
(``:status`` 200, ``content-type: text/event-stream``) on arrival, or with
the first token under ``head_at_first_token``, then each job write's events
(no chunk framing) as DATA frames of at most the client's
SETTINGS_MAX_FRAME_SIZE, END_STREAM with ``[DONE]``.

Flow control (RFC 9113 section 6.9)
-----------------------------------
What a write cannot send within the stream's and the connection's windows
waits in the stream and goes on WINDOW_UPDATE (or on a SETTINGS that
widens the windows); meanwhile the stream counts as blocked, so its job
parks and writes on with fresh stamps once the bytes are out, as it does
behind a full transport buffer.  Streams waiting for the connection window
are served in turn.  Request bodies are acknowledged as they are read, so
a prompt larger than the windows flows; one larger than ``max_body`` gets
413 and, the response sent, RST_STREAM(NO_ERROR) to stop the upload
(section 8.1).

Settings
--------
The server's SETTINGS advertise ``h2_max_streams``
(MAX_CONCURRENT_STREAMS), ``h2_window`` (INITIAL_WINDOW_SIZE) and
``max_head`` (MAX_HEADER_LIST_SIZE); the latter two bind the client only
once it acknowledges them (section 6.5.3), and are applied then.  A stream
beyond MAX_CONCURRENT_STREAMS is refused with RST_STREAM(REFUSED_STREAM),
which section 5.1.2 allows, rather than with a connection error (what
``h2`` itself would do): the server keeps ``h2``'s own limit out of the way
and counts its streams itself.

Faults
------
``h2_refuse_every``, ``h2_reset_every`` and ``h2_goaway_after`` (see
:class:`~mlpe_fast.sim.config.SimConfig`); a stream the reset fault marks
takes no ``--fault``.  Of those (:mod:`mlpe_fast.sim.faults`), the resets
are RST_STREAM(INTERNAL_ERROR) on the stream, the status and content faults
are as over HTTP/1.1 (``garbage`` ends with END_STREAM), and the faults of
HTTP/1.x framing and connections (``truncated-chunk``, ``bad-chunk-size``,
``slow-head``, ``close-after-response``) do not apply.

The GOAWAY is written here rather than through ``h2``, whose connection
stops sending anything once it has sent one, while section 6.8 has the
streams up to its last stream id answered in full; streams above it are
refused, and when the processed ones are done the server half-closes (it
reads on until the client closes, so that its last bytes are not lost to a
reset).

What ``h2`` decides
-------------------
``h2`` sends nothing once the client has sent GOAWAY, so a client's GOAWAY
ends the connection, streams in flight included.  DATA arriving on a
stream the server has reset (a refused one, say) gets RST_STREAM
(STREAM_CLOSED) from ``h2``, where section 5.1 would ignore it: a client
must take a second RST_STREAM on a closed stream in its stride.  Malformed frames or
headers are connection errors: GOAWAY with ``h2``'s error code, then close.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import ProtocolError, StreamClosedError
from h2.settings import SettingCodes, Settings
from hyperframe.frame import GoAwayFrame, SettingsFrame

from ._handling import handle_request, send_error
from ._responder import JSON, CancellableJob
from ._state import ServerState, drive

__all__ = ("Http2Connection", "Http2Stream")

_monotonic_ns = time.monotonic_ns
# h2's own MAX_CONCURRENT_STREAMS check would end the connection: set out of
# reach, the server's count applies instead (see the module docstring).
_NO_LIMIT = 2**31 - 1
_STREAM_HEAD = (
    (b":status", b"200"),
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
)
# Queued frames beyond this are written at once (see Http2Connection._written).
_FLUSH_AT = 256 * 1024
# After its last response, how long a closing connection waits for the
# client to close its side before dropping it.
_DRAIN_S = 5.0


class Http2Stream:
    """One request on an HTTP/2 connection, and the responder of its answer."""

    __slots__ = (
        "body",
        "client_done",
        "closed",
        "conn",
        "ending",
        "id",
        "job",
        "method",
        "offset",
        "parked",
        "path",
        "pending",
        "reset_after_tokens",
    )

    # Events go out as DATA frames, without HTTP/1.1's chunk framing, and
    # the faults that break HTTP/1.x framing have nothing to break here.
    chunked = False
    wire = None

    def __init__(self, conn: Http2Connection, stream_id: int, method: str, path: str) -> None:
        self.conn = conn
        self.id = stream_id
        self.method = method
        self.path = path
        # The request body read so far; None once it is refused (413).
        self.body: bytearray | None = bytearray()
        self.client_done = False  # the client's END_STREAM was read
        self.job: CancellableJob | None = None
        self.parked: CancellableJob | None = None
        self.reset_after_tokens: int | None = None
        # Response bytes the flow-control windows hold back: pending[offset:],
        # END_STREAM after them when ending.
        self.pending: bytes = b""
        self.offset = 0
        self.ending = False
        self.closed = False

    # -- Responder ---------------------------------------------------------------------

    @property
    def gone(self) -> bool:
        return self.closed or self.conn.closing

    @property
    def blocked(self) -> bool:
        return self.conn.write_paused or self.offset < len(self.pending)

    def respond(
        self,
        status: int,
        body: bytes,
        *,
        content_type: bytes = JSON,
        event_stream: bool = False,
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        headers = [(b":status", b"%d" % status), (b"content-type", content_type)]
        if event_stream:
            headers.append((b"cache-control", b"no-cache"))
        headers.append((b"content-length", b"%d" % len(body)))
        headers.extend(extra)
        self.conn.send(self, headers, body, end=True)

    def begin(self, job: CancellableJob, *, streamed: bool) -> None:
        self.job = job

    def write_stream(self, parts: list[bytes], *, head: bool, end: bool) -> None:
        self.conn.send(self, _STREAM_HEAD if head else None, b"".join(parts), end=end)

    def park(self, job: CancellableJob) -> None:
        self.parked = job
        self.conn.parked[self.id] = self

    def job_done(self, job: CancellableJob) -> None:
        self.job = None

    def answering(self, job: CancellableJob) -> bool:
        return self.job is job or self.parked is job

    def reset(self) -> None:
        self.job = None
        self.conn.reset(self, ErrorCodes.INTERNAL_ERROR)


class Http2Connection(asyncio.Protocol):
    """One HTTP/2 client connection: many streams, each answered on its own."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._transport: asyncio.Transport | None = None
        self._h2 = H2Connection(
            config=H2Configuration(
                client_side=False,
                header_encoding=None,
                # the server's headers are well-formed by construction
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
            )
        )
        # Streams whose request is being read or answered.
        self._streams: dict[int, Http2Stream] = {}
        # Streams with bytes the windows hold back, in the order to serve them.
        self._held: dict[int, Http2Stream] = {}
        # Streams whose job waits for writing to be possible.
        self.parked: dict[int, Http2Stream] = {}
        self._opened = 0  # streams opened on this connection (the GOAWAY fault)
        self._last_stream: int | None = None  # the GOAWAY's last stream id
        self._recv_ns = 0
        self._drain: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unflushed = 0
        self._flush_soon = False
        self._eof_sent = False
        self._dispatch: dict[type[Any], Callable[[Any], None]] = {
            RequestReceived: self._on_request,
            DataReceived: self._on_data,
            StreamEnded: self._on_end,
            StreamReset: self._on_reset,
            WindowUpdated: self._on_window,
            RemoteSettingsChanged: self._on_settings,
            ConnectionTerminated: self._on_goaway,
        }
        self.write_paused = False
        self.closing = False

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state = self.state
        state.conns.add(self)
        state.stats.connections += 1
        state.stats.h2_connections += 1
        cfg = state.config
        h2 = self._h2
        local = Settings(
            client=False,
            initial_values={
                SettingCodes.MAX_CONCURRENT_STREAMS: _NO_LIMIT,
                SettingCodes.MAX_HEADER_LIST_SIZE: h2.DEFAULT_MAX_HEADER_LIST_SIZE,
            },
        )
        h2.local_settings = local
        h2.initiate_connection()
        # h2's SETTINGS frame would list the values in force before the
        # client's acknowledgement; the server's own lists what it asks for.
        h2.data_to_send()
        advertised: dict[int, int] = {
            SettingCodes.MAX_CONCURRENT_STREAMS: cfg.h2_max_streams,
            SettingCodes.INITIAL_WINDOW_SIZE: cfg.h2_window,
            SettingCodes.MAX_HEADER_LIST_SIZE: cfg.max_head,
        }
        # In force once the client acknowledges (RFC 9113 section 6.5.3);
        # h2 applies them then, windows of open streams included.
        local[SettingCodes.INITIAL_WINDOW_SIZE] = cfg.h2_window
        local[SettingCodes.MAX_HEADER_LIST_SIZE] = cfg.max_head
        self._transport.write(SettingsFrame(0, settings=advertised).serialize())

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return  # draining after the last response: nothing more is read
        self._recv_ns = _monotonic_ns()
        try:
            events = self._h2.receive_data(data)
        except ProtocolError:
            # h2 has queued GOAWAY with the error (RFC 9113 section 5.4.1).
            self._flush()
            self._close()
            return
        dispatch = self._dispatch
        for event in events:
            handler = dispatch.get(type(event))
            if handler is not None:
                handler(event)
            if self.closing:
                break
        self._flush()

    def eof_received(self) -> bool | None:
        # HTTP/2 has no half-closed connection: a client that stops sending
        # cannot acknowledge data nor open streams.
        self.closing = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._close()
        self.state.conns.discard(self)

    def pause_writing(self) -> None:
        self.write_paused = True
        self.state.stats.write_pauses += 1

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake()

    # -- used by streams and the server ----------------------------------------------

    def send(
        self,
        stream: Http2Stream,
        headers: Sequence[tuple[bytes, bytes]] | None,
        data: bytes,
        *,
        end: bool,
    ) -> None:
        """Sends ``headers`` (if any), then ``data`` as far as the windows
        allow (the rest waits in the stream), END_STREAM after it if ``end``."""
        if stream.closed or self.closing:
            return
        h2 = self._h2
        try:
            if headers is not None:
                if end and not data:
                    h2.send_headers(stream.id, headers, end_stream=True)
                    self._finished(stream)
                    self._written(0)
                    return
                h2.send_headers(stream.id, headers)
            if stream.offset < len(stream.pending):
                stream.pending = stream.pending[stream.offset :] + data
            else:
                stream.pending = data
            stream.offset = 0
            stream.ending = end
            self._push(stream)
        except StreamClosedError:  # the client reset it meanwhile
            self._forget(stream)
        self._written(len(data))

    def reset(self, stream: Http2Stream, code: ErrorCodes) -> None:
        """Resets ``stream`` (RST_STREAM with ``code``); nothing more is sent on it."""
        if stream.closed or self.closing:
            return
        with contextlib.suppress(StreamClosedError):
            self._h2.reset_stream(stream.id, code)
        self._forget(stream)
        self._written(0)

    def abort(self) -> None:
        """Drops the connection at once (server shutdown), after a GOAWAY
        if the transport still takes it."""
        with contextlib.suppress(ProtocolError):
            self._h2.close_connection()
            self._flush()
        transport = self._transport
        self._close()
        if transport is not None:
            transport.abort()

    # -- events --------------------------------------------------------------------

    def _on_request(self, event: RequestReceived) -> None:
        state = self.state
        cfg = state.config
        stats = state.stats
        stats.h2_streams += 1
        nth_of_server = stats.h2_streams
        self._opened += 1
        sid = event.stream_id
        if (
            # RFC 9113 section 6.8: streams above a GOAWAY's last stream id
            # are not processed; refusing them says so to the client.
            (self._last_stream is not None and sid > self._last_stream)
            or (cfg.h2_refuse_every and nth_of_server % cfg.h2_refuse_every == 0)
            # section 5.1.2: beyond SETTINGS_MAX_CONCURRENT_STREAMS
            or len(self._streams) >= cfg.h2_max_streams
        ):
            stats.h2_refused += 1
            with contextlib.suppress(StreamClosedError):
                self._h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
        else:
            method = path = ""
            length: int | None = None
            for name, value in event.headers:
                if name == b":method":
                    method = value.decode("latin-1")
                elif name == b":path":
                    path = value.decode("latin-1").partition("?")[0]
                elif name == b"content-length" and value.isdigit():
                    length = int(value)
            stream = Http2Stream(self, sid, method, path)
            if cfg.h2_reset_every and nth_of_server % cfg.h2_reset_every == 0:
                stream.reset_after_tokens = cfg.h2_reset_after_tokens
            self._streams[sid] = stream
            if length is not None and length > cfg.max_body:
                self._too_large(stream, length)
        if cfg.h2_goaway_after and self._opened == cfg.h2_goaway_after:
            self._goaway(sid)

    def _on_data(self, event: DataReceived) -> None:
        sid = event.stream_id
        # Hand the window back at once: the body is read as it comes.
        self._h2.acknowledge_received_data(event.flow_controlled_length, sid)
        stream = self._streams.get(sid)
        if stream is None or stream.body is None:
            return
        body = stream.body
        body += event.data
        if len(body) > self.state.config.max_body:
            self._too_large(stream, len(body))

    def _on_end(self, event: StreamEnded) -> None:
        stream = self._streams.get(event.stream_id)
        if stream is None:
            return
        stream.client_done = True
        body, stream.body = stream.body, None
        if body is None:  # refused already (413)
            return
        recv_ns = self._recv_ns
        handle_request(
            self.state,
            stream,
            stream.method,
            stream.path,
            bytes(body),
            recv_ns=recv_ns,
            base_ns=recv_ns,
        )

    def _on_reset(self, event: StreamReset) -> None:
        stream = self._streams.get(event.stream_id)
        if stream is not None:
            self.state.stats.h2_client_resets += 1
            self._forget(stream)

    def _on_window(self, event: WindowUpdated) -> None:
        if event.stream_id:
            stream = self._held.get(event.stream_id)
            if stream is not None:
                self._push(stream)
        else:
            self._push_held()
        self._wake()

    def _on_settings(self, event: RemoteSettingsChanged) -> None:
        changed = event.changed_settings
        if SettingCodes.INITIAL_WINDOW_SIZE in changed or SettingCodes.MAX_FRAME_SIZE in changed:
            self._push_held()
            self._wake()

    def _on_goaway(self, event: ConnectionTerminated) -> None:
        # h2 sends nothing once the client has said GOAWAY: close.
        self._close()

    # -- internals -------------------------------------------------------------------

    def _too_large(self, stream: Http2Stream, size: int) -> None:
        """413 for a body past ``max_body``; the rest of it is not read."""
        stream.body = None
        send_error(
            self.state,
            stream,
            413,
            f"body of {size} bytes exceeds {self.state.config.max_body}",
        )

    def _push(self, stream: Http2Stream) -> None:
        """Sends what the windows let through of the stream's held bytes as
        DATA frames no larger than the client's SETTINGS_MAX_FRAME_SIZE."""
        h2 = self._h2
        sid = stream.id
        pending = stream.pending
        size = len(pending)
        offset = stream.offset
        ended = False
        if offset < size:
            view = memoryview(pending)
            frame = h2.max_outbound_frame_size
            window = h2.local_flow_control_window
            try:
                while offset < size:
                    n = min(size - offset, frame, window(sid))
                    if n <= 0:
                        break
                    stop = offset + n
                    ended = stream.ending and stop == size
                    h2.send_data(sid, view[offset:stop], end_stream=ended)
                    offset = stop
            except StreamClosedError:  # the client reset it meanwhile
                self._forget(stream)
                return
            stream.offset = offset
            if offset < size:
                # to the back of the queue: streams share the connection window
                self._held.pop(sid, None)
                self._held[sid] = stream
                return
        self._held.pop(sid, None)
        stream.pending = b""
        stream.offset = 0
        if stream.ending:
            if not ended:
                try:
                    h2.end_stream(sid)
                except StreamClosedError:
                    self._forget(stream)
                    return
            self._finished(stream)

    def _push_held(self) -> None:
        for stream in list(self._held.values()):
            if self._h2.outbound_flow_control_window <= 0:
                break
            if not stream.closed:
                self._push(stream)
        self._written(0)

    def _wake(self) -> None:
        """Drives the parked jobs that can write again."""
        parked = self.parked
        if not parked:
            return
        now = _monotonic_ns()
        for stream in list(parked.values()):
            if self.write_paused or self.closing:
                break
            if stream.offset < len(stream.pending):
                continue  # still held by a window
            del parked[stream.id]
            job, stream.parked = stream.parked, None
            if job is not None and not job.cancelled:
                drive(self.state, job, now)

    def _finished(self, stream: Http2Stream) -> None:
        """The stream's response is out (END_STREAM sent)."""
        sid = stream.id
        if not stream.client_done:
            # Answered before the request ended (413): ask the client to stop
            # sending it, without error (RFC 9113 section 8.1).  Unless h2
            # has read its end meanwhile: the stream is closed then.
            with contextlib.suppress(StreamClosedError):
                self._h2.reset_stream(sid, ErrorCodes.NO_ERROR)
        self._streams.pop(sid, None)
        self._held.pop(sid, None)
        self.parked.pop(sid, None)
        stream.closed = True
        if self._last_stream is not None and not self._streams and not self.closing:
            self._shut_down()

    def _forget(self, stream: Http2Stream) -> None:
        """The stream ends unanswered (reset by either side)."""
        stream.closed = True
        for job in (stream.job, stream.parked):
            if job is not None:
                job.cancelled = True
        stream.job = stream.parked = None
        sid = stream.id
        self._streams.pop(sid, None)
        self._held.pop(sid, None)
        self.parked.pop(sid, None)
        if self._last_stream is not None and not self._streams and not self.closing:
            self._shut_down()

    def _goaway(self, last_stream_id: int) -> None:
        """The GOAWAY fault: streams up to ``last_stream_id`` are answered,
        later ones refused, then the connection closes."""
        self._last_stream = last_stream_id
        self.state.stats.h2_goaways += 1
        self._flush()  # what h2 has queued goes first
        if self._transport is not None:
            frame = GoAwayFrame(0, last_stream_id=last_stream_id, error_code=ErrorCodes.NO_ERROR)
            self._transport.write(frame.serialize())
        if not self._streams and not self.closing:
            self._shut_down()

    def _shut_down(self) -> None:
        """Closes once the last response is out: half-closes and reads on
        until the client closes, since closing with unread bytes would
        reset the connection and could destroy the end of the response."""
        self._flush()
        self.closing = True
        transport = self._transport
        if transport is None:
            return
        if transport.can_write_eof():
            transport.write_eof()
            self._eof_sent = True
            self._drain = asyncio.get_running_loop().call_later(_DRAIN_S, transport.abort)
        else:
            transport.close()

    def _written(self, size: int) -> None:
        """Frames of ``size`` bytes are queued in h2: written at once past
        :data:`_FLUSH_AT`, else at the end of this loop iteration, together
        with what the other streams write meanwhile (one wake-up of the
        pacer, one read of requests): one system call for many streams."""
        self._unflushed += size
        if self._unflushed >= _FLUSH_AT:
            self._flush()
        elif not self._flush_soon:
            self._flush_soon = True
            assert self._loop is not None
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._unflushed = 0
        self._flush_soon = False
        data = self._h2.data_to_send()
        transport = self._transport
        if data and transport is not None and not transport.is_closing() and not self._eof_sent:
            transport.write(data)

    def _close(self) -> None:
        """Ends every stream and closes (what is written still goes out)."""
        self.closing = True
        for stream in list(self._streams.values()):
            self._forget(stream)
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        if self._transport is not None:
            self._transport.close()
