/*
 * mlpe_h1.h -- incremental HTTP/1.1 response framing (RFC 9112), sans-IO.
 *
 * Theory of operation
 * -------------------
 * The parser turns the bytes a client reads from one connection into a
 * sequence of results: a response head, spans of body bytes, and the end of
 * the message.  It is pull-style: the caller hands it all the bytes it has,
 * and each call stops at the next result and says how many bytes it used, so
 * a caller loops until the input is used up:
 *
 *     size_t off = 0;
 *     while (off < len) {
 *         size_t used; mlpe_span body;
 *         int r = mlpe_h1_feed(&p, data + off, len - off, &used, &body);
 *         off += used;
 *         if (r == MLPE_H1_HEAD)  ... p.status, p.headers ...
 *         if (r == MLPE_H1_BODY)  ... body.ptr/body.len point INTO data ...
 *         if (r == MLPE_H1_DONE)  ... message complete ...
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
 *     inside a value are errors; obs-text is allowed; an obs-fold line
 *     continues the previous value and is replaced by one SP (RFC 9112 section
 *     5.2).
 *  5. Body length (RFC 9112 section 6.3): 1xx/204/304 have none; otherwise
 *     Transfer-Encoding whose final coding is chunked means chunked (any other
 *     transfer coding is MLPE_E_TRANSFER_ENCODING, and a Content-Length beside
 *     it is ignored and the connection must close); else Content-Length
 *     (digits, comma lists of identical values, repeated identical fields);
 *     else the body runs until the connection closes (mlpe_h1_feed_eof).
 *  6. Chunked coding (RFC 9112 section 7.1): hex size (max_chunk_size_digits
 *     digits at most, counting leading zeros), optional BWS, chunk extensions
 *     after ';' (any visible characters, SP, HTAB), then the line end; chunk
 *     data is followed by CRLF; the last chunk is followed by a trailer
 *     section parsed like the header section (same limits, stored apart).
 *  7. keep_alive: HTTP/1.1 unless a Connection "close" token; HTTP/1.0 only
 *     with a "keep-alive" token; never for a close-delimited body or when both
 *     Transfer-Encoding and Content-Length are present.
 *  8. After MLPE_H1_DONE the parser is ready for the next response on the
 *     same connection; if keep_alive was false, any further byte is
 *     MLPE_E_UNEXPECTED_DATA.
 *  9. An error is terminal: error and error_pos (absolute offset of the byte
 *     at which the input became invalid, counted from the first byte ever
 *     fed) are set and every later call returns MLPE_H1_ERROR.
 * 10. Length limits are checked as bytes arrive, before a line is complete,
 *     so a limit error is reported at the first byte over the limit whatever
 *     the line holds; the content of a line is validated once it is complete.
 */
#ifndef MLPE_H1_H
#define MLPE_H1_H

#include "mlpe_common.h"

/* Limits and why (each configurable, 0 = default):
 * - max_line 8 KiB: common server and proxy defaults for one header line
 *   (nginx large_client_header_buffers, Apache LimitRequestFieldSize); no
 *   OpenAI-compatible server sends longer lines.
 * - max_head 64 KiB: the whole head, status line to the blank line, CR/LF
 *   included; 8x the line limit leaves room for gateway-added fields.  The
 *   trailer section has the same budget.
 * - max_headers 128: Apache's LimitRequestFields is 100; a response needs a
 *   dozen.  Obs-fold continuation lines do not count as fields.
 * - max_chunk_size_digits 16: sixteen hex digits hold any 64-bit size; more
 *   can only be padding or an overflow attack.  Sizes of 2^63 and over are
 *   MLPE_E_CHUNK_SIZE_TOO_LONG too. */
#define MLPE_H1_DEFAULT_MAX_LINE 8192
#define MLPE_H1_DEFAULT_MAX_HEAD 65536
#define MLPE_H1_DEFAULT_MAX_HEADERS 128
#define MLPE_H1_DEFAULT_MAX_CHUNK_SIZE_DIGITS 16

typedef struct mlpe_h1_limits {
    size_t max_line;
    size_t max_head;
    size_t max_headers;
    size_t max_chunk_size_digits;
} mlpe_h1_limits;

typedef enum mlpe_h1_result {
    MLPE_H1_NEED_MORE = 0, /* all input used; nothing else to report */
    MLPE_H1_HEAD = 1,      /* a final response head is complete */
    MLPE_H1_BODY = 2,      /* *body is a span of body bytes inside the input */
    MLPE_H1_DONE = 3,      /* the message is complete (trailers included) */
    MLPE_H1_ERROR = 4      /* see error / error_pos */
} mlpe_h1_result;

/* One field line: offsets into the parser's `fields` buffer. */
typedef struct mlpe_h1_field {
    uint32_t name_off, name_len;   /* lower-cased name */
    uint32_t value_off, value_len; /* trimmed value */
} mlpe_h1_field;

typedef struct mlpe_h1_parser {
    /* --- public, read-only for callers --- */
    int status;              /* valid from MLPE_H1_HEAD on */
    int version_minor;       /* 0 or 1 (HTTP/1.x with x >= 1 is treated as 1) */
    int keep_alive;          /* final once MLPE_H1_DONE is returned */
    int chunked;             /* body uses chunked coding */
    int64_t content_length;  /* -1 when absent */
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
    int state;
    mlpe_buf line;           /* partial line carried across feeds */
    size_t head_bytes;       /* bytes of the current head / trailer section */
    uint64_t remaining;      /* body or chunk bytes still to come */
    size_t cap_fields;       /* capacity of headers/trailers arrays */
    size_t cap_trailers;
    int saw_cr;              /* previous byte of the current line was CR */
    int must_close;          /* connection cannot be reused */
} mlpe_h1_parser;

/* Initialises p; limits may be NULL (all defaults).  Returns MLPE_OK or
 * MLPE_E_NOMEM.  Always pair with mlpe_h1_free. */
int mlpe_h1_init(mlpe_h1_parser *p, const mlpe_h1_limits *limits);
void mlpe_h1_free(mlpe_h1_parser *p);

/* Parses from data[0..len).  Sets *consumed to the bytes used (all of them
 * for MLPE_H1_NEED_MORE).  For MLPE_H1_BODY, *body points into data. */
mlpe_h1_result mlpe_h1_feed(mlpe_h1_parser *p, const uint8_t *data, size_t len,
                            size_t *consumed, mlpe_span *body);

/* The connection was closed by the peer.  Returns MLPE_H1_DONE when that
 * completes a close-delimited body, MLPE_H1_NEED_MORE when no message had
 * started (a clean close between messages), else MLPE_H1_ERROR with
 * MLPE_E_INCOMPLETE at the current offset. */
mlpe_h1_result mlpe_h1_feed_eof(mlpe_h1_parser *p);

/* Looks a lower-cased field name up among the headers; returns the index of
 * the last match or -1. */
long mlpe_h1_find_header(const mlpe_h1_parser *p, const char *lower_name, size_t name_len);

#endif /* MLPE_H1_H */
