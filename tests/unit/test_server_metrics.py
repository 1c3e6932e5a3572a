"""The server-metrics reader: the Prometheus text format (0.0.4), the
servers' names, and what a point's scrapes sum up to."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mlpe_fast.server_metrics.names import family_of, map_page
from mlpe_fast.server_metrics.prometheus import (
    PrometheusError,
    family_name,
    parse_page,
    series_key,
)
from mlpe_fast.server_metrics.scraper import Scraped, ServerMetricsRun, metrics_url
from mlpe_fast.server_metrics.summary import (
    audit_figures,
    server_metrics_line,
    server_metrics_summary,
)

# --- the text format ----------------------------------------------------------------------

PAGE = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# a comment, then a blank line

# HELP e2e Histogram of latency.\\nSecond line, a backslash \\\\ too.
# TYPE e2e histogram
e2e_bucket{le="0.5"} 1
e2e_bucket{le="+Inf"} 4 1700000000000
e2e_sum 2.25
e2e_count 4
# TYPE q summary
q{quantile="0.9"} NaN
q_sum +Inf
q_count -Inf
odd{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",brace="}"} 1e-3
spaced { a = "1" , } -2
"""


def test_a_page_s_samples_types_and_help() -> None:
    page = parse_page(PAGE)
    assert page.bad_lines == 0 and page.first_error is None
    assert page.types == {
        "vllm:num_requests_running": "gauge",
        "e2e": "histogram",
        "q": "summary",
    }
    assert page.helps["e2e"] == "Histogram of latency.\nSecond line, a backslash \\ too."
    by_name = {(s.name, s.labels): s for s in page.samples}
    running = by_name[("vllm:num_requests_running", (("engine", "0"), ("model_name", "m")))]
    assert running.value == 3.0 and running.timestamp_ms is None
    inf_bucket = by_name[("e2e_bucket", (("le", "+Inf"),))]
    assert (inf_bucket.value, inf_bucket.timestamp_ms) == (4.0, 1700000000000)
    assert math.isnan(by_name[("q", (("quantile", "0.9"),))].value)
    assert by_name[("q_sum", ())].value == math.inf
    assert by_name[("q_count", ())].value == -math.inf
    (odd,) = [s for s in page.samples if s.name == "odd"]
    assert dict(odd.labels) == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb", "brace": "}"}
    assert odd.value == 0.001
    (spaced,) = [s for s in page.samples if s.name == "spaced"]
    assert (spaced.labels, spaced.value) == ((("a", "1"),), -2.0)


def test_a_histogram_s_and_a_summary_s_samples_belong_to_their_family() -> None:
    page = parse_page(PAGE)
    assert [family_name(s.name, page.types) for s in page.samples[1:5]] == ["e2e"] * 4
    assert family_name("q_sum", page.types) == "q"
    # a _count whose base is no histogram is a name of its own
    assert family_name("vllm:num_requests_running_count", page.types) == (
        "vllm:num_requests_running_count"
    )


def test_a_series_key_escapes_its_labels_again_in_sorted_order() -> None:
    (odd,) = [s for s in parse_page(PAGE).samples if s.name == "odd"]
    assert series_key(odd) == ('odd{brace="}",nl="a\\nb",path="C:\\\\dir",quote="say \\"hi\\""}')
    # and the key reads back as the same series
    (again,) = parse_page(series_key(odd) + " 1").samples
    assert again.labels == tuple(sorted(odd.labels))


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("foo2", "not NAME[{LABELS}] VALUE"),
        ("9lives 1", "not NAME[{LABELS}] VALUE"),
        ("x{a=1} 1", "bad labels"),
        ('x{a="1" b="2"} 1', "bad labels"),
        ('x{a="1",a="2"} 1', "label a given twice"),
        ('x{a="\\q"} 1', "bad escape"),
        ("x one", "bad value 'one'"),
        ("x 1_000", "bad value '1_000'"),
        ("x nan5", "bad value"),
        ("x 1 12.5", "bad timestamp '12.5'"),
        ("x 1 2 3", "not NAME[{LABELS}] VALUE"),
        ("# TYPE x gauges", "unknown metric type 'gauges'"),
        ("# TYPE 1x gauge", "bad metric name"),
    ],
)
def test_a_bad_line_is_skipped_counted_and_explained(line: str, why: str) -> None:
    page = parse_page(f"good 1\n{line}\nalso_good 2\n")
    assert [s.name for s in page.samples] == ["good", "also_good"]
    assert page.bad_lines == 1
    assert page.first_error is not None
    assert page.first_error.startswith("line 2: ") and why in page.first_error


def test_a_second_type_line_is_a_bad_line_and_the_first_stands() -> None:
    page = parse_page("# TYPE x gauge\n# TYPE x counter\nx 1\n")
    assert page.types == {"x": "gauge"} and page.bad_lines == 1


def test_crlf_lines_and_an_unterminated_last_line_are_read() -> None:
    page = parse_page(b"a 1\r\nb 2")
    assert [(s.name, s.value) for s in page.samples] == [("a", 1.0), ("b", 2.0)]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"<html><body>Not Found</body></html>\n", "1 bad lines, the first line 1"),
        (b"\x89PNG\r\n\x1a\n", "not UTF-8"),
        (b"a 1\x00\n", "NUL byte"),
    ],
)
def test_a_page_with_nothing_readable_is_one_clear_error(data: bytes, why: str) -> None:
    with pytest.raises(PrometheusError, match="not a Prometheus text page") as caught:
        parse_page(data)
    assert why in str(caught.value)


def test_an_empty_page_is_a_page_of_no_samples() -> None:
    page = parse_page(b"# nothing yet\n")
    assert page.samples == [] and page.bad_lines == 0


# --- the servers' names --------------------------------------------------------------------

VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 3
vllm:num_requests_running{engine="1"} 4
vllm:num_requests_waiting{engine="0"} 1
vllm:kv_cache_usage_perc{engine="0"} 0.25
vllm:kv_cache_usage_perc{engine="1"} 0.5
vllm:gpu_cache_usage_perc{engine="0"} 0.9
vllm:prefix_cache_queries_total 1000
vllm:prefix_cache_hits_total 250
vllm:spec_decode_num_draft_tokens_total 300
vllm:spec_decode_num_accepted_tokens_total 210
vllm:num_preemptions_total 2
vllm:unmapped_thing 7
"""


def test_vllm_names_are_mapped_summed_over_engines_and_shares_their_largest() -> None:
    page = parse_page(VLLM)
    assert family_of(page) == "vllm"
    assert map_page(page) == {
        "running": 7.0,
        "waiting": 1.0,
        "kv_cache_usage": 0.5,  # the largest engine's, and the new name's, not the old one's
        "prefix_cache_queries": 1000.0,
        "prefix_cache_hits": 250.0,
        "spec_draft_tokens": 300.0,
        "spec_accepted_tokens": 210.0,
        "preemptions": 2.0,
    }


def test_sglang_and_dynamo_names_are_mapped() -> None:
    sglang = parse_page(
        "sglang:num_running_reqs 5\nsglang:num_queue_reqs 2\nsglang:token_usage 0.4\n"
        "sglang:cache_hit_rate 0.75\nsglang:spec_accept_length 2.5\n"
        "sglang:num_retracted_reqs 1\n"
    )
    assert family_of(sglang) == "sglang"
    assert map_page(sglang) == {
        "running": 5.0,
        "waiting": 2.0,
        "kv_cache_usage": 0.4,
        "prefix_cache_hit_rate": 0.75,
        "spec_accept_length": 2.5,
        "preemptions": 1.0,
    }
    dynamo = parse_page(
        "dynamo_frontend_inflight_requests 9\ndynamo_frontend_queued_requests 3\n"
        "dynamo_component_kvstats_gpu_cache_usage_percent 0.6\n"
        "dynamo_component_kvstats_gpu_prefix_cache_hit_rate 0.1\ntrtllm_request_success_total 4\n"
    )
    assert family_of(dynamo) == "dynamo"
    assert map_page(dynamo) == {
        "running": 9.0,
        "waiting": 3.0,
        "kv_cache_usage": 0.6,
        "prefix_cache_hit_rate": 0.1,
    }


def test_unknown_names_and_values_that_are_not_finite_map_to_nothing() -> None:
    page = parse_page("process_cpu_seconds_total 3\nvllm:num_requests_running NaN\n")
    assert map_page(page) == {}
    assert family_of(parse_page("process_cpu_seconds_total 3\n")) == "other"


def test_the_scraped_url() -> None:
    assert metrics_url("auto", "http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url("auto", "https://gw.example/team/a") == "https://gw.example/metrics"
    assert metrics_url("off", "http://h:8000") is None
    assert metrics_url("http://h:9090/m", "http://h:8000") == "http://h:9090/m"


# --- the summary ---------------------------------------------------------------------------


def _scrape(t: int, **values: float) -> Scraped:
    return Scraped(t, t, 1_000_000, values)


def test_the_summary_reads_the_window_and_counter_deltas_from_its_baseline() -> None:
    scrapes = [
        _scrape(0, running=0, waiting=0, prefix_cache_queries=100, prefix_cache_hits=10),
        _scrape(5, running=2, waiting=0, prefix_cache_queries=150, prefix_cache_hits=20),
        _scrape(
            10,
            running=4,
            waiting=2,
            kv_cache_usage=0.3,
            prefix_cache_queries=300,
            prefix_cache_hits=60,
            preemptions=1,
            spec_draft_tokens=10,
            spec_accepted_tokens=1,
        ),
        Scraped(15, 15, 2_000_000, {}, "no answer within 1 s"),
        _scrape(
            20,
            running=2,
            waiting=0,
            kv_cache_usage=0.5,
            prefix_cache_queries=550,
            prefix_cache_hits=120,
            preemptions=4,
            spec_draft_tokens=110,
            spec_accepted_tokens=71,
        ),
    ]
    from mlpe_fast.server_metrics.scraper import ScrapeCosts

    run = ServerMetricsRun(
        "http://h/metrics",
        True,
        "vllm",
        scrapes,
        ScrapeCosts(5, 1, 5000, 2_000_000, 6_000_000, 0),
        tracking_start_ns=7,
        interval_s=0.5,
        first_error="no answer within 1 s",
    )
    block = server_metrics_summary(run)
    assert block["scrapes_in_window"] == 2  # the failed one and the warmup's are not in it
    assert block["running"] == {"mean": 3.0, "max": 4.0}
    assert block["waiting"] == {"mean": 1.0, "max": 2.0}
    assert block["kv_cache_usage_max"] == 0.5
    # from the last scrape before the window (t=5) to the last one (t=20)
    assert block["prefix_cache_queries"] == 400.0
    assert block["prefix_cache_hit_rate"] == pytest.approx(100 / 400)
    assert block["preemptions"] is None  # the baseline had none of it
    assert block["spec_acceptance_rate"] is None
    assert (block["scrapes"], block["failures"]) == (5, 1)
    line = server_metrics_line(block)
    assert "5 scrapes every 0.5 s, 1 FAILED" in line and "prefix cache hits 25.0 %" in line
    assert "first failure: no answer within 1 s" in line
    assert audit_figures([run]) == {
        "metrics_scrapes": 5,
        "metrics_scrape_failures": 1,
        "metrics_bytes": 5000,
        "metrics_parse_cpu_ms": 2.0,
        "metrics_scrape_ms_mean": 1.2,
    }


def test_rates_a_server_gives_as_gauges_are_averaged_and_a_counter_that_fell_gives_none() -> None:
    scrapes = [
        _scrape(1, prefix_cache_hit_rate=0.2, spec_accept_length=2.0, preemptions=5),
        _scrape(2, prefix_cache_hit_rate=0.4, spec_accept_length=3.0, preemptions=1),
    ]
    block = server_metrics_summary(ServerMetricsRun("u", True, "sglang", scrapes))
    assert block["prefix_cache_hit_rate"] == pytest.approx(0.3)
    assert block["spec_accept_length_mean"] == 2.5
    assert block["preemptions"] is None  # the server restarted: no figure


def test_a_page_not_offered_is_said_in_the_summary() -> None:
    run = ServerMetricsRun("u", False, note="GET u answered 404")
    block = server_metrics_summary(run)
    assert block == {
        "url": "u",
        "offered": False,
        "interval_s": 1.0,
        "scrapes": 0,
        "failures": 0,
        "note": "GET u answered 404",
    }
    assert server_metrics_line(block) == "server metrics: not offered (GET u answered 404)\n"
    assert audit_figures([run]) == {}


# --- the report's charts -------------------------------------------------------------------


def test_the_report_draws_each_point_with_scrapes_and_a_failed_scrape_is_a_gap(
    tmp_path: Path,
) -> None:
    from mlpe_fast.report.server_metrics import server_metrics_section

    with_file, without = tmp_path / "r1", tmp_path / "r2"
    with_file.mkdir()
    without.mkdir()
    rows = [
        {"t_ns": 0, "values": {"running": 0, "waiting": 0}},
        {"t_ns": 10**9, "values": {"running": 4, "waiting": 1}},
        {"t_ns": 2 * 10**9, "error": "no answer within 1 s"},
        {"t_ns": 3 * 10**9, "values": {"running": 2, "waiting": 0}},
    ]
    text = "\n".join(json.dumps(r) for r in rows) + "\nnot json\n"
    (with_file / "server_metrics.jsonl").write_text(text)
    section = server_metrics_section([("concurrency 1", with_file), ("concurrency 2", without)])
    assert section.count('class="server-metrics"') == 1 and "concurrency 1" in section
    assert "4 scrapes, 1 failed scrapes" in section and "3.0 s" in section
    # two runs of each line around the failed scrape
    assert section.count("<polyline") == 4
    assert server_metrics_section([("concurrency 2", without)]) == ""


# --- several replicas' pages ---------------------------------------------------------------


def _ticked(tick: int, **values: float) -> Scraped:
    return Scraped(100 * tick, 100 * tick, 1_000_000, values, None, tick)


def _replica(endpoint: int, scrapes: list[Scraped], **fields: object) -> ServerMetricsRun:
    from mlpe_fast.server_metrics.scraper import ScrapeCosts

    failures = sum(s.error is not None for s in scrapes)
    fields.setdefault("first_error", next((s.error for s in scrapes if s.error), None))
    costs = ScrapeCosts(len(scrapes), failures, 1000 * len(scrapes), 10**6, 2 * 10**6, 0)
    return ServerMetricsRun(
        f"http://h{endpoint}/metrics",
        True,
        str(fields.pop("family", "vllm")),
        scrapes,
        costs,
        tracking_start_ns=150,  # ticks 0 and 1 are the warmup's
        interval_s=0.1,
        endpoints=(endpoint,),
        **fields,  # type: ignore[arg-type]
    )


def _counters(queries: float, hits: float, preempted: float) -> dict[str, float]:
    return {
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "spec_draft_tokens": queries / 10,
        "spec_accepted_tokens": hits / 10,
        "preemptions": preempted,
    }


def test_replicas_totals_sum_each_tick_and_the_counter_deltas() -> None:
    from mlpe_fast.server_metrics.summary import replicas_summary

    a = _replica(
        0,
        [
            _ticked(1, running=1, waiting=0, kv_cache_usage=0.1, **_counters(100, 0, 0)),
            _ticked(2, running=3, waiting=1, kv_cache_usage=0.2, **_counters(200, 50, 1)),
            _ticked(3, running=1, waiting=0, kv_cache_usage=0.6, **_counters(300, 100, 1)),
            _ticked(4, running=2, waiting=0, kv_cache_usage=0.1, **_counters(400, 150, 2)),
        ],
    )
    b = _replica(
        1,
        [
            _ticked(1, running=0, waiting=0, kv_cache_usage=0.0, **_counters(10, 0, 5)),
            _ticked(2, running=1, waiting=0, kv_cache_usage=0.3, **_counters(40, 0, 5)),
            Scraped(300, 300, 10**6, {}, "no answer within 1 s", 3),  # tick 3: not a round
            _ticked(4, running=3, waiting=2, kv_cache_usage=0.4, **_counters(110, 0, 6)),
        ],
    )
    block = replicas_summary([a, b])
    assert (block["replica_count"], block["replicas_read"], block["offered"]) == (2, 2, True)
    assert (block["scrapes"], block["failures"]) == (8, 1)
    assert block["first_error"] == "endpoint 1: no answer within 1 s"
    assert block["rounds_in_window"] == 2  # ticks 2 and 4: both answered in the window
    # sums per tick: running 3+1=4 and 2+3=5; not the maxima's sum (3+3=6)
    assert block["running"] == {"mean": 4.5, "max": 5.0}
    assert block["waiting"] == {"mean": 1.5, "max": 2.0}
    assert block["kv_cache_usage_max"] == 0.6  # a's, at a tick b did not answer
    # deltas from tick 1 (the last before the window) to each one's last
    assert block["prefix_cache_queries"] == (400 - 100) + (110 - 10)
    assert block["prefix_cache_hit_rate"] == pytest.approx(150 / 400)  # weighted by tokens
    assert block["spec_acceptance_rate"] == pytest.approx(15 / 40)
    assert block["preemptions"] == 2 + 1
    own = block["replicas"]
    assert [r["endpoints"] for r in own] == [[0], [1]]
    assert own[0]["running"] == {"mean": 2.0, "max": 3.0}
    assert own[1]["prefix_cache_hit_rate"] == 0.0 and own[1]["failures"] == 1
    assert audit_figures([a, b]) == {
        "metrics_scrapes": 8,
        "metrics_scrape_failures": 1,
        "metrics_bytes": 8000,
        "metrics_parse_cpu_ms": 2.0,
        "metrics_scrape_ms_mean": 0.5,
    }
    text = server_metrics_line(block)
    lines = text.splitlines()
    assert lines[0].startswith(
        "server metrics (2 replicas, vllm names, 8 scrapes every 0.1 s, 1 FAILED): "
        "running mean 4.5 max 5, waiting mean 1.5 max 2, KV cache max 60.0 %, "
        "prefix cache hits 37.5 %, spec acceptance 37.5 %, preemptions 3"
    )
    assert lines[1].startswith("  endpoint 0 (http://h0/metrics): running mean 2.0 max 3")
    assert lines[2].endswith(", 1 of 4 scrapes FAILED")
    assert lines[3] == "  first failure: endpoint 1: no answer within 1 s"


def test_a_replica_s_missing_counter_leaves_that_total_out_and_one_page_keeps_its_keys() -> None:
    from mlpe_fast.server_metrics.summary import replicas_summary

    vllm = _replica(
        0,
        [
            _ticked(2, running=1, **_counters(0, 0, 0)),
            _ticked(3, running=2, **_counters(100, 40, 1)),
        ],
    )
    sglang = _replica(
        1,
        [
            _ticked(2, running=2, prefix_cache_hit_rate=0.5, preemptions=0),
            _ticked(3, running=2, prefix_cache_hit_rate=0.7, preemptions=2),
        ],
        family="sglang",
    )
    block = replicas_summary([vllm, sglang])
    assert block["family"] == "mixed"
    assert block["running"] == {"mean": 3.5, "max": 4.0}
    # SGLang says a rate, not its counts: no total, each replica its own figure
    assert block["prefix_cache_hit_rate"] is None and block["prefix_cache_queries"] is None
    assert [r["prefix_cache_hit_rate"] for r in block["replicas"]] == [0.4, pytest.approx(0.6)]
    assert block["preemptions"] == 1 + 2
    assert block["kv_cache_usage_max"] is None
    # one page: the one page's block, key for key
    assert replicas_summary([vllm]) == server_metrics_summary(vllm)


def msgspec_replace(run: ServerMetricsRun, scrapes: list[Scraped]) -> ServerMetricsRun:
    import msgspec

    return msgspec.structs.replace(run, scrapes=scrapes)


def test_replicas_not_offered_are_said_and_left_out_of_the_totals() -> None:
    from mlpe_fast.server_metrics.summary import replicas_summary

    read = _replica(0, [_ticked(2, running=2), _ticked(3, running=4)])
    bare = ServerMetricsRun(
        "http://h1/metrics",
        False,
        interval_s=0.1,
        note="GET http://h1/metrics answered 404",
        endpoints=(1,),
    )
    block = replicas_summary([read, bare])
    assert (block["replicas_read"], block["offered"]) == (1, True)
    assert block["running"] == {"mean": 3.0, "max": 4.0} and block["rounds_in_window"] == 2
    lines = server_metrics_line(block).splitlines()
    assert lines[0].startswith("server metrics (2 replicas, 1 not offered, vllm names, 2 scrapes")
    assert lines[2] == (
        "  endpoint 1 (http://h1/metrics): not offered (GET http://h1/metrics answered 404)"
    )
    none = replicas_summary([msgspec_replace(bare, []), bare])
    assert none["offered"] is False and none["note"] == "no page of the 2 replicas is offered"
    assert server_metrics_line(none).splitlines()[0] == (
        "server metrics: not offered by any of the 2 replicas"
    )
    assert audit_figures([bare, bare]) == {}


def test_the_pages_of_several_endpoints() -> None:
    from mlpe_fast.point.server_metrics import MetricsPage, metrics_pages

    endpoints = ["http://h:8000/v1", "http://h:8001", "http://h:8000/team"]
    # auto: a page per origin, of every endpoint on it
    assert metrics_pages("auto", endpoints) == [
        MetricsPage("http://h:8000/metrics", (0, 2)),
        MetricsPage("http://h:8001/metrics", (1,)),
    ]
    assert metrics_pages("off", endpoints) == []
    assert metrics_pages("http://g/m", endpoints) == [MetricsPage("http://g/m", (0, 1, 2))]
    assert metrics_pages("http://a/m,http://b/m", endpoints[:2]) == [
        MetricsPage("http://a/m", (0,)),
        MetricsPage("http://b/m", (1,)),
    ]


def test_server_metrics_takes_a_list_of_urls_from_a_flag_or_yaml() -> None:
    from mlpe_fast.config.given import Given
    from mlpe_fast.config.request_extras import server_metrics
    from mlpe_fast.errors import UsageError

    assert server_metrics(Given(" http://a/m , http://b/m", "--server-metrics")) == (
        "http://a/m,http://b/m"
    )
    assert server_metrics(Given(["http://a/m", "http://b/m"], "mlpe_fast.server_metrics")) == (
        "http://a/m,http://b/m"
    )
    assert server_metrics(Given(["http://a/m"], "mlpe_fast.server_metrics")) == "http://a/m"
    with pytest.raises(UsageError, match="'ftp://b' is not one"):
        server_metrics(Given(["http://a/m", "ftp://b"], "mlpe_fast.server_metrics"))
    with pytest.raises(UsageError, match="expected auto, off or an http"):
        server_metrics(Given([], "mlpe_fast.server_metrics"))


def test_the_report_draws_a_series_of_each_replica(tmp_path: Path) -> None:
    from mlpe_fast.report.server_metrics import REPLICA_COLOURS, server_metrics_section

    rows = [
        {"t_ns": t * 10**8, "endpoint": k, "tick": t, "values": {"running": t + k, "waiting": 0}}
        for t in range(4)
        for k in (0, 1)
    ]
    (tmp_path / "server_metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    section = server_metrics_section([("concurrency 4", tmp_path)])
    assert section.count("<polyline") == 4  # running and waiting of each replica
    for k in (0, 1):
        colour = REPLICA_COLOURS[k]
        assert f'<span style="color:{colour}">endpoint {k} running</span>' in section
        assert f'<span style="color:{colour}">endpoint {k} waiting</span>' in section
    assert section.count('stroke-dasharray="4 3"') == 2  # waiting dashed
    assert "8 scrapes of 2 replicas" in section
