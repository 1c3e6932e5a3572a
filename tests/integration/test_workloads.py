"""Issue 22's workloads end to end through ``mlpe-fast run``: synthetic
prompts of exact token counts, ``--header`` and ``--extra-body`` on every
request, the prefix cache reset before each point, and the tokenizer
compared with the endpoint's ``/tokenize`` -- against the simulated
endpoint, which records every request it is sent (``recording_sim.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from mlpe_fast.cli import main
from mlpe_fast.config import SEED_SET_A_SAMPLE_INDEX
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.load.dataset import parse_dataset_arg
from mlpe_fast.load.synthetic import synthetic_prompts
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from tests.bpe_tokenizer import train_bpe
from tests.data_files import AGENTIC_CODING, CHAR_CHAT_TOKENIZER, DUMMY_1K
from tests.integration.recording_sim import SCRIPT, read_requests

FAST = ("--ttft-ms", "1", "--itl-ms", "0.1", "--seed", "5")
COMPLETIONS = ("/v1/chat/completions", "/v1/completions")


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2,000-token byte-level BPE trained on the reference's prompts:
    merges enough for prompts of words to be re-tokenized for real."""
    rows = [json.loads(line) for line in DUMMY_1K.read_text().splitlines()]
    out = tmp_path_factory.mktemp("bpe")
    return train_bpe(out, [r["text_input"] for r in rows], 2000, CHAR_CHAT_TOKENIZER)


@pytest.fixture(scope="module")
def endpoint(bpe: Path) -> Iterator[str]:
    """One recording endpoint for the module: HTTP/1.1 and h2c, ``/tokenize``
    with the client's own tokenizer."""
    with simulated_endpoint((*FAST, "--http2", "--tokenizer", str(bpe)), script=SCRIPT) as url:
        yield url


def _run(url: str, test: str, *flags: str, model: str = "m") -> list[str]:
    return [
        *("run", "--no-progress", "--endpoints", url, "--model", model),
        *("--header", f"X-Test:{test}", "--max-output-tokens", "8"),
        *flags,
    ]


def _completions(url: str, test: str) -> list[dict[str, Any]]:
    return [r for r in read_requests(url, test) if r["path"] in COMPLETIONS]


def _encode(tokenizer_dir: Path, text: str) -> list[int]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


# --header and --extra-body ----------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["h1", "h2"])
def test_headers_and_the_extra_body_reach_every_request(
    endpoint: str, protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    test = f"headers-{protocol}"
    flags = [
        *("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=8", "--num-samples", "8"),
        *("--tokenizer", DEMO_TOKENIZER, "--concurrency", "4"),
        *("--header", "X-Team: perf", "--header", "User-Agent:bench/1"),
        *("--extra-body", '{"ignore_eos": true, "min_tokens": 8, "vendor": {"k": [1]}}'),
        *(["--http2"] if protocol == "h2" else []),
    ]
    assert main(_run(endpoint, test, *flags)) == 0, capsys.readouterr().err
    seen = read_requests(endpoint, test)
    completions = [r for r in seen if r["path"] == "/v1/chat/completions"]
    assert len(completions) == 8 and {r["protocol"] for r in completions} == {protocol}
    for request in completions:
        fields = [(n.lower(), v) for n, v in request["headers"]]
        assert ("x-team", "perf") in fields
        # the given User-Agent replaces the client's own, not beside it
        assert [v for n, v in fields if n == "user-agent"] == ["bench/1"]
        body = request["body"]
        assert (body["ignore_eos"], body["min_tokens"], body["vendor"]) == (True, 8, {"k": [1]})
        assert body["max_completion_tokens"] == 8 and body["stream"] is True
    # the calls before the load carry them too: the tokenizer check's; and the
    # server-metrics scrapes beside it, on HTTP/1.1 connections of their own
    assert {r["path"] for r in seen} == {"/v1/chat/completions", "/tokenize", "/metrics"}
    for request in (r for r in seen if r["path"] == "/metrics"):
        assert ["x-team", "perf"] in request["headers"] and request["protocol"] == "h1"


@pytest.mark.pipeline
def test_an_agentic_run_s_turns_carry_them_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "model_params": {"name": "m", "tokenizer_name": str(CHAR_CHAT_TOKENIZER)},
        "datasets": [
            {
                "path": str(AGENTIC_CODING),
                "agentic_inference": {"inject_tool_delay": False, "num_trajectories_to_issue": 1},
            }
        ],
        "settings": {"load_pattern": {"type": "agentic_inference", "target_concurrency": 1}},
        "mlpe_fast": {"headers": {"X-Test": "agentic"}, "extra_body": {"ignore_eos": True}},
    }
    path = tmp_path / "agentic.yaml"
    path.write_text(yaml.safe_dump(config))
    with simulated_endpoint(FAST, script=SCRIPT) as url:
        args = ["run", "--no-progress", "-c", str(path), "--endpoints", url]
        assert main([*args, "--max-output-tokens", "4"]) == 0, capsys.readouterr().err
        turns = _completions(url, "agentic")
    assert len(turns) > 2 and all(t["body"]["ignore_eos"] is True for t in turns)
    # the turn's own routing header beside the run's
    assert all("x-session-id" in {n.lower() for n, _ in t["headers"]} for t in turns)


# Synthetic prompts -------------------------------------------------------------------------


@pytest.mark.parametrize("salt", [False, True])
def test_synthetic_ids_are_exact_and_share_their_prefix(
    endpoint: str, bpe: Path, tmp_path: Path, salt: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    test = f"synthetic-ids-{salt}"
    folder = tmp_path / "run"
    spec = "synthetic:isl=uniform(40,60),osl=hist(3:1,5:1),prefix=16,samples=12,seed=7"
    flags = [
        *("--dataset", spec, "--api-type", "openai-completions", "--tokenizer", str(bpe)),
        *("--num-samples", "12", "--report-dir", str(folder), "--concurrency", "3"),
        "--salt" if salt else "--no-salt",
    ]
    assert main(_run(endpoint, test, *flags)) == 0, capsys.readouterr().err
    bodies = [r["body"] for r in _completions(endpoint, test)]
    assert len(bodies) == 12 and {b["max_tokens"] for b in bodies} == {3, 5}
    prompts = [b["prompt"] for b in bodies]
    prefix = prompts[0][:16]
    assert all(p[:16] == prefix for p in prompts)
    issued = [
        json.loads(line)["data"][2]
        for line in (folder / "events.jsonl").read_text().splitlines()
        if '"sample.issued"' in line
    ]
    assert sorted(issued) == sorted(prompts)  # what was counted is what was sent
    if salt:
        # spec §2.5: the salt between the shared part and each query's own
        salted = [p[16:] for p in prompts]
        assert len({tuple(s[:4]) for s in salted}) == 12
        return
    # no salt: every prompt is its drawn length exactly, and re-tokenizes to itself
    assert all(40 <= len(p) <= 60 for p in prompts)
    assert len({tuple(p) for p in prompts}) == 12
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bpe / "tokenizer.json"))
    for ids in prompts:
        assert _encode(bpe, tokenizer.decode(ids)) == ids
    summary = json.loads((folder / "performance" / "result_summary.json").read_bytes())
    lengths = summary["input_sequence_lengths"]
    assert lengths["total"] == sum(map(len, prompts))
    calls = json.loads((folder / "server_calls.json").read_bytes())
    assert calls["tokenizer_check"]["checked"] > 0 and calls["tokenizer_check"]["differ"] == 0


def test_synthetic_text_on_the_chat_route_is_exact_per_message(
    endpoint: str, bpe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test = "synthetic-text"
    spec = "synthetic:isl=normal(48,6),osl=4,prefix=20,samples=10"
    flags = ["--dataset", spec, "--tokenizer", str(bpe), "--num-samples", "10"]
    assert main(_run(endpoint, test, *flags)) == 0, capsys.readouterr().err
    bodies = [r["body"] for r in _completions(endpoint, test)]
    assert len(bodies) == 10
    systems = {b["messages"][0]["content"] for b in bodies}
    assert len(systems) == 1 and len(_encode(bpe, systems.pop())) == 20
    built = parse_dataset_arg(spec).synthetic
    assert built is not None
    seed = SEED_SET_A_SAMPLE_INDEX  # the run's sample-index seed, by default
    prompts = synthetic_prompts(
        msgspec.structs.replace(built, tokenizer=str(bpe), form="text", osl_cap=8, seed=seed)
    )
    lengths = {text: len(ids) - 20 for text, ids in zip(prompts.texts, prompts.ids, strict=True)}
    for body in bodies:
        system, user = body["messages"]
        assert (system["role"], user["role"]) == ("system", "user")
        salt, _, own = user["content"].partition("] ")
        assert salt.startswith("[") and len(salt) == 17  # salted, after the shared prefix
        # the user's own text: exactly its drawn length, alone, as a template wraps it
        assert len(_encode(bpe, own)) == lengths[own] and body["max_completion_tokens"] == 4


def test_a_yaml_synthetic_dataset_runs_again_from_its_config_yaml(
    endpoint: str, bpe: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "model_params": {"name": "yaml", "tokenizer_name": str(bpe), "max_new_tokens": 6},
        "endpoint_config": {"endpoints": [endpoint], "api_type": "openai_completions"},
        "datasets": [
            {"name": "rand", "type": "performance", "synthetic": {"isl": 24, "osl": "fixed(6)"}}
        ],
        "settings": {"runtime": {"n_samples_to_issue": 5}},
        "mlpe_fast": {"salt": False, "headers": {"X-Test": "yaml-1"}},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    first = tmp_path / "first"
    assert main(["run", "--no-progress", "-c", str(path), "--report-dir", str(first)]) == 0
    written = yaml.safe_load((first / "config.yaml").read_text())
    block = written["datasets"][0]["synthetic"]
    assert (block["isl"], block["osl"], block["samples"]) == ("fixed(24)", "fixed(6)", 1000)
    assert block["seed"] == written["settings"]["runtime"]["dataloader_random_seed"]
    again = ["run", "--no-progress", "-c", str(first / "config.yaml"), "--header", "X-Test:yaml-2"]
    assert main([*again, "--report-dir", str(tmp_path / "again")]) == 0, capsys.readouterr().err
    sent = [[r["body"]["prompt"] for r in _completions(endpoint, t)] for t in ("yaml-1", "yaml-2")]
    assert sent[0] == sent[1] and len(sent[0]) == 5
    assert {len(p) for p in sent[0]} == {24}


def test_two_engines_build_and_send_the_same_synthetic_prompts(
    endpoint: str, bpe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # each engine process builds the dataset itself, from the spec it is sent
    spec = "synthetic:isl=uniform(20,30),osl=3,samples=8,seed=4"
    flags = [
        *("--dataset", spec, "--api-type", "openai-completions", "--tokenizer", str(bpe)),
        *("--num-samples", "8", "--no-salt", "--concurrency", "2", "--tokenizer-check", "off"),
        *("--engines", "2", "--min-streams-per-engine", "1", "--max-output-tokens", "3"),
    ]
    assert main(_run(endpoint, "engines", *flags)) == 0, capsys.readouterr().err
    sent = sorted(r["body"]["prompt"] for r in _completions(endpoint, "engines"))
    built = parse_dataset_arg(spec).synthetic
    assert built is not None
    built = msgspec.structs.replace(built, tokenizer=str(bpe), form="ids", osl_cap=3)
    assert sent == sorted(list(ids) for ids in synthetic_prompts(built).ids)


# The prefix cache reset ------------------------------------------------------------------


def test_the_prefix_cache_is_reset_before_each_point_of_a_curve_and_its_warmup(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test, route = "reset-curve", "/reset_prefix_cache"
    report = tmp_path / "curve"
    flags = [
        *("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=4", "--num-samples", "4"),
        *("--tokenizer", DEMO_TOKENIZER, "--concurrency", "1,2", "--offline", "none"),
        *("--warmup-requests", "2", "--reset-prefix-cache", "vllm", "--report-dir", str(report)),
    ]
    assert main(_run(endpoint, test, *flags)) == 0
    err = capsys.readouterr().err
    assert err.count(f"mlpe-fast: prefix cache reset: POST {endpoint}{route} 200") == 2
    seen = [
        r["path"]
        for r in read_requests(endpoint, test)
        if r["path"] not in ("/tokenize", "/metrics")  # the metrics scraped beside the load
    ]
    # each point: its reset, then its 2 warmup and 4 measured queries
    assert seen == [route, *["/v1/chat/completions"] * 6] * 2
    for name in ("r1", "r2"):
        calls = json.loads((report / name / "server_calls.json").read_bytes())
        (reset,) = calls["prefix_cache_reset"]
        assert (reset["url"], reset["status"], reset["ok"]) == (f"{endpoint}{route}", 200, True)
        assert reset["took_ms"] >= 0 and reset["at"].endswith("+00:00")


def test_sglang_s_cache_is_flushed_on_every_endpoint_of_a_point(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test = "reset-sglang"
    folder = tmp_path / "run"
    with simulated_endpoint(FAST, script=SCRIPT) as other:
        flags = [
            *("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=4"),
            *("--num-samples", "4", "--tokenizer", DEMO_TOKENIZER, "--warmup-requests", "1"),
            *("--reset-prefix-cache", "sglang", "--report-dir", str(folder)),
        ]
        args = _run(endpoint, test, *flags)
        args[args.index(endpoint) + 1 : args.index(endpoint) + 1] = [other]  # two replicas
        assert main(args) == 0, capsys.readouterr().err
        for url in (endpoint, other):
            paths = [r["path"] for r in read_requests(url, test) if r["path"] != "/tokenize"]
            assert paths[0] == "/flush_cache" and "/flush_cache" not in paths[1:]
    resets = json.loads((folder / "server_calls.json").read_bytes())["prefix_cache_reset"]
    assert [r["url"] for r in resets] == [f"{endpoint}/flush_cache", f"{other}/flush_cache"]
    assert resets[0]["message"].startswith("Cache flushed.")


def test_a_reset_that_fails_stops_the_run_before_any_load(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test = "reset-fails"
    flags = [
        *("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=4", "--num-samples", "4"),
        *("--tokenizer", DEMO_TOKENIZER, "--reset-prefix-cache", "/no/such/route"),
        *("--report-dir", str(tmp_path / "run"), "--tokenizer-check", "off"),
    ]
    assert main(_run(endpoint, test, *flags)) == 2
    (line,) = capsys.readouterr().err.splitlines()[-1:]
    assert line.startswith(
        f"mlpe-fast: --reset-prefix-cache: POST {endpoint}/no/such/route answered 404"
    )
    assert "the point was not measured" in line
    assert [r["path"] for r in read_requests(endpoint, test)] == ["/no/such/route"]
    assert not (tmp_path / "run").exists()


# The tokenizer check --------------------------------------------------------------------


def test_a_tokenizer_the_endpoint_disagrees_with_is_warned_about(
    bpe: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    server = (*FAST, "--tokenizer", str(bpe), "--tokenize-skew", "3")
    with simulated_endpoint(server) as url:
        flags = [
            *("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=40"),
            *("--tokenizer", str(bpe), "--num-samples", "4", "--report-dir", str(folder)),
        ]
        assert main(_run(url, "skew", *flags)) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "tokenizer check" in line]
    assert warnings == [
        f"mlpe-fast: warning: tokenizer check: 32 of 32 prompt texts tokenize differently on "
        f"{url}/tokenize; largest difference 3 tokens (sample "
        + warnings[0].split("(sample ", 1)[1].split(")", 1)[0]
        + "): the client's tokenizer may not be the model's, and so its token counts (ISL, OSL, "
        "tokens/s); check --tokenizer"
    ]
    check = json.loads((folder / "server_calls.json").read_bytes())["tokenizer_check"]
    assert (check["checked"], check["differ"], check["largest_difference"]["tokens"]) == (32, 32, 3)
    largest = check["largest_difference"]
    assert largest["theirs"] == largest["ours"] + 3


def test_an_endpoint_without_tokenize_is_skipped_or_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    flags = [
        *("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=4", "--num-samples", "2"),
        *("--tokenizer", DEMO_TOKENIZER, "--server-metrics", "off"),
    ]
    with simulated_endpoint(FAST) as url:
        assert main(_run(url, "auto", *flags, "--report-dir", str(folder))) == 0
        # most servers offer no /tokenize: nothing said, nothing recorded
        assert "tokenizer" not in capsys.readouterr().err
        assert not (folder / "server_calls.json").exists()
        assert main(_run(url, "on", *flags, "--tokenizer-check", "on")) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"mlpe-fast: --tokenizer-check: POST {url}/tokenize answered 404: the endpoint offers no "
        "/tokenize; use --tokenizer-check auto or off"
    )


def test_the_calls_before_the_load_go_over_https_with_the_run_s_ca_bundle(
    tls_certs: Any, bpe: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    server = (*FAST, "--tokenizer", str(bpe))
    server += ("--tls-cert", str(tls_certs.cert_file), "--tls-key", str(tls_certs.key_file))
    with simulated_endpoint(server) as url:
        assert url.startswith("https://")
        flags = [
            *("--dataset", f"{DUMMY_1K},parser.prompt=text_input,samples=4", "--num-samples", "2"),
            *("--tokenizer", str(bpe), "--ca-bundle", str(tls_certs.ca_file)),
            *("--reset-prefix-cache", "vllm", "--report-dir", str(folder)),
        ]
        assert main(_run(url, "tls", *flags)) == 0, capsys.readouterr().err
    calls = json.loads((folder / "server_calls.json").read_bytes())
    check = calls["tokenizer_check"]
    assert (check["checked"], check["differ"]) == (4, 0)
    assert calls["prefix_cache_reset"][0]["url"] == f"{url}/reset_prefix_cache"


# Mistakes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--header", "NoColon"], "--header: 'NoColon' is not NAME:VALUE"),
        (["--header", "Host:x"], "--header: header Host is set by the client"),
        (["--header", "X-A:1", "--header", "x-a:2"], "--header: header x-a is given twice"),
        (["--header", "Bad Name:1"], "--header: 'Bad Name' is not a header name"),
        (
            ["--header", "Authorization:Bearer x", "--api-key", "k"],
            "--header: Authorization and an API key",
        ),
        (["--extra-body", "[1]"], "--extra-body: expected a JSON object, got a list"),
        (["--extra-body", "{nope"], "--extra-body: not JSON"),
        (["--extra-body", '{"model": "x"}'], "--extra-body: 'model' is mlpe-fast's to set"),
        (["--extra-body", '{"max_tokens": 9}'], "the output cap is --max-output-tokens"),
        (["--reset-prefix-cache", "redis"], "--reset-prefix-cache: 'redis' is not one of"),
        (["--tokenizer-check", "maybe"], "--tokenizer-check: 'maybe' is not one of"),
        (["--dataset", "synthetic:osl=4"], "a synthetic dataset needs isl=DIST"),
        (["--dataset", "synthetic:isl=normal(10),osl=4"], "normal(10) is not normal(MEAN,STDDEV)"),
        (["--dataset", "synthetic:isl=8,osl=4,prefix=8"], "not above prefix=8"),
        (["--dataset", "synthetic:isl=8,osl=4096"], "above the output cap 1024"),
        (["--dataset", "synthetic:isl=8,osl=4,bogus=1"], "unknown synthetic option 'bogus'"),
        (["--dataset", "acc:synthetic:isl=8,osl=4"], "has no ground truth to score"),
        (["--dataset", "synthetic:isl=hist(@/no/such/file),osl=4"], "histogram file /no/such"),
        (["--dataset", "synthetic:isl=uniform(9,3),osl=4"], "uniform(MIN,MAX) needs integers"),
        (
            ["--dataset", "synthetic:isl=hist(8:0),osl=4"],
            "the weight of '8:0' must be a positive number",
        ),
        (
            ["--dataset", "synthetic:isl=8,osl=4", "--load-pattern", "agentic_inference"],
            "agentic_inference: runs recorded trajectories, not a synthetic dataset",
        ),
    ],
)
def test_mistakes_are_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["run", "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tokenizer", "/no/such/dir"], "--tokenizer /no/such/dir: no tokenizer.json there"),
        (["--tokenize-skew", "2"], "tokenize_skew must be >= 0, and needs a tokenizer"),
    ],
)
def test_the_simulated_endpoint_s_tokenizer_flags_are_checked_before_it_listens(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["serve", "--port", "0", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
