/*
 * fuzz_h1.c -- libFuzzer entry point for the HTTP/1.1 response framing
 * (mlpe_h1.h).  The input is the byte stream a client reads from one
 * connection; see fuzz_common.h for the plan shared by all drivers.
 *
 * Checked on every call (rule numbers are those of mlpe_h1.h):
 *  - each piece is fed until NEED_MORE (a result may be due after its last
 *    byte); consumed <= len; NEED_MORE uses all of it, ERROR none;
 *    parser.offset is the sum of what was consumed; no endless run of calls
 *    that use nothing; a length-0 call may pass NULL;
 *  - a head reports a final status (never 1xx, rule 2), HTTP/1.0 or 1.1,
 *    lower-case token names and trimmed values without CR/LF/NUL (rule 4),
 *    field offsets inside the field storage, at most max_headers fields;
 *  - a body span lies inside the bytes used by the call that returned it;
 *    204/304 have no body; a Content-Length body is exactly that long
 *    (rule 5); a close-delimited body ends only at EOF and never keeps the
 *    connection (rule 7); trailers only with chunked coding;
 *  - after a message that does not keep the connection, the next byte is
 *    MLPE_E_UNEXPECTED_DATA at that byte's offset (rule 8);
 *  - errors are terminal: later feed and feed_eof calls report the same code
 *    and position, and the position lies inside what was fed (rule 9);
 *    after feed_eof, any byte is MLPE_E_UNEXPECTED_DATA (rule 8);
 *  - small limits only cut a stream short: under the default limits the
 *    same results come first (and are all there is when no limit fired);
 *  - whole, split and byte-at-a-time decoding log the same results (rule 1).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mlpe_h1.h"

typedef struct h1_config {
    mlpe_h1_limits limits; /* as passed to mlpe_h1_init (0 = default) */
    size_t max_headers;    /* effective */
    int eof;               /* end the stream with mlpe_h1_feed_eof */
} h1_config;

typedef struct h1_run {
    const h1_config *cfg;
    mlpe_h1_parser p;
    mlpe_buf *log;
    mlpe_buf body;      /* body bytes of the current message not logged yet */
    int in_message;     /* a head was reported, its DONE not yet */
    int status;
    int chunked;
    int64_t content_length;
    uint64_t body_total;
    int keep_alive;     /* as the head said: it does not change at DONE */
    int closing;        /* the last DONE did not keep the connection */
    uint64_t fed;       /* bytes handed to the parser */
    uint64_t consumed;  /* bytes the parser said it used */
    int failed;
    size_t mark;        /* log length before the records of the error */
} h1_run;

/* What a decode ended with, for comparing runs under different limits. */
typedef struct h1_outcome {
    int error;   /* MLPE_OK or the terminal code */
    size_t mark; /* log length before the error's records */
} h1_outcome;

static void h1_pick_config(h1_config *cfg, uint64_t bits) {
    static const size_t lines[4] = {16, 40, 128, 1024};
    static const size_t heads[4] = {64, 200, 1024, 0};
    static const size_t counts[4] = {1, 3, 8, 0};
    static const size_t digits[4] = {1, 2, 4, 0};
    memset(cfg, 0, sizeof *cfg);
    if (bits & 1) { /* small limits half of the time, defaults otherwise */
        cfg->limits.max_line = lines[(bits >> 1) & 3];
        cfg->limits.max_head = heads[(bits >> 3) & 3];
        cfg->limits.max_headers = counts[(bits >> 5) & 3];
        cfg->limits.max_chunk_size_digits = digits[(bits >> 7) & 3];
    }
    cfg->max_headers = cfg->limits.max_headers ? cfg->limits.max_headers
                                               : MLPE_H1_DEFAULT_MAX_HEADERS;
    cfg->eof = (int)((bits >> 9) & 1);
}

static int is_tchar_lower(uint8_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
        return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Checks and logs field lines (rule 4). */
static void h1_fields(h1_run *r, const mlpe_h1_field *f, size_t n) {
    const mlpe_buf *store = &r->p.fields;
    size_t i, k;
    FUZZ_CHECK(n == 0 || f != NULL);
    fuzz_log_u64(r->log, n);
    for (i = 0; i < n; i++) {
        const uint8_t *name, *value;
        FUZZ_CHECK(f[i].name_len > 0);
        FUZZ_CHECK((size_t)f[i].name_off + f[i].name_len <= store->len);
        FUZZ_CHECK((size_t)f[i].value_off + f[i].value_len <= store->len);
        name = store->ptr + f[i].name_off;
        value = f[i].value_len ? store->ptr + f[i].value_off : NULL;
        for (k = 0; k < f[i].name_len; k++)
            FUZZ_CHECK(is_tchar_lower(name[k]));
        for (k = 0; k < f[i].value_len; k++)
            FUZZ_CHECK(value[k] != '\r' && value[k] != '\n' && value[k] != '\0');
        if (f[i].value_len) {
            FUZZ_CHECK(value[0] != ' ' && value[0] != '\t');
            FUZZ_CHECK(value[f[i].value_len - 1] != ' ' && value[f[i].value_len - 1] != '\t');
        }
        fuzz_log_bytes(r->log, name, f[i].name_len);
        fuzz_log_bytes(r->log, value, f[i].value_len);
    }
}

static void h1_flush_body(h1_run *r) {
    if (r->body.len) {
        fuzz_log_tag(r->log, 'B');
        fuzz_log_bytes(r->log, r->body.ptr, r->body.len);
        r->body.len = 0;
    }
}

static int bodyless(int status) {
    return status == 204 || status == 304;
}

static void h1_on_head(h1_run *r) {
    const mlpe_h1_parser *p = &r->p;
    size_t k;
    FUZZ_CHECK(!r->in_message);
    FUZZ_CHECK(p->status >= 0 && p->status <= 999);
    FUZZ_CHECK(p->status < 100 || p->status > 199);
    FUZZ_CHECK(p->version_minor == 0 || p->version_minor == 1);
    FUZZ_CHECK(p->chunked == 0 || p->chunked == 1);
    FUZZ_CHECK(p->keep_alive == 0 || p->keep_alive == 1);
    FUZZ_CHECK(p->content_length >= -1);
    FUZZ_CHECK(p->n_headers <= r->cfg->max_headers);
    FUZZ_CHECK(p->reason.len == 0 || p->reason.ptr != NULL);
    for (k = 0; k < p->reason.len; k++)
        FUZZ_CHECK(p->reason.ptr[k] != '\r' && p->reason.ptr[k] != '\n');
    if (!bodyless(p->status) && !p->chunked && p->content_length < 0)
        FUZZ_CHECK(!p->keep_alive); /* close-delimited (rule 7) */
    if (p->chunked && p->version_minor == 0)
        FUZZ_CHECK(!p->keep_alive);
    if (bodyless(p->status))
        FUZZ_CHECK(p->content_length == -1);
    r->in_message = 1;
    r->keep_alive = p->keep_alive;
    r->status = p->status;
    r->chunked = p->chunked;
    r->content_length = p->content_length;
    r->body_total = 0;
    fuzz_log_tag(r->log, 'H');
    fuzz_log_u64(r->log, (uint64_t)p->status);
    fuzz_log_u64(r->log, (uint64_t)p->version_minor);
    fuzz_log_u64(r->log, (uint64_t)p->keep_alive);
    fuzz_log_u64(r->log, (uint64_t)p->chunked);
    fuzz_log_u64(r->log, (uint64_t)p->content_length);
    fuzz_log_span(r->log, p->reason);
    h1_fields(r, p->headers, p->n_headers);
}

static void h1_on_body(h1_run *r, mlpe_span body, const uint8_t *from, size_t used) {
    FUZZ_CHECK(r->in_message);
    FUZZ_CHECK(!bodyless(r->status));
    FUZZ_CHECK(body.len > 0 && body.ptr != NULL);
    FUZZ_CHECK(body.ptr >= from && body.len <= used && body.ptr - from <= (ptrdiff_t)(used - body.len));
    r->body_total += body.len;
    if (!r->chunked && r->content_length >= 0)
        FUZZ_CHECK(r->body_total <= (uint64_t)r->content_length);
    fuzz_log_raw(&r->body, body.ptr, body.len);
}

static void h1_on_done(h1_run *r, int from_eof) {
    const mlpe_h1_parser *p = &r->p;
    int close_delimited;
    FUZZ_CHECK(r->in_message);
    FUZZ_CHECK(p->keep_alive == r->keep_alive);
    close_delimited = !bodyless(r->status) && !r->chunked && r->content_length < 0;
    if (!bodyless(r->status) && !r->chunked && r->content_length >= 0)
        FUZZ_CHECK(r->body_total == (uint64_t)r->content_length);
    if (close_delimited)
        FUZZ_CHECK(from_eof && !p->keep_alive);
    else
        FUZZ_CHECK(!from_eof);
    if (!r->chunked)
        FUZZ_CHECK(p->n_trailers == 0);
    h1_flush_body(r);
    fuzz_log_tag(r->log, 'D');
    fuzz_log_u64(r->log, (uint64_t)p->keep_alive);
    h1_fields(r, p->trailers, p->n_trailers);
    r->in_message = 0;
    r->closing = !p->keep_alive;
}

/* Logs an error and checks that it is terminal (rule 9). */
static void h1_on_error(h1_run *r, int from_eof) {
    mlpe_h1_parser *p = &r->p;
    int err = p->error;
    uint64_t pos = p->error_pos;
    size_t used = (size_t)-1;
    mlpe_span body = {NULL, 0};
    static const uint8_t more[3] = {'\r', '\n', 'x'};

    FUZZ_CHECK((err >= MLPE_E_STATUS_LINE && err <= MLPE_E_UPGRADE) || err == MLPE_E_NOMEM);
    if (err == MLPE_E_INCOMPLETE)
        FUZZ_CHECK(from_eof && pos == r->consumed);
    else
        FUZZ_CHECK(!from_eof && pos < r->fed);
    if (!from_eof)
        r->mark = r->log->len; /* body bytes before a limit error may be cut */
    h1_flush_body(r);
    fuzz_log_tag(r->log, 'E');
    fuzz_log_u64(r->log, (uint64_t)err);
    fuzz_log_u64(r->log, pos);

    FUZZ_CHECK(mlpe_h1_feed(p, more, sizeof more, &used, &body) == MLPE_H1_ERROR);
    FUZZ_CHECK(used == 0);
    FUZZ_CHECK(p->error == err && p->error_pos == pos);
    FUZZ_CHECK(mlpe_h1_feed_eof(p) == MLPE_H1_ERROR);
    FUZZ_CHECK(p->error == err && p->error_pos == pos);
    r->failed = 1;
}

/* Feeds one piece (a heap block of exactly n bytes), calling until
 * NEED_MORE: a result may be due after the last byte is used.  The calls
 * after the piece is used up pass NULL, as the header allows. */
static void h1_feed_piece(h1_run *r, const uint8_t *piece, size_t n) {
    size_t off = 0;
    int idle = 0;
    r->fed += n;
    while (!r->failed) {
        size_t used = (size_t)-1;
        mlpe_span body = {(const uint8_t *)"", 1};
        int was_closing = r->closing;
        const uint8_t *at = off < n ? piece + off : NULL;
        mlpe_h1_result res = mlpe_h1_feed(&r->p, at, n - off, &used, &body);

        if (res == MLPE_H1_ERROR) {
            FUZZ_CHECK(used == 0);
            FUZZ_CHECK(r->p.offset == r->consumed);
            if (was_closing)
                FUZZ_CHECK(r->p.error == MLPE_E_UNEXPECTED_DATA && r->p.error_pos == r->consumed);
            h1_on_error(r, 0);
            return;
        }
        FUZZ_CHECK(used <= n - off);
        FUZZ_CHECK(!was_closing || used == 0);
        r->consumed += used;
        FUZZ_CHECK(r->p.offset == r->consumed);
        FUZZ_CHECK(r->p.error == MLPE_OK);
        if (res != MLPE_H1_BODY)
            FUZZ_CHECK(body.len == 0);
        switch (res) {
        case MLPE_H1_NEED_MORE:
            FUZZ_CHECK(used == n - off);
            return;
        case MLPE_H1_HEAD:
            h1_on_head(r);
            break;
        case MLPE_H1_BODY:
            h1_on_body(r, body, at, used);
            break;
        case MLPE_H1_DONE:
            h1_on_done(r, 0);
            break;
        default:
            fuzz_fail("mlpe_h1_feed returned a known result", __FILE__, __LINE__);
        }
        /* A call may report a result without using bytes (a message with
         * no body ends right after its head), but not forever. */
        idle = used ? 0 : idle + 1;
        FUZZ_CHECK(idle <= 2);
        off += used;
    }
}

static void h1_eof(h1_run *r) {
    mlpe_h1_result res;
    if (r->failed)
        return;
    res = mlpe_h1_feed_eof(&r->p);
    r->mark = r->log->len;
    fuzz_log_tag(r->log, 'F');
    fuzz_log_u64(r->log, (uint64_t)res);
    FUZZ_CHECK(r->p.offset == r->consumed);
    switch (res) {
    case MLPE_H1_NEED_MORE:
        FUZZ_CHECK(!r->in_message);
        break;
    case MLPE_H1_DONE:
        h1_on_done(r, 1);
        break;
    case MLPE_H1_ERROR:
        h1_on_error(r, 1);
        return;
    default:
        fuzz_fail("mlpe_h1_feed_eof returned NEED_MORE, DONE or ERROR", __FILE__, __LINE__);
    }
    /* Nothing can follow the end of the connection (rule 8).  Not logged:
     * the run ends here. */
    {
        static const uint8_t late[1] = {'H'};
        size_t used = (size_t)-1;
        mlpe_span body = {NULL, 0};
        FUZZ_CHECK(mlpe_h1_feed(&r->p, late, 1, &used, &body) == MLPE_H1_ERROR);
        FUZZ_CHECK(used == 0);
        FUZZ_CHECK(r->p.error == MLPE_E_UNEXPECTED_DATA && r->p.error_pos == r->consumed);
    }
}

/* Decodes data in the pieces `split` gives (one piece when split is NULL)
 * and writes the results to log. */
static h1_outcome h1_decode(const uint8_t *data, size_t size, const h1_config *cfg,
                            fuzz_splitter *split, mlpe_buf *log) {
    h1_run r;
    h1_outcome out;
    size_t pos = 0;
    memset(&r, 0, sizeof r);
    r.cfg = cfg;
    r.log = log;
    mlpe_buf_init(&r.body);
    FUZZ_CHECK(mlpe_h1_init(&r.p, &cfg->limits) == MLPE_OK);
    FUZZ_CHECK(r.p.offset == 0 && r.p.error == MLPE_OK);
    while (pos < size && !r.failed) {
        size_t n = split ? fuzz_split_next(split, size - pos) : size - pos;
        uint8_t *piece = fuzz_dup(data + pos, n);
        h1_feed_piece(&r, piece, n);
        free(piece);
        pos += n;
    }
    if (cfg->eof)
        h1_eof(&r);
    if (!r.failed) {
        h1_flush_body(&r);
        fuzz_log_tag(log, 'Z');
        fuzz_log_u64(log, (uint64_t)r.in_message);
    }
    out.error = r.failed ? r.p.error : MLPE_OK;
    out.mark = r.failed ? r.mark : log->len;
    mlpe_h1_free(&r.p);
    mlpe_buf_free(&r.body);
    return out;
}

static int is_limit_error(int err) {
    return err == MLPE_E_LINE_TOO_LONG || err == MLPE_E_HEAD_TOO_LARGE ||
           err == MLPE_E_TOO_MANY_HEADERS || err == MLPE_E_CHUNK_SIZE_TOO_LONG;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t h = fuzz_hash(data, size);
    h1_config cfg;
    fuzz_splitter split;
    mlpe_buf whole, pieces;
    h1_outcome outcome;

    h1_pick_config(&cfg, h >> 8);
    mlpe_buf_init(&whole);
    mlpe_buf_init(&pieces);

    outcome = h1_decode(data, size, &cfg, NULL, &whole);
    fuzz_split_init(&split, (uint8_t)h, size);
    h1_decode(data, size, &cfg, &split, &pieces);
    fuzz_logs_equal(&whole, &pieces, "h1 whole vs split");
    if (size <= 2048) {
        pieces.len = 0;
        fuzz_split_init(&split, 0, size); /* one byte at a time */
        h1_decode(data, size, &cfg, &split, &pieces);
        fuzz_logs_equal(&whole, &pieces, "h1 whole vs byte-at-a-time");
    }
    if (memcmp(&cfg.limits, &(mlpe_h1_limits){0, 0, 0, 0}, sizeof cfg.limits) != 0) {
        /* Limits only cut a stream short: under the default limits the same
         * results come first, and they are all there is when the small
         * limits were not what stopped the run. */
        h1_config loose = cfg;
        memset(&loose.limits, 0, sizeof loose.limits);
        loose.max_headers = MLPE_H1_DEFAULT_MAX_HEADERS;
        pieces.len = 0;
        h1_decode(data, size, &loose, NULL, &pieces);
        if (is_limit_error(outcome.error)) {
            FUZZ_CHECK(outcome.mark <= pieces.len);
            FUZZ_CHECK(outcome.mark == 0 || memcmp(whole.ptr, pieces.ptr, outcome.mark) == 0);
        } else {
            fuzz_logs_equal(&whole, &pieces, "h1 small vs default limits");
        }
    }
    mlpe_buf_free(&whole);
    mlpe_buf_free(&pieces);
    return 0;
}
