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
  A binding over another extension's C code (see NATIVE_MODULES) imports
  that extension: rebuild both when the shared declarations (.pxd) change.
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

# Which C units each binding links.  Every unit is linked into exactly one
# extension (tests/unit/test_native_build.py checks it): a unit linked twice
# is two copies of its code in one process, and a decoder fed by the other
# copy skips the checks its own binding makes -- correct only while both are
# built from identical sources.  A binding that needs a unit another
# extension links reaches it through Cython's cross-module cdef calls: cdef
# methods of a cimported class go through the class's vtable, and
# module-level cdef functions declared in a .pxd are exported in a capsule
# that the cimporting module binds when it is imported.  Neither needs a C
# symbol shared between two extension modules.
NATIVE_MODULES: dict[str, list[str]] = {
    # The composite decoder calls the three layers in C, so they are linked
    # here, with it; _response_c.pxd exports the layers' functions for their
    # standalone bindings below, and ResponseDecoder's C entries (feed_c and
    # the like) for the read paths that feed a decoder.
    "mlpe_fast.wire._response_c": [
        "csrc/mlpe_h1.c",
        "csrc/mlpe_sse.c",
        "csrc/mlpe_oai.c",
        "csrc/mlpe_response.c",
    ],
    # The standalone layers: bindings only, over _response_c's exports.
    "mlpe_fast.wire._h1_c": [],
    "mlpe_fast.wire._sse_c": [],
    "mlpe_fast.wire._oai_c": [],
    # The de-framer feeds the streams' decoders through the sink of
    # csrc/mlpe_h2.h, which the binding points at ResponseDecoder's C
    # entries: it links no response unit.
    "mlpe_fast.wire._h2_c": ["csrc/mlpe_h2.c"],
    # The engine's HTTP/1.1 read path feeds ResponseDecoder through its C
    # entry, once per read: no C unit of its own.
    "mlpe_fast.engine._reader_c": [],
    # Kernel receive stamps and the receive thread; the read cores of both
    # protocols subclass its SocketReader.
    "mlpe_fast.engine._receive_c": ["csrc/mlpe_rxstamp.c", "csrc/mlpe_rxthread.c"],
    # Segment stamps from a packet socket; the receive path reaches the map
    # through the cdef methods of _pktstamp_c.pxd.
    "mlpe_fast.engine._pktstamp_c": ["csrc/mlpe_pktstamp.c"],
    # The HTTP/2 read path runs the de-framer through DataDeframer's C method
    # (one call per feed) and reads its outputs in place: no C unit of its own.
    "mlpe_fast.engine._h2_reader_c": [],
    # Token counting: the pre-tokenizer scanners and the per-word cache.
    "mlpe_fast.metrics._bpe_c": ["csrc/mlpe_bpe.c"],
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
