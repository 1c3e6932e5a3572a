"""The request head, built once per client and per path, for either protocol.

Every request of a run goes to the same endpoint with the same header
fields; only the path (chat or completions) and the body change.  So the
HTTP/1.1 request line and fields are pre-encoded per path and a request is
one ``%`` formatting of them with the body; the HTTP/2 header list is built
once per path and a request adds only its ``content-length``.

A request may carry header fields of its own (the reference client's
per-query routing headers, say): :meth:`RequestFraming.target` wraps the
path in a :class:`RequestTarget` that carries them, and such a request is
framed on its own, with the endpoint's fields first and its own after them
(where the reference client puts them).  The target travels wherever the
path does, so both protocols' connections frame it without knowing.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ("RequestFraming", "RequestTarget")

#: Fields the framing writes itself, or that would change how the message is
#: delimited or the connection handled (RFC 9112 section 6, RFC 9113 section
#: 8.2.2): a request may not set them.
_RESERVED = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
    }
)
#: RFC 9110 section 5.6.2 ``tchar``: what a field name may be made of.
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class RequestTarget(str):
    """A request path that carries header fields of its own request.

    It is the path, as a string, everywhere (the connections hand it back
    to :class:`RequestFraming`); only the framing looks at ``fields``, the
    request's ``(name, value)`` pairs, already checked.
    """

    fields: tuple[tuple[str, str], ...]


def _check_field(name: object, value: object) -> tuple[str, str]:
    """One per-request field, or ValueError naming what is wrong with it."""
    if not isinstance(name, str) or not isinstance(value, str):
        raise ValueError(f"header {name!r}: names and values must be strings")
    if not name or not set(name) <= _TOKEN:
        raise ValueError(f"header name {name!r} is not a valid field name (RFC 9110 5.1)")
    if name.lower() in _RESERVED:
        raise ValueError(f"header {name!r} is set by the client and cannot be given per request")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"header {name!r}: the value contains CR, LF or NUL")
    return name, value


class RequestFraming:
    """What every request to one endpoint carries.

    Args:
        scheme: ``"http"`` or ``"https"`` (HTTP/2's ``:scheme``).
        host, port: the endpoint (``Host`` / ``:authority``; the port is
            left out when it is the scheme's default).
        prefix: the URL's path prefix, prepended to every request path.
        api_key: sent as ``Authorization: Bearer <key>``.
        headers: extra request header fields, after the client's own; an
            ``Accept`` or ``User-Agent`` among them replaces the client's.
    """

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        prefix: str,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        default_port = 443 if scheme == "https" else 80
        authority = f"[{host}]" if ":" in host else host  # an IPv6 literal keeps its brackets
        if port != default_port:
            authority = f"{authority}:{port}"
        self.scheme = scheme
        self.authority = authority
        self.prefix = prefix
        given = [(name, value) for name, value in (headers or {}).items()]
        # A given Accept or User-Agent replaces the client's own, rather
        # than going out beside it.
        named = {name.lower() for name, _ in given}
        fields = [
            (name, value)
            for name, value in (
                ("content-type", "application/json"),
                ("accept", "text/event-stream, application/json"),
                ("user-agent", "mlpe-fast"),
            )
            if name not in named or name == "content-type"
        ]
        if api_key:
            fields.append(("authorization", f"Bearer {api_key}"))
        fields += given
        h1_fields = [f"Host: {authority}"] + [f"{_h1_name(n)}: {v}" for n, v in fields]
        self._h1_fields = ("\r\n".join(h1_fields) + "\r\nContent-Length: ").encode("latin-1")
        # RFC 9113 section 8.2.2: no connection-specific fields; names lowercase.
        self._h2_fields = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in fields]
        self._h1_lines: dict[str, bytes] = {}
        self._h2_heads: dict[str, list[tuple[bytes, bytes]]] = {}

    def target(self, path: str, headers: Mapping[str, str]) -> str:
        """``path`` with the request's own header fields (see the module doc).

        Raises:
            ValueError: a field that is not a valid name/value pair, or one
                the client sets itself (``Host``, ``Content-Length``, ...).
        """
        fields = tuple(_check_field(name, value) for name, value in headers.items())
        if not fields:
            return path
        target = RequestTarget(path)
        target.fields = fields
        return target

    def h1(self, body: bytes, path: str) -> bytes:
        """The whole HTTP/1.1 request for a JSON body."""
        if type(path) is RequestTarget:
            return self._h1_own(body, path)
        line = self._h1_lines.get(path)
        if line is None:
            line = self._h1_lines[path] = (
                f"POST {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._h1_fields
            )
        return b"%s%d\r\n\r\n%s" % (line, len(body), body)

    def _h1_own(self, body: bytes, target: RequestTarget) -> bytes:
        # Not cached: such fields usually change per conversation.  UTF-8
        # with surrogateescape, as the reference client encodes them.
        own = "".join(f"{name}: {value}\r\n" for name, value in target.fields)
        head = self._h1_fields[: -len(b"Content-Length: ")]
        return b"POST %s%s HTTP/1.1\r\n%s%sContent-Length: %d\r\n\r\n%s" % (
            self.prefix.encode("latin-1"),
            str(target).encode("latin-1"),
            head,
            own.encode("utf-8", "surrogateescape"),
            len(body),
            body,
        )

    def h2(self, path: str, content_length: int) -> list[tuple[bytes, bytes]]:
        """The HTTP/2 header list of a request (RFC 9113 section 8.3.1)."""
        if type(path) is RequestTarget:
            own = [
                (name.lower().encode("latin-1"), value.encode("utf-8", "surrogateescape"))
                for name, value in path.fields
            ]
            *common, length = self.h2(str(path), content_length)
            return [*common, *own, length]
        head = self._h2_heads.get(path)
        if head is None:
            head = self._h2_heads[path] = [
                (b":method", b"POST"),
                (b":scheme", self.scheme.encode("ascii")),
                (b":authority", self.authority.encode("latin-1")),
                (b":path", f"{self.prefix}{path}".encode("latin-1")),
                *self._h2_fields,
            ]
        return [*head, (b"content-length", b"%d" % content_length)]


def _h1_name(name: str) -> str:
    """``content-type`` -> ``Content-Type`` (field names are case-insensitive;
    the capitalised form is what HTTP/1.1 servers usually see)."""
    return (
        "-".join(part[:1].upper() + part[1:] for part in name.split("-"))
        if name.islower()
        else name
    )
