"""Regions of a curve (spec §2.2), against the spec's verified table, values
worked out by hand, and the official checker's own function."""

from __future__ import annotations

from typing import Any

import pytest

from mlpe_fast.errors import UsageError
from mlpe_fast.sweep.regions import (
    OUT_OF_RANGE,
    REGION_NAMES,
    Span,
    c_min_from_points,
    region_of,
    regions,
)

_CHECKER_REASON = "endpoints-submission-cli (submission_checker) is not installed"

# Spec §2.2 "Verified against the checker": (C_max, C_min) -> Low, Medium,
# High, margin.  Where the spec leaves the margin out, it is worked out by
# hand as ceil(1.1 * C_max): 256 -> 281.6 -> 282, 1024 -> 1126.4 -> 1127,
# 512 -> 563.2 -> 564, 2048 -> 2252.8 -> 2253, 4096 -> 4505.6 -> 4506,
# 8192 -> 9011.2 -> 9012.
SPEC_TABLE = [
    (64, 2, (3, 6), (7, 18), (19, 64), (65, 71)),
    (128, 2, (3, 7), (8, 27), (28, 128), (129, 141)),
    (256, 2, (3, 8), (9, 42), (43, 256), (257, 282)),
    (256, 8, (9, 14), (15, 47), (48, 256), (257, 282)),
    (512, 8, (9, 16), (17, 71), (72, 512), (513, 564)),
    (1024, 8, (9, 18), (19, 109), (110, 1024), (1025, 1127)),
    (512, 16, (17, 24), (25, 79), (80, 512), (513, 564)),
    (1024, 16, (17, 26), (27, 117), (118, 1024), (1025, 1127)),
    (2048, 16, (17, 29), (30, 176), (177, 2048), (2049, 2253)),
    (1024, 32, (33, 42), (43, 131), (132, 1024), (1025, 1127)),
    (2048, 32, (33, 45), (46, 192), (193, 2048), (2049, 2253)),
    (4096, 32, (33, 48), (49, 287), (288, 4096), (4097, 4506)),
    (8192, 32, (33, 52), (53, 437), (438, 8192), (8193, 9012)),
    (16384, 32, (33, 57), (58, 676), (677, 16384), (16385, 18023)),
    (256, 1, (2, 7), (8, 41), (42, 256), (257, 282)),
    (1024, 1, (2, 11), (12, 103), (104, 1024), (1025, 1127)),
    (8192, 1, (2, 21), (22, 407), (408, 8192), (8193, 9012)),
    (64, 32, (33, 35), (36, 42), (43, 64), (65, 71)),
]


@pytest.mark.parametrize(("c_max", "c_min", "low", "med", "high", "margin"), SPEC_TABLE)
def test_spec_table(
    c_max: int,
    c_min: int,
    low: tuple[int, int],
    med: tuple[int, int],
    high: tuple[int, int],
    margin: tuple[int, int],
) -> None:
    r = regions(c_max, c_min)
    assert (r.c_max, r.c_min) == (c_max, c_min)
    assert r.low_latency == (1, c_min)
    assert r.low_concurrency == low
    assert r.med_concurrency == med
    assert r.high_concurrency == high
    assert r.margin == margin


def test_worked_example_1024_16() -> None:
    # By hand: I = log2(1008) / 3 = 3.3257; 2**I = 10.027 -> round(26.03) = 26;
    # 2**(2I) = 100.54 -> round(116.54) = 117, so 117 is Medium (the rules'
    # Example C puts it in High by an arithmetic slip, spec §2.2).
    r = regions(1024, 16)
    assert region_of(26, r) == "low_concurrency"
    assert region_of(27, r) == "med_concurrency"
    assert region_of(117, r) == "med_concurrency"
    assert region_of(118, r) == "high_concurrency"


def test_margin_follows_the_checkers_float_product() -> None:
    # 1.10 * 100 is 110.00000000000001 in binary floating point, so the
    # checker's ceil gives 111 where exact arithmetic gives 110.
    assert regions(100, 1).margin == (101, 111)
    assert region_of(111, regions(100, 1)) == "margin"
    assert region_of(112, regions(100, 1)) == OUT_OF_RANGE
    # 1.10 * 64 = 70.4 has no such artefact.
    assert regions(64, 1).margin == (65, 71)


def test_region_of_walks_every_boundary() -> None:
    r = regions(64, 2)  # 3-6 / 7-18 / 19-64 / 65-71 (spec table)
    expected = {
        0: OUT_OF_RANGE,
        1: "low_latency",
        2: "low_latency",
        3: "low_concurrency",
        6: "low_concurrency",
        7: "med_concurrency",
        18: "med_concurrency",
        19: "high_concurrency",
        64: "high_concurrency",
        65: "margin",
        71: "margin",
        72: OUT_OF_RANGE,
    }
    assert {c: region_of(c, r) for c in expected} == expected


def test_regions_emptied_by_rounding() -> None:
    # C_max - C_min = 1: 2**I = 2**(2I) = 1, so Low ends at 33 and Medium
    # (34-33) and High (34-33) are empty.
    r = regions(33, 32)
    assert r.low_concurrency == (33, 33)
    assert r.med_concurrency.empty and r.high_concurrency.empty
    assert region_of(33, r) == "low_concurrency"
    assert region_of(34, r) == "margin"
    # C_max - C_min = 2: 2**I = 1.26 -> Low 32-32; 2**(2I) = 1.59 -> Medium
    # 33-33; High 34-33 is empty.
    r = regions(33, 31)
    assert (r.low_concurrency, r.med_concurrency) == ((32, 32), (33, 33))
    assert r.high_concurrency.empty
    assert regions(34, 32).high_concurrency.empty
    # C_max - C_min = 3: 2**I = 1.44, 2**(2I) = 2.08 -> 33-33 / 34-34 / 35-35.
    r = regions(35, 32)
    assert (r.low_concurrency, r.med_concurrency, r.high_concurrency) == (
        (33, 33),
        (34, 34),
        (35, 35),
    )
    assert not any(r.span(name).empty for name in REGION_NAMES)


def test_span() -> None:
    span = Span(3, 6)
    assert span.contains(3) and span.contains(6)
    assert not span.contains(2) and not span.contains(7)
    assert str(span) == "3-6"
    assert Span(5, 4).empty and not span.empty


def test_ultra_low_band_and_override() -> None:
    assert regions(1024, 8).ultra_low == (1, 32)
    overridden = regions(1024, 8, c_min_overridden=True)
    assert overridden.ultra_low == (1, 8)
    assert overridden.low_concurrency == regions(1024, 8).low_concurrency


@pytest.mark.parametrize(
    ("c_max", "c_min"),
    [(32, 1), (1, 1), (33.0, 1), (True, 1), (1024, 0), (1024, 33), (1024, 8.0), (1024, True)],
)
def test_bad_bounds_are_usage_errors(c_max: Any, c_min: Any) -> None:
    with pytest.raises(UsageError) as raised:
        regions(c_max, c_min)
    assert isinstance(raised.value, ValueError)
    assert "\n" not in str(raised.value)
    assert "spec §2.2" in str(raised.value)


def test_c_min_from_points() -> None:
    assert c_min_from_points([64, 1, 4, 1024]) == 1
    assert c_min_from_points([1024, 16, 40]) == 16
    assert c_min_from_points([40, 1024, 13368]) == 32  # clamped (spec §2.2)
    assert c_min_from_points(iter([7])) == 7
    assert c_min_from_points([1, 8, 64], override=8) == 8


@pytest.mark.parametrize(
    ("points", "override", "message"),
    [
        ([], None, "at least one measured point"),
        ([1, 8, 64], 4, "not one of the measured points"),
        ([1, 8, 64], 0, "from 1 to 32"),
        ([1, 33, 64], 33, "from 1 to 32"),
        ([1, 8, 64], True, "from 1 to 32"),
    ],
)
def test_c_min_from_points_rejects(points: list[int], override: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        c_min_from_points(points, override)


def test_unknown_region_name() -> None:
    with pytest.raises(ValueError, match="unknown region"):
        regions(64, 1).span("submitters_choice")


# The checker's own function -------------------------------------------------


def _checker() -> Any:
    return pytest.importorskip("submission_checker.models.regions", reason=_CHECKER_REASON)


@pytest.mark.parametrize(("c_max", "c_min"), [(row[0], row[1]) for row in SPEC_TABLE])
def test_spec_table_agrees_with_the_checker(c_max: int, c_min: int) -> None:
    checker = _checker()
    theirs = checker.compute_regions(c_max, c_min)
    ours = regions(c_max, c_min)
    for name in REGION_NAMES:
        bounds = getattr(theirs, name)
        assert ours.span(name) == (bounds.start, bounds.end), name


def test_every_small_c_max_agrees_with_the_checker() -> None:
    # Every C_min with C_max up to 400 and a few large ones: each boundary,
    # and the classification one either side of it.
    checker = _checker()
    for c_max in [*range(33, 401), 1000, 1020, 4999, 65536, 1_000_003]:
        for c_min in range(1, 33):
            theirs = checker.compute_regions(c_max, c_min)
            ours = regions(c_max, c_min)
            probes = {0}
            for name in REGION_NAMES:
                bounds = getattr(theirs, name)
                assert ours.span(name) == (bounds.start, bounds.end), (c_max, c_min, name)
                probes |= {bounds.start - 1, bounds.start, bounds.end, bounds.end + 1}
            for c in probes:
                expected = checker.classify_concurrency(c, theirs) or OUT_OF_RANGE
                assert region_of(c, ours) == expected, (c_max, c_min, c)


def test_override_agrees_with_the_checker() -> None:
    checker = _checker()
    theirs = checker.compute_regions(1024, 8, c_min_overridden=True)
    ultra_low = theirs.ultra_low_concurrency
    assert regions(1024, 8, c_min_overridden=True).ultra_low == (ultra_low.start, ultra_low.end)
