"""How the receive thread is scheduled: what it asks for, what it got, and
how promptly it ran (rule T8 of ``csrc/mlpe_rxthread.h``).

A read carries the kernel stamp of its newest data (K2 of
``csrc/mlpe_rxstamp.h``), so a receive thread that waits for a core reads a
first token together with the next one and gives it the next one's stamp.
The thread may ask for ``SCHED_FIFO`` for itself alone: it sleeps in
``epoll_wait`` and reads in bounded bursts, so it cannot starve the event
loop, and on a busy machine it then runs as soon as data arrives.  Where the
system refuses (no root, ``CAP_SYS_NICE`` or ``RLIMIT_RTPRIO``) the thread
runs on under the normal policy and says so; a refusal never fails a run.

Both implementations of the thread (``_receive_c`` and its twin) report
the same raw placement; :class:`ReceiveScheduling` is what the self-audit
reads: the placement and the thread's own scheduler counters from
``/proc/self/task/TID/schedstat`` and ``.../status`` (Linux), taken while
it runs and once more just before it stops.
"""

from __future__ import annotations

import errno
import os
import sys

import msgspec

__all__ = (
    "AUTO_PRIORITY",
    "MAX_PRIORITY",
    "ReceiveScheduling",
    "allowed_cpus",
    "cpu_list",
    "scheduling_of",
)

#: ``--receive-priority auto``: low among real-time priorities, so that any
#: real-time work the machine's owner set up (IRQ threads run at 50) stays
#: ahead of it, and above every normal thread.
AUTO_PRIORITY = 10
#: SCHED_FIFO's highest priority on Linux (``sched_get_priority_max``).
MAX_PRIORITY = 99

#: The policy names ``mlpe_rxthread_placement.policy`` stands for.
POLICIES = ("normal", "fifo", "rr", "other")


class ReceiveScheduling(msgspec.Struct, frozen=True, gc=False):
    """What one receive thread asked for and got, and how it ran.

    ``policy`` is ``normal`` (SCHED_OTHER), ``fifo``, ``rr``, ``other``
    (an inherited batch or idle policy) or ``unsupported`` (no way to ask
    on this system).  ``refused`` names what the system refused, with its
    errno name (``SCHED_FIFO 10: EPERM``), empty when nothing was.  The
    counters cover the thread's life so far: ``run_delay_ns`` the time it
    was runnable but waited for a core, ``timeslices`` the times it was put
    on one, ``involuntary_switches`` the times it was taken off one while it
    still had work (schedstat and status of ``/proc/self/task/TID``).
    ``interpreter_free``: the thread reads without the interpreter's lock
    (the compiled one; the twin's waits for it as well as for a core)."""

    policy: str
    priority: int = 0
    cpus: list[int] = msgspec.field(default_factory=list)
    asked_priority: int = 0
    asked_cpus: list[int] = msgspec.field(default_factory=list)
    refused: str = ""
    tid: int = 0
    run_delay_ns: int = 0
    timeslices: int = 0
    involuntary_switches: int = 0
    voluntary_switches: int = 0
    interpreter_free: bool = True


def _errno_name(code: int) -> str:
    return errno.errorcode.get(code, str(code))


def _task_counters(tid: int) -> tuple[int, int, int, int]:
    """(run delay ns, timeslices, involuntary, voluntary switches) of the
    process's thread ``tid``; zeros where ``/proc`` does not say."""
    delay = slices = involuntary = voluntary = 0
    base = f"/proc/self/task/{tid}"
    try:
        with open(f"{base}/schedstat", encoding="ascii") as stat:
            fields = stat.read().split()
        delay, slices = int(fields[1]), int(fields[2])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"{base}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    involuntary = int(line.split()[1])
                elif line.startswith("voluntary_ctxt_switches:"):
                    voluntary = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return delay, slices, involuntary, voluntary


def scheduling_of(
    *,
    tid: int,
    policy: int,
    priority: int,
    cpus: tuple[int, ...],
    sched_error: int,
    affinity_error: int,
    asked_priority: int,
    asked_cpus: tuple[int, ...],
    interpreter_free: bool,
) -> ReceiveScheduling:
    """The figures of a running thread from its raw placement (T8) and its
    counters now."""
    refused = []
    if sched_error:
        refused.append(f"SCHED_FIFO {asked_priority}: {_errno_name(sched_error)}")
    if affinity_error:
        refused.append(f"CPUs {cpu_list(asked_cpus)}: {_errno_name(affinity_error)}")
    delay, slices, involuntary, voluntary = _task_counters(tid)
    return ReceiveScheduling(
        policy=POLICIES[policy] if 0 <= policy < len(POLICIES) else "other",
        priority=priority,
        cpus=list(cpus),
        asked_priority=asked_priority,
        asked_cpus=list(asked_cpus),
        refused="; ".join(refused),
        tid=tid,
        run_delay_ns=delay,
        timeslices=slices,
        involuntary_switches=involuntary,
        voluntary_switches=voluntary,
        interpreter_free=interpreter_free,
    )


def cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """``0-3,6``: a CPU set as Linux writes one (``taskset -c``, cpulist)."""
    ordered = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(runs)


def allowed_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on; None where the system does not say."""
    if sys.platform != "linux" or not hasattr(os, "sched_getaffinity"):
        return None
    return frozenset(os.sched_getaffinity(0))
