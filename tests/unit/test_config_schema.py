"""The settings table itself: one row per RunConfig field, defaults written
once and accepted by their converters, and the flags and YAML keys made
from the rows (``mlpe_fast.config.schema``)."""

from __future__ import annotations

import argparse
import re
import typing
from collections import Counter
from typing import Any

import msgspec
import pytest

from mlpe_fast.cli import build_parser
from mlpe_fast.config import Generation, RunConfig, Seeds, Timeouts, add_run_arguments
from mlpe_fast.config.arguments import flag_settings
from mlpe_fast.config.given import Given
from mlpe_fast.config.schema import CONFIG_FILE_FLAG, SETTINGS, SETTINGS_BY_NAME, Setting
from mlpe_fast.config.yaml_file import yaml_settings

_PARTS: dict[str, type[msgspec.Struct]] = {
    "timeouts": Timeouts,
    "seeds": Seeds,
    "generation": Generation,
}


def _leaf_fields() -> dict[str, tuple[Any, Any]]:
    """Every RunConfig field (dotted into its parts): (type, default)."""
    leaves: dict[str, tuple[Any, Any]] = {}
    default = RunConfig()
    for name, hint in typing.get_type_hints(RunConfig).items():
        if name in _PARTS:
            part = getattr(default, name)
            for sub, sub_hint in typing.get_type_hints(_PARTS[name]).items():
                leaves[f"{name}.{sub}"] = (sub_hint, getattr(part, sub))
        else:
            leaves[name] = (hint, getattr(default, name))
    return leaves


FIELD_ROWS = [s for s in SETTINGS if s.fills_field]


def test_every_run_config_field_has_exactly_one_row() -> None:
    rows = Counter(s.name for s in FIELD_ROWS)
    assert rows == Counter(list(_leaf_fields()))


def test_setting_names_flags_and_yaml_keys_are_unique() -> None:
    flags = [f.name for s in SETTINGS for f in s.flags]
    keys = [k for s in SETTINGS for k in s.yaml_keys]
    for names in ([s.name for s in SETTINGS], flags, keys):
        assert [n for n, count in Counter(names).items() if count > 1] == []


def test_run_config_defaults_are_the_rows() -> None:
    for name, (_, default) in _leaf_fields().items():
        assert default == SETTINGS_BY_NAME[name].default, name


@pytest.mark.parametrize("setting", FIELD_ROWS, ids=lambda s: s.name)
def test_a_rows_default_has_its_fields_type(setting: Setting) -> None:
    hint, _ = _leaf_fields()[setting.name]
    builtins = msgspec.to_builtins(setting.default)
    assert msgspec.convert(builtins, type=hint) == setting.default


# "" is what RunConfig holds for "no benchmark model": no model is spelt so.
_DEFAULT_NOT_GIVABLE = {"mlperf_model"}


@pytest.mark.parametrize(
    "setting",
    [s for s in SETTINGS if s.convert is not None and s.default is not None],
    ids=lambda s: s.name,
)
def test_a_rows_default_goes_through_its_converter_unchanged(setting: Setting) -> None:
    assert setting.convert is not None
    if setting.name in _DEFAULT_NOT_GIVABLE:
        with pytest.raises(ValueError, match="not an MLPerf Endpoints model"):
            setting.convert(Given(setting.default, "x"))
        return
    assert setting.convert(Given(setting.default, "x")) == setting.default


def test_a_setting_no_flag_or_key_gives_has_no_converter() -> None:
    # sweep and whole_passes: filled by rules and the curve, never read from input
    for setting in SETTINGS:
        assert (setting.convert is None) == (not setting.flags and not setting.yaml_keys)


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlpe-fast run")
    add_run_arguments(parser)
    return parser


def _row_flags() -> set[str]:
    flags = set()
    for setting in SETTINGS:
        for flag in setting.flags:
            flags.add(flag.name)
            if flag.kind == "on_off":
                flags.add(f"--no-{flag.name[2:]}")
    return flags


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_every_flag_comes_from_a_row() -> None:
    options = _option_strings(_run_parser()) - {"-h", "--help", "-c", CONFIG_FILE_FLAG.name}
    assert options == _row_flags()


def test_the_run_command_adds_only_no_progress() -> None:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    run = commands.choices["run"]
    extra = _option_strings(run) - _option_strings(_run_parser())
    assert extra == {"--no-progress"}


def test_every_flag_the_help_names_exists() -> None:
    text = _run_parser().format_help()
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    assert named <= _option_strings(_run_parser())
    assert _row_flags() <= named  # each is listed


def _yaml_document(key: str, value: Any) -> dict[str, Any]:
    *parents, leaf = key.split(".")
    document: dict[str, Any] = {leaf: value}
    for parent in reversed(parents):
        document = {parent: document}
    return document


def _flag_argv(setting: Setting) -> list[str]:
    flag = setting.flags[0]
    if flag.kind in ("const", "on_off"):
        return [flag.name]
    return [flag.name, "1"]


@pytest.mark.parametrize(
    "setting", [s for s in SETTINGS if s.flags and s.yaml_keys], ids=lambda s: s.name
)
def test_a_flag_and_its_yaml_keys_give_the_same_setting(setting: Setting) -> None:
    from_flag = flag_settings(_run_parser().parse_args(_flag_argv(setting)))
    assert list(from_flag) == [setting.name]
    assert from_flag[setting.name].where == setting.flag_said
    value = [{"path": "a.jsonl"}] if setting.name == "datasets" else 1
    for key in setting.yaml_keys:
        from_yaml = yaml_settings(_yaml_document(key, value))
        assert from_yaml == {setting.name: Given(value, key)}


def test_yaml_aliases_must_agree() -> None:
    runtime = {"scheduler_random_seed": 1, "scheduler_rng_seed": 1}
    assert yaml_settings({"settings": {"runtime": runtime}}) == {
        "seeds.scheduler": Given(1, "settings.runtime.scheduler_rng_seed")
    }


def test_a_flag_replaces_the_yaml_settings_it_stands_for() -> None:
    from mlpe_fast.config.resolve import merge

    from_yaml = yaml_settings({"settings": {"warmup": {"enabled": True, "n_requests": 4}}})
    from_flags = flag_settings(_run_parser().parse_args(["--warmup-requests", "2"]))
    merged = merge(from_yaml, from_flags)
    assert dict(merged.values) == {"warmup_requests": Given("2", "--warmup-requests")}
    assert merged.by_flag == {"warmup_requests"}
