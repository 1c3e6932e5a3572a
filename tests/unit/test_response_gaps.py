"""Rule R12 of csrc/mlpe_response.h in both decoders: the first content
token beside the first token on any channel, the second token, and the gaps
between content-bearing events with their fixed-size histogram; and the
histogram's bucket layout (mlpe_fast.wire.gaps).

Each response is fed read by read, every read a list of chunks with its own
stamp, so the expected stamps and gaps are known exactly.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event, tool_call_fragment
from mlpe_fast.wire import gaps
from mlpe_fast.wire.events import ResponseSummary
from mlpe_fast.wire.gaps import bucket_of, unpack_buckets
from tests.conftest import IMPLS, wire_module

HEAD = http_response([], transfer="close")


def decode(
    response: ModuleType, reads: list[tuple[int, list[bytes]]], **options: Any
) -> ResponseSummary:
    """Feeds the head at stamp 0, each (stamp, chunks) as one read, then
    ``[DONE]`` and the end of the connection one ns after the last read."""
    decoder = response.ResponseDecoder(**options)
    decoder.feed(HEAD, 0)
    last = 0
    for t_ns, chunks in reads:
        decoder.feed(b"".join(sse_event(c) for c in chunks), t_ns)
        last = t_ns
    decoder.feed(sse_event(b"[DONE]"), last + 1)
    decoder.feed_eof(last + 1)
    summary = decoder.summary()
    assert summary.ok
    return summary


def buckets(summary: ResponseSummary) -> dict[int, int]:
    assert summary.gaps is not None
    return dict(unpack_buckets(summary.gaps.buckets))


def content(text: str) -> bytes:
    return chat_chunk(content=text)


def test_events_in_one_read_share_its_stamp_and_give_zero_gaps(response: ModuleType) -> None:
    s = decode(response, [(5000, [chat_chunk(role="assistant", content=""), *map(content, "abc")])])
    assert s.t_first == s.t_first_content == s.t_second == 5000
    assert s.gaps is not None
    assert (s.gaps.count, s.gaps.zero, s.gaps.sum_ns, s.gaps.min_ns, s.gaps.max_ns) == (
        2,
        2,
        0,
        0,
        0,
    )
    assert buckets(s) == {0: 2}


def test_events_across_reads(response: ModuleType) -> None:
    reads = [(1000, [content("a")]), (3000, [content("b"), content("c")]), (3500, [content("d")])]
    s = decode(response, reads)
    assert (s.t_first, s.t_first_content, s.t_second) == (1000, 1000, 3000)
    assert s.gaps is not None
    assert (s.gaps.count, s.gaps.zero, s.gaps.sum_ns) == (3, 1, 2500)
    assert (s.gaps.min_ns, s.gaps.max_ns) == (0, 2000)
    assert buckets(s) == {0: 1, bucket_of(2000): 1, bucket_of(500): 1}
    assert s.content_events == 4 and s.gaps.count == s.content_events - 1


def test_reasoning_then_content(response: ModuleType) -> None:
    reads = [
        (100, [chat_chunk(role="assistant")]),
        (1000, [chat_chunk(reasoning="think")]),
        (2000, [chat_chunk(reasoning="ing")]),
        (9000, [content("answer")]),
    ]
    s = decode(response, reads)
    assert s.t_first == 1000  # the official first token: any channel (R3)
    assert s.t_second == 2000
    assert s.t_first_content == 9000  # the first content token (R12)
    assert s.gaps is not None and (s.gaps.count, s.gaps.sum_ns) == (2, 8000)


def test_tool_calls_bear_tokens_but_no_content(response: ModuleType) -> None:
    call = [tool_call_fragment(0, call_id="c1", name="get", arguments="")]
    reads = [
        (1000, [chat_chunk(tool_calls=call)]),
        (1500, [chat_chunk(tool_calls=[tool_call_fragment(0, arguments='{"a": 1}')])]),
        (1700, [chat_chunk(tool_calls=[tool_call_fragment(0, arguments="")])]),  # bears nothing
    ]
    s = decode(response, reads)
    assert (s.t_first, s.t_second, s.t_first_content) == (1000, 1500, None)
    assert s.gaps is not None and (s.gaps.count, s.gaps.max_ns) == (1, 500)
    s = decode(response, [*reads, (4000, [content("done")])])
    assert s.t_first_content == 4000
    assert s.gaps is not None and s.gaps.count == 2 and s.gaps.max_ns == 2500


def test_a_single_token_has_no_second_token_and_no_gaps(response: ModuleType) -> None:
    s = decode(
        response, [(1000, [chat_chunk(role="assistant", content="")]), (2000, [content("x")])]
    )
    assert (s.t_first, s.t_first_content, s.t_second, s.gaps) == (2000, 2000, None, None)


def test_a_stamp_that_goes_back_is_a_zero_gap_from_the_latest(response: ModuleType) -> None:
    reads = [(1000, [content("a")]), (900, [content("b")]), (1300, [content("c")])]
    s = decode(response, reads)
    assert s.gaps is not None
    # 900 is before 1000: a gap of 0; the next gap runs from 1000, the latest
    assert (s.gaps.count, s.gaps.zero, s.gaps.sum_ns, s.gaps.max_ns) == (2, 1, 300, 300)


def test_without_the_histogram_the_exact_figures_stay(response: ModuleType) -> None:
    reads = [(1000, [content("a")]), (3000, [content("b")]), (3001, [content("c")])]
    s = decode(response, reads, gap_histogram=False)
    assert s.gaps is not None
    assert (s.gaps.count, s.gaps.sum_ns, s.gaps.min_ns, s.gaps.max_ns) == (2, 2001, 1, 2000)
    assert s.gaps.buckets == b""


def test_a_non_streaming_answer_is_one_event(response: ModuleType) -> None:
    body = (
        b'{"id":"c","object":"chat.completion","choices":[{"index":0,"message":'
        b'{"role":"assistant","content":"Hi","reasoning_content":"hm"},"finish_reason":"stop"}]}'
    )
    decoder = response.ResponseDecoder()
    decoder.feed(http_response([body], content_type=b"application/json", transfer="length"), 7)
    s = decoder.summary()
    assert (s.t_first, s.t_first_content, s.t_second, s.gaps) == (7, 7, None, None)


def test_sglang_text_bears_content_when_it_grows(response: ModuleType) -> None:
    def event(text: str) -> bytes:
        return b'{"text": "%s", "meta_info": {"finish_reason": null}}' % text.encode()

    reads = [(10, [event("")]), (20, [event("a")]), (30, [event("a")]), (45, [event("ab")])]
    s = decode(response, reads, dialect="sglang")
    assert (s.t_first, s.t_first_content, s.t_second) == (20, 20, 45)
    assert s.gaps is not None and (s.gaps.count, s.gaps.sum_ns) == (1, 25)


# -- the bucket layout -----------------------------------------------------------------

#: Gaps at every edge of the layout: exact ones, the octaves' ends, the
#: last bucket's start and beyond it.
EDGES = sorted(
    {
        *range(0, 40),
        *(v for m in range(4, 45) for v in ((1 << m) - 1, 1 << m, (1 << m) + 1, 3 << (m - 1))),
        (1 << 40) - 1,
        1 << 40,
        (1 << 50) + 12345,
    }
)


@pytest.mark.parametrize("impl_name", IMPLS)
def test_each_decoder_buckets_each_edge_gap_as_the_layout_says(impl_name: str) -> None:
    response = wire_module("response", impl_name)
    for gap in EDGES:
        s = decode(response, [(1, [content("a")]), (1 + gap, [content("b")])])
        assert s.gaps is not None and s.gaps.max_ns == gap
        assert buckets(s) == {bucket_of(gap): 1}, gap


def test_the_layout_covers_every_gap_once_and_in_order() -> None:
    assert gaps.BUCKETS == 592
    previous_upper = 0
    for index in range(gaps.BUCKETS):
        lower, upper = gaps.bucket_lower(index), gaps.bucket_upper(index)
        assert lower == previous_upper, index  # no hole, no overlap
        assert bucket_of(lower) == index and bucket_of(upper - 1) == index
        width = upper - lower
        assert width == 1 or width * gaps.SUB <= lower  # at most 1/16 of its gaps
        mid = gaps.bucket_midpoint(index)
        assert lower <= mid <= upper - 1
        assert max(mid - lower, upper - 1 - mid) <= gaps.RELATIVE_ERROR * lower
        previous_upper = upper
    assert previous_upper == 1 << gaps.MAX_LOG2
    assert bucket_of(1 << 62) == gaps.BUCKETS - 1
    assert [bucket_of(v) for v in range(16)] == list(range(16))


def test_packed_buckets_round_trip() -> None:
    pairs = [(0, 3), (17, 1), (591, 2**32 - 1)]
    packed = gaps.pack_buckets(pairs)
    assert len(packed) == 24 and packed[:8] == b"\x00\x00\x00\x00\x03\x00\x00\x00"
    assert list(gaps.unpack_buckets(packed)) == pairs
