/*
 * mlpe_rxthread.c -- the receive thread (rules T1-T6 in mlpe_rxthread.h).
 */
#if defined(__linux__)
#define _GNU_SOURCE /* pthreads, epoll and eventfd under -std=c99 */
#endif

#include "mlpe_rxthread.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mlpe_clock.h"
#include "mlpe_rxstamp.h"

/* One read takes at most this much, into the thread's own scratch space; a
 * connection's batch then holds only the bytes read (a token event is tens
 * of bytes, a burst of a busy stream a few KiB), not a read's room each. */
#define READ_SPACE (64u << 10)
/* A batch's first storage: grown by doubling to what waits (T3's cap). */
#define FIRST_SPACE 1024u
#define FIRST_CHUNKS 8u
#define STOP_EVENT UINT64_MAX

void mlpe_rxbatch_free(mlpe_rxbatch *b) {
    free(b->data);
    free(b->chunks);
    memset(b, 0, sizeof *b);
}

void mlpe_rxconn_init(mlpe_rxconn *c, int fd, void *owner) {
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->owner = owner;
}

void mlpe_rxconn_free(mlpe_rxconn *c) {
    mlpe_rxbatch_free(&c->pending);
}

void mlpe_rxbatch_shrink(mlpe_rxbatch *b) {
    if (b->cap > MLPE_RXBATCH_KEEP_BYTES) {
        free(b->data);
        b->data = NULL;
        b->len = b->cap = 0;
    }
    if (b->cap_chunks > MLPE_RXBATCH_KEEP_CHUNKS) {
        free(b->chunks);
        b->chunks = NULL;
        b->n_chunks = b->cap_chunks = 0;
    }
}

size_t mlpe_rxbatch_bytes(const mlpe_rxbatch *b) {
    return b->cap + b->cap_chunks * sizeof *b->chunks;
}

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

static int reserve(mlpe_rxbatch *b, size_t bytes) {
    if (b->cap - b->len < bytes) {
        size_t cap = b->cap ? b->cap : FIRST_SPACE;
        while (cap - b->len < bytes)
            cap *= 2;
        uint8_t *data = realloc(b->data, cap);
        if (!data)
            return -ENOMEM;
        b->data = data;
        b->cap = cap;
    }
    if (b->n_chunks == b->cap_chunks) {
        size_t cap = b->cap_chunks ? b->cap_chunks * 2 : FIRST_CHUNKS;
        mlpe_rxchunk *chunks = realloc(b->chunks, cap * sizeof *chunks);
        if (!chunks)
            return -ENOMEM;
        b->chunks = chunks;
        b->cap_chunks = cap;
    }
    return 0;
}

struct mlpe_rxthread {
    pthread_t thread;
    int epoll_fd, wake_fd, stop_fd;
    mlpe_rxthread_options options;
    mlpe_rxthread_placement placement; /* T8: the thread's, then read-only */
    int placed;                        /* under lock, signalled on placed_cond */
    pthread_cond_t placed_cond;
    pthread_mutex_t lock;
    mlpe_rxconn **slots;
    uint32_t n_slots;
    uint32_t next_generation;
    mlpe_rxconn *ready_head, *ready_tail;
    uint8_t *scratch; /* READ_SPACE bytes: every read lands here first */
};

static uint64_t key_of(const mlpe_rxconn *c) {
    return ((uint64_t)c->generation << 32) | c->slot;
}

static void unwatch(mlpe_rxthread *t, mlpe_rxconn *c) {
    if (c->watched) {
        if (!c->paused) /* a paused socket has left the set already (T3) */
            epoll_ctl(t->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
        c->watched = 0;
        c->paused = 0;
    }
}

static int watch(mlpe_rxthread *t, mlpe_rxconn *c, int op) {
    struct epoll_event event = {0};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.u64 = key_of(c);
    return epoll_ctl(t->epoll_fd, op, c->fd, &event);
}

/* T2, T3: one read of c (level-triggered epoll reports it again while more
 * waits); returns 1 when something was added for the loop. */
static int read_one(mlpe_rxthread *t, mlpe_rxconn *c) {
    mlpe_rxbatch *b = &c->pending;
    if (b->len >= MLPE_RXCONN_MAX_PENDING) {
        epoll_ctl(t->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
        c->paused = 1;
        return 0;
    }
    int64_t t_realtime;
    int64_t n = mlpe_rxstamp_recv(c->fd, t->scratch, READ_SPACE, &t_realtime);
    int64_t t_read = mlpe_monotonic_ns();
    if (n > 0) {
        int err = reserve(b, (size_t)n);
        if (err) { /* the bytes read are lost: the loop hears a read error */
            b->error = -err;
            unwatch(t, c);
            return 1;
        }
        memcpy(b->data + b->len, t->scratch, (size_t)n);
        mlpe_rxchunk *chunk = &b->chunks[b->n_chunks++];
        chunk->len = (uint32_t)n;
        chunk->t_realtime = t_realtime;
        chunk->t_read = t_read;
        b->len += (size_t)n;
        return 1;
    }
    if (n == 0) {
        b->eof = 1;
        unwatch(t, c);
        return 1;
    }
    if (n == -EAGAIN || n == -EWOULDBLOCK)
        return 0;
    b->error = (int)-n;
    unwatch(t, c);
    return 1;
}

/* T8: called by the thread on itself, before its first epoll_wait. */
static void place(mlpe_rxthread *t) {
    mlpe_rxthread_placement *p = &t->placement;
    const mlpe_rxthread_options *o = &t->options;
    pthread_t self = pthread_self();
    cpu_set_t set;
    p->tid = (int)syscall(SYS_gettid);
    if (o->pin) {
        CPU_ZERO(&set);
        for (int cpu = 0; cpu < MLPE_RXCPU_WORDS * 64 && cpu < CPU_SETSIZE; cpu++)
            if (o->cpus[cpu / 64] >> (cpu % 64) & 1)
                CPU_SET(cpu, &set);
        p->affinity_error = pthread_setaffinity_np(self, sizeof set, &set);
    }
    if (o->fifo_priority > 0) {
        struct sched_param asked = {0};
        asked.sched_priority = o->fifo_priority;
        /* EPERM without the right to it: the thread runs on as it was. */
        p->sched_error = pthread_setschedparam(self, SCHED_FIFO, &asked);
    }
    int policy;
    struct sched_param got = {0};
    if (pthread_getschedparam(self, &policy, &got) == 0) {
        p->policy = policy == SCHED_OTHER ? MLPE_RXPOLICY_NORMAL
                    : policy == SCHED_FIFO ? MLPE_RXPOLICY_FIFO
                    : policy == SCHED_RR   ? MLPE_RXPOLICY_RR
                                           : MLPE_RXPOLICY_OTHER;
        p->priority = got.sched_priority;
    }
    CPU_ZERO(&set);
    if (pthread_getaffinity_np(self, sizeof set, &set) == 0)
        for (int cpu = 0; cpu < MLPE_RXCPU_WORDS * 64 && cpu < CPU_SETSIZE; cpu++)
            if (CPU_ISSET(cpu, &set))
                p->cpus[cpu / 64] |= (uint64_t)1 << (cpu % 64);
}

static void *run(void *arg) {
    mlpe_rxthread *t = arg;
    struct epoll_event events[64];
    place(t);
    pthread_mutex_lock(&t->lock);
    t->placed = 1;
    pthread_cond_signal(&t->placed_cond);
    pthread_mutex_unlock(&t->lock);
    for (;;) {
        int n = epoll_wait(t->epoll_fd, events, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int stop = 0, wake = 0;
        pthread_mutex_lock(&t->lock);
        for (int i = 0; i < n; i++) {
            uint64_t key = events[i].data.u64;
            if (key == STOP_EVENT) {
                stop = 1;
                continue;
            }
            uint32_t slot = (uint32_t)key, generation = (uint32_t)(key >> 32);
            mlpe_rxconn *c = slot < t->n_slots ? t->slots[slot] : NULL;
            if (!c || c->generation != generation || !c->watched || c->paused)
                continue; /* T5: removed (or replaced) since epoll_wait */
            if (read_one(t, c) && !c->queued) {
                c->queued = 1;
                c->next_queued = NULL;
                if (t->ready_tail)
                    t->ready_tail->next_queued = c;
                else
                    t->ready_head = c;
                t->ready_tail = c;
                wake = 1;
            }
        }
        pthread_mutex_unlock(&t->lock);
        if (wake) {
            uint64_t one = 1;
            ssize_t written = write(t->wake_fd, &one, sizeof one);
            (void)written; /* a full counter is still readable: nothing lost */
        }
        if (stop)
            break;
    }
    return NULL;
}

mlpe_rxthread *mlpe_rxthread_start(const mlpe_rxthread_options *options, int *error) {
    mlpe_rxthread *t = calloc(1, sizeof *t);
    if (!t) {
        *error = -ENOMEM;
        return NULL;
    }
    if (options)
        t->options = *options;
    t->scratch = malloc(READ_SPACE);
    t->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    t->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!t->scratch) {
        errno = ENOMEM;
        goto fail;
    }
    if (t->epoll_fd < 0 || t->wake_fd < 0 || t->stop_fd < 0)
        goto fail;
    struct epoll_event stop = {0};
    stop.events = EPOLLIN;
    stop.data.u64 = STOP_EVENT;
    if (epoll_ctl(t->epoll_fd, EPOLL_CTL_ADD, t->stop_fd, &stop) != 0)
        goto fail;
    if (pthread_mutex_init(&t->lock, NULL) != 0)
        goto fail;
    if (pthread_cond_init(&t->placed_cond, NULL) != 0) {
        pthread_mutex_destroy(&t->lock);
        goto fail;
    }
    int err = pthread_create(&t->thread, NULL, run, t);
    if (err) {
        pthread_cond_destroy(&t->placed_cond);
        pthread_mutex_destroy(&t->lock);
        errno = err;
        goto fail;
    }
    pthread_mutex_lock(&t->lock); /* T8: the placement is known on return */
    while (!t->placed)
        pthread_cond_wait(&t->placed_cond, &t->lock);
    pthread_mutex_unlock(&t->lock);
    return t;
fail:
    *error = errno ? -errno : -EIO;
    if (t->epoll_fd >= 0)
        close(t->epoll_fd);
    if (t->wake_fd >= 0)
        close(t->wake_fd);
    if (t->stop_fd >= 0)
        close(t->stop_fd);
    free(t->scratch);
    free(t);
    return NULL;
}

void mlpe_rxthread_stop(mlpe_rxthread *t) {
    uint64_t one = 1;
    ssize_t written = write(t->stop_fd, &one, sizeof one);
    (void)written;
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->placed_cond);
    pthread_mutex_destroy(&t->lock);
    close(t->epoll_fd);
    close(t->wake_fd);
    close(t->stop_fd);
    free(t->slots);
    free(t->scratch);
    free(t);
}

size_t mlpe_rxthread_held(mlpe_rxthread *t, mlpe_rxconn *c) {
    pthread_mutex_lock(&t->lock);
    size_t bytes = mlpe_rxbatch_bytes(&c->pending);
    pthread_mutex_unlock(&t->lock);
    return bytes;
}

int mlpe_rxthread_wake_fd(const mlpe_rxthread *t) {
    return t->wake_fd;
}

const mlpe_rxthread_placement *mlpe_rxthread_placement_of(const mlpe_rxthread *t) {
    return &t->placement;
}

int mlpe_rxthread_add(mlpe_rxthread *t, mlpe_rxconn *c) {
    int result = 0;
    pthread_mutex_lock(&t->lock);
    uint32_t slot = 0;
    while (slot < t->n_slots && t->slots[slot])
        slot++;
    if (slot == t->n_slots) {
        uint32_t n = t->n_slots ? t->n_slots * 2 : 64;
        mlpe_rxconn **slots = realloc(t->slots, n * sizeof *slots);
        if (!slots) {
            result = -ENOMEM;
            goto done;
        }
        memset(slots + t->n_slots, 0, (n - t->n_slots) * sizeof *slots);
        t->slots = slots;
        t->n_slots = n;
    }
    c->slot = slot;
    c->generation = ++t->next_generation;
    if (watch(t, c, EPOLL_CTL_ADD) != 0) {
        result = -errno;
        goto done;
    }
    c->watched = 1;
    t->slots[slot] = c;
done:
    pthread_mutex_unlock(&t->lock);
    return result;
}

void mlpe_rxthread_remove(mlpe_rxthread *t, mlpe_rxconn *c) {
    pthread_mutex_lock(&t->lock);
    if (c->slot < t->n_slots && t->slots[c->slot] == c) {
        unwatch(t, c);
        t->slots[c->slot] = NULL;
        if (c->queued) { /* unlink it from the ready list */
            mlpe_rxconn *prev = NULL, *at = t->ready_head;
            while (at && at != c) {
                prev = at;
                at = at->next_queued;
            }
            if (at) {
                if (prev)
                    prev->next_queued = c->next_queued;
                else
                    t->ready_head = c->next_queued;
                if (t->ready_tail == c)
                    t->ready_tail = prev;
            }
            c->queued = 0;
        }
    }
    pthread_mutex_unlock(&t->lock);
}

mlpe_rxconn *mlpe_rxthread_take_ready(mlpe_rxthread *t) {
    uint64_t count;
    ssize_t got = read(t->wake_fd, &count, sizeof count);
    (void)got; /* EAGAIN: a wake-up already consumed, the list says the rest */
    pthread_mutex_lock(&t->lock);
    mlpe_rxconn *ready = t->ready_head;
    /* The caller's list: next_ready is written here, under the lock, and
     * read by the caller alone; the thread may queue a connection again at
     * once, on next_queued (T1). */
    for (mlpe_rxconn *c = ready; c; c = c->next_queued) {
        c->queued = 0;
        c->next_ready = c->next_queued;
    }
    t->ready_head = t->ready_tail = NULL;
    pthread_mutex_unlock(&t->lock);
    return ready;
}

int mlpe_rxthread_take(mlpe_rxthread *t, mlpe_rxconn *c, mlpe_rxbatch *batch) {
    batch->len = 0;
    batch->n_chunks = 0;
    batch->eof = 0;
    batch->error = 0;
    pthread_mutex_lock(&t->lock);
    mlpe_rxbatch taken = c->pending;
    c->pending = *batch;
    *batch = taken;
    if (c->paused && c->watched) { /* T3: room again */
        if (watch(t, c, EPOLL_CTL_ADD) == 0) {
            c->paused = 0;
        } else { /* cannot watch it again: the loop hears it as a read error */
            if (!batch->eof && !batch->error)
                batch->error = errno ? errno : EIO;
            c->watched = 0;
            c->paused = 0;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return 0;
}

#else /* no epoll: the loop reads (mlpe_rxthread.h) */

#ifndef EOPNOTSUPP
#define EOPNOTSUPP 95
#endif

struct mlpe_rxthread {
    int unused;
};

mlpe_rxthread *mlpe_rxthread_start(const mlpe_rxthread_options *options, int *error) {
    (void)options;
    *error = -EOPNOTSUPP;
    return NULL;
}

const mlpe_rxthread_placement *mlpe_rxthread_placement_of(const mlpe_rxthread *t) {
    (void)t;
    return NULL;
}

void mlpe_rxthread_stop(mlpe_rxthread *t) {
    (void)t;
}

int mlpe_rxthread_wake_fd(const mlpe_rxthread *t) {
    (void)t;
    return -1;
}

int mlpe_rxthread_add(mlpe_rxthread *t, mlpe_rxconn *c) {
    (void)t;
    (void)c;
    return -EOPNOTSUPP;
}

void mlpe_rxthread_remove(mlpe_rxthread *t, mlpe_rxconn *c) {
    (void)t;
    (void)c;
}

mlpe_rxconn *mlpe_rxthread_take_ready(mlpe_rxthread *t) {
    (void)t;
    return NULL;
}

int mlpe_rxthread_take(mlpe_rxthread *t, mlpe_rxconn *c, mlpe_rxbatch *batch) {
    (void)t;
    (void)c;
    (void)batch;
    return -EOPNOTSUPP;
}

size_t mlpe_rxthread_held(mlpe_rxthread *t, mlpe_rxconn *c) {
    (void)t;
    return mlpe_rxbatch_bytes(&c->pending);
}

#endif
