"""The SGLang dialect of the wire core: SGLang's native ``/generate`` objects.

Rules G1-G7 are those of csrc/mlpe_oai.h (one event's object to fragments),
R11 that of csrc/mlpe_response.h (the whole text so far to deltas, per
response).  Every test runs on both implementations (the ``oai`` and
``response`` fixtures); the fixtures' streams are also fed whole, one byte at
a time and split at every index, and the two implementations compared
directly.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlpe_fast.errors import NOT_CUMULATIVE_HINT, ErrorCode, TextNotCumulative
from mlpe_fast.sim.stream import http_response, sglang_finish, sglang_generate, sse_event
from mlpe_fast.wire.events import ChunkError, Delta, ResponseSummary
from tests.conftest import IMPLS, wire_module

SHAPE = ErrorCode.CHUNK_SHAPE
T = 1_700_000_000_000_000_001


def decode(oai: ModuleType, payload: bytes | str) -> Delta | ChunkError:
    if isinstance(payload, str):
        payload = payload.encode()
    return oai.ChunkDecoder("sglang").decode(payload, T)  # type: ignore[no-any-return]


def delta(
    content: str | None = None,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
) -> Delta:
    return Delta(content, None, (), finish_reason, usage, T)


def event(text: str | None, n: int, finish: str | None = None, **meta: Any) -> bytes:
    """One event of a stream of SGLang's (its finish_reason on the last)."""
    doc = json.loads(
        sglang_generate(
            text or "",
            completion_tokens=n,
            prompt_tokens=7,
            finish_reason=None if finish is None else sglang_finish(finish, n),
            output_ids=[n],
        )
    )
    if text is None:
        del doc["text"]
    doc["meta_info"].update(meta)
    return json.dumps(doc, ensure_ascii=False).encode()


# ---- one object (G1-G7) -----------------------------------------------------------

# As SGLang 0.5 sends them (sglang/srt/managers/tokenizer_manager.py), the
# text the whole text so far.
FIRST = (
    b'{"text":"The","output_ids":[976],"meta_info":{"id":"4c2f0e6d8f0a4b8e","finish_reason":'
    b'null,"prompt_tokens":9,"weight_version":"default","total_retractions":0,'
    b'"completion_tokens":1,"cached_tokens":0}}'
)
LAST = (
    b'{"text":"The answer","output_ids":[976,6052],"meta_info":{"id":"4c2f0e6d8f0a4b8e",'
    b'"finish_reason":{"type":"length","length":2},"prompt_tokens":9,"weight_version":'
    b'"default","total_retractions":0,"completion_tokens":2,"cached_tokens":0,'
    b'"e2e_latency":0.0421}}'
)
STOPPED = (
    b'{"text":"ok","output_ids":[525],"meta_info":{"id":"a","finish_reason":'
    b'{"type":"stop","matched":200002},"prompt_tokens":3,"completion_tokens":2}}'
)


def test_real_objects(oai: ModuleType) -> None:
    assert decode(oai, FIRST) == delta("The", usage={"prompt_tokens": 9, "completion_tokens": 1})
    assert decode(oai, LAST) == delta(
        "The answer", "length", {"prompt_tokens": 9, "completion_tokens": 2}
    )
    assert decode(oai, STOPPED) == delta("ok", "stop", {"prompt_tokens": 3, "completion_tokens": 2})


@pytest.mark.parametrize(
    ("meta", "usage"),
    [
        ('{"prompt_tokens":5}', {"prompt_tokens": 5}),
        ('{"completion_tokens":0}', {"completion_tokens": 0}),
        ('{"prompt_tokens":null,"completion_tokens":3}', {"completion_tokens": 3}),
        (
            '{"prompt_tokens":-0,"completion_tokens":-4}',
            {"prompt_tokens": 0, "completion_tokens": -4},
        ),
        ('{"completion_tokens":2,"prompt_tokens":1}', {"prompt_tokens": 1, "completion_tokens": 2}),
        ('{"prompt_tokens":' + "9" * 30 + "}", {"prompt_tokens": int("9" * 30)}),
        ('{"prompt_tokens":' + "9" * 5000 + "}", {"prompt_tokens": 2**63}),
        ("{}", None),
        ('{"prompt_tokens":null}', None),
    ],
)
def test_usage_is_the_counts_present_in_order(
    oai: ModuleType, meta: str, usage: dict[str, int] | None
) -> None:
    # G5: what a usage object is read for (metrics/usage_check.py)
    result = decode(oai, f'{{"text":"a","meta_info":{meta}}}')
    assert result == delta("a", usage=usage)
    if usage is not None:
        assert list(result.usage or {}) == list(usage)


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("null", None),
        ('{"type":"length","length":4}', "length"),
        ('{"type":"abort","message":"context too long"}', "abort"),
        ('{"type":null}', None),
        ("{}", None),
        ('{"type":"stop","type":"length"}', "length"),  # J6
    ],
)
def test_finish_reason_is_its_type(oai: ModuleType, finish: str, reason: str | None) -> None:
    assert decode(oai, f'{{"text":"","meta_info":{{"finish_reason":{finish}}}}}') == delta(
        "", reason
    )


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ("{}", delta()),
        ('{"text":null,"meta_info":null}', delta()),
        ('{"text":"x"}', delta("x")),
        (
            '{"output_ids":[1,2],"meta_info":{"completion_tokens":2}}',
            delta(usage={"completion_tokens": 2}),
        ),
        # G7: OpenAI's members mean nothing here
        ('{"choices":[{"delta":{"content":"no"}}],"usage":{"completion_tokens":9}}', delta()),
        ('{"text":"a","text":"ab"}', delta("ab")),  # J6
        ('{"meta_info":{"completion_tokens":1},"meta_info":{}}', delta()),  # J6
        ('{"text":"\\u00e9\\ud83d\\ude00\\ud800 \\"q\\"\\n"}', delta('é😀\ufffd "q"\n')),  # J5
        ('{"text":"café"}', delta("café")),
        ('{"error":null,"text":"a"}', delta("a")),
    ],
)
def test_members(oai: ModuleType, payload: str, expected: Delta) -> None:
    assert decode(oai, payload) == expected


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('{"error":{"message":"engine died","code":500},"text":"a"}', "engine died"),
        ('{"error":"out of memory"}', "out of memory"),
        ('{"error":{"code":1}}', ""),
        ('{"text":5,"error":{"message":"first"}}', "first"),  # G6: error first
    ],
)
def test_error_objects(oai: ModuleType, payload: str, message: str) -> None:
    result = decode(oai, payload)
    assert isinstance(result, ChunkError)
    assert (result.code, result.detail) == (ErrorCode.ENDPOINT_ERROR, message)


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ("[]", "$"),
        ('"text"', "$"),
        ('{"text":["a"]}', "text"),
        ('{"text":1}', "text"),
        ('{"meta_info":[]}', "meta_info"),
        ('{"meta_info":{"finish_reason":"length"}}', "meta_info.finish_reason"),
        ('{"meta_info":{"finish_reason":{"type":1}}}', "meta_info.finish_reason.type"),
        ('{"meta_info":{"prompt_tokens":1.0}}', "meta_info.prompt_tokens"),
        ('{"meta_info":{"prompt_tokens":"1"}}', "meta_info.prompt_tokens"),
        ('{"meta_info":{"completion_tokens":true}}', "meta_info.completion_tokens"),
        ('{"meta_info":{"completion_tokens":1e3}}', "meta_info.completion_tokens"),
        # G6's order, not text order
        ('{"meta_info":{"completion_tokens":"x"},"text":0}', "text"),
        (
            '{"meta_info":{"completion_tokens":"x","prompt_tokens":"x","finish_reason":1}}',
            "meta_info.finish_reason",
        ),
        ('{"meta_info":{"completion_tokens":"x","prompt_tokens":"x"}}', "meta_info.prompt_tokens"),
    ],
)
def test_shape_errors(oai: ModuleType, payload: str, path: str) -> None:
    result = decode(oai, payload)
    assert isinstance(result, ChunkError)
    assert (result.code, result.detail) == (SHAPE, path)
    assert result.message == f"unexpected type for {path}"


@pytest.mark.parametrize(
    "payload",
    [b'{"text":"a"', b'{"text":"\xff"}', b"[" * 65 + b"]" * 65, b"", b'{"text":"a"} x'],
)
def test_json_errors_are_the_openai_dialect_s(oai: ModuleType, payload: bytes) -> None:
    # J1-J6 hold as for OpenAI chunks: the same scanner, the same code
    openai = oai.ChunkDecoder().decode(payload, T)
    assert isinstance(openai, ChunkError)
    assert decode(oai, payload) == openai


def test_one_decoder_serves_a_stream_and_the_dialects_differ(oai: ModuleType) -> None:
    sglang, openai = oai.ChunkDecoder("sglang"), oai.ChunkDecoder("openai")
    chat = b'{"choices":[{"index":0,"delta":{"content":"a"}}]}'
    for i in range(30):  # a stream of similar objects: no template may leak
        text = "x" * i
        payload = event(text, i)
        assert sglang.decode(payload, T) == delta(
            text, usage={"prompt_tokens": 7, "completion_tokens": i}
        )
        assert openai.decode(chat, T) == Delta("a", None, (), None, None, T)
        assert sglang.decode(chat, T) == delta()


def test_an_unknown_dialect_is_refused(oai: ModuleType) -> None:
    with pytest.raises(ValueError, match="dialect must be one of openai, sglang, not 'vllm'"):
        oai.ChunkDecoder("vllm")


# ---- one response (R11) --------------------------------------------------------------


def sse(*payloads: bytes, done: bool = True) -> list[bytes]:
    events = [sse_event(p) for p in payloads]
    if done:
        events.append(sse_event(b"[DONE]"))
    return events


def stream(*texts: str | None, finish: str = "length") -> bytes:
    """A stream of SGLang's: one event per text, the last with ``finish``."""
    n = len(texts)
    return http_response(
        sse(*(event(t, i + 1, finish if i == n - 1 else None) for i, t in enumerate(texts)))
    )


FIXTURES: dict[str, bytes] = {
    "cumulative": stream("Hel", "Hello", "Hello w", "Hello world"),
    # text that adds nothing (a special token skipped), multi-byte text
    "utf8_and_empty": stream("", "caf", "café", "café", "café 世", "café 世😀"),
    "no_text_member": stream("a", None, "ab"),
    "non_streaming": http_response([LAST], content_type=b"application/json", transfer="length"),
    "chunk_error_between": http_response(
        sse(event("a", 1), b'{"text": "ab', event("abc", 3, "stop"))
    ),
    "error_event": http_response(sse(event("a", 1), b'{"error":{"message":"engine died"}}')),
    "content_length": http_response(sse(event("x", 1), event("xy", 2, "stop")), transfer="length"),
}


def feed_pieces(mod: ModuleType, pieces: list[bytes], **kwargs: Any) -> tuple[list[Any], Any]:
    decoder = mod.ResponseDecoder(dialect="sglang", **kwargs)
    events: list[Any] = []
    for i, piece in enumerate(pieces):
        events += decoder.feed(piece, 1000 + i)
    return events, decoder


def summary_of(mod: ModuleType, data: bytes, **kwargs: Any) -> ResponseSummary:
    return feed_pieces(mod, [data], **kwargs)[1].summary()  # type: ignore[no-any-return]


def test_cumulative_text_becomes_deltas(response: ModuleType) -> None:
    summary = summary_of(response, FIXTURES["cumulative"], record_chunk_times=True)
    assert summary.ok
    assert summary.content == "Hello world"
    assert summary.content_after_first == "lo world"  # TPOT's text: after the first event
    assert summary.content_events == 4
    assert summary.finish_reason == "length"
    assert summary.usage == {"prompt_tokens": 7, "completion_tokens": 4}  # the last one
    assert summary.reasoning == "" and summary.tool_calls == ()


def test_an_event_that_adds_no_text_bears_no_content(response: ModuleType) -> None:
    data = FIXTURES["utf8_and_empty"]
    summary = summary_of(response, data, record_chunk_times=True)
    assert summary.content == "café 世😀"
    # "" and the repeated "café" add nothing (rule R3: not the first token)
    assert summary.content_events == 4
    assert summary.content_after_first == "é 世😀"
    # the first token is the second event, whichever read brought it
    pieces = [data[i : i + 1] for i in range(len(data))]
    first = data.index(b'"caf"') + len(b'"caf"')
    _, decoder = feed_pieces(response, pieces)
    assert decoder.summary().t_first > 1000 + first
    assert decoder.summary().content == summary.content


def test_a_chunk_error_loses_no_text(response: ModuleType) -> None:
    summary = summary_of(response, FIXTURES["chunk_error_between"])
    assert summary.ok and summary.content == "abc" and summary.chunk_errors == 1
    assert summary.first_chunk_error is not None
    assert summary.first_chunk_error.code == ErrorCode.JSON_SYNTAX


def test_a_non_streaming_body_is_the_whole_answer(response: ModuleType) -> None:
    summary = summary_of(response, FIXTURES["non_streaming"])
    assert summary.ok and summary.content == "The answer" and summary.finish_reason == "length"
    assert summary.usage == {"prompt_tokens": 9, "completion_tokens": 2}


def test_an_error_event_is_counted(response: ModuleType) -> None:
    summary = summary_of(response, FIXTURES["error_event"])
    assert summary.ok and summary.content == "a" and summary.chunk_errors == 1
    assert summary.first_chunk_error is not None
    assert summary.first_chunk_error.message == "endpoint sent an error: engine died"


def test_an_http_error_is_reported_as_on_the_openai_routes(response: ModuleType) -> None:
    data = http_response(
        [b'{"object":"error","message":"Input is too long","type":"BadRequestError"}'],
        status=400,
        reason=b"Bad Request",
        content_type=b"application/json",
        transfer="length",
    )
    summary = summary_of(response, data)
    assert summary.error_code == ErrorCode.HTTP_STATUS
    assert summary.error_message == "HTTP 400: Input is too long"


@pytest.mark.parametrize(
    ("texts", "parted"),
    [
        (("The", "The", "e"), 0),  # deltas: --incremental-streaming-output
        (("Hello", "Help"), 3),
        (("Hello", "Hell"), 4),  # shorter: rewritten, not extended
        (("café", "cafe!"), 3),  # bytes: é is C3 A9
        (("ab", "abc", ""), 0),  # an empty text after text is a rewrite too
    ],
)
def test_text_that_does_not_extend_the_text_before_fails_the_response(
    response: ModuleType, texts: tuple[str, ...], parted: int
) -> None:
    data = stream(*texts)
    decoder = response.ResponseDecoder(dialect="sglang")
    with pytest.raises(TextNotCumulative) as info:
        decoder.feed(data, 5)
    assert info.value.position == parted
    assert str(info.value) == (
        "SGLang event text parts from the text streamed before it at byte "
        f"{parted}: {NOT_CUMULATIVE_HINT}"
    )
    # terminal (R8): it is raised again, and the text before it is kept
    with pytest.raises(TextNotCumulative):
        decoder.feed(b"\r\n", 6)
    summary = decoder.summary()
    assert summary.error_code == ErrorCode.TEXT_NOT_CUMULATIVE and not summary.ok
    assert not summary.keep_alive
    assert summary.content == texts[-2]
    assert summary.finish_reason is None  # nothing of the failing event is applied


def test_the_openai_dialect_reads_no_text_from_it(response: ModuleType) -> None:
    # the dialect is chosen, never guessed: read as OpenAI chunks, SGLang's
    # objects carry nothing (and an empty answer fails as EmptyAnswer later)
    decoder = response.ResponseDecoder()
    decoder.feed(FIXTURES["cumulative"], 1)
    summary = decoder.summary()
    assert summary.ok and summary.content == "" and summary.usage is None


def test_body_mode_gives_the_wire_s_summary(response: ModuleType) -> None:
    # R9 (HTTP/2): the same head and body, the same rules, R11 included
    for name in ("cumulative", "utf8_and_empty"):
        data = FIXTURES[name]
        body = data.split(b"\r\n\r\n", 1)[1]
        payload = b"".join(  # de-chunked
            body[i + 2 : i + 2 + n] for i, n in _chunks(body)
        )
        decoder = response.ResponseDecoder(dialect="sglang")
        decoder.set_head(200, [(b"content-type", b"text/event-stream")], 1)
        for k in range(0, len(payload), 5):
            decoder.feed_body(payload[k : k + 5], 2)
        decoder.end_body(3)
        wire = summary_of(response, data)
        timeless = {
            "t_head": 0,
            "t_first": 0,
            "t_done": 0,
            "keep_alive": False,
            "t_first_content": None,
            "t_second": None,
        }
        # every event in one stamp both ways: the same gaps (all 0, R12)
        assert _replace(decoder.summary(), **timeless) == _replace(wire, **timeless)
    decoder = response.ResponseDecoder(dialect="sglang")
    decoder.set_head(200, [(b"content-type", b"text/event-stream")], 1)
    with pytest.raises(TextNotCumulative):
        decoder.feed_body(b"".join(sse(event("ab", 1), event("b", 2))), 2)


def _chunks(body: bytes) -> list[tuple[int, int]]:
    """(offset of the size line's end - 2, size) of each chunk of a chunked body."""
    out, at = [], 0
    while True:
        line_end = body.index(b"\r\n", at)
        size = int(body[at:line_end], 16)
        if size == 0:
            return out
        out.append((line_end, size))
        at = line_end + 2 + size + 2


def _replace(summary: ResponseSummary, **fields: Any) -> ResponseSummary:
    return msgspec.structs.replace(summary, **fields)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_split_gives_the_same_summary(response: ModuleType, name: str) -> None:
    data = FIXTURES[name]
    reference = summary_of(response, data)
    # R12's stamps and gaps follow the split (exact ones: test_response.py)
    timeless = {
        "t_head": 0,
        "t_first": 0,
        "t_done": 0,
        "first_chunk_error": None,
        "t_first_content": None,
        "t_second": None,
        "gaps": None,
    }
    for k in range(1, len(data)):
        summary = feed_pieces(response, [data[:k], data[k:]])[1].summary()
        gaps, expected = summary.gaps, reference.gaps
        assert (gaps is None) == (expected is None) and (
            gaps is None or gaps.count == expected.count
        )
        assert _replace(summary, **timeless) == _replace(reference, **timeless), k


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_implementations_agree(name: str) -> None:
    data = FIXTURES[name]
    results = []
    for impl in IMPLS:
        mod = wire_module("response", impl)
        for step in (1, 7, len(data)):
            pieces = [data[i : i + step] for i in range(0, len(data), step)]
            events, decoder = feed_pieces(mod, pieces, record_chunk_times=True)
            results.append((step, events, decoder.summary()))
    half = len(results) // 2
    assert results[:half] == results[half:]


# ---- random objects, both implementations -----------------------------------------------

_TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**70), st.floats(-2, 2), _TEXTS)
_FINISH = st.one_of(
    _SCALARS, st.fixed_dictionaries({}, optional={"type": _SCALARS, "length": _SCALARS})
)
_META = st.fixed_dictionaries(
    {},
    optional={
        "id": _TEXTS,
        "finish_reason": _FINISH,
        "prompt_tokens": _SCALARS,
        "completion_tokens": _SCALARS,
        "cached_tokens": _SCALARS,
    },
)
_OBJECTS = st.fixed_dictionaries(
    {},
    optional={
        "text": _SCALARS,
        "output_ids": st.lists(st.integers(0, 9), max_size=3),
        "meta_info": st.one_of(_META, _SCALARS),
        "error": st.one_of(st.none(), _TEXTS, st.fixed_dictionaries({"message": _SCALARS})),
    },
)


@settings(max_examples=300, deadline=None)
@given(doc=_OBJECTS, cut=st.integers(0, 10_000), flip=st.integers(0, 255))
def test_random_objects_decode_alike(doc: dict[str, Any], cut: int, flip: int) -> None:
    payload = json.dumps(doc, ensure_ascii=bool(flip & 1)).encode()
    variants = [payload, payload[: cut % (len(payload) + 1)]]
    if payload:
        at = cut % len(payload)
        variants.append(payload[:at] + bytes([flip]) + payload[at + 1 :])
    c, py = (wire_module("oai", impl).ChunkDecoder("sglang") for impl in IMPLS)
    for variant in variants:
        assert c.decode(variant, T) == py.decode(variant, T), variant
