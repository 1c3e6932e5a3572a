"""The server's metrics of each point of a curve, drawn in its HTML report:
running and waiting requests against time, one small chart per point,
from the point's ``server_metrics.jsonl`` (``server_metrics/scraper.py``).
A point of several replicas' pages draws a series of each for every
replica (the lines' ``endpoint``): a colour per replica, running solid and
waiting dashed.

Time runs from the point's first scrape, in seconds; a failed scrape is a
gap in the lines.  A point without the file (not offered, ``off``, or
measured before scraping existed) has no chart.  Our own SVG, as the
Pareto charts (``pareto.py``): the page opens offline.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ("REPLICA_COLOURS", "SERIES_DRAWN", "read_series", "server_metrics_section")

#: What each chart draws, and in which colour.
SERIES_DRAWN = (("running", "#1e88e5"), ("waiting", "#fb8c00"))
#: Several replicas' colours, by their order (then again); waiting is dashed.
REPLICA_COLOURS = ("#1e88e5", "#e53935", "#43a047", "#8e24aa", "#fb8c00", "#00897b")
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


def _replicas(rows: Sequence[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The rows by the replica whose page they are of (``endpoint``; a line
    without one, written before several pages were read, is endpoint 0)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        endpoint = row.get("endpoint", 0)
        groups.setdefault(endpoint if isinstance(endpoint, int) else 0, []).append(row)
    return dict(sorted(groups.items()))


def _chart(label: str, rows: Sequence[dict[str, Any]]) -> str:
    e = html.escape
    t0 = min(r["t_ns"] for r in rows)
    span = max(1e-9, (max(r["t_ns"] for r in rows) - t0) / 1e9)
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
    replicas = _replicas(rows)
    several = len(replicas) > 1
    legend = []
    for k, (endpoint, own) in enumerate(replicas.items()):
        for name, colour in SERIES_DRAWN:
            dash = ""
            if several:
                colour = REPLICA_COLOURS[k % len(REPLICA_COLOURS)]
                dash = ' stroke-dasharray="4 3"' if name == "waiting" else ""
            drawn = _runs(own, name, x, y)
            for run in drawn:
                parts.append(
                    f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} '
                    f'points="{" ".join(run)}"/>'
                )
            if drawn:
                said = f"endpoint {endpoint} {name}" if several else name
                legend.append(f'<span style="color:{colour}">{e(said)}</span>')
    failed = sum(1 for r in rows if "error" in r)
    note = f", {failed} failed scrapes" if failed else ""
    pages = f" of {len(replicas)} replicas" if several else ""
    return (
        f'<figure class="server-metrics"><figcaption>{e(label)}: '
        f"{' / '.join(legend) or 'no known series'} requests over time ({len(rows)} scrapes"
        f"{pages}{note})</figcaption>"
        f'<svg viewBox="0 0 {_W:.0f} {_H:.0f}" width="{_W:.0f}" height="{_H:.0f}" '
        f'role="img">{"".join(parts)}</svg></figure>'
    )


def _runs(
    rows: Sequence[dict[str, Any]],
    name: str,
    x: Callable[[int], float],
    y: Callable[[float], float],
) -> list[list[str]]:
    """One series' polylines' points: a failed scrape ends a run (a gap)."""
    runs: list[list[str]] = [[]]
    for row in rows:
        values = row.get("values")
        if not isinstance(values, dict) or name not in values:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(f"{x(row['t_ns']):.1f},{y(float(values[name])):.1f}")
    return [run for run in runs if run]


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
