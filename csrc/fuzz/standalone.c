/*
 * standalone.c -- a small fuzzing loop for LLVMFuzzerTestOneInput without
 * libFuzzer, so that any C compiler with sanitizers (gcc in CI) can fuzz the
 * core.
 *
 *     standalone [-max_total_time=S] [-runs=N] [-seed=N] [-max_len=N]
 *                [-dict=FILE] [-artifact_prefix=P] [-timeout=S] PATH...
 *
 * Each PATH is a corpus directory (every regular file in it is an input) or
 * a single input file.  Every input is run once, as libFuzzer does when it
 * reproduces a crash.  Then, when -max_total_time or -runs is given, the loop
 * mutates the inputs (bit flips, byte edits, inserts, deletions, copies of
 * ranges, splices of two inputs, dictionary tokens, rewritten numbers) until
 * either budget is used up.  The options mean what they mean to libFuzzer,
 * and -dict reads the same file format, so the two share dictionaries.
 *
 * Coverage guidance: when the code under test is compiled with gcc's or
 * clang's -fsanitize-coverage=trace-pc, every basic block calls
 * __sanitizer_cov_trace_pc (defined below) and a mutant that reaches a new
 * (block pair, hit-count bucket) joins the in-memory corpus, as in AFL.
 * Without that flag the loop still runs, as blind mutation of the seeds.
 *
 * A crash -- an abort() from a driver's invariant check, a signal, or a
 * sanitizer report -- writes the input to <artifact_prefix>crash-<hash>, prints
 * it (hex, when short), and ends the process abnormally.  Exit status 0 means
 * every input ran clean.  Neither the corpus nor the source tree is written.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- coverage (AFL-style edge hashing over trace-pc callbacks) ---------- */

#define COV_BITS 16
#define COV_SIZE ((size_t)1 << COV_BITS)

/* Hit counts of the current run, scanned a word at a time. */
static union {
    uint64_t words[COV_SIZE / 8];
    uint8_t bytes[COV_SIZE];
} cov_hits;
static uint8_t cov_known[COV_SIZE]; /* buckets seen so far, one bit each */
static uintptr_t cov_prev;
static size_t cov_features;         /* (edge, bucket) pairs seen */

#if defined(__GNUC__) || defined(__clang__)
#define NO_INSTRUMENT __attribute__((no_sanitize("address", "undefined")))
#else
#define NO_INSTRUMENT
#endif

void __sanitizer_cov_trace_pc(void);

NO_INSTRUMENT void __sanitizer_cov_trace_pc(void) {
    /* Relative to a function of this executable, so that edge ids do not
     * change with address-space randomisation. */
    uintptr_t pc = (uintptr_t)__builtin_return_address(0) - (uintptr_t)&__sanitizer_cov_trace_pc;
    uintptr_t cur = (pc ^ (pc >> COV_BITS)) * 0x9E3779B1u;
    cur = (cur >> 8) & (COV_SIZE - 1);
    cov_hits.bytes[(cur ^ cov_prev) & (COV_SIZE - 1)]++;
    cov_prev = cur >> 1;
}

static uint8_t cov_bucket(uint8_t hits) {
    if (hits <= 3)
        return (uint8_t)(1u << (hits - 1)); /* 1, 2, 3 hits */
    if (hits <= 7)
        return 8;
    if (hits <= 15)
        return 16;
    if (hits <= 31)
        return 32;
    if (hits <= 127)
        return 64;
    return 128;
}

/* Folds the current run into the known set; returns the new features. */
static size_t cov_collect(void) {
    size_t i, fresh = 0;
    for (i = 0; i < COV_SIZE / 8; i++) {
        size_t k;
        if (cov_hits.words[i] == 0)
            continue;
        for (k = i * 8; k < i * 8 + 8; k++) {
            uint8_t b;
            if (cov_hits.bytes[k] == 0)
                continue;
            b = cov_bucket(cov_hits.bytes[k]);
            if (!(cov_known[k] & b)) {
                cov_known[k] |= b;
                fresh++;
            }
        }
    }
    memset(&cov_hits, 0, sizeof cov_hits);
    cov_prev = 0;
    cov_features += fresh;
    return fresh;
}

/* ---- inputs ------------------------------------------------------------- */

typedef struct unit {
    uint8_t *data;
    size_t size;
} unit;

typedef struct units {
    unit *items;
    size_t n, cap;
} units;

static void die(const char *what) {
    fprintf(stderr, "standalone: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void units_add(units *u, const uint8_t *data, size_t size) {
    unit *it;
    if (u->n == u->cap) {
        size_t cap = u->cap ? u->cap * 2 : 64;
        unit *items = (unit *)realloc(u->items, cap * sizeof *items);
        if (items == NULL)
            die("realloc");
        u->items = items;
        u->cap = cap;
    }
    it = &u->items[u->n++];
    it->size = size;
    it->data = (uint8_t *)malloc(size ? size : 1);
    if (it->data == NULL)
        die("malloc");
    if (size)
        memcpy(it->data, data, size);
}

static void units_free(units *u) {
    size_t i;
    for (i = 0; i < u->n; i++)
        free(u->items[i].data);
    free(u->items);
    memset(u, 0, sizeof *u);
}

static int read_file(const char *path, uint8_t **out, size_t *size) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, got;
    if (f == NULL)
        return -1;
    for (;;) {
        if (cap - len < 4096) {
            uint8_t *p;
            cap = cap ? cap * 2 : 8192;
            p = (uint8_t *)realloc(buf, cap);
            if (p == NULL)
                die("realloc");
            buf = p;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    *out = buf;
    *size = len;
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds a file, or every regular file of a directory (in name order, so that
 * runs are reproducible). */
static void load_path(units *u, const char *path, size_t max_len) {
    struct stat st;
    if (stat(path, &st) != 0)
        die(path);
    if (S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(path);
        struct dirent *e;
        char **names = NULL;
        size_t n = 0, cap = 0, i;
        if (dir == NULL)
            die(path);
        while ((e = readdir(dir)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                names = (char **)realloc(names, cap * sizeof *names);
                if (names == NULL)
                    die("realloc");
            }
            names[n] = (char *)malloc(strlen(path) + strlen(e->d_name) + 2);
            if (names[n] == NULL)
                die("malloc");
            sprintf(names[n], "%s/%s", path, e->d_name);
            n++;
        }
        closedir(dir);
        if (n)
            qsort(names, n, sizeof *names, cmp_names);
        for (i = 0; i < n; i++) {
            if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
                load_path(u, names[i], max_len);
            free(names[i]);
        }
        free(names);
        return;
    }
    {
        uint8_t *buf;
        size_t size;
        if (read_file(path, &buf, &size) != 0)
            die(path);
        units_add(u, buf, size > max_len ? max_len : size);
        free(buf);
    }
}

/* Reads a libFuzzer dictionary: lines of `"token"` or `name="token"`, with
 * \\, \" and \xHH escapes; '#' starts a comment line. */
static void load_dict(units *dict, const char *path) {
    FILE *f = fopen(path, "r");
    char line[4096];
    size_t lineno = 0;
    if (f == NULL)
        die(path);
    while (fgets(line, sizeof line, f) != NULL) {
        char *q = strchr(line, '"');
        uint8_t tok[4096];
        size_t n = 0;
        lineno++;
        if (line[strspn(line, " \t")] == '#' || q == NULL)
            continue;
        for (q++; *q && *q != '"'; q++) {
            if (*q == '\\' && q[1] == 'x' && q[2] && q[3]) {
                char hex[3] = {q[2], q[3], 0};
                tok[n++] = (uint8_t)strtoul(hex, NULL, 16);
                q += 3;
            } else if (*q == '\\' && q[1]) {
                tok[n++] = (uint8_t)*++q;
            } else {
                tok[n++] = (uint8_t)*q;
            }
        }
        if (*q != '"') {
            fprintf(stderr, "standalone: %s:%zu: unterminated token\n", path, lineno);
            exit(2);
        }
        if (n)
            units_add(dict, tok, n);
    }
    fclose(f);
}

/* ---- crash reporting ------------------------------------------------------ */

static const uint8_t *volatile current_data;
static volatile size_t current_size;
static const char *artifact_prefix = "";

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    size_t i;
    for (i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

static void put(const char *s) {
    ssize_t ignored = write(2, s, strlen(s));
    (void)ignored;
}

/* Async-signal-safe: only write(2), open(2) and local formatting. */
static void dump_current(void) {
    static volatile sig_atomic_t dumped = 0;
    static const char hexdig[] = "0123456789abcdef";
    char path[4096], name[32];
    const uint8_t *data = current_data;
    size_t size = current_size, i, plen = strlen(artifact_prefix);
    uint64_t h;
    int fd;
    if (dumped || data == NULL)
        return;
    dumped = 1;
    h = fnv1a(data, size);
    memcpy(name, "crash-", 6);
    for (i = 0; i < 16; i++)
        name[6 + i] = hexdig[(h >> (60 - 4 * i)) & 15];
    name[22] = 0;
    if (plen + 23 > sizeof path)
        plen = 0;
    memcpy(path, artifact_prefix, plen);
    memcpy(path + plen, name, 23);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t ignored = write(fd, data, size);
        (void)ignored;
        close(fd);
        put("\n==standalone== crashing input written to ");
        put(path);
        put("\n");
    }
    if (size <= 512) {
        char hex[3];
        put("==standalone== input (hex): ");
        for (i = 0; i < size; i++) {
            hex[0] = hexdig[data[i] >> 4];
            hex[1] = hexdig[data[i] & 15];
            hex[2] = 0;
            put(hex);
        }
        put("\n");
    }
}

static void on_signal(int sig) {
    if (sig == SIGALRM)
        put("\n==standalone== timeout: one input ran longer than -timeout\n");
    dump_current();
    signal(sig == SIGALRM ? SIGABRT : sig, SIG_DFL);
    raise(sig == SIGALRM ? SIGABRT : sig);
}

/* Defaults for the sanitizers, so that the binary behaves the same however
 * it is started; ASAN_OPTIONS / UBSAN_OPTIONS still override them.  Aborting
 * (instead of exiting) sends every report through on_signal. */
const char *__asan_default_options(void);
const char *__ubsan_default_options(void);

const char *__asan_default_options(void) {
    return "abort_on_error=1:detect_leaks=1";
}

const char *__ubsan_default_options(void) {
    return "abort_on_error=1:halt_on_error=1:print_stacktrace=1";
}

/* Sanitizers print their report and call this before exiting. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void install_crash_handlers(void) {
    static const int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGALRM};
    size_t i;
    for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], on_signal);
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(dump_current);
}

/* ---- running ---------------------------------------------------------------- */

static unsigned timeout_s = 20;

/* Runs one input from an exact-size heap copy (so ASan catches over-reads);
 * returns the number of new coverage features. */
static size_t execute(const uint8_t *data, size_t size) {
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    if (copy == NULL)
        die("malloc");
    if (size)
        memcpy(copy, data, size);
    current_data = copy;
    current_size = size;
    if (timeout_s)
        alarm(timeout_s);
    LLVMFuzzerTestOneInput(copy, size);
    if (timeout_s)
        alarm(0);
    current_data = NULL;
    free(copy);
    return cov_collect();
}

/* ---- mutations -------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static size_t below(size_t n) {
    return n ? (size_t)(rnd() % n) : 0;
}

/* Replaces buf[at .. at+del) by ins[0..n); returns the new size (<= max). */
static size_t splice_in(uint8_t *buf, size_t size, size_t max, size_t at, size_t del,
                        const uint8_t *ins, size_t n) {
    if (at > size)
        at = size;
    if (del > size - at)
        del = size - at;
    if (size - del + n > max)
        n = max - (size - del);
    memmove(buf + at + n, buf + at + del, size - at - del);
    if (n)
        memmove(buf + at, ins, n);
    return size - del + n;
}

static size_t mutate_once(uint8_t *buf, size_t size, size_t max, const units *corpus,
                          const units *dict) {
    static const uint8_t interesting[] = {0,    1,   0x7F, 0x80, 0xFF, '\r', '\n', ' ',  '\t', ':',
                                          ';',  ',', '"',  '\\', '{',  '}',  '[',  ']',  '0',  '9',
                                          'a',  'f', 'F',  'x',  0xC3, 0xED, 0xEF, 0xF4, 0xBB, 0xBF};
    uint8_t tmp[64];
    size_t at = below(size + 1), n, i;
    unsigned op = (unsigned)(rnd() % 11);
    switch (op) {
    case 0: /* flip a bit */
        if (size)
            buf[below(size)] ^= (uint8_t)(1u << below(8));
        return size;
    case 1: /* set a byte to a random or an interesting value */
        if (size)
            buf[below(size)] =
                (rnd() & 1) ? (uint8_t)rnd() : interesting[below(sizeof interesting)];
        return size;
    case 2: /* insert a few bytes */
        n = 1 + below(4);
        for (i = 0; i < n; i++)
            tmp[i] = (rnd() & 1) ? (uint8_t)rnd() : interesting[below(sizeof interesting)];
        return splice_in(buf, size, max, at, 0, tmp, n);
    case 3: /* delete a range */
        return splice_in(buf, size, max, at, 1 + below(16), NULL, 0);
    case 4: /* repeat a range of the input somewhere else */
        if (size) {
            size_t from = below(size);
            n = 1 + below(size - from < 64 ? size - from : 64);
            memcpy(tmp, buf + from, n);
            return splice_in(buf, size, max, at, 0, tmp, n);
        }
        return size;
    case 5:   /* splice: a piece of another input inserted here */
    case 6: { /* splice: this input's head, another input's tail */
        const unit *o = &corpus->items[below(corpus->n)];
        size_t from = below(o->size + 1);
        if (op == 5) {
            n = below(o->size - from + 1);
            if (n > sizeof tmp)
                n = sizeof tmp;
            memcpy(tmp, o->data + from, n);
            return splice_in(buf, size, max, at, 0, tmp, n);
        }
        n = o->size - from;
        if (at + n > max)
            n = max - at;
        memcpy(buf + at, o->data + from, n);
        return at + n;
    }
    case 7: /* insert a dictionary token */
    case 8: /* overwrite with a dictionary token */
        if (dict->n) {
            const unit *t = &dict->items[below(dict->n)];
            return splice_in(buf, size, max, at, (rnd() & 1) ? 0 : t->size, t->data, t->size);
        }
        return size;
    case 9: { /* rewrite a number (a Content-Length, a chunk size, an index) */
        size_t start, end;
        int len;
        if (!size)
            return size;
        start = below(size);
        while (start < size && !(buf[start] >= '0' && buf[start] <= '9'))
            start++;
        if (start == size)
            return size;
        end = start;
        while (end < size && buf[end] >= '0' && buf[end] <= '9')
            end++;
        switch (rnd() % 4) {
        case 0:
            len = snprintf((char *)tmp, sizeof tmp, "%llu", (unsigned long long)below(20));
            break;
        case 1:
            len = snprintf((char *)tmp, sizeof tmp, "%llu", (unsigned long long)rnd());
            break;
        case 2:
            len = snprintf((char *)tmp, sizeof tmp, "%llx", (unsigned long long)(rnd() >> below(64)));
            break;
        default:
            len = snprintf((char *)tmp, sizeof tmp, "%llu",
                           (unsigned long long)((1ull << below(64)) + below(3) - 1));
            break;
        }
        return splice_in(buf, size, max, start, end - start, tmp, (size_t)len);
    }
    default: /* swap two bytes */
        if (size > 1) {
            size_t a = below(size), b = below(size);
            uint8_t t = buf[a];
            buf[a] = buf[b];
            buf[b] = t;
        }
        return size;
    }
}

/* ---- main ------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int flag(const char *arg, const char *name, const char **value) {
    size_t n = strlen(name);
    if (strncmp(arg, name, n) == 0 && arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: standalone [-max_total_time=S] [-runs=N] [-seed=N] [-max_len=N]\n"
            "                  [-dict=FILE] [-artifact_prefix=P] [-timeout=S] PATH...\n");
    exit(2);
}

int main(int argc, char **argv) {
    double budget = 0, start, last_report;
    unsigned long long runs = 0, seed = 0, execs = 0, seed_execs;
    size_t max_len = 4096, i, fresh;
    units corpus = {0}, dict = {0};
    const char *v;
    uint8_t *buf;
    int n_paths = 0;

    for (i = 1; i < (size_t)argc; i++) {
        const char *a = argv[i];
        if (flag(a, "-max_total_time", &v))
            budget = atof(v);
        else if (flag(a, "-runs", &v))
            runs = strtoull(v, NULL, 10);
        else if (flag(a, "-seed", &v))
            seed = strtoull(v, NULL, 10);
        else if (flag(a, "-max_len", &v))
            max_len = (size_t)strtoull(v, NULL, 10);
        else if (flag(a, "-dict", &v))
            load_dict(&dict, v);
        else if (flag(a, "-artifact_prefix", &v))
            artifact_prefix = v;
        else if (flag(a, "-timeout", &v))
            timeout_s = (unsigned)strtoul(v, NULL, 10);
        else if (a[0] == '-')
            usage();
        else
            n_paths++;
    }
    if (max_len == 0)
        usage();
    for (i = 1; i < (size_t)argc; i++)
        if (argv[i][0] != '-')
            load_path(&corpus, argv[i], max_len);
    if (seed == 0)
        seed = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 16);
    rng_state = seed | 1;
    install_crash_handlers();

    start = now_s();
    fprintf(stderr, "standalone: seed %llu, %zu inputs from %d paths, %zu dictionary tokens\n",
            seed, corpus.n, n_paths, dict.n);
    for (i = 0; i < corpus.n; i++, execs++)
        execute(corpus.items[i].data, corpus.items[i].size);
    seed_execs = execs;
    if (corpus.n == 0)
        units_add(&corpus, (const uint8_t *)"", 0);
    fprintf(stderr, "standalone: %llu inputs ran clean, coverage %zu%s\n", seed_execs,
            cov_features,
            cov_features ? "" : " (no -fsanitize-coverage=trace-pc: blind mutation)");

    buf = (uint8_t *)malloc(max_len);
    if (buf == NULL)
        die("malloc");
    last_report = start;
    while ((budget > 0 || runs > 0) && (runs == 0 || execs - seed_execs < runs)) {
        const unit *base = &corpus.items[below(corpus.n)];
        size_t size = base->size, k, stack = 1 + below(6);
        double t;
        memcpy(buf, base->data, size);
        for (k = 0; k < stack; k++)
            size = mutate_once(buf, size, max_len, &corpus, &dict);
        fresh = execute(buf, size);
        execs++;
        if (fresh)
            units_add(&corpus, buf, size);
        if ((execs & 255) == 0 || fresh) {
            t = now_s();
            if (budget > 0 && t - start >= budget)
                break;
            if (t - last_report >= 10) {
                fprintf(stderr, "#%llu\tcov: %zu corp: %zu exec/s: %.0f\n", execs, cov_features,
                        corpus.n, (double)execs / (t - start));
                last_report = t;
            }
        }
    }
    {
        double t = now_s() - start;
        fprintf(stderr,
                "standalone: done: %llu execs (%llu mutants) in %.1f s, %.0f exec/s, "
                "coverage %zu, corpus %zu\n",
                execs, execs - seed_execs, t, t > 0 ? (double)execs / t : 0.0, cov_features,
                corpus.n);
    }
    free(buf);
    units_free(&corpus);
    units_free(&dict);
    return 0;
}
