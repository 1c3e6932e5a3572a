"""A fake of the SWE-bench service: a real HTTP server on loopback that
speaks its v1 API (health, runs, polling, cancel, artifacts; ``docs/agentic.md``
§4.3) and records what it was sent.  The real service needs Docker and the
network; this one answers what a test tells it to."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeService:
    """What the fake answers, and what it heard."""

    def __init__(self) -> None:
        self.health: dict[str, Any] = {
            "api_version": "v1",
            "capabilities": ["swebench.run", "swebench.cancel", "artifacts.download"],
        }
        self.polls_before_done = 2
        self.final_status = "succeeded"
        self.result: dict[str, Any] | None = {"submitted_instances": 3, "resolved_instances": 2}
        self.artifacts: list[dict[str, str]] = [
            {"name": "preds.json", "url": "/v1/runs/r1/artifacts/preds.json"},
            {"name": "status.json", "url": "http://elsewhere.example/steal"},  # refused
            {"name": "secrets.txt", "url": "/v1/runs/r1/artifacts/secrets.txt"},  # not allowed
        ]
        self.payloads: list[dict[str, Any]] = []
        self.cancelled: list[str] = []
        self.auth: set[str | None] = set()
        self.polls = 0
        self.fetched: list[str] = []

    def status(self) -> dict[str, Any]:
        done = self.polls >= self.polls_before_done
        status: dict[str, Any] = {
            "run_id": "r1",
            "status": self.final_status if done else "running",
            "phase": "eval" if done else "agent",
        }
        if done:
            status["result"] = self.result
            status["artifacts"] = self.artifacts
        return status


@contextlib.contextmanager
def serve_fake(fake: FakeService | None = None) -> Iterator[tuple[FakeService, str]]:
    """Serves ``fake`` (a new one by default) on 127.0.0.1; yields it and its URL."""
    fake = FakeService() if fake is None else fake

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _json(self, body: Any, code: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            fake.auth.add(self.headers.get("Authorization"))
            if self.path == "/health":
                self._json(fake.health)
            elif self.path == "/v1/runs/r1":
                fake.polls += 1
                self._json(fake.status())
            elif self.path.startswith("/v1/runs/r1/artifacts/"):
                fake.fetched.append(self.path)
                body = b'{"instance": "patch"}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self._json({"error": "no"}, 404)

        def do_POST(self) -> None:
            fake.auth.add(self.headers.get("Authorization"))
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/runs":
                fake.payloads.append(json.loads(body))
                self._json({"run_id": "r1", "status": "queued"})
            elif self.path == "/v1/runs/r1/cancel":
                fake.cancelled.append("r1")
                self._json({"run_id": "r1", "status": "cancelled"})
            else:
                self._json({"error": "no"}, 404)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
