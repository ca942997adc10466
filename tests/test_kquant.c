/*
 * test_kquant.c - the Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / TQ2_0 / TQ1_0 x Q8_K kernels
 * (kernels/kquant.h): Q8_K
 * activation quantization on a hand-checked block, the portable dots
 * against float64 sums of the dequantized weights, every SIMD tile against
 * the portable dot bit for bit, and batch invariance through matmul_run on
 * every instruction set the CPU has.
 */
#include <stdint.h>
#include <string.h>

#include "format/tensor.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/kquant.h"
#include "kernels/matmul.h"
#include "kernels/matmul_table.h"
#include "test_util.h"

/* the matmuls' scratch (scratch.h), shared by every test here */
static pdl_scratch scratch;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}
static float frand(void) { return (float)((rnd32() >> 8) / (double)(1u << 24)) * 2.0f - 1.0f; } /* [-1, 1) */

/* Random Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / TQ2_0 / TQ1_0 rows: every byte random (every bit
 * pattern is a valid quant or scale; TQ2_0's unused code 3 reads as +2, as
 * the dequantizer has it), the f16 scales small and of either sign. */
static uint8_t *random_rows(pdl_dtype dt, int rows, int in) {
    size_t rb = dtype_row_bytes(dt, in), bb = dtype_block_bytes(dt);
    uint8_t *w = malloc(rb * (size_t)rows);
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (uint8_t)rnd32();
    for (size_t b = 0; b < rb * (size_t)rows / bb; b++) {
        uint8_t *blk = w + b * bb;
        bool q6 = dt == PDL_DTYPE_Q6_K, q3 = dt == PDL_DTYPE_Q3_K, q2 = dt == PDL_DTYPE_Q2_K;
        bool iq = dt == PDL_DTYPE_IQ4_XS;
        /* Q4_K, Q5_K: d and dmin first; IQ4_XS: d first */
        int offs[2] = {q6 ? 208 : q3 ? 108 : q2 ? 80 : 0, q6 || q3 || iq ? -1 : q2 ? 82 : 2};
        if (dt == PDL_DTYPE_TQ2_0 || dt == PDL_DTYPE_TQ1_0) offs[0] = (int)bb - 2, offs[1] = -1; /* d last */
        for (int h = 0; h < 2; h++)
            if (offs[h] >= 0) {
                uint16_t v = fp16_f32_to_f16(0.003f * frand());
                memcpy(blk + offs[h], &v, 2);
            }
    }
    return w;
}

/* Activations with a spread of magnitudes per 256-block. */
static float *random_x(int rows, int in) {
    float *x = malloc((size_t)rows * in * sizeof *x);
    for (int i = 0; i < rows * in; i++) x[i] = frand() * (1.0f + (float)((i / 256) % 5));
    return x;
}

static float kq_dot(pdl_dtype dt, const uint8_t *w, const pdl_block_q8k *x, int64_t nb) {
    return dt == PDL_DTYPE_Q4_K     ? kquant_dot_q4_k_q8_k(w, x, nb)
           : dt == PDL_DTYPE_Q5_K   ? kquant_dot_q5_k_q8_k(w, x, nb)
           : dt == PDL_DTYPE_Q3_K   ? kquant_dot_q3_k_q8_k(w, x, nb)
           : dt == PDL_DTYPE_Q2_K   ? kquant_dot_q2_k_q8_k(w, x, nb)
           : dt == PDL_DTYPE_IQ4_XS ? kquant_dot_iq4_xs_q8_k(w, x, nb)
           : dt == PDL_DTYPE_TQ2_0  ? kquant_dot_tq2_0_q8_k(w, x, nb)
           : dt == PDL_DTYPE_TQ1_0  ? kquant_dot_tq1_0_q8_k(w, x, nb)
                                    : kquant_dot_q6_k_q8_k(w, x, nb);
}

/* A hand-worked block: x[i] = (i - 128) / 4, so amax = 32, d = 32/127 and
 * q_i = nearest((i - 128) * 127/128) = nearest(k - k/128) with k = i - 128. */
static void test_q8_k_quantizes_a_hand_checked_block(void) {
    float x[512];
    for (int i = 0; i < 256; i++) x[i] = (float)(i - 128) * 0.25f;
    for (int i = 256; i < 512; i++) x[i] = 0.0f; /* second block: all zero */
    pdl_block_q8k y[2];
    memset(y, 0x55, sizeof y);
    kquant_quantize_row_q8_k(x, 512, y);
    CHECK(y[0].d == 32.0f / 127.0f);
    CHECK_EQ_INT(y[0].qs[0], -127);   /* k = -128: -127 exactly */
    CHECK_EQ_INT(y[0].qs[1], -126);   /* -127 * 127/128 = -126.008 */
    CHECK_EQ_INT(y[0].qs[64], -64);   /* -64 * 127/128 = -63.5: tie, to even */
    CHECK_EQ_INT(y[0].qs[128], 0);
    CHECK_EQ_INT(y[0].qs[129], 1);
    CHECK_EQ_INT(y[0].qs[192], 64);   /* 63.5: tie, to even */
    CHECK_EQ_INT(y[0].qs[193], 64);   /* 64.49 */
    CHECK_EQ_INT(y[0].qs[255], 126);  /* 127 * 127/128 = 126.008 */
    /* k = -128..-113 round to k + 1 (|k|/128 > 0.5): -127..-112 */
    CHECK_EQ_INT(y[0].bsum16[0], -1912);
    /* k = -112..-97 also round up: -111..-96 */
    CHECK_EQ_INT(y[0].bsum16[1], -1656);
    CHECK_EQ_INT(y[0].bsum32[0], -3568);
    /* k = 0..15 round to k: 0 + 1 + ... + 15 */
    CHECK_EQ_INT(y[0].bsum16[8], 120);
    int bad = 0;
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += y[0].qs[16 * g + i];
        if (s != y[0].bsum16[g]) bad++;
    }
    for (int j = 0; j < 8; j++)
        if (y[0].bsum32[j] != y[0].bsum16[2 * j] + y[0].bsum16[2 * j + 1]) bad++;
    CHECK_EQ_INT(bad, 0);
    CHECK(y[1].d == 0.0f);
    for (int i = 0; i < 256; i++) bad += y[1].qs[i] != 0;
    for (int g = 0; g < 16; g++) bad += y[1].bsum16[g] != 0;
    CHECK_EQ_INT(bad, 0);
    /* random blocks against the definition written with fabsf and lrintf;
     * every other one has amax = 127 and half-integer values: exact ties */
    for (int t = 0; t < 200; t++) {
        float amax = 0.0f;
        for (int i = 0; i < 256; i++) {
            x[i] = t % 2 ? frand() * 3.0f : (float)((int)(frand() * 254.0f)) * 0.5f;
            if (t % 2 == 0 && i == 7) x[i] = -127.0f;
            amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        }
        kquant_quantize_row_q8_k(x, 256, y);
        float iscale = 127.0f / amax;
        if (y[0].d != amax / 127.0f) bad++;
        for (int i = 0; i < 256; i++) bad += y[0].qs[i] != (int8_t)lrintf(x[i] * iscale);
    }
    CHECK_EQ_INT(bad, 0);
}

/* The AVX-512 quantizer gives the portable one's bytes, on ordinary
 * blocks, exact ties, zeros, and blocks holding an infinity or a NaN. */
static void test_q8_k_avx512_quantizer_same_bytes(void) {
#if defined(__x86_64__) || defined(__i386__)
    cpu_features_get(); /* detects the CPU (cpu_isa_best only reads the result) */
    if (!cpu_isa_supported(PDL_ISA_AVX512)) {
        fprintf(stderr, "  no AVX-512 here: nothing to compare\n");
        return;
    }
    float x[8 * 256];
    for (int i = 0; i < 8 * 256; i++) x[i] = frand() * (float)(1 + i / 256);
    for (int i = 256; i < 512; i++) x[i] = (float)((int)(frand() * 254.0f)) * 0.5f; /* ties */
    x[300] = 127.0f;
    for (int i = 512; i < 768; i++) x[i] = 0.0f;
    x[900] = INFINITY;
    x[1100] = -INFINITY;
    x[1300] = NAN;
    x[1301] = -NAN;
    for (int i = 1792; i < 2048; i++) x[i] *= 1e-38f; /* 127 / amax overflows */
    pdl_block_q8k a[8], b[8];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    kquant_quantize_row_q8_k(x, 8 * 256, a);
    kquant_quantize_row_q8_k_avx512(x, 8 * 256, b);
    for (int k = 0; k < 8; k++)
        CHECK_MSG(memcmp(&a[k], &b[k], sizeof a[k]) == 0, "block %d differs", k);
#endif
}

/* The portable dots against float64 sums of the dequantized weights (the
 * definition in cpu_ops.c), two ways:
 * - with the activations the kernel really multiplies (d * q of the Q8_K
 *   blocks): only float rounding differs, 1e-5 relative to sum |w x|;
 * - with the original activations: Q8_K rounds each x_i by at most d/2 =
 *   amax_block / 254, so the error is at most sum_i |w_i| amax_b(i) / 254
 *   (plus the float rounding above). That bound catches a wrong sign or
 *   scale of the min or -32 terms, which the first check could only catch
 *   together with the dequantizer. */
static void test_kquant_dots_match_float64(void) {
    fp16_init();
    pdl_dtype types[] = {PDL_DTYPE_Q4_K, PDL_DTYPE_Q5_K, PDL_DTYPE_Q6_K, PDL_DTYPE_Q3_K, PDL_DTYPE_Q2_K, PDL_DTYPE_IQ4_XS,
                         PDL_DTYPE_TQ2_0, PDL_DTYPE_TQ1_0};
    int lens[] = {256, 512, 768, 1024, 2048};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            pdl_dtype dt = types[ti];
            int in = lens[li], rows = 6, nb = in / 256;
            uint8_t *w = random_rows(dt, rows, in);
            float *x = random_x(rows, in), *wf = malloc((size_t)in * sizeof *wf);
            pdl_block_q8k *xq = malloc((size_t)nb * sizeof *xq);
            double worst_q = 0, worst_x = 0;
            for (int r = 0; r < rows; r++) {
                const float *xr = x + (size_t)r * in;
                kquant_quantize_row_q8_k(xr, in, xq);
                ops_dequant_blocks(dt, w + (size_t)r * dtype_row_bytes(dt, in), wf, in);
                double sq = 0, sx = 0, mag = 0, bound = 0;
                for (int i = 0; i < in; i++) {
                    const pdl_block_q8k *blk = &xq[i / 256];
                    double xe = (double)blk->d * blk->qs[i % 256];
                    sq += (double)wf[i] * xe;
                    sx += (double)wf[i] * xr[i];
                    mag += fabs((double)wf[i] * xe);
                    bound += fabs((double)wf[i]) * (double)blk->d * 127.0 / 254.0;
                }
                double got = kq_dot(dt, w + (size_t)r * dtype_row_bytes(dt, in), xq, nb);
                double eq = fabs(got - sq) / (mag + 1e-30);
                double ex = fabs(got - sx) / (bound + 1e-5 * mag + 1e-30);
                if (eq > worst_q) worst_q = eq;
                if (ex > worst_x) worst_x = ex;
            }
            CHECK_MSG(worst_q < 1e-5, "%s in=%d: relative error %.3g with the quantized activations",
                      dtype_name(dt), in, worst_q);
            CHECK_MSG(worst_x <= 1.0, "%s in=%d: error %.3g of the Q8_K rounding bound", dtype_name(dt), in,
                      worst_x);
            free(w), free(x), free(wf), free(xq);
        }
}

typedef struct family {
    const char *name;
    pdl_tile_kq_fn q4k, q5k, q6k, iq4xs;
    int tr, tc;
    pdl_tile_kq_fn q3k, q2k;
    pdl_tile_kq_fn tq2, tq1;
} family;

/* The SIMD tile families this CPU can run. */
static int families(family *f) {
    const pdl_cpu_features *cf = cpu_features_get();
    int n = 0;
    if (cpu_isa_supported(PDL_ISA_AVX2) && matmul_tiles_avx2.q4k)
        f[n++] = (family){"avx2", matmul_tiles_avx2.q4k, matmul_tiles_avx2.q5k, matmul_tiles_avx2.q6k,
                          matmul_tiles_avx2.iq4xs, matmul_tiles_avx2.tile_rows, matmul_tiles_avx2.tile_cols,
                          matmul_tiles_avx2.q3k, matmul_tiles_avx2.q2k, matmul_tiles_avx2.tq2, matmul_tiles_avx2.tq1};
    if (cpu_isa_supported(PDL_ISA_AVX512) && matmul_tiles_avx512.q4k)
        f[n++] = (family){"avx512bw", matmul_tiles_avx512.q4k, matmul_tiles_avx512.q5k, matmul_tiles_avx512.q6k,
                          matmul_tiles_avx512.iq4xs, matmul_tiles_avx512.tile_rows, matmul_tiles_avx512.tile_cols,
                          matmul_tiles_avx512.q3k, matmul_tiles_avx512.q2k, matmul_tiles_avx512.tq2,
                          matmul_tiles_avx512.tq1};
    if (cpu_isa_supported(PDL_ISA_AVX512) && cf->avx512vnni && matmul_tiles_avx512_vnni.q4k)
        f[n++] = (family){"avx512vnni", matmul_tiles_avx512_vnni.q4k, matmul_tiles_avx512_vnni.q5k, matmul_tiles_avx512_vnni.q6k,
                          matmul_tiles_avx512_vnni.iq4xs,
                          matmul_tiles_avx512_vnni.tile_rows, matmul_tiles_avx512_vnni.tile_cols,
                          matmul_tiles_avx512_vnni.q3k, matmul_tiles_avx512_vnni.q2k, matmul_tiles_avx512_vnni.tq2,
                          matmul_tiles_avx512_vnni.tq1};
    if (cpu_isa_supported(PDL_ISA_NEON) && matmul_tiles_neon.q4k)
        f[n++] = (family){"neon", matmul_tiles_neon.q4k, matmul_tiles_neon.q5k, matmul_tiles_neon.q6k,
                          matmul_tiles_neon.iq4xs, matmul_tiles_neon.tile_rows, matmul_tiles_neon.tile_cols,
                          matmul_tiles_neon.q3k, matmul_tiles_neon.q2k, matmul_tiles_neon.tq2, matmul_tiles_neon.tq1};
    if (cpu_isa_supported(PDL_ISA_NEON) && cf->neon_dotprod && matmul_tiles_neon_dotprod.q4k)
        f[n++] = (family){"neon+sdot", matmul_tiles_neon_dotprod.q4k, matmul_tiles_neon_dotprod.q5k, matmul_tiles_neon_dotprod.q6k,
                          matmul_tiles_neon_dotprod.iq4xs,
                          matmul_tiles_neon_dotprod.tile_rows, matmul_tiles_neon_dotprod.tile_cols,
                          matmul_tiles_neon_dotprod.q3k, matmul_tiles_neon_dotprod.q2k, matmul_tiles_neon_dotprod.tq2,
                          matmul_tiles_neon_dotprod.tq1};
    return n;
}

/* Every tile, every shape up to its size (ragged rows and columns), on
 * random blocks: the same bits as the portable dot. */
static void run_tiles_against_reference(const uint8_t *w, size_t rb, const pdl_block_q8k *xq, int nb,
                                        pdl_dtype dt, int *checked, int *bad) {
    family f[5];
    int nf = families(f);
    for (int fi = 0; fi < nf; fi++) {
        pdl_tile_kq_fn fn = dt == PDL_DTYPE_Q4_K     ? f[fi].q4k
                            : dt == PDL_DTYPE_Q5_K   ? f[fi].q5k
                            : dt == PDL_DTYPE_Q3_K   ? f[fi].q3k
                            : dt == PDL_DTYPE_Q2_K   ? f[fi].q2k
                            : dt == PDL_DTYPE_IQ4_XS ? f[fi].iq4xs
                            : dt == PDL_DTYPE_TQ2_0  ? f[fi].tq2
                            : dt == PDL_DTYPE_TQ1_0  ? f[fi].tq1
                                                     : f[fi].q6k;
        if (!fn) { /* every family with k-quant tiles has them all */
            (*bad)++;
            continue;
        }
        for (int rows = 1; rows <= f[fi].tr; rows++)
            for (int cols = 1; cols <= f[fi].tc; cols++) {
                float out[8 * 8];
                for (int i = 0; i < 64; i++) out[i] = -999.0f;
                fn(xq, nb, rows, w, rb, cols, out, 8);
                for (int r = 0; r < 8; r++)
                    for (int c = 0; c < 8; c++) {
                        float v = out[r * 8 + c];
                        if (r >= rows || c >= cols) { /* untouched outside the tile */
                            if (v != -999.0f) (*bad)++;
                            continue;
                        }
                        float want = kq_dot(dt, w + (size_t)c * rb, xq + (size_t)r * nb, nb);
                        (*checked)++;
                        if (memcmp(&v, &want, sizeof v) != 0) {
                            if (*bad < 5)
                                fprintf(stderr, "  %s %s nb=%d tile %dx%d (%d,%d): %.9g != %.9g\n", f[fi].name,
                                        dtype_name(dt), nb, rows, cols, r, c, v, want);
                            (*bad)++;
                        }
                    }
            }
    }
}

static void test_kquant_tiles_match_reference_bit_for_bit(void) {
    fp16_init();
    family f[5];
    int nf = families(f);
    fprintf(stderr, "  tile families here:");
    for (int i = 0; i < nf; i++) fprintf(stderr, " %s", f[i].name);
    fprintf(stderr, "%s\n", nf ? "" : " none");
    pdl_dtype types[] = {PDL_DTYPE_Q4_K, PDL_DTYPE_Q5_K, PDL_DTYPE_Q6_K, PDL_DTYPE_Q3_K, PDL_DTYPE_Q2_K, PDL_DTYPE_IQ4_XS,
                         PDL_DTYPE_TQ2_0, PDL_DTYPE_TQ1_0};
    int lens[] = {256, 512, 768, 2048};
    int checked = 0, bad = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            pdl_dtype dt = types[ti];
            int in = lens[li], nb = in / 256;
            size_t rb = dtype_row_bytes(dt, in);
            uint8_t *w = random_rows(dt, 8, in);
            float *x = random_x(8, in);
            pdl_block_q8k *xq = malloc((size_t)8 * nb * sizeof *xq);
            for (int r = 0; r < 8; r++) kquant_quantize_row_q8_k(x + (size_t)r * in, in, xq + (size_t)r * nb);
            run_tiles_against_reference(w, rb, xq, nb, dt, &checked, &bad);
            free(w), free(x), free(xq);
        }
    CHECK_EQ_INT(bad, 0);
    if (nf) CHECK(checked > 0);
}

/* The largest magnitudes every stage must hold without saturating: all
 * quants at their maximum (Q4_K 15, Q5_K 31, with scale and min 63; Q6_K 63 or 0,
 * i.e. +31 / -32, with scales 127 and -128; Q3_K +3 with scale +31 or -4
 * with scale -32; Q2_K 3 or 0 with scales and mins 15; IQ4_XS code 15
 * (+113) with scale 63 (+31) or code 0 (-127) with scale 0 (-32); TQ2_0
 * code 3 (+2, unused by writers but read) or 0 (-1); TQ1_0 bytes 0xFF
 * (every trit 2: +1) or 0 (-1), block by block) against activations of
 * +-127. */
static void test_kquant_tiles_exact_at_extremes(void) {
    fp16_init();
    int in = 512, nb = 2, checked = 0, bad = 0;
    float x[4 * 512];
    for (int i = 0; i < 4 * 512; i++) x[i] = (i / 512) % 2 ? ((i % 3) ? 1.0f : -1.0f) : ((i / 512) == 0 ? 1.0f : -1.0f);
    pdl_block_q8k xq[4 * 2];
    for (int r = 0; r < 4; r++) kquant_quantize_row_q8_k(x + r * in, in, xq + r * nb);
    CHECK_EQ_INT(xq[0].qs[0], 127);
    CHECK_EQ_INT(xq[2 * nb].qs[0], -127);
    for (int dti = 0; dti < 8; dti++) {
        pdl_dtype dt = dti == 7   ? PDL_DTYPE_TQ1_0
                       : dti == 6 ? PDL_DTYPE_TQ2_0
                       : dti == 5 ? PDL_DTYPE_IQ4_XS
                       : dti == 4 ? PDL_DTYPE_Q2_K
                       : dti == 3 ? PDL_DTYPE_Q3_K
                       : dti == 2 ? PDL_DTYPE_Q6_K
                       : dti      ? PDL_DTYPE_Q5_K
                                  : PDL_DTYPE_Q4_K;
        size_t rb = dtype_row_bytes(dt, in);
        uint8_t *w = malloc(rb * 4);
        memset(w, 0xFF, rb * 4);
        for (int b = 0; b < 4 * nb; b++) {
            uint8_t *blk = w + b * dtype_block_bytes(dt);
            uint16_t h = fp16_f32_to_f16(0.5f);
            if (dt == PDL_DTYPE_TQ2_0 || dt == PDL_DTYPE_TQ1_0) {
                size_t bb = dtype_block_bytes(dt);
                if (b % 2) memset(blk, 0, bb - 2); /* every code 0: -1 */
                memcpy(blk + bb - 2, &h, 2);
            } else if (dt == PDL_DTYPE_Q2_K) {
                if (b % 2) memset(blk + 16, 0, 64); /* q = 0 */
                memcpy(blk + 80, &h, 2);
                memcpy(blk + 82, &h, 2);
            } else if (dt == PDL_DTYPE_Q3_K) {
                if (b % 2) memset(blk, 0, 108); /* q = -4, scales 0 - 32 */
                memcpy(blk + 108, &h, 2);
            } else if (dt == PDL_DTYPE_IQ4_XS) {
                if (b % 2) memset(blk + 2, 0, 134); /* code 0 (-127), scale 0 (-32) */
                memcpy(blk, &h, 2);
            } else if (dt != PDL_DTYPE_Q6_K) {
                memcpy(blk, &h, 2);
                memcpy(blk + 2, &h, 2);
            } else {
                for (int g = 0; g < 16; g++) blk[192 + g] = (uint8_t)(int8_t)((b + g) % 2 ? 127 : -128);
                if (b % 2) memset(blk, 0, 192); /* q = 0: -32 */
                memcpy(blk + 208, &h, 2);
            }
        }
        run_tiles_against_reference(w, rb, xq, nb, dt, &checked, &bad);
        /* and the portable value against float64 (exact here up to float rounding) */
        float wf[512];
        for (int c = 0; c < 4; c++) {
            ops_dequant_blocks(dt, w + c * rb, wf, in);
            for (int r = 0; r < 4; r++) {
                double s = 0;
                for (int i = 0; i < in; i++) s += (double)wf[i] * xq[r * nb + i / 256].d * xq[r * nb + i / 256].qs[i % 256];
                double got = kq_dot(dt, w + c * rb, xq + r * nb, nb);
                CHECK_MSG(fabs(got - s) <= 1e-6 * fabs(s) + 1e-6, "%s (%d,%d): %.9g vs %.9g", dtype_name(dt), r, c,
                          got, s);
            }
        }
        free(w);
    }
    CHECK_EQ_INT(bad, 0);
}

/* matmul_run on every instruction set against the portable one, bit for
 * bit, for 1..9 rows and column counts off the tile sizes; and each row
 * alone gives the bits it gets among 7 rows (batch invariance). */
static void test_kquant_matmul_same_bits_on_every_isa(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(3);
    REQUIRE(pool != NULL);
    pdl_dtype types[] = {PDL_DTYPE_Q4_K, PDL_DTYPE_Q5_K, PDL_DTYPE_Q6_K, PDL_DTYPE_Q3_K, PDL_DTYPE_Q2_K, PDL_DTYPE_IQ4_XS,
                         PDL_DTYPE_TQ2_0, PDL_DTYPE_TQ1_0};
    int shapes[][2] = {{1, 256}, {3, 512}, {5, 768}, {17, 1024}, {33, 2048}, {130, 256}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            pdl_dtype dt = types[ti];
            int out = shapes[si][0], in = shapes[si][1], maxrows = 9;
            uint8_t *w = random_rows(dt, out, in);
            pdl_tensor t = {.dtype = dt, .n_dims = 2, .shape = {out, in}, .data = w};
            float *x = random_x(maxrows, in);
            float *y0 = malloc((size_t)maxrows * out * sizeof *y0), *y1 = malloc((size_t)maxrows * out * sizeof *y1);
            for (int rows = 1; rows <= maxrows; rows++) {
                pdl_kernels k;
                matmul_kernels_for(PDL_ISA_SCALAR, matmul_bf16_activations(), &k);
                matmul_run(&k, pool, &scratch, y0, out, x, rows, &t, NULL, false);
                for (int isa = PDL_ISA_SCALAR + 1; isa < PDL_ISA_COUNT; isa++) {
                    if (!cpu_isa_supported((pdl_isa)isa)) continue;
                    matmul_kernels_for((pdl_isa)isa, matmul_bf16_activations(), &k);
                    matmul_run(&k, pool, &scratch, y1, out, x, rows, &t, NULL, false);
                    CHECK_MSG(memcmp(y0, y1, (size_t)rows * out * sizeof(float)) == 0, "%s %s %dx%dx%d differs from scalar",
                              cpu_isa_name((pdl_isa)isa), dtype_name(dt), rows, out, in);
                }
            }
            for (int isa = PDL_ISA_SCALAR; isa < PDL_ISA_COUNT; isa++) {
                if (!cpu_isa_supported((pdl_isa)isa)) continue;
                pdl_kernels k;
                matmul_kernels_for((pdl_isa)isa, matmul_bf16_activations(), &k);
                matmul_run(&k, pool, &scratch, y1, out, x, 7, &t, NULL, false);
                for (int r = 0; r < 7; r++) {
                    matmul_run(&k, pool, &scratch, y0, out, x + (size_t)r * in, 1, &t, NULL, false);
                    CHECK_MSG(memcmp(y0, y1 + (size_t)r * out, (size_t)out * sizeof(float)) == 0,
                              "%s %s %dx%d: row %d alone differs from the batch of 7", cpu_isa_name((pdl_isa)isa),
                              dtype_name(dt), out, in, r);
                }
            }
            free(w), free(x), free(y0), free(y1);
        }
    threadpool_free(pool);
}

int main(void) {
    RUN(test_q8_k_quantizes_a_hand_checked_block);
    RUN(test_q8_k_avx512_quantizer_same_bytes);
    RUN(test_kquant_dots_match_float64);
    RUN(test_kquant_tiles_match_reference_bit_for_bit);
    RUN(test_kquant_tiles_exact_at_extremes);
    RUN(test_kquant_matmul_same_bits_on_every_isa);
    scratch_free(&scratch);
    return test_summary();
}
