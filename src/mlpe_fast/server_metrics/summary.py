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
"""

from __future__ import annotations

from typing import Any

from .scraper import Scraped, ServerMetricsRun

__all__ = ("audit_figures", "server_metrics_line", "server_metrics_summary")


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


def server_metrics_line(block: dict[str, Any]) -> str:
    """The table's and ``report.txt``'s line (and a second for failures)."""
    if not block["offered"]:
        return f"server metrics: not offered ({block['note']})\n"
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


def audit_figures(run: ServerMetricsRun | None) -> dict[str, Any]:
    """The self-audit's server-metrics fields (:class:`~..engine.audit.Audit`)."""
    if run is None or not run.costs.scrapes:
        return {}
    costs = run.costs
    return {
        "metrics_scrapes": costs.scrapes,
        "metrics_scrape_failures": costs.failures,
        "metrics_bytes": costs.bytes,
        "metrics_parse_cpu_ms": round(costs.parse_cpu_ns / 1e6, 3),
        "metrics_scrape_ms_mean": round(costs.latency_ns_total / 1e6 / costs.scrapes, 3),
    }
