"""Baselines the native core is measured against, in one run.

``ReferenceStyleDecoder`` decodes a streamed response the way the reference
client's HTTP worker does (``reference-client.md`` section 1.2): llhttp via
httptools for framing, the body joined and cut at the last blank line, a
regular expression to find each ``data:`` JSON object, and one typed msgspec
decode per event.  It is written here from that description so that both
approaches do the same job on the same bytes; it inherits the reference's
blind spots (LF-only event boundaries, one-line data), which the benchmark
input avoids.
"""

from __future__ import annotations

import re

import httptools
import msgspec


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []


_DATA = re.compile(rb"data:\s*(\{[^\n]+\})")
_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class ReferenceStyleDecoder:
    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._pending = b""
        self.content: list[str] = []
        self.complete = False

    def feed(self, data: bytes) -> None:
        self._parser.feed_data(data)

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        buffer = self._pending + body
        cut = buffer.rfind(b"\n\n")
        if cut < 0:
            self._pending = buffer
            return
        self._pending = buffer[cut + 2 :]
        for payload in _DATA.findall(buffer, 0, cut):
            chunk = _decode_chunk(payload)
            for choice in chunk.choices:
                if choice.delta is not None and choice.delta.content:
                    self.content.append(choice.delta.content)

    def on_message_complete(self) -> None:
        self.complete = True
