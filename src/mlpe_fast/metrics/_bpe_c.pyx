# cython: language_level=3
"""Exact BPE token counts of ASCII text over the C core (``csrc/mlpe_bpe.c``).

Same counts, refusals and API as the pure-Python twin
:class:`mlpe_fast.metrics.fast_bpe.FastBPECounter`, which is the readable
specification; the rules are numbered in ``csrc/mlpe_bpe.h``.  This module is
glue: it lends the C scanner each text's bytes (an ASCII ``str`` is its own
UTF-8, read in place), fills cache misses from the tokenizer's BPE model, and
hands texts holding an added token's content to the twin, which splits on
them (R4).

:meth:`NativeBPECounter.count_pairs` counts a batch with the GIL released
(the texts are held by a tuple meanwhile); the texts that missed the cache are
counted again with the GIL held, the model filling each miss.  So a warm
counter takes the interpreter only to collect and return a batch.
"""

from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc

from mlpe_fast.metrics cimport _cbpe as c

__all__ = ("FAMILIES", "NativeBPECounter")


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object)
    void *PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)


#: The scanners of csrc/mlpe_bpe.c by name (fast_bpe.NATIVE_FAMILIES names
#: the regexes of each).
FAMILIES = {
    "gpt2": c.MLPE_BPE_GPT2,
    "llama3": c.MLPE_BPE_LLAMA3,
    "qwen2": c.MLPE_BPE_QWEN2,
    "o200k": c.MLPE_BPE_O200K,
    "deepseek_v3": c.MLPE_BPE_DEEPSEEK,
}

#: Longest pre-token the C cache stores (longer ones are counted by the
#: model each time).
MAX_WORD = c.MLPE_BPE_MAX_WORD


cdef int64_t _fill(void *ctx, const uint8_t *word, size_t n) noexcept with gil:
    """A cache miss: the model's count of the byte-level form of ``word``.
    Called by mlpe_bpe_count in count_pairs' second pass, which holds the GIL."""
    cdef NativeBPECounter self = <NativeBPECounter>ctx
    try:
        text = PyUnicode_DecodeASCII(<const char *>word, <Py_ssize_t>n, NULL)
        return len(self._tokenize(text.translate(self._byte_level)))
    except BaseException as exc:  # the model cannot encode it: the text falls back
        if not isinstance(exc, Exception):
            self._interrupt = exc  # re-raised once the C call returns
        return -1


cdef class NativeBPECounter:
    """Counts the tokens of ASCII text exactly as the tokenizer behind
    ``twin`` would, in C.  Not thread-safe (the word cache): one instance
    per thread.

    Args:
        family: a key of :data:`FAMILIES` (the pre-tokenizer's scanner).
        tokenize: the tokenizer's ``model.tokenize``.
        byte_level: the ``str.translate`` table of ASCII to GPT-2's
            byte-level alphabet.
        twin: the Python counter of the same tokenizer, which counts texts
            holding an added token's content.
        literals: every added token's content (a text holding one goes to
            ``twin``).
        cache_limit: words past which the cache is cleared.
        cache_bytes: key bytes past which the cache is cleared.
    """

    cdef c.mlpe_bpe_counter _c
    cdef bint _ready
    cdef bint _busy
    cdef object _tokenize
    cdef object _byte_level
    cdef object _twin
    cdef object _interrupt
    cdef readonly str family
    cdef readonly str implementation

    def __cinit__(self):
        self._ready = False
        self._busy = False

    def __init__(self, str family, tokenize, byte_level, twin, literals=(),
                 Py_ssize_t cache_limit=1_000_000, Py_ssize_t cache_bytes=64 << 20):
        if family not in FAMILIES:
            raise ValueError(f"no native scanner for pre-tokenizer family {family!r}")
        if cache_limit < 1 or cache_bytes < 1:
            raise ValueError("cache_limit and cache_bytes must be at least 1")
        if self._ready:
            c.mlpe_bpe_free(&self._c)
            self._ready = False
        if c.mlpe_bpe_init(&self._c, FAMILIES[family], cache_limit, cache_bytes) != 0:
            raise MemoryError()
        self._ready = True
        cdef bytes raw
        for literal in literals:
            raw = literal.encode("ascii")  # the twin keeps non-ASCII contents out
            if c.mlpe_bpe_add_literal(&self._c, <const uint8_t *><char *>raw, len(raw)) != 0:
                raise ValueError(f"added token content {literal!r} is empty or not ASCII")
        self._tokenize = tokenize
        self._byte_level = byte_level
        self._twin = twin
        self._interrupt = None
        self.family = family
        self.implementation = "native"

    def __dealloc__(self):
        if self._ready:
            c.mlpe_bpe_free(&self._c)

    @property
    def cached_words(self):
        """Pre-tokens in the cache now."""
        return self._c.used

    @property
    def cache_clears(self):
        """Times the cache was full and cleared."""
        return self._c.clears

    def clear_cache(self):
        """Drops every cached word."""
        c.mlpe_bpe_clear(&self._c)

    def pre_token_ends(self, str text):
        """The end offset of each pre-token of ``text`` (the C split, R1;
        for tests against the twin's regexes)."""
        if not PyUnicode_IS_ASCII(text):
            raise ValueError("not ASCII")
        cdef const uint8_t *data = <const uint8_t *>PyUnicode_DATA(text)
        cdef size_t n = <size_t>PyUnicode_GET_LENGTH(text)
        cdef size_t count = c.mlpe_bpe_split(self._c.family, data, n, NULL, 0)
        cdef size_t *ends = <size_t *>malloc((count + 1) * sizeof(size_t))
        if ends == NULL:
            raise MemoryError()
        try:
            c.mlpe_bpe_split(self._c.family, data, n, ends, count)
            return [ends[i] for i in range(count)]
        finally:
            free(ends)

    def count(self, str text):
        """The token count of ``text``, or None when it is not eligible
        (as :meth:`FastBPECounter.count`)."""
        pair = self.count_pairs((text,), (len(text),))[0]
        return None if pair is None else pair[0]

    def count_with_suffix(self, str text, Py_ssize_t boundary):
        """``(count(text), count(text[boundary:]))`` or None, from one scan
        when ``boundary`` starts a pre-token (R3).

        Raises:
            ValueError: ``boundary`` is outside ``0..len(text)``.
        """
        return self.count_pairs((text,), (boundary,))[0]

    def count_pairs(self, texts, boundaries):
        """``count_with_suffix`` of each text and boundary, in order.

        Raises:
            ValueError: a boundary is outside its text, or the lengths differ.
        """
        cdef tuple held = tuple(texts)  # alive while the GIL is released
        cdef tuple marks = tuple(boundaries)
        cdef Py_ssize_t n = len(held), i
        if len(marks) != n:
            raise ValueError("texts and boundaries differ in length")
        if self._busy:
            raise RuntimeError("NativeBPECounter used from two threads at once")
        cdef const uint8_t **data = <const uint8_t **>malloc((n + 1) * sizeof(void *))
        cdef size_t *lengths = <size_t *>malloc((n + 1) * sizeof(size_t))
        cdef size_t *cuts = <size_t *>malloc((n + 1) * sizeof(size_t))
        cdef int64_t *totals = <int64_t *>malloc((n + 1) * sizeof(int64_t))
        cdef int64_t *suffixes = <int64_t *>malloc((n + 1) * sizeof(int64_t))
        cdef int *status = <int *>malloc((n + 1) * sizeof(int))
        cdef Py_ssize_t cut, length
        cdef list out
        if (data == NULL or lengths == NULL or cuts == NULL or totals == NULL
                or suffixes == NULL or status == NULL):
            free(data); free(lengths); free(cuts); free(totals); free(suffixes); free(status)
            raise MemoryError()
        self._busy = True
        try:
            for i in range(n):
                text = held[i]
                if not isinstance(text, str):
                    raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
                length = PyUnicode_GET_LENGTH(text)
                cut = marks[i]
                if not 0 <= cut <= length:
                    raise ValueError(f"boundary {cut} outside 0..{length}")
                lengths[i] = <size_t>length
                cuts[i] = <size_t>cut
                if PyUnicode_IS_ASCII(text):
                    data[i] = <const uint8_t *>PyUnicode_DATA(text)
                    status[i] = -1
                else:
                    data[i] = NULL
                    status[i] = c.MLPE_BPE_REFUSED
            with nogil:
                for i in range(n):
                    if status[i] == -1:
                        status[i] = c.mlpe_bpe_count(&self._c, data[i], lengths[i], cuts[i],
                                                     &totals[i], &suffixes[i], NULL, NULL)
            out = [None] * n
            for i in range(n):
                if status[i] == c.MLPE_BPE_MISS:
                    status[i] = c.mlpe_bpe_count(&self._c, data[i], lengths[i], cuts[i],
                                                 &totals[i], &suffixes[i], _fill, <void *>self)
                    if self._interrupt is not None:
                        interrupt, self._interrupt = self._interrupt, None
                        raise interrupt
                if status[i] == c.MLPE_BPE_OK or status[i] == c.MLPE_BPE_NOMEM:
                    out[i] = (totals[i], suffixes[i])
                elif status[i] == c.MLPE_BPE_REFUSED and data[i] != NULL:
                    # an added token's content occurs: the twin splits on them (R4)
                    out[i] = self._twin.count_with_suffix(held[i], cuts[i])
            return out
        finally:
            self._busy = False
            free(data); free(lengths); free(cuts); free(totals); free(suffixes); free(status)
