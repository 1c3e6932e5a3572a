"""The curve's report: the Pareto step plot as a PNG and as one HTML page.

``mlpe-fast run --concurrency ... --report-dir DIR`` leaves ``DIR/pareto.json``
(:mod:`mlpe_fast.sweep.runner`); :func:`write_reports` turns it into
``pareto.png`` (matplotlib, optional) and ``pareto.html`` (our own SVG, always).
Both show the four charts of spec §1.5 (rules §4.2): ``system_tps`` against
``tps_per_user`` (the primary, Pareto chart), and ``system_tps``,
``ttft_p90_ms`` and ``tps_per_user`` against concurrency on a log axis.

**The x metric** (spec §1.5, §1.1): for an agentic benchmark the Pareto
chart's x axis is ``e2e_avg_interactivity`` (output tokens per second of turn
time, ``sum(output tokens per turn) / sum(turn seconds)``) instead of
``tps_per_user``, and the fourth chart is ``e2e_avg_interactivity`` against
concurrency.  ``pareto.json`` says which in its top-level ``"x_metric"``;
without the key it is ``tps_per_user``, so older files read as before.  Below,
"the x metric" is whichever applies; titles, axis names, the table and the
hover details name it.  An agentic curve has no Offline point (spec §2.1), so
it has no ceiling either.

**The step function** (spec §1.5, rules §5.2: "each submitted measurement
point defines a discrete step at its concurrency level; between submitted
points, the curve holds constant at the last measured value"; no
interpolation).  Walked in the order the points are submitted, rising
concurrency, each point's ``system_tps`` holds until the next point.  On the
Pareto chart rising concurrency runs right to left (more users, fewer tokens
per second each), so with the points sorted by the x metric,
``x_0 <= x_1 <= ... <= x_n``, the curve takes the value ``y_k`` on
``(x_(k-1), x_k]``: each point's throughput is held *leftwards* until its
lower-interactivity neighbour, and the vertical jump sits at that neighbour
(matplotlib's ``where="pre"``).  The vertices are therefore::

    (x_0, y_0), (x_0, y_1), (x_1, y_1), (x_1, y_2), (x_2, y_2), ...

This is also the reading under which the curve claims nothing unmeasured: at
every interactivity ``x`` it covers, a submitted point delivered at least
``x`` (tokens/s per user, or per second of turn time) *and* the drawn
throughput.  The opposite choice (``where="post"``) would draw each
high-concurrency point's throughput at interactivities it never reached.  The
steps span ``[x_0, x_n]`` only: nothing is held beyond the outermost points.
The order is the chart's own, the x metric (ties by concurrency); for a
well-behaved curve it is the reverse of the concurrency order, and where the
two disagree the function of ``x`` wins.  A dominated point is still a step:
the rules make every submitted point one.

**Offline** (spec §1.5, §2.1): a *dedicated* Offline run is no step; it is a
horizontal throughput ceiling labelled "Offline (dedicated)" on both
``system_tps`` charts, and its concurrency (the dataset size) is no load
level, so it has no marker on the concurrency charts.  An *elected* Offline
point (the ``C_max`` point) is drawn like any other and labelled Offline.

**Missing values** (``null``, e.g. no TPOT for a non-streamed run): a point
is left out of each chart that needs one of its missing values, and kept in
the others and in the table.  Only the x metric in use counts: an agentic
point without ``tps_per_user`` is still a step.

The HTML page needs no network: no CDN, no web font, inline SVG and a few
lines of inline JavaScript (hover details, showing or hiding each chart and
the table).  Every string from the file is escaped where it lands: HTML text
and attributes through :func:`html.escape`, and the data the script reads as
JSON inside ``<script type="application/json">`` with ``<``, ``>`` and ``&``
written as ``\\u`` escapes, so no value can close the element.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import msgspec

from ..errors import UsageError

__all__ = (
    "CEILING_COLOUR",
    "REGION_COLOURS",
    "STEP_COLOUR",
    "Curve",
    "CurvePoint",
    "ParetoSteps",
    "Reports",
    "XMetric",
    "load_curve",
    "load_curve_file",
    "pareto_steps",
    "write_html",
    "write_png",
    "write_reports",
)

_NonNegative = Annotated[float, msgspec.Meta(ge=0)]

#: The Pareto chart's x axis (spec §1.5): ``tps_per_user``, or
#: ``e2e_avg_interactivity`` for an agentic benchmark.
XMetric = Literal["tps_per_user", "e2e_avg_interactivity"]

#: The axis name of each x metric, with its unit.
_METRIC_NAMES: dict[XMetric, str] = {
    "tps_per_user": "tps_per_user (tok/s per user)",
    "e2e_avg_interactivity": "e2e_avg_interactivity (tok/s of turn time)",
}


class CurvePoint(msgspec.Struct, frozen=True):
    """One row of ``pareto.json`` (written by :mod:`mlpe_fast.sweep.runner`).

    ``offline`` is ``"none"`` for a fixed-concurrency point, ``"elected"``
    for the ``C_max`` point labelled Offline, ``"dedicated"`` for the run
    that issues the whole dataset at once (spec §2.1).  Metric values are
    ``None`` when the point has none (no TPOT without streaming, say);
    ``e2e_avg_interactivity`` is an agentic benchmark's alone.  ``basis``
    says which figures they are (spec §1.4): the steady-state window's, or
    the whole run's.
    """

    concurrency: Annotated[int, msgspec.Meta(ge=1)]
    region: str
    offline: Literal["none", "elected", "dedicated"] = "none"
    system_tps: _NonNegative | None = None
    tps_per_user: _NonNegative | None = None
    ttft_p90_ms: _NonNegative | None = None
    e2e_avg_interactivity: _NonNegative | None = None
    accuracy: bool = False
    folder: str = ""
    basis: Literal["steady_state", "total"] = "total"

    @property
    def label(self) -> str:
        """The point's label on a chart: its concurrency, and "Offline" for
        an elected Offline point (spec §1.5)."""
        return f"{self.concurrency} Offline" if self.offline == "elected" else str(self.concurrency)


class Curve(msgspec.Struct, frozen=True):
    """A whole ``pareto.json``: its points in file order and the Pareto
    chart's x metric (module docstring; ``tps_per_user`` when the file has
    no ``"x_metric"``)."""

    points: tuple[CurvePoint, ...]
    x_metric: XMetric = "tps_per_user"


class ParetoSteps(NamedTuple):
    """The primary chart's content (module docstring, spec §1.5).

    ``points`` are the steps' points sorted by the x metric (then
    concurrency); ``vertices`` the step path as ``(x metric, system_tps)``
    pairs; ``ceilings`` the dedicated Offline points with a ``system_tps``;
    ``left_out`` the other points, which lack a value.
    """

    points: tuple[CurvePoint, ...]
    vertices: tuple[tuple[float, float], ...]
    ceilings: tuple[CurvePoint, ...]
    left_out: tuple[CurvePoint, ...]


class Reports(NamedTuple):
    """What :func:`write_reports` wrote, and why it skipped anything."""

    html: Path
    png: Path | None
    notes: tuple[str, ...]


#: Marker colour of each region (the checker's region names, spec §2.2);
#: regions outside this table take :data:`_EXTRA_COLOURS` in order.
REGION_COLOURS: dict[str, str] = {
    "low_latency": "#8e24aa",
    "low_concurrency": "#1e88e5",
    "med_concurrency": "#43a047",
    "high_concurrency": "#fb8c00",
    "margin": "#6d4c41",
    "submitters_choice": "#00897b",
}
_EXTRA_COLOURS = ("#c0ca33", "#f06292", "#5c6bc0", "#8d6e63", "#26c6da", "#9e9d24")
#: The official step curve.
STEP_COLOUR = "#263238"
#: The dedicated Offline throughput ceiling.
CEILING_COLOUR = "#d32f2f"
_CEILING_LABEL = "Offline (dedicated)"
_PLOTS_HINT = 'pip install "mlpe-fast[plots]"'


def load_curve(path: str | Path) -> list[CurvePoint]:
    """The points of a ``pareto.json``, in file order (:func:`load_curve_file`
    also gives the x metric).

    Raises:
        UsageError: as :func:`load_curve_file`.
    """
    return list(load_curve_file(path).points)


def load_curve_file(path: str | Path) -> Curve:
    """A ``pareto.json``: its points, in file order, and its x metric.

    Raises:
        UsageError: the file cannot be read or is not a curve file (one line
            naming the file and the first bad value, an unknown
            ``x_metric`` among them).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the curve file {path}: {exc.strerror or exc}") from None
    try:
        return msgspec.json.decode(data, type=Curve)
    except msgspec.DecodeError as exc:
        reason = " ".join(str(exc).split())
        raise UsageError(f"{path} is not a curve file (pareto.json): {reason}") from None


def pareto_steps(
    points: Sequence[CurvePoint], *, x_metric: XMetric = "tps_per_user"
) -> ParetoSteps:
    """The step curve and the Offline ceilings of the primary chart, with
    ``x_metric`` on its x axis (module docstring: each point's
    ``system_tps`` held leftwards to its neighbour lower on the x metric)."""
    x_of = _metric(x_metric)
    on_curve: list[CurvePoint] = []
    ceilings: list[CurvePoint] = []
    left_out: list[CurvePoint] = []
    for point in points:
        if point.offline == "dedicated":
            (ceilings if point.system_tps is not None else left_out).append(point)
        elif point.system_tps is None or getattr(point, x_metric) is None:
            left_out.append(point)
        else:
            on_curve.append(point)
    on_curve.sort(key=lambda p: (x_of(p), p.concurrency))
    vertices: list[tuple[float, float]] = []

    def add(vertex: tuple[float, float]) -> None:
        if not vertices or vertices[-1] != vertex:
            vertices.append(vertex)

    for k, point in enumerate(on_curve):
        if k:
            add((x_of(on_curve[k - 1]), _y(point)))
        add((x_of(point), _y(point)))
    return ParetoSteps(tuple(on_curve), tuple(vertices), tuple(ceilings), tuple(left_out))


def _metric(name: str) -> Callable[[CurvePoint], float]:
    """Reads one metric of the points a chart shows, which all have it."""

    def value(point: CurvePoint) -> float:
        found: float | None = getattr(point, name)
        assert found is not None
        return found

    return value


def _y(point: CurvePoint) -> float:
    assert point.system_tps is not None
    return point.system_tps


# --- axes shared by both renderers ------------------------------------------------------


class _Axis(NamedTuple):
    """A data range and its tick values; ``log`` means log-spaced."""

    lo: float
    hi: float
    ticks: tuple[float, ...]
    log: bool


def _linear_axis(values: Sequence[float]) -> _Axis:
    """From 0 (throughputs and latencies are compared with zero) to a round
    number above the largest value, with about five ticks of 1, 2, 2.5 or
    5 times a power of ten."""
    top = max(values, default=0.0) * 1.05
    if top <= 0:
        top = 1.0
    raw = top / 5
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    count = math.ceil(top / step - 1e-9)
    # Rounded to the step's precision, so 3 * 0.2 is the tick 0.6.
    digits = max(0, 2 - math.floor(math.log10(step)))
    ticks = tuple(round(k * step, digits) for k in range(count + 1))
    return _Axis(0.0, ticks[-1], ticks, False)


def _log_axis(values: Sequence[int]) -> _Axis:
    """Concurrency on a log axis: a third of an octave beyond the extreme
    points, ticks at powers of two (every k-th one past nine ticks)."""
    lo = min(values, default=1)
    hi = max(values, default=1)
    lo_exp = math.log2(lo) - 1 / 3
    hi_exp = math.log2(hi) + 1 / 3
    powers = list(range(math.ceil(lo_exp), math.floor(hi_exp) + 1))
    stride = max(1, math.ceil(len(powers) / 9))
    ticks = tuple(2.0**p for p in powers if p % stride == 0) or (2.0 ** powers[0],)
    return _Axis(2.0**lo_exp, 2.0**hi_exp, ticks, True)


def _tick_text(value: float, axis: _Axis) -> str:
    if axis.log or value == int(value):
        return f"{value:,.0f}"
    step = axis.ticks[1] - axis.ticks[0] if len(axis.ticks) > 1 else value
    decimals = max(0, -math.floor(math.log10(step)) + 1)
    return f"{value:,.{decimals}f}".rstrip("0").rstrip(".")


def _scale(axis: _Axis, start: float, end: float) -> Callable[[float], float]:
    """Data to pixels along one axis (``end`` < ``start`` for y)."""
    if axis.log:
        lo, hi = math.log(axis.lo), math.log(axis.hi)

        def log_position(value: float) -> float:
            return start + (math.log(value) - lo) / (hi - lo) * (end - start)

        return log_position

    def position(value: float) -> float:
        return start + (value - axis.lo) / (axis.hi - axis.lo) * (end - start)

    return position


class _Chart(NamedTuple):
    """One of the four charts, independent of the renderer."""

    key: str
    title: str
    x_name: str
    y_name: str
    points: tuple[CurvePoint, ...]
    x_of: Callable[[CurvePoint], float]
    y_of: Callable[[CurvePoint], float]
    x_axis: _Axis
    y_axis: _Axis
    steps: tuple[tuple[float, float], ...]
    ceilings: tuple[CurvePoint, ...]


def _charts(points: Sequence[CurvePoint], x_metric: XMetric) -> list[_Chart]:
    """The four charts of spec §1.5, in reading order; the fourth is the
    x metric against concurrency."""
    steps = pareto_steps(points, x_metric=x_metric)
    x_of = _metric(x_metric)
    ceiling_tps = [_y(p) for p in steps.ceilings]
    loaded = [p for p in points if p.offline != "dedicated"]

    def conc(p: CurvePoint) -> float:
        return float(p.concurrency)

    charts = [
        _Chart(
            "pareto",
            f"Pareto: system_tps vs {x_metric} (official step curve)",
            _METRIC_NAMES[x_metric],
            "system_tps (tok/s)",
            steps.points,
            x_of,
            _y,
            _linear_axis([x_of(p) for p in steps.points]),
            _linear_axis([_y(p) for p in steps.points] + ceiling_tps),
            steps.vertices,
            steps.ceilings,
        )
    ]
    concurrency_charts: tuple[tuple[str, str, tuple[CurvePoint, ...]], ...] = (
        ("system_tps", "system_tps (tok/s)", steps.ceilings),
        ("ttft_p90_ms", "ttft_p90_ms (ms)", ()),
        (x_metric, _METRIC_NAMES[x_metric], ()),
    )
    for name, y_name, ceilings in concurrency_charts:
        shown = tuple(p for p in loaded if getattr(p, name) is not None)
        shown = tuple(sorted(shown, key=lambda p: p.concurrency))
        y_values = [getattr(p, name) for p in shown] + [_y(p) for p in ceilings]
        charts.append(
            _Chart(
                name,
                f"{name} vs concurrency",
                "concurrency (log scale)",
                y_name,
                shown,
                conc,
                _metric(name),
                _log_axis([p.concurrency for p in shown]),
                _linear_axis(y_values),
                (),
                ceilings,
            )
        )
    return charts


def _near_right(chart: _Chart, point: CurvePoint) -> bool:
    """Whether a point sits in the right eighth of its chart, where a label
    on its right would run off the edge."""
    return _scale(chart.x_axis, 0.0, 1.0)(chart.x_of(point)) > 0.875


def _region_colours(points: Sequence[CurvePoint]) -> dict[str, str]:
    """A colour for every region of the curve, known regions first in the
    checker's order, then the others in order of appearance."""
    present = [r for r in REGION_COLOURS if any(p.region == r for p in points)]
    extra = list(dict.fromkeys(p.region for p in points if p.region not in REGION_COLOURS))
    colours = {r: REGION_COLOURS[r] for r in present}
    for k, region in enumerate(extra):
        colours[region] = _EXTRA_COLOURS[k % len(_EXTRA_COLOURS)]
    return colours


# --- PNG ----------------------------------------------------------------------------------


def write_png(
    points: Sequence[CurvePoint], path: str | Path, *, x_metric: XMetric = "tps_per_user"
) -> None:
    """Writes the four charts, with ``x_metric`` on the Pareto chart's x axis,
    as one 1200 x 900 PNG (2 x 2 grid).

    matplotlib is imported here, on its Agg canvas (no display, no pyplot
    state), because it is an optional dependency.

    Raises:
        UsageError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.ticker import NullLocator
    except ImportError:
        raise UsageError(f"pareto.png needs matplotlib: {_PLOTS_HINT}") from None

    colours = _region_colours([p for p in points if p.offline != "dedicated"])
    fig = Figure(figsize=(12, 9), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    for ax, chart in zip(fig.subplots(2, 2).flat, _charts(points, x_metric), strict=True):
        ax.set_title(_mpl_text(chart.title), fontsize=11)
        ax.set_xlabel(chart.x_name)
        ax.set_ylabel(chart.y_name)
        ax.grid(True, color="#e0e0e0", linewidth=0.8)
        ax.set_axisbelow(True)
        if chart.x_axis.log:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(chart.x_axis.lo, chart.x_axis.hi)
        ax.set_xticks(
            chart.x_axis.ticks, labels=[_tick_text(t, chart.x_axis) for t in chart.x_axis.ticks]
        )
        ax.set_ylim(chart.y_axis.lo, chart.y_axis.hi)
        ax.set_yticks(
            chart.y_axis.ticks, labels=[_tick_text(t, chart.y_axis) for t in chart.y_axis.ticks]
        )
        if chart.steps:
            xs, ys = zip(*chart.steps, strict=True)
            ax.plot(xs, ys, color=STEP_COLOUR, linewidth=1.8, zorder=2)
        for ceiling in chart.ceilings:
            ax.axhline(_y(ceiling), color=CEILING_COLOUR, linestyle="--", linewidth=1.4)
            ax.annotate(
                _CEILING_LABEL,
                (0.01, _y(ceiling)),
                xycoords=("axes fraction", "data"),
                xytext=(0, 3),
                textcoords="offset points",
                color=CEILING_COLOUR,
                fontsize=8,
            )
        for point in chart.points:
            x, y = chart.x_of(point), chart.y_of(point)
            ax.scatter([x], [y], s=36, color=colours[point.region], zorder=3)
            flip = _near_right(chart, point)
            ax.annotate(
                _mpl_text(point.label),
                (x, y),
                xytext=(-4 if flip else 4, 4),
                ha="right" if flip else "left",
                textcoords="offset points",
                fontsize=8,
                color="#37474f",
            )
        if not chart.points and not chart.ceilings:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#757575")
    handles = [
        Line2D([], [], marker="o", linestyle="", color=colour, label=_mpl_text(region))
        for region, colour in colours.items()
    ]
    handles.append(Line2D([], [], color=STEP_COLOUR, label="official step curve"))
    if any(p.offline == "dedicated" and p.system_tps is not None for p in points):
        handles.append(Line2D([], [], color=CEILING_COLOUR, linestyle="--", label=_CEILING_LABEL))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8))
    fig.savefig(Path(path), format="png")


def _mpl_text(text: str) -> str:
    """A label matplotlib shows as is: ``$`` would start mathtext."""
    return text.replace("$", r"\$")


# --- HTML ---------------------------------------------------------------------------------

_W, _H = 560, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 68, 18, 32, 46
_RADIUS = 5


def _px(value: float) -> str:
    return f"{value:.2f}"


def _svg(chart: _Chart, index: dict[int, int], colours: dict[str, str], x_metric: XMetric) -> str:
    """One chart as inline SVG (no namespace needed inside HTML)."""
    e = html.escape
    left, right, top, bottom = _LEFT, _W - _RIGHT, _TOP, _H - _BOTTOM
    sx = _scale(chart.x_axis, left, right)
    sy = _scale(chart.y_axis, bottom, top)
    out = [
        f'<svg class="chart" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
        f'role="img" aria-label="{e(chart.title)}">',
        f'<text class="title" x="{left}" y="18">{e(chart.title)}</text>',
    ]
    for tick in chart.x_axis.ticks:
        x = _px(sx(tick))
        out.append(f'<line class="grid" x1="{x}" y1="{top}" x2="{x}" y2="{bottom}"/>')
        out.append(
            f'<text class="tick" x="{x}" y="{bottom + 16}" text-anchor="middle">'
            f"{e(_tick_text(tick, chart.x_axis))}</text>"
        )
    for tick in chart.y_axis.ticks:
        y = _px(sy(tick))
        out.append(f'<line class="grid" x1="{left}" y1="{y}" x2="{right}" y2="{y}"/>')
        out.append(
            f'<text class="tick" x="{left - 6}" y="{y}" dy="0.32em" text-anchor="end">'
            f"{e(_tick_text(tick, chart.y_axis))}</text>"
        )
    out.append(
        f'<rect class="frame" x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"/>'
    )
    out.append(
        f'<text class="axis" x="{(left + right) / 2}" y="{_H - 8}" text-anchor="middle">'
        f"{e(chart.x_name)}</text>"
    )
    out.append(
        f'<text class="axis" transform="translate(14 {(top + bottom) / 2}) rotate(-90)" '
        f'text-anchor="middle">{e(chart.y_name)}</text>'
    )
    if chart.steps:
        path = " ".join(
            f"{'M' if k == 0 else 'L'} {_px(sx(x))} {_px(sy(y))}"
            for k, (x, y) in enumerate(chart.steps)
        )
        out.append(f'<path class="steps" stroke="{STEP_COLOUR}" d="{path}"/>')
    for ceiling in chart.ceilings:
        y = _px(sy(_y(ceiling)))
        tip = f"{_CEILING_LABEL}: system_tps {_y(ceiling):,.1f} (r{ceiling.concurrency})"
        out.append(
            f'<g class="ceiling"><line x1="{left}" y1="{y}" x2="{right}" y2="{y}" '
            f'stroke="{CEILING_COLOUR}"><title>{e(tip)}</title></line>'
            f'<text x="{left + 6}" y="{y}" dy="-4" fill="{CEILING_COLOUR}">'
            f"{_CEILING_LABEL}</text></g>"
        )
    for point in chart.points:
        x, y = _px(sx(chart.x_of(point))), _px(sy(chart.y_of(point)))
        # Labels of points near the right edge go on their left, inside the chart.
        side = 'dx="-7" text-anchor="end"' if _near_right(chart, point) else 'dx="7"'
        details = _describe(point, x_metric)
        out.append(
            f'<g class="pt"><circle data-i="{index[id(point)]}" cx="{x}" cy="{y}" r="{_RADIUS}" '
            f'fill="{colours[point.region]}"><title>{e(details)}</title></circle>'
            f'<text class="label" x="{x}" y="{y}" {side} dy="-7">{e(point.label)}</text></g>'
        )
    if not chart.points and not chart.ceilings:
        out.append(
            f'<text class="empty" x="{(left + right) / 2}" y="{(top + bottom) / 2}" '
            f'text-anchor="middle">no data</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _number(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.1f}{unit}"


def _describe(point: CurvePoint, x_metric: XMetric) -> str:
    offline = "" if point.offline == "none" else f" (Offline, {point.offline})"
    # An agentic point's x value leads; tps_per_user stays, as on the table.
    interactivity = (
        f"e2e_avg_interactivity {_number(point.e2e_avg_interactivity)}; "
        if x_metric == "e2e_avg_interactivity"
        else ""
    )
    return (
        f"concurrency {point.concurrency}{offline}; region {point.region}; "
        f"system_tps {_number(point.system_tps)}; {interactivity}"
        f"tps_per_user {_number(point.tps_per_user)}; "
        f"TTFT p90 {_number(point.ttft_p90_ms, ' ms')}"
    )


def _table(points: Sequence[CurvePoint], x_metric: XMetric) -> str:
    e = html.escape
    agentic = x_metric == "e2e_avg_interactivity"
    head = (
        "concurrency",
        "region",
        "Offline",
        "system_tps",
        *(("e2e_avg_interactivity",) if agentic else ()),
        "tps_per_user",
        "TTFT p90 (ms)",
        "accuracy run",
        "folder",
    )
    rows = [
        "<tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>",
    ]
    for p in sorted(points, key=lambda p: (p.offline == "dedicated", p.concurrency)):
        cells = (
            (str(p.concurrency), "num"),
            (p.region, ""),
            ("" if p.offline == "none" else p.offline, ""),
            (_number(p.system_tps), "num"),
            *(((_number(p.e2e_avg_interactivity), "num"),) if agentic else ()),
            (_number(p.tps_per_user), "num"),
            (_number(p.ttft_p90_ms), "num"),
            ("yes" if p.accuracy else "", ""),
            (p.folder, ""),
        )
        rows.append(
            "<tr>"
            + "".join(
                f'<td class="{cls}">{e(text)}</td>' if cls else f"<td>{e(text)}</td>"
                for text, cls in cells
            )
            + "</tr>"
        )
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _json_for_script(value: Any) -> str:
    """JSON that cannot end its ``<script>`` element or open another: the
    characters HTML looks at inside a script are written as escapes, which
    ``JSON.parse`` reads back unchanged."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_STYLE = """
body { margin: 16px; font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif;
       color: #212121; background: #ffffff; }
header { display: flex; flex-wrap: wrap; gap: 4px 18px; align-items: baseline; }
h1 { font-size: 16px; margin: 0 0 6px 0; }
nav label, .legend span { white-space: nowrap; margin-right: 10px; }
.sw { display: inline-block; width: 18px; height: 8px; margin-right: 4px; vertical-align: middle; }
.sw.line { height: 2px; }
.sw.dash { height: 0; border-top: 2px dashed CEILING; }
main { display: grid; grid-template-columns: repeat(2, 560px); gap: 12px 16px; margin-top: 8px; }
figure { margin: 0; }
[hidden] { display: none !important; }
svg.chart { display: block; background: #ffffff; }
svg .title { font-size: 13px; font-weight: 600; fill: #212121; }
svg .tick { font-size: 11px; fill: #616161; }
svg .axis { font-size: 12px; fill: #424242; }
svg .label { font-size: 10px; fill: #37474f; pointer-events: none; }
svg .empty { font-size: 13px; fill: #9e9e9e; }
svg .grid { stroke: #eeeeee; stroke-width: 1; }
svg .frame { fill: none; stroke: #9e9e9e; stroke-width: 1; }
svg .steps { fill: none; stroke-width: 2; stroke-linejoin: miter; }
svg .ceiling line { stroke-width: 2; stroke-dasharray: 8 5; }
svg .ceiling text { font-size: 11px; }
svg circle { stroke: #ffffff; stroke-width: 1; cursor: pointer; }
#table { margin-top: 12px; }
table { border-collapse: collapse; }
th, td { border: 1px solid #e0e0e0; padding: 3px 8px; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
#tip { position: fixed; pointer-events: none; background: #263238; color: #ffffff;
       padding: 6px 8px; border-radius: 4px; font-size: 12px; white-space: pre; }
"""

# Reads the points from the JSON block and writes them with textContent
# only: no value from the file is ever parsed as markup.  The block's
# data-x-metric says whether the curve is agentic, whose hover details add
# e2e_avg_interactivity (module docstring).
_SCRIPT = """
(function () {
  "use strict";
  var data = document.getElementById("curve-data");
  var points = JSON.parse(data.textContent);
  var agentic = data.getAttribute("data-x-metric") === "e2e_avg_interactivity";
  var tip = document.getElementById("tip");
  function num(v, unit) {
    return v === null ? "n/a"
      : v.toLocaleString("en-US", {maximumFractionDigits: 1}) + (unit || "");
  }
  function show(circle, event) {
    var p = points[Number(circle.getAttribute("data-i"))];
    var rows = [
      ["concurrency", p.concurrency
        + (p.offline === "none" ? "" : "  (Offline, " + p.offline + ")")],
      ["region", p.region],
      ["system_tps", num(p.system_tps)]
    ];
    if (agentic) {
      rows.push(["e2e_avg_interactivity", num(p.e2e_avg_interactivity)]);
    }
    rows.push(
      ["tps_per_user", num(p.tps_per_user)],
      ["TTFT p90", num(p.ttft_p90_ms, " ms")],
      ["folder", p.folder]
    );
    // The values line up one space after the longest name.
    var width = 0;
    for (var r = 0; r < rows.length; r++) {
      width = Math.max(width, rows[r][0].length);
    }
    var lines = [];
    for (var k = 0; k < rows.length; k++) {
      lines.push(rows[k][0] + " ".repeat(width + 1 - rows[k][0].length) + rows[k][1]);
    }
    tip.textContent = lines.join("\\n");
    tip.hidden = false;
    tip.style.left = (event.clientX + 14) + "px";
    tip.style.top = (event.clientY + 14) + "px";
  }
  var circles = document.querySelectorAll("circle[data-i]");
  for (var i = 0; i < circles.length; i++) {
    circles[i].addEventListener("mousemove", function (event) { show(this, event); });
    circles[i].addEventListener("mouseleave", function () { tip.hidden = true; });
  }
  var boxes = document.querySelectorAll("input[data-show]");
  for (var j = 0; j < boxes.length; j++) {
    var apply = function (box) {
      document.getElementById(box.getAttribute("data-show")).hidden = !box.checked;
    };
    boxes[j].addEventListener("change", function () { apply(this); });
    apply(boxes[j]);
  }
  document.documentElement.setAttribute("data-ready", "1");
})();
"""


def write_html(
    points: Sequence[CurvePoint], path: str | Path, *, x_metric: XMetric = "tps_per_user"
) -> None:
    """Writes the four charts, with ``x_metric`` on the Pareto chart's x
    axis, the table and hover details as one HTML file that opens offline
    (module docstring)."""
    e = html.escape
    index = {id(p): k for k, p in enumerate(points)}
    colours = _region_colours([p for p in points if p.offline != "dedicated"])
    charts = _charts(points, x_metric)
    toggles = [
        f'<label><input type="checkbox" data-show="chart-{c.key}" checked> {e(c.key)}</label>'
        for c in charts
    ]
    toggles.append('<label><input type="checkbox" data-show="table"> table</label>')
    legend = [
        f'<span><i class="sw" style="background:{colour}"></i>{e(region)}</span>'
        for region, colour in colours.items()
    ]
    legend.append(
        f'<span><i class="sw line" style="background:{STEP_COLOUR}"></i>official step curve</span>'
    )
    if any(p.offline == "dedicated" and p.system_tps is not None for p in points):
        legend.append(f'<span><i class="sw dash"></i>{_CEILING_LABEL} ceiling</span>')
    figures = [
        f'<figure id="chart-{c.key}">{_svg(c, index, colours, x_metric)}</figure>' for c in charts
    ]
    data = [msgspec.to_builtins(p) for p in points]
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mlpe-fast curve: {len(points)} points</title>
<style>{_STYLE.replace("CEILING", CEILING_COLOUR)}</style>
</head>
<body>
<header>
<h1>Curve: {len(points)} points</h1>
<nav>{"".join(toggles)}</nav>
<div class="legend">{"".join(legend)}</div>
</header>
<main>
{chr(10).join(figures)}
</main>
<section id="table" hidden>
{_table(points, x_metric)}
</section>
<div id="tip" hidden></div>
<script type="application/json" id="curve-data" data-x-metric="{e(x_metric)}">\
{_json_for_script(data)}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""
    Path(path).write_text(page, encoding="utf-8")


# --- both ---------------------------------------------------------------------------------


def write_reports(report_dir: str | Path) -> Reports:
    """Reads ``report_dir/pareto.json`` (its points and x metric) and writes
    ``pareto.html`` and, when matplotlib is installed, ``pareto.png`` beside
    it; without matplotlib the PNG is skipped and a note says how to get it.

    Raises:
        UsageError: ``pareto.json`` is missing or malformed.
    """
    root = Path(report_dir)
    curve = load_curve_file(root / "pareto.json")
    html_path = root / "pareto.html"
    write_html(curve.points, html_path, x_metric=curve.x_metric)
    png_path = root / "pareto.png"
    try:
        write_png(curve.points, png_path, x_metric=curve.x_metric)
    except UsageError as exc:  # matplotlib is missing: the page alone still shows everything
        return Reports(html_path, None, (f"{exc}; wrote pareto.html only",))
    return Reports(html_path, png_path, ())
