"""Benchmark fixtures: seeded inputs, both implementations, one `bench` helper.

Run with ``make bench`` (``pytest bench/ --benchmark-disable-gc``).  Each
benchmark reports ``ns_per_event`` in its extra info; ``bench/report.py``
prints those side by side as ratios against the baseline.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest

from mlpe_fast._native import USE_EXTENSIONS


def decoder_module(name: str, impl: str) -> Any:
    if impl == "c" and not USE_EXTENSIONS:
        pytest.skip("compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
    return importlib.import_module(f"mlpe_fast.wire._{name}_{impl}")


@pytest.fixture
def bench(benchmark: Any, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Runs ``fn`` under pytest-benchmark; slow cases get fewer rounds so the
    whole suite stays within a few minutes on two cores."""

    def run(fn: Callable[[], Any], *, events: int, slow: bool = False) -> Any:
        if slow:
            result = benchmark.pedantic(fn, rounds=3, iterations=1, warmup_rounds=1)
        else:
            result = benchmark(fn)
        benchmark.extra_info["events"] = events
        stats = benchmark.stats.stats
        benchmark.extra_info["ns_per_event_median"] = stats.median * 1e9 / events
        benchmark.extra_info["ns_per_event_min"] = stats.min * 1e9 / events
        return result

    return run
