"""The salt inside a token-id prompt (spec §2.5, issue 21).

Spec §2.5: the salt goes "between the shared system prompt and the
per-query user context; if the client sends token IDs, the salt must be in
the token stream".  A pre-tokenized sample (``parser.input_tokens``) is
sent as ids, so its salt is sent as ids too:

* **what**: the text salt of :mod:`.salt` (``"[" + 16 hex + "] "``, the
  same 64 bits from the same seeded :class:`~.salt.Salter`), encoded on
  its own by the run's tokenizer without special tokens.  Encoded alone,
  the salt is a whole number of tokens that cannot merge with its
  neighbours (ids, unlike text, are never re-tokenized); it starts with
  ``[`` and ends with a space so that the decoded prompt reads as the text
  path's salted prompt.  :meth:`TokenSalt.check_seam` proves it per
  sample: the ids as sent decode to the sample's text with the salt text
  inserted at the seam, else the sample is refused.
* **where** (``--token-salt user``, the default; a synthetic dataset's
  salt goes after its shared prefix instead, ``load/synthetic.py``): right after the last
  occurrence, in the sample's ids, of the ids that open the user turn.
  That marker comes from the model's chat template (the template beside
  the tokenizer): a system + user conversation with sentinel contents is
  rendered, and the text between the two sentinels is tokenized; the
  marker runs from the special token that opens the user header to the
  header's last special token (Harmony ``<|start|>user<|message|>``, Llama 3
  ``<|start_header_id|>user<|end_header_id|>``, DeepSeek-R1
  ``<\uff5cUser\uff5c>``, full-width bars), or to the header's end when the
  role name follows that token (ChatML ``<|im_start|>user\\n``).  The
  marker must not also open the assistant turn (it would then be found
  after the user context): the rendering with the generation prompt is
  checked.
  ``--token-salt start`` puts the salt before the first id instead, which
  needs no template but costs the endpoint the prefix cache of the system
  prompt.

Nothing is guessed: no tokenizer template, no special token in the user
header, or a sample without the marker is refused at load time in one line
naming the dataset and the remedy (:class:`~mlpe_fast.errors.UsageError`).
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ..errors import UsageError
from .salt import SALT_BYTES, salt_prompt

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from ..metrics.chat_template import ChatTemplate
    from .dataset import Dataset

__all__ = (
    "TOKEN_SALT_REMEDY",
    "TokenSalt",
    "TokenSalting",
    "TokenSaltPlacement",
    "harmony_token_salt",
    "token_salt_of",
    "token_salting",
    "user_turn_marker",
)

TokenSaltPlacement = Literal["user", "start"]

TOKEN_SALT_REMEDY = (
    "add --no-salt, or --token-salt start (the salt before the first id: "
    "the endpoint then cannot reuse the system prompt's prefix cache)"
)

# Contents no chat template writes itself, found again in its rendering.
_SYSTEM_SENTINEL = "\x00mlpe-fast-system\x00"
_USER_SENTINEL = "\x00mlpe-fast-user\x00"

# A probe salt for the seam check: the actual salts differ only in their
# hex digits, which sit between "[" and "] " and so never reach the seams.
_PROBE_HEX = b"0" * (2 * SALT_BYTES)

# How many ids on either side of the seam are decoded to check it: the
# marker ends at a special token or whitespace, so a merge across the
# seam, if any, involves the ids next to it.
_SEAM_WINDOW = 16


def _special_ids(tokenizer: Tokenizer) -> frozenset[int]:
    return frozenset(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special)


def user_turn_marker(template: ChatTemplate, tokenizer: Tokenizer) -> tuple[int, ...]:
    """The ids that open the user turn in ``template``'s conversations
    (module docstring).

    Raises:
        ValueError: the template renders no user header that special
            tokens mark, or one that also opens the assistant turn (the
            reason, for the caller's one-line message).
    """
    from ..metrics.chat_template import ChatTemplateError  # see token_salt_of

    conversation = [
        {"role": "system", "content": _SYSTEM_SENTINEL},
        {"role": "user", "content": _USER_SENTINEL},
    ]
    try:
        text = template.render(conversation, add_generation_prompt=False)
        prompted = template.render(conversation, add_generation_prompt=True)
    except ChatTemplateError as error:
        raise ValueError(
            f"its chat template cannot render a system + user conversation ({error})"
        ) from error
    system_end, user_start = text.find(_SYSTEM_SENTINEL), text.find(_USER_SENTINEL)
    if system_end < 0 or user_start < system_end:
        raise ValueError("its chat template does not write the system prompt before the user's")
    header = text[system_end + len(_SYSTEM_SENTINEL) : user_start]
    ids = tokenizer.encode(header, add_special_tokens=False).ids
    special = _special_ids(tokenizer)
    marks = [i for i, token in enumerate(ids) if token in special]
    if not marks:
        raise ValueError(
            f"no special token marks the user turn in its chat template (header {header!r})"
        )
    last = marks[-1]
    start, end = last, last + 1
    if tokenizer.decode(ids[last + 1 :], skip_special_tokens=False).strip():
        # The role name follows the last special token (ChatML's
        # <|im_start|>user\n): the marker runs to the end of the header, or it
        # would open every turn.
        end = len(ids)
    else:
        # Only whitespace follows, which stays after the salt (it may merge
        # with the user text, ids never do): the marker ends at the special
        # token, and the role name, if any, sits between it and the special
        # token before it (<|start|>user<|message|>), which opens the header.
        before = max((i for i in marks if i < last), default=-1)
        role = tokenizer.decode(ids[before + 1 : last], skip_special_tokens=False)
        if before >= 0 and role.strip():
            start = before
    marker = tuple(ids[start:end])
    # The last occurrence must be the user turn's even when the assistant's
    # header follows it (a sample ends with the generation prompt).
    full = tokenizer.encode(prompted, add_special_tokens=False).ids
    at = _rfind(array("q", full), marker)
    prompted_user = prompted.find(_USER_SENTINEL)
    user_ids = len(tokenizer.encode(prompted[:prompted_user], add_special_tokens=False).ids)
    if at < 0 or at + len(marker) > user_ids:
        raise ValueError(
            "the user header its chat template writes also opens the assistant turn, "
            f"so the user turn cannot be told apart (header {header!r})"
        )
    return marker


def _rfind(ids: array[int], marker: Sequence[int]) -> int:
    """Where the last occurrence of ``marker`` starts in ``ids``; -1 if none."""
    if not marker:
        return -1
    haystack = ids.tobytes()
    needle = array("q", marker).tobytes()
    width = ids.itemsize
    end = len(haystack)
    while True:
        at = haystack.rfind(needle, 0, end)
        if at < 0:
            return -1
        if at % width == 0:
            return at // width
        end = at + len(needle) - 1  # a match across id boundaries: look further left


def ids_json(ids: Sequence[int]) -> bytes:
    """Ids as they go inside a JSON array: ``b"17,4,98"``."""
    return b",".join(b"%d" % i for i in ids)


class TokenSalt:
    """A run's salt in ids: the tokenizer that encodes it and the marker it
    follows (None: the salt goes before the first id)."""

    __slots__ = ("_tokenizer", "marker", "source")

    def __init__(self, tokenizer: Tokenizer, marker: tuple[int, ...] | None, source: str) -> None:
        self._tokenizer = tokenizer
        self.marker = marker
        self.source = source

    def salt_ids(self, hex_salt: bytes) -> tuple[int, ...]:
        """The ids of the salt ``hex_salt`` (16 hex digits): its text
        ``"[<hex>] "`` encoded alone, without special tokens."""
        text = salt_prompt(hex_salt.decode("ascii"), "")
        return tuple(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def salt_json(self, hex_salt: bytes) -> bytes:
        """The salt's ids as they go into a JSON array: ``b"17,4,98"``."""
        return ids_json(self.salt_ids(hex_salt))

    def insertion_point(self, ids: Sequence[int]) -> int | None:
        """Where in ``ids`` the salt goes; None when the marker is missing."""
        if self.marker is None:
            return 0
        at = _rfind(array("q", ids), self.marker)
        return None if at < 0 else at + len(self.marker)

    def check_seam(self, ids: Sequence[int], at: int) -> bool:
        """Whether ``ids`` with the salt at ``at`` decodes to the text of
        ``ids`` with the salt text inserted there (module docstring)."""
        decode = self._tokenizer.decode
        before = list(ids[max(0, at - _SEAM_WINDOW) : at])
        after = list(ids[at : at + _SEAM_WINDOW])
        salt = list(self.salt_ids(_PROBE_HEX))
        head = decode(before, skip_special_tokens=False)
        plain = decode(before + after, skip_special_tokens=False)
        if not plain.startswith(head):
            return False
        expected = head + salt_prompt(_PROBE_HEX.decode("ascii"), plain[len(head) :])
        return decode(before + salt + after, skip_special_tokens=False) == expected


class TokenSalting:
    """Where the salt goes in each sample of a pre-tokenized dataset.

    ``positions[i]`` is the insertion point in sample i's ids.
    """

    __slots__ = ("positions", "token_salt")

    def __init__(self, token_salt: TokenSalt, positions: tuple[int, ...]) -> None:
        self.token_salt = token_salt
        self.positions = positions

    def salted_ids(self, ids: tuple[int, ...], index: int, hex_salt: bytes) -> tuple[int, ...]:
        """Sample ``index``'s ids (``ids``) as sent with the salt ``hex_salt``."""
        return self.insert(ids, index, self.token_salt.salt_ids(hex_salt))

    def insert(
        self, ids: tuple[int, ...], index: int, salt_ids: tuple[int, ...]
    ) -> tuple[int, ...]:
        """Sample ``index``'s ids (``ids``) with the salt's ids ``salt_ids`` in place."""
        at = self.positions[index]
        return ids[:at] + salt_ids + ids[at:]


@functools.lru_cache(maxsize=4)
def token_salt_of(tokenizer_name: str, placement: TokenSaltPlacement) -> TokenSalt:
    """The token salt of a run whose tokenizer is ``tokenizer_name``
    (``--tokenizer``, else the model), cached: every phase and body build
    of a run asks for the same one.

    Raises:
        UsageError: the tokenizer cannot be loaded; for ``user``, the
            template or its user header cannot be found (without the
            dataset's name: :func:`token_salting` adds it).
    """
    # Imported here, not with the module: the metrics package's __init__
    # reaches the run configuration, which imports this package.
    from ..metrics.chat_template import ChatTemplate, tokenizer_dir
    from ..metrics.tokens import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_name)
    if placement == "start":
        return TokenSalt(tokenizer, None, tokenizer_name)
    directory = tokenizer_dir(tokenizer_name)
    template = None if directory is None else ChatTemplate.from_tokenizer_dir(directory)
    if template is None:
        raise UsageError(f"tokenizer {tokenizer_name} has no chat template to find it by")
    try:
        marker = user_turn_marker(template, tokenizer)
    except ValueError as error:
        raise UsageError(f"tokenizer {tokenizer_name}: {error}") from error
    return TokenSalt(tokenizer, marker, tokenizer_name)


@functools.lru_cache(maxsize=2)
def harmony_token_salt(tokenizer_name: str) -> TokenSalt:
    """The token salt of Harmony prompts (``load/harmony.py``): they are
    built here, so their user header is known without a chat template:
    ``<|start|>user<|message|>``."""
    from ..metrics.tokens import load_tokenizer  # see token_salt_of
    from .harmony import harmony_encoder

    marker = harmony_encoder(tokenizer_name).user_header
    return TokenSalt(load_tokenizer(tokenizer_name), marker, tokenizer_name)


def token_salting(
    dataset: Dataset, tokenizer_name: str, placement: TokenSaltPlacement
) -> TokenSalting:
    """Where the salt goes in every sample of the pre-tokenized ``dataset``.

    Raises:
        UsageError: one line naming the dataset, what is missing and the
            remedy (module docstring).
    """
    synthetic = dataset.spec.synthetic
    if synthetic is not None:
        return _synthetic_salting(dataset, tokenizer_name, placement, synthetic.prefix)
    where = "after the user turn's header" if placement == "user" else "before the first id"
    remedy = TOKEN_SALT_REMEDY if placement == "user" else "add --no-salt"
    what = "Harmony ids" if dataset.spec.harmony is not None else "token ids (parser.input_tokens)"
    lead = f"dataset {dataset.spec.path}: {what} are salted {where}"
    try:
        if dataset.spec.harmony is not None and placement == "user":
            token_salt = harmony_token_salt(tokenizer_name)
        else:
            token_salt = token_salt_of(tokenizer_name, placement)
    except UsageError as error:
        raise UsageError(f"{lead}, but {error}; {remedy}") from error
    positions: list[int] = []
    for index, sample in enumerate(dataset.samples):
        assert sample.token_ids is not None
        at = token_salt.insertion_point(sample.token_ids)
        if at is None:
            assert token_salt.marker is not None
            raise UsageError(
                f"{lead}, but sample {index} lacks the user header "
                f"{list(token_salt.marker)} of tokenizer {tokenizer_name}; {TOKEN_SALT_REMEDY}"
            )
        if not token_salt.check_seam(sample.token_ids, at):
            raise UsageError(
                f"{lead}, but in sample {index} tokenizer {tokenizer_name} does not decode "
                f"the salted ids to the salted text; {remedy}"
            )
        positions.append(at)
    return TokenSalting(token_salt, tuple(positions))


def _synthetic_salting(
    dataset: Dataset, tokenizer_name: str, placement: TokenSaltPlacement, prefix: int
) -> TokenSalting:
    """A synthetic dataset's salt (``load/synthetic.py``): right after the
    shared prefix, the part every prompt shares (spec §2.5: between the
    shared part and the query's own), or first with ``--token-salt start``.
    Its prompts have no chat template to find a user header by, and need no
    seam check: the salt's ids sit between two whole word tokens, which the
    build verified re-encode as themselves."""
    from ..metrics.tokens import load_tokenizer  # see token_salt_of

    token_salt = TokenSalt(load_tokenizer(tokenizer_name), None, tokenizer_name)
    at = prefix if placement == "user" else 0
    return TokenSalting(token_salt, (at,) * len(dataset.samples))
