"""Everything a point needs, checked before any file is written and held
on one exit stack while it runs.

:func:`open_point` loads the datasets, tokenizer and chat template, checks
that the endpoint answers and that an accuracy service can be used (a
mistake found here costs nothing), compares the tokenizer with the
endpoint's, empties its prefix cache where asked and asks for its metrics
page (the calls before the load, recorded in ``server_calls.json``), plans
the engines, then opens -- in this
order, closed in reverse whatever happens -- the Ray cluster, the run
folder's writer, the token counter, the progress bar, the signal handlers,
the client and the session (its start logged, the logs flushed every
second).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, TextIO
from urllib.parse import urlsplit

import msgspec

from ..accuracy.deepseek_r1 import is_code_subset
from ..accuracy.livecodebench import CODE_BENCH_METHOD, LiveCodeBenchError, LiveCodeBenchOptions
from ..accuracy.livecodebench import check_ready as check_livecodebench
from ..accuracy.methods import DEEPSEEK_R1_METHOD
from ..accuracy.swe_bench import SweBenchError, SweBenchOptions, check_service
from ..clients import client_for
from ..config import RunConfig
from ..engine import EndpointUnreachable
from ..engine.pool import open_capture
from ..engine.replicas import AnyClient
from ..errors import UsageError
from ..load.agentic import AgenticDataset, AgenticSettings, load_agentic
from ..load.dataset import Dataset, load_dataset
from ..load.requests import token_salting_for
from ..metrics.chat_template import ChatTemplate, tokenizer_dir
from ..metrics.tokens import TokenCounter, load_tokenizer
from ..report.progress import Progress
from .engines import EnginePlan, engine_plan
from .interrupt import Interrupt
from .prefix_cache import reset_prefix_caches
from .server_metrics import MetricsPlan, probe_metrics
from .tokenizer_check import check_tokenizer
from .writer import RunWriter

__all__ = (
    "SWE_BENCH_METHOD",
    "Point",
    "PointInputs",
    "agentic_settings",
    "check_counting",
    "is_swe_bench",
    "open_point",
    "swe_bench_options",
)

SWE_BENCH_METHOD = "swe_bench_scorer"
"""The ``eval_method`` of a SWE-bench accuracy dataset (the reference's)."""


class PointInputs(msgspec.Struct, frozen=True):
    """What a point reads: its performance dataset (None in ``--mode acc``
    and for an agentic run), its trajectories (an agentic run), its
    accuracy datasets (``--mode acc|both``), the tokenizer and the chat
    template beside it (spec §1.2; None when it has none)."""

    dataset: Dataset | None
    agentic: AgenticDataset | None
    accuracy: list[Dataset]
    tokenizer: Any
    template: ChatTemplate | None


class Point(msgspec.Struct, frozen=True):
    """What a point's phases share while it runs; ``progress`` is None when
    no bar is shown; ``metrics``: the server's metrics page to scrape
    beside the load (``point/server_metrics.py``)."""

    config: RunConfig
    endpoints: tuple[str, ...]
    inputs: PointInputs
    plan: EnginePlan | None
    client: AnyClient
    writer: RunWriter
    counter: TokenCounter
    interrupt: Interrupt
    progress: Progress | None
    metrics: MetricsPlan = MetricsPlan()


def load_inputs(config: RunConfig) -> PointInputs:
    """Reads the datasets and the tokenizer.

    Raises:
        UsageError: a dataset or the tokenizer cannot be read.
    """
    agentic = (
        load_agentic(config.performance_datasets[0].path)
        if config.mode != "acc" and config.load_pattern == "agentic_inference"
        else None
    )
    dataset = None
    if config.mode != "acc" and agentic is None:
        if not config.performance_datasets:
            raise UsageError("no performance dataset: pass --dataset PATH[,parser.prompt=COLUMN]")
        dataset = load_dataset(config.performance_datasets[0])
        if config.salt or (config.warmup_requests and config.warmup_salt):
            token_salting_for(dataset, config)  # a salt that cannot be placed: before any load
    accuracy = (
        [load_dataset(spec) for spec in config.accuracy_datasets] if config.mode != "perf" else []
    )
    return PointInputs(dataset, agentic, accuracy, _tokenizer(config), _template(config))


@contextlib.asynccontextmanager
async def open_point(
    config: RunConfig,
    endpoints: Sequence[str],
    *,
    err: TextIO | None = None,
    progress: bool = True,
    ray_clocks: dict[int, Any] | None = None,
) -> AsyncIterator[Point]:
    """The point's resources, ready (see the module doc).

    Raises:
        UsageError: the configuration cannot be run (bad dataset, tokenizer,
            an endpoint that cannot be reached, an unusable service).
    """
    urls = tuple(endpoints)
    turn_timeout = (
        agentic_settings(config).turn_timeout_s
        if config.mode != "acc" and config.load_pattern == "agentic_inference"
        else None
    )
    client = client_for(config, urls, turn_timeout_s=turn_timeout)  # the cheapest mistake first
    inputs = load_inputs(config)
    await _check_reachable(client)
    _check_packet_stamps(config, urls, err)
    for dataset in inputs.accuracy:  # a service that cannot be used: before any load
        if is_swe_bench(dataset):
            try:
                check_service(swe_bench_options(dataset, config))
            except SweBenchError as error:
                raise UsageError(str(error)) from None
        else:
            try:
                _check_code_route(dataset)
            except LiveCodeBenchError as error:
                raise UsageError(str(error)) from None
    calls, metrics = await _server_calls(config, urls, inputs, err)
    async with contextlib.AsyncExitStack() as stack:
        plan = engine_plan(config, inputs.dataset, ray_clocks)
        if plan is not None:
            stack.callback(plan.close)
        writer = stack.enter_context(RunWriter(config, urls))
        writer.open(err)
        writer.server_calls(calls)
        # Counted after the load; the jobs waiting meanwhile go to a file in
        # the run folder (metrics/count_spill.py: memory flat in run length).
        counter = TokenCounter(
            inputs.tokenizer, template=inputs.template, live=False, spill_dir=writer.path
        )
        stack.callback(counter.close)
        bar = None
        if progress:
            bar = Progress(
                stream=err,
                total=config.num_samples,
                label=f"c={config.concurrency}" if config.load_pattern == "concurrency" else "",
            )
            stack.callback(bar.stop)
        interrupt = Interrupt(client)
        interrupt.install()
        stack.callback(interrupt.uninstall)
        await stack.enter_async_context(client)
        await stack.enter_async_context(writer.session(on_refused=lambda _: interrupt.stop()))
        yield Point(config, urls, inputs, plan, client, writer, counter, interrupt, bar, metrics)


async def _server_calls(
    config: RunConfig, urls: Sequence[str], inputs: PointInputs, err: TextIO | None
) -> tuple[dict[str, Any], MetricsPlan]:
    """The calls before the load, in this order: the tokenizer check
    (``tokenizer_check.py``: its texts must not stay in the cache), the
    prefix caches emptied (``prefix_cache.py``), then the metrics pages
    asked once (``server_metrics.py``); what they did, for the run folder's
    ``server_calls.json``, and what is to be scraped."""
    datasets = [d for d in (inputs.dataset, *inputs.accuracy) if d is not None]
    calls: dict[str, Any] = {}
    check = await check_tokenizer(config, urls[0], datasets, inputs.tokenizer, err=err)
    if check is not None:
        calls["tokenizer_check"] = check
    resets = await reset_prefix_caches(config, urls, err=err)
    if resets:
        calls["prefix_cache_reset"] = resets
    metrics, probe = await probe_metrics(config, urls, err=err)
    if probe is not None:
        calls["server_metrics_probe"] = probe
    return calls, metrics


def _check_packet_stamps(config: RunConfig, urls: Sequence[str], err: TextIO | None) -> None:
    """``--receive-stamps packet`` that cannot be had is one line of
    warning, and the run goes on with kernel stamps (the audit says it too)."""
    if config.receive_stamps != "packet":
        return
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme == "https":
            note = "segment stamps apply to cleartext connections only"
        else:
            capture, note = open_capture(parts.hostname or "", parts.port or 80)
            if capture is not None:
                capture.close()
                continue
        print(
            f"mlpe-fast: warning: --receive-stamps packet: {note}; using kernel stamps",
            file=err if err is not None else sys.stderr,
        )
        return


async def _check_reachable(client: AnyClient) -> None:
    """An endpoint that is not there is a usage mistake, said before any
    file is written."""
    try:
        await client.check_reachable()
    except EndpointUnreachable as error:
        if error.error_class in ("TLSError", "HTTP2Unsupported"):  # the message says what to do
            raise UsageError(str(error)) from None
        raise UsageError(f"{error}; check --endpoints and that the server is up") from None


def check_counting(config: RunConfig) -> None:
    """Loads the tokenizer and the chat template a run counts with, as the
    run would (``--dry-run``: a bad ``--tokenizer`` fails before the load,
    not after it).

    Raises:
        UsageError: the tokenizer or its template cannot be read.
    """
    _tokenizer(config)
    _template(config)


def _tokenizer(config: RunConfig) -> Any:
    name = config.tokenizer or config.model
    try:
        return load_tokenizer(name)
    except UsageError as error:
        if config.tokenizer:
            raise
        raise UsageError(
            f"cannot count tokens for model {config.model!r}: {error}; pass --tokenizer DIR"
        ) from None


def _template(config: RunConfig) -> ChatTemplate | None:
    directory = tokenizer_dir(config.tokenizer or config.model)
    return None if directory is None else ChatTemplate.from_tokenizer_dir(directory)


def agentic_settings(config: RunConfig) -> AgenticSettings:
    """An agentic run's settings (its dataset's ``agentic:`` block)."""
    settings = config.performance_datasets[0].agentic
    return settings if settings is not None else AgenticSettings()


def is_swe_bench(dataset: Dataset) -> bool:
    accuracy = dataset.spec.accuracy
    return accuracy is not None and accuracy.eval_method == SWE_BENCH_METHOD


def swe_bench_options(dataset: Dataset, config: RunConfig) -> SweBenchOptions:
    accuracy = dataset.spec.accuracy
    extras = {} if accuracy is None or accuracy.extras is None else accuracy.extras
    return SweBenchOptions.from_extras(extras, workers=config.concurrency)


def _check_code_route(dataset: Dataset) -> None:
    """A dataset graded by running code can be: a LiveCodeBench set, or
    the DeepSeek-R1 set's LiveCodeBench samples where its extras name a way
    to run them (else those are left ungraded, as the reference does).

    Raises:
        LiveCodeBenchError: the service does not answer, tests are missing,
            or no way to run the code was allowed.
    """
    accuracy = dataset.spec.accuracy
    method = None if accuracy is None else accuracy.eval_method
    if method == CODE_BENCH_METHOD:
        check_livecodebench(_livecodebench_options(dataset), dataset.ground_truth or ())
    elif method == DEEPSEEK_R1_METHOD and dataset.subsets is not None:
        options = _livecodebench_options(dataset)
        if options.service_url is None and not options.local_eval:
            return
        truths = dataset.ground_truth or ()
        ids = [t for t, s in zip(truths, dataset.subsets, strict=False) if is_code_subset(s)]
        if ids:
            check_livecodebench(options, ids)


def _livecodebench_options(dataset: Dataset) -> LiveCodeBenchOptions:
    accuracy = dataset.spec.accuracy
    extras = {} if accuracy is None or accuracy.extras is None else accuracy.extras
    return LiveCodeBenchOptions.from_extras(extras, dataset_path=dataset.spec.path)
