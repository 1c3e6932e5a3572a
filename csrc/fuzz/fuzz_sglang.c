/*
 * fuzz_sglang.c -- libFuzzer entry point for the SGLang dialect: one
 * /generate object (mlpe_oai.h, rules G1-G7) and one /generate response
 * (mlpe_response.h, rule R11: the whole text so far to deltas).  See
 * fuzz_common.h for the plan shared by all drivers.
 *
 * The input is read twice.  As one payload, decoded in the SGLang dialect,
 * checked:
 *  - the code is MLPE_OK, MLPE_E_NOMEM or 401-405; on any other code every
 *    fragment is absent; there is never reasoning or a tool call (G7);
 *  - the JSON rules are the OpenAI dialect's (J1-J6): the same payload in
 *    that dialect has the same code when it is not JSON, and an endpoint
 *    error (G2 = S2) with the same message in both or in neither;
 *  - usage is {"prompt_tokens":P,"completion_tokens":C} or one of the two
 *    (G5), each an integer literal copied from the input;
 *  - decoding is a function of the payload: a reused decoder, and one that
 *    decoded the payload as OpenAI's first (it may hold a template) and was
 *    then switched to SGLang, give what a fresh one gives.
 * As a stream, one event per line ("data: LINE", a CR in a line read as a
 * space), given to a response in body mode in pieces the input hash picks,
 * and as a whole HTTP/1.1 message, checked:
 *  - whole, split and HTTP/1.1 feeding give the same summary, keep_alive
 *    aside;
 *  - a model built from fresh decoders -- each line decoded alone, R3, R5,
 *    R6, R10 and R11 applied by hand -- agrees on the content (the deltas
 *    joined), the content-bearing events, the chunk errors, the finish
 *    reason and usage of the last chunk that had one, "[DONE]" and the
 *    terminal error, MLPE_E_TEXT_NOT_CUMULATIVE with its text position
 *    included;
 *  - the whole input as a non-streaming body is one chunk: its text is the
 *    content.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mlpe_response.h"

#define T0 1000000

/* ---- one object --------------------------------------------------------------- */

static void log_opt(mlpe_buf *log, uint8_t has, mlpe_span s) {
    FUZZ_CHECK(has == 0 || has == 1);
    fuzz_log_u64(log, has);
    if (has) {
        FUZZ_CHECK(fuzz_utf8_valid(s.ptr, s.len));
        fuzz_log_span(log, s);
    }
}

/* Whether s[0..n) occurs in hay[0..m). */
static int occurs(const uint8_t *hay, size_t m, const uint8_t *s, size_t n) {
    size_t i;
    for (i = 0; n <= m && i <= m - n; i++)
        if (memcmp(hay + i, s, n) == 0)
            return 1;
    return 0;
}

/* Past the integer literal -?(0|[1-9][0-9]*) at u[*i] (S8), or 0. */
static int skip_int(const uint8_t *u, size_t n, size_t *i) {
    size_t j = *i;
    if (j < n && u[j] == '-')
        j++;
    if (j >= n || u[j] < '0' || u[j] > '9')
        return 0;
    if (u[j++] != '0')
        while (j < n && u[j] >= '0' && u[j] <= '9')
            j++;
    *i = j;
    return 1;
}

/* G5: the usage text is {"prompt_tokens":P,"completion_tokens":C} or one of
 * the two members, each literal found in the input. */
static void check_usage(mlpe_span usage, const uint8_t *in, size_t len) {
    static const char p[] = "\"prompt_tokens\":", c[] = "\"completion_tokens\":";
    const uint8_t *u = usage.ptr;
    size_t n = usage.len, i = 1, at;
    int members = 0;
    FUZZ_CHECK(n >= 2 && u[0] == '{' && u[n - 1] == '}');
    if (n - i >= sizeof p - 1 && memcmp(u + i, p, sizeof p - 1) == 0) {
        i += sizeof p - 1;
        at = i;
        FUZZ_CHECK(skip_int(u, n, &i) && occurs(in, len, u + at, i - at));
        members++;
        if (u[i] == ',')
            i++;
    }
    if (n - i >= sizeof c - 1 && memcmp(u + i, c, sizeof c - 1) == 0) {
        i += sizeof c - 1;
        at = i;
        FUZZ_CHECK(skip_int(u, n, &i) && occurs(in, len, u + at, i - at));
        members++;
    }
    FUZZ_CHECK(members >= 1 && i == n - 1);
}

/* Decodes buf[0..len) with d, checks the result, logs it; returns the code. */
static int sg_run(mlpe_oai_decoder *d, const uint8_t *buf, size_t len, mlpe_buf *log,
                  mlpe_oai_chunk *out) {
    mlpe_oai_chunk c;
    int code;
    memset(&c, 0xA5, sizeof c); /* the decoder must set every field it reports */
    code = mlpe_oai_decode(d, buf, len, &c);
    FUZZ_CHECK(code == MLPE_OK || code == MLPE_E_NOMEM ||
               (code >= MLPE_E_JSON_SYNTAX && code <= MLPE_E_ENDPOINT_ERROR));
    fuzz_log_tag(log, 'G');
    fuzz_log_u64(log, (uint64_t)code);
    if (code != MLPE_OK)
        FUZZ_CHECK(!c.has_content && !c.has_reasoning && !c.has_finish_reason && !c.has_usage &&
                   c.n_tools == 0);
    if (code == MLPE_E_CHUNK_SHAPE) {
        FUZZ_CHECK(c.shape_path == d->path);
        fuzz_log_bytes(log, (const uint8_t *)c.shape_path, strlen(c.shape_path));
    }
    if (code == MLPE_E_ENDPOINT_ERROR) {
        FUZZ_CHECK(fuzz_utf8_valid(c.error_message.ptr, c.error_message.len));
        fuzz_log_span(log, c.error_message);
    }
    if (code == MLPE_OK) {
        FUZZ_CHECK(!c.has_reasoning && c.n_tools == 0); /* G7 */
        log_opt(log, c.has_content, c.content);
        log_opt(log, c.has_finish_reason, c.finish_reason);
        FUZZ_CHECK(c.has_usage == 0 || c.has_usage == 1);
        fuzz_log_u64(log, c.has_usage);
        if (c.has_usage) {
            check_usage(c.usage, buf, len);
            fuzz_log_span(log, c.usage);
        }
    }
    if (out != NULL)
        *out = c;
    return code;
}

static void object_input(const uint8_t *data, size_t size) {
    uint8_t *exact = fuzz_dup(data, size);
    mlpe_oai_decoder d, openai;
    mlpe_oai_chunk sg, oa;
    mlpe_buf first, other;
    int code, openai_code;
    mlpe_buf_init(&first);
    mlpe_buf_init(&other);
    FUZZ_CHECK(mlpe_oai_init(&d) == MLPE_OK);
    FUZZ_CHECK(mlpe_oai_set_dialect(&d, MLPE_DIALECT_SGLANG) == MLPE_DIALECT_SGLANG);
    code = sg_run(&d, exact, size, &first, &sg);

    /* J1-J6 and G2 against the OpenAI dialect. */
    FUZZ_CHECK(mlpe_oai_init(&openai) == MLPE_OK);
    memset(&oa, 0, sizeof oa);
    openai_code = mlpe_oai_decode(&openai, exact, size, &oa);
    if (code != MLPE_E_NOMEM && openai_code != MLPE_E_NOMEM) {
        if (openai_code >= MLPE_E_JSON_SYNTAX && openai_code <= MLPE_E_JSON_DEPTH)
            FUZZ_CHECK(code == openai_code);
        else
            FUZZ_CHECK(code == MLPE_OK || code == MLPE_E_CHUNK_SHAPE ||
                       code == MLPE_E_ENDPOINT_ERROR);
        FUZZ_CHECK((code == MLPE_E_ENDPOINT_ERROR) == (openai_code == MLPE_E_ENDPOINT_ERROR));
        if (code == MLPE_E_ENDPOINT_ERROR)
            FUZZ_CHECK(sg.error_message.len == oa.error_message.len &&
                       (sg.error_message.len == 0 ||
                        memcmp(sg.error_message.ptr, oa.error_message.ptr, sg.error_message.len) ==
                            0));
    }

    /* Reused, and switched from OpenAI's dialect: the same result. */
    sg_run(&d, exact, size, &other, NULL);
    fuzz_logs_equal(&first, &other, "sglang first vs reused decoder");
    mlpe_oai_decode(&openai, exact, size, &oa); /* a template, maybe */
    FUZZ_CHECK(mlpe_oai_set_dialect(&openai, MLPE_DIALECT_SGLANG) == MLPE_DIALECT_SGLANG);
    other.len = 0;
    sg_run(&openai, exact, size, &other, NULL);
    fuzz_logs_equal(&first, &other, "sglang fresh vs switched from openai");
    FUZZ_CHECK(mlpe_oai_set_dialect(&openai, 7) == MLPE_DIALECT_OPENAI);

    mlpe_oai_free(&d);
    mlpe_oai_free(&openai);
    mlpe_buf_free(&first);
    mlpe_buf_free(&other);
    free(exact);
}

/* ---- a stream ------------------------------------------------------------------ */

/* What the model expects of a stream (rules R3, R5, R6, R10, R11). */
typedef struct model {
    int nomem;
    mlpe_buf content, finish_reason, usage;
    int has_finish_reason, has_usage, done_seen;
    uint64_t events, content_events, chunk_errors, events_after_done;
    int first_chunk_error, error;
    uint64_t error_pos;
} model;

static void model_free(model *m) {
    mlpe_buf_free(&m->content);
    mlpe_buf_free(&m->finish_reason);
    mlpe_buf_free(&m->usage);
}

static void set_span(mlpe_buf *b, mlpe_span s) {
    b->len = 0;
    FUZZ_CHECK(mlpe_buf_append(b, s.ptr, s.len) == MLPE_OK);
}

/* One event's data through a fresh decoder and the rules. */
static void model_event(model *m, const uint8_t *line, size_t n) {
    mlpe_oai_decoder d;
    mlpe_oai_chunk c;
    int code;
    if (m->error)
        return;
    m->events++;
    if (m->done_seen) {
        m->events_after_done++;
        return;
    }
    if (n == 6 && memcmp(line, "[DONE]", 6) == 0) {
        m->done_seen = 1;
        return;
    }
    FUZZ_CHECK(mlpe_oai_init(&d) == MLPE_OK);
    mlpe_oai_set_dialect(&d, MLPE_DIALECT_SGLANG);
    code = mlpe_oai_decode(&d, line, n, &c);
    if (code == MLPE_E_NOMEM) {
        m->nomem = 1;
    } else if (code != MLPE_OK) {
        if (m->chunk_errors++ == 0)
            m->first_chunk_error = code;
    } else {
        size_t have = m->content.len, i = 0;
        if (c.has_content && have) {
            while (i < have && i < c.content.len && c.content.ptr[i] == m->content.ptr[i])
                i++;
            if (i < have) { /* R11: not the text so far extended */
                m->error = MLPE_E_TEXT_NOT_CUMULATIVE;
                m->error_pos = i;
            }
        }
        if (!m->error) {
            if (c.has_content && c.content.len > have) {
                FUZZ_CHECK(mlpe_buf_append(&m->content, c.content.ptr + have,
                                           c.content.len - have) == MLPE_OK);
                m->content_events++;
            }
            if (c.has_finish_reason) {
                m->has_finish_reason = 1;
                set_span(&m->finish_reason, c.finish_reason);
            }
            if (c.has_usage) {
                m->has_usage = 1;
                set_span(&m->usage, c.usage);
            }
        }
    }
    mlpe_oai_free(&d);
}

static void log_buf(mlpe_buf *log, const mlpe_buf *b) {
    fuzz_log_bytes(log, b->ptr, b->len);
}

/* The summary without stamps and keep_alive. */
static void resp_log(const mlpe_response *r, mlpe_buf *log) {
    FUZZ_CHECK(r->reasoning.len == 0 && r->n_tools == 0);
    FUZZ_CHECK(fuzz_utf8_valid(r->content.ptr, r->content.len));
    FUZZ_CHECK(r->content_first_len <= r->content.len);
    fuzz_log_tag(log, 'S');
    fuzz_log_u64(log, (uint64_t)r->status);
    fuzz_log_u64(log, (uint64_t)r->complete);
    fuzz_log_u64(log, (uint64_t)r->done_seen);
    fuzz_log_u64(log, (uint64_t)(r->t_first >= 0));
    fuzz_log_u64(log, r->events);
    fuzz_log_u64(log, r->content_events);
    fuzz_log_u64(log, r->events_after_done);
    fuzz_log_u64(log, r->chunk_errors);
    fuzz_log_u64(log, (uint64_t)r->first_chunk_error);
    log_buf(log, &r->first_chunk_error_detail);
    log_buf(log, &r->content);
    fuzz_log_u64(log, r->content_first_len);
    fuzz_log_u64(log, (uint64_t)r->has_finish_reason);
    log_buf(log, &r->finish_reason);
    fuzz_log_u64(log, (uint64_t)r->has_usage);
    log_buf(log, &r->usage);
    fuzz_log_u64(log, (uint64_t)r->error);
    fuzz_log_u64(log, r->error_pos);
}

static int bufs_equal(const mlpe_buf *a, const mlpe_buf *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

static void model_check(const model *m, const mlpe_response *r) {
    if (m->nomem || r->error == MLPE_E_NOMEM)
        return;
    FUZZ_CHECK(r->error == m->error);
    if (m->error)
        FUZZ_CHECK(r->error_pos == m->error_pos);
    FUZZ_CHECK(r->events == m->events && r->events_after_done == m->events_after_done);
    FUZZ_CHECK(r->done_seen == m->done_seen);
    FUZZ_CHECK(bufs_equal(&r->content, &m->content));
    FUZZ_CHECK(r->content_events == m->content_events);
    FUZZ_CHECK((r->t_first >= 0) == (m->content_events > 0));
    FUZZ_CHECK(r->chunk_errors == m->chunk_errors && r->first_chunk_error == m->first_chunk_error);
    FUZZ_CHECK(r->has_finish_reason == m->has_finish_reason);
    FUZZ_CHECK(bufs_equal(&r->finish_reason, &m->finish_reason));
    FUZZ_CHECK(r->has_usage == m->has_usage && bufs_equal(&r->usage, &m->usage));
}

static void sg_init(mlpe_response *r) {
    mlpe_response_limits limits;
    memset(&limits, 0, sizeof limits);
    limits.dialect = MLPE_DIALECT_SGLANG;
    FUZZ_CHECK(mlpe_response_init(r, &limits) == MLPE_OK);
}

/* The body in body mode, in the pieces `split` gives (whole when NULL). */
static void body_run(const mlpe_buf *body, const char *type, fuzz_splitter *split, mlpe_buf *log,
                     const model *m) {
    mlpe_response r;
    size_t pos = 0;
    int64_t t = T0;
    unsigned flags;
    sg_init(&r);
    flags = mlpe_response_set_head(&r, 200, (const uint8_t *)type, strlen(type), NULL, 0, t);
    FUZZ_CHECK(flags == MLPE_RESPONSE_HEAD);
    while (pos < body->len && !r.error) {
        size_t n = split ? fuzz_split_next(split, body->len - pos) : body->len - pos;
        uint8_t *piece = fuzz_dup(body->ptr + pos, n);
        flags = mlpe_response_feed_body(&r, piece, n, ++t);
        free(piece);
        FUZZ_CHECK(!!(flags & MLPE_RESPONSE_ERROR) == (r.error != 0));
        pos += n;
    }
    if (!r.error)
        mlpe_response_end_body(&r, ++t);
    FUZZ_CHECK(r.complete || r.error);
    if (m != NULL)
        model_check(m, &r);
    resp_log(&r, log);
    mlpe_response_free(&r);
}

/* The same body as an HTTP/1.1 message with a Content-Length. */
static void wire_run(const mlpe_buf *body, const char *type, mlpe_buf *log) {
    char head[128];
    mlpe_response r;
    mlpe_buf wire;
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %zu\r\n\r\n", type,
                     body->len);
    mlpe_buf_init(&wire);
    FUZZ_CHECK(n > 0 && mlpe_buf_append(&wire, (const uint8_t *)head, (size_t)n) == MLPE_OK);
    FUZZ_CHECK(mlpe_buf_append(&wire, body->ptr, body->len) == MLPE_OK);
    sg_init(&r);
    mlpe_response_feed(&r, wire.ptr, wire.len, T0);
    FUZZ_CHECK(r.complete || r.error);
    FUZZ_CHECK(r.keep_alive == (r.error == 0));
    resp_log(&r, log);
    mlpe_response_free(&r);
    mlpe_buf_free(&wire);
}

static void stream_input(const uint8_t *data, size_t size, uint64_t h) {
    mlpe_buf body, whole, other, line;
    model m;
    fuzz_splitter split;
    size_t start = 0;
    mlpe_buf_init(&body);
    mlpe_buf_init(&whole);
    mlpe_buf_init(&other);
    mlpe_buf_init(&line);
    memset(&m, 0, sizeof m);
    for (;;) {
        const uint8_t *lf = size > start ? memchr(data + start, '\n', size - start) : NULL;
        size_t end = lf ? (size_t)(lf - data) : size, i;
        line.len = 0;
        FUZZ_CHECK(mlpe_buf_reserve(&line, end - start + 1) == MLPE_OK);
        for (i = start; i < end; i++) /* a CR would end the SSE line */
            line.ptr[line.len++] = data[i] == '\r' ? ' ' : data[i];
        FUZZ_CHECK(mlpe_buf_append(&body, (const uint8_t *)"data: ", 6) == MLPE_OK);
        FUZZ_CHECK(mlpe_buf_append(&body, line.ptr, line.len) == MLPE_OK);
        FUZZ_CHECK(mlpe_buf_append(&body, (const uint8_t *)"\n\n", 2) == MLPE_OK);
        model_event(&m, line.ptr, line.len);
        if (lf == NULL)
            break;
        start = end + 1;
    }
    body_run(&body, "text/event-stream", NULL, &whole, &m);
    fuzz_split_init(&split, (uint8_t)h, body.len);
    body_run(&body, "text/event-stream", &split, &other, NULL);
    fuzz_logs_equal(&whole, &other, "sglang stream whole vs split");
    other.len = 0;
    wire_run(&body, "text/event-stream", &other);
    fuzz_logs_equal(&whole, &other, "sglang stream body mode vs HTTP/1.1");
    model_free(&m);

    /* The input as a non-streaming body: one chunk, its text the content. */
    {
        mlpe_oai_decoder d;
        mlpe_oai_chunk c;
        mlpe_response r;
        int code;
        body.len = 0;
        FUZZ_CHECK(mlpe_buf_append(&body, data, size) == MLPE_OK);
        FUZZ_CHECK(mlpe_oai_init(&d) == MLPE_OK);
        mlpe_oai_set_dialect(&d, MLPE_DIALECT_SGLANG);
        code = mlpe_oai_decode(&d, data, size, &c);
        sg_init(&r);
        mlpe_response_set_head(&r, 200, (const uint8_t *)"application/json", 16, NULL, 0, T0);
        mlpe_response_feed_body(&r, body.ptr, body.len, T0 + 1);
        mlpe_response_end_body(&r, T0 + 2);
        if (code != MLPE_E_NOMEM && r.error != MLPE_E_NOMEM && !r.error) {
            FUZZ_CHECK(r.complete && r.events == 0);
            FUZZ_CHECK(r.chunk_errors == (code != MLPE_OK));
            if (code == MLPE_OK && c.has_content)
                FUZZ_CHECK(r.content.len == c.content.len &&
                           (c.content.len == 0 ||
                            memcmp(r.content.ptr, c.content.ptr, c.content.len) == 0));
            else
                FUZZ_CHECK(r.content.len == 0);
        }
        mlpe_response_free(&r);
        mlpe_oai_free(&d);
    }
    mlpe_buf_free(&body);
    mlpe_buf_free(&whole);
    mlpe_buf_free(&other);
    mlpe_buf_free(&line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t h = fuzz_hash(data, size);
    object_input(data, size);
    stream_input(data, size, h);
    return 0;
}
