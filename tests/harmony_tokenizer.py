"""A small Harmony vocabulary for tests: a byte-level BPE (as o200k is)
with the Harmony format's special tokens, and a chat template in the shape
of gpt-oss's (roles between ``<|start|>`` and ``<|message|>``, the
assistant's reasoning read from ``message.thinking``).

The real gpt-oss ``tokenizer.json`` cannot be fetched here (model hubs are
unreachable); what the Harmony encoder relies on is only that each marker
is one special token and that text is byte-level BPE, which this has.
Training is deterministic and takes a fraction of a second.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

__all__ = ("HARMONY_SPECIAL_TOKENS", "HARMONY_TEMPLATE", "harmony_tokenizer")

HARMONY_SPECIAL_TOKENS = (
    "<|start|>",
    "<|message|>",
    "<|end|>",
    "<|channel|>",
    "<|return|>",
    "<|call|>",
    "<|constrain|>",
)

#: The roles and markers of gpt-oss's template, its reasoning in ``thinking``.
HARMONY_TEMPLATE = (
    "{% for m in messages %}<|start|>{{ m.role }}"
    "{% if m.role == 'assistant' and m.thinking %}<|channel|>analysis<|message|>"
    "{{ m.thinking }}<|end|><|start|>assistant<|channel|>final{% endif %}"
    "<|message|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)

_CORPUS = (
    "You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2026-12-02\n\nReasoning: high\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    " user assistant system developer analysis final Instructions What is the answer?"
)


def harmony_tokenizer(directory: Path, texts: Iterable[str] = ()) -> Path:
    """Trains the vocabulary on the Harmony system text and ``texts`` and
    saves it with its template into ``directory``; returns ``directory``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator([_CORPUS, *texts] * 8, trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in HARMONY_SPECIAL_TOKENS])
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"chat_template": HARMONY_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory
