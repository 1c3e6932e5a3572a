"""Several endpoints as one system (engine/replicas.py), against scripted
servers on loopback that count what they serve: every request goes to
exactly one, each record names it, the fewest-in-flight rule keeps a slow
replica at its share of the users, and an unreachable one is named."""

from __future__ import annotations

import asyncio
import socket

import pytest

from mlpe_fast.engine import Client, EndpointUnreachable, RequestRecord
from mlpe_fast.engine.replicas import Replicas, endpoint_shares
from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event
from mlpe_fast.wire.events import NO_RESPONSE
from tests.integration.scripted import read_request, serve

STREAM = http_response(
    [sse_event(chat_chunk(content=c)) for c in ("He", "llo")]
    + [sse_event(chat_chunk(finish_reason="stop")), sse_event(b"[DONE]")]
)
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


class Counting:
    """A keep-alive server that answers after ``delay_s`` and counts the
    requests it served and the most it held at once."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.served = 0
        self.holding = 0
        self.most_held = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            self.holding += 1
            self.most_held = max(self.most_held, self.holding)
            await asyncio.sleep(self.delay_s)
            self.holding -= 1
            self.served += 1
            writer.write(STREAM)
            await writer.drain()


async def closed_loop(replicas: Replicas, total: int, concurrency: int) -> list[RequestRecord]:
    """``total`` requests, ``concurrency`` in flight, the next sent from the
    completion of the last (a fixed-concurrency point's shape)."""
    records: list[RequestRecord] = []
    finished = asyncio.Event()
    sent = 0

    def on_done(record: RequestRecord) -> None:
        records.append(record)
        if len(records) == total:
            finished.set()
        else:
            send()

    def send() -> None:
        nonlocal sent
        if sent < total:
            sent += 1
            replicas.issue(BODY, on_done, sample_index=sent)

    for _ in range(concurrency):
        send()
    await asyncio.wait_for(finished.wait(), 30)
    return records


def test_equal_replicas_share_the_load_and_records_name_theirs() -> None:
    async def main() -> None:
        a, b = Counting(0.002), Counting(0.002)
        async with serve(a) as url_a, serve(b) as url_b:
            replicas = Replicas([Client(url_a), Client(url_b)])
            async with replicas:
                records = await closed_loop(replicas, 60, 4)
        assert all(r.ok for r in records)
        shares = endpoint_shares(records, [url_a, url_b])
        assert [s["issued"] for s in shares] == [a.served, b.served]
        assert a.served + b.served == 60
        assert min(a.served, b.served) >= 20  # fewest in flight: about half each
        assert len({r.sample_id for r in records}) == 60

    asyncio.run(main())


def test_a_slow_replica_holds_no_more_than_its_share_of_the_users() -> None:
    # Dealing in turn would pile the users up on the slow replica; fewest
    # in flight keeps C / N there, and the fast one serves more requests.
    async def main() -> None:
        fast, slow = Counting(0.001), Counting(0.03)
        async with serve(fast) as url_fast, serve(slow) as url_slow:
            replicas = Replicas([Client(url_fast), Client(url_slow)])
            async with replicas:
                records = await closed_loop(replicas, 80, 4)
        assert len(records) == 80 and all(r.ok for r in records)
        assert slow.most_held <= 2
        assert fast.served > 2 * slow.served
        shares = endpoint_shares(records, [url_fast, url_slow])
        assert shares[1] == {
            "url": url_slow,
            "issued": slow.served,
            "completed": slow.served,
            "failed": 0,
        }

    asyncio.run(main())


def test_an_unreachable_replica_is_named() -> None:
    async def main() -> None:
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
        async with serve(Counting(0)) as alive:
            replicas = Replicas([Client(alive), Client(dead, connect_timeout=2)])
            with pytest.raises(EndpointUnreachable) as info:
                await replicas.check_reachable()
        assert str(info.value).startswith(f"{dead}: ")

    asyncio.run(main())


def test_endpoint_shares_refuses_a_record_of_another_run() -> None:
    record = RequestRecord(
        sample_index=0,
        sample_id="x",
        t_sched=0,
        t_issue=0,
        t_end=0,
        response=NO_RESPONSE,
        endpoint=2,
    )
    with pytest.raises(ValueError, match="names endpoint 2"):
        endpoint_shares([record], ["http://a", "http://b"])


def test_a_conversations_turns_stay_on_one_replica() -> None:
    # Requests with the same headers (an agentic turn's X-Session-ID) go
    # where the first one went; the conversations still spread over both.
    async def main() -> None:
        a, b = Counting(0.001), Counting(0.001)
        async with serve(a) as url_a, serve(b) as url_b:
            replicas = Replicas([Client(url_a), Client(url_b)])
            async with replicas:
                records = []
                for turn in range(3):
                    turns = [
                        replicas.request(BODY, sample_index=c, headers={"X-Session-ID": f"c{c}"})
                        for c in range(6)
                    ]
                    records += [(turn, r) for r in await asyncio.gather(*turns)]
        where: dict[int, set[int]] = {}
        for _, record in records:
            assert record.ok
            where.setdefault(record.sample_index, set()).add(record.endpoint)
        assert all(len(replica) == 1 for replica in where.values())
        assert {next(iter(r)) for r in where.values()} == {0, 1}

    asyncio.run(main())
