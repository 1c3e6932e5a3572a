/*
 * fuzz_bpe.c -- libFuzzer entry point for the BPE counter (mlpe_bpe.h).  The
 * input is a text; a hash of it picks the cache bounds and a literal, and
 * every family is run on it (bytes >= 0x80 included: the split must stay
 * safe on them even though count refuses such text).
 *
 * Checked (rule numbers are those of mlpe_bpe.h):
 *  - R1: the pre-tokens tile the text: ends strictly increase and the last
 *    is the length; a second split gives the same ends; a split into too
 *    small an array reports the same count;
 *  - R3: for every pre-token start b (the first 32), the split of text[b:]
 *    is the split of text after b -- the property the one-scan suffix
 *    count rests on;
 *  - R2: with a deterministic model (a hash of the word), count equals the
 *    sum of the model over the pre-tokens, and the suffix count equals the
 *    sum over the pre-tokens of text[b:], for boundaries at pre-token
 *    starts and inside pre-tokens, under small caches that clear often; a
 *    count without a callback is either MISS or the same numbers; a word
 *    found in the cache has the model's count;
 *  - R4: count refuses exactly the texts with a byte >= 0x80 or an
 *    occurrence of the registered literal.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mlpe_bpe.h"

#define FAMILIES 5
#define MAX_TEXT 4096

static int64_t model(void *ctx, const uint8_t *word, size_t len) {
    size_t *calls = (size_t *)ctx;
    FUZZ_CHECK(len > 0);
    (*calls)++;
    return (int64_t)(fuzz_hash(word, len) % 7) + 1 + (int64_t)(len / 3);
}

static int64_t sum_model(const uint8_t *t, const size_t *ends, size_t n, size_t from) {
    int64_t total = 0;
    size_t i, start = 0, calls = 0;
    for (i = 0; i < n; i++) {
        if (start >= from)
            total += model(&calls, t + start, ends[i] - start);
        start = ends[i];
    }
    return total;
}

static int has_literal(const uint8_t *t, size_t len, const uint8_t *lit, size_t n) {
    size_t i;
    for (i = 0; i + n <= len; i++)
        if (memcmp(t + i, lit, n) == 0)
            return 1;
    return 0;
}

static void check_tiling(const size_t *ends, size_t n, size_t len) {
    size_t i;
    FUZZ_CHECK((len == 0) == (n == 0));
    for (i = 0; i < n; i++)
        FUZZ_CHECK(ends[i] > (i ? ends[i - 1] : 0));
    if (n)
        FUZZ_CHECK(ends[n - 1] == len);
}

static void run_family(int family, const uint8_t *t, size_t len, uint64_t bits) {
    size_t *ends = (size_t *)malloc((len + 1) * sizeof(size_t));
    size_t *again = (size_t *)malloc((len + 1) * sizeof(size_t));
    size_t *sub = (size_t *)malloc((len + 1) * sizeof(size_t));
    size_t n, m, i, start, checked = 0;
    FUZZ_CHECK(ends && again && sub);

    n = mlpe_bpe_split(family, t, len, ends, len + 1);
    FUZZ_CHECK(n <= len);
    check_tiling(ends, n, len);
    FUZZ_CHECK(mlpe_bpe_split(family, t, len, again, len + 1) == n);
    FUZZ_CHECK(memcmp(ends, again, n * sizeof(size_t)) == 0);
    if (n > 1)
        FUZZ_CHECK(mlpe_bpe_split(family, t, len, again, n / 2) == n);
    FUZZ_CHECK(mlpe_bpe_split(family, t, len, NULL, 0) == n);

    /* R3: the suffix at each pre-token start splits as the whole did. */
    for (i = 0, start = 0; i < n && checked < 32; i++, checked++) {
        size_t k;
        m = mlpe_bpe_split(family, t + start, len - start, sub, len + 1);
        FUZZ_CHECK(m == n - i);
        for (k = 0; k < m; k++)
            FUZZ_CHECK(sub[k] + start == ends[i + k]);
        start = ends[i];
    }

    {
        mlpe_bpe_counter c;
        static const size_t entries[4] = {1, 3, 64, 1000000};
        static const size_t bytes[4] = {1, 16, 256, 1u << 20};
        size_t calls = 0, b;
        int64_t total, suffix, total2, suffix2, want_total;
        int status, refused;
        uint8_t literal[3];
        size_t lit_len = 0;

        FUZZ_CHECK(mlpe_bpe_init(&c, family, entries[bits & 3], bytes[(bits >> 2) & 3]) == 0);
        if ((bits >> 4) & 1 && len >= 2) {
            /* A literal taken from the text itself (ASCII only, as added
             * tokens are registered), so that it sometimes occurs. */
            size_t at = (size_t)((bits >> 5) % len);
            lit_len = 1 + (size_t)((bits >> 20) % 3);
            if (at + lit_len > len)
                lit_len = len - at;
            memcpy(literal, t + at, lit_len);
            for (i = 0; i < lit_len; i++)
                literal[i] &= 0x7f;
            if (literal[0] == 0)
                literal[0] = 'a';
            FUZZ_CHECK(mlpe_bpe_add_literal(&c, literal, lit_len) == 0);
        }
        refused = 0;
        for (i = 0; i < len; i++)
            refused |= t[i] >= 0x80;
        if (lit_len)
            refused |= has_literal(t, len, literal, lit_len);
        FUZZ_CHECK(mlpe_bpe_refuses(&c, t, len) == refused);

        want_total = sum_model(t, ends, n, 0);
        /* boundaries: every pre-token start among the first few, then a few
         * positions chosen by the hash (inside pre-tokens too), and len */
        for (i = 0; i <= n + 4 && i < 12; i++) {
            if (i < n && i < 8)
                b = i ? ends[i - 1] : 0;
            else if (i < n + 4)
                b = len ? (size_t)((bits >> (i % 40)) % (len + 1)) : 0;
            else
                b = len;
            status = mlpe_bpe_count(&c, t, len, b, &total, &suffix, model, &calls);
            if (refused) {
                FUZZ_CHECK(status == MLPE_BPE_REFUSED);
                continue;
            }
            FUZZ_CHECK(status == MLPE_BPE_OK);
            FUZZ_CHECK(total == want_total);
            m = mlpe_bpe_split(family, t + b, len - b, sub, len + 1);
            FUZZ_CHECK(suffix == sum_model(t + b, sub, m, 0));
            status = mlpe_bpe_count(&c, t, len, b, &total2, &suffix2, NULL, NULL);
            FUZZ_CHECK(status == MLPE_BPE_OK || status == MLPE_BPE_MISS);
            if (status == MLPE_BPE_OK)
                FUZZ_CHECK(total2 == total && suffix2 == suffix);
        }
        /* Every pre-token the cache holds has the model's count. */
        for (i = 0, start = 0; i < n; i++) {
            int64_t got = mlpe_bpe_lookup(&c, t + start, ends[i] - start);
            if (got >= 0)
                FUZZ_CHECK(got == model(&calls, t + start, ends[i] - start));
            start = ends[i];
        }
        FUZZ_CHECK(c.used <= entries[bits & 3]);
        FUZZ_CHECK(c.arena_len <= bytes[(bits >> 2) & 3]);
        mlpe_bpe_free(&c);
    }
    free(ends);
    free(again);
    free(sub);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t bits = fuzz_hash(data, size);
    uint8_t *text;
    int family;
    if (size > MAX_TEXT)
        size = MAX_TEXT;
    text = fuzz_dup(data, size); /* exactly sized: reads past it are caught */
    for (family = MLPE_BPE_GPT2; family <= MLPE_BPE_DEEPSEEK; family++)
        run_family(family, text, size, bits ^ (uint64_t)family * 0x9E3779B97F4A7C15ull);
    free(text);
    return 0;
}
