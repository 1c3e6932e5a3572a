"""Per-point statistics from request records and token counts.

Definitions (``mlperf-endpoints-spec.md`` §1.1-1.3, ``reference-client.md``
§2.2), all times ``CLOCK_MONOTONIC`` ns as the engine stamped them:

* **TTFT** = ``t_first - t_issue``, streamed responses only (a response is
  streamed when it carried SSE events; a plain JSON answer has none).
* **TPOT** = ``(t_done - t_first) / tpot_tokens`` per streamed response,
  where ``tpot_tokens`` counts the text after the first content-bearing
  event (spec §1.2); responses with ``tpot_tokens <= 0`` and non-positive
  or non-finite values are skipped.
* **latency** = ``t_done - t_issue``.
* **OSL** = output tokens per response (:mod:`mlpe_fast.metrics.tokens`).
* **window** (``duration_ns``) = from the start of performance tracking
  (``tracking_start_ns``; default the first issue) to the last completion
  (``t_done``, else ``t_end`` for a request that failed before ``[DONE]``).
  This is the reference client's tracked window, reference-client.md §2.2:
  "a tracked block starts at START_PERFORMANCE_TRACKING ... and ends at the
  last tracked completion"; spec §1.4 ``total`` basis.
* **QPS** = completed / window; **system output tokens/s** (``system_tps``)
  = Σ OSL / window (spec §1.1; the checker's
  ``output_sequence_lengths.total / (duration_ns / 1e9)``).
* **tps_per_user** = ``1000 / tpot_p90_ms`` (spec §1.1).
* Percentiles: ``numpy.percentile(values, p, method="lower")`` over the
  raw samples, the reference's estimator (spec §1.3), on the reference grid
  :data:`PERCENTILES`; mean and population standard deviation alongside.

Timing and token figures are taken over *completed* requests (no error
class).  The reference records TTFT at the first chunk even for a request
that fails later; with failures the two clients' TTFT sets can differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from ..engine.record import RequestRecord
from ..engine.record_columns import NONE, as_columns
from .series import PERCENTILES  # the reference client's grid (reference-client.md §2.2)
from .tokens import TokenCounts

__all__ = (
    "FINISH_REASONS",
    "PERCENTILES",
    "Distribution",
    "PointSeries",
    "PointStats",
    "distribution",
    "point_stats",
)


def _key(p: float) -> str:
    # The reference keys percentiles by str(float): "99.9", "90.0", "50.0".
    return str(float(p))


class Distribution(msgspec.Struct, frozen=True):
    """Summary of one series (ns for times, tokens for lengths).

    ``percentiles`` maps ``str(float(p))`` (``"90.0"``, ``"99.9"``) to the
    value at ``p`` on the :data:`PERCENTILES` grid, ``method="lower"``.
    """

    count: int
    total: float
    min: float
    max: float
    mean: float
    std: float
    percentiles: dict[str, float]

    def percentile(self, p: float) -> float:
        """The value at ``p``, which must be on the grid."""
        return self.percentiles[_key(p)]

    @property
    def p50(self) -> float:
        return self.percentiles["50.0"]

    @property
    def p90(self) -> float:
        return self.percentiles["90.0"]

    @property
    def p95(self) -> float:
        return self.percentiles["95.0"]

    @property
    def p99(self) -> float:
        return self.percentiles["99.0"]

    @property
    def p999(self) -> float:
        return self.percentiles["99.9"]


def distribution(
    values: npt.NDArray[np.int64] | npt.NDArray[np.float64],
    percentiles: Sequence[float] = PERCENTILES,
) -> Distribution | None:
    """The :class:`Distribution` of raw samples, or None when there are none."""
    if values.size == 0:
        return None
    grid = np.percentile(values, list(percentiles), method="lower")
    return Distribution(
        count=int(values.size),
        total=float(values.sum()),
        min=float(values.min()),
        max=float(values.max()),
        mean=float(values.mean()),
        std=float(values.std()),
        percentiles={_key(p): float(v) for p, v in zip(percentiles, grid, strict=True)},
    )


#: The finish reasons the reference client counts by name; any other is
#: counted as "other" (``metrics_aggregator/aggregator.py``).
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "function_call")


class PointSeries(msgspec.Struct, frozen=True):
    """The raw samples and counters of one point, named as the reference
    client's metrics registry names them (``metrics/final_snapshot.json``,
    spec §3.5); the files' stat blocks are computed from these.

    Series: ``ttft_ns``, ``sample_latency_ns`` (int64 ns), ``tpot_ns``
    (float64 ns per token), ``osl`` and ``isl`` (int64 tokens; ISL of every
    tracked issued query, OSL of every completed one).  Counters:
    ``tracked_samples_issued``/``_completed``/``_failed``,
    ``tracked_duration_ns``, ``legacy_loadgen_window_duration_ns`` and
    ``tracked_finish_reason_<reason>``.
    """

    series: dict[str, npt.NDArray[np.int64] | npt.NDArray[np.float64]]
    counters: dict[str, int]
    #: The TPOT sample of each record, in the records' order; NaN where a
    #: record gives none (the steady-state analysis reads it in issue order).
    tpot_per_record: npt.NDArray[np.float64] = msgspec.field(
        default_factory=lambda: np.empty(0, np.float64)
    )
    #: Likewise each record's TTFT and latency (ns; NaN where it gives
    #: none), and which records are the window's completed ones: the same
    #: values the series hold, per record (``metrics/goodput.py`` reads them).
    ttft_per_record: npt.NDArray[np.float64] = msgspec.field(
        default_factory=lambda: np.empty(0, np.float64)
    )
    latency_per_record: npt.NDArray[np.float64] = msgspec.field(
        default_factory=lambda: np.empty(0, np.float64)
    )
    tracked_ok: npt.NDArray[np.bool_] = msgspec.field(default_factory=lambda: np.empty(0, np.bool_))


class PointStats(msgspec.Struct, frozen=True):
    """The figures of one measurement point (see the module docstring).

    Counts: ``issued`` = ``completed + failed`` records in the window;
    ``streamed`` = completed responses that came as SSE; ``errors`` = failed
    records per error class, most frequent first, with ``error_examples``
    holding the first message of each; ``finish_reasons`` per completed
    response (``"none"`` when the endpoint gave none); ``chunk_errors`` =
    SSE events that could not be decoded (not failures).

    Series (:class:`Distribution` or None when empty): ``ttft``, ``tpot``,
    ``latency`` in ns, ``osl`` in tokens.  ``tpot_skipped`` = streamed
    responses without a valid TPOT sample.

    Throughput: ``duration_ns`` from ``window_start_ns`` to
    ``window_end_ns``; ``qps``, ``system_tps`` (Σ OSL / window, None
    without token counts), ``tps_per_user`` (1000 / TPOT p90 in ms).
    ``tokens_complete`` is False when token counts were missing or not all
    completed responses were counted.
    """

    issued: int
    completed: int
    failed: int
    streamed: int
    errors: dict[str, int]
    error_examples: dict[str, str]
    finish_reasons: dict[str, int]
    chunk_errors: int
    ttft: Distribution | None
    tpot: Distribution | None
    latency: Distribution | None
    osl: Distribution | None
    tpot_skipped: int
    osl_total: int | None
    window_start_ns: int
    window_end_ns: int
    duration_ns: int
    qps: float | None
    system_tps: float | None
    tps_per_user: float | None
    tokens_complete: bool
    raw: PointSeries

    @property
    def duration_s(self) -> float:
        return self.duration_ns / 1e9

    @property
    def ttft_p90_ms(self) -> float | None:
        return None if self.ttft is None else self.ttft.p90 / 1e6

    @property
    def tpot_p90_ms(self) -> float | None:
        return None if self.tpot is None else self.tpot.p90 / 1e6


def _sorted_counts(counter: Counter[str]) -> dict[str, int]:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def _code_counts(
    codes: npt.NDArray[np.int64], names: Sequence[str], mask: npt.NDArray[np.bool_], none: str = ""
) -> Counter[str]:
    """How many records where ``mask`` have each code of a string column
    (code -1, None, counted as ``none`` when given)."""
    found: Counter[str] = Counter()
    values, counts = np.unique(codes[mask], return_counts=True)
    for code, count in zip(values.tolist(), counts.tolist(), strict=True):
        if code >= 0:
            found[names[code]] += count
        elif none:
            found[none] += count
    return found


def point_stats(
    records: Sequence[RequestRecord],
    counts: TokenCounts | None = None,
    *,
    tracking_start_ns: int | None = None,
    streaming: bool = True,
) -> PointStats:
    """Computes :class:`PointStats` for the records of one point.

    Args:
        records: the point's records.
        counts: token counts of ``records`` in the same order (from
            :meth:`TokenCounter.drain`/``finish`` fed in that order); None
            when no tokenizer is available (then no OSL, TPOT or tokens/s).
        tracking_start_ns: when performance tracking started (after
            warm-up).  Records issued before it are left out and the window
            starts there; by default the window starts at the first issue.
        streaming: whether the run asked for streamed responses.  A
            non-streaming run has no ``ttft_ns`` and ``tpot_ns`` series at
            all (the reference registers them for streaming runs only,
            spec §3.5), rather than empty ones.

    Raises:
        ValueError: ``counts`` does not have one entry per record.
    """
    if counts is not None and len(counts.osl) != len(records):
        raise ValueError(
            f"token counts cover {len(counts.osl)} records, but {len(records)} were given"
        )
    columns = as_columns(records)
    n = len(columns)
    t_issue = columns.column("t_issue")
    t_first = columns.column("t_first")
    has_first = t_first != NONE
    t_first[~has_first] = 0
    t_finish = columns.t_finish()  # t_done, else t_end (the completion)
    ok = columns.ok
    streamed = columns.column("events") > 0
    tracked = np.ones(n, np.bool_) if tracking_start_ns is None else t_issue >= tracking_start_ns
    chunk_errors = int(columns.column("chunk_errors")[tracked].sum(dtype=np.int64))
    reasons = _code_counts(*columns.codes("finish_reason"), tracked & ok, none="none")
    classes, class_names = columns.codes("error_class")
    errors = _code_counts(classes, class_names, tracked & ~ok)
    examples: dict[str, str] = {}
    for name in errors:  # the first tracked message of each class
        first = int(np.flatnonzero(tracked & (classes == columns.code_of(name)))[0])
        examples[name] = columns.error_message(first) or ""

    done_ok = tracked & ok
    ttft_mask = done_ok & streamed & has_first
    ttft_values = t_first[ttft_mask] - t_issue[ttft_mask]
    latency_values = t_finish[done_ok] - t_issue[done_ok]
    ttft = distribution(ttft_values)
    latency = distribution(latency_values)
    ttft_per_record = np.full(n, np.nan)
    ttft_per_record[ttft_mask] = ttft_values
    latency_per_record = np.full(n, np.nan)
    latency_per_record[done_ok] = latency_values
    osl_values = np.empty(0, np.int64)
    tpot_values = np.empty(0, np.float64)
    tpot_per_record = np.full(n, np.nan)

    osl: Distribution | None = None
    tpot: Distribution | None = None
    osl_total: int | None = None
    tokens_complete = False
    if counts is not None:
        osl_values = counts.osl[done_ok]
        counted = osl_values >= 0
        tokens_complete = bool(counted.all()) and counts.error is None
        osl_values = osl_values[counted]
        osl = distribution(osl_values)
        osl_total = int(osl_values.sum())
        tokens = counts.tpot_tokens
        tpot_mask = ttft_mask & (tokens > 0)
        per_token = (t_finish[tpot_mask] - t_first[tpot_mask]) / tokens[tpot_mask]
        valid = np.isfinite(per_token) & (per_token > 0)
        tpot_values = per_token[valid]
        tpot_per_record[np.flatnonzero(tpot_mask)[valid]] = tpot_values
        tpot = distribution(tpot_values)
    tpot_count = 0 if tpot is None else tpot.count
    n_streamed = int(np.count_nonzero(done_ok & streamed))

    n_tracked = int(np.count_nonzero(tracked))
    if n_tracked:
        start = int(t_issue[tracked].min()) if tracking_start_ns is None else tracking_start_ns
        end = int(t_finish[tracked].max())
    else:
        start = end = 0 if tracking_start_ns is None else tracking_start_ns
    duration = max(0, end - start)
    completed = int(np.count_nonzero(done_ok))
    legacy_window = 0
    if n_tracked:
        # The LoadGen window: first issue to the completion of the
        # last-issued query (reference-client.md §2.2).
        issued = np.where(tracked, t_issue, np.iinfo(np.int64).min)
        last = int(np.argmax(issued))
        legacy_window = max(0, int(t_finish[last]) - int(t_issue[tracked].min()))
    counters = {
        # Only measured queries are in the event stream (warmup has its own
        # log), so the session totals are the tracked ones.
        "total_samples_issued": n_tracked,
        "total_samples_completed": completed,
        "total_samples_failed": n_tracked - completed,
        "tracked_samples_issued": n_tracked,
        "tracked_samples_completed": completed,
        "tracked_samples_failed": n_tracked - completed,
        "tracked_duration_ns": duration,
        "legacy_loadgen_window_duration_ns": legacy_window,
    }
    other = 0
    for reason, n_reason in reasons.items():
        if reason in FINISH_REASONS:
            counters[f"tracked_finish_reason_{reason}"] = n_reason
        elif reason != "none":
            other += n_reason
    counters["tracked_finish_reason_other"] = other
    series: dict[str, npt.NDArray[np.int64] | npt.NDArray[np.float64]] = {}
    if streaming:
        series["ttft_ns"] = ttft_values
    series["sample_latency_ns"] = latency_values
    if counts is not None:
        if streaming:
            series["tpot_ns"] = tpot_values
        series["osl"] = osl_values
        isl_values = counts.isl[tracked]
        series["isl"] = isl_values[isl_values >= 0]
    seconds = duration / 1e9
    tpot_p90_ms = None if tpot is None else tpot.p90 / 1e6
    return PointStats(
        issued=n_tracked,
        completed=completed,
        failed=n_tracked - completed,
        streamed=n_streamed,
        errors=_sorted_counts(errors),
        error_examples=examples,
        finish_reasons=_sorted_counts(reasons),
        chunk_errors=chunk_errors,
        ttft=ttft,
        tpot=tpot,
        latency=latency,
        osl=osl,
        tpot_skipped=n_streamed - tpot_count if counts is not None else n_streamed,
        osl_total=osl_total,
        window_start_ns=start,
        window_end_ns=end,
        duration_ns=duration,
        qps=completed / seconds if duration > 0 else None,
        system_tps=osl_total / seconds if duration > 0 and osl_total is not None else None,
        tps_per_user=1000.0 / tpot_p90_ms if tpot_p90_ms else None,
        tokens_complete=tokens_complete,
        raw=PointSeries(
            series=series,
            counters=counters,
            tpot_per_record=tpot_per_record,
            ttft_per_record=ttft_per_record,
            latency_per_record=latency_per_record,
            tracked_ok=done_ok,
        ),
    )
