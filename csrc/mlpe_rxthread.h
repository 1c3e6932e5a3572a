/*
 * mlpe_rxthread.h -- a receive thread: sockets read as data arrives, without
 * waiting for the interpreter.
 *
 * A kernel receive stamp belongs to the newest data of a read, and TCP merges
 * segments that wait in a socket (mlpe_rxstamp.h K2).  When the event loop
 * is late -- another Python thread holds the interpreter, the loop is busy
 * with thousands of streams -- the first token waits behind the second and
 * takes its stamp.  This thread reads every registered socket as soon as
 * data arrives, with the interpreter's lock never taken, so each token is
 * read (and stamped) on its own; the loop later takes what was read, read
 * by read, each with its kernel stamp and its read stamp.
 *
 * Rules:
 *  T1. One thread per mlpe_rxthread, started by mlpe_rxthread_start and
 *      ended by mlpe_rxthread_stop (which joins it).  wake_fd becomes
 *      readable when some connection has something to take: the loop
 *      watches it and calls mlpe_rxthread_take_ready.
 *  T2. mlpe_rxthread_add registers a connection (its socket non-blocking,
 *      receive stamps already asked for).  The thread reads it until EAGAIN
 *      on every readiness and appends one chunk per read: its bytes, its
 *      kernel stamp (CLOCK_REALTIME, 0 if none) and its read stamp
 *      (CLOCK_MONOTONIC).  The end of the stream and a read error are kept
 *      after the chunks (eof, error) and the socket is no longer watched.
 *  T3. At most MLPE_RXCONN_MAX_PENDING bytes (plus one read) wait per
 *      connection; past that the socket leaves the epoll set until the loop
 *      takes them (back-pressure goes back to TCP's window, as with a loop
 *      that reads late).  Leaving the set, not an empty event mask: epoll
 *      reports a reset socket's EPOLLERR and EPOLLHUP whatever the mask.
 *  T4. mlpe_rxthread_take swaps a connection's chunks into the caller's
 *      mlpe_rxbatch (the loop's own copy, read without the lock).
 *  T7. Storage follows what waits, not what a read could hold: a read lands
 *      in the thread's scratch space (one per thread) and its bytes are
 *      appended to the connection's batch, whose storage grows by doubling
 *      from 1 KiB.  Once the loop has fed a batch, mlpe_rxbatch_shrink
 *      frees storage above MLPE_RXBATCH_KEEP_BYTES (and chunk tables above
 *      MLPE_RXBATCH_KEEP_CHUNKS), so an idle connection holds at most that
 *      much twice (its pending batch and the loop's), whatever burst it
 *      once received.
 *  T5. mlpe_rxthread_remove unregisters a connection; once it returns the
 *      thread never touches the connection again and the caller may free
 *      it (connections are found through a slot table and a generation
 *      under the lock, never through a pointer an epoll event carried).
 *  T6. Every function but the thread's own body is called from one thread
 *      (the loop's); the lock orders it with the receive thread.
 *  T8. Placement: the thread, first thing, pins itself to the options' CPUs
 *      and asks for SCHED_FIFO at the options' priority, for itself only
 *      (pthread_setaffinity_np, pthread_setschedparam on pthread_self).  It
 *      may: it sleeps in epoll_wait and reads in bounded bursts, so it
 *      cannot starve the loop, and a first token read at once keeps its own
 *      kernel stamp (K2) when the cores are busy.  A refusal (EPERM without
 *      root, CAP_SYS_NICE or RLIMIT_RTPRIO; EINVAL) is not an error: the
 *      thread runs on under the policy it had and the errno is kept.
 *      mlpe_rxthread_start returns once the thread has placed itself, and
 *      mlpe_rxthread_placement_of says what it got (never written again).
 *
 * Linux only (epoll, eventfd); mlpe_rxthread_start fails elsewhere with
 * -EOPNOTSUPP and the engine reads on the loop as before.
 */
#ifndef MLPE_RXTHREAD_H
#define MLPE_RXTHREAD_H

#include <stddef.h>
#include <stdint.h>

#define MLPE_RXCONN_MAX_PENDING (4u << 20)
/* T7: what a fed batch keeps for the next one (a few reads of a stream). */
#define MLPE_RXBATCH_KEEP_BYTES (8u << 10)
#define MLPE_RXBATCH_KEEP_CHUNKS 64u

typedef struct {
    uint32_t len;
    int64_t t_realtime; /* the kernel's stamp, 0 if none */
    int64_t t_read;
} mlpe_rxchunk;

/* What the loop takes: bytes and the chunks that split them. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
    mlpe_rxchunk *chunks;
    size_t n_chunks, cap_chunks;
    int eof;   /* the stream ended after the chunks */
    int error; /* errno of a failed read after the chunks, else 0 */
} mlpe_rxbatch;

typedef struct mlpe_rxconn mlpe_rxconn;
struct mlpe_rxconn {
    int fd;
    uint32_t slot, generation;
    void *owner; /* the loop's object for this connection */
    mlpe_rxbatch pending;
    int watched, paused, queued;
    mlpe_rxconn *next_queued; /* the thread's list, under the lock */
    mlpe_rxconn *next_ready;  /* the list take_ready returned, the loop's own */
};

typedef struct mlpe_rxthread mlpe_rxthread;

/* CPU sets as bit masks, bit i of word i / 64 for CPU i: glibc's fixed
 * cpu_set_t size (CPU_SETSIZE, 1,024 CPUs). */
#define MLPE_RXCPU_WORDS 16

/* T8: what the thread asks for. */
typedef struct {
    int fifo_priority; /* 0: keep the inherited policy; 1-99: ask SCHED_FIFO at it */
    int pin;           /* nonzero: run only on the CPUs of cpus */
    uint64_t cpus[MLPE_RXCPU_WORDS];
} mlpe_rxthread_options;

#define MLPE_RXPOLICY_NORMAL 0 /* SCHED_OTHER */
#define MLPE_RXPOLICY_FIFO 1
#define MLPE_RXPOLICY_RR 2
#define MLPE_RXPOLICY_OTHER 3 /* SCHED_BATCH, SCHED_IDLE, ... inherited */

/* T8: what the thread got. */
typedef struct {
    int tid;            /* its kernel thread id (/proc/self/task/TID) */
    int policy;         /* MLPE_RXPOLICY_* */
    int priority;       /* its real-time priority (0 under the normal policy) */
    int sched_error;    /* errno of a refused SCHED_FIFO, else 0 */
    int affinity_error; /* errno of a refused pin, else 0 */
    uint64_t cpus[MLPE_RXCPU_WORDS]; /* the CPUs it may run on */
} mlpe_rxthread_placement;

/* NULL with *error set to a negative errno when the thread cannot start;
 * options NULL: no pin, the inherited policy (T8). */
mlpe_rxthread *mlpe_rxthread_start(const mlpe_rxthread_options *options, int *error);
const mlpe_rxthread_placement *mlpe_rxthread_placement_of(const mlpe_rxthread *t);
void mlpe_rxthread_stop(mlpe_rxthread *t); /* also frees t */
int mlpe_rxthread_wake_fd(const mlpe_rxthread *t);

void mlpe_rxconn_init(mlpe_rxconn *c, int fd, void *owner);
int mlpe_rxthread_add(mlpe_rxthread *t, mlpe_rxconn *c);      /* 0 or -errno */
void mlpe_rxthread_remove(mlpe_rxthread *t, mlpe_rxconn *c);  /* T5 */
void mlpe_rxconn_free(mlpe_rxconn *c);                        /* after remove */

/* T1: the connections with something to take, linked by next_ready; the
 * list is the caller's (the thread links its own list by next_queued). */
mlpe_rxconn *mlpe_rxthread_take_ready(mlpe_rxthread *t);
/* T4: batch's storage is reused; returns 0 or -ENOMEM. */
int mlpe_rxthread_take(mlpe_rxthread *t, mlpe_rxconn *c, mlpe_rxbatch *batch);
void mlpe_rxbatch_free(mlpe_rxbatch *b);
/* T7: frees storage above the keep limits (the batch must be fed). */
void mlpe_rxbatch_shrink(mlpe_rxbatch *b);
/* Bytes of storage a batch holds (data and chunk table). */
size_t mlpe_rxbatch_bytes(const mlpe_rxbatch *b);
/* Bytes of storage c's pending batch holds, read under the lock. */
size_t mlpe_rxthread_held(mlpe_rxthread *t, mlpe_rxconn *c);

#endif /* MLPE_RXTHREAD_H */
