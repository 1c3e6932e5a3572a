"""Synthetic prompts (``load/synthetic_spec.py``, ``load/synthetic.py``):
the syntax, and prompts whose ids re-tokenize to themselves with real
tokenizers -- a character-level one, a byte-level BPE whose merges stop at
spaces, and one whose merges cross them (where prompts must be repaired)."""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mlpe_fast.errors import UsageError
from mlpe_fast.load import synthetic as synthetic_module
from mlpe_fast.load.dataset import DatasetSpec, load_dataset, parse_dataset_arg
from mlpe_fast.load.requests import build_body_templates
from mlpe_fast.load.synthetic import synthetic_prompts, word_pool
from mlpe_fast.load.synthetic_spec import LengthDist, SyntheticSpec, parse_length
from mlpe_fast.load.token_salt import token_salting
from tests.bpe_tokenizer import train_bpe
from tests.data_files import CHAR_CHAT_TOKENIZER, CHAR_TOKENIZER, DUMMY_1K


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> str:
    rows = [json.loads(line) for line in DUMMY_1K.read_text().splitlines()]
    out = tmp_path_factory.mktemp("bpe")
    return str(train_bpe(out, [r["text_input"] for r in rows], 2000, CHAR_CHAT_TOKENIZER))


@pytest.fixture(scope="module")
def merging(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A byte-level BPE with no pre-tokenizer split: it learns merges across
    spaces ("Ġtheir Ġown"), so prompts of words re-tokenize to other ids."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta"]
    rng = random.Random(3)
    corpus = [" ".join(rng.choices(words, k=12)) for _ in range(400)]
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer)
    out = tmp_path_factory.mktemp("merging")
    tokenizer.save(str(out / "tokenizer.json"))
    return str(out)


def _spec(text: str, tokenizer: str, form: str = "ids", cap: int | None = 64) -> SyntheticSpec:
    spec = parse_dataset_arg(text).synthetic
    assert spec is not None
    return msgspec.structs.replace(spec, tokenizer=tokenizer, form=form, osl_cap=cap, seed=11)


@functools.cache
def _tokenizer(name: str) -> Tokenizer:
    return Tokenizer.from_file(str(Path(name) / "tokenizer.json"))


def _encode(tokenizer: str, text: str) -> list[int]:
    return list(_tokenizer(tokenizer).encode(text, add_special_tokens=False).ids)


# The syntax ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "dist"),
    [
        ("256", LengthDist(kind="fixed", a=256)),
        ("fixed(256)", LengthDist(kind="fixed", a=256)),
        ("normal(1024, 128)", LengthDist(kind="normal", a=1024, b=128)),
        ("uniform(10,20)", LengthDist(kind="uniform", a=10, b=20)),
        ("hist(128:3,1024:1.5)", LengthDist(kind="hist", bins=((128, 3.0), (1024, 1.5)))),
        ("histogram(7:1)", LengthDist(kind="hist", bins=((7, 1.0),))),
    ],
)
def test_each_distribution_reads_and_writes_itself(text: str, dist: LengthDist) -> None:
    assert parse_length(text, "isl") == dist
    assert parse_length(dist.text, "isl") == dist


def test_a_histogram_file_takes_three_spellings_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("# ISL histogram\n128:3\n256 2   # tail\n\n512, 1\n")
    assert parse_length(f"hist(@{path})", "isl").bins == ((128, 3.0), (256, 2.0), (512, 1.0))
    path.write_text("128:3\n256-2\n")
    with pytest.raises(UsageError, match=rf"^{path}:2: '256-2' is not LEN:WEIGHT"):
        parse_length(f"hist(@{path})", "isl")


def test_a_spec_reads_as_the_reference_s_dataset_options() -> None:
    spec = parse_dataset_arg(
        "perf:synthetic:isl=normal(64,8),osl=uniform(4,8),prefix=16,samples=20,seed=3,name=r"
    )
    assert (spec.display_name, spec.type, spec.pre_tokenized) == ("r", "performance", False)
    assert spec.synthetic == SyntheticSpec(
        isl=LengthDist(kind="normal", a=64, b=8),
        osl=LengthDist(kind="uniform", a=4, b=8),
        prefix=16,
        samples=20,
        seed=3,
    )
    assert spec.path == "synthetic:isl=normal(64,8),osl=uniform(4,8),prefix=16,samples=20,seed=3"
    assert parse_dataset_arg(spec.path).synthetic == spec.synthetic


# The prompts -----------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
@pytest.mark.parametrize("form", ["ids", "text"])
def test_every_prompt_re_tokenizes_to_its_exact_length(tokenizer: str, form: str, bpe: str) -> None:
    name = str(CHAR_TOKENIZER) if tokenizer == "char" else bpe
    spec = _spec("synthetic:isl=uniform(30,90),osl=normal(20,6),prefix=12,samples=60", name, form)
    prompts = synthetic_prompts(spec)
    pool = word_pool(name)
    assert len(prompts.ids) == 60 and len(set(prompts.ids)) == 60
    assert all(30 <= len(ids) <= 90 for ids in prompts.ids)
    assert all(ids[:12] == prompts.prefix_ids for ids in prompts.ids)
    assert all(1 <= n <= 64 for n in prompts.output_tokens)
    if form == "ids":
        # the whole prompt, as a server would re-encode its text
        for ids in prompts.ids:
            assert _encode(name, pool.text(ids)) == list(ids)
    else:
        # each message on its own: the system prompt (the prefix), the user's
        assert _encode(name, prompts.prefix_text) == list(prompts.prefix_ids)
        for ids, text in zip(prompts.ids, prompts.texts, strict=True):
            assert _encode(name, text) == list(ids[12:])


def test_the_prompts_are_the_seed_s_alone(bpe: str) -> None:
    spec = _spec("synthetic:isl=normal(40,10),osl=4,samples=30", bpe)
    same = synthetic_prompts(msgspec.structs.replace(spec, samples=30))
    synthetic_prompts.cache_clear()
    assert synthetic_prompts(spec) == same  # built again, not read from the cache
    other_osl = synthetic_prompts(msgspec.structs.replace(spec, osl=parse_length("9", "osl")))
    assert other_osl.ids == same.ids and set(other_osl.output_tokens) == {9}
    assert synthetic_prompts(msgspec.structs.replace(spec, seed=12)).ids != same.ids


def test_lengths_follow_their_distribution(bpe: str) -> None:
    spec = _spec("synthetic:isl=hist(20:3,40:1),osl=uniform(2,5),samples=400", bpe)
    prompts = synthetic_prompts(spec)
    isl = Counter(len(ids) for ids in prompts.ids)
    assert set(isl) == {20, 40} and 2.2 < isl[20] / isl[40] < 4.0
    assert set(prompts.output_tokens) == {2, 3, 4, 5}
    normal = synthetic_prompts(_spec("synthetic:isl=normal(50,5),osl=4,samples=400", bpe))
    mean = sum(map(len, normal.ids)) / 400
    assert 49 < mean < 51


def test_merges_across_spaces_are_repaired_until_every_prompt_is_exact(merging: str) -> None:
    spec = _spec("synthetic:isl=40,osl=4,samples=40", merging)
    pool = word_pool(merging)
    drawn = [pool.draw(random.Random(k), 40, opening=True) for k in range(40)]
    # drawn as they come, prompts of this tokenizer's words re-tokenize otherwise
    assert any(_encode(merging, pool.text(ids)) != ids for ids in drawn)
    prompts = synthetic_prompts(spec)
    for ids in prompts.ids:
        assert len(ids) == 40 and _encode(merging, pool.text(ids)) == list(ids)


def test_a_prompt_that_cannot_be_repaired_is_one_line(
    merging: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(synthetic_module, "REPAIRS", 0)
    spec = _spec("synthetic:isl=40,osl=4,samples=40,seed=5", merging)
    with pytest.raises(UsageError, match=r"after 0 draws: its words merge across spaces"):
        synthetic_prompts(msgspec.structs.replace(spec, seed=99))


def test_a_dataset_gives_each_sample_its_osl_as_its_cap(bpe: str) -> None:
    spec = _spec("synthetic:isl=24,osl=uniform(3,6),prefix=8,samples=10", bpe)
    ids = load_dataset(DatasetSpec(path=spec.text, synthetic=spec))
    templates = build_body_templates(ids, model="m", api_type="openai-completions", salt=False)
    for sample, template in zip(ids.samples, templates, strict=True):
        body = msgspec.json.decode(template.render())
        assert body["prompt"] == list(sample.token_ids or ())
        assert body["max_tokens"] == sample.output_tokens
    text = msgspec.structs.replace(spec, form="text")
    chat = load_dataset(DatasetSpec(path=text.text, synthetic=text))
    assert {s.system for s in chat.samples} == {synthetic_prompts(text).prefix_text}
    body = msgspec.json.decode(build_body_templates(chat, model="m", salt=False)[0].render())
    assert body["max_completion_tokens"] == chat.samples[0].output_tokens


@pytest.mark.parametrize(("placement", "at"), [("user", 8), ("start", 0)])
def test_the_salt_of_synthetic_ids_goes_after_the_shared_prefix(
    bpe: str, placement: str, at: int
) -> None:
    spec = _spec("synthetic:isl=24,osl=3,prefix=8,samples=5", bpe)
    dataset = load_dataset(DatasetSpec(path=spec.text, synthetic=spec))
    salting = token_salting(dataset, bpe, placement)  # type: ignore[arg-type]
    assert salting.positions == (at,) * 5
    sample = dataset.samples[0].token_ids
    assert sample is not None
    salted = salting.salted_ids(sample, 0, b"0123456789abcdef")
    assert salted[:at] == sample[:at] and salted[-(24 - at) :] == sample[at:]


def test_a_tokenizer_without_word_tokens_is_refused(tmp_path: Path) -> None:
    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0, "1": 1, "2": 2}, unk_token="<unk>"))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(UsageError, match=r"too few word tokens \(0\) to build synthetic prompts"):
        word_pool(str(tmp_path))
