"""Provisioned power: the ``power:`` inputs of the system file and their arithmetic.

``system_power.json`` (spec §3.8, the rules' Appendix E) records how a system's
provisioned power was established, per set of identical nodes, with a public source
for every figure, and the submission checker recomputes the total from it
(``submission_checker/models/file/system_power.py``, ``SystemPower.compute``): a
``computed`` block or ``provisioned_power_kw`` that disagrees with its own figures is
an error (``power-descriptor``).  So the arithmetic below follows the checker's step
for step, in the same order of float operations:

* a ``component_sum`` node is ``CPU + accelerator + scale-up`` (or a combined
  CPU-and-accelerator figure + scale-up); its set adds ``nodes x node``, plus the
  counted scale-out NICs of each node, to the *major* components;
* ``other = overhead x major``, the overhead being 0.50 for air and 0.30 for liquid
  cooling;
* ``published_system`` sets add ``nodes x published node power`` and
  ``node_scaling`` sets ``P_rack x nodes / nodes_in_published_rack``, both outside
  the overhead base, as do scale-out switches;
* ``total = major + other + published + switches``; ``provisioned_power_kw`` is the
  total in kW rounded to 2 decimals, unless ``declared_provisioned_power`` gives it.

Where the checker would fill an absent figure from the rules' Appendix D defaults
(and tag the result "MLC Estimated Power"), mlpe-fast asks for the figure instead: an
Appendix D value is given explicitly as ``source_type: mlc_default`` with ``source:
D.1`` ... ``D.4``, so every number in the file is one the submitter wrote down.
Everything the checker would reject is a :class:`~mlpe_fast.errors.UsageError` here,
one line naming the key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from ..errors import UsageError

__all__ = (
    "OVERHEAD_BY_COOLING",
    "Accelerator",
    "Components",
    "Cpu",
    "NodeSet",
    "Nics",
    "PowerFigures",
    "PowerInputs",
    "ScaleOut",
    "ScaleUpNetwork",
    "SourcedValue",
    "Switch",
    "provisioned_power",
)

Cooling = Literal["air", "liquid"]

#: §4.5.2's overhead fraction by cooling (spec §3.8).
OVERHEAD_BY_COOLING: dict[str, float] = {"air": 0.50, "liquid": 0.30}

#: Appendix D subsections an ``mlc_default`` value may cite; it is its own reference.
_APPENDIX_D = ("D.1", "D.2", "D.3", "D.4")

_NonNegative = Annotated[float, msgspec.Meta(ge=0)]
_Count = Annotated[int, msgspec.Meta(ge=0)]
_Positive = Annotated[int, msgspec.Meta(gt=0)]


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are mistakes: a misspelt key would silently lose a figure."""


class SourcedValue(_Strict, frozen=True, kw_only=True):
    """A figure and the public reference behind it (Appendix E.1).

    Exactly one of ``value_w``, ``value_kw`` (power) or ``value_pj`` (energy per bit).
    """

    value_w: _NonNegative | None = None
    value_kw: _NonNegative | None = None
    value_pj: _NonNegative | None = None
    source_type: Literal["vendor_spec", "publication", "public_statement", "mlc_default"]
    source: str

    @property
    def watts(self) -> float | None:
        if self.value_w is not None:
            return self.value_w
        if self.value_kw is not None:
            return self.value_kw * 1000.0
        return None


class Cpu(_Strict, frozen=True, kw_only=True):
    model: str | None = None
    count_per_node: _Count
    tdp_per_unit: SourcedValue | None = None


class Accelerator(_Strict, frozen=True, kw_only=True):
    model: str | None = None
    count_per_node: _Count
    tdp_per_unit: SourcedValue | None = None
    below_rated_tdp: dict[str, Any] | None = None


class ScaleUpNetwork(_Strict, frozen=True, kw_only=True):
    method: Literal["declared_tdp", "bandwidth_estimate", "none"]
    switch_count: _Count | None = None
    tdp_per_switch: SourcedValue | None = None
    aggregate_bandwidth_tbps: _NonNegative | None = None
    energy_per_bit_pj: SourcedValue | None = None


class Components(_Strict, frozen=True, kw_only=True):
    cpu: Cpu | None = None
    accelerator: Accelerator | None = None
    combined_cpu_accelerator: SourcedValue | None = None
    scale_up_network: ScaleUpNetwork | None = None


class NodeSet(_Strict, frozen=True, kw_only=True):
    """One set of identical nodes (Appendix E.3)."""

    node_set_id: int
    system_node_ensemble_id: int
    nodes_provisioned: _Positive
    power_method: Literal["component_sum", "published_system", "node_scaling"]
    published_power: SourcedValue | None = None
    nodes_in_published_rack: int | None = None
    components: Components | None = None
    notes: str | None = None


class Nics(_Strict, frozen=True, kw_only=True):
    count_per_node: _Count
    bandwidth_per_nic_gbps: _NonNegative
    counted: bool
    tdp_per_nic: SourcedValue | None = None
    excluded_from_published_power: str | None = None


class Switch(_Strict, frozen=True, kw_only=True):
    model: str
    count: _Positive
    bandwidth_tbps: _NonNegative
    power_per_switch: SourcedValue | None = None


class ScaleOut(_Strict, frozen=True, kw_only=True):
    """The scale-out fabric (Appendix E.4); ``present: false`` for one node."""

    present: bool
    cabling: Literal["passive", "active_optical"] | None = None
    required_bandwidth_tbps: _NonNegative | None = None
    nics: Nics | None = None
    switches: list[Switch] | None = None


class PowerInputs(_Strict, frozen=True, kw_only=True):
    """The ``power:`` section of the system file: Appendix E without its derived keys.

    ``system_desc_id``, ``cooling``, ``computed``, ``provisioned_power_kw`` and
    ``mlc_estimated_power`` are filled in by mlpe-fast (cooling comes from the
    system file's top-level ``cooling``).
    """

    node_sets: list[NodeSet]
    scale_out: ScaleOut = ScaleOut(present=False)
    declared_provisioned_power: SourcedValue | None = None
    notes: str | None = None


class PowerFigures(msgspec.Struct, frozen=True, kw_only=True):
    """The derived figures of Appendix E.5, as the checker computes them."""

    major_components_w: float
    overhead_fraction: float
    other_components_w: float
    published_node_power_w: float
    scale_out_switch_power_w: float
    total_system_power_w: float
    provisioned_power_kw: float
    estimated: tuple[str, ...]

    def computed_block(self) -> dict[str, float]:
        """The ``computed`` block of ``system_power.json``."""
        return {
            "major_components_w": self.major_components_w,
            "overhead_fraction": self.overhead_fraction,
            "other_components_w": self.other_components_w,
            "published_node_power_w": self.published_node_power_w,
            "scale_out_switch_power_w": self.scale_out_switch_power_w,
            "total_system_power_w": self.total_system_power_w,
        }


class _Ledger:
    """Reads figures, checking each one's shape, and notes the Appendix D ones."""

    def __init__(self) -> None:
        self.estimated: list[str] = []

    def check(self, key: str, value: SourcedValue) -> None:
        given = [v for v in (value.value_w, value.value_kw, value.value_pj) if v is not None]
        if len(given) != 1:
            raise UsageError(f"{key}: give exactly one of value_w, value_kw, value_pj")
        if value.source_type == "mlc_default":
            if value.source not in _APPENDIX_D:
                raise UsageError(
                    f"{key}.source: an mlc_default value cites its Appendix D subsection "
                    f"({', '.join(_APPENDIX_D)}), got {value.source!r}"
                )
        elif not value.source.startswith(("https://", "http://")):
            raise UsageError(
                f"{key}.source: a {value.source_type} figure needs a public URL, "
                f"got {value.source!r}"
            )

    def watts(self, key: str, value: SourcedValue | None, *, counts: bool = True) -> float:
        """The figure at ``key`` in watts; ``counts`` says whether it reaches the total."""
        if value is None:
            raise UsageError(
                f"{key}: missing (give value_w with its source; for an Appendix D default "
                f"use source_type: mlc_default)"
            )
        self.check(key, value)
        watts = value.watts
        if watts is None:
            raise UsageError(f"{key}: a power figure needs value_w or value_kw, not value_pj")
        if counts and value.source_type == "mlc_default":
            self.estimated.append(f"{key} ({value.source} default)")
        return watts


def _scale_up_w(key: str, network: ScaleUpNetwork | None, ledger: _Ledger) -> float:
    if network is None:
        raise UsageError(f"{key}: missing (method: none when the node has no scale-up network)")
    if network.method == "none":
        return 0.0
    if network.method == "declared_tdp":
        if network.switch_count is None:
            raise UsageError(f"{key}.switch_count: required with method declared_tdp")
        return network.switch_count * ledger.watts(f"{key}.tdp_per_switch", network.tdp_per_switch)
    # bandwidth_estimate: the aggregate is read as TB/s, as the rules' worked
    # examples and the checker do (14.4 TB/s x 8 bit/B x 5 pJ/bit = 576 W).
    if network.aggregate_bandwidth_tbps is None:
        raise UsageError(f"{key}.aggregate_bandwidth_tbps: required with method bandwidth_estimate")
    energy = network.energy_per_bit_pj
    if energy is None:
        raise UsageError(f"{key}.energy_per_bit_pj: required with method bandwidth_estimate")
    ledger.check(f"{key}.energy_per_bit_pj", energy)
    if energy.value_pj is None:
        raise UsageError(f"{key}.energy_per_bit_pj: give value_pj (picojoules per bit)")
    if energy.source_type == "mlc_default":
        ledger.estimated.append(f"{key}.energy_per_bit_pj ({energy.source} default)")
    return network.aggregate_bandwidth_tbps * 8.0 * energy.value_pj


def _node_w(key: str, components: Components | None, ledger: _Ledger) -> float:
    """One ``component_sum`` node: CPU + accelerator (or combined) + scale-up, in W."""
    if components is None:
        raise UsageError(f"{key}.components: required with power_method component_sum")
    key = f"{key}.components"
    cpu, accelerator = components.cpu, components.accelerator
    parts: list[float] = []
    if components.combined_cpu_accelerator is not None:
        if (cpu is not None and cpu.tdp_per_unit is not None) or (
            accelerator is not None and accelerator.tdp_per_unit is not None
        ):
            raise UsageError(
                f"{key}: combined_cpu_accelerator replaces cpu and accelerator tdp_per_unit; "
                f"give one or the other"
            )
        parts.append(
            ledger.watts(f"{key}.combined_cpu_accelerator", components.combined_cpu_accelerator)
        )
    else:
        if cpu is None or accelerator is None:
            raise UsageError(f"{key}: give cpu and accelerator, or combined_cpu_accelerator")
        cpu_w = ledger.watts(f"{key}.cpu.tdp_per_unit", cpu.tdp_per_unit)
        accelerator_w = ledger.watts(f"{key}.accelerator.tdp_per_unit", accelerator.tdp_per_unit)
        parts.append(cpu.count_per_node * cpu_w)
        parts.append(accelerator.count_per_node * accelerator_w)
    parts.append(_scale_up_w(f"{key}.scale_up_network", components.scale_up_network, ledger))
    return sum(parts)


def _nic_w_per_node(inputs: PowerInputs, ledger: _Ledger) -> float:
    """Counted scale-out NIC watts per node; checks the fabric as the checker does."""
    fabric = inputs.scale_out
    nodes = sum(s.nodes_provisioned for s in inputs.node_sets)
    by_formula = any(s.power_method == "component_sum" for s in inputs.node_sets)
    if not fabric.present:
        joined_by_nothing = all(
            s.power_method == "component_sum"
            and s.components is not None
            and s.components.scale_up_network is not None
            and s.components.scale_up_network.method == "none"
            for s in inputs.node_sets
        )
        if nodes > 1 and joined_by_nothing:
            raise UsageError(
                f"power.scale_out.present: false, but nothing joins the {nodes} nodes "
                f"(every scale_up_network is none); describe the scale-out fabric"
            )
        return 0.0
    for name in ("cabling", "required_bandwidth_tbps", "nics", "switches"):
        if getattr(fabric, name) is None:
            raise UsageError(f"power.scale_out.{name}: required when present is true")
    assert fabric.nics is not None and fabric.switches is not None
    assert fabric.required_bandwidth_tbps is not None
    nics = fabric.nics
    nic_w = 0.0
    if nics.counted:
        if not by_formula and not nics.excluded_from_published_power:
            raise UsageError(
                "power.scale_out.nics.counted: published node figures include their NICs; "
                "set excluded_from_published_power to the evidence that they do not"
            )
        nic_w = nics.count_per_node * ledger.watts(
            "power.scale_out.nics.tdp_per_nic", nics.tdp_per_nic
        )
    elif by_formula:
        raise UsageError(
            "power.scale_out.nics.counted: must be true when a node set is component_sum "
            "(its formula has no NIC term)"
        )
    from_nics = nodes * nics.count_per_node * nics.bandwidth_per_nic_gbps / 1000.0
    if fabric.required_bandwidth_tbps < from_nics - 1e-6:
        raise UsageError(
            f"power.scale_out.required_bandwidth_tbps: {fabric.required_bandwidth_tbps} is "
            f"below the NICs' total {from_nics:g} Tb/s"
        )
    required = max(fabric.required_bandwidth_tbps, from_nics)
    offered = sum(s.count * s.bandwidth_tbps for s in fabric.switches)
    if offered < required - 1e-6:
        raise UsageError(
            f"power.scale_out.switches: offer {offered:g} Tb/s, below the required "
            f"{required:g} Tb/s"
        )
    return nic_w


def _carries_nics(inputs: PowerInputs, node_set: NodeSet) -> bool:
    nics = inputs.scale_out.nics
    if not inputs.scale_out.present or nics is None or not nics.counted:
        return False
    return node_set.power_method == "component_sum" or bool(nics.excluded_from_published_power)


def provisioned_power(inputs: PowerInputs, cooling: Cooling) -> PowerFigures:
    """The Appendix E.5 figures of ``inputs`` (module docstring).

    Raises:
        UsageError: a figure is missing or malformed, or the descriptor is one the
            checker rejects; the message names the key under ``power``.
    """
    if not inputs.node_sets:
        raise UsageError("power.node_sets: list at least one set of nodes")
    ids = [s.node_set_id for s in inputs.node_sets]
    if len(set(ids)) != len(ids):
        raise UsageError("power.node_sets: node_set_id values must be unique")
    ledger = _Ledger()
    overhead = OVERHEAD_BY_COOLING[cooling]
    major: list[float] = []
    published: list[float] = []
    for index, node_set in enumerate(inputs.node_sets):
        key = f"power.node_sets[{index}]"
        nodes = node_set.nodes_provisioned
        if node_set.power_method == "component_sum":
            major.append(nodes * _node_w(key, node_set.components, ledger))
            published.append(0.0)
            continue
        power = ledger.watts(f"{key}.published_power", node_set.published_power)
        major.append(0.0)
        if node_set.power_method == "published_system":
            published.append(nodes * power)
            continue
        rack = node_set.nodes_in_published_rack
        if rack is None or rack <= nodes:
            raise UsageError(
                f"{key}.nodes_in_published_rack: node_scaling needs the published rack's "
                f"node count, more than nodes_provisioned ({nodes})"
            )
        published.append(power * (nodes / rack))
    nic_w = _nic_w_per_node(inputs, ledger)
    for index, node_set in enumerate(inputs.node_sets):
        if _carries_nics(inputs, node_set):
            major[index] += node_set.nodes_provisioned * nic_w
    switches_w = 0.0
    for index, switch in enumerate(inputs.scale_out.switches or ()):
        if inputs.scale_out.present:
            key = f"power.scale_out.switches[{index}].power_per_switch"
            switches_w += switch.count * ledger.watts(key, switch.power_per_switch)
    major_w = sum(major)
    published_w = sum(published)
    other_w = overhead * major_w
    total_w = major_w + other_w + published_w + switches_w
    estimated = ledger.estimated
    declared = inputs.declared_provisioned_power
    if declared is not None:
        # The declared figure governs: Appendix D values below it do not tag the result.
        estimated = []
        kw = round(
            ledger.watts("power.declared_provisioned_power", declared, counts=False) / 1000.0, 2
        )
        if declared.source_type == "mlc_default":
            estimated.append("power.declared_provisioned_power (mlc_default)")
    else:
        kw = round(total_w / 1000.0, 2)
    return PowerFigures(
        major_components_w=major_w,
        overhead_fraction=overhead,
        other_components_w=other_w,
        published_node_power_w=published_w,
        scale_out_switch_power_w=switches_w,
        total_system_power_w=total_w,
        provisioned_power_kw=kw,
        estimated=tuple(estimated),
    )
