"""An HTTP/1.1 connection: one request at a time.

A :class:`Connection` is the asyncio protocol of one connection: its read
path (stamp, feed) is the :class:`ReadCore` of ``_reader``; here is what runs
once per request: starting an :class:`~mlpe_fast.engine.exchange.Exchange`,
turning the decoder's summary into a :class:`RequestRecord`, handing the
connection back, and failures.  The pool that holds connections of both
protocols is :mod:`mlpe_fast.engine.pool`; what a connection needs of it is
:class:`ConnectionOwner`.

Rules:
 1. A connection carries one request at a time (no pipelining): the pool
    holds idle connections (last in, first out, so the warmest is reused)
    and opens a new one only when none is idle, so there are never more
    connections than requests in flight.
 2. A connection goes back to the pool only when the response said it may
    (``keep_alive``: RFC 9112 section 9.3) and nothing unexpected followed.
 3. A request whose reused connection closes before any byte of the
    response arrived is sent again, once, on a new connection: the server
    closed an idle keep-alive connection as the request went out, so it never
    saw it.  ``RequestRecord.retries`` says so.
 4. Every exchange ends in exactly one record, delivered to its ``on_done``.
 5. The end of a response is stamped in the read that completed it, but the
    work that follows (summary, record, the caller's callback, which usually
    sends the next request) runs after the loop has handled every other read
    that was ready at the same time: a burst of responses finishing together
    must not make the later ones' stamps late.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Protocol, cast

from ..errors import error_name
from ..wire.events import ResponseSummary
from ._reader import ReadCore
from .exchange import Exchange, ReadStamps
from .framing import RequestFraming

__all__ = ("Connection", "ConnectionOwner")


class ConnectionOwner(Protocol):
    """What an HTTP/1.1 connection needs of the pool that holds it
    (:class:`mlpe_fast.engine.pool.ConnectionPool`).  Declared here, by the
    connection, so that the pool depends on the connection and not back."""

    @property
    def decoder_options(self) -> dict[str, Any]: ...

    @property
    def framing(self) -> RequestFraming: ...

    def start(self, exchange: Exchange) -> None:
        """Sends ``exchange`` again, on another connection (rule 3)."""
        ...

    def release(self, connection: Connection, keep_alive: bool) -> None:
        """Takes ``connection`` back after a response (rule 2)."""
        ...

    def forget(self, connection: Connection) -> None:
        """``connection`` closed: it is no longer the pool's."""
        ...


class Connection(ReadCore, asyncio.BufferedProtocol):
    """One HTTP/1.1 connection to the endpoint."""

    def __init__(self, pool: ConnectionOwner) -> None:
        ReadCore.__init__(self, pool.decoder_options)
        self.pool = pool
        self._call_soon = asyncio.get_running_loop().call_soon
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.served = 0
        self.closed = False
        self._completed_at: int | None = None

    # -- asyncio protocol -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but
        # they have its interface.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A request is one write; tokens must not wait for Nagle.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        exchange = self.exchange
        if exchange is None:
            return
        if self.served and self.last_read_ns == self.t_issue and exchange.retries == 0:
            # Rule 3: nothing of the response arrived on a reused connection.
            self.exchange = None
            self.take_summary()
            exchange.retries += 1
            self.pool.start(exchange)
            return
        self.end_of_stream()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost settles the exchange

    # -- exchanges ------------------------------------------------------------

    def start(self, exchange: Exchange) -> None:
        assert self.transport is not None and self.exchange is None
        self.exchange = exchange
        request = exchange.request
        if request is None:
            request = self.pool.framing.h1(exchange.body, exchange.path)
        t_write = self.begin(self.transport, request, exchange.on_first is not None)
        # The first request on a new connection began with the connect.
        exchange.t_issue = exchange.t_opened or t_write
        exchange.t_opened = 0

    def on_first_token(self, t_ns: int) -> None:
        exchange = self.exchange
        if exchange is not None and exchange.on_first is not None:
            exchange.on_first(exchange, t_ns)

    def on_response_done(self, t_ns: int) -> None:
        # Rule 5: stamp now, finish after this loop iteration's other reads.
        self._completed_at = t_ns
        self._call_soon(self._finish_response)

    def _finish_response(self) -> None:
        exchange = self.exchange
        t_ns = self._completed_at
        if exchange is None or t_ns is None:  # finished meanwhile (see fail)
            return
        self.exchange = None
        self._completed_at = None
        reads = self._read_stamps()
        summary: ResponseSummary = self.take_summary()
        self.served += 1
        if summary.error_code:
            record = exchange.record(
                t_ns, summary, error_name(summary.error_code), summary.error_message, reads
            )
        else:
            record = exchange.record(t_ns, summary, reads=reads)
        self.pool.release(self, summary.keep_alive)
        exchange.on_done(record)

    def on_response_failed(self, t_ns: int, error: Exception) -> None:
        self.fail(t_ns, type(error).__name__, str(error))

    def on_unsolicited(self, nbytes: int) -> None:
        # Bytes with no request outstanding: the connection cannot be trusted.
        self.close()

    def fail(self, t_ns: int, error_class: str, message: str) -> None:
        """Ends the current exchange as failed and drops the connection.

        A response that completed but is not finished yet (rule 5) is
        finished as it was, not failed."""
        if self._completed_at is not None:
            self._finish_response()
        exchange = self.exchange
        self.close()
        if exchange is None:
            return
        self.exchange = None
        reads = self._read_stamps()
        summary: ResponseSummary = self.take_summary()
        exchange.on_done(exchange.record(t_ns, summary, error_class, message, reads))

    def _read_stamps(self) -> ReadStamps:
        return (
            self.first_read_ns,
            self.done_read_ns,
            self.kernel_first,
            self.kernel_done,
            self.segment_first,
            0,  # one stream per connection: the next-token count covers it
        )

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
            if self.transport is not None:
                self.transport.abort()
