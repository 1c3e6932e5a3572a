"""Build of the native core: csrc/*.c under thin Cython bindings.

Environment toggles (read at build time):

* ``MLPE_FAST_NO_EXTENSIONS=1`` -- build nothing native; the pure-Python
  twins are used (also forced on interpreters other than CPython).
* ``MLPE_FAST_DEBUG=1`` -- ``-O0 -g``, assertions on.
* ``MLPE_FAST_SANITIZE=1`` -- AddressSanitizer + UndefinedBehaviorSanitizer
  (implies debug); run with ``LD_PRELOAD=$(gcc -print-file-name=libasan.so)``
  and ``PYTHONMALLOC=malloc`` (see ``make test-asan``).
* ``MLPE_FAST_COVERAGE=1`` -- gcov instrumentation of the C.
* ``MLPE_FAST_CYTHON_TRACE=1`` -- Cython line tracing for coverage of .pyx.
* ``MLPE_FAST_BUILD_ONLY=mod[,mod]`` -- developer loop: rebuild only these
  bindings (e.g. ``_sse_c``) with ``python setup.py build_ext --inplace``.
"""

from __future__ import annotations

import os
import platform
import sys

from setuptools import Extension, setup


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


NO_EXTENSIONS = _flag("MLPE_FAST_NO_EXTENSIONS") or platform.python_implementation() != "CPython"
SANITIZE = _flag("MLPE_FAST_SANITIZE")
DEBUG = _flag("MLPE_FAST_DEBUG") or SANITIZE
COVERAGE = _flag("MLPE_FAST_COVERAGE")
CYTHON_TRACE = _flag("MLPE_FAST_CYTHON_TRACE")

# Each binding links the C units it wraps.  The units are small and
# self-contained, so compiling a shared one twice is cheaper than a build_clib
# step and keeps every extension importable on its own.
NATIVE_MODULES: dict[str, list[str]] = {
    "mlpe_fast.wire._h1_c": ["csrc/mlpe_h1.c"],
    "mlpe_fast.wire._sse_c": ["csrc/mlpe_sse.c"],
    "mlpe_fast.wire._oai_c": ["csrc/mlpe_oai.c"],
    "mlpe_fast.wire._response_c": [
        "csrc/mlpe_h1.c",
        "csrc/mlpe_sse.c",
        "csrc/mlpe_oai.c",
        "csrc/mlpe_response.c",
    ],
    # The engine feeds ResponseDecoder's C state directly, so it links its
    # own copy of the same units (a C symbol is not shared between two
    # extension modules).
    "mlpe_fast.engine._reader_c": [
        "csrc/mlpe_h1.c",
        "csrc/mlpe_sse.c",
        "csrc/mlpe_oai.c",
        "csrc/mlpe_response.c",
    ],
    # The de-framer feeds the streams' decoders in C, so it links the
    # response units too.
    "mlpe_fast.wire._h2_c": [
        "csrc/mlpe_h2.c",
        "csrc/mlpe_h1.c",
        "csrc/mlpe_sse.c",
        "csrc/mlpe_oai.c",
        "csrc/mlpe_response.c",
    ],
    # Kernel receive stamps and the receive thread; the read cores of both
    # protocols subclass its SocketReader.
    "mlpe_fast.engine._receive_c": ["csrc/mlpe_rxstamp.c", "csrc/mlpe_rxthread.c"],
    # The HTTP/2 read path runs the de-framer through DataDeframer's C method
    # (one call per feed) and reads its outputs in place: no C unit of its own.
    "mlpe_fast.engine._h2_reader_c": [],
}


def _extensions() -> list[Extension]:
    if NO_EXTENSIONS:
        return []
    from Cython.Build import cythonize

    msvc = sys.platform == "win32"
    compile_args: list[str] = []
    link_args: list[str] = []
    macros: list[tuple[str, str | None]] = []
    if msvc:
        compile_args += ["/O2"] if not DEBUG else ["/Od", "/Zi"]
    else:
        compile_args += ["-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"]
        if DEBUG:
            compile_args += ["-O0", "-g3", "-UNDEBUG"]
        else:
            compile_args += ["-O3"]
        if sys.platform.startswith("linux"):
            # The receive thread (csrc/mlpe_rxthread.c); older glibc keeps
            # pthreads out of libc.
            compile_args += ["-pthread"]
            link_args += ["-pthread"]
        if SANITIZE:
            san = [
                "-fsanitize=address,undefined",
                "-fno-omit-frame-pointer",
                "-fno-sanitize-recover=undefined",
            ]
            compile_args += san
            link_args += san
        if COVERAGE:
            compile_args += ["--coverage"]
            link_args += ["--coverage"]
    if CYTHON_TRACE:
        macros += [("CYTHON_TRACE", "1"), ("CYTHON_TRACE_NOGIL", "1")]

    only = {m.strip() for m in os.environ.get("MLPE_FAST_BUILD_ONLY", "").split(",") if m.strip()}
    extensions = [
        Extension(
            name,
            sources=[
                name.replace(".", "/").replace("mlpe_fast", "src/mlpe_fast", 1) + ".pyx",
                *sources,
            ],
            include_dirs=["csrc"],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            define_macros=macros,
        )
        for name, sources in NATIVE_MODULES.items()
        if not only or name.rsplit(".", 1)[1] in only
    ]
    return cythonize(
        extensions,
        include_path=["src"],
        compiler_directives={
            "language_level": 3,
            "embedsignature": True,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "linetrace": CYTHON_TRACE,
        },
        quiet=True,
    )


setup(ext_modules=_extensions())
