"""The run configuration: flags, YAML in the reference's layout, checks, config.yaml.

Every user mistake must raise UsageError with one line naming the flag or key
and the bad value; these tests pin the exact messages.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.artifacts.config_yaml import config_to_yaml_dict, redact_url, write_config_yaml
from mlpe_fast.config import (
    SEED_SET_A_SAMPLE_INDEX,
    SEED_SET_A_SCHEDULER,
    WARMUP_DATASET_PASS,
    RunConfig,
    add_run_arguments,
    load_yaml,
    resolve,
)
from mlpe_fast.errors import MlpeError, UsageError
from mlpe_fast.load.dataset import AccuracyConfig, DatasetSpec

yaml = pytest.importorskip("yaml")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mlpe-fast run")
    add_run_arguments(p)
    return p


def run(*argv: str, config: dict[str, Any] | None = None) -> RunConfig:
    return resolve(parser().parse_args(list(argv)), {} if config is None else config)


def usage_error(*argv: str, config: dict[str, Any] | None = None) -> str:
    with pytest.raises(UsageError) as info:
        run(*argv, config=config)
    message = str(info.value)
    assert "\n" not in message
    return message


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# Defaults ---------------------------------------------------------------------------


def test_defaults_are_seed_set_a_and_closed_loop() -> None:
    config = run()
    assert config.endpoints == ()  # the simulated endpoint
    assert config.load_pattern == "concurrency"
    assert config.concurrency == 1
    assert config.streaming == "auto" and config.stream
    assert config.max_output_tokens == 1024
    assert config.salt is True
    assert config.seeds.scheduler == SEED_SET_A_SCHEDULER == 10487924139932647040
    assert config.seeds.sample_index == SEED_SET_A_SAMPLE_INDEX == 586478644936801402
    # the reference's salt generator: Random(warmup seed + 2), warmup seed
    # pinned to the sample-index seed
    assert config.seeds.salt == config.seeds.salt_seed == SEED_SET_A_SAMPLE_INDEX + 2
    assert config.seeds.warmup == config.seeds.warmup_seed == SEED_SET_A_SAMPLE_INDEX
    assert (config.timeouts.connect_s, config.timeouts.idle_s) == (10.0, 300.0)
    assert config.timeouts.total_s is None
    assert config.warmup_requests == 0
    assert config.route == "/v1/chat/completions"


def test_run_config_is_frozen() -> None:
    config = run()
    with pytest.raises(AttributeError):
        config.concurrency = 2  # type: ignore[misc]


def test_usage_error_is_an_mlpe_error_and_a_value_error() -> None:
    assert issubclass(UsageError, MlpeError)
    assert issubclass(UsageError, ValueError)


# Flags --------------------------------------------------------------------------------


def test_flags() -> None:
    config = run(
        "--endpoints",
        "http://a:8000",
        "https://b",
        "--model",
        "m",
        "--api-key",
        "sk-1",
        "--api-type",
        "openai-completions",
        "--dataset",
        "d.jsonl,parser.prompt=text_input",
        "--dataset",
        "acc:e.csv,name=e",
        "--tokenizer",
        "tok",
        "--concurrency",
        "16",
        "--num-samples",
        "500",
        "--duration",
        "60s",
        "--max-duration",
        "2m",
        "--warmup-requests",
        "8",
        "--no-warmup-salt",
        "--warmup-drain",
        "--streaming",
        "off",
        "--max-output-tokens",
        "256",
        "--report-dir",
        "out",
        "--timeout-connect",
        "2.5",
        "--timeout-idle",
        "30",
        "--timeout-total",
        "600",
        "--no-salt",
        "--scheduler-seed",
        "1",
        "--sample-index-seed",
        "2",
        "--salt-seed",
        "3",
        "--warmup-seed",
        "4",
    )
    assert config.endpoints == ("http://a:8000", "https://b")
    assert (config.model, config.api_key, config.api_type) == ("m", "sk-1", "openai-completions")
    assert config.route == "/v1/completions"
    assert config.datasets == (
        DatasetSpec(path="d.jsonl", prompt_column="text_input"),
        DatasetSpec(path="e.csv", type="accuracy", name="e", accuracy=AccuracyConfig()),
    )
    assert config.tokenizer == "tok"
    assert (config.load_pattern, config.concurrency) == ("concurrency", 16)
    assert (config.num_samples, config.duration_s, config.max_duration_s) == (500, 60.0, 120.0)
    assert (config.warmup_requests, config.warmup_salt, config.warmup_drain) == (8, False, True)
    assert (config.streaming, config.stream, config.max_output_tokens) == ("off", False, 256)
    assert config.report_dir == "out"
    assert (config.timeouts.connect_s, config.timeouts.idle_s, config.timeouts.total_s) == (
        2.5,
        30.0,
        600.0,
    )
    assert config.salt is False
    assert (config.seeds.scheduler, config.seeds.sample_index) == (1, 2)
    assert (config.seeds.salt, config.seeds.warmup) == (3, 4)


def test_offline_streams_off_unless_asked() -> None:
    config = run("--load-pattern", "max_throughput")
    assert (config.load_pattern, config.stream) == ("offline", False)
    assert run("--load-pattern", "offline", "--streaming", "on").stream
    # auto decides per point: a curve's dedicated Offline point does not stream
    curve = run("--concurrency", "1,2")
    assert curve.streaming == "auto" and curve.stream
    offline_point = msgspec.structs.replace(curve, load_pattern="offline")
    assert not offline_point.stream


def test_target_qps_alone_means_poisson() -> None:
    config = run("--target-qps", "12.5")
    assert (config.load_pattern, config.target_qps, config.stream) == ("poisson", 12.5, True)


def test_derived_seeds_follow_the_sample_index_seed() -> None:
    config = run("--sample-index-seed", "7")
    assert (config.seeds.sample_index, config.seeds.salt, config.seeds.warmup) == (7, 9, 7)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("600000", 600.0),  # bare numbers are milliseconds, as the reference
        ("600s", 600.0),
        ("10m", 600.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("0", None),  # 0 = not set
    ],
)
def test_duration_units(value: str, seconds: float | None) -> None:
    assert run("--duration", value).duration_s == seconds


def test_warmup_requests_zero_disables() -> None:
    assert run("--warmup-requests", "0").warmup_requests == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "0"], "--concurrency: expected a positive integer, got '0'"),
        (["--concurrency", "many"], "--concurrency: expected a positive integer, got 'many'"),
        (["--target-qps", "-1"], "--target-qps: expected a positive number, got '-1'"),
        (["--target-qps", "nan"], "--target-qps: expected a positive number, got 'nan'"),
        (["--num-samples", "1.5"], "--num-samples: expected a positive integer, got '1.5'"),
        (["--max-output-tokens", "0"], "--max-output-tokens: expected a positive integer, got '0'"),
        (["--timeout-idle", "0"], "--timeout-idle: expected a positive number, got '0'"),
        (["--scheduler-seed", "-1"], "--scheduler-seed: expected an integer >= 0, got '-1'"),
        (["--warmup-requests", "-2"], "--warmup-requests: expected an integer >= 0, got '-2'"),
        (
            ["--duration", "10x"],
            "--duration: expected a duration in ms or with a unit (600s, 10m, 1h), got '10x'",
        ),
        (["--streaming", "maybe"], "--streaming: 'maybe' is not one of auto, on, off"),
        # an unset shell variable: no run folder, another tokenizer, silently, before
        (["--report-dir", ""], "--report-dir: expected a path, got an empty string"),
        (["--tokenizer", " "], "--tokenizer: expected a path, got an empty string"),
        (["--api-key-file", ""], "--api-key-file: expected a path, got an empty string"),
        (
            ["--load-pattern", "bursty"],
            "--load-pattern: 'bursty' is not one of concurrency, max_throughput, offline, "
            "poisson, agentic_inference",
        ),
        (
            ["--load-pattern", "burst"],
            "--load-pattern: burst load patterns are not supported by mlpe-fast",
        ),
        (
            ["--api-type", "videogen"],
            "--api-type: videogen endpoints are not supported by mlpe-fast",
        ),
        (
            ["--api-type", "grpc"],
            "--api-type: 'grpc' is not one of openai, openai-completions, sglang",
        ),
        (
            ["--api-type", "sglang", "--dataset", "prompts.jsonl"],
            "--dataset prompts: --api-type sglang sends token ids to /generate (input_ids, as the "
            "reference); a text dataset has none: give its ids column with "
            "parser.input_tokens=COL, encode it in Harmony with the gpt-oss tokenizer (--harmony, "
            "docs/running.md), or use --api-type openai",
        ),
        (
            ["--endpoints", "http://h:30000/generate", "--model", "m"],
            "--endpoints names the route /generate, but the API type openai sends to "
            "/v1/chat/completions: add --api-type sglang, or give the base URL only",
        ),
        (
            ["--load-pattern", "poisson"],
            "--load-pattern: poisson needs a rate: --target-qps "
            "(YAML settings.load_pattern.target_qps)",
        ),
        (
            ["--endpoints", "localhost:8000", "--model", "m"],
            "--endpoints: 'localhost:8000' is not an http:// or https:// URL "
            "(e.g. http://localhost:8000)",
        ),
        (
            ["--endpoints", "http://localhost:8000"],
            "--model is required with --endpoints (YAML: model_params.name): "
            "it is the model field of every request",
        ),
        (
            ["--duration", "10m", "--max-duration", "5m"],
            "--max-duration: the maximum duration (300 s) is below the minimum duration (600 s)",
        ),
        (
            ["--dataset", "a.jsonl", "--dataset", "b/a.jsonl"],
            "datasets: two performance datasets are named 'a'; give one a name=...",
        ),
        (
            ["--dataset", "a.jsonl,parser.prompt:text"],
            "--dataset 'a.jsonl,parser.prompt:text': option 'parser.prompt:text' is not "
            "key=value (did you mean '=' instead of ':'?), e.g. parser.prompt=text_input",
        ),
    ],
)
def test_flag_errors(argv: list[str], message: str) -> None:
    assert usage_error(*argv) == message


# YAML -----------------------------------------------------------------------------------

REFERENCE_STYLE = """\
name: my_bench
version: '1.0'
type: online
model_params:
  name: meta-llama/Llama-3.1-8B-Instruct
  temperature: 0.0
  max_new_tokens: 512
  streaming: on            # YAML 1.1: a boolean unless quoted
  tokenizer_name: /models/llama
datasets:
- name: perf
  type: performance
  path: data/dummy_1k.jsonl
  format: .jsonl
  parser:
    prompt: text_input
- name: acc
  type: accuracy
  path: data/acc.csv
  samples: 100
  accuracy_config:
    eval_method: rouge
settings:
  runtime:
    min_duration_ms: 10m
    max_duration_ms: 0
    n_samples_to_issue: 2000
    scheduler_random_seed: 11
    dataloader_random_seed: 22
  load_pattern:
    type: concurrency
    target_concurrency: 32
  client:
    num_workers: 4
    warmup_connections: 0
  warmup:
    enabled: true
    salt: true
  early_stopping:
    enabled: true
endpoint_config:
  endpoints:
  - http://localhost:8000
  api_key: ${MLPE_TEST_API_KEY}
  api_type: openai_completions
report_dir: ${MLPE_TEST_REPORTS:-reports/run1}
enable_cpu_affinity: false
mlpe_fast:
  salt_random_seed: 5
  timeouts:
    idle_s: 120
"""


def test_reference_style_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLPE_TEST_API_KEY", "sk-secret")
    monkeypatch.delenv("MLPE_TEST_REPORTS", raising=False)
    config = resolve(parser().parse_args([]), load_yaml(write(tmp_path, REFERENCE_STYLE)))
    assert config.name == "my_bench"
    assert config.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert config.generation.temperature == 0.0
    assert config.max_output_tokens == 512
    assert config.streaming == "on"
    assert config.tokenizer == "/models/llama"
    assert config.datasets == (
        DatasetSpec(
            path="data/dummy_1k.jsonl",
            name="perf",
            format="jsonl",
            prompt_column="text_input",
        ),
        DatasetSpec(
            path="data/acc.csv",
            type="accuracy",
            name="acc",
            samples=100,
            accuracy=AccuracyConfig(eval_method="rouge"),
        ),
    )
    assert (config.duration_s, config.max_duration_s, config.num_samples) == (600.0, None, 2000)
    assert (config.seeds.scheduler, config.seeds.sample_index) == (11, 22)
    assert (config.seeds.salt, config.seeds.warmup) == (5, 22)
    assert (config.load_pattern, config.concurrency) == ("concurrency", 32)
    assert config.warmup_requests == WARMUP_DATASET_PASS
    assert config.endpoints == ("http://localhost:8000",)
    assert (config.api_key, config.api_type) == ("sk-secret", "openai-completions")
    assert config.report_dir == "reports/run1"
    assert config.timeouts.idle_s == 120.0


def test_flags_override_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLPE_TEST_API_KEY", "k")
    args = parser().parse_args(
        [
            "-c",
            str(write(tmp_path, REFERENCE_STYLE)),
            "--concurrency",
            "8",
            "--dataset",
            "other.jsonl",
            "--warmup-requests",
            "3",
            "--api-type",
            "openai",
        ]
    )
    config = resolve(args)  # loads -c itself
    assert config.concurrency == 8
    assert config.datasets == (DatasetSpec(path="other.jsonl"),)  # flags replace the list
    assert config.warmup_requests == 3
    assert config.api_type == "openai"
    assert config.model == "meta-llama/Llama-3.1-8B-Instruct"  # kept from the file


def test_yaml_offline_type_defaults_to_the_burst() -> None:
    config = run(config={"type": "offline"})
    assert (config.load_pattern, config.stream) == ("offline", False)


def test_yaml_submission_uses_benchmark_mode() -> None:
    config = run(config={"type": "submission", "benchmark_mode": "offline"})
    assert config.load_pattern == "offline"


def test_yaml_seed_set_names_are_aliases() -> None:
    runtime = {"scheduler_rng_seed": 3, "sample_index_rng_seed": 4}
    config = run(config={"settings": {"runtime": runtime}})
    assert (config.seeds.scheduler, config.seeds.sample_index, config.seeds.salt) == (3, 4, 6)


def test_yaml_warmup_disabled_and_counted() -> None:
    assert run(config={"settings": {"warmup": {"enabled": False}}}).warmup_requests == 0
    counted = {"settings": {"warmup": {"enabled": True, "n_requests": 50}}}
    assert run(config=counted).warmup_requests == 50


def test_yaml_redacted_api_key_is_not_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = run(config={"endpoint_config": {"api_key": "<redacted>"}})
    assert config.api_key is None
    # a written config.yaml run again takes the key from the environment or a file
    written = {"endpoint_config": {"endpoints": ["http://h"], "api_key": "<redacted>"}}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert run("--model", "m", config=written).api_key == "sk-env"
    key_file = tmp_path / "key"
    key_file.write_text("sk-file", encoding="utf-8")
    assert run("--model", "m", "--api-key-file", str(key_file), config=written).api_key == (
        "sk-file"
    )


def test_empty_yaml_file(tmp_path: Path) -> None:
    assert load_yaml(write(tmp_path, "")) == {}


def yaml_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as info:
        resolve(parser().parse_args([]), load_yaml(path))
    message = str(info.value)
    assert "\n" not in message
    return message.replace(str(path), "run.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "settings:\n  runtime:\n    min_duration: 10\n",
            "run.yaml: unknown key 'settings.runtime.min_duration'",
        ),
        ("modelparams:\n  name: x\n", "run.yaml: unknown key 'modelparams'"),
        (
            "datasets:\n- path: a.jsonl\n  parsr: {prompt: x}\n",
            "run.yaml: unknown key 'datasets[0].parsr'",
        ),
        (
            "audit:\n  test: output_caching_test\n",
            "run.yaml: audit: compliance audits are not supported by mlpe-fast",
        ),
        ("- a\n- b\n", "run.yaml: expected a mapping of settings, got a list"),
        ("model_params: [1, 2]\n", "run.yaml: model_params: expected a mapping, got a list"),
        (
            "model_params:\n  name: x\n   bad: indent\n",
            "run.yaml:3:7: invalid YAML: mapping values are not allowed here",
        ),
        (
            "endpoint_config:\n  api_key: ${MLPE_TEST_UNSET_VARIABLE}\n",
            "run.yaml: endpoint_config.api_key: environment variable "
            "$MLPE_TEST_UNSET_VARIABLE is not set (no default)",
        ),
        (
            "settings:\n  runtime:\n    scheduler_random_seed: 1\n    scheduler_rng_seed: 2\n",
            "run.yaml: settings.runtime.scheduler_rng_seed (2) contradicts "
            "settings.runtime.scheduler_random_seed (1)",
        ),
    ],
)
def test_yaml_file_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.delenv("MLPE_TEST_UNSET_VARIABLE", raising=False)
    assert yaml_error(tmp_path, text) == message


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"settings": {"load_pattern": {"type": "concurrency", "target_concurrency": -4}}},
            "settings.load_pattern.target_concurrency: expected a positive integer, got -4",
        ),
        (
            {"settings": {"load_pattern": {"type": "poisson"}}},
            "settings.load_pattern.type: poisson needs a rate: --target-qps "
            "(YAML settings.load_pattern.target_qps)",
        ),
        (
            {"type": "offline", "settings": {"load_pattern": {"type": "concurrency"}}},
            "settings.load_pattern.type: an offline config (type: offline) must use "
            "max_throughput, got 'concurrency'",
        ),
        (
            {"type": "eval"},
            "type eval: no accuracy dataset; add "
            "--dataset acc:PATH,accuracy_config.ground_truth=COLUMN",
        ),
        (
            {"model_params": {"streaming": "sometimes"}},
            "model_params.streaming: 'sometimes' is not one of auto, on, off",
        ),
        (
            {"model_params": {"max_new_tokens": True}},
            "model_params.max_new_tokens: expected a positive integer, got True",
        ),
        (
            {"endpoint_config": {"endpoints": ["ftp://x"]}, "model_params": {"name": "m"}},
            "endpoint_config.endpoints: 'ftp://x' is not an http:// or https:// URL "
            "(e.g. http://localhost:8000)",
        ),
        (
            {"settings": {"runtime": {"min_duration_ms": "forever"}}},
            "settings.runtime.min_duration_ms: expected a duration in ms or with a unit "
            "(600s, 10m, 1h), got 'forever'",
        ),
        (
            {"settings": {"warmup": {"enabled": "sure"}}},
            "settings.warmup.enabled: expected true or false, got 'sure'",
        ),
        ({"datasets": {"path": "a"}}, "datasets: expected a list of datasets, got a mapping"),
        ({"datasets": [{"name": "a"}]}, "datasets[0].path: a dataset needs a file path, got None"),
        (
            {"datasets": [{"path": "a.jsonl", "type": "training"}]},
            "datasets[0].type: 'training' is not one of performance, accuracy",
        ),
        (
            {"datasets": [{"path": "a.jsonl", "format": "xml"}]},
            "datasets[0].format: 'xml' is not one of jsonl, json, csv, parquet",
        ),
        (
            {"datasets": [{"path": "a.jsonl", "samples": 0}]},
            "datasets[0].samples: expected a positive integer, got 0",
        ),
        (
            {"datasets": [{"path": "a.jsonl", "parser": {"answer": "x"}}]},
            "datasets[0].parser: unknown parser target 'answer' "
            "(valid: prompt, system, input_tokens)",
        ),
        (
            {"datasets": [{"path": "a.jsonl", "agentic_inference": {"turn_timeout_s": 5}}]},
            "dataset a: an agentic_inference block needs the agentic_inference load pattern "
            "(--load-pattern agentic_inference, YAML settings.load_pattern.type)",
        ),
    ],
)
def test_yaml_value_errors(config: dict[str, Any], message: str) -> None:
    assert usage_error(config=config) == message


def test_missing_config_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(UsageError, match=r"^-c/--config: file not found: .*nope\.yaml$"):
        resolve(parser().parse_args(["-c", str(missing)]))


def test_env_default_and_dollar_escape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLPE_TEST_UNSET_VARIABLE", raising=False)
    text = "name: ${MLPE_TEST_UNSET_VARIABLE:-fallback}-$$HOME\n"
    assert load_yaml(write(tmp_path, text))["name"] == "fallback-$HOME"


# config.yaml ----------------------------------------------------------------------------


def test_config_yaml_layout_and_redaction(tmp_path: Path) -> None:
    config = run(
        "--endpoints",
        "http://host:8000/",
        "--model",
        "m",
        "--api-key",
        "sk-secret",
        "--dataset",
        "perf:d.jsonl,parser.prompt=text_input,format=jsonl",
        "--concurrency",
        "4",
        "--num-samples",
        "100",
        "--duration",
        "90s",
        "--timeout-total",
        "60",
    )
    path = tmp_path / "run" / "config.yaml"
    write_config_yaml(path, config)
    text = path.read_text(encoding="utf-8")
    assert "sk-secret" not in text
    written = yaml.safe_load(text)
    assert list(written) == [
        "name",
        "version",
        "type",
        "model_params",
        "datasets",
        "settings",
        "endpoint_config",
        "mlpe_fast",
    ]
    assert written["name"] == "online_benchmark"
    assert written["type"] == "online"
    assert written["model_params"] == {"name": "m", "max_new_tokens": 1024, "streaming": "on"}
    assert written["datasets"] == [
        {
            "name": "d",
            "type": "performance",
            "path": "d.jsonl",
            "format": "jsonl",
            "parser": {"prompt": "text_input"},
        }
    ]
    assert written["settings"]["runtime"] == {
        "min_duration_ms": 90000,
        "max_duration_ms": 0,
        "n_samples_to_issue": 100,
        "scheduler_random_seed": SEED_SET_A_SCHEDULER,
        "dataloader_random_seed": SEED_SET_A_SAMPLE_INDEX,
    }
    assert written["settings"]["load_pattern"] == {"type": "concurrency", "target_concurrency": 4}
    assert written["endpoint_config"] == {
        "endpoints": ["http://host:8000"],
        "api_key": "<redacted>",
        "api_type": "openai",
    }
    assert written["mlpe_fast"]["salt_random_seed"] == SEED_SET_A_SAMPLE_INDEX + 2
    assert written["mlpe_fast"]["timeouts"] == {"connect_s": 10.0, "idle_s": 300.0, "total_s": 60.0}


def test_config_yaml_reads_back_to_the_same_config(tmp_path: Path) -> None:
    config = run(
        "--endpoints",
        "http://host:8000",
        "--model",
        "m",
        "--api-key",
        "sk",
        "--api-type",
        "openai-completions",
        "--dataset",
        "acc:a.csv,name=x,samples=5,parser.prompt=q,parser.system=s",
        "--target-qps",
        "3.5",
        "--warmup-requests",
        "10",
        "--no-salt",
        "--salt-seed",
        "99",
        "--goodput",
        "ttft:500",
        "e2el:2000",
        "--report-dir",
        "r",
    )
    path = tmp_path / "config.yaml"
    write_config_yaml(path, config)
    again = resolve(parser().parse_args([]), load_yaml(path))
    # the point's streaming as it was (auto resolved: the file says what it did)
    written = {"api_key": None, "streaming": "on" if config.stream else "off"}
    assert again == config.__class__(
        **{**{f: getattr(config, f) for f in config.__struct_fields__}, **written}
    )


def test_config_yaml_offline_and_sim_endpoint() -> None:
    config = run("--load-pattern", "offline")
    written = config_to_yaml_dict(config, endpoints=["http://127.0.0.1:4321"])
    assert written["type"] == "offline"
    assert written["settings"]["load_pattern"] == {"type": "max_throughput"}
    assert written["model_params"]["streaming"] == "off"
    assert written["endpoint_config"]["endpoints"] == ["http://127.0.0.1:4321"]


def test_redact_url_leaves_plain_urls() -> None:
    assert redact_url("http://localhost:8000/v1") == "http://localhost:8000/v1"
    assert redact_url("http://h/?token=t") == "http://h/?token=%3Credacted%3E"


def test_reference_nulls_are_accepted(tmp_path: Path) -> None:
    """The reference's full templates spell out every key, mostly null."""
    text = """\
    name: concurrency_benchmark
    submission_ref: null
    benchmark_mode: null
    model_params:
      name: m
      temperature: null
      chat_template_kwargs: null
      osl_distribution: null
      streaming: 'on'
      tokenizer_name: null
    datasets:
    - name: perf
      type: performance
      path: d.jsonl
      format: null
      samples: null
      eval_method: null
      parser: {prompt: text_input}
      generate_params: null
      accuracy_config: null
      agentic_inference: null
      generation_config_override: null
    settings:
      runtime: {min_duration_ms: 600000, max_duration_ms: 0, n_samples_to_issue: null}
      load_pattern: {type: concurrency, target_qps: null, target_concurrency: 32}
      drain: {warmup_timeout_s: 240.0, accuracy_timeout_s: null}
    endpoint_config: {endpoints: ['http://localhost:8000'], api_key: null, api_type: openai}
    report_dir: null
    timeout: null
    verbose: false
    audit: null
    """
    config = resolve(parser().parse_args([]), load_yaml(write(tmp_path, text)))
    assert (config.model, config.concurrency, config.duration_s) == ("m", 32, 600.0)
    assert config.datasets == (
        DatasetSpec(path="d.jsonl", name="perf", prompt_column="text_input"),
    )
    assert (config.api_key, config.report_dir, config.tokenizer) == (None, None, None)


# Phases (accuracy runs) -------------------------------------------------------------


def test_mode_flags_and_yaml() -> None:
    acc = "acc:e.jsonl,accuracy_config.ground_truth=answer"
    assert run().mode == "perf"
    assert run("--mode", "both", "--dataset", "p.jsonl", "--dataset", acc).mode == "both"
    assert run("--accuracy-only", "--dataset", acc).mode == "acc"
    yaml_config = {
        "type": "eval",
        "submission_ref": {"model": "llama3_1-8b", "ruleset": "v1"},
        "datasets": [
            {"path": "e.jsonl", "type": "accuracy", "accuracy_config": {"ground_truth": "a"}}
        ],
    }
    config = run(config=yaml_config)
    assert (config.mode, config.mlperf_model) == ("acc", "llama3_1-8b")
    assert config.datasets[0].accuracy == AccuracyConfig(ground_truth="a")
    assert run("--dataset", acc, config={"mlpe_fast": {"mode": "acc"}}).mode == "acc"
    assert run("--mlperf-model", "gpt-oss-120b").mlperf_model == "gpt-oss-120b"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--mode", "acc"), "--mode acc: no accuracy dataset; add --dataset acc:PATH"),
        (("--mode", "fast"), "--mode: 'fast' is not one of perf, acc, both"),
    ],
)
def test_mode_mistakes(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError) as info:
        run(*argv)
    assert str(info.value).startswith(message)


# Protocols and TLS ------------------------------------------------------------------


def test_http2_and_tls_flags(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    config = run("--http2", "--ca-bundle", str(bundle), "--insecure")
    assert (config.http2, config.ca_bundle, config.insecure) == (True, str(bundle), True)
    assert (run().http2, run().ca_bundle, run().insecure) == (False, None, False)


def test_http2_and_tls_in_yaml_round_trip(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    config = run(
        config={
            "model_params": {"name": "m"},
            "settings": {"client": {"insecure": True}},
            "mlpe_fast": {"http2": True, "ca_bundle": str(bundle)},
        }
    )
    assert (config.http2, config.ca_bundle, config.insecure) == (True, str(bundle), True)
    again = run(config=config_to_yaml_dict(config, endpoints=["https://h"]))
    assert (again.http2, again.ca_bundle, again.insecure) == (True, str(bundle), True)


def test_missing_ca_bundle_is_one_line() -> None:
    assert usage_error("--ca-bundle", "/no/such/ca.pem") == (
        "--ca-bundle: file not found: /no/such/ca.pem"
    )
    message = usage_error(config={"mlpe_fast": {"ca_bundle": "/no/such/ca.pem"}})
    assert message == "mlpe_fast.ca_bundle: file not found: /no/such/ca.pem"


# Endpoints and the API key ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "base"),
    [
        ("http://h:8000", "http://h:8000"),
        ("http://h:8000/", "http://h:8000"),
        ("http://h:8000/v1", "http://h:8000"),
        ("http://h:8000/v1/", "http://h:8000"),
        ("http://h:8000/v1/chat/completions", "http://h:8000"),
        ("https://h/proxy/v1", "https://h/proxy"),
        ("https://h/proxy", "https://h/proxy"),
        ("http://[::1]:8000/v1", "http://[::1]:8000"),
    ],
)
def test_endpoint_base_url_drops_v1_and_the_route(given: str, base: str) -> None:
    # The OpenAI SDK's and vLLM's base URLs end in /v1; the route is ours to add.
    assert run("--endpoints", given, "--model", "m").endpoints == (base,)


def test_endpoint_with_the_completions_route_takes_its_api_type() -> None:
    config = run(
        "--endpoints",
        "http://h/v1/completions",
        "--model",
        "m",
        "--api-type",
        "openai-completions",
    )
    assert config.endpoints == ("http://h",)
    message = usage_error("--endpoints", "http://h/v1/completions", "--model", "m")
    assert "names the route /v1/completions" in message
    assert "--api-type openai-completions" in message


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("http://[::1", "is not a usable URL (Invalid IPv6 URL"),
        ("http://h:99999", "is not a usable URL (Port out of range"),
        ("http://h:8000?api-version=1", "a base URL has no query or fragment"),
        ("http://user:pw@h:8000", "credentials in the URL (user:password@host) are not sent"),
        ("ftp://h", "is not an http:// or https:// URL"),
        ("http://", "has no host"),
    ],
)
def test_bad_endpoint_urls_are_one_line(given: str, said: str) -> None:
    assert said in usage_error("--endpoints", given, "--model", "m")


def test_two_endpoints_are_kept_in_order_and_not_twice() -> None:
    config = run("--endpoints", "http://a:1", "http://b:2/v1", "--model", "m")
    assert config.endpoints == ("http://a:1", "http://b:2")
    assert "listed twice" in usage_error(
        "--endpoints", "http://a:1", "http://a:1/v1", "--model", "m"
    )


def test_api_key_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    endpoint = ("--endpoints", "http://h", "--model", "m")
    assert run(*endpoint).api_key is None
    key_file = tmp_path / "key"
    key_file.write_text("sk-file\n# a comment line\n", encoding="utf-8")
    assert run(*endpoint, "--api-key-file", str(key_file)).api_key == "sk-file"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert run(*endpoint).api_key == "sk-env"
    # the flags win over the environment; the demo (no endpoint) sends none
    assert run(*endpoint, "--api-key", "sk-flag").api_key == "sk-flag"
    assert run(*endpoint, "--api-key-file", str(key_file)).api_key == "sk-file"
    assert run().api_key is None
    config = {"mlpe_fast": {"api_key_file": str(key_file)}}
    assert run(*endpoint, config=config).api_key == "sk-file"


def test_api_key_file_mistakes_are_one_line(tmp_path: Path) -> None:
    endpoint = ("--endpoints", "http://h", "--model", "m")
    missing = tmp_path / "missing"
    assert "cannot read the API key" in usage_error(*endpoint, "--api-key-file", str(missing))
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    assert "the file is empty" in usage_error(*endpoint, "--api-key-file", str(empty))
    both = usage_error(*endpoint, "--api-key", "k", "--api-key-file", str(empty))
    assert "give the API key one way" in both


def test_api_key_from_a_file_is_redacted_in_config_yaml(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-secret", encoding="utf-8")
    config = run("--endpoints", "http://h", "--model", "m", "--api-key-file", str(key_file))
    path = tmp_path / "config.yaml"
    write_config_yaml(path, config, endpoints=list(config.endpoints))
    text = path.read_text(encoding="utf-8")
    assert "sk-secret" not in text
    assert "<redacted>" in text


def test_send_max_tokens_flag_and_yaml(tmp_path: Path) -> None:
    assert run().send_max_tokens is False
    config = run("--send-max-tokens")
    assert config.send_max_tokens is True
    assert run(config={"mlpe_fast": {"send_max_tokens": True}}).send_max_tokens is True
    # config.yaml keeps it, so that a written config runs the same again
    path = tmp_path / "config.yaml"
    write_config_yaml(path, config)
    assert load_yaml(str(path))["mlpe_fast"]["send_max_tokens"] is True
    assert resolve(parser().parse_args([]), load_yaml(str(path))).send_max_tokens is True


# Settings a run would silently leave unused: refused ---------------------------------------

AGENTIC = ("--load-pattern", "agentic_inference", "--dataset", "trajectories.jsonl")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--streaming", "off"), "--streaming: not for an agentic_inference run: its turns"),
        (("--no-salt",), "--salt/--no-salt: not for an agentic_inference run: its salt"),
        (("--send-max-tokens",), "--send-max-tokens: not for an agentic_inference run"),
        (("--api-type", "openai-completions"), "--api-type: not for an agentic_inference run"),
    ],
)
def test_agentic_runs_refuse_request_settings_they_cannot_apply(
    flags: tuple[str, ...], said: str
) -> None:
    assert usage_error(*AGENTIC, *flags).startswith(said)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--load-pattern", "poisson", "--target-qps", "5", "--concurrency", "1,2"),
         "--concurrency: not for --load-pattern poisson"),
        (("--load-pattern", "poisson", "--target-qps", "5", "--concurrency", "3"),
         "--concurrency: not for --load-pattern poisson"),
        (("--load-pattern", "offline", "--concurrency", "4"),
         "--concurrency: not for --load-pattern offline"),
        (("--load-pattern", "offline", "--duration", "5s"),
         "--duration: not for --load-pattern offline"),
        (("--load-pattern", "concurrency", "--target-qps", "5"),
         "--target-qps: not for --load-pattern concurrency"),
    ],
)  # fmt: skip
def test_flags_a_load_pattern_has_no_use_for_are_refused(flags: tuple[str, ...], said: str) -> None:
    assert usage_error(*flags).startswith(said)


def test_a_second_performance_dataset_is_refused() -> None:
    message = usage_error("--dataset", "a.jsonl", "--dataset", "b.jsonl")
    assert message.startswith("--dataset: 2 performance datasets (a, b); a run measures one")
    # an accuracy dataset beside it is fine
    config = run("--dataset", "a.jsonl", "--dataset", "acc:b.jsonl,accuracy_config.ground_truth=o")
    assert [d.type for d in config.datasets] == ["performance", "accuracy"]


def test_an_unknown_mlperf_model_is_refused() -> None:
    message = usage_error("--mlperf-model", "llama3.1-8b")
    assert message.startswith("--mlperf-model 'llama3.1-8b': not an MLPerf Endpoints model")
    assert "llama3_1-8b" in message
    assert run("--mlperf-model", "kimi-k3").mlperf_model == "kimi-k3"
