"""End-of-run summaries: the early-stopping estimates of a point (issue 23).

``result_summary.json`` and ``final_snapshot.json`` carry LoadGen's
early-stopping estimate for each tail-latency series (TTFT, TPOT, latency;
eight grid targets from p50 to p99.99 each).  An estimate depends on the
sample count only (``metrics/early_stopping.py``: a bisection over the
over-latency budget, each step a bisection of ``I_x`` continued fractions),
so a point's three series walk the same searches.  Side by side, per point:

- ``remembered``: the searches' answers remembered (what a run does; the
  memory cleared once, before the point);
- ``each series alone``: the memory cleared before every series, what each
  series cost before the answers were remembered.

Run::

    PYTHONPATH=src pytest bench/bench_summaries.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

from typing import Any

import pytest

from mlpe_fast.metrics import early_stopping
from mlpe_fast.metrics.series import PERCENTILES

TAIL_SERIES = 3  # TTFT, TPOT, latency
TARGETS = list(early_stopping.estimate_targets(PERCENTILES).values())


def point_estimates(samples: list[float], clear_each_series: bool) -> list[float | None]:
    early_stopping._min_passing.cache_clear()
    out: list[float | None] = []
    for _ in range(TAIL_SERIES):
        if clear_each_series:
            early_stopping._min_passing.cache_clear()
        out += [early_stopping.estimate(samples, p) for p in TARGETS]
    return out


@pytest.mark.parametrize("n", [8_000, 100_000])
@pytest.mark.parametrize("variant", ["remembered", "each series alone"])
@pytest.mark.benchmark(group="early stopping: a point's three tail series")
def test_point_estimates(benchmark: Any, n: int, variant: str) -> None:
    samples = [float(i) for i in range(n)]
    clear = variant == "each series alone"
    result = benchmark.pedantic(
        point_estimates, args=(samples, clear), rounds=5, iterations=1, warmup_rounds=1
    )
    assert result == point_estimates(samples, not clear)
    assert result[: len(TARGETS)] == result[len(TARGETS) : 2 * len(TARGETS)]
