"""Stub of the compiled HTTP/1.1 response framing; the behaviour is documented
in its pure-Python twin, mlpe_fast.wire._h1_py."""

from typing_extensions import Buffer

from .events import BodyData, ResponseComplete, ResponseHead

__all__ = ("H1Decoder",)

class H1Decoder:
    def __init__(
        self,
        max_line: int = 8192,
        max_head: int = 65536,
        max_headers: int = 128,
        max_chunk_size_digits: int = 16,
    ) -> None: ...
    @property
    def keep_alive(self) -> bool: ...
    @property
    def offset(self) -> int: ...
    def feed(self, data: Buffer, t_ns: int) -> list[ResponseHead | BodyData | ResponseComplete]: ...
    def feed_eof(self, t_ns: int) -> list[ResponseHead | BodyData | ResponseComplete]: ...
