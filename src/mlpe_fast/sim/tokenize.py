"""The simulated endpoint's ``POST /tokenize`` and prefix-cache routes.

``/tokenize`` answers as vLLM and SGLang do: a request ``{"model",
"prompt": TEXT, "add_special_tokens"?}`` gets ``{"tokens": [id, ...],
"count": N, "max_model_len": M}`` (vLLM's ``TokenizeCompletionRequest``;
SGLang's ``/tokenize`` takes and returns the same fields).  It is served
only when the endpoint has a tokenizer (``--tokenizer``, a directory
holding ``tokenizer.json`` or the file itself); without one the route is
not there (404), as on a server that offers none.  ``--tokenize-skew N``
makes it disagree on purpose: N more ids (the first id, repeated) on every
answer, so that a client's check of its own counts has something to find.

The prefix-cache routes answer 200 and count the reset
(``SimStats.prefix_cache_resets``): ``POST /reset_prefix_cache`` with an
empty body, as vLLM (which serves it with ``VLLM_SERVER_DEV_MODE=1``), and
``POST``/``GET /flush_cache`` with SGLang's text.  The simulated endpoint
keeps no cache: the count is what there is to observe.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = (
    "FLUSH_CACHE_TEXT",
    "PREFIX_CACHE_PATHS",
    "TokenizeError",
    "load_sim_tokenizer",
    "tokenize",
)

#: The routes that empty a server's prefix cache: vLLM's, SGLang's.
PREFIX_CACHE_PATHS = ("/reset_prefix_cache", "/flush_cache")
#: What SGLang's ``/flush_cache`` says when it flushed.
FLUSH_CACHE_TEXT = b"Cache flushed.\nPlease check backend logs for more details. "


class TokenizeError(Exception):
    """A ``/tokenize`` request that cannot be answered (400): the message and the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@functools.lru_cache(maxsize=4)
def load_sim_tokenizer(name: str) -> Tokenizer:
    """The tokenizer at ``name``: a directory holding ``tokenizer.json``, or
    the file itself.

    Raises:
        ValueError: no such file, or not a tokenizer (a bad ``--tokenizer``).
    """
    from tokenizers import Tokenizer

    path = Path(name)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ValueError(f"--tokenizer {name}: no tokenizer.json there")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises its own Exception type
        raise ValueError(f"--tokenizer {name}: not a tokenizer ({error})") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def tokenize(tokenizer: Tokenizer, body: bytes, *, skew: int, max_model_len: int) -> bytes:
    """The answer to one ``/tokenize`` request body (module docstring).

    Raises:
        TokenizeError: not a JSON object with a string ``prompt``, or an
            ``add_special_tokens`` that is not a boolean.
    """
    try:
        doc: Any = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise TokenizeError("the request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise TokenizeError("the request body must be a JSON object")
    prompt = doc.get("prompt")
    if not isinstance(prompt, str):
        raise TokenizeError("'prompt' must be a string", "prompt")
    special = doc.get("add_special_tokens", True)
    if not isinstance(special, bool):
        raise TokenizeError("'add_special_tokens' must be a boolean", "add_special_tokens")
    ids = list(tokenizer.encode(prompt, add_special_tokens=special).ids)
    if skew and ids:
        ids += [ids[0]] * skew
    return msgspec.json.encode({"tokens": ids, "count": len(ids), "max_model_len": max_model_len})
