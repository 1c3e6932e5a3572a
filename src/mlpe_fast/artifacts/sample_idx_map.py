"""``sample_idx_map.json``: which dataset row each measured query asked,
kept on disk as the run goes (issue 23: memory flat in run length).

The file is ``{phase: {sample_uuid: dataset_index}}``, indented by two
spaces with no final newline, as the reference writes it
(``commands/benchmark/execute.py``, ``_write_scoring_artifacts``; spec
§3.1): phases and uuids in the order their first query was logged.

:class:`SampleIndexSpool` builds it one entry at a time without holding
the entries: each phase's entries are encoded at once as the lines the
final file will hold (``    "<uuid>": <index>``, joined by ``,\\n``) and
appended to a buffer that goes, past ``buffer_bytes``, to an anonymous
temporary file in the run folder (unlinked from birth: a killed run leaves
nothing behind, and the folder is on the disk that holds the run, not a
``/tmp`` that may be memory).  :meth:`SampleIndexSpool.write` copies them
into the file between the braces, through ``<name>.partial`` and a rename,
so that the real name never holds half a file (before issue 23 the file
was written whole at the end from a dict; it still appears only then).

A dict keeps a repeated key at its first position with its last value.
A point's sample ids never repeat (``Client.new_sample_id``: a random
64-bit prefix per client, each engine's client its own, and a counter; an
agentic turn, an accuracy query and an aborted turn each take a fresh
one), but the spool keeps the dict's answer whatever it is given, and
knows a repeat exactly at one bit per query: for an id of the clients'
form it sets the counter's bit in its prefix's bitmap; any other id goes
into a set (which grows by the id, so such ids are not flat, and only
the tests and foreign callers give them).  A repeat writes no second
entry; its value replaces the first one's as the file is written.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO

import msgspec

__all__ = ("SampleIndexSpool", "write_sample_idx_map")

#: A counter past this (16 Mi queries of one client: a 2 MiB bitmap) is kept
#: in the set instead, so that a foreign id that merely looks like a
#: client's cannot make a bitmap huge.
_BITMAP_COUNTERS = 1 << 24

_ENTRY_SEPARATOR = b",\n"


def write_sample_idx_map(
    path: str | os.PathLike[str], mapping: Mapping[str, Mapping[str, int]]
) -> None:
    """Writes ``sample_idx_map.json`` (module doc) from a spool, streamed,
    or from any other mapping (encoded whole)."""
    if isinstance(mapping, SampleIndexSpool):
        mapping.write(path)
        return
    data = msgspec.json.format(msgspec.json.encode(mapping), indent=2)
    _write_through_partial(Path(path), lambda out: out.write(data))


def _write_through_partial(path: Path, fill: Callable[[IO[bytes]], object]) -> None:
    """``fill(out)`` into ``<name>.partial``, then renamed to ``path``: a
    failure or a kill leaves ``path`` as it was."""
    partial = path.with_name(f"{path.name}.partial")
    try:
        with partial.open("wb") as out:
            fill(out)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


class _SeenIds:
    """Which sample ids a phase holds, exactly (module doc): one bit per
    query for the clients' ids, a set entry for any other."""

    __slots__ = ("_bitmaps", "_others")

    def __init__(self) -> None:
        self._bitmaps: dict[bytes, bytearray] = {}  # 8-byte prefix -> counter bits
        self._others: set[str] = set()

    def add(self, sample_uuid: str) -> bool:
        """Takes ``sample_uuid`` in; False when it was already in."""
        # Only the canonical spelling goes to a bitmap ("AB..." and "ab..."
        # are two keys): 32 characters that are 16 bytes of hex have no
        # space, and islower() refuses capitals (and, rarely, all digits).
        if len(sample_uuid) == 32 and sample_uuid.islower():
            try:
                raw = bytes.fromhex(sample_uuid)
            except ValueError:
                raw = b""
            if len(raw) == 16 and (counter := int.from_bytes(raw[8:], "big")) < _BITMAP_COUNTERS:
                bits = self._bitmaps.get(prefix := raw[:8])
                if bits is None:
                    bits = self._bitmaps[prefix] = bytearray(64)
                byte, mask = counter >> 3, 1 << (counter & 7)
                if byte >= len(bits):  # doubled, so that growing is amortized O(1)
                    bits.extend(bytes(max(byte + 1 - len(bits), len(bits))))
                if bits[byte] & mask:
                    return False
                bits[byte] |= mask
                return True
        if sample_uuid in self._others:
            return False
        self._others.add(sample_uuid)
        return True


class _PhaseSpool:
    """One phase's entries: a buffer, then an anonymous file (module doc)."""

    __slots__ = ("__weakref__", "buffer", "closer", "entries", "file", "replaced", "seen")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.file: IO[bytes] | None = None
        self.closer: weakref.finalize[[], _PhaseSpool] | None = None
        self.entries = 0
        self.seen = _SeenIds()
        self.replaced: dict[str, int] = {}  # a repeated uuid's last value

    def spill(self, directory: Path) -> None:
        if self.file is None:
            directory.mkdir(parents=True, exist_ok=True)
            # Held open until close(): unlinked from birth (module doc), it
            # is memory that happens to be on disk, so a spool dropped
            # unclosed closes it too (as a BytesIO would be freed).
            self.file = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115
            self.closer = weakref.finalize(self, self.file.close)
        self.file.write(self.buffer)
        self.buffer.clear()

    def blocks(self) -> Iterator[bytes]:
        """The phase's entries, as written (``,\\n``-joined lines), in blocks."""
        if self.file is not None:
            self.file.flush()
            self.file.seek(0)
            while block := self.file.read(1 << 20):
                yield block
            self.file.seek(0, os.SEEK_END)
        if self.buffer:
            yield bytes(self.buffer)

    def entry_lines(self) -> Iterator[bytes]:
        """The phase's entries one by one (each ``    "<uuid>": <index>``)."""
        rest = b""
        for block in self.blocks():
            parts = (rest + block).split(_ENTRY_SEPARATOR)
            rest = parts.pop()
            yield from parts
        if rest:
            yield rest

    def write_to(self, out: IO[bytes]) -> None:
        if not self.replaced:
            for block in self.blocks():
                out.write(block)
            return
        for i, line in enumerate(self.entry_lines()):
            # The key is JSON, its value an int: the last ": " parts them.
            key, _, _ = line.rpartition(b": ")
            value = self.replaced.get(msgspec.json.decode(key.strip()))
            if value is not None:
                line = b"%s: %d" % (key, value)
            out.write(_ENTRY_SEPARATOR + line if i else line)

    def close(self) -> None:
        if self.closer is not None:
            self.closer()  # closes the file, once
        self.file = self.closer = None
        self.buffer.clear()


class SampleIndexSpool(Mapping[str, Mapping[str, int]]):
    """``{phase: {sample_uuid: dataset_index}}`` as it is built, on disk
    past ``buffer_bytes`` per phase (module doc).

    It reads as the mapping it holds (``spool["performance"]`` reads that
    phase back whole, for tests and small runs); :func:`write_sample_idx_map`
    writes it without reading it into memory.  :meth:`close` drops the
    temporary files (also on leaving a ``with``); what was added stays
    readable until then.

    Args:
        directory: where the temporary files go (the run folder).
        buffer_bytes: a phase's entries kept in memory before they go to
            its temporary file (64 KiB: about 1,400 entries).
    """

    def __init__(self, directory: str | os.PathLike[str], *, buffer_bytes: int = 64 << 10) -> None:
        self.directory = Path(directory)
        self.buffer_bytes = buffer_bytes
        self._phases: dict[str, _PhaseSpool] = {}
        self._encoder = msgspec.json.Encoder()

    def __enter__(self) -> SampleIndexSpool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add(self, phase: str, sample_uuid: str, index: int) -> None:
        """``mapping[phase][sample_uuid] = index``, as a dict would take it."""
        spool = self._phases.get(phase)
        if spool is None:
            spool = self._phases[phase] = _PhaseSpool()
        if not spool.seen.add(sample_uuid):
            spool.replaced[sample_uuid] = index
            return
        spool.buffer += b"%s    %s: %d" % (
            _ENTRY_SEPARATOR if spool.entries else b"",
            self._encoder.encode(sample_uuid),
            index,
        )
        spool.entries += 1
        if len(spool.buffer) > self.buffer_bytes:
            spool.spill(self.directory)

    def write(self, path: str | os.PathLike[str]) -> None:
        """``sample_idx_map.json`` at ``path`` (module doc), byte for byte
        what ``write_sample_idx_map`` writes of the same dict."""
        _write_through_partial(Path(path), self._write_to)

    def _write_to(self, out: IO[bytes]) -> None:
        if not self._phases:
            out.write(b"{}")
            return
        out.write(b"{\n")
        for i, (phase, spool) in enumerate(self._phases.items()):
            separator = _ENTRY_SEPARATOR if i else b""
            out.write(b"%s  %s: {\n" % (separator, self._encoder.encode(phase)))
            spool.write_to(out)
            out.write(b"\n  }")
        out.write(b"\n}")

    def close(self) -> None:
        """Drops the entries and their files (idempotent): it reads empty after."""
        for spool in self._phases.values():
            spool.close()
        self._phases.clear()

    # -- the mapping it holds

    def __getitem__(self, phase: str) -> dict[str, int]:
        spool = self._phases[phase]
        body = b"".join(spool.blocks())
        entries = msgspec.json.decode(b"{%s}" % body, type=dict[str, int])
        entries.update(spool.replaced)  # in place: a dict keeps the first position
        return entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._phases)

    def __len__(self) -> int:
        return len(self._phases)
