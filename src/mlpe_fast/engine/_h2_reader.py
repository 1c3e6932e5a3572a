"""Selects the engine's HTTP/2 read path: compiled (``_h2_reader_c``) unless
disabled, else the twin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._native import USE_EXTENSIONS

__all__ = ("H2ReadCore",)

if TYPE_CHECKING:  # both have the twin's interface (_h2_reader_c.pyi)
    from ._h2_reader_py import H2ReadCore
else:
    from ._h2_reader_py import H2ReadCore

    if USE_EXTENSIONS:
        try:
            from ._h2_reader_c import H2ReadCore
        except ImportError:  # no compiled core on this platform: the twin serves
            pass
