/*
 * fuzz_oai.c -- libFuzzer entry point for the OpenAI chunk decoder
 * (mlpe_oai.h).  The input is the data of one SSE event.  Decoding is one
 * call on a complete payload, so there is no chunking to explore; instead
 * the input hash (fuzz_common.h) picks the bytes placed around the payload
 * in the variants below.
 *
 * Checked (rule numbers are those of mlpe_oai.h):
 *  - the code is MLPE_OK, MLPE_E_NOMEM or 401-405; on any other code every
 *    fragment is absent (has_* == 0, no tools); CHUNK_SHAPE comes with a
 *    NUL-terminated shape_path of the decoder's storage;
 *  - an independent strict RFC 8259 validator (below) agrees on validity
 *    and, for invalid input, on the code of the first problem (J1-J4); a
 *    valid payload whose top level is not an object is CHUNK_SHAPE (S1);
 *  - every reported string is valid UTF-8 (J1, J5), usage is an object's
 *    text copied verbatim from the input (S7), tool indexes are
 *    non-negative (S6);
 *  - decoding is a pure function of the payload: the same result from a
 *    reused decoder, from a fresh one, when the payload sits in a larger
 *    buffer followed by JSON-looking bytes (nothing past len is read), with
 *    whitespace before it, and -- for valid JSON -- with whitespace after it;
 *  - an input of several lines is also read as a stream, one payload per
 *    line: one decoder for all of them (it may cache the shape of the last
 *    payload, mlpe_oai.c's template) gives what a fresh decoder gives for
 *    each, so the corpus holds streams of similar chunks too;
 *  - the same holds for the chunks made from the input by putting other
 *    string bodies (valid or not, some taken from the input) in place of one
 *    of its string literals at a time, decoded in a row: whichever literal
 *    was the template's hole, its variants are template hits or must miss;
 *  - likewise for other tokens (integers of other lengths and signs, and
 *    non-integers) in place of each number that is a member value: integer
 *    values of ignored top-level members are the template's integer holes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mlpe_oai.h"

/* ---- independent JSON validator ------------------------------------------
 *
 * Written from RFC 8259 and RFC 3629, not from mlpe_oai.c: recursive
 * descent that stops at the first problem in text order. */

typedef struct jv {
    const uint8_t *s;
    size_t n, i;
    int depth;
    int truncated_utf8; /* the problem is a UTF-8 sequence cut by the end */
} jv;

static int jv_value(jv *v);

static void jv_ws(jv *v) {
    while (v->i < v->n &&
           (v->s[v->i] == ' ' || v->s[v->i] == '\t' || v->s[v->i] == '\n' || v->s[v->i] == '\r'))
        v->i++;
}

static int is_hex(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* One multi-byte UTF-8 sequence at v->i (lead byte >= 0x80). */
static int jv_utf8(jv *v) {
    uint8_t c = v->s[v->i];
    uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
    size_t need, k;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        if (c == 0xF4)
            hi = 0x8F; /* above U+10FFFF */
    } else {
        return MLPE_E_JSON_UTF8;
    }
    for (k = 1; k <= need; k++) {
        uint8_t b;
        if (v->i + k >= v->n) {
            v->truncated_utf8 = 1;
            return MLPE_E_JSON_UTF8;
        }
        b = v->s[v->i + k];
        if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80)
            return MLPE_E_JSON_UTF8;
    }
    v->i += need + 1;
    return MLPE_OK;
}

static int jv_string(jv *v) {
    v->i++; /* opening quote */
    for (;;) {
        uint8_t c;
        if (v->i >= v->n)
            return MLPE_E_JSON_SYNTAX;
        c = v->s[v->i];
        if (c == '"') {
            v->i++;
            return MLPE_OK;
        }
        if (c < 0x20)
            return MLPE_E_JSON_SYNTAX;
        if (c == '\\') {
            uint8_t e;
            if (v->i + 1 >= v->n)
                return MLPE_E_JSON_SYNTAX;
            e = v->s[v->i + 1];
            if (e == 'u') {
                size_t k;
                for (k = 2; k < 6; k++)
                    if (v->i + k >= v->n || !is_hex(v->s[v->i + k]))
                        return MLPE_E_JSON_SYNTAX;
                v->i += 6;
            } else if (e && strchr("\"\\/bfnrt", e)) {
                v->i += 2;
            } else {
                return MLPE_E_JSON_SYNTAX;
            }
            continue;
        }
        if (c < 0x80) {
            v->i++;
            continue;
        }
        {
            int r = jv_utf8(v);
            if (r != MLPE_OK)
                return r;
        }
    }
}

static int jv_digits(jv *v) {
    size_t start = v->i;
    while (v->i < v->n && v->s[v->i] >= '0' && v->s[v->i] <= '9')
        v->i++;
    return v->i > start ? MLPE_OK : MLPE_E_JSON_SYNTAX;
}

static int jv_number(jv *v) {
    if (v->s[v->i] == '-')
        v->i++;
    if (v->i >= v->n)
        return MLPE_E_JSON_SYNTAX;
    if (v->s[v->i] == '0')
        v->i++;
    else if (jv_digits(v) != MLPE_OK)
        return MLPE_E_JSON_SYNTAX;
    if (v->i < v->n && v->s[v->i] == '.') {
        v->i++;
        if (jv_digits(v) != MLPE_OK)
            return MLPE_E_JSON_SYNTAX;
    }
    if (v->i < v->n && (v->s[v->i] == 'e' || v->s[v->i] == 'E')) {
        v->i++;
        if (v->i < v->n && (v->s[v->i] == '+' || v->s[v->i] == '-'))
            v->i++;
        if (jv_digits(v) != MLPE_OK)
            return MLPE_E_JSON_SYNTAX;
    }
    return MLPE_OK;
}

static int jv_literal(jv *v, const char *word) {
    size_t k, n = strlen(word);
    for (k = 0; k < n; k++)
        if (v->i + k >= v->n || v->s[v->i + k] != (uint8_t)word[k])
            return MLPE_E_JSON_SYNTAX;
    v->i += n;
    return MLPE_OK;
}

/* Object or array at v->i. */
static int jv_container(jv *v) {
    uint8_t close = v->s[v->i] == '{' ? '}' : ']';
    int r;
    if (++v->depth > MLPE_JSON_MAX_DEPTH)
        return MLPE_E_JSON_DEPTH;
    v->i++;
    jv_ws(v);
    if (v->i < v->n && v->s[v->i] == close) {
        v->i++;
        v->depth--;
        return MLPE_OK;
    }
    for (;;) {
        if (close == '}') {
            if (v->i >= v->n || v->s[v->i] != '"')
                return MLPE_E_JSON_SYNTAX;
            if ((r = jv_string(v)) != MLPE_OK)
                return r;
            jv_ws(v);
            if (v->i >= v->n || v->s[v->i] != ':')
                return MLPE_E_JSON_SYNTAX;
            v->i++;
            jv_ws(v);
        }
        if ((r = jv_value(v)) != MLPE_OK)
            return r;
        jv_ws(v);
        if (v->i >= v->n)
            return MLPE_E_JSON_SYNTAX;
        if (v->s[v->i] == close) {
            v->i++;
            v->depth--;
            return MLPE_OK;
        }
        if (v->s[v->i] != ',')
            return MLPE_E_JSON_SYNTAX;
        v->i++;
        jv_ws(v);
    }
}

static int jv_value(jv *v) {
    uint8_t c;
    if (v->i >= v->n)
        return MLPE_E_JSON_SYNTAX;
    c = v->s[v->i];
    switch (c) {
    case '"':
        return jv_string(v);
    case '{':
    case '[':
        return jv_container(v);
    case 't':
        return jv_literal(v, "true");
    case 'f':
        return jv_literal(v, "false");
    case 'n':
        return jv_literal(v, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return jv_number(v);
        return MLPE_E_JSON_SYNTAX;
    }
}

/* MLPE_OK for one RFC 8259 JSON text, else the code of its first problem. */
static int jv_validate(const uint8_t *s, size_t n, int *truncated_utf8, int *is_object) {
    jv v;
    int r;
    memset(&v, 0, sizeof v);
    v.s = s;
    v.n = n;
    jv_ws(&v);
    *is_object = v.i < n && s[v.i] == '{';
    r = jv_value(&v);
    if (r == MLPE_OK) {
        jv_ws(&v);
        if (v.i != n)
            r = MLPE_E_JSON_SYNTAX;
    }
    *truncated_utf8 = v.truncated_utf8;
    return r;
}

/* ---- checking and logging a decode ---------------------------------------- */

static void log_opt(mlpe_buf *log, uint8_t has, mlpe_span s) {
    FUZZ_CHECK(has == 0 || has == 1);
    fuzz_log_u64(log, has);
    if (has) {
        FUZZ_CHECK(fuzz_utf8_valid(s.ptr, s.len));
        fuzz_log_span(log, s);
    }
}

/* Checks one result against the contract and writes it to log, with spans
 * replaced by the bytes they hold (usage as an offset into the input). */
static void oai_log(int code, const mlpe_oai_chunk *c, const mlpe_oai_decoder *d,
                    const uint8_t *in, size_t len, mlpe_buf *log) {
    size_t i;
    FUZZ_CHECK(code == MLPE_OK || code == MLPE_E_NOMEM ||
               (code >= MLPE_E_JSON_SYNTAX && code <= MLPE_E_ENDPOINT_ERROR));
    fuzz_log_tag(log, 'C');
    fuzz_log_u64(log, (uint64_t)code);
    if (code != MLPE_OK) {
        FUZZ_CHECK(!c->has_content && !c->has_reasoning && !c->has_finish_reason &&
                   !c->has_usage && c->n_tools == 0);
    }
    if (code == MLPE_E_CHUNK_SHAPE) {
        size_t n;
        FUZZ_CHECK(c->shape_path != NULL);
        FUZZ_CHECK(c->shape_path >= d->path && c->shape_path < d->path + sizeof d->path);
        n = strlen(c->shape_path);
        FUZZ_CHECK(c->shape_path + n < d->path + sizeof d->path);
        fuzz_log_bytes(log, (const uint8_t *)c->shape_path, n);
    }
    if (code == MLPE_E_ENDPOINT_ERROR) {
        FUZZ_CHECK(fuzz_utf8_valid(c->error_message.ptr, c->error_message.len));
        fuzz_log_span(log, c->error_message);
    }
    if (code != MLPE_OK)
        return;
    log_opt(log, c->has_content, c->content);
    log_opt(log, c->has_reasoning, c->reasoning);
    log_opt(log, c->has_finish_reason, c->finish_reason);
    FUZZ_CHECK(c->has_usage == 0 || c->has_usage == 1);
    fuzz_log_u64(log, c->has_usage);
    if (c->has_usage) {
        /* The object's text, verbatim: in the input, or in the decoder's
         * copy of it (mlpe_oai.c parses a padded copy). */
        const uint8_t *base = in;
        size_t off;
        if (!(c->usage.ptr >= in && c->usage.ptr < in + len))
            base = d->scratch.ptr;
        FUZZ_CHECK(base != NULL && c->usage.ptr >= base);
        off = (size_t)(c->usage.ptr - base);
        FUZZ_CHECK(c->usage.len >= 2 && off <= len && c->usage.len <= len - off);
        FUZZ_CHECK(memcmp(c->usage.ptr, in + off, c->usage.len) == 0);
        FUZZ_CHECK(c->usage.ptr[0] == '{' && c->usage.ptr[c->usage.len - 1] == '}');
        fuzz_log_span(log, c->usage);
    }
    FUZZ_CHECK(c->n_tools == 0 || c->tools != NULL);
    fuzz_log_u64(log, c->n_tools);
    for (i = 0; i < c->n_tools; i++) {
        const mlpe_oai_tool *t = &c->tools[i];
        FUZZ_CHECK(t->index >= 0);
        fuzz_log_u64(log, (uint64_t)t->index);
        log_opt(log, t->has_id, t->id);
        log_opt(log, t->has_type, t->type);
        log_opt(log, t->has_name, t->name);
        log_opt(log, t->has_arguments, t->arguments);
    }
}

/* Decodes buf[0..len) with d and logs the result; returns the code. */
static int oai_run(mlpe_oai_decoder *d, const uint8_t *buf, size_t len, mlpe_buf *log) {
    mlpe_oai_chunk c;
    int code;
    memset(&c, 0xA5, sizeof c); /* the decoder must set every field it reports */
    code = mlpe_oai_decode(d, buf, len, &c);
    oai_log(code, &c, d, buf, len, log);
    return code;
}

/* Decodes prefix + data + suffix (in an exact-size block) with a fresh
 * decoder and logs the result. */
static int oai_wrapped(const char *prefix, const uint8_t *data, size_t size, const char *suffix,
                       mlpe_buf *log) {
    size_t np = strlen(prefix), ns = strlen(suffix);
    uint8_t *buf = (uint8_t *)malloc(np + size + ns + 1);
    mlpe_oai_decoder d;
    int code;
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, prefix, np);
    if (size)
        memcpy(buf + np, data, size);
    memcpy(buf + np + size, suffix, ns);
    FUZZ_CHECK(mlpe_oai_init(&d) == MLPE_OK);
    code = oai_run(&d, buf, np + size + ns, log);
    mlpe_oai_free(&d);
    free(buf);
    return code;
}

/* The code against the independent validator (J1-J4, S1). */
static void check_validity(int code, const uint8_t *json, size_t len) {
    int truncated, is_object;
    int expect = jv_validate(json, len, &truncated, &is_object);
    if (code == MLPE_E_NOMEM)
        return;
    if (expect == MLPE_OK) {
        FUZZ_CHECK(code == MLPE_OK || code == MLPE_E_CHUNK_SHAPE ||
                   code == MLPE_E_ENDPOINT_ERROR);
        if (!is_object)
            FUZZ_CHECK(code == MLPE_E_CHUNK_SHAPE);
        FUZZ_CHECK(fuzz_utf8_valid(json, len));
    } else if (truncated) {
        /* "\xE2\x82" at the very end: an unterminated string or a cut UTF-8
         * sequence; either reading is fair. */
        FUZZ_CHECK(code == MLPE_E_JSON_UTF8 || code == MLPE_E_JSON_SYNTAX);
    } else {
        FUZZ_CHECK(code == expect);
    }
}

/* The input's lines as the events of one stream: decoded in turn by one
 * decoder (which may cache the shape of earlier payloads to go faster) and
 * each by a fresh decoder.  The results must be equal: a decode is a function
 * of its payload alone. */
static void oai_stream(const uint8_t *data, size_t size) {
    mlpe_oai_decoder shared;
    mlpe_buf a, b;
    size_t start = 0;
    mlpe_buf_init(&a);
    mlpe_buf_init(&b);
    FUZZ_CHECK(mlpe_oai_init(&shared) == MLPE_OK);
    for (;;) {
        const uint8_t *lf = size > start ? memchr(data + start, '\n', size - start) : NULL;
        size_t end = lf ? (size_t)(lf - data) : size;
        uint8_t *event = fuzz_dup(data + start, end - start);
        mlpe_oai_decoder fresh;
        int code;
        a.len = b.len = 0;
        code = oai_run(&shared, event, end - start, &a);
        check_validity(code, event, end - start);
        FUZZ_CHECK(mlpe_oai_init(&fresh) == MLPE_OK);
        oai_run(&fresh, event, end - start, &b);
        mlpe_oai_free(&fresh);
        fuzz_logs_equal(&a, &b, "oai stream decoder vs fresh decoder");
        free(event);
        if (lf == NULL)
            break;
        start = end + 1;
    }
    mlpe_oai_free(&shared);
    mlpe_buf_free(&a);
    mlpe_buf_free(&b);
}

/* ---- template hits ---------------------------------------------------------
 *
 * A payload that differs from the template only inside the hole's literal
 * (mlpe_oai.c, "The template") is rare among mutations of one input.  So
 * each string literal of the input in turn has its body replaced by others,
 * and the variants are decoded in a row by one decoder, right after the
 * input itself: when the literal is the hole they take the fast path (or
 * must miss it, for bodies that are no single string body), otherwise they
 * differ in the prefix or suffix. */

typedef struct literal {
    size_t body, end; /* the body is [body, end); the closing quote is at end */
    int value;        /* preceded by ':' (a member value, not a name) */
} literal;

#define MAX_LITERALS 64

/* The string literals of s[0..n), found as a JSON scanner would whether or
 * not the text around them is valid; returns how many (up to max). */
static size_t find_literals(const uint8_t *s, size_t n, literal *out, size_t max) {
    size_t i = 0, k = 0;
    uint8_t prev = 0; /* the last byte outside strings that is no whitespace */
    while (i < n && k < max) {
        size_t start;
        if (s[i] != '"') {
            if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
                prev = s[i];
            i++;
            continue;
        }
        start = ++i;
        while (i < n && s[i] != '"')
            i += s[i] == '\\' ? 2 : 1;
        if (i >= n)
            break;
        out[k].body = start;
        out[k].end = i;
        out[k].value = prev == ':';
        k++;
        prev = '"';
        i++;
    }
    return k;
}

/* Decodes data[0..len) (copied to an exact-size block) with the shared
 * decoder and with a fresh one; the results must be equal and valid. */
static void oai_twice(mlpe_oai_decoder *shared, const uint8_t *data, size_t len, mlpe_buf *a,
                      mlpe_buf *b) {
    uint8_t *event = fuzz_dup(data, len);
    mlpe_oai_decoder fresh;
    int code;
    a->len = b->len = 0;
    code = oai_run(shared, event, len, a);
    check_validity(code, event, len);
    FUZZ_CHECK(mlpe_oai_init(&fresh) == MLPE_OK);
    oai_run(&fresh, event, len, b);
    mlpe_oai_free(&fresh);
    fuzz_logs_equal(a, b, "oai template sequence vs fresh decoder");
    free(event);
}

static void oai_holes(const uint8_t *data, size_t size, uint64_t h) {
    /* String bodies: valid ones (plain, around the 16-byte copy of the fast
     * path, escaped, non-ASCII), then bytes that are not one string body. */
    static const char *const bodies[] = {
        "", "b", "hello world", "0123456789abcde", "0123456789abcdef", "0123456789abcdefg",
        "\\n", "\\\"", "a\\\"b", "\\\\", "\\/", "\\u00e9", "\\ud83d\\ude00", "\\ud800",
        "\\ud83d", "\xc3\xa9", "\xf0\x9f\x98\x80", "\x7f",
        "\xff", "\xc3", "\xe2\x82", "\xed\xa0\x80", "\x01", "\n", "\\", "abc\\", "\\x", "\\u12",
        "\"", "a\"b", "a\",\"content\":\"b", "a\",\"x\":[\"",
    };
    const size_t n_bodies = sizeof bodies / sizeof bodies[0];
    literal lits[MAX_LITERALS];
    size_t n = find_literals(data, size, lits, MAX_LITERALS), i;
    mlpe_oai_decoder shared;
    mlpe_buf a, b, variant;
    mlpe_buf_init(&a);
    mlpe_buf_init(&b);
    mlpe_buf_init(&variant);
    FUZZ_CHECK(mlpe_oai_init(&shared) == MLPE_OK);
    for (i = 0; i < n; i++) {
        const literal *l = &lits[i];
        size_t r;
        /* Every member value; of the names, one in four (they never hit). */
        if (!l->value && ((h >> 16) + i) % 4 != 0)
            continue;
        oai_twice(&shared, data, size, &a, &b);
        for (r = 0; r < 4; r++) {
            const uint8_t *body;
            size_t body_len;
            if (r < 3) {
                body = (const uint8_t *)bodies[(h + i * 5 + r * 11) % n_bodies];
                body_len = strlen((const char *)body);
            } else { /* some bytes of the input, its own strings included */
                size_t from = size ? (size_t)((h >> 24) + i * 13) % size : 0;
                body = data + from;
                body_len = (size_t)((h >> 40) % 24);
                if (body_len > size - from)
                    body_len = size - from;
            }
            variant.len = 0;
            FUZZ_CHECK(mlpe_buf_reserve(&variant, size + body_len + 1) == MLPE_OK);
            memcpy(variant.ptr, data, l->body);
            if (body_len)
                memcpy(variant.ptr + l->body, body, body_len);
            memcpy(variant.ptr + l->body + body_len, data + l->end, size - l->end);
            variant.len = size - (l->end - l->body) + body_len;
            oai_twice(&shared, variant.ptr, variant.len, &a, &b);
        }
    }
    mlpe_oai_free(&shared);
    mlpe_buf_free(&a);
    mlpe_buf_free(&b);
    mlpe_buf_free(&variant);
}

/* Member values that are numbers ([-0-9] after ':' outside strings, to the
 * end of the run of number bytes), found as find_literals does. */
static size_t find_numbers(const uint8_t *s, size_t n, literal *out, size_t max) {
    size_t i = 0, k = 0;
    uint8_t prev = 0;
    while (i < n && k < max) {
        const uint8_t c = s[i];
        if (c == '"') {
            for (i++; i < n && s[i] != '"'; i += s[i] == '\\' ? 2 : 1)
                ;
            prev = '"';
            i++;
            continue;
        }
        if (prev == ':' && (c == '-' || (c >= '0' && c <= '9'))) {
            size_t j = i;
            while (j < n && (s[j] == '-' || s[j] == '+' || s[j] == '.' || s[j] == 'e' || s[j] == 'E' ||
                             (s[j] >= '0' && s[j] <= '9')))
                j++;
            out[k].body = i;
            out[k].end = j;
            out[k].value = 1;
            k++;
            prev = '0';
            i = j;
            continue;
        }
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            prev = c;
        i++;
    }
    return k;
}

/* Each number that is a member value in turn is replaced by other tokens,
 * the variants decoded in a row right after the input: integer holes hit
 * (or miss) in the fast path, numbers elsewhere must miss. */
static void oai_int_holes(const uint8_t *data, size_t size, uint64_t h) {
    static const char *const tokens[] = {
        "0", "-0", "7", "-7", "10", "1700000000", "-1700000001", "123456789012345678901234567890",
        "1e5", "01", "-", "-01", "1.5", "true", "null", "\"1\"", "1 ", " 2", "1}", "",
    };
    const size_t n_tokens = sizeof tokens / sizeof tokens[0];
    literal nums[MAX_LITERALS];
    size_t n = find_numbers(data, size, nums, MAX_LITERALS), i;
    mlpe_oai_decoder shared;
    mlpe_buf a, b, variant;
    if (n == 0)
        return;
    mlpe_buf_init(&a);
    mlpe_buf_init(&b);
    mlpe_buf_init(&variant);
    FUZZ_CHECK(mlpe_oai_init(&shared) == MLPE_OK);
    for (i = 0; i < n; i++) {
        const literal *l = &nums[i];
        size_t r;
        oai_twice(&shared, data, size, &a, &b);
        for (r = 0; r < 4; r++) {
            const char *tok = tokens[(h + i * 7 + r * 3) % n_tokens];
            const size_t tok_len = strlen(tok);
            variant.len = 0;
            FUZZ_CHECK(mlpe_buf_reserve(&variant, size + tok_len + 1) == MLPE_OK);
            memcpy(variant.ptr, data, l->body);
            if (tok_len)
                memcpy(variant.ptr + l->body, tok, tok_len);
            memcpy(variant.ptr + l->body + tok_len, data + l->end, size - l->end);
            variant.len = size - (l->end - l->body) + tok_len;
            oai_twice(&shared, variant.ptr, variant.len, &a, &b);
        }
    }
    mlpe_oai_free(&shared);
    mlpe_buf_free(&a);
    mlpe_buf_free(&b);
    mlpe_buf_free(&variant);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Bytes that would change the result if the decoder read past len. */
    static const char *const tails[8] = {
        "\"", "0", "}", "]}", "\\u0041\"", "\x80", ",\"usage\":{}}", "e5",
    };
    static const char *const spaces[4] = {" ", "\n", "\r\n\t ", "\t"};
    uint64_t h = fuzz_hash(data, size);
    const char *tail = tails[h & 7];
    const char *space = spaces[(h >> 3) & 3];
    mlpe_oai_decoder d;
    mlpe_buf first, other;
    uint8_t *exact, *padded;
    int code;

    mlpe_buf_init(&first);
    mlpe_buf_init(&other);
    FUZZ_CHECK(mlpe_oai_init(&d) == MLPE_OK);

    exact = fuzz_dup(data, size);
    code = oai_run(&d, exact, size, &first);
    check_validity(code, exact, size);

    /* Same decoder again: no state leaks from one chunk to the next. */
    oai_run(&d, exact, size, &other);
    fuzz_logs_equal(&first, &other, "oai first vs reused decoder");

    /* Followed by bytes it must not look at. */
    padded = (uint8_t *)malloc(size + strlen(tail));
    FUZZ_CHECK(padded != NULL);
    if (size)
        memcpy(padded, data, size);
    memcpy(padded + size, tail, strlen(tail));
    other.len = 0;
    oai_run(&d, padded, size, &other);
    fuzz_logs_equal(&first, &other, "oai exact vs padded buffer");
    free(padded);

    /* Whitespace around the top-level value (J2).  Before it, any payload
     * keeps its result; after it, only valid JSON (a cut UTF-8 sequence at
     * the end may turn into another error). */
    other.len = 0;
    oai_wrapped(space, data, size, "", &other);
    fuzz_logs_equal(&first, &other, "oai plain vs leading whitespace");
    if (code == MLPE_OK || code == MLPE_E_CHUNK_SHAPE || code == MLPE_E_ENDPOINT_ERROR) {
        other.len = 0;
        oai_wrapped("", data, size, space, &other);
        fuzz_logs_equal(&first, &other, "oai plain vs trailing whitespace");
    }

    if (memchr(data, '\n', size) != NULL)
        oai_stream(data, size);
    oai_holes(data, size, h);
    oai_int_holes(data, size, h);

    free(exact);
    mlpe_oai_free(&d);
    mlpe_buf_free(&first);
    mlpe_buf_free(&other);
    return 0;
}
