"""Kernel receive stamps end to end (issue 10): the engine against the
simulated endpoint (its own process) on loopback.

With kernel stamps a record's ``t_first`` and ``t_done`` are when the data
reached the machine and ``t_first_read`` / ``t_done_read`` when the client
read it, so for every record::

    t_issue <= t_first <= t_first_read,  t_done <= t_done_read,  t_first <= t_done

and the per-event stamps (``chunk_times``) rise between ``t_issue`` and the
last read.  Without them (``kernel_stamps=False``, another system, or a
kernel that refuses) the records are the same apart from the stamps.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import sys
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import mlpe_fast.sim
from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.engine.audit import audit_records
from mlpe_fast.engine.client import Client
from mlpe_fast.engine.connection import Connection
from mlpe_fast.engine.record import RequestRecord
from mlpe_fast.engine.stamped_socket import StampedSocketTransport
from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from tests.integration.scripted import read_request, serve
from tests.unit.test_arrival_clock import kernel_stamping_warm

LINUX = sys.platform == "linux"
linux_only = pytest.mark.skipif(
    not LINUX, reason="kernel receive stamps (SO_TIMESTAMPING on TCP) are Linux only"
)

OUTPUT_LEN = 8
# Fixed distributions and a seed: the same requests in the same order get
# the same responses from a fresh endpoint.
FLAGS = (
    *("--ttft-ms", "5", "--ttft-dist", "fixed", "--itl-ms", "1", "--itl-dist", "fixed"),
    *("--output-len", str(OUTPUT_LEN), "--output-len-dist", "fixed", "--seed", "7"),
)
DEMO_PROMPTS = str(Path(mlpe_fast.sim.__file__).parent / "demo_prompts.jsonl")


def body(max_tokens: int | None = None, text: str = "hi") -> dict[str, Any]:
    doc: dict[str, Any] = {
        "model": "mlpe-sim",
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if max_tokens is not None:
        doc["max_tokens"] = max_tokens
    return doc


@pytest.fixture(params=["thread", "loop"])
def reads(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Who reads kernel-stamped connections: the receive thread (the
    default) or the event loop itself."""
    return {"receive_thread": request.param == "thread"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(FLAGS) as url:
        yield url


def check_stamps(record: RequestRecord) -> None:
    """The ordering every record keeps, kernel-stamped or not."""
    where = f"record {record.sample_index}: {record}"
    t_first, t_done = record.t_first, record.t_done
    if t_first is not None:
        assert record.t_first_read is not None, where
        assert record.t_issue <= t_first <= record.t_first_read, where
    else:
        assert record.t_first_read is None, where
    if t_done is not None:
        assert record.t_done_read is not None, where
        assert t_done <= record.t_done_read, where
        if t_first is not None:
            assert t_first <= t_done, where
    else:
        assert record.t_done_read is None, where
    second, content = record.response.t_second, record.response.t_first_content
    for t in (second, content):  # R12's stamps: among the content-bearing events'
        if t is not None:
            assert t_first is not None and t_first <= t, where
    chunks = record.response.chunk_times
    if chunks:
        assert chunks[0] == t_first, where
        assert second is None or second == chunks[1], where
        assert content is None or content in chunks, where
        assert all(a <= b for a, b in itertools.pairwise(chunks)), where
        assert record.t_issue <= chunks[0], where
        last_read = record.t_done_read if record.t_done_read is not None else record.t_end
        assert chunks[-1] <= last_read, where
        if t_done is not None and record.response.done:
            assert chunks[-1] <= t_done, where
    if not record.kernel_stamps:
        assert (record.t_first_read, record.t_done_read) == (t_first, t_done), where


def without_stamps(record: RequestRecord) -> RequestRecord:
    """The record with every stamp (and the client's random sample id) blanked."""
    response = record.response
    usage = response.usage
    if usage is not None:  # the endpoint's own clock readings
        usage = {k: v for k, v in usage.items() if not k.startswith("mlpe_")}
    chunks = response.chunk_times
    gaps = response.gaps  # R12: their number is the stream's, their sizes the stamps'
    response = msgspec.structs.replace(
        response,
        t_head=None,
        t_first=None,
        t_done=None,
        usage=usage,
        chunk_times=None if chunks is None else (0,) * len(chunks),
        t_first_content=None,
        t_second=None,
        gaps=None
        if gaps is None
        else msgspec.structs.replace(gaps, zero=0, sum_ns=0, min_ns=0, max_ns=0, buckets=b""),
    )
    return msgspec.structs.replace(
        record,
        sample_id="",
        t_sched=0,
        t_issue=0,
        t_end=0,
        connect_ns=int(record.connect_ns > 0),
        t_first_read=None,
        t_done_read=None,
        kernel_stamps=False,
        response=response,
    )


async def sequential(
    url: str, bodies: list[dict[str, Any]], **options: Any
) -> tuple[list[RequestRecord], Client]:
    async with Client(url, record_chunk_times=True, **options) as client:
        records = [await client.request(b, sample_index=i) for i, b in enumerate(bodies)]
    return records, client


async def concurrent(
    url: str, bodies: list[dict[str, Any]], **options: Any
) -> tuple[list[RequestRecord], Client]:
    async with Client(url, record_chunk_times=True, **options) as client:
        records = await asyncio.wait_for(
            asyncio.gather(*(client.request(b, sample_index=i) for i, b in enumerate(bodies))), 30
        )
    return list(records), client


# -- the stamps ----------------------------------------------------------------


@linux_only
def test_every_record_is_kernel_stamped_and_ordered(endpoint: str, reads: dict[str, Any]) -> None:
    bodies = [body(max_tokens=m) for m in (3, 8, 12, 5)] * 4
    records, client = asyncio.run(concurrent(endpoint, bodies, max_connections=4, **reads))
    # The twin's receive thread is a Python thread: gone with the client.
    assert "mlpe-fast receive" not in [t.name for t in threading.enumerate()]
    assert client.connections_opened == 4
    assert client.kernel_stamped_connections == client.connections_opened
    clock = client.arrival_clock
    assert clock is not None and 0 < clock.error_ns < 1_000_000 and clock.steps == 0
    assert sorted(r.sample_index for r in records) == list(range(16))
    for record in records:
        assert record.ok, record.error_message
        assert record.kernel_stamps, record
        check_stamps(record)
        asked = bodies[record.sample_index]["max_tokens"]
        assert record.response.content_events == asked
        chunks = record.response.chunk_times
        assert chunks is not None and len(chunks) == record.response.content_events
        # The read of the last event is the read of [DONE] or later.
        assert record.t_first_read is not None and record.t_done_read is not None
        assert record.t_first_read <= record.t_done_read


@linux_only
def test_without_kernel_stamps_records_differ_only_in_their_stamps() -> None:
    bodies = [body(max_tokens=m, text=f"prompt {m}") for m in (1, 4, 8, 12, None, 2, 9, 6)]
    runs: dict[str, tuple[list[RequestRecord], Client]] = {}
    for name, options in (
        ("thread", {"receive_thread": True}),
        ("loop", {"receive_thread": False}),
        ("read", {"kernel_stamps": False}),
    ):
        with simulated_endpoint(FLAGS) as url:  # a fresh endpoint: the same responses
            runs[name] = asyncio.run(sequential(url, bodies, **options))
    read, read_client = runs["read"]
    assert read_client.kernel_stamped_connections == 0 and read_client.arrival_clock is None
    assert read_client.connections_opened == 1
    assert [r.kernel_stamps for r in read] == [False] * len(bodies)
    for record in read:
        assert record.ok, record.error_message
        check_stamps(record)
        assert record.t_first_read == record.t_first and record.t_done_read == record.t_done
    # Different lengths and finish reasons: the comparison covers something.
    assert {r.response.finish_reason for r in read} == {"length", "stop"}
    assert all(r.response.usage for r in read)
    for name in ("thread", "loop"):
        kernel, client = runs[name]
        assert client.kernel_stamped_connections == client.connections_opened == 1, name
        assert [r.kernel_stamps for r in kernel] == [True] * len(bodies), name
        for record in kernel:
            assert record.ok, record.error_message
            check_stamps(record)
        assert [without_stamps(r) for r in kernel] == [without_stamps(r) for r in read], name


def test_when_the_kernel_refuses_the_loop_transport_reads_with_read_stamps(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, reads: dict[str, Any]
) -> None:
    asked: list[Any] = []
    transports: list[Any] = []

    attach = Connection.attach_socket

    def refuse(self: Connection, sock: Any, clock: Any, *receiver: Any) -> bool:
        # Attached as usual (with a receive thread, registered with it), but
        # the kernel said no: the socket must go to the loop alone.
        attach(self, sock, clock, *receiver)
        asked.append(sock)
        return False

    made = Connection.connection_made

    def spy(self: Connection, transport: Any) -> None:
        transports.append(transport)
        made(self, transport)

    monkeypatch.setattr(Connection, "attach_socket", refuse)
    monkeypatch.setattr(Connection, "connection_made", spy)
    bodies = [body(max_tokens=m) for m in (2, 8, 12)] * 4
    records, client = asyncio.run(concurrent(endpoint, bodies, max_connections=3, **reads))
    # Asked once per connection, each of which went to the loop's transport.
    assert len(asked) == client.connections_opened == len(transports) == 3
    assert not any(isinstance(t, StampedSocketTransport) for t in transports)
    assert client.kernel_stamped_connections == 0
    assert client.arrival_clock is not None  # asked for, but the kernel said no
    assert len(records) == 12
    for record in records:
        assert record.ok, record.error_message
        assert not record.kernel_stamps
        check_stamps(record)
        assert record.t_first_read == record.t_first and record.t_done_read == record.t_done


@linux_only
def test_the_stamped_transport_carries_kernel_connections(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, reads: dict[str, Any]
) -> None:
    made: list[tuple[Any, bool]] = []
    connection_made = Connection.connection_made

    def spy(self: Connection, transport: Any) -> None:
        made.append((transport, self.threaded))
        connection_made(self, transport)

    monkeypatch.setattr(Connection, "connection_made", spy)
    records, client = asyncio.run(concurrent(endpoint, [body(max_tokens=4)] * 2, **reads))
    assert len(made) == client.connections_opened == client.kernel_stamped_connections
    assert all(isinstance(transport, StampedSocketTransport) for transport, _ in made)
    # Read by the receive thread exactly when one was asked for.
    assert [threaded for _, threaded in made] == [reads["receive_thread"]] * len(made)
    assert all(r.ok and r.kernel_stamps for r in records)


@linux_only
def test_a_busy_interpreter_shows_as_read_lag_not_in_the_stamps(
    endpoint: str, reads: dict[str, Any]
) -> None:
    stop = threading.Event()
    spins = [0]

    def hog() -> None:  # pure Python: holds the GIL for whole switch intervals
        n = 0
        while not stop.is_set():
            n += 1
        spins[0] = n

    thread = threading.Thread(target=hog, daemon=True)
    thread.start()
    try:
        records, client = asyncio.run(concurrent(endpoint, [body(max_tokens=6)] * 32, **reads))
    finally:
        stop.set()
        thread.join(10)
    assert spins[0] > 0 and not thread.is_alive()
    assert len(records) == 32
    assert client.kernel_stamped_connections == client.connections_opened > 0
    for record in records:
        assert record.ok, record.error_message
        assert record.kernel_stamps
        check_stamps(record)
    # The lag is there to see (read after arrival), whatever its size.
    assert any(r.t_first_read > r.t_first for r in records)  # type: ignore[operator]
    assert any(r.t_done_read > r.t_done for r in records)  # type: ignore[operator]


@linux_only
def test_keep_alive_reuse_stays_kernel_stamped(endpoint: str, reads: dict[str, Any]) -> None:
    async def run() -> tuple[list[RequestRecord], Client]:
        async with Client(endpoint, record_chunk_times=True, max_connections=1, **reads) as client:
            records = [await client.request(body(max_tokens=3), sample_index=i) for i in range(20)]
        return records, client

    records, client = asyncio.run(run())
    assert client.connections_opened == client.kernel_stamped_connections == 1
    for record in records:
        assert record.ok, record.error_message
        assert record.kernel_stamps and record.response.keep_alive
        check_stamps(record)
    assert [r.connect_ns > 0 for r in records] == [True] + [False] * 19
    # One after the other on one connection: a response's stamps never
    # reach back into the one before (the floor is the request).
    for before, after in itertools.pairwise(records):
        assert before.t_done_read is not None and after.t_first is not None
        assert before.t_done_read <= after.t_issue <= after.t_first


@linux_only
def test_queued_requests_on_one_connection_stay_kernel_stamped(
    endpoint: str, reads: dict[str, Any]
) -> None:
    records, client = asyncio.run(
        concurrent(endpoint, [body(max_tokens=2)] * 20, max_connections=1, **reads)
    )
    assert client.connections_opened == client.kernel_stamped_connections == 1
    assert len(records) == 20
    for record in records:
        assert record.ok and record.kernel_stamps, record
        check_stamps(record)


@linux_only
def test_warmed_up_connections_are_kernel_stamped(endpoint: str, reads: dict[str, Any]) -> None:
    async def run() -> tuple[list[RequestRecord], Client, int]:
        async with Client(endpoint, record_chunk_times=True, max_connections=3, **reads) as client:
            ready = await client.warm_up(3)
            records = await asyncio.gather(
                *(client.request(body(max_tokens=2), sample_index=i) for i in range(6))
            )
        return list(records), client, ready

    records, client, ready = asyncio.run(run())
    assert ready == 3
    assert client.connections_opened == client.kernel_stamped_connections == 3
    for record in records:
        assert record.ok and record.kernel_stamps, record
        assert record.connect_ns == 0  # the connections were open already
        check_stamps(record)


# -- failures --------------------------------------------------------------------


def failure_view(record: RequestRecord, exact: bool) -> tuple[Any, ...]:
    response = record.response
    view: tuple[Any, ...] = (record.sample_index, record.error_class, response.status)
    if exact:  # a clean close: exactly what was sent before it arrives
        view += (response.content_events, response.events, response.done, response.complete)
        view += (record.error_message, response.finish_reason)
    return view


@linux_only
@pytest.mark.parametrize(
    ("fault", "exact"),
    [
        ("reset-before-head", True),
        ("reset-mid-stream", False),  # an RST may discard what was unread
        ("truncated-chunk", True),
        ("close-after-response", True),
    ],
)
def test_a_server_that_closes_fails_alike_with_and_without_kernel_stamps(
    fault: str, exact: bool
) -> None:
    bodies = [body(max_tokens=OUTPUT_LEN)] * 6
    # Every request gets the fault: the same records whatever the order.
    with simulated_endpoint((*FLAGS, "--fault", fault)) as url:
        thread, thread_client = asyncio.run(sequential(url, bodies, receive_thread=True))
        loop, loop_client = asyncio.run(sequential(url, bodies, receive_thread=False))
        read, _ = asyncio.run(sequential(url, bodies, kernel_stamps=False))
    for client in (thread_client, loop_client):
        assert client.kernel_stamped_connections == client.connections_opened > 0
    expected = [failure_view(r, exact) for r in read]
    assert [failure_view(r, exact) for r in thread] == expected
    assert [failure_view(r, exact) for r in loop] == expected
    if fault == "close-after-response":
        assert all(r.ok for r in read)  # a new connection each time
    else:
        assert all(r.error_class for r in read), read
    for record in thread + loop + read:
        check_stamps(record)
        assert record.t_issue <= record.t_end
    for record in read:
        assert not record.kernel_stamps
    for record in thread + loop:
        # Kernel-stamped exactly when some stamp was taken from a read.
        assert record.kernel_stamps == (record.t_first is not None or record.t_done is not None)


@linux_only
@pytest.mark.parametrize("fraction", ["0.5", "1"])
def test_requests_that_never_got_a_byte_do_not_make_the_audit_say_read_time(
    fraction: str,
) -> None:
    # Every connection is kernel-stamped and every stamp taken is a kernel
    # stamp; some (or all) requests fail before any byte of a response, so
    # their records have no stamp to speak of.
    flags = (*FLAGS, "--fault", f"reset-before-head={fraction}")
    with simulated_endpoint(flags) as url:
        records, client = asyncio.run(sequential(url, [body(max_tokens=3)] * 12))
    assert client.kernel_stamped_connections == client.connections_opened > 0
    unstamped = [r for r in records if r.t_first is None and r.t_done is None]
    assert unstamped and all(r.error_class for r in unstamped)
    assert all(r.kernel_stamps for r in records if r not in unstamped)
    audit = audit_records(
        records,
        array("q"),
        0,
        client.connections_opened,
        0,
        arrival_clock=client.arrival_clock,
        kernel_stamped_connections=client.kernel_stamped_connections,
    )
    row = audit.as_rows()["receive stamps"]
    assert "gave no receive stamps" not in row, row
    assert audit.receive_stamps == "kernel", row


@linux_only
def test_a_body_ended_by_the_close_keeps_its_first_token_kernel_stamp(
    reads: dict[str, Any],
) -> None:
    events = [sse_event(chat_chunk(content=c)) for c in ("He", "llo")]
    response = http_response(
        [*events, sse_event(chat_chunk(finish_reason="stop"))], transfer="close"
    )

    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(response)
        await writer.drain()

    async def run() -> RequestRecord:
        async with serve(closing) as url, Client(url, **reads) as client:
            record = await client.request(body())
            assert client.kernel_stamped_connections == 1
            return record

    # The response comes at once: without stamping already on in the kernel
    # its first read could carry no stamp (see kernel_stamping_warm).
    with kernel_stamping_warm():
        record = asyncio.run(run())
    assert record.ok and record.response.content == "Hello" and not record.response.done
    # The end is the read that saw the close: on a kernel-stamped connection
    # the record is kernel-stamped, its first token an arrival stamp.
    assert record.kernel_stamps
    assert record.t_first is not None and record.t_first_read is not None
    assert record.t_done == record.t_done_read
    check_stamps(record)


@linux_only
def test_connections_the_server_closes_are_freed_without_the_garbage_collector(
    reads: dict[str, Any],
) -> None:
    # Each connection holds a 256 KiB read buffer: a transport that kept its
    # protocol after the end would leave every closed connection to a later
    # collection, and a run with connection churn would grow (the soak saw it).
    gc.collect()
    before = sum(isinstance(o, Connection) for o in gc.get_objects())
    gc.disable()
    try:
        with simulated_endpoint((*FLAGS, "--fault", "close-after-response=1")) as url:
            records, client = asyncio.run(
                sequential(url, [body(max_tokens=2)] * 20, max_connections=1, **reads)
            )
        alive = sum(isinstance(o, Connection) for o in gc.get_objects()) - before
    finally:
        gc.enable()
    assert all(r.ok for r in records)
    assert client.connections_opened == 20
    assert alive <= 1, f"{alive} connections outlived their end"


# -- HTTP/2 ---------------------------------------------------------------------------


@linux_only
def test_h2c_streams_are_kernel_stamped(reads: dict[str, Any]) -> None:
    # Many streams share each read of one connection: every stream's first
    # token and end carry the arrival stamp of the read that held them.
    with simulated_endpoint((*FLAGS, "--http2")) as url:
        records, client = asyncio.run(
            concurrent(url, [body(max_tokens=4)] * 8, http2=True, **reads)
        )
    assert client.http2_connections == client.connections_opened == 1
    assert client.kernel_stamped_connections == 1
    for record in records:
        assert record.ok, record.error_message
        assert record.kernel_stamps, record
        check_stamps(record)


def test_h2c_without_kernel_stamps_keeps_read_stamps() -> None:
    with simulated_endpoint((*FLAGS, "--http2")) as url:
        records, client = asyncio.run(
            concurrent(url, [body(max_tokens=4)] * 4, http2=True, kernel_stamps=False)
        )
    assert client.http2_connections == client.connections_opened == 1
    assert client.kernel_stamped_connections == 0
    for record in records:
        assert record.ok, record.error_message
        assert not record.kernel_stamps
        check_stamps(record)


# -- mlpe-fast run -------------------------------------------------------------------


def run_cli(url: str, *extra: str) -> list[str]:
    return [
        *("run", "--no-progress", "--concurrency", "4", "--duration", "300ms"),
        *("--endpoints", url, "--model", "mlpe-sim", "--tokenizer", DEMO_TOKENIZER),
        *("--dataset", DEMO_PROMPTS, "--max-output-tokens", "6"),
        *extra,
    ]


def audit_rows(out: str) -> dict[str, str]:
    """The self-audit's rows: label -> value."""
    rows: dict[str, str] = {}
    lines = out.split("self-audit\n", 1)[1].splitlines()
    for line in lines:
        if not line.startswith("  "):
            break
        label, _, value = line.strip().partition("  ")
        rows[label.strip()] = value.strip()
    return rows


@linux_only
def test_run_reports_kernel_stamps_and_the_read_lag(
    endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "kernel"
    assert main(run_cli(endpoint, "--report-dir", str(report))) == 0
    out = capsys.readouterr().out
    rows = audit_rows(out)
    assert rows["receive stamps"].startswith("kernel arrival: "), rows
    requests = int(out.split(" done, ", 1)[0].split()[-1].replace(",", ""))
    assert requests > 0
    assert f"{requests:,} of {requests:,} requests" in rows["receive stamps"]
    for which in ("p50", "p99", "max"):
        first, done = rows[f"read lag first / done {which}"].removesuffix(" ms").split(" / ")
        assert float(first) >= 0 and float(done) >= 0
    summary = json.loads((report / "performance" / "result_summary.json").read_text())
    audit = summary["mlpe_fast"]["self_audit"]
    assert audit["receive_stamps"] == "kernel"
    assert audit["kernel_stamped"] == audit["requests"] == requests
    assert 0 < audit["clock_map_error_us"] < 1000 and audit["clock_steps"] == 0
    assert audit["read_lag_first_p50_ms"] <= audit["read_lag_first_max_ms"]
    # The default is not written.
    assert "receive_stamps" not in (report / "config.yaml").read_text()


def test_run_with_read_stamps_says_so(
    endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "read"
    argv = run_cli(endpoint, "--receive-stamps", "read", "--report-dir", str(report))
    assert main(argv) == 0
    rows = audit_rows(capsys.readouterr().out)
    assert rows["receive stamps"].startswith("read time"), rows
    assert "--receive-stamps read" in rows["receive stamps"]
    assert not [label for label in rows if label.startswith("read lag")], rows
    summary = json.loads((report / "performance" / "result_summary.json").read_text())
    audit = summary["mlpe_fast"]["self_audit"]
    assert audit["receive_stamps"] == "read" and audit["kernel_stamped"] == 0
    config = (report / "config.yaml").read_text()
    mlpe_fast_section = config.split("\nmlpe_fast:\n", 1)[1]
    assert "\n  receive_stamps: read\n" in mlpe_fast_section

    # config.yaml runs again as written: read stamps still.
    again = tmp_path / "again"
    code = main(
        ["run", "--no-progress", "-c", str(report / "config.yaml"), "--report-dir", str(again)]
    )
    assert code == 0
    rows = audit_rows(capsys.readouterr().out)
    assert rows["receive stamps"].startswith("read time"), rows


def test_an_unknown_receive_stamps_source_is_a_usage_mistake(
    endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = run_cli(endpoint, "--receive-stamps", "bogus", "--report-dir", str(tmp_path / "r"))
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert "bogus" in captured.err and "--receive-stamps" in captured.err
    assert "Traceback" not in captured.err
    assert not (tmp_path / "r").exists()
