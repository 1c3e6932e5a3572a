"""Goodput: how many requests meet a set of latency bounds (an SLO), per
point and along a curve (issue 22).  Not an MLPerf metric: the rules gate
on TTFT p90 and TPOT p90 over all queries, not on a share of good ones.

The definition is the one ``vllm bench serve --goodput`` and AIPerf's
``--goodput`` share, made stricter where they are loose:

* the bounds are any of ``ttft``, ``tpot`` and ``e2el``, in milliseconds,
  each an upper bound met with equality (``ttft:500`` is TTFT <= 500 ms);
* a request is **good** when it completed and meets every bound given.
  Its TTFT, TPOT and latency are the very values of the point's
  distributions (``metrics/stats.py``; spec §1.2): TTFT to the first
  content-bearing event, TPOT over the tokens after it, latency to the
  end of the answer.  A request without the value a bound reads (no first
  token; a one-token answer has no TPOT) does not meet that bound -- vLLM
  counts a one-token answer's TPOT as 0, which lets it pass a TPOT bound
  it was never measured against;
* a failed request is never good, and it counts: the **attainment** is
  good / issued, the share of the point's queries that met the SLO (vLLM
  and AIPerf divide by completed requests, so a point that fails half its
  requests can show 100 %);
* **goodput** is good requests per second of the point's window, and
  **good output tokens/s** the output tokens of good requests over the
  same window (the system tokens/s the SLO lets through);
* a point that was not streamed (a curve's Offline point, by default)
  measures no TTFT and no TPOT at all: a bound on either is **not
  measured** there, and says so, rather than counting every request as
  missing it (0 %, as if the endpoint had been too slow).

Along a curve, the best point under the SLO is the one with the highest
goodput (:func:`best_under_slo`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from ..config.slo import SLO_NAMES, Slo
from ..engine import record_columns
from .stats import PointStats
from .tokens import CountColumn

__all__ = ("Goodput", "best_under_slo", "goodput_of")


class Goodput(msgspec.Struct, frozen=True, kw_only=True):
    """One point's goodput (module docstring).

    ``met``: requests meeting each bound alone, by metric, so a user sees
    which bound the point misses.  ``unmeasured``: the bounds on metrics
    the point has no values of (not streamed: TTFT, TPOT); with any, no
    request is counted good or not (``good`` None).
    """

    slo: Slo
    issued: int
    good: int | None
    attainment_pct: float | None
    goodput_rps: float | None
    good_output_tps: float | None
    met: dict[str, int]
    unmeasured: tuple[str, ...] = ()

    def as_summary(self) -> dict[str, Any]:
        """The ``mlpe_fast.goodput`` block of ``result_summary.json``."""
        block = {
            "note": "not an MLPerf metric",
            "slo_ms": self.slo.bounds(),
            "issued": self.issued,
            "good": self.good,
            "attainment_pct": self.attainment_pct,
            "goodput_rps": self.goodput_rps,
            "good_output_tps": self.good_output_tps,
            "met": self.met,
        }
        if self.unmeasured:
            block["unmeasured"] = {"metrics": list(self.unmeasured), "why": self.why_unmeasured()}
        return block

    def why_unmeasured(self) -> str:
        """``not streamed: no TTFT, TPOT``."""
        return "not streamed: no " + ", ".join(SLO_NAMES[m] for m in self.unmeasured)

    def line(self) -> str:
        """The table's and report's line."""
        if self.unmeasured:
            return (
                f"goodput ({self.slo.text()}; not an MLPerf metric): not measured "
                f"({self.why_unmeasured()}; --streaming on measures them)\n"
            )
        if self.attainment_pct is None or self.good is None:
            return f"goodput ({self.slo.text()}; not an MLPerf metric): no request issued\n"
        rate = "" if self.goodput_rps is None else f", {self.goodput_rps:,.2f} good requests/s"
        tokens = "" if self.good_output_tps is None else f", {self.good_output_tps:,.1f} tok/s"
        missed = [
            f"{SLO_NAMES[m]} {self.issued - n:,}" for m, n in self.met.items() if n < self.issued
        ]
        misses = f" (missed: {', '.join(missed)})" if missed and self.good < self.issued else ""
        return (
            f"goodput ({self.slo.text()}; not an MLPerf metric): {self.good:,} of "
            f"{self.issued:,} requests good = {self.attainment_pct:.1f} %{rate}{tokens}{misses}\n"
        )


def goodput_of(
    stats: PointStats, osl: CountColumn | None, slo: Slo, *, streamed: bool = True
) -> Goodput:
    """The goodput of a point from its figures (``stats.raw``: the
    per-record TTFT, TPOT and latency of the point's window) and its
    per-record output token counts ``osl`` (-1: not counted; None: no
    tokenizer); ``streamed`` False: the point has no TTFT or TPOT, and a
    bound on either is not measured (module docstring)."""
    unmeasured = () if streamed else tuple(m for m in ("ttft", "tpot") if m in slo.bounds())
    if unmeasured:
        return Goodput(
            slo=slo,
            issued=stats.issued,
            good=None,
            attainment_pct=None,
            goodput_rps=None,
            good_output_tps=None,
            met={},
            unmeasured=unmeasured,
        )
    raw = stats.raw
    per_record = {
        "ttft": raw.ttft_per_record,
        "tpot": raw.tpot_per_record,
        "e2el": raw.latency_per_record,
    }
    bounds = slo.bounds()
    met = dict.fromkeys(bounds, 0)
    n_good = good_tokens = 0
    rows = len(raw.tracked_ok)
    # A block of records at a time: the per-record samples may be in spill
    # files (a point of more than BLOCK_ROWS records, issue 23).
    step = record_columns.BLOCK_ROWS  # the per-record samples may be spilled
    for lo in range(0, rows, step):
        part = slice(lo, min(rows, lo + step))
        window = raw.tracked_ok[part]
        good = window.copy()
        for metric, bound in bounds.items():
            # NaN (no value) compares False: it does not meet the bound
            meets = window & (per_record[metric][part] <= bound * 1e6)
            met[metric] += int(np.count_nonzero(meets))
            good &= meets
        n_good += int(np.count_nonzero(good))
        if osl is not None:
            counted = osl[part][good]
            good_tokens += int(counted[counted >= 0].sum())
    issued = stats.issued
    seconds = stats.duration_ns / 1e9
    good_tps = None
    if osl is not None and seconds > 0:
        good_tps = float(good_tokens) / seconds
    return Goodput(
        slo=slo,
        issued=issued,
        good=n_good,
        attainment_pct=None if issued == 0 else 100.0 * n_good / issued,
        goodput_rps=None if seconds <= 0 else n_good / seconds,
        good_output_tps=good_tps,
        met=met,
    )


def best_under_slo(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The curve row with the highest goodput (rows carry ``goodput``, the
    summary block); None when no row has one above 0."""
    best: Mapping[str, Any] | None = None
    best_rate = 0.0
    for row in rows:
        block = row.get("goodput")
        rate = block.get("goodput_rps") if isinstance(block, Mapping) else None
        if isinstance(rate, (int, float)) and rate > best_rate:
            best, best_rate = row, float(rate)
    return best
