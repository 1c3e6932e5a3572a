"""The simulated endpoint's HTTP/2 (h2c and TLS with ALPN) and HTTPS, over
real loopback sockets.

The client here is a few lines around the ``h2`` library's client side,
independent of mlpe_fast's own client.  A tap in front of ``h2`` records
every frame the server sends (sizes, RST_STREAM and GOAWAY codes) and keeps
GOAWAY frames from ``h2``, whose connection would otherwise refuse the rest
of the streams the server still answers after one (RFC 9113 section 6.8).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import DataReceived, ResponseReceived, StreamEnded, StreamReset
from h2.exceptions import StreamClosedError
from h2.settings import SettingCodes

from mlpe_fast.cli import main as cli_main
from mlpe_fast.sim.server import (
    Dist,
    SimConfig,
    SimServer,
    SimServerThread,
    build_arg_parser,
    config_from_args,
)
from tests.integration.test_sim_server import (
    CHAT,
    COMPLETIONS,
    MS,
    SRC,
    Client,
    chat_body,
    completion_body,
    openai_usage,
    request_bytes,
)

if TYPE_CHECKING:  # cryptography is imported only by the tls_certs fixture
    from tests.certs import CertFiles

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x7, 0x8
END_STREAM = 0x1


# --- a small HTTP/2 client ------------------------------------------------------------


@dataclass
class Frame:
    type: int
    flags: int
    stream_id: int
    payload: bytes

    def raw(self) -> bytes:
        return (
            len(self.payload).to_bytes(3, "big")
            + bytes((self.type, self.flags))
            + self.stream_id.to_bytes(4, "big")
            + self.payload
        )


def split_frames(buf: bytearray) -> list[Frame]:
    """The whole frames at the start of ``buf``, removed from it."""
    frames = []
    while len(buf) >= 9:
        length = int.from_bytes(buf[:3], "big")
        if len(buf) < 9 + length:
            break
        sid = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        frames.append(Frame(buf[3], buf[4], sid, bytes(buf[9 : 9 + length])))
        del buf[: 9 + length]
    return frames


def goaway_of(frame: Frame) -> tuple[int, int]:
    """(last stream id, error code) of a GOAWAY frame."""
    p = frame.payload
    return int.from_bytes(p[:4], "big") & 0x7FFFFFFF, int.from_bytes(p[4:8], "big")


@dataclass
class H2Response:
    stream_id: int
    t_sent: int  # monotonic ns just before the request's bytes were written
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset: int | None = None  # the error code of the server's RST_STREAM
    t_head: int = 0

    @property
    def done(self) -> bool:
        return self.ended or self.reset is not None

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[str]:
        text = self.body.decode()
        assert text.endswith("\n\n") or not text, text[-50:]
        return [block.removeprefix("data: ") for block in text.split("\n\n")[:-1]]

    def docs(self) -> list[dict[str, Any]]:
        events = self.events()
        assert events[-1] == "[DONE]"
        return [json.loads(e) for e in events[:-1]]


class H2Client:
    """One HTTP/2 connection; every read is stamped and its frames kept."""

    def __init__(
        self,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        settings: dict[int, int] | None = None,
        ack: bool = True,
        preface: bool = True,
        server_hostname: str = "localhost",
    ) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock: socket.socket = (
            tls.wrap_socket(raw, server_hostname=server_hostname) if tls is not None else raw
        )
        self.scheme = b"https" if tls is not None else b"http"
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.ack = ack
        self.frames: list[Frame] = []
        self.goaways: list[tuple[int, int]] = []  # (last stream id, error code)
        self.responses: dict[int, H2Response] = {}
        self.uploads: dict[int, bytes] = {}
        self.eof = False
        self._buf = bytearray()
        self.conn.initiate_connection()
        if settings:  # in force for h2 once the server acknowledges them
            self.conn.update_settings(settings)
        if preface:
            self.flush()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> H2Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(
        self, method: str, path: str, body: Any = None, *, flush: bool = True, sized: bool = True
    ) -> H2Response:
        """Opens a stream; ``sized=False`` leaves out the content-length."""
        sid = self.conn.get_next_available_stream_id()
        headers = request_headers(method, path, self.scheme)
        raw = (
            b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        )
        if body is not None:
            headers.append((b"content-type", b"application/json"))
            if sized:
                headers.append((b"content-length", b"%d" % len(raw)))
        self.conn.send_headers(sid, headers, end_stream=body is None)
        if body is not None:
            self.uploads[sid] = raw
            self._upload()
        resp = self.responses[sid] = H2Response(sid, time.monotonic_ns())
        if flush:
            self.flush()
        return resp

    def cancel(self, resp: H2Response) -> None:
        self.conn.reset_stream(resp.stream_id, ErrorCodes.CANCEL)
        self.flush()

    def _upload(self) -> None:
        """Sends request bodies as far as the server's windows allow."""
        conn = self.conn
        for sid, rest in list(self.uploads.items()):
            try:
                while rest:
                    n = min(
                        len(rest), conn.local_flow_control_window(sid), conn.max_outbound_frame_size
                    )
                    if n <= 0:
                        break
                    conn.send_data(sid, rest[:n], end_stream=n == len(rest))
                    rest = rest[n:]
            except StreamClosedError:  # refused or reset by the server
                rest = b""
            if rest:
                self.uploads[sid] = rest
            else:
                del self.uploads[sid]

    def read(self) -> bool:
        """One read; False at the end of the connection."""
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError:
            data = b""
        t = time.monotonic_ns()
        if not data:
            self.eof = True
            return False
        self._buf += data
        events = []
        for frame in split_frames(self._buf):
            self.frames.append(frame)
            if frame.type == GOAWAY:
                self.goaways.append(goaway_of(frame))
            else:
                # one frame at a time: h2 applies a SETTINGS acknowledgement
                # (a larger frame size of ours) only to later calls
                events += self.conn.receive_data(frame.raw())
        for event in events:
            resp = self.responses.get(getattr(event, "stream_id", 0))
            if isinstance(event, ResponseReceived):
                assert resp is not None
                headers = {k.decode(): v.decode() for k, v in event.headers}
                resp.status = int(headers.pop(":status"))
                resp.headers = headers
                resp.t_head = t
            elif isinstance(event, DataReceived):
                assert resp is not None
                resp.body += event.data
                if self.ack:
                    self.conn.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
            elif isinstance(event, StreamEnded):
                assert resp is not None
                resp.ended = True
            elif isinstance(event, StreamReset) and resp is not None and resp.reset is None:
                # the first one: h2 answers DATA on a stream it reset with
                # another RST_STREAM (STREAM_CLOSED)
                resp.reset = event.error_code
        self._upload()
        self.flush()
        return True

    def wait(self, *resps: H2Response, timeout: float = 10.0) -> None:
        """Reads until every response in ``resps`` is complete or reset."""
        give_up = time.monotonic() + timeout
        while not all(r.done for r in resps):
            assert time.monotonic() < give_up, "timed out"
            assert self.read(), "the server closed the connection"

    def get(self, method: str, path: str, body: Any = None) -> H2Response:
        resp = self.request(method, path, body)
        self.wait(resp)
        return resp

    def read_to_eof(self, timeout: float = 10.0) -> None:
        give_up = time.monotonic() + timeout
        while self.read():
            assert time.monotonic() < give_up, "timed out"

    def idle(self, seconds: float) -> None:
        """Reads whatever comes within ``seconds``."""
        self.sock.settimeout(seconds)
        try:
            while self.read():
                pass
        except TimeoutError:
            pass
        finally:
            self.sock.settimeout(10)

    def data_frames(self) -> list[Frame]:
        return [f for f in self.frames if f.type == DATA]

    def resets(self) -> dict[int, int]:
        """Stream id -> error code of the first RST_STREAM the server sent on it."""
        out: dict[int, int] = {}
        for f in self.frames:
            if f.type == RST_STREAM:
                out.setdefault(f.stream_id, int.from_bytes(f.payload, "big"))
        return out


def request_headers(method: str, path: str, scheme: bytes = b"http") -> list[tuple[bytes, bytes]]:
    return [
        (b":method", method.encode()),
        (b":scheme", scheme),
        (b":authority", b"localhost"),
        (b":path", path.encode()),
    ]


def client_tls(certs: CertFiles, alpn: list[str] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca_file))
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    return context


def content(docs: list[dict[str, Any]]) -> str:
    return "".join(
        d["choices"][0].get("delta", {}).get("content") or "" for d in docs if d["choices"]
    )


def token_events(resp: H2Response) -> int:
    """Events carrying a token (chat content; the role chunk excluded)."""
    return sum(1 for e in resp.events() if '"content":"' in e and '"role"' not in e)


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """A chunk or body without what differs between two runs (time)."""
    doc = {k: v for k, v in doc.items() if not k.startswith("mlpe_") and k != "created"}
    if "usage" in doc:
        doc["usage"] = openai_usage(doc["usage"])
    return doc


# --- fixtures -----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_logged_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The server must never log a warning, an error or a traceback.
    (Not DEBUG: hpack logs every header it codes at that level.)"""
    caplog.set_level(logging.INFO)
    yield
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(**config)`` starts a server in a thread (HTTP/2 on unless
    told otherwise); all are stopped after."""
    started: list[SimServerThread] = []

    def start(**kw: Any) -> SimServerThread:
        kw.setdefault("http2", True)
        handle = SimServer.start_in_thread(SimConfig(**kw))
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()


# --- h2c: the same answers as HTTP/1.1 ------------------------------------------------


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_h2c_answers_equal_the_http1_answers(serve: Any, loop: str) -> None:
    requests = [
        (CHAT, chat_body("abc", stream=True, max_tokens=9, stream_options={"include_usage": True})),
        (COMPLETIONS, completion_body("hello", stream=True, max_tokens=7)),
        (COMPLETIONS, completion_body("hi", stream=True, stream_options={"include_usage": True})),
        (CHAT, chat_body("non-streamed", max_tokens=5)),
    ]
    h1 = serve(seed=5, loop=loop, reasoning_tokens=2, output_len=Dist.fixed(11), http2=False)
    h2 = serve(seed=5, loop=loop, reasoning_tokens=2, output_len=Dist.fixed(11))
    with Client(h1.port) as c:
        expected = [c.request("POST", path, body) for path, body in requests]
    with H2Client(h2.port) as c:
        got = [c.get("POST", path, body) for path, body in requests]
    for want, have in zip(expected, got, strict=True):
        assert have.status == want.status == 200
        assert have.headers["content-type"] == want.headers["content-type"]
        if want.headers["content-type"] == "text/event-stream":
            assert "content-length" not in have.headers
            assert have.headers["cache-control"] == "no-cache"
            assert [comparable(d) for d in have.docs()] == [comparable(d) for d in want.docs()]
        else:
            assert int(have.headers["content-length"]) == len(have.body)
            assert comparable(have.json()) == comparable(want.json())
    assert h2.stats.h2_connections == 1
    assert h2.stats.h2_streams == len(requests)
    assert h2.stats.responses == len(requests)


def test_stamps_over_h2(serve: Any) -> None:
    sim = serve(ttft_ms=Dist.fixed(5), itl_ms=Dist.fixed(1))
    with H2Client(sim.port) as c:
        resp = c.get(
            "POST",
            CHAT,
            chat_body(stream=True, max_tokens=5, stream_options={"include_usage": True}),
        )
    docs = resp.docs()
    usage = docs[-1]["usage"]
    # openai_usage checks 0 < recv <= first_send
    assert openai_usage(usage)["completion_tokens"] == 5
    recv = usage["mlpe_recv_ns"]
    assert resp.t_sent <= recv
    stamps = [d["mlpe_send_ns"] for d in docs]
    assert stamps == sorted(stamps)
    assert min(stamps) >= recv
    # the first token's event carries (about) the first-send stamp, after the TTFT
    assert usage["mlpe_first_send_ns"] - recv >= 5 * MS
    assert abs(docs[1]["mlpe_send_ns"] - usage["mlpe_first_send_ns"]) < 1 * MS


def test_many_concurrent_streams_on_one_connection(serve: Any) -> None:
    sim = serve(ttft_ms=Dist.fixed(20), itl_ms=Dist.fixed(15))
    with H2Client(sim.port) as c:
        resps = [
            c.request("POST", COMPLETIONS, completion_body(stream=True, max_tokens=10), flush=False)
            for _ in range(50)
        ]
        c.flush()
        c.wait(*resps)
    for resp in resps:
        assert resp.status == 200
        assert len(resp.docs()) == 10
    # independent streams, all in flight at once: every first token went
    # out before any stream's last one (due 135 ms after its first)
    firsts = [r.docs()[0]["mlpe_send_ns"] for r in resps]
    lasts = [r.docs()[-1]["mlpe_send_ns"] for r in resps]
    assert max(firsts) < min(lasts)
    assert sim.stats.connections == 1
    assert sim.stats.h2_streams == 50
    assert sim.stats.tokens == 500


def test_head_at_first_token(serve: Any) -> None:
    late, early = (
        serve(ttft_ms=Dist.fixed(30), head_at_first_token=True),
        serve(ttft_ms=Dist.fixed(30)),
    )
    with H2Client(late.port) as c:
        resp = c.get("POST", COMPLETIONS, completion_body(stream=True, max_tokens=2))
    assert resp.t_head - resp.t_sent >= 30 * MS
    with H2Client(early.port) as c:
        resp = c.request("POST", COMPLETIONS, completion_body(stream=True, max_tokens=2))
        while resp.status is None:
            c.read()
        assert resp.t_head - resp.t_sent < 25 * MS  # on arrival
        c.wait(resp)


def test_content_length_framing(serve: Any) -> None:
    sim = serve(framing="length")
    with H2Client(sim.port) as c:
        resp = c.get("POST", CHAT, chat_body(stream=True, max_tokens=4))
    assert resp.headers["content-type"] == "text/event-stream"
    assert int(resp.headers["content-length"]) == len(resp.body)
    assert len(resp.docs()) == 5


# --- whole responses and errors ------------------------------------------------------------


def test_listings_and_errors_keep_the_connection(serve: Any) -> None:
    sim = serve(model="m-h2")
    with H2Client(sim.port) as c:
        models = c.get("GET", "/v1/models?x=1")
        assert models.status == 200
        assert models.json()["data"][0]["id"] == "m-h2"
        assert int(models.headers["content-length"]) == len(models.body)
        health = c.get("GET", "/health")
        assert (health.status, bytes(health.body)) == (200, b"")
        # an empty body: END_STREAM on the HEADERS frame
        (head,) = [f for f in c.frames if f.type == HEADERS and f.stream_id == health.stream_id]
        assert head.flags & END_STREAM
        missing = c.get("GET", "/nope")
        assert missing.status == 404
        assert missing.json()["error"]["type"] == "invalid_request_error"
        wrong = c.get("GET", CHAT)
        assert (wrong.status, wrong.headers["allow"]) == (405, "POST")
        broken = c.get("POST", CHAT, b"{not json")
        assert broken.status == 400
        bad = c.get("POST", CHAT, chat_body(max_tokens=0))
        assert (bad.status, bad.json()["error"]["param"]) == (400, "max_tokens")
        chat = c.get("POST", CHAT, chat_body(max_tokens=3))
        assert chat.status == 200
        assert len(chat.json()["choices"][0]["message"]["content"]) == 3
    assert sim.stats.errors == 4
    assert sim.stats.connections == 1


def test_body_over_limit_gets_413(serve: Any) -> None:
    sim = serve(max_body=1000)
    # larger than the windows: still being sent when the 413 comes
    big = chat_body("x" * 100_000, stream=True, max_tokens=2)
    with H2Client(sim.port) as c:
        # told by content-length
        resp = c.get("POST", CHAT, big)
        assert resp.status == 413
        assert resp.json()["error"]["message"].startswith("body of ")
        # no content-length: found while reading
        unsized = c.request("POST", CHAT, big, sized=False)
        c.wait(unsized)
        assert unsized.status == 413
        # each answered before its request ended, then told to stop sending
        # it without error (RFC 9113 section 8.1)
        resets = c.resets()
        assert resets[resp.stream_id] == resets[unsized.stream_id] == ErrorCodes.NO_ERROR
        # the connection is unharmed
        assert len(c.get("POST", CHAT, chat_body(stream=True, max_tokens=2)).docs()) == 3
    assert sim.stats.errors == 2


# --- flow control --------------------------------------------------------------------------


def test_request_body_through_a_one_byte_window(serve: Any) -> None:
    sim = serve(h2_window=1)
    prompt = "the quick brown fox " * 15
    with H2Client(sim.port) as c:
        while not any(f.type == SETTINGS for f in c.frames):
            c.read()  # the server's SETTINGS, acknowledged by the client
        assert c.conn.remote_settings.initial_window_size == 1
        resp = c.get(
            "POST",
            CHAT,
            chat_body(prompt, stream=True, max_tokens=3, stream_options={"include_usage": True}),
        )
    assert openai_usage(resp.docs()[-1]["usage"])["prompt_tokens"] == len(prompt)
    # the body went a byte at a time, each acknowledged
    updates = [f for f in c.frames if f.type == WINDOW_UPDATE and f.stream_id == resp.stream_id]
    assert len(updates) >= len(prompt)


def test_long_response_needs_the_clients_acknowledgements(serve: Any) -> None:
    sim = serve()
    with H2Client(sim.port, ack=False) as c:
        resp = c.request("POST", CHAT, chat_body(stream=True, max_tokens=2000))
        c.idle(0.2)
        # the default windows (65,535 bytes) are spent, the rest waits
        assert len(resp.body) == 65535
        assert not resp.done
        assert sim.stats.write_pauses == 0
        c.ack = True
        c.conn.acknowledge_received_data(65535, resp.stream_id)
        c.flush()
        c.wait(resp)
    docs = resp.docs()
    assert len(docs) == 2001
    assert len(resp.body) > 300_000
    assert all(len(f.payload) <= 16384 for f in c.data_frames())
    assert max(len(f.payload) for f in c.data_frames()) == 16384


def test_streams_share_the_connection_window(serve: Any) -> None:
    sim = serve(itl_ms=Dist.fixed(0.01))
    with H2Client(sim.port, settings={SettingCodes.MAX_FRAME_SIZE: 1 << 20}) as c:
        resps = [
            c.request("POST", CHAT, chat_body(stream=True, max_tokens=1500), flush=False)
            for _ in range(6)
        ]
        c.flush()
        c.wait(*resps)
    for resp in resps:
        docs = resp.docs()
        assert len(docs) == 1501
        stamps = [d["mlpe_send_ns"] for d in docs]
        assert stamps == sorted(stamps)
    # the client's larger frame size is used (still within its windows)
    assert max(len(f.payload) for f in c.data_frames()) > 16384
    assert sim.stats.responses == 6


# --- streams: limits, cancellation ---------------------------------------------------------


def test_streams_beyond_max_concurrent_are_refused(serve: Any) -> None:
    sim = serve(h2_max_streams=2, ttft_ms=Dist.fixed(50))
    with H2Client(sim.port) as c:
        # all four go out before the server's SETTINGS can have been read
        resps = [
            c.request("POST", COMPLETIONS, completion_body(stream=True, max_tokens=2), flush=False)
            for _ in range(4)
        ]
        c.flush()
        c.wait(*resps)
        assert c.conn.remote_settings.max_concurrent_streams == 2
        refused = ErrorCodes.REFUSED_STREAM
        assert [r.reset for r in resps] == [None, None, refused, refused]
        assert [len(r.docs()) for r in resps[:2]] == [2, 2]
        assert not resps[2].body and resps[2].status is None
        # with room again, a retry is served
        assert (
            len(c.get("POST", COMPLETIONS, completion_body(stream=True, max_tokens=2)).docs()) == 2
        )
    assert sim.stats.h2_refused == 2
    assert sim.stats.requests == 3


def test_client_reset_cancels_only_that_stream(serve: Any) -> None:
    sim = serve(itl_ms=Dist.fixed(1))
    with H2Client(sim.port) as c:
        doomed = c.request("POST", CHAT, chat_body(stream=True, max_tokens=1000))
        other = c.request("POST", CHAT, chat_body(stream=True, max_tokens=30))
        while token_events(doomed) < 3:
            c.read()
        c.cancel(doomed)
        c.wait(other)
        assert len(other.docs()) == 31
        assert len(c.get("GET", "/v1/models").json()["data"]) == 1
    time.sleep(0.05)
    assert sim.stats.h2_client_resets == 1
    assert sim.stats.tokens < 1000


def test_client_disconnect_mid_stream(serve: Any) -> None:
    sim = serve(itl_ms=Dist.fixed(1))
    with H2Client(sim.port) as c:
        resp = c.request("POST", CHAT, chat_body(stream=True, max_tokens=1000))
        while not resp.body:
            c.read()
    time.sleep(0.05)
    with H2Client(sim.port) as c:
        assert len(c.get("POST", CHAT, chat_body(stream=True, max_tokens=2)).docs()) == 3
    assert sim.stats.connections == 2


def test_protocol_error_ends_the_connection_with_goaway(serve: Any) -> None:
    sim = serve()
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock:
        # the preface and SETTINGS, then DATA on stream 0 (section 6.1: a
        # connection error of type PROTOCOL_ERROR)
        settings = Frame(SETTINGS, 0, 0, b"")
        sock.sendall(PREFACE + settings.raw() + Frame(DATA, 0, 0, b"x").raw())
        data = bytearray()
        while chunk := sock.recv(65536):
            data += chunk
    goaways = [goaway_of(f) for f in split_frames(data) if f.type == GOAWAY]
    assert goaways == [(0, ErrorCodes.PROTOCOL_ERROR)]
    with H2Client(sim.port) as c:
        assert c.get("GET", "/health").status == 200


def test_server_shutdown_closes_h2_connections() -> None:
    async def main() -> None:
        async with SimServer(SimConfig(http2=True, itl_ms=Dist.fixed(1))) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
            conn.initiate_connection()
            body = json.dumps(chat_body(stream=True, max_tokens=10_000)).encode()
            conn.send_headers(1, request_headers("POST", CHAT))
            conn.send_data(1, body, end_stream=True)
            writer.write(conn.data_to_send())
            await reader.read(65536)  # the stream is under way
        with contextlib.suppress(ConnectionResetError):
            while await reader.read(65536):  # the server went: the connection ends
                pass
        writer.close()

    asyncio.run(main())


# --- negotiation: preface, ALPN, TLS ---------------------------------------------------------


def test_preface_split_across_reads_and_http1_beside_h2c(serve: Any) -> None:
    sim = serve()
    c = H2Client(sim.port, preface=False)
    with c:
        data = c.conn.data_to_send()
        assert data.startswith(PREFACE)
        for piece in (data[:1], data[1:5], data[5:23], data[23:]):
            c.sock.sendall(piece)
            time.sleep(0.01)
        assert len(c.get("POST", CHAT, chat_body(stream=True, max_tokens=2)).docs()) == 3
    # a request whose first byte agrees with the preface is still HTTP/1.1
    with Client(sim.port) as h1:
        h1.send(b"P")
        time.sleep(0.01)
        h1.send(request_bytes("POST", CHAT, chat_body(stream=True, max_tokens=2))[1:])
        resp = h1.response()
        assert resp.headers["transfer-encoding"] == "chunked"
        assert len(resp.docs()) == 3
        assert h1.request("GET", "/health").status == 200
    assert sim.stats.h2_connections == 1
    assert sim.stats.connections == 2


def test_without_http2_a_preface_is_http1(serve: Any) -> None:
    sim = serve(http2=False)
    with Client(sim.port) as c:
        c.send(PREFACE)
        resp = c.response()
        assert resp.status == 505  # "PRI * HTTP/2.0" read as an HTTP/1.x request line
        assert c.at_eof()
    assert sim.stats.h2_connections == 0


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_tls_alpn_h2(serve: Any, tls_certs: CertFiles, loop: str) -> None:
    sim = serve(loop=loop, tls_cert=str(tls_certs.cert_file), tls_key=str(tls_certs.key_file))
    assert sim.url == f"https://127.0.0.1:{sim.port}"
    with H2Client(sim.port, tls=client_tls(tls_certs, ["h2", "http/1.1"])) as c:
        assert isinstance(c.sock, ssl.SSLSocket)
        assert c.sock.selected_alpn_protocol() == "h2"
        resps = [
            c.request("POST", CHAT, chat_body(stream=True, max_tokens=300), flush=False)
            for _ in range(3)
        ]
        c.flush()
        c.wait(*resps)
    assert [len(r.docs()) for r in resps] == [301] * 3
    assert sim.stats.h2_connections == 1


@pytest.mark.parametrize(
    ("http2", "alpn", "selected"),
    [
        (True, ["http/1.1"], "http/1.1"),
        (True, None, None),
        (False, ["h2", "http/1.1"], "http/1.1"),  # h2 is not offered
        (False, None, None),
    ],
)
def test_tls_http1(
    serve: Any, tls_certs: CertFiles, http2: bool, alpn: list[str] | None, selected: str | None
) -> None:
    sim = serve(http2=http2, tls_cert=str(tls_certs.cert_file), tls_key=str(tls_certs.key_file))
    context = client_tls(tls_certs, alpn)
    raw = socket.create_connection(("127.0.0.1", sim.port), timeout=10)
    with context.wrap_socket(raw, server_hostname="localhost") as sock:
        assert sock.selected_alpn_protocol() == selected
        c = Client.__new__(Client)  # the HTTP/1.1 test client over this socket
        c.sock, c.buf, c.t_read = sock, bytearray(), 0
        resp = c.request("POST", CHAT, chat_body(stream=True, max_tokens=3))
        assert resp.headers["transfer-encoding"] == "chunked"
        assert len(resp.docs()) == 4
        assert c.request("GET", "/health").status == 200
    assert sim.stats.h2_connections == 0


# --- faults --------------------------------------------------------------------------------


def test_refuse_every_nth_stream(serve: Any) -> None:
    sim = serve(h2_refuse_every=3)
    with H2Client(sim.port) as c:
        resps = [c.get("POST", CHAT, chat_body(stream=True, max_tokens=2)) for _ in range(6)]
        refused = [r for r in resps if r.reset is not None]
        assert [resps.index(r) for r in refused] == [2, 5]  # streams 3 and 6 of the server
        for r in refused:
            assert r.reset == ErrorCodes.REFUSED_STREAM
            assert r.status is None and not r.body
        # the client may retry a refused stream (RFC 9113 section 8.7)
        retry = c.get("POST", CHAT, chat_body(stream=True, max_tokens=2))
        assert len(retry.docs()) == 3
    # refused streams were not processed: no request, no response
    assert sim.stats.h2_refused == 2
    assert sim.stats.requests == sim.stats.responses == 5


@pytest.mark.parametrize("itl", [0.0, 1.0])
def test_reset_after_k_tokens(serve: Any, itl: float) -> None:
    sim = serve(h2_reset_every=2, h2_reset_after_tokens=3, itl_ms=Dist.fixed(itl))
    with H2Client(sim.port) as c:
        resps = [c.get("POST", CHAT, chat_body(stream=True, max_tokens=10)) for _ in range(4)]
        for i, resp in enumerate(resps):
            assert resp.status == 200
            if i % 2 == 0:
                assert resp.reset is None
                assert len(resp.docs()) == 11
            else:
                assert resp.reset == ErrorCodes.INTERNAL_ERROR
                assert token_events(resp) == 3  # and nothing after them
                assert "[DONE]" not in resp.events()
        # fewer tokens than K: all of them, then the reset before [DONE]
        short = c.get("POST", CHAT, chat_body(stream=True, max_tokens=2))  # stream 5: fine
        short = c.get("POST", CHAT, chat_body(stream=True, max_tokens=2))  # stream 6: reset
        assert short.reset == ErrorCodes.INTERNAL_ERROR
        assert token_events(short) == 2
        assert "[DONE]" not in short.events()
        # a non-streamed response on a reset stream is reset unsent
        c.get("GET", "/health")  # stream 7
        whole = c.get("POST", CHAT, chat_body(max_tokens=2))  # stream 8
        assert whole.reset == ErrorCodes.INTERNAL_ERROR and whole.status is None
    assert sim.stats.h2_resets == 4


def test_reset_after_zero_tokens(serve: Any) -> None:
    sim = serve(h2_reset_every=1, h2_reset_after_tokens=0)
    with H2Client(sim.port) as c:
        resp = c.get("POST", CHAT, chat_body(stream=True, max_tokens=5))
    assert resp.status == 200
    assert resp.reset == ErrorCodes.INTERNAL_ERROR
    assert token_events(resp) == 0
    assert sim.stats.tokens == 0


def test_goaway_after_n_streams(serve: Any) -> None:
    sim = serve(h2_goaway_after=2, ttft_ms=Dist.fixed(30), itl_ms=Dist.fixed(1))
    for _ in range(2):  # each connection gets its own GOAWAY
        with H2Client(sim.port) as c:
            resps = [
                c.request("POST", CHAT, chat_body(stream=True, max_tokens=5), flush=False)
                for _ in range(4)
            ]
            c.flush()
            c.wait(*resps)
            c.read_to_eof()
            assert c.goaways == [(3, 0)]  # last stream 3, NO_ERROR
            # streams 1 and 3 answered in full, 5 and 7 not processed
            assert [len(r.docs()) for r in resps[:2]] == [6, 6]
            assert [r.reset for r in resps[2:]] == [ErrorCodes.REFUSED_STREAM] * 2
            assert all(not r.body for r in resps[2:])
            # the GOAWAY came before the answers ended, the end of the connection after
            goaway_at = next(i for i, f in enumerate(c.frames) if f.type == GOAWAY)
            ends = [i for i, f in enumerate(c.frames) if f.type == DATA and f.flags & END_STREAM]
            assert len(ends) == 2 and goaway_at < min(ends)
    assert sim.stats.h2_goaways == 2
    assert sim.stats.requests == 4
    assert sim.stats.h2_refused == 4


def test_goaway_on_a_sequential_connection(serve: Any) -> None:
    sim = serve(h2_goaway_after=2)
    with H2Client(sim.port) as c:
        first = c.get("POST", COMPLETIONS, completion_body(stream=True, max_tokens=2))
        assert not c.goaways
        second = c.get("POST", COMPLETIONS, completion_body(stream=True, max_tokens=2))
        c.read_to_eof()
        assert c.goaways == [(second.stream_id, 0)]
    assert len(first.docs()) == len(second.docs()) == 2


# --- command line ----------------------------------------------------------------------------


def test_cli_flags_map_to_config(tls_certs: CertFiles) -> None:
    ns = build_arg_parser().parse_args(
        [
            "--http2", "--tls-cert", str(tls_certs.cert_file), "--tls-key",
            str(tls_certs.key_file), "--h2-max-streams", "7", "--h2-window", "1",
            "--h2-refuse-every", "3", "--h2-reset-every", "4", "--h2-reset-after-tokens", "0",
            "--h2-goaway-after", "5",
        ]
    )  # fmt: skip
    cfg = config_from_args(ns)
    assert cfg.http2
    assert (cfg.tls_cert, cfg.tls_key) == (str(tls_certs.cert_file), str(tls_certs.key_file))
    assert (cfg.h2_max_streams, cfg.h2_window) == (7, 1)
    assert (cfg.h2_refuse_every, cfg.h2_reset_every, cfg.h2_reset_after_tokens) == (3, 4, 0)
    assert cfg.h2_goaway_after == 5
    plain = config_from_args(build_arg_parser().parse_args([]))
    assert not plain.http2 and plain.tls_cert is None and plain.h2_window == 65535


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http2", "--h2-window", "0"], "--h2-window must be 1 to 2**31-1, not 0"),
        (["--http2", "--h2-window", "2147483648"], "--h2-window must be 1 to 2**31-1"),
        (["--http2", "--h2-max-streams", "0"], "--h2-max-streams must be 1 to 2**31-1, not 0"),
        (["--http2", "--h2-refuse-every", "-1"], "--h2-refuse-every must be 0 to 2**31-1"),
        (["--http2", "--h2-reset-after-tokens", "-2"], "--h2-reset-after-tokens must be 0"),
        (["--h2-reset-every", "2", "--h2-goaway-after", "1"],
         "--h2-reset-every, --h2-goaway-after without --http2"),
        (["--h2-window", "10"], "--h2-window without --http2"),
        (["--tls-cert", "{cert}"], "--tls-cert and --tls-key go together"),
        (["--tls-key", "{key}"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "/no/such.pem", "--tls-key", "/no/such-key.pem"], "cannot be loaded"),
        (["--tls-cert", "{cert}", "--tls-key", "{ca}"], "cannot be loaded"),
    ],
)  # fmt: skip
def test_cli_mistakes_are_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], tls_certs: CertFiles, argv: list[str], message: str
) -> None:
    paths = {"{cert}": tls_certs.cert_file, "{key}": tls_certs.key_file, "{ca}": tls_certs.ca_file}
    code = cli_main(["serve", *(str(paths.get(a, a)) for a in argv)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="h2_window"):
        SimConfig(http2=True, h2_window=0)
    with pytest.raises(ValueError, match="h2_max_streams"):
        SimConfig(http2=True, h2_max_streams=2**31)
    with pytest.raises(ValueError, match="h2_goaway_after must be >= 0"):
        SimConfig(http2=True, h2_goaway_after=-1)
    with pytest.raises(ValueError, match="h2_refuse_every without http2"):
        SimConfig(h2_refuse_every=2)
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        SimConfig(tls_cert="a.pem")


def test_serve_help_documents_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_arg_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--http2", "--tls-cert", "--tls-key", "--h2-max-streams", "--h2-window",
                 "--h2-refuse-every", "--h2-reset-every", "--h2-reset-after-tokens",
                 "--h2-goaway-after"):  # fmt: skip
        assert flag in out


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")
def test_serve_cli_with_tls_and_http2(tls_certs: CertFiles) -> None:
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlpe_fast.sim.server", "--port", "0", "--http2",
         "--tls-cert", str(tls_certs.cert_file), "--tls-key", str(tls_certs.key_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "HTTP/2" in line
        url = next(word for word in line.split() if word.startswith("https://"))
        port = int(url.rsplit(":", 1)[1])
        with H2Client(port, tls=client_tls(tls_certs, ["h2"])) as c:
            assert c.get("GET", "/health").status == 200
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert err == ""


def test_certs_are_made_at_test_time(serve: Any, tls_certs: CertFiles) -> None:
    assert tls_certs.ca_file.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert b"PRIVATE KEY" in tls_certs.key_file.read_bytes()
    assert tls_certs.key_file.stat().st_mode & 0o077 == 0
    # the server certificate verifies against the CA for its IP address
    # too (the other TLS tests connect to "localhost")
    sim = serve(tls_cert=str(tls_certs.cert_file), tls_key=str(tls_certs.key_file))
    tls = client_tls(tls_certs, ["h2"])
    with H2Client(sim.port, tls=tls, server_hostname="127.0.0.1") as c:
        assert c.get("GET", "/health").status == 200
