"""The simulated endpoint, recording every request it is sent.

Run as a script (``python tests/integration/recording_sim.py --port 0 ...``,
the flags of ``python -m mlpe_fast.sim.server``): the same server, whose
request handler first notes each request -- its method, path, protocol,
header fields (names lower-cased) and JSON body -- then answers as usual.
``GET /_requests`` returns the notes so far as a JSON list of ``{"method",
"path", "protocol", "headers", "body"}`` objects, in arrival order (the
body ``null`` when it is not JSON).

A test sends its own header (``--header X-Test:NAME``) and reads back the
requests that carry it: what the server saw of that run alone, on a server
shared by many runs -- its completions, and the calls before them
(``/tokenize``, ``/reset_prefix_cache``), which have no model to tell them
apart by.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

SCRIPT = str(Path(__file__).resolve())
REQUESTS_PATH = "/_requests"
TEST_HEADER = "x-test"


def _install() -> None:
    from mlpe_fast.sim import _h2, _handling, _protocol

    original = _handling.handle_request
    seen: list[dict[str, Any]] = []
    # HTTP/2 streams' header fields by (connection, stream id), until the
    # stream's request is whole.
    h2_fields: dict[tuple[int, int], list[tuple[str, str]]] = {}

    def handle_request(
        state: Any, out: Any, method: str, path: str, body: bytes, **stamps: int
    ) -> None:
        if path == REQUESTS_PATH:
            _handling.reply(state, out, 200, json.dumps(seen).encode())
            return
        if out.wire is not None:
            fields, protocol = getattr(out, "_mlpe_test_fields", []), "h1"
        else:
            fields, protocol = h2_fields.pop((id(out.conn), out.id), []), "h2"
        try:
            doc = msgspec.json.decode(body) if body else None
        except msgspec.DecodeError:
            doc = None
        seen.append(
            {
                "method": method,
                "path": path,
                "protocol": protocol,
                "headers": [[name, value] for name, value in fields],
                "body": doc,
            }
        )
        original(state, out, method, path, body, **stamps)

    handle = _protocol.Connection._handle

    def _handle(self: Any, req: Any) -> None:
        self._mlpe_test_fields = list(req.headers)
        handle(self, req)

    on_request = _h2.Http2Connection._on_request

    def _on_request(self: Any, event: Any) -> None:
        h2_fields[(id(self), event.stream_id)] = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in event.headers
            if not name.startswith(b":")
        ]
        on_request(self, event)

    _protocol.Connection._handle = _handle  # type: ignore[method-assign]
    _h2.Http2Connection._on_request = _on_request  # type: ignore[method-assign]
    # Both protocols' modules imported the handler by name.
    for module in (_protocol, _h2):
        setattr(module, "handle_request", handle_request)  # noqa: B010


def read_requests(url: str, test: str | None = None) -> list[dict[str, Any]]:
    """The requests the server at ``url`` recorded; with ``test``, those
    whose ``X-Test`` header is ``test``."""
    with urllib.request.urlopen(url + REQUESTS_PATH, timeout=10) as response:
        rows: list[dict[str, Any]] = json.loads(response.read())
    if test is None:
        return rows
    return [r for r in rows if [TEST_HEADER, test] in [[n.lower(), v] for n, v in r["headers"]]]


if __name__ == "__main__":
    _install()
    from mlpe_fast.sim.server import main

    sys.exit(main())
