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
* the output has the reference accumulator's shape (first chunk / rest,
  reasoning, streamed tool calls as chunks of delta dicts, see
  :func:`tool_call_chunks`) and its metadata;
* a query's ``headers`` (the agentic routing headers) are sent as header
  fields of its request, after the client's own, as the reference's worker
  sends them;
* ``warmup_connections`` connections are opened before ``create`` returns,
  as the reference's workers open them before they report ready;
* the engine's RECV_FIRST / RECV_NON_FIRST stamps are kept in a FIFO per
  query id; :class:`StampingPublisher` (installed by the launcher around the
  session's event publisher) swaps them into the session's RECV_* records.

The reference's types are imported when a client is created, never at import.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import threading
from collections import deque
from collections.abc import Callable
from itertools import cycle
from typing import Any
from urllib.parse import urlsplit

from ..engine.client import Client
from ..engine.record import RequestRecord
from ..wire.events import ToolCall

log = logging.getLogger(__name__)

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


def _tool_delta(
    index: int, call_id: str, call_type: str, name: str, arguments: str
) -> dict[str, Any]:
    """One streamed ``tool_calls`` delta as OpenAI-compatible servers send it."""
    delta: dict[str, Any] = {"index": index}
    if call_id:
        delta["id"] = call_id
    if call_type:
        delta["type"] = call_type
    function: dict[str, Any] = {}
    if name:
        function["name"] = name
    function["arguments"] = arguments
    delta["function"] = function
    return delta


def tool_call_chunks(
    calls: tuple[ToolCall, ...], after_first: tuple[ToolCall, ...]
) -> tuple[tuple[dict[str, Any], ...], ...] | None:
    """Streamed tool calls in the reference accumulator's shape: a tuple of
    chunks, each the tuple of one event's ``delta.tool_calls`` dicts.

    The engine keeps each call merged and what of it arrived after the first
    content-bearing event, not every delta, so this gives two chunks: each
    call as it stood at that event (with its id and type), then what came
    later (id and type only for calls that started later).  The reference's
    ``merge_tool_calls`` gives the same calls from them, and, for a response
    that starts with a tool call, dropping the first chunk leaves exactly
    the text after the first event (its TPOT count), as it does with the
    real deltas when a call's id and type come in its first delta.
    """
    if not calls:
        return None
    later = {call.index: call for call in after_first}
    first: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for call in calls:
        tail = later.get(call.index)
        name_tail = tail.name if tail is not None else ""
        arguments_tail = tail.arguments if tail is not None else ""
        name_head = call.name[: len(call.name) - len(name_tail)]
        arguments_head = call.arguments[: len(call.arguments) - len(arguments_tail)]
        started = bool(name_head or arguments_head) or tail is None
        if started:
            first.append(_tool_delta(call.index, call.id, call.type, name_head, arguments_head))
        if tail is not None:
            rest.append(
                _tool_delta(
                    call.index,
                    "" if started else call.id,
                    "" if started else call.type,
                    name_tail,
                    arguments_tail,
                )
            )
    return tuple(chunk for chunk in (tuple(first), tuple(rest)) if chunk)


def tool_call_messages(calls: tuple[ToolCall, ...]) -> tuple[dict[str, Any], ...] | None:
    """A non-streaming response's ``message.tool_calls`` as the reference keeps them."""
    if not calls:
        return None
    out = []
    for call in calls:
        message: dict[str, Any] = {}
        if call.id:
            message["id"] = call.id
        message["type"] = call.type or "function"
        message["function"] = {"name": call.name, "arguments": call.arguments}
        out.append(message)
    return tuple(out)


def warmup_count(config: Any) -> int:
    """How many connections the reference would open before the run, in all.

    ``warmup_connections``: 0 none; a positive number that many (the
    reference splits it across its workers; one pool here takes it all);
    -1 half the pool (``max_connections // 2``, at least 1).  With
    ``max_connections`` -1 the reference's config has already turned -1
    into a share of the port range.

    Raises:
        ValueError: more than ``max_connections``, which the reference's
            pool refuses too.
    """
    wanted = getattr(config, "warmup_connections", 0)
    if not isinstance(wanted, int) or wanted == 0:
        return 0
    max_connections = getattr(config, "max_connections", -1)
    limited = isinstance(max_connections, int) and max_connections >= 1
    if wanted < 0:
        return max(1, max_connections // 2) if limited else 1
    if limited and wanted > max_connections:
        raise ValueError(
            f"--client.warmup-connections ({wanted}) exceeds --max-connections ({max_connections})"
        )
    return wanted


#: Descriptors kept free for the run itself (logs, report files, the
#: services' sockets) when warm-up connections would take the rest.
FD_RESERVE = 256


def descriptor_room() -> int | None:
    """How many more file descriptors this process may open, keeping
    :data:`FD_RESERVE` free; None when that cannot be told."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    return max(0, soft - in_use - FD_RESERVE)


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
    """``HTTPEndpointClient`` look-alike; build it with ``await create(config, loop)``
    on the session's loop, or, as the reference's ``probe`` does,
    ``EngineEndpointClient(config)``: then it runs its own loop in a thread,
    ``issue`` may be called from any thread, ``recv`` is run on ``client.loop``
    (``run_coroutine_threadsafe``) and ``shutdown()`` closes everything."""

    #: every engine client's RECV_* stamps land here (the launcher's session
    #: subclass wraps its publisher with this table).
    stamps = StampTable()

    def __init__(
        self, config: Any, loop: asyncio.AbstractEventLoop | None = None, *, types: Any = None
    ) -> None:
        """Binds to ``loop``, or to a loop of its own in a thread when None;
        ``types`` stands in for the reference's ``core.types`` (tests only)."""
        self.config = config
        self._thread: threading.Thread | None = None
        if loop is None:
            loop, self._thread = _loop_in_thread()
        self.loop = loop
        try:
            if self._thread is None:
                self._set_up(config, types)
            else:
                # Client.open binds to the running loop: do it on the client's own.
                asyncio.run_coroutine_threadsafe(self._set_up_async(config, types), loop).result()
        except BaseException:
            if self._thread is not None:  # no thread left behind
                loop.call_soon_threadsafe(loop.stop)
                self._thread.join(timeout=30)
            raise

    async def _set_up_async(self, config: Any, types: Any) -> None:
        self._set_up(config, types)

    def _set_up(self, config: Any, types: Any) -> None:
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
        """The reference's async factory: ``await create(config, loop)`` on ``loop``.

        Opens the ``warmup_connections`` first (see :meth:`warm_up`); a
        failure there is raised, which the reference turns into its
        "Failed to connect to endpoint" setup error.
        """
        client = cls(config, loop)
        try:
            await client.warm_up()
        except BaseException:
            await client.shutdown_async()
            raise
        return client

    async def warm_up(self) -> int:
        """Opens the connections ``warmup_connections`` asks for, spread over
        the endpoints, ``max_concurrent_warmup_connects`` at a time; returns
        how many are open.

        Raises:
            ValueError: more warm-up connections than ``max_connections``.
            ConnectionError: none could be opened (the reference's workers
                exit then: the endpoint is unreachable).
        """
        count = warmup_count(self.config)
        if count == 0:
            return 0
        room = descriptor_room()
        if room is not None and count > room:
            # In the reference the workers hold these; here the LoadGen
            # process does, and it must keep descriptors for the run.
            log.warning(
                "warm-up: %d connections asked, %d opened: the open-files limit "
                "(ulimit -n) leaves room for no more",
                count,
                room,
            )
            count = room
        concurrency = getattr(self.config, "max_concurrent_warmup_connects", 128)
        if not isinstance(concurrency, int) or concurrency < 1:
            concurrency = 128
        share, extra = divmod(count, len(self._clients))
        counts = [share + (i < extra) for i in range(len(self._clients))]
        opened = await asyncio.gather(
            *(
                client.warm_up(n, concurrency=concurrency)
                for (client, _path), n in zip(self._clients, counts, strict=True)
                if n
            )
        )
        warmed = sum(opened)
        if warmed == 0 and count > 0:
            where = ", ".join(client.base_url for client, _path in self._clients)
            raise ConnectionError(
                f"warm-up failed: 0/{count} connections established; {where} is unreachable"
            )
        minimum = getattr(self.config, "min_required_connections", 0)
        if warmed < count and isinstance(minimum, int) and minimum > 0:
            log.warning("warm-up: only %d/%d connections established", warmed, count)
        log.debug("warm-up: %d/%d connections open", warmed, count)
        return warmed

    # -- issue ----------------------------------------------------------------

    def issue(self, query: Any) -> None:
        """Sends the query now; never raises (a failure becomes an error result)."""
        thread = self._thread
        if thread is not None and threading.current_thread() is not thread:
            # The engine lives on the client's own loop (probe's usage).
            self.loop.call_soon_threadsafe(self._issue, query)
        else:
            self._issue(query)

    def _issue(self, query: Any) -> None:
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
                # The reference's worker sends them after its own fields.
                headers=getattr(query, "headers", None) or None,
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
        """The reference's result for a finished response: its streaming
        accumulator's shape and metadata, or its adapter's for a whole body."""
        types = self._types
        response = record.response
        if not streaming:
            tool_calls = tool_call_messages(response.tool_calls)
            output = types.TextModelOutput(
                output=response.content,
                reasoning=response.reasoning or None,
                tool_calls=tool_calls,
            )
            metadata: dict[str, Any] = {}
            if response.finish_reason:
                metadata["finish_reason"] = response.finish_reason
            if tool_calls:
                metadata["tool_calls"] = list(tool_calls)
            if response.reasoning:
                metadata["reasoning_content"] = response.reasoning
            return types.QueryResult(id=query_id, response_output=output, metadata=metadata)
        chunks = tool_call_chunks(response.tool_calls, response.tool_calls_after_first)
        if response.reasoning:
            output = types.TextModelOutput(
                output=response.content,
                reasoning=split_first(response.reasoning, response.reasoning_after_first),
                tool_calls=chunks,
            )
        else:
            output = types.TextModelOutput(
                output=split_first(response.content, response.content_after_first),
                reasoning=None,
                tool_calls=chunks,
            )
        metadata = {"first_chunk": response.t_first is None, "final_chunk": True}
        if response.finish_reason:
            metadata["finish_reason"] = response.finish_reason
        if chunks:
            # As the accumulator does: the calls merged from the chunks.
            _content, _reasoning, merged = output.as_message_parts()
            if merged:
                metadata["tool_calls"] = list(merged)
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
        """Stops taking queries; ``recv`` returns None once the queue is empty.
        With a loop of its own (see the class doc) it also closes the
        connections and stops that loop, and returns when it has stopped."""
        thread = self._thread
        if thread is not None and threading.current_thread() is not thread:
            if self.loop.is_closed():
                return
            closing = asyncio.run_coroutine_threadsafe(self.shutdown_async(), self.loop)
            try:
                closing.result(timeout=30)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                thread.join(timeout=30)
                if not thread.is_alive():
                    self.loop.close()
            return
        if not self._shutdown:
            self._shutdown = True
            self._queue.put_nowait(None)

    async def shutdown_async(self) -> None:
        if not self._shutdown:
            self.shutdown()
        for client, _path in self._clients:
            await client.aclose()


def _loop_in_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A running event loop in a daemon thread (uvloop when installed, as
    the reference's own loop is)."""
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        loop.run_forever()

    thread = threading.Thread(target=run, name="mlpe-fast-endpoints", daemon=True)
    thread.start()
    started.wait()
    return loop, thread
