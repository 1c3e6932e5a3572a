"""Per-point statistics (spec §1.1-1.3, reference-client.md §2.2), checked
against values computed by hand."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.metrics.stats import PERCENTILES, distribution, point_stats
from mlpe_fast.metrics.tokens import TokenCounts
from mlpe_fast.wire.events import NO_RESPONSE

MS = 1_000_000


def rec(
    t_issue: int,
    t_first: int | None,
    t_done: int | None,
    *,
    streamed: bool = True,
    error: str | None = None,
    message: str | None = None,
    t_end: int | None = None,
    finish: str | None = "stop",
    chunk_errors: int = 0,
) -> RequestRecord:
    s = msgspec.structs.replace(
        NO_RESPONSE,
        status=200,
        t_head=t_issue,
        t_first=t_first,
        t_done=t_done,
        finish_reason=finish,
        events=5 if streamed else 0,
        content_events=4 if streamed else 0,
        done=t_done is not None,
        complete=error is None,
        keep_alive=True,
        chunk_errors=chunk_errors,
    )
    end = t_end if t_end is not None else (t_done if t_done is not None else t_issue)
    return RequestRecord(
        sample_index=0,
        sample_id="x",
        t_sched=t_issue,
        t_issue=t_issue,
        t_end=end,
        response=s,
        error_class=error,
        error_message=message,
    )


def counts(osl: list[int], tpot: list[int], *, error: str | None = None) -> TokenCounts:
    pending = sum(1 for v in osl if v < 0)
    return TokenCounts(
        osl=np.array(osl, dtype=np.int64),
        tpot_tokens=np.array(tpot, dtype=np.int64),
        isl=np.zeros(len(osl), dtype=np.int64),
        complete=pending == 0 and error is None,
        pending=pending,
        seconds=0.0,
        error=error,
    )


# Percentiles -----------------------------------------------------------------------


def test_grid_is_the_reference_grid() -> None:
    assert PERCENTILES == (99.9, 99.0, 97.0, 95.0, 90.0, 80.0, 75.0, 50.0, 25.0, 10.0, 5.0, 1.0)


def test_percentiles_method_lower_by_hand() -> None:
    # 1..10: the lower neighbour of rank p/100 * (n - 1).
    d = distribution(np.arange(1, 11, dtype=np.int64))
    assert d is not None
    expected = {
        "99.9": 9,  # rank 8.991 -> 8 -> value 9
        "99.0": 9,  # 8.91
        "97.0": 9,  # 8.73
        "95.0": 9,  # 8.55
        "90.0": 9,  # 8.1
        "80.0": 8,  # 7.2
        "75.0": 7,  # 6.75
        "50.0": 5,  # 4.5
        "25.0": 3,  # 2.25
        "10.0": 1,  # 0.9
        "5.0": 1,  # 0.45
        "1.0": 1,  # 0.09
    }
    assert d.percentiles == expected
    assert (d.p50, d.p90, d.p95, d.p99, d.p999) == (5, 9, 9, 9, 9)
    assert d.percentile(75) == 7
    assert (d.count, d.total, d.min, d.max, d.mean) == (10, 55, 1, 10, 5.5)
    assert d.std == pytest.approx(2.8722813232690143)  # population std


def test_percentiles_of_unsorted_and_single_values() -> None:
    d = distribution(np.array([30, 10, 20], dtype=np.int64))
    assert d is not None
    assert (d.p50, d.p90, d.percentile(1)) == (20, 20, 10)  # ranks 1.0, 1.8, 0.02
    one = distribution(np.array([7], dtype=np.int64))
    assert one is not None and set(one.percentiles.values()) == {7}
    assert distribution(np.array([], dtype=np.int64)) is None


def test_percentile_off_the_grid_raises() -> None:
    d = distribution(np.arange(3, dtype=np.int64))
    assert d is not None
    with pytest.raises(KeyError):
        d.percentile(42)


# Per-request figures --------------------------------------------------------------------


def test_ttft_latency_and_tpot_by_hand() -> None:
    records = [
        rec(0, 50 * MS, 250 * MS),  # ttft 50, latency 250, tpot 200/100 = 2 ms
        rec(10 * MS, 70 * MS, 110 * MS),  # ttft 60, latency 100, tpot 40/10 = 4 ms
        rec(20 * MS, 100 * MS, 400 * MS),  # ttft 80, latency 380, tpot 300/200 = 1.5 ms
    ]
    st = point_stats(records, counts([101, 11, 201], [100, 10, 200]))
    assert st.ttft is not None and st.latency is not None and st.tpot is not None
    assert st.ttft.count == 3
    assert (st.ttft.min, st.ttft.p50, st.ttft.max) == (50 * MS, 60 * MS, 80 * MS)
    assert (st.latency.min, st.latency.p50, st.latency.max) == (100 * MS, 250 * MS, 380 * MS)
    assert (st.tpot.min, st.tpot.p50, st.tpot.max) == (1.5 * MS, 2 * MS, 4 * MS)
    assert st.tpot.p90 == 2 * MS  # rank 1.8 -> lower -> 2 ms
    assert st.tpot_p90_ms == 2.0
    assert st.ttft_p90_ms == 60.0
    assert st.tps_per_user == 500.0  # 1000 / 2 ms
    assert st.osl is not None and st.osl_total == 313


def test_tpot_skip_rules() -> None:
    records = [
        rec(0, 10, 110),  # valid: 100 ns / 4 tokens = 25
        rec(0, 10, 110),  # 0 tokens after the first event: skipped
        rec(0, 10, 10),  # zero duration: non-positive, skipped
        rec(0, 20, 10),  # negative duration: skipped
        rec(0, 10, 110),  # uncounted (-1): skipped
        rec(0, 10, 110, streamed=False),  # not streamed: no TTFT, no TPOT
        rec(0, None, 110),  # streamed but no content-bearing event
    ]
    st = point_stats(records, counts([5, 1, 5, 5, -1, 5, 0], [4, 0, 4, 4, -1, 0, 0]))
    assert st.tpot is not None
    assert st.tpot.count == 1
    assert st.tpot.p50 == 25.0
    assert st.ttft is not None
    assert st.ttft.count == 5  # streamed with a first event
    assert st.latency is not None and st.latency.count == 7
    assert st.streamed == 6
    assert st.tpot_skipped == 5
    assert not st.tokens_complete  # one completed response was not counted
    per_record = st.raw.tpot_per_record  # aligned with the records, NaN: no sample
    assert per_record[0] == 25.0 and np.isnan(per_record[1:]).all()


def test_tpot_is_a_float_ratio() -> None:
    st = point_stats([rec(0, 0, 10)], counts([4], [3]))
    assert st.tpot is not None
    assert st.tpot.p50 == pytest.approx(10 / 3)


def test_non_streamed_responses_have_latency_only() -> None:
    st = point_stats([rec(0, 5 * MS, 5 * MS, streamed=False)], counts([10], [0]))
    assert st.ttft is None
    assert st.tpot is None
    assert st.latency is not None and st.latency.p50 == 5 * MS
    assert st.streamed == 0
    assert st.osl_total == 10
    assert st.tps_per_user is None


def test_without_token_counts() -> None:
    st = point_stats([rec(0, 1, 2 * MS)])
    assert st.osl is None
    assert st.osl_total is None
    assert st.tpot is None
    assert st.system_tps is None
    assert st.tps_per_user is None
    assert not st.tokens_complete
    assert st.ttft is not None
    assert st.qps is not None


# Counts, errors, finish reasons ---------------------------------------------------------


def test_counts_errors_and_finish_reasons() -> None:
    records = [
        rec(0, 1, 10),
        rec(0, 1, 10, finish="length"),
        rec(0, 1, 10, finish=None),
        rec(0, 1, 10),
        rec(0, None, None, error="IdleTimeout", message="no data for 30 s", t_end=50),
        rec(0, None, None, error="HTTPStatusError", message="HTTP 429: slow down", t_end=5),
        rec(0, None, None, error="HTTPStatusError", message="HTTP 500: oops", t_end=6),
        rec(0, 1, 10, chunk_errors=2),
    ]
    st = point_stats(records, counts([1] * 8, [1] * 8))
    assert (st.issued, st.completed, st.failed) == (8, 5, 3)
    assert st.completed + st.failed == st.issued
    assert list(st.errors.items()) == [("HTTPStatusError", 2), ("IdleTimeout", 1)]
    assert st.error_examples == {
        "IdleTimeout": "no data for 30 s",
        "HTTPStatusError": "HTTP 429: slow down",
    }
    assert list(st.finish_reasons.items()) == [("stop", 3), ("length", 1), ("none", 1)]
    assert st.chunk_errors == 2
    assert st.latency is not None and st.latency.count == 5
    # Failed requests' outputs do not count (their counts are ignored).
    assert st.osl_total == 5


def test_counts_must_match_records() -> None:
    with pytest.raises(ValueError, match="2 records, but 1"):
        point_stats([rec(0, 1, 2)], counts([1, 2], [1, 1]))


def test_empty_point() -> None:
    st = point_stats([], counts([], []))
    assert (st.issued, st.completed, st.failed) == (0, 0, 0)
    assert st.ttft is None and st.tpot is None and st.latency is None and st.osl is None
    assert st.duration_ns == 0
    assert st.qps is None and st.system_tps is None and st.tps_per_user is None
    assert st.osl_total == 0


# Window and throughput -------------------------------------------------------------------


def test_window_from_first_issue_to_last_completion() -> None:
    records = [
        rec(1_000 * MS, 1_100 * MS, 1_500 * MS),
        rec(1_200 * MS, 1_300 * MS, 3_000 * MS),  # last completion
        rec(1_400 * MS, 1_500 * MS, 2_000 * MS),
    ]
    st = point_stats(records, counts([100, 200, 300], [99, 199, 299]))
    assert st.window_start_ns == 1_000 * MS
    assert st.window_end_ns == 3_000 * MS
    assert st.duration_ns == 2_000 * MS
    assert st.duration_s == 2.0
    assert st.qps == 1.5  # 3 completed / 2 s
    assert st.system_tps == 300.0  # 600 tokens / 2 s
    assert st.osl_total == 600
    assert st.tokens_complete


def test_window_ends_at_a_failure_completing_last() -> None:
    records = [
        rec(0, 10 * MS, 1_000 * MS),
        rec(0, None, None, error="TotalTimeout", t_end=4_000 * MS),
    ]
    st = point_stats(records, counts([100, 0], [99, 0]))
    assert st.window_end_ns == 4_000 * MS
    assert st.system_tps == 25.0  # 100 tokens / 4 s
    assert st.qps == 0.25


def test_tracking_start_excludes_warmup_and_opens_the_window() -> None:
    records = [
        rec(0, 10 * MS, 900 * MS),  # warm-up: issued before tracking started
        rec(1_000 * MS, 1_010 * MS, 1_500 * MS),
        rec(1_100 * MS, 1_110 * MS, 2_000 * MS),
    ]
    st = point_stats(records, counts([50, 100, 100], [49, 99, 99]), tracking_start_ns=500 * MS)
    assert st.issued == 2
    assert st.window_start_ns == 500 * MS
    assert st.duration_ns == 1_500 * MS
    assert st.osl_total == 200
    assert st.system_tps == pytest.approx(200 / 1.5)
    assert st.latency is not None and st.latency.count == 2


def test_tps_per_user_is_1000_over_tpot_p90_ms() -> None:
    # TPOT samples 1..10 ms: p90 (lower) = 9 ms -> 111.1 tokens/s per user.
    records = [rec(0, 0, k * MS) for k in range(1, 11)]
    st = point_stats(records, counts([2] * 10, [1] * 10))
    assert st.tpot is not None and st.tpot.p90 == 9 * MS
    assert st.tps_per_user == pytest.approx(1000 / 9)


def test_token_error_marks_tokens_incomplete() -> None:
    st = point_stats([rec(0, 1, 10)], counts([3], [2], error="token counting failed"))
    assert not st.tokens_complete


def test_a_non_streaming_run_has_no_streaming_series() -> None:
    # The reference registers ttft_ns and tpot_ns for streaming runs only
    # (spec §3.5); final_snapshot refuses them otherwise.
    records = [rec(0, None, 5 * MS, streamed=False), rec(MS, None, 7 * MS, streamed=False)]
    streamed = point_stats(records, counts([4, 6], [0, 0]))
    assert {"ttft_ns", "tpot_ns"} <= set(streamed.raw.series)
    plain = point_stats(records, counts([4, 6], [0, 0]), streaming=False)
    assert set(plain.raw.series) == {"sample_latency_ns", "osl", "isl"}
    assert plain.ttft is None and plain.tpot is None
    assert plain.osl_total == 10 and plain.completed == 2
