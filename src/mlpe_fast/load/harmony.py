"""Harmony prompts: a text sample rendered in gpt-oss's Harmony format and
encoded client-side into token ids (issue 21; reference-client.md §11).

gpt-oss-120b is driven on ``/v1/completions`` (or SGLang's ``/generate``)
with token ids, so that the server applies no chat template: the client
renders the conversation in the Harmony format itself.  Its performance
dataset is pre-tokenized (``parser.input_tokens``; its reasoning effort was
fixed when the file was built, MLPerf's "low"); its accuracy datasets
(AIME25, GPQA, LiveCodeBench) carry text, which the reference encodes with
the ``openai-harmony`` package at reasoning effort "high"
(``openai/harmony.py``, ``Harmonizer``; ``dataset_manager/transforms.py``,
``Harmonize``).  This module does the same encoding:

* **the conversation**: a system message and the user's prompt, rendered
  for completion by the assistant, exactly as ``Harmonizer`` builds it
  (``SystemContent.new().with_reasoning_effort(E)
  .with_conversation_start_date(D)``, then
  ``render_conversation_for_completion(conv, Role.ASSISTANT)``)::

      <|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
      Knowledge cutoff: 2024-06
      Current date: D

      Reasoning: E

      # Valid channels: analysis, commentary, final. Channel must be included for every message.
      <|end|><|start|>user<|message|>PROMPT<|end|><|start|>assistant

  (no newline before the first ``<|end|>``, nor between the messages).

  A sample's system text (``parser.system``) becomes a developer message
  between the two (``<|start|>developer<|message|># Instructions\\n\\nSYSTEM<|end|>``),
  Harmony's place for instructions; the reference reads the prompt only.
* **the ids**: the format's markers are the vocabulary's special tokens,
  each one id; every text between them is encoded on its own with special
  tokens *not* recognised inside it, as Harmony's ``render_text_into`` does
  (a prompt that contains ``"<|end|>"`` stays text).  The vocabulary is the
  run's tokenizer (``--tokenizer``, the gpt-oss ``tokenizer.json``, which
  is o200k's byte-level BPE with the Harmony tokens): a local file, so no
  download.  The ``openai-harmony`` package instead loads
  ``o200k_base.tiktoken`` from OpenAI's public blob store, or, offline, from
  the folder that ``TIKTOKEN_ENCODINGS_BASE`` names (its SHA-256 checked);
  ``tests/unit/test_harmony.py`` compares the two where that file is at
  hand.
* **the reasoning effort**: the dataset's
  ``generation_config_override.chat_template_kwargs.reasoning_effort``,
  else the run's ``chat_template_kwargs.reasoning_effort`` (the key the
  gpt-oss chat template reads on the chat route), else the phase's MLPerf
  value: "low" for performance, "high" for accuracy (``config/rules.py``,
  ``harmony_datasets``).
* **the date**: ``--harmony-date``, else the day of the run, as the
  reference (it renders ``datetime.date.today()``); it is written into the
  run's ``config.yaml`` so that a run can be repeated token for token.

The encoded sample is a token-id sample like a pre-tokenized one: sent as
``prompt: [id, ...]``, its ISL the number of ids, salted in the token stream
right after ``<|start|>user<|message|>`` (spec §2.5; ``load/token_salt.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import msgspec

from ..errors import UsageError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = (
    "HARMONY_EFFORTS",
    "HARMONY_TOKENS",
    "PHASE_EFFORT",
    "HarmonyEffort",
    "HarmonyEncoder",
    "HarmonyPrompts",
    "harmony_encoder",
    "harmony_system_text",
    "harmony_text",
)

HarmonyEffort = Literal["low", "medium", "high"]
HARMONY_EFFORTS: tuple[HarmonyEffort, ...] = ("low", "medium", "high")
#: MLPerf's gpt-oss-120b settings: performance at "low" (the effort the
#: pre-tokenized performance set was built with), accuracy at "high" (the
#: reference's ``Harmonize`` default).
PHASE_EFFORT: dict[str, HarmonyEffort] = {"performance": "low", "accuracy": "high"}

# openai-harmony's SystemContent defaults (chat.rs, ``impl Default``).
_MODEL_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
_KNOWLEDGE_CUTOFF = "2024-06"
_CHANNELS = (
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
)
_START, _MESSAGE, _END = "<|start|>", "<|message|>", "<|end|>"
#: The special tokens the encoding needs; a tokenizer without all of them
#: is not a Harmony vocabulary.
HARMONY_TOKENS = (_START, _MESSAGE, _END, "<|channel|>")
#: The role the conversation is rendered for completion by.
_NEXT_ROLE = "assistant"


class HarmonyPrompts(msgspec.Struct, frozen=True, kw_only=True):
    """How a dataset's text prompts become Harmony token ids.

    Attributes:
        tokenizer: the run's tokenizer (the vocabulary).
        reasoning_effort: the system message's ``Reasoning:`` line.
        conversation_start_date: its ``Current date:`` line (ISO date).
    """

    tokenizer: str
    reasoning_effort: HarmonyEffort
    conversation_start_date: str


def harmony_system_text(effort: HarmonyEffort, date: str) -> str:
    """The system message's content, as openai-harmony renders its
    ``SystemContent`` (encoding.rs: sections joined by a blank line)."""
    top = f"{_MODEL_IDENTITY}\nKnowledge cutoff: {_KNOWLEDGE_CUTOFF}\nCurrent date: {date}"
    return f"{top}\n\nReasoning: {effort}\n\n{_CHANNELS}"


def _messages(
    prompt: str, system: str | None, effort: HarmonyEffort, date: str
) -> tuple[tuple[str, str], ...]:
    """The conversation's messages, ``(role, content)`` each."""
    messages = [("system", harmony_system_text(effort, date))]
    if system:
        messages.append(("developer", f"# Instructions\n\n{system}"))
    messages.append(("user", prompt))
    return tuple(messages)


def harmony_text(prompt: str, system: str | None, effort: HarmonyEffort, date: str) -> str:
    """The rendered conversation as text (what the ids decode to)."""
    rendered = "".join(
        f"{_START}{role}{_MESSAGE}{content}{_END}"
        for role, content in _messages(prompt, system, effort, date)
    )
    return f"{rendered}{_START}{_NEXT_ROLE}"


class HarmonyEncoder:
    """Encodes text samples into Harmony ids with one tokenizer.

    The texts between the markers are encoded with special tokens read as
    text (``encode_special_tokens``), on a copy of the tokenizer so that the
    run's counting tokenizer is untouched.
    """

    __slots__ = ("_ids", "_text", "name", "user_header")

    def __init__(self, tokenizer: Tokenizer, name: str) -> None:
        from tokenizers import Tokenizer as _Tokenizer

        ids = {t: tokenizer.token_to_id(t) for t in HARMONY_TOKENS}
        missing = [t for t, i in ids.items() if i is None]
        if missing:
            raise UsageError(
                f"tokenizer {name} has no Harmony token {missing[0]}: Harmony prompts need "
                "the gpt-oss tokenizer (--tokenizer DIR holding its tokenizer.json)"
            )
        self.name = name
        self._ids: dict[str, int] = {t: i for t, i in ids.items() if i is not None}
        self._text = _Tokenizer.from_str(tokenizer.to_str())
        self._text.encode_special_tokens = True
        user = self._encode_messages((("user", ""),), None)
        self.user_header = user[:-1]  # <|start|>user<|message|>, without <|end|>

    def _encode_messages(
        self, messages: Sequence[tuple[str, str]], next_role: str | None
    ) -> tuple[int, ...]:
        """Each message as ``<|start|>`` role ``<|message|>`` content
        ``<|end|>``, then ``<|start|>`` and the next role if given; every
        role and content encoded alone."""
        texts = [text for message in messages for text in message]
        if next_role is not None:
            texts.append(next_role)
        encoded = [e.ids for e in self._text.encode_batch(texts, add_special_tokens=False)]
        start, message, end = self._ids[_START], self._ids[_MESSAGE], self._ids[_END]
        ids: list[int] = []
        for n in range(len(messages)):
            ids += (start, *encoded[2 * n], message, *encoded[2 * n + 1], end)
        if next_role is not None:
            ids += (start, *encoded[-1])
        return tuple(ids)

    def encode(
        self, prompt: str, system: str | None, effort: HarmonyEffort, date: str
    ) -> tuple[int, ...]:
        """One conversation's ids (module docstring)."""
        return self._encode_messages(_messages(prompt, system, effort, date), _NEXT_ROLE)


@functools.lru_cache(maxsize=2)
def harmony_encoder(tokenizer_name: str) -> HarmonyEncoder:
    """The encoder of the run's tokenizer, cached (every dataset of a run
    shares it).

    Raises:
        UsageError: the tokenizer cannot be loaded or has no Harmony tokens.
    """
    # Imported here: the metrics package's __init__ reaches the run
    # configuration, which imports this package.
    from ..metrics.tokens import load_tokenizer

    return HarmonyEncoder(load_tokenizer(tokenizer_name), tokenizer_name)
