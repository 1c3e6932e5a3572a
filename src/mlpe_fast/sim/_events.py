"""Pre-encoded SSE events for the simulated endpoint's hot path.

A streamed response repeats one JSON document per token where only the
token text and the send stamp change.  :class:`Shape` encodes such a
document once, through the very encoders in :mod:`mlpe_fast.sim.stream`,
with marker values in the variable places; :meth:`Shape.bind` fixes the
per-response values (id, ``created``, receive stamp) and yields an
:class:`Event` whose :meth:`Event.render` is a single bytes formatting
operation.  The output is byte-for-byte what
``chunk_frame(sse_event(chat_chunk(...)))`` gives for the same values (the
tests check this).
"""

from __future__ import annotations

from collections.abc import Callable

from .stream import chunk_frame, sse_event

__all__ = (
    "CREATED_MARK",
    "ID_MARK",
    "RECV_MARK",
    "STAMP_MARK",
    "TEXT_MARK",
    "Event",
    "Shape",
    "framed",
)

# Marker values: each encodes to a byte string that cannot occur elsewhere
# in a chunk (control characters are escaped by JSON; the integers are
# negative and 19 digits long).
TEXT_MARK = "\x00"
ID_MARK = "\x01"
CREATED_MARK = -7_777_777_777_777_777_771
RECV_MARK = -7_777_777_777_777_777_772
STAMP_MARK = -7_777_777_777_777_777_773

_SLOTS: tuple[tuple[str, bytes], ...] = (
    ("text", b"\\u0000"),
    ("id", b"\\u0001"),
    ("created", b"%d" % CREATED_MARK),
    ("recv", b"%d" % RECV_MARK),
    ("stamp", b"%d" % STAMP_MARK),
)
_FIXED = ("id", "created", "recv")


class Shape:
    """A JSON document with holes, encoded once.

    Args:
        encode: called with the marker values as ``encode(text=...,
            response_id=..., created=..., extra=...)``; must return the
            document with ``extra`` merged in at the top level.  ``extra`` is
            ``{"mlpe_recv_ns": RECV_MARK, "mlpe_send_ns": STAMP_MARK}``.

    The document must hold the id, created, receive-stamp and send-stamp
    holes, and may hold one text hole, which must come before the send
    stamp.  The pieces between the variable holes (text, stamp) become
    bytes %-format strings, so :meth:`bind` costs three formatting
    operations.
    """

    __slots__ = ("_formats",)

    def __init__(self, encode: Callable[..., bytes]) -> None:
        doc = encode(
            text=TEXT_MARK,
            response_id=ID_MARK,
            created=CREATED_MARK,
            extra={"mlpe_recv_ns": RECV_MARK, "mlpe_send_ns": STAMP_MARK},
        )
        found: list[tuple[int, str, bytes]] = []
        for name, mark in _SLOTS:
            count = doc.count(mark)
            if count > 1 or (count == 0 and name != "text"):
                raise ValueError(f"hole {name!r} found {count} times in {doc!r}")
            if count:
                found.append((doc.index(mark), name, mark))
        found.sort()
        names = [name for _, name, _ in found]
        if "text" in names and names.index("text") > names.index("stamp"):
            raise ValueError("the text hole must precede the send stamp")
        # Segments between the variable holes, each a format string with
        # %b where a per-response value goes, and which values go there.
        formats: list[tuple[bytes, tuple[int, ...]]] = []
        fmt = bytearray(b"data: ")
        order: list[int] = []
        pos = 0
        for at, name, mark in found:
            fmt += doc[pos:at].replace(b"%", b"%%")
            pos = at + len(mark)
            if name in _FIXED:
                fmt += b"%b"
                order.append(_FIXED.index(name))
            else:
                formats.append((bytes(fmt), tuple(order)))
                fmt, order = bytearray(), []
        fmt += doc[pos:].replace(b"%", b"%%")
        formats.append((bytes(fmt), tuple(order)))
        if len(formats) == 2:  # no text hole: an empty one before the stamp
            formats.insert(1, (b"", ()))
        self._formats = tuple(formats)

    def bind(
        self, response_id: str, created: int, recv_ns: int, *, eol: bytes, chunked: bool
    ) -> Event:
        """The event of this shape for one response, ready to render."""
        values = (response_id.encode("ascii"), b"%d" % created, b"%d" % recv_ns)
        head, mid, tail = (fmt % tuple([values[i] for i in order]) for fmt, order in self._formats)
        return Event(head, mid, tail + eol + eol, chunked)


class Event:
    """One pre-encoded event: ``head + text + mid + stamp + tail``,
    optionally in one chunk of the chunked transfer coding."""

    __slots__ = ("_chunked", "_fixed", "_head", "_mid", "_tail")

    def __init__(self, head: bytes, mid: bytes, tail: bytes, chunked: bool) -> None:
        self._head = head
        self._mid = mid
        self._tail = tail
        self._fixed = len(head) + len(mid) + len(tail)
        self._chunked = chunked

    def render(self, text: bytes, stamp: int) -> bytes:
        """The event with ``text`` (already JSON-escaped) and ``stamp``."""
        s = b"%d" % stamp
        if self._chunked:
            return b"%x\r\n%b%b%b%b%b\r\n" % (
                self._fixed + len(text) + len(s),
                self._head,
                text,
                self._mid,
                s,
                self._tail,
            )
        return b"%b%b%b%b%b" % (self._head, text, self._mid, s, self._tail)


def framed(data: bytes, *, eol: bytes, chunked: bool) -> bytes:
    """``data`` as an SSE event, chunk-framed if asked (the slow path)."""
    event = sse_event(data, eol=eol)
    return chunk_frame(event) if chunked else event
