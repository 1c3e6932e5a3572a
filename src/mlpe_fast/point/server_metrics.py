"""``--server-metrics``: the servers' Prometheus pages read through a point
(``server_metrics/``), beside its load and on connections of their own.

The pages: with ``auto``, each endpoint's origin + ``/metrics``, once per
origin (two endpoints on one origin are one server's page: one page); a
URL given is the one page of all the endpoints; a list of URLs
(``--server-metrics URL,URL``) is one page per endpoint, in ``--endpoints``
order (``config/rules.py`` checks the counts match).

Before the load, :func:`probe_metrics` asks each page once, all at once:
what they answered goes to ``server_calls.json``.  With ``auto``, a page
that is not there (a 404 or any other status but 2xx, a refusal, no answer)
is said on stderr, one line per page (once a run: a curve's points each
ask again, for their own records, within :func:`notices_once`), and in the
summary, and the point is measured without it -- the other replicas' pages are still read;
a URL given that does not answer 2xx stops the run before the load, in one
line.  While the performance phase runs (its warmup included),
:func:`scraping` reads each page offered every interval, a scraper (a
connection and a thread) each, on one grid of ticks, into
``server_metrics.jsonl``; the figures (``point/figures.py``) sum it up over
the measured window.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, TextIO

import msgspec

from ..config import RunConfig
from ..errors import UsageError
from ..server_metrics.scraper import (
    Probe,
    Scraper,
    ServerMetricsRun,
    metrics_url,
    probe_server_metrics,
    scrape_timeout_s,
)
from .writer import RunWriter

__all__ = (
    "MetricsPage",
    "MetricsPlan",
    "Scraping",
    "metrics_pages",
    "notices_once",
    "probe_metrics",
    "scraping",
)

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


class MetricsPage(msgspec.Struct, frozen=True):
    """One page to read: its URL, the endpoints (indices in ``--endpoints``)
    it is the page of, and, once probed, why it is not offered (None: it is)."""

    url: str
    endpoints: tuple[int, ...]
    note: str | None = None


class MetricsPlan(msgspec.Struct, frozen=True):
    """What the probe decided: the point's pages, in ``--endpoints`` order
    (none: not asked, ``off`` or no performance phase)."""

    pages: tuple[MetricsPage, ...] = ()

    def not_offered(self, interval_s: float) -> list[ServerMetricsRun] | None:
        """The point's record where nothing was scraped (None: not asked)."""
        if not self.pages:
            return None
        return [_not_offered(page, interval_s) for page in self.pages]


def metrics_pages(setting: str, endpoints: Sequence[str]) -> list[MetricsPage]:
    """The pages ``--server-metrics`` names for ``endpoints`` (module
    docstring); none for ``off``."""
    if setting == "off":
        return []
    if setting == "auto":
        by_url: dict[str, list[int]] = {}
        for index, endpoint in enumerate(endpoints):
            url = metrics_url("auto", endpoint)
            assert url is not None
            by_url.setdefault(url, []).append(index)
        return [MetricsPage(url, tuple(indices)) for url, indices in by_url.items()]
    urls = setting.split(",")
    if len(urls) == 1:
        return [MetricsPage(urls[0], tuple(range(max(1, len(endpoints)))))]
    return [MetricsPage(url, (index,)) for index, url in enumerate(urls)]


async def probe_metrics(
    config: RunConfig, endpoints: Sequence[str], *, err: TextIO | None = None
) -> tuple[MetricsPlan, dict[str, Any] | list[dict[str, Any]] | None]:
    """Asks each page once (module docstring); returns the plan and the
    calls' record for ``server_calls.json``: one page's call, several
    pages' list of them (each with the ``endpoint`` it is of), None when
    none was asked.

    Raises:
        UsageError: a URL given explicitly did not answer 2xx.
    """
    pages = metrics_pages(config.server_metrics, endpoints)
    if not pages or config.mode == "acc":  # no performance phase: nothing to watch
        return MetricsPlan(), None
    probes: list[Probe] = await asyncio.gather(
        *(
            probe_server_metrics(
                page.url,
                api_key=config.api_key,
                headers=config.headers,
                timeout_s=scrape_timeout_s(config.server_metrics_interval_s),
                ca_bundle=config.ca_bundle,
                insecure=config.insecure,
            )
            for page in pages
        )
    )
    if config.server_metrics != "auto":
        for probe in probes:
            if not probe.offered:
                raise UsageError(
                    f"--server-metrics: GET {probe.url} {probe.reason()}; the point was not "
                    "measured: give the URL of the server's Prometheus page, or "
                    "--server-metrics off"
                )
    planned = []
    for page, probe in zip(pages, probes, strict=True):
        if probe.offered:
            planned.append(page)
            continue
        note = f"GET {page.url} {probe.reason()}"
        planned.append(msgspec.structs.replace(page, note=note))
        said = _said_not_offered.get()
        if said is None or note not in said:
            notice = _not_offered_notice(page, probe, endpoints, pages, probes)
            print(notice, file=err or sys.stderr)
            if said is not None:
                said.add(note)
    if len(pages) == 1:
        return MetricsPlan(tuple(planned)), probes[0].record()
    records = [
        {**probe.record(), "endpoint": page.endpoints[0]}
        for page, probe in zip(pages, probes, strict=True)
    ]
    return MetricsPlan(tuple(planned)), records


def _not_offered_notice(
    page: MetricsPage,
    probe: Probe,
    endpoints: Sequence[str],
    pages: Sequence[MetricsPage],
    probes: Sequence[Probe],
) -> str:
    """The one line said for a page not offered."""
    lead = f"mlpe-fast: server metrics: GET {page.url} {probe.reason()}: not offered"
    if len(pages) == 1:
        return (
            f"{lead}; the point is measured without them (--server-metrics URL names another page)"
        )
    named = ", ".join(f"{i} ({endpoints[i]})" for i in page.endpoints if i < len(endpoints))
    others = sum(p.offered for p in probes)
    read = (
        f"the other replicas' pages are read ({others} of {len(pages)})"
        if others
        else "no replica's page is read"
    )
    return (
        f"{lead} by endpoint {named}; the point is measured without its page, {read} "
        "(--server-metrics URL,URL names each replica's page)"
    )


def _not_offered(page: MetricsPage, interval_s: float) -> ServerMetricsRun:
    return ServerMetricsRun(
        page.url, False, interval_s=interval_s, note=page.note, endpoints=page.endpoints
    )


class Scraping:
    """A point's pages being scraped: a :class:`Scraper` for each page
    offered, and the record of each not offered."""

    def __init__(self, plan: MetricsPlan, scrapers: dict[int, Scraper], interval_s: float):
        self._plan = plan
        self._scrapers = scrapers
        self._interval_s = interval_s

    async def stop(self) -> None:
        """Every scraper's last scrape, together (their last tick matches)."""
        await asyncio.gather(*(scraper.stop() for scraper in self._scrapers.values()))

    def runs(self, tracking_start_ns: int) -> list[ServerMetricsRun]:
        """Each page's record, in the plan's order, read from ``tracking_start_ns``."""
        runs = []
        for index, page in enumerate(self._plan.pages):
            scraper = self._scrapers.get(index)
            if scraper is None:
                runs.append(_not_offered(page, self._interval_s))
            else:
                run = scraper.result()
                runs.append(msgspec.structs.replace(run, tracking_start_ns=tracking_start_ns))
        return runs


@contextlib.asynccontextmanager
async def scraping(
    config: RunConfig, plan: MetricsPlan, writer: RunWriter
) -> AsyncIterator[Scraping | None]:
    """Scrapes the plan's pages offered while the body runs (None: no page
    asked), each scrape's line into the run folder."""
    if not plan.pages:
        yield None
        return
    offered = [(i, page) for i, page in enumerate(plan.pages) if page.note is None]
    sink = writer.server_metrics_sink() if offered else None
    origin = asyncio.get_running_loop().time()  # one grid for every page
    scrapers = {
        index: Scraper(
            page.url,
            interval_s=config.server_metrics_interval_s,
            write=sink,
            api_key=config.api_key,
            headers=config.headers,
            ca_bundle=config.ca_bundle,
            insecure=config.insecure,
            endpoints=page.endpoints,
            origin=origin,
        )
        for index, page in offered
    }
    found = Scraping(plan, scrapers, config.server_metrics_interval_s)
    for scraper in scrapers.values():
        await scraper.__aenter__()
    try:
        yield found
    finally:
        await found.stop()
