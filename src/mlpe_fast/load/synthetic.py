"""Synthetic prompts: random words of exact token counts (spec:
:mod:`.synthetic_spec`).

A prompt of N tokens is N ids drawn from a pool of the tokenizer's *word
tokens* -- ids that stand for one ASCII word, alone and with a leading
space -- and its text is what the ids decode to.  The hard part is that
text is re-tokenized: byte-pair encoding merges across the joins, so N
random ids seldom decode to a text of N tokens.  Word tokens avoid that
where the tokenizer splits words before merging (the byte-level BPEs of
Llama 3, Qwen, gpt-oss and DeepSeek, whose pre-tokenizer cuts before a
space; SentencePiece's ``▁word`` pieces): a text of space-led words is
encoded word by word, so each word is its own token again.  Every prompt
is nevertheless re-encoded and compared id for id; where the two differ
(a tokenizer that merges across spaces), the id at the first difference
is drawn again, up to :data:`REPAIRS` times, else the dataset is refused
in one line.  A prompt that passes re-tokenizes to exactly its ids: N
tokens for the client's counter and for an endpoint with the same
tokenizer.

How prompts are sent (``SyntheticSpec.form``, set from ``--api-type``):

* ``ids`` on ``/v1/completions``: ``prompt: [id, ...]``, exact by
  construction -- no template, no re-tokenization on the server; the
  ISL is the number of ids.  The shared prefix is the first ``prefix``
  ids of every prompt, and the salt goes right after it (spec §2.5:
  between the shared part and the query's own; ``load/token_salt.py``).
* ``text`` on the chat route: the shared prefix is the system message
  (``prefix`` tokens of text) and the rest the user message, each of
  exactly its tokens when encoded alone without special tokens, which is
  what a chat template wraps; the template's own tokens (role headers,
  the generation prompt) come on top, and the ISL the run reports counts
  them (spec §1.2: the prompt as sent).

The salt is the run's (on by default for performance, spec §2.5) and adds
its own tokens (``[`` + 16 hex digits + ``] ``, about 10) to each query:
with ``--no-salt`` the ISL on the wire is the drawn one exactly.

Randomness: ``random.Random`` seeded with the spec's seed and a stream name
(ISL, OSL, prefix, tokens: changing the OSL leaves the prompts alone), so
every process that builds the dataset from the same spec and tokenizer
builds the same prompts -- an engine process or Ray actor loads the
dataset itself (``scale/engine_process.py``).  A spec is built once per
process (:func:`synthetic_prompts` is cached).

Cost (2-core development host, a 2,000-token byte-level BPE): 1,000 prompts
of about 1,024 tokens take about 1 s, before the load -- the re-encoding of
a million tokens is most of it; the pool is made once per tokenizer.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import UsageError
from .synthetic_spec import SyntheticSpec

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ("REPAIRS", "SyntheticPrompts", "WordPool", "synthetic_prompts", "word_pool")

#: How many times one prompt's ids may be drawn again before it is refused.
REPAIRS = 200
#: Fewer word tokens than this and the space-led ones are not used alone
#: (a character-level vocabulary has none: its letters are the pool).
_MIN_POOL = 8


class SyntheticPrompts(msgspec.Struct, frozen=True, gc=False):
    """A synthetic dataset's prompts, each verified (module docstring).

    ``ids[i]`` are prompt i's ids, its shared prefix first; ``texts[i]`` the
    text of its own part (the ids after the prefix), ``prefix_text`` the
    prefix's; ``output_tokens[i]`` its output cap.
    """

    ids: tuple[tuple[int, ...], ...]
    texts: tuple[str, ...]
    prefix_ids: tuple[int, ...]
    prefix_text: str
    output_tokens: tuple[int, ...]


class WordPool:
    """A tokenizer's word tokens and how their ids become text.

    ``first``: ids that may open a text (a word without a leading space,
    where the vocabulary has enough); ``rest``: ids that follow another
    (space-led words where the vocabulary has enough); ``joined``: whether
    a text is its ids' single decodings joined (a vocabulary without a
    decoder decodes with spaces between the tokens) rather than the ids
    decoded together.
    """

    def __init__(
        self, tokenizer: Tokenizer, first: Sequence[int], rest: Sequence[int], joined: bool
    ) -> None:
        self.tokenizer = tokenizer
        self.first = list(first)
        self.rest = list(rest)
        self.joined = joined
        self._pieces: dict[int, str] = {}

    def text(self, ids: Sequence[int]) -> str:
        """The text of ``ids``."""
        if not self.joined:
            return self.tokenizer.decode(list(ids), skip_special_tokens=False)
        pieces = self._pieces
        out = []
        for i in ids:
            piece = pieces.get(i)
            if piece is None:
                piece = pieces[i] = self.tokenizer.decode([i], skip_special_tokens=False)
            out.append(piece)
        return "".join(out)

    def draw(self, rng: random.Random, n: int, *, opening: bool) -> list[int]:
        """``n`` ids, the first from :attr:`first` when ``opening``."""
        if n <= 0:
            return []
        if opening:
            return [rng.choice(self.first), *rng.choices(self.rest, k=n - 1)]
        return rng.choices(self.rest, k=n)


@functools.lru_cache(maxsize=4)
def word_pool(tokenizer_name: str) -> WordPool:
    """The word tokens of the tokenizer ``tokenizer_name`` (cached).

    Raises:
        UsageError: the tokenizer cannot be loaded, or has too few word
            tokens to build prompts from.
    """
    from ..metrics.tokens import load_tokenizer  # see load/token_salt.py: no import cycle

    tokenizer = load_tokenizer(tokenizer_name)
    special = set(tokenizer.get_added_tokens_decoder())
    candidates: list[tuple[int, str]] = []
    ids = [i for i in range(tokenizer.get_vocab_size(with_added_tokens=False)) if i not in special]
    pieces = tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
    for i, piece in zip(ids, pieces, strict=True):
        word = piece[1:] if piece.startswith(" ") else piece
        if word.isascii() and word.isalpha():
            candidates.append((i, piece))
    encoded = _encode_batch(tokenizer, [piece for _, piece in candidates])
    spaced: list[int] = []
    bare: list[int] = []
    for (i, piece), encoding in zip(candidates, encoded, strict=True):
        if list(encoding.ids) == [i]:  # the piece is that one id again
            (spaced if piece.startswith(" ") else bare).append(i)
    every = sorted(bare + spaced)
    if len(every) < 2:
        raise UsageError(
            f"tokenizer {tokenizer_name}: too few word tokens ({len(every)}) to build synthetic "
            "prompts from"
        )
    rest = spaced if len(spaced) >= _MIN_POOL else every
    first = bare if len(bare) >= _MIN_POOL else every
    probe = [first[0], *rest[: min(len(rest), 16)]]
    decoded = tokenizer.encode(
        tokenizer.decode(probe, skip_special_tokens=False), add_special_tokens=False
    ).ids
    return WordPool(tokenizer, first, rest, joined=list(decoded) != probe)


@functools.lru_cache(maxsize=8)
def synthetic_prompts(spec: SyntheticSpec) -> SyntheticPrompts:
    """The prompts of ``spec`` (module docstring), built once per process.

    Raises:
        UsageError: the tokenizer cannot be loaded or has no word tokens,
            or a prompt cannot be made to re-tokenize to its length.
    """
    if spec.tokenizer is None or spec.seed is None or spec.form is None:
        raise ValueError("a synthetic spec is built once the rules filled it in")
    pool = word_pool(spec.tokenizer)
    origin = f"dataset {spec.text}: tokenizer {spec.tokenizer}"
    streams = {
        name: random.Random(f"mlpe-fast synthetic {spec.seed} {name}")
        for name in ("isl", "osl", "prefix", "tokens")
    }
    isl = [spec.isl.draw(streams["isl"], spec.prefix + 1) for _ in range(spec.samples)]
    osl = [spec.osl.draw(streams["osl"], 1, spec.osl_cap) for _ in range(spec.samples)]
    prefix = pool.draw(streams["prefix"], spec.prefix, opening=True)
    prefix = _verified(pool, [prefix], 0, streams["prefix"], origin)[0] if prefix else []
    rng = streams["tokens"]
    # Text prompts' own part is a message of its own (it opens a text); an
    # id prompt's follows the prefix, unless there is none.
    opening = spec.form == "text" or not prefix
    own = [pool.draw(rng, n - spec.prefix, opening=opening) for n in isl]
    if spec.form == "ids":
        whole = _verified(pool, [prefix + ids for ids in own], len(prefix), rng, origin)
        own = [ids[len(prefix) :] for ids in whole]
    else:
        own = _verified(pool, own, 0, rng, origin)
    return SyntheticPrompts(
        ids=tuple(tuple(prefix + ids) for ids in own),
        texts=tuple(pool.text(ids) for ids in own),
        prefix_ids=tuple(prefix),
        prefix_text=pool.text(prefix),
        output_tokens=tuple(osl),
    )


def _verified(
    pool: WordPool,
    prompts: list[list[int]],
    fixed: int,
    rng: random.Random,
    origin: str,
) -> list[list[int]]:
    """``prompts`` with every one re-encoding to its own ids: where one does
    not, the id at the first difference (never one of the first ``fixed``,
    the shared prefix) is drawn again (module docstring).

    Raises:
        UsageError: a prompt still differs after :data:`REPAIRS` draws.
    """
    tokenizer = pool.tokenizer
    pending = list(range(len(prompts)))
    for _ in range(REPAIRS + 1):
        texts = [pool.text(prompts[i]) for i in pending]
        encoded = _encode_batch(tokenizer, texts)
        still = []
        for i, encoding in zip(pending, encoded, strict=True):
            ids, again = prompts[i], list(encoding.ids)
            if again == ids:
                continue
            at = next((k for k, (x, y) in enumerate(zip(ids, again, strict=False)) if x != y), None)
            at = min(len(ids), len(again)) if at is None else at
            at = max(fixed, min(at, len(ids) - 1))
            # The join before the difference may be at fault: draw both.
            for k in sorted({at, max(fixed, at - 1)}):
                ids[k] = rng.choice(pool.first if k == 0 else pool.rest)
            still.append(i)
        if not still:
            return prompts
        pending = still
    first = pending[0]
    raise UsageError(
        f"{origin} re-tokenizes prompt {first} ({len(prompts[first])} ids) to other ids "
        f"after {REPAIRS} draws: its words merge across spaces, so no text of exact length "
        "could be built"
    )


def _encode_batch(tokenizer: Tokenizer, texts: list[str]) -> list[Any]:
    """``texts`` encoded without special tokens, without the offsets where
    ``tokenizers`` can leave them out (``encode_batch_fast``: twice as fast)."""
    encode = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
    encoded: list[Any] = encode(texts, add_special_tokens=False)
    return encoded
