"""The submission commands of ``mlpe-fast``: ``init``, ``bundle`` and ``check``.

    mlpe-fast init [--system-file system.yaml]
    mlpe-fast bundle REPORT_DIR --system system.yaml --out DIR [--src DIR] [--docs DIR]
    mlpe-fast check BUNDLE [--strict]

``bundle`` takes a curve's report directory (``mlpe-fast run --concurrency
... --report-dir REPORT_DIR``: one ``r<N>`` run folder per point, and
``pareto.json`` saying which point is the Offline one), places every point
in its region of the system's ``C_max`` (spec §2.2), writes the disclosure
files (spec §3.6-3.8) and the bundle tree (spec §3.9), then runs the
official checker on it unless ``--no-check``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..sweep.regions import c_min_from_points, region_of, regions
from .bundle import PointFolder, build_bundle
from .check import CheckOutcome, run_checker
from .run_facts import read_run
from .system import init_template, load_system

__all__ = (
    "add_bundle_arguments",
    "add_check_arguments",
    "add_init_arguments",
    "bundle",
    "check",
    "init",
)


def add_init_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--system-file",
        default="system.yaml",
        metavar="PATH",
        help="where to write the system description template (default system.yaml)",
    )


def init(args: argparse.Namespace) -> int:
    path = init_template(args.system_file)
    print(f"wrote {path}: describe the system there, then run mlpe-fast bundle")
    return 0


def add_bundle_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report_dir", metavar="REPORT_DIR", help="a curve's report directory")
    parser.add_argument("--system", required=True, metavar="PATH", help="the system file")
    parser.add_argument("--out", required=True, metavar="DIR", help="where to build the bundle")
    parser.add_argument("--src", metavar="DIR", help="the implementation's sources and README")
    parser.add_argument("--docs", metavar="DIR", help="documentation for the bundle's docs/")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    parser.add_argument("--no-check", action="store_true", help="do not run the checker")
    parser.add_argument("--strict", action="store_true", help="checker warnings fail too")


#: Why a request-rate curve is never bundled (``sweep/rates.py``).
_POISSON_REFUSED = (
    "the checker refuses the poisson load pattern (spec §2.4); bundle a concurrency curve "
    "(mlpe-fast run --concurrency N,N,... or --max-concurrency C_MAX)"
)


def _offline_kinds(report: Path) -> dict[str, str]:
    """Folder name -> Offline kind, from the sweep's ``pareto.json``.

    Raises:
        UsageError: the file is no curve's, or a request-rate curve's.
    """
    path = report / "pareto.json"
    if not path.is_file():
        return {}
    try:
        curve = json.loads(path.read_bytes())
        points = curve.get("points", [])
    except (OSError, ValueError, AttributeError):
        raise UsageError(f"{path}: not the pareto.json of a curve") from None
    if curve.get("load") == "rate":
        raise UsageError(
            f"{report} is a request-rate curve (Poisson points), not an MLPerf submission: "
            f"{_POISSON_REFUSED}"
        )
    return {
        Path(str(p.get("folder", ""))).name: str(p.get("offline", "none"))
        for p in points
        if isinstance(p, dict)
    }


def curve_points(report_dir: str | Path, c_max: int) -> list[PointFolder]:
    """The points of a curve's report directory, placed in their regions.

    Raises:
        UsageError: no ``r<N>`` run folders, or one that is not a run.
    """
    report = Path(report_dir)
    kinds = _offline_kinds(report)
    folders = sorted(
        (p for p in report.glob("r*") if p.is_dir() and p.name[1:].isdigit()),
        key=lambda p: int(p.name[1:]),
    )
    if not folders:
        raise UsageError(f"{report}: no r<N> run folders (mlpe-fast run --report-dir {report})")
    facts = [read_run(folder) for folder in folders]
    for fact in facts:
        if fact.load_pattern == "poisson":
            raise UsageError(
                f"{fact.path} is a Poisson point, not an MLPerf point: {_POISSON_REFUSED}"
            )
    fixed = [int(f.path.name[1:]) for f in facts if f.load_pattern != "max_throughput"]
    bounds = regions(c_max, c_min_from_points(fixed)) if fixed else None
    points = []
    for fact in facts:
        concurrency = int(fact.path.name[1:])
        if fact.load_pattern == "max_throughput":
            points.append(PointFolder(fact.path, concurrency, "submitters_choice", "dedicated"))
            continue
        region = region_of(concurrency, bounds) if bounds is not None else "low_latency"
        offline = "elected" if kinds.get(fact.path.name) == "elected" else "none"
        steady = _steady_state_block(fact.path)
        points.append(PointFolder(fact.path, concurrency, region, offline, steady))
    return points


def _steady_state_block(folder: Path) -> dict[str, Any] | None:
    """The ``point.yaml`` ``steady_state`` block the run wrote, if any."""
    path = folder / "steady_state.json"
    if not path.is_file():
        return None
    try:
        block = json.loads(path.read_bytes()).get("point_yaml")
    except (OSError, ValueError, AttributeError):
        raise UsageError(f"{path}: not a steady-state analysis") from None
    return block if isinstance(block, dict) else None


def bundle(args: argparse.Namespace) -> int:
    system = load_system(args.system)
    points = curve_points(args.report_dir, system.max_supported_concurrency)
    root = build_bundle(
        points,
        system,
        args.out,
        src_dir=args.src,
        docs_dir=args.docs,
        overwrite=args.overwrite,
    )
    print(f"bundle: {root}")
    if args.no_check:
        return 0
    return _report(run_checker(root, strict=args.strict))


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "bundle", metavar="BUNDLE", help="a submission bundle (org or submission dir)"
    )
    parser.add_argument("--strict", action="store_true", help="warnings fail too")


def check(args: argparse.Namespace) -> int:
    if not Path(args.bundle).is_dir():
        raise UsageError(f"{args.bundle}: no such bundle directory")
    return _report(run_checker(args.bundle, strict=args.strict))


def _report(outcome: CheckOutcome) -> int:
    """Prints the checker's findings; status 1 when it fails the bundle."""
    for rule, message in outcome.errors:
        print(f"error   {rule}: {message}")
    for rule, message in outcome.warnings:
        print(f"warning {rule}: {message}")
    verdict = "PASSED" if outcome.passed else "FAILED"
    print(
        f"checker {outcome.checker_version}{' --strict' if outcome.strict else ''}: {verdict} "
        f"({len(outcome.errors)} errors, {len(outcome.warnings)} warnings)"
    )
    return 0 if outcome.passed else 1
