"""The simulated endpoint's HTTP/1.1 connection: reads requests, answers
them in order (pipelining included), and is the
:class:`~mlpe_fast.sim._responder.Responder` of its one response in flight.
What is answered is decided in :mod:`mlpe_fast.sim._handling`, how a
completion is paced in :mod:`mlpe_fast.sim._jobs`; this module adds the
HTTP/1.1 framing (RFC 9112).  See :mod:`mlpe_fast.sim.server` for the
behaviour and what the stamps mean.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import socket
import struct
import time
from collections import deque
from collections.abc import Sequence
from typing import cast

from ._handling import handle_request, send_error
from ._http import HttpError, Request, RequestReader
from ._responder import JSON, CancellableJob
from ._state import ServerState, drive
from .stream import LAST_CHUNK

__all__ = ("Connection",)

# Pipelined requests queued beyond this pause reading from the connection.
_MAX_PIPELINE = 16
_monotonic_ns = time.monotonic_ns

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    505: "HTTP Version Not Supported",
}
# SO_LINGER on, zero seconds: closing the socket sends RST, not FIN.
_LINGER_RESET = struct.pack("ii", 1, 0)


def _reason(status: int) -> bytes:
    """The reason phrase of ``status`` (the status faults use any 4xx/5xx)."""
    reason = _REASONS.get(status)
    if reason is None:
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = "Error"
    return reason.encode()


def _head(
    status: int,
    content_type: bytes,
    *,
    length: int | None = None,
    chunked: bool = False,
    connection: bytes | None = None,
    event_stream: bool = False,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> bytes:
    """A response head.  The body is framed by ``length`` (Content-Length),
    by the chunked coding, or else by the end of the connection (then
    ``connection`` must be ``b"close"``)."""
    lines = [
        b"HTTP/1.1 %d %s" % (status, _reason(status)),
        b"content-type: " + content_type,
    ]
    if event_stream:
        lines.append(b"cache-control: no-cache")
    if length is not None:
        lines.append(b"content-length: %d" % length)
    elif chunked:
        lines.append(b"transfer-encoding: chunked")
    if connection is not None:
        lines.append(b"connection: " + connection)
    lines.extend(name + b": " + value for name, value in extra)
    return b"\r\n".join(lines) + b"\r\n\r\n"


class Connection(asyncio.Protocol):
    """One client connection: reads requests, answers them in order."""

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._transport: asyncio.Transport | None = None
        cfg = state.config
        self._reader = RequestReader(max_head=cfg.max_head, max_body=cfg.max_body)
        self._pending: deque[Request | HttpError] = deque()
        self._job: CancellableJob | None = None
        self._parked: CancellableJob | None = None
        self._processing = False
        self._reading_paused = False
        self._eof = False
        self._last_done_ns = 0
        self._http10 = False
        # The request being answered: close the connection after its
        # response; the head of its streamed response.
        self._close_after = False
        # ...or close it without saying so (the close-after-response fault)
        self._quiet_close = False
        self._stream_head = b""
        self.chunked = True
        self.write_paused = False
        self.closing = False

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Not TCP (a Unix socket, say): nothing to set.
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._state.conns.add(self)
        self._state.stats.connections += 1

    def data_received(self, data: bytes) -> None:
        t_ns = _monotonic_ns()
        reader = self._reader
        reader.feed(data, t_ns)
        pending = self._pending
        try:
            while (req := reader.next_request()) is not None:
                pending.append(req)
                self._state.queued += 1
        except HttpError as exc:
            pending.append(exc)
        if self._job is None:
            self._process()
        if self.closing:
            return
        if self._job is not None:
            if len(pending) >= _MAX_PIPELINE and not self._reading_paused:
                self._pause_reading()
        elif not pending and reader.wants_continue():
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def eof_received(self) -> bool | None:
        self._eof = True
        if self._job is not None or self._pending:
            return True  # answer what was asked, then close (see _process)
        self.closing = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        for job in (self._job, self._parked):
            if job is not None:
                job.cancelled = True
        self._job = self._parked = None
        self._state.queued -= sum(not isinstance(item, HttpError) for item in self._pending)
        self._pending.clear()
        self._state.conns.discard(self)
        self._transport = None

    def pause_writing(self) -> None:
        self.write_paused = True
        self._state.stats.write_pauses += 1

    def resume_writing(self) -> None:
        self.write_paused = False
        job, self._parked = self._parked, None
        if job is not None and not job.cancelled:
            drive(self._state, job, _monotonic_ns())

    # -- the Responder of the request being answered -----------------------------------

    # HTTP/1.1 cannot reset one response: the fault is HTTP/2's.
    reset_after_tokens = None

    @property
    def wire(self) -> Connection:
        return self

    @property
    def gone(self) -> bool:
        return self.closing

    @property
    def blocked(self) -> bool:
        return self.write_paused

    def respond(
        self,
        status: int,
        body: bytes,
        *,
        content_type: bytes = JSON,
        event_stream: bool = False,
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        close = self._close_after
        head = _head(
            status,
            content_type,
            length=len(body),
            connection=self.connection_header(close),
            event_stream=event_stream,
            extra=extra,
        )
        self.write(head + body)
        if close and self._job is None:  # a job's end closes in job_done
            self._close()

    def begin(self, job: CancellableJob, *, streamed: bool) -> None:
        self._job = job
        if streamed:
            # RFC 9112 section 6.1: no chunked coding to an HTTP/1.0 client;
            # its body runs to the end of the connection instead.
            if not self.chunked:
                self._close_after = True
            self._stream_head = _head(
                200,
                b"text/event-stream",
                chunked=self.chunked,
                connection=self.connection_header(self._close_after),
                event_stream=True,
            )

    def write_stream(self, parts: list[bytes], *, head: bool, end: bool) -> None:
        if head:
            parts.insert(0, self._stream_head)
        if end and self.chunked:
            parts.append(LAST_CHUNK)
        self.write(b"".join(parts))

    def park(self, job: CancellableJob) -> None:
        """Holds ``job`` until the transport's buffer drains."""
        self._parked = job

    def answering(self, job: CancellableJob) -> bool:
        return self._job is job or self._parked is job

    def job_done(self, job: CancellableJob) -> None:
        self._job = None
        self._last_done_ns = _monotonic_ns()
        if self._close_after or self._quiet_close:
            self._close()
        else:
            self._process()

    def reset(self) -> None:
        """Aborts the response: HTTP/1.1 can only drop the connection, with
        RST (a client reading the response gets ECONNRESET once it has read
        what was sent)."""
        self._job = None
        transport = self._transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError, AttributeError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        self.abort()

    # -- the Wire, for faults -------------------------------------------------------

    @property
    def stream_head(self) -> bytes:
        return self._stream_head

    @property
    def keeps_alive(self) -> bool:
        return not self._close_after

    def hang_up(self) -> None:
        self._job = None
        self._close()

    def close_after_response(self) -> None:
        self._quiet_close = True

    # -- used by the server --------------------------------------------------------

    def write(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def connection_header(self, close: bool) -> bytes | None:
        """The ``Connection`` value of a response: ``close`` when closing
        after it; ``keep-alive`` to an HTTP/1.0 client that asked for it
        (HTTP/1.0 connections close by default)."""
        if close:
            return b"close"
        return b"keep-alive" if self._http10 else None

    def abort(self) -> None:
        """Drops the connection at once (server shutdown)."""
        self.closing = True
        if self._transport is not None:
            self._transport.abort()

    # -- internals -------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _close(self) -> None:
        """Closes after what is written has been sent."""
        self.closing = True
        if self._transport is not None:
            self._transport.close()

    def _process(self) -> None:
        """Answers queued requests in order until one leaves a response in
        flight.  Not re-entrant: a job finishing inside it returns here."""
        if self._processing:
            return
        self._processing = True
        try:
            pending = self._pending
            while self._job is None and pending and not self.closing:
                item = pending.popleft()
                if not isinstance(item, HttpError):
                    self._state.queued -= 1
                if isinstance(item, HttpError):
                    # framing is lost: answer, then close
                    self._http10 = False
                    self._close_after = True
                    self.chunked = True
                    send_error(self._state, self, item.status, item.message)
                    break
                self._handle(item)
            if (
                self._reading_paused
                and not self.closing
                and len(pending) < _MAX_PIPELINE // 2
                and self._transport is not None
            ):
                self._reading_paused = False
                self._transport.resume_reading()
            if self._eof and self._job is None and not pending and not self.closing:
                self._close()
        finally:
            self._processing = False

    def _handle(self, req: Request) -> None:
        self._http10 = req.http_minor == 0
        self.chunked = req.http_minor == 1
        # After the client's EOF, the last answer closes the connection.
        self._close_after = not req.keep_alive or (self._eof and not self._pending)
        self._quiet_close = False
        handle_request(
            self._state,
            self,
            req.method,
            req.path,
            req.body,
            recv_ns=req.recv_ns,
            # Responses on one connection go in order: a pipelined request's
            # first token counts from the end of the response before it.
            base_ns=max(req.recv_ns, self._last_done_ns),
        )
