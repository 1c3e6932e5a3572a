# Declarations of csrc/mlpe_h2.h.  Declarations only; see _h2_c.pyx (and
# mlpe_fast/engine/_h2_reader_c.pyx, which reads the outputs in place).
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

from mlpe_fast.wire._cresponse cimport mlpe_buf


# Outside the nogil block: the binding's sink functions run with the GIL held
# (mlpe_h2_feed is called with it), since they call into the decoder objects.
cdef extern from "mlpe_h2.h":
    ctypedef struct mlpe_h2_sink:
        unsigned (*feed_body)(void *decoder, const uint8_t *data, size_t len, int64_t t_ns)
        unsigned (*end_body)(void *decoder, int64_t t_ns)


cdef extern from "mlpe_h2.h" nogil:
    ctypedef struct mlpe_h2_event:
        uint32_t stream_id
        uint32_t flags
        uint64_t end

    ctypedef struct mlpe_h2_deframer:
        uint32_t max_frame_size
        int error
        uint64_t error_pos
        uint64_t offset
        size_t n_streams
        mlpe_buf passthrough
        mlpe_buf window_updates
        mlpe_h2_event *events
        size_t n_events
        uint32_t *released
        size_t n_released

    enum:
        MLPE_H2_FRAME_HEADER_SIZE
        MLPE_H2_WINDOW_UPDATE_SIZE
        MLPE_H2_PROTOCOL_ERROR
        MLPE_H2_INTERNAL_ERROR
        MLPE_H2_MIN_MAX_FRAME_SIZE
        MLPE_H2_MAX_MAX_FRAME_SIZE
        MLPE_H2_MAX_WINDOW
        MLPE_H2_MAX_STREAM_ID
        MLPE_H2_E_RANGE
        MLPE_H2_E_STREAM_ID
        MLPE_H2_E_DUPLICATE

    int mlpe_h2_init(mlpe_h2_deframer *d, mlpe_h2_sink sink, uint32_t max_frame_size,
                     uint32_t connection_window, uint32_t stream_window)
    void mlpe_h2_free(mlpe_h2_deframer *d)
    int mlpe_h2_register(mlpe_h2_deframer *d, uint32_t stream_id, void *decoder)
    int mlpe_h2_unregister(mlpe_h2_deframer *d, uint32_t stream_id)
    size_t mlpe_h2_feed(mlpe_h2_deframer *d, const uint8_t *data, size_t len, int64_t t_ns)
    void mlpe_h2_window_update(uint8_t *out, uint32_t stream_id, uint32_t increment)
