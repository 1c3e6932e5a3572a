"""The one writer of a point's run folder (spec §3.1, the reference's
layout: ``docs/running.md``).

``config.yaml`` and the event logs are opened when the point starts, the
logs flushed every second while the load runs (a crash or a kill loses at
most the last second of records), and the result files written once the
figures are known (:meth:`RunWriter.finish`).  On a failure the logs are
closed with what they hold and no session end, so that ``analyze`` says the
run did not end.  Without ``--report-dir`` nothing is written.

A write the disk refuses (full, or past a file-size limit) raises nothing
here: the first refusal is kept (:attr:`RunWriter.write_error`), the
point is told at the next second's flush and stops issuing (``on_refused``
of :meth:`RunWriter.session`), the result files are written if the disk
takes them, and their summary says the point did not complete
(``state: "interrupted"``, ``mlpe_fast.folder_error``).  The run then ends
with that one line and its own exit status (``run_status.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from ..accuracy.results import write_accuracy_results
from ..artifacts.config_yaml import write_config_yaml
from ..artifacts.events import (
    ERROR_LOADGEN,
    SESSION_ENDED,
    SESSION_STARTED,
    EventsWriter,
    write_sample_idx_map,
)
from ..artifacts.run_folder import RunFolder
from ..artifacts.summary import write_json
from ..config import RunConfig
from ..scale.driver import write_engines_report
from .figures import PointFigures
from .measured import Measured

__all__ = ("SERVER_CALLS", "SERVER_METRICS", "RunWriter")

#: The run folder's record of the calls before the load (``point/setup.py``).
SERVER_CALLS = "server_calls.json"
#: The server's metrics scraped through the point (``server_metrics/scraper.py``).
SERVER_METRICS = "server_metrics.jsonl"


class RunWriter:
    """A point's run folder, from its start (:meth:`open`) to its results
    (:meth:`finish`); :meth:`close` (also on leaving a ``with``) closes the
    event logs as they are.  ``events``/``warmup_events`` are None when no
    folder is written (or no warmup is run)."""

    def __init__(self, config: RunConfig, endpoints: Sequence[str]) -> None:
        self.config = config
        self.endpoints = list(endpoints)
        self.folder = RunFolder(config.report_dir) if config.report_dir else None
        self.events: EventsWriter | None = None
        self.warmup_events: EventsWriter | None = None
        self._server_metrics: BinaryIO | None = None
        self._refusals: list[str] = []  # writes the disk refused, outside the logs
        self._metrics_refused = False

    @property
    def path(self) -> Path | None:
        return None if self.folder is None else self.folder.path

    def open(self, err: TextIO | None = None) -> None:
        """Prepares the folder (an earlier run's files there are replaced,
        which ``err`` is told), writes ``config.yaml`` and opens the logs.

        Raises:
            UsageError: the folder cannot be written.
        """
        if self.folder is None:
            return
        if self.folder.prepare():
            print(
                f"mlpe-fast: --report-dir {self.folder.path}: replacing the run measured there "
                "before",
                file=sys.stderr if err is None else err,
            )
        write_config_yaml(self.folder.config_yaml, self.config, endpoints=self.endpoints)
        self.events = EventsWriter(self.folder.events, streaming=self.config.stream)
        if self.config.warmup_requests:
            self.warmup_events = EventsWriter(
                self.folder.warmup_events, streaming=self.config.stream
            )

    def server_calls(self, calls: dict[str, Any]) -> None:
        """``server_calls.json``: what the calls before the load did (the
        tokenizer check, the prefix-cache resets); nothing when none was made."""
        if self.folder is not None and calls:
            write_json(self.folder.path / SERVER_CALLS, calls, encoder="stdlib")

    def server_metrics_sink(self) -> Callable[[bytes], object] | None:
        """Where the scrapes' lines go: ``server_metrics.jsonl``, opened now
        (None without a folder); closed with the logs."""
        if self.folder is None:
            return None
        if self._server_metrics is None:
            self._server_metrics = (self.folder.path / SERVER_METRICS).open("wb")
        return self._server_metrics_line

    def _server_metrics_line(self, line: bytes) -> None:
        # On the loop, in the scraper's task: a refusal there would end the
        # task and come back as a traceback when scraping stops.
        if self._server_metrics is None or self._metrics_refused:
            return
        try:
            self._server_metrics.write(line)
        except OSError as error:  # the later lines are dropped: the file is cut
            self._metrics_refused = True
            self._refused(SERVER_METRICS, error)

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def write_error(self) -> str | None:
        """The first write to the folder the disk refused (module doc)."""
        errors = [w.write_error for w in self._writers() if w.write_error is not None]
        return next(iter(errors + self._refusals), None)

    @contextlib.asynccontextmanager
    async def session(
        self, on_refused: Callable[[str], object] | None = None
    ) -> AsyncIterator[None]:
        """The session: its start logged, then the event logs flushed every
        second while the load runs (its end is logged by :meth:`finish`);
        ``on_refused(error)``, once, at the first flush after the disk
        refused a write (module doc)."""
        if self.events is not None:
            self.events.session(SESSION_STARTED)
        writers = self._writers()

        async def flush() -> None:
            told = False
            while True:
                await asyncio.sleep(1.0)
                for writer in writers:
                    writer.flush()
                if self._server_metrics is not None and not self._metrics_refused:
                    try:
                        self._server_metrics.flush()
                    except OSError as error:
                        self._refused(SERVER_METRICS, error)
                refused = self.write_error
                if refused is not None and not told and on_refused is not None:
                    told = True
                    on_refused(refused)

        task = asyncio.get_running_loop().create_task(flush()) if writers else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def finish(
        self, figures: PointFigures, measured: Measured, entries: Sequence[dict[str, Any]]
    ) -> None:
        """The session's end in the log, then every result file: the
        summary, snapshot and report (or an accuracy run's report), the
        steady-state analysis, the accuracy results, an agentic run's inline
        scores, and the engines' report where there were several."""
        folder, events = self.folder, self.events
        if folder is None or events is None:
            return
        try:
            self._finish(folder, events, figures, measured, entries)
        except OSError as error:  # the disk refused a result file: the rest is lost
            self._refused(error.filename or folder.path, error)

    def _finish(
        self,
        folder: RunFolder,
        events: EventsWriter,
        figures: PointFigures,
        measured: Measured,
        entries: Sequence[dict[str, Any]],
    ) -> None:
        if measured.engines is not None:
            write_engines_report(folder.path, measured.engines)
        if figures.failure is not None:  # so that analyze of the log says so too
            events.error(ERROR_LOADGEN, "EngineLost", figures.failure)
        events.session(SESSION_ENDED)
        events.close()
        write_sample_idx_map(folder.sample_idx_map, events.sample_index_map)
        self.close()
        error = self.write_error
        if error is not None:  # the log is cut: the point did not complete (module doc)
            figures.summary["state"] = "interrupted"
            figures.summary["complete"] = False
            figures.summary.setdefault("mlpe_fast", {})["folder_error"] = error
        if self.config.mode == "acc":
            folder.report_txt.write_text(figures.report, encoding="utf-8")
        else:
            folder.write_results(figures.summary, figures.snapshot, figures.report)
            if figures.steady_state is not None:
                write_json(folder.steady_state, figures.steady_state, encoder="stdlib")
        if entries:
            write_accuracy_results(folder.accuracy_results, list(entries))
        if measured.inline_scores is not None:  # the inline accuracy's per-turn detail
            write_json(folder.path / "scores.json", measured.inline_scores, encoder="stdlib")

    def close(self) -> None:
        """Closes the logs with what they hold, and drops the index map's
        side files (written by :meth:`finish`, or not at all; idempotent)."""
        for writer in self._writers():
            writer.close()
            writer.sample_index_map.close()
        if self._server_metrics is not None:
            try:
                self._server_metrics.close()
            except OSError as error:
                self._refused(SERVER_METRICS, error)

    def _refused(self, where: str | Path, error: OSError) -> None:
        self._refusals.append(f"{where}: {error.strerror or error}")

    def _writers(self) -> list[EventsWriter]:
        return [w for w in (self.events, self.warmup_events) if w is not None]
