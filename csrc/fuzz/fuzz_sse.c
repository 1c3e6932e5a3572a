/*
 * fuzz_sse.c -- libFuzzer entry point for the SSE decoder (mlpe_sse.h).  The
 * input is an event stream; see fuzz_common.h for the plan shared by all
 * drivers.
 *
 * Checked on every call (rule numbers are those of mlpe_sse.h):
 *  - consumed <= len; NEED_MORE uses all of it, ERROR none; an event uses
 *    at least the line end that dispatched it; decoder.offset is the sum of
 *    what was consumed; retry stays -1 or non-negative;
 *  - an event's data has no CR (every CR ends a line, rule 1) and is at most
 *    max_event bytes; its type has no CR/LF; its id has no CR/LF/NUL
 *    (rule 6);
 *  - the only error is MLPE_E_EVENT_TOO_LARGE (or NOMEM), at a position
 *    inside what was fed, impossible when max_event is not below the stream
 *    length, and terminal: a later call reports the same code and position;
 *  - whole, split and byte-at-a-time decoding log the same events, retry,
 *    last event ID and pending state (rule 1, including a CR/LF pair or a BOM cut by a piece
 *    boundary);
 *  - a small max_event only cuts the stream short: under the default limit
 *    the same events come first.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mlpe_sse.h"

typedef struct sse_run {
    mlpe_sse_decoder d;
    size_t max_event; /* effective */
    mlpe_buf *log;
    uint64_t fed;
    uint64_t consumed;
    int failed;
    size_t mark;      /* log length before the error record */
} sse_run;

static size_t sse_pick_max_event(uint64_t bits) {
    static const size_t small[4] = {1, 8, 64, 300};
    return (bits & 1) ? small[(bits >> 1) & 3] : 0;
}

static void check_no(mlpe_span s, const char *bytes, size_t n_bytes) {
    size_t i, k;
    FUZZ_CHECK(s.ptr != NULL); /* never NULL, even when empty */
    for (i = 0; i < s.len; i++)
        for (k = 0; k < n_bytes; k++)
            FUZZ_CHECK(s.ptr[i] != (uint8_t)bytes[k]);
}

static void sse_on_event(sse_run *r, const mlpe_sse_event *ev) {
    check_no(ev->data, "\r", 1);
    check_no(ev->type, "\r\n", 2);
    check_no(ev->id, "\r\n\0", 3);
    FUZZ_CHECK(ev->data.len <= r->max_event);
    FUZZ_CHECK(ev->type.len <= r->max_event);
    FUZZ_CHECK(ev->id.len <= r->max_event);
    FUZZ_CHECK(r->d.retry >= -1);
    fuzz_log_tag(r->log, 'V');
    fuzz_log_span(r->log, ev->data);
    fuzz_log_span(r->log, ev->type);
    fuzz_log_span(r->log, ev->id);
    fuzz_log_u64(r->log, (uint64_t)r->d.retry);
}

static void sse_on_error(sse_run *r) {
    mlpe_sse_decoder *d = &r->d;
    int err = d->error;
    uint64_t pos = d->error_pos;
    size_t used = (size_t)-1;
    mlpe_sse_event ev;
    static const uint8_t more[3] = {'\n', '\n', 'x'};

    FUZZ_CHECK(err == MLPE_E_EVENT_TOO_LARGE || err == MLPE_E_NOMEM);
    FUZZ_CHECK(pos < r->fed);
    r->mark = r->log->len;
    fuzz_log_tag(r->log, 'E');
    fuzz_log_u64(r->log, (uint64_t)err);
    fuzz_log_u64(r->log, pos);
    memset(&ev, 0, sizeof ev);
    FUZZ_CHECK(mlpe_sse_feed(d, more, sizeof more, &used, &ev) == MLPE_SSE_ERROR);
    FUZZ_CHECK(used == 0);
    FUZZ_CHECK(d->error == err && d->error_pos == pos);
    r->failed = 1;
}

static void sse_feed_piece(sse_run *r, const uint8_t *piece, size_t n) {
    size_t off = 0;
    r->fed += n;
    while (off < n && !r->failed) {
        size_t used = (size_t)-1;
        mlpe_sse_event ev;
        mlpe_sse_result res;
        memset(&ev, 0, sizeof ev);
        res = mlpe_sse_feed(&r->d, piece + off, n - off, &used, &ev);
        if (res == MLPE_SSE_ERROR) {
            FUZZ_CHECK(used == 0 && r->d.offset == r->consumed);
            sse_on_error(r);
            return;
        }
        FUZZ_CHECK(used <= n - off);
        r->consumed += used;
        FUZZ_CHECK(r->d.error == MLPE_OK);
        FUZZ_CHECK(r->d.offset == r->consumed);
        if (res == MLPE_SSE_NEED_MORE) {
            FUZZ_CHECK(used == n - off);
        } else {
            FUZZ_CHECK(res == MLPE_SSE_EVENT);
            FUZZ_CHECK(used > 0);
            sse_on_event(r, &ev);
        }
        off += used;
    }
}

/* Decodes data in the pieces `split` gives (one piece when split is NULL);
 * returns the terminal error or MLPE_OK, and the log length before it. */
static int sse_decode(const uint8_t *data, size_t size, size_t max_event, fuzz_splitter *split,
                      mlpe_buf *log, size_t *mark) {
    sse_run r;
    size_t pos = 0;
    int err;
    memset(&r, 0, sizeof r);
    r.log = log;
    r.max_event = max_event ? max_event : MLPE_SSE_DEFAULT_MAX_EVENT;
    FUZZ_CHECK(mlpe_sse_init(&r.d, max_event) == MLPE_OK);
    FUZZ_CHECK(r.d.offset == 0 && r.d.error == MLPE_OK && r.d.retry == -1);
    FUZZ_CHECK(!mlpe_sse_pending(&r.d));
    while (pos < size && !r.failed) {
        size_t n = split ? fuzz_split_next(split, size - pos) : size - pos;
        uint8_t *piece = fuzz_dup(data + pos, n);
        sse_feed_piece(&r, piece, n);
        free(piece);
        pos += n;
    }
    if (!r.failed) {
        r.mark = log->len;
        fuzz_log_tag(log, 'Z');
        fuzz_log_u64(log, (uint64_t)(mlpe_sse_pending(&r.d) != 0));
        fuzz_log_u64(log, (uint64_t)r.d.retry);
        {
            mlpe_span last = mlpe_sse_last_event_id(&r.d);
            check_no(last, "\r\n\0", 3);
            fuzz_log_span(log, last);
        }
    }
    /* Any byte sequence is a valid stream: only the size limit can fail. */
    if (r.failed && r.d.error == MLPE_E_EVENT_TOO_LARGE)
        FUZZ_CHECK(r.max_event < size);
    err = r.failed ? r.d.error : MLPE_OK;
    *mark = r.mark;
    mlpe_sse_free(&r.d);
    return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t h = fuzz_hash(data, size);
    size_t max_event = sse_pick_max_event(h >> 8);
    fuzz_splitter split;
    mlpe_buf whole, pieces;
    size_t mark, ignored;
    int err;

    mlpe_buf_init(&whole);
    mlpe_buf_init(&pieces);
    err = sse_decode(data, size, max_event, NULL, &whole, &mark);
    fuzz_split_init(&split, (uint8_t)h, size);
    sse_decode(data, size, max_event, &split, &pieces, &ignored);
    fuzz_logs_equal(&whole, &pieces, "sse whole vs split");
    if (size <= 2048) {
        pieces.len = 0;
        fuzz_split_init(&split, 0, size); /* one byte at a time */
        sse_decode(data, size, max_event, &split, &pieces, &ignored);
        fuzz_logs_equal(&whole, &pieces, "sse whole vs byte-at-a-time");
    }
    if (max_event) {
        pieces.len = 0;
        sse_decode(data, size, 0, NULL, &pieces, &ignored);
        if (err == MLPE_OK) {
            fuzz_logs_equal(&whole, &pieces, "sse small vs default max_event");
        } else {
            FUZZ_CHECK(mark <= pieces.len);
            FUZZ_CHECK(mark == 0 || memcmp(whole.ptr, pieces.ptr, mark) == 0);
        }
    }
    mlpe_buf_free(&whole);
    mlpe_buf_free(&pieces);
    return 0;
}
