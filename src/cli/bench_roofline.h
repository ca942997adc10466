/*
 * bench_roofline.h - measured machine limits for `pagedlm bench --roofline`.
 */
#ifndef PDL_CLI_BENCH_ROOFLINE_H
#define PDL_CLI_BENCH_ROOFLINE_H

#include "kernels/cpu_features.h"

typedef struct bench_roofline {
    double f32_gflops;   /* FMA peak, all threads */
    double bf16_gflops;  /* VDPBF16PS peak, all threads (0 without AVX512_BF16) */
    double int8_gops;    /* VPDPBUSD peak (a multiply-add = 2 ops), all threads (0 without AVX512_VNNI) */
    double read_gbs;     /* streaming read bandwidth, all threads */
} bench_roofline;

/* Peaks of family isa's loops (the model's: cpu_features.h) on n_threads. */
int bench_roofline_measure(pdl_isa isa, int n_threads, bench_roofline *out);

#endif
