"""The layout of the gap histogram a response decoder keeps (rule R12 of
``csrc/mlpe_response.h``): which bucket a gap between two content-bearing
events falls in, and which gaps a bucket holds.

Log-linear, as HdrHistogram cuts time:
a gap below 16 ns is its own bucket, exact; every power of two
``[2^m, 2^(m+1))`` above is cut into 16 equal buckets, so a bucket is at
most 1/16 of the smallest gap in it wide, and the midpoint of a bucket is
within 1/32 (3.1 %) of every gap in it (:data:`RELATIVE_ERROR`).  Gaps of
``2^40`` ns (18.3 minutes) and more share the last bucket.  592 buckets of
32-bit counts: 2.3 KiB per response being decoded, whatever its length.

The constants and :func:`bucket_of` are those of the C core
(``MLPE_GAP_*``, ``mlpe_gap_bucket``); the pure-Python decoder uses them,
and the tests check both against each other.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

__all__ = (
    "BUCKETS",
    "MAX_LOG2",
    "RELATIVE_ERROR",
    "SUB",
    "bucket_lower",
    "bucket_midpoint",
    "bucket_of",
    "bucket_upper",
    "pack_buckets",
    "unpack_buckets",
)

SUB_BITS = 4
SUB = 1 << SUB_BITS  # buckets per power of two
MAX_LOG2 = 40  # gaps of 2**MAX_LOG2 ns and more: the last bucket
BUCKETS = SUB * (MAX_LOG2 - SUB_BITS + 1)
#: How far a bucket's midpoint may be from a gap in it, relative to the gap
#: (half a bucket's width over its lower bound), below the last bucket.
RELATIVE_ERROR = 1 / (2 * SUB)

_PAIR = struct.Struct("<II")


def bucket_of(gap_ns: int) -> int:
    """The bucket of a gap of ``gap_ns`` >= 0 ns."""
    if gap_ns < SUB:
        return gap_ns
    m = gap_ns.bit_length() - 1
    if m >= MAX_LOG2:
        return BUCKETS - 1
    return SUB * (m - SUB_BITS + 1) + (gap_ns >> (m - SUB_BITS)) - SUB


def bucket_lower(index: int) -> int:
    """The smallest gap of bucket ``index``."""
    if index < SUB:
        return index
    octave, k = divmod(index, SUB)
    return (SUB + k) << (octave - 1)


def bucket_upper(index: int) -> int:
    """One past the largest gap of bucket ``index`` (the last bucket's
    gaps go on: it is its width that is given)."""
    if index < SUB:
        return index + 1
    return bucket_lower(index) + (1 << (index // SUB - 1))


def bucket_midpoint(index: int) -> float:
    """The value a bucket stands for: exact below 16 ns (one gap wide),
    else the middle of its gaps."""
    if index < SUB:
        return float(index)
    return (bucket_lower(index) + bucket_upper(index) - 1) / 2


def pack_buckets(counts: Iterable[tuple[int, int]]) -> bytes:
    """``TokenGaps.buckets`` of (index, count) pairs in ascending order."""
    return b"".join(_PAIR.pack(index, count) for index, count in counts)


def unpack_buckets(data: bytes) -> Iterator[tuple[int, int]]:
    """The (index, count) pairs of ``TokenGaps.buckets``."""
    return _PAIR.iter_unpack(data)
