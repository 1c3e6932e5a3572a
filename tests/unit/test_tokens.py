"""Token counting: offline tokenizer loading and the off-loop TokenCounter
(spec §1.2: OSL over the whole output, TPOT tokens after the first
content-bearing event, no special tokens)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing

from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.errors import LocalProtocolError, UsageError
from mlpe_fast.metrics.hf_cache import hf_cache_dir
from mlpe_fast.metrics.tokens import (
    CountJob,
    TokenCounter,
    count_job,
    load_tokenizer,
)
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from mlpe_fast.wire.events import NO_RESPONSE, ResponseSummary, ToolCall

DEMO_JSON = Path(DEMO_TOKENIZER) / "tokenizer.json"


def summary(
    *,
    content: str = "",
    reasoning: str = "",
    tools: Sequence[ToolCall] = (),
    content_after: str = "",
    reasoning_after: str = "",
    tools_after: Sequence[ToolCall] = (),
) -> ResponseSummary:
    return msgspec.structs.replace(
        NO_RESPONSE,
        status=200,
        t_head=1,
        t_first=2,
        t_done=3,
        content=content,
        reasoning=reasoning,
        tool_calls=tuple(tools),
        content_after_first=content_after,
        reasoning_after_first=reasoning_after,
        tool_calls_after_first=tuple(tools_after),
        finish_reason="stop",
        events=2,
        content_events=2,
        done=True,
        complete=True,
        keep_alive=True,
    )


def record(s: ResponseSummary, i: int = 0, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        sample_index=i,
        sample_id=f"s{i}",
        t_sched=0,
        t_issue=0,
        t_end=3,
        response=s,
        error_class=error,
        error_message="boom" if error else None,
    )


def text_record(text: str, i: int = 0, error: str | None = None) -> RequestRecord:
    """A streamed response of ``text`` whose first event carried one character."""
    return record(summary(content=text, content_after=text[1:]), i, error)


def job(r: RequestRecord) -> CountJob:
    return count_job(r, streaming=True)


@pytest.fixture
def demo() -> Tokenizer:
    return load_tokenizer(DEMO_TOKENIZER)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the network must not be used")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache selected through HF_HUB_CACHE."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def cache_repo(hub: Path, repo_id: str, commit: str, *, ref: bool = True) -> Path:
    """Lays out one cached snapshot the way huggingface_hub does (blob + symlink)."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    blob = repo / "blobs" / f"blob-{commit}"
    shutil.copyfile(DEMO_JSON, blob)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    try:
        (snapshot / "tokenizer.json").symlink_to(os.path.relpath(blob, snapshot))
    except OSError:  # no symlinks (Windows without developer mode): a copy will do
        shutil.copyfile(blob, snapshot / "tokenizer.json")
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return snapshot


# Loading ----------------------------------------------------------------------------


def test_demo_tokenizer_is_one_token_per_character(demo: Tokenizer) -> None:
    assert len(demo.encode("hello world", add_special_tokens=False)) == 11
    assert len(demo.encode("a\nb\t{}", add_special_tokens=False)) == 6
    # Outside printable ASCII every character is one <unk>.
    assert len(demo.encode("héllo €", add_special_tokens=False)) == 7


def test_load_from_tokenizer_json_path() -> None:
    tok = load_tokenizer(str(DEMO_JSON))
    assert len(tok.encode("abc", add_special_tokens=False)) == 3


def test_load_turns_off_truncation_and_padding(tmp_path: Path) -> None:
    tok = Tokenizer.from_file(str(DEMO_JSON))
    tok.enable_truncation(4)
    tok.enable_padding(length=32)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    loaded = load_tokenizer(str(tmp_path))
    assert loaded.truncation is None
    assert loaded.padding is None


def test_hf_id_resolves_from_the_cache_offline(hub: Path, no_network: None) -> None:
    cache_repo(hub, "acme/tiny-llm", "c0ffee")
    tok = load_tokenizer("acme/tiny-llm")
    assert len(tok.encode("hello", add_special_tokens=False)) == 5


def test_hf_id_prefers_the_snapshot_refs_main_names(hub: Path) -> None:
    old = cache_repo(hub, "acme/tiny", "aaa")
    cache_repo(hub, "acme/tiny", "bbb", ref=False)
    (hub / "models--acme--tiny" / "refs" / "main").write_text("aaa\n")
    # Make the referenced snapshot valid and the other one broken: the
    # referenced one must be chosen even though it is older.
    os.utime(old, (1, 1))
    bad = hub / "models--acme--tiny" / "snapshots" / "bbb" / "tokenizer.json"
    bad.unlink()
    bad.write_text("{not json")
    assert len(load_tokenizer("acme/tiny").encode("xy", add_special_tokens=False)) == 2


def test_hf_id_without_ref_uses_a_snapshot_that_has_the_file(hub: Path) -> None:
    cache_repo(hub, "acme/noref", "123", ref=False)
    assert load_tokenizer("acme/noref").get_vocab_size() > 0


def test_hf_home_locates_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hf_cache_dir() == tmp_path / "hf" / "hub"
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    cache_repo(tmp_path / "hf" / "hub", "org/model", "abc")
    assert load_tokenizer("org/model").get_vocab_size() > 0


def test_hf_cache_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert hf_cache_dir() == tmp_path / "huggingface" / "hub"


def assert_one_line_usage_error(excinfo: pytest.ExceptionInfo[UsageError], *parts: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message
    for part in parts:
        assert part in message, message


def test_uncached_hf_id_says_what_to_do(hub: Path, no_network: None) -> None:
    with pytest.raises(UsageError) as excinfo:
        load_tokenizer("meta-llama/Llama-3.1-8B-Instruct")
    assert_one_line_usage_error(
        excinfo,
        "'meta-llama/Llama-3.1-8B-Instruct'",
        str(hub),
        "never downloads",
        "local directory",
        "huggingface-cli download meta-llama/Llama-3.1-8B-Instruct tokenizer.json",
    )


def test_missing_path_says_so(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope" / "tokenizer.json")
    with pytest.raises(UsageError) as excinfo:
        load_tokenizer(missing)
    assert_one_line_usage_error(excinfo, missing, "no such file or directory")
    with pytest.raises(UsageError, match="no such file"):
        load_tokenizer("./models/llama")


def test_directory_without_tokenizer_json(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as excinfo:
        load_tokenizer(str(tmp_path))
    assert_one_line_usage_error(excinfo, "has no tokenizer.json")
    (tmp_path / "tokenizer.model").write_bytes(b"\0")
    with pytest.raises(UsageError) as excinfo:
        load_tokenizer(str(tmp_path))
    assert_one_line_usage_error(excinfo, "tokenizer.model", "save_pretrained")


def test_invalid_tokenizer_json(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0",\n "model": 42}')
    with pytest.raises(UsageError) as excinfo:
        load_tokenizer(str(bad))
    assert_one_line_usage_error(excinfo, "not a valid tokenizer.json")


def test_empty_name() -> None:
    with pytest.raises(UsageError, match="no tokenizer given"):
        load_tokenizer("  ")


def test_usage_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        load_tokenizer("")


# Counting -------------------------------------------------------------------------


def test_exact_counts_in_submission_order(demo: Tokenizer) -> None:
    texts = ["hello world", "a", "", "x" * 1000, "tab\there"]
    counter = TokenCounter(demo, batch_size=2)
    for i, text in enumerate(texts):
        counter.submit(job(text_record(text, i)))
    counts = counter.finish(timeout=10)
    assert counts.complete
    assert counts.pending == 0
    assert counts.error is None
    assert counts.osl.tolist() == [11, 1, 0, 1000, 8]
    assert counts.tpot_tokens.tolist() == [10, 0, 0, 999, 7]
    assert str(counts.osl.dtype) == "int64"
    assert len(counts) == 5


def test_failed_records_are_not_tokenized(demo: Tokenizer) -> None:
    counter = TokenCounter(demo)
    counter.submit(job(text_record("partial out", error="IdleTimeout")))
    counts = counter.finish(timeout=10)
    assert counts.complete
    assert counts.osl.tolist() == [0]


def test_no_special_tokens_and_no_truncation(demo: Tokenizer) -> None:
    demo.post_processor = TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    demo.enable_truncation(3)
    assert len(demo.encode("hello")) == 3  # what the counter must not do
    counter = TokenCounter(demo)
    counter.submit(job(text_record("hello")))
    assert counter.finish(timeout=10).osl.tolist() == [5]
    assert demo.truncation is not None  # the caller's tokenizer is left alone


class SpyEncoder:
    """Records which thread encodes; optionally slow or failing."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.threads: set[int] = set()
        self.calls = 0
        self.delay = delay
        self.fail = fail

    def encode_batch(
        self,
        input: Sequence[Any],
        /,
        is_pretokenized: bool = False,
        add_special_tokens: bool = True,
    ) -> list[str]:
        assert add_special_tokens is False
        self.threads.add(threading.get_ident())
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("tokenizer exploded\nsecond line")
        return list(input)  # one "token" per character


def test_submit_never_tokenizes_and_counting_runs_off_the_loop() -> None:
    spy = SpyEncoder(delay=0.2)
    ticks = 0

    async def main() -> list[int]:
        nonlocal ticks
        counter = TokenCounter(spy, batch_size=4)
        for i in range(10):
            counter.submit(job(text_record("abc", i)))
        assert spy.calls == 0  # deferred until drain
        loop_thread = threading.get_ident()

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        counts = await counter.drain(timeout=10)
        task.cancel()
        assert loop_thread not in spy.threads
        counter.close()
        osl: list[int] = counts.osl.tolist()
        return osl

    assert asyncio.run(main()) == [3] * 10
    assert spy.calls == 3
    # 3 batches of 0.2 s: the loop kept running meanwhile.
    assert ticks >= 20


def test_drain_keeps_the_counter_usable(demo: Tokenizer) -> None:
    async def main() -> tuple[list[int], list[int]]:
        counter = TokenCounter(demo)
        counter.submit(job(text_record("ab", 0)))
        first = await counter.drain(timeout=10)
        counter.submit(job(text_record("abcd", 1)))
        second = await counter.drain(timeout=10)
        assert second.complete
        counter.close()
        return first.osl.tolist(), second.osl.tolist()

    assert asyncio.run(main()) == ([2], [2, 4])


def test_live_counting_needs_no_drain(demo: Tokenizer) -> None:
    counter = TokenCounter(demo, live=True)
    for i in range(50):
        counter.submit(job(text_record("abc", i)))
    deadline = time.monotonic() + 5
    while counter.counted < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counter.counted == 50
    assert counter.submitted == 50
    assert counter.finish(timeout=1).complete


def test_finish_timeout_reports_incomplete() -> None:
    spy = SpyEncoder(delay=0.5)
    counter = TokenCounter(spy, batch_size=2)
    for i in range(6):
        counter.submit(job(text_record("abc", i)))
    counts = counter.finish(timeout=0.1)
    assert not counts.complete
    assert counts.pending > 0
    assert (counts.osl == -1).sum() == counts.pending
    assert len(counts) == 6


def test_drain_timeout_reports_incomplete_without_blocking() -> None:
    spy = SpyEncoder(delay=0.3)

    async def main() -> tuple[bool, int, float]:
        counter = TokenCounter(spy, batch_size=1)
        for i in range(5):
            counter.submit(job(text_record("abc", i)))
        started = time.monotonic()
        counts = await counter.drain(timeout=0.05)
        elapsed = time.monotonic() - started
        counter.close()
        return counts.complete, counts.pending, elapsed

    complete, pending, elapsed = asyncio.run(main())
    assert not complete
    assert pending == 5
    assert elapsed < 0.25


def test_tokenizer_failure_reports_incomplete_with_the_reason() -> None:
    counter = TokenCounter(SpyEncoder(fail=True))
    counter.submit(job(text_record("abc")))
    counts = counter.finish(timeout=5)
    assert not counts.complete
    assert counts.error is not None
    assert "RuntimeError: tokenizer exploded second line" in counts.error
    assert counts.osl.tolist() == [-1]


def test_submit_after_finish_raises(demo: Tokenizer) -> None:
    counter = TokenCounter(demo)
    counter.finish(timeout=1)
    with pytest.raises(LocalProtocolError):
        counter.submit(job(text_record("a")))


def test_finish_with_nothing_submitted(demo: Tokenizer) -> None:
    counts = TokenCounter(demo).finish(timeout=1)
    assert counts.complete
    assert len(counts) == 0


def test_finish_hands_the_counts_over_without_a_copy(demo: Tokenizer) -> None:
    """A point of a million requests held its counts twice, the counter's and
    finish()'s copy: 48 B a request where 24 do (issue 23)."""
    counter = TokenCounter(demo)
    n = 20_000
    for i in range(n):
        counter.submit(job(text_record("ab", i)))
    drained = asyncio.run(counter.drain(timeout=30))
    assert drained.complete
    tracemalloc.start()
    try:
        counts = counter.finish(timeout=30)
        grown, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counts.complete and len(counts) == n
    assert counts.osl.tolist() == drained.osl.tolist() == [2] * n
    assert counts.isl.tolist() == drained.isl.tolist()
    assert grown < 3 * 8 * n // 4, grown  # a copy of the three columns: 480 KB


def test_past_a_block_the_counts_are_handed_over_in_spill_files(
    demo: Tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A counter that waits for the load's end moves its counts to files a
    block at a time (issue 23: 24 B a request held to the point's end): the
    same counts as a counter that keeps them, read whole, by slices and by a
    mask; where the disk refuses, they stay in memory, the same."""
    import numpy as np

    from mlpe_fast.engine import record_columns
    from mlpe_fast.engine.spill import SpilledArray
    from mlpe_fast.metrics.tokens import counts_where

    monkeypatch.setattr(record_columns, "BLOCK_ROWS", 64)
    n = 1_000
    texts = [("ab " * (i % 13)) + str(i) for i in range(n)]
    kept = TokenCounter(demo, spill=False)
    spilled = TokenCounter(demo, batch_size=50, spill_dir=tmp_path)
    refused = TokenCounter(demo, spill_dir=tmp_path / "gone")  # no such directory
    live = TokenCounter(demo, live=True)
    for counter in (kept, spilled, refused, live):
        for i, text in enumerate(texts):
            counter.submit(job(text_record(text, i)))
    want = kept.finish(timeout=30)
    assert isinstance(want.osl, np.ndarray)
    keep = np.arange(n) % 3 == 1
    for counter, on_disk in ((spilled, True), (refused, False), (live, False)):
        counts = counter.finish(timeout=30)
        assert counts.complete and len(counts) == n
        for name in ("osl", "tpot_tokens", "isl"):
            got, expected = getattr(counts, name), getattr(want, name)
            assert isinstance(got, SpilledArray) is on_disk, name
            if on_disk:
                assert got.spilled >= n - 64 - 50 and len(got.tail) < 64 + 50
            assert np.asarray(got).tolist() == expected.tolist()
            assert got[130:700].tolist() == expected[130:700].tolist()
            assert counts_where(got, keep).tolist() == expected[keep].tolist()
        window = counts.subset(keep)
        assert np.asarray(window.osl).tolist() == want.osl[keep].tolist()


@pytest.fixture
def clean_rayon_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    monkeypatch.delenv("RAYON_RS_NUM_CPUS", raising=False)
    yield


def test_pool_size_is_set_only_when_the_user_did_not(
    clean_rayon_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    TokenCounter(SpyEncoder(), threads=3).close()
    assert os.environ["RAYON_NUM_THREADS"] == "3"
    monkeypatch.setenv("RAYON_NUM_THREADS", "1")
    TokenCounter(SpyEncoder(), threads=5).close()
    assert os.environ["RAYON_NUM_THREADS"] == "1"


def test_default_pool_size_is_capped(clean_rayon_env: None) -> None:
    TokenCounter(SpyEncoder()).close()
    assert 1 <= int(os.environ["RAYON_NUM_THREADS"]) <= 8


def test_batch_size_must_be_positive(demo: Tokenizer) -> None:
    with pytest.raises(ValueError):
        TokenCounter(demo, batch_size=0)


# The fast path inside the counter ---------------------------------------------------


def test_fast_path_counts_equal_tokenizers_over_mixed_text() -> None:
    """ASCII texts take the exact fast path, the others go to tokenizers in a
    second thread; every count equals the counter without the fast path."""
    from tests.unit.test_fast_bpe import LLAMA3_PATTERN, split_then_byte_level, train

    tok = train(split_then_byte_level(LLAMA3_PATTERN))
    texts = [
        "Hello there, it's 2026!\n",
        "naïve café — déjà vu",
        "plain words and 12345 digits",
        "",
        "x",
        "tabs\tand\r\nbreaks  ",
        "日本語のテキスト",
    ]
    jobs = []
    for i, text in enumerate(texts * 40):
        first = text[: i % 4]
        jobs.append(CountJob(osl=text or None, tpot=text[len(first) :] or None, isl=text[::-1]))
    counts = {}
    for fast in (True, False):
        counter = TokenCounter(tok, batch_size=16, fast=fast)
        for j in jobs:
            counter.submit(j)
        counts[fast] = counter.finish(timeout=30)
        assert counts[fast].complete
    assert counts[True].method.startswith("exact fast path")
    assert counts[False].method == "tokenizers"
    for name in ("osl", "tpot_tokens", "isl"):
        assert getattr(counts[True], name).tolist() == getattr(counts[False], name).tolist()
    expected = [len(tok.encode(j.osl, add_special_tokens=False)) if j.osl else 0 for j in jobs[:7]]
    assert counts[True].osl.tolist()[:7] == expected


def test_live_counting_never_takes_the_fast_path() -> None:
    from tests.unit.test_fast_bpe import LLAMA3_PATTERN, split_then_byte_level, train

    counter = TokenCounter(train(split_then_byte_level(LLAMA3_PATTERN)), live=True)
    assert counter.method.startswith("tokenizers (live")
    counter.close()
