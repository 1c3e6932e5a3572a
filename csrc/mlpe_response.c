/*
 * mlpe_response.c -- the response pipeline of mlpe_response.h (rules R1-R12).
 */
#include "mlpe_response.h"

int mlpe_response_init(mlpe_response *r, const mlpe_response_limits *limits) {
    int rc;
    memset(r, 0, sizeof(*r));
    r->t_head = r->t_first = r->t_done = -1;
    r->t_first_content = r->t_second = -1; /* R12 */
    r->gaps.lo = MLPE_GAP_BUCKETS;         /* hi (0) < lo: no bucket counted */
    r->gap_histogram = !(limits && limits->no_gap_histogram);
    r->first_chunk_error_t_ns = -1;
    r->max_body = (limits && limits->max_body) ? limits->max_body : MLPE_RESPONSE_DEFAULT_MAX_BODY;
    r->record_chunk_times = limits ? limits->record_chunk_times : 0;
    rc = mlpe_h1_init(&r->h1, limits ? &limits->h1 : NULL);
    if (rc == MLPE_OK)
        rc = mlpe_sse_init(&r->sse, limits ? limits->max_event : 0);
    if (rc == MLPE_OK)
        rc = mlpe_oai_init(&r->oai);
    if (rc == MLPE_OK)
        r->dialect = mlpe_oai_set_dialect(&r->oai, limits ? limits->dialect : 0);
    return rc;
}

void mlpe_response_free(mlpe_response *r) {
    size_t i;
    mlpe_h1_free(&r->h1);
    mlpe_sse_free(&r->sse);
    mlpe_oai_free(&r->oai);
    mlpe_buf_free(&r->first_chunk_error_detail);
    mlpe_buf_free(&r->first_chunk_error_data);
    mlpe_buf_free(&r->content);
    mlpe_buf_free(&r->reasoning);
    mlpe_buf_free(&r->finish_reason);
    mlpe_buf_free(&r->usage);
    mlpe_buf_free(&r->body);
    for (i = 0; i < r->n_tools; i++) {
        mlpe_buf_free(&r->tools[i].id);
        mlpe_buf_free(&r->tools[i].type);
        mlpe_buf_free(&r->tools[i].name);
        mlpe_buf_free(&r->tools[i].arguments);
    }
    free(r->tools);
    free(r->chunk_times);
    r->tools = NULL;
    r->chunk_times = NULL;
    r->n_tools = r->n_chunk_times = 0;
}

static unsigned fail(mlpe_response *r, int code, uint64_t pos) {
    r->error = code;
    r->error_pos = pos;
    r->keep_alive = 0;
    return MLPE_RESPONSE_ERROR;
}

/* ---- head ------------------------------------------------------------- */

/* R1/R2: the field value names `expected` (lower case), in any case, and ends
 * there or continues with parameters (RFC 9110 8.3.1).  NULL is an absent
 * field, which names nothing. */
static int value_names(const uint8_t *v, size_t n, const char *expected, size_t expected_len) {
    size_t k;
    if (v == NULL || n < expected_len)
        return 0;
    for (k = 0; k < expected_len; k++)
        if (mlpe_lower(v[k]) != (uint8_t)expected[k])
            return 0;
    return n == expected_len || v[expected_len] == ';' || v[expected_len] == ' ' ||
           v[expected_len] == '\t';
}

/* R1/R2 for a final head, however it was framed: both input modes come
 * here, so that HTTP/1.1 and R9 read a head alike. */
static unsigned apply_head(mlpe_response *r, int status, const uint8_t *content_type,
                           size_t content_type_len, const uint8_t *content_encoding,
                           size_t content_encoding_len, int64_t t_ns) {
    r->status = status;
    r->t_head = t_ns;
    if (content_encoding != NULL &&
        !value_names(content_encoding, content_encoding_len, "identity", 8))
        return fail(r, MLPE_E_CONTENT_ENCODING, 0);
    if (status < 200 || status > 299)
        r->body_kind = MLPE_BODY_ERROR;
    else if (value_names(content_type, content_type_len, "text/event-stream", 17))
        r->body_kind = MLPE_BODY_SSE;
    else
        r->body_kind = MLPE_BODY_JSON;
    return MLPE_RESPONSE_HEAD;
}

/* The value of the last header field of a name, {NULL, 0} when absent. */
static mlpe_span h1_field(const mlpe_h1_parser *p, const char *name, size_t name_len) {
    mlpe_span v = {NULL, 0};
    long i = mlpe_h1_find_header(p, name, name_len);
    if (i >= 0) {
        /* never NULL: the field's name is stored in the same buffer */
        v.ptr = p->fields.ptr + p->headers[i].value_off;
        v.len = p->headers[i].value_len;
    }
    return v;
}

static unsigned on_head(mlpe_response *r, int64_t t_ns) {
    mlpe_span type = h1_field(&r->h1, "content-type", 12);
    mlpe_span encoding = h1_field(&r->h1, "content-encoding", 16);
    return apply_head(r, r->h1.status, type.ptr, type.len, encoding.ptr, encoding.len, t_ns);
}

/* ---- fragments -------------------------------------------------------- */

static mlpe_tool_call *tool_for_index(mlpe_response *r, int32_t index) {
    size_t i;
    mlpe_tool_call *t;
    /* Linear: a response has a handful of tool calls at most. */
    for (i = r->n_tools; i > 0; i--)
        if (r->tools[i - 1].index == index)
            return &r->tools[i - 1];
    if (r->n_tools == r->cap_tools) {
        size_t cap = r->cap_tools ? r->cap_tools * 2 : 4;
        mlpe_tool_call *grown = (mlpe_tool_call *)realloc(r->tools, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        r->tools = grown;
        r->cap_tools = cap;
    }
    t = &r->tools[r->n_tools++];
    memset(t, 0, sizeof(*t));
    t->index = index;
    return t;
}

static int set_buf(mlpe_buf *b, mlpe_span s) {
    b->len = 0;
    return mlpe_buf_append(b, s.ptr, s.len);
}

static int push_chunk_time(mlpe_response *r, int64_t t_ns) {
    if (r->n_chunk_times == r->cap_chunk_times) {
        size_t cap = r->cap_chunk_times ? r->cap_chunk_times * 2 : 256;
        int64_t *grown = (int64_t *)realloc(r->chunk_times, cap * sizeof(int64_t));
        if (grown == NULL)
            return MLPE_E_NOMEM;
        r->chunk_times = grown;
        r->cap_chunk_times = cap;
    }
    r->chunk_times[r->n_chunk_times++] = t_ns;
    return MLPE_OK;
}

/* R12: one more gap, from the latest content-bearing event to this one at t_ns. */
static void count_gap(mlpe_response *r, int64_t t_ns) {
    mlpe_gaps *g = &r->gaps;
    int64_t gap = t_ns - r->t_last_bearing;
    if (gap <= 0) {
        gap = 0;
        g->zero++;
    } else {
        r->t_last_bearing = t_ns;
    }
    if (g->count == 0 || gap < g->min_ns)
        g->min_ns = gap;
    if (gap > g->max_ns)
        g->max_ns = gap;
    g->count++;
    g->sum_ns += gap;
    if (r->gap_histogram) {
        uint32_t b = mlpe_gap_bucket((uint64_t)gap);
        g->buckets[b]++;
        if (b < g->lo)
            g->lo = b;
        if (b > g->hi)
            g->hi = b;
    }
}

/* R11: the length of the common prefix of a[0..n) and b[0..m). */
static size_t common_prefix(const uint8_t *a, size_t n, const uint8_t *b, size_t m) {
    size_t i = 0, end = n < m ? n : m;
    while (i < end && a[i] == b[i])
        i++;
    return i;
}

/* Applies one decoded chunk (R3, R6, R11).  Returns MLPE_RESPONSE_FIRST when
 * it is the first content-bearing one, 0 otherwise, or sets an error (NOMEM,
 * or R11's). */
static unsigned apply_chunk(mlpe_response *r, const mlpe_oai_chunk *c, int64_t t_ns) {
    mlpe_span content = c->content;
    int bearing, rc = MLPE_OK;
    size_t i;

    if (r->dialect == MLPE_DIALECT_SGLANG && c->has_content && r->content.len != 0) {
        /* R11: the text so far; what it adds is beyond the content kept. */
        const size_t have = r->content.len;
        if (content.len < have || memcmp(content.ptr, r->content.ptr, have) != 0)
            return fail(r, MLPE_E_TEXT_NOT_CUMULATIVE,
                        common_prefix(content.ptr, content.len, r->content.ptr, have));
        content.ptr += have;
        content.len -= have;
    }
    bearing = (c->has_content && content.len) || (c->has_reasoning && c->reasoning.len);
    if (c->has_content)
        rc |= mlpe_buf_append(&r->content, content.ptr, content.len);
    if (c->has_reasoning)
        rc |= mlpe_buf_append(&r->reasoning, c->reasoning.ptr, c->reasoning.len);
    for (i = 0; i < c->n_tools; i++) {
        const mlpe_oai_tool *f = &c->tools[i];
        mlpe_tool_call *t = tool_for_index(r, f->index);
        if (t == NULL)
            return fail(r, MLPE_E_NOMEM, 0);
        if (f->has_id)
            rc |= set_buf(&t->id, f->id);
        if (f->has_type)
            rc |= set_buf(&t->type, f->type);
        if (f->has_name) {
            rc |= mlpe_buf_append(&t->name, f->name.ptr, f->name.len);
            bearing |= f->name.len != 0;
        }
        if (f->has_arguments) {
            rc |= mlpe_buf_append(&t->arguments, f->arguments.ptr, f->arguments.len);
            bearing |= f->arguments.len != 0;
        }
    }
    if (c->has_finish_reason) {
        r->has_finish_reason = 1;
        rc |= set_buf(&r->finish_reason, c->finish_reason);
    }
    if (c->has_usage) {
        r->has_usage = 1;
        rc |= set_buf(&r->usage, c->usage);
    }
    if (MLPE_UNLIKELY(rc != MLPE_OK))
        return fail(r, MLPE_E_NOMEM, 0);
    if (!bearing)
        return 0;
    r->content_events++;
    if (r->record_chunk_times && push_chunk_time(r, t_ns) != MLPE_OK)
        return fail(r, MLPE_E_NOMEM, 0);
    if (r->t_first_content < 0 && c->has_content && content.len) /* R12 */
        r->t_first_content = t_ns;
    if (r->t_first >= 0) {
        if (r->t_second < 0)
            r->t_second = t_ns;
        count_gap(r, t_ns);
        return 0;
    }
    r->t_first = r->t_last_bearing = t_ns;
    r->content_first_len = r->content.len;
    r->reasoning_first_len = r->reasoning.len;
    for (i = 0; i < r->n_tools; i++) {
        r->tools[i].name_first_len = r->tools[i].name.len;
        r->tools[i].arguments_first_len = r->tools[i].arguments.len;
    }
    return MLPE_RESPONSE_FIRST;
}

static unsigned decode_chunk(mlpe_response *r, const uint8_t *json, size_t len, int64_t t_ns) {
    mlpe_oai_chunk chunk;
    int rc = mlpe_oai_decode(&r->oai, json, len, &chunk);
    if (MLPE_LIKELY(rc == MLPE_OK))
        return apply_chunk(r, &chunk, t_ns);
    if (rc == MLPE_E_NOMEM)
        return fail(r, MLPE_E_NOMEM, 0);
    /* R5: count it, keep the first, go on with the stream. */
    if (r->chunk_errors++ == 0) {
        mlpe_span detail = {NULL, 0};
        r->first_chunk_error = rc;
        r->first_chunk_error_t_ns = t_ns;
        if (rc == MLPE_E_CHUNK_SHAPE && chunk.shape_path != NULL) {
            detail.ptr = (const uint8_t *)chunk.shape_path;
            detail.len = strlen(chunk.shape_path);
        } else if (rc == MLPE_E_ENDPOINT_ERROR) {
            detail = chunk.error_message;
        }
        if (set_buf(&r->first_chunk_error_detail, detail) != MLPE_OK ||
            mlpe_buf_append(&r->first_chunk_error_data, json, len) != MLPE_OK)
            return fail(r, MLPE_E_NOMEM, 0);
    }
    return 0;
}

/* ---- body ------------------------------------------------------------- */

static unsigned on_sse_bytes(mlpe_response *r, const uint8_t *p, size_t n, int64_t t_ns) {
    unsigned flags = 0;
    while (n > 0) {
        mlpe_sse_event ev;
        size_t used;
        int res = mlpe_sse_feed(&r->sse, p, n, &used, &ev);
        p += used;
        n -= used;
        if (res == MLPE_SSE_NEED_MORE)
            break;
        if (res == MLPE_SSE_ERROR)
            return flags | fail(r, r->sse.error, r->sse.error_pos);
        r->events++;
        if (r->done_seen) { /* R4 */
            r->events_after_done++;
            continue;
        }
        if (mlpe_sse_is_done(&ev)) {
            r->done_seen = 1;
            r->t_done = t_ns;
            continue;
        }
        flags |= decode_chunk(r, ev.data.ptr, ev.data.len, t_ns);
        if (flags & MLPE_RESPONSE_ERROR)
            return flags;
    }
    return flags;
}

static unsigned on_body(mlpe_response *r, mlpe_span span, int64_t t_ns) {
    uint64_t at = r->body_offset;
    r->body_offset += span.len;
    switch (r->body_kind) {
    case MLPE_BODY_SSE:
        return on_sse_bytes(r, span.ptr, span.len, t_ns);
    case MLPE_BODY_JSON:
        if (span.len > r->max_body - r->body.len) {
            /* keep what fits, so the body does not depend on the split */
            size_t room = r->max_body - r->body.len;
            if (mlpe_buf_append(&r->body, span.ptr, room) != MLPE_OK)
                return fail(r, MLPE_E_NOMEM, 0);
            return fail(r, MLPE_E_BODY_TOO_LARGE, at + room);
        }
        if (mlpe_buf_append(&r->body, span.ptr, span.len) != MLPE_OK)
            return fail(r, MLPE_E_NOMEM, 0);
        return 0;
    default: { /* R1: an error body is kept for its message, truncated */
        size_t room = MLPE_RESPONSE_ERROR_BODY_MAX - r->body.len;
        if (mlpe_buf_append(&r->body, span.ptr, span.len < room ? span.len : room) != MLPE_OK)
            return fail(r, MLPE_E_NOMEM, 0);
        return 0;
    }
    }
}

static unsigned on_message_done(mlpe_response *r, int keep_alive, int64_t t_ns) {
    unsigned flags = MLPE_RESPONSE_DONE;
    if (r->body_kind == MLPE_BODY_SSE && r->events == 0) /* R10 */
        return fail(r, MLPE_E_NO_EVENTS, r->body_offset);
    r->complete = 1;
    r->keep_alive = keep_alive;
    if (r->body_kind == MLPE_BODY_JSON)
        flags |= decode_chunk(r, r->body.ptr, r->body.len, t_ns);
    if (r->t_done < 0) /* R4: no [DONE], the end of the message ends it */
        r->t_done = t_ns;
    return flags;
}

unsigned mlpe_response_feed(mlpe_response *r, const uint8_t *data, size_t len, int64_t t_ns) {
    unsigned flags = 0;
    size_t off = 0;
    if (MLPE_UNLIKELY(r->error || r->input_mode == MLPE_INPUT_BODY))
        return MLPE_RESPONSE_ERROR; /* terminal, or refused (R9) */
    r->input_mode = MLPE_INPUT_WIRE;
    /* Until the framing wants more: it may report the end of a message only
     * once the last byte has been used (a Content-Length body ending with
     * the input, a 204 head). */
    for (;;) {
        mlpe_span body;
        size_t used;
        int res;
        if (r->complete) { /* R7 */
            if (off < len) {
                r->unexpected_bytes += len - off;
                r->keep_alive = 0;
            }
            break;
        }
        res = mlpe_h1_feed(&r->h1, data + off, len - off, &used, &body);
        off += used;
        if (res == MLPE_H1_NEED_MORE)
            break;
        switch (res) {
        case MLPE_H1_BODY:
            flags |= on_body(r, body, t_ns);
            break;
        case MLPE_H1_HEAD:
            flags |= on_head(r, t_ns);
            break;
        case MLPE_H1_DONE:
            flags |= on_message_done(r, r->h1.keep_alive, t_ns);
            break;
        default: /* MLPE_H1_ERROR */
            return flags | fail(r, r->h1.error, r->h1.error_pos);
        }
        if (flags & MLPE_RESPONSE_ERROR)
            return flags;
    }
    return flags;
}

unsigned mlpe_response_feed_eof(mlpe_response *r, int64_t t_ns) {
    int res;
    if (r->error || r->input_mode == MLPE_INPUT_BODY)
        return MLPE_RESPONSE_ERROR; /* terminal, or refused (R9) */
    r->input_mode = MLPE_INPUT_WIRE;
    if (r->complete)
        return 0;
    res = mlpe_h1_feed_eof(&r->h1);
    if (res == MLPE_H1_DONE)
        return on_message_done(r, r->h1.keep_alive, t_ns);
    if (r->done_seen) /* R4: the stream said it was done; only the framing's end is missing */
        return on_message_done(r, 0, t_ns);
    if (res == MLPE_H1_ERROR)
        return fail(r, r->h1.error, r->h1.error_pos);
    /* Nothing of a response arrived at all: for the request we sent, that
     * is an incomplete response too. */
    return fail(r, MLPE_E_INCOMPLETE, r->h1.offset);
}

/* ---- body mode (R9) ---------------------------------------------------- */

unsigned mlpe_response_set_head(mlpe_response *r, int status,
                                const uint8_t *content_type, size_t content_type_len,
                                const uint8_t *content_encoding, size_t content_encoding_len,
                                int64_t t_ns) {
    if (r->error || r->input_mode != MLPE_INPUT_NONE || status < 200 || status > 599)
        return MLPE_RESPONSE_ERROR; /* terminal, or refused */
    r->input_mode = MLPE_INPUT_BODY;
    return apply_head(r, status, content_type, content_type_len, content_encoding,
                      content_encoding_len, t_ns);
}

unsigned mlpe_response_feed_body(mlpe_response *r, const uint8_t *data, size_t len, int64_t t_ns) {
    mlpe_span body;
    if (MLPE_UNLIKELY(r->error || r->input_mode != MLPE_INPUT_BODY || r->complete))
        return MLPE_RESPONSE_ERROR; /* terminal, or refused */
    body.ptr = data;
    body.len = len;
    return on_body(r, body, t_ns);
}

unsigned mlpe_response_end_body(mlpe_response *r, int64_t t_ns) {
    if (r->error || r->input_mode != MLPE_INPUT_BODY || r->complete)
        return MLPE_RESPONSE_ERROR; /* terminal, or refused */
    /* The framing layer owns the connection: nothing here says it can be
     * reused, so keep_alive stays 0. */
    return on_message_done(r, 0, t_ns);
}
