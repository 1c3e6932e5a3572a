"""A sans-IO reader of the Prometheus text exposition format, version
0.0.4: what an inference server's ``GET /metrics`` answers.

The format (prometheus.io, "Exposition formats"): one sample a line,
``name{label="value",...} value [timestamp]``; ``# HELP name text`` and
``# TYPE name counter|gauge|histogram|summary|untyped`` describe a family;
any other ``#`` line is a comment.  Label values escape ``\\``, ``"`` and
newline (``\\n``); HELP text escapes ``\\`` and newline.  A value is a Go
float (``NaN``, ``+Inf``, ``-Inf`` included), a timestamp an integer of
milliseconds since the epoch.  A histogram ``h`` is its samples
``h_bucket{le="..."}``, ``h_sum`` and ``h_count``; a summary's are
``s{quantile="..."}``, ``s_sum`` and ``s_count``
(:func:`family_name` maps a sample to its family).

Servers differ and pages are scraped beside a load, so a line that cannot
be read is skipped and counted (:attr:`Page.bad_lines`, the first one's
reason in :attr:`Page.first_error`), never a crash; a page with nothing
readable in it (not text, or not one sample and some bad lines) is one
:class:`PrometheusError` that says why.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import msgspec

__all__ = (
    "METRIC_TYPES",
    "Page",
    "PrometheusError",
    "Sample",
    "family_name",
    "parse_page",
    "series_key",
)

#: The family types a ``# TYPE`` line may give (0.0.4).
METRIC_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
# name, the text between the braces (greedy: a label value may hold "}",
# the value and timestamp never do), value, timestamp.
_SAMPLE = re.compile(
    rf"({_NAME})(?:[ \t]*\{{(.*)\}}[ \t]*|[ \t]+)([^ \t{{}}]+)(?:[ \t]+([^ \t]+))?[ \t]*"
)
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,|$)')
_NAME_ONLY = re.compile(_NAME)
_TIMESTAMP = re.compile(r"-?[0-9]+")
_LABEL_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_HELP_ESCAPES = {"\\\\": "\\", "\\n": "\n"}
_ESCAPE = re.compile(r"\\.")
# Go's strconv.ParseFloat spellings of the special values (case-insensitive).
_SPECIAL = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
_SPECIAL.update({"+infinity": math.inf, "infinity": math.inf, "-infinity": -math.inf})
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


class PrometheusError(ValueError):
    """A page with nothing readable in it; the message says why."""


class Sample(NamedTuple):
    """One sample line: the sample's name, its labels in the order given
    (values unescaped), its value and its timestamp (ms; None: none)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp_ms: int | None = None


class Page(msgspec.Struct, frozen=True, gc=False):
    """A page read: its samples in order, the families' types and help
    texts from ``# TYPE`` / ``# HELP``, and the lines skipped."""

    samples: list[Sample]
    types: dict[str, str]
    helps: dict[str, str]
    lines: int
    bad_lines: int = 0
    first_error: str | None = None


class _BadLine(Exception):
    pass


def parse_page(data: bytes | str) -> Page:
    """Reads a whole page (module docstring).

    Raises:
        PrometheusError: the page is not UTF-8 text, holds a NUL byte, or
            has bad lines and not one sample.
    """
    if isinstance(data, bytes):
        if b"\0" in data:
            raise PrometheusError("not a Prometheus text page: it holds a NUL byte")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PrometheusError(
                f"not a Prometheus text page: not UTF-8 (byte {error.start})"
            ) from None
    else:
        text = data
    samples: list[Sample] = []
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    bad = 0
    first_error: str | None = None
    number = 0
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line or line.isspace():
            continue
        try:
            if line.lstrip(" \t").startswith("#"):
                _comment(line.lstrip(" \t"), types, helps)
            else:
                samples.append(_sample(line))
        except _BadLine as why:
            bad += 1
            if first_error is None:
                first_error = f"line {number}: {why}: {_shown(line)}"
    if bad and not samples:
        raise PrometheusError(
            f"not a Prometheus text page: {bad} bad lines, the first {first_error}"
        )
    return Page(samples, types, helps, number, bad, first_error)


def family_name(name: str, types: dict[str, str]) -> str:
    """The family a sample belongs to: ``h`` for ``h_bucket`` when ``h`` is a
    histogram (``_sum``/``_count`` of a histogram or summary alike); else
    the sample's own name."""
    for kind, suffixes in _SUFFIXES.items():
        for suffix in suffixes:
            if name.endswith(suffix):
                base = name[: -len(suffix)]
                if types.get(base) == kind:
                    return base
    return name


def series_key(sample: Sample) -> str:
    """A sample's series as one string: ``name`` or ``name{a="x",b="y"}``
    (labels sorted, values escaped again), the raw series' key in
    ``server_metrics.jsonl``."""
    if not sample.labels:
        return sample.name
    inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(sample.labels))
    return f"{sample.name}{{{inner}}}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _comment(line: str, types: dict[str, str], helps: dict[str, str]) -> None:
    words = line[1:].lstrip(" \t").split(None, 2)
    if len(words) < 2 or words[0] not in ("HELP", "TYPE"):
        return  # a comment
    keyword, name = words[0], words[1]
    if _NAME_ONLY.fullmatch(name) is None:
        raise _BadLine(f"# {keyword} of a bad metric name {name!r}")
    rest = words[2].strip(" \t") if len(words) > 2 else ""
    if keyword == "TYPE":
        if rest not in METRIC_TYPES:
            raise _BadLine(f"unknown metric type {rest!r}")
        if name in types:
            raise _BadLine(f"a second # TYPE for {name}")
        types[name] = rest
    else:
        helps[name] = _ESCAPE.sub(lambda m: _HELP_ESCAPES.get(m.group(), m.group()), rest)


def _sample(line: str) -> Sample:
    match = _SAMPLE.fullmatch(line.lstrip(" \t"))
    if match is None:
        raise _BadLine("not NAME[{LABELS}] VALUE [TIMESTAMP]")
    name, inner, value_text, stamp_text = match.groups()
    labels = _labels(inner) if inner else ()
    value = _value(value_text)
    stamp = None
    if stamp_text is not None:
        if _TIMESTAMP.fullmatch(stamp_text) is None:
            raise _BadLine(f"bad timestamp {stamp_text!r}")
        stamp = int(stamp_text)
    return Sample(name, labels, value, stamp)


def _labels(inner: str) -> tuple[tuple[str, str], ...]:
    labels: list[tuple[str, str]] = []
    seen: set[str] = set()
    at, end = 0, len(inner)
    while at < end:
        match = _LABEL.match(inner, at)
        if match is None:
            if inner[at:].strip(" \t") == "":
                break  # a trailing comma's spaces
            raise _BadLine("bad labels")
        key, value, comma = match.groups()
        if "\\" in value:
            value = _unescape_label(value)
        if key in seen:
            raise _BadLine(f"label {key} given twice")
        seen.add(key)
        labels.append((key, value))
        at = match.end()
        if not comma:
            break
    return tuple(labels)


def _unescape_label(value: str) -> str:
    def one(match: re.Match[str]) -> str:
        escape = match.group()
        if escape not in _LABEL_ESCAPES:
            raise _BadLine(f"bad escape {escape!r} in a label value")
        return _LABEL_ESCAPES[escape]

    return _ESCAPE.sub(one, value)


def _value(text: str) -> float:
    special = _SPECIAL.get(text.lower())
    if special is not None:
        return special
    if "_" in text or text.lower().lstrip("+-").startswith(("n", "i")):
        raise _BadLine(f"bad value {text!r}")  # Python's float() reads these; Go's does not
    try:
        return float(text)
    except ValueError:
        raise _BadLine(f"bad value {text!r}") from None


def _shown(line: str) -> str:
    return repr(line if len(line) <= 80 else line[:77] + "...")
