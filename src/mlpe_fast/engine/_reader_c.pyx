# cython: language_level=3
"""The engine's read path, compiled: stamp each read in C and feed the
response decoder through its C entry (``ResponseDecoder.feed_c``, declared in
``wire/_response_c.pxd``), so that the decoder's own rules hold; Python runs
only at the first token (when asked) and at the end of a response.

Behaviour is specified by the twin, ``_reader_py.py``; reading a socket of
its own with kernel stamps is the base's, ``_receive_c.SocketReader``.
"""

from libc.stdint cimport int64_t, uint8_t

from mlpe_fast.engine._receive_c cimport SocketReader
from mlpe_fast.wire._cresponse cimport MLPE_RESPONSE_DONE, MLPE_RESPONSE_FIRST
from mlpe_fast.wire._response_c cimport ResponseDecoder

from ..errors import ProtocolError
from ._receive_c import READ_SIZE

__all__ = ("READ_SIZE", "ReadCore", "monotonic_ns")


cdef extern from "mlpe_clock.h" nogil:
    int64_t mlpe_monotonic_ns()


def monotonic_ns():
    """The engine's clock (``time.monotonic_ns()``'s, read in C)."""
    return mlpe_monotonic_ns()


cdef class ReadCore(SocketReader):
    """Stamps reads and feeds one response decoder per request (see the
    twin for the contract)."""

    cdef readonly ResponseDecoder decoder
    cdef public int64_t t_issue
    cdef public bint want_first_token
    cdef public int64_t first_read_ns
    cdef public int64_t done_read_ns
    cdef public bint kernel_first
    cdef public bint kernel_done
    cdef public int segment_first
    cdef object _decoder_options

    def __init__(self, dict decoder_options):
        self._decoder_options = decoder_options
        self.decoder = None

    cdef int64_t _stamp_floor(self):
        # The response's data came after its request was sent.
        return self._floor if self._floor > self.t_issue else self.t_issue

    def begin(self, transport, bytes request, bint want_first_token):
        """Starts a response and writes the request; returns ``t_issue``."""
        self.decoder = ResponseDecoder(**self._decoder_options)
        self.want_first_token = want_first_token
        cdef int64_t t_issue = mlpe_monotonic_ns()
        self.t_issue = self.last_read_ns = self._floor = t_issue
        self.first_read_ns = self.done_read_ns = 0
        self.kernel_first = self.kernel_done = False
        self.segment_first = 0
        transport.write(request)
        return t_issue

    def get_buffer(self, Py_ssize_t sizehint):
        if self._view is None:
            self._share_read_space()
        return self._view

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef int64_t t_ns = mlpe_monotonic_ns()
        self._feed(self._data, <size_t>nbytes, t_ns, t_ns, False)

    cdef _feed(self, const uint8_t *data, size_t nbytes, int64_t t_ns, int64_t t_read, bint kernel):
        """One read (see the twin)."""
        cdef ResponseDecoder decoder = self.decoder
        cdef unsigned flags
        cdef bint had_done
        self.last_read_ns = t_read
        if decoder is None:
            self.on_unsolicited(nbytes)
            return
        self._floor = t_ns
        had_done = decoder._r.t_done >= 0
        try:
            flags = decoder.feed_c(data, nbytes, t_ns)
        except ProtocolError as error:
            # As the twin: a LocalProtocolError (a read after feed_eof) is
            # the caller's bug and goes up.
            self.on_response_failed(t_ns, error)
            return
        if not had_done and decoder._r.t_done >= 0:
            self.done_read_ns = t_read
            self.kernel_done = kernel
        if flags == 0:
            return
        if flags & MLPE_RESPONSE_FIRST:
            self.first_read_ns = t_read
            self.kernel_first = kernel
            self.segment_first = self.last_read_segment
            if self.want_first_token:
                self.on_first_token(t_ns)
        if flags & MLPE_RESPONSE_DONE:
            self.on_response_done(t_ns)

    def end_of_stream(self):
        """The peer closed: returns True when that completed the response."""
        cdef int64_t t_ns = mlpe_monotonic_ns()
        cdef ResponseDecoder decoder = self.decoder
        cdef bint had_done = decoder._r.t_done >= 0
        cdef unsigned flags
        try:
            flags = decoder.feed_eof_c(t_ns)
        except ProtocolError as error:
            self.on_response_failed(t_ns, error)
            return False
        if not had_done and decoder._r.t_done >= 0:
            # As in the twin: the kernel stamps data, not the close.
            self.done_read_ns = t_ns
            self.kernel_done = self._kernel
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
