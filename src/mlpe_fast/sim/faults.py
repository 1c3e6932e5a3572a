"""Fault injection for the simulated endpoint: which faults exist, how one is
asked for (``--fault NAME[=FRACTION][@FROM-TO]``), which requests it can
apply to, and which request gets which.

A fault is drawn per completion request (``/v1/chat/completions``,
``/v1/completions`` that would be answered 200; listings, health checks
and refused requests never get one).  What each fault puts on the wire is
done by :mod:`mlpe_fast.sim._fault_jobs`; the list with what a client sees
is :data:`FAULTS` (and :mod:`mlpe_fast.sim.server`'s docstring).

Selection
---------
The draws come from a generator of their own, seeded from the server's
seed, so that enabling a fault leaves the text, lengths and delays of every
request unchanged.  Each completion request takes one draw per configured
fault, whether the fault can apply or not: the set of requests a fault hits
therefore depends only on the seed, the order of the requests and the
fault's place in the list, never on timing or on the other faults.  A fault
matches a request when its draw is below its fraction, the request arrived
within its window, and it can apply to the request (:func:`applies`); the
first listed fault that matches is the request's one fault.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

__all__ = (
    "FAULTS",
    "FaultPicker",
    "FaultSpec",
    "applies",
    "fault_help",
    "parse_fault",
)

FAULTS: dict[str, str] = {
    "reset-before-head": "the connection is reset (RST) once the request is read, before any "
    "byte of the response; over HTTP/2, RST_STREAM(INTERNAL_ERROR) before HEADERS",
    "reset-mid-stream": "the connection is reset after the first half of the token events; "
    "over HTTP/2, RST_STREAM(INTERNAL_ERROR)",
    "reset-after-last": "the connection is reset after [DONE], before the chunked body's "
    "last chunk; over HTTP/2, RST_STREAM(INTERNAL_ERROR) instead of END_STREAM",
    "truncated-chunk": "after the first half of the token events, a chunk with half of its "
    "announced data, then a clean close (FIN); HTTP/1.1 only",
    "bad-chunk-size": "after the first half of the token events, a chunk-size line 'zz', "
    "then a clean close; HTTP/1.1 only",
    "status-CODE": "that status (400-599) with an OpenAI error body at once, no stream; "
    "status-429 adds Retry-After: 1 and a rate-limit error",
    "garbage": "a 200 event-stream head, then 64 KiB of random bytes without line ends at "
    "the first token's deadline, then a clean close without the last chunk; over HTTP/2, "
    "END_STREAM after them",
    "malformed-event": "an extra event 'data: {\"choices\": [' after the first half of the "
    "token events; the response completes with all its tokens",
    "invalid-utf8": "an extra content event whose string holds the bytes FF FE after the "
    "first half of the token events; the response completes",
    "stall": "nothing for --fault-stall-s seconds after the first token, then the rest on "
    "the same schedule, shifted",
    "slow-head": "the response head one byte every --fault-slow-head-s seconds, then the "
    "stream; HTTP/1.x only",
    "oversized-event": "an extra content event of --fault-event-bytes characters after the "
    "first half of the token events, then the rest",
    "no-done": "the stream ends cleanly without data: [DONE]",
    "double-done": "data: [DONE] twice before the end of the body",
    "close-after-response": "a normal keep-alive response (no Connection: close), then the "
    "server closes the connection without notice; HTTP/1.x only",
    "interrupt": "after the first half of the token events, data: [DONE] with no finish "
    "reason and no usage chunk, the body ended (last chunk; over HTTP/2, END_STREAM), then "
    "a clean close (what llama.cpp's interrupt_requests does to the streams in flight when "
    "a new request arrives); a non-streamed answer is a body with the first half of the "
    "text and finish_reason null, then the close",
    "empty-done": "a 200 event-stream head, then data: [DONE] at once: no role chunk, no "
    "token, no finish reason; a non-streamed answer is a body with empty content and "
    "finish_reason null, at once",
}
"""Each fault's name and what it puts on the wire (the ``--help`` text)."""

# Which requests a fault can apply to (see applies()).
_ANY = "any"  # every completion request, streamed or not, HTTP/1.x or HTTP/2
_STREAM = "stream"  # streamed responses (stream: true, chunked framing option)
_CHUNKED = "chunked"  # streamed over HTTP/1.1's chunked coding
_HTTP1_STREAM = "http1-stream"  # streamed over HTTP/1.x
_HTTP1_KEEP_ALIVE = "http1-keep-alive"  # over HTTP/1.x on a connection kept alive
_WHERE = {
    "reset-before-head": _ANY,
    "reset-mid-stream": _STREAM,
    "reset-after-last": _STREAM,
    "truncated-chunk": _CHUNKED,
    "bad-chunk-size": _CHUNKED,
    "garbage": _STREAM,
    "malformed-event": _STREAM,
    "invalid-utf8": _STREAM,
    "stall": _STREAM,
    "slow-head": _HTTP1_STREAM,
    "oversized-event": _STREAM,
    "no-done": _STREAM,
    "double-done": _STREAM,
    "close-after-response": _HTTP1_KEEP_ALIVE,
    "interrupt": _ANY,
    "empty-done": _ANY,
}
_STATUS = re.compile(r"status-([0-9]{3})")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def fault_help() -> str:
    """The faults, one ``name: effect`` each, for ``--help``."""
    return " ".join(f"{name}: {effect}." for name, effect in FAULTS.items())


def status_of(name: str) -> int | None:
    """The status of a ``status-CODE`` fault, None for the other faults."""
    m = _STATUS.fullmatch(name)
    return int(m.group(1)) if m is not None else None


@dataclass(frozen=True)
class FaultSpec:
    """One ``--fault``: a fault, how often and when.

    Args:
        name: a key of :data:`FAULTS`, ``status-CODE`` being
            ``status-400`` to ``status-599``.
        fraction: the chance that a completion request gets it, in (0, 1].
        start_s, end_s: it applies only to requests read from ``start_s``
            (inclusive) to ``end_s`` (exclusive) seconds after the server
            started; None is unbounded.
    """

    name: str
    fraction: float = 1.0
    start_s: float | None = None
    end_s: float | None = None

    def __post_init__(self) -> None:
        status = status_of(self.name)
        if status is None and self.name not in _WHERE:
            known = ", ".join(FAULTS)
            raise ValueError(f"unknown fault {self.name!r} (known: {known})")
        if status is not None and not 400 <= status <= 599:
            raise ValueError(f"{self.name}: the status must be 400 to 599")
        if not 0.0 < self.fraction <= 1.0:  # NaN fails too
            raise ValueError(f"the fraction must be in (0, 1], not {self.fraction}")
        for bound in (self.start_s, self.end_s):
            if bound is not None and not 0.0 <= bound < math.inf:
                raise ValueError(f"window bounds must be finite and >= 0, not {bound}")
        if self.start_s is not None and self.end_s is not None and self.start_s >= self.end_s:
            raise ValueError(f"empty window: from {self.start_s} s to {self.end_s} s")

    @property
    def status(self) -> int | None:
        """The status of a ``status-CODE`` fault, else None."""
        return status_of(self.name)

    def in_window(self, elapsed_s: float) -> bool:
        """Whether a request read ``elapsed_s`` after the start is in the window."""
        start, end = self.start_s, self.end_s
        return (start is None or elapsed_s >= start) and (end is None or elapsed_s < end)

    def __str__(self) -> str:
        """The ``--fault`` value that gives this spec."""
        text = self.name
        if self.fraction != 1.0:
            text += f"={self.fraction:g}"
        if self.start_s is not None or self.end_s is not None:
            start = "" if self.start_s is None else f"{self.start_s:g}"
            end = "" if self.end_s is None else f"{self.end_s:g}"
            text += f"@{start}-{end}"
        return text


def parse_fault(text: str) -> FaultSpec:
    """The :class:`FaultSpec` of a ``--fault NAME[=FRACTION][@FROM-TO]`` value.

    Raises:
        ValueError: a one-line reason naming the value.
    """

    def fail(reason: str) -> ValueError:
        return ValueError(f"--fault {text}: {reason}")

    rest, at, window = text.partition("@")
    name, eq, fraction_text = rest.partition("=")
    fraction = 1.0
    if eq:
        if _NUMBER.fullmatch(fraction_text) is None:
            raise fail(f"the fraction must be a number in (0, 1], not {fraction_text!r}")
        fraction = float(fraction_text)
    start: float | None = None
    end: float | None = None
    if at:
        low, dash, high = window.partition("-")
        if not dash or (not low and not high):
            raise fail("the window must be FROM-TO, FROM- or -TO (seconds)")
        for bound in (low, high):
            if bound and _NUMBER.fullmatch(bound) is None:
                raise fail(f"window bound {bound!r} is not a number of seconds")
        start = float(low) if low else None
        end = float(high) if high else None
    try:
        return FaultSpec(name, fraction, start, end)
    except ValueError as exc:
        raise fail(str(exc)) from None


def applies(
    spec: FaultSpec, *, streamed: bool, http1: bool, chunked: bool, keep_alive: bool
) -> bool:
    """Whether ``spec`` can apply to a completion request.

    Args:
        streamed: the answer is a paced stream (``stream: true`` with the
            chunked framing option), not one body.
        http1: it goes over HTTP/1.x, not over an HTTP/2 stream.
        chunked: it is streamed with HTTP/1.1's chunked coding.
        keep_alive: the HTTP/1.x connection stays open after it.
    """
    if spec.status is not None:
        return True
    where = _WHERE[spec.name]
    if where == _ANY:
        return True
    if where == _STREAM:
        return streamed
    if where == _CHUNKED:
        return streamed and http1 and chunked
    if where == _HTTP1_STREAM:
        return streamed and http1
    # _HTTP1_KEEP_ALIVE: an HTTP/1.0 stream runs to the end of the connection
    return http1 and keep_alive and (chunked or not streamed)


class FaultPicker:
    """Decides which fault, if any, each completion request gets.

    Args:
        specs: the faults, first match wins.
        seed: seeds the draws (and the garbage fault's bytes, drawn apart).
        started_ns: the server's start, ``time.monotonic_ns()``, that the
            windows count from.
    """

    def __init__(self, specs: tuple[FaultSpec, ...], seed: int, started_ns: int) -> None:
        self.specs = specs
        seeds = random.Random(seed)
        self._draws = random.Random(seeds.getrandbits(64))
        self._noise = random.Random(seeds.getrandbits(64))
        self._started_ns = started_ns

    def pick(
        self,
        recv_ns: int,
        *,
        streamed: bool,
        http1: bool,
        chunked: bool,
        keep_alive: bool,
        allowed: bool = True,
    ) -> FaultSpec | None:
        """The fault of the next completion request, read at ``recv_ns``;
        ``allowed=False`` takes its draws and gives none (a stream already
        marked by an ``h2_*`` fault)."""
        draws = [self._draws.random() for _ in self.specs]
        if not allowed:
            return None
        elapsed_s = (recv_ns - self._started_ns) / 1e9
        for spec, draw in zip(self.specs, draws, strict=True):
            if (
                draw < spec.fraction
                and spec.in_window(elapsed_s)
                and applies(
                    spec, streamed=streamed, http1=http1, chunked=chunked, keep_alive=keep_alive
                )
            ):
                return spec
        return None

    def noise(self, size: int) -> bytes:
        """``size`` random bytes without CR or LF (so they never end an SSE
        line), from a generator of their own."""
        return self._noise.randbytes(size).translate(_NO_EOL)


# CR and LF become other bytes with the high bit set (invalid UTF-8 on their own).
_NO_EOL = bytes.maketrans(b"\r\n", b"\x8d\x8a")
