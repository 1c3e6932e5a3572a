"""Pure-Python twin of the whole-response decoder (``csrc/mlpe_response.h``).

It composes the Python twins of the three layers exactly as the C composes
the C layers, and keeps the same state, so that both produce equal events,
summaries and errors for any input and any split of it.  Rules R1-R12 are
those of ``csrc/mlpe_response.h``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from ..errors import ErrorCode, LocalProtocolError, ProtocolError, error_from_code
from ._h1_py import H1Decoder
from ._oai_py import ChunkDecoder, check_dialect
from ._sse_py import SSEDecoder
from ._summary import http_error_message, tool_calls_after_first
from .events import (
    BodyData,
    ChunkError,
    Delta,
    FirstToken,
    ResponseComplete,
    ResponseHead,
    ResponseSummary,
    TokenGaps,
    ToolCall,
)
from .gaps import bucket_of, pack_buckets

__all__ = ("ResponseDecoder",)

DEFAULT_MAX_BODY = 16 << 20  # MLPE_RESPONSE_DEFAULT_MAX_BODY
ERROR_BODY_MAX = 64 << 10  # MLPE_RESPONSE_ERROR_BODY_MAX

_NONE, _SSE, _JSON, _ERROR = range(4)  # mlpe_body_kind
_NO_INPUT, _WIRE_INPUT, _BODY_INPUT = range(3)  # mlpe_response_input

ResponseEvent = ResponseHead | FirstToken | ResponseComplete


def _media_type_is(value: bytes, expected: bytes) -> bool:
    """R1/R2: the value names `expected`, maybe followed by parameters."""
    n = len(expected)
    return value[:n].lower() == expected and (len(value) == n or value[n : n + 1] in b"; \t")


def _parted(text: str, before: str) -> int:
    """R11: where the UTF-8 bytes of two texts part (their common prefix)."""
    a, b = text.encode(), before.encode()
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _ToolCall:
    __slots__ = (
        "arguments",
        "arguments_first_len",
        "id",
        "index",
        "name",
        "name_first_len",
        "type",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.id = ""
        self.type = ""
        self.name = ""
        self.arguments = ""
        self.name_first_len = 0
        self.arguments_first_len = 0


class ResponseDecoder:
    """Decodes one HTTP/1.1 (or, in body mode, HTTP/2) response carrying an
    OpenAI completion.

    Args:
        max_line, max_head, max_headers, max_chunk_size_digits: HTTP/1.1
            limits (``csrc/mlpe_h1.h``).
        max_event: the SSE event size limit (``csrc/mlpe_sse.h``).
        max_body: the limit of a non-streaming body.
        record_chunk_times: keep the stamp of every content-bearing event in
            ``ResponseSummary.chunk_times``.
        gap_histogram: keep the histogram of the gaps between content-bearing
            events (rule R12, ``ResponseSummary.gaps.buckets``); without it
            the gaps' count, sum, minimum and maximum are still kept.
        dialect: the chunks' schema: ``"openai"`` (chat and completions) or
            ``"sglang"`` (SGLang's native ``/generate``, whose events carry
            the whole text so far: rule R11 makes the deltas, and fails the
            response with :class:`~mlpe_fast.errors.TextNotCumulative` when
            a text does not extend the text before it).

    ``feed(data, t_ns)`` returns what that piece completed (a
    :class:`ResponseHead`, a :class:`FirstToken`, a :class:`ResponseComplete`,
    in that order) and raises a :class:`mlpe_fast.errors.ProtocolError` on a
    terminal error, after which every call raises it again; ``summary()`` can
    be read at any time.

    Body mode (rule R9) serves a response whose framing is done elsewhere
    (HTTP/2: the h2 library decodes the head, another layer de-frames DATA):
    ``set_head``, then ``feed_body`` per piece of body, then ``end_body``.
    The head and body go through the same rules R1-R6 and R8 and give the
    same summary as the same head and body over HTTP/1.1, except that
    ``keep_alive`` stays false (the framing layer owns the connection) and
    ``unexpected_bytes`` 0.  The first call chooses the mode; a call of the
    other mode, or one out of order, raises
    :class:`mlpe_fast.errors.LocalProtocolError` (the error of an earlier
    call, when there was one, is raised again instead).
    """

    __slots__ = (
        "_body",
        "_body_offset",
        "_chunk_errors",
        "_chunk_times",
        "_closed",
        "_complete",
        "_content",
        "_content_events",
        "_content_first_len",
        "_content_len",
        "_done_seen",
        "_error",
        "_events",
        "_events_after_done",
        "_finish_reason",
        "_first_chunk_error",
        "_gap_buckets",
        "_gap_count",
        "_gap_max",
        "_gap_min",
        "_gap_sum",
        "_gap_zero",
        "_h1",
        "_keep_alive",
        "_kind",
        "_max_body",
        "_mode",
        "_oai",
        "_reasoning",
        "_reasoning_first_len",
        "_reasoning_len",
        "_sglang",
        "_sglang_text",
        "_sse",
        "_status",
        "_t_done",
        "_t_first",
        "_t_first_content",
        "_t_head",
        "_t_last_bearing",
        "_t_second",
        "_tools",
        "_trailers",
        "_unexpected_bytes",
        "_usage",
    )

    def __init__(
        self,
        *,
        max_line: int = 8192,
        max_head: int = 65536,
        max_headers: int = 128,
        max_chunk_size_digits: int = 16,
        max_event: int = 1 << 20,
        max_body: int = DEFAULT_MAX_BODY,
        record_chunk_times: bool = False,
        gap_histogram: bool = True,
        dialect: str = "openai",
    ) -> None:
        self._sglang = check_dialect(dialect)
        self._sglang_text = ""  # R11: the text so far
        self._h1 = H1Decoder(
            max_line=max_line,
            max_head=max_head,
            max_headers=max_headers,
            max_chunk_size_digits=max_chunk_size_digits,
        )
        self._sse = SSEDecoder(max_event=max_event)
        self._oai = ChunkDecoder(dialect)
        self._max_body = max_body
        self._chunk_times: list[int] | None = [] if record_chunk_times else None
        self._status = 0
        self._kind = _NONE
        self._mode = _NO_INPUT
        self._keep_alive = False
        self._complete = False
        self._closed = False
        self._done_seen = False
        self._t_head: int | None = None
        self._t_first: int | None = None
        self._t_done: int | None = None
        self._t_first_content: int | None = None  # R12
        self._t_second: int | None = None
        self._t_last_bearing = 0
        self._gap_count = self._gap_zero = self._gap_sum = self._gap_min = self._gap_max = 0
        self._gap_buckets: dict[int, int] | None = {} if gap_histogram else None
        self._events = 0
        self._content_events = 0
        self._events_after_done = 0
        self._chunk_errors = 0
        self._first_chunk_error: ChunkError | None = None
        self._unexpected_bytes = 0
        self._content: list[str] = []
        self._content_len = 0
        self._reasoning: list[str] = []
        self._reasoning_len = 0
        self._content_first_len = 0
        self._reasoning_first_len = 0
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._tools: list[_ToolCall] = []
        self._body = bytearray()
        self._body_offset = 0
        self._error: Exception | None = None
        self._trailers: tuple[tuple[bytes, bytes], ...] | None = None

    # -- input --------------------------------------------------------------

    def feed(self, data: bytes | bytearray | memoryview, t_ns: int) -> list[ResponseEvent]:
        """Feeds one piece that arrived at ``t_ns``."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LocalProtocolError("feed() after feed_eof()")
        if self._mode == _BODY_INPUT:
            raise LocalProtocolError("feed() in body mode (after set_head())")
        data = bytes(data)
        self._mode = _WIRE_INPUT
        out: list[ResponseEvent] = []
        if self._complete:  # R7: bytes, if any, after the message
            if data:
                self._unexpected(len(data))
            return out
        h1_events: list[ResponseHead | BodyData | ResponseComplete] = []
        failure: ProtocolError | None = None
        try:
            used = self._h1.feed_into(data, t_ns, h1_events, stop_after_message=True)
        except ProtocolError as exc:
            failure, used = exc, len(data)
        # The C composite acts on each framing result as it comes, so an
        # error in a later layer wins over a framing error further on.
        for event in h1_events:
            self._on_h1_event(event, t_ns, out)
        if failure is not None:
            self._fail(failure)
        if used < len(data):  # R7
            self._unexpected(len(data) - used)
        self._report_complete(out, t_ns)
        return out

    def feed_eof(self, t_ns: int) -> list[ResponseEvent]:
        """The peer closed the connection at ``t_ns``."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LocalProtocolError("feed_eof() called twice")
        if self._mode == _BODY_INPUT:
            raise LocalProtocolError("feed_eof() in body mode (after set_head())")
        self._mode = _WIRE_INPUT
        self._closed = True
        out: list[ResponseEvent] = []
        if self._complete:
            return out
        try:
            events = self._h1.feed_eof(t_ns)
        except ProtocolError as exc:
            if not self._done_seen:
                self._fail(exc)
            # R4: the stream said it was done; only the framing's end is missing.
            self._message_done(False, t_ns, out)
            self._trailers = ()
            self._report_complete(out, t_ns)
            return out
        if not events:
            # Nothing of a response arrived at all: for a request we sent,
            # that is an incomplete response too.
            self._fail(error_from_code(ErrorCode.INCOMPLETE, self._h1.offset))
        for event in events:
            self._on_h1_event(event, t_ns, out)
        self._report_complete(out, t_ns)
        return out

    # -- body mode (R9) -----------------------------------------------------

    def set_head(
        self, status: int, headers: Sequence[tuple[bytes, bytes]], t_ns: int
    ) -> list[ResponseEvent]:
        """R9: the final head of a response framed elsewhere arrived at ``t_ns``.

        ``headers`` are as the h2 library delivers them: lower-case byte
        names, byte values, pseudo-header fields already removed.  The first
        ``content-type`` and ``content-encoding`` fields are read for R1/R2,
        exactly as an HTTP/1.1 head's are.  Returns ``[ResponseHead(status,
        b"", tuple(headers), b"2", False, t_ns)]`` (``b"2"`` marks HTTP/2).

        Raises:
            UnsupportedContentEncoding: R2 (position 0, as over HTTP/1.1).
            LocalProtocolError: a status outside 200-599 (interim 1xx heads
                are the framing layer's business), or a second head, or a
                head after ``feed``/``feed_eof``.
        """
        if self._error is not None:
            raise self._error
        if self._mode == _BODY_INPUT:
            raise LocalProtocolError("set_head() called twice")
        if self._mode == _WIRE_INPUT:
            raise LocalProtocolError("set_head() after feed()")
        if not 200 <= status <= 599:
            raise LocalProtocolError(f"set_head() with status {status}, not a final 200-599")
        self._mode = _BODY_INPUT
        content_type: bytes | None = None
        content_encoding: bytes | None = None
        for name, value in headers:
            if name == b"content-type" and content_type is None:
                content_type = bytes(value)
            elif name == b"content-encoding" and content_encoding is None:
                content_encoding = bytes(value)
        self._apply_head(status, content_type, content_encoding, t_ns)
        return [ResponseHead(status, b"", tuple(headers), b"2", False, t_ns)]

    def feed_body(self, data: bytes | bytearray | memoryview, t_ns: int) -> list[ResponseEvent]:
        """R9: de-framed body bytes that arrived at ``t_ns``; returns
        ``[FirstToken]`` when they completed the first content-bearing event.

        Raises a :class:`mlpe_fast.errors.ProtocolError` on a terminal error
        of the body (its position counts body bytes, R8), and
        :class:`mlpe_fast.errors.LocalProtocolError` before ``set_head`` or
        after ``end_body``.
        """
        if self._error is not None:
            raise self._error
        if self._mode != _BODY_INPUT:
            raise LocalProtocolError("feed_body() without set_head()")
        if self._complete:
            raise LocalProtocolError("feed_body() after end_body()")
        out: list[ResponseEvent] = []
        self._on_body(bytes(data), t_ns, out)
        return out

    def end_body(self, t_ns: int) -> list[ResponseEvent]:
        """R9: the message ended at ``t_ns``.

        Returns ``[ResponseComplete((), False, t_ns)]``, preceded by a
        :class:`FirstToken` when a JSON body (decoded now, R1) carried
        content.  ``t_done`` is ``t_ns`` unless ``[DONE]`` came (R4).
        Raises :class:`mlpe_fast.errors.LocalProtocolError` before
        ``set_head`` or when called twice.
        """
        if self._error is not None:
            raise self._error
        if self._mode != _BODY_INPUT:
            raise LocalProtocolError("end_body() without set_head()")
        if self._complete:
            raise LocalProtocolError("end_body() called twice")
        out: list[ResponseEvent] = []
        # The framing layer owns the connection: nothing here says it can be
        # reused.
        self._message_done(False, t_ns, out)
        out.append(ResponseComplete((), False, t_ns))
        return out

    # -- layers -------------------------------------------------------------

    def _on_h1_event(
        self,
        event: ResponseHead | BodyData | ResponseComplete,
        t_ns: int,
        out: list[ResponseEvent],
    ) -> None:
        if isinstance(event, BodyData):
            self._on_body(event.data, t_ns, out)
        elif isinstance(event, ResponseHead):
            fields = dict(event.headers)  # the last field of a name wins, as in C
            self._apply_head(
                event.status, fields.get(b"content-type"), fields.get(b"content-encoding"), t_ns
            )
            out.append(event)
        else:
            self._message_done(event.keep_alive, t_ns, out)
            self._trailers = event.trailers

    def _message_done(self, keep_alive: bool, t_ns: int, out: list[ResponseEvent]) -> None:
        if self._kind == _SSE and self._events == 0:  # R10
            self._fail(error_from_code(ErrorCode.NO_EVENTS, self._body_offset))
        self._complete = True
        self._keep_alive = keep_alive
        if self._kind == _JSON:
            self._decode_chunk(bytes(self._body), t_ns, out)
        if self._t_done is None:  # R4
            self._t_done = t_ns

    def _report_complete(self, out: list[ResponseEvent], t_ns: int) -> None:
        """The completion goes last, once this piece has settled keep_alive (R7)."""
        if self._trailers is not None:
            out.append(ResponseComplete(self._trailers, self._keep_alive, t_ns))
            self._trailers = None

    def _apply_head(
        self,
        status: int,
        content_type: bytes | None,
        content_encoding: bytes | None,
        t_ns: int,
    ) -> None:
        """R1/R2 for a final head, however it was framed (``None``: the field
        is absent)."""
        self._status = status
        self._t_head = t_ns
        if content_encoding is not None and not _media_type_is(content_encoding, b"identity"):
            self._fail(error_from_code(ErrorCode.CONTENT_ENCODING, 0))
        if not 200 <= status <= 299:
            self._kind = _ERROR
        elif content_type is not None and _media_type_is(content_type, b"text/event-stream"):
            self._kind = _SSE
        else:
            self._kind = _JSON

    def _on_body(self, data: bytes, t_ns: int, out: list[ResponseEvent]) -> None:
        at = self._body_offset
        self._body_offset += len(data)
        if self._kind == _SSE:
            events: list[bytes] = []
            failure: ProtocolError | None = None
            try:
                self._sse.feed_raw(data, events)
            except ProtocolError as exc:
                failure = exc
            for event in events:
                self._on_sse_event(event, t_ns, out)
            if failure is not None:
                self._fail(failure)
        elif self._kind == _JSON:
            room = self._max_body - len(self._body)
            if len(data) > room:
                self._body += data[:room]  # as C: independent of the split
                self._fail(error_from_code(ErrorCode.BODY_TOO_LARGE, at + room))
            self._body += data
        else:  # R1: kept for its message, truncated
            self._body += data[: ERROR_BODY_MAX - len(self._body)]

    def _on_sse_event(self, data: bytes, t_ns: int, out: list[ResponseEvent]) -> None:
        self._events += 1
        if self._done_seen:  # R4
            self._events_after_done += 1
            return
        if data == b"[DONE]":
            self._done_seen = True
            self._t_done = t_ns
            return
        self._decode_chunk(data, t_ns, out)

    def _decode_chunk(self, data: bytes, t_ns: int, out: list[ResponseEvent]) -> None:
        hit = self._oai._template_hit(data)
        if hit is not None:  # a chunk whose only fragment is this text
            reasoning, text = hit
            if self._apply_fragment(reasoning, text, t_ns):
                out.append(FirstToken(t_ns))
            return
        chunk = self._oai._decode_miss(data, t_ns)
        if isinstance(chunk, ChunkError):  # R5
            self._chunk_errors += 1
            if self._first_chunk_error is None:
                self._first_chunk_error = chunk
            return
        if self._apply(chunk, t_ns):
            out.append(FirstToken(t_ns))

    def _apply(self, chunk: Delta, t_ns: int) -> bool:
        """R3/R6/R11; returns True for the first content-bearing chunk."""
        content = chunk.content
        if self._sglang and content is not None and self._sglang_text:
            # R11: the text so far; what it adds is beyond the text kept
            # (str prefixes are UTF-8 byte prefixes of whole texts).
            before = self._sglang_text
            if not content.startswith(before):
                self._fail(error_from_code(ErrorCode.TEXT_NOT_CUMULATIVE, _parted(content, before)))
            self._sglang_text = content
            content = content[len(before) :]
        elif self._sglang and content is not None:
            self._sglang_text = content
        if content is not None:
            self._content.append(content)
            self._content_len += len(content)
        reasoning = chunk.reasoning
        if reasoning is not None:
            self._reasoning.append(reasoning)
            self._reasoning_len += len(reasoning)
        for fragment in chunk.tool_calls:
            tool = self._tool_for_index(fragment.index)
            if fragment.id is not None:
                tool.id = fragment.id
            if fragment.type is not None:
                tool.type = fragment.type
            if fragment.name is not None:
                tool.name += fragment.name
            if fragment.arguments is not None:
                tool.arguments += fragment.arguments
        if chunk.finish_reason is not None:
            self._finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            self._usage = chunk.usage
        # chunk.content_bearing, its first test made here; an SGLang chunk
        # bears what its text adds (R11), and nothing else
        if not content and (self._sglang or not chunk.content_bearing):
            return False
        return self._content_bearing_chunk(t_ns, bool(content))

    def _apply_fragment(self, reasoning: bool, text: str, t_ns: int) -> bool:
        """:meth:`_apply` for a Delta whose only fragment is ``text``, as
        content or reasoning: nothing else to apply."""
        if reasoning:
            self._reasoning.append(text)
            self._reasoning_len += len(text)
        else:
            self._content.append(text)
            self._content_len += len(text)
        return bool(text) and self._content_bearing_chunk(t_ns, not reasoning)

    def _content_bearing_chunk(self, t_ns: int, has_content: bool) -> bool:
        """R3: counts a content-bearing chunk (``has_content``: it bears
        content, R12); True for the first."""
        self._content_events += 1
        if self._chunk_times is not None:
            self._chunk_times.append(t_ns)
        if has_content and self._t_first_content is None:  # R12
            self._t_first_content = t_ns
        if self._t_first is not None:
            if self._t_second is None:
                self._t_second = t_ns
            self._count_gap(t_ns)
            return False
        self._t_first = self._t_last_bearing = t_ns
        self._content_first_len = self._content_len
        self._reasoning_first_len = self._reasoning_len
        for tool in self._tools:
            tool.name_first_len = len(tool.name)
            tool.arguments_first_len = len(tool.arguments)
        return True

    def _count_gap(self, t_ns: int) -> None:
        """R12: one more gap, from the latest content-bearing event to this one."""
        gap = t_ns - self._t_last_bearing
        if gap <= 0:
            gap = 0
            self._gap_zero += 1
        else:
            self._t_last_bearing = t_ns
        if self._gap_count == 0 or gap < self._gap_min:
            self._gap_min = gap
        self._gap_max = max(self._gap_max, gap)
        self._gap_count += 1
        self._gap_sum += gap
        if self._gap_buckets is not None:
            bucket = bucket_of(gap)
            self._gap_buckets[bucket] = self._gap_buckets.get(bucket, 0) + 1

    def _gaps(self) -> TokenGaps | None:
        if self._gap_count == 0:
            return None
        buckets = self._gap_buckets
        return TokenGaps(
            count=self._gap_count,
            zero=self._gap_zero,
            sum_ns=self._gap_sum,
            min_ns=self._gap_min,
            max_ns=self._gap_max,
            buckets=pack_buckets(sorted(buckets.items())) if buckets else b"",
        )

    def _tool_for_index(self, index: int) -> _ToolCall:
        for tool in reversed(self._tools):
            if tool.index == index:
                return tool
        tool = _ToolCall(index)
        self._tools.append(tool)
        return tool

    # -- failure ------------------------------------------------------------

    def _fail(self, error: Exception) -> NoReturn:
        self._error = error
        self._keep_alive = False
        raise error

    def _unexpected(self, n: int) -> None:
        self._unexpected_bytes += n
        self._keep_alive = False

    # -- output -------------------------------------------------------------

    def summary(self) -> ResponseSummary:
        """What the response told so far (see :class:`ResponseSummary`)."""
        content = "".join(self._content)
        reasoning = "".join(self._reasoning)
        calls = [
            (
                ToolCall(index=t.index, id=t.id, type=t.type, name=t.name, arguments=t.arguments),
                t.name_first_len,
                t.arguments_first_len,
            )
            for t in self._tools
        ]
        if isinstance(self._error, ProtocolError):
            error_code, error_message = int(self._error.code), str(self._error)
        elif self._complete and self._kind == _ERROR:
            error_code = int(ErrorCode.HTTP_STATUS)
            error_message = http_error_message(self._status, bytes(self._body))
        else:
            error_code, error_message = 0, ""
        first = self._t_first is not None
        return ResponseSummary(
            status=self._status,
            t_head=self._t_head,
            t_first=self._t_first,
            t_done=self._t_done,
            content=content,
            reasoning=reasoning,
            tool_calls=tuple(call for call, _, _ in calls),
            content_after_first=content[self._content_first_len :] if first else "",
            reasoning_after_first=reasoning[self._reasoning_first_len :] if first else "",
            tool_calls_after_first=tool_calls_after_first(calls) if first else (),
            finish_reason=self._finish_reason,
            usage=self._usage,
            events=self._events,
            content_events=self._content_events,
            events_after_done=self._events_after_done,
            done=self._done_seen,
            complete=self._complete,
            keep_alive=self._keep_alive,
            chunk_errors=self._chunk_errors,
            first_chunk_error=self._first_chunk_error,
            unexpected_bytes=self._unexpected_bytes,
            error_code=error_code,
            error_message=error_message,
            chunk_times=tuple(self._chunk_times) if self._chunk_times is not None else None,
            t_first_content=self._t_first_content,
            t_second=self._t_second,
            gaps=self._gaps(),
        )
