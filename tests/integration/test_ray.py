"""``--ray``: engines on the nodes of a Ray cluster, with their clocks
modelled (``docs/distributed.md`` §4.9).

The cluster is a two-node ``ray.cluster_utils.Cluster`` on this host, bound
to 127.0.0.1 only (never ``ray start``, which listens on every interface),
with usage statistics and the dashboard off.  Both "nodes" share this
host's clock, so one test gives node 1 a clock 123.456 s ahead that gains
80 ppm: the model must find both, and the point's window figures must not
move.  The endpoint is the simulated one, on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'mlpe-fast[ray]')")

from mlpe_fast.cli import main  # noqa: E402
from mlpe_fast.config import RunConfig  # noqa: E402
from mlpe_fast.demo import simulated_endpoint  # noqa: E402
from mlpe_fast.load.dataset import load_dataset, parse_dataset_arg  # noqa: E402
from mlpe_fast.point import PointResult, run_point  # noqa: E402
from mlpe_fast.scale.clock import NodeClock  # noqa: E402
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER  # noqa: E402
from tests.integration.recording_sim import SCRIPT as RECORDING  # noqa: E402
from tests.integration.recording_sim import read_requests  # noqa: E402
from tests.integration.test_engines import SERVER, _issued  # noqa: E402
from tests.integration.test_engines import _config as _local_config  # noqa: E402
from tests.unit.test_summary import _checker_results  # noqa: E402

# Streams held, clock fits and durations are timed: the cluster needs the
# machine's cores to itself (marker serial: run after the parallel suite).
pytestmark = [
    pytest.mark.pipeline,
    pytest.mark.serial,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the test cluster runs on Linux"
    ),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    from ray._private import services
    from ray.cluster_utils import Cluster

    # Ray turns a loopback address into the host's routable one
    # (ray-project/ray #59110); every node here is 127.0.0.1.
    lookup = services.get_node_ip_address
    services.get_node_ip_address = lambda address=None: "127.0.0.1"
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        services.get_node_ip_address = lookup


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(SERVER) as url:
        yield url


def _config(tmp_path: Path, name: str, cluster: Any, **changes: object) -> RunConfig:
    """The local engines' test point, on ``cluster`` (None: this machine)."""
    ray_address = None if cluster is None else cluster.address
    return _local_config(tmp_path, name, **{"ray": ray_address, **changes})


def _run(config: RunConfig, endpoint: str, **options: Any) -> PointResult:
    return asyncio.run(run_point(config, endpoint, progress=False, **options))


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def test_two_nodes_issue_and_measure_what_one_engine_does(
    tmp_path: Path, cluster: Any, endpoint: str
) -> None:
    one = _run(_config(tmp_path, "one", cluster, ray=None), endpoint)
    two = _run(_config(tmp_path, "two", cluster), endpoint)
    assert two.state == "complete" and two.failure is None, two.failure
    assert _issued(tmp_path / "two") == _issued(tmp_path / "one")
    assert two.stats.issued == two.stats.completed == 160
    folder = tmp_path / "two" / "distributed"
    engines = _json(folder / "engines.json")
    assert engines["concurrency"] == [4, 4]
    assert engines["leases"] == {"granted": 160, "recorded": 160, "duplicates": 0}
    nodes = _json(folder / "nodes.json")
    assert nodes["verdict"] == "ok"
    assert len({n["node_id"] for n in nodes["nodes"]}) == 2  # really two nodes
    for node in nodes["nodes"]:
        # a cluster on loopback keeps its clock probes there (the node's
        # registered address, not the machine's interface address)
        assert node["ip"] == "127.0.0.1" and node["clock_address"][0] == "127.0.0.1"
        assert node["concurrency"] == 4 and node["records"] > 0
        assert 3.0 < node["concurrency_held"] <= 4.0
        assert abs(node["clock"]["offset_ns"]) < 1e6  # one host: no offset to speak of
        assert node["clock"]["rounds"] >= 3 and node["endpoint_rtt_ms"] is not None
    assert two.audit.verdict == "ok" and "verdict ok" in two.table
    assert two.stats.ttft is not None and one.stats.ttft is not None
    assert abs(two.stats.ttft.p50 - one.stats.ttft.p50) < 0.3 * one.stats.ttft.p50
    assert two.audit.start_skew_ms < 5  # a timed start, not a message-released one
    # The official checker reads the merged summary as one point's.
    checked = _checker_results(tmp_path / "two" / "performance" / "result_summary.json")
    assert [r for r in checked if r.severity.value == "error"] == []


def test_ray_nodes_build_and_send_the_same_synthetic_prompts(
    tmp_path: Path, cluster: Any, endpoint: str
) -> None:
    # Each actor builds the synthetic dataset itself, from the spec it is sent
    # (docs/workloads.md): the same prompts as this process.
    spec = parse_dataset_arg("synthetic:isl=uniform(20,40),osl=4,prefix=6,samples=40,seed=9")
    assert spec.synthetic is not None
    synthetic = msgspec.structs.replace(
        spec.synthetic, tokenizer=DEMO_TOKENIZER, form="text", osl_cap=12
    )
    datasets = (msgspec.structs.replace(spec, synthetic=synthetic),)
    changes: dict[str, Any] = {"datasets": datasets, "num_samples": 40}
    with simulated_endpoint(SERVER, script=RECORDING) as url:  # what the actors sent
        two = _run(_config(tmp_path, "two", cluster, headers=(("X-Test", "ray"),), **changes), url)
        seen = read_requests(url, "ray")
        bodies = [r["body"] for r in seen if r["path"] == "/v1/chat/completions"]
    assert two.state == "complete" and two.failure is None, two.failure
    assert two.stats.completed == len(bodies) == 40
    # the salted user messages' own text: the prompts this process builds
    sent = {b["messages"][-1]["content"].split("] ", 1)[1] for b in bodies}
    assert sent == {sample.prompt for sample in load_dataset(datasets[0]).samples}


def test_a_node_clock_offset_and_drift_are_found_and_change_nothing(
    tmp_path: Path, cluster: Any, endpoint: str
) -> None:
    plain = _run(_config(tmp_path, "plain", cluster, num_samples=320), endpoint)
    skewed_clock = NodeClock(offset_ns=123_456_000_000, drift_ppm=80.0, ref_ns=time.monotonic_ns())
    skewed = _run(
        _config(tmp_path, "skewed", cluster, num_samples=320),
        endpoint,
        ray_clocks={1: skewed_clock},
    )
    assert skewed.state == "complete", skewed.failure
    nodes = _json(tmp_path / "skewed" / "distributed" / "nodes.json")["nodes"]
    fit = nodes[1]["clock"]
    # The fit's offset is at its own reference instant, where the drift has
    # added to the constant part.
    expected = skewed_clock.from_host(fit["ref_ns"]) - fit["ref_ns"]
    assert abs(fit["offset_ns"] - expected) < fit["error_bound_us"] * 1e3 + 5e3
    assert abs(fit["drift_ppm"] - 80) < 20
    assert fit["error_bound_us"] < 1000
    assert abs(nodes[0]["clock"]["offset_ns"]) < 1e6
    # Every stamp is back on the driver's timeline: window figures hold.
    t0 = _json(tmp_path / "skewed" / "distributed" / "engines.json")["t0_ns"]
    assert all(abs(r.t_issue - t0) < 60e9 for r in skewed.records)
    for result in (plain, skewed):
        assert result.stats.issued == 320 and result.stats.failed == 0
    duration = {
        name: _json(tmp_path / name / "performance" / "result_summary.json")["duration_ns"]
        for name in ("plain", "skewed")
    }
    assert abs(duration["skewed"] - duration["plain"]) < 0.25 * duration["plain"]
    tps = {
        name: _json(tmp_path / name / "performance" / "result_summary.json")["system_tps"]
        for name in ("plain", "skewed")
    }
    assert abs(tps["skewed"] - tps["plain"]) < 0.25 * tps["plain"]
    # The start instant was mapped onto the skewed clock: a common start.
    assert skewed.audit.start_skew_ms < 5
    assert skewed.stats.ttft is not None and plain.stats.ttft is not None
    assert abs(skewed.stats.ttft.p50 - plain.stats.ttft.p50) < 0.3 * plain.stats.ttft.p50


def _kill_when_loaded(folder: Path, action: Any) -> threading.Thread:
    def watch() -> None:
        events = folder / "events.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if events.exists() and events.read_text().count('"sample.complete"') >= 20:
                action()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _assert_cut_short(result: PointResult, folder: Path, said: str) -> None:
    assert result.failure is not None and said in result.failure, result.failure
    assert result.state == "interrupted"
    assert said in (folder / "distributed" / "INCOMPLETE").read_text()
    summary = _json(folder / "performance" / "result_summary.json")
    assert summary["complete"] is False and summary["n_samples_completed"] >= 20
    assert _json(folder / "distributed" / "nodes.json")["verdict"] == "node-failure"


def test_a_killed_engine_ends_the_point_with_its_partial_data(
    tmp_path: Path, cluster: Any, endpoint: str
) -> None:
    config = _config(tmp_path, "killed", cluster, num_samples=None, duration_s=60.0)
    pids: list[int] = []

    def kill() -> None:
        pids.extend(_engine_pids())
        os.kill(pids[0], signal.SIGKILL)

    _kill_when_loaded(tmp_path / "killed", kill)
    began = time.monotonic()
    result = _run(config, endpoint)
    assert time.monotonic() - began < 45
    assert len(pids) == 2
    _assert_cut_short(result, tmp_path / "killed", "was lost")


def _engine_pids() -> list[int]:
    """The engine actors' processes (Ray names the worker after the actor)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"_EngineActor" in cmdline:
            found.append(int(proc.name))
    return sorted(found)


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("127.0.0.1:1", "--ray 127.0.0.1:1: no Ray cluster answers there"),
        ("nonsense", "--ray: expected auto or the head's HOST:PORT, got 'nonsense'"),
    ],
)
def test_a_cluster_that_is_not_there_is_one_line_and_status_2(
    tmp_path: Path,
    endpoint: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    address: str,
    said: str,
) -> None:
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    report = tmp_path / "run"
    config = _config(tmp_path, "run", None, ray=None)
    dataset = config.datasets[0].path
    flags = {
        "--endpoints": endpoint,
        "--ray": address,
        "--num-samples": "4",
        "--model": "mlpe-sim",
        "--tokenizer": str(config.tokenizer),
        "--dataset": f"{dataset},parser.prompt=prompt",
        "--report-dir": str(report),
    }
    status = main(["run", *(part for item in flags.items() for part in item), "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and err.strip().count("\n") == 0 and said in err, err
    assert not (report / "events.jsonl").exists()


def test_without_ray_installed_the_flag_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    status = main(["run", "--ray", "auto", "--num-samples", "4", "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and err.strip().count("\n") == 0, err
    assert "--ray needs Ray" in err and "mlpe-fast[ray]" in err


def test_a_stopped_engine_is_caught_by_its_heartbeat(
    tmp_path: Path, cluster: Any, endpoint: str
) -> None:
    config = _config(tmp_path, "stopped", cluster, num_samples=None, duration_s=60.0)
    pids: list[int] = []

    def stop() -> None:
        pids.extend(_engine_pids())
        os.kill(pids[-1], signal.SIGSTOP)

    _kill_when_loaded(tmp_path / "stopped", stop)
    try:
        result = _run(config, endpoint)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    _assert_cut_short(result, tmp_path / "stopped", "sent nothing for")


def test_a_removed_node_ends_the_point_with_its_partial_data(
    tmp_path: Path, cluster: Any, endpoint: str
) -> None:
    """Last: it takes a node away (and puts one back for whatever follows)."""
    config = _config(tmp_path, "removed", cluster, num_samples=None, duration_s=60.0)
    worker = next(node for node in cluster.worker_nodes)
    removed_at: list[float] = []

    def remove() -> None:
        removed_at.append(time.monotonic())
        cluster.remove_node(worker, allow_graceful=False)

    _kill_when_loaded(tmp_path / "removed", remove)
    try:
        result = _run(config, endpoint)
        ended = time.monotonic()
    finally:
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
    assert removed_at and ended - removed_at[0] < 5 + 10  # detection, then the others' grace
    _assert_cut_short(result, tmp_path / "removed", "engine")
