"""Differential fuzzing: the compiled core against its pure-Python twin.

Hypothesis builds HTTP/1.1 responses and SSE streams -- well-formed ones with
every feature of the grammar, then often corrupted by a few byte edits --
cuts them at random points, stamps each piece, and feeds the same pieces to
``_<name>_c`` and ``_<name>_py``.  Both must return the same events call by
call, or raise the same exception class at the same ``position``; and a
decoder that raised must raise an equal error again.  HTTP/2 input for the
DATA de-framer (random frame sequences, or noise) runs both de-framers, each
with its own decoders, and compares everything they report.

Excluded inside wheels (``-m 'not hypothesis'``); skipped when the compiled
core is disabled with ``MLPE_FAST_NO_EXTENSIONS``.  Each test is bounded by
``max_examples`` so the file runs in well under a minute on two cores.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlpe_fast.errors import ProtocolError
from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event, tool_call_fragment
from mlpe_fast.wire.events import BodyData, ResponseComplete, ResponseHead
from mlpe_fast.wire.gaps import unpack_buckets
from tests.conftest import wire_module
from tests.unit.test_h2_deframer import frame_sequence
from tests.unit.test_h2_deframer import run_scenario as run_h2_scenario
from tests.unit.test_h2_deframer import scenario as h2_scenario

pytestmark = [pytest.mark.hypothesis, pytest.mark.c_extension]

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def h1_impls() -> tuple[ModuleType, ModuleType]:
    return wire_module("h1", "c"), wire_module("h1", "py")


@pytest.fixture(scope="module")
def sse_impls() -> tuple[ModuleType, ModuleType]:
    return wire_module("sse", "c"), wire_module("sse", "py")


# --- running one decoder -------------------------------------------------------------


@dataclass
class Trace:
    """What one decoder did with a sequence of pieces."""

    calls: list[list[Any]] = field(default_factory=list)  # events per successful call
    error: tuple[type[BaseException], int] | None = None  # (class, position)
    again: tuple[type[BaseException], int] | None = None  # the error of the next feed


def _error_key(exc: ProtocolError) -> tuple[type[BaseException], int]:
    return type(exc), exc.position


def run(
    decoder: Any,
    pieces: Sequence[bytes],
    stamps: Sequence[int],
    eof: bool,
    normalise: Callable[[list[Any]], list[Any]] = list,
) -> Trace:
    """Feeds the pieces (then EOF when asked) until the first error."""
    trace = Trace()
    for piece, t_ns in zip(pieces, stamps, strict=True):
        try:
            trace.calls.append(normalise(decoder.feed(piece, t_ns)))
        except ProtocolError as exc:
            trace.error = _error_key(exc)
            break
    else:
        if eof:
            try:
                trace.calls.append(normalise(decoder.feed_eof(stamps[-1] + 1 if stamps else 1)))
            except ProtocolError as exc:
                trace.error = _error_key(exc)
            return trace  # feeding after EOF is a LocalProtocolError, not a retry
    if trace.error is not None:
        # Errors are terminal: the next call raises an equal error.
        try:
            decoder.feed(b"\r\n", 0)
        except ProtocolError as exc:
            trace.again = _error_key(exc)
    return trace


def assert_same(c: Trace, py: Trace) -> None:
    # The error first: a mismatch there explains any mismatch of the events.
    assert c.error == py.error
    assert c.calls == py.calls
    assert c.again == py.again
    if c.again is not None:
        assert c.again == c.error


# --- splitting -----------------------------------------------------------------------


@st.composite
def split(draw: st.DrawFn, data: bytes) -> tuple[list[bytes], list[int]]:
    """Cuts data at random points (empty pieces included) and stamps each
    piece with a strictly increasing time."""
    n = len(data)
    mode = draw(st.sampled_from(["random", "random", "bytes", "whole"]))
    if mode == "whole" or n == 0:
        cuts: list[int] = []
    elif mode == "bytes":
        cuts = list(range(1, n))
    else:
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=12)))
    bounds = [0, *cuts, n]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    start = draw(st.integers(0, 2**40))
    stamps = [start + 1000 * i + draw(st.integers(0, 999)) for i in range(len(pieces))]
    return pieces, stamps


def corrupt(draw: st.DrawFn, data: bytes, max_edits: int = 3) -> bytes:
    """Applies up to max_edits byte flips, inserts and deletions (often none)."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, max_edits))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "set"]))
        at = draw(st.integers(0, len(buf)))
        if kind == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif at < len(buf):
            if kind == "flip":
                buf[at] ^= 1 << draw(st.integers(0, 7))
            elif kind == "set":
                buf[at] = draw(st.sampled_from(b"\r\n \t:;0aF\x00\x80\xff"))
            else:
                del buf[at : at + draw(st.integers(1, 4))]
    return bytes(buf)


# --- HTTP/1.1 responses ----------------------------------------------------------------

TOKEN = st.text(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    min_size=1,
    max_size=12,
).map(str.encode)
FIELD_TEXT = st.binary(max_size=20).map(lambda b: bytes(c for c in b if c not in b"\r\n\x00"))


@st.composite
def eol(draw: st.DrawFn) -> bytes:
    return draw(st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n"]))


@st.composite
def field_lines(draw: st.DrawFn, framing: list[tuple[bytes, bytes]]) -> bytes:
    fields = list(framing)
    for _ in range(draw(st.integers(0, 5))):
        name = draw(
            st.one_of(
                TOKEN,
                st.sampled_from(
                    [b"Content-Type", b"Connection", b"X-Request-Id", b"Server", b"Date"]
                ),
            )
        )
        value = draw(
            st.one_of(
                FIELD_TEXT,
                st.sampled_from(
                    [b"text/event-stream", b"close", b"keep-alive", b"Keep-Alive, Upgrade"]
                ),
            )
        )
        fields.insert(draw(st.integers(0, len(fields))), (name, value))
    out = b""
    for name, value in fields:
        ows = draw(st.sampled_from([b"", b" ", b"  ", b"\t"]))
        out += name + b":" + ows + value + draw(st.sampled_from([b"", b" ", b"\t"])) + draw(eol())
        if draw(st.integers(0, 9)) == 0:  # obs-fold continuation
            out += draw(st.sampled_from([b" ", b"\t"])) + draw(FIELD_TEXT) + draw(eol())
    return out


@st.composite
def chunked_body(draw: st.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 4))):
        data = draw(st.binary(min_size=1, max_size=40))
        size = format(len(data), draw(st.sampled_from(["x", "X"])))
        size = "0" * draw(st.integers(0, 2)) + size
        ext = draw(st.sampled_from([b"", b";a=b", b' ; q="x;y"', b";ext", b" "]))
        out += size.encode() + ext + draw(eol()) + data + draw(eol())
    out += draw(st.sampled_from([b"0", b"000", b"0;end=1"])) + draw(eol())
    for _ in range(draw(st.integers(0, 2))):  # trailer fields
        out += draw(TOKEN) + b": " + draw(FIELD_TEXT) + draw(eol())
    return out + draw(eol())


@st.composite
def http_message(draw: st.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 2))):  # interim responses
        code = draw(st.sampled_from([b"100", b"102", b"103"]))
        out += b"HTTP/1.1 " + code + b" Info" + draw(eol()) + draw(field_lines([])) + draw(eol())
    version = draw(st.sampled_from([b"1.1", b"1.1", b"1.0", b"1.2"]))
    status = draw(
        st.one_of(
            st.sampled_from([b"200", b"200", b"204", b"304", b"404", b"429", b"500", b"999"]),
            st.integers(0, 999).map(lambda s: b"%03d" % s),
        )
    )
    reason = draw(st.sampled_from([b" OK", b" ", b"", b" Caf\xe9 \t!"]))
    kind = draw(st.sampled_from(["length", "chunked", "close", "none"]))
    body_data = draw(st.binary(max_size=60))
    framing: list[tuple[bytes, bytes]] = []
    body = b""
    if kind == "length":
        cl = str(len(body_data)).encode()
        cl = draw(st.sampled_from([cl, cl, cl + b", " + cl, b"0" + cl, b"1" + cl]))
        framing.append((draw(st.sampled_from([b"Content-Length", b"content-length"])), cl))
        body = body_data
    elif kind == "chunked":
        te = draw(st.sampled_from([b"chunked", b"Chunked", b"gzip, chunked", b"chunked, gzip"]))
        framing.append((b"Transfer-Encoding", te))
        if draw(st.booleans()):
            framing.append((b"Content-Length", b"5"))
        body = draw(chunked_body())
    elif kind == "close":
        body = body_data
    head = b"HTTP/" + version + b" " + status + reason + draw(eol())
    return out + head + draw(field_lines(framing)) + draw(eol()) + body


@st.composite
def http_stream(draw: st.DrawFn) -> bytes:
    messages = draw(st.lists(http_message(), min_size=1, max_size=3))
    return corrupt(draw, b"".join(messages)) if draw(st.booleans()) else b"".join(messages)


def h1_normalise(events: list[Any]) -> list[Any]:
    """Joins the BodyData of one call into one record per message: the split
    of body bytes into events is not part of the contract, the bytes and the
    stamp of the piece that brought them are."""
    out: list[Any] = []
    for event in events:
        if isinstance(event, BodyData) and out and isinstance(out[-1], BodyData):
            out[-1] = BodyData(out[-1].data + event.data, event.t_ns)
        else:
            assert isinstance(event, (ResponseHead, BodyData, ResponseComplete)), event
            out.append(event)
    return out


H1_LIMITS = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {},
        optional={
            "max_line": st.integers(1, 64),
            "max_head": st.integers(1, 256),
            "max_headers": st.integers(1, 6),
            "max_chunk_size_digits": st.integers(1, 4),
        },
    ),
)


@SETTINGS
@given(data=st.data())
def test_h1_c_matches_python(h1_impls: tuple[ModuleType, ModuleType], data: st.DataObject) -> None:
    c_mod, py_mod = h1_impls
    stream = data.draw(http_stream(), label="stream")
    pieces, stamps = data.draw(split(stream), label="pieces")
    limits = data.draw(H1_LIMITS, label="limits")
    eof = data.draw(st.booleans(), label="eof")
    c = run(c_mod.H1Decoder(**limits), pieces, stamps, eof, h1_normalise)
    py = run(py_mod.H1Decoder(**limits), pieces, stamps, eof, h1_normalise)
    assert_same(c, py)


@SETTINGS
@given(stream=st.binary(max_size=300), data=st.data())
def test_h1_c_matches_python_on_noise(
    h1_impls: tuple[ModuleType, ModuleType], stream: bytes, data: st.DataObject
) -> None:
    """Unstructured bytes, usually behind a valid start, reach the error paths
    of every state."""
    c_mod, py_mod = h1_impls
    prefix = data.draw(
        st.sampled_from(
            [b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
        )
    )
    pieces, stamps = data.draw(split(prefix + stream))
    eof = data.draw(st.booleans())
    c = run(c_mod.H1Decoder(), pieces, stamps, eof, h1_normalise)
    py = run(py_mod.H1Decoder(), pieces, stamps, eof, h1_normalise)
    assert_same(c, py)


# --- SSE streams -----------------------------------------------------------------------

SSE_TEXT = st.one_of(
    st.text(max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=8),
    st.sampled_from([b"[DONE]", b'{"choices":[]}', b" lead", b"x\x00y", b"\xef\xbb\xbf"]),
)


@st.composite
def sse_line(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            ["data", "data", "data", "event", "id", "retry", "comment", "other", "bare", "blank"]
        )
    )
    sep = draw(st.sampled_from([b": ", b":", b":  "]))
    if kind == "blank":
        return b""
    if kind == "comment":
        return b":" + draw(SSE_TEXT)
    if kind == "bare":  # a name without colon
        return draw(st.sampled_from([b"data", b"event", b"id", b"retry", b"Data"]))
    if kind == "retry":
        value = draw(
            st.one_of(
                st.integers(0, 2**70).map(lambda n: str(n).encode()),
                st.sampled_from([b"", b"12a", b"-1", b" 5", b"+7"]),
            )
        )
        return b"retry" + sep + value
    name = {"data": b"data", "event": b"event", "id": b"id"}.get(kind, b"")
    if kind == "other":
        name = draw(st.sampled_from([b"foo", b"DATA", b"ID", b" data", b"dat"]))
    return name + sep + draw(SSE_TEXT)


@st.composite
def sse_stream(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=200))
    boms = [b"", b"", b"\xef\xbb\xbf", b"\xef\xbb\xbf\xef\xbb\xbf", b"\xef\xbb"]
    out = draw(st.sampled_from(boms))
    line_end = st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"])
    # Blocks of field lines, most with data and closed by a blank line (an
    # event), some without (nothing to dispatch, or cut by the end).
    for lines in draw(st.lists(st.lists(sse_line(), max_size=4), min_size=1, max_size=8)):
        if draw(st.integers(0, 4)):
            lines.insert(draw(st.integers(0, len(lines))), b"data:" + draw(SSE_TEXT))
        for line in lines:
            out += line + draw(line_end)
        if draw(st.integers(0, 3)):
            out += draw(line_end)
    if draw(st.booleans()):
        out += draw(sse_line())  # cut mid-line
    return corrupt(draw, out, max_edits=2) if draw(st.integers(0, 3)) == 0 else out


@SETTINGS
@given(data=st.data())
def test_sse_c_matches_python(
    sse_impls: tuple[ModuleType, ModuleType], data: st.DataObject
) -> None:
    c_mod, py_mod = sse_impls
    stream = data.draw(sse_stream(), label="stream")
    pieces, stamps = data.draw(split(stream), label="pieces")
    max_event = data.draw(st.one_of(st.none(), st.integers(1, 80)), label="max_event")
    kwargs = {} if max_event is None else {"max_event": max_event}
    eof = data.draw(st.booleans(), label="eof")
    c_dec, py_dec = c_mod.SSEDecoder(**kwargs), py_mod.SSEDecoder(**kwargs)
    c = run(c_dec, pieces, stamps, False)
    py = run(py_dec, pieces, stamps, False)
    assert_same(c, py)
    if c.error is None:
        assert (c_dec.retry, c_dec.last_event_id, c_dec.pending) == (
            py_dec.retry,
            py_dec.last_event_id,
            py_dec.pending,
        )
        if eof:
            assert c_dec.feed_eof(1) == py_dec.feed_eof(1) == []


# --- HTTP/2 DATA de-framing ----------------------------------------------------------------


@pytest.fixture(scope="module")
def h2_impls() -> tuple[tuple[ModuleType, ModuleType], tuple[ModuleType, ModuleType]]:
    """(de-framer, response) modules of the core and of the twins."""
    return (
        (wire_module("h2", "c"), wire_module("response", "c")),
        (wire_module("h2", "py"), wire_module("response", "py")),
    )


@SETTINGS
@given(sc=h2_scenario())
def test_h2_c_matches_python(
    h2_impls: tuple[tuple[ModuleType, ModuleType], tuple[ModuleType, ModuleType]],
    sc: dict[str, Any],
) -> None:
    """Feed results, events, pass-through and WINDOW_UPDATE bytes, errors,
    register/unregister answers and the decoders' summaries agree."""
    c, py = h2_impls
    assert run_h2_scenario(*c, sc) == run_h2_scenario(*py, sc)


@SETTINGS
@given(sc=h2_scenario(st.tuples(frame_sequence(), st.binary(max_size=300)).map(b"".join)))
def test_h2_c_matches_python_on_noise(
    h2_impls: tuple[tuple[ModuleType, ModuleType], tuple[ModuleType, ModuleType]],
    sc: dict[str, Any],
) -> None:
    """Unstructured bytes, often behind valid frames, reach every state."""
    c, py = h2_impls
    assert run_h2_scenario(*c, sc) == run_h2_scenario(*py, sc)


# --- SGLang /generate responses (rule R11) -------------------------------------------------

SGLANG_TEXT = st.text(st.sampled_from('ab é世😀"\\\n'), max_size=3)


@st.composite
def sglang_response(draw: st.DrawFn) -> bytes:
    """An SGLang stream (or body) over HTTP/1.1: its events' texts mostly
    grow (cumulative), sometimes stay, shrink or change (R11's failure), and
    some events are broken or errors; often corrupted by byte edits."""
    text, n = "", 0
    payloads: list[bytes] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["grow", "grow", "grow", "same", "rewrite", "none", "bad"]))
        if kind == "bad":
            payloads.append(
                draw(st.sampled_from([b'{"text": "a', b'{"error":{"message":"x"}}', b"{}", b"[]"]))
            )
            continue
        if kind == "grow":
            text += draw(SGLANG_TEXT)
        elif kind == "rewrite":
            text = draw(SGLANG_TEXT)
        n += 1
        doc: dict[str, Any] = {
            "output_ids": [n],
            "meta_info": {"finish_reason": None, "prompt_tokens": 3, "completion_tokens": n},
        }
        if kind != "none":
            doc["text"] = text
        payloads.append(msgspec.json.encode(doc))
    if draw(st.booleans()):
        body = [b"data: " + p + draw(eol()) * 2 for p in payloads]
        body.append(b"data: [DONE]\n\n")
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    else:  # a non-streaming body: one object
        body = [payloads[-1] if payloads else b'{"text":"whole"}']
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    data = b"".join(body)
    message = head + b"content-length: %d\r\n\r\n" % len(data) + data
    return corrupt(draw, message) if draw(st.integers(0, 3)) == 0 else message


def response_run(decoder: Any, pieces: Sequence[bytes], stamps: Sequence[int]) -> Any:
    """The trace of a response decoder, and its summary."""
    trace = run(decoder, pieces, stamps, eof=True)
    return trace, decoder.summary()


@pytest.fixture(scope="module")
def response_impls() -> tuple[ModuleType, ModuleType]:
    return wire_module("response", "c"), wire_module("response", "py")


@SETTINGS
@given(data=st.data())
def test_sglang_response_c_matches_python(
    response_impls: tuple[ModuleType, ModuleType], data: st.DataObject
) -> None:
    """Milestones call by call, the terminal error (R11's TextNotCumulative
    with its text position included) and the summaries agree."""
    c_mod, py_mod = response_impls
    stream = data.draw(sglang_response(), label="stream")
    pieces, stamps = data.draw(split(stream), label="pieces")
    c_trace, c_summary = response_run(c_mod.ResponseDecoder(dialect="sglang"), pieces, stamps)
    py_trace, py_summary = response_run(py_mod.ResponseDecoder(dialect="sglang"), pieces, stamps)
    assert_same(c_trace, py_trace)
    assert c_summary == py_summary


# --- OpenAI chat streams: the channels and the gaps (rule R12) ------------------------------

CHAT_TEXT = st.text(st.sampled_from('ab é😀"\\'), max_size=2)


def _chat(**fields: Any) -> bytes:
    return chat_chunk(response_id="c", created=0, **fields)  # short: fed byte-wise too


@st.composite
def chat_stream(draw: st.DrawFn) -> bytes:
    """A chat stream over HTTP/1.1 whose chunks bear content, reasoning, tool
    calls, nothing (role, empty text, finish), or are broken; sometimes
    corrupted by byte edits."""
    payloads: list[bytes] = [_chat(role="assistant", content="")]
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["content", "content", "reasoning", "tool", "none", "bad"]))
        text = draw(CHAT_TEXT)
        if kind == "content":
            payloads.append(_chat(content=text))
        elif kind == "reasoning":
            payloads.append(_chat(reasoning=text))
        elif kind == "tool":
            index = draw(st.integers(0, 1))
            payloads.append(_chat(tool_calls=[tool_call_fragment(index, arguments=text)]))
        elif kind == "none":
            payloads.append(_chat(finish_reason="stop"))
        else:
            payloads.append(b'{"choices": [')
    events = [sse_event(p, eol=draw(eol())) for p in [*payloads, b"[DONE]"]]
    message = http_response(events, transfer=draw(st.sampled_from(["chunked", "length"])))
    return corrupt(draw, message) if draw(st.integers(0, 4)) == 0 else message


@st.composite
def any_stamps(draw: st.DrawFn, n: int) -> list[int]:
    """Stamps that repeat, go back (a clock map that moved), or jump by up to
    2**45 ns, past the last bucket of the gap histogram."""
    t = draw(st.integers(0, 2**40))
    steps = draw(
        st.lists(
            st.sampled_from([0, 0, 1, 15, 16, 999, 123456, -3, 2**41, 2**45]),
            min_size=1,
            max_size=16,
        )
    )
    stamps = []
    for step in itertools.islice(itertools.cycle(steps), n):  # byte-wise pieces: many
        # CLOCK_MONOTONIC stamps are never negative (the core reads a negative
        # one as "no stamp"): a step back stops at 0
        t = max(0, t + step)
        stamps.append(t)
    return stamps


@SETTINGS
@given(data=st.data())
def test_chat_response_c_matches_python(
    response_impls: tuple[ModuleType, ModuleType], data: st.DataObject
) -> None:
    """Milestones and summaries agree, R12's stamps and gap histogram included,
    for stamps that repeat and go back as well as forward."""
    c_mod, py_mod = response_impls
    stream = data.draw(chat_stream(), label="stream")
    pieces, _ = data.draw(split(stream), label="pieces")
    stamps = data.draw(any_stamps(len(pieces)), label="stamps")
    histogram = data.draw(st.booleans(), label="gap_histogram")
    c_trace, c_summary = response_run(
        c_mod.ResponseDecoder(gap_histogram=histogram), pieces, stamps
    )
    py_trace, py_summary = response_run(
        py_mod.ResponseDecoder(gap_histogram=histogram), pieces, stamps
    )
    assert_same(c_trace, py_trace)
    assert c_summary == py_summary
    gaps = c_summary.gaps
    if gaps is not None:
        assert gaps.count == c_summary.content_events - 1
        counts = [count for _, count in unpack_buckets(gaps.buckets)]
        assert sum(counts) == (gaps.count if histogram else 0)
