"""``--server-metrics``: the server's Prometheus page read through a point
(``server_metrics/``), beside its load and on a connection of its own.

Before the load, :func:`probe_metrics` asks the page once (the point's
first endpoint: ``auto`` reads its origin's ``/metrics``; with several
replicas, the first one's): what it answered goes to ``server_calls.json``.
With ``auto``, a page that is not there (a 404 or any other status but
2xx, a refusal, no answer) is said on stderr (once a run: a curve's points
each ask again, for their own records, within :func:`notices_once`) and in
the summary, and the point is measured without it; a URL given that does
not answer 2xx stops the run before the load, in one line.  While the performance phase runs (its
warmup included), :func:`scraping` reads the page every interval into
``server_metrics.jsonl``; the figures (``point/figures.py``) sum it up over
the measured window.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, TextIO

import msgspec

from ..config import RunConfig
from ..errors import UsageError
from ..server_metrics.scraper import (
    Scraper,
    ServerMetricsRun,
    metrics_url,
    probe_server_metrics,
    scrape_timeout_s,
)
from .writer import RunWriter

__all__ = ("MetricsPlan", "notices_once", "probe_metrics", "scraping")

# The pages said not offered so far in this run (None: outside
# notices_once, every probe says it).
_said_not_offered: ContextVar[set[str] | None] = ContextVar("said_not_offered", default=None)


@contextlib.contextmanager
def notices_once() -> Iterator[None]:
    """Within it (one ``mlpe-fast run``: a point or a whole curve), a page
    not offered is said on stderr once, not at every point."""
    token = _said_not_offered.set(set())
    try:
        yield
    finally:
        _said_not_offered.reset(token)


class MetricsPlan(msgspec.Struct, frozen=True):
    """What the probe decided: the URL to scrape (None: none), or the
    point's record of a page not offered."""

    url: str | None = None
    not_offered: ServerMetricsRun | None = None


async def probe_metrics(
    config: RunConfig, endpoints: Sequence[str], *, err: TextIO | None = None
) -> tuple[MetricsPlan, dict[str, Any] | None]:
    """Asks the page once (module docstring); returns the plan and the
    call's record for ``server_calls.json`` (None: not asked).

    Raises:
        UsageError: a URL given explicitly did not answer 2xx.
    """
    url = metrics_url(config.server_metrics, endpoints[0])
    if url is None or config.mode == "acc":  # no performance phase: nothing to watch
        return MetricsPlan(), None
    probe = await probe_server_metrics(
        url,
        api_key=config.api_key,
        headers=config.headers,
        timeout_s=scrape_timeout_s(config.server_metrics_interval_s),
        ca_bundle=config.ca_bundle,
        insecure=config.insecure,
    )
    if probe.offered:
        return MetricsPlan(url=url), probe.record()
    if config.server_metrics != "auto":
        raise UsageError(
            f"--server-metrics: GET {url} {probe.reason()}; the point was not measured: "
            "give the URL of the server's Prometheus page, or --server-metrics off"
        )
    note = f"GET {url} {probe.reason()}"
    said = _said_not_offered.get()
    if said is None or note not in said:
        print(
            f"mlpe-fast: server metrics: {note}: not offered; the point is "
            "measured without them (--server-metrics URL names another page)",
            file=sys.stderr if err is None else err,
        )
        if said is not None:
            said.add(note)
    run = ServerMetricsRun(url, False, interval_s=config.server_metrics_interval_s, note=note)
    return MetricsPlan(not_offered=run), probe.record()


@contextlib.asynccontextmanager
async def scraping(
    config: RunConfig, plan: MetricsPlan, writer: RunWriter
) -> AsyncIterator[Scraper | None]:
    """Scrapes the plan's URL while the body runs (None: nothing to scrape),
    each scrape's line into the run folder."""
    if plan.url is None:
        yield None
        return
    scraper = Scraper(
        plan.url,
        interval_s=config.server_metrics_interval_s,
        write=writer.server_metrics_sink(),
        api_key=config.api_key,
        headers=config.headers,
        ca_bundle=config.ca_bundle,
        insecure=config.insecure,
    )
    async with scraper:
        yield scraper
