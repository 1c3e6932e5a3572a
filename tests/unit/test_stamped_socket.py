"""StampedSocketTransport (``mlpe_fast.engine.stamped_socket``, rules 1-3)
over a real loopback TCP pair, on asyncio's loop and on uvloop.

The protocol is a tiny fake that reads with ``recv_into`` and records what
the transport tells it; the peer is a plain socket driven through the loop.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import Any, cast

import pytest

from mlpe_fast.engine.stamped_socket import StampedSocketTransport

Runner = Callable[[Coroutine[Any, Any, None]], None]
TIMEOUT = 10


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a test's coroutine on each event loop the engine supports."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run  # type: ignore[no-any-return]
    return asyncio.run


class FakeProtocol:
    """Reads what arrives and records the transport's calls in order.

    ``threaded`` False: the loop watches the socket; True: a receive thread
    would, and calls ``on_received`` (set by the transport) when it read
    something; the tests call it themselves."""

    def __init__(self, sock: socket.socket, threaded: bool = False) -> None:
        self.sock = sock
        self.threaded = threaded
        self.on_received: Any = None
        self.fd_when_detached: int | None = None
        self.buffer = bytearray(1 << 16)
        self.data = bytearray()
        self.calls: list[Any] = []
        self.transport: asyncio.BaseTransport | None = None
        self.keep_open = False
        self.arrived = asyncio.Event()
        self.gone = asyncio.Event()
        self.fd_when_lost: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.calls.append("made")
        self.transport = transport

    def read_socket(self) -> int:
        try:
            n = self.sock.recv_into(self.buffer)
        except (BlockingIOError, InterruptedError):
            return -errno.EAGAIN
        except OSError as error:
            return -(error.errno or errno.EIO)
        self.data += self.buffer[:n]
        self.arrived.set()
        return n

    def detach_socket(self) -> None:
        self.calls.append("detach")
        self.fd_when_detached = self.sock.fileno()

    def eof_received(self) -> bool | None:
        self.calls.append("eof")
        return self.keep_open

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append(("lost", exc))
        self.fd_when_lost = self.sock.fileno()
        self.gone.set()

    def lost(self) -> list[Any]:
        return [call for call in self.calls if isinstance(call, tuple)]


async def tcp_pair(
    sndbuf: int | None = None, rcvbuf: int | None = None
) -> tuple[socket.socket, socket.socket]:
    """(ours, peer): a connected non-blocking loopback pair.  ``sndbuf`` is
    our send buffer, ``rcvbuf`` the peer's receive buffer (both set before
    the connection, so the window is small from the start)."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        if rcvbuf is not None:  # inherited by the accepted socket
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        listener.setblocking(False)
        ours = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if sndbuf is not None:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        ours.setblocking(False)
        await loop.sock_connect(ours, listener.getsockname())
        peer, _ = await loop.sock_accept(listener)
    peer.setblocking(False)
    return ours, peer


async def open_transport(
    sndbuf: int | None = None, rcvbuf: int | None = None
) -> tuple[StampedSocketTransport, FakeProtocol, socket.socket]:
    ours, peer = await tcp_pair(sndbuf, rcvbuf)
    protocol = FakeProtocol(ours)
    transport = StampedSocketTransport(asyncio.get_running_loop(), ours, protocol)
    return transport, protocol, peer


async def read_all(peer: socket.socket, pause: float = 0.0, chunk: int = 1 << 16) -> bytes:
    """What the peer receives until the end of the stream, read in ``chunk``
    pieces with ``pause`` seconds between them (a slow reader)."""
    loop = asyncio.get_running_loop()
    got = bytearray()
    while True:
        piece = await asyncio.wait_for(loop.sock_recv(peer, chunk), TIMEOUT)
        if not piece:
            return bytes(got)
        got += piece
        if pause:
            await asyncio.sleep(pause)


async def read_exactly(peer: socket.socket, size: int, pause: float = 0.0) -> bytes:
    loop = asyncio.get_running_loop()
    got = bytearray()
    while len(got) < size:
        piece = await asyncio.wait_for(loop.sock_recv(peer, min(1 << 16, size - len(got))), TIMEOUT)
        assert piece, f"end of stream after {len(got)} of {size} bytes"
        got += piece
        if pause:
            await asyncio.sleep(pause)
    return bytes(got)


def payload(size: int, seed: int = 0) -> bytes:
    """Bytes whose order shows: a counter of 4-byte words."""
    return b"".join(struct.pack(">I", seed + i) for i in range(size // 4))


BIG = 1 << 20  # far beyond a 4 KiB send buffer and a 4 KiB receive window


def test_data_arrives_and_extra_info_names_the_socket(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        transport, protocol, peer = await open_transport()
        sock = protocol.sock
        assert protocol.calls == ["made"] and protocol.transport is transport
        assert transport.get_extra_info("socket") is sock
        assert transport.get_extra_info("peername") == peer.getsockname()
        assert transport.get_extra_info("sockname") == peer.getpeername()
        assert transport.get_extra_info("no such thing", "default") == "default"
        assert transport.is_reading() and not transport.is_closing()
        assert cast(object, transport.get_protocol()) is protocol

        await loop.sock_sendall(peer, b"hello ")
        await asyncio.wait_for(protocol.arrived.wait(), TIMEOUT)
        protocol.arrived.clear()
        await loop.sock_sendall(peer, b"world")
        while bytes(protocol.data) != b"hello world":
            await asyncio.wait_for(protocol.arrived.wait(), TIMEOUT)
            protocol.arrived.clear()

        transport.write(b"ping")
        assert await read_exactly(peer, 4) == b"ping"
        assert protocol.calls == ["made"]  # nothing ended
        transport.close()
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        assert protocol.calls == ["made", "detach", ("lost", None)]
        # The receive thread let go before the close; the socket was closed
        # before the protocol heard.
        assert protocol.fd_when_detached not in (None, -1)
        assert protocol.fd_when_lost == -1
        peer.close()

    run(main())


def test_pause_reading_stops_reads_until_resumed(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        transport, protocol, peer = await open_transport()
        transport.pause_reading()
        assert not transport.is_reading()
        await loop.sock_sendall(peer, b"held")
        await asyncio.sleep(0.05)
        assert protocol.data == b""
        transport.resume_reading()
        assert transport.is_reading()
        await asyncio.wait_for(protocol.arrived.wait(), TIMEOUT)
        assert protocol.data == b"held"
        transport.abort()
        peer.close()
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)

    run(main())


def test_peer_close_is_eof_then_one_connection_lost(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        transport, protocol, peer = await open_transport()
        await loop.sock_sendall(peer, b"last words")
        peer.shutdown(socket.SHUT_WR)
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        await asyncio.sleep(0.05)  # a second delivery would show by now
        assert protocol.calls == ["made", "eof", "detach", ("lost", None)]
        assert protocol.data == b"last words"
        assert protocol.fd_when_lost == -1
        assert transport.is_closing()
        # Our side closed too: the peer sees the end of the stream.
        assert await read_all(peer) == b""
        transport.close()  # again: nothing more happens
        transport.abort()
        await asyncio.sleep(0.01)
        assert len(protocol.lost()) == 1
        peer.close()

    run(main())


def test_eof_received_true_keeps_the_transport_open(run: Runner) -> None:
    async def main() -> None:
        transport, protocol, peer = await open_transport()
        protocol.keep_open = True
        peer.shutdown(socket.SHUT_WR)
        while "eof" not in protocol.calls:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.02)
        assert protocol.calls == ["made", "eof"] and not transport.is_closing()
        transport.write(b"still here")  # half-closed: we can still send
        assert await read_exactly(peer, 10) == b"still here"
        transport.close()
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        assert protocol.calls == ["made", "eof", "detach", ("lost", None)]
        peer.close()

    run(main())


def test_peer_reset_is_connection_lost_with_an_oserror(run: Runner) -> None:
    async def main() -> None:
        transport, protocol, peer = await open_transport()
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # RST
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        await asyncio.sleep(0.05)
        assert "eof" not in protocol.calls
        [(_, error)] = protocol.lost()
        assert isinstance(error, OSError) and error.errno == errno.ECONNRESET
        assert protocol.fd_when_lost == -1
        assert transport.is_closing()
        transport.write(b"after the end")  # ignored, no second delivery
        transport.close()
        await asyncio.sleep(0.01)
        assert len(protocol.lost()) == 1

    run(main())


def test_a_write_larger_than_the_send_buffer_arrives_whole_and_in_order(run: Runner) -> None:
    async def main() -> None:
        transport, protocol, peer = await open_transport(sndbuf=4096, rcvbuf=4096)
        big, small = payload(BIG), payload(64, seed=1 << 24)
        transport.write(big)
        # The kernel took only a part: the rest waits in the transport.
        assert 0 < transport.get_write_buffer_size() < len(big)
        transport.write(small)  # queued behind the pending bytes
        transport.write(memoryview(b"tail"))
        expected = big + small + b"tail"
        assert transport.get_write_buffer_size() > len(small)
        got = await read_exactly(peer, len(expected), pause=0.0005)
        assert got == expected
        assert transport.get_write_buffer_size() == 0
        assert protocol.calls == ["made"]
        transport.close()
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        assert await read_all(peer) == b""
        peer.close()

    run(main())


def test_close_writes_pending_bytes_first(run: Runner) -> None:
    async def main() -> None:
        transport, protocol, peer = await open_transport(sndbuf=4096, rcvbuf=4096)
        big = payload(1 << 20)
        transport.write(big)
        assert transport.get_write_buffer_size() > 0
        transport.close()
        assert transport.is_closing() and not transport.is_reading()
        transport.write(b"after close")  # ignored
        await asyncio.sleep(0.02)
        # Still flushing: the protocol has not heard yet.
        assert protocol.calls == ["made"]
        assert await read_all(peer, pause=0.0005) == big
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        assert protocol.calls == ["made", "detach", ("lost", None)]
        peer.close()

    run(main())


def test_abort_drops_pending_bytes(run: Runner) -> None:
    async def main() -> None:
        transport, protocol, peer = await open_transport(sndbuf=4096, rcvbuf=4096)
        big = payload(1 << 20)
        transport.write(big)
        pending = transport.get_write_buffer_size()
        assert pending > 0
        transport.abort()
        assert transport.get_write_buffer_size() == 0
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        assert protocol.calls == ["made", "detach", ("lost", None)]
        got = await read_all(peer)
        # What the kernel had taken arrives; what was pending never does.
        assert len(got) == len(big) - pending
        assert got == big[: len(got)]
        peer.close()

    run(main())


def test_a_write_to_a_reset_connection_is_connection_lost(run: Runner) -> None:
    async def main() -> None:
        transport, protocol, peer = await open_transport()
        transport.pause_reading()  # only the write can find out
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        await asyncio.sleep(0.02)
        for _ in range(3):  # the first send may still succeed
            transport.write(b"x" * 1024)
            await asyncio.sleep(0.01)
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        [(_, error)] = protocol.lost()
        assert isinstance(error, OSError)
        assert error.errno in (errno.ECONNRESET, errno.EPIPE)

    run(main())


def test_threaded_the_loop_does_not_watch_and_on_received_drives_reads(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, peer = await tcp_pair()
        protocol = FakeProtocol(ours, threaded=True)
        transport = StampedSocketTransport(loop, ours, protocol)
        assert protocol.on_received is not None  # the transport's hook
        await loop.sock_sendall(peer, b"token")
        await asyncio.sleep(0.05)
        assert protocol.data == b""  # nobody but the "thread" reads
        protocol.on_received()
        assert protocol.data == b"token"
        protocol.on_received()  # nothing more: a spurious wake-up
        assert protocol.calls == ["made"]

        transport.pause_reading()
        await loop.sock_sendall(peer, b" held")
        await asyncio.sleep(0.01)
        protocol.on_received()  # news while paused: not read now
        assert protocol.data == b"token"
        transport.resume_reading()
        await asyncio.sleep(0)  # resuming takes what the thread said while paused
        assert protocol.data == b"token held"
        protocol.on_received()  # nothing more: a spurious wake-up
        assert protocol.data == b"token held"

        peer.shutdown(socket.SHUT_WR)
        await asyncio.sleep(0.01)
        protocol.on_received()
        await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
        assert protocol.calls == ["made", "eof", "detach", ("lost", None)]
        assert protocol.fd_when_detached not in (None, -1)
        assert protocol.fd_when_lost == -1
        # The transport let go of the protocol at the end (rule 2): no hook
        # left for late news, and no cycle keeping the connection alive.
        assert protocol.on_received is None
        assert transport.get_protocol() is None
        await asyncio.sleep(0.01)
        assert len(protocol.lost()) == 1
        peer.close()

    run(main())


def test_threaded_resume_reading_takes_what_arrived_while_paused(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, peer = await tcp_pair()
        protocol = FakeProtocol(ours, threaded=True)
        transport = StampedSocketTransport(loop, ours, protocol)
        try:
            transport.pause_reading()
            await loop.sock_sendall(peer, b"while paused")
            await asyncio.sleep(0.01)
            protocol.on_received()  # the thread's one wake-up, while paused
            transport.resume_reading()
            await asyncio.wait_for(protocol.arrived.wait(), 0.5)
            assert protocol.data == b"while paused"
        finally:
            transport.abort()
            peer.close()
            await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)

    run(main())


def test_close_in_connection_made_is_one_connection_lost(run: Runner) -> None:
    class ClosesAtOnce(FakeProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            transport.close()

    async def main() -> None:
        ours, peer = await tcp_pair()
        protocol = ClosesAtOnce(ours)
        try:
            StampedSocketTransport(asyncio.get_running_loop(), ours, protocol)
            await asyncio.wait_for(protocol.gone.wait(), TIMEOUT)
            await asyncio.sleep(0.01)
            assert protocol.calls == ["made", "detach", ("lost", None)]
            assert await read_all(peer) == b""
        finally:
            peer.close()
            ours.close()

    run(main())
