"""A static SSE server for the benches: nginx answering ``POST
/v1/chat/completions`` with one pre-built OpenAI chat-completion stream.

nginx, when installed (``apt-get install nginx-light``; a bench that needs
it is skipped with the reason when it is not), runs one worker process,
started from here with its own configuration, pid and logs in a temporary
directory, on a free loopback port.  The static module refuses POST, so the
405 error page is the file itself, served with status 200 (``error_page 405
=200 $uri``), as ``text/event-stream`` with a Content-Length, in one
``sendfile``: the server costs as little CPU as a server can, and sends each
response in as few writes as the socket allows, so what a client spends
is the client's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from mlpe_fast.demo import stop_process

__all__ = ("nginx_binary", "nginx_endpoint", "sse_body")


def sse_body(events: int, model: str, contents: Sequence[str] | None = None) -> bytes:
    """An OpenAI chat-completion stream: a role chunk, ``events`` one-
    character content chunks (or the given ``contents``, one chunk each), a
    ``finish_reason`` chunk, ``[DONE]``."""

    def chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
        data = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

    pieces = [chunk({"role": "assistant", "content": ""})]
    if contents is None:
        contents = ["abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(events)]
    pieces += [chunk({"content": text}) for text in contents]
    pieces.append(chunk({}, "stop"))
    pieces.append(b"data: [DONE]\n\n")
    return b"".join(pieces)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


NGINX_CONF = """\
worker_processes 1;
daemon off;
{user}pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {root}/client_body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location = /v1/chat/completions {{
            types {{ }}
            default_type text/event-stream;
            root {root}/www;
            # The static module answers POST with 405; its error page is
            # the file itself, served with status 200.
            error_page 405 =200 $uri;
        }}
    }}
}}
"""


@contextlib.contextmanager
def nginx_endpoint(root: Path, body: bytes) -> Iterator[tuple[str, int]]:
    """nginx serving ``body`` from ``root`` (module docstring); yields its URL
    and its master's pid.  Skips the test when nginx is not installed or
    does not start."""
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    www = root / "www" / "v1" / "chat"
    www.mkdir(parents=True)
    (www / "completions").write_bytes(body)
    port = _free_port()
    # As root the master hands the connections to workers of the "user"
    # directive's account: keep them root, so that they can read the file.
    user = "user root;\n" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""
    conf = root / "nginx.conf"
    conf.write_text(NGINX_CONF.format(root=root, port=port, user=user), encoding="utf-8")
    # -e: the error log before the configuration is read (not /var/log).
    argv = [binary, "-p", str(root), "-c", str(conf), "-e", str(root / "error.log")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                error = proc.stderr.read() if proc.stderr is not None else ""
                pytest.skip(f"nginx did not start: {error.strip() or proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.skip(f"nginx did not listen on 127.0.0.1:{port} within 10 s")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        stop_process(proc)
