# Declarations of the compiled segment stamps (_pktstamp_c.pyx), shared with
# the receive path that splits reads by segment (_receive_c.pyx).
from libc.stdint cimport int64_t, uint8_t, uint16_t


cdef extern from "mlpe_pktstamp.h" nogil:
    ctypedef struct mlpe_pktconn:
        pass

    ctypedef struct mlpe_pktmap:
        int64_t frames
        int64_t segments
        int64_t outgoing
        int64_t unknown
        int64_t malformed
        int64_t losing
        int64_t drops

    ctypedef struct mlpe_pktcap:
        int fd
        int ignore_outgoing


cdef class SegmentMap:
    cdef mlpe_pktmap *_m

    cdef mlpe_pktconn *conn(self, uint16_t local_port, uint8_t family, const uint8_t *remote,
                            uint16_t remote_port)
    cdef int64_t next_run(self, mlpe_pktconn *c, int64_t start, int64_t end, int64_t *t_realtime,
                          int *why)
    cdef void consume(self, mlpe_pktconn *c, int64_t upto)
    cdef int64_t drain_c(self)


cdef class PacketCapture(SegmentMap):
    cdef mlpe_pktcap _cap
    cdef readonly str interface
