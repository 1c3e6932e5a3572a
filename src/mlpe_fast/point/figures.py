"""A point's figures from its records: pure functions, no I/O.

records + token counts -> statistics (``metrics/stats.py``), self-audit
(``engine/audit.py``), answer checks (``metrics/answers.py``), the final
snapshot and ``result_summary.json`` content (``artifacts/summary.py``), the
steady-state analysis (spec §1.4), the accuracy verdicts (spec §2.6) and the
terminal table.  The run folder's writer (``point/writer.py``) only writes
what :func:`point_figures` returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from .._version import __version__
from ..accuracy.agentic_gates import AGENTIC_THRESHOLDS, SWE_BENCH_DATASET, check_agentic_point
from ..accuracy.results import gate_failures
from ..artifacts.config_yaml import config_to_yaml_dict
from ..artifacts.summary import final_snapshot, report_text, result_summary, warnings_text
from ..config import RunConfig
from ..engine.audit import Audit, ClientTotals, audit_records
from ..engine.record import RequestRecord
from ..engine.record_columns import NONE, ColumnBlock, RecordColumns, as_columns
from ..engine.replicas import endpoint_shares
from ..engine.spill_sort import sort_by_key
from ..metrics.agentic import agentic_summary_fields
from ..metrics.answers import AnswerChecks, check_answers
from ..metrics.goodput import Goodput, goodput_of
from ..metrics.latency_detail import LatencyDetail, latency_detail
from ..metrics.stats import PointStats, point_stats
from ..metrics.steady_state import PointQueries, SteadyState, detect_steady_state
from ..metrics.tokens import TokenCounts
from ..metrics.usage_check import usage_cross_check
from ..report.latency_detail import latency_detail_lines
from ..report.table import render
from ..scale.driver import audit_engines
from ..server_metrics.scraper import ServerMetricsRun
from ..server_metrics.summary import audit_figures, replicas_summary, server_metrics_line
from .measured import Measured

__all__ = ("PointFigures", "point_figures", "title")


class PointFigures(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a point's files and table show.

    ``measured``: the records the figures are of (an agentic run: the turns
    issued inside its window; else every record); ``state``: "complete" or
    "interrupted"; ``report``: ``report.txt``; ``steady_state``: the
    content of ``steady_state.json`` (None where not computed).
    """

    state: str
    failure: str | None
    measured: Sequence[RequestRecord]
    stats: PointStats
    audit: Audit
    answers: AnswerChecks
    snapshot: dict[str, Any]
    summary: dict[str, Any]
    table: str
    report: str
    steady_state: dict[str, Any] | None


def point_figures(
    config: RunConfig,
    endpoints: Sequence[str],
    measured: Measured,
    counts: TokenCounts,
    *,
    client: ClientTotals,
    entries: Sequence[dict[str, Any]],
    interrupted: bool,
    dataset_size: int | None,
    now_ns: int,
    server_metrics: Sequence[ServerMetricsRun] | None = None,
) -> PointFigures:
    """The figures of one point.

    ``client``: this process's connection totals (the engines' are added
    from ``measured.engines``); ``entries``: the accuracy results;
    ``interrupted``: a signal stopped the point; ``dataset_size``: the
    performance dataset's size (None: no such dataset, as in an agentic
    run), which the steady-state analysis needs; ``now_ns``: the snapshot's
    timestamp; ``server_metrics``: the servers' metrics scraped through the
    point, a run per page (None: not asked for), summed up beside the
    client's figures and their cost in the self-audit.
    """
    records = as_columns(measured.records)
    run = measured.engines
    if run is not None:
        client = client.plus(*(t.client for t in run.totals if t is not None))
    failure = None if run is None else run.failure
    state = "interrupted" if interrupted or failure else "complete"
    kept, kept_counts = _in_window(measured, counts)
    stats = point_stats(
        kept, kept_counts, tracking_start_ns=measured.tracking_start, streaming=config.stream
    )
    audit = _audit(measured, client)
    if server_metrics is not None:
        audit = msgspec.structs.replace(audit, **audit_figures(server_metrics))
    scraped = None if not server_metrics else replicas_summary(server_metrics)
    answers = check_answers(
        kept,
        kept_counts,
        None if measured.tracked is not None else asked_output_tokens(config),
        send_max_tokens=config.send_max_tokens,
    )
    snapshot = final_snapshot(
        stats.raw.counters,
        stats.raw.series,
        state=state,
        n_pending_tasks=counts.pending,
        timestamp_ns=now_ns,
        streaming=config.stream,
    )
    steady = None  # spec §1.4: fixed-concurrency points only
    if dataset_size is not None and config.load_pattern == "concurrency" and records:
        steady = steady_state(records, stats, counts, dataset_size, config.concurrency)
    tracked = measured.tracked
    agentic = {} if tracked is None else agentic_summary_fields(records, counts, tracked)
    shares = endpoint_shares(kept, endpoints)
    good = (
        None
        if config.goodput is None
        else goodput_of(stats, kept_counts.osl, config.goodput, streamed=config.stream)
    )
    detail = latency_detail(kept, stats.raw.tracked_ok) if config.stream else None
    summary = result_summary(
        snapshot,
        run_config=_run_config(config),
        use_legacy_loadgen_qps_metrics=(
            config.load_pattern == "poisson" and config.use_legacy_loadgen_qps_metrics
        ),
        version=__version__,
        git_sha=None,
        extra={
            **agentic,
            **_own_keys(
                records, counts, stats, audit, shares, answers, steady, good, detail, scraped
            ),
        },
        test_started_at=measured.tracking_started_at,
    )
    table, report = _texts(
        config,
        len(endpoints) > 1,
        stats,
        audit,
        answers,
        summary,
        entries,
        steady,
        good,
        detail,
        scraped,
        records.spill_error,
    )
    return PointFigures(
        state=state,
        failure=failure,
        measured=kept,
        stats=stats,
        audit=audit,
        answers=answers,
        snapshot=snapshot,
        summary=summary,
        table=table,
        report=report,
        steady_state=None
        if steady is None
        else {"point_yaml": steady.to_point_yaml(), "reason": steady.reason},
    )


def _in_window(measured: Measured, counts: TokenCounts) -> tuple[RecordColumns, TokenCounts]:
    """The records the figures are of, and their counts: an agentic run's
    turns issued inside its window (``docs/agentic.md`` §2.5); else all."""
    records = as_columns(measured.records)
    if measured.tracked is None:
        return records, counts
    window = np.asarray(measured.tracked, dtype=np.bool_)
    return records.subset(window), counts.subset(window)


def _texts(
    config: RunConfig,
    replicas: bool,
    stats: PointStats,
    audit: Audit,
    answers: AnswerChecks,
    summary: Mapping[str, Any],
    entries: Sequence[dict[str, Any]],
    steady: SteadyState | None,
    good: Goodput | None,
    detail: LatencyDetail | None,
    scraped: dict[str, Any] | None = None,
    spill_error: str | None = None,
) -> tuple[str, str]:
    """The terminal table and ``report.txt``; an accuracy run's are its
    accuracy lines alone.  ``replicas``: several endpoints, whose shares
    the table shows.  After the summary: an agentic point's gate reads its
    full-run OSL.  ``detail``: a streaming point's latency detail, after
    the table's latency figures and after the report's breakdowns;
    ``scraped``: the server metrics' block, whose line follows the window's;
    ``spill_error``: why the records stopped going to their spill file
    (``engine/record_columns.py``), a warning: the figures are whole, the
    memory was not bounded."""
    accuracy = accuracy_lines(config, entries, summary)
    if config.mode == "acc":
        table = f"mlpe-fast accuracy: {title(config)}\n" + accuracy
        return table, table
    warnings = answers.warnings()
    if spill_error is not None:
        warnings.append(f"{spill_error}; set TMPDIR to a directory with room")
    shares = summary["mlpe_fast"]["endpoints"] if replicas else ()
    detail_lines = [] if detail is None else latency_detail_lines(detail)
    table = render(
        stats,
        audit.as_rows(),
        title=title(config),
        warnings=warnings,
        endpoints=shares,
        latency_detail=detail_lines,
    )
    report = report_text(summary, title=title(config))
    if detail_lines:  # before the warnings, which end the report's own part
        report += "\n" + "\n".join(detail_lines) + "\n"
    report += warnings_text(warnings)
    window = "" if steady is None else steady_state_lines(steady)
    if good is not None:
        window += "\n" + good.line()
    if scraped is not None:
        window += "\n" + server_metrics_line(scraped)
    return table + window + accuracy, report + window + accuracy


def steady_state_lines(steady: SteadyState) -> str:
    """The steady-state window in the table and ``report.txt`` (spec
    §1.4): which figures are the point's result, and the window's own."""
    passes = f"{steady.n_super_passes} super-passes of {steady.super_pass_size:,} queries"
    if not steady.is_official:
        return (
            f"\nsteady state: {steady.status} ({steady.verdict}; {steady.reason}; {passes}):"
            " the whole-run figures above are the result\n"
        )
    window, f = steady.window, steady.figures
    assert window is not None and f is not None  # windowable: a window and its figures
    lines = [
        "",
        f"steady state: windowable ({steady.verdict}): the window's figures are the result",
        f"  super-passes {window.super_pass_start + 1}-{window.super_pass_end + 1} of "
        f"{steady.n_super_passes} ({steady.super_pass_size:,} queries each), issue span "
        f"{window.duration_s:,.1f} s, {f.n_completed:,} completed",
    ]
    figures = []
    if f.system_tps is not None:
        figures.append(f"system {f.system_tps:,.1f} tok/s")
    if f.tps_per_user is not None and f.tpot is not None:
        figures.append(f"per user {f.tps_per_user:,.2f} tok/s (TPOT p90 {f.tpot.p90 / 1e6:.2f} ms)")
    if f.ttft is not None:
        figures.append(f"TTFT p90 {f.ttft.percentile(90) / 1e6:,.2f} ms")
    if figures:
        lines.append("  " + ", ".join(figures))
    return "\n".join(lines) + "\n"


def asked_output_tokens(config: RunConfig) -> int:
    """The output cap the performance phase's requests asked for: its
    dataset's ``generation_config_override.max_new_tokens`` where it has
    one (gpt-oss: 10,240 for performance beside 32,768 for accuracy), a
    synthetic dataset's cap on its OSLs, else the run's ``--max-output-tokens``."""
    datasets = config.performance_datasets
    synthetic = datasets[0].synthetic if datasets else None
    if synthetic is not None and synthetic.osl_cap is not None:
        return synthetic.osl_cap  # no sample's OSL is above it (load/synthetic_spec.py)
    override = datasets[0].generation_override if datasets else None
    if override is not None and override.max_new_tokens is not None:
        return override.max_new_tokens
    return config.max_output_tokens


def _audit(measured: Measured, client: ClientTotals) -> Audit:
    """The self-audit of every record the client made (a window's or not),
    with the engines' own where there were several."""
    audit = audit_records(
        measured.records,
        measured.lags,
        measured.cpu_ns,
        client.connections_opened,
        client.connect_ns_total,
        measured.cpu_system_ns,
        tls_handshakes=client.tls_handshakes,
        tls_ns_total=client.tls_ns_total,
        http2_connections=client.http2_connections,
        arrival_clock=client.clock_map,
        kernel_stamped_connections=client.kernel_stamped_connections,
        warmed_connections=client.warmed_connections,
        warm_up_ns=client.warm_up_ns,
        receive_threads=client.receive_threads,
        packet_note=client.packet_note,
        capture_drops=client.capture_drops,
    )
    return audit if measured.engines is None else audit_engines(audit, measured.engines)


def steady_state(
    records: Sequence[RequestRecord],
    stats: PointStats,
    counts: TokenCounts,
    dataset_size: int,
    concurrency: int,
) -> SteadyState:
    """The point's steady-state analysis (spec §1.4), for ``steady_state.json``
    (the ``point.yaml`` block of a submission), the summary and the report:
    its queries in issue order, with the TTFT and TPOT samples the metrics
    use."""
    # The detector reads its columns a slice at a time, so past BLOCK_ROWS
    # queries they are put in issue order by a merge of sorted blocks, in
    # spill files beside the records' (engine/spill_sort.py; issue 23: a
    # whole argsort held 20 B a query while it sorted, 69 B before that).
    columns = as_columns(records)
    tpot = stats.raw.tpot_per_record
    osl = counts.osl  # read a slice at a time: it may be spilled

    def block_columns(block: ColumnBlock) -> tuple[npt.NDArray[np.int64], list[npt.NDArray[Any]]]:
        rows = slice(block.start, block.stop)
        ok = block.ok
        done = block.column("t_done")
        finish = np.where(done == NONE, block.column("t_end"), done)
        finish[~ok] = -1
        first = block.column("t_first")
        ttft = (first - block.column("t_issue")).astype(np.float64)
        ttft[~ok | (first == NONE)] = np.nan
        tpot_sample: npt.NDArray[np.float64] = tpot[rows].copy()  # NaN: no TPOT sample
        tpot_sample[~(np.isfinite(tpot_sample) & (tpot_sample > 0))] = np.nan
        output_tokens: npt.NDArray[np.int64] = np.array(osl[rows], np.int64)
        output_tokens[~ok | (output_tokens < 0)] = -1
        return block.column("t_issue"), [finish, ttft, tpot_sample, output_tokens]

    ordered = sort_by_key((block_columns(block) for block in columns.blocks()), columns.spill_dir)
    if not ordered:  # no records: the detector's empty columns
        ordered = [np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0)]
        ordered.append(np.zeros(0, np.int64))
    queries = PointQueries(*ordered)
    return detect_steady_state(queries, dataset_size=dataset_size, concurrency=concurrency)


def accuracy_lines(
    config: RunConfig, entries: Sequence[dict[str, Any]], summary: Mapping[str, Any]
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
    failures = gate_failures(model, list(entries)) if model else None
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
    model: str, entries: Sequence[dict[str, Any]], summary: Mapping[str, Any]
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


def _own_keys(
    records: Sequence[RequestRecord],
    counts: TokenCounts,
    stats: PointStats,
    audit: Audit,
    shares: list[dict[str, Any]],
    answers: AnswerChecks,
    steady: SteadyState | None,
    good: Goodput | None,
    detail: LatencyDetail | None,
    scraped: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """mlpe-fast's own summary keys, after the reference's; ``shares``:
    each endpoint's part of the measured requests (the same ones as the
    request counts: an agentic window's turns); ``steady_state``: the
    window's headline (:meth:`~..metrics.steady_state.SteadyState.headline`;
    None for points it does not apply to); ``scraped``: the server
    metrics' block (``server_metrics/summary.py``; absent when not asked)."""
    return {
        "usage_cross_check": usage_cross_check(records, counts),
        "mlpe_fast": {
            "token_counting": counts.method,
            "tokenization_s": counts.seconds,
            "chat_template_fallbacks": counts.template_fallbacks,
            "token_counting_error": counts.error,
            "token_counting_spill": {
                "jobs": counts.spilled_jobs,
                "peak_bytes": counts.spilled_bytes,
                "failure": counts.spill_failure,
            },
            "errors": stats.errors,
            "error_examples": stats.error_examples,
            "chunk_errors": stats.chunk_errors,
            "self_audit": msgspec.to_builtins(audit),
            "endpoints": shares,
            "answers": answers.as_dict(),
            "steady_state": None if steady is None else steady.headline(),
            **({} if good is None else {"goodput": good.as_summary()}),
            **({} if detail is None else {"latency_detail": detail.as_summary()}),
            **({} if scraped is None else {"server_metrics": scraped}),
        },
    }


def title(config: RunConfig) -> str:
    """The point's one-line title: model and load."""
    pattern = config.load_pattern
    if pattern == "agentic_inference":
        return f"{config.model}, agentic, {config.concurrency} trajectories at once"
    if pattern == "concurrency":
        return f"{config.model}, concurrency {config.concurrency}"
    if pattern == "poisson":
        return f"{config.model}, Poisson {config.target_qps:g} queries/s"
    return f"{config.model}, Offline"
