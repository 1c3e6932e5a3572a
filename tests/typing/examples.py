"""Typing examples: mypy checks these (``[tool.mypy] files``); pytest does
not run them.  Each ``assert_type`` pins what a user's type checker sees of
the public API, compiled core or not."""

from __future__ import annotations

from typing_extensions import assert_type

import mlpe_fast
from mlpe_fast import (
    ChunkDecoder,
    ChunkError,
    Delta,
    FirstToken,
    H1Decoder,
    ResponseComplete,
    ResponseDecoder,
    ResponseHead,
    ResponseSummary,
    SSEDecoder,
    SSEEvent,
)
from mlpe_fast.engine import Client, RequestRecord


def decoders(data: bytes, view: memoryview) -> None:
    assert_type(mlpe_fast.NATIVE, bool)
    assert_type(SSEDecoder().feed(view, 1), list[SSEEvent])
    assert_type(ChunkDecoder().decode(data, 1), Delta | ChunkError)
    for event in H1Decoder().feed(bytearray(data), 1):
        assert_type(event, ResponseHead | mlpe_fast.BodyData | ResponseComplete)
    decoder = ResponseDecoder(max_event=1 << 16, record_chunk_times=True)
    for milestone in decoder.feed(data, 1):
        assert_type(milestone, ResponseHead | FirstToken | ResponseComplete)
    summary = decoder.summary()
    assert_type(summary, ResponseSummary)
    assert_type(summary.t_first, int | None)
    assert_type(summary.chunk_times, tuple[int, ...] | None)


async def client(url: str) -> None:
    async with Client(url, idle_timeout=30.0) as c:
        record = await c.request({"model": "m", "messages": [], "stream": True})
        assert_type(record, RequestRecord)
        assert_type(record.ttft_ns, int | None)
        assert_type(record.response.content, str)
        c.issue(b"{}", lambda r: assert_type(r, RequestRecord))
