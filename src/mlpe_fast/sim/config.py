"""Options and counters of the simulated endpoint (see :mod:`mlpe_fast.sim.server`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal

from ._pacer import TimerKind
from .faults import FaultSpec
from .timing import Dist

if TYPE_CHECKING:
    from .oracle import Oracle
    from .replay import Replay

__all__ = (
    "H2_OPTIONS",
    "MAX_TOKENS_FIELDS",
    "METRICS_NAMES",
    "MetricsNames",
    "VOCAB",
    "Eol",
    "Framing",
    "LoopKind",
    "MaxTokensField",
    "SimConfig",
    "SimStats",
)

Framing = Literal["chunked", "length"]
MaxTokensField = Literal["both", "max_tokens", "max_completion_tokens", "none"]
MAX_TOKENS_FIELDS: tuple[MaxTokensField, ...] = (
    "both",
    "max_tokens",
    "max_completion_tokens",
    "none",
)
"""The values of :attr:`SimConfig.max_tokens_field`."""
Eol = Literal["lf", "crlf"]
MetricsNames = Literal["vllm", "sglang", "off"]
METRICS_NAMES: tuple[MetricsNames, ...] = ("vllm", "sglang", "off")
"""The values of :attr:`SimConfig.metrics`."""
LoopKind = Literal["auto", "uvloop", "asyncio"]

VOCAB = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
"""The characters the simulated model emits, one token each.  All are in
the character tokenizer's vocabulary and need no JSON escaping."""

_NO_DELAY = Dist()
_MIB = 1024 * 1024
_DEFAULT_LEN = Dist("fixed", 128, min=1)
_MAX_31 = 2**31 - 1
H2_OPTIONS = (
    "h2_max_streams",
    "h2_window",
    "h2_refuse_every",
    "h2_reset_every",
    "h2_reset_after_tokens",
    "h2_goaway_after",
)
"""The :class:`SimConfig` fields that only mean something with ``http2``."""


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulated endpoint can be told.

    Args:
        host: address to bind (default loopback only).
        port: port to bind; 0 picks a free one (see :attr:`SimServer.port`).
        model: the model name served and echoed.
        ttft_ms: time to first token, in milliseconds, from the request's
            base time (see :mod:`mlpe_fast.sim.server`).
        itl_ms: delay between consecutive tokens, in milliseconds.
        output_len: tokens per response when the request sets no
            ``max_tokens`` / ``max_completion_tokens`` (clamped to >= 1).
        reasoning_tokens: the first K tokens of a chat response are sent as
            ``reasoning_content`` (completions ignore it).
        framing: ``"chunked"`` streams with the chunked transfer coding;
            ``"length"`` buffers the whole stream and sends a Content-Length
            body (timing is then moot: every event leaves at once).
        eol: SSE line end, ``"lf"`` or ``"crlf"``.
        seed: seeds the draws; the same seed and the same order of
            requests give the same lengths, delays and text.
        head_at_first_token: hold the response head back until the first
            token is due (the reference's test server does this) instead of
            sending it on arrival.
        timer: ``"auto"`` (timerfd where available), ``"timerfd"`` or
            ``"loop"`` (the event loop's millisecond timers).
        loop: event loop for :func:`serve_forever` and
            :meth:`SimServer.start_in_thread`: ``"auto"`` is uvloop where
            importable and not on Windows, else asyncio.
        max_head: largest request head accepted, bytes (431 past it).
        max_body: largest request body accepted, bytes (413 past it).
        max_output_tokens: the simulated context: a larger ``max_tokens``
            gets 400, and ``output_len`` draws are clamped to it.
        max_tokens_field: which request fields limit the answer's length:
            ``"both"`` (a chat request's ``max_completion_tokens``, else its
            ``max_tokens``; a completions request's ``max_tokens``),
            ``"max_tokens"`` (chat's ``max_completion_tokens`` ignored, as
            llama-cpp-python does), ``"max_completion_tokens"`` (chat's
            ``max_tokens`` ignored; completions still read ``max_tokens``)
            or ``"none"`` (every limit ignored).  A field ignored is not
            checked either; a request without a limit read gets an
            ``output_len`` draw (``finish_reason`` ``"stop"``).
        backlog: listen backlog.
        replay: answer each turn of an agentic dataset with the assistant
            row recorded after it (:mod:`mlpe_fast.sim.replay`).
        oracle: answer each prompt of a dataset with its reference output
            instead of random text (:mod:`mlpe_fast.sim.oracle`); the
            timing options apply as usual, ``output_len`` does not.
        http2: serve HTTP/2 as well: over cleartext to a client that opens
            with the HTTP/2 preface (prior knowledge, "h2c"), over TLS to one
            whose ALPN selects ``h2``.  Without it, HTTP/1.1 only.
        tls_cert, tls_key: PEM files of the server certificate (chain) and
            its key; both or neither.  With them the port speaks TLS only.
        h2_max_streams: SETTINGS_MAX_CONCURRENT_STREAMS advertised; a stream
            beyond it is refused (RST_STREAM REFUSED_STREAM).
        h2_window: SETTINGS_INITIAL_WINDOW_SIZE advertised, the window of
            each request body (1 to 2**31-1).
        h2_refuse_every: a fault: every Nth HTTP/2 stream of the server is
            refused (RST_STREAM REFUSED_STREAM) on arrival, unprocessed;
            0 is off.
        h2_reset_every: a fault: every Nth HTTP/2 stream of the server is
            reset (RST_STREAM INTERNAL_ERROR) once its first
            ``h2_reset_after_tokens`` token events went out; 0 is off.
        h2_reset_after_tokens: see ``h2_reset_every`` (0: before any token).
        h2_goaway_after: a fault: on each HTTP/2 connection, the Nth stream
            is the last one processed: GOAWAY (NO_ERROR) names it, later
            streams are refused, and the connection closes once the
            processed ones are answered; 0 is off.
        faults: faults injected into completion requests, each with its
            fraction and time window; a request gets at most one, the first
            listed that its draws select (:mod:`mlpe_fast.sim.faults`).
        fault_stall_s: how long the ``stall`` fault holds a stream.
        fault_slow_head_s: the ``slow-head`` fault's delay between the
            bytes of a response head.
        fault_event_bytes: the characters of the ``oversized-event``
            fault's content string (the default is over a client's usual
            1 MiB event limit).
        incremental_streaming_output: ``/generate`` streams each event's
            new text only, as SGLang started with
            ``--incremental-streaming-output`` does; by default every
            event carries the whole text so far (SGLang's default).
        tokenizer: a directory holding ``tokenizer.json`` (or the file):
            ``POST /tokenize`` is served with it (:mod:`mlpe_fast.sim.tokenize`);
            None: no such route.
        tokenize_skew: ``/tokenize`` answers this many ids more than the
            tokenizer gives (a disagreement, on purpose).
        metrics: ``GET /metrics`` in vLLM's names (the default), SGLang's,
            or ``"off"`` (no such route: 404), :mod:`mlpe_fast.sim._metrics`.
        kv_cache_tokens: the simulated KV cache's size in tokens, what its
            usage on ``/metrics`` is a share of.
    """

    host: str = "127.0.0.1"
    port: int = 0
    model: str = "mlpe-sim"
    ttft_ms: Dist = _NO_DELAY
    itl_ms: Dist = _NO_DELAY
    output_len: Dist = _DEFAULT_LEN
    reasoning_tokens: int = 0
    framing: Framing = "chunked"
    eol: Eol = "lf"
    seed: int = 0
    head_at_first_token: bool = False
    timer: TimerKind = "auto"
    loop: LoopKind = "auto"
    max_head: int = 64 * 1024
    max_body: int = 32 * 1024 * 1024
    max_output_tokens: int = 1 << 20
    max_tokens_field: MaxTokensField = "both"
    backlog: int = 1024
    oracle: Oracle | None = None
    replay: Replay | None = None
    http2: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    h2_max_streams: int = 100
    h2_window: int = 65535
    h2_refuse_every: int = 0
    h2_reset_every: int = 0
    h2_reset_after_tokens: int = 1
    h2_goaway_after: int = 0
    faults: tuple[FaultSpec, ...] = ()
    fault_stall_s: float = 30.0
    fault_slow_head_s: float = 1.0
    fault_event_bytes: int = 2 * _MIB
    incremental_streaming_output: bool = False
    tokenizer: str | None = None
    tokenize_skew: int = 0
    metrics: MetricsNames = "vllm"
    kv_cache_tokens: int = 1 << 20

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port out of range: {self.port}")
        if not self.model or not self.model.isprintable():
            raise ValueError(f"bad model name {self.model!r}")
        if self.framing not in ("chunked", "length"):
            raise ValueError(f"framing must be 'chunked' or 'length', not {self.framing!r}")
        if self.eol not in ("lf", "crlf"):
            raise ValueError(f"eol must be 'lf' or 'crlf', not {self.eol!r}")
        if self.timer not in ("auto", "timerfd", "loop"):
            raise ValueError(f"timer must be 'auto', 'timerfd' or 'loop', not {self.timer!r}")
        if self.loop not in ("auto", "uvloop", "asyncio"):
            raise ValueError(f"loop must be 'auto', 'uvloop' or 'asyncio', not {self.loop!r}")
        if self.reasoning_tokens < 0:
            raise ValueError("reasoning_tokens must be >= 0")
        if self.max_head < 1024 or self.max_body < 0 or self.backlog < 1:
            raise ValueError("max_head must be >= 1024, max_body >= 0, backlog >= 1")
        if self.max_output_tokens < 1:
            raise ValueError("max_output_tokens must be >= 1")
        if self.max_tokens_field not in MAX_TOKENS_FIELDS:
            known = ", ".join(MAX_TOKENS_FIELDS)
            raise ValueError(
                f"max_tokens_field must be one of {known}, not {self.max_tokens_field!r}"
            )
        if self.oracle is not None and self.reasoning_tokens:
            # reasoning_content would take the start of the reference output
            # out of the content an accuracy run scores
            raise ValueError("reasoning_tokens cannot be combined with an oracle")
        if self.replay is not None and (self.oracle is not None or self.reasoning_tokens):
            raise ValueError("a replay answers every chat turn: no oracle or reasoning_tokens")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if not 1 <= self.h2_max_streams <= _MAX_31:
            raise ValueError(f"h2_max_streams must be 1 to 2**31-1, not {self.h2_max_streams}")
        if not 1 <= self.h2_window <= _MAX_31:
            raise ValueError(f"h2_window must be 1 to 2**31-1, not {self.h2_window}")
        for name in H2_OPTIONS[2:]:  # the faults
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, not {getattr(self, name)}")
        if not self.http2:
            changed = [
                f.name
                for f in fields(self)
                if f.name in H2_OPTIONS and getattr(self, f.name) != f.default
            ]
            if changed:
                raise ValueError(f"{', '.join(changed)} without http2")
        if not all(isinstance(spec, FaultSpec) for spec in self.faults):
            raise ValueError("faults must be FaultSpec values (see parse_fault)")
        for name in ("fault_stall_s", "fault_slow_head_s"):
            value = getattr(self, name)
            if not 0.0 <= value < math.inf:
                raise ValueError(f"{name} must be finite and >= 0, not {value}")
        if self.fault_event_bytes < 1:
            raise ValueError(f"fault_event_bytes must be >= 1, not {self.fault_event_bytes}")
        if self.metrics not in METRICS_NAMES:
            raise ValueError(
                f"metrics must be one of {', '.join(METRICS_NAMES)}, not {self.metrics!r}"
            )
        if self.kv_cache_tokens < 1:
            raise ValueError(f"kv_cache_tokens must be >= 1, not {self.kv_cache_tokens}")
        if self.tokenize_skew < 0 or (self.tokenize_skew and self.tokenizer is None):
            raise ValueError("tokenize_skew must be >= 0, and needs a tokenizer")
        if self.tokenizer is not None:
            from .tokenize import load_sim_tokenizer

            load_sim_tokenizer(self.tokenizer)  # a bad one is a bad flag, before anything listens


class SimStats:
    """Counters of one server (plain ints, updated on the loop's thread).

    Attributes:
        connections: connections accepted.
        requests: requests answered, errors included.
        responses: completion responses finished (streamed or not).
        errors: responses with a 4xx/5xx status.
        events: SSE events written, role, usage and ``[DONE]`` included.
        tokens: tokens written.
        writes: ``transport.write`` calls of completion responses.
        write_pauses: times a transport's buffer filled up (a client not
            reading fast enough); its stream waits, and its events are
            stamped when they are finally written.
        paced_writes: writes that waited for a deadline.
        late_ns_sum, late_ns_max: how late those writes started against the
            deadline of their first event (wake-up precision).
        h2_connections: connections served as HTTP/2 (also in ``connections``).
        h2_streams: HTTP/2 streams whose request headers arrived, refused
            ones included (the count the ``h2_*_every`` faults go by).
        h2_refused: streams refused with RST_STREAM(REFUSED_STREAM), unprocessed:
            the refuse fault, streams beyond ``h2_max_streams``, streams
            after a GOAWAY's last stream.
        h2_resets: streams reset by the reset fault (INTERNAL_ERROR).
        h2_goaways: GOAWAYs sent by the GOAWAY fault.
        h2_client_resets: streams the client reset (RST_STREAM) before
            their response was complete.
        prefix_cache_resets: ``/reset_prefix_cache`` and ``/flush_cache``
            requests answered (:mod:`mlpe_fast.sim.tokenize`).
        tokenize_requests: ``/tokenize`` requests answered.
        faults: requests each configured fault was applied to, by name
            (every configured name is present; ``as_dict`` lists them as
            ``fault:NAME``).  A faulted request counts in ``requests``; in
            ``responses`` if its response was ended (last chunk or
            END_STREAM, not a reset or a close), in ``errors`` if it got a
            status fault.
    """

    __slots__ = (
        "connections",
        "errors",
        "events",
        "faults",
        "h2_client_resets",
        "h2_connections",
        "h2_goaways",
        "h2_refused",
        "h2_resets",
        "h2_streams",
        "late_ns_max",
        "late_ns_sum",
        "paced_writes",
        "prefix_cache_resets",
        "requests",
        "responses",
        "tokenize_requests",
        "tokens",
        "write_pauses",
        "writes",
    )

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.responses = 0
        self.errors = 0
        self.events = 0
        self.tokens = 0
        self.writes = 0
        self.write_pauses = 0
        self.paced_writes = 0
        self.late_ns_sum = 0
        self.late_ns_max = 0
        self.h2_connections = 0
        self.h2_streams = 0
        self.h2_refused = 0
        self.h2_resets = 0
        self.h2_goaways = 0
        self.h2_client_resets = 0
        self.prefix_cache_resets = 0
        self.tokenize_requests = 0
        self.faults: dict[str, int] = {}

    def as_dict(self) -> dict[str, int]:
        """A snapshot of the counters, each fault's as ``fault:NAME``."""
        out = {name: getattr(self, name) for name in self.__slots__ if name != "faults"}
        out.update({f"fault:{name}": count for name, count in self.faults.items()})
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self.as_dict().items())
        return f"SimStats({inner})"

    def add_lateness(self, late_ns: int) -> None:
        """Counts one paced write that started ``late_ns`` after its deadline."""
        self.paced_writes += 1
        if late_ns > 0:
            self.late_ns_sum += late_ns
            self.late_ns_max = max(self.late_ns_max, late_ns)
