/*
 * mlpe_pktstamp.c -- arrival stamps per TCP segment (rules P1-P10 in
 * mlpe_pktstamp.h).
 */
#if defined(__linux__)
#define _GNU_SOURCE /* mmap's MAP_* and the socket options under -std=c99 */
#endif

#include "mlpe_pktstamp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* ---- P4: the frame parser ------------------------------------------------ */

int mlpe_pkt_parse(const uint8_t *p, size_t n, uint32_t wire_len, mlpe_segment *s) {
    size_t ip_len, tcp_at;
    uint64_t total;
    memset(s, 0, sizeof *s);
    if (n < 1)
        return -EINVAL;
    if ((p[0] >> 4) == 4) {
        if (n < 20)
            return -EINVAL;
        ip_len = (size_t)(p[0] & 0x0f) * 4;
        if (ip_len < 20)
            return -EINVAL;
        if (p[9] != 6)
            return 0; /* not TCP */
        if (be16(p + 6) & 0x3fff)
            return 0; /* a fragment (more-fragments or an offset): no TCP header to trust */
        total = be16(p + 2);
        if (total == 0)
            total = wire_len; /* P4: a super-packet larger than 64 KiB */
        s->family = 4;
        memcpy(s->src, p + 12, 4);
        memcpy(s->dst, p + 16, 4);
    } else if ((p[0] >> 4) == 6) {
        if (n < 40)
            return -EINVAL;
        if (p[6] != 6)
            return 0; /* extension headers or not TCP */
        ip_len = 40;
        total = (uint64_t)be16(p + 4) + 40;
        if (total == 40)
            total = wire_len; /* a jumbogram or BIG TCP: the length is the frame's */
        s->family = 6;
        memcpy(s->src, p + 8, 16);
        memcpy(s->dst, p + 24, 16);
    } else {
        return 0;
    }
    tcp_at = ip_len;
    if (n < tcp_at + 20)
        return -EINVAL;
    {
        const uint8_t *t = p + tcp_at;
        size_t tcp_len = (size_t)(t[12] >> 4) * 4;
        if (tcp_len < 20)
            return -EINVAL;
        if (total > wire_len || total < ip_len + tcp_len)
            return -EINVAL;
        s->src_port = be16(t);
        s->dst_port = be16(t + 2);
        s->seq = be32(t + 4);
        s->flags = t[13];
        s->payload_len = (uint32_t)(total - ip_len - tcp_len);
    }
    return 1;
}

/* ---- P5-P9: the map from stream offsets to stamps ------------------------ */

void mlpe_pktmap_init(mlpe_pktmap *m) { memset(m, 0, sizeof *m); }

static void conn_free(mlpe_pktconn *c) {
    if (c != NULL) {
        free(c->spans);
        free(c);
    }
}

void mlpe_pktmap_free(mlpe_pktmap *m) {
    for (size_t i = 0; i < 65536; i++) {
        conn_free(m->by_port[i]);
        m->by_port[i] = NULL;
    }
}

void mlpe_pktmap_forget(mlpe_pktmap *m, uint16_t local_port) {
    conn_free(m->by_port[local_port]);
    m->by_port[local_port] = NULL;
}

static size_t addr_len(uint8_t family) { return family == 4 ? 4 : 16; }

mlpe_pktconn *mlpe_pktmap_conn(mlpe_pktmap *m, uint16_t local_port, uint8_t family,
                               const uint8_t *remote, uint16_t remote_port) {
    mlpe_pktconn *c = m->by_port[local_port];
    if (c == NULL || c->family != family || c->remote_port != remote_port ||
        memcmp(c->remote, remote, addr_len(family)) != 0)
        return NULL;
    return c;
}

static int reserve(mlpe_pktconn *c, size_t need) {
    if (need <= c->cap)
        return 0;
    if (need > MLPE_PKT_MAX_SPANS)
        return -1;
    size_t cap = c->cap ? c->cap * 2 : 8;
    while (cap < need)
        cap *= 2;
    if (cap > MLPE_PKT_MAX_SPANS)
        cap = MLPE_PKT_MAX_SPANS;
    mlpe_pktspan *spans = realloc(c->spans, cap * sizeof *spans);
    if (spans == NULL)
        return -1;
    c->spans = spans;
    c->cap = cap;
    return 0;
}

/* P7: [start, end) arrived at t; every byte keeps its earliest stamp.  The
 * spans are sorted and disjoint before and after. */
static void conn_insert(mlpe_pktconn *c, int64_t start, int64_t end, int64_t t) {
    if (start < c->consumed)
        start = c->consumed;
    if (end <= start)
        return;
    if (c->n == 0 || start >= c->spans[c->n - 1].end) { /* in order: the usual case */
        if (c->n && c->spans[c->n - 1].end == start && c->spans[c->n - 1].t_realtime == t) {
            c->spans[c->n - 1].end = end;
            return;
        }
        if (reserve(c, c->n + 1) != 0) {
            c->lost = 1;
            return;
        }
        c->spans[c->n++] = (mlpe_pktspan){start, end, t};
        return;
    }
    /* Overlaps or fills a hole: rebuild.  Each old span splits into at most
     * three and each hole adds one, so 4n + 2 spans bound the result. */
    size_t n = c->n, out = 0;
    mlpe_pktspan *merged = malloc((4 * n + 2) * sizeof *merged);
    if (merged == NULL) {
        c->lost = 1;
        return;
    }
    int64_t cursor = start; /* the first byte of the new span not yet placed */
    for (size_t i = 0; i < n; i++) {
        mlpe_pktspan old = c->spans[i];
        if (cursor < end && old.start > cursor) { /* a hole the new span fills */
            int64_t hole_end = old.start < end ? old.start : end;
            merged[out++] = (mlpe_pktspan){cursor, hole_end, t};
            cursor = hole_end;
        }
        if (old.end <= start || old.start >= end) {
            merged[out++] = old;
            continue;
        }
        int64_t lo = old.start > start ? old.start : start;
        int64_t hi = old.end < end ? old.end : end;
        if (t < old.t_realtime) {
            if (old.start < lo)
                merged[out++] = (mlpe_pktspan){old.start, lo, old.t_realtime};
            merged[out++] = (mlpe_pktspan){lo, hi, t};
            if (hi < old.end)
                merged[out++] = (mlpe_pktspan){hi, old.end, old.t_realtime};
        } else {
            merged[out++] = old;
        }
        if (hi > cursor)
            cursor = hi;
    }
    if (cursor < end)
        merged[out++] = (mlpe_pktspan){cursor, end, t};
    if (out > MLPE_PKT_MAX_SPANS || reserve(c, out) != 0) {
        free(merged);
        c->lost = 1;
        return;
    }
    memcpy(c->spans, merged, out * sizeof *merged);
    c->n = out;
    free(merged);
}

void mlpe_pktmap_add(mlpe_pktmap *m, const mlpe_segment *s, int64_t t_realtime) {
    uint16_t port = s->dst_port;
    mlpe_pktconn *c = m->by_port[port];
    m->segments++;
    if ((s->flags & (MLPE_TCP_SYN | MLPE_TCP_ACK)) == (MLPE_TCP_SYN | MLPE_TCP_ACK)) {
        /* P5: a new connection on this port (or the same SYN-ACK again). */
        if (c != NULL && c->known && c->isn == s->seq && c->family == s->family &&
            c->remote_port == s->src_port && memcmp(c->remote, s->src, addr_len(s->family)) == 0)
            return; /* a retransmitted SYN-ACK */
        if (c == NULL) {
            c = calloc(1, sizeof *c);
            if (c == NULL)
                return;
            m->by_port[port] = c;
        }
        c->n = 0;
        c->known = 1;
        c->lost = 0;
        c->family = s->family;
        memset(c->remote, 0, sizeof c->remote);
        memcpy(c->remote, s->src, addr_len(s->family));
        c->remote_port = s->src_port;
        c->isn = s->seq;
        c->high = 0;
        c->consumed = 0;
        return;
    }
    if (c == NULL || !c->known || c->family != s->family || c->remote_port != s->src_port ||
        memcmp(c->remote, s->src, addr_len(s->family)) != 0) {
        if (s->payload_len)
            m->unknown++;
        return;
    }
    if (s->payload_len == 0)
        return;
    /* P6: the offset of the segment's first byte; the SYN took one number. */
    uint32_t rel = s->seq - c->isn - 1u;
    int64_t start = c->high + (int64_t)(int32_t)(rel - (uint32_t)c->high);
    int64_t end = start + s->payload_len;
    if (end > c->high)
        c->high = end;
    conn_insert(c, start, end, t_realtime);
}

int64_t mlpe_pktconn_next(const mlpe_pktconn *c, const mlpe_pktmap *m, int64_t from, int64_t to,
                          int64_t *t_realtime, int *why) {
    *t_realtime = 0;
    if (from >= to)
        return 0;
    if (c == NULL || !c->known) {
        *why = MLPE_PKT_UNKNOWN;
        return to - from;
    }
    /* The spans are few (those the reader has not consumed): a linear walk. */
    for (size_t i = 0; i < c->n; i++) {
        const mlpe_pktspan *span = &c->spans[i];
        if (span->end <= from)
            continue;
        if (span->start > from) { /* a hole up to this span */
            *why = (c->lost || m->drops || m->losing) ? MLPE_PKT_LOST : MLPE_PKT_MISSED;
            return (span->start < to ? span->start : to) - from;
        }
        *why = MLPE_PKT_STAMPED;
        *t_realtime = span->t_realtime;
        return (span->end < to ? span->end : to) - from;
    }
    *why = (c->lost || m->drops || m->losing) ? MLPE_PKT_LOST : MLPE_PKT_MISSED;
    return to - from;
}

void mlpe_pktconn_consume(mlpe_pktconn *c, int64_t upto) {
    if (c == NULL || upto <= c->consumed)
        return;
    c->consumed = upto;
    size_t keep = 0;
    while (keep < c->n && c->spans[keep].end <= upto)
        keep++;
    if (keep) {
        memmove(c->spans, c->spans + keep, (c->n - keep) * sizeof *c->spans);
        c->n -= keep;
    }
    if (c->n && c->spans[0].start < upto)
        c->spans[0].start = upto;
    if (c->n == 0)
        c->lost = 0; /* P9: caught up; what comes next is stored again */
}

/* ---- P1, P2, P10: the socket and its ring -------------------------------- */

#if defined(__linux__)
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define MLPE_PKT_BLOCK_SIZE (64u << 10)
#define MLPE_PKT_FRAME_SIZE 256u

int mlpe_pktcap_open(mlpe_pktcap *cap, int ifindex, uint16_t port, unsigned ring_frames) {
    memset(cap, 0, sizeof *cap);
    cap->fd = -1;
    int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* P1: the filter runs on the frame from its IP header (SOCK_DGRAM).
     * Jumps count from the next instruction. */
    struct sock_filter code[] = {
        {0x30, 0, 0, 0},                /*  0 ldb [0]                   */
        {0x74, 0, 0, 4},                /*  1 rsh #4: the IP version    */
        {0x15, 0, 7, 4},                /*  2 jeq #4 ? 3 : 10           */
        {0x30, 0, 0, 9},                /*  3 ldb [9]: protocol         */
        {0x15, 0, 11, 6},               /*  4 jeq #6 (TCP) ? 5 : drop   */
        {0x28, 0, 0, 6},                /*  5 ldh [6]: flags, offset    */
        {0x45, 9, 0, 0x1fff},           /*  6 jset fragment ? drop : 7  */
        {0xb1, 0, 0, 0},                /*  7 ldx 4*([0]&0xf)           */
        {0x48, 0, 0, 0},                /*  8 ldh [x+0]: source port    */
        {0x15, 5, 6, port},             /*  9 jeq port ? keep : drop    */
        {0x15, 0, 5, 6},                /* 10 jeq #6 (IPv6) ? 11 : drop */
        {0x30, 0, 0, 6},                /* 11 ldb [6]: next header      */
        {0x15, 0, 3, 6},                /* 12 jeq #6 (TCP) ? 13 : drop  */
        {0x28, 0, 0, 40},               /* 13 ldh [40]: source port     */
        {0x15, 0, 1, port},             /* 14 jeq port ? keep : drop    */
        {0x06, 0, 0, MLPE_PKT_SNAPLEN}, /* 15 keep the headers          */
        {0x06, 0, 0, 0},                /* 16 drop                      */
    };
    struct sock_fprog prog = {(unsigned short)(sizeof code / sizeof code[0]), code};
    int version = TPACKET_V2, one = 1;
    unsigned per_block = MLPE_PKT_BLOCK_SIZE / MLPE_PKT_FRAME_SIZE;
    unsigned blocks = (ring_frames + per_block - 1) / per_block;
    if (blocks == 0)
        blocks = 1;
    struct tpacket_req req = {MLPE_PKT_BLOCK_SIZE, blocks, MLPE_PKT_FRAME_SIZE, blocks * per_block};
    struct sockaddr_ll where;
    memset(&where, 0, sizeof where);
    where.sll_family = AF_PACKET;
    where.sll_protocol = htons(ETH_P_ALL);
    where.sll_ifindex = ifindex;
    /* The filter goes on before the bind: nothing unfiltered is queued. */
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, sizeof version) != 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0)
        goto fail;
    cap->ignore_outgoing =
        setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) == 0; /* P2 */
    cap->ring_size = (size_t)req.tp_block_size * req.tp_block_nr;
    void *ring = mmap(NULL, cap->ring_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ring == MAP_FAILED)
        goto fail;
    cap->ring = ring;
    if (bind(fd, (struct sockaddr *)&where, sizeof where) != 0) {
        int error = -errno;
        munmap(ring, cap->ring_size);
        cap->ring = NULL;
        close(fd);
        return error;
    }
    cap->fd = fd;
    cap->frame_size = MLPE_PKT_FRAME_SIZE;
    cap->frames_per_block = per_block;
    cap->frames = req.tp_frame_nr;
    cap->next = 0;
    return 0;
fail : {
    int error = -errno;
    close(fd);
    return error;
}
}

void mlpe_pktcap_close(mlpe_pktcap *cap) {
    if (cap->ring != NULL)
        munmap(cap->ring, cap->ring_size);
    if (cap->fd >= 0)
        close(cap->fd);
    cap->ring = NULL;
    cap->fd = -1;
}

int64_t mlpe_pktcap_drain(mlpe_pktcap *cap, mlpe_pktmap *m) {
    if (cap->fd < 0)
        return -EBADF;
    int64_t taken = 0;
    for (;;) {
        unsigned i = cap->next;
        uint8_t *frame = cap->ring + (size_t)(i / cap->frames_per_block) * MLPE_PKT_BLOCK_SIZE +
                         (size_t)(i % cap->frames_per_block) * cap->frame_size;
        struct tpacket2_hdr *h = (struct tpacket2_hdr *)frame;
        uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
        if (!(status & TP_STATUS_USER))
            break;
        const struct sockaddr_ll *ll =
            (const struct sockaddr_ll *)(frame + TPACKET_ALIGN(sizeof(struct tpacket2_hdr)));
        m->frames++;
        if (status & TP_STATUS_LOSING)
            m->losing++;
        if (ll->sll_pkttype == PACKET_OUTGOING) {
            m->outgoing++; /* P2 */
        } else if (h->tp_net + (size_t)h->tp_snaplen <= cap->frame_size) {
            mlpe_segment s;
            int r = mlpe_pkt_parse(frame + h->tp_net, h->tp_snaplen, h->tp_len, &s);
            if (r < 0)
                m->malformed++;
            else if (r > 0)
                mlpe_pktmap_add(m, &s, (int64_t)h->tp_sec * 1000000000 + h->tp_nsec);
        } else {
            m->malformed++;
        }
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        cap->next = (i + 1) % cap->frames;
        taken++;
    }
    struct tpacket_stats stats;
    socklen_t len = sizeof stats;
    /* P8: reading the statistics resets them, so the drops are summed here. */
    if (getsockopt(cap->fd, SOL_PACKET, PACKET_STATISTICS, &stats, &len) == 0)
        m->drops += stats.tp_drops;
    return taken;
}

#else /* not Linux */

int mlpe_pktcap_open(mlpe_pktcap *cap, int ifindex, uint16_t port, unsigned ring_frames) {
    (void)ifindex;
    (void)port;
    (void)ring_frames;
    memset(cap, 0, sizeof *cap);
    cap->fd = -1;
    return -EOPNOTSUPP;
}

void mlpe_pktcap_close(mlpe_pktcap *cap) { (void)cap; }

int64_t mlpe_pktcap_drain(mlpe_pktcap *cap, mlpe_pktmap *m) {
    (void)cap;
    (void)m;
    return -EOPNOTSUPP;
}

#endif
