"""The steady-state detector (spec §1.4) and its ``point.yaml`` block (spec §3.6).

The statistics are checked against values worked out by hand (in the
docstrings) and, where installed, against ``pymannkendall`` as an independent
oracle; the detector on synthetic runs whose shape is known by construction;
the block against the official checker's own model.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mlpe_fast.metrics.steady_state import (
    MIN_TREND_N,
    PointQueries,
    SteadyState,
    default_min_duration_s,
    detect_steady_state,
    mann_kendall,
    pettitt,
)

# --------------------------------------------------------------------------- Mann-Kendall


def test_mann_kendall_by_hand() -> None:
    """x = 1 3 2 5 4.  Pairs i<j: from 1: + + + + (4); from 3: - + + (1);
    from 2: + + (2); from 5: - (-1).  S = 6.  No ties: Var = 5*4*15/18 = 50/3.
    Z = (6 - 1)/sqrt(50/3) = 1.2247; two-sided p = 2(1 - Phi(1.2247)) = 0.2207
    (normal table).  Sen's slope: the 10 pairwise slopes sorted are
    -1 -1 1/3 1/2 3/4 1 1 4/3 2 3, median (3/4 + 1)/2 = 0.875."""
    t = mann_kendall([1, 3, 2, 5, 4], hamed_rao=False)
    assert t.s == 6
    assert t.var_s == pytest.approx(50 / 3)
    assert t.z == pytest.approx(1.224745, abs=1e-6)
    assert t.p == pytest.approx(0.2207, abs=1e-4)
    assert t.slope == pytest.approx(0.875)
    assert t.trend == "none"
    assert t.correction == 1.0


def test_mann_kendall_variance_with_ties() -> None:
    """x = 2 1 2 3 3.  From 2: - 0 + + (1); from 1: + + + (3); from 2: + + (2);
    from 3: 0.  S = 6.  Ties: two groups of 2, each t(t-1)(2t+5) = 18, so
    Var = (5*4*15 - 36)/18 = 264/18; Z = 5/sqrt(264/18) = 1.3056."""
    t = mann_kendall([2, 1, 2, 3, 3], hamed_rao=False)
    assert t.s == 6
    assert t.var_s == pytest.approx(264 / 18)
    assert t.z == pytest.approx(5 / math.sqrt(264 / 18))


def test_hamed_rao_by_hand() -> None:
    """x = 8 1 11 7 9 4 12 10 (n = 8).
    S: from 8: - + - + - + + (+1); from 1: six + (+6); from 11: - - - + - (-3);
    from 7: + - + + (+2); from 9: - + + (+1); from 4: + + (+2); from 12: - (-1).
    S = 8.  Var = 8*7*21/18 = 1176/18.
    Sen's slope = 1/2; detrended x - (1..8)/2 = 7.5 0 9.5 5 6.5 1 8.5 6, ranks
    6 1 8 3 5 2 7 4, deviations from 4.5: 1.5 -3.5 3.5 -1.5 .5 -2.5 2.5 -.5,
    sum of squares 42.  rho_1 = (-5.25 - 12.25 - 5.25 - .75 - 1.25 - 6.25 - 1.25)/42
    = -32.25/42 = -43/56, outside +-1.96/sqrt 8 = +-0.693; rho_2 = 18.5/42 = 0.44
    and the later lags are inside.  n/n* = 1 + 2/(8*7*6) * 7*6*5 * (-43/56)
    = 9/224, so Var* = 1176/18 * 9/224 = 2.625 and Z = 7/sqrt(2.625) = 4.3205:
    the negative autocorrelation shrinks the variance and the trend becomes
    significant (p ~ 1.6e-5); uncorrected Z = 7/sqrt(65.33) = 0.866, p = 0.386."""
    x = [8, 1, 11, 7, 9, 4, 12, 10]
    t = mann_kendall(x)
    assert t.s == 8
    assert t.var_s == pytest.approx(1176 / 18)
    assert t.slope == pytest.approx(0.5)
    assert t.correction == pytest.approx(9 / 224)
    assert t.z == pytest.approx(7 / math.sqrt(2.625))
    assert t.p < 1e-4
    assert t.trend == "up"
    plain = mann_kendall(x, hamed_rao=False)
    assert plain.z == pytest.approx(0.866025, abs=1e-6)
    assert plain.p == pytest.approx(0.3865, abs=1e-4)
    assert plain.trend == "none"


def test_mann_kendall_degenerate() -> None:
    assert mann_kendall([1.0]).trend == "none"
    flat = mann_kendall([2.0, 2.0, 2.0, 2.0])
    assert (flat.s, flat.z, flat.p, flat.trend) == (0, 0.0, 1.0, "none")
    down = mann_kendall(np.arange(10.0)[::-1])
    assert down.trend == "down" and down.s == -45
    with pytest.raises(ValueError):
        mann_kendall([1.0, float("nan"), 2.0])


def _series_for_oracle() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    out = []
    for n in (6, 9, 12, 20, 35):
        noise = rng.standard_normal(n)
        ar = np.empty(n)
        ar[0] = noise[0]
        for i in range(1, n):
            ar[i] = 0.7 * ar[i - 1] + noise[i]  # positively autocorrelated
        out += [noise, ar, ar + 0.15 * np.arange(n), noise - 0.3 * np.arange(n)]
    return out


@pytest.mark.parametrize("x", _series_for_oracle())
def test_mann_kendall_against_pymannkendall(x: np.ndarray) -> None:
    """Independent oracle (test-only, optional): pymannkendall 1.4.3's
    ``original_test`` and ``hamed_rao_modification_test``."""
    pmk = pytest.importorskip("pymannkendall")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = pmk.original_test(x)
        corrected = pmk.hamed_rao_modification_test(x)
    if not corrected.var_s > 0:
        pytest.skip("pymannkendall has no guard for a non-positive Hamed-Rao factor")
    ours = mann_kendall(x, hamed_rao=False)
    assert ours.s == plain.s
    assert ours.var_s == pytest.approx(plain.var_s)
    assert ours.z == pytest.approx(plain.z)
    assert ours.p == pytest.approx(plain.p, abs=1e-12)
    assert ours.slope == pytest.approx(plain.slope)
    hr = mann_kendall(x)
    assert hr.var_s * hr.correction == pytest.approx(corrected.var_s)
    assert hr.z == pytest.approx(corrected.z)
    assert hr.p == pytest.approx(corrected.p, abs=1e-12)
    assert (
        hr.trend == {"increasing": "up", "decreasing": "down", "no trend": "none"}[corrected.trend]
    )


# --------------------------------------------------------------------------- Pettitt


@pytest.mark.parametrize("seed", range(8))
def test_mann_kendall_s_and_sen_slope_are_those_of_every_pair_at_once(seed: int) -> None:
    """S and Sen's slope are found a lag at a time (issue 23: no index
    arrays of every pair); they are bit for bit those of all the pairs'
    differences taken at once, ties and equal slopes included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    x = rng.integers(0, 6, n).astype(np.float64) if seed % 2 else rng.normal(1e6, 3e3, n)
    i, j = np.triu_indices(n, 1)
    test = mann_kendall(x)
    assert test.s == int(np.sign(x[j] - x[i]).sum())
    assert test.slope == float(np.median((x[j] - x[i]) / (j - i)))


def test_pettitt_by_hand() -> None:
    """x = 3 1 2 6 4 5, ranks 3 1 2 6 4 5; U_t = 2*sum(r_1..r_t) - 7t:
    -1, -6, -9, -4, -3, so K = 9 at t = 3 (at t = 3 each of the 9 pairs across
    the split has the earlier value smaller: -9).  p = 2 exp(-6*81/(216 + 36))
    = 2 exp(-1.92857) = 0.29071."""
    cp = pettitt([3, 1, 2, 6, 4, 5])
    assert (cp.k, cp.index) == (9.0, 3)
    assert cp.p == pytest.approx(0.29071, abs=1e-5)


def test_pettitt_with_ties() -> None:
    """x = 1 1 2 5 5 6, average ranks 1.5 1.5 3 4.5 4.5 6; U = -4 -8 -9 -7 -5."""
    cp = pettitt([1, 1, 2, 5, 5, 6])
    assert (cp.k, cp.index) == (9.0, 3)


def _pettitt_brute(x: Sequence[float]) -> tuple[float, int]:
    n = len(x)
    best, at = -1.0, 0
    for t in range(1, n):
        u = sum(np.sign(x[i] - x[j]) for i in range(t) for j in range(t, n))
        if abs(u) > best:
            best, at = float(abs(u)), t
    return best, at


def test_pettitt_matches_the_double_sum() -> None:
    rng = np.random.default_rng(3)
    for n in (5, 11, 24):
        x = np.round(rng.standard_normal(n), 1)  # rounding makes ties
        x[n // 2 :] += 1.0
        cp = pettitt(x)
        assert (cp.k, cp.index) == _pettitt_brute(list(x))
        assert cp.p == pytest.approx(min(1.0, 2 * math.exp(-6 * cp.k**2 / (n**3 + n**2))))


def test_pettitt_finds_a_step() -> None:
    x = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.3, 1.31, 1.29, 1.3, 1.32, 1.28]
    cp = pettitt(x)
    assert cp.index == 6
    # K = 6 * 6 = 36: p = 2 exp(-6*1296/(1728 + 144)) = 2 exp(-4.1538) = 0.0314
    assert cp.k == 36.0
    assert cp.p == pytest.approx(0.0314, abs=1e-4)


# --------------------------------------------------------------------------- synthetic runs

SIZE = 100  # queries per dataset pass (= super-pass) in these runs
TAU_S = 100.0  # issue span of one super-pass
OSL = 100
TTFT_NS = 50e6
TPOT_NS = 20e6


def make_run(
    levels: Sequence[float],
    *,
    seed: int = 0,
    noise: float = 0.004,
    tau_s: float = TAU_S,
    partial: int = 0,
    last_tau_s: float | None = None,
    tpot: bool = True,
) -> PointQueries:
    """One super-pass per entry of ``levels`` (TPOT scale), issued evenly over
    ``tau_s`` each.  Within a pass the TPOT samples are a shuffled fixed
    profile (0.6 .. 1.4 of the level), so the per-pass percentiles follow the
    level exactly; ``noise`` jitters each level.  ``partial`` > 0 makes the
    last pass that many queries long."""
    rng = np.random.default_rng(seed)
    jittered = np.asarray(levels, np.float64) * (1 + noise * rng.standard_normal(len(levels)))
    profile = np.linspace(0.6, 1.4, SIZE)
    issue: list[int] = []
    samples: list[float] = []
    t0 = 1_000_000_000
    for k, level in enumerate(jittered):
        last = k == len(jittered) - 1
        count = partial if last and partial else SIZE
        span = last_tau_s if last and last_tau_s is not None else tau_s
        gap = span * 1e9 / SIZE
        issue += [int(t0 + i * gap) for i in range(count)]
        samples += list((rng.permutation(profile) * level * TPOT_NS)[:count])
        t0 += int(SIZE * gap)
    t_issue = np.asarray(issue, np.int64)
    per_token = np.asarray(samples)
    ttft = np.full(t_issue.size, TTFT_NS)
    t_done = (t_issue + ttft + per_token * OSL).astype(np.int64)
    if not tpot:
        per_token = np.full(t_issue.size, np.nan)
    return PointQueries(t_issue, t_done, ttft, per_token, np.full(t_issue.size, OSL, np.int64))


def detect(q: PointQueries, **kw: Any) -> SteadyState:
    kw.setdefault("concurrency", 8)
    return detect_steady_state(q, dataset_size=SIZE, **kw)


def span(r: SteadyState) -> tuple[int, int]:
    assert r.window is not None
    return r.window.super_pass_start, r.window.super_pass_end


def test_flat_run_is_steady() -> None:
    r = detect(make_run([1.0] * 8))
    assert (r.status, r.verdict) == ("windowable", "STEADY STATE")
    assert r.is_official
    assert span(r) == (0, 7)
    assert r.state == {"tpot_p50": "Plateau", "tpot_p90": "Plateau"}
    assert r.diagnostic_state == {"ttft_p50": "Plateau", "ttft_p90": "Plateau"}
    assert r.anomaly is None and r.warmup_passes == 0 and r.tail_cut is None
    assert r.window is not None and r.window.duration_s >= 600.0
    assert r.min_duration is not None and r.min_duration.dominant == "floor"


def test_windowed_figures() -> None:
    """system_tps = output tokens of the window's queries over its issue-time
    span; percentiles ``method="lower"`` over its raw samples (spec §1.3-1.4)."""
    q = make_run([0.7] + [1.0] * 7)
    r = detect(q)
    assert span(r) == (1, 7)
    sl = slice(SIZE, 8 * SIZE)
    duration = (q.t_issue_ns[sl].max() - q.t_issue_ns[sl].min()) / 1e9
    assert r.window is not None and r.figures is not None
    assert r.window.n_samples == r.figures.n_completed == 7 * SIZE
    assert r.window.duration_s == pytest.approx(duration)
    assert r.figures.osl_total == 7 * SIZE * OSL and r.figures.tokens_complete
    assert r.figures.system_tps == pytest.approx(7 * SIZE * OSL / duration)
    p90 = float(np.percentile(q.tpot_ns[sl], 90, method="lower"))
    assert r.figures.tpot is not None and r.figures.tpot.p90 == p90
    assert r.figures.tps_per_user == pytest.approx(1000 / (p90 / 1e6))
    assert r.figures.ttft is not None and r.figures.ttft.p90 == TTFT_NS


@pytest.mark.parametrize("gather", [1, 17, 10**9])
def test_windows_read_a_block_at_a_time_give_the_same_figures(
    gather: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window's samples are read a block of queries at a time, never one
    array (issue 23): past order_stats.GATHER samples its percentiles and
    the relaxation term's latency p90 are the exact order statistics of the
    whole window, its counts and totals the same; means and deviations
    summed block by block agree to the last bits."""
    from mlpe_fast.metrics import order_stats, steady_state

    q = make_run([0.7] + [1.0] * 7)
    whole = detect(q)
    monkeypatch.setattr(order_stats, "GATHER", gather)
    monkeypatch.setattr(steady_state, "_READ_QUERIES", 37)
    r = detect(q)
    assert (r.status, r.window, r.min_duration, r.super_passes) == (
        whole.status,
        whole.window,
        whole.min_duration,
        whole.super_passes,
    )
    assert r.figures is not None and whole.figures is not None
    for name in ("ttft", "tpot", "latency"):
        got, want = getattr(r.figures, name), getattr(whole.figures, name)
        assert (got.count, got.min, got.max, got.percentiles) == (
            want.count,
            want.min,
            want.max,
            want.percentiles,
        ), name
        assert got.mean == pytest.approx(want.mean, rel=1e-12) and got.std == pytest.approx(
            want.std, rel=1e-9, abs=1e-6
        )
    assert (r.figures.osl_total, r.figures.system_tps, r.figures.tps_per_user) == (
        whole.figures.osl_total,
        whole.figures.system_tps,
        whole.figures.tps_per_user,
    )


def test_warmup_is_cropped() -> None:
    r = detect(make_run([0.6, 0.8, 0.9] + [1.0] * 8))
    assert r.warmup_passes == 3
    assert span(r) == (3, 10)
    assert (r.status, r.verdict) == ("windowable", "STEADY STATE")


def test_warmup_crop_is_capped_at_half_the_run() -> None:
    """Leading passes far off the back-half level, but no level of their own:
    the crop stops at half the run (spec §1.4)."""
    levels = [0.5, 0.6, 0.7, 0.75, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0]
    r = detect(make_run(levels), min_duration_s=100)
    assert r.warmup_passes == 5


def test_fixed_warmup_override() -> None:
    r = detect(make_run([0.6] + [1.0] * 8), warmup_passes=2)
    assert r.warmup_passes == 2 and span(r) == (2, 8)


def test_upward_drift() -> None:
    """+3 % a pass: every window long enough to clear 600 s is a trend."""
    r = detect(make_run([1.03**k for k in range(12)]))
    assert (r.status, r.verdict) == ("insufficient_duration", "drifting_up")
    assert not r.is_official
    assert r.state["tpot_p50"] == "Drifting Up"
    assert "tpot_p50" in r.drifting_up


def test_downward_drift() -> None:
    r = detect(make_run([1.0, 1.0, 1.0, 1.0] + [0.97**k for k in range(1, 9)]))
    assert r.verdict == "drifting_down"
    assert "Drifting Down" in r.state.values()


def test_local_plateau_in_a_drift_is_flagged() -> None:
    """With a short minimum a 4-pass piece of the drift is windowable, but the
    verdict says the run drifts on (the reference's drift warning)."""
    r = detect(make_run([1.03**k for k in range(12)]), min_duration_s=300)
    assert r.status == "windowable"
    assert r.verdict == "drifting_up"
    assert set(r.state.values()) == {"Plateau"}
    # Pettitt fires on a drift too (p = 0.031 here); a straight line fits it
    # better than two levels, so it is a drift, not a level shift.
    levels = [1.03**k for k in range(12)]
    assert pettitt(levels).p < 0.05
    r = detect(make_run(levels), min_duration_s=300, warmup_passes=0)
    assert (r.verdict, r.anomaly, span(r)) == ("drifting_up", None, (0, 3))


def test_level_shift_in_the_middle() -> None:
    """Eight passes at one level, eight 20 % slower: the first plateau is
    reported and the shift flagged, not cropped away as warm-up."""
    r = detect(make_run([1.0] * 8 + [1.2] * 8))
    assert (r.status, r.verdict) == ("windowable", "anomaly")
    assert span(r) == (0, 7)
    assert r.anomaly is not None
    assert r.anomaly.change_point_super_pass == 8
    assert r.anomaly.delta_pct == pytest.approx(20.0, abs=2.0)
    assert r.anomaly.pettitt_p < 0.05
    assert r.plateaus == ((0, 7), (8, 15))


def test_small_level_shift_is_not_averaged_into_the_plateau() -> None:
    """A 10 % step never breaks the CoV bound; the change point cuts it."""
    r = detect(make_run([1.0] * 8 + [1.1] * 8))
    assert r.verdict == "anomaly" and span(r) == (0, 7)


def test_late_level_shift() -> None:
    r = detect(make_run([1.0] * 14 + [1.25] * 6))
    assert r.verdict == "anomaly" and span(r) == (0, 13)
    assert r.anomaly is not None and r.anomaly.change_point_super_pass == 14


def test_level_shift_is_placed_by_least_squares() -> None:
    """The old level's three largest values come last, so Pettitt's
    max |U_t| is at t = 11 (U_11 = 2*66 - 11*21 = -99 against U_14 = -84);
    the step is at 14."""
    levels = [1.0] * 11 + [1.01, 1.012, 1.014] + [1.25] * 6
    assert pettitt(levels).index == 11
    r = detect(make_run(levels, noise=0.0))
    assert r.anomaly is not None and r.anomaly.change_point_super_pass == 14
    assert span(r) == (0, 13)


def test_noise_is_not_an_anomaly() -> None:
    for seed in range(5):
        r = detect(make_run([1.0] * 16, seed=seed, noise=0.01))
        assert (r.verdict, span(r)) == ("STEADY STATE", (0, 15)), seed


def test_choppy_run_is_not_found() -> None:
    """Alternating levels 30 % apart: nothing is flat, nothing trends."""
    r = detect(make_run([1.0, 1.3] * 6), warmup_passes=0)
    assert (r.status, r.verdict) == ("insufficient_duration", "not found")
    assert r.plateaus == ()
    assert r.state == {"tpot_p50": "Plateau", "tpot_p90": "Plateau"}


def test_fewer_than_four_passes() -> None:
    r = detect(make_run([1.0] * 3))
    assert (r.status, r.verdict) == ("insufficient_passes", "not found")
    assert r.window is not None and r.window.super_passes == 3 < MIN_TREND_N
    assert r.state == {}


def test_too_short() -> None:
    r = detect(make_run([1.0] * 8, tau_s=10.0))
    assert (r.status, r.verdict) == ("insufficient_duration", "STEADY STATE")
    assert r.min_duration is not None
    assert r.min_duration.required_s == 600.0 > r.min_duration.window_s
    # a development run may lower the minimum
    assert detect(make_run([1.0] * 8, tau_s=10.0), min_duration_s=60.0).is_official


def test_first_plateau_long_enough_is_reported() -> None:
    """Spec §1.4: the first plateau clearing the minimum, skipping shorter ones."""
    levels = [1.0] * 4 + [1.5] * 10
    r = detect(make_run(levels), min_duration_s=500, warmup_passes=0)
    assert r.plateaus[0] == (0, 3)
    assert span(r) == (4, 13)
    assert r.status == "windowable" and r.anomaly is None


def test_relaxation_term() -> None:
    """Queries that live long need a longer window: 5 x p90 latency."""
    r = detect(make_run([1.0] * 8), min_duration_s=10.0)
    assert r.min_duration is not None
    # p90 of the TPOT profile 0.6 .. 1.4 (100 points, method "lower"): index 89,
    # 0.6 + 0.8 * 89/99 = 1.3192; p90 lifetime = 50 ms + 1.3192 * 20 ms * 100 = 2.688 s
    expected = 5 * (TTFT_NS + (0.6 + 0.8 * 89 / 99) * TPOT_NS * OSL) / 1e9
    assert r.min_duration.relaxation_s == pytest.approx(expected, rel=0.01)
    assert r.min_duration.dominant == "relaxation" and r.min_duration.required_s > 10.0


def test_less_than_one_dataset_pass() -> None:
    r = detect(make_run([1.0], partial=60))
    assert (r.status, r.verdict) == ("partial_dataset", "not found")
    assert r.window is not None and r.window.n_samples == 60
    assert not r.is_official


def test_incomplete_last_pass_is_cut() -> None:
    r = detect(make_run([1.0] * 8 + [0.8], partial=40))
    assert r.tail_cut == "incomplete"
    assert r.n_super_passes == 8 and len(r.super_passes) == 9
    assert not r.super_passes[-1].complete
    assert span(r) == (0, 7) and r.verdict == "STEADY STATE"


def test_short_last_pass_is_cut() -> None:
    r = detect(make_run([1.0] * 8 + [0.8], last_tau_s=20.0))
    assert r.tail_cut == "short_issue_span"
    assert span(r) == (0, 7)


def test_full_last_pass_is_kept() -> None:
    r = detect(make_run([1.0] * 9))
    assert r.tail_cut is None and span(r) == (0, 8)


def test_without_tpot_nothing_is_gated() -> None:
    r = detect(make_run([1.0] * 8, tpot=False))
    assert r.verdict == "not found" and r.status != "windowable"
    assert r.state == {}


def test_minimum_duration_defaults() -> None:
    assert default_min_duration_s(1) == default_min_duration_s(32) == 600.0
    assert default_min_duration_s(33) == default_min_duration_s(4096) == 1200.0
    r = detect(make_run([1.0] * 10), concurrency=64)
    assert r.status == "insufficient_duration"  # 999.5 s < 1200 s
    regions = pytest.importorskip("submission_checker.models.regions")
    assert regions.min_duration_ms("low_latency", 32, agentic=False) == 600_000
    assert regions.min_duration_ms("med_concurrency", 64, agentic=False) == 1_200_000


def test_from_columns() -> None:
    q = PointQueries.from_columns(
        t_issue_ns=[0, 10, 20],
        t_done_ns=[100, None, 120],
        ttft_ns=[5.0, None, 7.0],
        tpot_ns=[2.0, 3.0, -1.0],
        osl=[10, None, 12],
    )
    assert q.t_done_ns.tolist() == [100, -1, 120]
    assert q.osl.tolist() == [10, -1, 12]
    assert np.isnan(q.ttft_ns[1]) and np.isnan(q.tpot_ns[2])  # non-positive TPOT dropped
    assert len(q) == 3
    with pytest.raises(ValueError):
        PointQueries(q.t_issue_ns, q.t_done_ns[:2], q.ttft_ns, q.tpot_ns, q.osl)


def test_failed_queries_do_not_count() -> None:
    q = make_run([1.0] * 8)
    t_done = q.t_done_ns.copy()
    t_done[::10] = -1
    r = detect(PointQueries(q.t_issue_ns, t_done, q.ttft_ns, q.tpot_ns, q.osl))
    assert r.window is not None and r.window.n_samples == 8 * SIZE - 8 * SIZE // 10
    assert r.super_passes[0].n_completed == SIZE - SIZE // 10


@pytest.mark.parametrize(
    "kw",
    [
        {"dataset_size": 0},
        {"concurrency": 0},
        {"super_pass_size": 0},
        {"min_duration_s": -1.0},
        {"warmup_passes": -1},
    ],
)
def test_bad_arguments(kw: dict[str, Any]) -> None:
    args: dict[str, Any] = {"dataset_size": SIZE, "concurrency": 8, **kw}
    with pytest.raises(ValueError):
        detect_steady_state(make_run([1.0] * 4), **args)


# --------------------------------------------------------------------------- point.yaml


def cases() -> dict[str, SteadyState]:
    return {
        "steady": detect(make_run([1.0] * 8)),
        "warmup": detect(make_run([0.6, 0.8] + [1.0] * 8)),
        "anomaly": detect(make_run([1.0] * 8 + [1.2] * 8)),
        "drifting": detect(make_run([1.03**k for k in range(12)])),
        "local_plateau_in_drift": detect(
            make_run([1.03**k for k in range(12)]), min_duration_s=300
        ),
        "three_passes": detect(make_run([1.0] * 3)),
        "too_short": detect(make_run([1.0] * 8, tau_s=10.0)),
        "partial": detect(make_run([1.0], partial=60)),
        "choppy": detect(make_run([1.0, 1.3] * 6), warmup_passes=0),
    }


CASES = cases()


def _checker_errors(block: dict[str, Any], tmp_path: Path) -> list[Any]:
    models = pytest.importorskip("submission_checker.models")
    payload = {
        "concurrency": 8,
        "runtime_settings": {"load_pattern": "concurrency", "runtime": {}},
        "steady_state": block,
    }
    config = models.PointConfig.model_validate(
        payload, context={"yaml_path": tmp_path / "point.yaml"}
    )
    return [
        r
        for r in config._check_results
        if r.rule in ("steady-state-valid", "steady-state-consistency")
        and r.severity == models.Severity.ERROR
    ]


@pytest.mark.parametrize("name", sorted(CASES))
def test_point_yaml_block_is_accepted_by_the_checker(name: str, tmp_path: Path) -> None:
    block = CASES[name].to_point_yaml()
    assert set(block) <= {"status", "verdict", "window", "state", "anomaly"}
    assert ("anomaly" in block) == (CASES[name].anomaly is not None)
    round_tripped = yaml.safe_load(yaml.safe_dump(block))  # plain Python values only
    assert round_tripped == block
    assert _checker_errors(round_tripped, tmp_path) == []
    checked = pytest.importorskip("submission_checker.models.file.steady_state")
    model = checked.SteadyState.model_validate(round_tripped)
    assert model.is_official == (block["status"] == "windowable")
    if model.is_official:
        assert model.window.super_passes >= checked.MIN_TREND_N
        need = CASES[name].min_duration
        assert need is not None and model.window.duration_s >= need.required_s >= need.floor_s
        assert model.drifting_metrics == []


def test_point_yaml_shape() -> None:
    block = CASES["steady"].to_point_yaml()
    assert block["status"] == "windowable" and block["verdict"] == "STEADY STATE"
    assert block["window"]["super_pass_start"] == 0
    assert block["window"]["super_pass_end"] == 7
    assert block["window"]["super_pass_size"] == SIZE
    assert block["window"]["n_samples"] == 8 * SIZE
    assert block["state"] == {"tpot_p50": "Plateau", "tpot_p90": "Plateau"}
    anomaly = CASES["anomaly"].to_point_yaml()["anomaly"]
    assert anomaly["change_point_super_pass"] == 8
    assert anomaly["plateaus"] == [[0, 7], [8, 15]]


def test_checker_rejects_a_tampered_block(tmp_path: Path) -> None:
    """The checker is not a rubber stamp: windowable over three super-passes,
    or with a drifting gating metric, is an error."""
    block = CASES["steady"].to_point_yaml()
    three = {**block, "window": {**block["window"], "super_pass_end": 2}}
    assert _checker_errors(three, tmp_path)
    drifting = {**block, "state": {"tpot_p50": "Plateau", "tpot_p90": "Drifting Up"}}
    assert _checker_errors(drifting, tmp_path)
    passes = CASES["three_passes"].to_point_yaml()
    four = {**passes, "window": {**passes["window"], "super_pass_end": 3}}
    assert _checker_errors(four, tmp_path)


def test_the_headline_of_a_windowable_point_names_the_window_its_figures_come_from() -> None:
    """``result_summary.json``'s ``mlpe_fast.steady_state`` (spec §1.4): the
    window's figures are the official result only when windowable."""
    q = make_run([0.7] + [1.0] * 7)
    r = detect(q)
    block = r.headline()
    assert block["basis"] == "steady_state" and block["status"] == "windowable"
    assert block["window"] == r.to_point_yaml()["window"]
    assert r.figures is not None and r.figures.tpot is not None and r.figures.ttft is not None
    figures = block["figures"]
    assert figures["system_tps"] == r.figures.system_tps
    assert figures["tps_per_user"] == pytest.approx(1000 / figures["tpot_p90_ms"])
    assert figures["ttft_p90_ms"] == r.figures.ttft.p90 / 1e6
    assert figures["n_completed"] == 7 * SIZE and figures["tokens_complete"] is True
    assert json.loads(json.dumps(block)) == block  # plain values, for the summary


def test_the_headline_of_a_short_point_falls_back_to_the_whole_run() -> None:
    r = detect(make_run([1.0] * 3))
    block = r.headline()
    assert block["status"] == "insufficient_passes" and block["basis"] == "total"
    assert block["n_super_passes"] == 3 and block["reason"] == r.reason


def test_the_report_lines_say_which_figures_are_the_result() -> None:
    from mlpe_fast.point.figures import steady_state_lines

    windowable = steady_state_lines(detect(make_run([0.7] + [1.0] * 7)))
    assert "windowable (STEADY STATE): the window's figures are the result" in windowable
    assert "super-passes 2-8 of 8" in windowable and "system " in windowable
    assert "TTFT p90 " in windowable and "per user " in windowable
    short = steady_state_lines(detect(make_run([1.0] * 3)))
    assert "insufficient_passes" in short and "the whole-run figures above are the result" in short
