"""A progress line on stderr while a run goes on.

The run only stores its counters (:meth:`Progress.update`, a tuple
assignment); a timer thread draws them about four times a second, so the
cost does not grow with the request rate.  On a terminal the line is
redrawn in place (carriage return, erase to end of line) and cut to the
terminal width so that it never wraps; :meth:`Progress.stop` erases it, so
the final table starts on a clean line even after Ctrl-C (use ``with
Progress(...)`` or call ``stop`` in a ``finally``; an ``atexit`` hook is the
last resort).  Elsewhere (a pipe, a CI log) a plain line is written every
``plain_interval`` seconds, or nothing when it is None.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

__all__ = ("Progress",)

_ERASE_LINE = "\x1b[K"


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(max(0.0, seconds), 60.0)
    hours, minutes = divmod(int(minutes), 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:04.1f}"
    return f"{minutes:02d}:{secs:04.1f}"


class Progress:
    """Done/issued, failed, elapsed time and rate, drawn by a timer.

    Args:
        stream: where to draw (default ``sys.stderr``).
        total: the planned number of requests, if known (shown as ``/total``
            when ``update`` is given no ``issued``).
        label: a prefix, e.g. the point's name.
        interval: seconds between redraws on a terminal.
        plain_interval: seconds between plain lines when ``stream`` is not a
            terminal; None writes nothing there.
        clock: seconds, monotonic (for tests).
    """

    def __init__(
        self,
        *,
        stream: TextIO | None = None,
        total: int | None = None,
        label: str = "",
        interval: float = 0.25,
        plain_interval: float | None = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        try:
            self._tty = self._stream.isatty()
        except (AttributeError, ValueError):  # a closed or odd stream
            self._tty = False
        self._total = total
        self._label = label
        self._period = interval if self._tty else plain_interval
        self._clock = clock
        self._state: tuple[int, int, int | None] = (0, 0, None)
        self._started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False
        self._lock = threading.Lock()

    @property
    def is_tty(self) -> bool:
        return self._tty

    def start(self) -> None:
        """Starts the clock and the timer (no timer when there is nothing to draw)."""
        self._started = self._clock()
        if self._period is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="mlpe-progress", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def update(self, done: int, failed: int = 0, issued: int | None = None) -> None:
        """Records the counters; drawing happens on the timer."""
        self._state = (done, failed, issued)

    def stop(self) -> None:
        """Stops the timer and erases the line on a terminal (idempotent)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        atexit.unregister(self.stop)
        self._stop.set()
        thread.join(timeout=1.0)
        with self._lock:
            if self._tty and self._drawn:
                self._write("\r" + _ERASE_LINE)
                self._drawn = False

    def __enter__(self) -> Progress:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def line(self) -> str:
        """The current progress text (without terminal control characters)."""
        done, failed, issued = self._state
        of = issued if issued is not None else self._total
        elapsed = self._clock() - self._started
        rate = done / elapsed if elapsed > 0 else 0.0
        parts = [self._label] if self._label else []
        parts.append(f"{done:,}/{of:,} done" if of is not None else f"{done:,} done")
        parts += [f"{failed:,} failed", _elapsed(elapsed), f"{rate:,.1f} req/s"]
        return "  ".join(parts)

    def _run(self) -> None:
        assert self._period is not None
        while not self._stop.wait(self._period):
            self.draw()

    def draw(self) -> None:
        """Draws the line once (the timer calls this)."""
        text = self.line()
        with self._lock:
            if self._stop.is_set():
                return
            if self._tty:
                width = shutil.get_terminal_size(fallback=(80, 24)).columns
                self._write("\r" + text[: max(1, width - 1)] + _ERASE_LINE)
                self._drawn = True
            else:
                self._write(text + "\n")

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # closed stream or broken pipe: stop drawing
            self._stop.set()
