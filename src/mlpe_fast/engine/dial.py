"""Opening a connection: TCP, then TLS with ALPN, then the protocol object.

The TLS handshake runs on the connected transport (``loop.start_tls``)
rather than inside ``create_connection`` so that the two steps are timed
apart: both belong to the first request on a new connection (its
``t_issue`` is taken before the connect, as a user's client would see it),
and the self-audit reports them on their own as connection setup.

Over TLS the server picks the protocol (ALPN, RFC 7301), so the protocol
object is made only once the handshake is done; bytes the server sends in
between (HTTP/2's SETTINGS come at once) are handed to it on arrival.

Given an :class:`ArrivalClock`, a cleartext connection (HTTP/1.1 or h2c)
is opened on a socket of the engine's own and read by its protocol with the
kernel's arrival stamps (:mod:`mlpe_fast.engine.stamped_socket`); when the
kernel does not stamp (another system, an old kernel), the same socket goes
to the loop's transport and reads are stamped as they are read.  Over TLS
the loop's transport decrypts, so reads there keep read-time stamps.

:func:`probe` (what a run checks before any load) also catches the two
endpoint mix-ups that would otherwise fail late and obscurely: h2c (HTTP/2
with prior knowledge) against a server that speaks HTTP/1.1 only, which
answers the preface with an HTTP/1.x error or hangs up
(:data:`NO_H2C`), and ``https://`` against a plain-HTTP port, which answers
the TLS ClientHello with an HTTP/1.x 400 (a TLS error) or waits for more
bytes (the whole connect timeout).  For the latter a second connection asks
in plain HTTP (``HEAD /``) once the handshake has failed (but for the
server's certificate: that server spoke TLS) or has not finished within
:data:`PLAIN_CHECK_AFTER_S`; an HTTP/1.x answer ends the probe at once
(:data:`PLAIN_HTTP`), unless it is a 400: that is what a TLS server such as
nginx answers plain HTTP on its TLS port with ("The plain HTTP request was
sent to HTTPS port"), where the handshake goes on.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ._receive import ArrivalClock, ReceiveThread
from .clock import monotonic_ns
from .stamped_socket import StampedSocketTransport

__all__ = (
    "NO_H2C",
    "PLAIN_HTTP",
    "PLAIN_CHECK_AFTER_S",
    "Dialed",
    "DialError",
    "Endpoint",
    "dial",
    "probe",
    "tls_context",
)

_T = TypeVar("_T")

ALPN_H2 = "h2"
ALPN_HTTP11 = "http/1.1"

NO_H2C = (
    "the endpoint does not speak HTTP/2 without TLS (h2c): drop --http2 "
    "(or use https:// for HTTP/2 through ALPN)"
)
"""Why an h2c connection found no HTTP/2 server (error class ``HTTP2Unsupported``)."""
PLAIN_HTTP = "the endpoint answered in plain HTTP: use http:// instead of https://"
"""Why a TLS handshake found a plain-HTTP server (error class ``TLSError``)."""
PLAIN_CHECK_AFTER_S = 0.5
"""A TLS handshake not done by then is checked for a plain-HTTP server.
A TLS server answers the ClientHello within one round trip."""

_NOT_TLS_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL"}
)

# RFC 9113 section 3.4: the client's preface, then its (empty) SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_FRAME_SETTINGS = 0x4


def tls_context(
    *, http2: bool, ca_bundle: str | None = None, insecure: bool = False
) -> ssl.SSLContext:
    """The client's TLS settings: certificates verified against the system's
    trust store (or ``ca_bundle``) and the host name checked, unless
    ``insecure``; ALPN offers ``h2`` first when ``http2``."""
    context = ssl.create_default_context(cafile=ca_bundle)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols([ALPN_H2, ALPN_HTTP11] if http2 else [ALPN_HTTP11])
    return context


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect.

    ``http2`` without ``tls`` is HTTP/2 with prior knowledge (h2c, RFC 9113
    section 3.3); with ``tls`` it is what ALPN offers first.
    """

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    server_hostname: str | None = None
    http2: bool = False


@dataclass(frozen=True)
class Dialed:
    """A connection ready for requests; ``kernel_stamps`` when its reads
    carry the kernel's arrival stamps."""

    protocol: Any
    http2: bool
    tcp_ns: int
    tls_ns: int
    kernel_stamps: bool = False


class DialError(Exception):
    """Connecting failed; ``error_class`` names how (for the record);
    ``spoke_tls``: the server took part in a TLS handshake (its certificate
    was refused)."""

    def __init__(self, error_class: str, message: str, *, spoke_tls: bool = False) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.spoke_tls = spoke_tls


class _Handshaking(asyncio.Protocol):
    """Holds what arrives before the real protocol object takes over."""

    def __init__(self) -> None:
        self.early: list[bytes] = []
        self.lost: Exception | None = None
        self.closed = False

    def data_received(self, data: bytes) -> None:
        self.early.append(data)

    def eof_received(self) -> bool:
        self.closed = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = exc


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        # A request is one write; tokens must not wait for Nagle.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def dial(
    endpoint: Endpoint,
    make_protocol: Callable[[bool], Any],
    timeout: float,
    arrival_clock: ArrivalClock | None = None,
    receiver: ReceiveThread | None = None,
    capture: Any = None,
) -> Dialed:
    """Connects and returns the protocol object ``make_protocol(http2)`` made
    for the connection, already attached to it; with ``arrival_clock``,
    cleartext reads carry the kernel's arrival stamps (module doc), read by
    ``receiver``'s thread when given, split by the segments ``capture``
    (a :class:`~._pktstamp_py.PacketCapture`) saw when given.

    Raises:
        DialError: ``ConnectTimeout``, ``ConnectError`` or ``TLSError``.
    """
    loop = asyncio.get_running_loop()
    where = f"{endpoint.host}:{endpoint.port}"
    t_start = monotonic_ns()
    deadline = loop.time() + timeout
    if endpoint.tls is None:
        http2 = endpoint.http2
        if arrival_clock is not None:
            return await _dial_stamped(
                endpoint, make_protocol, timeout, arrival_clock, receiver, t_start, capture
            )
        _, protocol = await _connect(endpoint, lambda: make_protocol(http2), timeout)
        return Dialed(protocol, http2, monotonic_ns() - t_start, 0)

    holder = _Handshaking()
    transport, _ = await _connect(endpoint, lambda: holder, timeout)
    t_connected = monotonic_ns()
    _nodelay(transport)
    try:
        tls_transport = await asyncio.wait_for(
            loop.start_tls(
                transport,
                holder,
                endpoint.tls,
                server_hostname=endpoint.server_hostname or endpoint.host,
            ),
            max(deadline - loop.time(), 0.001),
        )
    except asyncio.TimeoutError:
        transport.abort()
        raise DialError(
            "ConnectTimeout", f"no TLS handshake with {where} within {timeout:g} s"
        ) from None
    except asyncio.CancelledError:
        transport.abort()
        raise
    except ssl.SSLCertVerificationError as error:
        transport.abort()
        raise DialError(
            "TLSError",
            f"TLS with {where}: the server's certificate was not accepted "
            f"({error.verify_message or error.reason}); give its CA with --ca-bundle, "
            "or --insecure to skip verification",
            spoke_tls=True,
        ) from None
    except (ssl.SSLError, OSError, ConnectionError) as error:
        transport.abort()
        # What OpenSSL says of a reply that is no TLS record (an HTTP/1.x 400, say).
        hint = (
            "; if the endpoint speaks plain HTTP, use http:// instead of https://"
            if getattr(error, "reason", None) in _NOT_TLS_REASONS
            else ""
        )
        raise DialError("TLSError", f"TLS handshake with {where} failed: {error}{hint}") from None
    if tls_transport is None or holder.closed:
        if tls_transport is not None:
            tls_transport.abort()
        raise DialError("ConnectError", f"{where} closed the connection during the TLS handshake")
    t_secured = monotonic_ns()
    ssl_object = tls_transport.get_extra_info("ssl_object")
    alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
    # RFC 7301 section 3.2: no protocol selected means the server ignores
    # ALPN; HTTP/1.1 is then the only safe assumption.
    http2 = endpoint.http2 and alpn == ALPN_H2
    protocol = make_protocol(http2)
    tls_transport.set_protocol(protocol)
    protocol.connection_made(tls_transport)
    for data in holder.early:  # bytes that came before the switch
        _deliver(protocol, data)
    return Dialed(protocol, http2, t_connected - t_start, t_secured - t_connected)


async def _dial_stamped(
    endpoint: Endpoint,
    make_protocol: Callable[[bool], Any],
    timeout: float,
    arrival_clock: ArrivalClock,
    receiver: ReceiveThread | None,
    t_start: int,
    capture: Any = None,
) -> Dialed:
    """A cleartext connection on the engine's own socket (module doc)."""
    loop = asyncio.get_running_loop()
    sock = await _connect_socket(endpoint, timeout)
    tcp_ns = monotonic_ns() - t_start
    http2 = endpoint.http2
    protocol = make_protocol(http2)
    if protocol.attach_socket(sock, arrival_clock, receiver, capture):
        StampedSocketTransport(loop, sock, protocol)
        return Dialed(protocol, http2, tcp_ns, 0, kernel_stamps=True)
    protocol.detach_socket()
    try:
        await loop.create_connection(lambda: protocol, sock=sock)
    except OSError as error:
        sock.close()
        raise DialError("ConnectError", f"{endpoint.host}:{endpoint.port}: {error}") from None
    return Dialed(protocol, http2, tcp_ns, 0)


async def _connect_socket(endpoint: Endpoint, timeout: float) -> socket.socket:
    """The TCP connect on a socket of our own."""
    return await _connecting(endpoint, timeout, _open_socket(endpoint.host, endpoint.port))


async def _open_socket(host: str, port: int) -> socket.socket:
    """Tries the host's addresses in the resolver's order, as
    ``loop.create_connection`` does."""
    loop = asyncio.get_running_loop()
    addresses = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as failed:
            sock.close()
            error = failed
            continue
        except BaseException:  # cancelled or timed out: the socket goes too
            sock.close()
            raise
        return sock
    raise error


async def _connect(
    endpoint: Endpoint, factory: Callable[[], Any], timeout: float
) -> tuple[asyncio.Transport, Any]:
    """The TCP connect on the loop's transport."""
    loop = asyncio.get_running_loop()
    return await _connecting(
        endpoint, timeout, loop.create_connection(factory, endpoint.host, endpoint.port)
    )


async def _connecting(endpoint: Endpoint, timeout: float, connect: Awaitable[_T]) -> _T:
    """A TCP connect within ``timeout``, its failures as DialErrors."""
    where = f"{endpoint.host}:{endpoint.port}"
    try:
        return await asyncio.wait_for(connect, timeout)
    except asyncio.TimeoutError:
        raise DialError(
            "ConnectTimeout", f"no connection to {where} within {timeout:g} s"
        ) from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise DialError("ConnectError", f"cannot connect to {where}: {reason}") from None


def _deliver(protocol: asyncio.BufferedProtocol, data: bytes) -> None:
    view = memoryview(data)
    while view:
        buffer = cast(memoryview, protocol.get_buffer(len(view)))
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        protocol.buffer_updated(n)
        view = view[n:]


class _Probe(asyncio.Protocol):
    """Connects; with ``preface`` (h2c), sends it and keeps the first
    bytes of the answer (``answer`` is done at 9 bytes or at the close)."""

    def __init__(self, preface: bytes = b"") -> None:
        self.transport: asyncio.BaseTransport | None = None
        self.preface = preface
        self.data = b""
        self._buffer = memoryview(b"")
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if self.preface:
            cast(asyncio.Transport, transport).write(self.preface)

    def data_received(self, data: bytes) -> None:
        self.data += data
        if len(self.data) >= 9 and not self.answer.done():
            self.answer.set_result(self.data)

    # What :func:`_deliver` hands over (bytes that came with the TLS
    # handshake: HTTP/2's SETTINGS often do).
    def get_buffer(self, sizehint: int) -> memoryview:
        self._buffer = memoryview(bytearray(max(sizehint, 1)))
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._buffer[:nbytes]))

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended()

    def _ended(self) -> None:
        if not self.answer.done():
            self.answer.set_result(self.data)

    def close(self) -> None:
        # Abort: a TLS close would wait for the server's close_notify.
        if self.transport is not None:
            cast(asyncio.Transport, self.transport).abort()


async def probe(endpoint: Endpoint, timeout: float) -> None:
    """Connects (TLS handshake included) and hangs up: is the endpoint there,
    and does it speak what we will (module doc)?

    Raises:
        DialError: as :func:`dial`; also ``HTTP2Unsupported`` (h2c against a
            server without it, :data:`NO_H2C`) and ``TLSError`` with
            :data:`PLAIN_HTTP` (``https://`` against plain HTTP).
    """
    if endpoint.tls is not None:
        await _probe_tls(endpoint, timeout)
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    h2c = endpoint.http2
    dialed = await dial(endpoint, lambda http2: _Probe(_H2_PREFACE if h2c else b""), timeout)
    probe_protocol: _Probe = dialed.protocol
    try:
        if h2c:
            await _check_h2c(endpoint, probe_protocol, deadline, timeout)
    finally:
        probe_protocol.close()


async def _check_h2c(endpoint: Endpoint, sent: _Probe, deadline: float, timeout: float) -> None:
    """The server's answer to our preface must begin with its SETTINGS frame."""
    where = f"{endpoint.host}:{endpoint.port}"
    loop = asyncio.get_running_loop()
    try:
        answer = await asyncio.wait_for(asyncio.shield(sent.answer), max(deadline - loop.time(), 0))
    except asyncio.TimeoutError:
        raise DialError(
            "ConnectTimeout",
            f"no HTTP/2 SETTINGS from {where} within {timeout:g} s: does it speak HTTP/2 "
            "without TLS (h2c)? If not, drop --http2 (or use https:// for HTTP/2 through ALPN)",
        ) from None
    if len(answer) >= 9 and answer[3] == _FRAME_SETTINGS and answer[5:9] == bytes(4):
        return
    if answer.startswith(b"HTTP/"):
        status = answer.split(b"\r\n", 1)[0].split(b"\n", 1)[0][:80]
        said = f"it answered the HTTP/2 preface with {status.decode('latin-1')!r}"
    elif not answer:
        said = "it hung up at the HTTP/2 preface"
    else:
        said = f"it answered the HTTP/2 preface with {answer[:16]!r}, not a SETTINGS frame"
    raise DialError("HTTP2Unsupported", f"{where}: {NO_H2C}; {said}")


async def _probe_tls(endpoint: Endpoint, timeout: float) -> None:
    """The TLS handshake, and a plain-HTTP check beside it (module doc)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    handshake = loop.create_task(dial(endpoint, lambda http2: _Probe(), timeout))
    plain: asyncio.Task[bool] | None = None
    try:
        await asyncio.wait({handshake}, timeout=min(PLAIN_CHECK_AFTER_S, timeout))
        if not handshake.done():
            plain = loop.create_task(_answers_plain_http(endpoint, deadline))
            await asyncio.wait({handshake, plain}, return_when=asyncio.FIRST_COMPLETED)
            if not handshake.done() and plain.result():
                raise DialError("TLSError", f"{endpoint.host}:{endpoint.port}: {PLAIN_HTTP}")
            await asyncio.wait({handshake})  # it has its own deadline
        error = handshake.exception()
        if error is None:
            handshake.result().protocol.close()
            return
        if isinstance(error, DialError) and not error.spoke_tls:
            if plain is None:
                plain = loop.create_task(_answers_plain_http(endpoint, deadline))
            if await plain:
                raise DialError("TLSError", f"{endpoint.host}:{endpoint.port}: {PLAIN_HTTP}")
        raise error
    finally:
        for task in (handshake, plain):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if handshake.done() and not handshake.cancelled() and handshake.exception() is None:
            handshake.result().protocol.close()  # (idempotent) even when we raised


async def _answers_plain_http(endpoint: Endpoint, deadline: float) -> bool:
    """Whether the endpoint answers ``HEAD /`` in plain HTTP/1.x, with a
    status other than 400 (module doc), on a connection of its own, by
    ``deadline``."""
    loop = asyncio.get_running_loop()
    host = endpoint.server_hostname or endpoint.host
    authority = f"[{host}]" if ":" in host else host
    request = f"HEAD / HTTP/1.1\r\nHost: {authority}:{endpoint.port}\r\nConnection: close\r\n\r\n"

    async def ask() -> bytes:
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
        try:
            writer.write(request.encode("latin-1"))
            return await reader.readexactly(12)  # "HTTP/1.1 404"
        finally:
            writer.close()

    try:
        head = await asyncio.wait_for(ask(), max(deadline - loop.time(), 0))
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        return False
    status = head[9:12]
    return head.startswith(b"HTTP/1.") and status.isdigit() and status != b"400"
