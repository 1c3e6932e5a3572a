/*
 * mlpe_pktstamp.h -- arrival stamps per TCP segment, from a packet socket.
 *
 * A TCP read carries one kernel stamp, that of the newest data it copied
 * (mlpe_rxstamp.h K2): when a read holds several segments -- the reader was
 * late, or HTTP/2 multiplexes many streams on one connection -- the first
 * token takes a later token's time.  A packet socket (AF_PACKET) sees every
 * segment on its own, with its own kernel stamp and its TCP sequence number;
 * the sequence number, less the connection's initial one (the SYN-ACK's),
 * is the segment's byte offset in the connection's received stream.  The
 * read path counts the bytes it has read, so each byte it decodes can be
 * given the stamp of the segment that carried it.
 *
 * Rules:
 *  P1. mlpe_pktcap_open() opens an AF_PACKET SOCK_DGRAM socket (frames begin
 *      at the IP header whatever the link) bound to one interface (ifindex,
 *      0 for all), with a TPACKET_V2 receive ring and a classic BPF filter
 *      that passes only TCP (IPv4, or IPv6 without extension headers) from
 *      the endpoint's port, truncated to MLPE_PKT_SNAPLEN bytes: headers
 *      only, never payload.  It returns 0 or a negative errno: -EPERM
 *      without CAP_NET_RAW, -ENODEV for a missing interface.  V2, not V3:
 *      a V3 ring hands frames over a block at a time, when the block fills
 *      or its retire timer (at least 1 ms) fires, and a read must find its
 *      segments at once; V2 hands over every frame as it is written.
 *  P2. Outgoing frames are not arrivals: PACKET_IGNORE_OUTGOING drops them
 *      where the kernel has it (4.20+), and the frame's packet type
 *      (PACKET_OUTGOING) where it does not.  On loopback every packet is
 *      seen twice, on transmit and on receive; the receive copy stays.
 *  P3. The ring frame of a segment is written (in the receive softirq, by
 *      the packet tap, before IP and TCP see the packet) before its bytes
 *      can be read from the TCP socket, so a drain of the ring made after a
 *      read holds every segment that read returned.  Its stamp is the
 *      skb's software receive stamp (the one SO_TIMESTAMPING reports),
 *      CLOCK_REALTIME; mapped to the engine's clock as kernel stamps are
 *      (mlpe_rxstamp.h K3-K4).
 *  P4. mlpe_pkt_parse() reads one frame: returns 1 and fills the segment for
 *      a TCP segment, 0 for a frame that is not one (another protocol, a
 *      fragment, IPv6 extension headers), or a negative errno for a frame
 *      too short or inconsistent (-EINVAL).  It reads nothing past n bytes.
 *      The payload length comes from the IP length fields (the frame is
 *      truncated), or from wire_len when IPv4's total length is 0 (a GSO/
 *      BIG TCP super-packet); it is never more than wire_len allows.
 *  P5. Connections are keyed by local port and checked against the remote
 *      address and port.  A SYN-ACK sets the connection's initial sequence
 *      number and clears what was known of an earlier connection on that
 *      port.  Segments of a port whose SYN-ACK was not seen are counted and
 *      dropped (the read path falls back, MLPE_PKT_UNKNOWN).
 *  P6. Sequence numbers wrap at 2^32: an offset is unwrapped to 64 bits
 *      against the highest end seen, so a stream may carry any length as
 *      long as no segment lands 2 GiB away from it.
 *  P7. Out-of-order and retransmitted segments: a span is stored by its
 *      offset, never by when it came; where spans overlap (a retransmit, a
 *      duplicate, a keep-alive probe's byte) each byte keeps the EARLIEST
 *      stamp seen for it.  Bytes the reader already consumed are dropped.
 *  P8. mlpe_pktconn_next() answers, for bytes [from, to) of a connection's
 *      stream, the length of the first run of bytes with one stamp, that
 *      stamp (0 when no captured segment covers them), and, for a run with
 *      no stamp, why: MLPE_PKT_UNKNOWN (no SYN-ACK seen), MLPE_PKT_LOST
 *      (the ring dropped frames: PACKET_STATISTICS tp_drops, or a frame
 *      flagged TP_STATUS_LOSING) or MLPE_PKT_MISSED (not captured, no drop
 *      counted: the capture started late, or a frame did not pass the
 *      filter).  A byte's stamp is when it arrived, not when it became
 *      readable; the caller makes each run's stamp at least the previous
 *      one's (a byte is readable when every byte before it has arrived).
 *  P9. mlpe_pktconn_consume() tells the map the reader has taken bytes up
 *      to an offset (spans below it are freed).  A connection holds at most
 *      MLPE_PKT_MAX_SPANS spans; past that it stops storing (MLPE_PKT_LOST
 *      for what it could not keep) until the reader catches up.
 *  P10. mlpe_pktcap_drain() takes every frame the kernel has handed over and
 *      gives it back; it never blocks.  It is called from one thread.
 *
 * Linux only: elsewhere mlpe_pktcap_open() returns -EOPNOTSUPP; the parser
 * and the map are plain C everywhere (the fuzz driver runs them).
 */
#ifndef MLPE_PKTSTAMP_H
#define MLPE_PKTSTAMP_H

#include <stddef.h>
#include <stdint.h>

/* IPv6 (40) + the longest TCP header (60) fit; payload is never copied. */
#define MLPE_PKT_SNAPLEN 128
#define MLPE_PKT_MAX_SPANS 4096

/* Why a run of bytes has no segment stamp (P8). */
#define MLPE_PKT_STAMPED 0
#define MLPE_PKT_UNKNOWN 1
#define MLPE_PKT_LOST 2
#define MLPE_PKT_MISSED 3

#define MLPE_TCP_FIN 0x01
#define MLPE_TCP_SYN 0x02
#define MLPE_TCP_RST 0x04
#define MLPE_TCP_ACK 0x10

typedef struct {
    uint8_t family; /* 4 or 6 */
    uint8_t flags;  /* the TCP flags byte */
    uint16_t src_port, dst_port;
    uint8_t src[16], dst[16]; /* IPv4 in the first 4 bytes */
    uint32_t seq;
    uint32_t payload_len;
} mlpe_segment;

typedef struct {
    int64_t start, end; /* stream offsets, [start, end) */
    int64_t t_realtime;
} mlpe_pktspan;

typedef struct {
    int known;     /* a SYN-ACK gave the ISN */
    int lost;      /* spans could not be kept (P9) */
    uint8_t family;
    uint8_t remote[16];
    uint16_t remote_port;
    uint32_t isn;
    int64_t high;     /* highest end offset seen (P6) */
    int64_t consumed; /* P9 */
    mlpe_pktspan *spans;
    size_t n, cap;
} mlpe_pktconn;

typedef struct {
    mlpe_pktconn *by_port[65536];
    int64_t frames;      /* frames taken from the ring */
    int64_t segments;    /* TCP segments stored or checked */
    int64_t outgoing;    /* skipped: outgoing copies (P2) */
    int64_t unknown;     /* segments of ports with no SYN-ACK seen (P5) */
    int64_t malformed;   /* frames P4 refused */
    int64_t losing;      /* frames flagged TP_STATUS_LOSING */
    int64_t drops;       /* the ring's tp_drops, summed */
} mlpe_pktmap;

typedef struct {
    int fd;
    uint8_t *ring;
    size_t ring_size;
    unsigned frame_size, frames_per_block, frames;
    unsigned next; /* the next frame to look at */
    int ignore_outgoing; /* P2: the kernel drops them */
} mlpe_pktcap;

int mlpe_pkt_parse(const uint8_t *p, size_t n, uint32_t wire_len, mlpe_segment *s);

void mlpe_pktmap_init(mlpe_pktmap *m);
void mlpe_pktmap_free(mlpe_pktmap *m);
/* P5-P7: one parsed segment that arrived at t_realtime. */
void mlpe_pktmap_add(mlpe_pktmap *m, const mlpe_segment *s, int64_t t_realtime);
/* The connection on local_port if its remote matches (family 4 or 6), else NULL. */
mlpe_pktconn *mlpe_pktmap_conn(mlpe_pktmap *m, uint16_t local_port, uint8_t family,
                               const uint8_t *remote, uint16_t remote_port);
void mlpe_pktmap_forget(mlpe_pktmap *m, uint16_t local_port);

/* P8: returns the run's length (> 0 when from < to). */
int64_t mlpe_pktconn_next(const mlpe_pktconn *c, const mlpe_pktmap *m, int64_t from, int64_t to,
                          int64_t *t_realtime, int *why);
void mlpe_pktconn_consume(mlpe_pktconn *c, int64_t upto);

/* P1: ring_frames is rounded to whole blocks.  family 4 or 6, port the endpoint's. */
int mlpe_pktcap_open(mlpe_pktcap *cap, int ifindex, uint16_t port, unsigned ring_frames);
void mlpe_pktcap_close(mlpe_pktcap *cap);
/* P10: returns the frames taken, or a negative errno. */
int64_t mlpe_pktcap_drain(mlpe_pktcap *cap, mlpe_pktmap *m);

#endif /* MLPE_PKTSTAMP_H */
