"""Measurement: token counting and per-point statistics.

* :mod:`.count_inputs` -- what each count tokenizes (OSL, TPOT tokens, ISL;
  spec §1.2), from the records ``events.jsonl`` holds;
* :mod:`.chat_template` -- the model's chat template, rendered as
  ``transformers`` renders it, for reasoning and tool-call outputs;
* :mod:`.fast_bpe` -- an exact count-only path for byte-level BPE;
* :mod:`.hf_cache` -- where a Hugging Face id's files are in the local hub
  cache (for the tokenizer and its chat template alike);
* :mod:`.tokens` -- :func:`load_tokenizer` (offline) and :class:`TokenCounter`
  (counts in a worker thread);
* :mod:`.stats` -- :func:`point_stats`: TTFT, TPOT, latency, percentiles,
  system tokens/s and tps_per_user of one point (spec §1.1-1.3);
* :mod:`.series`, :mod:`.early_stopping` -- the reference client's stat
  blocks and early-stopping estimates, for the run folder's files;
* :mod:`.order_stats` -- exact order statistics of samples read a block at
  a time (a long point's percentiles without its series in memory);
* :mod:`.usage_check` -- the endpoint's ``usage`` beside our counts;
* :mod:`.agentic` -- an agentic point's summary fields (full-run OSL,
  ``e2e_avg_interactivity``).

The package re-exports; no module inside it imports the package itself
(``tests/unit/test_import_graph.py``).
"""

from .hf_cache import hf_cache_dir
from .stats import PERCENTILES, Distribution, PointSeries, PointStats, distribution, point_stats
from .tokens import CountJob, TokenCounter, TokenCounts, count_job, load_tokenizer

__all__ = (
    "PERCENTILES",
    "CountJob",
    "Distribution",
    "PointSeries",
    "PointStats",
    "TokenCounter",
    "TokenCounts",
    "count_job",
    "distribution",
    "hf_cache_dir",
    "load_tokenizer",
    "point_stats",
)
