"""The token counter's waiting jobs on disk, so that a point's memory does
not grow with its length while counting waits for the load to end.

:class:`~.tokens.TokenCounter` counts after the load by default, so that
counting never takes the interpreter or a core from the event loop and the
receive thread while they measure (``tokens`` module doc).  Until then each
finished query's :class:`~.tokens.CountJob` waits: its answer, the TPOT
part of it and its prompt, about 1 KB a query of 64-token answers and ten
times that at 2,048 tokens.  Kept in memory, a 1,000,000-request point
would hold gigabytes for counts it needs only at the end (issue 23: memory
flat in run length).  So past a few hundred waiting jobs the counter's
worker moves the oldest to this file, in batches, and reads them back, in
the same order, when it counts.

The file is anonymous (``tempfile.TemporaryFile``: unlinked at once, so
the kernel frees it when the process ends however it ends), in the run
folder when there is one (the disk that holds ``events.jsonl``, which the
user chose, rather than a ``/tmp`` that may be memory), else in ``TMPDIR``.
It holds frames, each ``kind (1 byte) | length (4 bytes, little-endian) |
payload``: kind ``m`` is a msgpack array of jobs (``msgspec``, 0.07 µs a
64-token job to write on this VM, against 1.0 µs by ``pickle``), kind ``p``
a pickled list for a batch msgpack cannot hold (an integer past 64 bits
in a tool call's arguments, say).  Frames are written whole at the end and
read in order from the start; once every frame is read the file is
emptied, so a counter that drains between points starts again from zero.

Every method runs on the counter's worker thread.  A write that fails
(disk full, no such directory) loses nothing: :meth:`JobSpill.write`
raises :class:`SpillError` before the frame counts, the caller keeps the
batch in memory and stops spilling, and ``failure`` says why.
"""

from __future__ import annotations

import os
import pickle
import struct
import tempfile
from collections.abc import Sequence
from typing import IO, Generic, TypeVar

import msgspec

__all__ = ("JobSpill", "SpillError")

_HEADER = struct.Struct("<cI")
_MSGPACK, _PICKLE = b"m", b"p"

Job = TypeVar("Job")  # the counter's CountJob (a NamedTuple msgpack holds as an array)


class SpillError(OSError):
    """A batch could not be written to the spill file (it was not spilled)."""


class JobSpill(Generic[Job]):
    """An append-only file of count-job batches, read back in order.

    Args:
        directory: where the anonymous file goes (None: ``TMPDIR``).
        job_type: the job class (``tokens.CountJob``), for msgpack decoding.
    """

    def __init__(self, directory: str | os.PathLike[str] | None, job_type: type[Job]) -> None:
        self._directory = None if directory is None else os.fspath(directory)
        self._file: IO[bytes] | None = None
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(list[job_type])  # type: ignore[valid-type]
        self._end = 0  # offset past the last whole frame
        self._read_at = 0  # offset of the next frame to read
        self._waiting = 0  # jobs written and not read yet
        self.jobs = 0  # jobs ever written
        self.bytes = 0  # bytes ever written
        self.peak_bytes = 0  # the file's largest size
        self.failure: str | None = None

    @property
    def waiting(self) -> int:
        """Jobs in the file not read back yet."""
        return self._waiting

    def write(self, jobs: Sequence[Job]) -> None:
        """Appends one batch as one frame; raises :class:`SpillError` (the
        batch not written, the file as before) if it cannot."""
        if self.failure is not None:
            raise SpillError(self.failure)
        try:
            kind, payload = _MSGPACK, self._encoder.encode(jobs)
        except (OverflowError, TypeError, ValueError):
            try:
                kind, payload = _PICKLE, pickle.dumps(list(jobs), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # nothing a count input holds, but never lose the batch
                self.failure = f"cannot write a batch: {type(exc).__name__}: {exc}"
                raise SpillError(self.failure) from exc
        frame = _HEADER.pack(kind, len(payload)) + payload
        try:
            if self._file is None:
                # closed by close() or when the counter is collected
                self._file = tempfile.TemporaryFile(  # noqa: SIM115
                    prefix="mlpe-count-jobs-", dir=self._directory
                )
            _write_all(self._file.fileno(), frame, self._end)
        except OSError as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
            raise SpillError(self.failure) from exc
        self._end += len(frame)
        self._waiting += len(jobs)
        self.jobs += len(jobs)
        self.bytes += len(frame)
        self.peak_bytes = max(self.peak_bytes, self._end)

    def read(self) -> list[Job]:
        """The oldest batch not read yet ([] when none); empties the file
        once every batch has been read."""
        if self._file is None or self._read_at >= self._end:
            return []
        fd = self._file.fileno()
        kind, length = _HEADER.unpack(_read_exactly(fd, _HEADER.size, self._read_at))
        payload = _read_exactly(fd, length, self._read_at + _HEADER.size)
        self._read_at += _HEADER.size + length
        jobs: list[Job] = (
            self._decoder.decode(payload) if kind == _MSGPACK else pickle.loads(payload)
        )
        self._waiting -= len(jobs)
        if self._read_at >= self._end:  # all read: give the disk back
            self._read_at = self._end = 0
            os.ftruncate(fd, 0)
        return jobs

    def close(self) -> None:
        """Deletes the file (it was never linked: closing frees it)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _read_exactly(fd: int, size: int, offset: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:  # the file is ours and whole frames only: never short
        raise OSError(f"count-job spill file cut short at offset {offset}")
    return data
