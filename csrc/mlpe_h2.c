/*
 * mlpe_h2.c -- HTTP/2 DATA de-framer (rules D1-D6 in mlpe_h2.h).
 *
 * Theory of operation
 * -------------------
 * The input is a sequence of frames [4.1], and the de-framer is a state
 * machine over the current frame:
 *
 *   HEADER      the 9-byte frame header: parsed in place when it lies whole
 *               in the input, else gathered in `header` across reads;
 *   PASS        the payload of a pass-through frame, copied out (D5);
 *   PAD_LENGTH  the Pad Length byte of a consumed PADDED frame (D2);
 *   PAYLOAD     the data of a consumed frame, fed to the decoder in place;
 *   PADDING     the padding of a consumed PADDED frame, skipped.
 *
 * A header decides the frame's fate once (start_frame); a consumed frame
 * ends in end_frame, which applies D3 and D4.  So the usual DATA frame of a
 * streamed completion costs one table look-up (a hit of the last-hit slot),
 * one call of the sink's feed_body on the payload where it lies, and two
 * comparisons with the window thresholds: no copy and no allocation.
 *
 * Streams live in an open-addressing table with linear probing.  Client
 * stream ids are consecutive odd numbers [5.1.1], which Fibonacci hashing
 * (the high bits of id * 2^32/phi) spreads evenly over the slots.  Removal
 * shifts the following entries back instead of leaving tombstones, so a
 * connection that opens millions of streams over its life keeps short
 * probe sequences.  The slot of the last hit is tried first: consecutive
 * frames usually belong to one stream.
 *
 * The frame in progress keeps copies of what it needs (cur_*), because the
 * caller may register and unregister streams between two reads -- between
 * two pieces of one frame -- which moves entries in the table.  At its end
 * the frame looks its stream up again (a last-hit slot hit); cur_live says
 * whether the registration it began with still exists, so that neither a
 * removal nor a re-registration of the same id in the middle of a frame
 * confuses the two.
 */
#include "mlpe_h2.h"

enum { ST_HEADER, ST_PASS, ST_PAD_LENGTH, ST_PAYLOAD, ST_PADDING };

#define FRAME_DATA 0x0          /* [6.1] */
#define FRAME_WINDOW_UPDATE 0x8 /* [6.9] */
#define FLAG_END_STREAM 0x1     /* [6.1] */
#define FLAG_PADDED 0x8         /* [6.1] */

#define TABLE_MIN_BITS 4u
#define TABLE_MAX_BITS 30u /* 2^30 slots of 24 bytes: far beyond any real need */
#define FIBONACCI_32 2654435769u /* 2^32 / phi */

MLPE_INLINE uint32_t read_u24(const uint8_t *p) {
    return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | (uint32_t)p[2];
}

/* A stream identifier without its reserved bit [4.1]. */
MLPE_INLINE uint32_t read_stream_id(const uint8_t *p) {
    return ((uint32_t)p[0] & 0x7F) << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

MLPE_INLINE void write_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

MLPE_INLINE uint32_t min_u32(uint32_t a, size_t b) {
    return b < a ? (uint32_t)b : a;
}

/* The connection cannot go on without memory; INTERNAL_ERROR is what a
 * GOAWAY would say [7].  error_pos is set when mlpe_h2_feed returns. */
static void fail_nomem(mlpe_h2_deframer *d) {
    if (!d->error)
        d->error = MLPE_H2_INTERNAL_ERROR;
}

/* ------------------------------------------------------------------------ */
/* The stream table                                                         */
/* ------------------------------------------------------------------------ */

MLPE_INLINE size_t home_slot(const mlpe_h2_deframer *d, uint32_t stream_id) {
    return (size_t)((uint32_t)(stream_id * FIBONACCI_32) >> d->table_shift);
}

static mlpe_h2_stream *find_stream(mlpe_h2_deframer *d, uint32_t stream_id) {
    size_t i, mask;
    /* Id 0 is never registered, and would match an empty slot. */
    if (d->table_cap == 0 || stream_id == 0)
        return NULL;
    if (MLPE_LIKELY(d->table[d->last_hit].stream_id == stream_id))
        return &d->table[d->last_hit];
    mask = d->table_cap - 1;
    for (i = home_slot(d, stream_id); d->table[i].stream_id != 0; i = (i + 1) & mask) {
        if (d->table[i].stream_id == stream_id) {
            d->last_hit = i;
            return &d->table[i];
        }
    }
    return NULL;
}

/* The first empty slot of stream_id's probe sequence (the table has one). */
static size_t free_slot(const mlpe_h2_deframer *d, uint32_t stream_id) {
    size_t mask = d->table_cap - 1, i = home_slot(d, stream_id);
    while (d->table[i].stream_id != 0)
        i = (i + 1) & mask;
    return i;
}

/* Doubles the table (or makes the first one) and re-inserts every entry. */
static int grow_table(mlpe_h2_deframer *d) {
    unsigned bits = d->table_cap ? 32u - d->table_shift + 1u : TABLE_MIN_BITS;
    size_t cap = (size_t)1 << bits, i;
    mlpe_h2_stream *old = d->table, *table;
    size_t old_cap = d->table_cap;
    if (bits > TABLE_MAX_BITS || cap > SIZE_MAX / sizeof(mlpe_h2_stream))
        return MLPE_E_NOMEM;
    table = (mlpe_h2_stream *)calloc(cap, sizeof(mlpe_h2_stream));
    if (table == NULL)
        return MLPE_E_NOMEM;
    d->table = table;
    d->table_cap = cap;
    d->table_shift = 32u - bits;
    d->last_hit = 0;
    for (i = 0; i < old_cap; i++)
        if (old[i].stream_id != 0)
            table[free_slot(d, old[i].stream_id)] = old[i];
    free(old);
    return MLPE_OK;
}

/* Empties slot `hole`, then moves back every later entry of the cluster
 * whose home is not between the hole and itself (cyclically), so that each
 * stays reachable from its home without tombstones. */
static void remove_slot(mlpe_h2_deframer *d, size_t hole) {
    size_t mask = d->table_cap - 1, j = hole;
    d->table[hole].stream_id = 0;
    d->table[hole].decoder = NULL;
    for (;;) {
        size_t home;
        j = (j + 1) & mask;
        if (d->table[j].stream_id == 0)
            break;
        home = home_slot(d, d->table[j].stream_id);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            d->table[hole] = d->table[j];
            d->table[j].stream_id = 0;
            d->table[j].decoder = NULL;
            hole = j;
        }
    }
    d->n_streams--;
}

/* ------------------------------------------------------------------------ */
/* Outputs                                                                  */
/* ------------------------------------------------------------------------ */

static void push_event(mlpe_h2_deframer *d, uint32_t stream_id, uint32_t flags, uint64_t end) {
    if (d->n_events == d->cap_events) {
        size_t cap = d->cap_events ? d->cap_events * 2 : 16;
        mlpe_h2_event *events;
        if (cap > SIZE_MAX / sizeof(mlpe_h2_event)) {
            fail_nomem(d);
            return;
        }
        events = (mlpe_h2_event *)realloc(d->events, cap * sizeof(mlpe_h2_event));
        if (events == NULL) {
            fail_nomem(d);
            return;
        }
        d->events = events;
        d->cap_events = cap;
    }
    d->events[d->n_events].stream_id = stream_id;
    d->events[d->n_events].flags = flags;
    d->events[d->n_events].end = end;
    d->n_events++;
}

static void push_released(mlpe_h2_deframer *d, uint32_t stream_id) {
    if (d->n_released == d->cap_released) {
        size_t cap = d->cap_released ? d->cap_released * 2 : 16;
        uint32_t *released;
        if (cap > SIZE_MAX / sizeof(uint32_t)) {
            fail_nomem(d);
            return;
        }
        released = (uint32_t *)realloc(d->released, cap * sizeof(uint32_t));
        if (released == NULL) {
            fail_nomem(d);
            return;
        }
        d->released = released;
        d->cap_released = cap;
    }
    d->released[d->n_released++] = stream_id;
}

void mlpe_h2_window_update(uint8_t *out, uint32_t stream_id, uint32_t increment) {
    out[0] = 0;
    out[1] = 0;
    out[2] = 4; /* the payload is the 31-bit increment [6.9] */
    out[3] = FRAME_WINDOW_UPDATE;
    out[4] = 0; /* no flags are defined [6.9] */
    write_u32(out + 5, stream_id);
    write_u32(out + 9, increment);
}

static void queue_window_update(mlpe_h2_deframer *d, uint32_t stream_id, uint32_t increment) {
    if (mlpe_buf_reserve(&d->window_updates, MLPE_H2_WINDOW_UPDATE_SIZE) != MLPE_OK) {
        fail_nomem(d);
        return;
    }
    mlpe_h2_window_update(d->window_updates.ptr + d->window_updates.len, stream_id, increment);
    d->window_updates.len += MLPE_H2_WINDOW_UPDATE_SIZE;
}

/* D4: an empty DATA frame with END_STREAM, for h2's stream state. */
static void pass_end_stream(mlpe_h2_deframer *d, uint32_t stream_id) {
    uint8_t *p;
    if (mlpe_buf_reserve(&d->passthrough, MLPE_H2_FRAME_HEADER_SIZE) != MLPE_OK) {
        fail_nomem(d);
        return;
    }
    p = d->passthrough.ptr + d->passthrough.len;
    p[0] = 0;
    p[1] = 0;
    p[2] = 0;
    p[3] = FRAME_DATA;
    p[4] = FLAG_END_STREAM;
    write_u32(p + 5, stream_id);
    d->passthrough.len += MLPE_H2_FRAME_HEADER_SIZE;
}

/* ------------------------------------------------------------------------ */
/* Frames                                                                   */
/* ------------------------------------------------------------------------ */

/* D6: what one decoder call returned.  A failure ends the feeding.  end:
 * where the frame's bytes end in the input (D7). */
static void report(mlpe_h2_deframer *d, unsigned flags, uint64_t end) {
    if (flags & MLPE_RESPONSE_ERROR) {
        d->cur_failed = 1;
        flags = MLPE_RESPONSE_ERROR;
    } else {
        flags &= MLPE_RESPONSE_FIRST | MLPE_RESPONSE_DONE;
    }
    if (flags)
        push_event(d, d->cur_id, flags, end);
}

/* Starts the frame whose header is h.  Returns 1 when mlpe_h2_feed must
 * return now: an empty pass-through frame is complete (D5), or memory ran
 * out. */
static int start_frame(mlpe_h2_deframer *d, const uint8_t *h) {
    uint32_t length = read_u24(h);
    uint8_t type = h[3], flags = h[4];
    uint32_t stream_id = read_stream_id(h + 5);
    mlpe_h2_stream *s = NULL;
    /* A PADDED frame of length 0 has no room for its Pad Length field:
     * h2 reports that error [6.1]. */
    if (type == FRAME_DATA && length <= d->max_frame_size &&
        !((flags & FLAG_PADDED) && length == 0))
        s = find_stream(d, stream_id);
    if (s == NULL) { /* D5: h2's frame, header and all */
        if (mlpe_buf_append(&d->passthrough, h, MLPE_H2_FRAME_HEADER_SIZE) != MLPE_OK) {
            fail_nomem(d);
            return 1;
        }
        d->remaining = length;
        d->state = length ? ST_PASS : ST_HEADER;
        return length == 0;
    }
    d->cur_id = stream_id;
    d->cur_decoder = s->decoder;
    d->cur_failed = s->failed;
    d->cur_live = 1;
    d->cur_end_stream = (flags & FLAG_END_STREAM) != 0;
    d->padding = 0;
    d->remaining = length;
    /* D3: the whole payload counts, padding included.  Both sums stay
     * below threshold + 2^24 < 2^31, since every frame end resets them
     * once they reach their threshold. */
    d->conn_unacked += length;
    s->unacked += length;
    if (flags & FLAG_PADDED)
        d->state = ST_PAD_LENGTH;
    else
        d->state = length ? ST_PAYLOAD : ST_HEADER;
    return 0;
}

/* Ends a consumed frame (D3, D4); at: the input offset just past it (D7). */
static void end_frame(mlpe_h2_deframer *d, int64_t t_ns, uint64_t at) {
    uint32_t stream_id = d->cur_id;
    mlpe_h2_stream *s = d->cur_live ? find_stream(d, stream_id) : NULL;
    d->state = ST_HEADER;
    if (d->cur_end_stream) {
        if (s != NULL) {
            remove_slot(d, (size_t)(s - d->table));
            push_released(d, stream_id);
        }
        if (!d->cur_failed) {
            unsigned flags = d->sink.end_body(d->cur_decoder, t_ns);
            d->cur_failed = 1; /* no more input for it */
            report(d, flags, at);
        }
        pass_end_stream(d, stream_id);
    } else if (s != NULL) {
        s->failed = d->cur_failed;
        if (s->unacked >= d->stream_threshold) {
            queue_window_update(d, stream_id, s->unacked);
            s->unacked = 0;
        }
    }
    d->cur_live = 0;
    d->cur_decoder = NULL;
    if (d->conn_unacked >= d->conn_threshold) {
        queue_window_update(d, 0, d->conn_unacked);
        d->conn_unacked = 0;
    }
}

MLPE_INLINE void end_payload(mlpe_h2_deframer *d, int64_t t_ns, uint64_t at) {
    if (d->padding)
        d->state = ST_PADDING;
    else
        end_frame(d, t_ns, at);
}

/* ------------------------------------------------------------------------ */
/* API                                                                      */
/* ------------------------------------------------------------------------ */

int mlpe_h2_init(mlpe_h2_deframer *d, mlpe_h2_sink sink, uint32_t max_frame_size,
                 uint32_t connection_window, uint32_t stream_window) {
    memset(d, 0, sizeof *d);
    d->sink = sink;
    mlpe_buf_init(&d->passthrough);
    mlpe_buf_init(&d->window_updates);
    d->state = ST_HEADER;
    if (max_frame_size < MLPE_H2_MIN_MAX_FRAME_SIZE ||
        max_frame_size > MLPE_H2_MAX_MAX_FRAME_SIZE || connection_window < 1 ||
        connection_window > MLPE_H2_MAX_WINDOW || stream_window < 1 ||
        stream_window > MLPE_H2_MAX_WINDOW)
        return MLPE_H2_E_RANGE;
    d->max_frame_size = max_frame_size;
    /* Half a window, so that the peer never waits for an increment while it
     * has data to send; at least 1, since an increment of 0 is an error
     * [6.9] (and an empty frame must not send one). */
    d->conn_threshold = connection_window / 2 ? connection_window / 2 : 1;
    d->stream_threshold = stream_window / 2 ? stream_window / 2 : 1;
    return MLPE_OK;
}

void mlpe_h2_free(mlpe_h2_deframer *d) {
    free(d->table);
    free(d->events);
    free(d->released);
    mlpe_buf_free(&d->passthrough);
    mlpe_buf_free(&d->window_updates);
    d->table = NULL;
    d->table_cap = 0;
    d->n_streams = 0;
    d->events = NULL;
    d->n_events = d->cap_events = 0;
    d->released = NULL;
    d->n_released = d->cap_released = 0;
    d->cur_live = 0;
    d->cur_decoder = NULL;
}

int mlpe_h2_register(mlpe_h2_deframer *d, uint32_t stream_id, void *decoder) {
    size_t i;
    if (stream_id == 0 || stream_id > MLPE_H2_MAX_STREAM_ID)
        return MLPE_H2_E_STREAM_ID;
    if (find_stream(d, stream_id) != NULL)
        return MLPE_H2_E_DUPLICATE;
    /* At most half full: short probe sequences, and always an empty slot. */
    if ((d->n_streams + 1) * 2 > d->table_cap && grow_table(d) != MLPE_OK)
        return MLPE_E_NOMEM;
    i = free_slot(d, stream_id);
    d->table[i].stream_id = stream_id;
    d->table[i].unacked = 0;
    d->table[i].decoder = decoder;
    d->table[i].failed = 0;
    d->n_streams++;
    d->last_hit = i;
    return MLPE_OK;
}

int mlpe_h2_unregister(mlpe_h2_deframer *d, uint32_t stream_id) {
    mlpe_h2_stream *s = find_stream(d, stream_id);
    if (s == NULL)
        return 0;
    remove_slot(d, (size_t)(s - d->table));
    if (d->cur_live && d->cur_id == stream_id) {
        /* The frame in progress finishes without its decoder. */
        d->cur_live = 0;
        d->cur_failed = 1;
        d->cur_decoder = NULL;
    }
    return 1;
}

size_t mlpe_h2_feed(mlpe_h2_deframer *d, const uint8_t *data, size_t len, int64_t t_ns) {
    size_t pos = 0;
    uint32_t take;
    if (d->error)
        return 0;
    while (pos < len && !d->error) {
        switch (d->state) {
        case ST_HEADER: {
            const uint8_t *h;
            if (MLPE_LIKELY(d->header_len == 0 && len - pos >= MLPE_H2_FRAME_HEADER_SIZE)) {
                h = data + pos;
                pos += MLPE_H2_FRAME_HEADER_SIZE;
            } else {
                size_t part = MLPE_H2_FRAME_HEADER_SIZE - d->header_len;
                if (part > len - pos)
                    part = len - pos;
                memcpy(d->header + d->header_len, data + pos, part);
                d->header_len += part;
                pos += part;
                if (d->header_len < MLPE_H2_FRAME_HEADER_SIZE)
                    goto done; /* the input is used up */
                d->header_len = 0;
                h = d->header;
            }
            if (start_frame(d, h))
                goto done; /* D5: the caller runs h2 over it first */
            if (d->state == ST_HEADER)
                end_frame(d, t_ns, d->offset + pos); /* an empty DATA frame, consumed */
            break;
        }
        case ST_PASS:
            take = min_u32(d->remaining, len - pos);
            if (mlpe_buf_append(&d->passthrough, data + pos, take) != MLPE_OK) {
                fail_nomem(d);
                goto done;
            }
            pos += take;
            d->remaining -= take;
            if (d->remaining == 0) {
                d->state = ST_HEADER;
                goto done; /* D5: the caller runs h2 over it first */
            }
            break;
        case ST_PAD_LENGTH: {
            uint32_t pad = data[pos++];
            d->remaining--;
            if (pad > d->remaining) { /* D2: Pad Length >= the frame's length [6.1] */
                d->error = MLPE_H2_PROTOCOL_ERROR;
                d->error_pos = d->offset + pos - 1;
                goto done;
            }
            d->padding = pad;
            d->remaining -= pad;
            d->state = ST_PAYLOAD;
            if (d->remaining == 0)
                end_payload(d, t_ns, d->offset + pos);
            break;
        }
        case ST_PAYLOAD:
            take = min_u32(d->remaining, len - pos);
            if (!d->cur_failed) {
                /* D7: the piece, and the padding after it that this input holds. */
                uint64_t end = d->offset + pos + take;
                if (take == d->remaining)
                    end += min_u32(d->padding, len - pos - take);
                report(d, d->sink.feed_body(d->cur_decoder, data + pos, take, t_ns), end);
            }
            pos += take;
            d->remaining -= take;
            if (d->remaining == 0)
                end_payload(d, t_ns, d->offset + pos);
            break;
        default: /* ST_PADDING */
            take = min_u32(d->padding, len - pos);
            pos += take;
            d->padding -= take;
            if (d->padding == 0)
                end_frame(d, t_ns, d->offset + pos);
            break;
        }
    }
done:
    d->offset += pos;
    if (d->error == MLPE_H2_INTERNAL_ERROR)
        d->error_pos = d->offset; /* set by this call: later calls return at once */
    return pos;
}
