"""Segment stamps end to end (issue 23): ``--receive-stamps packet`` against
the simulated endpoint on loopback.

With a packet capture each byte a connection reads is stamped with the
arrival of the TCP segment that carried it (``csrc/mlpe_pktstamp.h``), so a
first token read together with later tokens keeps its own segment's stamp.
Every record keeps the ordering of kernel-stamped records
(``test_kernel_stamps.check_stamps``) and says where its first-token stamp
came from (``RequestRecord.segment_stamp``).  Skipped where a packet socket
cannot be opened (no CAP_NET_RAW); the fallback is tested everywhere with a
capture that refuses as the kernel does without the permission.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.engine import pool as pool_module
from mlpe_fast.engine._pktstamp import PacketCapture
from mlpe_fast.engine._receive_py import SEGMENT_STAMPED, SEGMENT_UNKNOWN
from mlpe_fast.engine.client import Client
from tests.integration.test_kernel_stamps import FLAGS, audit_rows, body, check_stamps, run_cli


def _capture_problem() -> str:
    try:
        PacketCapture(9, "127.0.0.1").close()
    except OSError as error:
        return str(error)
    return ""


PROBLEM = _capture_problem() if sys.platform == "linux" else "packet sockets are Linux's"
needs_capture = pytest.mark.skipif(bool(PROBLEM), reason=f"no packet capture here: {PROBLEM}")


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(FLAGS) as url:
        yield url


@pytest.fixture(params=["thread", "loop"])
def reads(request: pytest.FixtureRequest) -> dict[str, Any]:
    return {"receive_thread": request.param == "thread"}


async def concurrent(
    url: str, bodies: list[dict[str, Any]], **options: Any
) -> tuple[list[Any], Client]:
    async with Client(url, record_chunk_times=True, packet_stamps=True, **options) as client:
        records = await asyncio.wait_for(
            asyncio.gather(*(client.request(b, sample_index=i) for i, b in enumerate(bodies))), 30
        )
    return list(records), client


@needs_capture
def test_every_first_token_carries_its_segment_stamp(endpoint: str, reads: dict[str, Any]) -> None:
    bodies = [body(max_tokens=m) for m in (3, 8, 12, 5)] * 4
    records, client = asyncio.run(concurrent(endpoint, bodies, max_connections=4, **reads))
    assert client.packet_note == "" and client.capture_drops == 0
    for record in records:
        assert record.ok, record.error_message
        assert record.kernel_stamps, record
        assert record.segment_stamp == SEGMENT_STAMPED, record
        check_stamps(record)
        assert record.response.content_events == bodies[record.sample_index]["max_tokens"]


@needs_capture
def test_h2c_streams_on_one_connection_carry_segment_stamps(reads: dict[str, Any]) -> None:
    with simulated_endpoint((*FLAGS, "--http2")) as url:
        records, client = asyncio.run(
            concurrent(url, [body(max_tokens=4)] * 8, http2=True, **reads)
        )
    assert client.http2_connections == client.connections_opened == 1
    for record in records:
        assert record.ok, record.error_message
        assert record.segment_stamp == SEGMENT_STAMPED, record
        check_stamps(record)


@needs_capture
def test_a_connection_whose_syn_ack_the_capture_missed_falls_back_and_says_why(
    endpoint: str, reads: dict[str, Any]
) -> None:
    # Without its SYN-ACK the capture cannot map sequence numbers to offsets
    # (P5): the connection's first tokens take the read's kernel stamp, and
    # the record says why.  Forgetting the connection is what a capture
    # opened after the SYN-ACK amounts to.
    async def run() -> tuple[list[Any], Client]:
        async with Client(endpoint, packet_stamps=True, max_connections=1, **reads) as client:
            first = await client.request(body(max_tokens=3))
            pool = client._pool
            assert pool is not None and pool.capture is not None
            (connection,) = pool._open
            assert connection.transport is not None
            sock = connection.transport.get_extra_info("socket")
            pool.capture.forget(sock.getsockname()[1])
            second = await client.request(body(max_tokens=3))
        return [first, second], client

    records, client = asyncio.run(run())
    assert client.connections_opened == 1
    assert [r.ok for r in records] == [True, True]
    assert [r.segment_stamp for r in records] == [SEGMENT_STAMPED, SEGMENT_UNKNOWN]
    for record in records:
        assert record.kernel_stamps
        check_stamps(record)


def test_without_the_permission_the_run_warns_once_and_uses_kernel_stamps(
    endpoint: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(port: int, host: str, ring_frames: int = 16384) -> Any:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(pool_module, "PacketCapture", refused)
    report = tmp_path / "r"
    argv = run_cli(endpoint, "--receive-stamps", "packet", "--report-dir", str(report))
    assert main(argv) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "--receive-stamps packet" in line]
    assert warnings == [
        "mlpe-fast: warning: --receive-stamps packet: a packet socket needs CAP_NET_RAW "
        "(run as root or grant it); using kernel stamps"
    ], captured.err
    rows = audit_rows(captured.out)
    assert rows["receive stamps"].startswith("kernel arrival: "), rows
    assert rows["segment stamps"].startswith("off: a packet socket needs CAP_NET_RAW"), rows
    audit = json.loads((report / "performance" / "result_summary.json").read_text())
    assert audit["mlpe_fast"]["self_audit"]["segment_stamped"] == 0


@needs_capture
def test_run_with_packet_stamps_reports_them(
    endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "packet"
    argv = run_cli(endpoint, "--receive-stamps", "packet", "--report-dir", str(report))
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err, captured.err
    rows = audit_rows(captured.out)
    requests = int(captured.out.split(" done, ", 1)[0].split()[-1].replace(",", ""))
    assert requests > 0
    assert rows["segment stamps"].startswith(f"{requests:,} of {requests:,} first tokens"), rows
    audit = json.loads((report / "performance" / "result_summary.json").read_text())
    self_audit = audit["mlpe_fast"]["self_audit"]
    assert self_audit["segment_stamped"] == requests
    assert self_audit["segment_unknown"] == self_audit["segment_lost"] == 0
    config = (report / "config.yaml").read_text()
    assert "\n  receive_stamps: packet\n" in config.split("\nmlpe_fast:\n", 1)[1]


def test_packet_stamps_over_tls_warn_and_fall_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from mlpe_fast.config import RunConfig
    from mlpe_fast.point.setup import _check_packet_stamps

    config = RunConfig(receive_stamps="packet")  # type: ignore[call-arg]
    _check_packet_stamps(config, ["https://127.0.0.1:1/v1"], sys.stderr)
    err = capsys.readouterr().err
    assert err == (
        "mlpe-fast: warning: --receive-stamps packet: segment stamps apply to cleartext "
        "connections only; using kernel stamps\n"
    )


# -- HTTP/2: first reads that carried later frames ------------------------------------


@pytest.fixture(scope="module")
def h2c_endpoint() -> Iterator[str]:
    with simulated_endpoint((*FLAGS, "--http2")) as url:
        yield url


def _later_frames(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[str, dict[str, Any]]:
    """The audit row and the summary's self_audit of an h2c run of 8 streams."""
    report = tmp_path / "run"
    argv = run_cli(url, "--http2", "--concurrency", "8", "--report-dir", str(report), *flags)
    assert main(argv) == 0
    rows = audit_rows(capsys.readouterr().out)
    summary = json.loads((report / "performance" / "result_summary.json").read_text())
    return rows["first reads carrying later frames"], summary["mlpe_fast"]["self_audit"]


@pytest.mark.pipeline
def test_h2c_run_counts_first_reads_carrying_later_frames(
    h2c_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The simulated endpoint writes the frames of every stream due at once in
    # one write, so 8 streams' first tokens share reads: most carry later
    # frames, and with the read's one kernel stamp those may have moved.
    row, audit = _later_frames(h2c_endpoint, tmp_path, capsys, "--receive-stamps", "kernel")
    assert audit["http2_connections"] >= 1
    assert audit["first_tokens"] == audit["requests"] > 0
    assert 0 < audit["first_reads_with_later"] <= audit["first_tokens"]
    assert audit["first_reads_with_later_segment"] == 0
    share = audit["first_reads_with_later"] / audit["first_tokens"]
    assert row == (
        f"{audit['first_reads_with_later']:,} of {audit['first_tokens']:,} first tokens "
        f"({share:.1%}); {audit['multiplex_verdict']}"
    ), row
    if share > 0.01:
        assert "NOT to be trusted" in row and "--receive-stamps packet" in row, row


@needs_capture
@pytest.mark.pipeline
def test_h2c_run_with_segment_stamps_says_they_are_exact(
    h2c_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row, audit = _later_frames(h2c_endpoint, tmp_path, capsys, "--receive-stamps", "packet")
    assert 0 < audit["first_reads_with_later"] <= audit["first_tokens"]
    # Each piece of a read is one segment: what came after the first token in
    # it arrived with it.
    assert audit["first_reads_with_later_segment"] == audit["first_reads_with_later"]
    assert "(exact per segment); TTFT tail to be trusted" in row, row
