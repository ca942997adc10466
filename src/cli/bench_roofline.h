/*
 * bench_roofline.h - measured machine limits for `pagedlm bench --roofline`.
 */
#ifndef PDL_CLI_BENCH_ROOFLINE_H
#define PDL_CLI_BENCH_ROOFLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu_features.h"

typedef struct bench_roofline {
    double f32_gflops;   /* FMA peak, all threads */
    double bf16_gflops;  /* VDPBF16PS peak, all threads (0 without AVX512_BF16) */
    double int8_gops;    /* VPDPBUSD peak (a multiply-add = 2 ops), all threads (0 without AVX512_VNNI) */
    double read_gbs;     /* streaming read bandwidth, all threads (the best method's best pass) */
    const char *read_method; /* which loop reached it (bench_read_method_name) */
    size_t read_bytes;   /* the buffer it read */
} bench_roofline;

/* The bandwidth probe's loops: sums of the 32-bit words of a buffer. */
enum {
    BENCH_READ_PORTABLE,
    BENCH_READ_ZMM,
    BENCH_READ_ZMM_PREFETCH,
    BENCH_READ_ZMM_NT,
    BENCH_READ_YMM,
    BENCH_READ_YMM_PREFETCH,
    BENCH_READ_YMM_NT,
    BENCH_READ_NEON,
    BENCH_READ_NEON_PREFETCH,
    BENCH_READ_METHODS
};
#define BENCH_READ_ALIGN 512 /* bytes: buffers 64-byte aligned, lengths a multiple of this */

/* Whether the loop runs here for kernel family isa (the portable one always). */
bool bench_read_method_available(int method, pdl_isa isa);
const char *bench_read_method_name(int method);
/* The sum mod 2^32 of the 32-bit words of buf (bytes a multiple of
 * BENCH_READ_ALIGN): the same for every method. */
uint32_t bench_read_sum(int method, const void *buf, size_t bytes);

/* Peaks of family isa's loops (the model's: cpu_features.h) on n_threads. */
int bench_roofline_measure(pdl_isa isa, int n_threads, bench_roofline *out);

#endif
