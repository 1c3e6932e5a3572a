"""Cost per SSE event of decoding a streamed response: HTTP/1.1 chunked
framing + SSE + OpenAI delta extraction, for the compiled core, its
pure-Python twin and a reference-style baseline, at four piece sizes; and
what the gap histogram (rule R12 of csrc/mlpe_response.h) adds per event
to the compiled core, with it and without it in the same run.

The input is the issue's worst case for a load generator: 1,000 events of
one character of content each, every event an OpenAI chunk of about 150
bytes of JSON in its own HTTP chunk, then a finish chunk and ``[DONE]``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event

from .baselines import ReferenceStyleDecoder
from .conftest import decoder_module

EVENTS = 1000
PIECE_SIZES = (1, 64, 1500, 65536)


def streamed_response(events: int = EVENTS) -> bytes:
    letters = "abcdefghijklmnopqrstuvwxyz"
    chunks = [chat_chunk(role="assistant", content="")]
    chunks += [chat_chunk(content=letters[i % 26]) for i in range(events)]
    chunks.append(chat_chunk(finish_reason="stop"))
    return http_response([sse_event(c) for c in [*chunks, b"[DONE]"]])


RESPONSE = streamed_response()
# Content events plus role, finish and [DONE]: every event the decoder handles.
ALL_EVENTS = EVENTS + 3


def pieces_of(size: int) -> list[bytes]:
    return [RESPONSE[i : i + size] for i in range(0, len(RESPONSE), size)]


def test_typical_chunk_size() -> None:
    """The input is what the issue describes: about 150 bytes of JSON."""
    assert 140 <= len(chat_chunk(content="a")) <= 170


@pytest.mark.parametrize("piece", PIECE_SIZES, ids=lambda n: f"piece{n}")
@pytest.mark.parametrize("impl", ["c", "py"])
def test_response_decoder(bench: Callable[..., Any], impl: str, piece: int) -> None:
    mod = decoder_module("response", impl)
    pieces = pieces_of(piece)

    def decode() -> Any:
        decoder = mod.ResponseDecoder()
        feed = decoder.feed
        for t, p in enumerate(pieces):
            feed(p, t)
        return decoder.summary()

    summary = bench(decode, events=ALL_EVENTS, slow=impl == "py" and piece < 1500)
    assert summary.complete and summary.content_events == EVENTS


@pytest.mark.parametrize("piece", PIECE_SIZES, ids=lambda n: f"piece{n}")
def test_reference_style_baseline(bench: Callable[..., Any], piece: int) -> None:
    pieces = pieces_of(piece)

    def decode() -> ReferenceStyleDecoder:
        decoder = ReferenceStyleDecoder()
        for p in pieces:
            decoder.feed(p)
        return decoder

    decoder = bench(decode, events=ALL_EVENTS, slow=piece < 1500)
    assert decoder.complete and len(decoder.content) == EVENTS


@pytest.mark.parametrize("piece", (1500, 65536), ids=lambda n: f"piece{n}")
def test_gap_histogram_cost(piece: int) -> None:
    """The compiled decoder with and without the gap histogram, alternately
    (so that what else the machine does falls on both alike), ns per event
    at the median of 300 decodes each, printed (run with ``-s``).  Each read
    is a millisecond and a few ns after the one before, so the gaps spread
    over the buckets of an octave as a real stream's do; the events of one
    read share its stamp (gaps of 0)."""
    mod = decoder_module("response", "c")
    pieces = pieces_of(piece)

    def decode(histogram: bool) -> Any:
        decoder = mod.ResponseDecoder(gap_histogram=histogram)
        feed = decoder.feed
        for t, p in enumerate(pieces):
            feed(p, t * 1_000_037)
        return decoder.summary()

    took: dict[bool, list[int]] = {True: [], False: []}
    for round_ in range(300):
        for histogram in (True, False) if round_ % 2 else (False, True):
            start = time.perf_counter_ns()
            summary = decode(histogram)
            took[histogram].append(time.perf_counter_ns() - start)
            assert summary.gaps.count == EVENTS - 1
            assert (summary.gaps.buckets != b"") == histogram
    on, off = (statistics.median(took[h]) / ALL_EVENTS for h in (True, False))
    print(
        f"\ngap histogram, {piece}-byte reads: {on:.1f} ns per event with it, {off:.1f} without"
        f" ({on / off:.3f}x, {on - off:+.1f} ns)"
    )
