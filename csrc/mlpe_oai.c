/*
 * mlpe_oai.c -- one OpenAI chunk (or completion body) from JSON to fragments.
 *
 * Theory of operation
 * -------------------
 * The payload is copied into the decoder's scratch buffer followed by
 * MLPE_OAI_PAD zero bytes, and one left-to-right pass over the copy both
 * validates it (rules J1-J4 of mlpe_oai.h) and collects what the shape rules
 * (S1-S10) need.
 *
 * The zero bytes are a sentinel.  A NUL can never continue valid JSON (it is
 * not whitespace, not a token, and a control character inside a string), so
 * every scanning loop stops at the first one by itself and the scanner has no
 * end-of-input tests; only the final "nothing but whitespace is left" test
 * compares positions.  Reads never go beyond the padding: loops stop at the
 * first NUL, and the widest read that starts at or before it is a 16-byte
 * vector load.  The copy also lets strings be unescaped in place (unescaping
 * never makes text longer: a 2-byte escape gives 1 byte, a 6-byte \u escape
 * at most 3, a 12-byte surrogate pair 4), so the scratch buffer is exactly
 * len + MLPE_OAI_PAD bytes, whatever the payload holds.
 *
 * The pass is a recursive descent whose functions follow the schema of a
 * chunk, with the cursor passed by value (NULL plus s->err on failure):
 *
 *     parse_top ─ "error"   ─ parse_error                               (S2)
 *               ├ "choices" ─ parse_choices ─ parse_choice           (S3, S4)
 *               │          "delta"/"message" ─ parse_container          (S5)
 *               │                "tool_calls" ─ parse_tool_calls
 *               │                        ─ parse_tool ─ parse_function  (S6)
 *               └ "usage"   ─ raw text of the object                    (S7)
 *
 * and, in the SGLang dialect (G1-G7), one of its own:
 *
 *     parse_top_sglang ─ "error"     ─ parse_error                      (G2)
 *                      ├ "text"      ─ its string                       (G3)
 *                      └ "meta_info" ─ parse_meta ─ parse_finish_reason (G4)
 *                                         "prompt_tokens", "completion_tokens"
 *                                         ─ their literals              (G5)
 *
 * Every member those functions do not know is validated by skip_value, an
 * iterative validator with a 64-bit stack of container kinds, so an
 * arbitrary subtree costs no recursion (J3, as RFC 8259 section 9 allows,
 * bounds it at MLPE_JSON_MAX_DEPTH = 64 levels, exactly the bits of the
 * stack).  The schema functions nest at
 * most 7 deep, so the C stack stays small whatever the input.
 *
 * Because the pass stops at the first byte that breaks J1-J3, "the first
 * problem in text order decides" (J4) needs no bookkeeping.  An invalid UTF-8
 * sequence is located at its first byte: a lead byte whose continuation
 * bytes are wrong or missing (even at the end of the input) is the UTF-8
 * problem, ahead of the missing closing quote that may follow.
 *
 * Duplicate keys (J6: RFC 8259 section 4 leaves their meaning to the
 * implementation) and the fixed order of the type checks (S9) are why
 * the pass records instead of deciding: each schema function fills a record
 * with the kind (and, for strings, the unescaped text) of the LAST occurrence
 * of each member it knows, a later occurrence overwriting an earlier one.  At
 * its closing bracket the record is complete and is checked in the S9 order;
 * the first failure is kept, as a compact `shape`, in the record of the
 * enclosing member, so that it is dropped if that member is superseded in
 * turn.  Only once the whole payload has been validated does
 * mlpe_oai_decode look at the top record: a payload that is not JSON never
 * reports a shape error.
 *
 * Strings are scanned 16 bytes at a time (SSE2 or NEON, else 8 at a time
 * with SWAR) for the bytes that need attention: '"', '\\', controls (< 0x20,
 * forbidden by RFC 8259 section 7) and bytes >= 0x80, which are validated as
 * UTF-8 one sequence at a time (section 8.1).  Only the member names of the
 * schema's objects and the values it reports are unescaped; every other
 * string is validated and left as it is (the raw text of "usage" must
 * survive).
 *
 * Tool calls: every tool-call object met inside a delta or message is
 * appended to d->tools as it is parsed (whether its choice is the selected
 * one, and whether its tool_calls member is superseded, is known only
 * later); each record remembers its range.  The array thus holds at most one
 * entry per tool-call object of the payload, fewer than len / 2.
 *
 * The template (fast path)
 * ------------------------
 * The chunks of one stream differ, as a rule, in one string: the token's
 * text.  After a full pass whose result has exactly one string fragment --
 * content or reasoning and no tool call, or one string of the only tool
 * call (its arguments, say) and neither content nor reasoning -- and no
 * finish_reason, no usage, the decoder keeps the payload as a template: the
 * bytes up to the opening quote of that fragment's literal (the prefix,
 * quote included), the bytes from its closing quote on (the suffix), and
 * which fragment it was.  A later payload that starts with the prefix, ends
 * with the suffix, and has between them one valid string body -- no
 * unescaped quote, no control character, valid escapes and UTF-8, checked
 * and unescaped by the scanner above, on a copy followed by the closing
 * quote and the zero padding -- gets the template's result with its own
 * string as that fragment.  Anything else, down to a single differing byte
 * or a middle that is not exactly one string body, goes to the full pass,
 * which decides everything (errors included) and may make the payload the
 * new template.
 *
 * Why that is exact.  The template's payload P h S (P ends with the opening
 * quote, S starts with the closing quote) was valid JSON; the new one, P h' S,
 * differs in the body of that one string token only.  A JSON scanner is in
 * the same state after P in both; h' is one string body ending exactly at
 * S's first byte (an unescaped quote inside h', or a trailing odd backslash
 * that escapes S's quote, is a miss); from there both read the same bytes
 * in the same state.  So the new payload is valid too (J1-J4: P and S have
 * no problem, h' was checked), with the same tokens at the same depths, the
 * same member names, the same kinds and the same numbers: one string value
 * differs.  No rule (S1-S10, J6) looks at the text or the length of a string
 * value -- they look at names, kinds, integer values and array positions --
 * so every decision comes out the same and the result differs only in that
 * string.  What makes "that string" the fragment:
 *  - the hole is a value, never a member name (a name decides what a value
 *    is): it is found from the reported fragment, whose text the full pass
 *    unescaped in place from its body's first byte, so the fragment's
 *    pointer is the body's offset in the payload;
 *  - it is the literal that won (J6): with a duplicate member, the pointer
 *    is the winner's by construction (a template found by searching the text
 *    for "content" could hold the loser, and a later duplicate in the suffix
 *    would then win in every payload);
 *  - the fragment's presence depends on the kind only: "" and "a" both give
 *    has_content = 1.  Whether it is empty matters to callers (R3 of
 *    mlpe_response.h), never to the shape;
 *  - the other fragments are absent or null, or fixed by P and S (a tool
 *    call's index, or its position).  A second string fragment would be text
 *    of the old payload that the scratch buffer no longer holds, hence
 *    exactly one.
 *
 * Integer holes.  Chunks often also differ in an integer: a per-chunk
 * "created", the simulator's "mlpe_send_ns".  The full pass records (in
 * parse_top, text order) the spans of the values of top-level members other
 * than "error", "choices" and "usage" that are integer literals,
 * -?(0|[1-9][0-9]*) -- the first MLPE_OAI_TEMPLATE_INTS of them; later ones
 * stay fixed bytes of the template (sound, only fewer hits) -- and they
 * become integer holes of the template, in its prefix or its suffix.  A
 * later payload whose template bytes do not all match as they are is
 * matched again segment by segment: fixed bytes equal, one integer literal
 * (any) in each integer hole, then as above.  Why that is exact too:
 *  - substituting one integer literal for another keeps J1-J4 (ASCII
 *    digits, a token of the same kind at the same depth, no new problem),
 *    so the payload is valid with the same structure;
 *  - the value belongs to a top-level member that S10 ignores: only
 *    "error", "choices" and "usage" are read at the top level, and the
 *    member's name is fixed template bytes, so it is that same ignored name
 *    in every payload (it is compared after unescaping, as the full pass
 *    compares: "\u0075sage" is "usage" and never a hole).  Its duplicates
 *    are ignored as well, so J6 cannot make it matter; values nested in a
 *    top-level member, a choice's "index" say, are never holes (their
 *    integer value is read by S3/S6);
 *  - the result points into the scratch copy of the string hole only, never
 *    at an integer.
 * So every rule decides the same and the result is the template's with the
 * new string.  The integer is scanned greedily (the longest
 * -?(0|[1-9][0-9]*) at the hole) and the next fixed bytes must follow right
 * after it: they start with ',', '}' or whitespace, the bytes after a
 * member value, never a digit, so no shorter split could match ("01" scans
 * as "0" and misses at '1'; "1e5", "-", "true" miss), and a longer token
 * ("1.5") misses at its '.'.  Two holes are never adjacent (at least that
 * one byte lies between), and the string hole is only ever next to its
 * quotes.  With integer holes in the suffix the string body is the text up
 * to the first unescaped quote after the prefix, where the suffix must
 * start.  The segments are compared as they are up to the first difference
 * (common_len), so that only a changed integer costs a scan.
 *
 * The template is a cache, not decoding state: a result never depends on
 * the payloads before it.  It holds at most MLPE_OAI_TEMPLATE_MAX bytes, a
 * copy of payload bytes (freed by mlpe_oai_free).  A stream whose chunks
 * also differ elsewhere (a per-chunk string stamp, say) misses every time, at the
 * cost of a prefix compare and of re-arming; after MLPE_OAI_MISS_LIMIT
 * misses in a row the decoder backs off (exponentially) from trying, so such
 * streams pay next to nothing for it.
 */
#include "mlpe_oai.h"

#include <stdio.h>

#if defined(__SSE2__) || defined(_M_X64) || defined(_M_AMD64)
#include <emmintrin.h>
#define MLPE_OAI_SSE2 1
#elif defined(__aarch64__) || defined(_M_ARM64)
#include <arm_neon.h>
#define MLPE_OAI_NEON 1
#endif
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define MLPE_OAI_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define MLPE_OAI_NOINLINE __declspec(noinline)
#else
#define MLPE_OAI_NOINLINE
#endif

/* Zero bytes after the copy of the payload: the sentinel plus room for a
 * 16-byte vector load that starts on it.  32 keeps a margin. */
#define MLPE_OAI_PAD 32

/* The schema functions nest 7 containers deep (object, choices, choice,
 * delta, tool_calls, tool call, function) and never test the limit
 * themselves: skip_value tests it for everything below them, with a stack
 * of 64 bits. */
typedef char mlpe_oai_depth_fits[(MLPE_JSON_MAX_DEPTH >= 8 && MLPE_JSON_MAX_DEPTH <= 64) ? 1 : -1];

/* ---- scanner ------------------------------------------------------------ */

typedef struct scan {
    const uint8_t *end; /* the copy's end: its first sentinel byte */
    mlpe_oai_decoder *d;
    size_t n_tools;     /* entries of d->tools used by this payload */
    int err;            /* the code, once a function returned NULL */
    size_t decoded_len; /* string_slow's result */
    /* Integer values of ignored top-level members (S10), in text order: the
     * template's integer holes.  Offsets in the payload; the first
     * MLPE_OAI_TEMPLATE_INTS only. */
    size_t n_ints;
    size_t int_at[MLPE_OAI_TEMPLATE_INTS], int_len[MLPE_OAI_TEMPLATE_INTS];
} scan;

/* Records a failure: the functions return the cursor, or NULL. */
MLPE_INLINE const uint8_t *fail(scan *s, int code) {
    s->err = code;
    return NULL;
}

#define SYNTAX(s) fail((s), MLPE_E_JSON_SYNTAX)

/* Insignificant whitespace, RFC 8259 section 2: SP, HTAB, LF, CR.  The
 * sentinel is none of them. */
MLPE_INLINE const uint8_t *ws(const uint8_t *p) {
    while (MLPE_UNLIKELY(*p <= ' ') && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* A byte that stops a string scan: '"', '\\', a control or a non-ASCII
 * byte.  (c - 0x20) wraps below 0x20 and reaches 0x60 from 0x80 up. */
MLPE_INLINE int is_special(uint8_t c) {
    return (uint8_t)(c - 0x20) >= 0x60 || c == '"' || c == '\\';
}

/* Whether any of the 8 bytes in x is special, without branches: a byte equal
 * to '"' or '\\' becomes zero after the XOR and the zero-byte test sets its
 * top bit; x - 0x20.. sets the top bit of bytes below 0x20; x has it for
 * bytes >= 0x80.  A borrow only leaves a byte that is itself special, so the
 * answer is exact. */
MLPE_INLINE int swar_special(uint64_t x) {
    const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
    const uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    return ((((q - ones) & ~q) | ((b - ones) & ~b) | (x - ones * 0x20) | x) & high) != 0;
}

#if defined(MLPE_OAI_SSE2) || defined(MLPE_OAI_NEON)
MLPE_INLINE unsigned ctz64(uint64_t x) {
#if defined(_MSC_VER) && !defined(__clang__)
    unsigned long i;
    _BitScanForward64(&i, x);
    return (unsigned)i;
#else
    return (unsigned)__builtin_ctzll(x);
#endif
}
#endif

/* The first special byte at or after p; the sentinel guarantees one. */
MLPE_INLINE const uint8_t *find_special(const uint8_t *p) {
#if defined(MLPE_OAI_SSE2)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    for (;;) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        /* Signed compare: bytes >= 0x80 are negative, so "0x20 > v" takes
         * them too. */
        const __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                         _mm_cmpgt_epi8(space, v));
        const unsigned mask = (unsigned)_mm_movemask_epi8(hit);
        if (mask != 0)
            return p + ctz64(mask);
        p += 16;
    }
#elif defined(MLPE_OAI_NEON)
    const uint8x16_t quote = vdupq_n_u8('"'), bslash = vdupq_n_u8('\\');
    const uint8x16_t space = vdupq_n_u8(0x20), high = vdupq_n_u8(0x80);
    for (;;) {
        const uint8x16_t v = vld1q_u8(p);
        const uint8x16_t hit = vorrq_u8(vorrq_u8(vceqq_u8(v, quote), vceqq_u8(v, bslash)),
                                        vorrq_u8(vcltq_u8(v, space), vcgeq_u8(v, high)));
        /* Narrowing shift: 4 bits per byte, NEON's movemask. */
        const uint64_t mask = vget_lane_u64(vreinterpret_u64_u8(vshrn_n_u16(vreinterpretq_u16_u8(hit), 4)), 0);
        if (mask != 0)
            return p + (ctz64(mask) >> 2);
        p += 16;
    }
#else
    for (;;) {
        uint64_t x;
        memcpy(&x, p, 8);
        if (swar_special(x))
            break;
        p += 8;
    }
    while (!is_special(*p))
        p++;
    return p;
#endif
}

/* Length of the well-formed UTF-8 sequence at p (p[0] >= 0x80), or 0.
 * RFC 3629 section 4 (Unicode table 3-7): no overlong forms (C0, C1,
 * E0 80..9F, F0 80..8F), no surrogates (ED A0..BF), nothing above U+10FFFF
 * (F4 90.., F5..FF).  A sequence cut short by the end of the payload meets
 * the sentinel, which is no continuation byte. */
static size_t utf8_seq(const uint8_t *p) {
    const uint8_t c = p[0];
    uint8_t lo = 0x80, hi = 0xBF;
    size_t n, i;
    if (c < 0xC2 || c > 0xF4)
        return 0;
    if (c < 0xE0) {
        n = 2;
    } else if (c < 0xF0) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    }
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* The value of the 4 hex digits (either case) at p, or -1. */
static int32_t hex4(const uint8_t *p) {
    int32_t v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        const uint8_t c = p[i], l = mlpe_lower(c);
        if (c >= '0' && c <= '9')
            v = v * 16 + (c - '0');
        else if (l >= 'a' && l <= 'f')
            v = v * 16 + (l - 'a' + 10);
        else
            return -1;
    }
    return v;
}

/* Length of the escape at p (p[0] == '\\'), or 0 when it is none of RFC 8259
 * section 7. */
static size_t escape_len(const uint8_t *p) {
    switch (p[1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return 2;
    case 'u':
        return hex4(p + 2) >= 0 ? 6 : 0;
    default:
        return 0;
    }
}

static uint8_t *put_utf8(uint8_t *w, uint32_t cp) {
    if (cp < 0x80) {
        *w++ = (uint8_t)cp;
    } else if (cp < 0x800) {
        *w++ = (uint8_t)(0xC0 | (cp >> 6));
        *w++ = (uint8_t)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *w++ = (uint8_t)(0xE0 | (cp >> 12));
        *w++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (uint8_t)(0x80 | (cp & 0x3F));
    } else {
        *w++ = (uint8_t)(0xF0 | (cp >> 18));
        *w++ = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        *w++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (uint8_t)(0x80 | (cp & 0x3F));
    }
    return w;
}

/* Writes the character of the valid escape at *pp to w (J5) and moves *pp
 * past what it used: a high-surrogate escape directly followed by a
 * low-surrogate escape is one code point, any other surrogate escape is
 * U+FFFD.  Returns the new write position, never beyond the new *pp. */
static uint8_t *put_escape(uint8_t *w, const uint8_t **pp) {
    const uint8_t *p = *pp;
    uint32_t cp;
    switch (p[1]) {
    case 'b': cp = '\b'; break;
    case 'f': cp = '\f'; break;
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'u':
        cp = (uint32_t)hex4(p + 2);
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            const int32_t low = cp <= 0xDBFF && p[2] == '\\' && p[3] == 'u' ? hex4(p + 4) : -1;
            if (low >= 0xDC00 && low <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)low - 0xDC00);
                p += 6;
            } else {
                cp = 0xFFFD;
            }
        }
        break;
    default: /* '"', '\\' and '/' stand for themselves */
        cp = p[1];
        break;
    }
    *pp = p + 2;
    return put_utf8(w, cp);
}

/* The rest of a string from its first special byte q that is not the
 * closing quote (start: the first byte of the body).  With decode set the
 * string is unescaped in place, from start on, and s->decoded_len receives
 * its length; otherwise it is only validated.  Returns the position after
 * the closing quote.  Out of line: escapes and non-ASCII text are rare in the
 * members a chunk is made of. */
static const uint8_t *string_slow(scan *s, const uint8_t *start, const uint8_t *q, int decode) {
    uint8_t *w = NULL; /* write position, once the first escape is met */
    for (;;) {
        const uint8_t c = *q;
        const uint8_t *next;
        if (c == '"')
            break;
        if (c == '\\') {
            const size_t n = escape_len(q);
            if (n == 0)
                return SYNTAX(s);
            if (decode) {
                if (w == NULL)
                    w = (uint8_t *)(uintptr_t)q; /* the copy is the decoder's own */
                w = put_escape(w, &q);
            } else {
                q += n;
            }
        } else if (c >= 0x80) {
            const size_t n = utf8_seq(q);
            if (n == 0)
                return fail(s, MLPE_E_JSON_UTF8);
            if (w != NULL) {
                memmove(w, q, n);
                w += n;
            }
            q += n;
        } else {
            return SYNTAX(s); /* a control character, or the end of the payload */
        }
        next = find_special(q);
        if (w != NULL) {
            memmove(w, q, (size_t)(next - q));
            w += next - q;
        }
        q = next;
    }
    if (decode)
        s->decoded_len = (size_t)((w != NULL ? (const uint8_t *)w : q) - start);
    return q + 1;
}

/* The string at p (its opening quote).  With decode set, *out receives its
 * unescaped content; otherwise it is only validated.  Returns the position
 * after the closing quote. */
MLPE_INLINE const uint8_t *scan_string(scan *s, const uint8_t *p, int decode, mlpe_span *out) {
    const uint8_t *const start = p + 1;
    const uint8_t *q = find_special(start);
    if (MLPE_LIKELY(*q == '"')) {
        if (decode) {
            out->ptr = start;
            out->len = (size_t)(q - start);
        }
        return q + 1;
    }
    /* (The length comes back through s so that *out can live in registers.) */
    q = string_slow(s, start, q, decode);
    if (decode && q != NULL) {
        out->ptr = start;
        out->len = s->decoded_len;
    }
    return q;
}

/* The kinds of value the shape rules tell apart. */
enum { V_ABSENT = 0, V_NULL, V_STRING, V_INT, V_OBJECT, V_ARRAY, V_OTHER };

/* What a schema function keeps of one member value. */
typedef struct slot {
    uint8_t kind;
    int32_t small;  /* V_INT: the value when it is in [0, 2^31), else -1 */
    mlpe_span text; /* V_STRING: unescaped content; V_OBJECT: raw JSON text */
} slot;

MLPE_INLINE int is_digit(uint8_t c) {
    return (uint8_t)(c - '0') < 10;
}

/* The fraction and exponent of a number whose integer part ends at p (RFC
 * 8259 section 6):  [ "." 1*DIGIT ] [ ("e" / "E") [ "-" / "+" ] 1*DIGIT ].
 * Sets *integer to whether both are absent (S8). */
MLPE_INLINE const uint8_t *number_tail(scan *s, const uint8_t *p, int *integer) {
    *integer = 1;
    if (*p == '.') {
        if (!is_digit(*++p))
            return SYNTAX(s);
        while (is_digit(*++p))
            ;
        *integer = 0;
    }
    if ((*p | 0x20) == 'e') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return SYNTAX(s);
        while (is_digit(*++p))
            ;
        *integer = 0;
    }
    return p;
}

/* Past the digits at p, 8 at a time while it can: a byte is a digit when
 * its high nibble is 3 both as it is and plus 6 (0x30..0x39 -> 0x36..0x3F).
 * A carry out of a non-digit byte can only spoil a word that already fails,
 * so the test holds in either byte order. */
MLPE_INLINE const uint8_t *skip_digits(const uint8_t *p) {
    const uint64_t nibbles = 0xF0F0F0F0F0F0F0F0u, threes = 0x3030303030303030u;
    for (;;) {
        uint64_t x;
        memcpy(&x, p, 8);
        if ((x & nibbles) != threes || ((x + 0x0606060606060606u) & nibbles) != threes)
            break;
        p += 8;
    }
    while (is_digit(*p))
        p++;
    return p;
}

/* A number at p:  [ "-" ] ( "0" / %x31-39 *DIGIT ) tail, validated only. */
MLPE_INLINE const uint8_t *skip_number(scan *s, const uint8_t *p) {
    int integer;
    p += *p == '-';
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        p = skip_digits(p + 1);
    else
        return SYNTAX(s);
    return number_tail(s, p, &integer);
}

/* A number at p whose kind and small value matter (an index). */
static const uint8_t *read_number(scan *s, const uint8_t *p, slot *v) {
    uint64_t value = 0; /* stops growing once it reaches 2^31 */
    const int neg = *p == '-';
    int integer;
    p += neg;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        do {
            if (value < 0x80000000u)
                value = value * 10 + (uint64_t)(*p - '0');
        } while (is_digit(*++p));
    } else {
        return SYNTAX(s);
    }
    if ((p = number_tail(s, p, &integer)) == NULL)
        return NULL;
    v->kind = integer ? V_INT : V_OTHER;
    v->small = (neg && value != 0) || value >= 0x80000000u ? -1 : (int32_t)value; /* "-0" is 0 */
    return p;
}

/* The literal true, false or null at p (the sentinel padding covers the
 * 5-byte compare). */
MLPE_INLINE const uint8_t *literal(scan *s, const uint8_t *p) {
    switch (*p) {
    case 'n': return memcmp(p, "null", 4) == 0 ? p + 4 : SYNTAX(s);
    case 't': return memcmp(p, "true", 4) == 0 ? p + 4 : SYNTAX(s);
    default: return memcmp(p, "false", 5) == 0 ? p + 5 : SYNTAX(s);
    }
}

/* Validates the value at p (whitespace before it skipped) that sits inside
 * `depth` open containers.  Without recursion: bit i of `objects` tells
 * whether the container opened i levels above the innermost is an object. */
static const uint8_t *skip_value(scan *s, const uint8_t *p, int depth) {
    uint64_t objects = 0;
    int level = 0;

value:
    switch (*p) {
    case '{':
        if (depth + level >= MLPE_JSON_MAX_DEPTH)
            return fail(s, MLPE_E_JSON_DEPTH);
        p = ws(p + 1);
        if (*p == '}') {
            p++;
            goto after;
        }
        objects = (objects << 1) | 1;
        level++;
        goto name;
    case '[':
        if (depth + level >= MLPE_JSON_MAX_DEPTH)
            return fail(s, MLPE_E_JSON_DEPTH);
        p = ws(p + 1);
        if (*p == ']') {
            p++;
            goto after;
        }
        objects <<= 1;
        level++;
        goto value;
    case '"':
        p = scan_string(s, p, 0, NULL);
        break;
    case 'n': case 't': case 'f':
        p = literal(s, p);
        break;
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        p = skip_number(s, p);
        break;
    default:
        return SYNTAX(s);
    }
    if (p == NULL)
        return NULL;

after:
    if (level == 0)
        return p;
    p = ws(p);
    if (*p == ',') {
        p = ws(p + 1);
        if (objects & 1)
            goto name;
        goto value;
    }
    if (*p != ((objects & 1) ? '}' : ']'))
        return SYNTAX(s);
    p++;
    objects >>= 1;
    level--;
    goto after;

name:
    if (*p != '"')
        return SYNTAX(s);
    if ((p = scan_string(s, p, 0, NULL)) == NULL)
        return NULL;
    p = ws(p);
    if (*p != ':')
        return SYNTAX(s);
    p = ws(p + 1);
    goto value;
}

/* ---- members ------------------------------------------------------------ */

/* Opens the object at p ('{').  *more tells whether a member follows (the
 * cursor is then on its name), else the cursor is past the '}'. */
MLPE_INLINE const uint8_t *object_open(const uint8_t *p, int *more) {
    p = ws(p + 1);
    *more = *p != '}';
    return *more ? p : p + 1;
}

/* After a member value: ',' and the next name, or the closing '}'. */
MLPE_INLINE const uint8_t *object_next(scan *s, const uint8_t *p, int *more) {
    p = ws(p);
    if (*p == ',') {
        *more = 1;
        return ws(p + 1);
    }
    if (*p == '}') {
        *more = 0;
        return p + 1;
    }
    return SYNTAX(s);
}

/* The member name at p and the ':' after it; returns the cursor on the value
 * (decoded names are unescaped in place like values). */
MLPE_INLINE const uint8_t *member_name(scan *s, const uint8_t *p, mlpe_span *name) {
    if (*p != '"')
        return SYNTAX(s);
    if ((p = scan_string(s, p, 1, name)) == NULL)
        return NULL;
    if (*p != ':') {
        p = ws(p);
        if (*p != ':')
            return SYNTAX(s);
    }
    return ws(p + 1);
}

#define NAME_IS(name, lit) ((name).len == sizeof(lit) - 1 && memcmp((name).ptr, lit, sizeof(lit) - 1) == 0)

/* A member value nobody asked about (S10): validated only.  Scalars are
 * dispatched here so that they do not pay for skip_value's stack. */
MLPE_INLINE const uint8_t *skip_member(scan *s, const uint8_t *p, int depth) {
    switch (*p) {
    case '"':
        return scan_string(s, p, 0, NULL);
    case 'n': case 't': case 'f':
        return literal(s, p);
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        return skip_number(s, p);
    default:
        return skip_value(s, p, depth);
    }
}

/* A member value whose kind matters: strings are decoded, numbers classified,
 * and containers keep their raw text. */
static const uint8_t *read_value(scan *s, const uint8_t *p, int depth, slot *v) {
    const uint8_t *const start = p;
    switch (*p) {
    case '"':
        v->kind = V_STRING;
        return scan_string(s, p, 1, &v->text);
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        return read_number(s, p, v);
    case 'n':
        v->kind = V_NULL;
        return literal(s, p);
    case '{':
        v->kind = V_OBJECT;
        break;
    case '[':
        v->kind = V_ARRAY;
        break;
    default:
        v->kind = V_OTHER;
        break;
    }
    if ((p = skip_value(s, p, depth)) == NULL)
        return NULL;
    v->text.ptr = start;
    v->text.len = (size_t)(p - start);
    return p;
}

/* ---- shape checks ------------------------------------------------------- */

/* The member a failed check names (S9); F_CHOICE and F_TOOL name an array
 * element that is not an object. */
enum {
    F_NONE = 0,
    F_ROOT, F_CHOICES, F_USAGE,                                     /* top level */
    F_CHOICE, F_INDEX, F_DELTA, F_MESSAGE, F_TEXT, F_FINISH_REASON, /* choices[i] */
    F_CONTENT, F_REASONING_CONTENT, F_REASONING, F_TOOL_CALLS,      /* .delta, .message */
    F_TOOL, F_TOOL_INDEX, F_TOOL_ID, F_TOOL_TYPE, F_FUNCTION,       /* .tool_calls[j] */
    F_NAME, F_ARGUMENTS                                             /* .function */
};

/* The first failed check below some member (field F_NONE: none). */
typedef struct shape {
    uint8_t field;
    uint8_t in_message; /* the container is "message", not "delta" */
    size_t choice, tool;
} shape;

MLPE_INLINE int string_ok(const slot *v) {
    return v->kind <= V_STRING; /* absent, null or a string */
}

MLPE_INLINE int kind_ok(uint8_t kind, uint8_t want) {
    return kind <= V_NULL || kind == want;
}

/* ---- tool calls (S6) ---------------------------------------------------- */

typedef struct tool_rec {
    slot index, id, type, name, arguments;
    uint8_t function; /* kind of "function"; name and arguments are its members */
} tool_rec;

static const uint8_t *parse_function(scan *s, const uint8_t *p, int depth, tool_rec *r) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "arguments"))
            p = read_value(s, p, depth, &r->arguments);
        else if (NAME_IS(name, "name"))
            p = read_value(s, p, depth, &r->name);
        else
            p = skip_member(s, p, depth);
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

static const uint8_t *parse_tool(scan *s, const uint8_t *p, int depth, tool_rec *r) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "function")) {
            r->name.kind = r->arguments.kind = V_ABSENT;
            if (*p == '{') {
                r->function = V_OBJECT;
                p = parse_function(s, p, depth + 1, r);
            } else {
                slot v;
                p = read_value(s, p, depth, &v);
                r->function = v.kind;
            }
        } else if (NAME_IS(name, "index")) {
            p = read_value(s, p, depth, &r->index);
        } else if (NAME_IS(name, "id")) {
            p = read_value(s, p, depth, &r->id);
        } else if (NAME_IS(name, "type")) {
            p = read_value(s, p, depth, &r->type);
        } else {
            p = skip_member(s, p, depth);
        }
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

/* The S6 checks of a complete tool call at position j; F_NONE if it passes. */
static uint8_t check_tool(const tool_rec *r, size_t j) {
    if (r->index.kind == V_INT ? r->index.small < 0 : r->index.kind != V_ABSENT && r->index.kind != V_NULL)
        return F_TOOL_INDEX;
    /* Without an index the position stands in, and must fit as well (only a
     * payload of 4 GiB or more can fail this). */
    if (r->index.kind != V_INT && j > 0x7FFFFFFFu)
        return F_TOOL_INDEX;
    if (!string_ok(&r->id))
        return F_TOOL_ID;
    if (!string_ok(&r->type))
        return F_TOOL_TYPE;
    if (!kind_ok(r->function, V_OBJECT))
        return F_FUNCTION;
    if (r->function == V_OBJECT && !string_ok(&r->name))
        return F_NAME;
    if (r->function == V_OBJECT && !string_ok(&r->arguments))
        return F_ARGUMENTS;
    return F_NONE;
}

static int push_tool(scan *s, const tool_rec *r, size_t j) {
    mlpe_oai_decoder *d = s->d;
    mlpe_oai_tool *t;
    const int fn = r->function == V_OBJECT;
    if (s->n_tools == d->cap_tools) {
        const size_t cap = d->cap_tools ? d->cap_tools * 2 : 8;
        mlpe_oai_tool *grown;
        if (cap > SIZE_MAX / sizeof *grown)
            return MLPE_E_NOMEM;
        grown = (mlpe_oai_tool *)realloc(d->tools, cap * sizeof *grown);
        if (grown == NULL)
            return MLPE_E_NOMEM;
        d->tools = grown;
        d->cap_tools = cap;
    }
    t = &d->tools[s->n_tools++];
    t->index = r->index.kind == V_INT ? r->index.small : (int32_t)j;
    t->has_id = r->id.kind == V_STRING;
    t->has_type = r->type.kind == V_STRING;
    t->has_name = fn && r->name.kind == V_STRING;
    t->has_arguments = fn && r->arguments.kind == V_STRING;
    t->id = r->id.text;
    t->type = r->type.text;
    t->name = r->name.text;
    t->arguments = r->arguments.text;
    return MLPE_OK;
}

/* ---- delta / message (S5) ----------------------------------------------- */

typedef struct container_rec {
    slot content, reasoning_content, reasoning;
    uint8_t tool_calls; /* kind of "tool_calls" */
    size_t tools_at;    /* its calls: d->tools[tools_at .. tools_at + n_tools) */
    size_t n_tools;
    shape tool_fail;    /* first failed check inside it (field and tool) */
} container_rec;

static const uint8_t *parse_tool_calls(scan *s, const uint8_t *p, int depth, container_rec *r) {
    size_t j;
    r->tools_at = s->n_tools;
    r->n_tools = 0;
    r->tool_fail.field = F_NONE;
    r->tool_fail.in_message = 0;
    r->tool_fail.choice = r->tool_fail.tool = 0;
    p = ws(p + 1);
    if (*p == ']')
        return p + 1;
    for (j = 0;; j++) {
        uint8_t f;
        if (*p == '{') {
            tool_rec t;
            int rc;
            t.index.kind = t.id.kind = t.type.kind = V_ABSENT;
            t.name.kind = t.arguments.kind = t.function = V_ABSENT;
            if ((p = parse_tool(s, p, depth + 1, &t)) == NULL)
                return NULL;
            f = check_tool(&t, j);
            if ((rc = push_tool(s, &t, j)) != MLPE_OK)
                return fail(s, rc);
        } else {
            if ((p = skip_value(s, p, depth)) == NULL)
                return NULL;
            f = F_TOOL;
        }
        if (f != F_NONE && r->tool_fail.field == F_NONE) {
            r->tool_fail.field = f;
            r->tool_fail.tool = j;
        }
        p = ws(p);
        if (*p == ']')
            break;
        if (*p != ',')
            return SYNTAX(s);
        p = ws(p + 1);
    }
    r->n_tools = s->n_tools - r->tools_at;
    return p + 1;
}

static const uint8_t *parse_container(scan *s, const uint8_t *p, int depth, container_rec *r) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "content")) {
            p = read_value(s, p, depth, &r->content);
        } else if (NAME_IS(name, "reasoning_content")) {
            p = read_value(s, p, depth, &r->reasoning_content);
        } else if (NAME_IS(name, "reasoning")) {
            p = read_value(s, p, depth, &r->reasoning);
        } else if (NAME_IS(name, "tool_calls")) {
            if (*p == '[') {
                r->tool_calls = V_ARRAY;
                p = parse_tool_calls(s, p, depth + 1, r);
            } else {
                slot v;
                p = read_value(s, p, depth, &v);
                r->tool_calls = v.kind;
            }
        } else {
            p = skip_member(s, p, depth);
        }
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

/* The S5 checks of a complete delta or message. */
static shape check_container(const container_rec *r) {
    shape f = {F_NONE, 0, 0, 0};
    if (!string_ok(&r->content))
        f.field = F_CONTENT;
    else if (!string_ok(&r->reasoning_content))
        f.field = F_REASONING_CONTENT;
    else if (!string_ok(&r->reasoning))
        f.field = F_REASONING;
    else if (!kind_ok(r->tool_calls, V_ARRAY))
        f.field = F_TOOL_CALLS;
    else if (r->tool_calls == V_ARRAY)
        f = r->tool_fail;
    return f;
}

/* ---- choices (S3, S4) --------------------------------------------------- */

typedef struct choice_rec {
    slot index, text, finish_reason;
    uint8_t delta, message; /* kinds */
    container_rec delta_rec, message_rec;
} choice_rec;

/* What a "choices" array gave: its first failed check, and the fragments of
 * the selected choice. */
typedef struct choices_rec {
    shape fail;
    int selected;
    slot content, reasoning, finish_reason;
    size_t tools_at, n_tools;
} choices_rec;

/* "delta" or "message": a container, or some other kind. */
static const uint8_t *parse_container_member(scan *s, const uint8_t *p, int depth, uint8_t *kind,
                                             container_rec *r) {
    slot v;
    if (*p == '{') {
        r->content.kind = r->reasoning_content.kind = r->reasoning.kind = r->tool_calls = V_ABSENT;
        *kind = V_OBJECT;
        return parse_container(s, p, depth + 1, r);
    }
    p = read_value(s, p, depth, &v);
    *kind = v.kind;
    return p;
}

static const uint8_t *parse_choice(scan *s, const uint8_t *p, int depth, choice_rec *r) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "delta"))
            p = parse_container_member(s, p, depth, &r->delta, &r->delta_rec);
        else if (NAME_IS(name, "index"))
            p = read_value(s, p, depth, &r->index);
        else if (NAME_IS(name, "finish_reason"))
            p = read_value(s, p, depth, &r->finish_reason);
        else if (NAME_IS(name, "message"))
            p = parse_container_member(s, p, depth, &r->message, &r->message_rec);
        else if (NAME_IS(name, "text"))
            p = read_value(s, p, depth, &r->text);
        else
            p = skip_member(s, p, depth);
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

/* The S3/S4 checks of a complete choice, depth first (the caller fills in
 * its position). */
static shape check_choice(const choice_rec *r) {
    shape f = {F_NONE, 0, 0, 0};
    if (!kind_ok(r->index.kind, V_INT))
        f.field = F_INDEX;
    else if (!kind_ok(r->delta, V_OBJECT))
        f.field = F_DELTA;
    else if (r->delta == V_OBJECT && (f = check_container(&r->delta_rec)).field != F_NONE)
        f.in_message = 0;
    else if (!kind_ok(r->message, V_OBJECT))
        f.field = F_MESSAGE;
    else if (r->message == V_OBJECT && (f = check_container(&r->message_rec)).field != F_NONE)
        f.in_message = 1;
    else if (!string_ok(&r->text))
        f.field = F_TEXT;
    else if (!string_ok(&r->finish_reason))
        f.field = F_FINISH_REASON;
    return f;
}

/* Takes the fragments of the choice selected by S3 (S4, S5). */
static void select_choice(choices_rec *out, const choice_rec *r) {
    const container_rec *c = r->delta == V_OBJECT     ? &r->delta_rec
                             : r->message == V_OBJECT ? &r->message_rec
                                                      : NULL;
    out->selected = 1;
    out->content = r->text;
    out->reasoning.kind = V_ABSENT;
    out->finish_reason = r->finish_reason;
    out->tools_at = out->n_tools = 0;
    if (c == NULL)
        return;
    if (c->content.kind == V_STRING)
        out->content = c->content;
    out->reasoning = c->reasoning_content.kind == V_STRING ? c->reasoning_content : c->reasoning;
    if (c->tool_calls == V_ARRAY) {
        out->tools_at = c->tools_at;
        out->n_tools = c->n_tools;
    }
}

static const uint8_t *parse_choices(scan *s, const uint8_t *p, int depth, choices_rec *r) {
    size_t i;
    r->fail.field = F_NONE;
    r->selected = 0;
    p = ws(p + 1);
    if (*p == ']')
        return p + 1;
    for (i = 0;; i++) {
        shape f = {F_NONE, 0, 0, 0};
        if (*p == '{') {
            choice_rec c;
            c.index.kind = c.text.kind = c.finish_reason.kind = c.delta = c.message = V_ABSENT;
            if ((p = parse_choice(s, p, depth + 1, &c)) == NULL)
                return NULL;
            f = check_choice(&c);
            if (!r->selected && (c.index.kind <= V_NULL || (c.index.kind == V_INT && c.index.small == 0)))
                select_choice(r, &c);
        } else {
            if ((p = skip_value(s, p, depth)) == NULL)
                return NULL;
            f.field = F_CHOICE;
        }
        if (f.field != F_NONE && r->fail.field == F_NONE) {
            r->fail = f;
            r->fail.choice = i;
        }
        p = ws(p);
        if (*p == ']')
            return p + 1;
        if (*p != ',')
            return SYNTAX(s);
        p = ws(p + 1);
    }
}

/* ---- top level (S1, S2, S7) --------------------------------------------- */

typedef struct top_rec {
    slot error;         /* S2 */
    slot error_message; /* error.message, when error is an object */
    uint8_t choices;    /* kind of "choices" */
    choices_rec choices_rec;
    slot usage;
} top_rec;

static const uint8_t *parse_error(scan *s, const uint8_t *p, int depth, slot *message) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "message"))
            p = read_value(s, p, depth, message);
        else
            p = skip_member(s, p, depth);
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

static const uint8_t *parse_top(scan *s, const uint8_t *p, top_rec *r) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "choices")) {
            if (*p == '[') {
                r->choices = V_ARRAY;
                p = parse_choices(s, p, 2, &r->choices_rec);
            } else {
                slot v;
                p = read_value(s, p, 1, &v);
                r->choices = v.kind;
            }
        } else if (NAME_IS(name, "usage")) {
            p = read_value(s, p, 1, &r->usage);
        } else if (NAME_IS(name, "error")) {
            r->error_message.kind = V_ABSENT;
            if (*p == '{') {
                r->error.kind = V_OBJECT;
                p = parse_error(s, p, 2, &r->error_message);
            } else {
                p = read_value(s, p, 1, &r->error);
            }
        } else if (*p == '-' || is_digit(*p)) {
            /* A number nobody reads: an integer hole when it is one. */
            const uint8_t *const start = p, *q = p + (*p == '-');
            if ((p = skip_number(s, p)) != NULL && s->n_ints < MLPE_OAI_TEMPLATE_INTS) {
                while (q != p && is_digit(*q))
                    q++;
                if (q == p) {
                    s->int_at[s->n_ints] = (size_t)(start - s->d->scratch.ptr);
                    s->int_len[s->n_ints++] = (size_t)(p - start);
                }
            }
        } else {
            p = skip_member(s, p, 1);
        }
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

/* ---- SGLang's /generate chunk (G1-G7) ------------------------------------ */

typedef struct meta_rec {
    uint8_t finish_reason; /* kind of "finish_reason" */
    slot finish_type;      /* its "type" */
    slot prompt_tokens, completion_tokens; /* V_INT: text is the literal (G5) */
} meta_rec;

typedef struct sglang_rec {
    slot error;         /* G2 */
    slot error_message; /* error.message, when error is an object */
    slot text;          /* G3 */
    uint8_t meta;       /* kind of "meta_info" */
    meta_rec meta_rec;
} sglang_rec;

/* A count (G5): read_value, keeping an integer's literal as its text (a
 * number is never unescaped, so the literal is the payload's bytes). */
static const uint8_t *read_count(scan *s, const uint8_t *p, int depth, slot *v) {
    const uint8_t *const start = p;
    p = read_value(s, p, depth, v);
    if (p != NULL && v->kind == V_INT) {
        v->text.ptr = start;
        v->text.len = (size_t)(p - start);
    }
    return p;
}

static const uint8_t *parse_finish_reason(scan *s, const uint8_t *p, int depth, slot *type) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "type"))
            p = read_value(s, p, depth, type);
        else
            p = skip_member(s, p, depth);
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

static const uint8_t *parse_meta(scan *s, const uint8_t *p, int depth, meta_rec *r) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "completion_tokens")) {
            p = read_count(s, p, depth, &r->completion_tokens);
        } else if (NAME_IS(name, "finish_reason")) {
            r->finish_type.kind = V_ABSENT;
            if (*p == '{') {
                r->finish_reason = V_OBJECT;
                p = parse_finish_reason(s, p, depth + 1, &r->finish_type);
            } else {
                slot v;
                p = read_value(s, p, depth, &v);
                r->finish_reason = v.kind;
            }
        } else if (NAME_IS(name, "prompt_tokens")) {
            p = read_count(s, p, depth, &r->prompt_tokens);
        } else {
            p = skip_member(s, p, depth);
        }
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

static const uint8_t *parse_top_sglang(scan *s, const uint8_t *p, sglang_rec *r) {
    int more;
    p = object_open(p, &more);
    while (more) {
        mlpe_span name;
        if ((p = member_name(s, p, &name)) == NULL)
            return NULL;
        if (NAME_IS(name, "text")) {
            p = read_value(s, p, 1, &r->text);
        } else if (NAME_IS(name, "meta_info")) {
            if (*p == '{') {
                meta_rec *m = &r->meta_rec;
                m->finish_reason = m->finish_type.kind = V_ABSENT;
                m->prompt_tokens.kind = m->completion_tokens.kind = V_ABSENT;
                r->meta = V_OBJECT;
                p = parse_meta(s, p, 2, m);
            } else {
                slot v;
                p = read_value(s, p, 1, &v);
                r->meta = v.kind;
            }
        } else if (NAME_IS(name, "error")) {
            r->error_message.kind = V_ABSENT;
            if (*p == '{') {
                r->error.kind = V_OBJECT;
                p = parse_error(s, p, 2, &r->error_message);
            } else {
                p = read_value(s, p, 1, &r->error);
            }
        } else {
            p = skip_member(s, p, 1);
        }
        if (p == NULL || (p = object_next(s, p, &more)) == NULL)
            return NULL;
    }
    return p;
}

/* ---- results ------------------------------------------------------------ */

static int shape_error(mlpe_oai_decoder *d, shape f, mlpe_oai_chunk *out) {
    static const char *const names[] = {
        "", "$", "choices", "usage",
        "", "index", "delta", "message", "text", "finish_reason",
        "content", "reasoning_content", "reasoning", "tool_calls",
        "", "index", "id", "type", "function",
        "name", "arguments",
    };
    const char *const container = f.in_message ? "message" : "delta";
    const char *const leaf = names[f.field];
    char *const path = d->path;
    const size_t n = sizeof d->path;
    /* The longest path, choices[<20 digits>].message.tool_calls[<20
     * digits>].function.arguments, has 89 characters. */
    if (f.field <= F_USAGE)
        snprintf(path, n, "%s", leaf);
    else if (f.field == F_CHOICE)
        snprintf(path, n, "choices[%zu]", f.choice);
    else if (f.field <= F_FINISH_REASON)
        snprintf(path, n, "choices[%zu].%s", f.choice, leaf);
    else if (f.field <= F_TOOL_CALLS)
        snprintf(path, n, "choices[%zu].%s.%s", f.choice, container, leaf);
    else if (f.field == F_TOOL)
        snprintf(path, n, "choices[%zu].%s.tool_calls[%zu]", f.choice, container, f.tool);
    else if (f.field <= F_FUNCTION)
        snprintf(path, n, "choices[%zu].%s.tool_calls[%zu].%s", f.choice, container, f.tool, leaf);
    else
        snprintf(path, n, "choices[%zu].%s.tool_calls[%zu].function.%s", f.choice, container, f.tool,
                 leaf);
    out->shape_path = path;
    return MLPE_E_CHUNK_SHAPE;
}

/* S2-S9 over the top record of a payload that passed J1-J4. */
static int finish(mlpe_oai_decoder *d, const top_rec *r, mlpe_oai_chunk *out) {
    const choices_rec *c = &r->choices_rec;
    shape f = {F_NONE, 0, 0, 0};
    if (r->error.kind > V_NULL) {
        if (r->error.kind == V_STRING)
            out->error_message = r->error.text;
        else if (r->error.kind == V_OBJECT && r->error_message.kind == V_STRING)
            out->error_message = r->error_message.text;
        return MLPE_E_ENDPOINT_ERROR;
    }
    if (!kind_ok(r->choices, V_ARRAY)) {
        f.field = F_CHOICES;
        return shape_error(d, f, out);
    }
    if (r->choices == V_ARRAY && c->fail.field != F_NONE)
        return shape_error(d, c->fail, out);
    if (!kind_ok(r->usage.kind, V_OBJECT)) {
        f.field = F_USAGE;
        return shape_error(d, f, out);
    }
    if (r->choices == V_ARRAY && c->selected) {
        out->has_content = c->content.kind == V_STRING;
        out->content = c->content.text;
        out->has_reasoning = c->reasoning.kind == V_STRING;
        out->reasoning = c->reasoning.text;
        out->has_finish_reason = c->finish_reason.kind == V_STRING;
        out->finish_reason = c->finish_reason.text;
        /* no tool calls: tools may be NULL, and NULL + 0 is undefined in C */
        out->tools = c->n_tools ? d->tools + c->tools_at : NULL;
        out->n_tools = c->n_tools;
    }
    if (r->usage.kind == V_OBJECT) {
        out->has_usage = 1;
        out->usage = r->usage.text;
    }
    return MLPE_OK;
}

static int sglang_shape_error(mlpe_oai_decoder *d, const char *path, mlpe_oai_chunk *out) {
    snprintf(d->path, sizeof d->path, "%s", path);
    out->shape_path = d->path;
    return MLPE_E_CHUNK_SHAPE;
}

/* G5: {"prompt_tokens":P,"completion_tokens":C} in d->usage_text, from the
 * literals present; 0 when neither is, or an error code. */
static int sglang_usage(mlpe_oai_decoder *d, const meta_rec *m, mlpe_oai_chunk *out) {
    static const char prompt[] = "\"prompt_tokens\":", completion[] = "\"completion_tokens\":";
    mlpe_buf *b = &d->usage_text;
    int rc = MLPE_OK;
    b->len = 0;
    if (m->prompt_tokens.kind != V_INT && m->completion_tokens.kind != V_INT)
        return MLPE_OK;
    rc |= mlpe_buf_append(b, (const uint8_t *)"{", 1);
    if (m->prompt_tokens.kind == V_INT) {
        rc |= mlpe_buf_append(b, (const uint8_t *)prompt, sizeof prompt - 1);
        rc |= mlpe_buf_append(b, m->prompt_tokens.text.ptr, m->prompt_tokens.text.len);
    }
    if (m->completion_tokens.kind == V_INT) {
        if (m->prompt_tokens.kind == V_INT)
            rc |= mlpe_buf_append(b, (const uint8_t *)",", 1);
        rc |= mlpe_buf_append(b, (const uint8_t *)completion, sizeof completion - 1);
        rc |= mlpe_buf_append(b, m->completion_tokens.text.ptr, m->completion_tokens.text.len);
    }
    rc |= mlpe_buf_append(b, (const uint8_t *)"}", 1);
    if (rc != MLPE_OK)
        return MLPE_E_NOMEM;
    out->has_usage = 1;
    out->usage.ptr = b->ptr;
    out->usage.len = b->len;
    return MLPE_OK;
}

/* G2-G6 over the top record of a payload that passed J1-J4. */
static int finish_sglang(mlpe_oai_decoder *d, const sglang_rec *r, mlpe_oai_chunk *out) {
    const meta_rec *m = &r->meta_rec;
    int rc;
    if (r->error.kind > V_NULL) {
        if (r->error.kind == V_STRING)
            out->error_message = r->error.text;
        else if (r->error.kind == V_OBJECT && r->error_message.kind == V_STRING)
            out->error_message = r->error_message.text;
        return MLPE_E_ENDPOINT_ERROR;
    }
    if (!string_ok(&r->text))
        return sglang_shape_error(d, "text", out);
    if (!kind_ok(r->meta, V_OBJECT))
        return sglang_shape_error(d, "meta_info", out);
    if (r->meta == V_OBJECT) {
        if (!kind_ok(m->finish_reason, V_OBJECT))
            return sglang_shape_error(d, "meta_info.finish_reason", out);
        if (m->finish_reason == V_OBJECT && !string_ok(&m->finish_type))
            return sglang_shape_error(d, "meta_info.finish_reason.type", out);
        if (!kind_ok(m->prompt_tokens.kind, V_INT))
            return sglang_shape_error(d, "meta_info.prompt_tokens", out);
        if (!kind_ok(m->completion_tokens.kind, V_INT))
            return sglang_shape_error(d, "meta_info.completion_tokens", out);
        if ((rc = sglang_usage(d, m, out)) != MLPE_OK)
            return rc;
        out->has_finish_reason = m->finish_reason == V_OBJECT && m->finish_type.kind == V_STRING;
        out->finish_reason = m->finish_type.text;
    }
    out->has_content = r->text.kind == V_STRING;
    out->content = r->text.text;
    return MLPE_OK;
}

/* ---- the template (fast path) -------------------------------------------- */

/* Backing off: after MLPE_OAI_MISS_LIMIT misses in a row, the next
 * MLPE_OAI_SKIP_MIN payloads go straight to the full pass, twice as many
 * after every further miss, up to 2^MLPE_OAI_SKIP_DOUBLINGS times as many. */
#define MLPE_OAI_MISS_LIMIT 8u
#define MLPE_OAI_SKIP_MIN 16u
#define MLPE_OAI_SKIP_DOUBLINGS 6u

/* The fragment a template's hole is (d->tmpl_field). */
enum { T_NONE = 0, T_CONTENT, T_REASONING, T_TOOL_ID, T_TOOL_TYPE, T_TOOL_NAME, T_TOOL_ARGUMENTS };

MLPE_INLINE void clear_chunk(mlpe_oai_chunk *out) {
    static const mlpe_span none = {NULL, 0};
    out->has_content = out->has_reasoning = out->has_finish_reason = out->has_usage = 0;
    out->content = out->reasoning = out->finish_reason = out->usage = out->error_message = none;
    out->tools = NULL;
    out->n_tools = 0;
    out->shape_path = NULL;
}

/* The position of the closing quote of the valid string literal whose body
 * starts at json[at], or len.  A quote closes it when the run of backslashes
 * before it (inside the body) is even: the first backslash of a maximal run
 * starts an escape, escaped backslashes pair off, and an odd run ends with
 * the backslash of an escaped quote.  (\uXXXX has neither quote nor
 * backslash after its first byte.) */
static size_t closing_quote(const uint8_t *json, size_t at, size_t len) {
    size_t i = at;
    while (i < len) {
        const uint8_t *q = (const uint8_t *)memchr(json + i, '"', len - i);
        size_t j, k;
        if (q == NULL)
            break;
        j = (size_t)(q - json);
        for (k = j; k > at && json[k - 1] == '\\'; k--)
            ;
        if (((j - k) & 1) == 0)
            return j;
        i = j + 1;
    }
    return len;
}

/* After a successful full decode of json[0..len) into *out, whose pass was
 * *s: makes it the template when its result has exactly one string fragment
 * -- content or reasoning with no tool call, or one string of a single tool
 * call with neither content nor reasoning -- and no finish_reason, no usage.
 * The integer values of ignored top-level members the pass found become the
 * integer holes.  Otherwise the template in place stays (it is sound
 * whatever came since). */
static void arm_template(mlpe_oai_decoder *d, const uint8_t *json, size_t len,
                         const mlpe_oai_chunk *out, const scan *s) {
    const mlpe_span *hole;
    uint8_t field;
    size_t at, end, k, n_pre = 0, last = 0;
    if (out->has_finish_reason || out->has_usage)
        return;
    if (out->n_tools == 0) {
        if (out->has_content + out->has_reasoning != 1)
            return;
        field = out->has_content ? T_CONTENT : T_REASONING;
        hole = out->has_content ? &out->content : &out->reasoning;
    } else {
        const mlpe_oai_tool *t = out->tools;
        if (out->n_tools != 1 || out->has_content || out->has_reasoning ||
            t->has_id + t->has_type + t->has_name + t->has_arguments != 1)
            return;
        field = t->has_id     ? T_TOOL_ID
                : t->has_type ? T_TOOL_TYPE
                : t->has_name ? T_TOOL_NAME
                              : T_TOOL_ARGUMENTS;
        hole = t->has_id ? &t->id : t->has_type ? &t->type : t->has_name ? &t->name : &t->arguments;
    }
    /* The fragment is the body of the literal that won (J6), unescaped in
     * place: it starts where that body starts in the copy, so at the same
     * offset of json.  The checks below cannot fail; they keep a template
     * from ever being built on anything but a literal's opening quote, and
     * an integer hole on anything but bytes of the template between two
     * fixed bytes. */
    at = (size_t)(hole->ptr - d->scratch.ptr);
    if (at == 0 || at > len || json[at - 1] != '"')
        return;
    end = closing_quote(json, at, len);
    if (end >= len || at + (len - end) > MLPE_OAI_TEMPLATE_MAX)
        return;
    for (k = 0; k < s->n_ints; k++) {
        const size_t i = s->int_at[k], i_end = i + s->int_len[k];
        if (i <= last || i_end >= len || (i < at ? i_end >= at : i <= end))
            return;
        n_pre += i < at;
        last = i_end;
    }
    d->tmpl_field = T_NONE;
    d->tmpl.len = 0;
    if (mlpe_buf_reserve(&d->tmpl, at + (len - end)) != MLPE_OK)
        return;
    memcpy(d->tmpl.ptr, json, at);
    memcpy(d->tmpl.ptr + at, json + end, len - end);
    d->tmpl.len = at + (len - end);
    d->tmpl_prefix = at;
    for (k = 0; k < s->n_ints; k++) {
        d->tmpl_int_at[k] = (uint32_t)(k < n_pre ? s->int_at[k] : s->int_at[k] - (end - at));
        d->tmpl_int_len[k] = (uint32_t)s->int_len[k];
    }
    d->tmpl_n_ints = (uint8_t)s->n_ints;
    d->tmpl_n_pre = (uint8_t)n_pre;
    d->tmpl_tool_index = out->n_tools ? out->tools->index : 0;
    d->tmpl_field = field;
}

/* The hole's string body when it is json[0..n) and the closing quote comes
 * right after: copied with that quote and the zero padding, scanned as a
 * string (J1, J2, J5) and unescaped in place, exactly as the full pass
 * would.  Its literal must end at that quote: an unescaped quote inside, or
 * a trailing backslash that escapes it, is a miss (returns 0).  have: the
 * bytes readable at json (>= n). */
MLPE_INLINE int hole_body(mlpe_oai_decoder *d, const uint8_t *json, size_t n, size_t have,
                          mlpe_span *text) {
    uint8_t *h;
    const uint8_t *q;
    d->scratch.len = 0;
    if (mlpe_buf_reserve(&d->scratch, n + MLPE_OAI_PAD) != MLPE_OK)
        return 0;
    h = d->scratch.ptr;
    if (n <= 16 && have >= 16)
        memcpy(h, json, 16); /* one vector move; the bytes past n are overwritten */
    else
        memcpy(h, json, n);
    memset(h + n, 0, MLPE_OAI_PAD);
    h[n] = '"';
    d->scratch.len = n;
    q = find_special(h);
    text->ptr = h;
    text->len = n;
    if (MLPE_UNLIKELY(q != h + n)) {
        scan s;
        if (*q == '"')
            return 0;
        s.end = h + n + 1;
        s.d = d;
        s.n_tools = s.n_ints = 0;
        s.err = MLPE_OK;
        s.decoded_len = 0;
        if (string_slow(&s, h, q, 1) != h + n + 1)
            return 0;
        text->len = s.decoded_len;
    }
    return 1;
}

/* The template's result with text as the hole's fragment. */
MLPE_INLINE int template_result(mlpe_oai_decoder *d, mlpe_span text, mlpe_oai_chunk *out) {
    mlpe_oai_tool *t;
    clear_chunk(out);
    switch (d->tmpl_field) {
    case T_CONTENT:
        out->has_content = 1;
        out->content = text;
        return 1;
    case T_REASONING:
        out->has_reasoning = 1;
        out->reasoning = text;
        return 1;
    default:
        break;
    }
    /* A tool-call hole: the template was built from a payload with one tool
     * call, so d->tools has room for it. */
    t = d->tools;
    memset(t, 0, sizeof *t);
    t->index = d->tmpl_tool_index;
    switch (d->tmpl_field) {
    case T_TOOL_ID:
        t->has_id = 1;
        t->id = text;
        break;
    case T_TOOL_TYPE:
        t->has_type = 1;
        t->type = text;
        break;
    case T_TOOL_NAME:
        t->has_name = 1;
        t->name = text;
        break;
    default:
        t->has_arguments = 1;
        t->arguments = text;
        break;
    }
    out->tools = t;
    out->n_tools = 1;
    return 1;
}

/* The end of the integer literal  [ "-" ] ( "0" / %x31-39 *DIGIT )  that
 * starts at json[j] (scanned greedily, never past len), or 0 when none
 * does (j > 0: a hole always follows a fixed byte). */
MLPE_INLINE size_t int_end(const uint8_t *json, size_t j, size_t len) {
    j += j < len && json[j] == '-';
    if (j >= len || !is_digit(json[j]))
        return 0;
    if (json[j++] != '0') {
        /* 8 digits at a time while 8 bytes are left, as skip_digits. */
        const uint64_t nibbles = 0xF0F0F0F0F0F0F0F0u, threes = 0x3030303030303030u;
        for (; len - j >= 8; j += 8) {
            uint64_t x;
            memcpy(&x, json + j, 8);
            if ((x & nibbles) != threes || ((x + 0x0606060606060606u) & nibbles) != threes)
                break;
        }
        while (j < len && is_digit(json[j]))
            j++;
    }
    return j;
}

/* The length of the longest common prefix of a[0..n) and b[0..n). */
MLPE_INLINE size_t common_len(const uint8_t *a, const uint8_t *b, size_t n) {
    size_t i = 0;
#if defined(MLPE_OAI_SSE2)
    for (; n - i >= 16; i += 16) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(a + i));
        const __m128i y = _mm_loadu_si128((const __m128i *)(const void *)(b + i));
        const unsigned ne = ~(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) & 0xFFFFu;
        if (ne != 0)
            return i + ctz64(ne);
    }
#endif
    for (; n - i >= 8; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            break;
    }
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Matches the template bytes tmpl[t..t_end), with the integer holes
 * at[0..n) (offsets in t..t_end, ascending, lengths lens[0..n)), against
 * json from *pj on: the fixed bytes must be equal, each hole must hold one
 * integer literal (any), and the fixed bytes after it must follow right
 * where that literal ends.  Moves *pj past them; returns 0 on a miss.
 *
 * The bytes are compared as they are, the holes' old text included, up to
 * the first difference: a hole whose old text and following fixed byte
 * were equal holds that same literal (its next byte is no digit).  A
 * difference inside a hole or on the byte after it (a longer or shorter
 * literal) restarts the compare after the literal found at the hole. */
static int match_ints(const uint8_t *json, size_t len, size_t *pj, const uint8_t *tmpl, size_t t,
                      size_t t_end, const uint32_t *at, const uint32_t *lens, size_t n) {
    size_t j = *pj, k = 0;
    for (;;) {
        const size_t want = t_end - t, have = len - j < want ? len - j : want;
        const size_t m = common_len(json + j, tmpl + t, have), x = t + m;
        if (m == want)
            break;
        while (k < n && at[k] + lens[k] < x)
            k++;
        if (k == n || at[k] > x)
            return 0;
        if ((j = int_end(json, j + (at[k] - t), len)) == 0)
            return 0;
        t = at[k] + lens[k];
        k++;
    }
    *pj = j + (t_end - t);
    return 1;
}

/* The fast path with integer holes, when the template's bytes did not match
 * as they are (some integer differs, or the payload misses anyway);
 * prefix_equal: json starts with the prefix as it is. */
static MLPE_OAI_NOINLINE int apply_template_ints(mlpe_oai_decoder *d, const uint8_t *json, size_t len,
                                                 mlpe_oai_chunk *out, int prefix_equal) {
    const size_t np = d->tmpl_prefix, n_pre = d->tmpl_n_pre;
    const uint8_t *const tmpl = d->tmpl.ptr;
    size_t j = 0, rest;
    uint8_t *h;
    const uint8_t *q;
    mlpe_span text;
    if (prefix_equal)
        j = np;
    else if (!match_ints(json, len, &j, tmpl, 0, np, d->tmpl_int_at, d->tmpl_int_len, n_pre))
        return 0;
    /* The string body ends at the first unescaped quote of the rest (copied
     * with the zero padding: an unterminated or invalid body is a miss),
     * where the suffix must start and run to the end. */
    rest = len - j;
    d->scratch.len = 0;
    if (mlpe_buf_reserve(&d->scratch, rest + MLPE_OAI_PAD) != MLPE_OK)
        return 0;
    h = d->scratch.ptr;
    if (rest != 0)
        memcpy(h, json + j, rest);
    memset(h + rest, 0, MLPE_OAI_PAD);
    d->scratch.len = rest;
    q = find_special(h);
    text.ptr = h;
    text.len = (size_t)(q - h);
    if (*q != '"') {
        scan s;
        s.end = h + rest;
        s.d = d;
        s.n_tools = s.n_ints = 0;
        s.err = MLPE_OK;
        s.decoded_len = 0;
        if ((q = string_slow(&s, h, q, 1)) == NULL)
            return 0;
        q--; /* the closing quote */
        text.len = s.decoded_len;
    }
    j += (size_t)(q - h);
    if (!match_ints(json, len, &j, tmpl, np, d->tmpl.len, d->tmpl_int_at + n_pre,
                    d->tmpl_int_len + n_pre, d->tmpl_n_ints - n_pre) ||
        j != len)
        return 0;
    return template_result(d, text, out);
}

/* The fast path: when json[0..len) is the template's prefix, one valid
 * string body, and the template's suffix -- with any integer literals in
 * place of those of its integer holes -- fills *out as the full decode
 * would and returns 1; otherwise returns 0 (the full decode decides, errors
 * included). */
static int apply_template(mlpe_oai_decoder *d, const uint8_t *json, size_t len, mlpe_oai_chunk *out) {
    const size_t np = d->tmpl_prefix, ns = d->tmpl.len - np;
    mlpe_span text;
    int prefix_equal;
    if (len < np + ns)
        return d->tmpl_n_ints != 0 && apply_template_ints(d, json, len, out, 0);
    prefix_equal = memcmp(json, d->tmpl.ptr, np) == 0;
    if (!prefix_equal || memcmp(json + len - ns, d->tmpl.ptr + np, ns) != 0)
        return d->tmpl_n_ints != 0 && apply_template_ints(d, json, len, out, prefix_equal);
    if (!hole_body(d, json + np, len - np - ns, len - np, &text))
        return 0;
    return template_result(d, text, out);
}

int mlpe_oai_init(mlpe_oai_decoder *d) {
    d->dialect = MLPE_DIALECT_OPENAI;
    mlpe_buf_init(&d->usage_text);
    mlpe_buf_init(&d->scratch);
    d->tools = NULL;
    d->cap_tools = 0;
    d->path[0] = '\0';
    mlpe_buf_init(&d->tmpl);
    d->tmpl_prefix = 0;
    d->tmpl_tool_index = 0;
    d->tmpl_n_ints = d->tmpl_n_pre = 0;
    d->tmpl_field = T_NONE;
    d->tmpl_misses = d->tmpl_skip = 0;
    return MLPE_OK;
}

void mlpe_oai_free(mlpe_oai_decoder *d) {
    mlpe_buf_free(&d->usage_text);
    mlpe_buf_free(&d->scratch);
    free(d->tools);
    d->tools = NULL;
    d->cap_tools = 0;
    mlpe_buf_free(&d->tmpl);
    d->tmpl_field = T_NONE;
}

int mlpe_oai_set_dialect(mlpe_oai_decoder *d, int dialect) {
    d->dialect = dialect == MLPE_DIALECT_SGLANG ? MLPE_DIALECT_SGLANG : MLPE_DIALECT_OPENAI;
    /* A template is OpenAI's (mlpe_oai.h): none survives a change. */
    d->tmpl_field = T_NONE;
    d->tmpl_misses = d->tmpl_skip = 0;
    return d->dialect;
}

/* The full pass (out of line, so that a template hit does not pay for its
 * stack frame). */
static MLPE_OAI_NOINLINE int decode_full(mlpe_oai_decoder *d, const uint8_t *json, size_t len,
                                         mlpe_oai_chunk *out, int arm) {
    scan s;
    top_rec r;
    sglang_rec g;
    const uint8_t *p, *start;
    int rc;

    clear_chunk(out);

    d->scratch.len = 0;
    if (len > SIZE_MAX - MLPE_OAI_PAD || mlpe_buf_reserve(&d->scratch, len + MLPE_OAI_PAD) != MLPE_OK)
        return MLPE_E_NOMEM;
    if (len != 0)
        memcpy(d->scratch.ptr, json, len);
    memset(d->scratch.ptr + len, 0, MLPE_OAI_PAD);
    d->scratch.len = len;

    s.end = d->scratch.ptr + len;
    s.d = d;
    s.n_tools = s.n_ints = 0;
    s.err = MLPE_OK;
    start = ws(d->scratch.ptr);
    if (*start != '{') {
        p = skip_value(&s, start, 0);
    } else if (d->dialect == MLPE_DIALECT_SGLANG) {
        g.error.kind = g.error_message.kind = g.text.kind = g.meta = V_ABSENT;
        p = parse_top_sglang(&s, start, &g);
    } else {
        r.error.kind = r.error_message.kind = r.usage.kind = r.choices = V_ABSENT;
        p = parse_top(&s, start, &r);
    }
    if (p == NULL)
        return s.err;
    if (ws(p) != s.end)
        return MLPE_E_JSON_SYNTAX;
    if (*start != '{') {
        const shape f = {F_ROOT, 0, 0, 0};
        return shape_error(d, f, out);
    }
    if (d->dialect == MLPE_DIALECT_SGLANG)
        return finish_sglang(d, &g, out); /* never a template (mlpe_oai.h) */
    rc = finish(d, &r, out);
    if (rc == MLPE_OK && arm)
        arm_template(d, json, len, out, &s);
    return rc;
}

/* A payload met with a template: the fast path, else the full pass (which
 * takes the payload as the new template unless it is time to back off). */
static MLPE_OAI_NOINLINE int decode_templated(mlpe_oai_decoder *d, const uint8_t *json, size_t len,
                                              mlpe_oai_chunk *out) {
    uint32_t k;
    if (apply_template(d, json, len, out)) {
        d->tmpl_misses = 0;
        return MLPE_OK;
    }
    if (++d->tmpl_misses < MLPE_OAI_MISS_LIMIT)
        return decode_full(d, json, len, out, 1);
    k = d->tmpl_misses - MLPE_OAI_MISS_LIMIT;
    d->tmpl_skip = MLPE_OAI_SKIP_MIN << (k < MLPE_OAI_SKIP_DOUBLINGS ? k : MLPE_OAI_SKIP_DOUBLINGS);
    return decode_full(d, json, len, out, 0);
}

int mlpe_oai_decode(mlpe_oai_decoder *d, const uint8_t *json, size_t len, mlpe_oai_chunk *out) {
    if (MLPE_UNLIKELY(d->tmpl_skip != 0)) {
        /* Backing off: the last payload skipped arms the template again. */
        d->tmpl_skip--;
        return decode_full(d, json, len, out, d->tmpl_skip == 0);
    }
    if (d->tmpl_field != T_NONE)
        return decode_templated(d, json, len, out);
    return decode_full(d, json, len, out, 1);
}
