"""``events.jsonl`` and ``sample_idx_map.json`` in the reference client's format.

One JSON object per line, as the reference's event logger writes its
``EventRecord`` with ``msgspec.json`` (spec §3.2;
``mlcommons/endpoints:src/inference_endpoint/core/record.py``,
``core/types.py``, ``async_utils/services/event_logger/file_writer.py``)::

    {"event_type":"sample.issued","timestamp_ns":123,"sample_uuid":"<32 hex>",
     "conversation_id":"","turn":null,"data":["PromptData","<prompt>",null,null,null,null,null,null]}

* ``event_type`` is the topic ``"<category>.<value>"``: ``session.started``,
  ``session.start_performance_tracking``,
  ``session.stop_performance_tracking``, ``session.ended``,
  ``sample.issued``, ``sample.recv_first``, ``sample.recv_non_first``,
  ``sample.complete``, ``error.generic`` (and ``error.loadgen``,
  ``error.session``, ``error.client``);
* ``timestamp_ns`` is ``CLOCK_MONOTONIC`` (``time.monotonic_ns()``): here
  the engine's stamps, ISSUED = ``t_issue``, RECV_FIRST = ``t_first``,
  COMPLETE = ``t_done`` (``t_end`` when the response never finished),
  error = ``t_end``;
* ``sample_uuid``, ``conversation_id`` (always ""), ``turn`` (always null)
  and ``data`` are always present; ``finish_reason`` and ``worker_id`` only
  on COMPLETE, and ``finish_reason`` only when the endpoint sent one;
* ``data`` is a tagged array (msgspec ``array_like``; all fields written):
  ``["PromptData", text, token_ids, messages, tools, chat_template_kwargs,
  chat_template, tool_choice]`` on ISSUED, ``["TextModelOutput", output,
  reasoning, tool_calls]`` on COMPLETE (null for a failed query),
  ``["ErrorData", error_type, error_message]`` on errors.

Streamed output is stored as the reference's SSE accumulator stores it
(``openai/accumulator.py``): ``output`` is ``[first_chunk, rest]`` (one
element when nothing followed, ``[]`` when nothing came); with reasoning,
``reasoning`` is ``[first_chunk, rest]`` and ``output`` the whole content
string; tool calls are a list of delta chunks, split at the first token.
Non-streamed output is plain strings.  The reference's TPOT denominator,
``TextModelOutput.text_after_first_chunk()``, thus reads the text that came
after our ``t_first``.

Per query the reference writes ISSUED; RECV_FIRST (streaming); for a
failure ``error.generic`` then COMPLETE with null data
(``load_generator/session.py``).  We write the same lines.  The reference
logs no warmup at all; mlpe-fast writes the warmup's queries, with the same
lines, to a separate log (``warmup_events.jsonl``: spec §2.4 wants warmup
logs retained) and leaves them out of ``sample_idx_map.json``, whose
entries go to their own side files as records come
(``artifacts/sample_idx_map.py``).

Lines are made when a query's record arrives (one msgspec ``encode_lines``
call per record) and written at once, in the order they are made, to the
file itself (``live``): :meth:`EventsWriter.flush`, which the runner calls
every second, and sooner past :data:`LIVE_FLUSH_BYTES` of them, pushes
them to the operating system, so a crash or a kill loses at most the last
second of records and the lines held wait in less than a MiB.  The final file places a
record's lines by ``t_issue`` between the session events, so a query issued
inside the performance window is inside it in the file even when it
completes after ``stop_performance_tracking`` (consumers such as the
reference's ``scripts/early_stopping_estimate_from_events.py`` take the
window from line order).  A record that arrives in order (issued after the
last session line) is already where the final file wants it, so it is
written once, to the live file only; a *late* one (issued before the last
session line) is also kept, in memory and past ``spill_bytes`` in side
files, and :meth:`EventsWriter.close` rebuilds the file from the live one,
each late record moved back into its segment.  A run with no late record
(every record finished before the next session line) keeps the live file
as it is: its lines were written once, not also to memory, side files and
a second file (issue 23).  Without ``live``, every line is kept.

A write the disk refuses (full, or past a file-size limit) raises
nothing: the writer keeps the first refusal
(:attr:`EventsWriter.write_error`) and the lines it did not take, which
go first in the next write; the point, seeing the refusal, stops issuing
(``point/writer.py``), so what waits is bounded by what was in flight.
:meth:`EventsWriter.close` tries them a last time; what it cannot write
is counted (:attr:`EventsWriter.unwritten_bytes`) and the file ends at the
last line the disk took (a cut last line is dropped by readers).
"""

from __future__ import annotations

import bisect
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated, Any

import msgspec

from ..engine.record import RequestRecord
from ..errors import UsageError
from ..wire.events import ResponseSummary, ToolCall
from .sample_idx_map import SampleIndexSpool, write_sample_idx_map

__all__ = (
    "ERROR_CLIENT",
    "ERROR_GENERIC",
    "ERROR_LOADGEN",
    "ERROR_SESSION",
    "SAMPLE_COMPLETE",
    "SAMPLE_ISSUED",
    "SAMPLE_RECV_FIRST",
    "SAMPLE_RECV_NON_FIRST",
    "SESSION_ENDED",
    "SESSION_STARTED",
    "SESSION_START_PERFORMANCE_TRACKING",
    "SESSION_STOP_LOADGEN",
    "SESSION_STOP_PERFORMANCE_TRACKING",
    "WARMUP_PHASE",
    "ErrorData",
    "EventRecord",
    "EventsWriter",
    "PromptData",
    "TextModelOutput",
    "iter_events",
    "read_events",
    "text_model_output",
    "write_sample_idx_map",
)

SESSION_STARTED = "session.started"
SESSION_ENDED = "session.ended"
SESSION_STOP_LOADGEN = "session.stop_loadgen"
SESSION_START_PERFORMANCE_TRACKING = "session.start_performance_tracking"
SESSION_STOP_PERFORMANCE_TRACKING = "session.stop_performance_tracking"
SAMPLE_ISSUED = "sample.issued"
SAMPLE_RECV_FIRST = "sample.recv_first"
SAMPLE_RECV_NON_FIRST = "sample.recv_non_first"
SAMPLE_COMPLETE = "sample.complete"
ERROR_GENERIC = "error.generic"
ERROR_LOADGEN = "error.loadgen"
ERROR_SESSION = "error.session"
ERROR_CLIENT = "error.client"

#: Lines waiting for the live file past this many bytes are written then,
#: not at the next second's flush (a thousand 64-token queries' lines).
LIVE_FLUSH_BYTES = 1 << 20

_SESSION_TOPICS = frozenset(
    {
        SESSION_STARTED,
        SESSION_ENDED,
        SESSION_STOP_LOADGEN,
        SESSION_START_PERFORMANCE_TRACKING,
        SESSION_STOP_PERFORMANCE_TRACKING,
    }
)
_ERROR_TOPICS = frozenset({ERROR_GENERIC, ERROR_LOADGEN, ERROR_SESSION, ERROR_CLIENT})

WARMUP_PHASE = "warmup"
"""The phase name whose queries get no ``sample_idx_map.json`` entry."""


# The record types (same shapes, tags and defaults as the reference's) ----------------


class PromptData(
    msgspec.Struct,
    tag=True,
    kw_only=True,
    frozen=True,
    omit_defaults=True,
    array_like=True,
    gc=False,
):
    """What was asked (ISSUED): exactly one of ``text``, ``token_ids``, ``messages``."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: str | None = None
    tool_choice: str | dict[str, Any] | None = None


class TextModelOutput(
    msgspec.Struct,
    tag=True,
    kw_only=True,
    frozen=True,
    omit_defaults=True,
    array_like=True,
    gc=False,
):
    """What came back (COMPLETE): strings, or ``(first_chunk, rest)`` when streamed."""

    output: str | tuple[str, ...] = ""
    reasoning: str | tuple[str, ...] | None = None
    tool_calls: tuple[Any, ...] | None = None


class ErrorData(
    msgspec.Struct,
    tag=True,
    kw_only=True,
    frozen=True,
    omit_defaults=True,
    array_like=True,
    gc=False,
):
    """Why a query failed: error class name and a one-line message."""

    error_type: str
    error_message: str = ""


#: A ``CLOCK_MONOTONIC`` stamp: any int64 (a larger one in a log is garbage,
#: refused as the line is read rather than overflowing the metrics' arrays).
_Stamp = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class EventRecord(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """One line of ``events.jsonl``."""

    event_type: str
    timestamp_ns: _Stamp
    sample_uuid: str = ""
    conversation_id: str = ""
    turn: int | None = None
    data: TextModelOutput | PromptData | ErrorData | None = None
    finish_reason: str | msgspec.UnsetType = msgspec.UNSET
    worker_id: int | msgspec.UnsetType = msgspec.UNSET


_DECODER = msgspec.json.Decoder(EventRecord)


def read_events(path: str | os.PathLike[str]) -> list[EventRecord]:
    """Reads an ``events.jsonl`` (ours or the reference's) back into records."""
    return _DECODER.decode_lines(Path(path).read_bytes())


def iter_events(
    path: str | os.PathLike[str], *, cut_tail: list[int] | None = None
) -> Iterator[EventRecord]:
    """The records of an ``events.jsonl``, line by line, for the commands that
    read a run folder back (``analyze``, ``score``).

    Args:
        cut_tail: when given, a last line that was cut short (no newline
            after it, and not a whole record: a writer killed mid-write,
            the disk full) is left out and its line number appended here,
            rather than raising, unless it is the only line.

    Raises:
        UsageError: the file cannot be read, or a line is not an event
            record (naming the file and line).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield _DECODER.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            # The last line with no newline after it, after a whole one.
            if cut_tail is not None and number == len(lines) > 1:
                cut_tail.append(number)
                return
            raise UsageError(f"{path}:{number}: not an event record: {error}") from None


# Output shapes -----------------------------------------------------------------------


def text_model_output(summary: ResponseSummary, *, streaming: bool) -> TextModelOutput:
    """The COMPLETE payload of a response, shaped as the reference stores it
    (module docstring)."""
    if not streaming:
        calls = tuple(_message_tool_call(tc) for tc in summary.tool_calls)
        return TextModelOutput(
            output=summary.content,
            reasoning=summary.reasoning or None,
            tool_calls=calls or None,
        )
    content = summary.content
    reasoning = summary.reasoning
    tool_calls = _tool_call_chunks(summary) if summary.tool_calls else None
    if reasoning:
        after = summary.reasoning_after_first
        first = reasoning[: len(reasoning) - len(after)]
        # An empty first part: the first token was content or a tool call and
        # all reasoning came later; ("", rest) keeps rest in the TPOT text.
        parts = (first, after) if after else (first,)
        return TextModelOutput(output=content, reasoning=parts, tool_calls=tool_calls)
    if content:
        after = summary.content_after_first
        first = content[: len(content) - len(after)]
        return TextModelOutput(output=(first, after) if after else (first,), tool_calls=tool_calls)
    return TextModelOutput(output=(), tool_calls=tool_calls)


def _message_tool_call(call: ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if call.id:
        out["id"] = call.id
    out["type"] = call.type or "function"
    out["function"] = {"name": call.name, "arguments": call.arguments}
    return out


def _delta_tool_call(call: ToolCall, name: str | None, arguments: str) -> dict[str, Any]:
    out: dict[str, Any] = {"index": call.index}
    if call.id:
        out["id"] = call.id
    if call.type:
        out["type"] = call.type
    function: dict[str, Any] = {}
    if name:
        function["name"] = name
    function["arguments"] = arguments
    out["function"] = function
    return out


def _tool_call_chunks(summary: ResponseSummary) -> tuple[tuple[dict[str, Any], ...], ...]:
    """Tool calls as delta chunks: what arrived up to the first token, then the
    rest.  A name stays whole in the chunk where it began, because the
    reference's ``merge_tool_calls`` replaces names rather than appending."""
    after_by_index = {tc.index: tc for tc in summary.tool_calls_after_first}
    first: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for call in summary.tool_calls:
        after = after_by_index.get(call.index)
        after_args = after.arguments if after is not None else ""
        after_name = after.name if after is not None else ""
        first_args = call.arguments[: len(call.arguments) - len(after_args)]
        first_name = call.name[: len(call.name) - len(after_name)]
        if first_name or first_args:
            first.append(_delta_tool_call(call, call.name, first_args))
            if after_args:
                rest.append({"index": call.index, "function": {"arguments": after_args}})
        else:
            rest.append(_delta_tool_call(call, call.name, call.arguments))
    return tuple(chunk for chunk in (tuple(first), tuple(rest)) if chunk)


# The writer ------------------------------------------------------------------------


class _Segment:
    """Lines between two session events: in memory, then in a side file.

    A list of the encoded blobs, not one growing buffer: appending never
    copies what is already there."""

    __slots__ = ("chunks", "spill", "spill_path")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.spill: IO[bytes] | None = None
        self.spill_path: Path | None = None


class EventsWriter:
    """Writes ``events.jsonl`` from session events and finished queries.

    Args:
        path: the file to write (at :meth:`close`).
        streaming: requests were streamed (RECV_FIRST lines, chunked output).
        worker_id: the ``worker_id`` of COMPLETE lines (the reference's HTTP
            worker index; mlpe-fast's event-loop process, 0 for one).
        recv_non_first: also write a ``sample.recv_non_first`` line per
            later content event (needs ``chunk_times`` in the records; the
            reference does this with ``stream_all_chunks``).
        spill_bytes: memory kept before kept lines go to side files (4 MiB:
            the lines of a few thousand queries; the memory of a run does
            not grow with its length, issue 23).  With ``live`` only late
            records' lines are kept (module doc).
        live: write each line to ``path`` as it is made (see the module
            doc); ``close`` keeps that file when no record came late, and
            otherwise replaces it with the ordered one.

    Use::

        with EventsWriter(run_dir / "events.jsonl", streaming=True) as events:
            events.session(SESSION_STARTED)
            events.session(SESSION_START_PERFORMANCE_TRACKING)
            ... events.record(record, prompt) for each finished query ...
            events.session(SESSION_STOP_PERFORMANCE_TRACKING)
            events.session(SESSION_ENDED)
        with events.sample_index_map as index_map:  # on disk as it grew (issue 23)
            write_sample_idx_map(run_dir / "sample_idx_map.json", index_map)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        streaming: bool,
        worker_id: int = 0,
        recv_non_first: bool = False,
        spill_bytes: int = 4 << 20,
        live: bool = True,
    ) -> None:
        self.path = Path(path)
        self.streaming = streaming
        self.worker_id = worker_id
        self.recv_non_first = recv_non_first
        self.spill_bytes = spill_bytes
        # Streamed to its own side files as records come (issue 23); kept
        # past close() for write_sample_idx_map, dropped by its own close().
        self.sample_index_map = SampleIndexSpool(self.path.parent)
        self._encoder = msgspec.json.Encoder()
        self._segments: list[_Segment] = [_Segment()]
        self._bounds: list[int] = []  # timestamp of the session line after each segment
        self._session_lines: list[bytes] = []
        self._buffered = 0
        self._closed = False
        #: The first write the disk refused, as one line (None: none was;
        #: module doc).
        self.write_error: str | None = None
        #: Bytes of lines never written (the disk still refused them at close).
        self.unwritten_bytes = 0
        # Whole lines only reach the live file, one write per flush (looped
        # over short writes), so that a kill between flushes leaves no half
        # line behind; one in the very middle of a write can cut the last
        # line, which readers drop (iter_events' cut_tail).
        self._live: IO[bytes] | None = None
        self._live_lines: list[bytes] = []
        self._live_waiting = 0  # bytes in _live_lines
        # Byte spans of the live file (as it will be once flushed): each
        # session line's, and each late record's, which close() moves.
        self._live_size = 0
        self._session_spans: list[tuple[int, int]] = []
        self._late_spans: list[tuple[int, int]] = []
        if live:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._live = self.path.open("wb", buffering=0)

    def __enter__(self) -> EventsWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- input

    def session(self, topic: str, timestamp_ns: int | None = None) -> None:
        """A session event (``SESSION_*``), stamped now unless given."""
        if topic not in _SESSION_TOPICS:
            raise ValueError(f"not a session topic: {topic!r}")
        t = time.monotonic_ns() if timestamp_ns is None else timestamp_ns
        if self._bounds and t < self._bounds[-1]:
            raise ValueError("session events must come in time order")
        self._check_open()
        line = self._encoder.encode(EventRecord(event_type=topic, timestamp_ns=t)) + b"\n"
        self._session_lines.append(line)
        if self._live is not None:
            self._live_lines.append(line)
            self._session_spans.append((self._live_size, self._live_size + len(line)))
            self._live_size += len(line)
        self._bounds.append(t)
        self._segments.append(_Segment())

    def error(
        self,
        topic: str,
        error_type: str,
        message: str = "",
        *,
        timestamp_ns: int | None = None,
        sample_uuid: str = "",
    ) -> None:
        """An error that is not a query's own failure (``ERROR_*`` topics)."""
        if topic not in _ERROR_TOPICS:
            raise ValueError(f"not an error topic: {topic!r}")
        t = time.monotonic_ns() if timestamp_ns is None else timestamp_ns
        line = EventRecord(
            event_type=topic,
            timestamp_ns=t,
            sample_uuid=sample_uuid,
            data=ErrorData(error_type=error_type, error_message=message),
        )
        self._place(t, self._encoder.encode(line) + b"\n")

    def record(
        self,
        record: RequestRecord,
        prompt: PromptData | str | tuple[dict[str, Any], ...] | None = None,
        *,
        phase: str = "performance",
        output: TextModelOutput | None = None,
        conversation_id: str = "",
        turn: int | None = None,
    ) -> None:
        """The lines of one finished query (module docstring).

        Args:
            record: the engine's record.
            prompt: what was sent, for ISSUED's ``PromptData``: the
                ``PromptData`` itself, the (salted) prompt text, the chat
                messages, or None when unknown.
            phase: "performance", "warmup", or the accuracy dataset's name
                (the ``sample_idx_map.json`` key; warmup queries have none).
            output: the COMPLETE payload if the caller built it already
                (:func:`text_model_output` of the record's response).
            conversation_id, turn: an agentic turn's logical conversation id
                and dataset row, on each of its lines (as the reference).
        """
        uuid = record.sample_id
        response = record.response
        if prompt is None:
            prompt_data = PromptData()
        elif isinstance(prompt, PromptData):
            prompt_data = prompt
        elif isinstance(prompt, str):
            prompt_data = PromptData(text=prompt)
        else:
            prompt_data = PromptData(messages=prompt)
        lines: list[EventRecord] = [
            EventRecord(
                event_type=SAMPLE_ISSUED,
                timestamp_ns=record.t_issue,
                sample_uuid=uuid,
                conversation_id=conversation_id,
                turn=turn,
                data=prompt_data,
            )
        ]
        t_first = response.t_first
        if self.streaming and t_first is not None:
            lines.append(
                EventRecord(
                    event_type=SAMPLE_RECV_FIRST,
                    timestamp_ns=t_first,
                    sample_uuid=uuid,
                    conversation_id=conversation_id,
                    turn=turn,
                )
            )
            if self.recv_non_first and response.chunk_times:
                lines.extend(
                    EventRecord(event_type=SAMPLE_RECV_NON_FIRST, timestamp_ns=t, sample_uuid=uuid)
                    for t in response.chunk_times[1:]
                )
        ok = record.error_class is None
        if not ok:
            lines.append(
                EventRecord(
                    event_type=ERROR_GENERIC,
                    timestamp_ns=record.t_end,
                    sample_uuid=uuid,
                    conversation_id=conversation_id,
                    turn=turn,
                    data=ErrorData(
                        error_type=record.error_class or "Error",
                        error_message=record.error_message or "",
                    ),
                )
            )
        if ok and output is None:
            output = text_model_output(response, streaming=self.streaming)
        t_done = response.t_done
        finish = response.finish_reason if ok else None
        lines.append(
            EventRecord(
                event_type=SAMPLE_COMPLETE,
                timestamp_ns=record.t_end if t_done is None else t_done,
                sample_uuid=uuid,
                conversation_id=conversation_id,
                turn=turn,
                data=output if ok else None,
                finish_reason=finish if finish else msgspec.UNSET,
                worker_id=self.worker_id,
            )
        )
        self._place(record.t_issue, self._encoder.encode_lines(lines))
        if phase != WARMUP_PHASE:
            try:  # its side files are in the same folder (the same disk)
                self.sample_index_map.add(phase, uuid, record.sample_index)
            except OSError as error:
                self._refused(self.sample_index_map.directory, error)

    # -- output

    def _place(self, t: int, data: bytes) -> None:
        self._check_open()
        bounds = self._bounds
        in_order = not bounds or t >= bounds[-1]
        if self._live is not None:
            start = self._live_size
            self._live_lines.append(data)
            self._live_size = start + len(data)
            self._live_waiting += len(data)
            if self._live_waiting > LIVE_FLUSH_BYTES:
                # A second of lines at thousands of requests a second is
                # megabytes, held twice by the flush's join (issue 23: the
                # peak of a run's first seconds).
                self._flush_live()
            if in_order:  # where the final file wants it: written once (module doc)
                return
            self._late_spans.append((start, self._live_size))
        segment = self._segments[-1 if in_order else bisect.bisect_right(bounds, t)]
        segment.chunks.append(data)
        self._buffered += len(data)
        if self._buffered > self.spill_bytes:
            self._spill()

    def _spill(self) -> None:
        for i, segment in enumerate(self._segments):
            if not segment.chunks:
                continue
            if segment.spill is None:
                segment.spill_path = self.path.with_name(f"{self.path.name}.part{i}")
                segment.spill = segment.spill_path.open("wb")
            segment.spill.writelines(segment.chunks)
            segment.chunks.clear()
        self._buffered = 0

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the events writer is closed")

    def flush(self) -> None:
        """Hands the lines written so far to the operating system (``live``)."""
        if not self._closed:
            self._flush_live()

    def _flush_live(self) -> None:
        if self._live is not None and self._live_lines:
            # An unbuffered write may take only part of the bytes (a signal,
            # a full disk): what is left goes in the next write, so that a
            # line is never left half written by a flush that returned.
            view = memoryview(b"".join(self._live_lines))
            self._live_lines.clear()
            self._live_waiting = 0
            try:
                while view:
                    view = view[self._live.write(view) :]
            except BaseException as error:
                self._live_lines.append(bytes(view))  # first in the next flush
                self._live_waiting = len(view)
                if not isinstance(error, OSError):
                    raise
                self._refused(self.path, error)  # module doc

    def _refused(self, where: Path, error: OSError) -> None:
        if self.write_error is None:
            self.write_error = f"{where}: {error.strerror or error}"

    def close(self) -> None:
        """Replaces the file with the final one (segments and session lines in
        order), written beside it first so that a failure leaves the live
        one.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        live = self._live
        try:
            if live is not None:
                try:
                    self._flush_live()
                finally:
                    live.close()
                    self.unwritten_bytes += self._live_waiting  # refused a last time
                    self._live_lines.clear()
                if not self._late_spans or self.unwritten_bytes:
                    # the live file is the final one (module doc), or all the
                    # disk took: a rebuild would not find the spans it expects
                    return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            final = self.path.with_name(f"{self.path.name}.final")
            try:
                with final.open("wb") as out:
                    if live is not None:
                        self._rebuild(out)
                    else:
                        for i, segment in enumerate(self._segments):
                            self._write_kept(segment, out)
                            if i < len(self._session_lines):
                                out.write(self._session_lines[i])
                os.replace(final, self.path)
            except OSError as error:  # a live file stays as it was
                self._refused(final, error)
            finally:
                final.unlink(missing_ok=True)
        finally:
            for segment in self._segments:
                if segment.spill is not None:
                    segment.spill.close()
                if segment.spill_path is not None:
                    segment.spill_path.unlink(missing_ok=True)
            self._segments = []
            self._session_lines = []

    @staticmethod
    def _write_kept(segment: _Segment, out: IO[bytes]) -> None:
        if segment.spill is not None:
            segment.spill.writelines(segment.chunks)
            segment.spill.close()
            assert segment.spill_path is not None
            with segment.spill_path.open("rb") as part:
                shutil.copyfileobj(part, out, 1 << 20)
        else:
            out.writelines(segment.chunks)

    def _rebuild(self, out: IO[bytes]) -> None:
        """The final file from the live one: segment ``i`` is the live file
        up to session line ``i`` less the late records in it, then the late
        records issued in segment ``i`` (they all arrived after its in-order
        ones, so this is their arrival order), then session line ``i``."""
        late = iter(self._late_spans)
        next_late = next(late, None)
        with self.path.open("rb") as source:

            def copy(start: int, end: int) -> None:
                nonlocal next_late
                while start < end:
                    stop = end if next_late is None else min(end, next_late[0])
                    source.seek(start)
                    while start < stop:
                        block = source.read(min(1 << 20, stop - start))
                        if not block:
                            raise OSError(f"{self.path} is shorter than what was written to it")
                        out.write(block)
                        start += len(block)
                    if next_late is not None and start == next_late[0] and start < end:
                        start = next_late[1]
                        next_late = next(late, None)

            position = 0
            for i, segment in enumerate(self._segments):
                span = self._session_spans[i] if i < len(self._session_spans) else None
                copy(position, self._live_size if span is None else span[0])
                self._write_kept(segment, out)
                if span is not None:
                    out.write(self._session_lines[i])
                    position = span[1]
