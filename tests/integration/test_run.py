"""`mlpe-fast run` end to end against the simulated endpoint on loopback.

The endpoint puts its own CLOCK_MONOTONIC stamps in each response's usage
(when it read the request, when it sent the first token): on Linux the
client's stamps are on the same clock, so each record can be checked
against ground truth: t_issue <= server receive, server send <= t_first.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.cli import main
from mlpe_fast.config import RunConfig
from mlpe_fast.demo import demo_config, simulated_endpoint
from mlpe_fast.point import run_point
from tests.data_files import CHAR_TOKENIZER, DUMMY_1K

SAME_CLOCK = sys.platform.startswith("linux")


def _config(tmp_path: Path, **changes: object) -> RunConfig:
    config = demo_config(RunConfig(report_dir=str(tmp_path / "run")), set())
    fields: dict[str, object] = {"concurrency": 8, "num_samples": 64, "max_output_tokens": 16}
    return msgspec.structs.replace(config, **{**fields, **changes})


def test_every_request_is_recorded_once_and_stamps_bracket_the_server(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with simulated_endpoint(("--ttft-ms", "5", "--itl-ms", "1")) as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    records = result.records
    assert len(records) == 64 == result.stats.issued
    assert len({r.sample_id for r in records}) == 64
    assert result.stats.completed == 64 and result.stats.failed == 0
    for record in records:
        usage = record.response.usage
        assert usage is not None and usage["completion_tokens"] == 16
        assert record.response.content_events == 16
        if SAME_CLOCK:
            assert record.t_issue <= usage["mlpe_recv_ns"]
            assert usage["mlpe_first_send_ns"] <= record.t_first  # type: ignore[operator]
        assert record.t_first <= record.t_done <= record.t_end  # type: ignore[operator]
    # 16 one-character tokens per response: exact counts, exact TPS.
    assert result.stats.osl_total == 64 * 16
    assert result.stats.ttft is not None and result.stats.ttft.p50 >= 5e6


def test_run_folder(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with simulated_endpoint() as endpoint:
        asyncio.run(run_point(config, endpoint, progress=False))
    run = tmp_path / "run"
    assert {p.name for p in run.iterdir()} >= {
        "config.yaml",
        "events.jsonl",
        "report.txt",
        "sample_idx_map.json",
    }
    lines = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    topics = [line["event_type"] for line in lines]
    assert topics[0] == "session.started" and topics[-1] == "session.ended"
    assert topics.count("sample.issued") == topics.count("sample.complete") == 64
    assert topics.count("sample.recv_first") == 64
    mapping = json.loads((run / "sample_idx_map.json").read_text())
    assert len(mapping["performance"]) == 64


def test_failures_are_counted_not_lost(tmp_path: Path) -> None:
    # The endpoint refuses max_tokens above its limit with a 400.
    config = _config(tmp_path, max_output_tokens=5)
    with simulated_endpoint(("--max-output-tokens", "4")) as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    assert result.stats.failed == 64 and result.stats.completed == 0
    assert result.stats.errors == {"HTTPStatusError": 64}
    assert "HTTP 400" in result.stats.error_examples["HTTPStatusError"]


def test_cli_demo_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(
        ["run", "--no-progress", "--num-samples", "32", "--report-dir", str(tmp_path / "r")]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "32 done, 0 failed" in out
    assert "TTFT" in out and "self-audit" in out
    assert (tmp_path / "r" / "events.jsonl").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--concurrency", "zero"], "--concurrency"),
        (["run", "--dataset", "/no/such/file.jsonl"], "/no/such/file.jsonl"),
        (["run", "--endpoints", "ftp://x", "--model", "m", "--dataset", "{data}"], "ftp://x"),
        (["run", "--tokenizer", "/no/such/tokenizer"], "/no/such/tokenizer"),
        (["serve", "--port", "-5"], "port"),
        (["run", "--report-dir", "/proc/no/such/dir"], "--report-dir"),
        (["run", "-c", "/no/such/config.yaml"], "/no/such/config.yaml"),
        (["frobnicate"], "frobnicate"),
    ],
)
def test_user_mistakes_are_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    data = f"{DUMMY_1K},parser.prompt=text_input"
    code = main([a.replace("{data}", data) for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_unreachable_endpoint_is_a_usage_mistake(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        [
            "run",
            "--no-progress",
            "--endpoints",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--tokenizer",
            str(CHAR_TOKENIZER),
            "--dataset",
            f"{DUMMY_1K},parser.prompt=text_input",
            "--num-samples",
            "4",
        ]
    )
    captured = capsys.readouterr()
    assert code == 2  # a usage mistake, found before anything is written
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert "cannot connect to 127.0.0.1:9" in captured.err and "--endpoints" in captured.err


def test_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mlpe_fast", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("mlpe-fast ")


def test_untrusted_certificate_is_a_usage_mistake(
    capsys: pytest.CaptureFixture[str], tls_certs: Any
) -> None:
    from mlpe_fast.sim.config import SimConfig
    from mlpe_fast.sim.server import SimServer

    config = SimConfig(tls_cert=str(tls_certs.cert_file), tls_key=str(tls_certs.key_file))
    with SimServer.start_in_thread(config) as running:
        argv = [
            *("run", "--no-progress", "--num-samples", "8", "--endpoints", running.url),
            *("--model", "mlpe-sim", "--tokenizer", str(CHAR_TOKENIZER)),
            *("--dataset", f"{DUMMY_1K},parser.prompt=text_input", "--max-output-tokens", "4"),
        ]
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "--ca-bundle" in err
        assert main([*argv, "--ca-bundle", str(tls_certs.ca_file)]) == 0


def test_endpoint_mix_ups_are_one_line_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--http2 against an HTTP/1.1-only endpoint, https:// against a plain
    one: said before any load, well within the connect timeout."""
    import time

    from mlpe_fast.engine.dial import NO_H2C, PLAIN_HTTP
    from mlpe_fast.sim.server import SimServer

    sim = Path(__file__).resolve().parents[2] / "src/mlpe_fast/sim"
    with SimServer.start_in_thread() as running:  # HTTP/1.1 only
        argv = [
            *("run", "--no-progress", "--num-samples", "4", "--max-output-tokens", "4"),
            *("--model", "mlpe-sim", "--tokenizer", str(sim / "tokenizer")),
            *("--dataset", str(sim / "demo_prompts.jsonl"), "--report-dir", str(tmp_path / "r")),
        ]
        for extra, said in (
            (["--endpoints", running.url, "--http2"], NO_H2C),
            (["--endpoints", running.url.replace("http://", "https://")], PLAIN_HTTP),
        ):
            t0 = time.monotonic()
            code = main([*argv, *extra])
            took = time.monotonic() - t0
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1 and said in err, err
            assert "Traceback" not in err and took < 5  # the connect timeout is 10 s
            assert not (tmp_path / "r").exists()  # before anything is written


def test_the_api_key_is_never_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Not in config.yaml, events.jsonl, the report or the terminal, even when
    the endpoint quotes it back in its error."""
    import http.server
    import threading

    key = "sk-test-0123456789abcdef"

    class QuotesTheKey(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            said = self.headers.get("Authorization", "")
            body = json.dumps({"error": {"message": f"invalid key: {said}", "type": "auth"}})
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), QuotesTheKey)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code = main(
            [
                *("run", "--no-progress", "--num-samples", "4", "--api-key", key),
                *("--endpoints", f"http://127.0.0.1:{server.server_address[1]}"),
                *("--model", "m", "--tokenizer", str(CHAR_TOKENIZER)),
                *("--dataset", f"{DUMMY_1K},parser.prompt=text_input"),
                *("--report-dir", str(tmp_path / "run")),
            ]
        )
    finally:
        server.shutdown()
        server.server_close()
    out, err = capsys.readouterr()
    assert code == 4 and "HTTPStatusError" in out and "<redacted>" in err
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert any(p.name == "events.jsonl" for p in files)
    for text in [out, err, *(p.read_text(errors="replace") for p in files)]:
        assert key not in text


def test_max_duration_caps_issuing(tmp_path: Path) -> None:
    # --max-duration (the reference's max_duration_ms) ends the performance
    # phase's issuing, whatever its count still asks for; what is in flight
    # completes, so every issued request has its record.
    config = _config(tmp_path, num_samples=1_000_000, max_duration_s=0.5)
    with simulated_endpoint(("--ttft-ms", "2", "--itl-ms", "0.5")) as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    stats = result.stats
    assert 8 < stats.issued < 1_000_000
    assert stats.completed == stats.issued and result.state == "complete"
    first_issue = min(r.t_issue for r in result.records)
    last_issue = max(r.t_issue for r in result.records)
    assert (last_issue - first_issue) / 1e9 < 0.5 + 0.25


def test_a_failure_after_the_load_keeps_the_log_and_leaves_no_open_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import warnings

    from mlpe_fast.point import figures

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug after the load")

    monkeypatch.setattr(figures, "final_snapshot", broken)
    config = _config(tmp_path, num_samples=16)
    with simulated_endpoint(("--ttft-ms", "1", "--itl-ms", "0.2")) as endpoint:
        with pytest.raises(RuntimeError, match="a bug after the load"):
            asyncio.run(run_point(config, endpoint, progress=False))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    lines = (tmp_path / "run" / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert sum('"sample.complete"' in line for line in lines) == 16


@pytest.mark.parametrize("drain", [True, False], ids=["drained", "not drained"])
def test_warmup_drain_decides_whether_measuring_waits_for_the_warmup(
    tmp_path: Path, drain: bool
) -> None:
    # --warmup-drain: the first measured query goes after the last warmup
    # answer; without it (the default), as soon as the last warmup query is
    # out, with warmup answers still on their way (logged in the warmup log).
    config = _config(tmp_path, num_samples=16, warmup_requests=8, warmup_drain=drain)
    with simulated_endpoint(("--ttft-ms", "20", "--itl-ms", "1")) as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    assert result.stats.completed == 16
    run = tmp_path / "run"
    warmup = [json.loads(line) for line in (run / "warmup_events.jsonl").read_text().splitlines()]
    measured = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    completes = [e["timestamp_ns"] for e in warmup if e["event_type"] == "sample.complete"]
    assert len(completes) == 8
    first_issue = min(e["timestamp_ns"] for e in measured if e["event_type"] == "sample.issued")
    if drain:
        assert first_issue > max(completes)
    else:  # the last warmup answers take 35 ms or more: measuring began before them
        assert first_issue < max(completes) - 10_000_000


def test_a_point_opens_its_connections_before_its_first_request(tmp_path: Path) -> None:
    """Issue 23: by default no request's figures carry a TCP setup; with
    --warmup-connections 0 the first wave's do, and the audit says so."""
    config = _config(tmp_path, concurrency=8, num_samples=32)
    with simulated_endpoint(("--ttft-ms", "2", "--itl-ms", "0.2")) as endpoint:
        early = asyncio.run(run_point(config, endpoint, progress=False))
        late = asyncio.run(
            run_point(
                msgspec.structs.replace(config, warmup_connections=0), endpoint, progress=False
            )
        )
    assert [r.connect_ns for r in early.records] == [0] * 32
    assert early.audit.warmed_connections == 8 == early.audit.connections_opened
    assert early.audit.requests_with_setup == 0 and early.audit.warm_up_ms > 0
    assert "8 before the first request" in early.table
    assert "no request's figures carry a setup" in early.table
    assert sum(r.connect_ns > 0 for r in late.records) == 8 == late.audit.requests_with_setup
    assert late.audit.warmed_connections == 0
    assert "setup inside 8 of 32 requests' figures" in late.table
    summary = json.loads((tmp_path / "run" / "performance" / "result_summary.json").read_text())
    assert summary["mlpe_fast"]["self_audit"]["requests_with_setup"] == 8
    assert "warmup_connections: 0" in (tmp_path / "run" / "config.yaml").read_text()


def test_connections_to_open_follow_the_load() -> None:
    base = RunConfig(endpoints=("http://a", "http://b"), concurrency=64)
    assert base.connections_to_open(64, None) == 64
    assert msgspec.structs.replace(base, max_connections=10).connections_to_open(64, None) == 20
    assert msgspec.structs.replace(base, warmup_connections=5).connections_to_open(64, None) == 5
    assert msgspec.structs.replace(base, warmup_connections=0).connections_to_open(64, None) == 0
    assert msgspec.structs.replace(base, http2=True).connections_to_open(64, None) == 2
    offline = msgspec.structs.replace(base, load_pattern="offline")
    assert offline.connections_to_open(1, 300) == 300
