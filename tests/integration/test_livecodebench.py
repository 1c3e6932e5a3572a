"""LiveCodeBench end to end: the lcb_serve client against a fake service
(an HTTP + WebSocket server on port 0) with its failure modes, and an
accuracy run through ``mlpe-fast run --mode acc`` whose answers the
simulated endpoint's oracle sends, scored in the local sandbox."""

from __future__ import annotations

import json
import socketserver
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.accuracy.lcb_service import LcbServiceError, check_service, evaluate_on_service
from mlpe_fast.accuracy.websocket import accept_key, encode_frame
from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from tests.data_files import LCB_TINY


class FakeLcbServe:
    """What the fake answers: ``info`` (or raw bytes), and ``evaluate``,
    called with the request to give the messages to send (JSON objects, or
    raw text), ``delay_s`` before each."""

    def __init__(self) -> None:
        self.info: Any = {"version_tag": "release_v6", "n_workers": 2, "dataset_size": 4}
        self.requests: list[dict[str, Any]] = []
        self.delay_s = 0.0
        self.messages = self.grade

    @staticmethod
    def grade(request: dict[str, Any]) -> list[Any]:
        results = {q: ["good" in c for c in codes] for q, codes in request["codes_dict"].items()}
        return [
            {"status": "started", "total_samples": 1},
            {"status": "progress", "completed_samples": 1},
            {"status": "completed", "result": {"results": results}},
        ]


def _read_frame(rfile: Any) -> bytes:
    _, second = rfile.read(2)
    size = second & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", rfile.read(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", rfile.read(8))
    assert second & 0x80, "a client frame must be masked"
    mask = rfile.read(4)
    payload = rfile.read(size)
    return bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@pytest.fixture
def service() -> Iterator[tuple[FakeLcbServe, str]]:
    fake = FakeLcbServe()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/info":
                body = fake.info if isinstance(fake.info, bytes) else json.dumps(fake.info).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            key = self.headers["Sec-WebSocket-Key"]
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept_key(key))
            self.end_headers()
            self.wfile.flush()
            request = json.loads(_read_frame(self.rfile))
            fake.requests.append(request)
            for message in fake.messages(request):
                time.sleep(fake.delay_s)
                text = message if isinstance(message, str) else json.dumps(message)
                try:
                    self.wfile.write(encode_frame(1, text.encode(), mask=None))
                    self.wfile.flush()
                except BrokenPipeError:
                    break  # the client gave up first (the timeout case)
            self.close_connection = True

    socketserver.TCPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


PROGRAMS = [("a", "good 1"), ("b", "bad"), ("a", "good 2"), ("a", "bad 3"), ("b", "good")]


def test_the_service_grades_every_program_in_order(service: tuple[FakeLcbServe, str]) -> None:
    fake, url = service
    assert check_service(url, version_tag="release_v6")["dataset_size"] == 4
    verdicts = evaluate_on_service(url, PROGRAMS, timeout_s=7, deadline_s=10)
    assert verdicts == [True, False, True, False, True]
    [request] = fake.requests
    assert request["timeout_sec"] == 7
    # every list the same length, as the service requires: b padded with a failing program
    assert request["codes_dict"]["a"] == ["good 1", "good 2", "bad 3"]
    assert (
        request["codes_dict"]["b"][:2] == ["bad", "good"] and len(request["codes_dict"]["b"]) == 3
    )


def _one_line_error(call: Any) -> str:
    with pytest.raises(LcbServiceError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("LiveCodeBench service")
    return message


def test_health_failures_are_one_line(service: tuple[FakeLcbServe, str]) -> None:
    fake, url = service
    assert "Connection refused" in _one_line_error(lambda: check_service("http://127.0.0.1:9/"))
    fake.info = b"<html>"
    assert "not JSON" in _one_line_error(lambda: check_service(url))
    fake.info = {"dataset_size": 0}
    assert "no dataset" in _one_line_error(lambda: check_service(url))
    fake.info = {"dataset_size": 3, "version_tag": "release_v5"}
    assert "release_v5" in _one_line_error(lambda: check_service(url, version_tag="release_v6"))


def test_evaluation_failures_are_one_line(service: tuple[FakeLcbServe, str]) -> None:
    fake, url = service

    def evaluate(deadline_s: float = 10.0) -> Any:
        return evaluate_on_service(url, PROGRAMS, timeout_s=1, deadline_s=deadline_s)

    assert "refused" in _one_line_error(
        lambda: evaluate_on_service("http://127.0.0.1:9/", PROGRAMS, timeout_s=1, deadline_s=2)
    )
    fake.messages = lambda request: ["{not json"]
    assert "not JSON" in _one_line_error(evaluate)
    fake.messages = lambda request: [{"status": "error", "error": "Invalid request format"}]
    assert "Invalid request format" in _one_line_error(evaluate)
    fake.messages = lambda request: [{"status": "completed", "result": {"results": {"a": [True]}}}]
    assert "no full result" in _one_line_error(evaluate)
    fake.messages = lambda request: []  # the service hangs up
    assert "closed" in _one_line_error(evaluate)
    fake.messages, fake.delay_s = FakeLcbServe.grade, 1.0
    began = time.monotonic()
    assert "no answer in time" in _one_line_error(lambda: evaluate(deadline_s=0.5))
    assert time.monotonic() - began < 5


def _run(tmp_path: Path, extras: dict[str, Any] | None = None) -> int:
    config = tmp_path / "lcb.yaml"
    extras_text = "" if extras is None else f",\n       extras: {json.dumps(extras)}"
    config.write_text(
        "model_params: {name: m}\n"
        "datasets:\n"
        f"  - {{name: livecodebench, type: accuracy, path: {LCB_TINY},\n"
        "     parser: {prompt: question},\n"
        "     accuracy_config: {eval_method: code_bench_scorer, extractor: python_code_extractor,\n"
        f"       num_repeats: 2{extras_text}}}}}\n"
    )
    oracle = f"{LCB_TINY},parser.prompt=question,ground_truth=response"
    server = ("--ttft-ms", "0", "--itl-ms", "0", "--oracle", oracle, "--oracle-token-chars", "64")
    with simulated_endpoint(server) as endpoint:
        return main(
            [
                *("run", "-c", str(config), "--mode", "acc", "--endpoints", endpoint),
                *("--tokenizer", str(DEMO_TOKENIZER), "--concurrency", "4"),
                *("--report-dir", str(tmp_path / "run"), "--no-progress"),
            ]
        )


def test_an_accuracy_run_scores_livecodebench_locally(tmp_path: Path) -> None:
    assert _run(tmp_path, {"local_eval": True}) == 0
    stored = json.loads((tmp_path / "run" / "accuracy" / "accuracy_results.json").read_text())
    [entry] = stored["accuracy_scores"]
    assert (
        entry["dataset_name"] == "livecodebench" and entry["ground_truth_column"] == "question_id"
    )
    assert entry["score"] == {"exact_match": 60.0}  # 3 of 5 pass, in both repeats
    assert entry["complete"] is True and entry["total_samples"] == 10
    assert entry["breakdown"]["route"] == "local" and entry["breakdown"]["passed"] == 6


def test_an_unusable_service_is_one_line_before_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, {"lcb_service_url": "http://127.0.0.1:9"}) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "LiveCodeBench service" in err, err
    assert not (tmp_path / "run" / "events.jsonl").exists()


def test_programs_run_here_only_when_the_dataset_allows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the reference asks for ALLOW_LCB_LOCAL_EVAL before it runs the model's
    # code on the machine: neither a service nor local_eval is a mistake
    assert _run(tmp_path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "local_eval: true" in err, err
    assert not (tmp_path / "run" / "events.jsonl").exists()
