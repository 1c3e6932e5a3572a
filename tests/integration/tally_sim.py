"""The simulated endpoint, counting the completion requests it serves.

Run as a script (``python tests/integration/tally_sim.py --port 0 ...``, the
flags of ``python -m mlpe_fast.sim.server``): the same server, whose
request handler first counts every ``POST`` to a completion route by
(model, route, stream flag, protocol), then answers as usual.  ``GET
/_tally`` returns the counts so far as JSON: a list of ``[model, route,
stream, protocol, count]`` rows, ``protocol`` being "h1" or "h2".  ``GET
/_prompts`` returns what the prompts were, by model: ``[model, kind,
count]`` rows, ``kind`` being "text", "token_ids" (a ``/v1/completions``
prompt of integers, or SGLang's ``input_ids``) or "messages".  ``GET
/_token_prompts`` returns the token-id prompts themselves: ``[model, [id,
...]]`` rows in arrival order.  SGLang's ``/generate`` carries no model:
its requests count under the model "".

A test gives each case its own ``--model`` name (the endpoint accepts any)
and reads the counts of that name: what the server saw of that run alone,
on a server shared by many runs.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

SCRIPT = str(Path(__file__).resolve())
TALLY_PATH = "/_tally"
PROMPTS_PATH = "/_prompts"
TOKEN_PROMPTS_PATH = "/_token_prompts"
COMPLETION_ROUTES = ("/v1/chat/completions", "/v1/completions", "/generate")

Key = tuple[str, str, bool, str]  # model, route, stream, protocol


def _install() -> None:
    from mlpe_fast.sim import _h2, _handling, _protocol

    original = _handling.handle_request
    tally: Counter[Key] = Counter()
    kinds: Counter[tuple[str, str]] = Counter()
    token_prompts: list[tuple[str, list[int]]] = []

    def handle_request(
        state: Any, out: Any, method: str, path: str, body: bytes, **stamps: int
    ) -> None:
        if path == TALLY_PATH:
            rows = [[*key, n] for key, n in sorted(tally.items())]
            _handling.reply(state, out, 200, json.dumps(rows).encode())
            return
        if path == PROMPTS_PATH:
            rows = [[*key, n] for key, n in sorted(kinds.items())]
            _handling.reply(state, out, 200, json.dumps(rows).encode())
            return
        if path == TOKEN_PROMPTS_PATH:
            _handling.reply(state, out, 200, json.dumps(token_prompts).encode())
            return
        if method == "POST" and path in COMPLETION_ROUTES:
            try:
                doc = msgspec.json.decode(body)
            except msgspec.DecodeError:
                doc = None
            if isinstance(doc, dict):
                model = str(doc.get("model", ""))
                tally[
                    (model, path, doc.get("stream") is True, "h1" if out.wire is not None else "h2")
                ] += 1
                kind = _prompt_kind(doc)
                kinds[(model, kind)] += 1
                if kind == "token_ids":
                    token_prompts.append((model, doc.get("input_ids", doc.get("prompt"))))
        original(state, out, method, path, body, **stamps)

    # Both protocols' modules imported the handler by name.
    for module in (_protocol, _h2):
        setattr(module, "handle_request", handle_request)  # noqa: B010


def _prompt_kind(doc: dict[str, Any]) -> str:
    prompt = doc.get("input_ids", doc.get("prompt"))
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return "token_ids"
    return "messages" if "messages" in doc else "text"


def read_prompt_kinds(url: str, model: str) -> Counter[str]:
    """How many prompts of each kind the server at ``url`` saw from ``model``."""
    with urllib.request.urlopen(url + PROMPTS_PATH, timeout=10) as response:
        rows = json.loads(response.read())
    return Counter({kind: n for m, kind, n in rows if m == model})


def read_token_prompts(url: str, model: str) -> list[tuple[int, ...]]:
    """The token-id prompts the server at ``url`` got from ``model``, in order."""
    with urllib.request.urlopen(url + TOKEN_PROMPTS_PATH, timeout=10) as response:
        rows = json.loads(response.read())
    return [tuple(ids) for m, ids in rows if m == model]


def read_tally(url: str, model: str | None = None) -> Counter[Key]:
    """The counts of the server at ``url`` (over HTTP/1.1), all of them or
    those of one model."""
    with urllib.request.urlopen(url + TALLY_PATH, timeout=10) as response:
        rows = json.loads(response.read())
    return Counter(
        {
            (m, route, stream, proto): n
            for m, route, stream, proto, n in rows
            if model is None or m == model
        }
    )


if __name__ == "__main__":
    _install()
    from mlpe_fast.sim.server import main

    sys.exit(main())
