"""The performance phases of a point from a dataset, on this process or on
several engines, with the warmup before them (spec §1.4, §2.4).

Every phase of a point has one interface (:class:`PerformancePhase`): it
runs against the point's shared resources (:class:`~.setup.Point`) and
returns what it measured (:class:`~.measured.Measured`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from array import array
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from ..artifacts.events import (
    SESSION_START_PERFORMANCE_TRACKING,
    SESSION_STOP_PERFORMANCE_TRACKING,
    WARMUP_PHASE,
    EventsWriter,
    PromptData,
    TextModelOutput,
    text_model_output,
)
from ..config import RunConfig
from ..engine.audit import LoopLagProbe
from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..engine.record_columns import RecordColumns, as_columns
from ..errors import SetupError
from ..load.dataset import Dataset
from ..load.requests import Prompt, RequestFeed, TokenPrompt
from ..load.salt import Salter
from ..load.scheduler import Phase, run_phase
from ..metrics.tokens import TokenCounter, count_job
from ..report.progress import Progress
from ..scale.driver import EngineStartError, run_on_engines
from .engines import EnginePlan, request_count
from .interrupt import Stoppable
from .measured import Measured
from .setup import Point

__all__ = (
    "EnginesPerformance",
    "LocalPerformance",
    "PerformancePhase",
    "count_and_log",
    "measuring",
    "open_connections",
    "prompt_data",
)


class PerformancePhase(Protocol):
    """A point's measured phase, one per kind of run."""

    async def run(self, point: Point) -> Measured: ...


class LocalPerformance:
    """Salted queries in the dataset's shuffled order from this process,
    performance tracking around them (spec §1.4), every record counted."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    async def run(self, point: Point) -> Measured:
        config, dataset, events = point.config, self.dataset, point.writer.events
        await open_connections(point, config.concurrency, request_count(config, len(dataset)))
        async with _warmed_up(point, dataset) as salter:
            if point.interrupt.requested:
                return Measured()
            feed = RequestFeed.for_phase(dataset, config, "performance", salter=salter)
            phase = Phase(
                config.load_pattern,
                concurrency=config.concurrency,
                target_qps=config.target_qps,
                max_requests=request_count(config, len(dataset)),
                duration_ns=None if config.duration_s is None else int(config.duration_s * 1e9),
                seed=config.seeds.scheduler,
                pass_size=len(dataset) if config.whole_passes else None,
                min_requests=config.min_passes * len(dataset),
            )
            point.interrupt.watch(phase)
            chat = config.api_type == "openai"
            # Rows past the last few thousand go to a file in the run folder
            # (engine/spill.py), beside the counter's jobs: not a /tmp that
            # may be memory.
            folder = point.writer.path
            measured = Measured(RecordColumns(spill_dir=None if folder is None else str(folder)))
            records = measured.records
            prompts: dict[str, PromptData] = {}
            bar = point.progress

            def on_issue(sample_index: int, sample_id: str, t_sched: int) -> None:
                system = dataset.samples[sample_index].system
                prompts[sample_id] = prompt_data(feed.last_prompt, system, chat)

            def on_record(record: RequestRecord) -> None:
                prompt = prompts.pop(record.sample_id, None)
                count_and_log(record, prompt, config, point.counter, events)
                # Counted and logged: the figures need no text, and a row of
                # columns is what is kept (issue 23).
                records.append(record)
                if bar is not None:
                    bar.update(phase.completed + phase.failed, phase.failed, phase.issued)

            with measuring(measured, events, bar, phase, config.max_duration_s):
                await run_phase(
                    point.client, feed, phase, on_record, path=config.route, on_issue=on_issue
                )
            if events is not None:
                events.session(SESSION_STOP_PERFORMANCE_TRACKING)
            return measured


class EnginesPerformance:
    """The measured phase on several engine processes or Ray actors
    (``scale/``): the same queries, tracking from their common start, and
    the merged records handled here as :class:`LocalPerformance` handles
    its own."""

    def __init__(self, dataset: Dataset, plan: EnginePlan) -> None:
        self.dataset = dataset
        self.plan = plan

    async def run(self, point: Point) -> Measured:
        config, dataset, events, bar = (
            point.config,
            self.dataset,
            point.writer.events,
            point.progress,
        )
        async with _warmed_up(point, dataset) as salter:
            if point.interrupt.requested:
                return Measured()
            chat = config.api_type == "openai"
            done = [0, 0]  # completed, failed

            def on_record(record: RequestRecord, prompt: Prompt) -> None:
                system = dataset.samples[record.sample_index].system
                data = prompt_data(prompt, system, chat)
                count_and_log(record, data, config, point.counter, events)
                done[0 if record.ok else 1] += 1
                if bar is not None:
                    bar.update(done[0] + done[1], done[1], done[0] + done[1])

            def on_start(t0: int) -> None:
                if events is not None:
                    events.session(SESSION_START_PERFORMANCE_TRACKING, t0)
                if bar is not None:
                    bar.start()

            try:
                run = await run_on_engines(
                    config,
                    point.endpoints,
                    dataset,
                    engines=self.plan.engines,
                    max_requests=request_count(config, len(dataset)),
                    on_record=on_record,
                    on_start=on_start,
                    on_group=point.interrupt.watch,
                    make_group=self.plan.make_group,
                    salter=salter,
                )
            except EngineStartError as error:
                raise SetupError(str(error)) from None
            if events is not None:
                events.session(SESSION_STOP_PERFORMANCE_TRACKING)
            lags = array("q")
            cpu_ns, cpu_system_ns = run.driver_cpu_ns, run.driver_cpu_system_ns
            for totals in run.totals:
                if totals is not None:
                    lags.frombytes(totals.lags_ns)
                    cpu_ns += totals.cpu_ns
                    cpu_system_ns += totals.cpu_system_ns
            # The wall clock of the engines' start, read back from the monotonic clock.
            started_at = time.time_ns() - (monotonic_ns() - run.t0_ns)
            return Measured(
                as_columns(run.records),
                run.t0_ns,
                lags,
                cpu_ns,
                cpu_system_ns,
                run,
                tracking_started_at=started_at,
            )


async def open_connections(point: Point, concurrency: int, samples: int | None) -> None:
    """Opens the point's connections before its first request
    (``--warmup-connections``, on by default; issue 23): otherwise the
    first wave's TTFT carries TCP and TLS setup that the rest does not.
    The self-audit says how many were opened and how long it took, and how
    many requests still carried a setup (a connection the server closed,
    say)."""
    count = point.config.connections_to_open(concurrency, samples)
    if count > 0:
        await point.client.warm_up(count)


@contextlib.asynccontextmanager
async def _warmed_up(point: Point, dataset: Dataset) -> AsyncIterator[Salter | None]:
    """The warmup before a measured phase (``--warmup-requests``); yields
    the salt stream the measured phase continues (None: its own), so that
    no measured query repeats a warmup query's salt: the reference draws
    both phases' salts from one generator when their seeds agree (the
    default).  An undrained warmup's last responses are awaited on the way
    out (a signal ends them as Cancelled, as the rest), or cancelled if the
    phase failed."""
    warming, feed = await _warmup(point, dataset) if point.config.warmup_requests else (None, None)
    salter = None if feed is None else feed.salter
    if salter is not None and salter.seed != point.config.seeds.salt_seed:
        salter = None  # seeds set apart: two streams, as asked
    if warming is None:
        yield salter
        return
    try:
        yield salter
    except BaseException:
        warming.cancel()
        await asyncio.gather(warming, return_exceptions=True)
        raise
    await warming


async def _warmup(point: Point, dataset: Dataset) -> tuple[asyncio.Task[None] | None, RequestFeed]:
    """Requests that warm connections and the endpoint; not measured, but
    logged in ``warmup_events.jsonl`` (spec §2.4: warmup logs are kept).

    With ``--warmup-drain`` every warmup response is awaited before the
    measured phase starts; without (the default), it starts as soon as the
    last warmup request is out, so the endpoint never idles in between, and
    the phase still in flight is returned for the caller to await before the
    client closes (its records go to the warmup log as they end), with the
    warmup's feed."""
    config, events = point.config, point.writer.warmup_events
    feed = RequestFeed.for_phase(dataset, config, "warmup")
    phase = Phase(
        "concurrency" if config.load_pattern != "offline" else "offline",
        concurrency=config.concurrency,
        max_requests=config.warmup_requests if config.warmup_requests > 0 else len(dataset),
        seed=config.seeds.scheduler,
    )
    point.interrupt.watch(phase)
    chat = config.api_type == "openai"
    prompts: dict[str, PromptData] = {}

    def on_issue(sample_index: int, sample_id: str, t_sched: int) -> None:
        if events is not None:
            system = dataset.samples[sample_index].system
            prompts[sample_id] = prompt_data(feed.last_prompt, system, chat)

    def on_record(record: RequestRecord) -> None:
        if events is not None:
            events.record(record, prompts.pop(record.sample_id, None), phase=WARMUP_PHASE)

    loop = asyncio.get_running_loop()
    issued: asyncio.Future[None] = loop.create_future()

    def issuing_ended() -> None:
        if not issued.done():
            issued.set_result(None)

    phase.on_issuing_ended = issuing_ended
    warming = loop.create_task(
        run_phase(point.client, feed, phase, on_record, path=config.route, on_issue=on_issue)
    )
    if config.warmup_drain:
        await warming
        return None, feed
    await asyncio.wait({warming, issued}, return_when=asyncio.FIRST_COMPLETED)
    if warming.done():
        warming.result()  # a failure of the phase itself is not hidden
        return None, feed
    return warming, feed


@contextlib.contextmanager
def measuring(
    measured: Measured,
    events: EventsWriter | None,
    bar: Progress | None,
    phase: Stoppable,
    max_duration_s: float | None,
) -> Iterator[None]:
    """Performance tracking around a measured phase: its start logged, the
    bar started, the loop-lag probe and the CPU clock running; on the way
    out, their readings in ``measured`` (the stop is logged by the caller:
    an agentic window ends on its own).  ``max_duration_s``
    (``--max-duration``, the reference's ``max_duration_ms``) stops the
    phase's issuing that long after the start, whatever its count, duration
    or whole passes still ask for; what is in flight is awaited."""
    probe = LoopLagProbe()
    # The objects made before the load (imports, the tokenizer, the
    # dataset) are set aside from the collector while it runs, so that a
    # collection of the load's own garbage does not walk them again (issue
    # 23: a microsecond a request); unfrozen after, they are collected as
    # before.
    gc.freeze()
    measured.tracking_start = monotonic_ns()
    measured.tracking_started_at = time.time_ns()
    if events is not None:
        events.session(SESSION_START_PERFORMANCE_TRACKING, measured.tracking_start)
    if bar is not None:
        bar.start()
    cap = (
        None
        if max_duration_s is None
        else asyncio.get_running_loop().call_later(max_duration_s, phase.stop)
    )
    probe.start()
    try:
        yield
    finally:
        gc.unfreeze()
        if cap is not None:
            cap.cancel()
        measured.lags, measured.cpu_ns, measured.cpu_system_ns = probe.stop()


def count_and_log(
    record: RequestRecord,
    prompt: PromptData | None,
    config: RunConfig,
    counter: TokenCounter,
    events: EventsWriter | None,
    *,
    conversation_id: str = "",
    turn: int | None = None,
) -> TextModelOutput | None:
    """A measured record's part beside the load: its tokens to the counter,
    its events to the log (with an agentic turn's conversation and row).
    Returns its COMPLETE payload (None for a failure)."""
    output = (
        text_model_output(record.response, streaming=config.stream)
        if record.error_class is None
        else None
    )
    counter.submit(count_job(record, streaming=config.stream, prompt=prompt, output=output))
    if events is not None:
        events.record(record, prompt, output=output, conversation_id=conversation_id, turn=turn)
    return output


def prompt_data(prompt: Prompt, system: str | None, chat: bool) -> PromptData:
    """What an ISSUED line records of a query, and what its ISL counts.

    A chat request sends messages (the system prompt, then the salted user
    prompt): those are recorded and rendered with the chat template for the
    ISL (spec §1.2: the input "as sent", template and salt included).  The
    completions API sends the prompt text itself, or token ids (recorded
    as ``token_ids``, counted as themselves).
    """
    if isinstance(prompt, TokenPrompt):
        return PromptData(token_ids=prompt.token_ids)
    if isinstance(prompt, str):
        if not chat:
            return PromptData(text=prompt)
        messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": prompt},)
        if system is not None:
            messages = ({"role": "system", "content": system}, *messages)
        return PromptData(messages=messages)
    return PromptData(messages=prompt)
