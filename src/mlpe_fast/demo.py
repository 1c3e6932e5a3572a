"""The demo: ``mlpe-fast run`` with no endpoint measures the simulated one.

:func:`simulated_endpoint` starts ``mlpe-fast serve`` in a child process (so
that its CPU is not the client's) and :func:`demo_config` fills what the user
left out with settings that fit it: its prompts, its tokenizer (one
character is one token) and a short run.  The tests start their endpoints the
same way.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from . import sim
from .config import RunConfig
from .errors import SetupError
from .load.dataset import DatasetSpec
from .sim.tokenizer import DEMO_TOKENIZER

__all__ = (
    "DEMO_SERVER_FLAGS",
    "demo_config",
    "demo_defaults",
    "simulated_endpoint",
    "stop_process",
)

DEMO_MODEL = "mlpe-sim"
DEMO_CONCURRENCY = 16
DEMO_SAMPLES = 256
DEMO_OUTPUT_TOKENS = 64
DEMO_SERVER_FLAGS = ("--ttft-ms", "20", "--itl-ms", "2", "--seed", "1")


def _demo_dataset() -> DatasetSpec:
    return DatasetSpec(path=str(Path(sim.__file__).parent / "demo_prompts.jsonl"), name="demo")


def demo_defaults() -> dict[str, Any]:
    """The demo's prompts and tokenizer as the defaults of a run without
    endpoints (``config.resolve``): the rules check them as they check a
    user's, so that ``--api-type sglang`` or ``--harmony on``, which these
    text prompts and this tokenizer cannot serve, are refused before the
    simulated endpoint starts (and by ``--dry-run``), not at load time or
    silently ignored."""
    return {"datasets": (_demo_dataset(),), "tokenizer": DEMO_TOKENIZER}


def demo_config(config: RunConfig, given: set[str]) -> RunConfig:
    """Fills what the user left out for a run against the simulated endpoint.

    ``given`` names the RunConfig fields the user set.
    """
    changes: dict[str, Any] = {}
    if not config.datasets:
        changes["datasets"] = (_demo_dataset(),)
    if not config.tokenizer:
        changes["tokenizer"] = DEMO_TOKENIZER
        # a synthetic dataset is built with the run's tokenizer: the demo's now
        changes["datasets"] = tuple(
            _with_tokenizer(spec, DEMO_TOKENIZER)
            for spec in changes.get("datasets", config.datasets)
        )
    if not config.model:
        changes["model"] = DEMO_MODEL
    agentic = config.load_pattern == "agentic_inference"
    if "concurrency" not in given and not agentic:
        changes["concurrency"] = DEMO_CONCURRENCY
    # An agentic run's size is its trajectories, never a sample count.
    if config.num_samples is None and config.duration_s is None and not agentic:
        changes["num_samples"] = DEMO_SAMPLES
    if "max_output_tokens" not in given:
        changes["max_output_tokens"] = DEMO_OUTPUT_TOKENS
    return msgspec.structs.replace(config, **changes)


def _with_tokenizer(spec: DatasetSpec, tokenizer: str) -> DatasetSpec:
    """``spec`` with its synthetic prompts built with ``tokenizer``
    (``config/rules.py`` gave them the model's name, or none)."""
    synthetic = spec.synthetic
    if synthetic is None:
        return spec
    return msgspec.structs.replace(
        spec, synthetic=msgspec.structs.replace(synthetic, tokenizer=tokenizer)
    )


@contextlib.contextmanager
def simulated_endpoint(
    flags: tuple[str, ...] = DEMO_SERVER_FLAGS, *, script: str | None = None
) -> Iterator[str]:
    """Starts ``mlpe-fast serve`` in its own process and yields its URL;
    ``script``: a Python file that serves it instead (a test's wrapped
    server), taking the same flags.

    Raises:
        SetupError: the server did not start (its error, or its first line).
    """
    server = ["-m", "mlpe_fast.sim.server"] if script is None else [script]
    proc = subprocess.Popen(
        # --exit-with-parent: a run killed with SIGKILL leaves no server behind,
        # even one killed before the server first looked for it (our pid)
        [sys.executable, *server, "--port", "0", "--exit-with-parent", str(os.getpid()), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if " at http" not in line:
            error = proc.stderr.read() if proc.stderr is not None and proc.poll() else ""
            raise SetupError(
                f"the simulated endpoint did not start: {(error or line).strip() or 'no output'}"
            )
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[str], grace_s: float = 10.0) -> None:
    """Ends a child server: SIGTERM, up to ``grace_s`` to exit, then
    SIGKILL; its pipes are closed."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
