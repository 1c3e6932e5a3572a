"""The input side of a run: datasets, sample order, salt and request bodies.

* :mod:`.dataset` -- the ``--dataset`` syntax, file loaders, column mapping;
* :mod:`.salt` -- the per-query salt (spec §2.5);
* :mod:`.token_salt` -- where that salt goes in a token-id prompt;
* :mod:`.requests` -- pre-encoded bodies, salt splicing, sample order;
* :mod:`.scheduler` -- when to issue: closed loop, Offline, Poisson;
* :mod:`.agentic`, :mod:`.agentic_scheduler` -- agentic trajectories, their
  replayed requests and salt, and the ``agentic_inference`` load pattern.
"""

from __future__ import annotations

from .dataset import Dataset, DatasetSpec, Sample, load_dataset, parse_dataset_arg
from .requests import (
    BodyTemplate,
    IssuedRequest,
    Prompt,
    RequestFeed,
    build_body_templates,
    default_route,
    sequential_order,
    shuffled_order,
)
from .salt import Salter, default_salt_seed, salt_prompt

__all__ = (
    "BodyTemplate",
    "Dataset",
    "DatasetSpec",
    "IssuedRequest",
    "Prompt",
    "RequestFeed",
    "Salter",
    "Sample",
    "build_body_templates",
    "default_route",
    "default_salt_seed",
    "load_dataset",
    "parse_dataset_arg",
    "salt_prompt",
    "sequential_order",
    "shuffled_order",
)
