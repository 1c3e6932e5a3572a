"""``config.yaml``: the resolved run configuration, in the reference's layout.

The reference writes its validated ``BenchmarkConfig`` with
``yaml.dump(..., default_flow_style=False, sort_keys=False)``, null fields
left out and secrets replaced by ``"<redacted>"`` (spec §3.1, §3.5;
``mlcommons/endpoints:src/inference_endpoint/config/schema.py``,
``BenchmarkConfig.to_yaml_file``).  The submission checker only needs a
YAML mapping; the bundle builder reads ``datasets[0].type``,
``model_params.name`` and ``settings.load_pattern.target_concurrency``.

Keys and order follow the reference's schema for everything it has;
mlpe-fast's own settings (salt, salt seed, timeouts) go to a final
``mlpe_fast:`` block, so :func:`mlpe_fast.config.load_yaml` reads the file
back into the same :class:`~mlpe_fast.config.RunConfig` (save the API key).

Redacted: ``endpoint_config.api_key``, and in every URL the user-info part
and query parameters whose names look secret (``api_key``, ``token``,
``*_key``, ``*_token``, ``*secret*``, ...), as the reference does; so are
the values of ``mlpe_fast.headers`` whose names look secret
(``Authorization``, ``Cookie``, ``X-Api-Key``, ...).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from .._version import __version__
from ..config import REDACTED, RunConfig
from ..load.dataset import DatasetSpec

__all__ = ("config_to_yaml_dict", "redact_url", "write_config_yaml")

_SECRET_NAMES = frozenset(
    {"api_key", "apikey", "access_token", "authorization", "auth_token", "password", "token"}
)


def _is_secret_name(name: str) -> bool:
    key = name.strip().lower().replace("-", "_")
    return key in _SECRET_NAMES or key.endswith(("_key", "_token", "_password")) or "secret" in key


def redact_url(url: str) -> str:
    """``url`` with credentials and secret-looking query values redacted."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.netloc:
        return url
    netloc = parts.netloc
    changed = False
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
        changed = True
    query = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if _is_secret_name(name):
            value = REDACTED
            changed = True
        query.append((name, value))
    if not changed:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))


def _ms(seconds: float | None) -> int:
    return 0 if seconds is None else round(seconds * 1000)


def config_to_yaml_dict(
    config: RunConfig, *, endpoints: Sequence[str] | None = None
) -> dict[str, Any]:
    """The mapping written to ``config.yaml`` (secrets redacted).

    Args:
        config: the resolved configuration.
        endpoints: the URLs actually used (e.g. the simulated endpoint's,
            when ``config.endpoints`` is empty); default ``config.endpoints``.
    """
    offline = config.load_pattern == "offline"
    test_type = "offline" if offline else "online"

    model_params: dict[str, Any] = {"name": config.model}
    model_params.update(
        (k, v) for k, v in config.generation.as_dict().items() if k != "chat_template_kwargs"
    )
    if config.generation.chat_template_kwargs is not None:
        model_params["chat_template_kwargs"] = dict(config.generation.chat_template_kwargs)
    model_params["max_new_tokens"] = config.max_output_tokens
    model_params["streaming"] = "on" if config.stream else "off"
    if config.tokenizer is not None:
        model_params["tokenizer_name"] = config.tokenizer

    datasets: list[dict[str, Any]] = []
    for spec in config.datasets:
        if spec.synthetic is not None:
            datasets.append(_synthetic_entry(spec))
            continue
        entry: dict[str, Any] = {"name": spec.display_name, "type": spec.type, "path": spec.path}
        if spec.format is not None:
            entry["format"] = spec.format
        if spec.samples is not None:
            entry["samples"] = spec.samples
        parser = {}
        if spec.prompt_column is not None:
            parser["prompt"] = spec.prompt_column
        if spec.system_column is not None:
            parser["system"] = spec.system_column
        if spec.input_tokens_column is not None:
            parser["input_tokens"] = spec.input_tokens_column
        if parser:
            entry["parser"] = parser
        if spec.type == "accuracy" and spec.accuracy is not None:
            accuracy: dict[str, Any] = {"ground_truth": spec.accuracy.ground_truth}
            if spec.accuracy.eval_method:
                accuracy["eval_method"] = spec.accuracy.eval_method
            if spec.accuracy.extractor:
                accuracy["extractor"] = spec.accuracy.extractor
            accuracy["num_repeats"] = spec.accuracy.num_repeats
            entry["accuracy_config"] = accuracy
        if spec.agentic is not None:
            agentic = msgspec.to_builtins(spec.agentic)
            agentic["routing_headers"] = list(spec.agentic.routing_headers)
            entry["agentic_inference"] = agentic
        if spec.generation_override is not None:
            entry["generation_config_override"] = spec.generation_override.as_dict()
        datasets.append(entry)

    runtime: dict[str, Any] = {
        "min_duration_ms": _ms(config.duration_s),
        "max_duration_ms": _ms(config.max_duration_s),
    }
    if config.num_samples is not None:
        runtime["n_samples_to_issue"] = config.num_samples
    runtime["scheduler_random_seed"] = config.seeds.scheduler
    runtime["dataloader_random_seed"] = config.seeds.sample_index

    load_pattern: dict[str, Any] = {"type": "max_throughput" if offline else config.load_pattern}
    if config.target_qps is not None:
        load_pattern["target_qps"] = config.target_qps
    if config.load_pattern in ("concurrency", "agentic_inference"):
        load_pattern["target_concurrency"] = config.concurrency
    if config.load_pattern == "poisson":
        load_pattern["use_legacy_loadgen_qps_metrics"] = config.use_legacy_loadgen_qps_metrics

    warmup: dict[str, Any] = {"enabled": config.warmup_requests != 0}
    if config.warmup_requests > 0:
        warmup["n_requests"] = config.warmup_requests
    warmup["salt"] = config.warmup_salt
    warmup["drain"] = config.warmup_drain
    warmup["warmup_random_seed"] = config.seeds.warmup_seed

    endpoint_config: dict[str, Any] = {
        "endpoints": [redact_url(u) for u in (config.endpoints if endpoints is None else endpoints)]
    }
    if config.api_key is not None:
        endpoint_config["api_key"] = REDACTED
    # The reference's YAML spellings (its APIType values).
    endpoint_config["api_type"] = (
        "openai_completions" if config.api_type == "openai-completions" else config.api_type
    )

    timeouts: dict[str, Any] = {
        "connect_s": config.timeouts.connect_s,
        "idle_s": config.timeouts.idle_s,
    }
    if config.timeouts.total_s is not None:
        timeouts["total_s"] = config.timeouts.total_s

    out: dict[str, Any] = {
        "name": config.name or f"{test_type}_benchmark",
        "version": "1.0",
        "type": test_type,
    }
    if config.mlperf_model:
        out["submission_ref"] = {"model": config.mlperf_model}
    out |= {
        "model_params": model_params,
        "datasets": datasets,
        "settings": {"runtime": runtime, "load_pattern": load_pattern, "warmup": warmup},
    }
    client: dict[str, Any] = {}
    if config.max_connections is not None:
        client["max_connections"] = config.max_connections
    if config.warmup_connections is not None:  # auto (the reference's -1) is left out
        client["warmup_connections"] = config.warmup_connections
    if config.insecure:
        client["insecure"] = True
    if client:
        out["settings"]["client"] = client
    out["endpoint_config"] = endpoint_config
    if config.report_dir is not None:
        out["report_dir"] = config.report_dir
    out["mlpe_fast"] = {
        "version": __version__,
        "mode": config.mode,
        "salt": config.salt,
        "salt_random_seed": config.seeds.salt_seed,
        "timeouts": timeouts,
    }
    if config.token_salt != "user":
        out["mlpe_fast"]["token_salt"] = config.token_salt
    if config.harmony != "auto":
        out["mlpe_fast"]["harmony"] = config.harmony
    if config.harmony_date is not None:  # the prompts' date: the run repeats token for token
        out["mlpe_fast"]["harmony_date"] = config.harmony_date
    if config.send_max_tokens:
        out["mlpe_fast"]["send_max_tokens"] = True
    if config.min_passes and config.duration_s is not None:  # they extend a duration only
        out["mlpe_fast"]["min_passes"] = config.min_passes
    if config.http2:
        out["mlpe_fast"]["http2"] = True
    if config.ca_bundle is not None:
        out["mlpe_fast"]["ca_bundle"] = config.ca_bundle
    if config.receive_stamps != "kernel":
        out["mlpe_fast"]["receive_stamps"] = config.receive_stamps
    if config.receive_priority is not None:
        out["mlpe_fast"]["receive_priority"] = config.receive_priority or "off"
    if config.receive_cpus:
        out["mlpe_fast"]["receive_cpu"] = list(config.receive_cpus)
    if config.engines != 1:
        out["mlpe_fast"]["engines"] = config.engines or "auto"
        out["mlpe_fast"]["min_streams_per_engine"] = config.min_streams_per_engine
    if config.ray is not None:
        out["mlpe_fast"]["ray"] = config.ray
    if config.headers:
        out["mlpe_fast"]["headers"] = {
            name: REDACTED if _is_secret_header(name) else value for name, value in config.headers
        }
    if config.extra_body is not None:
        out["mlpe_fast"]["extra_body"] = dict(config.extra_body)
    if config.reset_prefix_cache is not None:
        out["mlpe_fast"]["reset_prefix_cache"] = config.reset_prefix_cache
    if config.tokenizer_check != "auto":
        out["mlpe_fast"]["tokenizer_check"] = config.tokenizer_check
    if config.server_metrics != "auto":
        out["mlpe_fast"]["server_metrics"] = config.server_metrics
    if config.server_metrics_interval_s != 1.0:
        out["mlpe_fast"]["server_metrics_interval_s"] = config.server_metrics_interval_s
    if config.goodput is not None:  # not an MLPerf metric; the file, run again, reports it too
        out["mlpe_fast"]["goodput"] = config.goodput.bounds()
    return out


def _synthetic_entry(spec: DatasetSpec) -> dict[str, Any]:
    """A synthetic dataset's entry: its keys as given, with the seed the run
    used (``load/synthetic_spec.py``), so the file builds the same prompts."""
    synthetic = spec.synthetic
    assert synthetic is not None
    block: dict[str, Any] = {"isl": synthetic.isl.text, "osl": synthetic.osl.text}
    if synthetic.prefix:
        block["prefix"] = synthetic.prefix
    block["samples"] = synthetic.samples
    if synthetic.seed is not None:
        block["seed"] = synthetic.seed
    entry: dict[str, Any] = {"name": spec.display_name, "type": spec.type, "synthetic": block}
    if spec.generation_override is not None:
        entry["generation_config_override"] = spec.generation_override.as_dict()
    return entry


def _is_secret_header(name: str) -> bool:
    """A header whose value is a credential (``Authorization``, ``Cookie``,
    ``X-Api-Key``, ...): written redacted, as the API key is."""
    return _is_secret_name(name) or name.strip().lower() in ("cookie", "proxy-authorization")


def write_config_yaml(
    path: str | os.PathLike[str],
    config: RunConfig,
    *,
    endpoints: Sequence[str] | None = None,
) -> None:
    """Writes ``config.yaml`` (see :func:`config_to_yaml_dict`)."""
    yaml: Any = importlib.import_module("yaml")  # untyped; see mlpe_fast.config.yaml_file._yaml
    text = yaml.safe_dump(
        config_to_yaml_dict(config, endpoints=endpoints),
        default_flow_style=False,
        sort_keys=False,
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
