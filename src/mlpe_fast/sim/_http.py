"""A small sans-IO HTTP/1.1 *request* reader for the simulated endpoint.

It takes bytes and returns whole requests (head and body); it owns no
socket and reads no clock.  Each request is stamped with the ``t_ns`` of
the :meth:`RequestReader.feed` call that completed it.

Rules (RFC 9112 unless noted):

1. Empty lines before a request line are skipped (section 2.2).  Lines
   end in CRLF; a bare LF is accepted as well (section 2.2 allows it).
2. Request line: ``method SP request-target SP HTTP-version``, single
   spaces, a token method, a target without whitespace or controls.
   ``HTTP/1.0`` and ``HTTP/1.1`` are served; any other well-formed version
   gets 505, anything else 400.
3. Field lines: ``name ":" OWS value OWS``; a token name with no
   whitespace before the colon (section 5.1), no obs-fold (section 5.2),
   no CR/NUL in values.  HTTP/1.1 needs exactly one ``Host`` (section 3.2).
4. Body: ``Transfer-Encoding: chunked`` (section 7.1; chunk extensions and
   trailer fields are read and ignored) or ``Content-Length``; both at once
   is rejected, as are differing Content-Length values (section 6.3, to rule
   out request smuggling).  Any other transfer coding gets 501.
5. Limits: the head (request line and fields) may hold ``max_head`` bytes
   (431 past it; h11 uses 16 KiB, we default to 64 KiB for long URLs and
   cookies), the body ``max_body`` bytes (413, checked against
   Content-Length before reading the body).
6. After an error the reader stays failed: the connection must be closed
   after the error response, since request framing is lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ("HttpError", "Request", "RequestReader")

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")
_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_BAD_VALUE = re.compile(rb"[\x00\r]")
# field-line = field-name ":" OWS field-value OWS (RFC 9112 section 5), with
# CR and NUL refused in the value (RFC 9110 section 5.5).
_FIELD = re.compile(
    rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*((?:[^\x00\r \t]|[ \t]+[^\x00\r \t])*)[ \t]*"
)
# A chunk-size line or a trailer field longer than this is an attack, not
# a client (chunk extensions are unused in practice).
_MAX_CHUNK_LINE = 4096


class HttpError(Exception):
    """A request the server must refuse; the connection closes afterwards.

    Attributes:
        status: the HTTP status code to answer with (400, 413, 431, 501, 505).
        message: a human-readable reason, sent in the error body.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return f"{self.status} {self.message}"


@dataclass(slots=True)
class Request:
    """One complete request.

    Attributes:
        method: e.g. ``"POST"`` (case-sensitive, as the spec says).
        target: the request-target as sent.
        path: the target without its query string.
        http_minor: 0 for HTTP/1.0, 1 for HTTP/1.1.
        headers: field lines in order, names lower-cased, values as text
            (ISO-8859-1, so any byte round-trips).
        body: the decoded body (chunked coding removed).
        keep_alive: whether the connection may carry another request.
        recv_ns: the ``t_ns`` of the feed that completed this request.
    """

    method: str
    target: str
    path: str
    http_minor: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    keep_alive: bool = True
    recv_ns: int = 0
    expect_continue: bool = field(default=False, repr=False)

    def header(self, name: str) -> str | None:
        """The first value of ``name`` (lower-case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _FAILED = range(6)


class RequestReader:
    """Incremental request reader (see the module docstring for the rules).

    Usage: call :meth:`feed` with each read and its stamp, then
    :meth:`next_request` until it returns None.
    """

    def __init__(self, *, max_head: int = 65536, max_body: int = 32 * 1024 * 1024) -> None:
        self.max_head = max_head
        self.max_body = max_body
        self._buf = bytearray()
        self._t_ns = 0
        self._state = _HEAD
        self._request: Request | None = None
        self._remaining = 0
        self._body = bytearray()
        self._continue_sent = False

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed."""
        return len(self._buf)

    @property
    def failed(self) -> bool:
        return self._state == _FAILED

    def feed(self, data: bytes, t_ns: int) -> None:
        """Appends ``data`` (one read, taken at ``t_ns``).  Ignored after an error."""
        if self._state != _FAILED:
            self._buf += data
            self._t_ns = t_ns

    def wants_continue(self) -> bool:
        """True once per request whose head asked for ``100-continue`` and
        whose body has not arrived yet: the caller should send
        ``100 Continue`` now."""
        req = self._request
        if req is None or not req.expect_continue or self._continue_sent:
            return False
        self._continue_sent = True
        return True

    def next_request(self) -> Request | None:
        """The next complete request, or None if more bytes are needed.

        Raises:
            HttpError: the bytes are not a request this server accepts; the
                reader is failed from then on.
        """
        if self._state == _FAILED:
            return None
        try:
            return self._next()
        except HttpError:
            self._state = _FAILED
            self._buf.clear()
            self._body.clear()
            raise

    # -- internals ---------------------------------------------------------

    def _next(self) -> Request | None:
        buf = self._buf
        if self._state == _HEAD:
            if not buf:
                return None
            # Section 2.2: skip empty lines before the request line.
            start = 0
            while buf.startswith(b"\r\n", start) or buf.startswith(b"\n", start):
                start += 2 if buf[start] == 0x0D else 1
            if start:
                del buf[:start]
            end, sep = _find_blank_line(buf)
            if end < 0:
                if len(buf) > self.max_head:
                    raise HttpError(431, "request head too large")
                return None
            if end > self.max_head:
                raise HttpError(431, "request head too large")
            head = bytes(buf[:end])
            del buf[: end + sep]
            head_req = _parse_head(head)
            self._request = head_req
            self._continue_sent = False
            self._body.clear()
            self._state = self._body_state(head_req)
            if self._state == _LENGTH and self._remaining > self.max_body:
                raise HttpError(413, f"body of {self._remaining} bytes exceeds {self.max_body}")
        req = self._request
        assert req is not None
        if self._state == _LENGTH:
            if len(buf) < self._remaining:
                return None
            n = self._remaining
            req.body = bytes(buf[:n])
            del buf[:n]
        elif not self._read_chunked():
            return None
        req.recv_ns = self._t_ns
        self._request = None
        self._state = _HEAD
        return req

    def _body_state(self, req: Request) -> int:
        te = [v for k, v in req.headers if k == "transfer-encoding"]
        cl = [v for k, v in req.headers if k == "content-length"]
        if te:
            if cl:
                raise HttpError(400, "both Transfer-Encoding and Content-Length")
            if req.http_minor == 0:
                raise HttpError(400, "Transfer-Encoding in an HTTP/1.0 request")
            codings = [c.strip().lower() for v in te for c in v.split(",")]
            if codings != ["chunked"]:
                raise HttpError(501, f"unsupported transfer coding {', '.join(te)!r}")
            return _CHUNK_SIZE
        if cl:
            values = {c.strip() for v in cl for c in v.split(",")}
            if len(values) != 1:
                raise HttpError(400, "conflicting Content-Length values")
            (value,) = values
            if not value.isdigit() or not value.isascii() or len(value) > 18:
                raise HttpError(400, f"bad Content-Length {value!r}")
            self._remaining = int(value)
            return _LENGTH
        self._remaining = 0
        return _LENGTH

    def _read_chunked(self) -> bool:
        """Decodes what it can; True once the whole chunked body is read."""
        buf = self._buf
        while True:
            if self._state == _CHUNK_SIZE:
                line = _take_line(buf)
                if line is None:
                    return False
                size_text = line.split(b";", 1)[0].strip(b" \t")
                if not _HEX.fullmatch(size_text):
                    raise HttpError(400, "bad chunk size")
                self._remaining = int(size_text, 16)
                if len(self._body) + self._remaining > self.max_body:
                    raise HttpError(413, f"chunked body exceeds {self.max_body} bytes")
                self._state = _CHUNK_DATA if self._remaining else _TRAILER
            elif self._state == _CHUNK_DATA:
                n = self._remaining
                if len(buf) < n + 1:
                    return False
                if buf[n] == 0x0A:
                    crlf = 1
                elif buf[n] == 0x0D:
                    if len(buf) < n + 2:
                        return False
                    if buf[n + 1] != 0x0A:
                        raise HttpError(400, "chunk data not followed by CRLF")
                    crlf = 2
                else:
                    raise HttpError(400, "chunk data not followed by CRLF")
                self._body += buf[:n]
                del buf[: n + crlf]
                self._state = _CHUNK_SIZE
            else:  # _TRAILER: field lines up to an empty line, ignored
                line = _take_line(buf)
                if line is None:
                    return False
                if line:
                    continue
                req = self._request
                assert req is not None
                req.body = bytes(self._body)
                self._body.clear()
                return True


def _take_line(buf: bytearray) -> bytes | None:
    """Removes and returns one line without its CRLF/LF, or None."""
    nl = buf.find(b"\n")
    if nl < 0:
        if len(buf) > _MAX_CHUNK_LINE:
            raise HttpError(400, "chunk-size or trailer line too long")
        return None
    if nl > _MAX_CHUNK_LINE:
        raise HttpError(400, "chunk-size or trailer line too long")
    line = bytes(buf[:nl])
    del buf[: nl + 1]
    return line[:-1] if line.endswith(b"\r") else line


def _find_blank_line(buf: bytearray) -> tuple[int, int]:
    """(index where the head ends, length of the blank-line separator)."""
    best, sep = -1, 0
    # CRLF CRLF is the norm; LF LF and LF CRLF are the bare-LF variants.
    for marker in (b"\r\n\r\n", b"\n\n", b"\n\r\n"):
        idx = buf.find(marker)
        if idx >= 0 and (best < 0 or idx < best):
            best, sep = idx, len(marker)
    return best, sep


def _parse_head(head: bytes) -> Request:
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")]
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method) or not _TARGET.fullmatch(target):
        raise HttpError(400, "malformed request line")
    match = _VERSION.fullmatch(version)
    if match is None:
        raise HttpError(400, "malformed HTTP version")
    if match.group(1) != b"1":
        raise HttpError(505, f"HTTP version {version.decode('latin-1')} not supported")
    minor = 1 if match.group(2) != b"0" else 0

    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        match = _FIELD.fullmatch(line)
        if match is None:
            if line[:1] in (b" ", b"\t"):
                raise HttpError(400, "obsolete line folding in header")
            if _BAD_VALUE.search(line):
                raise HttpError(400, "invalid character in header value")
            raise HttpError(400, "malformed header line")
        name, value = match.groups()
        headers.append((name.decode("ascii").lower(), value.decode("latin-1")))

    hosts = [v for k, v in headers if k == "host"]
    if minor == 1 and len(hosts) != 1:
        raise HttpError(400, "an HTTP/1.1 request needs exactly one Host header")
    connection = {
        token.strip().lower() for k, v in headers if k == "connection" for token in v.split(",")
    }
    keep_alive = "close" not in connection and (minor == 1 or "keep-alive" in connection)
    expect = [v.strip().lower() for k, v in headers if k == "expect"]
    target_text = target.decode("ascii")
    return Request(
        method=method.decode("ascii"),
        target=target_text,
        path=target_text.split("?", 1)[0],
        http_minor=minor,
        headers=headers,
        keep_alive=keep_alive,
        expect_continue=minor == 1 and "100-continue" in expect,
    )
