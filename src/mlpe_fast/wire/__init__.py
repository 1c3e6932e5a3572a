"""The sans-IO wire core: bytes and arrival times in, events out.

Each decoder has a compiled implementation (C in ``csrc/`` under a Cython
binding, ``_<name>_c``) and a pure-Python twin (``_<name>_py``) with the same
API, results and errors; ``_<name>.py`` picks one.
"""

from __future__ import annotations

from ._h1 import H1Decoder
from ._oai import ChunkDecoder
from ._response import ResponseDecoder
from ._sse import SSEDecoder
from .events import (
    BodyData,
    ChunkError,
    Delta,
    FirstToken,
    ResponseComplete,
    ResponseHead,
    ResponseSummary,
    SSEEvent,
    TokenGaps,
    ToolCall,
    ToolCallDelta,
)

__all__ = (
    "BodyData",
    "ChunkDecoder",
    "ChunkError",
    "Delta",
    "FirstToken",
    "H1Decoder",
    "ResponseComplete",
    "ResponseDecoder",
    "ResponseHead",
    "ResponseSummary",
    "SSEDecoder",
    "SSEEvent",
    "TokenGaps",
    "ToolCall",
    "ToolCallDelta",
)

NATIVE: bool = all(
    cls.__module__.endswith("_c") for cls in (H1Decoder, SSEDecoder, ChunkDecoder, ResponseDecoder)
)
