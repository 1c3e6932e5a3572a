"""The datasets setting: ``--dataset SPEC`` strings (``load/dataset.py``
parses them) or the YAML file's ``datasets:`` entries, read here with the
reference's keys (``name, type, path, format, samples, parser.prompt,
parser.system, parser.input_tokens, accuracy_config, agentic_inference,
generation_config_override``), and mlpe-fast's ``synthetic:`` block of a
dataset without a file (``load/synthetic_spec.py``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..errors import UsageError
from ..load.agentic import AgenticSettings
from ..load.dataset import (
    DATASET_FORMATS,
    AccuracyConfig,
    DatasetSpec,
    GenerationOverride,
    accuracy_config,
    parse_dataset_arg,
    synthetic_dataset_spec,
)
from ..load.synthetic_spec import synthetic_from_yaml
from .coerce import (
    any_integer,
    boolean,
    choice,
    kind_of,
    mapping,
    number,
    positive_integer,
    positive_number,
    seed,
    short,
)
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
    "generation_config_override",
    "synthetic",
)
# What a synthetic entry cannot have beside its ``synthetic:`` block.
_NOT_SYNTHETIC = ("path", "format", "parser", "accuracy_config", "agentic_inference", "samples")
# Keys of the reference's entries that configure its own machinery.
_DATASET_IGNORED = ("eval_method",)
_DATASET_UNSUPPORTED = {
    "generate_params": "predefined dataset generation",
}
_PARSER_TARGETS = ("prompt", "system", "input_tokens")

# generation_config_override keys (the reference's ModelParams fields) and
# how each is read; the reference refuses its per-run identity keys here
# (config/schema.py, _METRICS_DECOUPLED_OVERRIDE_KEYS): one tokenizer and one
# streaming mode serve the whole run's counts.
_OVERRIDE_KEYS: dict[str, Callable[[Given], Any]] = {
    "max_new_tokens": positive_integer,
    "temperature": number,
    "seed": seed,
    "top_k": any_integer,
    "top_p": number,
    "repetition_penalty": number,
    "presence_penalty": number,
    "frequency_penalty": number,
    "chat_template_kwargs": mapping,
}
_OVERRIDE_PER_RUN = ("name", "streaming", "tokenizer_name")
_OVERRIDE_UNSUPPORTED = ("min_new_tokens", "skip_special_tokens", "osl_distribution")
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
    if entry.get("synthetic") is not None:
        return _synthetic_entry(entry, where)
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
    override = generation_override(
        entry.get("generation_config_override"), f"{where}.generation_config_override"
    )
    return DatasetSpec(
        path=path.strip(),
        type="accuracy" if dtype == "accuracy" else "performance",
        name=name or "",
        format=fmt,
        samples=samples,
        prompt_column=parser.get("prompt"),
        system_column=parser.get("system"),
        input_tokens_column=parser.get("input_tokens"),
        accuracy=accuracy,
        agentic=agentic,
        generation_override=override,
    )


def _synthetic_entry(entry: Mapping[str, Any], where: str) -> DatasetSpec:
    """An entry with a ``synthetic:`` block (``load/synthetic_spec.py``): a
    performance dataset without a file, sized by its block's ``samples``.

    Raises:
        UsageError: a key that only a file's entry has, an accuracy type,
            or what the block's keys refuse.
    """
    for key in _NOT_SYNTHETIC:
        if entry.get(key) is not None:
            hint = " (in the synthetic block)" if key == "samples" else ""
            raise UsageError(f"{where}.{key}: not for a synthetic dataset{hint}")
    if entry.get("type") not in (None, "performance"):
        raise UsageError(f"{where}.type: a synthetic dataset is a performance dataset")
    name = entry.get("name")
    if name is not None and not isinstance(name, str):
        raise UsageError(f"{where}.name: expected a string, got {short(name)}")
    spec = synthetic_dataset_spec(synthetic_from_yaml(entry["synthetic"], f"{where}.synthetic"))
    override = generation_override(
        entry.get("generation_config_override"), f"{where}.generation_config_override"
    )
    return msgspec.structs.replace(spec, name=name or "", generation_override=override)


def generation_override(block: Any, where: str) -> GenerationOverride | None:
    """A ``generation_config_override:`` block: the reference's key names,
    each checked as its run-wide setting is.

    Raises:
        UsageError: not a mapping, an unknown key, a per-run key (with
            where it belongs), or a value of the wrong kind.
    """
    if block is None:
        return None
    if not isinstance(block, dict):
        raise UsageError(f"{where}: expected a mapping, got {kind_of(block)}")
    values: dict[str, Any] = {}
    for key, value in block.items():
        if key in _OVERRIDE_PER_RUN:
            raise UsageError(
                f"{where}.{key}: is one setting of the whole run (its token counts), "
                f"not per dataset; set model_params.{key}"
            )
        if key in _OVERRIDE_UNSUPPORTED:
            raise UsageError(f"{where}.{key}: is not supported by mlpe-fast")
        if key not in _OVERRIDE_KEYS:
            raise UsageError(
                f"unknown key {f'{where}.{key}'!r} (valid: {', '.join(_OVERRIDE_KEYS)})"
            )
        if value is not None:
            values[key] = _OVERRIDE_KEYS[key](Given(value, f"{where}.{key}"))
    return GenerationOverride(**values) if values else None


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
    """The ``parser:`` block: which column is the prompt, which the system
    prompt, which the token ids."""
    if not isinstance(parser, dict):
        raise UsageError(f"{where}: expected a mapping, got {kind_of(parser)}")
    for key, value in parser.items():
        if key not in _PARSER_TARGETS:
            raise UsageError(
                f"{where}: unknown parser target {key!r} (valid: {', '.join(_PARSER_TARGETS)})"
            )
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
