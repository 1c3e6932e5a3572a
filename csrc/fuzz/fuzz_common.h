/*
 * fuzz_common.h -- helpers shared by the fuzz drivers (csrc/fuzz/fuzz_*.c).
 *
 * Every driver follows the same plan:
 *
 *  1. The input is the stream itself, so seed files are plain captures.  A
 *     hash of the input chooses the configuration: how to cut the stream
 *     into pieces, which limits to use, whether the stream ends with EOF.
 *     Every mutation of the content so also tries another chunking, and a
 *     finding reproduces from its bytes alone.
 *  2. The stream is decoded twice -- in one piece and in the derived pieces
 *     -- and each run writes what it saw into a canonical log (body spans
 *     coalesced, pointers replaced by the bytes they point at).  Rule 1 of
 *     each decoder ("results do not depend on the split") says the two logs
 *     are equal.
 *  3. While decoding, the documented contract is checked after every call;
 *     a violation calls abort() so that libFuzzer, the standalone driver and
 *     the sanitizers all treat it as a crash.
 *  4. Each piece is copied into a heap block of exactly its size and freed
 *     after use, so AddressSanitizer reports a decoder that reads past a
 *     piece or keeps a pointer into a previous one; every decoder is freed,
 *     so LeakSanitizer sees leaks.
 *
 * This header is for the fuzz drivers only (it prints and aborts, which the
 * core itself never does).
 */
#ifndef MLPE_FUZZ_COMMON_H
#define MLPE_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlpe_common.h"

#if defined(__GNUC__) || defined(__clang__)
#define FUZZ_UNUSED __attribute__((unused))
#else
#define FUZZ_UNUSED
#endif

/* ---- invariant checks -------------------------------------------------- */

FUZZ_UNUSED static void fuzz_fail(const char *what, const char *file, int line) {
    fprintf(stderr, "%s:%d: invariant violated: %s\n", file, line, what);
    fflush(stderr);
    abort();
}

#define FUZZ_CHECK(cond)                                 \
    do {                                                 \
        if (!(cond))                                     \
            fuzz_fail(#cond, __FILE__, __LINE__);        \
    } while (0)

/* ---- deterministic pseudo-random numbers (splitmix64) ------------------- */

FUZZ_UNUSED static uint64_t fuzz_mix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* FNV-1a over the input, finished with a splitmix round: the configuration
 * source of rule 1. */
FUZZ_UNUSED static uint64_t fuzz_hash(const uint8_t *data, size_t size) {
    uint64_t h = 0xCBF29CE484222325ull;
    size_t i;
    for (i = 0; i < size; i++) {
        h ^= data[i];
        h *= 0x100000001B3ull;
    }
    return fuzz_mix(&h);
}

/* ---- split patterns ------------------------------------------------------
 *
 * One control byte (from fuzz_hash) chooses how a stream of `total` bytes
 * is cut:
 *
 *   bits 7..5 = 0     fixed pieces of (bits 4..0) + 1 bytes (1..32; 1 is
 *                     the byte-at-a-time case)
 *   bits 7..5 = 1..6  random pieces of 1 .. 2^(mode+1) bytes (up to 4 .. 128)
 *   bits 7..5 = 7     two or three pieces cut at random points
 *
 * The random modes are seeded from the control byte and the stream length,
 * so a given input always produces the same pieces.
 */
typedef struct fuzz_splitter {
    unsigned mode;
    size_t fixed;
    size_t max_piece;
    size_t cuts[2];
    size_t n_cuts;
    size_t pos;
    uint64_t rng;
} fuzz_splitter;

FUZZ_UNUSED static void fuzz_split_init(fuzz_splitter *s, uint8_t control, size_t total) {
    size_t i;
    memset(s, 0, sizeof *s);
    s->mode = control >> 5;
    s->rng = ((uint64_t)control << 32) ^ (uint64_t)total ^ 0x6D6C70652D666173ull;
    if (s->mode == 0) {
        s->fixed = (size_t)(control & 31) + 1;
    } else if (s->mode < 7) {
        s->max_piece = (size_t)1 << (s->mode + 1);
    } else {
        s->n_cuts = 1 + (size_t)(control & 1);
        for (i = 0; i < s->n_cuts; i++)
            s->cuts[i] = total ? (size_t)(fuzz_mix(&s->rng) % (total + 1)) : 0;
        if (s->n_cuts == 2 && s->cuts[0] > s->cuts[1]) {
            size_t t = s->cuts[0];
            s->cuts[0] = s->cuts[1];
            s->cuts[1] = t;
        }
    }
}

/* Length of the next piece (never 0 while remaining > 0). */
FUZZ_UNUSED static size_t fuzz_split_next(fuzz_splitter *s, size_t remaining) {
    size_t n;
    if (remaining == 0)
        return 0;
    if (s->mode == 0) {
        n = s->fixed;
    } else if (s->mode < 7) {
        n = 1 + (size_t)(fuzz_mix(&s->rng) % s->max_piece);
    } else {
        size_t i;
        n = remaining;
        for (i = 0; i < s->n_cuts; i++) {
            if (s->cuts[i] > s->pos) {
                n = s->cuts[i] - s->pos;
                break;
            }
        }
    }
    if (n > remaining)
        n = remaining;
    s->pos += n;
    return n;
}

/* A heap copy of exactly n bytes (at least one byte is allocated so that the
 * pointer is never NULL; ASan still flags a read of it when n == 0). */
FUZZ_UNUSED static uint8_t *fuzz_dup(const uint8_t *src, size_t n) {
    uint8_t *p = (uint8_t *)malloc(n ? n : 1);
    FUZZ_CHECK(p != NULL);
    if (n)
        memcpy(p, src, n);
    return p;
}

/* ---- canonical logs --------------------------------------------------------
 *
 * A run's results serialised as tagged records: a tag byte, then fixed-size
 * little-endian integers and length-prefixed byte strings.  Two runs agree
 * when their logs are byte-for-byte equal. */

FUZZ_UNUSED static void fuzz_log_raw(mlpe_buf *log, const void *p, size_t n) {
    FUZZ_CHECK(mlpe_buf_append(log, (const uint8_t *)p, n) == MLPE_OK);
}

FUZZ_UNUSED static void fuzz_log_u64(mlpe_buf *log, uint64_t v) {
    uint8_t b[8];
    int i;
    for (i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    fuzz_log_raw(log, b, 8);
}

FUZZ_UNUSED static void fuzz_log_tag(mlpe_buf *log, char tag) {
    uint8_t t = (uint8_t)tag;
    fuzz_log_raw(log, &t, 1);
}

FUZZ_UNUSED static void fuzz_log_bytes(mlpe_buf *log, const uint8_t *p, size_t n) {
    fuzz_log_u64(log, n);
    if (n)
        fuzz_log_raw(log, p, n);
}

FUZZ_UNUSED static void fuzz_log_span(mlpe_buf *log, mlpe_span s) {
    FUZZ_CHECK(s.len == 0 || s.ptr != NULL);
    fuzz_log_bytes(log, s.ptr, s.len);
}

/* Prints the bytes of a log around offset `at` (the records are tagged
 * with letters, which helps to find the field in the driver's logger). */
FUZZ_UNUSED static void fuzz_hexdump(const char *label, const mlpe_buf *log, size_t at) {
    size_t i, from = at > 48 ? at - 48 : 0, to = at + 16 < log->len ? at + 16 : log->len;
    fprintf(stderr, "  %s [%zu..%zu):", label, from, to);
    for (i = from; i < to; i++)
        fprintf(stderr, "%s%02x", i == at ? " |" : " ", log->ptr[i]);
    fprintf(stderr, "\n");
}

/* Aborts, after printing where they part, when two logs differ. */
FUZZ_UNUSED static void fuzz_logs_equal(const mlpe_buf *a, const mlpe_buf *b, const char *what) {
    size_t i, n = a->len < b->len ? a->len : b->len;
    if (a->len == b->len && (n == 0 || memcmp(a->ptr, b->ptr, n) == 0))
        return;
    for (i = 0; i < n && a->ptr[i] == b->ptr[i]; i++)
        ;
    fprintf(stderr, "%s: logs differ at byte %zu (lengths %zu and %zu)\n", what, i, a->len,
            b->len);
    fuzz_hexdump("first ", a, i);
    fuzz_hexdump("second", b, i);
    fuzz_fail("logs of whole and split decoding are equal", __FILE__, __LINE__);
}

/* Non-zero when s is well-formed UTF-8 (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
FUZZ_UNUSED static int fuzz_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k, need;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i - 1 < need)
            return 0;
        for (k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return 0;
        i += need + 1;
    }
    return 1;
}

#endif /* MLPE_FUZZ_COMMON_H */
