"""``--server-metrics`` with several replicas (``--endpoints A B``), end to
end through ``mlpe-fast run`` against two simulated endpoints, each serving
its own ``/metrics``: both pages scraped on one grid, each replica's block
and their totals, a replica without the page, a URL given for each, and the
mistakes."""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.server_metrics.scraper import Scraped, Scraper
from tests.integration.scripted import read_request, serve
from tests.integration.test_server_metrics_run import DATA, SLOW, _lines, _summary

CONCURRENCY = 4


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[str, str]]:
    with simulated_endpoint(SLOW) as a, simulated_endpoint(SLOW) as b:
        yield a, b


def _run(endpoints: tuple[str, ...], folder: Path, *flags: str, concurrency: int = 4) -> list[str]:
    return [
        *("run", "--no-progress", "--endpoints", *endpoints, "--model", "m", *DATA),
        *("--num-samples", "32", "--concurrency", str(concurrency), "--max-output-tokens", "60"),
        *("--server-metrics-interval", "0.1", "--report-dir", str(folder), "--tokenizer-check"),
        "off",
        *flags,
    ]


def _probes(folder: Path) -> Any:
    return json.loads((folder / "server_calls.json").read_bytes())["server_metrics_probe"]


def test_each_replica_s_page_is_scraped_on_one_grid_and_their_totals_summed(
    pair: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    assert main(_run(pair, folder)) == 0
    out = capsys.readouterr().out
    lines = _lines(folder)
    by_replica = {k: [line for line in lines if line["endpoint"] == k] for k in (0, 1)}
    assert len(lines) == len(by_replica[0]) + len(by_replica[1])
    for k, own in by_replica.items():
        assert len(own) >= 5 and all("error" not in line for line in own)
        assert {line["url"] for line in own} == {f"{pair[k]}/metrics"}
        assert max(line["values"]["running"] for line in own) <= CONCURRENCY
    # one grid: the two pages' scrapes of a tick go out together
    sent = [{line["tick"]: line["t_ns"] for line in by_replica[k]} for k in (0, 1)]
    common = sorted(set(sent[0]) & set(sent[1]))
    assert len(common) >= 4
    gaps_ms = [abs(sent[0][tick] - sent[1][tick]) / 1e6 for tick in common]
    assert statistics.median(gaps_ms) < 20  # the interval is 100 ms
    for own in by_replica.values():
        ticks = [line["tick"] for line in own]
        assert ticks == sorted(set(ticks))  # one scrape a tick at most

    block = _summary(folder)["mlpe_fast"]["server_metrics"]
    assert (block["replica_count"], block["replicas_read"], block["offered"]) == (2, 2, True)
    assert block["family"] == "vllm" and "url" not in block
    assert block["scrapes"] == len(lines) and block["failures"] == 0
    own = block["replicas"]
    assert [b["url"] for b in own] == [f"{url}/metrics" for url in pair]
    assert [b["endpoints"] for b in own] == [[0], [1]]
    assert [b["scrapes"] for b in own] == [len(by_replica[0]), len(by_replica[1])]
    assert block["rounds_in_window"] >= 3
    # the sum of both replicas' readings on each tick: never above the
    # point's concurrency but for a request moving between two scrapes of a tick
    running = block["running"]
    assert running["max"] <= CONCURRENCY + 1 and 2 <= running["mean"] <= CONCURRENCY + 1
    assert max(b["running"]["max"] for b in own) <= running["max"]
    assert block["waiting"] == {"mean": 0.0, "max": 0.0}
    assert block["kv_cache_usage_max"] == max(b["kv_cache_usage_max"] for b in own)
    assert block["prefix_cache_queries"] == sum(b["prefix_cache_queries"] for b in own) > 0
    assert block["prefix_cache_hit_rate"] == 0.0 and block["preemptions"] == 0
    # each replica took a share of the load, so each page counted some of it
    shares = _summary(folder)["mlpe_fast"]["endpoints"]
    assert all(share["issued"] > 0 for share in shares)
    assert all(b["prefix_cache_queries"] > 0 for b in own)

    audit = _summary(folder)["mlpe_fast"]["self_audit"]
    assert audit["metrics_scrapes"] == len(lines) and audit["metrics_scrape_failures"] == 0
    assert audit["metrics_bytes"] > 2000 and audit["metrics_parse_cpu_ms"] > 0
    report = (folder / "report.txt").read_text()
    for text in (out, report):
        assert "server metrics (2 replicas, vllm names" in text
        assert f"  endpoint 0 ({pair[0]}/metrics): running mean" in text
        assert f"  endpoint 1 ({pair[1]}/metrics): running mean" in text
    probes = _probes(folder)
    assert [(p["endpoint"], p["url"], p["ok"]) for p in probes] == [
        (0, f"{pair[0]}/metrics", True),
        (1, f"{pair[1]}/metrics", True),
    ]


def test_a_replica_without_the_page_is_said_once_and_the_other_is_still_read(
    pair: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    with simulated_endpoint((*SLOW, "--metrics-names", "off")) as bare:
        assert main(_run((pair[0], bare), folder)) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "server metrics:" in line]
    assert said == [
        f"mlpe-fast: server metrics: GET {bare}/metrics answered 404: not offered by endpoint "
        f"1 ({bare}); the point is measured without its page, the other replicas' pages are "
        "read (1 of 2) (--server-metrics URL,URL names each replica's page)"
    ]
    lines = _lines(folder)
    assert len(lines) >= 5 and {line["endpoint"] for line in lines} == {0}
    block = _summary(folder)["mlpe_fast"]["server_metrics"]
    assert (block["replica_count"], block["replicas_read"], block["offered"]) == (2, 1, True)
    read, unread = block["replicas"]
    assert read["offered"] and read["scrapes"] == len(lines)
    assert unread == {
        "url": f"{bare}/metrics",
        "offered": False,
        "interval_s": 0.1,
        "scrapes": 0,
        "failures": 0,
        "note": f"GET {bare}/metrics answered 404",
        "endpoints": [1],
    }
    # the totals are of the one replica read
    assert block["running"] == read["running"]
    assert block["prefix_cache_queries"] == read["prefix_cache_queries"]
    report = (folder / "report.txt").read_text()
    assert "server metrics (2 replicas, 1 not offered, vllm names" in report
    assert f"  endpoint 1 ({bare}/metrics): not offered (GET {bare}/metrics answered 404)" in (
        report
    )
    assert [p["ok"] for p in _probes(folder)] == [True, False]
    assert _summary(folder)["n_samples_completed"] == 32


def test_a_url_given_for_each_replica_is_read_as_given(
    pair: tuple[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    # localhost, not the 127.0.0.1 that auto would read: the pages named are the ones read
    pages = [url.replace("127.0.0.1", "localhost") + "/metrics" for url in pair]
    assert pages[0] != f"{pair[0]}/metrics"
    assert main(_run(pair, folder, "--server-metrics", ",".join(pages))) == 0
    lines = _lines(folder)
    assert {(line["endpoint"], line["url"]) for line in lines} == {(0, pages[0]), (1, pages[1])}
    block = _summary(folder)["mlpe_fast"]["server_metrics"]
    assert [b["url"] for b in block["replicas"]] == pages and block["replicas_read"] == 2
    assert block["running"]["max"] <= CONCURRENCY + 1
    assert [p["url"] for p in _probes(folder)] == pages


def test_a_url_of_the_list_that_is_not_there_stops_the_run_before_the_load(
    pair: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    given = f"{pair[0]}/metrics,{pair[1]}/no/metrics"
    assert main(_run(pair, folder, "--server-metrics", given)) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"mlpe-fast: --server-metrics: GET {pair[1]}/no/metrics answered 404; the point was "
        "not measured: give the URL of the server's Prometheus page, or --server-metrics off"
    ]
    assert not folder.exists()


def test_one_url_for_several_replicas_is_the_page_of_them_all(
    pair: tuple[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    assert main(_run(pair, folder, "--server-metrics", f"{pair[1]}/metrics")) == 0
    block = _summary(folder)["mlpe_fast"]["server_metrics"]
    assert block["url"] == f"{pair[1]}/metrics" and "replicas" not in block  # one page's keys
    lines = _lines(folder)
    assert lines and {line["endpoint"] for line in lines} == {0}
    assert isinstance(_probes(folder), dict)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "{a}/metrics,{b}/metrics,{a}/m",
            "mlpe-fast: --server-metrics: 3 pages for 2 endpoints: give one URL per endpoint, "
            "in --endpoints order, or one URL for all",
        ),
        (
            "{a}/metrics,{a}/metrics",
            "mlpe-fast: --server-metrics: {a}/metrics is listed twice: a page per endpoint",
        ),
        (
            "{a}/metrics,metrics",
            "mlpe-fast: --server-metrics: expected a list of http(s):// URLs of /metrics pages, "
            "one per endpoint; 'metrics' is not one",
        ),
    ],
    ids=["three-for-two", "twice", "not-a-url"],
)
def test_list_mistakes_are_one_line_and_status_2(
    pair: tuple[str, str],
    tmp_path: Path,
    value: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = pair
    argv = _run(pair, tmp_path / "run", "--server-metrics", value.format(a=a, b=b))
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [message.format(a=a, b=b)]
    assert not (tmp_path / "run").exists()


@pytest.mark.pipeline
def test_a_curve_s_report_draws_a_series_for_each_replica(
    pair: tuple[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "curve"
    argv = _run(pair, root, "--offline", "none")
    argv[argv.index("--concurrency") + 1] = "2,4"
    assert main(argv) == 0
    for level in (2, 4):
        lines = _lines(root / f"r{level}")
        assert {line["endpoint"] for line in lines} == {0, 1}
    page = (root / "pareto.html").read_text()
    assert page.count('class="server-metrics"') == 2
    assert page.count(">endpoint 0 running</span>") == 2
    assert page.count(">endpoint 1 running</span>") == 2
    assert "scrapes of 2 replicas" in page


class _Page:
    """A keep-alive ``/metrics`` that answers after ``delay_s``, and counts
    the most asks it held at once."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.holding = 0
        self.most_held = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
        while await read_request(reader) is not None:
            self.holding += 1
            self.most_held = max(self.most_held, self.holding)
            await asyncio.sleep(self.delay_s)
            self.holding -= 1
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()


def test_a_slow_page_skips_ticks_and_never_delays_another_s_scrapes() -> None:
    async def main() -> tuple[list[Scraped], list[Scraped], _Page]:
        fast, slow = _Page(0.0), _Page(0.25)
        async with serve(fast, "/metrics") as fast_url, serve(slow, "/metrics") as slow_url:
            origin = asyncio.get_running_loop().time()
            scrapers = [
                Scraper(url, interval_s=0.1, endpoints=(k,), origin=origin)
                for k, url in enumerate((fast_url, slow_url))
            ]
            for scraper in scrapers:
                await scraper.__aenter__()
            await asyncio.sleep(1.25)
            await asyncio.gather(*(scraper.stop() for scraper in scrapers))
        return scrapers[0].result().scrapes, scrapers[1].result().scrapes, slow

    fast, slow, page = asyncio.run(main())
    assert all(s.error is None for s in fast + slow)
    fast_ticks = [s.tick for s in fast]
    slow_ticks = [s.tick for s in slow]
    # the fast page on (nearly) every tick; the slow one skips those its answer ran over
    assert fast_ticks == sorted(set(fast_ticks)) and len(fast_ticks) >= 9
    assert len(set(range(fast_ticks[-1])) - set(fast_ticks)) <= 2  # a busy machine's misses
    assert slow_ticks[0] == 0 and all(b - a >= 3 for a, b in itertools.pairwise(slow_ticks))
    assert page.most_held == 1  # one scrape at a time: never piled up
    # the ticks both answered were sent together
    sent = {s.tick: s.t_ns for s in fast}
    gaps_ms = [abs(sent[s.tick] - s.t_ns) / 1e6 for s in slow if s.tick in sent]
    assert len(gaps_ms) >= 3 and statistics.median(gaps_ms) < 20
