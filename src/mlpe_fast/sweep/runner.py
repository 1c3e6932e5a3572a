"""A curve: every point of a sweep measured in turn, each in its own run folder.

MLPerf Endpoints results are a Pareto curve of 7 to 32 points plus an
Offline point (spec §2.1).  ``mlpe-fast run --concurrency 1,4,16,...``
measures each listed concurrency into ``REPORT_DIR/r<N>/`` (a full run
folder each, spec §3.1), with the same model, endpoint, dataset and seeds at
every point; ``--max-concurrency C_MAX`` without a list plans the points
(:mod:`.plan`).

* **Offline** (spec §2.3): ``dedicated`` adds a point that issues the whole
  dataset at once, in ``r<dataset size>`` (its reported concurrency);
  ``elected`` labels the ``C_max`` point Offline; ``none`` adds nothing.
* **Durations** (spec §2.4): unless the user gives ``--duration`` or
  ``--num-samples``, each point issues for the rules' minimum (600 s at
  concurrency <= 32, 1200 s above) and on to the end of the dataset pass
  under way, so that at least one full pass is issued and the count is a
  whole number of passes.  A shorter ``--duration`` is a development run:
  the output says so for every point.
* **Accuracy** (``--mode both``, spec §2.6): one accuracy run in each
  mandatory band -- Ultra Low, Low, Medium, High, as the regions of
  ``C_max`` place the points -- and at the Offline point; none at the other
  points, which the checker would reject.  An elected Offline point's run
  is its band's run too (:func:`accuracy_points`).  Below ``C_max`` = 33 there are
  no regions and every point gets one.
* **Resuming**: a point whose folder already holds a complete summary (and
  its accuracy results, where due) is skipped when it was measured with the
  same settings (:mod:`.reuse`); one measured with other settings stops the
  curve before anything is measured; an interrupted or missing one is
  measured again.
* **The plan** (:func:`announce_sweep`) is printed before the first
  request: every point's folder, concurrency, region, Offline kind,
  accuracy run and size, the expected duration, then the warnings of
  :func:`plan_problems`.
* **Agentic curves** (``--load-pattern agentic_inference``; spec §2.1, §2.4,
  §2.6): no Offline point, at least 7 points, every point an
  ``agentic_inference`` run of the same trajectory budget.  Such a point's
  size is its budget, not a duration: the reference stops it only when its
  trajectories end (``docs/agentic.md`` §2.4), so the rules' durations --
  600 s at concurrency <= 32, 2400 s above -- are checked after each point
  against its window, and a shorter one is reported as a development run.
  The inline score comes with every point; the accuracy runs (SWE-bench)
  go to the four mandatory bands only.

``pareto.json`` in ``REPORT_DIR`` lists the points (concurrency, region,
Offline kind, ``system_tps``, ``tps_per_user``, ``ttft_p90_ms``,
``e2e_avg_interactivity``), the Pareto chart's x metric (``x_metric``:
``e2e_avg_interactivity`` for an agentic curve, spec §1.5) and what the
charts' titles name (``model``, ``system``, ``date``: :func:`curve_facts`);
``pareto.html`` (self-contained) and ``pareto.png`` (with matplotlib) draw
the step curve and the figures against concurrency.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TextIO

import msgspec

from ..accuracy.agentic_gates import (
    AGENTIC_THRESHOLDS,
    SWE_BENCH_DATASET,
    check_swe_bench_mean,
)
from ..accuracy.results import holds_accuracy_run, read_accuracy_entries
from ..artifacts.run_folder import read_config_yaml
from ..config import RunConfig
from ..config.slo import SLO_NAMES
from ..errors import UsageError
from ..load.agentic import load_agentic
from ..load.dataset import load_dataset
from ..metrics.goodput import best_under_slo
from ..metrics.steady_state import MIN_TREND_N
from ..report.pareto import write_reports
from .plan import check_plan, count_problems, plan_points, point_duration_s
from .preview import harmony_line, size_text, span_text
from .regions import region_of, regions
from .reuse import differences, point_settings

__all__ = (
    "SweepPlan",
    "SweepPoint",
    "accuracy_points",
    "announce_sweep",
    "curve_facts",
    "official_figures",
    "plan_problems",
    "plan_sweep",
    "prepare_sweep",
    "refusal",
    "run_sweep",
    "stored_summary",
)

#: Mandatory accuracy bands (spec §2.6): the region names of the checker.
_BANDS = ("low_latency", "low_concurrency", "med_concurrency", "high_concurrency")


class SweepPoint(msgspec.Struct, frozen=True):
    """One point of a curve: its concurrency, what it is, and its folder."""

    concurrency: int
    region: str
    offline: str  # "dedicated", "elected" or "none" (a fixed-concurrency point)
    accuracy: bool
    folder: str


def _region(concurrency: int, c_max: int, c_min: int) -> str:
    if c_max <= 32:
        return "low_latency"
    return region_of(concurrency, regions(c_max, c_min))


def accuracy_points(concurrencies: Sequence[int], c_max: int, *, elected: bool = False) -> set[int]:
    """The fixed-concurrency points that carry an accuracy run: the lowest
    point of each mandatory band (spec §2.6); every point when ``C_max``
    gives no regions.

    An ``elected`` Offline point (the ``C_max`` point) carries its own run,
    which the checker counts "once as its region point and once as the
    Offline result" (§5.7.2): it then takes its band's run, so four runs
    fill the five slots rather than a fifth at another point of that band."""
    if c_max <= 32:
        return set(concurrencies)
    c_min = min(*concurrencies, 32)
    chosen: dict[str, int] = {}
    if elected and c_max in concurrencies:
        chosen[_region(c_max, c_max, c_min)] = c_max
    for n in sorted(concurrencies):
        band = _region(n, c_max, c_min)
        if band in _BANDS:
            chosen.setdefault(band, n)
    return set(chosen.values())


def plan_sweep(config: RunConfig, dataset_size: int) -> list[SweepPoint]:
    """The points of the curve ``config`` asks for (module docstring).

    Raises:
        UsageError: no report directory, ``C_max`` below a listed point, or
            a dedicated Offline point whose folder ``r<dataset size>`` is
            a listed point's (the checker names a point's folder after its
            concurrency, so the two cannot both be in the curve).
    """
    if not config.report_dir:
        raise UsageError("a curve needs --report-dir (one run folder per point)")
    root = Path(config.report_dir)
    if config.sweep:
        levels = list(config.sweep)
    elif config.max_concurrency is not None:
        levels = plan_points(config.max_concurrency, offline=config.offline)
    else:
        raise UsageError("a curve needs --concurrency N,N,... or --max-concurrency C_MAX")
    c_max = config.max_concurrency or max(levels)
    c_min = min(*levels, 32)
    if c_max > 32:
        margin = regions(c_max, c_min).margin.last
        if max(levels) > margin:
            raise UsageError(
                f"--concurrency {max(levels)} is above the margin of --max-concurrency "
                f"{c_max} (largest allowed: {margin})"
            )
    if config.offline == "dedicated" and dataset_size in levels:
        _refuse_offline_collision(config, dataset_size, c_max)
    with_accuracy = (
        accuracy_points(levels, c_max, elected=config.offline == "elected")
        if config.mode == "both"
        else set()
    )
    points = []
    for n in levels:
        elected = config.offline == "elected" and n == c_max
        points.append(
            SweepPoint(
                concurrency=n,
                region=_region(n, c_max, c_min),
                offline="elected" if elected else "none",
                accuracy=n in with_accuracy or (elected and config.mode == "both"),
                folder=str(root / f"r{n}"),
            )
        )
    if config.offline == "dedicated":
        points.append(
            SweepPoint(
                concurrency=dataset_size,
                region="submitters_choice",
                offline="dedicated",
                accuracy=config.mode == "both",
                folder=str(root / f"r{dataset_size}"),
            )
        )
    return points


def _refuse_offline_collision(config: RunConfig, size: int, c_max: int) -> None:
    drop = (
        f"drop {size} from --concurrency"
        if config.sweep
        else f"list the points with --concurrency, without {size}"
    )
    elected = f", use --offline elected ({size} is C_max)" if size == c_max else ""
    raise UsageError(
        f"the dedicated Offline point and the concurrency-{size} point would share the folder "
        f"r{size} (an Offline point's concurrency is the dataset size, {size}, and the checker "
        f"names each point's folder r<concurrency>; spec §2.1, §2.3): {drop}{elected}, "
        "or --offline none"
    )


def _agentic(config: RunConfig) -> bool:
    return config.load_pattern == "agentic_inference"


def _point_config(config: RunConfig, point: SweepPoint) -> tuple[RunConfig, str | None]:
    """The run configuration of one point, and a development-duration note
    (an agentic point's comes after it ran: :func:`agentic_duration_note`)."""
    changes: dict[str, Any] = {
        "sweep": (),
        "report_dir": point.folder,
        "whole_passes": True,
        "mode": config.mode if config.mode != "both" or point.accuracy else "perf",
    }
    note = None
    if _agentic(config):
        # Sized by its trajectory budget, never by a duration (module docstring).
        changes |= {"concurrency": point.concurrency, "whole_passes": False}
    elif point.offline == "dedicated":
        changes |= {"load_pattern": "offline", "concurrency": point.concurrency}
        changes |= {"num_samples": point.concurrency, "duration_s": None}
    else:
        changes |= {"load_pattern": "concurrency", "concurrency": point.concurrency}
        rule = point_duration_s(point.concurrency)
        if config.num_samples is None and config.duration_s is None:
            changes["duration_s"] = rule
            # and the super-passes a steady-state window needs to be the
            # point's official result (spec §1.4)
            changes["min_passes"] = max(config.min_passes, MIN_TREND_N)
        elif config.duration_s is not None and config.duration_s < rule:
            note = (
                f"development duration: {config.duration_s:g} s at concurrency "
                f"{point.concurrency} (the rules ask for {rule:g} s; spec §2.4)"
            )
    return msgspec.structs.replace(config, **changes), note


def agentic_duration_note(concurrency: int, summary: dict[str, Any]) -> str | None:
    """What an agentic point's window lacks of the rules' duration (spec
    §2.4: 600 s at concurrency <= 32, 2400 s above), None when it has it.
    The window runs from the start of measurement to the last completion of
    a turn issued inside it: the ``duration_ns`` the checker reads."""
    rule = point_duration_s(concurrency, agentic=True)
    duration_ns = summary.get("duration_ns")
    if not isinstance(duration_ns, (int, float)) or duration_ns / 1e9 >= rule:
        return None
    return (
        f"development duration: the window lasted {duration_ns / 1e9:.3g} s at concurrency "
        f"{concurrency} (the rules ask for {rule:g} s of an agentic point; spec §2.4): "
        "raise --num-trajectories"
    )


def _done(point: SweepPoint) -> dict[str, Any] | None:
    """The stored summary of a point measured completely before, else None."""
    return stored_summary(point.folder, accuracy=point.accuracy)


def stored_summary(folder: str, *, accuracy: bool) -> dict[str, Any] | None:
    """The summary in a point's run folder when the point is complete (and
    holds its accuracy run when ``accuracy``), else None: measured again."""
    summary_path = Path(folder) / "performance" / "result_summary.json"
    try:
        summary = json.loads(summary_path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("state") != "complete":
        return None
    if accuracy:
        # An agentic point's file holds its inline score in any case: the
        # accuracy run is due too (spec §2.6).
        try:
            if not holds_accuracy_run(Path(folder) / "accuracy" / "accuracy_results.json"):
                return None
        except UsageError:
            return None
    return summary


def _row(point: SweepPoint, summary: dict[str, Any]) -> dict[str, Any]:
    """A point's row of the curve: its official figures (:func:`official_figures`)."""
    figures, extra = official_figures(summary)
    return {
        "concurrency": point.concurrency,
        "region": point.region,
        "offline": point.offline,
        **figures,
        "e2e_avg_interactivity": summary.get("e2e_avg_interactivity"),
        "accuracy": point.accuracy,
        "folder": point.folder,
        **extra,
    }


def official_figures(summary: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A point's official figures, ``system_tps``, ``tps_per_user`` and
    ``ttft_p90_ms`` (spec §1.4: the steady-state window's where it is
    ``windowable``, else the whole run's) with their ``basis``, and what
    goes after them in its row: its answers' warnings, for a window the
    whole run's figures under ``total``, and with ``--goodput`` its
    ``goodput`` block."""
    ttft = summary.get("ttft", {}).get("percentiles", {}).get("90.0")
    figures = {
        "system_tps": summary.get("system_tps"),
        "tps_per_user": summary.get("tps_per_user"),
        "ttft_p90_ms": None if ttft is None else ttft / 1e6,
    }
    window = _official_window(summary)
    official = figures if window is None else {k: window.get(k) for k in figures}
    official["basis"] = "total" if window is None else "steady_state"
    extra: dict[str, Any] = {"answer_warnings": _answer_warnings(summary)}
    if window is not None:
        extra["total"] = figures
    if (good := _goodput(summary)) is not None:  # --goodput: not an MLPerf metric
        extra["goodput"] = good
    return official, extra


def curve_facts(config: RunConfig, summaries: Sequence[dict[str, Any]]) -> dict[str, str]:
    """What a curve's title names (``pareto.json``'s ``model``, ``system``
    and ``date``): the model, the endpoints measured (host and port; the
    demo's: the simulated endpoint) and the UTC day the first of its points
    started (``test_started_at``), else today."""
    system = ", ".join(_host_port(url) for url in config.endpoints) or "the simulated endpoint"
    started = [
        s["test_started_at"]
        for s in summaries
        if isinstance(s.get("test_started_at"), int) and s["test_started_at"] > 0
    ]
    moment = (
        datetime.datetime.fromtimestamp(min(started) / 1e9, tz=datetime.timezone.utc)
        if started
        else datetime.datetime.now(tz=datetime.timezone.utc)
    )
    return {"model": config.model, "system": system, "date": moment.date().isoformat()}


def _host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def _goodput(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The point's goodput block (``--goodput``; not an MLPerf metric)."""
    own = summary.get("mlpe_fast")
    good = own.get("goodput") if isinstance(own, dict) else None
    return good if isinstance(good, dict) else None


def _official_window(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The steady-state window's figures when they are the point's result
    (``mlpe_fast.steady_state``, ``point/figures.py``), else None."""
    own = summary.get("mlpe_fast")
    steady = own.get("steady_state") if isinstance(own, dict) else None
    if not isinstance(steady, dict) or steady.get("basis") != "steady_state":
        return None
    figures = steady.get("figures")
    return figures if isinstance(figures, dict) else None


def _answer_warnings(summary: dict[str, Any]) -> list[str]:
    """The point's warnings about its answers (``metrics/answers.py``), so
    that the curve shows a point whose answers are not what was asked."""
    own = summary.get("mlpe_fast")
    answers = own.get("answers") if isinstance(own, dict) else None
    warnings = answers.get("warnings") if isinstance(answers, dict) else None
    return [str(w) for w in warnings] if isinstance(warnings, list) else []


def _table(rows: Sequence[dict[str, Any]], *, agentic: bool = False) -> str:
    def num(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    # An agentic curve's x is e2e_avg_interactivity (spec §1.5).
    x_key, x_name = (
        ("e2e_avg_interactivity", "interactivity") if agentic else ("tps_per_user", "tok/s/user")
    )
    lines = [
        "",
        "curve",
        f"  {'concurrency':>11}  {'region':<17} {'system tok/s':>13} {x_name:>13}"
        f" {'TTFT p90 ms':>12}  notes",
    ]
    for row in rows:
        notes = []
        if row["offline"] != "none":
            notes.append(f"Offline ({row['offline']})")
        if row["accuracy"]:
            notes.append("accuracy")
        if row.get("basis") == "steady_state":
            notes.append("steady-state window")
        if row.get("answer_warnings"):
            notes.append(f"WARNING: suspect answers ({Path(row['folder']).name}/report.txt)")
        lines.append(
            f"  {row['concurrency']:>11}  {row['region']:<17} {num(row['system_tps'], ',.1f'):>13}"
            f" {num(row[x_key], ',.1f'):>13} {num(row['ttft_p90_ms'], ',.2f'):>12}"
            f"  {', '.join(notes)}"
        )
    if any("goodput" in row for row in rows):
        lines.append(_goodput_lines(rows))
    return "\n".join(lines) + "\n"


def _goodput_lines(rows: Sequence[dict[str, Any]]) -> str:
    """The curve's goodput under ``--goodput`` (not an MLPerf metric): each
    point's attainment and rate, and the best point under the SLO."""
    bounds = next(row["goodput"]["slo_ms"] for row in rows if "goodput" in row)
    slo = ", ".join(f"{SLO_NAMES.get(k, k)} <= {v:g} ms" for k, v in bounds.items())
    lines = ["", f"goodput ({slo}; not an MLPerf metric)"]
    for row in rows:
        block = row.get("goodput")
        unmeasured = None if block is None else block.get("unmeasured")
        if isinstance(unmeasured, dict):  # not streamed: no TTFT, TPOT (metrics/goodput.py)
            lines.append(f"  {row['concurrency']:>11}  not measured ({unmeasured.get('why')})")
            continue
        if block is None or block.get("attainment_pct") is None:
            continue
        rate = block.get("goodput_rps")
        lines.append(
            f"  {row['concurrency']:>11}  {block['attainment_pct']:5.1f} % of {block['issued']:,}"
            f" good" + ("" if rate is None else f", {rate:,.2f} good requests/s")
        )
    best = best_under_slo(rows)
    if best is None:
        lines.append("  best under the SLO: none (no point has a good request)")
    else:
        block = best["goodput"]
        lines.append(
            f"  best under the SLO: concurrency {best['concurrency']} "
            f"({block['goodput_rps']:,.2f} good requests/s, {block['attainment_pct']:.1f} %)"
        )
    return "\n".join(lines)


def _swe_bench_score(point: SweepPoint) -> float | None:
    path = Path(point.folder) / "accuracy" / "accuracy_results.json"
    try:
        entries = read_accuracy_entries(path)
    except UsageError:
        return None
    for entry in entries:
        if entry.get("dataset_name") == SWE_BENCH_DATASET:
            score = entry.get("score")
            return float(score) if isinstance(score, (int, float)) else None
    return None


def _swe_bench_verdict(config: RunConfig, points: Sequence[SweepPoint]) -> str | None:
    """The curve's SWE-bench gate (spec §2.6: the mean of the four mandatory
    bands' results), when the model has one and the curve ran SWE-bench."""
    model = config.mlperf_model
    if model not in AGENTIC_THRESHOLDS:
        return None
    scored = {p.concurrency: _swe_bench_score(p) for p in points if p.accuracy}
    present = [score for score in scored.values() if score is not None]
    if not present:
        return None
    failures = check_swe_bench_mean(model, present)
    failures += [f"SWE-bench: no score at r{c}" for c, score in scored.items() if score is None]
    shown = ", ".join(f"r{c} {'-' if s is None else f'{100 * s:.2f}'}" for c, s in scored.items())
    verdict = f"FAIL: {'; '.join(failures)}" if failures else "pass"
    return f"SWE-bench gate ({model}, mean of the bands: {shown}): {verdict}"


def plan_problems(
    config: RunConfig, points: Sequence[SweepPoint], trajectories: int | None = None
) -> list[str]:
    """What the checker would say about this curve's points (spec §2.1-2.2),
    so that a user's list is questioned before hours are spent on it; for
    an agentic curve (``trajectories``: the dataset's count) also what its
    trajectory budget makes of the points (``docs/agentic.md`` §2.4-2.5).

    Every curve is checked, with ``--max-concurrency`` or, without it, the
    ``C_max`` its highest point implies."""
    problems = []
    fixed = [p.concurrency for p in points if p.offline != "dedicated"]
    c_max = config.max_concurrency if config.max_concurrency is not None else max(fixed)
    if c_max > 32:
        problems += check_plan(fixed, c_max, config.offline)
    else:  # no regions (spec §2.2): the count still matters
        problems += count_problems(len(fixed), config.offline)
        problems.append(
            f"region-computation: C_max {c_max} is not above 32, so the checker computes no "
            "regions for this curve (spec §2.2): pass --max-concurrency above 32"
        )
    if problems and config.max_concurrency is None:
        problems.insert(
            0, f"c-max: no --max-concurrency: the checks take C_max {c_max}, the highest point"
        )
    if config.offline == "none" and not _agentic(config):
        problems.append(
            "offline-point-present: --offline none: a curve that is not agentic needs one "
            "Offline point, dedicated or elected (spec §2.3)"
        )
    offline = next((p for p in points if p.offline == "dedicated"), None)
    if offline is not None and offline.concurrency < c_max:
        problems.append(
            f"offline-concurrency: the dedicated Offline point r{offline.concurrency} (the "
            f"dataset size) is below C_max {c_max}; the checker flags it (spec §2.3)"
        )
    if trajectories is not None:
        problems += _agentic_problems(config, points, trajectories)
    return problems


def steady_state_problems(config: RunConfig, dataset_size: int) -> list[str]:
    """Why the points' steady-state windows could not be their official
    results (spec §1.4: ``windowable`` needs at least four super-passes, a
    super-pass being one dataset pass): a size the user gave that issues
    fewer.  A curve sized by the rules issues at least four passes."""
    needed = MIN_TREND_N * dataset_size
    if config.num_samples is not None and config.num_samples < needed:
        return [
            f"steady-state: {config.num_samples:,} samples per point are fewer than "
            f"{MIN_TREND_N} passes of the {dataset_size:,}-sample dataset ({needed:,}): no "
            "point's steady-state window can be official (spec §1.4); its whole-run figures "
            "will be its result"
        ]
    if (
        config.num_samples is None
        and config.duration_s is not None
        and config.min_passes < MIN_TREND_N
    ):
        return [
            f"steady-state: --duration {config.duration_s:g} s may end a point before "
            f"{MIN_TREND_N} passes of the {dataset_size:,}-sample dataset, and then its "
            "steady-state window cannot be official (spec §1.4): add --min-passes "
            f"{MIN_TREND_N}"
        ]
    return []


def _agentic_problems(
    config: RunConfig, points: Sequence[SweepPoint], trajectories: int
) -> list[str]:
    settings = config.performance_datasets[0].agentic
    budget = settings.num_trajectories_to_issue if settings is not None else None
    budget = trajectories if budget is None else budget
    problems = []
    if budget % trajectories:
        # Official runs issue k x 613, whole passes over the official set.
        problems.append(
            f"num_trajectories_to_issue {budget} is not a whole number of passes over the "
            f"dataset's {trajectories} trajectories (the rules ask for k x 613 on the "
            "official set)"
        )
    crowded = [p.concurrency for p in points if p.concurrency >= budget]
    if crowded:
        # Every trajectory starts at once, and the window closes when the
        # first one ends: the point measures a fraction of its load.
        problems.append(
            f"{', '.join(f'r{c}' for c in crowded)}: concurrency at or above the trajectory "
            f"budget {budget}, so the window closes when the first trajectory ends; raise "
            "--num-trajectories well above the highest concurrency"
        )
    if config.mode != "perf":
        for spec in config.accuracy_datasets:
            method = spec.accuracy.eval_method if spec.accuracy is not None else None
            if method == "swe_bench_scorer" and spec.display_name != SWE_BENCH_DATASET:
                problems.append(
                    f"dataset {spec.display_name}: the checker reads SWE-bench results under "
                    f"the name {SWE_BENCH_DATASET} (spec §2.6); name it so"
                )
    return problems


class SweepPlan(msgspec.Struct, frozen=True):
    """A curve ready to be measured (:func:`prepare_sweep`)."""

    config: RunConfig
    points: list[SweepPoint]
    #: what the checker would say about the points (:func:`plan_problems`)
    problems: list[str]
    #: folder -> stored summary, for the points measured already with the
    #: same settings (skipped)
    reused: dict[str, dict[str, Any]]
    #: the performance dataset's size (an agentic curve's trajectory count)
    size: int


def prepare_sweep(config: RunConfig, endpoints: Sequence[str] | None) -> SweepPlan:
    """The curve ``config`` asks for, checked before anything is measured:
    the datasets loaded (a bad file stops the curve before its first point;
    the performance dataset's size is the dedicated Offline point's), the
    points planned, and the points measured before compared with what this
    run would measure (:mod:`.reuse`).  Contacts no endpoint, writes nothing.

    Args:
        config: the curve's configuration.
        endpoints: the URLs the points will measure; None: the demo's
            simulated endpoint, on a port not known yet.

    Raises:
        UsageError: no performance dataset or a bad one, what
            :func:`plan_sweep` refuses, or a complete point measured with
            other settings (its folder, the first differences and what to do).
    """
    datasets = config.performance_datasets
    if not datasets:
        raise UsageError("no performance dataset: pass --dataset PATH[,parser.prompt=COLUMN]")
    agentic = _agentic(config)
    trajectories = len(load_agentic(datasets[0].path).trajectories) if agentic else None
    size = trajectories if trajectories is not None else len(load_dataset(datasets[0]))
    if config.mode != "perf":
        for spec in config.accuracy_datasets:
            load_dataset(spec)
    points = plan_sweep(config, size)
    problems = plan_problems(config, points, trajectories)
    if not agentic:
        problems += steady_state_problems(config, size)
    reused: dict[str, dict[str, Any]] = {}
    refused: list[tuple[SweepPoint, list[str]]] = []
    for point in points:
        summary = _done(point)
        if summary is None:
            continue  # missing or incomplete: measured (again)
        try:
            stored = read_config_yaml(point.folder)
        except UsageError as error:
            refused.append((point, [str(error)]))
            continue
        if not stored:
            refused.append((point, ["no config.yaml says what it was measured with"]))
            continue
        wanted = point_settings(_point_config(config, point)[0], endpoints)
        if found := differences(stored, wanted, simulated=endpoints is None):
            refused.append((point, found))
        else:
            reused[point.folder] = summary
    if refused:
        raise UsageError(refusal([(p.folder, found) for p, found in refused]))
    return SweepPlan(config, points, problems, reused, size)


def refusal(refused: Sequence[tuple[str, list[str]]]) -> str:
    """Why a curve is not measured: its points (folders) measured before
    with other settings, and the settings that differ."""
    (folder, found), others = refused[0], [f for f, _ in refused[1:]]
    shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    names = [Path(f).name for f in (folder, *others)]
    also = f" ({', '.join(names[1:])} too)" if others else ""
    where = Path(folder).parent
    return (
        f"{folder} was measured with other settings than this run's: {shown}{also}; "
        f"measure the curve into another --report-dir, or remove {', '.join(names)} from "
        f"{where} to measure {'them' if others else 'it'} again"
    )


def plan_text(plan: SweepPlan) -> str:
    """The plan of a curve, printed before its first request: a line per
    point (folder, concurrency, region, Offline kind, accuracy run, what
    sizes it) and the expected duration."""
    config, points = plan.config, plan.points
    fixed = [p.concurrency for p in points if p.offline != "dedicated"]
    kinds = f"{len(fixed)} at fixed concurrency" + (
        " + a dedicated Offline point" if len(fixed) < len(points) else ""
    )
    c_max = (
        f"C_max {config.max_concurrency}"
        if config.max_concurrency is not None
        else f"C_max {max(fixed)}, the highest point"
    )
    root = config.report_dir or "."
    header = ["folder", "concurrency", "region", "offline", "accuracy", "size"]
    table = [header]
    timed = 0.0
    n_timed = 0
    counted: list[str] = []
    accuracy = 0
    for point in points:
        size, seconds = size_text(_point_config(config, point)[0], plan.size)
        if point.folder in plan.reused:
            size += " (measured already: reused)"
        elif seconds is not None:
            timed += seconds
            n_timed += 1
        else:
            counted.append(size)
        accuracy += point.accuracy and point.folder not in plan.reused
        table.append(
            [
                Path(point.folder).name,
                str(point.concurrency),
                point.region,
                "-" if point.offline == "none" else point.offline,
                "yes" if point.accuracy else "no",
                size,
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines = [f"plan: a curve of {len(points)} points ({kinds}; {c_max}) in {root}"]
    for row in table:
        cells = [
            cell.rjust(width) if i == 1 else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=False))
        ]
        lines.append("  " + "  ".join([*cells, row[-1]]))
    untimed = []
    if counted:
        unit = "trajectory budget" if _agentic(config) else "sample count"
        untimed.append(f"{len(counted)} point{'s' * (len(counted) > 1)} sized by {unit}")
    if accuracy:
        untimed.append(f"{accuracy} accuracy run{'s' * (accuracy > 1)}")
    plural = "s" * (n_timed > 1)
    total = f"at least {span_text(timed)} for {n_timed} point{plural} sized by duration"
    if untimed:
        rest = f"{' and '.join(untimed)}, as long as the endpoint takes"
        total = f"{total}, plus {rest}" if n_timed else rest
    elif not n_timed:
        total = "nothing to measure"
    reused = f" ({len(plan.reused)} reused)" if plan.reused else ""
    lines.append(f"expected: {total}{reused}")
    if (harmony := harmony_line(config)) is not None:
        lines.append(harmony)
    return "\n".join(lines) + "\n"


def announce_sweep(
    config: RunConfig, endpoints: Sequence[str] | None, *, out: TextIO | None = None
) -> SweepPlan:
    """:func:`prepare_sweep`, then its plan and warnings printed on ``out``
    (all that ``mlpe-fast run --dry-run`` does for a curve).

    Raises:
        UsageError: what :func:`prepare_sweep` refuses.
    """
    out = sys.stdout if out is None else out
    plan = prepare_sweep(config, endpoints)
    print(plan_text(plan), end="", file=out)
    for problem in plan.problems:
        print(f"mlpe-fast: warning: {problem}", file=out)
    return plan


async def run_sweep(
    config: RunConfig,
    endpoints: tuple[str, ...],
    measure: Callable[[RunConfig, tuple[str, ...]], Coroutine[Any, Any, Any]],
    *,
    out: TextIO | None = None,
    plan: SweepPlan | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Measures every point of the curve in turn with ``measure`` (the
    single-point runner); returns the curve's rows and whether it was
    interrupted.  Writes ``pareto.json`` and prints the curve table.

    ``plan``: the curve's :func:`announce_sweep`, printed already; None:
    made and printed here.

    Raises:
        UsageError: what :func:`prepare_sweep` refuses.
    """
    out = sys.stdout if out is None else out
    if plan is None:
        plan = announce_sweep(config, endpoints, out=out)
    agentic = _agentic(config)
    points = plan.points
    rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    interrupted = False
    for point in points:
        stored = plan.reused.get(point.folder)
        if stored is not None:
            print(f"mlpe-fast: r{point.concurrency} is complete already: skipped", file=out)
            rows.append(_row(point, stored))
            summaries.append(stored)
            continue
        point_config, note = _point_config(config, point)
        if note:
            print(f"mlpe-fast: {note}", file=out)
        result = await measure(point_config, endpoints)
        rows.append(_row(point, result.summary))
        summaries.append(result.summary)
        if result.state == "interrupted":
            interrupted = True
            break
        if agentic and (note := agentic_duration_note(point.concurrency, result.summary)):
            print(f"mlpe-fast: {note}", file=out)
    root = Path(config.report_dir or ".")
    curve = {
        "x_metric": "e2e_avg_interactivity" if agentic else "tps_per_user",
        **curve_facts(config, summaries),
        "points": rows,
    }
    (root / "pareto.json").write_text(json.dumps(curve, indent=2), encoding="utf-8")
    reports = write_reports(root)
    print(_table(rows, agentic=agentic), end="", file=out)
    if agentic and not interrupted and (verdict := _swe_bench_verdict(config, points)):
        print(verdict, file=out)
    written = [str(p) for p in (reports.html, reports.png) if p is not None]
    print(f"curve: {root / 'pareto.json'}, {', '.join(written)}", file=out)
    for note in reports.notes:
        print(f"mlpe-fast: {note}", file=out)
    return rows, interrupted
