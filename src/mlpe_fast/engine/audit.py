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

Whether the tail of the first-token figures can be trusted:

* first reads that held the next token -- a read carries the stamp of its
  newest data (``csrc/mlpe_rxstamp.h`` K2), so a first token read together
  with the next one carries the next one's stamp (``t_second ==
  t_first``: one read completed both).  That happens when the reader is
  late (a busy machine, a niced background build on the client's cores, the
  receive thread waiting for a core), or when the endpoint sent both in one
  segment (then the stamp is their arrival, and true).  Past 1 % of the
  first reads the p99 of TTFT may be a later token's time, and the verdict
  says it is not to be trusted, unless the reader was provably prompt: a
  real-time receive thread that never waits for the interpreter, preempted
  fewer times than there were such reads (each arrival woke it at once).
* first reads carrying later frames (HTTP/2) -- a read of a multiplexed
  connection also holds other streams' frames, and its one stamp is that of
  its newest data: a first token whose read carried bytes past its frame
  (``RequestRecord.first_read_later_bytes``; other streams' frames, or its
  own next token) may carry the arrival of a later frame.  Segment stamps
  (``--receive-stamps packet``) split reads by segment, so those stamps are
  exact per segment and are not counted as movable.  Past 1 % of first
  tokens that may have moved, the verdict says the p99 is not to be
  trusted.
* the receive thread -- the policy, priority and CPUs it got
  (``--receive-priority``, ``--receive-cpu``; ``engine/rx_sched.py``), how
  long it waited for a core per wake-up (run-queue delay, schedstat) and
  how often it was preempted (involuntary context switches).

A point run on several engine processes (``scale/``) is audited over all of
them: loop lags pooled, CPU summed (engines and the driver), and an
``engines`` row with the split, the start skew and lease stalls.
"""

from __future__ import annotations

import asyncio
import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import msgspec
import numpy as np
import numpy.typing as npt

from ..metrics.order_stats import Sample, lower_ranks, order_statistics
from ._receive import ArrivalClock
from .clock import monotonic_ns
from .record import RequestRecord
from .record_columns import NONE, RecordColumns
from .replicas import Replicas
from .rx_sched import ReceiveScheduling, cpu_list

if TYPE_CHECKING:
    from .client import Client

__all__ = (
    "COALESCED_TRUST_SHARE",
    "Audit",
    "ClientTotals",
    "ClockMapFigures",
    "LoopLagProbe",
    "audit_records",
)

#: Past this share of first reads that also held the next token, the p99 of
#: TTFT may be a later token's time: 1 % of the first tokens is the top
#: percentile.
COALESCED_TRUST_SHARE = 0.01


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
    #: Every receive thread's placement and scheduler counters (one per
    #: client that ran one: replicas and engines add theirs).
    receive_threads: tuple[ReceiveScheduling, ...] = ()
    #: Segment stamps: why the capture could not be opened (empty when it
    #: was, or was not asked for) and the frames its ring dropped.
    packet_note: str = ""
    capture_drops: int = 0

    @classmethod
    def of(cls, client: Client | Replicas) -> ClientTotals:
        """The figures of ``client``, summed over its members for
        :class:`~.replicas.Replicas`."""
        if isinstance(client, Replicas):
            first, *rest = client.members
            return cls.of(first).plus(*(cls.of(member) for member in rest))
        clock = client.arrival_clock
        scheduling = client.receive_scheduling
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
            receive_threads=() if scheduling is None else (scheduling,),
            packet_note=client.packet_note,
            capture_drops=client.capture_drops,
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
                total.receive_threads + other.receive_threads,
                total.packet_note or other.packet_note,
                total.capture_drops + other.capture_drops,
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
    #: Segment stamps (--receive-stamps packet): first tokens stamped with
    #: their segment's arrival, and those that took the read's kernel stamp
    #: because the capture never saw the connection's SYN-ACK, lost frames,
    #: or saw no segment with the bytes (RequestRecord.segment_stamp).
    segment_stamped: int = 0
    segment_unknown: int = 0
    segment_lost: int = 0
    segment_missed: int = 0
    capture_drops: int = 0
    packet_note: str = ""
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
    #: The receive threads' placement (one line), their run-queue wait per
    #: wake-up and their involuntary switches, summed over threads.
    receive_thread: str = ""
    receive_threads: list[ReceiveScheduling] = msgspec.field(default_factory=list)
    receive_wait_us_per_wakeup: float = 0.0
    receive_wakeups: int = 0
    receive_involuntary_switches: int = 0
    #: Records with a first and a second token, and those whose first read
    #: held both (module doc); the verdict on the tail of TTFT.
    first_reads: int = 0
    first_reads_with_next: int = 0
    tail_verdict: str = ""
    #: The server's /metrics read beside the load (``server_metrics/``):
    #: scrapes, failures, bytes read, CPU spent reading pages, mean latency.
    metrics_scrapes: int = 0
    metrics_scrape_failures: int = 0
    metrics_bytes: int = 0
    metrics_parse_cpu_ms: float = 0.0
    metrics_scrape_ms_mean: float = 0.0
    #: HTTP/2: first tokens, those whose read carried bytes past their
    #: frame, those of them stamped by their segment (exact), and the verdict.
    first_tokens: int = 0
    first_reads_with_later: int = 0
    first_reads_with_later_segment: int = 0
    multiplex_verdict: str = ""

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
            "receive thread": self._receive_thread(),
        }
        if self.first_reads:
            share = self.first_reads_with_next / self.first_reads
            rows["first reads holding the next token"] = (
                f"{self.first_reads_with_next:,} of {self.first_reads:,} ({share:.1%}); "
                f"{self.tail_verdict}"
            )
        if self.http2_connections and self.first_tokens:
            rows["first reads carrying later frames"] = self._multiplexed()
        segments = self._segments()
        if segments:
            rows["segment stamps"] = segments
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

    def _receive_thread(self) -> str:
        if not self.receive_threads:
            return self.receive_thread
        return (
            f"{self.receive_thread}; waited {self.receive_wait_us_per_wakeup:,.2f} µs for a core "
            f"per wake-up ({self.receive_wakeups:,} wake-ups), "
            f"{self.receive_involuntary_switches:,} involuntary switches"
        )

    def _stamps(self) -> str:
        if self.receive_stamps == "read":
            return f"read time ({self.receive_stamps_note})"
        kind = "kernel arrival" if self.receive_stamps == "kernel" else "mixed"
        steps = f", {self.clock_steps} wall-clock steps" if self.clock_steps else ""
        return (
            f"{kind}: {self.kernel_stamped:,} of {self.stamped:,} requests with a response "
            f"(clock map ±{self.clock_map_error_us:.3f} µs{steps})"
        )

    def _multiplexed(self) -> str:
        share = self.first_reads_with_later / self.first_tokens
        exact = (
            f", {self.first_reads_with_later_segment:,} of them at their segment's arrival "
            "(exact per segment)"
            if self.first_reads_with_later_segment
            else ""
        )
        return (
            f"{self.first_reads_with_later:,} of {self.first_tokens:,} first tokens "
            f"({share:.1%}){exact}; {self.multiplex_verdict}"
        )

    def _segments(self) -> str:
        fell_back = self.segment_unknown + self.segment_lost + self.segment_missed
        if not self.segment_stamped and not fell_back:
            return f"off: {self.packet_note}" if self.packet_note else ""
        reasons = (
            f" (fell back to the read's stamp: {self.segment_unknown:,} unknown connection, "
            f"{self.segment_lost:,} capture lost frames, {self.segment_missed:,} not captured)"
            if fell_back
            else ""
        )
        drops = f"; ring dropped {self.capture_drops:,} frames" if self.capture_drops else ""
        return (
            f"{self.segment_stamped:,} of {self.segment_stamped + fell_back:,} first tokens "
            f"at their segment's arrival{reasons}{drops}"
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


def _read_lags(columns: RecordColumns, stamp: str) -> Iterator[npt.NDArray[np.int64]]:
    """Per block, how long after the kernel's stamp ``stamp`` (``t_first``
    or ``t_done``) the client read it, where both are known."""
    read = f"{stamp}_read"
    for block in columns.blocks():
        at, read_at = block.column(stamp), block.column(read)
        lagged = block.flag("kernel_stamps") & (at != NONE) & (read_at != NONE)
        yield read_at[lagged] - at[lagged]


def _order_ms(sample: Sample, *percentiles: float) -> list[float]:
    """The ``method="lower"`` percentiles of ``sample`` in ms (0.0 each
    when it is empty), exact, read a block at a time."""
    n = len(sample)
    if n == 0:
        return [0.0] * len(percentiles)
    ranks = lower_ranks(n, percentiles)
    found = order_statistics(sample, ranks)
    return [float(found[k]) / 1e6 for k in ranks]


def _percentile_ms(values: np.ndarray, q: float) -> float:
    if values.size == 0:
        return 0.0
    return float(np.percentile(values, q, method="lower")) / 1e6


def _placement(thread: ReceiveScheduling) -> str:
    """One thread's placement: ``SCHED_FIFO 10, CPUs 0-1`` and what was refused."""
    if thread.policy == "unsupported":
        return "no real-time policy or pin on this system"
    policy = {
        "fifo": f"SCHED_FIFO {thread.priority}",
        "rr": f"SCHED_RR {thread.priority}",
        "normal": "normal policy",
    }.get(thread.policy, "an inherited non-real-time policy")
    if thread.refused:
        policy += f" (refused {thread.refused})"
    elif thread.policy == "normal" and not thread.asked_priority:
        policy += " (--receive-priority off)"
    pinned = " pinned" if thread.asked_cpus and not thread.refused.startswith("CPUs") else ""
    return f"{policy}, CPUs {cpu_list(thread.cpus)}{pinned}"


def _receive_line(threads: Sequence[ReceiveScheduling], arrival_clock: object, tls: bool) -> str:
    if not threads:
        if arrival_clock is None:
            return "none (--receive-stamps read: the loop reads)"
        if tls:
            return "none (TLS connections are read on the event loop)"
        return "none (the event loop reads)"
    placements: dict[str, int] = {}
    for thread in threads:
        line = _placement(thread)
        placements[line] = placements.get(line, 0) + 1
    if len(threads) == 1:
        return next(iter(placements))
    return "; ".join(f"{n} x {line}" for line, n in placements.items())


def _tail_verdict(
    first_reads: int, with_next: int, threads: Sequence[ReceiveScheduling], wait_us: float
) -> str:
    """Whether the TTFT tail holds; the reasons are in the module doc."""
    if not first_reads:
        return ""
    share = with_next / first_reads
    if share <= COALESCED_TRUST_SHARE:
        return "TTFT tail to be trusted"
    preempted = sum(t.involuntary_switches for t in threads)
    prompt = all(t.policy in ("fifo", "rr") and t.interpreter_free for t in threads)
    if threads and prompt and preempted < with_next:
        # A real-time thread that never waits for the interpreter runs as
        # soon as data arrives, and it was taken off its core fewer times
        # than there are such reads: it read each segment as it came, so
        # the tokens came in one segment and the stamp is their arrival.
        return (
            f"TTFT tail to be trusted: the endpoint sent {share:.1%} of first tokens together "
            f"with the next (the receive thread is real-time, {preempted:,} involuntary switches)"
        )
    which = "p50 and p99" if share > 0.5 else "p99"
    cause = "sent together by the endpoint, or read late"
    if threads:
        cause += f"; the receive thread waited {wait_us:,.2f} µs for a core per wake-up"
        if not all(t.policy in ("fifo", "rr") for t in threads):
            cause += "; --receive-priority auto where permitted, or free a core"
    return (
        f"TTFT {which} NOT to be trusted: {share:.1%} of first tokens carry the stamp of a "
        f"later one ({cause})"
    )


def _multiplex_verdict(first_tokens: int, with_later: int, segment_exact: int) -> str:
    """Whether the TTFT tail holds over HTTP/2 (module doc)."""
    if not first_tokens:
        return ""
    movable = with_later - segment_exact
    share = movable / first_tokens
    if share <= COALESCED_TRUST_SHARE:
        return "TTFT tail to be trusted"
    which = "p50 and p99" if share > 0.5 else "p99"
    return (
        f"TTFT {which} NOT to be trusted: {share:.1%} of first tokens were read with later "
        "frames and may carry a later frame's arrival (--receive-stamps packet stamps each "
        "segment)"
    )


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
    receive_threads: Sequence[ReceiveScheduling] = (),
    packet_note: str = "",
    capture_drops: int = 0,
) -> Audit:
    """The audit of a run from its records and the probe's readings.

    Connection setup (``connect_ns_total``: TCP connects and TLS handshakes)
    is reported on its own, though each setup is also part of the first
    request on its connection (``RequestRecord.connect_ns``).
    ``arrival_clock`` is the client's (None when kernel stamps were off).
    Records with no stamp (failed before any byte of a response) say
    nothing about the stamps; when no record has one, the connections do."""
    columns = records if isinstance(records, RecordColumns) else RecordColumns(records)
    requests = len(columns)
    # Read a block of rows at a time: the counts add up, and the three series
    # whose percentiles are shown are read again a block at a time for their
    # exact order statistics, never whole (issue 23: a point of a million
    # requests held eleven whole columns here, 76 B a request, then three).
    first_reads = with_next = events = with_setup = stamped = kernel = 0
    first_tokens = with_later = later_exact = 0
    segment_counts = np.zeros(5, np.int64)
    for block in columns.blocks():
        t_first, t_done = block.column("t_first"), block.column("t_done")
        has_first, has_done = t_first != NONE, t_done != NONE
        t_second = block.column("t_second")
        first_read = has_first & (t_second != NONE)
        first_reads += int(np.count_nonzero(first_read))
        with_next += int(np.count_nonzero(first_read & (t_second == t_first)))
        events += int(block.column("events").sum(dtype=np.int64))
        with_setup += int(np.count_nonzero(block.column("connect_ns") > 0))
        stamped += int(np.count_nonzero(has_first | has_done))
        kernel_stamped = block.flag("kernel_stamps")
        kernel += int(np.count_nonzero(kernel_stamped))
        first_tokens += int(np.count_nonzero(has_first))
        later = has_first & (block.column("first_read_later_bytes") > 0)
        with_later += int(np.count_nonzero(later))
        segment_of = block.column("segment_stamp")
        later_exact += int(np.count_nonzero(later & (segment_of == 1)))
        # by RequestRecord.segment_stamp, an unknown code counted as none
        segment_of = np.where((segment_of >= 0) & (segment_of <= 4), segment_of, 0)
        segment_counts += np.bincount(segment_of, minlength=5)
    lateness = Sample(
        lambda: (b.column("t_issue") - b.column("t_sched") for b in columns.blocks()), np.int64
    )
    first_lags = Sample(lambda: _read_lags(columns, "t_first"), np.int64)
    done_lags = Sample(lambda: _read_lags(columns, "t_done"), np.int64)
    late = _order_ms(lateness, 50, 99)
    first = _order_ms(first_lags, 50, 99, 100)
    done = _order_ms(done_lags, 50, 99, 100)
    segments = segment_counts.tolist()
    lags = np.frombuffer(lags_ns, dtype=np.int64) if len(lags_ns) else np.zeros(0, np.int64)
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
    threads = list(receive_threads)
    wakeups = sum(t.timeslices for t in threads)
    wait_us = sum(t.run_delay_ns for t in threads) / 1e3 / wakeups if wakeups else 0.0
    return Audit(
        loop_lag_p50_ms=_percentile_ms(lags, 50),
        loop_lag_p99_ms=_percentile_ms(lags, 99),
        loop_lag_max_ms=float(lags.max()) / 1e6 if lags.size else 0.0,
        issue_late_p50_ms=late[0],
        issue_late_p99_ms=late[1],
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
        read_lag_first_p50_ms=first[0],
        read_lag_first_p99_ms=first[1],
        read_lag_first_max_ms=first[2],
        read_lag_done_p50_ms=done[0],
        read_lag_done_p99_ms=done[1],
        read_lag_done_max_ms=done[2],
        clock_map_error_us=arrival_clock.error_ns / 1e3 if arrival_clock is not None else 0.0,
        clock_steps=arrival_clock.steps if arrival_clock is not None else 0,
        receive_thread=_receive_line(threads, arrival_clock, tls_handshakes > 0),
        receive_threads=threads,
        receive_wait_us_per_wakeup=wait_us,
        receive_wakeups=wakeups,
        receive_involuntary_switches=sum(t.involuntary_switches for t in threads),
        first_reads=first_reads,
        first_reads_with_next=with_next,
        tail_verdict=_tail_verdict(first_reads, with_next, threads, wait_us),
        first_tokens=first_tokens if http2_connections else 0,
        first_reads_with_later=with_later,
        first_reads_with_later_segment=later_exact,
        multiplex_verdict=_multiplex_verdict(first_tokens, with_later, later_exact)
        if http2_connections
        else "",
        segment_stamped=segments[1],
        segment_unknown=segments[2],
        segment_lost=segments[3],
        segment_missed=segments[4],
        capture_drops=capture_drops,
        packet_note=packet_note,
    )
