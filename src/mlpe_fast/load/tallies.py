"""What a phase has done so far, read off its schedule (``phase_schedule.py``,
``agentic_schedule.py``): the one place both kinds of phase keep their
counters' readings, zero before the schedule starts."""

from __future__ import annotations

from typing import Protocol

__all__ = ("ScheduleTallies",)


class _Counts(Protocol):
    issued: int
    completed: int
    failed: int
    t_start: int


class ScheduleTallies:
    """``issued``, ``completed``, ``failed`` and ``t_start`` of the schedule
    in ``_schedule`` (None until the phase starts)."""

    _schedule: _Counts | None

    @property
    def issued(self) -> int:
        return 0 if self._schedule is None else self._schedule.issued

    @property
    def completed(self) -> int:
        return 0 if self._schedule is None else self._schedule.completed

    @property
    def failed(self) -> int:
        return 0 if self._schedule is None else self._schedule.failed

    @property
    def t_start(self) -> int:
        return 0 if self._schedule is None else self._schedule.t_start
