"""What the driver and its engine processes say to each other.

Each message is one msgpack frame (msgspec, tagged structs) on the pipe
between them.  Per-request data crosses only as finished records, in
batches; per-event data never leaves the engine (``docs/architecture.md``:
no inter-process hop between the socket and the timestamp).
"""

from __future__ import annotations

import msgspec

from ..engine.audit import ClientTotals
from ..engine.record import RequestRecord
from .leases import Lease

__all__ = (
    "Ask",
    "Batch",
    "DriverMessage",
    "EngineMessage",
    "EngineTotals",
    "Failed",
    "Grant",
    "Ready",
    "Start",
    "Stop",
    "decode_for_driver",
    "decode_for_engine",
    "encode",
)


# Driver -> engine ------------------------------------------------------------------


class Start(msgspec.Struct, tag=True, frozen=True):
    """Issue from ``t0_ns`` (``CLOCK_MONOTONIC``), beginning with ``lease``."""

    t0_ns: int
    lease: Lease | None


class Grant(msgspec.Struct, tag=True, frozen=True):
    """The answer to an :class:`Ask`: the next lease, or None (no more)."""

    lease: Lease | None


class Stop(msgspec.Struct, tag=True, frozen=True):
    """Stop issuing now; with ``cancel``, end the requests in flight too."""

    cancel: bool


# Engine -> driver ------------------------------------------------------------------


class Ready(msgspec.Struct, tag=True, frozen=True):
    """The engine has its dataset, bodies and client, and waits for Start."""

    pid: int


class Ask(msgspec.Struct, tag=True, frozen=True):
    """The engine's next lease, of ``size`` queries."""

    size: int


class Batch(msgspec.Struct, tag=True, frozen=True):
    """Records that ended since the last batch, with the global index k of
    each; also the heartbeat (sent every period, empty or not) and the
    engine's running counts."""

    keys: list[int]
    records: list[RequestRecord]
    issued: int
    in_flight: int


class EngineTotals(msgspec.Struct, tag=True, frozen=True):
    """What the engine measured of itself over the phase."""

    lags_ns: bytes  # array('q') of loop-lag samples
    cpu_ns: int
    cpu_system_ns: int
    client: ClientTotals
    issued: int
    lease_waits: int
    lease_wait_ns: int


class Failed(msgspec.Struct, tag=True, frozen=True):
    """The engine could not go on; ``message`` says why, in one line."""

    message: str


DriverMessage = Start | Grant | Stop
EngineMessage = Ready | Ask | Batch | EngineTotals | Failed

_encoder = msgspec.msgpack.Encoder()
_for_engine: msgspec.msgpack.Decoder[DriverMessage] = msgspec.msgpack.Decoder(DriverMessage)
_for_driver: msgspec.msgpack.Decoder[EngineMessage] = msgspec.msgpack.Decoder(EngineMessage)


def encode(message: DriverMessage | EngineMessage) -> bytes:
    return _encoder.encode(message)


def decode_for_engine(frame: bytes) -> DriverMessage:
    return _for_engine.decode(frame)


def decode_for_driver(frame: bytes) -> EngineMessage:
    return _for_driver.decode(frame)
