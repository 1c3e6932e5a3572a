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
 *    and one per content-bearing event (R3); t_first_content and t_second
 *    are set with the stamp of a call at or after t_first, t_second only
 *    from the second content-bearing event on, and the gaps agree with the
 *    events (one per content-bearing event after the first, min <= max <=
 *    sum, the histogram's buckets within [lo, hi] summing to the count, or
 *    empty under no_gap_histogram; R12);
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
 *    aside;
 *  - a call out of order (see "Input modes" in mlpe_response.h) returns ERROR
 *    and changes nothing.
 *
 * Body mode (R9): an input whose first byte has its top bit set is a head
 * and a body instead.  A status line cannot start with such a byte, so the
 * wire-mode inputs lose nothing, and the seeds of one mode stay in it.
 *
 *     byte 0   1ssee ttt: ttt picks the Content-Type (7: from the input),
 *                         ee the Content-Encoding, ss how the status is made
 *     byte 1   the status's low part (see body_pick_head)
 *     byte 2   the length of a Content-Type taken from the input (ttt = 7)
 *     then     that Content-Type, then the body
 *
 * The body is fed in pieces (after an empty one) and ended with end_body;
 * the per-call checks above apply, plus:
 *  - set_head refuses a status outside 200-599 and leaves the response
 *    untouched; it returns HEAD or MLPE_E_CONTENT_ENCODING at 0 as the
 *    chosen fields say, and the body kind R1 gives them;
 *  - keep_alive and unexpected_bytes stay 0; end_body completes;
 *  - whole, split and byte-at-a-time feeding give the same summary;
 *  - the same head and body as an HTTP/1.1 message (Content-Length) give
 *    the same summary, keep_alive aside, whenever HTTP/1.1 can carry the
 *    fields unchanged (h1 trims and unfolds values) and frames a body.
 */
#include <stdint.h>
#include <stdio.h>
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
    cfg->limits.no_gap_histogram = (int)((bits >> 10) & 1);
}

/* ---- per-call checks ------------------------------------------------------ */

typedef struct resp_run {
    mlpe_response r;
    const resp_config *cfg;
    unsigned seen;       /* flags returned so far */
    int64_t done_stamp;  /* stamp at which done_seen was first observed */
    size_t chunk_times;  /* chunk_times already checked */
} resp_run;

/* R12 after a call at stamp t (stamps never decrease here: T0 + k). */
static void resp_check_r12(const mlpe_response *r, int64_t t, int no_histogram) {
    const mlpe_gaps *g = &r->gaps;
    uint64_t total = 0;
    uint32_t i;
    if (r->t_first_content >= 0)
        FUZZ_CHECK(r->t_first >= 0 && r->t_first_content >= r->t_first &&
                   r->t_first_content <= t);
    FUZZ_CHECK((r->t_second >= 0) == (r->content_events >= 2));
    if (r->t_second >= 0)
        FUZZ_CHECK(r->t_second >= r->t_first && r->t_second <= t);
    FUZZ_CHECK(g->count == (r->content_events ? r->content_events - 1 : 0));
    FUZZ_CHECK(g->zero <= g->count && g->min_ns >= 0 && g->min_ns <= g->max_ns);
    FUZZ_CHECK(g->sum_ns >= g->max_ns && (g->count > 0 || g->sum_ns == 0));
    if (r->t_first >= 0)
        FUZZ_CHECK(g->sum_ns <= t - r->t_first);
    if (no_histogram || g->count == 0) {
        FUZZ_CHECK(g->hi < g->lo);
    } else {
        FUZZ_CHECK(g->lo <= g->hi && g->hi < MLPE_GAP_BUCKETS);
        FUZZ_CHECK(g->buckets[g->lo] != 0 && g->buckets[g->hi] != 0);
        FUZZ_CHECK(g->lo == mlpe_gap_bucket((uint64_t)g->min_ns) &&
                   g->hi == mlpe_gap_bucket((uint64_t)g->max_ns));
    }
    for (i = 0; i < MLPE_GAP_BUCKETS; i++) {
        FUZZ_CHECK(g->buckets[i] == 0 || (i >= g->lo && i <= g->hi));
        total += g->buckets[i];
    }
    FUZZ_CHECK(total == (no_histogram ? 0 : g->count));
}

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
    resp_check_r12(r, t, run->cfg->limits.no_gap_histogram);
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
    /* R12 without its stamps: which were reached, and how many gaps */
    fuzz_log_u64(log, (uint64_t)(r->t_first_content >= 0) | (uint64_t)(r->t_second >= 0) << 1);
    fuzz_log_u64(log, r->gaps.count);
    fuzz_log_u64(log, (uint64_t)r->error);
    fuzz_log_u64(log, r->error_pos);
}

/* ---- refused calls --------------------------------------------------------- */

typedef enum resp_call {
    CALL_FEED,
    CALL_FEED_EOF,
    CALL_SET_HEAD,
    CALL_FEED_BODY,
    CALL_END_BODY
} resp_call;

/* A call out of order, or any call after a terminal error, returns ERROR
 * and changes nothing (mlpe_response.h, "Input modes"). */
static void check_refused(mlpe_response *r, resp_call call, int64_t t) {
    static const uint8_t sse[] = "text/event-stream";
    static const uint8_t event[] = "data: {}\n\n";
    const int input_mode = r->input_mode, error = r->error;
    const uint64_t error_pos = r->error_pos;
    const int64_t t_head = r->t_head, t_first = r->t_first, t_done = r->t_done;
    mlpe_buf before, after;
    unsigned flags = 0;
    mlpe_buf_init(&before);
    mlpe_buf_init(&after);
    resp_log(r, &before);
    switch (call) {
    case CALL_FEED:
        flags = mlpe_response_feed(r, event, sizeof event - 1, t);
        break;
    case CALL_FEED_EOF:
        flags = mlpe_response_feed_eof(r, t);
        break;
    case CALL_SET_HEAD:
        flags = mlpe_response_set_head(r, 200, sse, sizeof sse - 1, NULL, 0, t);
        break;
    case CALL_FEED_BODY:
        flags = mlpe_response_feed_body(r, event, sizeof event - 1, t);
        break;
    case CALL_END_BODY:
        flags = mlpe_response_end_body(r, t);
        break;
    }
    FUZZ_CHECK(flags == MLPE_RESPONSE_ERROR);
    FUZZ_CHECK(r->input_mode == input_mode && r->error == error && r->error_pos == error_pos);
    FUZZ_CHECK(r->t_head == t_head && r->t_first == t_first && r->t_done == t_done);
    resp_log(r, &after);
    fuzz_logs_equal(&before, &after, "response before and after a refused call");
    mlpe_buf_free(&before);
    mlpe_buf_free(&after);
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
    if (run->r.input_mode == MLPE_INPUT_WIRE || run->r.error) {
        check_refused(&run->r, CALL_SET_HEAD, t + 1);
        check_refused(&run->r, CALL_FEED_BODY, t + 1);
        check_refused(&run->r, CALL_END_BODY, t + 1);
    }
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
        if (res == MLPE_H1_DONE || o->done_seen) { /* R4: a close after [DONE] completes it */
            o->complete = 1;
        } else {
            o->error = res == MLPE_H1_ERROR ? p.error : MLPE_E_INCOMPLETE;
            o->error_pos = res == MLPE_H1_ERROR ? p.error_pos : p.offset;
        }
    }
    if (o->complete && body_kind == MLPE_BODY_SSE && o->events == 0) { /* R10 */
        o->complete = 0;
        o->error = MLPE_E_NO_EVENTS;
        o->error_pos = o->body_off;
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

/* ---- body mode (R9) ----------------------------------------------------------- */

typedef struct body_input {
    int status;
    const uint8_t *type, *encoding; /* NULL: the field is absent */
    size_t type_len, encoding_len;
    int type_known_sse;             /* R1 for a fixed Content-Type: 1, 0; -1 from input */
    int encoding_refused;           /* R2 */
    const uint8_t *body;
    size_t body_len;
} body_input;

static const char *const body_types[7] = {
    NULL,                               /* absent: JSON */
    "text/event-stream",
    "Text/Event-Stream; charset=utf-8",
    "TEXT/EVENT-STREAM\t;q",
    "text/event-streams",               /* a longer media type: JSON */
    "application/json",
    "",                                 /* present, empty: JSON */
};
static const int body_types_sse[7] = {0, 1, 1, 1, 0, 0, 0};
static const char *const body_encodings[4] = {NULL, "identity", "gzip", "IDENTITY; q=1"};
static const int body_encodings_refused[4] = {0, 0, 1, 0};

static void body_pick_head(body_input *in, const uint8_t *data, size_t size) {
    uint8_t b0 = data[0], b1 = size > 1 ? data[1] : 0, b2 = size > 2 ? data[2] : 0;
    size_t off = size < 3 ? size : 3;
    unsigned t = b0 & 7u, e = (b0 >> 3) & 3u;
    memset(in, 0, sizeof *in);
    switch ((b0 >> 5) & 3u) {
    case 0: in->status = 200; break;
    case 1: in->status = 200 + b1 % 100; break;          /* any 2xx */
    case 2: in->status = 300 + b1 % 300; break;          /* 3xx-5xx: an error body */
    default: in->status = (int)b1 * 4 - 100; break;      /* -100..920: refusals too */
    }
    if (t == 7) {
        size_t n = b2 < size - off ? b2 : size - off;
        in->type = data + off;
        in->type_len = n;
        in->type_known_sse = -1;
        off += n;
    } else {
        in->type = (const uint8_t *)body_types[t];
        in->type_len = body_types[t] ? strlen(body_types[t]) : 0;
        in->type_known_sse = body_types_sse[t];
    }
    in->encoding = (const uint8_t *)body_encodings[e];
    in->encoding_len = body_encodings[e] ? strlen(body_encodings[e]) : 0;
    in->encoding_refused = body_encodings_refused[e];
    in->body = data + off;
    in->body_len = size - off;
}

/* Decodes `in` in body mode, the body in the pieces `split` gives (one piece
 * when NULL), checks every call, logs the summary; the caller frees run->r. */
static void body_decode(resp_run *run, const body_input *in, const resp_config *cfg,
                        fuzz_splitter *split, mlpe_buf *log) {
    mlpe_response *r = &run->r;
    /* Heap copies of exactly their size, so that ASan sees an overread. */
    uint8_t *type = in->type ? fuzz_dup(in->type, in->type_len) : NULL;
    uint8_t *encoding = in->encoding ? fuzz_dup(in->encoding, in->encoding_len) : NULL;
    size_t pos = 0;
    int64_t t = T0;
    unsigned flags;
    memset(run, 0, sizeof *run);
    run->cfg = cfg;
    run->done_stamp = -1;
    FUZZ_CHECK(mlpe_response_init(r, &cfg->limits) == MLPE_OK);
    flags = mlpe_response_set_head(r, in->status, type, in->type_len, encoding, in->encoding_len,
                                   t);
    free(type);
    free(encoding);
    if (in->status < 200 || in->status > 599) { /* refused: no head yet */
        FUZZ_CHECK(flags == MLPE_RESPONSE_ERROR && r->error == 0);
        FUZZ_CHECK(r->input_mode == MLPE_INPUT_NONE && r->status == 0 && r->t_head == -1);
        check_refused(r, CALL_FEED_BODY, t);
        check_refused(r, CALL_END_BODY, t);
        resp_log(r, log);
        return;
    }
    resp_after_call(run, flags, t);
    FUZZ_CHECK(r->input_mode == MLPE_INPUT_BODY && r->status == in->status && r->t_head == t);
    if (in->encoding_refused) {
        FUZZ_CHECK(flags == MLPE_RESPONSE_ERROR);
        FUZZ_CHECK(r->error == MLPE_E_CONTENT_ENCODING && r->error_pos == 0);
    } else {
        FUZZ_CHECK(flags == MLPE_RESPONSE_HEAD);
        if (in->status > 299)
            FUZZ_CHECK(r->body_kind == MLPE_BODY_ERROR);
        else if (in->type_known_sse >= 0)
            FUZZ_CHECK(r->body_kind == (in->type_known_sse ? MLPE_BODY_SSE : MLPE_BODY_JSON));
    }
    t++;
    resp_after_call(run, mlpe_response_feed_body(r, NULL, 0, t), t);
    FUZZ_CHECK(r->error || r->body_offset == 0);
    while (pos < in->body_len) {
        size_t n = split ? fuzz_split_next(split, in->body_len - pos) : in->body_len - pos;
        uint8_t *piece = fuzz_dup(in->body + pos, n);
        flags = mlpe_response_feed_body(r, piece, n, t);
        free(piece);
        resp_after_call(run, flags, t);
        pos += n;
        t++;
    }
    flags = mlpe_response_end_body(r, t);
    resp_after_call(run, flags, t);
    if (!r->error)
        FUZZ_CHECK((flags & MLPE_RESPONSE_DONE) && r->complete && r->body_offset == in->body_len);
    FUZZ_CHECK(r->keep_alive == 0 && r->unexpected_bytes == 0);
    /* Complete or failed: every input call is refused now. */
    check_refused(r, CALL_FEED, t + 1);
    check_refused(r, CALL_FEED_EOF, t + 1);
    check_refused(r, CALL_SET_HEAD, t + 1);
    check_refused(r, CALL_FEED_BODY, t + 1);
    check_refused(r, CALL_END_BODY, t + 1);
    resp_log(r, log);
}

/* Non-zero when an HTTP/1.1 head carries the value unchanged: h1 rejects
 * CR, LF and NUL in a value, folds lines and trims SP/HTAB at both ends. */
static int h1_keeps_value(const uint8_t *v, size_t n) {
    size_t i;
    if (n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        return 0;
    for (i = 0; i < n; i++)
        if (v[i] == '\r' || v[i] == '\n' || v[i] == 0)
            return 0;
    return 1;
}

static void append_text(mlpe_buf *b, const char *text) {
    FUZZ_CHECK(mlpe_buf_append(b, (const uint8_t *)text, strlen(text)) == MLPE_OK);
}

static void append_field(mlpe_buf *b, const char *name, const uint8_t *v, size_t n) {
    append_text(b, name);
    append_text(b, ": ");
    FUZZ_CHECK(mlpe_buf_append(b, v, n) == MLPE_OK);
    append_text(b, "\r\n");
}

/* R9 against the wire: the same head and body as an HTTP/1.1 message with a
 * Content-Length give the summary body mode gave (body_log), keep_alive
 * aside.  Skipped where HTTP/1.1 cannot say the same thing. */
static void body_vs_wire(const body_input *in, const resp_config *cfg, const mlpe_buf *body_log) {
    char line[64];
    mlpe_buf wire, log;
    mlpe_response_limits limits = cfg->limits;
    mlpe_response r;
    if (in->status < 200 || in->status > 599 || in->status == 204 || in->status == 304)
        return; /* refused, or a head with no body in HTTP/1.1 */
    if (in->type && !h1_keeps_value(in->type, in->type_len))
        return;
    mlpe_buf_init(&wire);
    mlpe_buf_init(&log);
    snprintf(line, sizeof line, "HTTP/1.1 %d X\r\n", in->status);
    append_text(&wire, line);
    if (in->type)
        append_field(&wire, "content-type", in->type, in->type_len);
    if (in->encoding)
        append_field(&wire, "content-encoding", in->encoding, in->encoding_len);
    snprintf(line, sizeof line, "content-length: %zu\r\n\r\n", in->body_len);
    append_text(&wire, line);
    FUZZ_CHECK(mlpe_buf_append(&wire, in->body, in->body_len) == MLPE_OK);
    memset(&limits.h1, 0, sizeof limits.h1); /* the h1 defaults: this head fits */
    FUZZ_CHECK(mlpe_response_init(&r, &limits) == MLPE_OK);
    mlpe_response_feed(&r, wire.ptr, wire.len, T0);
    if (r.error == MLPE_E_NOMEM || (r.error >= MLPE_E_STATUS_LINE && r.error <= MLPE_E_UPGRADE)) {
        /* a value h1 cannot carry (say, obs-text it refuses): nothing to compare */
    } else {
        FUZZ_CHECK(r.complete || r.error);
        FUZZ_CHECK(r.keep_alive == (r.error == 0));
        r.keep_alive = 0; /* the one difference R9 allows */
        resp_log(&r, &log);
        fuzz_logs_equal(body_log, &log, "body mode vs HTTP/1.1");
    }
    mlpe_response_free(&r);
    mlpe_buf_free(&wire);
    mlpe_buf_free(&log);
}

static void body_mode_input(const uint8_t *data, size_t size, const resp_config *cfg,
                            uint64_t h) {
    body_input in;
    resp_run run;
    fuzz_splitter split;
    mlpe_buf whole, pieces;

    body_pick_head(&in, data, size);
    mlpe_buf_init(&whole);
    mlpe_buf_init(&pieces);

    body_decode(&run, &in, cfg, NULL, &whole);
    mlpe_response_free(&run.r);
    body_vs_wire(&in, cfg, &whole);

    fuzz_split_init(&split, (uint8_t)h, in.body_len);
    body_decode(&run, &in, cfg, &split, &pieces);
    mlpe_response_free(&run.r);
    fuzz_logs_equal(&whole, &pieces, "body mode whole vs split");
    if (in.body_len <= 2048) {
        pieces.len = 0;
        fuzz_split_init(&split, 0, in.body_len);
        body_decode(&run, &in, cfg, &split, &pieces);
        mlpe_response_free(&run.r);
        fuzz_logs_equal(&whole, &pieces, "body mode whole vs byte-at-a-time");
    }
    mlpe_buf_free(&whole);
    mlpe_buf_free(&pieces);
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
    if (size > 0 && data[0] >= 0x80) {
        body_mode_input(data, size, &cfg, h);
        return 0;
    }
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
