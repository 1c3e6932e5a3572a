"""Completed answers that are not what was asked for.

A record that completed is measured: its TTFT, TPOT, latency and OSL enter
the point's figures (spec §1.1-1.2).  Two kinds of completed answer are
still suspect, and are counted here so that the table, the summary, the
report, the curve and the exit status say so (never silently):

* **unfinished**: output, but no finish reason.  Every OpenAI-compatible
  server ends an answer with one (``stop``, ``length``, ...); an answer
  without it was most likely cut off by the server (llama.cpp's
  ``interrupt_requests`` ends the streams in flight with ``[DONE]`` when a
  new request arrives).  It stays completed -- its tokens were generated
  and streamed, so they count -- but it may be short.  An answer with
  neither output nor finish reason is not one at all: the engine fails it
  as ``EmptyAnswer`` (``engine/exchange.py``), so it never enters the
  figures.
* **longer than asked**: more output tokens than ``max_output_tokens``
  asked for.  The endpoint ignores the field (some honour only
  ``max_tokens``, not ``max_completion_tokens``), so OSL, latency and
  system tokens/s describe another workload than the one configured.  The
  endpoint's own ``usage.completion_tokens`` decides where it is given (it
  counts what the server generated against the limit it applies); without
  it, the client's count, with a tolerance of ``max(2, asked // 10)``
  tokens for tokenizers that disagree at the edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from ..engine.exchange import EMPTY_ANSWER
from ..engine.record import RequestRecord
from ..engine.record_columns import NONE, as_columns
from .tokens import TokenCounts

__all__ = ("AnswerChecks", "check_answers")


class AnswerChecks(msgspec.Struct, frozen=True):
    """The suspect answers of one point (module doc); ``empty`` counts the
    ``EmptyAnswer`` failures beside them; ``longest`` is the most output
    tokens of one completed answer (by the endpoint's count where given,
    else the client's), 0 without any."""

    asked: int | None
    unfinished: int = 0
    longer_than_asked: int = 0
    longest: int = 0
    empty: int = 0
    send_max_tokens: bool = False

    @property
    def suspect(self) -> bool:
        """Whether any answer is not what was asked for."""
        return bool(self.unfinished or self.longer_than_asked or self.empty)

    def warnings(self) -> list[str]:
        """One line per kind of suspect answer, with what to do about it."""
        lines = []
        if self.empty:
            lines.append(
                f"{self.empty:,} answer{_s(self.empty)} with no output and no finish reason "
                "failed as EmptyAnswer: the endpoint cut them off (llama.cpp: start the server "
                "with interrupt_requests off) or sent no choices"
            )
        if self.unfinished:
            lines.append(
                f"{self.unfinished:,} answer{_s(self.unfinished)} ended without a finish reason "
                "and may be cut short: they are measured, but check that the endpoint does not "
                "interrupt streams"
            )
        if self.longer_than_asked:
            remedy = (
                "the endpoint ignores both max_completion_tokens and max_tokens"
                if self.send_max_tokens
                else "the endpoint ignores max_completion_tokens: add --send-max-tokens "
                "to send max_tokens as well"
            )
            lines.append(
                f"{self.longer_than_asked:,} answer{_s(self.longer_than_asked)} longer than "
                f"the {self.asked or 0:,} tokens asked (longest {self.longest:,}): {remedy}"
            )
        return lines

    def as_dict(self) -> dict[str, Any]:
        """The ``mlpe_fast.answers`` block of ``result_summary.json``."""
        return {
            "asked_tokens": self.asked,
            "empty": self.empty,
            "unfinished": self.unfinished,
            "longer_than_asked": self.longer_than_asked,
            "longest": self.longest,
            "warnings": self.warnings(),
        }


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def check_answers(
    records: Sequence[RequestRecord],
    counts: TokenCounts | None,
    asked: int | None,
    *,
    send_max_tokens: bool = False,
) -> AnswerChecks:
    """Counts the suspect answers of ``records`` (module doc).

    ``counts`` are the records' token counts in the same order (None
    without a tokenizer: then only the endpoint's counts are checked);
    ``asked`` is the ``max_output_tokens`` every request carried (None when
    requests carry their own, as an agentic dataset's turns do: no length
    check).
    """
    tolerance = 0 if asked is None else max(2, asked // 10)
    columns = as_columns(records)
    empty_code = columns.code_of(EMPTY_ANSWER)
    empty = 0
    unfinished = longer = 0
    longest: int | None = None  # none known yet
    ours_all = None if counts is None else counts.osl
    for block in columns.blocks():  # a block at a time: no whole column (issue 23)
        ok = block.ok
        if empty_code is not None:
            empty += int(np.count_nonzero(block.column("error_class") == empty_code))
        unfinished += int(np.count_nonzero(ok & (block.column("finish_reason") < 0)))
        server = block.column("usage_completion_tokens")  # NONE: the endpoint gave none
        by_server = server != NONE
        ours = (
            np.full(len(block), -1, np.int64)
            if ours_all is None
            else ours_all[block.start : block.stop]
        )
        tokens = np.where(by_server, server, ours)
        known = ok & (by_server | (ours >= 0))
        if known.any():
            most = int(tokens[known].max())
            longest = most if longest is None else max(longest, most)
        if asked is not None:
            over = np.where(by_server, server > asked, tokens > asked + tolerance)
            longer += int(np.count_nonzero(known & over))
    return AnswerChecks(
        asked=asked,
        unfinished=unfinished,
        longer_than_asked=longer,
        longest=0 if longest is None else longest,
        empty=empty,
        send_max_tokens=send_max_tokens,
    )
