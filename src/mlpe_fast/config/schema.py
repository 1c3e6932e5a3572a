"""The settings of ``mlpe-fast run``: one row each, with its flag, its YAML
key(s), its converter and its default.

The ``run`` flags (``arguments``), the YAML key map (``yaml_file``) and the
:class:`~.run_config.RunConfig` defaults are all read from :data:`SETTINGS`,
so that a setting is described once.  A row's ``name`` is the RunConfig
field it fills (dotted into ``timeouts``, ``seeds``, ``generation``); a row
with ``fills_field=False`` is an input that a cross-field rule reads
(``rules``: ``type``, the warmup's ``enabled``, ``--api-key-file``, ...).

Names follow the reference client, mlcommons/endpoints, so that its command
lines and YAML files carry over (reference-client.md §3.1-3.2,
``src/inference_endpoint/config/schema.py``); what only mlpe-fast has lives
under a top-level ``mlpe_fast:`` YAML block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from . import choices, coerce, request_extras
from .benchmark import SEED_SET_A_SAMPLE_INDEX, SEED_SET_A_SCHEDULER
from .datasets import datasets
from .endpoints import base_urls
from .given import Converter, Given

__all__ = (
    "CONFIG_FILE_FLAG",
    "FLAG_GROUPS",
    "SETTINGS",
    "SETTINGS_BY_NAME",
    "Flag",
    "FlagGroup",
    "FlagKind",
    "Setting",
    "default_of",
)

FlagGroup = Literal["endpoint", "data", "load", "limits and seeds", "phases", "output"]
#: The ``run --help`` sections, in order.
FLAG_GROUPS: tuple[FlagGroup, ...] = (
    "endpoint",
    "data",
    "load",
    "limits and seeds",
    "phases",
    "output",
)

FlagKind = Literal["value", "values", "repeated", "const", "on_off"]
"""How a flag takes its value: ``value`` one (``--model m``), ``values``
one or more (``--endpoints A B``), ``repeated`` one per use (``--dataset``),
``const`` none (the flag stores ``Flag.const``), ``on_off`` ``--x``/``--no-x``."""


class Flag(msgspec.Struct, frozen=True, kw_only=True):
    """One command-line flag of a setting."""

    name: str
    group: FlagGroup
    help: str
    metavar: str | None = None
    kind: FlagKind = "value"
    const: Any = True


class Setting(msgspec.Struct, frozen=True, kw_only=True):
    """One setting: where it is given, how its value is read, its default.

    Attributes:
        name: the RunConfig field it fills, or the input's name when
            ``fills_field`` is False; also its name in ``given_fields``.
        default: the value when it is not given (the RunConfig default).
        convert: reads a given value (``coerce``); None for a field no
            flag or key gives (a rule fills it).
        flags: its flags; messages name the first (argparse stores every
            one of them under the first's name).
        yaml_keys: its dotted YAML keys; a second one is an alias.
        fills_field: False for an input that only rules read.
        converted_by_rule: converted by the rule that reads it, only when
            its value matters (``benchmark_mode`` only for ``type:
            submission``): a value that does not matter is no mistake.
        replaces: settings that this one, given, replaces (the flag
            ``--warmup-requests`` says in one what YAML says in two keys).
    """

    name: str
    default: Any = None
    convert: Converter | None = None
    flags: tuple[Flag, ...] = ()
    yaml_keys: tuple[str, ...] = ()
    fills_field: bool = True
    converted_by_rule: bool = False
    replaces: tuple[str, ...] = ()

    @property
    def dest(self) -> str | None:
        """The argparse attribute its flags store into (argparse's own name for the first)."""
        return self.flags[0].name.lstrip("-").replace("-", "_") if self.flags else None

    @property
    def flag_said(self) -> str:
        """How messages name its flag: ``--salt/--no-salt`` for an on/off flag."""
        flag = self.flags[0]
        return f"{flag.name}/--no-{flag.name[2:]}" if flag.kind == "on_off" else flag.name


def _non_negative_integer(given: Given) -> int:
    return coerce.integer(given, minimum=0)


# fmt: off
SETTINGS: tuple[Setting, ...] = (
    # endpoint ---------------------------------------------------------------------------
    Setting(
        name="endpoints", default=(), convert=base_urls,
        flags=(Flag(name="--endpoints", group="endpoint", kind="values", metavar="URL",
                    help="endpoint base URL(s), e.g. http://localhost:8000 "
                    "(none: start the built-in simulated endpoint)"),),
        yaml_keys=("endpoint_config.endpoints",),
    ),
    Setting(
        name="model", default="", convert=coerce.string,
        flags=(Flag(name="--model", group="endpoint", help="model name sent in every request"),),
        yaml_keys=("model_params.name",),
    ),
    Setting(
        name="api_key", convert=coerce.string,
        flags=(Flag(name="--api-key", group="endpoint", metavar="KEY",
                    help="API key (Authorization: Bearer); visible to ps: prefer --api-key-file "
                    "or OPENAI_API_KEY, read when neither flag is given"),),
        yaml_keys=("endpoint_config.api_key",),
    ),
    Setting(
        name="api_key_file", convert=coerce.path, fills_field=False,
        flags=(Flag(name="--api-key-file", group="endpoint", metavar="FILE",
                    help="read the API key from FILE (its first line)"),),
        yaml_keys=("mlpe_fast.api_key_file",),
    ),
    Setting(
        # config/request_extras.py: on every request, the load's and the calls before it
        name="headers", default=(), convert=request_extras.headers,
        flags=(Flag(name="--header", group="endpoint", kind="repeated", metavar="NAME:VALUE",
                    help="a header field on every request (repeatable; not Host, "
                    "Content-Type, Content-Length, ...)"),),
        yaml_keys=("mlpe_fast.headers",),
    ),
    Setting(
        name="max_connections", convert=coerce.max_connections,
        flags=(Flag(name="--max-connections", group="endpoint", metavar="N",
                    help="at most N connections; more requests wait for one "
                    "(default: one per request)"),),
        yaml_keys=("settings.client.max_connections",),
    ),
    Setting(
        # issue 23: the first wave's TTFT must not carry TCP and TLS setup
        name="warmup_connections", convert=coerce.warmup_connections,
        flags=(Flag(name="--warmup-connections", group="endpoint", metavar="N",
                    help="connections opened before a point's first request: auto (default: "
                    "as many as it uses at once), N, or 0 (setup inside the first "
                    "requests' figures)"),),
        yaml_keys=("settings.client.warmup_connections",),
    ),
    Setting(
        name="api_type", default="openai",
        convert=coerce.one_of(
            choices.API_TYPES, choices.API_TYPES_UNSUPPORTED, choices.API_TYPES_SHOWN
        ),
        flags=(Flag(name="--api-type", group="endpoint", metavar="TYPE",
                    help="openai (/v1/chat/completions, default), openai-completions "
                    "(/v1/completions) or sglang (SGLang's /generate, token-id datasets)"),),
        yaml_keys=("endpoint_config.api_type",),
    ),
    Setting(
        name="http2", default=False, convert=coerce.boolean,
        flags=(Flag(name="--http2", group="endpoint", kind="const",
                    help="speak HTTP/2: prior knowledge (h2c) on http://, ALPN on https:// "
                    "(HTTP/1.1 when the server does not offer h2)"),),
        yaml_keys=("mlpe_fast.http2",),
    ),
    Setting(
        name="ca_bundle", convert=coerce.ca_bundle,
        flags=(Flag(name="--ca-bundle", group="endpoint", metavar="FILE",
                    help="PEM file of the certificate authorities to trust for https:// "
                    "(default: the system's)"),),
        yaml_keys=("mlpe_fast.ca_bundle",),
    ),
    Setting(
        name="insecure", default=False, convert=coerce.boolean,
        flags=(Flag(name="--insecure", group="endpoint", kind="const",
                    help="do not verify the https:// endpoint's certificate"),),
        yaml_keys=("settings.client.insecure",),
    ),
    Setting(
        name="receive_stamps", default="kernel", convert=coerce.one_of(choices.RECEIVE_STAMPS),
        flags=(Flag(name="--receive-stamps", group="endpoint", metavar="SOURCE",
                    help="kernel (default: the kernel's arrival stamp of each read, where Linux "
                    "gives it), packet (each TCP segment's arrival, from a packet socket; "
                    "needs CAP_NET_RAW) or read (stamp reads as the client reads them)"),),
        yaml_keys=("mlpe_fast.receive_stamps",),
    ),
    Setting(
        # a receive thread that waits for a core gives a first
        # token the stamp of the next (csrc/mlpe_rxthread.h T8)
        name="receive_priority", convert=coerce.receive_priority,
        flags=(Flag(name="--receive-priority", group="endpoint", metavar="PRIORITY",
                    help="the receive thread's scheduling: auto (default: SCHED_FIFO 10 "
                    "where permitted, else the normal policy), off, or a SCHED_FIFO "
                    "priority 1-99"),),
        yaml_keys=("mlpe_fast.receive_priority",),
    ),
    Setting(
        name="receive_cpus", default=(), convert=coerce.receive_cpus,
        flags=(Flag(name="--receive-cpu", group="endpoint", metavar="N[,M]",
                    help="pin the receive thread to these CPUs (default: wherever the "
                    "process may run)"),),
        yaml_keys=("mlpe_fast.receive_cpu",),
    ),
    Setting(
        name="engines", default=1, convert=coerce.engines,
        flags=(Flag(name="--engines", group="endpoint", metavar="N",
                    help="event-loop processes sharing the load: N, or auto (one per usable "
                    "core); default 1"),),
        yaml_keys=("mlpe_fast.engines",),
    ),
    Setting(
        name="min_streams_per_engine", default=64, convert=coerce.positive_integer,
        flags=(Flag(name="--min-streams-per-engine", group="endpoint", metavar="N",
                    help="a point at concurrency C uses at most ceil(C / N) engines "
                    "(default 64)"),),
        yaml_keys=("mlpe_fast.min_streams_per_engine",),
    ),
    Setting(
        name="ray", convert=coerce.string,
        flags=(Flag(name="--ray", group="endpoint", metavar="ADDRESS",
                    help="run the engines on a Ray cluster: auto, or the head's HOST:PORT "
                    "(--engines is then per node; needs mlpe-fast[ray])"),),
        yaml_keys=("mlpe_fast.ray",),
    ),
    # data -------------------------------------------------------------------------------
    Setting(
        name="datasets", default=(), convert=datasets,
        flags=(Flag(name="--dataset", group="data", kind="repeated", metavar="SPEC",
                    help="[perf|acc:]PATH[,parser.prompt=COL][,parser.system=COL]"
                    "[,format=jsonl|json|csv|parquet][,samples=N] (repeatable), or "
                    "synthetic:isl=DIST,osl=DIST[,prefix=N][,samples=N][,seed=N]: random "
                    "prompts of exact token counts (DIST: N, normal(MEAN,SD), uniform(MIN,MAX), "
                    "hist(LEN:WEIGHT,...))"),),
        yaml_keys=("datasets",),
    ),
    Setting(
        name="tokenizer", convert=coerce.path,
        flags=(Flag(name="--tokenizer", group="data", metavar="NAME",
                    help="tokenizer (HF id or path; default: model)"),),
        yaml_keys=("model_params.tokenizer_name",),
    ),
    Setting(
        name="max_output_tokens", default=1024, convert=coerce.positive_integer,
        flags=(Flag(name="--max-output-tokens", group="data", metavar="N",
                    help="max_completion_tokens per request (default 1024)"),),
        yaml_keys=("model_params.max_new_tokens",),
    ),
    Setting(
        name="streaming", default="auto", convert=coerce.streaming,
        flags=(Flag(name="--streaming", group="data", metavar="MODE",
                    help="auto (default), on or off"),),
        yaml_keys=("model_params.streaming",),
    ),
    Setting(
        name="send_max_tokens", default=False, convert=coerce.boolean,
        flags=(Flag(name="--send-max-tokens", group="data", kind="const",
                    help="send max_tokens beside max_completion_tokens (for servers that "
                    "honour only max_tokens)"),),
        yaml_keys=("mlpe_fast.send_max_tokens",),
    ),
    Setting(
        # merged into every body after mlpe-fast's own fields (config/request_extras.py)
        name="extra_body", convert=request_extras.extra_body,
        flags=(Flag(name="--extra-body", group="data", metavar="JSON",
                    help="a JSON object merged into every request body, e.g. "
                    "'{\"ignore_eos\": true}' (not model, messages, prompt, stream, the "
                    "output cap)"),),
        yaml_keys=("mlpe_fast.extra_body",),
    ),
    Setting(
        # point/tokenizer_check.py: before the load, never beside it
        name="tokenizer_check", default="auto", convert=request_extras.tokenizer_check,
        flags=(Flag(name="--tokenizer-check", group="data", metavar="WHEN",
                    help="compare the client's token counts of a sample of prompts with the "
                    "endpoint's /tokenize before the load: auto (default: when it offers "
                    "one), on or off"),),
        yaml_keys=("mlpe_fast.tokenizer_check",),
    ),
    # load -------------------------------------------------------------------------------
    Setting(
        name="load_pattern", default="concurrency",
        convert=coerce.one_of(
            choices.LOAD_PATTERNS, choices.LOAD_PATTERNS_UNSUPPORTED, choices.LOAD_PATTERNS_SHOWN
        ),
        flags=(Flag(name="--load-pattern", group="load", metavar="PATTERN",
                    help="concurrency (default), max_throughput (alias offline), poisson or "
                    "agentic_inference"),),
        yaml_keys=("settings.load_pattern.type",),
    ),
    Setting(
        # A list is a curve: rules.curve_or_point fills `sweep` from it.
        name="concurrency", default=1, convert=coerce.concurrencies,
        flags=(Flag(name="--concurrency", group="load", metavar="N[,N...]",
                    help="requests in flight (default 1); a list measures a curve, "
                    "one point each"),),
        yaml_keys=("settings.load_pattern.target_concurrency",),
    ),
    Setting(
        name="max_concurrency", convert=coerce.positive_integer,
        flags=(Flag(name="--max-concurrency", group="load", metavar="C_MAX",
                    help="the system's maximum supported concurrency; without a --concurrency "
                    "list, plans the curve's points (spec §2.1)"),),
    ),
    Setting(
        name="offline", default="dedicated", convert=coerce.one_of(choices.OFFLINE_KINDS),
        flags=(Flag(name="--offline", group="load", metavar="dedicated|elected|none",
                    help="the curve's Offline point (default dedicated: the whole dataset "
                    "at once)"),),
    ),
    Setting(
        name="target_qps", convert=coerce.rates,
        flags=(Flag(name="--target-qps", group="load", metavar="QPS[,QPS...]",
                    help="arrival rate for poisson (queries/s); a list measures a request-rate "
                    "curve, one point each (not an MLPerf curve: spec §2.4)"),),
        yaml_keys=("settings.load_pattern.target_qps",),
    ),
    Setting(
        name="num_samples", convert=coerce.positive_integer,
        flags=(Flag(name="--num-samples", group="load", metavar="N", help="queries to issue"),),
        yaml_keys=("settings.runtime.n_samples_to_issue",),
    ),
    Setting(
        name="duration_s", convert=coerce.duration,
        flags=(Flag(name="--duration", group="load", metavar="TIME",
                    help="minimum duration: ms, or with a unit (600s, 10m)"),),
        yaml_keys=("settings.runtime.min_duration_ms",),
    ),
    Setting(
        name="min_passes", default=0, convert=_non_negative_integer,
        flags=(Flag(name="--min-passes", group="load", metavar="N",
                    help="with a duration, issue at least N whole dataset passes (a curve's "
                    "points: 4, what a steady-state window needs to be official, spec §1.4)"),),
        yaml_keys=("mlpe_fast.min_passes",),
    ),
    Setting(
        name="max_duration_s", convert=coerce.duration,
        flags=(Flag(name="--max-duration", group="load", metavar="TIME",
                    help="cap on the performance phase"),),
        yaml_keys=("settings.runtime.max_duration_ms",),
    ),
    Setting(
        # rules.agentic_datasets sets it in the performance dataset's agentic_inference block
        name="num_trajectories", convert=coerce.positive_integer, fills_field=False,
        flags=(Flag(name="--num-trajectories", group="load", metavar="N",
                    help="agentic_inference: trajectories to run, cycling over the file "
                    "(default: each once)"),),
    ),
    Setting(
        name="warmup_requests", default=0, convert=_non_negative_integer,
        flags=(Flag(name="--warmup-requests", group="load", metavar="N",
                    help="warmup queries before measuring (0: none)"),),
        replaces=("warmup.enabled", "warmup.n_requests"),
    ),
    Setting(
        name="warmup_salt", default=True, convert=coerce.boolean,
        flags=(Flag(name="--warmup-salt", group="load", kind="on_off",
                    help="salt warmup queries (default on)"),),
        yaml_keys=("settings.warmup.salt",),
    ),
    Setting(
        name="warmup_drain", default=False, convert=coerce.boolean,
        flags=(Flag(name="--warmup-drain", group="load", kind="on_off",
                    help="wait for warmup responses before measuring (default off)"),),
        yaml_keys=("settings.warmup.drain",),
    ),
    Setting(
        # point/prefix_cache.py: before every point (a curve's each), before its warmup
        name="reset_prefix_cache", convert=request_extras.reset_prefix_cache,
        flags=(Flag(name="--reset-prefix-cache", group="load", metavar="SERVER",
                    help="empty the endpoint's prefix cache before each point: vllm "
                    "(POST /reset_prefix_cache), sglang (POST /flush_cache) or a /PATH "
                    "to POST to"),),
        yaml_keys=("mlpe_fast.reset_prefix_cache",),
    ),
    Setting(
        # server_metrics/scraper.py: beside the load, on a connection of its own
        name="server_metrics", default="auto", convert=request_extras.server_metrics,
        flags=(Flag(name="--server-metrics", group="output", metavar="WHERE",
                    help="read the servers' Prometheus metrics through each point: auto "
                    "(default: each endpoint's /metrics, when it offers one), off, a URL, or "
                    "URL,URL (one per endpoint)"),),
        yaml_keys=("mlpe_fast.server_metrics",),
    ),
    Setting(
        name="server_metrics_interval_s", default=1.0,
        convert=request_extras.server_metrics_interval,
        flags=(Flag(name="--server-metrics-interval", group="output", metavar="SECONDS",
                    help="seconds between two scrapes of the server's metrics (default 1, "
                    "at least 0.1)"),),
        yaml_keys=("mlpe_fast.server_metrics_interval_s",),
    ),
    # limits and seeds -------------------------------------------------------------------
    Setting(
        name="timeouts.connect_s", default=10.0, convert=coerce.positive_number,
        flags=(Flag(name="--timeout-connect", group="limits and seeds", metavar="S",
                    help="connect timeout, seconds (default 10)"),),
        yaml_keys=("mlpe_fast.timeouts.connect_s",),
    ),
    Setting(
        # spec §3.5 recommends an idle timeout of at least 300 s
        name="timeouts.idle_s", default=300.0, convert=coerce.positive_number,
        flags=(Flag(name="--timeout-idle", group="limits and seeds", metavar="S",
                    help="longest silence in a response, seconds (default 300)"),),
        yaml_keys=("mlpe_fast.timeouts.idle_s",),
    ),
    Setting(
        name="timeouts.total_s", convert=coerce.positive_number,
        flags=(Flag(name="--timeout-total", group="limits and seeds", metavar="S",
                    help="whole-request timeout, seconds"),),
        yaml_keys=("mlpe_fast.timeouts.total_s",),
    ),
    Setting(
        name="salt", default=True, convert=coerce.boolean,
        flags=(Flag(name="--salt", group="limits and seeds", kind="on_off",
                    help="per-query salt on performance queries (default on)"),),
        yaml_keys=("mlpe_fast.salt",),
    ),
    Setting(
        # spec §2.5: a token client's salt is in the token stream (load/token_salt.py)
        name="token_salt", default="user", convert=coerce.one_of(choices.TOKEN_SALT_PLACEMENTS),
        flags=(Flag(name="--token-salt", group="limits and seeds", metavar="WHERE",
                    help="salt of a token-id dataset: user (default: after the user turn's "
                    "header, from the chat template) or start (before the first id: loses "
                    "the system prompt's prefix cache)"),),
        yaml_keys=("mlpe_fast.token_salt",),
    ),
    Setting(
        # not an MLPerf metric: the share of requests meeting latency bounds (metrics/goodput.py)
        name="goodput", convert=coerce.slo,
        flags=(Flag(name="--goodput", group="output", kind="values", metavar="METRIC:MS",
                    help="also report goodput: the requests meeting every bound given, e.g. "
                    "ttft:500 tpot:50 e2el:20000 (ms; not an MLPerf metric)"),),
        yaml_keys=("mlpe_fast.goodput",),
    ),
    Setting(
        # gpt-oss-120b's accuracy datasets: text encoded client-side (load/harmony.py)
        name="harmony", default="auto", convert=coerce.harmony,
        flags=(Flag(name="--harmony", group="data", metavar="WHEN",
                    help="encode text prompts in gpt-oss's Harmony format and send the ids "
                    "(/v1/completions): auto (default: when the tokenizer has the Harmony "
                    "tokens), on or off"),),
        yaml_keys=("mlpe_fast.harmony",),
    ),
    Setting(
        # None: rules.harmony_datasets fills in the day of the run, as the reference
        name="harmony_date", convert=coerce.iso_date,
        flags=(Flag(name="--harmony-date", group="data", metavar="YYYY-MM-DD",
                    help="the Harmony system message's current date (default: today)"),),
        yaml_keys=("mlpe_fast.harmony_date",),
    ),
    Setting(
        # the second key: the seed-set name of the submission rules (spec §2.5)
        name="seeds.scheduler", default=SEED_SET_A_SCHEDULER, convert=coerce.seed,
        flags=(Flag(name="--scheduler-seed", group="limits and seeds", metavar="N",
                    help="scheduler seed (default: seed set A)"),),
        yaml_keys=("settings.runtime.scheduler_random_seed", "settings.runtime.scheduler_rng_seed"),
    ),
    Setting(
        name="seeds.sample_index", default=SEED_SET_A_SAMPLE_INDEX, convert=coerce.seed,
        flags=(Flag(name="--sample-index-seed", group="limits and seeds", metavar="N",
                    help="sample-order seed (default: seed set A)"),),
        yaml_keys=(
            "settings.runtime.dataloader_random_seed", "settings.runtime.sample_index_rng_seed"
        ),
    ),
    Setting(
        # None: rules.derived_seeds fills in sample_index + 2
        name="seeds.salt", convert=coerce.seed,
        flags=(Flag(name="--salt-seed", group="limits and seeds", metavar="N",
                    help="salt seed (default: sample-index seed + 2)"),),
        yaml_keys=("mlpe_fast.salt_random_seed",),
    ),
    Setting(
        # None: rules.derived_seeds fills in the sample-index seed
        name="seeds.warmup", convert=coerce.seed,
        flags=(Flag(name="--warmup-seed", group="limits and seeds", metavar="N",
                    help="warmup seed (default: the sample-index seed)"),),
        yaml_keys=("settings.warmup.warmup_random_seed",),
    ),
    # phases -----------------------------------------------------------------------------
    Setting(
        name="mode", default="perf", convert=coerce.one_of(choices.MODES),
        flags=(
            Flag(name="--mode", group="phases", metavar="perf|acc|both",
                 help="performance phase, accuracy phase (needs --dataset acc:PATH,...), "
                 "or both"),
            Flag(name="--accuracy-only", group="phases", kind="const", const="acc",
                 help="= --mode acc"),
        ),
        yaml_keys=("mlpe_fast.mode",),
    ),
    Setting(
        name="mlperf_model", default="", convert=coerce.mlperf_model,
        flags=(Flag(name="--mlperf-model", group="phases", metavar="NAME",
                    help="MLPerf model name for the accuracy gates: llama3_1-8b, gpt-oss-120b, "
                    "deepseek-r1, kimi-k3, qwen3_6-35b-a3b or deepseek-v4_1-flash "
                    "(docs/models.md)"),),
        yaml_keys=("submission_ref.model",),
    ),
    # output -----------------------------------------------------------------------------
    Setting(
        name="report_dir", convert=coerce.path,
        flags=(Flag(name="--report-dir", group="output", metavar="DIR", help="run folder"),),
        yaml_keys=("report_dir",),
    ),
    Setting(
        name="dry_run", default=False, convert=coerce.boolean,
        flags=(Flag(name="--dry-run", group="output", kind="const",
                    help="print the plan and its warnings, then exit: no request sent, "
                    "no file written"),),
    ),
    # YAML only --------------------------------------------------------------------------
    Setting(
        # "": rules.default_name names it as the reference does
        name="name", default="", convert=coerce.string, yaml_keys=("name",),
    ),
    Setting(
        name="type", default="online", convert=coerce.one_of(choices.TEST_TYPES),
        yaml_keys=("type",), fills_field=False,
    ),
    Setting(
        name="benchmark_mode", default="online", convert=coerce.one_of(choices.BENCHMARK_MODES),
        yaml_keys=("benchmark_mode",), fills_field=False, converted_by_rule=True,
    ),
    Setting(
        name="use_legacy_loadgen_qps_metrics", default=True, convert=coerce.boolean,
        yaml_keys=("settings.load_pattern.use_legacy_loadgen_qps_metrics",),
    ),
    Setting(
        name="warmup.enabled", default=False, convert=coerce.boolean,
        yaml_keys=("settings.warmup.enabled",), fills_field=False,
    ),
    Setting(
        # counted only when the warmup is enabled
        name="warmup.n_requests", convert=coerce.positive_integer,
        yaml_keys=("settings.warmup.n_requests",), fills_field=False, converted_by_rule=True,
    ),
    Setting(name="generation.temperature", convert=coerce.number,
            yaml_keys=("model_params.temperature",)),
    Setting(name="generation.seed", convert=coerce.seed, yaml_keys=("model_params.seed",)),
    Setting(name="generation.top_k", convert=coerce.any_integer,
            yaml_keys=("model_params.top_k",)),
    Setting(name="generation.top_p", convert=coerce.number, yaml_keys=("model_params.top_p",)),
    Setting(name="generation.repetition_penalty", convert=coerce.number,
            yaml_keys=("model_params.repetition_penalty",)),
    Setting(name="generation.presence_penalty", convert=coerce.number,
            yaml_keys=("model_params.presence_penalty",)),
    Setting(name="generation.frequency_penalty", convert=coerce.number,
            yaml_keys=("model_params.frequency_penalty",)),
    Setting(name="generation.chat_template_kwargs", convert=coerce.mapping,
            yaml_keys=("model_params.chat_template_kwargs",)),
    # Fields no flag or key gives ------------------------------------------------------------
    # the curve's concurrencies: rules.curve_or_point fills it from --concurrency
    Setting(name="sweep", default=()),
    # the rates of a request-rate curve (``--target-qps 2,4,8``): sweep/rates.py
    Setting(name="rate_sweep", default=()),
    # a duration ends at a dataset pass's end: the curve sets it for its points (spec §2.4)
    Setting(name="whole_passes", default=False),
)
# fmt: on

SETTINGS_BY_NAME: Mapping[str, Setting] = {setting.name: setting for setting in SETTINGS}

#: ``-c/--config``: the YAML file the rows' keys are read from (no setting itself).
CONFIG_FILE_FLAG = Flag(
    name="--config", group="endpoint", metavar="FILE", help="YAML run configuration"
)


def default_of(name: str) -> Any:
    """The default of the setting ``name`` (KeyError for no such row: a
    RunConfig field without one fails at import)."""
    return SETTINGS_BY_NAME[name].default
