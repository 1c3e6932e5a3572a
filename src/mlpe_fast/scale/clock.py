"""Clocks of other machines: measuring them, and mapping their stamps onto
the driver's timeline (``docs/distributed.md`` §2.5, §4.5).

``CLOCK_MONOTONIC`` values from two hosts are unrelated (each counts from
its own boot) and their rates differ by up to tens of ppm without NTP.
Per-request metrics subtract stamps of one host and need nothing; window
metrics (``duration_ns``, ``system_tps``, the steady-state window, the
start) need every stamp on one timeline, the driver's.

Measuring (NTP/Cristian): the driver sends a probe at ``t0`` (its clock),
the node stamps ``tr`` (its clock) and answers, the driver receives at
``t1``.  Then ``offset = tr - (t0 + t1) / 2`` with an error of at most
``(t1 - t0) / 2`` for symmetric paths.  A round of probes keeps the sample
with the smallest round trip (a busy moment only makes samples worse,
never better).  Rounds at different times fit ``offset(t) = a + b (t -
t_ref)``: ``b`` is the drift.  The bound reported for a node is its best
round trip / 2 plus the largest residual of the fit.

Probes travel over UDP, not through Ray calls: a Ray call's round trip is
about 1 ms and asymmetric, a UDP round trip on loopback 10-20 µs.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Sequence

import msgspec

from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord

__all__ = (
    "ClockFit",
    "ClockResponder",
    "NodeClock",
    "ProbeRound",
    "map_record",
    "probe_round",
)

_PROBE = struct.Struct("<Q")  # the driver's sequence number
_ANSWER = struct.Struct("<Qq")  # the sequence number, the node's stamp


class NodeClock(msgspec.Struct, frozen=True):
    """A node's clock as a function of this host's ``CLOCK_MONOTONIC``:
    ``node(t) = t + offset_ns + drift_ppm * 1e-6 * (t - ref_ns)``.

    A real node reads its own clock (the identity).  On one host, where
    every "node" shares the clock, a test gives a node an offset and a
    drift, so that the model below has something to find
    (``docs/distributed.md`` §4.9, test 4).
    """

    offset_ns: int = 0
    drift_ppm: float = 0.0
    ref_ns: int = 0

    @property
    def identity(self) -> bool:
        return self.offset_ns == 0 and self.drift_ppm == 0.0

    def now(self) -> int:
        return self.from_host(monotonic_ns())

    def from_host(self, t: int) -> int:
        """This host's stamp ``t`` read on the node's clock."""
        if self.identity:
            return t
        return t + self.offset_ns + round(self.drift_ppm * 1e-6 * (t - self.ref_ns))

    def to_host(self, t_node: int) -> int:
        """The host instant at which the node's clock reads ``t_node``."""
        if self.identity:
            return t_node
        rate = self.drift_ppm * 1e-6
        return round((t_node - self.offset_ns + rate * self.ref_ns) / (1.0 + rate))


class ClockResponder:
    """The node's side of the probes: a UDP socket answered from a thread,
    each answer stamped right after the probe is received.

    Args:
        host: the address to listen on (the node's address).
        clock: the node's clock (None: this host's, as on a real node).
    """

    def __init__(self, host: str, clock: NodeClock | None = None) -> None:
        self._clock = clock or NodeClock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((host, 0))
        self.address: tuple[str, int] = self._sock.getsockname()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="mlpe-clock", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        sock, clock = self._sock, self._clock
        while not self._closed:
            try:
                data, peer = sock.recvfrom(64)
                stamp = clock.now()
                if len(data) == _PROBE.size:
                    sock.sendto(_ANSWER.pack(_PROBE.unpack(data)[0], stamp), peer)
            except OSError:
                continue  # a probe's sender went away: the next probe is what counts

    def close(self) -> None:
        """Stops answering: wakes the thread with an empty datagram, waits
        for it, then closes the socket."""
        self._closed = True
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"", self.address)
        self._thread.join(timeout=5)
        self._sock.close()


class ProbeRound(msgspec.Struct, frozen=True):
    """The best probe of a round: sent at ``t0`` and answered at ``t1`` (the
    driver's clock), stamped ``tr`` by the node; ``probes`` were sent."""

    t0: int
    tr: int
    t1: int
    probes: int

    @property
    def rtt_ns(self) -> int:
        return self.t1 - self.t0

    @property
    def midpoint(self) -> float:
        return (self.t0 + self.t1) / 2

    @property
    def offset_ns(self) -> float:
        """The node's clock minus the driver's, at :attr:`midpoint`."""
        return self.tr - self.midpoint


def probe_round(address: tuple[str, int], probes: int = 200, timeout_s: float = 0.05) -> ProbeRound:
    """Sends ``probes`` probes to a :class:`ClockResponder` one after the
    other and keeps the one with the smallest round trip.

    Raises:
        TimeoutError: no probe was answered.
    """
    best: ProbeRound | None = None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(address)
        for seq in range(probes):
            t0 = monotonic_ns()
            sock.send(_PROBE.pack(seq))
            try:
                while True:  # skip late answers to earlier probes
                    got, stamp = _ANSWER.unpack(sock.recv(64))
                    if got == seq:
                        break
            except (TimeoutError, OSError, struct.error):
                continue
            t1 = monotonic_ns()
            if best is None or t1 - t0 < best.rtt_ns:
                best = ProbeRound(t0, stamp, t1, probes)
    if best is None:
        raise TimeoutError(f"no answer from the clock responder at {address[0]}:{address[1]}")
    return best


class ClockFit(msgspec.Struct, frozen=True):
    """A node's offset and drift against the driver, fitted over rounds:
    ``offset(t) = offset_ns + drift_ppm * 1e-6 * (t - ref_ns)`` for driver
    time ``t``; ``error_ns`` bounds a mapped stamp's error."""

    offset_ns: float
    drift_ppm: float
    ref_ns: int
    rtt_min_ns: int
    residual_max_ns: float
    rounds: int

    @property
    def error_ns(self) -> float:
        return self.rtt_min_ns / 2 + self.residual_max_ns

    @classmethod
    def fit(cls, rounds: Sequence[ProbeRound]) -> ClockFit:
        """Least squares over the rounds' best probes (one round: no drift)."""
        if not rounds:
            raise ValueError("a clock fit needs at least one probe round")
        ref = int(rounds[0].midpoint)
        xs = [r.midpoint - ref for r in rounds]
        ys = [r.offset_ns for r in rounds]
        n = len(rounds)
        mean_x, mean_y = sum(xs) / n, sum(ys) / n
        spread = sum((x - mean_x) ** 2 for x in xs)
        slope = (
            0.0
            if n < 2 or spread == 0
            else (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread)
        )
        intercept = mean_y - slope * mean_x
        residual = max(abs(y - (intercept + slope * x)) for x, y in zip(xs, ys, strict=True))
        return cls(
            offset_ns=intercept,
            drift_ppm=slope * 1e6,
            ref_ns=ref,
            rtt_min_ns=min(r.rtt_ns for r in rounds),
            residual_max_ns=residual,
            rounds=n,
        )

    def to_node(self, t: int) -> int:
        """The driver's instant ``t`` on the node's clock."""
        return round(t + self.offset_ns + self.drift_ppm * 1e-6 * (t - self.ref_ns))

    def to_driver(self, t_node: int) -> int:
        """The node's stamp ``t_node`` on the driver's clock (the inverse)."""
        rate = self.drift_ppm * 1e-6
        return round((t_node - self.offset_ns + rate * self.ref_ns) / (1.0 + rate))


def map_record(record: RequestRecord, to: Callable[[int], int]) -> RequestRecord:
    """``record`` with every stamp ``t`` replaced by ``to(t)``.

    ``response.gaps`` holds durations, not stamps, and stays as it is: a
    clock fit's drift (parts per million) moves a gap by far less than the
    histogram's resolution (``wire/gaps.py``).
    """
    response = record.response
    error = response.first_chunk_error

    def opt(t: int | None) -> int | None:
        return None if t is None else to(t)

    return msgspec.structs.replace(
        record,
        t_sched=to(record.t_sched),
        t_issue=to(record.t_issue),
        t_end=to(record.t_end),
        t_first_read=opt(record.t_first_read),
        t_done_read=opt(record.t_done_read),
        response=msgspec.structs.replace(
            response,
            t_head=opt(response.t_head),
            t_first=opt(response.t_first),
            t_done=opt(response.t_done),
            t_first_content=opt(response.t_first_content),
            t_second=opt(response.t_second),
            first_chunk_error=(
                None if error is None else msgspec.structs.replace(error, t_ns=to(error.t_ns))
            ),
            chunk_times=(
                None if response.chunk_times is None else tuple(map(to, response.chunk_times))
            ),
        ),
    )
