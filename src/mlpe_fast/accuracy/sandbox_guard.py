"""The child side of :mod:`.sandbox`: limits and a guard, then the script.

Run as ``python -I -B sandbox_guard.py SETTINGS_JSON SCRIPT`` by
:func:`.sandbox.run_sandboxed`, inside the scratch directory, never imported
for its effect (importing it does nothing: the package's import check loads
every module).  It imports nothing but the standard library, since the
child runs with ``-I`` and must not depend on the load generator.

In order, before a line of the script runs:

1. ``resource.setrlimit`` caps the address space, the CPU seconds, the size
   of any file written and core dumps (none: a crash must not litter);
2. ``SIGXFSZ`` is ignored, so a write past the file-size cap fails with
   ``EFBIG`` instead of killing the grader;
3. an audit hook (PEP 578, which nothing can remove once added) refuses:
   writing, creating, renaming or deleting a file outside the scratch
   directory; any socket (the parent adds a network namespace where the
   kernel allows one; this hook is the rule where it does not); starting
   programs or forking; ``ctypes`` (it would reach libc around every hook);
   signalling another process; another audit hook.

This is not a container: reading files the user can read is allowed (the
reference's ``lcb_serve`` runs in Docker for that reason; use it when the
programs must not see the host).
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import signal
import sys
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_ALLOWED_DEVICES = frozenset({"/dev/null"})

# Audit events whose first argument is a path that is changed (CPython's
# "Audit events table"); each is refused outside the scratch directory.
_PATH_EVENTS = frozenset(
    {
        "os.chmod",
        "os.chown",
        "os.mkdir",
        "os.remove",
        "os.rmdir",
        "os.truncate",
        "os.utime",
        "os.chflags",
        "os.lchflags",
        "os.setxattr",
        "os.removexattr",
        "shutil.rmtree",
        "shutil.chown",
        "shutil.copyfile",
        "shutil.copytree",
        "shutil.move",
    }
)
# Events with two paths (source, destination): both must be inside.
_TWO_PATH_EVENTS = frozenset({"os.rename", "os.link", "os.symlink"})
_REFUSED_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.startfile",
        "subprocess.Popen",
        "pty.spawn",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.cdata",
        "sys.addaudithook",
        "os.killpg",
        "signal.pthread_kill",
    }
)
_NETWORK_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
    }
)


def _inside(path: Any, scratch: str) -> bool:
    if isinstance(path, int):
        return True  # an open file descriptor: it was checked when opened
    try:
        name = os.fsdecode(os.fspath(path))
    except TypeError:
        return False
    real = os.path.realpath(name)
    return real in _ALLOWED_DEVICES or real == scratch or real.startswith(scratch + os.sep)


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def install(scratch: str) -> None:
    """Adds the audit hook of the module docstring (step 3)."""
    scratch = os.path.realpath(scratch)
    own_pid = os.getpid()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            if _writes(mode, flags) and not _inside(path, scratch):
                raise PermissionError(f"sandbox: writing {path!r} is outside the scratch directory")
        elif event in _PATH_EVENTS:
            if args and not _inside(args[0], scratch):
                raise PermissionError(f"sandbox: {event} outside the scratch directory")
        elif event in _TWO_PATH_EVENTS:
            if not all(_inside(a, scratch) for a in args[:2]):
                raise PermissionError(f"sandbox: {event} outside the scratch directory")
        elif event in _NETWORK_EVENTS:
            raise PermissionError(f"sandbox: no network ({event})")
        elif event in _REFUSED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        elif event == "os.kill" and args and args[0] not in (own_pid, 0):
            raise PermissionError("sandbox: signalling another process is not allowed")

    sys.addaudithook(hook)


def limit(settings: dict[str, Any]) -> None:
    """Steps 1 and 2 of the module docstring."""
    memory, cpu, fsize = settings["memory_bytes"], settings["cpu_s"], settings["file_bytes"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    # The soft limit sends SIGXCPU, the hard one SIGKILL a second later.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def main(argv: list[str]) -> None:
    settings, script = json.loads(argv[1]), argv[2]
    limit(settings)
    install(os.getcwd())
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
