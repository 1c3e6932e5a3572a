"""The client against small scripted servers on loopback: reuse, timeouts,
failures, cancellation.  Every request must end in exactly one record.

The servers here are deliberately crude (asyncio streams replaying canned
bytes) so that each test controls exactly what the endpoint does; the
simulated endpoint's own tests cover realistic streaming.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from mlpe_fast.engine import Client, ClientConfigError, RequestRecord
from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event
from tests.integration.scripted import read_request, serve

STREAM = http_response(
    [sse_event(chat_chunk(content=c)) for c in ("He", "llo")]
    + [sse_event(chat_chunk(finish_reason="stop")), sse_event(b"[DONE]")]
)
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def keep_alive_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await read_request(reader) is not None:
        writer.write(STREAM)
        await writer.drain()


async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    await asyncio.sleep(10)


Runner = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a test's coroutine on each event loop the engine supports."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run  # type: ignore[no-any-return]
    return asyncio.run


def test_request_returns_a_timed_record(run: Runner) -> None:
    async def main() -> None:
        async with serve(keep_alive_server) as url, Client(url) as client:
            records = [await client.request(BODY, sample_index=i) for i in range(3)]
            assert client.connections_opened == 1  # keep-alive reuse
        for i, record in enumerate(records):
            assert record.ok, record.error_message
            assert record.sample_index == i and len(record.sample_id) == 32
            assert record.response.content == "Hello"
            assert record.response.content_after_first == "llo"
            assert record.t_sched == record.t_issue
            assert record.t_issue <= record.response.t_head <= record.t_first  # type: ignore[operator]
            assert record.t_first <= record.t_done <= record.t_end  # type: ignore[operator]
            assert record.ttft_ns == record.t_first - record.t_issue  # type: ignore[operator]

    run(main())


def test_issue_callbacks_run_once_per_request_and_first_token_when_asked(run: Runner) -> None:
    async def main() -> None:
        done: list[RequestRecord] = []
        firsts: list[int] = []
        async with serve(keep_alive_server) as url, Client(url) as client:
            finished = asyncio.Event()

            def on_done(record: RequestRecord) -> None:
                done.append(record)
                if len(done) == 20:
                    finished.set()

            for i in range(20):
                client.issue(BODY, on_done, sample_index=i, on_first=lambda ex, t: firsts.append(t))
            await asyncio.wait_for(finished.wait(), 10)
            assert client.connections_opened <= 20
        assert sorted(r.sample_index for r in done) == list(range(20))
        assert all(r.ok for r in done)
        assert sorted(firsts) == sorted(r.t_first for r in done)  # type: ignore[type-var]

    run(main())


def test_connection_close_means_a_new_connection(run: Runner) -> None:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(http_response([sse_event(chat_chunk(content="a"))], transfer="close"))
        await writer.drain()

    async def main() -> None:
        async with serve(closing) as url, Client(url) as client:
            first = await client.request(BODY)
            second = await client.request(BODY)
            assert client.connections_opened == 2
        assert first.ok and second.ok and not first.response.keep_alive

    run(main())


def test_stale_keep_alive_connection_is_retried_once(run: Runner) -> None:
    async def answers_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Answers one request, then drops the connection when the next
        # arrives: an idle close racing the client's write.
        await read_request(reader)
        writer.write(STREAM)
        await writer.drain()
        await read_request(reader)

    async def main() -> None:
        async with serve(answers_once) as url, Client(url) as client:
            first = await client.request(BODY)
            second = await client.request(BODY)
        assert first.ok and first.retries == 0
        assert second.ok and second.retries == 1

    run(main())


def test_connect_error_is_a_record(run: Runner) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens once it is closed

    async def main() -> None:
        async with Client(f"http://127.0.0.1:{port}") as client:
            record = await client.request(BODY)
        assert record.error_class == "ConnectError"
        assert f"127.0.0.1:{port}" in (record.error_message or "")
        assert record.response.status == 0

    run(main())


def test_idle_timeout(run: Runner) -> None:
    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(STREAM[: STREAM.index(b"[DONE]")])
        await writer.drain()
        await asyncio.sleep(5)

    async def main() -> None:
        async with serve(stalls) as url, Client(url, idle_timeout=0.2) as client:
            record = await asyncio.wait_for(client.request(BODY), 5)
        assert record.error_class == "IdleTimeout"
        assert record.response.content == "Hello"  # what arrived is kept
        assert 0.2e9 <= record.t_end - record.t_issue < 2e9

    run(main())


def test_total_timeout(run: Runner) -> None:
    async def trickles(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for byte in STREAM:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.01)

    async def main() -> None:
        async with serve(trickles) as url, Client(url, total_timeout=0.3) as client:
            record = await asyncio.wait_for(client.request(BODY), 5)
        assert record.error_class == "TotalTimeout"

    run(main())


def test_close_mid_stream_is_incomplete(run: Runner) -> None:
    async def cuts(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(STREAM[:150])
        await writer.drain()

    async def main() -> None:
        async with serve(cuts) as url, Client(url) as client:
            record = await client.request(BODY)
        assert record.error_class == "IncompleteResponse"
        assert "closed before the response was complete" in (record.error_message or "")

    run(main())


def test_http_error_status(run: Runner) -> None:
    async def refuses(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            writer.write(
                http_response(
                    [b'{"error": {"message": "model not found"}}'],
                    status=404,
                    reason=b"Not Found",
                    content_type=b"application/json",
                    transfer="length",
                )
            )
            await writer.drain()

    async def main() -> None:
        async with serve(refuses) as url, Client(url) as client:
            records = [await client.request(BODY) for _ in range(2)]
            assert client.connections_opened == 1  # an error status keeps the connection
        for record in records:
            assert record.error_class == "HTTPStatusError"
            assert record.error_message == "HTTP 404: model not found"

    run(main())


def test_close_cancels_requests_in_flight(run: Runner) -> None:
    async def main() -> None:
        done: list[RequestRecord] = []
        async with serve(never_answers) as url:
            client = Client(url)
            client.open()
            for _ in range(3):
                client.issue(BODY, done.append)
            while client.connections_opened < 3:
                await asyncio.sleep(0.01)
            await client.aclose()
        assert [r.error_class for r in done] == ["Cancelled"] * 3

    run(main())


def test_connection_cap_queues_requests_in_order(run: Runner) -> None:
    async def main() -> None:
        done: list[RequestRecord] = []
        async with serve(keep_alive_server) as url, Client(url, max_connections=2) as client:
            finished = asyncio.Event()

            def on_done(record: RequestRecord) -> None:
                done.append(record)
                if len(done) == 12:
                    finished.set()

            for i in range(12):
                client.issue(BODY, on_done, sample_index=i)
            await asyncio.wait_for(finished.wait(), 10)
            assert client.connections_opened == 2  # never more than the cap
        assert all(r.ok for r in done)
        assert sorted(r.sample_index for r in done) == list(range(12))
        # waiting requests are written later: t_issue follows the queue
        issued = [r.t_issue for r in sorted(done, key=lambda r: r.sample_index)]
        assert issued[2:] >= issued[:2]

    run(main())


def test_cancelling_ends_waiting_requests_too(run: Runner) -> None:
    async def main() -> None:
        done: list[RequestRecord] = []
        async with serve(never_answers) as url:
            client = Client(url, max_connections=1)
            client.open()
            for _ in range(4):
                client.issue(BODY, done.append)
            while client.connections_opened < 1:
                await asyncio.sleep(0.01)
            await client.cancel_in_flight()
            await client.aclose()
        assert [r.error_class for r in done] == ["Cancelled"] * 4

    run(main())


@pytest.mark.parametrize(
    "url",
    ["ftp://x", "http://", "http://h:99999", "localhost:8000", "https://h:0x1"],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ClientConfigError):
        Client(url)


def test_bad_connection_cap_is_refused() -> None:
    with pytest.raises(ClientConfigError, match="max_connections"):
        Client("http://127.0.0.1:1", max_connections=0)


def test_bad_timeout_is_refused() -> None:
    with pytest.raises(ClientConfigError, match="idle_timeout"):
        Client("http://127.0.0.1:1", idle_timeout=0)
