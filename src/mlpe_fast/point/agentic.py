"""The performance phase of an agentic run (``load/agentic_scheduler.py``,
``docs/agentic.md``): conversations replayed turn by turn, every turn logged
with its conversation and row and counted, the measurement window's end
logged as it happens (§2.5), and the inline accuracy scored from the
answers at the end (``accuracy/agentic_inline.py``)."""

from __future__ import annotations

from ..accuracy.agentic_inline import InlineTurn, inline_entry, score_inline
from ..artifacts.events import SESSION_STOP_PERFORMANCE_TRACKING, PromptData
from ..engine.clock import monotonic_ns
from ..engine.record import RequestRecord
from ..engine.record_columns import RecordColumns
from ..load.agentic import AgenticBodies, AgenticDataset
from ..load.agentic_scheduler import ABORTED, AgenticPhase, TurnIssued, run_agentic
from .measured import Measured
from .performance import count_and_log, measuring, open_connections
from .setup import Point, agentic_settings

__all__ = ("AgenticPerformance",)


class AgenticPerformance:
    """The measured phase of ``--load-pattern agentic_inference``."""

    def __init__(self, data: AgenticDataset) -> None:
        self.data = data

    async def run(self, point: Point) -> Measured:
        config, events, bar = point.config, point.writer.events, point.progress
        settings = agentic_settings(config)
        phase = AgenticPhase(
            config.concurrency,
            budget=settings.num_trajectories_to_issue,
            inject_tool_delay=settings.inject_tool_delay,
            salt=settings.enable_salt,
            stop_issuing_on_first_user_complete=settings.stop_issuing_on_first_user_complete,
            routing_headers=settings.routing_headers,
        )
        point.interrupt.watch(phase)
        bodies = AgenticBodies(
            model=config.model,
            max_output_tokens=config.max_output_tokens,
            sampling=config.generation.as_dict(),
            extra_body=config.extra_body,
        )
        template_kwargs = config.generation.chat_template_kwargs
        tracked: list[bool] = []
        inline: list[InlineTurn] = []
        # Whole records: the inline accuracy and the turns read the answers.
        measured = Measured(RecordColumns(keep_whole=True), tracked=tracked)

        def on_record(record: RequestRecord, turned: TurnIssued) -> None:
            measured.records.append(record)
            tracked.append(turned.tracked)
            aborted = record.error_class == ABORTED
            prompt = PromptData(
                messages=None
                if aborted
                else turned.trajectory.request_messages(turned.turn, turned.salt),
                tools=None if aborted else turned.turn.tools,
                chat_template_kwargs=None if aborted else template_kwargs,
            )
            output = count_and_log(
                record,
                prompt,
                config,
                point.counter,
                events,
                conversation_id=turned.conversation_id,
                turn=turned.turn.turn,
            )
            inline.append(InlineTurn(turned.conversation_id, turned.turn.turn, output))
            if bar is not None:
                bar.update(phase.completed + phase.failed, phase.failed, phase.issued)

        def on_window_end(t: int) -> None:
            if events is not None:
                events.session(SESSION_STOP_PERFORMANCE_TRACKING, t)

        await open_connections(point, config.concurrency, None)
        with measuring(measured, events, bar, phase, config.max_duration_s):
            await run_agentic(
                point.client,
                self.data,
                phase,
                bodies,
                on_record,
                path=config.route,
                on_window_end=on_window_end,
            )
        if events is not None and phase.t_window_end is None:
            events.session(SESSION_STOP_PERFORMANCE_TRACKING)
        measured.inline_scores = score_inline(self.data, inline)
        measured.inline_entry = inline_entry(
            self.data,
            measured.inline_scores,
            issued=len(measured.records),
            duration_s=(monotonic_ns() - measured.tracking_start) / 1e9,
        )
        return measured
