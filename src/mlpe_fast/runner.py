"""Runs one measurement point: dataset -> scheduler -> engine -> records ->
metrics -> run folder -> table (``docs/architecture.md``, data flow).

The event loop does the I/O and the scheduling; token counting runs in a
worker thread beside it, fed one record at a time; the run folder is written
once the point is over.  Every issued request yields exactly one record, and
the counts in the table are computed from those records.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
from array import array
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

import msgspec
import numpy as np

from . import sim
from ._version import __version__
from .accuracy.agentic_gates import AGENTIC_THRESHOLDS, SWE_BENCH_DATASET, check_agentic_point
from .accuracy.agentic_inline import InlineTurn, inline_entry, score_inline
from .accuracy.results import (
    accuracy_entry,
    gate_failures,
    output_text,
    write_accuracy_results,
)
from .accuracy.swe_bench import (
    SweBenchError,
    SweBenchOptions,
    check_service,
    run_swe_bench,
    swe_bench_entry,
)
from .artifacts.config_yaml import config_to_yaml_dict, write_config_yaml
from .artifacts.events import (
    ERROR_LOADGEN,
    SESSION_ENDED,
    SESSION_START_PERFORMANCE_TRACKING,
    SESSION_STARTED,
    SESSION_STOP_PERFORMANCE_TRACKING,
    WARMUP_PHASE,
    EventsWriter,
    PromptData,
    TextModelOutput,
    text_model_output,
    write_sample_idx_map,
)
from .artifacts.run_folder import RunFolder
from .artifacts.summary import (
    final_snapshot,
    report_text,
    result_summary,
    warnings_text,
    write_json,
)
from .clients import client_for
from .config import RunConfig
from .engine import EndpointUnreachable, RequestRecord
from .engine.audit import Audit, ClientTotals, LoopLagProbe, audit_records
from .engine.clock import monotonic_ns
from .engine.replicas import AnyClient, endpoint_shares
from .errors import MlpeError, UsageError
from .load.agentic import AgenticBodies, AgenticDataset, AgenticSettings, load_agentic
from .load.agentic_scheduler import ABORTED, AgenticPhase, TurnIssued, run_agentic
from .load.dataset import Dataset, load_dataset
from .load.requests import Prompt, RequestFeed
from .load.scheduler import Phase, run_phase
from .metrics.agentic import agentic_summary_fields
from .metrics.answers import AnswerChecks, check_answers
from .metrics.chat_template import ChatTemplate, tokenizer_dir
from .metrics.stats import PointStats, point_stats
from .metrics.steady_state import PointQueries, detect_steady_state
from .metrics.tokens import TokenCounter, TokenCounts, count_job, load_tokenizer
from .metrics.usage_check import usage_cross_check
from .report.progress import Progress
from .report.table import render
from .scale.driver import (
    EngineGroup,
    EngineRun,
    EngineStartError,
    audit_engines,
    run_on_engines,
    write_engines_report,
)
from .scale.engine_process import EngineSetup
from .scale.leases import LeaseBook
from .scale.local import LocalEngines
from .scale.split import engines_for
from .sim.tokenizer import DEMO_TOKENIZER

__all__ = (
    "DEMO_SERVER_FLAGS",
    "PointResult",
    "SetupError",
    "demo_config",
    "run_point",
    "simulated_endpoint",
    "stop_process",
)


SWE_BENCH_METHOD = "swe_bench_scorer"
"""The ``eval_method`` of a SWE-bench accuracy dataset (the reference's)."""


class SetupError(MlpeError, RuntimeError):
    """mlpe-fast could not get ready to measure (exit status 3)."""


class PointResult(msgspec.Struct, frozen=True, gc=False):
    """What one point produced: its records, figures, table, the
    ``result_summary.json`` content, and its state ("complete" or
    "interrupted").  ``failure`` says why a point on several engines was
    cut short (an engine lost); its state is then "interrupted".
    ``answers`` counts the measured answers that are not what was asked
    for (``metrics/answers.py``)."""

    config: RunConfig
    endpoints: tuple[str, ...]
    records: list[RequestRecord]
    stats: PointStats
    audit: Audit
    table: str
    summary: dict[str, Any]
    state: str
    accuracy: list[dict[str, Any]] = msgspec.field(default_factory=list)
    failure: str | None = None
    answers: AnswerChecks | None = None


# The demo: a short run against the simulated endpoint, with a tokenizer
# that matches its vocabulary (one character is one token).
DEMO_MODEL = "mlpe-sim"
DEMO_CONCURRENCY = 16
DEMO_SAMPLES = 256
DEMO_OUTPUT_TOKENS = 64
DEMO_SERVER_FLAGS = ("--ttft-ms", "20", "--itl-ms", "2", "--seed", "1")


def demo_config(config: RunConfig, given: set[str]) -> RunConfig:
    """Fills what the user left out for a run against the simulated endpoint.

    ``given`` names the RunConfig fields the user set.
    """
    from .load.dataset import DatasetSpec

    changes: dict[str, Any] = {}
    if not config.datasets:
        changes["datasets"] = (
            DatasetSpec(path=str(Path(sim.__file__).parent / "demo_prompts.jsonl"), name="demo"),
        )
    if not config.tokenizer:
        changes["tokenizer"] = DEMO_TOKENIZER
    if not config.model:
        changes["model"] = DEMO_MODEL
    agentic = config.load_pattern == "agentic_inference"
    if "concurrency" not in given and not agentic:
        changes["concurrency"] = DEMO_CONCURRENCY
    # An agentic run's size is its trajectories, never a sample count.
    if config.num_samples is None and config.duration_s is None and not agentic:
        changes["num_samples"] = DEMO_SAMPLES
    if "max_output_tokens" not in given:
        changes["max_output_tokens"] = DEMO_OUTPUT_TOKENS
    return msgspec.structs.replace(config, **changes)


@contextlib.contextmanager
def simulated_endpoint(
    flags: tuple[str, ...] = DEMO_SERVER_FLAGS, *, script: str | None = None
) -> Iterator[str]:
    """Starts ``mlpe-fast serve`` in its own process (so that its CPU is not
    the client's) and yields its URL; ``script``: a Python file that serves
    it instead (a test's wrapped server), taking the same flags."""
    server = ["-m", "mlpe_fast.sim.server"] if script is None else [script]
    proc = subprocess.Popen(
        # --exit-with-parent: a run killed with SIGKILL leaves no server behind
        [sys.executable, *server, "--port", "0", "--exit-with-parent", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if " at http" not in line:
            error = proc.stderr.read() if proc.stderr is not None and proc.poll() else ""
            raise SetupError(
                f"the simulated endpoint did not start: {(error or line).strip() or 'no output'}"
            )
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[str], grace_s: float = 10.0) -> None:
    """Ends a child server: SIGTERM, up to ``grace_s`` to exit, then
    SIGKILL; its pipes are closed."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@contextlib.asynccontextmanager
async def _flushed_every_second(writers: list[EventsWriter]) -> AsyncIterator[None]:
    """Flushes the event logs every second while the load runs, so that a
    crash or a kill loses at most the last second of records."""

    async def flush() -> None:
        while True:
            await asyncio.sleep(1.0)
            for writer in writers:
                writer.flush()

    task = asyncio.get_running_loop().create_task(flush()) if writers else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _load_tokenizer(config: RunConfig) -> Any:
    name = config.tokenizer or config.model
    try:
        return load_tokenizer(name)
    except UsageError as error:
        if config.tokenizer:
            raise
        raise UsageError(
            f"cannot count tokens for model {config.model!r}: {error}; pass --tokenizer DIR"
        ) from None


def _load_template(config: RunConfig) -> ChatTemplate | None:
    """The chat template beside the tokenizer, for reasoning and tool-call
    outputs and chat prompts (spec §1.2); None when it has none."""
    directory = tokenizer_dir(config.tokenizer or config.model)
    return None if directory is None else ChatTemplate.from_tokenizer_dir(directory)


def _dataset(config: RunConfig) -> Dataset:
    datasets = config.performance_datasets
    if not datasets:
        raise UsageError("no performance dataset: pass --dataset PATH[,parser.prompt=COLUMN]")
    return load_dataset(datasets[0])


async def run_point(
    config: RunConfig,
    endpoints: str | Sequence[str],
    *,
    err: TextIO | None = None,
    progress: bool = True,
    ray_clocks: dict[int, Any] | None = None,
) -> PointResult:
    """Measures one point against ``endpoints`` (one URL, or several
    replicas of one model: :mod:`.engine.replicas`) and writes its run folder.

    SIGINT or SIGTERM during the point stops issuing, ends the requests in
    flight as ``Cancelled`` records and still writes the run folder, with
    ``state: "interrupted"`` and ``complete: false`` in the summary (spec
    §3.1); a second signal while tokens are being counted stops counting
    (``complete: false`` too).

    ``ray_clocks`` gives Ray nodes (by index) a ``NodeClock`` other than
    their own: a test's way to exercise the clock model on one host.

    Raises:
        UsageError: the configuration cannot be run (bad dataset, tokenizer,
            an endpoint that cannot be reached).
    """
    agentic = _agentic_dataset(config) if config.mode != "acc" else None
    inline_scores: dict[str, Any] | None = None
    turn_timeout = None if agentic is None else _agentic_settings(config).turn_timeout_s
    urls = (endpoints,) if isinstance(endpoints, str) else tuple(endpoints)
    # the endpoint first: the cheapest mistake
    client = client_for(config, urls, turn_timeout_s=turn_timeout)
    dataset = _dataset(config) if config.mode != "acc" and agentic is None else None
    accuracy_datasets = (
        [load_dataset(spec) for spec in config.accuracy_datasets] if config.mode != "perf" else []
    )
    tokenizer = _load_tokenizer(config)
    template = _load_template(config)
    try:  # before any file is written: an endpoint that is not there is a usage mistake
        await client.check_reachable()
    except EndpointUnreachable as error:
        if error.error_class in ("TLSError", "HTTP2Unsupported"):  # the message says what to do
            raise UsageError(str(error)) from None
        raise UsageError(f"{error}; check --endpoints and that the server is up") from None
    for accuracy_dataset in accuracy_datasets:  # a service that cannot be used: before any load
        if _is_swe_bench(accuracy_dataset):
            try:
                check_service(_swe_bench_options(accuracy_dataset, config))
            except SweBenchError as error:
                raise UsageError(str(error)) from None
    plan = _engine_plan(config, dataset, ray_clocks)

    folder = RunFolder(config.report_dir) if config.report_dir else None
    events: EventsWriter | None = None
    warmup_events: EventsWriter | None = None
    if folder is not None:
        try:
            if folder.prepare():
                print(
                    f"mlpe-fast: --report-dir {folder.path}: replacing the run measured there "
                    "before",
                    file=sys.stderr if err is None else err,
                )
        except BaseException:
            if plan is not None:
                plan.close()
            raise
        write_config_yaml(folder.config_yaml, config, endpoints=list(urls))
        events = EventsWriter(folder.events, streaming=config.stream)
        if config.warmup_requests:
            warmup_events = EventsWriter(folder.warmup_events, streaming=config.stream)
    counter = TokenCounter(tokenizer, template=template, live=False)
    bar = Progress(
        stream=err,
        total=config.num_samples,
        label=f"c={config.concurrency}" if config.load_pattern == "concurrency" else "",
    )
    stop = _Interrupt(client)
    perf = _Measured()
    entries: list[dict[str, Any]] = []
    writers = [w for w in (events, warmup_events) if w is not None]
    try:
        stop.install()
        async with client, _flushed_every_second(writers):
            if events is not None:
                events.session(SESSION_STARTED)
            warming: asyncio.Task[None] | None = None
            if dataset is not None:
                if config.warmup_requests:
                    warming = await _warmup(client, dataset, config, warmup_events, stop)
                if not stop.requested and plan is not None:
                    perf = await _performance_on_engines(
                        urls,
                        dataset,
                        config,
                        plan,
                        counter,
                        events,
                        stop,
                        bar if progress else None,
                    )
                elif not stop.requested:
                    perf = await _performance(
                        client, dataset, config, counter, events, stop, bar if progress else None
                    )
            if warming is not None:  # an undrained warmup's last responses
                await warming  # (a signal ends them as Cancelled, as the rest)
            if agentic is not None and not stop.requested:
                perf = await _performance_agentic(
                    client, agentic, config, counter, events, stop, bar if progress else None
                )
                inline_scores = _score_inline(agentic, perf)
                entries.append(
                    inline_entry(
                        agentic,
                        inline_scores,
                        issued=len(perf.records),
                        duration_s=(monotonic_ns() - perf.tracking_start) / 1e9,
                    )
                )
            for accuracy_dataset in accuracy_datasets:
                if stop.requested:
                    break
                if _is_swe_bench(accuracy_dataset):
                    entries.append(
                        await _swe_bench(accuracy_dataset, config, urls[0], folder, stop)
                    )
                    continue
                entries.append(await _accuracy(client, accuracy_dataset, config, events, stop))
            setup = ClientTotals.of(client)
        counts = await _count(counter, stop)
    except BaseException:
        for writer in writers:  # what was logged is kept; no session end
            writer.close()
        raise
    finally:
        stop.uninstall()
        if progress:
            bar.stop()
        counter.close()
        if plan is not None:
            plan.close()
    # From here on the log is closed by the folder's writing; a failure
    # on the way (a bug) must still leave what was logged, and no open file.
    try:
        records = perf.records
        run = perf.engines
        if run is not None:
            setup = setup.plus(*(t.client for t in run.totals if t is not None))
        failure = None if run is None else run.failure
        state = "interrupted" if stop.requested or failure else "complete"
        measured, measured_counts = records, counts
        if perf.tracked is not None:  # an agentic window: the turns issued inside it
            keep = np.asarray(perf.tracked, dtype=np.bool_)
            measured = [r for r, tracked in zip(records, perf.tracked, strict=True) if tracked]
            measured_counts = counts.subset(keep)
        stats = point_stats(
            measured,
            measured_counts,
            tracking_start_ns=perf.tracking_start,
            streaming=config.stream,
        )
        audit = audit_records(
            records,
            perf.lags,
            perf.cpu_ns,
            setup.connections_opened,
            setup.connect_ns_total,
            perf.cpu_system_ns,
            tls_handshakes=setup.tls_handshakes,
            tls_ns_total=setup.tls_ns_total,
            http2_connections=setup.http2_connections,
            arrival_clock=setup.clock_map,
            kernel_stamped_connections=setup.kernel_stamped_connections,
        )
        if run is not None:
            audit = audit_engines(audit, run)
        answers = check_answers(
            measured,
            measured_counts,
            None if perf.tracked is not None else config.max_output_tokens,
            send_max_tokens=config.send_max_tokens,
        )
        snapshot = final_snapshot(
            stats.raw.counters,
            stats.raw.series,
            state=state,
            n_pending_tasks=counts.pending,
            timestamp_ns=monotonic_ns(),
            streaming=config.stream,
        )
        summary = result_summary(
            snapshot,
            run_config=_run_config(config),
            use_legacy_loadgen_qps_metrics=(
                config.load_pattern == "poisson" and config.use_legacy_loadgen_qps_metrics
            ),
            version=__version__,
            git_sha=None,
            extra={
                **(
                    agentic_summary_fields(records, counts, perf.tracked)
                    if perf.tracked is not None
                    else {}
                ),
                **_extra(records, counts, stats, audit, endpoint_shares(measured, urls), answers),
            },
        )
        # After the summary: an agentic point's gate reads its full-run OSL.
        accuracy_lines = _accuracy_lines(config, entries, summary)
        warnings = answers.warnings()
        shares = summary["mlpe_fast"]["endpoints"] if len(urls) > 1 else ()
        table = render(
            stats, audit.as_rows(), title=_title(config), warnings=warnings, endpoints=shares
        )
        if config.mode == "acc":
            table = f"mlpe-fast accuracy: {_title(config)}\n"
        table += accuracy_lines
        if folder is not None and run is not None:
            write_engines_report(folder.path, run)
        if folder is not None and events is not None:
            if failure is not None:  # so that analyze of the log says so too
                events.error(ERROR_LOADGEN, "EngineLost", failure)
            events.session(SESSION_ENDED)
            events.close()
            if warmup_events is not None:
                warmup_events.close()
            write_sample_idx_map(folder.sample_idx_map, events.sample_index_map)
            if config.mode != "acc":
                report = report_text(summary, title=_title(config)) + warnings_text(warnings)
                folder.write_results(summary, snapshot, report + accuracy_lines)
                if dataset is not None and config.load_pattern == "concurrency" and records:
                    steady = _steady_state(records, stats, counts, len(dataset), config.concurrency)
                    write_json(folder.steady_state, steady, encoder="stdlib")
            else:
                folder.report_txt.write_text(table, encoding="utf-8")
            if entries:
                write_accuracy_results(folder.accuracy_results, entries)
            if inline_scores is not None:  # the inline accuracy's per-turn detail
                write_json(folder.path / "scores.json", inline_scores, encoder="stdlib")
        return PointResult(
            config, urls, records, stats, audit, table, summary, state, entries, failure, answers
        )
    except BaseException:
        for writer in writers:
            writer.close()
        raise


def _steady_state(
    records: list[RequestRecord],
    stats: PointStats,
    counts: TokenCounts,
    dataset_size: int,
    concurrency: int,
) -> dict[str, Any]:
    """The point's steady-state analysis (spec §1.4), for ``steady_state.json``
    and the ``point.yaml`` block of a submission: its queries in issue
    order, with the TTFT and TPOT samples the metrics use."""
    per_record_tpot = stats.raw.tpot_per_record
    order = sorted(range(len(records)), key=lambda i: records[i].t_issue)
    t_issue, t_done, ttft, tpot, osl = [], [], [], [], []
    for i in order:
        record = records[i]
        first, done = record.response.t_first, record.response.t_done
        finish = record.t_end if done is None else done
        ok = record.error_class is None
        t_issue.append(record.t_issue)
        t_done.append(finish if ok else None)
        ttft.append(None if not ok or first is None else first - record.t_issue)
        tpot.append(float(per_record_tpot[i]))  # NaN: no TPOT sample
        osl.append(int(counts.osl[i]) if ok and counts.osl[i] >= 0 else None)
    queries = PointQueries.from_columns(t_issue, t_done, ttft, tpot, osl)
    result = detect_steady_state(queries, dataset_size=dataset_size, concurrency=concurrency)
    return {"point_yaml": result.to_point_yaml(), "reason": result.reason}


def _accuracy_lines(
    config: RunConfig, entries: list[dict[str, Any]], summary: Mapping[str, Any]
) -> str:
    """The accuracy figures and the MLPerf gate verdict, for the table and
    report.txt (spec §2.6)."""
    if not entries:
        return ""
    lines = ["", "accuracy"]
    for entry in entries:
        score = entry["score"]
        shown = (
            ", ".join(f"{k} {v}" for k, v in score.items())
            if isinstance(score, dict)
            else f"{score:.4f}"
            if isinstance(score, float)
            else str(score)
        )
        counts = entry["response_counts"]
        lines.append(
            f"  {entry['dataset_name']}: {shown}  ({counts['completed']} of "
            f"{entry['total_samples']} answered)"
        )
    model = config.mlperf_model
    if config.load_pattern == "agentic_inference":
        lines += _agentic_gate_lines(model, entries, summary)
        return "\n".join(lines) + "\n"
    failures = gate_failures(model, entries) if model else None
    if failures is None:
        lines.append(
            "  gate: no MLPerf threshold for this model (set --mlperf-model, e.g. llama3_1-8b)"
            if not model
            else f"  gate: no MLPerf threshold for {model}"
        )
    elif failures:
        lines.append(f"  gate ({model}): FAIL: " + "; ".join(failures))
    else:
        lines.append(f"  gate ({model}): pass")
    return "\n".join(lines) + "\n"


def _agentic_gate_lines(
    model: str, entries: list[dict[str, Any]], summary: Mapping[str, Any]
) -> list[str]:
    """An agentic point's gates (``accuracy/agentic_gates.py``): inline
    accuracy and the full-run OSL per turn here; SWE-bench only as the mean
    of the curve's four mandatory bands, which one point cannot show."""
    if model not in AGENTIC_THRESHOLDS:
        return [
            "  gate: no MLPerf threshold for this model (set --mlperf-model, e.g. kimi-k3)"
            if not model
            else f"  gate: no agentic MLPerf threshold for {model}"
        ]
    lines = []
    inline = next((e for e in entries if e.get("dataset_type") == "performance"), None)
    if inline is not None:  # none in --mode acc: no performance run
        full_run = summary.get("output_sequence_lengths_full_run")
        osl = full_run.get("output_sequence_lengths", {}).get("avg") if full_run else None
        failures = check_agentic_point(model, inline_score=inline.get("score"), osl_per_turn=osl)
        verdict = f"FAIL: {'; '.join(failures)}" if failures else "pass"
        lines.append(f"  gate ({model}, inline accuracy and OSL per turn): {verdict}")
    if any(e.get("dataset_name") == SWE_BENCH_DATASET for e in entries):
        target = AGENTIC_THRESHOLDS[model].swe_bench_min
        lines.append(f"  swe_bench: gated on the mean of the curve's four bands (>= {target:g})")
    return lines


class _Measured(msgspec.Struct):
    """What the performance phase leaves for the metrics (``engines``: the
    merged run of several engine processes)."""

    records: list[RequestRecord] = msgspec.field(default_factory=list)
    tracking_start: int = 0
    lags: array[int] = msgspec.field(default_factory=lambda: array("q"))
    cpu_ns: int = 0
    cpu_system_ns: int = 0
    engines: EngineRun | None = None
    tracked: list[bool] | None = None  # agentic: each record's turn issued in the window
    inline: list[InlineTurn] | None = None  # agentic: each turn and its answer


class _EnginePlan(msgspec.Struct):
    """The engines a point's performance phase runs on: how many, and how
    they are started (processes here, or actors on a Ray cluster)."""

    engines: int
    make_group: Callable[[list[EngineSetup], LeaseBook], EngineGroup]
    cluster: Any = None  # a RayCluster to close after the point

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()


def _engine_plan(
    config: RunConfig, dataset: Dataset | None, ray_clocks: dict[int, Any] | None = None
) -> _EnginePlan | None:
    """The engines of the performance phase (None: this process alone),
    decided before anything is written.

    Raises:
        UsageError: engines asked for a load they cannot share, or Ray is
            missing or unreachable.
    """
    if dataset is None or (config.engines == 1 and config.ray is None):
        return None
    if config.load_pattern == "poisson":
        raise UsageError(
            "--engines: a Poisson point runs on one engine (its arrival times come from "
            "one seeded stream); drop --engines or use a concurrency point"
        )
    if config.load_pattern == "offline":
        load = _request_count(config, len(dataset)) or len(dataset)
    else:
        load = config.concurrency
    if config.ray is None:
        engines = engines_for(load, config.engines, config.min_streams_per_engine)
        return None if engines == 1 else _EnginePlan(engines, LocalEngines)
    from .scale.ray_cluster import RayCluster, RayEngines

    cluster = RayCluster(config.ray, clocks=ray_clocks)
    try:
        available = cluster.engines_available(config.engines)
        engines = engines_for(load, available, config.min_streams_per_engine)
        nodes = cluster.assignment(engines, config.engines)
    except BaseException:
        cluster.close()
        raise
    return _EnginePlan(
        engines, functools.partial(RayEngines, cluster=cluster, nodes=nodes), cluster
    )


async def _performance_on_engines(
    endpoints: tuple[str, ...],
    dataset: Dataset,
    config: RunConfig,
    plan: _EnginePlan,
    counter: TokenCounter,
    events: EventsWriter | None,
    stop: _Interrupt,
    bar: Progress | None,
) -> _Measured:
    """The measured phase on several engine processes (``scale/local.py``):
    the same queries, tracking from their common start, and the merged
    records handled here as :func:`_performance` handles its own."""
    chat = config.api_type == "openai"
    done = [0, 0]  # completed, failed

    def on_record(record: RequestRecord, prompt: Prompt) -> None:
        system = dataset.samples[record.sample_index].system
        _count_and_log(record, _prompt_data(prompt, system, chat), config, counter, events)
        done[0 if record.ok else 1] += 1
        if bar is not None:
            bar.update(done[0] + done[1], done[1], done[0] + done[1])

    def on_start(t0: int) -> None:
        if events is not None:
            events.session(SESSION_START_PERFORMANCE_TRACKING, t0)
        if bar is not None:
            bar.start()

    try:
        run = await run_on_engines(
            config,
            endpoints,
            dataset,
            engines=plan.engines,
            max_requests=_request_count(config, len(dataset)),
            on_record=on_record,
            on_start=on_start,
            on_group=stop.watch,
            make_group=plan.make_group,
        )
    except EngineStartError as error:
        raise SetupError(str(error)) from None
    if events is not None:
        events.session(SESSION_STOP_PERFORMANCE_TRACKING)
    lags = array("q")
    cpu_ns, cpu_system_ns = run.driver_cpu_ns, run.driver_cpu_system_ns
    for totals in run.totals:
        if totals is not None:
            lags.frombytes(totals.lags_ns)
            cpu_ns += totals.cpu_ns
            cpu_system_ns += totals.cpu_system_ns
    return _Measured(run.records, run.t0_ns, lags, cpu_ns, cpu_system_ns, run)


async def _performance(
    client: AnyClient,
    dataset: Dataset,
    config: RunConfig,
    counter: TokenCounter,
    events: EventsWriter | None,
    stop: _Interrupt,
    bar: Progress | None,
) -> _Measured:
    """The measured phase: salted queries in the dataset's shuffled order,
    performance tracking around it (spec §1.4), every record counted."""
    feed = RequestFeed.for_phase(dataset, config, "performance")
    phase = Phase(
        config.load_pattern,
        concurrency=config.concurrency,
        target_qps=config.target_qps,
        max_requests=_request_count(config, len(dataset)),
        duration_ns=None if config.duration_s is None else int(config.duration_s * 1e9),
        seed=config.seeds.scheduler,
        pass_size=len(dataset) if config.whole_passes else None,
    )
    stop.phase = phase
    chat = config.api_type == "openai"
    measured = _Measured()
    records = measured.records
    prompts: dict[str, PromptData] = {}

    def on_issue(sample_index: int, sample_id: str, t_sched: int) -> None:
        prompts[sample_id] = _prompt_data(
            feed.last_prompt, dataset.samples[sample_index].system, chat
        )

    def on_record(record: RequestRecord) -> None:
        records.append(record)
        _count_and_log(record, prompts.pop(record.sample_id, None), config, counter, events)
        if bar is not None:
            bar.update(phase.completed + phase.failed, phase.failed, phase.issued)

    with _measuring(measured, events, bar, phase, config.max_duration_s):
        await run_phase(client, feed, phase, on_record, path=config.route, on_issue=on_issue)
    if events is not None:
        events.session(SESSION_STOP_PERFORMANCE_TRACKING)
    return measured


@contextlib.contextmanager
def _measuring(
    measured: _Measured,
    events: EventsWriter | None,
    bar: Progress | None,
    phase: Stoppable,
    max_duration_s: float | None,
) -> Iterator[None]:
    """Performance tracking around a measured phase: its start logged, the
    bar started, the loop-lag probe and the CPU clock running; on the way
    out, their readings in ``measured`` (the stop is logged by the caller:
    an agentic window ends on its own).  ``max_duration_s``
    (``--max-duration``, the reference's ``max_duration_ms``) stops the
    phase's issuing that long after the start, whatever its count, duration
    or whole passes still ask for; what is in flight is awaited."""
    probe = LoopLagProbe()
    measured.tracking_start = monotonic_ns()
    if events is not None:
        events.session(SESSION_START_PERFORMANCE_TRACKING, measured.tracking_start)
    if bar is not None:
        bar.start()
    cap = (
        None
        if max_duration_s is None
        else asyncio.get_running_loop().call_later(max_duration_s, phase.stop)
    )
    probe.start()
    try:
        yield
    finally:
        if cap is not None:
            cap.cancel()
        measured.lags, measured.cpu_ns, measured.cpu_system_ns = probe.stop()


def _count_and_log(
    record: RequestRecord,
    prompt: PromptData | None,
    config: RunConfig,
    counter: TokenCounter,
    events: EventsWriter | None,
    *,
    conversation_id: str = "",
    turn: int | None = None,
) -> TextModelOutput | None:
    """A measured record's part beside the load: its tokens to the counter,
    its events to the log (with an agentic turn's conversation and row).
    Returns its COMPLETE payload (None for a failure)."""
    output = (
        text_model_output(record.response, streaming=config.stream)
        if record.error_class is None
        else None
    )
    counter.submit(count_job(record, streaming=config.stream, prompt=prompt, output=output))
    if events is not None:
        events.record(record, prompt, output=output, conversation_id=conversation_id, turn=turn)
    return output


def _agentic_dataset(config: RunConfig) -> AgenticDataset | None:
    """The trajectories of an agentic run (None for other load patterns)."""
    if config.load_pattern != "agentic_inference":
        return None
    return load_agentic(config.performance_datasets[0].path)


def _score_inline(data: AgenticDataset, perf: _Measured) -> dict[str, Any]:
    """The inline accuracy of an agentic run (``accuracy/agentic_inline.py``)."""
    return score_inline(data, perf.inline or [])


def _agentic_settings(config: RunConfig) -> AgenticSettings:
    settings = config.performance_datasets[0].agentic
    return settings if settings is not None else AgenticSettings()


async def _performance_agentic(
    client: AnyClient,
    data: AgenticDataset,
    config: RunConfig,
    counter: TokenCounter,
    events: EventsWriter | None,
    stop: _Interrupt,
    bar: Progress | None,
) -> _Measured:
    """The measured phase of an agentic run (``load/agentic_scheduler.py``):
    every turn is logged with its conversation and row and counted; the
    window's end is logged as it happens (``docs/agentic.md`` §2.5)."""
    settings = _agentic_settings(config)
    phase = AgenticPhase(
        config.concurrency,
        budget=settings.num_trajectories_to_issue,
        inject_tool_delay=settings.inject_tool_delay,
        salt=settings.enable_salt,
        stop_issuing_on_first_user_complete=settings.stop_issuing_on_first_user_complete,
        routing_headers=settings.routing_headers,
    )
    stop.watch(phase)
    bodies = AgenticBodies(
        model=config.model,
        max_output_tokens=config.max_output_tokens,
        sampling=config.generation.as_dict(),
    )
    template_kwargs = config.generation.chat_template_kwargs
    tracked: list[bool] = []
    inline: list[InlineTurn] = []
    measured = _Measured(tracked=tracked, inline=inline)

    def on_record(record: RequestRecord, turned: TurnIssued) -> None:
        measured.records.append(record)
        tracked.append(turned.tracked)
        aborted = record.error_class == ABORTED
        prompt = PromptData(
            messages=None
            if aborted
            else turned.trajectory.request_messages(turned.turn, turned.salt),
            tools=None if aborted else turned.turn.tools,
            chat_template_kwargs=None if aborted else template_kwargs,
        )
        output = _count_and_log(
            record,
            prompt,
            config,
            counter,
            events,
            conversation_id=turned.conversation_id,
            turn=turned.turn.turn,
        )
        inline.append(InlineTurn(turned.conversation_id, turned.turn.turn, output))
        if bar is not None:
            bar.update(phase.completed + phase.failed, phase.failed, phase.issued)

    def on_window_end(t: int) -> None:
        if events is not None:
            events.session(SESSION_STOP_PERFORMANCE_TRACKING, t)

    with _measuring(measured, events, bar, phase, config.max_duration_s):
        await run_agentic(
            client, data, phase, bodies, on_record, path=config.route, on_window_end=on_window_end
        )
    if events is not None and phase.t_window_end is None:
        events.session(SESSION_STOP_PERFORMANCE_TRACKING)
    return measured


def _is_swe_bench(dataset: Dataset) -> bool:
    accuracy = dataset.spec.accuracy
    return accuracy is not None and accuracy.eval_method == SWE_BENCH_METHOD


def _swe_bench_options(dataset: Dataset, config: RunConfig) -> SweBenchOptions:
    accuracy = dataset.spec.accuracy
    extras = {} if accuracy is None or accuracy.extras is None else accuracy.extras
    return SweBenchOptions.from_extras(extras, workers=config.concurrency)


async def _swe_bench(
    dataset: Dataset,
    config: RunConfig,
    endpoint: str,
    folder: RunFolder | None,
    stop: _Interrupt,
) -> dict[str, Any]:
    """A SWE-bench accuracy dataset (``accuracy/swe_bench.py``): no load of
    ours; the service runs the agent against the endpoint and grades it.
    Its instances are the dataset's first ``num_instances`` ground-truth
    values (instance ids, in the file's order).  A signal cancels the run."""
    options = _swe_bench_options(dataset, config)
    instance_ids = [str(t) for t in list(dataset.ground_truth or ())[: options.num_instances]]
    cancel = threading.Event()

    class _Cancel:
        def stop(self) -> None:
            cancel.set()

    stop.watch(_Cancel())
    began = monotonic_ns()
    result = await asyncio.get_running_loop().run_in_executor(
        None,
        functools.partial(
            run_swe_bench,
            options,
            model=config.model,
            endpoint=endpoint,
            api_key=config.api_key,
            generation={
                **config.generation.as_dict(),
                "max_new_tokens": config.max_output_tokens,
            },
            instance_ids=instance_ids,
            report_dir=None if folder is None else folder.path,
            stop=cancel,
        ),
    )
    return swe_bench_entry(dataset.name, result, duration_s=(monotonic_ns() - began) / 1e9)


async def _accuracy(
    client: AnyClient,
    dataset: Dataset,
    config: RunConfig,
    events: EventsWriter | None,
    stop: _Interrupt,
) -> dict[str, Any]:
    """One accuracy dataset: every sample once per repeat, in order,
    unsalted, at the point's concurrency (spec §2.4, §2.5), then scored.
    Its queries are logged in ``events.jsonl`` under the dataset's name
    (``sample_idx_map.json``), outside performance tracking."""
    accuracy = dataset.spec.accuracy
    repeats = 1 if accuracy is None else accuracy.num_repeats
    feed = RequestFeed.for_phase(dataset, config, "accuracy")
    phase = Phase(
        "offline" if config.load_pattern == "offline" else "concurrency",
        concurrency=config.concurrency,
        max_requests=len(dataset) * repeats,
        seed=config.seeds.scheduler,
    )
    stop.phase = phase
    chat = config.api_type == "openai"
    prompts: dict[str, PromptData] = {}
    texts: dict[str, str] = {}
    indices: dict[str, int] = {}

    def on_issue(sample_index: int, sample_id: str, t_sched: int) -> None:
        indices[sample_id] = sample_index
        if events is not None:
            prompts[sample_id] = _prompt_data(
                feed.last_prompt, dataset.samples[sample_index].system, chat
            )

    span = [0, 0]  # first issue, last completion: the phase's duration

    def on_record(record: RequestRecord) -> None:
        output = None
        if record.error_class is None:
            output = text_model_output(record.response, streaming=config.stream)
            texts[record.sample_id] = output_text(output)
        done = record.t_end if record.response.t_done is None else record.response.t_done
        span[0] = record.t_issue if not span[0] else min(span[0], record.t_issue)
        span[1] = max(span[1], done)
        if events is not None:
            events.record(
                record, prompts.pop(record.sample_id, None), phase=dataset.name, output=output
            )

    await run_phase(client, feed, phase, on_record, path=config.route, on_issue=on_issue)
    return accuracy_entry(dataset, texts, indices, duration_s=max(0, span[1] - span[0]) / 1e9)


class Stoppable(Protocol):
    """What a signal stops: a phase, or the engines running one."""

    def stop(self) -> None: ...


class _Interrupt:
    """SIGINT/SIGTERM during a point: stop issuing, cancel what is in flight,
    and (on a second signal) stop counting tokens; the point then ends
    normally with what it has.  Where the loop cannot take signal handlers
    (Windows), Ctrl-C raises KeyboardInterrupt as usual."""

    def __init__(self, client: AnyClient) -> None:
        self.client = client
        self.phase: Stoppable | None = None
        self.counter: TokenCounter | None = None
        self.requested = 0
        self._installed: list[int] = []

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._on_signal)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # no signal handlers here (Windows, or not the main thread)
            self._installed.append(sig)

    def watch(self, phase: Stoppable) -> None:
        """Makes a signal stop ``phase`` (a phase, or a group of engines)."""
        self.phase = phase

    def uninstall(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)
        self._installed.clear()

    def _on_signal(self) -> None:
        self.requested += 1
        if self.requested == 1:
            if self.phase is not None:
                self.phase.stop()
            asyncio.get_running_loop().create_task(self.client.cancel_in_flight())
        elif self.counter is not None:
            self.counter.close()


async def _count(counter: TokenCounter, stop: _Interrupt) -> TokenCounts:
    """Counts what was submitted, off the loop; a signal can cut it short."""
    stop.counter = counter
    return await asyncio.get_running_loop().run_in_executor(None, counter.finish, None)


def _prompt_data(prompt: Prompt, system: str | None, chat: bool) -> PromptData:
    """What an ISSUED line records of a query, and what its ISL counts.

    A chat request sends messages (the system prompt, then the salted user
    prompt): those are recorded and rendered with the chat template for the
    ISL (spec §1.2: the input "as sent", template and salt included).  The
    completions API sends the prompt text itself.
    """
    if isinstance(prompt, str):
        if not chat:
            return PromptData(text=prompt)
        messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": prompt},)
        if system is not None:
            messages = ({"role": "system", "content": system}, *messages)
        return PromptData(messages=messages)
    return PromptData(messages=prompt)


def _run_config(config: RunConfig) -> dict[str, Any]:
    """The summary's ``run_config``: load pattern, warmup and seeds, as the
    reference client records them (``commands/benchmark/pipeline.py``)."""
    settings = config_to_yaml_dict(config)["settings"]
    return {
        "load_pattern": settings["load_pattern"],
        "warmup": settings["warmup"],
        "scheduler_random_seed": config.seeds.scheduler,
        "dataloader_random_seed": config.seeds.sample_index,
    }


def _extra(
    records: list[RequestRecord],
    counts: TokenCounts,
    stats: PointStats,
    audit: Audit,
    shares: list[dict[str, Any]],
    answers: AnswerChecks,
) -> dict[str, Any]:
    """mlpe-fast's own summary keys, after the reference's; ``shares``:
    each endpoint's part of the measured requests (the same ones as the
    request counts: an agentic window's turns)."""
    return {
        "usage_cross_check": usage_cross_check(records, counts),
        "mlpe_fast": {
            "token_counting": counts.method,
            "tokenization_s": counts.seconds,
            "chat_template_fallbacks": counts.template_fallbacks,
            "token_counting_error": counts.error,
            "errors": stats.errors,
            "error_examples": stats.error_examples,
            "chunk_errors": stats.chunk_errors,
            "self_audit": msgspec.to_builtins(audit),
            "endpoints": shares,
            "answers": answers.as_dict(),
        },
    }


async def _warmup(
    client: AnyClient,
    dataset: Dataset,
    config: RunConfig,
    events: EventsWriter | None,
    stop: _Interrupt,
) -> asyncio.Task[None] | None:
    """Requests that warm connections and the endpoint; not measured, but
    logged in ``warmup_events.jsonl`` (spec §2.4: warmup logs are kept).

    With ``--warmup-drain`` every warmup response is awaited before the
    measured phase starts; without (the default), it starts as soon as the
    last warmup request is out, so the endpoint never idles in between, and
    the phase still in flight is returned for the caller to await before the
    client closes (its records go to the warmup log as they end)."""
    feed = RequestFeed.for_phase(dataset, config, "warmup")
    phase = Phase(
        "concurrency" if config.load_pattern != "offline" else "offline",
        concurrency=config.concurrency,
        max_requests=config.warmup_requests if config.warmup_requests > 0 else len(dataset),
        seed=config.seeds.scheduler,
    )
    stop.phase = phase
    chat = config.api_type == "openai"
    prompts: dict[str, PromptData] = {}

    def on_issue(sample_index: int, sample_id: str, t_sched: int) -> None:
        if events is not None:
            prompts[sample_id] = _prompt_data(
                feed.last_prompt, dataset.samples[sample_index].system, chat
            )

    def on_record(record: RequestRecord) -> None:
        if events is not None:
            events.record(record, prompts.pop(record.sample_id, None), phase=WARMUP_PHASE)

    loop = asyncio.get_running_loop()
    issued: asyncio.Future[None] = loop.create_future()

    def issuing_ended() -> None:
        if not issued.done():
            issued.set_result(None)

    phase.on_issuing_ended = issuing_ended
    warming = loop.create_task(
        run_phase(client, feed, phase, on_record, path=config.route, on_issue=on_issue)
    )
    if config.warmup_drain:
        await warming
        return None
    await asyncio.wait({warming, issued}, return_when=asyncio.FIRST_COMPLETED)
    if warming.done():
        warming.result()  # a failure of the phase itself is not hidden
        return None
    return warming


def _request_count(config: RunConfig, dataset_size: int) -> int | None:
    """How many requests the performance phase issues (reference §3.2):
    the given count; the whole dataset for Offline; none (a duration) else."""
    if config.num_samples is not None:
        return config.num_samples
    if config.load_pattern == "offline" or config.duration_s is None:
        return dataset_size
    return None


def _title(config: RunConfig) -> str:
    pattern = config.load_pattern
    if pattern == "agentic_inference":
        return f"{config.model}, agentic, {config.concurrency} trajectories at once"
    if pattern == "concurrency":
        return f"{config.model}, concurrency {config.concurrency}"
    if pattern == "poisson":
        return f"{config.model}, Poisson {config.target_qps:g} queries/s"
    return f"{config.model}, Offline"
