"""A ground-truth SSE server for the timing benches (issue 23), not the product's.

The simulated endpoint (``mlpe-fast serve``) stamps a token just *before*
its write, and over HTTP/2 it encodes every due stream's frames with the
``h2`` library between that stamp and the write; a client stamp compared
with it measures the server as much as the client.  This server writes each
SSE event with one ``send`` on a TCP_NODELAY socket and stamps
``CLOCK_MONOTONIC`` right after the call returns, so the stamp bounds the
moment the event was on the wire from above: on loopback the kernel carries
a segment to the receiving socket inside the sender's ``send`` (the
receiver's kernel stamp is taken there), so a client's arrival stamp of the
event lies between the two stamps the server logs around its write.

Each request is paired by its salted prompt (``"[" + 16 hex + "] "``,
:mod:`mlpe_fast.load.salt`): the server logs, per content event, the salt,
the event's index (0: the first token), the stamp before the write that
completed it and the stamp after it; the salt is also echoed in the final
usage chunk (``gt_salt``).  The log is written when the server gets SIGTERM.

HTTP/1.1: chunked SSE, one event per chunk per write, in one of the SSE
framings (``--framing``): ``lf``, ``crlf``, ``cr``, ``nospace`` (no space
after the colon), ``comment`` (a comment line in each event), ``multiline``
(each chunk's JSON on two ``data:`` lines) and ``split`` (each event in two
writes, the second completing it; its stamps are the second write's).

HTTP/2 (``--http2``): h2c with prior knowledge, a minimal framing written
here: the client's preface and SETTINGS, HEADERS (not decoded: the salt is
in the body), DATA (acknowledged on the connection), PING, WINDOW_UPDATE,
RST_STREAM and GOAWAY.  Each DATA frame, one stream's one event, is its own
write and its own stamp: no stream's frames wait for another's.

The server is an instrument: with ``--fifo N`` it asks for SCHED_FIFO at N
(above the client's receive thread) so that the thread it wakes cannot run
between its write and its stamp on the same core.  It uses the standard
library only, and prints its port on the first line of its output.

    python bench/ground_truth.py --framing lf --ttft-ms 20 --itl-ms 2 --tokens 16 --log gt.log
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import selectors
import signal
import socket
import struct
import sys
import time
from typing import Any

FRAMINGS = ("lf", "crlf", "cr", "nospace", "comment", "multiline", "split")
SALT = re.compile(rb"\[([0-9a-f]{16})\] ")
monotonic_ns = time.monotonic_ns

# HTTP/2 (RFC 9113): frame types, flags, the preface.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
# HPACK [RFC 7541]: ":status: 200" is static entry 8; "content-type" is
# entry 31, sent as a literal without indexing (0x0f then 31 - 15).
RESPONSE_HEADERS = b"\x88\x0f\x10\x11text/event-stream"


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", stream_id)
        + payload
    )


def chunk_json(salt: str, index: int, tokens: int) -> bytes:
    """Token ``index`` of a chat completion's stream (vLLM's chunk shape)."""
    last = index == tokens - 1
    return json.dumps(
        {
            "id": f"gt-{salt}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "gt",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": f" t{index}"},
                    "logprobs": None,
                    "finish_reason": "stop" if last else None,
                }
            ],
        },
        separators=(",", ":"),
    ).encode()


def usage_json(salt: str, tokens: int) -> bytes:
    return json.dumps(
        {
            "id": f"gt-{salt}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "gt",
            "choices": [],
            "usage": {
                "prompt_tokens": 1,
                "completion_tokens": tokens,
                "total_tokens": tokens + 1,
                "gt_salt": salt,
            },
        },
        separators=(",", ":"),
    ).encode()


def sse_pieces(payload: bytes, framing: str) -> list[bytes]:
    """One event in ``framing``: the writes that carry it, in order."""
    if framing == "lf":
        return [b"data: " + payload + b"\n\n"]
    if framing == "crlf":
        return [b"data: " + payload + b"\r\n\r\n"]
    if framing == "cr":
        return [b"data: " + payload + b"\r\r"]
    if framing == "nospace":
        return [b"data:" + payload + b"\n\n"]
    if framing == "comment":
        return [b": ground truth\ndata: " + payload + b"\n\n"]
    if framing == "multiline":
        # Two data lines are joined with "\n" (WHATWG SSE): JSON whitespace.
        cut = payload.find(b",") + 1 if payload.startswith(b"{") else len(payload)
        return [b"data: " + payload[:cut] + b"\ndata: " + payload[cut:] + b"\n\n"]
    if framing == "split":
        event = b"data: " + payload + b"\n\n"
        return [event[: len(event) // 2], event[len(event) // 2 :]]
    raise ValueError(framing)


def chunked(piece: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(piece), piece)


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.selector = selectors.DefaultSelector()
        self.timers: list[tuple[int, int, Any]] = []
        self.sequence = 0
        # (salt, token index, before the write, after it), per content event.
        self.log: list[tuple[str, int, int, int]] = []
        self.stop = False

    # -- the loop ----------------------------------------------------------

    def at(self, deadline: int, action: Any) -> None:
        self.sequence += 1
        heapq.heappush(self.timers, (deadline, self.sequence, action))

    def run(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, self.accept)
        while not self.stop:
            now = monotonic_ns()
            while self.timers and self.timers[0][0] <= now:
                _, _, action = heapq.heappop(self.timers)
                action()
                now = monotonic_ns()
            timeout = (self.timers[0][0] - now) / 1e9 if self.timers else 0.2
            for key, _ in self.selector.select(max(timeout, 0.0)):
                key.data(key.fileobj)

    def accept(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except BlockingIOError:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(True)  # writes are small; reads only when readable
        connection: H1 | H2 = H2(self, sock) if self.args.http2 else H1(self, sock)
        self.selector.register(sock, selectors.EVENT_READ, connection.readable)

    def close(self, sock: socket.socket) -> None:
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    def send(self, sock: socket.socket, data: bytes) -> tuple[int, int]:
        """One write; the stamps before and after it (0, 0 if the peer left)."""
        before = monotonic_ns()
        try:
            sock.sendall(data)
        except OSError:
            return 0, 0
        return before, monotonic_ns()

    def stream(self, salt: str, write: Any, finish: Any) -> None:
        """Schedules a response's tokens: ``write(piece, last)`` per write."""
        args = self.args
        start = monotonic_ns() + args.ttft_ms * 1_000_000
        itl = args.itl_ms * 1_000_000

        def token(index: int) -> None:
            pieces = sse_pieces(chunk_json(salt, index, args.tokens), args.framing)
            stamps = (0, 0)
            for piece in pieces:
                stamps = write(piece)
            if stamps[1]:
                self.log.append((salt, index, stamps[0], stamps[1]))
            if index + 1 < args.tokens:
                self.at(start + (index + 1) * itl, lambda: token(index + 1))
            else:
                finish()

        self.at(start, lambda: token(0))

    def dump(self) -> None:
        with open(self.args.log, "w") as out:
            for salt, index, before, after in self.log:
                out.write(f"{salt} {index} {before} {after}\n")


class H1:
    """One HTTP/1.1 connection: keep-alive, one request at a time."""

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.buffer = b""

    def readable(self, sock: socket.socket) -> None:
        data = sock.recv(65536)
        if not data:
            self.server.close(sock)
            return
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            match = re.search(rb"\r\ncontent-length: *(\d+)", head)
            length = int(match.group(1)) if match else 0
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            self.respond(body)

    def respond(self, body: bytes) -> None:
        server, sock = self.server, self.sock
        found = SALT.search(body)
        salt = found.group(1).decode() if found else "-"
        server.send(
            sock,
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
        )

        def finish() -> None:
            tail = b"".join(sse_pieces(usage_json(salt, server.args.tokens), "lf"))
            server.send(sock, chunked(tail) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")

        server.stream(salt, lambda piece: server.send(sock, chunked(piece)), finish)


class H2:
    """One h2c connection (prior knowledge), the frames a client sends."""

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.buffer = b""
        self.preface = False
        self.bodies: dict[int, bytes] = {}
        self.window = 65535  # the connection's send window [6.9]
        self.closed: set[int] = set()
        # SETTINGS_MAX_CONCURRENT_STREAMS 100 [6.5.2].
        server.send(sock, frame(SETTINGS, 0, 0, struct.pack(">HI", 0x3, 100)))

    def readable(self, sock: socket.socket) -> None:
        data = sock.recv(65536)
        if not data:
            self.server.close(sock)
            return
        self.buffer += data
        if not self.preface:
            if len(self.buffer) < len(PREFACE):
                return
            if not self.buffer.startswith(PREFACE):
                self.server.close(sock)
                return
            self.buffer = self.buffer[len(PREFACE) :]
            self.preface = True
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                return
            kind, flags = self.buffer[3], self.buffer[4]
            stream_id = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload = self.buffer[9 : 9 + length]
            self.buffer = self.buffer[9 + length :]
            self.on_frame(kind, flags, stream_id, payload)

    def on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        server, sock = self.server, self.sock
        if kind == SETTINGS and not flags & ACK:
            server.send(sock, frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            server.send(sock, frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE and stream_id == 0:
            self.window += int.from_bytes(payload, "big") & 0x7FFFFFFF
        elif kind == HEADERS:
            self.bodies[stream_id] = b""
            if flags & END_STREAM:
                self.respond(stream_id)
        elif kind == DATA:
            if length := len(payload):
                server.send(sock, frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", length)))
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            self.bodies[stream_id] = self.bodies.get(stream_id, b"") + payload
            if flags & END_STREAM:
                self.respond(stream_id)
        elif kind == RST_STREAM:
            self.closed.add(stream_id)
        elif kind == GOAWAY:
            server.close(sock)

    def data(self, stream_id: int, payload: bytes, end: bool = False) -> tuple[int, int]:
        if stream_id in self.closed:
            return 0, 0
        if len(payload) > self.window:
            # The client opens a 16 MiB window at once; a run never needs more.
            raise RuntimeError("the client's connection window is exhausted")
        self.window -= len(payload)
        flags = END_STREAM if end else 0
        return self.server.send(self.sock, frame(DATA, flags, stream_id, payload))

    def respond(self, stream_id: int) -> None:
        server = self.server
        found = SALT.search(self.bodies.pop(stream_id, b""))
        salt = found.group(1).decode() if found else "-"
        server.send(self.sock, frame(HEADERS, END_HEADERS, stream_id, RESPONSE_HEADERS))

        def finish() -> None:
            self.data(stream_id, b"".join(sse_pieces(usage_json(salt, server.args.tokens), "lf")))
            self.data(stream_id, b"data: [DONE]\n\n", end=True)
            self.closed.discard(stream_id)

        server.stream(salt, lambda piece: self.data(stream_id, piece), finish)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--framing", choices=FRAMINGS, default="lf")
    parser.add_argument("--http2", action="store_true")
    parser.add_argument("--ttft-ms", type=int, default=20)
    parser.add_argument("--itl-ms", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--fifo", type=int, default=0, help="SCHED_FIFO priority (0: none)")
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    if args.http2 and args.framing != "lf":
        parser.error("HTTP/2 sends the LF framing")
    policy = "normal"
    if args.fifo:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.fifo))
            policy = f"SCHED_FIFO {args.fifo}"
        except OSError as error:
            policy = f"normal (SCHED_FIFO refused: {error.strerror})"
    server = Server(args)

    def stop(*_: Any) -> None:
        server.stop = True

    signal.signal(signal.SIGTERM, stop)
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    print(listener.getsockname()[1], policy, flush=True)
    server.run(listener)
    server.dump()


if __name__ == "__main__":
    sys.exit(main())
