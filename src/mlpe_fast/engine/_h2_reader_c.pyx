# cython: language_level=3
"""The engine's HTTP/2 read path, compiled: stamp each read in C and run the
DATA de-framer (``csrc/mlpe_h2.h``) over it in C, which feeds the registered
streams' decoders; Python runs only for what the de-framer hands back
(events, frames for ``h2``, a connection error).

Behaviour is specified by the twin, ``_h2_reader_py.py``.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint64_t

from mlpe_fast.engine._receive_c cimport SocketReader
from mlpe_fast.wire._ch2 cimport mlpe_h2_deframer
from mlpe_fast.wire._h2_c cimport DataDeframer
from mlpe_fast.wire._response_c cimport ResponseDecoder

__all__ = ("H2ReadCore",)


cdef extern from "mlpe_clock.h" nogil:
    int64_t mlpe_monotonic_ns()


cdef class H2ReadCore(SocketReader):
    """Stamps reads and de-frames DATA for the registered streams (see the
    twin for the contract and the hooks)."""

    cdef readonly DataDeframer deframer
    cdef public object transport
    cdef public bint closed
    cdef readonly long long event_later_bytes  # see the twin

    def __init__(self, max_frame_size, connection_window, stream_window):
        self.deframer = DataDeframer(
            max_frame_size=max_frame_size,
            connection_window=connection_window,
            stream_window=stream_window,
        )
        self.transport = None
        self.last_read_ns = 0
        self.closed = False  # set by the owner; a closed connection reads no further
        self.event_later_bytes = 0

    def register(self, stream_id, ResponseDecoder decoder not None):
        """DATA of ``stream_id`` goes to ``decoder`` (body mode, head set)."""
        self.deframer.register(stream_id, decoder)

    def unregister(self, stream_id):
        return self.deframer.unregister(stream_id)

    def get_buffer(self, Py_ssize_t sizehint):
        if self._view is None:
            self._share_read_space()
        return self._view

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef int64_t t_ns = mlpe_monotonic_ns()
        self._feed(self._data, <size_t>nbytes, t_ns, t_ns, False)

    cdef _feed(self, const uint8_t *data, size_t n, int64_t t_ns, int64_t t_read, bint kernel):
        """One read (see the twin)."""
        cdef DataDeframer deframer = self.deframer
        cdef mlpe_h2_deframer *d = &deframer._d
        cdef size_t pos = 0
        cdef size_t i
        cdef list events
        cdef uint64_t read_end = d.offset + n
        if self.closed:
            return
        self.last_read_ns = t_read
        self.last_read_kernel = kernel
        self._floor = t_ns
        while True:
            pos += <size_t>deframer._feed(data + pos, n - pos, t_ns)
            if d.n_events:
                # Taken before any hook runs, as the twin's take_events().
                events = [
                    (d.events[i].stream_id, d.events[i].flags, d.events[i].end)
                    for i in range(d.n_events)
                ]
                d.n_events = 0
                for stream_id, flags, end in events:
                    self.event_later_bytes = <long long>(read_end - <uint64_t>end)
                    self.on_stream_event(stream_id, flags, t_ns)
                    if self.closed:
                        return
            if d.passthrough.len:
                passthrough = PyBytes_FromStringAndSize(
                    <const char *>d.passthrough.ptr, <Py_ssize_t>d.passthrough.len
                )
                d.passthrough.len = 0
                self.on_frames(passthrough, t_ns)
                if self.closed:
                    return
            if d.error:
                self.on_deframe_error(d.error, t_ns)
                return
            if pos >= n:
                break
        if d.window_updates.len:
            updates = PyBytes_FromStringAndSize(
                <const char *>d.window_updates.ptr, <Py_ssize_t>d.window_updates.len
            )
            d.window_updates.len = 0
            if self.transport is not None:
                self.transport.write(updates)

    # Hooks the owner overrides.
    def on_stream_event(self, stream_id, flags, t_ns):
        raise NotImplementedError

    def on_frames(self, data, t_ns):
        raise NotImplementedError

    def on_deframe_error(self, error_code, t_ns):
        raise NotImplementedError
