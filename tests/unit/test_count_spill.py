"""The token counter's waiting jobs on disk (metrics/count_spill.py): the
same counts in the same order as jobs kept in memory, memory that does not
grow with the jobs waiting, nothing lost when the disk says no."""

from __future__ import annotations

import gc
import os
import random
import time
import tracemalloc
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from mlpe_fast.metrics.count_inputs import MessageText, PromptMessages
from mlpe_fast.metrics.count_spill import JobSpill, SpillError
from mlpe_fast.metrics.tokens import SPILL_BATCH, CountJob, TokenCounter
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

WORDS = [f"w{i}" * (1 + i % 4) for i in range(24)]  # words of 2 to 12 characters


@pytest.fixture
def demo() -> Tokenizer:
    return Tokenizer.from_file(str(Path(DEMO_TOKENIZER) / "tokenizer.json"))


def prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def mixed_jobs(n: int, seed: int = 7) -> list[CountJob]:
    """Every kind of count input: plain and non-ASCII text, messages with
    reasoning and tool calls, chat prompts, token ids, nothing."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        out = prose(rng, 40) + (" déjà vu ☃" if i % 7 == 0 else "")
        kind = i % 5
        if kind == 0:
            jobs.append(CountJob(out, out[4:], prose(rng, 30) + f" salt {i}"))
        elif kind == 1:
            call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            jobs.append(
                CountJob(
                    MessageText(out, reasoning="think " * 3, tool_calls=(call,)),
                    MessageText(out[4:]),
                    PromptMessages(({"role": "user", "content": prose(rng, 20)},)),
                )
            )
        elif kind == 2:
            jobs.append(CountJob(out, None, tuple(range(i % 50))))
        elif kind == 3:
            jobs.append(CountJob(None, None, prose(rng, 10)))  # a failed query
        else:
            jobs.append(CountJob(out, out[1:], ""))
    return jobs


def wait_for_spill(counter: TokenCounter, jobs: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while counter.spilled < jobs:
        assert time.monotonic() < deadline, f"spilled {counter.spilled} of {jobs} jobs"
        time.sleep(0.01)


def test_spilled_jobs_count_as_jobs_kept_in_memory(demo: Tokenizer, tmp_path: Path) -> None:
    jobs = mixed_jobs(5 * SPILL_BATCH + 37)
    kept = TokenCounter(demo, spill=False)
    spilled = TokenCounter(demo, spill_dir=tmp_path)
    for one in jobs:
        kept.submit(one)
        spilled.submit(one)
    wait_for_spill(spilled, 4 * SPILL_BATCH)
    a, b = kept.finish(timeout=60), spilled.finish(timeout=60)
    assert a.complete and b.complete and b.error is None
    assert a.osl.tolist() == b.osl.tolist() and a.isl.tolist() == b.isl.tolist()
    assert a.tpot_tokens.tolist() == b.tpot_tokens.tolist()
    assert min(b.osl.tolist()) == 0 and max(b.osl.tolist()) > 40  # failures and answers
    assert a.spilled_jobs == 0 and b.spilled_jobs >= 4 * SPILL_BATCH
    assert b.spilled_bytes > 0 and b.spill_failure is None
    assert os.listdir(tmp_path) == []  # anonymous: never a name in the run folder


def test_a_drain_counts_the_spilled_jobs_first_then_spilling_goes_on(demo: Tokenizer) -> None:
    import asyncio

    jobs = mixed_jobs(6 * SPILL_BATCH, seed=3)
    reference = TokenCounter(demo, spill=False)
    for one in jobs:
        reference.submit(one)
    expected = reference.finish(timeout=60).osl.tolist()
    counter = TokenCounter(demo)
    for one in jobs[: 3 * SPILL_BATCH]:
        counter.submit(one)
    wait_for_spill(counter, 2 * SPILL_BATCH)
    first = asyncio.run(counter.drain(timeout=60))
    assert first.complete and first.osl.tolist() == expected[: 3 * SPILL_BATCH]
    for one in jobs[3 * SPILL_BATCH :]:
        counter.submit(one)
    wait_for_spill(counter, 4 * SPILL_BATCH)
    assert counter.finish(timeout=60).osl.tolist() == expected


def test_waiting_jobs_hold_no_memory_past_two_batches(demo: Tokenizer) -> None:
    """10,000 waiting jobs of ~1.2 KB: about 12 MB held in memory without
    the spill (the check fails then), under 2 MB with it."""
    answer, prompt = prose(random.Random(1), 100), prose(random.Random(2), 60)
    jobs = 10_000
    held = {}
    for spill in (True, False):
        counter = TokenCounter(demo, spill=spill)
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for i in range(jobs):
                out = f"{answer} {i}"  # a string of its own per job, as answers are
                counter.submit(CountJob(out, out[3:], f"{prompt} salt {i}"))
            if spill:
                # every whole batch written (the worker leaves less than one),
                # and that last write's buffers let go: nothing in flight
                wait_for_spill(counter, jobs - jobs % SPILL_BATCH)
                time.sleep(0.1)
            gc.collect()
            held[spill] = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        if spill:
            counts = counter.finish(timeout=120)
            assert counts.complete and len(counts) == jobs and counts.osl[-1] == len(answer) + 5
        else:
            counter.close()
    assert held[False] > 10_000_000  # the case the spill is for
    assert held[True] < 2_000_000, held


def test_a_spill_that_cannot_be_written_keeps_the_jobs_in_memory(
    demo: Tokenizer, tmp_path: Path
) -> None:
    jobs = mixed_jobs(3 * SPILL_BATCH, seed=5)
    reference = TokenCounter(demo, spill=False)
    counter = TokenCounter(demo, spill_dir=tmp_path / "gone")  # no such directory
    for one in jobs:
        reference.submit(one)
        counter.submit(one)
    time.sleep(0.2)
    counts = counter.finish(timeout=60)
    assert counts.complete and counts.osl.tolist() == reference.finish(timeout=60).osl.tolist()
    assert counts.spilled_jobs == 0
    assert counts.spill_failure is not None and "FileNotFoundError" in counts.spill_failure


def test_the_spill_file_reads_back_in_order_and_empties(tmp_path: Path) -> None:
    spill: JobSpill[CountJob] = JobSpill(tmp_path, CountJob)
    batches = [mixed_jobs(10, seed=s) for s in range(4)]
    # A tool call's integer past 64 bits: msgpack cannot hold it, pickle can.
    huge = MessageText("x", tool_calls=({"function": {"arguments": 2**70}},))
    batches.append([CountJob(huge, None, "p")])
    for batch in batches[:3]:
        spill.write(batch)
    assert spill.read() == batches[0] and spill.waiting == 20
    for batch in batches[3:]:
        spill.write(batch)
    assert [spill.read() for _ in range(4)] == batches[1:]
    assert spill.read() == [] and spill.waiting == 0
    assert spill._file is not None and os.fstat(spill._file.fileno()).st_size == 0
    assert spill.jobs == 41 and spill.peak_bytes > 0
    spill.close()


def test_a_failed_write_raises_and_the_file_stays_as_it_was(tmp_path: Path) -> None:
    spill: JobSpill[CountJob] = JobSpill(tmp_path / "missing", CountJob)
    with pytest.raises(SpillError, match="FileNotFoundError"):
        spill.write(mixed_jobs(3))
    with pytest.raises(SpillError):  # spilling stays off
        spill.write(mixed_jobs(3))
    assert spill.jobs == 0 and spill.waiting == 0 and spill.read() == []


def test_a_batch_neither_format_can_hold_stays_in_memory(tmp_path: Path) -> None:
    class Unpicklable:
        def __reduce__(self) -> object:
            raise TypeError("not this one")

    spill: JobSpill[CountJob] = JobSpill(tmp_path, CountJob)
    odd = MessageText("x", tool_calls=({"function": {"arguments": Unpicklable()}},))
    with pytest.raises(SpillError, match="cannot write a batch: TypeError"):
        spill.write([CountJob(odd, None, "p")])
    assert spill.jobs == 0 and spill.failure is not None
