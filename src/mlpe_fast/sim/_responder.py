"""What the simulated endpoint's request handling and response jobs need
of a connection: the interfaces an HTTP/1.1 connection
(:mod:`mlpe_fast.sim._protocol`) and an HTTP/2 stream (:mod:`mlpe_fast.sim._h2`)
implement.

:class:`Responder` is where one response goes, :class:`Wire` the HTTP/1.x
connection under it as the faults see it, :class:`Closable` a connection as
the server sees it at shutdown, and :class:`CancellableJob` a response job as
a responder holds it.  They live below handling (:mod:`mlpe_fast.sim._handling`)
and the jobs (:mod:`mlpe_fast.sim._jobs`), which both use them, so that the
jobs never import the handling that starts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ("JSON", "CancellableJob", "Closable", "Responder", "Wire")

JSON = b"application/json"


class CancellableJob(Protocol):
    """A response job as its responder holds it: driven again when writing
    is possible (:func:`mlpe_fast.sim._state.drive`), cancelled when the
    response can no longer be delivered (its pacer then drops it)."""

    cancelled: bool

    def fire(self, now_ns: int) -> int | None:
        """Does what is due at ``now_ns``; returns the next deadline or None."""
        ...


# --- what handling and jobs need from a protocol ---------------------------------------------


class Responder(Protocol):
    """Where one response goes: an HTTP/1.1 connection or an HTTP/2 stream.

    A response is either whole (:meth:`respond`: status, headers and body
    at once) or streamed by a :class:`~mlpe_fast.sim._jobs.StreamJob`
    (:meth:`begin`, then :meth:`write_stream` per wake-up, then
    :meth:`job_done`).  Jobs consult :attr:`gone` and :attr:`blocked` before
    each write: a response nobody can receive stops, and one the transport
    or the peer's flow-control window cannot take now is :meth:`park`-ed and
    driven again by the responder when it can.
    """

    @property
    def chunked(self) -> bool:
        """Whether stream events are framed as HTTP/1.1 chunks."""
        ...

    @property
    def reset_after_tokens(self) -> int | None:
        """A fault: abort the response once this many token events were
        written (:meth:`reset`); None never."""
        ...

    @property
    def wire(self) -> Wire | None:
        """The HTTP/1.x connection under the response, for the faults that
        break its framing or its lifetime; None over HTTP/2."""
        ...

    @property
    def gone(self) -> bool:
        """The response can no longer be delivered (closed or reset)."""
        ...

    @property
    def blocked(self) -> bool:
        """Nothing more can be written now (a full transport buffer, an
        exhausted flow-control window)."""
        ...

    def respond(
        self,
        status: int,
        body: bytes,
        *,
        content_type: bytes = JSON,
        event_stream: bool = False,
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        """Sends a whole response with a Content-Length."""
        ...

    def begin(self, job: CancellableJob, *, streamed: bool) -> None:
        """``job`` now answers the request; it is driven right after."""
        ...

    def write_stream(self, parts: list[bytes], *, head: bool, end: bool) -> None:
        """Sends rendered events of a streamed response, after its head when
        ``head`` (the first write), ending the response when ``end``."""
        ...

    def park(self, job: CancellableJob) -> None:
        """Holds ``job`` until writing is possible again, then drives it."""
        ...

    def job_done(self, job: CancellableJob) -> None:
        """``job`` wrote its whole response."""
        ...

    def answering(self, job: CancellableJob) -> bool:
        """``job`` is still this response's (begun, not done, reset or dropped)."""
        ...

    def reset(self) -> None:
        """Aborts the response: resets the HTTP/2 stream
        (RST_STREAM(INTERNAL_ERROR)) or the HTTP/1.x connection (RST)."""
        ...


class Wire(Protocol):
    """An HTTP/1.x connection as the faults see it: bytes written as they
    are, whatever the framing says."""

    @property
    def stream_head(self) -> bytes:
        """The head of the streamed response begun (:meth:`Responder.begin`)."""
        ...

    @property
    def keeps_alive(self) -> bool:
        """The connection is to stay open after the response being answered."""
        ...

    def write(self, data: bytes) -> None:
        """Writes ``data`` as is."""
        ...

    def hang_up(self) -> None:
        """Closes the connection cleanly (FIN) once what is written is sent."""
        ...

    def close_after_response(self) -> None:
        """Closes the connection cleanly once the response is out, although
        its head let the client keep it (the stale keep-alive race)."""
        ...


class Closable(Protocol):
    """A live connection, as the server sees it at shutdown."""

    def abort(self) -> None:
        """Drops the connection at once."""
        ...
