"""A point's server metrics summed up, beside the client's figures: the
``mlpe_fast.server_metrics`` block of ``result_summary.json`` (mlpe-fast's
own key, not an official one), the line of the table and ``report.txt``,
and the self-audit's figures of what scraping cost.  Pure functions of a
:class:`~.scraper.ServerMetricsRun`.

Over the measured window: the scrapes sent from the point's performance
tracking start (spec §1.4; the warmup's are in the file, not in the
figures) to its end.  Gauges: the mean and the largest reading
(``running``, ``waiting``), the largest KV-cache share.  Counters: the
difference between the last scrape and the last one at or before the
window's start (the first in it when none was before): the prefix-cache hit
rate is hits / queries over the point, the speculative acceptance rate
accepted / draft tokens, preemptions a count.  A server that gives only a
rate (SGLang's ``cache_hit_rate``, ``spec_accept_length``) has its mean
over the window instead.  A counter that went down (the server restarted)
gives no figure.

Several replicas' pages (``--endpoints A B``: a page per origin, or a URL
given for each) make a block of their totals, under the one page's keys,
beside ``replicas``, each replica's own block (as one page's, with the
``endpoints`` whose page it is).  The totals are of the replicas read (the
pages offered, ``replicas_read`` of ``replica_count``):

* ``running``, ``waiting``: the series of the sum of the replicas'
  readings on each tick of the scrapers' grid that every replica read
  answered in the window (``rounds_in_window`` of them; the scrapes of a
  tick go out together, ``scraper.py``), its mean and its largest value.
  Not the sum of the replicas' maxima, which may come at different
  moments and add up to more than was ever running at once.  A request
  that ends on one replica and starts on another between two scrapes of
  a tick is read on both: a tick's sum may exceed the point's concurrency
  by the requests that moved in those few milliseconds.
* ``kv_cache_usage_max``: the largest of the replicas' (a share of each
  replica's own cache: a sum would mean nothing).
* ``prefix_cache_hit_rate`` and ``spec_acceptance_rate``: from the summed
  counter deltas (hits over queries, accepted over drafted tokens of all
  replicas), so a replica weighs by its tokens; ``prefix_cache_queries``
  and ``preemptions`` summed.  A total needs every replica's part: with
  one replica's counter missing (a server that says only a rate, a
  counter that fell) there is none, and that replica's block has its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .scraper import Scraped, ServerMetricsRun

__all__ = (
    "audit_figures",
    "replicas_summary",
    "server_metrics_line",
    "server_metrics_summary",
)


def _window(run: ServerMetricsRun) -> tuple[list[Scraped], Scraped | None]:
    """The answered scrapes inside the window, and the counters' baseline."""
    answered = [s for s in run.scrapes if s.error is None]
    inside = [s for s in answered if s.t_ns >= run.tracking_start_ns]
    before = [s for s in answered if s.t_ns < run.tracking_start_ns]
    base = before[-1] if before else (inside[0] if inside else None)
    return inside, base


def _gauge(scrapes: list[Scraped], name: str) -> dict[str, float] | None:
    readings = [s.values[name] for s in scrapes if name in s.values]
    if not readings:
        return None
    return {"mean": round(sum(readings) / len(readings), 4), "max": max(readings)}


def _delta(base: Scraped | None, last: Scraped | None, name: str) -> float | None:
    if base is None or last is None or name not in base.values or name not in last.values:
        return None
    change = last.values[name] - base.values[name]
    return None if change < 0 else change


def _ratio(hits: float | None, total: float | None) -> float | None:
    if hits is None or total is None or total <= 0:
        return None
    return round(hits / total, 6)


def server_metrics_summary(run: ServerMetricsRun) -> dict[str, Any]:
    """The summary's block (module docstring)."""
    costs = run.costs
    block: dict[str, Any] = {
        "url": run.url,
        "offered": run.offered,
        "interval_s": run.interval_s,
        "scrapes": costs.scrapes,
        "failures": costs.failures,
    }
    if not run.offered:
        block["note"] = run.note
        return block
    inside, base = _window(run)
    last = inside[-1] if inside else None
    block["family"] = run.family
    block["scrapes_in_window"] = len(inside)
    if run.first_error is not None:
        block["first_error"] = run.first_error
    block["running"] = _gauge(inside, "running")
    block["waiting"] = _gauge(inside, "waiting")
    kv = _gauge(inside, "kv_cache_usage")
    block["kv_cache_usage_max"] = None if kv is None else kv["max"]
    queries = _delta(base, last, "prefix_cache_queries")
    hits = _delta(base, last, "prefix_cache_hits")
    rate = _ratio(hits, queries)
    if rate is None and (gauge := _gauge(inside, "prefix_cache_hit_rate")) is not None:
        rate = gauge["mean"]
    block["prefix_cache_hit_rate"] = rate
    block["prefix_cache_queries"] = queries
    drafted = _delta(base, last, "spec_draft_tokens")
    accepted = _delta(base, last, "spec_accepted_tokens")
    acceptance = _ratio(accepted, drafted)
    if acceptance is None and (gauge := _gauge(inside, "spec_acceptance_rate")) is not None:
        acceptance = gauge["mean"]
    block["spec_acceptance_rate"] = acceptance
    length = _gauge(inside, "spec_accept_length")
    block["spec_accept_length_mean"] = None if length is None else length["mean"]
    block["preemptions"] = _delta(base, last, "preemptions")
    return block


def replicas_summary(runs: Sequence[ServerMetricsRun]) -> dict[str, Any]:
    """The summary's block of a point's pages, in ``--endpoints`` order: one
    page's block as :func:`server_metrics_summary`'s; several pages' totals
    and each replica's block (module docstring)."""
    if len(runs) == 1:
        return server_metrics_summary(runs[0])
    blocks = [{**server_metrics_summary(run), "endpoints": list(run.endpoints)} for run in runs]
    read = [run for run in runs if run.offered]
    block: dict[str, Any] = {
        "replica_count": len(runs),
        "replicas_read": len(read),
        "offered": bool(read),
        "interval_s": runs[0].interval_s,
        "scrapes": sum(run.costs.scrapes for run in runs),
        "failures": sum(run.costs.failures for run in runs),
    }
    if not read:
        block["note"] = f"no page of the {len(runs)} replicas is offered"
        block["replicas"] = blocks
        return block
    families = {run.family for run in read}
    block["family"] = families.pop() if len(families) == 1 else "mixed"
    for run, own in zip(runs, blocks, strict=True):
        if own.get("first_error"):
            block["first_error"] = f"endpoint {run.endpoints[0]}: {own['first_error']}"
            break
    windows = [_window(run) for run in read]
    ticks = _common_ticks([inside for inside, _ in windows])
    block["rounds_in_window"] = len(ticks)
    for name in ("running", "waiting"):
        block[name] = _summed_gauge([inside for inside, _ in windows], ticks, name)
    read_blocks = [own for run, own in zip(runs, blocks, strict=True) if run.offered]
    kv = [own["kv_cache_usage_max"] for own in read_blocks]
    block["kv_cache_usage_max"] = max(kv) if None not in kv else None
    deltas = {
        name: _summed_delta(windows, name)
        for name in (
            "prefix_cache_queries",
            "prefix_cache_hits",
            "spec_draft_tokens",
            "spec_accepted_tokens",
            "preemptions",
        )
    }
    block["prefix_cache_hit_rate"] = _ratio(
        deltas["prefix_cache_hits"], deltas["prefix_cache_queries"]
    )
    block["prefix_cache_queries"] = deltas["prefix_cache_queries"]
    block["spec_acceptance_rate"] = _ratio(
        deltas["spec_accepted_tokens"], deltas["spec_draft_tokens"]
    )
    block["spec_accept_length_mean"] = None  # a mean per step: each replica's own
    block["preemptions"] = deltas["preemptions"]
    block["replicas"] = blocks
    return block


def _common_ticks(insides: Sequence[list[Scraped]]) -> list[int]:
    """The ticks every page answered on inside the window, in order."""
    common = set.intersection(*({s.tick for s in inside} for inside in insides))
    return sorted(common)


def _summed_gauge(
    insides: Sequence[list[Scraped]], ticks: Sequence[int], name: str
) -> dict[str, float] | None:
    """The mean and largest of the pages' summed readings of ``name`` on
    ``ticks`` (a tick where a page lacks the name is left out)."""
    by_tick = [{s.tick: s.values for s in inside} for inside in insides]
    sums = []
    for tick in ticks:
        readings = [values[tick].get(name) for values in by_tick]
        if None not in readings:
            sums.append(sum(r for r in readings if r is not None))
    if not sums:
        return None
    return {"mean": round(sum(sums) / len(sums), 4), "max": max(sums)}


def _summed_delta(
    windows: Sequence[tuple[list[Scraped], Scraped | None]], name: str
) -> float | None:
    """The pages' counter deltas added up; None unless every page has one."""
    total = 0.0
    for inside, base in windows:
        change = _delta(base, inside[-1] if inside else None, name)
        if change is None:
            return None
        total += change
    return total


def _parts(block: dict[str, Any]) -> list[str]:
    """A block's figures as the line shows them."""
    parts = []
    for name in ("running", "waiting"):
        gauge = block.get(name)
        if gauge is not None:
            parts.append(f"{name} mean {gauge['mean']:,.1f} max {gauge['max']:,.0f}")
    if block.get("kv_cache_usage_max") is not None:
        parts.append(f"KV cache max {block['kv_cache_usage_max'] * 100:.1f} %")
    if block.get("prefix_cache_hit_rate") is not None:
        parts.append(f"prefix cache hits {block['prefix_cache_hit_rate'] * 100:.1f} %")
    if block.get("spec_acceptance_rate") is not None:
        parts.append(f"spec acceptance {block['spec_acceptance_rate'] * 100:.1f} %")
    if block.get("spec_accept_length_mean") is not None:
        parts.append(f"spec accept length {block['spec_accept_length_mean']:.2f}")
    if block.get("preemptions") is not None:
        parts.append(f"preemptions {block['preemptions']:,.0f}")
    return parts


def server_metrics_line(block: dict[str, Any]) -> str:
    """The table's and ``report.txt``'s line (and a second for failures);
    several replicas': their totals' line, then a line for each replica."""
    if "replicas" in block:
        return _replicas_lines(block)
    if not block["offered"]:
        return f"server metrics: not offered ({block['note']})\n"
    parts = _parts(block)
    head = (
        f"server metrics ({block['url']}, {block.get('family', 'other')} names, "
        f"{block['scrapes']} scrapes every {block['interval_s']:g} s"
        + (f", {block['failures']} FAILED" if block["failures"] else "")
        + ")"
    )
    text = head + (": " + ", ".join(parts) if parts else ": none of the known names") + "\n"
    if block.get("first_error"):
        text += f"  first failure: {block['first_error']}\n"
    return text


def _replicas_lines(block: dict[str, Any]) -> str:
    count, read = block["replica_count"], block["replicas_read"]
    if not block["offered"]:
        text = f"server metrics: not offered by any of the {count} replicas\n"
    else:
        unread = f", {count - read} not offered" if read < count else ""
        head = (
            f"server metrics ({count} replicas{unread}, {block.get('family', 'other')} names, "
            f"{block['scrapes']} scrapes every {block['interval_s']:g} s"
            + (f", {block['failures']} FAILED" if block["failures"] else "")
            + ")"
        )
        parts = _parts(block)
        text = head + (": " + ", ".join(parts) if parts else ": no total") + "\n"
    for own in block["replicas"]:
        where = f"  endpoint {', '.join(map(str, own['endpoints']))} ({own['url']})"
        if not own["offered"]:
            text += f"{where}: not offered ({own['note']})\n"
            continue
        parts = _parts(own)
        failed = ""
        if own["failures"]:
            failed = f", {own['failures']} of {own['scrapes']} scrapes FAILED"
        text += where + ": " + (", ".join(parts) or "none of the known names") + failed + "\n"
    if block.get("first_error"):
        text += f"  first failure: {block['first_error']}\n"
    return text


def audit_figures(runs: Sequence[ServerMetricsRun] | None) -> dict[str, Any]:
    """The self-audit's server-metrics fields (:class:`~..engine.audit.Audit`),
    summed over the pages (the latency: the mean of all their scrapes)."""
    if not runs:
        return {}
    scrapes = sum(run.costs.scrapes for run in runs)
    if not scrapes:
        return {}
    latency = sum(run.costs.latency_ns_total for run in runs)
    return {
        "metrics_scrapes": scrapes,
        "metrics_scrape_failures": sum(run.costs.failures for run in runs),
        "metrics_bytes": sum(run.costs.bytes for run in runs),
        "metrics_parse_cpu_ms": round(sum(run.costs.parse_cpu_ns for run in runs) / 1e6, 3),
        "metrics_scrape_ms_mean": round(latency / 1e6 / scrapes, 3),
    }
