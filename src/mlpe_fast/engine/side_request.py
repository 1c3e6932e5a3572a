"""One HTTP request to an endpoint outside the load: a server's own routes
(``/tokenize``, ``/reset_prefix_cache``, ``/flush_cache``) asked before a
point starts.

These calls are few, made before the load and never beside it, and their
answers are not OpenAI completions, so they do not go through the load's
client (its decoders expect a completion; its stamps would be wasted): each
is one HTTP/1.1 request on a connection of its own, made with the standard
library's ``http.client`` in a worker thread (:func:`side_request`), so the
event loop is never blocked.  It carries what every request of the run
carries: the API key, ``--header`` fields, the TLS settings; servers that
offer these routes speak HTTP/1.1 (vLLM, SGLang), so ``--http2`` does not
apply to them.  A failure is an answer too (:class:`SideResponse` with
``error``): the caller says what it means.
"""

from __future__ import annotations

import asyncio
import http.client
import ssl
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import msgspec

from .dial import tls_context

__all__ = ("SideResponse", "side_connection", "side_error", "side_fields", "side_request")

#: The most of an answer read: these routes answer a few kilobytes.
_MAX_BODY = 16 << 20


class SideResponse(msgspec.Struct, frozen=True):
    """What a side request got: the status and body, or why none
    (``error``: refused, timed out, TLS, ...); ``elapsed_ns`` from
    connecting to the end of the body."""

    url: str
    status: int | None
    body: bytes
    elapsed_ns: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


async def side_request(
    base_url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    api_key: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 10.0,
    ca_bundle: str | None = None,
    insecure: bool = False,
) -> SideResponse:
    """Sends one request to ``base_url`` + ``path`` (the URL's path prefix
    kept) and returns its answer; never raises for the endpoint's faults."""
    return await asyncio.to_thread(
        _request,
        base_url,
        method,
        path,
        body,
        api_key=api_key,
        headers=headers,
        timeout_s=timeout_s,
        ca_bundle=ca_bundle,
        insecure=insecure,
    )


def _request(
    base_url: str,
    method: str,
    path: str,
    body: bytes | None,
    *,
    api_key: str | None,
    headers: Sequence[tuple[str, str]],
    timeout_s: float,
    ca_bundle: str | None,
    insecure: bool,
) -> SideResponse:
    parts = urlsplit(base_url)
    target = parts.path.rstrip("/") + path
    url = f"{parts.scheme}://{parts.netloc}{target}"
    fields = side_fields(api_key, headers, json_body=body is not None)
    start = time.monotonic_ns()
    connection = side_connection(
        base_url, timeout_s=timeout_s, ca_bundle=ca_bundle, insecure=insecure
    )
    try:
        connection.request(method, target or "/", body=body, headers=fields)
        response = connection.getresponse()
        data = response.read(_MAX_BODY)
        return SideResponse(url, response.status, data, time.monotonic_ns() - start)
    except (OSError, http.client.HTTPException) as exc:  # TimeoutError, SSLError too
        error = side_error(exc, timeout_s)
    finally:
        connection.close()
    return SideResponse(url, None, b"", time.monotonic_ns() - start, error)


def side_error(exc: OSError | http.client.HTTPException, timeout_s: float) -> str:
    """A side request's failure in one line: no answer in time, a TLS
    failure, or what the socket or the HTTP client said."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def side_fields(
    api_key: str | None,
    headers: Sequence[tuple[str, str]],
    *,
    json_body: bool = False,
    accept: str = "application/json",
) -> dict[str, str]:
    """The header fields of a side request: the client's own, the API key,
    then the run's ``--header`` fields, which replace a field of the same
    name, as on its load."""
    fields = {"User-Agent": "mlpe-fast", "Accept": accept}
    if json_body:
        fields["Content-Type"] = "application/json"
    if api_key:
        fields["Authorization"] = f"Bearer {api_key}"
    named = {name.lower(): name for name in fields}
    for name, value in headers:
        fields.pop(named.get(name.lower(), name), None)
        fields[name] = value
    return fields


def side_connection(
    url: str, *, timeout_s: float, ca_bundle: str | None, insecure: bool
) -> http.client.HTTPConnection:
    """An unopened HTTP/1.1 connection to ``url``'s host, TLS for https://
    with the run's settings (it connects on its first request)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port
    if parts.scheme == "https":
        context = tls_context(http2=False, ca_bundle=ca_bundle, insecure=insecure)
        return http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
    return http.client.HTTPConnection(host, port, timeout=timeout_s)
