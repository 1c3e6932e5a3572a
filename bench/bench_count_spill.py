"""What the token counter's spill costs per waiting job (issue 23: memory
flat in run length; ``metrics/count_spill.py``).

A point counts its tokens after the load, and past two batches of waiting
jobs its worker moves them to a file and reads them back to count.  Side by
side, per job of a 64-token prose answer (its TPOT part and a salted
prompt, about 1 KB), 20,000 jobs in batches of ``SPILL_BATCH``:

- ``in memory``: what a counter without the spill does (a ``deque``'s
  append and popleft), the baseline;
- ``msgpack spill``: ``JobSpill.write`` then ``JobSpill.read`` of every
  batch (msgspec encode and decode, ``pwrite``/``pread`` to a file in
  ``TMPDIR``), the counter's path;
- ``pickle encode+decode``: ``pickle`` of the same batches without the
  file, the format kept for batches msgpack cannot hold (and the one not
  chosen for the rest).

The spill's write runs on the counter's worker during the load (the GIL
held for the encode, released for the ``pwrite``); its read after it.

Run::

    PYTHONPATH=src pytest bench/bench_count_spill.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import pickle
import random
from collections import deque
from typing import Any

import pytest

from mlpe_fast.metrics.count_spill import JobSpill
from mlpe_fast.metrics.tokens import SPILL_BATCH, CountJob

from .bench_events import WORDS

JOBS = 20_000


@pytest.fixture(scope="module")
def batches() -> list[list[CountJob]]:
    rng = random.Random(23)
    jobs = []
    for i in range(JOBS):
        answer = " ".join(rng.choice(WORDS) for _ in range(64))
        prompt = " ".join(rng.choice(WORDS) for _ in range(64))
        jobs.append(CountJob(answer, answer[4:], f"{prompt} [salt {i:08x}]"))
    return [jobs[i : i + SPILL_BATCH] for i in range(0, JOBS, SPILL_BATCH)]


def in_memory(batches: list[list[CountJob]]) -> None:
    queue: deque[CountJob] = deque()
    for batch in batches:
        for job in batch:
            queue.append(job)
    while queue:
        queue.popleft()


def spilled(batches: list[list[CountJob]]) -> None:
    spill: JobSpill[CountJob] = JobSpill(None, CountJob)
    for batch in batches:
        spill.write(batch)
    while spill.read():
        pass
    spill.close()


def written(batches: list[list[CountJob]]) -> None:
    spill: JobSpill[CountJob] = JobSpill(None, CountJob)
    for batch in batches:
        spill.write(batch)
    spill.close()


def pickled(batches: list[list[CountJob]]) -> None:
    for batch in batches:
        pickle.loads(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))


VARIANTS = {
    "in memory": in_memory,
    "msgpack spill": spilled,
    "msgpack write only": written,
    "pickle encode+decode": pickled,
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.benchmark(group="count-job spill: 20,000 jobs of 64-token answers")
def test_count_job_spill(benchmark: Any, batches: Any, variant: str) -> None:
    benchmark.pedantic(VARIANTS[variant], args=(batches,), rounds=7, iterations=1)
    per_job = benchmark.stats.stats.median / JOBS * 1e6
    benchmark.extra_info["us_per_job"] = round(per_job, 3)
    print(f"\n{variant}: {per_job:.3f} us per job")
