"""The simulated endpoint with a ``/metrics`` that goes wrong on purpose.

Run as a script (``python tests/integration/metrics_trouble_sim.py
--trouble MODE --port 0 ...``, with the flags of ``python -m
mlpe_fast.sim.server``): the same server, whose ``GET /metrics`` answers
its first request as usual and then, by MODE, ``garbage`` (an HTML page
with status 200) or ``hang`` (no answer at all: the request is read and
left).  Everything else is answered
as usual, so that a test sees what a broken metrics page does to a run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SCRIPT = str(Path(__file__).resolve())


def _install(mode: str) -> None:
    from mlpe_fast.sim import _h2, _handling, _protocol

    original = _handling.handle_request
    asked = [0]

    def handle_request(
        state: Any, out: Any, method: str, path: str, body: bytes, **stamps: int
    ) -> None:
        if path == "/metrics":
            asked[0] += 1
            if asked[0] > 1:
                if mode == "garbage":
                    page = b"<html><body><h1>Welcome</h1>\n<p>nothing here</p></body></html>\n"
                    _handling.reply(state, out, 200, page, content_type=b"text/html")
                return  # hang: never answered
        original(state, out, method, path, body, **stamps)

    for module in (_protocol, _h2):
        setattr(module, "handle_request", handle_request)  # noqa: B010


if __name__ == "__main__":
    at = sys.argv.index("--trouble")
    _install(sys.argv[at + 1])
    del sys.argv[at : at + 2]
    from mlpe_fast.sim.server import main

    sys.exit(main())
