"""The simulated OpenAI-compatible endpoint: a real HTTP/1.1 (and, when
asked, HTTP/2) server on loopback that streams SSE with scripted timing
and stamps every event with its own send time.

What it serves
--------------
``POST /v1/chat/completions`` and ``POST /v1/completions`` (streaming with
``"stream": true``, else one JSON body), ``GET /v1/models`` (the configured
model) and ``GET /health``; ``POST /reset_prefix_cache`` (vLLM's) and
``/flush_cache`` (SGLang's), counted, and ``POST /tokenize`` with a
``--tokenizer`` (:mod:`mlpe_fast.sim.tokenize`), ``GET /metrics`` in
vLLM's or SGLang's Prometheus names, from the server's own state
(:mod:`mlpe_fast.sim._metrics`), and SGLang's native ``POST /generate``
(below).  Any ``model`` in a request is accepted; the
configured name is echoed.  The output is ``max_completion_tokens`` /
``max_tokens`` tokens when the request sets one (``finish_reason``
``"length"``), else a draw from ``SimConfig.output_len`` (``"stop"``);
``--max-tokens-field`` chooses which of the two fields are read
(``max_tokens`` only: as llama-cpp-python, which ignores the other).
Every token is one character of :data:`VOCAB` (letters, digits, space), all
in the character tokenizer's vocabulary, so a token count is a character
count.  Prompt tokens are counted the same way: the characters of the
prompt, or of the messages' text content (no chat template).

With an oracle (``--oracle``, :mod:`mlpe_fast.sim.oracle`) the text is
instead the reference output of the dataset sample whose prompt the request
carries (salt or not), cut into runs of ``--oracle-token-chars`` characters,
one token each, ``finish_reason`` ``"stop"``; ``max_tokens`` is ignored
unless ``--oracle-truncate``.  An unknown prompt gets 404 (``code``
``"oracle_prompt_not_found"``).

``POST /generate`` takes SGLang's request, ``input_ids`` (or ``text``),
``sampling_params.max_new_tokens`` (read whatever ``--max-tokens-field``
says) and ``stream``, and answers in SGLang's objects
(:func:`mlpe_fast.sim.stream.sglang_generate`): a stream is one event per
token whose ``text`` is the whole text so far and whose
``meta_info.completion_tokens`` counts the tokens so far, the last one with
``meta_info.finish_reason`` (``{"type": "length", "length": N}`` or
``{"type": "stop", ...}``), then ``data: [DONE]`` (no usage chunk: the
counts are in every event); with ``--incremental-streaming-output`` each
event's text is its token's alone.  A non-streaming answer is one such
object with the whole text.  The prompt counts its ids (or the characters
of its text); an oracle knows no prompt of ids (404).

A chat stream is: a role chunk (``{"role": "assistant", "content": ""}``),
one chunk per token (the first ``reasoning_tokens`` as
``reasoning_content``, the rest as ``content``; the last one carries the
``finish_reason``, as vLLM does), the usage chunk (``"choices": []``) when
``stream_options.include_usage`` is set, and ``data: [DONE]``.  A
completions stream is the same without the role chunk.

Timing
------
Times are ``time.monotonic_ns()``, which is ``CLOCK_MONOTONIC`` on Linux,
the clock the client stamps with.  For each request the server draws a
TTFT and, per later token, an inter-token delay (ITL) from the configured
distributions, and computes absolute deadlines from the request's base
time: token ``i`` is due at ``base + ttft + itl_1 + ... + itl_i``.  A late
wake-up therefore never delays later tokens.  ``base`` is the receive time,
or the end of the previous response when the request was pipelined behind
it on the same connection (responses on one connection go in order).

Every event due at a wake-up goes out in one ``transport.write`` (up to
4,096 events, about 1 MB; the rest follows on the next loop iteration); a
stream whose delays are all zero and that fits is written whole, response
head included, in one write.  The response head (and the chat role chunk)
is written on arrival, as vLLM and SGLang do, unless
``head_at_first_token`` holds it back until the first token.  No event is
ever sent before its deadline.

How late it is depends on the wake-up source (:mod:`mlpe_fast.sim._pacer`).
Measured on a loaded two-core Linux VM (``bench/bench_sim_server.py``,
20 ms TTFT and 2 ms ITL, ``mlpe_send_ns`` minus the deadline): with the
timerfd (the default on Linux) median 70 us, p90 110 us; with the loop's
millisecond timers (``timer="loop"``, the default elsewhere) median 0.66 ms,
p90 1.1 ms.  Tails beyond that are CPU scheduling, not the timers: the
stamps show them, so the ground truth stays exact.

Ground-truth stamps
-------------------
Each chunk, and each non-streaming body, carries two extra top-level
members:

``mlpe_recv_ns``
    ``time.monotonic_ns()`` read on entry to the ``data_received`` call
    whose bytes completed the request, i.e. just after the read that
    brought its last byte.  A client's issue stamp taken before it wrote
    the request is therefore ``<=`` this.
``mlpe_send_ns``
    ``time.monotonic_ns()`` read just before that event is encoded.  The
    events of one write are encoded back to back, about a microsecond
    each, and written right after, so each stamp precedes the
    ``transport.write`` carrying its event by at most the encoding of the
    rest of that write.  Within a response the stamps never decrease and
    are ``>= mlpe_recv_ns``.  Over HTTP/2 the frames that the streams of
    one connection queue during one wake-up (or while one read of requests
    is handled) share one ``transport.write`` at its end, unless they pass
    256 KiB: a stamp then precedes its write by at most the encoding of
    that wake-up's events, all streams of the connection included.

With ``framing="length"`` (and for non-streaming responses) the body is
built whole at the last token's deadline and written with a
Content-Length: every event then carries (nearly) the same send stamp and
inter-event timing is moot.  An HTTP/1.0 client never gets the chunked
coding (RFC 9112 section 6.1): its stream runs to the end of the connection.

Errors
------
Malformed requests get 400 (431 for an oversized head, 413 for an
oversized body, 501 for a transfer coding other than chunked, 505 for an
HTTP version other than 1.x) and the connection is closed, since framing is
lost.  Unknown paths get 404 and wrong methods 405 (with ``Allow``), a
body that is not a valid request gets 400 in OpenAI's error shape, and a
prompt an oracle does not know gets 404 in that shape; these keep the
connection.  No exception escapes into the event loop.

Faults
------
``faults`` (``--fault NAME[=FRACTION][@FROM-TO]``, repeatable) make
completion requests go wrong on purpose, so that a client's handling of
each failure can be tested: each request gets at most one fault, drawn
with the probability FRACTION (default 1) from a generator seeded by
``seed`` (the same requests in the same order get the same faults, and the
text of the others does not change), and only if it arrived FROM to TO
seconds after the server started (either bound may be left out).  The
first listed fault that a request's draws select, and that can apply to it,
is its fault; one that cannot apply (a framing fault over HTTP/2, a stream
fault on a non-streamed request) does not fire.  ``SimStats.faults`` counts
them.  The events around a fault are the usual ones, stamps included.

Over HTTP/1.1 (a stream being chunked), with what a client should make of
it:

``reset-before-head`` (any request)
    RST as soon as the request is read, nothing of a response: the
    connection failed with no response (on a reused connection, a client
    may send the request again, once, on a new one).
``reset-mid-stream`` (streams)
    RST after the first ``n // 2`` token events (``n`` the answer's
    tokens): an incomplete response (ECONNRESET after those events).
``reset-after-last`` (streams)
    RST after ``[DONE]``, before the last chunk (``0`` CRLF CRLF): every
    token and ``[DONE]`` arrived, only the HTTP message is cut short (a
    client that takes ``[DONE]`` as the end has the whole answer).
``truncated-chunk`` (HTTP/1.1 streams)
    after ``n // 2`` token events, a chunk whose size line announces the
    next event and whose data is half of it, then FIN: an incomplete
    response (EOF inside a chunk).
``bad-chunk-size`` (HTTP/1.1 streams)
    after ``n // 2`` token events, the chunk-size line ``zz`` (then that
    event and FIN): a malformed chunk size.
``status-CODE`` (any request; CODE 400 to 599)
    that status at once, with an OpenAI error body
    ``{"error": {"message", "type", "param", "code"}}`` and a
    Content-Length, the connection kept: an HTTP status error.
    ``status-429`` is a rate limit (``"code": "rate_limit_exceeded"``)
    with ``Retry-After: 1``.
``garbage`` (streams)
    a 200 event-stream head, then at the first token's deadline 64 KiB of
    random bytes with no CR or LF in well-formed chunks, then FIN without
    the last chunk: no event at all, and an incomplete response.
``malformed-event`` (streams)
    an extra event ``data: {"choices": [`` after ``n // 2`` token events;
    the response completes with all its tokens: one undecodable event
    (JSON syntax), the request otherwise a success.
``invalid-utf8`` (streams)
    an extra content event whose JSON string holds the bytes FF FE, after
    ``n // 2`` token events; the response completes: one undecodable event
    (invalid UTF-8), the request otherwise a success.
``stall`` (streams)
    nothing for ``fault_stall_s`` (default 30 s) after the first token,
    then the rest on its schedule shifted by the stall: a client with a
    shorter idle timeout gives up; else a success with one long gap.
``slow-head`` (HTTP/1.x streams)
    the response head one byte every ``fault_slow_head_s`` (default 1 s),
    then the role chunk and the tokens (those due meanwhile at once): a
    late first token, or a client's timeout.
``oversized-event`` (streams)
    an extra content event of ``fault_event_bytes`` characters (default
    2 MiB, past a client's usual 1 MiB limit) after ``n // 2`` token
    events, then the rest: an event too large.
``no-done`` (streams)
    the stream ends cleanly (last chunk) without ``data: [DONE]``.
``double-done`` (streams)
    ``data: [DONE]`` twice, then the last chunk: the second one is after
    the end of the stream.
``interrupt`` (any request)
    after ``n // 2`` token events, ``data: [DONE]`` with no finish reason
    and no usage chunk, the last chunk, then FIN (HTTP/2: END_STREAM), as
    llama.cpp's server ends the requests it interrupts; a JSON body has
    half the text and ``finish_reason`` null: an answer cut short.
``empty-done`` (any request)
    a 200 event-stream head and ``data: [DONE]`` at once; a JSON body has
    empty content and ``finish_reason`` null: no answer at all.
``close-after-response`` (HTTP/1.x requests on a kept connection)
    a normal response whose head keeps the connection (no
    ``Connection: close``), then FIN right after it: the client's next
    request on that connection meets a closed connection (the stale
    keep-alive race), and must be sent again on a new one.

Over HTTP/2 the status and content faults are the same (``garbage`` ends
with END_STREAM after its noise), the resets are RST_STREAM(INTERNAL_ERROR)
on the request's stream only (before HEADERS, after ``n // 2`` token
events, after ``[DONE]`` instead of END_STREAM), and ``truncated-chunk``,
``bad-chunk-size``, ``slow-head`` and ``close-after-response`` do not
apply.  With an HTTP/1.0 client (no chunked coding) the chunk faults do
not apply.  A faulted request's own delays may be drawn differently (a
reset stream draws fewer), so with random delays the others' timing may
shift; their text does not.

HTTP/2 and TLS
--------------
With ``http2`` (``--http2``) a cleartext connection whose first bytes are
the HTTP/2 preface is served as HTTP/2 (prior knowledge, "h2c"), any other
as HTTP/1.1; with ``tls_cert`` and ``tls_key`` the port speaks TLS only,
and ALPN picks the protocol (``h2`` is offered only with ``http2``; no
ALPN is HTTP/1.1).  Each stream carries one request, answered exactly as
over HTTP/1.1 (same routes, errors, bodies, events, timing and stamps; its
deadlines count from its own receipt, streams being independent).  The
details (frames, flow control, settings, the ``h2_*`` faults) are in
:mod:`mlpe_fast.sim._h2`; the choice of protocol in
:mod:`mlpe_fast.sim._negotiate`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import math
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import TextIO

from ._negotiate import make_ssl_context, protocol_factory
from ._pacer import make_pacer
from ._state import ServerState
from .config import H2_OPTIONS, VOCAB, Eol, Framing, LoopKind, SimConfig, SimStats
from .faults import FaultSpec, fault_help, parse_fault
from .oracle import DEFAULT_TOKEN_CHARS, load_oracle, parse_degrade, parse_oracle_arg
from .replay import load_replay
from .timing import DIST_KINDS, Dist

__all__ = (
    "VOCAB",
    "BindError",
    "Dist",
    "Eol",
    "FaultSpec",
    "Framing",
    "LoopKind",
    "SimConfig",
    "SimServer",
    "SimServerThread",
    "SimStats",
    "add_arguments",
    "build_arg_parser",
    "config_from_args",
    "main",
    "new_event_loop",
    "parse_fault",
    "serve_forever",
)


# --- the server -------------------------------------------------------------------


def new_event_loop(kind: LoopKind = "auto") -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop for ``"auto"`` where it is importable and
    not on Windows (``"uvloop"`` insists on it), else asyncio's default."""
    if kind != "asyncio" and sys.platform != "win32":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    elif kind == "uvloop":
        raise RuntimeError("uvloop does not run on Windows")
    return asyncio.new_event_loop()


class BindError(OSError):
    """The endpoint cannot listen where it was asked to: the port is in use,
    the address is not this machine's, a privileged port.  The message is
    one line naming the flag to change; the OS error is its ``__cause__``."""


def _bind_error(host: str, port: int, error: OSError) -> BindError:
    where = f"port {port} on {host or 'every address'}"
    reason = error.strerror or str(error)
    if isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL:
        return BindError(
            f"--host {host}: not an address of this machine ({reason}); "
            "pass 127.0.0.1, or 0.0.0.0 for every address"
        )
    if error.errno == errno.EADDRINUSE:
        return BindError(
            f"{where} is in use: another program listens there; "
            "pass another --port (0 picks a free one)"
        )
    if error.errno in (errno.EACCES, errno.EPERM):
        hint = "ports below 1024 need privileges; " if 0 < port < 1024 else ""
        return BindError(
            f"cannot listen on {where}: {reason}; {hint}pass another --port (0 picks a free one)"
        )
    return BindError(f"cannot listen on {where}: {reason}")


def _url(host: str, port: int, scheme: str = "http") -> str:
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


class SimServer:
    """The simulated endpoint on the running event loop.

    Usage::

        async with SimServer(SimConfig(ttft_ms=Dist.fixed(20))) as server:
            ...  # talk to server.url

    Args:
        config: the options (defaults: loopback, a free port, no delays).
    """

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config if config is not None else SimConfig()
        self._server: asyncio.Server | None = None
        self._state: ServerState | None = None
        self._host = ""
        self._port = 0

    async def start(self) -> SimServer:
        """Binds and starts listening.

        Raises:
            BindError: the address cannot be bound (in use, not this
                machine's, privileged; an :class:`OSError`).
            OSError: a TLS file cannot be read (:class:`ssl.SSLError`: it
                is not a certificate or key).
        """
        if self._server is not None:
            raise RuntimeError("server already started")
        cfg = self.config
        tls = None
        if cfg.tls_cert is not None and cfg.tls_key is not None:
            tls = make_ssl_context(cfg.tls_cert, cfg.tls_key, http2=cfg.http2)
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                cfg.host or None, cfg.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except OSError as error:
            raise _bind_error(cfg.host, cfg.port, error) from error
        # One address, so that port 0 means one port even for a name that
        # resolves to several addresses.
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            if os.name != "nt":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.setblocking(False)
        except OSError as error:
            sock.close()
            raise _bind_error(cfg.host, cfg.port, error) from error
        except BaseException:
            sock.close()
            raise
        pacer = make_pacer(loop, cfg.timer)
        state = ServerState(cfg, pacer)
        try:
            self._server = await loop.create_server(
                protocol_factory(state), sock=sock, backlog=cfg.backlog, ssl=tls
            )
        except BaseException:
            pacer.close()
            sock.close()
            raise
        self._state = state
        self._host, self._port = sock.getsockname()[:2]
        return self

    async def aclose(self) -> None:
        """Stops listening, drops every connection and waits for them to go."""
        server, state = self._server, self._state
        if server is None or state is None:
            return
        self._server = None
        server.close()
        state.pacer.close()
        for conn in list(state.conns):
            conn.abort()
        # connection_lost runs on a later loop iteration.
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 5.0
        while state.conns and loop.time() < give_up:
            await asyncio.sleep(0.001)
        await server.wait_closed()

    async def __aenter__(self) -> SimServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def serve_forever(self) -> None:
        """Serves until cancelled (starting first if needed)."""
        if self._server is None:
            await self.start()
        assert self._server is not None
        try:
            await self._server.serve_forever()
        except asyncio.CancelledError:
            await self.aclose()
            raise

    @property
    def host(self) -> str:
        """The bound address."""
        return self._host

    @property
    def port(self) -> int:
        """The bound port (the chosen one when the config said 0)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port``, ``https://`` with TLS (a wildcard address
        shows as loopback)."""
        return _url(self._host, self._port, "https" if self.config.tls_cert else "http")

    @property
    def stats(self) -> SimStats:
        """The live counters."""
        if self._state is None:
            raise RuntimeError("server not started")
        return self._state.stats

    @property
    def timer(self) -> str:
        """The wake-up source in use: ``"timerfd"`` or ``"loop"``."""
        if self._state is None:
            raise RuntimeError("server not started")
        return self._state.pacer.kind

    @staticmethod
    def start_in_thread(config: SimConfig | None = None) -> SimServerThread:
        """Runs a server on its own event loop in a daemon thread, for
        synchronous callers; returns once it listens.  Stop it with
        :meth:`SimServerThread.stop` (or use it as a context manager)."""
        return SimServerThread(config)


class SimServerThread:
    """A :class:`SimServer` running in a background thread.

    Raises:
        OSError: (from the constructor) the server could not start.
    """

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config if config is not None else SimConfig()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: SimServer | None = None
        self._thread = threading.Thread(target=self._main, name="mlpe-sim", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _main(self) -> None:
        loop = new_event_loop(self.config.loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self._ready.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with SimServer(self.config) as server:
            self._server = server
            self._ready.set()
            await self._stop.wait()

    @property
    def server(self) -> SimServer:
        assert self._server is not None
        return self._server

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def stats(self) -> SimStats:
        """The live counters (read from another thread: a snapshot may mix
        moments, each counter is exact)."""
        return self.server.stats

    def stop(self, timeout: float = 10.0) -> None:
        """Closes the server and its loop and joins the thread (idempotent)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            # RuntimeError: the loop closed meanwhile.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the simulated endpoint did not stop in time")

    def __enter__(self) -> SimServerThread:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve_forever(
    config: SimConfig | None = None,
    *,
    out: TextIO | None = None,
    exit_with_parent: int | None = None,
) -> None:
    """Runs the endpoint until SIGINT or SIGTERM (the CLI's ``serve``).

    Prints one line with the URL to ``out`` (default stdout) once listening.
    ``exit_with_parent`` (``--exit-with-parent [PID]``): also stop when the
    parent process is gone, so that a demo run killed with SIGKILL leaves no
    server behind (it cannot stop its child itself).  A PID names the
    parent as its starter knew it: a parent killed before this process
    first looked (it would then read its adopter as its parent, and wait
    for ever) is seen as gone at once; 0 takes the parent of now.

    Raises:
        BindError: it cannot listen there (the port is in use, say).
    """
    cfg = config if config is not None else SimConfig()
    parent = None if exit_with_parent is None else exit_with_parent or os.getppid()
    loop = new_event_loop(cfg.loop)
    try:
        loop.run_until_complete(
            _serve_until_signal(cfg, out if out is not None else sys.stdout, parent)
        )
    except KeyboardInterrupt:  # where signal handlers cannot be installed
        pass
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


#: How often a server started with ``--exit-with-parent`` looks for its parent.
_PARENT_CHECK_S = 0.5


async def _watch_parent(stop: asyncio.Event, parent: int) -> None:
    while os.getppid() == parent:  # an orphan is adopted: its parent id changes
        await asyncio.sleep(_PARENT_CHECK_S)
    stop.set()


async def _serve_until_signal(cfg: SimConfig, out: TextIO, parent: int | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    watch = loop.create_task(_watch_parent(stop, parent)) if parent is not None else None
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        async with SimServer(cfg) as server:
            loop_name = type(loop).__module__.split(".")[0]
            oracle = cfg.oracle
            answers = ""
            if oracle is not None:
                answers = f", oracle: {len(oracle)} prompts of {oracle.source}"
                if oracle.degrade is not None:  # say so: its answers are wrong on purpose
                    answers += f", degraded to {oracle.degrade}"
            if cfg.replay is not None:
                answers += f", replay: {len(cfg.replay)} turns of {cfg.replay.source}"
            if cfg.http2:
                answers += ", HTTP/2 and HTTP/1.1"
            if cfg.faults:  # say so: some answers are broken on purpose
                answers += ", faults: " + " ".join(str(spec) for spec in cfg.faults)
            print(
                f"mlpe-fast sim: serving {cfg.model} at {server.url} "
                f"({loop_name}, {server.timer} timer{answers})",
                file=out,
                flush=True,
            )
            await stop.wait()
    finally:
        if watch is not None:
            watch.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)


# --- command line -------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the endpoint's flags (see :func:`config_from_args`)."""
    d = SimConfig()
    g = parser.add_argument_group("simulated endpoint")
    g.add_argument("--host", default=d.host, help="address to bind (default %(default)s)")
    g.add_argument("--port", type=int, default=d.port, help="port; 0 picks a free one")
    g.add_argument(
        "--exit-with-parent",
        nargs="?",
        type=int,
        const=0,
        default=None,
        metavar="PID",
        help="stop when the process that started this one (or PID, which the starter gives so "
        "that a parent gone before the server looked is seen too) is gone: the demo's own server",
    )
    g.add_argument("--model", default=d.model, help="model name served (default %(default)s)")
    g.add_argument("--ttft-ms", type=float, default=0.0, help="mean time to first token, ms")
    g.add_argument("--ttft-dist", choices=DIST_KINDS, default="fixed")
    g.add_argument("--itl-ms", type=float, default=0.0, help="mean inter-token delay, ms")
    g.add_argument("--itl-dist", choices=DIST_KINDS, default="fixed")
    g.add_argument(
        "--spread",
        type=float,
        default=0.2,
        help="coefficient of variation of every non-fixed distribution (default %(default)s)",
    )
    g.add_argument("--ttft-spread", type=float, default=None, help="overrides --spread")
    g.add_argument("--itl-spread", type=float, default=None, help="overrides --spread")
    g.add_argument(
        "--output-len",
        type=int,
        default=int(d.output_len.mean),
        help="mean tokens per response without max_tokens (default %(default)s)",
    )
    g.add_argument("--output-len-dist", choices=DIST_KINDS, default="fixed")
    g.add_argument("--output-len-spread", type=float, default=None, help="overrides --spread")
    g.add_argument("--output-len-min", type=int, default=1)
    g.add_argument("--output-len-max", type=int, default=None)
    g.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="first K tokens of a chat response as reasoning_content",
    )
    g.add_argument(
        "--framing",
        choices=("chunked", "length"),
        default=d.framing,
        help="chunked (streams) or length (buffers the whole stream)",
    )
    g.add_argument("--eol", choices=("lf", "crlf"), default=d.eol, help="SSE line end")
    g.add_argument(
        "--head-at-first-token",
        action="store_true",
        help="send the response head with the first token, not on arrival",
    )
    g.add_argument("--timer", choices=("auto", "timerfd", "loop"), default=d.timer)
    g.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default=d.loop)
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--max-body", type=int, default=d.max_body, help="bytes (413 past it)")
    g.add_argument(
        "--max-output-tokens",
        type=int,
        default=d.max_output_tokens,
        help="largest max_tokens accepted (400 past it)",
    )
    g.add_argument(
        "--tokenizer",
        metavar="DIR",
        default=None,
        help="serve POST /tokenize with this tokenizer (a directory holding tokenizer.json)",
    )
    g.add_argument(
        "--tokenize-skew",
        type=int,
        default=0,
        metavar="N",
        help="/tokenize answers N ids more than the tokenizer gives (to test a client's check)",
    )
    g.add_argument(
        "--metrics-names",
        choices=("vllm", "sglang", "off"),
        default=d.metrics,
        help="GET /metrics in vLLM's Prometheus names (default), SGLang's, or off (404)",
    )
    g.add_argument(
        "--kv-cache-tokens",
        type=int,
        default=d.kv_cache_tokens,
        metavar="N",
        help="the simulated KV cache's size, what /metrics' usage is a share of "
        "(default %(default)s)",
    )
    from .config import MAX_TOKENS_FIELDS

    g.add_argument(
        "--incremental-streaming-output",
        action="store_true",
        help="POST /generate streams each event's new text only, as SGLang started with this "
        "flag does (default: the whole text so far in every event, SGLang's default)",
    )
    g.add_argument(
        "--max-tokens-field",
        choices=MAX_TOKENS_FIELDS,
        default=d.max_tokens_field,
        help="the request fields that limit an answer's length: both (default: chat reads "
        "max_completion_tokens, else max_tokens; completions max_tokens), max_tokens (chat's "
        "max_completion_tokens ignored, as llama-cpp-python does), max_completion_tokens "
        "(chat's max_tokens ignored) or none; an ignored limit is not checked, and the answer "
        "is an --output-len draw, capped by --max-output-tokens",
    )
    p = parser.add_argument_group(
        "HTTP/2 and TLS",
        "HTTP/2 is served beside HTTP/1.1 with --http2: over cleartext to a client that opens "
        "with the HTTP/2 preface (prior knowledge), over TLS to one whose ALPN selects h2. "
        "The --h2-*-every and --h2-goaway-after faults test a client's handling of refused and "
        "reset streams and of GOAWAY (0, the default, is off).",
    )
    p.add_argument("--http2", action="store_true", help="serve HTTP/2 as well (h2c, or h2 on TLS)")
    p.add_argument("--tls-cert", metavar="FILE", default=None, help="PEM certificate (chain)")
    p.add_argument("--tls-key", metavar="FILE", default=None, help="PEM key of --tls-cert")
    p.add_argument(
        "--h2-max-streams",
        type=int,
        default=d.h2_max_streams,
        metavar="N",
        help="SETTINGS_MAX_CONCURRENT_STREAMS; streams past it are refused (default %(default)s)",
    )
    p.add_argument(
        "--h2-window",
        type=int,
        default=d.h2_window,
        metavar="BYTES",
        help="SETTINGS_INITIAL_WINDOW_SIZE for request bodies (default %(default)s)",
    )
    p.add_argument(
        "--h2-refuse-every",
        type=int,
        default=d.h2_refuse_every,
        metavar="N",
        help="refuse every Nth stream of the server (RST_STREAM REFUSED_STREAM, unprocessed)",
    )
    p.add_argument(
        "--h2-reset-every",
        type=int,
        default=d.h2_reset_every,
        metavar="N",
        help="reset every Nth stream of the server (RST_STREAM INTERNAL_ERROR) mid-response",
    )
    p.add_argument(
        "--h2-reset-after-tokens",
        type=int,
        default=d.h2_reset_after_tokens,
        metavar="K",
        help="the reset comes after the first K token events (default %(default)s)",
    )
    p.add_argument(
        "--h2-goaway-after",
        type=int,
        default=d.h2_goaway_after,
        metavar="N",
        help="GOAWAY after the Nth stream of each connection: it and earlier ones are answered, "
        "later ones refused, then the connection closes",
    )
    o = parser.add_argument_group(
        "oracle mode",
        "Answer each prompt of a dataset with that sample's reference output (an accuracy "
        "run then scores perfectly), streamed with the timing options above. The prompt is "
        "the last user message (chat) or the prompt (completions), with or without a leading "
        "salt '[16 hex] '; an unknown prompt gets 404 with an OpenAI error body "
        "(code oracle_prompt_not_found).",
    )
    o.add_argument(
        "--oracle",
        metavar="PATH[,parser.prompt=COL][,parser.system=COL][,ground_truth=COL]",
        default=None,
        help="the dataset (any format --dataset reads, same column mapping); ground_truth "
        "names the reference-output column (default ground_truth); an accuracy run's "
        "--dataset acc:PATH,accuracy_config.ground_truth=COL value works as is",
    )
    o.add_argument(
        "--oracle-token-chars",
        type=int,
        default=None,
        metavar="N",
        help=f"characters per streamed token (default {DEFAULT_TOKEN_CHARS}); usage counts these",
    )
    o.add_argument(
        "--oracle-truncate",
        action="store_true",
        help="stop at max_tokens (finish_reason length); by default the whole reference "
        "output is sent whatever max_tokens says",
    )
    o.add_argument(
        "--oracle-degrade",
        metavar="half|K",
        default=None,
        help="a deliberately wrong oracle: every answer cut to its first half, or to its "
        "first K characters",
    )

    r = parser.add_argument_group(
        "replay mode",
        "Answer each turn of an agentic dataset (one JSONL row per message) with the "
        "assistant row recorded after it: reasoning, content and tool calls as stream deltas, "
        "with the timing options above; a turn the dataset does not have gets 404 "
        "(code replay_turn_not_found).",
    )
    r.add_argument("--replay", metavar="PATH", default=None, help="the agentic dataset")
    r.add_argument(
        "--replay-token-chars",
        type=int,
        default=None,
        metavar="N",
        help=f"characters per streamed delta (default {DEFAULT_TOKEN_CHARS})",
    )

    f = parser.add_argument_group(
        "fault injection",
        "Make completion requests fail on purpose, to test a client's handling of each "
        "failure. Each request gets at most one fault: the first listed whose seeded draw "
        "(--seed) hits and that can apply to it (streams only, HTTP/1.x only, ...); "
        "/v1/models and /health never get one.",
    )
    f.add_argument(
        "--fault",
        action="append",
        default=None,
        metavar="NAME[=FRACTION][@FROM-TO]",
        help="inject fault NAME into a FRACTION (default 1) of the completion requests, "
        "optionally only those arriving FROM to TO seconds after the start (FROM- and -TO "
        "leave a bound open); repeatable. The faults: " + fault_help(),
    )
    f.add_argument(
        "--fault-stall-s",
        type=float,
        default=None,
        metavar="S",
        help=f"how long the stall fault pauses a stream (default {d.fault_stall_s:g})",
    )
    f.add_argument(
        "--fault-slow-head-s",
        type=float,
        default=None,
        metavar="S",
        help=f"the slow-head fault's delay per byte of the head (default {d.fault_slow_head_s:g})",
    )
    f.add_argument(
        "--fault-event-bytes",
        type=int,
        default=None,
        metavar="N",
        help="characters of the oversized-event fault's content string "
        f"(default {d.fault_event_bytes}, 2 MiB)",
    )


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """The :class:`SimConfig` for flags added by :func:`add_arguments`.

    Raises:
        ValueError: an inconsistent combination.
    """

    def spread(kind: str, own: float | None) -> float:
        if kind == "fixed":
            return 0.0
        return float(ns.spread if own is None else own)

    oracle = None
    if ns.oracle is not None:
        token_chars = ns.oracle_token_chars
        # UsageError is a ValueError: a bad file or column is reported as a
        # bad flag, before anything listens.
        oracle = load_oracle(
            parse_oracle_arg(ns.oracle),
            token_chars=DEFAULT_TOKEN_CHARS if token_chars is None else token_chars,
            truncate=ns.oracle_truncate,
            degrade=None if ns.oracle_degrade is None else parse_degrade(ns.oracle_degrade),
        )
    else:
        given = [
            flag
            for flag, value in (
                ("--oracle-token-chars", ns.oracle_token_chars),
                ("--oracle-truncate", ns.oracle_truncate or None),
                ("--oracle-degrade", ns.oracle_degrade),
            )
            if value is not None
        ]
        if given:
            raise ValueError(f"{', '.join(given)} without --oracle")
    replay = None
    if ns.replay is not None:
        chars = ns.replay_token_chars
        replay = load_replay(ns.replay, DEFAULT_TOKEN_CHARS if chars is None else chars)
    elif ns.replay_token_chars is not None:
        raise ValueError("--replay-token-chars without --replay")
    _check_http2_flags(ns)
    faults = _fault_flags(ns)
    d = SimConfig()

    return SimConfig(
        host=ns.host,
        port=ns.port,
        model=ns.model,
        ttft_ms=Dist(ns.ttft_dist, ns.ttft_ms, spread(ns.ttft_dist, ns.ttft_spread)),
        itl_ms=Dist(ns.itl_dist, ns.itl_ms, spread(ns.itl_dist, ns.itl_spread)),
        output_len=Dist(
            ns.output_len_dist,
            ns.output_len,
            spread(ns.output_len_dist, ns.output_len_spread),
            min=max(1, ns.output_len_min),
            max=math.inf if ns.output_len_max is None else ns.output_len_max,
        ),
        reasoning_tokens=ns.reasoning_tokens,
        framing=ns.framing,
        eol=ns.eol,
        seed=ns.seed,
        head_at_first_token=ns.head_at_first_token,
        timer=ns.timer,
        loop=ns.loop,
        max_body=ns.max_body,
        max_output_tokens=ns.max_output_tokens,
        max_tokens_field=ns.max_tokens_field,
        incremental_streaming_output=ns.incremental_streaming_output,
        tokenizer=ns.tokenizer,
        tokenize_skew=ns.tokenize_skew,
        metrics=ns.metrics_names,
        kv_cache_tokens=ns.kv_cache_tokens,
        oracle=oracle,
        replay=replay,
        http2=ns.http2,
        tls_cert=ns.tls_cert,
        tls_key=ns.tls_key,
        h2_max_streams=ns.h2_max_streams,
        h2_window=ns.h2_window,
        h2_refuse_every=ns.h2_refuse_every,
        h2_reset_every=ns.h2_reset_every,
        h2_reset_after_tokens=ns.h2_reset_after_tokens,
        h2_goaway_after=ns.h2_goaway_after,
        faults=faults,
        fault_stall_s=_given(ns.fault_stall_s, d.fault_stall_s),
        fault_slow_head_s=_given(ns.fault_slow_head_s, d.fault_slow_head_s),
        fault_event_bytes=int(_given(ns.fault_event_bytes, d.fault_event_bytes)),
    )


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


def _fault_options(ns: argparse.Namespace) -> dict[str, float | int | None]:
    """The fault tuning flags given, by :class:`SimConfig` field (None: not given)."""
    return {
        "fault_stall_s": ns.fault_stall_s,
        "fault_slow_head_s": ns.fault_slow_head_s,
        "fault_event_bytes": ns.fault_event_bytes,
    }


def _fault_flags(ns: argparse.Namespace) -> tuple[FaultSpec, ...]:
    """The ``--fault`` specs, after checking the fault flags.

    Raises:
        ValueError: the first mistake, in the flags' own names.
    """
    faults = tuple(parse_fault(text) for text in ns.fault or ())
    options = _fault_options(ns)
    given = ["--" + name.replace("_", "-") for name, value in options.items() if value is not None]
    if given and not faults:
        raise ValueError(f"{', '.join(given)} without --fault")
    for name in ("fault_stall_s", "fault_slow_head_s"):
        value = options[name]
        if value is not None and not 0.0 <= value < math.inf:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be a finite number of seconds >= 0, not {value}")
    size = options["fault_event_bytes"]
    if size is not None and size < 1:
        raise ValueError(f"--fault-event-bytes must be >= 1, not {size}")
    return faults


def _check_http2_flags(ns: argparse.Namespace) -> None:
    """Reports HTTP/2 and TLS flag mistakes in the flags' own names, and a
    certificate or key that cannot be loaded before anything listens.

    Raises:
        ValueError: the first mistake found.
    """
    d = SimConfig()
    h2_flags = ["--" + name.replace("_", "-") for name in H2_OPTIONS]
    if not ns.http2:
        given = [
            flag
            for flag, name in zip(h2_flags, H2_OPTIONS, strict=True)
            if getattr(ns, name) != getattr(d, name)
        ]
        if given:
            raise ValueError(f"{', '.join(given)} without --http2")
    for flag, name, low in zip(h2_flags, H2_OPTIONS, (1, 1, 0, 0, 0, 0), strict=True):
        value = getattr(ns, name)
        if not low <= value <= 2**31 - 1:
            raise ValueError(f"{flag} must be {low} to 2**31-1, not {value}")
    if (ns.tls_cert is None) != (ns.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if ns.tls_cert is not None:
        try:
            make_ssl_context(ns.tls_cert, ns.tls_key, http2=ns.http2)
        except OSError as exc:  # ssl.SSLError included: not PEM, key mismatch
            reason = exc.strerror or str(exc)
            raise ValueError(
                f"--tls-cert {ns.tls_cert} / --tls-key {ns.tls_key}: cannot be loaded ({reason})"
            ) from None


def build_arg_parser(prog: str = "mlpe-fast serve") -> argparse.ArgumentParser:
    """A parser with just the endpoint's flags."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Serve the simulated OpenAI-compatible endpoint."
    )
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mlpe_fast.sim.server [flags]``."""
    parser = build_arg_parser("python -m mlpe_fast.sim.server")
    ns = parser.parse_args(argv)
    try:
        config = config_from_args(ns)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        serve_forever(config, exit_with_parent=ns.exit_with_parent)
    except BindError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
