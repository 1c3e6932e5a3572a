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


class TextModelOutput(msgspec.Struct, frozen=True):
    output: Any
    reasoning: Any = None
    tool_calls: Any = None


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


def config(url: str, *, stream_all_chunks: bool = False, max_connections: int = -1) -> Any:
    return SimpleNamespace(
        endpoint_urls=[url],
        api_key=None,
        adapter=Adapter,
        stream_all_chunks=stream_all_chunks,
        max_connections=max_connections,
        insecure=False,
    )


def query(qid: str, stream: bool = True) -> Any:
    return SimpleNamespace(
        id=qid, data={"messages": [{"role": "user", "content": "hi"}], "stream": stream}, headers={}
    )


STREAM = http_response(
    [sse_event(chat_chunk(content=c)) for c in ("He", "l", "lo")]
    + [sse_event(chat_chunk(finish_reason="stop")), sse_event(b"[DONE]")]
)


def replay(response: bytes, bodies: list[bytes] | None = None) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            if bodies is not None:
                bodies.append(request.split(b"\r\n\r\n", 1)[1])
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

    execute = check_reference()
    ref = execute.HTTPEndpointClient
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
    original_client, original_session = execute.HTTPEndpointClient, execute.BenchmarkSession
    assert original_client is not EngineEndpointClient
    try:
        install(check_reference())
        assert execute.HTTPEndpointClient is EngineEndpointClient
        assert issubclass(execute.BenchmarkSession, original_session)
    finally:
        execute.HTTPEndpointClient, execute.BenchmarkSession = original_client, original_session


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


def test_report_says_whether_reference_tests_ran(record_property: Any) -> None:
    """Puts the reference's availability in the JUnit report (and -rs lists the skips)."""
    record_property("inference_endpoint_importable", json.dumps(HAVE_REFERENCE))
