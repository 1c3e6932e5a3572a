"""``--engines N`` end to end: several engine processes against the
simulated endpoint on loopback, merged into one ordinary run folder.

What must hold (issue "Scale out", ``docs/distributed.md`` §4.9): the
concurrency split is exact; the queries issued are the single-process
run's (same samples, same salts); every query comes back once; the metrics
agree with a single-process run; Offline blocks are contiguous per engine;
a lost engine (killed, or stopped so that its heartbeat stops) ends the
point with a clear failure and the partial data kept; Ctrl-C stops every
engine; mistakes are one line and exit status 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.analyze import analyze
from mlpe_fast.cli import main
from mlpe_fast.config import RunConfig
from mlpe_fast.demo import demo_config, simulated_endpoint
from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.errors import SetupError
from mlpe_fast.load.dataset import DatasetSpec, load_dataset
from mlpe_fast.load.requests import Prompt
from mlpe_fast.point import PointResult, run_point
from mlpe_fast.scale.driver import EngineStartError, run_on_engines
from mlpe_fast.scale.local import LocalEngines
from tests.unit.test_summary import _checker_results

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="the process-control tests use POSIX signals"
)

SERVER = ("--ttft-ms", "5", "--itl-ms", "1", "--seed", "3")


def _config(tmp_path: Path, name: str, **changes: object) -> RunConfig:
    config = demo_config(RunConfig(report_dir=str(tmp_path / name)), set())
    fields: dict[str, object] = {
        "concurrency": 8,
        "num_samples": 160,
        "max_output_tokens": 12,
        "min_streams_per_engine": 1,
    }
    return msgspec.structs.replace(config, **{**fields, **changes})


def _issued(folder: Path) -> Counter[str]:
    """The queries a run folder says were issued: each prompt as sent (the
    salt included), counted."""
    issued: Counter[str] = Counter()
    for line in (folder / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event_type"] == "sample.issued":
            issued[json.dumps(event["data"])] += 1
    return issued


def _run(config: RunConfig, endpoint: str) -> PointResult:
    return asyncio.run(run_point(config, endpoint, progress=False))


@pytest.fixture(scope="module")
def endpoint() -> Any:
    with simulated_endpoint(SERVER) as url:
        yield url


def test_two_engines_issue_and_measure_what_one_engine_does(
    tmp_path: Path, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _run(_config(tmp_path, "one", engines=1), endpoint)
    two = _run(_config(tmp_path, "two", engines=2), endpoint)
    assert one.state == two.state == "complete" and two.failure is None
    # The same queries, byte for byte, each once.
    assert _issued(tmp_path / "two") == _issued(tmp_path / "one")
    assert sum(_issued(tmp_path / "two").values()) == 160
    assert len({r.sample_id for r in two.records}) == 160
    assert two.stats.issued == two.stats.completed == 160 and two.stats.failed == 0
    report = json.loads((tmp_path / "two" / "distributed" / "engines.json").read_text())
    assert report["engines"] == 2 and report["concurrency"] == [4, 4]
    assert report["leases"] == {"granted": 160, "recorded": 160, "duplicates": 0}
    assert sum(e["records"] for e in report["per_engine"]) == 160
    assert all(e["records"] > 0 and not e["lost"] for e in report["per_engine"])
    # Each held its 4 streams most of the time (the ramp down ends below).
    assert all(3.0 < e["concurrency_held"] <= 4.0 for e in report["per_engine"])
    assert not (tmp_path / "two" / "distributed" / "INCOMPLETE").exists()
    assert two.audit.engines == 2 and two.audit.duplicate_queries == 0
    assert two.audit.start_skew_ms < 50  # a common start, not one after the other
    assert "engines" in two.table and "2 processes (streams 4 + 4)" in two.table
    # The metrics agree with one engine (fixed 5 ms TTFT, 1 ms per token).
    assert one.stats.ttft is not None and two.stats.ttft is not None
    assert abs(two.stats.ttft.p50 - one.stats.ttft.p50) < 0.3 * one.stats.ttft.p50
    assert one.stats.tpot is not None and two.stats.tpot is not None
    assert abs(two.stats.tpot.p50 - one.stats.tpot.p50) < 0.2 * one.stats.tpot.p50
    assert two.stats.osl_total == one.stats.osl_total == 160 * 12
    # An ordinary run folder at the top level: analyze reproduces it.
    assert main(["analyze", str(tmp_path / "two")]) == 0
    assert "reproduces" in capsys.readouterr().out
    summary = json.loads((tmp_path / "two" / "performance" / "result_summary.json").read_text())
    assert summary["complete"] is True and summary["n_samples_issued"] == 160
    assert summary["mlpe_fast"]["self_audit"]["engines"] == 2
    # R12's stamps and gaps travel from the engines with their records
    detail = summary["mlpe_fast"]["latency_detail"]
    assert detail["ttfot_ns"]["count"] == detail["ttst_ns"]["count"] == 160
    assert detail["itl_ns"]["count"] == 160 * 11 and detail["itl_ns"]["percentiles"] is not None
    # The official checker reads the merged summary as one point's.
    checked = _checker_results(tmp_path / "two" / "performance" / "result_summary.json")
    assert [r for r in checked if r.severity.value == "error"] == []


def test_low_concurrency_stays_on_one_engine(tmp_path: Path, endpoint: str) -> None:
    config = _config(tmp_path, "low", engines=4, min_streams_per_engine=64, num_samples=16)
    result = _run(config, endpoint)
    assert result.audit.engines == 1 and result.stats.completed == 16
    assert not (tmp_path / "low" / "distributed").exists()


def test_offline_gives_each_engine_one_contiguous_block(tmp_path: Path, endpoint: str) -> None:
    config = _config(tmp_path, "offline", load_pattern="offline", num_samples=60, engines=2)
    dataset = load_dataset(config.performance_datasets[0])
    records: list[RequestRecord] = []
    started: list[int] = []

    def on_record(record: RequestRecord, prompt: Prompt) -> None:
        records.append(record)

    run = asyncio.run(
        run_on_engines(
            config,
            endpoint,
            dataset,
            engines=2,
            max_requests=60,
            on_record=on_record,
            on_start=started.append,
            make_group=LocalEngines,
        )
    )
    assert run.failure is None and len(records) == len(run.records) == 60
    pairs = list(zip(run.keys, run.engine_of, strict=True))
    blocks = {e: sorted(k for k, x in pairs if x == e) for e in (0, 1)}
    assert blocks == {0: list(range(30)), 1: list(range(30, 60))}
    assert started == [run.t0_ns]
    first = run.first_issues()
    assert all(t is not None and t >= run.t0_ns for t in first)
    assert all(r.ok for r in records)


def test_a_duration_with_whole_passes_ends_on_a_pass_boundary(
    tmp_path: Path, endpoint: str
) -> None:
    config = _config(
        tmp_path, "passes", engines=2, num_samples=None, duration_s=1.0, whole_passes=True
    )
    result = _run(config, endpoint)
    passes, rest = divmod(result.stats.issued, 96)  # the demo dataset: 96 prompts
    assert rest == 0 and passes >= 1 and result.stats.failed == 0
    report = json.loads((tmp_path / "passes" / "distributed" / "engines.json").read_text())
    assert report["leases"]["granted"] == report["leases"]["recorded"] == result.stats.issued


def test_engines_continue_the_warmup_s_salt_stream(tmp_path: Path, endpoint: str) -> None:
    # the warmup runs here, the measured phase on two engines: no measured
    # query repeats a warmup query's salt (one stream, the reference's)
    import re

    _run(_config(tmp_path, "salted", engines=2, warmup_requests=8), endpoint)

    def salts(name: str) -> list[str]:
        text = (tmp_path / "salted" / name).read_text()
        issued = [line for line in text.splitlines() if '"sample.issued"' in line]
        return [s for line in issued for s in re.findall(r"\[([0-9a-f]{16})\] ", line)]

    warm, measured = salts("warmup_events.jsonl"), salts("events.jsonl")
    assert len(warm) == 8 and len(measured) == len(set(measured)) == 160
    assert not set(warm) & set(measured)


@pytest.mark.parametrize("engines", [1, 2])
def test_a_duration_with_a_minimum_of_passes_issues_them(
    tmp_path: Path, endpoint: str, engines: int
) -> None:
    # --min-passes 3: however short the duration, three whole passes of the
    # 96-prompt demo dataset go out (the steady-state window's super-passes)
    config = _config(
        tmp_path,
        "min",
        engines=engines,
        num_samples=None,
        duration_s=0.01,
        whole_passes=True,
        min_passes=3,
    )
    result = _run(config, endpoint)
    passes, rest = divmod(result.stats.issued, 96)
    assert rest == 0 and passes >= 3 and result.stats.failed == 0


def test_an_engine_that_cannot_start_is_a_setup_error(tmp_path: Path, endpoint: str) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "hello there"}\n' * 8)
    config = _config(tmp_path, "broken", datasets=(DatasetSpec(path=str(data)),))
    dataset = load_dataset(config.datasets[0])
    data.unlink()  # the engines load it again, and cannot
    with pytest.raises(EngineStartError, match=r"engine \d: .*prompts\.jsonl"):
        asyncio.run(
            run_on_engines(
                config,
                endpoint,
                dataset,
                engines=2,
                max_requests=8,
                on_record=lambda record, prompt: None,
                make_group=LocalEngines,
            )
        )


def test_engines_that_cannot_start_leave_a_closed_event_log(
    tmp_path: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import warnings

    import mlpe_fast.point.performance

    async def cannot_start(*args: object, **kwargs: object) -> None:
        raise EngineStartError("engine 0: it could not start")

    monkeypatch.setattr(mlpe_fast.point.performance, "run_on_engines", cannot_start)
    config = _config(tmp_path, "nostart", engines=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SetupError, match="engine 0: it could not start"):
            _run(config, endpoint)
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    lines = (tmp_path / "nostart" / "events.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["event_type"] == "session.started"


# Process control: the CLI in its own session, engines found among its children.


def _cli(tmp_path: Path, endpoint: str) -> subprocess.Popen[str]:
    flags = {
        "--endpoints": endpoint,
        "--model": "mlpe-sim",
        "--tokenizer": _demo_tokenizer(),
        "--dataset": _demo_dataset(),
        "--concurrency": "4",
        "--max-output-tokens": "12",
        "--engines": "2",
        "--min-streams-per-engine": "1",
        "--duration": "60s",
        "--report-dir": str(tmp_path / "run"),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "mlpe_fast", "run", *_argv(flags), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _argv(flags: dict[str, str]) -> list[str]:
    return [part for flag, value in flags.items() for part in (flag, value)]


def _demo_tokenizer() -> str:
    from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

    return str(DEMO_TOKENIZER)


def _demo_dataset() -> str:
    from mlpe_fast import sim

    return str(Path(sim.__file__).parent / "demo_prompts.jsonl") + ",parser.prompt=prompt"


def _engines_of(pid: int, count: int = 2, timeout: float = 60) -> list[int]:
    """The engine processes of the CLI ``pid``, once ``count`` are running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = []
        for child in _children(pid):
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in cmdline:  # not the resource tracker
                children.append(child)
        if len(children) >= count:
            return children
        time.sleep(0.05)
    raise AssertionError(f"no {count} engine processes under {pid}")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _completed(folder: Path) -> int:
    events = folder / "events.jsonl"
    if not events.exists():
        return 0
    return events.read_text().count('"sample.complete"')


def _wait_for_load(proc: subprocess.Popen[str], folder: Path, count: int = 20) -> None:
    deadline = time.monotonic() + 60
    while _completed(folder) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no load within 60 s"
        time.sleep(0.05)


def _gone(pids: list[int]) -> bool:
    return all(not Path(f"/proc/{pid}").exists() for pid in pids)


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux_only
@pytest.mark.parametrize(
    ("signal_to_engine", "said"),
    [(signal.SIGKILL, "engine 0 ended (killed by signal 9)"), (signal.SIGSTOP, "sent nothing")],
)
def test_a_lost_engine_ends_the_point_with_its_partial_data(
    tmp_path: Path, endpoint: str, signal_to_engine: int, said: str
) -> None:
    proc = _cli(tmp_path, endpoint)
    engines = _engines_of(proc.pid)
    _wait_for_load(proc, tmp_path / "run")
    os.kill(engines[0], signal_to_engine)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in engines:  # a stopped engine is killed by the driver; be sure
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert proc.returncode == 5, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("mlpe-fast: the point was cut short: ") and said in lines[0]
    assert f"partial results in {tmp_path / 'run'}" in lines[0]
    run = tmp_path / "run"
    assert said in (run / "distributed" / "INCOMPLETE").read_text()
    summary = json.loads((run / "performance" / "result_summary.json").read_text())
    assert summary["state"] == "interrupted" and summary["complete"] is False
    assert summary["n_samples_completed"] >= 20  # what arrived before the loss is kept
    report = json.loads((run / "distributed" / "engines.json").read_text())
    assert report["failure"] == lines[0].split("cut short: ", 1)[1].split("; partial")[0]
    assert report["per_engine"][0]["lost"] and not report["per_engine"][1]["lost"]
    assert report["leases"]["duplicates"] == 0
    # The log says so too: analyze calls the point cut short, with the reason.
    analysis = analyze(run)
    assert analysis.summary["state"] == "interrupted"
    assert analysis.interrupted is not None and said in analysis.interrupted
    assert analysis.interrupted.startswith("the run was cut short: ")
    deadline = time.monotonic() + 10
    while not _gone(engines) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(engines), "engine processes outlived the point"


@linux_only
@pytest.mark.parametrize("under_load", [True, False], ids=["under load", "before the start"])
def test_ctrl_c_stops_every_engine(tmp_path: Path, endpoint: str, under_load: bool) -> None:
    proc = _cli(tmp_path, endpoint)
    engines = _engines_of(proc.pid)
    if under_load:
        _wait_for_load(proc, tmp_path / "run")
    else:
        # The driver ignores SIGINT while it spawns its engines (so that they
        # are born ignoring it, scale/local.py): a Ctrl-C in those few
        # milliseconds is lost, as documented there; the engines' own start
        # (imports, dataset, connections) takes a second or more after that.
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole group
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    summary = json.loads((tmp_path / "run" / "performance" / "result_summary.json").read_text())
    assert summary["state"] == "interrupted"
    assert summary["n_samples_issued"] == summary["n_samples_completed"] + summary.get(
        "n_samples_failed", 0
    )
    if under_load:
        assert summary["n_samples_completed"] >= 20
    assert not (tmp_path / "run" / "distributed" / "INCOMPLETE").exists()
    deadline = time.monotonic() + 10
    while not _gone(engines) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(engines)


@linux_only
def test_engines_do_not_outlive_a_killed_driver(tmp_path: Path, endpoint: str) -> None:
    """No orphan load: an engine whose driver is gone stops at once."""
    proc = _cli(tmp_path, endpoint)
    engines = _engines_of(proc.pid)
    _wait_for_load(proc, tmp_path / "run")
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while not _gone(engines) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert _gone(engines), "engines went on without their driver"
    finally:
        for pid in engines:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--engines", "two"], "--engines: expected a positive integer or auto, got 'two'"),
        (["--engines", "0"], "--engines: expected a positive integer or auto, got '0'"),
        (["--engines", "2", "--min-streams-per-engine", "0"], "--min-streams-per-engine"),
        (
            ["--engines", "2", "--load-pattern", "poisson", "--target-qps", "5"],
            "--engines: a Poisson point runs on one engine",
        ),
        (  # the dry run refuses it too (it said all was well)
            ["--engines", "2", "--target-qps", "5", "--dry-run"],
            "--engines: a Poisson point runs on one engine",
        ),
        (
            ["--engines", "auto", "--target-qps", "5,10", "--dry-run"],
            "--engines: a Poisson point runs on one engine",
        ),
    ],
)
def test_mistakes_are_one_line_and_status_2(
    tmp_path: Path, endpoint: str, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    common = {
        "--endpoints": endpoint,
        "--model": "mlpe-sim",
        "--tokenizer": _demo_tokenizer(),
        "--dataset": _demo_dataset(),
        "--num-samples": "4",
        "--report-dir": str(tmp_path / "run"),
    }
    status = main(["run", *_argv(common), "--no-progress", *flags])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and said in err, err
    assert not (tmp_path / "run" / "events.jsonl").exists()


def test_yaml_sets_the_engines(tmp_path: Path, endpoint: str) -> None:
    from mlpe_fast.artifacts.run_folder import read_config_yaml

    config = _config(tmp_path, "yaml", engines=0, num_samples=32)
    result = _run(config, endpoint)
    assert result.stats.completed == 32
    written = read_config_yaml(tmp_path / "yaml")
    assert written["mlpe_fast"]["engines"] == "auto"
