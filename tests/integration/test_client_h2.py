"""The client over HTTP/2 (h2c and TLS) and over HTTPS, against the simulated
endpoint on loopback: the same records as over HTTP/1.1, and every fault of
HTTP/2 (a reset stream, a refused one, GOAWAY mid-run, a one-byte window)
ends in exactly one correct record per request.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mlpe_fast.engine import Client, ClientConfigError, RequestRecord
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
