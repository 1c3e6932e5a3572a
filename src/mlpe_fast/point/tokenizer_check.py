"""``--tokenizer-check``: the client's token counts of a sample of prompts
against the endpoint's own tokenizer, before the load.

MLPerf counts tokens on the client with the model's reference tokenizer
(spec §1.2); a ``--tokenizer`` that is not the served model's makes every
ISL, OSL and throughput figure wrong without a word.  vLLM and SGLang say
how they tokenize a text: ``POST /tokenize {"model", "prompt",
"add_special_tokens"}`` answers ``{"tokens": [...], "count": N}`` (both
servers' route and fields).  Before the point's first request, up to
:data:`SAMPLE_TEXTS` texts of the dataset the point sends (its prompts,
system prompts and message contents, evenly spread over the dataset; a
token-id prompt as the text its ids decode to) are tokenized by both,
without special tokens on either side, and compared: a warning says how
many of how many differ (in count, or in ids with the same count) and the
largest difference.  The chat template is not compared (``/tokenize``
takes a text); the endpoint's ``usage`` cross-checks the whole prompt
after the load (``metrics/usage_check.py``).

``auto`` (the default) checks when the endpoint offers the route and says
(and records) nothing when it does not (404, 405, 501: most servers); ``on`` makes a
missing route, or no answer, one line and exit status 2; ``off`` asks
nothing.  The check is made once per point (each point's folder records
its own), with requests of its own on a connection of its own, before the
load and its warmup and before the prefix cache is emptied
(``point/prefix_cache.py``): it costs the measurement nothing.  What it
found goes to the run folder (``server_calls.json``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import msgspec

from ..config import RunConfig
from ..engine.side_request import SideResponse, side_request
from ..errors import UsageError
from ..load.dataset import Dataset, Sample

__all__ = ("SAMPLE_TEXTS", "TOKENIZE_ROUTE", "check_tokenizer", "texts_of")

#: The route both vLLM and SGLang serve.
TOKENIZE_ROUTE = "/tokenize"
#: How many texts are compared, at most.
SAMPLE_TEXTS = 32
#: The statuses of a server that has no such route.
_NOT_OFFERED = (404, 405, 501)


def texts_of(dataset: Dataset, tokenizer: Any, limit: int = SAMPLE_TEXTS) -> list[tuple[int, str]]:
    """Up to ``limit`` texts of ``dataset``'s samples, ``(sample index,
    text)``, from samples evenly spread over it."""
    n = len(dataset)
    step = max(1, n // limit)
    out: list[tuple[int, str]] = []
    for index in range(0, n, step):
        for text in _sample_texts(dataset.samples[index], tokenizer):
            if text and len(out) < limit:
                out.append((index, text))
    return out


def _sample_texts(sample: Sample, tokenizer: Any) -> Iterator[str]:
    if sample.token_ids is not None:
        yield tokenizer.decode(list(sample.token_ids), skip_special_tokens=False)
        return
    if sample.system is not None:
        yield sample.system
    if sample.prompt is not None:
        yield sample.prompt
    for message in sample.messages or ():
        content = message.get("content")
        if isinstance(content, str):
            yield content


async def check_tokenizer(
    config: RunConfig,
    endpoint: str,
    datasets: Sequence[Dataset],
    tokenizer: Any,
    *,
    err: TextIO | None = None,
) -> dict[str, Any] | None:
    """Compares the counts (module docstring); returns what it found for
    ``server_calls.json``, None when there is nothing to record (``off``,
    no dataset, or, with ``auto``, no route).

    Raises:
        UsageError: ``on`` and the endpoint offers no ``/tokenize``, or did
            not answer.
    """
    if config.tokenizer_check == "off" or not datasets:
        return None
    out = sys.stderr if err is None else err
    texts = texts_of(datasets[0], tokenizer)
    found: dict[str, Any] = {
        "route": TOKENIZE_ROUTE,
        "url": endpoint,
        "offered": True,
        "checked": 0,
        "differ": 0,
    }
    differences: list[tuple[int, int, int, int]] = []  # |diff|, sample, ours, theirs
    same_count_other_ids = 0
    start = time.monotonic_ns()
    for index, text in texts:
        answer = await side_request(
            endpoint,
            "POST",
            TOKENIZE_ROUTE,
            msgspec.json.encode(
                {"model": config.model, "prompt": text, "add_special_tokens": False}
            ),
            api_key=config.api_key,
            headers=config.headers,
            timeout_s=max(config.timeouts.connect_s, 30.0),
            ca_bundle=config.ca_bundle,
            insecure=config.insecure,
        )
        theirs = _their_ids(answer)
        if theirs is None:
            return _unanswered(config, found, answer, out)
        ours = list(tokenizer.encode(text, add_special_tokens=False).ids)
        found["checked"] += 1
        if len(ours) != len(theirs):
            differences.append((abs(len(ours) - len(theirs)), index, len(ours), len(theirs)))
        elif theirs != ours:
            same_count_other_ids += 1
    found["took_ms"] = round((time.monotonic_ns() - start) / 1e6, 3)
    found["differ"] = len(differences) + same_count_other_ids
    found["differ_in_count"] = len(differences)
    if differences:
        largest, index, ours_n, theirs_n = max(differences)
        found["largest_difference"] = {
            "tokens": largest,
            "sample_index": index,
            "ours": ours_n,
            "theirs": theirs_n,
        }
    if found["differ"]:
        print(f"mlpe-fast: warning: {_warning(found, same_count_other_ids)}", file=out)
    return found


def _their_ids(answer: SideResponse) -> list[int] | None:
    """The endpoint's ids of one text; None when it gave none."""
    if not answer.ok:
        return None
    try:
        doc = msgspec.json.decode(answer.body)
    except msgspec.DecodeError:
        return None
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        return None
    return tokens


def _unanswered(
    config: RunConfig, found: dict[str, Any], answer: SideResponse, out: TextIO
) -> dict[str, Any] | None:
    """A ``/tokenize`` that gave no ids: not offered (nothing to say or
    record, unless ``on``), or broken (a warning; with ``on``, one line and
    status 2)."""
    offered = answer.status not in _NOT_OFFERED and answer.status is not None
    found |= {"offered": offered, "status": answer.status}
    if answer.status is None:
        why = f"got no answer ({answer.error})"
    elif not offered:
        why = f"answered {answer.status}: the endpoint offers no {TOKENIZE_ROUTE}"
    else:
        why = f"answered {answer.status} without token ids"
    found["message"] = why
    line = f"--tokenizer-check: POST {answer.url} {why}"
    if config.tokenizer_check == "on":
        raise UsageError(f"{line}; use --tokenizer-check auto or off")
    if not offered and answer.status is not None:
        return None  # most servers: auto asks, and says nothing
    print(f"mlpe-fast: warning: {line}: the token counts were not checked", file=out)
    return found


def _warning(found: dict[str, Any], same_count_other_ids: int) -> str:
    checked, differ = found["checked"], found["differ"]
    parts = [
        f"tokenizer check: {differ} of {checked} prompt texts tokenize differently on "
        f"{found['url']}{TOKENIZE_ROUTE}"
    ]
    largest = found.get("largest_difference")
    if largest is not None:
        parts.append(
            f"largest difference {largest['tokens']} tokens (sample {largest['sample_index']}: "
            f"ours {largest['ours']}, the endpoint's {largest['theirs']})"
        )
    if same_count_other_ids:
        parts.append(f"{same_count_other_ids} with the same count but other ids")
    return (
        "; ".join(parts) + ": the client's tokenizer may not be the model's, and so its token "
        "counts (ISL, OSL, tokens/s); check --tokenizer"
    )
