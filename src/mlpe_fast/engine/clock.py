"""The engine's clock: :func:`monotonic_ns`, integer nanoseconds.

Every stamp of a run is on this one clock: the scheduler's ``t_sched``, the
client's ``t_issue``, the reads the compiled core stamps in C
(``csrc/mlpe_clock.h``), and the kernel's receive stamps, which arrive on
``CLOCK_REALTIME`` and are mapped onto it by a sampled offset
(``csrc/mlpe_rxstamp.h`` rule K3; :class:`~mlpe_fast.engine._receive.ArrivalClock`
in Python).  A latency is a difference of two stamps, so they must all come
from the same clock, and that clock must not jump when the wall clock is set.

Which clock: ``CLOCK_MONOTONIC`` on Linux and other POSIX systems,
``mach_absolute_time`` on macOS, ``QueryPerformanceCounter`` on Windows; the
clock ``time.monotonic_ns()`` reads on each of them (``time.get_clock_info
("monotonic")``) except on Windows before Python 3.13, whose
``time.monotonic_ns()`` is the millisecond ``GetTickCount64``.  On Linux the
clock is system-wide, so the stamps of the simulated endpoint and of the
engines of another process (``mlpe_fast.scale``) compare with ours.

:func:`monotonic_ns` is the compiled core's reading of that clock when the
core is in use, so that a stamp taken in Python and one taken in C never
differ by the clock on any platform; else ``time.monotonic_ns`` itself
(the pure-Python twins stamp with it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._native import USE_EXTENSIONS

__all__ = ("monotonic_ns",)

if TYPE_CHECKING:  # both are () -> int
    from time import monotonic_ns
else:
    from time import monotonic_ns

    if USE_EXTENSIONS:
        try:
            from ._reader_c import monotonic_ns
        except ImportError:  # no compiled core on this platform: the twins stamp with time's
            pass
