"""Run the reference client's command line with mlpe-fast's engine as its HTTP client.

``mlpe-fast endpoints ARGS...`` (or ``python -m mlpe_fast.compat.endpoints
ARGS...``) checks the installed reference client (its version and the names
and signatures it patches), refuses with one line and status 2 when they do
not match, patches the reference's client in its benchmark and probe
commands, and hands over to the reference's own entry point, so every flag, YAML file, artifact
and exit code is the reference's.  Nothing is patched unless this launcher
runs, and no import hooks are installed.

Patched (in ``inference_endpoint.commands.benchmark.execute``):

* ``HTTPEndpointClient`` → :class:`.endpoints_client.EngineEndpointClient`;
* ``BenchmarkSession`` → a subclass whose event publisher swaps the engine's
  stamps into RECV_FIRST / RECV_NON_FIRST records;

and in ``inference_endpoint.commands.probe``: ``HTTPEndpointClient`` (the
probe builds it with the synchronous constructor; the look-alike then runs
its own loop in a thread, as the reference's does).

Official on-premises MLPerf results must come from the unmodified reference
client; this launcher is for development, tuning, CI and audits of the
reference's timing.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from typing import Any

EXIT_REFUSED = 2
#: the reference versions whose seam was checked (docs: dropin-seam.md).
SUPPORTED_VERSIONS = frozenset({"0.1.0"})
EXECUTE = "inference_endpoint.commands.benchmark.execute"
PROBE = "inference_endpoint.commands.probe"
#: name → the parameter names its signature must have.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "HTTPEndpointClient.create": ("config", "loop"),
    "BenchmarkSession.__init__": (
        "self",
        "issuer",
        "event_publisher",
        "loop",
        "on_sample_complete",
        "session_id",
    ),
    "_create_issuer": ("ctx", "loop"),
}
#: the same for the probe command's module.
PROBE_SIGNATURES: dict[str, tuple[str, ...]] = {
    "HTTPEndpointClient.__init__": ("self", "config", "loop"),
}


class Refused(Exception):
    """The installed reference does not match the seam this launcher patches."""


def _parameters(function: Any) -> tuple[str, ...]:
    return tuple(inspect.signature(function).parameters)


def _check_signatures(
    module: Any, module_name: str, signatures: dict[str, tuple[str, ...]]
) -> None:
    for name, expected in signatures.items():
        target: Any = module
        for part in name.split("."):
            target = getattr(target, part, None)
            if target is None:
                raise Refused(f"{module_name}.{name} is missing")
        found = _parameters(target)
        if found != expected:
            raise Refused(
                f"{module_name}.{name} takes ({', '.join(found)}), expected ({', '.join(expected)})"
            )


def check_reference() -> tuple[Any, Any]:
    """The reference's ``execute`` and ``probe`` modules, after checking
    version, names and signatures."""
    import importlib
    from importlib import metadata

    try:
        execute = importlib.import_module(EXECUTE)
        probe = importlib.import_module(PROBE)
        main_module = importlib.import_module("inference_endpoint.main")
        record = importlib.import_module("inference_endpoint.core.record")
    except ImportError as error:
        raise Refused(
            f"the reference client is not installed or cannot be imported ({error}); "
            "install inference-endpoint 0.1.0 (Python >= 3.12)"
        ) from None
    try:
        version = metadata.version("inference-endpoint")
    except metadata.PackageNotFoundError:
        version = "unknown"
    if version not in SUPPORTED_VERSIONS:
        raise Refused(
            f"inference-endpoint {version} is installed; this launcher supports "
            f"{', '.join(sorted(SUPPORTED_VERSIONS))}"
        )
    if not callable(getattr(main_module, "run", None)):
        raise Refused("inference_endpoint.main.run is missing")
    _check_signatures(execute, EXECUTE, SIGNATURES)
    _check_signatures(probe, PROBE, PROBE_SIGNATURES)
    events = getattr(record, "SampleEventType", None)
    for member in ("RECV_FIRST", "RECV_NON_FIRST"):
        if not hasattr(events, member):
            raise Refused(f"inference_endpoint.core.record.SampleEventType.{member} is missing")
    return execute, probe


def install(execute: Any, probe: Any) -> None:
    """Patches the reference's benchmark and probe modules (only ever called by :func:`main`)."""
    import importlib

    from .endpoints_client import EngineEndpointClient, StampingPublisher

    events = importlib.import_module("inference_endpoint.core.record").SampleEventType
    recv_types = frozenset({events.RECV_FIRST, events.RECV_NON_FIRST})
    base = execute.BenchmarkSession

    class StampedSession(base):  # type: ignore[misc, valid-type]
        """The reference's session; its RECV_* records carry the engine's stamps."""

        def __init__(
            self,
            issuer: Any,
            event_publisher: Any,
            loop: Any,
            on_sample_complete: Any = None,
            session_id: str | None = None,
        ) -> None:
            publisher = StampingPublisher(event_publisher, EngineEndpointClient.stamps, recv_types)
            super().__init__(issuer, publisher, loop, on_sample_complete, session_id)

    StampedSession.__name__ = StampedSession.__qualname__ = "BenchmarkSession"
    execute.HTTPEndpointClient = EngineEndpointClient
    execute.BenchmarkSession = StampedSession
    probe.HTTPEndpointClient = EngineEndpointClient


def main(argv: Sequence[str]) -> int:
    """Checks, patches and runs the reference's CLI with ``argv``; returns its exit status."""
    try:
        modules = check_reference()
    except Refused as error:
        print(f"mlpe-fast endpoints: refused: {error}", file=sys.stderr)
        return EXIT_REFUSED
    install(*modules)
    import importlib

    run = importlib.import_module("inference_endpoint.main").run

    sys.argv = ["inference-endpoint", *argv]
    try:
        run()
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 0
