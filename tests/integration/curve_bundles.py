"""What the curve-to-submission tests share: a system file for a model, and
``mlpe-fast bundle`` run on a curve with the checker's findings read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlpe_fast.cli import main
from mlpe_fast.submission.system import init_template


def system_file(path: Path, c_max: int, **model: str) -> Path:
    """The system template with ``C_max`` and the ``model`` fields given."""
    init_template(path)
    system: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    system["max_supported_concurrency"] = c_max
    system["model"].update(model)
    path.write_text(yaml.safe_dump(system, sort_keys=False), encoding="utf-8")
    return path


def bundle_and_check(
    report: Path, system: Path, out: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[str, set[str]]:
    """Bundles ``report`` into ``out`` with the official checker; asserts it
    found no error and returns its output and the rules it warned about."""
    code = main(["bundle", str(report), "--system", str(system), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "0 errors" in printed, printed
    warnings = {
        line.split()[1].rstrip(":") for line in printed.splitlines() if line.startswith("warning")
    }
    return printed, warnings


def development_warnings(curve: list[dict[str, Any]], c_max: int) -> set[str]:
    """The checker warnings a development curve must draw: too short for
    its points' durations and for a steady-state window; and, only when the
    numbers the curve recorded say so, the Offline ordering (the Offline
    burst shares two cores with the simulated endpoint, so on a busy machine
    it can measure below 0.98 x the C_max point, spec §5.7.2)."""
    expected = {"point-duration", "steady-state-basis"}
    offline_tps = curve[-1]["system_tps"]
    c_max_tps = next(p["system_tps"] for p in curve if p["concurrency"] == c_max)
    if offline_tps < 0.98 * c_max_tps:
        expected.add("offline-ordering")
    return expected
