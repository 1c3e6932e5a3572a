"""The cross-field rules: what one setting means, or may be, given the
others.  ``resolve`` applies :data:`RULES` in order, after every setting
is converted.

A rule takes the settings as given (for the flag or key a message names)
and the values so far (every setting's, converted or its default), and
returns the values it derives (none for a rule that only checks); it
raises :class:`~mlpe_fast.errors.UsageError` for a combination that
cannot run, rather than leave a setting silently unused.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from ..accuracy.methods import check_scorer_packages
from ..engine.client import REDACTED
from ..errors import UsageError
from ..load.agentic import AgenticSettings
from ..load.dataset import DatasetSpec
from ..load.harmony import (
    HARMONY_EFFORTS,
    PHASE_EFFORT,
    HarmonyEffort,
    HarmonyPrompts,
    harmony_encoder,
)
from ..load.salt import default_salt_seed
from .endpoints import ROUTE_OF, ROUTES, named_route
from .given import GivenSettings
from .run_config import WARMUP_DATASET_PASS
from .schema import SETTINGS_BY_NAME

__all__ = (
    "API_KEY_ENV",
    "RULES",
    "Rule",
    "accuracy_phase_needs_an_accuracy_dataset",
    "accuracy_scorers_installed",
    "agentic_datasets",
    "agentic_offline",
    "agentic_requests",
    "agentic_run_limits",
    "api_key",
    "authorization_said_once",
    "curve_or_point",
    "default_name",
    "derived_seeds",
    "durations_in_order",
    "extra_body_said_once",
    "harmony_datasets",
    "load_pattern_of_the_test_type",
    "mode_of_the_test_type",
    "model_with_endpoints",
    "one_performance_dataset",
    "pattern_flags_in_use",
    "poisson_needs_a_rate",
    "poisson_on_one_engine",
    "min_passes_extend_a_duration",
    "rate_curve_or_point",
    "route_matches_api_type",
    "server_metrics_page_per_endpoint",
    "synthetic_datasets",
    "token_datasets",
    "unique_dataset_names",
    "warmup_from_yaml",
)

logger = logging.getLogger(__name__)

Values = Mapping[str, Any]
Rule = Callable[[GivenSettings, Values], Values]
_NONE: Values = {}

API_KEY_ENV = "OPENAI_API_KEY"
"""Where the API key is read from when no flag or YAML key gives it (the
OpenAI SDK's variable, which vLLM's and SGLang's benchmarks read too)."""


def unique_dataset_names(given: GivenSettings, values: Values) -> Values:
    """Two datasets of one type and name would write over each other's results."""
    seen: set[tuple[str, str]] = set()
    for spec in values["datasets"]:
        key = (spec.display_name, spec.type)
        if key in seen:
            raise UsageError(
                f"datasets: two {spec.type} datasets are named {spec.display_name!r}; "
                "give one a name=..."
            )
        seen.add(key)
    return _NONE


def _test_type(given: GivenSettings, values: Values) -> str:
    """The reference's top-level ``type``: "offline" or "online" (a
    ``submission`` config's is its ``benchmark_mode``, by default online;
    ``eval``, its accuracy-only configs, is online)."""
    test_type: str = values["type"]
    if test_type == "submission":
        found = given.get("benchmark_mode")
        setting = SETTINGS_BY_NAME["benchmark_mode"]
        mode: str = setting.default if found is None else _convert("benchmark_mode", given)
        return mode
    return "online" if test_type == "eval" else test_type


def load_pattern_of_the_test_type(given: GivenSettings, values: Values) -> Values:
    """Without a load pattern: Poisson for a target QPS, else the burst for
    an offline config.  A YAML offline config cannot name another pattern
    (a flag may: it is the run's, not the file's)."""
    test_type = _test_type(given, values)
    found = given.get("load_pattern")
    if found is not None:
        pattern = values["load_pattern"]
        if test_type == "offline" and pattern != "offline" and "load_pattern" not in given.by_flag:
            raise UsageError(
                f"{found.where}: an offline config (type: offline) must use max_throughput, "
                f"got {found.value!r}"
            )
        return _NONE
    if values["target_qps"] is not None:
        return {"load_pattern": "poisson"}
    if test_type == "offline":
        return {"load_pattern": "offline"}
    return _NONE


def mode_of_the_test_type(given: GivenSettings, values: Values) -> Values:
    """``type: eval`` (the reference's accuracy-only configs) is the accuracy
    phase only, unless a mode is given."""
    if values["type"] == "eval" and given.get("mode") is None:
        return {"mode": "acc"}
    return _NONE


def curve_or_point(given: GivenSettings, values: Values) -> Values:
    """A list of concurrencies is a curve (``sweep``) starting at its first;
    one concurrency (a list of one, too) is one point."""
    concurrency = values["concurrency"]
    if isinstance(concurrency, tuple):
        return {"concurrency": concurrency[0], "sweep": concurrency if len(concurrency) > 1 else ()}
    return _NONE


def rate_curve_or_point(given: GivenSettings, values: Values) -> Values:
    """A list of rates is a request-rate curve (``rate_sweep``) starting at
    its first; one rate (a list of one, too) is one Poisson point.  A rate
    curve is no MLPerf curve (spec §2.4): it has no C_max to plan from and
    no Offline point, and it measures performance."""
    rates = values["target_qps"]
    if not isinstance(rates, tuple):
        return _NONE
    if len(rates) > 1:
        where = given.where("target_qps", "--target-qps")
        for name, why in (
            ("max_concurrency", "plans a concurrency curve"),
            ("offline", "is a concurrency curve's Offline point"),
        ):
            if name in given:
                raise UsageError(
                    f"{given.values[name].where}: not for a request-rate curve ({where} "
                    f"{','.join(f'{r:g}' for r in rates)}): it {why}; leave it out"
                )
        if values["mode"] == "acc":
            raise UsageError(
                f"{given.where('mode', '--mode')} acc: a request-rate curve measures "
                "performance at each rate; use --mode perf or both"
            )
    return {"target_qps": rates[0], "rate_sweep": rates if len(rates) > 1 else ()}


def poisson_needs_a_rate(given: GivenSettings, values: Values) -> Values:
    if values["load_pattern"] == "poisson" and values["target_qps"] is None:
        where = given.where("load_pattern", "--load-pattern poisson")
        raise UsageError(
            f"{where}: poisson needs a rate: --target-qps (YAML settings.load_pattern.target_qps)"
        )
    return _NONE


def accuracy_phase_needs_an_accuracy_dataset(given: GivenSettings, values: Values) -> Values:
    if values["mode"] != "perf" and not any(d.type == "accuracy" for d in values["datasets"]):
        found = given.get("mode")
        where = given.where("mode", "type")
        raise UsageError(
            f"{where} {found.value if found else 'eval'}: no accuracy dataset; add "
            "--dataset acc:PATH,accuracy_config.ground_truth=COLUMN"
        )
    return _NONE


def accuracy_scorers_installed(given: GivenSettings, values: Values) -> Values:
    """The scorers' packages are the ``accuracy`` extra: a run that needs
    one that is missing says so before any load."""
    if values["mode"] != "perf":
        check_scorer_packages(d.accuracy for d in values["datasets"] if d.type == "accuracy")
    return _NONE


def one_performance_dataset(given: GivenSettings, values: Values) -> Values:
    """A run measures one performance dataset (its samples are the point's
    queries); a second one would be silently left out."""
    performance = [d for d in values["datasets"] if d.type == "performance"]
    if len(performance) > 1:
        where = "--dataset" if "datasets" in given.by_flag else "datasets"
        names = ", ".join(d.display_name for d in performance)
        raise UsageError(
            f"{where}: {len(performance)} performance datasets ({names}); a run measures one: "
            "keep one, or mark the others acc: with an accuracy_config"
        )
    return _NONE


# Flags a load pattern has no use for, and why.
_UNUSED_BY_PATTERN: Mapping[str, Mapping[str, str]] = {
    "concurrency": {"target_qps": "a rate is for --load-pattern poisson"},
    "poisson": {
        "concurrency": "a Poisson point has arrivals at --target-qps, no concurrency; "
        "a curve's points are fixed-concurrency points (spec §2.4)",
    },
    "offline": {
        "concurrency": "an Offline point issues every sample at once (its concurrency is "
        "the sample count)",
        "duration_s": "an Offline point issues the dataset once, at once; size it with "
        "--num-samples",
    },
}


def pattern_flags_in_use(given: GivenSettings, values: Values) -> Values:
    """Flags given beside a load pattern that has no use for them: refused,
    rather than silently ignored (a curve's points are fixed-concurrency
    points, spec §2.4)."""
    pattern = values["load_pattern"]
    unused = _UNUSED_BY_PATTERN.get(pattern, {})
    for name in sorted(given.by_flag & {"concurrency", "target_qps", "duration_s"}):
        why = unused.get(name)
        if why:
            raise UsageError(
                f"{given.values[name].where}: not for --load-pattern {pattern}: {why}; leave it out"
            )
    return _NONE


def poisson_on_one_engine(given: GivenSettings, values: Values) -> Values:
    """A Poisson point's arrival times come from one seeded stream, which one
    engine issues (docs/scale.md); refused here, with the other settings,
    so that ``--dry-run`` refuses it as the run does."""
    if values["load_pattern"] == "poisson" and (values["engines"] != 1 or values["ray"]):
        where = given.where("engines", given.where("ray", "--engines"))
        raise UsageError(
            f"{where}: a Poisson point runs on one engine (its arrival times come from "
            "one seeded stream); drop it or use a concurrency point"
        )
    return _NONE


def min_passes_extend_a_duration(given: GivenSettings, values: Values) -> Values:
    """``--min-passes`` keeps a duration issuing until whole dataset passes
    are out (``load/phase_schedule.py``): a run without a duration (a count,
    one dataset pass, an Offline burst, an agentic budget) would ignore it.
    A concurrency curve not sized by a count has one: the rules' minimum
    (``sweep/runner.py``, spec §2.4)."""
    passes = values["min_passes"]
    if not passes:
        return _NONE
    where = f"{given.where('min_passes', '--min-passes')} {passes}"
    pattern = values["load_pattern"]
    if pattern in ("offline", "agentic_inference"):
        why = (
            "an Offline point issues its samples once, at once"
            if pattern == "offline"
            else ("it runs until its trajectories end")
        )
        raise UsageError(f"{where}: not for --load-pattern {pattern}: {why}; leave it out")
    curve = bool(values["sweep"]) or values["max_concurrency"] is not None
    if values["duration_s"] is None and not (curve and values["num_samples"] is None):
        size = (
            f"{given.where('num_samples', '--num-samples')} {values['num_samples']}"
            if values["num_samples"] is not None
            else "one dataset pass"
        )
        raise UsageError(
            f"{where}: whole passes extend a --duration, and this run has none (it issues "
            f"{size}); add --duration, or leave it out"
        )
    return _NONE


def model_with_endpoints(given: GivenSettings, values: Values) -> Values:
    """Every request names its model; the demo's simulated endpoint has its own."""
    if values["endpoints"] and not values["model"]:
        raise UsageError(
            "--model is required with --endpoints (YAML: model_params.name): "
            "it is the model field of every request"
        )
    return _NONE


def api_key(given: GivenSettings, values: Values) -> Values:
    """The API key: ``--api-key`` (YAML ``endpoint_config.api_key``), else
    the first line of ``--api-key-file`` (YAML ``mlpe_fast.api_key_file``),
    else ``$OPENAI_API_KEY`` when an endpoint is measured; a command line
    shows in ``ps``, a file or the environment does not."""
    key, key_file = given.get("api_key"), given.get("api_key_file")
    if key is not None and key_file is not None and key.value != REDACTED:
        raise UsageError(f"{key.where} and {key_file.where}: give the API key one way")
    from_env = os.environ.get(API_KEY_ENV, "").strip() if values["endpoints"] else ""
    if key is not None:
        if values["api_key"] != REDACTED:
            return _NONE
        # A written config.yaml run again: the key comes from elsewhere.
        if key_file is None:
            if not from_env:
                logger.warning(
                    "mlpe-fast: %s is %r (a written config.yaml): sending no API key "
                    "(set %s or pass --api-key-file)",
                    key.where,
                    REDACTED,
                    API_KEY_ENV,
                )
            return {"api_key": from_env or None}
    if key_file is not None:
        return {"api_key": _key_from_file(values["api_key_file"], key_file.where)}
    return {"api_key": from_env or None}


def _key_from_file(name: str, where: str) -> str:
    path = Path(name).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise UsageError(f"{where} {path}: cannot read the API key: {reason}") from None
    first = lines[0].strip() if lines else ""
    if not first:
        raise UsageError(f"{where} {path}: the file is empty (the key is its first line)")
    return first


def route_matches_api_type(given: GivenSettings, values: Values) -> Values:
    """An endpoint URL given with its whole route (copied from a curl
    command) must be the API type's route: the route is not sent as given."""
    found = given.get("endpoints")
    route = None if found is None else named_route(found)
    api_type = values["api_type"]
    if route is not None and ROUTES[route] != api_type:
        raise UsageError(
            f"--endpoints names the route {route}, but the API type {api_type} "
            f"sends to {ROUTE_OF[api_type]}: add --api-type {ROUTES[route]}, "
            "or give the base URL only"
        )
    return _NONE


def server_metrics_page_per_endpoint(given: GivenSettings, values: Values) -> Values:
    """A list of ``--server-metrics`` URLs names each endpoint's page, in
    ``--endpoints`` order (``point/server_metrics.py``): one for each
    (the demo's simulated endpoint is one); a single URL is every endpoint's."""
    pages = values["server_metrics"].split(",")
    endpoints = max(1, len(values["endpoints"]))
    if len(pages) > 1 and len(pages) != endpoints:
        where = given.where("server_metrics", "--server-metrics")
        raise UsageError(
            f"{where}: {len(pages)} pages for {endpoints} endpoint"
            f"{'s' if endpoints > 1 else ''}: give one URL per endpoint, in --endpoints order, "
            "or one URL for all"
        )
    return _NONE


def durations_in_order(given: GivenSettings, values: Values) -> Values:
    duration_s, max_duration_s = values["duration_s"], values["max_duration_s"]
    if duration_s is not None and max_duration_s is not None and max_duration_s < duration_s:
        where = given.where("max_duration_s", "--max-duration")
        raise UsageError(
            f"{where}: the maximum duration ({max_duration_s:g} s) is below the minimum "
            f"duration ({duration_s:g} s)"
        )
    return _NONE


def warmup_from_yaml(given: GivenSettings, values: Values) -> Values:
    """The reference's ``settings.warmup``: ``enabled`` with ``n_requests``
    queries, or one pass of the dataset without it (:data:`WARMUP_DATASET_PASS`).
    ``--warmup-requests`` replaces both (``schema``)."""
    if given.get("warmup_requests") is not None or not values["warmup.enabled"]:
        return _NONE
    if given.get("warmup.n_requests") is None:
        return {"warmup_requests": WARMUP_DATASET_PASS}
    return {"warmup_requests": _convert("warmup.n_requests", given)}


def derived_seeds(given: GivenSettings, values: Values) -> Values:
    """The salt seed defaults to ``sample_index + 2``: the reference's only
    salt generator is ``random.Random(warmup_random_seed + 2)`` with the
    warmup seed pinned to the sample-index seed by a ruleset
    (``mlpe_fast.load.salt``); the warmup seed defaults to the sample-index
    seed, as under a pinned ruleset."""
    sample_index = values["seeds.sample_index"]
    derived: dict[str, Any] = {}
    if values["seeds.salt"] is None:
        derived["seeds.salt"] = default_salt_seed(sample_index)
    if values["seeds.warmup"] is None:
        derived["seeds.warmup"] = sample_index
    return derived


def agentic_datasets(given: GivenSettings, values: Values) -> Values:
    """An agentic run's performance dataset has its ``agentic_inference``
    block (the defaults when given on the command line; ``--num-trajectories``
    sets its count), and only an agentic run has one (the reference's rule,
    ``config/schema.py``)."""
    datasets: tuple[DatasetSpec, ...] = values["datasets"]
    trajectories = values["num_trajectories"]
    performance = [d for d in datasets if d.type == "performance"]
    if values["load_pattern"] != "agentic_inference":
        for spec in performance:
            if spec.agentic is not None:
                raise UsageError(
                    f"dataset {spec.display_name}: an agentic_inference block needs the "
                    "agentic_inference load pattern (--load-pattern agentic_inference, "
                    "YAML settings.load_pattern.type)"
                )
        if trajectories is not None:
            raise UsageError("--num-trajectories: only an agentic_inference run has trajectories")
        return _NONE
    if not performance:
        where = given.where("load_pattern", "--load-pattern")
        raise UsageError(f"{where} agentic_inference: no performance dataset of trajectories")
    changed = []
    for spec in datasets:
        if spec.type == "performance":
            settings = spec.agentic or AgenticSettings()
            if trajectories is not None:
                settings = msgspec.structs.replace(settings, num_trajectories_to_issue=trajectories)
            spec = msgspec.structs.replace(spec, agentic=settings)
        changed.append(spec)
    return {"datasets": tuple(changed)}


# What an agentic run cannot be sized or paced by (``docs/agentic.md`` §2.1, §2.6).
_NOT_FOR_AGENTIC_RUNS = (
    ("num_samples", "its size is num_trajectories_to_issue (--num-trajectories)"),
    ("duration_s", "it runs until its trajectories end"),
    ("target_qps", "its turns follow each other"),
)


def agentic_run_limits(given: GivenSettings, values: Values) -> Values:
    """What an agentic run cannot have (``docs/agentic.md`` §2.1, §2.6):
    a size or pace of its own, a warmup, more than one engine."""
    if values["load_pattern"] != "agentic_inference":
        return _NONE
    for name, why in _NOT_FOR_AGENTIC_RUNS:
        if values[name] is not None:
            raise UsageError(f"{given.values[name].where}: not for an agentic_inference run: {why}")
    if values["warmup_requests"]:
        raise UsageError(
            f"{given.where('warmup_requests', 'warmup')}: an agentic_inference run has no "
            "warmup (the reference has none either)"
        )
    if values["engines"] != 1 or "ray" in given:
        where = given.where("engines", given.where("ray", ""))
        raise UsageError(f"{where}: an agentic_inference run uses one engine")
    return _NONE


_AGENTIC_SALT = (
    "its salt is the dataset's agentic_inference.enable_salt (YAML), the reference's setting"
)
_AGENTIC_CAP = "each turn carries its own limit (the dataset's, else --max-output-tokens)"


def agentic_requests(given: GivenSettings, values: Values) -> Values:
    """What an agentic run's requests cannot be asked to do: their bodies
    come from the dataset's turns (``load/agentic.py``), streamed, salted
    by its ``agentic_inference.enable_salt``, capped by each turn's own
    limit, on the chat route."""
    if values["load_pattern"] != "agentic_inference":
        return _NONE
    refused = (
        ("streaming", values["streaming"] == "off", "its turns are always streamed (TTFT, TPOT "
         "per turn)"),
        ("salt", "salt" in given and not values["salt"], _AGENTIC_SALT),
        ("send_max_tokens", values["send_max_tokens"], _AGENTIC_CAP),
        ("api_type", values["api_type"] != "openai",
         "its turns are chat messages (/v1/chat/completions)"),
    )  # fmt: skip
    for name, wrong, why in refused:
        if wrong:
            raise UsageError(f"{given.values[name].where}: not for an agentic_inference run: {why}")
    return _NONE


def agentic_offline(given: GivenSettings, values: Values) -> Values:
    """An agentic curve has no Offline point at all (spec §2.1; the checker's
    ``offline-point-present`` rejects one), so ``none`` whatever the default."""
    if values["load_pattern"] != "agentic_inference":
        return _NONE
    if "offline" in given and values["offline"] != "none":
        raise UsageError(
            f"{given.values['offline'].where} {values['offline']}: an agentic curve has no "
            "Offline point (spec §2.1); leave it out"
        )
    return {"offline": "none"}


def synthetic_datasets(given: GivenSettings, values: Values) -> Values:
    """A synthetic dataset is built with the run's tokenizer and seed, as
    ids on ``/v1/completions`` and SGLang's ``/generate`` (exact by
    construction) or text on the chat route, its OSL capped by the run's
    output cap (``load/synthetic.py``); an agentic run's dataset is
    trajectories, never synthetic prompts."""
    datasets: tuple[DatasetSpec, ...] = values["datasets"]
    if not any(d.synthetic is not None for d in datasets):
        return _NONE
    if values["load_pattern"] == "agentic_inference":
        where = given.where("load_pattern", "--load-pattern")
        raise UsageError(
            f"{where} agentic_inference: runs recorded trajectories, not a synthetic dataset"
        )
    tokenizer = values["tokenizer"] or values["model"] or None  # the demo's: demo_config
    changed = []
    for spec in datasets:
        synthetic = spec.synthetic
        if synthetic is not None:
            override = spec.generation_override
            cap = override.max_new_tokens if override is not None else None
            synthetic = msgspec.structs.replace(
                synthetic,
                seed=values["seeds.sample_index"] if synthetic.seed is None else synthetic.seed,
                tokenizer=tokenizer,
                form="ids" if values["api_type"] in ("openai-completions", "sglang") else "text",
                osl_cap=cap or values["max_output_tokens"],
            )
            synthetic.check(f"dataset {spec.display_name}")
            spec = msgspec.structs.replace(spec, synthetic=synthetic, path=synthetic.text)
        changed.append(spec)
    return {"datasets": tuple(changed)}


def harmony_datasets(given: GivenSettings, values: Values) -> Values:
    """Text prompts on ``/v1/completions`` and SGLang's ``/generate`` are
    encoded in gpt-oss's Harmony format and sent as ids, as the reference's
    completions and SGLang adapters do with every text prompt (their
    ``Harmonize`` transform; reference-client.md §11): with ``--harmony
    auto`` when the run's tokenizer is a Harmony vocabulary, with ``on``
    always (a tokenizer without the tokens is then refused).  The effort of each dataset is its own
    ``chat_template_kwargs.reasoning_effort``, else the run's, else the
    phase's MLPerf value (``load/harmony.py``); the date is
    ``--harmony-date``, else the day of the run, recorded in the run's
    configuration."""
    mode = values["harmony"]
    datasets: tuple[DatasetSpec, ...] = values["datasets"]
    text = [
        d
        for d in datasets
        if d.input_tokens_column is None and d.agentic is None and d.synthetic is None
    ]
    if mode == "off" or not text:
        return _NONE
    if values["api_type"] not in ("openai-completions", "sglang"):
        if mode == "on":
            raise UsageError(
                f"{given.where('harmony', '--harmony')} on: Harmony prompts are sent as token "
                "ids to /v1/completions or SGLang's /generate; add --api-type openai_completions "
                "(or sglang)"
            )
        return _NONE
    tokenizer = values["tokenizer"] or values["model"]
    try:
        harmony_encoder(tokenizer)
    except UsageError as error:
        if mode == "auto":  # not a Harmony vocabulary: the prompts stay text
            return _NONE
        raise UsageError(f"{given.where('harmony', '--harmony')} on: {error}") from error
    date = values["harmony_date"] or datetime.date.today().isoformat()
    run_kwargs = values["generation.chat_template_kwargs"] or {}
    changed = []
    for spec in datasets:
        if spec in text:
            kwargs = {**run_kwargs, **(_override_kwargs(spec) or {})}
            effort = _harmony_effort(spec, kwargs.get("reasoning_effort"))
            prompts = HarmonyPrompts(
                tokenizer=tokenizer, reasoning_effort=effort, conversation_start_date=date
            )
            spec = msgspec.structs.replace(spec, harmony=prompts)
        changed.append(spec)
    return {"datasets": tuple(changed), "harmony_date": date}


def _override_kwargs(spec: DatasetSpec) -> dict[str, Any] | None:
    override = spec.generation_override
    return None if override is None else override.chat_template_kwargs


def _harmony_effort(spec: DatasetSpec, given: object) -> HarmonyEffort:
    """The dataset's reasoning effort: ``given`` (its
    ``chat_template_kwargs.reasoning_effort``, any case, as the reference
    reads it), else its phase's."""
    if given is None:
        return PHASE_EFFORT[spec.type]
    effort = str(given).strip().lower()
    for known in HARMONY_EFFORTS:
        if effort == known:
            return known
    raise UsageError(
        f"dataset {spec.display_name}: chat_template_kwargs.reasoning_effort {given!r} is not "
        f"one of {', '.join(HARMONY_EFFORTS)}"
    )


def token_datasets(given: GivenSettings, values: Values) -> Values:
    """A pre-tokenized dataset (``parser.input_tokens``) is sent as
    ``prompt: [id, ...]`` to ``/v1/completions``, or as ``input_ids`` to SGLang's
    ``/generate`` (``--api-type sglang``, which sends nothing else): the chat
    route has no field for token ids.  Its queries are salted as text queries
    are, in the token stream as spec §2.5 asks ("if the client sends token IDs,
    the salt must be in the token stream"): the salt's ids go after the user
    turn's header, or before the first id with ``--token-salt start``
    (``load/token_salt.py``, which refuses at load time a tokenizer, template
    or sample it cannot place them in).  The reference refuses to salt
    ``input_tokens`` samples instead (``dataset_manager/dataset.py``
    ``_check_unsaltable``)."""
    # by flag, from the file, or the demo's (``demo.demo_defaults``)
    where = (
        "--dataset"
        if "datasets" in given.by_flag
        else "datasets"
        if "datasets" in given
        else ("dataset")
    )
    if values["api_type"] == "sglang":
        _sglang_sends_token_ids(values["datasets"], where)
    tokens = [d for d in values["datasets"] if d.pre_tokenized]
    if not tokens:
        return _NONE
    named = f"{where} {tokens[0].display_name}"
    if values["api_type"] not in ("openai-completions", "sglang"):
        raise UsageError(
            f"{named}: token ids (parser.input_tokens) cannot be sent to /v1/chat/completions; "
            "add --api-type openai_completions (YAML endpoint_config.api_type)"
        )
    return _NONE


def _sglang_sends_token_ids(datasets: tuple[DatasetSpec, ...], where: str) -> None:
    """SGLang's ``/generate`` gets token ids (``input_ids``), as the reference
    sends them (``sglang/adapter.py``: it encodes every text dataset into
    Harmony token ids first, ``Harmonize()``): a text prompt sent as SGLang's
    ``text`` would reach the model without any chat template, another prompt
    than the reference's, so a text dataset is refused."""
    for spec in datasets:
        if not spec.pre_tokenized:
            raise UsageError(
                f"{where} {spec.display_name}: --api-type sglang sends token ids to /generate "
                "(input_ids, as the reference); a text dataset has none: give its ids column "
                "with parser.input_tokens=COL, encode it in Harmony with the gpt-oss tokenizer "
                "(--harmony, docs/running.md), or use --api-type openai"
            )


#: The sampling fields a setting gives (``Generation``), by body field name.
_SAMPLING_FIELDS = (
    "temperature",
    "seed",
    "top_k",
    "top_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)


def extra_body_said_once(given: GivenSettings, values: Values) -> Values:
    """A field of ``--extra-body`` that a setting sends too (a sampling
    field of ``model_params``, or of a dataset's
    ``generation_config_override``) would be in the body twice: refused,
    naming both (``config/request_extras.py``)."""
    extra = values["extra_body"]
    if not extra:
        return _NONE
    where = given.where("extra_body", "--extra-body")
    for field in _SAMPLING_FIELDS:
        if field not in extra:
            continue
        if values[f"generation.{field}"] is not None:
            raise UsageError(f"{where}: {field!r} is model_params.{field} too; give it one way")
        for spec in values["datasets"]:
            override = spec.generation_override
            if override is not None and getattr(override, field) is not None:
                raise UsageError(
                    f"{where}: {field!r} is dataset {spec.display_name}'s "
                    f"generation_config_override.{field} too; give it one way"
                )
    return _NONE


def authorization_said_once(given: GivenSettings, values: Values) -> Values:
    """An ``Authorization`` header beside an API key (``--api-key``, its
    file or ``$OPENAI_API_KEY``) would send two credentials."""
    if values["api_key"] is None:
        return _NONE
    for name, _ in values["headers"]:
        if name.lower() == "authorization":
            where = given.where("headers", "--header")
            raise UsageError(
                f"{where}: {name} and an API key (--api-key, --api-key-file or "
                f"${API_KEY_ENV}) are two credentials; give one"
            )
    return _NONE


def default_name(given: GivenSettings, values: Values) -> Values:
    """Without a name, the benchmark is named as the reference derives it."""
    if values["name"]:
        return _NONE
    offline = values["load_pattern"] == "offline"
    return {"name": "offline_benchmark" if offline else "online_benchmark"}


def _convert(name: str, given: GivenSettings) -> Any:
    """A ``converted_by_rule`` setting's value, read where the rule needs it."""
    setting, found = SETTINGS_BY_NAME[name], given.get(name)
    assert setting.convert is not None and found is not None
    return setting.convert(found)


#: In order: a rule may read what an earlier one derived.
RULES: tuple[Rule, ...] = (
    unique_dataset_names,
    load_pattern_of_the_test_type,
    mode_of_the_test_type,
    curve_or_point,
    rate_curve_or_point,
    poisson_needs_a_rate,
    accuracy_phase_needs_an_accuracy_dataset,
    accuracy_scorers_installed,
    one_performance_dataset,
    pattern_flags_in_use,
    poisson_on_one_engine,
    model_with_endpoints,
    api_key,
    route_matches_api_type,
    server_metrics_page_per_endpoint,
    durations_in_order,
    min_passes_extend_a_duration,
    warmup_from_yaml,
    derived_seeds,
    synthetic_datasets,
    agentic_datasets,
    harmony_datasets,
    token_datasets,
    agentic_run_limits,
    agentic_requests,
    agentic_offline,
    extra_body_said_once,
    authorization_said_once,
    default_name,
)
