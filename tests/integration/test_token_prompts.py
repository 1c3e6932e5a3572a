"""A pre-tokenized dataset end to end: ``mlpe-fast run`` sends
its ids to the simulated endpoint's ``/v1/completions``, the ISSUED lines
hold them, the ISL is their number; what cannot be sent is refused in one
line, status 2, before any load."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from tests.integration.tally_sim import SCRIPT, read_prompt_kinds, read_tally

FAST = ("--ttft-ms", "1", "--itl-ms", "0.2", "--seed", "3")
IDS = [[3, 1, 4], [1, 5, 9, 2, 6], [5, 3]]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(FAST, script=SCRIPT) as url:
        yield url


@pytest.fixture
def token_dataset(tmp_path: Path) -> str:
    path = tmp_path / "tokens.jsonl"
    rows = [{"text_input": "not sent", "tok_input": ids} for ids in IDS]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"{path},parser.input_tokens=tok_input"


def _run(url: str, model: str, dataset: str, *flags: str) -> list[str]:
    return [
        *("run", "--no-progress", "--endpoints", url, "--model", model),
        *("--tokenizer", DEMO_TOKENIZER, "--dataset", dataset, "--max-output-tokens", "4"),
        *flags,
    ]


def test_token_ids_are_sent_recorded_and_counted(
    endpoint: str, token_dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    flags = ("--api-type", "openai_completions", "--no-salt", "--num-samples", "6")
    status = main([*_run(endpoint, "ids", token_dataset, *flags), "--report-dir", str(folder)])
    assert status == 0, capsys.readouterr().err
    assert read_prompt_kinds(endpoint, "ids") == Counter({"token_ids": 6})
    assert {route for _, route, _, _ in read_tally(endpoint, "ids")} == {"/v1/completions"}

    issued = [
        json.loads(line)["data"]
        for line in (folder / "events.jsonl").read_text().splitlines()
        if '"sample.issued"' in line
    ]
    assert len(issued) == 6
    # ["PromptData", text, token_ids, ...]: the ids as the dataset holds them.
    assert all(data[0] == "PromptData" and data[1] is None for data in issued)
    assert sorted(map(tuple, (data[2] for data in issued))) == sorted(map(tuple, IDS * 2))

    summary = json.loads((folder / "performance" / "result_summary.json").read_bytes())
    isl = summary["input_sequence_lengths"]
    assert (isl["total"], isl["min"], isl["max"]) == (2 * sum(map(len, IDS)), 2, 5)
    written = (folder / "config.yaml").read_text()
    assert "input_tokens: tok_input" in written


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            (),
            "cannot be sent to /v1/chat/completions; add --api-type openai_completions "
            "(YAML endpoint_config.api_type)",
        ),
        (
            ("--api-type", "openai_completions"),
            "cannot be salted (the salt is text; the "
            "reference refuses it too); add --no-salt (YAML mlpe_fast.salt: false)",
        ),
        (
            ("--api-type", "openai_completions", "--no-salt", "--warmup-requests", "2"),
            "cannot be salted for the warmup (the reference refuses it too); add --no-warmup-salt "
            "(YAML settings.warmup.salt)",
        ),
    ],
)
def test_what_cannot_be_sent_is_one_line_and_status_2_before_any_load(
    endpoint: str,
    token_dataset: str,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    message: str,
) -> None:
    model = f"refused-{len(flags)}"
    assert main(_run(endpoint, model, token_dataset, *flags, "--num-samples", "2")) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"mlpe-fast: --dataset tokens: token ids (parser.input_tokens) {message}"
    ]
    assert read_tally(endpoint, model) == Counter()


def test_a_bad_row_is_one_line_and_status_2(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"ids": [1, 2]}\n{"ids": [1, "2"]}\n')
    dataset = f"{path},parser.input_tokens=ids"
    flags = ("--api-type", "openai_completions", "--no-salt", "--num-samples", "2")
    assert main(_run(endpoint, "bad-row", dataset, *flags)) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"mlpe-fast: {path}:2: column 'ids' (parser.input_tokens) item 1 is '2', "
        "not a non-negative integer token id"
    ]
    assert read_tally(endpoint, "bad-row") == Counter()


def test_answers_are_checked_against_their_dataset_s_own_output_cap(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # generation_config_override.max_new_tokens raises the performance cap
    # above the run's: answers of that length are what was asked, not
    # "longer than asked" (which would say WARNING and exit 6)
    yaml_path = tmp_path / "run.yaml"
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": "x" * n}) + "\n" for n in (5, 7, 9)))
    yaml_path.write_text(
        json.dumps(
            {
                "model_params": {"name": "cap", "max_new_tokens": 4},
                "endpoint_config": {"endpoints": [endpoint]},
                "datasets": [
                    {
                        "name": "perf",
                        "path": str(data),
                        "generation_config_override": {"max_new_tokens": 12},
                    }
                ],
            }
        )
    )
    flags = ("--tokenizer", DEMO_TOKENIZER, "--num-samples", "6", "--concurrency", "2")
    status = main(["run", "--no-progress", "-c", str(yaml_path), *flags])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert "WARNING" not in out.out
