/*
 * mlpe_h2.h -- HTTP/2 DATA de-framer in front of an HTTP/2 library, sans-IO.
 *
 * Theory of operation
 * -------------------
 * The h2 library (Python) owns an HTTP/2 connection: HPACK, stream states,
 * SETTINGS, PING, GOAWAY, RST_STREAM and the outbound flow-control windows.
 * It parses frames at about 20 us each, and a streamed completion arrives as
 * one DATA frame per token.  So this de-framer sits in front of it and takes
 * over the one frame type that is per token:
 *
 *     server bytes --mlpe_h2--+-- DATA of registered streams --> the sink: a response
 *                             |                                  decoder (body mode, R9)
 *                             +-- every other frame ------------> pass-through bytes --> h2
 *
 * The caller registers a stream (with its response decoder, head already
 * set) once h2 has reported the stream's response HEADERS; from then on the
 * stream's DATA payloads go straight to the decoder, stamped with the read
 * that carried them, exactly as an HTTP/1.1 body does.  One call into C per
 * network read does all of it; the caller crosses back into Python only for
 * what the de-framer hands back: pass-through bytes, a stream's milestones,
 * WINDOW_UPDATE frames to write, a connection error.
 *
 * Rules (RFC 9113 sections in brackets):
 *  D1. The input is every byte the server sent after the client's connection
 *      preface: a sequence of frames, each a 9-byte header and its payload
 *      [4.1].  The reserved bit of the stream identifier is ignored [4.1].
 *  D2. A DATA frame (type 0) is consumed here when its stream is registered
 *      and its length is at most max_frame_size [4.2]; its payload, less the
 *      Pad Length byte and the padding of a PADDED frame [6.1], is fed to the
 *      stream's decoder as it arrives (a frame split across reads is fed
 *      piece by piece, each piece with its read's stamp; the decoder is
 *      never called with 0 bytes).  A Pad Length at or beyond the frame's
 *      length is a connection error of type PROTOCOL_ERROR [6.1]: error is
 *      set, error_pos is the offset of the Pad Length byte, and nothing more
 *      is consumed.
 *  D3. Flow control [6.9]: the whole payload of a consumed frame (padding
 *      included, [6.1]) counts against the connection's and the stream's
 *      receive windows.  It is acknowledged at once, since the decoder has
 *      consumed it: when the unacknowledged bytes of the connection reach
 *      half of connection_window, a WINDOW_UPDATE for stream 0 [6.9] goes to
 *      window_updates; the same for a stream and stream_window while it is
 *      registered and not ended (a closed stream takes no more DATA).  The
 *      thresholds are checked at the end of each frame.
 *  D4. END_STREAM on a consumed frame [6.1]: after the payload the decoder's
 *      body ends (the sink's end_body), the stream is unregistered (its id
 *      is added to `released`), and a zero-length DATA frame with END_STREAM
 *      for that stream is appended to the pass-through bytes, so that h2's
 *      stream state closes as if it had seen the frame [5.1] (its
 *      flow-controlled length is 0: h2's windows are unaffected).
 *  D5. Every other frame (any other type, DATA of an unregistered stream or
 *      of stream 0, DATA over max_frame_size, PADDED DATA too short for its
 *      Pad Length field) is appended unchanged, header and payload, to the
 *      pass-through bytes: h2 applies the rules to it, errors included.
 *      mlpe_h2_feed returns right after such a frame is complete, so that
 *      the caller can run h2 over it (and register the stream whose HEADERS
 *      it was) before the next frame is looked at.  Bytes of an incomplete
 *      frame are passed through as they come (h2 buffers partial frames).
 *  D6. Each decoder call that returns FIRST, DONE or ERROR adds one event
 *      {stream_id, flags} in order; flags are MLPE_RESPONSE_FIRST and/or
 *      MLPE_RESPONSE_DONE, or MLPE_RESPONSE_ERROR alone (the decoder failed:
 *      its error and error_pos say why).  A stream whose decoder failed
 *      reports ERROR once; its later payloads are dropped but still count
 *      for flow control (D3), and END_STREAM still unregisters it and is
 *      passed through (D4), without DONE.
 *  D7. Each event also says where its frame ends in the input (`end`, an
 *      offset like `offset`): just past the payload piece whose decoder
 *      call gave it and the frame's padding that follows within the same
 *      call's input, or, for the decoder's end_body, just past the frame.
 *      A caller that knows where its read ends learns how many bytes the
 *      read carried past the frame that completed a stream's first token:
 *      the frames of other streams (or the stream's own next token) that a
 *      read's one arrival stamp covers too (issue 23; the self-audit).
 *
 * Outputs
 * -------
 * passthrough, window_updates, events and released accumulate across calls
 * until the caller empties them (by setting their len / n_* to 0, which
 * keeps the memory for the next read).  A decoder must stay valid while its
 * stream is registered: until mlpe_h2_unregister, or until its id appears in
 * released.  mlpe_h2_unregister of the stream whose frame is half consumed
 * finishes that frame without feeding it (its bytes still count, D3; its
 * END_STREAM is still passed through, D4): the decoder may be freed at once.
 *
 * Limits
 * ------
 * max_frame_size is the client's SETTINGS_MAX_FRAME_SIZE, 2^14 .. 2^24-1
 * [6.5.2]; the windows are 1 .. 2^31-1 [6.9.1].  An increment is below
 * half a window plus one frame, so it never exceeds 2^31-1 [6.9].  Memory is
 * the stream table (24-byte slots, at most half of them used, sized for the
 * most streams registered at once; it never shrinks) and the four outputs,
 * which grow with what one read carries and are reused: nothing is
 * allocated per frame once they have grown.  An allocation failure is error MLPE_H2_INTERNAL_ERROR [7] (the
 * error code a GOAWAY would carry), terminal like a PROTOCOL_ERROR.
 */
#ifndef MLPE_H2_H
#define MLPE_H2_H

#include "mlpe_common.h"
/* For the MLPE_RESPONSE_* flags a sink returns (D6): this unit calls no
 * function of mlpe_response.h (see mlpe_h2_sink). */
#include "mlpe_response.h"

#define MLPE_H2_FRAME_HEADER_SIZE 9u
#define MLPE_H2_WINDOW_UPDATE_SIZE 13u /* a header and a 4-byte increment [6.9] */

/* Connection error codes [7]. */
#define MLPE_H2_PROTOCOL_ERROR 0x1
#define MLPE_H2_INTERNAL_ERROR 0x2

/* Range of SETTINGS_MAX_FRAME_SIZE [6.5.2] and of a window [6.9.1]. */
#define MLPE_H2_MIN_MAX_FRAME_SIZE 16384u
#define MLPE_H2_MAX_MAX_FRAME_SIZE 16777215u
#define MLPE_H2_MAX_WINDOW 2147483647u
#define MLPE_H2_MAX_STREAM_ID 2147483647u

/* Results of mlpe_h2_init and mlpe_h2_register besides MLPE_OK and
 * MLPE_E_NOMEM: the caller's mistakes, so not mlpe_err codes. */
#define MLPE_H2_E_RANGE (-1)     /* init: a setting out of its range */
#define MLPE_H2_E_STREAM_ID (-2) /* register: stream id 0 or above 2^31-1 */
#define MLPE_H2_E_DUPLICATE (-3) /* register: the stream is already registered */

/* Where a registered stream's DATA goes: the functions the de-framer calls
 * with a stream's decoder (the pointer given to mlpe_h2_register).  They
 * have the contracts of mlpe_response_feed_body and mlpe_response_end_body
 * (R9), MLPE_RESPONSE_* flags included: a plain C caller (the fuzz driver)
 * wraps those two.
 *
 * The de-framer calls the decoder through these rather than linking
 * mlpe_response.c, so that the Python binding can route every call through
 * its decoder object's own checks, and the unit is compiled into one
 * extension module only (setup.py). */
typedef struct mlpe_h2_sink {
    unsigned (*feed_body)(void *decoder, const uint8_t *data, size_t len, int64_t t_ns);
    unsigned (*end_body)(void *decoder, int64_t t_ns);
} mlpe_h2_sink;

typedef struct mlpe_h2_event {
    uint32_t stream_id;
    uint32_t flags; /* MLPE_RESPONSE_FIRST | _DONE, or _ERROR (D6) */
    uint64_t end;   /* input offset just past the frame's bytes (D7) */
} mlpe_h2_event;

/* One slot of the stream table (stream_id 0: empty). */
typedef struct mlpe_h2_stream {
    uint32_t stream_id;
    uint32_t unacked;      /* payload bytes not yet acknowledged (D3) */
    void *decoder;         /* handed to the sink */
    int failed;            /* ERROR reported, or ended: no more feeding (D6) */
} mlpe_h2_stream;

typedef struct mlpe_h2_deframer {
    /* --- public, read-only --- */
    uint32_t max_frame_size;
    int error;             /* 0, MLPE_H2_PROTOCOL_ERROR or MLPE_H2_INTERNAL_ERROR */
    uint64_t error_pos;    /* input offset of the byte in error (D2) */
    uint64_t offset;       /* input bytes consumed since init */
    size_t n_streams;      /* registered streams */

    /* --- outputs: read, then empty by setting len / n_* to 0 --- */
    mlpe_buf passthrough;     /* bytes for h2 (D4, D5) */
    mlpe_buf window_updates;  /* WINDOW_UPDATE frames to send (D3) */
    mlpe_h2_event *events;    /* D6 */
    size_t n_events;
    uint32_t *released;       /* streams unregistered by END_STREAM (D4) */
    size_t n_released;

    /* --- private --- */
    mlpe_h2_sink sink;
    uint32_t conn_threshold, stream_threshold;
    uint32_t conn_unacked;
    mlpe_h2_stream *table;    /* open addressing, linear probing */
    size_t table_cap;         /* 0 or a power of two */
    unsigned table_shift;     /* 32 - log2(table_cap), for Fibonacci hashing */
    size_t last_hit;          /* slot of the last lookup (consecutive frames share a stream) */
    size_t cap_events, cap_released;
    int state;                /* where the input is within the current frame */
    uint8_t header[MLPE_H2_FRAME_HEADER_SIZE]; /* a header cut by the end of a read */
    size_t header_len;
    uint32_t remaining;       /* payload bytes left in the current state */
    uint32_t padding;         /* padding after the data of a PADDED frame */
    /* The consumed frame in progress (state beyond the header). */
    uint32_t cur_id;
    void *cur_decoder;        /* NULL once its stream was unregistered */
    int cur_failed;           /* feed nothing more to it */
    int cur_live;             /* still registered (the registration the frame began with) */
    int cur_end_stream;
} mlpe_h2_deframer;

/* Checks the ranges (see Limits) and sets up an empty de-framer whose
 * streams are fed through sink; returns MLPE_OK or MLPE_H2_E_RANGE (d is
 * then still safe to free).  Allocates nothing.  Pair with mlpe_h2_free. */
int mlpe_h2_init(mlpe_h2_deframer *d, mlpe_h2_sink sink, uint32_t max_frame_size,
                 uint32_t connection_window, uint32_t stream_window);
void mlpe_h2_free(mlpe_h2_deframer *d);

/* DATA of stream_id goes to decoder (through the sink) from the next frame
 * on (D2).  Returns MLPE_OK, MLPE_H2_E_STREAM_ID, MLPE_H2_E_DUPLICATE or
 * MLPE_E_NOMEM. */
int mlpe_h2_register(mlpe_h2_deframer *d, uint32_t stream_id, void *decoder);

/* Hands the stream's later DATA frames back to h2; returns 1 when it was
 * registered, else 0.  See Outputs for a frame half consumed. */
int mlpe_h2_unregister(mlpe_h2_deframer *d, uint32_t stream_id);

/* Consumes input read at t_ns; returns how many bytes were used: all of
 * them, except after a complete pass-through frame (D5) or when error is
 * set (then the bytes up to and including the one in error; 0 once error
 * was set before the call).  data may be NULL when len is 0. */
size_t mlpe_h2_feed(mlpe_h2_deframer *d, const uint8_t *data, size_t len, int64_t t_ns);

/* Writes a WINDOW_UPDATE frame [6.9] to out (MLPE_H2_WINDOW_UPDATE_SIZE bytes). */
void mlpe_h2_window_update(uint8_t *out, uint32_t stream_id, uint32_t increment);

#endif /* MLPE_H2_H */
