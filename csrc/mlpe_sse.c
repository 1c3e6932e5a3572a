/*
 * mlpe_sse.c -- incremental WHATWG event-stream decoder (rules in mlpe_sse.h).
 *
 * Theory of operation
 * -------------------
 * The standard describes the stream as lines (HTML section 9.2.6), so the
 * decoder is a line splitter followed by a line interpreter:
 *
 *   - The splitter (find_line_end) looks for the next CR or LF 64 bytes at a
 *     time with SSE2 on x86 or NEON on AArch64, 8 bytes at a time (SWAR)
 *     elsewhere.  A line that lies whole in the input is interpreted in
 *     place.  Only a line cut by the end of an input piece is copied, into
 *     `line`, and completed from the next piece.
 *   - The interpreter (interpret_line) applies rules 3-6 to one complete
 *     line.  "data:" is tested first because nearly every line of an LLM
 *     stream is one.
 *   - The data buffer is built lazily.  The first data value of an event is
 *     only "borrowed" (a span into the caller's input) when its line lies in
 *     the input; it is copied into `data` when a second data line comes or
 *     when the call ends with the event still open.  So the usual event, one
 *     data line and a blank line in the same piece, is dispatched with no
 *     copy at all, and the event span points into the caller's input.
 *   - A blank line dispatches (rule 3) and mlpe_sse_feed returns at once.
 *     The blank line that follows a line directly (as it follows nearly
 *     every data line) is recognised by its first byte, without a search.
 *     Buffers are emptied by setting their length to 0 without touching
 *     their bytes, so the spans handed out stay valid until the next call,
 *     which is when bytes are written again.
 *
 * State across pieces is small and explicit: the partial line, the field
 * buffers, how much of a leading BOM has been seen (rule 2), and whether the
 * last piece ended with CR (rule 1: its LF may start the next piece).
 *
 * The limit is enforced before bytes are buffered.  While a line is read the
 * data buffer does not change, so the room left for the line is known when
 * it starts: max_event - (data buffer size) - (bytes of the line already
 * held).  The search for the line end looks at most room + 1 bytes ahead; if
 * it finds no line end there, byte room + 1 of the line is the first one over
 * the limit and its offset is the error position.  So no input makes the
 * decoder look more than max_event + 1 bytes ahead for a line end, or hold
 * more than max_event bytes in any one buffer.
 */
#include "mlpe_sse.h"

/* MLPE_NO_SIMD forces the portable search (to test it on any machine). */
#if !defined(MLPE_NO_SIMD) && (defined(__SSE2__) || defined(_M_X64) || \
                               (defined(_M_IX86_FP) && _M_IX86_FP >= 2))
#define MLPE_SSE_USE_SSE2 1
#include <emmintrin.h>
#elif !defined(MLPE_NO_SIMD) && (defined(__aarch64__) || defined(_M_ARM64))
#define MLPE_SSE_USE_NEON 1
#include <arm_neon.h>
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

/* Spans handed out never carry a NULL pointer (an unallocated buffer is
 * empty), so that callers may pass them to memcmp and friends as they are. */
static const uint8_t empty_bytes[1] = {0};

static const uint8_t utf8_bom[3] = {0xEF, 0xBB, 0xBF};
#define BOM_DECIDED 3

/* ------------------------------------------------------------------------ */
/* Finding the end of a line (rule 1)                                       */
/* ------------------------------------------------------------------------ */

MLPE_INLINE int is_line_end(uint8_t c) {
    return c == '\n' || c == '\r';
}

#if defined(MLPE_SSE_USE_SSE2)
/* Index of the lowest set bit of a non-zero mask. */
MLPE_INLINE unsigned lowest_bit32(uint32_t mask) {
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctz(mask);
#elif defined(_MSC_VER)
    unsigned long index;
    _BitScanForward(&index, mask);
    return (unsigned)index;
#else
    unsigned index = 0;
    while (!(mask & 1u)) {
        mask >>= 1;
        index++;
    }
    return index;
#endif
}

/* 0xFF in each byte of v that is CR or LF, 0x00 elsewhere. */
MLPE_INLINE __m128i line_end_bytes(__m128i v) {
    return _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')),
                        _mm_cmpeq_epi8(v, _mm_set1_epi8('\n')));
}

MLPE_INLINE __m128i load16(const uint8_t *p) {
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}
#endif

#if defined(MLPE_SSE_USE_NEON)
MLPE_INLINE uint8x16_t line_end_bytes(uint8x16_t v) {
    return vorrq_u8(vceqq_u8(v, vdupq_n_u8('\r')), vceqq_u8(v, vdupq_n_u8('\n')));
}

/* Index of the first 0xFF byte of a compare result, 16 when none.  Each
 * byte is narrowed to a nibble, giving a 64-bit mask with 4 bits a byte. */
MLPE_INLINE unsigned first_hit(uint8x16_t hits) {
    uint8x8_t nibbles = vshrn_n_u16(vreinterpretq_u16_u8(hits), 4);
    uint64_t mask = vget_lane_u64(vreinterpret_u64_u8(nibbles), 0);
    if (mask == 0)
        return 16;
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctzll(mask) >> 2;
#else
    {
        unsigned long index;
        _BitScanForward64(&index, mask);
        return (unsigned)index >> 2;
    }
#endif
}
#endif

#if !defined(MLPE_SSE_USE_SSE2) && !defined(MLPE_SSE_USE_NEON)
/* Portable search, eight bytes at a time.  A byte of w equal to c makes the
 * same byte of w ^ (c * 0x01..01) zero, and has_zero_byte is non-zero exactly
 * when w has a zero byte (its false positives only sit above a true zero, so
 * the yes/no answer is exact).  The byte itself is then found by the scalar
 * loop, which keeps the code free of byte-order assumptions. */
#define SWAR_ONES UINT64_C(0x0101010101010101)
#define SWAR_HIGHS UINT64_C(0x8080808080808080)

MLPE_INLINE uint64_t has_zero_byte(uint64_t w) {
    return (w - SWAR_ONES) & ~w & SWAR_HIGHS;
}
#endif

/* Returns the index of the first CR or LF in p[0..n), or n when there is
 * none.  Never reads outside p[0..n). */
static size_t find_line_end(const uint8_t *p, size_t n) {
    size_t i = 0;
#if defined(MLPE_SSE_USE_SSE2)
    /* 64 bytes a round: an LLM event line (150-300 bytes) takes 3-5. */
    for (; i + 64 <= n; i += 64) {
        __m128i h0 = line_end_bytes(load16(p + i));
        __m128i h1 = line_end_bytes(load16(p + i + 16));
        __m128i h2 = line_end_bytes(load16(p + i + 32));
        __m128i h3 = line_end_bytes(load16(p + i + 48));
        if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(h0, h1), _mm_or_si128(h2, h3))) != 0) {
            uint32_t low = (uint32_t)_mm_movemask_epi8(h0) | (uint32_t)_mm_movemask_epi8(h1) << 16;
            uint32_t high = (uint32_t)_mm_movemask_epi8(h2) | (uint32_t)_mm_movemask_epi8(h3) << 16;
            return low != 0 ? i + lowest_bit32(low) : i + 32 + lowest_bit32(high);
        }
    }
    for (; i + 16 <= n; i += 16) {
        uint32_t mask = (uint32_t)_mm_movemask_epi8(line_end_bytes(load16(p + i)));
        if (mask != 0)
            return i + lowest_bit32(mask);
    }
#elif defined(MLPE_SSE_USE_NEON)
    for (; i + 64 <= n; i += 64) {
        uint8x16_t h0 = line_end_bytes(vld1q_u8(p + i));
        uint8x16_t h1 = line_end_bytes(vld1q_u8(p + i + 16));
        uint8x16_t h2 = line_end_bytes(vld1q_u8(p + i + 32));
        uint8x16_t h3 = line_end_bytes(vld1q_u8(p + i + 48));
        if (vmaxvq_u8(vorrq_u8(vorrq_u8(h0, h1), vorrq_u8(h2, h3))) != 0) {
            unsigned at = first_hit(h0);
            if (at == 16)
                at = 16 + first_hit(h1);
            if (at == 32)
                at = 32 + first_hit(h2);
            if (at == 48)
                at = 48 + first_hit(h3);
            return i + at;
        }
    }
    for (; i + 16 <= n; i += 16) {
        unsigned at = first_hit(line_end_bytes(vld1q_u8(p + i)));
        if (at != 16)
            return i + at;
    }
#else
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (has_zero_byte(w ^ (SWAR_ONES * '\n')) | has_zero_byte(w ^ (SWAR_ONES * '\r')))
            break; /* the scalar loop below stops within these 8 bytes */
    }
#endif
    for (; i < n; i++)
        if (is_line_end(p[i]))
            return i;
    return n;
}

/* ------------------------------------------------------------------------ */
/* Interpreting one complete line (rules 3-6)                               */
/* ------------------------------------------------------------------------ */

MLPE_INLINE mlpe_span span_of(const mlpe_buf *b) {
    mlpe_span s;
    s.ptr = b->ptr != NULL ? b->ptr : empty_bytes;
    s.len = b->len;
    return s;
}

/* The size of the data buffer as the standard builds it: every value
 * followed by LF, the borrowed first value included. */
MLPE_INLINE size_t data_size(const mlpe_sse_decoder *d) {
    return d->data.len + (d->borrowed.ptr != NULL ? d->borrowed.len + 1 : 0);
}

/* Appends value + LF to the data buffer. */
static int append_data(mlpe_buf *data, const uint8_t *value, size_t len) {
    if (MLPE_UNLIKELY(mlpe_buf_reserve(data, len + 1) != MLPE_OK))
        return MLPE_E_NOMEM;
    memcpy(data->ptr + data->len, value, len);
    data->ptr[data->len + len] = '\n';
    data->len += len + 1;
    return MLPE_OK;
}

/* Copies the borrowed value into the data buffer, before the input it points
 * into goes away or another value follows it. */
static int keep_borrowed(mlpe_sse_decoder *d) {
    int status = MLPE_OK;
    if (d->borrowed.ptr != NULL) {
        status = append_data(&d->data, d->borrowed.ptr, d->borrowed.len);
        d->borrowed.ptr = NULL;
        d->borrowed.len = 0;
    }
    return status;
}

/* Rule 6, data.  A value whose line lies in the caller's input is borrowed
 * when it is the event's first; any other is copied. */
static int add_data(mlpe_sse_decoder *d, const uint8_t *value, size_t len, int in_input) {
    d->block_open = 1;
    if (in_input && d->data.len == 0 && d->borrowed.ptr == NULL) {
        d->borrowed.ptr = value;
        d->borrowed.len = len;
        return MLPE_OK;
    }
    if (keep_borrowed(d) != MLPE_OK)
        return MLPE_E_NOMEM;
    return append_data(&d->data, value, len);
}

/* Rule 6, retry: one or more ASCII digits, at most 2^63-1. */
static void set_retry(mlpe_sse_decoder *d, const uint8_t *value, size_t len) {
    uint64_t ms = 0;
    size_t i;
    if (len == 0)
        return;
    for (i = 0; i < len; i++) {
        unsigned digit = (unsigned)value[i] - '0';
        if (digit > 9 || ms > ((uint64_t)INT64_MAX - digit) / 10)
            return;
        ms = ms * 10 + digit;
    }
    d->retry = (int64_t)ms;
}

MLPE_INLINE int buf_set(mlpe_buf *b, const uint8_t *src, size_t n) {
    b->len = 0;
    return mlpe_buf_append(b, src, n);
}

/* Rule 3.  Empties the buffers by length only: the bytes the spans in *ev
 * point to stay untouched until the next call. */
static mlpe_sse_result dispatch(mlpe_sse_decoder *d, mlpe_sse_event *ev) {
    if (d->id_changed) {
        /* The ID buffer becomes the last event ID string; the old string's
         * storage is recycled for the next id field. */
        mlpe_buf old = d->last_id;
        d->last_id = d->next_id;
        d->next_id = old;
        d->id_changed = 0;
    }
    d->block_open = 0;
    if (d->borrowed.ptr != NULL) {
        ev->data.ptr = d->borrowed.ptr;
        ev->data.len = d->borrowed.len;
        d->borrowed.ptr = NULL;
        d->borrowed.len = 0;
    } else if (d->data.len != 0) {
        ev->data.ptr = d->data.ptr;
        ev->data.len = d->data.len - 1; /* the LF after the last value */
        d->data.len = 0;
    } else {
        d->type.len = 0;
        return MLPE_SSE_NEED_MORE;
    }
    ev->type = span_of(&d->type);
    ev->id = span_of(&d->last_id);
    d->type.len = 0;
    return MLPE_SSE_EVENT;
}

/* Applies one line without its line end; in_input tells whether the line
 * lies in the caller's input (rather than in d->line).  Returns
 * MLPE_SSE_EVENT when the line dispatched an event into *ev, MLPE_SSE_ERROR
 * when memory ran out (d->error is set; error_pos is the caller's to set),
 * else MLPE_SSE_NEED_MORE. */
static mlpe_sse_result interpret_line(mlpe_sse_decoder *d, const uint8_t *line, size_t len,
                                      int in_input, mlpe_sse_event *ev) {
    const uint8_t *value;
    size_t name_len, value_len;
    int status = MLPE_OK;

    if (len == 0)
        return dispatch(d, ev);
    if (line[0] == ':') /* rule 4 */
        return MLPE_SSE_NEED_MORE;

    /* Rule 5.  "data:" first: it is nearly every line of an LLM stream, and
     * "data" holds no colon, so the prefix test finds the same first colon. */
    if (len >= 5 && memcmp(line, "data:", 5) == 0) {
        name_len = 4;
    } else {
        const uint8_t *colon = (const uint8_t *)memchr(line, ':', len);
        name_len = colon != NULL ? (size_t)(colon - line) : len;
    }
    value = line + name_len;
    value_len = len - name_len;
    if (value_len > 0) { /* step over the colon, then one SP */
        value++;
        value_len--;
        if (value_len > 0 && value[0] == ' ') {
            value++;
            value_len--;
        }
    }

    /* Rule 6. */
    switch (name_len) {
    case 4:
        if (memcmp(line, "data", 4) == 0)
            status = add_data(d, value, value_len, in_input);
        break;
    case 5:
        if (memcmp(line, "event", 5) == 0) {
            status = buf_set(&d->type, value, value_len);
            d->block_open = 1;
        } else if (memcmp(line, "retry", 5) == 0) {
            set_retry(d, value, value_len);
        }
        break;
    case 2:
        if (memcmp(line, "id", 2) == 0 && memchr(value, 0, value_len) == NULL) {
            status = buf_set(&d->next_id, value, value_len);
            d->id_changed = 1;
            d->block_open = 1;
        }
        break;
    default:
        break; /* an unknown field: ignored */
    }
    if (MLPE_UNLIKELY(status != MLPE_OK)) {
        d->error = status;
        return MLPE_SSE_ERROR;
    }
    return MLPE_SSE_NEED_MORE;
}

/* ------------------------------------------------------------------------ */
/* The public API                                                           */
/* ------------------------------------------------------------------------ */

int mlpe_sse_init(mlpe_sse_decoder *d, size_t max_event) {
    d->retry = -1;
    d->error = MLPE_OK;
    d->error_pos = 0;
    d->offset = 0;
    d->max_event = max_event != 0 ? max_event : MLPE_SSE_DEFAULT_MAX_EVENT;
    mlpe_buf_init(&d->line);
    mlpe_buf_init(&d->data);
    d->borrowed.ptr = NULL;
    d->borrowed.len = 0;
    mlpe_buf_init(&d->type);
    mlpe_buf_init(&d->last_id);
    mlpe_buf_init(&d->next_id);
    d->bom_matched = 0;
    d->after_cr = 0;
    d->id_changed = 0;
    d->block_open = 0;
    return MLPE_OK;
}

void mlpe_sse_free(mlpe_sse_decoder *d) {
    mlpe_buf_free(&d->line);
    mlpe_buf_free(&d->data);
    d->borrowed.ptr = NULL;
    d->borrowed.len = 0;
    mlpe_buf_free(&d->type);
    mlpe_buf_free(&d->last_id);
    mlpe_buf_free(&d->next_id);
}

/* Rule 1: steps over the LF, CR or CRLF at data[pos]; returns where the next
 * line starts.  A CR at the end of the input may be the first half of a CRLF
 * split between pieces: the next piece then skips a leading LF. */
MLPE_INLINE size_t skip_line_end(mlpe_sse_decoder *d, const uint8_t *data, size_t len,
                                 size_t pos) {
    if (data[pos++] == '\r') {
        if (pos == len)
            d->after_cr = 1;
        else if (data[pos] == '\n')
            pos++;
    }
    return pos;
}

static mlpe_sse_result fail(mlpe_sse_decoder *d, int code, uint64_t pos, size_t *consumed) {
    d->error = code;
    d->error_pos = pos;
    d->borrowed.ptr = NULL; /* never keep a pointer into the caller's input */
    d->borrowed.len = 0;
    *consumed = 0;
    return MLPE_SSE_ERROR;
}

mlpe_sse_result mlpe_sse_feed(mlpe_sse_decoder *d, const uint8_t *data, size_t len,
                              size_t *consumed, mlpe_sse_event *ev) {
    size_t pos = 0;
    mlpe_sse_result result = MLPE_SSE_NEED_MORE;

    if (MLPE_UNLIKELY(d->error != MLPE_OK)) {
        *consumed = 0;
        return MLPE_SSE_ERROR;
    }

    if (MLPE_UNLIKELY(d->bom_matched != BOM_DECIDED)) {
        /* Rule 2: match the BOM byte by byte, whatever the piece boundaries. */
        while (pos < len && d->bom_matched < BOM_DECIDED && data[pos] == utf8_bom[d->bom_matched]) {
            d->bom_matched++;
            pos++;
        }
        if (pos < len && d->bom_matched < BOM_DECIDED) {
            /* Not a BOM: the bytes matched so far start the first line, at
             * stream offset 0, so line byte max_event + 1 is at offset
             * max_event. */
            size_t kept = (size_t)d->bom_matched;
            if (kept > d->max_event)
                return fail(d, MLPE_E_EVENT_TOO_LARGE, d->max_event, consumed);
            if (mlpe_buf_append(&d->line, utf8_bom, kept) != MLPE_OK)
                return fail(d, MLPE_E_NOMEM, d->offset + pos, consumed);
            d->bom_matched = BOM_DECIDED;
        }
    } else if (MLPE_UNLIKELY(d->after_cr) && len != 0) {
        /* Rule 1: an LF right after a CR that ended the previous piece. */
        d->after_cr = 0;
        if (data[0] == '\n')
            pos = 1;
    }

    while (pos < len) {
        size_t room = d->max_event - data_size(d) - d->line.len;
        size_t avail = len - pos;
        size_t scan = avail <= room ? avail : room + 1;
        size_t found = find_line_end(data + pos, scan);
        const uint8_t *line = data + pos;
        size_t line_len = found;
        int in_input = 1;

        if (MLPE_UNLIKELY(found == scan)) { /* no line end within the room left */
            if (avail > room)
                return fail(d, MLPE_E_EVENT_TOO_LARGE, d->offset + pos + room, consumed);
            if (mlpe_buf_append(&d->line, line, avail) != MLPE_OK)
                return fail(d, MLPE_E_NOMEM, d->offset + pos, consumed);
            pos = len;
            break;
        }
        if (MLPE_UNLIKELY(d->line.len != 0)) { /* complete the line held from earlier pieces */
            if (mlpe_buf_append(&d->line, line, found) != MLPE_OK)
                return fail(d, MLPE_E_NOMEM, d->offset + pos, consumed);
            line = d->line.ptr;
            line_len = d->line.len;
            in_input = 0;
        }

        pos = skip_line_end(d, data, len, pos + found);
        result = interpret_line(d, line, line_len, in_input, ev);
        d->line.len = 0;
        if (result == MLPE_SSE_NEED_MORE && pos < len && is_line_end(data[pos])) {
            /* A blank line, as usually follows a data line: dispatch it
             * without another search. */
            pos = skip_line_end(d, data, len, pos);
            result = dispatch(d, ev);
        }
        if (result != MLPE_SSE_NEED_MORE) {
            if (MLPE_UNLIKELY(result == MLPE_SSE_ERROR))
                return fail(d, d->error, d->offset + pos, consumed);
            break;
        }
    }
    /* Leaving with an event still open: its data must outlive the input. */
    if (result == MLPE_SSE_NEED_MORE && keep_borrowed(d) != MLPE_OK)
        return fail(d, MLPE_E_NOMEM, d->offset + pos, consumed);
    d->offset += pos;
    *consumed = pos;
    return result;
}

int mlpe_sse_pending(const mlpe_sse_decoder *d) {
    return d->line.len != 0 || (d->bom_matched > 0 && d->bom_matched < BOM_DECIDED) ||
           d->block_open;
}

mlpe_span mlpe_sse_last_event_id(const mlpe_sse_decoder *d) {
    return span_of(&d->last_id);
}
