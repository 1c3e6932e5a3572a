"""The exact fast path for byte-level BPE token counts (``metrics/fast_bpe``).

Every count is checked against the tokenizer itself:
``encode(text, add_special_tokens=False)``.  The tokenizers are trained on
the spot (small vocabularies, once per module) in the shapes that matter:
GPT-2 (``ByteLevel`` with its own regex), Llama 3 and o200k (``Split`` +
``ByteLevel``), a DeepSeek-V3-like chain of three ``Split`` levels, and one
with added tokens of every kind.  The regex translator is checked against
Oniguruma itself through ``pre_tokenizers.Split``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from mlpe_fast.metrics.fast_bpe import (
    GPT2_PATTERN,
    FastBPECounter,
    PatternNotTranslatable,
    ineligibility_reason,
    translate_pattern,
)
from tests.data_files import TOKENIZERS

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tiktoken's o200k_base, as GPT-OSS's tokenizer.json spells it.
O200K_PATTERN = "|".join(
    (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    )
)
# DeepSeek V3's chain: digits, CJK runs (no ASCII member), then words.
DEEPSEEK_PATTERNS = (
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)

SPECIALS = ("<|im_start|>", "<|im_end|>")
PLAIN_ADDED = "<tool>"  # not special, not normalized
OVERLAPPING = "<|im"  # a prefix of two others: the longest match wins
PHASE_ONE = "bc"  # not normalized: found before the normalized "abcd"
PHASE_TWO = "abcd"
LSTRIP = "[MASK]"
ADDED_STRINGS = (*SPECIALS, PLAIN_ADDED, OVERLAPPING, PHASE_ONE, PHASE_TWO, LSTRIP)

# Pieces that make the regexes' alternatives compete.
FRAGMENTS = (
    " ", "  ", "   ", "\n", "\n\n", "\r\n", "\r", "\t", " \n ", "'s", "'S", "'ll", "'re", "'",
    "'t", "'D", "don't", "a", "b", "c", "e", "the", "The", " cat", "CAT", "CamelCase", "x1",
    "1", "12", "123", "1234", "99999", ".", ",", "!", "?", "...", "/", "//", "-", "--", "(", ")",
    "\"", "#", "_", "__", "\x00", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x7f",
    "<", ">", "|", "<|", "|>", "[", "]", "im", "start", "end", "tool", "MASK",
)  # fmt: skip
ASCII_TEXT = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENTS),
        st.sampled_from(ADDED_STRINGS),
        st.characters(max_codepoint=127),
    ),
    max_size=40,
).map("".join)

# Modest example counts: this file must run in a few seconds.
FEW = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def training_corpus() -> list[str]:
    rng = random.Random(7)
    words = ["".join(rng.choices("aeioubcdfgklmnprstvw", k=rng.randint(1, 8))) for _ in range(300)]
    lines = []
    for _ in range(400):
        parts: list[str] = []
        for _ in range(rng.randint(3, 20)):
            word = rng.choice(words)
            roll = rng.random()
            if roll < 0.1:
                word = word.capitalize()
            elif roll < 0.15:
                word = word.upper()
            elif roll < 0.2:
                word = str(rng.randint(0, 99999))
            elif roll < 0.25:
                word += rng.choice(("'s", "'ll", ",", ".", "!", "...", "/"))
            parts.append(word)
            parts.append(rng.choice((" ", " ", " ", " ", "  ", "\n", "\r\n", "\t", " \n")))
        lines.append("".join(parts))
    return lines


def train(
    pre_tokenizer: Any,
    *,
    normalizer: Any = None,
    ignore_merges: bool = False,
    vocab_size: int = 400,
) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tokenizer.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer)
    return tokenizer


def split_then_byte_level(*patterns: str) -> Any:
    return pre_tokenizers.Sequence(
        [
            *(pre_tokenizers.Split(Regex(p), "isolated") for p in patterns),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def with_added_tokens(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.add_special_tokens(list(SPECIALS))
    tokenizer.add_tokens(
        [
            AddedToken(PLAIN_ADDED, normalized=False),
            AddedToken(OVERLAPPING, normalized=False),
            AddedToken(PHASE_ONE, normalized=False),
            AddedToken(PHASE_TWO, normalized=True),
            AddedToken(LSTRIP, lstrip=True, normalized=False),
        ]
    )
    return tokenizer


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, Tokenizer]:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return {
        "gpt2": train(byte_level),
        "llama3": train(split_then_byte_level(LLAMA3_PATTERN), normalizer=normalizers.NFC()),
        "o200k": train(
            split_then_byte_level(O200K_PATTERN),
            normalizer=normalizers.Sequence([normalizers.NFKC()]),
        ),
        "deepseek": train(split_then_byte_level(*DEEPSEEK_PATTERNS)),
        # Two words at a time, then GPT-2's regex inside: a boundary between
        # pre-tokens can fall inside a first-level match.
        "pairs": train(split_then_byte_level(r"\p{L}+ \p{L}+", GPT2_PATTERN)),
        "added": with_added_tokens(
            train(split_then_byte_level(LLAMA3_PATTERN), ignore_merges=True)
        ),
    }


@pytest.fixture(scope="module")
def counters(tokenizers: dict[str, Tokenizer]) -> dict[str, FastBPECounter]:
    out = {}
    for name, tokenizer in tokenizers.items():
        counter = FastBPECounter.from_tokenizer(tokenizer)
        assert counter is not None, (name, ineligibility_reason(tokenizer))
        out[name] = counter
    return out


NAMES = ("gpt2", "llama3", "o200k", "deepseek", "pairs", "added")


def hf_count(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


# Eligibility ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_trained_tokenizers_are_eligible(tokenizers: dict[str, Tokenizer], name: str) -> None:
    assert ineligibility_reason(tokenizers[name]) is None


def bare(pre_tokenizer: Any = None, *, model: Any = None, normalizer: Any = None) -> Tokenizer:
    tokenizer = Tokenizer(model if model is not None else models.BPE())
    tokenizer.pre_tokenizer = (
        pre_tokenizer
        if pre_tokenizer is not None
        else pre_tokenizers.ByteLevel(add_prefix_space=False)
    )
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    return tokenizer


def byte_level_without_regex() -> Any:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)


INELIGIBLE: dict[str, tuple[Callable[[], Tokenizer], str]] = {
    "metaspace": (lambda: bare(pre_tokenizers.Metaspace()), "Metaspace"),
    "prefix space": (
        lambda: bare(pre_tokenizers.ByteLevel(add_prefix_space=True)),
        "add_prefix_space",
    ),
    "lowercase": (lambda: bare(normalizer=normalizers.Lowercase()), "Lowercase"),
    "lowercase in a sequence": (
        lambda: bare(normalizer=normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])),
        "Lowercase",
    ),
    "wordpiece": (lambda: bare(model=models.WordPiece(unk_token="[UNK]")), "WordPiece"),
    "dropout": (lambda: bare(model=models.BPE(dropout=0.1)), "dropout"),
    "split removed": (
        lambda: bare(
            pre_tokenizers.Sequence(
                [pre_tokenizers.Split(Regex(r"\s+"), "removed"), byte_level_without_regex()]
            )
        ),
        "Removed",
    ),
    "split inverted": (
        lambda: bare(
            pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(Regex(r"\s+"), "isolated", invert=True),
                    byte_level_without_regex(),
                ]
            )
        ),
        "invert=True",
    ),
    "split string": (
        lambda: bare(
            pre_tokenizers.Sequence(
                [pre_tokenizers.Split(" ", "isolated"), byte_level_without_regex()]
            )
        ),
        "string pattern",
    ),
    "split untranslatable": (
        lambda: bare(split_then_byte_level(r"^\p{L}+|\s+")),
        "not translatable",
    ),
    "split matching empty": (
        lambda: bare(split_then_byte_level(r"\p{L}*")),
        "empty string",
    ),
    "byte-level regex after split": (
        lambda: bare(
            pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(Regex(r"\p{N}"), "isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                ]
            )
        ),
        "use_regex",
    ),
    "byte level without regex alone": (lambda: bare(byte_level_without_regex()), "use_regex"),
    "digits step": (
        lambda: bare(
            pre_tokenizers.Sequence([pre_tokenizers.Digits(), byte_level_without_regex()])
        ),
        "Digits",
    ),
    "whitespace": (lambda: bare(pre_tokenizers.Whitespace()), "Whitespace"),
}


@pytest.mark.parametrize("case", sorted(INELIGIBLE))
def test_ineligible_pipelines_say_why(case: str) -> None:
    make, keyword = INELIGIBLE[case]
    tokenizer = make()
    assert FastBPECounter.from_tokenizer(tokenizer) is None
    reason = ineligibility_reason(tokenizer)
    assert reason is not None
    assert keyword in reason


def test_encode_special_tokens_is_ineligible() -> None:
    tokenizer = bare()
    tokenizer.add_special_tokens(["<s>"])
    assert ineligibility_reason(tokenizer) is None
    tokenizer.encode_special_tokens = True
    assert FastBPECounter.from_tokenizer(tokenizer) is None
    assert ineligibility_reason(tokenizer) == "encode_special_tokens is set"


@pytest.mark.parametrize("name", ["char", "char_chat"])
def test_the_char_word_level_tokenizers_are_ineligible(name: str) -> None:
    path = TOKENIZERS / name / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    model_type = json.loads(tokenizer.to_str())["model"]["type"]
    assert FastBPECounter.from_tokenizer(tokenizer) is None
    assert ineligibility_reason(tokenizer) == f"model {model_type} is not BPE"


# Regex translation ---------------------------------------------------------------------

# Each checked against Oniguruma on random ASCII text.
TRANSLATABLE = (
    GPT2_PATTERN,
    LLAMA3_PATTERN,
    O200K_PATTERN,
    *DEEPSEEK_PATTERNS,
    r"\P{L}+|\p{^N}|[^\P{L}]+",
    r"\p{Letter}+|\p{Decimal_Number}{2,}|\p{Cased Letter}|\p{lu}",
    r"\p{P}+|\p{S}|\p{C}+|\p{Zs}|\p{Latin}|\p{Han}",
    r"[\s\d]+|\S\w|\W\D",
    r"x.|a{,2}b|a+?b|c{2,3}?|d{2,}",
    r"\x41|\u0042|\x{43}|\t|\n|\v|\f|\r|\a|\e",
    r"(?<n>ab)+|(?=a)a.|(a|b)c|(?>e+)f|g++",
    r"é|[éa]|[^é]x",
    r"(?i:ab|'S)|(?i:'t)",
    r"[a-c-]|[-/]|[\--/]+|\]|\}|}|]",
    r"\bab|\Bb|(?<=a)c|(?<!a)d|\Ae|f\z|g\Z",
    r"é+|(?:é|ü)x|a(?=é)|\p{Lo}+|[\p{M}\p{Lt}](?<=é)|b(?:é)+",  # no ASCII match at all
    r"(?!é)q",
    r"t(?<!é)",
    r"é?r|s(?:é)*",
)


@pytest.mark.hypothesis
@FEW
@given(data=st.data())
def test_translations_split_like_oniguruma(data: st.DataObject) -> None:
    pattern = data.draw(st.sampled_from(TRANSLATABLE))
    text = data.draw(ASCII_TEXT)
    translated = translate_pattern(pattern)
    splitter = re.compile(f"({translated.pattern})", re.ASCII)
    expected = [
        p for p, _ in pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)
    ]
    assert [p for p in splitter.split(text) if p] == expected


# Every ASCII character next to letters, digits, quotes and line ends.
EDGE_TEXTS = (
    "".join(map(chr, range(128))),
    *(f"x{c}g{c}" for c in map(chr, range(128))),
    *(f"a'{c}1{c}{c} 'S" for c in map(chr, range(128))),
)


@pytest.mark.parametrize("pattern", TRANSLATABLE)
def test_translations_on_every_ascii_character(pattern: str) -> None:
    translated = translate_pattern(pattern)
    splitter = re.compile(f"({translated.pattern})", re.ASCII)
    oniguruma = pre_tokenizers.Split(Regex(pattern), "isolated")
    remover = pre_tokenizers.Split(Regex(pattern), "removed")
    matched = False
    for text in EDGE_TEXTS:
        expected = [p for p, _ in oniguruma.pre_tokenize_str(text)]
        assert [p for p in splitter.split(text) if p] == expected, repr(text)
        matched = matched or [p for p, _ in remover.pre_tokenize_str(text)] != [text]
    assert translated.matches_ascii == matched


def test_whitespace_class_is_oniguruma_s_not_str_isspace() -> None:
    text = "a\x1cb\x1d \x1e\x1f\x0bc\x0c"
    assert all(c.isspace() for c in "\x1c\x1d\x1e\x1f")  # what re's Unicode \s would take
    expected = [p for p, _ in pre_tokenizers.Split(Regex(r"\s+"), "removed").pre_tokenize_str(text)]
    assert expected == ["a\x1cb\x1d", "\x1e\x1f", "c"]
    translated = re.compile(translate_pattern(r"\s+").pattern, re.ASCII)
    assert [p for p in translated.split(text) if p] == expected


def test_locality() -> None:
    assert translate_pattern(LLAMA3_PATTERN).local
    assert translate_pattern(O200K_PATTERN).local
    for pattern in (r"\bab", r"\Ba", r"(?<=a)b", r"(?<!a)b", r"\Aa", r"a\z", r"a\Z"):
        assert not translate_pattern(pattern).local, pattern


# A construct each, with what a naive translation would get wrong where it is subtle.
UNTRANSLATABLE = (
    r"^a",  # Oniguruma: start of any line
    r"a$",
    r"(a)\1",
    r"\h",  # Oniguruma: hex digit; re: error
    r"[[:alpha:]]",
    r"[a&&b]",
    r"(?x)a",
    r"a(?i)b|c",  # Oniguruma: a(?i:b|c)
    r"\p{Alpha}",
    r"\p{L&}",
    r"a*",  # empty matches: the engines step past them differently
    r"(?:a?)+",
    r"a{2}+",  # Oniguruma: (a{2})+; re >= 3.11: possessive
    r"a{2}?",  # Oniguruma: (a{2})?; re: lazy a{2}
    r"(?i:\p{Lu})",  # Oniguruma does not fold properties; re would fold [A-Z]
    r"(?i:[a])",
    r"(?i:é)",
    r"(?i:.)",
    r"[]a]",
    r"[a-c-e]",
    r"\G",
    r"a{ 2}",
    r"\x{ 41}",
    r"(?#comment)a",
    r"\0",
    r"\K",
    r"\R",
    r"(?=a)*",
    r"[\s-a]",
    r"(?m:a)",
    r"a)",
    r"(a",
    r"[ab",
    r"*a",
)


@pytest.mark.parametrize("pattern", UNTRANSLATABLE)
def test_untranslatable_constructs_are_refused(pattern: str) -> None:
    with pytest.raises(PatternNotTranslatable):
        translate_pattern(pattern)


def test_case_insensitive_whole_pattern() -> None:
    translated = translate_pattern(r"(?i)ab|'s")
    found = re.compile(translated.pattern, re.ASCII).findall("AB 'S aB")
    assert found == ["AB", "'S", "aB"]


# Counting ------------------------------------------------------------------------------


@pytest.mark.hypothesis
@FEW
@given(data=st.data())
def test_counts_equal_encode_or_none(
    tokenizers: dict[str, Tokenizer], counters: dict[str, FastBPECounter], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(NAMES))
    text = data.draw(ASCII_TEXT)
    count = counters[name].count(text)
    if count is None:  # only a flagged added token may refuse ASCII text here
        assert name == "added" and LSTRIP in text
    else:
        assert count == hf_count(tokenizers[name], text)


@pytest.mark.hypothesis
@FEW
@given(data=st.data())
def test_count_with_suffix_equals_encode_or_none(
    tokenizers: dict[str, Tokenizer], counters: dict[str, FastBPECounter], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(NAMES))
    text = data.draw(ASCII_TEXT)
    boundary = data.draw(st.integers(0, len(text)))
    pair = counters[name].count_with_suffix(text, boundary)
    if pair is None:
        assert name == "added" and LSTRIP in text
    else:
        tokenizer = tokenizers[name]
        assert pair == (hf_count(tokenizer, text), hf_count(tokenizer, text[boundary:]))


@pytest.mark.hypothesis
@FEW
@given(
    data=st.data(),
    text=ASCII_TEXT,
    intruder=st.characters(min_codepoint=128, exclude_categories=("Cs",)),
)
def test_non_ascii_text_is_refused(
    counters: dict[str, FastBPECounter], data: st.DataObject, text: str, intruder: str
) -> None:
    counter = counters[data.draw(st.sampled_from(NAMES))]
    where = data.draw(st.integers(0, len(text)))
    text = text[:where] + intruder + text[where:]
    assert counter.count(text) is None
    assert counter.count_with_suffix(text, data.draw(st.integers(0, len(text)))) is None


def test_lines_of_generated_prose(
    tokenizers: dict[str, Tokenizer], counters: dict[str, FastBPECounter]
) -> None:
    texts = training_corpus()[:60]
    for name in NAMES:
        encodings = tokenizers[name].encode_batch_fast(texts, add_special_tokens=False)
        assert [counters[name].count(t) for t in texts] == [len(e) for e in encodings], name


ADDED_CASES = (
    "<|im_start|>assistant\nHello<|im_end|>",
    "<|im_start|><|im_end|><|im",
    "<|im<|im_start|>",
    "abcd xabcdx abc bcd",  # "bc" (not normalized) wins over "abcd" (normalized)
    "call <tool>{}</tool>",
    "",
)


@pytest.mark.parametrize("text", ADDED_CASES)
def test_added_tokens(
    tokenizers: dict[str, Tokenizer], counters: dict[str, FastBPECounter], text: str
) -> None:
    tokenizer = tokenizers["added"]
    assert counters["added"].count(text) == hf_count(tokenizer, text)
    for boundary in range(len(text) + 1):
        pair = counters["added"].count_with_suffix(text, boundary)
        assert pair == (hf_count(tokenizer, text), hf_count(tokenizer, text[boundary:]))


def test_phase_order_matters_for_these_added_tokens(tokenizers: dict[str, Tokenizer]) -> None:
    # The premise of the case above: one leftmost-longest pass would take "abcd".
    tokens = tokenizers["added"].encode("abcd", add_special_tokens=False).tokens
    assert tokens[1] == PHASE_ONE


def test_flagged_added_token_is_refused(counters: dict[str, FastBPECounter]) -> None:
    assert counters["added"].count(f"a {LSTRIP} b") is None
    assert counters["added"].count_with_suffix(f"a {LSTRIP} b", 2) is None
    assert counters["added"].count("a MASK b") is not None


def test_normalized_added_token_matches_its_normalized_form() -> None:
    # NFKC turns the ligature into ASCII "fix": tokenizers then splits "fix"
    # out of ASCII text.
    tokenizer = train(pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=300)
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.add_tokens([AddedToken("\ufb01x", normalized=True)])
    counter = FastBPECounter.from_tokenizer(tokenizer)
    assert counter is not None
    text = "a fix to prefix fixed"
    added_id = tokenizer.token_to_id("\ufb01x")
    assert tokenizer.encode(text, add_special_tokens=False).ids.count(added_id) == 3
    assert counter.count(text) == hf_count(tokenizer, text)


class FindallSpy:
    def __init__(self, counter: FastBPECounter) -> None:
        self.calls = 0
        self._findall = counter._findall
        counter._findall = self

    def __call__(self, text: str) -> list[str]:
        self.calls += 1
        return self._findall(text)


@pytest.mark.parametrize(
    ("boundary", "scans"),
    [(0, 1), (5, 1), (11, 1), (12, 1), (18, 1), (3, 2), (6, 2), (13, 2)],
)
def test_one_scan_at_a_pre_token_boundary(
    tokenizers: dict[str, Tokenizer], boundary: int, scans: int
) -> None:
    #       "Hello| world|,| again|" with GPT-2's regex
    text = "Hello world, again"
    counter = FastBPECounter.from_tokenizer(tokenizers["gpt2"])
    assert counter is not None
    spy = FindallSpy(counter)
    pair = counter.count_with_suffix(text, boundary)
    assert spy.calls == scans
    tokenizer = tokenizers["gpt2"]
    assert pair == (hf_count(tokenizer, text), hf_count(tokenizer, text[boundary:]))


def test_boundary_inside_an_outer_match(
    tokenizers: dict[str, Tokenizer], counters: dict[str, FastBPECounter]
) -> None:
    # "ab cd" is one first-level match, pre-tokenized "ab", " cd"; alone,
    # " cd ef" splits " ", "cd ef" at the first level, then " ", "cd", " ef".
    tokenizer = tokenizers["pairs"]
    text = "ab cd ef"
    suffix = tokenizer.encode(text[2:], add_special_tokens=False).tokens
    assert suffix[0] == "\u0120"  # the lone space (byte-level form)
    assert counters["pairs"].count_with_suffix(text, 2) == (
        hf_count(tokenizer, text),
        len(suffix),
    )


def test_non_local_pattern_scans_twice() -> None:
    tokenizer = train(split_then_byte_level(r"\b\p{L}+|\s+|[^\s\p{L}]+"), vocab_size=300)
    counter = FastBPECounter.from_tokenizer(tokenizer)
    assert counter is not None
    spy = FindallSpy(counter)
    text = "Hello world, again"
    assert counter.count_with_suffix(text, 5) == (
        hf_count(tokenizer, text),
        hf_count(tokenizer, text[5:]),
    )
    assert spy.calls == 2


def test_splits_that_match_no_ascii_are_skipped(counters: dict[str, FastBPECounter]) -> None:
    # DeepSeek's CJK level leaves ASCII whole; counts stay exact (tests above).
    assert not translate_pattern(DEEPSEEK_PATTERNS[1]).matches_ascii
    assert len(counters["deepseek"]._levels) == len(DEEPSEEK_PATTERNS) - 1


def test_boundary_out_of_range(counters: dict[str, FastBPECounter]) -> None:
    with pytest.raises(ValueError, match="boundary"):
        counters["gpt2"].count_with_suffix("abc", 4)
    with pytest.raises(ValueError, match="boundary"):
        counters["gpt2"].count_with_suffix("abc", -1)


def test_cache_is_bounded(tokenizers: dict[str, Tokenizer]) -> None:
    counter = FastBPECounter.from_tokenizer(tokenizers["deepseek"], cache_limit=8)
    assert counter is not None
    texts = training_corpus()[:40]
    counts = [counter.count(t) for t in texts]
    assert 0 < counter.cached_words <= 8
    encodings = tokenizers["deepseek"].encode_batch_fast(texts, add_special_tokens=False)
    assert counts == [len(e) for e in encodings]


def test_cache_limit_must_be_positive(tokenizers: dict[str, Tokenizer]) -> None:
    with pytest.raises(ValueError, match="cache_limit"):
        FastBPECounter.from_tokenizer(tokenizers["gpt2"], cache_limit=0)


@pytest.fixture
def unknown_bytes_tokenizer() -> Iterator[Tokenizer]:
    # No byte alphabet: some bytes have no token; the model decides what happens.
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>"], show_progress=False)
    tokenizer.train_from_iterator(["hello world, hello there"] * 5, trainer)
    yield tokenizer


def test_unknown_bytes_follow_the_model(unknown_bytes_tokenizer: Tokenizer) -> None:
    counter = FastBPECounter.from_tokenizer(unknown_bytes_tokenizer)
    assert counter is not None
    for text in ("hello QQZZ world", "xyz\x01\x02 hello", "hello"):
        assert counter.count(text) == hf_count(unknown_bytes_tokenizer, text)
