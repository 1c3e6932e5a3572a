"""Selects the HTTP/2 DATA de-framer: compiled (``_h2_c``) unless disabled, else the twin.

The compiled de-framer takes the compiled decoders of ``_response``, which
is compiled whenever this is (``_h2_c`` imports ``_response_c``); the twin
takes either kind.
"""

from __future__ import annotations

from .._native import USE_EXTENSIONS
from ._h2_py import (
    DONE,
    ERROR,
    FIRST,
    FRAME_HEADER_SIZE,
    PROTOCOL_ERROR,
    DataDeframer,
    window_update,
)

__all__ = (
    "DONE",
    "ERROR",
    "FIRST",
    "FRAME_HEADER_SIZE",
    "PROTOCOL_ERROR",
    "DataDeframer",
    "window_update",
)

if USE_EXTENSIONS:
    try:
        from ._h2_c import DataDeframer, window_update  # type: ignore[assignment]
    except ImportError:  # no compiled core on this platform: the twin serves
        pass
