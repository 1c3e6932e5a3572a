"""Building the :class:`~.run_config.RunConfig`: merge (flags over the YAML
file over defaults, each value remembering where it came from) -> convert
(each setting by its row's converter) -> the cross-field rules -> RunConfig.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from .arguments import config_file, flag_settings
from .given import Given, GivenSettings
from .rules import RULES
from .run_config import Generation, RunConfig, Seeds, Timeouts
from .schema import SETTINGS, SETTINGS_BY_NAME
from .yaml_file import load_yaml, yaml_settings

__all__ = ("convert", "given_fields", "merge", "resolve", "run_config_from")

# The RunConfig fields that are structs of their own, by the prefix of their rows' names.
_PARTS: Mapping[str, type[Timeouts | Seeds | Generation]] = {
    "timeouts": Timeouts,
    "seeds": Seeds,
    "generation": Generation,
}


def resolve(
    args: argparse.Namespace,
    yaml_dict: Mapping[str, Any] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
) -> RunConfig:
    """Builds the :class:`RunConfig`: flags over YAML over defaults, checked.

    Args:
        args: parsed ``run`` flags (missing attributes count as not given).
        yaml_dict: the output of :func:`~.yaml_file.load_yaml`; None to
            load ``args.config`` if given.
        defaults: values (converted) of settings not given, in place of
            the schema's defaults: the demo's dataset and tokenizer, which
            the rules then check as they check the user's
            (``demo.demo_defaults``).

    Raises:
        UsageError: one line naming the flag or key and the bad value.
    """
    if yaml_dict is None:
        path = config_file(args)
        yaml_dict = load_yaml(path) if path else {}
    given = merge(yaml_settings(yaml_dict), flag_settings(args))
    values = convert(given, defaults)
    for rule in RULES:
        values = {**values, **rule(given, values)}
    return run_config_from(values)


def given_fields(args: argparse.Namespace) -> set[str]:
    """The settings the user gave, by flag or in the ``-c`` file (the demo
    fills in only the others): RunConfig field names (``schema``).

    Raises:
        UsageError: the file cannot be read.
    """
    path = config_file(args)
    from_yaml = yaml_settings(load_yaml(path)) if path else {}
    return set(from_yaml) | set(flag_settings(args))


def merge(from_yaml: Mapping[str, Given], from_flags: Mapping[str, Given]) -> GivenSettings:
    """A flag's value over the YAML file's (and over the settings it replaces)."""
    values = dict(from_yaml)
    for name, found in from_flags.items():
        for replaced in SETTINGS_BY_NAME[name].replaces:
            values.pop(replaced, None)
        values[name] = found
    return GivenSettings(values, frozenset(from_flags))


def convert(given: GivenSettings, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every setting's value: the given one converted, else the default
    (``defaults``' over the schema's; ``converted_by_rule`` settings are
    left to their rule)."""
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.converted_by_rule:
            continue
        found = given.get(setting.name)
        if found is None or setting.convert is None:
            values[setting.name] = (defaults or {}).get(setting.name, setting.default)
        else:
            values[setting.name] = setting.convert(found)
    return values


def run_config_from(values: Mapping[str, Any]) -> RunConfig:
    """The RunConfig of the settings' values (inputs that fill no field left out)."""
    fields: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {prefix: {} for prefix in _PARTS}
    for setting in SETTINGS:
        if not setting.fills_field:
            continue
        prefix, dot, name = setting.name.partition(".")
        if dot:
            parts[prefix][name] = values[setting.name]
        else:
            fields[setting.name] = values[setting.name]
    for prefix, part in parts.items():
        fields[prefix] = _PARTS[prefix](**part)
    return RunConfig(**fields)
