"""``${VAR}`` substitution in a YAML file's strings, as the reference does:
``${VAR}`` and ``$VAR`` (an unset variable is an error), ``${VAR:-default}``,
and ``$$`` for a literal ``$``."""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import UsageError

__all__ = ("substitute_env",)

_ENV_VAR = re.compile(r"\$\$|\$\{([A-Za-z_]\w*)(?::-([^}]*))?\}|\$([A-Za-z_]\w*)")


def substitute_env(value: Any, key: str = "") -> Any:
    """``value`` (a YAML document or part of one, at ``key``) with every
    string's variables replaced; keys are left as they are.

    Raises:
        UsageError: a variable without a default is not set (naming ``key``).
    """
    if isinstance(value, str):
        return _ENV_VAR.sub(lambda match: _replacement(match, key), value)
    if isinstance(value, dict):
        return {k: substitute_env(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, f"{key}[{i}]") for i, v in enumerate(value)]
    return value


def _replacement(match: re.Match[str], key: str) -> str:
    if match.group(0) == "$$":
        return "$"
    name = match.group(1) or match.group(3)
    found = os.environ.get(name)
    if found is not None:
        return found
    if match.group(2) is not None:
        return match.group(2)
    raise UsageError(f"{key}: environment variable ${name} is not set (no default)")
