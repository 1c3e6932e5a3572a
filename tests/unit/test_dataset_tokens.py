"""Pre-tokenized datasets (``parser.input_tokens``, issue 21): loading and
its mistakes, the ``/v1/completions`` bodies, the ISL of ids, the
per-dataset ``generation_config_override``, and the output count of a
completion that keeps its special tokens."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlpe_fast.artifacts.config_yaml import config_to_yaml_dict
from mlpe_fast.artifacts.events import PromptData, TextModelOutput
from mlpe_fast.config import RunConfig, add_run_arguments, resolve
from mlpe_fast.config.datasets import dataset_from_yaml
from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import (
    Dataset,
    GenerationOverride,
    Sample,
    load_dataset,
    parse_dataset_arg,
)
from mlpe_fast.load.requests import (
    RequestFeed,
    TokenPrompt,
    build_body_templates,
    prompt_of,
    templates_for,
)
from mlpe_fast.metrics.count_inputs import osl_input, prompt_input
from mlpe_fast.metrics.tokens import CountJob, TokenCounter
from mlpe_fast.point.performance import prompt_data

IDS = [[7, 0, 3], [5], [1, 2, 3, 4]]


def config(*argv: str, yaml: dict[str, Any] | None = None) -> RunConfig:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return resolve(parser.parse_args(list(argv)), yaml or {})


def write(tmp_path: Path, fmt: str, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / f"tokens.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "csv":
        lines = ["text,input_tokens"] + [
            f'{r["text"]},"{json.dumps(r["input_tokens"])}"' for r in rows
        ]
        path.write_text("\n".join(lines) + "\n")
    else:
        pa = pytest.importorskip("pyarrow")
        parquet = pytest.importorskip("pyarrow.parquet")
        table = pa.table(
            {
                "text": [r["text"] for r in rows],
                "input_tokens": pa.array([r["input_tokens"] for r in rows], pa.list_(pa.int64())),
            }
        )
        parquet.write_table(table, str(path))
    return path


def rows(ids: list[Any] = IDS) -> list[dict[str, Any]]:
    return [{"text": f"t{i}", "input_tokens": v} for i, v in enumerate(ids)]


def loaded(path: Path, column: str = "input_tokens") -> Dataset:
    return load_dataset(parse_dataset_arg(f"{path},parser.input_tokens={column}"))


# Loading ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_every_format_loads_token_ids(tmp_path: Path, fmt: str) -> None:
    data = loaded(write(tmp_path, fmt, rows()))
    assert [s.token_ids for s in data.samples] == [tuple(v) for v in IDS]
    assert all(s.prompt is None and s.messages is None for s in data.samples)


def test_the_option_is_read_from_the_command_line_and_yaml() -> None:
    assert parse_dataset_arg("a.parquet,parser.input_tokens=tok_input").input_tokens_column == (
        "tok_input"
    )
    spec = dataset_from_yaml({"path": "a.parquet", "parser": {"input_tokens": "tok"}}, "d[0]")
    assert spec.pre_tokenized and spec.input_tokens_column == "tok"
    with pytest.raises(UsageError, match="valid: prompt, system, input_tokens"):
        dataset_from_yaml({"path": "a", "parser": {"tokens": "x"}}, "d[0]")


@pytest.mark.parametrize(
    ("fmt", "bad", "where", "message"),
    [
        ("jsonl", [[1], []], ":2:", "is an empty list"),
        ("jsonl", [[1], [1, -2]], ":2:", "item 1 is -2, not a non-negative integer token id"),
        ("jsonl", [[1, 2.5]], ":1:", "item 1 is 2.5"),
        ("jsonl", [[True]], ":1:", "item 0 is True"),
        ("json", [[1], "1 2"], ": row 1:", "is a string, not a list of token ids"),
        ("json", [[1], ["1"]], ": row 1:", "item 0 is '1'"),
        ("csv", [[1], "[1, 2"], ":3:", "is not a JSON array of token ids"),
        ("parquet", [[1], []], ": row 1:", "is an empty list"),
        ("parquet", [[1], None], ": row 1:", "is null, not a list of token ids"),
    ],
)
def test_bad_rows_are_one_line_naming_file_row_and_column(
    tmp_path: Path, fmt: str, bad: list[Any], where: str, message: str
) -> None:
    if fmt == "csv":
        path = tmp_path / "t.csv"
        path.write_text('text,input_tokens\na,"[1]"\nb,"[1, 2"\n')
    elif fmt == "parquet":
        pa = pytest.importorskip("pyarrow")
        parquet = pytest.importorskip("pyarrow.parquet")
        path = tmp_path / "t.parquet"
        parquet.write_table(pa.table({"input_tokens": pa.array(bad, pa.list_(pa.int64()))}), path)
    else:
        path = write(tmp_path, fmt, rows(bad))
    with pytest.raises(UsageError) as caught:
        loaded(path)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"{path}{where}")
    assert "'input_tokens' (parser.input_tokens)" in text and message in text


def test_a_missing_column_lists_the_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "jsonl", rows())
    with pytest.raises(
        UsageError,
        match=r"column 'tok_input' \(parser.input_tokens\) not found; "
        r"available columns: text, input_tokens",
    ):
        loaded(path, "tok_input")


# Bodies, salt and ISL -------------------------------------------------------------------


def test_the_completions_body_sends_the_ids_unsalted_and_keeps_special_tokens(
    tmp_path: Path,
) -> None:
    data = loaded(write(tmp_path, "jsonl", rows()))
    run = config(
        "--api-type",
        "openai_completions",
        "--no-salt",
        "--model",
        "m",
        "--max-output-tokens",
        "9",
        yaml={"model_params": {"temperature": 0.5}},
    )
    templates = templates_for(data, run, salt=False)
    body = json.loads(templates[0].render())
    assert body == {
        "model": "m",
        "prompt": [7, 0, 3],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 9,
        "skip_special_tokens": False,
        "temperature": 0.5,
    }
    feed = RequestFeed.for_phase(data, run, "performance")
    for _ in range(6):
        index, sent = feed.next_request()
        assert json.loads(sent)["prompt"] == IDS[index]
        assert feed.last_prompt == TokenPrompt(tuple(IDS[index]))


def test_ids_on_the_chat_route_or_salted_without_placement_are_refused_when_bodies_are_built(
    tmp_path: Path,
) -> None:
    data = loaded(write(tmp_path, "jsonl", rows()))
    with pytest.raises(UsageError, match=r"add --api-type openai_completions \(or sglang\)$"):
        build_body_templates(data, model="m", api_type="openai", salt=False)
    # where the salt goes is load/token_salt.py's to say (test_token_salt.py)
    with pytest.raises(ValueError, match=r"needs their token_salting"):
        build_body_templates(data, model="m", api_type="openai-completions", salt=True)


def test_the_issued_line_holds_the_ids_and_the_isl_is_their_number(tmp_path: Path) -> None:
    sample = loaded(write(tmp_path, "jsonl", rows())).samples[2]
    prompt = prompt_of(sample, None)
    data = prompt_data(prompt, None, chat=False)
    assert data == PromptData(token_ids=(1, 2, 3, 4))
    assert msgspec.json.decode(msgspec.json.encode(data))[2] == [1, 2, 3, 4]
    assert prompt_input(data) == (1, 2, 3, 4)


class _NoTokenizer:
    """A tokenizer that fails if asked anything: ids need no tokenizer pass."""

    def encode_batch(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("token ids were tokenized")


def test_the_isl_of_ids_takes_no_tokenizer_pass() -> None:
    counter = TokenCounter(_NoTokenizer())
    try:
        counter.submit(CountJob(isl=prompt_input(PromptData(token_ids=(9, 8, 7, 6, 5)))))
        counts = counter.finish(timeout=30)
    finally:
        counter.close()
    assert counts.error is None and list(counts.isl) == [5]


# Config rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            (),
            "cannot be sent to /v1/chat/completions; add --api-type openai_completions "
            "(YAML endpoint_config.api_type)",
        ),
    ],
)
def test_the_configuration_refuses_what_cannot_be_sent(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        config("--dataset", "x.parquet,parser.input_tokens=ids", *argv)
    assert str(caught.value) == f"--dataset x: token ids (parser.input_tokens) {message}"


def test_salted_unsalted_and_accuracy_token_runs_are_accepted() -> None:
    # salted by default, in the token stream (spec §2.5): placed at load time
    salted = config(
        "--dataset", "x.parquet,parser.input_tokens=ids", "--api-type", "openai_completions"
    )
    assert (salted.salt, salted.token_salt) == (True, "user")
    first = config(
        "--dataset",
        "x.parquet,parser.input_tokens=ids",
        "--api-type",
        "openai_completions",
        "--token-salt",
        "start",
        "--warmup-requests",
        "2",
    )
    assert (first.token_salt, first.warmup_salt) == ("start", True)
    run = config(
        "--dataset",
        "x.parquet,parser.input_tokens=ids",
        "--api-type",
        "openai_completions",
        "--no-salt",
        "--warmup-requests",
        "2",
        "--no-warmup-salt",
    )
    assert run.datasets[0].pre_tokenized
    # Accuracy queries are never salted: nothing to refuse with --salt on.
    config(
        "--dataset",
        "acc:x.parquet,parser.input_tokens=ids",
        "--mode",
        "acc",
        "--api-type",
        "openai_completions",
    )


# generation_config_override ---------------------------------------------------------------


def _yaml(override: Any) -> dict[str, Any]:
    return {
        "model_params": {"name": "m", "max_new_tokens": 10240, "temperature": 1.0},
        "endpoint_config": {"api_type": "openai_completions"},
        "mlpe_fast": {"salt": False},
        "datasets": [
            {"name": "perf", "path": "p.parquet", "parser": {"input_tokens": "input_tokens"}},
            {
                "name": "acc",
                "type": "accuracy",
                "path": "a.jsonl",
                "generation_config_override": override,
            },
        ],
    }


def test_a_dataset_override_applies_to_its_requests_and_is_recorded() -> None:
    run = config(yaml=_yaml({"max_new_tokens": 32768, "top_p": 0.9}))
    perf, acc = run.datasets
    assert perf.generation_override is None
    assert acc.generation_override == GenerationOverride(max_new_tokens=32768, top_p=0.9)
    text = Dataset(spec=acc, columns=("prompt",), samples=(Sample(prompt="q"),))
    body = json.loads(templates_for(text, run, salt=False)[0].render())
    assert (body["max_tokens"], body["top_p"], body["temperature"]) == (32768, 0.9, 1.0)
    written = config_to_yaml_dict(run)
    assert written["model_params"]["max_new_tokens"] == 10240
    assert written["datasets"][1]["generation_config_override"] == {
        "max_new_tokens": 32768,
        "top_p": 0.9,
    }
    assert written["datasets"][0]["parser"] == {"input_tokens": "input_tokens"}
    # config.yaml reads back as the same datasets.
    assert config(yaml={**_yaml(None), "datasets": written["datasets"]}).datasets == run.datasets


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"max_new_tokens": 0},
            "generation_config_override.max_new_tokens: expected a positive integer, got 0",
        ),
        ({"max_tokens": 5}, "unknown key 'datasets[1].generation_config_override.max_tokens'"),
        (
            {"streaming": "on"},
            "streaming: is one setting of the whole run (its token counts), "
            "not per dataset; set model_params.streaming",
        ),
        ({"min_new_tokens": 2}, "min_new_tokens: is not supported by mlpe-fast"),
        ([1], "generation_config_override: expected a mapping, got a list"),
    ],
)
def test_override_mistakes_are_one_line(override: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        config(yaml=_yaml(override))
    assert message in str(caught.value) and "\n" not in str(caught.value)


# Output counting with special tokens ------------------------------------------------------


def _harmony_tokenizer() -> Any:
    """A character-level tokenizer with the Harmony markers as special tokens."""
    tokenizers = pytest.importorskip("tokenizers")
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz .,"))
    vocab = {c: i for i, c in enumerate(chars)}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token=" "))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    tokenizer.add_special_tokens(["<|channel|>", "<|message|>", "<|end|>", "<|start|>"])
    return tokenizer


def test_the_analysis_channel_and_its_markers_are_output_tokens() -> None:
    tokenizer = _harmony_tokenizer()
    text = "<|channel|>analysis<|message|>think<|end|><|start|>final<|message|>ok"
    # 5 markers, one token each, and 8 + 5 + 5 + 2 characters.
    expected = 5 + len("analysis") + len("think") + len("final") + len("ok")
    assert len(tokenizer.encode(text, add_special_tokens=False).ids) == expected
    counter = TokenCounter(tokenizer)
    try:
        output = TextModelOutput(output=text)
        counter.submit(
            CountJob(osl=osl_input(output), isl=prompt_input(PromptData(token_ids=(1, 2, 3))))
        )
        counts = counter.finish(timeout=30)
    finally:
        counter.close()
    assert counts.error is None
    assert (list(counts.osl), list(counts.isl)) == ([expected], [3])
