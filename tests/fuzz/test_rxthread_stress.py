"""A stress run of the receive thread (csrc/mlpe_rxthread.c), so that every
CI run races it a little.

Builds csrc/stress/stress_rxthread.c with the receive thread twice with gcc --
ThreadSanitizer, then AddressSanitizer + UndefinedBehaviorSanitizer -- and
runs each for a few seconds (``MLPE_FAST_STRESS_SECONDS``, default 2; the
program adds about a second of its own): 64 loopback TCP connections, writer
threads, connections removed and added while the thread reads them, a
connection left untaken past the 4 MiB cap.  Exit status 0 means every check
of the program held and no sanitizer fired (TSan exits 66 after a report).
``make stress`` is the same run from the command line.

Linux only (epoll, the sanitizer runtimes); skipped when gcc or a sanitizer
runtime is missing, and when MLPE_FAST_NO_EXTENSIONS says no native code is
wanted (as tests/fuzz/test_fuzz_drivers.py).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlpe_fast._native import USE_EXTENSIONS
from tests.fuzz.gcc import clean_env, gcc

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
PROGRAM = CSRC / "stress" / "stress_rxthread.c"
# The C units it exercises (STRESS_SRC in the Makefile).
UNITS = [CSRC / "mlpe_rxthread.c", CSRC / "mlpe_rxstamp.c"]

CFLAGS = [
    "-std=c99",
    "-O1",
    "-g",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-fno-omit-frame-pointer",
    "-pthread",
]
SANITIZE: dict[str, list[str]] = {
    "tsan": ["-fsanitize=thread"],
    "asan": ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
}
OPTIONS: dict[str, dict[str, str]] = {
    "tsan": {"TSAN_OPTIONS": "second_deadlock_stack=1"},
    "asan": {
        "ASAN_OPTIONS": "abort_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    },
}
SECONDS = float(os.environ.get("MLPE_FAST_STRESS_SECONDS", "2"))

# A thread and a mutex: enough to tell whether the runtime works here (TSan
# refuses some kernels' address-space layouts at start-up).
PROBE = """
#include <pthread.h>
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int shared;
static void *run(void *arg) {
    pthread_mutex_lock(&mu);
    shared++;
    pthread_mutex_unlock(&mu);
    return arg;
}
int main(void) {
    pthread_t t;
    if (pthread_create(&t, 0, run, 0) != 0)
        return 1;
    run(0);
    pthread_join(t, 0);
    return shared == 2 ? 0 : 1;
}
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not USE_EXTENSIONS, reason="native code disabled (MLPE_FAST_NO_EXTENSIONS)"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="epoll and sanitizers: Linux"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed"),
    pytest.mark.skipif(not PROGRAM.is_file(), reason="csrc/stress/ is not present"),
]


def _excerpt(text: str, head: int = 5000, tail: int = 2000) -> str:
    """The first sanitizer report and the program's last words."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


@pytest.mark.parametrize("sanitizer", sorted(SANITIZE))
def test_rxthread_stress(sanitizer: str, tmp_path: Path) -> None:
    if not all(unit.is_file() for unit in UNITS):
        pytest.skip("the receive thread's C units are not there yet")
    flags = SANITIZE[sanitizer]
    probe = tmp_path / "probe.c"
    probe.write_text(PROBE)
    built = gcc(*flags, "-pthread", probe, "-o", tmp_path / "probe")
    if built.returncode != 0:
        pytest.skip(f"gcc cannot link {' '.join(flags)} here")
    ran = subprocess.run(
        [str(tmp_path / "probe")],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    if ran.returncode != 0:
        pytest.skip(f"the {sanitizer} runtime does not run here: {ran.stderr.strip()[:300]}")

    binary = tmp_path / f"stress_rxthread_{sanitizer}"
    result = gcc(*CFLAGS, *flags, PROGRAM, *UNITS, "-o", binary)
    assert result.returncode == 0, result.stderr

    seed = int(os.environ.get("MLPE_FAST_STRESS_SEED", random.randrange(1, 2**32)))
    run = subprocess.run(
        [str(binary), "-t", str(SECONDS), "-s", str(seed)],
        capture_output=True,
        text=True,
        env={**clean_env(), **OPTIONS[sanitizer]},
        timeout=SECONDS + 90,
        check=False,
    )
    report = f"{run.stdout[-3000:]}\n{_excerpt(run.stderr)}"
    assert run.returncode == 0, (
        f"stress_rxthread under {sanitizer} failed (exit {run.returncode}, seed {seed}; "
        f"MLPE_FAST_STRESS_SEED={seed} repeats the random choices, not the timing):\n{report}"
    )
    assert "stress_rxthread: ok" in run.stdout, report
