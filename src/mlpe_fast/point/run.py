"""One point, composed: setup -> the phases of its mode -> figures -> files.

Records flow one way: the phases (``performance.py``, ``agentic.py``,
``accuracy.py``) produce them, :func:`~.figures.point_figures` turns them
into figures, the writer (``writer.py``) puts the figures in the run folder,
and the table goes back to the caller to print.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

import msgspec

from ..config import RunConfig
from ..engine.audit import Audit, ClientTotals
from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..metrics.answers import AnswerChecks
from ..metrics.stats import PointStats
from .accuracy import accuracy_phase
from .agentic import AgenticPerformance
from .figures import point_figures
from .interrupt import count_tokens
from .measured import Measured
from .performance import EnginesPerformance, LocalPerformance, PerformancePhase
from .server_metrics import scraping
from .setup import Point, open_point

__all__ = ("PointResult", "run_point")


class PointResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What one point produced: its records, figures, table, the
    ``result_summary.json`` content, and its state ("complete" or
    "interrupted").  ``failure`` says why a point on several engines was
    cut short (an engine lost); its state is then "interrupted".
    ``answers`` counts the measured answers that are not what was asked
    for (``metrics/answers.py``).  ``folder_error`` is the first write to
    the run folder the disk refused (``point/writer.py``): the point
    stopped there and its folder is incomplete."""

    config: RunConfig
    endpoints: tuple[str, ...]
    records: Sequence[RequestRecord]
    stats: PointStats
    audit: Audit
    table: str
    summary: dict[str, Any]
    state: str
    accuracy: list[dict[str, Any]] = msgspec.field(default_factory=list)
    failure: str | None = None
    answers: AnswerChecks | None = None
    folder_error: str | None = None


async def run_point(
    config: RunConfig,
    endpoints: str | Sequence[str],
    *,
    err: TextIO | None = None,
    progress: bool = True,
    ray_clocks: dict[int, Any] | None = None,
) -> PointResult:
    """Measures one point against ``endpoints`` (one URL, or several
    replicas of one model: :mod:`..engine.replicas`) and writes its run folder.

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
        SetupError: the engine processes could not start.
    """
    urls = (endpoints,) if isinstance(endpoints, str) else tuple(endpoints)
    async with open_point(config, urls, err=err, progress=progress, ray_clocks=ray_clocks) as point:
        phase = performance_phase(point)
        metrics = point.metrics.not_offered(config.server_metrics_interval_s)
        if phase is None:
            measured = Measured()
        else:
            async with scraping(config, point.metrics, point.writer) as scrapes:
                measured = await phase.run(point)
            if scrapes is not None:
                metrics = scrapes.runs(measured.tracking_start)
        entries = [] if measured.inline_entry is None else [measured.inline_entry]
        for scored in point.inputs.accuracy:
            if point.interrupt.requested:
                break
            entries.append(await accuracy_phase(scored).run(point))
        client = ClientTotals.of(point.client)
        counts = await count_tokens(point.counter, point.interrupt)
        dataset = point.inputs.dataset
        figures = point_figures(
            config,
            urls,
            measured,
            counts,
            client=client,
            entries=entries,
            interrupted=bool(point.interrupt.requested),
            dataset_size=None if dataset is None else len(dataset),
            now_ns=monotonic_ns(),
            server_metrics=metrics,
        )
        point.writer.finish(figures, measured, entries)
        folder_error = point.writer.write_error
    return PointResult(
        config=config,
        endpoints=urls,
        records=measured.records,
        stats=figures.stats,
        audit=figures.audit,
        table=figures.table,
        summary=figures.summary,
        state="interrupted" if folder_error is not None else figures.state,
        accuracy=entries,
        failure=figures.failure,
        answers=figures.answers,
        folder_error=folder_error,
    )


def performance_phase(point: Point) -> PerformancePhase | None:
    """The measured phase of the point's mode (None: ``--mode acc``)."""
    inputs = point.inputs
    if inputs.agentic is not None:
        return AgenticPerformance(inputs.agentic)
    if inputs.dataset is None:
        return None
    if point.plan is not None:
        return EnginesPerformance(inputs.dataset, point.plan)
    return LocalPerformance(inputs.dataset)
