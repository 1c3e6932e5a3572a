"""One request on its way: what a connection of either protocol carries.

An :class:`Exchange` is made by the client (:mod:`mlpe_fast.engine.client`),
queued by the pool (:mod:`mlpe_fast.engine.pool`) and carried by an HTTP/1.1
connection (:mod:`mlpe_fast.engine.connection`) or an HTTP/2 stream
(:mod:`mlpe_fast.engine.h2`), which turns its end into a
:class:`~mlpe_fast.engine.record.RequestRecord` (:meth:`Exchange.record`).
It lives below all of them so that each imports it and none imports another
for it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..wire.events import ResponseSummary
from .record import RequestRecord

__all__ = ("EMPTY_ANSWER", "Exchange", "ReadStamps", "empty_answer_message")

# A read core's (first_read_ns, done_read_ns, kernel_first, kernel_done,
# segment_first: where the first token's stamp came from, _receive_py.SEGMENT_*,
# later_first: bytes the first token's read carried past its frame, HTTP/2).
ReadStamps = tuple[int, int, bool, bool, int, int]


EMPTY_ANSWER = "EmptyAnswer"
"""The error class of a response that ended with neither output nor a finish
reason (:meth:`Exchange.record`)."""


def _is_empty_answer(summary: ResponseSummary) -> bool:
    return (
        summary.finish_reason is None
        and not summary.content
        and not summary.reasoning
        and not summary.tool_calls
    )


def empty_answer_message(summary: ResponseSummary) -> str:
    """Why an ``EmptyAnswer`` record failed, in one line."""
    end = "data: [DONE]" if summary.done else "the end of the body"
    return (
        f"the response ended ({end}, {summary.events} events) with no output and no finish "
        "reason: the endpoint cut it off (llama.cpp's interrupt_requests does so when the "
        "next request arrives) or sent no choices"
    )


class Exchange:
    """One request and what to call when it ends."""

    __slots__ = (
        "body",
        "connect_ns",
        "on_done",
        "on_first",
        "path",
        "request",
        "retries",
        "sample_id",
        "sample_index",
        "t_issue",
        "t_opened",
        "t_sched",
    )

    def __init__(
        self,
        body: bytes,
        path: str,
        request: bytes | None,
        on_done: Callable[[RequestRecord], object],
        on_first: Callable[[Exchange, int], object] | None,
        sample_index: int,
        sample_id: str,
        t_sched: int | None,
    ) -> None:
        self.body = body
        self.path = path
        # The HTTP/1.1 request, when the client knows it will be HTTP/1.1
        # (else the connection frames it: RequestFraming).
        self.request = request
        self.on_done = on_done
        self.on_first = on_first
        self.sample_index = sample_index
        self.sample_id = sample_id
        self.t_sched = t_sched
        self.t_issue = 0
        self.retries = 0
        # Set by the pool when this request opened its connection: the
        # connect began at t_opened, and the TCP connect plus the TLS
        # handshake took connect_ns (both part of the request, see dial).
        self.t_opened = 0
        self.connect_ns = 0

    def record(
        self,
        t_end: int,
        summary: ResponseSummary,
        error_class: str | None = None,
        error_message: str | None = None,
        reads: ReadStamps | None = None,
    ) -> RequestRecord:
        """The record of this exchange; ``reads`` are the read stamps of
        ``summary``'s first token and end when they were arrival stamps.

        A whole 2xx response that carried no output at all (no content,
        reasoning or tool call) and no finish reason is not an answer: it
        fails as ``EmptyAnswer`` (:func:`empty_answer_message`), so that it
        can never pass for a measured one."""
        if error_class is None and _is_empty_answer(summary):
            error_class, error_message = EMPTY_ANSWER, empty_answer_message(summary)
        t_issue = self.t_issue or t_end
        t_first, t_done = summary.t_first, summary.t_done
        kernel = False
        segment = later = 0
        t_first_read, t_done_read = t_first, t_done
        if reads is not None:
            first_read, done_read, kernel_first, kernel_done, segment_first, later_first = reads
            if t_first is not None:
                segment, later = segment_first, later_first
            if t_first is not None and first_read:
                t_first_read = first_read
            if t_done is not None and done_read:
                t_done_read = done_read
            # Kernel-stamped when every stamp the response has is.
            stamped = [k for t, k in ((t_first, kernel_first), (t_done, kernel_done)) if t]
            kernel = bool(stamped) and all(stamped)
        return RequestRecord(
            sample_index=self.sample_index,
            sample_id=self.sample_id,
            t_sched=t_issue if self.t_sched is None else self.t_sched,
            t_issue=t_issue,
            t_end=t_end,
            response=summary,
            error_class=error_class,
            error_message=error_message,
            retries=self.retries,
            connect_ns=self.connect_ns,
            t_first_read=t_first_read,
            t_done_read=t_done_read,
            kernel_stamps=kernel,
            segment_stamp=segment,
            first_read_later_bytes=later,
        )
