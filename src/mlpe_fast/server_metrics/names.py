"""What the servers call the figures a point's server metrics show: one
map per server family, from its Prometheus names to mlpe-fast's own.

mlpe-fast's names (the keys of ``values`` in ``server_metrics.jsonl``):

* ``running``, ``waiting`` -- requests being generated, and queued for it
  (gauges);
* ``kv_cache_usage`` -- the share of the KV cache in use, 0 to 1 (gauge);
* ``prefix_cache_queries``, ``prefix_cache_hits`` -- tokens looked up in
  the prefix cache and tokens found there (counters: their deltas over a
  point give its hit rate), or ``prefix_cache_hit_rate`` where a server
  says only the rate (a gauge, 0 to 1);
* ``spec_draft_tokens``, ``spec_accepted_tokens`` -- speculative
  decoding's proposed and accepted tokens (counters), or
  ``spec_accept_length`` (SGLang: mean accepted tokens per step, a gauge)
  and ``spec_acceptance_rate`` (a gauge, 0 to 1);
* ``preemptions`` -- requests preempted (vLLM) or retracted (SGLang) to
  free KV cache (a counter).

The names, checked against each server's documentation:

* vLLM (``docs/design/metrics.md``, V1 engine): ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (older:
  ``vllm:gpu_cache_usage_perc``; a fraction despite the name),
  ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` (older:
  ``vllm:gpu_prefix_cache_*``), ``vllm:spec_decode_num_draft_tokens`` /
  ``vllm:spec_decode_num_accepted_tokens``, ``vllm:num_preemptions``;
  counters as ``NAME_total`` (prometheus_client's exposition) or bare.
* SGLang (``--enable-metrics``): ``sglang:num_running_reqs``,
  ``sglang:num_queue_reqs``, ``sglang:token_usage``,
  ``sglang:cache_hit_rate``, ``sglang:spec_accept_length``,
  ``sglang:num_retracted_reqs``.
* Dynamo (the frontend's and workers' ``dynamo_*`` catalog):
  ``dynamo_frontend_inflight_requests``, ``dynamo_frontend_queued_requests``,
  ``dynamo_component_kvstats_gpu_cache_usage_percent``,
  ``dynamo_component_kvstats_gpu_prefix_cache_hit_rate``.  TensorRT-LLM's
  own ``trtllm_*`` metrics (passed through by Dynamo, or
  ``trtllm-serve``'s ``/prometheus/metrics``) are request counters and
  latency histograms: kept raw, none of them is one of the above.

A series of several label sets (one per model or engine) is summed for a
gauge of requests or a counter, and its largest value taken for a share
(``kv_cache_usage``, rates); where a page has an old name beside its new
one (vLLM's ``gpu_`` names during their deprecation), the first is read.
Every series, mapped or not, is kept raw
beside the mapped values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .prometheus import Page

__all__ = ("FAMILIES", "MAPPED", "SHARES", "family_of", "map_page")

#: mlpe-fast's names, in the order files and reports show them.
MAPPED = (
    "running",
    "waiting",
    "kv_cache_usage",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prefix_cache_hit_rate",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "spec_accept_length",
    "spec_acceptance_rate",
    "preemptions",
)
#: The mapped values that are shares or means: the largest of several
#: series, not their sum.
SHARES = frozenset(
    {"kv_cache_usage", "prefix_cache_hit_rate", "spec_accept_length", "spec_acceptance_rate"}
)

_VLLM: Mapping[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
    "vllm:prefix_cache_queries": "prefix_cache_queries",
    "vllm:prefix_cache_hits": "prefix_cache_hits",
    "vllm:gpu_prefix_cache_queries": "prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits": "prefix_cache_hits",
    "vllm:spec_decode_num_draft_tokens": "spec_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "spec_accepted_tokens",
    "vllm:num_preemptions": "preemptions",
}
_SGLANG: Mapping[str, str] = {
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "waiting",
    "sglang:token_usage": "kv_cache_usage",
    "sglang:cache_hit_rate": "prefix_cache_hit_rate",
    "sglang:spec_accept_length": "spec_accept_length",
    "sglang:num_retracted_reqs": "preemptions",
}
_DYNAMO: Mapping[str, str] = {
    "dynamo_frontend_inflight_requests": "running",
    "dynamo_frontend_queued_requests": "waiting",
    "dynamo_component_kvstats_gpu_cache_usage_percent": "kv_cache_usage",
    "dynamo_component_kvstats_gpu_prefix_cache_hit_rate": "prefix_cache_hit_rate",
}
#: Each family's map, by the prefix its names start with.
FAMILIES: Mapping[str, Mapping[str, str]] = {
    "vllm": _VLLM,
    "sglang": _SGLANG,
    "dynamo": _DYNAMO,
}
_PREFIXES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("dynamo_", "dynamo"))
_ALL: dict[str, str] = {
    name: mapped for names in FAMILIES.values() for name, mapped in names.items()
}
for _name, _mapped in list(_ALL.items()):  # a counter's exposition name too
    _ALL.setdefault(_name + "_total", _mapped)


def family_of(page: Page) -> str:
    """The server family the page's names are of ("vllm", "sglang",
    "dynamo", or "other" when none of their names is there)."""
    counts = dict.fromkeys(FAMILIES, 0)
    for sample in page.samples:
        for prefix, family in _PREFIXES:
            if sample.name.startswith(prefix):
                counts[family] += 1
                break
    best = max(counts, key=counts.__getitem__)
    return best if counts[best] else "other"


def map_page(page: Page) -> dict[str, float]:
    """The mapped values a page holds (module docstring); a name the page
    lacks is absent, and so is a value that is not finite."""
    values: dict[str, float] = {}
    source: dict[str, str] = {}  # the first name each value came from
    for sample in page.samples:
        mapped = _ALL.get(sample.name)
        value = sample.value
        if mapped is None or not math.isfinite(value):
            continue
        first = source.setdefault(mapped, sample.name)
        if first != sample.name:
            continue  # an old name beside the new (vLLM's gpu_ prefix): counted once
        if mapped in values:
            seen = values[mapped]
            values[mapped] = max(seen, value) if mapped in SHARES else seen + value
        else:
            values[mapped] = value
    return {name: values[name] for name in MAPPED if name in values}
