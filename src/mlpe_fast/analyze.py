"""``mlpe-fast analyze RUN_FOLDER``: the point's metrics again, from its event log.

Reads ``events.jsonl`` in the reference client's format -- mlpe-fast's own
or one the reference client (``inference-endpoint``) wrote -- and computes
``result_summary.json`` and ``final_snapshot.json`` with the same code a
live run uses (spec §1, §3.2-3.3): each query's ISSUED, RECV_FIRST, error
and COMPLETE lines become a record, its ``TextModelOutput`` and
``PromptData`` the inputs of its token counts
(:mod:`mlpe_fast.metrics.count_inputs`).  A run of mlpe-fast analysed again
reproduces its summary exactly: the live run counts tokens from the very
objects it writes into the log.

Read from the folder: ``events.jsonl`` (required), ``config.yaml``
(streaming, load pattern, seeds, model and tokenizer names) and
``sample_idx_map.json`` (dataset indices), both optional; without a
``streaming`` setting (or with ``auto``) the log's RECV_FIRST lines say
whether the run streamed.  Counting rules
differ from the reference in one place, on purpose: a query whose log has
an error line is *failed*, not completed (the reference also counts its
COMPLETE line as completed, so its completed + failed exceeds issued as
soon as a query fails, which the checker's accounting rule rejects).

State: ``complete`` only when the log ends the session (``session.ended``)
and every measured query has its end (COMPLETE or an error line), none of
them ``Cancelled``; otherwise ``interrupted``, and :attr:`Analysis.interrupted`
says why in one line.  That follows what the runs write: a run killed
(SIGKILL, a crash) leaves the lines flushed so far and no ``session.ended``,
perhaps with its last line cut (left out); mlpe-fast on Ctrl-C ends the
queries in flight as ``Cancelled`` records and then the session; the
reference client on Ctrl-C ends the session with the queries in flight
left without an end.  A log with a session but no performance window
measured nothing: ``interrupted`` too.

Written to ``RUN_FOLDER/analysis/`` (or ``--output``): never over the run's
own files.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ._version import __version__
from .artifacts.events import (
    ERROR_CLIENT,
    ERROR_GENERIC,
    ERROR_LOADGEN,
    ERROR_SESSION,
    SAMPLE_COMPLETE,
    SAMPLE_ISSUED,
    SAMPLE_RECV_FIRST,
    SESSION_ENDED,
    SESSION_START_PERFORMANCE_TRACKING,
    SESSION_STOP_PERFORMANCE_TRACKING,
    ErrorData,
    PromptData,
    TextModelOutput,
    iter_events,
)
from .artifacts.run_folder import read_config_yaml
from .artifacts.summary import (
    final_snapshot,
    report_text,
    result_summary,
    warnings_text,
    write_json,
)
from .engine.record import RequestRecord
from .errors import UsageError
from .metrics.agentic import agentic_summary_fields
from .metrics.answers import check_answers
from .metrics.chat_template import ChatTemplate, tokenizer_dir
from .metrics.count_inputs import CountInput, osl_input, prompt_input, tpot_input
from .metrics.stats import point_stats
from .metrics.tokens import CountJob, TokenCounter, load_tokenizer
from .wire.events import NO_RESPONSE

__all__ = ("Analysis", "add_arguments", "analyze", "main")

_ERRORS = frozenset({ERROR_GENERIC, ERROR_LOADGEN, ERROR_SESSION, ERROR_CLIENT})


_CANCELLED = "Cancelled"  # the error class of a query an interrupted run ended


class Analysis(msgspec.Struct, frozen=True):
    """What :func:`analyze` computed; ``interrupted`` says in one line why
    the run is not complete (None when it is)."""

    summary: dict[str, Any]
    snapshot: dict[str, Any]
    report: str
    interrupted: str | None = None


class _Query:
    __slots__ = ("complete", "error", "first", "issued", "output", "prompt", "reason", "tracked")

    def __init__(self, issued: int, prompt: PromptData | None, tracked: bool) -> None:
        self.issued = issued
        self.prompt = prompt
        self.tracked = tracked
        self.first: int | None = None
        self.complete: int | None = None
        self.output: TextModelOutput | None = None
        self.reason: str | None = None
        self.error: ErrorData | None = None


class _Log:
    """What :func:`_read_events` found."""

    __slots__ = (
        "cut_short",
        "cut_tail",
        "ended",
        "lines",
        "queries",
        "streamed",
        "tracking_start",
        "window",
    )

    def __init__(self) -> None:
        self.queries: dict[str, _Query] = {}  # by uuid
        self.tracking_start = 0
        self.window = False  # a session.start_performance_tracking line
        self.ended = False  # a session.ended line
        self.streamed = False  # a RECV_FIRST line
        self.lines = 0
        self.cut_tail: list[int] = []  # the number of a last line cut short
        self.cut_short: str | None = None  # a run-wide error.loadgen line (an engine lost)


def _read_events(path: Path) -> _Log:
    """The log's queries, the start of performance tracking and how it ended."""
    log = _Log()
    queries = log.queries
    tracking = False
    tracking_start = 0
    for event in iter_events(path, cut_tail=log.cut_tail):
        log.lines += 1
        kind = event.event_type
        if kind == SESSION_ENDED:
            log.ended = True
        elif kind == SESSION_START_PERFORMANCE_TRACKING:
            log.window = True
            if not tracking_start:
                tracking_start = event.timestamp_ns
            tracking = True
        elif kind == SESSION_STOP_PERFORMANCE_TRACKING:
            tracking = False
        elif kind == SAMPLE_ISSUED:
            prompt = event.data if isinstance(event.data, PromptData) else None
            queries[event.sample_uuid] = _Query(event.timestamp_ns, prompt, tracking)
        else:
            query = queries.get(event.sample_uuid)
            if kind == ERROR_LOADGEN and not event.sample_uuid and log.cut_short is None:
                data = event.data
                log.cut_short = data.error_message if isinstance(data, ErrorData) else ""
            if query is None:
                continue  # a line of a query issued before the log began
            if kind == SAMPLE_RECV_FIRST:
                query.first = event.timestamp_ns
                log.streamed = True
            elif kind == SAMPLE_COMPLETE:
                query.complete = event.timestamp_ns
                if isinstance(event.data, TextModelOutput):
                    query.output = event.data
                if isinstance(event.finish_reason, str):
                    query.reason = event.finish_reason
            elif kind in _ERRORS and query.error is None:
                query.error = (
                    event.data
                    if isinstance(event.data, ErrorData)
                    else ErrorData(error_type="Error", error_message="")
                )
    log.tracking_start = tracking_start
    return log


def _interruption(log: _Log, measured: list[_Query], events: Path) -> str | None:
    """Why the log shows no finished run, in one line (None: it does)."""
    n = len(measured)
    queries = f"the {n} {'query' if n == 1 else 'queries'} that were logged"
    cut = f"; its last line ({log.cut_tail[0]}) is cut short and left out" if log.cut_tail else ""
    if not log.ended:
        return (
            "the log has no session.ended line: the run did not end (killed?); "
            f"the figures cover {queries}{cut}"
        )
    if log.cut_short is not None:
        return f"the run was cut short: {log.cut_short or 'a load generator error'}"
    if cut:
        return f"{events.name}: the last line ({log.cut_tail[0]}) is cut short and left out"
    open_ = sum(q.complete is None and q.error is None for q in measured)
    if open_:
        return (
            f"{open_} of the {n} measured queries have no COMPLETE or error line: the session "
            "ended before they did (interrupted?); they are counted as failed (Incomplete)"
        )
    cancelled = sum(q.error is not None and q.error.error_type == _CANCELLED for q in measured)
    if cancelled:
        return (
            f"{cancelled} of the {n} measured queries were cancelled: the run was "
            "interrupted (Ctrl-C?) before they ended"
        )
    if not log.window:
        return "the log has no session.start_performance_tracking line: nothing was measured"
    return None


def _record(uuid: str, index: int, query: _Query) -> RequestRecord:
    """The engine record a query's lines stand for (what the metrics read)."""
    end = query.complete if query.complete is not None else query.issued
    failed = query.error is not None or query.complete is None
    response = msgspec.structs.replace(
        NO_RESPONSE,
        t_first=query.first,
        events=1 if query.first is not None else 0,
        finish_reason=query.reason,
    )
    error_class = error_message = None
    if failed:
        error = query.error
        error_class = error.error_type if error is not None else "Incomplete"
        error_message = error.error_message if error is not None else "the log has no COMPLETE line"
    return RequestRecord(
        sample_index=index,
        sample_id=uuid,
        t_sched=query.issued,
        t_issue=query.issued,
        t_end=end,
        response=response,
        error_class=error_class,
        error_message=error_message,
    )


def _section(mapping: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        value = mapping.get(key)
        if not isinstance(value, dict):
            return {}
        mapping = value
    return dict(mapping)


def analyze(folder: str | os.PathLike[str], *, tokenizer: str | None = None) -> Analysis:
    """Computes a run folder's summary from its ``events.jsonl``.

    Raises:
        UsageError: no event log, an empty one, a malformed line (but a cut
            last line: module doc), a malformed ``config.yaml`` or
            ``sample_idx_map.json``, or no tokenizer.
    """
    root = Path(folder)
    events = root / "events.jsonl"
    if not events.is_file():
        raise UsageError(f"{root}: no events.jsonl (is this a run folder?)")
    config = read_config_yaml(root)
    model_params = _section(config, "model_params")
    settings = _section(config, "settings")
    load_pattern = _section(settings, "load_pattern")
    name = tokenizer or model_params.get("tokenizer_name") or model_params.get("name")
    if not name or not isinstance(name, str):
        raise UsageError(f"{root}: config.yaml names no tokenizer: pass --tokenizer DIR")
    indices = _sample_indices(root / "sample_idx_map.json")
    log = _read_events(events)
    if not log.lines:
        raise UsageError(
            f"{events}: no event in it: the run logged nothing (stopped or killed within "
            "its first second?)"
        )
    queries, tracking_start = log.queries, log.tracking_start
    streaming = _streaming(model_params.get("streaming"), log)
    try:
        tok = load_tokenizer(name)
    except UsageError as error:
        if tokenizer:
            raise
        raise UsageError(f"config.yaml's tokenizer: {error}; pass --tokenizer DIR") from None
    directory = tokenizer_dir(name)
    template = None if directory is None else ChatTemplate.from_tokenizer_dir(directory)
    # An agentic run's summary also reads the turns after its window
    # (metrics/agentic.py); any other run's, only the window's queries.
    agentic = load_pattern.get("type") == "agentic_inference"
    records: list[RequestRecord] = []
    tracked: list[bool] = []
    # No spill file: the jobs' texts are the queries' own, held here anyway.
    counter = TokenCounter(tok, template=template, spill=False)
    try:
        for uuid, query in queries.items():
            if not query.tracked and not agentic:
                continue
            tracked.append(query.tracked)
            record = _record(uuid, indices.get(uuid, -1), query)
            records.append(record)
            ok = record.error_class is None
            counter.submit(
                CountJob(
                    osl=_osl(query) if ok else None,
                    tpot=_tpot(query, streaming) if ok else None,
                    isl=_isl(query),
                )
            )
        all_counts = counter.finish()
    finally:
        counter.close()
    extra: dict[str, Any] = {}
    counts = all_counts
    if agentic:
        extra = agentic_summary_fields(records, all_counts, tracked)
        counts = all_counts.subset(np.asarray(tracked, dtype=np.bool_))
        records = [r for r, t in zip(records, tracked, strict=True) if t]
    stats = point_stats(
        records, counts, tracking_start_ns=tracking_start or None, streaming=streaming
    )
    interrupted = _interruption(log, [q for q in queries.values() if q.tracked], events)
    asked = model_params.get("max_new_tokens")
    # The endpoint's usage is not logged: lengths are checked by our counts.
    answers = check_answers(
        records,
        counts,
        asked if isinstance(asked, int) and not isinstance(asked, bool) and not agentic else None,
    )
    snapshot = final_snapshot(
        stats.raw.counters,
        stats.raw.series,
        state="complete" if interrupted is None else "interrupted",
        n_pending_tasks=counts.pending,
        timestamp_ns=0,
        streaming=streaming,
    )
    run_config = {
        "load_pattern": load_pattern,
        "warmup": _section(settings, "warmup"),
        "scheduler_random_seed": _section(settings, "runtime").get("scheduler_random_seed"),
        "dataloader_random_seed": _section(settings, "runtime").get("dataloader_random_seed"),
    }
    poisson = load_pattern.get("type") == "poisson"
    summary = result_summary(
        snapshot,
        run_config=run_config,
        use_legacy_loadgen_qps_metrics=poisson
        and bool(load_pattern.get("use_legacy_loadgen_qps_metrics", True)),
        version=__version__,
        git_sha=None,
        extra={
            **extra,
            "mlpe_fast": {
                "analyzed_from": str(events),
                "token_counting": counts.method,
                "answers": answers.as_dict(),
                **({} if interrupted is None else {"interrupted": interrupted}),
            },
        },
    )
    title = f"{model_params.get('name') or 'run'}: analysed from events.jsonl"
    report = report_text(summary, title=title) + warnings_text(answers.warnings())
    return Analysis(summary, snapshot, report, interrupted)


def _streaming(setting: object, log: _Log) -> bool:
    """config.yaml's ``streaming`` (``on``/``off``; YAML may read them as
    booleans); without one, or ``auto``, whether the log has RECV_FIRST lines."""
    value = str(setting).lower()
    if value in ("on", "true"):
        return True
    if value in ("off", "false"):
        return False
    return log.streamed


_INDEX_MAP = msgspec.json.Decoder(dict[str, dict[str, int]])


def _sample_indices(path: Path) -> dict[str, int]:
    """Dataset indices by uuid from ``sample_idx_map.json`` ({} without one)."""
    indices: dict[str, int] = {}
    if not path.is_file():
        return indices
    try:
        for mapping in _INDEX_MAP.decode(path.read_bytes()).values():
            indices.update(mapping)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise UsageError(f"{path}: not a {{phase: {{uuid: index}}}} map") from None
    return indices


def _osl(query: _Query) -> CountInput:
    return osl_input(query.output)


def _tpot(query: _Query, streaming: bool) -> CountInput:
    # TPOT tokens only for queries with a RECV_FIRST line (spec §1.2).
    return tpot_input(query.output) if streaming and query.first is not None else None


def _isl(query: _Query) -> CountInput:
    return prompt_input(query.prompt)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_folder", metavar="RUN_FOLDER", help="a run folder with events.jsonl")
    parser.add_argument(
        "--tokenizer",
        help="tokenizer directory or cached Hugging Face id (default: from config.yaml)",
    )
    parser.add_argument(
        "--output",
        metavar="DIR",
        help="where to write result_summary.json and final_snapshot.json "
        "(default: RUN_FOLDER/analysis)",
    )


def main(args: argparse.Namespace) -> int:
    """The ``analyze`` command: writes the files, prints the report, and
    says whether the run's stored summary is reproduced; an interrupted
    run's reason goes to stderr, one line."""
    analysis = analyze(args.run_folder, tokenizer=args.tokenizer)
    out = Path(args.output) if args.output else Path(args.run_folder) / "analysis"
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "result_summary.json", analysis.summary)
        write_json(out / "final_snapshot.json", analysis.snapshot, encoder="stdlib")
    except OSError as error:
        raise UsageError(f"cannot write {out}: {error.strerror or error}") from None
    print(analysis.report, end="")
    print(f"written: {out / 'result_summary.json'}")
    if analysis.interrupted is not None:
        print(f"mlpe-fast analyze: interrupted: {analysis.interrupted}", file=sys.stderr)
    stored = Path(args.run_folder) / "performance" / "result_summary.json"
    if stored.is_file():
        try:
            stored_summary = msgspec.json.decode(stored.read_bytes())
        except (OSError, msgspec.DecodeError):
            stored_summary = None
        if not isinstance(stored_summary, dict):
            print(f"not compared: {stored} is not a JSON object")
            return 0
        differing = summary_differences(stored_summary, analysis.summary)
        if differing:
            print(f"differs from {stored} in: {', '.join(differing)}")
        else:
            print(f"reproduces {stored}")
    return 0


#: Keys that describe the run rather than its events: not compared.
# test_started_at is the wall clock at TEST_STARTED: events.jsonl's stamps
# are monotonic, so an analysis cannot know it (it writes 0, as the reference).
_NOT_COMPARED = frozenset(
    {"usage_cross_check", "mlpe_fast", "state", "complete", "test_started_at"}
)


def summary_differences(stored: Mapping[str, Any], computed: Mapping[str, Any]) -> list[str]:
    """The top-level keys whose values differ (those only mlpe-fast's live
    run can know, such as the usage cross-check, are not compared)."""
    keys = [k for k in stored if k not in _NOT_COMPARED]
    keys += [k for k in computed if k not in stored and k not in _NOT_COMPARED]
    return [k for k in keys if stored.get(k) != computed.get(k)]
