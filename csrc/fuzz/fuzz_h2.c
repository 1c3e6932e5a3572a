/*
 * fuzz_h2.c -- libFuzzer entry point for the HTTP/2 DATA de-framer
 * (mlpe_h2.h) and the response decoders it feeds (mlpe_response.h, body
 * mode).  The input is what a client reads from an HTTP/2 connection after
 * its preface; see fuzz_common.h for the plan shared by all drivers.
 *
 * The driver plays the de-framer's owner (the engine and h2): it feeds each
 * piece until it is used up, as the engine's read path does, and when a
 * HEADERS frame of a new odd stream has been passed through it registers
 * that stream with a fresh decoder (D5 lets it do so before the next frame
 * is looked at).  Some streams are registered from the start.  Each piece k
 * is fed with the stamp T0 + k.  Checked (rule numbers of mlpe_h2.h):
 *  - mlpe_h2_feed uses at most its input, all of it unless a pass-through
 *    frame just ended (the pass-through bytes then end at a frame boundary)
 *    or error was set (D2, D5); after an error it uses nothing;
 *  - events name registered streams, carry FIRST and/or DONE or ERROR
 *    alone, at most once each per stream and nothing after ERROR; DONE
 *    comes with the stream's release by END_STREAM (D4, D6); n_streams
 *    follows registrations and releases;
 *  - window_updates holds well-formed WINDOW_UPDATE frames with increments
 *    of 1 .. 2^31-1 (D3);
 *  - an oracle that walks the whole input frame by frame, in the simplest
 *    way, gives the same pass-through bytes (synthesized END_STREAM frames
 *    included), the same WINDOW_UPDATE bytes, the same error and position;
 *    each stream's decoder equals a decoder fed that stream's payloads in
 *    one piece, and the union of its events' flags equals what that
 *    decoder's calls returned;
 *  - whole, split and byte-at-a-time feeding give the same log (stamps
 *    aside);
 *  - a further run unregisters streams between pieces -- often in the
 *    middle of one of their frames -- and frees each decoder as soon as the
 *    de-framer lets go of it (unregister, or release by END_STREAM), so
 *    that AddressSanitizer reports any later use.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mlpe_h2.h"

#define T0 1000000
#define MAX_DECODERS 16
#define HDR MLPE_H2_FRAME_HEADER_SIZE
#define TYPE_DATA 0x0
#define TYPE_HEADERS 0x1
#define TYPE_WINDOW_UPDATE 0x8
#define FLAG_END_STREAM 0x1
#define FLAG_PADDED 0x8

typedef struct h2_config {
    uint32_t max_frame_size, connection_window, stream_window;
    unsigned initial;  /* bit k: stream 2k+1 is registered from the start */
    size_t max_event;  /* of the decoders (0: the default) */
    unsigned heads;    /* 2 bits per stream id class: which head (h2_set_head) */
} h2_config;

static void h2_pick_config(h2_config *cfg, uint64_t bits) {
    static const uint32_t connection_windows[4] = {1, 100, 65535, 2147483647u};
    static const uint32_t stream_windows[4] = {1, 40, 65535, 2147483647u};
    memset(cfg, 0, sizeof *cfg);
    cfg->max_frame_size = (bits & 1) ? MLPE_H2_MAX_MAX_FRAME_SIZE : MLPE_H2_MIN_MAX_FRAME_SIZE;
    cfg->connection_window = connection_windows[(bits >> 1) & 3];
    cfg->stream_window = stream_windows[(bits >> 3) & 3];
    cfg->initial = (unsigned)((bits >> 5) & 15);
    cfg->max_event = ((bits >> 9) & 3) == 0 ? 24 : 0;
    cfg->heads = (unsigned)((bits >> 11) & 0xFF);
}

MLPE_INLINE uint32_t u24(const uint8_t *p) {
    return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

MLPE_INLINE uint32_t u31(const uint8_t *p) {
    return ((uint32_t)p[0] & 0x7F) << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_end_stream(mlpe_buf *b, uint32_t stream_id) {
    uint8_t f[HDR] = {0, 0, 0, TYPE_DATA, FLAG_END_STREAM, 0, 0, 0, 0};
    f[5] = (uint8_t)(stream_id >> 24);
    f[6] = (uint8_t)(stream_id >> 16);
    f[7] = (uint8_t)(stream_id >> 8);
    f[8] = (uint8_t)stream_id;
    fuzz_log_raw(b, f, HDR);
}

static void put_window_update(mlpe_buf *b, uint32_t stream_id, uint32_t increment) {
    uint8_t f[MLPE_H2_WINDOW_UPDATE_SIZE];
    mlpe_h2_window_update(f, stream_id, increment);
    fuzz_log_raw(b, f, sizeof f);
}

/* A decoder for stream_id with its head set: mostly an event stream, else a
 * JSON body, an error status, or a Content-Encoding it cannot decode (which
 * fails the decoder at its head, R2). */
static mlpe_response *h2_new_decoder(const h2_config *cfg, uint32_t stream_id) {
    static const uint8_t sse[] = "text/event-stream", json[] = "application/json",
                         gzip[] = "gzip";
    unsigned kind = (cfg->heads >> (2 * ((stream_id >> 1) & 3))) & 3;
    mlpe_response_limits limits;
    mlpe_response *r = (mlpe_response *)malloc(sizeof *r);
    FUZZ_CHECK(r != NULL);
    memset(&limits, 0, sizeof limits);
    limits.max_event = cfg->max_event;
    limits.max_body = cfg->max_event ? 64 : 0; /* small limits together */
    FUZZ_CHECK(mlpe_response_init(r, &limits) == MLPE_OK);
    if (kind <= 1)
        mlpe_response_set_head(r, 200, sse, sizeof sse - 1, NULL, 0, 0);
    else if (kind == 2)
        mlpe_response_set_head(r, 200, json, sizeof json - 1, NULL, 0, 0);
    else if (stream_id & 8)
        mlpe_response_set_head(r, 500, sse, sizeof sse - 1, NULL, 0, 0);
    else
        mlpe_response_set_head(r, 200, sse, sizeof sse - 1, gzip, sizeof gzip - 1, 0);
    return r;
}

static void h2_free_decoder(mlpe_response *r) {
    mlpe_response_free(r);
    free(r);
}

/* The sink of mlpe_h2_init: the response decoders themselves. */
static unsigned h2_feed_body(void *decoder, const uint8_t *data, size_t len, int64_t t_ns) {
    return mlpe_response_feed_body((mlpe_response *)decoder, data, len, t_ns);
}

static unsigned h2_end_body(void *decoder, int64_t t_ns) {
    return mlpe_response_end_body((mlpe_response *)decoder, t_ns);
}

static const mlpe_h2_sink h2_sink = {h2_feed_body, h2_end_body};

/* What a decoder call means for the events (D6). */
MLPE_INLINE unsigned event_flags(unsigned flags) {
    return (flags & MLPE_RESPONSE_ERROR) ? MLPE_RESPONSE_ERROR
                                         : flags & (MLPE_RESPONSE_FIRST | MLPE_RESPONSE_DONE);
}

/* ---- one run ---------------------------------------------------------------- */

typedef struct h2_stream {
    uint32_t stream_id;
    mlpe_response *r;  /* NULL once freed (the churn run) */
    int registered;
    int released;      /* by END_STREAM (D4) */
    unsigned seen;     /* union of its events' flags */
} h2_stream;

typedef struct h2_run {
    mlpe_h2_deframer d;
    const h2_config *cfg;
    h2_stream streams[MAX_DECODERS];
    size_t n_made;       /* decoders made so far */
    size_t n_registered; /* the model of d.n_streams */
    mlpe_buf pass;       /* every pass-through byte */
    size_t pass_seen;    /* start of the first pass-through frame not looked at */
    mlpe_buf updates;    /* every WINDOW_UPDATE byte */
    mlpe_buf events;     /* (id, flags) per event */
    int churn;
    uint64_t rng;
} h2_run;

static h2_stream *h2_find(h2_run *run, uint32_t stream_id) {
    size_t i;
    for (i = 0; i < run->n_made; i++)
        if (run->streams[i].stream_id == stream_id)
            return &run->streams[i];
    return NULL;
}

/* The owner's rule: a new odd stream (ids are never reused [5.1.1]), up to
 * MAX_DECODERS of them. */
static void h2_register(h2_run *run, uint32_t stream_id) {
    h2_stream *s;
    if (!(stream_id & 1) || h2_find(run, stream_id) != NULL || run->n_made == MAX_DECODERS)
        return;
    s = &run->streams[run->n_made++];
    s->stream_id = stream_id;
    s->r = h2_new_decoder(run->cfg, stream_id);
    s->registered = 1;
    FUZZ_CHECK(mlpe_h2_register(&run->d, stream_id, s->r) == MLPE_OK);
    FUZZ_CHECK(mlpe_h2_register(&run->d, stream_id, s->r) == MLPE_H2_E_DUPLICATE);
    run->n_registered++;
}

/* Checks and collects what one mlpe_h2_feed call produced. */
static void h2_after_feed(h2_run *run, size_t given, size_t used, int had_error) {
    mlpe_h2_deframer *d = &run->d;
    size_t i;
    FUZZ_CHECK(used <= given);
    if (had_error)
        FUZZ_CHECK(used == 0 && d->n_events == 0 && d->passthrough.len == 0);
    FUZZ_CHECK(d->error == 0 || d->error == MLPE_H2_PROTOCOL_ERROR);
    /* D4: releases first, so that DONE can be checked against them. */
    for (i = 0; i < d->n_released; i++) {
        h2_stream *s = h2_find(run, d->released[i]);
        FUZZ_CHECK(s != NULL && s->registered && !s->released);
        s->registered = 0;
        s->released = 1;
        run->n_registered--;
    }
    for (i = 0; i < d->n_events; i++) {
        uint32_t id = d->events[i].stream_id, flags = d->events[i].flags;
        h2_stream *s = h2_find(run, id);
        FUZZ_CHECK(s != NULL && s->r != NULL);
        FUZZ_CHECK(flags == MLPE_RESPONSE_ERROR ||
                   (flags != 0 && (flags & ~(MLPE_RESPONSE_FIRST | MLPE_RESPONSE_DONE)) == 0));
        FUZZ_CHECK(!(s->seen & MLPE_RESPONSE_ERROR) && !(s->seen & flags));
        if (flags & MLPE_RESPONSE_DONE)
            FUZZ_CHECK(s->released);
        if (flags & MLPE_RESPONSE_ERROR)
            FUZZ_CHECK(s->r->error != 0 || s->r->complete);
        s->seen |= flags;
        fuzz_log_u64(&run->events, (uint64_t)id << 32 | flags);
    }
    d->n_events = 0;
    if (run->churn) { /* the de-framer let go of them: free at once */
        for (i = 0; i < d->n_released; i++) {
            h2_stream *s = h2_find(run, d->released[i]);
            h2_free_decoder(s->r);
            s->r = NULL;
        }
    }
    d->n_released = 0;
    FUZZ_CHECK(d->n_streams == run->n_registered);
    /* D3: well-formed WINDOW_UPDATE frames. */
    FUZZ_CHECK(d->window_updates.len % MLPE_H2_WINDOW_UPDATE_SIZE == 0);
    for (i = 0; i < d->window_updates.len; i += MLPE_H2_WINDOW_UPDATE_SIZE) {
        const uint8_t *f = d->window_updates.ptr + i;
        uint32_t increment = (uint32_t)f[9] << 24 | (uint32_t)f[10] << 16 |
                             (uint32_t)f[11] << 8 | f[12];
        FUZZ_CHECK(u24(f) == 4 && f[3] == TYPE_WINDOW_UPDATE && f[4] == 0 && !(f[5] & 0x80));
        FUZZ_CHECK(increment >= 1 && increment <= MLPE_H2_MAX_WINDOW);
        FUZZ_CHECK(u31(f + 5) == 0 || h2_find(run, u31(f + 5)) != NULL);
    }
    fuzz_log_raw(&run->updates, d->window_updates.ptr, d->window_updates.len);
    d->window_updates.len = 0;
    fuzz_log_raw(&run->pass, d->passthrough.ptr, d->passthrough.len);
    d->passthrough.len = 0;
    /* The owner runs h2 over complete frames: HEADERS opens a stream. */
    while (run->pass.len - run->pass_seen >= HDR) {
        const uint8_t *f = run->pass.ptr + run->pass_seen;
        uint32_t length = u24(f);
        if (run->pass.len - run->pass_seen - HDR < length)
            break;
        if (f[3] == TYPE_HEADERS)
            h2_register(run, u31(f + 5));
        run->pass_seen += HDR + length;
    }
    /* D5: a short count only after a whole pass-through frame. */
    if (used < given && !d->error)
        FUZZ_CHECK(run->pass_seen == run->pass.len && used > 0);
}

/* The churn run: sometimes unregister a stream and free its decoder. */
static void h2_churn(h2_run *run) {
    uint64_t x = fuzz_mix(&run->rng);
    h2_stream *s;
    if (run->n_made == 0 || (x & 3) != 0)
        return;
    s = &run->streams[(x >> 8) % run->n_made];
    FUZZ_CHECK(mlpe_h2_unregister(&run->d, s->stream_id) == s->registered);
    if (s->registered) {
        s->registered = 0;
        run->n_registered--;
        h2_free_decoder(s->r);
        s->r = NULL;
    }
    FUZZ_CHECK(run->d.n_streams == run->n_registered);
}

static void log_decoder(mlpe_buf *log, const h2_stream *s) {
    const mlpe_response *r = s->r;
    fuzz_log_tag(log, 'S');
    fuzz_log_u64(log, s->stream_id);
    fuzz_log_u64(log, (uint64_t)s->registered | (uint64_t)s->released << 1 | (uint64_t)s->seen << 2);
    fuzz_log_u64(log, (uint64_t)r->status);
    fuzz_log_u64(log, (uint64_t)r->complete | (uint64_t)r->done_seen << 1);
    fuzz_log_u64(log, (uint64_t)(r->t_first >= 0) | (uint64_t)(r->t_done >= 0) << 1);
    fuzz_log_u64(log, r->events);
    fuzz_log_u64(log, r->content_events);
    fuzz_log_u64(log, r->chunk_errors);
    fuzz_log_u64(log, (uint64_t)r->error);
    fuzz_log_u64(log, r->error_pos);
    fuzz_log_bytes(log, r->content.ptr, r->content.len);
    fuzz_log_bytes(log, r->body.ptr, r->body.len);
}

/* Feeds data in the pieces `split` gives (one piece when NULL), checking
 * every call; logs the outputs unless churning.  The caller frees the run
 * (h2_run_free). */
static void h2_decode(h2_run *run, const uint8_t *data, size_t size, const h2_config *cfg,
                      fuzz_splitter *split, int churn, mlpe_buf *log) {
    size_t pos = 0, i;
    int64_t t = T0;
    memset(run, 0, sizeof *run);
    run->cfg = cfg;
    run->churn = churn;
    run->rng = fuzz_hash(data, size) ^ 0x636875726eull;
    FUZZ_CHECK(mlpe_h2_init(&run->d, h2_sink, MLPE_H2_MAX_MAX_FRAME_SIZE + 1,
                            cfg->connection_window, cfg->stream_window) == MLPE_H2_E_RANGE);
    mlpe_h2_free(&run->d);
    FUZZ_CHECK(mlpe_h2_init(&run->d, h2_sink, cfg->max_frame_size, cfg->connection_window,
                            cfg->stream_window) == MLPE_OK);
    FUZZ_CHECK(mlpe_h2_register(&run->d, 0, NULL) == MLPE_H2_E_STREAM_ID);
    FUZZ_CHECK(mlpe_h2_register(&run->d, MLPE_H2_MAX_STREAM_ID + 1, NULL) == MLPE_H2_E_STREAM_ID);
    FUZZ_CHECK(mlpe_h2_unregister(&run->d, 1) == 0);
    for (i = 0; i < 4; i++)
        if (cfg->initial >> i & 1)
            h2_register(run, (uint32_t)(2 * i + 1));
    while (pos < size && !run->d.error) {
        size_t n = split ? fuzz_split_next(split, size - pos) : size - pos, off = 0;
        uint8_t *piece = fuzz_dup(data + pos, n);
        if (churn)
            h2_churn(run);
        while (off < n) {
            int had_error = run->d.error != 0;
            size_t used = mlpe_h2_feed(&run->d, piece + off, n - off, t);
            h2_after_feed(run, n - off, used, had_error);
            off += used;
            if (run->d.error)
                break;
        }
        free(piece);
        pos += n;
        t++;
    }
    if (run->d.error) { /* terminal: nothing more is used */
        uint64_t at = run->d.error_pos;
        FUZZ_CHECK(at < run->d.offset && run->d.offset <= size);
        FUZZ_CHECK(mlpe_h2_feed(&run->d, (const uint8_t *)"\0\0\0\0\0\0\0\0\0", 9, t) == 0);
        h2_after_feed(run, 9, 0, 1);
        FUZZ_CHECK(run->d.error_pos == at);
    } else {
        FUZZ_CHECK(run->d.offset == size);
    }
    if (log == NULL)
        return;
    fuzz_log_tag(log, 'P');
    fuzz_log_bytes(log, run->pass.ptr, run->pass.len);
    fuzz_log_tag(log, 'W');
    fuzz_log_bytes(log, run->updates.ptr, run->updates.len);
    fuzz_log_tag(log, 'E');
    fuzz_log_bytes(log, run->events.ptr, run->events.len);
    fuzz_log_tag(log, 'X');
    fuzz_log_u64(log, (uint64_t)run->d.error);
    fuzz_log_u64(log, run->d.error_pos);
    fuzz_log_u64(log, run->d.offset);
    for (i = 0; i < run->n_made; i++)
        log_decoder(log, &run->streams[i]);
}

static void h2_run_free(h2_run *run) {
    size_t i;
    mlpe_h2_free(&run->d);
    for (i = 0; i < run->n_made; i++)
        if (run->streams[i].r != NULL)
            h2_free_decoder(run->streams[i].r);
    mlpe_buf_free(&run->pass);
    mlpe_buf_free(&run->updates);
    mlpe_buf_free(&run->events);
}

/* ---- the oracle: the whole input, frame by frame ------------------------------ */

typedef struct oracle_stream {
    uint32_t stream_id;
    int registered, released;
    uint32_t unacked;
    mlpe_buf body;
} oracle_stream;

typedef struct oracle {
    oracle_stream streams[MAX_DECODERS];
    size_t n;
    mlpe_buf pass, updates;
    int error;
    uint64_t error_pos;
} oracle;

static oracle_stream *oracle_find(oracle *o, uint32_t stream_id) {
    size_t i;
    for (i = 0; i < o->n; i++)
        if (o->streams[i].stream_id == stream_id)
            return &o->streams[i];
    return NULL;
}

static void oracle_register(oracle *o, uint32_t stream_id) {
    if (!(stream_id & 1) || oracle_find(o, stream_id) != NULL || o->n == MAX_DECODERS)
        return;
    o->streams[o->n].stream_id = stream_id;
    o->streams[o->n].registered = 1;
    o->n++;
}

static void oracle_run(oracle *o, const uint8_t *data, size_t size, const h2_config *cfg) {
    uint32_t conn_threshold = cfg->connection_window / 2 ? cfg->connection_window / 2 : 1;
    uint32_t stream_threshold = cfg->stream_window / 2 ? cfg->stream_window / 2 : 1;
    uint32_t conn_unacked = 0;
    size_t pos = 0, i;
    memset(o, 0, sizeof *o);
    for (i = 0; i < 4; i++)
        if (cfg->initial >> i & 1)
            oracle_register(o, (uint32_t)(2 * i + 1));
    while (size - pos >= HDR) {
        const uint8_t *h = data + pos;
        uint32_t length = u24(h), id = u31(h + 5);
        uint8_t type = h[3], flags = h[4];
        size_t avail = size - pos - HDR, start = pos + HDR, end = pos + HDR + length;
        oracle_stream *s = NULL;
        if (type == TYPE_DATA && length <= cfg->max_frame_size &&
            !((flags & FLAG_PADDED) && length == 0)) {
            s = oracle_find(o, id);
            if (s != NULL && !s->registered)
                s = NULL;
        }
        if (s == NULL) { /* D5 */
            fuzz_log_raw(&o->pass, h, HDR + (avail < length ? avail : length));
            if (avail < length)
                break;
            if (type == TYPE_HEADERS)
                oracle_register(o, id);
            pos = end;
            continue;
        }
        if (flags & FLAG_PADDED) { /* D2 */
            uint32_t pad;
            if (avail == 0)
                break;
            pad = data[start];
            if (pad >= length) {
                o->error = MLPE_H2_PROTOCOL_ERROR;
                o->error_pos = start;
                break;
            }
            start++;
            end -= pad;
        }
        if (start < size)
            fuzz_log_raw(&s->body, data + start, (end < size ? end : size) - start);
        if (avail < length)
            break;
        conn_unacked += length; /* D3 */
        s->unacked += length;
        if (flags & FLAG_END_STREAM) { /* D4 */
            s->registered = 0;
            s->released = 1;
            put_end_stream(&o->pass, id);
        } else if (s->unacked >= stream_threshold) {
            put_window_update(&o->updates, id, s->unacked);
            s->unacked = 0;
        }
        if (conn_unacked >= conn_threshold) {
            put_window_update(&o->updates, 0, conn_unacked);
            conn_unacked = 0;
        }
        pos += HDR + length;
    }
}

static void oracle_check(oracle *o, const h2_run *run, const h2_config *cfg) {
    size_t i;
    FUZZ_CHECK(o->pass.len == run->pass.len &&
               (o->pass.len == 0 || memcmp(o->pass.ptr, run->pass.ptr, o->pass.len) == 0));
    FUZZ_CHECK(o->updates.len == run->updates.len &&
               (o->updates.len == 0 ||
                memcmp(o->updates.ptr, run->updates.ptr, o->updates.len) == 0));
    FUZZ_CHECK(o->error == run->d.error);
    if (o->error)
        FUZZ_CHECK(o->error_pos == run->d.error_pos);
    FUZZ_CHECK(o->n == run->n_made);
    for (i = 0; i < o->n; i++) {
        const oracle_stream *os = &o->streams[i];
        const h2_stream *s = &run->streams[i];
        mlpe_response *r = h2_new_decoder(cfg, os->stream_id);
        const mlpe_response *got = s->r;
        unsigned seen = 0;
        FUZZ_CHECK(os->stream_id == s->stream_id && os->released == s->released &&
                   os->registered == s->registered);
        /* One piece, as the de-framer never calls with 0 bytes (D2). */
        if (os->body.len)
            seen = event_flags(mlpe_response_feed_body(r, os->body.ptr, os->body.len, 1));
        if (os->released && !(seen & MLPE_RESPONSE_ERROR))
            seen |= event_flags(mlpe_response_end_body(r, 2));
        /* Fed in pieces, a decoder may report FIRST before it fails; in one
         * piece the failure hides it. */
        if (seen & MLPE_RESPONSE_ERROR)
            FUZZ_CHECK((s->seen & (MLPE_RESPONSE_ERROR | MLPE_RESPONSE_DONE)) == MLPE_RESPONSE_ERROR);
        else
            FUZZ_CHECK(seen == s->seen);
        FUZZ_CHECK(r->status == got->status && r->complete == got->complete);
        FUZZ_CHECK(r->done_seen == got->done_seen && r->events == got->events);
        FUZZ_CHECK(r->content_events == got->content_events);
        FUZZ_CHECK(r->chunk_errors == got->chunk_errors);
        FUZZ_CHECK(r->error == got->error && r->error_pos == got->error_pos);
        FUZZ_CHECK(r->content.len == got->content.len &&
                   (r->content.len == 0 ||
                    memcmp(r->content.ptr, got->content.ptr, r->content.len) == 0));
        h2_free_decoder(r);
    }
}

static void oracle_free(oracle *o) {
    size_t i;
    for (i = 0; i < o->n; i++)
        mlpe_buf_free(&o->streams[i].body);
    mlpe_buf_free(&o->pass);
    mlpe_buf_free(&o->updates);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t h = fuzz_hash(data, size);
    h2_config cfg;
    h2_run run;
    fuzz_splitter split;
    mlpe_buf whole, pieces;
    oracle o;

    h2_pick_config(&cfg, h >> 8);
    mlpe_buf_init(&whole);
    mlpe_buf_init(&pieces);

    h2_decode(&run, data, size, &cfg, NULL, 0, &whole);
    oracle_run(&o, data, size, &cfg);
    oracle_check(&o, &run, &cfg);
    oracle_free(&o);
    h2_run_free(&run);

    fuzz_split_init(&split, (uint8_t)h, size);
    h2_decode(&run, data, size, &cfg, &split, 0, &pieces);
    h2_run_free(&run);
    fuzz_logs_equal(&whole, &pieces, "h2 whole vs split");
    if (size <= 4096) {
        pieces.len = 0;
        fuzz_split_init(&split, 0, size);
        h2_decode(&run, data, size, &cfg, &split, 0, &pieces);
        h2_run_free(&run);
        fuzz_logs_equal(&whole, &pieces, "h2 whole vs byte-at-a-time");
    }

    fuzz_split_init(&split, (uint8_t)(h >> 56), size);
    h2_decode(&run, data, size, &cfg, &split, 1, NULL);
    h2_run_free(&run);

    mlpe_buf_free(&whole);
    mlpe_buf_free(&pieces);
    return 0;
}
