"""Which event loop an engine runs on: uvloop where it exists (not on
Windows), else asyncio's own (``docs/architecture.md``: a Python scheduler
on uvloop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ("loop_runner_for_platform",)

T = TypeVar("T")


def loop_runner_for_platform() -> Callable[[Coroutine[Any, Any, T]], T]:
    """``uvloop.run`` where uvloop imports, else ``asyncio.run``."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    run: Callable[[Coroutine[Any, Any, T]], T] = uvloop.run
    return run
