"""The engine's clock (``mlpe_fast/engine/clock.py``) is the one every stamp
is on: where CPython's ``time.monotonic_ns`` reads the same clock as the
compiled core (POSIX systems, macOS, Windows from Python 3.13), a reading of
one lies between two readings of the other."""

from __future__ import annotations

import sys
import time

import pytest

from mlpe_fast.engine.clock import monotonic_ns

_SAME_CLOCK = sys.platform != "win32" or sys.version_info >= (3, 13)


@pytest.mark.skipif(not _SAME_CLOCK, reason="time.monotonic is GetTickCount64 here")
def test_the_engine_clock_is_time_monotonic_ns() -> None:
    for _ in range(1000):
        before = time.monotonic_ns()
        stamp = monotonic_ns()
        after = time.monotonic_ns()
        assert before <= stamp <= after


def test_the_engine_clock_is_nanoseconds_that_never_go_back() -> None:
    stamps = [monotonic_ns() for _ in range(1000)]
    assert all(isinstance(t, int) for t in stamps)
    assert stamps == sorted(stamps)
    start = monotonic_ns()
    time.sleep(0.01)
    assert 5_000_000 <= monotonic_ns() - start < 5_000_000_000  # 10 ms in ns, not us or s


def test_it_is_the_compiled_cores_clock_when_the_core_is_in_use() -> None:
    from mlpe_fast import NATIVE
    from mlpe_fast.engine import clock

    if not NATIVE:
        assert clock.monotonic_ns is time.monotonic_ns
        return
    reader = pytest.importorskip("mlpe_fast.engine._reader_c", reason="no compiled reader")
    assert clock.monotonic_ns is reader.monotonic_ns
