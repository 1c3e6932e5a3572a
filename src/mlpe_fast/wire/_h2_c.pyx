# cython: language_level=3, freethreading_compatible=False
"""Binding of the HTTP/2 DATA de-framer (``csrc/mlpe_h2.h``).

One call into C per network read: the registered streams' DATA frames are
de-framed and fed to their compiled decoders (through the decoders' C
entries, ``_response_c.pxd``: this extension links only ``csrc/mlpe_h2.c``),
and Python objects are made only for what goes back to Python (events,
pass-through bytes, WINDOW_UPDATE frames).  Behaviour is specified by the twin, ``_h2_py.py``
(rules D1-D6); both are tested against each other.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint32_t

from mlpe_fast.wire._ch2 cimport *
from mlpe_fast.wire._cresponse cimport (
    MLPE_E_NOMEM,
    MLPE_OK,
    MLPE_RESPONSE_DONE,
    MLPE_RESPONSE_ERROR,
    MLPE_RESPONSE_FIRST,
    mlpe_buf,
)
from mlpe_fast.wire._response_c cimport ResponseDecoder

from ..errors import LocalProtocolError, ProtocolError

__all__ = (
    "DONE",
    "ERROR",
    "FIRST",
    "FRAME_HEADER_SIZE",
    "PROTOCOL_ERROR",
    "DataDeframer",
    "window_update",
)

# Milestone flags, as MLPE_RESPONSE_* in csrc/mlpe_response.h.
FIRST = MLPE_RESPONSE_FIRST
DONE = MLPE_RESPONSE_DONE
ERROR = MLPE_RESPONSE_ERROR

PROTOCOL_ERROR = MLPE_H2_PROTOCOL_ERROR  # RFC 9113 section 7

FRAME_HEADER_SIZE = MLPE_H2_FRAME_HEADER_SIZE


def window_update(uint32_t stream_id, uint32_t increment):
    """A WINDOW_UPDATE frame [6.9]."""
    cdef uint8_t frame[MLPE_H2_WINDOW_UPDATE_SIZE]
    mlpe_h2_window_update(frame, stream_id, increment)
    return PyBytes_FromStringAndSize(<const char *>frame, MLPE_H2_WINDOW_UPDATE_SIZE)


# -- the sink: how the C de-framer feeds a stream's decoder --------------------
# Through the decoder's own C entries (_response_c.pxd), so that its rules
# hold here as for any other caller.  A decoder that raises has failed, as in
# the twin's _deliver and _frame_done: its terminal error or its refusal (a
# call out of order) is the ERROR of rule D6.  These run inside mlpe_h2_feed,
# which cannot carry an exception back, so any other one (MemoryError while
# building the error) is reported as unraisable and the call returns 0.

cdef unsigned _feed_body(void *decoder, const uint8_t *data, size_t n, int64_t t_ns) noexcept:
    try:
        return <unsigned>(<ResponseDecoder>decoder).feed_body_c(data, n, t_ns)
    except (ProtocolError, LocalProtocolError):
        return MLPE_RESPONSE_ERROR


cdef unsigned _end_body(void *decoder, int64_t t_ns) noexcept:
    try:
        return <unsigned>(<ResponseDecoder>decoder).end_body_c(t_ns)
    except (ProtocolError, LocalProtocolError):
        return MLPE_RESPONSE_ERROR


cdef mlpe_h2_sink _SINK = mlpe_h2_sink(_feed_body, _end_body)


cdef inline bytes _take(mlpe_buf *b):
    """The buffer's bytes, leaving it empty (its memory is kept)."""
    if b.len == 0:
        return b""
    data = PyBytes_FromStringAndSize(<const char *>b.ptr, <Py_ssize_t>b.len)
    b.len = 0
    return data


cdef class DataDeframer:
    """Splits an HTTP/2 connection's input into decoded DATA and the rest.

    See :class:`mlpe_fast.wire._h2_py.DataDeframer` for the arguments and
    the behaviour; this class is its compiled equal.  Its decoders are the
    compiled :class:`~mlpe_fast.wire._response_c.ResponseDecoder`, each kept
    alive here while its stream is registered.
    """

    def __cinit__(self):
        # Valid even if __init__ is skipped; mlpe_h2_init allocates nothing.
        mlpe_h2_init(&self._d, _SINK, MLPE_H2_MIN_MAX_FRAME_SIZE, 65535, 65535)
        self._decoders = {}

    def __init__(
        self,
        *,
        max_frame_size=16384,
        connection_window=65535,
        stream_window=65535,
    ):
        if not 16384 <= max_frame_size <= (1 << 24) - 1:
            raise ValueError(f"max_frame_size out of range: {max_frame_size}")
        for name, window in (
            ("connection_window", connection_window),
            ("stream_window", stream_window),
        ):
            if not 1 <= window <= (1 << 31) - 1:
                raise ValueError(f"{name} out of range: {window}")
        mlpe_h2_free(&self._d)
        self._decoders = {}
        mlpe_h2_init(&self._d, _SINK, max_frame_size, connection_window, stream_window)

    def __dealloc__(self):
        mlpe_h2_free(&self._d)

    # -- streams --------------------------------------------------------------

    def register(self, stream_id, ResponseDecoder decoder not None):
        """Takes over the DATA frames of ``stream_id`` (its decoder's head is set)."""
        if not 0 < stream_id < (1 << 31):
            raise ValueError(f"stream id out of range: {stream_id}")
        # A borrowed reference: _decoders keeps the decoder alive while C
        # may hand it to the sink.
        cdef int rc = mlpe_h2_register(&self._d, <uint32_t>stream_id, <void *>decoder)
        if rc == MLPE_H2_E_DUPLICATE:
            raise ValueError(f"stream {stream_id} is already registered")
        if rc != MLPE_OK:
            raise MemoryError("mlpe-fast: out of memory in the native core")
        self._decoders[stream_id] = decoder

    def unregister(self, stream_id):
        """Hands the stream's later DATA frames back to ``h2``; returns
        whether it was registered (see the twin)."""
        if not 0 < stream_id < (1 << 31):
            return False
        if not mlpe_h2_unregister(&self._d, <uint32_t>stream_id):
            return False
        # The C side no longer points at the decoder: it may go now.
        del self._decoders[stream_id]
        return True

    @property
    def streams(self):
        """Registered streams."""
        return self._d.n_streams

    # -- input ----------------------------------------------------------------

    def feed(self, data, int64_t t_ns):
        """Consumes input read at ``t_ns``; returns how many bytes were used
        (fewer than given only after a pass-through frame or an error)."""
        cdef Py_buffer view
        cdef Py_ssize_t used
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            used = self._feed(<const uint8_t *>view.buf, <size_t>view.len, t_ns)
        finally:
            PyBuffer_Release(&view)
        if self._d.error == MLPE_H2_INTERNAL_ERROR:
            raise MemoryError("mlpe-fast: out of memory in the native core")
        return used

    cdef Py_ssize_t _feed(self, const uint8_t *data, size_t n, int64_t t_ns) except -1:
        """mlpe_h2_feed, then drops the decoders of the streams END_STREAM
        unregistered (D4): C holds no pointer to them any more."""
        cdef size_t used = mlpe_h2_feed(&self._d, data, n, t_ns)
        cdef size_t i
        if self._d.n_released:
            for i in range(self._d.n_released):
                self._decoders.pop(self._d.released[i], None)
            self._d.n_released = 0
        return <Py_ssize_t>used

    # -- output ---------------------------------------------------------------

    def take_events(self):
        """``(stream_id, flags)`` per decoder call that returned milestones (D6)."""
        cdef size_t i
        events = [(self._d.events[i].stream_id, self._d.events[i].flags)
                  for i in range(self._d.n_events)]
        self._d.n_events = 0
        return events

    def take_events_ending(self):
        """``(stream_id, flags, end)`` per decoder call that returned
        milestones: the events of :meth:`take_events` with the input offset
        just past the frame's bytes (D7)."""
        cdef size_t i
        events = [(self._d.events[i].stream_id, self._d.events[i].flags, self._d.events[i].end)
                  for i in range(self._d.n_events)]
        self._d.n_events = 0
        return events

    def take_passthrough(self):
        """The bytes for ``h2.receive_data`` (D4, D5)."""
        return _take(&self._d.passthrough)

    def take_window_updates(self):
        """WINDOW_UPDATE frames to send (D3)."""
        return _take(&self._d.window_updates)

    @property
    def error(self):
        """0, or the HTTP/2 error code of a connection error [7]."""
        return self._d.error

    @property
    def error_pos(self):
        """Input offset of the byte in error."""
        return self._d.error_pos

    @property
    def offset(self):
        """Input bytes consumed since the de-framer was made."""
        return self._d.offset

    @property
    def max_frame_size(self):
        return self._d.max_frame_size
