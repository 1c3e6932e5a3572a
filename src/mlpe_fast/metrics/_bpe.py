"""Selects the exact BPE counter: the C scanner and cache (``_bpe_c``, over
``csrc/mlpe_bpe.c``) unless disabled or the pre-tokenizer is not one it
hand-codes, else the pure-Python twin :class:`~.fast_bpe.FastBPECounter`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .._native import USE_EXTENSIONS
from .fast_bpe import BYTE_LEVEL_ASCII, DEFAULT_CACHE_LIMIT, FastBPECounter

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tokenizers import Tokenizer

    from ._bpe_c import NativeBPECounter as _Native

__all__ = ("DEFAULT_CACHE_BYTES", "BPECounter", "NativeBPECounter", "bpe_counter")

#: Key bytes of the C cache past which it is cleared (docs/performance.md#limits).
DEFAULT_CACHE_BYTES = 64 << 20

#: The C counter's class, or None where it is not built or not wanted
#: (``MLPE_FAST_NO_EXTENSIONS``).
NativeBPECounter: type[_Native] | None = None
if USE_EXTENSIONS:
    try:
        from ._bpe_c import NativeBPECounter as _built
    except ImportError:  # no compiled core on this platform: the twin serves
        pass
    else:
        NativeBPECounter = _built


class BPECounter(Protocol):
    """What both implementations offer (the twin's docstrings say what each does)."""

    implementation: str

    @property
    def cached_words(self) -> int: ...
    def count(self, text: str) -> int | None: ...
    def count_with_suffix(self, text: str, boundary: int) -> tuple[int, int] | None: ...
    def count_pairs(
        self, texts: Sequence[str], boundaries: Sequence[int]
    ) -> list[tuple[int, int] | None]: ...
    def pre_token_ends(self, text: str) -> list[int]: ...


def bpe_counter(
    tokenizer: Tokenizer,
    *,
    cache_limit: int = DEFAULT_CACHE_LIMIT,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    native: bool | None = None,
) -> BPECounter | None:
    """The exact counter for ``tokenizer``, or None if it is not eligible
    (:func:`~.fast_bpe.ineligibility_reason` says why).

    ``native`` None takes the C counter where it is built and knows the
    pre-tokenizer; False always the twin; True the C counter or
    ``ValueError`` (for tests that must exercise it)."""
    twin = FastBPECounter.from_tokenizer(tokenizer, cache_limit=cache_limit)
    if twin is None or native is False:
        return twin
    if NativeBPECounter is None or twin.family is None:
        if native:
            raise ValueError(
                "no native counter: "
                + ("the core is not built" if NativeBPECounter is None else "unknown family")
            )
        return twin
    counter: BPECounter = NativeBPECounter(
        twin.family,
        twin.tokenize,
        BYTE_LEVEL_ASCII,
        twin,
        twin.literals,
        cache_limit,
        cache_bytes,
    )
    return counter
