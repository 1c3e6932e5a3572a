"""What all connections of one simulated endpoint share: :class:`ServerState`
(the configuration, the pacer, the statistics, the seeded samplers and the
event shapes) and :func:`drive`, which fires a response job and hands its next
deadline to the pacer.  Below the request handling (:mod:`mlpe_fast.sim._handling`)
and the response jobs (:mod:`mlpe_fast.sim._jobs`), which both read it.
"""

from __future__ import annotations

import random
import time
from typing import Any

from ._events import Shape, framed
from ._pacer import Job, Pacer
from ._responder import Closable
from .config import SimConfig, SimStats
from .faults import FaultPicker
from .stream import chat_chunk, completion_chunk

__all__ = ("LIMIT_FIELDS", "ServerState", "drive")

_EOLS = {"lf": b"\n", "crlf": b"\r\n"}
# The request fields that set an answer's length, by SimConfig.max_tokens_field:
# (chat's, in the order read; completions').
LIMIT_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "both": (("max_completion_tokens", "max_tokens"), ("max_tokens",)),
    "max_tokens": (("max_tokens",), ("max_tokens",)),
    "max_completion_tokens": (("max_completion_tokens",), ("max_tokens",)),
    "none": ((), ()),
}
_monotonic_ns = time.monotonic_ns


# --- the server's shared state -------------------------------------------------------


class ServerState:
    """What all connections of one server share."""

    def __init__(self, config: SimConfig, pacer: Pacer) -> None:
        self.config = config
        self.pacer = pacer
        self.stats = SimStats()
        self.conns: set[Closable] = set()
        # What the fault windows count from.
        self.started_ns = _monotonic_ns()
        self.eol = _EOLS[config.eol]
        self.model = config.model
        self.oracle = config.oracle
        self.replay = config.replay
        self.limit_fields = LIMIT_FIELDS[config.max_tokens_field]
        # Independent streams, so that e.g. changing the timing leaves the
        # text and the lengths unchanged.
        seeds = random.Random(config.seed)
        self.rng_text = random.Random(seeds.getrandbits(64))
        self.ttft = config.ttft_ms.ns_sampler(random.Random(seeds.getrandbits(64)))
        self.itl = config.itl_ms.ns_sampler(random.Random(seeds.getrandbits(64)))
        self.length = config.output_len.int_sampler(random.Random(seeds.getrandbits(64)))
        # None without faults: a request then costs one test, its events nothing.
        self.faults: FaultPicker | None = None
        if config.faults:
            self.faults = FaultPicker(config.faults, seeds.getrandbits(64), self.started_ns)
            self.stats.faults = {spec.name: 0 for spec in config.faults}
        self.next_id = 0
        # What GET /metrics reads (sim/_metrics.py): the response jobs begun
        # (pruned of ended ones as it grows), the requests read and waiting
        # behind another on their HTTP/1.1 connection, the prompt tokens.
        self.jobs: set[Any] = set()
        self.jobs_pruned_at = 1024
        self.queued = 0
        self.prompt_tokens = 0
        model = config.model
        self.role_shape = Shape(
            lambda *, text, **ids: chat_chunk(role="assistant", content="", model=model, **ids)
        )
        self.content_shape = Shape(
            lambda *, text, **ids: chat_chunk(content=text, model=model, **ids)
        )
        self.reasoning_shape = Shape(
            lambda *, text, **ids: chat_chunk(reasoning=text, model=model, **ids)
        )
        self.text_shape = Shape(lambda *, text, **ids: completion_chunk(text, model=model, **ids))
        self.done = {
            chunked: framed(b"[DONE]", eol=self.eol, chunked=chunked) for chunked in (True, False)
        }

    def new_id(self, chat: bool) -> str:
        self.next_id += 1
        return f"{'chatcmpl' if chat else 'cmpl'}-mlpe{self.next_id:08x}"


def drive(state: ServerState, job: Job, now_ns: int) -> None:
    """Fires ``job`` now and hands its next deadline, if any, to the pacer."""
    nxt = job.fire(now_ns)
    if nxt is not None:
        state.pacer.schedule(nxt, job)
