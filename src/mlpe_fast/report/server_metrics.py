"""The server's metrics of each point of a curve, drawn in its HTML report:
running and waiting requests against time, one small chart per point,
from the point's ``server_metrics.jsonl`` (``server_metrics/scraper.py``).

Time runs from the point's first scrape, in seconds; a failed scrape is a
gap in the lines.  A point without the file (not offered, ``off``, or
measured before scraping existed) has no chart.  Our own SVG, as the
Pareto charts (``pareto.py``): the page opens offline.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ("SERIES_DRAWN", "read_series", "server_metrics_section")

#: What each chart draws, and in which colour.
SERIES_DRAWN = (("running", "#1e88e5"), ("waiting", "#fb8c00"))
_FILE = "server_metrics.jsonl"
_W, _H, _PAD = 420.0, 160.0, 34.0


def read_series(folder: Path) -> list[dict[str, Any]]:
    """The scrapes of a point's folder (none when it has no file; a line
    that is not JSON is left out)."""
    path = folder / _FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("t_ns"), int):
            rows.append(row)
    return rows


def _chart(label: str, rows: Sequence[dict[str, Any]]) -> str:
    e = html.escape
    t0 = rows[0]["t_ns"]
    span = max(1e-9, (rows[-1]["t_ns"] - t0) / 1e9)
    top = max(
        [1.0]
        + [
            float(r["values"][name])
            for r in rows
            for name, _ in SERIES_DRAWN
            if isinstance(r.get("values"), dict) and name in r["values"]
        ]
    )

    def x(t_ns: int) -> float:
        return float(_PAD + (t_ns - t0) / 1e9 / span * (_W - 2 * _PAD))

    def y(value: float) -> float:
        return _H - _PAD + 10 - value / top * (_H - 2 * _PAD)

    parts = [
        f'<line x1="{_PAD}" y1="{y(0):.1f}" x2="{_W - _PAD}" y2="{y(0):.1f}" stroke="#999"/>',
        f'<line x1="{_PAD}" y1="{y(0):.1f}" x2="{_PAD}" y2="{y(top):.1f}" stroke="#999"/>',
        f'<text x="{_PAD - 4}" y="{y(top) + 4:.1f}" text-anchor="end" font-size="10">'
        f"{top:g}</text>",
        f'<text x="{_PAD - 4}" y="{y(0) + 4:.1f}" text-anchor="end" font-size="10">0</text>',
        f'<text x="{_W - _PAD}" y="{_H - 6}" text-anchor="end" font-size="10">{span:,.1f} s</text>',
    ]
    legend = []
    for name, colour in SERIES_DRAWN:
        runs: list[list[str]] = [[]]
        for row in rows:
            values = row.get("values")
            if not isinstance(values, dict) or name not in values:
                if runs[-1]:
                    runs.append([])  # a failed scrape: a gap
                continue
            runs[-1].append(f"{x(row['t_ns']):.1f},{y(float(values[name])):.1f}")
        drawn = [run for run in runs if run]
        for run in drawn:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
                f'points="{" ".join(run)}"/>'
            )
        if drawn:
            legend.append(f'<span style="color:{colour}">{e(name)}</span>')
    failed = sum(1 for r in rows if "error" in r)
    note = f", {failed} failed scrapes" if failed else ""
    return (
        f'<figure class="server-metrics"><figcaption>{e(label)}: '
        f"{' / '.join(legend) or 'no known series'} requests over time ({len(rows)} scrapes"
        f"{note})</figcaption>"
        f'<svg viewBox="0 0 {_W:.0f} {_H:.0f}" width="{_W:.0f}" height="{_H:.0f}" '
        f'role="img">{"".join(parts)}</svg></figure>'
    )


def server_metrics_section(points: Sequence[tuple[str, Path]]) -> str:
    """The report's section: a chart for each (label, folder) whose folder
    holds scrapes; empty when none does."""
    charts = [_chart(label, rows) for label, folder in points if (rows := read_series(folder))]
    if not charts:
        return ""
    return (
        '<section id="server-metrics"><h2>Server metrics during each point</h2>'
        + "".join(charts)
        + "</section>"
    )
