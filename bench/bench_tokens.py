"""Token counting throughput over many distinct ~500-token responses.

Target: 100,000 streamed responses of about 500 tokens each, counted with a
byte-level BPE tokenizer (OSL over the whole output plus TPOT tokens over
the text after the first event: two counts per response, spec §1.2) in at
most 30 s on 2 cores.

Model hubs are unreachable here, so the tokenizer is trained on the spot
with ``tokenizers``' ``BpeTrainer`` (32,000 tokens, GPT-2 style byte-level
pre-tokenizer) on generated text: made-up words with Zipf frequencies,
capitals, punctuation, numbers and line breaks.  Every response is its own
random text (real responses are all distinct; a pool of repeated texts
would flatter any per-word cache), sized to about 500 tokens; the first
event carries the first word.

Side by side, on the same corpus:

- ``test_encode_batch_fast``: ``Tokenizer.encode_batch_fast`` over the OSL
  and TPOT texts, 2,048 texts per call (the ``tokenizers`` route).
- ``test_fast_path``: ``FastBPECounter.count_with_suffix`` per response
  (both counts from one scan; ``metrics/fast_bpe.py``), from a cold cache.
- ``test_fast_path_mixed``: the same with about 10 % of the responses
  holding one non-ASCII character; those fall back to
  ``encode_batch_fast`` (both texts), as the counting worker does.
- ``test_token_counter``: ``TokenCounter`` end to end, with and without its
  fast path; ``test_token_counter_mixed``: with the 10 % non-ASCII corpus,
  whose fallback encodes run in a second thread beside the fast path.
- ``test_token_counter_one_thread``: ``tokenizers`` only, with
  ``TOKENIZERS_PARALLELISM=false``, on a quarter of the responses.
- ``test_encode_osl_only``: one ``encode_batch_fast`` pass over the full
  outputs only.

- ``test_counting_cost_per_event``: the cost per SSE event and per 64-event
  answer of the two counts, on prose (a Zipf-like vocabulary of 300 words,
  one word per event) and on one repeated character (one character per
  event), for the C counter (``metrics/_bpe_c``), its Python twin and
  ``encode_batch_fast``, interleaved rounds in one run, as ratios.

Each reports seconds per 100k responses (wall) and M tokens per
CPU-second (``time.process_time``: all threads of the process, Rayon's
included; tokens = OSL + TPOT).  The fast-path counts are checked against
``encode_batch_fast``'s.

Run (``MLPE_BENCH_TOKENS_N`` changes the number of responses)::

    PYTHONPATH=src pytest bench/bench_tokens.py -o python_files='bench_*.py' \\
        --benchmark-disable-gc -s
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mlpe_fast.metrics._bpe import NativeBPECounter, bpe_counter
from mlpe_fast.metrics.fast_bpe import FastBPECounter, ineligibility_reason
from mlpe_fast.metrics.tokens import CountJob, TokenCounter, load_tokenizer

N = int(os.environ.get("MLPE_BENCH_TOKENS_N", "100000"))
TARGET_TOKENS = 500
VOCAB = 32000
ENCODE_BATCH = 2048
MIXED_SHARE = 0.1
NON_ASCII_WORDS = ("café", "naïve", "über", "señor", "東京", "—", "…")
# fmt: off
SYLLABLES = (
    "ka", "to", "re", "mi", "sun", "lo", "ver", "an", "ist", "ple", "gro", "nd", "th", "ea",
    "qu", "ion", "ing", "ed", "pre", "con", "ex", "al", "ous", "er", "st", "ch", "wh", "ou",
    "ly", "ment", "ness", "able",
)
# fmt: on
PUNCTUATION = ".....?!:"


class TextMaker:
    """Seeded English-like text: Zipf-distributed made-up words in
    sentences of 4-24 words (capitalized, sometimes a comma, sometimes a
    number, sometimes a paragraph break)."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        syllables = SYLLABLES
        self.words = [
            "".join(self.rng.choice(syllables) for _ in range(self.rng.choice((1, 1, 2, 2, 3, 4))))
            for _ in range(30000)
        ]
        self.cum = list(itertools.accumulate(1 / (i + 1) for i in range(len(self.words))))
        self._cdf = np.asarray(self.cum) / self.cum[-1]

    def text(self, words: int) -> str:
        return self.texts(1, words)[0]

    def texts(self, count: int, words: int, chunk: int = 2000) -> list[str]:
        """``count`` independent texts of ``words`` words (plus numbers).

        Every random draw is vectorized (numpy; words by inverse CDF of the
        Zipf weights); Python only decorates and joins: about 0.1 ms per
        380-word text.
        """
        out: list[str] = []
        vocab_array = np.array(self.words, dtype=object)
        rng = self.np_rng
        most = words // 4 + 1  # sentences per text, at most
        for start in range(0, count, chunk):
            n = min(chunk, count - start)
            draws = np.searchsorted(self._cdf, rng.random((n, words)), side="right")
            np.minimum(draws, len(vocab_array) - 1, out=draws)
            shape = (n, most)
            lengths = rng.integers(4, 25, size=shape).tolist()
            # per sentence: a comma after word k (k < length) or none, a number, its end
            commas = np.where(rng.random(shape) < 0.3, rng.integers(0, 4, size=shape), -1)
            numbers = np.where(rng.random(shape) < 0.1, rng.integers(0, 100000, size=shape), -1)
            ends = rng.integers(0, len(PUNCTUATION), size=shape)
            breaks = rng.random(shape) < 0.1
            for row, lens, comma, number, end_at, brk in zip(
                draws,
                lengths,
                commas.tolist(),
                numbers.tolist(),
                ends.tolist(),
                breaks.tolist(),
                strict=True,
            ):
                text: list[str] = vocab_array[row].tolist()
                first = 0
                for j, length in enumerate(lens):
                    last = min(words, first + length) - 1
                    text[first] = text[first].capitalize()
                    if comma[j] >= 0:
                        text[first + comma[j] % (last + 1 - first)] += ","
                    tail = PUNCTUATION[end_at[j]] + ("\n\n" if brk[j] else "")
                    text[last] += tail if number[j] < 0 else f" {number[j]}{tail}"
                    first = last + 1
                    if first >= words:
                        break
                out.append(" ".join(text).replace("\n\n ", "\n\n").rstrip())
        return out


def train_bpe(maker: TextMaker, path: Path) -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(maker.texts(4000, 300), trainer)
    tok.save(str(path))


class Corpus(NamedTuple):
    tokenizer: Tokenizer
    outputs: list[str]  # every response's full text, all distinct
    tpots: list[str]  # the text after the first event (the first word)
    mixed: list[str]  # outputs, ~10 % with one non-ASCII word after the first event
    mixed_tpots: list[str]
    reference: dict[str, list[int]]  # encode_batch_fast counts, filled by the first test


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    maker = TextMaker()
    directory = tmp_path_factory.mktemp("bpe")
    started = time.perf_counter()
    train_bpe(maker, directory / "tokenizer.json")
    tok = load_tokenizer(str(directory))
    probe = maker.texts(50, 200)
    per_word = sum(len(e) for e in tok.encode_batch(probe, add_special_tokens=False)) / (200 * 50)
    trained = time.perf_counter()
    outputs = maker.texts(N, round(TARGET_TOKENS / per_word))
    made = time.perf_counter()
    assert len(set(outputs)) == len(outputs)
    tpots = [t[t.find(" ") :] for t in outputs]
    rng = random.Random(2)
    mixed = list(outputs)
    for i in rng.sample(range(N), round(N * MIXED_SHARE)):
        text = mixed[i]
        at = text.find(" ", rng.randrange(len(text) // 2, len(text)))
        at = at if at > 0 else len(text)
        mixed[i] = f"{text[:at]} {rng.choice(NON_ASCII_WORDS)}{text[at:]}"
    mixed_tpots = [t[t.find(" ") :] for t in mixed]
    print(
        f"\ncorpus: tokenizer trained in {trained - started:.1f} s; {N:,} distinct texts "
        f"({sum(map(len, outputs)) / N:,.0f} characters each) made in {made - trained:.1f} s"
    )
    return Corpus(tok, outputs, tpots, mixed, mixed_tpots, {})


def report(
    benchmark: Any, label: str, responses: int, osl: int, tpot: int, cpu_s: float, **extra: Any
) -> None:
    seconds = benchmark.stats.stats.median
    tokens = osl + tpot
    benchmark.extra_info.update(
        responses=responses,
        mean_osl=osl / responses,
        responses_per_s=responses / seconds,
        tokens_per_s=tokens / seconds,
        seconds_per_100k=seconds * 100_000 / responses,
        cpu_s=cpu_s,
        tokens_per_cpu_s=tokens / cpu_s,
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        rayon_threads=os.environ.get("RAYON_NUM_THREADS"),
        **extra,
    )
    more = "".join(f", {k} {v}" for k, v in extra.items())
    print(
        f"\n{label}: {responses:,} responses (mean OSL {osl / responses:.0f}) in {seconds:.2f} s "
        f"= {seconds * 100_000 / responses:.1f} s per 100k; CPU {cpu_s:.1f} s "
        f"= {tokens / cpu_s / 1e6:.2f} M tokens per CPU-second "
        f"({cpu_s / tokens * 1e9:.0f} ns per token){more}"
    )


def timed(benchmark: Any, run: Callable[[], Any]) -> tuple[Any, float]:
    def measured() -> tuple[Any, float]:
        cpu = time.process_time()
        result = run()
        return result, time.process_time() - cpu

    result: tuple[Any, float] = benchmark.pedantic(
        measured, rounds=1, iterations=1, warmup_rounds=0
    )
    return result


def encode_counts(tok: Tokenizer, texts: list[str]) -> list[int]:
    counts: list[int] = []
    for i in range(0, len(texts), ENCODE_BATCH):
        batch = tok.encode_batch_fast(texts[i : i + ENCODE_BATCH], add_special_tokens=False)
        counts.extend(len(e) for e in batch)
    return counts


def test_encode_batch_fast(benchmark: Any, corpus: Corpus) -> None:
    tok = corpus.tokenizer

    def run() -> tuple[list[int], list[int]]:
        return encode_counts(tok, corpus.outputs), encode_counts(tok, corpus.tpots)

    (osl, tpot), cpu_s = timed(benchmark, run)
    corpus.reference["osl"], corpus.reference["tpot"] = osl, tpot
    report(benchmark, "encode_batch_fast (OSL + TPOT)", N, sum(osl), sum(tpot), cpu_s)


def reference_counts(corpus: Corpus, key: str, texts: list[str], sample: int) -> list[int]:
    """``encode_batch_fast`` counts of ``texts[:sample]`` (all of them when
    ``test_encode_batch_fast`` ran first)."""
    if key in corpus.reference:
        return corpus.reference[key]
    return encode_counts(corpus.tokenizer, texts[:sample])


def test_fast_path(benchmark: Any, corpus: Corpus) -> None:
    counter = FastBPECounter.from_tokenizer(corpus.tokenizer)
    assert counter is not None, ineligibility_reason(corpus.tokenizer)
    outputs, tpots = corpus.outputs, corpus.tpots

    def run() -> list[tuple[int, int] | None]:
        count = counter.count_with_suffix
        return [
            count(text, len(text) - len(tpot)) for text, tpot in zip(outputs, tpots, strict=True)
        ]

    pairs, cpu_s = timed(benchmark, run)
    assert None not in pairs
    osl = [p[0] for p in pairs if p is not None]
    tpot = [p[1] for p in pairs if p is not None]
    expected_osl = reference_counts(corpus, "osl", outputs, 2000)
    expected_tpot = reference_counts(corpus, "tpot", tpots, 2000)
    assert osl[: len(expected_osl)] == expected_osl
    assert tpot[: len(expected_tpot)] == expected_tpot
    report(
        benchmark,
        "fast path count_with_suffix (OSL + TPOT)",
        N,
        sum(osl),
        sum(tpot),
        cpu_s,
        cached_words=counter.cached_words,
        checked=len(expected_osl),
    )


def test_fast_path_mixed(benchmark: Any, corpus: Corpus) -> None:
    counter = FastBPECounter.from_tokenizer(corpus.tokenizer)
    assert counter is not None
    tok = corpus.tokenizer
    outputs, tpots = corpus.mixed, corpus.mixed_tpots

    def run() -> tuple[list[int], list[int], int]:
        count = counter.count_with_suffix
        osl = [0] * N
        tpot = [0] * N
        slow: list[int] = []
        for i, (text, after) in enumerate(zip(outputs, tpots, strict=True)):
            pair = count(text, len(text) - len(after))
            if pair is None:
                slow.append(i)
            else:
                osl[i], tpot[i] = pair
        for start in range(0, len(slow), ENCODE_BATCH // 2):
            chunk = slow[start : start + ENCODE_BATCH // 2]
            texts = [outputs[i] for i in chunk] + [tpots[i] for i in chunk]
            encodings = tok.encode_batch_fast(texts, add_special_tokens=False)
            for j, i in enumerate(chunk):
                osl[i] = len(encodings[j])
                tpot[i] = len(encodings[len(chunk) + j])
        return osl, tpot, len(slow)

    (osl, tpot, fallbacks), cpu_s = timed(benchmark, run)
    assert abs(fallbacks - N * MIXED_SHARE) <= 1
    sample = slice(0, 2000)
    assert osl[sample] == encode_counts(tok, outputs[sample])
    assert tpot[sample] == encode_counts(tok, tpots[sample])
    report(
        benchmark,
        "fast path, 10 % non-ASCII to encode_batch_fast",
        N,
        sum(osl),
        sum(tpot),
        cpu_s,
        fallbacks=fallbacks,
    )


def count_all(
    tok: Tokenizer, corpus: Corpus, responses: int, fast: bool, mixed: bool = False
) -> Any:
    counter = TokenCounter(tok, fast=fast)
    outputs = corpus.mixed if mixed else corpus.outputs
    tpots = corpus.mixed_tpots if mixed else corpus.tpots
    for text, tpot in zip(outputs[:responses], tpots[:responses], strict=True):
        counter.submit(CountJob(osl=text, tpot=tpot))
    counts = counter.finish()
    assert counts.complete, counts.error
    # past a block the counts are the counter's spill files: read them whole
    return msgspec.structs.replace(
        counts, osl=np.asarray(counts.osl), tpot_tokens=np.asarray(counts.tpot_tokens)
    )


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "tokenizers"])
def test_token_counter(benchmark: Any, corpus: Corpus, fast: bool) -> None:
    counts, cpu_s = timed(benchmark, lambda: count_all(corpus.tokenizer, corpus, N, fast))
    if "osl" in corpus.reference:
        assert counts.osl.tolist() == corpus.reference["osl"]
        assert counts.tpot_tokens.tolist() == corpus.reference["tpot"]
    report(
        benchmark,
        f"TokenCounter fast={fast}",
        N,
        int(counts.osl.sum()),
        int(counts.tpot_tokens.sum()),
        cpu_s,
    )


def test_token_counter_mixed(benchmark: Any, corpus: Corpus) -> None:
    """10 % non-ASCII: the counter encodes those with tokenizers in a second
    thread while the fast path counts the rest."""
    counts, cpu_s = timed(
        benchmark, lambda: count_all(corpus.tokenizer, corpus, N, fast=True, mixed=True)
    )
    sample = slice(0, 2000)
    tok = corpus.tokenizer
    assert counts.osl.tolist()[sample] == encode_counts(tok, corpus.mixed[sample])
    assert counts.tpot_tokens.tolist()[sample] == encode_counts(tok, corpus.mixed_tpots[sample])
    report(
        benchmark,
        "TokenCounter fast=True, 10 % non-ASCII",
        N,
        int(counts.osl.sum()),
        int(counts.tpot_tokens.sum()),
        cpu_s,
    )


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Read by tokenizers at every call; the Rayon pool is not used at all.
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    yield


def test_token_counter_one_thread(benchmark: Any, corpus: Corpus, one_thread: None) -> None:
    responses = max(1, N // 4)
    counts, cpu_s = timed(
        benchmark, lambda: count_all(corpus.tokenizer, corpus, responses, fast=False)
    )
    report(
        benchmark,
        "TokenCounter tokenizers only, one thread",
        responses,
        int(counts.osl.sum()),
        int(counts.tpot_tokens.sum()),
        cpu_s,
    )


def test_encode_osl_only(benchmark: Any, corpus: Corpus) -> None:
    tok = corpus.tokenizer
    osl, cpu_s = timed(benchmark, lambda: encode_counts(tok, corpus.outputs))
    report(benchmark, "encode_batch_fast (OSL only)", N, sum(osl), 0, cpu_s)


# Per event and per answer ---------------------------------------------------------------

ANSWER_EVENTS = 64
PER_EVENT_ANSWERS = int(os.environ.get("MLPE_BENCH_TOKENS_ANSWERS", "20000"))
PER_EVENT_ROUNDS = 3


def prose_answers(count: int, events: int = ANSWER_EVENTS, seed: int = 5) -> list[list[str]]:
    """Answers of ``events`` events, one word each: a Zipf-like vocabulary of
    300 made-up words, a capital after a full stop, a comma now and then."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((1, 1, 2, 2, 3))))
        for _ in range(300)
    ]
    weights = [1 / (i + 1) for i in range(len(vocabulary))]
    answers = []
    for _ in range(count):
        words = rng.choices(vocabulary, weights, k=events)
        out, capital = [], True
        for i, word in enumerate(words):
            word = word.capitalize() if capital else word
            roll = rng.random()
            tail = "." if roll < 0.08 else "," if roll < 0.14 else ""
            capital = tail == "."
            out.append(("" if i == 0 else " ") + word + tail)
        answers.append(out)
    return answers


def one_character_answers(count: int, events: int = ANSWER_EVENTS) -> list[list[str]]:
    return [["a"] * events for _ in range(count)]


def test_counting_cost_per_event(benchmark: Any) -> None:
    """The OSL and TPOT counts of 64-event answers (the TPOT text: the
    answer after its first event), CPU per answer and per event, warm
    caches (a run's vocabulary is cached after its first answers)."""
    if NativeBPECounter is None:
        pytest.skip("the native core is not built (or MLPE_FAST_NO_EXTENSIONS is set)")
    maker = TextMaker()
    directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"mlpe-bench-bpe-{os.getpid()}"
    directory.mkdir(exist_ok=True)
    train_bpe(maker, directory / "tokenizer.json")
    tok = load_tokenizer(str(directory))
    native = bpe_counter(tok, native=True)
    twin = bpe_counter(tok, native=False)
    assert native is not None and twin is not None
    n = PER_EVENT_ANSWERS
    table: dict[str, dict[str, float]] = {}

    for kind, answers in (
        ("prose", prose_answers(n)),
        ("one character", one_character_answers(n)),
    ):
        texts = ["".join(a) for a in answers]
        boundaries = [len(a[0]) for a in answers]
        tpots = [t[b:] for t, b in zip(texts, boundaries, strict=True)]
        few = max(1, n // 5)  # tokenizers is ~10x slower: a fifth of the answers

        def by_tokenizers(
            texts: list[str] = texts, tpots: list[str] = tpots, few: int = few
        ) -> list[Any]:
            return list(
                zip(encode_counts(tok, texts[:few]), encode_counts(tok, tpots[:few]), strict=True)
            )

        runs: dict[str, tuple[Callable[[], list[Any]], int]] = {
            "C": (
                lambda texts=texts, boundaries=boundaries: native.count_pairs(texts, boundaries),
                n,
            ),
            "Python twin": (
                lambda texts=texts, boundaries=boundaries: twin.count_pairs(texts, boundaries),
                n,
            ),
            "tokenizers": (by_tokenizers, few),
        }
        reference = by_tokenizers()
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        for name, (run, _) in runs.items():  # warm the caches; check every count
            assert run()[:few] == reference, name
        for _ in range(PER_EVENT_ROUNDS):
            for name, (run, answers_run) in runs.items():
                started = time.process_time()
                run()
                cpu[name].append((time.process_time() - started) / answers_run)
        table[kind] = {name: float(np.median(v)) for name, v in cpu.items()}

    benchmark.extra_info["per_answer_s"] = table
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    print(
        f"\ncounting cost, {ANSWER_EVENTS}-event answers, OSL + TPOT, "
        f"median of {PER_EVENT_ROUNDS} rounds:"
    )
    for kind, row in table.items():
        base = row["C"]
        for name, per_answer in row.items():
            print(
                f"  {kind:14} {name:12} {per_answer * 1e6:8.2f} us per answer "
                f"{per_answer / ANSWER_EVENTS * 1e9:8.1f} ns per event  {per_answer / base:6.1f}x C"
            )
