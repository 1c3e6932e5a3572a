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
