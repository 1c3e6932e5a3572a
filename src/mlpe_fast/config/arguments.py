"""The ``run`` flags, made from the schema's rows, and the settings a parsed
command line gives.

Every flag defaults to None ("not given") so that a flag can be told from
a YAML value; values are checked by the converters (``coerce``), which
raise :class:`~mlpe_fast.errors.UsageError`, not by argparse.
"""

from __future__ import annotations

import argparse
from typing import Any

from .given import Given
from .schema import CONFIG_FILE_FLAG, FLAG_GROUPS, SETTINGS, Flag

__all__ = ("add_run_arguments", "config_file", "flag_settings")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``run`` flags to ``parser``, in ``--help`` sections."""
    groups = {name: parser.add_argument_group(name) for name in FLAG_GROUPS}
    config = CONFIG_FILE_FLAG
    groups[config.group].add_argument("-c", config.name, metavar=config.metavar, help=config.help)
    for setting in SETTINGS:
        for flag in setting.flags:
            groups[flag.group].add_argument(flag.name, dest=setting.dest, **_how(flag))


def _how(flag: Flag) -> dict[str, Any]:
    """argparse's keywords for ``flag``'s kind."""
    if flag.kind == "values":
        return {"nargs": "+", "action": "extend", "metavar": flag.metavar, "help": flag.help}
    if flag.kind == "repeated":
        return {"action": "append", "metavar": flag.metavar, "help": flag.help}
    if flag.kind == "const":
        return {"action": "store_const", "const": flag.const, "help": flag.help}
    if flag.kind == "on_off":
        return {"action": argparse.BooleanOptionalAction, "default": None, "help": flag.help}
    return {"metavar": flag.metavar, "help": flag.help}


def config_file(args: argparse.Namespace) -> str | None:
    """The ``-c/--config`` file, if given (missing attributes: not given)."""
    path: str | None = getattr(args, "config", None)
    return path


def flag_settings(args: argparse.Namespace) -> dict[str, Given]:
    """The settings the flags give, by setting name, each named as its
    first flag (``--mode`` for ``--accuracy-only`` too)."""
    given: dict[str, Given] = {}
    for setting in SETTINGS:
        value = getattr(args, setting.dest, None) if setting.dest else None
        if value is not None:
            given[setting.name] = Given(value, setting.flag_said)
    return given
