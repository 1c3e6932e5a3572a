# cython: language_level=3, freethreading_compatible=False
"""Binding of the whole-response decoder (``csrc/mlpe_response.h``).

One call into C per network read; Python objects are made only for the
milestones a read completes (at most three per response) and for the
summary, once per response.  Behaviour is specified by the twin,
``_response_py.py``; both are tested against each other.

This extension also carries the C units of the three layers, for their
standalone bindings (``_h1_c``, ``_sse_c``, ``_oai_c``): see
``_response_c.pxd``.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memset

from ._cresponse cimport *

from ..errors import ErrorCode, LocalProtocolError, ProtocolError, error_from_code
from ._oai_py import check_dialect, decode_usage
from ._summary import http_error_message, tool_calls_after_first
from .events import (
    ChunkError,
    FirstToken,
    ResponseComplete,
    ResponseHead,
    ResponseSummary,
    TokenGaps,
    ToolCall,
)

__all__ = ("ResponseDecoder",)

cdef object _ResponseHead = ResponseHead
cdef object _FirstToken = FirstToken
cdef object _ResponseComplete = ResponseComplete
cdef object _ResponseSummary = ResponseSummary
cdef object _ToolCall = ToolCall
cdef object _ChunkError = ChunkError
cdef object _TokenGaps = TokenGaps
cdef int _HTTP_STATUS = ErrorCode.HTTP_STATUS


cdef inline bytes _bytes(const uint8_t *ptr, size_t n):
    return PyBytes_FromStringAndSize(<const char *>ptr, n) if n else b""


cdef inline str _text(const uint8_t *ptr, size_t n):
    # The chunk decoder validated every byte as UTF-8 (rule J1).
    return PyUnicode_DecodeUTF8(<const char *>ptr, n, "strict") if n else ""


cdef inline str _buf_text(mlpe_buf *b, size_t start=0):
    return _text(b.ptr + start, b.len - start)


cdef tuple _fields(mlpe_h1_parser *p, mlpe_h1_field *fields, size_t n):
    cdef size_t i
    cdef const uint8_t *base = p.fields.ptr
    return tuple([
        (_bytes(base + fields[i].name_off, fields[i].name_len),
         _bytes(base + fields[i].value_off, fields[i].value_len))
        for i in range(n)
    ])


cdef inline void _put_u32(char *at, uint32_t v) noexcept:
    # little-endian whatever the host (TokenGaps.buckets)
    at[0] = <char>(v & 0xFF)
    at[1] = <char>((v >> 8) & 0xFF)
    at[2] = <char>((v >> 16) & 0xFF)
    at[3] = <char>((v >> 24) & 0xFF)


cdef object _gaps(mlpe_gaps *g):
    """R12: TokenGaps of a response, None without a gap."""
    cdef uint32_t i
    cdef Py_ssize_t n = 0
    cdef bytes packed
    cdef char *out
    if g.count == 0:
        return None
    for i in range(g.lo, g.hi + 1):  # empty when hi < lo (no histogram)
        n += g.buckets[i] != 0
    packed = PyBytes_FromStringAndSize(NULL, n * 8)
    out = PyBytes_AS_STRING(packed)
    for i in range(g.lo, g.hi + 1):
        if g.buckets[i]:
            _put_u32(out, i)
            _put_u32(out + 4, g.buckets[i])
            out += 8
    return _TokenGaps(g.count, g.zero, g.sum_ns, g.min_ns, g.max_ns, packed)


cdef class ResponseDecoder:
    """Decodes one HTTP/1.1 (or, in body mode, HTTP/2) response carrying an
    OpenAI completion (or, with ``dialect="sglang"``, an SGLang one).

    See :class:`mlpe_fast.wire._response_py.ResponseDecoder` for the
    arguments and the behaviour; this class is its compiled equal.
    """

    def __cinit__(
        self,
        *,
        size_t max_line=8192,
        size_t max_head=65536,
        size_t max_headers=128,
        size_t max_chunk_size_digits=16,
        size_t max_event=MLPE_SSE_DEFAULT_MAX_EVENT,
        size_t max_body=MLPE_RESPONSE_DEFAULT_MAX_BODY,
        bint record_chunk_times=False,
        bint gap_histogram=True,
        dialect="openai",
    ):
        cdef mlpe_response_limits limits
        memset(&limits, 0, sizeof(limits))
        limits.h1.max_line = max_line
        limits.h1.max_head = max_head
        limits.h1.max_headers = max_headers
        limits.h1.max_chunk_size_digits = max_chunk_size_digits
        limits.max_event = max_event
        limits.max_body = max_body
        limits.record_chunk_times = record_chunk_times
        limits.no_gap_histogram = not gap_histogram
        limits.dialect = MLPE_DIALECT_SGLANG if check_dialect(dialect) else MLPE_DIALECT_OPENAI
        if mlpe_response_init(&self._r, &limits) != MLPE_OK:
            mlpe_response_free(&self._r)
            raise MemoryError("mlpe-fast: out of memory in the native core")
        self._ready = True

    def __dealloc__(self):
        if self._ready:
            mlpe_response_free(&self._r)

    def feed(self, data, int64_t t_ns):
        """Feeds one piece that arrived at ``t_ns``; returns the milestones it
        completed."""
        cdef Py_buffer view
        cdef unsigned flags
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            flags = self.feed_c(<const uint8_t *>view.buf, <size_t>view.len, t_ns)
        finally:
            PyBuffer_Release(&view)
        return self._milestones(flags, t_ns)

    def feed_eof(self, int64_t t_ns):
        """The peer closed the connection at ``t_ns``."""
        return self._milestones(self.feed_eof_c(t_ns), t_ns)

    def set_head(self, status, headers, int64_t t_ns):
        """R9: the final head of a response framed elsewhere (HTTP/2) arrived
        at ``t_ns``; see the twin."""
        cdef bytes content_type = None
        cdef bytes content_encoding = None
        cdef const uint8_t *type_ptr = NULL
        cdef const uint8_t *encoding_ptr = NULL
        cdef size_t type_len = 0, encoding_len = 0
        if self._error is not None:
            raise self._error
        if self._r.input_mode == MLPE_INPUT_BODY:
            raise LocalProtocolError("set_head() called twice")
        if self._r.input_mode == MLPE_INPUT_WIRE:
            raise LocalProtocolError("set_head() after feed()")
        if not 200 <= status <= 599:
            raise LocalProtocolError(f"set_head() with status {status}, not a final 200-599")
        for name, value in headers:
            if name == b"content-type" and content_type is None:
                content_type = bytes(value)
            elif name == b"content-encoding" and content_encoding is None:
                content_encoding = bytes(value)
        # An absent field is NULL; a present empty value is a non-NULL pointer.
        if content_type is not None:
            type_ptr = <const uint8_t *>PyBytes_AS_STRING(content_type)
            type_len = len(content_type)
        if content_encoding is not None:
            encoding_ptr = <const uint8_t *>PyBytes_AS_STRING(content_encoding)
            encoding_len = len(content_encoding)
        self._checked(mlpe_response_set_head(
            &self._r, status, type_ptr, type_len, encoding_ptr, encoding_len, t_ns
        ))
        return [_ResponseHead(status, b"", tuple(headers), b"2", False, t_ns)]

    def feed_body(self, data, int64_t t_ns):
        """R9: de-framed body bytes that arrived at ``t_ns``; see the twin."""
        cdef Py_buffer view
        cdef unsigned flags
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            flags = self.feed_body_c(<const uint8_t *>view.buf, <size_t>view.len, t_ns)
        finally:
            PyBuffer_Release(&view)
        return self._milestones(flags, t_ns)

    def end_body(self, int64_t t_ns):
        """R9: the message ended at ``t_ns``; see the twin."""
        return self._milestones(self.end_body_c(t_ns), t_ns)

    # -- the C entries (declared in _response_c.pxd) ---------------------------
    # The one place where input reaches mlpe_response: the Python methods
    # above and the read paths of other extensions both come here, so the
    # rules below hold whoever feeds the decoder.

    cdef int feed_c(self, const uint8_t *data, size_t n, int64_t t_ns) except -1:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LocalProtocolError("feed() after feed_eof()")
        if self._r.input_mode == MLPE_INPUT_BODY:
            raise LocalProtocolError("feed() in body mode (after set_head())")
        return self._checked(mlpe_response_feed(&self._r, data, n, t_ns))

    cdef int feed_eof_c(self, int64_t t_ns) except -1:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LocalProtocolError("feed_eof() called twice")
        if self._r.input_mode == MLPE_INPUT_BODY:
            raise LocalProtocolError("feed_eof() in body mode (after set_head())")
        self._closed = True
        return self._checked(mlpe_response_feed_eof(&self._r, t_ns))

    cdef int feed_body_c(self, const uint8_t *data, size_t n, int64_t t_ns) except -1:
        if self._error is not None:
            raise self._error
        if self._r.input_mode != MLPE_INPUT_BODY:
            raise LocalProtocolError("feed_body() without set_head()")
        if self._r.complete:
            raise LocalProtocolError("feed_body() after end_body()")
        return self._checked(mlpe_response_feed_body(&self._r, data, n, t_ns))

    cdef int end_body_c(self, int64_t t_ns) except -1:
        if self._error is not None:
            raise self._error
        if self._r.input_mode != MLPE_INPUT_BODY:
            raise LocalProtocolError("end_body() without set_head()")
        if self._r.complete:
            raise LocalProtocolError("end_body() called twice")
        # In body mode h1 holds no trailers and keep_alive is 0, so the
        # completion reads ResponseComplete((), False, t_ns).
        return self._checked(mlpe_response_end_body(&self._r, t_ns))

    cdef int _checked(self, unsigned flags) except -1:
        """The flags of a call into C; a terminal error is kept (R8) and
        raised, now and by every later call."""
        if flags & MLPE_RESPONSE_ERROR:
            self._error = error_from_code(self._r.error, self._r.error_pos)
            raise self._error
        return <int>flags

    cdef list _milestones(self, unsigned flags, int64_t t_ns):
        """The milestone objects of flags that _checked() let through."""
        cdef list out = []
        if flags & MLPE_RESPONSE_HEAD:
            out.append(self._head(t_ns))
        if flags & MLPE_RESPONSE_FIRST:
            out.append(_FirstToken(t_ns))
        if flags & MLPE_RESPONSE_DONE:
            out.append(_ResponseComplete(
                _fields(&self._r.h1, self._r.h1.trailers, self._r.h1.n_trailers),
                bool(self._r.keep_alive),
                t_ns,
            ))
        return out

    cdef object _head(self, int64_t t_ns):
        cdef mlpe_h1_parser *p = &self._r.h1
        return _ResponseHead(
            p.status,
            _bytes(p.reason.ptr, p.reason.len),
            _fields(p, p.headers, p.n_headers),
            b"1.%d" % p.version_minor_raw,
            bool(p.keep_alive),
            t_ns,
        )

    def summary(self):
        """What the response told so far (see ``ResponseSummary``)."""
        cdef mlpe_response *r = &self._r
        cdef mlpe_tool_call *t
        cdef size_t i
        cdef bint first = r.t_first >= 0
        calls = []
        for i in range(r.n_tools):
            t = &r.tools[i]
            name = _buf_text(&t.name)
            arguments = _buf_text(&t.arguments)
            calls.append((
                _ToolCall(t.index, _buf_text(&t.id), _buf_text(&t.type), name, arguments),
                len(_text(t.name.ptr, t.name_first_len)),
                len(_text(t.arguments.ptr, t.arguments_first_len)),
            ))
        if r.error:
            error_code = r.error
            error_message = str(error_from_code(r.error, r.error_pos))
        elif r.complete and r.body_kind == MLPE_BODY_ERROR:
            error_code = _HTTP_STATUS
            error_message = http_error_message(r.status, _bytes(r.body.ptr, r.body.len))
        else:
            error_code, error_message = 0, ""
        first_chunk_error = None
        if r.chunk_errors:
            first_chunk_error = _ChunkError(
                r.first_chunk_error,
                _buf_text(&r.first_chunk_error_detail),
                _bytes(r.first_chunk_error_data.ptr, r.first_chunk_error_data.len),
                r.first_chunk_error_t_ns,
            )
        # Positional, in field order: this runs once per response.
        return _ResponseSummary(
            r.status,  # status
            r.t_head if r.t_head >= 0 else None,  # t_head
            r.t_first if first else None,  # t_first
            r.t_done if r.t_done >= 0 else None,  # t_done
            _buf_text(&r.content),  # content
            _buf_text(&r.reasoning),  # reasoning
            tuple([call for call, _, _ in calls]),  # tool_calls
            _buf_text(&r.content, r.content_first_len) if first else "",  # content_after_first
            _buf_text(&r.reasoning, r.reasoning_first_len) if first else "",  # reasoning_after_first
            tool_calls_after_first(calls) if first and calls else (),  # tool_calls_after_first
            _buf_text(&r.finish_reason) if r.has_finish_reason else None,  # finish_reason
            decode_usage(_bytes(r.usage.ptr, r.usage.len)) if r.has_usage else None,  # usage
            r.events,  # events
            r.content_events,  # content_events
            r.events_after_done,  # events_after_done
            bool(r.done_seen),  # done
            bool(r.complete),  # complete
            bool(r.keep_alive),  # keep_alive
            r.chunk_errors,  # chunk_errors
            first_chunk_error,  # first_chunk_error
            r.unexpected_bytes,  # unexpected_bytes
            error_code,  # error_code
            error_message,  # error_message
            tuple([r.chunk_times[i] for i in range(r.n_chunk_times)])  # chunk_times
            if r.record_chunk_times else None,
            r.t_first_content if r.t_first_content >= 0 else None,  # t_first_content
            r.t_second if r.t_second >= 0 else None,  # t_second
            _gaps(&r.gaps),  # gaps
        )


# -- the layers' functions, for their standalone bindings ---------------------
# Exported through _response_c.pxd (why: see there and setup.py).

cdef int h1_init(_ch1.mlpe_h1_parser *p, const _ch1.mlpe_h1_limits *limits) noexcept nogil:
    return _ch1.mlpe_h1_init(p, limits)


cdef void h1_free(_ch1.mlpe_h1_parser *p) noexcept nogil:
    _ch1.mlpe_h1_free(p)


cdef _ch1.mlpe_h1_result h1_feed(
    _ch1.mlpe_h1_parser *p, const uint8_t *data, size_t len, size_t *consumed, _ch1.mlpe_span *body
) noexcept nogil:
    return _ch1.mlpe_h1_feed(p, data, len, consumed, body)


cdef _ch1.mlpe_h1_result h1_feed_eof(_ch1.mlpe_h1_parser *p) noexcept nogil:
    return _ch1.mlpe_h1_feed_eof(p)


cdef int sse_init(_csse.mlpe_sse_decoder *d, size_t max_event) noexcept nogil:
    return _csse.mlpe_sse_init(d, max_event)


cdef void sse_free(_csse.mlpe_sse_decoder *d) noexcept nogil:
    _csse.mlpe_sse_free(d)


cdef _csse.mlpe_sse_result sse_feed(
    _csse.mlpe_sse_decoder *d,
    const uint8_t *data,
    size_t len,
    size_t *consumed,
    _csse.mlpe_sse_event *ev,
) noexcept nogil:
    return _csse.mlpe_sse_feed(d, data, len, consumed, ev)


cdef int sse_pending(const _csse.mlpe_sse_decoder *d) noexcept nogil:
    return _csse.mlpe_sse_pending(d)


cdef _csse.mlpe_span sse_last_event_id(const _csse.mlpe_sse_decoder *d) noexcept nogil:
    return _csse.mlpe_sse_last_event_id(d)


cdef int oai_init(_coai.mlpe_oai_decoder *d) noexcept nogil:
    return _coai.mlpe_oai_init(d)


cdef void oai_free(_coai.mlpe_oai_decoder *d) noexcept nogil:
    _coai.mlpe_oai_free(d)


cdef int oai_set_dialect(_coai.mlpe_oai_decoder *d, int dialect) noexcept nogil:
    return _coai.mlpe_oai_set_dialect(d, dialect)


cdef int oai_decode(
    _coai.mlpe_oai_decoder *d, const uint8_t *json, size_t len, _coai.mlpe_oai_chunk *out
) noexcept nogil:
    return _coai.mlpe_oai_decode(d, json, len, out)
