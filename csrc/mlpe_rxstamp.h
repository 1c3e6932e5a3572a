/*
 * mlpe_rxstamp.h -- kernel receive stamps: when the data of a read arrived.
 *
 * A stamp taken when the event loop gets round to a read is late by however
 * long the loop was busy.  Linux stamps each packet as the network stack
 * receives it (SO_TIMESTAMPING with SOF_TIMESTAMPING_RX_SOFTWARE, see the
 * kernel's Documentation/networking/timestamping.rst) and hands the stamp
 * back with recvmsg() as SCM_TIMESTAMPING ancillary data, on TCP sockets too.
 *
 * Rules:
 *  K1. mlpe_rxstamp_enable() asks for software receive stamps on one socket.
 *      It returns 0, or a negative errno (-EOPNOTSUPP on systems without
 *      SO_TIMESTAMPING); the caller then reads with read-time stamps.
 *  K2. mlpe_rxstamp_recv() is one recvmsg() into buf.  It returns the byte
 *      count, 0 at end of stream, or a negative errno (-EAGAIN: nothing to
 *      read).  *t_realtime_ns is the stamp of the NEWEST data in the read
 *      (TCP reports the last segment it copied), on CLOCK_REALTIME, or 0 when
 *      the kernel gave none.  Data that waited in the socket behind later
 *      data therefore carries the later stamp: a read holds one stamp.
 *  K3. A stamp is mapped onto CLOCK_MONOTONIC (mlpe_clock.h) by an offset
 *      sampled as realtime bracketed by two monotonic reads; the tightest of
 *      MLPE_CLOCKMAP_TRIES brackets wins, and half its width is the mapping's
 *      error bound (error_ns).  NTP's slewing moves both clocks alike, so the
 *      offset changes only when the wall clock is stepped.
 *  K4. mlpe_clockmap_sample() re-samples; when the offset moved by more than
 *      MLPE_CLOCKMAP_STEP_NS beyond both error bounds the wall clock was
 *      stepped: steps counts it and last_step_ns says by how much.  Callers
 *      re-sample periodically and at once when a mapped stamp falls outside
 *      what is possible (after the read, or before the request was sent).
 *
 * Only Linux has SO_TIMESTAMPING on TCP; elsewhere the functions compile to
 * "not supported" (K1) so that the same binding builds on every platform.
 */
#ifndef MLPE_RXSTAMP_H
#define MLPE_RXSTAMP_H

#include <stddef.h>
#include <stdint.h>

#define MLPE_CLOCKMAP_TRIES 5
/* 20 µs: far above the bracket of a clock read (tens of ns), far below any
 * wall-clock step worth reporting. */
#define MLPE_CLOCKMAP_STEP_NS 20000

typedef struct {
    int64_t offset_ns;    /* monotonic - realtime */
    int64_t error_ns;     /* K3 */
    int64_t sampled_at;   /* monotonic ns of the last sample, 0 before the first */
    int64_t steps;        /* K4 */
    int64_t last_step_ns; /* the offset's change at the last step */
} mlpe_clockmap;

int mlpe_rxstamp_enable(int fd);
int64_t mlpe_rxstamp_recv(int fd, uint8_t *buf, size_t cap, int64_t *t_realtime_ns);
void mlpe_clockmap_sample(mlpe_clockmap *m);

static inline int64_t mlpe_clockmap_monotonic(const mlpe_clockmap *m, int64_t t_realtime_ns) {
    return t_realtime_ns + m->offset_ns;
}

#endif /* MLPE_RXSTAMP_H */
