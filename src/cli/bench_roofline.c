/*
 * bench_roofline.c - the machine's measured limits for `pagedlm bench
 * --roofline`: F32 FMA, BF16 and INT8 dot-product peaks on every thread
 * for the kernel family in effect (AVX-512: zmm FMA, VDPBF16PS, VPDPBUSD;
 * AVX2: ymm FMA and, for INT8, AVX-VNNI's VPDPBUSD where the CPU has it,
 * else VPMADDUBSW + VPADDW, the AVX2 integer panels' step; NEON and SDOT
 * on aarch64),
 * and read bandwidth (every thread summing its own part of a buffer of 1-2
 * GiB with the family's widest loads, plain, prefetched and non-temporal:
 * the best pass), so a result can be given as a fraction of what the
 * hardware can do. Small kernels written for the measurement only.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli/bench_roofline.h"

#include <stdint.h>
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

/* ---- read bandwidth ------------------------------------------------------------ */

/* Sums of 32-bit words (mod 2^32) over bytes at p: every method reads every
 * byte once, so the sums agree and a loop that skipped part of its range
 * (and so "measured" more than the memory gives) would show. p is 64-byte
 * aligned and bytes a multiple of BENCH_READ_ALIGN. Portable: plain C. */
static uint32_t read_sum_portable(const uint8_t *p, size_t bytes) {
    const uint32_t *w = (const uint32_t *)p;
    uint32_t acc[16] = {0};
    for (size_t i = 0; i < bytes / 4; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += w[i + j];
    uint32_t s = 0;
    for (int j = 0; j < 16; j++) s += acc[j];
    return s;
}

#if defined(__x86_64__)
/* 8 zmm accumulators, 512 bytes per iteration: loads are independent, so
 * the loop is bound by the memory, not by add latency. prefetch > 0: that
 * many bytes ahead (T0); nt: VMOVNTDQA (non-temporal hint). */
__attribute__((target("avx512f"))) static uint32_t read_sum_avx512(const uint8_t *p, size_t bytes, size_t prefetch,
                                                                    bool nt) {
    __m512i a[8];
    for (int j = 0; j < 8; j++) a[j] = _mm512_setzero_si512();
    for (size_t i = 0; i < bytes; i += 512) {
        if (prefetch)
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)p + i + prefetch + 64 * j, _MM_HINT_T0);
        if (nt)
            for (int j = 0; j < 8; j++) a[j] = _mm512_add_epi32(a[j], _mm512_stream_load_si512((void *)(p + i + 64 * j)));
        else
            for (int j = 0; j < 8; j++) a[j] = _mm512_add_epi32(a[j], _mm512_load_si512((const void *)(p + i + 64 * j)));
    }
    for (int j = 1; j < 8; j++) a[0] = _mm512_add_epi32(a[0], a[j]);
    /* summed as unsigned: GCC's _mm512_reduce_add_epi32 adds signed ints,
     * whose wrap-around UBSan reports */
    uint32_t t[16], s = 0;
    _mm512_storeu_si512((void *)t, a[0]);
    for (int j = 0; j < 16; j++) s += t[j];
    return s;
}

/* 8 ymm accumulators, 256 bytes per iteration (AVX2's VMOVNTDQA for nt). */
__attribute__((target("avx2"))) static uint32_t read_sum_avx2(const uint8_t *p, size_t bytes, size_t prefetch, bool nt) {
    __m256i a[8];
    for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_si256();
    for (size_t i = 0; i < bytes; i += 256) {
        if (prefetch)
            for (int j = 0; j < 4; j++) _mm_prefetch((const char *)p + i + prefetch + 64 * j, _MM_HINT_T0);
        if (nt)
            for (int j = 0; j < 8; j++)
                a[j] = _mm256_add_epi32(a[j], _mm256_stream_load_si256((const void *)(p + i + 32 * j)));
        else
            for (int j = 0; j < 8; j++)
                a[j] = _mm256_add_epi32(a[j], _mm256_load_si256((const __m256i *)(p + i + 32 * j)));
    }
    for (int j = 1; j < 8; j++) a[0] = _mm256_add_epi32(a[0], a[j]);
    uint32_t t[8], s = 0;
    _mm256_storeu_si256((__m256i *)t, a[0]);
    for (int j = 0; j < 8; j++) s += t[j];
    return s;
}
#endif

#if defined(__aarch64__)
/* 8 q-register accumulators, 128 bytes per iteration. */
static uint32_t read_sum_neon(const uint8_t *p, size_t bytes, size_t prefetch) {
    uint32x4_t a[8];
    for (int j = 0; j < 8; j++) a[j] = vdupq_n_u32(0);
    for (size_t i = 0; i < bytes; i += 128) {
        if (prefetch) __builtin_prefetch(p + i + prefetch), __builtin_prefetch(p + i + prefetch + 64);
        for (int j = 0; j < 8; j++) a[j] = vaddq_u32(a[j], vld1q_u32((const uint32_t *)(p + i + 16 * j)));
    }
    for (int j = 1; j < 8; j++) a[0] = vaddq_u32(a[0], a[j]);
    return vaddvq_u32(a[0]);
}
#endif

static const char *const READ_METHOD_NAMES[BENCH_READ_METHODS] = {
    "portable", "zmm loads", "zmm loads + prefetch", "zmm non-temporal loads",
    "ymm loads", "ymm loads + prefetch", "ymm non-temporal loads", "NEON q loads", "NEON q loads + prefetch"};

const char *bench_read_method_name(int method) {
    return method >= 0 && method < BENCH_READ_METHODS ? READ_METHOD_NAMES[method] : "?";
}

bool bench_read_method_available(int method, pdl_isa isa) {
    if (method == BENCH_READ_PORTABLE) return true;
#if defined(__x86_64__)
    const pdl_cpu_features *f = cpu_features_get();
    if (method >= BENCH_READ_ZMM && method <= BENCH_READ_ZMM_NT) return isa == PDL_ISA_AVX512 && f->avx512f;
    if (method >= BENCH_READ_YMM && method <= BENCH_READ_YMM_NT) return (isa == PDL_ISA_AVX512 || isa == PDL_ISA_AVX2) && f->avx2;
#elif defined(__aarch64__)
    if (method == BENCH_READ_NEON || method == BENCH_READ_NEON_PREFETCH) return isa == PDL_ISA_NEON;
#endif
    (void)isa;
    return false;
}

/* 2 KiB ahead: the hardware prefetchers' own reach is less on some cores */
#define READ_PREFETCH_BYTES 2048

uint32_t bench_read_sum(int method, const void *buf, size_t bytes) {
    const uint8_t *p = buf;
    switch (method) {
#if defined(__x86_64__)
    case BENCH_READ_ZMM: return read_sum_avx512(p, bytes, 0, false);
    case BENCH_READ_ZMM_PREFETCH: return read_sum_avx512(p, bytes, READ_PREFETCH_BYTES, false);
    case BENCH_READ_ZMM_NT: return read_sum_avx512(p, bytes, 0, true);
    case BENCH_READ_YMM: return read_sum_avx2(p, bytes, 0, false);
    case BENCH_READ_YMM_PREFETCH: return read_sum_avx2(p, bytes, READ_PREFETCH_BYTES, false);
    case BENCH_READ_YMM_NT: return read_sum_avx2(p, bytes, 0, true);
#endif
#if defined(__aarch64__)
    case BENCH_READ_NEON: return read_sum_neon(p, bytes, 0);
    case BENCH_READ_NEON_PREFETCH: return read_sum_neon(p, bytes, READ_PREFETCH_BYTES);
#endif
    default: return read_sum_portable(p, bytes);
    }
}

typedef struct read_task {
    uint8_t *buf;
    size_t bytes; /* a multiple of BENCH_READ_ALIGN per thread */
    int method;   /* -1: write the buffer (each thread its own part: its pages are local to it) */
    uint32_t sink[64];
} read_task;

/* Thread ith's part of the buffer: whole BENCH_READ_ALIGN chunks. */
static void read_part(const read_task *t, int ith, int nth, size_t *off, size_t *len) {
    long b, e;
    threadpool_split_range((long)(t->bytes / BENCH_READ_ALIGN), ith, nth, &b, &e);
    *off = (size_t)b * BENCH_READ_ALIGN;
    *len = (size_t)(e - b) * BENCH_READ_ALIGN;
}

static void read_worker(void *p, int ith, int nth) {
    read_task *t = p;
    size_t off, len;
    read_part(t, ith, nth, &off, &len);
    if (t->method < 0) {
        for (size_t i = 0; i < len; i += 4) {
            uint32_t v = (uint32_t)((off + i) >> 2) * 2654435761u;
            memcpy(t->buf + off + i, &v, 4);
        }
        return;
    }
    t->sink[ith % 64] += bench_read_sum(t->method, t->buf + off, len);
}

/* The read bandwidth: every thread sums its own part of a buffer far beyond
 * the last-level cache, with each method the family has; the best pass. */
static void measure_read(pdl_threadpool *pool, pdl_isa isa, bench_roofline *out) {
    /* 2 GiB when there is plenty of memory, else 1 GiB; less only when
     * even that would crowd the machine (a smaller figure then is flagged
     * by the size printed with it) */
    size_t avail = huge_available_memory();
    size_t bytes = (size_t)2 << 30;
    if (avail && avail < 8 * bytes) bytes = (size_t)1 << 30;
    while (avail && bytes > ((size_t)64 << 20) && avail < 4 * bytes) bytes /= 2;
    read_task t = {.bytes = bytes, .method = -1};
    t.buf = huge_alloc(bytes);
    if (!t.buf) return;
    threadpool_run(pool, read_worker, &t);
    out->read_bytes = bytes;
    for (int pass = 0; pass < 3; pass++)
        for (int m = 0; m < BENCH_READ_METHODS; m++) {
            if (!bench_read_method_available(m, isa)) continue;
            t.method = m;
            double t0 = clock_now_s();
            threadpool_run(pool, read_worker, &t);
            double gbs = (double)bytes / (clock_now_s() - t0) / 1e9;
            if (gbs > out->read_gbs) {
                out->read_gbs = gbs;
                out->read_method = bench_read_method_name(m);
            }
        }
    huge_free(t.buf);
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
    measure_read(pool, isa, out);
    threadpool_free(pool);
    return 0;
}
