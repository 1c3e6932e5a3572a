"""Accuracy scorers (spec §2.6): ROUGE, answer extraction, math grading, gates.

Expected values are worked out by hand from the definitions the modules cite
(rouge-score's tokenizer and F1, the reference client's extractors, MLPerf's
DeepSeek-R1 evaluator and PRM800K grader, the checker's gate); the few
cross-checks against NLTK and rouge-score themselves are marked as such.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from mlpe_fast.accuracy import rouge
from mlpe_fast.accuracy.deepseek_r1 import (
    UngradedSubsetError,
    parse_aime_answer,
    parse_multiple_choice,
)
from mlpe_fast.accuracy.math_answers import normalize_hendrycks, normalize_prm800k
from mlpe_fast.accuracy.scorers import (
    EVAL_METHODS,
    EXTRACTORS,
    THRESHOLDS,
    check_gate,
    combine_entries,
    deepseek_r1_exact_match,
    exact_match,
    extract_abcd,
    extract_boxed,
    extract_boxed_math,
    grade_answer,
    grade_deepseek_r1_sample,
    rouge_scores,
    score_dataset,
    split_sentences,
    string_match,
)

# ---------------------------------------------------------------------------
# ROUGE
# ---------------------------------------------------------------------------


def test_rouge_by_hand() -> None:
    # prediction [the cat sat], reference [the cat sat on the mat]
    # rouge1: 3 shared unigrams, P = 3/3, R = 3/6, F = 2/3
    # rouge2: 2 shared bigrams of 2 and 5, P = 1, R = 2/5, F = 4/7
    # rougeL/Lsum: LCS 3, as rouge1 (one sentence each)
    scores = rouge_scores(["the cat sat"], ["the cat sat on the mat"])
    assert scores == {
        "rouge1": 66.6667,
        "rouge2": 57.1429,
        "rougeL": 66.6667,
        "rougeLsum": 66.6667,
        "gen_len": 11,
        "gen_num": 1,
    }


def test_rouge_is_the_mean_of_per_pair_f1() -> None:
    # pair 1: F = 2/3 everywhere except rouge2 (4/7); pair 2: nothing shared
    scores = rouge_scores(["the cat sat", "dog"], ["the cat sat on the mat", "bird"])
    assert scores["rouge1"] == 33.3333  # (2/3 + 0) / 2
    assert scores["rouge2"] == 28.5714  # (4/7 + 0) / 2
    assert scores["gen_len"] == 11 + 3
    assert scores["gen_num"] == 2


def test_rouge_stems_words_longer_than_three_characters() -> None:
    # Porter: running -> run, runs -> run, dogs -> dog; "dog" and "ran"
    # (three letters) are left alone, and "ran" is not "run"
    assert rouge_scores(["running dogs"], ["runs dog"])["rouge1"] == 100.0
    # [ran, dog] against [run, dog]: one of two unigrams shared, F = 1/2
    assert rouge_scores(["ran dogs"], ["runs dog"])["rouge1"] == 50.0


def test_rouge_lsum_scores_sentence_by_sentence() -> None:
    # the same two sentences in the other order: one line each after the split
    # rouge2: bigrams of [the cat sat the dog ran] and [the dog ran the cat sat]
    #   share 4 of 5 (not "sat the" / "ran the"): F = 0.8
    # rougeL: the longest common subsequence is 3 of 6 tokens: F = 0.5
    # rougeLsum: each reference line is matched by a prediction line: F = 1
    scores = rouge_scores(["  The cat sat.  The dog ran.  "], ["The dog ran. The cat sat."])
    assert scores["rouge1"] == 100.0
    assert scores["rouge2"] == 80.0
    assert scores["rougeL"] == 50.0
    assert scores["rougeLsum"] == 100.0
    # stripped, and the space between the sentences became one newline
    assert scores["gen_len"] == len("The cat sat.\nThe dog ran.")


def test_rouge_lsum_needs_the_sentence_split() -> None:
    # without a split rougeLsum would equal rougeL (one line each)
    one_line = rouge_scores(["the cat sat the dog ran"], ["the dog ran the cat sat"])
    assert one_line["rougeLsum"] == one_line["rougeL"] == 50.0


def test_sentence_split_keeps_abbreviations() -> None:
    text = "Mr. Smith went to Washington. He arrived at 3 p.m. on Monday. Was it late?"
    assert split_sentences(text) == [
        "Mr. Smith went to Washington.",
        "He arrived at 3 p.m. on Monday.",
        "Was it late?",
    ]
    assert rouge.prepare_for_rouge("  One.  Two!  ") == "One.\nTwo!"


def test_empty_outputs_score_zero() -> None:
    scores = rouge_scores(["", "   "], ["the cat", "a dog ran"])
    assert scores == dict.fromkeys(rouge.ROUGE_TYPES, 0.0) | {"gen_len": 0, "gen_num": 2}
    assert rouge_scores([], []) == dict.fromkeys(rouge.ROUGE_TYPES, 0.0) | {
        "gen_len": 0,
        "gen_num": 0,
    }


def test_rouge_unicode() -> None:
    # only [a-z0-9] survive tokenization: "naïve café" -> [na, ve, caf]
    scores = rouge_scores(["naïve café"], ["na ve caf"])
    assert scores["rouge1"] == 100.0
    assert scores["gen_len"] == 10  # characters, not bytes
    # no Latin letters at all: no tokens, score 0, no error
    assert rouge_scores(["你好世界。"], ["你好世界。"])["rouge1"] == 0.0


def test_rouge_needs_one_prediction_per_reference() -> None:
    with pytest.raises(ValueError, match="one each"):
        rouge_scores(["a"], [])


def test_stem_cache_does_not_change_scores() -> None:
    # cross-check: the cached stemmer against rouge-score's own default tokenizer
    from rouge_score import rouge_scorer

    plain = rouge_scorer.RougeScorer(list(rouge.ROUGE_TYPES), use_stemmer=True)
    rng = random.Random(11)
    words = [
        "running",
        "runs",
        "ran",
        "generously",
        "generous",
        "cats",
        "the",
        "studies",
        "studying",
        "a",
        "flies",
    ]
    for _ in range(40):
        prediction = " ".join(rng.choice(words) for _ in range(rng.randint(0, 12)))
        reference = " ".join(rng.choice(words) for _ in range(rng.randint(0, 12)))
        assert rouge._rouge_scorer().score(reference, prediction) == plain.score(
            reference, prediction
        )


def test_punkt_model_is_nltks_english_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cross-check: write the tables in punkt_tab's format and let NLTK's own
    # loader (what sent_tokenize uses) read them; both must split alike
    import nltk
    from nltk.tokenize.punkt import PunktTokenizer
    from punkt.data import english

    model = tmp_path / "tokenizers" / "punkt_tab" / "english"
    model.mkdir(parents=True)
    (model / "abbrev_types.txt").write_text("\n".join(english.ABBREV_TYPES))
    (model / "sent_starters.txt").write_text("\n".join(english.SENT_STARTERS))
    (model / "collocations.tab").write_text("\n".join(f"{a}\t{b}" for a, b in english.COLLOCATIONS))
    (model / "ortho_context.tab").write_text(
        "\n".join(f"{word}\t{flags}" for word, flags in english.ORTHO_CONTEXT.items())
    )
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    nltk_english = PunktTokenizer("english")
    texts = [
        "Dr. J. Smith of Acme Inc. said on Jan. 5 that sales rose 3.5 pct. The U.S. market led.",
        "He left at 5 p.m. The next day he came back. (It rained.) 'Why?' she asked.",
        "The vote was 12-3. Gov. Brown signed the bill... Critics disagreed!",
        "no capital letters here. or here. the end",
    ]
    for text in texts:
        assert split_sentences(text) == nltk_english.tokenize(text)


def test_punkt_tables_match_installed_nltk_data() -> None:
    # where NLTK's punkt_tab data is installed (not on CI), it is our model
    import nltk
    from nltk.tokenize.punkt import load_punkt_params
    from punkt.data import english

    try:
        installed = load_punkt_params(nltk.data.find("tokenizers/punkt_tab/english/"))
    except LookupError:
        pytest.skip("NLTK punkt_tab data not installed")
    assert installed.abbrev_types == set(english.ABBREV_TYPES)
    assert installed.collocations == set(english.COLLOCATIONS)
    assert installed.sent_starters == set(english.SENT_STARTERS)
    assert dict(installed.ortho_context) == dict(english.ORTHO_CONTEXT)


# ---------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "choice"),
    [
        # the reference's documented examples (its first one, "The answer is
        # B", gives no answer in the reference code either: no pattern takes
        # "is" between "answer" and the letter)
        ("**Answer:** C", "choice3"),
        ("\\boxed{D}", "choice4"),
        ("The answer is B", None),
        ("Answer: (c)", "choice3"),
        ("Answers - d", "choice4"),
        ("Option D is correct", "choice4"),
        ("I think **B** is right", "choice2"),
        ("\\boxed{\\text{B}}", "choice2"),
        ("The final answer is $\\boxed{\\textbf{(A)}}$", "choice1"),
        ("**D) 42 m**", "choice4"),
        ("Reasoning...\n\nC. because of the field", "choice3"),
        # the first pattern in priority order wins, not the last answer given
        ("After reasoning,\n\nAnswer: A\n\nActually the answer is D", "choice1"),
        # last resort: the first character, after one leading "**"
        ("**c", "choice3"),
        ("b) because", "choice2"),
        ("no letter here", None),
        ("", None),
    ],
)
def test_extract_abcd(text: str, choice: str | None) -> None:
    assert extract_abcd(text) == choice


@pytest.mark.parametrize(
    ("text", "lazy", "balanced"),
    [
        ("\\boxed{\\frac{1}{2}}", "\\frac{1", "\\frac{1}{2}"),
        ("first \\boxed{3}, finally \\boxed{ 70 }", "70", "70"),
        ("\\boxed{1, 2}", "2", "1, 2"),
        ("\\boxed{\\text{B}}", "\\text{B", "\\text{B}"),
        ("\\framebox{5}", "5", None),
        ("the answer is 12, or maybe 34", "34", None),
        ("\\boxed{} and then 7", "7", ""),
        ("\\boxed{1} and \\boxed{2", "1", None),  # the last box is never closed
        ("no answer", None, None),
    ],
)
def test_extract_boxed(text: str, lazy: str | None, balanced: str | None) -> None:
    assert extract_boxed_math(text) == lazy
    assert extract_boxed(text) == balanced


def test_exact_match_is_a_string_comparison() -> None:
    outputs = ["so \\boxed{70}", "\\boxed{070}", "I give up", ""]
    # "070" is not "70" for the reference's pass_at_1
    assert exact_match(outputs, ["70"] * 4, extractor="boxed_math_extractor") == 25.0
    gpqa = ["Answer: B", "**Answer:** C", "(A)"]
    truth = ["choice2", "choice2", "choice1"]
    assert exact_match(gpqa, truth, extractor="abcd_extractor") == pytest.approx(200 / 3)
    assert exact_match([], [], extractor="abcd_extractor") == 0.0


def test_string_match_strips_both_sides() -> None:
    assert string_match([" yes \n", "no"], ["yes", " yes"]) == 50.0


def test_registry_uses_the_reference_names() -> None:
    assert set(EXTRACTORS) == {
        "abcd_extractor",
        "boxed_math_extractor",
        "identity_extractor",
        "python_code_extractor",
    }
    assert set(EVAL_METHODS) == {"rouge", "pass_at_1", "string_match"}
    assert score_dataset("pass_at_1", ["\\boxed{5}"], ["5"], extractor="boxed_math_extractor") == (
        100.0
    )
    assert score_dataset("string_match", ["a "], ["a"]) == 100.0
    rouge_result = score_dataset("rouge", ["the cat"], ["the cat"], extractor="identity_extractor")
    assert isinstance(rouge_result, dict)
    assert rouge_result["rougeL"] == 100.0
    with pytest.raises(KeyError, match="unknown eval_method"):
        score_dataset("bleu", [], [])
    with pytest.raises(KeyError, match="unknown extractor"):
        exact_match([], [], extractor="regex_extractor")


# ---------------------------------------------------------------------------
# Math answers (PRM800K, MLPerf's MATH500 grader)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "truth"),
    [
        ("0.5", "\\frac{1}{2}"),  # 0.5 -> \frac{1}{2}
        ("\\frac12", "\\frac{1}{2}"),  # braces added
        ("1/2", "\\dfrac{1}{2}"),  # a/b -> \frac{a}{b}, dfrac -> frac
        ("\\left( 3, 4 \\right)", "(3,4)"),  # \left, \right and spaces dropped
        ("90^\\circ", "90"),
        ("10\\%", "10"),
        ("\\$5", "5"),
        ("5 \\text{ cm}", "5"),  # units after "\text{ "
        ("k = 7", "7"),
        ("1,000", "1000"),
        ("3.0", "3"),
        ("\\text{Evelyn}", "evelyn"),
        ("[0,\\infty)", "[0, \\infty)"),
        ("x^2+2x+1", "(x+1)^2"),  # sympy: the difference simplifies to 0
    ],
)
def test_equivalent_math_answers(given: str, truth: str) -> None:
    assert grade_answer(given, truth)


@pytest.mark.parametrize(
    ("given", "truth"),
    [
        ("2/4", "\\frac{1}{2}"),  # fractions must be reduced
        ("3.5", "3"),  # an integer truth needs an integer answer
        ("(1,2)", "[1,2]"),  # interval brackets must agree
        ("\\pi", "3.14159"),
        ("", "3"),
        (None, "3"),
    ],
)
def test_different_math_answers(given: str | None, truth: str) -> None:
    assert not grade_answer(given, truth)


def test_math_normal_forms() -> None:
    assert normalize_hendrycks(" \\sqrt3 + \\tfrac12 ") == "\\sqrt{3}+\\frac{1}{2}"
    assert normalize_hendrycks(".25") == "0.25"  # a leading point gets its zero
    assert normalize_hendrycks(".5") == "\\frac{1}{2}"  # ... and then 0.5 is a half
    assert normalize_hendrycks("\\sqrt") == "\\sqrt"  # malformed: returned as given
    assert normalize_prm800k("\\text{5 meters}") == "5"
    assert normalize_prm800k("1,234,567") == "1234567"
    assert normalize_prm800k("7 3/4") == "7+3/4"  # mixed number


# ---------------------------------------------------------------------------
# DeepSeek-R1
# ---------------------------------------------------------------------------


def test_deepseek_r1_parsers() -> None:
    assert parse_multiple_choice("think... ANSWER: c\nmore text") == "C"
    assert parse_multiple_choice("Answer: A then FINAL ANSWER: (B)") == "B"  # the last one
    assert parse_multiple_choice("['ANSWER: D']") == "D"
    assert parse_multiple_choice("ANSWER: E") is None  # past D for GPQA
    assert parse_multiple_choice("The answer is (J)", "J") == "J"  # lone-letter fallback
    assert parse_aime_answer("\\boxed{ 070 }") == 70
    assert parse_aime_answer("Answer: 12\n\\boxed{34}") == 34  # a box wins
    assert parse_aime_answer("Answer: 1000") is None  # AIME answers are 0-999
    assert parse_aime_answer("Answer: 12.5") is None


def test_deepseek_r1_grading_by_subset() -> None:
    assert grade_deepseek_r1_sample("ANSWER: C", "C", "gpqa")
    assert not grade_deepseek_r1_sample("ANSWER: C", "D", "gpqa")
    assert grade_deepseek_r1_sample("Answer: (J)", "J", "mmlu_pro")
    assert grade_deepseek_r1_sample("so \\boxed{070}", "70", "aime")  # compared as numbers
    assert grade_deepseek_r1_sample("so \\boxed{\\frac{1}{2}}", "0.5", "math500")
    assert not grade_deepseek_r1_sample("", "0.5", "math500")
    assert not grade_deepseek_r1_sample("ANSWER: C", None, "gpqa")
    with pytest.raises(UngradedSubsetError):
        grade_deepseek_r1_sample("```python\nprint(1)\n```", "abc123", "livecodebench")
    with pytest.raises(ValueError, match="no DeepSeek-R1 grader"):
        grade_deepseek_r1_sample("x", "y", "humaneval")


def test_deepseek_r1_exact_match() -> None:
    result = deepseek_r1_exact_match(
        ["ANSWER: A", "ANSWER: B", "\\boxed{3}", "\\boxed{4}", "code"],
        ["A", "A", "3", "3", "id-1"],
        ["gpqa", "gpqa", "aime", "aime", "livecodebench"],
    )
    assert result.exact_match == 50.0  # 2 of the 4 graded samples
    assert result.subset_exact_match == {"gpqa": 50.0, "aime": 50.0}
    assert result.subset_samples == {"gpqa": 2, "aime": 2}
    assert (result.graded, result.ungraded, result.complete) == (4, 1, False)
    assert deepseek_r1_exact_match(["ANSWER: A"], ["A"], ["gpqa"]).complete
    assert deepseek_r1_exact_match([], [], []).exact_match is None


# ---------------------------------------------------------------------------
# Gates
# ---------------------------------------------------------------------------

LLAMA_PASS = {
    "rouge1": 38.5,  # minimum 38.7792 x 0.99 = 38.391408
    "rouge2": 15.8,  # 15.748425
    "rougeL": 24.3,  # 24.250743
    "rougeLsum": 35.5,  # 35.43507
    "gen_len": 8_000_000,  # within [7,350,879.6, 8,984,408.4]
}


def test_llama_gate() -> None:
    assert check_gate("llama3_1-8b", LLAMA_PASS, issued_samples=13_368) == []
    # as the reference writes them: strings, any case
    as_written = {key.upper(): str(value) for key, value in LLAMA_PASS.items()}
    assert check_gate("llama3_1-8b", as_written) == []
    failing = LLAMA_PASS | {"rouge2": 15.7, "gen_len": 9_000_000}
    assert check_gate("llama3_1-8b", failing, issued_samples=13_000) == [
        "rouge2: 15.7000 below the minimum 15.7484",
        "gen_len: 9000000.0 outside [7350879.6, 8984408.4]",
        "issued samples: 13000 below the minimum 13368",
    ]
    missing = {k: v for k, v in LLAMA_PASS.items() if k != "rougeLsum"}
    assert check_gate("llama3_1-8b", missing) == ["rougeLsum: missing from the scores"]
    assert check_gate("llama3_1-8b", LLAMA_PASS | {"rouge1": "n/a"}) == [
        "rouge1: 'n/a' is not a finite number"
    ]


def test_gate_bound_is_inclusive() -> None:
    minimum = THRESHOLDS["deepseek-r1"].minimums["exact_match"]
    assert check_gate("deepseek-r1", {"exact_match": minimum}) == []
    assert check_gate("deepseek-r1", {"exact_match": 80.6}) == []  # minimum 80.544618
    assert check_gate("deepseek-r1", {"exact_match": 80.5}) == [
        "exact_match: 80.5000 below the minimum 80.5446"
    ]


def test_fractions_are_rescaled() -> None:
    # minimum 83.13 x 0.99 = 82.2987
    assert check_gate("gpt-oss-120b", {"exact_match": 0.83}) == []
    assert check_gate("gpt-oss-120b", {"score": 0.83}) == []  # the scalar score
    assert check_gate("gpt-oss-120b", {"EXACT_MATCH": 0.82}) == [
        "exact_match: 82.0000 below the minimum 82.2987"
    ]
    with pytest.raises(KeyError, match="no accuracy gate"):
        check_gate("llama3.1-8b", LLAMA_PASS)


def test_combine_entries_weights_by_unit_samples() -> None:
    # gpt-oss-120b: AIME25 30 x 8, GPQA 198 x 5, LiveCodeBench 1055 x 3
    entries = [
        {"dataset_name": "aime25", "score": 0.9, "unit_samples": 30, "num_repeats": 8},
        {"dataset_name": "gpqa", "score": 0.8, "unit_samples": 198, "num_repeats": 5},
        {"dataset_name": "lcb", "score": 0.85, "unit_samples": 1055, "num_repeats": 3},
    ]
    combined = combine_entries(entries)
    # (0.9 x 30 + 0.8 x 198 + 0.85 x 1055) / 1283 = 1082.15 / 1283
    assert combined.scores == {"score": pytest.approx(1082.15 / 1283)}
    assert combined.issued_samples == 240 + 990 + 3165 == 4395
    assert check_gate("gpt-oss-120b", combined.scores, issued_samples=4395) == []
    rouge_entry = {"score": {"rouge1": "38.9", "gen_len": "8167000"}, "num_samples": 13368}
    assert combine_entries([rouge_entry]).scores == {"rouge1": 38.9, "gen_len": 8167000.0}


def test_importing_the_scorers_loads_no_heavy_library() -> None:
    code = (
        "import sys, mlpe_fast.accuracy.scorers\n"
        "heavy = ('nltk', 'rouge_score', 'sympy', 'pylatexenc', 'punkt')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_deepseek_r1_grades_livecodebench_with_the_code_grader_given() -> None:
    seen: list[tuple[list[str], list[str]]] = []

    def grade(outputs: Sequence[str], question_ids: Sequence[str]) -> list[bool]:
        seen.append((list(outputs), list(question_ids)))
        return [True, False]

    result = deepseek_r1_exact_match(
        ["ANSWER: A", "code one", "code two"],
        ["A", "id-1", "id-2"],
        ["gpqa", "livecodebench", "livecodebench"],
        grade_code=grade,
    )
    assert seen == [(["code one", "code two"], ["id-1", "id-2"])]  # only the code samples
    assert result.subset_exact_match == {"gpqa": 100.0, "livecodebench": 50.0}
    assert result.exact_match == pytest.approx(200 / 3) and result.complete
    # a grader that could not grade (the service down) leaves them ungraded
    failed = deepseek_r1_exact_match(
        ["code"], ["id"], ["livecodebench"], grade_code=lambda outputs, ids: None
    )
    assert (failed.graded, failed.ungraded, failed.exact_match) == (0, 1, None)
