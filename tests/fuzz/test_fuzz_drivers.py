"""A bounded fuzz run of the C core, so that every CI run fuzzes a little.

Builds each libFuzzer driver (csrc/fuzz/fuzz_<name>.c) with gcc around
csrc/fuzz/standalone.c -- the mutation loop that needs no libFuzzer -- with
AddressSanitizer, UndefinedBehaviorSanitizer and edge coverage, then runs it
over its seed corpus for a few seconds (``MLPE_FAST_FUZZ_SECONDS``, default
3).  Exit status 0 means no invariant failed, no sanitizer fired and nothing
leaked.  ``make fuzz`` is the long version of the same run.

Linux only (the sanitizer runtimes); skipped when gcc or its ASan runtime is
missing, and when MLPE_FAST_NO_EXTENSIONS says no native code is wanted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlpe_fast._native import USE_EXTENSIONS
from tests.fuzz.gcc import clean_env, gcc

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
FUZZ = CSRC / "fuzz"

# The C units each driver exercises (as FUZZ_SRC_<name> in the Makefile).
DRIVERS: dict[str, list[str]] = {
    "h1": ["mlpe_h1.c"],
    "sse": ["mlpe_sse.c"],
    "oai": ["mlpe_oai.c"],
    "response": ["mlpe_h1.c", "mlpe_sse.c", "mlpe_oai.c", "mlpe_response.c"],
    "h2": ["mlpe_h2.c", "mlpe_h1.c", "mlpe_sse.c", "mlpe_oai.c", "mlpe_response.c"],
    "sglang": ["mlpe_h1.c", "mlpe_sse.c", "mlpe_oai.c", "mlpe_response.c"],
    "pktstamp": ["mlpe_pktstamp.c"],
    "bpe": ["mlpe_bpe.c"],
}

CFLAGS = ["-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Wno-unused-parameter", f"-I{CSRC}"]
SANITIZE = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
]
COVERAGE = ["-fsanitize-coverage=trace-pc"]
SECONDS = float(os.environ.get("MLPE_FAST_FUZZ_SECONDS", "3"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not USE_EXTENSIONS, reason="native code disabled (MLPE_FAST_NO_EXTENSIONS)"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sanitizer runtimes: Linux"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed"),
    pytest.mark.skipif(not (FUZZ / "standalone.c").is_file(), reason="csrc/fuzz/ is not present"),
]


@pytest.fixture(scope="module")
def main_object(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """standalone.c compiled once (without coverage instrumentation)."""
    build = tmp_path_factory.mktemp("fuzz")
    probe = build / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if gcc(*SANITIZE, probe, "-o", build / "probe").returncode != 0:
        pytest.skip("gcc cannot link -fsanitize=address,undefined here")
    obj = build / "standalone.o"
    result = gcc(*CFLAGS, *SANITIZE, "-c", FUZZ / "standalone.c", "-o", obj)
    assert result.returncode == 0, result.stderr
    return obj


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_fuzz_driver(name: str, main_object: Path) -> None:
    driver = FUZZ / f"fuzz_{name}.c"
    units = [CSRC / unit for unit in DRIVERS[name]]
    if not driver.is_file() or not all(unit.is_file() for unit in units):
        pytest.skip(f"fuzz_{name}.c or its C units are not there yet")
    binary = main_object.parent / f"standalone_{name}"
    result = gcc(*CFLAGS, *SANITIZE, *COVERAGE, driver, *units, main_object, "-o", binary)
    assert result.returncode == 0, result.stderr

    corpus = FUZZ / "corpus" / name
    args = [str(binary), f"-max_total_time={SECONDS}", f"-artifact_prefix={binary.parent}/"]
    if (FUZZ / f"{name}.dict").is_file():
        args.append(f"-dict={FUZZ / name}.dict")
    if corpus.is_dir():
        args.append(str(corpus))
    run = subprocess.run(
        args,
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=SECONDS + 120,
        check=False,
    )
    report = run.stderr[-6000:]
    assert run.returncode == 0, f"fuzz_{name} failed (exit {run.returncode}):\n{report}"
    assert "standalone: done:" in run.stderr, report
