"""Selects the OpenAI chunk decoder: compiled (``_oai_c``) unless disabled, else the twin."""

from __future__ import annotations

from .._native import USE_EXTENSIONS
from ._oai_py import ChunkDecoder

__all__ = ("ChunkDecoder",)

if USE_EXTENSIONS:
    try:
        from ._oai_c import ChunkDecoder  # type: ignore[assignment]
    except ImportError:  # no compiled core on this platform: the twin serves
        pass
