"""mlpe-fast: a load generator for MLPerf Endpoints whose numbers nobody has to doubt.

The public surface is listed in ``__all__``; everything else is private.
``NATIVE`` is True when the compiled core is in use (it is on CPython unless
``MLPE_FAST_NO_EXTENSIONS`` is set).
"""

from ._version import __version__
from .errors import LocalProtocolError, MlpeError, ProtocolError
from .wire import (
    NATIVE,
    BodyData,
    ChunkDecoder,
    ChunkError,
    Delta,
    FirstToken,
    H1Decoder,
    ResponseComplete,
    ResponseDecoder,
    ResponseHead,
    ResponseSummary,
    SSEDecoder,
    SSEEvent,
    TokenGaps,
    ToolCall,
    ToolCallDelta,
)

__all__ = (
    # version and implementation
    "NATIVE",
    "__version__",
    # errors
    "LocalProtocolError",
    "MlpeError",
    "ProtocolError",
    # sans-IO decoders
    "ChunkDecoder",
    "H1Decoder",
    "ResponseDecoder",
    "SSEDecoder",
    # events and records
    "BodyData",
    "ChunkError",
    "Delta",
    "FirstToken",
    "ResponseComplete",
    "ResponseHead",
    "ResponseSummary",
    "SSEEvent",
    "TokenGaps",
    "ToolCall",
    "ToolCallDelta",
)
