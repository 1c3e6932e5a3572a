"""What exact percentiles a block at a time cost (issue 23,
``metrics/order_stats.py``): a point's TPOT distribution and its
final-snapshot series over 1,000,000 samples, side by side in one run,

- ``whole array``: the samples in one numpy array (``np.percentile``,
  ``np.sort``: what a point computed before, holding the array and a copy);
- ``blocks``: the same samples read 65,536 at a time from a
  :class:`~mlpe_fast.metrics.order_stats.Sample` (what a point past 65,536
  samples computes now, holding one block and 65,536 counts).

The two give the same percentiles (the test asserts it); ``test_ratios``
prints blocks / whole array.

    PYTHONPATH=src pytest bench/bench_order_stats.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlpe_fast.metrics.order_stats import Sample
from mlpe_fast.metrics.series import series_stat
from mlpe_fast.metrics.stats import distribution

SAMPLES = 1_000_000
BLOCK = 65_536
VALUES = np.random.default_rng(23).lognormal(16, 0.4, SAMPLES)  # TPOT-like ns
_SECONDS: dict[tuple[str, str], float] = {}


def _input(variant: str) -> Any:
    if variant == "whole array":
        return VALUES
    return Sample(lambda: (VALUES[i : i + BLOCK] for i in range(0, SAMPLES, BLOCK)), np.float64)


FIGURES = {
    "distribution": distribution,
    "series stat": lambda values: series_stat("tpot_ns", values, early_stopping_estimates=True),
}


@pytest.mark.parametrize("figure", list(FIGURES))
@pytest.mark.parametrize("variant", ["whole array", "blocks"])
@pytest.mark.benchmark(group="exact percentiles of 1,000,000 samples")
def test_figure(benchmark: Any, figure: str, variant: str) -> None:
    result = benchmark.pedantic(
        FIGURES[figure], args=(_input(variant),), rounds=3, iterations=1, warmup_rounds=1
    )
    whole = FIGURES[figure](VALUES)
    assert (result.percentiles if figure == "distribution" else result["percentiles"]) == (
        whole.percentiles if figure == "distribution" else whole["percentiles"]
    )
    _SECONDS[figure, variant] = benchmark.stats.stats.median


def test_ratios() -> None:
    for figure in FIGURES:
        whole, blocks = _SECONDS.get((figure, "whole array")), _SECONDS.get((figure, "blocks"))
        if whole and blocks:
            print(
                f"\n{figure}: whole array {whole * 1e3:.1f} ms, blocks {blocks * 1e3:.1f} ms"
                f" = {blocks / whole:.2f}x ({blocks * 1e9 / SAMPLES:.0f} ns a sample)"
            )
