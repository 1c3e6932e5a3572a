"""The native build: each C unit in exactly one extension (setup.py), and a
response decoder that keeps its own rules whichever module feeds it.

The engine's read path (``ReadCore``) and the HTTP/2 de-framer
(``DataDeframer``) feed a ResponseDecoder without its Python methods; a
decoder they closed or failed must then answer every later call as one fed
directly does (the twins do this by construction: they call the methods).
Each case compares with a reference decoder fed the same input directly.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mlpe_fast._native import USE_EXTENSIONS
from mlpe_fast.errors import LocalProtocolError, ProtocolError
from mlpe_fast.sim.stream import chat_chunk, sse_event
from tests.conftest import wire_module
from tests.unit.test_h2_deframer import data_frame

ROOT = Path(__file__).resolve().parents[2]

T = 1_000  # every stamp: the outcomes compare whole, milestones included
SSE_HEAD = [(b"content-type", b"text/event-stream")]
# A close-delimited event stream: feed_eof completes it.
GOOD_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    + sse_event(chat_chunk(content="hi"))
    + sse_event(b"[DONE]")
)
BAD_RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: twelve\r\n\r\n"  # a framing error
SMALL_EVENT = 64  # max_event of the decoders that fail on OVERSIZE_EVENT
OVERSIZE_EVENT = sse_event(b"x" * 200)


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call did: its result, or its exception's class, text, code and position."""
    try:
        result = call()
    except (ProtocolError, LocalProtocolError) as error:
        return (
            type(error),
            str(error),
            getattr(error, "code", None),
            getattr(error, "position", None),
        )
    return ("returned", result)


def later_calls(decoder: Any) -> dict[str, tuple[Any, ...]]:
    """Every way in, tried on a decoder that is done with: each must refuse
    without changing state.  set_head comes first: it checks no input mode
    before the stored error, so it shows a failure another module's call
    left unrecorded."""
    return {
        "set_head": outcome(lambda: decoder.set_head(200, SSE_HEAD, T)),
        "feed": outcome(lambda: decoder.feed(b"x", T)),
        "feed_eof": outcome(lambda: decoder.feed_eof(T)),
        "feed_body": outcome(lambda: decoder.feed_body(b"x", T)),
        "end_body": outcome(lambda: decoder.end_body(T)),
    }


def summary_error(decoder: Any) -> tuple[int, str]:
    summary = decoder.summary()
    return summary.error_code, summary.error_message


# -- setup.py -------------------------------------------------------------------


def native_modules() -> dict[str, list[str]]:
    """NATIVE_MODULES of setup.py, read without running the setup."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "NATIVE_MODULES" for t in targets):
                assert node.value is not None
                table: dict[str, list[str]] = ast.literal_eval(node.value)
                return table
    raise AssertionError("setup.py has no NATIVE_MODULES table")


@pytest.mark.skipif(
    not (ROOT / "csrc").is_dir(), reason="csrc/ is not present (an installed wheel)"
)
def test_each_c_unit_is_linked_into_exactly_one_extension() -> None:
    listed = [unit for units in native_modules().values() for unit in units]
    units = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "csrc").glob("*.c"))
    assert sorted(listed) == units, "each csrc/*.c once, and nothing else"


@pytest.mark.skipif(not USE_EXTENSIONS, reason="compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
@pytest.mark.c_extension
@pytest.mark.parametrize("name", sorted(native_modules()) if (ROOT / "setup.py").is_file() else [])
def test_every_extension_imports(name: str) -> None:
    # A binding over another extension's C code finds it at import (the
    # selectors would hide a failure behind the twin).
    importlib.import_module(name)


# -- the engine's read path -------------------------------------------------------


@pytest.fixture
def reader(impl: str) -> ModuleType:
    if impl == "c" and not USE_EXTENSIONS:
        pytest.skip("compiled core disabled (MLPE_FAST_NO_EXTENSIONS)")
    return importlib.import_module(f"mlpe_fast.engine._reader_{impl}")


class _Transport:
    def write(self, data: bytes) -> None:
        pass


def read_core(reader: ModuleType) -> Any:
    class Recorder(reader.ReadCore):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            reader.ReadCore.__init__(self, {})
            self.failures: list[Exception] = []
            self.done = 0

        def on_first_token(self, t_ns: int) -> None:
            pass

        def on_response_done(self, t_ns: int) -> None:
            self.done += 1

        def on_response_failed(self, t_ns: int, error: Exception) -> None:
            self.failures.append(error)

        def on_unsolicited(self, nbytes: int) -> None:
            raise AssertionError("a response is outstanding")

    core = Recorder()
    core.begin(_Transport(), b"POST / HTTP/1.1\r\n\r\n", False)
    return core


def read(core: Any, data: bytes) -> None:
    """What the event loop does with bytes from the socket."""
    buffer = core.get_buffer(-1)
    buffer[: len(data)] = data
    core.buffer_updated(len(data))


def test_a_read_after_the_close_is_refused_as_by_the_decoder(
    reader: ModuleType, response: ModuleType
) -> None:
    core = read_core(reader)
    read(core, GOOD_RESPONSE)
    assert core.end_of_stream() is True
    reference = response.ResponseDecoder()
    reference.feed(GOOD_RESPONSE, T)
    reference.feed_eof(T)
    assert outcome(lambda: read(core, b"x"))[:2] == (LocalProtocolError, "feed() after feed_eof()")
    assert outcome(lambda: read(core, b"x"))[:2] == outcome(lambda: reference.feed(b"x", T))[:2]
    assert outcome(core.end_of_stream)[:2] == outcome(lambda: reference.feed_eof(T))[:2]
    assert core.failures == [] and core.done == 1
    assert later_calls(core.decoder) == later_calls(reference)
    assert core.decoder.summary().unexpected_bytes == 0


def test_a_decoder_the_read_path_failed_repeats_its_error(
    reader: ModuleType, response: ModuleType
) -> None:
    core = read_core(reader)
    read(core, BAD_RESPONSE)
    reference = response.ResponseDecoder()
    first = outcome(lambda: reference.feed(BAD_RESPONSE, T))
    assert first[0] is not LocalProtocolError and first[0] != "returned"
    read(core, b"x")  # a later read reports the same error again
    assert core.end_of_stream() is False
    assert [outcome(lambda e=e: _raise(e)) for e in core.failures] == [first] * 3
    assert later_calls(core.decoder) == later_calls(reference)
    assert all(result == first for result in later_calls(core.decoder).values())
    assert summary_error(core.decoder) == summary_error(reference)


def _raise(error: Exception) -> None:
    raise error


# -- the HTTP/2 de-framer -----------------------------------------------------------


@pytest.fixture
def h2w(impl: str) -> ModuleType:
    return wire_module("h2", impl)


def body_decoder(response: ModuleType, max_event: int = SMALL_EVENT) -> Any:
    decoder = response.ResponseDecoder(max_event=max_event)
    decoder.set_head(200, SSE_HEAD, T)
    return decoder


def test_a_decoder_the_deframer_failed_repeats_its_error(
    h2w: ModuleType, response: ModuleType
) -> None:
    deframer = h2w.DataDeframer()
    decoder = body_decoder(response)
    deframer.register(1, decoder)
    frame = data_frame(1, OVERSIZE_EVENT)
    assert deframer.feed(frame, T) == len(frame)
    assert deframer.take_events() == [(1, h2w.ERROR)]
    reference = body_decoder(response)
    first = outcome(lambda: reference.feed_body(OVERSIZE_EVENT, T))
    assert first[0] is not LocalProtocolError and first[0] != "returned"
    assert later_calls(decoder) == later_calls(reference)
    assert all(result == first for result in later_calls(decoder).values())
    assert summary_error(decoder) == summary_error(reference)


def test_a_failed_decoder_fails_its_stream_once(h2w: ModuleType, response: ModuleType) -> None:
    decoder = body_decoder(response)
    first = outcome(lambda: decoder.feed_body(OVERSIZE_EVENT, T))
    deframer = h2w.DataDeframer()
    deframer.register(1, decoder)
    frames = data_frame(1, b"data: ") + data_frame(1, b"more\n\n", end_stream=True)
    deframer.feed(frames, T)
    assert deframer.take_events() == [(1, h2w.ERROR)]  # D6: once, and no DONE
    assert deframer.streams == 0  # END_STREAM still let it go (D4)
    assert all(result == first for result in later_calls(decoder).values())


def test_a_closed_decoder_refuses_the_deframer_as_it_refuses_a_caller(
    h2w: ModuleType, response: ModuleType
) -> None:
    decoder = body_decoder(response, 4096)
    decoder.feed_body(sse_event(chat_chunk(content="hi")), T)
    decoder.end_body(T)
    reference = body_decoder(response, 4096)
    reference.feed_body(sse_event(chat_chunk(content="hi")), T)
    reference.end_body(T)
    deframer = h2w.DataDeframer()
    deframer.register(1, decoder)
    deframer.feed(data_frame(1, b"data: late\n\n", end_stream=True), T)
    # A refusal is the stream's ERROR (D6), but it does not fail the decoder.
    assert deframer.take_events() == [(1, h2w.ERROR)]
    assert later_calls(decoder) == later_calls(reference)
    assert later_calls(decoder)["feed_body"][:2] == (
        LocalProtocolError,
        "feed_body() after end_body()",
    )
    assert summary_error(decoder) == summary_error(reference) == (0, "")
    assert decoder.summary() == reference.summary()  # complete, the late bytes unread
