"""The three authored disclosures of a point, as dicts: ``point.yaml``,
``system_desc.json`` and ``system_power.json`` (spec §3.6-§3.8).

Each is the system file's facts (:mod:`mlpe_fast.submission.system`) plus what only
the point knows, in the form submission checker 1.5.3.0 reads
(``models/file/point_config.py``, ``system.py``, ``system_power.py``):

* ``point.yaml``: the twelve disclosure fields ``point-disclosure-complete`` wants
  non-empty; ``shared_src``/``shared_docs`` as root-relative pointers to
  ``src/<implementation>`` and ``docs`` (``shared-path-resolution``); the bound seed
  set, its three seeds under ``runtime_settings.runtime`` and ``target_cohort``
  (``seed-runtime-match``, ``seed-set-adoption``); the point's ``region``,
  ``offline`` kind and load pattern; the required ``warmup`` block (the "no warmup"
  form is all zeros with ``concurrency: 0``); the ``steady_state`` block when the
  point has one (spec §1.4: nothing else writes it; agentic points have none); and
  an agentic point's ``runtime_settings.agentic_inference`` (its trajectory budget and
  the flags the rules fix: salt, tool delays, ``stop_issuing_on_first_user_complete``;
  ``docs/agentic.md`` §5.1 item 13).
* ``system_desc.json``: identical at every point but for ``tps_utilization``
  (``system-description-consistency``), which is the point's ``system_tps`` over the
  curve's highest (``tps-utilization``).
* ``system_power.json``: the Appendix E descriptor with the ``computed`` block and
  ``provisioned_power_kw`` the checker recomputes (:mod:`mlpe_fast.submission.power`).

Seeds are not copied from the seed set but checked against it: ``point.yaml`` says
the run's RNGs were seeded from set A, so a run that used other seeds is refused
here rather than disclosed as if it had not.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import UsageError
from .power import provisioned_power
from .system import SystemDescription

__all__ = (
    "OFFLINE_KINDS",
    "REGIONS",
    "WarmupRun",
    "point_yaml",
    "system_desc_json",
    "system_power_json",
)

#: ``point.yaml: region`` values the checker accepts (spec §2.2, §3.6); a dedicated
#: Offline run takes ``submitters_choice``.
REGIONS: tuple[str, ...] = (
    "low_latency",
    "low_concurrency",
    "med_concurrency",
    "high_concurrency",
    "margin",
    "submitters_choice",
)

#: ``point.yaml: offline`` values (spec §2.3).
OFFLINE_KINDS: tuple[str, ...] = ("dedicated", "elected", "none")

_NO_WARMUP_SOURCE = "none: no warmup requests were sent"

#: The agentic settings a reviewer checks (``docs/agentic.md`` §5.1 item 13: salt and
#: tool delays on, ``stop_issuing_on_first_user_complete`` off, a budget of k x 613).
_AGENTIC_KEYS = (
    "num_trajectories_to_issue",
    "enable_salt",
    "inject_tool_delay",
    "stop_issuing_on_first_user_complete",
    "turn_timeout_s",
)


@dataclass(frozen=True)
class WarmupRun:
    """What a point's warmup did, measured from its run folder (spec §2.4).

    Attributes:
        duration_s: first warmup request to the start of measurement.
        requests_issued: warmup queries sent.
        requests_completed: warmup queries answered without error.
        concurrency: the warmup's concurrency.
        salted: whether warmup queries carried a salt.
    """

    duration_s: float
    requests_issued: int
    requests_completed: int
    concurrency: int
    salted: bool


def _plain(value: Any, key: str) -> Any:
    """``value`` as plain YAML/JSON data (numpy scalars become Python numbers)."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(item, f"{key}[{i}]") for i, item in enumerate(value)]
    raise ValueError(f"{key}: {type(value).__name__} is not YAML data")


def _run_seed(run_config: Mapping[str, Any] | None, name: str, where: str) -> int:
    value = (run_config or {}).get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(
            f"{where}: the run records no {name}, so its seeds cannot be shown to be "
            f"the bound seed set's"
        )
    return value


def _warmup_block(system: SystemDescription, warmup: WarmupRun | None) -> dict[str, Any]:
    described = system.warmup
    if warmup is None or (warmup.requests_issued == 0 and warmup.duration_s == 0):
        # The "no warmup" declaration: all figures zero, concurrency 0 (spec §3.6).
        block: dict[str, Any] = {
            "duration_s": 0,
            "requests_issued": 0,
            "requests_completed": 0,
            "concurrency": 0,
            "data_source": _NO_WARMUP_SOURCE,
            "initialization_steps": list(described.initialization_steps),
        }
        return block
    salted = "salted" if warmup.salted else "unsalted"
    block = {
        "duration_s": round(warmup.duration_s, 3),
        "requests_issued": warmup.requests_issued,
        "requests_completed": warmup.requests_completed,
        "concurrency": warmup.concurrency,
        "data_source": described.data_source
        or f"samples of the performance dataset, {salted} (mlpe-fast warmup)",
        "initialization_steps": list(described.initialization_steps),
        "logs_retained": described.logs_retained,
    }
    if described.link_logs:
        block["link_logs"] = described.link_logs
    return block


def point_yaml(
    system: SystemDescription,
    *,
    concurrency: int,
    region: str,
    offline: str,
    steady_state: Mapping[str, Any] | None,
    warmup: WarmupRun | None,
    load_pattern: str,
    run_config: Mapping[str, Any] | None,
    with_accuracy: bool = False,
    agentic: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``point.yaml`` mapping of one point (module docstring; spec §3.6).

    Args:
        system: the validated system file.
        concurrency: the point's concurrency (a dedicated Offline run: the dataset size).
        region: the point's region (:data:`REGIONS`).
        offline: ``dedicated``, ``elected`` or ``none`` (spec §2.3).
        steady_state: the steady-state block (spec §1.4), or None for none.
        warmup: the measured warmup, or None when the point had none.
        load_pattern: the run's load pattern (``concurrency``; ``max_throughput``
            for a dedicated Offline run), written as it was run.
        run_config: the run's ``run_config`` (``result_summary.json``), whose
            ``scheduler_random_seed`` and ``dataloader_random_seed`` must be the
            bound seed set's.
        with_accuracy: the point also carries an accuracy run (``dataset_type``).
        agentic: an agentic point's ``agentic_inference`` settings as it ran.

    Raises:
        UsageError: a bad concurrency, region or offline kind, or seeds that are not
            the bound set's.
    """
    where = f"r{concurrency}"
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise UsageError(f"concurrency: expected a positive integer, got {concurrency!r}")
    if region not in REGIONS:
        raise UsageError(f"{where}: region {region!r} is not one of {', '.join(REGIONS)}")
    if offline not in OFFLINE_KINDS:
        raise UsageError(f"{where}: offline {offline!r} is not one of {', '.join(OFFLINE_KINDS)}")
    if not load_pattern:
        raise UsageError(f"{where}: the run's load pattern is unknown")
    seeds = system.seeds
    for name, expected in (
        ("scheduler_random_seed", seeds.scheduler_rng_seed),
        ("dataloader_random_seed", seeds.sample_index_rng_seed),
    ):
        used = _run_seed(run_config, name, where)
        if used != expected:
            raise UsageError(
                f"{where}: the run used {name} {used}, not seed set {seeds.id}'s {expected}; "
                f"rerun the point with the set's seeds"
            )
    model = system.model
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "region": region,
        "offline": offline,
        "dataset": model.dataset,
        "division": system.division,
        "max_supported_concurrency": system.max_supported_concurrency,
        "model_name": model.model_name,
        "model_precision": model.model_precision,
        "link_to_model": model.link_to_model,
    }
    if model.link_to_model_transformation:
        out["link_to_model_transformation"] = model.link_to_model_transformation
    if model.model_notes:
        out["model_notes"] = model.model_notes
    out |= {
        "dataset_name": model.dataset_name,
        "dataset_type": "Accuracy + Performance" if with_accuracy else "Performance",
        "dataset_link": model.dataset_link,
        "shared_src": f"src/{system.implementation}",
        "shared_docs": "docs",
        "seed_set": seeds.id,
        "target_cohort": system.target_cohort,
    }
    runtime_settings: dict[str, Any] = {
        "load_pattern": load_pattern,
        # mlpe-fast reads every streamed chunk itself; nothing is coalesced client-side.
        "stream_all_chunks": True,
        "runtime": {
            "scheduler_rng_seed": seeds.scheduler_rng_seed,
            "sample_index_rng_seed": seeds.sample_index_rng_seed,
            "model_seed": seeds.model_seed,
        },
    }
    if agentic is not None:
        runtime_settings["agentic_inference"] = {
            key: _plain(agentic[key], f"agentic_inference.{key}")
            for key in _AGENTIC_KEYS
            if agentic.get(key) is not None
        }
    block = _warmup_block(system, warmup)
    if warmup is not None and block["requests_issued"]:
        runtime_settings["warmup"] = {"salt": warmup.salted}
    out["runtime_settings"] = runtime_settings
    out["warmup"] = block
    if steady_state is not None:
        out["steady_state"] = _plain(steady_state, "steady_state")
    return out


def _text(value: str | int) -> str:
    return value if isinstance(value, str) else str(value)


def system_desc_json(system: SystemDescription, *, tps_utilization: float) -> dict[str, Any]:
    """The ``system_desc.json`` mapping of one point (spec §3.7).

    Args:
        tps_utilization: the point's ``system_tps`` over the highest of its curve.

    Raises:
        UsageError: ``tps_utilization`` outside [0, 1].
    """
    if not 0.0 <= tps_utilization <= 1.0:
        raise UsageError(f"tps_utilization: expected 0..1, got {tps_utilization!r}")
    desc = system.system_desc
    out: dict[str, Any] = {
        "division": system.division,
        "system_name": system.system_name,
        "shortened_system_name": system.shortened_system_name.strip(),
        "system_availability_status": system.availability,
    }
    if system.availability_url:
        out["availability_url"] = system.availability_url
    if system.target_availability_date:
        out["target_availability_date"] = system.target_availability_date
    out |= {
        "submitter_org_names": system.submitter_org_names,
        "system_size": _text(desc.system_size),
        "system_node_ensemble_count": desc.system_node_ensemble_count,
        "system_node_ensemble_total": desc.system_node_ensemble_total,
        "max_supported_concurrency": system.max_supported_concurrency,
    }
    if system.c_min_override is not None:
        out["c_min_override"] = system.c_min_override
    optional = {
        "endpoint_url": desc.endpoint_url,
        "serving_framework": desc.serving_framework,
    }
    out |= {key: value for key, value in optional.items() if value is not None}
    out["cooling"] = system.cooling
    nodes = []
    for node in desc.node_types:
        entry = {
            key: value
            for key in node.__struct_fields__
            if (value := getattr(node, key)) is not None and key != "accelerator_info"
        }
        entry["host_network_card_count"] = _text(node.host_network_card_count)
        entry["accelerator_info"] = [
            {
                key: value
                for key in info.__struct_fields__
                if (value := getattr(info, key)) is not None
            }
            for info in node.accelerator_info
        ]
        nodes.append(entry)
    out["node_types"] = nodes
    if desc.node_config is not None:
        out["node_config"] = desc.node_config
    out |= {
        "disaggregated": desc.disaggregated,
        "expert_parallel": desc.expert_parallel,
        "tensor_parallel": desc.tensor_parallel,
        "pipeline_parallel": desc.pipeline_parallel,
        "data_parallel": desc.data_parallel,
    }
    for key in ("batch", "config_summary", "config_summary_notes"):
        if (value := getattr(desc, key)) is not None:
            out[key] = value
    out["tps_utilization"] = tps_utilization
    return out


def system_power_json(system: SystemDescription) -> dict[str, Any]:
    """The ``system_power.json`` mapping of the system (spec §3.8, Appendix E).

    Raises:
        UsageError: the system file has no ``power`` section.
    """
    power = system.power
    if power is None:
        raise UsageError("power: the system file has no power section (spec §3.8)")
    figures = provisioned_power(power, system.cooling)
    out: dict[str, Any] = {
        "system_desc_id": system.system_dir,
        "cooling": system.cooling,
        "node_sets": _without_nulls(power.node_sets),
        "scale_out": _without_nulls(power.scale_out),
    }
    if power.declared_provisioned_power is not None:
        out["declared_provisioned_power"] = _without_nulls(power.declared_provisioned_power)
    out |= {
        "computed": figures.computed_block(),
        "provisioned_power_kw": figures.provisioned_power_kw,
        "mlc_estimated_power": bool(figures.estimated),
    }
    if power.notes:
        out["notes"] = power.notes
    return out


def _without_nulls(value: Any) -> Any:
    """msgspec data as builtins with unset (None) fields left out."""

    def strip(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: strip(v) for k, v in item.items() if v is not None}
        if isinstance(item, list):
            return [strip(v) for v in item]
        return item

    return strip(msgspec.to_builtins(value))
