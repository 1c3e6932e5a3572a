from collections.abc import Sequence

from .events import FirstToken, ResponseComplete, ResponseHead, ResponseSummary

_Buffer = bytes | bytearray | memoryview

class ResponseDecoder:
    def __init__(
        self,
        *,
        max_line: int = ...,
        max_head: int = ...,
        max_headers: int = ...,
        max_chunk_size_digits: int = ...,
        max_event: int = ...,
        max_body: int = ...,
        record_chunk_times: bool = ...,
        gap_histogram: bool = ...,
        dialect: str = ...,
    ) -> None: ...
    def feed(
        self, data: _Buffer, t_ns: int
    ) -> list[ResponseHead | FirstToken | ResponseComplete]: ...
    def feed_eof(self, t_ns: int) -> list[ResponseHead | FirstToken | ResponseComplete]: ...
    def set_head(
        self, status: int, headers: Sequence[tuple[bytes, bytes]], t_ns: int
    ) -> list[ResponseHead | FirstToken | ResponseComplete]: ...
    def feed_body(
        self, data: _Buffer, t_ns: int
    ) -> list[ResponseHead | FirstToken | ResponseComplete]: ...
    def end_body(self, t_ns: int) -> list[ResponseHead | FirstToken | ResponseComplete]: ...
    def summary(self) -> ResponseSummary: ...
