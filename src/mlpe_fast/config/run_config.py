"""The one run configuration: :class:`RunConfig` is what ``mlpe-fast run``
executes (``resolve`` builds it from the flags and YAML file).

Every default is the setting's row in ``schema`` (:func:`~.schema.default_of`),
written there once.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..load.dataset import DatasetSpec
from ..load.salt import default_salt_seed
from .choices import (
    ApiType,
    HarmonyMode,
    LoadPattern,
    Mode,
    OfflineKind,
    ReceiveStamps,
    Streaming,
    TokenSaltPlacement,
)
from .request_extras import TokenizerCheck
from .schema import default_of
from .slo import Slo

__all__ = ("WARMUP_DATASET_PASS", "Generation", "RunConfig", "Seeds", "Timeouts")

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

    connect_s: float = default_of("timeouts.connect_s")
    idle_s: float = default_of("timeouts.idle_s")
    total_s: float | None = default_of("timeouts.total_s")


class Seeds(msgspec.Struct, frozen=True, kw_only=True):
    """RNG seeds (spec §2.5); defaults are seed set A.

    ``salt`` and ``warmup`` default (None) to values derived from
    ``sample_index``; ``resolve`` always fills them in.
    """

    scheduler: int = default_of("seeds.scheduler")
    sample_index: int = default_of("seeds.sample_index")
    salt: int | None = default_of("seeds.salt")
    warmup: int | None = default_of("seeds.warmup")

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

    temperature: float | None = default_of("generation.temperature")
    seed: int | None = default_of("generation.seed")
    top_k: int | None = default_of("generation.top_k")
    top_p: float | None = default_of("generation.top_p")
    repetition_penalty: float | None = default_of("generation.repetition_penalty")
    presence_penalty: float | None = default_of("generation.presence_penalty")
    frequency_penalty: float | None = default_of("generation.frequency_penalty")
    chat_template_kwargs: dict[str, Any] | None = default_of("generation.chat_template_kwargs")

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
        api_type: "openai" (``/v1/chat/completions``),
            "openai-completions" (``/v1/completions``) or "sglang"
            (SGLang's native ``/generate``).
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
        token_salt: where the salt goes in a token-id prompt: "user" (after
            the user turn's header) or "start" (before the first id); see
            ``load/token_salt.py``.
        harmony: whether text prompts on ``/v1/completions`` are encoded
            in the Harmony format (``load/harmony.py``): "auto" (when the
            tokenizer has the Harmony tokens), "on" or "off"; the datasets
            it applies to carry their ``DatasetSpec.harmony``.
        harmony_date: the Harmony system message's date (filled in with
            the day of the run when Harmony applies).
        goodput: the latency bounds of ``--goodput`` (``metrics/goodput.py``;
            not an MLPerf metric); None: no goodput reported.
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
        rate_sweep: the Poisson rates of a request-rate curve
            (``--target-qps 2,4,8``; ``sweep/rates.py``); empty for one
            point at ``target_qps``.
        max_concurrency: the system's C_max (``--max-concurrency``); with
            no list, the sweep's points are planned from it (spec §2.1-2.2).
        offline: the curve's Offline point (spec §2.3): "dedicated" (a
            burst of the whole dataset), "elected" (the C_max point) or
            "none".
        whole_passes: a duration ends at the end of a dataset pass (spec
            §2.4; set for the points of a curve).
        min_passes: a duration ends only once this many whole dataset
            passes are issued (``--min-passes``; 4 for a curve's points
            sized by the rules, the super-passes a steady-state window
            needs, spec §1.4).
        max_connections: the client's connection cap (YAML
            ``settings.client.max_connections``); None: one per request.
        http2: speak HTTP/2: h2c with prior knowledge on ``http://``, ALPN
            on ``https://`` (YAML ``mlpe_fast.http2``).
        ca_bundle: PEM file of the CAs trusted for ``https://`` endpoints
            (YAML ``mlpe_fast.ca_bundle``); None: the system's.
        insecure: skip TLS certificate verification (YAML
            ``settings.client.insecure``, as in the reference).
        receive_stamps: "kernel" stamps cleartext reads (HTTP/1.1, h2c) with the
            kernel's arrival stamps where it gives them (Linux); "packet"
            stamps each byte with the arrival of the TCP segment that carried
            it, from a packet socket (needs CAP_NET_RAW; else "kernel"); "read"
            stamps every read as it is read (YAML
            ``mlpe_fast.receive_stamps``).
        receive_priority: the receive thread's SCHED_FIFO priority, asked
            for where permitted (``--receive-priority``; YAML
            ``mlpe_fast.receive_priority``): None is ``auto`` (priority
            ``engine.rx_sched.AUTO_PRIORITY``), 0 is ``off`` (the policy the
            process has).
        receive_cpus: the CPUs the receive thread is pinned to
            (``--receive-cpu``; YAML ``mlpe_fast.receive_cpu``); empty: no pin.
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
        headers: header fields of every request (``--header``; YAML
            ``mlpe_fast.headers``), the calls before the load included.
        extra_body: a JSON object merged into every request body
            (``--extra-body``; YAML ``mlpe_fast.extra_body``); None: none.
        reset_prefix_cache: the route POSTed to before each point to empty
            the endpoint's prefix cache (``--reset-prefix-cache``; YAML
            ``mlpe_fast.reset_prefix_cache``); None: no reset.
        tokenizer_check: compare the client's prompt token counts with the
            endpoint's ``/tokenize`` before the load: "auto" (when offered),
            "on" (insist) or "off" (``--tokenizer-check``).
        server_metrics: the server's Prometheus page read through each
            point: "auto" (the endpoint's origin + ``/metrics``, when
            offered), "off", or its URL (``--server-metrics``).
        server_metrics_interval_s: seconds between two scrapes
            (``--server-metrics-interval``).
    """

    endpoints: tuple[str, ...] = default_of("endpoints")
    model: str = default_of("model")
    api_key: str | None = default_of("api_key")
    api_type: ApiType = default_of("api_type")
    datasets: tuple[DatasetSpec, ...] = default_of("datasets")
    tokenizer: str | None = default_of("tokenizer")
    load_pattern: LoadPattern = default_of("load_pattern")
    concurrency: int = default_of("concurrency")
    target_qps: float | None = default_of("target_qps")
    num_samples: int | None = default_of("num_samples")
    duration_s: float | None = default_of("duration_s")
    max_duration_s: float | None = default_of("max_duration_s")
    warmup_requests: int = default_of("warmup_requests")
    warmup_salt: bool = default_of("warmup_salt")
    warmup_drain: bool = default_of("warmup_drain")
    streaming: Streaming = default_of("streaming")
    max_output_tokens: int = default_of("max_output_tokens")
    send_max_tokens: bool = default_of("send_max_tokens")
    generation: Generation = Generation()
    report_dir: str | None = default_of("report_dir")
    timeouts: Timeouts = Timeouts()
    seeds: Seeds = Seeds()
    salt: bool = default_of("salt")
    token_salt: TokenSaltPlacement = default_of("token_salt")
    harmony: HarmonyMode = default_of("harmony")
    goodput: Slo | None = default_of("goodput")
    harmony_date: str | None = default_of("harmony_date")
    name: str = default_of("name")
    use_legacy_loadgen_qps_metrics: bool = default_of("use_legacy_loadgen_qps_metrics")
    mode: Mode = default_of("mode")
    mlperf_model: str = default_of("mlperf_model")
    sweep: tuple[int, ...] = default_of("sweep")
    rate_sweep: tuple[float, ...] = default_of("rate_sweep")
    max_concurrency: int | None = default_of("max_concurrency")
    offline: OfflineKind = default_of("offline")
    whole_passes: bool = default_of("whole_passes")
    min_passes: int = default_of("min_passes")
    max_connections: int | None = default_of("max_connections")
    warmup_connections: int | None = default_of("warmup_connections")
    http2: bool = default_of("http2")
    ca_bundle: str | None = default_of("ca_bundle")
    insecure: bool = default_of("insecure")
    receive_stamps: ReceiveStamps = default_of("receive_stamps")
    receive_priority: int | None = default_of("receive_priority")
    receive_cpus: tuple[int, ...] = default_of("receive_cpus")
    engines: int = default_of("engines")
    min_streams_per_engine: int = default_of("min_streams_per_engine")
    ray: str | None = default_of("ray")
    dry_run: bool = default_of("dry_run")
    headers: tuple[tuple[str, str], ...] = default_of("headers")
    extra_body: dict[str, Any] | None = default_of("extra_body")
    reset_prefix_cache: str | None = default_of("reset_prefix_cache")
    tokenizer_check: TokenizerCheck = default_of("tokenizer_check")
    server_metrics: str = default_of("server_metrics")
    server_metrics_interval_s: float = default_of("server_metrics_interval_s")

    @property
    def stream(self) -> bool:
        """Whether requests ask for a streamed response."""
        if self.streaming == "auto":
            return self.load_pattern != "offline"
        return self.streaming == "on"

    def connections_to_open(self, concurrency: int, samples: int | None) -> int:
        """How many connections a client carrying ``concurrency`` requests
        at once opens before its first request (``--warmup-connections``):
        the number given, else one per request in flight (the Offline burst:
        one per sample of ``samples``), within ``--max-connections``; with
        HTTP/2 one per endpoint, whose streams share it."""
        if self.warmup_connections is not None:
            wanted = self.warmup_connections
        elif self.http2:
            wanted = max(1, len(self.endpoints))
        elif self.load_pattern == "offline" and samples is not None:
            wanted = samples
        else:
            wanted = concurrency
        if self.max_connections is not None:
            wanted = min(wanted, self.max_connections * max(1, len(self.endpoints)))
        return wanted

    @property
    def route(self) -> str:
        """The request path for ``api_type``."""
        if self.api_type == "openai-completions":
            return "/v1/completions"
        if self.api_type == "sglang":
            return "/generate"
        return "/v1/chat/completions"

    @property
    def performance_datasets(self) -> tuple[DatasetSpec, ...]:
        return tuple(d for d in self.datasets if d.type == "performance")

    @property
    def accuracy_datasets(self) -> tuple[DatasetSpec, ...]:
        return tuple(d for d in self.datasets if d.type == "accuracy")
