"""A point's records as compact columns (issue 23: memory flat in run length).

A :class:`~.record.RequestRecord` as a Python object costs about 1.3 KB once
its texts are gone: the two structs, each stamp an int object, the
``usage`` dict, the sample id.  A point of a million requests would hold
1.3 GB for figures that need a few numbers per request.  So a point keeps
each record as one row of typed arrays (``array``: eight bytes a stamp or
count, four a small code), appended as the record completes, and the
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

The store is a ``Sequence[RequestRecord]``: ``columns[i]`` builds the
record back, equal to ``record.without_texts()`` (every stamp, count, flag
and ``usage`` as they were; a message past the bound reads as a note
saying so).  ``keep_whole=True`` keeps the records themselves as well, for
a run that reads its answers again (an agentic run's turns, bounded by its
trajectories).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import msgspec
import numpy as np
import numpy.typing as npt

from ..wire.events import ChunkError, ResponseSummary, TokenGaps
from .record import RequestRecord

__all__ = (
    "CHUNK_ERRORS_KEPT",
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


def _opt(value: int | None) -> int:
    return NONE if value is None else value


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
    """A point's records, one row of typed columns each (module doc)."""

    def __init__(self, records: Iterable[RequestRecord] = (), *, keep_whole: bool = False) -> None:
        self._stamps = {name: array("q") for name in _STAMPS}
        self._small = {name: array("i") for name in _SMALL}
        self._stamp_columns = tuple(self._stamps[name] for name in _STAMPS)
        self._small_columns = tuple(self._small[name] for name in _SMALL)
        self._ids = bytearray()  # 16 bytes a record whose id is 32 hex digits
        self._other_ids: dict[int, str] = {}
        self._classes = _Strings()  # error classes and finish reasons
        self._messages = _Strings()
        self._kept_per_class: dict[int, int] = {}  # distinct messages kept per class
        self.messages_dropped = 0
        self._usage_keys: list[tuple[str, ...]] = []
        self._usage_codes: dict[tuple[str, ...], int] = {}
        self._usage_values = array("q")
        self._packed = bytearray()
        self._odd_usage: list[dict[str, Any]] = []
        self._buckets = bytearray()
        self._bucket_ends = array("q")
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
        if raw is None:
            self._other_ids[index] = sample_id
            self._ids += bytes(16)
        else:
            flags |= _ID_HEX
            self._ids += raw
        usage_at = len(self._usage_values)
        schema = self._usage(usage)
        if gaps is not None:
            self._buckets += gaps.buckets
        self._bucket_ends.append(len(self._buckets))
        if response.first_chunk_error is not None and len(self._chunk_errors) < CHUNK_ERRORS_KEPT:
            self._chunk_errors[index] = response.first_chunk_error
        if response.chunk_times is not None:
            self._chunk_times[index] = response.chunk_times
        for column, value in zip(
            self._stamp_columns,
            (
                record.sample_index,
                record.t_sched,
                record.t_issue,
                record.t_end,
                record.connect_ns,
                _opt(record.t_first_read),
                _opt(record.t_done_read),
                _opt(response.t_head),
                _opt(response.t_first),
                _opt(response.t_done),
                _opt(response.t_first_content),
                _opt(response.t_second),
                response.unexpected_bytes,
                0 if gaps is None else gaps.sum_ns,
                0 if gaps is None else gaps.min_ns,
                0 if gaps is None else gaps.max_ns,
                _official(usage, "completion_tokens"),
                _official(usage, "prompt_tokens"),
                usage_at,
            ),
            strict=True,
        ):
            column.append(value)
        for column, value in zip(
            self._small_columns,
            (
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
            ),
            strict=True,
        ):
            column.append(value)
        if self._whole is not None:
            self._whole.append(record)

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
        keys = tuple(usage)
        if all(type(v) is int and -(2**63) < v < 2**63 for v in usage.values()):
            code = self._usage_codes.get(keys)
            if code is None:
                code = self._usage_codes[keys] = len(self._usage_keys)
                self._usage_keys.append(keys)
            self._usage_values.extend(usage.values())
            return code
        try:
            packed = self._encoder.encode(usage)
        except (OverflowError, TypeError):  # past msgpack's integers: kept as itself
            self._usage_values.append(len(self._odd_usage))
            self._odd_usage.append(usage)
            return _USAGE_ODD
        start = len(self._packed)
        self._packed += packed
        self._usage_values.extend((start, len(self._packed)))
        return _USAGE_PACKED

    # -- reading back

    def __len__(self) -> int:
        return len(self._bucket_ends)

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[RequestRecord]: ...

    def __getitem__(self, index: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("record index out of range")
        if self._whole is not None:
            return self._whole[index]
        return self._record(index)

    def __iter__(self) -> Iterator[RequestRecord]:
        if self._whole is not None:
            return iter(self._whole)
        return (self._record(i) for i in range(len(self)))

    def _record(self, i: int) -> RequestRecord:
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
        ) = (column[i] for column in self._stamp_columns)
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
        ) = (column[i] for column in self._small_columns)
        gaps = None
        if flags & _GAPS:
            start = self._bucket_ends[i - 1] if i else 0
            gaps = TokenGaps(
                count=gaps_count,
                zero=gaps_zero,
                sum_ns=gaps_sum,
                min_ns=gaps_min,
                max_ns=gaps_max,
                buckets=bytes(self._buckets[start : self._bucket_ends[i]]),
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
            finish_reason=None if finish == _NO_CODE else self._classes.values[finish],
            usage=self._usage_of(schema, usage_at),
            events=events,
            content_events=content_events,
            events_after_done=events_after_done,
            done=bool(flags & _DONE),
            complete=bool(flags & _COMPLETE),
            keep_alive=bool(flags & _KEEP_ALIVE),
            chunk_errors=chunk_errors,
            first_chunk_error=self._chunk_errors.get(i),
            unexpected_bytes=unexpected_bytes,
            error_code=error_code,
            error_message=self._message_of(response_error_message) or "",
            chunk_times=self._chunk_times.get(i),
            t_first_content=_back(t_first_content),
            t_second=_back(t_second),
            gaps=gaps,
        )
        return RequestRecord(
            sample_index=sample_index,
            sample_id=self.sample_id(i),
            t_sched=t_sched,
            t_issue=t_issue,
            t_end=t_end,
            response=response,
            error_class=None if error_class == _NO_CODE else self._classes.values[error_class],
            error_message=self._message_of(error_message),
            retries=retries,
            connect_ns=connect_ns,
            t_first_read=_back(t_first_read),
            t_done_read=_back(t_done_read),
            kernel_stamps=bool(flags & _KERNEL),
            endpoint=endpoint,
            segment_stamp=segment_stamp,
            first_read_later_bytes=first_read_later_bytes,
        )

    def sample_id(self, i: int) -> str:
        if self._small["flags"][i] & _ID_HEX:
            return self._ids[16 * i : 16 * i + 16].hex()
        return self._other_ids[i]

    def _message_of(self, code: int) -> str | None:
        if code == _NO_CODE:
            return None
        if code == _DROPPED:
            return DROPPED_MESSAGE
        return self._messages.values[code]

    def _usage_of(self, schema: int, at: int) -> dict[str, Any] | None:
        if schema == _USAGE_NONE:
            return None
        values = self._usage_values
        if schema == _USAGE_ODD:
            return self._odd_usage[values[at]]
        if schema == _USAGE_PACKED:
            usage: dict[str, Any] = self._decoder.decode(self._packed[values[at] : values[at + 1]])
            return usage
        keys = self._usage_keys[schema]
        return dict(zip(keys, values[at : at + len(keys)], strict=True))

    # -- the columns, for the figures

    def column(self, name: str) -> npt.NDArray[np.int64]:
        """A copy of one column as int64 (stamps: :data:`NONE` for None):
        ``t_issue``, ``t_first``, ``events``, ``endpoint``..."""
        values = self._stamps[name] if name in self._stamps else self._small[name]
        return np.array(values, dtype=np.int64)

    def flag(self, name: str) -> npt.NDArray[np.bool_]:
        """``done``, ``complete``, ``keep_alive``, ``kernel_stamps`` or
        ``gaps`` (a gap histogram was kept) per record."""
        bit = _FLAGS[name]
        flags: npt.NDArray[np.bool_] = (self.column("flags") & bit) != 0
        return flags

    @property
    def ok(self) -> npt.NDArray[np.bool_]:
        """Which records completed (no error class)."""
        ok: npt.NDArray[np.bool_] = self.column("error_class") == _NO_CODE
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
        ends = self._bucket_ends
        buckets = self._buckets
        parts = []
        for i in np.flatnonzero(mask).tolist():
            start = ends[i - 1] if i else 0
            parts.append(bytes(buckets[start : ends[i]]))
        return b"".join(parts)

    def subset(self, mask: Sequence[bool] | npt.NDArray[np.bool_]) -> RecordColumns:
        """The records where ``mask``, as columns of their own."""
        out = RecordColumns(keep_whole=self._whole is not None)
        for i in np.flatnonzero(np.asarray(mask, dtype=np.bool_)).tolist():
            out.append(self[i])
        return out


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
