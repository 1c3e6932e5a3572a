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
from tests.integration.tally_sim import SCRIPT, read_prompt_kinds, read_tally, read_token_prompts

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


# The salt in the token stream (spec §2.5) ------------------------------------------------

HARMONY = (
    "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)


@pytest.fixture(scope="module")
def harmony_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small byte-level BPE with Harmony's header tokens and a template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(["You are helpful. What is [0a1b] in hex?"] * 20, trainer)
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True) for t in ("<|start|>", "<|message|>", "<|end|>")]
    )
    out = tmp_path_factory.mktemp("harmony")
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"chat_template": HARMONY}))
    return out


def test_a_token_dataset_is_salted_by_default_in_the_token_stream(
    endpoint: str, harmony_tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(harmony_tokenizer / "tokenizer.json"))
    texts = [
        f"<|start|>system<|message|>You are helpful.<|end|><|start|>user<|message|>{q}<|end|>"
        "<|start|>assistant"
        for q in ("What is hex?", "What is 0a1b?")
    ]
    samples = [tuple(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts]
    path = tmp_path / "harmony.jsonl"
    path.write_text("".join(json.dumps({"ids": list(ids)}) + "\n" for ids in samples))
    folder = tmp_path / "run"
    args = [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "salted-ids"),
        *("--tokenizer", str(harmony_tokenizer), "--dataset", f"{path},parser.input_tokens=ids"),
        *("--max-output-tokens", "4", "--api-type", "openai_completions", "--num-samples", "6"),
        *("--warmup-requests", "2", "--report-dir", str(folder)),
    ]
    status = main(args)
    assert status == 0, capsys.readouterr().err
    received = read_token_prompts(endpoint, "salted-ids")
    assert len(received) == 8  # 2 warmup + 6 measured
    marker = tuple(tokenizer.encode("<|start|>user<|message|>", add_special_tokens=False).ids)
    salts = []
    for sent in received:
        # a sample with ids inserted right after its user header, nothing else changed
        (sample,) = [s for s in samples if _split_at_salt(s, sent, marker) is not None]
        salt_ids = _split_at_salt(sample, sent, marker)
        assert salt_ids is not None
        salt = tokenizer.decode(list(salt_ids), skip_special_tokens=False)
        assert len(salt) == 19 and salt[0] == "[" and salt[-2:] == "] "
        int(salt[1:17], 16)  # 16 hex digits: 64 bits
        salts.append(salt)
    # distinct across every query: the measured phase continues the warmup's
    # salt stream (one generator, as the reference)
    assert len(set(salts)) == len(salts)

    issued = [
        json.loads(line)["data"]
        for line in (folder / "events.jsonl").read_text().splitlines()
        if '"sample.issued"' in line
    ]
    assert sorted(tuple(data[2]) for data in issued) == sorted(received[2:])
    summary = json.loads((folder / "performance" / "result_summary.json").read_bytes())
    assert summary["input_sequence_lengths"]["total"] == sum(map(len, received[2:]))


def test_token_salt_start_puts_the_salt_before_the_first_id(
    endpoint: str, harmony_tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --token-salt start: every prompt is the salt's ids, then a sample's ids
    # unchanged (no header is looked for)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(harmony_tokenizer / "tokenizer.json"))
    samples = [tuple(tokenizer.encode(q).ids) for q in ("What is hex?", "You are helpful.")]
    path = tmp_path / "plain.jsonl"
    path.write_text("".join(json.dumps({"ids": list(ids)}) + "\n" for ids in samples))
    args = [
        *("run", "--no-progress", "--endpoints", endpoint, "--model", "salt-first"),
        *("--tokenizer", str(harmony_tokenizer), "--dataset", f"{path},parser.input_tokens=ids"),
        *("--max-output-tokens", "4", "--api-type", "openai_completions", "--num-samples", "6"),
        *("--token-salt", "start"),
    ]
    assert main(args) == 0, capsys.readouterr().err
    received = read_token_prompts(endpoint, "salt-first")
    assert len(received) == 6
    salts = set()
    for sent in received:
        (sample,) = [s for s in samples if sent[len(sent) - len(s) :] == s]
        salt = tokenizer.decode(list(sent[: len(sent) - len(sample)]), skip_special_tokens=False)
        assert len(salt) == 19 and salt[0] == "[" and salt[-2:] == "] "
        salts.add(salt)
    assert len(salts) == 6  # a salt of its own for each query


def _split_at_salt(
    sample: tuple[int, ...], sent: tuple[int, ...], marker: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The ids ``sent`` has between ``sample``'s last ``marker`` and the
    rest of ``sample``; None if ``sent`` is not ``sample`` so salted."""
    starts = [i for i in range(len(sample)) if sample[i : i + len(marker)] == marker]
    at = starts[-1] + len(marker)
    extra = len(sent) - len(sample)
    if extra <= 0 or sent[:at] != sample[:at] or sent[at + extra :] != sample[at:]:
        return None
    return sent[at : at + extra]


@pytest.mark.parametrize(
    "warmup", [(), ("--warmup-requests", "2", "--no-warmup-salt")], ids=["", "after a warmup"]
)
def test_a_token_salt_that_cannot_be_placed_is_one_line_and_status_2(
    endpoint: str, token_dataset: str, capsys: pytest.CaptureFixture[str], warmup: tuple[str, ...]
) -> None:
    # the demo tokenizer has no chat template: no user header to salt after;
    # said before any load, an unsalted warmup's included
    flags = ("--api-type", "openai_completions", "--num-samples", "2", *warmup)
    assert main(_run(endpoint, "unplaceable", token_dataset, *flags)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("mlpe-fast: dataset ")
    assert line.endswith(
        "token ids (parser.input_tokens) are salted after the user turn's header, but tokenizer "
        f"{DEMO_TOKENIZER} has no chat template to find it by; add --no-salt, or --token-salt "
        "start (the salt before the first id: the endpoint then cannot reuse the system "
        "prompt's prefix cache)"
    )
    assert read_tally(endpoint, "unplaceable") == Counter()
