"""The endpoint's ``/metrics`` read through a point, beside its load
(``--server-metrics auto|off|URL``, ``--server-metrics-interval SECONDS``).

Scraping must not disturb what it watches, so it keeps out of the load's
way: it has a connection of its own (never one of the load's pool), one
HTTP/1.1 keep-alive connection made with the standard library's
``http.client`` in a worker thread of its own, so that the event loop that
stamps the load never waits on it; it asks once a second by default; one
scrape at a time (a slow answer delays the next one, it never piles up);
and what it costs is measured and shown in the self-audit (scrapes, bytes,
the CPU time spent reading pages, the mean scrape latency).

:func:`probe_server_metrics` asks once before the load (``point/setup.py``):
with ``auto`` (the default), anything but a 2xx answer (a 404, a refusal,
no answer) means the server offers no metrics, which the run says once and records, and the point is
measured without them; a URL given explicitly that does not answer with a
page stops the run before the load, as a mistake.  :class:`Scraper` then
scrapes from the point's start (its warmup included) to its end: one
scrape at once, then one on each tick of a grid of the interval, then a
last one when the load is done (so that counter deltas cover the point).
Several replicas' pages (``point/server_metrics.py``) are each scraped by a
:class:`Scraper` of their own -- their own connection and thread, so that
a slow replica never delays another's scrape -- on one grid: their scrapes
of a tick go out together, which is what lets the summary add their
readings up (``summary.py``).  A failure mid-point (an
error status, no answer within the timeout, a page that cannot be read) is
counted and the next scrape goes on; it never stops the load.

Each scrape is a line of ``server_metrics.jsonl``: ``t_ns`` (when it was
sent, on the engine's clock, ``engine/clock.py``, the clock of the records'
stamps), ``at`` (wall clock, ns since the epoch), ``latency_ms``,
``endpoint`` (the index in ``--endpoints`` of the replica whose page it is:
the first of those the page serves), ``url`` (the page's), ``tick`` (the
tick of the scrapers' grid it was sent on: several pages' scrapes of one
tick went out together), the mapped
values (``names.py``), and ``raw``: every series the page held, by
``name{labels}``; a failed scrape has ``error`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import msgspec

from ..engine.clock import monotonic_ns
from ..engine.side_request import side_connection, side_error, side_fields
from .names import family_of, map_page
from .prometheus import PrometheusError, parse_page, series_key

__all__ = (
    "METRICS_PATH",
    "Probe",
    "ScrapeCosts",
    "Scraped",
    "Scraper",
    "ServerMetricsRun",
    "metrics_url",
    "probe_server_metrics",
    "scrape_timeout_s",
)

#: Where vLLM, SGLang and Dynamo serve their metrics (at the server's root).
METRICS_PATH = "/metrics"
#: The most of a page read: a server's page is tens of kilobytes.
_MAX_PAGE = 8 << 20

_encoder = msgspec.json.Encoder()


def metrics_url(setting: str, endpoint: str) -> str | None:
    """The URL scraped: None for ``off``; the endpoint's origin (scheme,
    host and port, its path left out: ``http://h:8000/v1`` serves
    ``http://h:8000/metrics``) + ``/metrics`` for ``auto``; else the URL given."""
    if setting == "off":
        return None
    if setting == "auto":
        parts = urlsplit(endpoint)
        return f"{parts.scheme}://{parts.netloc}{METRICS_PATH}"
    return setting


def scrape_timeout_s(interval_s: float) -> float:
    """How long one scrape may take: the interval, within 1 to 10 s."""
    return min(10.0, max(1.0, interval_s))


class Scraped(msgspec.Struct, frozen=True, gc=False):
    """One scrape as the figures read it (its raw series go to the file
    only): when, how long it took, the mapped values, or why none; and the
    tick of the scrapers' grid it was sent on (the point's last scrape: the
    tick it stood in for), by which several pages' scrapes are matched."""

    t_ns: int
    at_ns: int
    latency_ns: int
    values: dict[str, float]
    error: str | None = None
    tick: int = 0


class ScrapeCosts(msgspec.Struct, frozen=True, gc=False):
    """What scraping cost (the self-audit's row)."""

    scrapes: int = 0
    failures: int = 0
    bytes: int = 0
    parse_cpu_ns: int = 0
    latency_ns_total: int = 0
    bad_lines: int = 0


class ServerMetricsRun(msgspec.Struct, frozen=True, gc=False):
    """A point's server metrics from one page: the URL, whether the server
    offers them (``note`` says why not), the family its names are of, every
    scrape in order, what they cost, the point's tracking start (engine
    clock), from which the summary reads, and the endpoints whose page it
    is (indices in ``--endpoints``)."""

    url: str
    offered: bool
    family: str = "other"
    scrapes: list[Scraped] = msgspec.field(default_factory=list)
    costs: ScrapeCosts = msgspec.field(default_factory=ScrapeCosts)
    tracking_start_ns: int = 0
    interval_s: float = 1.0
    note: str | None = None
    first_error: str | None = None
    endpoints: tuple[int, ...] = (0,)


class Probe(msgspec.Struct, frozen=True, gc=False):
    """The first ask, before the load: the status (None: no answer), how
    long it took, and the error or the page's first problem."""

    url: str
    status: int | None
    took_ms: float
    error: str | None = None

    @property
    def offered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def record(self) -> dict[str, Any]:
        """As ``server_calls.json`` keeps it."""
        return {
            "url": self.url,
            "method": "GET",
            "status": self.status,
            "ok": self.offered,
            "took_ms": self.took_ms,
            "message": self.error or "",
        }

    def reason(self) -> str:
        if self.status is None:
            return f"got no answer: {self.error}"
        return f"answered {self.status}"


class _Fetcher:
    """The scrapes' connection and its thread: everything here runs in the
    one worker thread, so the connection is never shared."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float,
        api_key: str | None,
        headers: Sequence[tuple[str, str]],
        ca_bundle: str | None,
        insecure: bool,
        endpoint: int = 0,
    ) -> None:
        self.url = url
        self.endpoint = endpoint
        parts = urlsplit(url)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.fields = side_fields(api_key, headers, accept="text/plain;version=0.0.4, */*;q=0.1")
        self.timeout_s = timeout_s
        self.ca_bundle = ca_bundle
        self.insecure = insecure
        self.connection: http.client.HTTPConnection | None = None

    def get(self) -> tuple[int | None, bytes, int, int, str | None]:
        """One GET: (status or None, body, sent at (engine clock), latency
        ns, error)."""
        sent = monotonic_ns()
        try:
            if self.connection is None:
                self.connection = side_connection(
                    self.url,
                    timeout_s=self.timeout_s,
                    ca_bundle=self.ca_bundle,
                    insecure=self.insecure,
                )
            self.connection.request("GET", self.target, headers=self.fields)
            response = self.connection.getresponse()
            body = response.read(_MAX_PAGE + 1)
            if response.will_close or len(body) > _MAX_PAGE:
                self.close()
            if len(body) > _MAX_PAGE:
                return None, b"", sent, monotonic_ns() - sent, "the page is over 8 MiB"
            return response.status, body, sent, monotonic_ns() - sent, None
        except (OSError, http.client.HTTPException) as exc:  # TimeoutError, SSLError too
            error = side_error(exc, self.timeout_s)
        self.close()
        return None, b"", sent, monotonic_ns() - sent, error

    def scrape(self, tick: int = 0) -> tuple[Scraped, bytes, int, int, int, str | None]:
        """One scrape read, sent on ``tick``: (its figures, its file line,
        bytes read, CPU ns spent reading it, bad lines, the server family)."""
        status, body, sent, latency, error = self.get()
        at = time.time_ns() - (monotonic_ns() - sent)
        cpu = time.thread_time_ns()
        line: dict[str, Any] = {
            "t_ns": sent,
            "at": at,
            "latency_ms": round(latency / 1e6, 3),
            "endpoint": self.endpoint,
            "url": self.url,
            "tick": tick,
        }
        values: dict[str, float] = {}
        bad = 0
        family = None
        if error is None and status is not None and not 200 <= status < 300:
            error = f"answered {status}"
        if error is None:
            try:
                page = parse_page(body)
            except PrometheusError as exc:
                error = str(exc)
            else:
                values = map_page(page)
                family = family_of(page)
                bad = page.bad_lines
                line["values"] = values
                line["raw"] = {series_key(s): _json_number(s.value) for s in page.samples}
                if page.bad_lines:
                    line["bad_lines"] = page.bad_lines
                    line["first_bad_line"] = page.first_error
        if error is not None:
            line["error"] = error
        encoded = _encoder.encode(line) + b"\n"
        cpu = time.thread_time_ns() - cpu
        scraped = Scraped(sent, at, latency, values, error, tick)
        return scraped, encoded, len(body), cpu, bad, family

    def close(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(Exception):
                self.connection.close()
            self.connection = None


def _json_number(value: float) -> float | str:
    """JSON has no NaN or infinities: those are kept as Prometheus writes them."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


async def probe_server_metrics(
    url: str,
    *,
    api_key: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 10.0,
    ca_bundle: str | None = None,
    insecure: bool = False,
) -> Probe:
    """Asks ``url`` once, before the load (module docstring)."""
    fetcher = _Fetcher(
        url,
        timeout_s=timeout_s,
        api_key=api_key,
        headers=headers,
        ca_bundle=ca_bundle,
        insecure=insecure,
    )
    try:
        status, _, _, latency, error = await asyncio.to_thread(fetcher.get)
    finally:
        fetcher.close()
    return Probe(url, status, round(latency / 1e6, 3), error)


class Scraper:
    """Scrapes ``url`` on every tick of a grid of ``interval_s`` while it
    runs (``async with``), each scrape's line written through ``write``
    (the run folder's ``server_metrics.jsonl``; None: no folder);
    :meth:`result` is the point's :class:`ServerMetricsRun`.

    ``origin``: the grid's start on the event loop's clock (``loop.time()``;
    None: when it starts), shared by the scrapers of several pages so that
    theirs go out together.  A scrape that outlasts its tick skips the
    ticks it ran over (one scrape at a time, never piling up).
    ``endpoints``: the indices in ``--endpoints`` of the replicas whose
    page it is (the first names the file's lines)."""

    def __init__(
        self,
        url: str,
        *,
        interval_s: float,
        write: Callable[[bytes], object] | None = None,
        api_key: str | None = None,
        headers: Sequence[tuple[str, str]] = (),
        ca_bundle: str | None = None,
        insecure: bool = False,
        endpoints: Sequence[int] = (0,),
        origin: float | None = None,
    ) -> None:
        self.url = url
        self.interval_s = interval_s
        self.endpoints = tuple(endpoints)
        self._origin = origin
        self._write = write
        self._fetcher = _Fetcher(
            url,
            timeout_s=scrape_timeout_s(interval_s),
            api_key=api_key,
            headers=headers,
            ca_bundle=ca_bundle,
            insecure=insecure,
            endpoint=self.endpoints[0],
        )
        # One thread: one scrape at a time, the connection never shared.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlpe-metrics")
        self._scrapes: list[Scraped] = []
        self._families: dict[str, int] = {}
        self._costs = [0, 0, 0, 0, 0, 0]  # scrapes, failures, bytes, cpu, latency, bad lines
        self._first_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.tracking_start_ns = 0

    async def __aenter__(self) -> Scraper:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Ends the scraping: a last scrape where the one before answered
        (a scrape in flight is awaited, within its timeout); idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            await task
        finally:
            self._pool.submit(self._fetcher.close)
            self._pool.shutdown(wait=False)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.interval_s
        origin = loop.time() if self._origin is None else self._origin
        tick = max(0, math.floor((loop.time() - origin) / interval))  # the first: at once
        while True:
            await self._scrape_once(loop, tick)
            if self._stop.is_set():
                return
            # the next tick still ahead: a scrape that ran over skips ticks
            tick = max(tick + 1, math.ceil((loop.time() - origin) / interval - 1e-9))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stop.wait(), max(0.0, origin + tick * interval - loop.time())
                )
            if self._stop.is_set():
                if self._scrapes and self._scrapes[-1].error is None:
                    # the point's end, for the counters' deltas, in the tick it stands for
                    await self._scrape_once(loop, tick)
                return

    async def _scrape_once(self, loop: asyncio.AbstractEventLoop, tick: int) -> None:
        scraped, line, size, cpu, bad, family = await loop.run_in_executor(
            self._pool, self._fetcher.scrape, tick
        )
        self._scrapes.append(scraped)
        costs = self._costs
        costs[0] += 1
        costs[1] += scraped.error is not None
        costs[2] += size
        costs[3] += cpu
        costs[4] += scraped.latency_ns
        costs[5] += bad
        if scraped.error is not None and self._first_error is None:
            self._first_error = scraped.error
        if family is not None:
            self._families[family] = self._families.get(family, 0) + 1
        if self._write is not None:
            self._write(line)

    def result(self) -> ServerMetricsRun:
        """What was scraped so far."""
        family = max(self._families, key=self._families.__getitem__) if self._families else "other"
        return ServerMetricsRun(
            self.url,
            True,
            family,
            list(self._scrapes),
            ScrapeCosts(*self._costs),
            self.tracking_start_ns,
            self.interval_s,
            first_error=self._first_error,
            endpoints=self.endpoints,
        )
