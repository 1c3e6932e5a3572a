"""The terminal table printed at the end of a run.

Plain text, aligned, standard library only.  It shows, for one point
(:class:`mlpe_fast.metrics.stats.PointStats`, definitions in spec §1.1-1.3):
requests done and failed with the most frequent error classes and one
example message, TTFT / TPOT / latency percentiles in ms, system output
tokens/s and per-user tokens/s (``1000 / TPOT p90 ms``), and the client's
self-audit (architecture.md, "What a timestamp means"): event-loop lag,
issue lateness and client CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..metrics.stats import Distribution, PointStats

__all__ = ("AUDIT_ROWS", "render")

#: Self-audit rows: label, mapping keys (the fields of
#: :class:`mlpe_fast.engine.audit.Audit`, or the listed aliases), unit.
AUDIT_ROWS: tuple[tuple[str, tuple[tuple[str, ...], ...], str], ...] = (
    (
        "loop lag p50 / p99 / max",
        (("loop_lag_p50_ms",), ("loop_lag_p99_ms",), ("loop_lag_max_ms",)),
        "ms",
    ),
    (
        "issue lateness p50 / p99",
        (
            ("issue_late_p50_ms", "issue_lateness_p50_ms"),
            ("issue_late_p99_ms", "issue_lateness_p99_ms"),
        ),
        "ms",
    ),
    ("client CPU", (("cpu_s",),), "s"),
    ("client CPU per request", (("cpu_us_per_request",),), "µs"),
    ("client CPU per event", (("cpu_us_per_event",),), "µs"),
)

_TOP_ERRORS = 3
_MESSAGE_WIDTH = 100
_NA = "n/a"


def _int(n: int) -> str:
    return f"{n:,}"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3f}"


def _rows(rows: Sequence[tuple[str, str]], indent: str = "  ") -> list[str]:
    width = max((len(label) for label, _ in rows), default=0)
    return [f"{indent}{label:<{width}}   {value}".rstrip() for label, value in rows]


def _requests(stats: PointStats) -> list[tuple[str, str]]:
    text = (
        f"{_int(stats.completed)} done, {_int(stats.failed)} failed of {_int(stats.issued)} issued"
    )
    if stats.duration_ns > 0:
        text += f" in {stats.duration_s:,.3f} s"
        if stats.qps is not None:
            text += f" ({stats.qps:,.1f} req/s)"
    rows = [("requests", text)]
    if stats.errors:
        top = list(stats.errors.items())[:_TOP_ERRORS]
        listed = ", ".join(f"{name} {_int(count)}" for name, count in top)
        more = len(stats.errors) - len(top)
        if more > 0:
            listed += f", {more} more class{'es' if more > 1 else ''}"
        rows.append(("failures", listed))
        name = top[0][0]
        message = " ".join(stats.error_examples.get(name, "").split())
        if len(message) > _MESSAGE_WIDTH:
            message = message[: _MESSAGE_WIDTH - 3] + "..."
        rows.append(("", f"e.g. {name}: {message}" if message else f"e.g. {name}"))
    if stats.finish_reasons:
        rows.append(
            (
                "finish reasons",
                ", ".join(f"{k} {_int(v)}" for k, v in stats.finish_reasons.items()),
            )
        )
    if stats.chunk_errors:
        rows.append(("undecodable events", _int(stats.chunk_errors)))
    return rows


def _share(share: Mapping[str, object]) -> str:
    return (
        f"{share.get('url')}: {share.get('completed', 0):,} done, "
        f"{share.get('failed', 0):,} failed of {share.get('issued', 0):,}"
    )


def _latency_table(stats: PointStats) -> list[str]:
    series: list[tuple[str, Distribution | None, str]] = [
        ("TTFT", stats.ttft, "no streamed response" if stats.streamed == 0 else "no first token"),
        ("TPOT", stats.tpot, "no token counts" if stats.osl_total is None else "no valid sample"),
        ("latency", stats.latency, "no completed request"),
    ]
    header = ("ms", "p50", "p90", "p99", "n")
    cells: list[tuple[str, ...]] = [header]
    for name, dist, why in series:
        if dist is None:
            cells.append((name, f"{_NA} ({why})"))
        else:
            cells.append((name, _ms(dist.p50), _ms(dist.p90), _ms(dist.p99), _int(dist.count)))
    full = [row for row in cells if len(row) == len(header)]
    widths = [max(len(row[c]) for row in full) for c in range(len(header))]
    widths[0] = max(len(row[0]) for row in cells)
    lines: list[str] = []
    for row in cells:
        if len(row) != len(header):
            lines.append(f"  {row[0]:<{widths[0]}}   {row[1]}")
            continue
        out = [row[0].ljust(widths[0])]
        out += [cell.rjust(widths[c]) for c, cell in enumerate(row) if c]
        lines.append("  " + "   ".join(out))
    if len(full) == 1:  # only the header: no series has data
        lines.pop(0)
    return lines


def _throughput(stats: PointStats) -> list[tuple[str, str]]:
    # (value, explanation) per row; values right-aligned on one column.
    if stats.system_tps is not None and stats.osl_total is not None:
        system = (
            f"{stats.system_tps:,.1f}",
            f"({_int(stats.osl_total)} tokens / {stats.duration_s:,.3f} s)"
            + ("" if stats.tokens_complete else " [token counts incomplete]"),
        )
    elif stats.osl_total is None:
        system = (_NA, "(no tokenizer)")
    else:
        system = (_NA, "(empty window)")
    if stats.tps_per_user is not None and stats.tpot is not None:
        per_user = (f"{stats.tps_per_user:,.1f}", f"(1000 / TPOT p90 {_ms(stats.tpot.p90)} ms)")
    else:
        per_user = (_NA, "(no TPOT)")
    width = max(len(system[0]), len(per_user[0]))
    return [
        ("system output tokens/s", f"{system[0]:>{width}}  {system[1]}"),
        ("per-user tokens/s", f"{per_user[0]:>{width}}  {per_user[1]}"),
    ]


def _lookup(audit: Mapping[str, object], names: tuple[str, ...]) -> object:
    for name in names:
        if name in audit:
            return audit[name]
    return None


def _audit(audit: Mapping[str, object]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    used: set[str] = set()
    for label, keys, unit in AUDIT_ROWS:
        values = [_lookup(audit, names) for names in keys]
        used.update(name for names in keys for name in names)
        if all(v is None for v in values):
            continue
        shown = " / ".join(
            _number(v) if isinstance(v, int | float) else (_NA if v is None else str(v))
            for v in values
        )
        rows.append((label, f"{shown} {unit}"))
    for key, value in audit.items():
        if key in used:
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            text = _number(value)
        else:
            text = str(value)
        rows.append((key.replace("_", " "), text))
    return rows


def render(
    stats: PointStats,
    audit: Mapping[str, object] | None = None,
    *,
    title: str | None = None,
    warnings: Sequence[str] = (),
    endpoints: Sequence[Mapping[str, object]] = (),
    latency_detail: Sequence[str] = (),
) -> str:
    """The final table of a point, as text ending with a newline.

    ``audit`` is the self-audit mapping: the numeric fields of
    :class:`mlpe_fast.engine.audit.Audit` (``loop_lag_p50_ms``,
    ``loop_lag_p99_ms``, ``loop_lag_max_ms``, ``issue_late_p50_ms``,
    ``issue_late_p99_ms``, ``cpu_s``, ``cpu_us_per_request``,
    ``cpu_us_per_event``, ...) are laid out as in :data:`AUDIT_ROWS`; any
    other entry is shown as ``key value`` (a string value verbatim, so
    ``Audit.as_rows()`` can be passed as is).  ``warnings`` (about the
    answers, ``metrics/answers.py``) follow the request counts, one line
    each; ``endpoints`` (several replicas) gives each endpoint's share, as
    ``{"url", "issued", "completed", "failed"}``; ``latency_detail``: the
    lines of the latency detail block (``report/latency_detail.py``), shown
    after the latency table.
    """
    lines = [f"mlpe-fast results{': ' + title if title else ''}"]
    rows = _requests(stats)
    rows += [("endpoint" if i == 0 else "", _share(share)) for i, share in enumerate(endpoints)]
    rows += [("WARNING" if i == 0 else "", text) for i, text in enumerate(warnings)]
    lines += _rows(rows)
    lines.append("")
    lines += _latency_table(stats)
    if latency_detail:
        lines += ["", *latency_detail]
    lines.append("")
    lines += _rows(_throughput(stats))
    if audit:
        lines.append("")
        lines.append("self-audit")
        lines += _rows(_audit(audit))
    return "\n".join(lines) + "\n"
