/*
 * mlpe_bpe.c -- see mlpe_bpe.h for the rules (R1-R4).
 *
 * Each scanner below is one family's regex restricted to ASCII, written as
 * the backtracking engine walks it: the alternatives in order, each greedy
 * quantifier taken as far as it goes and given back only where the rest of
 * the alternative needs it.  Beside each scanner is the regex as
 * tokenizer.json spells it, with the ASCII members of its classes:
 *   \p{L} = [A-Za-z] (\p{Lu} = [A-Z], \p{Ll} = [a-z]; \p{Lt}, \p{Lm},
 *   \p{Lo}, \p{M} have no ASCII member), \p{N} = [0-9],
 *   \s = [\t\n\v\f\r ] (Oniguruma's White_Space: not \x1c-\x1f),
 *   \p{P} | \p{S} = the 32 printable ASCII characters that are neither
 *   letters, digits nor space.
 * metrics/fast_bpe.py derives the same classes from unicodedata and the
 * tests compare both splits on random text, and both counts with
 * tokenizers' own.
 */
#include "mlpe_bpe.h"

/* ---- character classes ------------------------------------------------- */

enum {
    C_UPPER = 1,
    C_LOWER = 2,
    C_DIGIT = 4,
    C_SPACE = 8,  /* \s */
    C_CRLF = 16,  /* \r \n */
    C_PS = 32,    /* \p{P} | \p{S} */
    C_SLASH = 64, /* '/', o200k's [\r\n/] */
    C_HIGH = 128  /* not ASCII */
};
#define C_LETTER (C_UPPER | C_LOWER)

static uint8_t cls[256];
static int cls_ready;

static void cls_init(void) {
    int b;
    if (cls_ready)
        return;
    for (b = 0; b < 256; b++) {
        uint8_t v = 0;
        if (b >= 0x80)
            v = C_HIGH;
        else if (b >= 'A' && b <= 'Z')
            v = C_UPPER;
        else if (b >= 'a' && b <= 'z')
            v = C_LOWER;
        else if (b >= '0' && b <= '9')
            v = C_DIGIT;
        else if (b == ' ' || (b >= '\t' && b <= '\r'))
            v = C_SPACE | ((b == '\r' || b == '\n') ? C_CRLF : 0);
        else if (b > ' ' && b < 0x7f)
            v = C_PS | (b == '/' ? C_SLASH : 0);
        cls[b] = v;
    }
    cls_ready = 1;
}

#define IS(b, m) ((cls[(b)] & (m)) != 0)
/* [^\s\p{L}\p{N}] in ASCII: punctuation, symbols and control characters. */
#define OTHER(b) ((cls[(b)] & (C_SPACE | C_LETTER | C_DIGIT)) == 0)

MLPE_INLINE size_t run_of(const uint8_t *t, size_t i, size_t n, uint8_t mask) {
    while (i < n && IS(t[i], mask))
        i++;
    return i;
}

MLPE_INLINE size_t run_other(const uint8_t *t, size_t i, size_t n) {
    while (i < n && OTHER(t[i]))
        i++;
    return i;
}

/* 's|'t|'re|'ve|'m|'ll|'d at i (t[i] == '\''), case-insensitive or not:
 * the end of the match, or i. */
MLPE_INLINE size_t contraction(const uint8_t *t, size_t i, size_t n, int fold) {
    uint8_t d, e;
    if (i + 1 >= n)
        return i;
    d = t[i + 1];
    if (fold && IS(d, C_UPPER))
        d = (uint8_t)(d + 32);
    if (d == 's' || d == 't' || d == 'm' || d == 'd')
        return i + 2;
    if (i + 2 >= n)
        return i;
    e = t[i + 2];
    if (fold && IS(e, C_UPPER))
        e = (uint8_t)(e + 32);
    if (((d == 'r' || d == 'v') && e == 'e') || (d == 'l' && e == 'l'))
        return i + 3;
    return i;
}

/* \s+(?!\S)|\s+ at i (t[i] is \s): the whole run at the end of the text,
 * else all of it but its last character, else one character. */
MLPE_INLINE size_t space_tail(const uint8_t *t, size_t i, size_t n) {
    size_t j = run_of(t, i, n, C_SPACE);
    if (j == n)
        return j;
    return j - i >= 2 ? j - 1 : i + 1;
}

/* \s*[\r\n]+|\s+(?!\S)|\s+ at i (t[i] is \s): \s* backs off to the last CR
 * or LF of the run, which [\r\n]+ then takes. */
MLPE_INLINE size_t space_lines(const uint8_t *t, size_t i, size_t n) {
    size_t j = run_of(t, i, n, C_SPACE), p = j;
    while (p > i) {
        p--;
        if (IS(t[p], C_CRLF))
            return p + 1;
    }
    return space_tail(t, i, n);
}

/* ---- the families (R1) ------------------------------------------------- */

/* GPT-2 (ByteLevel use_regex=True):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * Every character starts some alternative: no gaps. */
static size_t gpt2_at(const uint8_t *t, size_t i, size_t n) {
    uint8_t c = t[i];
    if (c == '\'') {
        size_t j = contraction(t, i, n, 0);
        if (j > i)
            return j;
    }
    if (c == ' ' && i + 1 < n && !IS(t[i + 1], C_SPACE)) {
        uint8_t d = t[i + 1];
        if (IS(d, C_LETTER))
            return run_of(t, i + 2, n, C_LETTER);
        if (IS(d, C_DIGIT))
            return run_of(t, i + 2, n, C_DIGIT);
        return run_other(t, i + 2, n);
    }
    if (IS(c, C_LETTER))
        return run_of(t, i + 1, n, C_LETTER);
    if (IS(c, C_DIGIT))
        return run_of(t, i + 1, n, C_DIGIT);
    if (!IS(c, C_SPACE))
        return run_other(t, i + 1, n);
    return space_tail(t, i, n);
}

/* Llama 3 (digits = 3) and Qwen 2 / 3 (digits = 1, \p{N} alone):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * No gaps. */
static size_t llama_at(const uint8_t *t, size_t i, size_t n, size_t digits) {
    uint8_t c = t[i];
    if (c == '\'') {
        size_t j = contraction(t, i, n, 1);
        if (j > i)
            return j;
    }
    if (IS(c, C_LETTER))
        return run_of(t, i + 1, n, C_LETTER);
    if (!IS(c, C_CRLF | C_DIGIT) && i + 1 < n && IS(t[i + 1], C_LETTER))
        return run_of(t, i + 2, n, C_LETTER);
    if (IS(c, C_DIGIT)) {
        size_t j = i + 1;
        while (j < n && j - i < digits && IS(t[j], C_DIGIT))
            j++;
        return j;
    }
    if (c == ' ' && i + 1 < n && OTHER(t[i + 1]))
        return run_of(t, run_other(t, i + 2, n), n, C_CRLF);
    if (OTHER(c))
        return run_of(t, run_other(t, i + 1, n), n, C_CRLF);
    return space_lines(t, i, n);
}

/* o200k_base (GPT-OSS), in ASCII ([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] = [A-Z],
 * [\p{Ll}\p{Lm}\p{Lo}\p{M}] = [a-z], C = (?i:'s|'t|'re|'ve|'m|'ll|'d)):
 *   [^\r\n\p{L}\p{N}]?[A-Z]*[a-z]+C?|[^\r\n\p{L}\p{N}]?[A-Z]+[a-z]*C?
 *   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * The first two alternatives together: after the optional prefix, the
 * upper-case run then the lower-case run, one of them not empty (giving
 * back upper-case letters never lets [a-z]+ match, and the prefix class has
 * no letter, so without the prefix neither alternative can match where it
 * could not with it).  No gaps. */
static size_t o200k_at(const uint8_t *t, size_t i, size_t n) {
    uint8_t c = t[i];
    size_t k = IS(c, C_LETTER | C_CRLF | C_DIGIT) ? i : i + 1;
    if (k < n && IS(t[k], C_LETTER)) {
        size_t w = run_of(t, run_of(t, k, n, C_UPPER), n, C_LOWER);
        return w < n && t[w] == '\'' ? contraction(t, w, n, 1) : w;
    }
    if (IS(c, C_DIGIT)) {
        size_t j = i + 1;
        while (j < n && j - i < 3 && IS(t[j], C_DIGIT))
            j++;
        return j;
    }
    if (c == ' ' && i + 1 < n && OTHER(t[i + 1]))
        return run_of(t, run_other(t, i + 2, n), n, C_CRLF | C_SLASH);
    if (OTHER(c))
        return run_of(t, run_other(t, i + 1, n), n, C_CRLF | C_SLASH);
    return space_lines(t, i, n);
}

/* DeepSeek V3's word level (its third Split; the first splits off digits,
 * the second matches CJK only), [\p{P}\p{S}] = the bracket class:
 *   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
 *   |[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*
 *   |\s*[\r\n]+|\s+(?!\S)|\s+
 * Control characters not followed by a letter match nothing: gaps. */
static size_t deepseek_word_at(const uint8_t *t, size_t i, size_t n) {
    uint8_t c = t[i];
    if (IS(c, C_LETTER))
        return run_of(t, i + 1, n, C_LETTER);
    if (!IS(c, C_CRLF) && i + 1 < n && IS(t[i + 1], C_LETTER))
        return run_of(t, i + 2, n, C_LETTER); /* [\p{P}\p{S}] or [^\r\n\p{L}\p{P}\p{S}] */
    if (c == ' ' && i + 1 < n && IS(t[i + 1], C_PS))
        return run_of(t, run_of(t, i + 2, n, C_PS), n, C_CRLF);
    if (IS(c, C_PS))
        return run_of(t, run_of(t, i + 1, n, C_PS), n, C_CRLF);
    if (IS(c, C_SPACE))
        return space_lines(t, i, n);
    return i;
}

/* ---- splitting --------------------------------------------------------- */

/* Receives each pre-token [start, end); nonzero stops the split. */
typedef int (*sink_fn)(void *ctx, size_t start, size_t end);

static size_t family_at(int family, const uint8_t *t, size_t i, size_t n) {
    switch (family) {
    case MLPE_BPE_GPT2:
        return gpt2_at(t, i, n);
    case MLPE_BPE_LLAMA3:
        return llama_at(t, i, n, 3);
    case MLPE_BPE_QWEN2:
        return llama_at(t, i, n, 1);
    case MLPE_BPE_O200K:
        return o200k_at(t, i, n);
    default:
        return deepseek_word_at(t, i, n);
    }
}

/* One Isolated level over [start, end): matches and the gaps between them. */
static int split_level(int family, const uint8_t *t, size_t start, size_t end, sink_fn sink,
                       void *ctx) {
    size_t pos = start, gap = start;
    while (pos < end) {
        size_t m = family_at(family, t, pos, end);
        if (m == pos) {
            pos++;
            continue;
        }
        if (gap < pos && sink(ctx, gap, pos))
            return 1;
        if (sink(ctx, pos, m))
            return 1;
        pos = gap = m;
    }
    return gap < end ? sink(ctx, gap, end) : 0;
}

static int split_text(int family, const uint8_t *t, size_t len, sink_fn sink, void *ctx) {
    size_t i = 0;
    if (family != MLPE_BPE_DEEPSEEK)
        return split_level(family, t, 0, len, sink, ctx);
    /* \p{N}{1,3} Isolated: each digit piece is one pre-token (the word level
     * matches nothing in it), each gap between them is split by the word
     * level. */
    while (i < len) {
        size_t j = i;
        if (IS(t[i], C_DIGIT)) {
            while (j < len && j - i < 3 && IS(t[j], C_DIGIT))
                j++;
            if (sink(ctx, i, j))
                return 1;
        } else {
            while (j < len && !IS(t[j], C_DIGIT))
                j++;
            if (split_level(family, t, i, j, sink, ctx))
                return 1;
        }
        i = j;
    }
    return 0;
}

typedef struct ends_sink {
    size_t *ends;
    size_t cap;
    size_t n;
} ends_sink;

static int put_end(void *ctx, size_t start, size_t end) {
    ends_sink *s = (ends_sink *)ctx;
    (void)start;
    if (s->n < s->cap)
        s->ends[s->n] = end;
    s->n++;
    return 0;
}

size_t mlpe_bpe_split(int family, const uint8_t *text, size_t len, size_t *ends, size_t cap) {
    ends_sink s;
    cls_init();
    s.ends = ends;
    s.cap = ends == NULL ? 0 : cap;
    s.n = 0;
    split_text(family, text, len, put_end, &s);
    return s.n;
}

/* ---- the cache (R2) ---------------------------------------------------- */

#define MIN_SLOTS 1024

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xFF51AFD7ED558CCDull);
    uint64_t v;
    while (n >= 8) {
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    v = 0;
    if (n)
        memcpy(&v, p, n);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h ? h : 1; /* 0 marks an empty slot */
}

int mlpe_bpe_init(mlpe_bpe_counter *c, int family, size_t max_entries, size_t max_bytes) {
    memset(c, 0, sizeof(*c));
    if (family < MLPE_BPE_GPT2 || family > MLPE_BPE_DEEPSEEK || max_entries == 0 ||
        max_bytes == 0)
        return -1;
    cls_init();
    c->family = family;
    c->max_entries = max_entries > (SIZE_MAX >> 3) ? (SIZE_MAX >> 3) : max_entries;
    /* Offsets into the arena are 32-bit. */
    c->max_bytes = max_bytes > 0xFFFFFFFFu ? 0xFFFFFFFFu : max_bytes;
    c->table = (mlpe_bpe_entry *)calloc(MIN_SLOTS, sizeof(mlpe_bpe_entry));
    if (c->table == NULL)
        return MLPE_E_NOMEM;
    c->mask = MIN_SLOTS - 1;
    return 0;
}

void mlpe_bpe_free(mlpe_bpe_counter *c) {
    size_t i;
    free(c->table);
    free(c->arena);
    for (i = 0; i < c->n_literals; i++)
        free((void *)c->literals[i].ptr);
    free(c->literals);
    memset(c, 0, sizeof(*c));
}

int mlpe_bpe_add_literal(mlpe_bpe_counter *c, const uint8_t *s, size_t len) {
    size_t i;
    uint8_t *copy;
    mlpe_bpe_literal *grown;
    if (len == 0)
        return -1;
    for (i = 0; i < len; i++)
        if (s[i] >= 0x80)
            return -1;
    copy = (uint8_t *)malloc(len);
    if (copy == NULL)
        return MLPE_E_NOMEM;
    grown = (mlpe_bpe_literal *)realloc(c->literals, (c->n_literals + 1) * sizeof(*grown));
    if (grown == NULL) {
        free(copy);
        return MLPE_E_NOMEM;
    }
    memcpy(copy, s, len);
    c->literals = grown;
    c->literals[c->n_literals].ptr = copy;
    c->literals[c->n_literals].len = len;
    c->n_literals++;
    c->literal_first[s[0]] = 1;
    return 0;
}

void mlpe_bpe_clear(mlpe_bpe_counter *c) {
    if (c->table != NULL)
        memset(c->table, 0, (c->mask + 1) * sizeof(mlpe_bpe_entry));
    c->used = 0;
    c->arena_len = 0;
}

int64_t mlpe_bpe_lookup(const mlpe_bpe_counter *c, const uint8_t *word, size_t len) {
    uint64_t h = hash_bytes(word, len);
    size_t i = (size_t)h & c->mask;
    for (;;) {
        const mlpe_bpe_entry *e = &c->table[i];
        if (e->hash == 0)
            return -1;
        if (e->hash == h && e->len == len && memcmp(c->arena + e->key, word, len) == 0)
            return e->count;
        i = (i + 1) & c->mask;
    }
}

static int grow_table(mlpe_bpe_counter *c) {
    size_t slots = (c->mask + 1) * 2, i;
    mlpe_bpe_entry *table = (mlpe_bpe_entry *)calloc(slots, sizeof(mlpe_bpe_entry));
    if (table == NULL)
        return MLPE_E_NOMEM;
    for (i = 0; i <= c->mask; i++) {
        const mlpe_bpe_entry *e = &c->table[i];
        size_t j;
        if (e->hash == 0)
            continue;
        j = (size_t)e->hash & (slots - 1);
        while (table[j].hash != 0)
            j = (j + 1) & (slots - 1);
        table[j] = *e;
    }
    free(c->table);
    c->table = table;
    c->mask = slots - 1;
    return 0;
}

int mlpe_bpe_insert(mlpe_bpe_counter *c, const uint8_t *word, size_t len, int64_t count) {
    uint64_t h;
    size_t i;
    if (len > MLPE_BPE_MAX_WORD || len > c->max_bytes)
        return 0;
    if (c->used >= c->max_entries || c->arena_len + len > c->max_bytes) {
        mlpe_bpe_clear(c);
        c->clears++;
    }
    if ((c->used + 1) * 2 > c->mask + 1 && grow_table(c) != 0)
        return MLPE_E_NOMEM;
    if (c->arena_len + len > c->arena_cap) {
        size_t cap = c->arena_cap ? c->arena_cap : 4096;
        uint8_t *arena;
        while (cap < c->arena_len + len)
            cap *= 2;
        if (cap > c->max_bytes)
            cap = c->max_bytes;
        arena = (uint8_t *)realloc(c->arena, cap);
        if (arena == NULL)
            return MLPE_E_NOMEM;
        c->arena = arena;
        c->arena_cap = cap;
    }
    h = hash_bytes(word, len);
    i = (size_t)h & c->mask;
    while (c->table[i].hash != 0) {
        const mlpe_bpe_entry *e = &c->table[i];
        if (e->hash == h && e->len == len && memcmp(c->arena + e->key, word, len) == 0)
            return 0; /* already there */
        i = (i + 1) & c->mask;
    }
    if (len)
        memcpy(c->arena + c->arena_len, word, len);
    c->table[i].hash = h;
    c->table[i].key = (uint32_t)c->arena_len;
    c->table[i].len = (uint32_t)len;
    c->table[i].count = count;
    c->arena_len += len;
    c->used++;
    return 0;
}

/* ---- counting (R3, R4) ------------------------------------------------- */

int mlpe_bpe_refuses(const mlpe_bpe_counter *c, const uint8_t *text, size_t len) {
    size_t i, k;
    if (c->n_literals == 0) {
        uint8_t any = 0;
        for (i = 0; i < len; i++)
            any |= text[i];
        return (any & 0x80) != 0;
    }
    for (i = 0; i < len; i++) {
        uint8_t b = text[i];
        if (b >= 0x80)
            return 1;
        if (!c->literal_first[b])
            continue;
        for (k = 0; k < c->n_literals; k++) {
            const mlpe_bpe_literal *l = &c->literals[k];
            if (l->ptr[0] == b && l->len <= len - i && memcmp(l->ptr, text + i, l->len) == 0)
                return 1;
        }
    }
    return 0;
}

typedef struct count_sink {
    mlpe_bpe_counter *c;
    const uint8_t *text;
    mlpe_bpe_miss_fn miss;
    void *ctx;
    size_t boundary;
    int64_t total;
    int64_t before;  /* the total when the pre-token at boundary started */
    int at_boundary; /* a pre-token starts at boundary */
    int status;
} count_sink;

static int add_word(void *ctx, size_t start, size_t end) {
    count_sink *s = (count_sink *)ctx;
    const uint8_t *word = s->text + start;
    size_t len = end - start;
    int64_t n = mlpe_bpe_lookup(s->c, word, len);
    if (start == s->boundary) {
        s->at_boundary = 1;
        s->before = s->total;
    }
    if (MLPE_UNLIKELY(n < 0)) {
        if (s->miss == NULL) {
            s->status = MLPE_BPE_MISS;
            return 1;
        }
        n = s->miss(s->ctx, word, len);
        if (n < 0) {
            s->status = MLPE_BPE_FAILED;
            return 1;
        }
        if (mlpe_bpe_insert(s->c, word, len, n) != 0)
            s->status = MLPE_BPE_NOMEM; /* reported at the end; the count is exact */
    }
    s->total += n;
    return 0;
}

static int count_one(mlpe_bpe_counter *c, const uint8_t *text, size_t len, size_t boundary,
                     mlpe_bpe_miss_fn miss, void *ctx, count_sink *s) {
    s->c = c;
    s->text = text;
    s->miss = miss;
    s->ctx = ctx;
    s->boundary = boundary;
    s->total = 0;
    s->before = 0;
    s->at_boundary = 0;
    s->status = MLPE_BPE_OK;
    split_text(c->family, text, len, add_word, s);
    return s->status;
}

int mlpe_bpe_count(mlpe_bpe_counter *c, const uint8_t *text, size_t len, size_t boundary,
                   int64_t *total, int64_t *suffix, mlpe_bpe_miss_fn miss, void *ctx) {
    count_sink s;
    int status, nomem = 0;
    if (boundary > len)
        boundary = len;
    if (mlpe_bpe_refuses(c, text, len))
        return MLPE_BPE_REFUSED;
    status = count_one(c, text, len, boundary, miss, ctx, &s);
    if (status == MLPE_BPE_NOMEM)
        nomem = 1;
    else if (status != MLPE_BPE_OK)
        return status;
    *total = s.total;
    if (boundary == len) {
        *suffix = 0;
    } else if (s.at_boundary) {
        *suffix = s.total - s.before;
    } else {
        /* boundary inside a pre-token: the suffix's own split (R3) */
        status = count_one(c, text + boundary, len - boundary, 0, miss, ctx, &s);
        if (status == MLPE_BPE_NOMEM)
            nomem = 1;
        else if (status != MLPE_BPE_OK)
            return status;
        *suffix = s.total;
    }
    return nomem ? MLPE_BPE_NOMEM : MLPE_BPE_OK;
}
