/*
 * mlpe_common.h -- shared definitions of the mlpe-fast C core.
 *
 * The core is sans-IO plain C (C99, no Python.h): every decoder takes bytes
 * and returns results; none of them owns a socket or reads a clock.  Callers
 * (the Cython bindings, the fuzz drivers) pass the arrival time in.
 *
 * Error codes are shared by all decoders so that exactly one place in Python
 * (mlpe_fast.errors.error_from_code) maps them to exception classes.  The
 * numbers are part of the ABI between csrc/ and src/: keep them in sync with
 * mlpe_fast.errors.ErrorCode (tests/unit/test_errors.py checks this).
 */
#ifndef MLPE_COMMON_H
#define MLPE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define MLPE_LIKELY(x) __builtin_expect(!!(x), 1)
#define MLPE_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define MLPE_LIKELY(x) (x)
#define MLPE_UNLIKELY(x) (x)
#endif

#define MLPE_INLINE static inline

typedef enum mlpe_err {
    MLPE_OK = 0,

    /* HTTP/1.1 response framing (RFC 9112).  Terminal: the parser stays in
     * its error state and every later call returns the same code. */
    MLPE_E_STATUS_LINE = 101,       /* malformed status line */
    MLPE_E_VERSION = 102,           /* HTTP major version other than 1 */
    MLPE_E_HEADER = 103,            /* malformed header or trailer field line */
    MLPE_E_LINE_TOO_LONG = 104,     /* a head, chunk-size or trailer line over max_line */
    MLPE_E_HEAD_TOO_LARGE = 105,    /* head (or trailer section) over max_head bytes */
    MLPE_E_TOO_MANY_HEADERS = 106,  /* more than max_headers field lines */
    MLPE_E_CONTENT_LENGTH = 107,    /* invalid or conflicting Content-Length */
    MLPE_E_TRANSFER_ENCODING = 108, /* a transfer coding other than chunked */
    MLPE_E_CHUNK_SIZE = 109,        /* malformed chunk-size line */
    MLPE_E_CHUNK_SIZE_TOO_LONG = 110, /* more chunk-size digits than max_chunk_size_digits */
    MLPE_E_CHUNK_DATA = 111,        /* chunk data not followed by CRLF */
    MLPE_E_INCOMPLETE = 112,        /* end of input before the message was complete */
    MLPE_E_UNEXPECTED_DATA = 113,   /* bytes after a message on a connection that must close */
    MLPE_E_UPGRADE = 114,           /* 101 Switching Protocols, never requested by mlpe-fast */

    /* SSE (WHATWG event-stream).  Any byte sequence is a valid event
     * stream, so the only error is a resource limit.  Terminal. */
    MLPE_E_EVENT_TOO_LARGE = 201,

    /* Whole-response decoding (mlpe_response.h).  Terminal. */
    MLPE_E_CONTENT_ENCODING = 301,  /* a Content-Encoding the client did not ask for */
    MLPE_E_BODY_TOO_LARGE = 302,    /* a non-SSE body over max_body */
    MLPE_E_NO_EVENTS = 303,         /* a 2xx event stream that ended without an event */
    MLPE_E_TEXT_NOT_CUMULATIVE = 304, /* an SGLang event's text does not extend the text
                                       * before it (mlpe_response.h, R11) */

    /* One SSE event's payload (mlpe_oai.h).  NOT terminal: the event is
     * reported as a chunk error and its neighbours still decode. */
    MLPE_E_JSON_SYNTAX = 401,       /* not RFC 8259 JSON */
    MLPE_E_JSON_UTF8 = 402,         /* invalid UTF-8 (RFC 8259 section 8.1) */
    MLPE_E_JSON_DEPTH = 403,        /* nesting deeper than MLPE_JSON_MAX_DEPTH */
    MLPE_E_CHUNK_SHAPE = 404,       /* valid JSON, but a known field has the wrong type */
    MLPE_E_ENDPOINT_ERROR = 405,    /* the endpoint sent an {"error": ...} object */

    /* The endpoint answered with a non-2xx status.  Not a protocol error
     * (the bytes were fine): reported in a response's summary only. */
    MLPE_E_HTTP_STATUS = 501,

    MLPE_E_NOMEM = 901              /* allocation failed */
} mlpe_err;

/* A borrowed byte span.  Who owns the bytes and how long they live is
 * documented by each function that hands one out. */
typedef struct mlpe_span {
    const uint8_t *ptr;
    size_t len;
} mlpe_span;

/* A growable byte buffer with a hard cap, so that no input can make the core
 * allocate without bound. */
typedef struct mlpe_buf {
    uint8_t *ptr;
    size_t len;
    size_t cap;
} mlpe_buf;

MLPE_INLINE void mlpe_buf_init(mlpe_buf *b) {
    b->ptr = NULL;
    b->len = 0;
    b->cap = 0;
}

MLPE_INLINE void mlpe_buf_free(mlpe_buf *b) {
    free(b->ptr);
    mlpe_buf_init(b);
}

/* Ensures room for `extra` more bytes.  Returns MLPE_OK or MLPE_E_NOMEM. */
MLPE_INLINE int mlpe_buf_reserve(mlpe_buf *b, size_t extra) {
    size_t need, cap;
    uint8_t *p;
    if (MLPE_LIKELY(b->cap - b->len >= extra))
        return MLPE_OK;
    if (extra > SIZE_MAX / 2 - b->len)
        return MLPE_E_NOMEM;
    need = b->len + extra;
    cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    p = (uint8_t *)realloc(b->ptr, cap);
    if (p == NULL)
        return MLPE_E_NOMEM;
    b->ptr = p;
    b->cap = cap;
    return MLPE_OK;
}

MLPE_INLINE int mlpe_buf_append(mlpe_buf *b, const uint8_t *src, size_t n) {
    if (n == 0)
        return MLPE_OK;
    if (MLPE_UNLIKELY(mlpe_buf_reserve(b, n) != MLPE_OK))
        return MLPE_E_NOMEM;
    memcpy(b->ptr + b->len, src, n);
    b->len += n;
    return MLPE_OK;
}

MLPE_INLINE uint8_t mlpe_lower(uint8_t c) {
    return (c >= 'A' && c <= 'Z') ? (uint8_t)(c | 0x20) : c;
}

#endif /* MLPE_COMMON_H */
