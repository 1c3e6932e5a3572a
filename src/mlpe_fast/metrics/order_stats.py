"""Exact order statistics of samples read a block at a time (issue 23).

A point's percentiles are exact (spec §1.3: ``numpy.percentile(...,
method="lower")``, the k-th smallest sample), and a sort or a partition
needs every sample in memory at once: 8 MB a series at a million requests,
and a copy.  A :class:`Sample` gives its samples a block at a time instead,
afresh on each call of :meth:`Sample.blocks` (from the records' columns,
or a per-record array, filtered as it is read), and :func:`order_statistics`
finds the k-th smallest of them in a few passes, holding one block and
65,536 counts:

* every sample maps to a 64-bit key that sorts as the sample does (an
  int64 with its sign bit flipped; a float64's bits with the sign bit set
  when positive, all bits flipped when negative);
* a pass counts the keys by their next 16 bits among those that share the
  bits found so far; the counts say which 16 bits the k-th key has and its
  rank among the keys that share them;
* once at most :data:`GATHER` keys share the bits found, a last pass
  gathers them and numpy's partition picks the k-th.  With 64 bits found
  the key is the sample.

So a rank takes at most five passes, typically three (the top 16 bits of a
latency are its exponent and 4 bits of mantissa; 16 more leave a few
samples a bucket); ranks that share their bits share the passes.  A sample
of at most :data:`GATHER` items is gathered in one pass and handed to
numpy as before, so small points compute what they always did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = ("GATHER", "Sample", "lower_ranks", "order_statistics")

#: At most this many samples are gathered and selected by numpy at once
#: (512 KiB of keys); more are narrowed by counting passes first.
GATHER: Final = 65_536

_SIGN = np.uint64(1 << 63)
_DIGIT_BITS = 16
_DIGITS = 1 << _DIGIT_BITS


class Sample:
    """Samples of one dtype (int64 or float64) read a block at a time:
    ``blocks()`` yields them afresh on every call, in the same order, as
    1-d arrays.  ``len()`` counts them (one pass, remembered)."""

    __slots__ = ("_blocks", "_count", "dtype")

    def __init__(
        self, blocks: Callable[[], Iterable[npt.NDArray[Any]]], dtype: npt.DTypeLike
    ) -> None:
        self._blocks = blocks
        self.dtype = np.dtype(dtype)
        self._count: int | None = None

    @classmethod
    def of(cls, values: npt.NDArray[Any]) -> Sample:
        """The samples of an array in memory, as one block."""
        return cls(lambda: (values,), values.dtype)

    def blocks(self) -> Iterator[npt.NDArray[Any]]:
        for block in self._blocks():
            yield block.astype(self.dtype, copy=False)

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(int(block.size) for block in self.blocks())
        return self._count

    def to_numpy(self) -> npt.NDArray[Any]:
        """Every sample in one array (what a caller that needs them all at
        once, and a test, reads)."""
        parts = list(self.blocks())
        return np.concatenate(parts) if parts else np.zeros(0, self.dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> npt.NDArray[Any]:
        values = self.to_numpy()
        return values if dtype is None else values.astype(dtype)


def lower_ranks(n: int, percentiles: Sequence[float]) -> list[int]:
    """The 0-based ranks ``numpy.percentile(values, percentiles,
    method="lower")`` takes of ``n`` samples: ``floor((n - 1) * (p / 100))``
    in float64, numpy's own arithmetic (``tests/unit/test_order_stats.py``
    holds the two equal)."""
    quantiles = np.true_divide(np.asarray(percentiles, dtype=np.float64), 100)
    ranks: list[int] = np.floor((n - 1) * quantiles).astype(np.intp).tolist()
    return ranks


def _keys(values: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
    """Keys that sort as ``values`` do (module doc)."""
    if values.dtype.kind == "f":
        bits = values.astype(np.float64, copy=False).view(np.uint64)
        keys: npt.NDArray[np.uint64] = np.where(bits & _SIGN, ~bits, bits | _SIGN)
        return keys
    flipped: npt.NDArray[np.uint64] = values.astype(np.int64, copy=False).view(np.uint64) ^ _SIGN
    return flipped


def _value(key: int, dtype: np.dtype[Any]) -> Any:
    """The sample of a key (:func:`_keys` backwards), as a numpy scalar."""
    bits = np.array([key], np.uint64)
    if dtype.kind == "f":
        bits = np.where(bits & _SIGN, bits ^ _SIGN, ~bits)
        return bits.view(np.float64)[0]
    return (bits ^ _SIGN).view(np.int64)[0]


class _Group:
    """Ranks whose keys share their top ``known`` bits, ``prefix``;
    ``count`` keys do.  ``within``: each rank among those keys."""

    __slots__ = ("count", "known", "parts", "prefix", "ranks", "within")

    def __init__(self, prefix: int, known: int, count: int) -> None:
        self.prefix, self.known, self.count = prefix, known, count
        self.ranks: list[int] = []
        self.within: list[int] = []
        self.parts: list[npt.NDArray[np.uint64]] = []

    def members(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        if self.known == 0:
            return keys
        shared = keys >> np.uint64(64 - self.known) == np.uint64(self.prefix)
        found: npt.NDArray[np.uint64] = keys[shared]
        return found


def order_statistics(sample: Sample, ranks: Iterable[int]) -> dict[int, Any]:
    """The ``k``-th smallest sample (0-based) for each ``k`` in ``ranks``,
    exactly (module doc), as numpy scalars of the sample's dtype.

    Raises:
        ValueError: a rank is outside the sample, or the blocks changed
            between passes.
    """
    wanted = sorted(set(ranks))
    if not wanted:
        return {}
    n = len(sample)
    if wanted[0] < 0 or wanted[-1] >= n:
        raise ValueError(f"ranks {wanted[0]}..{wanted[-1]} outside {n} samples")
    start = _Group(0, 0, n)
    start.ranks, start.within = wanted, list(wanted)
    groups = [start]
    found: dict[int, Any] = {}
    while groups:
        counts = {id(g): np.zeros(_DIGITS, np.int64) for g in groups if g.count > GATHER}
        seen = 0
        for block in sample.blocks():
            keys = _keys(block)
            seen += int(keys.size)
            for group in groups:
                members = group.members(keys)
                if group.count <= GATHER:
                    group.parts.append(members)
                else:
                    shift = np.uint64(64 - group.known - _DIGIT_BITS)
                    digits = ((members >> shift) & np.uint64(_DIGITS - 1)).astype(np.intp)
                    counts[id(group)] += np.bincount(digits, minlength=_DIGITS)
        if seen != n:
            raise ValueError(f"the sample gave {seen} items, then {n}")
        narrower: dict[tuple[int, int], _Group] = {}
        for group in groups:
            if group.count <= GATHER:
                keys = np.concatenate(group.parts) if group.parts else np.zeros(0, np.uint64)
                if keys.size != group.count:
                    raise ValueError("the sample's blocks changed between passes")
                picked = np.partition(keys, group.within)
                for rank, k in zip(group.ranks, group.within, strict=True):
                    found[rank] = _value(int(picked[k]), sample.dtype)
                continue
            cumulative = np.cumsum(counts[id(group)])
            if int(cumulative[-1]) != group.count:
                raise ValueError("the sample's blocks changed between passes")
            known = group.known + _DIGIT_BITS
            for rank, k in zip(group.ranks, group.within, strict=True):
                digit = int(np.searchsorted(cumulative, k, side="right"))
                below = int(cumulative[digit - 1]) if digit else 0
                prefix = (group.prefix << _DIGIT_BITS) | digit
                if known == 64:  # every bit found: the key is the sample
                    found[rank] = _value(prefix, sample.dtype)
                    continue
                child = narrower.get((prefix, known))
                if child is None:
                    child = narrower[prefix, known] = _Group(
                        prefix, known, int(cumulative[digit]) - below
                    )
                child.ranks.append(rank)
                child.within.append(k - below)
        groups = list(narrower.values())
    return found
