"""The submission bundle: a curve's run folders laid out as the checker reads them.

Spec §3.9 (checker ``layout.py``; the official builder,
``endpoints_submission_cli/submissions/builder.py``)::

    <out_dir>/<org>/pending-submission-id/
    ├── src/<implementation>/README.md     the SUT: how to build it and reproduce a point
    ├── docs/
    └── results/<System>/
        ├── system_power.json              per system (Standardized division)
        └── <model_name>/r<N>/
            ├── point.yaml  system_desc.json           written from the system file
            ├── result_summary.json  config.yaml       copied from the run folder
            ├── accuracy_results.json                  at accuracy points, and at every
            │                                          agentic point (its inline score)
            └── report.txt  sample_idx_map.json  metrics/final_snapshot.json

``<org>`` and ``<System>`` are made from the user's ``submitter_org_names`` and
``system_name`` by :func:`~mlpe_fast.submission.system.directory_name`, so no name can
climb out of its folder; ``<model_name>`` is one of the canonical benchmark names.
PRISM assigns the submission id when the bundle is uploaded, so it is built under
the placeholder the official builder uses.  ``tps_utilization`` is each point's
``system_tps`` over the curve's highest (spec §3.7).

Nothing is written outside ``out_dir``: every folder and file is resolved (symbolic
links followed) and refused unless it lies inside it, and everything is read and
checked before the first byte is written, so a mistake leaves no half-built bundle.
"""

from __future__ import annotations

import importlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._version import __version__
from ..artifacts.run_folder import read_config_yaml
from ..errors import UsageError
from .disclosure import point_yaml, system_desc_json, system_power_json
from .run_facts import RunFacts, read_run
from .system import SystemDescription

__all__ = ("PENDING_SUBMISSION_ID", "PointFolder", "build_bundle")

#: The official builder's name for a submission not yet given an id by PRISM.
PENDING_SUBMISSION_ID = "pending-submission-id"

#: Run-folder files copied into the point folder: (source, destination, required).
_COPIED: tuple[tuple[str, str, bool], ...] = (
    ("performance/result_summary.json", "result_summary.json", True),
    ("config.yaml", "config.yaml", True),
    ("accuracy/accuracy_results.json", "accuracy_results.json", False),
    ("report.txt", "report.txt", False),
    ("sample_idx_map.json", "sample_idx_map.json", False),
    ("metrics/final_snapshot.json", "metrics/final_snapshot.json", False),
)


@dataclass(frozen=True)
class PointFolder:
    """One point of the curve: its run folder and what the run folder cannot say.

    Attributes:
        path: the run folder (``mlpe-fast run --report-dir``).
        concurrency: the point's concurrency; a dedicated Offline run's is the
            dataset size (spec §2.3).
        region: its region (:data:`mlpe_fast.submission.disclosure.REGIONS`).
        offline: ``dedicated``, ``elected`` or ``none``.
        steady_state: the point's ``steady_state`` block, None when it has none.
    """

    path: Path
    concurrency: int
    region: str
    offline: str = "none"
    steady_state: Mapping[str, Any] | None = None


class _Writer:
    """Writes only inside ``root`` (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def inside(self, path: Path) -> Path:
        resolved = path.resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise UsageError(f"{path}: resolves outside {self.root}; not writing there")
        return path

    def mkdir(self, path: Path) -> None:
        self.inside(path).mkdir(parents=True, exist_ok=True)
        self.inside(path)  # a link that appeared meanwhile

    def write(self, path: Path, data: bytes) -> None:
        self.mkdir(path.parent)
        self.inside(path).write_bytes(data)

    def copy_tree(self, source: Path, target: Path) -> None:
        self.mkdir(target.parent)
        self.inside(target)
        # Links are followed: their content is copied in, nothing links out.
        shutil.copytree(
            source,
            target,
            symlinks=False,
            ignore=shutil.ignore_patterns(".git", "__pycache__"),
        )


@dataclass(frozen=True)
class _Planned:
    """One point, read and checked, ready to write."""

    point: PointFolder
    facts: RunFacts
    point_yaml: dict[str, Any]
    system_desc: dict[str, Any]


def _has_readme(folder: Path) -> bool:
    return any(p.is_file() and p.name.lower() == "readme.md" for p in folder.iterdir())


def _plan(points: Sequence[PointFolder], system: SystemDescription) -> list[_Planned]:
    if not points:
        raise UsageError("no points to bundle")
    seen: dict[int, Path] = {}
    for point in points:
        if point.concurrency in seen:
            raise UsageError(
                f"r{point.concurrency}: two run folders ({seen[point.concurrency]} and "
                f"{point.path}); a point has one (use --mode both for its accuracy run)"
            )
        seen[point.concurrency] = point.path
    facts = [read_run(point.path) for point in points]
    for point, fact in zip(points, facts, strict=True):
        if (
            fact.load_pattern in ("concurrency", "agentic_inference")
            and fact.target_concurrency is not None
            and fact.target_concurrency != point.concurrency
        ):
            raise UsageError(
                f"{point.path}: ran at concurrency {fact.target_concurrency}, "
                f"not {point.concurrency}"
            )
    max_tps = max(fact.system_tps for fact in facts)
    if max_tps <= 0:
        raise UsageError("no point of the curve produced any output tokens")
    planned = []
    for point, fact in zip(points, facts, strict=True):
        planned.append(
            _Planned(
                point=point,
                facts=fact,
                point_yaml=point_yaml(
                    system,
                    concurrency=point.concurrency,
                    region=point.region,
                    offline=point.offline,
                    steady_state=point.steady_state,
                    warmup=fact.warmup,
                    load_pattern=fact.load_pattern,
                    run_config=fact.run_config,
                    with_accuracy=fact.has_accuracy,
                    agentic=fact.agentic,
                ),
                system_desc=system_desc_json(system, tps_utilization=fact.system_tps / max_tps),
            )
        )
    for item in planned:
        # The duration the point was run for (spec §3.6, informational): a
        # development run's shortened duration is visible in its point.yaml.
        settings = read_config_yaml(item.point.path).get("settings") or {}
        runtime = settings.get("runtime") if isinstance(settings, dict) else None
        duration_ms = runtime.get("min_duration_ms") if isinstance(runtime, dict) else None
        if isinstance(duration_ms, int) and duration_ms > 0:
            item.point_yaml["runtime_settings"]["min_duration_ms"] = duration_ms
        # The day it was measured: not in the checker's schema (which keeps
        # extra keys), read by mlperf-viz as the point's date (point.yaml
        # ``run_date``, else system_desc.json's).
        item.point_yaml["run_date"] = item.facts.run_date
    return planned


def _yaml_bytes(data: Mapping[str, Any]) -> bytes:
    yaml: Any = importlib.import_module("yaml")  # untyped; see mlpe_fast.config.yaml_file._yaml
    head = f"# point.yaml (MLPerf Endpoints spec §3.6), written by mlpe-fast {__version__}\n"
    body: str = yaml.safe_dump(
        dict(data), sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    return (head + body).encode("utf-8")


def _json_bytes(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _src_readme(system: SystemDescription) -> bytes:
    return f"""\
# {system.implementation}

The results under `results/` were measured with mlpe-fast {__version__}, a load
generator for MLPerf Endpoints. Every point folder holds the configuration that point
ran with (`config.yaml`); `mlpe-fast run -c config.yaml` repeats it against the same
endpoint.

How to build and start the system under test is not described here yet: build the
bundle again with a source folder whose README.md documents it.
""".encode()


def _docs_readme(system: SystemDescription) -> bytes:
    return f"""\
# Disclosures

- Load generator: mlpe-fast {__version__}; token counts, TTFT and TPOT are measured
  client-side as the MLPerf Endpoints rules define them.
- Seeds: seed set {system.seeds.id}; target cohort {system.target_cohort}.
- `point.yaml`, `system_desc.json` and `system_power.json` were written by mlpe-fast
  from the submitter's system file and each point's run folder.
""".encode()


def build_bundle(
    points: Sequence[PointFolder],
    system: SystemDescription,
    out_dir: str | Path,
    *,
    src_dir: str | Path | None = None,
    docs_dir: str | Path | None = None,
    overwrite: bool = False,
) -> Path:
    """Assembles the submission bundle of one curve (module docstring).

    Args:
        points: every point of the curve, the Offline one included.
        system: the validated system file.
        out_dir: the folder the ``<org>/`` folder goes into.
        src_dir: the implementation folder (with its README.md) copied to
            ``src/<implementation>/``; None writes a README that says it is missing.
        docs_dir: a folder copied to ``docs/``; None writes a short disclosure note.
        overwrite: replace an existing bundle of the same organisation.

    Returns:
        The submission folder, ``<out_dir>/<org>/pending-submission-id``.

    Raises:
        UsageError: a point's run folder is incomplete or disagrees with its point
            (:func:`~mlpe_fast.submission.run_facts.read_run`,
            :func:`~mlpe_fast.submission.disclosure.point_yaml`), a source folder is
            missing or has no README.md, the bundle exists and ``overwrite`` is off,
            or a path would resolve outside ``out_dir``.
    """
    source = Path(src_dir) if src_dir is not None else None
    docs = Path(docs_dir) if docs_dir is not None else None
    if source is not None and (not source.is_dir() or not _has_readme(source)):
        raise UsageError(f"{source}: expected a folder with the implementation's README.md")
    if docs is not None and not docs.is_dir():
        raise UsageError(f"{docs}: no such docs folder")
    planned = _plan(points, system)
    power = system_power_json(system) if system.power is not None else None

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"{out}: cannot create: {error.strerror or error}") from None
    writer = _Writer(out)
    submission = out / system.org_dir / PENDING_SUBMISSION_ID
    writer.inside(submission)
    if submission.is_symlink() or submission.exists():
        if not overwrite:
            raise UsageError(f"{submission}: already exists; remove it or overwrite it")
        if submission.is_symlink() or not submission.is_dir():
            raise UsageError(f"{submission}: not a folder; not replacing it")
        shutil.rmtree(submission)

    implementation = submission / "src" / system.implementation
    if source is not None:
        writer.copy_tree(source, implementation)
    else:
        writer.write(implementation / "README.md", _src_readme(system))
    if docs is not None:
        writer.copy_tree(docs, submission / "docs")
    else:
        writer.write(submission / "docs" / "README.md", _docs_readme(system))

    system_folder = submission / "results" / system.system_dir
    if power is not None:
        writer.write(system_folder / "system_power.json", _json_bytes(power))
    model_folder = system_folder / system.model.model_name
    for plan in planned:
        folder = model_folder / f"r{plan.point.concurrency}"
        writer.write(folder / "point.yaml", _yaml_bytes(plan.point_yaml))
        writer.write(folder / "system_desc.json", _json_bytes(plan.system_desc))
        for relative, name, required in _COPIED:
            origin = plan.facts.path / relative
            if not origin.is_file():
                if required:  # read_run found it; it went away since
                    raise UsageError(f"{origin}: missing")
                continue
            writer.write(folder / name, origin.read_bytes())
    return submission
