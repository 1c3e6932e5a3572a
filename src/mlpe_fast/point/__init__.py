"""One measurement point: dataset -> scheduler -> engine -> records ->
figures -> run folder -> table (``docs/architecture.md``, data flow).

* :mod:`.setup` -- what a point needs, checked before any file is written,
  and its resources on one exit stack;
* :mod:`.engines` -- where the performance phase runs and how many requests
  it issues;
* :mod:`.performance`, :mod:`.agentic`, :mod:`.accuracy` -- the phases, one
  per kind of run, each with one interface;
* :mod:`.measured` -- what the phases hand to the figures;
* :mod:`.figures` -- records to figures, pure;
* :mod:`.writer` -- the one writer of the run folder;
* :mod:`.interrupt` -- SIGINT/SIGTERM during a point;
* :mod:`.run` -- :func:`run_point`, the composition.

The event loop does the I/O and the scheduling; token counting runs in a
worker thread beside it, fed one record at a time.  Every issued request
yields exactly one record, and the counts in the table are computed from
those records.
"""

from __future__ import annotations

from .run import PointResult, run_point

__all__ = ("PointResult", "run_point")
