"""What a point keeps per request (issue 23): its records without the
answers' texts, once counted and logged, so the memory a point holds does
not grow with the answers' length; the texts are in ``events.jsonl``.

Counts, not times: tracemalloc's bytes held by a point's result, at two
answer lengths and at two run lengths.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import os
import tempfile
import tracemalloc
from pathlib import Path

import msgspec
import pytest

from mlpe_fast.config import RunConfig
from mlpe_fast.demo import demo_config, simulated_endpoint
from mlpe_fast.engine import record_columns
from mlpe_fast.point import run_point

REQUESTS = 200


def _held(tmp_path: Path, tokens: int, name: str, requests: int = REQUESTS) -> int:
    """The bytes a point's result holds (traced while it lives, less after
    it is gone), for ``requests`` answers of ``tokens`` one-character tokens."""
    config = demo_config(RunConfig(report_dir=str(tmp_path / name)), set())
    config = msgspec.structs.replace(
        config, concurrency=8, num_samples=requests, max_output_tokens=tokens
    )
    flags = ("--output-len", str(tokens), "--output-len-dist", "fixed")
    with simulated_endpoint(flags) as endpoint:
        tracemalloc.start()
        try:
            result = asyncio.run(run_point(config, endpoint, progress=False))
            assert result.stats.completed == requests
            gc.collect()
            with_result = tracemalloc.get_traced_memory()[0]
            del result
            gc.collect()
            return with_result - tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()


def test_kept_records_carry_no_text_and_the_log_keeps_it(tmp_path: Path) -> None:
    config = demo_config(RunConfig(report_dir=str(tmp_path / "run")), set())
    config = msgspec.structs.replace(config, concurrency=4, num_samples=20, max_output_tokens=16)
    with simulated_endpoint() as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    assert len(result.records) == 20 and result.stats.completed == 20
    for record in result.records:
        assert record.response.content == record.response.content_after_first == ""
        assert record.response.content_events == 16 and record.response.usage is not None
    # The figures were counted from the texts, and the log holds them.
    assert result.stats.osl_total == 20 * 16
    outputs = [
        json.loads(line)["data"]
        for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
        if '"sample.complete"' in line
    ]
    assert len(outputs) == 20
    assert all(len("".join(data[1])) == 16 for data in outputs)


def test_a_point_holds_the_same_per_request_whatever_the_answer_length(tmp_path: Path) -> None:
    """Answers four times longer (2,048 characters against 512, each kept
    twice before: the content and what came after the first token) cost no
    more per record.  Both lengths are past 256, so that their counts are
    ints of their own alike (CPython caches the small ones)."""
    short = _held(tmp_path, 512, "short")
    long = _held(tmp_path, 2048, "long")
    assert short > 0
    per_request = (long - short) / REQUESTS
    assert per_request < 256, (short, long)


def test_a_point_holds_a_few_hundred_bytes_per_request_whatever_its_length(
    tmp_path: Path,
) -> None:
    """Each request a point's result holds is a row of compact columns
    (``engine/record_columns.py``) and its samples, the same from the
    200th request to the 1,000th: about 360 bytes here, where a record
    kept as objects cost about 1.4 KB (issue 23)."""
    short = _held(tmp_path, 300, "short", 200)
    long = _held(tmp_path, 300, "long", 1_000)
    per_request = (long - short) / 800
    assert 0 < per_request < 512, (short, long)


def test_past_the_rows_kept_in_memory_a_point_holds_only_its_figures_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the records' rows spilled past 64 in memory (the default keeps
    8,192: ``engine/record_columns.py``), what a point's result holds per
    request from its 200th to its 1,000th is its figures' own per-record
    series (about 70 B here: the exact percentiles' samples, the per-record
    TTFT, TPOT and latency); the rows kept in memory held about 365 B."""
    monkeypatch.setattr(record_columns, "MEMORY_ROWS", 64)
    short = _held(tmp_path, 300, "short", 200)
    long = _held(tmp_path, 300, "long", 1_000)
    per_request = (long - short) / 800
    assert 0 < per_request < 128, (short, long)


def test_a_point_whose_records_cannot_be_spilled_keeps_them_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No room for the spill file (the run folder's disk full): the rows
    stay in memory, every figure is whole, and the table and
    ``report.txt`` say why the memory was not bounded."""

    def full(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(record_columns, "MEMORY_ROWS", 16)
    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    config = demo_config(RunConfig(report_dir=str(tmp_path / "run")), set())
    config = msgspec.structs.replace(config, concurrency=4, num_samples=40, max_output_tokens=8)
    with simulated_endpoint() as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    assert result.stats.completed == len(result.records) == 40
    warning = f"records kept in memory: cannot write to {tmp_path / 'run'}: "
    assert warning in result.table
    assert warning in (tmp_path / "run" / "report.txt").read_text()
    assert len({r.sample_id for r in result.records}) == 40
    assert all(r.response.content_events == 8 for r in result.records)


def test_a_point_read_a_block_at_a_time_gives_the_figures_of_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole point, goodput and steady state included, with every figure
    past its block sizes (rows spilled past 16, blocks of 32 rows, order
    statistics gathered up to 16 samples; the defaults are 8,192, 65,536 and
    65,536): the percentiles are those of the records' own samples, the
    per-record samples are in spill files, and the run folder is written."""
    import numpy as np

    from mlpe_fast.config.slo import Slo
    from mlpe_fast.engine.spill import SpilledArray
    from mlpe_fast.metrics import order_stats
    from mlpe_fast.metrics.series import PERCENTILES

    monkeypatch.setattr(record_columns, "MEMORY_ROWS", 16)
    monkeypatch.setattr(record_columns, "BLOCK_ROWS", 32)
    monkeypatch.setattr(order_stats, "GATHER", 16)
    config = demo_config(RunConfig(report_dir=str(tmp_path / "run")), set())
    config = msgspec.structs.replace(
        config, concurrency=4, num_samples=200, max_output_tokens=8, goodput=Slo(e2el=60_000)
    )
    with simulated_endpoint() as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    stats = result.stats
    assert stats.completed == len(result.records) == 200
    assert isinstance(stats.raw.latency_per_record, SpilledArray)
    counts = stats.raw.counts
    assert counts is not None and isinstance(counts.osl, SpilledArray)  # the counter's files
    assert stats.osl is not None and stats.osl.count == 200
    assert stats.osl_total == int(np.asarray(counts.osl).sum()) > 0
    ttft = [r.response.t_first - r.t_issue for r in result.records]
    latency = [r.response.t_done - r.t_issue for r in result.records]
    for got, samples in ((stats.ttft, ttft), (stats.latency, latency)):
        assert got is not None and got.count == 200
        grid = np.percentile(samples, PERCENTILES, method="lower")
        assert list(got.percentiles.values()) == [float(v) for v in grid]
    summary = json.loads((tmp_path / "run" / "performance" / "result_summary.json").read_text())
    assert summary["mlpe_fast"]["goodput"]["good"] == 200
    snapshot = json.loads((tmp_path / "run" / "metrics" / "final_snapshot.json").read_text())
    series = {m["name"]: m for m in snapshot["metrics"] if m.get("type") == "series"}
    assert series["ttft_ns"]["percentiles"]["50.0"] == float(
        np.percentile(ttft, 50, method="lower")
    )
