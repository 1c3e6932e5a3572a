"""The simulated endpoint's response jobs: a completion being generated,
which the pacer (:mod:`mlpe_fast.sim._pacer`) fires at its deadlines.

A job renders events and hands them to its
:class:`~mlpe_fast.sim._responder.Responder`; it knows nothing of the
framing (HTTP/1.1 head and chunks, or HTTP/2 HEADERS and DATA frames)
beyond whether events are chunk-framed.  See :mod:`mlpe_fast.sim.server`
for the timing and the meaning of the stamps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from ._events import Event, framed
from .stream import (
    chat_chunk,
    chat_completion,
    completion_chunk,
    sglang_finish,
    sglang_generate,
    text_completion,
)

if TYPE_CHECKING:
    from ._responder import Responder
    from ._state import ServerState

__all__ = ("BufferedJob", "Gen", "ReplayJob", "ResponseJob", "SGLangEvents", "StreamJob")

# Events per write: ~1 MB of chunks, so that a long zero-delay stream yields
# the loop (and honours a full transport buffer) between writes.
_MAX_EVENTS_PER_WRITE = 4096
_monotonic_ns = time.monotonic_ns


@dataclass(slots=True)
class Gen:
    """What a completion request asks for; ``sglang``: a ``/generate``
    request, answered in SGLang's objects."""

    chat: bool
    stream: bool
    include_usage: bool
    max_tokens: int | None
    prompt_tokens: int
    sglang: bool = False


class Renders(Protocol):
    """What renders a stream's token events: an :class:`~._events.Event`,
    or an :class:`SGLangEvents`."""

    def render(self, text: bytes, stamp: int) -> bytes: ...


def _unescaped(text: bytes) -> str:
    """A token's text from its JSON-escaped bytes (``ResponseJob.tokens``)."""
    if b"\\" not in text:
        return text.decode("utf-8")
    return str(msgspec.json.decode(b'"' + text + b'"'))


class SGLangEvents:
    """The events of one SGLang ``/generate`` stream, token after token:
    each carries the whole text so far and the tokens counted so far, as
    SGLang sends them by default, or with ``incremental`` only the token's
    own text, as a server started with ``--incremental-streaming-output``
    does (``output_ids`` is the token's position either way, a stand-in no
    client should read).  Unlike an :class:`~._events.Event` it keeps state:
    each :meth:`render` is the next token's event."""

    __slots__ = (
        "_chunked",
        "_eol",
        "_incremental",
        "_max_new",
        "_prompt",
        "_recv",
        "_rid",
        "n",
        "text",
    )

    def __init__(
        self,
        rid: str,
        gen: Gen,
        recv_ns: int,
        *,
        eol: bytes,
        chunked: bool,
        incremental: bool,
    ) -> None:
        self._rid = rid
        self._prompt = gen.prompt_tokens
        self._max_new = gen.max_tokens
        self._recv = recv_ns
        self._eol = eol
        self._chunked = chunked
        self._incremental = incremental
        self.text = ""  # the text so far
        self.n = 0  # the tokens so far

    def document(self, text: str, finish: str | None, stamp: int, *, keep: bool = True) -> bytes:
        """The next token's object (unframed), ``text`` its text; the last
        one has the ``finish`` reason.  ``keep=False`` leaves the stream as
        it was (an event slipped in by a fault)."""
        whole = self.text + text
        if keep:
            self.text = whole
            self.n += 1
        return sglang_generate(
            text if self._incremental else whole,
            completion_tokens=self.n if keep else self.n + 1,
            prompt_tokens=self._prompt,
            finish_reason=None if finish is None else sglang_finish(finish, self._max_new),
            output_ids=(self.n - 1 if keep else self.n,),
            response_id=self._rid,
            extra={"mlpe_recv_ns": self._recv, "mlpe_send_ns": stamp},
        )

    def render(self, text: bytes, stamp: int) -> bytes:
        """The next token's event, ``text`` its JSON-escaped text."""
        data = self.document(_unescaped(text), None, stamp)
        return framed(data, eol=self._eol, chunked=self._chunked)

    def aside(self, text: bytes, stamp: int) -> bytes:
        """An event with ``text`` (raw bytes, valid UTF-8 or not) after the
        text so far, which it leaves as it was."""
        mark = "\x00mlpe-sglang-aside\x00"
        data = self.document(mark, None, stamp, keep=False)
        return framed(
            data.replace(msgspec.json.encode(mark)[1:-1], text),
            eol=self._eol,
            chunked=self._chunked,
        )


class ResponseJob:
    """A completion response being generated; the pacer fires it."""

    __slots__ = (
        "answer",
        "cancelled",
        "completion_tokens",
        "created",
        "cut",
        "due",
        "finish",
        "first_send",
        "gen",
        "itl",
        "k",
        "n",
        "out",
        "recv",
        "rid",
        "state",
        "t0",
        "text_chars",
        "tokens",
    )

    def __init__(
        self,
        out: Responder,
        state: ServerState,
        gen: Gen,
        *,
        tokens: list[bytes],
        answer: str | None,
        finish: str | None,
        completion_tokens: int,
        reasoning: int,
        first_due: int,
        recv_ns: int,
        t0: int,
    ) -> None:
        self.cancelled = False
        self.out = out
        self.state = state
        self.gen = gen
        self.tokens = tokens
        # An oracle's answer: token i is its i-th run of text_chars characters.
        self.answer = answer
        self.text_chars = state.oracle.token_chars if state.oracle is not None else 1
        self.finish = finish
        self.completion_tokens = completion_tokens
        self.n = len(tokens)
        self.k = reasoning
        self.due = first_due
        self.itl = state.itl
        self.recv = recv_ns
        self.t0 = t0
        # The reset fault: abort once this many token events went out.
        cut = out.reset_after_tokens
        self.cut = None if cut is None else min(cut, self.n)
        self.rid = state.new_id(gen.chat)
        self.created = int(time.time())
        self.first_send = 0

    def text(self, i: int) -> str:
        """Token ``i`` as text (``tokens`` holds it JSON-escaped)."""
        answer = self.answer
        if answer is None:
            return self.tokens[i].decode("ascii")
        c = self.text_chars
        return answer[i * c : (i + 1) * c]

    def usage(self) -> dict[str, int]:
        """OpenAI's counts, plus the ground truth of the first token: when the
        request was read and when the first token's event was sent.  They
        ride in ``usage`` because clients keep that object whole, so a test
        or benchmark can compare its own stamps with the server's without
        looking at individual events."""
        p = self.gen.prompt_tokens
        c = self.completion_tokens
        return {
            "prompt_tokens": p,
            "completion_tokens": c,
            "total_tokens": p + c,
            "mlpe_recv_ns": self.recv,
            "mlpe_first_send_ns": self.first_send,
        }

    def stamps(self) -> dict[str, int]:
        """The ground-truth members, the send stamp read now."""
        return {"mlpe_recv_ns": self.recv, "mlpe_send_ns": _monotonic_ns()}

    def last_chunk(self, i: int, reasoning: bool, sglang: SGLangEvents | None = None) -> bytes:
        """The last token's chunk (token ``i``), which carries the finish
        reason; the next object of ``sglang`` for a ``/generate`` stream."""
        text = self.text(i)
        if sglang is not None:
            return sglang.document(text, self.finish, _monotonic_ns())
        ids: dict[str, Any] = {"response_id": self.rid, "created": self.created}
        model = self.state.model
        if not self.gen.chat:
            return completion_chunk(
                text, finish_reason=self.finish, model=model, extra=self.stamps(), **ids
            )
        return chat_chunk(
            content=None if reasoning else text,
            reasoning=text if reasoning else None,
            finish_reason=self.finish,
            model=model,
            extra=self.stamps(),
            **ids,
        )

    def usage_chunk(self) -> bytes:
        ids: dict[str, Any] = {"response_id": self.rid, "created": self.created}
        model = self.state.model
        if self.gen.chat:
            return chat_chunk(
                choices=False, usage=self.usage(), model=model, extra=self.stamps(), **ids
            )
        return completion_chunk(
            "", choices=False, usage=self.usage(), model=model, extra=self.stamps(), **ids
        )

    def fire(self, now_ns: int) -> int | None:  # pragma: no cover - abstract
        raise NotImplementedError


class StreamJob(ResponseJob):
    """A streamed response: head on arrival (or with the first token), then
    each token's event at its deadline, written as soon as it is due."""

    __slots__ = ("chunked", "content", "head_pending", "i", "reasoning", "role", "stop")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        state = self.state
        chunked = self.chunked = self.out.chunked
        self.i = 0
        # Tokens to write before at_stop(): all of them, or those before
        # the reset fault (or a fault of a subclass).
        self.stop = self.n if self.cut is None else self.cut
        self.head_pending = True
        bind = (self.rid, self.created, self.recv)
        eol = state.eol
        self.role: Event | None
        self.content: Renders
        self.reasoning: Renders
        if self.gen.sglang:
            self.role = None
            self.content = self.reasoning = SGLangEvents(
                self.rid,
                self.gen,
                self.recv,
                eol=eol,
                chunked=chunked,
                incremental=state.config.incremental_streaming_output,
            )
        elif self.gen.chat:
            self.role = state.role_shape.bind(*bind, eol=eol, chunked=chunked)
            self.content = state.content_shape.bind(*bind, eol=eol, chunked=chunked)
            self.reasoning = (
                state.reasoning_shape.bind(*bind, eol=eol, chunked=chunked)
                if self.k
                else self.content
            )
        else:
            self.role = None
            self.content = self.reasoning = state.text_shape.bind(*bind, eol=eol, chunked=chunked)

    def opening(self) -> tuple[list[bytes], int, bool] | None:
        """The start of a firing: None when the stream is gone or parked
        (its buffer is full); else the parts so far (the role event with
        the head), their event count, and whether the head goes now."""
        out = self.out
        if self.cancelled or out.gone:
            return None
        if out.blocked:
            out.park(self)
            return None
        parts: list[bytes] = []
        events = 0
        head = self.head_pending
        if head:
            self.head_pending = False
            if self.role is not None:
                parts.append(self.role.render(b"", _monotonic_ns()))
                events += 1
        return parts, events, head

    def fire(self, now_ns: int) -> int | None:
        opened = self.opening()
        if opened is None:
            return None
        parts, events, head = opened
        out = self.out
        stats = self.state.stats
        i, stop, due = self.i, self.stop, self.due
        if i < stop and due <= now_ns:
            if due > self.t0:
                stats.add_lateness(_monotonic_ns() - due)
            start = i
            last = self.n - 1
            cap = min(i + _MAX_EVENTS_PER_WRITE, stop)
            k = self.k
            tokens = self.tokens
            content, reasoning, itl = self.content, self.reasoning, self.itl
            while True:
                if i == 0:
                    # the stamp the first token's event carries, or within
                    # a microsecond of it (usage(), ground truth)
                    self.first_send = _monotonic_ns()
                if i == last:
                    parts.append(
                        framed(
                            self.last_chunk(i, i < k, self.sglang_events()),
                            eol=self.state.eol,
                            chunked=self.chunked,
                        )
                    )
                    i += 1
                    break
                parts.append((reasoning if i < k else content).render(tokens[i], _monotonic_ns()))
                i += 1
                due += itl()
                if due > now_ns or i == cap:
                    break
            self.due = due
            stats.tokens += i - start
            events += i - start
        self.i = i
        if i == stop:
            return self.at_stop(parts, events, head, now_ns)
        # send(), inline: this is the path of every write but the last
        stats.events += events
        if parts or head:
            stats.writes += 1
            out.write_stream(parts, head=head, end=False)
        return due

    def sglang_events(self) -> SGLangEvents | None:
        """The renderer of a ``/generate`` stream, else None."""
        content = self.content
        return content if isinstance(content, SGLangEvents) else None

    def send(self, parts: list[bytes], events: int, *, head: bool, end: bool) -> None:
        """Writes ``parts`` (``events`` events), after the head if ``head``,
        ending the response if ``end``."""
        stats = self.state.stats
        stats.events += events
        if parts or head or end:
            stats.writes += 1
            self.out.write_stream(parts, head=head, end=end)

    def tail(self, parts: list[bytes]) -> int:
        """Appends the usage chunk (if asked for) and ``[DONE]``; returns
        the number of events appended."""
        events = 1
        if self.gen.include_usage:
            parts.append(framed(self.usage_chunk(), eol=self.state.eol, chunked=self.chunked))
            events += 1
        parts.append(self.state.done[self.chunked])
        return events

    def complete(self, parts: list[bytes], events: int, *, head: bool) -> None:
        """Ends the response with ``parts`` and the job."""
        self.send(parts, events, head=head, end=True)
        self.state.stats.responses += 1
        self.out.job_done(self)

    def at_stop(self, parts: list[bytes], events: int, head: bool, now_ns: int) -> int | None:
        """The tokens before ``stop`` are rendered, the last of them in
        ``parts`` (not yet written): ends the response, or with the HTTP/2
        reset fault resets it.  Returns the next deadline, if any (a
        subclass may go on)."""
        if self.cut is None:
            events += self.tail(parts)
            self.complete(parts, events, head=head)
            return None
        self.state.stats.h2_resets += 1
        self.send(parts, events, head=head, end=False)
        self.out.reset()
        return None


class ReplayJob(StreamJob):
    """A replayed agentic turn (``sim/replay.py``): its recorded deltas
    (reasoning, content, tool-call fragments), one event each, at the token
    deadlines, the last one with the finish reason."""

    __slots__ = ("deltas",)

    def __init__(self, *args: Any, deltas: tuple[dict[str, Any], ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deltas = deltas
        self.n = self.stop = len(deltas) + 1  # the finish event comes last

    def fire(self, now_ns: int) -> int | None:
        opened = self.opening()
        if opened is None:
            return None
        parts, events, head = opened
        i, due = self.i, self.due
        eol, chunked = self.state.eol, self.chunked
        ids: dict[str, Any] = {"response_id": self.rid, "created": self.created}
        while i < self.n and due <= now_ns:
            if i == 0:
                self.first_send = _monotonic_ns()
            if i < len(self.deltas):
                delta = self.deltas[i]
                chunk = chat_chunk(
                    content=delta.get("content"),
                    reasoning=delta.get("reasoning_content"),
                    tool_calls=delta.get("tool_calls"),
                    model=self.state.model,
                    extra=self.stamps(),
                    **ids,
                )
            else:
                chunk = chat_chunk(
                    finish_reason=self.finish, model=self.state.model, extra=self.stamps(), **ids
                )
            parts.append(framed(chunk, eol=eol, chunked=chunked))
            events += 1
            i += 1
            if i < self.n:
                due += self.itl()
        self.i, self.due = i, due
        if i == self.n:
            events += self.tail(parts)
            self.complete(parts, events, head=head)
            return None
        self.send(parts, events, head=head, end=False)
        return due


class BufferedJob(ResponseJob):
    """A response written whole at its last token's deadline: a
    non-streaming body, or an SSE stream with a Content-Length."""

    def fire(self, now_ns: int) -> int | None:
        out = self.out
        if self.cancelled or out.gone:
            return None
        if out.blocked:
            out.park(self)
            return None
        state = self.state
        if self.cut is not None:
            # Its tokens would all leave in one write: the reset fault
            # cannot fall between them, so the response is reset unsent.
            state.stats.h2_resets += 1
            out.reset()
            return None
        stats = state.stats
        if self.due > self.t0:
            stats.add_lateness(_monotonic_ns() - self.due)
        tokens, k, n = self.tokens, self.k, self.n
        self.first_send = _monotonic_ns()  # every token goes in this write
        if self.gen.stream:
            body, events = self._sse_body()
            stats.events += events
            content_type = b"text/event-stream"
        else:
            text = b"".join(tokens).decode("ascii") if self.answer is None else self.answer
            ids: dict[str, Any] = {"response_id": self.rid, "created": self.created}
            usage = self.usage()
            if self.gen.sglang:
                body = self._sglang_body(text)
            elif self.gen.chat:
                body = chat_completion(
                    content=text[k:],
                    reasoning=text[:k] if k else None,
                    finish_reason=self.finish,
                    usage=usage,
                    model=state.model,
                    extra=self.stamps(),
                    **ids,
                )
            else:
                body = text_completion(
                    text,
                    finish_reason=self.finish,
                    usage=usage,
                    model=state.model,
                    extra=self.stamps(),
                    **ids,
                )
            content_type = b"application/json"
        stats.tokens += n
        stats.writes += 1
        out.respond(200, body, content_type=content_type, event_stream=self.gen.stream)
        stats.responses += 1
        out.job_done(self)
        return None

    def _sglang_body(self, text: str) -> bytes:
        """A non-streaming ``/generate`` body: the whole text."""
        return sglang_generate(
            text,
            completion_tokens=self.completion_tokens,
            prompt_tokens=self.gen.prompt_tokens,
            finish_reason=None
            if self.finish is None
            else sglang_finish(self.finish, self.gen.max_tokens),
            output_ids=range(self.n),
            response_id=self.rid,
            extra=self.stamps(),
        )

    def new_sglang_events(self) -> SGLangEvents:
        """A renderer of this response's ``/generate`` events (unchunked)."""
        state = self.state
        return SGLangEvents(
            self.rid,
            self.gen,
            self.recv,
            eol=state.eol,
            chunked=False,
            incremental=state.config.incremental_streaming_output,
        )

    def _sse_body(self) -> tuple[bytes, int]:
        state = self.state
        bind = (self.rid, self.created, self.recv)
        eol = state.eol
        out: list[bytes] = []
        sglang: SGLangEvents | None = None
        content: Renders
        reasoning: Renders
        if self.gen.sglang:
            content = reasoning = sglang = self.new_sglang_events()
        elif self.gen.chat:
            out.append(
                state.role_shape.bind(*bind, eol=eol, chunked=False).render(b"", _monotonic_ns())
            )
            content = state.content_shape.bind(*bind, eol=eol, chunked=False)
            reasoning = (
                state.reasoning_shape.bind(*bind, eol=eol, chunked=False) if self.k else content
            )
        else:
            content = reasoning = state.text_shape.bind(*bind, eol=eol, chunked=False)
        tokens, k, last = self.tokens, self.k, self.n - 1
        for i in range(last):
            out.append((reasoning if i < k else content).render(tokens[i], _monotonic_ns()))
        out.append(framed(self.last_chunk(last, last < k, sglang), eol=eol, chunked=False))
        if self.gen.include_usage:
            out.append(framed(self.usage_chunk(), eol=eol, chunked=False))
        out.append(state.done[False])
        return b"".join(out), len(out)
