/*
 * test_weight_panels.c - F32, F16 and BF16 weights in panels
 * (kernels/weight_panels.h): the order of operations the header documents,
 * computed here straight from the row-major weights, equals the portable
 * panel tiles and the AVX-512 ones bit for bit on ragged shapes (rows,
 * outputs and k not multiples of the tile), with and without bias and
 * accumulation, and for BF16 with F32 and with BF16 activations; a row
 * alone gives the bytes it gets in a batch; and the results are within
 * float32 accumulation error of float64 sums. The same for Q8_0, Q4_0,
 * MXFP4 and IQ4_NL weights, whose activations are quantized to Q8_0
 * (MXFP4's documented order here decodes E2M1 and E8M0 from their bit
 * fields, as the OCP spec defines them, not through kernels/mxfp4.h;
 * IQ4_NL's takes its 16 values from the table written out here). The
 * decode tiles' prefetch reaches every line of those panels, whole pairs
 * of blocks ahead.
 */
/* Before any header: the prefetch helpers of kernels/weight_panels.h
 * record the lines they reach (test_pair_prefetch_reaches_every_line). */
#include <stddef.h>
static void record_prefetch(const void *p);
#define PANEL_PREFETCH(p) record_prefetch(p)

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/tensor.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "kernels/matmul_table.h"
#include "kernels/weight_panels.h"
#include "test_util.h"
#include "vnni256/evex_twin.h"

/* the matmuls' scratch (scratch.h), shared by every test here */
static pdl_scratch scratch;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}
static uint8_t rand_byte(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint8_t)(rng_state >> 56);
}

/* w's panels in a heap buffer of exactly panels_size bytes (so the
 * sanitizers see a read past them), freed with free(). */
static void *panels_of(pdl_threadpool *pool, pdl_tensor *t) {
    void *buf = aligned_alloc(64, panels_size(t));
    REQUIRE(buf);
    panels_fill(pool, t, buf);
    REQUIRE(t->panels == buf);
    return buf;
}

/* A random (out, in) matrix of dtype; *vals gets its values as floats. */
static void *make_matrix(pdl_dtype dt, int out, int in, float **vals) {
    size_t n = (size_t)out * in, es = dt == PDL_DTYPE_F32 ? 4 : 2;
    uint8_t *w = malloc(n * es);
    float *v = malloc(n * sizeof *v);
    REQUIRE(w && v);
    for (size_t i = 0; i < n; i++) {
        float f = frand();
        if (dt == PDL_DTYPE_F32) {
            memcpy(w + i * 4, &f, 4);
            v[i] = f;
        } else {
            uint16_t h = dt == PDL_DTYPE_F16 ? fp16_f32_to_f16(f) : fp16_f32_to_bf16(f);
            memcpy(w + i * 2, &h, 2);
            v[i] = dt == PDL_DTYPE_F16 ? fp16_f16_to_f32(h) : fp16_bf16_to_f32(h);
        }
    }
    *vals = v;
    return w;
}

/* The documented sequence for output (r, o), written from the header's
 * description and the row-major values, not from the panels. */
static float documented(pdl_dtype dt, bool bf16_act, const float *wv, const float *x, int in, int o,
                        const float *bias, float y0, bool accumulate) {
    const float *w = wv + (size_t)o * in;
    float acc = 0.0f;
    if (dt != PDL_DTYPE_BF16) {
        for (int k = 0; k < in; k++) acc = fmaf(w[k], x[k], acc);
    } else {
        for (int j = 0; 2 * j < in; j++) {
            float w1 = 2 * j + 1 < in ? w[2 * j + 1] : 0.0f, x1 = 2 * j + 1 < in ? x[2 * j + 1] : 0.0f;
            float x0 = x[2 * j];
            if (bf16_act) {
                x1 = fp16_bf16_to_f32(fp16_f32_to_bf16_daz(x1));
                x0 = fp16_bf16_to_f32(fp16_f32_to_bf16_daz(x0));
            }
            acc = fmaf(w1, x1, acc);
            acc = fmaf(w[2 * j], x0, acc);
        }
    }
    float v = bias ? acc + bias[o] : acc;
    return accumulate ? y0 + v : v;
}

/* Each row alone gives the bytes it got in the batch yv (y0: what y held
 * before, for accumulation). */
static void check_rows_alone(pdl_threadpool *pool, const pdl_tensor *t, const float *x, int rows, const float *y0,
                             const float *yv, const float *bias, bool accum) {
    int out = (int)t->shape[0], in = (int)t->shape[1];
    float *one = malloc((size_t)out * sizeof *one);
    REQUIRE(one != NULL);
    for (int r = 0; r < rows; r++) {
        memcpy(one, y0 + (size_t)r * out, (size_t)out * sizeof *one);
        matmul_run(matmul_kernels_active(), pool, &scratch, one, out, x + (size_t)r * in, 1, t, bias, accum);
        CHECK_MSG(memcmp(one, yv + (size_t)r * out, (size_t)out * sizeof *one) == 0,
                  "%s row %d alone differs from the batch", dtype_name(t->dtype), r);
    }
    free(one);
}

static void test_panels_follow_the_documented_order(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(2);
    REQUIRE(pool != NULL);
    pdl_isa best = cpu_isa_best();
    bool has_dp = cpu_features_get()->avx512bf16;
    fprintf(stderr, "  instruction set here: %s%s\n", cpu_isa_name(best), has_dp ? " + AVX512_BF16" : "");
    pdl_dtype types[] = {PDL_DTYPE_F32, PDL_DTYPE_F16, PDL_DTYPE_BF16};
    /* rows, out, in: single rows, partial tiles of rows (8) and panels
     * (16 outputs, 3 per tile), odd k for the BF16 pairs; a decode row
     * over 126 panels, worth both threads, which take its panels in
     * chunks; and 260 rows of 512 F32 activations, two row blocks of
     * (half an L2) with two chunks of panels each */
    int shapes[][3] = {{1, 1, 1},   {1, 16, 32},    {3, 17, 31},   {8, 48, 64},   {9, 49, 97},
                       {17, 100, 130}, {1, 200, 255}, {1, 2001, 70}, {260, 70, 512}};
    int checked = 0;
    for (size_t ti = 0; ti < 3; ti++)
        for (int act = 0; act < (types[ti] == PDL_DTYPE_BF16 ? 2 : 1); act++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                for (int variant = 0; variant < 3; variant++) { /* plain, + bias, + bias accumulated */
                    pdl_dtype dt = types[ti];
                    int rows = shapes[si][0], out = shapes[si][1], in = shapes[si][2];
                    float *wv;
                    void *w = make_matrix(dt, out, in, &wv);
                    pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
                    void *buf = panels_of(pool, &t);
                    float *x = malloc((size_t)rows * in * sizeof *x), *bias = malloc((size_t)out * sizeof *bias);
                    float *y0 = malloc((size_t)rows * out * sizeof *y0), *want = malloc((size_t)rows * out * sizeof *want);
                    float *ys = malloc((size_t)rows * out * sizeof *ys), *yv = malloc((size_t)rows * out * sizeof *yv);
                    REQUIRE(x && bias && y0 && want && ys && yv);
                    for (int i = 0; i < rows * in; i++) x[i] = frand();
                    /* a second row of denormals only, up to just below FLT_MIN (which
                     * would round up to it): BF16 activations take them as zero, as
                     * VCVTNEPS2BF16 does, so that row's outputs are exactly zero */
                    for (int k = 0; rows > 1 && k < in; k++)
                        x[in + k] = (k % 2 ? -1.0f : 1.0f) * 1.1754942e-38f / (float)(1 + k % 3);
                    for (int i = 0; i < out; i++) bias[i] = frand();
                    for (int i = 0; i < rows * out; i++) y0[i] = frand();
                    const float *b = variant ? bias : NULL;
                    bool accum = variant == 2;
                    for (int r = 0; r < rows; r++)
                        for (int o = 0; o < out; o++)
                            want[r * out + o] = documented(dt, act, wv, x + (size_t)r * in, in, o, b,
                                                           y0[r * out + o], accum);
                    matmul_set_bf16_activations(act == 1);
                    memcpy(ys, y0, (size_t)rows * out * sizeof *ys);
                    cpu_isa_set(PDL_ISA_SCALAR);
                    matmul_run(matmul_kernels_active(), pool, &scratch, ys, out, x, rows, &t, b, accum);
                    CHECK_MSG(memcmp(ys, want, (size_t)rows * out * sizeof *ys) == 0,
                              "portable %s%s %dx%dx%d variant %d: not the documented order", dtype_name(dt),
                              act ? "+bf16" : "", rows, out, in, variant);
                    /* the SIMD tiles: AVX-512 (with BF16 activations where asked),
                     * and AVX2 (exact F32 products only: it has no BF16 dot) */
                    for (int isa = PDL_ISA_AVX2; isa <= PDL_ISA_AVX512; isa++) {
                        if (!cpu_isa_supported((pdl_isa)isa) || (isa == PDL_ISA_AVX2 && act)) continue;
                        cpu_isa_set((pdl_isa)isa);
                        memcpy(yv, y0, (size_t)rows * out * sizeof *yv);
                        matmul_run(matmul_kernels_active(), pool, &scratch, yv, out, x, rows, &t, b, accum);
                        CHECK_MSG(memcmp(yv, want, (size_t)rows * out * sizeof *yv) == 0,
                                  "%s %s%s %dx%dx%d variant %d: differs from the documented order",
                                  cpu_isa_name((pdl_isa)isa), dtype_name(dt), act ? "+bf16" : "", rows, out, in,
                                  variant);
                        check_rows_alone(pool, &t, x, rows, y0, yv, b, accum);
                    }
                    cpu_isa_set(best);
                    /* and the documented order is a dot product: float64 sums
                     * of the same (rounded) operands within 1e-5 relative */
                    double worst = 0;
                    for (int r = 0; r < rows; r++)
                        for (int o = 0; o < out; o++) {
                            double s = 0, mag = 0;
                            for (int k = 0; k < in; k++) {
                                float xv = x[(size_t)r * in + k];
                                if (act) xv = fp16_bf16_to_f32(fp16_f32_to_bf16_daz(xv));
                                s += (double)wv[(size_t)o * in + k] * xv;
                                mag += fabs((double)wv[(size_t)o * in + k] * xv);
                            }
                            double e = fabs(s + (b ? b[o] : 0) + (accum ? y0[r * out + o] : 0) - ys[r * out + o]) /
                                       (mag + fabs(b ? b[o] : 0) + fabs(accum ? y0[r * out + o] : 0) + 1e-30);
                            if (e > worst) worst = e;
                        }
                    CHECK_MSG(worst < 1e-5, "%s %dx%dx%d: relative error %.3g", dtype_name(dt), rows, out, in,
                              worst);
                    checked++;
                    free(w), free(wv), free(buf), free(x), free(bias), free(y0), free(want), free(ys), free(yv);
                }
    fprintf(stderr, "  %d cases\n", checked);
    matmul_set_bf16_activations(false);
    cpu_isa_set(best);
    threadpool_free(pool);
}

/* The panel layout itself: element (o, k) of the matrix is where the
 * header says, and rows past `out` (and BF16's pair past `in`) are zeros.
 * A shifted index would put a neighbour's value there. */
static void test_panel_layout(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool != NULL);
    int out = 19, in = 5;
    pdl_dtype types[] = {PDL_DTYPE_F32, PDL_DTYPE_F16, PDL_DTYPE_BF16};
    for (size_t ti = 0; ti < 3; ti++) {
        float *wv;
        void *w = make_matrix(types[ti], out, in, &wv);
        pdl_tensor t = {.dtype = types[ti], .n_dims = 2, .shape = {out, in}, .data = w};
        void *buf = panels_of(pool, &t);
        CHECK_EQ_INT((int)panels_steps(types[ti], in), types[ti] == PDL_DTYPE_BF16 ? 3 : 5);
        size_t pb = panels_bytes(types[ti], in);
        int bad = 0;
        for (int o = 0; o < 32; o++)
            for (int k = 0; k < (types[ti] == PDL_DTYPE_BF16 ? 6 : in); k++) {
                const uint8_t *pp = (const uint8_t *)buf + (size_t)(o / 16) * pb;
                int c = o % 16;
                float got;
                if (types[ti] == PDL_DTYPE_F32) got = ((const float *)(const void *)pp)[k * 16 + c];
                else if (types[ti] == PDL_DTYPE_F16) got = fp16_f16_to_f32(((const uint16_t *)(const void *)pp)[k * 16 + c]);
                else {
                    uint32_t word = ((const uint32_t *)(const void *)pp)[(k / 2) * 16 + c];
                    got = fp16_bf16_to_f32((uint16_t)(k % 2 ? word >> 16 : word & 0xFFFF));
                }
                float want = o < out && k < in ? wv[(size_t)o * in + k] : 0.0f;
                if (fp16_f32_to_bits(got) != fp16_f32_to_bits(want)) bad++;
            }
        CHECK_MSG(bad == 0, "%s: %d elements misplaced", dtype_name(types[ti]), bad);
        free(w), free(wv), free(buf);
    }
    threadpool_free(pool);
}

/* Twice the E2M1 value of 4-bit code c (sign bit 3, exponent bits 1-2
 * with bias 1, mantissa bit 0; exponent 0 is subnormal: 0.5 m), an
 * integer. */
static int e2m1_doubled(int c) {
    int ex = (c >> 1) & 3, m = c & 1;
    int mag2 = ex == 0 ? m : (2 + m) << (ex - 1); /* 2 x (1 + m / 2) x 2^(ex - 1) */
    return c & 8 ? -mag2 : mag2;
}

/* IQ4_NL's 16 values (ggml-common.h's kvalues_iq4nl), written out here on
 * their own, not through kernels/iq4nl.h. */
static const int iq4nl_value[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The E8M0 scale 2^(e - 127), halved to go with the doubled values (e =
 * 255, NaN in the spec, as llama.cpp reads it: 2^127). */
static float e8m0_half(int e) { return ldexpf(1.0f, e - 128); }

/* A random MXFP4 matrix: codes uniform, scales 2^-9 .. 2^-4 (values about
 * 0.002 .. 0.4), and one block in 8 with a subnormal or tiny scale (e 0 ..
 * 3). */
static void *make_mxfp4_matrix(int out, int in, float **vals) {
    size_t nb = (size_t)in / 32;
    uint8_t *w = malloc((size_t)out * nb * 17);
    float *v = malloc((size_t)out * in * sizeof *v);
    REQUIRE(w && v);
    for (int o = 0; o < out; o++)
        for (size_t b = 0; b < nb; b++) {
            uint8_t *blk = w + ((size_t)o * nb + b) * 17;
            int r = rand_byte();
            blk[0] = (uint8_t)(r < 32 ? r & 3 : 119 + r % 6);
            for (int j = 0; j < 16; j++) blk[1 + j] = rand_byte();
            for (int k = 0; k < 32; k++) {
                int c = k < 16 ? blk[1 + k] & 0xF : blk[1 + k - 16] >> 4;
                v[(size_t)o * in + b * 32 + k] = (float)e2m1_doubled(c) * e8m0_half(blk[0]);
            }
        }
    *vals = v;
    return w;
}

/* Q5_0, Q4_1 and Q5_1, written out here from GGUF's definitions (not
 * through kernels/legacy_quant.h): the block's bytes, where its qh (u32,
 * little-endian; none for Q4_1) and its 16 nibble bytes start, and code k
 * (the nibble, plus 16 times bit k of qh). */
static bool legacy(pdl_dtype dt) { return dt == PDL_DTYPE_Q5_0 || dt == PDL_DTYPE_Q4_1 || dt == PDL_DTYPE_Q5_1; }
static size_t legacy_bb(pdl_dtype dt) { return dt == PDL_DTYPE_Q5_0 ? 22 : dt == PDL_DTYPE_Q4_1 ? 20 : 24; }
static size_t legacy_qs(pdl_dtype dt) { return dt == PDL_DTYPE_Q5_0 ? 6 : dt == PDL_DTYPE_Q4_1 ? 4 : 8; }
static int legacy_code(pdl_dtype dt, const uint8_t *blk, int k) {
    const uint8_t *qs = blk + legacy_qs(dt);
    int code = k < 16 ? qs[k] & 0xF : qs[k - 16] >> 4;
    if (dt != PDL_DTYPE_Q4_1) {
        const uint8_t *qh = blk + (dt == PDL_DTYPE_Q5_0 ? 2 : 4);
        code |= ((qh[k / 8] >> (k % 8)) & 1) << 4;
    }
    return code;
}
static float legacy_half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_f16_to_f32(h);
}

/* A random Q5_0 / Q4_1 / Q5_1 matrix: every code and qh bit random, d
 * 0.002 .. 0.012, m -0.01 .. 0.01; *vals its values. */
static void *make_legacy_matrix(pdl_dtype dt, int out, int in, float **vals) {
    size_t bb = legacy_bb(dt), nb = (size_t)in / 32;
    uint8_t *w = malloc((size_t)out * nb * bb);
    float *v = malloc((size_t)out * in * sizeof *v);
    REQUIRE(w && v);
    for (int o = 0; o < out; o++)
        for (size_t b = 0; b < nb; b++) {
            uint8_t *blk = w + ((size_t)o * nb + b) * bb;
            for (size_t i = 0; i < bb; i++) blk[i] = rand_byte();
            uint16_t d = fp16_f32_to_f16(0.002f + 0.01f * fabsf(frand())), m = fp16_f32_to_f16(0.01f * frand());
            memcpy(blk, &d, 2);
            if (dt != PDL_DTYPE_Q5_0) memcpy(blk + 2, &m, 2);
            for (int k = 0; k < 32; k++) {
                int code = legacy_code(dt, blk, k);
                v[(size_t)o * in + b * 32 + k] = dt == PDL_DTYPE_Q5_0 ? legacy_half(blk) * (float)(code - 16)
                                                                      : legacy_half(blk) * (float)code + legacy_half(blk + 2);
            }
        }
    *vals = v;
    return w;
}

/* A random Q8_0, Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1 or Q5_1 matrix; *vals gets its dequantized
 * values. */
static void *make_qmatrix(pdl_dtype dt, int out, int in, float **vals) {
    if (dt == PDL_DTYPE_MXFP4) return make_mxfp4_matrix(out, in, vals);
    if (legacy(dt)) return make_legacy_matrix(dt, out, in, vals);
    bool q8 = dt == PDL_DTYPE_Q8_0, iq = dt == PDL_DTYPE_IQ4_NL;
    size_t bb = q8 ? 34 : 18, nb = (size_t)in / 32;
    uint8_t *w = malloc((size_t)out * nb * bb);
    float *v = malloc((size_t)out * in * sizeof *v);
    REQUIRE(w && v);
    for (int o = 0; o < out; o++)
        for (size_t b = 0; b < nb; b++) {
            uint8_t *blk = w + ((size_t)o * nb + b) * bb;
            uint16_t d = fp16_f32_to_f16(0.002f + 0.01f * fabsf(frand()));
            memcpy(blk, &d, 2);
            for (int k = 0; k < 32; k++) {
                int q;
                if (q8) {
                    q = (int)(frand() * 127.0f);
                    blk[2 + k] = (uint8_t)(int8_t)q;
                } else {
                    int u = (int)((frand() + 1.0f) * 8.0f) & 15;
                    q = iq ? iq4nl_value[u] : u - 8;
                    blk[2 + k % 16] = (uint8_t)(k < 16 ? (blk[2 + k % 16] & 0xF0) | u : (blk[2 + k % 16] & 0x0F) | u << 4);
                }
                v[(size_t)o * in + b * 32 + k] = fp16_f16_to_f32(d) * (float)q;
            }
        }
    *vals = v;
    return w;
}

/* The Q8_0 / Q4_0 / MXFP4 / IQ4_NL panel layout, written out here (not through the
 * header's helpers): blocks in pairs, a pair the quants of its two blocks
 * (512 bytes each for Q8_0, 256 for Q4_0) and then their 16 scales each
 * (32 bytes a block); quant word (q, c) of a block at 64 q + 4 c; Q8_0
 * bytes the value plus 128, Q4_0, MXFP4 and IQ4_NL the file's nibble bytes
 * (MXFP4's scales: 2^(e - 128) as BF16; IQ4_NL's: the file's halves). 3 blocks (an odd
 * count: the last pair padded) and 19 rows (the second panel's last 13
 * zeros). A shifted offset would read a neighbour's byte. */
static void test_quantized_panel_layout(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool != NULL);
    int out = 19, in = 96, nb = 3;
    pdl_dtype types[] = {PDL_DTYPE_Q8_0, PDL_DTYPE_Q4_0, PDL_DTYPE_MXFP4, PDL_DTYPE_IQ4_NL};
    for (int ti = 0; ti < 4; ti++) {
        bool q8 = types[ti] == PDL_DTYPE_Q8_0, mx = types[ti] == PDL_DTYPE_MXFP4;
        size_t qb = q8 ? 512 : 256, bb = q8 ? 34 : mx ? 17 : 18, hdr = mx ? 1 : 2, pair = 2 * qb + 64;
        float *wv;
        uint8_t *w = make_qmatrix(types[ti], out, in, &wv);
        pdl_tensor t = {.dtype = types[ti], .n_dims = 2, .shape = {out, in}, .data = w};
        uint8_t *buf = panels_of(pool, &t);
        size_t pb = panels_bytes(types[ti], in);
        CHECK_EQ_INT((int)pb, (int)(2 * pair));
        int bad = 0;
        for (int o = 0; o < 32; o++)
            for (int b = 0; b < 4; b++) { /* block 3: the padding of the second pair */
                const uint8_t *pp = buf + (size_t)(o / 16) * pb + (size_t)(b / 2) * pair;
                int c = o % 16;
                bool real = o < out && b < nb;
                const uint8_t *blk = w + ((size_t)o * nb + b) * bb;
                if (mx) { /* row c's 2^(e - 128) as BF16 (exact): 0x3F80 is 1.0, e = 128 */
                    uint16_t s16;
                    memcpy(&s16, pp + 2 * qb + (b % 2) * 32 + c * 2, 2);
                    if (s16 != (real ? (uint16_t)(fp16_f32_to_bits(ldexpf(1.0f, blk[0] - 128)) >> 16) : 0)) bad++;
                } else {
                    uint16_t d;
                    memcpy(&d, pp + 2 * qb + (b % 2) * 32 + c * 2, 2);
                    if (d != (real ? (uint16_t)(blk[0] | blk[1] << 8) : 0)) bad++;
                }
                for (int q = 0; q < (q8 ? 8 : 4); q++)
                    for (int i = 0; i < 4; i++) {
                        uint8_t got = pp[(b % 2) * qb + q * 64 + c * 4 + i];
                        uint8_t want = real ? (q8 ? (uint8_t)(blk[2 + 4 * q + i] ^ 0x80) : blk[hdr + 4 * q + i]) : 0;
                        if (got != want) bad++;
                    }
            }
        CHECK_MSG(bad == 0, "%s: %d bytes misplaced", dtype_name(types[ti]), bad);
        free(w), free(wv), free(buf);
    }
    threadpool_free(pool);
}

/* The documented sequence for a Q8_0 / Q4_0 / MXFP4 / IQ4_NL output, from
 * the file's blocks: exact integer block sums, one fma per block. */
static float documented_q(pdl_dtype dt, const uint8_t *w, int in, int o, const int8_t *xq, const float *xd,
                          const float *bias, float y0, bool accumulate) {
    bool q8 = dt == PDL_DTYPE_Q8_0;
    if (legacy(dt)) { /* the code (Q5_0: minus 16); Q4_1 / Q5_1: then fma(sum x, m dx) */
        size_t nb = (size_t)in / 32, bb = legacy_bb(dt);
        float acc = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + ((size_t)o * nb + b) * bb;
            int32_t s = 0, xsum = 0;
            for (int k = 0; k < 32; k++) {
                int code = legacy_code(dt, blk, k);
                s += (dt == PDL_DTYPE_Q5_0 ? code - 16 : code) * xq[b * 32 + k];
                xsum += xq[b * 32 + k];
            }
            acc = fmaf((float)s, legacy_half(blk) * xd[b], acc);
            if (dt != PDL_DTYPE_Q5_0) acc = fmaf((float)xsum, legacy_half(blk + 2) * xd[b], acc);
        }
        float v = bias ? acc + bias[o] : acc;
        return accumulate ? y0 + v : v;
    }
    if (dt == PDL_DTYPE_MXFP4) { /* doubled E2M1 values, 2^(e - 128) */
        size_t nb = (size_t)in / 32;
        float acc = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + ((size_t)o * nb + b) * 17;
            int32_t s = 0;
            for (int k = 0; k < 32; k++)
                s += e2m1_doubled(k < 16 ? blk[1 + k] & 0xF : blk[1 + k - 16] >> 4) * xq[b * 32 + k];
            acc = fmaf((float)s, e8m0_half(blk[0]) * xd[b], acc);
        }
        float v = bias ? acc + bias[o] : acc;
        return accumulate ? y0 + v : v;
    }
    size_t bb = q8 ? 34 : 18, nb = (size_t)in / 32;
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + ((size_t)o * nb + b) * bb;
        int32_t s = 0;
        for (int k = 0; k < 32; k++) {
            int code = k < 16 ? blk[2 + k] & 0xF : blk[2 + k - 16] >> 4;
            int wk = q8 ? (int8_t)blk[2 + k] : dt == PDL_DTYPE_IQ4_NL ? iq4nl_value[code] : code - 8;
            s += wk * xq[b * 32 + k];
        }
        uint16_t d;
        memcpy(&d, blk, 2);
        acc = fmaf((float)s, fp16_f16_to_f32(d) * xd[b], acc);
    }
    float v = bias ? acc + bias[o] : acc;
    return accumulate ? y0 + v : v;
}

static void test_quantized_panels_follow_the_documented_order(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(2);
    REQUIRE(pool != NULL);
    pdl_isa best = cpu_isa_best();
    bool vnni = cpu_features_get()->avx512vnni;
    fprintf(stderr, "  instruction set here: %s%s\n", cpu_isa_name(best), vnni ? " + AVX512_VNNI" : "");
    pdl_dtype types[] = {PDL_DTYPE_Q8_0, PDL_DTYPE_Q4_0, PDL_DTYPE_MXFP4, PDL_DTYPE_IQ4_NL,
                         PDL_DTYPE_Q5_0, PDL_DTYPE_Q4_1, PDL_DTYPE_Q5_1};
    int shapes[][3] = {{1, 1, 32},    {1, 16, 64},    {3, 17, 96},   {4, 48, 128},
                       {5, 49, 32},   {9, 100, 160},  {1, 200, 256}, {1, 1001, 256}}; /* the last: chunks */
    int checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int variant = 0; variant < 3; variant++) {
                pdl_dtype dt = types[ti];
                int rows = shapes[si][0], out = shapes[si][1], in = shapes[si][2], nb = in / 32;
                float *wv;
                uint8_t *w = make_qmatrix(dt, out, in, &wv);
                pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
                void *buf = panels_of(pool, &t);
                size_t ny = (size_t)rows * out;
                float *x = malloc((size_t)rows * in * sizeof *x), *bias = malloc((size_t)out * sizeof *bias);
                float *y0 = malloc(ny * sizeof *y0), *want = malloc(ny * sizeof *want), *ys = malloc(ny * sizeof *ys);
                float *yv = malloc(ny * sizeof *yv);
                int8_t *xq = malloc((size_t)rows * in);
                float *xd = malloc((size_t)rows * nb * sizeof *xd);
                REQUIRE(x && bias && y0 && want && ys && yv && xq && xd);
                for (int i = 0; i < rows * in; i++) x[i] = frand();
                for (int i = 0; i < out; i++) bias[i] = frand();
                for (size_t i = 0; i < ny; i++) y0[i] = frand();
                for (int r = 0; r < rows; r++)
                    matmul_quantize_row_q8_0(x + (size_t)r * in, in, xq + (size_t)r * in, xd + (size_t)r * nb);
                const float *b = variant ? bias : NULL;
                bool accum = variant == 2;
                for (int r = 0; r < rows; r++)
                    for (int o = 0; o < out; o++)
                        want[r * out + o] = documented_q(dt, w, in, o, xq + (size_t)r * in, xd + (size_t)r * nb, b,
                                                         y0[r * out + o], accum);
                memcpy(ys, y0, ny * sizeof *ys);
                cpu_isa_set(PDL_ISA_SCALAR);
                matmul_run(matmul_kernels_active(), pool, &scratch, ys, out, x, rows, &t, b, accum);
                CHECK_MSG(memcmp(ys, want, ny * sizeof *ys) == 0, "portable %s %dx%dx%d variant %d: not the documented order",
                          dtype_name(dt), rows, out, in, variant);
                /* the SIMD tiles: AVX-512 VNNI and AVX2 (VPMADDUBSW sums) */
                for (int isa = PDL_ISA_AVX2; isa <= PDL_ISA_AVX512; isa++) {
                    if (!cpu_isa_supported((pdl_isa)isa) || (isa == PDL_ISA_AVX512 && !vnni)) continue;
                    cpu_isa_set((pdl_isa)isa);
                    memcpy(yv, y0, ny * sizeof *yv);
                    matmul_run(matmul_kernels_active(), pool, &scratch, yv, out, x, rows, &t, b, accum);
                    CHECK_MSG(memcmp(yv, want, ny * sizeof *yv) == 0,
                              "%s %s %dx%dx%d variant %d: differs from the documented order",
                              cpu_isa_name((pdl_isa)isa), dtype_name(dt), rows, out, in, variant);
                    check_rows_alone(pool, &t, x, rows, y0, yv, b, accum);
                }
                cpu_isa_set(best);
                /* float64 sums of the dequantized weights and activations */
                double worst = 0;
                for (int r = 0; r < rows; r++)
                    for (int o = 0; o < out; o++) {
                        double s = 0, mag = 0;
                        for (int k = 0; k < in; k++) {
                            double p = (double)wv[(size_t)o * in + k] * xd[r * nb + k / 32] * xq[(size_t)r * in + k];
                            s += p;
                            mag += fabs(p);
                        }
                        double extra = (b ? b[o] : 0) + (accum ? y0[r * out + o] : 0);
                        double e = fabs(s + extra - ys[r * out + o]) /
                                   (mag + fabs(b ? b[o] : 0) + fabs(accum ? y0[r * out + o] : 0) + 1e-30);
                        if (e > worst) worst = e;
                    }
                CHECK_MSG(worst < 1e-5, "%s %dx%dx%d: relative error %.3g", dtype_name(dt), rows, out, in, worst);
                checked++;
                free(w), free(wv), free(buf), free(x), free(bias), free(y0), free(want), free(ys), free(yv);
                free(xq), free(xd);
            }
    fprintf(stderr, "  %d cases\n", checked);
    cpu_isa_set(best);
    threadpool_free(pool);
}

/* matmul_shared: matrices of different heights times the same rows
 * give, each, matmul_run's bytes, whatever part of their panels each
 * thread takes (the concatenated panels split at other places than each
 * matrix alone), with bias and accumulation; a set it cannot take together
 * (a matrix without panels) gives the same bytes one matmul at a time. */
static void test_shared_activations_give_each_matmuls_bytes(void) {
    fp16_init();
    pdl_dtype types[] = {PDL_DTYPE_F32,  PDL_DTYPE_F16,  PDL_DTYPE_BF16, PDL_DTYPE_BF16,
                         PDL_DTYPE_Q8_0, PDL_DTYPE_Q4_0, PDL_DTYPE_MXFP4, PDL_DTYPE_IQ4_NL,
                         PDL_DTYPE_Q5_0, PDL_DTYPE_Q4_1, PDL_DTYPE_Q5_1};
    int heights[3] = {37, 16, 70}, rows_list[] = {1, 5, 17};
    int checked = 0;
    for (int threads = 1; threads <= 2; threads++) {
        pdl_threadpool *pool = threadpool_new(threads);
        REQUIRE(pool != NULL);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++)
                for (int unpaneled = 0; unpaneled < 2; unpaneled++) {
                    pdl_dtype dt = types[ti];
                    bool q = dt == PDL_DTYPE_Q8_0 || dt == PDL_DTYPE_Q4_0 || dt == PDL_DTYPE_MXFP4 ||
                             dt == PDL_DTYPE_IQ4_NL || legacy(dt);
                    int rows = rows_list[ri], in = q ? 64 : 63;
                    matmul_set_bf16_activations(ti == 3);
                    void *w[3], *buf[3];
                    float *wv[3], *bias[3], *want[3], *got[3];
                    pdl_tensor t[3];
                    pdl_matmul_out o[3];
                    float *x = malloc((size_t)rows * in * sizeof *x);
                    REQUIRE(x);
                    for (int i = 0; i < rows * in; i++) x[i] = frand();
                    /* a second row of denormals only, up to just below FLT_MIN (which
                     * would round up to it): BF16 activations take them as zero, as
                     * VCVTNEPS2BF16 does, so that row's outputs are exactly zero */
                    for (int k = 0; rows > 1 && k < in; k++)
                        x[in + k] = (k % 2 ? -1.0f : 1.0f) * 1.1754942e-38f / (float)(1 + k % 3);
                    for (int m = 0; m < 3; m++) {
                        int h = heights[m];
                        w[m] = q ? (void *)make_qmatrix(dt, h, in, &wv[m]) : make_matrix(dt, h, in, &wv[m]);
                        t[m] = (pdl_tensor){.dtype = dt, .n_dims = 2, .shape = {h, in}, .data = w[m]};
                        buf[m] = unpaneled && m == 1 ? NULL : panels_of(pool, &t[m]);
                        bias[m] = malloc((size_t)h * sizeof *bias[m]);
                        want[m] = malloc((size_t)rows * h * sizeof *want[m]);
                        got[m] = malloc((size_t)rows * h * sizeof *got[m]);
                        REQUIRE(bias[m] && want[m] && got[m]);
                        for (int i = 0; i < h; i++) bias[m][i] = frand();
                        for (int i = 0; i < rows * h; i++) want[m][i] = got[m][i] = frand();
                        o[m] = (pdl_matmul_out){.y = got[m], .ldy = h, .w = &t[m], .bias = m == 1 ? NULL : bias[m],
                                                .accumulate = m == 2};
                        matmul_run(matmul_kernels_active(), pool, &scratch, want[m], h, x, rows, &t[m], o[m].bias,
                                   o[m].accumulate);
                    }
                    matmul_shared(matmul_kernels_active(), pool, &scratch, x, rows, o, 3);
                    for (int m = 0; m < 3; m++) {
                        CHECK_MSG(memcmp(got[m], want[m], (size_t)rows * heights[m] * sizeof *got[m]) == 0,
                                  "%s%s, %d rows, matrix %d, %d threads%s", dtype_name(dt),
                                  ti == 3 ? " (BF16 activations)" : "", rows, m, threads,
                                  unpaneled ? ", one without panels" : "");
                        checked++;
                        free(w[m]), free(wv[m]), free(buf[m]), free(bias[m]), free(want[m]), free(got[m]);
                    }
                    free(x);
                }
        threadpool_free(pool);
    }
    matmul_set_bf16_activations(false);
    fprintf(stderr, "  %d products\n", checked);
}

/* Q4_K, Q5_K, Q6_K, Q3_K, Q2_K, IQ4_XS, TQ2_0 and TQ1_0: random super-blocks (every byte pattern is a block once
 * the halves d and dmin are sane) in panels give, for every output, the
 * bits of kquant.h's reference dots kquant_dot_q4_k_q8_k / _q5_k_ / _q6_k_ / _q3_k_ / _q2_k_ / _iq4_xs_ /
 * _tq2_0_ / _tq1_0_
 * on the file's row (which decode the blocks themselves), plus bias and
 * accumulation, on the AVX-512 VNNI tiles (1 and 4 rows, 1 to 3 panels),
 * the AVX2 ones and the portable ones, for ragged shapes and every thread
 * split. */
static void test_k_quant_panels_give_the_reference_dots(void) {
    fp16_init();
    pdl_isa best = cpu_isa_best();
    int shapes[][3] = {{1, 1, 256},  {4, 16, 256},  {5, 17, 512}, {9, 50, 256},
                       {1, 48, 768}, {13, 33, 512}, {3, 40, 256}, {1, 521, 256}}; /* the last: chunks */
    int checked = 0;
    for (int threads = 1; threads <= 2; threads++) {
        pdl_threadpool *pool = threadpool_new(threads);
        REQUIRE(pool != NULL);
        for (int kind = 0; kind < 8; kind++) /* Q4_K, Q6_K, Q5_K, Q3_K, Q2_K, IQ4_XS, TQ2_0, TQ1_0 */
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int variant = 0; variant < 3; variant++) { /* plain, + bias, + bias accumulated */
                bool q6 = kind == 1, q5 = kind == 2, q3 = kind == 3, q2 = kind == 4, iq = kind == 5;
                bool t2 = kind == 6, t1 = kind == 7;
                int rows = shapes[si][0], out = shapes[si][1], in = shapes[si][2], nb = in / 256;
                size_t bb = t2   ? 66
                            : t1 ? 54
                            : iq ? 136
                            : q6 ? 210
                            : q5 ? 176
                            : q3 ? 110
                            : q2 ? 84
                                 : 144,
                       row_bytes = (size_t)nb * bb;
                uint8_t *w = malloc((size_t)out * row_bytes);
                REQUIRE(w);
                for (size_t i = 0; i < (size_t)out * row_bytes; i++) w[i] = rand_byte();
                for (int i = 0; i < out * nb; i++) { /* d in [0.5, 1.5) / 500, dmin in [0, 1) / 100 */
                    uint16_t d = fp16_f32_to_f16((0.5f + (frand() + 1.0f) / 2.0f) / 500.0f);
                    uint16_t m = fp16_f32_to_f16((frand() + 1.0f) / 200.0f);
                    if (t2 || t1) { /* d last */
                        memcpy(w + (size_t)i * bb + bb - 2, &d, 2);
                    } else if (q6 || q3) {
                        memcpy(w + (size_t)i * bb + (q6 ? 208 : 108), &d, 2);
                    } else if (q2) {
                        memcpy(w + (size_t)i * bb + 80, &d, 2), memcpy(w + (size_t)i * bb + 82, &m, 2);
                    } else if (iq) { /* d only */
                        memcpy(w + (size_t)i * bb, &d, 2);
                    } else {
                        memcpy(w + (size_t)i * bb, &d, 2), memcpy(w + (size_t)i * bb + 2, &m, 2);
                    }
                }
                pdl_dtype dt = t2   ? PDL_DTYPE_TQ2_0
                               : t1 ? PDL_DTYPE_TQ1_0
                               : iq ? PDL_DTYPE_IQ4_XS
                               : q6 ? PDL_DTYPE_Q6_K
                               : q5 ? PDL_DTYPE_Q5_K
                               : q3 ? PDL_DTYPE_Q3_K
                               : q2 ? PDL_DTYPE_Q2_K
                                    : PDL_DTYPE_Q4_K;
                pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
                void *buf = panels_of(pool, &t);
                float *x = malloc((size_t)rows * in * sizeof *x), *bias = malloc((size_t)out * sizeof *bias);
                float *y0 = malloc((size_t)rows * out * sizeof *y0), *want = malloc((size_t)rows * out * sizeof *want);
                float *got = malloc((size_t)rows * out * sizeof *got);
                pdl_block_q8k *xk = malloc((size_t)rows * nb * sizeof *xk);
                REQUIRE(x && bias && y0 && want && got && xk);
                for (int i = 0; i < rows * in; i++) x[i] = frand();
                for (int i = 0; i < out; i++) bias[i] = frand();
                for (int i = 0; i < rows * out; i++) y0[i] = frand();
                for (int r = 0; r < rows; r++) kquant_quantize_row_q8_k(x + (size_t)r * in, in, xk + (size_t)r * nb);
                for (int r = 0; r < rows; r++)
                    for (int o = 0; o < out; o++) {
                        const uint8_t *wr = w + (size_t)o * row_bytes;
                        float v = t2   ? kquant_dot_tq2_0_q8_k(wr, xk + (size_t)r * nb, nb)
                                  : t1 ? kquant_dot_tq1_0_q8_k(wr, xk + (size_t)r * nb, nb)
                                  : iq ? kquant_dot_iq4_xs_q8_k(wr, xk + (size_t)r * nb, nb)
                                  : q6 ? kquant_dot_q6_k_q8_k(wr, xk + (size_t)r * nb, nb)
                                  : q5 ? kquant_dot_q5_k_q8_k(wr, xk + (size_t)r * nb, nb)
                                  : q3 ? kquant_dot_q3_k_q8_k(wr, xk + (size_t)r * nb, nb)
                                  : q2 ? kquant_dot_q2_k_q8_k(wr, xk + (size_t)r * nb, nb)
                                       : kquant_dot_q4_k_q8_k(wr, xk + (size_t)r * nb, nb);
                        if (variant) v += bias[o];
                        want[r * out + o] = variant == 2 ? y0[r * out + o] + v : v;
                    }
                /* the AVX-512 VNNI tile, the AVX2 one (VPMADDUBSW) and the portable one */
                pdl_isa families[] = {PDL_ISA_AVX512, PDL_ISA_AVX2, PDL_ISA_SCALAR};
                for (int fi = 0; fi < 3; fi++) {
                    pdl_isa isa = families[fi];
                    if (!cpu_isa_supported(isa) || (isa == PDL_ISA_AVX512 && !cpu_features_get()->avx512vnni))
                        continue;
                    cpu_isa_set(isa);
                    memcpy(got, y0, (size_t)rows * out * sizeof *got);
                    panels_matmul(matmul_kernels_active(), pool, &scratch, got, out, x, rows, &t,
                                  variant ? bias : NULL, variant == 2);
                    CHECK_MSG(memcmp(got, want, (size_t)rows * out * sizeof *got) == 0,
                              "%s %dx%dx%d variant %d, %s tile, %d threads", dtype_name(dt), rows, out, in, variant,
                              cpu_isa_name(isa), threads);
                    cpu_isa_set(best);
                    checked++;
                }
                free(w), free(buf), free(x), free(bias), free(y0), free(want), free(got), free(xk);
            }
        threadpool_free(pool);
    }
    fprintf(stderr, "  %d cases\n", checked);
}

/* matmul_gated: the gate tile, the up tile and the activation per
 * tile give, for every dtype with panels (and for a pair it must take one
 * matmul at a time), the bytes of the two matmuls followed by the
 * activation over whole rows, for SiLU and GELU-tanh, ragged shapes and
 * every thread split. */
static void test_gated_matmul_gives_the_unfused_bytes(void) {
    fp16_init();
    pdl_dtype types[] = {PDL_DTYPE_F32,  PDL_DTYPE_F16,   PDL_DTYPE_BF16,  PDL_DTYPE_Q8_0, PDL_DTYPE_Q4_0,
                         PDL_DTYPE_MXFP4, PDL_DTYPE_IQ4_NL, PDL_DTYPE_Q5_0, PDL_DTYPE_Q4_1, PDL_DTYPE_Q5_1};
    int shapes[][2] = {{1, 37}, {9, 70}, {17, 48}}; /* rows, outputs (in = 64) */
    pdl_gate_fn acts[2] = {ops_silu_mul, ops_gelu_tanh_mul};
    int checked = 0;
    for (int threads = 1; threads <= 2; threads++) {
        pdl_threadpool *pool = threadpool_new(threads);
        REQUIRE(pool != NULL);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                for (int ai = 0; ai < 2; ai++)
                    for (int unpaneled = 0; unpaneled < 2; unpaneled++) {
                        pdl_dtype dt = types[ti];
                        bool q = dt == PDL_DTYPE_Q8_0 || dt == PDL_DTYPE_Q4_0 || dt == PDL_DTYPE_MXFP4 ||
                                 dt == PDL_DTYPE_IQ4_NL || legacy(dt);
                        int rows = shapes[si][0], out = shapes[si][1], in = 64;
                        float *wv[2], *x = malloc((size_t)rows * in * sizeof *x);
                        void *w[2], *buf[2];
                        pdl_tensor t[2];
                        REQUIRE(x);
                        for (int i = 0; i < rows * in; i++) x[i] = frand() * 3.0f;
                        for (int m = 0; m < 2; m++) {
                            w[m] = q ? (void *)make_qmatrix(dt, out, in, &wv[m]) : make_matrix(dt, out, in, &wv[m]);
                            t[m] = (pdl_tensor){.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w[m]};
                            buf[m] = unpaneled && m == 1 ? NULL : panels_of(pool, &t[m]);
                        }
                        size_t ny = (size_t)rows * out;
                        float *g0 = malloc(ny * sizeof *g0), *u0 = malloc(ny * sizeof *u0);
                        float *g1 = malloc(ny * sizeof *g1), *u1 = malloc(ny * sizeof *u1);
                        REQUIRE(g0 && u0 && g1 && u1);
                        matmul_run(matmul_kernels_active(), pool, &scratch, g0, out, x, rows, &t[0], NULL, false);
                        matmul_run(matmul_kernels_active(), pool, &scratch, u0, out, x, rows, &t[1], NULL, false);
                        for (int r = 0; r < rows; r++) acts[ai](g0 + (size_t)r * out, u0 + (size_t)r * out, out);
                        matmul_gated(matmul_kernels_active(), pool, &scratch, g1, out, u1, x, rows, &t[0], &t[1],
                                     acts[ai]);
                        CHECK_MSG(memcmp(g0, g1, ny * sizeof *g0) == 0, "%s %dx%d, %s, %d threads%s",
                                  dtype_name(dt), rows, out, ai ? "GELU" : "SiLU", threads,
                                  unpaneled ? ", up without panels" : "");
                        checked++;
                        for (int m = 0; m < 2; m++) free(w[m]), free(wv[m]), free(buf[m]);
                        free(x), free(g0), free(u0), free(g1), free(u1);
                    }
        threadpool_free(pool);
    }
    fprintf(stderr, "  %d cases\n", checked);
}

/* Every matmul entry point, with and without panels, for a dtype whose
 * activations are prepared in scratch (Q8_0 everywhere; BF16 of odd width
 * with panels): when the caller's scratch cannot be had it returns -1 and
 * writes no output; matmul_scratch_bytes is what a call takes, so a
 * scratch reserved to it is never grown by the call (no allocation on the
 * hot path); and the next call succeeds with the bytes of a fresh scratch. */
static void test_matmuls_report_scratch_they_cannot_have(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(2);
    REQUIRE(pool != NULL);
    struct { pdl_dtype dt; int in; } cases[] = {{PDL_DTYPE_Q8_0, 64}, {PDL_DTYPE_BF16, 63}};
    int rows = 5, out = 40, checked = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int paneled = 0; paneled < 2; paneled++) {
            pdl_dtype dt = cases[ci].dt;
            int in = cases[ci].in;
            if (dt == PDL_DTYPE_BF16 && !paneled) continue; /* row-major BF16 may read x as it is */
            if (paneled && !panels_wanted(matmul_kernels_active(), &(pdl_tensor){.dtype = dt, .n_dims = 2,
                                          .shape = {out, in}})) continue;
            float *wv[2], *x = malloc((size_t)rows * in * sizeof *x);
            REQUIRE(x);
            for (int i = 0; i < rows * in; i++) x[i] = frand();
            pdl_tensor t[2];
            void *w[2], *buf[2] = {NULL, NULL};
            for (int m = 0; m < 2; m++) {
                w[m] = dt == PDL_DTYPE_Q8_0 ? (void *)make_qmatrix(dt, out, in, &wv[m]) : make_matrix(dt, out, in, &wv[m]);
                t[m] = (pdl_tensor){.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w[m]};
                if (paneled) buf[m] = panels_of(pool, &t[m]);
            }
            size_t need = matmul_scratch_bytes(matmul_kernels_active(), pool, &t[0], rows), ny = (size_t)rows * out;
            CHECK_MSG(need > 0, "%s %s: takes no scratch", dtype_name(dt), paneled ? "panels" : "rows");
            float *want = malloc(2 * ny * sizeof *want), *got = malloc(2 * ny * sizeof *got), *up = malloc(ny * sizeof *up);
            REQUIRE(want && got && up);
            pdl_scratch fresh = {0};
            REQUIRE(matmul_run(matmul_kernels_active(), pool, &fresh, want, out, x, rows, &t[0], NULL, false) == 0);
            REQUIRE(matmul_run(matmul_kernels_active(), pool, &fresh, want + ny, out, x, rows, &t[1], NULL, false) == 0);
            scratch_free(&fresh);
            pdl_scratch s = {0};
            REQUIRE(scratch_reserve_bytes(&s, need) == 0);
            void *held = s.buf;
            for (int entry = 0; entry < 4; entry++) { /* matmul_run, _shared, _gated, _grouped */
                const char *name[] = {"matmul_run", "matmul_shared", "matmul_gated", "matmul_grouped"};
                pdl_matmul_out o[2] = {{.y = got, .ldy = out, .w = &t[0]}, {.y = got + ny, .ldy = out, .w = &t[1]}};
                pdl_matmul_group g[2] = {{.w = &t[0], .y = got, .ldy = out, .r0 = 0, .n_rows = 2},
                                         {.w = &t[1], .y = got + 2 * out, .ldy = out, .r0 = 2, .n_rows = rows - 2}};
                for (int fail = 1; fail >= 0; fail--) {
                    memset(got, 0xA5, 2 * ny * sizeof *got);
                    s.fail_in = fail;
                    long takes = s.takes;
                    int rc = entry == 0   ? matmul_run(matmul_kernels_active(), pool, &s, got, out, x, rows, &t[0], NULL,
                                                       false)
                             : entry == 1 ? matmul_shared(matmul_kernels_active(), pool, &s, x, rows, o, 2)
                             : entry == 2 ? matmul_gated(matmul_kernels_active(), pool, &s, got, out, up, x, rows,
                                                         &t[0], &t[1], ops_silu_mul)
                                          : matmul_grouped(matmul_kernels_active(), pool, &s, x, rows, g, 2, NULL,
                                                           NULL);
                    bool untouched = true;
                    for (size_t i = 0; i < 2 * ny * sizeof *got; i++) untouched &= ((uint8_t *)got)[i] == 0xA5;
                    if (fail) {
                        CHECK_MSG(rc == -1 && untouched && s.failed > 0, "%s, %s %s: rc %d with no scratch%s", name[entry],
                                  dtype_name(dt), paneled ? "panels" : "rows", rc,
                                  untouched ? "" : ", and the output was written");
                        continue;
                    }
                    CHECK_MSG(rc == 0 && s.takes > takes, "%s: rc %d, %ld takes", name[entry], rc, s.takes - takes);
                    CHECK_MSG(s.buf == held, "%s, %s %s: the reserved scratch was grown", name[entry],
                              dtype_name(dt), paneled ? "panels" : "rows");
                    if (entry == 2) { /* the gate's rows: act(gate, up) of the two products */
                        float *g0 = malloc(ny * sizeof *g0);
                        REQUIRE(g0);
                        memcpy(g0, want, ny * sizeof *g0);
                        for (int r = 0; r < rows; r++) ops_silu_mul(g0 + (size_t)r * out, want + ny + (size_t)r * out, out);
                        CHECK_MSG(memcmp(got, g0, ny * sizeof *g0) == 0, "%s: bytes differ", name[entry]);
                        free(g0);
                    } else if (entry == 3) { /* rows 0-1 times t[0], rows 2.. times t[1] */
                        CHECK_MSG(memcmp(got, want, 2 * (size_t)out * sizeof *got) == 0 &&
                                      memcmp(got + 2 * out, want + ny + 2 * out, (ny - 2 * out) * sizeof *got) == 0,
                                  "%s: bytes differ", name[entry]);
                    } else {
                        CHECK_MSG(memcmp(got, want, (entry ? 2 : 1) * ny * sizeof *got) == 0, "%s: bytes differ",
                                  name[entry]);
                    }
                    checked++;
                }
            }
            scratch_free(&s);
            for (int m = 0; m < 2; m++) free(w[m]), free(wv[m]), free(buf[m]);
            free(x), free(want), free(got), free(up);
        }
    threadpool_free(pool);
    CHECK_MSG(checked >= 4, "only %d cases", checked);
}

/* The integer sums at their bounds, which random weights never reach: every
 * weight at the extreme of its format (Q8_0 127 and -128, Q4_0 nibbles 15
 * and 0, MXFP4 codes 6.0 and -6.0, IQ4_NL codes 15 (113) and 0 (-127), Q5_0 / Q5_1 codes 31 and 0, Q4_1 15 and 0,
 * Q4_K nibbles 15 and Q5_K values 31 (and 0) with scales and mins 63, IQ4_XS codes 15 (113) with scales +31 and
 * 0 (-127) with -32, Q6_K values 63 and 0
 * with scales 127 and -128, Q3_K values 3 with scales 31 and -4 with scales -32, Q2_K values 3 and 0
 * with scales and mins 15) times activations that quantize to +-127
 * (all one sign, and alternating). The AVX2 tiles keep partial sums in
 * 16-bit lanes for as many steps as cannot overflow (weight_panels_int256_body.h):
 * one step too many wraps, and the output leaves the portable tile's. */
static void test_integer_sums_at_their_bounds(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool != NULL);
    pdl_isa best = cpu_isa_best();
    int rows = 5, out = 33, in = 512, checked = 0;
    pdl_dtype types[] = {PDL_DTYPE_Q8_0,  PDL_DTYPE_Q4_0,   PDL_DTYPE_Q4_K, PDL_DTYPE_Q6_K,
                         PDL_DTYPE_MXFP4, PDL_DTYPE_IQ4_NL, PDL_DTYPE_Q5_K, PDL_DTYPE_Q3_K,
                         PDL_DTYPE_Q2_K,  PDL_DTYPE_IQ4_XS, PDL_DTYPE_Q5_0, PDL_DTYPE_Q4_1,
                         PDL_DTYPE_Q5_1};
    float *x = malloc((size_t)rows * in * sizeof *x), *want = malloc((size_t)rows * out * sizeof *want);
    float *got = malloc((size_t)rows * out * sizeof *got);
    REQUIRE(x && want && got);
    for (int r = 0; r < rows; r++) /* rows 0, 1: all +1 / all -1; then alternating signs per 1, 2, 4 */
        for (int k = 0; k < in; k++)
            x[r * in + k] = r == 0 ? 1.0f : r == 1 ? -1.0f : ((k >> (r - 2)) & 1) ? -1.0f : 1.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int extreme = 0; extreme < 2; extreme++) { /* the top of the range, then the bottom */
            pdl_dtype dt = types[ti];
            size_t row_bytes = dtype_row_bytes(dt, in);
            uint8_t *w = malloc((size_t)out * row_bytes);
            REQUIRE(w);
            uint16_t d = fp16_f32_to_f16(0.01f), dmin = fp16_f32_to_f16(0.002f);
            for (int o = 0; o < out; o++) {
                uint8_t *wr = w + (size_t)o * row_bytes;
                if (dt == PDL_DTYPE_MXFP4) { /* codes 7 (6.0) / 15 (-6.0), scale 2^-7 */
                    for (int b = 0; b < in / 32; b++) {
                        wr[b * 17] = 120;
                        memset(wr + b * 17 + 1, extreme ? 0xFF : 0x77, 16);
                    }
                } else if (legacy(dt)) { /* codes 31 (Q4_1 15) / 0, m 0.002 */
                    size_t bb = legacy_bb(dt);
                    for (int b = 0; b < in / 32; b++) {
                        memset(wr + b * bb, extreme ? 0x00 : 0xFF, bb);
                        memcpy(wr + b * bb, &d, 2);
                        if (dt != PDL_DTYPE_Q5_0) memcpy(wr + b * bb + 2, &dmin, 2);
                    }
                } else if (dt == PDL_DTYPE_IQ4_NL) { /* codes 15 (113) / 0 (-127) */
                    for (int b = 0; b < in / 32; b++) {
                        memcpy(wr + b * 18, &d, 2);
                        memset(wr + b * 18 + 2, extreme ? 0x00 : 0xFF, 16);
                    }
                } else if (dt == PDL_DTYPE_Q8_0 || dt == PDL_DTYPE_Q4_0) {
                    bool q8 = dt == PDL_DTYPE_Q8_0;
                    size_t bb = q8 ? 34 : 18;
                    for (int b = 0; b < in / 32; b++) {
                        memcpy(wr + b * bb, &d, 2);
                        memset(wr + b * bb + 2, q8 ? (extreme ? 0x80 : 0x7F) : (extreme ? 0x00 : 0xFF), bb - 2);
                    }
                } else if (dt == PDL_DTYPE_Q4_K) {
                    for (int b = 0; b < in / 256; b++) {
                        uint8_t *blk = wr + b * 144;
                        memcpy(blk, &d, 2), memcpy(blk + 2, &dmin, 2);
                        memset(blk + 4, 0xFF, 12);                     /* six-bit scales and mins 63 */
                        memset(blk + 16, extreme ? 0x00 : 0xFF, 128); /* nibbles */
                    }
                } else if (dt == PDL_DTYPE_IQ4_XS) { /* codes 15 (113) with scales +31 / codes 0 (-127), scales -32 */
                    for (int b = 0; b < in / 256; b++) {
                        uint8_t *blk = wr + b * 136;
                        memset(blk + 2, extreme ? 0x00 : 0xFF, 134);
                        memcpy(blk, &d, 2);
                    }
                } else if (dt == PDL_DTYPE_Q5_K) {
                    for (int b = 0; b < in / 256; b++) {
                        uint8_t *blk = wr + b * 176;
                        memcpy(blk, &d, 2), memcpy(blk + 2, &dmin, 2);
                        memset(blk + 4, 0xFF, 12);                     /* six-bit scales and mins 63 */
                        memset(blk + 16, extreme ? 0x00 : 0xFF, 160); /* qh and nibbles: values 31 / 0 */
                    }
                } else if (dt == PDL_DTYPE_Q2_K) {
                    for (int b = 0; b < in / 256; b++) {
                        uint8_t *blk = wr + b * 84;
                        memset(blk, 0xFF, 16);                        /* scales and mins 15 */
                        memset(blk + 16, extreme ? 0x00 : 0xFF, 64); /* values 3 / 0 */
                        memcpy(blk + 80, &d, 2), memcpy(blk + 82, &dmin, 2);
                    }
                } else if (dt == PDL_DTYPE_Q3_K) {
                    for (int b = 0; b < in / 256; b++) {
                        uint8_t *blk = wr + b * 110;
                        memset(blk, extreme ? 0x00 : 0xFF, 108); /* values 3 with scales 31 / -4 with -32 */
                        memcpy(blk + 108, &d, 2);
                    }
                } else {
                    for (int b = 0; b < in / 256; b++) {
                        uint8_t *blk = wr + b * 210;
                        memset(blk, extreme ? 0x00 : 0xFF, 192);                 /* ql, qh: values 0 / 63 */
                        memset(blk + 192, extreme ? 0x80 : 0x7F, 16);           /* scales -128 / 127 */
                        memcpy(blk + 208, &d, 2);
                    }
                }
            }
            pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
            cpu_isa_set(PDL_ISA_SCALAR);
            matmul_run(matmul_kernels_active(), pool, &scratch, want, out, x, rows, &t, NULL,
                       false); /* the row-major portable dots */
            void *buf = panels_of(pool, &t);
            pdl_isa families[] = {PDL_ISA_SCALAR, PDL_ISA_AVX2, PDL_ISA_AVX512};
            for (int fi = 0; fi < 3; fi++) {
                pdl_isa isa = families[fi];
                if (!cpu_isa_supported(isa) || (isa == PDL_ISA_AVX512 && !cpu_features_get()->avx512vnni)) continue;
                cpu_isa_set(isa);
                panels_matmul(matmul_kernels_active(), pool, &scratch, got, out, x, rows, &t, NULL, false);
                /* Q8_0 / Q4_0 panels have their own order (one fma per block),
                 * the row-major dots another: compare with the portable panels
                 * bit for bit, and with the dots within float rounding */
                if (fi == 0) {
                    double worst = 0;
                    for (int i = 0; i < rows * out; i++) {
                        double e = fabs((double)got[i] - want[i]) / (fabs((double)want[i]) + 1e-3);
                        if (e > worst) worst = e;
                    }
                    CHECK_MSG(worst < 1e-5, "%s extreme %d: portable panels %.3g from the dots", dtype_name(dt),
                              extreme, worst);
                    memcpy(want, got, (size_t)rows * out * sizeof *want);
                } else {
                    CHECK_MSG(memcmp(got, want, (size_t)rows * out * sizeof *got) == 0, "%s extreme %d: %s tile differs",
                              dtype_name(dt), extreme, cpu_isa_name(isa));
                }
                checked++;
            }
            cpu_isa_set(best);
            free(w), free(buf);
        }
    fprintf(stderr, "  %d cases\n", checked);
    free(x), free(want), free(got);
    threadpool_free(pool);
}

/* The AVX-VNNI tiles (VPDPBUSD, 256 bits) give the portable panel tiles'
 * bytes for Q8_0, Q4_0, Q4_K and Q6_K, ragged shapes, 1 to 4 rows and 1 to
 * 3 panels per call, bias and accumulation: the library's tiles where the
 * CPU has AVX-VNNI, and the same body built with EVEX encoding where it has
 * AVX512-VNNI + AVX512VL (tests/vnni256/evex_twin.c). */
static void test_vnni256_tiles_give_the_portable_bits(void) {
    fp16_init();
    const pdl_cpu_features *f = cpu_features_get();
    pdl_qpanel_fn q8 = NULL, q4 = NULL;
    pdl_kpanel_fn k4 = NULL, k6 = NULL;
    const char *which = "none";
    if (f->avxvnni && qpanel_tile_q8_0_avxvnni) {
        q8 = qpanel_tile_q8_0_avxvnni, q4 = qpanel_tile_q4_0_avxvnni;
        k4 = kpanel_tile_q4_k_avxvnni, k6 = kpanel_tile_q6_k_avxvnni, which = "AVX-VNNI";
    } else if (f->avx512vnni && f->avx512vl && f->avx2 && f->fma && f->f16c && test_qpanel_q8_0_vnni256_evex) {
        q8 = test_qpanel_q8_0_vnni256_evex, q4 = test_qpanel_q4_0_vnni256_evex;
        k4 = test_kpanel_q4_k_vnni256_evex, k6 = test_kpanel_q6_k_vnni256_evex, which = "EVEX twin";
    }
    fprintf(stderr, "  256-bit VNNI tiles here: %s\n", which);
    if (!q8) return; /* neither instruction: nothing of this body can run here */
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool != NULL);
    pdl_isa best = cpu_isa_best();
    int shapes[][3] = {{1, 17, 256}, {4, 48, 512}, {5, 49, 256}, {3, 40, 768}, {9, 100, 256}};
    pdl_dtype types[] = {PDL_DTYPE_Q8_0, PDL_DTYPE_Q4_0, PDL_DTYPE_Q4_K, PDL_DTYPE_Q6_K};
    int checked = 0;
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int variant = 0; variant < 3; variant++) {
                pdl_dtype dt = types[ti];
                bool kq = dt == PDL_DTYPE_Q4_K || dt == PDL_DTYPE_Q6_K;
                int rows = shapes[si][0], out = shapes[si][1], in = shapes[si][2];
                size_t row_bytes = dtype_row_bytes(dt, in);
                uint8_t *w = NULL;
                float *wv = NULL;
                if (kq) {
                    w = malloc((size_t)out * row_bytes);
                    REQUIRE(w);
                    for (size_t i = 0; i < (size_t)out * row_bytes; i++) w[i] = rand_byte();
                    size_t bb = dt == PDL_DTYPE_Q6_K ? 210 : 144, dpos = dt == PDL_DTYPE_Q6_K ? 208 : 0;
                    for (int i = 0; i < out * (in / 256); i++) {
                        uint16_t d = fp16_f32_to_f16((0.5f + (frand() + 1.0f) / 2.0f) / 500.0f);
                        uint16_t m = fp16_f32_to_f16((frand() + 1.0f) / 200.0f);
                        memcpy(w + (size_t)i * bb + dpos, &d, 2);
                        if (dt == PDL_DTYPE_Q4_K) memcpy(w + (size_t)i * bb + 2, &m, 2);
                    }
                } else {
                    w = make_qmatrix(dt, out, in, &wv);
                }
                pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
                void *buf = panels_of(pool, &t);
                size_t ny = (size_t)rows * out;
                float *x = malloc((size_t)rows * in * sizeof *x), *bias = malloc((size_t)out * sizeof *bias);
                float *want = malloc(ny * sizeof *want), *got = malloc(ny * sizeof *got);
                int nb32 = in / 32, nbk = in / 256;
                int8_t *xq = malloc((size_t)rows * in);
                float *xd = malloc((size_t)rows * nb32 * sizeof *xd);
                int32_t *xs = malloc((size_t)rows * nb32 * sizeof *xs);
                pdl_block_q8k *xk = malloc((size_t)rows * nbk * sizeof *xk);
                REQUIRE(x && bias && want && got && xq && xd && xs && xk);
                for (int i = 0; i < rows * in; i++) x[i] = frand();
                for (int i = 0; i < out; i++) bias[i] = frand();
                for (size_t i = 0; i < ny; i++) want[i] = got[i] = frand();
                for (int r = 0; r < rows; r++) {
                    matmul_quantize_row_q8_0_sums(x + (size_t)r * in, in, xq + (size_t)r * in, xd + (size_t)r * nb32,
                                                  xs + (size_t)r * nb32);
                    kquant_quantize_row_q8_k(x + (size_t)r * in, in, xk + (size_t)r * nbk);
                }
                const float *b = variant ? bias : NULL;
                bool accum = variant == 2;
                cpu_isa_set(PDL_ISA_SCALAR);
                panels_matmul(matmul_kernels_active(), pool, &scratch, want, out, x, rows, &t, b, accum);
                cpu_isa_set(best);
                /* the driver's walk: tiles of up to 4 rows x 3 panels */
                size_t pb = panels_bytes(dt, in);
                int np = (out + 15) / 16, last = out - (np - 1) * 16;
                for (int r0 = 0; r0 < rows; r0 += PDL_QPANEL_TILE_ROWS)
                    for (int g = 0; g < np; g += PDL_PANEL_TILE_PANELS) {
                        int nr = rows - r0 < PDL_QPANEL_TILE_ROWS ? rows - r0 : PDL_QPANEL_TILE_ROWS;
                        int ng = np - g < PDL_PANEL_TILE_PANELS ? np - g : PDL_PANEL_TILE_PANELS;
                        const uint8_t *pp = (const uint8_t *)buf + (size_t)g * pb;
                        float *yy = got + (size_t)r0 * out + g * 16;
                        const float *bb = b ? b + g * 16 : NULL;
                        int lc = g + ng == np ? last : 16;
                        if (kq)
                            (dt == PDL_DTYPE_Q4_K ? k4 : k6)(xk + (size_t)r0 * nbk, nbk, nr, pp, pb, ng, nbk, lc, yy, out,
                                                             bb, accum);
                        else
                            (dt == PDL_DTYPE_Q8_0 ? q8 : q4)(xq + (size_t)r0 * in, xd + (size_t)r0 * nb32,
                                                             xs + (size_t)r0 * nb32, in, nb32, nr, pp, pb, ng, nb32,
                                                             lc, yy, out, bb, accum);
                    }
                CHECK_MSG(memcmp(got, want, ny * sizeof *got) == 0, "%s %s %dx%dx%d variant %d: not the portable bits",
                          which, dtype_name(dt), rows, out, in, variant);
                checked++;
                free(w), free(wv), free(buf), free(x), free(bias), free(want), free(got);
                free(xq), free(xd), free(xs), free(xk);
            }
    fprintf(stderr, "  %d cases\n", checked);
    threadpool_free(pool);
}

/* The k-quant panel tiles of one type, called directly (so the AVX2
 * VPMADDUBSW tile runs even where the AVX2 family takes AVX-VNNI): each
 * tile this machine can run gives the portable panel tile's bytes on
 * random super-blocks (kind 0), every byte 0xFF (1) and every byte 0 (2),
 * with set_block writing each super-block's halves (and whatever else the
 * type's bounds need) over them, times random activations or ones that
 * quantize to +-127; tiles of 1 to 4 rows and 1 to 3 panels in the
 * driver's walk, with bias and accumulation; n_shapes of the shapes
 * below. Returns the cases run. */
typedef struct {
    const char *name;
    pdl_kpanel_fn fn;
    bool here;
} kpanel_tile_case;

static int check_kpanel_tiles(pdl_dtype dt, const kpanel_tile_case *tiles, size_t n_tiles,
                               void (*set_block)(uint8_t *blk, int kind), size_t n_shapes) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool != NULL);
    pdl_isa best = cpu_isa_best();
    int shapes[][3] = {{1, 17, 256}, {4, 48, 512}, {5, 49, 256}, {3, 40, 768}, {9, 100, 256}, {1, 80, 512}};
    REQUIRE(n_shapes <= sizeof shapes / sizeof shapes[0]);
    size_t block_bytes = dtype_row_bytes(dt, 256);
    int checked = 0;
    for (int kind = 0; kind < 3; kind++)
        for (size_t si = 0; si < n_shapes; si++)
            for (int variant = 0; variant < 3; variant++) {
                int rows = shapes[si][0], out = shapes[si][1], in = shapes[si][2], nbk = in / 256;
                size_t row_bytes = dtype_row_bytes(dt, in);
                uint8_t *w = malloc((size_t)out * row_bytes);
                REQUIRE(w);
                for (size_t i = 0; i < (size_t)out * row_bytes; i++) w[i] = kind == 0 ? rand_byte() : kind == 1 ? 0xFF : 0;
                for (int i = 0; i < out * nbk; i++) set_block(w + (size_t)i * block_bytes, kind);
                pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
                void *buf = panels_of(pool, &t);
                size_t ny = (size_t)rows * out;
                float *x = malloc((size_t)rows * in * sizeof *x), *bias = malloc((size_t)out * sizeof *bias);
                float *want = malloc(ny * sizeof *want), *got = malloc(ny * sizeof *got), *y0 = malloc(ny * sizeof *y0);
                pdl_block_q8k *xk = malloc((size_t)rows * nbk * sizeof *xk);
                REQUIRE(x && bias && want && got && y0 && xk);
                for (int r = 0; r < rows; r++) /* at the bounds: rows of +1, of -1, then alternating signs */
                    for (int k = 0; k < in; k++)
                        x[r * in + k] = kind == 0 ? frand()
                                        : r == 0  ? 1.0f
                                        : r == 1  ? -1.0f
                                                  : (((k >> (r % 3)) & 1) ? -1.0f : 1.0f);
                for (int i = 0; i < out; i++) bias[i] = frand();
                for (size_t i = 0; i < ny; i++) y0[i] = frand();
                for (int r = 0; r < rows; r++) kquant_quantize_row_q8_k(x + (size_t)r * in, in, xk + (size_t)r * nbk);
                const float *b = variant ? bias : NULL;
                bool accum = variant == 2;
                memcpy(want, y0, ny * sizeof *want);
                cpu_isa_set(PDL_ISA_SCALAR);
                panels_matmul(matmul_kernels_active(), pool, &scratch, want, out, x, rows, &t, b, accum);
                cpu_isa_set(best);
                size_t pb = panels_bytes(dt, in);
                int np = (out + 15) / 16, last = out - (np - 1) * 16;
                for (size_t fi = 0; fi < n_tiles; fi++) {
                    if (!tiles[fi].here || !tiles[fi].fn) continue;
                    memcpy(got, y0, ny * sizeof *got);
                    for (int r0 = 0; r0 < rows; r0 += PDL_QPANEL_TILE_ROWS)
                        for (int g = 0; g < np; g += PDL_PANEL_TILE_PANELS) {
                            int nr = rows - r0 < PDL_QPANEL_TILE_ROWS ? rows - r0 : PDL_QPANEL_TILE_ROWS;
                            int ng = np - g < PDL_PANEL_TILE_PANELS ? np - g : PDL_PANEL_TILE_PANELS;
                            tiles[fi].fn(xk + (size_t)r0 * nbk, nbk, nr, (const uint8_t *)buf + (size_t)g * pb, pb, ng,
                                         nbk, g + ng == np ? last : 16, got + (size_t)r0 * out + g * 16, out,
                                         b ? b + g * 16 : NULL, accum);
                        }
                    CHECK_MSG(memcmp(got, want, ny * sizeof *got) == 0,
                              "%s %s tile, weights %d, %dx%dx%d variant %d: not the portable bits", dtype_name(dt),
                              tiles[fi].name,
                              kind, rows, out, in, variant);
                    checked++;
                }
                free(w), free(buf), free(x), free(bias), free(want), free(got), free(y0), free(xk);
            }
    fprintf(stderr, "  %d cases\n", checked);
    threadpool_free(pool);
    return checked;
}

static void q5_k_block(uint8_t *blk, int kind) {
    uint16_t d = fp16_f32_to_f16((0.5f + (frand() + 1.0f) / 2.0f) / 500.0f);
    uint16_t m = fp16_f32_to_f16((frand() + 1.0f) / 200.0f);
    memcpy(blk, &d, 2), memcpy(blk + 2, &m, 2);
    if (kind) memset(blk + 4, 0xFF, 12); /* scales and mins 63 */
}

/* Every Q5_K panel tile this machine can run, called directly (so the
 * AVX2 VPMADDUBSW tile runs even where the AVX2 family takes AVX-VNNI):
 * AVX-512 VNNI, AVX-VNNI, its EVEX twin and AVX2 give the portable panel
 * tile's bytes on random super-blocks and at the integer sums' bounds
 * (every value 31 with scales and mins 63, or every value 0, times
 * activations that quantize to +-127: the AVX2 tile's int16 sums would
 * wrap without their fold after 4 steps), tiles of 1 to 4 rows and 1 to
 * 3 panels in the driver's walk, with bias and accumulation. */
static void test_q5_k_tiles_give_the_portable_bits(void) {
    const pdl_cpu_features *f = cpu_features_get();
    bool avx2 = f->avx2 && f->fma && f->f16c;
    kpanel_tile_case tiles[] = {
        {"AVX-512 VNNI", kpanel_tile_q5_k_vnni, cpu_isa_supported(PDL_ISA_AVX512) && f->avx512vnni},
        {"AVX-VNNI", kpanel_tile_q5_k_avxvnni, avx2 && f->avxvnni},
        {"EVEX twin", test_kpanel_q5_k_vnni256_evex, avx2 && f->avx512vnni && f->avx512vl},
        {"AVX2", kpanel_tile_q5_k_avx2, avx2},
    };
    check_kpanel_tiles(PDL_DTYPE_Q5_K, tiles, sizeof tiles / sizeof tiles[0], q5_k_block, 5);
}

static void q3_k_block(uint8_t *blk, int kind) {
    (void)kind;
    uint16_t d = fp16_f32_to_f16((0.5f + (frand() + 1.0f) / 2.0f) / 500.0f);
    memcpy(blk + 108, &d, 2);
}

/* Every Q3_K panel tile this machine can run, called directly, as
 * Q3_K's: AVX-512 VNNI, AVX-VNNI, its EVEX twin and AVX2 give the portable
 * panel tile's bytes on random super-blocks and at the integer sums'
 * bounds (every value 3 with scales 31, or every value -4 with scales -32,
 * times activations that quantize to +-127: the AVX2 tile's int16 group
 * sums of q + 4 reach 7112 with all 7s), tiles of 1 to 4 rows and 1 to 3
 * panels in the driver's walk, with bias and accumulation. */
static void test_q3_k_tiles_give_the_portable_bits(void) {
    const pdl_cpu_features *f = cpu_features_get();
    bool avx2 = f->avx2 && f->fma && f->f16c;
    kpanel_tile_case tiles[] = {
        {"AVX-512 VNNI", kpanel_tile_q3_k_vnni, cpu_isa_supported(PDL_ISA_AVX512) && f->avx512vnni},
        {"AVX-VNNI", kpanel_tile_q3_k_avxvnni, avx2 && f->avxvnni},
        {"EVEX twin", test_kpanel_q3_k_vnni256_evex, avx2 && f->avx512vnni && f->avx512vl},
        {"AVX2", kpanel_tile_q3_k_avx2, avx2},
    };
    check_kpanel_tiles(PDL_DTYPE_Q3_K, tiles, sizeof tiles / sizeof tiles[0], q3_k_block, 5);
}

static void q2_k_block(uint8_t *blk, int kind) {
    (void)kind;
    uint16_t d = fp16_f32_to_f16((0.5f + (frand() + 1.0f) / 2.0f) / 500.0f);
    uint16_t m = fp16_f32_to_f16((frand() + 1.0f) / 200.0f);
    memcpy(blk + 80, &d, 2), memcpy(blk + 82, &m, 2);
}

/* Every Q2_K panel tile this machine can run, called directly, as
 * Q2_K's: AVX-512 VNNI, AVX-VNNI, its EVEX twin and AVX2 give the portable
 * panel tile's bytes on random super-blocks and at the integer sums'
 * bounds (every value 3 with scales 31, or every value -4 with scales -32,
 * times activations that quantize to +-127: the AVX2 tile's int16 group
 * sums of q + 4 reach 7112 with all 7s), tiles of 1 to 4 rows and 1 to 3
 * panels in the driver's walk, with bias and accumulation. */
static void test_q2_k_tiles_give_the_portable_bits(void) {
    const pdl_cpu_features *f = cpu_features_get();
    bool avx2 = f->avx2 && f->fma && f->f16c;
    kpanel_tile_case tiles[] = {
        {"AVX-512 VNNI", kpanel_tile_q2_k_vnni, cpu_isa_supported(PDL_ISA_AVX512) && f->avx512vnni},
        {"AVX-VNNI", kpanel_tile_q2_k_avxvnni, avx2 && f->avxvnni},
        {"EVEX twin", test_kpanel_q2_k_vnni256_evex, avx2 && f->avx512vnni && f->avx512vl},
        {"AVX2", kpanel_tile_q2_k_avx2, avx2},
    };
    check_kpanel_tiles(PDL_DTYPE_Q2_K, tiles, sizeof tiles / sizeof tiles[0], q2_k_block, 5);
}

static void iq4_xs_block(uint8_t *blk, int kind) {
    (void)kind;
    uint16_t d = fp16_f32_to_f16((0.5f + (frand() + 1.0f) / 2.0f) / 500.0f);
    memcpy(blk, &d, 2);
}

/* Every IQ4_XS panel tile this machine can run, called directly (so the
 * AVX2 VPMADDUBSW tile runs even where the AVX2 family takes AVX-VNNI):
 * AVX-512 VNNI, AVX-VNNI, its EVEX twin and AVX2 give the portable panel
 * tile's bytes on random super-blocks and at the integer sums' bounds
 * (every code 15 (113) with every scale +31, or every code 0 (-127) with
 * every scale -32, times activations that quantize to +-127: the AVX2
 * tile's pair sums reach 2 x 127 x 127, the VNNI tiles' values + 128 are
 * 241 and 1), tiles of 1 to 4 rows and 1 to 3 panels in the driver's
 * walk, with bias and accumulation. */
static void test_iq4_xs_tiles_give_the_portable_bits(void) {
    const pdl_cpu_features *f = cpu_features_get();
    bool avx2 = f->avx2 && f->fma && f->f16c;
    kpanel_tile_case tiles[] = {
        {"AVX-512 VNNI", kpanel_tile_iq4_xs_vnni, cpu_isa_supported(PDL_ISA_AVX512) && f->avx512vnni},
        {"AVX-VNNI", kpanel_tile_iq4_xs_avxvnni, avx2 && f->avxvnni},
        {"EVEX twin", test_kpanel_iq4_xs_vnni256_evex, avx2 && f->avx512vnni && f->avx512vl},
        {"AVX2", kpanel_tile_iq4_xs_avx2, avx2},
    };
    int checked = check_kpanel_tiles(PDL_DTYPE_IQ4_XS, tiles, sizeof tiles / sizeof tiles[0], iq4_xs_block, 6);
    CHECK(checked > 0 || !avx2);
}

static void tq_block_d(uint8_t *blk, size_t bb) {
    uint16_t d = fp16_f32_to_f16((0.5f + (frand() + 1.0f) / 2.0f) / 500.0f);
    memcpy(blk + bb - 2, &d, 2);
}
static void tq2_0_block(uint8_t *blk, int kind) { (void)kind, tq_block_d(blk, 66); }
static void tq1_0_block(uint8_t *blk, int kind) { (void)kind, tq_block_d(blk, 54); }

/* Every TQ2_0 and TQ1_0 panel tile this machine can run (one layout and
 * one tile for both), called directly: AVX-512 VNNI, AVX-VNNI, its EVEX
 * twin and AVX2 give the portable panel tile's bytes on random
 * super-blocks and at the integer sums' bounds (TQ2_0 bytes 0xFF: every
 * code 3, which writers never use but the file can hold, TQ1_0's every
 * trit 2; or every code 0, times activations that quantize to +-127: the
 * AVX2 tile's int16 sums over half a super-block reach 24384), tiles of 1
 * to 4 rows and 1 to 3 panels in the driver's walk, with bias and
 * accumulation. */
static void test_ternary_tiles_give_the_portable_bits(void) {
    const pdl_cpu_features *f = cpu_features_get();
    bool avx2 = f->avx2 && f->fma && f->f16c;
    kpanel_tile_case tiles[] = {
        {"AVX-512 VNNI", kpanel_tile_tq_vnni, cpu_isa_supported(PDL_ISA_AVX512) && f->avx512vnni},
        {"AVX-VNNI", kpanel_tile_tq_avxvnni, avx2 && f->avxvnni},
        {"EVEX twin", test_kpanel_tq_vnni256_evex, avx2 && f->avx512vnni && f->avx512vl},
        {"AVX2", kpanel_tile_tq_avx2, avx2},
    };
    int checked = check_kpanel_tiles(PDL_DTYPE_TQ2_0, tiles, sizeof tiles / sizeof tiles[0], tq2_0_block, 6);
    checked += check_kpanel_tiles(PDL_DTYPE_TQ1_0, tiles, sizeof tiles / sizeof tiles[0], tq1_0_block, 6);
    CHECK(checked > 0 || !avx2);
}

/* A random IQ4_NL matrix: codes uniform, halves d 0.002 .. 0.012 (make_qmatrix). */
static void *make_iq4_nl_matrix(int out, int in, float **vals) { return make_qmatrix(PDL_DTYPE_IQ4_NL, out, in, vals); }

/* A panel tile of 32-blocks and the build it is from. */
typedef struct named_qtile {
    const char *name;
    pdl_qpanel_fn fn;
} named_qtile;

/* One matrix (w, dt) of 32-blocks run through each of the given panel
 * tiles directly, rows times activations that are random (patterns 0 and
 * 3) or all +1, all -1, then alternating signs (1 and 2), with a bias
 * (variants 1, 2) and accumulation (2): each gives the portable panels'
 * bits. Returns the cases checked. */
static int check_qpanel_tiles_on(pdl_threadpool *pool, pdl_dtype dt, uint8_t *w, int rows, int out, int in,
                                 int pattern, int variant, const named_qtile *tiles, int n_tiles) {
    pdl_isa best = cpu_isa_best();
    int nb32 = in / 32, checked = 0;
    pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
    void *buf = panels_of(pool, &t);
    size_t ny = (size_t)rows * out;
    float *x = malloc((size_t)rows * in * sizeof *x), *bias = malloc((size_t)out * sizeof *bias);
    float *y0 = malloc(ny * sizeof *y0), *want = malloc(ny * sizeof *want), *got = malloc(ny * sizeof *got);
    int8_t *xq = malloc((size_t)rows * in);
    float *xd = malloc((size_t)rows * nb32 * sizeof *xd);
    int32_t *xs = malloc((size_t)rows * nb32 * sizeof *xs);
    REQUIRE(x && bias && y0 && want && got && xq && xd && xs);
    for (int r = 0; r < rows; r++) /* pattern rows: all +1, all -1, then alternating */
        for (int k = 0; k < in; k++)
            x[r * in + k] = !pattern || pattern == 3 ? frand()
                            : r == 0                       ? 1.0f
                            : r == 1                       ? -1.0f
                            : (k >> (r - 2)) & 1           ? -1.0f
                                                           : 1.0f;
    for (int i = 0; i < out; i++) bias[i] = frand();
    for (size_t i = 0; i < ny; i++) y0[i] = frand();
    for (int r = 0; r < rows; r++)
        matmul_quantize_row_q8_0_sums(x + (size_t)r * in, in, xq + (size_t)r * in, xd + (size_t)r * nb32,
                                      xs + (size_t)r * nb32);
    const float *b = variant ? bias : NULL;
    bool accum = variant == 2;
    memcpy(want, y0, ny * sizeof *want);
    cpu_isa_set(PDL_ISA_SCALAR);
    panels_matmul(matmul_kernels_active(), pool, &scratch, want, out, x, rows, &t, b, accum);
    cpu_isa_set(best);
    size_t pb = panels_bytes(dt, in);
    int np = (out + 15) / 16, last = out - (np - 1) * 16;
    for (int ti = 0; ti < n_tiles; ti++) {
        memcpy(got, y0, ny * sizeof *got);
        for (int r0 = 0; r0 < rows; r0 += PDL_QPANEL_TILE_ROWS)
            for (int g = 0; g < np; g += PDL_PANEL_TILE_PANELS) {
                int nr = rows - r0 < PDL_QPANEL_TILE_ROWS ? rows - r0 : PDL_QPANEL_TILE_ROWS;
                int ng = np - g < PDL_PANEL_TILE_PANELS ? np - g : PDL_PANEL_TILE_PANELS;
                tiles[ti].fn(xq + (size_t)r0 * in, xd + (size_t)r0 * nb32, xs + (size_t)r0 * nb32, in, nb32,
                             nr, (const uint8_t *)buf + (size_t)g * pb, pb, ng, nb32,
                             g + ng == np ? last : 16, got + (size_t)r0 * out + g * 16, out,
                             b ? b + g * 16 : NULL, accum);
            }
        CHECK_MSG(memcmp(got, want, ny * sizeof *got) == 0,
                  "%s %s %dx%dx%d pattern %d variant %d: not the portable bits", tiles[ti].name,
                  dtype_name(dt), rows, out, in, pattern, variant);
        checked++;
    }
    free(buf), free(x), free(bias), free(y0), free(want), free(got);
    free(xq), free(xd), free(xs);
    return checked;
}

/* The tiles this CPU runs of the four builds of one panel tile (NULL: not
 * built), named on stderr. */
static int pick_qpanel_tiles(pdl_dtype dt, pdl_qpanel_fn vnni, pdl_qpanel_fn avxvnni, pdl_qpanel_fn evex,
                             pdl_qpanel_fn avx2, named_qtile tiles[4]) {
    const pdl_cpu_features *f = cpu_features_get();
    int n_tiles = 0;
    if (f->avx512vnni && vnni) tiles[n_tiles++] = (named_qtile){"AVX-512 VNNI", vnni};
    if (f->avxvnni && avxvnni) tiles[n_tiles++] = (named_qtile){"AVX-VNNI", avxvnni};
    if (f->avx512vnni && f->avx512vl && f->avx2 && f->fma && f->f16c && evex)
        tiles[n_tiles++] = (named_qtile){"EVEX twin", evex};
    if (f->avx2 && f->fma && f->f16c && avx2) tiles[n_tiles++] = (named_qtile){"AVX2", avx2};
    fprintf(stderr, "  %s tiles here:", dtype_name(dt));
    for (int i = 0; i < n_tiles; i++) fprintf(stderr, " %s", tiles[i].name);
    fprintf(stderr, "%s\n", n_tiles ? "" : " none (the portable one only)");
    return n_tiles;
}

/* Every MXFP4 or IQ4_NL panel tile this machine can run, called directly
 * (so the AVX2 VPMADDUBSW tile runs even where the AVX2 family would take
 * AVX-VNNI): AVX-512 VNNI, AVX-VNNI, its EVEX twin and AVX2 give the
 * portable panel tile's bytes, on random blocks (MXFP4: subnormal scales
 * among them, and blocks whose scales are all 2^-128 .. 2^-125; IQ4_NL:
 * blocks whose halves are all subnormal) and on the integer sums' bounds
 * (every weight at the top or the bottom of its values, MXFP4 6.0 / -6.0,
 * IQ4_NL 113 / -127, times activations that quantize to +-127: the AVX2
 * MXFP4 tile's int16 sums would wrap without their fold every 4 steps,
 * IQ4_NL's without the sign trick), tiles of 1 to 4 rows and 1 to 3
 * panels, with bias and accumulation. */
static void check_4bit_table_tiles(pdl_dtype dt) {
    fp16_init();
    bool mx = dt == PDL_DTYPE_MXFP4;
    named_qtile tiles[4];
    int n_tiles = pick_qpanel_tiles(dt, mx ? qpanel_tile_mxfp4_vnni : qpanel_tile_iq4_nl_vnni,
                                    mx ? qpanel_tile_mxfp4_avxvnni : qpanel_tile_iq4_nl_avxvnni,
                                    mx ? test_qpanel_mxfp4_vnni256_evex : test_qpanel_iq4_nl_vnni256_evex,
                                    mx ? qpanel_tile_mxfp4_avx2 : qpanel_tile_iq4_nl_avx2, tiles);
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool != NULL);
    int shapes[][3] = {{1, 17, 256}, {4, 48, 512}, {5, 49, 96}, {3, 40, 768}, {9, 100, 256}, {2, 33, 512}};
    size_t bb = mx ? 17 : 18, hdr = mx ? 1 : 2;
    int checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int pattern = 0; pattern < 4; pattern++) /* random; every weight the top value; the bottom; tiny scales */
            for (int variant = 0; variant < 3; variant++) {
                int rows = shapes[si][0], out = shapes[si][1], in = shapes[si][2], nb32 = in / 32;
                float *wv;
                uint8_t *w = mx ? make_mxfp4_matrix(out, in, &wv) : make_iq4_nl_matrix(out, in, &wv);
                for (int i = 0; i < out * nb32; i++) {
                    uint8_t top = mx ? 0x77 : 0xFF, bottom = mx ? 0xFF : 0x00;
                    if (pattern == 1 || pattern == 2) memset(w + (size_t)i * bb + hdr, pattern == 1 ? top : bottom, 16);
                    if (pattern == 3 && mx) w[(size_t)i * 17] = (uint8_t)(i % 4); /* subnormal 2^-128, 2^-127; 2^-126, 2^-125 */
                    if (pattern == 3 && !mx) { /* subnormal halves 2^-24 .. 4 x 2^-24 */
                        uint16_t d = (uint16_t)(1 + i % 4);
                        memcpy(w + (size_t)i * 18, &d, 2);
                    }
                }
                checked += check_qpanel_tiles_on(pool, dt, w, rows, out, in, pattern, variant, tiles, n_tiles);
                free(w), free(wv);
            }
    fprintf(stderr, "  %d cases\n", checked);
    threadpool_free(pool);
}

static void test_mxfp4_tiles_give_the_portable_bits(void) { check_4bit_table_tiles(PDL_DTYPE_MXFP4); }

static void test_iq4_nl_tiles_give_the_portable_bits(void) { check_4bit_table_tiles(PDL_DTYPE_IQ4_NL); }

/* The Q5_0 / Q4_1 / Q5_1 panel layout, written out here: Q4_0's pairs
 * with 320 (Q5_0, Q4_1) or 384 (Q5_1) bytes of quants per block: the
 * file's nibble bytes as Q4_0's, then (Q5_0, Q5_1) row c's fifth bits at
 * 256 + 4c, byte i bit j the fifth bit of element 4j + i, then (Q4_1,
 * Q5_1) row c's m at 256 (Q4_1) or 320 (Q5_1) + 2c; the 16 scales the
 * file's d. 3 blocks and 19 rows, as test_quantized_panel_layout: a
 * shifted offset or bit reads a neighbour's. */
static void test_legacy_panel_layout(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool != NULL);
    int out = 19, in = 96, nb = 3;
    pdl_dtype types[] = {PDL_DTYPE_Q5_0, PDL_DTYPE_Q4_1, PDL_DTYPE_Q5_1};
    for (int ti = 0; ti < 3; ti++) {
        pdl_dtype dt = types[ti];
        size_t qb = dt == PDL_DTYPE_Q5_1 ? 384 : 320, bb = legacy_bb(dt), pair = 2 * qb + 64;
        size_t min_at = dt == PDL_DTYPE_Q5_1 ? 320 : 256;
        float *wv;
        uint8_t *w = make_qmatrix(dt, out, in, &wv);
        pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
        uint8_t *buf = panels_of(pool, &t);
        size_t pb = panels_bytes(dt, in);
        CHECK_EQ_INT((int)pb, (int)(2 * pair));
        int bad = 0;
        for (int o = 0; o < 32; o++)
            for (int b = 0; b < 4; b++) { /* block 3: the padding of the second pair */
                const uint8_t *pp = buf + (size_t)(o / 16) * pb + (size_t)(b / 2) * pair;
                const uint8_t *pq = pp + (b % 2) * qb;
                int c = o % 16;
                bool real = o < out && b < nb;
                const uint8_t *blk = w + ((size_t)o * nb + b) * bb;
                uint16_t h;
                memcpy(&h, pp + 2 * qb + (b % 2) * 32 + c * 2, 2);
                if (h != (real ? (uint16_t)(blk[0] | blk[1] << 8) : 0)) bad++;
                for (int q = 0; q < 4; q++)
                    for (int i = 0; i < 4; i++)
                        if (pq[q * 64 + c * 4 + i] != (real ? blk[legacy_qs(dt) + 4 * q + i] : 0)) bad++;
                if (dt != PDL_DTYPE_Q4_1)
                    for (int i = 0; i < 4; i++)
                        for (int j = 0; j < 8; j++) {
                            int got = (pq[256 + c * 4 + i] >> j) & 1;
                            int want = real ? legacy_code(dt, blk, 4 * j + i) >> 4 : 0;
                            if (got != want) bad++;
                        }
                if (dt != PDL_DTYPE_Q5_0) {
                    memcpy(&h, pq + min_at + c * 2, 2);
                    if (h != (real ? (uint16_t)(blk[2] | blk[3] << 8) : 0)) bad++;
                }
            }
        CHECK_MSG(bad == 0, "%s: %d bytes misplaced", dtype_name(dt), bad);
        free(w), free(wv), free(buf);
    }
    threadpool_free(pool);
}

/* Every Q5_0 / Q4_1 / Q5_1 panel tile this machine can run, called
 * directly (so the AVX2 VPMADDUBSW tile runs even where the AVX2 family
 * would take AVX-VNNI): AVX-512 VNNI, AVX-VNNI, its EVEX twin and AVX2
 * give the portable panel tile's bytes, on random blocks, on the integer
 * sums' bounds (every code 31 (Q4_1 15), or 0, times activations that
 * quantize to +-127: the AVX2 tile's int16 sums of Q5 codes would wrap
 * without their fold after 4 of a block's 8 products) and on blocks with
 * subnormal d and m, tiles of 1 to 4 rows and 1 to 3 panels, with bias
 * and accumulation. */
static void check_legacy_tiles(pdl_dtype dt) {
    fp16_init();
    int k = dt == PDL_DTYPE_Q5_0 ? 0 : dt == PDL_DTYPE_Q4_1 ? 1 : 2;
    const pdl_qpanel_fn vnni[3] = {qpanel_tile_q5_0_vnni, qpanel_tile_q4_1_vnni, qpanel_tile_q5_1_vnni};
    const pdl_qpanel_fn avxvnni[3] = {qpanel_tile_q5_0_avxvnni, qpanel_tile_q4_1_avxvnni, qpanel_tile_q5_1_avxvnni};
    const pdl_qpanel_fn evex[3] = {test_qpanel_q5_0_vnni256_evex, test_qpanel_q4_1_vnni256_evex,
                                   test_qpanel_q5_1_vnni256_evex};
    const pdl_qpanel_fn avx2[3] = {qpanel_tile_q5_0_avx2, qpanel_tile_q4_1_avx2, qpanel_tile_q5_1_avx2};
    named_qtile tiles[4];
    int n_tiles = pick_qpanel_tiles(dt, vnni[k], avxvnni[k], evex[k], avx2[k], tiles);
    pdl_threadpool *pool = threadpool_new(1);
    REQUIRE(pool != NULL);
    int shapes[][3] = {{1, 17, 256}, {4, 48, 512}, {5, 49, 96}, {3, 40, 768}, {9, 100, 256}, {2, 33, 512}};
    size_t bb = legacy_bb(dt);
    int checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int pattern = 0; pattern < 4; pattern++) /* random; every code the top; every code 0; tiny halves */
            for (int variant = 0; variant < 3; variant++) {
                int rows = shapes[si][0], out = shapes[si][1], in = shapes[si][2], nb32 = in / 32;
                float *wv;
                uint8_t *w = make_qmatrix(dt, out, in, &wv);
                for (int i = 0; i < out * nb32; i++) {
                    uint8_t *blk = w + (size_t)i * bb;
                    size_t hdr = dt == PDL_DTYPE_Q5_0 ? 2 : 4;
                    if (pattern == 1 || pattern == 2) memset(blk + hdr, pattern == 1 ? 0xFF : 0x00, bb - hdr);
                    if (pattern == 3) { /* subnormal halves: d 2^-24 .. 4 x 2^-24, m -2^-24 .. */
                        uint16_t d = (uint16_t)(1 + i % 4), m = (uint16_t)(0x8000 | (1 + i % 3));
                        memcpy(blk, &d, 2);
                        if (dt != PDL_DTYPE_Q5_0) memcpy(blk + 2, &m, 2);
                    }
                }
                checked += check_qpanel_tiles_on(pool, dt, w, rows, out, in, pattern, variant, tiles, n_tiles);
                free(w), free(wv);
            }
    fprintf(stderr, "  %d cases\n", checked);
    threadpool_free(pool);
}

static void test_legacy_tiles_give_the_portable_bits(void) {
    check_legacy_tiles(PDL_DTYPE_Q5_0);
    check_legacy_tiles(PDL_DTYPE_Q4_1);
    check_legacy_tiles(PDL_DTYPE_Q5_1);
}

/* The decode tiles' prefetch distance is whole super-blocks, the fewest
 * that reach PDL_PANEL_AHEAD: a tile prefetching each line it reads at
 * that distance then reaches every line of the blocks ahead (at a fixed
 * 4096 bytes, 5 of Q5_K's 45 lines were never prefetched). */
static void test_panel_prefetch_distance_is_whole_blocks(void) {
    const size_t blocks[] = {PDL_Q4K_PANEL_BLOCK, PDL_Q5K_PANEL_BLOCK, PDL_Q6K_PANEL_BLOCK, PDL_Q3K_PANEL_BLOCK,
                             PDL_Q2K_PANEL_BLOCK, PDL_IQ4XS_PANEL_BLOCK, PDL_TQ_PANEL_BLOCK};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        size_t b = blocks[i], a = panel_ahead(b);
        CHECK_MSG(a % b == 0 && a >= PDL_PANEL_AHEAD && a < PDL_PANEL_AHEAD + b, "block %zu: distance %zu", b, a);
        CHECK_MSG(b % 64 == 0, "block %zu is not whole 64-byte lines", b);
    }
}

/* The decode tiles' prefetch of the pair-layout panels, walked over 12
 * pairs as a tile walks them (each block's steps, then the next block):
 * the lines it reaches are exactly every line of those pairs, whole pairs
 * (at least PDL_PANEL_AHEAD bytes) later, and no other. A distance that
 * is not whole pairs, or a step's line, a fifth-bit or m line or the
 * scales' line left out, fails. */
static const uint8_t *prefetch_base;
static unsigned char prefetched[64];
static int prefetch_stray; /* prefetches outside the lines above */
static void record_prefetch(const void *p) {
    ptrdiff_t o = (const uint8_t *)p - prefetch_base;
    if (o < 0 || o / 64 >= (ptrdiff_t)sizeof prefetched * 8) {
        prefetch_stray++;
        return;
    }
    prefetched[o / 512] |= (unsigned char)(1u << (o / 64 % 8));
}

static void test_pair_prefetch_reaches_every_line(void) {
    const struct {
        size_t qb;
        int steps;
        const char *types;
    } layouts[] = {{256, 4, "Q4_0, MXFP4, IQ4_NL"}, {512, 8, "Q8_0"}, {320, 4, "Q5_0, Q4_1"}, {384, 4, "Q5_1"}};
    static uint8_t panel[64 * 8 * sizeof prefetched];
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        const size_t qb = layouts[i].qb, pair = qpanel_pair_bytes(qb), pairs = 12;
        const size_t lines = (sizeof prefetched) * 8;
        size_t first = 0; /* the first line the walk reaches */
        memset(prefetched, 0, sizeof prefetched);
        prefetch_stray = 0;
        prefetch_base = panel;
        for (int64_t b = 0; b < (int64_t)(2 * pairs); b++)
            for (int q = 0; q < layouts[i].steps; q++) qpanel_prefetch_step(panel + qpanel_quants_at(qb, b), qb, b, q,
                                                                             layouts[i].steps);
        while (first < lines && !(prefetched[first / 8] >> (first % 8) & 1)) first++;
        size_t ahead = first * 64;
        CHECK_MSG(prefetch_stray == 0, "%s: %d prefetches off the lines", layouts[i].types, prefetch_stray);
        CHECK_MSG(ahead % pair == 0 && ahead >= PDL_PANEL_AHEAD && ahead < PDL_PANEL_AHEAD + pair,
                  "%s: prefetched %zu bytes ahead, pairs are %zu", layouts[i].types, ahead, pair);
        for (size_t l = 0; l < lines; l++) {
            bool want = l * 64 >= ahead && l * 64 < ahead + pairs * pair;
            CHECK_MSG((bool)(prefetched[l / 8] >> (l % 8) & 1) == want, "%s: line %zu (pair %zu, line %zu of it) %s",
                      layouts[i].types, l, l * 64 / pair, l * 64 % pair / 64, want ? "not reached" : "reached");
        }
    }
}

int main(void) {
    RUN(test_panel_layout);
    RUN(test_quantized_panel_layout);
    RUN(test_legacy_panel_layout);
    RUN(test_panels_follow_the_documented_order);
    RUN(test_quantized_panels_follow_the_documented_order);
    RUN(test_shared_activations_give_each_matmuls_bytes);
    RUN(test_k_quant_panels_give_the_reference_dots);
    RUN(test_gated_matmul_gives_the_unfused_bytes);
    RUN(test_matmuls_report_scratch_they_cannot_have);
    RUN(test_integer_sums_at_their_bounds);
    RUN(test_vnni256_tiles_give_the_portable_bits);
    RUN(test_mxfp4_tiles_give_the_portable_bits);
    RUN(test_iq4_nl_tiles_give_the_portable_bits);
    RUN(test_q5_k_tiles_give_the_portable_bits);
    RUN(test_q3_k_tiles_give_the_portable_bits);
    RUN(test_q2_k_tiles_give_the_portable_bits);
    RUN(test_iq4_xs_tiles_give_the_portable_bits);
    RUN(test_ternary_tiles_give_the_portable_bits);
    RUN(test_legacy_tiles_give_the_portable_bits);
    RUN(test_panel_prefetch_distance_is_whole_blocks);
    RUN(test_pair_prefetch_reaches_every_line);
    scratch_free(&scratch);
    return test_summary();
}
