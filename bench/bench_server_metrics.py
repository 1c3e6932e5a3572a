"""What reading the server's ``/metrics`` costs (``server_metrics/``).

1. Reading one page: a realistic vLLM page (27 families, 6 histograms of
   two label sets, 395 lines) read by ``parse_page`` + ``map_page``, beside
   ``prometheus_client``'s text parser (when installed) and a naive
   ``split()`` parser that reads samples only (no escapes, no labels).
2. The load's figures with scraping on (every 0.1 s, ten times the
   default rate) and off, against the simulated endpoint, each point a
   round: TTFT and TPOT medians, the client's CPU per request, loop lag.
3. The same against two replicas (two simulated endpoints): scraping off,
   one page (the first replica's, given as a URL) and both pages (``auto``:
   a scraper thread each), with how far apart the two pages' scrapes of a
   tick went out.
4. What a scraper thread per page costs the event loop: the lateness of a
   1 ms timer on the loop while 0, 1 and 2 scrapers (one grid, every 0.1 s)
   read the vLLM-shaped page above from two ``python -m http.server``
   processes, alone on the loop (no load to blur it).

    pytest bench/bench_server_metrics.py -o python_files='bench_*.py' -s
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.data_files import CHAR_TOKENIZER, DUMMY_1K

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.server_metrics.names import map_page
from mlpe_fast.server_metrics.prometheus import parse_page
from mlpe_fast.server_metrics.scraper import Scraper

_GAUGES = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:engine_sleep_state",
    "process_resident_memory_bytes",
    "process_open_fds",
]
_COUNTERS = [
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_drafts_total",
    "vllm:request_success_total",
    "process_cpu_seconds_total",
    "python_gc_collections_total",
    "http_requests_total",
    "vllm:corrupted_requests_total",
    "vllm:external_prefix_cache_queries_total",
    "vllm:external_prefix_cache_hits_total",
]
_HISTOGRAMS = [
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
]
_BUCKETS = [
    f"{b:g}"
    for b in (
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1,
        2.5,
        5,
        7.5,
        10,
        20,
        40,
        80,
    )
] + ["+Inf"]


def vllm_page() -> str:
    """A page shaped as vLLM's (names from its metrics docs, values made up)."""
    lines = []
    label = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    for k, name in enumerate(_GAUGES):
        lines += [f"# HELP {name} A gauge.", f"# TYPE {name} gauge", f"{name}{{{label}}} {k * 1.5}"]
    for k, name in enumerate(_COUNTERS):
        lines += [f"# HELP {name} A counter.", f"# TYPE {name} counter"]
        lines.append(f"{name}{{{label}}} {k * 1000.0 + 0.5}")
        lines.append(f"{name.removesuffix('_total')}_created{{{label}}} 1.7e9")
    for name in _HISTOGRAMS:
        lines += [f"# HELP {name} A histogram.", f"# TYPE {name} histogram"]
        for reason in ("stop", "length"):
            labels = f'{label},finished_reason="{reason}"'
            for i, le in enumerate(_BUCKETS):
                lines.append(f'{name}_bucket{{{labels},le="{le}"}} {i * 10.0}')
            lines.append(f"{name}_sum{{{labels}}} 123.25")
            lines.append(f"{name}_count{{{labels}}} 190.0")
    return "\n".join(lines) + "\n"


PAGE = vllm_page()
PAGE_BYTES = PAGE.encode()
LINES = PAGE.count("\n")


def naive(text: str) -> dict[str, float]:
    """Samples only: ``name{labels} value`` split at the last space."""
    out = {}
    for line in text.split("\n"):
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_the_page_is_realistic() -> None:
    page = parse_page(PAGE_BYTES)
    assert 300 <= LINES <= 500 and page.bad_lines == 0
    assert map_page(page)["running"] == 0.0


@pytest.mark.benchmark(group="server metrics: one vLLM page")
def test_parse_page_and_map(bench: Callable[..., Any]) -> None:
    bench(lambda: map_page(parse_page(PAGE_BYTES)), events=LINES)


@pytest.mark.benchmark(group="server metrics: one vLLM page")
def test_baseline_naive_split(bench: Callable[..., Any]) -> None:
    bench(lambda: naive(PAGE_BYTES.decode()), events=LINES)


@pytest.mark.skipif(
    importlib.util.find_spec("prometheus_client") is None, reason="prometheus_client missing"
)
@pytest.mark.benchmark(group="server metrics: one vLLM page")
def test_baseline_prometheus_client(bench: Callable[..., Any]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    bench(lambda: list(text_string_to_metric_families(PAGE_BYTES.decode())), events=LINES)


# --- beside the load ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(("--ttft-ms", "10", "--itl-ms", "1")) as url:
        yield url


def _point(url: str, folder: Path, scraping: bool) -> dict[str, Any]:
    flags = ["--server-metrics-interval", "0.1"] if scraping else ["--server-metrics", "off"]
    argv = [
        *("run", "--no-progress", "--endpoints", url, "--model", "m", "--tokenizer"),
        str(CHAR_TOKENIZER),
        *("--dataset", f"{DUMMY_1K},parser.prompt=text_input", "--num-samples", "384"),
        *("--concurrency", "32", "--max-output-tokens", "64", "--report-dir", str(folder)),
        *("--tokenizer-check", "off", *flags),
    ]
    assert main(argv) == 0
    summary: dict[str, Any] = json.loads(
        (folder / "performance" / "result_summary.json").read_bytes()
    )
    return summary


def _medians(info: dict[str, Any], last: list[dict[str, Any]]) -> dict[str, Any]:
    """The middle of three rounds' figures, into the benchmark's extra info."""
    audit = [s["mlpe_fast"]["self_audit"] for s in last]
    info["ttft_p50_ms"] = sorted(s["ttft"]["percentiles"]["50.0"] / 1e6 for s in last)[1]
    info["tpot_p50_ms"] = sorted(s["tpot"]["percentiles"]["50.0"] / 1e6 for s in last)[1]
    info["cpu_us_per_request"] = sorted(a["cpu_us_per_request"] for a in audit)[1]
    info["loop_lag_p99_ms"] = sorted(a["loop_lag_p99_ms"] for a in audit)[1]
    info["scrapes"] = sorted(a["metrics_scrapes"] for a in audit)[1]
    info["parse_cpu_ms"] = sorted(a["metrics_parse_cpu_ms"] for a in audit)[1]
    return info


@pytest.mark.parametrize("scraping", [False, True], ids=["off", "on"])
@pytest.mark.benchmark(group="server metrics: a point beside the load")
def test_a_point_with_scraping(
    benchmark: Any, endpoint: str, tmp_path: Path, scraping: bool
) -> None:
    seen: list[dict[str, Any]] = []

    def one() -> None:
        seen.append(_point(endpoint, tmp_path / f"p{len(seen)}", scraping))

    benchmark.pedantic(one, rounds=3, iterations=1, warmup_rounds=1)
    last = seen[-3:]
    info = _medians(benchmark.extra_info, last)
    print(f"\nscraping {'on' if scraping else 'off'}: {info}")


# --- beside the load of two replicas ------------------------------------------------------


@pytest.fixture(scope="module")
def replicas() -> Iterator[tuple[str, str]]:
    flags = ("--ttft-ms", "10", "--itl-ms", "1")
    with simulated_endpoint(flags) as a, simulated_endpoint(flags) as b:
        yield a, b


def _replicas_point(urls: tuple[str, str], folder: Path, pages: str) -> dict[str, Any]:
    where = {"off": "off", "one": f"{urls[0]}/metrics", "both": "auto"}[pages]
    argv = [
        *("run", "--no-progress", "--endpoints", *urls, "--model", "m", "--tokenizer"),
        str(CHAR_TOKENIZER),
        *("--dataset", f"{DUMMY_1K},parser.prompt=text_input", "--num-samples", "384"),
        *("--concurrency", "32", "--max-output-tokens", "64", "--report-dir", str(folder)),
        *("--tokenizer-check", "off", "--server-metrics", where),
        *("--server-metrics-interval", "0.1"),
    ]
    assert main(argv) == 0
    summary: dict[str, Any] = json.loads(
        (folder / "performance" / "result_summary.json").read_bytes()
    )
    if pages == "both":  # the two pages' scrapes of each tick: how far apart they went out
        text = (folder / "server_metrics.jsonl").read_text()
        lines = [json.loads(line) for line in text.splitlines()]
        sent = [{r["tick"]: r["t_ns"] for r in lines if r["endpoint"] == k} for k in (0, 1)]
        gaps = sorted(abs(sent[0][t] - sent[1][t]) / 1e6 for t in set(sent[0]) & set(sent[1]))
        summary["tick_gap_ms_median"] = gaps[len(gaps) // 2]
        summary["tick_gap_ms_max"] = gaps[-1]
    return summary


@pytest.mark.parametrize("pages", ["off", "one", "both"])
@pytest.mark.benchmark(group="server metrics: a point of two replicas")
def test_a_point_of_two_replicas(
    benchmark: Any, replicas: tuple[str, str], tmp_path: Path, pages: str
) -> None:
    seen: list[dict[str, Any]] = []

    def one() -> None:
        seen.append(_replicas_point(replicas, tmp_path / f"p{len(seen)}", pages))

    benchmark.pedantic(one, rounds=3, iterations=1, warmup_rounds=1)
    last = seen[-3:]
    info = _medians(benchmark.extra_info, last)
    if pages == "both":
        info["tick_gap_ms_median"] = sorted(s["tick_gap_ms_median"] for s in last)[1]
        info["tick_gap_ms_max"] = max(s["tick_gap_ms_max"] for s in last)
    print(f"\n{pages} pages of two replicas: {info}")


# --- a scraper thread per page, beside the event loop -------------------------------------


@pytest.fixture(scope="module")
def page_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    root = tmp_path_factory.mktemp("pages")
    (root / "metrics").write_bytes(PAGE_BYTES)
    procs, urls = [], []
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "0"],
                cwd=root,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            port = int(proc.stdout.readline().split(" port ")[1].split()[0])
            urls.append(f"http://127.0.0.1:{port}/metrics")
        yield urls
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


async def _timer_lateness(urls: list[str], seconds: float) -> tuple[list[float], int]:
    """A 1 ms timer's lateness (ms) while ``urls`` are scraped on one grid."""
    loop = asyncio.get_running_loop()
    origin = loop.time()
    scrapers = [
        Scraper(url, interval_s=0.1, endpoints=(k,), origin=origin) for k, url in enumerate(urls)
    ]
    for scraper in scrapers:
        await scraper.__aenter__()
    late = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        await asyncio.sleep(0.001)
        late.append((time.monotonic() - start - 0.001) * 1e3)
    await asyncio.gather(*(scraper.stop() for scraper in scrapers))
    return sorted(late), sum(scraper.result().costs.scrapes for scraper in scrapers)


@pytest.mark.parametrize("pages", [0, 1, 2])
@pytest.mark.benchmark(group="server metrics: the loop beside a scraper per page")
def test_the_loop_beside_a_scraper_per_page(
    benchmark: Any, page_servers: list[str], pages: int
) -> None:
    seen: list[tuple[list[float], int]] = []
    benchmark.pedantic(
        lambda: seen.append(asyncio.run(_timer_lateness(page_servers[:pages], 2.0))),
        rounds=3,
        iterations=1,
        warmup_rounds=1,
    )
    last = seen[-3:]
    info = benchmark.extra_info
    info["timer_late_p50_ms"] = sorted(late[len(late) // 2] for late, _ in last)[1]
    info["timer_late_p99_ms"] = sorted(late[int(len(late) * 0.99)] for late, _ in last)[1]
    info["timer_late_max_ms"] = sorted(late[-1] for late, _ in last)[1]
    info["scrapes"] = sorted(n for _, n in last)[1]
    print(f"\n{pages} pages scraped beside the loop: {info}")
