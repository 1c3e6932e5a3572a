# cython: language_level=3
"""The engine's read path, compiled: stamp each read in C and feed the
response decoder in C (``csrc/mlpe_response.h``); Python runs only at the
first token (when asked) and at the end of a response.

Behaviour is specified by the twin, ``_reader_py.py``.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING
from libc.stdint cimport int64_t, uint8_t

from mlpe_fast.wire._cresponse cimport (
    MLPE_RESPONSE_DONE,
    MLPE_RESPONSE_ERROR,
    MLPE_RESPONSE_FIRST,
    mlpe_response_feed,
    mlpe_response_feed_eof,
)
from mlpe_fast.wire._response_c cimport ResponseDecoder

from ..errors import error_from_code

__all__ = ("READ_SIZE", "ReadCore", "monotonic_ns")


cdef extern from "mlpe_clock.h" nogil:
    int64_t mlpe_monotonic_ns()


# As in the twin: a read drains what the kernel holds for the socket.
READ_SIZE = 256 << 10


def monotonic_ns():
    """The engine's clock (``time.monotonic_ns()``'s, read in C)."""
    return mlpe_monotonic_ns()


cdef class ReadCore:
    """Stamps reads and feeds one response decoder per request (see the
    twin for the contract)."""

    cdef readonly ResponseDecoder decoder
    cdef public int64_t t_issue
    cdef public int64_t last_read_ns
    cdef public bint want_first_token
    cdef object _decoder_options
    cdef bytearray _buffer
    cdef object _view
    cdef const uint8_t *_data

    def __init__(self, dict decoder_options):
        self._decoder_options = decoder_options
        self._buffer = bytearray(READ_SIZE)
        self._view = memoryview(self._buffer)
        # The bytearray is never resized, so its storage stays put.
        self._data = <const uint8_t *>PyByteArray_AS_STRING(self._buffer)
        self.decoder = None

    def begin(self, transport, bytes request, bint want_first_token):
        """Starts a response and writes the request; returns ``t_issue``."""
        self.decoder = ResponseDecoder(**self._decoder_options)
        self.want_first_token = want_first_token
        cdef int64_t t_issue = mlpe_monotonic_ns()
        self.t_issue = self.last_read_ns = t_issue
        transport.write(request)
        return t_issue

    def get_buffer(self, Py_ssize_t sizehint):
        return self._view

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef int64_t t_ns = mlpe_monotonic_ns()
        cdef ResponseDecoder decoder = self.decoder
        cdef unsigned flags
        self.last_read_ns = t_ns
        if decoder is None:
            self.on_unsolicited(nbytes)
            return
        flags = mlpe_response_feed(&decoder._r, self._data, <size_t>nbytes, t_ns)
        if flags == 0:
            return
        if flags & MLPE_RESPONSE_ERROR:
            self.on_response_failed(t_ns, error_from_code(decoder._r.error, decoder._r.error_pos))
            return
        if flags & MLPE_RESPONSE_FIRST and self.want_first_token:
            self.on_first_token(t_ns)
        if flags & MLPE_RESPONSE_DONE:
            self.on_response_done(t_ns)

    def end_of_stream(self):
        """The peer closed: returns True when that completed the response."""
        cdef int64_t t_ns = mlpe_monotonic_ns()
        cdef ResponseDecoder decoder = self.decoder
        cdef unsigned flags = mlpe_response_feed_eof(&decoder._r, t_ns)
        if flags & MLPE_RESPONSE_ERROR:
            self.on_response_failed(t_ns, error_from_code(decoder._r.error, decoder._r.error_pos))
            return False
        if flags & MLPE_RESPONSE_DONE:
            self.on_response_done(t_ns)
            return True
        return False

    def take_summary(self):
        """Ends the current response and returns its summary."""
        summary = self.decoder.summary()
        self.decoder = None
        return summary

    # Hooks the owner overrides.
    def on_first_token(self, t_ns):
        raise NotImplementedError

    def on_response_done(self, t_ns):
        raise NotImplementedError

    def on_response_failed(self, t_ns, error):
        raise NotImplementedError

    def on_unsolicited(self, nbytes):
        raise NotImplementedError
