"""Goodput (metrics/goodput.py, config/slo.py): the bounds as given, and
which requests are good, checked by hand."""

from __future__ import annotations

import pytest

from mlpe_fast.config.slo import Slo, parse_slo
from mlpe_fast.metrics.goodput import best_under_slo, goodput_of
from mlpe_fast.metrics.stats import point_stats
from tests.unit.test_stats import MS, counts, rec


def test_bounds_are_read_from_words_and_from_a_mapping() -> None:
    assert parse_slo(["ttft:500", "tpot:50", "e2el:20000"]) == Slo(ttft=500, tpot=50, e2el=20000)
    assert parse_slo(["ttft=500,tpot=2.5"]) == Slo(ttft=500, tpot=2.5)
    assert parse_slo({"E2EL": 1000}) == Slo(e2el=1000)
    assert Slo(ttft=500, e2el=2.5).text() == "TTFT <= 500 ms, latency <= 2.5 ms"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["itl:5"], "'itl' is not one of ttft, tpot, e2el"),
        (["ttft"], "'ttft' is not METRIC:MS"),
        (["ttft:0"], "not a positive number of milliseconds"),
        (["ttft:nan"], "not a positive number of milliseconds"),
        (["ttft:fast"], "is not a number of milliseconds"),
        (["ttft:5", "ttft:6"], "ttft is given twice"),
        ({"ttft": True}, "is not a number of milliseconds"),
        ([], "no bound given"),
    ],
)
def test_bad_bounds_say_what_is_wrong(given: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_slo(given)  # type: ignore[arg-type]


def test_a_request_is_good_when_it_meets_every_bound() -> None:
    records = [
        # TTFT 10 ms, TPOT (40 - 10) / 3 = 10 ms, latency 40 ms: meets all
        rec(0, 10 * MS, 40 * MS),
        # TTFT 30 ms: misses the TTFT bound
        rec(0, 30 * MS, 60 * MS),
        # TPOT (110 - 10) / 4 = 25 ms: misses the TPOT bound
        rec(0, 10 * MS, 110 * MS),
        # failed: never good, but issued
        rec(0, 5 * MS, 6 * MS, error="HTTPStatusError"),
        # one token: no TPOT to meet the TPOT bound with
        rec(0, 10 * MS, 12 * MS),
    ]
    osl = [4, 4, 5, -1, 1]
    stats = point_stats(records, counts(osl, [3, 3, 4, 0, 0]))
    good = goodput_of(stats, counts(osl, [3, 3, 4, 0, 0]).osl, Slo(ttft=20, tpot=20))
    assert (good.issued, good.good) == (5, 1)
    assert good.met == {"ttft": 3, "tpot": 2}
    assert good.attainment_pct == pytest.approx(20.0)
    seconds = stats.duration_ns / 1e9  # first issue to the last completion: 110 ms
    assert good.goodput_rps == pytest.approx(1 / seconds)
    assert good.good_output_tps == pytest.approx(4 / seconds)
    # a latency bound alone: the one-token answer is good, the failure is not
    only_latency = goodput_of(stats, None, Slo(e2el=50))
    assert only_latency.good == 2 and only_latency.good_output_tps is None
    assert "2 of 5 requests good = 40.0 %" in only_latency.line()
    assert "not an MLPerf metric" in only_latency.line()
    assert only_latency.as_summary()["note"] == "not an MLPerf metric"


def test_a_point_not_streamed_has_no_ttft_or_tpot_to_meet() -> None:
    """Not streamed: a TTFT or TPOT bound is not measured, not missed by all."""
    records = [rec(0, 10 * MS, 40 * MS), rec(0, 10 * MS, 60 * MS)]
    stats = point_stats(records, counts([4, 4], [3, 3]))
    good = goodput_of(stats, None, Slo(ttft=20, e2el=50), streamed=False)
    assert (good.good, good.attainment_pct, good.goodput_rps, good.met) == (None, None, None, {})
    assert good.unmeasured == ("ttft",)
    assert good.line() == (
        "goodput (TTFT <= 20 ms, latency <= 50 ms; not an MLPerf metric): not measured "
        "(not streamed: no TTFT; --streaming on measures them)\n"
    )
    assert good.as_summary()["unmeasured"] == {"metrics": ["ttft"], "why": "not streamed: no TTFT"}
    assert best_under_slo([{"concurrency": 8, "goodput": good.as_summary()}]) is None
    # latency is measured either way
    latency = goodput_of(stats, None, Slo(e2el=50), streamed=False)
    assert (latency.good, latency.unmeasured) == (1, ())


def test_the_best_point_has_the_highest_goodput() -> None:
    rows = [
        {"concurrency": 4, "goodput": {"goodput_rps": 3.0}},
        {"concurrency": 16, "goodput": {"goodput_rps": 9.5}},
        {"concurrency": 64, "goodput": {"goodput_rps": 2.0}},
        {"concurrency": 128},
    ]
    best = best_under_slo(rows)
    assert best is not None and best["concurrency"] == 16
    assert best_under_slo([{"concurrency": 4, "goodput": {"goodput_rps": 0.0}}]) is None


def test_the_setting_reads_the_flag_and_the_yaml_block() -> None:
    import argparse

    from mlpe_fast.config import add_run_arguments, resolve

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    assert resolve(parser.parse_args(["--goodput", "ttft:500", "tpot:50"]), {}).goodput == Slo(
        ttft=500, tpot=50
    )
    from_yaml = resolve(parser.parse_args([]), {"mlpe_fast": {"goodput": {"e2el": 20000}}})
    assert from_yaml.goodput == Slo(e2el=20000)
    assert resolve(parser.parse_args([]), {}).goodput is None
