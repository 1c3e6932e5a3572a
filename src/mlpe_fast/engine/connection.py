"""Connections and the pool that reuses them (HTTP/1.1, one request at a time).

A :class:`Connection` is the asyncio protocol of one TCP connection: its read
path (stamp, feed) is the :class:`ReadCore` of ``_reader``; here is what runs
once per request: starting an exchange, turning the decoder's summary into a
:class:`RequestRecord`, handing the connection back, and failures.

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
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from ..errors import error_name
from ..wire.events import ResponseSummary
from ._reader import ReadCore, monotonic_ns
from .record import RequestRecord

__all__ = ("Connection", "ConnectionPool", "Exchange")


class Exchange:
    """One request and what to call when it ends."""

    __slots__ = (
        "on_done",
        "on_first",
        "request",
        "retries",
        "sample_id",
        "sample_index",
        "t_issue",
        "t_sched",
    )

    def __init__(
        self,
        request: bytes,
        on_done: Callable[[RequestRecord], object],
        on_first: Callable[[Exchange, int], object] | None,
        sample_index: int,
        sample_id: str,
        t_sched: int | None,
    ) -> None:
        self.request = request
        self.on_done = on_done
        self.on_first = on_first
        self.sample_index = sample_index
        self.sample_id = sample_id
        self.t_sched = t_sched
        self.t_issue = 0
        self.retries = 0

    def record(
        self,
        t_end: int,
        summary: ResponseSummary,
        error_class: str | None = None,
        error_message: str | None = None,
    ) -> RequestRecord:
        t_issue = self.t_issue or t_end
        return RequestRecord(
            sample_index=self.sample_index,
            sample_id=self.sample_id,
            t_sched=t_issue if self.t_sched is None else self.t_sched,
            t_issue=t_issue,
            t_end=t_end,
            response=summary,
            error_class=error_class,
            error_message=error_message,
            retries=self.retries,
        )


class Connection(ReadCore, asyncio.BufferedProtocol):
    """One HTTP/1.1 connection to the endpoint."""

    def __init__(self, pool: ConnectionPool) -> None:
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
        exchange.t_issue = self.begin(
            self.transport, exchange.request, exchange.on_first is not None
        )

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
        summary: ResponseSummary = self.take_summary()
        self.served += 1
        if summary.error_code:
            record = exchange.record(
                t_ns, summary, error_name(summary.error_code), summary.error_message
            )
        else:
            record = exchange.record(t_ns, summary)
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
        summary: ResponseSummary = self.take_summary()
        exchange.on_done(exchange.record(t_ns, summary, error_class, message))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
            if self.transport is not None:
                self.transport.abort()


class ConnectionPool:
    """The connections to one endpoint (rule 1).

    ``max_connections`` caps the connections open or opening at once (the
    reference client's ``--max-connections``); a request that finds none
    free waits, in order, for the next connection released, so its
    ``t_issue`` (when its bytes are written) comes after the wait.  None:
    one connection per request in flight.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        connect_timeout: float,
        decoder_options: dict[str, Any],
        on_connect_failed: Callable[[Exchange, str, str], object],
        max_connections: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self.decoder_options = decoder_options
        self._on_connect_failed = on_connect_failed
        self._idle: list[Connection] = []
        self._open: set[Connection] = set()
        self._connecting: set[asyncio.Task[None]] = set()
        self._waiting: deque[Exchange] = deque()
        self._not_started: dict[asyncio.Task[None], Exchange] = {}
        self.max_connections = max_connections
        self.connections_opened = 0
        self.connect_ns_total = 0

    def start(self, exchange: Exchange) -> None:
        """Sends the exchange on an idle connection, or on a new one."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            if not connection.closed:
                connection.start(exchange)
                return
        if self._at_cap():
            self._waiting.append(exchange)
            return
        self._connect(exchange)

    def _at_cap(self) -> bool:
        cap = self.max_connections
        return cap is not None and len(self._open) + len(self._connecting) >= cap

    def _connect(self, exchange: Exchange) -> None:
        task = asyncio.get_running_loop().create_task(self._connect_and_start(exchange))
        self._connecting.add(task)
        self._not_started[task] = exchange
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[None]) -> None:
        self._connecting.discard(task)
        exchange = self._not_started.pop(task, None)
        if exchange is not None:  # cancelled before it ran: no record was made
            self._on_connect_failed(exchange, "Cancelled", "client closed while connecting")
        self._serve_waiting()

    def _serve_waiting(self) -> None:
        """Opens connections for waiting requests while below the cap."""
        while self._waiting and not self._at_cap():
            self._connect(self._waiting.popleft())

    async def _connect_and_start(self, exchange: Exchange) -> None:
        self._not_started.pop(cast("asyncio.Task[None]", asyncio.current_task()), None)
        loop = asyncio.get_running_loop()
        t_start = monotonic_ns()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: Connection(self), self.host, self.port),
                self.connect_timeout,
            )
        except asyncio.TimeoutError:
            self._on_connect_failed(
                exchange,
                "ConnectTimeout",
                f"no connection to {self.host}:{self.port} within {self.connect_timeout:g} s",
            )
            return
        except OSError as error:
            reason = error.strerror or str(error)
            self._on_connect_failed(
                exchange, "ConnectError", f"cannot connect to {self.host}:{self.port}: {reason}"
            )
            return
        except asyncio.CancelledError:
            self._on_connect_failed(exchange, "Cancelled", "client closed while connecting")
            raise
        self.connections_opened += 1
        self.connect_ns_total += monotonic_ns() - t_start
        self._open.add(connection)
        connection.start(exchange)

    def release(self, connection: Connection, keep_alive: bool) -> None:
        """Rule 2: a kept-alive connection serves the next waiting request,
        else waits idle."""
        if keep_alive and not connection.closed:
            if self._waiting:
                connection.start(self._waiting.popleft())
            else:
                self._idle.append(connection)
        else:
            connection.close()

    def forget(self, connection: Connection) -> None:
        self._open.discard(connection)
        self._serve_waiting()

    def busy(self) -> list[Connection]:
        """Connections with a request in flight."""
        return [c for c in self._open if c.exchange is not None]

    async def cancel_connecting(self) -> None:
        """Cancels waiting requests and connection attempts; their requests
        end as ``Cancelled``."""
        waiting, self._waiting = self._waiting, deque()
        for exchange in waiting:
            self._on_connect_failed(
                exchange, "Cancelled", "cancelled while waiting for a connection"
            )
        for task in list(self._connecting):
            task.cancel()
        if self._connecting:
            await asyncio.gather(*self._connecting, return_exceptions=True)

    async def aclose(self) -> None:
        """Cancels connection attempts and closes every connection."""
        await self.cancel_connecting()
        for connection in list(self._open):
            connection.close()
        self._idle.clear()
