"""The curve's report: the Pareto charts as a PNG and as one HTML page.

``mlpe-fast run --concurrency ... --report-dir DIR`` leaves ``DIR/pareto.json``
(:mod:`mlpe_fast.sweep.runner`); :func:`write_reports` turns it into
``pareto.png`` (matplotlib, optional) and ``pareto.html`` (our own SVG, always).
Both show the four charts of spec §1.5 (rules §4.2): ``system_tps`` against
``tps_per_user`` (the primary, Pareto chart), and ``system_tps``,
``ttft_p90_ms`` and ``tps_per_user`` against concurrency on a log axis.
``mlpe-fast compare`` (:mod:`.compare`) draws several curves on the same
charts, one colour each, with the same code.

**The x metric** (spec §1.5, §1.1): for an agentic benchmark the Pareto
chart's x axis is ``e2e_avg_interactivity`` (output tokens per second of turn
time, ``sum(output tokens per turn) / sum(turn seconds)``) instead of
``tps_per_user``, and the fourth chart is ``e2e_avg_interactivity`` against
concurrency.  ``pareto.json`` says which in its top-level ``"x_metric"``;
without the key it is ``tps_per_user``, so older files read as before.  Below,
"the x metric" is whichever applies.  An agentic curve has no Offline point
(spec §2.1), so it has no ceiling either.

**The frontier** (spec §1.5, rules §5.2: "each submitted measurement point
defines a discrete step at its concurrency level; between submitted points,
the curve holds constant at the last measured value"; no interpolation).
The chart answers the question its axes ask: at an interactivity of at least
``x`` per user, how much throughput did the system deliver?  A point that
delivered ``x_k`` per user at ``y_k`` tok/s answers it for every ``x <= x_k``,
so the curve at ``x`` is the highest ``y_k`` among the points with
``x_k >= x``: each point's throughput is held *leftwards* (towards lower
interactivity, where more users share the system) until a point with more
throughput takes over, and the vertical jump sits at that point
(matplotlib's ``where="pre"``).  With the frontier's points sorted by the x
metric, ``x_0 < x_1 < ... < x_n`` and ``y_0 > y_1 > ... > y_n``, the vertices
are::

    (x_min, y_0), (x_0, y_0), (x_0, y_1), (x_1, y_1), (x_1, y_2), ...

where ``x_min`` is the lowest x of any point on the chart (``x_0`` unless
dominated points lie further left).  The curve claims nothing unmeasured:
every throughput it draws was delivered by a point at an interactivity at
least as high.  The opposite choice (``where="post"``) would draw a
high-concurrency point's throughput at interactivities it never reached.
Nothing is drawn beyond the measured range ``[x_min, x_n]``.

A *dominated* point (another point delivered both more interactivity and
more throughput) defines no step: were it one, the curve would dip below
what the system was measured to deliver at a higher interactivity, and a
Pareto curve (the best throughput at each interactivity) never falls as the
interactivity asked for falls.  It is still drawn, as an open marker, and
listed in the table.  This is also the frontier mlperf-viz, the MLPerf
Endpoints dashboard, draws (``docs/curves-and-submissions.md``, "The
pictures", works through a curve where the two readings differ).

**Offline** (spec §1.5, §2.1): a *dedicated* Offline run is no step; it is a
horizontal throughput ceiling labelled "Offline (dedicated)" on both
``system_tps`` charts, and its concurrency (the dataset size) is no load
level, so it has no marker on the concurrency charts.  An *elected* Offline
point (the ``C_max`` point) is drawn like any other and labelled Offline.

**A request-rate curve** (``"load": "rate"``, :mod:`mlpe_fast.sweep.rates`):
Poisson points at target rates, which the checker refuses (spec §2.4), so it
is no MLPerf curve and every chart says so.  Its charts: the same frontier of
``system_tps`` against ``tps_per_user``, throughput against latency
(``system_tps`` against ``ttft_p90_ms``), and ``system_tps``,
``ttft_p90_ms``, ``tps_per_user`` and the achieved ``qps`` against the
target rate (log axis).

**Missing values** (``null``, e.g. no TPOT for a non-streamed run): a point
is left out of each chart that needs one of its missing values, and kept in
the others and in the table.

**What the charts show**: the page's heading and the PNG's title name the
model, the system and the date of the curve (``pareto.json``'s ``model``,
``system``, ``date``).  A linear axis starts at zero unless the data sit in
its upper half, where zero would squeeze them into a sliver; it then fits
their range (at least 5 % of the largest value wide, so that noise is not
blown up into a slope).  Point labels are placed beside their markers where
they overlap no other label, marker or ceiling label and stay inside the
plot (:func:`place_labels`); a label with no such place is left out (the
hover details and the table still name the point).

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
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

import msgspec

from ..errors import UsageError
from .server_metrics import server_metrics_section

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = (
    "CEILING_COLOUR",
    "NOT_MLPERF",
    "REGION_COLOURS",
    "SERIES_COLOURS",
    "STEP_COLOUR",
    "Box",
    "Curve",
    "CurvePoint",
    "LoadKind",
    "ParetoSteps",
    "PlacedLabel",
    "Reports",
    "Series",
    "XMetric",
    "load_curve",
    "load_curve_file",
    "pareto_steps",
    "place_labels",
    "png_figure",
    "svg_label_size",
    "write_html",
    "write_png",
    "write_reports",
    "write_series_html",
    "write_series_png",
)

_NonNegative = Annotated[float, msgspec.Meta(ge=0)]

#: The Pareto chart's x axis (spec §1.5): ``tps_per_user``, or
#: ``e2e_avg_interactivity`` for an agentic benchmark.
XMetric = Literal["tps_per_user", "e2e_avg_interactivity"]

#: What a curve's points are levels of: fixed concurrency (an MLPerf curve)
#: or Poisson target rates (:mod:`mlpe_fast.sweep.rates`; no MLPerf curve).
LoadKind = Literal["concurrency", "rate"]

#: The axis name of each metric, with its unit.
_METRIC_NAMES: dict[str, str] = {
    "tps_per_user": "tps_per_user (tok/s per user)",
    "e2e_avg_interactivity": "e2e_avg_interactivity (tok/s of turn time)",
    "system_tps": "system_tps (tok/s)",
    "ttft_p90_ms": "ttft_p90_ms (ms)",
    "qps": "achieved qps (queries/s)",
}
_LEVEL_NAMES: dict[LoadKind, str] = {
    "concurrency": "concurrency (log scale)",
    "rate": "target rate (queries/s, log scale)",
}
#: What a rate curve's charts say, everywhere it shows (spec §2.4).
NOT_MLPERF = "Poisson rates: not an MLPerf curve"


class CurvePoint(msgspec.Struct, frozen=True):
    """One row of ``pareto.json`` (written by :mod:`mlpe_fast.sweep.runner`
    or :mod:`mlpe_fast.sweep.rates`).

    ``concurrency`` is a concurrency curve's level, ``target_qps`` a rate
    curve's (:func:`load_curve_file` checks that each point has its
    curve's); ``qps`` is the rate achieved.  ``offline`` is ``"none"`` for
    a fixed-load point, ``"elected"`` for the ``C_max`` point labelled
    Offline, ``"dedicated"`` for the run that issues the whole dataset at
    once (spec §2.1).  Metric values are ``None`` when the point has none
    (no TPOT without streaming, say); ``e2e_avg_interactivity`` is an
    agentic benchmark's alone.  ``basis`` says which figures they are (spec
    §1.4): the steady-state window's, or the whole run's.
    """

    concurrency: Annotated[int, msgspec.Meta(ge=1)] | None = None
    region: str = ""
    offline: Literal["none", "elected", "dedicated"] = "none"
    system_tps: _NonNegative | None = None
    tps_per_user: _NonNegative | None = None
    ttft_p90_ms: _NonNegative | None = None
    e2e_avg_interactivity: _NonNegative | None = None
    target_qps: Annotated[float, msgspec.Meta(gt=0)] | None = None
    qps: _NonNegative | None = None
    accuracy: bool = False
    folder: str = ""
    basis: Literal["steady_state", "total"] = "total"

    @property
    def level(self) -> float:
        """The point's load level: its target rate on a rate curve, else its concurrency."""
        if self.target_qps is not None:
            return self.target_qps
        assert self.concurrency is not None  # load_curve_file checked it
        return float(self.concurrency)

    @property
    def label(self) -> str:
        """The point's label on a chart: its concurrency, "Offline" for an
        elected Offline point (spec §1.5), or its target rate."""
        if self.target_qps is not None:
            return f"{self.target_qps:g}/s"
        if self.offline == "elected":
            return f"{self.concurrency} Offline"
        return str(self.concurrency)


class Curve(msgspec.Struct, frozen=True):
    """A whole ``pareto.json``: its points in file order, the Pareto chart's
    x metric (``tps_per_user`` when the file has none), what its points are
    levels of, and what the title names: the model, the system measured
    and the date (empty in files written before they were recorded)."""

    points: tuple[CurvePoint, ...]
    x_metric: XMetric = "tps_per_user"
    load: LoadKind = "concurrency"
    model: str = ""
    system: str = ""
    date: str = ""

    @property
    def heading(self) -> str:
        """The title: "<model> on <system>, <date>: N points", with what is known."""
        text = self.model or "curve"
        if self.system:
            text += f" on {self.system}"
        if self.date:
            text += f", {self.date}"
        kind = " (Poisson rates: not an MLPerf curve)" if self.load == "rate" else ""
        return f"{text}: {len(self.points)} points{kind}"


class Series(NamedTuple):
    """One curve on the charts: its name (empty for a curve drawn alone)
    and its colour (None: markers coloured by region, the step curve in
    :data:`STEP_COLOUR`, as a curve's own page draws it)."""

    name: str
    curve: Curve
    colour: str | None = None


class ParetoSteps(NamedTuple):
    """The primary chart's content (module docstring, spec §1.5).

    ``points`` are the points on the chart sorted by the x metric (then
    concurrency); ``frontier`` those that define a step, in the same order;
    ``vertices`` the step path as ``(x metric, system_tps)`` pairs;
    ``ceilings`` the dedicated Offline points with a ``system_tps``;
    ``left_out`` the other points, which lack a value.
    """

    points: tuple[CurvePoint, ...]
    frontier: tuple[CurvePoint, ...]
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
#: One colour per curve when several are compared (:mod:`.compare`).
SERIES_COLOURS = (
    "#1e88e5",
    "#e53935",
    "#43a047",
    "#8e24aa",
    "#fb8c00",
    "#00897b",
    "#6d4c41",
    "#3949ab",
)
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
            ``x_metric`` among them, or a point without its curve's level).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the curve file {path}: {exc.strerror or exc}") from None
    try:
        curve = msgspec.json.decode(data, type=Curve)
    except msgspec.DecodeError as exc:
        reason = " ".join(str(exc).split())
        raise UsageError(f"{path} is not a curve file (pareto.json): {reason}") from None
    level = "target_qps" if curve.load == "rate" else "concurrency"
    for k, point in enumerate(curve.points):
        if getattr(point, level) is None:
            raise UsageError(
                f"{path} is not a curve file (pareto.json): point {k} of a {curve.load} "
                f"curve has no {level}"
            )
    return curve


def _curve_of(
    points: Sequence[CurvePoint] | Curve, x_metric: XMetric, load: LoadKind = "concurrency"
) -> Curve:
    if isinstance(points, Curve):
        return points
    return Curve(tuple(points), x_metric=x_metric, load=load)


def pareto_steps(
    points: Sequence[CurvePoint], *, x_metric: XMetric = "tps_per_user"
) -> ParetoSteps:
    """The frontier and the Offline ceilings of the primary chart, with
    ``x_metric`` on its x axis (module docstring: at each x, the highest
    ``system_tps`` of a point at least that interactive)."""
    x_of = _metric(x_metric)
    on_chart: list[CurvePoint] = []
    ceilings: list[CurvePoint] = []
    left_out: list[CurvePoint] = []
    for point in points:
        if point.offline == "dedicated":
            (ceilings if point.system_tps is not None else left_out).append(point)
        elif point.system_tps is None or getattr(point, x_metric) is None:
            left_out.append(point)
        else:
            on_chart.append(point)
    on_chart.sort(key=lambda p: (x_of(p), p.level))
    # From the most interactive point down: a point is on the frontier when
    # it delivered more throughput than every point more interactive than it.
    frontier: list[CurvePoint] = []
    for point in sorted(on_chart, key=lambda p: (-x_of(p), -_y(p), p.level)):
        if not frontier or _y(point) > _y(frontier[-1]):
            frontier.append(point)
    frontier.reverse()
    vertices: list[tuple[float, float]] = []

    def add(vertex: tuple[float, float]) -> None:
        if not vertices or vertices[-1] != vertex:
            vertices.append(vertex)

    if frontier:
        add((x_of(on_chart[0]), _y(frontier[0])))
    for k, point in enumerate(frontier):
        if k:
            add((x_of(frontier[k - 1]), _y(point)))
        add((x_of(point), _y(point)))
    return ParetoSteps(
        tuple(on_chart), tuple(frontier), tuple(vertices), tuple(ceilings), tuple(left_out)
    )


def _metric(name: str) -> Callable[[CurvePoint], float]:
    """Reads one metric (or the load level) of the points a chart shows,
    which all have it."""
    if name == "level":
        return lambda point: point.level

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


def _nice_step(raw: float) -> float:
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))


def _linear_axis(values: Sequence[float]) -> _Axis:
    """About five ticks of 1, 2, 2.5 or 5 times a power of ten, from 0
    (throughputs and latencies are compared with zero) to a round number
    above the largest value; when the values sit in the upper half of that
    range (and differ), around them instead, at least 5 % of the largest
    value wide (module docstring)."""
    top = max(values, default=0.0)
    bottom = min(values, default=0.0)
    if top <= 0 or bottom <= top / 2 or bottom == top:
        top = top * 1.05 if top > 0 else 1.0
        step = _nice_step(top / 5)
        lo, hi = 0.0, math.ceil(top / step - 1e-9) * step
    else:
        span = max(top - bottom, 0.05 * top)
        middle = (top + bottom) / 2
        low, high = middle - 0.55 * span, middle + 0.55 * span
        step = _nice_step((high - low) / 5)
        lo = max(0.0, math.floor(low / step + 1e-9) * step)
        hi = math.ceil(high / step - 1e-9) * step
    count = round((hi - lo) / step)
    # Rounded to the step's precision, so 3 * 0.2 is the tick 0.6.
    digits = max(0, 2 - math.floor(math.log10(step)))
    ticks = tuple(round(lo + k * step, digits) for k in range(count + 1))
    return _Axis(ticks[0], ticks[-1], ticks, False)


def _log_axis(values: Sequence[float]) -> _Axis:
    """A load level on a log axis: a third of an octave beyond the extreme
    points, ticks at powers of two (every k-th one past nine ticks)."""
    lo = min(values, default=1.0)
    hi = max(values, default=1.0)
    lo_exp = math.log2(lo) - 1 / 3
    hi_exp = math.log2(hi) + 1 / 3
    powers = list(range(math.ceil(lo_exp), math.floor(hi_exp) + 1))
    stride = max(1, math.ceil(len(powers) / 9))
    ticks = tuple(2.0**p for p in powers if p % stride == 0) or (2.0 ** powers[0],)
    return _Axis(2.0**lo_exp, 2.0**hi_exp, ticks, True)


def _tick_text(value: float, axis: _Axis) -> str:
    if value == int(value):
        return f"{value:,.0f}"
    if axis.log:
        return f"{value:g}"
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


# --- the charts, independent of the renderer --------------------------------------------


class _Layer(NamedTuple):
    """One series on one chart: its points (``frontier``: those that define
    a step, on the Pareto chart), the step path and its ceilings."""

    series: Series
    points: tuple[CurvePoint, ...]
    frontier: frozenset[int]
    steps: tuple[tuple[float, float], ...]
    ceilings: tuple[CurvePoint, ...]


class _Chart(NamedTuple):
    """One chart, independent of the renderer."""

    key: str
    title: str
    x_name: str
    y_name: str
    x_of: Callable[[CurvePoint], float]
    y_of: Callable[[CurvePoint], float]
    x_axis: _Axis
    y_axis: _Axis
    layers: tuple[_Layer, ...]

    @property
    def empty(self) -> bool:
        return not any(layer.points or layer.ceilings for layer in self.layers)


class _Spec(NamedTuple):
    """What one chart plots: x and y (a metric, or ``level``), and whether
    it is the Pareto chart (frontier and ceilings) or shows the ceilings."""

    key: str
    title: str
    x: str
    y: str
    pareto: bool = False
    ceilings: bool = False


def _specs(curve: Curve) -> list[_Spec]:
    """The charts of a curve, in reading order: spec §1.5's four for a
    concurrency curve, six for a rate curve (module docstring)."""
    x_metric = curve.x_metric
    if curve.load == "rate":
        return [
            _Spec("pareto", f"system_tps vs {x_metric} ({NOT_MLPERF})", x_metric, "system_tps",
                  pareto=True),
            _Spec("latency", "system_tps vs ttft_p90_ms (throughput vs latency)", "ttft_p90_ms",
                  "system_tps"),
            _Spec("system_tps", "system_tps vs target rate", "level", "system_tps"),
            _Spec("ttft_p90_ms", "ttft_p90_ms vs target rate", "level", "ttft_p90_ms"),
            _Spec(x_metric, f"{x_metric} vs target rate", "level", x_metric),
            _Spec("qps", "achieved qps vs target rate", "level", "qps"),
        ]  # fmt: skip
    return [
        _Spec("pareto", f"Pareto: system_tps vs {x_metric} (official step curve)", x_metric,
              "system_tps", pareto=True),
        _Spec("system_tps", "system_tps vs concurrency", "level", "system_tps", ceilings=True),
        _Spec("ttft_p90_ms", "ttft_p90_ms vs concurrency", "level", "ttft_p90_ms"),
        _Spec(x_metric, f"{x_metric} vs concurrency", "level", x_metric),
    ]  # fmt: skip


def _has(point: CurvePoint, name: str) -> bool:
    return name == "level" or getattr(point, name) is not None


def _charts(series: Sequence[Series]) -> list[_Chart]:
    """The charts of the first series' kind, each with a layer per series
    (they are all of one kind: :mod:`.compare` checks)."""
    first = series[0].curve
    load: LoadKind = first.load
    charts = []
    for spec in _specs(first):
        layers = []
        for one in series:
            curve = one.curve
            loaded = [p for p in curve.points if p.offline != "dedicated"]
            if spec.pareto:
                steps = pareto_steps(curve.points, x_metric=curve.x_metric)
                frontier = frozenset(id(p) for p in steps.frontier)
                layers.append(_Layer(one, steps.points, frontier, steps.vertices, steps.ceilings))
                continue
            shown = [p for p in loaded if _has(p, spec.x) and _has(p, spec.y)]
            shown.sort(key=lambda p: (p.level, p.concurrency or 0))
            ceilings = tuple(
                p for p in curve.points
                if spec.ceilings and p.offline == "dedicated" and p.system_tps is not None
            )  # fmt: skip
            layers.append(_Layer(one, tuple(shown), frozenset(), (), ceilings))
        x_of, y_of = _metric(spec.x), _metric(spec.y)
        xs = [x_of(p) for layer in layers for p in layer.points]
        ys = [y_of(p) for layer in layers for p in layer.points]
        ys += [_y(p) for layer in layers for p in layer.ceilings]
        charts.append(
            _Chart(
                spec.key,
                spec.title,
                _LEVEL_NAMES[load] if spec.x == "level" else _METRIC_NAMES[spec.x],
                _METRIC_NAMES[spec.y],
                x_of,
                y_of,
                _log_axis(xs) if spec.x == "level" else _linear_axis(xs),
                _linear_axis(ys),
                tuple(layers),
            )
        )
    return charts


#: The markers of a request-rate curve's points (their "region" is ``poisson``).
_RATE_COLOUR = "#3949ab"


def _region_colours(points: Sequence[CurvePoint]) -> dict[str, str]:
    """A colour for every region of the curve, known regions first in the
    checker's order, then the others in order of appearance."""
    known = {**REGION_COLOURS, "poisson": _RATE_COLOUR}
    present = [r for r in known if any(p.region == r for p in points)]
    extra = list(dict.fromkeys(p.region for p in points if p.region not in known))
    colours = {r: known[r] for r in present}
    for k, region in enumerate(extra):
        colours[region] = _EXTRA_COLOURS[k % len(_EXTRA_COLOURS)]
    return colours


class _Colours(NamedTuple):
    """The colours of a drawing: markers by region for a series without
    its own colour, and the step and ceiling colours of each series."""

    regions: dict[str, str]

    def marker(self, layer: _Layer, point: CurvePoint) -> str:
        return layer.series.colour or self.regions[point.region]

    @staticmethod
    def steps(layer: _Layer) -> str:
        return layer.series.colour or STEP_COLOUR

    @staticmethod
    def ceiling(layer: _Layer) -> str:
        return layer.series.colour or CEILING_COLOUR


def _colours(series: Sequence[Series]) -> _Colours:
    regional = [
        p for s in series if s.colour is None for p in s.curve.points if p.offline != "dedicated"
    ]
    return _Colours(_region_colours(regional))


def _ceiling_label(layer: _Layer) -> str:
    name = layer.series.name
    return f"{name}: {_CEILING_LABEL}" if name else _CEILING_LABEL


def _step_name(series: Sequence[Series]) -> str:
    if series[0].curve.load == "rate":
        return f"frontier ({NOT_MLPERF})"
    return "official step curve"


# --- label placement --------------------------------------------------------------------


class Box(NamedTuple):
    """A rectangle in pixels, y growing downwards."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return (
            self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1
        )

    def inside(self, other: Box) -> bool:
        return (
            self.x0 >= other.x0 and self.x1 <= other.x1 and self.y0 >= other.y0
            and self.y1 <= other.y1
        )  # fmt: skip


class PlacedLabel(NamedTuple):
    """Where a label goes: its box and the side of the box its text is
    anchored to (``start``: the left edge, ``end``: the right, ``middle``)."""

    box: Box
    anchor: Literal["start", "middle", "end"]


# Where a label may sit, in order of preference: (horizontal side, vertical
# side) of its marker, -1 left/above, 0 centred, +1 right/below; each tried
# close first, then further out.
_SIDES = ((1, -1), (-1, -1), (1, 1), (-1, 1), (0, -1), (0, 1), (1, 0), (-1, 0))
_REACHES = (0.0, 7.0, 15.0)


def place_labels(
    marks: Sequence[tuple[float, float, str]],
    area: Box,
    size: Callable[[str], tuple[float, float]],
    *,
    radius: float,
    taken: Sequence[Box] = (),
) -> list[PlacedLabel | None]:
    """A place for each mark's label (``(x, y, text)`` in pixels), or None
    where none is free: inside ``area``, clear of every other label, of
    every marker (a square of ``radius``) and of the ``taken`` boxes.
    ``size`` gives a text's width and height in pixels.  Greedy, in the
    order given (module docstring)."""
    markers = [Box(x - radius, y - radius, x + radius, y + radius) for x, y, _ in marks]
    placed = list(taken)
    out: list[PlacedLabel | None] = []
    for k, (x, y, text) in enumerate(marks):
        width, height = size(text)
        found = None
        for reach in _REACHES:
            for side, level in _SIDES:
                box = _candidate(x, y, width, height, side, level, radius + 1 + reach)
                if not box.inside(area):
                    continue
                if any(box.overlaps(b) for b in placed):
                    continue
                if any(box.overlaps(m) for j, m in enumerate(markers) if j != k):
                    continue
                anchor: Literal["start", "middle", "end"] = (
                    "start" if side > 0 else "end" if side < 0 else "middle"
                )
                found = PlacedLabel(box, anchor)
                break
            if found is not None:
                break
        if found is not None:
            placed.append(found.box)
        out.append(found)
    return out


def _candidate(
    x: float, y: float, width: float, height: float, side: int, level: int, off: float
) -> Box:
    # A corner keeps the box's near corner off the marker's circle; a side
    # or the top and bottom keep its near edge ``off`` from the centre.
    corner = off * 0.75 if side and level else off
    if side > 0:
        x0 = x + corner
    elif side < 0:
        x0 = x - corner - width
    else:
        x0 = x - width / 2
    if level < 0:
        y0 = y - corner - height
    elif level > 0:
        y0 = y + corner
    else:
        y0 = y - height / 2
    return Box(x0, y0, x0 + width, y0 + height)


# --- PNG ----------------------------------------------------------------------------------


def write_png(
    points: Sequence[CurvePoint] | Curve,
    path: str | Path,
    *,
    x_metric: XMetric = "tps_per_user",
) -> None:
    """Writes the charts of one curve (a :class:`Curve`, or its points with
    ``x_metric`` on the Pareto chart's x axis) as one PNG, 1200 px wide and
    450 px a row of two charts.

    Raises:
        UsageError: matplotlib is not installed.
    """
    write_series_png([Series("", _curve_of(points, x_metric))], path)


def write_series_png(series: Sequence[Series], path: str | Path, *, heading: str = "") -> None:
    """Writes the charts of one or more curves (:func:`png_figure`) as a PNG.

    Raises:
        UsageError: matplotlib is not installed.
    """
    png_figure(series, heading=heading).savefig(Path(path), format="png")


def png_figure(series: Sequence[Series], *, heading: str = "") -> Figure:
    """The PNG's figure: the charts in a grid of two columns, each series
    a layer, the labels placed by :func:`place_labels` on the laid-out
    axes (matplotlib measures each label), the legend below.

    matplotlib is imported here, on its Agg canvas (no display, no pyplot
    state), because it is an optional dependency.

    Raises:
        UsageError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.font_manager import FontProperties
        from matplotlib.lines import Line2D
        from matplotlib.ticker import NullLocator
    except ImportError:
        raise UsageError(f"the PNG charts (pareto.png) need matplotlib: {_PLOTS_HINT}") from None

    colours = _colours(series)
    charts = _charts(series)
    rows = math.ceil(len(charts) / 2)
    dpi = 100
    fig = Figure(figsize=(12, 4.5 * rows), dpi=dpi, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    fig.suptitle(_mpl_text(heading or _heading(series)), fontsize=13)
    axes = list(fig.subplots(rows, 2, squeeze=False).flat)
    for ax in axes[len(charts) :]:
        ax.set_visible(False)
    for ax, chart in zip(axes, charts, strict=False):
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
        for layer in chart.layers:
            if layer.steps:
                xs, ys = zip(*layer.steps, strict=True)
                ax.plot(xs, ys, color=colours.steps(layer), linewidth=1.8, zorder=2)
            for ceiling in layer.ceilings:
                ax.axhline(_y(ceiling), color=colours.ceiling(layer), linestyle="--", linewidth=1.4)
            for point in layer.points:
                colour = colours.marker(layer, point)
                dominated = bool(layer.frontier) and id(point) not in layer.frontier
                ax.scatter(
                    [chart.x_of(point)],
                    [chart.y_of(point)],
                    s=36,
                    facecolors="white" if dominated else colour,
                    edgecolors=colour,
                    linewidths=1.5 if dominated else 0.5,
                    zorder=3,
                )
        if chart.empty:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#757575")
    handles = _png_legend(series, colours, Line2D)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6))
    # The layout is final now; the labels are placed on it and it is kept.
    canvas.draw()  # type: ignore[no-untyped-call]
    fig.set_layout_engine("none")
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    label_font = FontProperties(size=8)
    height_px = fig.get_figheight() * dpi

    def size(text: str) -> tuple[float, float]:
        width, height, _ = renderer.get_text_width_height_descent(
            _mpl_text(text), label_font, ismath=False
        )
        return width + 1, height + 1

    pixels = _pixels_from_top(height_px)
    for ax, chart in zip(axes, charts, strict=False):
        window = ax.get_window_extent(renderer)
        area = Box(
            window.x0 + 2, height_px - window.y1 + 2, window.x1 - 2, height_px - window.y0 - 2
        )
        taken = []
        for layer in chart.layers:
            for ceiling in layer.ceilings:
                _, y_display = ax.transData.transform((chart.x_axis.lo, _y(ceiling)))
                text = _ceiling_label(layer)
                width, height = size(text)
                baseline = height_px - y_display - 3
                taken.append(Box(area.x0 + 4, baseline - height, area.x0 + 4 + width, baseline))
                ax.annotate(
                    _mpl_text(text),
                    (area.x0 + 4, baseline),
                    xycoords=pixels,
                    color=colours.ceiling(layer),
                    fontsize=8,
                    va="bottom",
                )

        def to_pixels(x: float, y: float, ax: Any = ax) -> tuple[float, float]:
            px, py = ax.transData.transform((x, y))
            return float(px), float(height_px - py)

        marks, _ = _marks(chart, to_pixels)
        places = place_labels(marks, area, size, radius=5, taken=taken)
        for (_, _, text), placed in zip(marks, places, strict=True):
            if placed is None:
                continue
            ax.annotate(
                _mpl_text(text),
                (_anchor_x(placed), placed.box.y1),
                xycoords=pixels,
                ha={"start": "left", "end": "right", "middle": "center"}[placed.anchor],
                va="bottom",
                fontsize=8,
                color="#37474f",
                gid="point-label",
            )
    return fig


def _pixels_from_top(height_px: float) -> Any:
    """An annotation coordinate system in pixels from the figure's top left
    (the placement's), as matplotlib takes one: a function of the renderer
    that gives the transform to display coordinates."""
    from matplotlib.transforms import Affine2D

    flip = Affine2D().scale(1, -1).translate(0, height_px)
    return lambda renderer: flip


def _anchor_x(placed: PlacedLabel) -> float:
    """Where a placed label's text is anchored along x."""
    if placed.anchor == "start":
        return placed.box.x0
    if placed.anchor == "end":
        return placed.box.x1
    return (placed.box.x0 + placed.box.x1) / 2


def _png_legend(series: Sequence[Series], colours: _Colours, line: Any) -> list[Any]:
    handles = [
        line([], [], marker="o", linestyle="", color=colour, label=_mpl_text(region))
        for region, colour in colours.regions.items()
    ]
    for one in series:
        if one.colour is not None:
            handles.append(line([], [], marker="o", color=one.colour, label=_mpl_text(one.name)))
    if any(one.colour is None for one in series):
        handles.append(line([], [], color=STEP_COLOUR, label=_mpl_text(_step_name(series))))
    if any(_dominated(one) for one in series):
        handles.append(
            line([], [], marker="o", linestyle="", color="#607d8b", markerfacecolor="white",
                 label="open: dominated (no step)")
        )  # fmt: skip
    if any(p.offline == "dedicated" and p.system_tps is not None for s in series
           for p in s.curve.points if s.colour is None):  # fmt: skip
        handles.append(line([], [], color=CEILING_COLOUR, linestyle="--", label=_CEILING_LABEL))
    return handles


def _dominated(series: Series) -> bool:
    steps = pareto_steps(series.curve.points, x_metric=series.curve.x_metric)
    return len(steps.frontier) < len(steps.points)


def _mpl_text(text: str) -> str:
    """A label matplotlib shows as is: ``$`` would start mathtext."""
    return text.replace("$", r"\$")


def _marks(
    chart: _Chart, to_pixels: Callable[[float, float], tuple[float, float]]
) -> tuple[list[tuple[float, float, str]], list[tuple[_Layer, CurvePoint]]]:
    """Every marker of a chart in pixels with its label, in the order
    labels are placed: by x, so that neighbours are placed in turn."""
    found = []
    for layer in chart.layers:
        prefix = f"{layer.series.name}: " if layer.series.name else ""
        for point in layer.points:
            x, y = to_pixels(chart.x_of(point), chart.y_of(point))
            found.append(((x, y, prefix + point.label), (layer, point)))
    found.sort(key=lambda item: (item[0][0], item[0][1]))
    return [m for m, _ in found], [o for _, o in found]


def _heading(series: Sequence[Series]) -> str:
    if len(series) == 1:
        return series[0].curve.heading
    return "compare: " + ", ".join(s.name for s in series)


# --- HTML ---------------------------------------------------------------------------------

_W, _H = 560, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 68, 18, 32, 46
_RADIUS = 5
#: The SVG labels' font size, and the width of one character of it: an
#: upper bound on system-ui's digits and letters at 10 px.
LABEL_FONT_PX = 10
LABEL_CHAR_PX = 6.2


def _px(value: float) -> str:
    return f"{value:.2f}"


def svg_label_size(text: str) -> tuple[float, float]:
    """The box an SVG point label takes, in pixels (an estimate from above:
    the page has no font of its own to measure)."""
    return len(text) * LABEL_CHAR_PX, float(LABEL_FONT_PX + 2)


def _svg(chart: _Chart, index: dict[tuple[int, int], int], colours: _Colours) -> str:
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
    taken: list[Box] = []
    for layer in chart.layers:
        if layer.steps:
            path = " ".join(
                f"{'M' if k == 0 else 'L'} {_px(sx(x))} {_px(sy(y))}"
                for k, (x, y) in enumerate(layer.steps)
            )
            out.append(f'<path class="steps" stroke="{colours.steps(layer)}" d="{path}"/>')
        for ceiling in layer.ceilings:
            y_px = sy(_y(ceiling))
            label = _ceiling_label(layer)
            colour = colours.ceiling(layer)
            tip = f"{label}: system_tps {_y(ceiling):,.1f} (r{ceiling.concurrency})"
            taken.append(Box(left + 6, y_px - 4 - 12, left + 6 + len(label) * 6.6, y_px - 4))
            out.append(
                f'<g class="ceiling"><line x1="{left}" y1="{_px(y_px)}" x2="{right}" '
                f'y2="{_px(y_px)}" stroke="{colour}"><title>{e(tip)}</title></line>'
                f'<text x="{left + 6}" y="{_px(y_px)}" dy="-4" fill="{colour}">'
                f"{e(label)}</text></g>"
            )
    marks, owners = _marks(chart, lambda x, y: (sx(x), sy(y)))
    area = Box(left + 1, top + 1, right - 1, bottom - 1)
    places = place_labels(marks, area, svg_label_size, radius=_RADIUS + 1, taken=taken)
    for (mx, my, text), (layer, point), placed in zip(marks, owners, places, strict=True):
        colour = colours.marker(layer, point)
        dominated = bool(layer.frontier) and id(point) not in layer.frontier
        fill = "#ffffff" if dominated else colour
        details = _describe(point, layer.series, dominated=dominated)
        cls = "pt dominated" if dominated else "pt"
        label = ""
        if placed is not None:
            label = (
                f'<text class="label" x="{_px(_anchor_x(placed))}" y="{_px(placed.box.y1 - 3)}" '
                f'text-anchor="{placed.anchor}">{e(text)}</text>'
            )
        out.append(
            f'<g class="{cls}"><circle data-i="{index[(id(layer.series), id(point))]}" '
            f'cx="{_px(mx)}" cy="{_px(my)}" r="{_RADIUS}" fill="{fill}" stroke="{colour}">'
            f"<title>{e(details)}</title></circle>{label}</g>"
        )
    if chart.empty:
        out.append(
            f'<text class="empty" x="{(left + right) / 2}" y="{(top + bottom) / 2}" '
            f'text-anchor="middle">no data</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _number(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.1f}{unit}"


def _describe(point: CurvePoint, series: Series, *, dominated: bool = False) -> str:
    x_metric = series.curve.x_metric
    offline = "" if point.offline == "none" else f" (Offline, {point.offline})"
    # An agentic point's x value leads; tps_per_user stays, as on the table.
    interactivity = (
        f"e2e_avg_interactivity {_number(point.e2e_avg_interactivity)}; "
        if x_metric == "e2e_avg_interactivity"
        else ""
    )
    if point.target_qps is not None:
        load = f"target rate {point.target_qps:g}/s; achieved qps {_number(point.qps)}"
    else:
        load = f"concurrency {point.concurrency}{offline}; region {point.region}"
    name = f"{series.name}: " if series.name else ""
    return (
        f"{name}{load}; "
        f"system_tps {_number(point.system_tps)}; {interactivity}"
        f"tps_per_user {_number(point.tps_per_user)}; "
        f"TTFT p90 {_number(point.ttft_p90_ms, ' ms')}"
        + ("; dominated: no step" if dominated else "")
    )


def _table(series: Sequence[Series]) -> str:
    e = html.escape
    first = series[0].curve
    agentic = first.x_metric == "e2e_avg_interactivity"
    rate = first.load == "rate"
    named = any(s.name for s in series)
    head = (
        *(("curve",) if named else ()),
        *(("target rate (/s)", "achieved qps") if rate else ("concurrency", "region", "Offline")),
        "system_tps",
        *(("e2e_avg_interactivity",) if agentic else ()),
        "tps_per_user",
        "TTFT p90 (ms)",
        "accuracy run",
        "folder",
    )
    rows = ["<tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"]
    for one in series:
        for p in sorted(one.curve.points, key=lambda p: (p.offline == "dedicated", p.level)):
            load = (
                ((f"{p.level:g}", "num"), (_number(p.qps), "num"))
                if rate
                else (
                    (str(p.concurrency), "num"),
                    (p.region, ""),
                    ("" if p.offline == "none" else p.offline, ""),
                )
            )
            cells = (
                *(((one.name, ""),) if named else ()),
                *load,
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
.sw.ring { width: 8px; border-radius: 50%; border: 1.5px solid #607d8b; background: #ffffff; }
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
svg circle { stroke-width: 1; cursor: pointer; }
svg .dominated circle { stroke-width: 1.5; }
#table { margin-top: 12px; }
table { border-collapse: collapse; }
th, td { border: 1px solid #e0e0e0; padding: 3px 8px; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
#tip { position: fixed; pointer-events: none; background: #263238; color: #ffffff;
       padding: 6px 8px; border-radius: 4px; font-size: 12px; white-space: pre; }
"""

# Reads the points from the JSON block and writes them with textContent
# only: no value from the file is ever parsed as markup.  Each point says
# its curve's x metric, whose hover details add e2e_avg_interactivity for
# an agentic curve (module docstring), and its curve's name when several
# are compared.
_SCRIPT = """
(function () {
  "use strict";
  var data = document.getElementById("curve-data");
  var points = JSON.parse(data.textContent);
  var tip = document.getElementById("tip");
  function num(v, unit) {
    return v === null || v === undefined ? "n/a"
      : v.toLocaleString("en-US", {maximumFractionDigits: 1}) + (unit || "");
  }
  function show(circle, event) {
    var p = points[Number(circle.getAttribute("data-i"))];
    var rows = [];
    if (p.series) {
      rows.push(["curve", p.series]);
    }
    if (p.target_qps !== null && p.target_qps !== undefined) {
      rows.push(["target rate", p.target_qps + "/s"], ["achieved qps", num(p.qps)]);
    } else {
      rows.push(["concurrency", p.concurrency
        + (p.offline === "none" ? "" : "  (Offline, " + p.offline + ")")],
        ["region", p.region]);
    }
    rows.push(["system_tps", num(p.system_tps)]);
    if (p.x_metric === "e2e_avg_interactivity") {
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
    points: Sequence[CurvePoint] | Curve,
    path: str | Path,
    *,
    x_metric: XMetric = "tps_per_user",
    extra: str = "",
) -> None:
    """Writes the charts of one curve (a :class:`Curve`, or its points with
    ``x_metric`` on the Pareto chart's x axis), the table and hover details
    as one HTML file that opens offline (module docstring); ``extra``: a
    section after the charts (the server metrics, ``server_metrics.py``)."""
    write_series_html([Series("", _curve_of(points, x_metric))], path, extra=extra)


def write_series_html(
    series: Sequence[Series], path: str | Path, *, heading: str = "", extra: str = ""
) -> None:
    """Writes the charts of one or more curves of one kind, each a layer
    (:class:`Series`), with the table and hover details as one HTML file
    that opens offline (module docstring); ``extra`` after the charts."""
    e = html.escape
    index: dict[tuple[int, int], int] = {}
    data: list[dict[str, Any]] = []
    for one in series:
        for point in one.curve.points:
            index[(id(one), id(point))] = len(data)
            row = msgspec.to_builtins(point)
            row["x_metric"] = one.curve.x_metric
            if one.name:
                row["series"] = one.name
            data.append(row)
    colours = _colours(series)
    charts = _charts(series)
    toggles = [
        f'<label><input type="checkbox" data-show="chart-{e(c.key)}" checked> {e(c.key)}</label>'
        for c in charts
    ]
    toggles.append('<label><input type="checkbox" data-show="table"> table</label>')
    legend = [
        f'<span><i class="sw" style="background:{colour}"></i>{e(region)}</span>'
        for region, colour in colours.regions.items()
    ]
    legend += [
        f'<span><i class="sw line" style="background:{one.colour}"></i>{e(one.name)}</span>'
        for one in series
        if one.colour is not None
    ]
    if any(one.colour is None for one in series):
        legend.append(
            f'<span><i class="sw line" style="background:{STEP_COLOUR}"></i>'
            f"{e(_step_name(series))}</span>"
        )
    if any(_dominated(one) for one in series):
        legend.append('<span><i class="sw ring"></i>open: dominated (no step)</span>')
    if any(
        p.offline == "dedicated" and p.system_tps is not None
        for s in series
        if s.colour is None
        for p in s.curve.points
    ):
        legend.append(f'<span><i class="sw dash"></i>{_CEILING_LABEL} ceiling</span>')
    figures = [f'<figure id="chart-{e(c.key)}">{_svg(c, index, colours)}</figure>' for c in charts]
    title = heading or _heading(series)
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mlpe-fast: {e(title)}</title>
<style>{_STYLE.replace("CEILING", CEILING_COLOUR)}</style>
</head>
<body>
<header>
<h1>{e(title)}</h1>
<nav>{"".join(toggles)}</nav>
<div class="legend">{"".join(legend)}</div>
</header>
<main>
{chr(10).join(figures)}
</main>
{extra}
<section id="table" hidden>
{_table(series)}
</section>
<div id="tip" hidden></div>
<script type="application/json" id="curve-data" \
data-x-metric="{e(series[0].curve.x_metric)}">{_json_for_script(data)}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""
    Path(path).write_text(page, encoding="utf-8")


# --- both ---------------------------------------------------------------------------------


def _point_title(point: CurvePoint) -> str:
    if point.target_qps is not None:
        return f"target {point.target_qps:g} queries/s"
    return f"concurrency {point.label}"


def _folder(root: Path, folder: str) -> Path:
    """A point's folder as ``pareto.json`` names it, or beside the file
    when the curve was moved."""
    path = Path(folder)
    return path if path.is_dir() else root / path.name


def write_reports(report_dir: str | Path) -> Reports:
    """Reads ``report_dir/pareto.json`` (its points and x metric) and writes
    ``pareto.html`` (with each point's server metrics, where its folder
    has them) and, when matplotlib is installed, ``pareto.png`` beside
    it; without matplotlib the PNG is skipped and a note says how to get it.

    Raises:
        UsageError: ``pareto.json`` is missing or malformed.
    """
    root = Path(report_dir)
    curve = load_curve_file(root / "pareto.json")
    html_path = root / "pareto.html"
    folders = [(_point_title(p), _folder(root, p.folder)) for p in curve.points if p.folder]
    write_html(curve, html_path, extra=server_metrics_section(folders))
    png_path = root / "pareto.png"
    try:
        write_png(curve, png_path)
    except UsageError as exc:  # matplotlib is missing: the page alone still shows everything
        return Reports(html_path, None, (f"{exc}; wrote pareto.html only",))
    return Reports(html_path, png_path, ())
