"""The receive thread places itself (rule T8 of ``csrc/mlpe_rxthread.h``):
SCHED_FIFO at the priority asked for where the system permits it, a CPU pin,
for that thread only, and a refusal that falls back and says so; over the
compiled thread (``_receive_c``) and its twin (``_receive_py``).

What a thread reports is checked against what the kernel says of it
(``os.sched_getscheduler(tid)``, ``os.sched_getaffinity(tid)``), never
against itself.  The refusal runs in a forked child that gives up root's
rights (``setuid`` to nobody, ``RLIMIT_RTPRIO`` 0).
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import resource
import socket
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mlpe_fast._native import USE_EXTENSIONS
from tests.unit.test_arrival_clock import (
    HEAD_AND_FIRST,
    FakeTransport,
    recorder,
    tcp_pair,  # noqa: F401 (a fixture)
    wait_dispatched,
)

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the receive thread (epoll, eventfd) is Linux only"
)

NOBODY = 65534


@pytest.fixture
def reader(impl: str) -> ModuleType:
    """The receive path and the read core of one implementation."""
    if impl == "c" and not USE_EXTENSIONS:
        pytest.skip("compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
    both = ModuleType(f"read path ({impl})")
    for name in ("_receive", "_reader"):
        both.__dict__.update(vars(importlib.import_module(f"mlpe_fast.engine.{name}_{impl}")))
    return both


def policy_name(policy: int) -> str:
    return {os.SCHED_OTHER: "normal", os.SCHED_FIFO: "fifo", os.SCHED_RR: "rr"}.get(policy, "other")


def fifo_permitted() -> bool:
    """Whether a thread of this process may make itself SCHED_FIFO (root,
    CAP_SYS_NICE or RLIMIT_RTPRIO, and a container that lets it)."""
    permitted: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            permitted.append(False)
        else:
            permitted.append(True)
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return permitted[0]


def test_a_thread_that_asks_nothing_keeps_the_process_placement(reader: ModuleType) -> None:
    receiver = reader.ReceiveThread()
    try:
        got = receiver.scheduling()
        assert got.tid != threading.get_native_id()
        assert Path(f"/proc/self/task/{got.tid}").is_dir()  # a thread of this process
        assert got.cpus == sorted(os.sched_getaffinity(0))
        assert got.policy == policy_name(os.sched_getscheduler(got.tid))
        assert got.policy == policy_name(os.sched_getscheduler(0))  # inherited
        assert (got.asked_priority, got.asked_cpus, got.refused) == (0, [], "")
        # It ran, then slept in its wait: a busy machine may preempt it
        # first (the twin's thread also waits for the interpreter), so the
        # sleep is awaited rather than assumed by the first look.
        deadline = time.monotonic() + 10
        while got.voluntary_switches < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
            got = receiver.scheduling()
        assert got.timeslices >= 1 and got.voluntary_switches >= 1
    finally:
        receiver.stop()
    # Once stopped, the thread is gone and its last figures stay.  (A joined
    # Python thread may still be leaving the kernel for a moment: awaited.)
    task = Path(f"/proc/self/task/{got.tid}")
    deadline = time.monotonic() + 10
    while task.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not task.exists()
    assert receiver.scheduling().tid == got.tid
    assert receiver.scheduling().timeslices >= got.timeslices


def test_fifo_is_granted_where_permitted_and_to_that_thread_alone(reader: ModuleType) -> None:
    if not fifo_permitted():
        pytest.skip("this process may not use SCHED_FIFO (no root, CAP_SYS_NICE or RLIMIT_RTPRIO)")
    before = os.sched_getscheduler(0)
    receiver = reader.ReceiveThread(10)
    try:
        got = receiver.scheduling()
        assert (got.policy, got.priority, got.refused) == ("fifo", 10, "")
        assert os.sched_getscheduler(got.tid) == os.SCHED_FIFO
        assert os.sched_getparam(got.tid).sched_priority == 10
        # Only that thread: the loop's thread keeps its policy.
        assert os.sched_getscheduler(0) == before
        assert os.sched_getscheduler(threading.get_native_id()) == before
    finally:
        receiver.stop()


def test_a_pin_holds_that_thread_alone(reader: ModuleType) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1]
    receiver = reader.ReceiveThread(0, (cpu,))
    try:
        got = receiver.scheduling()
        assert (got.cpus, got.asked_cpus, got.refused) == ([cpu], [cpu], "")
        assert os.sched_getaffinity(got.tid) == {cpu}
        assert sorted(os.sched_getaffinity(0)) == allowed
    finally:
        receiver.stop()


def test_a_pin_the_system_refuses_falls_back_and_says_so(
    reader: ModuleType,
    tcp_pair: tuple[socket.socket, socket.socket],  # noqa: F811
) -> None:
    outside = 1023  # the last CPU a set holds; no machine here has it
    if outside in os.sched_getaffinity(0):
        pytest.skip("this machine has CPU 1023")
    client, server = tcp_pair
    receiver = reader.ReceiveThread(0, (outside,))
    core = recorder(reader)
    try:
        got = receiver.scheduling()
        assert got.refused == f"CPUs {outside}: EINVAL", got
        assert got.cpus == sorted(os.sched_getaffinity(0))
        # ...and the thread reads as ever.
        woken: list[str] = []
        core.on_received = lambda: woken.append("received")
        assert core.attach_socket(client, reader.ArrivalClock(), receiver)
        core.begin(FakeTransport(), b"GET / HTTP/1.1\r\n\r\n", True)
        server.sendall(HEAD_AND_FIRST)
        wait_dispatched(receiver, core, woken)
        assert core.read_socket() == len(HEAD_AND_FIRST)
        assert [name for name, _ in core.calls] == ["first"]
    finally:
        core.detach_socket()
        receiver.stop()


def test_the_thread_counts_its_wake_ups(
    reader: ModuleType,
    tcp_pair: tuple[socket.socket, socket.socket],  # noqa: F811
) -> None:
    client, server = tcp_pair
    receiver = reader.ReceiveThread()
    core = recorder(reader)
    try:
        woken: list[str] = []
        core.on_received = lambda: woken.append("received")
        assert core.attach_socket(client, reader.ArrivalClock(), receiver)
        core.begin(FakeTransport(), b"GET / HTTP/1.1\r\n\r\n", True)
        start = receiver.scheduling()
        pieces = 20
        for i in range(pieces):
            server.sendall(HEAD_AND_FIRST[i : i + 1])
            wait_dispatched(receiver, core, woken)
            while core.read_socket() > 0:
                pass
            time.sleep(0.001)  # the thread goes back to epoll_wait
        end = receiver.scheduling()
        # Each piece woke it from epoll_wait, and it slept again after (a
        # busy machine may let two pieces meet in one read now and then).
        assert end.voluntary_switches - start.voluntary_switches >= pieces // 2
        assert end.timeslices - start.timeslices >= pieces // 2
        assert end.run_delay_ns >= start.run_delay_ns
    finally:
        core.detach_socket()
        receiver.stop()


def _refused_child(impl: str, write_fd: int) -> None:
    """In a forked child: give up the right to real-time scheduling, start a
    receive thread that asks for SCHED_FIFO 10, and report."""
    try:
        if os.getuid() == 0:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)  # every capability goes with root
        resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))
        module = importlib.import_module(f"mlpe_fast.engine._receive_{impl}")
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        except OSError as error:
            probe = error.errno
        else:
            probe = 0
        receiver = module.ReceiveThread(10)
        got = receiver.scheduling()
        running = receiver.running and receiver.wake_fd >= 0
        receiver.stop()
        report: dict[str, Any] = {
            "probe": probe,
            "policy": got.policy,
            "priority": got.priority,
            "refused": got.refused,
            "running": running,
        }
    except BaseException as error:  # the parent reports it
        report = {"error": repr(error)}
    os.write(write_fd, json.dumps(report).encode())
    os.close(write_fd)


def test_a_refused_fifo_falls_back_to_the_normal_policy_and_says_so(impl: str) -> None:
    if impl == "c" and not USE_EXTENSIONS:
        pytest.skip("compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            _refused_child(impl, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        report = json.loads(pipe.read() or b"{}")
    os.waitpid(pid, 0)
    assert "error" not in report, report
    if report["probe"] != errno.EPERM:
        pytest.skip(f"the child could still use SCHED_FIFO ({report})")
    assert report["running"], report
    assert report["refused"] == "SCHED_FIFO 10: EPERM", report
    assert (report["policy"], report["priority"]) == ("normal", 0), report
