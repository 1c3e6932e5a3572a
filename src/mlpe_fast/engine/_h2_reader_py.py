"""Pure-Python twin of the engine's HTTP/2 read path (``_h2_reader_c.pyx``).

An :class:`H2ReadCore` is the part of an HTTP/2 connection that runs on
every network read: it stamps the read and runs the DATA de-framer
(:mod:`mlpe_fast.wire._h2`) over it, which feeds the registered streams'
decoders.  Python (the owner, :mod:`mlpe_fast.engine.h2`) runs only for
what the de-framer hands back: frames for ``h2`` (HEADERS, SETTINGS,
RST_STREAM, GOAWAY, ...), a stream's milestones, and a connection error.
WINDOW_UPDATE frames the de-framer asks for are written at the end of the
read.
"""

from __future__ import annotations

from typing import Any

from ..wire._h2_py import DataDeframer
from ._reader_py import monotonic_ns
from ._receive_py import SocketReader

__all__ = ("H2ReadCore",)


class H2ReadCore(SocketReader):
    """Stamps reads and de-frames DATA for the registered streams.

    The owner sets ``transport`` once connected; the event loop calls
    :meth:`get_buffer` / :meth:`buffer_updated` (or, on a socket of its own,
    ``read_socket``: :class:`~._receive_py.SocketReader`); the core calls
    back, in the order the input holds them:

    * ``self.on_stream_event(stream_id, flags, t_ns)`` for each de-framer
      event (``FIRST``/``DONE``/``ERROR`` of :mod:`mlpe_fast.wire._h2_py`);
    * ``self.on_frames(data, t_ns)`` with bytes for ``h2.receive_data``;
    * ``self.on_deframe_error(error_code, t_ns)`` when the input breaks
      HTTP/2 (nothing more is read from it).

    Once a hook has set ``closed``, the rest of the read is dropped: no
    further hook runs and no WINDOW_UPDATE is written; a closed core ignores
    later reads.  While a hook runs, ``last_read_ns`` is when the data was
    read and ``last_read_kernel`` whether ``t_ns`` is the kernel's arrival
    stamp of it; while ``on_stream_event`` runs, ``event_later_bytes`` is how
    many bytes the read (with segment stamps, the segment's piece of it)
    carried past the frame that gave the event (the de-framer's D7): data
    that arrived with or after it, which the read's one arrival stamp
    covers too.
    """

    def __init__(self, max_frame_size: int, connection_window: int, stream_window: int) -> None:
        self.deframer = DataDeframer(
            max_frame_size=max_frame_size,
            connection_window=connection_window,
            stream_window=stream_window,
        )
        SocketReader.__init__(self)
        self.transport: Any = None
        self.closed = False  # set by the owner; a closed connection reads no further
        self.event_later_bytes = 0

    def register(self, stream_id: int, decoder: Any) -> None:
        """DATA of ``stream_id`` goes to ``decoder`` (body mode, head set)."""
        self.deframer.register(stream_id, decoder)

    def unregister(self, stream_id: int) -> bool:
        return self.deframer.unregister(stream_id)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        t_ns = monotonic_ns()
        self._feed(self._view[:nbytes], t_ns, t_ns, False)

    def _feed(self, data: Any, t_ns: int, t_read: int, kernel: bool) -> None:
        if self.closed:
            return
        self.last_read_ns = t_read
        self.last_read_kernel = kernel
        self._floor = t_ns
        deframer = self.deframer
        view = memoryview(data)
        nbytes = len(view)
        pos = 0
        read_end = deframer.offset + nbytes
        while True:
            pos += deframer.feed(view[pos:], t_ns)
            for stream_id, flags, end in deframer.take_events_ending():
                self.event_later_bytes = read_end - end
                self.on_stream_event(stream_id, flags, t_ns)
                if self.closed:
                    return
            passthrough = deframer.take_passthrough()
            if passthrough:
                self.on_frames(passthrough, t_ns)
                if self.closed:
                    return
            if deframer.error:
                self.on_deframe_error(deframer.error, t_ns)
                return
            if pos >= nbytes:
                break
        updates = deframer.take_window_updates()
        if updates and self.transport is not None:
            self.transport.write(updates)

    # Hooks the owner overrides.
    def on_stream_event(self, stream_id: int, flags: int, t_ns: int) -> None:
        raise NotImplementedError

    def on_frames(self, data: bytes, t_ns: int) -> None:
        raise NotImplementedError

    def on_deframe_error(self, error_code: int, t_ns: int) -> None:
        raise NotImplementedError
