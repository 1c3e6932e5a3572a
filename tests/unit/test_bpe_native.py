"""The exact BPE counter in C (``csrc/mlpe_bpe.c`` through ``metrics/_bpe_c``)
against its pure-Python twin (``metrics/fast_bpe``) and ``tokenizers`` itself.

For every pre-tokenizer family the C scanner hand-codes (GPT-2, Llama 3,
Qwen 2, o200k, DeepSeek V3), on tokenizers trained on the spot: the C split
equals the twin's regex split, and both implementations' counts (whole text
and suffix, one scan or two) equal ``encode(..., add_special_tokens=False)``,
on fixed cases, on Hypothesis' random ASCII (whitespace runs, digits,
contractions, punctuation, control characters) and on real prose (the
reference's prompts, tokenized by ``tests/bpe_tokenizer.py``'s BPE).  Then the
refusals (non-ASCII, added tokens, a failing model), the cache's bounds and
the selection of the implementation.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, pre_tokenizers

from mlpe_fast.metrics import _bpe
from mlpe_fast.metrics._bpe import BPECounter, bpe_counter
from mlpe_fast.metrics.fast_bpe import BYTE_LEVEL_ASCII, NATIVE_FAMILIES
from mlpe_fast.metrics.tokens import load_tokenizer
from tests.bpe_tokenizer import train_bpe
from tests.data_files import CHAR_CHAT_TOKENIZER, DUMMY_1K
from tests.unit.test_fast_bpe import (
    DEEPSEEK_PATTERNS,
    FRAGMENTS,
    LLAMA3_PATTERN,
    O200K_PATTERN,
    split_then_byte_level,
    train,
)

NATIVE = _bpe.NativeBPECounter is not None
IMPLEMENTATIONS = [
    "python",
    pytest.param(
        "native", marks=pytest.mark.skipif(not NATIVE, reason="native core not built or disabled")
    ),
]
# Qwen 2's regex: Llama 3's with single digits, spelled as Qwen's tokenizer.json does.
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
FAMILIES = ("gpt2", "llama3", "qwen2", "o200k", "deepseek_v3")

# Random ASCII where the alternatives compete: every fragment of the twin's
# tests, long whitespace and digit runs, contractions in both cases.
RUNS = st.builds(
    lambda c, n: c * n,
    st.sampled_from((" ", "\n", "\t", "\r\n", "9", "a", "A", "'", "!", "/", "\x00")),
    st.integers(1, 9),
)
TEXT = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENTS),
        st.sampled_from(("'S", "'Ll", "'rE", "'VE", "'M", "'d", "I'M", "HTTP/1.1", "x/\n/")),
        RUNS,
        st.characters(max_codepoint=127),
    ),
    max_size=40,
).map("".join)
FEW = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def trained() -> dict[str, Tokenizer]:
    return {
        "gpt2": train(pre_tokenizers.ByteLevel(add_prefix_space=False)),
        "llama3": train(split_then_byte_level(LLAMA3_PATTERN)),
        "qwen2": train(split_then_byte_level(QWEN2_PATTERN)),
        "o200k": train(split_then_byte_level(O200K_PATTERN)),
        "deepseek_v3": train(split_then_byte_level(*DEEPSEEK_PATTERNS)),
    }


def make(tokenizer: Tokenizer, implementation: str, **kwargs: Any) -> BPECounter:
    counter = bpe_counter(tokenizer, native=implementation == "native", **kwargs)
    assert counter is not None
    assert counter.implementation == implementation
    return counter


def hf(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def expected(tokenizer: Tokenizer, text: str, boundary: int) -> tuple[int, int]:
    return hf(tokenizer, text), hf(tokenizer, text[boundary:])


# Families and selection ----------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_is_recognised(trained: dict[str, Tokenizer], family: str) -> None:
    counter = bpe_counter(trained[family], native=False)
    assert counter is not None
    assert counter.family == family  # type: ignore[attr-defined]


def test_the_families_are_the_scanners() -> None:
    if NATIVE:
        from mlpe_fast.metrics._bpe_c import FAMILIES as C_FAMILIES

        assert set(C_FAMILIES) == set(NATIVE_FAMILIES)
    assert set(NATIVE_FAMILIES) == set(FAMILIES)


def test_an_unknown_pre_tokenizer_stays_with_the_twin() -> None:
    # Two words at a time, then GPT-2's regex: eligible, but no C scanner.
    tokenizer = train(split_then_byte_level(r"\p{L}+ \p{L}+", NATIVE_FAMILIES["gpt2"][0]))
    counter = bpe_counter(tokenizer)
    assert counter is not None and counter.implementation == "python"
    if NATIVE:
        with pytest.raises(ValueError, match="unknown family"):
            bpe_counter(tokenizer, native=True)


@pytest.mark.skipif(not NATIVE, reason="native core not built or disabled")
def test_the_default_is_native_where_built(trained: dict[str, Tokenizer]) -> None:
    counter = bpe_counter(trained["llama3"])
    assert counter is not None and counter.implementation == "native"


# The split -----------------------------------------------------------------------------


@pytest.mark.skipif(not NATIVE, reason="native core not built or disabled")
@pytest.mark.parametrize("family", FAMILIES)
@FEW
@given(text=TEXT)
def test_c_split_equals_the_twins_regexes(
    trained: dict[str, Tokenizer], family: str, text: str
) -> None:
    native = make(trained[family], "native")
    twin = make(trained[family], "python")
    assert native.pre_token_ends(text) == twin.pre_token_ends(text)


SPLIT_CASES = {
    # text: {family: pre-tokens}
    "don't  stop\n\n x": {
        "gpt2": ["don", "'t", " ", " stop", "\n\n", " x"],
        "llama3": ["don", "'t", " ", " stop", "\n\n", " x"],
        "o200k": ["don't", " ", " stop", "\n\n", " x"],
    },
    "I'M 12345 ok": {
        "gpt2": ["I", "'", "M", " 12345", " ok"],  # GPT-2's contractions are lower case
        "llama3": ["I", "'M", " ", "123", "45", " ok"],
        "qwen2": ["I", "'M", " ", "1", "2", "3", "4", "5", " ok"],
        "o200k": ["I'M", " ", "123", "45", " ok"],
        "deepseek_v3": ["I", "'M", " ", "123", "45", " ok"],
    },
    "a/\n/b \x00\x00c": {
        "gpt2": ["a", "/", "\n", "/", "b", " \x00\x00", "c"],
        "o200k": ["a", "/\n/", "b", " \x00\x00", "c"],
        "deepseek_v3": ["a", "/\n", "/b", " ", "\x00", "\x00c"],
    },
}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize(("text", "family"), [(t, f) for t, by in SPLIT_CASES.items() for f in by])
def test_known_splits(
    trained: dict[str, Tokenizer], implementation: str, text: str, family: str
) -> None:
    ends = make(trained[family], implementation).pre_token_ends(text)
    words = [text[a:b] for a, b in zip([0, *ends], ends, strict=False)]
    assert words == SPLIT_CASES[text][family]


# Counts against tokenizers ---------------------------------------------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("family", FAMILIES)
@FEW
@given(text=TEXT, cut=st.floats(0, 1))
def test_counts_equal_tokenizers(
    trained: dict[str, Tokenizer], implementation: str, family: str, text: str, cut: float
) -> None:
    tokenizer = trained[family]
    counter = make(tokenizer, implementation)
    boundary = round(cut * len(text))
    assert counter.count_with_suffix(text, boundary) == expected(tokenizer, text, boundary)
    assert counter.count(text) == hf(tokenizer, text)


@pytest.mark.skipif(not NATIVE, reason="native core not built or disabled")
@pytest.mark.parametrize("family", FAMILIES)
@FEW
@given(texts=st.lists(TEXT, max_size=8), cuts=st.lists(st.floats(0, 1), min_size=8))
def test_c_twin_and_tokenizers_agree_on_batches(
    trained: dict[str, Tokenizer], family: str, texts: list[str], cuts: list[float]
) -> None:
    """One counter across examples: its cache carries words from batch to
    batch, as over a run."""
    tokenizer = trained[family]
    native = COUNTERS.setdefault(family, make(tokenizer, "native"))
    twin = make(tokenizer, "python")
    boundaries = [round(c * len(t)) for t, c in zip(texts, cuts, strict=False)]
    got = native.count_pairs(texts, boundaries)
    assert got == twin.count_pairs(texts, boundaries)
    assert got == [expected(tokenizer, t, b) for t, b in zip(texts, boundaries, strict=True)]


COUNTERS: dict[str, BPECounter] = {}


@pytest.fixture(scope="module")
def prose_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    """tests/bpe_tokenizer.py's BPE (GPT-2 pre-tokenizer, special tokens) on
    the reference's prompts."""
    rows = [json.loads(line) for line in DUMMY_1K.read_text().splitlines()]
    out = train_bpe(
        tmp_path_factory.mktemp("bpe"), [r["text_input"] for r in rows], 2000, CHAR_CHAT_TOKENIZER
    )
    return load_tokenizer(str(out))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_real_prose_counts_equal_tokenizers(
    prose_tokenizer: Tokenizer, implementation: str
) -> None:
    rows = [json.loads(line) for line in DUMMY_1K.read_text().splitlines()]
    texts = [r["ref_output"] or r["text_input"] for r in rows][:400]
    texts = [t for t in texts if t.isascii()]
    assert len(texts) > 100
    rng = random.Random(3)
    boundaries = [
        rng.choice((0, len(t), t.find(" ") + 1, rng.randrange(len(t) + 1))) for t in texts
    ]
    counter = make(prose_tokenizer, implementation)
    assert counter.count_pairs(texts, boundaries) == [
        expected(prose_tokenizer, t, b) for t, b in zip(texts, boundaries, strict=True)
    ]


# Refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_non_ascii_and_flagged_added_tokens_are_refused(implementation: str) -> None:
    tokenizer = train(split_then_byte_level(LLAMA3_PATTERN))
    tokenizer.add_special_tokens(["<|im_end|>"])
    tokenizer.add_tokens([AddedToken("[MASK]", lstrip=True, normalized=False)])
    counter = make(tokenizer, implementation)
    assert counter.count("café au lait") is None
    assert counter.count_with_suffix("a [MASK] b", 2) is None
    text = "hi<|im_end|> there<|im_end|>"
    assert counter.count_with_suffix(text, 3) == expected(tokenizer, text, 3)
    assert counter.count_pairs([text, "naïve", "plain text"], [0, 1, 5]) == [
        expected(tokenizer, text, 0),
        None,
        expected(tokenizer, "plain text", 5),
    ]


@pytest.mark.skipif(not NATIVE, reason="native core not built or disabled")
def test_a_failing_model_falls_back_and_an_interrupt_propagates(
    trained: dict[str, Tokenizer],
) -> None:
    from mlpe_fast.metrics._bpe_c import NativeBPECounter

    twin = bpe_counter(trained["gpt2"], native=False)
    real = trained["gpt2"].model.tokenize

    def tokenize(word: str) -> list[Any]:
        if word == "Ġbad":
            raise RuntimeError("no merge")
        if word == "Ġstop":
            raise KeyboardInterrupt
        return real(word)

    counter = NativeBPECounter("gpt2", tokenize, BYTE_LEVEL_ASCII, twin)
    assert counter.count_pairs(["a bad word", "a good word"], [0, 2]) == [
        None,
        expected(trained["gpt2"], "a good word", 2),
    ]
    with pytest.raises(KeyboardInterrupt):
        counter.count("please stop")
    assert counter.count("a good word") == hf(trained["gpt2"], "a good word")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_boundaries_outside_the_text_raise(
    trained: dict[str, Tokenizer], implementation: str
) -> None:
    counter = make(trained["gpt2"], implementation)
    with pytest.raises(ValueError, match="outside"):
        counter.count_with_suffix("abc", 4)
    with pytest.raises(ValueError, match="differ in length"):
        counter.count_pairs(["abc"], [])


# The cache's bounds ----------------------------------------------------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_a_full_cache_is_cleared_and_counts_stay_exact(
    trained: dict[str, Tokenizer], implementation: str
) -> None:
    tokenizer = trained["llama3"]
    counter = make(tokenizer, implementation, cache_limit=3)
    text = "one two three four five six seven"
    assert counter.count(text) == hf(tokenizer, text)
    assert counter.cached_words <= 3
    assert counter.count(text) == hf(tokenizer, text)


@pytest.mark.skipif(not NATIVE, reason="native core not built or disabled")
def test_the_c_cache_bounds(trained: dict[str, Tokenizer]) -> None:
    from mlpe_fast.metrics._bpe_c import MAX_WORD

    tokenizer = trained["gpt2"]
    counter = make(tokenizer, "native", cache_bytes=16)
    long_word = "a" * (MAX_WORD + 1)
    assert counter.count(long_word) == hf(tokenizer, long_word)
    assert counter.cached_words == 0  # too long to store: counted each time
    assert counter.count(long_word) == hf(tokenizer, long_word)
    text = "abcdefgh ijklmnop qrstuvwx"  # 8 + 9 + 9 key bytes over a 16-byte budget
    assert counter.count(text) == hf(tokenizer, text)
    assert counter.cache_clears >= 1  # type: ignore[attr-defined]
    assert counter.cached_words <= 2
    counter.clear_cache()  # type: ignore[attr-defined]
    assert counter.cached_words == 0
    with pytest.raises(ValueError, match="at least 1"):
        make(tokenizer, "native", cache_bytes=0)
    # A 512-event answer of one repeated character is one 2,048-byte word:
    # it must be cached (a 1,024-byte limit made every such answer a miss).
    roomy = make(tokenizer, "native")
    assert roomy.count_with_suffix("a" * 2048, 4) == expected(tokenizer, "a" * 2048, 4)
    assert roomy.cached_words == 2


def test_the_data_tokenizers_stay_with_tokenizers() -> None:
    # tests/data's tokenizers are WordLevel: no exact fast path at all.
    assert bpe_counter(load_tokenizer(str(CHAR_CHAT_TOKENIZER))) is None


def test_selection_follows_the_twins_switch() -> None:
    # MLPE_FAST_NO_EXTENSIONS=1 leaves the selector without the C class.
    from mlpe_fast._native import USE_EXTENSIONS

    assert (_bpe.NativeBPECounter is not None) == USE_EXTENSIONS
