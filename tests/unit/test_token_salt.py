"""The salt inside a token-id prompt (spec §2.5, issue 21): the user turn's
marker from the chat template, the salt's ids right after it, the decode
round trip, refusals in one line, 64-bit salts reproducible by seed, and the
pre-encoded bodies split at the salt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from mlpe_fast.config import RunConfig
from mlpe_fast.errors import UsageError
from mlpe_fast.load.dataset import Dataset, DatasetSpec, Sample
from mlpe_fast.load.requests import IssuedPrompts, RequestFeed, TokenPrompt, prompt_of
from mlpe_fast.load.salt import Salter
from mlpe_fast.load.token_salt import TokenSalt, token_salt_of, token_salting, user_turn_marker
from mlpe_fast.metrics.chat_template import ChatTemplate
from tests.data_files import CHAR_CHAT_TOKENIZER

HARMONY = (
    "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
LLAMA3 = (
    "<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>"
    "\n\n{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
DEEPSEEK = (
    "<\uff5cbegin▁of▁sentence\uff5c>{% for m in messages %}"
    "{% if m.role == 'system' %}{{ m.content }}"
    "{% elif m.role == 'user' %}<\uff5cUser\uff5c>{{ m.content }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<\uff5cAssistant\uff5c><think>\n{% endif %}"
)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = [
    "<|start|>",
    "<|message|>",
    "<|end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<\uff5cbegin▁of▁sentence\uff5c>",
    "<\uff5cUser\uff5c>",
    "<\uff5cAssistant\uff5c>",
    "<|im_start|>",
    "<|im_end|>",
]
TEXTS = [
    "You are a helpful assistant. Answer briefly.",
    "What is the capital of France? Tell me about [brackets] and hex 0123456789abcdef.",
    "system user assistant the of and to in is that",
] * 20


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE whose merges span spaces and words, with the chat
    models' special tokens; its directory gets a template per test."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TEXTS, trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    out = tmp_path_factory.mktemp("bpe")
    tokenizer.save(str(out / "tokenizer.json"))
    return out


def with_template(bpe: Path, tmp_path: Path, template: str | None) -> Path:
    """A copy of the BPE tokenizer directory carrying ``template``."""
    (tmp_path / "tokenizer.json").write_bytes((bpe / "tokenizer.json").read_bytes())
    config = {} if template is None else {"chat_template": template}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def tokenize(directory: Path, text: str) -> tuple[int, ...]:
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    return tuple(tokenizer.encode(text, add_special_tokens=False).ids)


def decode(directory: Path, ids: tuple[int, ...]) -> str:
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def token_dataset(*ids: tuple[int, ...]) -> Dataset:
    spec = DatasetSpec(path="tokens.jsonl", input_tokens_column="ids")
    return Dataset(spec=spec, columns=("ids",), samples=tuple(Sample(token_ids=i) for i in ids))


def conversation(template: str, system: str, user: str) -> str:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return ChatTemplate(template).render(messages, add_generation_prompt=True)


# The marker -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "marker"),
    [
        (HARMONY, "<|start|>user<|message|>"),
        (LLAMA3, "<|start_header_id|>user<|end_header_id|>"),
        (DEEPSEEK, "<\uff5cUser\uff5c>"),
        (CHATML, "<|im_start|>user\n"),
    ],
)
def test_the_user_turn_marker_comes_from_the_template_s_special_tokens(
    bpe: Path, tmp_path: Path, template: str, marker: str
) -> None:
    directory = with_template(bpe, tmp_path, template)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    found = user_turn_marker(ChatTemplate(template), tokenizer)
    assert found == tokenize(directory, marker)


def test_a_template_whose_user_header_has_no_special_token_is_refused() -> None:
    # char_chat writes <|im_start|> as plain characters: nothing marks the turn
    tokenizer = Tokenizer.from_file(str(CHAR_CHAT_TOKENIZER / "tokenizer.json"))
    template = ChatTemplate.from_tokenizer_dir(CHAR_CHAT_TOKENIZER)
    assert template is not None
    with pytest.raises(ValueError, match="no special token marks the user turn"):
        user_turn_marker(template, tokenizer)


def test_a_marker_that_also_opens_the_assistant_turn_is_refused(bpe: Path, tmp_path: Path) -> None:
    template = (
        "{% for m in messages %}<|start|>{{ m.content }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|start|>{% endif %}"
    )
    tokenizer = Tokenizer.from_file(str(with_template(bpe, tmp_path, template) / "tokenizer.json"))
    with pytest.raises(ValueError, match="also opens the assistant turn"):
        user_turn_marker(ChatTemplate(template), tokenizer)


# The salt's ids and where they go ---------------------------------------------------


@pytest.mark.parametrize("template", [HARMONY, LLAMA3, DEEPSEEK, CHATML])
def test_salt_ids_go_right_after_the_last_marker_and_decode_to_the_salted_text(
    bpe: Path, tmp_path: Path, template: str
) -> None:
    directory = with_template(bpe, tmp_path, template)
    system, user = "You are a helpful assistant.", "What is the capital of France?"
    text = conversation(template, system, user)
    ids = tokenize(directory, text)
    salting = token_salting(token_dataset(ids), str(directory), "user")
    hex_salt = b"0123456789abcdef"
    salted = salting.salted_ids(ids, 0, hex_salt)
    salt_ids = salting.token_salt.salt_ids(hex_salt)
    at = salting.positions[0]
    assert salted[at : at + len(salt_ids)] == salt_ids
    marker = salting.token_salt.marker
    assert marker is not None and ids[at - len(marker) : at] == marker
    # the salt sits between the system prompt and the user's text, once
    decoded = decode(directory, salted)
    assert decoded.count("[0123456789abcdef] ") == 1
    assert decoded.index(system) < decoded.index("[0123456789abcdef] ") < decoded.index(user)
    # and the ids decode to the text with the salt text inserted there
    head = decode(directory, ids[:at])
    assert decoded == head + "[0123456789abcdef] " + text[len(head) :]


def test_the_salt_follows_the_last_marker_of_a_multi_turn_sample(bpe: Path, tmp_path: Path) -> None:
    directory = with_template(bpe, tmp_path, HARMONY)
    ids = tokenize(
        directory,
        "<|start|>user<|message|>first<|end|><|start|>assistant<|message|>ok<|end|>"
        "<|start|>user<|message|>second<|end|><|start|>assistant",
    )
    salting = token_salting(token_dataset(ids), str(directory), "user")
    assert decode(directory, ids[salting.positions[0] :]).startswith("second")


def test_start_placement_needs_no_template(bpe: Path, tmp_path: Path) -> None:
    directory = with_template(bpe, tmp_path, None)
    ids = tokenize(directory, "What is the capital of France?")
    salting = token_salting(token_dataset(ids), str(directory), "start")
    assert salting.positions == (0,)
    salted = salting.salted_ids(ids, 0, b"00000000000000ff")
    assert decode(directory, salted) == "[00000000000000ff] What is the capital of France?"


def test_a_sample_without_the_marker_is_refused_in_one_line(bpe: Path, tmp_path: Path) -> None:
    directory = with_template(bpe, tmp_path, HARMONY)
    good = tokenize(directory, conversation(HARMONY, "sys", "hi"))
    bad = tokenize(directory, "no header here")
    with pytest.raises(UsageError) as caught:
        token_salting(token_dataset(good, bad), str(directory), "user")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "dataset tokens.jsonl: token ids (parser.input_tokens) are salted after the user "
        "turn's header, but sample 1 lacks the user header"
    )
    assert message.endswith(
        "add --no-salt, or --token-salt start (the salt before the first id: the endpoint "
        "then cannot reuse the system prompt's prefix cache)"
    )


def test_a_tokenizer_without_template_is_refused_in_one_line(bpe: Path, tmp_path: Path) -> None:
    directory = with_template(bpe, tmp_path, None)
    with pytest.raises(
        UsageError,
        match=r"^dataset tokens.jsonl: .* but tokenizer .* has no chat "
        r"template to find it by; add --no-salt, or --token-salt start",
    ):
        token_salting(token_dataset((5, 6)), str(directory), "user")


def test_a_tokenizer_whose_decoding_breaks_the_salt_is_refused() -> None:
    # char_chat decodes with a space between tokens: "[ 0 0 ..." is not the salt
    with pytest.raises(UsageError, match="does not decode the salted ids to the salted text"):
        token_salting(token_dataset((5, 6)), str(CHAR_CHAT_TOKENIZER), "start")


# Salts: 64 bits, by seed --------------------------------------------------------------


def test_token_salts_are_reproducible_by_seed_and_distinct(bpe: Path, tmp_path: Path) -> None:
    directory = with_template(bpe, tmp_path, None)
    token_salt = token_salt_of(str(directory), "start")

    def salts(seed: int) -> list[tuple[int, ...]]:
        salter = Salter(seed)
        return [token_salt.salt_ids(salter.next_hex_bytes()) for _ in range(600)]

    first = salts(7)
    assert first == salts(7)
    assert first != salts(8)
    assert len(set(first)) == len(first)
    # each is the text salt of the same Salter, 64 bits of hex
    salter = Salter(7)
    for ids in first[:20]:
        assert decode(directory, ids) == f"[{salter.next_hex()}] "


# Bodies and prompts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_type", "member"), [("openai-completions", "prompt"), ("sglang", "input_ids")]
)
def test_feed_bodies_splice_the_salt_ids_and_prompts_hold_the_ids_sent(
    bpe: Path, tmp_path: Path, api_type: str, member: str
) -> None:
    directory = with_template(bpe, tmp_path, HARMONY)
    samples = [
        tokenize(directory, conversation(HARMONY, "You are helpful.", user))
        for user in ("What is the capital?", "Tell me about hex.")
    ]
    data = token_dataset(*samples)
    run = RunConfig(model="m", api_type=api_type, tokenizer=str(directory), datasets=(data.spec,))
    feed = RequestFeed.for_phase(data, run, "performance")
    prompts = IssuedPrompts.for_run(data, run, salt=True)
    salter = Salter(run.seeds.salt_seed)
    token_salt = TokenSalt(
        Tokenizer.from_file(str(directory / "tokenizer.json")), None, "for the salts"
    )
    for _ in range(6):
        index, body = feed.next_request()
        hex_salt = salter.next_hex_bytes()
        sent = tuple(json.loads(body)[member])
        salt_ids = token_salt.salt_ids(hex_salt)
        at = feed._token_salting.positions[index]  # type: ignore[union-attr]
        assert sent == samples[index][:at] + salt_ids + samples[index][at:]
        assert feed.last_prompt == TokenPrompt(sent)
        assert prompts(index, hex_salt.decode()) == TokenPrompt(sent)
    with pytest.raises(ValueError, match="IssuedPrompts"):
        prompt_of(data.samples[0], "0011223344556677")
