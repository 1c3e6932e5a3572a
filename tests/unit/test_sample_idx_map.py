"""sample_idx_map.json from the spool (artifacts/sample_idx_map.py): byte for
byte the dict-based writer's file, with memory flat in the entry count, and
never half a file under the real name (issue 23)."""

from __future__ import annotations

import gc
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from mlpe_fast.artifacts.sample_idx_map import SampleIndexSpool, write_sample_idx_map

PREFIX = "0123456789abcdef"

#: Sample ids no client mints: the spool must still give a dict's answer.
ODD_IDS = [
    "",
    "x",
    "not-hex-at-all",
    'quote"and\\backslash',
    "line\nbreak\ttab\x01\x7f",
    "é☃😀 unicode",
    "\u2028\u2029",
    "a" * 32,  # client-shaped, counter past the bitmaps
    "A" * 32,  # the same bytes in capitals: another key
    PREFIX + "0" * 15 + "1",  # a client id ...
    PREFIX.upper() + "0" * 15 + "1",  # ... and its capitals
    "0x" + "0" * 30,  # int(..., 16) would take it
    "00" + "0" * 30,
    "0" * 32,  # all digits: islower() is False
    "00 11 22 33 44 55 66 77 88 99 aa",  # bytes.fromhex takes it: 11 bytes ...
    "0011223344556677" + "0" * 10 + "8899aa",  # ... this id's, once cut in two
    "ab_c" + "0" * 28,
    "\u0661" * 32,  # Arabic-Indic digits: int() reads them
    'a": 5',  # a ": " inside the key
]


def client_id(counter: int, prefix: str = PREFIX) -> str:
    return f"{prefix}{counter:016x}"


def build(
    entries: list[tuple[str, str, int]], tmp_path: Path, **kwargs: int
) -> tuple[SampleIndexSpool, dict[str, dict[str, int]]]:
    spool = SampleIndexSpool(tmp_path / "spool", **kwargs)
    mapping: dict[str, dict[str, int]] = {}
    for phase, uuid, index in entries:
        spool.add(phase, uuid, index)
        mapping.setdefault(phase, {})[uuid] = index
    return spool, mapping


def assert_same_file(
    spool: SampleIndexSpool, mapping: dict[str, dict[str, int]], tmp_path: Path
) -> bytes:
    write_sample_idx_map(tmp_path / "dict.json", mapping)
    write_sample_idx_map(tmp_path / "spool.json", spool)
    expected = (tmp_path / "dict.json").read_bytes()
    assert (tmp_path / "spool.json").read_bytes() == expected
    assert spool == mapping
    assert [list(spool[p]) for p in spool] == [list(m) for m in mapping.values()]
    return expected


@pytest.mark.parametrize("buffer_bytes", [1, 256, 64 << 10])
def test_the_dict_writers_file_byte_for_byte(tmp_path: Path, buffer_bytes: int) -> None:
    rng = random.Random(23)
    phases = ["performance", "gpqa", "aime 2025", "ünïcode phase"]
    ids = [client_id(i) for i in range(3_000)] + [client_id(i, "f" * 16) for i in range(500)]
    ids += ODD_IDS
    rng.shuffle(ids)
    entries = [(rng.choice(phases), uuid, rng.randrange(-5, 10**9)) for uuid in ids]
    # repeats, within a phase and across phases: first position, last value
    for phase, uuid, _ in rng.sample(entries, 300):
        entries.insert(rng.randrange(len(entries)), (phase, uuid, rng.randrange(100)))
    for uuid in ODD_IDS:
        entries.append(("performance", uuid, rng.randrange(100)))
    spool, mapping = build(entries, tmp_path, buffer_bytes=buffer_bytes)
    with spool:
        expected = assert_same_file(spool, mapping, tmp_path)
        assert json.loads(expected) == mapping
    assert len(spool) == 0  # closed: the entries went with the files


def test_an_empty_map_and_one_entry(tmp_path: Path) -> None:
    with SampleIndexSpool(tmp_path) as spool:
        assert_same_file(spool, {}, tmp_path)
        assert (tmp_path / "spool.json").read_bytes() == b"{}"
        spool.add("performance", "u", 0)
        assert_same_file(spool, {"performance": {"u": 0}}, tmp_path)


def test_spilled_entries_leave_no_file_behind(tmp_path: Path) -> None:
    """The spool's files are anonymous: the folder shows none, spilled or closed."""
    folder = tmp_path / "run"
    with SampleIndexSpool(folder, buffer_bytes=1024) as spool:
        for i in range(5_000):
            spool.add("performance", client_id(i), i)
        assert list(folder.iterdir()) == []
        spool.write(folder / "sample_idx_map.json")
        assert [p.name for p in folder.iterdir()] == ["sample_idx_map.json"]
    assert len(json.loads((folder / "sample_idx_map.json").read_bytes())["performance"]) == 5_000


def test_memory_is_flat_in_the_entry_count(tmp_path: Path) -> None:
    """tracemalloc: the spool's own memory from its 20,000th entry to its
    200,000th grows by the bitmap's bit a query, not a dict entry's ~150 B."""
    rng = random.Random(1)
    ids = [client_id(i) for i in range(200_000)]
    rng.shuffle(ids)  # records end out of issue order
    spool = SampleIndexSpool(tmp_path)
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(20_000):
            spool.add("performance", ids[i], i)
        at_20k = tracemalloc.get_traced_memory()[0]
        for i in range(20_000, 200_000):
            spool.add("performance", ids[i], i)
        at_200k, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with spool:
        per_entry = (at_200k - at_20k) / 180_000
        assert per_entry < 1.0, f"{per_entry:.1f} B per entry"
        assert peak - at_20k < 200_000  # one buffer of 64 KiB and the bitmap's growth
        assert len(spool["performance"]) == 200_000


def test_a_failed_write_keeps_the_file_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sample_idx_map.json"
    path.write_bytes(b"earlier")
    with SampleIndexSpool(tmp_path, buffer_bytes=1) as spool:
        for i in range(100):
            spool.add("performance", client_id(i), i)

        def full(*args: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr("mlpe_fast.artifacts.sample_idx_map._PhaseSpool.write_to", full)
        with pytest.raises(OSError, match="No space"):
            spool.write(path)
    assert path.read_bytes() == b"earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample_idx_map.json"]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL")
def test_a_kill_in_mid_write_leaves_no_half_file_under_the_name(tmp_path: Path) -> None:
    """A process killed (SIGKILL) after it wrote part of the entries: the
    real name was never written, only ``.partial``."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from mlpe_fast.artifacts import sample_idx_map as m
        spool = m.SampleIndexSpool(sys.argv[1], buffer_bytes=1024)
        for i in range(10_000):
            spool.add("performance", f"{PREFIX}{{i:016x}}", i)
        whole = m._PhaseSpool.write_to
        def killed(self, out):
            out.write(next(self.blocks()))
            out.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        m._PhaseSpool.write_to = killed
        spool.write(os.path.join(sys.argv[1], "sample_idx_map.json"))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", script, str(tmp_path)]
    done = subprocess.run(argv, env=env, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL
    assert [p.name for p in tmp_path.iterdir()] == ["sample_idx_map.json.partial"]
    assert (tmp_path / "sample_idx_map.json.partial").read_bytes().startswith(b"{\n")


def test_a_spool_dropped_unclosed_closes_its_files(tmp_path: Path) -> None:
    """Its files are memory that happens to be on disk: freed with it, with
    no unclosed-file warning (which the suite makes an error)."""
    spool = SampleIndexSpool(tmp_path, buffer_bytes=1)
    for i in range(10):
        spool.add("performance", client_id(i), i)
    file = spool._phases["performance"].file
    assert file is not None and not file.closed
    del spool
    gc.collect()
    assert file.closed
