"""Token counting throughput: ``TokenCounter`` over many ~500-token responses.

Target: 100,000 streamed responses of about 500 tokens each, counted with a
byte-level BPE tokenizer (OSL over the whole output plus TPOT tokens over
the text after the first event: two tokenizations per response, spec §1.2)
in at most 30 s on 2 cores.

Model hubs are unreachable here, so the tokenizer is trained on the spot
with ``tokenizers``' ``BpeTrainer`` (32,000 tokens, GPT-2 style byte-level
pre-tokenizer) on generated text: made-up words with Zipf frequencies,
capitals, punctuation and line breaks.  Responses are drawn from a pool of
1,000 distinct texts of that kind, sized to about 500 tokens; the first
event carries the first word.

- ``test_token_counter``: submit every record, then ``finish()``; per batch
  size.  ``extra_info``: ``responses_per_s``, ``tokens_per_s`` (OSL + TPOT
  tokens), ``seconds_per_100k``.
- ``test_token_counter_one_thread``: the same with
  ``TOKENIZERS_PARALLELISM=false`` (one encoding thread).
- ``test_encode_osl_only``: one ``encode_batch_fast`` pass over the full
  outputs only (the floor of any exact method that needs both counts).

Run (``MLPE_BENCH_TOKENS_N`` changes the number of responses)::

    PYTHONPATH=src pytest bench/bench_tokens.py -o python_files='bench_*.py' \\
        --benchmark-disable-gc -s
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.metrics.tokens import TokenCounter, load_tokenizer
from mlpe_fast.wire.events import NO_RESPONSE, ResponseSummary

N = int(os.environ.get("MLPE_BENCH_TOKENS_N", "100000"))
POOL = 1000
TARGET_TOKENS = 500
VOCAB = 32000
BATCH_SIZES = (256, 1024, 4096)
# fmt: off
SYLLABLES = (
    "ka", "to", "re", "mi", "sun", "lo", "ver", "an", "ist", "ple", "gro", "nd", "th", "ea",
    "qu", "ion", "ing", "ed", "pre", "con", "ex", "al", "ous", "er", "st", "ch", "wh", "ou",
    "ly", "ment", "ness", "able",
)
# fmt: on


class TextMaker:
    """Seeded English-like text: Zipf-distributed made-up words."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        syllables = SYLLABLES
        self.words = [
            "".join(self.rng.choice(syllables) for _ in range(self.rng.choice((1, 1, 2, 2, 3, 4))))
            for _ in range(30000)
        ]
        self.cum = list(itertools.accumulate(1 / (i + 1) for i in range(len(self.words))))

    def text(self, words: int) -> str:
        rng = self.rng
        out: list[str] = []
        while words > 0:
            n = min(words, rng.randint(4, 24))
            words -= n
            sentence = rng.choices(self.words, cum_weights=self.cum, k=n)
            sentence[0] = sentence[0].capitalize()
            if rng.random() < 0.3:
                sentence[rng.randrange(n)] += ","
            if rng.random() < 0.1:
                sentence.append(str(rng.randint(0, 99999)))
            out.append(
                " ".join(sentence)
                + rng.choice(".....?!:")
                + ("\n\n" if rng.random() < 0.1 else " ")
            )
        return "".join(out).rstrip()


def train_bpe(maker: TextMaker, path: Path) -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((maker.text(300) for _ in range(4000)), trainer)
    tok.save(str(path))


def summary(text: str, first: str) -> ResponseSummary:
    return msgspec.structs.replace(
        NO_RESPONSE,
        status=200,
        t_head=1,
        t_first=2,
        t_done=3,
        content=text,
        content_after_first=text[len(first) :],
        finish_reason="stop",
        events=500,
        content_events=500,
        done=True,
        complete=True,
        keep_alive=True,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tokenizer, list[RequestRecord]]:
    maker = TextMaker()
    directory = tmp_path_factory.mktemp("bpe")
    train_bpe(maker, directory / "tokenizer.json")
    tok = load_tokenizer(str(directory))
    probe = [maker.text(200) for _ in range(50)]
    per_word = sum(len(e) for e in tok.encode_batch(probe, add_special_tokens=False)) / (200 * 50)
    words = round(TARGET_TOKENS / per_word)
    pool = [maker.text(words) for _ in range(POOL)]
    summaries = [summary(t, t.split(" ", 1)[0]) for t in pool]
    records = [
        RequestRecord(
            sample_index=i,
            sample_id=str(i),
            t_sched=0,
            t_issue=0,
            t_end=3,
            response=summaries[i % POOL],
        )
        for i in range(N)
    ]
    return tok, records


def count_all(tok: Tokenizer, records: list[RequestRecord], batch_size: int) -> Any:
    cpu = time.process_time()  # all threads of the process, Rayon's included
    counter = TokenCounter(tok, batch_size=batch_size)
    for record in records:
        counter.submit(record)
    counts = counter.finish()
    assert counts.complete
    return counts, time.process_time() - cpu


def report(benchmark: Any, result: Any, responses: int) -> None:
    counts, cpu_s = result
    seconds = benchmark.stats.stats.median
    tokens = int(counts.osl.sum() + counts.tpot_tokens.sum())
    benchmark.extra_info.update(
        responses=responses,
        mean_osl=float(counts.osl.mean()),
        responses_per_s=responses / seconds,
        tokens_per_s=tokens / seconds,
        seconds_per_100k=seconds * 100_000 / responses,
        cpu_s=cpu_s,
        tokens_per_cpu_s=tokens / cpu_s,
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        rayon_threads=os.environ.get("RAYON_NUM_THREADS"),
    )
    print(
        f"\n{benchmark.name}: {responses:,} responses (mean OSL {counts.osl.mean():.0f}) "
        f"in {seconds:.2f} s = {responses / seconds:,.0f} responses/s, "
        f"{tokens / seconds / 1e6:.2f} M tokens/s, {seconds * 100_000 / responses:.1f} s per 100k; "
        f"CPU {cpu_s:.1f} s = {tokens / cpu_s / 1e6:.2f} M tokens per CPU-second"
    )


@pytest.mark.parametrize("batch_size", BATCH_SIZES, ids=lambda b: f"batch{b}")
def test_token_counter(
    benchmark: Any, corpus: tuple[Tokenizer, list[RequestRecord]], batch_size: int
) -> None:
    tok, records = corpus
    counts = benchmark.pedantic(
        count_all, args=(tok, records, batch_size), rounds=1, iterations=1, warmup_rounds=0
    )
    report(benchmark, counts, len(records))


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Read by tokenizers at every call; the Rayon pool is not used at all.
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    yield


def test_token_counter_one_thread(
    benchmark: Any, corpus: tuple[Tokenizer, list[RequestRecord]], one_thread: None
) -> None:
    tok, records = corpus
    subset = records[: max(1, N // 4)]
    counts = benchmark.pedantic(
        count_all, args=(tok, subset, 1024), rounds=1, iterations=1, warmup_rounds=0
    )
    report(benchmark, counts, len(subset))


def test_encode_osl_only(benchmark: Any, corpus: tuple[Tokenizer, list[RequestRecord]]) -> None:
    tok, records = corpus
    texts = [r.response.content for r in records]

    def encode() -> Any:
        total = 0
        for i in range(0, len(texts), 2048):
            batch = tok.encode_batch_fast(texts[i : i + 2048], add_special_tokens=False)
            total += sum(len(e) for e in batch)
        return total

    tokens = benchmark.pedantic(encode, rounds=1, iterations=1, warmup_rounds=0)
    seconds = benchmark.stats.stats.median
    benchmark.extra_info.update(
        responses_per_s=len(texts) / seconds,
        tokens_per_s=tokens / seconds,
        seconds_per_100k=seconds * 100_000 / len(texts),
    )
    print(
        f"\n{benchmark.name}: {len(texts):,} outputs, {tokens / len(texts):.0f} tokens each, "
        f"{seconds:.2f} s = {tokens / seconds / 1e6:.2f} M tokens/s"
    )
