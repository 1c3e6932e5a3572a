"""The run folder in the reference client's layout (spec §3.1).

* :mod:`.events` -- ``events.jsonl`` and ``sample_idx_map.json``;
* :mod:`.sample_idx_map` -- ``sample_idx_map.json`` spooled to disk as it grows;
* :mod:`.config_yaml` -- ``config.yaml``.
"""

from __future__ import annotations

from .config_yaml import config_to_yaml_dict, write_config_yaml
from .events import EventRecord, EventsWriter, read_events, write_sample_idx_map

__all__ = (
    "EventRecord",
    "EventsWriter",
    "config_to_yaml_dict",
    "read_events",
    "write_config_yaml",
    "write_sample_idx_map",
)
