"""The final table and the progress line."""

from __future__ import annotations

import io
import threading
import time

import numpy as np
import pytest

from mlpe_fast.metrics.stats import PointStats, point_stats
from mlpe_fast.metrics.tokens import TokenCounts
from mlpe_fast.report import Progress, render
from tests.unit.test_stats import MS, rec


def counts(osl: list[int], tpot: list[int]) -> TokenCounts:
    return TokenCounts(
        osl=np.array(osl, dtype=np.int64),
        tpot_tokens=np.array(tpot, dtype=np.int64),
        isl=np.zeros(len(osl), dtype=np.int64),
        complete=True,
        pending=0,
        seconds=0.0,
    )


@pytest.fixture
def stats() -> PointStats:
    # 9 completed streamed responses issued at 0: TTFT k*10 ms, done at 1 s
    # + k*100 ms, 100 tokens after the first event; 1 failure.
    records = [rec(0, k * 10 * MS, 1_000 * MS + k * 100 * MS) for k in range(1, 10)]
    records.append(
        rec(
            0,
            None,
            None,
            error="IdleTimeout",
            message="no bytes for  30 s\nat all",
            t_end=1500 * MS,
        )
    )
    return point_stats(records, counts([101] * 9 + [0], [100] * 9 + [0]))


AUDIT = {
    "loop_lag_p50_ms": 0.012,
    "loop_lag_p99_ms": 0.05,
    "loop_lag_max_ms": 1.2,
    "issue_late_p50_ms": 0.0,
    "issue_late_p99_ms": 0.003,
    "cpu_s": 1.5,
    "cpu_us_per_request": 150.0,
    "cpu_us_per_event": 0.5,
    "connections_opened": 4,
}


def line_with(text: str, needle: str) -> str:
    lines = [line for line in text.splitlines() if needle in line]
    assert len(lines) == 1, (needle, text)
    return lines[0]


def test_render_key_lines(stats: PointStats) -> None:
    text = render(stats, AUDIT, title="concurrency 16")
    assert text.endswith("\n")
    assert text.splitlines()[0] == "mlpe-fast results: concurrency 16"
    assert "9 done, 1 failed of 10 issued in 1.900 s (4.7 req/s)" in line_with(text, "requests")
    assert line_with(text, "failures").split()[1:] == ["IdleTimeout", "1"]
    assert "e.g. IdleTimeout: no bytes for 30 s at all" in text  # one line, spaces collapsed
    assert line_with(text, "finish reasons").split()[2:] == ["stop", "9"]
    # TTFT 10..90 ms: p50 50, p90 (lower, rank 7.2) 80, p99 (rank 7.92) 80.
    assert line_with(text, "  TTFT ").split() == ["TTFT", "50.000", "80.000", "80.000", "9"]
    # TPOT (done - first) / 100: (1000 + 90k) / 100 ms -> 10.9 .. 18.1 ms.
    assert line_with(text, "  TPOT ").split() == ["TPOT", "14.500", "17.200", "17.200", "9"]
    assert line_with(text, "latency").split()[:3] == ["latency", "1,500.000", "1,800.000"]
    # 909 tokens / 1.9 s; 1000 / 17.2 ms.
    assert "478.4  (909 tokens / 1.900 s)" in line_with(text, "system output tokens/s")
    assert "58.1  (1000 / TPOT p90 17.200 ms)" in line_with(text, "per-user tokens/s")
    assert "0.012 / 0.050 / 1.200 ms" in line_with(text, "loop lag p50 / p99 / max")
    assert "0.000 / 0.003 ms" in line_with(text, "issue lateness")
    assert line_with(text, "client CPU per request").endswith("150.000 µs")
    assert line_with(text, "connections opened").endswith("4")


def test_rows_are_aligned(stats: PointStats) -> None:
    text = render(stats, AUDIT)
    header = line_with(text, "  ms ")
    for name in ("TTFT", "TPOT", "latency"):
        row = line_with(text, f"  {name} ")
        assert len(row) == len(header)
    tps = line_with(text, "system output tokens/s")
    user = line_with(text, "per-user tokens/s")
    assert tps.index("(") == user.index("(")  # values right-aligned on one column


def test_render_without_tokens_or_audit() -> None:
    st = point_stats([rec(0, 5 * MS, 20 * MS)])
    text = render(st)
    assert "self-audit" not in text
    assert line_with(text, "system output tokens/s").endswith("n/a  (no tokenizer)")
    assert line_with(text, "per-user tokens/s").endswith("n/a  (no TPOT)")
    assert "n/a (no token counts)" in line_with(text, "  TPOT ")
    assert "failures" not in text


def test_render_empty_point() -> None:
    text = render(point_stats([]))
    assert "0 done, 0 failed of 0 issued" in text
    assert "n/a (no streamed response)" in line_with(text, "  TTFT ")
    assert "n/a (no completed request)" in line_with(text, "latency")


def test_render_lists_top_error_classes() -> None:
    records = [rec(0, None, None, error=f"E{i}", message="m", t_end=1) for i in range(5)]
    records += [rec(0, None, None, error="E9", message="the first", t_end=1)] * 3
    text = render(point_stats(records))
    assert "E9 3, E0 1, E1 1, 3 more classes" in line_with(text, "failures")
    assert "e.g. E9: the first" in text


def test_render_passes_preformatted_audit_rows(stats: PointStats) -> None:
    text = render(stats, {"loop lag p50 / p99 / max": "0.1 / 0.2 / 0.3 ms"})
    assert line_with(text, "loop lag").split() == [
        "loop",
        "lag",
        "p50",
        "/",
        "p99",
        "/",
        "max",
        "0.1",
        "/",
        "0.2",
        "/",
        "0.3",
        "ms",
    ]


def test_incomplete_tokens_are_flagged() -> None:
    st = point_stats([rec(0, 1, 1 * MS)], counts([-1], [-1]))
    assert "[token counts incomplete]" in render(st)


# Progress -------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_text() -> None:
    clock = FakeClock()
    p = Progress(stream=io.StringIO(), total=1000, plain_interval=None, clock=clock, label="c=16")
    p.start()
    clock.now += 12.5
    p.update(250, 3)
    assert p.line() == "c=16  250/1,000 done  3 failed  00:12.5  20.0 req/s"
    p.update(260, 3, issued=270)
    assert "260/270 done" in p.line()
    clock.now += 3600
    assert "1:00:12.5" in p.line()
    p.stop()


def test_progress_non_tty_writes_plain_lines() -> None:
    out = io.StringIO()
    p = Progress(stream=out, plain_interval=0.02)
    assert not p.is_tty
    p.start()
    p.update(5, 1, issued=8)
    time.sleep(0.15)
    p.stop()
    text = out.getvalue()
    lines = text.splitlines()
    assert lines
    assert "5/8 done  1 failed" in lines[-1]
    assert "\r" not in text and "\x1b" not in text
    settled = out.getvalue()
    time.sleep(0.05)
    assert out.getvalue() == settled  # stopped means stopped


def test_progress_non_tty_can_be_silent() -> None:
    out = io.StringIO()
    before = threading.active_count()
    with Progress(stream=out, plain_interval=None) as p:
        p.update(1, 0)
        assert threading.active_count() == before  # no timer thread at all
    assert out.getvalue() == ""


def test_progress_tty_redraws_in_place_and_erases_on_stop() -> None:
    out = TTY()
    p = Progress(stream=out, interval=0.01)
    assert p.is_tty
    p.start()
    p.update(42, 0)
    time.sleep(0.1)
    p.stop()
    text = out.getvalue()
    assert text.startswith("\r")
    assert "42 done" in text
    assert "\n" not in text
    assert text.endswith("\r\x1b[K")  # the line is gone: the table starts clean
    p.stop()  # idempotent
    assert out.getvalue() == text


def test_progress_cleans_up_on_ctrl_c() -> None:
    out = TTY()
    with pytest.raises(KeyboardInterrupt), Progress(stream=out, interval=0.01) as p:
        p.update(1, 0)
        time.sleep(0.05)
        raise KeyboardInterrupt
    assert out.getvalue().endswith("\r\x1b[K")
    assert not any(t.name == "mlpe-progress" for t in threading.enumerate())


def test_progress_survives_a_closed_stream() -> None:
    out = TTY()
    p = Progress(stream=out, interval=0.01)
    p.start()
    out.close()
    time.sleep(0.05)
    p.stop()
