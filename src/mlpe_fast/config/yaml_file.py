"""The YAML run configuration: reading the file, and its keys as settings.

Keys are the reference's (``schema.SETTINGS`` gives each setting's), plus a
top-level ``mlpe_fast:`` block for what only mlpe-fast has.  Keys of the
reference that configure its own machinery (``settings.client``,
``settings.drain``, ``enable_cpu_affinity``, ...) are accepted and have no
effect; a reference feature mlpe-fast does not have is refused by name; any
other key is an error that names it.  Strings may use ``${VAR}``,
``${VAR:-default}`` and ``$$`` (``env``).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .coerce import kind_of
from .datasets import dataset_from_yaml
from .env import substitute_env
from .given import Given
from .schema import SETTINGS

__all__ = ("load_yaml", "yaml_settings")

logger = logging.getLogger(__name__)

#: Reference keys that configure the reference's own machinery; their value
#: (a subtree, for some) is accepted and has no effect.  ``*``: any key there.
IGNORED_KEYS = (
    "version",
    "submission_ref.ruleset",
    "model_params.min_new_tokens",
    "model_params.skip_special_tokens",
    "model_params.osl_distribution",
    "settings.client.*",
    "settings.drain",
    "settings.profiling",
    "settings.early_stopping",
    "settings.service_ready_timeout_s",
    "timeout",
    "verbose",
    "enable_cpu_affinity",
    "mlpe_fast.version",
)
#: Reference keys for features mlpe-fast does not have: refused, saying so.
UNSUPPORTED_KEYS = {"audit": "compliance audits"}


class _Ignored:
    """Marks a key that has no effect."""


class _Unsupported:
    """Marks a key of a feature mlpe-fast does not have."""

    def __init__(self, what: str) -> None:
        self.what = what


_IGNORED = _Ignored()
# YAML key -> the setting's name, a marker, or the keys nested under it.
_KeyTree = dict[str, "str | _Ignored | _Unsupported | _KeyTree"]


def _key_tree() -> _KeyTree:
    tree: _KeyTree = {}
    targets: list[tuple[str, str | _Ignored | _Unsupported]] = [
        *((key, setting.name) for setting in SETTINGS for key in setting.yaml_keys),
        *((key, _IGNORED) for key in IGNORED_KEYS),
        *((key, _Unsupported(what)) for key, what in UNSUPPORTED_KEYS.items()),
    ]
    for key, target in targets:
        *parents, leaf = key.split(".")
        node = tree
        for parent in parents:
            child = node.setdefault(parent, {})
            assert isinstance(child, dict), f"YAML key {key} is under a setting's key"
            node = child
        assert leaf not in node, f"YAML key {key} is in the schema twice"
        node[leaf] = target
    return tree


_KEYS = _key_tree()
# The datasets' entries are read by datasets.dataset_from_yaml, not walked.
_DATASETS_KEY = "datasets"


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a run configuration file.

    Environment variables in string values are substituted and every key is
    checked against the schema (module docstring).

    Raises:
        UsageError: missing file, invalid YAML (with line and column), not a
            mapping, an unset environment variable, an unknown key.
    """
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"-c/--config: file not found: {where}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"-c/--config: cannot read {where}: {_one_line(e)}") from None
    yaml = _yaml()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or _one_line(e)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise UsageError(f"{where}{at}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of settings, got {kind_of(data)}")
    try:
        substituted: dict[str, Any] = substitute_env(data)
        # The entries are checked now, so that the message names the file.
        found = yaml_settings(substituted).get(_DATASETS_KEY)
        if found is not None:
            for i, entry in enumerate(found.value):
                dataset_from_yaml(entry, f"{found.where}[{i}]")
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    return substituted


def yaml_settings(data: Mapping[str, Any]) -> dict[str, Given]:
    """The settings a YAML document gives, by setting name (the datasets:
    their entries, each checked to be a mapping).

    Raises:
        UsageError: an unknown or unsupported key, a mapping expected, or
            two keys of one setting (an alias) with different values.
    """
    settings: dict[str, Given] = {}
    _walk(data, _KEYS, "", settings)
    return settings


def _walk(data: Mapping[str, Any], keys: _KeyTree, prefix: str, settings: dict[str, Given]) -> None:
    for key, value in data.items():
        where = f"{prefix}.{key}" if prefix else str(key)
        target = keys.get(str(key), keys.get("*"))  # "*": any other key
        if target is None:
            raise UsageError(f"unknown key {where!r}")
        if value is None:  # YAML null: not set
            continue
        if isinstance(target, _Ignored):
            logger.debug("config key %s has no effect in mlpe-fast", where)
        elif isinstance(target, _Unsupported):
            raise UsageError(f"{where}: {target.what} are not supported by mlpe-fast")
        elif isinstance(target, str):
            if target == _DATASETS_KEY:
                _check_dataset_entries(value)
            if target in settings and settings[target].value != value:
                earlier = settings[target]
                raise UsageError(
                    f"{where} ({value!r}) contradicts {earlier.where} ({earlier.value!r})"
                )
            settings[target] = Given(value, where)
        elif not isinstance(value, dict):
            raise UsageError(f"{where}: expected a mapping, got {kind_of(value)}")
        else:
            _walk(value, target, where, settings)


def _check_dataset_entries(entries: Any) -> None:
    if not isinstance(entries, list):
        raise UsageError(f"datasets: expected a list of datasets, got {kind_of(entries)}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UsageError(f"datasets[{i}]: expected a mapping, got {kind_of(entry)}")


def _yaml() -> Any:
    # PyYAML ships no type information; importing it by name keeps mypy
    # --strict clean with or without the types-PyYAML stubs installed.
    return importlib.import_module("yaml")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
