"""The one run configuration, from the command line and/or a YAML file.

:class:`RunConfig` is what ``mlpe-fast run`` executes.  It is built by
:func:`resolve` from the ``run`` flags (:func:`add_run_arguments`) and an
optional YAML file (:func:`load_yaml`); a flag given on the command line
overrides the same setting in the file.

Names follow the reference client, mlcommons/endpoints, so that its command
lines and YAML files carry over (reference-client.md §3.1-3.2,
``src/inference_endpoint/config/schema.py``):

* flags: ``--endpoints``, ``--model``, ``--dataset`` (repeatable),
  ``--tokenizer``, ``--load-pattern``, ``--concurrency``, ``--target-qps``,
  ``--num-samples``, ``--duration``, ``--streaming``,
  ``--max-output-tokens``, ``--report-dir``, ``--api-key``, ``--api-type``,
  ``--warmup-requests``; mlpe-fast adds ``--timeout-connect``,
  ``--timeout-idle``, ``--timeout-total``, ``--salt/--no-salt`` and the
  seed flags.
* YAML keys: ``endpoint_config.{endpoints, api_key, api_type}``,
  ``model_params.{name, max_new_tokens, streaming, tokenizer_name,
  temperature, seed, top_k, top_p, ...}``, ``datasets[].{name, type, path,
  format, samples, parser.prompt, parser.system}``,
  ``settings.load_pattern.{type, target_qps, target_concurrency}``,
  ``settings.runtime.{n_samples_to_issue, min_duration_ms,
  max_duration_ms, scheduler_random_seed, dataloader_random_seed}``,
  ``settings.warmup.*``, ``report_dir``; what only mlpe-fast has lives
  under a top-level ``mlpe_fast:`` block (``salt``, ``salt_random_seed``,
  ``timeouts.{connect_s, idle_s, total_s}``).  Keys of the reference that
  configure its own machinery (``settings.client``, ``settings.drain``,
  ``enable_cpu_affinity``, ...) are accepted and have no effect; any other
  key is an error that names it.  Strings may use ``${VAR}``,
  ``${VAR:-default}`` and ``$$``, as in the reference.

Values as in the reference: ``--duration`` and ``min_duration_ms`` are
milliseconds unless suffixed (``600s``, ``10m``, ``1h``, ``500ms``);
``--load-pattern`` takes ``max_throughput`` (alias ``offline``),
``concurrency`` or ``poisson``; ``--api-type`` takes ``openai`` or
``openai-completions`` (``openai_completions`` in YAML);
``streaming: auto`` means on except for the Offline burst.

Seeds (spec §2.5) default to MLPerf seed set A.  The salt seed defaults to
``sample_index + 2``: the reference's only salt generator is
``random.Random(warmup_random_seed + 2)`` with the warmup seed pinned to the
sample-index seed by a ruleset (``mlpe_fast.load.salt``).  The warmup seed
defaults to the sample-index seed, as under a pinned ruleset.

Every mistake raises :class:`mlpe_fast.errors.UsageError` with one line that
names the flag or key and the bad value; the CLI exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from .accuracy.methods import check_scorer_packages
from .engine.client import REDACTED
from .errors import UsageError
from .load.agentic import AgenticSettings
from .load.dataset import DATASET_FORMATS, DatasetSpec, accuracy_config, parse_dataset_arg
from .load.salt import default_salt_seed

__all__ = (
    "REDACTED",
    "SEED_SET_A_MODEL",
    "SEED_SET_A_SAMPLE_INDEX",
    "SEED_SET_A_SCHEDULER",
    "WARMUP_DATASET_PASS",
    "ApiType",
    "DatasetSpec",
    "Mode",
    "OfflineKind",
    "Generation",
    "LoadPattern",
    "RunConfig",
    "Seeds",
    "Streaming",
    "Timeouts",
    "add_run_arguments",
    "dataset_from_yaml",
    "load_yaml",
    "resolve",
)

logger = logging.getLogger(__name__)

LoadPattern = Literal["concurrency", "offline", "poisson", "agentic_inference"]
Mode = Literal["perf", "acc", "both"]
ReceiveStamps = Literal["kernel", "read"]
OfflineKind = Literal["dedicated", "elected", "none"]
ApiType = Literal["openai", "openai-completions"]
Streaming = Literal["auto", "on", "off"]

# MLPerf Endpoints seed set A (cohort 2026-10-C1; spec §2.5).
SEED_SET_A_SCHEDULER = 10487924139932647040
SEED_SET_A_SAMPLE_INDEX = 586478644936801402
SEED_SET_A_MODEL = 9315206023656308754

WARMUP_DATASET_PASS = -1
"""``warmup_requests`` value for "warmup issues the dataset once" (the
reference's ``settings.warmup`` with ``enabled: true`` and no ``n_requests``)."""


class Timeouts(msgspec.Struct, frozen=True, kw_only=True):
    """Per-request limits (the reference has none; reference-client.md §1.2).

    Attributes:
        connect_s: to open a connection.
        idle_s: longest silence while a response is awaited or streamed
            (spec §3.5 recommends an idle timeout of at least 300 s).
        total_s: whole request, None for no limit.
    """

    connect_s: float = 10.0
    idle_s: float = 300.0
    total_s: float | None = None


class Seeds(msgspec.Struct, frozen=True, kw_only=True):
    """RNG seeds (spec §2.5); defaults are seed set A.

    ``salt`` and ``warmup`` default (None) to values derived from
    ``sample_index``; :func:`resolve` always fills them in.
    """

    scheduler: int = SEED_SET_A_SCHEDULER
    sample_index: int = SEED_SET_A_SAMPLE_INDEX
    salt: int | None = None
    warmup: int | None = None

    @property
    def salt_seed(self) -> int:
        """The performance phase's salt seed: ``salt``, else ``sample_index + 2``."""
        return default_salt_seed(self.sample_index) if self.salt is None else self.salt

    @property
    def warmup_seed(self) -> int:
        """The warmup phase's base seed: ``warmup``, else ``sample_index``.

        As in the reference: scheduler ``seed``, sample order ``seed + 1``,
        salt ``seed + 2``.
        """
        return self.sample_index if self.warmup is None else self.warmup


class Generation(msgspec.Struct, frozen=True, kw_only=True):
    """Optional sampling parameters sent in every request (None: not sent)."""

    temperature: float | None = None
    seed: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The parameters that are set, by request field name."""
        return {
            name: getattr(self, name)
            for name in self.__struct_fields__
            if getattr(self, name) is not None
        }


class RunConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one ``mlpe-fast run`` point needs.

    Attributes:
        endpoints: base URLs (``http://host:port``); empty starts the
            built-in simulated endpoint.
        model: the ``model`` field of every request.
        api_key: sent as ``Authorization: Bearer``; never written to disk.
        api_type: "openai" (``/v1/chat/completions``) or
            "openai-completions" (``/v1/completions``).
        datasets: in configuration order.
        tokenizer: Hugging Face id or local path for token counts (None:
            the model name, as the reference).
        load_pattern: "concurrency", "offline" (the reference's
            ``max_throughput``) or "poisson".
        concurrency: requests in flight for "concurrency".
        target_qps: arrival rate for "poisson".
        num_samples: queries to issue (the reference's
            ``n_samples_to_issue``); None: the scheduler decides.
        duration_s: minimum issue duration (``min_duration_ms``); None when
            unset or 0.
        max_duration_s: cap on the performance phase (``max_duration_ms``).
        warmup_requests: 0 for no warmup, N, or :data:`WARMUP_DATASET_PASS`.
        warmup_salt: salt warmup queries (default on: warmup may use
            performance samples, spec §2.4).
        warmup_drain: wait for warmup responses before measuring.
        streaming: "on", "off" or "auto": on except for an Offline point
            (:attr:`stream`; a curve's dedicated Offline point too).
        max_output_tokens: ``max_completion_tokens`` (chat) or
            ``max_tokens`` (completions).
        send_max_tokens: chat requests carry ``max_tokens`` too, for
            servers that honour only the older field (YAML
            ``mlpe_fast.send_max_tokens``).
        generation: optional sampling parameters.
        report_dir: run folder; None lets the runner choose.
        timeouts: per-request limits.
        seeds: RNG seeds.
        salt: salt performance queries (spec §2.5; accuracy never is).
        name: benchmark name (YAML ``name``; by default "online_benchmark"
            or "offline_benchmark", as the reference derives it).
        use_legacy_loadgen_qps_metrics: the reference's Poisson QPS window
            option, passed on to metrics.
        mode: "perf" (the performance phase), "acc" (the accuracy phase
            only) or "both" (accuracy right after performance, spec §2.4).
        mlperf_model: the benchmark's canonical model name (spec §2.8,
            YAML ``submission_ref.model``), for the accuracy gate; "" when
            unknown.
        sweep: the concurrencies of a curve (``--concurrency 1,4,16``);
            empty for one point at ``concurrency``.
        max_concurrency: the system's C_max (``--max-concurrency``); with
            no list, the sweep's points are planned from it (spec §2.1-2.2).
        offline: the curve's Offline point (spec §2.3): "dedicated" (a
            burst of the whole dataset), "elected" (the C_max point) or
            "none".
        whole_passes: a duration ends at the end of a dataset pass (spec
            §2.4; set for the points of a curve).
        max_connections: the client's connection cap (YAML
            ``settings.client.max_connections``); None: one per request.
        http2: speak HTTP/2: h2c with prior knowledge on ``http://``, ALPN
            on ``https://`` (YAML ``mlpe_fast.http2``).
        ca_bundle: PEM file of the CAs trusted for ``https://`` endpoints
            (YAML ``mlpe_fast.ca_bundle``); None: the system's.
        insecure: skip TLS certificate verification (YAML
            ``settings.client.insecure``, as in the reference).
        receive_stamps: "kernel" stamps cleartext reads (HTTP/1.1, h2c) with the
            kernel's arrival stamps where it gives them (Linux); "read"
            stamps every read as it is read (YAML
            ``mlpe_fast.receive_stamps``).
        engines: event-loop processes that share a point's load (YAML
            ``mlpe_fast.engines``); 0 means one per usable core.  A point
            uses fewer when its load is small (``min_streams_per_engine``).
        min_streams_per_engine: the fewest streams worth an engine of their
            own: a point at concurrency C runs on at most
            ``ceil(C / min_streams_per_engine)`` engines (YAML
            ``mlpe_fast.min_streams_per_engine``).
        ray: run the engines on a Ray cluster: ``auto`` or the head's
            ``HOST:PORT`` (YAML ``mlpe_fast.ray``); ``engines`` is then per
            node.  None: on this machine.
        dry_run: print the plan (and a curve's warnings) and stop: no
            request, no file written (``--dry-run``; not a YAML setting).
    """

    endpoints: tuple[str, ...] = ()
    model: str = ""
    api_key: str | None = None
    api_type: ApiType = "openai"
    datasets: tuple[DatasetSpec, ...] = ()
    tokenizer: str | None = None
    load_pattern: LoadPattern = "concurrency"
    concurrency: int = 1
    target_qps: float | None = None
    num_samples: int | None = None
    duration_s: float | None = None
    max_duration_s: float | None = None
    warmup_requests: int = 0
    warmup_salt: bool = True
    warmup_drain: bool = False
    streaming: Streaming = "auto"
    max_output_tokens: int = 1024
    send_max_tokens: bool = False
    generation: Generation = Generation()
    report_dir: str | None = None
    timeouts: Timeouts = Timeouts()
    seeds: Seeds = Seeds()
    salt: bool = True
    name: str = ""
    use_legacy_loadgen_qps_metrics: bool = True
    mode: Mode = "perf"
    mlperf_model: str = ""
    sweep: tuple[int, ...] = ()
    max_concurrency: int | None = None
    offline: OfflineKind = "dedicated"
    whole_passes: bool = False
    max_connections: int | None = None
    http2: bool = False
    ca_bundle: str | None = None
    insecure: bool = False
    receive_stamps: ReceiveStamps = "kernel"
    engines: int = 1
    min_streams_per_engine: int = 64
    ray: str | None = None
    dry_run: bool = False

    @property
    def stream(self) -> bool:
        """Whether requests ask for a streamed response."""
        if self.streaming == "auto":
            return self.load_pattern != "offline"
        return self.streaming == "on"

    @property
    def route(self) -> str:
        """The request path for ``api_type``."""
        if self.api_type == "openai-completions":
            return "/v1/completions"
        return "/v1/chat/completions"

    @property
    def performance_datasets(self) -> tuple[DatasetSpec, ...]:
        return tuple(d for d in self.datasets if d.type == "performance")

    @property
    def accuracy_datasets(self) -> tuple[DatasetSpec, ...]:
        return tuple(d for d in self.datasets if d.type == "accuracy")


# YAML ---------------------------------------------------------------------------------


def _yaml() -> Any:
    # PyYAML ships no type information; importing it by name keeps mypy
    # --strict clean with or without the types-PyYAML stubs installed.
    return importlib.import_module("yaml")


class _Ignored:
    """A reference key that configures the reference's own machinery."""

    def __init__(self, subtree: bool = False) -> None:
        self.subtree = subtree


class _Unsupported:
    """A reference key for a feature mlpe-fast does not have."""

    def __init__(self, what: str) -> None:
        self.what = what


_IGNORE = _Ignored()
_IGNORE_TREE = _Ignored(subtree=True)

_Schema = Mapping[str, "str | _Ignored | _Unsupported | _Schema"]

# YAML key -> internal field name (or marker); "datasets" is handled apart.
_SCHEMA: _Schema = {
    "name": "name",
    "version": _IGNORE,
    "type": "type",
    "submission_ref": {"model": "mlperf_model", "ruleset": _IGNORE},
    "benchmark_mode": "benchmark_mode",
    "model_params": {
        "name": "model",
        "max_new_tokens": "max_output_tokens",
        "streaming": "streaming",
        "tokenizer_name": "tokenizer",
        "temperature": "gen.temperature",
        "seed": "gen.seed",
        "top_k": "gen.top_k",
        "top_p": "gen.top_p",
        "repetition_penalty": "gen.repetition_penalty",
        "presence_penalty": "gen.presence_penalty",
        "frequency_penalty": "gen.frequency_penalty",
        "chat_template_kwargs": "gen.chat_template_kwargs",
        "min_new_tokens": _IGNORE,
        "skip_special_tokens": _IGNORE,
        "osl_distribution": _IGNORE_TREE,
    },
    "settings": {
        "runtime": {
            "min_duration_ms": "duration",
            "max_duration_ms": "max_duration",
            "n_samples_to_issue": "num_samples",
            "scheduler_random_seed": "seed.scheduler",
            "dataloader_random_seed": "seed.sample_index",
            # the seed-set names of the submission rules (spec §2.5)
            "scheduler_rng_seed": "seed.scheduler",
            "sample_index_rng_seed": "seed.sample_index",
        },
        "load_pattern": {
            "type": "load_pattern",
            "target_qps": "target_qps",
            "target_concurrency": "concurrency",
            "use_legacy_loadgen_qps_metrics": "legacy_qps",
        },
        "warmup": {
            "enabled": "warmup.enabled",
            "n_requests": "warmup.n_requests",
            "salt": "warmup.salt",
            "drain": "warmup.drain",
            "warmup_random_seed": "seed.warmup",
        },
        "client": {
            "max_connections": "max_connections",
            "insecure": "insecure",
            "*": _IGNORE_TREE,
        },
        "drain": _IGNORE_TREE,
        "profiling": _IGNORE_TREE,
        "early_stopping": _IGNORE_TREE,
        "service_ready_timeout_s": _IGNORE,
    },
    "endpoint_config": {
        "endpoints": "endpoints",
        "api_key": "api_key",
        "api_type": "api_type",
    },
    "report_dir": "report_dir",
    "timeout": _IGNORE,
    "verbose": _IGNORE,
    "enable_cpu_affinity": _IGNORE,
    "audit": _Unsupported("compliance audits"),
    "mlpe_fast": {
        "version": _IGNORE,
        "mode": "mode",
        "salt": "salt",
        "salt_random_seed": "seed.salt",
        "http2": "http2",
        "ca_bundle": "ca_bundle",
        "receive_stamps": "receive_stamps",
        "send_max_tokens": "send_max_tokens",
        "api_key_file": "api_key_file",
        "engines": "engines",
        "min_streams_per_engine": "min_streams_per_engine",
        "ray": "ray",
        "timeouts": {
            "connect_s": "timeout.connect",
            "idle_s": "timeout.idle",
            "total_s": "timeout.total",
        },
    },
}

_DATASET_KEYS = (
    "name",
    "type",
    "path",
    "format",
    "samples",
    "parser",
    "accuracy_config",
    "agentic_inference",
)
_DATASET_IGNORED = ("eval_method",)
_DATASET_UNSUPPORTED = {
    "generate_params": "predefined dataset generation",
    "generation_config_override": "per-dataset generation overrides",
}

_ENV_VAR = re.compile(r"\$\$|\$\{([A-Za-z_]\w*)(?::-([^}]*))?\}|\$([A-Za-z_]\w*)")


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a run configuration file.

    Environment variables in string values are substituted and every key is
    checked against the schema (module docstring).

    Raises:
        UsageError: missing file, invalid YAML (with line and column), not a
            mapping, an unset environment variable, an unknown key.
    """
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"-c/--config: file not found: {where}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"-c/--config: cannot read {where}: {_one_line(e)}") from None
    yaml = _yaml()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or _one_line(e)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise UsageError(f"{where}{at}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of settings, got {_kind(data)}")
    try:
        substituted: dict[str, Any] = _substitute_env(data, "")
        _, entries = _flatten_yaml(substituted)
        for entry, entry_where in entries:
            dataset_from_yaml(entry, entry_where)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    return substituted


def _substitute_env(value: Any, key: str) -> Any:
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name = match.group(1) or match.group(3)
            found = os.environ.get(name)
            if found is not None:
                return found
            if match.group(2) is not None:
                return match.group(2)
            raise UsageError(f"{key}: environment variable ${name} is not set (no default)")

        return _ENV_VAR.sub(replace, value)
    if isinstance(value, dict):
        return {k: _substitute_env(v, _join(key, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute_env(v, f"{key}[{i}]") for i, v in enumerate(value)]
    return value


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


_Fields = dict[str, tuple[Any, str]]  # field -> (value, where it came from)


def _flatten_yaml(data: Mapping[str, Any]) -> tuple[_Fields, list[tuple[Mapping[str, Any], str]]]:
    """Maps YAML keys to fields; returns the fields and the dataset entries."""
    fields: _Fields = {}
    datasets: list[tuple[Mapping[str, Any], str]] = []
    if "datasets" in data:
        entries = data["datasets"]
        if entries is not None:
            if not isinstance(entries, list):
                raise UsageError(f"datasets: expected a list of datasets, got {_kind(entries)}")
            for i, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    raise UsageError(f"datasets[{i}]: expected a mapping, got {_kind(entry)}")
                datasets.append((entry, f"datasets[{i}]"))
    _walk(data, _SCHEMA, "", fields, skip=("datasets",))
    return fields, datasets


def _walk(
    data: Mapping[str, Any],
    schema: _Schema,
    prefix: str,
    fields: _Fields,
    skip: Sequence[str] = (),
) -> None:
    for key, value in data.items():
        where = _join(prefix, str(key))
        if key in skip:
            continue
        target = schema.get(str(key), schema.get("*"))  # "*": any other key
        if target is None:
            raise UsageError(f"unknown key {where!r}")
        if value is None:  # YAML null: not set
            continue
        if isinstance(target, _Ignored):
            logger.debug("config key %s has no effect in mlpe-fast", where)
        elif isinstance(target, _Unsupported):
            raise UsageError(f"{where}: {target.what} are not supported by mlpe-fast")
        elif isinstance(target, str):
            if target in fields and fields[target][0] != value:
                raise UsageError(
                    f"{where} ({value!r}) contradicts {fields[target][1]} ({fields[target][0]!r})"
                )
            fields[target] = (value, where)
        elif not isinstance(value, dict):
            raise UsageError(f"{where}: expected a mapping, got {_kind(value)}")
        else:
            _walk(value, target, where, fields)


# Command line -------------------------------------------------------------------------

# argparse dest -> (field, flag as shown in messages)
_FLAGS: dict[str, tuple[str, str]] = {
    "endpoints": ("endpoints", "--endpoints"),
    "model": ("model", "--model"),
    "api_key": ("api_key", "--api-key"),
    "api_key_file": ("api_key_file", "--api-key-file"),
    "send_max_tokens": ("send_max_tokens", "--send-max-tokens"),
    "api_type": ("api_type", "--api-type"),
    "tokenizer": ("tokenizer", "--tokenizer"),
    "load_pattern": ("load_pattern", "--load-pattern"),
    "concurrency": ("concurrency", "--concurrency"),
    "target_qps": ("target_qps", "--target-qps"),
    "num_samples": ("num_samples", "--num-samples"),
    "duration": ("duration", "--duration"),
    "max_duration": ("max_duration", "--max-duration"),
    "warmup_requests": ("warmup.requests", "--warmup-requests"),
    "warmup_salt": ("warmup.salt", "--warmup-salt"),
    "warmup_drain": ("warmup.drain", "--warmup-drain"),
    "streaming": ("streaming", "--streaming"),
    "max_output_tokens": ("max_output_tokens", "--max-output-tokens"),
    "report_dir": ("report_dir", "--report-dir"),
    "timeout_connect": ("timeout.connect", "--timeout-connect"),
    "timeout_idle": ("timeout.idle", "--timeout-idle"),
    "timeout_total": ("timeout.total", "--timeout-total"),
    "salt": ("salt", "--salt/--no-salt"),
    "scheduler_seed": ("seed.scheduler", "--scheduler-seed"),
    "sample_index_seed": ("seed.sample_index", "--sample-index-seed"),
    "salt_seed": ("seed.salt", "--salt-seed"),
    "warmup_seed": ("seed.warmup", "--warmup-seed"),
    "mode": ("mode", "--mode"),
    "mlperf_model": ("mlperf_model", "--mlperf-model"),
    "max_concurrency": ("max_concurrency", "--max-concurrency"),
    "offline": ("offline", "--offline"),
    "max_connections": ("max_connections", "--max-connections"),
    "http2": ("http2", "--http2"),
    "ca_bundle": ("ca_bundle", "--ca-bundle"),
    "insecure": ("insecure", "--insecure"),
    "receive_stamps": ("receive_stamps", "--receive-stamps"),
    "engines": ("engines", "--engines"),
    "min_streams_per_engine": ("min_streams_per_engine", "--min-streams-per-engine"),
    "ray": ("ray", "--ray"),
    "num_trajectories": ("num_trajectories", "--num-trajectories"),
    "dry_run": ("dry_run", "--dry-run"),
}


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``run`` flags to ``parser``.

    Every flag defaults to None ("not given") so that :func:`resolve` can
    tell a flag from a YAML value; values are checked by :func:`resolve`,
    which raises :class:`UsageError`, not by argparse.
    """
    p = parser.add_argument_group("endpoint")
    p.add_argument("-c", "--config", metavar="FILE", help="YAML run configuration")
    p.add_argument(
        "--endpoints",
        nargs="+",
        action="extend",
        metavar="URL",
        help="endpoint base URL(s), e.g. http://localhost:8000 "
        "(none: start the built-in simulated endpoint)",
    )
    p.add_argument("--model", help="model name sent in every request")
    p.add_argument(
        "--api-key",
        metavar="KEY",
        help="API key (Authorization: Bearer); visible to ps: prefer --api-key-file or "
        "OPENAI_API_KEY, read when neither flag is given",
    )
    p.add_argument(
        "--api-key-file", metavar="FILE", help="read the API key from FILE (its first line)"
    )
    p.add_argument(
        "--max-connections",
        metavar="N",
        help="at most N connections; more requests wait for one (default: one per request)",
    )
    p.add_argument(
        "--api-type",
        metavar="TYPE",
        help="openai (/v1/chat/completions, default) or openai-completions (/v1/completions)",
    )
    p.add_argument(
        "--http2",
        action="store_const",
        const=True,
        help="speak HTTP/2: prior knowledge (h2c) on http://, ALPN on https:// "
        "(HTTP/1.1 when the server does not offer h2)",
    )
    p.add_argument(
        "--ca-bundle",
        metavar="FILE",
        help="PEM file of the certificate authorities to trust for https:// "
        "(default: the system's)",
    )
    p.add_argument(
        "--insecure",
        action="store_const",
        const=True,
        help="do not verify the https:// endpoint's certificate",
    )
    p.add_argument(
        "--receive-stamps",
        metavar="SOURCE",
        help="kernel (default: the kernel's arrival stamp of each read, where Linux "
        "gives it) or read (stamp reads as the client reads them)",
    )
    p.add_argument(
        "--engines",
        metavar="N",
        help="event-loop processes sharing the load: N, or auto (one per usable core); default 1",
    )
    p.add_argument(
        "--min-streams-per-engine",
        metavar="N",
        help="a point at concurrency C uses at most ceil(C / N) engines (default 64)",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the engines on a Ray cluster: auto, or the head's HOST:PORT "
        "(--engines is then per node; needs mlpe-fast[ray])",
    )

    p = parser.add_argument_group("data")
    p.add_argument(
        "--dataset",
        action="append",
        metavar="SPEC",
        help="[perf|acc:]PATH[,parser.prompt=COL][,parser.system=COL]"
        "[,format=jsonl|json|csv|parquet][,samples=N] (repeatable)",
    )
    p.add_argument("--tokenizer", metavar="NAME", help="tokenizer (HF id or path; default: model)")
    p.add_argument(
        "--max-output-tokens", metavar="N", help="max_completion_tokens per request (default 1024)"
    )
    p.add_argument("--streaming", metavar="MODE", help="auto (default), on or off")
    p.add_argument(
        "--send-max-tokens",
        action="store_const",
        const=True,
        help="send max_tokens beside max_completion_tokens (for servers that honour only "
        "max_tokens)",
    )

    p = parser.add_argument_group("load")
    p.add_argument(
        "--load-pattern",
        metavar="PATTERN",
        help="concurrency (default), max_throughput (alias offline), poisson or agentic_inference",
    )
    p.add_argument(
        "--concurrency",
        metavar="N[,N...]",
        help="requests in flight (default 1); a list measures a curve, one point each",
    )
    p.add_argument(
        "--max-concurrency",
        metavar="C_MAX",
        help="the system's maximum supported concurrency; without a --concurrency list, "
        "plans the curve's points (spec §2.1)",
    )
    p.add_argument(
        "--offline",
        metavar="dedicated|elected|none",
        help="the curve's Offline point (default dedicated: the whole dataset at once)",
    )
    p.add_argument("--target-qps", metavar="QPS", help="arrival rate for poisson")
    p.add_argument("--num-samples", metavar="N", help="queries to issue")
    p.add_argument(
        "--duration", metavar="TIME", help="minimum duration: ms, or with a unit (600s, 10m)"
    )
    p.add_argument("--max-duration", metavar="TIME", help="cap on the performance phase")
    p.add_argument(
        "--num-trajectories",
        metavar="N",
        help="agentic_inference: trajectories to run, cycling over the file (default: each once)",
    )
    p.add_argument(
        "--warmup-requests", metavar="N", help="warmup queries before measuring (0: none)"
    )
    p.add_argument(
        "--warmup-salt",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="salt warmup queries (default on)",
    )
    p.add_argument(
        "--warmup-drain",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="wait for warmup responses before measuring (default off)",
    )

    p = parser.add_argument_group("limits and seeds")
    p.add_argument("--timeout-connect", metavar="S", help="connect timeout, seconds (default 10)")
    p.add_argument(
        "--timeout-idle", metavar="S", help="longest silence in a response, seconds (default 300)"
    )
    p.add_argument("--timeout-total", metavar="S", help="whole-request timeout, seconds")
    p.add_argument(
        "--salt",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="per-query salt on performance queries (default on)",
    )
    p.add_argument("--scheduler-seed", metavar="N", help="scheduler seed (default: seed set A)")
    p.add_argument(
        "--sample-index-seed", metavar="N", help="sample-order seed (default: seed set A)"
    )
    p.add_argument("--salt-seed", metavar="N", help="salt seed (default: sample-index seed + 2)")
    p.add_argument(
        "--warmup-seed", metavar="N", help="warmup seed (default: the sample-index seed)"
    )

    p = parser.add_argument_group("phases")
    p.add_argument(
        "--mode",
        metavar="perf|acc|both",
        help="performance phase, accuracy phase (needs --dataset acc:PATH,...), or both",
    )
    p.add_argument(
        "--accuracy-only", action="store_const", const="acc", dest="mode", help="= --mode acc"
    )
    p.add_argument(
        "--mlperf-model",
        metavar="NAME",
        help="MLPerf model name for the accuracy gate (llama3_1-8b, gpt-oss-120b, deepseek-r1)",
    )

    p = parser.add_argument_group("output")
    p.add_argument("--report-dir", metavar="DIR", help="run folder")
    p.add_argument(
        "--dry-run",
        action="store_const",
        const=True,
        help="print the plan and its warnings, then exit: no request sent, no file written",
    )


# Resolution -------------------------------------------------------------------------------


def given_fields(args: argparse.Namespace) -> set[str]:
    """The :class:`RunConfig` settings the user gave, by flag or in the
    ``-c`` file (the demo fills in only the others).

    Raises:
        UsageError: the file cannot be read.
    """
    config_path = getattr(args, "config", None)
    fields, _ = _flatten_yaml(load_yaml(config_path) if config_path else {})
    given = set(fields)
    given |= {field for dest, (field, _) in _FLAGS.items() if getattr(args, dest, None) is not None}
    return given


def resolve(args: argparse.Namespace, yaml_dict: Mapping[str, Any] | None = None) -> RunConfig:
    """Builds the :class:`RunConfig`: flags over YAML over defaults, checked.

    Args:
        args: parsed ``run`` flags (missing attributes count as not given).
        yaml_dict: the output of :func:`load_yaml`; None to load
            ``args.config`` if given.

    Raises:
        UsageError: one line naming the flag or key and the bad value.
    """
    if yaml_dict is None:
        config_path = getattr(args, "config", None)
        yaml_dict = load_yaml(config_path) if config_path else {}
    fields, yaml_datasets = _flatten_yaml(yaml_dict)
    from_cli: set[str] = set()
    for dest, (field, flag) in _FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            fields[field] = (value, flag)
            from_cli.add(field)
    if "warmup.requests" in fields:  # the flag replaces enabled + n_requests
        fields.pop("warmup.enabled", None)
        fields.pop("warmup.n_requests", None)

    cli_datasets: list[str] | None = getattr(args, "dataset", None)
    if cli_datasets:
        datasets = tuple(parse_dataset_arg(text) for text in cli_datasets)
    else:
        datasets = tuple(dataset_from_yaml(entry, where) for entry, where in yaml_datasets)
    seen: set[tuple[str, str]] = set()
    for spec in datasets:
        key = (spec.display_name, spec.type)
        if key in seen:
            raise UsageError(
                f"datasets: two {spec.type} datasets are named {spec.display_name!r}; "
                "give one a name=..."
            )
        seen.add(key)

    def get(field: str) -> tuple[Any, str] | None:
        found = fields.get(field)
        return None if found is None or found[0] is None else found

    # test type and load pattern
    test_type = "online"
    mode: Mode = "perf"
    if (found := get("type")) is not None:
        test_type = _choice(found, {t: t for t in ("offline", "online", "submission", "eval")}, {})
        if test_type == "eval":  # the reference's accuracy-only configs
            test_type, mode = "online", "acc"
        if test_type == "submission":
            benchmark_mode = get("benchmark_mode")
            test_type = (
                _choice(benchmark_mode, {"offline": "offline", "online": "online"}, {})
                if benchmark_mode is not None
                else "online"
            )
    load_pattern: LoadPattern = "offline" if test_type == "offline" else "concurrency"
    target_qps = _opt(get("target_qps"), _positive_float)
    if (found := get("load_pattern")) is not None:
        load_pattern = _load_pattern(found)
        if test_type == "offline" and load_pattern != "offline" and "load_pattern" not in from_cli:
            raise UsageError(
                f"{found[1]}: an offline config (type: offline) must use max_throughput, "
                f"got {found[0]!r}"
            )
    elif target_qps is not None:
        load_pattern = "poisson"
    sweep: tuple[int, ...] = ()
    concurrency: int | None = None
    if (found := get("concurrency")) is not None:
        sweep = _concurrencies(found)
        concurrency = sweep[0]
        if len(sweep) == 1:
            sweep = ()
    max_concurrency = _opt(get("max_concurrency"), _positive_int)
    offline: OfflineKind = "dedicated"
    if (found := get("offline")) is not None:
        offline = _choice(found, {k: k for k in ("dedicated", "elected", "none")}, {})
    if load_pattern == "poisson" and target_qps is None:
        where = _where(fields, "load_pattern", "--load-pattern poisson")
        raise UsageError(
            f"{where}: poisson needs a rate: --target-qps (YAML settings.load_pattern.target_qps)"
        )

    if (found := get("mode")) is not None:
        mode = _choice(found, {"perf": "perf", "acc": "acc", "both": "both"}, {})
    if mode != "perf" and not any(d.type == "accuracy" for d in datasets):
        where = _where(fields, "mode", "type")
        raise UsageError(
            f"{where} {found[0] if found else 'eval'}: no accuracy dataset; add "
            "--dataset acc:PATH,accuracy_config.ground_truth=COLUMN"
        )
    if mode != "perf":  # the scorers' packages are the accuracy extra: say so before any load
        check_scorer_packages(d.accuracy for d in datasets if d.type == "accuracy")

    _check_one_performance_dataset(datasets, bool(cli_datasets))
    _check_pattern_flags(fields, from_cli, load_pattern)

    # endpoint
    endpoints, named_route = _endpoints(get("endpoints"))
    model = _opt(get("model"), _string) or ""
    if endpoints and not model:
        raise UsageError(
            "--model is required with --endpoints (YAML: model_params.name): "
            "it is the model field of every request"
        )
    api_key = _api_key(get("api_key"), get("api_key_file"), bool(endpoints))
    api_type: ApiType = "openai"
    if (found := get("api_type")) is not None:
        api_type = _choice(
            found,
            {
                "openai": "openai",
                "openai-completions": "openai-completions",
                "openai_completions": "openai-completions",
            },
            {"sglang": "sglang endpoints", "videogen": "videogen endpoints"},
            shown=("openai", "openai-completions"),
        )
    if named_route is not None and _ROUTES[named_route] != api_type:
        flag = "--api-type openai-completions" if api_type == "openai" else "--api-type openai"
        raise UsageError(
            f"--endpoints names the route {named_route}, but the API type {api_type} "
            f"sends to {'/v1/chat/completions' if api_type == 'openai' else '/v1/completions'}: "
            f"add {flag}, or give the base URL only"
        )

    # timing
    duration_s = _opt(get("duration"), _duration)
    max_duration_s = _opt(get("max_duration"), _duration)
    if duration_s is not None and max_duration_s is not None and max_duration_s < duration_s:
        where = _where(fields, "max_duration", "--max-duration")
        raise UsageError(
            f"{where}: the maximum duration ({max_duration_s:g} s) is below the minimum "
            f"duration ({duration_s:g} s)"
        )

    # warmup
    warmup_requests = 0
    if (found := get("warmup.requests")) is not None:
        warmup_requests = _int(found, minimum=0)
    elif (found := get("warmup.enabled")) is not None and _bool(found):
        n = get("warmup.n_requests")
        warmup_requests = WARMUP_DATASET_PASS if n is None else _int(n, minimum=1)

    # streaming
    streaming: Streaming = "auto"
    if (found := get("streaming")) is not None:
        streaming = _streaming(found)
    # "auto" stays: RunConfig.stream decides per point, so that a curve's
    # dedicated Offline point does not stream (the reference's auto, spec §2.3).

    connect_s = _opt(get("timeout.connect"), _positive_float)
    idle_s = _opt(get("timeout.idle"), _positive_float)
    timeouts = Timeouts(
        connect_s=10.0 if connect_s is None else connect_s,
        idle_s=300.0 if idle_s is None else idle_s,
        total_s=_opt(get("timeout.total"), _positive_float),
    )

    sample_index_seed = _opt(get("seed.sample_index"), _seed)
    sample_index_seed = SEED_SET_A_SAMPLE_INDEX if sample_index_seed is None else sample_index_seed
    salt_seed = _opt(get("seed.salt"), _seed)
    warmup_seed = _opt(get("seed.warmup"), _seed)
    scheduler_seed = _opt(get("seed.scheduler"), _seed)
    seeds = Seeds(
        scheduler=SEED_SET_A_SCHEDULER if scheduler_seed is None else scheduler_seed,
        sample_index=sample_index_seed,
        salt=default_salt_seed(sample_index_seed) if salt_seed is None else salt_seed,
        warmup=sample_index_seed if warmup_seed is None else warmup_seed,
    )

    generation = Generation(
        temperature=_opt(get("gen.temperature"), _float),
        seed=_opt(get("gen.seed"), _seed),
        top_k=_opt(get("gen.top_k"), _any_int),
        top_p=_opt(get("gen.top_p"), _float),
        repetition_penalty=_opt(get("gen.repetition_penalty"), _float),
        presence_penalty=_opt(get("gen.presence_penalty"), _float),
        frequency_penalty=_opt(get("gen.frequency_penalty"), _float),
        chat_template_kwargs=_opt(get("gen.chat_template_kwargs"), _mapping),
    )

    salt = _opt(get("salt"), _bool)
    warmup_salt = _opt(get("warmup.salt"), _bool)
    warmup_drain = _opt(get("warmup.drain"), _bool)
    legacy_qps = _opt(get("legacy_qps"), _bool)
    max_output_tokens = _opt(get("max_output_tokens"), _positive_int)
    datasets = _agentic_datasets(
        datasets,
        load_pattern,
        _where(fields, "load_pattern", "--load-pattern"),
        _opt(get("num_trajectories"), _positive_int),
    )
    if load_pattern == "agentic_inference":
        given = {
            "num_samples": _opt(get("num_samples"), _positive_int),
            "duration": duration_s,
            "target_qps": target_qps,
        }
        _check_agentic(fields, given, warmup_requests)
        _check_agentic_requests(fields, streaming, api_type)
        offline = _agentic_offline(fields, offline)
    return RunConfig(
        endpoints=endpoints,
        model=model,
        api_key=api_key,
        api_type=api_type,
        datasets=datasets,
        tokenizer=_opt(get("tokenizer"), _string),
        load_pattern=load_pattern,
        concurrency=1 if concurrency is None else concurrency,
        target_qps=target_qps,
        num_samples=_opt(get("num_samples"), _positive_int),
        duration_s=duration_s,
        max_duration_s=max_duration_s,
        warmup_requests=warmup_requests,
        warmup_salt=True if warmup_salt is None else warmup_salt,
        warmup_drain=False if warmup_drain is None else warmup_drain,
        streaming=streaming,
        max_output_tokens=1024 if max_output_tokens is None else max_output_tokens,
        send_max_tokens=bool(_opt(get("send_max_tokens"), _bool)),
        generation=generation,
        report_dir=_opt(get("report_dir"), _string),
        timeouts=timeouts,
        seeds=seeds,
        salt=True if salt is None else salt,
        name=_opt(get("name"), _string)
        or ("offline_benchmark" if load_pattern == "offline" else "online_benchmark"),
        use_legacy_loadgen_qps_metrics=True if legacy_qps is None else legacy_qps,
        mode=mode,
        mlperf_model=_mlperf_model(get("mlperf_model")),
        sweep=sweep,
        max_concurrency=max_concurrency,
        offline=offline,
        max_connections=_max_connections(get("max_connections")),
        http2=bool(_opt(get("http2"), _bool)),
        ca_bundle=_ca_bundle(get("ca_bundle")),
        insecure=bool(_opt(get("insecure"), _bool)),
        receive_stamps=_receive_stamps(get("receive_stamps")),
        engines=_engines(get("engines")),
        min_streams_per_engine=_opt(get("min_streams_per_engine"), _positive_int) or 64,
        ray=_opt(get("ray"), _string),
        dry_run=bool(_opt(get("dry_run"), _bool)),
    )


def _agentic_datasets(
    datasets: tuple[DatasetSpec, ...], pattern: str, where: str, trajectories: int | None
) -> tuple[DatasetSpec, ...]:
    """An agentic run's performance dataset has its ``agentic_inference``
    block (the defaults when given on the command line), and only an
    agentic run has one (the reference's rule, ``config/schema.py``)."""
    performance = [d for d in datasets if d.type == "performance"]
    if pattern != "agentic_inference":
        for spec in performance:
            if spec.agentic is not None:
                raise UsageError(
                    f"dataset {spec.display_name}: an agentic_inference block needs the "
                    "agentic_inference load pattern (--load-pattern agentic_inference, "
                    "YAML settings.load_pattern.type)"
                )
        if trajectories is not None:
            raise UsageError("--num-trajectories: only an agentic_inference run has trajectories")
        return datasets
    if not performance:
        raise UsageError(f"{where} agentic_inference: no performance dataset of trajectories")
    changed = []
    for spec in datasets:
        if spec.type == "performance":
            settings = spec.agentic or AgenticSettings()
            if trajectories is not None:
                settings = msgspec.structs.replace(settings, num_trajectories_to_issue=trajectories)
            spec = msgspec.structs.replace(spec, agentic=settings)
        changed.append(spec)
    return tuple(changed)


def _check_agentic(fields: _Fields, given: Mapping[str, Any], warmup_requests: int) -> None:
    """What an agentic run cannot have (``docs/agentic.md`` §2.1, §2.6);
    ``given`` holds the resolved values of the settings it cannot take."""
    for field, why in (
        ("num_samples", "its size is num_trajectories_to_issue (--num-trajectories)"),
        ("duration", "it runs until its trajectories end"),
        ("target_qps", "its turns follow each other"),
    ):
        if given[field] is not None:
            raise UsageError(f"{fields[field][1]}: not for an agentic_inference run: {why}")
    if warmup_requests:
        raise UsageError(
            f"{_where(fields, 'warmup.requests', 'warmup')}: an agentic_inference run has no "
            "warmup (the reference has none either)"
        )
    engines = fields.get("engines")
    if (engines is not None and str(engines[0]).strip() != "1") or "ray" in fields:
        raise UsageError(
            f"{(engines or fields['ray'])[1]}: an agentic_inference run uses one engine"
        )


def _check_agentic_requests(fields: _Fields, streaming: Streaming, api_type: ApiType) -> None:
    """What an agentic run's requests cannot be asked to do: their bodies
    come from the dataset's turns (``load/agentic.py``), streamed, salted
    by its ``agentic_inference.enable_salt``, capped by each turn's own
    limit, on the chat route."""
    refused = (
        ("streaming", streaming == "off", "its turns are always streamed (TTFT, TPOT per turn)"),
        ("salt", "salt" in fields and not fields["salt"][0], _AGENTIC_SALT),
        ("send_max_tokens", bool(fields.get("send_max_tokens", (False,))[0]), _AGENTIC_CAP),
        ("api_type", api_type != "openai", "its turns are chat messages (/v1/chat/completions)"),
    )
    for field, wrong, why in refused:
        if wrong:
            raise UsageError(f"{fields[field][1]}: not for an agentic_inference run: {why}")


_AGENTIC_SALT = (
    "its salt is the dataset's agentic_inference.enable_salt (YAML), the reference's setting"
)
_AGENTIC_CAP = "each turn carries its own limit (the dataset's, else --max-output-tokens)"


#: The benchmark models checker 1.5.3.0 accepts, spelt exactly (``checker.py``,
#: ``_ALLOWED_MODEL_NAMES``; spec §2.8): ``--mlperf-model``, and a submission's
#: results folder name.
BENCHMARK_MODELS: tuple[str, ...] = (
    "llama3_1-8b",
    "gpt-oss-120b",
    "deepseek-r1",
    "kimi-k3",
    "qwen3_6-35b-a3b",
    "deepseek-v4_1-flash",
)


def _mlperf_model(found: tuple[Any, str] | None) -> str:
    """``--mlperf-model``: one of :data:`BENCHMARK_MODELS`, so that a typo
    cannot turn the accuracy gate off without a word."""
    if found is None:
        return ""
    name = _string(found)
    if name not in BENCHMARK_MODELS:
        raise UsageError(
            f"{found[1]} {name!r}: not an MLPerf Endpoints model; "
            f"one of {', '.join(BENCHMARK_MODELS)}"
        )
    return name


def _check_one_performance_dataset(datasets: Sequence[DatasetSpec], from_cli: bool) -> None:
    """A run measures one performance dataset (its samples are the point's
    queries); a second one would be silently left out."""
    performance = [d for d in datasets if d.type == "performance"]
    if len(performance) > 1:
        where = "--dataset" if from_cli else "datasets"
        names = ", ".join(d.display_name for d in performance)
        raise UsageError(
            f"{where}: {len(performance)} performance datasets ({names}); a run measures one: "
            "keep one, or mark the others acc: with an accuracy_config"
        )


def _check_pattern_flags(fields: _Fields, from_cli: set[str], pattern: LoadPattern) -> None:
    """Flags given beside a load pattern that has no use for them: refused,
    rather than silently ignored (a curve's points are fixed-concurrency
    points, spec §2.4)."""
    given = {field for field in ("concurrency", "target_qps", "duration") if field in from_cli}
    unused = {
        "concurrency": {"target_qps": "a rate is for --load-pattern poisson"},
        "poisson": {
            "concurrency": "a Poisson point has arrivals at --target-qps, no concurrency; "
            "a curve's points are fixed-concurrency points (spec §2.4)",
        },
        "offline": {
            "concurrency": "an Offline point issues every sample at once (its concurrency is "
            "the sample count)",
            "duration": "an Offline point issues the dataset once, at once; size it with "
            "--num-samples",
        },
    }.get(pattern, {})
    for field in sorted(given):
        why = unused.get(field)
        if why:
            raise UsageError(
                f"{fields[field][1]}: not for --load-pattern {pattern}: {why}; leave it out"
            )


def _agentic_offline(fields: _Fields, offline: OfflineKind) -> OfflineKind:
    """An agentic curve has no Offline point at all (spec §2.1; the checker's
    ``offline-point-present`` rejects one), so ``none`` whatever the default."""
    if "offline" in fields and offline != "none":
        raise UsageError(
            f"{fields['offline'][1]} {offline}: an agentic curve has no Offline point "
            "(spec §2.1); leave it out"
        )
    return "none"


def _engines(found: tuple[Any, str] | None) -> int:
    """``N`` engine processes, or ``auto`` (0: one per usable core)."""
    if found is None:
        return 1
    value, where = found
    if isinstance(value, str) and value.strip().lower() == "auto":
        return 0
    try:
        return _positive_int(found)
    except UsageError:
        raise UsageError(
            f"{where}: expected a positive integer or auto, got {_short(value)}"
        ) from None


def _receive_stamps(found: tuple[Any, str] | None) -> ReceiveStamps:
    if found is None:
        return "kernel"
    stamps: ReceiveStamps = _choice(found, {"kernel": "kernel", "read": "read"}, {})
    return stamps


def _where(fields: _Fields, field: str, default: str) -> str:
    found = fields.get(field)
    return default if found is None else found[1]


def dataset_from_yaml(entry: Mapping[str, Any], where: str) -> DatasetSpec:
    """One ``datasets[]`` entry of a YAML config (or a written config.yaml).

    Raises:
        UsageError: naming ``where`` and the key at fault.
    """
    for key in entry:
        if key in _DATASET_UNSUPPORTED and entry[key] is not None:
            raise UsageError(
                f"{where}.{key}: {_DATASET_UNSUPPORTED[key]} are not supported by mlpe-fast"
            )
        known = (*_DATASET_KEYS, *_DATASET_IGNORED, *_DATASET_UNSUPPORTED)
        if key not in known:
            raise UsageError(f"unknown key {f'{where}.{key}'!r}")
    path = entry.get("path")
    if not isinstance(path, str) or not path.strip():
        raise UsageError(f"{where}.path: a dataset needs a file path, got {path!r}")
    dtype = "performance"
    if entry.get("type") is not None:
        dtype = _choice(
            (entry["type"], f"{where}.type"),
            {"performance": "performance", "accuracy": "accuracy"},
            {},
        )
    parser = entry.get("parser") or {}
    if not isinstance(parser, dict):
        raise UsageError(f"{where}.parser: expected a mapping, got {_kind(parser)}")
    for key, value in parser.items():
        if key not in ("prompt", "system"):
            raise UsageError(
                f"{where}.parser: unknown parser target {key!r} (valid: prompt, system)"
            )
        if not isinstance(value, str) or not value:
            raise UsageError(f"{where}.parser.{key}: expected a column name, got {value!r}")
    name = entry.get("name")
    if name is not None and not isinstance(name, str):
        raise UsageError(f"{where}.name: expected a string, got {_short(name)}")
    fmt = entry.get("format")
    if fmt is not None:
        fmt = _choice(
            (fmt, f"{where}.format"),
            {**{f: f for f in DATASET_FORMATS}, **{f".{f}": f for f in DATASET_FORMATS}},
            {"huggingface": "Hugging Face datasets"},
            shown=DATASET_FORMATS,
        )
    samples = entry.get("samples")
    if samples is not None:
        samples = _positive_int((samples, f"{where}.samples"))
    accuracy = None
    raw_accuracy = entry.get("accuracy_config")
    if raw_accuracy is not None and not isinstance(raw_accuracy, dict):
        raise UsageError(f"{where}.accuracy_config: expected a mapping, got {_kind(raw_accuracy)}")
    if dtype == "accuracy":
        accuracy = accuracy_config(raw_accuracy or {}, f"{where}.accuracy_config")
    agentic = None
    if entry.get("agentic_inference") is not None:
        if dtype == "accuracy":
            raise UsageError(
                f"{where}.agentic_inference: an accuracy dataset cannot be agentic "
                "(the block belongs on the performance dataset)"
            )
        agentic = _agentic_settings(entry["agentic_inference"], f"{where}.agentic_inference")
    return DatasetSpec(
        path=path.strip(),
        type="accuracy" if dtype == "accuracy" else "performance",
        name=name or "",
        format=fmt,
        samples=samples,
        prompt_column=parser.get("prompt"),
        system_column=parser.get("system"),
        accuracy=accuracy,
        agentic=agentic,
    )


def _agentic_settings(block: Any, where: str) -> AgenticSettings:
    """A dataset's ``agentic_inference:`` block (the reference's keys)."""
    if not isinstance(block, dict):
        raise UsageError(f"{where}: expected a mapping, got {_kind(block)}")
    known = {f for f in AgenticSettings.__struct_fields__}
    for key in block:
        if key not in known:
            raise UsageError(f"unknown key {f'{where}.{key}'!r}")
    values: dict[str, Any] = {}
    for key, value in block.items():
        at = (value, f"{where}.{key}")
        if value is None:
            continue
        if key == "turn_timeout_s":
            values[key] = _positive_float(at)
        elif key == "num_trajectories_to_issue":
            values[key] = _positive_int(at)
        elif key == "routing_headers":
            if not isinstance(value, list) or not all(isinstance(h, str) and h for h in value):
                raise UsageError(f"{where}.{key}: expected a list of header names")
            values[key] = tuple(value)
        else:
            values[key] = _bool(at)
    return AgenticSettings(**values)


# Value checks (each takes (value, where) and raises UsageError naming `where`) ------------


def _opt(found: tuple[Any, str] | None, check: Any) -> Any:
    return None if found is None else check(found)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:56] + "...'"


def _int(found: tuple[Any, str], minimum: int | None = None) -> int:
    value, where = found
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif (isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value)) or (
        isinstance(value, float) and value.is_integer()
    ):
        number = int(value)
    if number is None or (minimum is not None and number < minimum):
        what = {None: "an integer", 0: "an integer >= 0", 1: "a positive integer"}.get(
            minimum, f"an integer >= {minimum}"
        )
        raise UsageError(f"{where}: expected {what}, got {_short(value)}")
    return number


def _ca_bundle(found: tuple[Any, str] | None) -> str | None:
    """A CA bundle: a readable file, checked now rather than at the first connect."""
    if found is None:
        return None
    path = _string(found)
    if not Path(path).is_file():
        raise UsageError(f"{found[1]}: file not found: {path}")
    return path


def _max_connections(found: tuple[Any, str] | None) -> int | None:
    """A connection cap; the reference's -1 (automatic) means none."""
    if found is None:
        return None
    value = _int(found)
    if value == -1:
        return None
    return _positive_int(found)


def _concurrencies(found: tuple[Any, str]) -> tuple[int, ...]:
    """One concurrency, or a list (``1,4,16`` or a YAML list): sorted, unique."""
    value, where = found
    if isinstance(value, list):
        items: list[Any] = value
    elif isinstance(value, str) and "," in value:
        items = value.split(",")
    else:
        items = [value]
    if not items:
        raise UsageError(f"{where}: expected a positive integer or a list of them")
    return tuple(sorted({_positive_int((item, where)) for item in items}))


def _positive_int(found: tuple[Any, str]) -> int:
    return _int(found, minimum=1)


def _any_int(found: tuple[Any, str]) -> int:
    return _int(found)


def _seed(found: tuple[Any, str]) -> int:
    return _int(found, minimum=0)


def _float(found: tuple[Any, str], positive: bool = False) -> float:
    value, where = found
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or (positive and number <= 0):
        what = "a positive number" if positive else "a number"
        raise UsageError(f"{where}: expected {what}, got {_short(value)}")
    return number


def _positive_float(found: tuple[Any, str]) -> float:
    return _float(found, positive=True)


_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*")
_UNIT_S = {"ms": 1e-3, None: 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(found: tuple[Any, str]) -> float | None:
    """Milliseconds (the reference's unit) or a suffixed string -> seconds;
    0 means "not set", as the reference's 0 ms."""
    value, where = found
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            seconds = float(value) * 1e-3
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value)):
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds is None:
        raise UsageError(
            f"{where}: expected a duration in ms or with a unit (600s, 10m, 1h), "
            f"got {_short(value)}"
        )
    return seconds or None


def _bool(found: tuple[Any, str]) -> bool:
    value, where = found
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "on", "yes", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "off", "no", "0"):
        return False
    raise UsageError(f"{where}: expected true or false, got {_short(value)}")


def _string(found: tuple[Any, str]) -> str:
    value, where = found
    if not isinstance(value, str):
        raise UsageError(f"{where}: expected a string, got {_short(value)}")
    return value.strip()


def _mapping(found: tuple[Any, str]) -> dict[str, Any]:
    value, where = found
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a mapping, got {_short(value)}")
    return value


def _choice(
    found: tuple[Any, str],
    allowed: Mapping[str, Any],
    unsupported: Mapping[str, str],
    shown: Sequence[str] | None = None,
) -> Any:
    value, where = found
    key = value.strip().lower() if isinstance(value, str) else value
    if isinstance(key, str) and key in allowed:
        return allowed[key]
    if isinstance(key, str) and key in unsupported:
        raise UsageError(f"{where}: {unsupported[key]} are not supported by mlpe-fast")
    names = ", ".join(allowed if shown is None else shown)
    raise UsageError(f"{where}: {_short(value)} is not one of {names}")


def _load_pattern(found: tuple[Any, str]) -> LoadPattern:
    pattern: LoadPattern = _choice(
        found,
        {
            "concurrency": "concurrency",
            "max_throughput": "offline",
            "max-throughput": "offline",
            "offline": "offline",
            "poisson": "poisson",
            "agentic_inference": "agentic_inference",
            "agentic-inference": "agentic_inference",
        },
        {
            "burst": "burst load patterns",
            "step": "step load patterns",
        },
        shown=("concurrency", "max_throughput", "offline", "poisson"),
    )
    return pattern


def _streaming(found: tuple[Any, str]) -> Streaming:
    value = found[0]
    if isinstance(value, bool):  # YAML 1.1 reads a bare `on`/`off` as a boolean
        return "on" if value else "off"
    mode: Streaming = _choice(found, {"auto": "auto", "on": "on", "off": "off"}, {})
    return mode


API_KEY_ENV = "OPENAI_API_KEY"
"""Where the API key is read from when no flag or YAML key gives it (the
OpenAI SDK's variable, which vLLM's and SGLang's benchmarks read too)."""


def _api_key(
    key: tuple[Any, str] | None, key_file: tuple[Any, str] | None, endpoint_given: bool
) -> str | None:
    """The API key: ``--api-key`` (YAML ``endpoint_config.api_key``), else
    the first line of ``--api-key-file`` (YAML ``mlpe_fast.api_key_file``),
    else ``$OPENAI_API_KEY`` when an endpoint is measured; a command line
    shows in ``ps``, a file or the environment does not."""
    if key is not None and key_file is not None and key[0] != REDACTED:
        raise UsageError(f"{key[1]} and {key_file[1]}: give the API key one way")
    from_env = os.environ.get(API_KEY_ENV, "").strip() if endpoint_given else ""
    if key is not None:
        api_key = _string(key)
        if api_key != REDACTED:
            return api_key
        # A written config.yaml run again: the key comes from elsewhere.
        if key_file is None:
            if not from_env:
                logger.warning(
                    "mlpe-fast: %s is %r (a written config.yaml): sending no API key "
                    "(set %s or pass --api-key-file)",
                    key[1],
                    REDACTED,
                    API_KEY_ENV,
                )
            return from_env or None
    if key_file is not None:
        path = Path(_string(key_file)).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or error
            raise UsageError(f"{key_file[1]} {path}: cannot read the API key: {reason}") from None
        first = lines[0].strip() if lines else ""
        if not first:
            raise UsageError(f"{key_file[1]} {path}: the file is empty (the key is its first line)")
        return first
    return from_env or None


def _endpoints(found: tuple[Any, str] | None) -> tuple[tuple[str, ...], str | None]:
    """The endpoints' base URLs (:func:`_base_url`), and the route they
    named, if any: the API type must be that route's."""
    if found is None:
        return (), None
    value, where = found
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(u, str) for u in items):
        raise UsageError(f"{where}: expected a list of URLs, got {_short(value)}")
    bases = [_base_url(u.strip(), where) for u in items if u.strip()]
    urls = tuple(base for base, _ in bases)
    routes = {route for _, route in bases if route in _ROUTES}
    if len(routes) > 1:
        raise UsageError(f"{where}: the URLs name different routes: {', '.join(sorted(routes))}")
    if len(set(urls)) != len(urls):
        raise UsageError(f"{where}: an endpoint is listed twice: {', '.join(urls)}")
    return urls, next(iter(routes), None)


#: Routes a base URL may end in, as the OpenAI SDK's and vLLM's base URLs do
#: (``http://host:8000/v1``), or a whole route copied from a curl command.
_ROUTE_SUFFIXES = ("/v1/chat/completions", "/v1/completions", "/v1")
#: The API type each whole route is served with.
_ROUTES: dict[str, ApiType] = {
    "/v1/chat/completions": "openai",
    "/v1/completions": "openai-completions",
}


def _base_url(url: str, where: str) -> tuple[str, str | None]:
    """``url`` as the base the request routes are appended to: its
    trailing ``/``, ``/v1`` or whole route dropped, with a note saying so;
    and what was dropped."""
    example = "e.g. http://localhost:8000"
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{where}: {url!r} is not an http:// or https:// URL ({example})")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- urlsplit checks the port only when asked
    except ValueError as error:
        raise UsageError(f"{where}: {url!r} is not a usable URL ({error}; {example})") from None
    if not parts.hostname:
        raise UsageError(f"{where}: {url!r} has no host ({example})")
    # The client sends neither: refused rather than silently dropped.
    if parts.query or parts.fragment:
        raise UsageError(f"{where}: {url!r}: a base URL has no query or fragment ({example})")
    if "@" in parts.netloc:
        raise UsageError(
            f"{where}: credentials in the URL (user:password@host) are not sent; "
            "use --api-key-file or OPENAI_API_KEY"
        )
    path = parts.path.rstrip("/")
    for suffix in _ROUTE_SUFFIXES:
        if path.endswith(suffix):
            base = parts._replace(path=path[: -len(suffix)]).geturl()
            logger.warning(
                "mlpe-fast: %s %s: using the base URL %s (the route, e.g. "
                "/v1/chat/completions, is added to every request; set it with --api-type)",
                where,
                url,
                base,
            )
            return base, suffix
    return parts._replace(path=path).geturl(), None


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "nothing"
    return type(value).__name__


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
