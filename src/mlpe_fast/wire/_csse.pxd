# cython: language_level=3
# Declarations of csrc/mlpe_sse.h (and the parts of mlpe_common.h it uses).
# Only what the bindings touch is declared: Cython takes the struct layouts
# from the C headers.

from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef extern from "mlpe_sse.h" nogil:
    ctypedef struct mlpe_span:
        const uint8_t *ptr
        size_t len

    ctypedef enum mlpe_sse_result:
        MLPE_SSE_NEED_MORE
        MLPE_SSE_EVENT
        MLPE_SSE_ERROR

    ctypedef struct mlpe_sse_event:
        mlpe_span data
        mlpe_span type
        mlpe_span id

    ctypedef struct mlpe_sse_decoder:
        int64_t retry
        int error
        uint64_t error_pos
        uint64_t offset

    int mlpe_sse_init(mlpe_sse_decoder *d, size_t max_event)
    void mlpe_sse_free(mlpe_sse_decoder *d)
    mlpe_sse_result mlpe_sse_feed(mlpe_sse_decoder *d, const uint8_t *data, size_t len,
                                  size_t *consumed, mlpe_sse_event *ev)
    int mlpe_sse_pending(const mlpe_sse_decoder *d)
    mlpe_span mlpe_sse_last_event_id(const mlpe_sse_decoder *d)
    int mlpe_sse_is_done(const mlpe_sse_event *ev)
