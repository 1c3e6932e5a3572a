"""Incremental Server-Sent Events decoder, pure Python (the reference twin).

This module is the readable specification of ``mlpe_fast.wire._sse_c`` (whose
core is ``csrc/mlpe_sse.c``): both take the same input and return the same
events, timestamps and errors.  It implements the WHATWG HTML standard,
section 9.2.6 "Interpreting an event stream", on bytes.  The rules, numbered
as in ``csrc/mlpe_sse.h``:

1. Lines end in CRLF, LF or CR.  A CR that ends one input piece and an LF
   that starts the next are one line end.
2. One UTF-8 BOM (EF BB BF) at the very start of the stream is dropped, even
   when its bytes arrive in different pieces.  A prefix of it that turns out
   not to be a BOM starts the first line.
3. An empty line dispatches: the last event ID string is set to the last event
   ID buffer; then, if the data buffer is empty, the data and event-type
   buffers are reset and nothing is reported; otherwise one trailing LF is
   removed from the data buffer and an event is reported.
4. A line starting with ``:`` is a comment and is ignored.
5. Otherwise the field name is everything before the first ``:`` (the whole
   line when there is none, with an empty value) and one SP after the colon
   is removed from the value.  Names are case-sensitive.
6. ``data``: value + LF is appended to the data buffer.  ``event``: sets the
   event type.  ``id``: sets the last event ID buffer unless the value
   contains NUL.  ``retry``: sets the reconnection time when the value is one
   or more ASCII digits (values above 2**63 - 1 are ignored).  Other names
   are ignored.
7. At end of stream an incomplete event is discarded.  ``pending`` tells
   whether anything was pending, so that callers can say a stream was cut
   mid-event.

Values are kept as bytes and decoded from UTF-8 with U+FFFD replacement only
when an event is built.  That gives the same text as decoding the stream
first, as the standard does: CR, LF, ``:``, SP and NUL are ASCII, and an ASCII
byte always ends an invalid UTF-8 sequence.

Size limit: ``max_event`` bounds the data buffer (each value plus its LF) plus
the raw bytes of the line being read (line end excluded).  The first byte that
would make that sum exceed ``max_event`` raises
:class:`~mlpe_fast.errors.EventTooLarge` at its absolute offset.
"""

from __future__ import annotations

import operator
import sys
from typing import TYPE_CHECKING

from ..errors import EventTooLarge, LocalProtocolError
from .events import SSEEvent

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ("SSEDecoder",)

# 1 MiB, as MLPE_SSE_DEFAULT_MAX_EVENT: an OpenAI chunk is 150 B to a few KiB,
# and a server that packs a whole answer into one event still fits (about
# 250,000 tokens of text).  A stream that never sends a blank line cannot grow
# memory past this.
_DEFAULT_MAX_EVENT = 1 << 20

_BOM = b"\xef\xbb\xbf"

# A dispatched event before UTF-8 decoding: data, event type, last event ID.
_RawEvent = tuple[bytes, bytes, bytes]
_RETRY_MAX = (1 << 63) - 1


def _check_max_event(max_event: int) -> int:
    max_event = operator.index(max_event)
    if not 1 <= max_event <= sys.maxsize:
        raise ValueError(f"max_event must be between 1 and {sys.maxsize}, not {max_event}")
    return max_event


def _as_bytes(data: Buffer) -> bytes:
    """The bytes of a buffer, as ``PyObject_GetBuffer(PyBUF_SIMPLE)`` sees them."""
    if type(data) is bytes:
        return data
    view = memoryview(data)
    if not view.c_contiguous:
        raise BufferError("SSEDecoder.feed() needs a C-contiguous buffer")
    return view.tobytes()


class SSEDecoder:
    """Turns the bytes of an event stream into :class:`SSEEvent` records.

    Args:
        max_event: the most bytes one pending event may hold: its data buffer
            (each data value plus one LF) plus the raw bytes of the line being
            read, line end excluded.  Default 1 MiB.

    Raises:
        ValueError: ``max_event`` is below 1 or above ``sys.maxsize``.
    """

    __slots__ = (
        "_after_cr",
        "_block_open",
        "_bom_matched",
        "_closed",
        "_data",
        "_data_size",
        "_error_position",
        "_event_type",
        "_id_buffer",
        "_last_event_id",
        "_line",
        "_max_event",
        "_offset",
        "_retry",
    )

    def __init__(self, max_event: int = _DEFAULT_MAX_EVENT) -> None:
        self._max_event = _check_max_event(max_event)
        self._offset = 0  # bytes consumed so far (BOM included)
        self._bom_matched = 0  # BOM bytes seen at stream start; 3 once decided
        self._after_cr = False  # the previous piece ended with CR (rule 1)
        self._line = bytearray()  # a partial line, carried across pieces
        self._data: list[bytes] = []  # the data buffer, as its values
        self._data_size = 0  # len(data buffer): each value plus its LF
        self._event_type = b""
        self._last_event_id = b""  # the last event ID string
        self._id_buffer: bytes | None = None  # the ID buffer, while an id awaits its blank line
        self._block_open = False  # a data, event or id field came after the last blank line
        self._retry: int | None = None
        self._error_position: int | None = None
        self._closed = False

    # --- public ------------------------------------------------------------------

    @property
    def retry(self) -> int | None:
        """Reconnection time in milliseconds from the last valid ``retry:``
        field, or ``None`` when there was none."""
        return self._retry

    @property
    def last_event_id(self) -> str:
        """The last event ID string: the value of the last ``id:`` field that a
        blank line has followed (what a reconnecting client would send as
        ``Last-Event-ID``), ``""`` when none."""
        return self._last_event_id.decode("utf-8", "replace")

    @property
    def pending(self) -> bool:
        """True when the stream so far ends inside an event: a partial line
        (or a partial BOM) is held, or a ``data``, ``event`` or ``id`` field
        (an id without NUL) came after the last blank line.  Comments,
        ``retry`` and unknown fields alone leave nothing pending."""
        return bool(self._line) or 0 < self._bom_matched < len(_BOM) or self._block_open

    def feed(self, data: Buffer, t_ns: int) -> list[SSEEvent]:
        """Decodes one piece of the stream.

        Args:
            data: the bytes received, in any buffer (``bytes``, ``bytearray``,
                ``memoryview``...); it may end anywhere, mid-line included,
                and may be empty.
            t_ns: the arrival time of ``data``; every event this piece
                completes carries it.

        Returns:
            The events this piece completed, in stream order.

        Raises:
            EventTooLarge: an event grew past ``max_event``.  The decoder stays
                in its error state and every later call raises an equal error.
                Events completed earlier in the same piece are lost with the
                raise.
            LocalProtocolError: the decoder was closed by :meth:`feed_eof`.
        """
        datas: list[bytes] = []
        labels: list[tuple[bytes, bytes]] = []
        self._decode(data, datas, labels)
        return [
            SSEEvent(
                event_data.decode("utf-8", "replace"),
                event_type.decode("utf-8", "replace") if event_type else "message",
                event_id.decode("utf-8", "replace"),
                t_ns,
            )
            for event_data, (event_type, event_id) in zip(datas, labels, strict=True)
        ]

    def feed_raw(self, data: Buffer, out: list[bytes]) -> None:
        """Decodes one piece of the stream, for callers that parse event data
        themselves: appends the data of each event the piece completes to
        ``out``, as bytes, without UTF-8 decoding (a JSON decoder must see
        invalid UTF-8 as such).  Event types and ids are not reported.

        Raises:
            EventTooLarge: as :meth:`feed`, except that the events completed
                earlier in the same piece are already in ``out``.
            LocalProtocolError: the decoder was closed by :meth:`feed_eof`.
        """
        self._decode(data, out, None)

    def feed_eof(self, t_ns: int) -> list[SSEEvent]:
        """Ends the stream.

        An incomplete event is discarded, as the standard says (rule 7), so
        this always returns ``[]``; check :attr:`pending` to learn whether
        the stream was cut mid-event.  The decoder is closed afterwards.

        Raises:
            EventTooLarge: the decoder is in its error state.
            LocalProtocolError: the decoder was already closed.
        """
        self._check_usable()
        self._closed = True
        return []

    # --- internals -----------------------------------------------------------------

    def _decode(
        self, data: Buffer, datas: list[bytes], labels: list[tuple[bytes, bytes]] | None
    ) -> None:
        """Rules 1-2: splits one piece into lines and appends the data of
        each event they complete to ``datas`` as it completes, and its type
        and last event ID to ``labels`` unless that is None."""
        self._check_usable()
        buf = _as_bytes(data)
        end = len(buf)
        pos = 0

        if self._bom_matched < len(_BOM):
            pos = self._skip_bom(buf)
        if self._after_cr and pos < end:
            self._after_cr = False
            if buf[pos] == 0x0A:  # LF
                pos += 1

        # The first CR at or after pos (end when none), found again only once
        # passed: a stream without CR costs one search for CR per piece.
        cr = -1
        while pos < end:
            if cr < pos:
                cr = buf.find(b"\r", pos)
                if cr < 0:
                    cr = end
            if not self._block_open:
                pos = self._take_data_events(buf, pos, cr, datas, labels)
                if pos == end:
                    break
            room = self._max_event - self._data_size - len(self._line)
            stop = min(end, pos + room + 1)
            # the first CR or LF in buf[pos:stop] (rule 1): an LF before the
            # next CR, else that CR when it comes before stop
            line_end = buf.find(b"\n", pos, min(stop, cr))
            if line_end < 0 and cr < stop:
                line_end = cr
            if line_end < 0:  # no line end within the room left
                if end - pos > room:
                    self._fail(self._offset + pos + room)
                self._line += buf[pos:]
                pos = end
                break
            if self._line:
                self._line += buf[pos:line_end]
                line = bytes(self._line)
                self._line.clear()
            else:
                line = buf[pos:line_end]
            pos = line_end + 1
            if line_end == cr:  # CR, maybe followed by LF
                if pos == end:
                    self._after_cr = True
                elif buf[pos] == 0x0A:
                    pos += 1
            if line.startswith(b"data:"):
                # The usual line, rules 5-6 inline: a line starting "data:"
                # is exactly one whose name (before its first ':') is "data".
                value = line[6:] if line.startswith(b" ", 5) else line[5:]
                self._data.append(value)
                self._data_size += len(value) + 1
                self._block_open = True
                continue
            event = self._interpret_line(line)
            if event is not None:
                datas.append(event[0])
                if labels is not None:
                    labels.append((event[1], event[2]))

        self._offset += end

    def _take_data_events(
        self,
        buf: bytes,
        pos: int,
        cr: int,
        datas: list[bytes],
        labels: list[tuple[bytes, bytes]] | None,
    ) -> int:
        """The usual events, a "data:" line then a blank line, taken whole
        from ``buf[pos:]`` while nothing is pending; returns where the
        general path in _decode must go on.  ``cr`` is the first CR at or
        after ``pos`` (the end of ``buf`` when none).

        Equivalent to the general path: with no data, event type or id
        pending (they all open a block), the data line, joined to a line
        carried over from the last piece, fits when its length is at most
        max_event; its value then leaves room for the blank line, whose
        dispatch reports (value, b"", last event ID) and leaves nothing
        pending again.  Both line ends are LF (the LF comes before the next
        CR).  A last line without end in this piece is kept when it fits, as
        the general path keeps it.
        """
        end = len(buf)
        max_event = self._max_event
        carried = self._line
        while True:
            lf = buf.find(b"\n", pos, cr)
            if lf < 0:
                if cr == end and len(carried) + end - pos <= max_event:
                    carried += buf[pos:]
                    return end
                return pos
            if len(carried) + lf - pos > max_event or buf[lf + 1 : lf + 2] != b"\n":
                return pos
            if carried:  # the data line, joined to its start
                line = bytes(carried) + buf[pos:lf]
                if not line.startswith(b"data:"):
                    return pos
                carried.clear()
                value = line[6:] if line.startswith(b" ", 5) else line[5:]
            elif buf.startswith(b"data:", pos):
                value = buf[pos + 6 if buf[pos + 5] == 0x20 else pos + 5 : lf]  # SP
            else:
                return pos
            datas.append(value)
            if labels is not None:
                labels.append((b"", self._last_event_id))
            pos = lf + 2

    def _check_usable(self) -> None:
        if self._error_position is not None:
            raise EventTooLarge(self._error_position)
        if self._closed:
            raise LocalProtocolError("SSEDecoder used after feed_eof()")

    def _fail(self, position: int) -> None:
        self._error_position = position
        raise EventTooLarge(position)

    def _skip_bom(self, buf: bytes) -> int:
        """Rule 2: matches the BOM byte by byte; returns where lines start."""
        pos = 0
        while pos < len(buf) and self._bom_matched < len(_BOM):
            if buf[pos] != _BOM[self._bom_matched]:
                # Not a BOM: the bytes matched so far start the first line,
                # at stream offset 0.
                kept = _BOM[: self._bom_matched]
                if len(kept) > self._max_event:
                    self._fail(self._max_event)
                self._line += kept
                self._bom_matched = len(_BOM)
                break
            self._bom_matched += 1
            pos += 1
        return pos

    def _interpret_line(self, line: bytes) -> _RawEvent | None:
        """Rules 3-6 for one line without its line end."""
        if not line:
            return self._dispatch()
        if line[0] == 0x3A:  # ":" starts a comment (rule 4)
            return None
        name, _, value = line.partition(b":")  # rule 5
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._data_size += len(value) + 1
            self._block_open = True
        elif name == b"event":
            self._event_type = value
            self._block_open = True
        elif name == b"id":
            if b"\x00" not in value:
                self._id_buffer = value
                self._block_open = True
        elif name == b"retry" and value.isdigit() and int(value) <= _RETRY_MAX:
            self._retry = int(value)  # bytes.isdigit() accepts ASCII digits only
        return None

    def _dispatch(self) -> _RawEvent | None:
        """Rule 3, on a blank line."""
        if self._id_buffer is not None:
            self._last_event_id = self._id_buffer
            self._id_buffer = None
        self._block_open = False
        event_type = self._event_type
        self._event_type = b""
        if not self._data:
            return None
        data = b"\n".join(self._data)  # the values joined, without the final LF
        self._data = []
        self._data_size = 0
        return data, event_type, self._last_event_id
