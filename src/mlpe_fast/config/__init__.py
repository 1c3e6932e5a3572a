"""The one run configuration, from the command line and/or a YAML file.

:class:`RunConfig` is what ``mlpe-fast run`` executes.  It is built by
:func:`resolve` from the ``run`` flags (:func:`add_run_arguments`) and an
optional YAML file (:func:`load_yaml`); a flag given on the command line
overrides the same setting in the file.

One module per job, data flowing one way:

* ``schema``: one row per setting (flag, YAML key, converter, default);
  the flags, the YAML key map and the RunConfig defaults come from it;
* ``run_config``: the frozen structs (:class:`RunConfig`, :class:`Timeouts`,
  :class:`Seeds`, :class:`Generation`); ``choices``: the named values;
* ``arguments``: the flags; ``yaml_file``: the file and its keys (``env``:
  ``${VAR}`` substitution; ``datasets``: the ``datasets:`` entries);
* ``coerce``, ``endpoints``: the value converters;
* ``rules``: the cross-field rules, one function each;
* ``resolve``: merge -> convert -> rules -> :class:`RunConfig`.

Names follow the reference client, mlcommons/endpoints, so that its command
lines and YAML files carry over (reference-client.md §3.1-3.2).  Values as
in the reference: ``--duration`` and ``min_duration_ms`` are milliseconds
unless suffixed (``600s``, ``10m``, ``1h``, ``500ms``); ``--load-pattern``
takes ``max_throughput`` (alias ``offline``), ``concurrency`` or
``poisson``; ``--api-type`` takes ``openai`` or ``openai-completions``
(``openai_completions`` in YAML); ``streaming: auto`` means on except for
the Offline burst.  Seeds (spec §2.5) default to MLPerf seed set A.

Every mistake raises :class:`mlpe_fast.errors.UsageError` with one line that
names the flag or key and the bad value; the CLI exits with status 2.
"""

from __future__ import annotations

from ..engine.client import REDACTED
from ..load.dataset import DatasetSpec
from .arguments import add_run_arguments
from .benchmark import (
    BENCHMARK_MODELS,
    SEED_SET_A_MODEL,
    SEED_SET_A_SAMPLE_INDEX,
    SEED_SET_A_SCHEDULER,
)
from .choices import ApiType, LoadPattern, Mode, OfflineKind, ReceiveStamps, Streaming
from .datasets import dataset_from_yaml
from .resolve import given_fields, resolve
from .rules import API_KEY_ENV
from .run_config import WARMUP_DATASET_PASS, Generation, RunConfig, Seeds, Timeouts
from .yaml_file import load_yaml

__all__ = (
    "API_KEY_ENV",
    "BENCHMARK_MODELS",
    "REDACTED",
    "SEED_SET_A_MODEL",
    "SEED_SET_A_SAMPLE_INDEX",
    "SEED_SET_A_SCHEDULER",
    "WARMUP_DATASET_PASS",
    "ApiType",
    "DatasetSpec",
    "Generation",
    "LoadPattern",
    "Mode",
    "OfflineKind",
    "ReceiveStamps",
    "RunConfig",
    "Seeds",
    "Streaming",
    "Timeouts",
    "add_run_arguments",
    "dataset_from_yaml",
    "given_fields",
    "load_yaml",
    "resolve",
)
