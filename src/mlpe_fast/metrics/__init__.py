"""Measurement: token counting and per-point statistics.

* :mod:`.tokens` -- :func:`load_tokenizer` (offline) and :class:`TokenCounter`
  (OSL and TPOT token counts in a worker thread, spec §1.2);
* :mod:`.stats` -- :func:`point_stats`: TTFT, TPOT, latency, percentiles,
  system tokens/s and tps_per_user of one point (spec §1.1-1.3).
"""

from .stats import PERCENTILES, Distribution, PointStats, distribution, point_stats
from .tokens import (
    SIMPLE_RULE,
    CountRule,
    TokenCounter,
    TokenCounts,
    hf_cache_dir,
    load_tokenizer,
    output_text_for_count,
    tpot_text_for_count,
)

__all__ = (
    "PERCENTILES",
    "SIMPLE_RULE",
    "CountRule",
    "Distribution",
    "PointStats",
    "TokenCounter",
    "TokenCounts",
    "distribution",
    "hf_cache_dir",
    "load_tokenizer",
    "output_text_for_count",
    "point_stats",
    "tpot_text_for_count",
)
