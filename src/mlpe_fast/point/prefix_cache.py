"""``--reset-prefix-cache``: the endpoint's prefix cache emptied before a
point, so that no point starts on what an earlier one left in it.

A warm prefix cache makes a point faster than its load alone would be
(a curve's later points reuse what the earlier ones cached; a re-run what
the last run cached).  The salt (spec §2.5) keeps queries from sharing a
prefix beyond the system prompt; the reset empties what there is before
the point begins, where the server offers a way:

* ``vllm``: ``POST /reset_prefix_cache`` (vLLM serves it when started with
  ``VLLM_SERVER_DEV_MODE=1``);
* ``sglang``: ``POST /flush_cache`` (SGLang flushes only when no request is
  running or waiting, and answers 200 either way);
* ``/PATH``: another server's route, POSTed to with an empty body.

Each endpoint of the point (``--endpoints A B``: every replica) is reset
once before the point's first request -- before its warmup, so a curve's
every point, each a run of its own, starts cold.  What was called, its
status and how long it took go to the run folder (``server_calls.json``,
:func:`reset_record`) and to stderr.  A reset that fails (no such route, an
error status, no answer) stops the run before the point sends anything,
in one line: the point would otherwise be measured on a cache the user
asked to have emptied.  A curve stops at that point; the points before it
are complete and are reused when the curve is run again.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from ..config import RunConfig
from ..config.request_extras import PREFIX_CACHE_ROUTES
from ..engine.side_request import SideResponse, side_request
from ..errors import UsageError

__all__ = ("reset_prefix_caches", "reset_record")

# What a 404 most likely means, by route.
_HINTS = {
    PREFIX_CACHE_ROUTES["vllm"]: " (vLLM serves it only when started with VLLM_SERVER_DEV_MODE=1)",
}


async def reset_prefix_caches(
    config: RunConfig, endpoints: Sequence[str], *, err: TextIO | None = None
) -> list[dict[str, Any]]:
    """Resets every endpoint's prefix cache (module docstring); returns the
    calls' records, in order; none without ``--reset-prefix-cache``.

    Raises:
        UsageError: a reset failed (which, how, and what to do).
    """
    route = config.reset_prefix_cache
    if route is None:
        return []
    records = []
    for url in endpoints:
        at = datetime.datetime.now(datetime.timezone.utc)
        answer = await side_request(
            url,
            "POST",
            route,
            api_key=config.api_key,
            headers=config.headers,
            timeout_s=max(config.timeouts.connect_s, 30.0),
            ca_bundle=config.ca_bundle,
            insecure=config.insecure,
        )
        record = reset_record(answer, at)
        records.append(record)
        if not answer.ok:
            raise UsageError(_failure(answer, route))
        print(
            f"mlpe-fast: prefix cache reset: POST {answer.url} {answer.status} "
            f"in {record['took_ms']:.1f} ms",
            file=sys.stderr if err is None else err,
        )
    return records


def reset_record(answer: SideResponse, at: datetime.datetime) -> dict[str, Any]:
    """One reset as ``server_calls.json`` keeps it: the URL, method, status
    (None: no answer), when it was sent (UTC), how long it took, and the
    error or the start of the answer's text."""
    text = answer.body[:200].decode("utf-8", "replace").strip()
    return {
        "url": answer.url,
        "method": "POST",
        "status": answer.status,
        "ok": answer.ok,
        "at": at.isoformat(timespec="milliseconds"),
        "took_ms": round(answer.elapsed_ns / 1e6, 3),
        "message": answer.error if answer.error is not None else text,
    }


def _failure(answer: SideResponse, route: str) -> str:
    lead = f"--reset-prefix-cache: POST {answer.url}"
    if answer.status is None:
        why = f"got no answer: {answer.error}"
    else:
        text = " ".join(answer.body[:120].decode("utf-8", "replace").split())
        why = f"answered {answer.status}" + (f" ({text})" if text else "")
        if answer.status in (404, 405):
            why += _HINTS.get(route, "")
    return (
        f"{lead} {why}; the point was not measured (its prefix cache could not be emptied): "
        "fix the server, or leave --reset-prefix-cache out"
    )
