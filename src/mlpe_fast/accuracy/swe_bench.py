"""SWE-bench accuracy through an external scoring service: the client side
(``docs/agentic.md`` §4.3; spec §2.6, the agentic accuracy gate).

SWE-bench is not a load phase: an agent (mini-swe-agent) works each
instance in its own container, calling the model endpoint and running real
tools, and the SWE-bench harness grades the patches.  That needs Docker,
the instance images and the network, so it runs in a separate service (the
reference's ``swebench_service``), and this client speaks its v1 HTTP API:

* ``GET /health``: ``api_version`` must be ``v1`` and ``capabilities``
  must include ``swebench.run``, ``swebench.cancel`` and
  ``artifacts.download``;
* ``POST /v1/runs`` with the model, the one endpoint URL and its key, the
  generation parameters, the subset, split, instance count and ids, the
  worker counts and the agent template; the answer names the ``run_id``;
* ``GET /v1/runs/<id>`` every ``poll_s`` until ``status`` is
  ``succeeded``, ``failed`` or ``cancelled`` (at most ``timeout_s``); a stop
  (Ctrl-C) or any failure sends ``POST /v1/runs/<id>/cancel``;
* the artifacts of a fixed allow-list are downloaded into
  ``swe_bench_runs/<id>/`` of the run folder, only from the run's own
  relative ``/v1/runs/<id>/artifacts/<name>`` URLs, and redirects are
  refused (a service must not be able to make the client fetch elsewhere).

A bearer token authenticates every call when given.  The score is
``resolved_instances`` / the instances asked for, a fraction; None (and
``complete`` false) when the run did not succeed, its counters are
inconsistent or nothing was submitted; ``complete`` is false too when fewer
than asked were submitted.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import msgspec

from ..errors import MlpeError

__all__ = (
    "ARTIFACTS",
    "SweBenchError",
    "SweBenchOptions",
    "SweBenchResult",
    "check_service",
    "run_swe_bench",
    "swe_bench_entry",
)

API_VERSION = "v1"
CAPABILITIES = frozenset({"swebench.run", "swebench.cancel", "artifacts.download"})
ARTIFACTS = frozenset(
    {
        "preds.json",
        "swe_bench_agent.log",
        "swe_bench_eval.log",
        "swe_bench_results.json",
        "status.json",
    }
)
"""The only artifacts fetched from the service."""

_TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
_RUN_ID = re.compile(r"[A-Za-z0-9_-]+")


class SweBenchError(MlpeError, RuntimeError):
    """The service cannot be used (unreachable, wrong version, a bad answer)."""


class SweBenchOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The service and the run (the reference's ``accuracy_config.extras``:
    ``swebench_service_url``, ``swebench_service_auth_token``, ``subset``,
    ``split``, ``num_instances`` (200 for submissions), ``workers``,
    ``max_eval_workers``, ``swebench_template``)."""

    service_url: str
    auth_token: str | None = None
    subset: str = "verified"
    split: str = "test"
    num_instances: int = 100
    workers: int = 10
    max_eval_workers: int = 10
    template: str | None = None
    timeout_s: float = 24 * 3600.0
    poll_s: float = 5.0

    @classmethod
    def from_extras(cls, extras: Mapping[str, Any], *, workers: int) -> SweBenchOptions:
        """The options of an ``accuracy_config.extras`` mapping; ``workers``
        defaults to the point's concurrency, as the reference's.

        Raises:
            SweBenchError: no service URL, or a value of the wrong kind.
        """
        url = extras.get("swebench_service_url")
        if not isinstance(url, str) or not url.strip():
            raise SweBenchError("accuracy_config.extras.swebench_service_url is required")
        try:
            return cls(
                service_url=url.strip().rstrip("/") + "/",
                auth_token=extras.get("swebench_service_auth_token"),
                subset=str(extras.get("subset", "verified")),
                split=str(extras.get("split", "test")),
                num_instances=int(extras.get("num_instances", 100)),
                workers=int(extras.get("workers", workers)),
                max_eval_workers=int(extras.get("max_eval_workers", 10)),
                template=extras.get("swebench_template"),
                timeout_s=float(extras.get("service_timeout_s", 24 * 3600.0)),
                poll_s=float(extras.get("poll_interval_s", 5.0)),
            )
        except (TypeError, ValueError) as error:
            raise SweBenchError(f"accuracy_config.extras: {error}") from None


class SweBenchResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a service run ended: its id and status, the counters, the score
    (None when there is none) and whether it covers every instance."""

    run_id: str | None
    status: str
    expected: int
    submitted: int | None = None
    resolved: int | None = None
    score: float | None = None
    complete: bool = False
    error: str | None = None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects())


def _call(
    options: SweBenchOptions,
    path: str,
    *,
    payload: Any = None,
    timeout_s: float = 30.0,
    raw: bool = False,
) -> Any:
    url = urljoin(options.service_url, path)
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if options.auth_token:
        request.add_header("Authorization", f"Bearer {options.auth_token}")
    try:
        with _opener.open(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        raise SweBenchError(f"SWE-bench service: {url}: HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise SweBenchError(f"SWE-bench service: {url}: {reason}") from None
    if raw:
        return body
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        raise SweBenchError(f"SWE-bench service: {url}: not JSON") from None


def check_service(options: SweBenchOptions) -> dict[str, Any]:
    """The service's health, checked (version and capabilities).

    Raises:
        SweBenchError: it cannot be used, with the reason.
    """
    health = _call(options, "health", timeout_s=10.0)
    if not isinstance(health, dict) or health.get("api_version") != API_VERSION:
        got = health.get("api_version") if isinstance(health, dict) else health
        raise SweBenchError(f"SWE-bench service speaks API {got!r}, not {API_VERSION!r}")
    missing = CAPABILITIES - set(health.get("capabilities") or ())
    if missing:
        raise SweBenchError(f"SWE-bench service lacks {', '.join(sorted(missing))}")
    return health


def run_swe_bench(
    options: SweBenchOptions,
    *,
    model: str,
    endpoint: str,
    api_key: str | None,
    generation: Mapping[str, Any],
    instance_ids: Sequence[str],
    report_dir: Path | None,
    stop: threading.Event | None = None,
) -> SweBenchResult:
    """Runs SWE-bench on the service and waits for it (module doc).  A set
    ``stop`` cancels the run.  Blocking: run it off the event loop."""
    expected = len(instance_ids)
    if not expected:
        return SweBenchResult(run_id=None, status="not-run", expected=0, error="no instances")
    payload = {
        "model_name": model,
        "endpoint_urls": [endpoint],
        "endpoint_api_key": api_key,
        "generation_params": dict(generation),
        "subset": options.subset,
        "split": options.split,
        "num_instances": expected,
        "workers": options.workers,
        "max_eval_workers": options.max_eval_workers,
        "evaluated_instance_ids": list(instance_ids),
        "template": options.template,
    }
    run_id: str | None = None
    try:
        status = _call(options, "v1/runs", payload=payload)
        run_id = _run_id(status)
        deadline = time.monotonic() + options.timeout_s
        while status.get("status") not in _TERMINAL:
            if time.monotonic() >= deadline:
                raise SweBenchError(f"SWE-bench run {run_id}: no result in {options.timeout_s:g} s")
            if stop is not None and stop.wait(options.poll_s):
                raise SweBenchError(f"SWE-bench run {run_id}: stopped")
            if stop is None:
                time.sleep(options.poll_s)
            status = _call(options, f"v1/runs/{run_id}")
            if _run_id(status) != run_id:
                raise SweBenchError(f"SWE-bench service answered for another run than {run_id}")
    except SweBenchError as error:
        if run_id is not None:
            _cancel(options, run_id)
        return SweBenchResult(run_id=run_id, status="error", expected=expected, error=str(error))
    if report_dir is not None:
        _keep(options, status, run_id, report_dir)
    return _result(status, run_id, expected)


def _run_id(status: Any) -> str:
    run_id = status.get("run_id") if isinstance(status, dict) else None
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise SweBenchError("SWE-bench service gave no valid run_id")
    return run_id


def _cancel(options: SweBenchOptions, run_id: str) -> None:
    try:
        _call(options, f"v1/runs/{run_id}/cancel", payload={}, timeout_s=10.0)
    except SweBenchError:
        pass  # the run is abandoned either way; the result says why


def _keep(options: SweBenchOptions, status: dict[str, Any], run_id: str, report_dir: Path) -> None:
    """The final status and the allowed artifacts, under ``swe_bench_runs/<id>/``."""
    where = report_dir / "swe_bench_runs" / run_id
    where.mkdir(parents=True, exist_ok=True)
    (where / "swe_bench_service_status.json").write_text(json.dumps(status, indent=2))
    artifacts = status.get("artifacts") or []
    if isinstance(artifacts, dict):
        artifacts = [{"name": k, "url": v} for k, v in artifacts.items()]
    for artifact in artifacts if isinstance(artifacts, list) else ():
        if not isinstance(artifact, dict):
            continue
        name, href = artifact.get("name"), artifact.get("url")
        if name not in ARTIFACTS or not isinstance(href, str):
            continue
        parts = urlsplit(href)
        if (parts.scheme, parts.netloc, parts.query, parts.fragment) != ("", "", "", "") or (
            parts.path != f"/v1/runs/{run_id}/artifacts/{name}"
        ):
            continue  # not the run's own artifact: never fetched
        try:
            body = _call(options, href.lstrip("/"), timeout_s=60.0, raw=True)
        except SweBenchError:
            continue
        (where / str(name)).write_bytes(body)


def _count(result: Mapping[str, Any], key: str) -> int | None:
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _result(status: dict[str, Any], run_id: str, expected: int) -> SweBenchResult:
    state = str(status.get("status"))
    if state != "succeeded":
        return SweBenchResult(
            run_id=run_id, status=state, expected=expected, error=f"the run {state}"
        )
    result = status.get("result")
    if not isinstance(result, dict):
        return SweBenchResult(
            run_id=run_id, status=state, expected=expected, error="the run gave no result"
        )
    submitted, resolved = (
        _count(result, "submitted_instances"),
        _count(result, "resolved_instances"),
    )
    if submitted is None or resolved is None or resolved > submitted or submitted > expected:
        return SweBenchResult(
            run_id=run_id,
            status=state,
            expected=expected,
            submitted=submitted,
            resolved=resolved,
            error="inconsistent counters",
        )
    if submitted == 0:
        return SweBenchResult(
            run_id=run_id, status=state, expected=expected, submitted=0, resolved=0,
            error="nothing was submitted",
        )  # fmt: skip
    return SweBenchResult(
        run_id=run_id,
        status=state,
        expected=expected,
        submitted=submitted,
        resolved=resolved,
        score=resolved / expected,
        complete=submitted == expected,
    )


def swe_bench_entry(name: str, result: SweBenchResult, *, duration_s: float) -> dict[str, Any]:
    """The accuracy entry of a SWE-bench run (a fraction, as the reference's)."""
    entry: dict[str, Any] = {
        "dataset_name": name,
        "dataset_type": "accuracy",
        "eval_method": "swe_bench_scorer",
        "score": result.score,
        "unit_samples": result.expected,
        "num_repeats": 1,
        "total_samples": result.expected,
        "duration_s": round(duration_s, 3),
        "complete": result.complete,
        "response_counts": {
            "issued": result.expected,
            "completed": result.submitted or 0,
            "failed": result.expected - (result.submitted or 0),
            "empty": 0,
        },
        "swe_bench": {
            "run_id": result.run_id,
            "status": result.status,
            "resolved_instances": result.resolved,
            "submitted_instances": result.submitted,
        },
    }
    if result.error is not None:
        entry["swe_bench"]["error"] = result.error
    return entry
