"""Selects the engine's read path: compiled (``_reader_c``) unless disabled, else the twin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._native import USE_EXTENSIONS

__all__ = ("READ_SIZE", "ReadCore")

if TYPE_CHECKING:  # both have the twin's interface (_reader_c.pyi)
    from ._reader_py import READ_SIZE, ReadCore
else:
    from ._reader_py import READ_SIZE, ReadCore

    if USE_EXTENSIONS:
        try:
            from ._reader_c import READ_SIZE, ReadCore
        except ImportError:  # no compiled core on this platform: the twin serves
            pass
