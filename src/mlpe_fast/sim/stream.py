"""The sending side of the wire: OpenAI chunks, SGLang's ``/generate``
objects, SSE events, HTTP/1.1 framing.

The simulated endpoint writes responses with these, and tests and benchmarks
build their inputs with them, so that what the decoders are tested on is
what the endpoint sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

__all__ = (
    "LAST_CHUNK",
    "chat_chunk",
    "chat_completion",
    "chunk_frame",
    "chunked",
    "completion_chunk",
    "http_response",
    "sglang_finish",
    "sglang_generate",
    "sse_event",
    "text_completion",
    "tool_call_fragment",
)

_encode = msgspec.json.Encoder().encode


def _chunk(
    kind: str,
    choice: dict[str, Any] | None,
    response_id: str,
    created: int,
    model: str,
    usage: dict[str, int] | None,
    extra: dict[str, Any] | None,
) -> bytes:
    """The envelope both chunk kinds share; no choice gives ``"choices": []``."""
    doc: dict[str, Any] = {
        "id": response_id,
        "object": kind,
        "created": created,
        "model": model,
        "choices": [] if choice is None else [choice],
    }
    if usage is not None:
        doc["usage"] = usage
    if extra:
        doc.update(extra)
    return _encode(doc)


def chat_chunk(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    tool_calls: Sequence[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    role: str | None = None,
    choices: bool = True,
    response_id: str = "chatcmpl-1",
    model: str = "m",
    created: int = 1700000000,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """One ``chat.completion.chunk`` as vLLM and SGLang send it.

    ``choices=False`` gives the usage-only final chunk (``"choices": []``)
    of ``stream_options.include_usage``; ``extra`` adds top-level members
    (the simulated endpoint's send stamp, say).
    """
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    if tool_calls is not None:
        delta["tool_calls"] = list(tool_calls)
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return _chunk(
        "chat.completion.chunk",
        choice if choices else None,
        response_id,
        created,
        model,
        usage,
        extra,
    )


def completion_chunk(
    text: str,
    *,
    finish_reason: str | None = None,
    response_id: str = "cmpl-1",
    model: str = "m",
    created: int = 1700000000,
    usage: dict[str, int] | None = None,
    choices: bool = True,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """One ``text_completion`` chunk of the completions API.

    ``choices=False`` gives the usage-only final chunk (``"choices": []``,
    ``text`` unused) of ``stream_options.include_usage``; ``extra`` adds
    top-level members, as for :func:`chat_chunk`.
    """
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return _chunk(
        "text_completion", choice if choices else None, response_id, created, model, usage, extra
    )


def chat_completion(
    *,
    content: str,
    reasoning: str | None = None,
    finish_reason: str | None = "stop",
    usage: dict[str, Any] | None = None,
    response_id: str = "chatcmpl-1",
    model: str = "m",
    created: int = 1700000000,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """A whole non-streaming ``chat.completion`` body (one choice)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    doc: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
    }
    if usage is not None:
        doc["usage"] = usage
    if extra:
        doc.update(extra)
    return _encode(doc)


def text_completion(
    text: str,
    *,
    finish_reason: str | None = "stop",
    usage: dict[str, Any] | None = None,
    response_id: str = "cmpl-1",
    model: str = "m",
    created: int = 1700000000,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """A whole non-streaming ``text_completion`` body (one choice)."""
    doc: dict[str, Any] = {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None:
        doc["usage"] = usage
    if extra:
        doc.update(extra)
    return _encode(doc)


def sglang_finish(finish: str, max_new_tokens: int | None = None) -> dict[str, Any]:
    """SGLang's ``meta_info.finish_reason`` for a finish reason: ``length``
    names the limit it hit, ``stop`` the end-of-sequence token that matched
    (0: the simulated model has no ids of its own)."""
    if finish == "length":
        return {"type": "length", "length": max_new_tokens}
    return {"type": finish, "matched": 0}


def sglang_generate(
    text: str,
    *,
    completion_tokens: int,
    prompt_tokens: int = 0,
    finish_reason: dict[str, Any] | None = None,
    output_ids: Sequence[int] = (),
    response_id: str = "0123456789abcdef",
    extra: dict[str, Any] | None = None,
) -> bytes:
    """One object of SGLang's native ``/generate``: an event of its stream
    or its whole non-streaming body, which have the same shape
    (``sglang/srt/managers/tokenizer_manager.py``).  In a stream ``text`` is
    the whole text so far (SGLang's default; a server started with
    ``--incremental-streaming-output`` sends each event's new text instead)
    and ``completion_tokens`` counts every token so far; ``finish_reason``
    is null until the last event (:func:`sglang_finish`).  ``extra`` adds
    top-level members, as for :func:`chat_chunk`."""
    meta: dict[str, Any] = {
        "id": response_id,
        "finish_reason": finish_reason,
        "prompt_tokens": prompt_tokens,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": 0,
    }
    doc: dict[str, Any] = {"text": text, "output_ids": list(output_ids), "meta_info": meta}
    if extra:
        doc.update(extra)
    return _encode(doc)


def tool_call_fragment(
    index: int,
    *,
    call_id: str | None = None,
    name: str | None = None,
    arguments: str | None = None,
) -> dict[str, Any]:
    """One entry of ``delta.tool_calls``: the first fragment of a call has
    its id, type and name; later ones carry argument text only."""
    fragment: dict[str, Any] = {"index": index}
    function: dict[str, Any] = {}
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        fragment["function"] = function
    return fragment


def sse_event(data: bytes, *, eol: bytes = b"\n") -> bytes:
    """``data: <data>`` and a blank line, with the given line end (LF, CRLF
    or CR: all three are legal, WHATWG HTML section 9.2.6)."""
    return b"data: " + data + eol + eol


LAST_CHUNK = b"0\r\n\r\n"
"""The last chunk of the chunked transfer coding, with no trailer fields."""


def chunk_frame(piece: bytes) -> bytes:
    """One chunk of the chunked transfer coding (RFC 9112 section 7.1):
    size in hex, CRLF, the piece, CRLF.  ``piece`` must not be empty (an
    empty chunk is the last chunk, :data:`LAST_CHUNK`)."""
    if not piece:
        raise ValueError("an empty chunk would end the body")
    return b"%x\r\n%b\r\n" % (len(piece), piece)


def chunked(pieces: Iterable[bytes]) -> bytes:
    """The chunked transfer coding of the pieces (RFC 9112 section 7.1),
    one chunk per non-empty piece, and the last chunk."""
    out = bytearray()
    for piece in pieces:
        if piece:
            out += b"%x\r\n" % len(piece)
            out += piece
            out += b"\r\n"
    out += b"0\r\n\r\n"
    return bytes(out)


def http_response(
    body_pieces: Iterable[bytes],
    *,
    status: int = 200,
    reason: bytes = b"OK",
    content_type: bytes = b"text/event-stream",
    transfer: str = "chunked",
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> bytes:
    """A whole HTTP/1.1 response.

    ``transfer`` is ``"chunked"`` (one chunk per piece), ``"length"``
    (Content-Length) or ``"close"`` (the body runs to the end of the
    connection).
    """
    pieces = list(body_pieces)
    head = [b"HTTP/1.1 %d %s" % (status, reason), b"content-type: " + content_type]
    head += [name + b": " + value for name, value in headers]
    if transfer == "chunked":
        head.append(b"transfer-encoding: chunked")
        body = chunked(pieces)
    elif transfer == "length":
        body = b"".join(pieces)
        head.append(b"content-length: %d" % len(body))
    elif transfer == "close":
        body = b"".join(pieces)
        head.append(b"connection: close")
    else:
        raise ValueError(f"unknown transfer {transfer!r}")
    return b"\r\n".join(head) + b"\r\n\r\n" + body
