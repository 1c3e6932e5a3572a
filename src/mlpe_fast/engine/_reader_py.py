"""Pure-Python twin of the engine's read path (``_reader_c.pyx``).

A :class:`ReadCore` is the part of a connection that runs on every network
read: it stamps the read, feeds the response decoder and tells its owner
about the two moments that matter (the first token, the end).  Everything
that happens once per request lives in :mod:`mlpe_fast.engine.connection`.

The clock is ``time.monotonic_ns()``; the compiled twin reads the same clock
in C (``csrc/mlpe_clock.h``).

Two ways in.  Through an asyncio transport (``get_buffer`` /
``buffer_updated``) each read is stamped when the loop hands it over.  On a
socket of its own (the :class:`~._receive_py.SocketReader` base) each read
carries the kernel's arrival stamp; the read's own stamp is kept beside it
for the first token and the end, so the self-audit can show the client's
own lag.  Over HTTP/1.1 an arrival stamp is never earlier than the
request's send.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import ProtocolError
from ..wire._response_py import ResponseDecoder
from ..wire.events import FirstToken, ResponseComplete
from ._receive_py import READ_SIZE, SocketReader

__all__ = ("READ_SIZE", "ReadCore", "monotonic_ns")

monotonic_ns = time.monotonic_ns


class ReadCore(SocketReader):
    """Stamps reads and feeds one response decoder per request.

    The owner calls :meth:`begin` with the request bytes and its transport;
    the event loop calls :meth:`get_buffer` / :meth:`buffer_updated`; the
    core calls back ``self.on_first_token(t_ns)`` (only when
    ``want_first_token`` is set), ``self.on_response_done(t_ns)`` and
    ``self.on_response_failed(t_ns, error)``.
    """

    def __init__(self, decoder_options: dict[str, Any]) -> None:
        SocketReader.__init__(self)
        self._decoder_options = decoder_options
        self.decoder: Any = None
        self.t_issue = 0
        self.want_first_token = False
        # The read stamps of the reads that carried the first content event
        # and completed [DONE], and whether the kernel stamped them.
        self.first_read_ns = 0
        self.done_read_ns = 0
        self.kernel_first = False
        self.kernel_done = False
        # Where the first token's stamp came from with segment stamps
        # (``_receive_py.SEGMENT_*``; NO_SEGMENTS without a capture).
        self.segment_first = 0

    def begin(self, transport: Any, request: bytes, want_first_token: bool) -> int:
        """Starts a response and writes the request; returns ``t_issue``."""
        self.decoder = ResponseDecoder(**self._decoder_options)
        self.want_first_token = want_first_token
        t_issue = self.t_issue = self.last_read_ns = self._floor = monotonic_ns()
        self.first_read_ns = self.done_read_ns = 0
        self.kernel_first = self.kernel_done = False
        self.segment_first = 0
        transport.write(request)
        return t_issue

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        t_ns = monotonic_ns()
        self._feed(self._view[:nbytes], t_ns, t_ns, False)

    def _stamp_floor(self) -> int:
        # The response's data came after its request was sent.
        return max(self._floor, self.t_issue)

    def _feed(self, data: Any, t_ns: int, t_read: int, kernel: bool) -> None:
        """Feeds one read: ``t_ns`` stamps its events, ``t_read`` is when it
        was read (the same unless the kernel stamped it)."""
        self.last_read_ns = t_read
        decoder = self.decoder
        if decoder is None:
            self.on_unsolicited(len(data))
            return
        self._floor = t_ns
        had_done = decoder._t_done is not None
        try:
            events = decoder.feed(data, t_ns)
        except ProtocolError as error:
            self.on_response_failed(t_ns, error)
            return
        if not had_done and decoder._t_done is not None:
            self.done_read_ns = t_read
            self.kernel_done = kernel
        for event in events:
            if isinstance(event, ResponseComplete):
                self.on_response_done(t_ns)
            elif isinstance(event, FirstToken):
                self.first_read_ns = t_read
                self.kernel_first = kernel
                self.segment_first = self.last_read_segment
                if self.want_first_token:
                    self.on_first_token(t_ns)

    def end_of_stream(self) -> bool:
        """The peer closed: returns True when that completed the response."""
        t_ns = monotonic_ns()
        had_done = self.decoder._t_done is not None
        try:
            events = self.decoder.feed_eof(t_ns)
        except ProtocolError as error:
            self.on_response_failed(t_ns, error)
            return False
        if not had_done and self.decoder._t_done is not None:
            # The kernel stamps data, not the close: the end is the read that
            # saw it, on a kernel-stamped connection as on any other.
            self.done_read_ns = t_ns
            self.kernel_done = self._kernel
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
