"""What the simulated endpoint's faults put on the wire (which request gets
one is :mod:`mlpe_fast.sim.faults`' business).

The status faults are a whole error response (:func:`fault_error`);
``reset-before-head`` and ``close-after-response`` are acts of the
connection (:mod:`mlpe_fast.sim._handling` starts them).  Every other fault
is a streamed response gone wrong: a :class:`FaultyStreamJob`, which
streams like :class:`~mlpe_fast.sim._jobs.StreamJob` (same events, same
deadlines, same stamps) up to the fault's point, its ``stop``, and there does
the fault's thing.  ``interrupt`` and ``empty-done`` also apply to a
response written whole (a non-streamed body, an SSE body with a
Content-Length): a :class:`FaultyBufferedJob`.  Only a faulted request pays
for any of this: a job without a fault never reaches this module.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from ._events import framed
from ._jobs import BufferedJob, Renders, StreamJob

__all__ = ("BUFFERED_FAULTS", "FaultyBufferedJob", "FaultyStreamJob", "fault_error")

_monotonic_ns = time.monotonic_ns
_NOISE_BYTES = 64 * 1024
_NOISE_CHUNK = 4096
# The broken pieces: JSON cut short, and two bytes that can begin no UTF-8
# sequence (FF never occurs in UTF-8, FE neither).
_MALFORMED = b'{"choices": ['
_INVALID_UTF8 = b"\xff\xfe"
_BAD_CHUNK_SIZE = b"zz\r\n"
# Fault steps (FaultyStreamJob.step): what at_stop() does next.
_AT_FAULT, _AFTER_FAULT = 0, 1
BUFFERED_FAULTS = frozenset({"interrupt", "empty-done"})
"""The faults that a response written whole carries out (:class:`FaultyBufferedJob`)."""


def fault_error(status: int) -> tuple[bytes, Sequence[tuple[bytes, bytes]]]:
    """The body (OpenAI's error shape) and extra headers of a status fault:
    429 is a rate limit with ``Retry-After: 1``, as OpenAI and vLLM's
    routers send it."""
    if status == 429:
        error = {
            "message": "Rate limit reached (simulated fault status-429); retry after 1 s",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        return msgspec.json.encode({"error": error}), ((b"retry-after", b"1"),)
    error = {
        "message": f"simulated fault status-{status}",
        "type": "invalid_request_error" if status < 500 else "server_error",
        "param": None,
        "code": f"mlpe_fault_{status}",
    }
    return msgspec.json.encode({"error": error}), ()


class FaultyStreamJob(StreamJob):
    """A streamed response with one fault (a name of
    :data:`mlpe_fast.sim.faults.FAULTS` that a stream carries out).

    Where the fault falls:

    * after the first half of the token events (``n // 2``: none of a
      one-token answer): ``reset-mid-stream``, ``truncated-chunk``,
      ``bad-chunk-size``, ``interrupt``, and the extra event of
      ``malformed-event``, ``invalid-utf8`` and ``oversized-event``;
    * after the first token: ``stall``;
    * after the last token (and the usage chunk): ``reset-after-last``,
      ``no-done``, ``double-done``;
    * instead of every event, at the first token's deadline: ``garbage``;
    * before anything: ``slow-head``'s head, a byte at a time;
    * instead of every event, at once: ``empty-done``'s ``[DONE]``.
    """

    __slots__ = ("fault", "head_left", "next_byte_ns", "step")

    def __init__(self, *args: Any, fault: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fault = fault
        self.step = _AT_FAULT
        n = self.n
        if fault in ("reset-after-last", "no-done", "double-done"):
            self.stop = n
        elif fault == "stall":
            self.stop = 1
        elif fault in ("garbage", "empty-done"):
            self.stop = 0
            self.role = None  # no event at all
        elif fault == "slow-head":
            self.stop = n
        else:
            self.stop = n // 2
        # slow-head: the bytes of the head still to write, and when the
        # next is due (the head is known once the responder has begun)
        self.head_left = b""
        self.next_byte_ns = 0

    # -- slow-head ------------------------------------------------------------------

    def fire(self, now_ns: int) -> int | None:
        if self.fault != "slow-head" or not self.head_pending:
            return super().fire(now_ns)
        out = self.out
        wire = out.wire
        if self.cancelled or out.gone or wire is None:
            return None
        if out.blocked:
            out.park(self)
            return None
        if self.next_byte_ns == 0:  # the first byte
            self.head_left = wire.stream_head
            self.next_byte_ns = now_ns
        if now_ns < self.next_byte_ns:  # woken early (a resumed transport)
            return self.next_byte_ns
        self.state.stats.writes += 1
        wire.write(self.head_left[:1])
        self.head_left = self.head_left[1:]
        self.next_byte_ns += int(self.state.config.fault_slow_head_s * 1e9)
        if self.head_left:
            return self.next_byte_ns
        # The head is out: the role chunk follows at once, the tokens at
        # their deadlines (those passed meanwhile go at once).
        self.head_pending = False
        if self.role is not None:
            self.state.stats.events += 1
            self.state.stats.writes += 1
            wire.write(self.role.render(b"", _monotonic_ns()))
        return super().fire(now_ns)

    # -- the other faults, at the stop --------------------------------------------------

    def at_stop(self, parts: list[bytes], events: int, head: bool, now_ns: int) -> int | None:
        fault = self.fault
        if self.step == _AFTER_FAULT or fault == "slow-head":
            return super().at_stop(parts, events, head, now_ns)
        out = self.out
        if fault == "reset-mid-stream":
            self.send(parts, events, head=head, end=False)
            out.reset()
            return None
        if fault == "reset-after-last":
            events += self.tail(parts)
            self.send(parts, events, head=head, end=False)
            out.reset()
            return None
        if fault == "no-done":
            events += self.tail(parts) - 1
            parts.pop()  # the [DONE]
            self.complete(parts, events, head=head)
            return None
        if fault == "double-done":
            events += self.tail(parts) + 1
            parts.append(parts[-1])
            self.complete(parts, events, head=head)
            return None
        if fault in ("interrupt", "empty-done"):
            # [DONE] where the finish reason and the usage would come, at
            # once: the last chunk (END_STREAM), and for interrupt a close
            parts.append(self.state.done[self.chunked])
            if fault == "interrupt" and out.wire is not None:
                out.wire.close_after_response()
            self.complete(parts, events + 1, head=head)
            return None
        if fault in ("truncated-chunk", "bad-chunk-size"):
            wire = out.wire
            assert wire is not None  # faults.applies() saw to it
            frame = self.content.render(self.tokens[self.i], _monotonic_ns())
            size_end = frame.index(b"\r\n") + 2
            if fault == "truncated-chunk":
                # the size line announces the whole event; half of it follows
                data_size = len(frame) - size_end - 2
                parts.append(frame[: size_end + data_size // 2])
            else:
                parts.append(_BAD_CHUNK_SIZE + frame[size_end:])
            self.send(parts, events, head=head, end=False)
            wire.hang_up()
            return None
        if fault == "garbage":
            if self.due > now_ns:  # the head now, the noise at the first token's deadline
                self.send(parts, events, head=head, end=False)
                return self.due
            picker = self.state.faults
            assert picker is not None
            noise = picker.noise(_NOISE_BYTES)
            if self.chunked:
                parts.extend(
                    b"%x\r\n%b\r\n" % (_NOISE_CHUNK, noise[at : at + _NOISE_CHUNK])
                    for at in range(0, _NOISE_BYTES, _NOISE_CHUNK)
                )
            else:
                parts.append(noise)
            wire = out.wire
            if wire is None:  # HTTP/2: END_STREAM after the noise
                self.complete(parts, events, head=head)
            else:  # HTTP/1.x: a clean close, without the last chunk
                self.send(parts, events, head=head, end=False)
                wire.hang_up()
            return None
        # The faults after which the stream goes on.
        self.step = _AFTER_FAULT
        self.stop = self.n
        if fault == "stall":
            # every later deadline follows from this one
            self.due += int(self.state.config.fault_stall_s * 1e9)
        else:
            parts.append(self._extra_event(fault))
            events += 1
        self.send(parts, events, head=head, end=False)
        return self.due

    def _extra_event(self, fault: str) -> bytes:
        """The event ``malformed-event``, ``invalid-utf8`` or
        ``oversized-event`` slips in between the token events."""
        if fault == "malformed-event":
            return framed(_MALFORMED, eol=self.state.eol, chunked=self.chunked)
        if fault == "invalid-utf8":
            text = _INVALID_UTF8
        else:  # oversized-event: a content string of that many characters
            text = b"x" * self.state.config.fault_event_bytes
        sglang = self.sglang_events()
        if sglang is not None:  # after the text so far, which it leaves alone
            return sglang.aside(text, _monotonic_ns())
        return self.content.render(text, _monotonic_ns())


class FaultyBufferedJob(BufferedJob):
    """A response written whole (a non-streamed body, or an SSE body with a
    Content-Length) with the ``interrupt`` or ``empty-done`` fault: the first
    ``n // 2`` tokens, or none, with no finish reason.

    A body has the text and ``finish_reason`` null (its usage counts the
    tokens sent); an SSE body has the role chunk and the token events (none
    for ``empty-done``), then ``[DONE]``, no usage chunk.  ``interrupt``'s
    body goes at the answer's last deadline, then the HTTP/1.x connection
    closes (FIN); ``empty-done``'s goes at once.
    """

    __slots__ = ("fault",)

    def __init__(self, *args: Any, fault: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fault = fault
        keep = self.n // 2 if fault == "interrupt" else 0
        self.tokens = self.tokens[:keep]
        if self.answer is not None:  # an oracle's: token i is its i-th run of text_chars
            self.answer = self.answer[: keep * self.text_chars]
        self.n = self.completion_tokens = keep
        self.k = min(self.k, keep)
        self.finish = None
        if fault == "empty-done":
            self.due = self.t0
        elif self.out.wire is not None:
            self.out.wire.close_after_response()

    def _sse_body(self) -> tuple[bytes, int]:
        state = self.state
        eol = state.eol
        out: list[bytes] = []
        if self.fault == "interrupt":
            bind = (self.rid, self.created, self.recv)
            content: Renders
            reasoning: Renders
            if self.gen.sglang:
                content = reasoning = self.new_sglang_events()
            elif self.gen.chat:
                role = state.role_shape.bind(*bind, eol=eol, chunked=False)
                out.append(role.render(b"", _monotonic_ns()))
                content = state.content_shape.bind(*bind, eol=eol, chunked=False)
                reasoning = (
                    state.reasoning_shape.bind(*bind, eol=eol, chunked=False) if self.k else content
                )
            else:
                content = reasoning = state.text_shape.bind(*bind, eol=eol, chunked=False)
            k = self.k
            for i, token in enumerate(self.tokens):
                out.append((reasoning if i < k else content).render(token, _monotonic_ns()))
        out.append(state.done[False])
        return b"".join(out), len(out)
