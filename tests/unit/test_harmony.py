"""Harmony prompts (load/harmony.py): the rendered conversation, its ids,
the refusals, and the run configuration that decides where they apply."""

from __future__ import annotations

import argparse
import datetime
import json
import os
from pathlib import Path

import msgspec
import pytest
from tokenizers import Tokenizer

from mlpe_fast.config import RunConfig, add_run_arguments, resolve
from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import load_dataset
from mlpe_fast.load.harmony import HarmonyEncoder, HarmonyPrompts, harmony_encoder, harmony_text
from mlpe_fast.load.token_salt import token_salting
from mlpe_fast.sim.tokenizer import DEMO_TOKENIZER
from tests.harmony_tokenizer import harmony_tokenizer

# openai-harmony's rendering of Harmonizer's conversation (system content
# with effort and date, then the user prompt, for completion by the
# assistant), written out from the format's documentation.
EXPECTED = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n"
    "Current date: 2026-12-02\n"
    "\n"
    "Reasoning: high\n"
    "\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    "<|end|><|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant"
)


def resolve_run_config(argv: list[str], yaml: dict[str, object] | None = None) -> RunConfig:
    parser = argparse.ArgumentParser(prog="mlpe-fast run")
    add_run_arguments(parser)
    return resolve(parser.parse_args(argv), yaml or {})


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return harmony_tokenizer(tmp_path_factory.mktemp("harmony"), ["What is 2 + 2?"])


def test_the_conversation_is_rendered_as_openai_harmony_renders_it() -> None:
    assert harmony_text("What is 2 + 2?", None, "high", "2026-12-02") == EXPECTED
    with_system = harmony_text("Q", "Be brief.", "low", "2026-01-31")
    assert "Reasoning: low" in with_system and "Current date: 2026-01-31" in with_system
    assert (
        "<|end|><|start|>developer<|message|># Instructions\n\nBe brief.<|end|>"
        "<|start|>user<|message|>Q<|end|><|start|>assistant"
    ) in with_system


def test_the_ids_are_the_markers_and_each_text_encoded_alone(vocab: Path) -> None:
    tokenizer = Tokenizer.from_file(str(vocab / "tokenizer.json"))
    ids = HarmonyEncoder(tokenizer, str(vocab)).encode("What is 2 + 2?", None, "high", "2026-12-02")
    assert tokenizer.decode(list(ids), skip_special_tokens=False) == EXPECTED
    start, message, end = (
        tokenizer.token_to_id(t) for t in ("<|start|>", "<|message|>", "<|end|>")
    )
    assert ids.count(start) == 3 and ids.count(message) == 2 and ids.count(end) == 2
    # between markers, each text is what the tokenizer makes of it alone
    user_at = ids.index(message, ids.index(end)) + 1
    prompt_ids = ids[user_at : ids.index(end, user_at)]
    assert list(prompt_ids) == tokenizer.encode("What is 2 + 2?", add_special_tokens=False).ids


def test_a_marker_inside_a_prompt_stays_text(vocab: Path) -> None:
    """openai-harmony encodes text with encode_ordinary: "<|end|>" typed
    by a user is not the end of the message."""
    tokenizer = Tokenizer.from_file(str(vocab / "tokenizer.json"))
    encoder = HarmonyEncoder(tokenizer, str(vocab))
    plain = encoder.encode("a b", None, "high", "2026-12-02")
    tricky = encoder.encode("a <|end|> b", None, "high", "2026-12-02")
    end = tokenizer.token_to_id("<|end|>")
    assert plain.count(end) == tricky.count(end) == 2
    assert tokenizer.decode(list(tricky), skip_special_tokens=False).count("<|end|>") == 3
    # the run's own tokenizer still reads markers as markers
    assert tokenizer.encode("<|end|>", add_special_tokens=False).ids == [end]


def test_a_tokenizer_without_the_harmony_tokens_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError) as error:
        harmony_encoder(DEMO_TOKENIZER)
    message = str(error.value)
    assert "\n" not in message and "has no Harmony token <|start|>" in message


def test_a_loaded_dataset_is_token_ids_salted_after_the_user_header(
    vocab: Path, tmp_path: Path
) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "4"}) + "\n")
    config = _config(vocab, f"{path}")
    (spec,) = config.datasets
    assert spec.harmony == HarmonyPrompts(
        tokenizer=str(vocab), reasoning_effort="low", conversation_start_date="2026-12-02"
    )
    dataset = load_dataset(spec)
    (sample,) = dataset.samples
    assert sample.prompt is None and sample.token_ids is not None
    tokenizer = Tokenizer.from_file(str(vocab / "tokenizer.json"))
    text = tokenizer.decode(list(sample.token_ids), skip_special_tokens=False)
    assert text == EXPECTED.replace("Reasoning: high", "Reasoning: low")
    salting = token_salting(dataset, str(vocab), "user")
    (at,) = salting.positions
    assert tokenizer.decode(list(sample.token_ids[:at]), skip_special_tokens=False).endswith(
        "<|start|>user<|message|>"
    )


def _config(vocab: Path, *datasets: str, **flags: str) -> RunConfig:
    argv = ["--model", "m", "--tokenizer", str(vocab), "--api-type", "openai-completions"]
    for dataset in datasets:
        argv += ["--dataset", dataset]
    argv += ["--harmony-date", flags.pop("date", "2026-12-02")]
    for flag, value in flags.items():
        argv += [f"--{flag.replace('_', '-')}", value]
    return resolve_run_config(argv)


def test_the_effort_is_the_phase_s_unless_the_dataset_or_run_names_one(
    vocab: Path, tmp_path: Path
) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"prompt": "p", "ground_truth": "g"}) + "\n")
    config = _config(vocab, str(path), f"acc:{path},name=acc")
    efforts = {d.type: d.harmony.reasoning_effort for d in config.datasets}
    assert efforts == {"performance": "low", "accuracy": "high"}
    yaml: dict[str, object] = {
        "model_params": {
            "name": "m",
            "chat_template_kwargs": {"reasoning_effort": "Medium"},
        },
        "endpoint_config": {"api_type": "openai_completions", "endpoints": ["http://x"]},
        "datasets": [
            {"name": "p", "path": str(path), "type": "performance"},
            {
                "name": "a",
                "path": str(path),
                "type": "accuracy",
                "generation_config_override": {
                    "chat_template_kwargs": {"reasoning_effort": "high"}
                },
            },
        ],
        "mlpe_fast": {"harmony": "on", "harmony_date": "2026-01-02"},
    }
    config = resolve_run_config(["--tokenizer", str(vocab)], yaml)
    efforts = {d.type: d.harmony.reasoning_effort for d in config.datasets}
    assert efforts == {"performance": "medium", "accuracy": "high"}
    assert config.harmony_date == "2026-01-02"


def test_the_date_defaults_to_the_day_of_the_run(vocab: Path, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"prompt": "p"}) + "\n")
    argv = ["--model", "m", "--tokenizer", str(vocab), "--api-type", "openai-completions"]
    config = resolve_run_config([*argv, "--dataset", str(path)])
    assert config.harmony_date == datetime.date.today().isoformat()
    assert config.datasets[0].harmony is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--harmony", "on"],
            "--harmony on: Harmony prompts are sent as token ids to /v1/completions",
        ),
        (["--harmony", "maybe"], "--harmony: 'maybe' is not one of auto, on, off"),
        (["--harmony-date", "02/12/2026"], "--harmony-date: expected a date as YYYY-MM-DD"),
    ],
)
def test_mistakes_are_one_line(argv: list[str], message: str, tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"prompt": "p"}) + "\n")
    with pytest.raises(UsageError) as error:
        resolve_run_config(["--model", "m", "--dataset", str(path), *argv])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_on_with_a_tokenizer_that_is_not_harmony_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"prompt": "p"}) + "\n")
    argv = ["--model", "m", "--dataset", str(path), "--tokenizer", DEMO_TOKENIZER]
    with pytest.raises(UsageError, match=r"--harmony on: tokenizer .* has no Harmony token"):
        resolve_run_config([*argv, "--api-type", "openai-completions", "--harmony", "on"])
    # auto leaves a vocabulary without the tokens alone: the prompts stay text
    config = resolve_run_config([*argv, "--api-type", "openai-completions"])
    assert config.datasets[0].harmony is None and config.harmony_date is None
    # and so does off, with a Harmony vocabulary
    off = resolve_run_config([*argv, "--api-type", "openai-completions", "--harmony", "off"])
    assert off.datasets[0].harmony is None


def test_a_conversation_dataset_is_refused_at_load(vocab: Path, tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    (spec,) = _config(vocab, str(path)).datasets
    with pytest.raises(UsageError, match="Harmony prompts are built from a prompt column"):
        load_dataset(spec)


@pytest.mark.skipif(
    not os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    or not os.environ.get("MLPE_FAST_GPT_OSS_TOKENIZER"),
    reason="openai-harmony's vocabulary (TIKTOKEN_ENCODINGS_BASE) and the gpt-oss tokenizer "
    "(MLPE_FAST_GPT_OSS_TOKENIZER) are not on this machine",
)
def test_the_ids_are_openai_harmony_s() -> None:  # pragma: no cover - needs the real files
    """Where both vocabularies are at hand, the ids are the package's."""
    harmony = pytest.importorskip("openai_harmony")
    encoding = harmony.load_harmony_encoding(harmony.HarmonyEncodingName.HARMONY_GPT_OSS)
    system = (
        harmony.SystemContent.new()
        .with_reasoning_effort(harmony.ReasoningEffort.HIGH)
        .with_conversation_start_date("2026-12-02")
    )
    encoder = harmony_encoder(os.environ["MLPE_FAST_GPT_OSS_TOKENIZER"])
    for prompt in ("What is 2 + 2?", "Écrivez <|end|> ici\n\n  deux fois.", "x" * 300):
        conversation = harmony.Conversation.from_messages(
            [
                harmony.Message.from_role_and_content(harmony.Role.SYSTEM, system),
                harmony.Message.from_role_and_content(harmony.Role.USER, prompt),
            ]
        )
        expected = encoding.render_conversation_for_completion(conversation, harmony.Role.ASSISTANT)
        assert list(encoder.encode(prompt, None, "high", "2026-12-02")) == expected


def test_prompts_settings_are_plain_data() -> None:
    prompts = HarmonyPrompts(
        tokenizer="t", reasoning_effort="low", conversation_start_date="2026-12-02"
    )
    assert msgspec.json.decode(msgspec.json.encode(prompts), type=HarmonyPrompts) == prompts
