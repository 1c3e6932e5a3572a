"""The HTML report in a real browser: headless Chromium screenshots
``pareto.html`` and the points, the step curve and the Offline ceiling are
found in the pixels where the data puts them (spec §1.5).

The screenshot is decoded with the standard library (``zlib``, ``struct``) and
numpy.  Skips when no Chromium binary is installed (Debian: ``apt-get install
chromium``; ``.ci/run`` installs it when it can).
"""

from __future__ import annotations

import html
import itertools
import json
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from mlpe_fast.report.pareto import (
    CEILING_COLOUR,
    REGION_COLOURS,
    SERIES_COLOURS,
    STEP_COLOUR,
    Curve,
    CurvePoint,
    Series,
    load_curve,
    write_html,
    write_series_html,
)

pytestmark = pytest.mark.pipeline

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_WIDTH, _HEIGHT = 1200, 900

# Concurrency 1, 4, 16, 64 (a factor 4 apart: equal gaps on a log axis), all
# in one region so that every marker has the same colour; and a dedicated
# Offline run, which is a ceiling line and no marker.
_POINTS = [
    (1, 100.0, 100.0, 20.0),
    (4, 60.0, 240.0, 35.0),
    (16, 30.0, 480.0, 80.0),
    (64, 10.0, 640.0, 300.0),
]
_OFFLINE_TPS = 800.0


def _browser() -> str:
    for name in _BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(f"no Chromium binary on PATH (looked for {', '.join(_BROWSERS)})")


def _chromium(browser: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        browser,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        "--force-device-scale-factor=1",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--window-size={_WIDTH},{_HEIGHT}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _decode_png(data: bytes) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """An 8-bit RGB or RGBA, non-interlaced PNG as a (height, width, channels) array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, bytearray(), b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, "unexpected PNG format"
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(bytes(idat))
    rows = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for r in range(height):
        start = r * (stride + 1)
        kind_ = raw[start]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=start + 1)
        if kind_ == 0:  # None
            cur = line.copy()
        elif kind_ == 1:  # Sub: a running sum along the row, per channel
            sums = np.cumsum(line.reshape(width, bpp).astype(np.uint32), axis=0)
            cur = (sums % 256).astype(np.uint8).reshape(stride)
        elif kind_ == 2:  # Up
            cur = line + prev
        else:  # Average (3) and Paeth (4) depend on the pixel just decoded
            out, src, up = bytearray(stride), line.tobytes(), prev.tobytes()
            for i in range(stride):
                a = out[i - bpp] if i >= bpp else 0
                b = up[i]
                if kind_ == 3:
                    out[i] = (src[i] + ((a + b) >> 1)) & 0xFF
                    continue
                c = up[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                out[i] = (src[i] + pred) & 0xFF
            cur = np.frombuffer(bytes(out), dtype=np.uint8)
        rows[r] = cur
        prev = cur
    return rows.reshape(height, width, bpp)


def _mask(image: np.ndarray[Any, Any], colour: str, tolerance: int = 12) -> np.ndarray[Any, Any]:
    rgb = np.array([int(colour[k : k + 2], 16) for k in (1, 3, 5)], dtype=np.int16)
    diff = np.abs(image[:, :, :3].astype(np.int16) - rgb)
    return np.asarray(np.all(diff <= tolerance, axis=2))


def _blobs(mask: np.ndarray[Any, Any]) -> list[tuple[float, float, int, int]]:
    """Connected groups of pixels: (centre x, centre y, width, height)."""
    left = {(int(y), int(x)) for y, x in zip(*np.nonzero(mask), strict=True)}
    blobs = []
    while left:
        todo = [left.pop()]
        group = []
        while todo:
            y, x = todo.pop()
            group.append((y, x))
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    if (y + dy, x + dx) in left:
                        left.remove((y + dy, x + dx))
                        todo.append((y + dy, x + dx))
        ys = [g[0] for g in group]
        xs = [g[1] for g in group]
        blobs.append(
            (
                sum(xs) / len(xs),
                sum(ys) / len(ys),
                max(xs) - min(xs) + 1,
                max(ys) - min(ys) + 1,
            )
        )
    return blobs


def _proportional(pixels: Sequence[float], values: Sequence[float]) -> None:
    """Pixels sit on a linear scale of the values (offset and sign free)."""
    span_px = pixels[-1] - pixels[0]
    span = values[-1] - values[0]
    for px, value in zip(pixels, values, strict=True):
        assert (px - pixels[0]) / span_px == pytest.approx((value - values[0]) / span, abs=0.02)


def _near(mask: np.ndarray[Any, Any], x: float, y: float, reach: int = 2) -> bool:
    xi, yi = round(x), round(y)
    return bool(mask[yi - reach : yi + reach + 1, xi - reach : xi + reach + 1].any())


@pytest.mark.slow
def test_chromium_draws_the_points_steps_and_ceiling_where_the_data_puts_them(
    tmp_path: Path,
) -> None:
    browser = _browser()
    rows = [
        {
            "concurrency": c,
            "region": "low_latency",
            "offline": "none",
            "system_tps": tps,
            "tps_per_user": tpu,
            "ttft_p90_ms": ttft,
            "accuracy": False,
            "folder": f"r{c}",
        }
        for c, tpu, tps, ttft in _POINTS
    ]
    rows.append(
        {
            "concurrency": 500,
            "region": "submitters_choice",
            "offline": "dedicated",
            "system_tps": _OFFLINE_TPS,
            "tps_per_user": None,
            "ttft_p90_ms": None,
            "accuracy": False,
            "folder": "r500",
        }
    )
    (tmp_path / "pareto.json").write_text(json.dumps({"points": rows}), encoding="utf-8")
    page = tmp_path / "pareto.html"
    write_html(load_curve(tmp_path / "pareto.json"), page)
    shot = tmp_path / "shot.png"
    done = _chromium(browser, tmp_path, f"--screenshot={shot}", page.as_uri())
    assert shot.is_file(), f"no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    image = _decode_png(shot.read_bytes())
    assert image.shape[:2] == (_HEIGHT, _WIDTH)

    # Markers are round (the legend's swatch is a wide bar): 4 per chart.
    markers = [
        (x, y)
        for x, y, w, h in _blobs(_mask(image, REGION_COLOURS["low_latency"]))
        if 5 <= w <= 14 and 5 <= h <= 14 and abs(w - h) <= 2
    ]
    assert len(markers) == 16, markers
    # Charts: Pareto and system_tps on top, TTFT and tps_per_user below;
    # within a column the top chart's markers all lie above the bottom one's.
    columns = [
        sorted((m for m in markers if m[0] < _WIDTH / 2), key=lambda m: m[1]),
        sorted((m for m in markers if m[0] >= _WIDTH / 2), key=lambda m: m[1]),
    ]
    assert [len(c) for c in columns] == [8, 8]
    charts = {
        "pareto": columns[0][:4],
        "system_tps": columns[1][:4],
        "ttft": columns[0][4:],
        "tps_per_user": columns[1][4:],
    }

    # Pareto: x linear in tps_per_user, y linear in system_tps, up is more.
    pareto = sorted(charts["pareto"])
    by_tpu = sorted(_POINTS, key=lambda p: p[1])
    _proportional([m[0] for m in pareto], [p[1] for p in by_tpu])
    _proportional([m[1] for m in pareto], [p[2] for p in by_tpu])
    assert pareto[0][1] < pareto[-1][1]  # 640 tok/s is drawn above 100 tok/s

    # Concurrency charts: a log axis (equal gaps for a factor 4), y linear.
    for name, column in (("system_tps", 2), ("ttft", 3), ("tps_per_user", 1)):
        ordered = sorted(charts[name])
        gaps = np.diff([m[0] for m in ordered])
        assert max(gaps) - min(gaps) <= 2, (name, gaps)
        _proportional([m[1] for m in ordered], [p[column] for p in _POINTS])

    # The steps: each point's throughput held leftwards to the next lower
    # tps_per_user, never rightwards (spec §1.5; module docstring).
    steps = _mask(image, STEP_COLOUR)
    for (x0, y0), (x1, y1) in itertools.pairwise(pareto):
        middle = (x0 + x1) / 2
        assert _near(steps, middle, y1), "no horizontal step at the right point's height"
        assert not _near(steps, middle, y0), "a step held rightwards"
        assert _near(steps, x0, (y0 + y1) / 2), "no vertical step at the left point"

    # The dedicated Offline ceiling: a dashed line above the highest point.
    ceiling = _mask(image, CEILING_COLOUR)
    top = min(m[1] for m in pareto)
    x_lo, x_hi = round(pareto[0][0]), round(pareto[-1][0])
    band = ceiling[round(top) - 80 : round(top) - 5, x_lo:x_hi]
    assert band.sum(axis=1).max() >= 0.4 * (x_hi - x_lo)


@pytest.mark.slow
def test_the_page_script_runs_in_chromium(tmp_path: Path) -> None:
    browser = _browser()
    rows = [
        {"concurrency": c, "region": "low_latency", "system_tps": tps, "tps_per_user": tpu}
        for c, tpu, tps, _ in _POINTS
    ]
    (tmp_path / "pareto.json").write_text(json.dumps({"points": rows}), encoding="utf-8")
    page = tmp_path / "pareto.html"
    write_html(load_curve(tmp_path / "pareto.json"), page)
    done = _chromium(browser, tmp_path, "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    # The script's last statement ran (no error before it) and applied the
    # toggles: the table starts hidden, the charts shown.
    assert 'data-ready="1"' in done.stdout
    assert '<section id="table" hidden="">' in done.stdout
    assert '<figure id="chart-pareto">' in done.stdout


# Measures the page as Chromium lays it out: every marker's centre on the
# screen and stroke, and how many pairs of point labels overlap, written
# into the document for --dump-dom to show.  Appended to a copy of the page
# by the test, never part of the page itself.
_MEASURE = """
<script>
(function () {
  var out = {markers: [], labels: 0, overlaps: 0, outside: 0};
  var svgs = document.querySelectorAll("svg.chart");
  for (var s = 0; s < svgs.length; s++) {
    var frame = svgs[s].querySelector("rect.frame").getBoundingClientRect();
    var boxes = [];
    var labels = svgs[s].querySelectorAll("text.label");
    for (var k = 0; k < labels.length; k++) {
      var b = labels[k].getBoundingClientRect();
      boxes.push(b);
      if (b.left < frame.left || b.right > frame.right || b.top < frame.top
          || b.bottom > frame.bottom) { out.outside++; }
    }
    out.labels += boxes.length;
    for (var i = 0; i < boxes.length; i++) {
      for (var j = i + 1; j < boxes.length; j++) {
        var a = boxes[i], c = boxes[j];
        if (a.left < c.right && c.left < a.right && a.top < c.bottom && c.top < a.bottom) {
          out.overlaps++;
        }
      }
    }
    var circles = svgs[s].querySelectorAll("circle");
    for (var m = 0; m < circles.length; m++) {
      var r = circles[m].getBoundingClientRect();
      out.markers.push([svgs[s].parentNode.id, (r.left + r.right) / 2, (r.top + r.bottom) / 2,
                        circles[m].getAttribute("stroke"), circles[m].getAttribute("fill")]);
    }
  }
  document.body.setAttribute("data-measured", JSON.stringify(out));
})();
</script>
"""


def _measured(browser: str, tmp_path: Path, page: Path) -> dict[str, Any]:
    probe = tmp_path / f"measured-{page.name}"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"), encoding="utf-8"
    )
    done = _chromium(browser, tmp_path, "--dump-dom", probe.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'data-measured="([^"]*)"', done.stdout)
    assert found is not None, done.stdout[-2000:]
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return measured


@pytest.mark.slow
def test_chromium_lays_out_crowded_labels_without_overlap(tmp_path: Path) -> None:
    browser = _browser()
    # Nine points within 1.6 tok/s per user of each other: the labels crowd.
    rows = [
        {"concurrency": c, "region": "low_latency", "system_tps": 400.0 * c,
         "tps_per_user": 499.9 - 0.2 * k, "ttft_p90_ms": 20.0 + k}
        for k, c in enumerate((1, 2, 3, 4, 6, 8, 12, 16, 24))
    ]  # fmt: skip
    (tmp_path / "pareto.json").write_text(json.dumps({"points": rows}), encoding="utf-8")
    page = tmp_path / "pareto.html"
    write_html(load_curve(tmp_path / "pareto.json"), page)
    measured = _measured(browser, tmp_path, page)
    assert measured["overlaps"] == 0 and measured["outside"] == 0
    assert measured["labels"] >= 30  # of 36 markers


@pytest.mark.slow
def test_chromium_draws_each_compared_curve_in_its_colour(tmp_path: Path) -> None:
    browser = _browser()
    one = Curve(
        tuple(
            CurvePoint(concurrency=c, region="low_latency", system_tps=tps, tps_per_user=tpu,
                       ttft_p90_ms=ttft)
            for c, tpu, tps, ttft in _POINTS
        )
    )  # fmt: skip
    two = Curve(
        tuple(msgspec.structs.replace(p, system_tps=p.system_tps * 0.8) for p in one.points)
    )
    page = tmp_path / "compare.html"
    colours = SERIES_COLOURS[:2]
    write_series_html(
        [Series("one", one, colours[0]), Series("two", two, colours[1])], page, heading="compare"
    )
    measured = _measured(browser, tmp_path, page)
    markers = measured["markers"]
    assert [m[3] for m in markers].count(colours[0]) == 16  # four points on four charts
    assert [m[3] for m in markers].count(colours[1]) == 16
    assert measured["overlaps"] == 0 and measured["outside"] == 0
    shot = tmp_path / "compare.png"
    done = _chromium(browser, tmp_path, f"--screenshot={shot}", page.as_uri())
    assert shot.is_file(), done.stderr[-2000:]
    image = _decode_png(shot.read_bytes())
    masks = {c: _mask(image, c) for c in colours}
    for k, (_, x, y, stroke, fill) in enumerate(markers):
        # A filled marker on the screen that no later one covers (the two
        # curves share their TTFT: there the second one's is on top).
        covered = any(abs(x - m[1]) < 10 and abs(y - m[2]) < 10 for m in markers[k + 1 :])
        if fill == stroke and x < _WIDTH and y < _HEIGHT and not covered:
            assert _near(masks[stroke], x, y, reach=1), (stroke, x, y)
    # The second curve's throughput is 0.8 x the first's: its Pareto markers lie lower.
    pareto_markers = {c: sorted(m[2] for m in markers if m[0] == "chart-pareto" and m[3] == c)
                      for c in colours}  # fmt: skip
    assert all(
        b > a for a, b in zip(pareto_markers[colours[0]], pareto_markers[colours[1]], strict=True)
    )
