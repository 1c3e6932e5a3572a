"""A point's records as compact columns (issue 23: memory flat in run length).

A :class:`~.record.RequestRecord` as a Python object costs about 1.3 KB once
its texts are gone: the two structs, each stamp an int object, the
``usage`` dict, the sample id.  A point of a million requests would hold
1.3 GB for figures that need a few numbers per request.  So a point keeps
each record as one row of typed arrays (``array``: eight bytes a stamp or
count, four a small code), packed as the record completes and moved to the
arrays a block of rows at a time, and the
figures read the columns with numpy; the texts were counted and logged
before (``point/performance.py``).

What is rare or repeats is kept beside the columns, bounded:

* strings that repeat (error classes, finish reasons, error messages) as
  small int codes into a table; an error class keeps its first
  :data:`MESSAGES_PER_CLASS` distinct messages and counts the rest
  (``messages_dropped``), so an endpoint that puts a request id in every
  error does not grow the table by one string a request;
* the sample id, 32 hex digits (``Client.new_sample_id``), as its 16 bytes;
  any other id as itself;
* ``usage`` by its keys: a flat object of integers (what OpenAI-compatible
  servers send) as a key tuple's code and one int64 per value, anything
  else encoded as msgpack (or kept as itself, past msgpack's integers);
  the official counts (``completion_tokens``,
  ``prompt_tokens``) also in columns of their own, for the cross-check and
  the answer checks;
* the gap histogram (``TokenGaps``, a few 8-byte buckets) in one shared
  buffer; the first :data:`CHUNK_ERRORS_KEPT` first chunk errors;
  ``chunk_times`` (only kept when a client asked for one stamp per event).

Every per-row store (the stamp and small columns, the ids, the usage
values, the gap buckets and their ends, the packed usage) is a
:class:`~.spill.SpilledArray`: the last :data:`MEMORY_ROWS` rows in memory,
the older ones in blocks of an anonymous temporary file (``TMPDIR``, or
``spill_dir``), so that a point holds the same memory from its 10,000th
request to its 1,000,000th (issue 23).  The file is made at the first
spill (a point of fewer rows never makes one) and its bytes go when the
store is closed (:meth:`RecordColumns.close`), dropped, or the process
ends.  What stays in memory beside the tails is bounded or rare: the string
tables and usage key tuples (above), 16 bytes a spilled block, and three
maps keyed by row that only odd records enter: ids that are not 32 hex
digits, ``usage`` past msgpack's integers, and ``chunk_times``.  If the
file cannot take a block (no room in ``TMPDIR``), the rows stay in memory
from then on and :attr:`RecordColumns.spill_error` says why: the figures
are the same, only the memory is not bounded.

The store is a ``Sequence[RequestRecord]``: ``columns[i]`` builds the
record back, equal to ``record.without_texts()`` (every stamp, count, flag
and ``usage`` as they were; a message past the bound reads as a note
saying so); iterating or slicing reads the rows a block at a time.
``keep_whole=True`` keeps the records themselves as well, for a run that
reads its answers again (an agentic run's turns, bounded by its
trajectories).  The store stays in the process that made it: the engines
send records, not stores (``scale/driver.py``), and it does not pickle.
"""

from __future__ import annotations

import struct
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

import msgspec
import numpy as np
import numpy.typing as npt

from ..wire.events import ChunkError, ResponseSummary, TokenGaps
from ..wire.gaps import BUCKETS
from .record import RequestRecord
from .spill import SpilledArray, SpillGroup

__all__ = (
    "BLOCK_ROWS",
    "CHUNK_ERRORS_KEPT",
    "ColumnBlock",
    "COLUMNS",
    "MEMORY_ROWS",
    "MESSAGES_PER_CLASS",
    "NONE",
    "RecordColumns",
    "as_columns",
)

#: The int64 that stands for None in a stamp column (no stamp is negative
#: on ``CLOCK_MONOTONIC``, nor is any count).
NONE = -(2**63)

#: Distinct error messages kept per error class (the rest counted).
MESSAGES_PER_CLASS = 16

#: First chunk errors kept (records past it read ``first_chunk_error=None``;
#: ``chunk_errors`` counts them all either way).
CHUNK_ERRORS_KEPT = 64

#: A message past :data:`MESSAGES_PER_CLASS`, as a record built back reads it.
DROPPED_MESSAGE = "(message not kept: more distinct messages of this error class than kept)"

#: Rows each store keeps in memory before it writes them to its file as a
#: block: 64 KiB an int64 column, a write the kernel takes in one go, and
#: about 2 MB for all the columns (some 250 B a row), a few percent of
#: what the connections of a concurrency-1,024 point hold; a point of
#: fewer requests never makes a file.
MEMORY_ROWS = 8192

#: Bytes a row of the budget gives the variable-width stores (usage
#: values, packed usage, gap buckets), each of which spills on its own
#: past ``memory_rows`` times this (128 KiB at the default), whatever one
#: record puts there.
_VARIABLE_BYTES_PER_ROW = 16

#: Rows read at a time when iterating, slicing or summing buckets.
_READ_ROWS = 4096

#: Rows a figure reads at a time when it goes a block at a time
#: (:meth:`RecordColumns.blocks`): 512 KiB an int64 column, so a figure's
#: working set stays a few MB however long the point ran.
BLOCK_ROWS = 65_536

_NO_CODE = -1  # None in a code column
_DROPPED = -2  # a message past the bound

# flags
_DONE, _COMPLETE, _KEEP_ALIVE, _KERNEL, _GAPS, _ID_HEX = 1, 2, 4, 8, 16, 32
_FLAGS = {
    "done": _DONE,
    "complete": _COMPLETE,
    "keep_alive": _KEEP_ALIVE,
    "kernel_stamps": _KERNEL,
    "gaps": _GAPS,
}

# usage: the schema code column's values besides a key tuple's index
_USAGE_NONE, _USAGE_PACKED, _USAGE_ODD = -1, -2, -3

#: The int64 stamp and count columns, in the order a row is appended.
_STAMPS = (
    "sample_index",
    "t_sched",
    "t_issue",
    "t_end",
    "connect_ns",
    "t_first_read",
    "t_done_read",
    "t_head",
    "t_first",
    "t_done",
    "t_first_content",
    "t_second",
    "unexpected_bytes",
    "gaps_sum_ns",
    "gaps_min_ns",
    "gaps_max_ns",
    "usage_completion_tokens",
    "usage_prompt_tokens",
    "usage_at",
)
_USAGE_AT = _STAMPS.index("usage_at")

#: The int32 code and small-count columns.
_SMALL = (
    "status",
    "events",
    "content_events",
    "events_after_done",
    "chunk_errors",
    "retries",
    "endpoint",
    "segment_stamp",
    "first_read_later_bytes",
    "error_code",
    "error_class",
    "error_message",
    "response_error_message",
    "finish_reason",
    "usage_schema",
    "gaps_count",
    "gaps_zero",
    "flags",
)


#: Every column :meth:`RecordColumns.column` gives.
COLUMNS = _STAMPS + _SMALL

# A row as appended: one ``struct.pack`` of every stamp and small column
# into a row buffer, moved to the columns' tails a block at a time
# (:meth:`RecordColumns._settle`).  One call a row instead of an
# ``array.append`` a column (issue 23: the 37 appends took 3.7 µs of a
# record's 9.3); the struct checks each value's range as the arrays did.
_ROW = struct.Struct("=" + "q" * len(_STAMPS) + "i" * len(_SMALL))
_ROW_DTYPE = np.dtype([(name, "=i8") for name in _STAMPS] + [(name, "=i4") for name in _SMALL])
assert _ROW_DTYPE.itemsize == _ROW.size

#: Rows the row buffer holds before they are moved to the columns (or
#: before, at a spill or any read): 224 KiB.
_SETTLE_ROWS = 1024


def move_rows(rows: bytearray, tails: Sequence[array[int]]) -> None:
    """Appends the rows packed in ``rows`` (:data:`_ROW`) to the column
    arrays ``tails`` (:data:`COLUMNS`' order), a column at a time, and
    empties ``rows``."""
    block = np.frombuffer(rows, _ROW_DTYPE)
    for tail, name in zip(tails, COLUMNS, strict=True):
        tail.frombytes(block[name].tobytes())
    del block  # the buffer's export, before it is cleared
    rows.clear()


def _back(value: int) -> int | None:
    return None if value == NONE else value


def _official(usage: dict[str, Any] | None, key: str) -> int:
    """An official usage count as its column holds it: an int, else NONE."""
    value: Any = usage.get(key) if usage else None
    if type(value) is not int or not NONE < value < 2**63:  # not an int64 (bool neither)
        return NONE
    return value


class _Strings:
    """Interned strings: code -> string, and back."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, value: str) -> int:
        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self.values)
            self.values.append(value)
        return code

    def known(self, value: str) -> int | None:
        return self._codes.get(value)


class RecordColumns(Sequence[RequestRecord]):
    """A point's records, one row of typed columns each (module doc).

    ``memory_rows``: the rows each store keeps in memory before it spills
    them (None: :data:`MEMORY_ROWS`, read as the store is made);
    ``spill_dir``: where the spill file is made
    (None: ``TMPDIR``).
    """

    def __init__(
        self,
        records: Iterable[RequestRecord] = (),
        *,
        keep_whole: bool = False,
        memory_rows: int | None = None,
        spill_dir: str | None = None,
    ) -> None:
        if memory_rows is None:
            memory_rows = MEMORY_ROWS
        if memory_rows < 1:
            raise ValueError(f"memory_rows must be at least 1, not {memory_rows}")
        self._spill_dir = spill_dir
        self._memory_rows = memory_rows
        self._memory_bytes = memory_rows * _VARIABLE_BYTES_PER_ROW
        #: Why rows stopped being spilled (None: they never did).
        self.spill_error: str | None = None
        self._stamp_stores = {name: SpilledArray("q") for name in _STAMPS}
        self._small_stores = {name: SpilledArray("i") for name in _SMALL}
        self._ids = SpilledArray("B")  # 16 bytes a record whose id is 32 hex digits
        self._bucket_ends = SpilledArray("q")
        # the stores of fixed width, spilled together every memory_rows rows
        self._group = SpillGroup(
            (
                *self._stamp_stores.values(),
                *self._small_stores.values(),
                self._ids,
                self._bucket_ends,
            ),
            (1,) * (len(_STAMPS) + len(_SMALL)) + (16, 1),
            memory_rows,
            spill_dir,
        )
        # their tails, appended to directly (the same arrays for the stores' life)
        self._tails = tuple(
            store.tail for store in (*self._stamp_stores.values(), *self._small_stores.values())
        )
        self._rows = bytearray()  # rows packed, not yet in the tails (_ROW)
        self._settle_bytes = _ROW.size * min(_SETTLE_ROWS, memory_rows)
        self._ends_tail = self._bucket_ends.tail
        self._other_ids: dict[int, str] = {}
        self._classes = _Strings()  # error classes and finish reasons
        self._messages = _Strings()
        self._kept_per_class: dict[int, int] = {}  # distinct messages kept per class
        self.messages_dropped = 0
        self._usage_keys: list[tuple[str, ...]] = []
        self._usage_codes: dict[tuple[str, ...], int] = {}
        self._usage_values = SpilledArray("q", spill_dir)
        self._packed = SpilledArray("B", spill_dir)
        self._odd_usage: list[dict[str, Any]] = []
        self._buckets = SpilledArray("B", spill_dir)
        self._variable = (self._usage_values, self._packed, self._buckets)  # a file each
        self._chunk_errors: dict[int, ChunkError] = {}
        self._chunk_times: dict[int, tuple[int, ...]] = {}
        self._whole: list[RequestRecord] | None = [] if keep_whole else None
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder()
        for record in records:
            self.append(record)

    # -- appending

    def append(self, record: RequestRecord) -> None:
        """One completed record's row (its texts are not kept)."""
        index = len(self._bucket_ends)
        response = record.response
        usage = response.usage
        gaps = response.gaps
        error_class = (
            _NO_CODE if record.error_class is None else self._classes.code(record.error_class)
        )
        finish = (
            _NO_CODE
            if response.finish_reason is None
            else self._classes.code(response.finish_reason)
        )
        flags = (
            (_DONE if response.done else 0)
            | (_COMPLETE if response.complete else 0)
            | (_KEEP_ALIVE if response.keep_alive else 0)
            | (_KERNEL if record.kernel_stamps else 0)
            | (_GAPS if gaps is not None else 0)
        )
        sample_id = record.sample_id
        raw = _hex_id(sample_id)
        if raw is not None:
            flags |= _ID_HEX
        usage_at = len(self._usage_values)
        schema = self._usage(usage)
        row = _ROW.pack(
            # the stamps (_STAMPS' order)
            record.sample_index,
            record.t_sched,
            record.t_issue,
            record.t_end,
            record.connect_ns,
            NONE if (t_first_read := record.t_first_read) is None else t_first_read,
            NONE if (t_done_read := record.t_done_read) is None else t_done_read,
            NONE if (t_head := response.t_head) is None else t_head,
            NONE if (t_first := response.t_first) is None else t_first,
            NONE if (t_done := response.t_done) is None else t_done,
            NONE if (t_content := response.t_first_content) is None else t_content,
            NONE if (t_second := response.t_second) is None else t_second,
            response.unexpected_bytes,
            0 if gaps is None else gaps.sum_ns,
            0 if gaps is None else gaps.min_ns,
            0 if gaps is None else gaps.max_ns,
            _official(usage, "completion_tokens"),
            _official(usage, "prompt_tokens"),
            usage_at,
            # the small columns (_SMALL's order)
            response.status,
            response.events,
            response.content_events,
            response.events_after_done,
            response.chunk_errors,
            record.retries,
            record.endpoint,
            record.segment_stamp,
            record.first_read_later_bytes,
            response.error_code,
            error_class,
            self._message(error_class, record.error_message),
            self._message(error_class, response.error_message),
            finish,
            schema,
            0 if gaps is None else gaps.count,
            0 if gaps is None else gaps.zero,
            flags,
        )
        if raw is None:
            self._other_ids[index] = sample_id
            self._ids.tail.frombytes(bytes(16))
        else:
            self._ids.tail.frombytes(raw)
        buckets = self._buckets
        if gaps is not None and gaps.buckets:
            buckets.tail.frombytes(gaps.buckets)
            if len(buckets.tail) >= self._memory_bytes:
                self._spill(buckets.spill)
        self._ends_tail.append(len(buckets))
        if response.first_chunk_error is not None and len(self._chunk_errors) < CHUNK_ERRORS_KEPT:
            self._chunk_errors[index] = response.first_chunk_error
        if response.chunk_times is not None:
            self._chunk_times[index] = response.chunk_times
        rows = self._rows
        rows += row
        if len(self._ends_tail) >= self._memory_rows:
            self._settle()
            self._spill(self._group.spill)
        elif len(rows) >= self._settle_bytes:
            self._settle()
        if self._whole is not None:
            self._whole.append(record)

    def _settle(self) -> None:
        """Moves the packed rows to the columns' tails."""
        if self._rows:
            move_rows(self._rows, self._tails)

    @property
    def _stamps(self) -> dict[str, SpilledArray]:
        """The stamp columns, every row in them (read paths only)."""
        self._settle()
        return self._stamp_stores

    @property
    def _small(self) -> dict[str, SpilledArray]:
        """The small columns, every row in them (read paths only)."""
        self._settle()
        return self._small_stores

    def _spill(self, spill: Callable[[], None]) -> None:
        """Moves tails to their file; if it cannot take them, keeps every
        row in memory from then on (module doc)."""
        try:
            spill()
        except OSError as error:
            where = self._spill_dir or tempfile.gettempdir()
            self.spill_error = f"records kept in memory: cannot write to {where}: {error}"
            self._memory_rows = self._memory_bytes = 2**62  # no second try a row

    def _message(self, error_class: int, message: str | None) -> int:
        """A message's code: kept if already known, or if its class keeps
        fewer than :data:`MESSAGES_PER_CLASS`; else counted as dropped."""
        if message is None:
            return _NO_CODE
        code = self._messages.known(message)
        if code is not None:  # kept already: its code costs nothing more
            return code
        kept = self._kept_per_class.setdefault(error_class, 0)
        if message and kept >= MESSAGES_PER_CLASS:
            self.messages_dropped += 1
            return _DROPPED
        if message:  # "" (no message) is never counted against the bound
            self._kept_per_class[error_class] = kept + 1
        return self._messages.code(message)

    def _usage(self, usage: dict[str, Any] | None) -> int:
        if usage is None:
            return _USAGE_NONE
        values = self._usage_values.tail
        flat = _ints_only(usage)
        if flat:
            start = len(values)
            try:
                values.extend(usage.values())
            except OverflowError:  # past int64: packed below
                del values[start:]
                flat = False
        if flat:
            keys = tuple(usage)
            code = self._usage_codes.get(keys)
            if code is None:
                code = self._usage_codes[keys] = len(self._usage_keys)
                self._usage_keys.append(keys)
        else:
            try:
                packed = self._encoder.encode(usage)
            except (OverflowError, TypeError):  # past msgpack's integers: kept as itself
                values.append(len(self._odd_usage))
                self._odd_usage.append(usage)
                code = _USAGE_ODD
            else:
                start = len(self._packed)
                self._packed.tail.frombytes(packed)
                values.extend((start, len(self._packed)))
                code = _USAGE_PACKED
                if len(self._packed.tail) >= self._memory_bytes:
                    self._spill(self._packed.spill)
        if 8 * len(values) >= self._memory_bytes:
            self._spill(self._usage_values.spill)
        return code

    # -- reading back

    def __len__(self) -> int:
        return len(self._bucket_ends)

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[RequestRecord]: ...

    def __getitem__(self, index: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if self._whole is not None:
                return self._whole[start:stop]
            return list(self._read(start, max(start, stop)))
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("record index out of range")
        if self._whole is not None:
            return self._whole[index]
        return next(self._read(index, index + 1))

    def __iter__(self) -> Iterator[RequestRecord]:
        if self._whole is not None:
            return iter(self._whole)
        return self._read(0, len(self))

    def _read(self, start: int, stop: int) -> Iterator[RequestRecord]:
        """Rows ``start`` to ``stop`` built back, read :data:`_READ_ROWS` at
        a time (one read a store, not one a row and store)."""
        for lo in range(start, stop, _READ_ROWS):
            yield from _Rows(self, lo, min(stop, lo + _READ_ROWS)).records()

    @property
    def spill_dir(self) -> str | None:
        """Where the spill files are made (None: ``TMPDIR``); a figure that
        spills copies of columns makes its files there too."""
        return self._spill_dir

    @property
    def spilled_rows(self) -> int:
        """The rows in the spill file (the rest are in memory)."""
        return self._bucket_ends.spilled

    def sample_id(self, i: int) -> str:
        if self._small["flags"][i] & _ID_HEX:
            return self._ids[16 * i : 16 * i + 16].tobytes().hex()
        return self._other_ids[i]

    def _message_of(self, code: int) -> str | None:
        if code == _NO_CODE:
            return None
        if code == _DROPPED:
            return DROPPED_MESSAGE
        return self._messages.values[code]

    # -- the columns, for the figures

    def column(self, name: str) -> npt.NDArray[np.int64]:
        """A copy of one column as int64 (stamps: :data:`NONE` for None):
        ``t_issue``, ``t_first``, ``events``, ``endpoint``..."""
        store = self._stamps[name] if name in self._stamps else self._small[name]
        return store.to_numpy().astype(np.int64, copy=False)

    def flag(self, name: str) -> npt.NDArray[np.bool_]:
        """``done``, ``complete``, ``keep_alive``, ``kernel_stamps`` or
        ``gaps`` (a gap histogram was kept) per record."""
        bit = _FLAGS[name]
        flags: npt.NDArray[np.bool_] = (self._small["flags"].to_numpy() & bit) != 0
        return flags

    @property
    def ok(self) -> npt.NDArray[np.bool_]:
        """Which records completed (no error class)."""
        ok: npt.NDArray[np.bool_] = self._small["error_class"].to_numpy() == _NO_CODE
        return ok

    def t_finish(self) -> npt.NDArray[np.int64]:
        """``t_done``, else ``t_end``: each record's completion."""
        done = self.column("t_done")
        return np.where(done == NONE, self.column("t_end"), done)

    def codes(self, name: str) -> tuple[npt.NDArray[np.int64], list[str]]:
        """A string column (``error_class``, ``finish_reason``) as its codes
        (-1 for None) and the table they index."""
        return self.column(name), self._classes.values

    def code_of(self, value: str) -> int | None:
        """The code of an error class or finish reason (None: no record has it)."""
        return self._classes.known(value)

    def error_message(self, i: int) -> str | None:
        """Record ``i``'s error message (module doc: bounded per class)."""
        return self._message_of(self._small["error_message"][i])

    def gaps_buckets(self, mask: npt.NDArray[np.bool_]) -> bytes:
        """The gap histograms' buckets of the records where ``mask``, joined."""
        return b"".join(part.tobytes() for part, _ in self._buckets_of(mask))

    def gaps_histogram(self, mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """The gap histograms of the records where ``mask``, summed bucket
        by bucket (``wire/gaps.py``: :data:`~..wire.gaps.BUCKETS` counts),
        read a block of rows at a time: no joined copy of every bucket."""
        histogram = np.zeros(BUCKETS, np.int64)
        for part, _ in self._buckets_of(mask):
            pairs = part.view("<u4").reshape(-1, 2)
            # float weights: exact, a block's counts being far below 2**53
            histogram += np.bincount(pairs[:, 0], pairs[:, 1], BUCKETS).astype(np.int64)
        return histogram

    def _buckets_of(
        self, mask: npt.NDArray[np.bool_]
    ) -> Iterator[tuple[npt.NDArray[np.uint8], range]]:
        """The buckets' bytes of the rows where ``mask``, per block of rows."""
        mask = np.asarray(mask, dtype=np.bool_)
        for lo in range(0, len(self), _READ_ROWS):
            hi = min(len(self), lo + _READ_ROWS)
            chosen = mask[lo:hi]
            if not chosen.any():
                continue
            ends = self._bucket_ends.read(max(0, lo - 1), hi)
            starts = ends[:-1] if lo else np.concatenate(([0], ends[:-1]))
            ends = ends[1:] if lo else ends
            first, last = int(starts[0]), int(ends[-1])
            data = self._buckets.read(first, last)
            keep = np.repeat(chosen, ends - starts)
            yield data[keep], range(lo, hi)

    def blocks(self, rows: int | None = None) -> Iterator[ColumnBlock]:
        """The store a block of ``rows`` rows at a time (None:
        :data:`BLOCK_ROWS`), for figures that would otherwise hold several
        whole columns at once (issue 23)."""
        rows = BLOCK_ROWS if rows is None else rows
        for lo in range(0, len(self), rows):
            yield ColumnBlock(self, lo, min(len(self), lo + rows))

    def subset(self, mask: Sequence[bool] | npt.NDArray[np.bool_]) -> RecordColumns:
        """The records where ``mask``, as columns of their own (an agentic
        run's window: its records whole; else read back a block at a time)."""
        out = RecordColumns(
            keep_whole=self._whole is not None,
            memory_rows=self._memory_rows,
            spill_dir=self._spill_dir,
        )
        chosen = np.asarray(mask, dtype=np.bool_)
        if self._whole is not None:
            for i in np.flatnonzero(chosen).tolist():
                out.append(self._whole[i])
            return out
        for lo in range(0, len(self), _READ_ROWS):
            hi = min(len(self), lo + _READ_ROWS)
            if chosen[lo:hi].any():
                rows = _Rows(self, lo, hi)
                for i in np.flatnonzero(chosen[lo:hi]).tolist():
                    out.append(rows.record(i))
        return out

    def close(self) -> None:
        """Deletes the spill file (the rows in it can no longer be read);
        dropping the store does the same."""
        for file in (self._group.file, *(s.file for s in self._variable)):
            file.close()


class ColumnBlock:
    """Rows ``start`` to ``stop`` of a store, with the column readers of
    :class:`RecordColumns` over them (each column read once, when asked)."""

    def __init__(self, columns: RecordColumns, start: int, stop: int) -> None:
        self.start, self.stop = start, stop
        self._columns = columns
        self._read: dict[str, npt.NDArray[np.int64]] = {}

    def __len__(self) -> int:
        return self.stop - self.start

    def column(self, name: str) -> npt.NDArray[np.int64]:
        """These rows of one column as int64 (stamps: :data:`NONE` for None)."""
        found = self._read.get(name)
        if found is None:
            columns = self._columns
            store = columns._stamps[name] if name in columns._stamps else columns._small[name]
            found = self._read[name] = store.read(self.start, self.stop).astype(
                np.int64, copy=False
            )
        return found

    def flag(self, name: str) -> npt.NDArray[np.bool_]:
        """These rows of a flag (:meth:`RecordColumns.flag`)."""
        flags: npt.NDArray[np.bool_] = (self.column("flags") & _FLAGS[name]) != 0
        return flags

    @property
    def ok(self) -> npt.NDArray[np.bool_]:
        """Which of these records completed (no error class)."""
        ok: npt.NDArray[np.bool_] = self.column("error_class") == _NO_CODE
        return ok


class _Rows:
    """Rows ``start`` to ``stop`` of a store, each store read once, for
    building records back."""

    def __init__(self, columns: RecordColumns, start: int, stop: int) -> None:
        self.columns = columns
        self.start = start
        self.stamps = _lists(columns._stamps.values(), start, stop)
        self.small = _lists(columns._small.values(), start, stop)
        self.ids = columns._ids.read(16 * start, 16 * stop).tobytes()
        ends = columns._bucket_ends.read(max(0, start - 1), stop).tolist()
        self.bucket_ends = ends if start else [0, *ends]  # row j: ends[j] to ends[j + 1]
        self.bucket_base = self.bucket_ends[0]
        self.buckets = columns._buckets.read(self.bucket_base, self.bucket_ends[-1]).tobytes()
        # the rows' usage values: from the first's to the next row's (or the end)
        values = columns._usage_values
        end = columns._stamps["usage_at"][stop] if stop < len(columns) else len(values)
        at = self.stamps[_USAGE_AT]
        self.usage_base = at[0] if at else end
        self.usage_values: list[int] = values.read(self.usage_base, end).tolist()

    def records(self) -> Iterator[RequestRecord]:
        return (self.record(j) for j in range(len(self.bucket_ends) - 1))

    def record(self, j: int) -> RequestRecord:
        """The ``j``-th row of these (row ``start + j`` of the store)."""
        columns = self.columns
        i = self.start + j
        (
            sample_index,
            t_sched,
            t_issue,
            t_end,
            connect_ns,
            t_first_read,
            t_done_read,
            t_head,
            t_first,
            t_done,
            t_first_content,
            t_second,
            unexpected_bytes,
            gaps_sum,
            gaps_min,
            gaps_max,
            _completion,
            _prompt,
            usage_at,
        ) = (column[j] for column in self.stamps)
        (
            status,
            events,
            content_events,
            events_after_done,
            chunk_errors,
            retries,
            endpoint,
            segment_stamp,
            first_read_later_bytes,
            error_code,
            error_class,
            error_message,
            response_error_message,
            finish,
            schema,
            gaps_count,
            gaps_zero,
            flags,
        ) = (column[j] for column in self.small)
        gaps = None
        if flags & _GAPS:
            base = self.bucket_base
            gaps = TokenGaps(
                count=gaps_count,
                zero=gaps_zero,
                sum_ns=gaps_sum,
                min_ns=gaps_min,
                max_ns=gaps_max,
                buckets=self.buckets[self.bucket_ends[j] - base : self.bucket_ends[j + 1] - base],
            )
        response = ResponseSummary(
            status=status,
            t_head=_back(t_head),
            t_first=_back(t_first),
            t_done=_back(t_done),
            content="",
            reasoning="",
            tool_calls=(),
            content_after_first="",
            reasoning_after_first="",
            tool_calls_after_first=(),
            finish_reason=None if finish == _NO_CODE else columns._classes.values[finish],
            usage=self._usage_of(schema, usage_at),
            events=events,
            content_events=content_events,
            events_after_done=events_after_done,
            done=bool(flags & _DONE),
            complete=bool(flags & _COMPLETE),
            keep_alive=bool(flags & _KEEP_ALIVE),
            chunk_errors=chunk_errors,
            first_chunk_error=columns._chunk_errors.get(i),
            unexpected_bytes=unexpected_bytes,
            error_code=error_code,
            error_message=columns._message_of(response_error_message) or "",
            chunk_times=columns._chunk_times.get(i),
            t_first_content=_back(t_first_content),
            t_second=_back(t_second),
            gaps=gaps,
        )
        return RequestRecord(
            sample_index=sample_index,
            sample_id=(
                self.ids[16 * j : 16 * j + 16].hex() if flags & _ID_HEX else columns._other_ids[i]
            ),
            t_sched=t_sched,
            t_issue=t_issue,
            t_end=t_end,
            response=response,
            error_class=None if error_class == _NO_CODE else columns._classes.values[error_class],
            error_message=columns._message_of(error_message),
            retries=retries,
            connect_ns=connect_ns,
            t_first_read=_back(t_first_read),
            t_done_read=_back(t_done_read),
            kernel_stamps=bool(flags & _KERNEL),
            endpoint=endpoint,
            segment_stamp=segment_stamp,
            first_read_later_bytes=first_read_later_bytes,
        )

    def _usage_of(self, schema: int, at: int) -> dict[str, Any] | None:
        if schema == _USAGE_NONE:
            return None
        columns = self.columns
        values, base = self.usage_values, self.usage_base
        if schema == _USAGE_ODD:
            return columns._odd_usage[values[at - base]]
        if schema == _USAGE_PACKED:
            start, end = values[at - base], values[at - base + 1]
            packed = columns._packed.read(start, end).tobytes()
            usage: dict[str, Any] = columns._decoder.decode(packed)
            return usage
        keys = columns._usage_keys[schema]
        return dict(zip(keys, values[at - base : at - base + len(keys)], strict=True))


def _ints_only(usage: dict[str, Any]) -> bool:
    """Whether every value is an int itself (not a bool, a float...)."""
    for value in usage.values():  # noqa: SIM110 (a loop: a third of all() over a generator)
        if type(value) is not int:
            return False
    return True


def _lists(stores: Iterable[SpilledArray], start: int, stop: int) -> list[list[int]]:
    """Each store's items ``start`` to ``stop`` (one row: indexed, no numpy)."""
    if stop - start == 1:
        return [[store[start]] for store in stores]
    return [store.read(start, stop).tolist() for store in stores]


def _hex_id(sample_id: str) -> bytes | None:
    """A 32-lowercase-hex-digit id's 16 bytes (None for any other id, which
    then is kept as itself: the bytes must give the same string back)."""
    if len(sample_id) != 32:
        return None
    try:
        raw = bytes.fromhex(sample_id)
    except ValueError:
        return None
    return raw if raw.hex() == sample_id else None


def as_columns(records: Sequence[RequestRecord]) -> RecordColumns:
    """``records`` as columns: themselves when they are, else a copy."""
    return records if isinstance(records, RecordColumns) else RecordColumns(records)
