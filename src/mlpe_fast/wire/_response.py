"""Selects the whole-response decoder: compiled (``_response_c``) unless disabled, else the twin."""

from __future__ import annotations

from .._native import USE_EXTENSIONS
from ._response_py import ResponseDecoder

__all__ = ("ResponseDecoder",)

if USE_EXTENSIONS:
    try:
        from ._response_c import ResponseDecoder  # type: ignore[assignment]
    except ImportError:  # no compiled core on this platform: the twin serves
        pass
