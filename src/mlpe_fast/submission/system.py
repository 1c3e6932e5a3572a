"""The system file: what the submitter declares once for a whole curve.

An MLPerf Endpoints submission carries three hand-authored disclosures beside the
client's outputs (spec §0 item 13): ``point.yaml`` per point (§3.6),
``system_desc.json`` per point (§3.7) and ``system_power.json`` per system (§3.8).
Nearly everything in them is a fact about the system, the model or the submission
rather than about one run, so mlpe-fast asks for those facts once, in one YAML file
(``mlpe-fast init`` writes a documented :data:`TEMPLATE`), and derives the three
files from it and the run folders (:mod:`mlpe_fast.submission.disclosure`).

:func:`load_system` checks the file against what checker 1.5.3.0 hard-requires, so a
mistake is one line naming the key here rather than a rejected bundle later:
unknown keys, the ``system_desc.json`` schema (§3.7: availability details, the
20-character short name, per-node ``host_memory_configuration``,
``host_network_card_count``, ``driver``, ``filesystem`` and a core or vCPU count),
``C_max > 32`` (§2.2), the canonical benchmark ``model_name`` (§2.8), the seed set and
a ``target_cohort`` inside its four-cohort adoption window (§2.5), and the Appendix E
power inputs (:mod:`mlpe_fast.submission.power`).
"""

from __future__ import annotations

import datetime
import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from ..config import (
    BENCHMARK_MODELS,
    SEED_SET_A_MODEL,
    SEED_SET_A_SAMPLE_INDEX,
    SEED_SET_A_SCHEDULER,
)
from ..errors import UsageError
from .power import PowerInputs, provisioned_power

__all__ = (
    "BENCHMARK_MODELS",
    "SEED_SETS",
    "TEMPLATE",
    "AcceleratorInfo",
    "ModelFacts",
    "NodeType",
    "SeedSet",
    "SystemDescFields",
    "SystemDescription",
    "WarmupDescription",
    "adoption_window",
    "directory_name",
    "init_template",
    "load_system",
)

#: Cohorts a seed set stays adoptable for: its own and the next three (spec §2.5).
_ADOPTION_COHORTS = 4
_COHORT = re.compile(r"(\d{4})-(\d{2})-C([01])")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_IMPLEMENTATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: C_max must exceed the Ultra-Low band (spec §2.2).
_ULTRA_LOW_MAX = 32
_SHORT_NAME_MAX = 20


@dataclass(frozen=True)
class SeedSet:
    """One published seed set and the cohort it was published for (spec §2.5)."""

    id: str
    scheduler_rng_seed: int
    sample_index_rng_seed: int
    model_seed: int
    published_cohort: str


#: The published seed sets (the checker's ``data/seed_sets.yaml``; only A so far).
SEED_SETS: Mapping[str, SeedSet] = {
    "A": SeedSet(
        id="A",
        scheduler_rng_seed=SEED_SET_A_SCHEDULER,
        sample_index_rng_seed=SEED_SET_A_SAMPLE_INDEX,
        model_seed=SEED_SET_A_MODEL,
        published_cohort="2026-10-C1",
    )
}


def _parse_cohort(text: str) -> tuple[int, int, int] | None:
    match = _COHORT.fullmatch(text)
    if match is None or not 1 <= int(match[2]) <= 12:
        return None
    return int(match[1]), int(match[2]), int(match[3])


def adoption_window(published: str) -> tuple[str, ...]:
    """The cohorts a set published for ``published`` may be adopted in: that one and
    the next three; cohorts are ``YYYY-MM-C0`` and ``YYYY-MM-C1``, two a month."""
    parsed = _parse_cohort(published)
    if parsed is None:
        raise ValueError(f"not a cohort: {published!r}")
    year, month, index = parsed
    window = []
    for _ in range(_ADOPTION_COHORTS):
        window.append(f"{year:04d}-{month:02d}-C{index}")
        index += 1
        if index == 2:
            index, month = 0, month + 1
            if month == 13:
                year, month = year + 1, 1
    return tuple(window)


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Unknown keys are rejected: a misspelt key would silently drop a disclosure."""


_Text = Annotated[str, msgspec.Meta(min_length=1)]
_AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]


class ModelFacts(_Strict, frozen=True, kw_only=True):
    """The benchmark as ``point.yaml`` discloses it (spec §3.6)."""

    model_name: _Text
    model_precision: _Text
    link_to_model: _Text
    link_to_model_transformation: str | None = None
    model_notes: str | None = None
    dataset: _Text
    dataset_name: _Text
    dataset_link: _Text


class WarmupDescription(_Strict, frozen=True, kw_only=True):
    """What the measured warmup figures cannot say (spec §2.4, §3.6 ``warmup``).

    ``data_source`` defaults to a description of mlpe-fast's warmup (queries drawn
    from the performance dataset, salted or not as the run was); ``logs_retained``
    defaults to true because mlpe-fast writes ``warmup_events.jsonl`` into every run
    folder that warmed up, which the submitter keeps for review.
    """

    data_source: str | None = None
    initialization_steps: list[str] = []
    logs_retained: bool = True
    link_logs: str | None = None


class AcceleratorInfo(_Strict, frozen=True, kw_only=True):
    accelerator_model_name: str | None = None
    accelerators_per_node: Annotated[int, msgspec.Meta(ge=0)] | None = None
    accelerator_memory_capacity: str | None = None
    accelerator_memory_type: str | None = None
    accelerator_interconnect: str | None = None
    accelerator_host_interconnect: str | None = None


class NodeType(_Strict, frozen=True, kw_only=True):
    """One ``node_types[]`` entry of ``system_desc.json`` (spec §3.7)."""

    system_node_ensemble_id: int | None = None
    number_of_nodes: int | None = None
    host_processor_model_name: str | None = None
    host_processors_per_node: int | None = None
    host_processor_core_count: int | None = None
    host_processor_vcpu_count: int | None = None
    host_memory_capacity: str | None = None
    host_memory_configuration: _Text
    accelerator_info: list[AcceleratorInfo] = []
    host_network_card_count: _Text | int
    host_networking: str | None = None
    host_storage_capacity: str | None = None
    host_storage_type: str | None = None
    other_hardware: str | None = None
    cooling: str | None = None
    hw_notes: str | None = None
    inference_backend: str | None = None
    driver: _Text
    operating_system: str | None = None
    filesystem: _Text
    container_link: str | None = None
    other_software_stack: str | None = None
    sw_notes: str | None = None


class SystemDescFields(_Strict, frozen=True, kw_only=True):
    """The ``system_desc.json`` fields that are not identity or availability (§3.7)."""

    system_size: _Text | int
    system_node_ensemble_count: int
    system_node_ensemble_total: int
    endpoint_url: str | None = None
    serving_framework: str | None = None
    node_config: str | None = None
    tensor_parallel: _AtLeastOne = 1
    pipeline_parallel: _AtLeastOne = 1
    expert_parallel: _AtLeastOne = 1
    data_parallel: _AtLeastOne = 1
    disaggregated: bool = False
    batch: int | None = None
    config_summary: Annotated[str, msgspec.Meta(min_length=4)] | None = None
    config_summary_notes: str | None = None
    node_types: Annotated[list[NodeType], msgspec.Meta(min_length=1)]


class SystemDescription(_Strict, frozen=True, kw_only=True):
    """The validated system file (module docstring; :data:`TEMPLATE` documents it)."""

    submitter_org_names: _Text
    system_name: _Text
    shortened_system_name: _Text
    division: Literal["Standardized", "Serviced", "RDI"]
    availability: Literal["Available", "Preview", "RDI"]
    availability_url: str | None = None
    target_availability_date: str | None = None
    max_supported_concurrency: int
    c_min_override: int | None = None
    cooling: Literal["air", "liquid"]
    implementation: str = "implementation"
    model: ModelFacts
    seed_set: str = "A"
    target_cohort: _Text
    warmup: WarmupDescription = WarmupDescription()
    system_desc: SystemDescFields
    power: PowerInputs | None = None

    @property
    def seeds(self) -> SeedSet:
        """The bound seed set."""
        return SEED_SETS[self.seed_set]

    @property
    def org_dir(self) -> str:
        """The bundle's top folder, made from ``submitter_org_names``."""
        return directory_name(self.submitter_org_names, "submitter_org_names")

    @property
    def system_dir(self) -> str:
        """``results/<System>/``, made from ``system_name``."""
        return directory_name(self.system_name, "system_name")


def directory_name(text: str, key: str) -> str:
    """A folder name made from user text that cannot leave its parent folder.

    Anything but ASCII letters, digits, ``.``, ``_`` and ``-`` becomes ``_`` (so
    ``/``, ``\\``, NUL and spaces do), and leading or trailing dots and underscores
    go, so ``..`` and ``.`` are not names at all.  Capped at 64 characters.

    Raises:
        UsageError: nothing nameable is left.
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip())
    slug = re.sub(r"_+", "_", slug).strip("._")[:64].rstrip("._")
    if not slug:
        raise UsageError(f"{key}: {text!r} has no letters or digits to name a folder after")
    return slug


def _overhead_word(text: str) -> str | None:
    # As the checker reads free-text cooling: liquid wins over air.
    lowered = text.lower()
    if any(word in lowered for word in ("liquid", "water", "immersion")):
        return "liquid"
    return "air" if "air" in lowered else None


def _canonical_guess(name: str) -> str:
    # The checker's hint for a non-canonical name (layout.canonical_model_name).
    part = name.rsplit("/", maxsplit=1)[-1].strip()
    return re.sub(r"_+", "_", re.sub(r"[^\w\-]", "_", part)).strip("_")


_DIVISIONS = {"standardized": "Standardized", "serviced": "Serviced", "rdi": "RDI"}
_AVAILABILITY = {"available": "Available", "preview": "Preview", "rdi": "RDI"}


def _normalise(data: Any) -> Any:
    """Dates as ISO text (YAML reads ``2027-03-01`` as a date); case-free enums."""
    if isinstance(data, dict):
        out = {key: _normalise(value) for key, value in data.items()}
        for key, table in (("division", _DIVISIONS), ("availability", _AVAILABILITY)):
            value = out.get(key)
            if isinstance(value, str) and value.strip().lower() in table:
                out[key] = table[value.strip().lower()]
        return out
    if isinstance(data, list):
        return [_normalise(item) for item in data]
    if isinstance(data, datetime.date):
        return data.isoformat()
    return data


def _schema_message(error: msgspec.ValidationError) -> str:
    """msgspec's message as ``key: problem``, keys written as in the YAML."""
    text = str(error)
    message, _, at = text.partition(" - at `$")
    path = at.rstrip("`").lstrip(".")
    for prefix, what in (
        ("Object contains unknown field `", "unknown key"),
        ("Object missing required field `", "missing key"),
    ):
        if message.startswith(prefix):
            name = message[len(prefix) :].rstrip("`")
            return f"{what} {path + '.' if path else ''}{name}"
    message = message.replace("`object`", "a mapping").replace("`array`", "a list")
    message = message.replace("`", "")
    return f"{path or 'top level'}: {message[:1].lower()}{message[1:]}"


def _check(system: SystemDescription) -> None:
    """The rules msgspec's schema cannot say (module docstring)."""
    if system.availability == "Available" and not system.availability_url:
        raise UsageError("availability_url: required when availability is Available")
    if system.availability == "Preview":
        date = system.target_availability_date
        if not date:
            raise UsageError("target_availability_date: required when availability is Preview")
        try:
            if _ISO_DATE.fullmatch(date) is None:
                raise ValueError(date)
            datetime.date.fromisoformat(date)
        except ValueError:
            raise UsageError(
                f"target_availability_date: expected YYYY-MM-DD, got {date!r}"
            ) from None
    if len(system.shortened_system_name.strip()) > _SHORT_NAME_MAX:
        raise UsageError(
            f"shortened_system_name: at most {_SHORT_NAME_MAX} characters, "
            f"got {len(system.shortened_system_name.strip())}"
        )
    if system.max_supported_concurrency <= _ULTRA_LOW_MAX:
        raise UsageError(
            f"max_supported_concurrency: C_max must be above {_ULTRA_LOW_MAX}, "
            f"got {system.max_supported_concurrency}"
        )
    override = system.c_min_override
    if override is not None and not 1 <= override <= _ULTRA_LOW_MAX:
        raise UsageError(f"c_min_override: expected 1..{_ULTRA_LOW_MAX}, got {override}")
    if _IMPLEMENTATION.fullmatch(system.implementation) is None:
        raise UsageError(
            f"implementation: a folder name of letters, digits, '.', '_' and '-', "
            f"got {system.implementation!r}"
        )
    name = system.model.model_name
    if name not in BENCHMARK_MODELS:
        guess = _canonical_guess(name)
        hint = (
            f"did you mean {guess}?"
            if guess in BENCHMARK_MODELS
            else f"expected one of {', '.join(BENCHMARK_MODELS)}"
        )
        raise UsageError(f"model.model_name: {name!r} is not a benchmark model name; {hint}")
    seed_set = SEED_SETS.get(system.seed_set)
    if seed_set is None:
        raise UsageError(
            f"seed_set: {system.seed_set!r} is not a published seed set ({', '.join(SEED_SETS)})"
        )
    if _parse_cohort(system.target_cohort) is None:
        raise UsageError(
            f"target_cohort: expected YYYY-MM-C0 or YYYY-MM-C1, got {system.target_cohort!r}"
        )
    window = adoption_window(seed_set.published_cohort)
    if system.target_cohort not in window:
        raise UsageError(
            f"target_cohort: seed set {seed_set.id} can be adopted for {', '.join(window)}, "
            f"not {system.target_cohort}"
        )
    desc = system.system_desc
    ensembles: set[int] = set()
    for index, node in enumerate(desc.node_types):
        key = f"system_desc.node_types[{index}]"
        if node.host_processor_core_count is None and node.host_processor_vcpu_count is None:
            raise UsageError(f"{key}: give host_processor_core_count or host_processor_vcpu_count")
        if node.cooling is not None:
            word = _overhead_word(node.cooling)
            if word is not None and word != system.cooling:
                raise UsageError(
                    f"{key}.cooling: {node.cooling!r} disagrees with cooling: {system.cooling}"
                )
        if node.system_node_ensemble_id is not None:
            ensembles.add(node.system_node_ensemble_id)
    if system.power is None:
        if system.division == "Standardized":
            raise UsageError("power: required in the Standardized division (spec §3.8)")
        return
    for index, node_set in enumerate(system.power.node_sets):
        if node_set.system_node_ensemble_id not in ensembles:
            raise UsageError(
                f"power.node_sets[{index}].system_node_ensemble_id: "
                f"{node_set.system_node_ensemble_id} names no system_desc.node_types entry"
            )
    provisioned_power(system.power, system.cooling)


def load_system(path: str | Path) -> SystemDescription:
    """Reads and validates a system file (module docstring).

    Raises:
        UsageError: missing or unreadable file, invalid YAML, or any value the
            submission checker would reject; one line that names the key.
    """
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{where}: system file not found (mlpe-fast init writes one)") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{where}: cannot read: {error}") from None
    yaml: Any = importlib.import_module("yaml")  # untyped; see mlpe_fast.config.yaml_file._yaml
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise UsageError(f"{where}{at}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of keys (see mlpe-fast init)")
    try:
        system = msgspec.convert(_normalise(data), SystemDescription)
    except msgspec.ValidationError as error:
        raise UsageError(f"{where}: {_schema_message(error)}") from None
    try:
        _check(system)
    except UsageError as error:
        raise UsageError(f"{where}: {error}") from None
    return system


def init_template(path: str | Path) -> Path:
    """Writes :data:`TEMPLATE` to ``path`` (never over an existing file).

    Raises:
        UsageError: ``path`` exists or cannot be written.
    """
    target = Path(path)
    try:
        # inside: asking is already an OSError for a name the system refuses
        if target.exists():
            raise UsageError(f"{target}: already exists; not overwriting it")
        blocking = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
        if blocking is not None:  # mkdir would say "File exists", of the wrong file
            raise UsageError(f"{target}: cannot write: {blocking} is a file, not a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(TEMPLATE, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"{target}: cannot write: {error.strerror or error}") from None
    return target


TEMPLATE = """\
# mlpe-fast system file: the facts `mlpe-fast bundle` writes into every point.yaml,
# system_desc.json and system_power.json of a submission bundle (MLPerf Endpoints
# spec 3.6-3.8).  Every value below is an EXAMPLE: replace it with your system's.
# Keys not listed here are rejected; commented-out keys are optional.

# --- who, what, when ------------------------------------------------------------
submitter_org_names: Example Org         # the bundle's top folder is named after it
system_name: Example 8-GPU server        # results/<system_name>/ (unsafe characters -> _)
shortened_system_name: Example-8GPU      # at most 20 characters
division: Standardized                   # Standardized | Serviced | RDI
availability: Available                  # Available | Preview | RDI
availability_url: https://example.com/product   # required when Available
# target_availability_date: 2027-03-01   # required when Preview (YYYY-MM-DD)
max_supported_concurrency: 1024          # C_max: the highest concurrency you support (> 32);
                                         # measure one point at exactly this concurrency
# c_min_override: 8                      # optional; must equal a measured point (1..32)
cooling: air                             # air | liquid: the power overhead (0.50 | 0.30)
implementation: vllm                     # folder under src/ holding the SUT's README.md

# --- the benchmark ----------------------------------------------------------------
model:
  model_name: llama3_1-8b      # exactly one of: llama3_1-8b, gpt-oss-120b, deepseek-r1,
                               # kimi-k3, qwen3_6-35b-a3b, deepseek-v4_1-flash
  model_precision: bf16
  link_to_model: https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct
  # link_to_model_transformation: https://example.com/quantization   # if weights changed
  # model_notes: ""
  dataset: cnn_dailymail       # the checker's dataset key (its minimum query count)
  dataset_name: CNN/DailyMail 3.0.0 validation
  dataset_link: https://huggingface.co/datasets/abisee/cnn_dailymail

# --- seeds (spec 2.5) ---------------------------------------------------------------
seed_set: A                    # the published set your runs used (mlpe-fast's default)
target_cohort: 2026-12-C0      # YYYY-MM-C0|C1; set A: 2026-10-C1 .. 2026-12-C0

# --- warmup (spec 2.4): the counts come from each run folder ---------------------------
warmup:
  # data_source: "samples of the performance dataset, salted"   # default says so
  initialization_steps: []     # e.g. ["CUDA graphs captured", "torch.compile done"]
  logs_retained: true          # keep each run folder's warmup_events.jsonl for review
  # link_logs: https://example.com/warmup-logs

# --- system_desc.json (spec 3.7) -----------------------------------------------------
system_desc:
  system_size: 1 node
  system_node_ensemble_count: 1
  system_node_ensemble_total: 1
  endpoint_url: http://10.0.0.10:8000
  serving_framework: vLLM 0.11.0
  node_config: one node, 8 accelerators, one server process per accelerator
  tensor_parallel: 1           # parallelism of every point; data_parallel x TP x PP x EP
  pipeline_parallel: 1         # should use every provisioned accelerator
  expert_parallel: 1
  data_parallel: 8
  disaggregated: false
  # batch: 256
  config_summary: TP1 PP1 EP1 DP8
  # config_summary_notes: ""
  node_types:
    - system_node_ensemble_id: 0
      number_of_nodes: 1
      host_processor_model_name: Example CPU 48-core
      host_processors_per_node: 2
      host_processor_core_count: 48          # or host_processor_vcpu_count
      host_memory_capacity: 1.5 TB
      host_memory_configuration: 24x 64 GB DDR5
      accelerator_info:
        - accelerator_model_name: Example GPU 80 GB
          accelerators_per_node: 8
          accelerator_memory_capacity: 80 GB
          accelerator_memory_type: HBM3
          accelerator_interconnect: Example scale-up link
          accelerator_host_interconnect: PCIe Gen5 x16
      host_network_card_count: "2"
      host_networking: 2x 100 GbE
      host_storage_capacity: 4 TB
      host_storage_type: NVMe SSD
      driver: Example driver 1.0
      operating_system: Ubuntu 22.04
      filesystem: ext4
      # other_hardware, cooling, hw_notes, inference_backend, container_link,
      # other_software_stack, sw_notes: optional text

# --- system_power.json (spec 3.8, Appendix E) ------------------------------------------
# Every figure: exactly one of value_w / value_kw (value_pj for energy per bit), a
# source_type (vendor_spec | publication | public_statement | mlc_default) and a source
# (a public URL; for mlc_default the Appendix D subsection D.1 .. D.4).
power:
  node_sets:
    - node_set_id: 0
      system_node_ensemble_id: 0     # a system_desc.node_types id
      nodes_provisioned: 1
      power_method: component_sum    # component_sum | published_system | node_scaling
      components:
        cpu:
          model: Example CPU 48-core
          count_per_node: 2
          tdp_per_unit: {value_w: 350, source_type: vendor_spec, source: https://example.com/cpu}
        accelerator:
          model: Example GPU 80 GB
          count_per_node: 8
          tdp_per_unit: {value_w: 700, source_type: vendor_spec, source: https://example.com/gpu}
        scale_up_network:
          method: declared_tdp         # declared_tdp | bandwidth_estimate | none
          switch_count: 4
          tdp_per_switch: {value_w: 500, source_type: vendor_spec, source: https://example.com/sw}
  scale_out:
    present: false                     # one node: no scale-out fabric
  # declared_provisioned_power: {value_kw: 12.0, source_type: publication, source: https://...}
  # notes: ""
"""
