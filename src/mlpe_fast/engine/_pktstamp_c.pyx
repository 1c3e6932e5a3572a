# cython: language_level=3
"""Arrival stamps per TCP segment, compiled (``csrc/mlpe_pktstamp.h``, rules
P1-P10): the frame parser, the map from stream offsets to stamps, and the
packet socket with its ring.  The receive path (``_receive_c.SocketReader``)
reaches the map through the cdef methods of ``_pktstamp_c.pxd``.

Behaviour is specified by the twin, ``_pktstamp_py.py``.
"""

import errno
import os

from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset

from ._pktstamp_py import MAX_SPANS, SNAPLEN, STAMPED, UNKNOWN, LOST, MISSED, address_key, capture_interface

__all__ = (
    "LOST", "MAX_SPANS", "MISSED", "SNAPLEN", "STAMPED", "UNKNOWN",
    "PacketCapture", "SegmentMap", "capture_interface", "parse_frame",
)


cdef extern from "mlpe_pktstamp.h" nogil:
    ctypedef struct mlpe_segment:
        uint8_t family
        uint8_t flags
        uint16_t src_port
        uint16_t dst_port
        uint8_t src[16]
        uint8_t dst[16]
        unsigned seq
        unsigned payload_len

    int mlpe_pkt_parse(const uint8_t *p, size_t n, unsigned wire_len, mlpe_segment *s)
    void mlpe_pktmap_init(mlpe_pktmap *m)
    void mlpe_pktmap_free(mlpe_pktmap *m)
    void mlpe_pktmap_add(mlpe_pktmap *m, const mlpe_segment *s, int64_t t_realtime)
    mlpe_pktconn *mlpe_pktmap_conn(mlpe_pktmap *m, uint16_t local_port, uint8_t family,
                                   const uint8_t *remote, uint16_t remote_port)
    void mlpe_pktmap_forget(mlpe_pktmap *m, uint16_t local_port)
    int64_t mlpe_pktconn_next(const mlpe_pktconn *c, const mlpe_pktmap *m, int64_t start,
                              int64_t end, int64_t *t_realtime, int *why)
    void mlpe_pktconn_consume(mlpe_pktconn *c, int64_t upto)
    int mlpe_pktcap_open(mlpe_pktcap *cap, int ifindex, uint16_t port, unsigned ring_frames)
    void mlpe_pktcap_close(mlpe_pktcap *cap)
    int64_t mlpe_pktcap_drain(mlpe_pktcap *cap, mlpe_pktmap *m)


cdef object _segment_tuple(mlpe_segment *s):
    size = 4 if s.family == 4 else 16
    return (s.family, s.flags, (<bytes>s.src[:16])[:size], s.src_port,
            (<bytes>s.dst[:16])[:size], s.dst_port, s.seq, s.payload_len)


def parse_frame(const uint8_t[:] frame, unsigned wire_len):
    """P4: (family, flags, src, src_port, dst, dst_port, seq, payload_len),
    None for a frame that is no TCP segment; ValueError when malformed."""
    cdef mlpe_segment s
    cdef int r = mlpe_pkt_parse(&frame[0] if frame.shape[0] else NULL, frame.shape[0], wire_len, &s)
    if r < 0:
        raise ValueError("malformed frame")
    if r == 0:
        return None
    return _segment_tuple(&s)


cdef class SegmentMap:
    """Stream offsets to stamps, per connection (see the twin)."""

    def __cinit__(self, *args, **kwargs):
        self._m = <mlpe_pktmap *>calloc(1, sizeof(mlpe_pktmap))
        if self._m == NULL:
            raise MemoryError()
        mlpe_pktmap_init(self._m)

    def __dealloc__(self):
        if self._m != NULL:
            mlpe_pktmap_free(self._m)
            free(self._m)

    def add_frame(self, const uint8_t[:] frame, unsigned wire_len, int64_t t_realtime):
        """Parses one frame (P4) and adds its segment (P5-P7); returns
        whether it was a TCP segment."""
        cdef mlpe_segment s
        cdef int r = mlpe_pkt_parse(&frame[0] if frame.shape[0] else NULL, frame.shape[0], wire_len, &s)
        self._m.frames += 1
        if r < 0:
            self._m.malformed += 1
            return False
        if r == 0:
            return False
        mlpe_pktmap_add(self._m, &s, t_realtime)
        return True

    def note_drops(self, int64_t drops):
        """Counts frames the capture lost (the ring's tp_drops)."""
        self._m.drops += drops

    cdef mlpe_pktconn *conn(self, uint16_t local_port, uint8_t family, const uint8_t *remote,
                            uint16_t remote_port):
        return mlpe_pktmap_conn(self._m, local_port, family, remote, remote_port)

    cdef int64_t next_run(self, mlpe_pktconn *c, int64_t start, int64_t end, int64_t *t_realtime,
                          int *why):
        return mlpe_pktconn_next(c, self._m, start, end, t_realtime, why)

    cdef void consume(self, mlpe_pktconn *c, int64_t upto):
        mlpe_pktconn_consume(c, upto)

    cdef int64_t drain_c(self):
        return 0

    def runs(self, int local_port, str remote, int remote_port, int64_t start, int64_t end):
        """P8: [(length, t_realtime, why)] covering bytes [start, end)."""
        family, key = address_key(remote)
        cdef bytes packed = key
        cdef mlpe_pktconn *c = self.conn(local_port, family, packed, remote_port)
        cdef int64_t t = 0, n
        cdef int why = 0
        out = []
        while start < end:
            n = mlpe_pktconn_next(c, self._m, start, end, &t, &why)
            out.append((n, t, why))
            start += n
        return out

    def consume_to(self, int local_port, str remote, int remote_port, int64_t upto):
        """P9: the reader took the bytes up to ``upto``."""
        family, key = address_key(remote)
        cdef bytes packed = key
        mlpe_pktconn_consume(self.conn(local_port, family, packed, remote_port), upto)

    def forget(self, int local_port):
        mlpe_pktmap_forget(self._m, local_port)

    def drain(self):
        return self.drain_c()

    @property
    def stats(self):
        """The counters of ``mlpe_pktmap`` (P5, P8, P10)."""
        return {
            "frames": self._m.frames, "segments": self._m.segments,
            "outgoing": self._m.outgoing, "unknown": self._m.unknown,
            "malformed": self._m.malformed, "losing": self._m.losing, "drops": self._m.drops,
        }


cdef class PacketCapture(SegmentMap):
    """A packet socket that fills the map (P1, P2, P10; see the twin)."""

    def __cinit__(self, *args, **kwargs):
        memset(&self._cap, 0, sizeof(self._cap))
        self._cap.fd = -1

    def __init__(self, int port, str host, unsigned ring_frames=16384):
        ifindex, self.interface = capture_interface(host)
        cdef int r = mlpe_pktcap_open(&self._cap, ifindex, port, ring_frames)
        if r != 0:
            raise OSError(-r, os.strerror(-r))

    @property
    def ignores_outgoing(self):
        return bool(self._cap.ignore_outgoing)

    cdef int64_t drain_c(self):
        if self._cap.fd < 0:
            return 0
        cdef int64_t n = mlpe_pktcap_drain(&self._cap, self._m)
        return n if n > 0 else 0

    def close(self):
        mlpe_pktcap_close(&self._cap)

    def __dealloc__(self):
        mlpe_pktcap_close(&self._cap)
