"""``--api-type sglang`` end to end: ``mlpe-fast run`` sends a pre-tokenized
dataset's ids to the simulated endpoint's ``POST /generate`` (SGLang's
native route), reads its cumulative text back as deltas, and measures them
as it measures the OpenAI routes; a server that streams deltas instead
(``--incremental-streaming-output``) fails every request, counted and
explained; what cannot be sent is refused in one line, status 2, before any
load."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.errors import NOT_CUMULATIVE_HINT
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from tests.integration.tally_sim import SCRIPT, read_tally, read_token_prompts
from tests.integration.test_token_prompts import (
    _split_at_salt,
    harmony_tokenizer,  # noqa: F401 -- the fixture: a small BPE with Harmony's template
)

FAST = ("--ttft-ms", "1", "--itl-ms", "0.2", "--seed", "3", "--http2")
IDS = [[3, 1, 4], [1, 5, 9, 2, 6], [5, 3]]
# /generate carries no model: the tally counts its requests under ""
GENERATE = ("", "/generate")


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(FAST, script=SCRIPT) as url:
        yield url


@pytest.fixture(scope="module")
def incremental() -> Iterator[str]:
    with simulated_endpoint((*FAST, "--incremental-streaming-output")) as url:
        yield url


@pytest.fixture
def token_dataset(tmp_path: Path) -> str:
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps({"text": "not sent", "ids": ids}) + "\n" for ids in IDS))
    return f"{path},parser.input_tokens=ids"


def _run(url: str, dataset: str, *flags: str) -> list[str]:
    return [
        *("run", "--no-progress", "--endpoints", url, "--model", "gpt-oss"),
        *("--tokenizer", DEMO_TOKENIZER, "--dataset", dataset, "--max-output-tokens", "4"),
        *("--api-type", "sglang", *flags),
    ]


def _generate_counts(url: str) -> Counter[tuple[bool, str]]:
    """The /generate requests so far, by (stream, protocol)."""
    return Counter(
        {
            (stream, proto): n
            for (model, route, stream, proto), n in read_tally(url, "").items()
            if (model, route) == GENERATE
        }
    )


def _summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "performance" / "result_summary.json").read_bytes())  # type: ignore[no-any-return]


def _issued(folder: Path) -> list[list[Any]]:
    return [
        json.loads(line)["data"]
        for line in (folder / "events.jsonl").read_text().splitlines()
        if '"sample.issued"' in line
    ]


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--http2",),
        ("--streaming", "off"),
        # the dialect travels in the run's config to the engine processes
        ("--engines", "2", "--min-streams-per-engine", "1", "--concurrency", "2"),
    ],
    ids=["h1", "h2", "not-streamed", "engines"],
)
def test_token_ids_go_to_generate_and_the_text_is_measured(
    endpoint: str,
    token_dataset: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
) -> None:
    before = _generate_counts(endpoint)
    folder = tmp_path / "run"
    args = _run(endpoint, token_dataset, "--no-salt", "--num-samples", "6", *flags)
    status = main([*args, "--report-dir", str(folder)])
    out = capsys.readouterr()
    assert status == 0, out.err
    streamed = "--streaming" not in flags
    protocol = "h2" if "--http2" in flags else "h1"
    assert _generate_counts(endpoint) - before == Counter({(streamed, protocol): 6})

    issued = _issued(folder)
    assert sorted(tuple(data[2]) for data in issued) == sorted(map(tuple, IDS * 2))
    summary = _summary(folder)
    assert summary["n_samples_completed"] == 6 and summary["n_samples_failed"] == 0
    isl, osl = summary["input_sequence_lengths"], summary["output_sequence_lengths"]
    # ISL: the ids sent; OSL: the run's tokenizer over the text (one
    # character, one token), the deltas of the cumulative text joined
    assert (isl["total"], isl["min"], isl["max"]) == (2 * sum(map(len, IDS)), 2, 5)
    assert (osl["total"], osl["min"], osl["max"]) == (24, 4, 4)
    # the endpoint's own counts (meta_info) beside ours: they agree
    check = summary["usage_cross_check"]
    assert (check["responses"], check["server_output_tokens"]) == (6, 24)
    assert check["output_relative_difference"] == 0 and check["input_relative_difference"] == 0
    if streamed:  # a whole body has no first token of its own (and a busy
        # machine may read a stream's events in one read: TPOT 0 is fair)
        assert summary["ttft"]["min"] > 0 and summary["tpot"]["min"] >= 0
    if "--engines" in flags:
        assert summary["mlpe_fast"]["self_audit"]["engines"] == 2
    assert "finish reasons   length 6" in out.out
    assert "api_type: sglang" in (folder / "config.yaml").read_text()


def test_the_salt_goes_into_the_ids_and_every_query_is_distinct(
    endpoint: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tokenizers import Tokenizer

    harmony: Path = request.getfixturevalue("harmony_tokenizer")
    tokenizer = Tokenizer.from_file(str(harmony / "tokenizer.json"))
    texts = [
        f"<|start|>system<|message|>You are helpful.<|end|><|start|>user<|message|>{q}<|end|>"
        "<|start|>assistant"
        for q in ("What is hex?", "What is 0a1b?")
    ]
    samples = [tuple(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts]
    path = tmp_path / "harmony.jsonl"
    path.write_text("".join(json.dumps({"ids": list(ids)}) + "\n" for ids in samples))
    folder = tmp_path / "run"
    already = len(read_token_prompts(endpoint, ""))
    args = [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "gpt-oss"),
        *("--tokenizer", str(harmony), "--dataset", f"{path},parser.input_tokens=ids"),
        *("--max-output-tokens", "4", "--api-type", "sglang", "--num-samples", "6"),
        *("--warmup-requests", "2", "--report-dir", str(folder)),
    ]
    assert main(args) == 0, capsys.readouterr().err
    received = read_token_prompts(endpoint, "")[already:]
    assert len(received) == 8  # 2 warmup + 6 measured, as input_ids
    marker = tuple(tokenizer.encode("<|start|>user<|message|>", add_special_tokens=False).ids)
    salts = set()
    for sent in received:
        (sample,) = [s for s in samples if _split_at_salt(s, sent, marker) is not None]
        salt_ids = _split_at_salt(sample, sent, marker)
        assert salt_ids is not None
        salts.add(tokenizer.decode(list(salt_ids), skip_special_tokens=False))
    assert len(salts) == 8 and all(len(s) == 19 and s[0] == "[" for s in salts)
    assert sorted(tuple(data[2]) for data in _issued(folder)) == sorted(received[2:])
    assert _summary(folder)["input_sequence_lengths"]["total"] == sum(map(len, received[2:]))


def test_a_server_that_streams_deltas_fails_every_request_counted_and_explained(
    incremental: str, token_dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    args = _run(incremental, token_dataset, "--no-salt", "--num-samples", "4")
    assert main([*args, "--report-dir", str(folder)]) == 4  # nothing succeeded
    err = capsys.readouterr().err
    message = (
        "SGLang event text parts from the text streamed before it at byte 0: " + NOT_CUMULATIVE_HINT
    )
    assert f"mlpe-fast: no request succeeded: {message}" in err
    own = _summary(folder)["mlpe_fast"]
    assert own["errors"] == {"TextNotCumulative": 4}
    assert own["error_examples"] == {"TextNotCumulative": message}


def test_a_broken_event_between_good_ones_loses_no_text(
    token_dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the invalid-utf8 fault slips in an event of the text so far plus two
    # bytes that are no UTF-8: counted, and the next event's text covers it
    folder = tmp_path / "run"
    with simulated_endpoint((*FAST, "--fault", "invalid-utf8")) as url:
        args = _run(url, token_dataset, "--no-salt", "--num-samples", "3")
        assert main([*args, "--report-dir", str(folder)]) == 0, capsys.readouterr().err
    summary = _summary(folder)
    assert summary["mlpe_fast"]["chunk_errors"] == 3
    assert summary["output_sequence_lengths"]["total"] == 12


def test_the_yaml_file_s_api_type_sglang(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the reference's own keys (examples/04_GPTOSS120B_Example's
    # sglang_gptoss_120b_example.yaml, trimmed)
    data = tmp_path / "perf.jsonl"
    data.write_text("".join(json.dumps({"input_tokens": ids}) + "\n" for ids in IDS))
    config = {
        "name": "gpt-oss-120b-benchmark",
        "type": "online",
        "model_params": {
            "name": "openai/gpt-oss-120b",
            "temperature": 1.0,
            "max_new_tokens": 4,
            "top_k": -1,
            "top_p": 1.0,
            "streaming": "on",
        },
        "datasets": [
            {
                "name": "perf-test",
                "type": "performance",
                "path": str(data),
                "parser": {"input_tokens": "input_tokens"},
            }
        ],
        "settings": {
            "runtime": {"n_samples_to_issue": 3},
            "load_pattern": {"type": "concurrency", "target_concurrency": 2},
        },
        "endpoint_config": {"endpoints": [endpoint], "api_type": "sglang"},
        "mlpe_fast": {"salt": False},
    }
    yaml_path = tmp_path / "sglang.yaml"
    yaml_path.write_text(json.dumps(config))
    before = _generate_counts(endpoint)
    folder = tmp_path / "run"
    flags = ("--tokenizer", DEMO_TOKENIZER, "--report-dir", str(folder))
    status = main(["run", "--no-progress", "-c", str(yaml_path), *flags])
    assert status == 0, capsys.readouterr().err
    assert _generate_counts(endpoint) - before == Counter({(True, "h1"): 3})
    assert _summary(folder)["output_sequence_lengths"]["total"] == 12
    assert "api_type: sglang" in (folder / "config.yaml").read_text()


@pytest.mark.parametrize(
    ("dataset", "flags", "message"),
    [
        (
            "text",
            (),
            "mlpe-fast: --dataset prompts: --api-type sglang sends token ids to /generate "
            "(input_ids, as the reference); a text dataset has none: give its ids column with "
            "parser.input_tokens=COL, encode it in Harmony with the gpt-oss tokenizer (--harmony, "
            "docs/running.md), or use --api-type openai",
        ),
        (
            "tokens",
            ("--api-type", "openai"),
            "mlpe-fast: --endpoints names the route /generate, but the API type openai sends to "
            "/v1/chat/completions: add --api-type sglang, or give the base URL only",
        ),
    ],
    ids=["a text dataset", "its route with another API type"],
)
def test_what_cannot_be_sent_is_one_line_and_status_2_before_any_load(
    endpoint: str,
    token_dataset: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    dataset: str,
    flags: tuple[str, ...],
    message: str,
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    chosen = str(prompts) if dataset == "text" else token_dataset
    before = _generate_counts(endpoint)
    url = endpoint if dataset == "text" else endpoint + "/generate"
    assert main([*_run(url, chosen, "--no-salt", "--num-samples", "2"), *flags]) == 2
    assert capsys.readouterr().err.splitlines() == [message]
    assert _generate_counts(endpoint) == before


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
def test_the_client_api_reads_sglang_s_text_with_its_dialect(endpoint: str, http2: bool) -> None:
    import asyncio

    from mlpe_fast.engine import Client

    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 5}, "stream": True}

    async def ask(dialect: str) -> Any:
        async with Client(endpoint, dialect=dialect, http2=http2) as client:
            return await client.request(body, path="/generate")

    record = asyncio.run(ask("sglang"))
    assert record.ok and len(record.response.content) == 5
    assert record.response.usage == {"prompt_tokens": 2, "completion_tokens": 5}
    # read as OpenAI chunks, SGLang's objects hold no answer at all
    assert asyncio.run(ask("openai")).error_class == "EmptyAnswer"


def test_an_unknown_dialect_is_a_client_config_error() -> None:
    from mlpe_fast.engine import Client, ClientConfigError

    with pytest.raises(ClientConfigError, match="dialect must be one of openai, sglang"):
        Client("http://127.0.0.1:1", dialect="tgi")


def test_a_synthetic_dataset_goes_as_ids_to_generate(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Synthetic prompts are ids on /generate as on /v1/completions: exact
    by construction, their ISL the number of ids sent."""
    folder = tmp_path / "run"
    before = sum(_generate_counts(endpoint).values())
    argv = _run(endpoint, "synthetic:isl=12,osl=3,samples=6,seed=5", "--no-salt")
    assert main([*argv, "--num-samples", "6", "--report-dir", str(folder)]) == 0, (
        capsys.readouterr().err
    )
    assert sum(_generate_counts(endpoint).values()) == before + 6
    summary = _summary(folder)
    assert summary["input_sequence_lengths"]["total"] == 6 * 12
