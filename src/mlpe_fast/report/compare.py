"""``mlpe-fast compare``: two or more runs or curves side by side.

    mlpe-fast compare RUN_OR_CURVE RUN_OR_CURVE [...] [--html PATH] [--png PATH]

Each argument is a run folder (``performance/result_summary.json``: one
point) or a curve folder (``pareto.json``: a concurrency curve, a
request-rate curve, an agentic curve), all of one kind.  The first is the
baseline: every other one's figures are printed beside it with their
differences, absolute and in per cent of the baseline.  A curve's points
are matched by their load level (concurrency, or target rate; a dedicated
Offline point by being the Offline point), so curves measured at different
levels compare where they meet and show ``-`` where they do not.

The figures are each point's own (spec §1.1-1.4): ``system_tps`` and the
Pareto x metric (``tps_per_user``, or ``e2e_avg_interactivity`` for an
agentic point) and TTFT p90 are its official figures, the steady-state
window's where the window is the result (``basis: steady_state``) and the
whole run's otherwise, as its curve's ``pareto.json`` holds them; the other
latencies, the query rate and the counts are the whole run's.  The
differences are mlpe-fast's, not MLPerf metrics, and the output says so.

The page (``--html``, default ``compare.html``) draws every curve on the
same charts, one colour each, with :mod:`.pareto`'s drawing (a run folder
is a curve of one point); ``--png`` writes the same charts as a PNG
(matplotlib).  Mistakes are one line and exit status 2: fewer than two
folders, a folder that is neither a run nor a curve, or folders of
different kinds (a run and a curve, a concurrency curve and a rate curve,
an agentic curve and a single-turn one, a Poisson run and a concurrency
run), whose figures do not answer the same question.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .pareto import (
    SERIES_COLOURS,
    Curve,
    CurvePoint,
    Series,
    load_curve_file,
    write_series_html,
    write_series_png,
)

__all__ = ("Compared", "add_arguments", "compare_text", "main", "read_compared")

#: The figures of one point, in the order printed: (key, name, unit).
_FIGURES = (
    ("system_tps", "system_tps", "tok/s"),
    ("tps_per_user", "tps_per_user", "tok/s"),
    ("e2e_avg_interactivity", "e2e_avg_interactivity", "tok/s"),
    ("ttft_p50_ms", "TTFT p50", "ms"),
    ("ttft_p90_ms", "TTFT p90", "ms"),
    ("tpot_p50_ms", "TPOT p50", "ms"),
    ("tpot_p90_ms", "TPOT p90", "ms"),
    ("latency_p90_ms", "latency p90", "ms"),
    ("qps", "qps", "/s"),
    ("n_samples_completed", "completed", ""),
    ("n_samples_failed", "failed", ""),
    ("duration_s", "duration", "s"),
)
#: A curve's lines per point: the figures its charts show.
_CURVE_FIGURES = ("system_tps", "tps_per_user", "e2e_avg_interactivity", "ttft_p90_ms", "qps")
#: The one "level" of a run folder's figures.
_RUN = "run"
_NOTE = (
    "differences are the other minus the baseline, absolute and in % of the baseline; "
    "they are mlpe-fast's comparisons, not MLPerf metrics"
)


@dataclass(frozen=True)
class Compared:
    """One argument, read: its name, its kind, its points' figures by load
    level (a run folder has one), and its points as a curve to draw."""

    name: str
    kind: str
    figures: dict[str, dict[str, float | None]]
    curve: Curve
    levels: list[str] = field(default_factory=list)
    #: a run folder's load (``c=4``, ``2/s``, ``Offline``); empty for a curve
    load: str = ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folders",
        nargs="+",
        metavar="RUN_OR_CURVE",
        help="run folders (performance/result_summary.json) or curve folders (pareto.json), "
        "all of one kind; the first is the baseline",
    )
    parser.add_argument(
        "--html",
        default="compare.html",
        metavar="PATH",
        help="the page with the curves overlaid (default compare.html)",
    )
    parser.add_argument(
        "--png", metavar="PATH", help="the same charts as a PNG (needs mlpe-fast[plots])"
    )


def main(args: argparse.Namespace) -> int:
    """Prints the comparison and writes the page (module docstring).

    Raises:
        UsageError: a mistake in the arguments (module docstring).
    """
    compared = read_compared(args.folders)
    print(compare_text(compared), end="")
    series = [
        Series(c.name, c.curve, SERIES_COLOURS[k % len(SERIES_COLOURS)])
        for k, c in enumerate(compared)
    ]
    heading = f"compare {len(compared)} {compared[0].kind}s: " + ", ".join(c.name for c in compared)
    html = Path(args.html)
    _write(html, lambda: write_series_html(series, html, heading=heading))
    written = [str(html)]
    if args.png:
        png = Path(args.png)
        _write(png, lambda: write_series_png(series, png, heading=heading))
        written.append(str(png))
    print(f"compare: wrote {', '.join(written)}")
    return 0


def _write(path: Path, write: Callable[[], None]) -> None:
    """Runs ``write`` for ``path``; a path the system refuses (no such
    folder, a name too long, no permission, a read-only file system) is
    the user's to change, so one line, not a traceback.

    Raises:
        UsageError: ``path`` cannot be written.
    """
    try:
        if not path.parent.is_dir():
            raise UsageError(f"{path}: no such folder {path.parent} to write it in")
        if path.is_dir():
            raise UsageError(f"{path}: is a folder; give a file name")
        write()
    except OSError as error:
        raise UsageError(f"{path}: cannot write: {error.strerror or error}") from None


def read_compared(folders: Sequence[str]) -> list[Compared]:
    """Reads each folder and checks that they are two or more of one kind.

    Raises:
        UsageError: fewer than two, a folder that is no run or curve, mixed kinds.
    """
    if len(folders) < 2:
        raise UsageError(
            "compare needs two or more run or curve folders (the first is the baseline)"
        )
    names = _names([Path(f) for f in folders])
    compared = [_read(Path(f), name) for f, name in zip(folders, names, strict=True)]
    kinds = {c.kind for c in compared}
    if len(kinds) > 1:
        shown = "; ".join(f"{c.name} is a {c.kind}" for c in compared)
        raise UsageError(
            f"compare: folders of different kinds ({shown}); compare one kind at a time"
        )
    return compared


def _names(paths: Sequence[Path]) -> list[str]:
    """Each folder's name in the output: its own name, or more of its path
    where two would read the same."""
    for depth in range(1, 1 + max(len(p.resolve().parts) for p in paths)):
        names = ["/".join(p.resolve().parts[-depth:]) for p in paths]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def _read(path: Path, name: str) -> Compared:
    if (path / "pareto.json").is_file():
        return _read_curve(path, name)
    summary_path = path / "performance" / "result_summary.json"
    if summary_path.is_file():
        return _read_run(path, name, _summary(summary_path))
    if not path.is_dir():
        raise UsageError(f"{path}: no such folder")
    raise UsageError(
        f"{path}: neither a run folder (no performance/result_summary.json) nor a curve "
        "folder (no pareto.json)"
    )


def _summary(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path}: cannot read: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data


def _percentile_ms(summary: Mapping[str, Any], block: str, percentile: str) -> float | None:
    grid = summary.get(block)
    grid = grid.get("percentiles") if isinstance(grid, dict) else None
    value = grid.get(percentile) if isinstance(grid, dict) else None
    return _number(value, 1e-6)


def _number(value: Any, scale: float = 1.0) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) * scale


def _window(summary: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The steady-state window's figures when they are the official result
    (spec §1.4; ``mlpe_fast.steady_state``), else None."""
    own = summary.get("mlpe_fast")
    steady = own.get("steady_state") if isinstance(own, dict) else None
    if not isinstance(steady, dict) or steady.get("basis") != "steady_state":
        return None
    figures = steady.get("figures")
    return figures if isinstance(figures, dict) else None


def summary_figures(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """A run's figures (module docstring): the official ones (the window's
    where it is the result), then the whole run's latencies and counts."""
    duration = _number(summary.get("duration_ns"), 1e-9)
    figures: dict[str, float | None] = {
        "system_tps": _number(summary.get("system_tps")),
        "tps_per_user": _number(summary.get("tps_per_user")),
        "e2e_avg_interactivity": _number(summary.get("e2e_avg_interactivity")),
        "ttft_p50_ms": _percentile_ms(summary, "ttft", "50.0"),
        "ttft_p90_ms": _percentile_ms(summary, "ttft", "90.0"),
        "tpot_p50_ms": _percentile_ms(summary, "tpot", "50.0"),
        "tpot_p90_ms": _percentile_ms(summary, "tpot", "90.0"),
        "latency_p90_ms": _percentile_ms(summary, "latency", "90.0"),
        "qps": _number(summary.get("qps")),
        "n_samples_completed": _number(summary.get("n_samples_completed")),
        "n_samples_failed": _number(summary.get("n_samples_failed")),
        "duration_s": duration,
    }
    window = _window(summary)
    if window is not None:
        for key in ("system_tps", "tps_per_user", "ttft_p90_ms"):
            figures[key] = _number(window.get(key))
    return figures


def _load_pattern(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    run_config = summary.get("run_config")
    pattern = run_config.get("load_pattern") if isinstance(run_config, dict) else None
    return pattern if isinstance(pattern, dict) else {}


def _read_run(path: Path, name: str, summary: Mapping[str, Any]) -> Compared:
    pattern = _load_pattern(summary)
    kind_of = {"poisson": "Poisson run", "agentic_inference": "agentic run"}
    offline = pattern.get("type") in ("max_throughput", "offline")
    kind = "Offline run" if offline else kind_of.get(str(pattern.get("type")), "concurrency run")
    figures = summary_figures(summary)
    rate = _number(pattern.get("target_qps")) if kind == "Poisson run" else None
    concurrency = pattern.get("target_concurrency")
    if offline or not isinstance(concurrency, int) or isinstance(concurrency, bool):
        completed = figures["n_samples_completed"]
        concurrency = max(1, int(completed or 1))  # an Offline run's: its sample count
    level = f"{rate:g}/s" if rate is not None else ("Offline" if offline else f"c={concurrency}")
    window = _window(summary)
    point = CurvePoint(
        concurrency=None if rate is not None else concurrency,
        region="",
        offline="dedicated" if offline else "none",
        system_tps=figures["system_tps"],
        tps_per_user=figures["tps_per_user"],
        ttft_p90_ms=figures["ttft_p90_ms"],
        e2e_avg_interactivity=figures["e2e_avg_interactivity"],
        target_qps=rate,
        qps=figures["qps"],
        folder=str(path),
        basis="steady_state" if window is not None else "total",
    )
    curve = Curve(
        (point,),
        x_metric="e2e_avg_interactivity" if kind == "agentic run" else "tps_per_user",
        load="rate" if rate is not None else "concurrency",
    )
    # Runs are compared whatever their level: one table.
    return Compared(name, kind, {_RUN: figures}, curve, [_RUN], load=level)


def _level_key(curve: Curve, point: CurvePoint) -> str:
    if point.offline == "dedicated":
        return "Offline"
    if curve.load == "rate":
        return f"{point.level:g}/s"
    return f"c={point.concurrency}"


def _read_curve(path: Path, name: str) -> Compared:
    curve = load_curve_file(path / "pareto.json")
    if curve.load == "rate":
        kind = "request-rate curve"
    elif curve.x_metric == "e2e_avg_interactivity":
        kind = "agentic curve"
    else:
        kind = "concurrency curve"
    figures: dict[str, dict[str, float | None]] = {}
    levels = []
    for point in sorted(curve.points, key=lambda p: (p.offline == "dedicated", p.level)):
        key = _level_key(curve, point)
        # The point's run folder beside pareto.json (it may have moved with
        # its curve since it was measured), else where the row says.
        found = None
        for folder in (path / Path(point.folder).name, Path(point.folder)):
            summary_path = folder / "performance" / "result_summary.json"
            if point.folder and summary_path.is_file():
                found = summary_figures(_summary(summary_path))
                break
        row: dict[str, float | None] = dict(found) if found is not None else {}
        # The curve's own figures (its official ones) win: they are what it draws.
        for key_name in ("system_tps", "tps_per_user", "ttft_p90_ms", "e2e_avg_interactivity"):
            row[key_name] = getattr(point, key_name)
        if point.qps is not None:
            row["qps"] = point.qps
        figures[key] = row
        levels.append(key)
    return Compared(name, kind, figures, curve, levels)


# --- the text ---------------------------------------------------------------------------------


def _format(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.1f}" if value != int(value) else f"{value:,.0f}"
    return f"{value:,.3g}" if abs(value) < 1 else f"{value:,.2f}"


def _difference(base: float | None, other: float | None) -> tuple[str, str]:
    if base is None or other is None:
        return "-", "-"
    delta = other - base
    absolute = "0" if delta == 0 else ("+" if delta > 0 else "-") + _format(abs(delta))
    if base == 0:
        return absolute, "-"
    return absolute, f"{100 * delta / base:+.1f}%"


def compare_text(compared: Sequence[Compared]) -> str:
    """The comparison as text: a table of figures per load level (one for
    run folders), each folder's value and its difference from the
    baseline's (the first)."""
    base = compared[0]
    runs = base.kind.endswith("run")
    keys = [k for k, _, _ in _FIGURES] if runs else list(_CURVE_FIGURES)
    named = {k: (n, u) for k, n, u in _FIGURES}
    levels = list(dict.fromkeys(level for c in compared for level in c.levels))
    if not runs:
        levels.sort(key=_level_order)
    head = ["", base.name]
    for other in compared[1:]:
        head += [other.name, "diff", "%"]
    table = [head]
    if runs:
        loads = [base.load]
        for other in compared[1:]:
            loads += [other.load, "", ""]
        table.append(["load", *loads])
    for level in levels:
        if not runs:
            table.append([level] + [""] * (len(head) - 1))
        for key in keys:
            values = [c.figures.get(level, {}).get(key) for c in compared]
            if all(v is None for v in values):
                continue
            name, unit = named[key]
            label = f"{name} ({unit})" if unit else name
            row = [("  " if not runs else "") + label, _format(values[0])]
            for value in values[1:]:
                row += [_format(value), *_difference(values[0], value)]
            table.append(row)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    what = f"{len(compared)} {base.kind}s"
    lines = [f"compare: {what}, baseline {base.name}"]
    for row in table:
        if not runs and all(cell == "" for cell in row[1:]):
            lines.append(f"  {row[0]}")
            continue
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    lines.append(f"note: {_NOTE}")
    if not runs:
        lines.append(
            "note: system_tps, the x metric and TTFT p90 are each point's official figures "
            "(spec §1.4: the steady-state window's where it is the result)"
        )
    return "\n".join(lines) + "\n"


def _level_order(level: str) -> float:
    if level == "Offline":
        return math.inf
    text = level.removeprefix("c=").removesuffix("/s")
    try:
        return float(text)
    except ValueError:
        return math.inf
