"""``GET /metrics`` of the simulated endpoint: a Prometheus text page
(exposition format 0.0.4) in vLLM's names, or SGLang's, read from the
server's own state at the moment it is asked, so that a client's scraper
can be checked against what the server was really doing.

What the page says, in vLLM's names (SGLang's in brackets):

* ``vllm:num_requests_running`` (``sglang:num_running_reqs``): response
  jobs begun and not ended -- every request being answered, since the
  simulated endpoint has no scheduler limit;
* ``vllm:num_requests_waiting`` (``sglang:num_queue_reqs``): requests read
  and waiting behind another response on their HTTP/1.1 connection
  (pipelined);
* ``vllm:kv_cache_usage_perc`` (``sglang:token_usage``): the running
  requests' prompt and generated tokens over ``SimConfig.kv_cache_tokens``,
  at most 1;
* ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``
  (``sglang:cache_hit_rate``): every prompt token is a query and none a
  hit: the simulated endpoint has no prefix cache;
* ``vllm:num_preemptions_total`` (``sglang:num_retracted_reqs``): 0, it
  never preempts;
* ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:request_success_total`` (SGLang: ``prompt_tokens_total``,
  ``generation_tokens_total``, ``num_requests_total``) and a histogram of
  nothing (``vllm:e2e_request_latency_seconds``, its buckets empty), so
  the page has the shape of a real one.

The page counts as a request in the server's statistics, as every route does.
"""

from __future__ import annotations

from typing import Any

from ._state import ServerState

__all__ = ("CONTENT_TYPE", "metrics_page", "track_job")

#: The exposition format's content type.
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

_BUCKETS = ("0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "5.0", "10.0", "+Inf")


def track_job(state: ServerState, job: Any) -> None:
    """Notes a response job begun; the ended ones are pruned once the set
    doubles, so a server never scraped holds no more than that."""
    jobs = state.jobs
    jobs.add(job)
    if len(jobs) >= state.jobs_pruned_at:
        state.jobs = {j for j in jobs if _live(j)}
        state.jobs_pruned_at = max(1024, 2 * len(state.jobs))


def _live(job: Any) -> bool:
    return not job.cancelled and not job.out.gone and job.out.answering(job)


def metrics_page(state: ServerState) -> bytes:
    """The page, now (module docstring)."""
    state.jobs = live = {j for j in state.jobs if _live(j)}
    in_cache = sum(j.gen.prompt_tokens + getattr(j, "i", 0) for j in live)
    usage = min(1.0, in_cache / state.config.kv_cache_tokens)
    stats = state.stats
    model = state.model.replace("\\", "\\\\").replace('"', '\\"')
    if state.config.metrics == "sglang":
        return _sglang(state, len(live), usage, model)
    label = f'{{model_name="{model}"}}'
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{label} {len(live)}",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{label} {state.queued}",
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{label} {usage!r}",
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{label} {state.prompt_tokens}.0",
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{label} 0.0",
        "# HELP vllm:num_preemptions_total Cumulative number of preemptions.",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total{label} 0.0",
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{label} {state.prompt_tokens}.0",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{label} {stats.tokens}.0",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{finished_reason="length",model_name="{model}"}} '
        f"{stats.responses}.0",
        "# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency.",
        "# TYPE vllm:e2e_request_latency_seconds histogram",
        *(
            f'vllm:e2e_request_latency_seconds_bucket{{le="{le}",model_name="{model}"}} 0.0'
            for le in _BUCKETS
        ),
        f"vllm:e2e_request_latency_seconds_count{label} 0.0",
        f"vllm:e2e_request_latency_seconds_sum{label} 0.0",
    ]
    return ("\n".join(lines) + "\n").encode()


def _sglang(state: ServerState, running: int, usage: float, model: str) -> bytes:
    label = f'{{model_name="{model}"}}'
    stats = state.stats
    lines = [
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{label} {running}.0",
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.",
        "# TYPE sglang:num_queue_reqs gauge",
        f"sglang:num_queue_reqs{label} {state.queued}.0",
        "# HELP sglang:token_usage The token usage.",
        "# TYPE sglang:token_usage gauge",
        f"sglang:token_usage{label} {usage!r}",
        "# HELP sglang:cache_hit_rate The prefix cache hit rate.",
        "# TYPE sglang:cache_hit_rate gauge",
        f"sglang:cache_hit_rate{label} 0.0",
        "# HELP sglang:num_retracted_reqs The number of retracted requests.",
        "# TYPE sglang:num_retracted_reqs gauge",
        f"sglang:num_retracted_reqs{label} 0.0",
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE sglang:prompt_tokens_total counter",
        f"sglang:prompt_tokens_total{label} {state.prompt_tokens}.0",
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
        "# TYPE sglang:generation_tokens_total counter",
        f"sglang:generation_tokens_total{label} {stats.tokens}.0",
        "# HELP sglang:num_requests_total Number of requests processed.",
        "# TYPE sglang:num_requests_total counter",
        f"sglang:num_requests_total{label} {stats.responses}.0",
    ]
    return ("\n".join(lines) + "\n").encode()
