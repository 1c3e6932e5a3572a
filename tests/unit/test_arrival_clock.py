"""Kernel receive stamps in the engine's read path: ArrivalClock (rules K3
and K4 of ``csrc/mlpe_rxstamp.h``) and ReadCore.read_socket (K1, K2), over
the compiled core (``_receive_c``, ``_reader_c``) and its pure-Python twin
(``_receive_py``, ``_reader_py``).

The clock's tests hand ``arrival()`` made-up stamps around the present; the
read tests stamp real data on a loopback TCP connection.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import select
import socket
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from mlpe_fast._native import USE_EXTENSIONS
from mlpe_fast.engine import _receive_py
from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event

MS = 1_000_000
# Generous bounds for a loaded CI machine: a clock read takes tens of ns, and
# the best of five brackets is far below these.
MAX_ERROR_NS = 1 * MS
LINUX = sys.platform == "linux"


@pytest.fixture
def reader(impl: str) -> ModuleType:
    """The receive path (ArrivalClock, ReceiveThread) and the read core
    (ReadCore) of one implementation, as one namespace."""
    if impl == "c" and not USE_EXTENSIONS:
        pytest.skip("compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
    both = ModuleType(f"read path ({impl})")
    for name in ("_receive", "_reader"):
        both.__dict__.update(vars(importlib.import_module(f"mlpe_fast.engine.{name}_{impl}")))
    return both


def realtime_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


def bracketed_offset() -> tuple[int, int]:
    """monotonic - realtime measured here, and the width of its bracket."""
    before = time.monotonic_ns()
    wall = realtime_ns()
    after = time.monotonic_ns()
    return (before + after) // 2 - wall, after - before


# -- ArrivalClock: the mapping (K3) -------------------------------------------


def test_sampling_gives_a_small_error_bound_and_the_clocks_offset(reader: ModuleType) -> None:
    before = time.monotonic_ns()
    clock = reader.ArrivalClock()
    after = time.monotonic_ns()
    assert 0 < clock.error_ns <= MAX_ERROR_NS
    assert before <= clock.sampled_at <= after
    assert (clock.steps, clock.last_step_ns) == (0, 0)
    offset, width = bracketed_offset()
    # Both are monotonic - realtime: they agree within both brackets.
    assert abs(clock.offset_ns - offset) <= clock.error_ns + width + MAX_ERROR_NS


def test_resampling_without_a_step_counts_none(reader: ModuleType) -> None:
    clock = reader.ArrivalClock()
    first = clock.sampled_at
    for _ in range(5):
        clock.sample()
    assert clock.sampled_at > first
    assert 0 < clock.error_ns <= MAX_ERROR_NS
    assert (clock.steps, clock.last_step_ns) == (0, 0)


def test_a_plausible_stamp_passes_through_unchanged(reader: ModuleType) -> None:
    clock = reader.ArrivalClock()
    sampled_at, offset = clock.sampled_at, clock.offset_ns
    t_read = time.monotonic_ns()
    t_realtime = t_read - 2 * MS - offset  # arrived 2 ms before the read
    assert clock.arrival(t_realtime, t_read, t_read - 10 * MS) == t_read - 2 * MS
    # In bounds and recently sampled: no re-sample.
    assert (clock.sampled_at, clock.offset_ns) == (sampled_at, offset)


def test_a_stamp_after_the_read_is_clamped_to_the_read(reader: ModuleType) -> None:
    clock = reader.ArrivalClock()
    sampled_at = clock.sampled_at
    t_read = time.monotonic_ns()
    t_realtime = realtime_ns() + 50 * MS  # 50 ms in the future
    assert clock.arrival(t_realtime, t_read, t_read - 10 * MS) == t_read
    # Impossible: the clock re-sampled at once (K4), found no step.
    assert clock.sampled_at > sampled_at
    assert clock.steps == 0


def test_a_stamp_before_the_floor_is_clamped_to_the_floor(reader: ModuleType) -> None:
    clock = reader.ArrivalClock()
    sampled_at = clock.sampled_at
    t_read = time.monotonic_ns()
    floor = t_read - 5 * MS
    t_realtime = floor - 50 * MS - clock.offset_ns  # long before the request
    assert clock.arrival(t_realtime, t_read, floor) == floor
    assert clock.sampled_at > sampled_at
    assert clock.steps == 0


def test_a_stamp_within_the_error_bound_is_clamped_without_resampling(
    reader: ModuleType,
) -> None:
    clock = reader.ArrivalClock()
    sampled_at = clock.sampled_at
    t_read = time.monotonic_ns()
    # Exactly one error bound past the read: possible, so no re-sample, but
    # still clamped to the read.
    t_realtime = t_read + clock.error_ns - clock.offset_ns
    assert clock.arrival(t_realtime, t_read, t_read - MS) == t_read
    assert clock.sampled_at == sampled_at


def test_resamples_when_the_last_sample_is_too_old(reader: ModuleType) -> None:
    clock = reader.ArrivalClock()
    sampled_at, offset = clock.sampled_at, clock.offset_ns
    # One nanosecond short of RESAMPLE_NS: the sample is still fresh.
    t_read = sampled_at + reader.RESAMPLE_NS
    mapped = t_read - MS
    assert clock.arrival(mapped - offset, t_read, t_read - 2 * MS) == mapped
    assert clock.sampled_at == sampled_at
    # Past it: re-sampled before mapping.
    t_read += 1
    stamp = clock.arrival(mapped - offset, t_read, t_read - 2 * MS)
    assert clock.sampled_at > sampled_at
    assert t_read - 2 * MS <= stamp <= t_read
    assert abs(stamp - mapped) <= 2 * clock.error_ns + MAX_ERROR_NS
    assert clock.steps == 0


# -- ArrivalClock: wall-clock steps (K4), on the twin's plain attributes ------


@pytest.mark.parametrize("step_ns", [5 * MS, -5 * MS])
def test_a_wall_clock_step_is_caught_by_an_impossible_stamp(step_ns: int) -> None:
    clock = _receive_py.ArrivalClock()
    # The wall clock stepped by step_ns since the sample: the kept offset is
    # wrong by as much (realtime + offset must be monotonic).
    clock.offset_ns -= step_ns
    t_read = time.monotonic_ns()
    floor = t_read - 2 * MS
    t_realtime = realtime_ns() - MS  # truly arrived about 1 ms ago
    stamp = clock.arrival(t_realtime, t_read, floor)
    assert clock.steps == 1
    assert abs(clock.last_step_ns - step_ns) <= MAX_ERROR_NS
    # The re-sampled offset maps the stamp where it belongs.
    assert floor <= stamp <= t_read
    assert abs(stamp - (t_realtime + clock.offset_ns)) <= clock.error_ns


def test_a_move_below_the_step_threshold_is_not_a_step() -> None:
    clock = _receive_py.ArrivalClock()
    clock.offset_ns -= 5_000  # 5 µs: below MLPE_CLOCKMAP_STEP_NS (20 µs)
    clock.sample()
    assert (clock.steps, clock.last_step_ns) == (0, 0)
    clock.offset_ns -= 200_000  # 200 µs: a step
    clock.sample()
    assert clock.steps == 1
    assert abs(clock.last_step_ns - 200_000) <= MAX_ERROR_NS


def test_a_step_is_counted_by_the_periodic_resample() -> None:
    clock = _receive_py.ArrivalClock()
    clock.offset_ns += 3 * MS
    t_read = clock.sampled_at + _receive_py.RESAMPLE_NS + 1
    # The stamp is plausible under the stale offset; the age alone re-samples.
    clock.arrival(t_read - MS - clock.offset_ns, t_read, t_read - 10 * MS)
    assert clock.steps == 1
    assert abs(clock.last_step_ns + 3 * MS) <= MAX_ERROR_NS


# -- ReadCore.read_socket: real arrival stamps on loopback TCP (K1, K2) -------


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))


def recorder(reader: ModuleType) -> Any:
    class Recorder(reader.ReadCore):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            reader.ReadCore.__init__(self, {"record_chunk_times": True})
            self.calls: list[tuple[str, int]] = []

        def on_first_token(self, t_ns: int) -> None:
            self.calls.append(("first", t_ns))

        def on_response_done(self, t_ns: int) -> None:
            self.calls.append(("done", t_ns))

        def on_response_failed(self, t_ns: int, error: Exception) -> None:
            raise AssertionError(f"failed: {error!r}")

        def on_unsolicited(self, nbytes: int) -> None:
            raise AssertionError(f"unsolicited: {nbytes}")

    return Recorder()


@contextlib.contextmanager
def kernel_stamping_warm() -> Iterator[None]:
    """Keeps the kernel's receive stamping switched on while a test runs.

    Linux switches software receive stamps on for the whole system when the
    first socket asks for them, through deferred work
    (``net_enable_timestamp``): data that arrives in the moment after the
    first ``SO_TIMESTAMPING`` socket appears can come without a stamp.  These
    tests are about what a read does with a stamp, so a socket of their own
    keeps stamping on, and they start once a probe read carries a stamp."""
    if not LINUX:
        yield
        return
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as keeper:
        assert _receive_py.enable_kernel_stamps(keeper)
        deadline = time.monotonic() + 5
        while not probe_is_stamped():
            assert time.monotonic() < deadline, "the kernel never stamped a probe read"
            time.sleep(0.001)
        yield


def probe_is_stamped() -> bool:
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname()) as client,
    ):
        server, _ = listener.accept()
        with server:
            assert _receive_py.enable_kernel_stamps(client)
            server.sendall(b"x")
            _, ancillary, _, _ = client.recvmsg(1, 256)
    return _receive_py._kernel_stamp(ancillary) != 0


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(client, server): a connected loopback TCP pair, the client
    non-blocking, with the kernel's receive stamping on."""
    with kernel_stamping_warm():
        with socket.create_server(("127.0.0.1", 0)) as listener:
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
        client.setblocking(False)
        try:
            yield client, server
        finally:
            client.close()
            server.close()


def wait_readable(sock: socket.socket) -> None:
    """Until the kernel has queued something (data or the end) to read: on a
    busy machine the receive path can run a little after the send."""
    readable, _, _ = select.select([sock], [], [], 5)
    assert readable, "nothing arrived within 5 s"


HEAD_AND_FIRST = http_response([sse_event(chat_chunk(content="He"))])
# http_response ends with the last chunk; the test sends it separately.
LAST_CHUNK = b"0\r\n\r\n"
assert HEAD_AND_FIRST.endswith(LAST_CHUNK)
HEAD_AND_FIRST = HEAD_AND_FIRST[: -len(LAST_CHUNK)]
REST = (
    b"".join(
        f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        for piece in (
            sse_event(chat_chunk(content="llo")),
            sse_event(chat_chunk(finish_reason="stop")),
            sse_event(b"[DONE]"),
        )
    )
    + LAST_CHUNK
)


@pytest.mark.skipif(not LINUX, reason="SO_TIMESTAMPING on TCP is Linux only")
def test_reads_carry_the_arrival_stamp_of_their_newest_data(
    reader: ModuleType, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    client, server = tcp_pair
    core = recorder(reader)
    clock = reader.ArrivalClock()
    assert core.attach_socket(client, clock) is True
    assert core.read_socket() == -errno.EAGAIN  # nothing yet
    t_issue = core.begin(FakeTransport(), b"GET / HTTP/1.1\r\n\r\n", True)

    server.sendall(HEAD_AND_FIRST)
    t_sent = time.monotonic_ns()
    time.sleep(0.02)  # the client is busy: the data waits in the socket
    wait_readable(client)
    assert core.read_socket() == len(HEAD_AND_FIRST)
    (name, t_first), *more = core.calls
    assert name == "first" and not more
    # The arrival, not the read: stamped as the data reached the socket.
    assert t_issue <= t_first <= t_sent + clock.error_ns
    assert core.first_read_ns > t_sent and core.kernel_first
    assert core.last_read_ns == core.first_read_ns

    # Two segments waiting: the read carries the stamp of the newer (K2).
    half = len(REST) // 2
    server.sendall(REST[:half])
    time.sleep(0.01)
    t_before_second = time.monotonic_ns()
    server.sendall(REST[half:])
    t_second_sent = time.monotonic_ns()
    time.sleep(0.01)
    wait_readable(client)
    assert core.read_socket() == len(REST)
    assert core.calls[-1][0] == "done"
    t_done = core.calls[-1][1]
    assert t_before_second - clock.error_ns <= t_done <= t_second_sent + clock.error_ns
    assert core.done_read_ns > t_second_sent and core.kernel_done

    summary = core.take_summary()
    assert summary.content == "Hello" and summary.complete
    assert (summary.t_first, summary.t_done) == (t_first, t_done)
    assert summary.chunk_times == (t_first, t_done)

    server.close()
    wait_readable(client)
    assert core.read_socket() == 0  # the end of the stream


@pytest.mark.skipif(not LINUX, reason="SO_TIMESTAMPING on TCP is Linux only")
def test_stamps_never_go_below_the_request_or_an_earlier_stamp(
    reader: ModuleType, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    client, server = tcp_pair
    core = recorder(reader)
    assert core.attach_socket(client, reader.ArrivalClock())
    # The response is already waiting when the request is sent: its arrival
    # stamp predates t_issue and is clamped up to it.
    server.sendall(HEAD_AND_FIRST)
    time.sleep(0.005)
    wait_readable(client)
    t_issue = core.begin(FakeTransport(), b"GET / HTTP/1.1\r\n\r\n", True)
    assert core.read_socket() == len(HEAD_AND_FIRST)
    assert core.calls == [("first", t_issue)]
    assert core.kernel_first and core.first_read_ns >= t_issue


def wait_dispatched(receiver: Any, core: Any, woken: list[str]) -> None:
    """What the loop does when the receive thread's wake_fd is readable."""
    before = len(woken)
    for _ in range(100):
        readable, _, _ = select.select([receiver.wake_fd], [], [], 5)
        assert readable, "the receive thread never woke the loop"
        receiver.dispatch()
        if len(woken) > before:
            return
    raise AssertionError("dispatch never reached the core")


@pytest.mark.skipif(not LINUX, reason="the receive thread (epoll, eventfd) is Linux only")
def test_with_a_receive_thread_each_read_keeps_its_own_stamp(
    reader: ModuleType, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    client, server = tcp_pair
    core = recorder(reader)
    clock = reader.ArrivalClock()
    receiver = reader.ReceiveThread()
    try:
        assert receiver.running
        woken: list[str] = []
        core.on_received = lambda: woken.append("received")
        assert core.attach_socket(client, clock, receiver) is True
        assert core.threaded
        t_issue = core.begin(FakeTransport(), b"GET / HTTP/1.1\r\n\r\n", True)

        server.sendall(HEAD_AND_FIRST)
        t_first_sent = time.monotonic_ns()
        time.sleep(0.02)  # the thread reads this now, on its own
        t_before_second = time.monotonic_ns()
        server.sendall(REST)
        t_second_sent = time.monotonic_ns()
        time.sleep(0.01)
        # The loop comes round late and takes both reads at once...
        wait_dispatched(receiver, core, woken)
        taken = 0
        while taken < len(HEAD_AND_FIRST) + len(REST):
            n = core.read_socket()
            if n == -errno.EAGAIN:
                wait_dispatched(receiver, core, woken)
                continue
            assert n > 0
            taken += n
        assert taken == len(HEAD_AND_FIRST) + len(REST)
        # ...but the first token keeps its own arrival, not the second's (K2).
        assert [name for name, _ in core.calls] == ["first", "done"]
        [(_, t_first), (_, t_done)] = core.calls
        assert t_issue <= t_first <= t_first_sent + clock.error_ns
        assert t_before_second - clock.error_ns <= t_done <= t_second_sent + clock.error_ns
        assert core.kernel_first and core.kernel_done
        # The read stamps are the thread's reads, not the loop's late take.
        assert t_first <= core.first_read_ns < t_before_second
        assert t_done <= core.done_read_ns
        summary = core.take_summary()
        assert summary.content == "Hello" and summary.chunk_times == (t_first, t_done)

        server.close()
        while (n := core.read_socket()) == -errno.EAGAIN:
            wait_dispatched(receiver, core, woken)
        assert n == 0  # the end of the stream, after the chunks
        core.detach_socket()
        assert not core.threaded
    finally:
        core.detach_socket()
        receiver.stop()
        assert not receiver.running


@pytest.mark.skipif(not LINUX, reason="the receive thread (epoll, eventfd) is Linux only")
def test_a_receive_thread_that_is_not_taken_from_holds_back_and_loses_nothing(
    reader: ModuleType, tcp_pair: tuple[socket.socket, socket.socket]
) -> None:
    # T3: past 4 MiB waiting for the loop the thread stops reading (TCP's
    # window pushes back on the sender); taking lets it go on.  Bytes with
    # no request in flight go to on_unsolicited, which counts them here.
    client, server = tcp_pair
    received: list[int] = []
    woken: list[str] = []

    class Counter(reader.ReadCore):  # type: ignore[name-defined,misc]
        def on_unsolicited(self, nbytes: int) -> None:
            received.append(nbytes)

    core = Counter({})
    core.on_received = lambda: woken.append("received")
    receiver = reader.ReceiveThread()
    total = 32 << 20
    sender = threading.Thread(target=server.sendall, args=(b"z" * total,))
    try:
        core.attach_socket(client, reader.ArrivalClock(), receiver)
        sender.start()
        time.sleep(0.3)  # the loop is away: the thread reads until it must stop
        assert sender.is_alive(), "32 MiB went through with nobody taking"
        taken = 0
        deadline = time.monotonic() + 20
        while taken < total:
            assert time.monotonic() < deadline, f"stalled after {taken} of {total} bytes"
            n = core.read_socket()
            if n == -errno.EAGAIN:
                wait_dispatched(receiver, core, woken)
                continue
            assert n > 0
            taken += n
        assert taken == sum(received) == total
        sender.join(10)
        assert not sender.is_alive()
    finally:
        core.detach_socket()
        receiver.stop()
        sender.join(10)


def test_reads_through_the_loop_keep_read_stamps(reader: ModuleType) -> None:
    core = recorder(reader)
    core.begin(FakeTransport(), b"GET / HTTP/1.1\r\n\r\n", True)
    data = HEAD_AND_FIRST + REST
    core.get_buffer(-1)[: len(data)] = data
    core.buffer_updated(len(data))
    t_read = core.last_read_ns
    assert core.calls == [("first", t_read), ("done", t_read)]
    assert core.first_read_ns == core.done_read_ns == t_read
    assert not core.kernel_first and not core.kernel_done


def test_attach_socket_reports_whether_the_kernel_stamps(reader: ModuleType) -> None:
    core = recorder(reader)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        assert core.attach_socket(sock, reader.ArrivalClock()) is LINUX
        if LINUX:
            flags = sock.getsockopt(socket.SOL_SOCKET, 37)  # SO_TIMESTAMPING
            assert flags & ((1 << 3) | (1 << 4)) == (1 << 3) | (1 << 4)
