"""How a point's load is split over engine processes
(``docs/distributed.md`` §4.3).

* Few streams stay on one engine: a point at concurrency C uses
  ``min(E, ceil(C / min_streams))`` engines, so the low points of a curve
  run exactly as a single-process run does.
* The split is exact: ``c_i = C // E + (1 if i < C % E else 0)``, so the
  shares sum to C and differ by at most one (spec §4.1: concurrency is the
  target number of queries in flight, for the point as a whole).
* Offline (spec §5.7): each engine gets one contiguous block of the
  point's queries, so no engine mixes dataset passes beyond its own block.
"""

from __future__ import annotations

import os

__all__ = ("engines_for", "lease_block", "split_concurrency", "usable_cores")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system
    has one), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def engines_for(load: int, engines: int, min_streams: int) -> int:
    """How many engines a point of ``load`` streams (its concurrency, or its
    query count for Offline) runs on, given ``engines`` (0: one per usable
    core) and ``min_streams`` per engine."""
    if load < 1 or engines < 0 or min_streams < 1:
        raise ValueError(f"bad split: load {load}, engines {engines}, min_streams {min_streams}")
    available = engines or usable_cores()
    return max(1, min(available, -(-load // min_streams)))


def split_concurrency(total: int, engines: int) -> tuple[int, ...]:
    """``total`` streams over ``engines``: shares that sum to ``total`` and
    differ by at most one, larger shares first."""
    if total < engines or engines < 1:
        raise ValueError(f"cannot split concurrency {total} over {engines} engines")
    base, extra = divmod(total, engines)
    return tuple(base + (1 if i < extra else 0) for i in range(engines))


def lease_block(concurrency: int) -> int:
    """The lease size of an engine holding ``concurrency`` streams: twice its
    streams (it asks for the next lease at half of this one, so a full
    round of completions fits before it could stall), within 16..1024."""
    return max(16, min(1024, 2 * concurrency))
