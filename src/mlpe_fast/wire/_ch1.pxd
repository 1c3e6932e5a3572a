# Declarations of csrc/mlpe_h1.h (and the parts of mlpe_common.h it uses) for
# the Cython glue in _h1_c.pyx.  Only what the glue reads is declared; the
# private fields of mlpe_h1_parser are left out on purpose.

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t


cdef extern from "mlpe_h1.h" nogil:
    ctypedef struct mlpe_span:
        const uint8_t *ptr
        size_t len

    ctypedef struct mlpe_buf:
        uint8_t *ptr
        size_t len
        size_t cap

    ctypedef struct mlpe_h1_limits:
        size_t max_line
        size_t max_head
        size_t max_headers
        size_t max_chunk_size_digits

    ctypedef enum mlpe_h1_result:
        MLPE_H1_NEED_MORE
        MLPE_H1_HEAD
        MLPE_H1_BODY
        MLPE_H1_DONE
        MLPE_H1_ERROR

    ctypedef struct mlpe_h1_field:
        uint32_t name_off
        uint32_t name_len
        uint32_t value_off
        uint32_t value_len

    ctypedef struct mlpe_h1_parser:
        int status
        int version_minor
        int version_minor_raw
        int keep_alive
        int chunked
        int64_t content_length
        mlpe_span reason
        mlpe_h1_field *headers
        size_t n_headers
        mlpe_h1_field *trailers
        size_t n_trailers
        mlpe_buf fields
        int error
        uint64_t error_pos
        uint64_t offset

    int MLPE_OK
    size_t MLPE_H1_MAX_LIMIT

    int mlpe_h1_init(mlpe_h1_parser *p, const mlpe_h1_limits *limits)
    void mlpe_h1_free(mlpe_h1_parser *p)
    mlpe_h1_result mlpe_h1_feed(mlpe_h1_parser *p, const uint8_t *data, size_t len,
                                size_t *consumed, mlpe_span *body)
    mlpe_h1_result mlpe_h1_feed_eof(mlpe_h1_parser *p)
    long mlpe_h1_find_header(const mlpe_h1_parser *p, const char *lower_name, size_t name_len)
