"""The per-query salt (spec §2.5, rules §2.9.5.1).

Each performance query carries 64 bits from a seeded generator, made when
the query is built (never stored in the dataset), placed between the shared
system prompt and the per-query user text so that no two queries share a
cacheable prefix beyond the system prompt.

Format and generator are the reference client's, so that a run with the same
seed sends the same salts (``mlcommons/endpoints:src/inference_endpoint/
dataset_manager/dataset.py``, ``Dataset._apply_salt``):

* generator: ``random.Random(seed)``; salt number k is the k-th
  ``rng.randbytes(8).hex()`` (16 lower-case hex digits);
* text: ``"[" + salt + "] " + prompt``.

Seed: the reference salts only its warmup phase, with
``random.Random(warmup_random_seed + 2)``, and a pinned MLPerf ruleset sets
``warmup_random_seed`` to the sample-index seed
(``config/schema.py``, ``_apply_ruleset_seed_overrides``;
``commands/benchmark/execute.py``, ``_build_phases``).  mlpe-fast derives
its salt seed the same way: ``sample_index_seed + 2`` unless configured
(:func:`default_salt_seed`), so with seed set A the salt stream is the one
the reference would draw.

Speed: ``randbytes(8 * n)`` yields exactly the bytes of n successive
``randbytes(8)`` calls (both take 32-bit words from the Mersenne Twister in
order, little-endian), so salts are drawn in blocks and sliced: one call per
block instead of one per query, with the same values.
"""

from __future__ import annotations

import random

__all__ = ("SALT_BYTES", "SALT_PREFIX_LEN", "Salter", "default_salt_seed", "salt_prompt")

SALT_BYTES = 8
"""Entropy per query: 64 bits, the rules' minimum and the reference's size."""

SALT_PREFIX_LEN = 2 * SALT_BYTES + 3
"""Length of ``"[" + 16 hex + "] "``: what salting adds to every prompt."""

_BLOCK = 512  # salts drawn per refill (8 KiB of randomness)


def default_salt_seed(sample_index_seed: int) -> int:
    """The salt seed mlpe-fast uses when none is configured (see module docstring)."""
    return sample_index_seed + 2


def salt_prompt(salt_hex: str, prompt: str) -> str:
    """The salted prompt text, as the reference builds it."""
    return f"[{salt_hex}] {prompt}"


class Salter:
    """A deterministic stream of salts.

    Successive calls to :meth:`next_hex` or :meth:`next_prefix` (they share
    one stream) return the reference's k-th salt for k = 0, 1, 2, ...
    """

    __slots__ = ("_hex", "_pos", "_rng", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(seed)
        self._hex = b""
        self._pos = 0

    def _refill(self) -> None:
        self._hex = self._rng.randbytes(SALT_BYTES * _BLOCK).hex().encode("ascii")
        self._pos = 0

    def next_hex_bytes(self) -> bytes:
        """The next salt: 16 lower-case hex digits, as ASCII bytes."""
        pos = self._pos
        if pos >= len(self._hex):
            self._refill()
            pos = 0
        self._pos = pos + 2 * SALT_BYTES
        return self._hex[pos : pos + 2 * SALT_BYTES]

    def next_hex(self) -> str:
        """The next salt as text: ``random.Random(seed).randbytes(8).hex()``."""
        return self.next_hex_bytes().decode("ascii")

    def next_prefix(self) -> bytes:
        """The next salt as the bytes spliced before a prompt: ``b"[<hex>] "``."""
        return b"[" + self.next_hex_bytes() + b"] "
