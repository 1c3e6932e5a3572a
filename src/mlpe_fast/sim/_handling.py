"""Request handling shared by the simulated endpoint's HTTP/1.1 and HTTP/2
connections: the routes, request validation, the oracle's answer and the
start of the response job.

A protocol reads a complete request (method, path, body and the time its
last byte was read) and hands it to :func:`handle_request` together with a
:class:`~mlpe_fast.sim._responder.Responder`, the object the answer leaves
through: the HTTP/1.1 connection itself (it answers one request at a time)
or one HTTP/2 stream.  Everything above the framing, what is answered and
when, is decided here and in :mod:`mlpe_fast.sim._jobs`, so both protocols
serve the same bytes of JSON and SSE at the same deadlines.  The state all
connections share is :mod:`mlpe_fast.sim._state`.  See :mod:`mlpe_fast.sim.server`
for the behaviour and the meaning of the stamps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ._fault_jobs import BUFFERED_FAULTS, FaultyBufferedJob, FaultyStreamJob, fault_error
from ._jobs import BufferedJob, Gen, ReplayJob, ResponseJob, StreamJob
from ._metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ._metrics import metrics_page, track_job
from ._responder import JSON, Responder
from ._state import LIMIT_FIELDS, ServerState, drive
from .config import VOCAB
from .faults import FaultPicker, FaultSpec
from .oracle import MISS_CODE, request_prompt
from .replay import MISS_CODE as REPLAY_MISS_CODE
from .tokenize import FLUSH_CACHE_TEXT, TokenizeError, load_sim_tokenizer, tokenize

__all__ = ("handle_request", "reply", "send_error")

_VOCAB_BYTES = tuple(c.encode("ascii") for c in VOCAB)
_monotonic_ns = time.monotonic_ns


# --- requests ------------------------------------------------------------------------


class _BadParams(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


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


def _parse_gen(
    doc: object,
    *,
    chat: bool,
    limit: int,
    fields: tuple[tuple[str, ...], tuple[str, ...]] = LIMIT_FIELDS["both"],
) -> Gen:
    """What a completion request asks for; ``fields`` are the length fields
    read, chat's and completions' (``SimConfig.max_tokens_field``): the
    others are ignored, unchecked."""
    doc, stream = _object_and_stream(doc)
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
    for key in fields[0] if chat else fields[1]:
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
    return Gen(chat, stream, include_usage, max_tokens, prompt_tokens)


def _object_and_stream(doc: object) -> tuple[dict[str, Any], bool]:
    """A request body as the JSON object it must be, and its ``stream``
    (absent or null: False).

    Raises:
        _BadParams: the body is not an object, or ``stream`` not a boolean.
    """
    if not isinstance(doc, dict):
        raise _BadParams("the request body must be a JSON object")
    stream = doc.get("stream")
    if stream is None:
        return doc, False
    if not isinstance(stream, bool):
        raise _BadParams("'stream' must be a boolean", "stream")
    return doc, stream


def _parse_generate(doc: object, *, limit: int) -> Gen:
    """What an SGLang ``/generate`` request asks for (its
    ``GenerateReqInput``: ``input_ids`` or ``text``, ``sampling_params``,
    ``stream``); other members are ignored."""
    doc, stream = _object_and_stream(doc)
    ids, text = doc.get("input_ids"), doc.get("text")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(type(t) is int and t >= 0 for t in ids):
            raise _BadParams("'input_ids' must be a non-empty array of token ids", "input_ids")
        prompt_tokens = len(ids)
    elif isinstance(text, str):
        prompt_tokens = len(text)
    else:
        raise _BadParams("either 'text' or 'input_ids' should be provided", "input_ids")
    params = doc.get("sampling_params")
    max_tokens: int | None = None
    if params is not None:
        if not isinstance(params, dict):
            raise _BadParams("'sampling_params' must be an object", "sampling_params")
        value = params.get("max_new_tokens")
        if value is not None:
            if type(value) is not int or value < 1:
                raise _BadParams("'max_new_tokens' must be an integer >= 1", "sampling_params")
            if value > limit:
                raise _BadParams(
                    f"'max_new_tokens' exceeds the simulated context of {limit} tokens",
                    "sampling_params",
                )
            max_tokens = value
    return Gen(False, stream, False, max_tokens, prompt_tokens, sglang=True)


_ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/chat/completions": ("POST",),
    "/v1/completions": ("POST",),
    "/generate": ("POST",),
    "/v1/models": ("GET",),
    "/health": ("GET",),
    # sim/tokenize.py: the calls a client makes before the load
    "/reset_prefix_cache": ("POST",),
    "/flush_cache": ("GET", "POST"),
    "/tokenize": ("POST",),
    # sim/_metrics.py: read beside the load
    "/metrics": ("GET",),
}


@dataclass(frozen=True, slots=True)
class _Answer:
    """What a completion request gets: the tokens and how the text ends."""

    tokens: list[bytes]
    text: str | None  # an oracle's answer, else None (random text)
    finish: str
    completion_tokens: int


# --- answering -----------------------------------------------------------------------


def reply(
    state: ServerState,
    out: Responder,
    status: int,
    body: bytes,
    *,
    content_type: bytes = JSON,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answers a request with a whole response (counted as a request)."""
    stats = state.stats
    stats.requests += 1
    if status >= 400:
        stats.errors += 1
    out.respond(status, body, content_type=content_type, extra=extra)


def send_error(
    state: ServerState,
    out: Responder,
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answers with an error in OpenAI's shape."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = msgspec.json.encode(
        {"error": {"message": message, "type": kind, "param": param, "code": code}}
    )
    reply(state, out, status, body, extra=extra)


def handle_request(
    state: ServerState,
    out: Responder,
    method: str,
    path: str,
    body: bytes,
    *,
    recv_ns: int,
    base_ns: int,
) -> None:
    """Answers one complete request through ``out``: at once (listings,
    errors), or by starting the job of a completion.

    Args:
        path: the request target without its query string.
        recv_ns: when the request's last byte was read (``mlpe_recv_ns``).
        base_ns: what the first token's deadline counts from (``recv_ns``,
            or later when the response waits behind another one).
    """
    allowed = _ROUTES.get(path)
    if (
        allowed is None
        or (path == "/tokenize" and state.config.tokenizer is None)
        or (path == "/metrics" and state.config.metrics == "off")
    ):
        send_error(state, out, 404, f"no route for {path}")
        return
    if method not in allowed:
        send_error(
            state,
            out,
            405,
            f"{method} is not allowed on {path}",
            extra=((b"allow", ", ".join(allowed).encode()),),
        )
        return
    if path == "/v1/models":
        listing = msgspec.json.encode(
            {
                "object": "list",
                "data": [
                    {
                        "id": state.model,
                        "object": "model",
                        "created": 1700000000,
                        "owned_by": "mlpe-fast",
                    }
                ],
            }
        )
        reply(state, out, 200, listing)
        return
    if path == "/health":
        reply(state, out, 200, b"")
        return
    if path == "/metrics":
        reply(state, out, 200, metrics_page(state), content_type=METRICS_CONTENT_TYPE)
        return
    if path in ("/reset_prefix_cache", "/flush_cache", "/tokenize"):
        _side_route(state, out, path, body)
        return
    chat = path == "/v1/chat/completions"
    try:
        doc = msgspec.json.decode(body)
        if path == "/generate":
            gen = _parse_generate(doc, limit=state.config.max_output_tokens)
        else:
            gen = _parse_gen(
                doc, chat=chat, limit=state.config.max_output_tokens, fields=state.limit_fields
            )
    except msgspec.DecodeError:
        send_error(state, out, 400, "the request body is not valid JSON")
        return
    except _BadParams as exc:
        send_error(state, out, 400, exc.message, param=exc.param)
        return
    if state.replay is not None and chat:
        _replay(state, out, gen, doc, recv_ns=recv_ns, base_ns=base_ns)
        return
    oracle_text: str | None = None
    oracle = state.oracle
    if oracle is not None:
        prompt = request_prompt(doc, chat=chat)
        oracle_text = None if prompt is None else oracle.answer(prompt)
        if oracle_text is None:
            send_error(state, out, 404, oracle.miss_message(prompt), code=MISS_CODE)
            return
    # Drawn even for a request a fault answers at once, so that faults do
    # not change the text of the other requests.
    answer = _answer(state, gen, oracle_text)
    fault = None
    if state.faults is not None:
        fault = _pick_fault(state, state.faults, out, gen, recv_ns)
        if fault is not None and _fault_at_once(state, out, fault):
            return
    _start(state, out, gen, answer, recv_ns=recv_ns, base_ns=base_ns, fault=fault)


def _side_route(state: ServerState, out: Responder, path: str, body: bytes) -> None:
    """The routes beside the completions (:mod:`mlpe_fast.sim.tokenize`)."""
    stats = state.stats
    if path == "/tokenize":
        tokenizer = load_sim_tokenizer(state.config.tokenizer or "")
        try:
            answer = tokenize(
                tokenizer,
                body,
                skew=state.config.tokenize_skew,
                max_model_len=state.config.max_output_tokens,
            )
        except TokenizeError as error:
            send_error(state, out, 400, error.message, param=error.param)
            return
        stats.tokenize_requests += 1
        reply(state, out, 200, answer)
        return
    stats.prefix_cache_resets += 1
    if path == "/flush_cache":
        reply(state, out, 200, FLUSH_CACHE_TEXT, content_type=b"text/plain; charset=utf-8")
    else:
        reply(state, out, 200, b"")


def _replay(
    state: ServerState, out: Responder, gen: Gen, doc: Any, *, recv_ns: int, base_ns: int
) -> None:
    """Answers a turn with its recorded assistant row (``sim/replay.py``),
    streamed as deltas: the first at the first-token deadline, the rest an
    inter-token gap apart; a turn the dataset does not have gets 404."""
    replay = state.replay
    assert replay is not None
    answer = replay.answer(doc)
    if answer is None:
        send_error(state, out, 404, replay.miss_message(), code=REPLAY_MISS_CODE)
        return
    if not gen.stream or state.config.framing != "chunked":
        send_error(state, out, 400, "the replay mode streams (stream: true, chunked framing)")
        return
    state.stats.requests += 1
    now = _monotonic_ns()
    job = ReplayJob(
        out,
        state,
        gen,
        tokens=[],
        answer=None,
        finish=answer.finish,
        completion_tokens=answer.completion_tokens,
        reasoning=0,
        first_due=base_ns + state.ttft(),
        recv_ns=recv_ns,
        t0=now,
        deltas=answer.deltas,
    )
    out.begin(job, streamed=True)
    track_job(state, job)
    state.prompt_tokens += gen.prompt_tokens
    drive(state, job, now)


def _pick_fault(
    state: ServerState, picker: FaultPicker, out: Responder, gen: Gen, recv_ns: int
) -> FaultSpec | None:
    """The fault of this completion request, if any (counted)."""
    wire = out.wire
    fault = picker.pick(
        recv_ns,
        streamed=gen.stream and state.config.framing == "chunked",
        http1=wire is not None,
        chunked=out.chunked,
        keep_alive=wire is not None and wire.keeps_alive,
        # a stream the HTTP/2 reset fault marked keeps to that fault
        allowed=out.reset_after_tokens is None,
    )
    if fault is not None:
        state.stats.faults[fault.name] += 1
    return fault


def _fault_at_once(state: ServerState, out: Responder, fault: FaultSpec) -> bool:
    """Applies the faults that answer without generating anything; False
    for the others, which the response's job or connection carries out."""
    status = fault.status
    if status is not None:
        body, extra = fault_error(status)
        reply(state, out, status, body, extra=extra)
        return True
    if fault.name == "reset-before-head":
        state.stats.requests += 1
        out.reset()
        return True
    if fault.name == "close-after-response":
        assert out.wire is not None  # applies() saw to it
        out.wire.close_after_response()
    return False


def _answer(state: ServerState, gen: Gen, oracle_text: str | None) -> _Answer:
    """The tokens of a response: an oracle's answer cut in pieces, or random text."""
    cfg = state.config
    if oracle_text is not None:
        assert state.oracle is not None
        text, finish = state.oracle.cut(oracle_text, gen.max_tokens)
        tokens = state.oracle.pieces(text)
        # an empty answer is one empty piece
        return _Answer(tokens, text, finish, len(tokens) if text else 0)
    if gen.max_tokens is not None:
        n = gen.max_tokens
        finish = "length"
    else:
        n = min(max(1, state.length()), cfg.max_output_tokens)
        finish = "stop"
    return _Answer(state.rng_text.choices(_VOCAB_BYTES, k=n), None, finish, n)


def _start(
    state: ServerState,
    out: Responder,
    gen: Gen,
    answer: _Answer,
    *,
    recv_ns: int,
    base_ns: int,
    fault: FaultSpec | None,
) -> None:
    """Starts the response job and fires it if something is due already."""
    cfg = state.config
    state.stats.requests += 1
    state.prompt_tokens += gen.prompt_tokens
    now = _monotonic_ns()
    n = len(answer.tokens)
    first_due = base_ns + state.ttft()
    common: dict[str, Any] = {
        "tokens": answer.tokens,
        "answer": answer.text,
        "finish": answer.finish,
        "completion_tokens": answer.completion_tokens,
        "reasoning": min(cfg.reasoning_tokens, n) if gen.chat else 0,
        "recv_ns": recv_ns,
        "t0": now,
    }
    job: ResponseJob
    if gen.stream and cfg.framing == "chunked":
        if fault is None or fault.name == "close-after-response":
            job = StreamJob(out, state, gen, first_due=first_due, **common)
        else:
            job = FaultyStreamJob(out, state, gen, first_due=first_due, fault=fault.name, **common)
        out.begin(job, streamed=True)
        track_job(state, job)
        if cfg.head_at_first_token and first_due > now:
            state.pacer.schedule(first_due, job)
        else:
            drive(state, job, now)
    else:
        itl = state.itl
        last_due = first_due
        for _ in range(n - 1):
            last_due += itl()
        if fault is not None and fault.name in BUFFERED_FAULTS:
            job = FaultyBufferedJob(out, state, gen, first_due=last_due, fault=fault.name, **common)
        else:
            job = BufferedJob(out, state, gen, first_due=last_due, **common)
        out.begin(job, streamed=False)
        track_job(state, job)
        if job.due > now:  # a fault's may be now
            state.pacer.schedule(job.due, job)
        else:
            drive(state, job, now)
