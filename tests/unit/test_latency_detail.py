"""A point's latency detail (metrics/latency_detail.py) and its lines
(report/latency_detail.py): TTFOT, TTST and ITL over the official TTFT's
responses, the ITL percentiles from the pooled histograms against the exact
ones, and only the lines that apply.

The records' summaries come from the real decoders, fed event by event
with chosen stamps, so the figures are known exactly."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.metrics.latency_detail import NOTE, gap_distribution, latency_detail
from mlpe_fast.metrics.series import PERCENTILES
from mlpe_fast.report.latency_detail import HEADING, latency_detail_lines
from mlpe_fast.sim.stream import chat_chunk, sse_event, tool_call_fragment
from mlpe_fast.wire.events import NO_RESPONSE, ResponseSummary
from mlpe_fast.wire.gaps import RELATIVE_ERROR
from tests.conftest import wire_module

CONTENT = chat_chunk(content="x")
REASONING = chat_chunk(reasoning="r")
TOOL = chat_chunk(tool_calls=[tool_call_fragment(0, call_id="c", name="f", arguments="{}")])


def streamed(
    stamps: Sequence[int], chunks: Sequence[bytes] | None = None, impl: str = "py", **options: bool
) -> ResponseSummary:
    """A streamed response whose i-th chunk (content unless given) came in a
    read of its own at ``stamps[i]``."""
    decoder = wire_module("response", impl).ResponseDecoder(**options)
    decoder.set_head(200, [(b"content-type", b"text/event-stream")], 0)
    for i, t_ns in enumerate(stamps):
        decoder.feed_body(sse_event(chunks[i] if chunks else CONTENT), t_ns)
    decoder.feed_body(sse_event(b"[DONE]"), stamps[-1])
    decoder.end_body(stamps[-1])
    return decoder.summary()


def record(response: ResponseSummary, t_issue: int = 0, error: str | None = None) -> RequestRecord:
    return RequestRecord(0, "s", t_issue, t_issue, 10**12, response, error_class=error)


def everything(records: Sequence[RequestRecord]) -> np.ndarray:
    return np.array([r.ok for r in records], np.bool_)


@pytest.mark.parametrize("impl", ["c", "py"])
def test_itl_percentiles_are_within_the_stated_resolution_of_the_exact_ones(impl: str) -> None:
    rng = np.random.default_rng(7)
    all_gaps: list[np.ndarray] = []
    summaries = []
    for _ in range(40):
        # log-normal gaps around 20 ms, a few coalesced (0) and tiny (< 32 ns) ones
        gaps = rng.lognormal(np.log(20e6), 0.6, 60).astype(np.int64)
        gaps[rng.random(60) < 0.1] = 0
        gaps[rng.random(60) < 0.05] = rng.integers(1, 32)
        stamps = np.concatenate([[10**9], 10**9 + np.cumsum(gaps)])
        summaries.append(streamed(stamps.tolist(), impl=impl))
        all_gaps.append(gaps)
    exact = np.concatenate(all_gaps)
    itl = gap_distribution([s.gaps for s in summaries])
    assert itl is not None and itl.percentiles is not None
    assert (itl.count, itl.total) == (exact.size, int(exact.sum()))
    assert (itl.min, itl.max, itl.zero) == (
        int(exact.min()),
        int(exact.max()),
        int((exact == 0).sum()),
    )
    assert itl.mean == exact.sum() / exact.size
    for p in PERCENTILES:
        truth = float(np.percentile(exact, p, method="lower"))
        estimate = itl.percentiles[str(float(p))]
        assert abs(estimate - truth) <= RELATIVE_ERROR * truth, (p, estimate, truth)
        if truth < 32:
            assert estimate == truth


def test_a_fixed_gap_reads_as_itself_within_one_bucket() -> None:
    itl = gap_distribution([streamed([i * 5_000_000 for i in range(1, 50)]).gaps])
    assert itl is not None and itl.percentiles is not None
    # every gap is 5 ms: min = max, so the clamp makes every percentile exact
    assert set(itl.percentiles.values()) == {5e6} and itl.zero == 0


def test_without_histograms_the_percentiles_are_not_made_up() -> None:
    with_ = streamed([1, 2000, 5000])
    without = streamed([1, 3000, 3001], gap_histogram=False)
    itl = gap_distribution([with_.gaps, without.gaps])
    assert itl is not None and itl.percentiles is None
    assert (itl.count, itl.total, itl.min, itl.max) == (4, 7999, 1, 3000)  # 1999 3000 2999 1
    lines = latency_detail_lines(latency_detail([record(with_), record(without)], np.ones(2, bool)))
    assert any("n/a (no histogram); mean" in line for line in lines)


def test_the_detail_is_over_the_official_ttft_responses() -> None:
    reasoning_first = streamed([100, 200, 1100, 1200], [REASONING, REASONING, CONTENT, CONTENT])
    tool_only = streamed([300, 700], [TOOL, TOOL])
    content_first = streamed([50, 80])
    one_token = streamed([40])
    failed = streamed([10, 20])
    records = [
        record(reasoning_first, t_issue=10),
        record(tool_only, t_issue=20),
        record(content_first, t_issue=30),
        record(one_token, t_issue=5),
        record(failed, error="IncompleteResponse"),
        record(NO_RESPONSE),  # no first token
    ]
    detail = latency_detail(records, everything(records))
    assert (detail.responses, detail.content_later, detail.without_content) == (4, 2, 1)
    assert detail.ttfot is not None and detail.ttst is not None and detail.itl is not None
    # TTFOT = first content - issue: 1100 - 10, 50 - 30, 40 - 5 (none for the tool call)
    assert sorted([detail.ttfot.min, detail.ttfot.max]) == [20, 1090] and detail.ttfot.count == 3
    # TTST = second - first: 100, 400, 30 (the one-token answer has none)
    assert (detail.ttst.count, detail.ttst.total) == (3, 530)
    assert (detail.itl.count, detail.itl.total) == (3 + 1 + 1, 1100 + 400 + 30)
    measured = np.array([True, False, False, False, False, False])
    assert latency_detail(records, measured).responses == 1
    block = detail.as_summary()
    assert block["note"] == NOTE and block["ttfot_ns"]["min"] == 20
    assert block["itl_ns"]["count"] == 5 and "3.1%" in block["itl_ns"]["resolution"]


def test_only_the_lines_that_apply() -> None:
    assert latency_detail_lines(latency_detail([], np.zeros(0, bool))) == []
    single = [record(streamed([40]))]
    assert latency_detail_lines(latency_detail(single, everything(single))) == []

    plain = [record(streamed([10, 20, 30])) for _ in range(3)]
    lines = latency_detail_lines(latency_detail(plain, everything(plain)))
    assert lines[0] == HEADING
    labels = [line.split("   ")[0].strip() for line in lines[2:]]
    assert labels == ["TTST, first to second token", "ITL, per gap (±3.1%)"]  # no TTFOT, no zeros

    thinking = [record(streamed([10, 20, 20, 40], [REASONING, CONTENT, CONTENT, CONTENT]))]
    lines = latency_detail_lines(latency_detail(thinking, everything(thinking)))
    assert lines[2].startswith("  TTFOT, to the first content token")
    assert any(line.startswith("  1 of 1 responses began with reasoning") for line in lines)
    assert any("ITL gaps of 0 (events that came in one read): 1 of 3 (33.3%)" in x for x in lines)

    tools = [record(streamed([10, 20], [TOOL, TOOL]))]
    lines = latency_detail_lines(latency_detail(tools, everything(tools)))
    assert "n/a (no response had content)" in lines[2]
