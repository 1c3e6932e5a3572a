"""The endpoints' base URLs: what ``--endpoints`` (YAML
``endpoint_config.endpoints``) accepts, and the route a URL may name."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from ..errors import UsageError
from .choices import ApiType
from .coerce import short
from .given import Given

__all__ = ("ROUTES", "ROUTE_OF", "base_urls", "named_route")

logger = logging.getLogger(__name__)

#: Routes a base URL may end in, as the OpenAI SDK's and vLLM's base URLs do
#: (``http://host:8000/v1``), or a whole route copied from a curl command.
_ROUTE_SUFFIXES = ("/v1/chat/completions", "/v1/completions", "/generate", "/v1")
#: The API type each whole route is served with.
ROUTES: dict[str, ApiType] = {
    "/v1/chat/completions": "openai",
    "/v1/completions": "openai-completions",
    "/generate": "sglang",
}
#: The route each API type sends to (``RunConfig.route``).
ROUTE_OF: dict[ApiType, str] = {api_type: route for route, api_type in ROUTES.items()}
_EXAMPLE = "e.g. http://localhost:8000"


def base_urls(given: Given) -> tuple[str, ...]:
    """The endpoints as base URLs the request routes are appended to (a
    trailing ``/``, ``/v1`` or whole route dropped, with a warning saying so).

    Raises:
        UsageError: not a list of http(s) URLs, a URL twice, or URLs that
            name different routes.
    """
    urls = _urls(given)
    split = [_split(url, given.where) for url in urls]
    for url, (base, dropped) in zip(urls, split, strict=True):
        if dropped is not None:
            logger.warning(
                "mlpe-fast: %s %s: using the base URL %s (the route, e.g. "
                "/v1/chat/completions, is added to every request; set it with --api-type)",
                given.where,
                url,
                base,
            )
    bases = tuple(base for base, _ in split)
    routes = {dropped for _, dropped in split if dropped in ROUTES}
    if len(routes) > 1:
        raise UsageError(
            f"{given.where}: the URLs name different routes: {', '.join(sorted(routes))}"
        )
    if len(set(bases)) != len(bases):
        raise UsageError(f"{given.where}: an endpoint is listed twice: {', '.join(bases)}")
    return bases


def named_route(given: Given) -> str | None:
    """The whole route (``/v1/completions``) the endpoints' URLs end in, if
    any: the API type must be that route's.  ``given`` has passed
    :func:`base_urls`."""
    for url in _urls(given):
        _, dropped = _split(url, given.where)
        if dropped in ROUTES:
            return dropped
    return None


def _urls(given: Given) -> list[str]:
    value, where = given
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(u, str) for u in items):
        raise UsageError(f"{where}: expected a list of URLs, got {short(value)}")
    return [u.strip() for u in items if u.strip()]


def _split(url: str, where: str) -> tuple[str, str | None]:
    """``url`` as a base URL, and the route suffix it was given with, if any."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{where}: {url!r} is not an http:// or https:// URL ({_EXAMPLE})")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- urlsplit checks the port only when asked
    except ValueError as error:
        raise UsageError(f"{where}: {url!r} is not a usable URL ({error}; {_EXAMPLE})") from None
    if not parts.hostname:
        raise UsageError(f"{where}: {url!r} has no host ({_EXAMPLE})")
    # The client sends neither: refused rather than silently dropped.
    if parts.query or parts.fragment:
        raise UsageError(f"{where}: {url!r}: a base URL has no query or fragment ({_EXAMPLE})")
    if "@" in parts.netloc:
        raise UsageError(
            f"{where}: credentials in the URL (user:password@host) are not sent; "
            "use --api-key-file or OPENAI_API_KEY"
        )
    path = parts.path.rstrip("/")
    for suffix in _ROUTE_SUFFIXES:
        if path.endswith(suffix):
            return parts._replace(path=path[: -len(suffix)]).geturl(), suffix
    return parts._replace(path=path).geturl(), None
