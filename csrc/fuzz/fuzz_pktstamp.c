/*
 * fuzz_pktstamp.c -- fuzz driver for the segment stamps' frame parser and
 * map (mlpe_pktstamp.h, rules P4-P9).
 *
 * The input is used twice:
 *  1. Whole, as one frame (its first two bytes the wire length): the parser
 *     must read nothing past the frame (the frame is a heap block of its
 *     exact size) and, for a TCP segment, give a payload the wire length
 *     allows (P4).
 *  2. As a list of 5-byte operations on one connection: add a segment
 *     (offset, length, stamp; the frame built here and parsed, with a seq
 *     number from an ISN chosen by the first bytes, so the wrap at 2^32 is
 *     crossed), or consume up to an offset.  After every operation the
 *     runs over a window are checked against a byte-by-byte oracle: every
 *     byte's stamp is the earliest of the segments that held it and came
 *     after it was last consumed (P7), the runs cover the window exactly,
 *     and a byte no segment holds has no stamp (P8).
 * Offsets stay below ORACLE_BYTES so that the oracle is a plain array.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mlpe_pktstamp.h"

#define ORACLE_BYTES 2048
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fuzz_fail(#cond, __FILE__, __LINE__);                                                  \
    } while (0)

static void put16(uint8_t *p, unsigned v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v) {
    put16(p, v >> 16);
    put16(p + 2, v & 0xffff);
}

/* An IPv4 frame from 10.0.0.1:8000 to port 40000, headers only. */
static size_t build(uint8_t *f, uint32_t seq, unsigned len, uint8_t flags, uint32_t *wire) {
    memset(f, 0, 40);
    f[0] = 0x45;
    put16(f + 2, 40 + len);
    f[6] = 0x40;
    f[8] = 64;
    f[9] = 6;
    f[12] = 10, f[15] = 1, f[16] = 10, f[19] = 2;
    put16(f + 20, 8000);
    put16(f + 22, 40000);
    put32(f + 24, seq);
    f[32] = 5 << 4;
    f[33] = flags;
    *wire = 40 + len;
    return 40;
}

static void parse_whole(const uint8_t *data, size_t size) {
    if (size < 2)
        return;
    uint32_t wire = ((uint32_t)data[0] << 8) | data[1];
    size_t n = size - 2;
    uint8_t *frame = malloc(n ? n : 1);
    memcpy(frame, data + 2, n);
    mlpe_segment s;
    int r = mlpe_pkt_parse(frame, n, wire, &s);
    CHECK(r >= -1000 && r <= 1);
    if (r == 1) {
        CHECK(s.family == 4 || s.family == 6);
        CHECK(s.payload_len <= wire);
    }
    free(frame);
}

static void check_window(const mlpe_pktconn *c, const mlpe_pktmap *m, const int64_t *oracle,
                         int64_t from, int64_t to) {
    int64_t at = from;
    while (at < to) {
        int64_t t;
        int why;
        int64_t n = mlpe_pktconn_next(c, m, at, to, &t, &why);
        CHECK(n > 0 && at + n <= to);
        for (int64_t b = at; b < at + n; b++) {
            if (why == MLPE_PKT_STAMPED)
                CHECK(oracle[b] == t);
            else
                CHECK(oracle[b] < 0 && (why == MLPE_PKT_MISSED || why == MLPE_PKT_LOST));
        }
        at += n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_whole(data, size);
    if (size < 4)
        return 0;
    uint32_t isn = 0xFFFFF000u + ((uint32_t)data[0] << 4); /* near the wrap */
    mlpe_pktmap *m = calloc(1, sizeof *m);
    mlpe_pktmap_init(m);
    int64_t oracle[ORACLE_BYTES];
    for (size_t i = 0; i < ORACLE_BYTES; i++)
        oracle[i] = -1;
    int64_t consumed = 0;
    uint8_t f[40];
    uint32_t wire;
    mlpe_segment s;
    build(f, isn, 0, MLPE_TCP_SYN | MLPE_TCP_ACK, &wire);
    CHECK(mlpe_pkt_parse(f, sizeof f, wire, &s) == 1);
    mlpe_pktmap_add(m, &s, 1);
    static const uint8_t remote[4] = {10, 0, 0, 1};
    mlpe_pktconn *c = mlpe_pktmap_conn(m, 40000, 4, remote, 8000);
    CHECK(c != NULL);
    for (size_t i = 1; i + 5 <= size; i += 5) {
        const uint8_t *op = data + i;
        int64_t offset = (((int64_t)op[0] << 8) | op[1]) % ORACLE_BYTES;
        unsigned len = op[2] % 200;
        int64_t t = op[3] + 2;
        if (op[4] & 1) { /* consume */
            int64_t upto = offset;
            if (upto > consumed) {
                mlpe_pktconn_consume(c, upto);
                for (int64_t b = consumed; b < upto; b++)
                    oracle[b] = -1;
                consumed = upto;
            }
        } else {
            if (offset + len > ORACLE_BYTES)
                len = (unsigned)(ORACLE_BYTES - offset);
            build(f, isn + 1u + (uint32_t)offset, len, MLPE_TCP_ACK, &wire);
            CHECK(mlpe_pkt_parse(f, sizeof f, wire, &s) == 1 && s.payload_len == len);
            mlpe_pktmap_add(m, &s, t);
            for (int64_t b = offset; b < offset + (int64_t)len; b++)
                if (b >= consumed && (oracle[b] < 0 || t < oracle[b]))
                    oracle[b] = t;
        }
        CHECK(mlpe_pktmap_conn(m, 40000, 4, remote, 8000) == c);
        check_window(c, m, oracle, consumed, ORACLE_BYTES);
    }
    mlpe_pktmap_free(m);
    free(m);
    return 0;
}
