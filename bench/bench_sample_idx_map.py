"""``sample_idx_map.json`` of a long point (issue 23): the spool
(``artifacts/sample_idx_map.py``) beside the dict it replaced, in one run.

200,000 entries of one client's sample ids, in a shuffled order (records
end out of issue order), then the file written; per entry: the time of
``add`` and the write together (median of 5 rounds), and the memory held
once every entry is in (tracemalloc, in a pass of its own).  Both files
are checked equal byte for byte.

    PYTHONPATH=src pytest bench/bench_sample_idx_map.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.artifacts.sample_idx_map import SampleIndexSpool, write_sample_idx_map

ENTRIES = 200_000
PREFIX = "5eed0123456789ab"
RESULTS: dict[str, dict[str, float]] = {}


def entries() -> list[tuple[str, int]]:
    ids = [f"{PREFIX}{i:016x}" for i in range(ENTRIES)]
    random.Random(23).shuffle(ids)
    return [(uuid, i % 1_000) for i, uuid in enumerate(ids)]


def as_dict(folder: Path, pairs: list[tuple[str, int]]) -> Callable[[], None]:
    """The writer before: one dict entry a query, the file from the dict."""
    mapping: dict[str, dict[str, int]] = {}
    for uuid, index in pairs:
        phase = mapping.get("performance")
        if phase is None:
            phase = mapping["performance"] = {}
        phase[uuid] = index
    return lambda: write_sample_idx_map(folder / "sample_idx_map.json", mapping)


def as_spool(folder: Path, pairs: list[tuple[str, int]]) -> Callable[[], None]:
    spool = SampleIndexSpool(folder)
    for uuid, index in pairs:
        spool.add("performance", uuid, index)

    def write() -> None:
        with spool:
            spool.write(folder / "sample_idx_map.json")

    return write


VARIANTS = {"dict (before)": as_dict, "spool": as_spool}


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, int]]:
    return entries()


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.benchmark(group="sample_idx_map.json: 200,000 entries")
def test_index_map(benchmark: Any, pairs: Any, variant: str, tmp_path: Path) -> None:
    build = VARIANTS[variant]
    folder = tmp_path / variant.split(maxsplit=1)[0]
    folder.mkdir()

    def one_round() -> None:  # every entry in, then the file
        build(folder, pairs)()

    benchmark.pedantic(one_round, rounds=5, iterations=1, warmup_rounds=1)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        write = build(folder, pairs)
        held = tracemalloc.get_traced_memory()[0] - before
        write()
    finally:
        tracemalloc.stop()
    ns = benchmark.stats.stats.median / ENTRIES * 1e9
    written = (folder / "sample_idx_map.json").read_bytes()
    assert written.count(b"\n") == ENTRIES + 3
    assert [p.name for p in folder.iterdir()] == ["sample_idx_map.json"]
    RESULTS[variant] = {"ns": ns, "bytes": held / ENTRIES, "file": hash(written)}
    benchmark.extra_info.update(ns_per_entry=round(ns), bytes_per_entry=round(held / ENTRIES, 2))
    print(f"\n{variant}: {ns:.0f} ns and {held / ENTRIES:.2f} B held per entry", end="")
    if len(RESULTS) == len(VARIANTS):
        spool, dict_ = RESULTS["spool"], RESULTS["dict (before)"]
        assert spool["file"] == dict_["file"]  # the same bytes
        print(
            f"; spool / dict: time {spool['ns'] / dict_['ns']:.2f}x, "
            f"memory {spool['bytes'] / dict_['bytes']:.4f}x"
        )
