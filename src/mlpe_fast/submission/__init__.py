"""Submission bundles for MLPerf Endpoints (spec §3.6-§3.9, §4).

* :mod:`.system`: the system file (``mlpe-fast init``), validated by
  :func:`load_system`;
* :mod:`.power`: Appendix E provisioned-power arithmetic, as the checker does it;
* :mod:`.run_facts`: what a run folder says about its point;
* :mod:`.disclosure`: ``point.yaml``, ``system_desc.json``, ``system_power.json``;
* :mod:`.bundle`: the bundle, :func:`build_bundle`;
* :mod:`.check`: the official checker, :func:`run_checker`.
"""

from __future__ import annotations

from .bundle import PENDING_SUBMISSION_ID, PointFolder, build_bundle
from .check import CheckOutcome, run_checker
from .disclosure import WarmupRun, point_yaml, system_desc_json, system_power_json
from .run_facts import RunFacts, read_run
from .system import SystemDescription, init_template, load_system

__all__ = (
    "PENDING_SUBMISSION_ID",
    "CheckOutcome",
    "PointFolder",
    "RunFacts",
    "SystemDescription",
    "WarmupRun",
    "build_bundle",
    "init_template",
    "load_system",
    "point_yaml",
    "read_run",
    "run_checker",
    "system_desc_json",
    "system_power_json",
)
