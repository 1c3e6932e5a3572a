"""Running an untrusted Python script in a sandboxed child process.

LiveCodeBench scoring executes model-generated programs (:mod:`.livecodebench`).
The reference runs them in its ``lcb_serve`` container; this is the local
route, one child process per run of :func:`run_sandboxed`:

* a fresh scratch directory is its working directory, ``HOME`` and
  ``TMPDIR``, and is removed afterwards whatever happened;
* a clean environment (``PATH``, ``HOME``, ``TMPDIR``, ``LANG`` only) and
  ``python -I -B`` (no ``PYTHON*`` variables, no user site, no ``.pyc``
  written);
* :mod:`.sandbox_guard` in the child sets the ``resource.setrlimit`` caps
  (address space, CPU, file size, no core) and an audit hook that refuses
  writes outside the scratch directory, sockets, new programs, ``ctypes``;
* no network: a new network namespace (``unshare --net --map-root-user``,
  only a loopback that is down) when the kernel permits unprivileged user
  namespaces -- probed once, :func:`network_isolation` says which was used
  -- and the guard's refusal of every socket in any case;
* a wall-time limit: past it the child's whole process group is killed.

Standard output and error go to files in the scratch directory, so the
file-size cap bounds what a runaway program can make the parent hold.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec

__all__ = ("SandboxLimits", "SandboxResult", "network_isolation", "run_sandboxed")

_GUARD = Path(__file__).with_name("sandbox_guard.py")
_OUTPUT_CAP = 1 << 20  # bytes of each stream read back


class SandboxLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The caps of one child: wall and CPU seconds, address space and the
    largest file it may write, in bytes."""

    wall_s: float = 60.0
    cpu_s: int = 60
    memory_bytes: int = 4 << 30
    file_bytes: int = 16 << 20


class SandboxResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a child ended: its exit status (negative: the signal that killed
    it), whether the wall limit killed it, and its output (each stream cut
    at 1 MiB)."""

    returncode: int
    timed_out: bool
    stdout: bytes
    stderr: bytes


@functools.cache
def _unshare_prefix() -> tuple[str, ...]:
    """The command that puts a child in a new network namespace, or () when
    this kernel or container does not permit it (checked by running it)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    prefix = (unshare, "--net", "--map-root-user", "--")
    try:
        probe = subprocess.run(
            [*prefix, sys.executable, "-I", "-c", ""],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return prefix if probe.returncode == 0 else ()


def network_isolation() -> str:
    """``"netns"`` when children get their own network namespace (and the
    guard's socket refusal), ``"audit-hook"`` when only the guard's."""
    return "netns" if _unshare_prefix() else "audit-hook"


def _clean_env(scratch: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}


def _read_capped(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(_OUTPUT_CAP)
    except OSError:
        return b""


def run_sandboxed(script: Path, stdin: bytes, limits: SandboxLimits) -> SandboxResult:
    """Runs ``python script`` in a sandboxed child (module docstring), feeding
    it ``stdin``, and waits at most ``limits.wall_s``."""
    settings = msgspec.json.encode(
        {
            "memory_bytes": limits.memory_bytes,
            "cpu_s": limits.cpu_s,
            "file_bytes": limits.file_bytes,
        }
    ).decode()
    command = [
        *_unshare_prefix(),
        sys.executable,
        "-I",
        "-B",
        str(_GUARD),
        settings,
        str(script.resolve()),
    ]
    scratch = tempfile.mkdtemp(prefix="mlpe-sandbox-")
    out_path, err_path = Path(scratch, ".stdout"), Path(scratch, ".stderr")
    timed_out = False
    try:
        with out_path.open("wb") as out, err_path.open("wb") as err:
            child = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                cwd=scratch,
                env=_clean_env(scratch),
                start_new_session=True,  # its own process group, killed as one
            )
            try:
                child.communicate(stdin, timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(child)
        return SandboxResult(
            returncode=child.returncode,
            timed_out=timed_out,
            stdout=_read_capped(out_path),
            stderr=_read_capped(err_path),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """Kills whatever is left of the child's process group, then reaps it."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # it and its group have already gone
    child.wait()
