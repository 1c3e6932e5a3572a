# The compiled ResponseDecoder and the C units it carries, shared with the
# other extensions.
#
# This extension is the only one that links csrc/mlpe_h1.c, mlpe_sse.c,
# mlpe_oai.c and mlpe_response.c (see NATIVE_MODULES in setup.py): the
# composite decoder calls the three layers in C, so they must be linked with
# it, and a unit linked twice would be two copies of its code and state
# rules that only identical builds keep equal.  So:
#
# * the read paths of other extensions (engine/_reader_c, wire/_h2_c) feed a
#   decoder only through its cdef methods below, which keep the decoder's
#   own rules (a failed decoder repeats its error, a closed one refuses
#   input) whichever module feeds it;
# * the standalone bindings of the layers (_h1_c, _sse_c, _oai_c) call the
#   layers' functions through the module-level cdef functions below, which
#   Cython exports from this module in a capsule and binds in the cimporting
#   module when it is imported (one indirect call, no second copy).
from libc.stdint cimport int64_t, uint8_t

from mlpe_fast.wire cimport _ch1, _coai, _csse
from mlpe_fast.wire._cresponse cimport mlpe_response


cdef class ResponseDecoder:
    cdef mlpe_response _r
    cdef bint _ready
    cdef bint _closed
    cdef object _error

    # The C entries of feed(), feed_eof(), feed_body() and end_body(): the
    # same checks, the same state changes and the same exceptions (the
    # stored ProtocolError of a failed decoder, LocalProtocolError for a
    # call out of order), but the MLPE_RESPONSE_* flags of mlpe_response.h
    # come back instead of milestone objects, and the input is a C buffer.
    cdef int feed_c(self, const uint8_t *data, size_t n, int64_t t_ns) except -1
    cdef int feed_eof_c(self, int64_t t_ns) except -1
    cdef int feed_body_c(self, const uint8_t *data, size_t n, int64_t t_ns) except -1
    cdef int end_body_c(self, int64_t t_ns) except -1

    cdef int _checked(self, unsigned flags) except -1
    cdef list _milestones(self, unsigned flags, int64_t t_ns)
    cdef object _head(self, int64_t t_ns)


# -- the layers' functions, for their standalone bindings ---------------------
# Each is the function of the same name with the mlpe_ prefix (csrc/mlpe_*.h).

cdef int h1_init(_ch1.mlpe_h1_parser *p, const _ch1.mlpe_h1_limits *limits) noexcept nogil
cdef void h1_free(_ch1.mlpe_h1_parser *p) noexcept nogil
cdef _ch1.mlpe_h1_result h1_feed(
    _ch1.mlpe_h1_parser *p, const uint8_t *data, size_t len, size_t *consumed, _ch1.mlpe_span *body
) noexcept nogil
cdef _ch1.mlpe_h1_result h1_feed_eof(_ch1.mlpe_h1_parser *p) noexcept nogil

cdef int sse_init(_csse.mlpe_sse_decoder *d, size_t max_event) noexcept nogil
cdef void sse_free(_csse.mlpe_sse_decoder *d) noexcept nogil
cdef _csse.mlpe_sse_result sse_feed(
    _csse.mlpe_sse_decoder *d,
    const uint8_t *data,
    size_t len,
    size_t *consumed,
    _csse.mlpe_sse_event *ev,
) noexcept nogil
cdef int sse_pending(const _csse.mlpe_sse_decoder *d) noexcept nogil
cdef _csse.mlpe_span sse_last_event_id(const _csse.mlpe_sse_decoder *d) noexcept nogil

cdef int oai_init(_coai.mlpe_oai_decoder *d) noexcept nogil
cdef void oai_free(_coai.mlpe_oai_decoder *d) noexcept nogil
cdef int oai_set_dialect(_coai.mlpe_oai_decoder *d, int dialect) noexcept nogil
cdef int oai_decode(
    _coai.mlpe_oai_decoder *d, const uint8_t *json, size_t len, _coai.mlpe_oai_chunk *out
) noexcept nogil
