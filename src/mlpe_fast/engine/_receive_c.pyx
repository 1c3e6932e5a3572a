# cython: language_level=3
"""The engine's receive path, compiled: the kernel's receive stamps
(``csrc/mlpe_rxstamp.h``), their clock (:class:`ArrivalClock`), the receive
thread (``csrc/mlpe_rxthread.h``) and :class:`SocketReader`, the base of the
HTTP/1.1 and HTTP/2 read cores when they read a socket of their own.

Behaviour is specified by the twin, ``_receive_py.py``.
"""

import errno
import os
import threading

from .rx_sched import scheduling_of

from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.string cimport memcpy, memset

from mlpe_fast.engine._pktstamp_c cimport mlpe_pktconn

from ._pktstamp_py import address_key
from ._receive_py import (
    NO_SEGMENTS,
    SEGMENT_LOST,
    SEGMENT_MISSED,
    SEGMENT_STAMPED,
    SEGMENT_UNKNOWN,
)

__all__ = (
    "KEEP_BYTES",
    "NO_SEGMENTS",
    "READ_SIZE",
    "RESAMPLE_NS",
    "SEGMENT_LOST",
    "SEGMENT_MISSED",
    "SEGMENT_STAMPED",
    "SEGMENT_UNKNOWN",
    "ArrivalClock",
    "ReceiveThread",
    "SocketReader",
)


cdef extern from "mlpe_clock.h" nogil:
    int64_t mlpe_monotonic_ns()


cdef extern from "mlpe_rxstamp.h" nogil:
    int mlpe_rxstamp_enable(int fd)
    int64_t mlpe_rxstamp_recv(int fd, uint8_t *buf, size_t cap, int64_t *t_realtime_ns)
    void mlpe_clockmap_sample(mlpe_clockmap *m)
    int64_t mlpe_clockmap_monotonic(const mlpe_clockmap *m, int64_t t_realtime_ns)


cdef extern from "mlpe_rxthread.h" nogil:
    mlpe_rxthread *mlpe_rxthread_start(const mlpe_rxthread_options *options, int *error)
    const mlpe_rxthread_placement *mlpe_rxthread_placement_of(const mlpe_rxthread *t)
    void mlpe_rxthread_stop(mlpe_rxthread *t)
    int mlpe_rxthread_wake_fd(const mlpe_rxthread *t)
    void mlpe_rxconn_init(mlpe_rxconn *c, int fd, void *owner)
    int mlpe_rxthread_add(mlpe_rxthread *t, mlpe_rxconn *c)
    void mlpe_rxthread_remove(mlpe_rxthread *t, mlpe_rxconn *c)
    void mlpe_rxconn_free(mlpe_rxconn *c)
    mlpe_rxconn *mlpe_rxthread_take_ready(mlpe_rxthread *t)
    int mlpe_rxthread_take(mlpe_rxthread *t, mlpe_rxconn *c, mlpe_rxbatch *batch)
    void mlpe_rxbatch_free(mlpe_rxbatch *b)
    void mlpe_rxbatch_shrink(mlpe_rxbatch *b)
    size_t mlpe_rxbatch_bytes(const mlpe_rxbatch *b)
    size_t mlpe_rxthread_held(mlpe_rxthread *t, mlpe_rxconn *c)
    size_t MLPE_RXBATCH_KEEP_BYTES
    size_t MLPE_RXBATCH_KEEP_CHUNKS


# As in the twin.
READ_SIZE = 256 << 10
KEEP_BYTES = MLPE_RXBATCH_KEEP_BYTES + MLPE_RXBATCH_KEEP_CHUNKS * sizeof(mlpe_rxchunk)
# The loop's read space, one per thread (see the twin's _read_space).
_read_spaces = threading.local()
RESAMPLE_NS = 1_000_000_000
cdef int64_t _RESAMPLE_NS = RESAMPLE_NS
cdef int _EAGAIN = errno.EAGAIN


cdef class ArrivalClock:
    """Maps kernel receive stamps onto the monotonic clock (see the twin)."""

    def __init__(self):
        self._m.sampled_at = 0
        self._m.steps = 0
        self._m.last_step_ns = 0
        mlpe_clockmap_sample(&self._m)

    @property
    def offset_ns(self):
        return self._m.offset_ns

    @property
    def error_ns(self):
        return self._m.error_ns

    @property
    def sampled_at(self):
        return self._m.sampled_at

    @property
    def steps(self):
        return self._m.steps

    @property
    def last_step_ns(self):
        return self._m.last_step_ns

    def sample(self):
        mlpe_clockmap_sample(&self._m)

    def arrival(self, int64_t t_realtime, int64_t t_read, int64_t floor):
        return self._arrival(t_realtime, t_read, floor)

    cdef int64_t _arrival(self, int64_t t_realtime, int64_t t_read, int64_t floor):
        if t_read - self._m.sampled_at > _RESAMPLE_NS:
            mlpe_clockmap_sample(&self._m)
        cdef int64_t t_ns = mlpe_clockmap_monotonic(&self._m, t_realtime)
        if t_ns > t_read + self._m.error_ns or t_ns < floor - self._m.error_ns:
            # Impossible unless the wall clock moved since the last sample.
            mlpe_clockmap_sample(&self._m)
            t_ns = mlpe_clockmap_monotonic(&self._m, t_realtime)
        if t_ns > t_read:
            t_ns = t_read
        if t_ns < floor:
            t_ns = floor
        return t_ns


cdef int _CPU_BITS = 16 * 64


cdef class ReceiveThread:
    """A thread that reads registered sockets as data arrives, placed as
    asked (T8; see the twin)."""

    def __cinit__(self, *args, **kwargs):
        self._t = NULL

    def __init__(self, int priority=0, cpus=()):
        cdef mlpe_rxthread_options options
        memset(&options, 0, sizeof(options))
        asked = tuple(sorted(set(cpus)))
        for cpu in asked:
            if not 0 <= cpu < _CPU_BITS:
                raise OSError(errno.EINVAL, f"CPU {cpu} is beyond the {_CPU_BITS} a set holds")
            options.cpus[cpu // 64] |= (<uint64_t>1) << (cpu % 64)
        options.pin = 1 if asked else 0
        options.fifo_priority = priority if priority > 0 else 0
        self._asked = (priority, asked)
        self._final = None
        cdef int error = 0
        with nogil:
            self._t = mlpe_rxthread_start(&options, &error)
        if self._t == NULL:
            raise OSError(-error, os.strerror(-error))
        cdef const mlpe_rxthread_placement *p = mlpe_rxthread_placement_of(self._t)
        got = tuple(c for c in range(_CPU_BITS) if (p.cpus[c // 64] >> (c % 64)) & 1)
        self._placement = (p.tid, p.policy, p.priority, got, p.sched_error, p.affinity_error)

    def scheduling(self):
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
            interpreter_free=True,
        )

    @property
    def wake_fd(self):
        return mlpe_rxthread_wake_fd(self._t) if self._t != NULL else -1

    @property
    def running(self):
        return self._t != NULL

    def dispatch(self):
        """The loop's callback on ``wake_fd``."""
        if self._t == NULL:
            return
        cdef mlpe_rxconn *c = mlpe_rxthread_take_ready(self._t)
        # Every owner is a registered SocketReader, which holds a reference
        # to itself while registered; collect them before any of them runs.
        owners = []
        while c != NULL:
            owners.append(<object>c.owner)
            c = c.next_ready
        for reader in owners:
            (<SocketReader>reader)._received()

    def stop(self):
        """Ends the thread (joins it); registered sockets are read no more."""
        cdef mlpe_rxthread *t = self._t
        if t != NULL:
            self._final = self.scheduling()  # the thread's counters end with it
            self._t = NULL
            with nogil:
                mlpe_rxthread_stop(t)

    def __dealloc__(self):
        if self._t != NULL:
            mlpe_rxthread_stop(self._t)
            self._t = NULL


cdef class SocketReader:
    """Reads a socket of its own with kernel stamps (see the twin); a
    subclass decodes each read in ``_feed``."""

    def __cinit__(self, *args, **kwargs):
        memset(&self._rx, 0, sizeof(self._rx))
        memset(&self._batch, 0, sizeof(self._batch))
        self._registered = False
        self._fd = -1
        self._buffer = None
        self._view = None
        self._data = NULL

    def __dealloc__(self):
        # Never registered here: a registered reader holds a reference to itself.
        mlpe_rxconn_free(&self._rx)
        mlpe_rxbatch_free(&self._batch)

    def attach_socket(self, sock, ArrivalClock clock not None, ReceiveThread receiver=None,
                      SegmentMap capture=None):
        """Reads will come from ``sock`` (see the twin); returns whether the
        kernel agreed to stamp its data (K1)."""
        cdef bytes packed
        self._fd = sock.fileno()
        self._clock = clock
        self._kernel = mlpe_rxstamp_enable(self._fd) == 0
        if capture is not None and self._kernel:
            try:
                local, peer = sock.getsockname(), sock.getpeername()
            except OSError:  # reset already: the first read says so
                pass
            else:
                family, packed = address_key(peer[0])
                self._family = family
                memset(self._remote, 0, 16)
                memcpy(self._remote, <const char *>packed, len(packed))
                self._local_port = local[1]
                self._remote_port = peer[1]
                self._stream_offset = 0
                self._capture = capture
        if receiver is not None and receiver._t != NULL:
            mlpe_rxconn_init(&self._rx, self._fd, <void *>self)
            if mlpe_rxthread_add(receiver._t, &self._rx) == 0:
                self._receiver = receiver
                self._registered = True
                Py_INCREF(self)
        return self._kernel

    @property
    def threaded(self):
        """Whether the receive thread reads this socket."""
        return self._registered

    def detach_socket(self):
        """Stops the receive thread reading the socket (before it is closed)."""
        if self._capture is not None:
            self._capture.forget(self._local_port)
            self._capture = None
        if not self._registered:
            return
        self._registered = False
        if self._receiver._t != NULL:
            mlpe_rxthread_remove(self._receiver._t, &self._rx)
        Py_DECREF(self)

    cdef _received(self):
        if self._registered and self.on_received is not None:
            self.on_received()

    cdef _share_read_space(self):
        """Takes this thread's read space (see the twin's ``_read_space``)."""
        space = getattr(_read_spaces, "space", None)
        if space is None:
            space = _read_spaces.space = bytearray(READ_SIZE)
        self._buffer = space
        self._view = memoryview(space)
        # The bytearray is never resized, so its storage stays put.
        self._data = <const uint8_t *>PyByteArray_AS_STRING(self._buffer)

    @property
    def buffer_bytes(self):
        """Bytes of read storage this connection holds of its own (see the twin)."""
        cdef size_t held = mlpe_rxbatch_bytes(&self._batch)
        if self._registered and self._receiver._t != NULL:
            held += mlpe_rxthread_held(self._receiver._t, &self._rx)
        else:
            held += mlpe_rxbatch_bytes(&self._rx.pending)
        return held

    def read_socket(self):
        """One read from the attached socket, or what the receive thread read
        (see the twin): the byte count, 0 at the end of the stream, or a
        negative errno."""
        if self._receiver is not None:
            return self._take_received()
        if self._data == NULL:
            self._share_read_space()
        cdef int64_t t_realtime = 0
        cdef int64_t n = mlpe_rxstamp_recv(self._fd, <uint8_t *>self._data, READ_SIZE, &t_realtime)
        cdef int64_t t_read = mlpe_monotonic_ns()
        if n <= 0:
            return n
        self._feed_read(self._data, <size_t>n, t_realtime, t_read)
        return n

    cdef _feed_read(self, const uint8_t *data, size_t n, int64_t t_realtime, int64_t t_read):
        cdef int64_t t_ns
        if self._capture is not None:
            self._feed_segments(data, n, t_realtime, t_read)
            return
        if t_realtime != 0 and self._kernel:
            t_ns = self._clock._arrival(t_realtime, t_read, self._stamp_floor())
            self._feed(data, n, t_ns, t_read, True)
        else:
            self._feed(data, n, t_read, t_read, False)

    cdef _feed_segments(self, const uint8_t *data, size_t n, int64_t t_realtime, int64_t t_read):
        """One read, piece by piece (see the twin)."""
        cdef SegmentMap capture = self._capture
        capture.drain_c()  # P3: the read's segments are in the ring by now
        cdef mlpe_pktconn *c = capture.conn(
            self._local_port, self._family, self._remote, self._remote_port)
        cdef int64_t start = self._stream_offset
        cdef int64_t end = start + <int64_t>n
        cdef int64_t length, t_segment = 0, t_ns
        cdef int why = 0
        cdef size_t pos = 0
        self._stream_offset = end
        while start < end:
            length = capture.next_run(c, start, end, &t_segment, &why)
            if why == 0:
                t_ns = self._clock._arrival(t_segment, t_read, self._stamp_floor())
            elif t_realtime != 0:
                t_ns = self._clock._arrival(t_realtime, t_read, self._stamp_floor())
            else:
                t_ns = t_read
            self.last_read_segment = why + 1
            self._feed(data + pos, <size_t>length, t_ns, t_read, why == 0 or t_realtime != 0)
            pos += <size_t>length
            start += length
            if self._capture is None:  # closed by what the piece completed
                return
        # The map may have dropped this connection meanwhile (a hook that
        # closed another connection cannot free this one's entry: looked up again).
        capture.consume(capture.conn(
            self._local_port, self._family, self._remote, self._remote_port), end)

    cdef object _take_received(self):
        if not self._registered or self._receiver._t == NULL:
            return -_EAGAIN  # nothing will come
        mlpe_rxthread_take(self._receiver._t, &self._rx, &self._batch)
        cdef size_t offset = 0
        cdef size_t i
        cdef mlpe_rxchunk *chunk
        for i in range(self._batch.n_chunks):
            chunk = &self._batch.chunks[i]
            self._feed_read(self._batch.data + offset, chunk.len, chunk.t_realtime, chunk.t_read)
            offset += chunk.len
            if not self._registered:  # closed by what the read completed
                return offset
        mlpe_rxbatch_shrink(&self._batch)  # T7: a burst's storage is not kept
        if self._batch.eof:
            return 0
        if self._batch.error:
            return -self._batch.error
        return offset if offset else -_EAGAIN

    cdef int64_t _stamp_floor(self):
        return self._floor

    cdef _feed(self, const uint8_t *data, size_t n, int64_t t_ns, int64_t t_read, bint kernel):
        raise NotImplementedError
