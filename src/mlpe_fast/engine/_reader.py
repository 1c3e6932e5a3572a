"""Selects the engine's read path: compiled (``_reader_c``) unless disabled, else the twin."""

from __future__ import annotations

from .._native import USE_EXTENSIONS
from ._reader_py import READ_SIZE, ReadCore, monotonic_ns

__all__ = ("READ_SIZE", "ReadCore", "monotonic_ns")

if USE_EXTENSIONS:
    try:
        from ._reader_c import READ_SIZE, ReadCore, monotonic_ns  # type: ignore[assignment]
    except ImportError:  # no compiled core on this platform: the twin serves
        pass
