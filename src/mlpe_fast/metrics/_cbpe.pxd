# cython: language_level=3
# Declarations of csrc/mlpe_bpe.h: only what the binding touches.

from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef extern from "mlpe_bpe.h" nogil:
    enum:
        MLPE_BPE_GPT2
        MLPE_BPE_LLAMA3
        MLPE_BPE_QWEN2
        MLPE_BPE_O200K
        MLPE_BPE_DEEPSEEK
        MLPE_BPE_OK
        MLPE_BPE_MISS
        MLPE_BPE_REFUSED
        MLPE_BPE_FAILED
        MLPE_BPE_NOMEM
        MLPE_BPE_MAX_WORD

    ctypedef int64_t (*mlpe_bpe_miss_fn)(void *ctx, const uint8_t *word, size_t len)

    ctypedef struct mlpe_bpe_counter:
        int family
        size_t used
        size_t arena_len
        uint64_t clears

    int mlpe_bpe_init(mlpe_bpe_counter *c, int family, size_t max_entries, size_t max_bytes)
    void mlpe_bpe_free(mlpe_bpe_counter *c)
    int mlpe_bpe_add_literal(mlpe_bpe_counter *c, const uint8_t *s, size_t len)
    void mlpe_bpe_clear(mlpe_bpe_counter *c)
    size_t mlpe_bpe_split(int family, const uint8_t *text, size_t len, size_t *ends, size_t cap)
    int mlpe_bpe_count(mlpe_bpe_counter *c, const uint8_t *text, size_t len, size_t boundary,
                       int64_t *total, int64_t *suffix, mlpe_bpe_miss_fn miss, void *ctx)
