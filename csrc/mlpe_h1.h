/*
 * mlpe_h1.h -- incremental HTTP/1.1 response framing (RFC 9112), sans-IO.
 *
 * Theory of operation
 * -------------------
 * The parser turns the bytes a client reads from one connection into a
 * sequence of results: a response head, spans of body bytes, and the end of
 * the message.  It is pull-style: the caller hands it all the bytes it has,
 * and each call stops at the next result and says how many bytes it used.
 * A result may be due after the last byte is used (the end of a message
 * whose final byte ended the input, or a 204 right after its head), so a
 * caller loops until MLPE_H1_NEED_MORE, not until the input is used up:
 *
 *     size_t off = 0;
 *     for (;;) {
 *         size_t used; mlpe_span body;
 *         int r = mlpe_h1_feed(&p, data + off, len - off, &used, &body);
 *         off += used;
 *         if (r == MLPE_H1_NEED_MORE) break;   (off == len here)
 *         if (r == MLPE_H1_HEAD)  ... p.status, p.headers ...
 *         if (r == MLPE_H1_BODY)  ... body.ptr/body.len point INTO data ...
 *         if (r == MLPE_H1_DONE)  ... message complete, p.trailers ...
 *         if (r == MLPE_H1_ERROR) ... p.error, p.error_pos ...; break
 *     }
 *
 * Rules (numbered so tests and comments can cite them):
 *  1. The input may be split anywhere; results do not depend on the split
 *     (body spans are split where the input was, but their concatenation is).
 *  2. Interim 1xx responses (RFC 9110 section 15.2) are parsed and skipped,
 *     except 101, which mlpe-fast never asks for (MLPE_E_UPGRADE).
 *  3. Line terminators are CRLF; a bare LF is accepted as well (RFC 9112
 *     section 2.2 allows it); a CR not followed by LF is an error.
 *  4. Field names are tokens (RFC 9110 section 5.6.2) and are stored
 *     lower-cased; whitespace before the colon is an error (RFC 9112 section
 *     5.1); values have leading and trailing SP/HTAB removed; CR, LF and NUL
 *     inside a value are errors (RFC 9110 section 5.5); other bytes,
 *     obs-text included, are kept; an obs-fold line continues the previous
 *     value and is replaced by one SP (RFC 9112 section 5.2); a field line
 *     that starts with SP/HTAB right after the start line or the last chunk
 *     has nothing to continue and is an error.
 *  5. Body length (RFC 9112 section 6.3): 1xx/204/304 have none; otherwise
 *     Transfer-Encoding whose final coding is chunked means chunked (any other
 *     transfer coding is MLPE_E_TRANSFER_ENCODING, and a Content-Length beside
 *     it is ignored and the connection must close); else Content-Length
 *     (digits, comma lists of identical values, repeated identical fields);
 *     else the body runs until the connection closes (mlpe_h1_feed_eof).
 *     Precisely: the Transfer-Encoding fields together must list "chunked"
 *     (any case) exactly once and nothing else, empty list elements aside
 *     (RFC 9110 section 5.6.1); mlpe-fast never asks for other transfer
 *     codings (it sends no TE header).  Framing fields are read only when the
 *     head is complete, so they are ignored in 1xx/204/304 heads, and an
 *     invalid Content-Length beside a Transfer-Encoding is ignored too.  The
 *     parser assumes the request was not HEAD (mlpe-fast never sends one).
 *     Status codes are any three digits (RFC 9112 section 4); those outside
 *     100-599 are final responses framed like any other, and the caller
 *     decides what they mean (RFC 9110 section 15 says: treat them as 5xx).
 *  6. Chunked coding (RFC 9112 section 7.1): hex size (max_chunk_size_digits
 *     digits at most, counting leading zeros), optional BWS, chunk extensions
 *     after ';' (any visible characters, obs-text, SP, HTAB, so quoted
 *     strings pass unparsed), then the line end; chunk data is followed by
 *     CRLF (or a bare LF, rule 3); the last chunk is followed by a trailer
 *     section parsed like the header section (same limits, stored apart,
 *     never used for framing).
 *  7. keep_alive: HTTP/1.1 unless a Connection "close" token; HTTP/1.0 only
 *     with a "keep-alive" token (RFC 9112 section 9.3; tokens compared
 *     case-insensitively, in any Connection field of the head); never for a
 *     close-delimited body, when both Transfer-Encoding and Content-Length
 *     are present (RFC 9112 section 6.3 item 3), or for an HTTP/1.0 response
 *     with Transfer-Encoding (RFC 9112 section 6.1).  It is decided with the
 *     head: it is valid from MLPE_H1_HEAD on and does not change at DONE.
 *  8. After MLPE_H1_DONE the parser is ready for the next response on the
 *     same connection; if keep_alive was false, any further byte is
 *     MLPE_E_UNEXPECTED_DATA.  The same holds after mlpe_h1_feed_eof.
 *  9. An error is terminal: error and error_pos (absolute offset of the byte
 *     at which the input became invalid, counted from the first byte ever
 *     fed; exact definition per code below) are set and every later call
 *     returns MLPE_H1_ERROR.  The failing call reports *consumed = 0 and
 *     leaves `offset` as it was.
 * 10. Byte budgets (max_line, max_head) are checked as bytes arrive, before
 *     a line is complete, so a budget error is reported at the first byte
 *     over the budget whatever the line holds.  Everything else, counts and
 *     digits included (max_headers, max_chunk_size_digits), is checked once
 *     the line is complete, left to right; so is the content of a line.
 *
 * Lines
 * -----
 * A line's length is its bytes without the terminator (the LF, and the CR
 * right before it).  While a line is incomplete, a CR at its end may still
 * turn out to be part of the terminator, so it is not counted until the
 * next byte shows what it is.  The head budget counts every byte of the
 * head, status line to the LF of the blank line, terminators included; the
 * trailer section (from the first byte after the last-chunk line to the LF
 * of its blank line) has a budget of its own, and so has each interim head.
 *
 * Where error_pos points (S = offset of the first byte of the line
 * concerned, H = offset of the first byte of the head or trailer section)
 * ---------------------
 *  MLPE_E_LINE_TOO_LONG     S + max_line: the first byte over the budget.
 *  MLPE_E_HEAD_TOO_LARGE    H + max_head.  When both budgets are first
 *                           exceeded at the same byte, this code wins.
 *  MLPE_E_STATUS_LINE       (status line,
 *  MLPE_E_HEADER             header or trailer field line,
 *  MLPE_E_CHUNK_SIZE         chunk-size line) the first byte of the line
 *                           that does not fit its grammar, scanning left to
 *                           right; a line that ends too early is reported
 *                           at its terminator (S + length: the CR of a CRLF,
 *                           else the LF).  A stray CR inside a line is such
 *                           a byte itself.  A field line with nothing to
 *                           continue (rule 4) is reported at S.
 *  MLPE_E_VERSION           S + 5, the major version digit ("HTTP/2.0").
 *  MLPE_E_UPGRADE           S + 9, the first digit of the status code 101.
 *  MLPE_E_TOO_MANY_HEADERS  S of the first field line over max_headers.
 *  MLPE_E_CHUNK_SIZE_TOO_LONG  the first hex digit over
 *                           max_chunk_size_digits, or the digit with which
 *                           the size reaches 2^63, whichever comes first.
 *  MLPE_E_CONTENT_LENGTH    S of the first line of the first Content-Length
 *                           field that is invalid or differs from an
 *                           earlier one.  Reported when the head is complete
 *                           (after every error of the head's lines).
 *  MLPE_E_TRANSFER_ENCODING S of the first line of the first
 *                           Transfer-Encoding field that lists something
 *                           other than one "chunked"; when the fields list
 *                           nothing at all, S of the first of them.
 *                           Reported when the head is complete.
 *  MLPE_E_CHUNK_DATA        the first byte after chunk data that is not its
 *                           CR or LF, or the byte after that CR if not LF.
 *  MLPE_E_UNEXPECTED_DATA   the first byte after the message (rule 8).
 *  MLPE_E_INCOMPLETE        `offset` at mlpe_h1_feed_eof: one past the last
 *                           byte fed.
 *  MLPE_E_NOMEM             unspecified (the bindings raise MemoryError).
 */
#ifndef MLPE_H1_H
#define MLPE_H1_H

#include "mlpe_common.h"

/* Limits and why (each configurable, 0 = default):
 * - max_line 8 KiB: common server and proxy defaults for one header line
 *   (nginx large_client_header_buffers, Apache LimitRequestFieldSize); no
 *   OpenAI-compatible server sends longer lines.  Chunk-size lines (a few
 *   bytes plus extensions nobody sends) share it.
 * - max_head 64 KiB: the whole head, status line to the blank line, CR/LF
 *   included; 8x the line limit leaves room for gateway-added fields.  The
 *   trailer section has the same budget.
 * - max_headers 128: Apache's LimitRequestFields is 100; a response needs a
 *   dozen.  Obs-fold continuation lines do not count as fields.
 * - max_chunk_size_digits 16: sixteen hex digits hold any 64-bit size; more
 *   can only be padding or an overflow attack.  Sizes of 2^63 and over are
 *   MLPE_E_CHUNK_SIZE_TOO_LONG too.
 * Values above MLPE_H1_MAX_LIMIT are clamped to it, so that a head and its
 * trailers always fit the 32-bit offsets of mlpe_h1_field; the Python
 * bindings reject them instead.  Memory is bounded by the limits: the
 * partial-line buffer holds at most max_line + 1 bytes, the field storage at
 * most one head plus one trailer section, the field arrays max_headers
 * entries each. */
#define MLPE_H1_DEFAULT_MAX_LINE 8192
#define MLPE_H1_DEFAULT_MAX_HEAD 65536
#define MLPE_H1_DEFAULT_MAX_HEADERS 128
#define MLPE_H1_DEFAULT_MAX_CHUNK_SIZE_DIGITS 16
#define MLPE_H1_MAX_LIMIT ((size_t)1 << 30)

typedef struct mlpe_h1_limits {
    size_t max_line;
    size_t max_head;
    size_t max_headers;
    size_t max_chunk_size_digits;
} mlpe_h1_limits;

typedef enum mlpe_h1_result {
    MLPE_H1_NEED_MORE = 0, /* all input used; nothing else to report */
    MLPE_H1_HEAD = 1,      /* a final response head is complete */
    MLPE_H1_BODY = 2,      /* *body is a non-empty span of body bytes inside the input */
    MLPE_H1_DONE = 3,      /* the message is complete (trailers included) */
    MLPE_H1_ERROR = 4      /* see error / error_pos */
} mlpe_h1_result;

/* One field line: offsets into the parser's `fields` buffer. */
typedef struct mlpe_h1_field {
    uint32_t name_off, name_len;   /* lower-cased name */
    uint32_t value_off, value_len; /* trimmed value */
} mlpe_h1_field;

/* Lifetimes: status, version, reason, headers and the framing fields
 * describe the current response from MLPE_H1_HEAD on; trailers are valid
 * after MLPE_H1_DONE.  All of them stay valid until a later mlpe_h1_feed
 * call consumes bytes of the next response (they are replaced when its
 * status line is complete).  Field names and values are read as
 * fields.ptr + off (fields.ptr may move while a head is being parsed). */
typedef struct mlpe_h1_parser {
    /* --- public, read-only for callers --- */
    int status;              /* valid from MLPE_H1_HEAD on */
    int version_minor;       /* 0 or 1 (HTTP/1.x with x >= 1 is treated as 1) */
    int version_minor_raw;   /* the minor digit as received, 0-9 ("HTTP/1.2": 2) */
    int keep_alive;          /* rule 7; valid from MLPE_H1_HEAD on */
    int chunked;             /* body uses chunked coding */
    int64_t content_length;  /* -1 when absent, ignored (rule 5) or no body */
    mlpe_span reason;        /* into fields buffer; valid until next message */
    mlpe_h1_field *headers;  /* header field lines of the current head */
    size_t n_headers;
    mlpe_h1_field *trailers; /* trailer field lines, valid after MLPE_H1_DONE */
    size_t n_trailers;
    mlpe_buf fields;         /* storage for reason, names and values */
    int error;               /* mlpe_err, MLPE_OK when none */
    uint64_t error_pos;      /* absolute offset of the offending byte */
    uint64_t offset;         /* bytes consumed since init */

    /* --- private --- */
    mlpe_h1_limits limits;
    int state;               /* enum h1_state in mlpe_h1.c */
    mlpe_buf line;           /* partial line carried across feeds */
    uint64_t line_start;     /* offset of the first byte of the current line */
    uint64_t head_start;     /* offset of the first byte of the head / trailer section */
    uint64_t remaining;      /* body or chunk bytes still to come */
    size_t fast_chunk_digits; /* most digits the chunk-size fast path takes */
    size_t cap_headers;      /* capacity of the headers array */
    size_t cap_trailers;     /* capacity of the trailers array */
    size_t reason_off;       /* reason's offset in fields (reason.ptr is refreshed from it) */
    int message_started;     /* a byte of the current response has been consumed */
    int must_close;          /* framing forbids reusing the connection (rule 7) */
    /* the last field line, which an obs-fold line would continue */
    int field_open;
    uint64_t field_start;    /* offset of its first line */
    /* framing fields of the current head, interpreted when the head ends */
    int cl_present, te_present, te_chunked, conn_close, conn_keep_alive;
    int64_t cl_value;        /* the Content-Length value, -1 before the first */
    uint64_t cl_error_pos;   /* UINT64_MAX when none */
    uint64_t te_error_pos;   /* UINT64_MAX when none */
    uint64_t te_first_pos;   /* first line of the first Transfer-Encoding field */
} mlpe_h1_parser;

/* Initialises p; limits may be NULL (all defaults), and a 0 member means its
 * default.  Returns MLPE_OK or MLPE_E_NOMEM.  Always pair with mlpe_h1_free. */
int mlpe_h1_init(mlpe_h1_parser *p, const mlpe_h1_limits *limits);
void mlpe_h1_free(mlpe_h1_parser *p);

/* Parses from data[0..len) (data may be NULL when len is 0).  Sets *consumed
 * to the bytes used (all of them for MLPE_H1_NEED_MORE, none for
 * MLPE_H1_ERROR).  For MLPE_H1_BODY, *body points into data; otherwise it is
 * set empty. */
mlpe_h1_result mlpe_h1_feed(mlpe_h1_parser *p, const uint8_t *data, size_t len,
                            size_t *consumed, mlpe_span *body);

/* The connection was closed by the peer.  Returns MLPE_H1_DONE when that
 * completes a close-delimited body (or a message whose DONE was still due),
 * MLPE_H1_NEED_MORE when no message had started (a clean close between
 * messages), else MLPE_H1_ERROR with MLPE_E_INCOMPLETE at the current
 * offset.  Afterwards the parser accepts no more bytes (rule 8). */
mlpe_h1_result mlpe_h1_feed_eof(mlpe_h1_parser *p);

/* Looks a lower-cased field name up among the headers; returns the index of
 * the last match or -1. */
long mlpe_h1_find_header(const mlpe_h1_parser *p, const char *lower_name, size_t name_len);

#endif /* MLPE_H1_H */
