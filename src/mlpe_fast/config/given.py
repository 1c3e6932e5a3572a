"""A setting's value as the user gave it, and where: the flag or YAML key
that an error message names.

:class:`GivenSettings` is the merge's result (a flag over the same setting
in the YAML file); the converters (``coerce``) and the cross-field rules
(``rules``) read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import msgspec

__all__ = ("Converter", "Given", "GivenSettings")


class Given(NamedTuple):
    """One value as given: ``value`` as argparse or YAML produced it, and
    ``where`` it came from (``--concurrency``, ``settings.runtime.min_duration_ms``)."""

    value: Any
    where: str


Converter = Callable[[Given], Any]
"""Turns a given value into the setting's, or raises UsageError naming ``where``."""


class GivenSettings(msgspec.Struct, frozen=True):
    """The settings given, by setting name, and which of them by a flag."""

    values: Mapping[str, Given]
    by_flag: frozenset[str] = frozenset()

    def get(self, name: str) -> Given | None:
        """The setting as given; None when it was not (or was null)."""
        found = self.values.get(name)
        return None if found is None or found.value is None else found

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def where(self, name: str, default: str) -> str:
        """What gave ``name``, for a message about it; ``default`` when nothing did."""
        found = self.values.get(name)
        return default if found is None else found.where
