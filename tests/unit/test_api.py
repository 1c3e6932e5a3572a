"""The public surface, the implementation switch, and the error-code ABI."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mlpe_fast
from mlpe_fast import errors
from mlpe_fast._native import USE_EXTENSIONS

ROOT = Path(__file__).resolve().parents[2]

PUBLIC = {
    "NATIVE",
    "__version__",
    "LocalProtocolError",
    "MlpeError",
    "ProtocolError",
    "ChunkDecoder",
    "H1Decoder",
    "ResponseDecoder",
    "SSEDecoder",
    "BodyData",
    "ChunkError",
    "Delta",
    "FirstToken",
    "ResponseComplete",
    "ResponseHead",
    "ResponseSummary",
    "SSEEvent",
    "TokenGaps",
    "ToolCall",
    "ToolCallDelta",
}


def test_all_is_pinned() -> None:
    assert set(mlpe_fast.__all__) == PUBLIC
    assert len(mlpe_fast.__all__) == len(PUBLIC)


def test_star_import() -> None:
    namespace: dict[str, object] = {}
    exec("from mlpe_fast import *", namespace)
    assert set(namespace) >= PUBLIC


def test_unknown_attribute_raises() -> None:
    with pytest.raises(AttributeError):
        _ = mlpe_fast.no_such_thing  # type: ignore[attr-defined]


def test_native_core_is_in_use_on_cpython() -> None:
    """NATIVE is True exactly when every compiled module is in use: on CPython
    without MLPE_FAST_NO_EXTENSIONS a missing extension is a failure here."""
    from mlpe_fast.engine import _reader
    from mlpe_fast.wire import _h1, _oai, _response, _sse

    selected = [
        _h1.H1Decoder,
        _sse.SSEDecoder,
        _oai.ChunkDecoder,
        _response.ResponseDecoder,
        _reader.ReadCore,
    ]
    if USE_EXTENSIONS:
        assert platform.python_implementation() == "CPython"
        assert mlpe_fast.NATIVE is True
        assert all(cls.__module__.endswith("_c") for cls in selected), selected
    else:
        assert mlpe_fast.NATIVE is False
        assert all(cls.__module__.endswith("_py") for cls in selected), selected


@pytest.mark.parametrize(("value", "native"), [("1", "False"), ("0", "True"), ("", "True")])
def test_environment_variable_selects_the_twins(value: str, native: str) -> None:
    if not USE_EXTENSIONS and native == "True":
        pytest.skip("the compiled core is disabled in this run")
    env = {**os.environ, "MLPE_FAST_NO_EXTENSIONS": value}
    out = subprocess.run(
        [sys.executable, "-c", "import mlpe_fast; print(mlpe_fast.NATIVE)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == native


def test_error_codes_match_the_c_enum() -> None:
    """csrc/mlpe_common.h and ErrorCode are one ABI (see the header)."""
    header = (ROOT / "csrc" / "mlpe_common.h").read_text()
    c_codes = {
        name: int(value) for name, value in re.findall(r"\bMLPE_(?:E_)?(\w+) = (\d+),?", header)
    }
    py_codes = {code.name: int(code) for code in errors.ErrorCode}
    assert c_codes == py_codes


def test_every_terminal_code_maps_to_its_class() -> None:
    for code in errors.ErrorCode:
        error = errors.error_from_code(code, 7)
        if code == errors.ErrorCode.NOMEM:
            assert isinstance(error, MemoryError)
        elif code == errors.ErrorCode.OK or code >= 400:
            # not terminal: no error (0), a bad event (401-405), an HTTP status (501)
            assert isinstance(error, AssertionError)
        else:
            assert isinstance(error, errors.ProtocolError)
            assert isinstance(error, ValueError)
            assert error.code == code and error.position == 7
            assert "at byte 7" in str(error)


def test_protocol_errors_compare_and_pickle() -> None:
    import pickle

    a = errors.InvalidChunkSize(12, "x")
    assert a == errors.InvalidChunkSize(12, "x") != errors.InvalidChunkSize(13, "x")
    assert pickle.loads(pickle.dumps(a)) == a
