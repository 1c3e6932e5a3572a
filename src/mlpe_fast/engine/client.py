"""The public client: send OpenAI requests, get one timed record per request.

    async with mlpe_fast.Client("http://127.0.0.1:8000") as client:
        record = await client.request({"model": "m", "messages": [...], "stream": True})
        print(record.ttft_ns, record.response.content)

``request`` awaits one record; ``issue`` is the scheduler's form: it returns
at once and calls ``on_done(record)`` when the request ends (and
``on_first(exchange, t_ns)`` at the first token, only when given), so a
scheduler can keep thousands of requests in flight without a task each.

Failures never raise from ``request``/``issue``: they come back as records
with ``error_class`` set (see :class:`RequestRecord`).  Timeouts:
``connect_timeout`` for opening a connection (TLS handshake included),
``idle_timeout`` between two reads of a response (of its connection, over
HTTP/2), ``total_timeout`` from issue to the end of a response; ``None``
switches the last two off.  Closing the client ends requests still in
flight as ``Cancelled`` records.

Protocols: HTTP/1.1 by default; ``http2=True`` speaks HTTP/2, with prior
knowledge on ``http://`` (h2c) and through ALPN on ``https://`` (falling
back to HTTP/1.1 when the server does not offer it).  ``https://``
verifies the server's certificate against the system's trust store, or
``ca_bundle``; ``insecure=True`` skips verification.

Stamps: on Linux, cleartext connections (HTTP/1.1 and h2c) read with the
kernel's arrival stamps (``kernel_stamps``, on by default): a response's ``t_first``
and ``t_done`` are when its data reached the machine, however busy the
client was; the record keeps when it was read beside them.  A read carries
the stamp of its newest data, so with the compiled core those connections
are read by a thread of the client's own (``receive_thread``) that takes
every read as data arrives, never waiting for the interpreter; the loop
decodes what it read, read by read.  Elsewhere, or with
``kernel_stamps=False``, reads are stamped as they are read.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

from ..errors import MlpeError
from ..wire._oai_py import DIALECTS
from ..wire.events import NO_RESPONSE
from ._receive import ArrivalClock
from .clock import monotonic_ns
from .dial import DialError, Endpoint, probe, tls_context
from .exchange import Exchange
from .framing import RequestFraming
from .pool import ConnectionPool, InFlight
from .record import RequestRecord
from .rx_sched import MAX_PRIORITY, ReceiveScheduling

__all__ = ("Client", "ClientConfigError", "EndpointUnreachable")

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"

_encode = msgspec.json.Encoder().encode

REDACTED = "<redacted>"
"""What stands for a secret (the API key) in error messages and in a written
config.yaml (spec §3.1): the key is never written."""


class ClientConfigError(MlpeError, ValueError):
    """The client was given something it cannot use (a bad URL, say)."""


class EndpointUnreachable(MlpeError, ConnectionError):
    """:meth:`Client.check_reachable` could not connect; the message says
    why, ``error_class`` names how (``ConnectError``, ``ConnectTimeout``,
    ``TLSError``, ``HTTP2Unsupported``), as in a request's record."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


class Client:
    """A client for one OpenAI-compatible endpoint.

    Args:
        base_url: ``http[s]://host[:port][/prefix]``; request paths are
            appended to the prefix.
        api_key: sent as ``Authorization: Bearer <key>``.
        headers: extra request header fields.
        connect_timeout, idle_timeout, total_timeout: seconds (see module doc).
        max_event, max_body: decoder limits (``csrc/mlpe_sse.h``,
            ``csrc/mlpe_response.h``).
        record_chunk_times: keep one stamp per content-bearing event.
        dialect: the schema of the endpoint's response chunks: ``"openai"``
            (chat and completions) or ``"sglang"`` (SGLang's native
            ``/generate``, whose events carry the whole text so far; rule
            R11 of ``csrc/mlpe_response.h``).  Over both protocols alike.
        max_connections: at most this many connections at once; further
            requests wait for one (:class:`~.pool.ConnectionPool`).
            None: as many as the requests in flight need.
        http2: speak HTTP/2 (see the module doc).
        ca_bundle: a PEM file of the certificate authorities to trust for
            ``https://`` (default: the system's).
        insecure: do not verify the server's certificate.
        kernel_stamps: stamp cleartext reads (HTTP/1.1 and h2c) with the
            kernel's arrival stamps where it gives them (see the module doc).
        receive_thread: with ``kernel_stamps``, read those connections on a
            thread of their own (compiled core, Linux) so that every read
            is prompt whatever the interpreter is doing (see the module doc).
        receive_priority: the receive thread asks for SCHED_FIFO at this
            priority (1-99) for itself, and runs on under the normal policy
            where the system refuses; 0 leaves its policy as inherited
            (``engine/rx_sched.py``).
        receive_cpus: the CPUs the receive thread runs on (empty: wherever
            the process may).
        packet_stamps: with ``kernel_stamps``, stamp each byte with the
            arrival of the TCP segment that carried it, from a packet socket
            (``csrc/mlpe_pktstamp.h``; needs CAP_NET_RAW, else kernel stamps
            and ``packet_note`` says why).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = 10.0,
        idle_timeout: float | None = 300.0,
        total_timeout: float | None = None,
        max_event: int = 1 << 20,
        max_body: int = 16 << 20,
        record_chunk_times: bool = False,
        dialect: str = "openai",
        max_connections: int | None = None,
        http2: bool = False,
        ca_bundle: str | None = None,
        insecure: bool = False,
        kernel_stamps: bool = True,
        receive_thread: bool = True,
        receive_priority: int = 0,
        receive_cpus: tuple[int, ...] = (),
        packet_stamps: bool = False,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https"):
            raise ClientConfigError(
                f"endpoint {base_url!r}: the URL must start with http:// or https://"
            )
        if not parts.hostname:
            raise ClientConfigError(f"endpoint {base_url!r} has no host")
        tls = parts.scheme == "https"
        try:
            port = parts.port or (443 if tls else 80)
        except ValueError as error:
            raise ClientConfigError(f"endpoint {base_url!r}: {error}") from None
        if not tls and (ca_bundle is not None or insecure):
            raise ClientConfigError(
                f"endpoint {base_url!r} is not https://: ca_bundle and insecure do not apply"
            )
        context = None
        if tls:
            try:
                context = tls_context(http2=http2, ca_bundle=ca_bundle, insecure=insecure)
            except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
                raise ClientConfigError(
                    f"CA bundle {ca_bundle!r} cannot be used: {error}"
                ) from None
        for name, value in (
            ("connect_timeout", connect_timeout),
            ("idle_timeout", idle_timeout),
            ("total_timeout", total_timeout),
        ):
            if value is not None and not value > 0:
                raise ClientConfigError(f"{name} must be a positive number of seconds, not {value}")
        if not 0 <= receive_priority <= MAX_PRIORITY:
            raise ClientConfigError(
                f"receive_priority must be 0 (off) to {MAX_PRIORITY}, not {receive_priority}"
            )
        if any(cpu < 0 for cpu in receive_cpus):
            raise ClientConfigError(f"receive_cpus must be CPU numbers, not {receive_cpus}")
        if max_connections is not None and max_connections < 1:
            raise ClientConfigError(f"max_connections must be at least 1, not {max_connections}")
        if dialect not in DIALECTS:
            raise ClientConfigError(
                f"dialect must be one of {', '.join(DIALECTS)}, not {dialect!r}"
            )
        self._max_connections = max_connections
        #: Connections :meth:`warm_up` opened, and the time it took (the
        #: connection setup kept out of every request's figures).
        self.warmed_connections = 0
        self.warm_up_ns = 0
        self.kernel_stamps = kernel_stamps
        self.receive_thread = receive_thread
        self.receive_priority = receive_priority
        self.receive_cpus = tuple(receive_cpus)
        self.packet_stamps = packet_stamps
        self.base_url = base_url
        self._api_key = api_key
        self.host = parts.hostname
        self.port = port
        self.http2 = http2
        self._endpoint = Endpoint(self.host, port, tls=context, http2=http2)
        self._framing = RequestFraming(
            parts.scheme, self.host, port, parts.path.rstrip("/"), api_key=api_key, headers=headers
        )
        self._idle_timeout_ns = None if idle_timeout is None else int(idle_timeout * 1e9)
        self._total_timeout_ns = None if total_timeout is None else int(total_timeout * 1e9)
        self._connect_timeout = connect_timeout
        self._decoder_options: dict[str, Any] = {
            "max_event": max_event,
            "max_body": max_body,
            "record_chunk_times": record_chunk_times,
            "dialect": dialect,
        }
        # Sample ids: 32 hex digits, a random half per client and a counter,
        # which is unique and costs no system call per request (uuid4 does).
        self._id_prefix = os.urandom(8).hex()
        self._id_counter = itertools.count()
        self._pool: ConnectionPool | None = None
        self._closed_pool: ConnectionPool | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self.in_flight = 0

    # -- lifecycle ------------------------------------------------------------

    async def __aenter__(self) -> Client:
        self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def open(self) -> None:
        """Binds the client to the running event loop (``async with`` does it)."""
        if self._pool is not None:
            return
        self._pool = ConnectionPool(
            self._endpoint,
            self._framing,
            connect_timeout=self._connect_timeout,
            decoder_options=self._decoder_options,
            on_connect_failed=self._connect_failed,
            max_connections=self._max_connections,
            arrival_clock=ArrivalClock() if self.kernel_stamps else None,
            # Over TLS the loop's transport reads (dial): no thread to start.
            receive_thread=self.receive_thread and self._endpoint.tls is None,
            receive_priority=self.receive_priority,
            receive_cpus=self.receive_cpus,
            packet_stamps=self.packet_stamps,
        )
        timeouts = [t for t in (self._idle_timeout_ns, self._total_timeout_ns) if t is not None]
        if timeouts:
            # Checking every in-flight request now and then costs nothing per
            # read; a timer re-armed on every read would.
            period = min(max(min(timeouts) / 1e9 / 10, 0.01), 1.0)
            self._watchdog = asyncio.get_running_loop().create_task(self._watch(period))

    async def check_reachable(self) -> None:
        """Opens one connection to the endpoint (TLS included) and closes it,
        so that a run can refuse to start against an endpoint it cannot
        reach, or that does not speak what the client will
        (:func:`~.dial.probe`: h2c, TLS).

        Raises:
            EndpointUnreachable: with the reason (refused, timed out, the
                server's certificate not accepted, ``--http2`` against an
                HTTP/1.1-only server, ``https://`` against plain HTTP, ...).
        """
        try:
            await probe(self._endpoint, self._connect_timeout)
        except DialError as error:
            raise EndpointUnreachable(error.error_class, error.message) from None

    async def warm_up(self, count: int, *, concurrency: int = 128) -> int:
        """Opens up to ``count`` connections now, so that the first requests
        find them open (the reference client's ``warmup_connections``).

        At most ``concurrency`` connects are in flight at once (a burst of
        connects can overflow the server's accept queue), and never more
        connections than ``max_connections`` allows.  A connect that fails is
        not an error here: the return value says how many connections are
        open and idle, and the caller decides whether that is enough.
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError("Client is not open: use 'async with Client(...)'")
        if count < 0 or concurrency < 1:
            raise ClientConfigError(
                f"warm_up needs count >= 0 and concurrency >= 1, not {count} and {concurrency}"
            )
        opened_before, began = pool.connections_opened, monotonic_ns()
        ready = await pool.warm_up(count, concurrency)
        self.warmed_connections += pool.connections_opened - opened_before
        self.warm_up_ns += monotonic_ns() - began
        return ready

    async def cancel_in_flight(
        self, message: str = "the run was interrupted with the request in flight"
    ) -> None:
        """Ends every request in flight as a ``Cancelled`` record now (an
        interrupted run); the client stays usable."""
        pool = self._pool
        if pool is None:
            return
        # Waiting requests first, so that none starts on a stream freed below.
        await pool.cancel_connecting()
        t_ns = monotonic_ns()
        for request in pool.in_flight():
            request.fail(t_ns, "Cancelled", message)

    async def aclose(self) -> None:
        """Ends requests still in flight as ``Cancelled`` and closes everything."""
        pool = self._pool
        if pool is None:
            return
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        await pool.cancel_connecting()
        t_ns = monotonic_ns()
        for request in pool.in_flight():
            request.fail(t_ns, "Cancelled", "client closed with the request in flight")
        await pool.aclose()
        self._pool = None
        self._closed_pool = pool  # its counters stay readable

    # -- requests -------------------------------------------------------------

    def frame(self, body: bytes, path: str = CHAT_PATH) -> bytes:
        """The HTTP/1.1 request for a JSON body (pre-encoded per path)."""
        return self._framing.h1(body, path)

    def new_sample_id(self) -> str:
        """A fresh 32-hex-digit sample id (the reference's ``sample_uuid``)."""
        return f"{self._id_prefix}{next(self._id_counter):016x}"

    def issue(
        self,
        body: bytes | Mapping[str, Any],
        on_done: Callable[[RequestRecord], object],
        *,
        path: str = CHAT_PATH,
        sample_index: int = 0,
        sample_id: str | None = None,
        t_sched: int | None = None,
        on_first: Callable[[Exchange, int], object] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Sends a request now; ``on_done(record)`` runs when it ends.

        ``headers``: header fields of this request only, sent after the
        client's own.

        Raises:
            ClientConfigError: ``headers`` has a field that cannot be sent
                (not a valid name or value, or one the client sets itself);
                nothing was sent.
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError("Client is not open: use 'async with Client(...)'")
        if not isinstance(body, bytes):
            body = _encode(body)
        if headers:
            try:
                path = self._framing.target(path, headers)
            except ValueError as error:
                raise ClientConfigError(str(error)) from None
        self.in_flight += 1
        exchange = Exchange(
            body,
            path,
            # HTTP/1.1 for certain: framed once, here (else by the connection)
            None if self.http2 else self._framing.h1(body, path),
            self._done_callback(on_done),
            on_first,
            sample_index,
            sample_id if sample_id is not None else self.new_sample_id(),
            t_sched,
        )
        pool.start(exchange)

    async def request(
        self,
        body: bytes | Mapping[str, Any],
        *,
        path: str = CHAT_PATH,
        sample_index: int = 0,
        sample_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> RequestRecord:
        """Sends one request and returns its record (``headers``: as for :meth:`issue`)."""
        return await awaited_record(
            self.issue, body, path=path, sample_index=sample_index, sample_id=sample_id,
            headers=headers,
        )  # fmt: skip

    @property
    def connections_opened(self) -> int:
        pool = self._pool or self._closed_pool
        return 0 if pool is None else pool.connections_opened

    @property
    def connect_ns_total(self) -> int:
        """Connection setup, TCP connect and TLS handshake, summed."""
        pool = self._pool or self._closed_pool
        return 0 if pool is None else pool.connect_ns_total

    @property
    def tls_handshakes(self) -> int:
        pool = self._pool or self._closed_pool
        return 0 if pool is None else pool.tls_handshakes

    @property
    def tls_ns_total(self) -> int:
        """The TLS handshakes' part of ``connect_ns_total``."""
        pool = self._pool or self._closed_pool
        return 0 if pool is None else pool.tls_ns_total

    @property
    def http2_connections(self) -> int:
        """Connections that spoke HTTP/2 (ALPN may choose HTTP/1.1)."""
        pool = self._pool or self._closed_pool
        return 0 if pool is None else pool.http2_connections

    @property
    def kernel_stamped_connections(self) -> int:
        """Connections whose reads carried the kernel's arrival stamps."""
        pool = self._pool or self._closed_pool
        return 0 if pool is None else pool.kernel_stamped_connections

    @property
    def packet_note(self) -> str:
        """Why segment stamps were asked for and not used ("" otherwise)."""
        pool = self._pool or self._closed_pool
        return "" if pool is None else pool.packet_note

    @property
    def capture_drops(self) -> int:
        """Frames the packet capture's ring dropped (segment stamps)."""
        pool = self._pool or self._closed_pool
        if pool is None or pool.capture is None:
            return 0
        return int(pool.capture.stats["drops"])

    @property
    def arrival_clock(self) -> ArrivalClock | None:
        """The mapping of kernel stamps onto the monotonic clock (its
        ``error_ns`` bounds the mapping, ``steps`` counts wall-clock steps
        seen), or None without kernel stamps."""
        pool = self._pool or self._closed_pool
        return None if pool is None else pool.arrival_clock

    @property
    def receive_scheduling(self) -> ReceiveScheduling | None:
        """What the receive thread got (policy, priority, CPUs) and how it
        ran; None when no thread read (TLS, no kernel stamps, no epoll, or
        no connection opened yet)."""
        pool = self._pool or self._closed_pool
        return None if pool is None else pool.receive_scheduling

    # -- internals ------------------------------------------------------------

    def _done_callback(
        self, on_done: Callable[[RequestRecord], object]
    ) -> Callable[[RequestRecord], object]:
        secret = self._api_key

        def done(record: RequestRecord) -> object:
            self.in_flight -= 1
            if secret and record.error_class is not None:
                record = _without_secret(record, secret)
            return on_done(record)

        return done

    def _connect_failed(self, exchange: Exchange, error_class: str, message: str) -> None:
        exchange.on_done(exchange.record(monotonic_ns(), NO_RESPONSE, error_class, message))

    async def _watch(self, period: float) -> None:
        idle = self._idle_timeout_ns
        total = self._total_timeout_ns
        while True:
            await asyncio.sleep(period)
            pool = self._pool
            if pool is None:
                return
            now = monotonic_ns()
            for request in pool.in_flight():
                self._check(request, now, idle, total)

    @staticmethod
    def _check(request: InFlight, now: int, idle: int | None, total: int | None) -> None:
        if total is not None and now - request.t_issue > total:
            request.fail(
                now, "TotalTimeout", f"no complete response within {total / 1e9:g} s of issue"
            )
        elif idle is not None and now - max(request.last_read_ns, request.t_issue) > idle:
            request.fail(now, "IdleTimeout", f"no bytes from the endpoint for {idle / 1e9:g} s")


async def awaited_record(
    issue: Callable[..., None],
    body: bytes | Mapping[str, Any],
    *,
    path: str,
    sample_index: int,
    sample_id: str | None,
    headers: Mapping[str, str] | None,
) -> RequestRecord:
    """The record of one request sent with ``issue`` (a client's
    :meth:`Client.issue`, or :class:`~.replicas.Replicas`'), awaited."""
    future: asyncio.Future[RequestRecord] = asyncio.get_running_loop().create_future()

    def settle(record: RequestRecord) -> None:
        if not future.done():
            future.set_result(record)

    issue(body, settle, path=path, sample_index=sample_index, sample_id=sample_id, headers=headers)
    return await future


def _without_secret(record: RequestRecord, secret: str) -> RequestRecord:
    """The record with the API key blanked out of its error messages: an
    endpoint may quote the key it refused ("invalid key sk-..."), and the
    messages go to the terminal, the report and events.jsonl."""
    message = record.error_message or ""
    summary = record.response
    if secret not in message and secret not in summary.error_message:
        return record
    return msgspec.structs.replace(
        record,
        error_message=message.replace(secret, REDACTED),
        response=msgspec.structs.replace(
            summary, error_message=summary.error_message.replace(secret, REDACTED)
        ),
    )
