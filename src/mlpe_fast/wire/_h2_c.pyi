"""Type stub of the compiled HTTP/2 DATA de-framer (``_h2_c.pyx``); the same
API as the pure-Python twin ``_h2_py``, with compiled decoders."""

from typing_extensions import Buffer

from ._response_c import ResponseDecoder

__all__ = (
    "DONE",
    "ERROR",
    "FIRST",
    "FRAME_HEADER_SIZE",
    "PROTOCOL_ERROR",
    "DataDeframer",
    "window_update",
)

FIRST: int
DONE: int
ERROR: int
PROTOCOL_ERROR: int
FRAME_HEADER_SIZE: int

def window_update(stream_id: int, increment: int) -> bytes: ...

class DataDeframer:
    def __init__(
        self,
        *,
        max_frame_size: int = 16384,
        connection_window: int = 65535,
        stream_window: int = 65535,
    ) -> None: ...
    def register(self, stream_id: int, decoder: ResponseDecoder) -> None: ...
    def unregister(self, stream_id: int) -> bool: ...
    @property
    def streams(self) -> int: ...
    def feed(self, data: Buffer, t_ns: int) -> int: ...
    def take_events(self) -> list[tuple[int, int]]: ...
    def take_events_ending(self) -> list[tuple[int, int, int]]: ...
    def take_passthrough(self) -> bytes: ...
    def take_window_updates(self) -> bytes: ...
    @property
    def error(self) -> int: ...
    @property
    def error_pos(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def max_frame_size(self) -> int: ...
