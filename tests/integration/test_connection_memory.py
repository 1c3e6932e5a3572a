"""What an idle connection holds (issue 23): at most 32 KiB of read storage
of its own, whoever reads it, after a response far larger than that.

Counts, not times: ``SocketReader.buffer_bytes`` is the binding's count of
the storage one connection holds (the receive thread's batches in C,
``csrc/mlpe_rxthread.h`` T7; what waits for the loop in the twin); the read
space a loop reads into is one per thread, shared by its connections.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.engine._receive import KEEP_BYTES
from mlpe_fast.engine.client import Client

# A 2,000-token answer is about 300 KiB of events: every buffer that follows
# what arrives grows far past the idle bound before the connection idles.
ANSWER_TOKENS = 2000
IDLE_BOUND = 32 << 10
CONNECTIONS = 4
FLAGS = ("--output-len", str(ANSWER_TOKENS), "--output-len-dist", "fixed", "--itl-ms", "0")

linux_only = pytest.mark.skipif(
    sys.platform != "linux", reason="kernel stamps and the receive thread are Linux only"
)


def body() -> dict[str, Any]:
    return {
        "model": "mlpe-sim",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": ANSWER_TOKENS,
    }


async def idle_connections(url: str, **options: Any) -> list[Any]:
    """The pool's connections once every response is in, with the bytes each
    holds, and whether the thread read them."""
    async with Client(url, max_connections=CONNECTIONS, **options) as client:
        records = await asyncio.wait_for(
            asyncio.gather(*(client.request(body()) for _ in range(2 * CONNECTIONS))), 60
        )
        assert all(r.ok and r.response.content_events == ANSWER_TOKENS for r in records)
        pool = client._pool  # the idle connections are the pool's own
        assert pool is not None
        idle = [c for c in pool._idle if not c.closed]
        return [(c.buffer_bytes, c.threaded, c.get_buffer(1)) for c in idle]


@pytest.fixture(scope="module")
def endpoint() -> Any:
    with simulated_endpoint(FLAGS) as url:
        yield url


@linux_only
@pytest.mark.parametrize(
    "options",
    [
        {"receive_thread": True},
        {"receive_thread": False},
        {"kernel_stamps": False},
    ],
    ids=["receive-thread", "loop-reads", "loop-transport"],
)
def test_an_idle_connection_holds_at_most_32_kib(endpoint: str, options: dict[str, Any]) -> None:
    connections = asyncio.run(idle_connections(endpoint, **options))
    assert len(connections) == CONNECTIONS
    for held, threaded, _ in connections:
        assert threaded == options.get("receive_thread", False)
        assert 0 <= held <= IDLE_BOUND
    # The loop's read space is one per thread, not one per connection.
    spaces = {id(view.obj) for _, _, view in connections}
    assert len(spaces) == 1


@linux_only
def test_the_receive_thread_keeps_no_burst_once_fed(endpoint: str) -> None:
    """T7: a fed batch keeps at most KEEP_BYTES, so a connection holds at
    most twice that once idle, after a response of hundreds of KiB."""
    assert 2 * KEEP_BYTES <= IDLE_BOUND
    connections = asyncio.run(idle_connections(endpoint, receive_thread=True))
    assert all(held <= 2 * KEEP_BYTES for held, _, _ in connections)
