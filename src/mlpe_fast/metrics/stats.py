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
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from ..engine import record_columns
from ..engine.record import RequestRecord
from ..engine.record_columns import NONE, as_columns
from ..engine.spill import SpilledArray
from . import order_stats
from .order_stats import Sample, lower_ranks, order_statistics
from .series import PERCENTILES  # the reference client's grid (reference-client.md §2.2)
from .tokens import CountColumn, TokenCounts

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
    values: npt.NDArray[np.int64] | npt.NDArray[np.float64] | Sample,
    percentiles: Sequence[float] = PERCENTILES,
) -> Distribution | None:
    """The :class:`Distribution` of raw samples, or None when there are none.

    A :class:`~.order_stats.Sample` of more than ``order_stats.GATHER``
    samples is read a block at a time (issue 23): count, extremes,
    percentiles (exact order statistics) and an integer total as the whole
    array gives them; the mean and standard deviation (and a float total)
    summed block by block, which can differ from numpy's pairwise sums in
    the last bits."""
    if isinstance(values, Sample):
        if len(values) > order_stats.GATHER:
            return _streamed_distribution(values, percentiles)
        values = values.to_numpy()
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


def _streamed_distribution(sample: Sample, percentiles: Sequence[float]) -> Distribution:
    """:func:`distribution` of a sample read a block at a time (two passes
    for the moments, a few for the percentiles)."""
    count = 0
    total: Any = 0 if sample.dtype.kind in "iub" else 0.0
    low: Any = None
    high: Any = None
    for block in sample.blocks():
        if not block.size:
            continue
        count += int(block.size)
        total += int(block.sum()) if sample.dtype.kind in "iub" else float(block.sum())
        block_low, block_high = block.min(), block.max()
        low = block_low if low is None else min(low, block_low)
        high = block_high if high is None else max(high, block_high)
    mean = total / count
    squares = sum(
        float(np.square(block.astype(np.float64) - mean).sum()) for block in sample.blocks()
    )
    ranks = lower_ranks(count, list(percentiles))
    found = order_statistics(sample, ranks)
    return Distribution(
        count=count,
        total=float(total),
        min=float(low),
        max=float(high),
        mean=float(mean),
        std=float(np.sqrt(squares / count)),
        percentiles={_key(p): float(found[k]) for p, k in zip(percentiles, ranks, strict=True)},
    )


#: The finish reasons the reference client counts by name; any other is
#: counted as "other" (``metrics_aggregator/aggregator.py``).
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "function_call")

#: A per-record sample array: numpy, or past ``BLOCK_ROWS`` records a
#: spill file read back a slice at a time (``values[lo:hi]``, issue 23).
PerRecord = npt.NDArray[np.float64] | SpilledArray


class PointSeries(msgspec.Struct, frozen=True, kw_only=True):
    """The raw samples and counters of one point, named as the reference
    client's metrics registry names them (``metrics/final_snapshot.json``,
    spec §3.5); the files' stat blocks are computed from these.

    Series (:attr:`series`): ``ttft_ns``, ``sample_latency_ns`` (int64 ns),
    ``tpot_ns`` (float64 ns per token), ``osl`` and ``isl`` (int64 tokens;
    ISL of every tracked issued query, OSL of every completed one).  Counters:
    ``tracked_samples_issued``/``_completed``/``_failed``,
    ``tracked_duration_ns``, ``legacy_loadgen_window_duration_ns`` and
    ``tracked_finish_reason_<reason>``.

    Only the per-record arrays are kept; each series is taken from them when
    asked (issue 23: a point of a million requests held every sample twice,
    40 B a request more).
    """

    counters: dict[str, int]
    #: The TPOT sample of each record, in the records' order; NaN where a
    #: record gives none (the steady-state analysis reads it in issue order).
    tpot_per_record: PerRecord = msgspec.field(default_factory=lambda: np.empty(0, np.float64))
    #: Likewise each record's TTFT and latency (ns; NaN where it gives
    #: none), and which records are the window's completed ones: the same
    #: values the series hold, per record (``metrics/goodput.py`` reads them).
    ttft_per_record: PerRecord = msgspec.field(default_factory=lambda: np.empty(0, np.float64))
    latency_per_record: PerRecord = msgspec.field(default_factory=lambda: np.empty(0, np.float64))
    tracked_ok: npt.NDArray[np.bool_] = msgspec.field(default_factory=lambda: np.empty(0, np.bool_))
    #: Which records were issued after tracking started.
    tracked: npt.NDArray[np.bool_] = msgspec.field(default_factory=lambda: np.empty(0, np.bool_))
    #: The token counts the OSL and ISL series come from (None: not counted).
    counts: TokenCounts | None = None
    #: Whether the run streamed (only then the TTFT and TPOT series exist).
    streaming: bool = True

    @property
    def series(self) -> dict[str, npt.NDArray[np.int64] | npt.NDArray[np.float64] | Sample]:
        """The samples by series name, each in the records' order (new
        arrays each call).  TTFT and latency are whole nanoseconds, held as
        float64 per record: exact below 2**53 ns (104 days).  Past
        ``order_stats.GATHER`` records each is a :class:`~.order_stats.Sample`
        read from the per-record arrays a block at a time, never a whole
        copy (issue 23: 8 B a request a series, and a sort's copy)."""
        rows = len(self.latency_per_record)
        whole = rows <= order_stats.GATHER
        step = record_columns.BLOCK_ROWS  # records read at a time
        out: dict[str, npt.NDArray[np.int64] | npt.NDArray[np.float64] | Sample] = {}

        def measured(values: PerRecord, as_int: bool) -> Any:
            def blocks() -> Iterator[npt.NDArray[Any]]:
                for lo in range(0, rows, step):
                    part = values[lo : lo + step]
                    part = part[~np.isnan(part)]
                    yield part.astype(np.int64) if as_int else part

            dtype = np.int64 if as_int else np.float64
            return Sample(blocks, dtype).to_numpy() if whole else Sample(blocks, dtype)

        def counted(values: CountColumn, mask: npt.NDArray[np.bool_]) -> Any:
            def blocks() -> Iterator[npt.NDArray[Any]]:
                for lo in range(0, rows, step):
                    part = values[lo : lo + step][mask[lo : lo + step]]
                    yield part[part >= 0]

            return Sample(blocks, np.int64).to_numpy() if whole else Sample(blocks, np.int64)

        if self.streaming:
            out["ttft_ns"] = measured(self.ttft_per_record, True)
        out["sample_latency_ns"] = measured(self.latency_per_record, True)
        counts = self.counts
        if counts is not None:
            if self.streaming:
                out["tpot_ns"] = measured(self.tpot_per_record, False)
            out["osl"] = counted(counts.osl, self.tracked_ok)
            out["isl"] = counted(counts.isl, self.tracked)
        return out


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


def _codes_where(codes: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_]) -> dict[int, int]:
    """How many records where ``mask`` have each code of a string column."""
    values, counts = np.unique(codes[mask], return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def _named_counts(codes: Counter[int], names: Sequence[str], none: str = "") -> Counter[str]:
    """Code counts by name, in code order (-1, None, counted as ``none``
    when given)."""
    found: Counter[str] = Counter()
    for code in sorted(codes):
        if code >= 0:
            found[names[code]] += codes[code]
        elif none:
            found[none] += codes[code]
    return found


def _keep(
    kept: npt.NDArray[np.float64] | SpilledArray, rows: slice, values: npt.NDArray[np.float64]
) -> None:
    """A block's per-record samples into their array, or appended to their
    spill file (a disk that refuses them keeps them in memory: the figures
    are the same)."""
    if isinstance(kept, np.ndarray):
        kept[rows] = values
        return
    kept.spill_block(values)


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
    # A block of rows at a time (issue 23): what is kept is one float64 a
    # record for each of TTFT, TPOT and latency, and two masks; the counts
    # and window bounds add up block by block.
    # Past BLOCK_ROWS records the per-record samples go to spill files
    # beside the records' a block at a time (issue 23: 24 B a request).
    spill = n > record_columns.BLOCK_ROWS
    kept_samples = [
        SpilledArray("d", columns.spill_dir) if spill else np.full(n, np.nan) for _ in range(3)
    ]
    tracked = np.ones(n, np.bool_)
    done_ok = np.zeros(n, np.bool_)
    chunk_errors = n_streamed = n_tracked = 0
    reason_codes: Counter[int] = Counter()
    class_codes: Counter[int] = Counter()
    first_failure: dict[int, int] = {}  # error class code -> its first tracked record
    first_issue: int | None = None
    last_finish: int | None = None
    last_issue: tuple[int, int] | None = None  # (t_issue, t_finish) of the last issued
    tokens = None if counts is None else counts.tpot_tokens
    for block in columns.blocks():
        rows = slice(block.start, block.stop)
        t_issue = block.column("t_issue")
        t_first = block.column("t_first")
        has_first = t_first != NONE
        t_done = block.column("t_done")
        t_finish = np.where(t_done == NONE, block.column("t_end"), t_done)  # the completion
        ok = block.ok
        streamed = block.column("events") > 0
        if tracking_start_ns is not None:
            tracked[rows] = t_issue >= tracking_start_ns
        in_window = tracked[rows]
        chunk_errors += int(block.column("chunk_errors")[in_window].sum(dtype=np.int64))
        reason_codes.update(_codes_where(block.column("finish_reason"), in_window & ok))
        classes = block.column("error_class")
        failed = in_window & ~ok
        class_codes.update(_codes_where(classes, failed))
        for code in np.unique(classes[failed]).tolist():
            if code >= 0 and code not in first_failure:
                first_failure[code] = block.start + int(
                    np.flatnonzero(failed & (classes == code))[0]
                )
        block_ok = in_window & ok
        done_ok[rows] = block_ok
        ttft_block, latency_block, tpot_block = (np.full(len(block), np.nan) for _ in range(3))
        ttft_mask = block_ok & streamed & has_first
        ttft_block[ttft_mask] = t_first[ttft_mask] - t_issue[ttft_mask]
        latency_block[block_ok] = t_finish[block_ok] - t_issue[block_ok]
        if tokens is not None:
            block_tokens = tokens[rows]
            tpot_mask = ttft_mask & (block_tokens > 0)
            per_token = (t_finish[tpot_mask] - t_first[tpot_mask]) / block_tokens[tpot_mask]
            valid = np.isfinite(per_token) & (per_token > 0)
            tpot_block[np.flatnonzero(tpot_mask)[valid]] = per_token[valid]
        for kept, values in zip(kept_samples, (ttft_block, latency_block, tpot_block), strict=True):
            _keep(kept, rows, values)
        n_streamed += int(np.count_nonzero(block_ok & streamed))
        block_tracked = int(np.count_nonzero(in_window))
        if block_tracked:
            n_tracked += block_tracked
            low = int(t_issue[in_window].min())
            high = int(t_finish[in_window].max())
            first_issue = low if first_issue is None else min(first_issue, low)
            last_finish = high if last_finish is None else max(last_finish, high)
            # the first record of the largest issue stamp, as argmax finds it
            issued = np.where(in_window, t_issue, np.iinfo(np.int64).min)
            at = int(np.argmax(issued))
            if last_issue is None or int(t_issue[at]) > last_issue[0]:
                last_issue = (int(t_issue[at]), int(t_finish[at]))
    completed = int(np.count_nonzero(done_ok))
    ttft_per_record, latency_per_record, tpot_per_record = kept_samples
    class_names = columns.codes("error_class")[1]
    reasons = _named_counts(reason_codes, class_names, none="none")
    errors = _named_counts(class_codes, class_names)
    examples: dict[str, str] = {}
    for name in errors:  # the first tracked message of each class
        code = columns.code_of(name)
        assert code is not None  # a class that failed a record has a code
        examples[name] = columns.error_message(first_failure[code]) or ""

    # The distributions read the same samples the series hold, a block at a
    # time past order_stats.GATHER (no filtered copy, no sort's copy).
    raw = PointSeries(
        counters={},
        tpot_per_record=tpot_per_record,
        ttft_per_record=ttft_per_record,
        latency_per_record=latency_per_record,
        tracked_ok=done_ok,
        tracked=tracked,
        counts=counts,
        streaming=True,
    )
    samples = raw.series
    ttft = distribution(samples["ttft_ns"])
    latency = distribution(samples["sample_latency_ns"])

    osl: Distribution | None = None
    tpot: Distribution | None = None
    osl_total: int | None = None
    tokens_complete = False
    if counts is not None:
        osl_values = samples["osl"]
        tokens_complete = bool(len(osl_values) == completed) and counts.error is None
        osl = distribution(osl_values)
        osl_total = 0 if osl is None else int(osl.total)
        tpot = distribution(samples["tpot_ns"])
    del samples
    tpot_count = 0 if tpot is None else tpot.count

    if n_tracked and first_issue is not None and last_finish is not None:
        start = first_issue if tracking_start_ns is None else tracking_start_ns
        end = last_finish
    else:
        start = end = 0 if tracking_start_ns is None else tracking_start_ns
    duration = max(0, end - start)
    legacy_window = 0
    if n_tracked and last_issue is not None and first_issue is not None:
        # The LoadGen window: first issue to the completion of the
        # last-issued query (reference-client.md §2.2).
        legacy_window = max(0, last_issue[1] - first_issue)
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
        raw=msgspec.structs.replace(raw, counters=counters, streaming=streaming),
    )
