# The compiled DataDeframer, shared with the engine's HTTP/2 read path
# (mlpe_fast/engine/_h2_reader_c.pyx runs ``_feed`` once per read and reads
# the outputs of ``_d`` in place).
from libc.stdint cimport int64_t, uint8_t

from mlpe_fast.wire._ch2 cimport mlpe_h2_deframer


cdef class DataDeframer:
    cdef mlpe_h2_deframer _d
    cdef dict _decoders

    cdef Py_ssize_t _feed(self, const uint8_t *data, size_t n, int64_t t_ns) except -1
