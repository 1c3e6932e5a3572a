"""The simulated endpoint's fault injection (``--fault``), over real loopback
sockets: the exact bytes of each fault on the wire, which requests get one
(fraction, seed, window, order), that the others are unaffected, and the
command line.

The clients are the independent ones of the other simulated-endpoint
tests: plain sockets for HTTP/1.1, the ``h2`` library for HTTP/2.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from mlpe_fast.cli import main as cli_main
from mlpe_fast.sim.faults import FAULTS, FaultPicker, FaultSpec, parse_fault
from mlpe_fast.sim.server import (
    SimConfig,
    SimServer,
    SimServerThread,
    build_arg_parser,
    config_from_args,
)
from mlpe_fast.sim.timing import Dist
from tests.integration.test_sim_server import (
    CHAT,
    COMPLETIONS,
    Client,
    chat_body,
    completion_body,
    request_bytes,
)
from tests.integration.test_sim_server_h2 import HEADERS, RST_STREAM, H2Client

INTERNAL_ERROR = 0x2
STREAM = chat_body(stream=True, max_tokens=10)


# --- reading what the server sends -------------------------------------------------------


@dataclass
class Wire:
    """Everything one connection received until the server closed it."""

    head: str
    body: bytes  # the raw body, framing included
    ending: str  # "eof" (FIN) or "reset" (ECONNRESET)

    @property
    def status(self) -> int:
        return int(self.head.split(" ", 2)[1])

    def header(self, name: str) -> str | None:
        for line in self.head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.lower() == name:
                return value.strip()
        return None


@dataclass
class Chunks:
    """A chunked body read as far as it is well-formed."""

    data: bytes  # the chunks' data, joined
    rest: bytes  # what could not be read as a chunk
    last: bool  # the last chunk (0 CRLF CRLF) was read
    sizes: list[int]


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> tuple[bytes, str]:
    """Reads until the server ends the connection: (bytes, "eof" or "reset")."""
    sock.settimeout(timeout)
    data = bytearray()
    while True:
        try:
            piece = sock.recv(1 << 20)
        except ConnectionResetError:
            return bytes(data), "reset"
        if not piece:
            return bytes(data), "eof"
        data += piece


def exchange(port: int, raw: bytes) -> Wire:
    """Sends one request on a new connection and reads until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        data, ending = read_until_closed(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    return Wire(head.decode("latin-1"), body, ending)


def dechunk(body: bytes) -> Chunks:
    data = bytearray()
    sizes: list[int] = []
    pos = 0
    while True:
        nl = body.find(b"\r\n", pos)
        if nl < 0:
            break
        try:
            size = int(body[pos:nl], 16)
        except ValueError:
            break
        end = nl + 2 + size
        if len(body) < end + 2 or body[end : end + 2] != b"\r\n":
            break
        sizes.append(size)
        pos = end + 2
        if size == 0:
            return Chunks(bytes(data), body[pos:], True, sizes)
        data += body[nl + 2 : end]
    return Chunks(bytes(data), body[pos:], False, sizes)


def events(stream: bytes) -> list[bytes]:
    """The data of each complete SSE event (LF line ends)."""
    blocks = stream.split(b"\n\n")
    assert blocks[-1] == b"", f"unterminated event: {blocks[-1][:60]!r}"
    return [block.removeprefix(b"data: ") for block in blocks[:-1]]


def tokens_of(datas: list[bytes]) -> str:
    """The content of the well-formed chat or completion chunks."""
    text = []
    for data in datas:
        if data == b"[DONE]":
            continue
        try:
            doc = json.loads(data)
        except ValueError:
            continue
        for choice in doc["choices"]:
            text.append(choice.get("delta", {}).get("content") or choice.get("text") or "")
    return "".join(text)


def stream_text(port: int, body: dict[str, Any], path: str = CHAT) -> str:
    with Client(port) as c:
        resp = c.request("POST", path, body)
    assert resp.status == 200
    return tokens_of([data.encode() for _, data in resp.events()])


# --- fixtures -------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_logged_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A fault is the server's deliberate act, never an error it logs."""
    caplog.set_level(logging.INFO)
    yield
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(*faults, **config)`` starts a server with those ``--fault``
    values in a thread; all are stopped after."""
    started: list[SimServerThread] = []

    def start(*faults: str, **kw: Any) -> SimServerThread:
        config = SimConfig(faults=tuple(parse_fault(f) for f in faults), **kw)
        handle = SimServer.start_in_thread(config)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()


# --- resets -----------------------------------------------------------------------------


def test_reset_before_head(serve: Any) -> None:
    sim = serve("reset-before-head")
    for body in (STREAM, chat_body(max_tokens=3)):  # streamed or not
        wire = exchange(sim.port, request_bytes("POST", CHAT, body))
        assert (wire.head, wire.body, wire.ending) == ("", b"", "reset")
    # listings never get a fault
    with Client(sim.port) as c:
        assert c.request("GET", "/health").status == 200
        assert c.request("GET", "/v1/models").status == 200
        # nor does a request refused anyway
        assert c.request("POST", CHAT, {"messages": []}).status == 400
    assert sim.stats.faults == {"reset-before-head": 2}
    assert sim.stats.responses == 0


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_reset_mid_stream(serve: Any, path: str) -> None:
    sim = serve("reset-mid-stream")
    body = STREAM if path == CHAT else completion_body(stream=True, max_tokens=10)
    wire = exchange(sim.port, request_bytes("POST", path, body))
    assert wire.status == 200 and wire.header("transfer-encoding") == "chunked"
    assert wire.ending == "reset"
    chunks = dechunk(wire.body)
    assert not chunks.last and chunks.rest == b""
    datas = events(chunks.data)
    roles = 1 if path == CHAT else 0
    assert len(datas) == roles + 5  # the first half of the 10 tokens
    assert len(tokens_of(datas)) == 5
    assert b"[DONE]" not in datas


def test_reset_after_last(serve: Any) -> None:
    sim = serve("reset-after-last")
    body = chat_body(stream=True, max_tokens=10, stream_options={"include_usage": True})
    wire = exchange(sim.port, request_bytes("POST", CHAT, body))
    assert wire.status == 200 and wire.ending == "reset"
    chunks = dechunk(wire.body)
    assert not chunks.last and chunks.rest == b""  # every chunk but the last
    datas = events(chunks.data)
    assert datas[-1] == b"[DONE]"
    assert json.loads(datas[-2])["usage"]["completion_tokens"] == 10
    assert len(tokens_of(datas)) == 10


# --- chunk framing ------------------------------------------------------------------------


def test_truncated_chunk(serve: Any) -> None:
    sim = serve("truncated-chunk")
    wire = exchange(sim.port, request_bytes("POST", CHAT, STREAM))
    assert wire.status == 200 and wire.ending == "eof"  # a clean close
    chunks = dechunk(wire.body)
    assert not chunks.last
    assert len(events(chunks.data)) == 1 + 5
    # the rest: a size line, then fewer bytes than it announces
    size_line, _, data = chunks.rest.partition(b"\r\n")
    announced = int(size_line, 16)
    assert 0 < len(data) < announced
    assert data.startswith(b"data: {")


def test_bad_chunk_size(serve: Any) -> None:
    sim = serve("bad-chunk-size")
    wire = exchange(sim.port, request_bytes("POST", CHAT, STREAM))
    assert wire.status == 200 and wire.ending == "eof"
    chunks = dechunk(wire.body)
    assert not chunks.last
    assert len(events(chunks.data)) == 1 + 5
    assert chunks.rest.startswith(b"zz\r\ndata: {")


def test_framing_faults_skip_http10(serve: Any) -> None:
    """HTTP/1.0 gets no chunked coding, so there is no chunk to break."""
    sim = serve("truncated-chunk")
    wire = exchange(sim.port, request_bytes("POST", CHAT, STREAM, version="HTTP/1.0"))
    assert wire.ending == "eof" and wire.header("transfer-encoding") is None
    assert events(wire.body)[-1] == b"[DONE]"
    assert sim.stats.faults == {"truncated-chunk": 0}


# --- statuses -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 500, 503, 429])
def test_status_faults(serve: Any, status: int) -> None:
    sim = serve(f"status-{status}")
    with Client(sim.port) as c:
        for body in (STREAM, chat_body(max_tokens=3)):
            resp = c.request("POST", CHAT, body)
            assert resp.status == status
            assert resp.headers["content-type"] == "application/json"
            assert "connection" not in resp.headers  # the connection is kept
            error = resp.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            if status == 429:
                assert resp.headers["retry-after"] == "1"
                assert error["code"] == "rate_limit_exceeded"
            else:
                assert "retry-after" not in resp.headers
                kind = "invalid_request_error" if status < 500 else "server_error"
                assert error["type"] == kind
        assert c.request("GET", "/health").status == 200  # on the same connection
    assert sim.stats.faults == {f"status-{status}": 2}
    assert sim.stats.errors == 2


def test_status_head_bytes(serve: Any) -> None:
    sim = serve("status-429")
    wire = exchange(sim.port, request_bytes("POST", CHAT, STREAM, headers={"Connection": "close"}))
    assert wire.head.startswith("HTTP/1.1 429 Too Many Requests\r\n")
    assert "\r\nretry-after: 1" in wire.head
    assert wire.header("content-length") == str(len(wire.body))


# --- the content of the stream ---------------------------------------------------------------


def test_garbage(serve: Any) -> None:
    sim = serve("garbage", seed=5)
    wire = exchange(sim.port, request_bytes("POST", CHAT, STREAM))
    assert wire.status == 200 and wire.header("content-type") == "text/event-stream"
    assert wire.ending == "eof"
    chunks = dechunk(wire.body)
    assert not chunks.last and chunks.rest == b""  # well-formed chunks, no last one
    noise = chunks.data
    assert len(noise) == 64 * 1024
    assert b"\n" not in noise and b"\r" not in noise and not noise.startswith(b"data:")
    # the same seed, the same noise
    again = serve("garbage", seed=5)
    assert dechunk(exchange(again.port, request_bytes("POST", CHAT, STREAM)).body).data == noise


@pytest.mark.parametrize("fault", ["malformed-event", "invalid-utf8", "oversized-event"])
def test_extra_event_between_good_ones(serve: Any, fault: str) -> None:
    sim = serve(fault, seed=3, fault_event_bytes=100_000)
    plain = serve(seed=3)
    wire = exchange(sim.port, request_bytes("POST", CHAT, STREAM, headers={"Connection": "close"}))
    assert wire.status == 200 and wire.ending == "eof"
    chunks = dechunk(wire.body)
    assert chunks.last and chunks.rest == b""  # the response completes
    datas = events(chunks.data)
    assert len(datas) == 1 + 10 + 1 + 1  # role, tokens, the extra event, [DONE]
    extra = datas[6]  # after the role chunk and 5 tokens
    if fault == "malformed-event":
        assert extra == b'{"choices": ['
    elif fault == "invalid-utf8":
        assert b'"content":"\xff\xfe"' in extra
        with pytest.raises(UnicodeDecodeError):
            extra.decode()
    else:
        doc = json.loads(extra)
        assert doc["choices"][0]["delta"]["content"] == "x" * 100_000
        assert len(extra) > 100_000
        del datas[6]  # its text is not the answer's
    # every token arrives, the same text as without the fault
    assert tokens_of(datas) == stream_text(plain.port, STREAM)
    assert datas[-1] == b"[DONE]"


def test_stall(serve: Any) -> None:
    sim = serve("stall", fault_stall_s=0.3)
    with Client(sim.port) as c:
        resp = c.request("POST", CHAT, STREAM)
    stamped = resp.events()
    assert stamped[-1][1] == "[DONE]"
    docs = [json.loads(data) for _, data in stamped[:-1]]
    assert len(tokens_of([json.dumps(d).encode() for d in docs])) == 10
    # The pause falls between the first token (event 1) and the second,
    # both on the reader's clock and on the server's stamps (less the
    # first one's lateness: the second is due 0.3 s after the first's deadline).
    assert stamped[2][0] - stamped[1][0] >= 290_000_000
    sends = [d["mlpe_send_ns"] for d in docs]
    assert sends[2] - sends[1] >= 290_000_000
    assert sends[-1] - sends[2] < 300_000_000


def test_slow_head(serve: Any) -> None:
    sim = serve("slow-head", fault_slow_head_s=0.002)
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock:
        sock.sendall(request_bytes("POST", CHAT, STREAM))
        t0 = time.monotonic()
        head_reads = 0
        data = b""
        while b"\r\n\r\n" not in data:
            piece = sock.recv(1 << 16)
            assert piece
            head_reads += 1
            data += piece
        took = time.monotonic() - t0
        while not data.endswith(b"\r\n0\r\n\r\n"):
            piece = sock.recv(1 << 16)
            assert piece, "the connection closed"
            data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    size = len(head) + 4
    assert took >= (size - 1) * 0.002 * 0.9
    assert head_reads > size // 4  # a byte at a time, mostly one read each
    # then the stream, as usual
    chunks = dechunk(body)
    assert chunks.last and chunks.rest == b""
    datas = events(chunks.data)
    assert len(datas) == 1 + 10 + 1 and len(tokens_of(datas)) == 10 and datas[-1] == b"[DONE]"


def test_no_done_and_double_done(serve: Any) -> None:
    sim = serve("no-done=1@-0.2", "double-done")
    with Client(sim.port) as c:
        resp = c.request("POST", CHAT, STREAM)  # within 0.2 s of the start
        datas = [data for _, data in resp.events()]
        assert "[DONE]" not in datas and len(datas) == 11
        time.sleep(0.25)
        resp = c.request("POST", CHAT, STREAM)  # the same connection, kept
        datas = [data for _, data in resp.events()]
        assert datas[-2:] == ["[DONE]", "[DONE]"] and len(datas) == 13
    assert sim.stats.faults == {"no-done": 1, "double-done": 1}
    assert sim.stats.responses == 2


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_interrupt(serve: Any, path: str) -> None:
    """llama.cpp's interrupt_requests: the first half of the tokens, then
    [DONE] with no finish reason and no usage chunk, the last chunk, and a
    FIN although the head kept the connection."""
    sim = serve("interrupt")
    asked = {"stream": True, "max_tokens": 10, "stream_options": {"include_usage": True}}
    body = chat_body(**asked) if path == CHAT else completion_body(**asked)
    wire = exchange(sim.port, request_bytes("POST", path, body))
    assert wire.status == 200 and wire.header("connection") is None and wire.ending == "eof"
    chunks = dechunk(wire.body)
    assert chunks.last and chunks.rest == b""  # the body ended properly
    datas = events(chunks.data)
    roles = 1 if path == CHAT else 0
    assert len(datas) == roles + 5 + 1 and datas[-1] == b"[DONE]"
    assert len(tokens_of(datas)) == 5
    docs = [json.loads(data) for data in datas[:-1]]
    assert all(doc["choices"][0]["finish_reason"] is None and "usage" not in doc for doc in docs)
    # not streamed: the first half of the text, finish_reason null, then FIN
    wire = exchange(sim.port, request_bytes("POST", path, {**body, "stream": False}))
    assert wire.status == 200 and wire.header("connection") is None and wire.ending == "eof"
    choice = json.loads(wire.body)["choices"][0]
    assert len(choice["message"]["content"] if path == CHAT else choice["text"]) == 5
    assert choice["finish_reason"] is None
    assert sim.stats.faults == {"interrupt": 2} and sim.stats.responses == 2


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_empty_done(serve: Any, framing: str) -> None:
    """A 200 event stream of [DONE] alone, at once; a body with empty content
    and finish_reason null; the connection kept."""
    sim = serve("empty-done", framing=framing, ttft_ms=Dist("fixed", 2000))
    with Client(sim.port) as c:
        started = time.monotonic()
        for path, body in ((CHAT, STREAM), (COMPLETIONS, completion_body(stream=True))):
            resp = c.request("POST", path, body)
            assert resp.status == 200 and resp.headers["content-type"] == "text/event-stream"
            assert [data for _, data in resp.events()] == ["[DONE]"]
        resp = c.request("POST", CHAT, chat_body(max_tokens=10))  # the same connection
        choice = resp.json()["choices"][0]
        assert choice["message"]["content"] == "" and choice["finish_reason"] is None
        assert resp.json()["usage"]["completion_tokens"] == 0
        assert time.monotonic() - started < 1.5  # at once, not at the first token's deadline
    assert sim.stats.faults == {"empty-done": 3} and sim.stats.responses == 3


@pytest.mark.parametrize("body", [STREAM, chat_body(max_tokens=3)])
def test_close_after_response(serve: Any, body: dict[str, Any]) -> None:
    sim = serve("close-after-response")
    with Client(sim.port) as c:
        resp = c.request("POST", CHAT, body)
        assert resp.status == 200 and "connection" not in resp.headers
        assert c.at_eof()  # closed without notice, right after the response
        # the next request on it meets a closed connection
        try:
            c.send(request_bytes("POST", CHAT, body))
            answer, _ = read_until_closed(c.sock)
        except (BrokenPipeError, ConnectionResetError):
            answer = b""
        assert answer == b""
    # a request that asks to close anyway is not faulted: nothing to hide
    wire = exchange(sim.port, request_bytes("POST", CHAT, body, headers={"Connection": "close"}))
    assert wire.status == 200 and wire.header("connection") == "close"
    assert sim.stats.faults == {"close-after-response": 1}


# --- which requests get a fault -------------------------------------------------------------


def statuses(port: int, count: int) -> list[int]:
    with Client(port) as c:
        return [c.request("POST", CHAT, chat_body(max_tokens=2)).status for _ in range(count)]


def texts(port: int, count: int) -> list[str | None]:
    """Each request's text, None for a faulted one."""
    out: list[str | None] = []
    with Client(port) as c:
        for _ in range(count):
            resp = c.request("POST", COMPLETIONS, completion_body())
            out.append(resp.json()["choices"][0]["text"] if resp.status == 200 else None)
    return out


def test_fraction_is_seeded_and_leaves_the_others_alone(serve: Any) -> None:
    first = statuses(serve("status-503=0.5", seed=11).port, 200)
    again = statuses(serve("status-503=0.5", seed=11).port, 200)
    other = statuses(serve("status-503=0.5", seed=12).port, 200)
    hit = {i for i, status in enumerate(first) if status == 503}
    assert set(first) == {200, 503}
    assert 70 <= len(hit) <= 130
    assert first == again  # the same requests, for the same seed
    assert other != first
    # The faulted requests' text is drawn all the same: the others get
    # exactly the text they get without any fault.
    sim = serve("status-503=0.5", seed=11)
    faulted = texts(sim.port, 200)
    plain = texts(serve(seed=11).port, 200)
    assert {i for i, text in enumerate(faulted) if text is None} == hit
    assert all(text == plain[i] for i, text in enumerate(faulted) if text is not None)
    assert sim.stats.faults == {"status-503": len(hit)}
    assert sim.stats.as_dict()["fault:status-503"] == len(hit)


def test_window(serve: Any) -> None:
    sim = serve("status-500@0.3-", "status-503@-0.3")
    assert statuses(sim.port, 2) == [503, 503]  # within 0.3 s of the start
    time.sleep(0.35)
    assert statuses(sim.port, 2) == [500, 500]
    assert statuses(serve("status-500@1000-").port, 3) == [200] * 3


def test_first_listed_match_wins(serve: Any) -> None:
    sim = serve("status-500", "status-503")
    assert statuses(sim.port, 3) == [500] * 3
    assert sim.stats.faults == {"status-500": 3, "status-503": 0}
    # A fault that cannot apply does not match: a stream fault on a
    # whole (non-streamed) response leaves it to the next.
    sim = serve("no-done", "status-503")
    with Client(sim.port) as c:
        assert c.request("POST", CHAT, chat_body(max_tokens=2)).status == 503
        assert [d for _, d in c.request("POST", CHAT, STREAM).events()][-1] != "[DONE]"
    assert sim.stats.faults == {"no-done": 1, "status-503": 1}


def picks(specs: tuple[FaultSpec, ...], times_ns: list[int], streamed: bool = True) -> list[Any]:
    picker = FaultPicker(specs, 7, 0)
    return [
        picker.pick(t, streamed=streamed, http1=True, chunked=True, keep_alive=True)
        for t in times_ns
    ]


def test_selection_depends_on_seed_order_and_place_only() -> None:
    """Every request takes one draw per fault, whatever the windows and
    whether the fault can apply, so a fault's hits do not depend on them."""
    a = FaultSpec("status-500", 0.3)
    b = FaultSpec("stall", 0.5)
    b_late = FaultSpec("stall", 0.5, 1.0, None)  # from 1 s after the start
    times = [i * 20_000_000 for i in range(100)]  # over 2 s
    full = picks((a, b), times)
    windowed = picks((a, b_late), times)
    assert 10 < full.count(a) < 50 and 20 < full.count(b) < 60
    for t, x, y in zip(times, full, windowed, strict=True):
        if x is a or t >= 10**9:
            assert (x is a, x is b) == (y is a, y is b_late)
        else:
            assert y is None
    # a stream fault cannot apply to a whole response: the next fault's hits
    # are then those it has behind a fault that never fires
    never = FaultSpec("stall", 0.5, 1000.0, None)
    whole = picks((b, a), times, streamed=False)
    assert whole == picks((never, a), times)
    streamed = picks((b, a), times)  # there b goes first where it hits
    hits_whole = {i for i, x in enumerate(whole) if x is a}
    assert {i for i, x in enumerate(streamed) if x is a} < hits_whole


# --- HTTP/2 --------------------------------------------------------------------------------------


def h2_events(body: bytes) -> list[bytes] | None:
    """The events of an HTTP/2 response body, None if it does not end with one."""
    if not body.endswith(b"\n\n"):
        return None
    return events(body)


@pytest.mark.parametrize(
    "fault",
    ["reset-before-head", "reset-mid-stream", "reset-after-last", "status-429", "status-503",
     "malformed-event", "invalid-utf8", "oversized-event", "no-done", "double-done", "garbage",
     "stall", "truncated-chunk", "bad-chunk-size", "slow-head", "close-after-response",
     "interrupt", "empty-done"],
)  # fmt: skip
def test_http2(serve: Any, fault: str) -> None:
    """Half of eight streams on one connection get the fault, if it applies
    over HTTP/2; the others are answered as usual."""
    sim = serve(f"{fault}=0.5", http2=True, seed=2, fault_stall_s=0.2, fault_event_bytes=70_000)
    with H2Client(sim.port) as c:
        resps = [c.request("POST", CHAT, STREAM) for _ in range(8)]
        c.wait(*resps)
    hit = sim.stats.faults[fault]
    if fault in ("truncated-chunk", "bad-chunk-size", "slow-head", "close-after-response"):
        assert hit == 0  # HTTP/1.x only
    else:
        assert 0 < hit < 8
    normal = []
    odd = []
    for r in resps:
        datas = h2_events(bytes(r.body))
        plain = r.ended and r.status == 200 and datas is not None and len(datas) == 1 + 10 + 1
        (normal if plain else odd).append((r, datas))
    for _, datas in normal:
        assert datas is not None and datas[-1] == b"[DONE]" and len(tokens_of(datas)) == 10
    assert len(odd) == (0 if fault == "stall" else hit)
    for r, datas in odd:
        if fault == "reset-before-head":
            assert r.reset == INTERNAL_ERROR and r.status is None and not r.body
            assert not [f for f in c.frames if f.stream_id == r.stream_id and f.type == HEADERS]
        elif fault == "reset-mid-stream":
            assert r.reset == INTERNAL_ERROR and r.status == 200
            assert datas is not None and len(datas) == 1 + 5
        elif fault == "reset-after-last":
            assert r.reset == INTERNAL_ERROR and not r.ended
            assert datas is not None and datas[-1] == b"[DONE]" and len(datas) == 1 + 10 + 1
        elif fault.startswith("status-"):
            assert r.ended and r.status == int(fault[7:])
            assert ("retry-after" in r.headers) == (fault == "status-429")
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        elif fault == "no-done":
            assert r.ended and datas is not None and len(datas) == 11
            assert b"[DONE]" not in datas
        elif fault == "double-done":
            assert r.ended and datas is not None and datas[-2:] == [b"[DONE]", b"[DONE]"]
        elif fault == "interrupt":  # the role chunk, 5 tokens, [DONE], END_STREAM
            assert r.ended and r.status == 200 and datas is not None and len(datas) == 1 + 5 + 1
            assert datas[-1] == b"[DONE]" and len(tokens_of(datas)) == 5
            assert all(json.loads(d)["choices"][0]["finish_reason"] is None for d in datas[:-1])
        elif fault == "empty-done":
            assert r.ended and r.status == 200 and datas == [b"[DONE]"]
        elif fault == "garbage":
            assert r.ended and r.status == 200 and len(r.body) == 64 * 1024
            assert b"\n" not in r.body and b"\r" not in r.body
        else:  # an extra event after the role chunk and 5 tokens
            assert r.ended and datas is not None and len(datas) == 1 + 10 + 1 + 1
            extra = datas[6]
            assert len(tokens_of(datas[:6] + datas[7:])) == 10
            if fault == "malformed-event":
                assert extra == b'{"choices": ['
            elif fault == "invalid-utf8":
                assert b'"content":"\xff\xfe"' in extra
            else:
                assert len(json.loads(extra)["choices"][0]["delta"]["content"]) == 70_000
    # RST_STREAM on the reset streams only
    resets = [f for f in c.frames if f.type == RST_STREAM]
    assert len(resets) == (hit if fault.startswith("reset") else 0)


def test_http2_stall_is_a_pause(serve: Any) -> None:
    sim = serve("stall", http2=True, fault_stall_s=0.3)
    with H2Client(sim.port) as c:
        r = c.request("POST", CHAT, STREAM)
        c.wait(r)
    sends = [json.loads(d)["mlpe_send_ns"] for d in events(bytes(r.body))[:-1]]
    assert sends[2] - sends[1] >= 290_000_000  # after the first token
    assert sends[-1] - sends[2] < 300_000_000


# --- configuration and the command line -------------------------------------------------------


def test_parse_fault() -> None:
    assert parse_fault("stall") == FaultSpec("stall")
    assert parse_fault("stall=0.5@60-") == FaultSpec("stall", 0.5, 60.0, None)
    assert parse_fault("reset-mid-stream@-30") == FaultSpec("reset-mid-stream", 1.0, None, 30.0)
    assert parse_fault("status-503=.25@10-20.5") == FaultSpec("status-503", 0.25, 10.0, 20.5)
    assert parse_fault("status-503=.25@10-20.5").status == 503
    for text in ("stall", "stall=0.5@60-", "no-done@-30", "status-429=0.1@1-2"):
        assert str(parse_fault(text)) == text
    for name in FAULTS:
        if name != "status-CODE":
            assert parse_fault(name) == FaultSpec(name)


def test_cli_flags_map_to_config() -> None:
    ns = build_arg_parser().parse_args(
        ["--fault", "stall=0.5@60-", "--fault", "status-429", "--fault-stall-s", "2",
         "--fault-slow-head-s", "0.01", "--fault-event-bytes", "1000", "--seed", "4"]
    )  # fmt: skip
    cfg = config_from_args(ns)
    assert cfg.faults == (FaultSpec("stall", 0.5, 60.0), FaultSpec("status-429"))
    assert (cfg.fault_stall_s, cfg.fault_slow_head_s, cfg.fault_event_bytes) == (2, 0.01, 1000)
    plain = SimConfig()
    assert (plain.faults, plain.fault_stall_s, plain.fault_slow_head_s) == ((), 30.0, 1.0)
    assert plain.fault_event_bytes == 2 * 1024 * 1024


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fault", "explode"], "--fault explode: unknown fault 'explode' (known: "),
        (["--fault", "stall=0"], "the fraction must be in (0, 1], not 0.0"),
        (["--fault", "stall=1.5"], "the fraction must be in (0, 1], not 1.5"),
        (["--fault", "stall=half"], "the fraction must be a number in (0, 1], not 'half'"),
        (["--fault", "stall=-0.5"], "the fraction must be a number in (0, 1]"),
        (["--fault", "stall@5-2"], "empty window: from 5.0 s to 2.0 s"),
        (["--fault", "stall@5"], "the window must be FROM-TO, FROM- or -TO"),
        (["--fault", "stall@-"], "the window must be FROM-TO, FROM- or -TO"),
        (["--fault", "stall@x-3"], "window bound 'x' is not a number of seconds"),
        (["--fault", "status-600"], "status-600: the status must be 400 to 599"),
        (["--fault", "status-CODE"], "unknown fault 'status-CODE'"),
        (["--fault-stall-s", "2"], "--fault-stall-s without --fault"),
        (["--fault", "stall", "--fault-stall-s", "-1"], "--fault-stall-s must be a finite"),
        (["--fault", "stall", "--fault-slow-head-s", "inf"], "--fault-slow-head-s must be"),
        (["--fault", "stall", "--fault-event-bytes", "0"], "--fault-event-bytes must be >= 1"),
    ],
)  # fmt: skip
def test_cli_mistakes_are_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = cli_main(["serve", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="fraction"):
        FaultSpec("stall", 0.0)
    with pytest.raises(ValueError, match="unknown fault"):
        FaultSpec("nope")
    with pytest.raises(ValueError, match="fault_stall_s"):
        SimConfig(fault_stall_s=-1)
    with pytest.raises(ValueError, match="FaultSpec"):
        SimConfig(faults=("stall",))  # type: ignore[arg-type]


def test_help_documents_every_fault(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_arg_parser().parse_args(["--help"])
    # argparse wraps lines at hyphens too
    out = re.sub(r"-\s+", "-", " ".join(capsys.readouterr().out.split()))
    for flag in ("--fault ", "--fault-stall-s", "--fault-slow-head-s", "--fault-event-bytes"):
        assert flag in out
    for name in FAULTS:
        assert f"{name}:" in out
