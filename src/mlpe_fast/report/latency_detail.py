"""The "latency detail (not MLPerf metrics)" block of the terminal table and
``report.txt`` (:mod:`mlpe_fast.metrics.latency_detail`).

Only the lines that apply: TTFOT when some response began with reasoning or
a tool call (otherwise it equals the TTFT above), TTST when some response
had a second token, ITL when there were gaps, and the count of gaps of 0
when some events shared a read.  Times in ms, as the table above.
"""

from __future__ import annotations

from ..metrics.latency_detail import LatencyDetail
from ..wire.gaps import RELATIVE_ERROR

__all__ = ("HEADING", "latency_detail_lines")

HEADING = "latency detail (not MLPerf metrics)"
_GRID = (50.0, 90.0, 99.0)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def latency_detail_lines(detail: LatencyDetail) -> list[str]:
    """The block's lines (none when nothing applies)."""
    rows: list[tuple[str, ...]] = []
    if detail.content_later:
        label = "TTFOT, to the first content token"
        if detail.ttfot is None:
            rows.append((label, "n/a (no response had content)"))
        else:
            d = detail.ttfot
            rows.append((label, *(_ms(d.percentile(p)) for p in _GRID), f"{d.count:,}"))
    if detail.ttst is not None:
        d = detail.ttst
        label = "TTST, first to second token"
        rows.append((label, *(_ms(d.percentile(p)) for p in _GRID), f"{d.count:,}"))
    itl = detail.itl
    if itl is not None:
        label = f"ITL, per gap (±{RELATIVE_ERROR:.1%})"
        if itl.percentiles is None:
            rows.append((label, f"n/a (no histogram); mean {_ms(itl.mean)}"))
        else:
            values = (_ms(itl.percentiles[str(p)]) for p in _GRID)
            rows.append((label, *values, f"{itl.count:,}"))
    if not rows:
        return []
    header = ("ms", "p50", "p90", "p99", "n")
    full = [header, *(row for row in rows if len(row) == len(header))]
    widths = [max(len(row[c]) for row in full) for c in range(len(header))]
    widths[0] = max(widths[0], *(len(row[0]) for row in rows))
    lines = [HEADING]
    for row in [header, *rows]:
        if len(row) != len(header):
            lines.append(f"  {row[0]:<{widths[0]}}   {row[1]}")
            continue
        cells = [row[0].ljust(widths[0]), *(c.rjust(widths[i]) for i, c in enumerate(row) if i)]
        lines.append("  " + "   ".join(cells))
    if detail.content_later:
        lines.append(
            f"  {detail.content_later:,} of {detail.responses:,} responses began with reasoning "
            "or a tool call: TTFT above is to the first token on any channel (MLPerf's), "
            "TTFOT to the first content token (AIPerf's TTFO, GuideLLM's TTFOT)"
        )
    if itl is not None and itl.zero:
        lines.append(
            f"  ITL gaps of 0 (events that came in one read): {itl.zero:,} of {itl.count:,} "
            f"({itl.zero / itl.count:.1%}); mean gap {_ms(itl.mean)} ms (exact)"
        )
    return lines
