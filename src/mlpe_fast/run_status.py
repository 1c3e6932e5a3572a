"""What the points of ``mlpe-fast run`` said, and the exit status it makes.

Each point's result is taken as it ends (:meth:`RunStatus.took`); the run's
status is decided once, in this order: an engine lost (5), the disk
refused the run folder (7), interrupted (130), no request succeeded
anywhere it was tried (4), answers that are not what was asked for (6),
else 0 (``docs/running.md`` lists the statuses).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # light to import: the CLI reads the statuses at start
    from .config import RunConfig
    from .point import PointResult

__all__ = (
    "EXIT_ENGINE_LOST",
    "EXIT_FOLDER_REFUSED",
    "EXIT_INTERRUPTED",
    "EXIT_NOTHING_SUCCEEDED",
    "EXIT_SUSPECT_ANSWERS",
    "RunStatus",
)

EXIT_NOTHING_SUCCEEDED = 4
EXIT_ENGINE_LOST = 5
EXIT_SUSPECT_ANSWERS = 6
EXIT_FOLDER_REFUSED = 7
EXIT_INTERRUPTED = 130


class RunStatus:
    """The points' outcomes so far: engines lost, points whose answers are
    suspect, points where nothing succeeded (and the first error there)."""

    def __init__(self, err: TextIO | None = None) -> None:
        self.err = err
        self.lost: list[str] = []
        self.suspect: list[str] = []
        self.nothing: list[tuple[str, str]] = []
        self.refused: list[str] = []

    def took(self, config: RunConfig, result: PointResult) -> None:
        """Notes one point's result, and says at once if it was cut short."""
        where = f"concurrency {config.concurrency}"
        if result.failure is not None:
            self.lost.append(result.failure)
            kept = f"; partial results in {config.report_dir}" if config.report_dir else ""
            self._say(f"the point was cut short: {result.failure}{kept}")
        if result.folder_error is not None:
            self.refused.append(result.folder_error)
            self._say(
                f"the disk refused the run folder ({result.folder_error}): the point stopped "
                "there; the figures above cover what completed, the folder is incomplete"
            )
        if result.answers is not None and result.answers.suspect:
            self.suspect.append(where)
        if result.stats.issued and not result.stats.completed:
            first = next(iter(result.stats.error_examples.values()), "")
            self.nothing.append((where, first))

    def exit_status(self, *, interrupted: bool, curve: bool) -> int:
        """The run's status, with its last line on stderr."""
        if self.lost:
            return EXIT_ENGINE_LOST
        if self.refused:  # said as the point ended
            return EXIT_FOLDER_REFUSED
        if interrupted:
            self._say(
                "interrupted; the curve stops at that point"
                if curve
                else "interrupted; the results cover what completed"
            )
            return EXIT_INTERRUPTED
        if self.nothing:
            several = len(self.nothing) > 1
            where = f" at {', '.join(at for at, _ in self.nothing)}" if several else ""
            self._say(f"no request succeeded{where}: {self.nothing[0][1]}")
            return EXIT_NOTHING_SUCCEEDED
        if self.suspect:
            where = f" (at {', '.join(self.suspect)})" if len(self.suspect) > 1 else ""
            self._say(
                f"some answers are not what was asked for{where}: see the WARNING lines above"
            )
            return EXIT_SUSPECT_ANSWERS
        return 0

    def _say(self, line: str) -> None:
        print(f"mlpe-fast: {line}", file=sys.stderr if self.err is None else self.err)
