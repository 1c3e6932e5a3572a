"""The connections to one endpoint, HTTP/1.1 and HTTP/2 alike.

Rules:
 1. Never more connections than needed: an HTTP/1.1 connection carries one
    request at a time (idle ones are reused last in, first out, so the
    warmest goes first); an HTTP/2 connection carries as many streams as
    the server's SETTINGS_MAX_CONCURRENT_STREAMS allows (RFC 9113 section
    5.1.2), and a new connection is opened only when every open one is full.
 2. While an HTTP/2 connection is being opened, requests wait for it rather
    than open more, up to the server's stream limit as the last SETTINGS
    said (``STREAMS_BEFORE_SETTINGS`` until a server has said).  Over TLS the server may answer
    HTTP/1.1 instead (ALPN); from then on every connection is HTTP/1.1 and
    the requests that waited are started as such.
 3. ``max_connections`` caps the connections open or opening; a request
    that finds no room waits, in order, for the next stream or connection
    freed, and its ``t_issue`` comes after the wait.
 4. A request that opened its connection (or waited for one being opened)
    counts the wait in its ``t_issue`` and ``connect_ns``, TLS included.
 5. Every request ends in exactly one record: requests still waiting or
    dialing when the pool closes end as ``Cancelled``.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from ._pktstamp import PacketCapture
from ._receive import ArrivalClock, ReceiveThread, enable_kernel_stamps
from .clock import monotonic_ns
from .connection import Connection
from .dial import Dialed, DialError, Endpoint, dial
from .exchange import Exchange
from .framing import RequestFraming
from .h2 import H2Connection
from .rx_sched import ReceiveScheduling

__all__ = ("STREAMS_BEFORE_SETTINGS", "ConnectionPool", "InFlight", "open_capture")

# RFC 9113 section 6.5.2 recommends servers allow at least 100 streams.
STREAMS_BEFORE_SETTINGS = 100


def _stamping_keeper() -> socket.socket | None:
    """A socket that asks for receive stamps (see ``ConnectionPool``)."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return None
    if not enable_kernel_stamps(sock):
        sock.close()
        return None
    return sock


def open_capture(host: str, port: int) -> tuple[PacketCapture | None, str]:
    """A packet capture of the segments from ``host:port``
    (``csrc/mlpe_pktstamp.h`` P1), or None and why it cannot be had, in a
    few words for a one-line warning."""
    try:
        address = str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            return None, f"cannot resolve {host}: {error}"
        addresses = [str(entry[4][0]) for entry in found]
        # Loopback only when every address is: else every interface.
        address = (
            addresses[0]
            if addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses)
            else "0.0.0.0"
        )
    try:
        return PacketCapture(port, address), ""
    except OSError as error:
        if error.errno in (errno.EPERM, errno.EACCES):
            return None, "a packet socket needs CAP_NET_RAW (run as root or grant it)"
        if error.errno == errno.ENODEV:
            return None, str(error.strerror or error)
        if error.errno in (errno.EOPNOTSUPP, errno.EAFNOSUPPORT):
            return None, "this system has no packet sockets (Linux only)"
        return None, f"the packet socket could not be opened: {error.strerror or error}"


class InFlight(Protocol):
    """A request in flight, as the client's watchdog sees it."""

    @property
    def t_issue(self) -> int: ...

    @property
    def last_read_ns(self) -> int: ...

    def fail(self, t_ns: int, error_class: str, message: str) -> None: ...


class ConnectionPool:
    """Opens, reuses and closes the connections to one endpoint."""

    def __init__(
        self,
        endpoint: Endpoint,
        framing: RequestFraming,
        *,
        connect_timeout: float,
        decoder_options: dict[str, Any],
        on_connect_failed: Callable[[Exchange, str, str], object],
        max_connections: int | None = None,
        arrival_clock: ArrivalClock | None = None,
        receive_thread: bool = False,
        receive_priority: int = 0,
        receive_cpus: tuple[int, ...] = (),
        packet_stamps: bool = False,
    ) -> None:
        self.endpoint = endpoint
        # Given, cleartext connections read with the kernel's arrival stamps
        # where the kernel gives them (dial), and, with receive_thread, by a
        # receive thread the pool starts with its first dial and stops when
        # it closes (none where the system has no epoll).
        self.arrival_clock = arrival_clock
        self._want_receiver = receive_thread and arrival_clock is not None
        self.receiver: ReceiveThread | None = None
        # How the thread asks to be scheduled (rx_sched, T8), and what it
        # got and how it ran, kept when it stops.
        self._receive_placement = (receive_priority, receive_cpus)
        self._receive_scheduling: ReceiveScheduling | None = None
        self._receiver_loop: asyncio.AbstractEventLoop | None = None
        # Linux turns receive stamping on for the whole system a moment after
        # the first socket asks (a deferred switch), so the first packets of
        # the first connections would come unstamped: a socket that asks with
        # the first dial and stays open until the pool closes keeps it on.
        self._stamping_on: socket.socket | None = None
        self.kernel_stamped_connections = 0
        # Segment stamps (csrc/mlpe_pktstamp.h): the capture opens with the
        # first dial, before its SYN-ACK can arrive; packet_note says why
        # there is none when they were asked for.
        self._want_capture = packet_stamps and arrival_clock is not None and endpoint.tls is None
        self.capture: PacketCapture | None = None
        self.packet_note = ""
        if packet_stamps and not self._want_capture:
            self.packet_note = (
                "segment stamps apply to cleartext connections only"
                if endpoint.tls is not None
                else "segment stamps need kernel stamps"
            )
        self.framing = framing
        self.connect_timeout = connect_timeout
        self.decoder_options = decoder_options
        self._on_connect_failed = on_connect_failed
        self.max_connections = max_connections
        # Rule 2: HTTP/2 until a server says otherwise over ALPN.
        self._maybe_http2 = endpoint.http2
        self._idle: list[Connection] = []
        self._multiplexed: list[H2Connection] = []
        self._open: set[Connection | H2Connection] = set()
        self._dialing: dict[asyncio.Task[None], list[Exchange]] = {}
        self._waiting: deque[Exchange] = deque()
        self._warming = 0  # warm-up connects in flight (rule 3 counts them)
        self._closed = False
        self.connections_opened = 0
        self.connect_ns_total = 0
        self.tls_handshakes = 0
        self.tls_ns_total = 0
        self.http2_connections = 0
        # Rule 2: what the server's SETTINGS said last (all its connections
        # are the same server).
        self.stream_limit = STREAMS_BEFORE_SETTINGS

    # -- starting requests ----------------------------------------------------

    def start(self, exchange: Exchange) -> None:
        """Sends the exchange on a connection with room, or on a new one."""
        for multiplexed in self._multiplexed:
            if multiplexed.room() > 0:
                multiplexed.start(exchange)
                return
        idle = self._idle
        while idle:
            connection = idle.pop()
            if not connection.closed:
                connection.start(exchange)
                return
        if self._maybe_http2:
            for promised in self._dialing.values():
                if len(promised) < self.stream_limit:
                    exchange.t_opened = monotonic_ns()
                    promised.append(exchange)
                    return
        if self._at_cap():
            self._waiting.append(exchange)
            return
        self._dial([exchange])

    def _at_cap(self) -> bool:
        cap = self.max_connections
        return cap is not None and len(self._open) + len(self._dialing) + self._warming >= cap

    def _dial(self, exchanges: list[Exchange]) -> None:
        t_opened = monotonic_ns()
        for exchange in exchanges:
            exchange.t_opened = t_opened
        task = asyncio.get_running_loop().create_task(self._dial_and_start())
        self._dialing[task] = exchanges
        task.add_done_callback(self._dialed)

    def _dialed(self, task: asyncio.Task[None]) -> None:
        # Rule 5: a dial cancelled (or broken) before it handed its requests out.
        for exchange in self._dialing.pop(task, ()):
            self._fail_unsent(exchange, "Cancelled", "client closed while connecting")
        self._serve_waiting()

    def _make_protocol(self, http2: bool) -> Connection | H2Connection:
        return H2Connection(self) if http2 else Connection(self)

    async def _dial_and_start(self) -> None:
        task = asyncio.current_task()
        try:
            dialed = await dial(
                self.endpoint, self._make_protocol, self.connect_timeout, *self._dial_options()
            )
        except DialError as error:
            for exchange in self._dialing.pop(task, ()):  # type: ignore[arg-type]
                self._fail_unsent(exchange, error.error_class, error.message)
            return
        exchanges = self._dialing.pop(task, [])  # type: ignore[arg-type]
        t_ready = monotonic_ns()
        self._count(dialed)
        connection = dialed.protocol
        if connection.closed:  # the server hung up at once
            for exchange in exchanges:
                self._fail_unsent(
                    exchange, "ConnectError", "the endpoint closed the connection at once"
                )
            return
        self._open.add(connection)
        for exchange in exchanges:
            exchange.connect_ns = t_ready - exchange.t_opened
        if dialed.http2:
            self.http2_connections += 1
            self._multiplexed.append(connection)
            rest = []
            for exchange in exchanges:
                if connection.room() > 0:
                    connection.start(exchange)
                else:
                    exchange.t_opened = exchange.connect_ns = 0
                    rest.append(exchange)
        else:
            self._maybe_http2 = False  # rule 2: ALPN chose HTTP/1.1
            connection.start(exchanges[0])
            rest = exchanges[1:]
            for exchange in rest:
                exchange.t_opened = exchange.connect_ns = 0
        for exchange in rest:
            self.start(exchange)

    def _count(self, dialed: Dialed) -> None:
        """A new connection in the self-audit's counters."""
        self.connections_opened += 1
        self.kernel_stamped_connections += dialed.kernel_stamps
        self.connect_ns_total += dialed.tcp_ns + dialed.tls_ns
        if dialed.tls_ns:
            self.tls_handshakes += 1
            self.tls_ns_total += dialed.tls_ns

    def _fail_unsent(self, exchange: Exchange, error_class: str, message: str) -> None:
        exchange.t_issue = exchange.t_opened or exchange.t_issue
        self._on_connect_failed(exchange, error_class, message)

    def _serve_waiting(self) -> None:
        """Starts waiting requests on connections with room, and opens
        connections for the rest while below the cap (rule 3)."""
        waiting = self._waiting
        while waiting:
            connection = next((c for c in self._multiplexed if c.room() > 0), None)
            if connection is not None:
                connection.start(waiting.popleft())
                continue
            if self._at_cap():
                return
            batch = max(1, self.stream_limit) if self._maybe_http2 else 1
            self._dial([waiting.popleft() for _ in range(min(batch, len(waiting)))])

    # -- warm-up ----------------------------------------------------------------

    async def warm_up(self, count: int, concurrency: int) -> int:
        """Opens up to ``count`` more connections before they are needed and
        returns how many are open and idle (or, for HTTP/2, open with room).

        Rule 3 holds: connections open or opening count against
        ``max_connections``.  A failed connect is left out of the count, not
        raised: how many is enough is the caller's decision.  Requests that
        are waiting when a warmed connection arrives are started on it.
        """
        cap = self.max_connections
        if cap is not None:
            count = min(count, cap - len(self._open) - len(self._dialing))
        if count <= 0:
            return self._ready()
        gate = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with gate:
                if self._closed or self._at_cap():  # requests took the room meanwhile
                    return
                self._warming += 1
                try:
                    dialed = await dial(
                        self.endpoint,
                        self._make_protocol,
                        self.connect_timeout,
                        *self._dial_options(),
                    )
                except DialError:
                    dialed = None
                finally:
                    self._warming -= 1
                if dialed is not None:
                    self._adopt(dialed)
                else:  # the room it held is free again
                    self._serve_waiting()

        await asyncio.gather(*(one() for _ in range(count)))
        return self._ready()

    def _adopt(self, dialed: Dialed) -> None:
        """A warm-up connection joins the pool: idle (HTTP/1.1) or
        multiplexed (HTTP/2), and serves any request already waiting."""
        connection = dialed.protocol
        self._count(dialed)
        if self._closed:  # the pool closed while this one was connecting
            connection.close()
            return
        if connection.closed:  # the server hung up at once
            self._serve_waiting()
            return
        self._open.add(connection)
        if dialed.http2:
            self.http2_connections += 1
            self._multiplexed.append(connection)
            self.room_freed(connection)
        else:
            self._maybe_http2 = False  # rule 2: ALPN chose HTTP/1.1
            self.release(connection, True)

    def _ready(self) -> int:
        idle = sum(not connection.closed for connection in self._idle)
        return idle + sum(connection.room() > 0 for connection in self._multiplexed)

    # -- connections report back ----------------------------------------------

    def release(self, connection: Connection, keep_alive: bool) -> None:
        """An HTTP/1.1 response ended: a kept-alive connection serves the next
        waiting request, else waits idle (RFC 9112 section 9.3)."""
        if keep_alive and not connection.closed:
            if self._waiting:
                connection.start(self._waiting.popleft())
            else:
                self._idle.append(connection)
        else:
            connection.close()

    def room_freed(self, connection: H2Connection) -> None:
        """An HTTP/2 stream ended or the server raised its stream limit."""
        waiting = self._waiting
        while waiting and connection.room() > 0:
            connection.start(waiting.popleft())

    def draining(self, connection: H2Connection) -> None:
        """The server sent GOAWAY: no new streams on ``connection``."""
        if connection in self._multiplexed:
            self._multiplexed.remove(connection)
        self._serve_waiting()

    def forget(self, connection: Connection | H2Connection) -> None:
        """``connection`` closed."""
        self._open.discard(connection)
        if isinstance(connection, H2Connection) and connection in self._multiplexed:
            self._multiplexed.remove(connection)
        self._serve_waiting()

    # -- the client's view ----------------------------------------------------

    def in_flight(self) -> list[InFlight]:
        """Requests with bytes on the wire (for timeouts and cancellation)."""
        out: list[InFlight] = []
        for connection in self._open:
            if isinstance(connection, H2Connection):
                out.extend(connection.in_flight())
            elif connection.exchange is not None:
                out.append(connection)
        return out

    async def cancel_connecting(self) -> None:
        """Cancels waiting requests and dials; their requests end as ``Cancelled``."""
        waiting, self._waiting = self._waiting, deque()
        for exchange in waiting:
            self._on_connect_failed(
                exchange, "Cancelled", "cancelled while waiting for a connection"
            )
        tasks = list(self._dialing)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Cancels dials and closes every connection."""
        self._closed = True
        await self.cancel_connecting()
        for connection in list(self._open):
            connection.close()
        self._idle.clear()
        self._multiplexed.clear()
        if self._stamping_on is not None:
            self._stamping_on.close()
            self._stamping_on = None
        if self.capture is not None:  # every connection has let go of it (close)
            self.capture.close()
        receiver, self.receiver = self.receiver, None
        if receiver is not None:  # every connection has let go of it (close)
            if self._receiver_loop is not None:
                self._receiver_loop.remove_reader(receiver.wake_fd)
            receiver.stop()
            self._receive_scheduling = receiver.scheduling()

    @property
    def receive_scheduling(self) -> ReceiveScheduling | None:
        """What the receive thread got and how it ran (None: no thread)."""
        if self.receiver is not None:
            return self.receiver.scheduling()
        return self._receive_scheduling

    def _dial_options(
        self,
    ) -> tuple[ArrivalClock | None, ReceiveThread | None, PacketCapture | None]:
        """The stamping a dial takes.  The first dial starts the receive
        thread, the stamping keeper and the packet capture: a pool that
        never dials (or is made before its loop runs) holds none of them."""
        if self.arrival_clock is None or self._closed:
            return self.arrival_clock, None, None
        if self._want_capture:
            self._want_capture = False
            self.capture, self.packet_note = open_capture(self.endpoint.host, self.endpoint.port)
        if self._want_receiver:
            self._want_receiver = False
            try:
                receiver = ReceiveThread(*self._receive_placement)
            except OSError:  # no epoll here: the loop reads (and stamps)
                pass
            else:
                self._receiver_loop = asyncio.get_running_loop()
                self._receiver_loop.add_reader(receiver.wake_fd, receiver.dispatch)
                self.receiver = receiver
        if self._stamping_on is None:
            self._stamping_on = _stamping_keeper()
        return self.arrival_clock, self.receiver, self.capture
