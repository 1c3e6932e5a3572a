"""Append-only typed arrays whose older items live in a temporary file
(issue 23: a point's memory flat in its run length).

A :class:`SpillFile` is one anonymous temporary file (``tempfile.TemporaryFile``:
in ``TMPDIR``, or the directory its owner names; on Linux opened with
``O_TMPFILE``, elsewhere unlinked as soon as it is made), so its bytes have
no name on disk and go when the file is closed -- :meth:`SpillFile.close`,
its owner garbage collected, or the process ending, however it ends.  It is
made at the first write: a store that never spills makes no file.

A :class:`SpilledArray` is an ``array`` of one typecode in two parts: the
items written to its file, oldest first, and the in-memory ``tail`` after
them.  Its owner appends to ``tail`` directly (one ``array.append``, the
cost of a plain array; the tail is the same object for the store's life)
and moves the tail to the file when it holds as much as it should keep.
Reading back: one item, a range as numpy (:meth:`SpilledArray.read`: a
``pread`` a block), or the whole array (:meth:`SpilledArray.to_numpy`).

Where an item is in the file is arithmetic, so that nothing is kept in
memory per block: a store spilled on its own (:meth:`SpilledArray.spill`)
has a file of its own, its items one after the other; stores that take one
item (or a fixed number) a row share one file as a :class:`SpillGroup`,
spilled together every ``rows`` rows, block ``b`` of the file holding those
rows of every store in turn at ``b * stride``.

Appended from one thread (the event loop's, as the records it stores);
reads and writes take the file's lock, since a file offset is shared state
where ``pread`` is missing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

__all__ = ("SpillFile", "SpillGroup", "SpilledArray")

_PREAD = hasattr(os, "preadv") and hasattr(os, "pwritev")


class SpillFile:
    """One anonymous temporary file written at its end and read back by
    offset (module doc).  ``directory``: where it is made (None: ``TMPDIR``,
    as :func:`tempfile.gettempdir` finds it)."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self.size = 0  # bytes written
        self._file: Any = None  # a FileIO once the first bytes are written
        self._closed = False
        self._lock = threading.Lock()

    def append(self, parts: Sequence[memoryview]) -> None:
        """Writes ``parts`` one after the other at the file's end.

        Raises:
            OSError: the file cannot be made or written (no room, say);
                :attr:`size` is then as it was, so nothing counts as written.
            ValueError: the file was closed.
        """
        if self._closed:
            raise ValueError("spill file closed")
        views = [part.cast("B") for part in parts]
        total = sum(len(view) for view in views)
        with self._lock:
            if self._file is None:
                # held open for the file's life, closed by close() or with it
                self._file = tempfile.TemporaryFile(dir=self.directory, buffering=0)  # noqa: SIM115
            offset = self.size
            if not _PREAD:
                self._file.seek(offset)
            for view in views:
                done = 0
                while done < len(view):
                    if _PREAD:
                        done += os.pwritev(self._file.fileno(), [view[done:]], offset + done)
                    else:
                        done += self._file.write(view[done:])
                offset += len(view)
            self.size += total

    def read_into(self, offset: int, out: npt.NDArray[Any]) -> None:
        """Fills ``out`` (a contiguous array) with the bytes at ``offset``."""
        if self._closed or self._file is None:
            raise ValueError("spill file closed" if self._closed else "nothing spilled")
        view = out.data.cast("B")
        done = 0
        with self._lock:
            if not _PREAD:
                self._file.seek(offset)
            while done < len(view):
                if _PREAD:
                    got = os.preadv(self._file.fileno(), [view[done:]], offset + done)
                else:
                    got = self._file.readinto(view[done:])
                if not got:  # only a file cut short by someone else
                    raise OSError(f"spill file ends at {offset + done} of {offset + len(view)}")
                done += got

    def close(self) -> None:
        """Deletes the file's bytes (idempotent); the stores on it can no
        longer read their spilled part."""
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def __del__(self) -> None:
        # Dropped with its store: the intended end of its bytes, not a leak
        # to warn of (an open FileIO collected warns "unclosed file").
        if self._file is not None:
            self._file.close()

    @property
    def closed(self) -> bool:
        return self._closed


class SpilledArray:
    """An append-only array of one ``array`` typecode (``q``, ``i``,
    ``B``...) whose older items are in a :class:`SpillFile` (module doc).
    ``tail``: the in-memory part, which the owner appends to.
    ``directory``: where its own file is made, unless it joins a group."""

    __slots__ = ("_block", "_dtype", "_file", "_place", "_spilled", "_stride", "tail")

    def __init__(self, typecode: str, directory: str | None = None) -> None:
        self.tail = array(typecode)
        self._dtype = np.dtype(typecode)
        self._file = SpillFile(directory)
        self._spilled = 0  # items in the file
        # A file of its own: item i at i * itemsize.  In a group (SpillGroup
        # sets these): item i in block i // _block, at _place in it.
        self._block = 0
        self._stride = 0
        self._place = 0

    @property
    def spilled(self) -> int:
        """The items in the file (the rest are in :attr:`tail`)."""
        return self._spilled

    @property
    def file(self) -> SpillFile:
        return self._file

    def append(self, value: int) -> None:
        self.tail.append(value)

    def extend(self, values: Iterable[int] | bytes) -> None:
        if isinstance(values, bytes | bytearray):
            self.tail.frombytes(values)
        else:
            self.tail.extend(values)

    def spill_block(self, values: npt.NDArray[Any]) -> None:
        """Appends ``values`` (of the store's dtype) and spills the tail; a
        file that refuses it keeps the tail in memory (the reads are the
        same, only the memory is not bounded)."""
        self.tail.frombytes(np.ascontiguousarray(values, self._dtype).tobytes())
        with contextlib.suppress(OSError):
            self.spill()

    def spill(self) -> None:
        """Writes the tail to the file and empties it (a store on its own).

        Raises:
            OSError: the file could not take it; the tail is kept as it was.
            ValueError: the store is in a group, which spills it.
        """
        if self._block:
            raise ValueError("a grouped store is spilled by its group")
        if not self.tail:
            return
        with memoryview(self.tail) as view:
            self._file.append([view])
        self._spilled += len(self.tail)
        del self.tail[:]  # in place (the owner holds it), and its buffer is freed

    def __len__(self) -> int:
        return self._spilled + len(self.tail)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> npt.NDArray[Any]: ...

    def __getitem__(self, index: int | slice) -> int | npt.NDArray[Any]:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return self.read(0, n)[index]
            return self.read(start, max(start, stop))
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("array index out of range")
        if index >= self._spilled:
            return self.tail[index - self._spilled]
        value: int = self.read(index, index + 1)[0].item()
        return value

    def read(self, start: int, stop: int) -> npt.NDArray[Any]:
        """Items ``start`` to ``stop`` (0 <= start <= stop <= len) as a new
        numpy array of the typecode's dtype."""
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"range {start}:{stop} outside 0:{len(self)}")
        out = np.empty(stop - start, self._dtype)
        spilled, size = self._spilled, self._dtype.itemsize
        lo = start
        while lo < min(stop, spilled):
            if self._block:  # to the end of lo's block
                block, within = divmod(lo, self._block)
                hi = min(stop, spilled, (block + 1) * self._block)
                offset = block * self._stride + self._place + within * size
            else:
                hi, offset = min(stop, spilled), lo * size
            self._file.read_into(offset, out[lo - start : hi - start])
            lo = hi
        if stop > spilled:
            lo = max(start, spilled)
            # copied at once: no view of the tail outlives this line (an
            # array with an exported buffer refuses appends)
            out[lo - start :] = np.frombuffer(self.tail, self._dtype)[lo - spilled : stop - spilled]
        return out

    def to_numpy(self) -> npt.NDArray[Any]:
        """Every item, as a new numpy array."""
        return self.read(0, len(self))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        # np.asarray(store): every item (a whole copy; the figures read
        # slices instead)
        values = self.to_numpy()
        return values if dtype is None else values.astype(dtype, copy=False)


class SpillGroup:
    """Stores that take ``per_row[k]`` items each row and are spilled
    together every ``rows`` rows into one file (module doc)."""

    def __init__(
        self,
        stores: Sequence[SpilledArray],
        per_row: Sequence[int],
        rows: int,
        directory: str | None = None,
    ) -> None:
        if any(len(store) for store in stores):
            raise ValueError("a group is made of empty stores")
        self.stores = tuple(stores)
        self.rows = rows
        self.file = SpillFile(directory)
        place = 0
        for store, items in zip(self.stores, per_row, strict=True):
            store._file = self.file
            store._block = rows * items
            store._place = place
            place += rows * items * store._dtype.itemsize
        for store in self.stores:
            store._stride = place

    def spill(self) -> None:
        """Writes the stores' tails, ``rows`` rows each, as the next block.

        Raises:
            OSError: the file could not take it; the tails are kept.
            ValueError: a tail does not hold ``rows`` rows.
        """
        if any(len(store.tail) != store._block for store in self.stores):
            raise ValueError(f"a group spills {self.rows} rows at a time")
        views = [memoryview(store.tail) for store in self.stores]
        try:
            self.file.append(views)
        finally:
            for view in views:
                view.release()
        for store in self.stores:
            store._spilled += len(store.tail)
            del store.tail[:]
