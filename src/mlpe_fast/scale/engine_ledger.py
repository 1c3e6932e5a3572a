"""What an engine owes the driver between two batches, as state without a
loop or a link (sans-IO; ``engine_process.py`` is its driver).

An engine reports every record with the global index k of its query
(``leases.py``): :class:`EngineLedger` keeps the k of each request in
flight by its sample id, the records ended since the last batch, and when
the next batch is due (``BATCH_PERIOD_S`` after the last one: the batch is
also the heartbeat, sent empty or not).  Its methods take the time from the
caller, so a test drives it with a fake clock.
"""

from __future__ import annotations

from ..engine.record import RequestRecord
from .messages import Batch

__all__ = ("EngineLedger",)


class EngineLedger:
    """The keys in flight and the records not yet sent (module doc).

    Args:
        now_ns: the engine's start; the first batch is due a period later.
        period_ns: the time from one batch to the next.
    """

    __slots__ = ("_key_of", "_keys", "_period_ns", "_records", "due_ns")

    def __init__(self, now_ns: int, period_ns: int) -> None:
        self._period_ns = period_ns
        self._key_of: dict[str, int] = {}  # sample id -> k, while in flight
        self._keys: list[int] = []  # the k of each record below
        self._records: list[RequestRecord] = []
        self.due_ns = now_ns + period_ns

    @property
    def in_flight(self) -> int:
        return len(self._key_of)

    def issued(self, sample_id: str, key: int) -> None:
        """The request ``sample_id`` carries query k = ``key``."""
        self._key_of[sample_id] = key

    def ended(self, record: RequestRecord) -> None:
        """A request has its record: it goes in the next batch, with its k."""
        self._keys.append(self._key_of.pop(record.sample_id))
        self._records.append(record)

    def batch(self, now_ns: int, issued: int) -> Batch:
        """The records ended since the last batch (``issued``: the engine's
        count so far); the next batch is due a period after ``now_ns``."""
        batch = Batch(self._keys, self._records, issued, len(self._key_of))
        self._keys = []
        self._records = []
        self.due_ns = now_ns + self._period_ns
        return batch
