"""Datasets: the --dataset syntax, every loader, column mapping, every error.

Files are real files in tmp_path; the reference's own dummy_1k.jsonl is
the copy in tests/data.
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import (
    AccuracyConfig,
    DatasetSpec,
    Sample,
    load_dataset,
    parse_dataset_arg,
)
from tests.data_files import DUMMY_1K


def error_of(spec: DatasetSpec) -> str:
    with pytest.raises(UsageError) as info:
        load_dataset(spec)
    message = str(info.value)
    assert "\n" not in message
    return message


def jsonl(tmp_path: Path, rows: list[Any], name: str = "d.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --dataset ------------------------------------------------------------------------------


def test_parse_plain_path() -> None:
    assert parse_dataset_arg("data/x.jsonl") == DatasetSpec(path="data/x.jsonl")


def test_parse_everything() -> None:
    spec = parse_dataset_arg(
        "acc:d.csv,parser.prompt=article,parser.system=inst,format=CSV,samples=500,name=cnn,"
        "accuracy_config.ground_truth=highlights,accuracy_config.eval_method=rouge,"
        "accuracy_config.num_repeats=2"
    )
    assert spec == DatasetSpec(
        path="d.csv",
        type="accuracy",
        name="cnn",
        format="csv",
        samples=500,
        prompt_column="article",
        system_column="inst",
        accuracy=AccuracyConfig(eval_method="rouge", ground_truth="highlights", num_repeats=2),
    )
    assert spec.display_name == "cnn"


def test_parse_prefixes_and_drive_letters() -> None:
    assert parse_dataset_arg("perf:d.jsonl").type == "performance"
    assert parse_dataset_arg("acc:d.jsonl").type == "accuracy"
    # a prefix other than perf/acc is part of the path
    assert parse_dataset_arg("C:/data/d.jsonl").path == "C:/data/d.jsonl"
    assert parse_dataset_arg("d.jsonl,format=.jsonl").format == "jsonl"
    assert DatasetSpec(path="dir/dummy_1k.jsonl").display_name == "dummy_1k"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "d.jsonl,samples",
            "--dataset 'd.jsonl,samples': option 'samples' is not key=value, "
            "e.g. parser.prompt=text_input",
        ),
        (
            "d.jsonl,parser.prompt:text",
            "--dataset 'd.jsonl,parser.prompt:text': option 'parser.prompt:text' is not "
            "key=value (did you mean '=' instead of ':'?), e.g. parser.prompt=text_input",
        ),
        (
            "d.jsonl,split=train",
            "--dataset 'd.jsonl,split=train': unknown option 'split' "
            "(valid: name, format, samples, parser.prompt, parser.system, parser.input_tokens, "
            "accuracy_config.eval_method, accuracy_config.ground_truth, "
            "accuracy_config.extractor, accuracy_config.num_repeats)",
        ),
        (
            "d.jsonl,accuracy_config.ground_truth=x",
            "--dataset 'd.jsonl,accuracy_config.ground_truth=x': accuracy_config options "
            "need an accuracy dataset (acc:PATH)",
        ),
        (
            "acc:d.jsonl,accuracy_config.num_repeats=0",
            "--dataset 'acc:d.jsonl,accuracy_config.num_repeats=0': "
            "accuracy_config.num_repeats must be a positive integer, got '0'",
        ),
        (
            "d.jsonl,parser.answer=x",
            "--dataset 'd.jsonl,parser.answer=x': unknown parser target 'answer' "
            "(valid: prompt, system, input_tokens)",
        ),
        (
            "d.jsonl,format=xml",
            "--dataset 'd.jsonl,format=xml': format 'xml' is not one of jsonl, json, csv, parquet",
        ),
        (
            "d.jsonl,samples=0",
            "--dataset 'd.jsonl,samples=0': samples must be a positive integer, got '0'",
        ),
        ("acc:,samples=3", "--dataset 'acc:,samples=3': no file path"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_dataset_arg(text)
    assert str(info.value) == message


# The reference's dummy_1k ----------------------------------------------------------------


def test_dummy_1k_needs_parser_prompt() -> None:
    message = error_of(DatasetSpec(path=str(DUMMY_1K)))
    assert message == (
        f"dataset {DUMMY_1K}: no prompt column (available columns: text_input, ref_output); "
        f"add parser.prompt=text_input, e.g. --dataset {DUMMY_1K},parser.prompt=text_input"
    )


def test_dummy_1k_with_parser_prompt() -> None:
    dataset = load_dataset(parse_dataset_arg(f"{DUMMY_1K},parser.prompt=text_input"))
    assert len(dataset) == 1000
    assert dataset.name == "dummy_1k"
    assert dataset.columns == ("text_input", "ref_output")
    assert dataset.samples[0] == Sample(
        prompt="Write a short story about artificial intelligence (case 0)"
    )
    assert all(s.prompt and s.system is None and s.messages is None for s in dataset.samples)


def test_dummy_1k_first_samples() -> None:
    dataset = load_dataset(parse_dataset_arg(f"{DUMMY_1K},parser.prompt=text_input,samples=10"))
    assert len(dataset) == 10
    message = error_of(parse_dataset_arg(f"{DUMMY_1K},parser.prompt=text_input,samples=1001"))
    assert message == f"dataset {DUMMY_1K}: samples=1001 but the file has only 1000 rows"


# Formats -----------------------------------------------------------------------------------

ROWS = [
    {"prompt": "What is 2+2?", "answer": "4"},
    {"prompt": 'Quote "this", please\nand a newline', "answer": "ok"},
    {"prompt": "é 世 😀", "answer": "unicode"},
]
EXPECTED = tuple(Sample(prompt=r["prompt"]) for r in ROWS)


def test_jsonl(tmp_path: Path) -> None:
    path = jsonl(tmp_path, ROWS)
    path.write_text(path.read_text(encoding="utf-8") + "\n  \n", encoding="utf-8")  # blank lines
    dataset = load_dataset(DatasetSpec(path=str(path)))
    assert dataset.samples == EXPECTED
    assert dataset.columns == ("prompt", "answer")


def test_json(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps(ROWS, indent=1), encoding="utf-8")
    assert load_dataset(DatasetSpec(path=str(path))).samples == EXPECTED


def test_csv(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["prompt", "answer"])
        writer.writeheader()
        writer.writerows(ROWS)
    assert load_dataset(DatasetSpec(path=str(path))).samples == EXPECTED


def test_format_option_overrides_the_extension(tmp_path: Path) -> None:
    path = jsonl(tmp_path, ROWS, name="d.txt")
    assert load_dataset(DatasetSpec(path=str(path), format="jsonl")).samples == EXPECTED


def test_parquet(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    if importlib.util.find_spec("pyarrow") is None:
        path.write_bytes(b"PAR1")
        assert error_of(DatasetSpec(path=str(path))) == (
            f"dataset {path}: reading Parquet needs pyarrow (pip install pyarrow)"
        )
        return
    pa = importlib.import_module("pyarrow")
    pq = importlib.import_module("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS), str(path))
    assert load_dataset(DatasetSpec(path=str(path))).samples == EXPECTED


# Column mapping -------------------------------------------------------------------------------


def test_system_column(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [{"q": "hi", "sys": "be brief"}, {"q": "yo", "sys": None}])
    dataset = load_dataset(DatasetSpec(path=str(path), prompt_column="q", system_column="sys"))
    assert dataset.samples == (Sample(prompt="hi", system="be brief"), Sample(prompt="yo"))


def test_reference_candidate_columns(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [{"question": "why?", "system_prompt": "s"}])
    assert load_dataset(DatasetSpec(path=str(path))).samples == (Sample(prompt="why?", system="s"),)


def test_messages_column(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    path = jsonl(tmp_path, [{"messages": messages, "id": 1}])
    assert load_dataset(DatasetSpec(path=str(path))).samples == (Sample(messages=tuple(messages)),)


def test_errors_of_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    assert error_of(DatasetSpec(path=str(missing))) == f"dataset file not found: {missing}"
    assert error_of(DatasetSpec(path=str(tmp_path))) == (f"dataset {tmp_path}: not a regular file")
    odd = tmp_path / "d.txt"
    odd.write_text("x", encoding="utf-8")
    assert error_of(DatasetSpec(path=str(odd))) == (
        f"dataset {odd}: unknown file extension '.txt'; add format=jsonl|json|csv|parquet"
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    assert error_of(DatasetSpec(path=str(empty))) == f"dataset {empty}: no rows (empty dataset)"
    header_only = tmp_path / "h.csv"
    header_only.write_text("prompt,answer\n", encoding="utf-8")
    assert error_of(DatasetSpec(path=str(header_only))) == (
        f"dataset {header_only}: no rows (empty dataset)"
    )


def test_malformed_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b",}\n', encoding="utf-8")
    message = error_of(DatasetSpec(path=str(path)))
    assert message.startswith(f"{path}:3: malformed JSON line: ")
    path.write_text('{"prompt": "a"}\n["not", "an", "object"]\n', encoding="utf-8")
    assert error_of(DatasetSpec(path=str(path))) == (
        f"{path}:2: expected a JSON object per line, got a list"
    )


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[\n {"prompt": "a"},\n {"prompt": }\n]\n', encoding="utf-8")
    assert error_of(DatasetSpec(path=str(path))).startswith(f"{path}:3: malformed JSON: ")
    path.write_text('{"prompt": "a"}', encoding="utf-8")
    assert error_of(DatasetSpec(path=str(path))) == (
        f"dataset {path}: expected a JSON list of objects, got an object"
    )
    path.write_text('[{"prompt": "a"}, 7]', encoding="utf-8")
    assert error_of(DatasetSpec(path=str(path))) == (
        f"{path}: row 1: expected a JSON object, got a number"
    )


def test_malformed_csv(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text('prompt,answer\n"a, b",1\nc\n', encoding="utf-8")
    assert error_of(DatasetSpec(path=str(path))) == f"{path}:3: 1 fields, the header has 2"
    path.write_text("prompt,prompt\na,b\n", encoding="utf-8")
    assert error_of(DatasetSpec(path=str(path))) == (
        f"{path}:1: duplicate column names in the CSV header"
    )
    path.write_bytes(b"prompt\n\xff\xfe\n")
    assert error_of(DatasetSpec(path=str(path))).startswith(f"dataset {path}: not UTF-8 text")


def test_missing_columns(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [{"text": "a", "label": 1}])
    assert error_of(DatasetSpec(path=str(path), prompt_column="prompt_text")) == (
        f"dataset {path}: column 'prompt_text' (parser.prompt) not found; "
        "available columns: text, label"
    )
    assert error_of(DatasetSpec(path=str(path), prompt_column="text", system_column="sys")) == (
        f"dataset {path}: column 'sys' (parser.system) not found; available columns: text, label"
    )
    assert error_of(DatasetSpec(path=str(path))) == (
        f"dataset {path}: no prompt column (available columns: text, label); "
        f"add parser.prompt=text, e.g. --dataset {path},parser.prompt=text"
    )


def test_ambiguous_candidates(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [{"question": "a", "query": "b"}])
    assert error_of(DatasetSpec(path=str(path))) == (
        f"dataset {path}: columns 'question' and 'query' could both be the prompt; "
        "add parser.prompt=<column>"
    )


def test_bad_values_name_the_line(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [{"prompt": "a"}, {"prompt": 3}])
    assert error_of(DatasetSpec(path=str(path))) == (
        f"{path}:2: column 'prompt' is a number, not a string"
    )
    path = jsonl(tmp_path, [{"prompt": "a"}, {"other": "b"}])
    assert error_of(DatasetSpec(path=str(path))) == f"{path}:2: missing column 'prompt'"
    path = jsonl(tmp_path, [{"messages": []}])
    assert error_of(DatasetSpec(path=str(path))) == (
        f"{path}:1: column 'messages' must be a non-empty list of chat messages, got a list"
    )
    path = jsonl(tmp_path, [{"messages": [{"content": "no role"}]}])
    assert error_of(DatasetSpec(path=str(path))) == (
        f"{path}:1: messages[0] is not a chat message with a string 'role'"
    )
