"""Planning a curve (spec §2.1-2.4): planned points worked out by hand, the
checker's count, coverage and range rules, durations and query counts."""

from __future__ import annotations

from typing import Any

import pytest

from mlpe_fast.errors import UsageError
from mlpe_fast.sweep.plan import (
    OfflineKind,
    check_plan,
    issued_count,
    min_points,
    plan_points,
    point_duration_s,
)

_CHECKER_REASON = "endpoints-submission-cli (submission_checker) is not installed"

OFFLINE_KINDS: tuple[OfflineKind, ...] = ("dedicated", "elected", "none")


def _checker() -> Any:
    return pytest.importorskip("submission_checker.models.regions", reason=_CHECKER_REASON)


def checker_coverage_failures(points: list[int], c_max: int) -> set[str]:
    """The coverage and range rules the checker's own region functions fail
    for these fixed-concurrency points (as ``ModelContext`` and
    ``RegionPlacement`` apply them, spec §4.2)."""
    checker = _checker()
    bounds = checker.compute_regions(c_max, min(*points, 32))
    failures = set()
    if not any(c <= 32 for c in points):
        failures.add("ultra-low-concurrency-coverage")
    covered = {checker.covered_region(c, bounds) for c in points}
    for region in ("low_concurrency", "med_concurrency", "high_concurrency"):
        if region not in covered:
            failures.add(region.replace("_", "-") + "-coverage")
    if any(checker.classify_concurrency(c, bounds) is None for c in points):
        failures.add("concurrency-in-range")
    return failures


def rules(problems: list[str]) -> list[str]:
    return [problem.split(":", 1)[0] for problem in problems]


# plan_points ------------------------------------------------------------------


def test_plan_for_33_worked_by_hand() -> None:
    # regions(33, 1): 2**I = 32**(1/3) = 3.17 -> Low 2-4; 32**(2/3) = 10.08 ->
    # Medium 5-11; High 12-33.  Anchors 1 and 33; Low's centre sqrt(2*4) =
    # 2**1.5 is halfway between 2 and 4 -> 4 (ties go up); Medium's centre
    # sqrt(5*11) = 7.4 -> 8.  Widest ratio 8-33 (4.1): inside 9-32, centre
    # 2**4.08 -> 16.  Then 1-4 (4): inside 2-3 -> 2.  Then 16-33 (2.06):
    # inside 17-32, centre 2**4.54 -> 32.
    assert plan_points(33) == [1, 2, 4, 8, 16, 32, 33]


def test_plan_for_5000_worked_by_hand() -> None:
    # regions(5000, 1): Low 2-18, Medium 19-293, High 294-5000.  Low's centre
    # 2**2.58 -> 8; Medium's 2**6.22 -> 64.  Widest 64-5000: inside 65-4999,
    # centre 2**9.15 -> 512.  Then 512-5000 (9.8): centre 2**10.64 -> 2048.
    # Then 1-8, 8-64 and 64-512 tie at 8: the highest, 64-512, centre
    # 2**7.51 -> 256.
    assert plan_points(5000) == [1, 8, 64, 256, 512, 2048, 5000]
    # One more point (elected: 8 fixed points): 1-8 and 8-64 still tie at 8;
    # 8-64 wins, inside 9-63, centre 2**4.57 -> 32.
    assert plan_points(5000, offline="elected") == [1, 8, 32, 64, 256, 512, 2048, 5000]


def test_plan_from_a_given_c_min() -> None:
    # regions(1024, 16): Low 17-26 holds no power of two, so its centre
    # sqrt(17*26) = 21.02 -> 21; Medium 27-117 -> 2**5.81 -> 64.  Widest
    # 64-1024 -> 2**8.01 -> 256; 64-256 and 256-1024 tie at 4 -> 512 first,
    # then 64-256 -> 128.
    assert plan_points(1024, c_min=16) == [16, 21, 64, 128, 256, 512, 1024]


@pytest.mark.parametrize("c_max", [33, 64, 100, 512, 1024, 5000])
@pytest.mark.parametrize(
    ("offline", "count"),
    [
        (offline, count)
        for offline in OFFLINE_KINDS
        for count in (7, 8, 16, 32)
        if count >= min_points(offline)
    ],
)
def test_plans_pass_the_checker_rules(c_max: int, offline: OfflineKind, count: int) -> None:
    points = plan_points(c_max, count=count, offline=offline)
    assert points == sorted(set(points))
    assert points[0] == 1 and points[-1] == c_max
    assert len(points) + (offline == "dedicated") == count
    assert check_plan(points, c_max, offline) == []
    assert checker_coverage_failures(points, c_max) == set()


def test_minimum_plans_by_offline_kind() -> None:
    assert len(plan_points(1024)) == 7  # 8 points with the dedicated run
    assert len(plan_points(1024, count=7, offline="elected")) == 7
    assert len(plan_points(1024, count=7, offline="none")) == 7
    assert len(plan_points(1024, count=32)) == 31


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"c_max": 32}, "above 32"),
        ({"c_max": 1024, "c_min": 0}, "from 1 to 32"),
        ({"c_max": 1024, "c_min": 33}, "from 1 to 32"),
        ({"c_max": 1024, "count": 7}, "8 to 32 points"),
        ({"c_max": 1024, "count": 33, "offline": "elected"}, "7 to 32 points"),
        ({"c_max": 1024, "count": 6, "offline": "none"}, "7 to 32 points"),
        ({"c_max": 1024, "offline": "both"}, "--offline must be one of"),
        ({"c_max": 33, "c_min": 32}, "Medium Concurrency is empty"),
        ({"c_max": 34, "c_min": 32}, "High Concurrency is empty"),
        # 35 - 32 + 1 = 4 concurrencies for 7 points.
        ({"c_max": 35, "c_min": 32}, "7 points do not fit"),
        ({"c_max": 40, "c_min": 20, "count": 32}, "31 points do not fit"),
    ],
)
def test_plan_points_rejects(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message) as raised:
        plan_points(**kwargs)
    assert "\n" not in str(raised.value)


def test_plan_uses_every_concurrency_when_asked_for_all() -> None:
    # 40 - 10 + 1 = 31 concurrencies, 31 fixed points with a dedicated run.
    assert plan_points(40, c_min=10, count=32) == list(range(10, 41))


# check_plan -------------------------------------------------------------------


def test_check_plan_accepts_the_verified_bundle() -> None:
    # The curve of spec §7's verified passing bundle (C_max 1024, dedicated).
    assert check_plan([1, 4, 8, 16, 64, 512, 1024], 1024, "dedicated") == []


@pytest.mark.parametrize(
    ("points", "c_max", "offline", "expected"),
    [
        # 6 fixed points + the dedicated run = 7 < 8.
        ([1, 4, 16, 64, 512, 1024], 1024, "dedicated", ["point-count"]),
        ([1, 4, 16, 64, 512, 1024], 1024, "elected", ["point-count"]),
        # C_min clamps to 32: regions(1024, 32) = 33-42 / 43-131 / 132-1024,
        # all covered, but nothing at 1-32.
        (
            [40, 48, 64, 128, 256, 512, 1024],
            1024,
            "dedicated",
            ["ultra-low-concurrency-coverage"],
        ),
        # regions(64, 1): 63**(1/3) = 3.98 -> Low 2-5; 63**(2/3) = 15.8 ->
        # Medium 6-17; nothing there.
        ([1, 2, 3, 4, 5, 32, 64], 64, "dedicated", ["med-concurrency-coverage"]),
        # Only the margin (1025-1127) above Medium (12-103): no High point, and
        # none at C_max.
        (
            [1, 2, 4, 8, 16, 32, 64, 1100],
            1024,
            "dedicated",
            ["high-concurrency-coverage", "offline-ordering"],
        ),
        ([1, 4, 32, 128, 512, 1024, 1200], 1024, "dedicated", ["concurrency-in-range"]),
        # 1..31 and 1024: 32 fixed points + the dedicated run.
        ([*range(1, 32), 1024], 1024, "dedicated", ["point-cap"]),
        ([1, 4, 16, 64, 128, 512, 1000], 1024, "elected", ["offline-point-present"]),
        # No point at C_max is fine for an agentic curve.
        ([1, 4, 16, 64, 128, 512, 1000], 1024, "none", []),
        # regions(33, 32): Medium and High are empty; 34-37 is margin.
        (
            [32, 33, 34, 35, 36, 37],
            33,
            "dedicated",
            ["point-count", "med-concurrency-coverage", "high-concurrency-coverage"],
        ),
    ],
)
def test_check_plan_problems(
    points: list[int], c_max: int, offline: OfflineKind, expected: list[str]
) -> None:
    problems = check_plan(points, c_max, offline)
    assert rules(problems) == expected
    assert all("\n" not in problem for problem in problems)
    # Whatever the checker's region functions fail, check_plan reports too.
    coverage = {rule for rule in expected if rule.endswith("-coverage") or "range" in rule}
    assert checker_coverage_failures(points, c_max) == coverage


def test_check_plan_messages_name_the_region() -> None:
    problems = check_plan([1, 2, 3, 4, 5, 32, 64], 64, "dedicated")
    assert problems == [
        "med-concurrency-coverage: no point in Medium Concurrency 6-17"
        " (C_max 64, C_min 1; spec §2.2)"
    ]
    (problem,) = check_plan([6, 4, 16, 64, 512, 1024], 1024, "dedicated")
    assert problem.startswith("point-count: 7 points, the checker needs at least 8")
    (problem,) = check_plan([1, 4, 32, 128, 512, 1024, 1200], 1024, "dedicated")
    assert "1200 is above the 10 % margin of C_max 1024 (which ends at 1127" in problem


def test_check_plan_bad_entries() -> None:
    problems = check_plan([0, 1, 1, 4, 16, 64, 512, 1024, 2048], 1024, "elected")
    assert rules(problems) == ["load-pattern", "duplicate", "concurrency-in-range"]
    # Nothing usable: only the count is reported.
    assert rules(check_plan([-1], 1024, "dedicated")) == ["load-pattern", "point-count"]


def test_check_plan_bad_c_max() -> None:
    problems = check_plan([1, 2, 4, 8, 16, 24, 32], 32, "elected")
    assert rules(problems) == ["region-computation"]


def test_check_plan_with_c_min_override() -> None:
    # regions(1024, 4): 1020**(1/3) = 10.07 -> Low 5-14; 1020**(2/3) = 101.3
    # -> Medium 15-105; High 106-1024; Ultra Low is 1-4.
    points = [4, 8, 16, 64, 128, 512, 1024]
    assert check_plan(points, 1024, "dedicated", c_min_override=4) == []
    # Without it C_min is 4 too, but Ultra Low is 1-32.
    assert check_plan(points, 1024, "dedicated") == []
    problems = check_plan(points, 1024, "dedicated", c_min_override=2)
    assert rules(problems) == ["c-min-override"]
    # Overriding C_min to 8 moves 9 and 13 into Low (9-18), leaving Medium
    # (19-109) empty of points.
    problems = check_plan([1, 8, 9, 13, 128, 512, 1024], 1024, "dedicated", c_min_override=8)
    assert rules(problems) == ["med-concurrency-coverage"]


def test_check_plan_rejects_unknown_offline() -> None:
    with pytest.raises(UsageError, match="--offline"):
        check_plan([1, 4, 16, 64, 512, 1024, 2048], 2048, "both")  # type: ignore[arg-type]


# Durations and query counts ---------------------------------------------------


@pytest.mark.parametrize(
    ("concurrency", "agentic", "seconds"),
    [
        (1, False, 600.0),
        (32, False, 600.0),
        (33, False, 1200.0),
        (13368, False, 1200.0),
        (32, True, 600.0),
        (33, True, 2400.0),
    ],
)
def test_point_duration(concurrency: int, agentic: bool, seconds: float) -> None:
    assert point_duration_s(concurrency, agentic=agentic) == seconds


def test_point_duration_agrees_with_the_checker() -> None:
    checker = _checker()
    bounds = checker.compute_regions(1024, 8)
    for concurrency in range(1, 1128):
        region = checker.classify_concurrency(concurrency, bounds)
        for agentic in (False, True):
            ms = checker.min_duration_ms(region, concurrency, agentic=agentic)
            assert point_duration_s(concurrency, agentic=agentic) * 1000 == ms


@pytest.mark.parametrize("concurrency", [0, -4, 2.0, True])
def test_point_duration_rejects(concurrency: Any) -> None:
    with pytest.raises(UsageError, match="positive integer"):
        point_duration_s(concurrency)


@pytest.mark.parametrize(
    ("dataset_size", "completed_needed", "issued"),
    [
        (13368, 0, 13368),  # at least one full pass
        (13368, 1, 13368),
        (13368, 13368, 13368),
        (13368, 13369, 26736),
        (30, 100, 120),
        (1, 7, 7),
    ],
)
def test_issued_count(dataset_size: int, completed_needed: int, issued: int) -> None:
    assert issued_count(dataset_size, completed_needed) == issued


def test_issued_count_rejects() -> None:
    with pytest.raises(UsageError, match="empty"):
        issued_count(0, 5)
    with pytest.raises(UsageError, match=">= 0"):
        issued_count(10, -1)
