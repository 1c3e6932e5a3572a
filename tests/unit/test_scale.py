"""The pieces of ``--engines N`` that need no process: the concurrency
split, the lease book, the leased feed and the driver/engine messages."""

from __future__ import annotations

import queue
from array import array
from types import EllipsisType

import msgspec
import pytest

from mlpe_fast.config import RunConfig
from mlpe_fast.engine.audit import ClientTotals
from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.load.dataset import DatasetSpec, load_dataset
from mlpe_fast.load.requests import RequestFeed, build_body_templates, prompt_of, shuffled_order
from mlpe_fast.load.salt import Salter
from mlpe_fast.scale.clock import ClockFit
from mlpe_fast.scale.driver import EngineRun, lag_p99_ns
from mlpe_fast.scale.leases import Lease, LeaseBook, LeaseChannel, LeasedFeed
from mlpe_fast.scale.messages import (
    Ask,
    Batch,
    EngineTotals,
    Grant,
    Start,
    Stop,
    decode_for_driver,
    decode_for_engine,
    encode,
)
from mlpe_fast.scale.ray_cluster import verdict
from mlpe_fast.scale.split import engines_for, lease_block, split_concurrency, usable_cores
from mlpe_fast.wire.events import NO_RESPONSE, TokenGaps
from tests.data_files import DUMMY_1K

# The split ------------------------------------------------------------------------


@pytest.mark.parametrize("total", [1, 2, 3, 7, 64, 65, 1000, 1001])
@pytest.mark.parametrize("engines", [1, 2, 3, 8])
def test_split_sums_exactly_and_differs_by_at_most_one(total: int, engines: int) -> None:
    if total < engines:
        with pytest.raises(ValueError, match="cannot split"):
            split_concurrency(total, engines)
        return
    shares = split_concurrency(total, engines)
    assert sum(shares) == total and len(shares) == engines
    assert max(shares) - min(shares) <= 1
    assert list(shares) == sorted(shares, reverse=True)


def test_low_points_stay_on_one_engine() -> None:
    assert engines_for(32, 4, 64) == 1  # the C <= 32 region: one engine
    assert engines_for(64, 4, 64) == 1
    assert engines_for(65, 4, 64) == 2
    assert engines_for(1000, 4, 64) == 4
    assert engines_for(3, 8, 1) == 3  # never more engines than streams
    assert engines_for(10_000, 0, 1) == usable_cores()  # 0: one per usable core
    with pytest.raises(ValueError):
        engines_for(0, 2, 64)


def test_lease_block_bounds() -> None:
    assert lease_block(1) == 16 and lease_block(100) == 200 and lease_block(5000) == 1024


# The lease book ---------------------------------------------------------------------


def test_book_grants_the_single_process_sequence_in_order() -> None:
    single_order = shuffled_order(50, 7)
    single_salts = Salter(9)
    book = LeaseBook(shuffled_order(50, 7), Salter(9), limit=None)
    k = 0
    for size in (3, 16, 1, 40, 90):
        lease = book.grant(size)
        assert lease is not None and lease.start == k and len(lease) == size
        for index in memoryview(lease.indices).cast("q"):
            salt = single_salts.next_hex()
            assert index == next(single_order)
            assert book.query(k) == (index, salt)
            k += 1
        salts = [book.query(j)[1] or "" for j in range(lease.start, k)]
        assert lease.salts == "".join(salts).encode()
    assert book.granted == k == 150


def test_book_stops_exactly_at_its_limit() -> None:
    book = LeaseBook(shuffled_order(10, 1), None, limit=25)
    sizes = []
    while (lease := book.grant(8)) is not None:
        sizes.append(len(lease))
        assert lease.salts == b""
    assert sizes == [8, 8, 8, 1] and book.granted == 25
    assert book.query(3)[1] is None


def test_shared_book_grants_the_fair_share_of_what_is_left() -> None:
    # Two engines under a count of 12 with blocks of 16: without the fair
    # share the first took all 12 and the point ran at half its concurrency.
    book = LeaseBook(shuffled_order(10, 1), None, limit=12, sharers=2)
    assert [len(book.grant(16) or ()) for _ in range(5)] == [6, 3, 2, 1, 0]
    book = LeaseBook(shuffled_order(10, 1), None, limit=48, sharers=2)
    sizes = []
    while (lease := book.grant(16)) is not None:
        sizes.append(len(lease))
    assert sizes == [16, 16, 8, 4, 2, 1, 1] and book.granted == 48
    with pytest.raises(ValueError, match="at least one sharer"):
        LeaseBook(shuffled_order(10, 1), None, limit=1, sharers=0)


def test_closing_at_a_pass_boundary() -> None:
    book = LeaseBook(shuffled_order(10, 1), None, limit=None)
    assert book.grant(13) is not None
    assert book.close(pass_size=10) == 20  # the pass under way ends at 20
    assert [len(lease) for lease in iter(lambda: book.grant(4), None)] == [4, 3]
    assert book.granted == 20
    plain = LeaseBook(shuffled_order(10, 1), None, limit=None)
    assert plain.grant(5) is not None
    assert plain.close() == 5 and plain.grant(1) is None
    with pytest.raises(ValueError):
        plain.grant(0)


# The leased feed --------------------------------------------------------------------


class _Channel(LeaseChannel):
    """The book in this process: an ask is answered at once, into a queue."""

    def __init__(self, book: LeaseBook, answer: bool = True) -> None:
        self.book = book
        self.answer = answer
        self.asked: list[int] = []
        self.arrived: queue.SimpleQueue[Lease | None] = queue.SimpleQueue()

    def ask(self, size: int) -> None:
        self.asked.append(size)
        if self.answer:
            self.arrived.put(self.book.grant(size))

    def take(self, wait: bool) -> Lease | EllipsisType | None:
        if not wait and self.arrived.empty():
            return ...
        if wait and self.arrived.empty():  # a stall: answer it now
            self.arrived.put(self.book.grant(self.asked[-1]))
        return self.arrived.get()


def _config(**changes: object) -> RunConfig:
    spec = DatasetSpec(path=str(DUMMY_1K), name="dummy", prompt_column="text_input")
    config = RunConfig(model="m", datasets=(spec,), max_output_tokens=8)
    return msgspec.structs.replace(config, **changes)


@pytest.mark.parametrize("salt", [True, False])
def test_leased_feed_sends_the_single_process_bytes(salt: bool) -> None:
    config = _config(salt=salt)
    dataset = load_dataset(config.datasets[0])
    single = RequestFeed.for_phase(dataset, config, "performance")
    seeds = config.seeds
    book = LeaseBook(
        shuffled_order(len(dataset), seeds.sample_index),
        Salter(seeds.salt_seed) if salt else None,
        limit=2500,
    )
    templates = build_body_templates(
        dataset, model="m", max_output_tokens=8, sampling=config.generation.as_dict(), salt=salt
    )
    channel = _Channel(book)
    feed = LeasedFeed(templates, channel, block=64, first=book.grant(64))
    for k in range(2500):
        got = feed.next_request()
        assert got == single.next_request()
        assert feed.last_k == k
        index, salt_text = book.query(k)
        assert prompt_of(dataset.samples[index], salt_text) == single.last_prompt
    assert feed.next_request() is None and feed.next_request() is None
    assert feed.waits == 0  # asked at half of each lease: never stalled
    assert set(channel.asked) == {64}


def test_a_stall_is_waited_for_and_counted() -> None:
    config = _config()
    dataset = load_dataset(config.datasets[0])
    templates = build_body_templates(dataset, model="m", salt=True)
    book = LeaseBook(shuffled_order(len(dataset), 1), Salter(2), limit=40)
    channel = _Channel(book, answer=False)  # asks go unanswered until a stall
    feed = LeasedFeed(templates, channel, block=16)
    issued = [feed.next_request() for _ in range(40)]
    assert all(item is not None for item in issued)
    assert feed.next_request() is None
    assert feed.waits == 4  # the empty start, then every lease ran dry once
    assert feed.wait_ns >= 0


def test_a_lease_with_an_unknown_sample_is_refused() -> None:
    templates = build_body_templates(load_dataset(_config().datasets[0]), model="m", salt=False)
    bad = Lease(0, array("q", [len(templates)]).tobytes())
    with pytest.raises(ValueError, match="out of range"):
        LeasedFeed(templates, _Channel(LeaseBook(iter([]), None, limit=0)), block=16, first=bad)


# Messages ---------------------------------------------------------------------------


def test_messages_round_trip() -> None:
    lease = Lease(5, array("q", [1, 2]).tobytes(), b"0123456789abcdef" * 2)
    for message in (Start(123, lease), Start(1, None), Grant(lease), Grant(None), Stop(True)):
        assert decode_for_engine(encode(message)) == message
    for reply in (Ask(16), Batch([], [], 0, 0)):
        assert decode_for_driver(encode(reply)) == reply
    with pytest.raises(msgspec.ValidationError):
        decode_for_engine(encode(Ask(1)))  # an engine's message is not the driver's


def test_a_batch_carries_the_latency_detail_of_its_records() -> None:
    gaps = TokenGaps(count=2, zero=1, sum_ns=900, min_ns=0, max_ns=900, buckets=b"\0" * 16)
    response = msgspec.structs.replace(
        NO_RESPONSE, t_first=10, t_first_content=40, t_second=10, gaps=gaps
    )
    record = RequestRecord(3, "s3", t_sched=1, t_issue=2, t_end=99, response=response)
    batch = decode_for_driver(encode(Batch([7], [record], 1, 0)))
    assert isinstance(batch, Batch) and batch.records == [record]
    assert batch.records[0].ttfot_ns == 38 and batch.records[0].response.gaps == gaps


# The verdict of a point on a Ray cluster -------------------------------------------


def _run_with(lags_ns: list[int], failure: str | None = None) -> EngineRun:
    totals = EngineTotals(
        lags_ns=array("q", lags_ns).tobytes(),
        cpu_ns=0,
        cpu_system_ns=0,
        client=ClientTotals(),
        issued=0,
        lease_waits=0,
        lease_wait_ns=0,
    )
    return EngineRun(
        t0_ns=0,
        concurrency=(1,),
        records=[],
        engine_of=array("q"),
        keys=array("q"),
        totals=[totals],
        pids=[1],
        granted=0,
        driver_cpu_ns=0,
        driver_cpu_system_ns=0,
        failure=failure,
    )


def _fit(rtt_ns: int = 20_000, drift_ppm: float = 0.0) -> ClockFit:
    return ClockFit(
        offset_ns=0.0, drift_ppm=drift_ppm, ref_ns=0, rtt_min_ns=rtt_ns, residual_max_ns=0.0,
        rounds=3,
    )  # fmt: skip


def test_duplicate_keys_counts_every_repeat() -> None:
    run = _run_with([])
    assert run.duplicate_keys() == 0
    for keys, repeats in (([3, 1, 2], 0), ([5, 5], 1), ([7, 1, 7, 2, 7, 1], 3), ([2**40] * 4, 3)):
        run = msgspec.structs.replace(run, keys=array("q", keys))
        assert run.duplicate_keys() == repeats == len(keys) - len(set(keys))


def test_the_verdict_is_the_worst_that_applies() -> None:
    calm = [1_000_000] * 100
    assert verdict(_run_with(calm), [_fit()]) == "ok"
    assert verdict(_run_with([20_000_000] * 100), [_fit()]) == "client-saturated"
    assert verdict(_run_with(calm), [_fit(rtt_ns=3_000_000)]) == "clock-suspect"
    assert verdict(_run_with(calm), [_fit(drift_ppm=-250.0)]) == "clock-suspect"
    assert verdict(_run_with([20_000_000] * 100), [_fit(rtt_ns=3_000_000)]) == "clock-suspect"
    assert verdict(_run_with(calm, failure="engine 0 was lost"), [_fit()]) == "node-failure"
    assert lag_p99_ns(b"") is None
    assert lag_p99_ns(array("q", range(1, 101)).tobytes()) == 99


def test_a_node_is_probed_at_the_address_the_cluster_knows_it_by() -> None:
    """Ray's node table names each node by the address it was started
    with; the clock responder binds there (issue 23: inside an actor,
    ``ray.util.get_node_ip_address()`` gives the interface address even
    for a cluster on loopback)."""
    from mlpe_fast.scale.ray_cluster import registered_address

    nodes = [
        {"NodeID": "a", "Alive": False, "NodeManagerAddress": "10.0.0.9"},
        {"NodeID": "b", "Alive": True, "NodeManagerAddress": "127.0.0.1"},
        {"NodeID": "a", "Alive": True, "NodeManagerAddress": "127.0.0.2"},
    ]
    assert registered_address(nodes, "b") == "127.0.0.1"
    assert registered_address(nodes, "a") == "127.0.0.2"  # the live entry, not the dead one
    assert registered_address(nodes, "c") is None
    assert registered_address([{"NodeID": "d", "NodeManagerAddress": ""}], "d") is None


def test_a_node_on_the_driver_s_host_is_probed_on_loopback() -> None:
    """Whatever address a node on this host registered with (Ray turns
    127.0.0.1 into the routable one), its clock probes stay on loopback;
    a node elsewhere is probed at its registered address."""
    from mlpe_fast.scale.ray_cluster import clock_bind_address, host_identity

    here = host_identity()
    assert here is not None  # Linux says
    assert clock_bind_address("192.0.2.2", here) == "127.0.0.1"
    assert clock_bind_address("fd00::2", here) == "::1"
    assert clock_bind_address("192.0.2.2", "another-boot-id") == "192.0.2.2"
    assert clock_bind_address("192.0.2.2", None) == "192.0.2.2"
