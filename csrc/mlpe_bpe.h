/*
 * mlpe_bpe.h -- exact token counts of ASCII text for byte-level BPE
 * tokenizers: the pre-tokenizer's split as a hand-coded scanner and a
 * per-word cache of BPE token counts.
 *
 * MLPerf Endpoints counts each response's tokens on the client with the
 * model's reference tokenizer, twice (OSL over the whole output, TPOT tokens
 * over the text after the first content-bearing event;
 * mlperf-endpoints-spec.md section 1.2).  For a byte-level BPE whose
 * pipeline is "pre-tokenize with regexes, map bytes, BPE each pre-token",
 * the count of a text is the sum over its pre-tokens of the BPE count of each
 * pre-token alone (src/mlpe_fast/metrics/fast_bpe.py says why, and is the
 * readable specification: its Python regexes are this unit's twin).  This
 * unit does both halves in C:
 *
 *  R1  Split.  Each family's regex, restricted to ASCII text, is a scanner:
 *      from a position it returns where the leftmost-first match starting
 *      there ends (the alternatives are tried in the regex's order, each
 *      quantifier greedy, as Oniguruma does), or that no match starts there.
 *      Positions no alternative matches are kept as a gap pre-token, as a
 *      Split with behaviour Isolated keeps them.  Families (the regexes are
 *      spelled out in mlpe_bpe.c beside each scanner):
 *        GPT2      ByteLevel(use_regex=True): GPT-2's regex;
 *        LLAMA3    Llama 3's Split (digits in runs of 1 to 3);
 *        QWEN2     Qwen 2 / 3's Split (Llama 3's with single digits);
 *        O200K     tiktoken's o200k_base (GPT-OSS), case-aware words;
 *        DEEPSEEK  DeepSeek V3's chain: digits in runs of 1 to 3, a CJK level
 *                  that matches no ASCII (skipped), then its word regex over
 *                  each gap the digits leave.
 *  R2  Cache.  A hash map from a pre-token's bytes to its BPE token count.
 *      A miss is filled by a callback (the tokenizer's own BPE model) or,
 *      when no callback is given, reported (MLPE_BPE_MISS) so that the
 *      caller can count the text again with one; words longer than
 *      MLPE_BPE_MAX_WORD are never stored (the callback counts them each
 *      time).  Bounded: past max_entries words or max_bytes of key bytes the
 *      map is cleared whole before the next insert (a count never changes,
 *      so clearing only costs misses).
 *  R3  One pass for both counts.  count(text) and count(text[boundary:])
 *      come from one scan when boundary is where a pre-token starts: every
 *      family's regex is local (no lookbehind, no \b, no anchors), so the
 *      pre-tokens after such a boundary are those of the suffix alone (for
 *      DEEPSEEK at every level: a digit run's pieces end where they end, and
 *      a word-level pre-token start inside a gap is a start of the gap's
 *      suffix).  Otherwise the suffix is scanned again on its own.
 *  R4  Refusals.  A byte >= 0x80, or an occurrence of a registered literal
 *      (an added token's content: the caller's Python path splits on those),
 *      makes count return MLPE_BPE_REFUSED with nothing counted.
 *
 * Not thread-safe: one counter per thread.  No allocation happens while
 * scanning; inserts grow the table and the key arena up to their bounds.
 */
#ifndef MLPE_BPE_H
#define MLPE_BPE_H

#include "mlpe_common.h"

typedef enum mlpe_bpe_family {
    MLPE_BPE_GPT2 = 1,
    MLPE_BPE_LLAMA3 = 2,
    MLPE_BPE_QWEN2 = 3,
    MLPE_BPE_O200K = 4,
    MLPE_BPE_DEEPSEEK = 5
} mlpe_bpe_family;

typedef enum mlpe_bpe_status {
    MLPE_BPE_OK = 0,
    MLPE_BPE_MISS = 1,    /* a pre-token is not cached and no callback was given */
    MLPE_BPE_REFUSED = 2, /* non-ASCII text, or a registered literal occurs (R4) */
    MLPE_BPE_FAILED = 3,  /* the callback failed on a pre-token */
    MLPE_BPE_NOMEM = 4    /* an insert could not allocate (the count is still exact) */
} mlpe_bpe_status;

/* Longest pre-token stored in the cache, in bytes (R2). */
#define MLPE_BPE_MAX_WORD 65536

/* The BPE token count of one pre-token (its raw ASCII bytes; the caller maps
 * them to the byte-level alphabet), or a negative value on failure. */
typedef int64_t (*mlpe_bpe_miss_fn)(void *ctx, const uint8_t *word, size_t len);

typedef struct mlpe_bpe_entry {
    uint64_t hash;  /* 0: empty slot */
    uint32_t key;   /* offset of the word in the arena */
    uint32_t len;
    int64_t count;
} mlpe_bpe_entry;

typedef struct mlpe_bpe_literal {
    const uint8_t *ptr; /* owned copy */
    size_t len;
} mlpe_bpe_literal;

typedef struct mlpe_bpe_counter {
    int family;
    mlpe_bpe_entry *table;
    size_t mask;        /* table size - 1 (a power of two) */
    size_t used;        /* stored words */
    uint8_t *arena;     /* the stored words' bytes, back to back */
    size_t arena_len;
    size_t arena_cap;
    size_t max_entries;
    size_t max_bytes;
    uint64_t clears;    /* times the map was cleared because it was full */
    mlpe_bpe_literal *literals;
    size_t n_literals;
    uint8_t literal_first[128]; /* 1 where some literal starts with that byte */
} mlpe_bpe_counter;

/* 0 on success, MLPE_E_NOMEM, or -1 for an unknown family or a zero bound.
 * max_entries and max_bytes bound the cache (R2). */
int mlpe_bpe_init(mlpe_bpe_counter *c, int family, size_t max_entries, size_t max_bytes);
void mlpe_bpe_free(mlpe_bpe_counter *c);

/* Registers a literal whose occurrence refuses a text (R4).  0, MLPE_E_NOMEM,
 * or -1 for an empty or non-ASCII literal. */
int mlpe_bpe_add_literal(mlpe_bpe_counter *c, const uint8_t *s, size_t len);

/* Drops every cached word (counted in clears only when the map was full). */
void mlpe_bpe_clear(mlpe_bpe_counter *c);

/* The cached count of a word, or -1. */
int64_t mlpe_bpe_lookup(const mlpe_bpe_counter *c, const uint8_t *word, size_t len);

/* Stores a word's count (R2: words over MLPE_BPE_MAX_WORD are not stored;
 * a full map is cleared first).  0 or MLPE_E_NOMEM. */
int mlpe_bpe_insert(mlpe_bpe_counter *c, const uint8_t *word, size_t len, int64_t count);

/* Whether a byte >= 0x80 or a registered literal occurs in text (R4). */
int mlpe_bpe_refuses(const mlpe_bpe_counter *c, const uint8_t *text, size_t len);

/* The pre-tokens of an ASCII text (R1): writes the end offset of each, in
 * order, into ends (at most cap of them) and returns how many there are
 * (which may exceed cap: call again with more room).  Text with a byte
 * >= 0x80 is split as if that byte were an ASCII control character; callers
 * refuse such text first (R4). */
size_t mlpe_bpe_split(int family, const uint8_t *text, size_t len, size_t *ends, size_t cap);

/* count(text) into *total and count(text[boundary:]) into *suffix (R3);
 * boundary <= len (else it is taken as len).  miss may be NULL (R2).
 * Returns an mlpe_bpe_status; *total and *suffix are set only on OK. */
int mlpe_bpe_count(mlpe_bpe_counter *c, const uint8_t *text, size_t len, size_t boundary,
                   int64_t *total, int64_t *suffix, mlpe_bpe_miss_fn miss, void *ctx);

#endif /* MLPE_BPE_H */
