"""Client-side token counting: the reference tokenizer, off the event loop.

MLPerf Endpoints counts tokens on the client with the model's reference
tokenizer, once per completed response (``mlperf-endpoints-spec.md`` §1.2,
rules §2.8); the server's ``usage`` is not used.  Two counts per response:

* **OSL** (output sequence length): the tokens of the whole output, the
  numerator of ``system_tps`` (spec §1.1);
* **TPOT tokens**: the tokens of the output that arrived *after* the first
  content-bearing event, the denominator of the per-response TPOT (spec
  §1.2; reference-client.md §2.2: "tokenized independently from OSL").

Both are tokenized with ``add_special_tokens=False``: the count is of what
the model generated, not of BOS/EOS markers a post-processor would add.

Which text is counted is a :class:`CountRule`.  The default,
:data:`SIMPLE_RULE`, concatenates the categories
(:func:`output_text_for_count`, :func:`tpot_text_for_count`); the chat
template rule of spec §1.2 (render with and without the assistant message,
subtract the framing) is meant to replace it by supplying other text
functions and a framing offset, without touching the counter.

Threads.  :class:`TokenCounter` never tokenizes in the caller: ``submit``
appends a record to a queue and one worker thread encodes batches with
``Tokenizer.encode_batch_fast`` (``encode_batch`` on older ``tokenizers``).
That call releases the GIL and splits the batch over ``tokenizers``' own
Rayon thread pool, so the event loop keeps running while a batch is encoded.
The pool's size is fixed the first time any batch is encoded in the process,
from ``RAYON_NUM_THREADS``; unless the user set it, the counter sets it to
the CPUs this process may use, capped at :data:`MAX_THREADS` (past that the
Python side of each batch, building texts and reading lengths under the GIL,
dominates).  ``TOKENIZERS_PARALLELISM=false`` makes encoding single-threaded
and is respected.  Because the pool would compete with the event loop (and,
on small hosts, with a local endpoint) for CPU, counting is deferred by
default until :meth:`TokenCounter.drain` / :meth:`TokenCounter.finish` is
called after the load; ``live=True`` counts while the load runs, which suits
hosts with cores to spare and keeps the end-of-run drain short.  (As with
any use of ``tokenizers``' parallelism, a process forked after it disables
parallelism in the child and warns.)

Cost.  ``tokenizers`` encodes byte-level BPE text at about 0.45 M tokens per
CPU-second on the 2-core development host (``bench/bench_tokens.py``), so
100,000 streamed responses of 500 tokens (100 M tokens with the TPOT pass)
take about 230 CPU-seconds: count ``live`` on hosts with spare cores.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from ..errors import LocalProtocolError, UsageError
from ..wire.events import ResponseSummary, ToolCall

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from ..engine.record import RequestRecord

__all__ = (
    "DEFAULT_BATCH_SIZE",
    "MAX_THREADS",
    "SIMPLE_RULE",
    "BatchEncoder",
    "CountRule",
    "TokenCounter",
    "TokenCounts",
    "hf_cache_dir",
    "load_tokenizer",
    "output_text_for_count",
    "tpot_text_for_count",
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


# Loading ------------------------------------------------------------------------------


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, as ``huggingface_hub`` resolves it.

    ``HF_HUB_CACHE`` (or the legacy ``HUGGINGFACE_HUB_CACHE``), else
    ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``.
    """
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = os.environ.get(name)
        if value:
            return Path(value).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


# A Hugging Face repo id: NAME or ORG/NAME (letters, digits, "-", "_", ".").
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")

_SLOW_TOKENIZER_FILES = ("tokenizer.model", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _looks_like_path(name: str) -> bool:
    return (
        name.startswith(("/", "./", "../", "~", "\\"))
        or name.endswith(".json")
        or (os.sep != "/" and os.sep in name)
        or name.count("/") > 1
        or not _REPO_ID.match(name)
    )


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


def _cached_snapshots(repo_dir: Path) -> list[Path]:
    """Snapshot directories of one cached repo, the one ``refs/main`` names first."""
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return []
    ordered: list[Path] = []
    ref = repo_dir / "refs" / "main"
    try:
        head = ref.read_text(encoding="utf-8").strip()
    except OSError:
        head = ""
    if head and (snapshots / head).is_dir():
        ordered.append(snapshots / head)
    others = [p for p in snapshots.iterdir() if p.is_dir() and p not in ordered]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return ordered + others


def _from_hf_cache(repo_id: str) -> Tokenizer | None:
    """The cached ``tokenizer.json`` of a hub repo id, never the network."""
    repo_dir = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    for snapshot in _cached_snapshots(repo_dir):
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
    if _looks_like_path(name):
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


def _tool_text(calls: Iterable[ToolCall]) -> str:
    # Calls in ascending index (spec §1.2: "order calls by ascending index").
    return "".join(c.name + c.arguments for c in sorted(calls, key=lambda c: c.index))


def output_text_for_count(summary: ResponseSummary) -> str:
    """The text whose tokens are the response's OSL (interim rule).

    ``content + reasoning +`` every tool call's name and arguments, calls in
    ascending index.  Spec §1.2 specifies the chat-template rule instead
    (render the rebuilt assistant message, subtract the empty-assistant
    framing); it replaces this function through :class:`CountRule`.
    """
    text = summary.content + summary.reasoning
    if summary.tool_calls:
        text += _tool_text(summary.tool_calls)
    return text


def tpot_text_for_count(summary: ResponseSummary) -> str:
    """The text after the first content-bearing event, for TPOT (spec §1.2).

    The ``*_after_first`` counterparts of :func:`output_text_for_count`.
    Empty for a non-streamed response, which yields no TPOT sample.
    """
    text = summary.content_after_first + summary.reasoning_after_first
    if summary.tool_calls_after_first:
        text += _tool_text(summary.tool_calls_after_first)
    return text


class CountRule(msgspec.Struct, frozen=True):
    """Which text of a response is counted, and how many framing tokens of
    that text are not output (subtracted, floored at 0: spec §1.2 ``max(0,
    len(tok(a)) - len(tok(b)))``).  An empty text counts 0 without calling
    the tokenizer."""

    output_text: Callable[[ResponseSummary], str] = output_text_for_count
    tpot_text: Callable[[ResponseSummary], str] = tpot_text_for_count
    output_framing: int = 0
    tpot_framing: int = 0


#: The interim rule: plain concatenation, no framing.
SIMPLE_RULE = CountRule()


# Counting ------------------------------------------------------------------------------


class BatchEncoder(Protocol):
    """What the counter needs of a tokenizer (``tokenizers.Tokenizer`` fits)."""

    def encode_batch(
        self, input: Sequence[Any], /, is_pretokenized: bool = ..., add_special_tokens: bool = ...
    ) -> Sequence[Sized]: ...


class TokenCounts(msgspec.Struct, frozen=True):
    """Token counts of the records submitted to a :class:`TokenCounter`, in
    submission order.

    ``osl[i]`` and ``tpot_tokens[i]`` belong to the i-th submitted record;
    -1 means not counted (``complete`` is then False).  Failed records are
    not tokenized and count 0 (spec §1.2 counts completed responses).
    ``seconds`` is the wall time spent encoding (the reference client's
    ``osl_tokenization_s``); ``error`` says why counting stopped, if it did.
    """

    osl: npt.NDArray[np.int64]
    tpot_tokens: npt.NDArray[np.int64]
    complete: bool
    pending: int
    seconds: float
    error: str | None = None

    def __len__(self) -> int:
        return len(self.osl)


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


class TokenCounter:
    """Counts the OSL and TPOT tokens of many records in a worker thread.

    Use from one thread (the event loop's)::

        counter = TokenCounter(load_tokenizer("path/to/model"))
        for each finished request: counter.submit(record)      # cheap
        counts = await counter.drain(timeout=60)                # or finish()

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (from :func:`load_tokenizer`).
        rule: which text is counted (:data:`SIMPLE_RULE`).
        batch_size: records per encode call (:data:`DEFAULT_BATCH_SIZE`).
        live: count while records arrive (every 0.25 s) instead of waiting
            for ``drain``/``finish`` (see the module docstring).
        threads: Rayon pool size if ``RAYON_NUM_THREADS`` is unset and no
            batch was encoded in this process yet (default: usable CPUs,
            at most :data:`MAX_THREADS`).
    """

    def __init__(
        self,
        tokenizer: BatchEncoder,
        *,
        rule: CountRule = SIMPLE_RULE,
        batch_size: int = DEFAULT_BATCH_SIZE,
        live: bool = False,
        threads: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        _configure_pool(threads)
        tokenizer = _counting_copy(tokenizer)
        self._encode: Callable[..., Sequence[Sized]] = getattr(
            tokenizer, "encode_batch_fast", tokenizer.encode_batch
        )
        self._rule = rule
        self._batch_size = batch_size
        self._live = live
        self._queue: deque[RequestRecord] = deque()
        self._submitted = 0
        self._closed = False
        # Shared with the worker, under _lock:
        self._lock = threading.Lock()
        self._osl = array("q")
        self._tpot = array("q")
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

    def submit(self, record: RequestRecord) -> None:
        """Queues one record for counting; never tokenizes here."""
        if self._closed:
            raise LocalProtocolError("TokenCounter.submit() after finish()")
        self._queue.append(record)
        self._submitted += 1

    @property
    def submitted(self) -> int:
        """Records submitted so far."""
        return self._submitted

    @property
    def counted(self) -> int:
        """Records counted so far (read without locking; for progress)."""
        return len(self._osl)

    async def drain(self, timeout: float | None = None) -> TokenCounts:
        """Waits, without blocking the loop, until every record submitted so
        far is counted, or ``timeout`` seconds; then returns all counts.

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
            if len(self._osl) >= target or self._error is not None or self._exited:
                future.set_result(None)
            else:
                self._waiters.append((target, future))
        self._wake.set()
        return future

    def _snapshot(self, target: int) -> TokenCounts:
        with self._lock:
            counted = min(len(self._osl), target)
            osl = np.full(target, -1, dtype=np.int64)
            tpot = np.full(target, -1, dtype=np.int64)
            if counted:
                osl[:counted] = np.frombuffer(self._osl, dtype=np.int64, count=counted)
                tpot[:counted] = np.frombuffer(self._tpot, dtype=np.int64, count=counted)
            return TokenCounts(
                osl=osl,
                tpot_tokens=tpot,
                complete=counted == target and self._error is None,
                pending=target - counted,
                seconds=self._seconds,
                error=self._error,
            )

    # -- worker side -------------------------------------------------------

    def _wanted(self) -> bool:
        with self._lock:
            if self._abandon or self._error is not None:
                return False
            return self._live or self._stopping or bool(self._waiters)

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait(LIVE_INTERVAL_S if self._live else None)
                self._wake.clear()
                while self._queue and self._wanted():
                    try:
                        self._count_batch(self._take())
                    except Exception as exc:  # a tokenizer or rule failure ends counting
                        with self._lock:
                            self._error = (
                                f"token counting failed: {type(exc).__name__}: "
                                f"{_one_line(str(exc))[:200]}"
                            )
                with self._lock:
                    if self._abandon or self._error is not None:
                        break
                    if self._stopping and not self._queue:
                        break
        finally:
            with self._lock:
                self._exited = True
                waiters, self._waiters = self._waiters, []
            for _, future in waiters:
                _resolve(future)

    def _take(self) -> list[RequestRecord]:
        queue = self._queue
        n = min(self._batch_size, len(queue))
        return [queue.popleft() for _ in range(n)]

    def _count_batch(self, batch: list[RequestRecord]) -> None:
        rule = self._rule
        output_text, tpot_text = rule.output_text, rule.tpot_text
        n = len(batch)
        osl = [0] * n
        tpot = [0] * n
        texts: list[str] = []
        slots: list[int] = []  # i for osl[i], ~i for tpot[i]
        for i, record in enumerate(batch):
            if record.error_class is not None:
                continue
            summary = record.response
            text = output_text(summary)
            if text:
                texts.append(text)
                slots.append(i)
            text = tpot_text(summary)
            if text:
                texts.append(text)
                slots.append(~i)
        started = time.perf_counter()
        encodings = self._encode(texts, add_special_tokens=False) if texts else []
        elapsed = time.perf_counter() - started
        out_framing, tpot_framing = rule.output_framing, rule.tpot_framing
        for slot, encoding in zip(slots, encodings, strict=True):
            if slot >= 0:
                osl[slot] = max(0, len(encoding) - out_framing)
            else:
                tpot[~slot] = max(0, len(encoding) - tpot_framing)
        with self._lock:
            self._osl.extend(osl)
            self._tpot.extend(tpot)
            self._seconds += elapsed
            counted = len(self._osl)
            ready = [f for t, f in self._waiters if t <= counted]
            self._waiters = [(t, f) for t, f in self._waiters if t > counted]
        for future in ready:
            _resolve(future)


def _resolve(future: concurrent.futures.Future[None]) -> None:
    # A waiter that timed out on the loop side may have been cancelled.
    if not future.done():
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            future.set_result(None)
