"""glibc's malloc held to fixed thresholds, so that a long run's heap does
not grow with its length (issue 23: memory flat from 100,000 to 1,000,000
requests).

glibc serves a block of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at
start) with its own ``mmap``, given back whole on ``free``.  But by default
the threshold is *dynamic*: each time such a block is freed, glibc raises
the threshold to that block's size (up to 32 MiB) and the trim threshold to
twice that.  A run frees big blocks all the time -- numpy temporaries, read
buffers, the spilled columns' blocks -- so after the first few, every big
block comes from the heap instead, between small long-lived ones, and the
heap's free space can no longer be given back: it grew by 50-75 B a request
during the load and by 40 B a request while counting (``mallinfo2``: the
bytes in use stayed flat at 20-28 MB while the free bytes in the heap rose
from 20 to 60 MB over 300,000 requests; docs/performance.md).  Setting
either threshold turns the dynamic rule off; both are set to glibc's own
starting values, which keeps big blocks out of the heap and trims its top
past 128 KiB of free space.  The extra ``mmap`` calls are few: 250 more
over a 30,000-request run (``strace -c``).

Linux with glibc only; elsewhere (musl, macOS) this does nothing.  A
threshold the user set (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_``, or ``GLIBC_TUNABLES``
``glibc.malloc.*``) is kept: glibc read it at start, and this leaves every
setting as it found it.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping

__all__ = ("MMAP_THRESHOLD", "TRIM_THRESHOLD", "fix_malloc_thresholds")

#: glibc's ``mallopt`` parameters (``malloc.h``).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Blocks of at least this many bytes get an ``mmap`` of their own: glibc's
#: starting value, kept from then on.
MMAP_THRESHOLD = 128 * 1024
#: Free bytes at the heap's top past which it is given back: glibc's
#: starting value, kept from then on.
TRIM_THRESHOLD = 128 * 1024

_USER_SETTINGS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)


def _user_tuned(environ: Mapping[str, str]) -> bool:
    if any(name in environ for name in _USER_SETTINGS):
        return True
    return "glibc.malloc." in environ.get("GLIBC_TUNABLES", "")


def fix_malloc_thresholds(environ: Mapping[str, str] | None = None) -> bool:
    """Sets glibc's mmap and trim thresholds (module doc); True when set,
    False where there is no glibc or the user tuned malloc already."""
    if not sys.platform.startswith("linux"):
        return False
    if _user_tuned(os.environ if environ is None else environ):
        return False
    try:
        libc = ctypes.CDLL(None)  # the process's own C library
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 -- present in glibc only (not musl)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    mmap_set: int = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)  # 1 on success
    trim_set: int = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    return mmap_set == 1 and trim_set == 1
