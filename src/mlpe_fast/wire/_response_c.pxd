# The compiled ResponseDecoder, shared with the engine's read path
# (mlpe_fast/engine/_reader_c.pyx feeds ``_r`` directly, once per read).
from libc.stdint cimport int64_t

from ._cresponse cimport mlpe_response


cdef class ResponseDecoder:
    cdef mlpe_response _r
    cdef bint _ready
    cdef bint _closed
    cdef object _error

    cdef list _milestones(self, unsigned flags, int64_t t_ns)
    cdef object _head(self, int64_t t_ns)
