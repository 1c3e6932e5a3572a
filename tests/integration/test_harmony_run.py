"""gpt-oss-120b the way its rules run it, end to end against the simulated
endpoint: text prompts encoded client-side in Harmony and sent as ids to
``/v1/completions`` (salted after the user header, effort low for
performance and high for accuracy), the pre-tokenized performance set
beside its three accuracy sets (AIME25 x 8, GPQA x 5, LiveCodeBench x 3,
each with its own 32,768-token cap), scored and gated on known answers."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from mlpe_fast.cli import main
from mlpe_fast.demo import simulated_endpoint
from mlpe_fast.load.harmony import harmony_encoder, harmony_text
from tests.data_files import LCB_TINY
from tests.harmony_tokenizer import harmony_tokenizer
from tests.integration.curve_bundles import bundle_and_check, development_warnings, system_file
from tests.integration.tally_sim import SCRIPT, read_prompt_kinds, read_token_prompts

DATE = "2026-12-02"
QUESTIONS = ["What is 2 + 2?", "Name a prime.", "What is the answer?"]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return harmony_tokenizer(tmp_path_factory.mktemp("gpt-oss"), QUESTIONS)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with simulated_endpoint(("--ttft-ms", "1", "--itl-ms", "0.2"), script=SCRIPT) as url:
        yield url


def test_text_prompts_go_as_harmony_ids_salted_after_the_user_header(
    vocab: Path, endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"question": q}) + "\n" for q in QUESTIONS))
    folder = tmp_path / "run"
    status = main(
        [
            *("run", "--no-progress", "--endpoints", endpoint, "--model", "harmony-perf"),
            *(
                "--tokenizer",
                str(vocab),
                "--dataset",
                str(data),
                "--api-type",
                "openai-completions",
            ),
            *("--max-output-tokens", "4", "--num-samples", "6", "--warmup-requests", "2"),
            *("--harmony-date", DATE, "--report-dir", str(folder)),
        ]
    )
    out = capsys.readouterr()
    assert status == 0, out.err
    assert f"prompts: Harmony ids dated {DATE} (questions at effort low)" in out.out
    tokenizer = Tokenizer.from_file(str(vocab / "tokenizer.json"))
    received = read_token_prompts(endpoint, "harmony-perf")
    assert len(received) == 8
    header = "<|start|>user<|message|>"
    expected = {harmony_text(q, None, "low", DATE) for q in QUESTIONS}
    salts = set()
    for sent in received:
        text = tokenizer.decode(list(sent), skip_special_tokens=False)
        head, _, rest = text.partition(header)
        salt, question = rest[:19], rest[19:]
        assert salt[0] == "[" and salt[-2:] == "] " and int(salt[1:17], 16) >= 0
        assert head + header + question in expected
        salts.add(salt)
    assert len(salts) == 8  # every query its own salt, warmup included
    summary = json.loads((folder / "performance" / "result_summary.json").read_bytes())
    assert summary["input_sequence_lengths"]["total"] == sum(map(len, received[2:]))
    written = (folder / "config.yaml").read_text()
    assert f"harmony_date: '{DATE}'" in written or f"harmony_date: {DATE}" in written

    # --harmony off: the same text goes as a text prompt
    status = main(
        [
            *("run", "--no-progress", "--endpoints", endpoint, "--model", "harmony-off"),
            *(
                "--tokenizer",
                str(vocab),
                "--dataset",
                str(data),
                "--api-type",
                "openai-completions",
            ),
            *("--max-output-tokens", "4", "--num-samples", "3", "--harmony", "off", "--no-salt"),
        ]
    )
    assert status == 0, capsys.readouterr().err
    assert read_token_prompts(endpoint, "harmony-off") == []
    assert read_prompt_kinds(endpoint, "harmony-off") == Counter({"text": 3})


# gpt-oss-120b's accuracy sets, shaped as the checker counts them: AIME25's 30
# problems x 8, GPQA x 5 and LiveCodeBench x 3 must issue 4,395 samples (spec
# §2.6); the GPQA stand-in has enough questions to make up the count with five
# LiveCodeBench problems (the tiny set of tests/data, three of which pass).
AIME_ROWS = 30
LCB_ROWS = 5
GPQA_ROWS = (4_395 - AIME_ROWS * 8 - LCB_ROWS * 3) // 5 + 1
PERF_ROWS = 48
C_MAX = 40


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _gpt_oss_files(tmp_path: Path, vocab: Path) -> tuple[Path, Path]:
    """The run's YAML file and the oracle's dataset: every accuracy prompt's
    Harmony ids (effort high) with its answer, and the performance set's
    pre-tokenized prompts (effort low, as perf_eval_ref.parquet was built)."""
    encode = harmony_encoder(str(vocab)).encode
    aime = [{"question": f"Compute {i} + {i}.", "answer": str(2 * i)} for i in range(AIME_ROWS)]
    gpqa = [
        # the reference's GPQA names the right option's column: choice1 is A
        {"question": f"Question {i}: which letter?", "ground_truth": f"choice{i % 4 + 1}"}
        for i in range(GPQA_ROWS)
    ]
    lcb = [json.loads(line) for line in LCB_TINY.read_text().splitlines()]
    assert len(lcb) == LCB_ROWS
    oracle = [
        *(
            {
                "ids": list(encode(r["question"], None, "high", DATE)),
                "text": _analysis(f"The sum is \\boxed{{{r['answer']}}}."),
            }
            for r in aime
        ),
        *(
            {
                "ids": list(encode(r["question"], None, "high", DATE)),
                "text": _analysis(f"ANSWER: {'ABCD'[int(r['ground_truth'][-1]) - 1]}"),
            }
            for r in gpqa
        ),
        *(
            {
                "ids": list(encode(r["question"], None, "high", DATE)),
                "text": _analysis(r["response"]),
            }
            for r in lcb
        ),
    ]
    # one pass of the performance set outnumbers C_max, as perf_eval_ref's 6,396
    # rows do: the Offline burst's concurrency is a pass (spec §2.3)
    perf = [
        {"input_tokens": list(encode(f"{QUESTIONS[i % 3]} ({i})", None, "low", DATE))}
        for i in range(PERF_ROWS)
    ]
    oracle += [{"ids": row["input_tokens"], "text": _analysis("fine")} for row in perf]
    oracle_file = _write(tmp_path / "oracle.jsonl", oracle)
    lcb_file = tmp_path / "livecodebench.jsonl"
    lcb_file.write_text(LCB_TINY.read_text())
    (tmp_path / "test_cases").symlink_to(LCB_TINY.parent / "test_cases")
    capped = {"generation_config_override": {"max_new_tokens": 32768}}
    config = {
        "model_params": {"name": "openai/gpt-oss-120b", "max_new_tokens": 10240},
        "endpoint_config": {"api_type": "openai_completions"},
        "datasets": [
            {
                "name": "perf-test",
                "type": "performance",
                "path": str(_write(tmp_path / "perf.jsonl", perf)),
                "parser": {"input_tokens": "input_tokens"},
            },
            {
                "name": "aime25",
                "type": "accuracy",
                "path": str(_write(tmp_path / "aime25.jsonl", aime)),
                "accuracy_config": {
                    "eval_method": "pass_at_1",
                    "ground_truth": "answer",
                    "extractor": "boxed_math_extractor",
                    "num_repeats": 8,
                },
                **capped,
            },
            {
                "name": "gpqa",
                "type": "accuracy",
                "path": str(_write(tmp_path / "gpqa.jsonl", gpqa)),
                "accuracy_config": {
                    "eval_method": "pass_at_1",
                    "ground_truth": "ground_truth",
                    "extractor": "abcd_extractor",
                    "num_repeats": 5,
                },
                **capped,
            },
            {
                "name": "livecodebench",
                "type": "accuracy",
                "path": str(lcb_file),
                "parser": {"prompt": "question"},
                "accuracy_config": {
                    "eval_method": "code_bench_scorer",
                    "extractor": "python_code_extractor",
                    "num_repeats": 3,
                    "extras": {"local_eval": True},
                },
                **capped,
            },
        ],
        "mlpe_fast": {"harmony_date": DATE},
    }
    config_file = tmp_path / "gpt-oss.yaml"
    config_file.write_text(json.dumps(config))
    return config_file, oracle_file


def _analysis(final: str) -> str:
    """An answer as gpt-oss streams it with special tokens kept: the
    analysis channel, then the final one."""
    return (
        "<|channel|>analysis<|message|>Thinking it through.<|end|>"
        f"<|start|>assistant<|channel|>final<|message|>{final}"
    )


def _gpt_oss_point(
    vocab: Path, tmp_path: Path, folder: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> str:
    """One gpt-oss-120b point with its accuracy sets (``--mode both``)
    against the oracle of :func:`_gpt_oss_files`; its printed output."""
    config, oracle = _gpt_oss_files(tmp_path, vocab)
    server = (
        *("--ttft-ms", "0", "--itl-ms", "0", "--oracle-token-chars", "64"),
        *("--oracle", f"{oracle},parser.input_tokens=ids,ground_truth=text"),
    )
    with simulated_endpoint(server) as url:
        status = main(
            [
                *("run", "-c", str(config), "--endpoints", url, "--tokenizer", str(vocab)),
                *("--mode", "both", "--mlperf-model", "gpt-oss-120b", "--concurrency", "16"),
                *("--num-samples", "32", "--report-dir", str(folder), "--no-progress", *flags),
            ]
        )
    out = capsys.readouterr().out
    assert status == 0, out
    return out


@pytest.mark.pipeline
def test_a_gpt_oss_point_with_its_accuracy_sets_passes_the_gate(
    vocab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    out = _gpt_oss_point(vocab, tmp_path, folder, capsys)
    assert "gate (gpt-oss-120b): pass" in out, out
    stored = json.loads((folder / "accuracy" / "accuracy_results.json").read_text())
    entries = {e["dataset_name"]: e for e in stored["accuracy_scores"]}
    assert entries["aime25"]["score"] == {"exact_match": 100.0}
    assert entries["gpqa"]["score"] == {"exact_match": 100.0}
    assert entries["livecodebench"]["score"] == {"exact_match": 60.0}  # 3 of 5 pass
    issued = sum(e["total_samples"] for e in entries.values())
    assert issued == AIME_ROWS * 8 + GPQA_ROWS * 5 + LCB_ROWS * 3 >= 4_395
    # on this route the answer keeps its special tokens (skip_special_tokens
    # false, as the reference asks): the analysis channel and the markers are
    # output tokens, counted by the run's tokenizer as the text reads
    tokenizer = Tokenizer.from_file(str(vocab / "tokenizer.json"))
    per_answer = len(tokenizer.encode(_analysis("fine"), add_special_tokens=False).ids)
    assert tokenizer.token_to_id("<|channel|>") in tokenizer.encode(_analysis("fine")).ids
    summary = json.loads((folder / "performance" / "result_summary.json").read_bytes())
    osl = summary["output_sequence_lengths"]
    assert (osl["min"], osl["max"], osl["total"]) == (per_answer, per_answer, 32 * per_answer)


@pytest.mark.pipeline
def test_gpt_oss_on_sglang_generate_sends_the_same_harmony_ids(
    vocab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--api-type sglang``: the Harmony ids go as ``input_ids`` to
    ``/generate``, the accuracy sets scored as on /v1/completions."""
    folder = tmp_path / "run"
    out = _gpt_oss_point(vocab, tmp_path, folder, capsys, "--api-type", "sglang")
    assert "gate (gpt-oss-120b): pass" in out, out
    assert "api_type: sglang" in (folder / "config.yaml").read_text()


@pytest.mark.pipeline
@pytest.mark.skipif(
    importlib.util.find_spec("submission_checker") is None,
    reason="the official checker is not installed",
)
def test_a_gpt_oss_curve_bundles_and_passes_the_checker(
    vocab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A whole gpt-oss-120b submission in small: a curve over the four
    mandatory bands with accuracy at each band and at the Offline point,
    bundled and read by the official checker (spec §2, §3.6-3.9, §4)."""
    config, oracle = _gpt_oss_files(tmp_path, vocab)
    server = (
        *("--ttft-ms", "2", "--itl-ms", "0.2", "--oracle-token-chars", "16"),
        *("--oracle", f"{oracle},parser.input_tokens=ids,ground_truth=text"),
    )
    report = tmp_path / "curve"
    with simulated_endpoint(server) as url:
        status = main(
            [
                *("run", "-c", str(config), "--endpoints", url, "--tokenizer", str(vocab)),
                *("--mode", "both", "--mlperf-model", "gpt-oss-120b"),
                # Ultra Low 4, Low 6, Medium 10, High 20-40 for C_max 40 (C_min 4)
                *("--concurrency", "4,6,10,20,30,36,40", "--max-concurrency", str(C_MAX)),
                *("--duration", "200ms", "--max-connections", "64"),
                *("--report-dir", str(report), "--no-progress"),
            ]
        )
    out = capsys.readouterr().out
    assert status == 0, out
    curve = json.loads((report / "pareto.json").read_text())["points"]
    assert curve[-1]["offline"] == "dedicated"
    assert sum(p["accuracy"] for p in curve) == 5  # four bands and Offline
    assert out.count("gate (gpt-oss-120b): pass") == 5, out
    system = system_file(
        tmp_path / "system.yaml",
        C_MAX,
        model_name="gpt-oss-120b",
        link_to_model="https://huggingface.co/openai/gpt-oss-120b",
        dataset="synthetic_gpt_oss",
        dataset_name="synthetic AIME25, GPQA and LiveCodeBench",
    )
    out, warnings = bundle_and_check(report, system, tmp_path / "bundle", capsys)
    expected = development_warnings(curve, C_MAX)
    assert warnings == expected, out
