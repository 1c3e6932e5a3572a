"""The client over HTTP/2 (h2c and TLS) and over HTTPS, against the simulated
endpoint on loopback: the same records as over HTTP/1.1, and every fault of
HTTP/2 (a reset stream, a refused one, GOAWAY mid-run, a one-byte window)
ends in exactly one correct record per request.
"""

from __future__ import annotations

import asyncio
import http.server
import socket
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mlpe_fast.engine import Client, ClientConfigError, RequestRecord
from mlpe_fast.engine.client import EndpointUnreachable
from mlpe_fast.engine.dial import NO_H2C, PLAIN_CHECK_AFTER_S, PLAIN_HTTP
from mlpe_fast.sim.config import SimConfig
from mlpe_fast.sim.server import SimServer, SimServerThread
from mlpe_fast.sim.timing import Dist

SAME_CLOCK = sys.platform.startswith("linux")
MS = 1_000_000


def body(i: int, tokens: int = 8, prompt: str = "hello") -> dict[str, Any]:
    return {
        "model": "mlpe-sim",
        "messages": [{"role": "user", "content": f"{prompt} {i}"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": tokens,
    }


@contextmanager
def server(**options: Any) -> Iterator[SimServerThread]:
    with SimServer.start_in_thread(SimConfig(**options)) as running:
        yield running


def tls_options(certs: Any, http2: bool) -> dict[str, Any]:
    return {"tls_cert": str(certs.cert_file), "tls_key": str(certs.key_file), "http2": http2}


async def send_all(
    client: Client, bodies: list[dict[str, Any]], first_index: int = 0
) -> list[RequestRecord]:
    """Sends every body at once; sample indices count from ``first_index``."""
    return list(
        await asyncio.gather(
            *(client.request(b, sample_index=first_index + i) for i, b in enumerate(bodies))
        )
    )


def run(coro: Any, loop: str = "uvloop") -> Any:
    if loop == "asyncio":
        return asyncio.run(coro)
    uvloop = pytest.importorskip("uvloop")
    return uvloop.run(coro)


def assert_brackets_the_server(record: RequestRecord) -> None:
    """t_issue <= the server's receive; the server's first send <= t_first."""
    usage = record.response.usage
    assert usage is not None
    assert record.t_first is not None and record.t_done is not None
    if SAME_CLOCK:
        assert record.t_issue <= usage["mlpe_recv_ns"]
        assert usage["mlpe_first_send_ns"] <= record.t_first
    assert record.t_issue <= record.t_first <= record.t_done <= record.t_end


PROTOCOLS = ["http/1.1", "h2c", "https http/1.1", "https h2"]


def protocol_setup(protocol: str, certs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Server options and client options for one protocol."""
    if protocol == "http/1.1":
        return {}, {}
    if protocol == "h2c":
        return {"http2": True}, {"http2": True}
    http2 = protocol == "https h2"
    return tls_options(certs, http2), {"http2": http2, "ca_bundle": str(certs.ca_file)}


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_records_mean_the_same_over_every_protocol(
    protocol: str, loop: str, tls_certs: Any
) -> None:
    server_options, client_options = protocol_setup(protocol, tls_certs)
    timing = {"ttft_ms": Dist("fixed", 2), "itl_ms": Dist("fixed", 0.2), "seed": 7}

    async def main(url: str, options: dict[str, Any]) -> tuple[list[RequestRecord], Client]:
        async with Client(url, **options) as client:
            # One at a time first: the seeded text depends on the order of requests.
            records = [await client.request(body(i), sample_index=i) for i in range(6)]
            records += await send_all(client, [body(i, 16) for i in range(6, 70)], 6)
        return records, client

    with server(**timing) as baseline:
        expected, _ = run(main(baseline.url, {}), loop)
    with server(**server_options, **timing) as running:
        assert running.url.startswith("https://" if "https" in protocol else "http://")
        records, client = run(main(running.url, client_options), loop)
    assert [r.error_message for r in records if not r.ok] == []
    assert len({r.sample_id for r in records}) == 70
    # the same token texts, event counts and usage as over HTTP/1.1
    for got, want in zip(records[:6], expected[:6], strict=True):
        assert got.response.content == want.response.content
        assert got.response.content_after_first == want.response.content_after_first
        assert got.response.events == want.response.events
        assert got.response.finish_reason == want.response.finish_reason == "length"
    for record in records:
        tokens = 8 if record.sample_index < 6 else 16
        assert record.response.content_events == tokens == len(record.response.content)
        assert record.response.usage is not None
        assert record.response.usage["completion_tokens"] == tokens
        assert_brackets_the_server(record)
    if "h2" in protocol:
        # 64 concurrent streams fit on one connection (the server allows 100).
        assert client.http2_connections == client.connections_opened == 1
    else:
        assert client.http2_connections == 0
    if "https" in protocol:
        assert client.tls_handshakes == client.connections_opened
        assert 0 < client.tls_ns_total <= client.connect_ns_total
    # the first request on a new connection includes its setup
    first = records[0]
    assert first.connect_ns > 0 and first.t_sched == first.t_issue
    assert all(r.connect_ns == 0 for r in records[1:6])


def test_alpn_falls_back_to_http11(tls_certs: Any) -> None:
    async def main(url: str) -> tuple[list[RequestRecord], Client]:
        async with Client(url, http2=True, ca_bundle=str(tls_certs.ca_file)) as client:
            records = await send_all(client, [body(i) for i in range(8)])
        return records, client

    with server(**tls_options(tls_certs, http2=False)) as running:
        records, client = run(main(running.url))
    assert all(r.ok for r in records)
    assert client.http2_connections == 0 and client.connections_opened == 8


def test_certificates_are_verified_unless_insecure(tls_certs: Any) -> None:
    async def main(url: str, **options: Any) -> list[RequestRecord]:
        async with Client(url, **options) as client:
            return await send_all(client, [body(i) for i in range(3)])

    with server(**tls_options(tls_certs, http2=True)) as running:
        refused = run(main(running.url, http2=True))
        accepted = run(main(running.url, http2=True, insecure=True))
        wrong_name = run(
            main(running.url.replace("127.0.0.1", "localhost"), ca_bundle=str(tls_certs.ca_file))
        )
    assert {r.error_class for r in refused} == {"TLSError"}
    assert all("--ca-bundle" in (r.error_message or "") for r in refused)
    assert all(r.ok for r in accepted)
    assert all(r.ok for r in wrong_name)  # the certificate names localhost too


def test_tls_options_are_checked(tmp_path: Any) -> None:
    with pytest.raises(ClientConfigError, match="not https"):
        Client("http://127.0.0.1:1", insecure=True)
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ClientConfigError, match="CA bundle"):
        Client("https://127.0.0.1:1", ca_bundle=str(bad))


def test_a_reset_stream_fails_alone() -> None:
    async def main(url: str) -> list[RequestRecord]:
        async with Client(url, http2=True) as client:
            return await send_all(client, [body(i, 6) for i in range(12)])

    with server(http2=True, h2_reset_every=3, h2_reset_after_tokens=2) as running:
        records = run(main(running.url))
        stats = running.stats
    failed = [r for r in records if not r.ok]
    assert len(records) == 12 and len(failed) == 4 == stats.h2_resets
    for record in failed:
        assert record.error_class == "StreamReset"
        assert "INTERNAL_ERROR" in (record.error_message or "")
        assert record.response.content_events == 2  # what arrived is kept
    for record in records:
        if record.ok:
            assert record.response.content_events == 6


def test_refused_streams_are_sent_again() -> None:
    async def main(url: str) -> list[RequestRecord]:
        async with Client(url, http2=True) as client:
            return await send_all(client, [body(i) for i in range(12)])

    with server(http2=True, h2_refuse_every=4) as running:
        records = run(main(running.url))
        stats = running.stats
    assert all(r.ok for r in records)
    assert sum(r.retries for r in records) == stats.h2_refused >= 3
    assert stats.responses == 12  # each request answered once


def test_goaway_mid_run_loses_nothing() -> None:
    async def main(url: str) -> tuple[list[RequestRecord], Client]:
        async with Client(url, http2=True) as client:
            records = await send_all(client, [body(i, 20) for i in range(24)])
        return records, client

    with server(
        http2=True, h2_goaway_after=5, ttft_ms=Dist("fixed", 5), itl_ms=Dist("fixed", 0.5)
    ) as running:
        records, client = run(main(running.url))
        stats = running.stats
    assert [r.error_message for r in records if not r.ok] == []
    assert all(r.response.content_events == 20 for r in records)
    assert client.connections_opened >= 24 // 5 and stats.h2_goaways >= 4
    assert sum(r.retries for r in records) > 0
    assert stats.responses == 24  # nothing answered twice


def test_one_byte_window_still_delivers_the_request() -> None:
    prompt = "x" * 3000  # a body of about 3 kB, sent one byte per DATA frame

    async def main(url: str) -> list[RequestRecord]:
        async with Client(url, http2=True) as client:
            return await send_all(client, [body(i, 4, prompt) for i in range(4)])

    with server(http2=True, h2_window=1) as running:
        records = run(main(running.url))
    assert all(r.ok and r.response.content_events == 4 for r in records)


def test_long_streams_never_stall_on_the_receive_window() -> None:
    # ~170 bytes per event: 12,000 events are ~2 MB per stream, past the
    # client's 1 MiB stream window, 4 streams past nothing but each other.
    async def main(url: str) -> list[RequestRecord]:
        async with Client(url, http2=True, idle_timeout=20) as client:
            return await send_all(client, [body(i, 12_000) for i in range(4)])

    with server(http2=True) as running:
        records = run(main(running.url))
    assert [r.error_message for r in records if not r.ok] == []
    assert all(r.response.content_events == 12_000 for r in records)


def test_more_connections_when_the_server_limits_streams() -> None:
    async def main(url: str) -> tuple[list[RequestRecord], Client]:
        async with Client(url, http2=True) as client:
            first = await client.request(body(0))  # learns the limit
            records = await send_all(client, [body(i) for i in range(16)])
        return [first, *records], client

    with server(http2=True, h2_max_streams=4, ttft_ms=Dist("fixed", 5)) as running:
        records, client = run(main(running.url))
    assert all(r.ok for r in records)
    assert client.http2_connections == client.connections_opened == 4


def test_timeouts_and_cancellation_end_each_stream_once() -> None:
    async def main(url: str) -> tuple[list[RequestRecord], list[RequestRecord]]:
        async with Client(url, http2=True, idle_timeout=0.2) as client:
            timed_out = await send_all(client, [body(i) for i in range(3)])
        done: list[RequestRecord] = []
        async with Client(url, http2=True) as client:
            for i in range(3):
                client.issue(body(i), done.append, sample_index=i)
            await asyncio.sleep(0.1)
        return timed_out, done

    with server(http2=True, ttft_ms=Dist("fixed", 2000)) as running:
        timed_out, cancelled = run(main(running.url))
    assert [r.error_class for r in timed_out] == ["IdleTimeout"] * 3
    assert sorted(r.sample_index for r in cancelled) == [0, 1, 2]
    assert {r.error_class for r in cancelled} == {"Cancelled"}


# --- endpoint mix-ups: said at once (Client.check_reachable, what a run checks first)

CONNECT_TIMEOUT = 10.0
AT_ONCE = 5.0  # well under CONNECT_TIMEOUT, loose enough for a loaded machine


@contextmanager
def stdlib_http_server() -> Iterator[str]:
    """The standard library's HTTP/1.x server (400 to a ClientHello, an
    HTTP/0.9-style error page to the HTTP/2 preface)."""

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


async def _http11_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An asyncio server of HTTP/1.1 only: waits for a whole request head
    (so it says nothing to a ClientHello), answers 400 to anything but
    HTTP/1.1, and hangs up."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        ok = head.split(b"\r\n", 1)[0].endswith(b" HTTP/1.1")
        status = b"200 OK" if ok else b"400 Bad Request"
        writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


async def _reachable(url: str, **options: Any) -> tuple[BaseException | None, float]:
    """check_reachable's error (None: reached) and how long it took."""
    async with Client(url, connect_timeout=CONNECT_TIMEOUT, **options) as client:
        t0 = time.monotonic()
        try:
            await client.check_reachable()
        except EndpointUnreachable as error:
            return error, time.monotonic() - t0
        return None, time.monotonic() - t0


async def _against_asyncio_servers(
    check: Callable[[str], Awaitable[tuple[BaseException | None, float]]],
) -> dict[str, tuple[BaseException | None, float]]:
    results = {}
    for name, handler in (("asyncio http/1.1", _http11_only), ("asyncio hang-up", _hang_up)):
        served = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = served.sockets[0].getsockname()[1]
        try:
            results[name] = await check(f"http://127.0.0.1:{port}")
        finally:
            served.close()
            await served.wait_closed()
    return results


def test_h2c_against_an_http11_server_is_said_at_once() -> None:
    async def h2c(url: str) -> tuple[BaseException | None, float]:
        return await _reachable(url, http2=True)

    async def records(url: str) -> list[RequestRecord]:
        async with Client(url, http2=True, connect_timeout=CONNECT_TIMEOUT) as client:
            return await send_all(client, [body(i) for i in range(2)])

    results = {}
    with server() as sim:  # HTTP/1.1 only: 505 to the preface, then it hangs up
        results["sim"] = asyncio.run(h2c(sim.url))
        sent = asyncio.run(records(sim.url))
    with stdlib_http_server() as url:
        results["stdlib"] = asyncio.run(h2c(url))
    results.update(asyncio.run(_against_asyncio_servers(h2c)))
    for name, (error, took) in results.items():
        assert isinstance(error, EndpointUnreachable), name
        assert error.error_class == "HTTP2Unsupported", (name, error)
        assert NO_H2C in str(error) and took < AT_ONCE, (name, took, error)
    assert "'HTTP/1.1 505 HTTP Version Not Supported'" in str(results["sim"][0])
    assert "'HTTP/1.1 400 Bad Request'" in str(results["asyncio http/1.1"][0])
    assert "hung up" in str(results["asyncio hang-up"][0])
    # Requests without the check: each record says it too.
    assert {r.error_class for r in sent} == {"HTTP2Unsupported"}
    assert all(NO_H2C in (r.error_message or "") for r in sent)
    with server(http2=True) as h2:  # and an h2c server passes
        assert asyncio.run(h2c(h2.url))[0] is None


def test_https_against_plain_http_is_said_at_once(tls_certs: Any) -> None:
    async def https(url: str) -> tuple[BaseException | None, float]:
        return await _reachable(url.replace("http://", "https://"), insecure=True)

    results = {}
    with server() as sim:  # waits, silent, for the end of a request head
        results["sim"] = asyncio.run(https(sim.url))
    with stdlib_http_server() as url:  # 400 to the ClientHello
        results["stdlib"] = asyncio.run(https(url))
    asyncio_results = asyncio.run(_against_asyncio_servers(https))
    results["asyncio http/1.1"] = asyncio_results["asyncio http/1.1"]  # silent too
    for name, (error, took) in results.items():
        assert isinstance(error, EndpointUnreachable), name
        assert error.error_class == "TLSError", (name, error)
        assert str(error).endswith(PLAIN_HTTP) and took < AT_ONCE, (name, took, error)
    # A server that hangs up is not taken for plain HTTP.
    error, took = asyncio_results["asyncio hang-up"]
    assert isinstance(error, EndpointUnreachable) and PLAIN_HTTP not in str(error)
    assert took < AT_ONCE
    with server(**tls_options(tls_certs, http2=True)) as secure:  # and TLS passes
        assert asyncio.run(_reachable(secure.url, ca_bundle=str(tls_certs.ca_file)))[0] is None
        assert asyncio.run(_reachable(secure.url, http2=True, insecure=True))[0] is None


@contextmanager
def nginx_like(certs: Any, handshake_delay_s: float) -> Iterator[str]:
    """A TLS port that answers plain HTTP with a 400, as nginx does ("The
    plain HTTP request was sent to HTTPS port"), and is slow to handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certs.cert_file), str(certs.key_file))
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                first = conn.recv(1, socket.MSG_PEEK)
                if first == b"\x16":  # a TLS handshake record
                    time.sleep(handshake_delay_s)
                    with context.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)  # until the client goes
                elif first:
                    conn.recv(4096)
                    text = b"The plain HTTP request was sent to HTTPS port"
                    conn.sendall(
                        b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(text), text)
                    )
            except OSError:  # ssl.SSLError included: the client went
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_a_tls_port_that_answers_plain_http_with_400_is_not_taken_for_plain(
    tls_certs: Any,
) -> None:
    with nginx_like(tls_certs, handshake_delay_s=2 * PLAIN_CHECK_AFTER_S) as url:
        reached, took = asyncio.run(_reachable(url, ca_bundle=str(tls_certs.ca_file)))
        refused, _ = asyncio.run(_reachable(url))  # its certificate is not trusted
    assert reached is None and took >= 2 * PLAIN_CHECK_AFTER_S
    assert isinstance(refused, EndpointUnreachable) and refused.error_class == "TLSError"
    assert "--ca-bundle" in str(refused) and PLAIN_HTTP not in str(refused)


def test_https_against_a_server_that_never_answers_waits_its_timeout() -> None:
    """Nothing to go by (no TLS, no HTTP answer): the connect timeout decides."""

    async def main() -> tuple[BaseException | None, float]:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # until the client goes
            writer.close()

        served = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = served.sockets[0].getsockname()[1]
        try:
            async with Client(f"https://127.0.0.1:{port}", connect_timeout=1.0) as client:
                t0 = time.monotonic()
                try:
                    await client.check_reachable()
                except EndpointUnreachable as error:
                    return error, time.monotonic() - t0
                return None, time.monotonic() - t0
        finally:
            served.close()
            await served.wait_closed()

    error, took = asyncio.run(main())
    assert isinstance(error, EndpointUnreachable) and error.error_class == "ConnectTimeout"
    assert 0.9 < took < AT_ONCE
