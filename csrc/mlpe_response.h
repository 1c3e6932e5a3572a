/*
 * mlpe_response.h -- one streaming (or non-streaming) OpenAI response, or
 * SGLang /generate response, from wire bytes to its summary, sans-IO.
 *
 * Theory of operation
 * -------------------
 * The composite runs the three layers in one pass over each input piece:
 *
 *     wire bytes --mlpe_h1--> body bytes --mlpe_sse--> events --mlpe_oai--> fragments
 *
 * and accumulates what a load generator records for the response, so that a
 * caller crosses into C once per network read and reads the summary once per
 * response.  No per-event allocation happens once the buffers have grown.
 *
 * Rules:
 *  R1. The body is an event stream when the head's Content-Type is
 *      text/event-stream (case-insensitive, parameters allowed); otherwise a
 *      2xx body is one JSON completion, decoded at the end of the message as
 *      a single chunk (non-streaming requests).  A non-2xx body is kept (up to
 *      MLPE_RESPONSE_ERROR_BODY_MAX bytes, the rest dropped) for the error
 *      message; its status is the failure (MLPE_E_HTTP_STATUS in summaries).
 *  R2. A Content-Encoding other than identity is MLPE_E_CONTENT_ENCODING:
 *      mlpe-fast never sends Accept-Encoding, so it cannot decode one.
 *  R3. A content-bearing event is one whose chunk has non-empty content or
 *      reasoning, or a tool call with a non-empty name or arguments fragment
 *      (the spec's first token: "first non-empty text fragment in any
 *      response category").  t_first is the stamp of the first one; the
 *      *_first_len fields record how much text existed right after it, so
 *      that "text after the first content-bearing event" (the TPOT token
 *      count, spec section 1.2) is the suffix beyond those lengths.
 *  R4. "data: [DONE]" ends the stream: t_done is its stamp and later events
 *      are counted in events_after_done and otherwise ignored.  Without it,
 *      t_done is the stamp of the read that completed the HTTP message.  A
 *      connection closed after "[DONE]" but before the end of the HTTP
 *      message (the last chunk missing, a Content-Length short) completes
 *      the response with keep_alive 0: the stream said it was done, and its
 *      timing is whole.
 *  R5. A chunk that fails to decode (codes 401-405) is counted; the first
 *      one's code, detail and raw data are kept; its neighbours still decode.
 *  R6. finish_reason and usage: the last non-null value wins.  Tool calls are
 *      rebuilt per index in order of first appearance: id and type take the
 *      last non-null value, name and arguments fragments are appended.
 *  R7. Bytes that arrive after the message is complete are not parsed (there
 *      is no request outstanding to answer): they are counted in
 *      unexpected_bytes and keep_alive becomes 0.
 *  R8. Errors of the layers are terminal.  error_pos counts wire bytes for
 *      HTTP framing errors, and de-framed body bytes for the errors of the
 *      body (MLPE_E_EVENT_TOO_LARGE, MLPE_E_BODY_TOO_LARGE, and
 *      MLPE_E_CONTENT_ENCODING, which is found before body byte 0);
 *      MLPE_E_TEXT_NOT_CUMULATIVE (R11) counts bytes of the text.
 *  R10. A 2xx event stream whose message ends without a single event
 *      (nothing, or bytes that never formed one) is MLPE_E_NO_EVENTS at the
 *      body's length: it is no answer, however cleanly it was framed.
 *  R11. In the SGLang dialect (limits.dialect MLPE_DIALECT_SGLANG, chunks
 *      by G1-G7 of mlpe_oai.h) a chunk's content is the whole text so far:
 *      the content it adds is its text beyond the content accumulated,
 *      which it must start with byte for byte.  A text that does not is not
 *      appended, nor is anything else of its chunk: the response fails with
 *      MLPE_E_TEXT_NOT_CUMULATIVE at the length of the two texts' common
 *      prefix (a server started with --incremental-streaming-output sends
 *      deltas, which cannot be told from a text that was rewritten).  A text
 *      equal to the accumulated one adds nothing and is not content-bearing
 *      (R3); a chunk without text (null, absent, or a chunk error, R5) adds
 *      nothing either, and the next text still covers what it missed.  A
 *      JSON body (R1) is one chunk: its text is the whole answer.  Limit:
 *      a delta stream whose every delta repeats the text before it (the
 *      same one-character token again and again) reads as cumulative text.
 *      Cost: each event's text is compared with the whole text before it,
 *      so a response costs time quadratic in its length, as SGLang's
 *      cumulative stream itself does in bytes.
 *  R9. (framing done elsewhere, e.g. HTTP/2): the head arrives as a status and
 *      the two fields R1/R2 read (NULL/0 when absent), the body as de-framed
 *      payload bytes, the end of the message as a call.  The h1 layer is
 *      unused; keep_alive stays 0.  Everything else -- R1-R6, R8 with its
 *      body-byte positions, the limits, the summary -- is what the same head
 *      and body give over HTTP/1.1; R7 does not arise (the framing layer
 *      owns the connection).
 *  R12. Latency detail beside R3 (mlpe-fast's own figures, not MLPerf's):
 *      t_first_content is the stamp of the first event with non-empty
 *      content -- not reasoning, not a tool call; under R11 the text it
 *      adds -- and t_second the stamp of the second content-bearing event.
 *      Every content-bearing event after the first adds one gap to gaps:
 *      its stamp minus the latest stamp of the content-bearing events
 *      before it, 0 when that is negative (stamps that went back, as a
 *      kernel stamp's clock map can by its error bound).  count, sum_ns,
 *      min_ns, max_ns are exact; zero counts the gaps of 0 (two events
 *      completed by one input piece, i.e. one network read, share its
 *      stamp); buckets is a histogram of fixed size, so that a response
 *      of any length costs the same memory and each gap O(1):
 *        - a gap v below MLPE_GAP_SUB (16) ns is bucket v, exact;
 *        - a gap in [2^m, 2^(m+1)), 4 <= m < MLPE_GAP_MAX_LOG2, is in one
 *          of MLPE_GAP_SUB equal buckets of that octave: bucket
 *          MLPE_GAP_SUB * (m - 3) + (v >> (m - 4)) - MLPE_GAP_SUB, whose
 *          lower bound is (16 + k) << (m - 4) for its k = v >> (m - 4) - 16
 *          and whose width 2^(m - 4) is at most 1/16 of any gap in it;
 *        - a gap of 2^MLPE_GAP_MAX_LOG2 ns (18.3 minutes) or more is
 *          counted in the last bucket, whose upper end is then max_ns.
 *      gaps.lo and gaps.hi are the lowest and the highest bucket counted
 *      (hi < lo while there is none).  With limits.no_gap_histogram the
 *      buckets stay empty; everything else of R12 is kept.  Limits: a
 *      bucket counts up to 2^32 - 1 gaps; a response would need over 80 GB
 *      of events to pass it (a content-bearing event is 20 bytes or more).
 *      Stamps are taken to be CLOCK_MONOTONIC ns, 0 to 2^62, so that a gap
 *      and the sum of a response's gaps fit in int64.
 *
 * Input modes
 * -----------
 * A response is fed either wire bytes (mlpe_response_feed, _feed_eof) or, by
 * R9, a head, body pieces and an end (mlpe_response_set_head, _feed_body,
 * _end_body); the first call chooses (input_mode).  A call out of order is
 * the caller's bug, not the peer's, so it is refused without a trace: it
 * returns MLPE_RESPONSE_ERROR and changes nothing -- error stays 0 (or the
 * earlier error), so a caller can tell a refusal from a terminal error.
 * Refused are: mlpe_response_feed / _feed_eof in body mode; set_head once any
 * input came (or with a status outside 200-599: 1xx heads are the framing
 * layer's business); feed_body / end_body before set_head, in wire mode or
 * once end_body completed the message.  In wire mode a feed after the
 * message is R7, not a refusal, as before.
 */
#ifndef MLPE_RESPONSE_H
#define MLPE_RESPONSE_H

#include "mlpe_common.h"
#include "mlpe_h1.h"
#include "mlpe_oai.h"
#include "mlpe_sse.h"

/* 16 MiB for a non-streaming body: a whole answer of 100k tokens with usage
 * is under 1 MiB; top-20 logprobs for 32k tokens is about 10 MiB. */
#define MLPE_RESPONSE_DEFAULT_MAX_BODY (16u << 20)
/* An error body is for a human: the first 64 KiB say what went wrong. */
#define MLPE_RESPONSE_ERROR_BODY_MAX (64u << 10)

/* Flags returned by every input function: what this call completed. */
#define MLPE_RESPONSE_HEAD 1u  /* the final response head */
#define MLPE_RESPONSE_FIRST 2u /* the first content-bearing event */
#define MLPE_RESPONSE_DONE 4u  /* the whole HTTP message */
#define MLPE_RESPONSE_ERROR 8u /* a terminal error (see error, error_pos) */

typedef enum mlpe_body_kind {
    MLPE_BODY_NONE = 0,  /* no head yet */
    MLPE_BODY_SSE = 1,
    MLPE_BODY_JSON = 2,
    MLPE_BODY_ERROR = 3
} mlpe_body_kind;

/* Which input functions a response takes; fixed by the first call. */
typedef enum mlpe_response_input {
    MLPE_INPUT_NONE = 0, /* no input yet */
    MLPE_INPUT_WIRE = 1, /* HTTP/1.1 bytes: mlpe_response_feed, _feed_eof */
    MLPE_INPUT_BODY = 2  /* R9: mlpe_response_set_head, _feed_body, _end_body */
} mlpe_response_input;

/* R12: the gap histogram's layout. */
#define MLPE_GAP_SUB_BITS 4
#define MLPE_GAP_SUB (1 << MLPE_GAP_SUB_BITS) /* buckets per power of two */
#define MLPE_GAP_MAX_LOG2 40                  /* 2^40 ns and more: the last bucket */
#define MLPE_GAP_BUCKETS (MLPE_GAP_SUB * (MLPE_GAP_MAX_LOG2 - MLPE_GAP_SUB_BITS + 1))

/* R12: the bucket of a gap of v ns. */
MLPE_INLINE uint32_t mlpe_gap_bucket(uint64_t v) {
    int m;
    if (v < MLPE_GAP_SUB)
        return (uint32_t)v;
#if defined(__GNUC__) || defined(__clang__)
    m = 63 - __builtin_clzll(v);
#else
    for (m = 63; !(v >> m); m--)
        ;
#endif
    if (m >= MLPE_GAP_MAX_LOG2)
        return MLPE_GAP_BUCKETS - 1;
    return (uint32_t)(MLPE_GAP_SUB * (m - MLPE_GAP_SUB_BITS + 1) +
                      (int)(v >> (m - MLPE_GAP_SUB_BITS)) - MLPE_GAP_SUB);
}

/* R12: the gaps between a response's content-bearing events. */
typedef struct mlpe_gaps {
    uint64_t count;  /* content-bearing events after the first */
    uint64_t zero;   /* gaps of 0 ns */
    int64_t sum_ns, min_ns, max_ns; /* 0 while count is 0 */
    uint32_t lo, hi; /* the buckets counted lie in [lo, hi]; hi < lo: none */
    uint32_t buckets[MLPE_GAP_BUCKETS];
} mlpe_gaps;

typedef struct mlpe_tool_call {
    int32_t index;
    mlpe_buf id, type, name, arguments;
    size_t name_first_len, arguments_first_len; /* see R3 */
} mlpe_tool_call;

/* The limits and options of a response (a zeroed struct: the defaults). */
typedef struct mlpe_response_limits {
    mlpe_h1_limits h1;   /* zeros: the h1 defaults */
    size_t max_event;    /* 0: MLPE_SSE_DEFAULT_MAX_EVENT */
    size_t max_body;     /* 0: MLPE_RESPONSE_DEFAULT_MAX_BODY */
    int record_chunk_times; /* keep one stamp per content-bearing event */
    int dialect;         /* mlpe_dialect of the chunks (0: OpenAI; SGLang: R11) */
    int no_gap_histogram; /* R12: leave gaps.buckets empty */
} mlpe_response_limits;

typedef struct mlpe_response {
    /* --- public, read-only --- */
    int input_mode;                /* mlpe_response_input */
    int status;                    /* 0 until the head */
    int body_kind;                 /* mlpe_body_kind */
    int keep_alive;                /* final once complete */
    int complete;                  /* the HTTP message is complete */
    int done_seen;                 /* "[DONE]" was received */
    int64_t t_head, t_first, t_done; /* -1 until reached */
    int64_t t_first_content, t_second; /* R12, -1 until reached */
    uint64_t events;               /* SSE events dispatched, [DONE] included */
    uint64_t content_events;       /* content-bearing events (R3) */
    uint64_t events_after_done;
    uint64_t chunk_errors;         /* R5 */
    int first_chunk_error;         /* its code, 0 when none */
    int64_t first_chunk_error_t_ns;
    mlpe_buf first_chunk_error_detail;
    mlpe_buf first_chunk_error_data;
    uint64_t unexpected_bytes;     /* R7 */
    mlpe_buf content, reasoning;
    size_t content_first_len, reasoning_first_len; /* R3 */
    int has_finish_reason, has_usage;
    mlpe_buf finish_reason;
    mlpe_buf usage;                /* raw JSON text of the last usage object */
    mlpe_buf body;                 /* the JSON or error body (R1) */
    mlpe_tool_call *tools;
    size_t n_tools;
    int64_t *chunk_times;          /* when record_chunk_times */
    size_t n_chunk_times;
    mlpe_gaps gaps;                /* R12 */
    int error;                     /* terminal mlpe_err, 0 when none */
    uint64_t error_pos;            /* R8 */

    /* --- layers, readable (the binding builds ResponseHead from h1) --- */
    mlpe_h1_parser h1;
    mlpe_sse_decoder sse;
    mlpe_oai_decoder oai;

    /* --- private --- */
    size_t max_body;
    int record_chunk_times;
    int gap_histogram;             /* R12: !limits.no_gap_histogram */
    int64_t t_last_bearing;        /* R12: the latest stamp of a content-bearing event */
    int dialect;                   /* mlpe_dialect (R11) */
    size_t cap_tools, cap_chunk_times;
    uint64_t body_offset;          /* de-framed body bytes so far */
} mlpe_response;

int mlpe_response_init(mlpe_response *r, const mlpe_response_limits *limits);
void mlpe_response_free(mlpe_response *r);

/* Feeds one piece read at t_ns; returns MLPE_RESPONSE_* flags. */
unsigned mlpe_response_feed(mlpe_response *r, const uint8_t *data, size_t len, int64_t t_ns);

/* The peer closed the connection at t_ns; returns flags (DONE when this
 * completes a close-delimited body, ERROR with MLPE_E_INCOMPLETE when the
 * message was cut short). */
unsigned mlpe_response_feed_eof(mlpe_response *r, int64_t t_ns);

/* R9, body mode.  The final head arrived at t_ns: its status (200-599) and
 * the values of its Content-Type and Content-Encoding fields, NULL when the
 * field is absent (the length is then ignored; a present empty value is a
 * non-NULL pointer with length 0).  Applies R1/R2 as for an HTTP/1.1 head;
 * returns HEAD, or ERROR (MLPE_E_CONTENT_ENCODING at position 0). */
unsigned mlpe_response_set_head(mlpe_response *r, int status,
                                const uint8_t *content_type, size_t content_type_len,
                                const uint8_t *content_encoding, size_t content_encoding_len,
                                int64_t t_ns);

/* R9: de-framed body bytes that arrived at t_ns (data may be NULL when len
 * is 0); returns FIRST when they completed the first content-bearing event,
 * ERROR on a terminal error of the body (R8). */
unsigned mlpe_response_feed_body(mlpe_response *r, const uint8_t *data, size_t len, int64_t t_ns);

/* R9: the message ended at t_ns.  Returns DONE, with FIRST when a JSON body
 * (decoded now, R1) carried content; t_done is t_ns unless "[DONE]" came
 * (R4); keep_alive stays 0. */
unsigned mlpe_response_end_body(mlpe_response *r, int64_t t_ns);

#endif /* MLPE_RESPONSE_H */
