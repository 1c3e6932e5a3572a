"""A transport whose reads carry the kernel's arrival stamps.

asyncio's transports read with ``recv``, which drops the ancillary data the
kernel attaches to a read; a receive stamp comes back only with ``recvmsg``
(``csrc/mlpe_rxstamp.h``).  :class:`StampedSocketTransport` therefore owns
a connected non-blocking socket and lets its protocol do the read: the
event loop still owns readiness (``add_reader``), so the scheduler,
timeouts and cancellation work as on any transport, and the protocol's
``read_socket`` reads, stamps and feeds its decoders in one call (in C with
the compiled core).

With a receive thread (``ReadCore.attach_socket(..., receiver)``) the loop
does not watch the socket at all: the thread reads it as data arrives and
the protocol's ``on_received`` (set here) runs ``read_socket``, which then
feeds what the thread read.

Writes go straight to the socket; what the kernel does not take at once is
kept and written when the socket is writable again (requests are small, so
this is rare).  The transport speaks cleartext only: over TLS the bytes the
socket returns are ciphertext, and the engine keeps the loop's own TLS
transport (read-time stamps).

Rules:
 1. ``read_socket`` returns the byte count, 0 at the end of the stream, or a
    negative errno; -EAGAIN means a spurious wake-up (nothing to do).
 2. The end of the stream is ``eof_received`` and then ``connection_lost``
    (None); a read or write error is ``connection_lost(OSError)``; both are
    delivered once, from the loop, after the socket left it, and the
    transport lets go of its protocol then.
 3. ``close`` writes what is pending first; ``abort`` drops it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from typing import Any, Protocol

__all__ = ("ReadsItsSocket", "StampedSocketTransport")


class ReadsItsSocket(Protocol):
    """What the transport needs of its protocol (a ``SocketReader`` of
    :mod:`mlpe_fast.engine._receive` has it: both read cores)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def eof_received(self) -> bool | None: ...
    def read_socket(self) -> int: ...
    def detach_socket(self) -> None: ...

    @property
    def threaded(self) -> bool: ...

    on_received: Any


class StampedSocketTransport(asyncio.Transport):
    """A transport on ``sock`` that lets ``protocol`` read it (module doc)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: ReadsItsSocket
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._pending = bytearray()
        self._closing = False
        self._lost = False
        self._reading = True
        self._extra: dict[str, Any] = {"socket": sock}
        try:
            self._extra["sockname"] = sock.getsockname()
            self._extra["peername"] = sock.getpeername()
        except OSError:  # reset already: the first read will say so
            pass
        # The receive thread reads the socket, or the loop watches it.
        self._threaded = protocol.threaded
        protocol.connection_made(self)
        if self._lost:  # the protocol closed it at once: nothing to watch
            return
        if self._threaded:
            protocol.on_received = self._on_readable
        else:
            loop.add_reader(self._fd, self._on_readable)

    # -- reading --------------------------------------------------------------

    def _on_readable(self) -> None:
        if not self._reading:  # the thread's news after a pause or the end
            return
        n = self._protocol.read_socket()
        if n > 0 or n in (-errno.EAGAIN, -errno.EWOULDBLOCK, -errno.EINTR):
            return
        if n == 0:  # rule 2
            self._stop_reading()
            keep_open = self._protocol.eof_received()
            if not keep_open and not self._closing:
                self.close()
            return
        self._fatal(OSError(-n, os.strerror(-n)))

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            if not self._threaded:
                self._loop.remove_reader(self._fd)

    def pause_reading(self) -> None:
        self._stop_reading()

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            if self._threaded:
                # The thread's news while paused was dropped and is not
                # repeated (unlike a readable fd's): take what it read now.
                self._loop.call_soon(self._on_readable)
            else:
                self._loop.add_reader(self._fd, self._on_readable)

    def is_reading(self) -> bool:
        return self._reading

    # -- writing --------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        if self._pending:
            self._pending += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as error:
            self._fatal(error)
            return
        if sent < len(data):
            self._pending += memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._fatal(error)
            return
        del self._pending[:sent]
        if not self._pending:
            self._loop.remove_writer(self._fd)
            if self._closing:
                self._lose(None)

    def get_write_buffer_size(self) -> int:
        return len(self._pending)

    def can_write_eof(self) -> bool:
        return False

    # -- ending ---------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Rule 3: pending bytes go first."""
        if self._closing:
            return
        self._closing = True
        self._stop_reading()
        if not self._pending:
            self._lose(None)

    def abort(self) -> None:
        self._closing = True
        self._pending.clear()
        self._lose(None)

    def _fatal(self, error: Exception) -> None:
        self._closing = True
        self._pending.clear()
        self._lose(error)

    def _lose(self, error: Exception | None) -> None:
        """Rule 2: the socket leaves the loop, then the protocol hears once."""
        if self._lost:
            return
        self._lost = True
        self._stop_reading()
        self._protocol.detach_socket()  # T5: the thread lets go before the close
        self._loop.remove_writer(self._fd)
        self._sock.close()
        self._loop.call_soon(self._connection_lost, error)

    def _connection_lost(self, error: Exception | None) -> None:
        protocol = self._protocol
        try:
            protocol.connection_lost(error)
        finally:
            # Break the protocol <-> transport cycle now, as asyncio's own
            # transports do: a connection ended is freed at once, not by a
            # later garbage collection (a connection's read buffer is 256
            # KiB, and churned connections would pile up until then).
            protocol.on_received = None
            self._protocol = None  # type: ignore[assignment]

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[return-value]
