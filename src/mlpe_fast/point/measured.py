"""What the phases of a point hand to its figures: the records and the
client's own readings (the one type both sides share, below both)."""

from __future__ import annotations

from array import array
from typing import Any

import msgspec

from ..engine.record_columns import RecordColumns
from ..scale.driver import EngineRun

__all__ = ("Measured",)


class Measured(msgspec.Struct):
    """A performance phase's outcome.

    ``records``: every measured record, as compact columns (issue 23; an
    agentic run's kept whole as well: its answers are read again);
    ``tracking_start``: the performance-tracking start (spec §1.4), on the
    monotonic clock of the records; ``tracking_started_at``: the same
    instant on the wall clock, in ns since the Unix epoch (the summary's
    ``test_started_at``, which dates the run);
    ``lags``/``cpu_ns``/``cpu_system_ns``: the loop-lag probe and the CPU
    clocks of the self-audit; ``engines``: the merged run of several engine
    processes (None: this process alone); ``tracked``: an agentic run's
    record-by-record "issued inside the window"; ``inline_scores``: its
    inline accuracy turn by turn (``scores.json``), and ``inline_entry``
    its entry in ``accuracy_results.json``.
    """

    records: RecordColumns = msgspec.field(default_factory=RecordColumns)
    tracking_start: int = 0
    lags: array[int] = msgspec.field(default_factory=lambda: array("q"))
    cpu_ns: int = 0
    cpu_system_ns: int = 0
    engines: EngineRun | None = None
    tracked: list[bool] | None = None
    inline_scores: dict[str, Any] | None = None
    inline_entry: dict[str, Any] | None = None
    tracking_started_at: int = 0
