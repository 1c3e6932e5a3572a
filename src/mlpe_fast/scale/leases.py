"""One global query sequence, leased out to engines in blocks.

A single-process run issues query k = 0, 1, 2, ... with the sample index
and salt its seeded generators give for k (``load/requests.py``).  When
several engines share a point, the driver keeps those generators and hands
each engine a *lease*: a block of consecutive k with their sample indices
and salts.  Engines issue their leases in order and ask for the next block
when half of the current one is used, so the request path does not wait on
the driver.  Consequences (``docs/distributed.md`` §4.4):

* the issued (sample, salt) multiset is the single-process run's, because
  the same generators produce it in the same order (the rules' seeded-RNG
  check compares what was issued: spec §2.5);
* every record carries its k, so the merge can show that no k was issued
  twice;
* the stop is exact: the book never grants past its limit, and a duration
  that ends at a pass boundary closes the book at that boundary.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterator, Sequence
from types import EllipsisType

import msgspec

from ..engine.clock import monotonic_ns
from ..load.requests import BodyTemplate, salted_body
from ..load.salt import Salter

__all__ = ("Lease", "LeaseBook", "LeaseChannel", "LeasedFeed")

_SALT_HEX = 16  # hex digits per salt (load/salt.py: 64 bits)


class Lease(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Queries ``start``, ``start + 1``, ... : their sample indices (an
    ``array('q')`` as bytes) and salts (16 hex digits each, or empty when
    the phase is unsalted)."""

    start: int
    indices: bytes
    salts: bytes = b""

    def __len__(self) -> int:
        return len(self.indices) // 8


class LeaseBook:
    """The driver's side: draws the global sequence and grants blocks of it.

    Thread-safe: engines' requests are answered from the threads that read
    their pipes.

    Args:
        order: the phase's sample order (the single-process feed's).
        salter: the phase's salt stream; None when unsalted.
        limit: how many queries the phase issues at most; None for a phase
            that a duration ends.
        sharers: how many engines share a closed loop under ``limit``: a
            lease is then at most the fair share of what is left (``ceil(left
            / sharers)``), so that a count smaller than the blocks still
            reaches every engine, and no engine issues the end of the count
            alone while the others idle (which would measure a lower
            concurrency than the point's).  1 for an Offline burst, whose
            blocks are its exact split.
    """

    def __init__(
        self,
        order: Iterator[int],
        salter: Salter | None,
        *,
        limit: int | None,
        sharers: int = 1,
    ) -> None:
        if sharers < 1:
            raise ValueError(f"a lease book needs at least one sharer, not {sharers}")
        self._order = order
        self._salter = salter
        self._limit = limit
        self._sharers = sharers
        self._indices = array("q")
        self._salts = bytearray()
        self._lock = threading.Lock()

    @property
    def granted(self) -> int:
        """How many queries have been leased out."""
        return len(self._indices)

    @property
    def limit(self) -> int | None:
        return self._limit

    def grant(self, size: int) -> Lease | None:
        """The next block of at most ``size`` queries; None once the book is
        closed or at its limit."""
        if size < 1:
            raise ValueError(f"a lease needs at least one query, not {size}")
        with self._lock:
            start = len(self._indices)
            if self._limit is not None:
                left = self._limit - start
                size = min(size, left, -(-left // self._sharers))
            if size <= 0:
                return None
            block = array("q", [next(self._order) for _ in range(size)])
            self._indices.extend(block)
            salts = b""
            if self._salter is not None:
                salts = b"".join(self._salter.next_hex_bytes() for _ in range(size))
                self._salts += salts
            return Lease(start, block.tobytes(), salts)

    def close(self, pass_size: int | None = None, min_requests: int = 0) -> int:
        """Grants nothing more, or (``pass_size``) nothing past the end of the
        dataset pass under way, and not fewer than ``min_requests`` in all
        (``--min-passes``); returns the final limit."""
        with self._lock:
            granted = max(len(self._indices), min_requests)
            limit = granted
            if pass_size:
                limit = -(-granted // pass_size) * pass_size
            if self._limit is None or limit < self._limit:
                self._limit = max(limit, granted)
            return self._limit

    def query(self, k: int) -> tuple[int, str | None]:
        """Query k's sample index and salt (None when unsalted)."""
        index = self._indices[k]
        if self._salter is None:
            return index, None
        salt = self._salts[k * _SALT_HEX : (k + 1) * _SALT_HEX]
        return index, salt.decode("ascii")


class LeaseChannel:
    """How an engine's feed talks to the lease book: :meth:`ask` sends a
    request and returns at once; :meth:`take` returns a lease that has
    arrived (or None: the book has no more; ``...``: nothing yet), waiting
    up to ``timeout`` seconds when ``wait`` is set."""

    def ask(self, size: int) -> None:
        raise NotImplementedError

    def take(self, wait: bool) -> Lease | EllipsisType | None:
        raise NotImplementedError


class LeasedFeed:
    """An engine's request source: the queries of its leases, in order.

    ``last_k`` is the global index of the query just returned.  A stall (the
    current lease used up before the next arrived) blocks the loop until the
    driver answers; ``waits`` and ``wait_ns`` count them for the self-audit.
    """

    __slots__ = (
        "_asked",
        "_block",
        "_channel",
        "_ended",
        "_indices",
        "_lease",
        "_pos",
        "_templates",
        "last_k",
        "wait_ns",
        "waits",
    )

    def __init__(
        self,
        templates: Sequence[BodyTemplate],
        channel: LeaseChannel,
        *,
        block: int,
        first: Lease | None = None,
    ) -> None:
        self._templates = templates
        self._channel = channel
        self._block = block
        self._lease = Lease(0, b"")
        self._indices: memoryview = memoryview(b"").cast("q")
        self._pos = 0
        self._asked = False
        self._ended = False
        self.last_k = -1
        self.waits = 0
        self.wait_ns = 0
        if first is not None:
            self._use(first)

    def next_request(self) -> tuple[int, bytes] | None:
        if self._pos >= len(self._indices) and not self._advance():
            return None
        pos = self._pos
        self._pos = pos + 1
        lease = self._lease
        index = self._indices[pos]
        salt = lease.salts[pos * _SALT_HEX : (pos + 1) * _SALT_HEX] if lease.salts else None
        self.last_k = lease.start + pos
        if not self._asked and not self._ended and 2 * self._pos >= len(self._indices):
            self._asked = True
            self._channel.ask(self._block)
        return index, salted_body(self._templates[index], salt)

    def _advance(self) -> bool:
        if self._ended:
            return False
        lease = self._channel.take(wait=False)
        if lease is ...:
            if not self._asked:
                self._asked = True
                self._channel.ask(self._block)
            began = monotonic_ns()
            lease = self._channel.take(wait=True)
            self.waits += 1
            self.wait_ns += monotonic_ns() - began
        self._asked = False
        if lease is None or lease is ...:
            self._ended = True
            return False
        self._use(lease)
        return True

    def _use(self, lease: Lease) -> None:
        for index in memoryview(lease.indices).cast("q"):
            if not 0 <= index < len(self._templates):
                raise ValueError(f"lease {lease.start}: sample index {index} out of range")
        self._lease = lease
        self._indices = memoryview(lease.indices).cast("q")
        self._pos = 0
