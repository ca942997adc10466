/*
 * bench_roofline.h - measured machine limits for `pagedlm bench --roofline`.
 */
#ifndef PDL_CLI_BENCH_ROOFLINE_H
#define PDL_CLI_BENCH_ROOFLINE_H

typedef struct bench_roofline {
    double f32_gflops;   /* FMA peak, all threads */
    double bf16_gflops;  /* VDPBF16PS peak, all threads (0 without AVX512_BF16) */
    double int8_gops;    /* VPDPBUSD peak (a multiply-add = 2 ops), all threads (0 without AVX512_VNNI) */
    double read_gbs;     /* streaming read bandwidth, all threads */
} bench_roofline;

int bench_roofline_measure(int n_threads, bench_roofline *out);

#endif
