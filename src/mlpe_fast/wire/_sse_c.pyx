# cython: language_level=3
"""Incremental Server-Sent Events decoder over the C core (``csrc/mlpe_sse.c``,
whose code ``_response_c`` carries and exports, see ``_response_c.pxd``).

Same API, events, timestamps and errors as the pure-Python twin
:mod:`mlpe_fast.wire._sse_py`, which is the readable specification; the rules
are numbered in ``csrc/mlpe_sse.h``.  This module is glue only: it lends the
caller's buffer to the C decoder and turns each event it reports into an
:class:`~mlpe_fast.wire.events.SSEEvent`, one list per ``feed`` call.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t
from libc.string cimport memcmp

from mlpe_fast.wire cimport _csse as c
# The functions of csrc/mlpe_sse.c, linked into _response_c only (setup.py).
from mlpe_fast.wire._response_c cimport (
    sse_feed,
    sse_free,
    sse_init,
    sse_last_event_id,
    sse_pending,
)

import operator
import sys

from mlpe_fast.errors import LocalProtocolError, error_from_code
from mlpe_fast.wire.events import SSEEvent

__all__ = ("SSEDecoder",)

# Hot-path objects bound once (module attribute look-ups cost a dict probe).
cdef object _SSEEvent = SSEEvent
cdef object _error_from_code = error_from_code


cdef inline str _decode(const c.mlpe_span *span):
    """UTF-8 with U+FFFD replacement, as the standard decodes the stream."""
    return PyUnicode_DecodeUTF8(<const char *>span.ptr, <Py_ssize_t>span.len, "replace")


cdef inline bint _same_bytes(bytes raw, const c.mlpe_span *span):
    return (PyBytes_GET_SIZE(raw) == <Py_ssize_t>span.len
            and memcmp(PyBytes_AS_STRING(raw), span.ptr, span.len) == 0)


cdef class SSEDecoder:
    """Turns the bytes of an event stream into :class:`SSEEvent` records.

    Args:
        max_event: the most bytes one pending event may hold: its data buffer
            (each data value plus one LF) plus the raw bytes of the line being
            read, line end excluded.  Default 1 MiB.

    Raises:
        ValueError: ``max_event`` is below 1 or above ``sys.maxsize``.
    """

    cdef c.mlpe_sse_decoder _decoder
    cdef bint _closed
    # The event type and the id repeat from event to event (most streams send
    # neither), so the last decoded text of each is kept with its raw bytes.
    cdef bytes _type_raw
    cdef str _type_text
    cdef bytes _id_raw
    cdef str _id_text

    def __cinit__(self):
        # Valid even if __init__ is skipped; mlpe_sse_init allocates nothing.
        sse_init(&self._decoder, 0)
        self._type_raw = b""
        self._type_text = "message"
        self._id_raw = b""
        self._id_text = ""

    def __init__(self, max_event=1 << 20):
        max_event = operator.index(max_event)
        if not 1 <= max_event <= sys.maxsize:
            raise ValueError(f"max_event must be between 1 and {sys.maxsize}, not {max_event}")
        sse_free(&self._decoder)
        sse_init(&self._decoder, <size_t>max_event)
        self._closed = False

    def __dealloc__(self):
        sse_free(&self._decoder)

    @property
    def retry(self):
        """Reconnection time in milliseconds from the last valid ``retry:``
        field, or ``None`` when there was none."""
        return None if self._decoder.retry < 0 else self._decoder.retry

    @property
    def last_event_id(self):
        """The last event ID string: the value of the last ``id:`` field that a
        blank line has followed (what a reconnecting client would send as
        ``Last-Event-ID``), ``""`` when none."""
        cdef c.mlpe_span span = sse_last_event_id(&self._decoder)
        return _decode(&span)

    @property
    def pending(self):
        """True when the stream so far ends inside an event: a partial line
        (or a partial BOM) is held, or a ``data``, ``event`` or ``id`` field
        (an id without NUL) came after the last blank line.  Comments,
        ``retry`` and unknown fields alone leave nothing pending."""
        return sse_pending(&self._decoder) != 0

    def feed(self, data, t_ns):
        """Decodes one piece of the stream.

        Args:
            data: the bytes received, in any buffer (``bytes``, ``bytearray``,
                ``memoryview``...); it may end anywhere, mid-line included,
                and may be empty.
            t_ns: the arrival time of ``data``; every event this piece
                completes carries it.

        Returns:
            The events this piece completed, in stream order.

        Raises:
            EventTooLarge: an event grew past ``max_event``.  The decoder stays
                in its error state and every later call raises an equal error.
                Events completed earlier in the same piece are lost with the
                raise.
            LocalProtocolError: the decoder was closed by :meth:`feed_eof`.
        """
        cdef list events = []
        self._decode_into(data, events, t_ns, False)
        return events

    def feed_raw(self, data, list out not None):
        """Decodes one piece of the stream, for callers that parse event data
        themselves: appends the data of each event the piece completes to
        ``out``, as bytes, without UTF-8 decoding (a JSON decoder must see
        invalid UTF-8 as such).  Event types and ids are not reported.

        Raises:
            EventTooLarge: as :meth:`feed`, except that the events completed
                earlier in the same piece are already in ``out``.
            LocalProtocolError: the decoder was closed by :meth:`feed_eof`.
        """
        self._decode_into(data, out, None, True)

    def feed_eof(self, t_ns):
        """Ends the stream.

        An incomplete event is discarded, as the standard says (rule 7), so
        this always returns ``[]``; check :attr:`pending` to learn whether
        the stream was cut mid-event.  The decoder is closed afterwards.

        Raises:
            EventTooLarge: the decoder is in its error state.
            LocalProtocolError: the decoder was already closed.
        """
        self._check_usable()
        self._closed = True
        return []

    cdef int _decode_into(self, object data, list out, object t_ns, bint raw) except -1:
        """Feeds ``data`` to the C decoder and appends each event it reports to
        ``out``: an SSEEvent stamped ``t_ns``, or its data as bytes when ``raw``."""
        cdef Py_buffer view
        cdef const uint8_t *next_byte
        cdef size_t left, used = 0
        cdef c.mlpe_sse_event event
        cdef c.mlpe_sse_result result

        self._check_usable()
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            next_byte = <const uint8_t *>view.buf
            left = <size_t>view.len
            while left != 0:
                result = sse_feed(&self._decoder, next_byte, left, &used, &event)
                if result == c.MLPE_SSE_ERROR:
                    raise self._error()
                next_byte += used
                left -= used
                if result == c.MLPE_SSE_EVENT:
                    # The spans may point into the view: use them before the
                    # next call and before the buffer is released.
                    if raw:
                        out.append(PyBytes_FromStringAndSize(<const char *>event.data.ptr,
                                                             <Py_ssize_t>event.data.len))
                    else:
                        out.append(self._make_event(&event, t_ns))
        finally:
            PyBuffer_Release(&view)
        return 0

    cdef object _make_event(self, const c.mlpe_sse_event *event, object t_ns):
        if not _same_bytes(self._type_raw, &event.type):
            self._type_raw = PyBytes_FromStringAndSize(<const char *>event.type.ptr,
                                                       <Py_ssize_t>event.type.len)
            self._type_text = _decode(&event.type) if event.type.len != 0 else "message"
        if not _same_bytes(self._id_raw, &event.id):
            self._id_raw = PyBytes_FromStringAndSize(<const char *>event.id.ptr,
                                                     <Py_ssize_t>event.id.len)
            self._id_text = _decode(&event.id)
        return _SSEEvent(_decode(&event.data), self._type_text, self._id_text, t_ns)

    cdef int _check_usable(self) except -1:
        if self._decoder.error != 0:
            raise self._error()
        if self._closed:
            raise LocalProtocolError("SSEDecoder used after feed_eof()")
        return 0

    cdef object _error(self):
        return _error_from_code(self._decoder.error, self._decoder.error_pos)
