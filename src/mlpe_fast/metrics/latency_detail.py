"""Latency detail beside the official TTFT and TPOT (issue 22): the time to
the first *content* token, the time to the second token and the
inter-token latency as a distribution.  None of them is an MLPerf metric:
the rules' TTFT is to the first token on any channel and their TPOT a
per-response mean (spec §1.1-1.2), and both stay exactly as they are.

Over the responses the official TTFT is taken over (completed, streamed,
with a first token; ``metrics/stats.py``), from the stamps each record
carries (rule R12 of ``csrc/mlpe_response.h``):

* **TTFOT**, time to first output token = ``t_first_content - t_issue``:
  to the first event with non-empty ``content``, after any reasoning or
  tool call -- AIPerf's "time to first output token" (TTFO) and GuideLLM's
  TTFOT.  The official TTFT is to the first token on *any* channel, which
  is what AIPerf calls TTFT too; for a response that answers in content
  first the two are equal.  Responses with no content at all have none.
* **TTST**, time to second token = ``t_second - t_first``: from the first
  content-bearing event to the second, as AIPerf defines it ("the time gap
  between the first and second chunk"; not from the request: that would be
  TTFT plus this).
* **ITL**, inter-token latency = every gap between consecutive
  content-bearing events of every response, pooled (vLLM's ``itl``,
  AIPerf's inter-chunk latency; AIPerf's own "ITL" is TPOT's formula).
  Count, sum, minimum, maximum and mean are exact; the percentiles come
  from the per-response log-linear histograms summed (``wire/gaps.py``):
  the value at a rank is its bucket's midpoint, within 1/32 (3.1 %) of the
  exact ``method="lower"`` percentile, exact below 32 ns, and never outside
  the exact minimum and maximum.  Gaps of 0 -- events that came in one
  network read and share its stamp -- are real observations of the client
  and stay in the distribution; they are also counted apart, so a stream
  that coalesces tokens shows as such.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from ..engine.record import RequestRecord
from ..engine.record_columns import NONE, RecordColumns, as_columns
from ..wire.gaps import BUCKETS, RELATIVE_ERROR, bucket_midpoint
from .order_stats import Sample
from .series import PERCENTILES
from .stats import Distribution, distribution

__all__ = ("GapDistribution", "LatencyDetail", "gap_distribution", "latency_detail")

NOTE = "not MLPerf metrics: mlpe-fast's own detail beside the official TTFT and TPOT"
RESOLUTION = (
    f"ITL percentiles from log-linear histograms: within {RELATIVE_ERROR:.1%} of the exact "
    "value (exact below 32 ns); count, min, max and mean exact"
)

_MIDPOINTS = np.array([bucket_midpoint(i) for i in range(BUCKETS)])


def _key(p: float) -> str:
    return str(float(p))  # the reference's percentile keys: "99.9", "90.0"


class GapDistribution(msgspec.Struct, frozen=True):
    """The pooled gaps between content-bearing events, in ns.

    ``zero``: gaps of 0 (events that shared a read); ``percentiles`` maps
    ``str(float(p))`` to the histogram's value at ``p`` on the
    :data:`PERCENTILES` grid (module docstring), None when a response kept
    no histogram (a decoder made with ``gap_histogram=False``).
    """

    count: int
    zero: int
    total: int
    min: int
    max: int
    mean: float
    percentiles: dict[str, float] | None

    def percentile(self, p: float) -> float | None:
        return None if self.percentiles is None else self.percentiles[_key(p)]


class LatencyDetail(msgspec.Struct, frozen=True):
    """A point's latency detail (module docstring).

    ``responses``: the responses of the official TTFT; ``content_later``:
    those whose first token was reasoning or a tool call, so that their
    TTFOT is later than their TTFT (the ones without content included);
    ``without_content``: those with no content at all.
    """

    responses: int
    content_later: int
    without_content: int
    ttfot: Distribution | None
    ttst: Distribution | None
    itl: GapDistribution | None

    def as_summary(self) -> dict[str, Any]:
        """The ``mlpe_fast.latency_detail`` block of ``result_summary.json``."""
        return {
            "note": NOTE,
            "responses": self.responses,
            "content_later": self.content_later,
            "without_content": self.without_content,
            "ttfot_ns": _block(self.ttfot),
            "ttst_ns": _block(self.ttst),
            "itl_ns": None
            if self.itl is None
            else {
                "count": self.itl.count,
                "zero_gaps": self.itl.zero,
                "total": self.itl.total,
                "min": self.itl.min,
                "max": self.itl.max,
                "avg": self.itl.mean,
                "percentiles": self.itl.percentiles,
                "resolution": RESOLUTION,
            },
        }


def _block(dist: Distribution | None) -> dict[str, Any] | None:
    if dist is None:
        return None
    return {  # ns: integers, as the official blocks keep them
        "count": dist.count,
        "total": int(dist.total),
        "min": int(dist.min),
        "max": int(dist.max),
        "avg": dist.mean,
        "std_dev": dist.std,
        "percentiles": dist.percentiles,
    }


def latency_detail(
    records: Sequence[RequestRecord], measured: npt.NDArray[np.bool_]
) -> LatencyDetail:
    """The detail of the records where ``measured`` (the point's tracked,
    completed ones: ``PointSeries.tracked_ok``) that were streamed and had
    a first token, as the official TTFT's."""
    # A block of rows at a time: the counts and gap totals add up, and the
    # two series whose percentiles are shown are read again a block at a
    # time when asked, never whole (issue 23).
    columns = as_columns(records)
    measured = np.asarray(measured, dtype=np.bool_)
    responses = content_later = without_content = 0
    gaps_count = gaps_zero = gaps_total = 0
    gaps_low: int | None = None
    gaps_high: int | None = None
    with_gaps = np.zeros(len(columns), np.bool_)
    for block in columns.blocks():
        t_first = block.column("t_first")
        chosen = measured[block.start : block.stop] & (t_first != NONE)
        chosen &= block.column("events") > 0
        responses += int(np.count_nonzero(chosen))
        content = block.column("t_first_content")
        has_content = content != NONE
        missing = int(np.count_nonzero(chosen & ~has_content))
        without_content += missing
        content_later += missing + int(
            np.count_nonzero(chosen & has_content & (content != t_first))
        )
        gapped = chosen & block.flag("gaps")
        with_gaps[block.start : block.stop] = gapped
        if gapped.any():
            gaps_count += int(block.column("gaps_count")[gapped].sum(dtype=np.int64))
            gaps_zero += int(block.column("gaps_zero")[gapped].sum(dtype=np.int64))
            gaps_total += int(block.column("gaps_sum_ns")[gapped].sum())
            low = int(block.column("gaps_min_ns")[gapped].min())
            high = int(block.column("gaps_max_ns")[gapped].max())
            gaps_low = low if gaps_low is None else min(gaps_low, low)
            gaps_high = high if gaps_high is None else max(gaps_high, high)
    ttfot = Sample(lambda: _spans(columns, measured, "t_issue", "t_first_content"), np.int64)
    ttst = Sample(lambda: _spans(columns, measured, "t_first", "t_second"), np.int64)
    gaps = None
    if gaps_low is not None and gaps_high is not None:
        gaps = _pooled(
            count=gaps_count,
            zero=gaps_zero,
            total=gaps_total,
            low=gaps_low,
            high=gaps_high,
            histogram=columns.gaps_histogram(with_gaps),
        )
    return LatencyDetail(
        responses=responses,
        content_later=content_later,
        without_content=without_content,
        ttfot=distribution(ttfot),
        ttst=distribution(ttst),
        itl=gaps,
    )


def _spans(
    columns: RecordColumns, measured: npt.NDArray[np.bool_], start: str, end: str
) -> Iterator[npt.NDArray[np.int64]]:
    """Per block, ``end - start`` of the chosen records (:func:`latency_detail`)
    that have both stamps."""
    for block in columns.blocks():
        t_first = block.column("t_first")
        chosen = measured[block.start : block.stop] & (t_first != NONE)
        chosen &= block.column("events") > 0
        begin, finish = block.column(start), block.column(end)
        chosen &= (begin != NONE) & (finish != NONE)
        yield finish[chosen] - begin[chosen]


def gap_distribution(gaps: Sequence[Any]) -> GapDistribution | None:
    """Pools responses' :class:`~mlpe_fast.wire.events.TokenGaps` (None
    without a gap)."""
    if not gaps:
        return None
    return _pooled(
        count=sum(g.count for g in gaps),
        zero=sum(g.zero for g in gaps),
        total=sum(g.sum_ns for g in gaps),
        low=min(g.min_ns for g in gaps),
        high=max(g.max_ns for g in gaps),
        histogram=_histogram(b"".join(g.buckets for g in gaps)),
    )


def _histogram(buckets: bytes) -> npt.NDArray[np.int64]:
    """Histograms' buckets joined (``(index, count)`` pairs, ``wire/gaps.py``),
    summed bucket by bucket."""
    pairs = np.frombuffer(buckets, dtype="<u4").reshape(-1, 2)
    return np.bincount(pairs[:, 0], weights=pairs[:, 1], minlength=BUCKETS).astype(np.int64)


def _pooled(
    *, count: int, zero: int, total: int, low: int, high: int, histogram: npt.NDArray[np.int64]
) -> GapDistribution:
    """The pooled gaps from their exact totals and their histograms summed
    (:data:`~..wire.gaps.BUCKETS` counts; the records' own, summed a block
    of rows at a time by ``RecordColumns.gaps_histogram``)."""
    percentiles = None
    if int(histogram.sum()) == count:
        percentiles = _percentiles(np.cumsum(histogram.astype(np.int64)), low, high)
    return GapDistribution(
        count=count,
        zero=zero,
        total=total,
        min=low,
        max=high,
        mean=total / count,
        percentiles=percentiles,
    )


def _percentiles(cumulative: npt.NDArray[np.int64], low: int, high: int) -> dict[str, float]:
    """The value at each grid percentile: the rank ``method="lower"`` takes
    (``floor((n - 1) * (p / 100))``, numpy's own arithmetic), read as its
    bucket's midpoint (the last bucket, open-ended, as the maximum), kept
    within [low, high]."""
    n = int(cumulative[-1])
    out = {}
    for p in PERCENTILES:
        rank = math.floor((n - 1) * (p / 100))
        bucket = int(np.searchsorted(cumulative, rank, side="right"))
        value = high if bucket == BUCKETS - 1 else _MIDPOINTS[bucket]
        out[_key(p)] = float(min(max(value, low), high))
    return out
