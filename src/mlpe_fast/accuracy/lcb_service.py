"""The reference's LiveCodeBench service (``lcb_serve``): the client side.

The reference runs model-generated programs in a container of its own
(mlcommons/endpoints ``evaluation/livecodebench/_server.py`` at ea332753,
port 13835 by default), which holds every problem's tests.  Its API:

* ``GET /info``: ``{"version_tag", "n_workers", "dataset_size"}``, or 503
  while it loads -- the health checked before any load (:func:`check_service`);
* the WebSocket ``/evaluate``: one text message ``{"codes_dict": {question
  id: [code, ...]}, "timeout_sec": N}`` -- every list the same length, which
  the service requires -- then text messages ``{"status": "started" |
  "progress" | "completed" | "error", ...}`` until ``completed`` (its
  ``result.results`` maps each question id to one pass/fail per code, in
  order) or ``error``.

Every failure -- down, refused, a timeout, an answer that is not JSON or
not of this shape -- is one line, a :class:`LcbServiceError`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import urljoin

from ..errors import MlpeError
from .websocket import WebSocketError, connect

__all__ = ("LcbServiceError", "check_service", "evaluate_on_service")

# A padding program for a problem issued fewer times than another (the
# service wants lists of one length); its verdict is not counted.
_PADDING = "raise SystemExit(1)"


class LcbServiceError(MlpeError, RuntimeError):
    """The LiveCodeBench service cannot be used or gave a bad answer."""


def check_service(
    url: str, *, version_tag: str | None = None, timeout_s: float = 10.0
) -> dict[str, Any]:
    """The service's ``/info``, checked: it answers JSON with a dataset loaded
    and, when ``version_tag`` is given, the same LiveCodeBench release.

    Raises:
        LcbServiceError: it cannot be used, with the reason.
    """
    where = urljoin(url, "info")
    try:
        with urllib.request.urlopen(where, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        raise LcbServiceError(f"LiveCodeBench service: {where}: HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise LcbServiceError(f"LiveCodeBench service: {where}: {reason}") from None
    try:
        info = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise LcbServiceError(f"LiveCodeBench service: {where}: not JSON") from None
    if not isinstance(info, dict):
        raise LcbServiceError(f"LiveCodeBench service: {where}: not a JSON object")
    size = info.get("dataset_size")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise LcbServiceError(f"LiveCodeBench service: {where}: no dataset loaded")
    if version_tag is not None and info.get("version_tag") != version_tag:
        raise LcbServiceError(
            f"LiveCodeBench service holds {info.get('version_tag')!r}, not {version_tag!r}"
        )
    return info


def _codes_by_problem(programs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    codes: dict[str, list[str]] = {}
    for question_id, code in programs:
        codes.setdefault(question_id, []).append(code)
    longest = max((len(c) for c in codes.values()), default=0)
    for listed in codes.values():
        listed.extend([_PADDING] * (longest - len(listed)))
    return codes


def evaluate_on_service(
    url: str,
    programs: Sequence[tuple[str, str]],
    *,
    timeout_s: int,
    deadline_s: float,
) -> list[bool]:
    """Whether each ``(question id, code)`` passed, graded by the service,
    in order; ``timeout_s`` per test, at most ``deadline_s`` in all.

    Raises:
        LcbServiceError: the service failed or answered out of shape.
    """
    if not programs:
        return []
    codes = _codes_by_problem(programs)
    ws_url = urljoin(url, "evaluate")
    ends = time.monotonic() + deadline_s
    try:
        connection = connect(ws_url, timeout_s=min(30.0, deadline_s))
    except WebSocketError as error:
        raise LcbServiceError(f"LiveCodeBench service: {error}") from None
    try:
        connection.send_text(json.dumps({"codes_dict": codes, "timeout_sec": timeout_s}))
        while True:
            remaining = ends - time.monotonic()
            if remaining <= 0:
                raise LcbServiceError(f"LiveCodeBench service: no result in {deadline_s:g} s")
            connection.settimeout(remaining)
            message = _decoded(connection.recv_text())
            status = message.get("status")
            if status == "completed":
                return _verdicts(message.get("result"), programs, codes)
            if status == "error":
                raise LcbServiceError(f"LiveCodeBench service: {message.get('error')}")
            if status not in ("started", "progress"):
                raise LcbServiceError(f"LiveCodeBench service: unknown status {status!r}")
    except WebSocketError as error:
        raise LcbServiceError(f"LiveCodeBench service: {ws_url}: {error}") from None
    finally:
        connection.close()


def _decoded(text: str) -> dict[str, Any]:
    try:
        message = json.loads(text)
    except json.JSONDecodeError:
        raise LcbServiceError("LiveCodeBench service: a message that is not JSON") from None
    if not isinstance(message, dict):
        raise LcbServiceError("LiveCodeBench service: a message that is not an object")
    return message


def _verdicts(
    result: Any, programs: Sequence[tuple[str, str]], codes: dict[str, list[str]]
) -> list[bool]:
    results = result.get("results") if isinstance(result, dict) else None
    if not isinstance(results, dict):
        raise LcbServiceError("LiveCodeBench service: a result without per-problem results")
    for question_id, listed in codes.items():
        got = results.get(question_id)
        if not isinstance(got, list) or len(got) != len(listed):
            raise LcbServiceError(f"LiveCodeBench service: no full result for {question_id!r}")
    seen: dict[str, int] = {}
    verdicts: list[bool] = []
    for question_id, _ in programs:
        index = seen.get(question_id, 0)
        seen[question_id] = index + 1
        verdicts.append(results[question_id][index] is True)
    return verdicts
