"""What every request carries beyond its body's own fields, and what the
endpoint is asked before the load: ``--header NAME:VALUE`` (YAML
``mlpe_fast.headers``), ``--extra-body JSON`` (``mlpe_fast.extra_body``),
``--reset-prefix-cache vllm|sglang|PATH`` (``mlpe_fast.reset_prefix_cache``),
``--tokenizer-check auto|on|off`` (``mlpe_fast.tokenizer_check``) and what
is read beside it, ``--server-metrics auto|off|URL`` and
``--server-metrics-interval SECONDS`` (``mlpe_fast.server_metrics``,
``mlpe_fast.server_metrics_interval_s``; ``server_metrics/scraper.py``).

Headers go on every request of the run, the load's and the calls before it
(a gateway's key or routing field is needed by both); the fields the client
writes itself, or that would change how a message is framed, are refused,
and so is one named twice.  ``Accept`` and ``User-Agent`` replace the
client's own (``engine/framing.py``).

The extra body is merged into every request body after mlpe-fast's own
fields (``load/requests.py``).  The fields mlpe-fast must own are refused:
``model``, the prompt (``messages``/``prompt``), ``stream`` and
``stream_options`` (the usage chunk cross-checks the token counts), the
output cap (``max_tokens``/``max_completion_tokens``: the answers check and
a synthetic dataset's per-request lengths read ``--max-output-tokens``) and
``chat_template_kwargs`` (the ISL count renders the chat template with
them: set ``model_params.chat_template_kwargs``).  A sampling field that a
setting also gives (``model_params.temperature``, say) is refused by a rule
(``config/rules.py``): one value, said once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from ..engine.client import REDACTED
from ..errors import UsageError
from .coerce import choice, kind_of, number, short
from .given import Given

__all__ = (
    "EXTRA_BODY_OWNED",
    "MIN_SERVER_METRICS_INTERVAL_S",
    "PREFIX_CACHE_ROUTES",
    "TOKENIZER_CHECKS",
    "TokenizerCheck",
    "extra_body",
    "headers",
    "reset_prefix_cache",
    "server_metrics",
    "server_metrics_interval",
)

#: ``--tokenizer-check``: ``auto`` checks when the endpoint offers
#: ``/tokenize``, ``on`` insists on it, ``off`` never asks.
TokenizerCheck = Literal["auto", "on", "off"]
TOKENIZER_CHECKS: Mapping[str, TokenizerCheck] = {"auto": "auto", "on": "on", "off": "off"}

#: The servers' prefix-cache routes (vLLM's needs ``VLLM_SERVER_DEV_MODE=1``).
PREFIX_CACHE_ROUTES: Mapping[str, str] = {
    "vllm": "/reset_prefix_cache",
    "sglang": "/flush_cache",
}

#: Body fields mlpe-fast writes itself, and why a user may not (module docstring).
EXTRA_BODY_OWNED: Mapping[str, str] = {
    "model": "it is --model",
    "messages": "it is the dataset's prompt",
    "prompt": "it is the dataset's prompt",
    "stream": "it is --streaming",
    "stream_options": "mlpe-fast asks for the usage chunk that cross-checks its token counts",
    "max_tokens": "the output cap is --max-output-tokens",
    "max_completion_tokens": "the output cap is --max-output-tokens",
    "chat_template_kwargs": "the ISL count renders the chat template with them: set "
    "model_params.chat_template_kwargs (YAML)",
}

#: Fields the client frames itself, or that change how a message is
#: delimited or the connection handled (RFC 9112 section 6, RFC 9113
#: section 8.2.2); ``Content-Type`` is the JSON body's.
_HEADERS_OWNED = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
    }
)
#: RFC 9110 section 5.6.2 ``tchar``.
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def headers(given: Given) -> tuple[tuple[str, str], ...]:
    """``--header NAME:VALUE`` (repeated), or YAML ``mlpe_fast.headers``: a
    mapping of names to values, or a list of ``NAME:VALUE`` strings.

    Raises:
        UsageError: not ``NAME:VALUE``, a name that is not a field name or
            that the client sets itself, a value with CR, LF or NUL, a name
            given twice, or a value a written config.yaml redacted.
    """
    value, where = given
    pairs: list[tuple[Any, Any]] = []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, tuple) and len(item) == 2:  # a RunConfig's own pairs
                pairs.append(item)
                continue
            if not isinstance(item, str) or ":" not in item:
                raise UsageError(
                    f"{where}: {short(item)} is not NAME:VALUE, e.g. X-Request-Source:bench"
                )
            head, _, tail = item.partition(":")
            pairs.append((head, tail))
    else:
        raise UsageError(f"{where}: expected NAME:VALUE headers, got {kind_of(value)}")
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for raw_name, raw_value in pairs:
        name: Any = raw_name.strip() if isinstance(raw_name, str) else raw_name
        text: Any = raw_value.strip() if isinstance(raw_value, str) else raw_value
        if not isinstance(name, str) or not name or not set(name) <= _TOKEN:
            raise UsageError(f"{where}: {short(raw_name)} is not a header name (RFC 9110 5.1)")
        if not isinstance(text, str):
            raise UsageError(f"{where}: header {name}: expected a string value, got {short(text)}")
        lower = name.lower()
        if lower in _HEADERS_OWNED:
            raise UsageError(f"{where}: header {name} is set by the client and cannot be given")
        if any(c in text for c in "\r\n\0"):
            raise UsageError(f"{where}: header {name}: the value contains CR, LF or NUL")
        if text == REDACTED:
            raise UsageError(
                f"{where}: header {name} is {REDACTED!r} (a written config.yaml keeps no "
                f"secrets): give it again with --header {name}:VALUE"
            )
        if lower in seen:
            raise UsageError(f"{where}: header {name} is given twice")
        seen.add(lower)
        out.append((name, text))
    return tuple(out)


def extra_body(given: Given) -> dict[str, Any]:
    """``--extra-body JSON`` (a JSON object), or YAML ``mlpe_fast.extra_body``
    (a mapping).

    Raises:
        UsageError: not a JSON object, a field mlpe-fast owns (with why),
            or a NUL character in it.
    """
    value, where = given
    if isinstance(value, str):
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError as error:
            reason = " ".join(str(error).split())
            raise UsageError(
                f"{where}: not JSON ({reason}), e.g. '{{\"ignore_eos\": true}}'"
            ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a JSON object, got {kind_of(value)}")
    for key in value:
        if not isinstance(key, str):
            raise UsageError(f"{where}: field names are strings, got {short(key)}")
        if key in EXTRA_BODY_OWNED:
            raise UsageError(f"{where}: {key!r} is mlpe-fast's to set: {EXTRA_BODY_OWNED[key]}")
    try:
        encoded = msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError) as error:  # a YAML date, say
        raise UsageError(f"{where}: cannot be sent as JSON: {error}") from None
    if b"\\u0000" in encoded:
        raise UsageError(f"{where}: a NUL character cannot be sent")
    decoded: dict[str, Any] = msgspec.json.decode(encoded)  # plain JSON values from here on
    return decoded


def reset_prefix_cache(given: Given) -> str:
    """``vllm``, ``sglang`` or the route of another server (``/PATH``), as
    the path that is POSTed to."""
    value, where = given
    if isinstance(value, str) and value.strip().startswith("/"):
        path = value.strip()
        if any(c.isspace() or c in "#\0" for c in path):
            raise UsageError(f"{where}: {short(value)} is not a URL path")
        return path
    route: str = choice(
        Given(value, where), PREFIX_CACHE_ROUTES, {}, shown=(*PREFIX_CACHE_ROUTES, "/PATH")
    )
    return route


def tokenizer_check(given: Given) -> TokenizerCheck:
    """auto, on or off (a YAML boolean is on or off)."""
    if isinstance(given.value, bool):
        return "on" if given.value else "off"
    mode: TokenizerCheck = choice(given, TOKENIZER_CHECKS, {})
    return mode


#: The shortest ``--server-metrics-interval``: scraping stays a low rate
#: beside the load (a server builds its page on each ask).
MIN_SERVER_METRICS_INTERVAL_S = 0.1


def server_metrics(given: Given) -> str:
    """``auto`` (each endpoint's origin + ``/metrics``), ``off``, or the
    http(s) URL of the page, or a list of them, one per endpoint
    (``URL,URL`` or a YAML list; kept as ``URL,URL``: ``rules.py`` matches
    it to the endpoints); a YAML boolean is auto or off."""
    value, where = given
    if isinstance(value, bool):
        return "auto" if value else "off"
    if isinstance(value, str) and value.strip().lower() in ("auto", "off"):
        return value.strip().lower()
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, list) and len(items) > 1:
        urls = [_metrics_url(item) for item in items]
        if None in urls:
            bad = items[urls.index(None)]
            raise UsageError(
                f"{where}: expected a list of http(s):// URLs of /metrics pages, one per "
                f"endpoint; {short(bad)} is not one"
            )
        twice = [url for k, url in enumerate(urls) if url in urls[:k]]
        if twice:
            raise UsageError(f"{where}: {twice[0]} is listed twice: a page per endpoint")
        return ",".join(url for url in urls if url is not None)
    url = _metrics_url(items[0] if isinstance(items, list) and items else value)
    if url is None:
        raise UsageError(
            f"{where}: expected auto, off or an http(s):// URL of a /metrics page, got "
            f"{short(value)}"
        )
    return url


def _metrics_url(item: object) -> str | None:
    """An http(s) URL with a host (None: not one)."""
    if not isinstance(item, str):
        return None
    url = item.strip()
    parts = urlsplit(url)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(c.isspace() or c == "\0" for c in url)
    ):
        return None
    try:
        parts.port  # noqa: B018 - raises for a bad port
    except ValueError:
        return None
    return url


def server_metrics_interval(given: Given) -> float:
    """Seconds between scrapes, at least :data:`MIN_SERVER_METRICS_INTERVAL_S`."""
    seconds = number(given, positive=True)
    if seconds < MIN_SERVER_METRICS_INTERVAL_S:
        raise UsageError(
            f"{given.where}: {seconds:g} s is below {MIN_SERVER_METRICS_INTERVAL_S:g} s: "
            "scraping must stay a low rate beside the load"
        )
    return seconds
