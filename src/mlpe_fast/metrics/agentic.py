"""The summary fields of an agentic point (``docs/agentic.md`` §3.3-3.5;
spec §1.1, the agentic Pareto axis).

* ``output_sequence_lengths_full_run``: the OSL stat block over every
  completed turn of the run, the turns after the window included: the
  checker's OSL range gate reads its ``avg`` ("the full-run, all-turns
  mean") and does not fall back to the window's.
* ``e2e_avg_interactivity`` = output tokens / turn time (s) over the
  window's completed turns, a turn's time running from its issue to its
  completion (so tool delays are not in it), with ``output_tokens_per_turn_total``
  and ``e2e_turn_time_seconds_total``, the two sums, which the checker
  prefers when present.  All three only when no turn in the window failed:
  the checker derives the ratio only then (output tokens exist only for
  successful turns, latency for every one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..engine.record import RequestRecord
from ..engine.record_columns import as_columns
from .series import series_stat, summary_block
from .tokens import TokenCounts

__all__ = ("agentic_summary_fields",)


def agentic_summary_fields(
    records: Sequence[RequestRecord], counts: TokenCounts, tracked: Sequence[bool]
) -> dict[str, Any]:
    """The fields above, from every turn's record, its token counts (same
    order) and whether it was issued inside the window."""
    columns = as_columns(records)
    ok = columns.ok
    osl = np.asarray(counts.osl)  # an agentic point's whole columns, as below
    counted = ok & (osl >= 0)
    fields: dict[str, Any] = {
        "output_sequence_lengths_full_run": {
            "output_sequence_lengths": summary_block(series_stat("osl", osl[counted]))
        }
    }
    window = np.asarray(tracked, dtype=np.bool_)
    if (window & ~ok).any():  # a failed turn in the window: no ratio (module doc)
        return fields
    keep = window & counted
    tokens = int(osl[keep].sum())
    latency = columns.t_finish() - columns.column("t_issue")  # RequestRecord.latency_ns
    seconds = int(latency[keep].sum()) / 1e9
    if tokens and seconds > 0:
        fields["e2e_avg_interactivity"] = tokens / seconds
        fields["output_tokens_per_turn_total"] = tokens
        fields["e2e_turn_time_seconds_total"] = seconds
    return fields
