# cython: language_level=3
"""HTTP/1.1 response framing, compiled: Cython glue over ``csrc/mlpe_h1.c``
(whose code ``_response_c`` carries and exports, see ``_response_c.pxd``).

Behaviour, events, errors and error positions are those of the pure-Python
twin, :mod:`mlpe_fast.wire._h1_py`, which is the readable specification; the
framing rules are numbered in ``csrc/mlpe_h1.h``.  This module only moves
bytes in and builds the event records: one call into C per result, one list
per ``feed`` call, and the body spans of one message that arrive in one call
copied once into a single :class:`BodyData`.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

from ._ch1 cimport (
    MLPE_H1_BODY,
    MLPE_H1_DONE,
    MLPE_H1_HEAD,
    MLPE_H1_MAX_LIMIT,
    MLPE_H1_NEED_MORE,
    MLPE_OK,
    mlpe_h1_field,
    mlpe_h1_limits,
    mlpe_h1_parser,
    mlpe_h1_result,
    mlpe_span,
)
# The functions of csrc/mlpe_h1.c, linked into _response_c only (setup.py).
from mlpe_fast.wire._response_c cimport h1_feed, h1_feed_eof, h1_free, h1_init

from ..errors import LocalProtocolError, error_from_code
from .events import BodyData, ResponseComplete, ResponseHead

__all__ = ("H1Decoder",)

# Hot-path classes bound once, as C globals.
cdef object _ResponseHead = ResponseHead
cdef object _BodyData = BodyData
cdef object _ResponseComplete = ResponseComplete
cdef object _error_from_code = error_from_code
cdef object _LocalProtocolError = LocalProtocolError

# http_version as received: b"1.0" ... b"1.9", indexed by the minor digit.
cdef tuple _VERSIONS = tuple([b"1.%d" % minor for minor in range(10)])


cdef size_t _limit(str name, object value) except 0:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MLPE_H1_MAX_LIMIT:
        raise ValueError(f"{name} must be an int from 1 to {MLPE_H1_MAX_LIMIT}, got {value!r}")
    return <size_t>value


cdef tuple _field_tuple(const uint8_t *store, const mlpe_h1_field *fields, size_t n):
    """Field lines as ((name, value), ...), from offsets into ``store``."""
    cdef size_t i
    cdef const mlpe_h1_field *f
    if n == 0:
        return ()
    out = []
    for i in range(n):
        f = &fields[i]
        out.append((
            PyBytes_FromStringAndSize(<const char *>store + f.name_off, f.name_len),
            PyBytes_FromStringAndSize(<const char *>store + f.value_off, f.value_len),
        ))
    return tuple(out)


cdef class H1Decoder:
    """Incremental HTTP/1.1 response framing for one client connection.

    See :class:`mlpe_fast.wire._h1_py.H1Decoder` for the full description.
    """

    cdef mlpe_h1_parser _p
    cdef bint _ready          # _p was initialised (and must be freed)
    cdef bint _closed         # feed_eof() was called
    cdef bint _keep_alive     # of the last complete message
    cdef unsigned long long _offset_before_error
    # body spans of the current run, pointing into the buffer being fed
    cdef mlpe_span *_spans
    cdef size_t _n_spans
    cdef size_t _cap_spans

    def __cinit__(self, max_line=8192, max_head=65536, max_headers=128,
                  max_chunk_size_digits=16):
        cdef mlpe_h1_limits limits
        limits.max_line = _limit("max_line", max_line)
        limits.max_head = _limit("max_head", max_head)
        limits.max_headers = _limit("max_headers", max_headers)
        limits.max_chunk_size_digits = _limit("max_chunk_size_digits", max_chunk_size_digits)
        if h1_init(&self._p, &limits) != MLPE_OK:
            raise MemoryError()
        self._ready = True

    def __dealloc__(self):
        if self._ready:
            h1_free(&self._p)
        free(self._spans)

    @property
    def keep_alive(self):
        """Whether the last complete response leaves the connection reusable
        (False before the first one)."""
        return self._keep_alive

    @property
    def offset(self):
        """Bytes consumed so far; after a ProtocolError, the value it had
        when the failing call began."""
        if self._p.error:
            return self._offset_before_error
        return self._p.offset

    def feed(self, data, t_ns):
        """Decodes ``data`` (any buffer); returns the events it completed.

        See :meth:`mlpe_fast.wire._h1_py.H1Decoder.feed`.
        """
        cdef Py_buffer view
        cdef const uint8_t *ptr
        cdef size_t length
        cdef size_t off = 0
        cdef size_t used
        cdef mlpe_span span
        cdef mlpe_h1_result r
        cdef list out = []
        if self._closed:
            raise _LocalProtocolError("feed() called after feed_eof()")
        if self._p.error:
            raise self._error()
        self._offset_before_error = self._p.offset
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            ptr = <const uint8_t *>view.buf
            length = <size_t>view.len
            self._n_spans = 0
            while True:
                r = h1_feed(&self._p, ptr + off, length - off, &used, &span)
                off += used
                if r == MLPE_H1_BODY:
                    self._push_span(span)
                    continue
                if self._n_spans:
                    out.append(_BodyData(self._take_body(), t_ns))
                if r == MLPE_H1_NEED_MORE:
                    return out
                if r == MLPE_H1_HEAD:
                    out.append(self._head(t_ns))
                elif r == MLPE_H1_DONE:
                    self._keep_alive = self._p.keep_alive
                    out.append(self._complete(t_ns))
                else:
                    raise self._error()
        finally:
            self._n_spans = 0
            PyBuffer_Release(&view)

    def feed_eof(self, t_ns):
        """Tells that the peer closed the connection.

        See :meth:`mlpe_fast.wire._h1_py.H1Decoder.feed_eof`.
        """
        if self._closed:
            raise _LocalProtocolError("feed_eof() called twice")
        self._closed = True
        if not self._p.error:
            self._offset_before_error = self._p.offset
        r = h1_feed_eof(&self._p)
        if r == MLPE_H1_NEED_MORE:
            return []
        if r == MLPE_H1_DONE:
            self._keep_alive = self._p.keep_alive
            return [self._complete(t_ns)]
        raise self._error()

    cdef object _error(self):
        return _error_from_code(self._p.error, self._p.error_pos)

    cdef int _push_span(self, mlpe_span span) except -1:
        cdef size_t cap
        cdef mlpe_span *grown
        if self._n_spans == self._cap_spans:
            cap = self._cap_spans * 2 if self._cap_spans else 64
            grown = <mlpe_span *>realloc(self._spans, cap * sizeof(mlpe_span))
            if grown == NULL:
                raise MemoryError()
            self._spans = grown
            self._cap_spans = cap
        self._spans[self._n_spans] = span
        self._n_spans += 1
        return 0

    cdef bytes _take_body(self):
        """Copies the spans of the current run into one bytes object."""
        cdef size_t i
        cdef size_t total = 0
        cdef char *dst
        cdef bytes out
        if self._n_spans == 1:
            out = PyBytes_FromStringAndSize(<const char *>self._spans[0].ptr, self._spans[0].len)
        else:
            for i in range(self._n_spans):
                total += self._spans[i].len
            out = PyBytes_FromStringAndSize(NULL, total)
            dst = PyBytes_AS_STRING(out)
            for i in range(self._n_spans):
                memcpy(dst, self._spans[i].ptr, self._spans[i].len)
                dst += self._spans[i].len
        self._n_spans = 0
        return out

    cdef object _head(self, object t_ns):
        cdef mlpe_h1_parser *p = &self._p
        return _ResponseHead(
            p.status,
            PyBytes_FromStringAndSize(<const char *>p.reason.ptr, p.reason.len),
            _field_tuple(p.fields.ptr, p.headers, p.n_headers),
            _VERSIONS[p.version_minor_raw],
            bool(p.keep_alive),
            t_ns,
        )

    cdef object _complete(self, object t_ns):
        cdef mlpe_h1_parser *p = &self._p
        return _ResponseComplete(
            _field_tuple(p.fields.ptr, p.trailers, p.n_trailers),
            bool(p.keep_alive),
            t_ns,
        )
