"""The simulated OpenAI-compatible endpoint: a real HTTP/1.1 server on
loopback that streams SSE with scripted timing and stamps every event with
its own send time.

What it serves
--------------
``POST /v1/chat/completions`` and ``POST /v1/completions`` (streaming with
``"stream": true``, else one JSON body), ``GET /v1/models`` (the configured
model) and ``GET /health``.  Any ``model`` in a request is accepted; the
configured name is echoed.  The output is ``max_completion_tokens`` /
``max_tokens`` tokens when the request sets one (``finish_reason``
``"length"``), else a draw from ``SimConfig.output_len`` (``"stop"``).
Every token is one character of :data:`VOCAB` (letters, digits, space), all
in the character tokenizer's vocabulary, so a token count is a character
count.  Prompt tokens are counted the same way: the characters of the
prompt, or of the messages' text content (no chat template).

A chat stream is: a role chunk (``{"role": "assistant", "content": ""}``),
one chunk per token (the first ``reasoning_tokens`` as
``reasoning_content``, the rest as ``content``; the last one carries the
``finish_reason``, as vLLM does), the usage chunk (``"choices": []``) when
``stream_options.include_usage`` is set, and ``data: [DONE]``.  A
completions stream is the same without the role chunk.

Timing
------
Times are ``time.monotonic_ns()``, which is ``CLOCK_MONOTONIC`` on Linux,
the clock the client stamps with.  For each request the server draws a
TTFT and, per later token, an inter-token delay (ITL) from the configured
distributions, and computes absolute deadlines from the request's base
time: token ``i`` is due at ``base + ttft + itl_1 + ... + itl_i``.  A late
wake-up therefore never delays later tokens.  ``base`` is the receive time,
or the end of the previous response when the request was pipelined behind
it on the same connection (responses on one connection go in order).

Every event due at a wake-up goes out in one ``transport.write`` (up to
4,096 events, about 1 MB; the rest follows on the next loop iteration); a
stream whose delays are all zero and that fits is written whole, response
head included, in one write.  The response head (and the chat role chunk)
is written on arrival, as vLLM and SGLang do, unless
``head_at_first_token`` holds it back until the first token.  No event is
ever sent before its deadline.

How late it is depends on the wake-up source (:mod:`mlpe_fast.sim._pacer`).
Measured on a loaded two-core Linux VM (``bench/bench_sim_server.py``,
20 ms TTFT and 2 ms ITL, ``mlpe_send_ns`` minus the deadline): with the
timerfd (the default on Linux) median 70 us, p90 110 us; with the loop's
millisecond timers (``timer="loop"``, the default elsewhere) median 0.66 ms,
p90 1.1 ms.  Tails beyond that are CPU scheduling, not the timers: the
stamps show them, so the ground truth stays exact.

Ground-truth stamps
-------------------
Each chunk, and each non-streaming body, carries two extra top-level
members:

``mlpe_recv_ns``
    ``time.monotonic_ns()`` read on entry to the ``data_received`` call
    whose bytes completed the request, i.e. just after the read that
    brought its last byte.  A client's issue stamp taken before it wrote
    the request is therefore ``<=`` this.
``mlpe_send_ns``
    ``time.monotonic_ns()`` read just before that event is encoded.  The
    events of one write are encoded back to back, about a microsecond
    each, and written right after, so each stamp precedes the
    ``transport.write`` carrying its event by at most the encoding of the
    rest of that write.  Within a response the stamps never decrease and
    are ``>= mlpe_recv_ns``.

With ``framing="length"`` (and for non-streaming responses) the body is
built whole at the last token's deadline and written with a
Content-Length: every event then carries (nearly) the same send stamp and
inter-event timing is moot.  An HTTP/1.0 client never gets the chunked
coding (RFC 9112 section 6.1): its stream runs to the end of the connection.

Errors
------
Malformed requests get 400 (431 for an oversized head, 413 for an
oversized body, 501 for a transfer coding other than chunked, 505 for an
HTTP version other than 1.x) and the connection is closed, since framing is
lost.  Unknown paths get 404 and wrong methods 405 (with ``Allow``), and a
body that is not a valid request gets 400 in OpenAI's error shape; these
keep the connection.  No exception escapes into the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TextIO, cast

import msgspec

from ._events import Event, Shape, framed
from ._http import HttpError, Request, RequestReader
from ._pacer import Pacer, TimerKind, make_pacer
from .stream import (
    LAST_CHUNK,
    chat_chunk,
    chat_completion,
    completion_chunk,
    text_completion,
)
from .timing import DIST_KINDS, Dist

__all__ = (
    "VOCAB",
    "Dist",
    "SimConfig",
    "SimServer",
    "SimServerThread",
    "SimStats",
    "add_arguments",
    "build_arg_parser",
    "config_from_args",
    "main",
    "new_event_loop",
    "serve_forever",
)

Framing = Literal["chunked", "length"]
Eol = Literal["lf", "crlf"]
LoopKind = Literal["auto", "uvloop", "asyncio"]

VOCAB = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
"""The characters the simulated model emits, one token each.  All are in
the character tokenizer's vocabulary and need no JSON escaping."""

_VOCAB_BYTES = tuple(c.encode("ascii") for c in VOCAB)
_EOLS = {"lf": b"\n", "crlf": b"\r\n"}
# Pipelined requests queued beyond this pause reading from the connection.
_MAX_PIPELINE = 16
# Events per transport.write: ~1 MB of chunks, so that a long zero-delay
# stream yields the loop (and honours pause_writing) between writes.
_MAX_EVENTS_PER_WRITE = 4096
_monotonic_ns = time.monotonic_ns
_NO_DELAY = Dist()
_DEFAULT_LEN = Dist("fixed", 128, min=1)


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulated endpoint can be told.

    Args:
        host: address to bind (default loopback only).
        port: port to bind; 0 picks a free one (see :attr:`SimServer.port`).
        model: the model name served and echoed.
        ttft_ms: time to first token, in milliseconds, from the request's
            base time (see the module docstring).
        itl_ms: delay between consecutive tokens, in milliseconds.
        output_len: tokens per response when the request sets no
            ``max_tokens`` / ``max_completion_tokens`` (clamped to >= 1).
        reasoning_tokens: the first K tokens of a chat response are sent as
            ``reasoning_content`` (completions ignore it).
        framing: ``"chunked"`` streams with the chunked transfer coding;
            ``"length"`` buffers the whole stream and sends a Content-Length
            body (timing is then moot: every event leaves at once).
        eol: SSE line end, ``"lf"`` or ``"crlf"``.
        seed: seeds the draws; the same seed and the same order of
            requests give the same lengths, delays and text.
        head_at_first_token: hold the response head back until the first
            token is due (the reference's test server does this) instead of
            sending it on arrival.
        timer: ``"auto"`` (timerfd where available), ``"timerfd"`` or
            ``"loop"`` (the event loop's millisecond timers).
        loop: event loop for :func:`serve_forever` and
            :meth:`SimServer.start_in_thread`: ``"auto"`` is uvloop where
            importable and not on Windows, else asyncio.
        max_head: largest request head accepted, bytes (431 past it).
        max_body: largest request body accepted, bytes (413 past it).
        max_output_tokens: the simulated context: a larger ``max_tokens``
            gets 400, and ``output_len`` draws are clamped to it.
        backlog: listen backlog.
    """

    host: str = "127.0.0.1"
    port: int = 0
    model: str = "mlpe-sim"
    ttft_ms: Dist = _NO_DELAY
    itl_ms: Dist = _NO_DELAY
    output_len: Dist = _DEFAULT_LEN
    reasoning_tokens: int = 0
    framing: Framing = "chunked"
    eol: Eol = "lf"
    seed: int = 0
    head_at_first_token: bool = False
    timer: TimerKind = "auto"
    loop: LoopKind = "auto"
    max_head: int = 64 * 1024
    max_body: int = 32 * 1024 * 1024
    max_output_tokens: int = 1 << 20
    backlog: int = 1024

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port out of range: {self.port}")
        if not self.model or not self.model.isprintable():
            raise ValueError(f"bad model name {self.model!r}")
        if self.framing not in ("chunked", "length"):
            raise ValueError(f"framing must be 'chunked' or 'length', not {self.framing!r}")
        if self.eol not in _EOLS:
            raise ValueError(f"eol must be 'lf' or 'crlf', not {self.eol!r}")
        if self.timer not in ("auto", "timerfd", "loop"):
            raise ValueError(f"timer must be 'auto', 'timerfd' or 'loop', not {self.timer!r}")
        if self.loop not in ("auto", "uvloop", "asyncio"):
            raise ValueError(f"loop must be 'auto', 'uvloop' or 'asyncio', not {self.loop!r}")
        if self.reasoning_tokens < 0:
            raise ValueError("reasoning_tokens must be >= 0")
        if self.max_head < 1024 or self.max_body < 0 or self.backlog < 1:
            raise ValueError("max_head must be >= 1024, max_body >= 0, backlog >= 1")
        if self.max_output_tokens < 1:
            raise ValueError("max_output_tokens must be >= 1")


class SimStats:
    """Counters of one server (plain ints, updated on the loop's thread).

    Attributes:
        connections: connections accepted.
        requests: requests answered, errors included.
        responses: completion responses finished (streamed or not).
        errors: responses with a 4xx/5xx status.
        events: SSE events written, role, usage and ``[DONE]`` included.
        tokens: tokens written.
        writes: ``transport.write`` calls of completion responses.
        write_pauses: times a transport's buffer filled up (a client not
            reading fast enough); its stream waits, and its events are
            stamped when they are finally written.
        paced_writes: writes that waited for a deadline.
        late_ns_sum, late_ns_max: how late those writes started against the
            deadline of their first event (wake-up precision).
    """

    __slots__ = (
        "connections",
        "errors",
        "events",
        "late_ns_max",
        "late_ns_sum",
        "paced_writes",
        "requests",
        "responses",
        "tokens",
        "write_pauses",
        "writes",
    )

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.responses = 0
        self.errors = 0
        self.events = 0
        self.tokens = 0
        self.writes = 0
        self.write_pauses = 0
        self.paced_writes = 0
        self.late_ns_sum = 0
        self.late_ns_max = 0

    def as_dict(self) -> dict[str, int]:
        """A snapshot of the counters."""
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self.as_dict().items())
        return f"SimStats({inner})"

    def add_lateness(self, late_ns: int) -> None:
        """Counts one paced write that started ``late_ns`` after its deadline."""
        self.paced_writes += 1
        if late_ns > 0:
            self.late_ns_sum += late_ns
            self.late_ns_max = max(self.late_ns_max, late_ns)


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


class _State:
    """What all connections of one server share."""

    def __init__(self, config: SimConfig, pacer: Pacer) -> None:
        self.config = config
        self.pacer = pacer
        self.stats = SimStats()
        self.conns: set[_Conn] = set()
        self.eol = _EOLS[config.eol]
        self.model = config.model
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
        "cancelled",
        "close",
        "conn",
        "connection",
        "created",
        "due",
        "gen",
        "itl",
        "k",
        "n",
        "recv",
        "rid",
        "state",
        "t0",
        "tokens",
    )

    def __init__(
        self,
        conn: _Conn,
        state: _State,
        gen: _Gen,
        *,
        tokens: list[bytes],
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

    @property
    def finish(self) -> str:
        return "length" if self.gen.max_tokens is not None else "stop"

    def usage(self) -> dict[str, int]:
        p = self.gen.prompt_tokens
        return {"prompt_tokens": p, "completion_tokens": self.n, "total_tokens": p + self.n}

    def stamps(self) -> dict[str, int]:
        """The ground-truth members, the send stamp read now."""
        return {"mlpe_recv_ns": self.recv, "mlpe_send_ns": _monotonic_ns()}

    def last_chunk(self, token: bytes, reasoning: bool) -> bytes:
        """The last token's chunk, which carries the finish reason."""
        text = token.decode("ascii")
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
                if i == last:
                    out.append(
                        framed(
                            self.last_chunk(tokens[i], i < k),
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
            text = b"".join(tokens).decode("ascii")
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
        out.append(framed(self.last_chunk(tokens[last], last < k), eol=eol, chunked=False))
        if self.gen.include_usage:
            out.append(framed(self.usage_chunk(), eol=eol, chunked=False))
        out.append(state.done[False])
        return b"".join(out), len(out)


# --- connections ------------------------------------------------------------------


class _Conn(asyncio.Protocol):
    """One client connection: reads requests, answers them in order."""

    def __init__(self, state: _State) -> None:
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
        extra: Sequence[bytes] = (),
    ) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = msgspec.json.encode(
            {"error": {"message": message, "type": kind, "param": param, "code": None}}
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
        try:
            gen = _parse_gen(
                msgspec.json.decode(req.body), chat=chat, limit=self._state.config.max_output_tokens
            )
        except msgspec.DecodeError:
            self._send_error(400, "the request body is not valid JSON", close=close)
            return
        except _BadParams as exc:
            self._send_error(400, exc.message, close=close, param=exc.param)
            return
        self._start(req, gen, close)

    def _start(self, req: Request, gen: _Gen, close: bool) -> None:
        state = self._state
        cfg = state.config
        state.stats.requests += 1
        now = _monotonic_ns()
        close = close or (self._eof and not self._pending)
        if gen.max_tokens is not None:
            n = gen.max_tokens
        else:
            n = min(max(1, state.length()), cfg.max_output_tokens)
        tokens = state.rng_text.choices(_VOCAB_BYTES, k=n)
        base = max(req.recv_ns, self._last_done_ns)
        first_due = base + state.ttft()
        common: dict[str, Any] = {
            "tokens": tokens,
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


# --- the server -------------------------------------------------------------------


def new_event_loop(kind: LoopKind = "auto") -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop for ``"auto"`` where it is importable and
    not on Windows (``"uvloop"`` insists on it), else asyncio's default."""
    if kind != "asyncio" and sys.platform != "win32":
        try:
            import uvloop  # noqa: PLC0415 (optional, and only where a loop is made)
        except ImportError:
            if kind == "uvloop":
                raise
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    elif kind == "uvloop":
        raise RuntimeError("uvloop does not run on Windows")
    return asyncio.new_event_loop()


def _url(host: str, port: int) -> str:
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class SimServer:
    """The simulated endpoint on the running event loop.

    Usage::

        async with SimServer(SimConfig(ttft_ms=Dist.fixed(20))) as server:
            ...  # talk to server.url

    Args:
        config: the options (defaults: loopback, a free port, no delays).
    """

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config if config is not None else SimConfig()
        self._server: asyncio.Server | None = None
        self._state: _State | None = None
        self._host = ""
        self._port = 0

    async def start(self) -> SimServer:
        """Binds and starts listening.

        Raises:
            OSError: the address cannot be bound.
        """
        if self._server is not None:
            raise RuntimeError("server already started")
        cfg = self.config
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            cfg.host or None, cfg.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        # One address, so that port 0 means one port even for a name that
        # resolves to several addresses.
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            if os.name != "nt":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        pacer = make_pacer(loop, cfg.timer)
        state = _State(cfg, pacer)
        try:
            self._server = await loop.create_server(
                lambda: _Conn(state), sock=sock, backlog=cfg.backlog
            )
        except BaseException:
            pacer.close()
            sock.close()
            raise
        self._state = state
        self._host, self._port = sock.getsockname()[:2]
        return self

    async def aclose(self) -> None:
        """Stops listening, drops every connection and waits for them to go."""
        server, state = self._server, self._state
        if server is None or state is None:
            return
        self._server = None
        server.close()
        state.pacer.close()
        for conn in list(state.conns):
            conn.abort()
        # connection_lost runs on a later loop iteration.
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 5.0
        while state.conns and loop.time() < give_up:
            await asyncio.sleep(0.001)
        await server.wait_closed()

    async def __aenter__(self) -> SimServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def serve_forever(self) -> None:
        """Serves until cancelled (starting first if needed)."""
        if self._server is None:
            await self.start()
        assert self._server is not None
        try:
            await self._server.serve_forever()
        except asyncio.CancelledError:
            await self.aclose()
            raise

    @property
    def host(self) -> str:
        """The bound address."""
        return self._host

    @property
    def port(self) -> int:
        """The bound port (the chosen one when the config said 0)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (a wildcard address shows as loopback)."""
        return _url(self._host, self._port)

    @property
    def stats(self) -> SimStats:
        """The live counters."""
        if self._state is None:
            raise RuntimeError("server not started")
        return self._state.stats

    @property
    def timer(self) -> str:
        """The wake-up source in use: ``"timerfd"`` or ``"loop"``."""
        if self._state is None:
            raise RuntimeError("server not started")
        return self._state.pacer.kind

    @staticmethod
    def start_in_thread(config: SimConfig | None = None) -> SimServerThread:
        """Runs a server on its own event loop in a daemon thread, for
        synchronous callers; returns once it listens.  Stop it with
        :meth:`SimServerThread.stop` (or use it as a context manager)."""
        return SimServerThread(config)


class SimServerThread:
    """A :class:`SimServer` running in a background thread.

    Raises:
        OSError: (from the constructor) the server could not start.
    """

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config if config is not None else SimConfig()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: SimServer | None = None
        self._thread = threading.Thread(target=self._main, name="mlpe-sim", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _main(self) -> None:
        loop = new_event_loop(self.config.loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self._ready.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with SimServer(self.config) as server:
            self._server = server
            self._ready.set()
            await self._stop.wait()

    @property
    def server(self) -> SimServer:
        assert self._server is not None
        return self._server

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def stats(self) -> SimStats:
        """The live counters (read from another thread: a snapshot may mix
        moments, each counter is exact)."""
        return self.server.stats

    def stop(self, timeout: float = 10.0) -> None:
        """Closes the server and its loop and joins the thread (idempotent)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            # RuntimeError: the loop closed meanwhile.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the simulated endpoint did not stop in time")

    def __enter__(self) -> SimServerThread:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve_forever(config: SimConfig | None = None, *, out: TextIO | None = None) -> None:
    """Runs the endpoint until SIGINT or SIGTERM (the CLI's ``serve``).

    Prints one line with the URL to ``out`` (default stdout) once listening.
    """
    cfg = config if config is not None else SimConfig()
    loop = new_event_loop(cfg.loop)
    try:
        loop.run_until_complete(_serve_until_signal(cfg, out if out is not None else sys.stdout))
    except KeyboardInterrupt:  # where signal handlers cannot be installed
        pass
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _serve_until_signal(cfg: SimConfig, out: TextIO) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        async with SimServer(cfg) as server:
            loop_name = type(loop).__module__.split(".")[0]
            print(
                f"mlpe-fast sim: serving {cfg.model} at {server.url} "
                f"({loop_name}, {server.timer} timer)",
                file=out,
                flush=True,
            )
            await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


# --- command line -------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the endpoint's flags (see :func:`config_from_args`)."""
    d = SimConfig()
    g = parser.add_argument_group("simulated endpoint")
    g.add_argument("--host", default=d.host, help="address to bind (default %(default)s)")
    g.add_argument("--port", type=int, default=d.port, help="port; 0 picks a free one")
    g.add_argument("--model", default=d.model, help="model name served (default %(default)s)")
    g.add_argument("--ttft-ms", type=float, default=0.0, help="mean time to first token, ms")
    g.add_argument("--ttft-dist", choices=DIST_KINDS, default="fixed")
    g.add_argument("--itl-ms", type=float, default=0.0, help="mean inter-token delay, ms")
    g.add_argument("--itl-dist", choices=DIST_KINDS, default="fixed")
    g.add_argument(
        "--spread",
        type=float,
        default=0.2,
        help="coefficient of variation of every non-fixed distribution (default %(default)s)",
    )
    g.add_argument("--ttft-spread", type=float, default=None, help="overrides --spread")
    g.add_argument("--itl-spread", type=float, default=None, help="overrides --spread")
    g.add_argument(
        "--output-len",
        type=int,
        default=int(d.output_len.mean),
        help="mean tokens per response without max_tokens (default %(default)s)",
    )
    g.add_argument("--output-len-dist", choices=DIST_KINDS, default="fixed")
    g.add_argument("--output-len-spread", type=float, default=None, help="overrides --spread")
    g.add_argument("--output-len-min", type=int, default=1)
    g.add_argument("--output-len-max", type=int, default=None)
    g.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="first K tokens of a chat response as reasoning_content",
    )
    g.add_argument(
        "--framing",
        choices=("chunked", "length"),
        default=d.framing,
        help="chunked (streams) or length (buffers the whole stream)",
    )
    g.add_argument("--eol", choices=tuple(_EOLS), default=d.eol, help="SSE line end")
    g.add_argument(
        "--head-at-first-token",
        action="store_true",
        help="send the response head with the first token, not on arrival",
    )
    g.add_argument("--timer", choices=("auto", "timerfd", "loop"), default=d.timer)
    g.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default=d.loop)
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--max-body", type=int, default=d.max_body, help="bytes (413 past it)")


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """The :class:`SimConfig` for flags added by :func:`add_arguments`.

    Raises:
        ValueError: an inconsistent combination.
    """

    def spread(kind: str, own: float | None) -> float:
        if kind == "fixed":
            return 0.0
        return float(ns.spread if own is None else own)

    return SimConfig(
        host=ns.host,
        port=ns.port,
        model=ns.model,
        ttft_ms=Dist(ns.ttft_dist, ns.ttft_ms, spread(ns.ttft_dist, ns.ttft_spread)),
        itl_ms=Dist(ns.itl_dist, ns.itl_ms, spread(ns.itl_dist, ns.itl_spread)),
        output_len=Dist(
            ns.output_len_dist,
            ns.output_len,
            spread(ns.output_len_dist, ns.output_len_spread),
            min=max(1, ns.output_len_min),
            max=math.inf if ns.output_len_max is None else ns.output_len_max,
        ),
        reasoning_tokens=ns.reasoning_tokens,
        framing=ns.framing,
        eol=ns.eol,
        seed=ns.seed,
        head_at_first_token=ns.head_at_first_token,
        timer=ns.timer,
        loop=ns.loop,
        max_body=ns.max_body,
    )


def build_arg_parser(prog: str = "mlpe-fast serve") -> argparse.ArgumentParser:
    """A parser with just the endpoint's flags."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Serve the simulated OpenAI-compatible endpoint."
    )
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mlpe_fast.sim.server [flags]``."""
    parser = build_arg_parser("python -m mlpe_fast.sim.server")
    ns = parser.parse_args(argv)
    try:
        config = config_from_args(ns)
    except ValueError as exc:
        parser.error(str(exc))
    serve_forever(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
