/*
 * stress_rxthread.c -- a multi-threaded stress run of the receive thread
 * (csrc/mlpe_rxthread.c, rules T1-T6 in mlpe_rxthread.h), meant to run under
 * ThreadSanitizer and under AddressSanitizer + UBSan (`make stress`).
 *
 *     stress_rxthread [-t SECONDS] [-s SEED] [-n CONNS] [-w WRITERS] [-H]
 *
 * CONNS loopback TCP connections (slots) are read by one mlpe_rxthread; the
 * client side of each is non-blocking with kernel receive stamps asked for
 * (mlpe_rxstamp_enable).  WRITERS threads send, on the server side, a known
 * byte sequence per connection (a hash of the connection's id and the byte's
 * offset) in random-sized writes with small random sleeps, then shut their
 * side down.  The main thread is the "loop" of T6: it polls the wake fd,
 * takes the ready list and takes every connection on it, and checks that
 *   - the bytes arrive complete and in order, and nothing after the end;
 *   - the chunk lengths sum to the batch length, every chunk is non-empty
 *     and at most one read (64 KiB);
 *   - read stamps never decrease per connection; kernel stamps are non-zero
 *     and plausible CLOCK_REALTIME values when mlpe_rxstamp_enable succeeded;
 *   - the end of the stream is reported, once, after the writer's shutdown,
 *     and no read error is;
 *   - no connection sits with something to take that take_ready never
 *     returned (a lost wake-up, T1: a connection whose writer is done and
 *     that made no progress for 1 s is probed with a take; if something was
 *     waiting, the next ready list must hold it).
 * Meanwhile it replaces connections (remove, free, close; a new connection
 * takes the slot) at random moments -- some right after the wake fd turned
 * readable and before take_ready, while the thread is likely to have them on
 * its ready list (T5's unlink path) -- and retires each finished one.
 * Slot 0 carries big transfers (6+ MiB, small socket buffers) that the loop
 * does not take until the kernel's queue counts (SIOCOUTQ, SIOCINQ) say the
 * thread holds the cap and the writer has been blocked for a while: T3's
 * back-pressure, checked by the batch that is then taken (at least
 * MLPE_RXCONN_MAX_PENDING, less than one read past it), by everything
 * arriving once the loop takes again, and by a writer blocked for 1 s with
 * the thread below the cap (a failure).  Some of them are removed while
 * paused instead (T5).
 * Last, unless -H: a paused connection (T3) is reset by its peer, and the
 * receive thread must stay idle (epoll reports EPOLLERR/EPOLLHUP even with
 * an empty event mask), and the reset must be reported after the data.
 *
 * Exit status 0: every check held.  1: a check failed (the message says
 * which).  2: bad usage or the environment (sockets) failed.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../mlpe_clock.h"
#include "../mlpe_rxstamp.h"
#include "../mlpe_rxthread.h"

/* One read of the thread takes at most this much (READ_SPACE in
 * mlpe_rxthread.c). */
#define ONE_READ (64u << 10)
#define MAX_SLOTS 1024
#define MAX_WRITERS 16
#define NS 1000000000LL
#define MS 1000000LL

/* --- failure reporting ------------------------------------------------------ */

static void die(int status, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    va_start(ap, fmt);
    fprintf(stderr, "stress_rxthread: %s: ", status == 1 ? "FAIL" : "error");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    _exit(status); /* other threads are still running: no atexit, no LSan */
}
#define FAIL(...) die(1, __VA_ARGS__)
#define SYS(what) die(2, "%s: %s (line %d)", what, strerror(errno), __LINE__)

/* --- the byte sequence -------------------------------------------------------- */

static inline uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The bytes [off, off + len) of connection `id`: not periodic, so a lost,
 * repeated or swapped chunk shows. */
static inline uint64_t word_at(uint64_t id, uint64_t index) {
    return mix((id << 40) ^ index);
}

static inline uint8_t byte_at(uint64_t id, uint64_t off) {
    uint64_t w = word_at(id, off >> 3);
    uint8_t bytes[8];
    memcpy(bytes, &w, 8);
    return bytes[off & 7];
}

static void pattern(uint64_t id, uint64_t off, uint8_t *out, size_t len) {
    size_t i = 0;
    for (; i < len && (off & 7) != 0; i++, off++)
        out[i] = byte_at(id, off);
    for (; len - i >= 8; i += 8, off += 8) { /* whole words: one store each */
        uint64_t w = word_at(id, off >> 3);
        memcpy(out + i, &w, 8);
    }
    for (; i < len; i++, off++)
        out[i] = byte_at(id, off);
}

/* The first byte of data[0, len) that is not the stream's bytes [off, off +
 * len), or len. */
static size_t mismatch(uint64_t id, uint64_t off, const uint8_t *data, size_t len) {
    size_t i = 0;
    for (; i < len && (off & 7) != 0; i++, off++)
        if (data[i] != byte_at(id, off))
            return i;
    for (; len - i >= 8; i += 8, off += 8) {
        uint64_t want = word_at(id, off >> 3), got;
        memcpy(&got, data + i, 8);
        if (got != want)
            break; /* the byte loop below finds it */
    }
    for (; i < len; i++, off++)
        if (data[i] != byte_at(id, off))
            return i;
    return len;
}

typedef struct {
    uint64_t s;
} rng;
static uint64_t rnd(rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}
static uint64_t below(rng *r, uint64_t n) {
    return n ? rnd(r) % n : 0;
}

static int64_t now_ns(void) {
    return mlpe_monotonic_ns();
}
static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}
static void sleep_ns(int64_t ns) {
    struct timespec ts = {(time_t)(ns / NS), (long)(ns % NS)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
static int64_t cpu_ns(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return ((int64_t)u.ru_utime.tv_sec + u.ru_stime.tv_sec) * NS +
           ((int64_t)u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000;
}

/* --- connections -------------------------------------------------------------- */

/* The loop's view of one connection (mlpe_rxconn.owner). */
typedef struct {
    uint64_t id;
    int slot;
    int client_fd;
    mlpe_rxconn *conn;
    int stamps; /* mlpe_rxstamp_enable succeeded */
    uint64_t target, received, chunks;
    int64_t last_read, last_progress;
    /* the watchdog found something waiting after round suspect_round */
    uint64_t suspect_round, suspect_offset;
    size_t suspect_bytes;
    int suspect_eof;
    int64_t suspect_idle, last_progress_before;
    int eof;
    int reset; /* the peer reset it: the end may come early */
    int big, held;
    int64_t hold_since, at_cap_since;
    uint64_t seen; /* the take_ready round that last listed it */
} inst;

/* What the writers see, under mu. */
typedef struct {
    pthread_mutex_t mu;
    int server_fd; /* -1: nothing to write */
    uint64_t id, target, sent;
    int big, shut;
    int64_t stall_since; /* first EAGAIN of the current streak, 0 if none */
    inst *cur;           /* the loop's (main thread only) */
} slot;

static struct {
    int n_slots, n_writers;
    slot slots[MAX_SLOTS];
    mlpe_rxthread *t;
    int listen_fd;
    struct sockaddr_in addr;
    uint64_t next_id;
    int stop_writers; /* __atomic */
    int64_t start_rt;
    /* statistics */
    uint64_t spawned, finished, replaced, replaced_before_take_ready, replaced_paused;
    uint64_t bytes, chunks, takes, empty_takes, duplicates, stamps_missing_conns;
    uint64_t cap_cycles, over_cap, hold_timeouts;
    size_t max_batch;
} G;

static void make_pair(int small, int *client, int *server) {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        SYS("socket");
    int one = 1;
    if (small) {
        int size = 128 << 10; /* no autotuning: the writer blocks soon after T3's cap */
        if (setsockopt(c, SOL_SOCKET, SO_RCVBUF, &size, sizeof size) != 0)
            SYS("SO_RCVBUF");
    }
    if (connect(c, (struct sockaddr *)&G.addr, sizeof G.addr) != 0)
        SYS("connect");
    int s = accept4(G.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0)
        SYS("accept4");
    if (small) {
        int size = 128 << 10;
        if (setsockopt(s, SOL_SOCKET, SO_SNDBUF, &size, sizeof size) != 0)
            SYS("SO_SNDBUF");
    }
    /* every small write its own segment: more, smaller reads */
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK) != 0)
        SYS("fcntl");
    *client = c;
    *server = s;
}

static inst *spawn(int index, rng *r, int big) {
    slot *s = &G.slots[index];
    inst *in = calloc(1, sizeof *in);
    mlpe_rxconn *conn = malloc(sizeof *conn);
    if (!in || !conn)
        die(2, "out of memory");
    in->id = ++G.next_id;
    in->slot = index;
    in->big = big;
    uint64_t kind = below(r, 32);
    if (big)
        in->target = (6u << 20) + below(r, 1u << 20);
    else if (kind == 0)
        in->target = 0; /* the end at once */
    else if (kind < 4)
        in->target = 1 + below(r, 16);
    else
        in->target = 1 + below(r, 128u << 10);
    int server;
    make_pair(big, &in->client_fd, &server);
    in->stamps = mlpe_rxstamp_enable(in->client_fd) == 0;
    if (!in->stamps)
        G.stamps_missing_conns++;
    mlpe_rxconn_init(conn, in->client_fd, in);
    in->conn = conn;
    in->last_progress = now_ns();
    int err = mlpe_rxthread_add(G.t, conn);
    if (err)
        FAIL("mlpe_rxthread_add: %s", strerror(-err));
    if (big) {
        in->held = 1;
        in->hold_since = now_ns();
    }
    pthread_mutex_lock(&s->mu);
    s->server_fd = server;
    s->id = in->id;
    s->target = in->target;
    s->sent = 0;
    s->big = big;
    s->shut = 0;
    s->stall_since = 0;
    pthread_mutex_unlock(&s->mu);
    s->cur = in;
    G.spawned++;
    return in;
}

/* T5: remove, then free and close (the writer's side too). */
static void retire(int index) {
    slot *s = &G.slots[index];
    inst *in = s->cur;
    pthread_mutex_lock(&s->mu); /* no write to the server side meanwhile */
    mlpe_rxthread_remove(G.t, in->conn);
    mlpe_rxconn_free(in->conn);
    memset(in->conn, 0xA5, sizeof *in->conn); /* a later touch reads garbage */
    free(in->conn);
    if (close(in->client_fd) != 0)
        SYS("close");
    if (s->server_fd >= 0 && close(s->server_fd) != 0)
        SYS("close");
    s->server_fd = -1;
    pthread_mutex_unlock(&s->mu);
    free(in);
    s->cur = NULL;
}

/* A connection replaced before its end (not slot 0's big ones, not one the
 * watchdog is waiting on). */
static int replace_random(rng *r) {
    int i = 1 + (int)below(r, (uint64_t)G.n_slots - 1);
    if (!G.slots[i].cur || G.slots[i].cur->suspect_round)
        return 0;
    retire(i);
    spawn(i, r, 0);
    G.replaced++;
    return 1;
}

/* --- the writers ------------------------------------------------------------- */

typedef struct {
    int first;
    pthread_t thread;
    rng r;
} writer;

static void *write_loop(void *arg) {
    writer *w = arg;
    uint8_t *buf = malloc(64u << 10);
    if (!buf)
        die(2, "out of memory");
    int owned = (G.n_slots - w->first + G.n_writers - 1) / G.n_writers;
    int idle = 0;
    while (!__atomic_load_n(&G.stop_writers, __ATOMIC_ACQUIRE)) {
        slot *s = &G.slots[w->first + G.n_writers * (int)below(&w->r, (uint64_t)owned)];
        int acted = 0;
        pthread_mutex_lock(&s->mu);
        if (s->server_fd >= 0 && !s->shut) {
            acted = 1;
            if (s->sent < s->target) {
                uint64_t kind = below(&w->r, 100);
                size_t n;
                if (s->big)
                    n = (16u << 10) + below(&w->r, 48u << 10);
                else if (kind < 70)
                    n = 1 + below(&w->r, 64);
                else if (kind < 95)
                    n = 64 + below(&w->r, 4096);
                else
                    n = 4096 + below(&w->r, 60u << 10);
                if (n > s->target - s->sent)
                    n = (size_t)(s->target - s->sent);
                pattern(s->id, s->sent, buf, n);
                ssize_t got = send(s->server_fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (got > 0) {
                    s->sent += (uint64_t)got;
                    s->stall_since = 0;
                } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    if (!s->stall_since)
                        s->stall_since = now_ns();
                } else {
                    die(1, "writer: send on connection %llu: %s", (unsigned long long)s->id,
                        strerror(errno));
                }
            }
            if (s->sent == s->target) {
                if (shutdown(s->server_fd, SHUT_WR) != 0)
                    SYS("shutdown");
                s->shut = 1;
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (acted) {
            idle = 0;
            if (below(&w->r, 4) == 0)
                sleep_ns((int64_t)below(&w->r, 100000)); /* up to 100 µs */
        } else if (++idle >= 32) {
            idle = 0;
            sleep_ns(200000);
        }
    }
    free(buf);
    return NULL;
}

/* --- the loop's checks -------------------------------------------------------- */


static void check_batch(inst *in, const mlpe_rxbatch *b, const char *when) {
    int64_t now = now_ns(), now_rt = realtime_ns();
    unsigned long long id = (unsigned long long)in->id;
    G.takes++;
    if (b->len == 0 && b->n_chunks == 0 && !b->eof && !b->error)
        G.empty_takes++;
    if (b->len > G.max_batch)
        G.max_batch = b->len;
    if (b->len > MLPE_RXCONN_MAX_PENDING)
        G.over_cap++;
    if (b->len >= (size_t)MLPE_RXCONN_MAX_PENDING + ONE_READ)
        FAIL("T3: connection %llu (%s): %zu bytes were pending, past the cap of %u and one "
             "read (%u)",
             id, when, b->len, (unsigned)MLPE_RXCONN_MAX_PENDING, ONE_READ);
    if (in->eof && (b->len || b->n_chunks || b->eof))
        FAIL("T2: connection %llu (%s): %zu bytes / eof=%d taken after the end of the stream",
             id, when, b->len, b->eof);
    size_t sum = 0;
    for (size_t i = 0; i < b->n_chunks; i++) {
        const mlpe_rxchunk *ch = &b->chunks[i];
        if (ch->len == 0 || ch->len > ONE_READ)
            FAIL("T2: connection %llu (%s): chunk %zu of %zu has length %u", id, when, i,
                 b->n_chunks, (unsigned)ch->len);
        if (ch->t_read < in->last_read)
            FAIL("T2: connection %llu (%s): read stamp went back by %lld ns at chunk %zu", id,
                 when, (long long)(in->last_read - ch->t_read), i);
        if (ch->t_read > now)
            FAIL("T2: connection %llu (%s): read stamp %lld ns in the future", id, when,
                 (long long)(ch->t_read - now));
        in->last_read = ch->t_read;
        if (in->stamps) {
            if (ch->t_realtime == 0)
                FAIL("T2/K2: connection %llu (%s): chunk %zu (%u bytes) has no kernel stamp "
                     "although mlpe_rxstamp_enable succeeded",
                     id, when, i, (unsigned)ch->len);
            if (ch->t_realtime < G.start_rt - NS || ch->t_realtime > now_rt + NS)
                FAIL("K2: connection %llu (%s): kernel stamp %lld is not a CLOCK_REALTIME "
                     "time of this run (now %lld)",
                     id, when, (long long)ch->t_realtime, (long long)now_rt);
        }
        sum += ch->len;
    }
    if (sum != b->len)
        FAIL("T2: connection %llu (%s): chunk lengths sum to %zu, the batch holds %zu", id, when,
             sum, b->len);
    if (b->len > in->target - in->received)
        FAIL("T2: connection %llu (%s): %zu bytes taken at offset %llu, only %llu were sent",
             id, when, b->len, (unsigned long long)in->received,
             (unsigned long long)in->target);
    size_t at = mismatch(in->id, in->received, b->data, b->len);
    if (at < b->len)
        FAIL("T2: connection %llu (%s): byte %llu of the stream is 0x%02x, expected 0x%02x "
             "(batch of %zu bytes in %zu chunks at offset %llu)",
             id, when, (unsigned long long)(in->received + at), b->data[at],
             byte_at(in->id, in->received + at), b->len, b->n_chunks,
             (unsigned long long)in->received);
    if (b->error)
        FAIL("T2: connection %llu (%s): read error %d (%s) after %llu bytes", id, when,
             b->error, strerror(b->error), (unsigned long long)(in->received + b->len));
    in->received += b->len;
    in->chunks += b->n_chunks;
    G.bytes += b->len;
    G.chunks += b->n_chunks;
    if (b->len || b->eof) {
        in->last_progress_before = in->last_progress;
        in->last_progress = now;
    }
    if (b->eof) {
        if (in->received != in->target && !in->reset)
            FAIL("T2: connection %llu (%s): end of stream after %llu of %llu bytes", id, when,
                 (unsigned long long)in->received, (unsigned long long)in->target);
        in->eof = 1;
    }
}

static void take(inst *in, mlpe_rxbatch *batch, const char *when) {
    int err = mlpe_rxthread_take(G.t, in->conn, batch);
    if (err)
        FAIL("mlpe_rxthread_take: %s", strerror(-err));
    check_batch(in, batch, when);
}

/* What the receive thread holds of a connection the loop does not take: what
 * was sent less what still waits in the kernel (the server's send queue, the
 * client's receive queue).  *blocked_ns: how long the writer has been getting
 * EAGAIN (0 if it is not). */
static int64_t read_by_thread(slot *s, inst *in, int64_t now, int64_t *blocked_ns) {
    int inq = 0, outq = 0;
    pthread_mutex_lock(&s->mu);
    uint64_t sent = s->sent;
    *blocked_ns = s->stall_since ? now - s->stall_since : 0;
    if (s->server_fd >= 0 && ioctl(s->server_fd, SIOCOUTQ, &outq) != 0)
        SYS("ioctl(SIOCOUTQ)");
    pthread_mutex_unlock(&s->mu);
    if (ioctl(in->client_fd, SIOCINQ, &inq) != 0)
        SYS("ioctl(SIOCINQ)");
    return (int64_t)sent - inq - outq;
}

/* T3: the big connection on slot 0 is left alone until the thread holds the
 * cap and the writer has been blocked (TCP's window closed) for 20 ms, twice
 * in a row; then taken (or, at times, removed: T5 on a paused connection). */
static void tend_held(rng *r, mlpe_rxbatch *batch, int64_t now, int64_t end) {
    slot *s = &G.slots[0];
    inst *in = s->cur;
    if (!in || !in->held)
        return;
    int64_t blocked;
    int64_t held = read_by_thread(s, in, now, &blocked);
    if (held >= (int64_t)MLPE_RXCONN_MAX_PENDING && blocked > 20 * MS) {
        if (!in->at_cap_since || now - in->at_cap_since < 20 * MS) {
            if (!in->at_cap_since)
                in->at_cap_since = now;
            return;
        }
    } else {
        in->at_cap_since = 0;
        if (now - in->hold_since < 5 * NS)
            return;
        if (blocked > NS)
            FAIL("T3: connection %llu: its writer has been blocked for %.1f s, and the "
                 "thread holds only %lld bytes: it stopped reading before the cap (%u)",
                 (unsigned long long)in->id, (double)blocked / NS, (long long)held,
                 (unsigned)MLPE_RXCONN_MAX_PENDING);
        G.hold_timeouts++; /* a slow machine: release it anyway */
        fprintf(stderr,
                "stress_rxthread: note: connection %llu: the cap not reached after 5 s "
                "(%lld bytes read, writer blocked for %.0f ms)\n",
                (unsigned long long)in->id, (long long)held, (double)blocked / MS);
        in->held = 0;
        take(in, batch, "released after 5 s");
        return;
    }
    if (G.cap_cycles > 0 && now < end && (G.replaced_paused == 0 || below(r, 4) == 0)) {
        G.replaced_paused++; /* T5 on a paused connection with 4 MiB pending */
        G.replaced++;
        retire(0);
        spawn(0, r, 1);
        return;
    }
    in->held = 0;
    take(in, batch, "released after back-pressure");
    if (batch->len < MLPE_RXCONN_MAX_PENDING)
        FAIL("T3: connection %llu: %zu bytes taken after the kernel's counts said the thread "
             "held %lld",
             (unsigned long long)in->id, batch->len, (long long)held);
    G.cap_cycles++;
}

/* T1: a connection whose writer is done and that made no progress for 1 s
 * is probed with a take.  When something was waiting, the thread either has
 * the connection on its ready list -- then the next take_ready returns it --
 * or take_ready will never return it: a lost wake-up, found by
 * check_suspects after the next take_ready.  When nothing was waiting for
 * 10 s, the thread did not read what the writer sent. */
static void watchdog(mlpe_rxbatch *batch, int64_t now, uint64_t round) {
    for (int i = 0; i < G.n_slots; i++) {
        slot *s = &G.slots[i];
        inst *in = s->cur;
        if (!in || in->eof || in->held || in->suspect_round || now - in->last_progress < NS)
            continue;
        pthread_mutex_lock(&s->mu);
        int shut = s->shut;
        uint64_t sent = s->sent;
        pthread_mutex_unlock(&s->mu);
        if (!shut)
            continue;
        uint64_t before = in->received;
        take(in, batch, "watchdog");
        if (batch->len || batch->eof) {
            in->suspect_round = round;
            in->suspect_bytes = batch->len;
            in->suspect_eof = batch->eof;
            in->suspect_offset = before;
            in->suspect_idle = now - in->last_progress_before;
            continue;
        }
        if (now - in->last_progress > 10 * NS)
            FAIL("T2: connection %llu: its writer sent all %llu bytes and shut down, %llu "
                 "arrived and no end of stream in 10 s",
                 (unsigned long long)in->id, (unsigned long long)sent,
                 (unsigned long long)in->received);
    }
}

static void check_suspects(uint64_t round) {
    for (int i = 0; i < G.n_slots; i++) {
        inst *in = G.slots[i].cur;
        if (in && in->suspect_round && in->suspect_round < round)
            FAIL("T1: lost wake-up: connection %llu had %zu bytes%s waiting (at offset %llu "
                 "of %llu, no progress for %.1f s) and the next ready list (take_ready, "
                 "walked by next_ready) did not hold it",
                 (unsigned long long)in->id, in->suspect_bytes,
                 in->suspect_eof ? " and its end" : "", (unsigned long long)in->suspect_offset,
                 (unsigned long long)in->target, (double)in->suspect_idle / NS);
    }
}

/* --- T3 + a peer's reset: the paused connection must not spin the thread ----- */

static void reset_while_paused(rng *r, mlpe_rxbatch *batch) {
    inst *in = spawn(0, r, 1);
    slot *s = &G.slots[0];
    /* the writers are gone: send from here until the socket is full */
    uint8_t *buf = malloc(256u << 10);
    if (!buf)
        die(2, "out of memory");
    int64_t stall = 0, start = now_ns();
    while (s->sent < s->target) {
        size_t n = 256u << 10;
        if (n > s->target - s->sent)
            n = (size_t)(s->target - s->sent);
        pattern(s->id, s->sent, buf, n);
        ssize_t got = send(s->server_fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (got > 0) {
            s->sent += (uint64_t)got;
            s->stall_since = stall = 0;
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            SYS("send");
        int64_t now = now_ns();
        if (!stall)
            s->stall_since = stall = now;
        int64_t blocked;
        if (now - stall > 50 * MS &&
            read_by_thread(s, in, now, &blocked) >= (int64_t)MLPE_RXCONN_MAX_PENDING)
            break; /* the thread holds the cap: paused */
        if (now - start > 5 * NS)
            FAIL("T3: %llu bytes sent to a connection the loop never takes and after 5 s "
                 "the thread does not hold the cap",
                 (unsigned long long)s->sent);
        sleep_ns(MS);
    }
    free(buf);
    if (s->sent == s->target)
        die(2, "reset check: the big transfer fit in the socket buffers");
    /* RST instead of FIN */
    struct linger lg = {1, 0};
    if (setsockopt(s->server_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0)
        SYS("SO_LINGER");
    close(s->server_fd);
    s->server_fd = -1;
    sleep_ns(50 * MS);
    int64_t wall0 = now_ns(), cpu0 = cpu_ns();
    sleep_ns(300 * MS); /* nothing runs here but the receive thread */
    int64_t wall = now_ns() - wall0, cpu = cpu_ns() - cpu0;
    printf("reset while paused: %llu bytes sent, process CPU %.0f ms over %.0f ms idle\n",
           (unsigned long long)s->sent, cpu / 1e6, wall / 1e6);
    if (cpu > wall / 3)
        FAIL("T3: the receive thread spins on a paused connection whose peer reset it: "
             "%.0f ms of CPU in %.0f ms while nothing was taken (epoll reports "
             "EPOLLERR/EPOLLHUP even with the empty event mask that pauses it)",
             cpu / 1e6, wall / 1e6);
    /* take it all: the data in order, then the reset (or the end) */
    in->held = 0;
    in->reset = 1; /* what was still in the peer's send queue is gone */
    in->target = s->sent;
    int64_t deadline = now_ns() + 10 * NS;
    for (;;) {
        int err = mlpe_rxthread_take(G.t, in->conn, batch);
        if (err)
            FAIL("mlpe_rxthread_take: %s", strerror(-err));
        int error = batch->error;
        batch->error = 0;
        check_batch(in, batch, "reset while paused");
        if (error && error != ECONNRESET)
            FAIL("T2: connection %llu: read error %d (%s) after a reset, expected ECONNRESET",
                 (unsigned long long)in->id, error, strerror(error));
        if (error || in->eof)
            break;
        if (now_ns() > deadline)
            FAIL("T2: connection %llu: neither the reset nor the end reported 10 s after the "
                 "peer's reset (%llu of %llu bytes taken)",
                 (unsigned long long)in->id, (unsigned long long)in->received,
                 (unsigned long long)in->target);
        struct pollfd p = {mlpe_rxthread_wake_fd(G.t), POLLIN, 0};
        poll(&p, 1, 10);
        mlpe_rxthread_take_ready(G.t); /* only this connection is registered */
    }
    printf("reset while paused: %llu bytes taken in %llu chunks, then %s\n",
           (unsigned long long)in->received, (unsigned long long)in->chunks,
           in->eof ? "the end of the stream" : "ECONNRESET");
    retire(0);
}

/* --- main --------------------------------------------------------------------- */

static void usage(void) {
    die(2, "usage: stress_rxthread [-t SECONDS] [-s SEED] [-n CONNS] [-w WRITERS] [-H]");
}

int main(int argc, char **argv) {
    double seconds = 2.5;
    uint64_t seed = (uint64_t)time(NULL);
    int reset_check = 1;
    G.n_slots = 64;
    G.n_writers = 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-H")) {
            reset_check = 0;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (!strcmp(a, "-t"))
            seconds = atof(v);
        else if (!strcmp(a, "-s"))
            seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "-n"))
            G.n_slots = atoi(v);
        else if (!strcmp(a, "-w"))
            G.n_writers = atoi(v);
        else
            usage();
    }
    if (G.n_slots < 2 || G.n_slots > MAX_SLOTS || G.n_writers < 1 ||
        G.n_writers > MAX_WRITERS || G.n_writers > G.n_slots || !(seconds > 0))
        usage();
    printf("stress_rxthread: seed %llu, %d connections, %d writers, %.1f s\n",
           (unsigned long long)seed, G.n_slots, G.n_writers, seconds);
    fflush(stdout);
    rng r = {mix(seed) | 1};
    G.start_rt = realtime_ns();

    G.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (G.listen_fd < 0)
        SYS("socket");
    G.addr.sin_family = AF_INET;
    G.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    G.addr.sin_port = 0;
    socklen_t len = sizeof G.addr;
    if (bind(G.listen_fd, (struct sockaddr *)&G.addr, sizeof G.addr) != 0 ||
        listen(G.listen_fd, 128) != 0 ||
        getsockname(G.listen_fd, (struct sockaddr *)&G.addr, &len) != 0)
        SYS("listen on 127.0.0.1");
    /* Linux turns receive stamping on for the whole stack when the first
     * socket asks and off when the last one that asked is gone, the turning
     * on deferred to a work queue: segments that arrive meanwhile carry no
     * stamp.  The listening socket asks too, for the whole run, so that
     * every connection's first read is stamped (the last check runs when no
     * other connection is left). */
    if (mlpe_rxstamp_enable(G.listen_fd) == 0)
        sleep_ns(20 * MS);

    /* T8: the thread pins itself to the CPUs the process may use (a pin
     * that changes nothing, so the run stays the same on any machine) and
     * says so; the thread's policy is left as inherited. */
    mlpe_rxthread_options options = {0};
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        die(2, "sched_getaffinity: %s", strerror(errno));
    options.pin = 1;
    for (int cpu = 0; cpu < MLPE_RXCPU_WORDS * 64 && cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &allowed))
            options.cpus[cpu / 64] |= (uint64_t)1 << (cpu % 64);
    int err = 0;
    G.t = mlpe_rxthread_start(&options, &err);
    if (!G.t)
        die(2, "mlpe_rxthread_start: %s", strerror(-err));
    const mlpe_rxthread_placement *placed = mlpe_rxthread_placement_of(G.t);
    if (placed->tid <= 0 || placed->affinity_error != 0 ||
        memcmp(placed->cpus, options.cpus, sizeof options.cpus) != 0 || placed->sched_error != 0)
        die(1, "placement: tid %d, affinity errno %d, sched errno %d", placed->tid,
            placed->affinity_error, placed->sched_error);
    int wake_fd = mlpe_rxthread_wake_fd(G.t);
    for (int i = 0; i < G.n_slots; i++) {
        if (pthread_mutex_init(&G.slots[i].mu, NULL) != 0)
            die(2, "pthread_mutex_init");
        G.slots[i].server_fd = -1;
    }
    for (int i = 0; i < G.n_slots; i++)
        spawn(i, &r, i == 0);
    writer writers[MAX_WRITERS];
    for (int w = 0; w < G.n_writers; w++) {
        writers[w].first = w;
        writers[w].r.s = mix(seed + 1 + (uint64_t)w) | 1;
        if (pthread_create(&writers[w].thread, NULL, write_loop, &writers[w]) != 0)
            die(2, "pthread_create");
    }

    mlpe_rxbatch batch;
    memset(&batch, 0, sizeof batch);
    size_t list_cap = (size_t)G.n_slots * 4;
    inst **list = malloc(list_cap * sizeof *list);
    if (!list)
        die(2, "out of memory");
    int64_t start = now_ns(), end = start + (int64_t)(seconds * NS);
    int64_t hard_end = end + 30 * NS, last_watch = start, next_replace = start;
    uint64_t round = 0;
    for (;;) {
        int64_t now = now_ns();
        int running = now < end, active = 0;
        for (int i = 0; i < G.n_slots; i++)
            active += G.slots[i].cur != NULL;
        if (!running && active == 0)
            break;
        if (now > hard_end)
            FAIL("%d connections still open 30 s after the run", active);

        struct pollfd p = {wake_fd, POLLIN, 0};
        int n = poll(&p, 1, 5);
        if (n < 0 && errno != EINTR)
            SYS("poll");
        /* T5's unlink: connections the thread has just put on its ready list
         * (a replacement every 2 ms on average, half of them here) */
        for (int k = 0; k < 4 && n > 0 && running && next_replace <= now_ns(); k++) {
            next_replace += (int64_t)below(&r, 4 * MS);
            if (below(&r, 2) == 0 && replace_random(&r))
                G.replaced_before_take_ready++;
        }

        /* T1: the ready list, walked as documented (next_ready), at times by
         * a loop that is slow to get round to it (the interpreter's lock) */
        round++;
        size_t count = 0;
        mlpe_rxconn *ready = mlpe_rxthread_take_ready(G.t);
        if (below(&r, 4) == 0)
            sleep_ns((int64_t)below(&r, 200000));
        for (mlpe_rxconn *c = ready; c; c = c->next_ready) {
            inst *in = c->owner;
            if (in->seen == round) {
                G.duplicates++;
                continue;
            }
            if (count == list_cap)
                FAIL("T1: the ready list has more than %zu entries for %d connections",
                     list_cap, G.n_slots);
            in->seen = round;
            in->suspect_round = 0; /* it was on the ready list after all */
            list[count++] = in;
        }
        check_suspects(round);
        for (size_t k = 0; k < count; k++) {
            inst *in = list[k];
            if (in->held)
                continue; /* T3: left pending on purpose */
            take(in, &batch, "ready");
            if (in->eof) {
                int i = in->slot;
                retire(i);
                G.finished++;
                if (now_ns() < end)
                    spawn(i, &r, i == 0);
            }
        }

        now = now_ns();
        tend_held(&r, &batch, now, end);
        /* the other half: while data flows */
        for (int k = 0; k < 4 && running && next_replace <= now; k++) {
            next_replace += (int64_t)below(&r, 4 * MS);
            replace_random(&r);
        }
        if (now - last_watch > 100 * MS) {
            last_watch = now;
            watchdog(&batch, now, round);
        }
    }

    __atomic_store_n(&G.stop_writers, 1, __ATOMIC_RELEASE);
    for (int w = 0; w < G.n_writers; w++)
        pthread_join(writers[w].thread, NULL);
    if (reset_check)
        reset_while_paused(&r, &batch);

    mlpe_rxthread_stop(G.t);
    mlpe_rxbatch_free(&batch);
    free(list);
    close(G.listen_fd);
    for (int i = 0; i < G.n_slots; i++)
        pthread_mutex_destroy(&G.slots[i].mu);

    double elapsed = (double)(now_ns() - start) / NS;
    printf("connections %llu (finished %llu, replaced %llu: %llu before take_ready, "
           "%llu paused), %llu bytes in %llu chunks, %llu takes (%llu empty), "
           "%llu duplicate ready-list entries\n",
           (unsigned long long)G.spawned, (unsigned long long)G.finished,
           (unsigned long long)G.replaced, (unsigned long long)G.replaced_before_take_ready,
           (unsigned long long)G.replaced_paused, (unsigned long long)G.bytes,
           (unsigned long long)G.chunks, (unsigned long long)G.takes,
           (unsigned long long)G.empty_takes, (unsigned long long)G.duplicates);
    printf("back-pressure: %llu cycles reached the cap, largest batch %zu bytes "
           "(cap %u; %llu batches past it by less than one read), %llu hold timeouts; "
           "%llu connections without kernel stamps\n",
           (unsigned long long)G.cap_cycles, G.max_batch, (unsigned)MLPE_RXCONN_MAX_PENDING,
           (unsigned long long)G.over_cap, (unsigned long long)G.hold_timeouts,
           (unsigned long long)G.stamps_missing_conns);
    if (G.cap_cycles == 0)
        FAIL("T3: no big transfer reached the cap (back-pressure not exercised; "
             "try a longer -t)");
    printf("stress_rxthread: ok (%.2f s)\n", elapsed);
    return 0;
}
