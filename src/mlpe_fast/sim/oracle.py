"""The simulated endpoint's oracle mode: each prompt of a dataset is answered
with that sample's reference output, so that an accuracy pipeline run
against the simulator scores as a perfect run (and, degraded on purpose, as
a failing one).

Which prompt a request asks
---------------------------
The text mlpe-fast puts in a request (:mod:`mlpe_fast.load.requests`): for
chat, the content of the last ``user`` message (a string, or the text parts
of a list joined); for completions, ``prompt`` (a string or a one-string
array); for SGLang's ``/generate``, ``input_ids`` or ``text``.  A
performance run prepends a salt, ``"[" + 16 lower-case hex digits + "] "``
(:mod:`mlpe_fast.load.salt`); the lookup tries the text as sent first and
then without that prefix, so a dataset prompt that itself starts with
something salt-shaped still matches unsalted. The match is exact: JSON
decoding undoes exactly what encoding did, so Unicode and whitespace
round-trip and nothing is normalised.

A token-id ``prompt`` (``[id, ...]``) is looked up among the samples of a
token-id oracle dataset (``parser.input_tokens=COL``, or Harmony ids
written into such a column): the ids as sent, else a sample's ids with one
contiguous run of ids inserted -- the salt, which a token client puts
inside the stream (spec §2.5; ``load/token_salt.py``: after the user
header, or first).  The salt is found without a tokenizer: the sample whose
ids are the longest common prefix of the request's plus the rest as its
suffix.  Samples are indexed by their last 8 ids and their first 4: a
salt inserted at least 8 ids from the end leaves the first, one inserted
within the first 4 leaves the second, so a lookup compares the few samples
that share the request's tail (then, failing that, its head); samples too
short for that are compared one by one.  Where two samples fit (one begins
the other), the longer one is the answer: it leaves the fewer ids to be
the salt.

The dataset is read as an accuracy run reads it
(:func:`mlpe_fast.load.dataset.load_dataset`): the same prompt mapping, and
the same ground truth, which is the answer, so that the scorer sees exactly
what it compares with.  Each sample is keyed the way its request will be:
its prompt, or for a ``messages`` sample the text of its last user message.
Two samples with the same prompt and different ground truths cannot both
be answered right, so loading refuses them; identical duplicates are fine.

What the answer looks like
--------------------------
The ground truth (after :func:`degraded`, when degrading) is cut into
runs of ``token_chars`` characters, one streamed "token" each, so the
stream's event count and pacing resemble a real model's; the usage counts
those runs (``completion_tokens`` 0 for an empty answer).  By default the
whole answer is sent whatever ``max_tokens`` says, since an accuracy output
must be complete; with ``truncate`` it stops after ``max_tokens`` runs with
``finish_reason: "length"``.  Otherwise the finish reason is ``"stop"``.

An unknown prompt is answered 404 with an OpenAI error body (``code``
``"oracle_prompt_not_found"``) rather than any text: a mismatch between the
dataset served and the one sent must fail loudly, and 404 keeps it apart
from the 400s of malformed requests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..errors import UsageError
from ..load.dataset import (
    AccuracyConfig,
    Dataset,
    DatasetSpec,
    Sample,
    load_dataset,
    parse_dataset_arg,
)
from ..load.salt import SALT_PREFIX_LEN

__all__ = (
    "DEFAULT_TOKEN_CHARS",
    "MISS_CODE",
    "Degrade",
    "Oracle",
    "Prompt",
    "degraded",
    "load_oracle",
    "parse_degrade",
    "parse_oracle_arg",
    "request_prompt",
)

DEFAULT_TOKEN_CHARS = 4
"""Characters per streamed token: about what an English BPE token holds."""
MISS_CODE = "oracle_prompt_not_found"

Degrade = Literal["half"] | int
"""How a deliberately degraded oracle shortens every answer: ``"half"``
keeps the first half of its characters, an integer K the first K."""

# Only these need escaping inside a JSON string (msgspec writes any other
# character, non-ASCII included, as its UTF-8 bytes).
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')
_SALT = re.compile(r"\[[0-9a-f]{16}\] ")
_encode = msgspec.json.Encoder().encode
# How many trailing and leading ids index a token-id sample (module docstring).
_TAIL_IDS = 8
_HEAD_IDS = 4

Prompt = str | tuple[int, ...]
"""What a request asks: its prompt text, or its token ids."""


def parse_oracle_arg(text: str, flag: str = "--oracle") -> DatasetSpec:
    """Parses ``PATH[,parser.prompt=COL][,parser.system=COL][,ground_truth=COL]``
    into an accuracy :class:`~mlpe_fast.load.dataset.DatasetSpec`.

    ``ground_truth=COL`` is short for ``accuracy_config.ground_truth=COL``;
    the rest is ``--dataset``'s syntax, always read as ``acc:``, so the very
    string of an accuracy run's ``--dataset`` is accepted too.

    Raises:
        UsageError: an empty ``ground_truth``, or anything
            :func:`mlpe_fast.load.dataset.parse_dataset_arg` refuses.
    """
    parts = text.split(",")
    path = parts[0].strip()
    tag, colon, rest = path.partition(":")
    kept = [f"acc:{rest if colon and tag in ('acc', 'perf') else path}"]
    for item in parts[1:]:
        key, eq, value = item.partition("=")
        if eq and key.strip() == "ground_truth":
            if not value.strip():
                raise UsageError(f"{flag} {text!r}: ground_truth= needs a column name")
            kept.append(f"accuracy_config.ground_truth={value.strip()}")
        else:
            kept.append(item)
    return parse_dataset_arg(",".join(kept), flag)


def parse_degrade(value: str) -> Degrade:
    """``"half"`` or a number of characters (the ``--oracle-degrade`` value).

    Raises:
        ValueError: anything else.
    """
    text = value.strip().lower()
    if text == "half":
        return "half"
    if text.isdigit():
        return int(text)
    raise ValueError(f"oracle degrade must be 'half' or a number of characters, not {value!r}")


def degraded(text: str, how: Degrade) -> str:
    """``text`` shortened as ``how`` says (see :data:`Degrade`)."""
    if how == "half":
        return text[: len(text) // 2]
    return text[:how]


def _strip_salt(text: str) -> str | None:
    """``text`` without a leading salt, or None when it has none."""
    return text[SALT_PREFIX_LEN:] if _SALT.match(text) else None


def _user_text(messages: Sequence[Any]) -> str | None:
    """The text of the last user message: its string content, or the text
    parts of a list joined; None without one."""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(
                part["text"]
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
        return None
    return None


def request_prompt(doc: Mapping[str, Any], *, chat: bool) -> Prompt | None:
    """The prompt of a validated request body, text or token ids (see the
    module docstring); None when it has none the oracle could match."""
    if chat:
        messages = doc.get("messages")
        return _user_text(messages) if isinstance(messages, list) else None
    # SGLang's /generate: input_ids or text; the completions route: prompt
    prompt = doc.get("input_ids", doc.get("text", doc.get("prompt")))
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    if isinstance(prompt, list) and prompt and all(type(i) is int for i in prompt):
        return tuple(prompt)
    return None


def _salted_match(sent: tuple[int, ...], sample: tuple[int, ...]) -> bool:
    """Whether ``sent`` is ``sample`` with one run of ids inserted."""
    if len(sent) <= len(sample):
        return False
    common = 0
    for a, b in zip(sent, sample, strict=False):
        if a != b:
            break
        common += 1
    rest = len(sample) - common
    return rest == 0 or sent[-rest:] == sample[common:]


class Oracle:
    """The answers, by prompt text, and how to stream them.

    Args:
        answers: reference output per prompt text.
        token_chars: characters per streamed token (>= 1).
        truncate: honour ``max_tokens`` (``finish_reason: "length"`` when it
            cuts); by default the whole answer is sent.
        degrade: shorten every answer (see :data:`Degrade`); None serves
            them whole.
        source: where the answers came from, for messages.

    Compared by identity (it holds a table, not a setting), so a
    :class:`~mlpe_fast.sim.config.SimConfig` holding one stays hashable.
    """

    __slots__ = (
        "_answers",
        "_by_head",
        "_by_tail",
        "_short",
        "degrade",
        "source",
        "token_chars",
        "truncate",
    )

    def __init__(
        self,
        answers: Mapping[Prompt, str],
        *,
        token_chars: int = DEFAULT_TOKEN_CHARS,
        truncate: bool = False,
        degrade: Degrade | None = None,
        source: str = "",
    ) -> None:
        if type(token_chars) is not int or token_chars < 1:
            raise ValueError(f"token_chars must be an integer >= 1, not {token_chars!r}")
        if degrade is not None and degrade != "half" and (type(degrade) is not int or degrade < 0):
            raise ValueError(f"degrade must be 'half' or an integer >= 0, not {degrade!r}")
        for prompt, text in answers.items():
            try:
                text.encode()
            except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for it on the wire
                raise ValueError(f"the answer to {_preview(prompt)} is not valid Unicode") from None
        if degrade is None:
            self._answers = dict(answers)
        else:
            self._answers = {prompt: degraded(text, degrade) for prompt, text in answers.items()}
        self._by_tail: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self._by_head: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self._short: list[tuple[int, ...]] = []
        for prompt in self._answers:
            if not isinstance(prompt, tuple):
                continue
            if len(prompt) < _HEAD_IDS + _TAIL_IDS:
                self._short.append(prompt)
            else:
                self._by_tail.setdefault(prompt[-_TAIL_IDS:], []).append(prompt)
                self._by_head.setdefault(prompt[:_HEAD_IDS], []).append(prompt)
        self.token_chars = token_chars
        self.truncate = truncate
        self.degrade = degrade
        self.source = source

    def __len__(self) -> int:
        return len(self._answers)

    def __repr__(self) -> str:
        return (
            f"Oracle({len(self)} prompts from {self.source or '?'}, "
            f"token_chars={self.token_chars}, truncate={self.truncate}, degrade={self.degrade!r})"
        )

    def answer(self, prompt: Prompt) -> str | None:
        """The (possibly degraded) answer to ``prompt`` as sent or without its
        salt; None when no sample has that prompt."""
        answers = self._answers
        text = answers.get(prompt)
        if text is not None:
            return text
        if isinstance(prompt, str):
            bare = _strip_salt(prompt)
            return None if bare is None else answers.get(bare)
        for candidates in (
            self._by_tail.get(prompt[-_TAIL_IDS:], ()),
            self._by_head.get(prompt[:_HEAD_IDS], ()),
            self._short,
        ):
            # a sample that begins another matches the other's salted ids too:
            # the longest match is the one with the fewest inserted ids
            matches = [sample for sample in candidates if _salted_match(prompt, sample)]
            if matches:
                return answers[max(matches, key=len)]
        return None

    def miss_message(self, prompt: Prompt | None) -> str:
        """The error message for a request the oracle cannot answer."""
        where = self.source or "the oracle's dataset"
        if prompt is None:
            return f"oracle: the request has no prompt to look up in {where}"
        if isinstance(prompt, tuple):
            return f"oracle: no sample of {where} has the token ids {_preview(prompt)}"
        return f"oracle: no sample of {where} has the prompt {_preview(prompt)}"

    def cut(self, text: str, max_tokens: int | None) -> tuple[str, str]:
        """The text to send and its finish reason: all of ``text`` and
        ``"stop"``, or with ``truncate`` its first ``max_tokens`` tokens and
        ``"length"`` when that is shorter."""
        if not self.truncate or max_tokens is None:
            return text, "stop"
        end = max_tokens * self.token_chars
        return (text, "stop") if len(text) <= end else (text[:end], "length")

    def pieces(self, text: str) -> list[bytes]:
        """``text`` cut into tokens of ``token_chars`` characters (token ``i``
        is ``text[i * token_chars:(i + 1) * token_chars]``), each as the
        inside of a JSON string (escaped, UTF-8), ready for the event
        encoders.  An empty text is one empty piece, so that a stream still
        has its finishing chunk.

        This runs per request, so the pieces are plain UTF-8 (ASCII text is
        sliced as bytes) and only those holding a character JSON escapes (a
        newline, a quote) go through the JSON encoder: about 10 us for a
        350-character answer, against 20 for encoding every piece."""
        n = self.token_chars
        if not text:
            return [b""]
        if text.isascii():
            raw = text.encode()
            out = [raw[i : i + n] for i in range(0, len(raw), n)]
        else:  # UTF-8 widths vary: slice the characters, then encode
            out = [text[i : i + n].encode() for i in range(0, len(text), n)]
        for special in _NEEDS_ESCAPE.finditer(text):
            k = special.start() // n
            out[k] = _encode(text[k * n : (k + 1) * n])[1:-1]
        return out


def _preview(prompt: Prompt, limit: int = 80) -> str:
    """A one-line, bounded repr of a prompt for messages."""
    text = prompt if isinstance(prompt, str) else str(list(prompt))
    return repr(text if len(text) <= limit else text[:limit] + "...")


def load_oracle(
    spec: DatasetSpec,
    *,
    token_chars: int = DEFAULT_TOKEN_CHARS,
    truncate: bool = False,
    degrade: Degrade | None = None,
) -> Oracle:
    """Reads a dataset and its ground truth into an :class:`Oracle`.

    :func:`~mlpe_fast.load.dataset.load_dataset` reads both, as for an
    accuracy run (``spec`` is read as an accuracy dataset whatever its
    type), so the prompts are exactly what a run with the same dataset
    sends and the answers exactly what its scorer compares with.  About
    0.2 s for 13,368 CNN/DailyMail-sized samples (68 MB of JSONL).

    Raises:
        UsageError: anything ``load_dataset`` refuses (a missing
            ground-truth column among them); a sample without a text
            prompt; two samples with the same prompt and different ground
            truths.
        ValueError: a bad ``token_chars`` or ``degrade``.
    """
    accuracy = spec.accuracy or AccuracyConfig()
    dataset = load_dataset(msgspec.structs.replace(spec, type="accuracy", accuracy=accuracy))
    assert dataset.ground_truth is not None  # loaded as an accuracy dataset
    answers = _answers_by_prompt(dataset, dataset.ground_truth, accuracy.ground_truth)
    return Oracle(
        answers,
        token_chars=token_chars,
        truncate=truncate,
        degrade=degrade,
        source=Path(spec.path).name,
    )


def _key(sample: Sample) -> Prompt | None:
    """The prompt a request for ``sample`` carries (unsalted)."""
    if sample.prompt is not None:
        return sample.prompt
    if sample.token_ids is not None:
        return sample.token_ids
    return None if sample.messages is None else _user_text(sample.messages)


def _answers_by_prompt(dataset: Dataset, truths: Sequence[str], column: str) -> dict[Prompt, str]:
    path = dataset.spec.path
    answers: dict[Prompt, str] = {}
    for index, (sample, text) in enumerate(zip(dataset.samples, truths, strict=True)):
        prompt = _key(sample)
        if prompt is None:
            raise UsageError(f"oracle {path}: sample {index} has no user message with text")
        known = answers.setdefault(prompt, text)
        if known != text:
            first = next(i for i, s in enumerate(dataset.samples) if _key(s) == prompt)
            raise UsageError(
                f"oracle {path}: samples {first} and {index} have the same prompt and "
                f"different {column!r} values; the oracle could not tell which to answer"
            )
    return answers
