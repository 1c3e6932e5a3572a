"""Type stub of the compiled BPE counter (``_bpe_c.pyx``); the same counting
API as the pure-Python twin ``fast_bpe.FastBPECounter``."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ("FAMILIES", "NativeBPECounter")

FAMILIES: dict[str, int]
MAX_WORD: int

class NativeBPECounter:
    family: str
    implementation: str
    def __init__(
        self,
        family: str,
        tokenize: Callable[[str], Sequence[Any]],
        byte_level: Mapping[int, str],
        twin: Any,
        literals: Iterable[str] = (),
        cache_limit: int = 1000000,
        cache_bytes: int = 67108864,
    ) -> None: ...
    @property
    def cached_words(self) -> int: ...
    @property
    def cache_clears(self) -> int: ...
    def clear_cache(self) -> None: ...
    def pre_token_ends(self, text: str) -> list[int]: ...
    def count(self, text: str) -> int | None: ...
    def count_with_suffix(self, text: str, boundary: int) -> tuple[int, int] | None: ...
    def count_pairs(
        self, texts: Sequence[str], boundaries: Sequence[int]
    ) -> list[tuple[int, int] | None]: ...
