"""The segment map (``csrc/mlpe_pktstamp.h`` P4-P9) on both implementations:
frames built here, byte by byte, as a packet socket hands them over (from
the IP header on), so every rule is checked without a capture.

Frames come from the endpoint 10.0.0.1:8000 (or [fd00::1]:8000) to local
port 40000 unless said otherwise.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlpe_fast._native import USE_EXTENSIONS
from mlpe_fast.engine import _pktstamp_py

IMPLEMENTATIONS: list[Any] = [_pktstamp_py]
if USE_EXTENSIONS:
    from mlpe_fast.engine import _pktstamp_c

    IMPLEMENTATIONS.append(_pktstamp_c)

STAMPED, UNKNOWN, LOST, MISSED = 0, 1, 2, 3
SYN, ACK, PSH = 0x02, 0x10, 0x08
SERVER, SERVER6, PORT, LOCAL = "10.0.0.1", "fd00::1", 8000, 40000


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda m: m.__name__.rsplit("_", 1)[-1])
def impl(request: pytest.FixtureRequest) -> Any:
    return request.param


def tcp(seq: int, flags: int = ACK | PSH, src_port: int = PORT, dst_port: int = LOCAL) -> bytes:
    return struct.pack(
        "!HHIIBBHHH", src_port, dst_port, seq & 0xFFFFFFFF, 0, 5 << 4, flags, 0, 0, 0
    )


def frame4(
    seq: int, length: int, flags: int = ACK | PSH, src: str = SERVER, **ports: int
) -> tuple[bytes, int]:
    """A truncated IPv4 frame (headers only, as the filter keeps) and its
    wire length; past 64 KiB a BIG TCP super-packet (total length 0, P4)."""
    total = 20 + 20 + length
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        total if total <= 0xFFFF else 0,
        0,
        0x4000,
        64,
        6,
        0,
        bytes(map(int, src.split("."))),
        bytes([10, 0, 0, 2]),
    )
    return ip + tcp(seq, flags, **ports), total


def frame6(seq: int, length: int, flags: int = ACK | PSH) -> tuple[bytes, int]:
    import ipaddress

    ip = struct.pack(
        "!IHBB16s16s",
        6 << 28,
        20 + length,
        6,
        64,
        ipaddress.ip_address(SERVER6).packed,
        ipaddress.ip_address("fd00::2").packed,
    )
    return ip + tcp(seq, flags), 40 + 20 + length


def connect(m: Any, isn: int, make: Any = frame4) -> None:
    data, wire = make(isn, 0, SYN | ACK)
    assert m.add_frame(data, wire, 1)


def add(m: Any, isn: int, offset: int, length: int, t: int, make: Any = frame4) -> None:
    data, wire = make(isn + 1 + offset, length)
    assert m.add_frame(data, wire, t)


def runs(m: Any, start: int, end: int, remote: str = SERVER) -> list[tuple[int, int, int]]:
    return [tuple(r) for r in m.runs(LOCAL, remote, PORT, start, end)]


def test_in_order_segments_map_to_their_offsets(impl: Any) -> None:
    m = impl.SegmentMap()
    connect(m, 1000)
    add(m, 1000, 0, 100, 10)
    add(m, 1000, 100, 50, 20)
    add(m, 1000, 150, 10, 30)
    assert runs(m, 0, 160) == [(100, 10, STAMPED), (50, 20, STAMPED), (10, 30, STAMPED)]
    assert runs(m, 120, 155) == [(30, 20, STAMPED), (5, 30, STAMPED)]


def test_out_of_order_segments_are_placed_by_sequence_number(impl: Any) -> None:
    m = impl.SegmentMap()
    connect(m, 5)
    add(m, 5, 100, 100, 10)  # the later bytes came first
    add(m, 5, 0, 100, 20)
    assert runs(m, 0, 200) == [(100, 20, STAMPED), (100, 10, STAMPED)]


def test_a_retransmit_keeps_the_earliest_stamp_per_byte(impl: Any) -> None:
    m = impl.SegmentMap()
    connect(m, 0)
    add(m, 0, 0, 100, 10)
    add(m, 0, 50, 100, 30)  # overlaps the first half of its range
    add(m, 0, 0, 150, 40)  # a full retransmit, later: changes nothing
    add(m, 0, 120, 10, 5)  # a duplicate stamped earlier (reordered stamps)
    assert runs(m, 0, 150) == [
        (100, 10, STAMPED),
        (20, 30, STAMPED),
        (10, 5, STAMPED),
        (20, 30, STAMPED),
    ]


def test_sequence_numbers_wrap_at_two_to_the_32(impl: Any) -> None:
    m = impl.SegmentMap()
    isn = 0xFFFFFF00
    connect(m, isn)
    add(m, isn, 0, 200, 10)  # spans the wrap: seq 0xFFFFFF01 .. 0x000000C8
    add(m, isn, 200, 100, 20)
    assert runs(m, 0, 300) == [(200, 10, STAMPED), (100, 20, STAMPED)]
    # Far past the first wrap: offsets stay 64-bit as long as segments keep up.
    offset = 200
    for i in range(5):
        m.consume_to(LOCAL, SERVER, PORT, offset)
        add(m, isn, offset + 100, 1 << 30, 100 + i)
        offset += 100 + (1 << 30)
        add(m, isn, offset - (1 << 30) - 100, 100, 100 + i)
    assert runs(m, offset - 100, offset) == [(100, 104, STAMPED)]


def test_a_hole_falls_back_as_missed_or_lost(impl: Any) -> None:
    m = impl.SegmentMap()
    connect(m, 0)
    add(m, 0, 0, 10, 1)
    add(m, 0, 20, 10, 3)
    assert runs(m, 0, 40) == [(10, 1, STAMPED), (10, 0, MISSED), (10, 3, STAMPED), (10, 0, MISSED)]
    m.note_drops(2)  # the ring dropped frames: holes are losses now
    assert runs(m, 0, 40) == [(10, 1, STAMPED), (10, 0, LOST), (10, 3, STAMPED), (10, 0, LOST)]


def test_a_port_without_its_syn_ack_is_unknown(impl: Any) -> None:
    m = impl.SegmentMap()
    add(m, 0, 0, 10, 1)
    assert runs(m, 0, 10) == [(10, 0, UNKNOWN)]
    assert m.stats["unknown"] == 1
    connect(m, 0)
    assert runs(m, 0, 10, remote="10.0.0.9") == [(10, 0, UNKNOWN)]  # another remote: not ours


def test_a_new_syn_ack_on_a_port_starts_a_new_stream(impl: Any) -> None:
    m = impl.SegmentMap()
    connect(m, 100)
    add(m, 100, 0, 10, 1)
    connect(m, 100)  # the same SYN-ACK again: a retransmit, nothing changes
    assert runs(m, 0, 10) == [(10, 1, STAMPED)]
    connect(m, 9000)  # a new connection on the port (reuse)
    add(m, 9000, 0, 5, 7)
    assert runs(m, 0, 10) == [(5, 7, STAMPED), (5, 0, MISSED)]


def test_consumed_bytes_are_freed_and_never_stored_again(impl: Any) -> None:
    m = impl.SegmentMap()
    connect(m, 0)
    add(m, 0, 0, 100, 1)
    m.consume_to(LOCAL, SERVER, PORT, 60)
    add(m, 0, 0, 60, 0)  # a late duplicate of consumed bytes, stamped earlier
    assert runs(m, 50, 100) == [(10, 0, MISSED), (40, 1, STAMPED)]
    add(m, 0, 40, 30, 0)  # partly consumed: only its unconsumed bytes count
    assert runs(m, 50, 100) == [(10, 0, MISSED), (10, 0, STAMPED), (30, 1, STAMPED)]


def test_a_connection_past_its_span_limit_loses_what_it_cannot_keep(impl: Any) -> None:
    m = impl.SegmentMap()
    connect(m, 0)
    for i in range(impl.MAX_SPANS + 10):  # every other byte: no two spans merge
        add(m, 0, 2 * i, 1, i + 1)
    got = runs(m, 2 * impl.MAX_SPANS - 2, 2 * impl.MAX_SPANS + 2)
    assert got[0] == (1, impl.MAX_SPANS, STAMPED)
    assert got[-1][2] == LOST
    m.consume_to(LOCAL, SERVER, PORT, 2 * impl.MAX_SPANS + 40)  # caught up: stored again
    add(m, 0, 2 * impl.MAX_SPANS + 40, 5, 99)
    assert runs(m, 2 * impl.MAX_SPANS + 40, 2 * impl.MAX_SPANS + 45) == [(5, 99, STAMPED)]


def test_ipv6_segments_map_alike(impl: Any) -> None:
    m = impl.SegmentMap()
    connect(m, 77, frame6)
    add(m, 77, 0, 30, 4, frame6)
    assert runs(m, 0, 30, remote=SERVER6) == [(30, 4, STAMPED)]


def test_frames_that_are_not_tcp_segments_are_skipped_and_broken_ones_counted(impl: Any) -> None:
    m = impl.SegmentMap()
    data, wire = frame4(0, 10)
    udp = data[:9] + b"\x11" + data[10:]
    fragment = data[:6] + b"\x20\x00" + data[8:]
    assert impl.parse_frame(udp, wire) is None and impl.parse_frame(fragment, wire) is None
    assert not m.add_frame(udp, wire, 1) and not m.add_frame(fragment, wire, 1)
    for broken in (data[:30], data[:19], b"", data[:20] + b"\x00" * 12 + b"\x10" + data[33:]):
        with pytest.raises(ValueError):
            impl.parse_frame(broken, wire)
    with pytest.raises(ValueError):  # longer than the wire says
        impl.parse_frame(data, 30)
    assert m.add_frame(data[:25], wire, 1) is False
    assert m.stats["malformed"] == 1
    family, flags, src, sport, _, dport, seq, length = impl.parse_frame(data, wire)
    assert (family, flags, src, sport, dport, seq, length) == (
        4,
        ACK | PSH,
        bytes([10, 0, 0, 1]),
        PORT,
        LOCAL,
        0,
        10,
    )


FRAMES = st.lists(
    st.tuples(st.integers(0, 300), st.integers(0, 120), st.integers(1, 50)), max_size=30
)


@pytest.mark.skipif(not USE_EXTENSIONS, reason="compares the compiled map with the twin")
@settings(max_examples=150, deadline=None)
@given(isn=st.integers(0, 0xFFFFFFFF), segments=FRAMES, cut=st.integers(0, 400))
def test_the_compiled_map_equals_the_twin(
    isn: int, segments: list[tuple[int, int, int]], cut: int
) -> None:
    maps = [impl.SegmentMap() for impl in IMPLEMENTATIONS]
    for m in maps:
        connect(m, isn)
        for offset, length, t in segments:
            add(m, isn, offset, length, t)
        m.consume_to(LOCAL, SERVER, PORT, cut // 4)
    got = [runs(m, cut // 4, cut + 50) for m in maps]
    assert got[0] == got[1]
    # Every byte has its earliest stamp among the segments that held it.
    for position in range(cut // 4, cut + 50):
        stamps = [t for offset, length, t in segments if offset <= position < offset + length]
        pos = cut // 4
        for length, t, why in got[0]:
            if pos <= position < pos + length:
                assert (t if why == STAMPED else None) == (min(stamps) if stamps else None)
            pos += length
