"""The datasets setting: ``--dataset SPEC`` strings (``load/dataset.py``
parses them) or the YAML file's ``datasets:`` entries, read here with the
reference's keys (``name, type, path, format, samples, parser.prompt,
parser.system, accuracy_config, agentic_inference``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UsageError
from ..load.agentic import AgenticSettings
from ..load.dataset import (
    DATASET_FORMATS,
    AccuracyConfig,
    DatasetSpec,
    accuracy_config,
    parse_dataset_arg,
)
from .coerce import boolean, choice, kind_of, positive_integer, positive_number, short
from .given import Given

__all__ = ("dataset_from_yaml", "datasets")

_DATASET_KEYS = (
    "name",
    "type",
    "path",
    "format",
    "samples",
    "parser",
    "accuracy_config",
    "agentic_inference",
)
# Keys of the reference's entries that configure its own machinery.
_DATASET_IGNORED = ("eval_method",)
_DATASET_UNSUPPORTED = {
    "generate_params": "predefined dataset generation",
    "generation_config_override": "per-dataset generation overrides",
}
# A format is named as in --dataset (jsonl) or as a suffix (.jsonl, the reference's).
_FORMATS: dict[str, str] = {
    **{f: f for f in DATASET_FORMATS},
    **{f".{f}": f for f in DATASET_FORMATS},
}


def datasets(given: Given) -> tuple[DatasetSpec, ...]:
    """The datasets in the order given: a ``--dataset`` string each, or a
    YAML entry each (a mapping; ``yaml_file`` has checked that they are)."""
    specs = []
    for i, item in enumerate(given.value):
        if isinstance(item, str):
            specs.append(parse_dataset_arg(item))
        else:
            specs.append(dataset_from_yaml(item, f"{given.where}[{i}]"))
    return tuple(specs)


def dataset_from_yaml(entry: Mapping[str, Any], where: str) -> DatasetSpec:
    """One ``datasets[]`` entry of a YAML config (or a written config.yaml).

    Raises:
        UsageError: naming ``where`` and the key at fault.
    """
    _check_keys(entry, where)
    path = entry.get("path")
    if not isinstance(path, str) or not path.strip():
        raise UsageError(f"{where}.path: a dataset needs a file path, got {path!r}")
    dtype = "performance"
    if entry.get("type") is not None:
        dtype = choice(
            Given(entry["type"], f"{where}.type"),
            {"performance": "performance", "accuracy": "accuracy"},
            {},
        )
    parser = _parser(entry.get("parser") or {}, f"{where}.parser")
    name = entry.get("name")
    if name is not None and not isinstance(name, str):
        raise UsageError(f"{where}.name: expected a string, got {short(name)}")
    fmt = entry.get("format")
    if fmt is not None:
        fmt = choice(Given(fmt, f"{where}.format"), _FORMATS, {}, shown=DATASET_FORMATS)
    samples = entry.get("samples")
    if samples is not None:
        samples = positive_integer(Given(samples, f"{where}.samples"))
    accuracy = _accuracy(entry.get("accuracy_config"), dtype, f"{where}.accuracy_config")
    agentic = _agentic(entry.get("agentic_inference"), dtype, f"{where}.agentic_inference")
    return DatasetSpec(
        path=path.strip(),
        type="accuracy" if dtype == "accuracy" else "performance",
        name=name or "",
        format=fmt,
        samples=samples,
        prompt_column=parser.get("prompt"),
        system_column=parser.get("system"),
        accuracy=accuracy,
        agentic=agentic,
    )


def _accuracy(block: Any, dtype: str, where: str) -> AccuracyConfig | None:
    """The ``accuracy_config:`` block: an accuracy dataset's (its defaults without one)."""
    if block is not None and not isinstance(block, dict):
        raise UsageError(f"{where}: expected a mapping, got {kind_of(block)}")
    return accuracy_config(block or {}, where) if dtype == "accuracy" else None


def _agentic(block: Any, dtype: str, where: str) -> AgenticSettings | None:
    """The ``agentic_inference:`` block, which only a performance dataset has."""
    if block is None:
        return None
    if dtype == "accuracy":
        raise UsageError(
            f"{where}: an accuracy dataset cannot be agentic "
            "(the block belongs on the performance dataset)"
        )
    return _agentic_settings(block, where)


def _check_keys(entry: Mapping[str, Any], where: str) -> None:
    known = (*_DATASET_KEYS, *_DATASET_IGNORED, *_DATASET_UNSUPPORTED)
    for key in entry:
        if key in _DATASET_UNSUPPORTED and entry[key] is not None:
            raise UsageError(
                f"{where}.{key}: {_DATASET_UNSUPPORTED[key]} are not supported by mlpe-fast"
            )
        if key not in known:
            raise UsageError(f"unknown key {f'{where}.{key}'!r}")


def _parser(parser: Any, where: str) -> dict[str, str]:
    """The ``parser:`` block: which column is the prompt, which the system prompt."""
    if not isinstance(parser, dict):
        raise UsageError(f"{where}: expected a mapping, got {kind_of(parser)}")
    for key, value in parser.items():
        if key not in ("prompt", "system"):
            raise UsageError(f"{where}: unknown parser target {key!r} (valid: prompt, system)")
        if not isinstance(value, str) or not value:
            raise UsageError(f"{where}.{key}: expected a column name, got {value!r}")
    return parser


def _agentic_settings(block: Any, where: str) -> AgenticSettings:
    """A dataset's ``agentic_inference:`` block (the reference's keys)."""
    if not isinstance(block, dict):
        raise UsageError(f"{where}: expected a mapping, got {kind_of(block)}")
    known = set(AgenticSettings.__struct_fields__)
    for key in block:
        if key not in known:
            raise UsageError(f"unknown key {f'{where}.{key}'!r}")
    values: dict[str, Any] = {}
    for key, value in block.items():
        at = Given(value, f"{where}.{key}")
        if value is None:
            continue
        if key == "turn_timeout_s":
            values[key] = positive_number(at)
        elif key == "num_trajectories_to_issue":
            values[key] = positive_integer(at)
        elif key == "routing_headers":
            if not isinstance(value, list) or not all(isinstance(h, str) and h for h in value):
                raise UsageError(f"{where}.{key}: expected a list of header names")
            values[key] = tuple(value)
        else:
            values[key] = boolean(at)
    return AgenticSettings(**values)
