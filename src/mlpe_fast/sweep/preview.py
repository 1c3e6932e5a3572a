"""What a run is about to measure, said before its first request: a single
point's one-line plan, the sizes of a curve's points (:func:`size_text`),
and the datasets ``--dry-run`` loads so that a bad file fails as the run
would (``mlpe-fast run --dry-run``).

A point is sized by a duration (it takes at least that long: it issues for
the duration, on to the end of the dataset pass under way for the points
of a curve, then waits for the requests in flight), by a sample count (how
long that takes is the endpoint's business), or, for an agentic point, by
its trajectory budget.
"""

from __future__ import annotations

import sys
from typing import TextIO

from ..config import RunConfig
from ..errors import UsageError
from ..load.agentic import load_agentic
from ..load.dataset import load_dataset

__all__ = (
    "announce_point",
    "harmony_line",
    "load_datasets",
    "point_line",
    "size_text",
    "span_text",
)


def span_text(seconds: float) -> str:
    """``seconds`` for a reader: ``0.3 s``, ``90 s``, ``20m``, ``1h 10m``."""
    if seconds < 120:
        return f"{seconds:g} s"
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes}m"
    return f"{hours}h {minutes}m" if minutes else f"{hours}h"


def _budget(config: RunConfig, trajectories: int | None) -> int | None:
    datasets = config.performance_datasets
    settings = datasets[0].agentic if datasets else None
    budget = settings.num_trajectories_to_issue if settings is not None else None
    return trajectories if budget is None else budget


def size_text(config: RunConfig, dataset_size: int | None) -> tuple[str, float | None]:
    """What sizes the point ``config`` measures, and the least time it takes
    when a duration sizes it (None when a count does); ``--max-duration``
    caps either.

    ``dataset_size``: the performance dataset's size (an agentic run's
    trajectory count), None when not known (not loaded).
    """
    text, least = _uncapped_size(config, dataset_size)
    cap = config.max_duration_s
    if cap is None:
        return text, least
    return f"{text}, issuing for at most {span_text(cap)}", None if least is None else min(
        least, cap
    )


def _uncapped_size(config: RunConfig, dataset_size: int | None) -> tuple[str, float | None]:
    if config.load_pattern == "agentic_inference":
        budget = _budget(config, dataset_size)
        return ("the dataset's trajectories" if budget is None else f"{budget} trajectories"), None
    samples, duration = config.num_samples, config.duration_s
    if config.load_pattern == "offline" and samples is None:
        samples = dataset_size  # the whole dataset at once
        duration = None
    if samples is not None and duration is not None:
        return f"{samples} samples or {duration:g} s, whichever comes first", None
    if samples is not None:
        return f"{samples} samples", None
    if duration is not None:
        if config.min_passes and config.load_pattern != "offline":
            passes = f"at least {config.min_passes} dataset passes"
            if dataset_size is not None:
                passes += f" ({config.min_passes * dataset_size:,} samples)"
            return f"{duration:g} s or more and {passes}", duration
        return f"{duration:g} s or more", duration
    if dataset_size is None:
        return "one dataset pass", None
    return f"{dataset_size} samples (one dataset pass)", None


def point_line(config: RunConfig, dataset_size: int | None) -> str:
    """The one-line plan of a single point (not a curve)."""
    pattern = config.load_pattern
    if pattern == "concurrency":
        load = f"concurrency {config.concurrency}"
    elif pattern == "poisson":
        load = f"poisson at {config.target_qps:g} queries/s"
    elif pattern == "offline":
        load = "Offline (max_throughput: the samples all at once)"
    else:
        load = f"agentic_inference at concurrency {config.concurrency}"
    names = ", ".join(spec.display_name for spec in config.accuracy_datasets)
    if config.mode == "acc":
        what = f"accuracy only ({names})"
    else:
        what = f"{load}, {size_text(config, dataset_size)[0]}"
        if config.mode == "both":
            what += f", then accuracy ({names})"
    where = f", into {config.report_dir}" if config.report_dir else ""
    return f"plan: one point: {what}{where}"


def harmony_line(config: RunConfig) -> str | None:
    """The plan's line on Harmony prompts (``load/harmony.py``): which
    datasets are encoded, at which effort, with which date; None when none
    is."""
    encoded = [d for d in config.datasets if d.harmony is not None]
    if not encoded:
        return None
    by_effort: dict[str, list[str]] = {}
    for spec in encoded:
        assert spec.harmony is not None
        by_effort.setdefault(spec.harmony.reasoning_effort, []).append(spec.display_name)
    efforts = "; ".join(f"{', '.join(names)} at effort {e}" for e, names in by_effort.items())
    return f"prompts: Harmony ids dated {config.harmony_date} ({efforts})"


def _needs_size(config: RunConfig) -> bool:
    if config.mode == "acc":
        return False
    if config.load_pattern == "agentic_inference":
        return _budget(config, None) is None
    return config.num_samples is None and (
        config.load_pattern == "offline" or config.duration_s is None
    )


def announce_point(config: RunConfig, *, out: TextIO | None = None) -> None:
    """Prints the one-line plan of a single point; with ``--dry-run`` after
    loading every dataset the run would (:func:`load_datasets`), else after
    loading the performance dataset only when its size sizes the point."""
    if config.dry_run or _needs_size(config):
        size = load_datasets(config, accuracy=config.dry_run)
    else:
        size = None
    out = sys.stdout if out is None else out
    print(point_line(config, size), file=out)
    if (harmony := harmony_line(config)) is not None:
        print(harmony, file=out)


def load_datasets(config: RunConfig, *, accuracy: bool = True) -> int | None:
    """Loads the datasets the run would load (a bad file fails as it would;
    ``accuracy`` False: the performance dataset only); returns the
    performance dataset's size, an agentic run's trajectory count, or None
    (an accuracy-only run).

    Raises:
        UsageError: no performance dataset where one is needed, or a file
            that cannot be read.
    """
    size = None
    if config.mode != "acc":
        datasets = config.performance_datasets
        if not datasets:
            raise UsageError("no performance dataset: pass --dataset PATH[,parser.prompt=COLUMN]")
        if config.load_pattern == "agentic_inference":
            size = len(load_agentic(datasets[0].path).trajectories)
        else:
            size = len(load_dataset(datasets[0]))
    if accuracy and config.mode != "perf":
        for spec in config.accuracy_datasets:
            load_dataset(spec)
    return size
