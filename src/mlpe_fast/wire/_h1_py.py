"""HTTP/1.1 response framing (RFC 9112), client side: the pure-Python twin.

This module is the readable specification of ``csrc/mlpe_h1.c`` (compiled as
:mod:`mlpe_fast.wire._h1_c`): both take the same input, return the same
events and raise the same errors at the same positions, however the input is
split.  The numbered rules ("rule 5") are those of ``csrc/mlpe_h1.h``.

Theory of operation
-------------------
One :class:`H1Decoder` reads the responses of one client connection.  Its
input is the bytes read from the socket, each piece stamped by the caller with
its arrival time ``t_ns``; its output is a list of events per piece:

* :class:`ResponseHead` when a final response head is complete (interim 1xx
  responses are parsed and skipped; 101 is an error: mlpe-fast never asks to
  switch protocols);
* :class:`BodyData` with de-framed body bytes: the body bytes of one message
  that arrive in one piece come as one event, chunk framing removed;
* :class:`ResponseComplete` at the end of the message, with its trailers.

Every event carries the ``t_ns`` of the piece that completed it.

The decoder is a state machine over four kinds of input: lines (the status
line, field lines, chunk-size lines), counted bytes (a Content-Length body,
the data of one chunk), the CRLF after chunk data, and a body that runs until
the connection closes.  A line cut by the end of a piece is kept until its
end arrives; body bytes are sliced out of the piece.

Errors are terminal: a :class:`~mlpe_fast.errors.ProtocolError` carries the
absolute offset of the offending byte (``position``, exact definition per
class in ``csrc/mlpe_h1.h``), the decoder stays in its error state, and every
later call raises an equal error again.  Events decoded earlier in the call
that raised are lost with the raise; a caller that needs them feeds smaller
pieces.  Calling :meth:`H1Decoder.feed` or :meth:`H1Decoder.feed_eof` after
``feed_eof`` is a :class:`~mlpe_fast.errors.LocalProtocolError`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final, TypeAlias

from ..errors import ErrorCode, LocalProtocolError, ProtocolError, error_from_code
from .events import BodyData, ResponseComplete, ResponseHead

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ("H1Decoder",)

H1Event: TypeAlias = ResponseHead | BodyData | ResponseComplete

# Limits (reasons in csrc/mlpe_h1.h).  The upper bound keeps every head within
# the 32-bit offsets of the C core.
DEFAULT_MAX_LINE: Final = 8192
DEFAULT_MAX_HEAD: Final = 65536
DEFAULT_MAX_HEADERS: Final = 128
DEFAULT_MAX_CHUNK_SIZE_DIGITS: Final = 16
MAX_LIMIT: Final = 1 << 30

# Sizes (Content-Length, chunk-size) must stay below 2^63.
_SIZE_LIMIT: Final = 1 << 63
_SIZE_LIMIT_DECIMAL_DIGITS: Final = len(str(_SIZE_LIMIT))

# States (the same as enum h1_state in csrc/mlpe_h1.c).
_STATUS_LINE: Final = 0  # expecting (more of) a status line
_FIELD_LINE: Final = 1  # in the header section
_BODY_LENGTH: Final = 2  # in a Content-Length body
_BODY_CLOSE: Final = 3  # in a body that ends when the connection closes
_CHUNK_SIZE: Final = 4  # expecting a chunk-size line
_CHUNK_DATA: Final = 5  # in chunk data
_CHUNK_END: Final = 6  # expecting the CR or LF that ends chunk data
_CHUNK_END_LF: Final = 7  # expecting the LF after that CR
_TRAILER_LINE: Final = 8  # in the trailer section
_COMPLETE: Final = 9  # the message is complete; ResponseComplete is due
_CLOSED: Final = 10  # the connection must close: no byte may follow
_ERROR: Final = 11  # terminal

_CR: Final = 0x0D
_LF: Final = 0x0A
_OWS: Final = b" \t"

# tchar (RFC 9110 section 5.6.2): what a field name may hold.
_NOT_TCHAR: Final = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
# CR and NUL are never allowed in a field value (RFC 9110 section 5.5).
_NOT_IN_VALUE: Final = re.compile(rb"[\x00\r]")
# Reason phrases and chunk extensions hold HTAB, SP, VCHAR and obs-text.
_NOT_TEXT: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_HEX_DIGITS: Final = b"0123456789ABCDEFabcdef"
# How many plain chunk-size lines a decoder remembers (_plain_chunk_size).
_PLAIN_SIZES_KEPT: Final = 64
_VERSION_PREFIX: Final = b"HTTP/"


def _check_limit(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LIMIT:
        raise ValueError(f"{name} must be an int from 1 to {MAX_LIMIT}, got {value!r}")
    return value


def _as_bytes(data: Buffer) -> bytes:
    """The bytes of any C-contiguous buffer, as the compiled decoder reads
    them (PyBUF_SIMPLE): a strided view is a BufferError there too."""
    if type(data) is bytes:
        return data
    with memoryview(data) as view:
        if not view.c_contiguous:
            raise BufferError("data must be a C-contiguous buffer")
        return view.tobytes()


def _elements(value: bytes) -> list[bytes]:
    """The elements of a comma-separated list, OWS trimmed, empty ones kept
    (RFC 9110 section 5.6.1)."""
    return [element.strip(_OWS) for element in value.split(b",")]


class H1Decoder:
    """Incremental HTTP/1.1 response framing for one client connection.

    Args:
        max_line: longest line (status, field or chunk-size line), terminator
            excluded.
        max_head: largest head (status line to blank line, terminators
            included); also the budget of the trailer section.
        max_headers: most field lines in a head (obs-fold lines excluded);
            also the most trailer fields.
        max_chunk_size_digits: most hex digits in a chunk size, leading zeros
            included.

    Each limit is an int from 1 to 2**30 (else :class:`ValueError`).
    """

    __slots__ = (
        "_chunked",
        "_cl_error_pos",
        "_cl_present",
        "_cl_value",
        "_closed",
        "_conn_close",
        "_conn_keep_alive",
        "_content_length",
        "_error",
        "_field_open",
        "_field_start",
        "_head_start",
        "_headers",
        "_keep_alive",
        "_last_keep_alive",
        "_line",
        "_line_start",
        "_max_chunk_size_digits",
        "_max_head",
        "_max_headers",
        "_max_line",
        "_message_started",
        "_must_close",
        "_offset",
        "_plain_sizes",
        "_reason",
        "_remaining",
        "_state",
        "_status",
        "_te_chunked",
        "_te_error_pos",
        "_te_first_pos",
        "_te_present",
        "_trailers",
        "_version",
    )

    def __init__(
        self,
        max_line: int = DEFAULT_MAX_LINE,
        max_head: int = DEFAULT_MAX_HEAD,
        max_headers: int = DEFAULT_MAX_HEADERS,
        max_chunk_size_digits: int = DEFAULT_MAX_CHUNK_SIZE_DIGITS,
    ) -> None:
        self._max_line = _check_limit("max_line", max_line)
        self._max_head = _check_limit("max_head", max_head)
        self._max_headers = _check_limit("max_headers", max_headers)
        self._max_chunk_size_digits = _check_limit("max_chunk_size_digits", max_chunk_size_digits)

        self._state = _STATUS_LINE
        self._offset = 0  # bytes consumed since the start
        self._error: tuple[ErrorCode, int] | None = None
        self._closed = False  # feed_eof() was called
        self._last_keep_alive = False  # of the last complete message
        self._message_started = False  # a byte of the current response arrived

        self._line = bytearray()  # a line cut by the end of a piece
        self._line_start = 0  # offset of the first byte of the current line
        self._head_start = 0  # offset of the first byte of the head / trailer section
        self._remaining = 0  # body or chunk bytes still to come
        self._plain_sizes: dict[bytes, int] = {}  # plain chunk-size lines seen: their sizes

        # The current response (reset when its status line is complete).
        self._status = 0
        self._version = b""
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._trailers: list[tuple[bytes, bytes]] = []
        self._keep_alive = False
        self._chunked = False
        self._content_length = -1
        self._must_close = False
        # The last field line, which an obs-fold line would continue.
        self._field_open = False
        self._field_start = 0
        # Framing fields, interpreted as each field is complete (rule 5).
        self._cl_present = False
        self._cl_value = -1
        self._cl_error_pos: int | None = None
        self._te_present = False
        self._te_chunked = False
        self._te_error_pos: int | None = None
        self._te_first_pos = 0
        self._conn_close = False
        self._conn_keep_alive = False

    # -- public API ---------------------------------------------------------------

    @property
    def keep_alive(self) -> bool:
        """Whether the last complete response leaves the connection reusable
        (False before the first one)."""
        return self._last_keep_alive

    @property
    def offset(self) -> int:
        """Bytes consumed so far; after a ProtocolError, the value it had when
        the failing call began."""
        return self._offset

    def feed(self, data: Buffer, t_ns: int) -> list[H1Event]:
        """Decodes the next piece of the connection's bytes.

        Args:
            data: the bytes read (bytes, bytearray, memoryview or any buffer);
                they may end anywhere, even inside a line or a CRLF.
            t_ns: the arrival time of the piece, carried by every event it
                completes.

        Returns:
            The events completed by this piece, in order.  The body bytes of
            one message in this piece come as one :class:`BodyData`.

        Raises:
            ProtocolError: a subclass telling what is wrong and where
                (``position``); the decoder stays failed and every later call
                raises an equal error.  Events completed earlier in this call
                are not returned.
            LocalProtocolError: called after :meth:`feed_eof`.
            BufferError: ``data`` is not C-contiguous.
        """
        events: list[H1Event] = []
        self.feed_into(data, t_ns, events)
        return events

    def feed_into(
        self, data: Buffer, t_ns: int, events: list[H1Event], *, stop_after_message: bool = False
    ) -> int:
        """:meth:`feed`, result by result, as the C API is used by
        ``csrc/mlpe_response.c`` (the whole-response twin needs this).

        Appends each event to ``events`` as soon as it is decoded, so that
        when a :class:`ProtocolError` is raised, ``events`` holds everything
        decoded before it (body bytes included).  With
        ``stop_after_message``, returns right after the first
        :class:`ResponseComplete`, leaving the rest of ``data`` unread.

        Returns:
            The number of bytes of ``data`` used (all of them unless stopped).
        """
        if self._closed:
            raise LocalProtocolError("feed() called after feed_eof()")
        if self._error is not None:
            raise error_from_code(*self._error)
        buf = _as_bytes(data)
        end = len(buf)
        base = self._offset  # buf[i] is byte base + i of the stream
        pos = 0
        body: list[bytes] = []  # body bytes of the current message in this piece

        def emit(event: H1Event) -> None:
            if body:
                events.append(BodyData(b"".join(body), t_ns))
                body.clear()
            events.append(event)

        try:
            while True:
                state = self._state
                if state in (_BODY_LENGTH, _CHUNK_DATA):
                    if pos == end:
                        break
                    take = min(self._remaining, end - pos)
                    body.append(buf[pos : pos + take])
                    pos += take
                    self._remaining -= take
                    if self._remaining == 0:
                        if state == _BODY_LENGTH:
                            self._state = _COMPLETE
                        elif buf.startswith(b"\r\n", pos):  # the usual end of chunk data
                            pos += 2
                            self._state = _CHUNK_SIZE
                        else:
                            self._state = _CHUNK_END

                elif state == _CHUNK_SIZE:
                    if not self._line:
                        pos = self._take_whole_chunks(buf, pos, body)
                    if pos == end:
                        break
                    line, pos = self._take_line(buf, pos, base, in_head=False)
                    if line is None:
                        break
                    self._start_chunk(self._parse_chunk_size(line), base + pos)

                elif state in (_CHUNK_END, _CHUNK_END_LF):
                    # chunk data is followed by CRLF, or a bare LF (rules 3, 6)
                    if pos == end:
                        break
                    byte = buf[pos]
                    if byte == _LF:
                        self._state = _CHUNK_SIZE
                    elif byte == _CR and state == _CHUNK_END:
                        self._state = _CHUNK_END_LF
                    else:
                        raise self._fail(ErrorCode.CHUNK_DATA, base + pos)
                    pos += 1

                elif state == _STATUS_LINE:
                    if pos == end:
                        break
                    self._message_started = True
                    line, pos = self._take_line(buf, pos, base, in_head=True)
                    if line is None:
                        break
                    self._parse_status_line(line)
                    self._state = _FIELD_LINE

                elif state in (_FIELD_LINE, _TRAILER_LINE):
                    if pos == end:
                        break
                    line, pos = self._take_line(buf, pos, base, in_head=True)
                    if line is None:
                        break
                    if line:
                        self._parse_field_line(line, trailer=state == _TRAILER_LINE)
                    elif state == _TRAILER_LINE:
                        self._field_open = False
                        emit(self._complete_message(base + pos, t_ns))
                        if stop_after_message:
                            break
                    elif self._end_of_head(base + pos):
                        emit(self._head_event(t_ns))

                elif state == _BODY_CLOSE:
                    if pos == end:
                        break
                    body.append(buf[pos:])
                    pos = end

                elif state == _COMPLETE:
                    emit(self._complete_message(base + pos, t_ns))
                    if stop_after_message:
                        break

                elif state == _CLOSED:
                    if pos == end:
                        break
                    raise self._fail(ErrorCode.UNEXPECTED_DATA, base + pos)

                else:  # _ERROR is caught on entry
                    raise AssertionError(f"unknown state {state}")

        finally:
            if body:
                events.append(BodyData(b"".join(body), t_ns))
        self._offset = base + pos
        return pos

    def feed_eof(self, t_ns: int) -> list[H1Event]:
        """Tells that the peer closed the connection; the decoder is then
        closed (a later :meth:`feed` or :meth:`feed_eof` raises
        :class:`LocalProtocolError`).

        Returns:
            ``[ResponseComplete]`` when the close ends a body delimited by the
            connection close (RFC 9112 section 6.3, item 8); ``[]`` when it
            falls between responses.

        Raises:
            IncompleteResponse: a response was cut short; ``position`` is
                :attr:`offset`.
            ProtocolError: the decoder had already failed (the same error).
        """
        if self._closed:
            raise LocalProtocolError("feed_eof() called twice")
        self._closed = True
        if self._error is not None:
            raise error_from_code(*self._error)
        state = self._state
        if state in (_BODY_CLOSE, _COMPLETE):
            self._message_started = False
            self._state = _CLOSED
            self._last_keep_alive = self._keep_alive
            return [ResponseComplete(tuple(self._trailers), self._keep_alive, t_ns)]
        if state == _CLOSED or (state == _STATUS_LINE and not self._message_started):
            self._state = _CLOSED
            return []
        raise self._fail(ErrorCode.INCOMPLETE, self._offset)

    # -- whole chunks (a fast path) ---------------------------------------------------

    def _take_whole_chunks(self, buf: bytes, pos: int, body: list[bytes]) -> int:
        """Takes the run of chunks at ``buf[pos]``, a chunk-size line's first
        byte, into ``body``; returns where the first chunk it did not take
        starts (``pos`` when none), or the end of ``buf`` when it took the
        start of a chunk cut by the end of the piece.

        A fast path only: it takes a chunk when its size line is plain (see
        _plain_chunk_size) and ends in ``buf``, and its data and CRLF are all
        in ``buf`` or its data runs to the end of ``buf``; it leaves
        everything else (extensions, BWS, the last chunk, any error) to the
        general path.  A chunk it takes would go through that path without
        an event and with the same body bytes: _take_line returns the digits
        (within max_line, so no error), _parse_chunk_size their value (within
        max_chunk_size_digits and below 2^63), _start_chunk enters
        _CHUNK_DATA, which takes the data (all of it, or up to the end of the
        piece) and, finding the CRLF, returns to _CHUNK_SIZE.
        """
        end = len(buf)
        sizes = self._plain_sizes
        while True:
            lf = buf.find(b"\n", pos)
            if lf < 0:
                return pos
            line = buf[pos:lf]
            size = sizes.get(line)
            if size is None:
                size = self._plain_chunk_size(line)
                if size is None:
                    return pos
            data_start = lf + 1
            data_end = data_start + size
            if buf[data_end : data_end + 2] == b"\r\n":
                body.append(buf[data_start:data_end])
                pos = data_end + 2
            elif data_end >= end:  # the data is cut by the end of the piece
                if data_start < end:  # _CHUNK_DATA takes nothing at the end
                    body.append(buf[data_start:])
                self._remaining = data_end - end
                # _CHUNK_DATA, or with all the data here, what it leaves
                self._state = _CHUNK_DATA if data_end > end else _CHUNK_END
                return end
            else:
                return pos

    def _plain_chunk_size(self, line: bytes) -> int | None:
        """The size of a chunk-size line (LF excluded) that is hex digits and
        an optional CR, within max_line and max_chunk_size_digits, not 0 and
        below 2^63; else None.  Remembered in _plain_sizes (a few entries:
        the sizes of one stream repeat)."""
        digits = line[:-1] if line.endswith(b"\r") else line
        if (
            not digits
            or digits.lstrip(_HEX_DIGITS)
            or len(digits) > self._max_chunk_size_digits
            or len(digits) > self._max_line
        ):
            return None
        size = int(digits, 16)
        if size == 0 or size >= _SIZE_LIMIT:
            return None
        if len(self._plain_sizes) >= _PLAIN_SIZES_KEPT:
            self._plain_sizes.clear()
        self._plain_sizes[line] = size
        return size

    # -- lines (rules 3 and 10) ---------------------------------------------------

    def _take_line(
        self, buf: bytes, pos: int, base: int, *, in_head: bool
    ) -> tuple[bytes | None, int]:
        """Gathers the line that starts (or continues) at ``buf[pos]``.

        Returns the line without its terminator and the position after its
        LF, or ``None`` and the end of ``buf`` when the line is still
        incomplete.  The byte budgets are checked on what has arrived: the
        line's length (a final CR may still turn out to be the terminator's,
        so it does not count yet) and, for the head and trailer sections, the
        section's size.
        """
        if not self._line:
            self._line_start = base + pos
        lf = buf.find(b"\n", pos)
        stop = lf if lf >= 0 else len(buf)
        before_lf = len(self._line) + (stop - pos)
        # the last byte before the LF, from this piece or the kept part
        ends_cr = (buf[stop - 1 : stop] if stop > pos else self._line[-1:]) == b"\r"
        length = before_lf - ends_cr
        taken = before_lf + (lf >= 0)

        over_line = self._line_start + self._max_line if length > self._max_line else None
        over_head = None
        if in_head and self._line_start - self._head_start + taken > self._max_head:
            over_head = self._head_start + self._max_head
        if over_head is not None and (over_line is None or over_head <= over_line):
            raise self._fail(ErrorCode.HEAD_TOO_LARGE, over_head)
        if over_line is not None:
            raise self._fail(ErrorCode.LINE_TOO_LONG, over_line)

        if lf < 0:
            self._line += buf[pos:]
            return None, len(buf)
        if self._line:
            line = bytes(self._line) + buf[pos:lf]
            self._line.clear()
            return line[:length], lf + 1
        return buf[pos : pos + length], lf + 1

    # -- line parsers ---------------------------------------------------------------

    def _parse_status_line(self, line: bytes) -> None:
        """status-line = HTTP-version SP status-code SP [ reason-phrase ]
        (RFC 9112 section 4); the second SP may be missing when the reason is
        empty.  Checked left to right: the first byte that does not fit is
        the error position (a line that ends too early: its terminator)."""
        at = self._line_start
        n = len(line)

        def expect(ok: bool, index: int) -> None:
            if index >= n or not ok:
                raise self._fail(ErrorCode.STATUS_LINE, at + index)

        for index, expected in enumerate(_VERSION_PREFIX):
            expect(index < n and line[index] == expected, index)
        expect(n > 5 and line[5:6].isdigit(), 5)
        if line[5:6] != b"1":  # HTTP-version = "HTTP/" DIGIT "." DIGIT
            raise self._fail(ErrorCode.VERSION, at + 5)
        expect(n > 6 and line[6:7] == b".", 6)
        expect(n > 7 and line[7:8].isdigit(), 7)
        expect(n > 8 and line[8:9] == b" ", 8)
        for index in range(9, 12):
            expect(index < n and line[index : index + 1].isdigit(), index)
        status = int(line[9:12])
        if status == 101:  # rule 2
            raise self._fail(ErrorCode.UPGRADE, at + 9)
        if n > 12:
            expect(line[12:13] == b" ", 12)
            bad = _NOT_TEXT.search(line, 13)
            if bad is not None:
                raise self._fail(ErrorCode.STATUS_LINE, at + bad.start())

        # A new head: the previous response's state is no longer needed.
        self._status = status
        self._version = line[5:8]
        self._reason = line[13:]
        self._headers = []
        self._trailers = []
        self._keep_alive = False
        self._chunked = False
        self._content_length = -1
        self._must_close = False
        self._field_open = False
        self._cl_present = False
        self._cl_value = -1
        self._cl_error_pos = None
        self._te_present = False
        self._te_chunked = False
        self._te_error_pos = None
        self._conn_close = False
        self._conn_keep_alive = False

    def _parse_field_line(self, line: bytes, *, trailer: bool) -> None:
        """A non-empty line of the header or trailer section (rule 4):
        field-line = field-name ":" OWS field-value OWS (RFC 9112 section 5),
        or an obs-fold line continuing the previous field (section 5.2)."""
        at = self._line_start
        fields = self._trailers if trailer else self._headers
        fold = line[0] in _OWS
        if fold:
            if not self._field_open:  # nothing to continue (RFC 9112 section 2.2)
                raise self._fail(ErrorCode.HEADER, at)
            value_start = 1
        else:
            self._close_field(trailer=trailer)
            if len(fields) >= self._max_headers:
                raise self._fail(ErrorCode.TOO_MANY_HEADERS, at)
            colon = line.find(b":")
            name_end = colon if colon >= 0 else len(line)
            bad = _NOT_TCHAR.search(line, 0, name_end)
            if bad is not None:
                raise self._fail(ErrorCode.HEADER, at + bad.start())
            if name_end == 0 or colon < 0:  # empty name, or no colon
                raise self._fail(ErrorCode.HEADER, at + name_end)
            value_start = colon + 1

        raw = line[value_start:]
        value = raw.lstrip(_OWS)
        value_start += len(raw) - len(value)
        value = value.rstrip(_OWS)
        bad = _NOT_IN_VALUE.search(value)
        if bad is not None:
            raise self._fail(ErrorCode.HEADER, at + value_start + bad.start())

        if fold:  # the fold and the whitespace around it become one SP
            if value:
                name, previous = fields[-1]
                fields[-1] = (name, previous + b" " + value if previous else value)
            return
        fields.append((line[:name_end].lower(), value))
        self._field_open = True
        self._field_start = at

    def _parse_chunk_size(self, line: bytes) -> int:
        """chunk-size [ chunk-ext ] (RFC 9112 section 7.1), rule 6: hex digits
        (at most max_chunk_size_digits, value below 2^63), optional BWS, then
        nothing or ';' and extension text, which is not interpreted."""
        at = self._line_start
        digits = len(line) - len(line.lstrip(_HEX_DIGITS))
        if digits == 0:
            raise self._fail(ErrorCode.CHUNK_SIZE, at)
        size = int(line[:digits], 16)
        if digits > self._max_chunk_size_digits or size >= _SIZE_LIMIT:
            # the first digit over the count, or the one reaching 2^63
            value = 0
            for index in range(digits):
                value = value * 16 + int(line[index : index + 1], 16)
                if index >= self._max_chunk_size_digits or value >= _SIZE_LIMIT:
                    raise self._fail(ErrorCode.CHUNK_SIZE_TOO_LONG, at + index)
        rest = line[digits:].lstrip(_OWS)  # BWS
        if rest:
            index = len(line) - len(rest)
            if rest[0] != ord(";"):
                raise self._fail(ErrorCode.CHUNK_SIZE, at + index)
            bad = _NOT_TEXT.search(line, index + 1)
            if bad is not None:
                raise self._fail(ErrorCode.CHUNK_SIZE, at + bad.start())
        return size

    # -- framing fields (rules 5 and 7) -----------------------------------------------

    def _close_field(self, *, trailer: bool) -> None:
        """Interprets the last field once no obs-fold line can continue it.
        Problems are recorded and reported when the head is complete, since
        a later field can make them irrelevant (rule 5)."""
        if not self._field_open:
            return
        self._field_open = False
        if trailer:  # trailers never frame the message (RFC 9110 section 6.5.1)
            return
        name, value = self._headers[-1]
        if name == b"content-length":  # RFC 9110 section 8.6
            self._cl_present = True
            if self._cl_error_pos is None:
                for element in _elements(value):
                    if not element.isdigit() or not self._accept_content_length(element):
                        self._cl_error_pos = self._field_start
                        break
        elif name == b"transfer-encoding":  # RFC 9112 section 6.1
            if not self._te_present:
                self._te_present = True
                self._te_first_pos = self._field_start
            if self._te_error_pos is None:
                for element in _elements(value):
                    if not element:
                        continue
                    if not self._te_chunked and element.lower() == b"chunked":
                        self._te_chunked = True
                    else:
                        self._te_error_pos = self._field_start
                        break
        elif name == b"connection":  # RFC 9112 section 9.3
            for element in _elements(value):
                option = element.lower()
                if option == b"close":
                    self._conn_close = True
                elif option == b"keep-alive":
                    self._conn_keep_alive = True

    def _accept_content_length(self, digits: bytes) -> bool:
        """Takes one Content-Length value; False when it is 2^63 or more, or
        differs from an earlier one."""
        significant = digits.lstrip(b"0")
        if len(significant) > _SIZE_LIMIT_DECIMAL_DIGITS:
            return False
        value = int(digits)
        if value >= _SIZE_LIMIT or (self._cl_value >= 0 and value != self._cl_value):
            return False
        self._cl_value = value
        return True

    # -- transitions ------------------------------------------------------------------

    def _end_of_head(self, next_offset: int) -> bool:
        """The blank line after the header section: decides the framing.
        Returns False for an interim response, which is skipped (rule 2)."""
        self._close_field(trailer=False)
        if 100 <= self._status < 200:
            self._state = _STATUS_LINE
            self._head_start = next_offset
            return False
        no_body = self._status in (204, 304)
        if not no_body:  # RFC 9112 section 6.3, items 3-7
            if self._te_present:
                if self._te_error_pos is not None:
                    raise self._fail(ErrorCode.TRANSFER_ENCODING, self._te_error_pos)
                if not self._te_chunked:
                    raise self._fail(ErrorCode.TRANSFER_ENCODING, self._te_first_pos)
                self._chunked = True
                # RFC 9112 sections 6.1 and 6.3 item 3: faulty framing, close after
                self._must_close = self._cl_present or self._version == b"1.0"
            elif self._cl_present:
                if self._cl_error_pos is not None:
                    raise self._fail(ErrorCode.CONTENT_LENGTH, self._cl_error_pos)
                self._content_length = self._cl_value
            else:
                self._must_close = True  # close-delimited
        self._keep_alive = (
            not self._must_close
            and not self._conn_close
            and (self._version != b"1.0" or self._conn_keep_alive)
        )
        if no_body or self._content_length == 0:
            self._state = _COMPLETE
        elif self._chunked:
            self._state = _CHUNK_SIZE
        elif self._content_length > 0:
            self._remaining = self._content_length
            self._state = _BODY_LENGTH
        else:
            self._state = _BODY_CLOSE
        return True

    def _start_chunk(self, size: int, next_offset: int) -> None:
        if size == 0:  # last-chunk: the trailer section follows
            self._state = _TRAILER_LINE
            self._head_start = next_offset
            self._field_open = False
        else:
            self._remaining = size
            self._state = _CHUNK_DATA

    def _complete_message(self, next_offset: int, t_ns: int) -> ResponseComplete:
        self._message_started = False
        self._last_keep_alive = self._keep_alive
        if self._keep_alive:
            self._state = _STATUS_LINE
            self._head_start = next_offset
        else:
            self._state = _CLOSED  # rule 8
        return ResponseComplete(tuple(self._trailers), self._keep_alive, t_ns)

    def _head_event(self, t_ns: int) -> ResponseHead:
        return ResponseHead(
            self._status, self._reason, tuple(self._headers), self._version, self._keep_alive, t_ns
        )

    def _fail(self, code: ErrorCode, position: int) -> ProtocolError:
        self._state = _ERROR
        self._error = (code, position)
        error = error_from_code(code, position)
        assert isinstance(error, ProtocolError)
        return error
