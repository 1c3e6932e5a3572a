"""The simulated endpoint's connections and responses: the HTTP/1.1
protocol object, request validation, and the jobs that write streams at
their deadlines.  See :mod:`mlpe_fast.sim.server` for the behaviour and
what the stamps mean, and :mod:`mlpe_fast.sim.oracle` for what an oracle
answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from ._events import Event, Shape, framed
from ._http import HttpError, Request, RequestReader
from ._pacer import Pacer
from .config import VOCAB, SimConfig, SimStats
from .oracle import MISS_CODE, request_prompt
from .stream import (
    LAST_CHUNK,
    chat_chunk,
    chat_completion,
    completion_chunk,
    text_completion,
)

__all__ = ("Connection", "ServerState")

_VOCAB_BYTES = tuple(c.encode("ascii") for c in VOCAB)
_EOLS = {"lf": b"\n", "crlf": b"\r\n"}
# Pipelined requests queued beyond this pause reading from the connection.
_MAX_PIPELINE = 16
# Events per transport.write: ~1 MB of chunks, so that a long zero-delay
# stream yields the loop (and honours pause_writing) between writes.
_MAX_EVENTS_PER_WRITE = 4096
_monotonic_ns = time.monotonic_ns


# --- requests -----------------------------------------------------------------


class _BadParams(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(slots=True)
class _Gen:
    """What a completion request asks for."""

    chat: bool
    stream: bool
    include_usage: bool
    max_tokens: int | None
    prompt_tokens: int


def _text_len(content: object, param: str) -> int:
    """Characters of a message's content: a string or a list of parts."""
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for part in content:
            if not isinstance(part, dict):
                raise _BadParams("content parts must be objects", param)
            text = part.get("text")
            if isinstance(text, str):
                total += len(text)
        return total
    raise _BadParams("content must be a string, a list of parts or null", param)


def _parse_gen(doc: object, *, chat: bool, limit: int) -> _Gen:
    if not isinstance(doc, dict):
        raise _BadParams("the request body must be a JSON object")
    stream = doc.get("stream")
    if stream is None:
        stream = False
    elif not isinstance(stream, bool):
        raise _BadParams("'stream' must be a boolean", "stream")
    include_usage = False
    options = doc.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise _BadParams("'stream_options' must be an object", "stream_options")
        usage_flag = options.get("include_usage", False)
        if not isinstance(usage_flag, bool):
            raise _BadParams("'include_usage' must be a boolean", "stream_options")
        include_usage = usage_flag
    max_tokens: int | None = None
    for key in ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",):
        value = doc.get(key)
        if value is None:
            continue
        if type(value) is not int or value < 1:
            raise _BadParams(f"'{key}' must be an integer >= 1", key)
        if value > limit:
            raise _BadParams(f"'{key}' exceeds the simulated context of {limit} tokens", key)
        max_tokens = value
        break
    n = doc.get("n")
    if n is not None and n != 1:
        raise _BadParams("only n=1 is supported", "n")
    if chat:
        messages = doc.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadParams("'messages' must be a non-empty array", "messages")
        prompt_tokens = 0
        for message in messages:
            if not isinstance(message, dict):
                raise _BadParams("each message must be an object", "messages")
            prompt_tokens += _text_len(message.get("content"), "messages")
    else:
        prompt = doc.get("prompt")
        if isinstance(prompt, str) or (
            isinstance(prompt, list) and all(type(t) is int for t in prompt)
        ):
            prompt_tokens = len(prompt)
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt_tokens = len(prompt[0])
        else:
            raise _BadParams("'prompt' must be a string, one-string array or token array", "prompt")
    return _Gen(chat, stream, include_usage, max_tokens, prompt_tokens)


_ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/chat/completions": ("POST",),
    "/v1/completions": ("POST",),
    "/v1/models": ("GET",),
    "/health": ("GET",),
}
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    505: "HTTP Version Not Supported",
}


def _head(
    status: int,
    content_type: bytes,
    *,
    length: int | None = None,
    chunked: bool = False,
    connection: bytes | None = None,
    event_stream: bool = False,
    extra: Sequence[bytes] = (),
) -> bytes:
    """A response head.  The body is framed by ``length`` (Content-Length),
    by the chunked coding, or else by the end of the connection (then
    ``connection`` must be ``b"close"``)."""
    lines = [
        b"HTTP/1.1 %d %s" % (status, _REASONS[status].encode()),
        b"content-type: " + content_type,
    ]
    if event_stream:
        lines.append(b"cache-control: no-cache")
    if length is not None:
        lines.append(b"content-length: %d" % length)
    elif chunked:
        lines.append(b"transfer-encoding: chunked")
    if connection is not None:
        lines.append(b"connection: " + connection)
    lines.extend(extra)
    return b"\r\n".join(lines) + b"\r\n\r\n"


# --- the server's shared state ----------------------------------------------------


class ServerState:
    """What all connections of one server share."""

    def __init__(self, config: SimConfig, pacer: Pacer) -> None:
        self.config = config
        self.pacer = pacer
        self.stats = SimStats()
        self.conns: set[Connection] = set()
        self.eol = _EOLS[config.eol]
        self.model = config.model
        self.oracle = config.oracle
        # Independent streams, so that e.g. changing the timing leaves the
        # text and the lengths unchanged.
        seeds = random.Random(config.seed)
        self.rng_text = random.Random(seeds.getrandbits(64))
        self.ttft = config.ttft_ms.ns_sampler(random.Random(seeds.getrandbits(64)))
        self.itl = config.itl_ms.ns_sampler(random.Random(seeds.getrandbits(64)))
        self.length = config.output_len.int_sampler(random.Random(seeds.getrandbits(64)))
        self.next_id = 0
        model = config.model
        self.role_shape = Shape(
            lambda *, text, **ids: chat_chunk(role="assistant", content="", model=model, **ids)
        )
        self.content_shape = Shape(
            lambda *, text, **ids: chat_chunk(content=text, model=model, **ids)
        )
        self.reasoning_shape = Shape(
            lambda *, text, **ids: chat_chunk(reasoning=text, model=model, **ids)
        )
        self.text_shape = Shape(lambda *, text, **ids: completion_chunk(text, model=model, **ids))
        self.done = {
            chunked: framed(b"[DONE]", eol=self.eol, chunked=chunked) for chunked in (True, False)
        }

    def new_id(self, chat: bool) -> str:
        self.next_id += 1
        return f"{'chatcmpl' if chat else 'cmpl'}-mlpe{self.next_id:08x}"


# --- responses ----------------------------------------------------------------------


class _Job:
    """A completion response being generated; the pacer fires it."""

    __slots__ = (
        "answer",
        "cancelled",
        "close",
        "completion_tokens",
        "conn",
        "connection",
        "created",
        "due",
        "finish",
        "first_send",
        "gen",
        "itl",
        "k",
        "n",
        "recv",
        "rid",
        "state",
        "t0",
        "text_chars",
        "tokens",
    )

    def __init__(
        self,
        conn: Connection,
        state: ServerState,
        gen: _Gen,
        *,
        tokens: list[bytes],
        answer: str | None,
        finish: str,
        completion_tokens: int,
        reasoning: int,
        first_due: int,
        recv_ns: int,
        t0: int,
        close: bool,
    ) -> None:
        self.cancelled = False
        self.conn = conn
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
        self.close = close
        self.connection = conn.connection_header(close)
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

    def last_chunk(self, i: int, reasoning: bool) -> bytes:
        """The last token's chunk (token ``i``), which carries the finish reason."""
        text = self.text(i)
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


class _Stream(_Job):
    """A streamed response: head on arrival (or with the first token), then
    each token's event at its deadline, written as soon as it is due."""

    __slots__ = ("chunked", "content", "i", "pending_head", "reasoning", "role")

    def __init__(self, *args: Any, chunked: bool, head: bytes, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        state = self.state
        self.chunked = chunked
        self.i = 0
        self.pending_head: bytes | None = head
        bind = (self.rid, self.created, self.recv)
        eol = state.eol
        if self.gen.chat:
            self.role: Event | None = state.role_shape.bind(*bind, eol=eol, chunked=chunked)
            self.content = state.content_shape.bind(*bind, eol=eol, chunked=chunked)
            self.reasoning = (
                state.reasoning_shape.bind(*bind, eol=eol, chunked=chunked)
                if self.k
                else self.content
            )
        else:
            self.role = None
            self.content = self.reasoning = state.text_shape.bind(*bind, eol=eol, chunked=chunked)

    def fire(self, now_ns: int) -> int | None:
        conn = self.conn
        if self.cancelled or conn.closing:
            return None
        if conn.write_paused:
            conn.park(self)
            return None
        stats = self.state.stats
        out: list[bytes] = []
        events = 0
        if self.pending_head is not None:
            out.append(self.pending_head)
            self.pending_head = None
            if self.role is not None:
                out.append(self.role.render(b"", _monotonic_ns()))
                events += 1
        i, n, due = self.i, self.n, self.due
        if i < n and due <= now_ns:
            if due > self.t0:
                stats.add_lateness(_monotonic_ns() - due)
            start = i
            last = n - 1
            cap = i + _MAX_EVENTS_PER_WRITE
            k = self.k
            tokens = self.tokens
            content, reasoning, itl = self.content, self.reasoning, self.itl
            while True:
                if i == 0:
                    # the stamp the first token's event carries, or within
                    # a microsecond of it (usage(), ground truth)
                    self.first_send = _monotonic_ns()
                if i == last:
                    out.append(
                        framed(
                            self.last_chunk(i, i < k),
                            eol=self.state.eol,
                            chunked=self.chunked,
                        )
                    )
                    i += 1
                    break
                out.append((reasoning if i < k else content).render(tokens[i], _monotonic_ns()))
                i += 1
                due += itl()
                if due > now_ns or i == cap:
                    break
            self.due = due
            stats.tokens += i - start
            events += i - start
        self.i = i
        if i == n:
            if self.gen.include_usage:
                out.append(framed(self.usage_chunk(), eol=self.state.eol, chunked=self.chunked))
                events += 1
            out.append(self.state.done[self.chunked])
            events += 1
            if self.chunked:
                out.append(LAST_CHUNK)
        stats.events += events
        if out:
            stats.writes += 1
            conn.write(b"".join(out))
        if i == n:
            conn.job_done(self)
            return None
        return due


class _Buffered(_Job):
    """A response written whole at its last token's deadline: a
    non-streaming body, or an SSE stream with a Content-Length."""

    def fire(self, now_ns: int) -> int | None:
        conn = self.conn
        if self.cancelled or conn.closing:
            return None
        if conn.write_paused:
            conn.park(self)
            return None
        state = self.state
        stats = state.stats
        if self.due > self.t0:
            stats.add_lateness(_monotonic_ns() - self.due)
        tokens, k, n = self.tokens, self.k, self.n
        self.first_send = _monotonic_ns()  # every token goes in this write
        if self.gen.stream:
            body, events = self._sse_body()
            head = _head(
                200,
                b"text/event-stream",
                length=len(body),
                connection=self.connection,
                event_stream=True,
            )
            stats.events += events
        else:
            text = b"".join(tokens).decode("ascii") if self.answer is None else self.answer
            ids: dict[str, Any] = {"response_id": self.rid, "created": self.created}
            usage = self.usage()
            if self.gen.chat:
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
            head = _head(200, b"application/json", length=len(body), connection=self.connection)
        stats.tokens += n
        stats.writes += 1
        conn.write(head + body)
        conn.job_done(self)
        return None

    def _sse_body(self) -> tuple[bytes, int]:
        state = self.state
        bind = (self.rid, self.created, self.recv)
        eol = state.eol
        out: list[bytes] = []
        if self.gen.chat:
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
        out.append(framed(self.last_chunk(last, last < k), eol=eol, chunked=False))
        if self.gen.include_usage:
            out.append(framed(self.usage_chunk(), eol=eol, chunked=False))
        out.append(state.done[False])
        return b"".join(out), len(out)


# --- connections ------------------------------------------------------------------


class Connection(asyncio.Protocol):
    """One client connection: reads requests, answers them in order."""

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._transport: asyncio.Transport | None = None
        cfg = state.config
        self._reader = RequestReader(max_head=cfg.max_head, max_body=cfg.max_body)
        self._pending: deque[Request | HttpError] = deque()
        self._job: _Job | None = None
        self._parked: _Job | None = None
        self._processing = False
        self._reading_paused = False
        self._eof = False
        self._last_done_ns = 0
        self._http10 = False
        self.write_paused = False
        self.closing = False

    # -- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Not TCP (a Unix socket, say): nothing to set.
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._state.conns.add(self)
        self._state.stats.connections += 1

    def data_received(self, data: bytes) -> None:
        t_ns = _monotonic_ns()
        reader = self._reader
        reader.feed(data, t_ns)
        pending = self._pending
        try:
            while (req := reader.next_request()) is not None:
                pending.append(req)
        except HttpError as exc:
            pending.append(exc)
        if self._job is None:
            self._process()
        if self.closing:
            return
        if self._job is not None:
            if len(pending) >= _MAX_PIPELINE and not self._reading_paused:
                self._pause_reading()
        elif not pending and reader.wants_continue():
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def eof_received(self) -> bool | None:
        self._eof = True
        if self._job is not None or self._pending:
            return True  # answer what was asked, then close (see _process)
        self.closing = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        for job in (self._job, self._parked):
            if job is not None:
                job.cancelled = True
        self._job = self._parked = None
        self._pending.clear()
        self._state.conns.discard(self)
        self._transport = None

    def pause_writing(self) -> None:
        self.write_paused = True
        self._state.stats.write_pauses += 1

    def resume_writing(self) -> None:
        self.write_paused = False
        job, self._parked = self._parked, None
        if job is not None and not job.cancelled:
            self._drive(job, _monotonic_ns())

    # -- used by jobs ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def connection_header(self, close: bool) -> bytes | None:
        """The ``Connection`` value of a response: ``close`` when closing
        after it; ``keep-alive`` to an HTTP/1.0 client that asked for it
        (HTTP/1.0 connections close by default)."""
        if close:
            return b"close"
        return b"keep-alive" if self._http10 else None

    def park(self, job: _Job) -> None:
        """Holds ``job`` until the transport's buffer drains."""
        self._parked = job

    def job_done(self, job: _Job) -> None:
        self._job = None
        self._last_done_ns = _monotonic_ns()
        self._state.stats.responses += 1
        if job.close:
            self._close()
        else:
            self._process()

    def abort(self) -> None:
        """Drops the connection at once (server shutdown)."""
        self.closing = True
        if self._transport is not None:
            self._transport.abort()

    # -- internals -------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _close(self) -> None:
        """Closes after what is written has been sent."""
        self.closing = True
        if self._transport is not None:
            self._transport.close()

    def _drive(self, job: _Job, now_ns: int) -> None:
        nxt = job.fire(now_ns)
        if nxt is not None:
            self._state.pacer.schedule(nxt, job)

    def _process(self) -> None:
        """Answers queued requests in order until one leaves a response in
        flight.  Not re-entrant: a job finishing inside it returns here."""
        if self._processing:
            return
        self._processing = True
        try:
            pending = self._pending
            while self._job is None and pending and not self.closing:
                item = pending.popleft()
                if isinstance(item, HttpError):
                    self._http10 = False
                    self._send_error(item.status, item.message, close=True)
                    break
                self._handle(item)
            if (
                self._reading_paused
                and not self.closing
                and len(pending) < _MAX_PIPELINE // 2
                and self._transport is not None
            ):
                self._reading_paused = False
                self._transport.resume_reading()
            if self._eof and self._job is None and not pending and not self.closing:
                self._close()
        finally:
            self._processing = False

    def _send(
        self,
        status: int,
        body: bytes,
        *,
        close: bool,
        content_type: bytes = b"application/json",
        extra: Sequence[bytes] = (),
    ) -> None:
        stats = self._state.stats
        stats.requests += 1
        if status >= 400:
            stats.errors += 1
        # After the client's EOF, the last answer closes the connection.
        close = close or (self._eof and not self._pending)
        head = _head(
            status,
            content_type,
            length=len(body),
            connection=self.connection_header(close),
            extra=extra,
        )
        self.write(head + body)
        if close:
            self._close()

    def _send_error(
        self,
        status: int,
        message: str,
        *,
        close: bool,
        param: str | None = None,
        code: str | None = None,
        extra: Sequence[bytes] = (),
    ) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = msgspec.json.encode(
            {"error": {"message": message, "type": kind, "param": param, "code": code}}
        )
        self._send(status, body, close=close, extra=extra)

    def _handle(self, req: Request) -> None:
        close = not req.keep_alive
        self._http10 = req.http_minor == 0
        allowed = _ROUTES.get(req.path)
        if allowed is None:
            self._send_error(404, f"no route for {req.path}", close=close)
            return
        if req.method not in allowed:
            self._send_error(
                405,
                f"{req.method} is not allowed on {req.path}",
                close=close,
                extra=(b"allow: " + ", ".join(allowed).encode(),),
            )
            return
        if req.path == "/v1/models":
            body = msgspec.json.encode(
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self._state.model,
                            "object": "model",
                            "created": 1700000000,
                            "owned_by": "mlpe-fast",
                        }
                    ],
                }
            )
            self._send(200, body, close=close)
            return
        if req.path == "/health":
            self._send(200, b"", close=close)
            return
        chat = req.path == "/v1/chat/completions"
        state = self._state
        try:
            doc = msgspec.json.decode(req.body)
            gen = _parse_gen(doc, chat=chat, limit=state.config.max_output_tokens)
        except msgspec.DecodeError:
            self._send_error(400, "the request body is not valid JSON", close=close)
            return
        except _BadParams as exc:
            self._send_error(400, exc.message, close=close, param=exc.param)
            return
        answer: str | None = None
        oracle = state.oracle
        if oracle is not None:
            prompt = request_prompt(doc, chat=chat)
            answer = None if prompt is None else oracle.answer(prompt)
            if answer is None:
                self._send_error(404, oracle.miss_message(prompt), close=close, code=MISS_CODE)
                return
        self._start(req, gen, close, answer)

    def _start(self, req: Request, gen: _Gen, close: bool, answer: str | None) -> None:
        """Starts the response job: ``answer`` (an oracle's) or random text."""
        state = self._state
        cfg = state.config
        state.stats.requests += 1
        now = _monotonic_ns()
        close = close or (self._eof and not self._pending)
        if answer is not None:
            assert state.oracle is not None
            answer, finish = state.oracle.cut(answer, gen.max_tokens)
            tokens = state.oracle.pieces(answer)
            n = len(tokens)
            completion_tokens = n if answer else 0  # an empty answer is one empty piece
        else:
            if gen.max_tokens is not None:
                n = gen.max_tokens
                finish = "length"
            else:
                n = min(max(1, state.length()), cfg.max_output_tokens)
                finish = "stop"
            tokens = state.rng_text.choices(_VOCAB_BYTES, k=n)
            completion_tokens = n
        base = max(req.recv_ns, self._last_done_ns)
        first_due = base + state.ttft()
        common: dict[str, Any] = {
            "tokens": tokens,
            "answer": answer,
            "finish": finish,
            "completion_tokens": completion_tokens,
            "reasoning": min(cfg.reasoning_tokens, n) if gen.chat else 0,
            "recv_ns": req.recv_ns,
            "t0": now,
            "close": close,
        }
        job: _Job
        if gen.stream and cfg.framing == "chunked":
            # RFC 9112 section 6.1: no chunked coding to an HTTP/1.0 client;
            # its body runs to the end of the connection instead.
            chunked = req.http_minor == 1
            if not chunked:
                close = common["close"] = True
            head = _head(
                200,
                b"text/event-stream",
                chunked=chunked,
                connection=self.connection_header(close),
                event_stream=True,
            )
            job = _Stream(
                self, state, gen, first_due=first_due, chunked=chunked, head=head, **common
            )
            self._job = job
            if cfg.head_at_first_token and first_due > now:
                state.pacer.schedule(first_due, job)
            else:
                self._drive(job, now)
        else:
            itl = state.itl
            last_due = first_due
            for _ in range(n - 1):
                last_due += itl()
            job = _Buffered(self, state, gen, first_due=last_due, **common)
            self._job = job
            if last_due > now:
                state.pacer.schedule(last_due, job)
            else:
                self._drive(job, now)
