"""Exceptions of mlpe-fast, classified by who is at fault.

* :class:`ProtocolError` -- the peer sent bytes that break a protocol.  Every
  subclass carries a numeric ``code`` (shared with the C core, see
  ``csrc/mlpe_common.h``) and the absolute byte ``position`` at which the input
  became invalid.  A decoder that raised one stays in its error state: every
  later call raises an equal error again.
* :class:`LocalProtocolError` -- the caller misused an API (fed a decoder after
  end of stream, say).

Any other exception escaping a decoder is a bug.  Codes 401-405 are not
exceptions: they describe one bad SSE event, which is reported as a
:class:`mlpe_fast.wire.events.ChunkError` while its neighbours still decode.
"""

from __future__ import annotations

import enum

__all__ = (
    "BodyTooLarge",
    "NoEvents",
    "ChunkSizeTooLong",
    "ErrorCode",
    "EventTooLarge",
    "HeadTooLarge",
    "IncompleteResponse",
    "InvalidChunkData",
    "InvalidChunkSize",
    "InvalidContentLength",
    "InvalidHeader",
    "InvalidStatusLine",
    "LineTooLong",
    "LocalProtocolError",
    "MlpeError",
    "ProtocolError",
    "SetupError",
    "TextNotCumulative",
    "TooManyHeaders",
    "UnexpectedData",
    "UnexpectedUpgrade",
    "UnsupportedContentEncoding",
    "UnsupportedTransferCoding",
    "UnsupportedVersion",
    "UsageError",
    "error_from_code",
    "error_name",
)


class ErrorCode(enum.IntEnum):
    """Numeric error codes, identical to ``enum mlpe_err`` in the C core."""

    OK = 0
    STATUS_LINE = 101
    VERSION = 102
    HEADER = 103
    LINE_TOO_LONG = 104
    HEAD_TOO_LARGE = 105
    TOO_MANY_HEADERS = 106
    CONTENT_LENGTH = 107
    TRANSFER_ENCODING = 108
    CHUNK_SIZE = 109
    CHUNK_SIZE_TOO_LONG = 110
    CHUNK_DATA = 111
    INCOMPLETE = 112
    UNEXPECTED_DATA = 113
    UPGRADE = 114
    EVENT_TOO_LARGE = 201
    CONTENT_ENCODING = 301
    BODY_TOO_LARGE = 302
    NO_EVENTS = 303
    TEXT_NOT_CUMULATIVE = 304
    JSON_SYNTAX = 401
    JSON_UTF8 = 402
    JSON_DEPTH = 403
    CHUNK_SHAPE = 404
    ENDPOINT_ERROR = 405
    HTTP_STATUS = 501
    NOMEM = 901


class MlpeError(Exception):
    """Base class of every error mlpe-fast raises on purpose."""


class LocalProtocolError(MlpeError, RuntimeError):
    """The caller used an API out of order (not the peer's fault)."""


class UsageError(MlpeError, ValueError):
    """The user asked for something that cannot run: a bad flag or YAML value,
    a missing or malformed dataset file.

    The message is one line that names the flag, key or file and the bad
    value; the CLI prints it and exits with status 2 (the reference client's
    "input validation" exit code).
    """


class SetupError(MlpeError, RuntimeError):
    """mlpe-fast could not get ready to measure: the simulated endpoint or an
    engine process did not start (the CLI's exit status 3)."""


class ProtocolError(MlpeError, ValueError):
    """The peer sent bytes that break the protocol.

    Attributes:
        code: the :class:`ErrorCode` of the failure.
        position: absolute offset of the offending byte in the stream fed to
            the decoder that failed (0 is the first byte ever fed).
    """

    code: ErrorCode = ErrorCode.OK
    description = "protocol error"

    def __init__(self, position: int, detail: str = "") -> None:
        self.position = position
        self.detail = detail
        message = f"{self.description} at byte {position}"
        if detail:
            message = f"{message}: {detail}"
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.position, self.detail))

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and self.position == other.position
            and self.detail == other.detail
        )

    def __hash__(self) -> int:
        return hash((type(self), self.position, self.detail))


# HTTP/1.1 framing (RFC 9112) ------------------------------------------------


class InvalidStatusLine(ProtocolError):
    code = ErrorCode.STATUS_LINE
    description = "malformed HTTP status line"


class UnsupportedVersion(ProtocolError):
    code = ErrorCode.VERSION
    description = "unsupported HTTP version"


class InvalidHeader(ProtocolError):
    code = ErrorCode.HEADER
    description = "malformed header field"


class LineTooLong(ProtocolError):
    code = ErrorCode.LINE_TOO_LONG
    description = "line longer than max_line"


class HeadTooLarge(ProtocolError):
    code = ErrorCode.HEAD_TOO_LARGE
    description = "response head larger than max_head"


class TooManyHeaders(ProtocolError):
    code = ErrorCode.TOO_MANY_HEADERS
    description = "more header fields than max_headers"


class InvalidContentLength(ProtocolError):
    code = ErrorCode.CONTENT_LENGTH
    description = "invalid or conflicting Content-Length"


class UnsupportedTransferCoding(ProtocolError):
    code = ErrorCode.TRANSFER_ENCODING
    description = "unsupported transfer coding"


class InvalidChunkSize(ProtocolError):
    code = ErrorCode.CHUNK_SIZE
    description = "malformed chunk-size line"


class ChunkSizeTooLong(ProtocolError):
    code = ErrorCode.CHUNK_SIZE_TOO_LONG
    description = "chunk size has too many digits"


class InvalidChunkData(ProtocolError):
    code = ErrorCode.CHUNK_DATA
    description = "chunk data not followed by CRLF"


class IncompleteResponse(ProtocolError):
    code = ErrorCode.INCOMPLETE
    description = "connection closed before the response was complete"


class UnexpectedData(ProtocolError):
    code = ErrorCode.UNEXPECTED_DATA
    description = "bytes after the end of a response on a closing connection"


class UnexpectedUpgrade(ProtocolError):
    code = ErrorCode.UPGRADE
    description = "unrequested 101 Switching Protocols"


# SSE (WHATWG event-stream) ----------------------------------------------------


class EventTooLarge(ProtocolError):
    code = ErrorCode.EVENT_TOO_LARGE
    description = "SSE event larger than max_event"


# Whole responses ----------------------------------------------------------------


class UnsupportedContentEncoding(ProtocolError):
    code = ErrorCode.CONTENT_ENCODING
    description = "unrequested Content-Encoding"


class BodyTooLarge(ProtocolError):
    code = ErrorCode.BODY_TOO_LARGE
    description = "response body larger than max_body"


class NoEvents(ProtocolError):
    code = ErrorCode.NO_EVENTS
    description = "the event stream ended without a single event"


#: What TextNotCumulative says beside its position: the likely cause.
NOT_CUMULATIVE_HINT = (
    "SGLang sends the whole text so far in every event unless the server was started with "
    "--incremental-streaming-output, whose deltas mlpe-fast does not read"
)


class TextNotCumulative(ProtocolError):
    """An SGLang event whose text does not start with the text before it
    (rule R11 of ``csrc/mlpe_response.h``); ``position`` is a byte of the
    text: where the two texts part."""

    code = ErrorCode.TEXT_NOT_CUMULATIVE
    description = "SGLang event text parts from the text streamed before it"

    def __init__(self, position: int, detail: str = "") -> None:
        super().__init__(position, detail or NOT_CUMULATIVE_HINT)


_BY_CODE: dict[int, type[ProtocolError]] = {
    cls.code: cls
    for cls in (
        InvalidStatusLine,
        UnsupportedVersion,
        InvalidHeader,
        LineTooLong,
        HeadTooLarge,
        TooManyHeaders,
        InvalidContentLength,
        UnsupportedTransferCoding,
        InvalidChunkSize,
        ChunkSizeTooLong,
        InvalidChunkData,
        IncompleteResponse,
        UnexpectedData,
        UnexpectedUpgrade,
        EventTooLarge,
        UnsupportedContentEncoding,
        BodyTooLarge,
        NoEvents,
        TextNotCumulative,
    )
}

# Messages of the per-event codes, shared by both implementations so that a
# ChunkError reads the same whichever produced it.
CHUNK_ERROR_MESSAGES: dict[int, str] = {
    ErrorCode.JSON_SYNTAX: "event data is not valid JSON",
    ErrorCode.JSON_UTF8: "event data is not valid UTF-8",
    ErrorCode.JSON_DEPTH: "event data nests JSON too deeply",
    ErrorCode.CHUNK_SHAPE: "unexpected type for",
    ErrorCode.ENDPOINT_ERROR: "endpoint sent an error",
}


def error_name(code: int) -> str:
    """The class name a record reports for a summary's ``error_code``."""
    if code == ErrorCode.HTTP_STATUS:
        return "HTTPStatusError"
    cls = _BY_CODE.get(code)
    return cls.__name__ if cls is not None else ErrorCode(code).name


def error_from_code(code: int, position: int, detail: str = "") -> Exception:
    """Returns the exception for a terminal C error code (the one mapping point).

    ``MLPE_E_NOMEM`` becomes :class:`MemoryError`; an unknown code is a bug
    and becomes :class:`AssertionError` so that tests catch it.
    """
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(position, detail)
    if code == ErrorCode.NOMEM:
        return MemoryError("mlpe-fast: out of memory in the native core")
    return AssertionError(f"mlpe-fast: unknown native error code {code}")
