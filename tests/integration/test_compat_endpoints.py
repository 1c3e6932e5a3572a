"""The reference-client look-alike and launcher (``mlpe_fast.compat``).

Contract tests (always run) drive :class:`EngineEndpointClient` against
scripted loopback servers with stand-in types shaped as the reference's
``core.types`` (QueryResult with a ``completed_at`` stamped at construction,
StreamChunk with ``metadata``, ErrorData, TextModelOutput), and check the
launcher's refusal.  Tests marked ``needs_reference`` use the installed
reference client (package inference-endpoint, Python >= 3.12) and are
skipped, with that reason, where it is not importable.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from mlpe_fast.compat.endpoints_client import (
    EngineEndpointClient,
    StampingPublisher,
    StampTable,
    split_endpoint,
    split_first,
)
from mlpe_fast.compat.endpoints_launcher import EXIT_REFUSED, SIGNATURES
from mlpe_fast.sim.stream import chat_chunk, chat_completion, http_response, sse_event
from tests.data_files import CHAR_TOKENIZER, DUMMY_1K
from tests.integration.scripted import Handler, read_request, serve

HAVE_REFERENCE = importlib.util.find_spec("inference_endpoint") is not None
needs_reference = pytest.mark.skipif(
    not HAVE_REFERENCE,
    reason="reference client not installed: module inference_endpoint "
    "(package inference-endpoint 0.1.0, Python >= 3.12) is not importable",
)
SRC = str(Path(__file__).resolve().parents[2] / "src")


# -- stand-ins shaped as the reference's core.types (dropin-seam.md section 4) --


class ErrorData(msgspec.Struct, frozen=True):
    error_type: str
    error_message: str


def merge_tool_calls(tool_calls: Any) -> Any:
    """The reference's ``core.types.merge_tool_calls`` (ea332753), verbatim in effect."""
    if not tool_calls:
        return None
    if not isinstance(tool_calls[0], list | tuple):
        return tool_calls
    merged: dict[int, dict[str, Any]] = {}
    for chunk in tool_calls:
        for partial in chunk:
            idx = partial.get("index", 0)
            call = merged.setdefault(idx, {"type": "function", "function": {"arguments": ""}})
            if partial.get("id"):
                call["id"] = partial["id"]
            if partial.get("type"):
                call["type"] = partial["type"]
            fn = partial.get("function") or {}
            if fn.get("name"):
                call["function"]["name"] = fn["name"]
            if fn.get("arguments"):
                call["function"]["arguments"] += fn["arguments"]
    return tuple(merged[i] for i in sorted(merged))


class TextModelOutput(msgspec.Struct, frozen=True):
    output: Any
    reasoning: Any = None
    tool_calls: Any = None

    def as_message_parts(self) -> tuple[str, Any, Any]:
        content = self.output if isinstance(self.output, str) else "".join(self.output)
        return content, self.reasoning, merge_tool_calls(self.tool_calls)


class StreamChunk(msgspec.Struct, frozen=True):
    id: str
    response_chunk: str = ""
    metadata: dict[str, Any] = {}


class QueryResult(msgspec.Struct, frozen=True):
    id: str
    response_output: Any = None
    metadata: dict[str, Any] = {}
    error: ErrorData | None = None
    completed_at: int | None = None

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "completed_at", time.monotonic_ns())


STAND_IN_TYPES = SimpleNamespace(
    ErrorData=ErrorData, TextModelOutput=TextModelOutput, StreamChunk=StreamChunk,
    QueryResult=QueryResult,
)  # fmt: skip


class Adapter:
    """Encodes a query as the reference's OpenAI adapter would (the body bytes are what count)."""

    @staticmethod
    def encode_query(query: Any) -> bytes:
        return msgspec.json.encode({"model": "m", **query.data})


def config(
    url: str,
    *,
    stream_all_chunks: bool = False,
    max_connections: int = -1,
    warmup_connections: int = 0,
) -> Any:
    return SimpleNamespace(
        endpoint_urls=[url],
        api_key=None,
        adapter=Adapter,
        stream_all_chunks=stream_all_chunks,
        max_connections=max_connections,
        insecure=False,
        warmup_connections=warmup_connections,
        max_concurrent_warmup_connects=128,
        min_required_connections=0,
    )


def query(qid: str, stream: bool = True, headers: dict[str, str] | None = None) -> Any:
    return SimpleNamespace(
        id=qid,
        data={"messages": [{"role": "user", "content": "hi"}], "stream": stream},
        headers=headers or {},
    )


STREAM = http_response(
    [sse_event(chat_chunk(content=c)) for c in ("He", "l", "lo")]
    + [sse_event(chat_chunk(finish_reason="stop")), sse_event(b"[DONE]")]
)


def replay(
    response: bytes,
    bodies: list[bytes] | None = None,
    heads: list[bytes] | None = None,
    connections: list[int] | None = None,
) -> Handler:
    """Answers every request with ``response``; records bodies, heads, and
    one entry per accepted connection."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if connections is not None:
            connections.append(1)
        while (request := await read_request(reader)) is not None:
            head, body = request.split(b"\r\n\r\n", 1)
            if bodies is not None:
                bodies.append(body)
            if heads is not None:
                heads.append(head)
            writer.write(response)
            await writer.drain()

    return handler


def serve_chat(handler: Handler) -> Any:
    """A scripted endpoint; yields its chat completions URL (the reference's form)."""
    return serve(handler, "/v1/chat/completions")


async def collect(client: EngineEndpointClient, results: int) -> list[Any]:
    """Everything recv() delivers until ``results`` QueryResults have arrived."""
    items: list[Any] = []
    while sum(isinstance(item, QueryResult) for item in items) < results:
        items.append(await asyncio.wait_for(client.recv(), 5))
    return items


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def fresh_stamps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EngineEndpointClient, "stamps", StampTable())


# -- pure logic -----------------------------------------------------------------


def test_split_endpoint_keeps_the_route() -> None:
    assert split_endpoint("http://h:8000/v1/chat/completions") == (
        "http://h:8000",
        "/v1/chat/completions",
    )
    assert split_endpoint("https://h/p/v1/completions?x=1") == (
        "https://h",
        "/p/v1/completions?x=1",
    )


def test_split_first_matches_the_accumulators_first_rest_shape() -> None:
    assert split_first("Hello", "llo") == ["He", "llo"]
    assert split_first("Hi", "") == ["Hi"]
    assert split_first("", "") == []


def test_stamping_publisher_rewrites_only_recv_records_fifo() -> None:
    class Record(msgspec.Struct, frozen=True, kw_only=True):
        event_type: str
        timestamp_ns: int
        sample_uuid: str

    published: list[Record] = []
    inner = SimpleNamespace(publish=published.append, bind_address="ipc://x")
    stamps = StampTable()
    stamps.push("a", 10)
    stamps.push("a", 20)
    proxy = StampingPublisher(inner, stamps, frozenset({"recv_first", "recv_non_first"}))
    proxy.publish(Record(event_type="issued", timestamp_ns=1, sample_uuid="a"))
    proxy.publish(Record(event_type="recv_first", timestamp_ns=2, sample_uuid="a"))
    proxy.publish(Record(event_type="recv_non_first", timestamp_ns=3, sample_uuid="a"))
    proxy.publish(Record(event_type="recv_non_first", timestamp_ns=4, sample_uuid="a"))
    proxy.publish(Record(event_type="recv_first", timestamp_ns=5, sample_uuid="b"))
    assert [r.timestamp_ns for r in published] == [1, 10, 20, 4, 5]
    assert proxy.bind_address == "ipc://x"
    assert len(stamps) == 0


def test_surface_matches_the_seam() -> None:
    """create(config, loop), issue(query), async recv(), poll, drain, shutdown, shutdown_async."""
    create = inspect.signature(EngineEndpointClient.create)
    assert list(create.parameters) == ["config", "loop"]
    assert inspect.iscoroutinefunction(EngineEndpointClient.create)
    assert list(inspect.signature(EngineEndpointClient.issue).parameters) == ["self", "query"]
    assert inspect.iscoroutinefunction(EngineEndpointClient.recv)
    assert inspect.iscoroutinefunction(EngineEndpointClient.shutdown_async)
    for name in ("poll", "drain", "shutdown"):
        assert not inspect.iscoroutinefunction(getattr(EngineEndpointClient, name))


# -- against scripted servers, with stand-in types -----------------------------


def test_streaming_first_chunk_then_one_result_with_engine_stamps() -> None:
    bodies: list[bytes] = []

    async def scenario() -> list[Any]:
        async with serve_chat(replay(STREAM, bodies)) as url:
            client = EngineEndpointClient(
                config(url), asyncio.get_running_loop(), types=STAND_IN_TYPES
            )
            q = query("q1")
            client.issue(q)
            items = await collect(client, 1)
            await client.shutdown_async()
            assert await client.recv() is None
            return items

    items = run(scenario())
    assert [type(item) for item in items] == [StreamChunk, QueryResult]
    first, result = items
    assert first.metadata == {"first_chunk": True} and first.id == "q1"
    assert result.error is None
    assert result.response_output.output == ["He", "llo"]
    assert result.metadata["finish_reason"] == "stop"
    # body bytes are the adapter's, unchanged
    assert bodies == [Adapter.encode_query(query("q1"))]
    # RECV_FIRST stamp queued for the publisher; COMPLETE is the engine's t_done
    t_first = EngineEndpointClient.stamps.take("q1")
    assert t_first is not None and t_first <= result.completed_at <= time.monotonic_ns()


def test_stream_all_chunks_gives_one_non_first_chunk_per_later_event() -> None:
    async def scenario() -> list[Any]:
        async with serve_chat(replay(STREAM)) as url:
            client = EngineEndpointClient(
                config(url, stream_all_chunks=True),
                asyncio.get_running_loop(),
                types=STAND_IN_TYPES,
            )
            client.issue(query("q1"))
            items = await collect(client, 1)
            await client.shutdown_async()
            return items

    items = run(scenario())
    assert [item.metadata.get("first_chunk") for item in items[:-1]] == [True, False, False]
    assert isinstance(items[-1], QueryResult)
    stamps = [EngineEndpointClient.stamps.take("q1") for _ in range(3)]
    assert None not in stamps and stamps == sorted(stamps)
    assert stamps[-1] <= items[-1].completed_at  # type: ignore[operator]


def test_non_streaming_result() -> None:
    body = chat_completion(content="Hello there")
    response = http_response([body], content_type=b"application/json", transfer="length")

    async def scenario() -> list[Any]:
        async with serve_chat(replay(response)) as url:
            client = EngineEndpointClient(
                config(url), asyncio.get_running_loop(), types=STAND_IN_TYPES
            )
            client.issue(query("n1", stream=False))
            items = await collect(client, 1)
            await client.shutdown_async()
            return items

    (result,) = run(scenario())
    assert result.error is None and result.response_output.output == "Hello there"


def test_http_error_status_maps_to_error_data() -> None:
    response = http_response([b"overloaded"], status=503, reason=b"Busy", transfer="length")

    async def scenario() -> list[Any]:
        async with serve_chat(replay(response)) as url:
            client = EngineEndpointClient(
                config(url), asyncio.get_running_loop(), types=STAND_IN_TYPES
            )
            client.issue(query("e1"))
            items = await collect(client, 1)
            await client.shutdown_async()
            return items

    (result,) = run(scenario())
    assert result.response_output is None
    assert result.error.error_type == "error"
    assert result.error.error_message.startswith("HTTP 503")


def test_refused_connection_gives_exactly_one_error_result_per_query() -> None:
    async def scenario() -> list[Any]:
        async with serve_chat(replay(STREAM)) as url:
            pass  # closed: nothing listens on that port any more
        client = EngineEndpointClient(config(url), asyncio.get_running_loop(), types=STAND_IN_TYPES)
        for i in range(5):
            client.issue(query(f"r{i}"))
        items = await collect(client, 5)
        await asyncio.sleep(0.05)
        assert client.poll() is None
        await client.shutdown_async()
        return items

    items = run(scenario())
    assert sorted(item.id for item in items) == [f"r{i}" for i in range(5)]
    assert all(isinstance(item, QueryResult) and item.error is not None for item in items)


def test_one_result_per_query_and_first_chunk_before_result_under_load() -> None:
    async def scenario() -> list[Any]:
        async with serve_chat(replay(STREAM)) as url:
            client = EngineEndpointClient(
                config(url, max_connections=4), asyncio.get_running_loop(), types=STAND_IN_TYPES
            )
            for i in range(40):
                client.issue(query(f"c{i}"))
            items = await collect(client, 40)
            await asyncio.sleep(0.05)
            items.extend(client.drain())
            await client.shutdown_async()
            return items

    items = run(scenario())
    results = [item for item in items if isinstance(item, QueryResult)]
    assert sorted(r.id for r in results) == sorted(f"c{i}" for i in range(40))
    seen_first: set[str] = set()
    for item in items:
        if isinstance(item, StreamChunk):
            seen_first.add(item.id)
        else:
            assert item.id in seen_first, "a result arrived before its first chunk"


def test_issue_never_raises_an_encoding_failure_becomes_an_error_result() -> None:
    class Broken:
        @staticmethod
        def encode_query(query: Any) -> bytes:
            raise ValueError("cannot encode")

    async def scenario() -> list[Any]:
        async with serve_chat(replay(STREAM)) as url:
            cfg = config(url)
            cfg.adapter = Broken
            client = EngineEndpointClient(cfg, asyncio.get_running_loop(), types=STAND_IN_TYPES)
            client.issue(query("b1"))
            items = await collect(client, 1)
            await client.shutdown_async()
            return items

    (result,) = run(scenario())
    assert result.error.error_type == "ValueError"


# -- tool calls ------------------------------------------------------------------

WEATHER = {"index": 0, "id": "call_1", "type": "function",
           "function": {"name": "get_weather", "arguments": ""}}  # fmt: skip
TOOL_EVENTS = [
    chat_chunk(role="assistant", content=""),  # a role-only delta: not content-bearing
    chat_chunk(tool_calls=[WEATHER]),
    chat_chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"city":'}}]),
    chat_chunk(tool_calls=[{"index": 0, "function": {"arguments": ' "Paris"}'}}]),
    chat_chunk(finish_reason="tool_calls"),
]
TIME = {"index": 1, "id": "call_2", "type": "function",
        "function": {"name": "get_time", "arguments": "{}"}}  # fmt: skip
MIXED_EVENTS = [
    chat_chunk(content="Let me"),
    chat_chunk(content=" check."),
    chat_chunk(tool_calls=[WEATHER]),
    chat_chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}]),
    chat_chunk(tool_calls=[TIME]),
    chat_chunk(finish_reason="tool_calls"),
]


def sse_stream(events: list[bytes]) -> bytes:
    return http_response([sse_event(e) for e in events] + [sse_event(b"[DONE]")])


def tool_result(events: list[bytes], stream_all_chunks: bool = False) -> list[Any]:
    async def scenario() -> list[Any]:
        async with serve_chat(replay(sse_stream(events))) as url:
            client = EngineEndpointClient(
                config(url, stream_all_chunks=stream_all_chunks),
                asyncio.get_running_loop(),
                types=STAND_IN_TYPES,
            )
            client.issue(query("t1"))
            items = await collect(client, 1)
            await client.shutdown_async()
            return items

    return run(scenario())  # type: ignore[no-any-return]


def test_a_pure_tool_call_response_fires_the_first_chunk_and_carries_the_calls() -> None:
    first, result = tool_result(TOOL_EVENTS)
    assert isinstance(first, StreamChunk) and first.metadata == {"first_chunk": True}
    output = result.response_output
    assert output.output in ((), [])
    merged = merge_tool_calls(output.tool_calls)
    assert merged == (
        {"type": "function", "id": "call_1",
         "function": {"arguments": '{"city": "Paris"}', "name": "get_weather"}},
    )  # fmt: skip
    assert result.metadata["tool_calls"] == list(merged)
    assert result.metadata["finish_reason"] == "tool_calls"
    assert result.metadata["first_chunk"] is False
    # The reference drops the first chunk of a tool-call-first response for
    # its TPOT count: what is left is what came after the first event.
    assert merge_tool_calls(output.tool_calls[1:]) == (
        {"type": "function", "function": {"arguments": '{"city": "Paris"}'}},
    )
    # RECV_FIRST is the tool-call event's stamp
    t_first = EngineEndpointClient.stamps.take("t1")
    assert t_first is not None and t_first <= result.completed_at


def test_content_then_tool_calls_keeps_both() -> None:
    first, result = tool_result(MIXED_EVENTS)
    assert first.metadata == {"first_chunk": True}
    output = result.response_output
    assert list(output.output) == ["Let me", " check."]
    assert [call["function"]["name"] for call in result.metadata["tool_calls"]] == [
        "get_weather",
        "get_time",
    ]
    assert result.metadata["tool_calls"][1]["id"] == "call_2"
    assert result.metadata["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'


def test_non_streaming_tool_calls_as_the_reference_adapter_keeps_them() -> None:
    call = {"id": "call_9", "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": 1}'}}  # fmt: skip
    doc = {
        "id": "x", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
    }  # fmt: skip
    response = http_response(
        [msgspec.json.encode(doc)], content_type=b"application/json", transfer="length"
    )

    async def scenario() -> list[Any]:
        async with serve_chat(replay(response)) as url:
            client = EngineEndpointClient(
                config(url), asyncio.get_running_loop(), types=STAND_IN_TYPES
            )
            client.issue(query("n2", stream=False))
            items = await collect(client, 1)
            await client.shutdown_async()
            return items

    (result,) = run(scenario())
    assert result.error is None
    assert result.response_output.output == ""
    assert result.response_output.tool_calls == (call,)
    assert result.metadata == {"finish_reason": "tool_calls", "tool_calls": [call]}


# -- per-query headers ---------------------------------------------------------


def test_query_headers_go_on_that_request_only() -> None:
    heads: list[bytes] = []

    async def scenario() -> list[Any]:
        async with serve_chat(replay(STREAM, heads=heads)) as url:
            client = EngineEndpointClient(
                config(url, max_connections=1), asyncio.get_running_loop(), types=STAND_IN_TYPES
            )
            client.issue(query("h1", headers={"X-Session-Id": "conv-7", "x-turn": "2"}))
            items = await collect(client, 1)
            client.issue(query("h2"))
            items += await collect(client, 1)
            await client.shutdown_async()
            return items

    run(scenario())
    with_headers, without = (head.split(b"\r\n") for head in heads)
    assert with_headers[0] == b"POST /v1/chat/completions HTTP/1.1"
    # after the client's own fields, before Content-Length (the reference's place)
    assert with_headers[-3:-1] == [b"X-Session-Id: conv-7", b"x-turn: 2"]
    assert with_headers[-1].startswith(b"Content-Length: ")
    assert not any(b"conv-7" in line or b"x-turn" in line for line in without)


@pytest.mark.parametrize(
    "headers",
    [{"X-Evil": "a\r\nHost: other"}, {"Content-Length": "1"}, {"bad name": "v"}],
)
def test_a_header_that_cannot_be_sent_is_an_error_result_and_nothing_is_sent(
    headers: dict[str, str],
) -> None:
    heads: list[bytes] = []

    async def scenario() -> list[Any]:
        async with serve_chat(replay(STREAM, heads=heads)) as url:
            client = EngineEndpointClient(
                config(url), asyncio.get_running_loop(), types=STAND_IN_TYPES
            )
            client.issue(query("bad", headers=headers))
            items = await collect(client, 1)
            await client.shutdown_async()
            return items

    (result,) = run(scenario())
    assert result.error.error_type == "ClientConfigError"
    assert "header" in result.error.error_message
    assert heads == []


def test_request_targets_frame_their_own_fields_for_both_protocols() -> None:
    from mlpe_fast.engine.framing import RequestFraming

    framing = RequestFraming("http", "h", 8000, "/p", api_key="k")
    target = framing.target("/v1/chat/completions", {"X-Session-Id": "c1"})
    assert target == "/v1/chat/completions"  # the path, everywhere else
    assert framing.target("/v1/chat/completions", {}) is not target  # no fields: the path
    own = framing.h1(b"{}", target)
    plain = framing.h1(b"{}", "/v1/chat/completions")
    assert own == plain.replace(b"Content-Length", b"X-Session-Id: c1\r\nContent-Length")
    assert framing.h1(b"{}", "/v1/chat/completions") == plain  # the cache is untouched
    fields = framing.h2(target, 2)
    assert fields == [*framing.h2("/v1/chat/completions", 2)[:-1],
                      (b"x-session-id", b"c1"), (b"content-length", b"2")]  # fmt: skip
    with pytest.raises(ValueError, match="set by the client"):
        framing.target("/x", {"host": "other"})


def test_per_request_headers_over_http2() -> None:
    from mlpe_fast.engine import Client, ClientConfigError
    from mlpe_fast.sim.config import SimConfig
    from mlpe_fast.sim.server import SimServer

    async def scenario(port: int) -> Any:
        async with Client(f"http://127.0.0.1:{port}", http2=True) as client:
            body = {"model": "mlpe-sim", "messages": [{"role": "user", "content": "hi"}],
                    "stream": True, "max_completion_tokens": 4}  # fmt: skip
            record = await client.request(body, headers={"X-Session-Id": "conv-1"})
            with pytest.raises(ClientConfigError):
                client.issue(body, lambda _r: None, headers={"connection": "close"})
            return record, client.http2_connections

    with SimServer.start_in_thread(SimConfig(http2=True)) as server:
        record, h2 = run(scenario(server.port))
    assert h2 == 1
    assert record.ok, record.error_message
    assert record.response.content


# -- warm-up connections ---------------------------------------------------------


def warmed(cfg_options: dict[str, Any], queries: int = 0) -> tuple[int, int, int]:
    """(warm_up's count, connections accepted before any query, after ``queries``)."""
    connections: list[int] = []

    async def scenario() -> tuple[int, int, int]:
        async with serve_chat(replay(STREAM, connections=connections)) as url:
            client = await create_with_stand_ins(config(url, **cfg_options))
            await asyncio.sleep(0.05)  # let the server's accept callbacks run
            before = len(connections)
            for i in range(queries):  # one at a time: each finds a warm connection
                client.issue(query(f"w{i}"))
                await collect(client, 1)
            await client.shutdown_async()
            return client.warmed, before, len(connections)

    return run(scenario())  # type: ignore[no-any-return]


async def create_with_stand_ins(cfg: Any) -> Any:
    """``create`` with the stand-in types: a failed warm-up closes the client."""
    client = EngineEndpointClient(cfg, asyncio.get_running_loop(), types=STAND_IN_TYPES)
    try:
        client.warmed = await client.warm_up()  # type: ignore[attr-defined]
    except BaseException:
        await client.shutdown_async()
        raise
    return client


def test_warmup_connections_are_open_before_the_first_query() -> None:
    count, before, after = warmed({"warmup_connections": 3, "max_connections": 8}, queries=3)
    assert (count, before, after) == (3, 3, 3)


def test_warmup_auto_is_half_the_pool_and_zero_is_none() -> None:
    assert warmed({"warmup_connections": -1, "max_connections": 8})[:2] == (4, 4)
    assert warmed({"warmup_connections": 0, "max_connections": 8})[:2] == (0, 0)


def test_warmup_beyond_max_connections_or_unreachable_is_a_clear_error() -> None:
    async def too_many() -> None:
        async with serve_chat(replay(STREAM)) as url:
            await create_with_stand_ins(config(url, warmup_connections=9, max_connections=8))

    with pytest.raises(ValueError, match="exceeds --max-connections"):
        run(too_many())

    async def unreachable() -> None:
        async with serve_chat(replay(STREAM)) as url:
            pass
        await create_with_stand_ins(config(url, warmup_connections=2))

    with pytest.raises(ConnectionError, match="0/2 connections"):
        run(unreachable())


def test_engine_warm_up_over_both_protocols_and_the_cap() -> None:
    """Client.warm_up: the warmed connections serve the next requests (no
    new connect), never more than max_connections, over HTTP/1.1 and HTTP/2."""
    from mlpe_fast.engine import Client
    from mlpe_fast.sim.config import SimConfig
    from mlpe_fast.sim.server import SimServer

    body = {"model": "mlpe-sim", "messages": [{"role": "user", "content": "hi"}],
            "stream": True, "max_completion_tokens": 4}  # fmt: skip

    async def scenario(port: int, http2: bool) -> tuple[int, int, bool]:
        url = f"http://127.0.0.1:{port}"
        async with Client(url, http2=http2, max_connections=3) as client:
            warmed = await client.warm_up(5, concurrency=2)
            records = [await client.request(body) for _ in range(3)]
            return warmed, client.connections_opened, all(r.ok for r in records)

    with SimServer.start_in_thread(SimConfig(http2=True)) as server:
        assert run(scenario(server.port, http2=False)) == (3, 3, True)
        assert run(scenario(server.port, http2=True)) == (3, 3, True)


# -- the probe command's usage: a loop of its own --------------------------------


def test_own_loop_mode_serves_a_synchronous_caller() -> None:
    """probe: ``HTTPEndpointClient(config)``, ``issue`` from the caller's
    thread, ``recv`` run on ``client.loop``, ``shutdown()`` to finish."""

    async def scenario() -> list[Any]:
        async with serve_chat(replay(STREAM)) as url:
            client = await asyncio.to_thread(
                EngineEndpointClient, config(url), None, types=STAND_IN_TYPES
            )
            assert client.loop is not asyncio.get_running_loop()
            for i in range(3):
                client.issue(query(f"p{i}", stream=False))
            results = []
            while len(results) < 3:
                future = asyncio.run_coroutine_threadsafe(client.recv(), client.loop)
                item = await asyncio.wait_for(asyncio.wrap_future(future), 5)
                if isinstance(item, QueryResult):
                    results.append(item)
            await asyncio.to_thread(client.shutdown)
            assert client.loop.is_closed()
            return results

    results = run(scenario())
    assert sorted(r.id for r in results) == ["p0", "p1", "p2"]
    assert all(r.error is None for r in results)


# -- the launcher without the reference ----------------------------------------


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": SRC, **(env or {})},
    )


def test_importing_compat_does_not_import_or_patch_the_reference() -> None:
    code = (
        "import sys, mlpe_fast.compat.endpoints_client, mlpe_fast.compat.endpoints_launcher, "
        "mlpe_fast.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith('inference_endpoint')))"
    )
    done = _python("-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(HAVE_REFERENCE, reason="the reference client is installed here")
@pytest.mark.parametrize(
    "command", [["-m", "mlpe_fast.compat.endpoints"], ["-m", "mlpe_fast", "endpoints"]]
)
def test_launcher_refuses_in_one_line_without_the_reference(command: list[str]) -> None:
    done = _python(*command, "benchmark", "offline", "--help")
    assert done.returncode == EXIT_REFUSED
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mlpe-fast endpoints: refused:")
    assert "inference-endpoint" in lines[0]


def test_cli_passes_every_argument_through_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlpe_fast import cli
    from mlpe_fast.compat import endpoints_launcher

    seen: list[list[str]] = []
    monkeypatch.setattr(endpoints_launcher, "main", lambda argv: seen.append(list(argv)) or 7)
    argv = ["endpoints", "benchmark", "online", "--help", "-x", "--", "--version"]
    assert cli.main(argv) == 7
    assert seen == [argv[1:]]


# -- with the reference client --------------------------------------------------


@needs_reference
def test_reference_seam_matches_what_the_launcher_patches() -> None:
    from mlpe_fast.compat.endpoints_launcher import check_reference

    execute, probe = check_reference()
    ref = execute.HTTPEndpointClient
    assert probe.HTTPEndpointClient is ref
    ours_init = list(inspect.signature(EngineEndpointClient.__init__).parameters)
    assert ours_init[:3] == list(inspect.signature(ref.__init__).parameters)  # probe's form
    for name in ("create", "issue", "recv", "poll", "drain", "shutdown", "shutdown_async"):
        theirs = inspect.signature(getattr(ref, name))
        ours = inspect.signature(getattr(EngineEndpointClient, name))
        assert list(ours.parameters) == list(theirs.parameters), name
        assert inspect.iscoroutinefunction(getattr(ref, name)) == inspect.iscoroutinefunction(
            getattr(EngineEndpointClient, name)
        ), name
    assert set(SIGNATURES) >= {"HTTPEndpointClient.create", "BenchmarkSession.__init__"}


@needs_reference
def test_install_patches_only_when_asked() -> None:
    import importlib

    from mlpe_fast.compat.endpoints_launcher import check_reference, install

    execute = importlib.import_module("inference_endpoint.commands.benchmark.execute")
    probe = importlib.import_module("inference_endpoint.commands.probe")
    original_client, original_session = execute.HTTPEndpointClient, execute.BenchmarkSession
    assert original_client is not EngineEndpointClient
    assert probe.HTTPEndpointClient is original_client
    try:
        install(*check_reference())
        assert execute.HTTPEndpointClient is EngineEndpointClient
        assert probe.HTTPEndpointClient is EngineEndpointClient
        assert issubclass(execute.BenchmarkSession, original_session)
    finally:
        execute.HTTPEndpointClient, execute.BenchmarkSession = original_client, original_session
        probe.HTTPEndpointClient = original_client


@needs_reference
def test_with_the_reference_types_and_adapter() -> None:
    from inference_endpoint.core.types import (
        Query,
    )
    from inference_endpoint.core.types import (
        QueryResult as RefResult,
    )
    from inference_endpoint.core.types import (
        StreamChunk as RefChunk,
    )
    from inference_endpoint.endpoint_client.config import HTTPClientConfig

    bodies: list[bytes] = []

    async def scenario() -> tuple[list[Any], Any, bytes]:
        async with serve_chat(replay(STREAM, bodies)) as url:
            cfg = HTTPClientConfig(endpoint_urls=[url], num_workers=1)
            client = await EngineEndpointClient.create(cfg, asyncio.get_running_loop())
            q = Query(
                data={"prompt": "hi", "model": "m", "stream": True, "max_completion_tokens": 8}
            )
            expected = cfg.adapter.encode_query(q)
            client.issue(q)
            items: list[Any] = []
            while not any(isinstance(item, RefResult) for item in items):
                items.append(await asyncio.wait_for(client.recv(), 5))
            await client.shutdown_async()
            return items, q, expected

    items, q, expected = run(scenario())
    assert [type(item) for item in items] == [RefChunk, RefResult]
    assert items[0].metadata["first_chunk"] is True
    result = items[1]
    assert result.id == q.id and result.error is None
    assert bodies == [expected]
    t_first = EngineEndpointClient.stamps.take(q.id)
    assert t_first is not None and t_first <= result.completed_at


@needs_reference
def test_launcher_hands_over_to_the_reference_cli() -> None:
    done = _python("-m", "mlpe_fast.compat.endpoints", "--help")
    assert done.returncode == 0, done.stderr
    assert "benchmark" in done.stdout
    # the reference's own usage error, not a refusal
    bad = _python("-m", "mlpe_fast", "endpoints", "no-such-command")
    assert bad.returncode != 0
    assert "refused" not in bad.stderr


def reference_accumulate(events: list[bytes]) -> Any:
    """The reference's own streaming result for ``events``: its adapter's
    SSE decoding into its accumulator, as its worker does."""
    from inference_endpoint.endpoint_client.config import HTTPClientConfig

    cfg = HTTPClientConfig(endpoint_urls=["http://127.0.0.1:1/v1/chat/completions"], num_workers=1)
    accumulator = cfg.accumulator("r1", False)
    chunks = [accumulator.add_chunk(cfg.adapter.decode_sse_message(e)) for e in events]
    return [c for c in chunks if c is not None], accumulator.get_final_output()


@needs_reference
@pytest.mark.parametrize("events", [TOOL_EVENTS, MIXED_EVENTS], ids=["tool-first", "content-first"])
def test_tool_call_results_match_the_reference_accumulator(events: list[bytes]) -> None:
    from inference_endpoint.core.types import Query
    from inference_endpoint.core.types import StreamChunk as RefChunk
    from inference_endpoint.endpoint_client.config import HTTPClientConfig

    async def scenario() -> list[Any]:
        async with serve_chat(replay(sse_stream(events))) as url:
            cfg = HTTPClientConfig(endpoint_urls=[url], num_workers=1, warmup_connections=0)
            client = await EngineEndpointClient.create(cfg, asyncio.get_running_loop())
            client.issue(Query(id="r1", data={"prompt": "hi", "model": "m", "stream": True}))
            items = [await asyncio.wait_for(client.recv(), 5) for _ in range(2)]
            await client.shutdown_async()
            return items

    first, ours = run(scenario())
    their_chunks, theirs = reference_accumulate(events)
    assert isinstance(first, RefChunk) and first.metadata == their_chunks[0].metadata
    a, b = ours.response_output, theirs.response_output
    assert a.output == b.output and a.reasoning == b.reasoning
    assert a.as_message_parts() == b.as_message_parts()
    assert a.text_after_first_chunk() == b.text_after_first_chunk()  # the TPOT count
    assert a.as_message_parts_after_first_chunk() == b.as_message_parts_after_first_chunk()
    assert str(a) == str(b)  # what accuracy scoring reads
    assert ours.metadata == theirs.metadata


@needs_reference
def test_query_headers_with_the_reference_query() -> None:
    from inference_endpoint.core.types import Query, QueryResult
    from inference_endpoint.endpoint_client.config import HTTPClientConfig

    heads: list[bytes] = []

    async def scenario() -> None:
        async with serve_chat(replay(STREAM, heads=heads)) as url:
            cfg = HTTPClientConfig(endpoint_urls=[url], num_workers=1, warmup_connections=0)
            client = await EngineEndpointClient.create(cfg, asyncio.get_running_loop())
            client.issue(Query(data={"prompt": "hi", "model": "m", "stream": True},
                               headers={"X-Conversation-Id": "c-42"}))  # fmt: skip
            while not isinstance(await asyncio.wait_for(client.recv(), 5), QueryResult):
                pass
            await client.shutdown_async()

    run(scenario())
    (head,) = heads
    assert b"\r\nX-Conversation-Id: c-42\r\nContent-Length: " in head


@pytest.fixture(scope="module")
def sim_url() -> Any:
    from mlpe_fast.demo import simulated_endpoint

    flags = ("--ttft-ms", "5", "--itl-ms", "0.5", "--output-len", "8", "--output-len-dist", "fixed")
    with simulated_endpoint(flags) as url:
        yield url


@needs_reference
def test_probe_through_the_launcher_uses_the_engine(sim_url: str) -> None:
    done = _python(
        "-m", "mlpe_fast.compat.endpoints", "probe",
        "--endpoints", sim_url, "--model", "mlpe-sim", "--requests", "5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    log = done.stdout + done.stderr
    assert "Completed: 5/5 successful" in log
    # the reference's client logs its worker set-up; the look-alike has none
    assert "EndpointClient initialized" not in log


@needs_reference
def test_benchmark_through_the_launcher_with_warmup(sim_url: str, tmp_path: Path) -> None:
    report = tmp_path / "report"
    done = _python(
        "-m", "mlpe_fast.compat.endpoints", "benchmark", "online",
        "--endpoints", sim_url, "--model", "mlpe-sim",
        "--tokenizer", str(CHAR_TOKENIZER),
        "--dataset", f"{DUMMY_1K},parser.prompt=text_input",
        "--no-cpu-affinity", "--workers", "1", "--load-pattern", "concurrency",
        "--concurrency", "4", "--num-samples", "40", "--duration", "0",
        "--client.warmup-connections", "4", "--max-connections", "4",
        "--report-dir", str(report), "-v",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in (report / "events.jsonl").read_text().splitlines()]
    stamps: dict[str, dict[str, int]] = {}
    for event in events:
        if event["sample_uuid"]:
            stamps.setdefault(event["sample_uuid"], {})[event["event_type"]] = event["timestamp_ns"]
    assert len(stamps) == 40
    for row in stamps.values():
        assert row["sample.issued"] <= row["sample.recv_first"] <= row["sample.complete"]
    summary = json.loads((report / "performance" / "result_summary.json").read_text())
    assert summary["n_samples_completed"] == 40 and summary["n_samples_failed"] == 0


def test_report_says_whether_reference_tests_ran(record_property: Any) -> None:
    """Puts the reference's availability in the JUnit report (and -rs lists the skips)."""
    record_property("inference_endpoint_importable", json.dumps(HAVE_REFERENCE))
