"""The request head, built once per client and per path, for either protocol.

Every request of a run goes to the same endpoint with the same header
fields; only the path (chat or completions) and the body change.  So the
HTTP/1.1 request line and fields are pre-encoded per path and a request is
one ``%`` formatting of them with the body; the HTTP/2 header list is built
once per path and a request adds only its ``content-length``.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ("RequestFraming",)


class RequestFraming:
    """What every request to one endpoint carries.

    Args:
        scheme: ``"http"`` or ``"https"`` (HTTP/2's ``:scheme``).
        host, port: the endpoint (``Host`` / ``:authority``; the port is
            left out when it is the scheme's default).
        prefix: the URL's path prefix, prepended to every request path.
        api_key: sent as ``Authorization: Bearer <key>``.
        headers: extra request header fields.
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
        fields = [
            ("content-type", "application/json"),
            ("accept", "text/event-stream, application/json"),
            ("user-agent", "mlpe-fast"),
        ]
        if api_key:
            fields.append(("authorization", f"Bearer {api_key}"))
        fields += [(name, value) for name, value in (headers or {}).items()]
        h1_fields = [f"Host: {authority}"] + [f"{_h1_name(n)}: {v}" for n, v in fields]
        self._h1_fields = ("\r\n".join(h1_fields) + "\r\nContent-Length: ").encode("latin-1")
        # RFC 9113 section 8.2.2: no connection-specific fields; names lowercase.
        self._h2_fields = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in fields]
        self._h1_lines: dict[str, bytes] = {}
        self._h2_heads: dict[str, list[tuple[bytes, bytes]]] = {}

    def h1(self, body: bytes, path: str) -> bytes:
        """The whole HTTP/1.1 request for a JSON body."""
        line = self._h1_lines.get(path)
        if line is None:
            line = self._h1_lines[path] = (
                f"POST {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._h1_fields
            )
        return b"%s%d\r\n\r\n%s" % (line, len(body), body)

    def h2(self, path: str, content_length: int) -> list[tuple[bytes, bytes]]:
        """The HTTP/2 header list of a request (RFC 9113 section 8.3.1)."""
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
