"""The self-audit: did the client stay out of the way of its own measurement?

Three figures, reported with every run:

* loop lag -- how late the event loop ran a callback it had scheduled.  A
  probe asks to run every ``period`` and records how late it ran; a read
  that arrives while the loop is busy waits about as long, so this bounds
  how late reads were picked up (and so how late their stamps are).
* issue lateness -- ``t_issue - t_sched`` per request: how far behind its
  schedule the client sent it (zero by definition for closed-loop issuing,
  meaningful for Poisson arrivals).
* CPU -- the process's CPU time over the run, per request and per event.

With the kernel's arrival stamps (``RequestRecord.kernel_stamps``) a fourth:

* read lag -- ``t_first_read - t_first`` and ``t_done_read - t_done``: how
  long the data that completed the first token and the response waited in
  the socket before the client read it.  This is the error read-time stamps
  would have had; the metrics use the arrival stamps, so it is not in them.

A point run on several engine processes (``scale/``) is audited over all of
them: loop lags pooled, CPU summed (engines and the driver), and an
``engines`` row with the split, the start skew and lease stalls.
"""

from __future__ import annotations

import asyncio
import os
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from ._receive import ArrivalClock
from .clock import monotonic_ns
from .record import RequestRecord
from .replicas import Replicas

if TYPE_CHECKING:
    from .client import Client

__all__ = ("Audit", "ClientTotals", "ClockMapFigures", "LoopLagProbe", "audit_records")


class ClockMapFigures(msgspec.Struct, frozen=True, gc=False):
    """The kernel-stamp clock map's figures: its error bound and the
    wall-clock steps it saw (``ArrivalClock``'s, or the worst and the sum
    over several engines)."""

    error_ns: int
    steps: int


class ClientTotals(msgspec.Struct, frozen=True, gc=False):
    """A client's connection figures over a run, summable over engines."""

    connections_opened: int = 0
    connect_ns_total: int = 0
    tls_handshakes: int = 0
    tls_ns_total: int = 0
    http2_connections: int = 0
    kernel_stamped_connections: int = 0
    clock_map: ClockMapFigures | None = None
    #: Connections opened before the first request, and the longest time
    #: any client took to open them (``Client.warm_up``).
    warmed_connections: int = 0
    warm_up_ns: int = 0

    @classmethod
    def of(cls, client: Client | Replicas) -> ClientTotals:
        """The figures of ``client``, summed over its members for
        :class:`~.replicas.Replicas`."""
        if isinstance(client, Replicas):
            first, *rest = client.members
            return cls.of(first).plus(*(cls.of(member) for member in rest))
        clock = client.arrival_clock
        return cls(
            connections_opened=client.connections_opened,
            connect_ns_total=client.connect_ns_total,
            tls_handshakes=client.tls_handshakes,
            tls_ns_total=client.tls_ns_total,
            http2_connections=client.http2_connections,
            kernel_stamped_connections=client.kernel_stamped_connections,
            clock_map=None if clock is None else ClockMapFigures(clock.error_ns, clock.steps),
            warmed_connections=client.warmed_connections,
            warm_up_ns=client.warm_up_ns,
        )

    def plus(self, *others: ClientTotals) -> ClientTotals:
        """These totals and ``others``' summed; the clock map's worst error
        bound and all its steps."""
        total = self
        for other in others:
            clocks = [c for c in (total.clock_map, other.clock_map) if c is not None]
            total = ClientTotals(
                total.connections_opened + other.connections_opened,
                total.connect_ns_total + other.connect_ns_total,
                total.tls_handshakes + other.tls_handshakes,
                total.tls_ns_total + other.tls_ns_total,
                total.http2_connections + other.http2_connections,
                total.kernel_stamped_connections + other.kernel_stamped_connections,
                ClockMapFigures(max(c.error_ns for c in clocks), sum(c.steps for c in clocks))
                if clocks
                else None,
                total.warmed_connections + other.warmed_connections,
                max(total.warm_up_ns, other.warm_up_ns),  # side by side, not one after another
            )
        return total


class Audit(msgspec.Struct, frozen=True, gc=False):
    """Self-audit figures of a run (times in ms, CPU in s and µs)."""

    loop_lag_p50_ms: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    issue_late_p50_ms: float
    issue_late_p99_ms: float
    cpu_s: float
    cpu_system_s: float
    cpu_us_per_request: float
    cpu_us_per_event: float
    requests: int
    events: int
    connections_opened: int
    connect_ms_mean: float
    tls_handshakes: int = 0
    tls_ms_mean: float = 0.0
    http2_connections: int = 0
    #: Connections opened before the first request (``--warmup-connections``)
    #: and how long that took; requests whose figures carry a connection setup.
    warmed_connections: int = 0
    warm_up_ms: float = 0.0
    requests_with_setup: int = 0
    receive_stamps: str = "read"  # "kernel", "read" or "mixed"
    receive_stamps_note: str = ""
    kernel_stamped: int = 0
    stamped: int = 0  # records with a response stamp (t_first or t_done)
    read_lag_first_p50_ms: float = 0.0
    read_lag_first_p99_ms: float = 0.0
    read_lag_first_max_ms: float = 0.0
    read_lag_done_p50_ms: float = 0.0
    read_lag_done_p99_ms: float = 0.0
    read_lag_done_max_ms: float = 0.0
    clock_map_error_us: float = 0.0
    clock_steps: int = 0
    engines: int = 1
    engine_concurrency: list[int] = msgspec.field(default_factory=list)
    start_skew_ms: float = 0.0
    lease_waits: int = 0
    lease_wait_ms: float = 0.0
    duplicate_queries: int = 0
    verdict: str = ""
    #: The server's /metrics read beside the load (``server_metrics/``):
    #: scrapes, failures, bytes read, CPU spent reading pages, mean latency.
    metrics_scrapes: int = 0
    metrics_scrape_failures: int = 0
    metrics_bytes: int = 0
    metrics_parse_cpu_ms: float = 0.0
    metrics_scrape_ms_mean: float = 0.0

    def as_rows(self) -> dict[str, str]:
        """Label -> value, for the report table."""
        rows = {
            "loop lag p50 / p99 / max": (
                f"{self.loop_lag_p50_ms:.3f} / {self.loop_lag_p99_ms:.3f} / "
                f"{self.loop_lag_max_ms:.3f} ms"
            ),
            "issue lateness p50 / p99": (
                f"{self.issue_late_p50_ms:.3f} / {self.issue_late_p99_ms:.3f} ms"
            ),
            "client CPU": (
                f"{self.cpu_s:.2f} s ({self.cpu_system_s:.2f} s in the kernel) = "
                f"{self.cpu_us_per_request:.1f} µs/request, {self.cpu_us_per_event:.3f} µs/event"
            ),
            "connections opened": self._connections(),
            "receive stamps": self._stamps(),
        }
        if self.engines > 1:
            shares = " + ".join(str(c) for c in self.engine_concurrency)
            rows["engines"] = (
                f"{self.engines} processes (streams {shares}), start skew "
                f"{self.start_skew_ms:.3f} ms, {self.lease_waits} lease stalls "
                f"({self.lease_wait_ms:.3f} ms)"
                + (
                    f", {self.duplicate_queries} DUPLICATE queries"
                    if self.duplicate_queries
                    else ""
                )
                + (f"; verdict {self.verdict}" if self.verdict else "")
            )
        if self.metrics_scrapes:
            failed = (
                f", {self.metrics_scrape_failures} failed" if self.metrics_scrape_failures else ""
            )
            rows["server metrics scrapes"] = (
                f"{self.metrics_scrapes}{failed}, {self.metrics_bytes:,} bytes, "
                f"{self.metrics_parse_cpu_ms:.1f} ms CPU reading them, mean "
                f"{self.metrics_scrape_ms_mean:.2f} ms each"
            )
        if self.kernel_stamped:
            rows["read lag first / done p50"] = (
                f"{self.read_lag_first_p50_ms:.3f} / {self.read_lag_done_p50_ms:.3f} ms"
            )
            rows["read lag first / done p99"] = (
                f"{self.read_lag_first_p99_ms:.3f} / {self.read_lag_done_p99_ms:.3f} ms"
            )
            rows["read lag first / done max"] = (
                f"{self.read_lag_first_max_ms:.3f} / {self.read_lag_done_max_ms:.3f} ms"
            )
        return rows

    def _stamps(self) -> str:
        if self.receive_stamps == "read":
            return f"read time ({self.receive_stamps_note})"
        kind = "kernel arrival" if self.receive_stamps == "kernel" else "mixed"
        steps = f", {self.clock_steps} wall-clock steps" if self.clock_steps else ""
        return (
            f"{kind}: {self.kernel_stamped:,} of {self.stamped:,} requests with a response "
            f"(clock map ±{self.clock_map_error_us:.3f} µs{steps})"
        )

    def _connections(self) -> str:
        setup = f"mean setup {self.connect_ms_mean:.3f} ms"
        if self.tls_handshakes:
            setup += f", of which TLS handshake {self.tls_ms_mean:.3f} ms"
        protocol = f", {self.http2_connections} over HTTP/2" if self.http2_connections else ""
        early = ""
        if self.warmed_connections:
            early = (
                f"; {self.warmed_connections} before the first request, in "
                f"{self.warm_up_ms:,.1f} ms"
            )
        carried = (
            f"; setup inside {self.requests_with_setup:,} of {self.requests:,} requests' figures"
            if self.requests_with_setup
            else "; no request's figures carry a setup"
        )
        return f"{self.connections_opened} ({setup}{early}){protocol}{carried}"


class LoopLagProbe:
    """Measures event-loop lag while a run goes on (see module doc)."""

    def __init__(self, period_s: float = 0.005) -> None:
        self._period_ns = int(period_s * 1e9)
        self._lags = array("q")
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0
        self._cpu_start = os.times()

    def start(self) -> None:
        self._cpu_start = os.times()
        self._schedule(monotonic_ns())

    def _schedule(self, now: int) -> None:
        loop = asyncio.get_running_loop()
        self._due = now + self._period_ns
        # call_at takes the loop's clock (seconds); the lag is measured on
        # ours, so only the difference between due and run time matters.
        self._handle = loop.call_at(loop.time() + self._period_ns / 1e9, self._tick)

    def _tick(self) -> None:
        now = monotonic_ns()
        self._lags.append(max(0, now - self._due))
        self._schedule(now)

    def stop(self) -> tuple[array[int], int, int]:
        """Stops probing; returns the lags (ns), the CPU time the process
        used (ns, every thread, user + kernel) and the kernel's part (ns)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        end = os.times()
        user = end.user - self._cpu_start.user
        system = end.system - self._cpu_start.system
        return self._lags, int((user + system) * 1e9), int(system * 1e9)


def _percentile_ms(values: np.ndarray, q: float) -> float:
    if values.size == 0:
        return 0.0
    return float(np.percentile(values, q, method="lower")) / 1e6


def audit_records(
    records: Iterable[RequestRecord],
    lags_ns: array[int],
    cpu_ns: int,
    connections_opened: int,
    connect_ns_total: int,
    cpu_system_ns: int = 0,
    *,
    tls_handshakes: int = 0,
    tls_ns_total: int = 0,
    http2_connections: int = 0,
    arrival_clock: ArrivalClock | ClockMapFigures | None = None,
    kernel_stamped_connections: int = 0,
    warmed_connections: int = 0,
    warm_up_ns: int = 0,
) -> Audit:
    """The audit of a run from its records and the probe's readings.

    Connection setup (``connect_ns_total``: TCP connects and TLS handshakes)
    is reported on its own, though each setup is also part of the first
    request on its connection (``RequestRecord.connect_ns``).
    ``arrival_clock`` is the client's (None when kernel stamps were off).
    Records with no stamp (failed before any byte of a response) say
    nothing about the stamps; when no record has one, the connections do."""
    late = []
    lag_first: list[int] = []
    lag_done: list[int] = []
    events = 0
    requests = 0
    kernel = stamped = 0
    with_setup = 0
    for record in records:
        requests += 1
        events += record.response.events
        with_setup += record.connect_ns > 0
        late.append(record.t_issue - record.t_sched)
        if record.response.t_first is not None or record.response.t_done is not None:
            stamped += 1
        if record.kernel_stamps:
            kernel += 1
            first, done = record.response.t_first, record.response.t_done
            if first is not None and record.t_first_read is not None:
                lag_first.append(record.t_first_read - first)
            if done is not None and record.t_done_read is not None:
                lag_done.append(record.t_done_read - done)
    lags = np.frombuffer(lags_ns, dtype=np.int64) if len(lags_ns) else np.zeros(0, np.int64)
    lateness = np.asarray(late, dtype=np.int64)
    first_lags = np.asarray(lag_first, dtype=np.int64)
    done_lags = np.asarray(lag_done, dtype=np.int64)
    if arrival_clock is None:
        note = "kernel stamps off: --receive-stamps read"
    elif tls_handshakes:
        note = "kernel stamps apply to cleartext connections only"
    else:
        note = "the kernel gave no receive stamps on this system"
    if stamped:
        stamps = "read" if not kernel else "kernel" if kernel == stamped else "mixed"
    else:
        stamps = "kernel" if kernel_stamped_connections else "read"
    return Audit(
        loop_lag_p50_ms=_percentile_ms(lags, 50),
        loop_lag_p99_ms=_percentile_ms(lags, 99),
        loop_lag_max_ms=float(lags.max()) / 1e6 if lags.size else 0.0,
        issue_late_p50_ms=_percentile_ms(lateness, 50),
        issue_late_p99_ms=_percentile_ms(lateness, 99),
        cpu_s=cpu_ns / 1e9,
        cpu_system_s=cpu_system_ns / 1e9,
        cpu_us_per_request=cpu_ns / 1e3 / requests if requests else 0.0,
        cpu_us_per_event=cpu_ns / 1e3 / events if events else 0.0,
        requests=requests,
        events=events,
        connections_opened=connections_opened,
        connect_ms_mean=connect_ns_total / 1e6 / connections_opened if connections_opened else 0.0,
        tls_handshakes=tls_handshakes,
        tls_ms_mean=tls_ns_total / 1e6 / tls_handshakes if tls_handshakes else 0.0,
        http2_connections=http2_connections,
        warmed_connections=warmed_connections,
        warm_up_ms=warm_up_ns / 1e6,
        requests_with_setup=with_setup,
        receive_stamps=stamps,
        receive_stamps_note=note if stamps != "kernel" else "",
        kernel_stamped=kernel,
        stamped=stamped,
        read_lag_first_p50_ms=_percentile_ms(first_lags, 50),
        read_lag_first_p99_ms=_percentile_ms(first_lags, 99),
        read_lag_first_max_ms=float(first_lags.max()) / 1e6 if first_lags.size else 0.0,
        read_lag_done_p50_ms=_percentile_ms(done_lags, 50),
        read_lag_done_p99_ms=_percentile_ms(done_lags, 99),
        read_lag_done_max_ms=float(done_lags.max()) / 1e6 if done_lags.size else 0.0,
        clock_map_error_us=arrival_clock.error_ns / 1e3 if arrival_clock is not None else 0.0,
        clock_steps=arrival_clock.steps if arrival_clock is not None else 0,
    )
