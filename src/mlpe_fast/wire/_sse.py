"""Selects the SSE decoder: compiled (``_sse_c``) unless disabled, else the twin."""

from __future__ import annotations

from .._native import USE_EXTENSIONS
from ._sse_py import SSEDecoder

__all__ = ("SSEDecoder",)

if USE_EXTENSIONS:
    try:
        from ._sse_c import SSEDecoder  # type: ignore[assignment]
    except ImportError:  # no compiled core on this platform: the twin serves
        pass
