"""A look-alike of the reference client's ``HTTPEndpointClient`` on mlpe-fast's engine.

:class:`EngineEndpointClient` takes the reference's ``HTTPClientConfig`` as
given and offers the same surface (``create(config, loop)``, ``issue``,
``recv``, ``poll``, ``drain``, ``shutdown``, ``shutdown_async``).  It runs in
the LoadGen process, on the session's event loop:

* request bodies are built by the reference's own adapter
  (``config.adapter.encode_query``), so they are byte-identical;
* every query gets exactly one ``QueryResult``; failures carry ``ErrorData``;
* a ``StreamChunk(metadata={"first_chunk": True})`` is delivered at the
  engine's first-token callback, before the query's result; with
  ``stream_all_chunks`` one more chunk per later content-bearing event is
  delivered just before the result;
* ``QueryResult.completed_at`` is the engine's ``t_done``;
* the engine's RECV_FIRST / RECV_NON_FIRST stamps are kept in a FIFO per
  query id; :class:`StampingPublisher` (installed by the launcher around the
  session's event publisher) swaps them into the session's RECV_* records.

The reference's types are imported when a client is created, never at import.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from itertools import cycle
from typing import Any
from urllib.parse import urlsplit

from ..engine.client import Client
from ..engine.record import RequestRecord

REFERENCE_MISSING = (
    "the reference client (package inference-endpoint, module inference_endpoint) is not installed"
)


def reference_types() -> Any:
    """The reference's ``core.types`` module; ImportError with a clear message if absent."""
    import importlib

    try:
        return importlib.import_module("inference_endpoint.core.types")
    except ImportError as error:
        raise ImportError(f"mlpe_fast.compat: {REFERENCE_MISSING}") from error


def split_endpoint(url: str) -> tuple[str, str]:
    """The engine's base URL and request path of one of the reference's endpoint URLs.

    ``http://h:p/prefix/v1/chat/completions`` → ``("http://h:p", "/prefix/v1/chat/completions")``.
    """
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return f"{parts.scheme}://{parts.netloc}", path


def split_first(text: str, after_first: str) -> list[str]:
    """The accumulator's ``[first_chunk, rest_joined]`` from the engine's text split."""
    if not text:
        return []
    first = text[: len(text) - len(after_first)] if after_first else text
    return [first, after_first] if after_first else [first]


class StampTable:
    """Engine stamps waiting for the session's RECV_* records, FIFO per query id."""

    def __init__(self) -> None:
        self._stamps: dict[str, deque[int]] = {}

    def push(self, query_id: str, t_ns: int) -> None:
        self._stamps.setdefault(query_id, deque()).append(t_ns)

    def take(self, query_id: str) -> int | None:
        queue = self._stamps.get(query_id)
        if not queue:
            return None
        t_ns = queue.popleft()
        if not queue:
            del self._stamps[query_id]
        return t_ns

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._stamps.values())


class StampingPublisher:
    """Wraps the session's event publisher: RECV_* records get the engine's stamps.

    The session publishes exactly one RECV_* record per ``StreamChunk``, in
    delivery order, so taking the next stamp of that query id is exact.
    Every other record, and every other attribute, passes through unchanged.
    """

    def __init__(self, publisher: Any, stamps: StampTable, recv_types: frozenset[Any]) -> None:
        self._publisher = publisher
        self._stamps = stamps
        self._recv_types = recv_types

    def publish(self, record: Any) -> None:
        if record.event_type in self._recv_types:
            t_ns = self._stamps.take(record.sample_uuid)
            if t_ns is not None:
                import msgspec

                record = msgspec.structs.replace(record, timestamp_ns=t_ns)
        self._publisher.publish(record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._publisher, name)


class EngineEndpointClient:
    """``HTTPEndpointClient`` look-alike; build it with ``await create(config, loop)``."""

    #: every engine client's RECV_* stamps land here (the launcher's session
    #: subclass wraps its publisher with this table).
    stamps = StampTable()

    def __init__(self, config: Any, loop: asyncio.AbstractEventLoop, *, types: Any = None) -> None:
        """Binds to ``loop``, which must be running; ``types`` stands in for the
        reference's ``core.types`` (tests only)."""
        self.config = config
        self.loop = loop
        self._types: Any = reference_types() if types is None else types
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._shutdown = False
        self._dropped_requests = 0
        self._adapter: Any = config.adapter
        self._stream_all = bool(config.stream_all_chunks)
        urls = list(config.endpoint_urls)
        if not urls:
            raise ValueError("HTTPClientConfig.endpoint_urls is empty")
        max_connections = getattr(config, "max_connections", None)
        if not isinstance(max_connections, int) or max_connections < 1:
            max_connections = None
        self._clients: list[tuple[Client, str]] = []
        for url in urls:
            base, path = split_endpoint(url)
            client = Client(
                base,
                api_key=getattr(config, "api_key", None),
                record_chunk_times=self._stream_all,
                max_connections=max_connections,
                insecure=bool(getattr(config, "insecure", False)) and base.startswith("https"),
                idle_timeout=None,
            )
            client.open()
            self._clients.append((client, path))
        self._next = cycle(self._clients)

    @classmethod
    async def create(cls, config: Any, loop: asyncio.AbstractEventLoop) -> EngineEndpointClient:
        """The reference's async factory: ``await create(config, loop)`` on ``loop``."""
        return cls(config, loop)

    # -- issue ----------------------------------------------------------------

    def issue(self, query: Any) -> None:
        """Sends the query now; never raises (a failure becomes an error result)."""
        if self._shutdown:
            self._dropped_requests += 1
            return
        try:
            body = self._adapter.encode_query(query)
            streaming = bool(query.data.get("stream", False))
            client, path = next(self._next)
            client.issue(
                body,
                self._on_done(query.id, streaming),
                path=path,
                sample_id=query.id,
                on_first=self._on_first(query.id) if streaming else None,
            )
        except Exception as error:
            self._queue.put_nowait(self.error_result(query.id, type(error).__name__, repr(error)))

    def _on_first(self, query_id: str) -> Callable[[Any, int], None]:
        def first(_exchange: Any, t_ns: int) -> None:
            self.stamps.push(query_id, t_ns)
            self._queue.put_nowait(
                self._types.StreamChunk(
                    id=query_id, response_chunk="", metadata={"first_chunk": True}
                )
            )

        return first

    def _on_done(self, query_id: str, streaming: bool) -> Callable[[RequestRecord], None]:
        def done(record: RequestRecord) -> None:
            for item in self.results_for(query_id, record, streaming):
                self._queue.put_nowait(item)

        return done

    # -- record → reference types ----------------------------------------------

    def error_result(self, query_id: str, error_type: str, message: str) -> Any:
        types = self._types
        return types.QueryResult(
            id=query_id,
            response_output=None,
            error=types.ErrorData(error_type=error_type, error_message=message),
        )

    def results_for(self, query_id: str, record: RequestRecord, streaming: bool) -> list[Any]:
        """What the session receives for one finished request, in order."""
        import msgspec

        types = self._types
        response = record.response
        items: list[Any] = []
        if streaming and self._stream_all and response.chunk_times:
            for t_ns in response.chunk_times[1:]:
                self.stamps.push(query_id, t_ns)
                items.append(
                    types.StreamChunk(
                        id=query_id, response_chunk="", metadata={"first_chunk": False}
                    )
                )
        if record.error_class is not None:
            if record.error_class == "HTTPStatusError":
                result = self.error_result(
                    query_id, "error", f"HTTP {response.status}: {record.error_message or ''}"
                )
            else:
                result = self.error_result(
                    query_id, record.error_class, record.error_message or record.error_class
                )
        else:
            result = self.output_result(query_id, record, streaming)
        t_done = response.t_done if response.t_done is not None else record.t_end
        msgspec.structs.force_setattr(result, "completed_at", t_done)
        items.append(result)
        return items

    def output_result(self, query_id: str, record: RequestRecord, streaming: bool) -> Any:
        types = self._types
        response = record.response
        metadata: dict[str, Any] = {"final_chunk": True}
        if streaming:
            metadata["first_chunk"] = response.t_first is None
        if response.finish_reason:
            metadata["finish_reason"] = response.finish_reason
        if streaming and response.reasoning:
            output = types.TextModelOutput(
                output=response.content,
                reasoning=split_first(response.reasoning, response.reasoning_after_first),
            )
        elif streaming:
            output = types.TextModelOutput(
                output=split_first(response.content, response.content_after_first),
                reasoning=None,
            )
        else:
            output = types.TextModelOutput(
                output=response.content, reasoning=response.reasoning or None
            )
        return types.QueryResult(id=query_id, response_output=output, metadata=metadata)

    # -- receive --------------------------------------------------------------

    def poll(self) -> Any:
        """Non-blocking: the next result or chunk, or None."""
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def drain(self) -> list[Any]:
        items = []
        while (item := self.poll()) is not None:
            items.append(item)
        return items

    async def recv(self) -> Any:
        """The next result or chunk; None once the client is shut down."""
        if self._shutdown and self._queue.empty():
            return None
        return await self._queue.get()

    # -- shutdown -------------------------------------------------------------

    def shutdown(self) -> None:
        self._shutdown = True
        self._queue.put_nowait(None)

    async def shutdown_async(self) -> None:
        if not self._shutdown:
            self.shutdown()
        for client, _path in self._clients:
            await client.aclose()
