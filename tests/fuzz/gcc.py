"""Building and running the C test programs (fuzz drivers, the stress
program) with gcc, outside any sanitizer an outer run preloaded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ("clean_env", "gcc")

# What an outer sanitizer run (make test-asan) leaves in the environment.
_SANITIZER_VARIABLES = (
    "LD_PRELOAD",
    "ASAN_OPTIONS",
    "UBSAN_OPTIONS",
    "LSAN_OPTIONS",
    "TSAN_OPTIONS",
)


def clean_env() -> dict[str, str]:
    """The environment for gcc and the programs it builds, without a
    preloaded sanitizer runtime or its options."""
    env = dict(os.environ)
    for name in _SANITIZER_VARIABLES:
        env.pop(name, None)
    return env


def gcc(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """gcc with ``args``; the caller reads the result."""
    return subprocess.run(
        ["gcc", *map(str, args)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=300,
        check=False,
    )
