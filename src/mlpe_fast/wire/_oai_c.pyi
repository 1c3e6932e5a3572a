from typing_extensions import Buffer

from .events import ChunkError, Delta

__all__ = ("ChunkDecoder",)

class ChunkDecoder:
    def __init__(self, dialect: str = ...) -> None: ...
    def decode(self, data: Buffer, t_ns: int) -> Delta | ChunkError: ...
