"""Where ``mlpe-fast run`` takes the API key from, end to end: each source
reaches the endpoint as ``Authorization: Bearer``, and none reaches a file
of the run folder or the terminal.

The endpoint is a small threaded server that answers every request with
one short stream and records the header it was sent.
"""

from __future__ import annotations

import os
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlpe_fast.sim.stream import chat_chunk, http_response, sse_event
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER

STREAM = http_response(
    [sse_event(chat_chunk(content=c)) for c in ("He", "llo")]
    + [sse_event(chat_chunk(finish_reason="stop")), sse_event(b"[DONE]")]
)
DEMO_PROMPTS = Path(__file__).parents[2] / "src" / "mlpe_fast" / "sim" / "demo_prompts.jsonl"


class _Recorder(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                byte = self.rfile.read(1)
                if not byte:
                    return
                head += byte
            fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
            fields = {k.strip().lower(): v.strip() for k, v in fields.items()}
            self.rfile.read(int(fields.get(b"content-length", b"0")))
            path = head.split(b" ", 2)[1]
            self.server.seen.append((path, fields.get(b"authorization")))  # type: ignore[attr-defined]
            self.wfile.write(STREAM)
            self.wfile.flush()


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[tuple[bytes, bytes | None]]]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Recorder)
    server.daemon_threads = True
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def _run(
    url: str, folder: Path, *flags: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "mlpe_fast.cli", "run", "--endpoints", url, "--model", "m",
        "--tokenizer", DEMO_TOKENIZER, "--dataset", str(DEMO_PROMPTS), "--num-samples", "3",
        "--no-progress", "--report-dir", str(folder), *flags,
    ]  # fmt: skip
    return subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=120, env=env
    )


def _folder_text(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("source", ["environment", "file", "flag"])
def test_each_key_source_reaches_the_endpoint_and_no_file(
    source: str, endpoint: tuple[str, list[tuple[bytes, bytes | None]]], tmp_path: Path
) -> None:
    url, seen = endpoint
    key = f"sk-from-{source}"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    flags: tuple[str, ...] = ()
    if source == "environment":
        env["OPENAI_API_KEY"] = key
    elif source == "file":
        key_file = tmp_path / "key.txt"
        key_file.write_text(key + "\n", encoding="utf-8")
        flags = ("--api-key-file", str(key_file))
    else:
        flags = ("--api-key", key)
    folder = tmp_path / "run"
    done = _run(url, folder, *flags, env=env)
    assert done.returncode == 0, done.stderr
    # the base URL's /v1 is taken as the base, with a note
    assert "using the base URL" in done.stderr
    bearer = f"Bearer {key}".encode()
    completions = [auth for path, auth in seen if path == b"/v1/chat/completions"]
    assert completions == [bearer] * 3  # one per request
    # and the calls before the load (the tokenizer check's /tokenize) carry it too
    assert all(auth == bearer for _, auth in seen)
    assert key not in done.stdout + done.stderr
    assert key not in _folder_text(folder)
    assert "<redacted>" in (folder / "config.yaml").read_text(encoding="utf-8")
