"""Which protocol each connection of the simulated endpoint speaks.

* Without ``http2``: HTTP/1.1, the :class:`~mlpe_fast.sim._protocol.Connection`
  straight from the listener, as before HTTP/2 existed here.
* Cleartext with ``http2``: the client's first bytes decide.  A client
  with prior knowledge opens with the connection preface (RFC 9113 section
  3.4); any other first bytes are HTTP/1.1.  The preface may arrive in
  pieces: bytes that agree with it so far are held until they differ or it
  is complete.
* TLS: the protocol the client's ALPN selected (section 3.2), ``h2`` being
  offered only with ``http2``; no ALPN means HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import cast

from ._h2 import Http2Connection
from ._protocol import Connection
from ._state import ServerState

__all__ = ("PREFACE", "Negotiator", "make_ssl_context", "protocol_factory")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""The HTTP/2 client connection preface (RFC 9113 section 3.4)."""


def make_ssl_context(cert_file: str, key_file: str, *, http2: bool) -> ssl.SSLContext:
    """The server side of TLS: the certificate chain, its key, and the ALPN
    offer (``h2`` first when serving HTTP/2).

    Raises:
        OSError, ssl.SSLError: a file is missing, unreadable or not PEM,
            or the key does not match the certificate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # RFC 9113 section 9.2: HTTP/2 over TLS needs TLS 1.2 or later.
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    context.set_alpn_protocols(["h2", "http/1.1"] if http2 else ["http/1.1"])
    return context


def protocol_factory(state: ServerState) -> Callable[[], asyncio.Protocol]:
    """What the listener makes of each accepted connection."""
    if not state.config.http2:
        return lambda: Connection(state)
    return lambda: Negotiator(state)


class Negotiator(asyncio.Protocol):
    """A connection whose protocol is not known yet; hands the transport to
    the HTTP/1.1 or the HTTP/2 connection once it is (see the module
    docstring)."""

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._transport: asyncio.Transport | None = None
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:  # the handshake is done: ALPN has spoken
            http2 = ssl_object.selected_alpn_protocol() == "h2"
            self._hand_over(Http2Connection(self._state) if http2 else Connection(self._state))
            return
        self._state.conns.add(self)

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data
        size = min(len(buf), len(PREFACE))
        if buf[:size] != PREFACE[:size]:
            self._hand_over(Connection(self._state), buf)
        elif size == len(PREFACE):
            self._hand_over(Http2Connection(self._state), buf)
        else:
            self._buf = buf

    def eof_received(self) -> bool | None:
        return None  # closed before saying anything that needs an answer

    def connection_lost(self, exc: Exception | None) -> None:
        self._state.conns.discard(self)
        self._transport = None

    def abort(self) -> None:
        """Drops the connection at once (server shutdown)."""
        if self._transport is not None:
            self._transport.abort()

    def _hand_over(self, protocol: asyncio.Protocol, data: bytes = b"") -> None:
        transport = self._transport
        assert transport is not None
        self._state.conns.discard(self)
        self._transport = None
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if data:
            protocol.data_received(data)
