"""Deadline scheduling for the simulated endpoint: one wake-up source per
server, one heap entry per response that is waiting for its next event.

Theory of operation
-------------------
1. Deadlines are absolute ``time.monotonic_ns()`` values, computed by the
   caller from the request's arrival; a late wake-up never shifts later
   deadlines, so errors do not accumulate over a stream.
2. A job is anything with ``cancelled`` and ``fire(now_ns)``; ``fire``
   does everything due by ``now_ns`` (one transport write) and returns its
   next deadline, or ``None`` when it is finished.
3. A job never runs before its deadline.  On a wake-up every due job runs,
   so jobs falling due within one wake-up share it (natural batching for
   sub-granularity delays), and ``fire`` itself sends every event of its
   stream that is due, in one write (up to a cap; a job stopped by the cap
   runs again on the next wake-up, which is immediate, so one huge stream
   cannot monopolise the loop).
4. Only the heap's earliest deadline is armed; re-arming happens when that
   changes, so a steady stream costs one syscall per wake-up, not per event.

Two wake-up sources:

* ``timerfd`` (Linux): a ``timerfd`` on ``CLOCK_MONOTONIC`` armed at the
  absolute deadline (``TFD_TIMER_ABSTIME``) and watched with
  ``loop.add_reader``.  The kernel wakes the loop's ``epoll_wait`` at the
  deadline plus the thread's timer slack (50 us by default), so delivery is
  typically 50-150 us late, without busy-waiting and without depending on
  the loop's millisecond timers.
* ``loop``: ``loop.call_later``.  uvloop keeps time in whole milliseconds
  and asyncio's epoll selector rounds its timeout up to one, so this source
  is up to about 1-2 ms late; delays are rounded *up* to whole milliseconds
  so a wake-up is never early (which would make the loop spin).

Measured lateness is in :mod:`mlpe_fast.sim.server`'s docstring and comes
from ``bench/bench_sim_server.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Literal, Protocol

__all__ = ("Job", "Pacer", "TimerKind", "make_pacer", "timerfd_available")

TimerKind = Literal["auto", "timerfd", "loop"]

_monotonic_ns = time.monotonic_ns


class Job(Protocol):
    """What the pacer runs."""

    @property
    def cancelled(self) -> bool: ...

    def fire(self, now_ns: int) -> int | None:
        """Do what is due at ``now_ns``; return the next deadline or None."""
        ...


class Pacer:
    """Runs jobs at absolute monotonic deadlines (see the module docstring).

    Subclasses provide the wake-up source through :meth:`_arm` and
    :meth:`_disarm` and call :meth:`_run` when it goes off.
    """

    kind: str = "abstract"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, Job]] = []
        self._seq = itertools.count()
        self._armed_ns: int | None = None
        self._closed = False
        self.wakeups = 0

    def schedule(self, deadline_ns: int, job: Job) -> None:
        """Run ``job.fire`` at ``deadline_ns`` (monotonic ns) or just after."""
        if self._closed:
            return
        heapq.heappush(self._heap, (deadline_ns, next(self._seq), job))
        armed = self._armed_ns
        if armed is None or deadline_ns < armed:
            self._armed_ns = deadline_ns
            self._arm(deadline_ns)

    def _run(self) -> None:
        """Fires every due job, then arms the earliest remaining deadline."""
        self._armed_ns = None
        self.wakeups += 1
        heap = self._heap
        # Jobs that stopped with work still due (a write-size cap) go after
        # this wake-up, so other connections get the loop in between.
        deferred: list[tuple[int, int, Job]] = []
        try:
            now = _monotonic_ns()
            while heap and heap[0][0] <= now:
                _, _, job = heapq.heappop(heap)
                if job.cancelled:
                    continue
                nxt = job.fire(now)
                if nxt is not None:
                    entry = (nxt, next(self._seq), job)
                    if nxt <= now:
                        deferred.append(entry)
                    else:
                        heapq.heappush(heap, entry)
                # Writing takes time: let jobs that fell due meanwhile share
                # this wake-up instead of costing another one.
                now = _monotonic_ns()
        finally:
            # Even if a job raised (a bug, reported by the loop), the pacer
            # keeps serving the others.
            for entry in deferred:
                heapq.heappush(heap, entry)
            while heap and heap[0][2].cancelled:  # they need no wake-up
                heapq.heappop(heap)
            if heap and not self._closed:
                self._armed_ns = heap[0][0]
                self._arm(heap[0][0])
            else:
                self._disarm()

    def close(self) -> None:
        """Forgets every job and releases the wake-up source."""
        self._closed = True
        self._heap.clear()
        self._armed_ns = None
        self._disarm()

    def _arm(self, deadline_ns: int) -> None:
        raise NotImplementedError

    def _disarm(self) -> None:
        raise NotImplementedError


class LoopPacer(Pacer):
    """Wakes up with ``loop.call_later`` (millisecond precision, never early)."""

    kind = "loop"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None

    def _arm(self, deadline_ns: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        delay_ns = deadline_ns - _monotonic_ns()
        if delay_ns <= 0:
            self._handle = self._loop.call_soon(self._run)
        else:
            # Whole milliseconds, rounded up: uvloop rounds to the nearest
            # millisecond, and a wake-up before the deadline would only
            # re-arm for the remainder (a spin through the loop).
            self._handle = self._loop.call_later(math.ceil(delay_ns / 1e6) / 1e3, self._run)

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


# --- timerfd ---------------------------------------------------------------

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


class _Timerfd:
    """A non-blocking ``CLOCK_MONOTONIC`` timerfd armed at absolute times.

    Uses ``os.timerfd_*`` where Python has them (3.13+), else libc through
    ctypes (``time_t`` is a ``long`` on the 64-bit Linux targets we ship).
    """

    def __init__(self) -> None:
        self._os_settime: Callable[..., object] | None = getattr(os, "timerfd_settime_ns", None)
        os_create: Callable[..., int] | None = getattr(os, "timerfd_create", None)
        flags = os.O_NONBLOCK | os.O_CLOEXEC
        if os_create is not None and self._os_settime is not None:
            self.fd = os_create(_CLOCK_MONOTONIC, flags=flags)
            return
        self._os_settime = None
        libc = ctypes.CDLL(None, use_errno=True)
        create = libc.timerfd_create
        create.argtypes = (ctypes.c_int, ctypes.c_int)
        create.restype = ctypes.c_int
        settime = libc.timerfd_settime
        settime.argtypes = (
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        )
        settime.restype = ctypes.c_int
        self._settime = settime
        self._spec = _Itimerspec()
        fd = create(_CLOCK_MONOTONIC, flags)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd = fd

    def set_abs(self, deadline_ns: int) -> None:
        """Arms at ``deadline_ns`` (monotonic); 0 disarms.  A deadline in
        the past fires at once."""
        if self._os_settime is not None:
            self._os_settime(self.fd, flags=_TFD_TIMER_ABSTIME, initial=deadline_ns)
            return
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def drain(self) -> None:
        """Consumes the expiry count so the fd stops being readable."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def timerfd_available() -> bool:
    """Whether this platform can use the ``timerfd`` pacer."""
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_long) != 8:
        return False
    try:
        _Timerfd().close()
    except (OSError, AttributeError):
        return False
    return True


class TimerfdPacer(Pacer):
    """Wakes up through a timerfd watched by the loop (tens of microseconds)."""

    kind = "timerfd"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._tfd = _Timerfd()
        try:
            loop.add_reader(self._tfd.fd, self._on_readable)
        except BaseException:
            self._tfd.close()
            raise

    def _on_readable(self) -> None:
        self._tfd.drain()
        self._run()

    def _arm(self, deadline_ns: int) -> None:
        # 0 would disarm; a deadline of 0 is "now" anyway.
        self._tfd.set_abs(max(deadline_ns, 1))

    def _disarm(self) -> None:
        if self._tfd.fd >= 0:
            self._tfd.set_abs(0)

    def close(self) -> None:
        super().close()
        if self._tfd.fd >= 0:
            self._loop.remove_reader(self._tfd.fd)
            self._tfd.close()


def make_pacer(loop: asyncio.AbstractEventLoop, kind: TimerKind = "auto") -> Pacer:
    """The pacer for ``kind``: ``"auto"`` takes the timerfd one where the
    platform and the loop support it, else the loop's timers.

    Raises:
        OSError, NotImplementedError: ``kind="timerfd"`` where it cannot work.
    """
    if kind == "loop":
        return LoopPacer(loop)
    if kind == "timerfd":
        return TimerfdPacer(loop)
    if timerfd_available():
        try:
            return TimerfdPacer(loop)
        except (OSError, NotImplementedError):
            pass
    return LoopPacer(loop)
