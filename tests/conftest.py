"""Shared fixtures: every wire test runs over both implementations.

``impl`` is "c" (the compiled core) or "py" (the pure-Python twin).  The "c"
half is skipped only when ``MLPE_FAST_NO_EXTENSIONS`` is set; on CPython
without it a missing compiled module is a failure, not a skip.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from mlpe_fast._native import USE_EXTENSIONS

IMPLS = ("c", "py")


def wire_module(name: str, impl: str) -> ModuleType:
    """Imports ``mlpe_fast.wire._<name>_<impl>`` (e.g. ``wire_module("sse", "c")``)."""
    if impl == "c" and not USE_EXTENSIONS:
        pytest.skip("compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
    return importlib.import_module(f"mlpe_fast.wire._{name}_{impl}")


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest) -> str:
    if request.param == "c":
        request.applymarker(pytest.mark.c_extension)
    return str(request.param)


@pytest.fixture
def h1(impl: str) -> ModuleType:
    return wire_module("h1", impl)


@pytest.fixture
def sse(impl: str) -> ModuleType:
    return wire_module("sse", impl)


@pytest.fixture
def oai(impl: str) -> ModuleType:
    return wire_module("oai", impl)


@pytest.fixture
def response(impl: str) -> ModuleType:
    return wire_module("response", impl)


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory):
    """A throwaway CA and a ``localhost`` server certificate it signed, as
    :class:`tests.certs.CertFiles` (``ca_file, cert_file, key_file``), made
    once per session.  Imported here so that only sessions using it load
    ``cryptography``."""
    from tests.certs import make_test_certs

    return make_test_certs(tmp_path_factory.mktemp("tls"))
