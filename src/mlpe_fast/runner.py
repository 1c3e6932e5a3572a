"""Runs one measurement point: dataset -> scheduler -> engine -> records ->
metrics -> run folder -> table (``docs/architecture.md``, data flow).

The event loop does the I/O and the scheduling; token counting runs in a
worker thread beside it, fed one record at a time; the run folder is written
once the point is over.  Every issued request yields exactly one record, and
the counts in the table are computed from those records.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import msgspec

from . import sim
from .artifacts.config_yaml import write_config_yaml
from .artifacts.events import (
    SESSION_ENDED,
    SESSION_START_PERFORMANCE_TRACKING,
    SESSION_STARTED,
    SESSION_STOP_PERFORMANCE_TRACKING,
    WARMUP_PHASE,
    EventsWriter,
    write_sample_idx_map,
)
from .config import RunConfig
from .engine import Client, ClientConfigError, RequestRecord
from .engine._reader import monotonic_ns
from .engine.audit import Audit, LoopLagProbe, audit_records
from .errors import MlpeError, UsageError
from .load.dataset import Dataset, load_dataset
from .load.requests import RequestFeed
from .load.scheduler import Phase, run_phase
from .metrics.stats import PointStats, point_stats
from .metrics.tokens import TokenCounter, load_tokenizer
from .report.progress import Progress
from .report.table import render
from .sim.tokenizer import DEMO_TOKENIZER

__all__ = ("PointResult", "SetupError", "demo_config", "run_point", "simulated_endpoint")


class SetupError(MlpeError, RuntimeError):
    """mlpe-fast could not get ready to measure (exit status 3)."""


class PointResult(msgspec.Struct, frozen=True, gc=False):
    """What one point produced."""

    config: RunConfig
    endpoint: str
    records: list[RequestRecord]
    stats: PointStats
    audit: Audit
    table: str


# The demo: a short run against the simulated endpoint, with a tokenizer
# that matches its vocabulary (one character is one token).
DEMO_MODEL = "mlpe-sim"
DEMO_CONCURRENCY = 16
DEMO_SAMPLES = 256
DEMO_OUTPUT_TOKENS = 64
DEMO_SERVER_FLAGS = ("--ttft-ms", "20", "--itl-ms", "2", "--seed", "1")


def demo_config(config: RunConfig, given: set[str]) -> RunConfig:
    """Fills what the user left out for a run against the simulated endpoint.

    ``given`` names the RunConfig fields the user set.
    """
    from .load.dataset import DatasetSpec

    changes: dict[str, Any] = {}
    if not config.datasets:
        changes["datasets"] = (
            DatasetSpec(path=str(Path(sim.__file__).parent / "demo_prompts.jsonl"), name="demo"),
        )
    if not config.tokenizer:
        changes["tokenizer"] = DEMO_TOKENIZER
    if not config.model:
        changes["model"] = DEMO_MODEL
    if "concurrency" not in given:
        changes["concurrency"] = DEMO_CONCURRENCY
    if config.num_samples is None and config.duration_s is None:
        changes["num_samples"] = DEMO_SAMPLES
    if "max_output_tokens" not in given:
        changes["max_output_tokens"] = DEMO_OUTPUT_TOKENS
    return msgspec.structs.replace(config, **changes)


@contextlib.contextmanager
def simulated_endpoint(flags: tuple[str, ...] = DEMO_SERVER_FLAGS) -> Iterator[str]:
    """Starts ``mlpe-fast serve`` in its own process (so that its CPU is not
    the client's) and yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlpe_fast.sim.server", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if " at http://" not in line:
            error = proc.stderr.read() if proc.stderr is not None and proc.poll() else ""
            raise SetupError(
                f"the simulated endpoint did not start: {(error or line).strip() or 'no output'}"
            )
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _load_tokenizer(config: RunConfig) -> Any:
    name = config.tokenizer or config.model
    try:
        return load_tokenizer(name)
    except UsageError as error:
        if config.tokenizer:
            raise
        raise UsageError(
            f"cannot count tokens for model {config.model!r}: {error}; pass --tokenizer DIR"
        ) from None


def _dataset(config: RunConfig) -> Dataset:
    datasets = config.performance_datasets
    if not datasets:
        raise UsageError("no performance dataset: pass --dataset PATH[,parser.prompt=COLUMN]")
    return load_dataset(datasets[0])


async def run_point(
    config: RunConfig,
    endpoint: str,
    *,
    err: TextIO | None = None,
    progress: bool = True,
) -> PointResult:
    """Measures one point against ``endpoint`` and writes its run folder.

    Raises:
        UsageError: the configuration cannot be run (bad dataset, tokenizer).
    """
    try:  # the endpoint first: the cheapest mistake to report
        client = Client(
            endpoint,
            api_key=config.api_key,
            connect_timeout=config.timeouts.connect_s,
            idle_timeout=config.timeouts.idle_s,
            total_timeout=config.timeouts.total_s,
        )
    except ClientConfigError as error:
        raise UsageError(str(error)) from None
    dataset = _dataset(config)
    tokenizer = _load_tokenizer(config)

    report_dir = Path(config.report_dir) if config.report_dir else None
    if report_dir is not None:
        _prepare_run_folder(report_dir)
    events = (
        EventsWriter(report_dir / "events.jsonl", streaming=config.stream)
        if report_dir is not None
        else None
    )
    counter = TokenCounter(tokenizer, live=False)
    records: list[RequestRecord] = []
    prompts: dict[str, Any] = {}
    probe = LoopLagProbe()
    bar = Progress(
        stream=err,
        total=config.num_samples,
        label=f"c={config.concurrency}" if config.load_pattern == "concurrency" else "",
    )
    tracking_start = 0
    try:
        async with client:
            if events is not None:
                events.session(SESSION_STARTED)
            if config.warmup_requests:
                await _warmup(client, dataset, config, events)
            feed = RequestFeed.for_phase(dataset, config, "performance")
            phase = Phase(
                config.load_pattern,
                concurrency=config.concurrency,
                target_qps=config.target_qps,
                max_requests=_request_count(config, len(dataset)),
                duration_ns=None if config.duration_s is None else int(config.duration_s * 1e9),
                seed=config.seeds.scheduler,
            )

            def on_issue(sample_index: int, sample_id: str, t_sched: int) -> None:
                if events is not None:
                    prompts[sample_id] = feed.last_prompt

            def on_record(record: RequestRecord) -> None:
                records.append(record)
                counter.submit(record)
                if events is not None:
                    events.record(record, prompts.pop(record.sample_id, None))
                if progress:
                    bar.update(phase.completed + phase.failed, phase.failed, phase.issued)

            tracking_start = monotonic_ns()
            if events is not None:
                events.session(SESSION_START_PERFORMANCE_TRACKING, tracking_start)
            if progress:
                bar.start()
            probe.start()
            await run_phase(client, feed, phase, on_record, path=config.route, on_issue=on_issue)
            lags, cpu_ns, cpu_system_ns = probe.stop()
            if events is not None:
                events.session(SESSION_STOP_PERFORMANCE_TRACKING)
            connections, connect_ns = client.connections_opened, client.connect_ns_total
    finally:
        if progress:
            bar.stop()
    counts = await asyncio.get_running_loop().run_in_executor(None, counter.finish, 120.0)
    stats = point_stats(records, counts, tracking_start_ns=tracking_start)
    audit = audit_records(records, lags, cpu_ns, connections, connect_ns, cpu_system_ns)
    table = render(stats, audit.as_rows(), title=_title(config))
    if report_dir is not None and events is not None:
        events.session(SESSION_ENDED)
        events.close()
        write_sample_idx_map(report_dir / "sample_idx_map.json", events.sample_index_map)
        write_config_yaml(report_dir / "config.yaml", config, endpoints=[endpoint])
        (report_dir / "report.txt").write_text(table, encoding="utf-8")
    return PointResult(config, endpoint, records, stats, audit, table)


def _prepare_run_folder(report_dir: Path) -> None:
    """Creates the run folder before measuring, so that a folder that cannot
    be written is a one-line mistake now rather than a lost run later."""
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        probe = report_dir / ".mlpe-fast-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise UsageError(
            f"--report-dir {report_dir}: cannot write there: {error.strerror or error}"
        ) from None


async def _warmup(
    client: Client, dataset: Dataset, config: RunConfig, events: EventsWriter | None
) -> None:
    """Requests that warm connections and the endpoint; not measured."""
    feed = RequestFeed.for_phase(dataset, config, "warmup")
    phase = Phase(
        "concurrency" if config.load_pattern != "offline" else "offline",
        concurrency=config.concurrency,
        max_requests=config.warmup_requests if config.warmup_requests > 0 else len(dataset),
        seed=config.seeds.scheduler,
    )

    def on_record(record: RequestRecord) -> None:
        if events is not None:
            events.record(record, None, phase=WARMUP_PHASE)

    await run_phase(client, feed, phase, on_record, path=config.route)


def _request_count(config: RunConfig, dataset_size: int) -> int | None:
    """How many requests the performance phase issues (reference §3.2):
    the given count; the whole dataset for Offline; none (a duration) else."""
    if config.num_samples is not None:
        return config.num_samples
    if config.load_pattern == "offline" or config.duration_s is None:
        return dataset_size
    return None


def _title(config: RunConfig) -> str:
    pattern = config.load_pattern
    if pattern == "concurrency":
        return f"{config.model}, concurrency {config.concurrency}"
    if pattern == "poisson":
        return f"{config.model}, Poisson {config.target_qps:g} queries/s"
    return f"{config.model}, Offline"
