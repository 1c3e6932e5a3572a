"""A small byte-level BPE tokenizer for tests, trained when the tests run.

The tokenizers of tests/data count one character as one token, which makes counts
easy to state but puts every recorded agentic answer far outside the token
ranges the checker gates a model's output lengths on (spec §2.6: Kimi K3's
full-run OSL per turn in [425, 520]).  A real model's tokenizer merges
frequent character runs; :func:`train_bpe` does the same with Hugging Face
``tokenizers`` on the texts it is given, so a test can count the dataset's
own answers the way a subword tokenizer would.  Training is deterministic
for the same texts and vocabulary size, and takes a fraction of a second.
The chat template is taken from a tokenizer directory of tests/data, so
reasoning and tool calls are counted through it as for any model (spec
§1.2).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

__all__ = ("agentic_answer_texts", "train_bpe")

_SPECIAL_TOKENS = ["<unk>", "<pad>", "<s>", "</s>"]


def agentic_answer_texts(dataset: Path) -> Iterator[str]:
    """The recorded assistant rows of an agentic dataset: their reasoning,
    content and tool-call arguments, the text the replay endpoint sends."""
    with dataset.open(encoding="utf-8") as rows:
        for line in rows:
            row = json.loads(line)
            if row.get("role") != "assistant":
                continue
            yield row.get("reasoning_content") or ""
            yield row.get("content") or ""
            for call in row.get("tool_calls") or ():
                yield json.dumps(call["function"].get("arguments"))


def train_bpe(out: Path, texts: Iterable[str], vocab_size: int, template_from: Path) -> Path:
    """Trains a byte-level BPE of ``vocab_size`` tokens on ``texts`` and
    writes it with the chat template of the tokenizer directory
    ``template_from`` into ``out`` (``tokenizer.json`` and
    ``tokenizer_config.json``); returns ``out``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=_SPECIAL_TOKENS,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_bytes(
        (template_from / "tokenizer_config.json").read_bytes()
    )
    return out
