"""The run folder of one point, laid out as the reference client lays it out.

Spec §3.1 (``mlcommons/endpoints:docs/OUTPUT_STRUCTURE.md``)::

    <report_dir>/
    ├── config.yaml                       resolved config, secrets redacted (written first)
    ├── report.txt                        human-readable report
    ├── events.jsonl                      per-query event log of the measured phases
    ├── warmup_events.jsonl               the warmup's event log (spec §2.4: warmup logs
    │                                     are retained for review; the reference has none)
    ├── sample_idx_map.json               {phase: {sample_uuid: dataset index}}
    ├── performance/result_summary.json   the point's metrics (what the checker reads)
    ├── accuracy/accuracy_results.json    scored accuracy datasets (--mode acc|both)
    ├── steady_state.json                 the steady-state analysis (spec §1.4) and its
    │                                     point.yaml block (fixed-concurrency points)
    ├── server_calls.json                 mlpe-fast's calls before the load: tokenizer
    │                                     check, prefix-cache resets, the metrics probe
    ├── server_metrics.jsonl              the servers' /metrics scraped through the
    │                                     point (each replica's), one line a scrape
    └── metrics/final_snapshot.json       the counters and series the summary came from
        metrics/.ready                    touched once final_snapshot.json is written

``config.yaml`` is written before the load starts, after a check that
``metrics/`` can be written, so that a folder that cannot be written is a
one-line mistake at once, not a lost run; the rest when the point ends,
interrupted or not.  ``metrics/.ready`` comes last, once the final snapshot
is on disk: a folder without it holds no finished point (a killed run leaves
only ``config.yaml`` and the ``events.jsonl`` flushed so far).  The
reference touches its ``.ready`` when its metrics aggregator starts (spec
§3.1), so there the file says nothing about how the run ended; here it
does.
"""

from __future__ import annotations

import glob
import importlib
import shutil
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .summary import write_json

__all__ = ("RunFolder", "read_config_yaml")


def read_config_yaml(folder: str | Path) -> dict[str, Any]:
    """A run folder's ``config.yaml`` as a plain mapping ({} when absent).

    Read leniently, without :func:`mlpe_fast.config.load_yaml`'s schema
    check: folders the reference client wrote carry settings of its own.

    Raises:
        UsageError: the file is not readable YAML.
    """
    path = Path(folder) / "config.yaml"
    if not path.is_file():
        return {}
    yaml = importlib.import_module("yaml")  # PyYAML has no type stubs here
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise UsageError(f"cannot read {path}: {' '.join(str(error).split())}") from None
    return loaded if isinstance(loaded, dict) else {}


#: What a run writes into its folder (module doc), removed from a folder a
#: run is measured into again: the new run's files must be the only ones.
RUN_ENTRIES = (
    "config.yaml",
    "report.txt",
    "events.jsonl",
    "warmup_events.jsonl",
    "sample_idx_map.json",
    "steady_state.json",
    "scores.json",
    "performance",
    "accuracy",
    "metrics",
    "analysis",
    "distributed",
    "swe_bench_runs",
    "server_calls.json",
    "server_metrics.jsonl",
)

#: What a run killed mid-write leaves beside those entries, and the next run
#: into the folder removes too: an event log's side files of late records
#: (``events.jsonl.part0``...) and its final file before the rename
#: (``.final``), ``sample_idx_map.json.partial`` (``artifacts/events.py``,
#: ``artifacts/sample_idx_map.py``).
LEFTOVER_SUFFIXES = (".part*", ".final")


class RunFolder:
    """Paths and writes of one run folder (module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def config_yaml(self) -> Path:
        return self.path / "config.yaml"

    @property
    def report_txt(self) -> Path:
        return self.path / "report.txt"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def warmup_events(self) -> Path:
        return self.path / "warmup_events.jsonl"

    @property
    def sample_idx_map(self) -> Path:
        return self.path / "sample_idx_map.json"

    @property
    def result_summary(self) -> Path:
        return self.path / "performance" / "result_summary.json"

    @property
    def accuracy_results(self) -> Path:
        return self.path / "accuracy" / "accuracy_results.json"

    @property
    def steady_state(self) -> Path:
        return self.path / "steady_state.json"

    @property
    def final_snapshot(self) -> Path:
        return self.path / "metrics" / "final_snapshot.json"

    @property
    def ready(self) -> Path:
        return self.path / "metrics" / ".ready"

    def prepare(self) -> list[str]:
        """Creates the folder and ``metrics/``, checks that a file can be
        written there, and removes what an earlier run left in the same
        folder (:data:`RUN_ENTRIES`: its ``warmup_events.jsonl``, accuracy
        results or analysis would otherwise sit beside this run's files as
        if they were its own; ``metrics/.ready`` is touched by
        :meth:`write_results`).  Returns the names removed; other files
        are left alone.

        Raises:
            UsageError: the folder cannot be written (one line, exit 2).
        """
        probe = self.path / "metrics" / ".write-check"
        removed = []
        try:
            # Only a folder a run wrote (its log and config both there) is
            # cleared: a folder of the user's own keeps whatever it holds.
            # (Asking is already an OSError for a name the system refuses.)
            earlier_run = self.events.is_file() and self.config_yaml.is_file()
            for name in self._earlier_entries() if earlier_run else ():
                entry = self.path / name
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                elif entry.exists() or entry.is_symlink():
                    entry.unlink()
                else:
                    continue
                removed.append(name)
            probe.parent.mkdir(parents=True, exist_ok=True)
            probe.touch()
            probe.unlink()
            return removed
        except OSError as error:
            raise UsageError(
                f"--report-dir {self.path}: cannot write there: {error.strerror or error}"
            ) from None

    def _earlier_entries(self) -> list[str]:
        """:data:`RUN_ENTRIES`, then the leftovers of any of them."""
        leftovers = {
            found.name
            for name in RUN_ENTRIES
            for suffix in LEFTOVER_SUFFIXES
            for found in self.path.glob(glob.escape(name) + suffix)
        }
        return [*RUN_ENTRIES, *sorted(leftovers)]

    def write_results(self, summary: dict[str, Any], snapshot: dict[str, Any], report: str) -> None:
        """``performance/result_summary.json``, ``metrics/final_snapshot.json``
        (then ``metrics/.ready``) and ``report.txt``."""
        self.result_summary.parent.mkdir(parents=True, exist_ok=True)
        # As the reference writes them: the snapshot with the standard
        # library's json, the summary with msgspec (artifacts.summary).
        self.final_snapshot.parent.mkdir(parents=True, exist_ok=True)
        write_json(self.final_snapshot, snapshot, encoder="stdlib")
        self.ready.touch()
        write_json(self.result_summary, summary)
        self.report_txt.write_text(report, encoding="utf-8")
