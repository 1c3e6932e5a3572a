"""Client-side token counting: the reference tokenizer, off the event loop.

MLPerf Endpoints counts tokens on the client with the model's reference
tokenizer, once per completed response (``mlperf-endpoints-spec.md`` §1.2,
rules §2.8); the server's ``usage`` is only a cross-check.  Three counts per
query, whose inputs :mod:`mlpe_fast.metrics.count_inputs` defines:

* **OSL** (output sequence length): the tokens of the whole output, the
  numerator of ``system_tps`` (spec §1.1);
* **TPOT tokens**: the tokens of the output that arrived *after* the first
  content-bearing event, the denominator of the per-response TPOT (spec
  §1.2; tokenized on its own, as the reference does);
* **ISL**: the tokens of the prompt as sent.

Plain text is tokenized with ``add_special_tokens=False`` (the count is of
what the model generated, not of markers a post-processor would add).  An
output with reasoning or tool calls is rendered as an assistant message with
the model's chat template (:mod:`mlpe_fast.metrics.chat_template`) after an
empty user turn, and the tokens of the same rendering with an empty
assistant message are subtracted: ``max(0, len(tok(a)) - len(tok(b)))``
(spec §1.2).  A chat prompt is rendered with the generation prompt.

Threads.  :class:`TokenCounter` never tokenizes in the caller: ``submit``
appends a :class:`CountJob` to a queue and one worker thread counts batches.
Texts that :mod:`mlpe_fast.metrics.fast_bpe` can count exactly (ASCII text
with a byte-level BPE tokenizer) are counted there: in C
(:mod:`mlpe_fast.metrics._bpe_c`, the GIL released over each batch) for the
pre-tokenizers it hand-codes, else by the Python twin, about four times
cheaper than through ``tokenizers``; the others go through
``Tokenizer.encode_batch_fast`` (``encode_batch`` on older ``tokenizers``),
which releases the GIL and splits the batch over ``tokenizers``' own Rayon
thread pool.  The pool's size is fixed the first time any batch is encoded
in the process, from ``RAYON_NUM_THREADS``; unless the user set it, the
counter sets it to the CPUs this process may use, capped at
:data:`MAX_THREADS`.  ``TOKENIZERS_PARALLELISM=false`` makes encoding
single-threaded and is respected.  Because counting competes with the event
loop (and, on small hosts, with a local endpoint) for CPU, it is deferred by
default until :meth:`TokenCounter.drain` / :meth:`TokenCounter.finish` is
called after the load; ``live=True`` counts while the load runs (every
0.25 s, through ``tokenizers`` only, so that the event loop keeps the
interpreter), which suits hosts with cores to spare.

Cost (``bench/bench_tokens.py``, 2-core development host, 100,000 distinct
responses of ~500 tokens, OSL and TPOT counts): ``tokenizers`` alone about
90 s (0.5-0.6 M tokens per CPU-second); with the fast path about 22 s on one
core (one scan gives both counts of a plain-text response: 4.5 M counted
tokens per CPU-second).  Non-ASCII texts go to ``tokenizers`` in a second
thread while the fast path counts the rest, so the two overlap on two cores.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from ..artifacts.events import PromptData, TextModelOutput, text_model_output
from ..engine import record_columns
from ..engine.spill import SpilledArray
from ..errors import LocalProtocolError, UsageError
from .chat_template import (
    ChatTemplate,
    ChatTemplateError,
    assistant_message,
    prompt_messages_for_template,
)
from .count_inputs import CountInput, MessageText, osl_input, prompt_input, tpot_input
from .count_spill import JobSpill, SpillError
from .hf_cache import cached_snapshots, hf_cache_dir, looks_like_path, repo_cache_dir

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from ..engine.record import RequestRecord
    from ._bpe import BPECounter

__all__ = (
    "DEFAULT_BATCH_SIZE",
    "MAX_THREADS",
    "BatchEncoder",
    "CountJob",
    "TokenCounter",
    "TokenCounts",
    "count_job",
    "load_tokenizer",
)

#: Records per ``encode_batch`` call (two texts each).  Large enough for the
#: Rayon pool to stay busy, small enough that one batch's Python work (a few
#: ms) never holds the GIL for long; see ``bench/bench_tokens.py``.
DEFAULT_BATCH_SIZE = 1024

#: Upper bound of the default Rayon pool size (see the module docstring).
MAX_THREADS = 8

#: How often a ``live`` counter looks at its queue, in seconds (the reference
#: client's live tokenization period, reference-client.md §2.2).
LIVE_INTERVAL_S = 0.25

#: Jobs a counter that waits (not ``live``) keeps in memory before its worker
#: moves them to its spill file (:mod:`mlpe_fast.metrics.count_spill`), and
#: the jobs of one spilled batch: about 0.5 MB of 64-token answers, 10 MB of
#: 2,048-token ones, at most twice that waiting.
SPILL_BATCH = 512


# Loading ------------------------------------------------------------------------------


_SLOW_TOKENIZER_FILES = ("tokenizer.model", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _from_file(path: Path, name: str) -> Tokenizer:
    try:
        from tokenizers import Tokenizer  # imported only when a tokenizer is loaded
    except ImportError as exc:  # pragma: no cover - tokenizers is a dependency
        raise UsageError(
            f"cannot load tokenizer {name!r}: the 'tokenizers' package is not installed; "
            "install it with: pip install tokenizers"
        ) from exc
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception on bad JSON
        raise UsageError(
            f"cannot load tokenizer {name!r}: {path} is not a valid tokenizer.json "
            f"({_one_line(str(exc))[:200]}); pass the directory of the model's "
            "Hugging Face tokenizer.json"
        ) from exc
    # Counting must see every token: no truncation, no padding of batches.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _from_directory(directory: Path, name: str) -> Tokenizer:
    path = directory / "tokenizer.json"
    if path.is_file():
        return _from_file(path, name)
    slow = [f for f in _SLOW_TOKENIZER_FILES if (directory / f).is_file()]
    hint = (
        f"it has only {', '.join(slow)} (a slow tokenizer); save a fast one with "
        "transformers: AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)"
        if slow
        else "pass the directory that holds the model's tokenizer.json"
    )
    raise UsageError(f"cannot load tokenizer {name!r}: {directory} has no tokenizer.json; {hint}")


def _from_hf_cache(repo_id: str) -> Tokenizer | None:
    """The cached ``tokenizer.json`` of a hub repo id, never the network."""
    for snapshot in cached_snapshots(repo_cache_dir(repo_id)):
        path = snapshot / "tokenizer.json"
        if path.is_file():  # follows the blob symlink; a dangling one is skipped
            return _from_file(path, repo_id)
    return None


def load_tokenizer(name_or_path: str) -> Tokenizer:
    """Loads a Hugging Face ``tokenizers`` tokenizer without the network.

    ``name_or_path`` is, in this order of preference:

    1. a directory holding ``tokenizer.json`` (a model directory, or the demo
       tokenizer :data:`mlpe_fast.sim.tokenizer.DEMO_TOKENIZER`);
    2. the path of a ``tokenizer.json`` file;
    3. a Hugging Face repo id (``ORG/NAME``) already in the local hub cache
       (:func:`hf_cache_dir`; the snapshot ``refs/main`` names, else the
       newest).  Model hubs are often unreachable from benchmark hosts, so
       nothing is downloaded: fetch the file beforehand.

    The returned tokenizer has truncation and padding turned off, so that
    counts are exact (spec §1.2).

    Raises:
        UsageError: with one line saying what was tried and how to fix it.
    """
    name = name_or_path.strip()
    if not name:
        raise UsageError("no tokenizer given: pass a directory holding tokenizer.json")
    path = Path(name).expanduser()
    if path.is_dir():
        return _from_directory(path, name)
    if path.is_file():
        return _from_file(path, name)
    if looks_like_path(name):
        raise UsageError(
            f"cannot load tokenizer {name!r}: no such file or directory; pass a directory "
            "holding tokenizer.json, a tokenizer.json file, or a Hugging Face id in the local cache"
        )
    tokenizer = _from_hf_cache(name)
    if tokenizer is not None:
        return tokenizer
    cache = hf_cache_dir()
    raise UsageError(
        f"cannot load tokenizer {name!r}: not a local path and not in the Hugging Face cache "
        f"{cache} (mlpe-fast never downloads); pass a local directory holding tokenizer.json, "
        f"or fetch it first, e.g. huggingface-cli download {name} tokenizer.json"
    )


# What is counted ------------------------------------------------------------------------


class CountJob(NamedTuple):
    """The three counts of one query (:mod:`mlpe_fast.metrics.count_inputs`):
    its OSL, its TPOT tokens and its ISL.  None counts 0."""

    osl: CountInput = None
    tpot: CountInput = None
    isl: CountInput = None


def count_job(
    record: RequestRecord,
    *,
    streaming: bool,
    prompt: PromptData | None = None,
    output: TextModelOutput | None = None,
) -> CountJob:
    """The :class:`CountJob` of a finished query.

    ``output`` is its COMPLETE payload if already built (the events writer
    builds the same one); a failed query has no output tokens.  TPOT tokens
    are counted for streamed responses with a first token, the queries with
    a ``sample.recv_first`` line (spec §1.2: "streaming only").
    """
    isl = prompt_input(prompt)
    if record.error_class is not None:
        return CountJob(None, None, isl)
    if output is None:
        output = text_model_output(record.response, streaming=streaming)
    tpot = tpot_input(output) if streaming and record.response.t_first is not None else None
    return CountJob(osl_input(output), tpot, isl)


# Counting ------------------------------------------------------------------------------


class BatchEncoder(Protocol):
    """What the counter needs of a tokenizer (``tokenizers.Tokenizer`` fits)."""

    def encode_batch(
        self, input: Sequence[Any], /, is_pretokenized: bool = ..., add_special_tokens: bool = ...
    ) -> Sequence[Sized]: ...


#: One count a job, in submission order: a numpy array, or past
#: ``record_columns.BLOCK_ROWS`` jobs the counter's own spill file (issue 23:
#: 24 B a request held from the counting to the point's end).  Both give a
#: numpy array for ``len`` and a slice ``[a:b]``; the figures read them a
#: block at a time.
CountColumn = npt.NDArray[np.int64] | SpilledArray


def counts_where(column: CountColumn, keep: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """The counts where ``keep`` (one flag a job) is true, as a numpy
    array, read a block at a time."""
    if isinstance(column, np.ndarray):
        return column[keep]
    step = record_columns.BLOCK_ROWS
    parts = [column[lo : lo + step][keep[lo : lo + step]] for lo in range(0, len(column), step)]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


class TokenCounts(msgspec.Struct, frozen=True):
    """Token counts of the jobs submitted to a :class:`TokenCounter`, in
    submission order.

    ``osl[i]``, ``tpot_tokens[i]`` and ``isl[i]`` belong to the i-th job
    (each a :data:`CountColumn`: numpy, or spilled past a block); -1
    means not counted (``complete`` is then False); an input of None counts
    0.  ``seconds`` is the wall time spent counting (the reference client's
    ``osl_tokenization_s``); ``error`` says why counting stopped, if it did.
    ``template_fallbacks`` counts messages whose chat template failed and
    were counted as joined text instead (as the reference does);
    ``method`` says how texts were counted (the fast path or why not).
    ``spilled_jobs`` went through the spill file while they waited
    (``spilled_bytes`` at its largest; :mod:`~.count_spill`);
    ``spill_failure`` says why the rest waited in memory, if spilling failed.
    """

    osl: CountColumn
    tpot_tokens: CountColumn
    isl: CountColumn
    complete: bool
    pending: int
    seconds: float
    error: str | None = None
    template_fallbacks: int = 0
    method: str = ""
    spilled_jobs: int = 0
    spilled_bytes: int = 0
    spill_failure: str | None = None

    def __len__(self) -> int:
        return len(self.osl)

    def subset(self, keep: npt.NDArray[np.bool_]) -> TokenCounts:
        """The counts of the jobs where ``keep`` is true, in order (an
        agentic window's turns, say)."""
        return msgspec.structs.replace(
            self,
            osl=counts_where(self.osl, keep),
            tpot_tokens=counts_where(self.tpot_tokens, keep),
            isl=counts_where(self.isl, keep),
        )


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _configure_pool(threads: int | None) -> None:
    """Sizes ``tokenizers``' Rayon pool unless the user did (module docstring)."""
    if os.environ.get("RAYON_NUM_THREADS") or os.environ.get("RAYON_RS_NUM_CPUS"):
        return
    n = threads if threads is not None else min(_usable_cpus(), MAX_THREADS)
    os.environ["RAYON_NUM_THREADS"] = str(max(1, n))


def _counting_copy(tokenizer: BatchEncoder) -> BatchEncoder:
    """The tokenizer itself, or a copy without truncation and padding."""
    truncation = getattr(tokenizer, "truncation", None)
    padding = getattr(tokenizer, "padding", None)
    if truncation is None and padding is None:
        return tokenizer
    from tokenizers import Tokenizer

    if not isinstance(tokenizer, Tokenizer):
        return tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _fast_path(tokenizer: BatchEncoder) -> tuple[BPECounter | None, str]:
    """The exact fast path for this tokenizer (in C where the core is built
    and knows its pre-tokenizer), or why there is none."""
    from tokenizers import Tokenizer

    from ._bpe import bpe_counter
    from .fast_bpe import ineligibility_reason

    if not isinstance(tokenizer, Tokenizer):
        return None, "not a tokenizers.Tokenizer"
    counter = bpe_counter(tokenizer)
    if counter is not None:
        return counter, ""
    return None, ineligibility_reason(tokenizer) or "not a byte-level BPE"


def _fallback_text(message: MessageText) -> str:
    """The text the reference counts when a message cannot be rendered:
    content, reasoning and the tool calls' JSON, joined by newlines."""
    parts = [message.content, message.reasoning or ""]
    if message.tool_calls:
        parts.append(msgspec.json.encode(list(message.tool_calls)).decode())
    return "\n".join(p for p in parts if p)


class _Texts:
    """Turns count inputs into (text, framing) pairs or direct counts, and
    counts texts: the fast path where it applies, else ``tokenizers`` in
    one batch call per batch of jobs.  Lives on the worker thread."""

    def __init__(
        self,
        encode: Callable[..., Sequence[Sized]],
        template: ChatTemplate | None,
        fast: BPECounter | None,
    ) -> None:
        self._encode = encode
        self._template = template
        self._fast = fast
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.template_fallbacks = 0
        self._framing: int | None = None

    # -- inputs to texts

    def framing(self) -> int:
        """Tokens of (empty user + empty assistant): subtracted from every
        message count (spec §1.2).  A template that cannot render it
        subtracts nothing, as the reference does (``token_metrics.py``)."""
        if self._framing is None:
            assert self._template is not None
            try:
                text = self._template.framing
            except ChatTemplateError:
                self._framing = 0
            else:
                self._framing = self.count_now([text])[0]
        return self._framing

    def text_of(self, item: CountInput) -> tuple[str, int] | int:
        """``(text, framing)`` to tokenize, or the count itself."""
        if item is None:
            return 0
        if isinstance(item, str):
            return item, 0
        if isinstance(item, tuple):
            return len(item)
        template = self._template
        if isinstance(item, MessageText):
            if template is None:
                return _fallback_text(item), 0
            message = assistant_message(
                item.content,
                item.reasoning,
                item.tool_calls,
                reasoning_field=template.reasoning_field,
            )
            try:
                text = template.render_reply(message)
            except ChatTemplateError:
                self.template_fallbacks += 1
                return _fallback_text(item), 0
            return text, self.framing()
        if template is not None:
            try:
                return template.render(
                    prompt_messages_for_template(item.messages),
                    add_generation_prompt=True,
                    tools=item.tools,
                    chat_template_kwargs=item.chat_template_kwargs,
                    chat_template=item.chat_template,
                    tool_choice=item.tool_choice,
                ), 0
            except ChatTemplateError:
                self.template_fallbacks += 1
        return "\n".join(str(m.get("content") or "") for m in item.messages), 0

    # -- texts to counts

    def count_now(self, texts: list[str]) -> list[int]:
        """Counts texts without framing (:meth:`count_jobs` without pairs)."""
        counts = [-1] * len(texts)
        self._count_into(counts, list(enumerate(texts)), [])
        return counts

    def _count_into(
        self,
        counts: list[int],
        singles: list[tuple[int, str]],
        pairs: list[tuple[int, int, str, int]],
    ) -> None:
        """Fills ``counts``: ``singles`` are (slot, text); ``pairs`` are
        (slot, tail slot, text, boundary) whose tail is ``text[boundary:]``.

        Texts the fast path cannot take (not ASCII) go to ``tokenizers``
        first, in a thread of their own: its encode releases the GIL, so it
        runs on the other core while this thread counts the rest in Python.
        Texts the fast path refuses for another reason are encoded last.
        """
        fast = self._fast
        if fast is None:
            texts = [t for _, t in singles]
            slots = [i for i, _ in singles]
            for i, b_slot, text, boundary in pairs:
                texts += (text, text[boundary:])
                slots += (i, b_slot)
            self._encode_into(counts, slots, texts)
            return
        slow_slots: list[int] = []
        slow_texts: list[str] = []
        for i, text in singles:
            if not text.isascii():
                slow_slots.append(i)
                slow_texts.append(text)
        for i, b_slot, text, boundary in pairs:
            if not text.isascii():
                slow_slots += (i, b_slot)
                slow_texts += (text, text[boundary:])
        pending = self._background(slow_texts) if slow_texts else None
        late_slots: list[int] = []
        late_texts: list[str] = []
        # One batch call for the ASCII texts (the native counter releases the
        # GIL for it); a single is a pair whose suffix is empty.
        ascii_pairs = [p for p in pairs if p[2].isascii()]
        ascii_singles = [s for s in singles if s[1].isascii()]
        results = fast.count_pairs(
            [p[2] for p in ascii_pairs] + [s[1] for s in ascii_singles],
            [p[3] for p in ascii_pairs] + [len(s[1]) for s in ascii_singles],
        )
        for (i, b_slot, text, boundary), pair in zip(
            ascii_pairs, results[: len(ascii_pairs)], strict=True
        ):
            if pair is None:
                late_slots += (i, b_slot)
                late_texts += (text, text[boundary:])
            else:
                counts[i], counts[b_slot] = pair
        for (i, text), pair in zip(ascii_singles, results[len(ascii_pairs) :], strict=True):
            if pair is None:
                late_slots.append(i)
                late_texts.append(text)
            else:
                counts[i] = pair[0]
        if late_texts:
            self._encode_into(counts, late_slots, late_texts)
        if pending is not None:
            for i, encoding in zip(slow_slots, pending.result(), strict=True):
                counts[i] = len(encoding)

    def _encode_into(self, counts: list[int], slots: list[int], texts: list[str]) -> None:
        if texts:
            encodings = self._encode(texts, add_special_tokens=False)
            for i, encoding in zip(slots, encodings, strict=True):
                counts[i] = len(encoding)

    def _background(self, texts: list[str]) -> concurrent.futures.Future[Sequence[Sized]]:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="mlpe-token-encode"
            )
        return self._pool.submit(self._encode, texts, add_special_tokens=False)

    def close(self) -> None:
        """Stops the background encoder (if one was started)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def count_jobs(self, jobs: Sequence[CountJob]) -> tuple[list[int], list[int], list[int]]:
        """The (OSL, TPOT, ISL) counts of a batch of jobs."""
        n = len(jobs)
        counts = [0] * (3 * n)  # OSL of job i at 3i, TPOT at 3i + 1, ISL at 3i + 2
        framing = [0] * (3 * n)
        singles: list[tuple[int, str]] = []
        pairs: list[tuple[int, int, str, int]] = []
        for i, job in enumerate(jobs):
            osl = self.text_of(job.osl)
            tpot = self.text_of(job.tpot)
            if (
                self._fast is not None
                and isinstance(osl, tuple)
                and isinstance(tpot, tuple)
                and osl[1] == 0
                and tpot[1] == 0
                and tpot[0]
                and osl[0].endswith(tpot[0])
            ):
                # The TPOT text is the output after its first chunk: one scan
                # counts both (fast_bpe module docstring).
                pairs.append((3 * i, 3 * i + 1, osl[0], len(osl[0]) - len(tpot[0])))
                osl = tpot = 0
            for field, item in ((0, osl), (1, tpot), (2, self.text_of(job.isl))):
                slot = 3 * i + field
                if isinstance(item, int):
                    counts[slot] = item
                elif item[0]:
                    singles.append((slot, item[0]))
                    framing[slot] = item[1]
        self._count_into(counts, singles, pairs)
        out = [max(0, c - f) for c, f in zip(counts, framing, strict=True)]
        return out[0::3], out[1::3], out[2::3]


class TokenCounter:
    """Counts the OSL, TPOT and ISL tokens of many queries in a worker thread.

    Use from one thread (the event loop's)::

        counter = TokenCounter(load_tokenizer("path/to/model"), template=...)
        for each finished query: counter.submit(count_job(record, ...))   # cheap
        counts = await counter.drain(timeout=60)                           # or finish()

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (from :func:`load_tokenizer`).
        template: the model's chat template, for messages (reasoning, tool
            calls) and chat prompts; None counts them as joined text, as the
            reference does when its template fails.
        batch_size: jobs per batch (:data:`DEFAULT_BATCH_SIZE`).
        live: count while jobs arrive (every 0.25 s) instead of waiting for
            ``drain``/``finish`` (see the module docstring).
        threads: Rayon pool size if ``RAYON_NUM_THREADS`` is unset and no
            batch was encoded in this process yet (default: usable CPUs,
            at most :data:`MAX_THREADS`).
        fast: use the exact count-only path of
            :mod:`mlpe_fast.metrics.fast_bpe` where it applies.  It runs
            Python code under the GIL, so a ``live`` counter never uses it:
            there the event loop must keep the interpreter.
        spill_dir: where a counter that waits (not ``live``) puts the jobs
            past :data:`SPILL_BATCH` while they wait (an anonymous file:
            :mod:`~.count_spill`; None: ``TMPDIR``).
        spill: False keeps every waiting job in memory.
    """

    def __init__(
        self,
        tokenizer: BatchEncoder,
        *,
        template: ChatTemplate | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        live: bool = False,
        threads: int | None = None,
        fast: bool = True,
        spill_dir: str | os.PathLike[str] | None = None,
        spill: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        _configure_pool(threads)
        tokenizer = _counting_copy(tokenizer)
        encode: Callable[..., Sequence[Sized]] = getattr(
            tokenizer, "encode_batch_fast", tokenizer.encode_batch
        )
        fast_counter: BPECounter | None = None
        if live:
            self.method = "tokenizers (live counting leaves the interpreter to the event loop)"
        elif not fast:
            self.method = "tokenizers"
        else:
            fast_counter, reason = _fast_path(tokenizer)
            self.method = (
                f"exact fast path ({fast_counter.implementation}) for ASCII text, "
                "tokenizers for the rest"
                if fast_counter is not None
                else f"tokenizers ({reason})"
            )
        self._texts = _Texts(encode, template, fast_counter)
        self._batch_size = batch_size
        self._live = live
        self._queue: deque[CountJob] = deque()
        # The worker's, in submission order: the spill file's jobs are older
        # than _unspilled's (a batch whose write failed), older than _queue's.
        self._spill: JobSpill[CountJob] | None = (
            JobSpill(spill_dir, CountJob) if spill and not live else None
        )
        self._unspilled: list[CountJob] = []
        self._spill_at = SPILL_BATCH  # submitted count at which to wake the worker to spill
        self._submitted = 0
        self._closed = False
        # Shared with the worker, under _lock:
        self._lock = threading.Lock()
        # OSL, TPOT tokens and ISL, in submission order.  A counter that
        # waits for the load's end moves them to files of their own a block
        # at a time (issue 23: flat memory in the run's length); a live one
        # keeps them, since drain() copies them while counting goes on.
        directory = None if spill_dir is None else os.fspath(spill_dir)
        self._counts = tuple(SpilledArray("q", directory) for _ in range(3))
        self._spill_counts = spill and not live
        self._waiters: list[tuple[int, concurrent.futures.Future[None]]] = []
        self._stopping = False  # finish(): count what is queued, then exit
        self._abandon = False  # stop after the current batch
        self._error: str | None = None
        self._exited = False  # the worker is gone: nobody will resolve a waiter
        self._seconds = 0.0
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlpe-token-counter", daemon=True)
        self._thread.start()

    # -- caller side -------------------------------------------------------

    def submit(self, job: CountJob) -> None:
        """Queues one query's counts; never tokenizes here."""
        if self._closed:
            raise LocalProtocolError("TokenCounter.submit() after finish()")
        self._queue.append(job)
        self._submitted += 1
        if self._submitted >= self._spill_at and self._spill is not None:
            # The worker spills what waits (cheap: a flag and a wake-up
            # every SPILL_BATCH jobs, not per job).
            self._spill_at = self._submitted + SPILL_BATCH
            self._wake.set()

    @property
    def submitted(self) -> int:
        """Jobs submitted so far."""
        return self._submitted

    @property
    def spilled(self) -> int:
        """Jobs moved to the spill file so far (read without locking)."""
        return 0 if self._spill is None else self._spill.jobs

    @property
    def counted(self) -> int:
        """Jobs counted so far (read without locking; for progress)."""
        return len(self._counts[0])

    async def drain(self, timeout: float | None = None) -> TokenCounts:
        """Waits, without blocking the loop, until every job submitted so far
        is counted, or ``timeout`` seconds; then returns all counts.

        The counter stays usable; counting goes on after a timeout.
        """
        target = self._submitted
        future = self._request(target)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        return self._snapshot(target)

    def finish(self, timeout: float | None = None) -> TokenCounts:
        """Counts what is queued (blocking up to ``timeout`` seconds), stops
        the worker and returns all counts; ``complete`` is False if counting
        could not finish.  Later ``submit`` calls raise."""
        self._closed = True
        target = self._submitted
        future = self._request(target, stopping=True)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            future.result(timeout)
        with self._lock:
            self._abandon = True
        self._wake.set()
        return self._snapshot(target)

    def close(self) -> None:
        """Stops the worker after its current batch, counting nothing more."""
        self._closed = True
        with self._lock:
            self._abandon = True
        self._wake.set()

    def _request(self, target: int, *, stopping: bool = False) -> concurrent.futures.Future[None]:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            if stopping:
                self._stopping = True
            if len(self._counts[0]) >= target or self._error is not None or self._exited:
                future.set_result(None)
            else:
                self._waiters.append((target, future))
        self._wake.set()
        return future

    def _snapshot(self, target: int) -> TokenCounts:
        with self._lock:
            counted = min(len(self._counts[0]), target)
            arrays: list[CountColumn] = []
            for source in self._counts:
                values: CountColumn
                if self._closed and 0 < counted == target == len(source):
                    # finish(): nothing more is appended, so the counts are
                    # handed over, not copied beside them (issue 23): the
                    # spilled store itself, or a view of its in-memory part
                    if source.spilled:
                        values = source
                    else:
                        values = np.frombuffer(source.tail, dtype=np.int64)
                else:
                    values = np.full(target, -1, dtype=np.int64)
                    if counted:
                        values[:counted] = source.read(0, counted)
                arrays.append(values)
            return TokenCounts(
                osl=arrays[0],
                tpot_tokens=arrays[1],
                isl=arrays[2],
                complete=counted == target and self._error is None,
                pending=target - counted,
                seconds=self._seconds,
                error=self._error,
                template_fallbacks=self._texts.template_fallbacks,
                method=self.method,
                spilled_jobs=0 if self._spill is None else self._spill.jobs,
                spilled_bytes=0 if self._spill is None else self._spill.peak_bytes,
                spill_failure=None if self._spill is None else self._spill.failure,
            )

    # -- worker side -------------------------------------------------------

    def _wanted(self) -> bool:
        with self._lock:
            if self._abandon or self._error is not None:
                return False
            return self._live or self._stopping or bool(self._waiters)

    def _idle(self) -> bool:
        """Nobody waits for counts and counting goes on: the time to spill."""
        with self._lock:
            return not (
                self._live
                or self._stopping
                or self._waiters
                or self._abandon
                or self._error is not None
            )

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait(LIVE_INTERVAL_S if self._live else None)
                self._wake.clear()
                while self._waiting() and self._wanted():
                    try:
                        self._count_batch(self._take())
                    except Exception as exc:  # a tokenizer failure ends counting
                        with self._lock:
                            self._error = (
                                f"token counting failed: {type(exc).__name__}: "
                                f"{_one_line(str(exc))[:200]}"
                            )
                self._spill_waiting()
                with self._lock:
                    if self._abandon or self._error is not None:
                        break
                    if self._stopping and not self._waiting():
                        break
        finally:
            self._texts.close()
            if self._spill is not None:
                self._spill.close()
            with self._lock:
                self._exited = True
                waiters, self._waiters = self._waiters, []
            for _, future in waiters:
                _resolve(future)

    def _waiting(self) -> bool:
        return bool(self._queue or self._unspilled or (self._spill and self._spill.waiting))

    def _take(self) -> list[CountJob]:
        """The oldest waiting jobs: the spill file's, then those whose spill
        failed, then the queue's."""
        if self._spill is not None and self._spill.waiting:
            return self._spill.read()
        if self._unspilled:
            batch, self._unspilled = self._unspilled, []
            return batch
        queue = self._queue
        n = min(self._batch_size, len(queue))
        return [queue.popleft() for _ in range(n)]

    def _spill_waiting(self) -> None:
        """Moves the queue's jobs to the spill file, a batch at a time, while
        nobody waits for counts (a counter that waits for the load's end)."""
        spill, queue = self._spill, self._queue
        if spill is None or spill.failure is not None or self._unspilled:
            return
        while len(queue) >= SPILL_BATCH and self._idle():
            batch = [queue.popleft() for _ in range(SPILL_BATCH)]
            try:
                spill.write(batch)
            except SpillError:  # kept in memory, in order; spilling stops
                self._unspilled = batch
                return

    def _count_batch(self, batch: list[CountJob]) -> None:
        started = time.perf_counter()
        osl, tpot, isl = self._texts.count_jobs(batch)
        elapsed = time.perf_counter() - started
        with self._lock:
            for store, values in zip(self._counts, (osl, tpot, isl), strict=True):
                store.extend(values)
                if self._spill_counts and len(store.tail) >= record_columns.BLOCK_ROWS:
                    # a disk that refuses them keeps them in memory: the
                    # counts are the same, only the memory is not bounded
                    with contextlib.suppress(OSError):
                        store.spill()
            self._seconds += elapsed
            counted = len(self._counts[0])
            ready = [f for t, f in self._waiters if t <= counted]
            self._waiters = [(t, f) for t, f in self._waiters if t > counted]
        for future in ready:
            _resolve(future)


def _resolve(future: concurrent.futures.Future[None]) -> None:
    # A waiter that timed out on the loop side may have been cancelled.
    if not future.done():
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            future.set_result(None)
