/*
 * clock.h - seconds on the monotonic clock, for the timings the programs
 * print (bench, bench-grammar, bench-tokenizer, run's speed line, the
 * server's request times).
 */
#ifndef PDL_UTIL_CLOCK_H
#define PDL_UTIL_CLOCK_H

#include <time.h>

static inline double clock_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
