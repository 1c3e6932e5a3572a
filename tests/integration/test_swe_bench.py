"""The SWE-bench service client (``accuracy/swe_bench.py``) against a fake
of the service: a real HTTP server on loopback that speaks the v1 API
(health, runs, polling, cancel, artifacts) and records what it was sent."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from mlpe_fast.accuracy.swe_bench import (
    SweBenchError,
    SweBenchOptions,
    check_service,
    run_swe_bench,
    swe_bench_entry,
)
from mlpe_fast.cli import main
from mlpe_fast.config import RunConfig
from mlpe_fast.demo import demo_config, simulated_endpoint
from mlpe_fast.load.dataset import AccuracyConfig, DatasetSpec
from mlpe_fast.point import run_point

from .swe_bench_fake import FakeService, serve_fake

pytestmark = pytest.mark.pipeline

IDS = ["astropy__astropy-12907", "django__django-11099", "sympy__sympy-20590"]


@pytest.fixture
def service() -> Iterator[tuple[FakeService, str]]:
    with serve_fake() as served:
        yield served


def _options(url: str, **extra: Any) -> SweBenchOptions:
    extras = {"swebench_service_url": url, "poll_interval_s": 0.01, **extra}
    return SweBenchOptions.from_extras(extras, workers=8)


def _run(url: str, tmp_path: Path | None = None, **kwargs: Any) -> Any:
    return run_swe_bench(
        _options(url, swebench_service_auth_token="tok"),
        model="kimi",
        endpoint="http://model:8000",
        api_key="sk-x",
        generation={"temperature": 1.0, "max_new_tokens": 8192},
        instance_ids=IDS,
        report_dir=tmp_path,
        **kwargs,
    )


def test_a_run_is_submitted_polled_scored_and_kept(
    service: tuple[FakeService, str], tmp_path: Path
) -> None:
    fake, url = service
    assert check_service(_options(url, swebench_service_auth_token="tok"))["api_version"] == "v1"
    result = _run(url, tmp_path)
    assert result.score == pytest.approx(2 / 3) and result.complete is True
    (payload,) = fake.payloads
    assert (
        payload["endpoint_urls"] == ["http://model:8000"] and payload["endpoint_api_key"] == "sk-x"
    )
    assert payload["evaluated_instance_ids"] == IDS and payload["num_instances"] == 3
    assert payload["workers"] == 8 and payload["max_eval_workers"] == 10
    assert payload["subset"] == "verified" and payload["split"] == "test"
    assert payload["generation_params"] == {"temperature": 1.0, "max_new_tokens": 8192}
    assert fake.auth == {"Bearer tok"} and fake.polls == 2 and not fake.cancelled
    kept = tmp_path / "swe_bench_runs" / "r1"
    assert (kept / "preds.json").read_text() == '{"instance": "patch"}'
    assert json.loads((kept / "swe_bench_service_status.json").read_text())["status"] == "succeeded"
    assert fake.fetched == ["/v1/runs/r1/artifacts/preds.json"]  # the others were refused
    assert not (kept / "secrets.txt").exists() and not (kept / "status.json").exists()


def test_every_instance_submitted_is_complete(service: tuple[FakeService, str]) -> None:
    fake, url = service
    fake.result = {"submitted_instances": 3, "resolved_instances": 3}
    result = _run(url)
    assert result.score == 1.0 and result.complete is True
    entry = swe_bench_entry("swe_bench", result, duration_s=12.3456)
    assert entry["score"] == 1.0 and entry["complete"] is True and entry["unit_samples"] == 3
    assert entry["dataset_type"] == "accuracy" and entry["swe_bench"]["run_id"] == "r1"


@pytest.mark.parametrize(
    ("final", "result", "error"),
    [
        ("failed", {"submitted_instances": 3, "resolved_instances": 3}, "the run failed"),
        ("succeeded", {"submitted_instances": 2, "resolved_instances": 3}, "inconsistent"),
        ("succeeded", {"submitted_instances": 4, "resolved_instances": 1}, "inconsistent"),
        ("succeeded", {"submitted_instances": 0, "resolved_instances": 0}, "nothing"),
        ("succeeded", {"submitted_instances": "3", "resolved_instances": 1}, "inconsistent"),
        ("succeeded", None, "no result"),
    ],
)
def test_runs_without_a_score(
    service: tuple[FakeService, str], final: str, result: Any, error: str
) -> None:
    fake, url = service
    fake.final_status, fake.result = final, result
    outcome = _run(url)
    assert outcome.score is None and outcome.complete is False and error in (outcome.error or "")
    assert swe_bench_entry("swe_bench", outcome, duration_s=1)["score"] is None


def test_a_stop_cancels_the_run(service: tuple[FakeService, str]) -> None:
    fake, url = service
    fake.polls_before_done = 10**9
    stop = threading.Event()
    stop.set()
    outcome = _run(url, stop=stop)
    assert outcome.score is None and "stopped" in (outcome.error or "")
    assert fake.cancelled == ["r1"]


def test_a_service_that_cannot_be_used(service: tuple[FakeService, str]) -> None:
    fake, url = service
    fake.health = {"api_version": "v2", "capabilities": []}
    with pytest.raises(SweBenchError, match="speaks API 'v2'"):
        check_service(_options(url))
    fake.health = {"api_version": "v1", "capabilities": ["swebench.run"]}
    with pytest.raises(SweBenchError, match=r"lacks artifacts\.download, swebench\.cancel"):
        check_service(_options(url))
    with pytest.raises(SweBenchError, match="swebench_service_url is required"):
        SweBenchOptions.from_extras({}, workers=1)
    with pytest.raises(SweBenchError, match=r"127\.0\.0\.1:9"):
        check_service(_options("http://127.0.0.1:9"))


def _swe_dataset(tmp_path: Path, url: str) -> DatasetSpec:
    rows = [{"instance_id": i, "problem_statement": f"fix {i}"} for i in IDS]
    path = tmp_path / "swe.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    extras = {"swebench_service_url": url, "poll_interval_s": 0.01, "num_instances": 2}
    return DatasetSpec(
        path=str(path),
        type="accuracy",
        name="swe_bench",
        prompt_column="problem_statement",
        accuracy=AccuracyConfig(
            eval_method="swe_bench_scorer", ground_truth="instance_id", extras=extras
        ),
    )


def test_an_accuracy_run_with_swe_bench(service: tuple[FakeService, str], tmp_path: Path) -> None:
    fake, url = service
    fake.result = {"submitted_instances": 2, "resolved_instances": 1}
    spec = _swe_dataset(tmp_path, url)
    config = demo_config(RunConfig(report_dir=str(tmp_path / "run")), set())
    config = replace(config, datasets=(spec,), mode="acc", model="kimi")
    with simulated_endpoint() as endpoint:
        result = asyncio.run(run_point(config, endpoint, progress=False))
    (entry,) = result.accuracy
    assert entry["dataset_name"] == "swe_bench" and entry["score"] == 0.5
    assert entry["complete"] is True and entry["unit_samples"] == 2
    (payload,) = fake.payloads
    assert payload["evaluated_instance_ids"] == IDS[:2] and payload["endpoint_urls"] == [endpoint]
    assert payload["model_name"] == "kimi"
    written = json.loads((tmp_path / "run" / "accuracy" / "accuracy_results.json").read_text())
    assert written["accuracy_scores"][0]["score"] == 0.5
    assert (tmp_path / "run" / "swe_bench_runs" / "r1" / "preds.json").exists()


def test_a_service_that_is_not_there_is_one_line_before_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "model_params: {name: kimi}\n"
        "datasets:\n"
        f"  - {{name: swe_bench, type: accuracy, path: {tmp_path / 'swe.jsonl'},\n"
        "     parser: {prompt: problem_statement},\n"
        "     accuracy_config: {eval_method: swe_bench_scorer, ground_truth: instance_id,\n"
        "       extras: {swebench_service_url: 'http://127.0.0.1:9'}}}\n"
    )
    _swe_dataset(tmp_path, "http://127.0.0.1:9")  # writes swe.jsonl
    status = main(["run", "-c", str(config), "--mode", "acc", "--report-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "SWE-bench service" in err, err
    assert not (tmp_path / "r" / "events.jsonl").exists()
