"""A minimal blocking WebSocket client (RFC 6455), for the ``lcb_serve``
service's ``/evaluate`` route (:mod:`.lcb_service`).

Just what that service needs, over plain ``ws://`` (TCP): the opening
handshake, whose ``Sec-WebSocket-Accept`` is checked (§4.2.2); masked text
frames out (§5.3, a client must mask); text messages in, fragmented or not
(§5.4), with pings answered (§5.5.2) and a close ending the stream.  No
extensions or subprotocols are offered, so none may be used.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import struct
from urllib.parse import urlsplit

from ..errors import MlpeError

__all__ = ("WebSocketClosed", "WebSocketError", "accept_key", "connect", "encode_frame")

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
_MAX_MESSAGE = 1 << 30  # a whole evaluation result fits; a runaway peer does not
_MAX_HEAD = 1 << 16


class WebSocketError(MlpeError, OSError):
    """The peer broke the protocol, or the connection failed."""


class WebSocketClosed(WebSocketError):
    """The peer closed the connection before the message we waited for."""


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer to ``key``."""
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def encode_frame(opcode: int, payload: bytes, *, mask: bytes | None) -> bytes:
    """One final frame; masked with the 4-byte ``mask`` when given (a
    client's), unmasked otherwise (a server's)."""
    size = len(payload)
    head = bytes([0x80 | opcode])
    bit = 0x80 if mask is not None else 0
    if size < 126:
        head += bytes([bit | size])
    elif size < 1 << 16:
        head += bytes([bit | 126]) + struct.pack("!H", size)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", size)
    if mask is None:
        return head + payload
    return head + mask + _masked(payload, mask)


def _masked(payload: bytes, mask: bytes) -> bytes:
    # XOR with the key repeated (§5.3), done as one big-integer operation.
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    value = int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")
    return value.to_bytes(len(payload), "big")


class Connection:
    """An open client connection (:func:`connect`)."""

    def __init__(self, sock: socket.socket, buffered: bytes) -> None:
        self._sock = sock
        self._buffer = bytearray(buffered)

    def send_text(self, text: str) -> None:
        self._sock.sendall(encode_frame(OP_TEXT, text.encode(), mask=os.urandom(4)))

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self._sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise WebSocketClosed("the connection closed mid-frame")
            self._buffer += chunk
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def _frame(self) -> tuple[bool, int, bytes]:
        first, second = self._read(2)
        if first & 0x70:
            raise WebSocketError("a frame with reserved bits set (no extension was agreed)")
        if second & 0x80:
            raise WebSocketError("a masked frame from the server")
        size = second & 0x7F
        if size == 126:
            (size,) = struct.unpack("!H", self._read(2))
        elif size == 127:
            (size,) = struct.unpack("!Q", self._read(8))
        if size > _MAX_MESSAGE:
            raise WebSocketError(f"a frame of {size} bytes")
        return bool(first & 0x80), first & 0x0F, self._read(size)

    def recv_text(self) -> str:
        """The next text message, control frames handled on the way.

        Raises:
            WebSocketClosed: a close frame or the end of the stream.
            WebSocketError: a protocol violation or a socket error.
        """
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                final, opcode, payload = self._frame()
            except TimeoutError:
                raise WebSocketError("no answer in time") from None
            except OSError as error:
                if isinstance(error, WebSocketError):
                    raise
                raise WebSocketError(f"connection failed: {error}") from None
            if opcode == OP_PING:
                self._sock.sendall(encode_frame(OP_PONG, payload, mask=os.urandom(4)))
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                raise WebSocketClosed("the service closed the connection")
            if opcode not in (OP_TEXT, OP_CONTINUATION) or (opcode == OP_CONTINUATION) != bool(
                parts
            ):
                raise WebSocketError(f"unexpected frame (opcode {opcode})")
            parts.append(payload)
            size += len(payload)
            if size > _MAX_MESSAGE:
                raise WebSocketError("a message too large")
            if final:
                try:
                    return b"".join(parts).decode()
                except UnicodeDecodeError:
                    raise WebSocketError("a text message that is not UTF-8") from None

    def settimeout(self, seconds: float) -> None:
        self._sock.settimeout(seconds)

    def close(self) -> None:
        try:
            self._sock.sendall(encode_frame(OP_CLOSE, struct.pack("!H", 1000), mask=os.urandom(4)))
        except OSError:
            pass  # closing either way
        self._sock.close()


def connect(url: str, *, timeout_s: float) -> Connection:
    """Opens ``ws://host:port/path`` (``http://`` is taken as ``ws://``).

    Raises:
        WebSocketError: not a ``ws://`` URL, the connection or the
            handshake failed.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "http") or not parts.hostname:
        raise WebSocketError(f"{url}: only ws:// (or http://) URLs are supported")
    port = parts.port or 80
    key = base64.b64encode(os.urandom(16)).decode()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    try:
        sock = socket.create_connection((parts.hostname, port), timeout=timeout_s)
    except OSError as error:
        raise WebSocketError(f"{url}: {error.strerror or error}") from None
    try:
        sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk or len(head) > _MAX_HEAD:
                raise WebSocketError(f"{url}: no WebSocket handshake answer")
            head += chunk
    except OSError as error:
        sock.close()
        if isinstance(error, WebSocketError):
            raise
        raise WebSocketError(f"{url}: {error.strerror or error}") from None
    head, _, rest = head.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
    }
    if len(status) < 2 or status[1] != "101":
        sock.close()
        raise WebSocketError(f"{url}: the upgrade was refused ({lines[0]})")
    if headers.get("sec-websocket-accept") != accept_key(key):
        sock.close()
        raise WebSocketError(f"{url}: a wrong Sec-WebSocket-Accept")
    return Connection(sock, rest)
