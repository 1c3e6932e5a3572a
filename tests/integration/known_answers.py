"""Accuracy sets with known answers, written when a test runs: each row holds
a prompt, the answer the simulated endpoint's oracle sends for it, and the
ground truth the scorer compares that answer with.  Where the two differ on
purpose, a test knows the score a run must reach before it runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

__all__ = (
    "DEEPSEEK_R1_TEMPLATE",
    "LLAMA_SAMPLES",
    "SUMMARY_CHARS",
    "deepseek_r1_set",
    "deepseek_r1_tokenizer",
    "summaries",
)

# The checker's minimum accuracy sample count for llama3_1-8b (spec §2.6).
LLAMA_SAMPLES = 13_368
# The gate's gen_len window is 8,167,644 characters +-10 %: about 611 per summary.
SUMMARY_CHARS = 611


def summaries(path: Path, n: int, seed: int = 3) -> Path:
    """A synthetic summarisation set (``article``, ``highlights``): short
    prompts and ~611-character summaries drawn from a vocabulary of 4,000
    long made-up words (few words per summary keep ROUGE's LCS cheap; a
    reused vocabulary lets the stemmer cache work as on real text)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(28, 44))) for _ in range(4000)]
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            words: list[str] = []
            while sum(len(w) + 1 for w in words) < SUMMARY_CHARS - 30:
                words.append(rng.choice(vocabulary))
            summary = " ".join(words).capitalize() + "."
            row = {
                "article": f"Summarise article {i}: {words[0]} {words[-1]}",
                "highlights": summary,
            }
            f.write(json.dumps(row) + "\n")
    return path


# DeepSeek-R1's chat template in its shape: the system text after the BOS, the
# user turn opened by one special token, the generation prompt opening the
# reasoning (the MLPerf set's ``tok_input`` is this rendering, tokenized).
DEEPSEEK_R1_TEMPLATE = (
    "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}"
    "{% elif m.role == 'user' %}<\uff5cUser\uff5c>{{ m.content }}"
    "{% else %}<\uff5cAssistant\uff5c>{{ m.content }}<\uff5cend\u2581of\u2581sentence\uff5c>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<\uff5cAssistant\uff5c><think>\n{% endif %}"
)
_BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
_USER = "<\uff5cUser\uff5c>"
_ASSISTANT = "<\uff5cAssistant\uff5c>"
_DEEPSEEK_SPECIAL = (_BOS, "<\uff5cend\u2581of\u2581sentence\uff5c>", _USER, _ASSISTANT)


def deepseek_r1_tokenizer(directory: Path) -> Tokenizer:
    """A byte-level BPE with DeepSeek-R1's turn markers as special tokens and
    its template's shape, saved into ``directory`` (the real tokenizer cannot
    be fetched here; the token salt needs only that the user header is one
    special token, as it is in DeepSeek-R1's vocabulary)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    corpus = [f"Question {i}: which letter? Compute {i} + {i}. Reasoning done." for i in range(50)]
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in _DEEPSEEK_SPECIAL])
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"chat_template": DEEPSEEK_R1_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return tokenizer


def deepseek_r1_set(
    path: Path, tokenizer: Tokenizer, n: int, wrong_every: int
) -> tuple[Path, float]:
    """The DeepSeek-R1 set in the shape of the MLPerf one (``question``,
    ``tok_input``: the templated prompt's ids, ``ground_truth``, ``dataset``)
    plus ``answer``, the oracle's output.  Rows alternate between GPQA
    (a letter), AIME (a boxed integer) and MMLU-Pro (a letter up to J), each
    graded its own way (``accuracy/deepseek_r1.py``); every ``wrong_every``-th
    answer names a wrong one.  Returns the file and the exact match in
    percent that grading it must give."""
    wrong = 0
    questions, rows = [], []
    for i in range(n):
        subset = ("gpqa", "aime", "mmlu_pro")[i % 3]
        miss = i % wrong_every == wrong_every - 1
        wrong += miss
        if subset == "aime":
            truth = str(i % 1000)
            said = str((i + 1) % 1000) if miss else truth
            answer = f"<think>Adding up.</think> The total is \\boxed{{{said}}}."
        else:
            letters = "ABCD" if subset == "gpqa" else "ABCDEFGHIJ"
            truth = letters[i % len(letters)]
            said = letters[(i + 1) % len(letters)] if miss else truth
            answer = f"<think>Weighing the options.</think> ANSWER: {said}"
        question = f"Question {i} ({subset}): which one?"
        # the template rendered for one user turn with the generation prompt
        questions.append(f"{_BOS}{_USER}{question}{_ASSISTANT}<think>\n")
        rows.append(
            {"question": question, "ground_truth": truth, "dataset": subset, "answer": answer}
        )
    encoded = tokenizer.encode_batch(questions, add_special_tokens=False)
    with path.open("w", encoding="utf-8") as f:
        for row, ids in zip(rows, encoded, strict=True):
            f.write(json.dumps({**row, "tok_input": ids.ids}) + "\n")
    return path, 100.0 * (n - wrong) / n
