"""The simulated endpoint's oracle mode over loopback, driven the way a run
drives it: bodies built by :mod:`mlpe_fast.load.requests` (salted and not,
chat and completions) and sent by :class:`mlpe_fast.engine.Client`.  What
comes back must be the dataset's reference output, character for character.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.cli import build_parser
from mlpe_fast.engine import Client, RequestRecord
from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import AccuracyConfig, Dataset, DatasetSpec, Sample, load_dataset
from mlpe_fast.load.requests import (
    RequestFeed,
    build_body_templates,
    default_route,
    sequential_order,
)
from mlpe_fast.load.salt import Salter
from mlpe_fast.sim.oracle import (
    MISS_CODE,
    Oracle,
    load_oracle,
    parse_oracle_arg,
)
from mlpe_fast.sim.server import (
    Dist,
    SimConfig,
    SimServer,
    build_arg_parser,
    config_from_args,
)

UNICODE_PROMPT = 'Résumé — 東京 🚀\n\ttab\tand  two  spaces, a "quote" and a \\ \r\nend '
MULTILINE_ANSWER = 'Line one: "quoted", a \\ backslash.\n\nLine three — ünïcödé 🚀 done.\r\n'
ROWS: list[dict[str, Any]] = [
    {"prompt": "Summarize: the cat sat on the mat.", "ground_truth": "A cat sat.\nOn a mat."},
    {"prompt": UNICODE_PROMPT, "ground_truth": MULTILINE_ANSWER},
    # salt-shaped but part of the prompt: must match as is, unsalted
    {"prompt": "[0123456789abcdef] not a salt", "ground_truth": "tricky"},
    {"prompt": "  ", "ground_truth": ""},
]
TOKEN_CHARS = 4


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(msgspec.json.encode(row) + b"\n" for row in rows))
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "data.jsonl", ROWS)


def oracle_config(*flags: str) -> SimConfig:
    """The config ``mlpe-fast serve <flags>`` would serve."""
    return config_from_args(build_arg_parser().parse_args(list(flags)))


async def send_all(
    config: SimConfig, bodies: Sequence[bytes], path: str, **client: Any
) -> list[RequestRecord]:
    async with SimServer(config) as server, Client(server.url, **client) as c:
        return list(await asyncio.gather(*(c.request(body, path=path) for body in bodies)))


def bodies_for(
    dataset: Dataset, api_type: str, *, stream: bool, salt: bool, max_output_tokens: int = 1024
) -> list[bytes]:
    """One request per sample, exactly as a run builds and salts them."""
    templates = build_body_templates(
        dataset,
        model="m",
        api_type=api_type,
        stream=stream,
        max_output_tokens=max_output_tokens,
        salt=salt,
    )
    n = len(dataset)
    feed = RequestFeed(dataset.samples, templates, sequential_order(n), Salter(7) if salt else None)
    bodies = []
    for _ in range(n):
        index, body = feed.next_request()
        assert (body != templates[index].render()) == salt  # a salt was spliced in
        bodies.append(body)
    return bodies


def tokens_of(text: str, chars: int = TOKEN_CHARS) -> int:
    return math.ceil(len(text) / chars)


# --- the answers ----------------------------------------------------------------------


@pytest.mark.parametrize("salt", [False, True], ids=["unsalted", "salted"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("api_type", ["openai", "openai-completions"])
def test_every_answer_is_the_reference_output(
    data: Path, api_type: str, stream: bool, salt: bool
) -> None:
    dataset = load_dataset(DatasetSpec(path=str(data)))
    bodies = bodies_for(dataset, api_type, stream=stream, salt=salt, max_output_tokens=1)
    config = oracle_config("--oracle", str(data), "--ttft-ms", "1", "--itl-ms", "0.05")
    records = asyncio.run(send_all(config, bodies, default_route(api_type)))
    for row, record in zip(ROWS, records, strict=True):
        assert record.ok, record.error_message
        response = record.response
        # max_output_tokens=1 was asked: the whole answer comes all the same
        assert response.content == row["ground_truth"]
        assert response.finish_reason == "stop"
        assert response.usage is not None
        assert response.usage["completion_tokens"] == tokens_of(row["ground_truth"])
        salt_chars = 19 if salt else 0
        assert response.usage["prompt_tokens"] == len(row["prompt"]) + salt_chars


def test_system_prompt_and_multi_turn_messages(tmp_path: Path) -> None:
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "and now? ✓"},
    ]
    messages = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {"messages": turns, "ground_truth": "the last turn's answer"},
            {"messages": [{"role": "user", "content": "one turn"}], "ground_truth": "single"},
        ],
    )
    with_system = write_jsonl(
        tmp_path / "system.jsonl",
        [{"question": "q?", "system_prompt": "You are terse.", "ref": "yes\nno"}],
    )
    for path, spec in ((messages, str(messages)), (with_system, f"{with_system},ground_truth=ref")):
        dataset = load_dataset(DatasetSpec(path=str(path)))
        config = oracle_config("--oracle", spec)
        assert config.oracle is not None
        for salt in (False, True):  # a multi-turn sample salts its first user message
            bodies = bodies_for(dataset, "openai", stream=True, salt=salt)
            records = asyncio.run(send_all(config, bodies, default_route("openai")))
            expected = [config.oracle.answer(_last_user_text(s)) for s in dataset.samples]
            assert [r.response.content for r in records] == expected
    assert expected == ["yes\nno"]


def _last_user_text(sample: Sample) -> str:
    if sample.prompt is not None:
        return sample.prompt
    assert sample.messages is not None
    return str([m for m in sample.messages if m["role"] == "user"][-1]["content"])


def test_stream_is_paced_one_event_per_token(data: Path) -> None:
    dataset = load_dataset(DatasetSpec(path=str(data), samples=2))
    config = oracle_config(
        "--oracle", str(data), "--oracle-token-chars", "3", "--ttft-ms", "5", "--itl-ms", "1"
    )
    bodies = bodies_for(dataset, "openai", stream=True, salt=False)
    records = asyncio.run(send_all(config, bodies, "/v1/chat/completions"))
    for row, record in zip(ROWS[:2], records, strict=True):
        answer = row["ground_truth"]
        n = tokens_of(answer, 3)
        response = record.response
        assert response.content == answer
        assert response.content_events == n
        assert response.usage is not None and response.usage["completion_tokens"] == n
        assert record.ttft_ns is not None and record.ttft_ns >= 5_000_000
        # every deadline counts from the request's receipt, after t_issue
        assert response.t_done is not None
        assert response.t_done - record.t_issue >= 5_000_000 + (n - 1) * 1_000_000


@pytest.mark.parametrize("api_type", ["openai", "openai-completions"])
def test_content_length_framing(data: Path, api_type: str) -> None:
    """The buffered SSE path (``--framing length``) sends the same text."""
    dataset = load_dataset(DatasetSpec(path=str(data)))
    config = oracle_config("--oracle", str(data), "--framing", "length", "--eol", "crlf")
    bodies = bodies_for(dataset, api_type, stream=True, salt=True)
    records = asyncio.run(send_all(config, bodies, default_route(api_type)))
    assert [r.response.content for r in records] == [row["ground_truth"] for row in ROWS]
    assert [r.response.content_events for r in records] == [
        tokens_of(row["ground_truth"]) for row in ROWS
    ]


def test_truncate_honours_max_tokens(data: Path) -> None:
    dataset = load_dataset(DatasetSpec(path=str(data), samples=2))
    config = oracle_config("--oracle", str(data), "--oracle-truncate")
    for max_tokens, finish in ((2, "length"), (1000, "stop")):
        bodies = bodies_for(dataset, "openai", stream=True, salt=True, max_output_tokens=max_tokens)
        records = asyncio.run(send_all(config, bodies, "/v1/chat/completions"))
        for row, record in zip(ROWS[:2], records, strict=True):
            assert record.response.content == row["ground_truth"][: max_tokens * TOKEN_CHARS]
            assert record.response.finish_reason == finish
            usage = record.response.usage
            assert usage is not None
            assert usage["completion_tokens"] == min(max_tokens, tokens_of(row["ground_truth"]))


@pytest.mark.parametrize(("degrade", "keep"), [("half", lambda s: s[: len(s) // 2]), ("5", None)])
def test_degraded_oracle_cuts_every_answer(data: Path, degrade: str, keep: Any) -> None:
    dataset = load_dataset(DatasetSpec(path=str(data)))
    config = oracle_config("--oracle", str(data), "--oracle-degrade", degrade)
    for api_type in ("openai", "openai-completions"):
        bodies = bodies_for(dataset, api_type, stream=True, salt=False)
        records = asyncio.run(send_all(config, bodies, default_route(api_type)))
        got = [r.response.content for r in records]
        expected = [keep(row["ground_truth"]) if keep else row["ground_truth"][:5] for row in ROWS]
        assert got == expected
        assert got[1] != MULTILINE_ANSWER
        assert all(r.response.finish_reason == "stop" for r in records)


def test_pieces_are_the_escaped_runs_of_the_text() -> None:
    """The per-request fast path (byte slices, escapes fixed up) against the
    plain definition: each run of N characters, JSON-encoded."""
    rng = random.Random(5)
    alphabet = 'ab \n\r\t\x00\x1f\x7f"\\/é東🚀\u2028'
    for _ in range(300):
        text = "".join(rng.choices(alphabet, k=rng.randrange(0, 40)))
        if rng.random() < 0.5:
            text = text.encode("ascii", "ignore").decode()
        chars = rng.randrange(1, 6)
        expected = [
            msgspec.json.encode(text[i : i + chars])[1:-1] for i in range(0, len(text), chars)
        ]
        assert Oracle({}, token_chars=chars).pieces(text) == (expected or [b""])


def test_numeric_ground_truth_is_answered_as_text(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "math.jsonl", [{"problem": "2 + 2?", "answer": 4}])
    oracle = load_oracle(parse_oracle_arg(f"{path},ground_truth=answer"))
    assert oracle.answer("2 + 2?") == "4"


# --- what it refuses -------------------------------------------------------------------


def _raw(port: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        response = conn.getresponse()
        status, doc = response.status, json.loads(response.read())
        # the connection survives the error
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        return status, doc
    finally:
        conn.close()


def test_unknown_prompt_is_a_loud_404(data: Path) -> None:
    config = oracle_config("--oracle", str(data))
    near_miss = ROWS[0]["prompt"] + " "  # one trailing space off

    async def main() -> None:
        async with SimServer(config) as server, Client(server.url) as client:
            record = await client.request(
                {"model": "m", "messages": [{"role": "user", "content": near_miss}]}
            )
            assert record.error_class == "HTTPStatusError"
            assert record.response.status == 404
            assert record.response.content == ""
            loop = asyncio.get_running_loop()
            status, doc = await loop.run_in_executor(
                None,
                _raw,
                server.port,
                "/v1/completions",
                {"model": "m", "prompt": "[0123456789abcdef] never seen", "stream": True},
            )
            assert status == 404
            assert doc["error"]["code"] == MISS_CODE
            assert doc["error"]["type"] == "invalid_request_error"
            assert "data.jsonl" in doc["error"]["message"]
            assert "never seen" in doc["error"]["message"]
            status, doc = await loop.run_in_executor(
                None, _raw, server.port, "/v1/completions", {"model": "m", "prompt": [1, 2, 3]}
            )
            assert status == 404
            assert (
                "no sample of data.jsonl has the token ids '[1, 2, 3]'" in doc["error"]["message"]
            )

    asyncio.run(main())


TOKEN_ROWS = [
    {"ids": [7, 1, 2, 3, 4, 5, 6, 7, 8, 9], "ground_truth": "ten"},
    {"ids": [7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9], "ground_truth": "eleven"},
    {"ids": [5, 9], "ground_truth": "short"},
]


def test_token_id_prompts_are_answered_with_or_without_a_salt_run(tmp_path: Path) -> None:
    """A token-id oracle dataset answers the ids as sent, and the ids with
    one run inserted anywhere (the salt: after the user header, or first)."""
    path = write_jsonl(tmp_path / "ids.jsonl", TOKEN_ROWS)
    oracle = load_oracle(parse_oracle_arg(f"{path},parser.input_tokens=ids"))
    ten, eleven, short = (tuple(r["ids"]) for r in TOKEN_ROWS)
    assert oracle.answer(ten) == "ten" and oracle.answer(eleven) == "eleven"
    salt = (40, 41, 42)
    assert oracle.answer(ten[:1] + salt + ten[1:]) == "ten"  # after a one-id header
    assert oracle.answer(salt + eleven) == "eleven"  # --token-salt start
    assert oracle.answer(short[:1] + salt + short[1:]) == "short"
    # a salt that starts like the ids it precedes is still one run
    assert oracle.answer((*ten[:1], 1, 99, *ten[1:])) == "ten"
    # long samples are found by their tail, or by their head when the salt is near the end
    long_rows = {tuple(range(100, 100 + n)): str(n) for n in (12, 20)}
    indexed = Oracle(long_rows)
    twenty = tuple(range(100, 120))
    assert indexed.answer(twenty[:5] + salt + twenty[5:]) == "20"
    assert indexed.answer(twenty[:18] + salt + twenty[18:]) == "20"
    assert indexed.answer(salt + twenty[:12]) == "12"
    # a changed id is not a salt, nor is a missing one
    assert oracle.answer((*ten[:-1], 0)) is None
    assert oracle.answer(ten[1:]) is None
    assert oracle.answer((1, 2)) is None


def test_a_token_id_prompt_is_answered_over_the_wire(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "ids.jsonl", TOKEN_ROWS)
    config = oracle_config("--oracle", f"{path},parser.input_tokens=ids")

    async def main() -> None:
        async with SimServer(config) as server, Client(server.url) as client:
            sent = [7, 50, 51, 1, 2, 3, 4, 5, 6, 7, 8, 9]
            record = await client.request(
                {"model": "m", "prompt": sent, "stream": True}, path="/v1/completions"
            )
            assert record.error_class is None
            assert record.response.content == "ten"

    asyncio.run(main())


def test_dataset_mistakes_are_usage_errors(tmp_path: Path) -> None:
    same = {"prompt": "same", "ground_truth": "one"}
    conflicting = write_jsonl(
        tmp_path / "c.jsonl", [same, {"x": 1, **same}, {**same, "ground_truth": "two"}]
    )
    with pytest.raises(UsageError, match=r"samples 0 and 2 have the same prompt"):
        load_oracle(parse_oracle_arg(str(conflicting)))
    duplicates = write_jsonl(tmp_path / "d.jsonl", [same, same])
    assert len(load_oracle(parse_oracle_arg(str(duplicates)))) == 1
    with pytest.raises(UsageError, match=r"ground-truth column 'answer' not found"):
        load_oracle(parse_oracle_arg(f"{duplicates},ground_truth=answer"))
    with pytest.raises(UsageError, match=r"ground_truth= needs a column"):
        parse_oracle_arg(f"{duplicates},ground_truth=")
    with pytest.raises(ValueError, match="--oracle-truncate, --oracle-degrade without --oracle"):
        oracle_config("--oracle-truncate", "--oracle-degrade", "half")
    with pytest.raises(ValueError, match="'half' or a number"):
        oracle_config("--oracle", str(duplicates), "--oracle-degrade", "most")
    with pytest.raises(ValueError, match="token_chars"):
        oracle_config("--oracle", str(duplicates), "--oracle-token-chars", "0")
    with pytest.raises(ValueError, match="reasoning_tokens"):
        oracle_config("--oracle", str(duplicates), "--reasoning-tokens", "2")


def test_oracle_arg_is_an_accuracy_dataset_arg(data: Path) -> None:
    spec = parse_oracle_arg(f"{data},parser.prompt=q,parser.system=s,ground_truth=ref,samples=3")
    assert spec == DatasetSpec(
        path=str(data),
        type="accuracy",
        samples=3,
        prompt_column="q",
        system_column="s",
        accuracy=AccuracyConfig(ground_truth="ref"),
    )
    assert parse_oracle_arg(str(data)).accuracy == AccuracyConfig()
    # an accuracy run's own --dataset value works as is
    same = parse_oracle_arg(f"acc:{data},accuracy_config.ground_truth=ref,parser.prompt=q")
    assert same.accuracy == AccuracyConfig(ground_truth="ref") and same.prompt_column == "q"


def test_serve_help_documents_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--oracle ", "--oracle-token-chars", "--oracle-truncate", "--oracle-degrade"):
        assert flag in out
    assert "ground_truth" in out and "404" in out


# --- a full-size dataset -----------------------------------------------------------------


def test_cnn_dailymail_sized_dataset(tmp_path: Path) -> None:
    """13,368 samples (the Llama 3.1 8B set).  Measured load time of a
    CNN/DailyMail-sized file (68 MB, ~4,000-character prompts): ~0.2 s; the
    test checks only the answers, as a time limit would fail on a slow CI."""
    n = 13_368
    path = tmp_path / "cnn.jsonl"
    path.write_bytes(
        b"".join(
            msgspec.json.encode(
                {"prompt": f"Article {i}:\n{'word ' * 50}", "ground_truth": f"Summary {i}."}
            )
            + b"\n"
            for i in range(n)
        )
    )
    oracle = load_oracle(parse_oracle_arg(str(path)))
    assert isinstance(oracle, Oracle) and len(oracle) == n
    prompt = f"Article 9876:\n{'word ' * 50}"
    assert oracle.answer(prompt) == "Summary 9876."
    assert oracle.answer("[00000000deadbeef] " + prompt) == "Summary 9876."
    assert oracle.answer("[00000000DEADBEEF] " + prompt) is None  # salts are lower-case hex
    assert oracle.answer(prompt.rstrip()) is None


def test_config_default_has_no_oracle() -> None:
    assert oracle_config().oracle is None
    sim = SimConfig(ttft_ms=Dist.fixed(1))
    assert sim.oracle is None
