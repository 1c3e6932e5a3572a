"""Engines on the nodes of a Ray cluster (``--ray ADDRESS``): the
:class:`~.driver.EngineGroup` transport over Ray (``docs/distributed.md`` §4).

Ray places the processes and carries the bytes; everything that decides a
number is mlpe-fast's own:

* **Placement.** One placement-group bundle per node, ``STRICT_SPREAD``,
  so the nodes are reserved together or not at all; in each bundle one
  *node agent* (no CPU) and the node's engine actors (one CPU each).  An
  engine actor is one process running the single-process engine on its own
  event loop, in its own thread (Ray owns the main thread).
* **Clocks.** Each node agent answers UDP clock probes (``clock.py``).  The
  driver fits every node's offset and drift before the start, every
  ``PROBE_PERIOD_S`` during the point and at the end, maps the start
  instant onto each node's clock and every record's stamps back onto its
  own.  Ray calls are never used to measure time.
* **Transport.** The driver's messages are actor calls; an engine's
  messages come back through a streaming generator (batches about every
  100 ms, also the heartbeat).  The driver is never in a request's path.
* **Failures.** A dead engine or node surfaces as a Ray error on its
  generator; a stuck one as a missing heartbeat.  Either ends the point
  (the driver's rule: fail closed).
* **Verdict.** ``ok``, ``node-failure`` (the point was cut short),
  ``clock-suspect`` (a node's clock bound above ``CLOCK_SUSPECT_NS`` or its
  drift above ``DRIFT_SUSPECT_PPM``) or ``client-saturated`` (an engine's
  loop lag p99 above ``SATURATED_LAG_NS``).

Ray is an optional dependency (``mlpe-fast[ray]``), imported here only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import socket
import threading
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from ..engine.loop import loop_runner_for_platform
from ..engine.record import RequestRecord
from ..errors import UsageError
from .clock import ClockFit, ClockResponder, NodeClock, ProbeRound, map_record, probe_round
from .driver import EngineGroup, EngineRun, lag_p99_ns
from .engine_process import EngineLink, EngineSetup, run_engine
from .leases import LeaseBook
from .messages import (
    Batch,
    DriverMessage,
    EngineMessage,
    Failed,
    Start,
    Stop,
    decode_for_driver,
    decode_for_engine,
    encode,
)

__all__ = (
    "CLOCK_SUSPECT_NS",
    "DRIFT_SUSPECT_PPM",
    "PROBE_PERIOD_S",
    "SATURATED_LAG_NS",
    "RayCluster",
    "RayEngines",
    "clock_bind_address",
    "host_identity",
    "registered_address",
    "verdict",
)

PROBE_PERIOD_S = 2.0
"""How often each node's clock is probed during a point."""

CLOCK_SUSPECT_NS = 1_000_000
"""A node whose mapped stamps may be off by more than this is suspect."""

DRIFT_SUSPECT_PPM = 200.0
"""A drift beyond any crystal's tolerance: something else moves the clock."""

SATURATED_LAG_NS = 10_000_000
"""An engine whose loop ran 10 ms late at p99 could not keep up."""

PLACEMENT_TIMEOUT_S = 60.0


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--ray needs Ray, which is not installed: pip install 'mlpe-fast[ray]'"
        ) from None
    return ray


class RayCluster:
    """A connection to a Ray cluster and the nodes an engine may run on.

    Args:
        address: ``auto`` (the cluster this machine belongs to) or
            ``HOST:PORT`` of its head (Ray's GCS address).
        clocks: node clocks for tests on one host, by node index (module
            doc); real nodes read their own.

    Raises:
        UsageError: Ray is missing or the cluster cannot be reached.
    """

    def __init__(self, address: str, clocks: dict[int, NodeClock] | None = None) -> None:
        ray = _ray()
        self.address = address
        self.clocks = dict(clocks or {})
        self._owned = False
        if not ray.is_initialized():
            _check_reachable(address)
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            try:
                ray.init(
                    address=address,
                    logging_level="ERROR",
                    log_to_driver=False,
                    include_dashboard=False,
                )
            except (ConnectionError, ValueError, RuntimeError) as error:
                message = str(error).strip().splitlines()[0] if str(error).strip() else ""
                raise UsageError(
                    f"--ray {address}: cannot connect to the Ray cluster"
                    + (f" ({message})" if message else "")
                ) from None
            self._owned = True
        self.nodes = [
            node
            for node in ray.nodes()
            if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) >= 1
        ]
        if not self.nodes:
            raise UsageError(f"--ray {address}: the cluster has no live node with a CPU")

    def engines_available(self, per_node: int) -> int:
        """Engines the cluster can hold: ``per_node`` on each node (0: one
        per CPU of the node)."""
        return sum(self._per_node(node, per_node) for node in self.nodes)

    def assignment(self, engines: int, per_node: int) -> list[int]:
        """The node index of each engine: node-major round robin over the
        fewest nodes that hold them, so nodes differ by at most one engine
        (and their streams by at most one more)."""
        capacity = [self._per_node(node, per_node) for node in self.nodes]
        nodes: list[int] = []
        for _ in range(engines):
            free = [j for j in range(len(capacity)) if nodes.count(j) < capacity[j]]
            if not free:
                raise UsageError(f"the cluster holds {len(nodes)} engines, not {engines}")
            nodes.append(min(free, key=lambda j: (nodes.count(j), j)))
        return nodes

    @staticmethod
    def _per_node(node: dict[str, Any], per_node: int) -> int:
        return per_node or max(1, int(node["Resources"]["CPU"]))

    def close(self) -> None:
        if self._owned:
            _ray().shutdown()
            self._owned = False


def _check_reachable(address: str) -> None:
    """A ``HOST:PORT`` that nothing answers is a one-line mistake now: Ray
    itself would retry for minutes, logging as it goes."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray: expected auto or the head's HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
    except OSError as error:
        raise UsageError(
            f"--ray {address}: no Ray cluster answers there ({error.strerror or error})"
        ) from None


# Actors (remote classes made when a point needs them: Ray is imported lazily).


class _RayLink(EngineLink):
    """An engine actor's link: its messages queue up for the generator the
    driver iterates; the driver's arrive as actor calls.  Stamps leave on
    the node's clock and the start instant arrives on it."""

    def __init__(self, clock: NodeClock) -> None:
        super().__init__()
        self._clock = clock
        self.out: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._early: list[bytes] | None = []  # delivered before the loop was there

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        super().attach(loop)
        with self._lock:
            early, self._early = self._early or [], None
        for frame in early:
            self.deliver(frame)

    def send(self, message: EngineMessage) -> None:
        if isinstance(message, Batch) and not self._clock.identity:
            records = [map_record(r, self._clock.from_host) for r in message.records]
            message = msgspec.structs.replace(message, records=records)
        self.out.put(encode(message))

    def deliver(self, frame: bytes) -> None:
        with self._lock:
            if self._early is not None:
                self._early.append(frame)
                return
        message = decode_for_engine(frame)
        if isinstance(message, Start):
            message = msgspec.structs.replace(message, t0_ns=self._clock.to_host(message.t0_ns))
        self.dispatch(message)


class _EngineActor:
    """One engine process on a node (module doc)."""

    def __init__(self, clock: NodeClock) -> None:
        self._link = _RayLink(clock)

    def pid(self) -> int:
        return os.getpid()

    def frames(self, setup: EngineSetup) -> Iterator[bytes]:
        """Runs the engine's share, yielding its messages as they come."""
        link = self._link

        def run() -> None:
            try:
                loop_runner_for_platform()(run_engine(link, setup))
            except BaseException as error:  # the driver must hear why
                link.send(Failed(f"engine {setup.index}: {type(error).__name__}: {error}"))
            finally:
                link.out.put(None)

        thread = threading.Thread(target=run, name="mlpe-engine", daemon=True)
        thread.start()
        while (frame := link.out.get()) is not None:
            yield frame
        thread.join(timeout=10)

    def deliver(self, frame: bytes) -> None:
        self._link.deliver(frame)


def registered_address(nodes: list[dict[str, Any]], node_id: str) -> str | None:
    """The address the cluster knows node ``node_id`` by: its
    ``NodeManagerAddress`` in the cluster's own node table (``ray.nodes()``),
    where the cluster's own traffic goes; None when the node is not in the
    table alive."""
    for node in nodes:
        if node.get("NodeID") == node_id and node.get("Alive", True):
            address = node.get("NodeManagerAddress")
            if isinstance(address, str) and address:
                return address
    return None


def host_identity() -> str | None:
    """This machine's kernel boot id: two processes that read the same one
    run on the same host (None where the kernel does not say)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def clock_bind_address(registered: str, driver_host: str | None) -> str:
    """Where a node's clock responder listens, and the driver probes it.

    On the driver's own host, loopback: every probe then stays on the
    loopback device, whatever address the node registered with.  (Ray
    registers a node started with ``--node-ip-address 127.0.0.1`` under the
    machine's routable address, ray-project/ray #59110, and
    ``ray.util.get_node_ip_address()`` inside an actor gives that address
    too, so a single-host cluster's probes went out through the interface
    address: issue 23.)  On another host, the address the cluster knows
    the node by (:func:`registered_address`), where its own traffic goes.
    """
    if driver_host is not None and driver_host == host_identity():
        return "::1" if ":" in registered else "127.0.0.1"
    return registered


class _NodeAgent:
    """The node's clock responder and its view of the endpoint."""

    def __init__(self, clock: NodeClock, driver_host: str | None) -> None:
        ray = _ray()
        self._ip = registered_address(ray.nodes(), ray.get_runtime_context().get_node_id())
        if self._ip is None:  # not in the table (yet): Ray's own guess
            self._ip = ray.util.get_node_ip_address()
        self._responder = ClockResponder(clock_bind_address(self._ip, driver_host), clock)

    def info(self) -> dict[str, Any]:
        ray = _ray()
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": self._ip,
            "hostname": socket.gethostname(),
            "cpus": os.cpu_count(),
            "clock_address": list(self._responder.address),
        }

    def endpoint_rtt_ms(self, endpoint: str) -> float | None:
        """The best of five TCP connects to the endpoint, in ms (the
        baseline latency the rules ask to document, per node)."""
        parts = urlsplit(endpoint)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        best: float | None = None
        for _ in range(5):
            began = time.monotonic_ns()
            try:
                with socket.create_connection((parts.hostname or "", port), timeout=2):
                    took = (time.monotonic_ns() - began) / 1e6
            except OSError:
                continue
            best = took if best is None else min(best, took)
        return best


class RayEngines(EngineGroup):
    """Engine actors on the cluster's nodes, with their clocks modelled."""

    def __init__(
        self,
        setups: list[EngineSetup],
        book: LeaseBook,
        *,
        cluster: RayCluster,
        nodes: list[int],
    ) -> None:
        super().__init__(setups, book)
        self._cluster = cluster
        self._nodes = nodes  # node index of each engine
        self._actors: list[Any] = []
        self._agents: list[Any] = []
        self._readers: list[threading.Thread] = []
        self._group: Any = None
        self._stop_probing = threading.Event()
        self._prober: threading.Thread | None = None
        self.node_info: list[dict[str, Any]] = []
        self.endpoint_rtt_ms: list[float | None] = []
        self.rounds: list[list[ProbeRound]] = []
        self.fits: list[ClockFit] = []
        self._engine_bundle: list[int] = []

    async def ready(self) -> bool:
        """Places and starts the actors (off the loop: Ray's calls block),
        then waits for the engines as the driver does."""
        await asyncio.get_running_loop().run_in_executor(None, self._launch)
        if self._stopping:  # a signal while launching: tell the new engines
            for e in range(len(self._setups)):
                if not self._ended[e]:
                    self._send(e, Stop(cancel=True))
        return await super().ready()

    def _launch(self) -> None:
        setups, cluster, nodes = self._setups, self._cluster, self._nodes
        ray = _ray()
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._ray = ray
        self._remove_group = remove_placement_group
        used = sorted(set(nodes))
        self._bundle_of = {j: b for b, j in enumerate(used)}
        self._group = placement_group(
            [{"CPU": nodes.count(j)} for j in used], strategy="STRICT_SPREAD"
        )
        try:
            ray.get(self._group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self._remove_group(self._group)
            raise UsageError(
                f"the Ray cluster could not place {len(setups)} engines on {len(used)} "
                f"nodes within {PLACEMENT_TIMEOUT_S:.0f} s"
            ) from None

        def place(bundle: int) -> Any:
            return PlacementGroupSchedulingStrategy(
                self._group, placement_group_bundle_index=bundle
            )

        clocks = {b: cluster.clocks.get(b, NodeClock()) for b in range(len(used))}
        agent_class = ray.remote(num_cpus=0)(_NodeAgent)
        self._agents[:] = [
            agent_class.options(scheduling_strategy=place(b)).remote(clocks[b], host_identity())
            for b in range(len(used))
        ]
        self.node_info = ray.get([a.info.remote() for a in self._agents])
        self.endpoint_rtt_ms = ray.get(
            [a.endpoint_rtt_ms.remote(setups[0].endpoints[0]) for a in self._agents]
        )
        self.rounds = [[] for _ in used]
        self._probe_all()
        time.sleep(0.2)  # a second round apart from the first: a first drift
        self._probe_all()
        engine_class = ray.remote(num_cpus=1, max_concurrency=4)(_EngineActor)
        self._engine_bundle = [self._bundle_of[j] for j in nodes]
        self._actors[:] = [
            engine_class.options(scheduling_strategy=place(b)).remote(clocks[b])
            for b in self._engine_bundle
        ]
        self.pids = ray.get([actor.pid.remote() for actor in self._actors])
        self._generators = [
            actor.frames.options(num_returns="streaming").remote(setup)
            for actor, setup in zip(self._actors, setups, strict=True)
        ]
        self._prober = threading.Thread(target=self._probe_while_running, daemon=True)
        self._prober.start()
        self._readers[:] = [
            threading.Thread(target=self._read, args=(e,), name=f"mlpe-ray-in-{e}", daemon=True)
            for e in range(len(setups))
        ]
        for reader in self._readers:
            reader.start()

    # -- clocks -----------------------------------------------------------------

    def _probe_all(self) -> None:
        for b, info in enumerate(self.node_info):
            address = (info["clock_address"][0], int(info["clock_address"][1]))
            with contextlib.suppress(TimeoutError):
                self.rounds[b].append(probe_round(address))
        self.fits = [ClockFit.fit(rounds) for rounds in self.rounds]

    def _probe_while_running(self) -> None:
        while not self._stop_probing.wait(PROBE_PERIOD_S):
            self._probe_all()

    def start_instant(self, engine: int, t0: int) -> int:
        return self.fits[self._engine_bundle[engine]].to_node(t0)

    def to_driver(self, engine: int, record: RequestRecord) -> RequestRecord:
        fit = self.fits[self._engine_bundle[engine]]
        if fit.offset_ns == 0 and fit.drift_ppm == 0:
            return record
        return map_record(record, fit.to_driver)

    # -- transport --------------------------------------------------------------

    def _send(self, engine: int, message: DriverMessage) -> None:
        if engine >= len(self._actors):
            return  # not launched yet: ready() tells it
        with contextlib.suppress(Exception):  # a lost actor shows on its generator
            self._actors[engine].deliver.remote(encode(message))

    def _kill(self, engine: int) -> None:
        if engine < len(self._actors):
            with contextlib.suppress(Exception):
                self._ray.kill(self._actors[engine], no_restart=True)

    def _shutdown(self) -> None:
        deadline = time.monotonic() + 10
        for reader in self._readers:
            reader.join(timeout=max(0.0, deadline - time.monotonic()))
        self._stop_probing.set()
        if self._prober is not None:
            self._prober.join(timeout=5)
            self._probe_all()  # the last round, after the load
        for actor in (*self._actors, *self._agents):
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        if self._group is not None:
            with contextlib.suppress(Exception):
                self._remove_group(self._group)

    def _read(self, engine: int) -> None:
        ray = self._ray
        node = self.node_info[self._engine_bundle[engine]]
        try:
            for ref in self._generators[engine]:
                self._received(engine, decode_for_driver(ray.get(ref)))
        except ray.exceptions.RayError as error:
            kind = type(error).__name__
            self._lost_from_thread(
                engine, f"engine {engine} on node {node['ip']} was lost ({kind})"
            )
            return
        except msgspec.DecodeError as error:
            self._lost_from_thread(engine, f"engine {engine} sent a garbled message ({error})")
            return
        self._lost_from_thread(engine, f"engine {engine} ended without its totals")

    # -- the report -------------------------------------------------------------

    def extra_report(self, run: EngineRun) -> tuple[dict[str, Any], str | None]:
        if not self.fits:  # stopped before the launch
            return {}, None
        nodes = self.report(run)
        return {"nodes.json": nodes, "clock.json": self.clock_rounds()}, nodes["verdict"]

    def report(self, run: EngineRun) -> dict[str, Any]:
        """``distributed/nodes.json``: per node, where it is, its engines and
        streams, its clock, its view of the endpoint, and its engines'
        figures; and the verdict."""
        nodes = []
        held = run.concurrency_held()
        for b, info in enumerate(self.node_info):
            engines = [e for e, bundle in enumerate(self._engine_bundle) if bundle == b]
            fit = self.fits[b]
            lags = array("q")
            cpu_ns = 0
            for e in engines:
                totals = run.totals[e]
                if totals is not None:
                    lags.frombytes(totals.lags_ns)
                    cpu_ns += totals.cpu_ns
            lag_p99 = lag_p99_ns(lags.tobytes())
            nodes.append(
                {
                    **info,
                    "engines": engines,
                    "concurrency": sum(run.concurrency[e] for e in engines),
                    "concurrency_held": round(sum(held[e] for e in engines), 3),
                    "records": sum(1 for x in run.engine_of if x in engines),
                    "clock": {
                        "offset_ns": fit.offset_ns,
                        "ref_ns": fit.ref_ns,
                        "drift_ppm": fit.drift_ppm,
                        "rtt_min_us": fit.rtt_min_ns / 1e3,
                        "error_bound_us": fit.error_ns / 1e3,
                        "residual_max_us": fit.residual_max_ns / 1e3,
                        "rounds": fit.rounds,
                    },
                    "endpoint_rtt_ms": self.endpoint_rtt_ms[b],
                    "cpu_s": cpu_ns / 1e9,
                    "loop_lag_p99_ms": None if lag_p99 is None else lag_p99 / 1e6,
                }
            )
        return {"verdict": verdict(run, self.fits), "nodes": nodes}

    def clock_rounds(self) -> list[list[dict[str, Any]]]:
        """``distributed/clock.json``: every node's probe rounds."""
        return [[msgspec.to_builtins(r) for r in rounds] for rounds in self.rounds]


def verdict(run: EngineRun, fits: list[ClockFit]) -> str:
    """The point's verdict (module doc), the worst that applies."""
    if run.failure is not None:
        return "node-failure"
    if any(f.error_ns > CLOCK_SUSPECT_NS or abs(f.drift_ppm) > DRIFT_SUSPECT_PPM for f in fits):
        return "clock-suspect"
    for totals in run.totals:
        lag_p99 = None if totals is None else lag_p99_ns(totals.lags_ns)
        if lag_p99 is not None and lag_p99 > SATURATED_LAG_NS:
            return "client-saturated"
    return "ok"
