"""When a phase issues, as state without a loop or a client (sans-IO).

:class:`PhaseSchedule` is the decision half of ``load/scheduler.py``: it
holds what is issued, in flight and done, whether issuing is still on, and
for Poisson the next arrival.  It never reads a clock: every method that
can depend on time takes ``now_ns`` (the monotonic clock) from its caller,
and its answers say what to do (issue one now, the next wake-up, done), so
a test drives it with a fake clock and fake completions, as h11 does for
the wire.  ``run_phase`` is its driver: it owns the loop, the client, the
source and the callbacks.

The patterns:

* **concurrency** (closed loop): the opening fills ``concurrency`` slots,
  then each completion frees a slot that one new request takes;
* **offline**: the opening issues every request at once (spec §2.3: the
  reported concurrency is the count);
* **poisson**: nothing at the opening; arrivals at exponential gaps drawn
  from the scheduler seed, each keeping its scheduled time, so lateness is
  measured, not hidden.

The stop rules (reference client §3.2, spec §2.4): issuing ends at the
request count or once the duration has passed, whichever comes first; with
``pass_size`` a duration ends only at the end of a dataset pass (at least
one whole pass, and the issued count a whole number of passes), and with
``min_requests`` not before that many are out; a stop (a
signal, ``--max-duration``) or the end of the source ends it at once.  What
is in flight is still awaited: the phase is done when issuing has ended and
nothing is in flight, so every issued request yields one record.
"""

from __future__ import annotations

import math
import random

__all__ = ("CONCURRENCY", "OFFLINE", "PATTERNS", "POISSON", "PhaseSchedule")

CONCURRENCY = "concurrency"
OFFLINE = "offline"
POISSON = "poisson"
PATTERNS = (CONCURRENCY, OFFLINE, POISSON)


class PhaseSchedule:
    """The issuing state of one phase, from its start (module doc).

    Args:
        pattern: one of :data:`PATTERNS`.
        now_ns: the phase's start (also Poisson's first arrival).
        concurrency: the closed loop's slots.
        target_qps: Poisson's mean arrival rate.
        max_requests: the request count (None: no count).
        duration_ns: issuing ends this long after ``now_ns`` (None: never).
        pass_size: a duration ends at the end of a dataset pass this long.
        min_requests: a duration ends only once this many are issued
            (``--min-passes`` whole passes: the steady-state window's
            super-passes, spec §1.4).
        seed: the Poisson gaps' RNG seed.
        stopped: the phase was stopped before it started.

    Raises:
        ValueError: an unknown pattern, or Poisson without a positive rate.
    """

    __slots__ = (
        "_closed_loop",
        "_deadline_ns",
        "_mean_gap_ns",
        "_min_requests",
        "_opening_slots",
        "_rng",
        "completed",
        "failed",
        "in_flight",
        "issued",
        "issuing",
        "max_requests",
        "next_arrival_ns",
        "pass_size",
        "pattern",
        "stopped",
        "t_start",
        "t_stop_issuing",
    )

    def __init__(
        self,
        pattern: str,
        now_ns: int,
        *,
        concurrency: int = 1,
        target_qps: float | None = None,
        max_requests: int | None = None,
        duration_ns: int | None = None,
        pass_size: int | None = None,
        min_requests: int = 0,
        seed: int = 0,
        stopped: bool = False,
    ) -> None:
        if pattern not in PATTERNS:
            raise ValueError(f"unknown load pattern {pattern!r}")
        if pattern == POISSON and (not target_qps or target_qps <= 0):
            raise ValueError("poisson needs a positive target_qps")
        self.pattern = pattern
        self.max_requests = max_requests
        self.pass_size = pass_size
        self._deadline_ns = None if duration_ns is None else now_ns + duration_ns
        self._min_requests = min_requests
        self._closed_loop = pattern == CONCURRENCY
        # The opening burst: the closed loop's slots; Offline's has no bound
        # but the stop rules; Poisson's arrivals are all timed.
        self._opening_slots: float = (
            concurrency if pattern == CONCURRENCY else math.inf if pattern == OFFLINE else 0
        )
        self._rng = random.Random(seed)
        self._mean_gap_ns = 0.0 if target_qps is None else 1e9 / target_qps
        self.next_arrival_ns = now_ns
        self.t_start = now_ns
        self.t_stop_issuing = 0  # when issuing ended (0 while it is on)
        self.issuing = True
        self.stopped = stopped
        self.issued = 0
        self.in_flight = 0
        self.completed = 0
        self.failed = 0

    @property
    def done(self) -> bool:
        """Issuing has ended and every issued request has come back."""
        return not self.issuing and not self.in_flight

    def may_issue(self, now_ns: int) -> bool:
        """Whether one more request may go now.  The first False ends
        issuing, at ``now_ns``; it stays False from then on."""
        if self.issuing and (
            self.stopped
            or (self.max_requests is not None and self.issued >= self.max_requests)
            or (
                self._deadline_ns is not None
                and now_ns >= self._deadline_ns
                and self.issued >= self._min_requests
                # whole passes: a duration ends at the end of a dataset pass
                and (not self.pass_size or self.issued % self.pass_size == 0)
            )
        ):
            self._end_issuing(now_ns)
        return self.issuing

    def opening(self, now_ns: int) -> bool:
        """Whether the opening burst issues one more request now (module
        doc: the closed loop's slots, Offline's everything, Poisson's none)."""
        if self._opening_slots <= 0 or not self.may_issue(now_ns):
            return False
        self._opening_slots -= 1
        return True

    def opened(self, now_ns: int) -> None:
        """The opening burst is out: a rule that already holds (a count of
        zero, a stop, a duration past) ends issuing now rather than at the
        first completion.  Poisson's first arrival does that itself."""
        if self.pattern != POISSON:
            self.may_issue(now_ns)

    def sent(self, now_ns: int) -> None:
        """One request is being handed to the client now.  The last one of
        the count ends issuing at once, not at the next completion."""
        self.issued += 1
        self.in_flight += 1
        if self.max_requests is not None and self.issued >= self.max_requests:
            self.may_issue(now_ns)

    def source_ended(self, now_ns: int) -> None:
        """The request source has no request left: issuing ends."""
        if self.issuing:
            self._end_issuing(now_ns)

    def ended(self, ok: bool) -> None:
        """A request has come back, complete (``ok``) or failed."""
        self.in_flight -= 1
        self.completed += ok
        self.failed += not ok

    def refill(self, now_ns: int) -> bool:
        """After a completion: whether the freed slot issues one request now
        (the closed loop only; Offline's and Poisson's completions free none)."""
        return self._closed_loop and self.may_issue(now_ns)

    def arrival(self, now_ns: int) -> int | None:
        """Poisson's arrival due at :attr:`next_arrival_ns` (the caller wakes
        then): its scheduled time, to issue now, with ``next_arrival_ns``
        moved on to the one after; None when issuing has ended, and with it
        the arrivals."""
        if not self.may_issue(now_ns):
            return None
        due = self.next_arrival_ns
        self.next_arrival_ns = due + math.ceil(self._rng.expovariate(1.0) * self._mean_gap_ns)
        return due

    def stop(self, now_ns: int) -> None:
        """Stops issuing now (an interrupted run); what is in flight is
        still awaited."""
        self.stopped = True
        self.may_issue(now_ns)

    def _end_issuing(self, now_ns: int) -> None:
        self.issuing = False
        self.t_stop_issuing = now_ns
