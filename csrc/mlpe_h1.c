/*
 * mlpe_h1.c -- incremental HTTP/1.1 response framing (RFC 9112), sans-IO.
 *
 * The contract (rules 1-10, limits, error positions) is in mlpe_h1.h; this
 * file cites those rules as "rule N".
 *
 * How it works
 * ------------
 * The parser is a state machine over four kinds of input:
 *
 *   lines          status line, field lines (header and trailer sections),
 *                  chunk-size lines;
 *   counted bytes  a Content-Length body, the data of one chunk;
 *   the line end   after chunk data, read byte by byte (CR, then LF);
 *   the rest       a body delimited by the connection close.
 *
 * Lines are found with memchr.  A line that is complete inside the caller's
 * buffer is parsed where it lies; only a line cut by the end of a piece is
 * copied into p->line (never more than max_line + 1 bytes, because the
 * budgets are checked before anything is copied).  Body bytes are never
 * copied: they are handed out as spans of the caller's buffer.
 *
 * A streamed response is mostly chunk boundaries, one call each, so that
 * path is kept short: the CRLF after chunk data is taken with the data, and
 * mlpe_h1_feed itself reads a plain chunk-size line ("a0\r\n": digits and a
 * line end, all in this piece) and returns the chunk's data span without
 * entering the state machine.  Anything unusual (extensions, long or
 * invalid sizes, a line cut by the end of the piece) falls back to the
 * general line parser, which accepts those plain lines identically.
 *
 * Positions: `base` is p->offset when a call began, so data[i] is at
 * base + i; the bytes of a line are at p->line_start + index wherever they
 * were read from.  That is what makes error positions independent of how the
 * input was split (rule 1).
 *
 * Framing fields (Content-Length, Transfer-Encoding, Connection) are
 * interpreted when their field is complete, that is when the next line shows
 * it is not continued by an obs-fold line; problems are only recorded then,
 * and reported once the head is complete, because a later field can make
 * them irrelevant (a Transfer-Encoding overrides Content-Length, rule 5).
 */
#include "mlpe_h1.h"

enum h1_state {
    ST_STATUS_LINE,  /* expecting (more of) a status line */
    ST_FIELD_LINE,   /* in the header section */
    ST_BODY_LENGTH,  /* in a Content-Length body; p->remaining bytes to come */
    ST_BODY_CLOSE,   /* in a body that ends when the connection closes */
    ST_CHUNK_SIZE,   /* expecting a chunk-size line */
    ST_CHUNK_DATA,   /* in chunk data; p->remaining bytes to come */
    ST_CHUNK_END,    /* expecting the CR or LF that ends chunk data */
    ST_CHUNK_END_LF, /* expecting the LF after that CR */
    ST_TRAILER_LINE, /* in the trailer section */
    ST_COMPLETE,     /* the message is complete; MLPE_H1_DONE is still due */
    ST_CLOSED,       /* the connection must close: no byte may follow */
    ST_ERROR         /* terminal (rule 9) */
};

#define NO_POS UINT64_MAX
#define INT64_LIMIT ((uint64_t)INT64_MAX) /* sizes must stay below 2^63 */

/* Value of a hex digit, -1 for any other byte. */
static const int8_t hex_value[256] = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
     0,  1,  2,  3,  4,  5,  6,  7,  8,  9, -1, -1, -1, -1, -1, -1,
    -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

/* tchar of RFC 9110 section 5.6.2: the bytes a field name may hold. */
static const uint8_t is_tchar[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0, /*  !"#$%&'()*+,-./ */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, /* 0-9 :;<=>? */
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* @A-O */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, /* P-Z [\]^_ */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* `a-o */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0, /* p-z {|}~ DEL */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* The chunk-size fast path takes at most this many digits: 15 hex digits
 * stay below 2^60, so it needs no overflow check. */
#define FAST_CHUNK_DIGITS 15

#if defined(__GNUC__) || defined(__clang__)
#define H1_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define H1_NOINLINE __declspec(noinline)
#else
#define H1_NOINLINE
#endif

MLPE_INLINE int is_ows(uint8_t c) { return c == ' ' || c == '\t'; }
MLPE_INLINE int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* HTAB, SP, VCHAR and obs-text: what a reason phrase (RFC 9112 section 4)
 * and, in mlpe-fast's lenient reading, a chunk extension may hold. */
MLPE_INLINE int is_text(uint8_t c) { return c == '\t' || (c >= ' ' && c != 0x7f); }

MLPE_INLINE size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static mlpe_h1_result fail(mlpe_h1_parser *p, int code, uint64_t pos) {
    p->error = code;
    p->error_pos = pos;
    p->state = ST_ERROR;
    return MLPE_H1_ERROR;
}

/* Case-insensitive comparison with a lower-case ASCII literal. */
static int equals_lower(const uint8_t *s, size_t n, const char *lit, size_t lit_len) {
    size_t i;
    if (n != lit_len)
        return 0;
    for (i = 0; i < n; i++)
        if (mlpe_lower(s[i]) != (uint8_t)lit[i])
            return 0;
    return 1;
}

/* ---------------------------------------------------------------------------
 * Lines (rules 3 and 10)
 */

enum { LINE_FAILED = -1, LINE_PARTIAL = 0, LINE_COMPLETE = 1 };

/* Gathers the line that starts (or continues, when p->line holds its first
 * bytes) at data[*pos], with *pos < len.  Checks max_line, and max_head when
 * in_head, on the bytes that have arrived.  Returns LINE_COMPLETE with the
 * line content (terminator excluded) in *line and *line_len, and *pos past
 * its LF; LINE_PARTIAL with every byte taken into p->line; or LINE_FAILED. */
static int gather_line(mlpe_h1_parser *p, const uint8_t *data, size_t len, size_t *pos,
                       uint64_t base, int in_head, const uint8_t **line, size_t *line_len) {
    const uint8_t *start = data + *pos;
    size_t avail = len - *pos;
    const uint8_t *lf = (const uint8_t *)memchr(start, '\n', avail);
    size_t seg = lf ? (size_t)(lf - start) : avail; /* this piece's bytes before the LF */
    size_t before_lf = p->line.len + seg;
    size_t taken = before_lf + (lf != NULL); /* the line's bytes consumed so far */
    size_t content;
    int ends_cr;
    uint64_t over_line = NO_POS, over_head = NO_POS;

    if (p->line.len == 0)
        p->line_start = base + *pos;
    if (seg > 0)
        ends_cr = start[seg - 1] == '\r';
    else
        ends_cr = p->line.len > 0 && p->line.ptr[p->line.len - 1] == '\r';
    /* A final CR is the terminator's if the LF is here, and undecided if not:
     * either way it does not count yet. */
    content = before_lf - (size_t)ends_cr;

    if (content > p->limits.max_line)
        over_line = p->line_start + p->limits.max_line;
    if (in_head && (p->line_start - p->head_start) + taken > p->limits.max_head)
        over_head = p->head_start + p->limits.max_head;
    if (MLPE_UNLIKELY(over_head != NO_POS || over_line != NO_POS)) {
        if (over_head <= over_line)
            fail(p, MLPE_E_HEAD_TOO_LARGE, over_head);
        else
            fail(p, MLPE_E_LINE_TOO_LONG, over_line);
        return LINE_FAILED;
    }

    if (lf == NULL) {
        if (mlpe_buf_append(&p->line, start, avail) != MLPE_OK) {
            fail(p, MLPE_E_NOMEM, base + *pos);
            return LINE_FAILED;
        }
        *pos = len;
        return LINE_PARTIAL;
    }
    if (p->line.len == 0) {
        *line = start;
    } else {
        if (mlpe_buf_append(&p->line, start, seg) != MLPE_OK) {
            fail(p, MLPE_E_NOMEM, base + *pos);
            return LINE_FAILED;
        }
        *line = p->line.ptr;
        p->line.len = 0; /* the bytes stay put until the next append */
    }
    *line_len = content;
    *pos += seg + 1;
    return LINE_COMPLETE;
}

/* ---------------------------------------------------------------------------
 * Field storage
 */

static int store_bytes(mlpe_h1_parser *p, const uint8_t *s, size_t n) {
    if (mlpe_buf_append(&p->fields, s, n) != MLPE_OK)
        return MLPE_E_NOMEM;
    if (p->fields.ptr != NULL) /* the buffer may have moved */
        p->reason.ptr = p->fields.ptr + p->reason_off;
    return MLPE_OK;
}

/* Appends a field (name lower-cased) to the header or trailer array. */
static int store_field(mlpe_h1_parser *p, int trailer, const uint8_t *name, size_t name_len,
                       const uint8_t *value, size_t value_len) {
    mlpe_h1_field **fields = trailer ? &p->trailers : &p->headers;
    size_t *count = trailer ? &p->n_trailers : &p->n_headers;
    size_t *cap = trailer ? &p->cap_trailers : &p->cap_headers;
    mlpe_h1_field *f;
    size_t i;

    if (*count == *cap) {
        /* Grows 16, 32, ... up to max_headers; the caller has checked that
         * *count < max_headers. */
        size_t new_cap = min_size(*cap ? *cap * 2 : 16, p->limits.max_headers);
        mlpe_h1_field *grown = (mlpe_h1_field *)realloc(*fields, new_cap * sizeof **fields);
        if (grown == NULL)
            return MLPE_E_NOMEM;
        *fields = grown;
        *cap = new_cap;
    }
    if (mlpe_buf_reserve(&p->fields, name_len + value_len) != MLPE_OK)
        return MLPE_E_NOMEM;
    p->reason.ptr = p->fields.ptr + p->reason_off; /* the buffer may have moved */
    f = &(*fields)[*count];
    f->name_off = (uint32_t)p->fields.len;
    f->name_len = (uint32_t)name_len;
    for (i = 0; i < name_len; i++)
        p->fields.ptr[p->fields.len + i] = mlpe_lower(name[i]);
    p->fields.len += name_len;
    f->value_off = (uint32_t)p->fields.len;
    f->value_len = (uint32_t)value_len;
    if (value_len > 0)
        memcpy(p->fields.ptr + p->fields.len, value, value_len);
    p->fields.len += value_len;
    (*count)++;
    return MLPE_OK;
}

/* ---------------------------------------------------------------------------
 * Framing fields (rules 5 and 7); problems are recorded, not reported
 */

/* Calls on_element for each comma-separated element of a field value, OWS
 * trimmed, empty ones included (RFC 9110 section 5.6.1).  Stops early when
 * on_element returns 0. */
typedef int (*element_fn)(mlpe_h1_parser *p, const uint8_t *el, size_t n);

static void for_each_element(mlpe_h1_parser *p, const uint8_t *v, size_t n, element_fn on_element) {
    const uint8_t *end = v + n;
    for (;;) {
        const uint8_t *comma = (const uint8_t *)memchr(v, ',', (size_t)(end - v));
        const uint8_t *el_end = comma ? comma : end;
        const uint8_t *el = v;
        while (el < el_end && is_ows(*el))
            el++;
        while (el_end > el && is_ows(el_end[-1]))
            el_end--;
        if (!on_element(p, el, (size_t)(el_end - el)) || comma == NULL)
            return;
        v = comma + 1;
    }
}

/* Content-Length = 1*DIGIT (RFC 9110 section 8.6); a list of identical
 * values, or a repeated field with the same value, means that value. */
static int content_length_element(mlpe_h1_parser *p, const uint8_t *el, size_t n) {
    uint64_t v = 0;
    size_t i;
    if (n == 0) {
        p->cl_error_pos = p->field_start;
        return 0;
    }
    for (i = 0; i < n; i++) {
        unsigned d = (unsigned)el[i] - '0';
        if (d > 9 || v > (INT64_LIMIT - d) / 10) { /* not a digit, or >= 2^63 */
            p->cl_error_pos = p->field_start;
            return 0;
        }
        v = v * 10 + d;
    }
    if (p->cl_value >= 0 && (uint64_t)p->cl_value != v) {
        p->cl_error_pos = p->field_start;
        return 0;
    }
    p->cl_value = (int64_t)v;
    return 1;
}

/* Transfer-Encoding (RFC 9112 section 6.1): exactly one "chunked". */
static int transfer_coding_element(mlpe_h1_parser *p, const uint8_t *el, size_t n) {
    if (n == 0)
        return 1;
    if (!p->te_chunked && equals_lower(el, n, "chunked", 7)) {
        p->te_chunked = 1;
        return 1;
    }
    p->te_error_pos = p->field_start;
    return 0;
}

/* Connection options (RFC 9112 section 9.3, RFC 9110 section 7.6.1). */
static int connection_element(mlpe_h1_parser *p, const uint8_t *el, size_t n) {
    if (equals_lower(el, n, "close", 5))
        p->conn_close = 1;
    else if (equals_lower(el, n, "keep-alive", 10))
        p->conn_keep_alive = 1;
    return 1;
}

/* Called when the last field line can no longer be continued. */
static void close_field(mlpe_h1_parser *p, int trailer) {
    const mlpe_h1_field *f;
    const uint8_t *name, *value;
    if (!p->field_open)
        return;
    p->field_open = 0;
    if (trailer)
        return; /* trailers never frame the message (RFC 9110 section 6.5.1) */
    f = &p->headers[p->n_headers - 1];
    name = p->fields.ptr + f->name_off;
    value = p->fields.ptr + f->value_off;
    if (f->name_len == 14 && memcmp(name, "content-length", 14) == 0) {
        p->cl_present = 1;
        if (p->cl_error_pos == NO_POS)
            for_each_element(p, value, f->value_len, content_length_element);
    } else if (f->name_len == 17 && memcmp(name, "transfer-encoding", 17) == 0) {
        if (!p->te_present) {
            p->te_present = 1;
            p->te_first_pos = p->field_start;
        }
        if (p->te_error_pos == NO_POS)
            for_each_element(p, value, f->value_len, transfer_coding_element);
    } else if (f->name_len == 10 && memcmp(name, "connection", 10) == 0) {
        for_each_element(p, value, f->value_len, connection_element);
    }
}

/* ---------------------------------------------------------------------------
 * Line parsers; each returns MLPE_OK or an error code with p->error_pos set
 */

/* status-line = HTTP-version SP status-code SP [ reason-phrase ]
 * (RFC 9112 section 4), with the second SP optional when the reason is
 * empty, as many servers send it. */
static int parse_status_line(mlpe_h1_parser *p, const uint8_t *s, size_t n) {
    static const char http[] = "HTTP/";
    const uint64_t at = p->line_start;
    size_t i;
    int status;

#define EXPECT(cond, idx)                 \
    do {                                  \
        if ((idx) >= n || !(cond)) {      \
            p->error_pos = at + (idx);    \
            return MLPE_E_STATUS_LINE;    \
        }                                 \
    } while (0)

    for (i = 0; i < 5; i++)
        EXPECT(s[i] == (uint8_t)http[i], i);
    EXPECT(is_digit(s[5]), 5);
    if (s[5] != '1') { /* HTTP-version is "HTTP/" DIGIT "." DIGIT; only 1.x is HTTP/1 */
        p->error_pos = at + 5;
        return MLPE_E_VERSION;
    }
    EXPECT(s[6] == '.', 6);
    EXPECT(is_digit(s[7]), 7);
    EXPECT(s[8] == ' ', 8);
    for (i = 9; i < 12; i++)
        EXPECT(is_digit(s[i]), i);
    status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
    if (status == 101) { /* rule 2 */
        p->error_pos = at + 9;
        return MLPE_E_UPGRADE;
    }
    if (n > 12) {
        EXPECT(s[12] == ' ', 12);
        for (i = 13; i < n; i++)
            EXPECT(is_text(s[i]), i);
    }
#undef EXPECT

    /* A new head: the previous response's fields are no longer needed. */
    p->status = status;
    p->version_minor_raw = s[7] - '0';
    p->version_minor = p->version_minor_raw >= 1; /* RFC 9110 section 2.5 */
    p->keep_alive = 0;
    p->chunked = 0;
    p->content_length = -1;
    p->fields.len = 0;
    p->n_headers = 0;
    p->n_trailers = 0;
    p->must_close = 0;
    p->field_open = 0;
    p->cl_present = p->te_present = p->te_chunked = 0;
    p->conn_close = p->conn_keep_alive = 0;
    p->cl_value = -1;
    p->cl_error_pos = p->te_error_pos = p->te_first_pos = NO_POS;
    p->reason_off = 0;
    p->reason.len = n > 13 ? n - 13 : 0;
    if (store_bytes(p, s + 13, p->reason.len) != MLPE_OK) {
        p->error_pos = at;
        return MLPE_E_NOMEM;
    }
    return MLPE_OK;
}

/* A non-empty line of the header or trailer section (rule 4):
 * field-line = field-name ":" OWS field-value OWS (RFC 9112 section 5), or
 * an obs-fold continuation line. */
static int parse_field_line(mlpe_h1_parser *p, const uint8_t *s, size_t n, int trailer) {
    const uint64_t at = p->line_start;
    const int fold = is_ows(s[0]);
    size_t i, name_len = 0, vs, ve;

    if (fold) {
        if (!p->field_open) { /* nothing to continue (RFC 9112 section 2.2) */
            p->error_pos = at;
            return MLPE_E_HEADER;
        }
        vs = 1;
    } else {
        close_field(p, trailer);
        if ((trailer ? p->n_trailers : p->n_headers) >= p->limits.max_headers) {
            p->error_pos = at;
            return MLPE_E_TOO_MANY_HEADERS;
        }
        for (i = 0; i < n && s[i] != ':'; i++) {
            if (!is_tchar[s[i]]) {
                p->error_pos = at + i;
                return MLPE_E_HEADER;
            }
        }
        if (i == 0 || i == n) { /* empty name, or no colon */
            p->error_pos = at + i;
            return MLPE_E_HEADER;
        }
        name_len = i;
        vs = i + 1;
    }
    ve = n;
    while (vs < ve && is_ows(s[vs]))
        vs++;
    while (ve > vs && is_ows(s[ve - 1]))
        ve--;
    for (i = vs; i < ve; i++) {
        if (s[i] == 0 || s[i] == '\r') { /* RFC 9110 section 5.5 */
            p->error_pos = at + i;
            return MLPE_E_HEADER;
        }
    }

    if (fold) {
        /* obs-fold: the last stored value is at the end of p->fields, so
         * the continuation extends it in place, after one SP. */
        mlpe_h1_field *f = trailer ? &p->trailers[p->n_trailers - 1] : &p->headers[p->n_headers - 1];
        size_t extra = ve - vs;
        if (extra == 0)
            return MLPE_OK;
        if (f->value_len > 0) {
            if (store_bytes(p, (const uint8_t *)" ", 1) != MLPE_OK)
                goto nomem;
            extra++;
        }
        if (store_bytes(p, s + vs, ve - vs) != MLPE_OK)
            goto nomem;
        f->value_len += (uint32_t)extra;
        return MLPE_OK;
    }
    if (store_field(p, trailer, s, name_len, s + vs, ve - vs) != MLPE_OK)
        goto nomem;
    p->field_open = 1;
    p->field_start = at;
    return MLPE_OK;
nomem:
    p->error_pos = at;
    return MLPE_E_NOMEM;
}

/* chunk-size [ chunk-ext ] CRLF (RFC 9112 section 7.1), rule 6. */
static int parse_chunk_size(mlpe_h1_parser *p, const uint8_t *s, size_t n, uint64_t *size) {
    const uint64_t at = p->line_start;
    uint64_t v = 0;
    size_t i = 0;
    int h;

    while (i < n && (h = hex_value[s[i]]) >= 0) {
        if (i >= p->limits.max_chunk_size_digits || v > (INT64_LIMIT - (uint64_t)h) >> 4) {
            p->error_pos = at + i;
            return MLPE_E_CHUNK_SIZE_TOO_LONG;
        }
        v = (v << 4) | (uint64_t)h;
        i++;
    }
    if (i == 0) {
        p->error_pos = at;
        return MLPE_E_CHUNK_SIZE;
    }
    while (i < n && is_ows(s[i])) /* BWS */
        i++;
    if (i < n) {
        if (s[i] != ';') {
            p->error_pos = at + i;
            return MLPE_E_CHUNK_SIZE;
        }
        for (i++; i < n; i++) {
            if (!is_text(s[i])) {
                p->error_pos = at + i;
                return MLPE_E_CHUNK_SIZE;
            }
        }
    }
    *size = v;
    return MLPE_OK;
}

/* ---------------------------------------------------------------------------
 * Transitions
 */

/* The blank line after the header section.  Returns MLPE_H1_HEAD, or
 * MLPE_H1_NEED_MORE for an interim response (nothing to report: the caller
 * carries on with the next head), or MLPE_H1_ERROR. */
static mlpe_h1_result end_of_head(mlpe_h1_parser *p, uint64_t next) {
    int no_body;
    close_field(p, 0);
    if (p->status >= 100 && p->status < 200) { /* rule 2: skip it */
        p->state = ST_STATUS_LINE;
        p->head_start = next;
        return MLPE_H1_NEED_MORE;
    }
    no_body = p->status == 204 || p->status == 304;
    if (!no_body) { /* RFC 9112 section 6.3, items 3-7 */
        if (p->te_present) {
            if (p->te_error_pos != NO_POS)
                return fail(p, MLPE_E_TRANSFER_ENCODING, p->te_error_pos);
            if (!p->te_chunked)
                return fail(p, MLPE_E_TRANSFER_ENCODING, p->te_first_pos);
            p->chunked = 1;
            if (p->cl_present || p->version_minor == 0)
                p->must_close = 1;
        } else if (p->cl_present) {
            if (p->cl_error_pos != NO_POS)
                return fail(p, MLPE_E_CONTENT_LENGTH, p->cl_error_pos);
            p->content_length = p->cl_value;
        } else {
            p->must_close = 1; /* close-delimited */
        }
    }
    p->keep_alive = !p->must_close && !p->conn_close && (p->version_minor >= 1 || p->conn_keep_alive);
    if (no_body || p->content_length == 0) {
        p->state = ST_COMPLETE;
    } else if (p->chunked) {
        p->state = ST_CHUNK_SIZE;
    } else if (p->content_length > 0) {
        p->remaining = (uint64_t)p->content_length;
        p->state = ST_BODY_LENGTH;
    } else {
        p->state = ST_BODY_CLOSE;
    }
    return MLPE_H1_HEAD;
}

static void start_chunk(mlpe_h1_parser *p, uint64_t size, uint64_t next) {
    if (size == 0) { /* last-chunk: the trailer section follows */
        p->state = ST_TRAILER_LINE;
        p->head_start = next;
        p->field_open = 0;
    } else {
        p->remaining = size;
        p->state = ST_CHUNK_DATA;
    }
}

static mlpe_h1_result complete_message(mlpe_h1_parser *p, uint64_t next) {
    p->message_started = 0;
    if (p->keep_alive) {
        p->state = ST_STATUS_LINE;
        p->head_start = next;
    } else {
        p->state = ST_CLOSED; /* rule 8 */
    }
    return MLPE_H1_DONE;
}

/* ---------------------------------------------------------------------------
 * Body bytes and the common chunk-size line
 */

/* The common chunk-size line: at most p->fast_chunk_digits hex digits, no
 * extension, then CRLF or LF, all inside data[pos..len).  Returns the offset
 * just past it with *size set, or 0 when the general line parser must decide
 * (on these lines it reaches the same result; this only skips its copying
 * and checks, which cannot fail here). */
MLPE_INLINE size_t simple_chunk_size(const mlpe_h1_parser *p, const uint8_t *data, size_t len,
                                     size_t pos, uint64_t *size) {
    size_t i = pos;
    size_t stop = len - pos > p->fast_chunk_digits ? pos + p->fast_chunk_digits : len;
    uint64_t v = 0;
    int h;
    while (i < stop && (h = hex_value[data[i]]) >= 0) {
        v = (v << 4) | (uint64_t)h;
        i++;
    }
    if (i == pos || i == len)
        return 0;
    *size = v;
    if (data[i] == '\n')
        return i + 1;
    if (data[i] == '\r' && i + 1 < len && data[i + 1] == '\n')
        return i + 2;
    return 0;
}

/* Hands out the next body bytes of a Content-Length body or of a chunk,
 * with pos < len; returns the new position.  After the last byte of a
 * chunk, a CRLF that follows at once is taken too (the usual case; anything
 * else is left to ST_CHUNK_END). */
MLPE_INLINE size_t take_counted(mlpe_h1_parser *p, const uint8_t *data, size_t len, size_t pos,
                                mlpe_span *body) {
    size_t avail = len - pos;
    size_t take = p->remaining < (uint64_t)avail ? (size_t)p->remaining : avail;
    body->ptr = data + pos;
    body->len = take;
    pos += take;
    p->remaining -= take;
    if (p->remaining == 0) {
        if (p->state == ST_BODY_LENGTH) {
            p->state = ST_COMPLETE;
        } else if (pos + 1 < len && data[pos] == '\r' && data[pos + 1] == '\n') {
            pos += 2;
            p->state = ST_CHUNK_SIZE;
        } else {
            p->state = ST_CHUNK_END;
        }
    }
    return pos;
}

/* ---------------------------------------------------------------------------
 * Public API
 */

static size_t limit_or_default(size_t value, size_t fallback) {
    if (value == 0)
        return fallback;
    return value > MLPE_H1_MAX_LIMIT ? MLPE_H1_MAX_LIMIT : value;
}

int mlpe_h1_init(mlpe_h1_parser *p, const mlpe_h1_limits *limits) {
    memset(p, 0, sizeof *p);
    mlpe_buf_init(&p->fields);
    mlpe_buf_init(&p->line);
    p->limits.max_line = limit_or_default(limits ? limits->max_line : 0, MLPE_H1_DEFAULT_MAX_LINE);
    p->limits.max_head = limit_or_default(limits ? limits->max_head : 0, MLPE_H1_DEFAULT_MAX_HEAD);
    p->limits.max_headers =
        limit_or_default(limits ? limits->max_headers : 0, MLPE_H1_DEFAULT_MAX_HEADERS);
    p->limits.max_chunk_size_digits = limit_or_default(
        limits ? limits->max_chunk_size_digits : 0, MLPE_H1_DEFAULT_MAX_CHUNK_SIZE_DIGITS);
    p->fast_chunk_digits = min_size(FAST_CHUNK_DIGITS,
                                    min_size(p->limits.max_chunk_size_digits, p->limits.max_line));
    p->content_length = -1;
    p->error = MLPE_OK;
    p->state = ST_STATUS_LINE;
    return MLPE_OK;
}

void mlpe_h1_free(mlpe_h1_parser *p) {
    mlpe_buf_free(&p->fields);
    mlpe_buf_free(&p->line);
    free(p->headers);
    free(p->trailers);
    p->headers = p->trailers = NULL;
    p->n_headers = p->n_trailers = p->cap_headers = p->cap_trailers = 0;
}

/* The general case of mlpe_h1_feed: every state, every input. */
static H1_NOINLINE mlpe_h1_result run_state_machine(mlpe_h1_parser *p, const uint8_t *data,
                                                    size_t len, size_t *consumed, mlpe_span *body) {
    const uint64_t base = p->offset;
    size_t pos = 0;
    mlpe_h1_result r;
    const uint8_t *line;
    size_t line_len;
    int got, err;

    body->ptr = NULL;
    body->len = 0;
    for (;;) {
        switch (p->state) {
        case ST_CHUNK_SIZE: {
            uint64_t size;
            size_t next;
            if (pos == len)
                goto need_more;
            next = p->line.len == 0 ? simple_chunk_size(p, data, len, pos, &size) : 0;
            if (next == 0) {
                got = gather_line(p, data, len, &pos, base, 0, &line, &line_len);
                if (got == LINE_PARTIAL)
                    goto need_more;
                if (got == LINE_FAILED)
                    goto error;
                err = parse_chunk_size(p, line, line_len, &size);
                if (err != MLPE_OK)
                    goto failed;
                next = pos;
            }
            pos = next;
            start_chunk(p, size, base + pos);
            break;
        }

        case ST_CHUNK_DATA:
        case ST_BODY_LENGTH:
            if (pos == len)
                goto need_more;
            pos = take_counted(p, data, len, pos, body);
            r = MLPE_H1_BODY;
            goto done;

        case ST_CHUNK_END:
            if (pos == len)
                goto need_more;
            if (data[pos] == '\r') {
                if (pos + 1 < len && data[pos + 1] == '\n') {
                    pos += 2;
                    p->state = ST_CHUNK_SIZE;
                } else {
                    pos += 1;
                    p->state = ST_CHUNK_END_LF;
                }
            } else if (data[pos] == '\n') {
                pos += 1;
                p->state = ST_CHUNK_SIZE;
            } else {
                fail(p, MLPE_E_CHUNK_DATA, base + pos);
                goto error;
            }
            break;

        case ST_CHUNK_END_LF:
            if (pos == len)
                goto need_more;
            if (data[pos] != '\n') {
                fail(p, MLPE_E_CHUNK_DATA, base + pos);
                goto error;
            }
            pos += 1;
            p->state = ST_CHUNK_SIZE;
            break;

        case ST_STATUS_LINE:
            if (pos == len)
                goto need_more;
            p->message_started = 1;
            got = gather_line(p, data, len, &pos, base, 1, &line, &line_len);
            if (got == LINE_PARTIAL)
                goto need_more;
            if (got == LINE_FAILED)
                goto error;
            err = parse_status_line(p, line, line_len);
            if (err != MLPE_OK)
                goto failed;
            p->state = ST_FIELD_LINE;
            break;

        case ST_FIELD_LINE:
        case ST_TRAILER_LINE:
            if (pos == len)
                goto need_more;
            got = gather_line(p, data, len, &pos, base, 1, &line, &line_len);
            if (got == LINE_PARTIAL)
                goto need_more;
            if (got == LINE_FAILED)
                goto error;
            if (line_len > 0) {
                err = parse_field_line(p, line, line_len, p->state == ST_TRAILER_LINE);
                if (err != MLPE_OK)
                    goto failed;
            } else if (p->state == ST_TRAILER_LINE) {
                p->field_open = 0;
                r = complete_message(p, base + pos);
                goto done;
            } else {
                r = end_of_head(p, base + pos);
                if (r == MLPE_H1_ERROR)
                    goto error;
                if (r == MLPE_H1_HEAD)
                    goto done;
            }
            break;

        case ST_BODY_CLOSE:
            if (pos == len)
                goto need_more;
            body->ptr = data + pos;
            body->len = len - pos;
            pos = len;
            r = MLPE_H1_BODY;
            goto done;

        case ST_COMPLETE:
            r = complete_message(p, base + pos);
            goto done;

        case ST_CLOSED:
            if (pos == len)
                goto need_more;
            fail(p, MLPE_E_UNEXPECTED_DATA, base + pos);
            goto error;

        default: /* ST_ERROR */
            goto error;
        }
    }

failed: /* a line parser returned err and set p->error_pos */
    fail(p, err, p->error_pos);
error:
    *consumed = 0;
    return MLPE_H1_ERROR;
need_more:
    r = MLPE_H1_NEED_MORE;
done:
    *consumed = pos;
    p->offset = base + pos;
    return r;
}

mlpe_h1_result mlpe_h1_feed(mlpe_h1_parser *p, const uint8_t *data, size_t len,
                            size_t *consumed, mlpe_span *body) {
    /* The hot path of a chunked body, one call per chunk: a simple
     * chunk-size line with data after it.  It does exactly what the state
     * machine would do, in a function small enough to need no stack frame;
     * everything else goes to the state machine. */
    if (p->state == ST_CHUNK_SIZE && p->line.len == 0) {
        uint64_t size;
        size_t pos = simple_chunk_size(p, data, len, 0, &size);
        if (pos != 0 && size > 0 && pos < len) {
            p->remaining = size;
            p->state = ST_CHUNK_DATA;
            pos = take_counted(p, data, len, pos, body);
            *consumed = pos;
            p->offset += pos;
            return MLPE_H1_BODY;
        }
    }
    return run_state_machine(p, data, len, consumed, body);
}

mlpe_h1_result mlpe_h1_feed_eof(mlpe_h1_parser *p) {
    switch (p->state) {
    case ST_ERROR:
        return MLPE_H1_ERROR;
    case ST_BODY_CLOSE: /* RFC 9112 section 6.3 item 8 */
    case ST_COMPLETE:
        p->message_started = 0;
        p->state = ST_CLOSED;
        return MLPE_H1_DONE;
    case ST_CLOSED:
        return MLPE_H1_NEED_MORE;
    case ST_STATUS_LINE:
        if (!p->message_started) {
            p->state = ST_CLOSED;
            return MLPE_H1_NEED_MORE;
        }
        /* fall through */
    default:
        return fail(p, MLPE_E_INCOMPLETE, p->offset);
    }
}

long mlpe_h1_find_header(const mlpe_h1_parser *p, const char *lower_name, size_t name_len) {
    size_t i = p->n_headers;
    while (i-- > 0) {
        const mlpe_h1_field *f = &p->headers[i];
        if (f->name_len == name_len &&
            memcmp(p->fields.ptr + f->name_off, lower_name, name_len) == 0)
            return (long)i;
    }
    return -1;
}
