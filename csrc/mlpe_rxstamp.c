/*
 * mlpe_rxstamp.c -- kernel receive stamps (rules K1-K4 in mlpe_rxstamp.h).
 */
#if defined(__linux__)
#define _GNU_SOURCE /* recvmsg's msghdr and the CMSG macros under -std=c99 */
#endif

#include "mlpe_rxstamp.h"

#include <errno.h>
#include <string.h>

#include "mlpe_clock.h"

#if defined(__linux__)
#include <sys/socket.h>
#include <time.h>
#endif

#if defined(__linux__) && defined(SO_TIMESTAMPING)
#define MLPE_HAVE_RXSTAMP 1

/* ABI constants of linux/net_tstamp.h, spelled out so that the build does
 * not need the kernel's headers. */
#ifndef SOF_TIMESTAMPING_RX_SOFTWARE
#define SOF_TIMESTAMPING_RX_SOFTWARE (1 << 3)
#endif
#ifndef SOF_TIMESTAMPING_SOFTWARE
#define SOF_TIMESTAMPING_SOFTWARE (1 << 4)
#endif

int mlpe_rxstamp_enable(int fd) {
    int flags = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
    if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags) != 0)
        return -errno;
    return 0;
}

/* The software stamp is the first of the three in the message (the others
 * are hardware stamps, zero here).  With a 64-bit time_t on a 32-bit system
 * the kernel sends SO_TIMESTAMPING_NEW with two 64-bit fields per stamp. */
static int64_t stamp_of(const struct cmsghdr *cmsg) {
    const unsigned char *data = CMSG_DATA(cmsg);
    size_t len = cmsg->cmsg_len - CMSG_LEN(0);
#ifdef SO_TIMESTAMPING_NEW
    if (cmsg->cmsg_type == SO_TIMESTAMPING_NEW) {
        int64_t field[2];
        if (len < sizeof field)
            return 0;
        memcpy(field, data, sizeof field);
        return field[0] * 1000000000 + field[1];
    }
#endif
    struct timespec ts;
    if (len < sizeof ts)
        return 0;
    memcpy(&ts, data, sizeof ts); /* CMSG_DATA need not be aligned for it */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t mlpe_rxstamp_recv(int fd, uint8_t *buf, size_t cap, int64_t *t_realtime_ns) {
    /* Room for one SCM_TIMESTAMPING (3 x 16 bytes) and a spare message. */
    union {
        char bytes[256];
        struct cmsghdr align;
    } control;
    struct iovec iov = {buf, cap};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof control.bytes;
    *t_realtime_ns = 0;
    ssize_t n;
    do {
        n = recvmsg(fd, &msg, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET)
            continue;
        if (cmsg->cmsg_type == SO_TIMESTAMPING
#ifdef SO_TIMESTAMPING_NEW
            || cmsg->cmsg_type == SO_TIMESTAMPING_NEW
#endif
        ) {
            *t_realtime_ns = stamp_of(cmsg);
        }
    }
    return (int64_t)n;
}

static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#else /* no SO_TIMESTAMPING: K1's "not supported" */

#ifndef EOPNOTSUPP
#define EOPNOTSUPP 95
#endif

int mlpe_rxstamp_enable(int fd) {
    (void)fd;
    return -EOPNOTSUPP;
}

int64_t mlpe_rxstamp_recv(int fd, uint8_t *buf, size_t cap, int64_t *t_realtime_ns) {
    (void)fd;
    (void)buf;
    (void)cap;
    *t_realtime_ns = 0;
    return -EOPNOTSUPP;
}

static int64_t realtime_ns(void) {
    return 0; /* never mapped: no stamp is ever received */
}

#endif

void mlpe_clockmap_sample(mlpe_clockmap *m) {
    int64_t best_width = INT64_MAX, best_offset = 0, best_at = 0;
    for (int i = 0; i < MLPE_CLOCKMAP_TRIES; i++) {
        int64_t before = mlpe_monotonic_ns();
        int64_t wall = realtime_ns();
        int64_t after = mlpe_monotonic_ns();
        if (after - before < best_width) {
            best_width = after - before;
            best_offset = before + (after - before) / 2 - wall;
            best_at = after;
        }
    }
    int64_t error = best_width / 2 + 1;
    if (m->sampled_at != 0) {
        int64_t moved = best_offset - m->offset_ns;
        int64_t magnitude = moved < 0 ? -moved : moved;
        if (magnitude > MLPE_CLOCKMAP_STEP_NS + error + m->error_ns) {
            m->steps++;
            m->last_step_ns = moved;
        }
    }
    m->offset_ns = best_offset;
    m->error_ns = error;
    m->sampled_at = best_at;
}
