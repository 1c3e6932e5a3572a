"""The cross-field rules, each on its own (``mlpe_fast.config.rules``): a
rule reads the settings as given and the converted values, and returns
what it derives or raises UsageError naming the flag or key at fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.config import rules
from mlpe_fast.config.given import Given, GivenSettings
from mlpe_fast.config.resolve import convert
from mlpe_fast.config.run_config import WARMUP_DATASET_PASS
from mlpe_fast.errors import UsageError
from mlpe_fast.load.agentic import AgenticSettings
from mlpe_fast.load.dataset import AccuracyConfig, DatasetSpec

PERF = DatasetSpec(path="a.jsonl")
ACC = DatasetSpec(path="b.jsonl", type="accuracy", accuracy=AccuracyConfig())


def given(flags: dict[str, Any] | None = None, **from_yaml: Any) -> GivenSettings:
    """Settings by name: ``flags`` as by a flag (named ``--name``), the rest as by YAML."""
    values = {name: Given(value, name) for name, value in from_yaml.items()}
    for name, value in (flags or {}).items():
        values[name] = Given(value, f"--{name}")
    return GivenSettings(values, frozenset(flags or {}))


def apply(rule: rules.Rule, settings: GivenSettings, **values: Any) -> dict[str, Any]:
    """The rule's result for ``settings`` converted, with ``values`` over them."""
    return dict(rule(settings, {**convert(settings), **values}))


def refusal(rule: rules.Rule, settings: GivenSettings, **values: Any) -> str:
    with pytest.raises(UsageError) as info:
        apply(rule, settings, **values)
    return str(info.value)


def test_rules_run_in_an_order_where_derived_values_come_first() -> None:
    order = rules.RULES.index
    assert order(rules.load_pattern_of_the_test_type) < order(rules.poisson_needs_a_rate)
    assert order(rules.mode_of_the_test_type) < order(
        rules.accuracy_phase_needs_an_accuracy_dataset
    )
    assert order(rules.warmup_from_yaml) < order(rules.agentic_run_limits)
    assert order(rules.load_pattern_of_the_test_type) < order(rules.default_name)
    assert len(set(rules.RULES)) == len(rules.RULES)


def test_unique_dataset_names() -> None:
    same = (PERF, DatasetSpec(path="other/a.jsonl"))
    assert "two performance datasets are named 'a'" in refusal(
        rules.unique_dataset_names, given(), datasets=same
    )
    assert apply(rules.unique_dataset_names, given(), datasets=(PERF, ACC)) == {}


@pytest.mark.parametrize(
    ("yaml", "derived"),
    [
        ({}, {}),
        ({"type": "offline"}, {"load_pattern": "offline"}),
        ({"type": "submission", "benchmark_mode": "offline"}, {"load_pattern": "offline"}),
        ({"type": "submission"}, {}),
        ({"type": "offline", "target_qps": 2}, {"load_pattern": "poisson"}),
        ({"type": "eval"}, {}),
    ],
)
def test_load_pattern_of_the_test_type(yaml: dict[str, Any], derived: dict[str, Any]) -> None:
    assert apply(rules.load_pattern_of_the_test_type, given(**yaml)) == derived


def test_an_offline_file_cannot_name_another_pattern_but_a_flag_can() -> None:
    settings = given(type="offline", load_pattern="concurrency")
    assert "an offline config (type: offline) must use max_throughput" in refusal(
        rules.load_pattern_of_the_test_type, settings
    )
    flag = given({"load_pattern": "concurrency"}, type="offline")
    assert apply(rules.load_pattern_of_the_test_type, flag) == {}


def test_benchmark_mode_is_read_only_for_a_submission() -> None:
    # not a submission: its value does not matter, so it is no mistake
    assert apply(rules.load_pattern_of_the_test_type, given(benchmark_mode="sideways")) == {}
    assert "'sideways' is not one of offline, online" in refusal(
        rules.load_pattern_of_the_test_type, given(type="submission", benchmark_mode="sideways")
    )


def test_mode_of_the_test_type() -> None:
    assert apply(rules.mode_of_the_test_type, given(type="eval")) == {"mode": "acc"}
    assert apply(rules.mode_of_the_test_type, given(type="eval", mode="both")) == {}
    assert apply(rules.mode_of_the_test_type, given(type="online")) == {}


@pytest.mark.parametrize(
    ("concurrency", "derived"),
    [
        (4, {}),
        ((4,), {"concurrency": 4, "sweep": ()}),
        ((1, 4, 16), {"concurrency": 1, "sweep": (1, 4, 16)}),
    ],
)
def test_curve_or_point(concurrency: Any, derived: dict[str, Any]) -> None:
    assert apply(rules.curve_or_point, given(), concurrency=concurrency) == derived


def test_poisson_needs_a_rate() -> None:
    message = refusal(rules.poisson_needs_a_rate, given(), load_pattern="poisson")
    assert message.startswith("--load-pattern poisson: poisson needs a rate")
    assert apply(rules.poisson_needs_a_rate, given(), load_pattern="poisson", target_qps=1.0) == {}


def test_accuracy_phase_needs_an_accuracy_dataset() -> None:
    message = refusal(rules.accuracy_phase_needs_an_accuracy_dataset, given({"mode": "acc"}))
    assert message.startswith("--mode acc: no accuracy dataset")
    message = refusal(
        rules.accuracy_phase_needs_an_accuracy_dataset, given(type="eval"), mode="acc"
    )
    assert message.startswith("type eval: no accuracy dataset")
    settings = given({"mode": "both"})
    assert apply(rules.accuracy_phase_needs_an_accuracy_dataset, settings, datasets=(ACC,)) == {}


def test_one_performance_dataset() -> None:
    two = (PERF, DatasetSpec(path="c.jsonl"))
    assert refusal(rules.one_performance_dataset, given(), datasets=two).startswith(
        "datasets: 2 performance datasets (a, c)"
    )
    by_flag = given({"datasets": ["a.jsonl", "c.jsonl"]})
    assert refusal(rules.one_performance_dataset, by_flag).startswith("--dataset: 2 performance")
    assert apply(rules.one_performance_dataset, given(), datasets=(PERF, ACC)) == {}


@pytest.mark.parametrize(
    ("pattern", "flag", "value"),
    [
        ("concurrency", "target_qps", "5"),
        ("poisson", "concurrency", "3"),
        ("offline", "concurrency", "3"),
        ("offline", "duration_s", "5s"),
    ],
)
def test_pattern_flags_in_use(pattern: str, flag: str, value: str) -> None:
    message = refusal(rules.pattern_flags_in_use, given({flag: value}), load_pattern=pattern)
    assert message.startswith(f"--{flag}: not for --load-pattern {pattern}: ")
    # the same setting from a YAML file is the file's business, not refused here
    assert apply(rules.pattern_flags_in_use, given(**{flag: value}), load_pattern=pattern) == {}


def test_model_with_endpoints() -> None:
    assert "--model is required with --endpoints" in refusal(
        rules.model_with_endpoints, given(), endpoints=("http://h",)
    )
    assert apply(rules.model_with_endpoints, given(), endpoints=("http://h",), model="m") == {}
    assert apply(rules.model_with_endpoints, given()) == {}  # the demo has its own model


def test_api_key_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rules.API_KEY_ENV, "sk-env")
    endpoint = {"endpoints": ("http://h",)}
    assert apply(rules.api_key, given({"api_key": "sk-flag"}), **endpoint) == {}
    assert apply(rules.api_key, given(), **endpoint) == {"api_key": "sk-env"}
    assert apply(rules.api_key, given()) == {"api_key": None}  # the demo sends none
    key_file = tmp_path / "key"
    key_file.write_text(" sk-file \nsecond line\n", encoding="utf-8")
    from_file = given({"api_key_file": str(key_file)})
    assert apply(rules.api_key, from_file, **endpoint) == {"api_key": "sk-file"}
    # a written config.yaml's redacted key is taken from the file or the environment
    redacted = given({"api_key_file": str(key_file)}, api_key="<redacted>")
    assert apply(rules.api_key, redacted, **endpoint) == {"api_key": "sk-file"}
    assert apply(rules.api_key, given(api_key="<redacted>"), **endpoint) == {"api_key": "sk-env"}


def test_api_key_mistakes(tmp_path: Path) -> None:
    both = given({"api_key": "k", "api_key_file": "f"})
    assert refusal(rules.api_key, both) == "--api_key and --api_key_file: give the API key one way"
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    assert "the file is empty" in refusal(rules.api_key, given({"api_key_file": str(empty)}))
    missing = given({"api_key_file": str(tmp_path / "missing")})
    assert "cannot read the API key" in refusal(rules.api_key, missing)


def test_route_matches_api_type() -> None:
    completions = given({"endpoints": ["http://h/v1/completions"]})
    message = refusal(rules.route_matches_api_type, completions)
    assert "names the route /v1/completions" in message
    assert "add --api-type openai-completions" in message
    assert apply(rules.route_matches_api_type, completions, api_type="openai-completions") == {}
    assert apply(rules.route_matches_api_type, given({"endpoints": ["http://h/v1"]})) == {}


def test_durations_in_order() -> None:
    message = refusal(rules.durations_in_order, given(), duration_s=600.0, max_duration_s=300.0)
    assert message == (
        "--max-duration: the maximum duration (300 s) is below the minimum duration (600 s)"
    )
    assert apply(rules.durations_in_order, given(), duration_s=60.0, max_duration_s=60.0) == {}


def test_warmup_from_yaml() -> None:
    assert apply(rules.warmup_from_yaml, given()) == {}
    enabled = given(**{"warmup.enabled": True})
    assert apply(rules.warmup_from_yaml, enabled) == {"warmup_requests": WARMUP_DATASET_PASS}
    counted = given(**{"warmup.enabled": True, "warmup.n_requests": 50})
    assert apply(rules.warmup_from_yaml, counted) == {"warmup_requests": 50}
    # a count is read only for an enabled warmup: disabled, its value is no mistake
    assert apply(rules.warmup_from_yaml, given(**{"warmup.n_requests": 0})) == {}
    bad = given(**{"warmup.enabled": True, "warmup.n_requests": 0})
    assert refusal(rules.warmup_from_yaml, bad) == (
        "warmup.n_requests: expected a positive integer, got 0"
    )


def test_derived_seeds() -> None:
    derived = apply(rules.derived_seeds, given(), **{"seeds.sample_index": 7})
    assert derived == {"seeds.salt": 9, "seeds.warmup": 7}
    chosen = {"seeds.sample_index": 7, "seeds.salt": 1, "seeds.warmup": 2}
    assert apply(rules.derived_seeds, given(), **chosen) == {}


def test_agentic_datasets() -> None:
    agentic = {"load_pattern": "agentic_inference", "datasets": (PERF, ACC)}
    (perf, acc) = apply(rules.agentic_datasets, given(), **agentic)["datasets"]
    assert (perf.agentic, acc.agentic) == (AgenticSettings(), None)
    counted = apply(rules.agentic_datasets, given(), **agentic, num_trajectories=3)["datasets"]
    assert counted[0].agentic.num_trajectories_to_issue == 3
    assert "no performance dataset of trajectories" in refusal(
        rules.agentic_datasets, given(), load_pattern="agentic_inference", datasets=(ACC,)
    )
    with_block = DatasetSpec(path="a.jsonl", agentic=AgenticSettings())
    assert "needs the agentic_inference load pattern" in refusal(
        rules.agentic_datasets, given(), datasets=(with_block,)
    )
    assert refusal(rules.agentic_datasets, given(), num_trajectories=2) == (
        "--num-trajectories: only an agentic_inference run has trajectories"
    )


AGENTIC = {"load_pattern": "agentic_inference"}


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ({"num_samples": "5"}, "--num_samples: not for an agentic_inference run: its size"),
        ({"duration_s": "5s"}, "--duration_s: not for an agentic_inference run"),
        ({"target_qps": "2"}, "--target_qps: not for an agentic_inference run"),
        ({"warmup_requests": "2"}, "--warmup_requests: an agentic_inference run has no warmup"),
        ({"engines": "2"}, "--engines: an agentic_inference run uses one engine"),
        ({"ray": "auto"}, "--ray: an agentic_inference run uses one engine"),
    ],
)
def test_agentic_run_limits(flags: dict[str, Any], said: str) -> None:
    assert refusal(rules.agentic_run_limits, given(flags), **AGENTIC).startswith(said)
    assert apply(rules.agentic_run_limits, given(flags)) == {}  # not agentic: not this rule's


def test_agentic_run_limits_name_a_yaml_warmup() -> None:
    message = refusal(rules.agentic_run_limits, given(), **AGENTIC, warmup_requests=-1)
    assert message.startswith("warmup: an agentic_inference run has no warmup")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ({"streaming": "off"}, "--streaming: not for an agentic_inference run: its turns"),
        ({"salt": False}, "--salt: not for an agentic_inference run: its salt"),
        ({"send_max_tokens": True}, "--send_max_tokens: not for an agentic_inference run"),
        ({"api_type": "openai-completions"}, "--api_type: not for an agentic_inference run"),
    ],
)
def test_agentic_requests(flags: dict[str, Any], said: str) -> None:
    assert refusal(rules.agentic_requests, given(flags), **AGENTIC).startswith(said)
    assert apply(rules.agentic_requests, given(flags)) == {}
    assert apply(rules.agentic_requests, given({"streaming": "on"}), **AGENTIC) == {}


def test_agentic_offline() -> None:
    assert apply(rules.agentic_offline, given(), **AGENTIC) == {"offline": "none"}
    assert apply(rules.agentic_offline, given({"offline": "none"}), **AGENTIC) == {
        "offline": "none"
    }
    assert "an agentic curve has no Offline point" in refusal(
        rules.agentic_offline, given({"offline": "elected"}), **AGENTIC
    )
    assert apply(rules.agentic_offline, given()) == {}


def test_default_name() -> None:
    assert apply(rules.default_name, given()) == {"name": "online_benchmark"}
    assert apply(rules.default_name, given(), load_pattern="offline") == {
        "name": "offline_benchmark"
    }
    assert apply(rules.default_name, given(name="mine")) == {}


def test_server_metrics_page_per_endpoint() -> None:
    rule = rules.server_metrics_page_per_endpoint
    two = ("http://a:1", "http://b:1")
    pages = "http://a:1/metrics,http://b:1/metrics"
    assert apply(rule, given({"server_metrics": pages}), endpoints=two) == {}
    assert apply(rule, given({"server_metrics": "http://g/m"}), endpoints=two) == {}
    assert apply(rule, given(), endpoints=two) == {}  # auto
    from_yaml = GivenSettings(
        {"server_metrics": Given(pages, "mlpe_fast.server_metrics")}, frozenset()
    )
    assert refusal(rule, from_yaml, endpoints=()) == (
        "mlpe_fast.server_metrics: 2 pages for 1 endpoint: give one URL per endpoint, in "
        "--endpoints order, or one URL for all"
    )  # no --endpoints: the demo's one simulated endpoint
    three = "http://a:1/m,http://b:1/m,http://c:1/m"
    assert refusal(rule, given({"server_metrics": three}), endpoints=two).startswith(
        "--server_metrics: 3 pages for 2 endpoints"  # the helper names a flag by its setting
    )
