"""Every mode of ``mlpe-fast run`` end to end against the simulated endpoint.

The matrix: streaming on/off x route (chat, completions) x load pattern
(concurrency, Offline, Poisson) x HTTP version (HTTP/1.1, h2c) x engines
(1, 2).  Each case is a small run (12 queries of 8 tokens) through
``mlpe_fast.cli.main``, checked end to end: exit status, the counts, the
whole run folder, what the server saw (route, stream flag, protocol:
:mod:`tests.integration.tally_sim` counts the requests of each model name,
and every case has its own), and ``mlpe-fast analyze`` reproducing the
stored summary.  Two engines on a Poisson point are refused by design.

Then the scenarios around a run: a killed run read back by ``analyze``, an
interrupted curve and its resumption, a curve re-run with a changed
setting, two endpoints sharing a point, and a curve whose dedicated
Offline point collides with one of its levels.

Servers are started once per module (one per kind); runs are in-process
except where a signal has to hit the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mlpe_fast.sim
from mlpe_fast.artifacts.events import PromptData, iter_events
from mlpe_fast.artifacts.run_folder import read_config_yaml
from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from tests.integration.tally_sim import SCRIPT, read_tally

pytestmark = [
    pytest.mark.pipeline,
    pytest.mark.skipif(sys.platform == "win32", reason="the interruption tests use POSIX signals"),
]

DEMO_DATASET = str(Path(mlpe_fast.sim.__file__).parent / "demo_prompts.jsonl")
FAST = ("--ttft-ms", "1", "--itl-ms", "0.2", "--seed", "5")
# About 0.2 s per request of 10 tokens: runs long enough to be interrupted.
SLOW = ("--ttft-ms", "5", "--itl-ms", "20", "--seed", "5")
N = 12
TOKENS = 8
CURVE_N = 8  # queries per point of the interrupted curve (slow server)
RUN_FILES = {
    "config.yaml",
    "events.jsonl",
    "sample_idx_map.json",
    "performance/result_summary.json",
    "metrics/final_snapshot.json",
    "metrics/.ready",
    "report.txt",
}
ROUTES = {
    "chat": ("openai", "/v1/chat/completions"),
    "completions": ("openai-completions", "/v1/completions"),
}
PATTERNS = {
    "concurrency": ("--load-pattern", "concurrency", "--concurrency", "4"),
    "offline": ("--load-pattern", "offline"),
    "poisson": ("--load-pattern", "poisson", "--target-qps", "200"),
}
YAML_PATTERN = {"concurrency": "concurrency", "offline": "max_throughput", "poisson": "poisson"}


# --- servers -------------------------------------------------------------------------


def _server(*flags: str) -> contextlib.AbstractContextManager[str]:
    """The counting simulated endpoint in its own process; yields its URL."""
    return simulated_endpoint(flags, script=SCRIPT)


@pytest.fixture(scope="module")
def h1_server() -> Iterator[str]:
    with _server(*FAST) as url:
        yield url


@pytest.fixture(scope="module")
def h2_server() -> Iterator[str]:
    with _server(*FAST, "--http2") as url:
        yield url


@pytest.fixture(scope="module")
def other_server() -> Iterator[str]:
    """A second endpoint, for ``--endpoints URL1 URL2``."""
    with _server(*FAST) as url:
        yield url


@pytest.fixture(scope="module")
def slow_server() -> Iterator[str]:
    with _server(*SLOW) as url:
        yield url


# --- helpers -------------------------------------------------------------------------


def _argv(endpoints: list[str], model: str, report_dir: Path, *extra: str) -> list[str]:
    return [
        *("run", "--no-progress", "--endpoints", *endpoints, "--model", model),
        *("--tokenizer", DEMO_TOKENIZER, "--dataset", DEMO_DATASET),
        *("--report-dir", str(report_dir), *extra),
    ]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _summary(folder: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(
        (folder / "performance" / "result_summary.json").read_bytes()
    )
    return summary


def _event_counts(folder: Path) -> Counter[str]:
    return Counter(e.event_type for e in iter_events(folder / "events.jsonl"))


def _assert_analyze_reproduces(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["analyze", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"reproduces {folder / 'performance' / 'result_summary.json'}" in out, out[-400:]


def _one_line(err: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err


def _popen_run(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mlpe_fast", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_for(
    done: Callable[[], bool], what: str, proc: subprocess.Popen[str], timeout_s: float = 30.0
) -> None:
    """Waits until ``done()`` while the run ``proc`` is still running."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run ended ({proc.returncode}) before {what}: {err}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout_s:g} s")
        time.sleep(0.02)


def _completed_in_log(folder: Path) -> int:
    """The ``sample.complete`` lines flushed so far (the log is flushed
    every second while the load runs)."""
    try:
        return (folder / "events.jsonl").read_bytes().count(b'"sample.complete"')
    except FileNotFoundError:
        return 0


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# --- the matrix ----------------------------------------------------------------------


def _cases() -> Iterator[Any]:
    for engines in (1, 2):
        for http in ("h1", "h2"):
            for pattern in PATTERNS:
                for route in ROUTES:
                    for streaming in ("on", "off"):
                        yield pytest.param(
                            streaming,
                            route,
                            pattern,
                            http,
                            engines,
                            id=f"stream-{streaming}-{route}-{pattern}-{http}-engines{engines}",
                        )


@pytest.mark.parametrize(("streaming", "route", "pattern", "http", "engines"), list(_cases()))
def test_mode(
    streaming: str,
    route: str,
    pattern: str,
    http: str,
    engines: int,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server: str = request.getfixturevalue("h2_server" if http == "h2" else "h1_server")
    model = f"mm-{request.node.callspec.id}"
    api_type, path = ROUTES[route]
    run = tmp_path / "run"
    flags = [
        *("--num-samples", str(N), "--max-output-tokens", str(TOKENS)),
        *("--streaming", streaming, "--api-type", api_type, *PATTERNS[pattern]),
        *("--engines", str(engines)),
        *(("--min-streams-per-engine", "1") if engines > 1 else ()),
        *(("--http2",) if http == "h2" else ()),
    ]
    code = main(_argv([server], model, run, *flags))
    out, err = capsys.readouterr()

    if engines > 1 and pattern == "poisson":  # refused by design, before anything
        assert code == 2, err
        _one_line(err)
        assert "--engines" in err and "Poisson" in err
        assert not run.exists() or _files(run) == set()
        assert read_tally(server, model) == Counter()
        return

    assert code == 0, err
    assert "Traceback" not in err
    assert f"{N} done, 0 failed of {N} issued" in out

    # the run folder
    files = _files(run)
    assert files >= RUN_FILES, RUN_FILES - files
    if engines > 1:
        assert "distributed/engines.json" in files
        assert "distributed/INCOMPLETE" not in files

    summary = _summary(run)
    assert summary["state"] == "complete" and summary["complete"] is True
    issued = summary["n_samples_issued"]
    assert issued == N == summary["n_samples_completed"] + summary["n_samples_failed"]
    assert summary["n_samples_failed"] == 0
    assert summary["mlpe_fast"]["errors"] == {}
    # One token per character (the demo tokenizer); every answer is cut at
    # max_output_tokens.
    assert summary["output_sequence_lengths"]["total"] == N * TOKENS
    assert summary["input_sequence_lengths"]["total"] > 0
    assert summary["latency"]["avg"] > 0 and summary["latency"]["percentiles"]
    assert summary["system_tps"] > 0
    if streaming == "on":
        assert summary["ttft"]["percentiles"] and summary["ttft"]["avg"] > 0
        # TPOT is measured, but may have no sample: a response read whole in
        # one read (likely for an Offline burst over one h2c connection) has
        # none (spec §1.2).
        assert isinstance(summary.get("tpot"), dict)
    else:  # no first-token time to measure: no TTFT or TPOT figures at all
        assert not summary.get("ttft"), summary.get("ttft")
        assert not summary.get("tpot"), summary.get("tpot")
    assert summary["run_config"]["load_pattern"]["type"] == YAML_PATTERN[pattern]

    snapshot = json.loads((run / "metrics" / "final_snapshot.json").read_bytes())
    counters = {m["name"]: m["value"] for m in snapshot["metrics"] if m["type"] == "counter"}
    assert counters["tracked_samples_completed"] == N

    config = read_config_yaml(run)
    assert config["model_params"]["name"] == model
    assert config["model_params"]["streaming"] == streaming
    assert config["endpoint_config"]["endpoints"] == [server]
    expected_api = "openai_completions" if route == "completions" else "openai"
    assert config["endpoint_config"]["api_type"] == expected_api
    assert config["settings"]["load_pattern"]["type"] == YAML_PATTERN[pattern]
    assert config["mlpe_fast"].get("http2", False) is (http == "h2")

    events = list(iter_events(run / "events.jsonl"))
    kinds = Counter(e.event_type for e in events)
    assert kinds["session.started"] == kinds["session.ended"] == 1
    assert kinds["sample.issued"] == kinds["sample.complete"] == N
    assert kinds["sample.recv_first"] == (N if streaming == "on" else 0)
    prompts = [e.data for e in events if e.event_type == "sample.issued"]
    assert all(isinstance(p, PromptData) for p in prompts)
    if route == "chat":
        assert all(p.messages and p.text is None for p in prompts)  # type: ignore[union-attr]
    else:
        assert all(p.text and p.messages is None for p in prompts)  # type: ignore[union-attr]
    mapping = json.loads((run / "sample_idx_map.json").read_bytes())
    assert len(mapping["performance"]) == N

    # what the server saw: this run's requests, on the route, stream flag
    # and protocol asked for
    assert read_tally(server, model) == Counter({(model, path, streaming == "on", http): N})

    if engines > 1:
        report = json.loads((run / "distributed" / "engines.json").read_bytes())
        assert report["engines"] == 2, report
        issued_per_engine = [e["issued"] for e in report["per_engine"]]
        assert sum(issued_per_engine) == N
        assert report["leases"]["duplicates"] == 0
        if pattern == "concurrency":
            assert report["concurrency"] == [2, 2]
        else:  # Offline: one contiguous block of the queries per engine
            assert all(issued_per_engine), issued_per_engine

    _assert_analyze_reproduces(run, capsys)


def test_two_engines_both_issue_at_a_small_count(
    h1_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--engines 2 --min-streams-per-engine 1`` at concurrency 4 splits the
    streams 2 + 2: both engines must carry part of the load, or the point
    runs at half the concurrency it reports."""
    run = tmp_path / "run"
    code = main(
        _argv(
            [h1_server],
            "mm-two-engines-share",
            run,
            *("--num-samples", str(N), "--max-output-tokens", str(TOKENS)),
            *("--concurrency", "4", "--engines", "2", "--min-streams-per-engine", "1"),
        )
    )
    err = capsys.readouterr().err
    assert code == 0, err
    report = json.loads((run / "distributed" / "engines.json").read_bytes())
    assert report["concurrency"] == [2, 2]
    issued = [e["issued"] for e in report["per_engine"]]
    assert sum(issued) == N and all(issued), f"queries issued per engine: {issued}"


# --- scenarios -----------------------------------------------------------------------


def test_killed_run_is_analysed_as_interrupted(
    slow_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL mid-run: no summary, an event log without its end; analyze
    says the run did not end: state "interrupted", not complete."""
    run = tmp_path / "run"
    argv = _argv(
        [slow_server],
        "mm-killed",
        run,
        *("--concurrency", "4", "--duration", "120s", "--max-output-tokens", "10"),
    )
    with _reaped(_popen_run(argv)) as proc:
        _wait_for(lambda: _completed_in_log(run) >= 4, "completions in events.jsonl", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "performance" / "result_summary.json").exists()
    kinds = _event_counts(run)
    assert kinds["sample.complete"] >= 4 and kinds["session.ended"] == 0

    code = main(["analyze", str(run)])
    out, err = capsys.readouterr()
    assert code == 0, err
    said = out + err
    assert "interrupted" in said and "did not end" in said, said[-600:]
    assert "reproduces" not in out
    analysed = json.loads((run / "analysis" / "result_summary.json").read_bytes())
    assert analysed["state"] == "interrupted" and analysed["complete"] is False
    issued = analysed["n_samples_issued"]
    assert issued == kinds["sample.issued"]
    assert issued == analysed["n_samples_completed"] + analysed["n_samples_failed"]


def test_interrupted_curve_resumes_with_what_is_missing(
    slow_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGINT during r2 of ``--concurrency 1,2,4 --offline none``: exit 130,
    r1 complete, r2 interrupted, no r4; the same command again measures r2
    and r4 only."""
    curve = tmp_path / "curve"
    model = "mm-curve-interrupted"
    argv = _argv(
        [slow_server],
        model,
        curve,
        *("--concurrency", "1,2,4", "--offline", "none"),
        *("--num-samples", str(CURVE_N), "--max-output-tokens", "10"),
    )
    with _reaped(_popen_run(argv)) as proc:
        # config.yaml is written as a point starts, before its load
        r2_started = (curve / "r2" / "config.yaml").exists
        _wait_for(r2_started, "r2/config.yaml", proc, timeout_s=60)
        time.sleep(0.3)  # r2 under way (about 0.8 s at 2 streams)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert _summary(curve / "r1")["state"] == "complete"
    r2 = _summary(curve / "r2")
    assert r2["state"] == "interrupted" and r2["complete"] is False
    assert not (curve / "r4").exists()
    first = sum(read_tally(slow_server, model).values())
    r1_events = (curve / "r1" / "events.jsonl").read_bytes()

    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "r1 is complete already: skipped" in out
    assert "r2 is complete already" not in out
    for point in ("r1", "r2", "r4"):
        summary = _summary(curve / point)
        assert summary["state"] == "complete", point
        assert summary["n_samples_completed"] == CURVE_N, point
    assert (curve / "r1" / "events.jsonl").read_bytes() == r1_events
    # r2 again and r4: nothing more
    assert sum(read_tally(slow_server, model).values()) - first == 2 * CURVE_N
    rows = json.loads((curve / "pareto.json").read_bytes())["points"]
    assert [row["concurrency"] for row in rows] == [1, 2, 4]


def test_curve_rerun_with_a_changed_setting_is_refused(
    h1_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The points of a curve measured with other settings are not its
    points: a re-run with another --max-output-tokens is a one-line
    mistake (exit 2), with no request sent and the old points untouched."""
    curve = tmp_path / "curve"
    model = "mm-curve-changed"
    common = ("--concurrency", "1,2", "--offline", "none", "--num-samples", str(N))
    argv = _argv([h1_server], model, curve, *common)
    assert main([*argv, "--max-output-tokens", str(TOKENS)]) == 0
    capsys.readouterr()
    before = read_tally(h1_server, model)
    stored = {
        p: (curve / p / "performance" / "result_summary.json").read_bytes() for p in ("r1", "r2")
    }

    code = main([*argv, "--max-output-tokens", "4"])
    out, err = capsys.readouterr()
    assert code == 2, out[-600:]
    _one_line(err)
    assert re.search(r"max[-_ ]output[-_ ]tokens|max_new_tokens", err), err
    assert "complete already: skipped" not in out
    assert read_tally(h1_server, model) == before
    for point, content in stored.items():
        assert (curve / point / "performance" / "result_summary.json").read_bytes() == content


@pytest.mark.parametrize("engines", [1, 2], ids=["engines1", "engines2"])
def test_two_endpoints_share_the_load(
    engines: int,
    h1_server: str,
    other_server: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = tmp_path / "run"
    model = f"mm-two-endpoints-engines{engines}"
    urls = [h1_server, other_server]
    code = main(
        _argv(
            urls,
            model,
            run,
            *("--num-samples", str(N), "--max-output-tokens", str(TOKENS), "--concurrency", "4"),
            *("--engines", str(engines), "--min-streams-per-engine", "1"),
        )
    )
    _, err = capsys.readouterr()
    assert code == 0, err
    summary = _summary(run)
    assert summary["n_samples_completed"] == N and summary["n_samples_failed"] == 0

    served = [sum(read_tally(url, model).values()) for url in urls]
    assert sum(served) == N, served
    assert all(n >= N // 4 for n in served), f"requests per endpoint: {served}"

    assert read_config_yaml(run)["endpoint_config"]["endpoints"] == urls
    per_endpoint = summary["mlpe_fast"].get("endpoints")
    assert isinstance(per_endpoint, list), "result_summary.json has no mlpe_fast.endpoints"
    assert [e["url"] for e in per_endpoint] == urls
    for entry, n in zip(per_endpoint, served, strict=True):
        assert entry == {"url": entry["url"], "issued": n, "completed": n, "failed": 0}
    _assert_analyze_reproduces(run, capsys)


def test_offline_point_colliding_with_a_level_is_refused(
    h1_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 4-sample dataset with ``--concurrency 1,2,4``: the dedicated
    Offline point would be r4 as well; refused before any load."""
    data = tmp_path / "four.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"prompt number {i}"}) + "\n" for i in range(4)))
    curve = tmp_path / "curve"
    model = "mm-offline-collision"
    argv = [
        *("run", "--no-progress", "--endpoints", h1_server, "--model", model),
        *("--tokenizer", DEMO_TOKENIZER, "--dataset", str(data), "--report-dir", str(curve)),
        *("--concurrency", "1,2,4", "--num-samples", "4", "--max-output-tokens", str(TOKENS)),
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, out[-600:]
    _one_line(err)
    assert "Offline" in err or "offline" in err, err
    assert read_tally(h1_server, model) == Counter()
    assert not curve.exists() or not any(curve.glob("r*"))
