"""How big a point's performance phase is and where it runs: this process
alone, several engine processes (``scale/local.py``) or actors on a Ray
cluster (``scale/ray_cluster.py``); decided before anything is written."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec

from ..config import RunConfig
from ..errors import UsageError
from ..load.dataset import Dataset
from ..scale.driver import EngineGroup
from ..scale.engine_process import EngineSetup
from ..scale.leases import LeaseBook
from ..scale.local import LocalEngines
from ..scale.split import engines_for

__all__ = ("EnginePlan", "engine_plan", "request_count")


def request_count(config: RunConfig, dataset_size: int) -> int | None:
    """How many requests the performance phase issues (reference §3.2):
    the given count; the whole dataset for Offline; none (a duration) else."""
    if config.num_samples is not None:
        return config.num_samples
    if config.load_pattern == "offline" or config.duration_s is None:
        return dataset_size
    return None


class EnginePlan(msgspec.Struct):
    """The engines a point's performance phase runs on: how many, and how
    they are started (processes here, or actors on a Ray cluster)."""

    engines: int
    make_group: Callable[[list[EngineSetup], LeaseBook], EngineGroup]
    cluster: Any = None  # a RayCluster to close after the point

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()


def engine_plan(
    config: RunConfig, dataset: Dataset | None, ray_clocks: dict[int, Any] | None = None
) -> EnginePlan | None:
    """The engines of the performance phase (None: this process alone).

    Raises:
        UsageError: engines asked for a load they cannot share, or Ray is
            missing or unreachable.
    """
    if dataset is None or (config.engines == 1 and config.ray is None):
        return None
    if config.load_pattern == "poisson":
        raise UsageError(
            "--engines: a Poisson point runs on one engine (its arrival times come from "
            "one seeded stream); drop --engines or use a concurrency point"
        )
    if config.load_pattern == "offline":
        load = request_count(config, len(dataset)) or len(dataset)
    else:
        load = config.concurrency
    if config.ray is None:
        engines = engines_for(load, config.engines, config.min_streams_per_engine)
        return None if engines == 1 else EnginePlan(engines, LocalEngines)
    from ..scale.ray_cluster import RayCluster, RayEngines

    cluster = RayCluster(config.ray, clocks=ray_clocks)
    try:
        available = cluster.engines_available(config.engines)
        engines = engines_for(load, available, config.min_streams_per_engine)
        nodes = cluster.assignment(engines, config.engines)
    except BaseException:
        cluster.close()
        raise
    return EnginePlan(engines, functools.partial(RayEngines, cluster=cluster, nodes=nodes), cluster)
