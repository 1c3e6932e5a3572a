"""Pure-Python twin of the engine's receive path (``_receive_c.pyx``).

A connection's read core can read a socket of its own instead of taking
reads from an asyncio transport: :class:`SocketReader` (the base of the
HTTP/1.1 and HTTP/2 read cores) reads with ``recvmsg`` and takes the
kernel's arrival stamp of the newest data in each read
(``csrc/mlpe_rxstamp.h``, rules K1-K4), mapped onto the monotonic clock by
an :class:`ArrivalClock`.  An arrival stamp is clamped to what is possible:
never after the read, never before an earlier stamp (or, over HTTP/1.1, the
request's send).  :mod:`mlpe_fast.engine.stamped_socket` is the transport
that drives it.

A read carries one kernel stamp, that of its newest data, so a loop that
reads late gives the first token the stamp of whatever waited behind it.
With a :class:`ReceiveThread` (``csrc/mlpe_rxthread.h``, rules T1-T8) the
socket is read by a thread of its own as data arrives, and ``read_socket``
feeds what that thread read, read by read, each with its own stamps.  The
compiled thread never takes the interpreter's lock; this twin's does, so it
has the same behaviour but not the same timing.

The thread places itself first (T8, :mod:`.rx_sched`): it pins itself to
the CPUs asked for and asks for ``SCHED_FIFO`` at the priority asked for,
falling back quietly to what it had; Linux applies both to the thread whose
id is given (``threading.get_native_id``), as the compiled thread's
``pthread_setaffinity_np`` and ``pthread_setschedparam`` do.

With a :class:`~._pktstamp_py.PacketCapture` (``--receive-stamps packet``)
a read is split where the segments that carried it begin, and each piece is
fed with its own segment's arrival stamp (``csrc/mlpe_pktstamp.h`` P8):
the reader counts the bytes of its stream, and the capture knows which
segment carried which bytes.  ``last_read_segment`` says, while a piece is
decoded, where its stamp came from (:data:`SEGMENT_STAMPED`, or why not).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import sys
import threading
import time
from typing import Any

from .rx_sched import ReceiveScheduling, scheduling_of

__all__ = (
    "KEEP_BYTES",
    "NO_SEGMENTS",
    "READ_SIZE",
    "SEGMENT_LOST",
    "SEGMENT_MISSED",
    "SEGMENT_STAMPED",
    "SEGMENT_UNKNOWN",
    "RESAMPLE_NS",
    "ArrivalClock",
    "ReceiveThread",
    "SocketReader",
    "enable_kernel_stamps",
)

# 256 KiB: a read drains what the kernel holds for the socket (the default
# Linux receive buffer autotunes up to a few MiB, but a busy stream holds
# tens of KiB between two loop iterations).  One such space per thread, not
# per connection (_read_space): a read is fed whole before the next one.
READ_SIZE = 256 << 10

monotonic_ns = time.monotonic_ns

# ``last_read_segment``: no capture on this connection, or the piece's stamp
# is its segment's, or it fell back to the read's stamp because no SYN-ACK
# was seen, the capture lost frames, or no captured segment covered it
# (``_pktstamp_py`` STAMPED, UNKNOWN, LOST, MISSED, plus one).
NO_SEGMENTS, SEGMENT_STAMPED, SEGMENT_UNKNOWN, SEGMENT_LOST, SEGMENT_MISSED = 0, 1, 2, 3, 4

# linux/net_tstamp.h and asm-generic/socket.h (the value on x86 and Arm).
_SO_TIMESTAMPING = 37
_SOF_RX_SOFTWARE_STAMPS = (1 << 3) | (1 << 4)  # RX_SOFTWARE | SOFTWARE
_ANCILLARY_SIZE = 256
# K4: re-sample the clock mapping this often (a wall-clock step is caught by
# the next sample, or at once by a stamp that maps outside what is possible).
RESAMPLE_NS = 1_000_000_000
_CLOCKMAP_TRIES = 5
_CLOCKMAP_STEP_NS = 20_000


class ArrivalClock:
    """Maps the kernel's ``CLOCK_REALTIME`` receive stamps onto the engine's
    monotonic clock (K3, K4); one per connection pool."""

    def __init__(self) -> None:
        self.offset_ns = 0
        self.error_ns = 0
        self.sampled_at = 0
        self.steps = 0
        self.last_step_ns = 0
        self.sample()

    def sample(self) -> None:
        """Re-samples the offset; counts a wall-clock step when it moved (K4)."""
        best_width = sys.maxsize
        best_offset = best_at = 0
        for _ in range(_CLOCKMAP_TRIES):
            before = time.monotonic_ns()
            wall = time.clock_gettime_ns(time.CLOCK_REALTIME)
            after = time.monotonic_ns()
            if after - before < best_width:
                best_width = after - before
                best_offset = before + (after - before) // 2 - wall
                best_at = after
        error = best_width // 2 + 1
        if self.sampled_at:
            moved = best_offset - self.offset_ns
            if abs(moved) > _CLOCKMAP_STEP_NS + error + self.error_ns:
                self.steps += 1
                self.last_step_ns = moved
        self.offset_ns = best_offset
        self.error_ns = error
        self.sampled_at = best_at

    def arrival(self, t_realtime: int, t_read: int, floor: int) -> int:
        """The monotonic arrival stamp of a read stamped ``t_read`` whose
        kernel stamp is ``t_realtime``, within ``[floor, t_read]``."""
        if t_read - self.sampled_at > RESAMPLE_NS:
            self.sample()
        t_ns = t_realtime + self.offset_ns
        if t_ns > t_read + self.error_ns or t_ns < floor - self.error_ns:
            # Impossible unless the wall clock moved since the last sample.
            self.sample()
            t_ns = t_realtime + self.offset_ns
        return max(min(t_ns, t_read), floor)


def enable_kernel_stamps(sock: socket.socket) -> bool:
    """Asks the kernel to stamp what arrives on ``sock`` (K1)."""
    if sys.platform != "linux":
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPING, _SOF_RX_SOFTWARE_STAMPS)
    except OSError:
        return False
    return True


def _kernel_stamp(ancillary: list[tuple[int, int, bytes]]) -> int:
    """The software stamp of SCM_TIMESTAMPING (the first of its three), or 0."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPING and len(data) >= 16:
            seconds = int.from_bytes(data[0:8], sys.byteorder, signed=True)
            nanoseconds = int.from_bytes(data[8:16], sys.byteorder, signed=True)
            return seconds * 1_000_000_000 + nanoseconds
    return 0


# mlpe_rxthread.h: one read's room and the most bytes that wait per socket.
_THREAD_READ_SPACE = 64 << 10
MAX_PENDING = 4 << 20
# T7: the most a fed batch keeps for the next one, data and chunk table
# (8 KiB and 64 chunks of 24 bytes); this twin keeps none (a read is a bytes).
KEEP_BYTES = (8 << 10) + 64 * 24

_read_spaces = threading.local()


def _read_space() -> memoryview:
    """This thread's read space: what the loop reads a socket into (a
    transport's ``get_buffer``, a loop read).  Each read is fed whole, and
    the decoders copy what they keep, before the loop reads again, so the
    connections of one loop share one space: an idle connection holds no
    read room of its own."""
    space: memoryview | None = getattr(_read_spaces, "space", None)
    if space is None:
        space = _read_spaces.space = memoryview(bytearray(READ_SIZE))
    return space


class _Received:
    """What the receive thread read of one socket and the loop has not taken
    (``mlpe_rxbatch``): the reads' bytes and stamps, then the end or an error."""

    __slots__ = ("chunks", "eof", "error", "size")

    def __init__(self) -> None:
        self.chunks: list[tuple[bytes, int, int]] = []  # data, kernel stamp, read stamp
        self.size = 0
        self.eof = False
        self.error = 0


class _Registration:
    __slots__ = ("core", "paused", "pending", "queued", "sock", "watched")

    def __init__(self, core: SocketReader, sock: socket.socket) -> None:
        self.core = core
        self.sock = sock
        self.pending = _Received()
        self.watched = True
        self.paused = False
        self.queued = False


class ReceiveThread:
    """A thread that reads registered sockets as data arrives (T1-T8):
    ``priority`` 1-99 asks for SCHED_FIFO at it (0: the inherited policy),
    ``cpus`` pins it (empty: where the process may run)."""

    def __init__(self, priority: int = 0, cpus: tuple[int, ...] = ()) -> None:
        if not hasattr(select, "epoll") or not hasattr(os, "eventfd"):
            raise OSError(errno.EOPNOTSUPP, "no receive thread on this system")
        self._asked = (priority, tuple(sorted(set(cpus))))
        # T8: (tid, policy, priority, cpus, sched errno, affinity errno),
        # written by the thread before start returns, never again.
        self._placement: tuple[int, int, int, tuple[int, ...], int, int] = (0, 0, 0, (), 0, 0)
        self._placed = threading.Event()
        self._final: ReceiveScheduling | None = None
        self._epoll = select.epoll()
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._stop_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._stop_fd, select.EPOLLIN)
        self._lock = threading.Lock()
        self._by_fd: dict[int, _Registration] = {}
        self._ready: list[_Registration] = []
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run, name="mlpe-fast receive", daemon=True
        )
        self._thread.start()
        self._placed.wait()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def scheduling(self) -> ReceiveScheduling:
        """What the thread got and how it ran so far (until it stopped)."""
        if self._final is not None:
            return self._final
        tid, policy, priority, cpus, sched_error, affinity_error = self._placement
        return scheduling_of(
            tid=tid,
            policy=policy,
            priority=priority,
            cpus=cpus,
            sched_error=sched_error,
            affinity_error=affinity_error,
            asked_priority=self._asked[0],
            asked_cpus=self._asked[1],
            interpreter_free=False,
        )

    def _place(self) -> None:
        """T8, on the thread itself."""
        tid = threading.get_native_id()
        priority, cpus = self._asked
        sched_error = affinity_error = 0
        if cpus:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError as error:
                affinity_error = error.errno or errno.EINVAL
        if priority > 0:
            try:  # EPERM without the right to it: the thread runs on as it was
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
            except OSError as error:
                sched_error = error.errno or errno.EPERM
        policy = os.sched_getscheduler(tid)
        got = os.sched_getparam(tid).sched_priority
        kind = {os.SCHED_OTHER: 0, os.SCHED_FIFO: 1, os.SCHED_RR: 2}.get(policy, 3)
        allowed = tuple(sorted(os.sched_getaffinity(tid)))
        self._placement = (tid, kind, got, allowed, sched_error, affinity_error)

    def add(self, core: SocketReader, sock: socket.socket) -> _Registration:
        registration = _Registration(core, sock)
        with self._lock:
            self._epoll.register(sock.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
            self._by_fd[sock.fileno()] = registration
        return registration

    def remove(self, registration: _Registration) -> None:
        """T5: once this returns the thread never touches the socket again."""
        with self._lock:
            fd = registration.sock.fileno()
            if self._by_fd.get(fd) is registration:
                del self._by_fd[fd]
                self._unwatch(registration)
            if registration.queued:
                self._ready.remove(registration)
                registration.queued = False

    def _unwatch(self, registration: _Registration) -> None:
        if registration.watched:
            if not registration.paused:  # a paused socket has left the set (T3)
                try:
                    self._epoll.unregister(registration.sock.fileno())
                except (OSError, ValueError):
                    pass
            registration.watched = False
            registration.paused = False

    def held(self, registration: _Registration) -> int:
        """The bytes waiting for the loop on ``registration``."""
        with self._lock:
            return registration.pending.size

    def take(self, registration: _Registration) -> _Received:
        """T4: what was read of the socket so far."""
        with self._lock:
            taken, registration.pending = registration.pending, _Received()
            if registration.paused and registration.watched:
                registration.paused = False
                try:
                    self._epoll.register(
                        registration.sock.fileno(), select.EPOLLIN | select.EPOLLRDHUP
                    )
                except OSError as error:  # the loop hears it as a read error
                    registration.watched = False
                    if not taken.eof and not taken.error:
                        taken.error = error.errno or errno.EIO
        return taken

    def dispatch(self) -> None:
        """The loop's callback on ``wake_fd``."""
        try:
            os.eventfd_read(self.wake_fd)
        except BlockingIOError:
            pass
        with self._lock:
            ready, self._ready = self._ready, []
            for registration in ready:
                registration.queued = False
        for registration in ready:
            registration.core._received()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._final = self.scheduling()  # the thread's counters end with it
        os.eventfd_write(self._stop_fd, 1)
        thread.join()
        self._epoll.close()
        os.close(self.wake_fd)
        os.close(self._stop_fd)

    def _run(self) -> None:
        try:
            self._place()
        finally:
            self._placed.set()
        while True:
            try:
                events = self._epoll.poll()
            except InterruptedError:
                continue
            except (OSError, ValueError):  # closed under us: stop
                return
            stop = wake = False
            with self._lock:
                for fd, _ in events:
                    if fd == self._stop_fd:
                        stop = True
                        continue
                    registration = self._by_fd.get(fd)
                    if registration is None or not registration.watched or registration.paused:
                        continue  # T5: removed since the poll
                    if self._read_one(registration) and not registration.queued:
                        registration.queued = True
                        self._ready.append(registration)
                        wake = True
            if wake:
                os.eventfd_write(self.wake_fd, 1)
            if stop:
                return

    def _read_one(self, registration: _Registration) -> bool:
        """T2, T3: one read; True when something was added for the loop."""
        pending = registration.pending
        if pending.size >= MAX_PENDING:
            # Out of the set, not an empty mask: epoll reports a reset
            # socket's EPOLLERR and EPOLLHUP whatever the mask (T3).
            self._epoll.unregister(registration.sock.fileno())
            registration.paused = True
            return False
        try:
            data, ancillary, _, _ = registration.sock.recvmsg(_THREAD_READ_SPACE, _ANCILLARY_SIZE)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as error:
            pending.error = error.errno or errno.EIO
            self._unwatch(registration)
            return True
        t_read = monotonic_ns()
        if not data:
            pending.eof = True
            self._unwatch(registration)
            return True
        pending.chunks.append((data, _kernel_stamp(ancillary), t_read))
        pending.size += len(data)
        return True


class SocketReader:
    """Reads a socket of its own with kernel stamps; a subclass decodes
    each read in ``_feed(data, t_ns, t_read, kernel)``, where ``t_ns`` is
    the stamp to decode with (the arrival, or the read without a kernel
    stamp) and ``t_read`` when the data was read."""

    def __init__(self) -> None:
        self._view_space: memoryview | None = None
        self.last_read_ns = 0
        self.last_read_kernel = False
        self._floor = 0
        self._sock: socket.socket | None = None
        self._clock: ArrivalClock | None = None
        self._kernel = False
        self._receiver: ReceiveThread | None = None
        self._registration: _Registration | None = None
        # Called when the receive thread read something (the transport's).
        self.on_received: Any = None
        self._capture: Any = None
        self._segment_key: tuple[int, str, int] = (0, "", 0)
        self._stream_offset = 0
        self.last_read_segment = NO_SEGMENTS

    def attach_socket(
        self,
        sock: socket.socket,
        clock: ArrivalClock,
        receiver: ReceiveThread | None = None,
        capture: Any = None,
    ) -> bool:
        """Reads will come from ``sock``: by :meth:`read_socket` on the
        loop, or by ``receiver``'s thread when given (it then calls
        ``on_received``), split by the segments ``capture`` saw when given.
        Returns whether the kernel agreed to stamp the socket's data (K1)."""
        self._sock = sock
        self._clock = clock
        self._kernel = enable_kernel_stamps(sock)
        if capture is not None and self._kernel:
            try:
                local, peer = sock.getsockname(), sock.getpeername()
            except OSError:  # reset already: the first read says so
                pass
            else:
                self._capture = capture
                self._segment_key = (local[1], peer[0], peer[1])
        if receiver is not None and receiver.running:
            try:
                self._registration = receiver.add(self, sock)
            except OSError:  # as mlpe_rxthread_add failing: the loop reads
                return self._kernel
            self._receiver = receiver
        return self._kernel

    @property
    def threaded(self) -> bool:
        """Whether the receive thread reads this socket."""
        return self._registration is not None

    def detach_socket(self) -> None:
        """Stops the receive thread reading the socket (before it is closed)."""
        if self._capture is not None:
            self._capture.forget(self._segment_key[0])
            self._capture = None
        registration, self._registration = self._registration, None
        if registration is not None and self._receiver is not None:
            self._receiver.remove(registration)

    def _received(self) -> None:
        if self._registration is not None and self.on_received is not None:
            self.on_received()

    @property
    def _view(self) -> memoryview:
        """The read space, this thread's, taken at the first read."""
        if self._view_space is None:
            self._view_space = _read_space()
        return self._view_space

    @property
    def buffer_bytes(self) -> int:
        """Bytes of read storage this connection holds of its own: what the
        receive thread read and the loop has not taken (the compiled core
        counts its storage, at most twice KEEP_BYTES once fed, T7); the
        thread's read space is shared and not counted."""
        registration, receiver = self._registration, self._receiver
        if registration is None or receiver is None:
            return 0
        return receiver.held(registration)

    def read_socket(self) -> int:
        """One read from the attached socket, fed like :meth:`buffer_updated`
        but stamped with the data's arrival, or, with a receive thread, what
        the thread read.  Returns the byte count, 0 at the end of the stream,
        or a negative errno (-EAGAIN: nothing yet)."""
        assert self._sock is not None and self._clock is not None
        if self._receiver is not None:
            return self._take_received()
        try:
            nbytes, ancillary, _, _ = self._sock.recvmsg_into([self._view], _ANCILLARY_SIZE)
        except (BlockingIOError, InterruptedError):
            return -errno.EAGAIN
        except OSError as error:
            return -(error.errno or errno.EIO)
        t_read = monotonic_ns()
        if nbytes <= 0:
            return 0
        self._feed_read(self._view[:nbytes], _kernel_stamp(ancillary), t_read)
        return nbytes

    def _feed_read(self, data: Any, t_realtime: int, t_read: int) -> None:
        assert self._clock is not None
        if self._capture is not None:
            self._feed_segments(data, t_realtime, t_read)
            return
        if t_realtime and self._kernel:
            t_ns = self._clock.arrival(t_realtime, t_read, self._stamp_floor())
            self._feed(data, t_ns, t_read, True)
        else:
            self._feed(data, t_read, t_read, False)

    def _feed_segments(self, data: Any, t_realtime: int, t_read: int) -> None:
        """One read, piece by piece: each piece's stamp is its segment's
        arrival, at least the previous piece's (P8: a byte is readable once
        every byte before it arrived); a piece no segment covers takes the
        read's own kernel stamp (K2)."""
        assert self._clock is not None
        capture = self._capture
        capture.drain()  # P3: the read's segments are in the ring by now
        local_port, remote, remote_port = self._segment_key
        start = self._stream_offset
        end = self._stream_offset = start + len(data)
        view = memoryview(data)
        pos = 0
        for length, t_segment, why in capture.runs(local_port, remote, remote_port, start, end):
            if why == 0:
                t_ns = self._clock.arrival(t_segment, t_read, self._stamp_floor())
            elif t_realtime:
                t_ns = self._clock.arrival(t_realtime, t_read, self._stamp_floor())
            else:
                t_ns = t_read
            self.last_read_segment = why + 1
            self._feed(view[pos : pos + length], t_ns, t_read, bool(why == 0 or t_realtime))
            pos += length
            if self._capture is None:  # closed by what the piece completed
                break
        capture.consume_to(local_port, remote, remote_port, end)

    def _take_received(self) -> int:
        registration = self._registration
        if registration is None or self._receiver is None or not self._receiver.running:
            return -errno.EAGAIN  # nothing will come
        taken = self._receiver.take(registration)
        fed = 0
        for data, t_realtime, t_read in taken.chunks:
            self._feed_read(data, t_realtime, t_read)
            fed += len(data)
            if self._registration is None:  # closed by what the read completed
                return fed
        if taken.eof:
            return 0
        if taken.error:
            return -taken.error
        return fed or -errno.EAGAIN

    def _stamp_floor(self) -> int:
        """The earliest an arrival stamp may be."""
        return self._floor

    def _feed(self, data: Any, t_ns: int, t_read: int, kernel: bool) -> None:
        raise NotImplementedError
