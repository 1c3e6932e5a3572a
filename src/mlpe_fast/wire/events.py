"""The events the wire decoders return, as frozen ``msgspec.Struct`` records.

Every event carries ``t_ns``: the arrival time passed with the input piece
that *completed* it (``CLOCK_MONOTONIC`` nanoseconds when the engine stamps
reads).  An event spread over several pieces carries the stamp of the last
one; several events completed by one piece share its stamp.  The decoders
never read a clock themselves.

The records are ``gc=False``: they hold only strings, bytes, numbers, tuples of
those, and (``usage``) a JSON dict, so they cannot form reference cycles.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import CHUNK_ERROR_MESSAGES, ErrorCode

__all__ = (
    "BodyData",
    "ChunkError",
    "Delta",
    "FirstToken",
    "NO_RESPONSE",
    "ResponseComplete",
    "ResponseHead",
    "ResponseSummary",
    "SSEEvent",
    "TokenGaps",
    "ToolCall",
    "ToolCallDelta",
)

Headers = tuple[tuple[bytes, bytes], ...]


def _short(value: bytes | str, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


# HTTP/1.1 framing ---------------------------------------------------------------


class ResponseHead(msgspec.Struct, frozen=True, gc=False):
    """A final (non-1xx) response head.

    ``headers`` keeps field order; names are lower-cased, values trimmed.
    ``keep_alive`` is what the head says; the connection may still turn out
    unusable (a close-delimited body), which :class:`ResponseComplete` tells.
    """

    status: int
    reason: bytes
    headers: Headers
    http_version: bytes
    keep_alive: bool
    t_ns: int


class BodyData(msgspec.Struct, frozen=True, gc=False):
    """Body bytes, de-framed (chunk sizes and extensions removed)."""

    data: bytes
    t_ns: int

    def __repr__(self) -> str:
        return f"BodyData(data={_short(self.data)}, t_ns={self.t_ns})"


class ResponseComplete(msgspec.Struct, frozen=True, gc=False):
    """The end of a response message; the connection can be reused when
    ``keep_alive`` is true."""

    trailers: Headers
    keep_alive: bool
    t_ns: int


# SSE ------------------------------------------------------------------------------


class SSEEvent(msgspec.Struct, frozen=True, gc=False):
    """A dispatched server-sent event (WHATWG HTML section 9.2.6).

    ``event`` is the event type (``"message"`` when the stream gave none);
    ``id`` is the last event ID at dispatch; text is decoded from UTF-8 with
    U+FFFD replacement, as the standard says.
    """

    data: str
    event: str
    id: str
    t_ns: int

    @property
    def done(self) -> bool:
        """True for OpenAI's ``data: [DONE]`` end-of-stream sentinel."""
        return self.data == "[DONE]"

    def __repr__(self) -> str:
        return (
            f"SSEEvent(data={_short(self.data)}, event={self.event!r}, "
            f"id={self.id!r}, t_ns={self.t_ns})"
        )


# OpenAI chunks ------------------------------------------------------------------------


class ToolCallDelta(msgspec.Struct, frozen=True, gc=False):
    """One tool-call fragment of a chunk; absent or null members are ``None``."""

    index: int
    id: str | None
    type: str | None
    name: str | None
    arguments: str | None


class Delta(msgspec.Struct, frozen=True, gc=False):
    """What one OpenAI chunk carried (rules S1-S10 of ``csrc/mlpe_oai.h``).

    ``usage`` is the decoded ``usage`` object when the chunk had one.
    """

    content: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCallDelta, ...]
    finish_reason: str | None
    usage: dict[str, Any] | None
    t_ns: int

    @property
    def content_bearing(self) -> bool:
        """True when the chunk carries a first-token fragment: non-empty
        content or reasoning, or a tool call with a non-empty name or
        arguments fragment (spec section 1.1, "first non-empty text
        fragment in any response category")."""
        return bool(
            self.content or self.reasoning or any(t.name or t.arguments for t in self.tool_calls)
        )


class ChunkError(msgspec.Struct, frozen=True, gc=False):
    """An SSE event whose data could not be used, or an in-stream error the
    endpoint sent.  Not terminal: the events around it still decode.

    ``code`` is one of 401-405 (:class:`mlpe_fast.errors.ErrorCode`);
    ``detail`` is the JSON path of a mistyped field (``CHUNK_SHAPE``) or the
    endpoint's message (``ENDPOINT_ERROR``), else empty; ``data`` is the raw
    event data.
    """

    code: int
    detail: str
    data: bytes
    t_ns: int

    @property
    def message(self) -> str:
        text = CHUNK_ERROR_MESSAGES[self.code]
        if self.code == ErrorCode.CHUNK_SHAPE:
            return f"{text} {self.detail}"
        if self.code == ErrorCode.ENDPOINT_ERROR and self.detail:
            return f"{text}: {self.detail}"
        return text

    def __repr__(self) -> str:
        return (
            f"ChunkError(code={self.code}, detail={self.detail!r}, "
            f"data={_short(self.data)}, t_ns={self.t_ns})"
        )


# Whole responses -------------------------------------------------------------------


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    """A tool call rebuilt from its fragments (spec section 1.2: arguments
    appended per index in arrival order; id and type kept; name fragments
    appended)."""

    index: int
    id: str
    type: str
    name: str
    arguments: str


class FirstToken(msgspec.Struct, frozen=True, gc=False):
    """The first content-bearing event of a response completed at ``t_ns``."""

    t_ns: int


class TokenGaps(msgspec.Struct, frozen=True, gc=False):
    """The gaps between a response's consecutive content-bearing events, in
    ns (rule R12 of ``csrc/mlpe_response.h``; not an MLPerf metric).

    ``count`` is the content-bearing events after the first; ``sum_ns``,
    ``min_ns`` and ``max_ns`` are exact; ``zero`` counts the gaps of 0 --
    events completed by one network read share its stamp -- which are in
    the histogram too (a stamp earlier than the one before counts as 0).
    ``buckets`` is the histogram's non-empty buckets in ascending order,
    each an (index, count) pair of little-endian 32-bit unsigned integers
    (8 bytes; layout in :mod:`mlpe_fast.wire.gaps`), or ``b""`` when the
    decoder kept none (``gap_histogram=False``): a fixed-size histogram
    rather than every stamp, so a record stays small however long the
    answer.
    """

    count: int
    zero: int
    sum_ns: int
    min_ns: int
    max_ns: int
    buckets: bytes

    def __repr__(self) -> str:
        return (
            f"TokenGaps(count={self.count}, zero={self.zero}, sum_ns={self.sum_ns}, "
            f"min_ns={self.min_ns}, max_ns={self.max_ns}, buckets={len(self.buckets) // 8})"
        )


class ResponseSummary(msgspec.Struct, frozen=True, gc=False):
    """Everything one response told, as ``ResponseDecoder.summary()`` sees it.

    Times are the ``t_ns`` of the pieces that completed each milestone
    (``None`` until reached): ``t_head`` the response head, ``t_first`` the
    first content-bearing event (rule R3 of ``csrc/mlpe_response.h``),
    ``t_done`` the ``[DONE]`` event, or the end of the message without one.

    Text per category is concatenated in arrival order; ``*_after_first``
    hold what arrived after the first content-bearing event (the TPOT token
    count, spec section 1.2); tool calls in ``tool_calls_after_first`` keep
    their id and type and carry the name/arguments suffixes, and calls with
    nothing after the first event are left out.

    Latency detail (rule R12; mlpe-fast's own figures, not MLPerf's):
    ``t_first_content`` is the first event with non-empty ``content`` (not
    reasoning, not a tool call; ``None`` when the answer has none),
    ``t_second`` the second content-bearing event, and ``gaps`` the gaps
    between consecutive content-bearing events (``None`` with fewer than
    two).

    ``error_code`` is 0, a terminal :class:`mlpe_fast.errors.ErrorCode` (the
    decoder raised it), or ``ErrorCode.HTTP_STATUS`` when the endpoint
    answered with a non-2xx status; ``error_message`` says what happened.
    ``chunk_errors`` counts events that could not be decoded (not terminal);
    ``first_chunk_error`` is the first of them.
    """

    status: int
    t_head: int | None
    t_first: int | None
    t_done: int | None
    content: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    content_after_first: str
    reasoning_after_first: str
    tool_calls_after_first: tuple[ToolCall, ...]
    finish_reason: str | None
    usage: dict[str, Any] | None
    events: int
    content_events: int
    events_after_done: int
    done: bool
    complete: bool
    keep_alive: bool
    chunk_errors: int
    first_chunk_error: ChunkError | None
    unexpected_bytes: int
    error_code: int
    error_message: str
    chunk_times: tuple[int, ...] | None
    t_first_content: int | None = None
    t_second: int | None = None
    gaps: TokenGaps | None = None

    @property
    def ok(self) -> bool:
        """A complete 2xx response without a terminal error."""
        return self.complete and self.error_code == 0


NO_RESPONSE = ResponseSummary(
    status=0,
    t_head=None,
    t_first=None,
    t_done=None,
    content="",
    reasoning="",
    tool_calls=(),
    content_after_first="",
    reasoning_after_first="",
    tool_calls_after_first=(),
    finish_reason=None,
    usage=None,
    events=0,
    content_events=0,
    events_after_done=0,
    done=False,
    complete=False,
    keep_alive=False,
    chunk_errors=0,
    first_chunk_error=None,
    unexpected_bytes=0,
    error_code=0,
    error_message="",
    chunk_times=None,
)
"""The summary of a request that never got a byte back (a connect error, say)."""
