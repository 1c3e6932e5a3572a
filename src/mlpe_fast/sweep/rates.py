"""A request-rate curve: Poisson points at a list of target rates, each in
its own run folder.

``mlpe-fast run --target-qps 2,4,8,16 --report-dir DIR`` (the load pattern
is ``poisson`` whenever a rate is given) measures one open-loop point per
rate into ``DIR/qps<rate>/`` (``qps2``, ``qps0.5``: a full run folder each,
spec §3.1), with the same model, endpoint, dataset and seeds at every point,
as ``vllm bench serve --request-rate`` sweeps and GuideLLM's rate profiles
do.  Each point's arrivals are exponential gaps at its rate
(``load/phase_schedule.py``), so it shows what a concurrency curve cannot:
where the endpoint stops keeping up with an offered load (its achieved
``qps`` falls behind the target, its TTFT climbs).

**Not an MLPerf curve.**  The rules' points are fixed-concurrency points;
the checker rejects the ``poisson`` load pattern (spec §2.4, rule
``load-pattern``), so a rate curve has no regions, no Offline point and no
``C_max``, the plan says so before the first request, and ``mlpe-fast
bundle`` refuses it in one line.  Its figures are the points' own:
``system_tps`` and ``tps_per_user`` computed as MLPerf computes them (spec
§1.1), the whole run's (a Poisson point has no steady-state analysis, which
spec §1.4 defines over fixed-concurrency super-passes).

**Sizes**: a point issues what a single Poisson point would: for
``--duration``, or ``--num-samples`` queries, else one pass of the dataset.
``--mode both`` runs the accuracy phase after every point.

**Resuming**: as a concurrency curve (:mod:`.runner`): a complete point
measured with the same settings is skipped, one measured with other
settings stops the curve before anything is measured.

``pareto.json`` has ``"load": "rate"`` and a row per rate (``target_qps``,
the achieved ``qps``, ``system_tps``, ``tps_per_user``, ``ttft_p90_ms``);
``pareto.html`` and ``pareto.png`` draw the throughput/interactivity
frontier, throughput against latency and the figures against the rate
(:mod:`mlpe_fast.report.pareto`), every chart marked as no MLPerf curve.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TextIO

import msgspec

from ..artifacts.run_folder import read_config_yaml
from ..config import RunConfig
from ..errors import UsageError
from ..load.dataset import load_dataset
from ..report.pareto import write_reports
from .preview import harmony_line, size_text, span_text
from .reuse import differences, point_settings
from .runner import curve_facts, official_figures, refusal, stored_summary

__all__ = (
    "NOT_AN_MLPERF_CURVE",
    "RatePlan",
    "RatePoint",
    "announce_rate_sweep",
    "plan_rate_sweep",
    "prepare_rate_sweep",
    "rate_folder",
    "run_rate_sweep",
)

#: What the plan and the table say of every rate curve (module docstring).
NOT_AN_MLPERF_CURVE = (
    "not an MLPerf curve: the checker refuses the poisson load pattern (spec §2.4), so "
    "mlpe-fast bundle refuses this curve; its figures are for comparing rates"
)


class RatePoint(msgspec.Struct, frozen=True):
    """One point of a rate curve: its target rate, its folder, and whether
    it carries an accuracy run."""

    target_qps: float
    folder: str
    accuracy: bool


class RatePlan(msgspec.Struct, frozen=True):
    """A rate curve ready to be measured (:func:`prepare_rate_sweep`)."""

    config: RunConfig
    points: list[RatePoint]
    #: folder -> stored summary, for the points measured already with the
    #: same settings (skipped)
    reused: dict[str, dict[str, Any]]
    #: the performance dataset's size
    size: int


def rate_folder(target_qps: float) -> str:
    """A point's folder name: ``qps`` and its rate, ``qps2``, ``qps0.5``."""
    return f"qps{target_qps:g}"


def plan_rate_sweep(config: RunConfig) -> list[RatePoint]:
    """The points of the rate curve ``config`` asks for, in rising rate.

    Raises:
        UsageError: no report directory.
    """
    if not config.report_dir:
        raise UsageError("a curve needs --report-dir (one run folder per point)")
    root = Path(config.report_dir)
    return [
        RatePoint(rate, str(root / rate_folder(rate)), accuracy=config.mode == "both")
        for rate in config.rate_sweep
    ]


def _point_config(config: RunConfig, point: RatePoint) -> RunConfig:
    return msgspec.structs.replace(
        config,
        rate_sweep=(),
        target_qps=point.target_qps,
        load_pattern="poisson",
        report_dir=point.folder,
    )


def prepare_rate_sweep(config: RunConfig, endpoints: Sequence[str] | None) -> RatePlan:
    """The rate curve ``config`` asks for, checked before anything is
    measured: the datasets loaded, the points planned, and those measured
    before compared with what this run would measure (:mod:`.reuse`).
    Contacts no endpoint, writes nothing.

    Raises:
        UsageError: no performance dataset or a bad one, no report
            directory, or a complete point measured with other settings.
    """
    datasets = config.performance_datasets
    if not datasets:
        raise UsageError("no performance dataset: pass --dataset PATH[,parser.prompt=COLUMN]")
    size = len(load_dataset(datasets[0]))
    if config.mode != "perf":
        for spec in config.accuracy_datasets:
            load_dataset(spec)
    points = plan_rate_sweep(config)
    reused: dict[str, dict[str, Any]] = {}
    refused: list[tuple[str, list[str]]] = []
    for point in points:
        summary = stored_summary(point.folder, accuracy=point.accuracy)
        if summary is None:
            continue  # missing or incomplete: measured (again)
        try:
            stored = read_config_yaml(point.folder)
        except UsageError as error:
            refused.append((point.folder, [str(error)]))
            continue
        if not stored:
            refused.append((point.folder, ["no config.yaml says what it was measured with"]))
            continue
        wanted = point_settings(_point_config(config, point), endpoints)
        if found := differences(stored, wanted, simulated=endpoints is None):
            refused.append((point.folder, found))
        else:
            reused[point.folder] = summary
    if refused:
        raise UsageError(refusal(refused))
    return RatePlan(config, points, reused, size)


def plan_text(plan: RatePlan) -> str:
    """The plan of a rate curve, printed before its first request: a line
    per point (folder, target rate, accuracy run, what sizes it), the
    expected duration, and that it is no MLPerf curve."""
    config, points = plan.config, plan.points
    root = config.report_dir or "."
    table = [["folder", "rate (/s)", "accuracy", "size"]]
    timed, n_timed, counted = 0.0, 0, 0
    for point in points:
        size, seconds = size_text(_point_config(config, point), plan.size)
        if point.folder in plan.reused:
            size += " (measured already: reused)"
        elif seconds is not None:
            timed += seconds
            n_timed += 1
        else:
            counted += 1
        accuracy = "yes" if point.accuracy else "no"
        table.append([Path(point.folder).name, f"{point.target_qps:g}", accuracy, size])
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    lines = [f"plan: a request-rate curve of {len(points)} Poisson points in {root}"]
    for row in table:
        cells = [
            cell.rjust(width) if i == 1 else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=False))
        ]
        lines.append("  " + "  ".join([*cells, row[-1]]))
    parts = []
    if n_timed:
        parts.append(f"at least {span_text(timed)} for {n_timed} points sized by duration")
    if counted:
        parts.append(f"{counted} points sized by sample count, as long as the endpoint takes")
    reused = f" ({len(plan.reused)} reused)" if plan.reused else ""
    lines.append(f"expected: {', plus '.join(parts) or 'nothing to measure'}{reused}")
    lines.append(f"note: {NOT_AN_MLPERF_CURVE}")
    if (harmony := harmony_line(config)) is not None:
        lines.append(harmony)
    return "\n".join(lines) + "\n"


def announce_rate_sweep(
    config: RunConfig, endpoints: Sequence[str] | None, *, out: TextIO | None = None
) -> RatePlan:
    """:func:`prepare_rate_sweep`, then its plan printed on ``out`` (all
    that ``mlpe-fast run --dry-run`` does for a rate curve).

    Raises:
        UsageError: what :func:`prepare_rate_sweep` refuses.
    """
    out = sys.stdout if out is None else out
    plan = prepare_rate_sweep(config, endpoints)
    print(plan_text(plan), end="", file=out)
    return plan


def _row(point: RatePoint, summary: dict[str, Any]) -> dict[str, Any]:
    figures, extra = official_figures(summary)
    return {
        "target_qps": point.target_qps,
        "qps": summary.get("qps"),
        "region": "poisson",
        "offline": "none",
        **figures,
        "accuracy": point.accuracy,
        "folder": point.folder,
        **extra,
    }


def _table(rows: Sequence[dict[str, Any]]) -> str:
    def num(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        "",
        "request-rate curve (Poisson arrivals; not an MLPerf curve)",
        f"  {'rate /s':>9} {'achieved qps':>13} {'system tok/s':>13} {'tok/s/user':>11}"
        f" {'TTFT p90 ms':>12}  notes",
    ]
    for row in rows:
        notes = []
        if row["accuracy"]:
            notes.append("accuracy")
        if row.get("answer_warnings"):
            notes.append(f"WARNING: suspect answers ({Path(row['folder']).name}/report.txt)")
        lines.append(
            f"  {row['target_qps']:>9g} {num(row['qps'], ',.2f'):>13}"
            f" {num(row['system_tps'], ',.1f'):>13} {num(row['tps_per_user'], ',.1f'):>11}"
            f" {num(row['ttft_p90_ms'], ',.2f'):>12}  {', '.join(notes)}"
        )
    return "\n".join(lines) + "\n"


async def run_rate_sweep(
    config: RunConfig,
    endpoints: tuple[str, ...],
    measure: Callable[[RunConfig, tuple[str, ...]], Coroutine[Any, Any, Any]],
    *,
    out: TextIO | None = None,
    plan: RatePlan | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Measures every point of the rate curve in turn with ``measure`` (the
    single-point runner); returns the curve's rows and whether it was
    interrupted.  Writes ``pareto.json`` and its charts and prints the
    curve's table.

    Raises:
        UsageError: what :func:`prepare_rate_sweep` refuses.
    """
    out = sys.stdout if out is None else out
    if plan is None:
        plan = announce_rate_sweep(config, endpoints, out=out)
    rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    interrupted = False
    for point in plan.points:
        stored = plan.reused.get(point.folder)
        if stored is not None:
            name = Path(point.folder).name
            print(f"mlpe-fast: {name} is complete already: skipped", file=out)
            rows.append(_row(point, stored))
            summaries.append(stored)
            continue
        result = await measure(_point_config(config, point), endpoints)
        rows.append(_row(point, result.summary))
        summaries.append(result.summary)
        if result.state == "interrupted":
            interrupted = True
            break
    root = Path(config.report_dir or ".")
    curve = {
        "load": "rate",
        "x_metric": "tps_per_user",
        **curve_facts(config, summaries),
        "points": rows,
    }
    (root / "pareto.json").write_text(json.dumps(curve, indent=2), encoding="utf-8")
    reports = write_reports(root)
    print(_table(rows), end="", file=out)
    written = [str(p) for p in (reports.html, reports.png) if p is not None]
    print(f"curve: {root / 'pareto.json'}, {', '.join(written)}", file=out)
    for note in reports.notes:
        print(f"mlpe-fast: {note}", file=out)
    return rows, interrupted
