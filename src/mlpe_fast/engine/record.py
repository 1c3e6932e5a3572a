"""The one record the engine makes per request.

Times are ``CLOCK_MONOTONIC`` nanoseconds taken in the engine (in C when the
compiled core is in use), with the meanings of ``docs/architecture.md``:

* ``t_sched``: when the scheduler meant the request to go (equals ``t_issue``
  for closed-loop issuing);
* ``t_issue``: just before the request bytes were written to the socket, or,
  for the first request on a new connection, just before the connect: the
  TCP connect and the TLS handshake are part of that request as a user's
  client would see it (``connect_ns`` says how long they took);
* ``response.t_head`` / ``t_first`` / ``t_done``: the reads that completed
  the head, the first content-bearing event and the ``[DONE]`` event (or the
  end of the body);
* ``t_end``: the read that completed the HTTP message (its arrival stamp
  with kernel stamps, below), or the moment the request failed;
* latency detail (rule R12 of ``csrc/mlpe_response.h``, not MLPerf
  metrics): ``response.t_first_content`` the read that completed the first
  event with non-empty ``content`` (after any reasoning or tool call),
  ``response.t_second`` the second content-bearing event, and
  ``response.gaps`` the gaps between content-bearing events, as a
  fixed-size histogram (the record keeps no stamp per event).

On Linux, cleartext reads (HTTP/1.1, h2c) carry the kernel's arrival stamps
(``kernel_stamps``): ``t_first`` and ``t_done`` are then when the data that
completed them arrived, and ``t_first_read`` / ``t_done_read`` when the
client read it, so their difference is the client's own lag.  Without
kernel stamps both pairs are equal.
"""

from __future__ import annotations

import msgspec

from ..wire.events import ResponseSummary

__all__ = ("RequestRecord",)


class RequestRecord(msgspec.Struct, frozen=True, gc=False):
    """What happened to one request.

    ``connect_ns`` is the connection setup (TCP connect and TLS handshake)
    this request waited for: zero on a connection already open.

    ``t_first_read`` and ``t_done_read`` are the read stamps of the reads
    that carried ``t_first`` and ``t_done`` (None with them);
    ``kernel_stamps`` says that ``t_first`` and ``t_done`` are the kernel's
    arrival stamps rather than read stamps (module doc); a ``t_done`` taken
    at the end of a body the server ended by closing is the read that saw
    the close either way (the kernel stamps data, not the close).

    ``segment_stamp`` says where ``t_first`` came from with segment stamps
    (``--receive-stamps packet``): 1 the arrival of the segment that carried
    the first token's last byte; 2, 3 or 4 the read's kernel stamp instead,
    because the capture never saw the connection's SYN-ACK, lost frames, or
    saw no segment with those bytes (``_receive_py.SEGMENT_*``); 0 without
    segment stamps.

    ``first_read_later_bytes`` (HTTP/2): how many bytes the read that
    completed the first token carried past that token's DATA frame (with
    segment stamps, the segment's piece of the read): other streams' frames,
    or the stream's own next token, that arrived with it or later.  The
    read has one arrival stamp, its newest data's (``csrc/mlpe_rxstamp.h``
    K2), so a first token with later bytes behind it may carry a later
    arrival than its own; with segment stamps the piece is one segment and
    its stamp is exact.  0 over HTTP/1.1, whose one stream per connection
    the next-token count (``t_second == t_first``) covers.

    ``endpoint`` is the index of the endpoint that served the request, in
    the order the run was given them (0 with one endpoint; see
    :mod:`.replicas`).

    ``error_class`` is ``None`` for a complete 2xx response; otherwise it
    names what went wrong (a :class:`mlpe_fast.errors.ProtocolError` subclass
    such as ``IncompleteResponse``, ``HTTPStatusError``, ``ConnectError``,
    ``ConnectTimeout``, ``TLSError``, ``HTTP2Unsupported``, ``IdleTimeout``,
    ``TotalTimeout``, ``Cancelled``, or ``EmptyAnswer``: a whole response
    with no output and no finish reason, ``connection.Exchange.record``)
    and ``error_message`` says it in one line.  Events that could not be
    decoded do not fail a request; ``response.chunk_errors`` counts them.
    """

    sample_index: int
    sample_id: str
    t_sched: int
    t_issue: int
    t_end: int
    response: ResponseSummary
    error_class: str | None = None
    error_message: str | None = None
    retries: int = 0
    connect_ns: int = 0
    t_first_read: int | None = None
    t_done_read: int | None = None
    kernel_stamps: bool = False
    endpoint: int = 0
    segment_stamp: int = 0
    first_read_later_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.error_class is None

    @property
    def t_first(self) -> int | None:
        return self.response.t_first

    @property
    def t_done(self) -> int | None:
        return self.response.t_done

    @property
    def t_first_content(self) -> int | None:
        return self.response.t_first_content

    @property
    def t_second(self) -> int | None:
        return self.response.t_second

    @property
    def ttft_ns(self) -> int | None:
        """Time to first token: ``t_first - t_issue`` (spec section 1.1)."""
        t_first = self.response.t_first
        return None if t_first is None else t_first - self.t_issue

    @property
    def ttfot_ns(self) -> int | None:
        """Time to first output token, ``t_first_content - t_issue``: to the
        first ``content`` text, after any reasoning or tool call (AIPerf's
        and GuideLLM's TTFO(T); not an MLPerf metric)."""
        t = self.response.t_first_content
        return None if t is None else t - self.t_issue

    @property
    def ttst_ns(self) -> int | None:
        """Time to second token, ``t_second - t_first``: from the first
        content-bearing event to the second, as AIPerf defines it (not an
        MLPerf metric)."""
        first, second = self.response.t_first, self.response.t_second
        return None if first is None or second is None else second - first

    @property
    def latency_ns(self) -> int:
        """Issue to ``t_done`` (the reference's COMPLETE), or to ``t_end``
        when the response never finished."""
        t_done = self.response.t_done
        return (self.t_end if t_done is None else t_done) - self.t_issue

    def without_texts(self) -> RequestRecord:
        """The record as a point keeps it once its tokens are counted and its
        lines logged (counting beside the load): the answer's texts dropped,
        every stamp, count, flag and ``usage`` kept.  Issue 23: a run's
        memory must not grow by the answers it received; what reads texts
        after that (accuracy scoring, an agentic turn's next prompt) keeps
        its own, bounded by its dataset."""
        response = self.response
        if not (
            response.content
            or response.reasoning
            or response.content_after_first
            or response.reasoning_after_first
            or response.tool_calls
            or response.tool_calls_after_first
        ):
            return self
        return msgspec.structs.replace(
            self,
            response=msgspec.structs.replace(
                response,
                content="",
                reasoning="",
                tool_calls=(),
                content_after_first="",
                reasoning_after_first="",
                tool_calls_after_first=(),
            ),
        )
