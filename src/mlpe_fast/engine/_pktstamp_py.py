"""Pure-Python twin of the segment stamps (``_pktstamp_c.pyx`` over
``csrc/mlpe_pktstamp.h``, rules P1-P10).

A TCP read carries one kernel stamp, that of its newest data (K2 of
``csrc/mlpe_rxstamp.h``).  A packet socket sees each segment with its own
stamp and sequence number; less the connection's initial sequence number
(from its SYN-ACK), that is the segment's byte offset in the received
stream.  :class:`SegmentMap` keeps, per connection, which byte ranges
arrived when (every byte its earliest stamp, by offset, never by arrival
order); :class:`PacketCapture` fills it from an ``AF_PACKET`` socket.  The
read path counts the bytes it read and asks :meth:`SegmentMap.runs` for
the stamps of each read's bytes.

The compiled capture reads a TPACKET_V2 ring; this twin reads the same
frames with ``recvmsg`` and ``SO_TIMESTAMPNS`` (the same software stamp),
one system call per frame: the same behaviour, not the same cost.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import socket
import struct
import sys

__all__ = (
    "LOST",
    "MAX_SPANS",
    "MISSED",
    "SNAPLEN",
    "STAMPED",
    "UNKNOWN",
    "PacketCapture",
    "SegmentMap",
    "address_key",
    "capture_interface",
    "filter_program",
    "parse_frame",
)

SNAPLEN = 128
MAX_SPANS = 4096
# P8: why a run of bytes has no segment stamp.
STAMPED, UNKNOWN, LOST, MISSED = 0, 1, 2, 3

_SYN, _ACK = 0x02, 0x10
_MASK32 = 0xFFFFFFFF

Segment = tuple[int, int, bytes, int, bytes, int, int, int]


def parse_frame(frame: bytes | bytearray | memoryview, wire_len: int) -> Segment | None:
    """P4: ``(family, flags, src, src_port, dst, dst_port, seq, payload_len)``
    of a frame that begins at its IP header, None for a frame that is no TCP
    segment; ValueError when it is too short or inconsistent."""
    p = bytes(frame)
    n = len(p)
    if n < 1:
        raise ValueError("malformed frame")
    version = p[0] >> 4
    if version == 4:
        if n < 20:
            raise ValueError("malformed frame")
        ip_len = (p[0] & 0x0F) * 4
        if ip_len < 20:
            raise ValueError("malformed frame")
        if p[9] != 6:
            return None
        if int.from_bytes(p[6:8], "big") & 0x3FFF:
            return None
        total = int.from_bytes(p[2:4], "big") or wire_len
        family, src, dst = 4, p[12:16], p[16:20]
    elif version == 6:
        if n < 40:
            raise ValueError("malformed frame")
        if p[6] != 6:
            return None
        ip_len = 40
        total = int.from_bytes(p[4:6], "big") + 40
        if total == 40:
            total = wire_len
        family, src, dst = 6, p[8:24], p[24:40]
    else:
        return None
    if n < ip_len + 20:
        raise ValueError("malformed frame")
    t = p[ip_len:]
    tcp_len = (t[12] >> 4) * 4
    if tcp_len < 20 or total > wire_len or total < ip_len + tcp_len:
        raise ValueError("malformed frame")
    src_port, dst_port, seq = struct.unpack_from("!HHI", t)
    return family, t[13], src, src_port, dst, dst_port, seq, total - ip_len - tcp_len


class _Connection:
    __slots__ = ("consumed", "family", "high", "isn", "lost", "remote", "remote_port", "spans")

    def __init__(self, family: int, remote: bytes, remote_port: int, isn: int) -> None:
        self.family = family
        self.remote = remote
        self.remote_port = remote_port
        self.isn = isn
        self.high = 0
        self.consumed = 0
        self.lost = False
        self.spans: list[list[int]] = []  # [start, end, t_realtime], sorted, disjoint

    def insert(self, start: int, end: int, t: int) -> None:
        """P7: every byte keeps its earliest stamp."""
        start = max(start, self.consumed)
        if end <= start:
            return
        spans = self.spans
        if not spans or start >= spans[-1][1]:
            if spans and spans[-1][1] == start and spans[-1][2] == t:
                spans[-1][1] = end
                return
            if len(spans) >= MAX_SPANS:
                self.lost = True
                return
            spans.append([start, end, t])
            return
        merged: list[list[int]] = []
        cursor = start
        for old_start, old_end, old_t in spans:
            if cursor < end and old_start > cursor:
                hole_end = min(old_start, end)
                merged.append([cursor, hole_end, t])
                cursor = hole_end
            if old_end <= start or old_start >= end:
                merged.append([old_start, old_end, old_t])
                continue
            lo, hi = max(old_start, start), min(old_end, end)
            if t < old_t:
                if old_start < lo:
                    merged.append([old_start, lo, old_t])
                merged.append([lo, hi, t])
                if hi < old_end:
                    merged.append([hi, old_end, old_t])
            else:
                merged.append([old_start, old_end, old_t])
            cursor = max(cursor, hi)
        if cursor < end:
            merged.append([cursor, end, t])
        if len(merged) > MAX_SPANS:
            self.lost = True
            return
        self.spans = merged


def address_key(address: str) -> tuple[int, bytes]:
    """(4 or 6, the packed address) of an IP address as sockets give it."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return (4 if ip.version == 4 else 6), ip.packed


class SegmentMap:
    """Per connection (keyed by local port, checked against the remote),
    which bytes of the received stream arrived when (P5-P9)."""

    def __init__(self) -> None:
        self._by_port: dict[int, _Connection] = {}
        self.frames = self.segments = self.outgoing = self.unknown = 0
        self.malformed = self.losing = self.drops = 0

    def add_frame(
        self, frame: bytes | bytearray | memoryview, wire_len: int, t_realtime: int
    ) -> bool:
        """Parses one frame (P4) and adds its segment; returns whether it
        was a TCP segment."""
        self.frames += 1
        try:
            segment = parse_frame(frame, wire_len)
        except ValueError:
            self.malformed += 1
            return False
        if segment is None:
            return False
        self._add(segment, t_realtime)
        return True

    def note_drops(self, drops: int) -> None:
        self.drops += drops

    def _add(self, segment: Segment, t: int) -> None:
        family, flags, src, src_port, _, port, seq, length = segment
        self.segments += 1
        c = self._by_port.get(port)
        same = c is not None and (c.family, c.remote, c.remote_port) == (family, src, src_port)
        if flags & (_SYN | _ACK) == _SYN | _ACK:  # P5
            if c is not None and same and c.isn == seq:
                return  # a retransmitted SYN-ACK
            self._by_port[port] = _Connection(family, src, src_port, seq)
            return
        if c is None or not same:
            if length:
                self.unknown += 1
            return
        if not length:
            return
        # P6: unwrap against the highest end seen; the SYN took one number.
        rel = (seq - c.isn - 1) & _MASK32
        delta = (rel - c.high) & _MASK32
        if delta >= 1 << 31:
            delta -= 1 << 32
        start = c.high + delta
        end = start + length
        c.high = max(c.high, end)
        c.insert(start, end, t)

    def _conn(self, local_port: int, remote: str, remote_port: int) -> _Connection | None:
        c = self._by_port.get(local_port)
        family, key = address_key(remote)
        if c is None or (c.family, c.remote, c.remote_port) != (family, key, remote_port):
            return None
        return c

    def runs(
        self, local_port: int, remote: str, remote_port: int, start: int, end: int
    ) -> list[tuple[int, int, int]]:
        """P8: ``[(length, t_realtime, why)]`` covering bytes [start, end);
        ``t_realtime`` 0 with ``why`` saying why no segment covers them."""
        return self.runs_of(self._conn(local_port, remote, remote_port), start, end)

    def runs_of(self, c: _Connection | None, start: int, end: int) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = []
        if start >= end:
            return out
        if c is None:
            return [(end - start, 0, UNKNOWN)]
        gap = LOST if (c.lost or self.drops or self.losing) else MISSED
        for s_start, s_end, t in c.spans:
            if start >= end:
                break
            if s_end <= start:
                continue
            if s_start > start:
                stop = min(s_start, end)
                out.append((stop - start, 0, gap))
                start = stop
                if start >= end:
                    break
            stop = min(s_end, end)
            out.append((stop - start, t, STAMPED))
            start = stop
        if start < end:
            out.append((end - start, 0, gap))
        return out

    def consume_to(self, local_port: int, remote: str, remote_port: int, upto: int) -> None:
        self.consume(self._conn(local_port, remote, remote_port), upto)

    def consume(self, c: _Connection | None, upto: int) -> None:
        """P9: the reader took the bytes up to ``upto``."""
        if c is None or upto <= c.consumed:
            return
        c.consumed = upto
        spans = c.spans
        keep = 0
        while keep < len(spans) and spans[keep][1] <= upto:
            keep += 1
        if keep:
            del spans[:keep]
        if spans and spans[0][0] < upto:
            spans[0][0] = upto
        if not spans:
            c.lost = False

    def forget(self, local_port: int) -> None:
        self._by_port.pop(local_port, None)

    def drain(self) -> int:
        return 0

    @property
    def stats(self) -> dict[str, int]:
        return {
            "frames": self.frames,
            "segments": self.segments,
            "outgoing": self.outgoing,
            "unknown": self.unknown,
            "malformed": self.malformed,
            "losing": self.losing,
            "drops": self.drops,
        }


def capture_interface(host: str) -> tuple[int, str]:
    """The interface to capture on for an endpoint at ``host`` (an IP
    address): ``lo`` for a loopback address, else every interface (index 0;
    the filter keeps the endpoint's segments).  OSError(ENODEV) when
    loopback has no ``lo``."""
    if ipaddress.ip_address(host.split("%", 1)[0]).is_loopback:
        try:
            return socket.if_nametoindex("lo"), "lo"
        except OSError:
            raise OSError(errno.ENODEV, "no loopback interface 'lo' to capture on") from None
    return 0, "all interfaces"


def filter_program(port: int) -> list[tuple[int, int, int, int]]:
    """P1: the classic BPF program, on frames that begin at the IP header:
    TCP from ``port`` (IPv4 unfragmented, IPv6 without extension headers),
    headers only.  The compiled capture builds the same program."""
    return [
        (0x30, 0, 0, 0),  # ldb [0]
        (0x74, 0, 0, 4),  # rsh #4: the IP version
        (0x15, 0, 7, 4),  # jeq #4 ? 3 : 10
        (0x30, 0, 0, 9),  # ldb [9]: protocol
        (0x15, 0, 11, 6),  # jeq TCP ? 5 : drop
        (0x28, 0, 0, 6),  # ldh [6]: flags and fragment offset
        (0x45, 9, 0, 0x1FFF),  # jset fragment ? drop : 7
        (0xB1, 0, 0, 0),  # ldx 4*([0]&0xf)
        (0x48, 0, 0, 0),  # ldh [x+0]: source port
        (0x15, 5, 6, port),  # jeq port ? keep : drop
        (0x15, 0, 5, 6),  # jeq #6 (IPv6) ? 11 : drop
        (0x30, 0, 0, 6),  # ldb [6]: next header
        (0x15, 0, 3, 6),  # jeq TCP ? 13 : drop
        (0x28, 0, 0, 40),  # ldh [40]: source port
        (0x15, 0, 1, port),  # jeq port ? keep : drop
        (0x06, 0, 0, SNAPLEN),  # keep the headers
        (0x06, 0, 0, 0),  # drop
    ]


# linux/if_packet.h, asm-generic/socket.h
_SOL_PACKET = 263
_PACKET_STATISTICS = 6
_PACKET_IGNORE_OUTGOING = 23
_PACKET_OUTGOING = 4
_SO_ATTACH_FILTER = 26
_SO_TIMESTAMPNS = 35
_ETH_P_ALL = 0x0003


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class PacketCapture(SegmentMap):
    """An ``AF_PACKET`` socket that fills the map (P1, P2, P10).

    Raises OSError: EPERM without CAP_NET_RAW, ENODEV without the
    interface, EOPNOTSUPP off Linux."""

    def __init__(self, port: int, host: str, ring_frames: int = 16384) -> None:
        super().__init__()
        ifindex, self.interface = capture_interface(host)
        if sys.platform != "linux" or not hasattr(socket, "AF_PACKET"):
            raise OSError(errno.EOPNOTSUPP, "no packet sockets on this system")
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)
        try:
            program = filter_program(port)
            codes = (_SockFilter * len(program))(*(_SockFilter(*op) for op in program))
            fprog = _SockFprog(len(program), codes)
            sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, bytes(fprog))
            try:
                sock.setsockopt(_SOL_PACKET, _PACKET_IGNORE_OUTGOING, 1)
                self.ignores_outgoing = True
            except OSError:
                self.ignores_outgoing = False
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            # The default receive buffer holds a few hundred frames; the
            # ring holds ring_frames.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, ring_frames * 768)
            sock.bind(("lo" if ifindex else "", _ETH_P_ALL))  # Python applies htons
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock: socket.socket | None = sock
        self._keep = (codes, fprog)  # the kernel copied them; kept for clarity

    def drain(self) -> int:
        sock = self._sock
        if sock is None:
            return 0
        taken = 0
        while True:
            try:
                data, ancillary, _, address = sock.recvmsg(SNAPLEN, 64)
            except (BlockingIOError, InterruptedError):
                break
            taken += 1
            if address[2] == _PACKET_OUTGOING:
                self.frames += 1
                self.outgoing += 1
                continue
            t = 0
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= 16:
                    seconds, nanoseconds = struct.unpack_from("qq", payload)
                    t = seconds * 1_000_000_000 + nanoseconds
            # recvmsg truncates to SNAPLEN; the IP header's lengths say the rest.
            self.add_frame(data, _wire_length(data), t)
        stats = sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8)
        self.drops += struct.unpack("II", stats)[1]
        return taken

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _wire_length(data: bytes) -> int:
    """The frame's length on the wire from its IP header (``recvmsg`` gives
    only what fits the buffer; the ring gives ``tp_len``)."""
    if len(data) >= 4 and data[0] >> 4 == 4:
        # A super-packet's total length is 0: unknown here, so the frame is
        # refused as malformed (P4) and its bytes fall back (P8).
        return int.from_bytes(data[2:4], "big") or len(data)
    if len(data) >= 6 and data[0] >> 4 == 6:
        return int.from_bytes(data[4:6], "big") + 40
    return len(data)
