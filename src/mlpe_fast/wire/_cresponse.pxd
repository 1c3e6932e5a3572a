# Declarations of csrc/mlpe_response.h (and the parts of the layers the
# binding reads).  Declarations only; see _response_c.pyx.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef extern from "mlpe_response.h" nogil:
    ctypedef struct mlpe_span:
        const uint8_t *ptr
        size_t len

    ctypedef struct mlpe_buf:
        uint8_t *ptr
        size_t len

    ctypedef struct mlpe_h1_limits:
        size_t max_line
        size_t max_head
        size_t max_headers
        size_t max_chunk_size_digits

    ctypedef struct mlpe_h1_field:
        uint32_t name_off, name_len
        uint32_t value_off, value_len

    ctypedef struct mlpe_h1_parser:
        int status
        int version_minor
        int version_minor_raw
        int keep_alive
        mlpe_span reason
        mlpe_h1_field *headers
        size_t n_headers
        mlpe_h1_field *trailers
        size_t n_trailers
        mlpe_buf fields
        uint64_t offset

    enum:
        MLPE_GAP_BUCKETS

    ctypedef struct mlpe_gaps:
        uint64_t count, zero
        int64_t sum_ns, min_ns, max_ns
        uint32_t lo, hi
        uint32_t buckets[MLPE_GAP_BUCKETS]

    ctypedef struct mlpe_tool_call:
        int32_t index
        mlpe_buf id, type, name, arguments
        size_t name_first_len, arguments_first_len

    ctypedef struct mlpe_response_limits:
        mlpe_h1_limits h1
        size_t max_event
        size_t max_body
        int record_chunk_times
        int dialect
        int no_gap_histogram

    ctypedef struct mlpe_response:
        int input_mode
        int status
        int body_kind
        int keep_alive
        int complete
        int done_seen
        int64_t t_head, t_first, t_done
        int64_t t_first_content, t_second
        uint64_t events, content_events, events_after_done, chunk_errors
        int first_chunk_error
        int64_t first_chunk_error_t_ns
        mlpe_buf first_chunk_error_detail
        mlpe_buf first_chunk_error_data
        uint64_t unexpected_bytes
        mlpe_buf content, reasoning
        size_t content_first_len, reasoning_first_len
        int has_finish_reason, has_usage
        mlpe_buf finish_reason, usage, body
        mlpe_tool_call *tools
        size_t n_tools
        int64_t *chunk_times
        size_t n_chunk_times
        mlpe_gaps gaps
        int error
        uint64_t error_pos
        mlpe_h1_parser h1
        int record_chunk_times

    enum:
        MLPE_OK
        MLPE_E_NOMEM
        MLPE_DIALECT_OPENAI
        MLPE_DIALECT_SGLANG
        MLPE_BODY_ERROR
        MLPE_INPUT_NONE
        MLPE_INPUT_WIRE
        MLPE_INPUT_BODY
        MLPE_RESPONSE_HEAD
        MLPE_RESPONSE_FIRST
        MLPE_RESPONSE_DONE
        MLPE_RESPONSE_ERROR
        MLPE_RESPONSE_DEFAULT_MAX_BODY
        MLPE_SSE_DEFAULT_MAX_EVENT

    int mlpe_response_init(mlpe_response *r, const mlpe_response_limits *limits)
    void mlpe_response_free(mlpe_response *r)
    unsigned mlpe_response_feed(mlpe_response *r, const uint8_t *data, size_t len, int64_t t_ns)
    unsigned mlpe_response_feed_eof(mlpe_response *r, int64_t t_ns)
    unsigned mlpe_response_set_head(mlpe_response *r, int status,
                                    const uint8_t *content_type, size_t content_type_len,
                                    const uint8_t *content_encoding, size_t content_encoding_len,
                                    int64_t t_ns)
    unsigned mlpe_response_feed_body(mlpe_response *r, const uint8_t *data, size_t len,
                                     int64_t t_ns)
    unsigned mlpe_response_end_body(mlpe_response *r, int64_t t_ns)
