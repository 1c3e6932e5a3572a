/*
 * mlpe_sse.h -- incremental Server-Sent Events decoder, sans-IO.
 *
 * Implements the event-stream interpretation of the WHATWG HTML standard,
 * section 9.2.6 ("Interpreting an event stream"), on bytes:
 *
 *  1. Lines end in CRLF, LF or CR.  A CR that ends one input piece and an LF
 *     that starts the next are one line end (the decoder remembers the CR).
 *  2. One UTF-8 BOM (EF BB BF) at the very start of the stream is dropped,
 *     even when its bytes arrive in different pieces.  A prefix of it that
 *     turns out not to be a BOM (EF BB 41...) is kept: it starts the first
 *     line.  A BOM anywhere else is ordinary bytes.
 *  3. An empty line dispatches: the last event ID string is set to the last
 *     event ID buffer; then, if the data buffer is empty, the data and
 *     event-type buffers are reset and nothing is reported; otherwise one
 *     trailing LF is removed from the data buffer and an event is reported.
 *  4. A line starting with ':' is a comment and is ignored.
 *  5. Otherwise the field name is everything before the first ':' (the whole
 *     line when there is none, with an empty value) and one SP after the
 *     colon is removed from the value.  Names are case-sensitive.
 *  6. data: value + LF is appended to the data buffer.  event: sets the event
 *     type.  id: sets the last event ID buffer unless the value contains NUL.
 *     retry: sets the reconnection time when the value is one or more ASCII
 *     digits (values above 2^63-1 are ignored).  Other names are ignored.
 *  7. At end of stream an incomplete event is discarded (the standard's
 *     rule); mlpe_sse_pending reports whether anything was pending, so that
 *     callers can say a stream was cut mid-event.
 *
 * The decoder does not decode UTF-8: values are bytes, and bindings decode
 * them with U+FFFD replacement as the standard says.  (Splitting bytes first
 * and decoding each value afterwards gives the same text as decoding the
 * stream first: CR, LF, ':', SP and NUL are ASCII, and an ASCII byte always
 * ends an invalid UTF-8 sequence.)  The "[DONE]" sentinel of OpenAI streams is
 * an ordinary event here; mlpe_sse_is_done tests for it.
 *
 * Size limit: max_event bounds what one pending event may hold -- the data
 * buffer (each value plus its LF, as the standard builds it) plus the line
 * being read (its raw bytes, field name included, line end excluded).  When a
 * byte would make that sum exceed max_event the decoder fails with
 * MLPE_E_EVENT_TOO_LARGE at that byte's absolute offset.  The event type and
 * id are lines too and so are bounded by the same limit: no buffer of the
 * decoder holds more than max_event bytes, whatever the input.  Errors are
 * terminal: every later mlpe_sse_feed returns MLPE_SSE_ERROR again.
 */
#ifndef MLPE_SSE_H
#define MLPE_SSE_H

#include "mlpe_common.h"

/* 1 MiB: an OpenAI chunk is 150 B to a few KiB (a final chunk with usage, or
 * per-token logprobs with top-20 alternatives, stays under 10 KiB), and a
 * server that packs a whole answer into one event still fits: 1 MiB is about
 * 250,000 tokens of text, beyond any model's output limit.  A stream that
 * never sends a blank line cannot grow memory past this. */
#define MLPE_SSE_DEFAULT_MAX_EVENT (1u << 20)

typedef enum mlpe_sse_result {
    MLPE_SSE_NEED_MORE = 0, /* all input used; no event completed */
    MLPE_SSE_EVENT = 1,     /* *ev holds a dispatched event */
    MLPE_SSE_ERROR = 2      /* see error / error_pos */
} mlpe_sse_result;

/* A dispatched event.  The spans point into the decoder or, to save a copy,
 * into the data passed to the mlpe_sse_feed call that returned the event (an
 * event whose single data line lies whole in that input).  They stay valid
 * until the next call on the decoder, and no longer than that input: use
 * them before feeding again or releasing the input.  Their ptr is never
 * NULL, even when len is 0. */
typedef struct mlpe_sse_event {
    mlpe_span data;  /* data lines joined by LF, no trailing LF */
    mlpe_span type;  /* event type; empty means "message" */
    mlpe_span id;    /* the last event ID buffer at dispatch (persists) */
} mlpe_sse_event;

typedef struct mlpe_sse_decoder {
    /* --- public, read-only --- */
    int64_t retry;       /* reconnection time in ms from the last valid retry: field, -1 if none */
    int error;           /* mlpe_err */
    uint64_t error_pos;
    uint64_t offset;     /* bytes consumed since init (BOM included) */

    /* --- private --- */
    size_t max_event;
    mlpe_buf line;       /* the partial line carried across feeds (no line end) */
    mlpe_buf data;       /* data buffer: every data value followed by LF */
    mlpe_span borrowed;  /* during a call only: the event's first data value,
                            still in the caller's input (not yet in data) */
    mlpe_buf type;       /* event type buffer */
    mlpe_buf last_id;    /* last event ID string: the ID buffer at the last blank line */
    mlpe_buf next_id;    /* last event ID buffer, while id_changed */
    int bom_matched;     /* BOM bytes matched at stream start; 3 once decided */
    int after_cr;        /* the previous piece ended with CR: skip one leading LF */
    int id_changed;      /* an id field came after the last blank line */
    int block_open;      /* a data, event or id field came after the last blank line */
} mlpe_sse_decoder;

/* max_event 0 means MLPE_SSE_DEFAULT_MAX_EVENT.  Pair with mlpe_sse_free.
 * Allocates nothing (buffers grow on demand), so it always returns MLPE_OK. */
int mlpe_sse_init(mlpe_sse_decoder *d, size_t max_event);
void mlpe_sse_free(mlpe_sse_decoder *d);

/* Decodes from data[0..len); stops after the line that dispatches an event.
 * *consumed is set to the bytes used (all of them for NEED_MORE, 0 for
 * ERROR).  data may be NULL when len is 0. */
mlpe_sse_result mlpe_sse_feed(mlpe_sse_decoder *d, const uint8_t *data, size_t len,
                              size_t *consumed, mlpe_sse_event *ev);

/* Non-zero when the stream so far ends inside an event: a partial line (or a
 * partial BOM) is held, or a data, event or id field (an id without NUL) came
 * after the last blank line.  Comments, retry and unknown fields alone do not
 * make an event pending: servers send them as keep-alives. */
int mlpe_sse_pending(const mlpe_sse_decoder *d);

/* The last event ID string (rule 3): what an EventSource would send as
 * Last-Event-ID when reconnecting.  An id field counts once a blank line has
 * followed it.  Valid until the next call on the decoder; ptr never NULL. */
mlpe_span mlpe_sse_last_event_id(const mlpe_sse_decoder *d);

/* Non-zero when an event's data is exactly "[DONE]" (OpenAI's stream end). */
MLPE_INLINE int mlpe_sse_is_done(const mlpe_sse_event *ev) {
    return ev->data.len == 6 && memcmp(ev->data.ptr, "[DONE]", 6) == 0;
}

#endif /* MLPE_SSE_H */
