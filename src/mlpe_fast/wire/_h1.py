"""Selects the HTTP/1.1 response framing: compiled (``_h1_c``) unless disabled, else the twin."""

from __future__ import annotations

from .._native import USE_EXTENSIONS
from ._h1_py import H1Decoder

__all__ = ("H1Decoder",)

if USE_EXTENSIONS:
    try:
        from ._h1_c import H1Decoder  # type: ignore[assignment]
    except ImportError:  # no compiled core on this platform: the twin serves
        pass
