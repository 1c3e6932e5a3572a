/*
 * mlpe_clock.h -- the monotonic clock the engine stamps reads with.
 *
 * It must be the clock of Python's time.monotonic_ns() on every platform,
 * so that stamps taken here compare with stamps taken in Python (the
 * scheduler's, the simulated endpoint's) and, on Linux, across processes:
 *   - Linux and other POSIX systems: clock_gettime(CLOCK_MONOTONIC), as
 *     CPython uses (system-wide, so two processes share it);
 *   - macOS: mach_absolute_time() scaled by the timebase, as CPython uses;
 *   - Windows: QueryPerformanceCounter() scaled by its frequency, as CPython
 *     uses.
 * Reading it is the only I/O-side effect in csrc/; the decoders never call
 * it (they take stamps as arguments).
 */
#ifndef MLPE_CLOCK_H
#define MLPE_CLOCK_H

#include <stdint.h>

#if defined(_WIN32)
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

static inline int64_t mlpe_monotonic_ns(void) {
    static LARGE_INTEGER frequency; /* constant after boot: a benign race */
    LARGE_INTEGER now;
    if (frequency.QuadPart == 0)
        QueryPerformanceFrequency(&frequency);
    QueryPerformanceCounter(&now);
    /* split to avoid overflow of now * 1e9 */
    return (int64_t)(now.QuadPart / frequency.QuadPart) * 1000000000 +
           (int64_t)(now.QuadPart % frequency.QuadPart) * 1000000000 / frequency.QuadPart;
}

#elif defined(__APPLE__)
#include <mach/mach_time.h>

static inline int64_t mlpe_monotonic_ns(void) {
    static mach_timebase_info_data_t timebase; /* constant: a benign race */
    if (timebase.denom == 0)
        mach_timebase_info(&timebase);
    return (int64_t)(mach_absolute_time() * timebase.numer / timebase.denom);
}

#else
#include <time.h>

static inline int64_t mlpe_monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
#endif

#endif /* MLPE_CLOCK_H */
