"""glibc's malloc thresholds held fixed (``heap.py``, issue 23): a big block
freed no longer sends the next big blocks into the heap."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

from mlpe_fast.heap import fix_malloc_thresholds


def _glibc_with_mallinfo2() -> bool:
    try:
        ctypes.CDLL(None).mallinfo2  # noqa: B018 -- glibc 2.33 and later
    except (OSError, AttributeError):
        return False
    return sys.platform.startswith("linux")


# In a fresh process: free a 1 MiB block, then hold 32 blocks of 512 KiB and
# say whether glibc gave most of them an mmap of their own (mallinfo2's
# hblkhd, the bytes so mapped, grows by at least 12 of their 16 MiB) or
# grew the heap for them (what free space the heap had may serve a few).
_PROBE = textwrap.dedent(
    """
    import ctypes, sys
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Info
    if sys.argv[1] == "cli":
        from mlpe_fast.cli import main
        try:
            main(["--version"])
        except SystemExit:  # argparse's --version ends that way
            pass
    elif sys.argv[1] == "fix":
        from mlpe_fast.heap import fix_malloc_thresholds
        assert fix_malloc_thresholds()
    big = bytearray(1 << 20)
    del big  # glibc's dynamic rule raises its mmap threshold to 1 MiB here
    before = libc.mallinfo2().hblkhd
    held = [bytearray(1 << 19) for _ in range(32)]
    print(int(libc.mallinfo2().hblkhd - before >= 12 << 20))
    """
)


def _mapped_after_a_big_free(mode: str, env: dict[str, str] | None = None) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return out.stdout.split()[-1] == "1"


@pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="glibc's malloc (mallinfo2)")
def test_big_blocks_stay_out_of_the_heap_once_fixed() -> None:
    # glibc's default: after the free, the 512 KiB blocks come from the heap
    assert not _mapped_after_a_big_free("none")
    assert _mapped_after_a_big_free("fix")
    assert _mapped_after_a_big_free("cli")  # the CLI fixes them before anything else


@pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="glibc's malloc (mallinfo2)")
def test_a_threshold_the_user_set_is_kept() -> None:
    assert not fix_malloc_thresholds({"MALLOC_TRIM_THRESHOLD_": "1048576"})
    assert not fix_malloc_thresholds({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4096"})
    assert not fix_malloc_thresholds({"MALLOC_MMAP_MAX_": "0"})
    # the user's setting, read by glibc at start, holds in the CLI's process too:
    # no mmap for the 512 KiB blocks with mmap turned off altogether
    env = {**os.environ, "MALLOC_MMAP_MAX_": "0"}
    assert not _mapped_after_a_big_free("cli", env)
