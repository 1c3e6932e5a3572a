/*
 * fuzz_response.c -- libFuzzer entry point for the whole-response decoder
 * (mlpe_response.h: H1 framing -> SSE -> OpenAI chunks -> summary).  The
 * input is what a client reads from the connection of one request; see
 * fuzz_common.h for the plan shared by all drivers.
 *
 * Each piece k is fed with the stamp T0 + k, so the stamps say which call
 * completed what.  Checked (rule numbers are those of mlpe_response.h):
 *  - flags are a subset of HEAD|FIRST|DONE|ERROR; HEAD, FIRST and DONE come
 *    once each, in that order, and t_head / t_first set with the stamp of the
 *    call that returned them; t_done is the stamp of the call that saw
 *    "[DONE]" or completed the message (R4); chunk_times are non-decreasing
 *    and one per content-bearing event (R3);
 *  - ERROR is returned by the call that set error and by every later call,
 *    and error / error_pos never change afterwards (R8);
 *  - the summary holds valid UTF-8 text, *_first_len within the text, usage
 *    as an object's text, counters that agree (content events and chunk
 *    errors never outnumber events, the first chunk error is set iff one
 *    was counted, R5);
 *  - an oracle built from the layers themselves -- mlpe_h1 looped until
 *    NEED_MORE as mlpe_h1.h prescribes, each body span given to mlpe_sse --
 *    agrees on status, completion, event counts, "[DONE]", bytes after the
 *    message (R7) and the terminal error with its position (R8);
 *  - whole, split and byte-at-a-time feeding give the same summary, stamps
 *    aside.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mlpe_response.h"

#define T0 1000000

typedef struct resp_config {
    mlpe_response_limits limits;
    int eof;
} resp_config;

static void resp_pick_config(resp_config *cfg, uint64_t bits) {
    static const size_t lines[4] = {24, 64, 256, 0};
    static const size_t events[4] = {8, 64, 300, 0};
    static const size_t bodies[4] = {1, 16, 200, 0};
    memset(cfg, 0, sizeof *cfg);
    if (bits & 1) {
        cfg->limits.h1.max_line = lines[(bits >> 1) & 3];
        cfg->limits.h1.max_headers = ((bits >> 3) & 1) ? 4 : 0;
        cfg->limits.max_event = events[(bits >> 4) & 3];
        cfg->limits.max_body = bodies[(bits >> 6) & 3];
    }
    cfg->limits.record_chunk_times = (int)((bits >> 8) & 1);
    cfg->eof = (int)((bits >> 9) & 1);
}

/* ---- per-call checks ------------------------------------------------------ */

typedef struct resp_run {
    mlpe_response r;
    const resp_config *cfg;
    unsigned seen;       /* flags returned so far */
    int64_t done_stamp;  /* stamp at which done_seen was first observed */
    size_t chunk_times;  /* chunk_times already checked */
} resp_run;

static void resp_after_call(resp_run *run, unsigned flags, int64_t t) {
    mlpe_response *r = &run->r;
    const unsigned all = MLPE_RESPONSE_HEAD | MLPE_RESPONSE_FIRST | MLPE_RESPONSE_DONE |
                         MLPE_RESPONSE_ERROR;
    size_t i;
    FUZZ_CHECK((flags & ~all) == 0);
    if (run->seen & MLPE_RESPONSE_ERROR) {
        FUZZ_CHECK(flags == MLPE_RESPONSE_ERROR);
        return;
    }
    FUZZ_CHECK(!(flags & run->seen & (MLPE_RESPONSE_HEAD | MLPE_RESPONSE_FIRST |
                                      MLPE_RESPONSE_DONE)));
    FUZZ_CHECK(!!(flags & MLPE_RESPONSE_ERROR) == (r->error != 0));
    if (flags & MLPE_RESPONSE_HEAD)
        FUZZ_CHECK(r->t_head == t && r->status >= 0 && r->status <= 999);
    if (flags & MLPE_RESPONSE_FIRST) {
        FUZZ_CHECK((run->seen | flags) & MLPE_RESPONSE_HEAD);
        FUZZ_CHECK(r->t_first == t && r->content_events >= 1);
    }
    if (flags & MLPE_RESPONSE_DONE) {
        FUZZ_CHECK((run->seen | flags) & MLPE_RESPONSE_HEAD);
        FUZZ_CHECK(r->complete);
    }
    if (!((run->seen | flags) & MLPE_RESPONSE_HEAD) && !r->error)
        FUZZ_CHECK(r->t_head == -1 && r->status == 0 && r->body_kind == MLPE_BODY_NONE);
    if (!((run->seen | flags) & MLPE_RESPONSE_FIRST))
        FUZZ_CHECK(r->t_first == -1 && r->content_events == 0);
    if (r->done_seen && run->done_stamp < 0)
        run->done_stamp = t;
    if (r->done_seen)
        FUZZ_CHECK(r->t_done == run->done_stamp);
    else if (flags & MLPE_RESPONSE_DONE)
        FUZZ_CHECK(r->t_done == t);
    else if (!r->complete)
        FUZZ_CHECK(r->t_done == -1);
    if (run->cfg->limits.record_chunk_times) {
        FUZZ_CHECK(r->n_chunk_times == r->content_events);
        for (i = run->chunk_times; i < r->n_chunk_times; i++) {
            FUZZ_CHECK(r->chunk_times[i] <= t && r->chunk_times[i] >= T0);
            FUZZ_CHECK(i == 0 || r->chunk_times[i - 1] <= r->chunk_times[i]);
        }
        run->chunk_times = r->n_chunk_times;
    } else {
        FUZZ_CHECK(r->n_chunk_times == 0);
    }
    run->seen |= flags;
}

/* ---- the summary, checked and logged without stamps ------------------------ */

static void log_buf(mlpe_buf *log, const mlpe_buf *b, int utf8) {
    FUZZ_CHECK(b->len == 0 || b->ptr != NULL);
    if (utf8)
        FUZZ_CHECK(fuzz_utf8_valid(b->ptr, b->len));
    fuzz_log_bytes(log, b->ptr, b->len);
}

static void resp_log(const mlpe_response *r, mlpe_buf *log) {
    size_t i;
    FUZZ_CHECK(r->body_kind >= MLPE_BODY_NONE && r->body_kind <= MLPE_BODY_ERROR);
    if (r->body_kind == MLPE_BODY_SSE || r->body_kind == MLPE_BODY_JSON)
        FUZZ_CHECK(r->status >= 200 && r->status <= 299);
    FUZZ_CHECK(r->content_events <= r->events + 1 && r->chunk_errors <= r->events + 1);
    FUZZ_CHECK(r->events_after_done <= r->events);
    FUZZ_CHECK((r->chunk_errors == 0) == (r->first_chunk_error == 0));
    FUZZ_CHECK(r->first_chunk_error == 0 || (r->first_chunk_error >= MLPE_E_JSON_SYNTAX &&
                                             r->first_chunk_error <= MLPE_E_ENDPOINT_ERROR));
    FUZZ_CHECK(r->content_first_len <= r->content.len);
    FUZZ_CHECK(r->reasoning_first_len <= r->reasoning.len);
    FUZZ_CHECK(r->n_tools == 0 || r->tools != NULL);
    if (r->has_usage)
        FUZZ_CHECK(r->usage.len >= 2 && r->usage.ptr[0] == '{' &&
                   r->usage.ptr[r->usage.len - 1] == '}');
    if (r->body_kind == MLPE_BODY_ERROR)
        FUZZ_CHECK(r->body.len <= MLPE_RESPONSE_ERROR_BODY_MAX);

    fuzz_log_tag(log, 'R');
    fuzz_log_u64(log, (uint64_t)r->status);
    fuzz_log_u64(log, (uint64_t)r->body_kind);
    fuzz_log_u64(log, (uint64_t)r->keep_alive);
    fuzz_log_u64(log, (uint64_t)r->complete);
    fuzz_log_u64(log, (uint64_t)r->done_seen);
    fuzz_log_u64(log, (uint64_t)(r->t_head >= 0) | (uint64_t)(r->t_first >= 0) << 1 |
                          (uint64_t)(r->t_done >= 0) << 2);
    fuzz_log_u64(log, r->events);
    fuzz_log_u64(log, r->content_events);
    fuzz_log_u64(log, r->events_after_done);
    fuzz_log_u64(log, r->chunk_errors);
    fuzz_log_u64(log, (uint64_t)r->first_chunk_error);
    log_buf(log, &r->first_chunk_error_detail, 1);
    log_buf(log, &r->first_chunk_error_data, 0);
    fuzz_log_u64(log, r->unexpected_bytes);
    log_buf(log, &r->content, 1);
    log_buf(log, &r->reasoning, 1);
    fuzz_log_u64(log, r->content_first_len);
    fuzz_log_u64(log, r->reasoning_first_len);
    fuzz_log_u64(log, (uint64_t)r->has_finish_reason);
    log_buf(log, &r->finish_reason, 1);
    fuzz_log_u64(log, (uint64_t)r->has_usage);
    log_buf(log, &r->usage, 1);
    log_buf(log, &r->body, 0);
    fuzz_log_u64(log, r->n_tools);
    for (i = 0; i < r->n_tools; i++) {
        const mlpe_tool_call *tc = &r->tools[i];
        FUZZ_CHECK(tc->index >= 0);
        FUZZ_CHECK(tc->name_first_len <= tc->name.len);
        FUZZ_CHECK(tc->arguments_first_len <= tc->arguments.len);
        fuzz_log_u64(log, (uint64_t)tc->index);
        log_buf(log, &tc->id, 1);
        log_buf(log, &tc->type, 1);
        log_buf(log, &tc->name, 1);
        log_buf(log, &tc->arguments, 1);
        fuzz_log_u64(log, tc->name_first_len);
        fuzz_log_u64(log, tc->arguments_first_len);
    }
    fuzz_log_u64(log, r->n_chunk_times);
    fuzz_log_u64(log, (uint64_t)r->error);
    fuzz_log_u64(log, r->error_pos);
}

/* Feeds data in the pieces `split` gives (one piece when NULL), checks every
 * call, logs the summary; the caller frees run->r. */
static void resp_decode(resp_run *run, const uint8_t *data, size_t size, const resp_config *cfg,
                        fuzz_splitter *split, mlpe_buf *log) {
    size_t pos = 0;
    int64_t t = T0;
    memset(run, 0, sizeof *run);
    run->cfg = cfg;
    run->done_stamp = -1;
    FUZZ_CHECK(mlpe_response_init(&run->r, &cfg->limits) == MLPE_OK);
    while (pos < size) {
        size_t n = split ? fuzz_split_next(split, size - pos) : size - pos;
        uint8_t *piece = fuzz_dup(data + pos, n);
        unsigned flags = mlpe_response_feed(&run->r, piece, n, t);
        free(piece);
        resp_after_call(run, flags, t);
        pos += n;
        t++;
    }
    if (cfg->eof)
        resp_after_call(run, mlpe_response_feed_eof(&run->r, t), t);
    if (run->r.error) { /* terminal: a later call changes nothing */
        int err = run->r.error;
        uint64_t at = run->r.error_pos;
        FUZZ_CHECK(mlpe_response_feed(&run->r, (const uint8_t *)"\r\n", 2, t + 1) ==
                   MLPE_RESPONSE_ERROR);
        FUZZ_CHECK(mlpe_response_feed_eof(&run->r, t + 2) == MLPE_RESPONSE_ERROR);
        FUZZ_CHECK(run->r.error == err && run->r.error_pos == at);
    }
    resp_log(&run->r, log);
}

/* ---- the oracle: the layers composed by hand -------------------------------- */

typedef struct oracle {
    int head, status, complete, error, stop;
    uint64_t error_pos, events, events_after_done, body_off, unexpected;
    int done_seen;
} oracle;

static void oracle_sse(oracle *o, mlpe_sse_decoder *d, const uint8_t *p, size_t n) {
    for (;;) {
        mlpe_sse_event ev;
        size_t used = 0;
        mlpe_sse_result res = mlpe_sse_feed(d, p, n, &used, &ev);
        if (res == MLPE_SSE_NEED_MORE)
            return;
        if (res == MLPE_SSE_ERROR) {
            o->error = d->error;
            o->error_pos = d->error_pos;
            o->stop = 1;
            return;
        }
        p += used;
        n -= used;
        o->events++;
        if (o->done_seen)
            o->events_after_done++;
        else if (mlpe_sse_is_done(&ev))
            o->done_seen = 1;
    }
}

/* Runs the oracle over the whole input; body_kind is the response's reading
 * of the head (R1, R2 are not reimplemented here). */
static void oracle_run(oracle *o, const uint8_t *data, size_t size, const resp_config *cfg,
                       int body_kind, size_t max_body) {
    mlpe_h1_parser p;
    mlpe_sse_decoder d;
    size_t off = 0;
    memset(o, 0, sizeof *o);
    FUZZ_CHECK(mlpe_h1_init(&p, &cfg->limits.h1) == MLPE_OK);
    FUZZ_CHECK(mlpe_sse_init(&d, cfg->limits.max_event) == MLPE_OK);
    while (!o->stop) {
        size_t used = 0;
        mlpe_span body = {NULL, 0};
        mlpe_h1_result res = mlpe_h1_feed(&p, off < size ? data + off : NULL, size - off, &used,
                                          &body);
        off += used;
        if (res == MLPE_H1_NEED_MORE)
            break;
        if (res == MLPE_H1_HEAD) {
            o->head = 1;
            o->status = p.status;
        } else if (res == MLPE_H1_BODY) {
            if (body_kind == MLPE_BODY_SSE) {
                oracle_sse(o, &d, body.ptr, body.len);
            } else if (body_kind == MLPE_BODY_JSON && body.len > max_body - o->body_off) {
                o->error = MLPE_E_BODY_TOO_LARGE;
                o->error_pos = max_body;
                o->stop = 1;
            }
            o->body_off += body.len;
        } else if (res == MLPE_H1_DONE) {
            o->complete = 1;
            o->unexpected = size - off;
            o->stop = 1;
        } else {
            o->error = p.error;
            o->error_pos = p.error_pos;
            o->stop = 1;
        }
    }
    if (!o->stop && cfg->eof) {
        mlpe_h1_result res = mlpe_h1_feed_eof(&p);
        if (res == MLPE_H1_DONE) {
            o->complete = 1;
        } else {
            o->error = res == MLPE_H1_ERROR ? p.error : MLPE_E_INCOMPLETE;
            o->error_pos = res == MLPE_H1_ERROR ? p.error_pos : p.offset;
        }
    }
    mlpe_h1_free(&p);
    mlpe_sse_free(&d);
}

static void oracle_check(const oracle *o, const mlpe_response *r) {
    if (r->error == MLPE_E_NOMEM || o->error == MLPE_E_NOMEM)
        return;
    FUZZ_CHECK(r->status == (o->head ? o->status : 0));
    if (r->error == MLPE_E_CONTENT_ENCODING) {
        FUZZ_CHECK(o->head && r->error_pos == 0);
        return; /* R2 stops the response at its head; the oracle went on */
    }
    FUZZ_CHECK(r->error == o->error);
    if (o->error)
        FUZZ_CHECK(r->error_pos == o->error_pos);
    FUZZ_CHECK(r->complete == o->complete);
    FUZZ_CHECK(r->events == o->events);
    FUZZ_CHECK(r->done_seen == o->done_seen);
    FUZZ_CHECK(r->events_after_done == o->events_after_done);
    if (o->complete && !o->error)
        FUZZ_CHECK(r->unexpected_bytes == o->unexpected);
    if (!o->complete)
        FUZZ_CHECK(r->unexpected_bytes == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t h = fuzz_hash(data, size);
    resp_config cfg;
    resp_run run;
    fuzz_splitter split;
    mlpe_buf whole, pieces;
    oracle o;

    resp_pick_config(&cfg, h >> 8);
    mlpe_buf_init(&whole);
    mlpe_buf_init(&pieces);

    resp_decode(&run, data, size, &cfg, NULL, &whole);
    oracle_run(&o, data, size, &cfg, run.r.body_kind, run.r.max_body);
    oracle_check(&o, &run.r);
    mlpe_response_free(&run.r);

    fuzz_split_init(&split, (uint8_t)h, size);
    resp_decode(&run, data, size, &cfg, &split, &pieces);
    mlpe_response_free(&run.r);
    fuzz_logs_equal(&whole, &pieces, "response whole vs split");
    if (size <= 2048) {
        pieces.len = 0;
        fuzz_split_init(&split, 0, size);
        resp_decode(&run, data, size, &cfg, &split, &pieces);
        mlpe_response_free(&run.r);
        fuzz_logs_equal(&whole, &pieces, "response whole vs byte-at-a-time");
    }
    mlpe_buf_free(&whole);
    mlpe_buf_free(&pieces);
    return 0;
}
