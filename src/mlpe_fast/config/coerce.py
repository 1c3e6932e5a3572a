"""Value converters: each takes a :class:`~.given.Given` (the value and
where it came from) and returns the setting's value, or raises
:class:`~mlpe_fast.errors.UsageError` with one line naming ``where`` and
the value.

A flag's value is a string, a YAML value whatever the file holds: every
converter takes both (``"16"`` and ``16``; ``"true"`` and ``true``).
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..engine.rx_sched import MAX_PRIORITY, allowed_cpus, cpu_list
from ..errors import UsageError
from . import choices
from .benchmark import BENCHMARK_MODELS
from .given import Converter, Given
from .slo import Slo, parse_slo

__all__ = (
    "any_integer",
    "boolean",
    "ca_bundle",
    "choice",
    "concurrencies",
    "duration",
    "engines",
    "integer",
    "kind_of",
    "mapping",
    "max_connections",
    "mlperf_model",
    "number",
    "one_of",
    "path",
    "positive_integer",
    "positive_number",
    "receive_cpus",
    "receive_priority",
    "seed",
    "short",
    "streaming",
    "string",
)


def short(value: object) -> str:
    """``value`` for a message: its repr, cut at about 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:56] + "...'"


def kind_of(value: object) -> str:
    """What ``value`` is, in words ("a list", "a mapping"), for a message."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "nothing"
    return type(value).__name__


def integer(given: Given, minimum: int | None = None) -> int:
    """An integer (``"16"``, ``16`` or ``16.0``; never a boolean) of at least ``minimum``."""
    value, where = given
    number_: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number_ = value
    elif (isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value)) or (
        isinstance(value, float) and value.is_integer()
    ):
        number_ = int(value)
    if number_ is None or (minimum is not None and number_ < minimum):
        what = {None: "an integer", 0: "an integer >= 0", 1: "a positive integer"}.get(
            minimum, f"an integer >= {minimum}"
        )
        raise UsageError(f"{where}: expected {what}, got {short(value)}")
    return number_


def any_integer(given: Given) -> int:
    return integer(given)


def positive_integer(given: Given) -> int:
    return integer(given, minimum=1)


def seed(given: Given) -> int:
    """An RNG seed: an integer >= 0 (spec §2.5 seeds are unsigned)."""
    return integer(given, minimum=0)


def number(given: Given, positive: bool = False) -> float:
    """A finite number (``"2.5"`` or ``2.5``), above 0 if ``positive``."""
    value, where = given
    found: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        found = float(value)
    elif isinstance(value, str):
        try:
            found = float(value)
        except ValueError:
            found = None
    if found is None or not math.isfinite(found) or (positive and found <= 0):
        what = "a positive number" if positive else "a number"
        raise UsageError(f"{where}: expected {what}, got {short(value)}")
    return found


def positive_number(given: Given) -> float:
    return number(given, positive=True)


_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*")
# A bare number is milliseconds, the reference's unit (min_duration_ms).
_UNIT_S = {"ms": 1e-3, None: 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(given: Given) -> float | None:
    """Milliseconds (the reference's unit) or a suffixed string -> seconds;
    0 means "not set", as the reference's 0 ms."""
    value, where = given
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            seconds = float(value) * 1e-3
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value)):
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds is None:
        raise UsageError(
            f"{where}: expected a duration in ms or with a unit (600s, 10m, 1h), got {short(value)}"
        )
    return seconds or None


def boolean(given: Given) -> bool:
    value, where = given
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "on", "yes", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "off", "no", "0"):
        return False
    raise UsageError(f"{where}: expected true or false, got {short(value)}")


def string(given: Given) -> str:
    """A string, stripped."""
    value, where = given
    if not isinstance(value, str):
        raise UsageError(f"{where}: expected a string, got {short(value)}")
    return value.strip()


def path(given: Given) -> str:
    """A file or folder name, stripped: never empty (``--report-dir "$OUT"``
    with ``OUT`` unset would otherwise write no run folder, silently)."""
    value = string(given)
    if not value:
        raise UsageError(f"{given[1]}: expected a path, got an empty string")
    return value


def mapping(given: Given) -> dict[str, Any]:
    value, where = given
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a mapping, got {short(value)}")
    return value


def choice(
    given: Given,
    allowed: Mapping[str, Any],
    unsupported: Mapping[str, str],
    shown: Sequence[str] | None = None,
) -> Any:
    """One of ``allowed``'s spellings (any case), as the value it means;
    one of ``unsupported`` says so; ``shown`` (default: every spelling) is
    what the message offers."""
    value, where = given
    key = value.strip().lower() if isinstance(value, str) else value
    if isinstance(key, str) and key in allowed:
        return allowed[key]
    if isinstance(key, str) and key in unsupported:
        raise UsageError(f"{where}: {unsupported[key]} are not supported by mlpe-fast")
    names = ", ".join(allowed if shown is None else shown)
    raise UsageError(f"{where}: {short(value)} is not one of {names}")


def one_of(
    allowed: Mapping[str, Any],
    unsupported: Mapping[str, str] | None = None,
    shown: Sequence[str] | None = None,
) -> Converter:
    """A converter for a setting that takes one of ``allowed``'s names (:func:`choice`)."""

    def convert(given: Given) -> Any:
        return choice(given, allowed, unsupported or {}, shown)

    return convert


def harmony(given: Given) -> choices.HarmonyMode:
    """auto, on or off (a YAML boolean is on or off)."""
    if isinstance(given.value, bool):  # YAML 1.1 reads a bare `on`/`off` as a boolean
        return "on" if given.value else "off"
    mode: choices.HarmonyMode = choice(given, choices.HARMONY_MODES, {})
    return mode


def slo(given: Given) -> Slo:
    """Latency bounds in ms: ``ttft:500 tpot:50`` (the flag's words) or a
    YAML mapping ``{ttft: 500, tpot: 50}`` (``metrics/goodput.py``)."""
    value, where = given
    words = [value] if isinstance(value, str) else value
    if not isinstance(words, (list, tuple, dict)):
        raise UsageError(f"{where}: expected METRIC:MS bounds (e.g. ttft:500), got {short(value)}")
    try:
        return parse_slo(words)
    except ValueError as error:
        raise UsageError(f"{where}: {error}") from None


def iso_date(given: Given) -> str:
    """A calendar date, ``YYYY-MM-DD``."""
    value, where = given
    try:
        return datetime.date.fromisoformat(str(value).strip()).isoformat()
    except ValueError:
        raise UsageError(f"{where}: expected a date as YYYY-MM-DD, got {short(value)}") from None


def streaming(given: Given) -> choices.Streaming:
    """auto, on or off."""
    if isinstance(given.value, bool):  # YAML 1.1 reads a bare `on`/`off` as a boolean
        return "on" if given.value else "off"
    mode: choices.Streaming = choice(given, choices.STREAMING, {})
    return mode


def _one_or_list(given: Given, one: Converter, what: str) -> Any:
    """``one(given)``, or for a list (``a,b,c`` or a YAML list) the sorted
    tuple of its unique items, each read by ``one``."""
    value, where = given
    if isinstance(value, list):
        items: list[Any] = value
    elif isinstance(value, str) and "," in value:
        items = value.split(",")
    else:
        return one(given)
    if not items:
        raise UsageError(f"{where}: expected {what} or a list of them")
    return tuple(sorted({one(Given(item, where)) for item in items}))


def concurrencies(given: Given) -> int | tuple[int, ...]:
    """One concurrency (an int), or a curve's: a list (``1,4,16`` or a YAML
    list) as a sorted tuple of unique concurrencies."""
    found: int | tuple[int, ...] = _one_or_list(given, positive_integer, "a positive integer")
    return found


def rates(given: Given) -> float | tuple[float, ...]:
    """One Poisson rate (a float), or a request-rate curve's: a list
    (``2,4,8`` or a YAML list) as a sorted tuple of unique positive rates."""
    found: float | tuple[float, ...] = _one_or_list(given, positive_number, "a positive number")
    return found


def max_connections(given: Given) -> int | None:
    """A connection cap; the reference's -1 (automatic) means none."""
    if integer(given) == -1:
        return None
    return positive_integer(given)


def warmup_connections(given: Given) -> int | None:
    """Connections to open before a point's first request: ``auto`` or -1
    (the reference's automatic: as many as the point uses at once, None),
    0 (none: each setup inside its first request's figures) or N."""
    if isinstance(given.value, str) and given.value.strip().lower() == "auto":
        return None
    if integer(given) == -1:
        return None
    return integer(given, minimum=0)


def engines(given: Given) -> int:
    """``N`` engine processes, or ``auto`` (0: one per usable core)."""
    value, where = given
    if isinstance(value, str) and value.strip().lower() == "auto":
        return 0
    try:
        return positive_integer(given)
    except UsageError:
        raise UsageError(
            f"{where}: expected a positive integer or auto, got {short(value)}"
        ) from None


def receive_priority(given: Given) -> int | None:
    """The receive thread's real-time priority: ``auto`` (None: SCHED_FIFO
    at ``rx_sched.AUTO_PRIORITY`` where permitted), ``off`` (0; YAML's bare
    ``off`` reads as false) or N from 1 to 99 (SCHED_FIFO's range)."""
    value, where = given
    if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return 0
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    try:
        priority = integer(given, minimum=1)
    except UsageError:
        priority = 0
    if not 1 <= priority <= MAX_PRIORITY:
        raise UsageError(
            f"{where}: expected auto, off or a priority from 1 to {MAX_PRIORITY}, "
            f"got {short(value)}"
        )
    return priority


def receive_cpus(given: Given) -> tuple[int, ...]:
    """The CPUs the receive thread is pinned to: ``N`` or ``N,M,...`` (a YAML
    list too; an empty one is no pin), each one this process may run on (its affinity mask: a CPU
    outside it could never run the thread)."""
    value, where = given
    if isinstance(value, (list, tuple)) and not value:
        return ()  # an empty list: no pin (the default)
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    cpus = tuple(sorted({integer(Given(item, where), minimum=0) for item in items}))
    allowed = allowed_cpus()
    if allowed is None:
        raise UsageError(f"{where}: pinning the receive thread is not supported on this system")
    outside = [cpu for cpu in cpus if cpu not in allowed]
    if outside:
        raise UsageError(
            f"{where}: CPU {cpu_list(outside)} is not one this process may run on "
            f"(allowed: {cpu_list(sorted(allowed))})"
        )
    return cpus


def ca_bundle(given: Given) -> str:
    """A CA bundle: a readable file, checked now rather than at the first connect."""
    path = string(given)
    if not Path(path).is_file():
        raise UsageError(f"{given.where}: file not found: {path}")
    return path


def mlperf_model(given: Given) -> str:
    """``--mlperf-model``: one of :data:`~.benchmark.BENCHMARK_MODELS`, so
    that a typo cannot turn the accuracy gate off without a word."""
    name = string(given)
    if name not in BENCHMARK_MODELS:
        raise UsageError(
            f"{given.where} {name!r}: not an MLPerf Endpoints model; "
            f"one of {', '.join(BENCHMARK_MODELS)}"
        )
    return name
