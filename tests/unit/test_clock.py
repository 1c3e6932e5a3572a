"""Other machines' clocks (``scale/clock.py``): the node clock a test can
skew, the fit of offset and drift, the probes over real UDP on loopback,
and the mapping of a record's stamps."""

from __future__ import annotations

import time

import msgspec
import pytest

from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.scale.clock import (
    ClockFit,
    ClockResponder,
    NodeClock,
    ProbeRound,
    map_record,
    probe_round,
)
from mlpe_fast.wire.events import NO_RESPONSE, ChunkError, TokenGaps


def test_a_node_clock_and_its_inverse() -> None:
    clock = NodeClock(offset_ns=5_000_000_000, drift_ppm=-150.0, ref_ns=1_000)
    for t in (0, 1_000, 10**12, 10**15):
        assert abs(clock.to_host(clock.from_host(t)) - t) <= 1
    assert clock.from_host(1_000) == 1_000 + 5_000_000_000
    assert clock.from_host(1_000 + 10**9) - clock.from_host(1_000) == 10**9 - 150_000
    assert NodeClock().identity and NodeClock().from_host(42) == 42


def _round(t_drv: int, offset: float, half_rtt: int = 10_000, skew: int = 0) -> ProbeRound:
    """A round whose best probe saw ``offset`` at ``t_drv`` (``skew``: an
    asymmetric path moving the node's stamp)."""
    return ProbeRound(t_drv - half_rtt, round(t_drv + offset) + skew, t_drv + half_rtt, 200)


def test_the_fit_finds_offset_and_drift() -> None:
    truth = NodeClock(offset_ns=123_456_000_000, drift_ppm=80.0, ref_ns=0)
    rounds = [_round(t, truth.from_host(t) - t) for t in (10**9, 3 * 10**9, 9 * 10**9)]
    fit = ClockFit.fit(rounds)
    assert fit.drift_ppm == pytest.approx(80.0, abs=1e-3)
    assert fit.rounds == 3 and fit.rtt_min_ns == 20_000
    for t in (0, 5 * 10**9, 20 * 10**9):
        assert abs(fit.to_node(t) - truth.from_host(t)) <= 2
        assert abs(fit.to_driver(truth.from_host(t)) - t) <= 2
    assert fit.error_ns == pytest.approx(10_000, abs=1)  # half the best round trip


def test_one_round_gives_an_offset_and_no_drift() -> None:
    fit = ClockFit.fit([_round(10**9, -7_000)])
    assert fit.drift_ppm == 0 and fit.offset_ns == -7_000
    assert fit.to_driver(fit.to_node(12345)) == 12345
    with pytest.raises(ValueError):
        ClockFit.fit([])


def test_residuals_widen_the_bound() -> None:
    rounds = [_round(t, 0, skew=s) for t, s in ((10**9, 0), (2 * 10**9, 3_000), (3 * 10**9, 0))]
    fit = ClockFit.fit(rounds)
    assert fit.residual_max_ns > 1_000 and fit.error_ns > 10_000 + 1_000


def test_probes_over_loopback_find_a_skewed_responder() -> None:
    skew = NodeClock(offset_ns=-3_000_000_000, drift_ppm=0.0, ref_ns=time.monotonic_ns())
    responder = ClockResponder("127.0.0.1", skew)
    try:
        best = probe_round(responder.address, probes=50)
    finally:
        responder.close()
    assert best.probes == 50 and 0 < best.rtt_ns < 50_000_000
    assert abs(best.offset_ns - (-3_000_000_000)) <= best.rtt_ns / 2 + 1


def test_a_silent_responder_is_a_timeout() -> None:
    responder = ClockResponder("127.0.0.1")
    address = responder.address
    responder.close()
    with pytest.raises(TimeoutError, match="no answer"):
        probe_round(address, probes=3, timeout_s=0.01)


def test_map_record_moves_every_stamp() -> None:
    error = ChunkError(code=401, detail="", data=b"x", t_ns=7)
    gaps = TokenGaps(count=1, zero=0, sum_ns=1, min_ns=1, max_ns=1, buckets=b"")
    response = msgspec.structs.replace(
        NO_RESPONSE,
        t_head=3,
        t_first=4,
        t_done=5,
        first_chunk_error=error,
        chunk_times=(4, 5),
        t_first_content=5,
        t_second=5,
        gaps=gaps,
    )
    record = RequestRecord(
        0, "id", t_sched=1, t_issue=2, t_end=6, response=response, t_first_read=4, t_done_read=5
    )
    moved = map_record(record, lambda t: t + 1000)
    assert (moved.t_sched, moved.t_issue, moved.t_end) == (1001, 1002, 1006)
    assert (moved.t_first_read, moved.t_done_read) == (1004, 1005)
    r = moved.response
    assert (r.t_head, r.t_first, r.t_done) == (1003, 1004, 1005)
    assert r.first_chunk_error is not None and r.first_chunk_error.t_ns == 1007
    assert r.chunk_times == (1004, 1005)
    assert (r.t_first_content, r.t_second) == (1005, 1005)  # R12's stamps move too
    assert r.gaps == gaps  # durations: unchanged
    assert moved.ttft_ns == record.ttft_ns and moved.sample_id == "id"
    bare = map_record(RequestRecord(0, "id", 1, 2, 6, NO_RESPONSE), lambda t: t * 2)
    assert bare.response == NO_RESPONSE and bare.t_end == 12 and bare.t_first_read is None
