"""The accuracy phases of a point (``--mode acc|both``, spec §2.4-§2.6):
one per accuracy dataset, each returning its ``accuracy_results.json``
entry (:class:`AccuracyPhase`)."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, Protocol

from ..accuracy.results import accuracy_entry, output_text
from ..accuracy.swe_bench import run_swe_bench, swe_bench_entry
from ..artifacts.events import PromptData, text_model_output
from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..load.dataset import Dataset
from ..load.requests import RequestFeed
from ..load.scheduler import Phase, run_phase
from .performance import prompt_data
from .setup import Point, is_swe_bench, swe_bench_options

__all__ = ("AccuracyPhase", "DatasetAccuracy", "SweBenchAccuracy", "accuracy_phase")


class AccuracyPhase(Protocol):
    """One accuracy dataset, run and scored."""

    async def run(self, point: Point) -> dict[str, Any]: ...


def accuracy_phase(dataset: Dataset) -> AccuracyPhase:
    """The phase that scores ``dataset``: the SWE-bench service's, or ours."""
    return SweBenchAccuracy(dataset) if is_swe_bench(dataset) else DatasetAccuracy(dataset)


class DatasetAccuracy:
    """Every sample once per repeat, in order, unsalted, at the point's
    concurrency (spec §2.4, §2.5), then scored.  Its queries are logged in
    ``events.jsonl`` under the dataset's name (``sample_idx_map.json``),
    outside performance tracking."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    async def run(self, point: Point) -> dict[str, Any]:
        config, dataset, events = point.config, self.dataset, point.writer.events
        accuracy = dataset.spec.accuracy
        repeats = 1 if accuracy is None else accuracy.num_repeats
        feed = RequestFeed.for_phase(dataset, config, "accuracy")
        phase = Phase(
            "offline" if config.load_pattern == "offline" else "concurrency",
            concurrency=config.concurrency,
            max_requests=len(dataset) * repeats,
            seed=config.seeds.scheduler,
        )
        point.interrupt.watch(phase)
        chat = config.api_type == "openai"
        prompts: dict[str, PromptData] = {}
        texts: dict[str, str] = {}
        indices: dict[str, int] = {}
        span = [0, 0]  # first issue, last completion: the phase's duration

        def on_issue(sample_index: int, sample_id: str, t_sched: int) -> None:
            indices[sample_id] = sample_index
            if events is not None:
                system = dataset.samples[sample_index].system
                prompts[sample_id] = prompt_data(feed.last_prompt, system, chat)

        def on_record(record: RequestRecord) -> None:
            output = None
            if record.error_class is None:
                output = text_model_output(record.response, streaming=config.stream)
                texts[record.sample_id] = output_text(output)
            done = record.t_end if record.response.t_done is None else record.response.t_done
            span[0] = record.t_issue if not span[0] else min(span[0], record.t_issue)
            span[1] = max(span[1], done)
            if events is not None:
                prompt = prompts.pop(record.sample_id, None)
                events.record(record, prompt, phase=dataset.name, output=output)

        await run_phase(point.client, feed, phase, on_record, path=config.route, on_issue=on_issue)
        return accuracy_entry(dataset, texts, indices, duration_s=max(0, span[1] - span[0]) / 1e9)


class SweBenchAccuracy:
    """A SWE-bench accuracy dataset (``accuracy/swe_bench.py``): no load of
    ours; the service runs the agent against the endpoint and grades it.
    Its instances are the dataset's first ``num_instances`` ground-truth
    values (instance ids, in the file's order).  A signal cancels the run."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    async def run(self, point: Point) -> dict[str, Any]:
        config, dataset = point.config, self.dataset
        options = swe_bench_options(dataset, config)
        instance_ids = [str(t) for t in list(dataset.ground_truth or ())[: options.num_instances]]
        cancel = threading.Event()
        point.interrupt.watch(_Cancel(cancel))
        began = monotonic_ns()
        result = await asyncio.get_running_loop().run_in_executor(
            None,
            functools.partial(
                run_swe_bench,
                options,
                model=config.model,
                endpoint=point.endpoints[0],
                api_key=config.api_key,
                generation={
                    **config.generation.as_dict(),
                    "max_new_tokens": config.max_output_tokens,
                },
                instance_ids=instance_ids,
                report_dir=point.writer.path,
                stop=cancel,
            ),
        )
        return swe_bench_entry(dataset.name, result, duration_s=(monotonic_ns() - began) / 1e9)


class _Cancel:
    """A signal's stop, for a run in a worker thread."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def stop(self) -> None:
        self.event.set()
