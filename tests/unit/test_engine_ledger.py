"""An engine's ledger (``scale/engine_ledger.py``) with a fake clock: each
record leaves with its query's global index, a batch takes what ended since
the last one, and the next batch is due a period after it."""

from __future__ import annotations

import pytest

from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.scale.engine_ledger import EngineLedger
from mlpe_fast.wire.events import NO_RESPONSE

T0 = 2_000_000_000
PERIOD = 100_000_000


def record(sample_id: str) -> RequestRecord:
    return RequestRecord(0, sample_id, T0, T0, T0, NO_RESPONSE)


def test_records_leave_in_batches_with_their_keys() -> None:
    ledger = EngineLedger(T0, PERIOD)
    assert ledger.due_ns == T0 + PERIOD
    for sample_id, key in (("s0", 40), ("s1", 7), ("s2", 12)):
        ledger.issued(sample_id, key)
    ledger.ended(record("s1"))
    ledger.ended(record("s0"))
    first = ledger.batch(T0 + PERIOD + 3, issued=3)
    assert first.keys == [7, 40] and [r.sample_id for r in first.records] == ["s1", "s0"]
    assert (first.issued, first.in_flight) == (3, 1) and ledger.in_flight == 1
    assert ledger.due_ns == T0 + 2 * PERIOD + 3
    heartbeat = ledger.batch(T0 + 2 * PERIOD + 3, issued=3)  # nothing ended: sent all the same
    assert heartbeat.keys == [] and heartbeat.records == [] and heartbeat.in_flight == 1
    assert first.keys == [7, 40]  # a batch sent is not changed by the next one
    ledger.ended(record("s2"))
    assert ledger.batch(T0 + 3 * PERIOD, issued=3).keys == [12] and ledger.in_flight == 0


def test_a_record_of_a_request_never_issued_is_an_error() -> None:
    ledger = EngineLedger(T0, PERIOD)
    with pytest.raises(KeyError):
        ledger.ended(record("unknown"))
