"""The endpoint's own token counts beside ours: a cross-check, never a source.

MLPerf Endpoints counts tokens on the client with the reference tokenizer
(spec §1.2: "the SUT's own tokenizer/usage counts are irrelevant to
scoring").  When the endpoint sends ``usage`` (mlpe-fast asks for it with
``stream_options.include_usage``), its ``completion_tokens`` and
``prompt_tokens`` are summed over the completed responses that carried them
and set beside our OSL and ISL of the same responses.  A large difference
points at a wrong tokenizer or chat template, a server that counts
differently, or tokens the stream did not deliver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..engine.record import RequestRecord
from ..engine.record_columns import NONE, as_columns
from .tokens import TokenCounts

__all__ = ("usage_cross_check",)


def _relative(server: int, client: int) -> float | None:
    return None if client == 0 else (server - client) / client


def usage_cross_check(records: Sequence[RequestRecord], counts: TokenCounts) -> dict[str, Any]:
    """``{"responses", "server_output_tokens", "client_output_tokens",
    "output_relative_difference", "server_input_tokens",
    "client_input_tokens", "input_relative_difference"}`` over the completed
    responses whose ``usage`` had integer counts; relative differences are
    ``(server - client) / client`` (None when client counts are 0).
    Uncounted responses (count -1) are left out."""
    columns = as_columns(records)
    osl, isl = counts.osl, counts.isl
    n = server_out = client_out = server_in = client_in = 0
    for block in columns.blocks():  # a block at a time: no whole column (issue 23)
        rows = slice(block.start, block.stop)
        completion = block.column("usage_completion_tokens")
        prompt = block.column("usage_prompt_tokens")
        block_osl, block_isl = osl[rows], isl[rows]
        # completed, with integer counts from the endpoint and from us
        kept = (
            block.ok & (completion != NONE) & (prompt != NONE) & (block_osl >= 0) & (block_isl >= 0)
        )
        n += int(np.count_nonzero(kept))
        server_out += int(completion[kept].sum())
        client_out += int(block_osl[kept].sum())
        server_in += int(prompt[kept].sum())
        client_in += int(block_isl[kept].sum())
    return {
        "responses": n,
        "server_output_tokens": server_out,
        "client_output_tokens": client_out,
        "output_relative_difference": _relative(server_out, client_out),
        "server_input_tokens": server_in,
        "client_input_tokens": client_in,
        "input_relative_difference": _relative(server_in, client_in),
    }
