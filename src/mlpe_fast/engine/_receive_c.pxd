# Declarations of the compiled receive path (_receive_c.pyx), shared with the
# read cores that subclass SocketReader (_reader_c.pyx, _h2_reader_c.pyx).
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from mlpe_fast.engine._pktstamp_c cimport SegmentMap


cdef extern from "mlpe_rxstamp.h" nogil:
    ctypedef struct mlpe_clockmap:
        int64_t offset_ns
        int64_t error_ns
        int64_t sampled_at
        int64_t steps
        int64_t last_step_ns


cdef extern from "mlpe_rxthread.h" nogil:
    ctypedef struct mlpe_rxchunk:
        uint32_t len
        int64_t t_realtime
        int64_t t_read

    ctypedef struct mlpe_rxbatch:
        uint8_t *data
        size_t len
        mlpe_rxchunk *chunks
        size_t n_chunks
        int eof
        int error

    ctypedef struct mlpe_rxconn:
        void *owner
        mlpe_rxbatch pending
        mlpe_rxconn *next_ready

    ctypedef struct mlpe_rxthread:
        pass

    ctypedef struct mlpe_rxthread_options:
        int fifo_priority
        int pin
        uint64_t cpus[16]

    ctypedef struct mlpe_rxthread_placement:
        int tid
        int policy
        int priority
        int sched_error
        int affinity_error
        uint64_t cpus[16]


cdef class ArrivalClock:
    cdef mlpe_clockmap _m

    cdef int64_t _arrival(self, int64_t t_realtime, int64_t t_read, int64_t floor)


cdef class ReceiveThread:
    cdef mlpe_rxthread *_t
    cdef object _asked
    cdef object _placement
    cdef object _final


cdef class SocketReader:
    cdef public int64_t last_read_ns
    cdef public bint last_read_kernel
    cdef int64_t _floor
    cdef int _fd
    cdef bint _kernel
    cdef ArrivalClock _clock
    cdef ReceiveThread _receiver
    cdef bint _registered
    cdef mlpe_rxconn _rx
    cdef mlpe_rxbatch _batch
    cdef public object on_received
    cdef bytearray _buffer
    cdef object _view
    cdef const uint8_t *_data
    # Segment stamps (the twin's _feed_segments).
    cdef SegmentMap _capture
    cdef int64_t _stream_offset
    cdef uint16_t _local_port
    cdef uint16_t _remote_port
    cdef uint8_t _family
    cdef uint8_t _remote[16]
    cdef public int last_read_segment

    cdef _received(self)
    cdef _share_read_space(self)
    cdef _feed_segments(self, const uint8_t *data, size_t n, int64_t t_realtime, int64_t t_read)
    cdef _feed_read(self, const uint8_t *data, size_t n, int64_t t_realtime, int64_t t_read)
    cdef object _take_received(self)
    cdef int64_t _stamp_floor(self)
    cdef _feed(self, const uint8_t *data, size_t n, int64_t t_ns, int64_t t_read, bint kernel)
