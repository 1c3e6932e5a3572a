"""Pure-Python twin of the engine's read path (``_reader_c.pyx``).

A :class:`ReadCore` is the part of a connection that runs on every network
read: it stamps the read, feeds the response decoder and tells its owner
about the two moments that matter (the first token, the end).  Everything
that happens once per request lives in :mod:`mlpe_fast.engine.connection`.

The clock is ``time.monotonic_ns()``; the compiled twin reads the same clock
in C (``csrc/mlpe_clock.h``).
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import ProtocolError
from ..wire._response_py import ResponseDecoder
from ..wire.events import FirstToken, ResponseComplete

__all__ = ("READ_SIZE", "ReadCore", "monotonic_ns")

# 256 KiB: a read drains what the kernel holds for the socket (the default
# Linux receive buffer autotunes up to a few MiB, but a busy stream holds
# tens of KiB between two loop iterations).
READ_SIZE = 256 << 10

monotonic_ns = time.monotonic_ns


class ReadCore:
    """Stamps reads and feeds one response decoder per request.

    The owner calls :meth:`begin` with the request bytes and its transport;
    the event loop calls :meth:`get_buffer` / :meth:`buffer_updated`; the
    core calls back ``self.on_first_token(t_ns)`` (only when
    ``want_first_token`` is set), ``self.on_response_done(t_ns)`` and
    ``self.on_response_failed(t_ns, error)``.
    """

    def __init__(self, decoder_options: dict[str, Any]) -> None:
        self._decoder_options = decoder_options
        self._buffer = bytearray(READ_SIZE)
        self._view = memoryview(self._buffer)
        self.decoder: Any = None
        self.t_issue = 0
        self.last_read_ns = 0
        self.want_first_token = False

    def begin(self, transport: Any, request: bytes, want_first_token: bool) -> int:
        """Starts a response and writes the request; returns ``t_issue``."""
        self.decoder = ResponseDecoder(**self._decoder_options)
        self.want_first_token = want_first_token
        t_issue = self.t_issue = self.last_read_ns = monotonic_ns()
        transport.write(request)
        return t_issue

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        t_ns = monotonic_ns()
        self.last_read_ns = t_ns
        decoder = self.decoder
        if decoder is None:
            self.on_unsolicited(nbytes)
            return
        try:
            events = decoder.feed(self._view[:nbytes], t_ns)
        except ProtocolError as error:
            self.on_response_failed(t_ns, error)
            return
        for event in events:
            if isinstance(event, ResponseComplete):
                self.on_response_done(t_ns)
            elif isinstance(event, FirstToken) and self.want_first_token:
                self.on_first_token(t_ns)

    def end_of_stream(self) -> bool:
        """The peer closed: returns True when that completed the response."""
        t_ns = monotonic_ns()
        try:
            events = self.decoder.feed_eof(t_ns)
        except ProtocolError as error:
            self.on_response_failed(t_ns, error)
            return False
        if events and isinstance(events[-1], ResponseComplete):
            self.on_response_done(t_ns)
            return True
        return False

    def take_summary(self) -> Any:
        """Ends the current response and returns its summary."""
        summary = self.decoder.summary()
        self.decoder = None
        return summary

    # Hooks the owner overrides.
    def on_first_token(self, t_ns: int) -> None:
        raise NotImplementedError

    def on_response_done(self, t_ns: int) -> None:
        raise NotImplementedError

    def on_response_failed(self, t_ns: int, error: Exception) -> None:
        raise NotImplementedError

    def on_unsolicited(self, nbytes: int) -> None:
        raise NotImplementedError
