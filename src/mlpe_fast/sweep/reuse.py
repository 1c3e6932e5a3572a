"""Whether a point measured before may stand for a point of this curve.

A curve re-run into the same ``--report-dir`` skips the points that are
complete already, but only those measured with this run's settings: a
point measured against another endpoint, with another sample count, model,
dataset, seed or streaming setting would put other numbers on the curve
than the ones the run asks for (spec §2.4: "same model, endpoint config,
software stack, dataset and seed set at every point").

The settings compared are what the point's ``config.yaml`` holds
(:func:`mlpe_fast.artifacts.config_yaml.config_to_yaml_dict`, written first
into every run folder): what this run would write for the point against
what is stored, key by key, except what does not change the numbers:

* ``report_dir`` (the folder may have moved), ``name`` (a label), the
  mlpe-fast version, the API key (only ever stored redacted), the CA bundle
  and ``insecure`` (how the endpoint's certificate is checked),
  ``--tokenizer-check`` (it asks before the load) and ``--goodput`` (read
  from the point's figures; a reused point keeps the block it was measured
  with, docs/metrics.md);
* ``mlpe_fast.mode``: a point measured with ``both`` serves one that needs
  ``perf`` (its accuracy run is extra); one that needs an accuracy run it
  lacks is re-measured anyway (``runner._done``);
* accuracy datasets, for a point that has no accuracy run.

The simulated endpoint of the demo (no ``--endpoints``) listens on another
port each time: a demo point stands for a demo point when the stored
endpoint is a loopback ``http://`` URL; its other settings are compared as
usual.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ..artifacts.config_yaml import config_to_yaml_dict
from ..config import RunConfig

__all__ = ("differences", "point_settings")

_ABSENT = object()

#: Keys whose values do not change a point's numbers (module docstring).
_IGNORED: frozenset[tuple[str, ...]] = frozenset(
    {
        ("report_dir",),
        ("name",),
        ("mlpe_fast", "version"),
        ("mlpe_fast", "ca_bundle"),
        ("endpoint_config", "api_key"),
        ("settings", "client", "insecure"),
        ("mlpe_fast", "tokenizer_check"),
        ("mlpe_fast", "goodput"),
    }
)
_ENDPOINTS = ("endpoint_config", "endpoints")
_MODE = ("mlpe_fast", "mode")

#: The flag that sets a key, shown next to it (the longest prefix wins).
_FLAGS: dict[tuple[str, ...], str] = {
    ("model_params", "name"): "--model",
    ("model_params", "max_new_tokens"): "--max-output-tokens",
    ("model_params", "streaming"): "--streaming",
    ("model_params", "tokenizer_name"): "--tokenizer",
    ("datasets",): "--dataset",
    ("settings", "runtime", "n_samples_to_issue"): "--num-samples",
    ("settings", "runtime", "min_duration_ms"): "--duration",
    ("settings", "runtime", "max_duration_ms"): "--max-duration",
    ("settings", "runtime", "scheduler_random_seed"): "--scheduler-seed",
    ("settings", "runtime", "dataloader_random_seed"): "--sample-index-seed",
    ("settings", "warmup", "warmup_random_seed"): "--warmup-seed",
    ("settings", "warmup"): "--warmup-*",
    ("settings", "client", "max_connections"): "--max-connections",
    ("endpoint_config", "endpoints"): "--endpoints",
    ("endpoint_config", "api_type"): "--api-type",
    ("submission_ref", "model"): "--mlperf-model",
    ("mlpe_fast", "mode"): "--mode",
    ("mlpe_fast", "salt"): "--salt",
    ("mlpe_fast", "salt_random_seed"): "--salt-seed",
    ("mlpe_fast", "token_salt"): "--token-salt",
    ("mlpe_fast", "timeouts"): "--timeout-*",
    ("mlpe_fast", "http2"): "--http2",
    ("mlpe_fast", "headers"): "--header",
    ("mlpe_fast", "extra_body"): "--extra-body",
    ("mlpe_fast", "reset_prefix_cache"): "--reset-prefix-cache",
    ("mlpe_fast", "send_max_tokens"): "--send-max-tokens",
    ("mlpe_fast", "receive_stamps"): "--receive-stamps",
    ("mlpe_fast", "receive_priority"): "--receive-priority",
    ("mlpe_fast", "receive_cpu"): "--receive-cpu",
    ("mlpe_fast", "engines"): "--engines",
    ("mlpe_fast", "min_streams_per_engine"): "--min-streams-per-engine",
    ("mlpe_fast", "ray"): "--ray",
}


def point_settings(config: RunConfig, endpoints: Sequence[str] | None) -> dict[str, Any]:
    """What ``config.yaml`` of the point ``config`` measures would hold, read
    back as the stored one is (YAML types); ``endpoints`` None: the demo's
    simulated endpoint, not started yet."""
    yaml: Any = importlib.import_module("yaml")  # untyped; see mlpe_fast.config.yaml_file._yaml
    mapping = config_to_yaml_dict(config, endpoints=list(endpoints or ()))
    loaded: dict[str, Any] = yaml.safe_load(yaml.safe_dump(mapping, sort_keys=False))
    return loaded


def _loopback_http(url: object) -> bool:
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")


def _perf_datasets(settings: Mapping[str, Any]) -> dict[str, Any]:
    datasets = settings.get("datasets")
    if not isinstance(datasets, list):
        return dict(settings)
    kept = [d for d in datasets if not (isinstance(d, dict) and d.get("type") == "accuracy")]
    return {**settings, "datasets": kept}


def _name(path: tuple[str | int, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    keys = tuple(p for p in path if isinstance(p, str))
    for end in range(len(keys), 0, -1):
        if (flag := _FLAGS.get(keys[:end])) is not None:
            return f"{text} ({flag})"
    return text


def _show(value: object) -> str:
    if value is _ABSENT or value is None:
        text = "unset"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list):
        text = ", ".join(_show(v) for v in value) or "[]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    else:
        text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def differences(
    stored: Mapping[str, Any], wanted: Mapping[str, Any], *, simulated: bool = False
) -> list[str]:
    """What differs between a stored point's ``config.yaml`` and what this
    run's point would write (:func:`point_settings`), as ``key (--flag) old
    -> new`` lines in the file's order; empty when the point may be reused.

    ``simulated``: this run measures the demo's simulated endpoint (module
    docstring).
    """
    if wanted.get("mlpe_fast", {}).get("mode") == "perf":
        stored, wanted = _perf_datasets(stored), _perf_datasets(wanted)
    found: list[str] = []

    def walk(old: Any, new: Any, path: tuple[str | int, ...]) -> None:
        if path in _IGNORED:
            return
        if path == _MODE and old == "both" and new == "perf":
            return
        if path == _ENDPOINTS and simulated:
            if not (isinstance(old, list) and len(old) == 1 and _loopback_http(old[0])):
                found.append(f"{_name(path)} {_show(old)} -> the simulated endpoint")
            return
        if isinstance(old, dict) or isinstance(new, dict):  # a block set on one side only
            old = old if isinstance(old, dict) or old is not _ABSENT else {}
            new = new if isinstance(new, dict) or new is not _ABSENT else {}
        if isinstance(old, dict) and isinstance(new, dict):
            for key in [*new, *(k for k in old if k not in new)]:
                walk(old.get(key, _ABSENT), new.get(key, _ABSENT), (*path, key))
            return
        if (
            isinstance(old, list)
            and isinstance(new, list)
            and len(old) == len(new)
            and all(isinstance(v, dict) for v in (*old, *new))
        ):  # datasets, one by one
            for index, (a, b) in enumerate(zip(old, new, strict=True)):
                walk(a, b, (*path, index))
            return
        if old != new or isinstance(old, bool) != isinstance(new, bool):
            found.append(f"{_name(path)} {_show(old)} -> {_show(new)}")

    walk(dict(stored), dict(wanted), ())
    return found
