/*
 * bench_roofline.c - the machine's measured limits for `pagedlm bench
 * --roofline`: F32 FMA, BF16 and INT8 dot-product peaks on every thread
 * for the kernel family in effect (AVX-512: zmm FMA, VDPBF16PS, VPDPBUSD;
 * AVX2: ymm FMA and, for INT8, AVX-VNNI's VPDPBUSD where the CPU has it,
 * else VPMADDUBSW + VPADDW, the AVX2 integer panels' step; NEON and SDOT
 * on aarch64),
 * and read bandwidth, so a result can be given as a fraction of what the
 * hardware can do. Small kernels written for the measurement only.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli/bench_roofline.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu_features.h"
#include "kernels/threadpool.h"
#include "util/huge_alloc.h"
#include "util/clock.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#define ITERS 4000000L

typedef struct peak_task {
    int kind;        /* 0: F32 FMA, 1: BF16 dot, 2: INT8 dot */
    pdl_isa isa;     /* the kernel family whose loops run */
    double sink[64];
} peak_task;

#if defined(__x86_64__)
/* 12 independent FMA chains: enough to hide the latency on current cores. */
__attribute__((target("avx512f"))) static double fma_loop_avx512(void) {
    __m512 a[12], m = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < ITERS; n++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16"))) static double bf16_loop_avx512(void) {
    __m512 a[12];
    __m512i x = _mm512_set1_epi16(0x3f80), y = _mm512_set1_epi16(0x3a80);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < ITERS; n++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbf16_ps(a[i], (__m512bh)x, (__m512bh)y);
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512vnni"))) static double int8_loop_avx512(void) {
    __m512i a[12], x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
    for (long n = 0; n < ITERS; n++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
    __m512i s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_epi32(s, a[i]);
    return (double)_mm512_reduce_add_epi32(s);
}

/* VPMADDUBSW + VPADDW, each chain through its own sums (so neither can be
 * hoisted): 32 products and 32 additions per pair of instructions. */
__attribute__((target("avx2"))) static double int8_loop_avx2(void) {
    __m256i a[12], w = _mm256_set1_epi8(3);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_epi16((short)i);
    for (long n = 0; n < ITERS; n++)
        for (int i = 0; i < 12; i++) a[i] = _mm256_add_epi16(a[i], _mm256_maddubs_epi16(w, a[i]));
    __m256i s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi16(s, a[i]);
    return (double)_mm256_extract_epi16(s, 0);
}

#if defined(PDL_HAVE_AVXVNNI)
__attribute__((target("avx2,avxvnni"))) static double int8_loop_avxvnni(void) {
    __m256i a[12], x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_epi32(i);
    for (long n = 0; n < ITERS; n++)
        for (int i = 0; i < 12; i++) a[i] = _mm256_dpbusd_avx_epi32(a[i], x, y);
    __m256i s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, a[i]);
    return (double)_mm256_extract_epi32(s, 0);
}
#endif

__attribute__((target("avx2,fma"))) static double fma_loop_avx2(void) {
    __m256 a[12], m = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-9f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < ITERS; n++)
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0];
}
#endif

#if defined(__aarch64__)
/* NEON: 16 chains (4 lanes; cores with four FMA pipes of latency 4). */
#define NEON_CHAINS 16
static double fma_loop_neon(void) {
    float32x4_t a[NEON_CHAINS], m = vdupq_n_f32(1.0000001f), c = vdupq_n_f32(1e-9f);
    for (int i = 0; i < NEON_CHAINS; i++) a[i] = vdupq_n_f32((float)i);
    for (long n = 0; n < ITERS; n++)
        for (int i = 0; i < NEON_CHAINS; i++) a[i] = vfmaq_f32(c, a[i], m);
    float32x4_t s = a[0];
    for (int i = 1; i < NEON_CHAINS; i++) s = vaddq_f32(s, a[i]);
    return vaddvq_f32(s);
}

__attribute__((target("arch=armv8.2-a+dotprod"))) static double int8_loop_neon(void) {
    int32x4_t a[NEON_CHAINS];
    int8x16_t x = vdupq_n_s8(3), y = vdupq_n_s8(-2);
    for (int i = 0; i < NEON_CHAINS; i++) a[i] = vdupq_n_s32(i);
    for (long n = 0; n < ITERS; n++)
        for (int i = 0; i < NEON_CHAINS; i++) a[i] = vdotq_s32(a[i], x, y);
    int32x4_t s = a[0];
    for (int i = 1; i < NEON_CHAINS; i++) s = vaddq_s32(s, a[i]);
    return (double)vaddvq_s32(s);
}
#endif

static void peak_worker(void *p, int ith, int nth) {
    peak_task *t = p;
    double r = 0;
#if defined(__x86_64__)
    const pdl_cpu_features *f = cpu_features_get();
    pdl_isa isa = t->isa;
    if (isa == PDL_ISA_AVX512) {
        if (t->kind == 1) r = f->avx512bf16 ? bf16_loop_avx512() : 0;
        else if (t->kind == 2) r = f->avx512vnni ? int8_loop_avx512() : 0;
        else r = fma_loop_avx512();
    } else if (isa == PDL_ISA_AVX2) {
        if (t->kind == 2) {
#if defined(PDL_HAVE_AVXVNNI)
            if (f->avxvnni) r = int8_loop_avxvnni();
            else
#endif
                r = int8_loop_avx2();
        } else if (t->kind == 0) {
            r = fma_loop_avx2();
        }
    }
#elif defined(__aarch64__)
    const pdl_cpu_features *f = cpu_features_get();
    if (t->kind == 2) r = f->neon_dotprod ? int8_loop_neon() : 0;
    else if (t->kind == 0) r = fma_loop_neon();
#endif
    t->sink[ith % 64] = r;
    (void)nth;
}

typedef struct bw_task {
    const float *buf;
    size_t n;
    double sink[64];
} bw_task;

static void bw_worker(void *p, int ith, int nth) {
    bw_task *t = p;
    long b, e;
    threadpool_split_range((long)(t->n / 64), ith, nth, &b, &e);
    float acc[16] = {0};
    for (long i = b * 64; i < e * 64; i += 16) {
        __builtin_prefetch(t->buf + i + 1024); /* 4 KiB ahead, as the decode kernels read */
        for (int j = 0; j < 16; j++) acc[j] += t->buf[i + j];
    }
    double s = 0;
    for (int j = 0; j < 16; j++) s += acc[j];
    t->sink[ith % 64] = s;
}

/* Seconds for every thread of pool to run peak loop `kind` once. */
static double time_peak(pdl_threadpool *pool, pdl_isa isa, int kind) {
    peak_task pt = {.kind = kind, .isa = isa};
    double t0 = clock_now_s();
    threadpool_run(pool, peak_worker, &pt);
    return clock_now_s() - t0;
}

int bench_roofline_measure(pdl_isa isa, int n_threads, bench_roofline *out) {
    memset(out, 0, sizeof *out);
    pdl_threadpool *pool = threadpool_new(n_threads);
    if (!pool) return -1;
    int nth = threadpool_size(pool);
    const pdl_cpu_features *f = cpu_features_get();
    /* vector lanes (32-bit) and independent chains of the family's peak loops above */
    int lanes = isa == PDL_ISA_AVX512 ? 16 : isa == PDL_ISA_AVX2 ? 8 : isa == PDL_ISA_NEON ? 4 : 0;
    int chains = isa == PDL_ISA_NEON ? 16 : 12;
    if (lanes) out->f32_gflops = 2.0 * lanes * chains * ITERS * nth / time_peak(pool, isa, 0) / 1e9;
    if (isa == PDL_ISA_AVX512 && f->avx512bf16) /* 2 products + 2 adds per lane */
        out->bf16_gflops = 4.0 * 16 * 12.0 * ITERS * nth / time_peak(pool, isa, 1) / 1e9;
    /* 4 products + 4 adds per 32-bit lane: VPDPBUSD, SDOT, and the AVX2
     * pair VPMADDUBSW + VPADDW (two instructions, counted as one step) */
    if ((isa == PDL_ISA_AVX512 && f->avx512vnni) || (isa == PDL_ISA_NEON && f->neon_dotprod) || isa == PDL_ISA_AVX2)
        out->int8_gops = 8.0 * lanes * chains * ITERS * nth / time_peak(pool, isa, 2) / 1e9;
    /* read bandwidth: 1 GiB, well past the caches; best of 3 passes */
    size_t n = (size_t)1 << 28;
    float *buf = huge_alloc(n * sizeof *buf); /* as the weights are (util/huge_alloc.h) */
    if (buf) {
        for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
        bw_task bt = {.buf = buf, .n = n};
        for (int rep = 0; rep < 3; rep++) {
            double t0 = clock_now_s();
            threadpool_run(pool, bw_worker, &bt);
            double dt = clock_now_s() - t0;
            double gbs = (double)n * sizeof(float) / dt / 1e9;
            if (gbs > out->read_gbs) out->read_gbs = gbs;
        }
        huge_free(buf);
    }
    threadpool_free(pool);
    return 0;
}
