"""The curve's report (spec §1.5): the step geometry worked out by hand, the
Offline ceiling, missing values, escaping, a self-contained page and the PNG.

The hand-worked curve: four points at concurrency 1, 4, 16, 64 with
tps_per_user 100, 60, 30, 10 and system_tps 100, 240, 480, 640, and a dedicated
Offline run at 800 tok/s.  Sorted by tps_per_user, each point's throughput is
held leftwards to its neighbour, so the steps go (10, 640) down to (10, 480),
across to (30, 480), down to (30, 240), across to (60, 240), down to
(60, 100), across to (100, 100).

On the page, a chart is 560 x 360 px with its plot area from x = 68 to 542 and
from y = 32 to 314.  The tps_per_user axis ends at 125 (ticks of 25 above
105 = 100 * 1.05), so x(v) = 68 + v * 474 / 125; the system_tps axis ends at
1000 (ticks of 200 above 840 = 800 * 1.05), so y(v) = 314 - v * 282 / 1000.

The hand-worked agentic curve (``"x_metric": "e2e_avg_interactivity"``, spec
§1.5; no Offline point): concurrency 2, 8, 32, 128 with e2e_avg_interactivity
40, 30, 15, 5 and system_tps 50, 180, 400, 560.  Their tps_per_user, 45, 50,
20, 8, would order 2 and 8 the other way round, so the order shows which
metric the steps use.  Sorted by e2e_avg_interactivity the steps go (5, 560)
down to (5, 400), across to (15, 400), down to (15, 180), across to
(30, 180), down to (30, 50), across to (40, 50).  On the page its x axis ends
at 50 (ticks of 10 above 42 = 40 * 1.05), so x(v) = 68 + v * 474 / 50; its
system_tps axis at 600 (ticks of 200 above 588 = 560 * 1.05), so
y(v) = 314 - v * 282 / 600.
"""

from __future__ import annotations

import html
import json
import re
import struct
import sys
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.errors import UsageError
from mlpe_fast.report import pareto
from mlpe_fast.report.pareto import (
    Curve,
    CurvePoint,
    load_curve,
    load_curve_file,
    pareto_steps,
    write_html,
    write_png,
    write_reports,
)


def row(concurrency: int, tpu: float | None, tps: float | None, **extra: Any) -> dict[str, Any]:
    """A ``pareto.json`` row as the sweep runner writes it."""
    return {
        "concurrency": concurrency,
        "region": extra.get("region", "low_latency"),
        "offline": extra.get("offline", "none"),
        "system_tps": tps,
        "tps_per_user": tpu,
        "ttft_p90_ms": extra.get("ttft", 10.0 * concurrency),
        "e2e_avg_interactivity": extra.get("e2e"),
        "accuracy": extra.get("accuracy", False),
        "folder": extra.get("folder", f"/runs/r{concurrency}"),
    }


HAND_ROWS = [
    row(1, 100, 100, region="low_latency"),
    row(4, 60, 240, region="low_concurrency"),
    row(16, 30, 480, region="med_concurrency"),
    row(64, 10, 640, region="high_concurrency", offline="elected"),
    row(500, None, 800, region="submitters_choice", offline="dedicated", ttft=5000.0),
]


AGENTIC: pareto.XMetric = "e2e_avg_interactivity"

AGENTIC_ROWS = [
    row(2, 45, 50, e2e=40, region="low_latency"),
    row(8, 50, 180, e2e=30, region="low_concurrency"),
    row(32, 20, 400, e2e=15, region="med_concurrency"),
    row(128, 8, 560, e2e=5, region="high_concurrency"),
]


def write_curve(folder: Path, rows: list[dict[str, Any]], x_metric: str | None = None) -> Path:
    """A ``pareto.json``; without ``x_metric`` the key is absent, as in the
    files written before agentic curves."""
    path = folder / "pareto.json"
    content: dict[str, Any] = {"points": rows}
    if x_metric is not None:
        content["x_metric"] = x_metric
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


def curve(tmp_path: Path, rows: list[dict[str, Any]]) -> list[CurvePoint]:
    return load_curve(write_curve(tmp_path, rows))


# --- loading ------------------------------------------------------------------------------


def test_load_curve_reads_the_runner_rows_with_nulls(tmp_path: Path) -> None:
    points = curve(tmp_path, [*HAND_ROWS, row(8, None, None, ttft=None)])
    assert [p.concurrency for p in points] == [1, 4, 16, 64, 500, 8]
    assert points[3].offline == "elected" and points[3].label == "64 Offline"
    assert points[4].offline == "dedicated" and points[4].tps_per_user is None
    assert points[5] == CurvePoint(8, "low_latency", folder="/runs/r8")
    assert isinstance(points[0].system_tps, float)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "malformed"),
        (b'{"rows": []}', "`points`"),
        (b'{"points": [{"concurrency": "8", "region": "x"}]}', "$.points[0].concurrency"),
        (b'{"points": [{"concurrency": 0, "region": "x"}]}', "$.points[0].concurrency"),
        (b'{"points": [{"concurrency": 8, "region": "x", "offline": "yes"}]}', "offline"),
        (b'{"points": [{"concurrency": 8, "region": "x", "system_tps": -1}]}', "system_tps"),
        (
            b'{"points": [{"concurrency": 8, "region": "x", "e2e_avg_interactivity": -1}]}',
            "$.points[0].e2e_avg_interactivity",
        ),
        (b'{"points": [], "x_metric": "tpot"}', "$.x_metric"),
        (b'{"points": [], "x_metric": null}', "$.x_metric"),
    ],
)
def test_load_curve_rejects_a_bad_file_in_one_line(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "pareto.json"
    path.write_bytes(content)
    with pytest.raises(UsageError) as info:
        load_curve(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and reason in message


def test_load_curve_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"cannot read the curve file .*missing\.json"):
        load_curve(tmp_path / "missing.json")


# --- the step function --------------------------------------------------------------------


def test_steps_hold_each_throughput_leftwards_to_the_next_point(tmp_path: Path) -> None:
    steps = pareto_steps(curve(tmp_path, HAND_ROWS))
    assert [p.concurrency for p in steps.points] == [64, 16, 4, 1]
    assert steps.vertices == (
        (10, 640),
        (10, 480),
        (30, 480),
        (30, 240),
        (60, 240),
        (60, 100),
        (100, 100),
    )
    assert [p.concurrency for p in steps.ceilings] == [500]
    assert steps.left_out == ()


def test_a_dominated_point_is_no_step_and_the_curve_spans_every_point(tmp_path: Path) -> None:
    # 2 and 3 share a throughput: 3 (less interactive) adds nothing; 5 is
    # dominated by 3 (slower per user, less throughput).  The frontier is 2
    # alone, its throughput held leftwards down to the least interactive
    # point on the chart, 5 at 20 tok/s per user.
    rows = [row(2, 50, 200), row(3, 40, 200), row(5, 20, 150)]
    steps = pareto_steps(curve(tmp_path, rows))
    assert steps.vertices == ((20, 200), (50, 200))
    assert [p.concurrency for p in steps.points] == [5, 3, 2]
    assert [p.concurrency for p in steps.frontier] == [2]


def test_the_frontier_is_the_best_throughput_at_each_interactivity(tmp_path: Path) -> None:
    # The crowded demo curve of docs/curves-and-submissions.md ("The
    # pictures"): tps_per_user barely moves, so 2, 4, 8 and 32 are each
    # dominated by a point that is both more interactive and faster.
    rows = [
        row(1, 499.9, 436.5),
        row(2, 499.3, 872.6),
        row(4, 499.1, 1743.2),
        row(8, 499.2, 3483.3),
        row(16, 499.4, 6679.5),
        row(32, 498.6, 13490.4),
        row(64, 498.9, 26937.7),
    ]
    steps = pareto_steps(curve(tmp_path, rows))
    assert [p.concurrency for p in steps.frontier] == [64, 16, 1]
    assert steps.vertices == (
        (498.6, 26937.7),
        (498.9, 26937.7),
        (498.9, 6679.5),
        (499.4, 6679.5),
        (499.4, 436.5),
        (499.9, 436.5),
    )
    # At every x the curve draws, some point at least as interactive
    # delivered that throughput, and none delivered more.
    points = steps.points
    for (x0, y), (x1, _) in zip(steps.vertices, steps.vertices[1:], strict=False):
        if x0 == x1:
            continue
        for x in (x0 + (x1 - x0) * f for f in (0.01, 0.5, 1.0)):
            best = max(p.system_tps for p in points if p.tps_per_user >= x - 1e-9)
            assert y == best, (x, y, best)


def test_points_without_a_value_are_left_out_of_the_steps(tmp_path: Path) -> None:
    rows = [
        row(1, 100, 100),
        row(8, None, 300),  # not streamed: no TPOT
        row(16, 30, None),
        row(999, None, None, offline="dedicated"),
    ]
    steps = pareto_steps(curve(tmp_path, rows))
    assert steps.vertices == ((100, 100),)
    assert steps.ceilings == ()
    assert [p.concurrency for p in steps.left_out] == [8, 16, 999]


def test_axes_have_round_ticks() -> None:
    axis = pareto._linear_axis([100.0])
    assert (axis.lo, axis.hi, axis.ticks) == (0.0, 125.0, (0.0, 25.0, 50.0, 75.0, 100.0, 125.0))
    assert pareto._linear_axis([0.87]).ticks == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert pareto._linear_axis([]).hi == 1.0
    log = pareto._log_axis([1, 64])
    assert log.ticks == (1, 2, 4, 8, 16, 32, 64)
    assert log.lo == pytest.approx(2 ** (-1 / 3)) and log.hi == pytest.approx(2 ** (19 / 3))
    # 1..4096 spans 13 powers of two: every other one is a tick.
    assert pareto._log_axis([1, 4096]).ticks == tuple(4.0**k for k in range(7))
    assert pareto._tick_text(0.6000000000000001, pareto._linear_axis([0.87])) == "0.6"
    assert pareto._tick_text(12000, pareto._linear_axis([12000])) == "12,000"


# --- the page -----------------------------------------------------------------------------


class Page(HTMLParser):
    """The parts of the page the tests look at, as a browser parses them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.figure = ""
        self.circles: dict[str, list[dict[str, str]]] = {}
        self.paths: dict[str, list[str]] = {}
        self.ceilings: dict[str, list[float]] = {}
        self.labels: dict[str, list[str]] = {}
        self.tips: dict[str, list[str]] = {}
        self.table: list[list[str]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self.attributes: list[tuple[str, str]] = []
        self.text: list[str] = []
        self._stack: list[str] = []
        self._script: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.attributes += list(a.items())
        self._stack.append(tag)
        if tag == "figure":
            self.figure = a["id"]
        elif tag == "circle":
            self.circles.setdefault(self.figure, []).append(a)
        elif tag == "path":
            self.paths.setdefault(self.figure, []).append(a["d"])
        elif tag == "line" and "stroke" in a and a["stroke"] == pareto.CEILING_COLOUR:
            self.ceilings.setdefault(self.figure, []).append(float(a["y1"]))
        elif tag == "script":
            self._script = a
        elif tag == "tr":
            self.table.append([])
        elif tag in ("th", "td"):
            self.table[-1].append("")  # an empty cell has no data

    def handle_endtag(self, tag: str) -> None:
        self._stack.pop()
        if tag == "figure":
            self.figure = ""

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self.scripts.append((self._script, data))
            self._script = None
            return
        self.text.append(data)
        if self._stack and self._stack[-1] == "text" and self.figure:
            self.labels.setdefault(self.figure, []).append(data)
        elif self._stack and self._stack[-1] == "title" and self.figure:
            self.tips.setdefault(self.figure, []).append(data)
        elif self._stack and self._stack[-1] in ("th", "td"):
            self.table[-1][-1] += data


def parse(text: str) -> Page:
    parsed = Page()
    parsed.feed(text)
    parsed.close()
    return parsed


def page(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[str, Page]:
    out = tmp_path / "pareto.html"
    write_html(curve(tmp_path, rows), out)
    text = out.read_text(encoding="utf-8")
    return text, parse(text)


def agentic_page(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[str, Page]:
    """The page :func:`write_reports` makes of an agentic ``pareto.json``."""
    write_curve(tmp_path, rows, AGENTIC)
    text = write_reports(tmp_path).html.read_text(encoding="utf-8")
    return text, parse(text)


def test_the_svg_step_path_goes_through_the_hand_worked_vertices(tmp_path: Path) -> None:
    _, parsed = page(tmp_path, HAND_ROWS)
    # x(v) = 68 + v * 3.792, y(v) = 314 - v * 0.282 (module docstring).
    assert parsed.paths["chart-pareto"] == [
        "M 105.92 133.52 L 105.92 178.64 L 181.76 178.64 L 181.76 246.32 "
        "L 295.52 246.32 L 295.52 285.80 L 447.20 285.80"
    ]
    centres = {(c["cx"], c["cy"]) for c in parsed.circles["chart-pareto"]}
    assert centres == {
        ("105.92", "133.52"),
        ("181.76", "178.64"),
        ("295.52", "246.32"),
        ("447.20", "285.80"),
    }
    # The step curve is on the primary chart only.
    assert set(parsed.paths) == {"chart-pareto"}


def test_the_dedicated_offline_run_is_a_labelled_ceiling_not_a_step(tmp_path: Path) -> None:
    _, parsed = page(tmp_path, HAND_ROWS)
    # 800 tok/s: y = 314 - 800 * 0.282 on both system_tps charts.
    assert parsed.ceilings == {"chart-pareto": [88.4], "chart-system_tps": [88.4]}
    assert "Offline (dedicated)" in parsed.labels["chart-pareto"]
    assert "Offline (dedicated)" in parsed.labels["chart-system_tps"]
    dedicated = "4"  # its index in the file: no marker anywhere
    assert all(c["data-i"] != dedicated for cs in parsed.circles.values() for c in cs)
    # The elected Offline point is a marker like the others, labelled Offline.
    for chart in ("chart-pareto", "chart-system_tps", "chart-ttft_p90_ms", "chart-tps_per_user"):
        assert "64 Offline" in parsed.labels[chart]
        assert "3" in {c["data-i"] for c in parsed.circles[chart]}


def test_concurrency_is_on_a_log_axis(tmp_path: Path) -> None:
    _, parsed = page(tmp_path, HAND_ROWS)
    # From 2**(-1/3) to 2**(19/3): 474 px for 20/3 octaves, 71.1 px an octave.
    for chart in ("chart-system_tps", "chart-ttft_p90_ms", "chart-tps_per_user"):
        xs = sorted(float(c["cx"]) for c in parsed.circles[chart])
        assert xs == [91.7, 233.9, 376.1, 518.3]


def test_a_point_without_tps_per_user_stays_on_the_concurrency_charts(tmp_path: Path) -> None:
    rows = [row(1, 100, 100), row(8, None, 300, ttft=50.0), row(16, 30, None)]
    _, parsed = page(tmp_path, rows)

    def shown(chart: str) -> set[str]:
        return {c["data-i"] for c in parsed.circles.get(chart, [])}

    assert shown("chart-pareto") == {"0"}
    assert shown("chart-system_tps") == {"0", "1"}
    assert shown("chart-ttft_p90_ms") == {"0", "1", "2"}
    assert shown("chart-tps_per_user") == {"0", "2"}


def test_a_chart_without_data_says_so(tmp_path: Path) -> None:
    _, parsed = page(tmp_path, [row(8, None, None, ttft=None)])
    assert parsed.labels["chart-pareto"].count("no data") == 1
    assert "chart-pareto" not in parsed.paths


HOSTILE_REGION = "\"><script>alert(1)</script><b x='y'>&amp;"
HOSTILE_FOLDER = '</script><script>alert("folder")</script>\'\u2028'


def test_strings_from_the_file_cannot_inject_markup(tmp_path: Path) -> None:
    rows = [
        row(1, 100, 100, region=HOSTILE_REGION, folder=HOSTILE_FOLDER),
        row(4, 60, 240),
    ]
    text, parsed = page(tmp_path, rows)
    # Our two script elements and nothing else, whatever the names hold.
    assert text.count("<script") == 2 and text.count("</script") == 2
    assert "<b " not in text
    assert [s[0].get("type") for s in parsed.scripts] == ["application/json", None]
    # The names are shown and handed to the script exactly as written.
    data = json.loads(parsed.scripts[0][1])
    assert (data[0]["region"], data[0]["folder"]) == (HOSTILE_REGION, HOSTILE_FOLDER)
    shown = "".join(parsed.text)
    assert HOSTILE_REGION in shown and HOSTILE_FOLDER in shown
    # Quotes are escaped inside attributes: no attribute is named by the text.
    assert {name for name, _ in parsed.attributes} <= {
        "lang", "charset", "name", "content", "type", "data-show", "checked", "class",
        "style", "id", "width", "height", "viewbox", "role", "aria-label", "x", "y",
        "x1", "y1", "x2", "y2", "dx", "dy", "text-anchor", "transform", "d", "stroke",
        "data-i", "cx", "cy", "r", "fill", "hidden", "data-x-metric",
    }  # fmt: skip


def test_the_page_needs_no_network(tmp_path: Path) -> None:
    text, parsed = page(tmp_path, HAND_ROWS)
    lowered = text.lower()
    for reference in ("http://", "https://", "url(", "@import", "//cdn"):
        assert reference not in lowered
    assert not {name for name, _ in parsed.attributes} & {"src", "href", "xlink:href"}


# --- the PNG and both reports ---------------------------------------------------------------


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_write_reports_writes_a_1200_by_900_png_and_the_page(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (mlpe-fast[plots])")
    # A null, and a region name that matplotlib would parse as broken mathtext.
    rows = [*HAND_ROWS, row(8, None, 300), row(2, 80, 150, region=r"$\frac$ region")]
    write_curve(tmp_path, rows)
    reports = write_reports(tmp_path)
    assert reports == pareto.Reports(tmp_path / "pareto.html", tmp_path / "pareto.png", ())
    assert png_size(tmp_path / "pareto.png") == (1200, 900)
    assert (tmp_path / "pareto.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_without_matplotlib_the_png_is_skipped_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (
        "matplotlib",
        "matplotlib.backends.backend_agg",
        "matplotlib.figure",
        "matplotlib.lines",
        "matplotlib.ticker",
    ):
        monkeypatch.setitem(sys.modules, module, None)
    points = curve(tmp_path, HAND_ROWS)
    with pytest.raises(UsageError, match=r'pip install "mlpe-fast\[plots\]"$'):
        write_png(points, tmp_path / "x.png")
    reports = write_reports(tmp_path)
    assert reports.png is None and not (tmp_path / "pareto.png").exists()
    assert reports.html.is_file()
    assert len(reports.notes) == 1 and 'pip install "mlpe-fast[plots]"' in reports.notes[0]


def test_write_reports_needs_the_curve_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"pareto\.json"):
        write_reports(tmp_path)
    assert not (tmp_path / "pareto.html").exists()


# --- agentic curves: e2e_avg_interactivity on the x axis (spec §1.5) ------------------------


def test_load_curve_file_reads_the_x_metric_and_the_interactivity(tmp_path: Path) -> None:
    path = write_curve(tmp_path, AGENTIC_ROWS, AGENTIC)
    loaded = load_curve_file(path)
    assert isinstance(loaded, Curve) and loaded.x_metric == AGENTIC
    assert [p.e2e_avg_interactivity for p in loaded.points] == [40, 30, 15, 5]
    assert isinstance(loaded.points[0].e2e_avg_interactivity, float)
    # load_curve keeps giving the points alone.
    assert load_curve(path) == list(loaded.points)


def test_a_file_without_x_metric_is_a_tps_per_user_curve_as_before(tmp_path: Path) -> None:
    # Interactivity values in the rows change nothing without the key.
    rows = [{**r, "e2e_avg_interactivity": 7.0} for r in HAND_ROWS]
    path = write_curve(tmp_path, rows)
    assert "x_metric" not in json.loads(path.read_text(encoding="utf-8"))
    loaded = load_curve_file(path)
    assert loaded.x_metric == "tps_per_user"
    steps = pareto_steps(loaded.points)
    assert steps == pareto_steps(loaded.points, x_metric="tps_per_user")
    assert steps.vertices[0] == (10, 640) and steps.vertices[-1] == (100, 100)

    text = write_reports(tmp_path).html.read_text(encoding="utf-8")
    parsed = parse(text)
    assert list(parsed.paths) == ["chart-pareto"]
    assert set(parsed.circles) == {
        "chart-pareto", "chart-system_tps", "chart-ttft_p90_ms", "chart-tps_per_user",
    }  # fmt: skip
    assert (
        "Pareto: system_tps vs tps_per_user (official step curve)" in parsed.labels["chart-pareto"]
    )
    assert "tps_per_user (tok/s per user)" in parsed.labels["chart-pareto"]
    assert "tps_per_user vs concurrency" in parsed.labels["chart-tps_per_user"]
    assert AGENTIC not in "".join(t for ts in parsed.labels.values() for t in ts)
    assert AGENTIC not in parsed.table[0] and "tps_per_user" in parsed.table[0]
    assert 'data-x-metric="tps_per_user"' in text
    # The same page write_html makes of the points with no x metric given.
    write_html(loaded.points, tmp_path / "direct.html")
    assert (tmp_path / "direct.html").read_text(encoding="utf-8") == text


def test_agentic_steps_hold_each_throughput_leftwards_on_e2e_avg_interactivity(
    tmp_path: Path,
) -> None:
    loaded = load_curve_file(write_curve(tmp_path, AGENTIC_ROWS, AGENTIC))
    steps = pareto_steps(loaded.points, x_metric=loaded.x_metric)
    # By tps_per_user 2 would come before 8 (45 < 50); by interactivity after.
    assert [p.concurrency for p in steps.points] == [128, 32, 8, 2]
    assert steps.vertices == (
        (5, 560),
        (5, 400),
        (15, 400),
        (15, 180),
        (30, 180),
        (30, 50),
        (40, 50),
    )
    assert steps.ceilings == () and steps.left_out == ()


def test_the_agentic_svg_step_path_goes_through_the_hand_worked_vertices(
    tmp_path: Path,
) -> None:
    _, parsed = agentic_page(tmp_path, AGENTIC_ROWS)
    # x(v) = 68 + v * 9.48, y(v) = 314 - v * 0.47 (module docstring).
    assert parsed.paths["chart-pareto"] == [
        "M 115.40 50.80 L 115.40 126.00 L 210.20 126.00 L 210.20 229.40 "
        "L 352.40 229.40 L 352.40 290.50 L 447.20 290.50"
    ]
    centres = {(c["cx"], c["cy"]) for c in parsed.circles["chart-pareto"]}
    assert centres == {
        ("115.40", "50.80"),
        ("210.20", "126.00"),
        ("352.40", "229.40"),
        ("447.20", "290.50"),
    }
    assert set(parsed.paths) == {"chart-pareto"}
    assert parsed.ceilings == {}


def test_agentic_chart_titles_and_axes_name_e2e_avg_interactivity(tmp_path: Path) -> None:
    _, parsed = agentic_page(tmp_path, AGENTIC_ROWS)
    # The fourth chart is the x metric against concurrency.
    assert list(parsed.circles) == [
        "chart-pareto", "chart-system_tps", "chart-ttft_p90_ms", "chart-e2e_avg_interactivity",
    ]  # fmt: skip
    pareto_labels = parsed.labels["chart-pareto"]
    assert "Pareto: system_tps vs e2e_avg_interactivity (official step curve)" in pareto_labels
    assert "e2e_avg_interactivity (tok/s of turn time)" in pareto_labels
    fourth = parsed.labels["chart-e2e_avg_interactivity"]
    assert "e2e_avg_interactivity vs concurrency" in fourth
    assert "e2e_avg_interactivity (tok/s of turn time)" in fourth
    assert "tps_per_user" not in "".join(t for ts in parsed.labels.values() for t in ts)
    # The fourth chart's markers sit at their interactivity: on a 0..50 axis,
    # y(v) = 314 - v * 282 / 50.
    ys = sorted(float(c["cy"]) for c in parsed.circles["chart-e2e_avg_interactivity"])
    assert ys == [88.4, 144.8, 229.4, 285.8]


def test_the_png_of_an_agentic_curve_names_e2e_avg_interactivity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (mlpe-fast[plots])")
    from matplotlib.axes import Axes

    written: dict[str, list[str]] = {"title": [], "xlabel": [], "ylabel": []}

    def recorder(kind: str) -> Callable[..., Any]:
        original = getattr(Axes, f"set_{kind}")

        def record(self: Axes, text: str, *args: Any, **kwargs: Any) -> Any:
            written[kind].append(text)
            return original(self, text, *args, **kwargs)

        return record

    for kind in written:
        monkeypatch.setattr(Axes, f"set_{kind}", recorder(kind))
    write_curve(tmp_path, AGENTIC_ROWS, AGENTIC)
    reports = write_reports(tmp_path)
    assert reports.png is not None and png_size(reports.png) == (1200, 900)
    assert written["title"] == [
        "Pareto: system_tps vs e2e_avg_interactivity (official step curve)",
        "system_tps vs concurrency",
        "ttft_p90_ms vs concurrency",
        "e2e_avg_interactivity vs concurrency",
    ]
    assert written["xlabel"][0] == "e2e_avg_interactivity (tok/s of turn time)"
    assert written["ylabel"][3] == "e2e_avg_interactivity (tok/s of turn time)"


def test_an_agentic_point_without_e2e_is_left_out_of_the_pareto_chart_only(
    tmp_path: Path,
) -> None:
    rows = [
        row(2, 45, 50, e2e=40),
        row(8, 50, 180, e2e=None),  # no interactivity: off the Pareto chart
        row(32, None, 400, e2e=15),  # no TPOT: tps_per_user is not the x here
    ]
    loaded = load_curve_file(write_curve(tmp_path, rows, AGENTIC))
    steps = pareto_steps(loaded.points, x_metric=AGENTIC)
    assert steps.vertices == ((15, 400), (15, 50), (40, 50))
    assert [p.concurrency for p in steps.left_out] == [8]

    _, parsed = agentic_page(tmp_path, rows)

    def shown(chart: str) -> set[str]:
        return {c["data-i"] for c in parsed.circles.get(chart, [])}

    assert shown("chart-pareto") == {"0", "2"}
    assert shown("chart-system_tps") == {"0", "1", "2"}
    assert shown("chart-ttft_p90_ms") == {"0", "1", "2"}
    assert shown("chart-e2e_avg_interactivity") == {"0", "2"}
    # The table keeps every point.
    assert [r[0] for r in parsed.table[1:]] == ["2", "8", "32"]


def test_the_agentic_table_and_hover_show_e2e_avg_interactivity(tmp_path: Path) -> None:
    rows = [*AGENTIC_ROWS, row(16, 30, 300, e2e=None)]
    text, parsed = agentic_page(tmp_path, rows)
    head = parsed.table[0]
    assert head[3:6] == ["system_tps", "e2e_avg_interactivity", "tps_per_user"]
    cells = {r[0]: r for r in parsed.table[1:]}
    assert cells["2"][3:6] == ["50.0", "40.0", "45.0"]
    assert cells["16"][3:6] == ["300.0", "n/a", "30.0"]
    assert (
        "concurrency 2; region low_latency; system_tps 50.0; e2e_avg_interactivity 40.0; "
        "tps_per_user 45.0; TTFT p90 20.0 ms"
    ) in parsed.tips["chart-pareto"]
    # 16 has no interactivity: off the Pareto chart, on system_tps with n/a.
    assert "concurrency 16;" not in "".join(parsed.tips["chart-pareto"])
    assert any(
        t.startswith("concurrency 16;") and "e2e_avg_interactivity n/a" in t
        for t in parsed.tips["chart-system_tps"]
    )
    # The script's hover reads the metric from its data block.
    assert [s[0].get("data-x-metric") for s in parsed.scripts] == [AGENTIC, None]
    data = json.loads(parsed.scripts[0][1])
    assert [d["e2e_avg_interactivity"] for d in data] == [40, 30, 15, 5, None]
    assert "e2e_avg_interactivity" in text.split("<script>")[1]


def test_an_unknown_x_metric_is_a_one_line_usage_error(tmp_path: Path) -> None:
    path = write_curve(tmp_path, AGENTIC_ROWS, "interactivity")
    for read in (load_curve_file, load_curve):
        with pytest.raises(UsageError) as info:
            read(path)
        message = str(info.value)
        assert "\n" not in message and str(path) in message
        assert "$.x_metric" in message and "'interactivity'" in message
    with pytest.raises(UsageError, match="x_metric"):
        write_reports(tmp_path)
    assert not (tmp_path / "pareto.html").exists()


# --- what the charts show: titles, axes that fit, labels that do not overlap ---------------

#: Nine points within 1.5 tok/s per user of each other and a dedicated
#: Offline ceiling: the labels of a crowded Pareto chart.
CROWDED_ROWS = [
    row(c, 499.9 - 0.17 * k, 400.0 * c, region=r)
    for k, (c, r) in enumerate(
        [
            (1, "low_latency"),
            (2, "low_concurrency"),
            (3, "low_concurrency"),
            (4, "low_concurrency"),
            (6, "med_concurrency"),
            (8, "med_concurrency"),
            (12, "med_concurrency"),
            (16, "high_concurrency"),
            (24, "high_concurrency"),
        ]
    )
] + [row(1000, None, 11000, offline="dedicated", region="submitters_choice")]


def test_a_linear_axis_fits_data_far_from_zero_and_keeps_zero_otherwise() -> None:
    fitted = pareto._linear_axis([498.6, 499.9])
    assert 470 <= fitted.lo < 498.6 and 499.9 < fitted.hi <= 530
    assert fitted.hi - fitted.lo >= 0.05 * 499.9  # noise is not blown up into a slope
    assert pareto._linear_axis([10.0, 100.0]).lo == 0.0  # the data span most of 0..max
    assert pareto._linear_axis([100.0]).lo == 0.0  # one value: nothing to fit
    # 10 % beyond the data each side (985 .. 1315), to steps of 100 (a fifth
    # of 330, rounded up to 1, 2, 2.5 or 5 times a power of ten).
    wide = pareto._linear_axis([1000.0, 1300.0])
    assert (wide.lo, wide.hi, wide.ticks[1] - wide.ticks[0]) == (900.0, 1400.0, 100.0)


def test_the_heading_names_the_model_the_system_and_the_date(tmp_path: Path) -> None:
    path = tmp_path / "pareto.json"
    content = {"model": "llama-3.1-8b", "system": "gpu-box:8000", "date": "2026-12-02"}
    path.write_text(json.dumps({**content, "points": HAND_ROWS}), encoding="utf-8")
    write_html(load_curve_file(path), tmp_path / "pareto.html")
    text = (tmp_path / "pareto.html").read_text(encoding="utf-8")
    heading = "llama-3.1-8b on gpu-box:8000, 2026-12-02: 5 points"
    assert f"<h1>{heading}</h1>" in text and f"<title>mlpe-fast: {heading}</title>" in text
    if "matplotlib" in sys.modules or _has_matplotlib():
        figure = pareto.png_figure([pareto.Series("", load_curve_file(path))])
        assert figure.get_suptitle() == heading
    # Older files name nothing: the heading says what it can.
    assert Curve(tuple(curve(tmp_path, HAND_ROWS))).heading == "curve: 5 points"


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _svg_label_boxes(text: str) -> dict[str, list[pareto.Box]]:
    """Every point label of the page as the box it takes (the renderer's
    own estimate of a label's size), by chart."""
    boxes: dict[str, list[pareto.Box]] = {}
    figure = ""
    for match in re.finditer(
        r'<figure id="([^"]+)">|<text class="label" x="([\d.]+)" y="([\d.]+)" '
        r'text-anchor="(\w+)">([^<]*)</text>',
        text,
    ):
        if match.group(1):
            figure = match.group(1)
            continue
        x, baseline, anchor, label = (
            float(match.group(2)),
            float(match.group(3)),
            match.group(4),
            html.unescape(match.group(5)),
        )
        width, height = pareto.svg_label_size(label)
        x0 = {"start": x, "end": x - width, "middle": x - width / 2}[anchor]
        boxes.setdefault(figure, []).append(
            pareto.Box(x0, baseline + 3 - height, x0 + width, baseline + 3)
        )
    return boxes


def test_svg_labels_do_not_overlap_on_a_crowded_curve(tmp_path: Path) -> None:
    text, parsed = page(tmp_path, CROWDED_ROWS)
    boxes = _svg_label_boxes(text)
    plot = pareto.Box(
        pareto._LEFT, pareto._TOP, pareto._W - pareto._RIGHT, pareto._H - pareto._BOTTOM
    )
    for chart, found in boxes.items():
        for k, box in enumerate(found):
            assert box.inside(plot), (chart, box)
            for other in found[k + 1 :]:
                assert not box.overlaps(other), (chart, box, other)
    # Crowded, but most points keep their label; none is drawn twice.
    assert 6 <= len(boxes["chart-pareto"]) <= 9
    assert len(boxes["chart-system_tps"]) == 9
    labels = parsed.labels["chart-pareto"]
    assert len([t for t in labels if t.isdigit()]) == len(set(t for t in labels if t.isdigit()))


def test_png_labels_do_not_overlap_on_a_crowded_curve(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (mlpe-fast[plots])")
    figure = pareto.png_figure([pareto.Series("", Curve(tuple(curve(tmp_path, CROWDED_ROWS))))])
    renderer = figure.canvas.get_renderer()
    placed = 0
    for ax in figure.axes:
        if not ax.get_visible():
            continue
        frame = ax.get_window_extent(renderer)
        labels = [t for t in ax.texts if t.get_gid() == "point-label"]
        boxes = [t.get_window_extent(renderer) for t in labels]
        placed += len(boxes)
        for k, box in enumerate(boxes):
            assert frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
            for other in boxes[k + 1 :]:
                assert not box.overlaps(other), (ax.get_title(), labels[k].get_text())
    assert placed >= 30  # of 36 markers on the four charts


def test_place_labels_leaves_out_a_label_with_no_room() -> None:
    area = pareto.Box(0, 0, 100, 100)
    marks = [(50.0, 50.0, "a"), (50.0, 50.0, "b")]  # two markers on one spot

    def size(text: str) -> tuple[float, float]:
        return 400.0 if text == "b" else 6.0, 10.0

    first, second = pareto.place_labels(marks, area, size, radius=5)
    assert first is not None and first.box.inside(area) and second is None


# --- a request-rate curve and several curves on one page -----------------------------------

RATE_ROWS = [
    {"target_qps": q, "qps": q * 0.98, "region": "poisson", "system_tps": 100.0 * q,
     "tps_per_user": 60 - q, "ttft_p90_ms": 10.0 + q, "folder": f"/runs/qps{q:g}"}
    for q in (0.5, 2.0, 8.0)
]  # fmt: skip


def test_a_rate_curve_has_six_charts_each_saying_it_is_no_mlperf_curve(tmp_path: Path) -> None:
    path = tmp_path / "pareto.json"
    path.write_text(json.dumps({"load": "rate", "points": RATE_ROWS}), encoding="utf-8")
    loaded = load_curve_file(path)
    assert [p.label for p in loaded.points] == ["0.5/s", "2/s", "8/s"]
    text = write_reports(tmp_path).html.read_text(encoding="utf-8")
    parsed = parse(text)
    assert list(parsed.circles) == [
        "chart-pareto", "chart-latency", "chart-system_tps", "chart-ttft_p90_ms",
        "chart-tps_per_user", "chart-qps",
    ]  # fmt: skip
    assert "(Poisson rates: not an MLPerf curve)" in text
    assert "frontier (Poisson rates: not an MLPerf curve)" in text
    assert "target rate (queries/s, log scale)" in parsed.labels["chart-qps"]
    assert "0.5" in parsed.labels["chart-qps"]  # a tick below 1 on the log axis
    assert "target rate 2/s; achieved qps 2.0" in "".join(parsed.tips["chart-qps"])
    if _has_matplotlib():
        assert png_size(tmp_path / "pareto.png") == (1200, 1350)


def test_a_rate_curve_point_needs_its_rate(tmp_path: Path) -> None:
    path = tmp_path / "pareto.json"
    rows = [*RATE_ROWS, {"concurrency": 4, "region": "poisson"}]
    path.write_text(json.dumps({"load": "rate", "points": rows}), encoding="utf-8")
    with pytest.raises(UsageError, match=r"point 3 of a rate curve has no target_qps$"):
        load_curve_file(path)


def test_several_curves_share_the_charts_one_colour_each(tmp_path: Path) -> None:
    first = Curve(tuple(curve(tmp_path, HAND_ROWS)))
    second = Curve(tuple(curve(tmp_path, AGENTIC_ROWS[:3])))
    out = tmp_path / "both.html"
    pareto.write_series_html(
        [pareto.Series("one", first, "#1e88e5"), pareto.Series("two", second, "#e53935")],
        out,
        heading="compare: one, two",
    )
    parsed = parse(out.read_text(encoding="utf-8"))
    strokes = [c["stroke"] for c in parsed.circles["chart-pareto"]]
    assert strokes.count("#1e88e5") == 4 and strokes.count("#e53935") == 3
    assert len(parsed.paths["chart-pareto"]) == 2  # a frontier each
    assert parsed.table[0][0] == "curve" and {r[0] for r in parsed.table[1:]} == {"one", "two"}
    assert any(t.startswith("two: concurrency 8;") for t in parsed.tips["chart-pareto"])
