/*
 * test_kernels.c - the CPU kernels against straightforward references:
 * half/bfloat16 conversions (exhaustive), dot products and matmul per weight
 * dtype (against float64 sums), RoPE layouts, attention over a paged cache
 * (against a contiguous float64 computation).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "format/tensor.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/delta_rule.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/kquant.h"
#include "kernels/matmul.h"
#include "kernels/matmul_table.h"
#include "test_util.h"

/* the matmuls' scratch (scratch.h), shared by every test here */
static pdl_scratch scratch;

static uint64_t rng_state = 0x1234567;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* Every half value converts exactly (compared with the compiler's _Float16)
 * and converts back to itself. */
static void test_f16_round_trip_is_exact_for_all_halves(void) {
    fp16_init();
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_f16_to_f32((uint16_t)h);
        float g = fp16_f16_to_f32_exact((uint16_t)h);
        _Float16 hv;
        uint16_t hb = (uint16_t)h;
        memcpy(&hv, &hb, 2);
        float want = (float)hv;
        bool nan = want != want;
        if (nan ? (f == f || g == g) : (fp16_f32_to_bits(f) != fp16_f32_to_bits(want) || fp16_f32_to_bits(g) != fp16_f32_to_bits(want)))
            bad++;
        if (!nan && fp16_f32_to_f16(f) != (uint16_t)h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

/* float -> half rounds to nearest even like the compiler's conversion, at
 * and around every rounding boundary. */
static void test_f32_to_f16_rounds_to_nearest_even(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float lo = fp16_f16_to_f32_exact((uint16_t)h);
        uint32_t b = fp16_f32_to_bits(lo);
        uint32_t probes[] = {b, b + 1, b + 0xfff, b + 0x1000, b + 0x1001, b + 0x1fff, b - 1};
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            for (int sign = 0; sign < 2; sign++) {
                float x = fp16_bits_to_f32(probes[i] | (sign ? 0x80000000u : 0));
                _Float16 want = (_Float16)x;
                uint16_t wb;
                memcpy(&wb, &want, 2);
                if (fp16_f32_to_f16(x) != wb) bad++;
            }
        }
    }
    float specials[] = {65504.0f, 65519.0f, 65520.0f, 1e6f, 1e-8f, 2.9802322e-08f, 5.9604645e-08f, 0.0f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        _Float16 want = (_Float16)specials[i];
        uint16_t wb;
        memcpy(&wb, &want, 2);
        if (fp16_f32_to_f16(specials[i]) != wb) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_bf16_widens_exactly(void) {
    CHECK(fp16_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(fp16_bf16_to_f32(0xc000) == -2.0f);
    CHECK(fp16_bf16_to_f32(0x0000) == 0.0f);
}

/* Byte offsets of the f16 fields in a block of the formats filled with
 * random bytes (every other bit pattern is a valid quant or scale). */
static void random_blocks(pdl_dtype dtype, uint8_t *row, int cols) {
    int halves[2] = {-1, -1};
    switch (dtype) {
    case PDL_DTYPE_Q4_1: case PDL_DTYPE_Q5_1: case PDL_DTYPE_Q4_K: case PDL_DTYPE_Q5_K:
        halves[0] = 0, halves[1] = 2;
        break;
    case PDL_DTYPE_Q5_0: halves[0] = 0; break;
    case PDL_DTYPE_Q2_K: halves[0] = 80, halves[1] = 82; break;
    case PDL_DTYPE_Q3_K: halves[0] = 108; break;
    case PDL_DTYPE_Q6_K: halves[0] = 208; break;
    case PDL_DTYPE_TQ2_0: halves[0] = 64; break;
    case PDL_DTYPE_TQ1_0: halves[0] = 52; break;
    default: break;
    }
    size_t bb = dtype_block_bytes(dtype), nb = (size_t)cols / dtype_block_elems(dtype);
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = row + b * bb;
        for (size_t i = 0; i < bb; i++) blk[i] = (uint8_t)(frand() * 128.0f + 128.0f);
        for (int h = 0; h < 2; h++)
            if (halves[h] >= 0) {
                /* ternary values are d itself: a larger d keeps them the size of the others' */
                float amp = dtype == PDL_DTYPE_TQ2_0 || dtype == PDL_DTYPE_TQ1_0 ? 0.05f : 0.002f;
                uint16_t v = fp16_f32_to_f16(amp * frand());
                memcpy(blk + halves[h], &v, 2);
            }
    }
}

/* Builds a (rows, cols) weight in `dtype` from random floats; returns the
 * dequantized values in *ref (what the kernel must multiply by). */
static void *make_weight(pdl_dtype dtype, int rows, int cols, float **ref) {
    size_t bytes = dtype_row_bytes(dtype, cols) * rows;
    uint8_t *w = malloc(bytes);
    float *r = malloc((size_t)rows * cols * sizeof *r);
    for (int i = 0; i < rows; i++) {
        uint8_t *row = w + dtype_row_bytes(dtype, cols) * i;
        for (int j = 0; j < cols; j++) {
            float x = frand();
            switch (dtype) {
            case PDL_DTYPE_F32: memcpy(row + 4 * j, &x, 4); break;
            case PDL_DTYPE_F16: {
                uint16_t h = fp16_f32_to_f16(x);
                memcpy(row + 2 * j, &h, 2);
                break;
            }
            case PDL_DTYPE_BF16: {
                uint16_t h = (uint16_t)(fp16_f32_to_bits(x) >> 16);
                memcpy(row + 2 * j, &h, 2);
                break;
            }
            case PDL_DTYPE_Q8_0: {
                uint8_t *blk = row + (j / 32) * 34;
                if (j % 32 == 0) {
                    uint16_t d = fp16_f32_to_f16(0.01f + 0.001f * (float)(j / 32));
                    memcpy(blk, &d, 2);
                }
                blk[2 + j % 32] = (uint8_t)(int8_t)(int)(x * 127.0f);
                break;
            }
            case PDL_DTYPE_Q4_0:
            case PDL_DTYPE_IQ4_NL: { /* the same block: a half d, then the codes (IQ4_NL: any of the 16) */
                uint8_t *blk = row + (j / 32) * 18;
                if (j % 32 == 0) {
                    uint16_t d = fp16_f32_to_f16(0.01f + 0.001f * (float)(j / 32));
                    memcpy(blk, &d, 2);
                }
                int q = (int)((x + 1.0f) * 8.0f) & 15, k = j % 32;
                blk[2 + k % 16] = (uint8_t)(k < 16 ? (blk[2 + k % 16] & 0xF0) | q : (blk[2 + k % 16] & 0x0F) | q << 4);
                break;
            }
            case PDL_DTYPE_MXFP4: { /* scales 2^-9 .. 2^-6, any code */
                uint8_t *blk = row + (j / 32) * 17;
                if (j % 32 == 0) blk[0] = (uint8_t)(119 + (j / 32 + i) % 4);
                int q = (int)((x + 1.0f) * 8.0f) & 15, k = j % 32;
                blk[1 + k % 16] = (uint8_t)(k < 16 ? (blk[1 + k % 16] & 0xF0) | q : (blk[1 + k % 16] & 0x0F) | q << 4);
                break;
            }
            default: break;
            }
        }
        if (dtype_is_quantized(dtype) && dtype != PDL_DTYPE_Q8_0 && dtype != PDL_DTYPE_Q4_0 && dtype != PDL_DTYPE_MXFP4 &&
            dtype != PDL_DTYPE_IQ4_NL)
            random_blocks(dtype, row, cols);
        pdl_tensor t = {.dtype = dtype, .n_dims = 2, .shape = {rows, cols}, .data = w};
        ops_dequant_row(&t, i, r + (size_t)i * cols, cols);
    }
    *ref = r;
    return w;
}

/* matmul (threaded, 1..n rows) against float64 sums of the dequantized
 * weights: within float32 accumulation error (1e-5 relative to sum |w x|). */
static void test_matmul_matches_float64_for_every_dtype(void) {
    fp16_init();
    matmul_set_bf16_activations(false); /* exact products: BF16 activations are tested below */
    pdl_threadpool *pool = threadpool_new(3);
    REQUIRE(pool != NULL);
    /* Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, TQ2_0 and TQ1_0 have their own kernels (kquant.h, tested in
     * test_kquant.c); Q4_1, Q5_0 and Q5_1 theirs with Q8_0 activations
     * (kernels/legacy_quant.h) */
    pdl_dtype types[] = {PDL_DTYPE_F32,  PDL_DTYPE_F16,  PDL_DTYPE_BF16, PDL_DTYPE_Q8_0, PDL_DTYPE_Q4_0,
                         PDL_DTYPE_Q4_1, PDL_DTYPE_Q5_0, PDL_DTYPE_Q5_1, PDL_DTYPE_Q2_K, PDL_DTYPE_Q3_K,
                         PDL_DTYPE_Q4_K, PDL_DTYPE_Q5_K, PDL_DTYPE_Q6_K, PDL_DTYPE_MXFP4, PDL_DTYPE_IQ4_NL,
                         PDL_DTYPE_TQ2_0, PDL_DTYPE_TQ1_0};
    /* the last two are large enough to use every thread */
    int shapes[][2] = {{37, 96}, {64, 160}, {5, 32}, {300, 256}, {70, 512}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int out = shapes[si][0], in = shapes[si][1], rows = 7;
            if (in % (int)dtype_block_elems(types[ti]) != 0) continue;
            float *ref;
            void *w = make_weight(types[ti], out, in, &ref);
            pdl_tensor t = {.dtype = types[ti], .n_dims = 2, .shape = {out, in}, .data = w};
            float *x = malloc((size_t)rows * in * sizeof *x), *y = malloc((size_t)rows * out * sizeof *y);
            float *bias = malloc((size_t)out * sizeof *bias);
            for (int i = 0; i < rows * in; i++) x[i] = frand();
            for (int i = 0; i < out; i++) bias[i] = frand();
            matmul_run(matmul_kernels_active(), pool, &scratch, y, out, x, rows, &t, bias, false);
            /* Q8_0 weights multiply Q8_0-quantized activations: the reference
             * uses the same quantized values */
            float *xe = malloc((size_t)rows * in * sizeof *xe);
            memcpy(xe, x, (size_t)rows * in * sizeof *xe);
            if (types[ti] == PDL_DTYPE_Q8_0 || types[ti] == PDL_DTYPE_Q4_0 || types[ti] == PDL_DTYPE_MXFP4 ||
                types[ti] == PDL_DTYPE_IQ4_NL || types[ti] == PDL_DTYPE_Q5_0 || types[ti] == PDL_DTYPE_Q4_1 ||
                types[ti] == PDL_DTYPE_Q5_1) {
                int8_t *q = malloc((size_t)in);
                float *d = malloc((size_t)(in / 32) * sizeof *d);
                for (int r = 0; r < rows; r++) {
                    matmul_quantize_row_q8_0(x + (size_t)r * in, in, q, d);
                    for (int i = 0; i < in; i++) xe[(size_t)r * in + i] = d[i / 32] * (float)q[i];
                }
                free(q), free(d);
            }
            /* ... and Q2_K .. Q6_K, TQ2_0 and TQ1_0 weights Q8_K-quantized ones */
            if (types[ti] == PDL_DTYPE_Q4_K || types[ti] == PDL_DTYPE_Q5_K || types[ti] == PDL_DTYPE_Q6_K ||
                types[ti] == PDL_DTYPE_Q3_K || types[ti] == PDL_DTYPE_Q2_K || types[ti] == PDL_DTYPE_TQ2_0 ||
                types[ti] == PDL_DTYPE_TQ1_0) {
                pdl_block_q8k *q = malloc((size_t)(in / 256) * sizeof *q);
                for (int r = 0; r < rows; r++) {
                    kquant_quantize_row_q8_k(x + (size_t)r * in, in, q);
                    for (int i = 0; i < in; i++) xe[(size_t)r * in + i] = q[i / 256].d * (float)q[i / 256].qs[i % 256];
                }
                free(q);
            }
            double worst = 0;
            for (int r = 0; r < rows; r++)
                for (int o = 0; o < out; o++) {
                    double s = 0, mag = 0;
                    for (int i = 0; i < in; i++) {
                        s += (double)ref[(size_t)o * in + i] * xe[(size_t)r * in + i];
                        mag += fabs((double)ref[(size_t)o * in + i] * xe[(size_t)r * in + i]);
                    }
                    s += bias[o];
                    double e = fabs(y[(size_t)r * out + o] - s) / (mag + 1e-30);
                    if (e > worst) worst = e;
                }
            CHECK_MSG(worst < 1e-5, "%s %dx%d: relative error %.3g", dtype_name(types[ti]), out, in, worst);
            /* accumulate adds onto what is there */
            float *y2 = malloc((size_t)rows * out * sizeof *y2);
            for (int i = 0; i < rows * out; i++) y2[i] = 1.0f;
            matmul_run(matmul_kernels_active(), pool, &scratch, y2, out, x, rows, &t, bias, true);
            int bad = 0;
            for (int i = 0; i < rows * out; i++)
                if (y2[i] != 1.0f + y[i]) bad++;
            CHECK_EQ_INT(bad, 0);
            /* a single row gives the bytes of the same row inside the batch */
            float *y1 = malloc((size_t)out * sizeof *y1);
            matmul_run(matmul_kernels_active(), pool, &scratch, y1, out, x + (size_t)3 * in, 1, &t, bias, false);
            CHECK(memcmp(y1, y + (size_t)3 * out, (size_t)out * sizeof(float)) == 0);
            free(w), free(ref), free(x), free(y), free(y2), free(y1), free(bias), free(xe);
        }
    }
    matmul_set_bf16_activations(true);
    threadpool_free(pool);
}

/* Every SIMD family the CPU has against the portable reference, on ragged
 * shapes (k not a multiple of the vector width, rows and columns not
 * multiples of the tile), for every weight dtype: close to the reference
 * (the SIMD sums differ in order and use FMA: 1e-5 relative to sum |w x|),
 * and bit-identical between a row alone and the same row inside a batch. */
static void test_simd_matmul_matches_scalar_on_ragged_shapes(void) {
    fp16_init();
    pdl_threadpool *pool = threadpool_new(2);
    REQUIRE(pool != NULL);
    pdl_isa best = cpu_isa_best();
    fprintf(stderr, "  best instruction set here: %s%s\n", cpu_isa_name(best),
            cpu_features_get()->neon_dotprod ? " + SDOT" : "");
    pdl_dtype types[] = {PDL_DTYPE_F32,    PDL_DTYPE_F16,  PDL_DTYPE_BF16, PDL_DTYPE_Q8_0, PDL_DTYPE_Q4_0,
                         PDL_DTYPE_MXFP4,  PDL_DTYPE_IQ4_NL, PDL_DTYPE_Q5_0, PDL_DTYPE_Q4_1, PDL_DTYPE_Q5_1};
    int shapes[][3] = {{1, 1, 32}, {3, 5, 96}, {7, 9, 160}, {13, 17, 1056}, {5, 130, 544}, {33, 7, 64}, {3, 64, 4096}};
    /* mode 0: exact F32 products everywhere; mode 1: BF16 weights may use
     * BF16 activations (VDPBF16PS) when the CPU has it */
    for (int mode = 0; mode < 2; mode++)
    for (int isa = PDL_ISA_SCALAR + 1; isa < PDL_ISA_COUNT; isa++) {
        if (!cpu_isa_supported((pdl_isa)isa)) continue;
        /* the family's table and the portable one, in this mode */
        pdl_kernels scalar_kernels, family_kernels;
        matmul_kernels_for(PDL_ISA_SCALAR, mode == 1, &scalar_kernels);
        matmul_kernels_for((pdl_isa)isa, mode == 1, &family_kernels);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                int rows = shapes[si][0], out = shapes[si][1], in = shapes[si][2];
                if (!dtype_is_quantized(types[ti]) && si % 2 == 1) in += 3; /* ragged k */
                float *ref;
                void *w = make_weight(types[ti], out, in, &ref);
                pdl_tensor t = {.dtype = types[ti], .n_dims = 2, .shape = {out, in}, .data = w};
                float *x = malloc((size_t)rows * in * sizeof *x);
                float *y0 = malloc((size_t)rows * out * sizeof *y0), *y1 = malloc((size_t)rows * out * sizeof *y1);
                float *one = malloc((size_t)out * sizeof *one);
                for (int i = 0; i < rows * in; i++) x[i] = frand();
                /* with BF16 activations the reference multiplies the same
                 * rounded activations (round to nearest even) */
                bool act16 = mode == 1 && types[ti] == PDL_DTYPE_BF16 && isa == PDL_ISA_AVX512 &&
                             cpu_features_get()->avx512bf16;
                float *xr = malloc((size_t)rows * in * sizeof *xr);
                for (int i = 0; i < rows * in; i++) {
                    uint32_t b = fp16_f32_to_bits(x[i]);
                    xr[i] = act16 ? fp16_bits_to_f32((b + 0x7fff + ((b >> 16) & 1)) & 0xffff0000u) : x[i];
                }
                matmul_run(&scalar_kernels, pool, &scratch, y0, out, xr, rows, &t, NULL, false);
                free(xr);
                matmul_run(&family_kernels, pool, &scratch, y1, out, x, rows, &t, NULL, false);
                double worst = 0;
                for (int r = 0; r < rows; r++)
                    for (int o = 0; o < out; o++) {
                        double mag = 0;
                        for (int i = 0; i < in; i++) mag += fabs((double)ref[(size_t)o * in + i] * x[(size_t)r * in + i]);
                        double e = fabs((double)y1[r * out + o] - y0[r * out + o]) / (mag + 1e-30);
                        if (e > worst) worst = e;
                    }
                CHECK_MSG(worst < 1e-5, "%s%s %s %dx%dx%d: relative difference %.3g", cpu_isa_name((pdl_isa)isa),
                          act16 ? "+bf16" : "", dtype_name(types[ti]), rows, out, in, worst);
                /* Q8_0, Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1 and Q5_1 follow one float order on every family: same bits */
                if (dtype_is_quantized(types[ti]))
                    CHECK_MSG(memcmp(y0, y1, (size_t)rows * out * sizeof(float)) == 0, "%s %s %dx%dx%d differs from scalar",
                              cpu_isa_name((pdl_isa)isa), dtype_name(types[ti]), rows, out, in);
                for (int r = 0; r < rows; r += rows > 3 ? 3 : 1) {
                    matmul_run(&family_kernels, pool, &scratch, one, out, x + (size_t)r * in, 1, &t, NULL, false);
                    CHECK_MSG(memcmp(one, y1 + (size_t)r * out, (size_t)out * sizeof(float)) == 0,
                              "%s %s: row %d alone differs from the batch", cpu_isa_name((pdl_isa)isa),
                              dtype_name(types[ti]), r);
                }
                free(w), free(ref), free(x), free(y0), free(y1), free(one);
            }
    }
    cpu_isa_set(best);
    matmul_set_bf16_activations(true);
    threadpool_free(pool);
}

/* Activations quantize per 32-block as GGUF's Q8_0: scale amax/127 kept as
 * a half, values rounded to nearest (ties to even). */
static void test_q8_0_activation_quantization(void) {
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(i - 20) * 0.25f;
    x[40] = 0; /* second block: a mix with a zero */
    int8_t q[64];
    float d[2];
    matmul_quantize_row_q8_0(x, 64, q, d);
    CHECK(d[0] == fp16_f16_to_f32(fp16_f32_to_f16(5.0f / 127.0f))); /* amax of block 0 is |-20 * 0.25| = 5 */
    CHECK_EQ_INT(q[0], -127);
    CHECK_EQ_INT(q[20], 0);
    CHECK_EQ_INT(q[40], 0);
    CHECK_EQ_INT(q[63], 127);
    float z[32] = {0};
    matmul_quantize_row_q8_0(z, 32, q, d);
    CHECK(d[0] == 0.0f);
    for (int i = 0; i < 32; i++) CHECK_EQ_INT(q[i], 0);
    /* every instruction set quantizes to the portable bytes, ties included
     * (block 1: multiples of amax / 254, so x * inv lands on k + 0.5 at two
     * places; block 3 at every place but one), and
     * the block sums are the sums of the bytes */
    enum { N = 32 * 40 };
    static float xs[N];
    static int8_t q0[N], q1[N];
    float d0[N / 32], d1[N / 32];
    int32_t s0[N / 32], s1[N / 32];
    for (int i = 0; i < N; i++) xs[i] = frand() * (float)(1 + i % 7) * 3.0f;
    for (int i = 32; i < 64; i++) xs[i] = (float)(i - 48) * (2.0f / 254.0f) + (i == 63 ? 0.5f / 127.0f : 0.0f);
    for (int i = 64; i < 96; i++) xs[i] = 0.0f;
    /* block 3: amax 127, so the scale is 1 and every other value a tie */
    for (int i = 96; i < 128; i++) xs[i] = (float)(i % 29) * (i % 2 ? 1.0f : -1.0f) * 3.0f + 0.5f;
    xs[96] = 127.0f;
    pdl_isa best = cpu_isa_best();
    matmul_quantizer_q8_0(PDL_ISA_SCALAR)(xs, N, q0, d0, s0);
    for (int isa = PDL_ISA_SCALAR + 1; isa < PDL_ISA_COUNT; isa++) {
        if (!cpu_isa_supported((pdl_isa)isa)) continue;
        matmul_quantizer_q8_0((pdl_isa)isa)(xs, N, q1, d1, s1);
        CHECK_MSG(memcmp(q0, q1, sizeof q0) == 0 && memcmp(d0, d1, sizeof d0) == 0 && memcmp(s0, s1, sizeof s0) == 0,
                  "%s quantizes differently from the portable code", cpu_isa_name((pdl_isa)isa));
    }
    cpu_isa_set(best);
    int bad = 0;
    for (int b = 0; b < N / 32; b++) {
        int32_t s = 0;
        for (int i = 0; i < 32; i++) s += q0[b * 32 + i];
        bad += s != s0[b];
    }
    CHECK_EQ_INT(bad, 0);
}

/* The SIMD builds of the gates, each run where the CPU has its family. */
static const struct {
    pdl_isa isa;
    void (*silu)(float *, const float *, int), (*gelu)(float *, const float *, int);
    void (*swiglu)(float *, const float *, int);
} gate_builds[] = {
    {PDL_ISA_AVX2, ops_silu_mul_avx2, ops_gelu_tanh_mul_avx2, ops_swiglu_oai_mul_avx2},
    {PDL_ISA_AVX512, ops_silu_mul_avx512, ops_gelu_tanh_mul_avx512, ops_swiglu_oai_mul_avx512},
    {PDL_ISA_NEON, ops_silu_mul_neon, ops_gelu_tanh_mul_neon, ops_swiglu_oai_mul_neon},
};

/* Every SIMD build the CPU has of gate 0 (SiLU), 1 (GELU-tanh) or 2 (clamped SwiGLU) on g[n]
 * and u[n] gives want's bytes (the portable build's) for every tail
 * length, and writes nothing past n (b: scratch of N floats). */
static void check_gate_builds(int gelu, const float *g, const float *u, const float *want, float *b, int N) {
    for (size_t bi = 0; bi < sizeof gate_builds / sizeof gate_builds[0]; bi++)
        for (int n = N; n > N - 17 && cpu_isa_supported(gate_builds[bi].isa); n--) {
            memcpy(b, g, (size_t)N * sizeof *b);
            (gelu == 2 ? gate_builds[bi].swiglu : gelu ? gate_builds[bi].gelu : gate_builds[bi].silu)(b, u, n);
            CHECK_MSG(memcmp(want, b, (size_t)n * sizeof *b) == 0, "%s %s differs (n %d)",
                      cpu_isa_name(gate_builds[bi].isa), gelu == 2 ? "clamped SwiGLU" : gelu ? "GELU-tanh" : "SiLU",
                      n);
            CHECK(memcmp(b + n, g + n, (size_t)(N - n) * sizeof *b) == 0); /* nothing past n written */
        }
}

/* SiLU gate: the portable, AVX2, AVX-512 and NEON builds give the same bits over a wide
 * range (both sides of 0, past e^-87, ragged tails), and match the
 * definition g / (1 + e^-g) * u in float64 within 4e-7 relative. */
static void test_silu_builds_agree(void) {
    enum { N = 4099 };
    static float g[N], u[N], a[N], b[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i % 400) - 200) * 0.5f + frand() * 0.25f; /* -100 .. 100 */
        u[i] = frand();
    }
    g[0] = 0.0f, g[1] = -0.0f, g[2] = 1e-30f, g[3] = -1e-30f, g[4] = 87.5f, g[5] = -87.5f, g[6] = 200.0f;
    memcpy(a, g, sizeof g);
    ops_silu_mul_portable(a, u, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        double e = fabs(a[i] - want) / (fabs(want) + 1e-30);
        if (fabs(want) > 1e-30 && e > worst) worst = e;
    }
    CHECK_MSG(worst < 4e-7, "silu relative error %.3g", worst);
    check_gate_builds(0, g, u, a, b, N);
}

/* GELU-tanh gate: the portable, AVX2, AVX-512 and NEON builds give the same bits
 * (both signs, underflow, overflow of g^3, ragged tails), and the result
 * is within 1e-6 |g u| of the float64 definition 0.5 g (1 + tanh(u)) u:
 * the float rounding of z = 2u (a few ulps) moves e^-|z| by about |z| x
 * 2e-7 relative, which for large negative g is a relative error of a
 * value already smaller than 1e-6 g. A z without its factor 2 is off by
 * 0.15 |g u| (checked). */
static void test_gelu_tanh_builds_agree(void) {
    enum { N = 4099 };
    static float g[N], u[N], a[N], b[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i % 400) - 200) * 0.05f + frand() * 0.025f; /* -10 .. 10 */
        u[i] = frand();
    }
    g[0] = 0.0f, g[1] = -0.0f, g[2] = 1e-30f, g[3] = -1e-30f, g[4] = 1e13f, g[5] = -1e13f, g[6] = -40.0f;
    memcpy(a, g, sizeof g);
    ops_gelu_tanh_mul_portable(a, u, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double x = g[i];
        double want = 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x))) * u[i];
        double e = fabs(a[i] - want) / (fabs(x * u[i]) + 1e-300);
        if (x != 0.0 && e > worst) worst = e;
    }
    fprintf(stderr, "  GELU-tanh: largest error %.3g x |g u|\n", worst);
    CHECK_MSG(worst < 1e-6, "GELU-tanh error %.3g x |g u|", worst);
    CHECK(a[0] == 0.0f && a[4] == 1e13f * u[4] && a[5] == 0.0f);
    check_gate_builds(1, g, u, a, b, N);
}

/* gpt-oss's clamped SwiGLU: the portable, AVX2, AVX-512 and NEON builds
 * give the same bits (gate and up on both sides of the clamps at 7 and -7,
 * exactly at them, large, ragged tails), and match the definition
 * (clamp(up, -7, 7) + 1) * g * sigmoid(1.702 g), g = min(gate, 7), in
 * float64 within 4e-7 relative (of |g (u + 1)|: the product may cancel to
 * 0 at u = -1). Without the clamps the result is far off (checked). */
static void test_swiglu_oai_builds_agree(void) {
    enum { N = 4099 };
    static float g[N], u[N], a[N], b[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i % 400) - 200) * 0.1f + frand() * 0.05f; /* -20 .. 20 */
        u[i] = (float)(((i * 7) % 300) - 150) * 0.1f + frand() * 0.05f;
    }
    g[0] = 7.0f, u[0] = -7.0f, g[1] = 7.0001f, u[1] = 7.0001f, g[2] = -1e30f, u[2] = 1e30f, g[3] = 1e30f, g[4] = -0.0f;
    memcpy(a, g, sizeof g);
    ops_swiglu_oai_mul_portable(a, u, N);
    double worst = 0, unclamped = 0;
    for (int i = 0; i < N; i++) {
        double x = fmin((double)g[i], 7.0), y = fmax(fmin((double)u[i], 7.0), -7.0);
        double want = (y + 1.0) * x / (1.0 + exp(-1.702 * x));
        double e = fabs(a[i] - want) / (fabs(x * (y + 1.0)) + 1e-30);
        if (x != 0.0 && e > worst) worst = e;
        double xr = g[i], yr = u[i], raw = (yr + 1.0) * xr / (1.0 + exp(-1.702 * xr));
        if (fabs(xr) < 1e6 && fabs(yr) < 1e6) unclamped = fmax(unclamped, fabs(raw - want));
    }
    fprintf(stderr, "  clamped SwiGLU: largest error %.3g x |g (u + 1)|\n", worst);
    CHECK_MSG(worst < 4e-7, "clamped SwiGLU error %.3g", worst);
    CHECK(unclamped > 10.0); /* the inputs do reach past the clamps */
    check_gate_builds(2, g, u, a, b, N);
}

static void test_rmsnorm_matches_definition(void) {
    float x[10], w[10], out[10];
    double ss = 0;
    for (int i = 0; i < 10; i++) x[i] = frand(), w[i] = frand(), ss += (double)x[i] * x[i];
    ops_rmsnorm(out, x, w, 10, 1e-5f);
    double scale = 1.0 / sqrt(ss / 10 + 1e-5);
    for (int i = 0; i < 10; i++) CHECK(fabs(out[i] - x[i] * scale * w[i]) < 1e-6);
}

/* GGUF llama permutes Q/K rows so that adjacent-pair RoPE on the permuted
 * vector equals rotate-half RoPE on the original: the property that lets
 * both layouts give the same logits. */
static void test_rope_adjacent_pairs_equal_rotate_half_under_permutation(void) {
    int d = 16;
    float inv[8];
    for (int i = 0; i < d / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / d);
    float orig[16], perm[16];
    for (int i = 0; i < d; i++) orig[i] = frand();
    /* llama.cpp's permute: row 2i <- i, row 2i+1 <- i + d/2 */
    for (int i = 0; i < d / 2; i++) perm[2 * i] = orig[i], perm[2 * i + 1] = orig[i + d / 2];
    ops_rope(orig, d, 37, inv, 1);
    ops_rope(perm, d, 37, inv, 0);
    for (int i = 0; i < d / 2; i++) {
        CHECK(perm[2 * i] == orig[i]);
        CHECK(perm[2 * i + 1] == orig[i + d / 2]);
    }
    /* position 0 is the identity */
    float v[16], v0[16];
    for (int i = 0; i < d; i++) v[i] = v0[i] = frand();
    ops_rope(v, d, 0, inv, 1);
    CHECK(memcmp(v, v0, sizeof v) == 0);
}

/* The attention builds, the portable one first; each SIMD one runs where
 * the CPU has its family. */
#define ATTN_BUILDS 4
static const struct {
    pdl_isa isa;
    pdl_attention_fn fn;
} attn_builds[ATTN_BUILDS] = {
    {PDL_ISA_SCALAR, attn_queries_scalar},
    {PDL_ISA_AVX2, attn_queries_avx2},
    {PDL_ISA_AVX512, attn_queries_avx512},
    {PDL_ISA_NEON, attn_queries_neon},
};

/* Paged attention (blocks scattered, F32 and F16 KV, GQA, sliding window, tanh soft-cap)
 * against a float64 computation over contiguous keys. */
/* Where element e of slot's value lies in a V pool (attention.h: within a
 * block, head after head, each head's values slot-major), written out here
 * rather than through attn_v_index. */
static size_t v_place(size_t slot, int bs, int kv_dim, int hd, int e) {
    return (slot / (size_t)bs * (size_t)kv_dim + (size_t)(e / hd) * (size_t)hd) * (size_t)bs +
           slot % (size_t)bs * (size_t)hd + (size_t)(e % hd);
}

static void test_paged_attention_matches_contiguous_reference(void) {
    fp16_init();
    enum { HD = 8, NKV = 2, NH = 4, BSZ = 4, NPOS = 23, NBLK = 16 };
    int32_t table[8] = {9, 2, 14, 0, 7, 11, 3, 5};
    float keys[NPOS][NKV * HD], vals[NPOS][NKV * HD];
    for (int p = 0; p < NPOS; p++)
        for (int i = 0; i < NKV * HD; i++) keys[p][i] = frand(), vals[p][i] = frand();
    for (int f16 = 0; f16 < 2; f16++) {
        size_t elem = f16 ? 2 : 4;
        uint8_t *kpool = calloc(NBLK * BSZ * NKV * HD, elem), *vpool = calloc(NBLK * BSZ * NKV * HD, elem);
        for (int p = 0; p < NPOS; p++) {
            size_t slot = (size_t)table[p / BSZ] * BSZ + p % BSZ;
            for (int i = 0; i < NKV * HD; i++) {
                if (f16) {
                    uint16_t kh = fp16_f32_to_f16(keys[p][i]), vh = fp16_f32_to_f16(vals[p][i]);
                    memcpy(kpool + attn_k_index((int64_t)slot, BSZ, NKV * HD, i) * 2, &kh, 2);
                    memcpy(vpool + v_place(slot, BSZ, NKV * HD, HD, i) * 2, &vh, 2);
                } else {
                    memcpy(kpool + attn_k_index((int64_t)slot, BSZ, NKV * HD, i) * 4, &keys[p][i], 4);
                    memcpy(vpool + v_place(slot, BSZ, NKV * HD, HD, i) * 4, &vals[p][i], 4);
                }
            }
        }
        pdl_attn_kv kv = {.k = kpool, .v = vpool, .kv_is_f16 = f16, .kv_dim = NKV * HD, .block_table = table,
                          .block_size = BSZ};
        int windows[] = {0, 5};
        float caps[] = {0.0f, 0.5f}; /* no soft-cap; Gemma 2's tanh soft-cap (small, so it bites) */
        for (int ci = 0; ci < 2; ci++)
        for (int wi = 0; wi < 2; wi++) {
            for (int pos = 0; pos < NPOS; pos += 3) {
                for (int h = 0; h < NH; h++) {
                    float q[HD], out[HD], scores[NPOS + 32];
                    for (int i = 0; i < HD; i++) q[i] = frand();
                    int kvh = h / (NH / NKV);
                    /* every build of the body: scalar, AVX2, AVX-512, NEON (the SIMD ones only where the CPU
                     * has them) follow one order of operations (attention.h): the same bits */
                    float outs[ATTN_BUILDS][HD];
                    int n_fns = 0;
                    for (int fi = 0; fi < ATTN_BUILDS; fi++) {
                        if (!cpu_isa_supported(attn_builds[fi].isa)) continue;
                        float *o = outs[n_fns++];
                        const float *qp = q;
                        attn_builds[fi].fn(&o, &qp, &pos, 1, HD, kvh, 0.35f, caps[ci], NULL, windows[wi], &kv, scores);
                    }
                    for (int fi = 1; fi < n_fns; fi++) CHECK(memcmp(outs[fi], outs[0], sizeof outs[0]) == 0);
                    attn_head(out, q, HD, kvh, 0.35f, caps[ci], pos, windows[wi], &kv, scores);
                    int first = windows[wi] && pos - windows[wi] + 1 > 0 ? pos - windows[wi] + 1 : 0;
                    double s[NPOS], mx = -1e300, sum = 0;
                    for (int j = first; j <= pos; j++) {
                        double d = 0;
                        for (int i = 0; i < HD; i++) {
                            float k = f16 ? fp16_f16_to_f32(fp16_f32_to_f16(keys[j][kvh * HD + i])) : keys[j][kvh * HD + i];
                            d += (double)q[i] * k;
                        }
                        s[j] = d * 0.35f;
                        if (caps[ci] > 0) s[j] = caps[ci] * tanh(s[j] / caps[ci]);
                        if (s[j] > mx) mx = s[j];
                    }
                    for (int j = first; j <= pos; j++) sum += (s[j] = exp(s[j] - mx));
                    for (int i = 0; i < HD; i++) {
                        double o = 0;
                        for (int j = first; j <= pos; j++) {
                            float v = f16 ? fp16_f16_to_f32(fp16_f32_to_f16(vals[j][kvh * HD + i])) : vals[j][kvh * HD + i];
                            o += s[j] / sum * v;
                        }
                        CHECK_MSG(fabs(out[i] - o) < 1e-5, "f16=%d cap=%g window=%d pos=%d head=%d dim=%d: %g vs %g",
                                  f16, caps[ci], windows[wi], pos, h, i, out[i], o);
                    }
                }
            }
        }
        free(kpool), free(vpool);
    }
}

static void count_hit(void *ctx, int ith, int nth) {
    (void)nth;
    int *hits = ctx;
    __atomic_add_fetch(&hits[ith], 1, __ATOMIC_SEQ_CST);
}

/* The register-tiled AVX-512 attention (head_dim and block size multiples
 * of 16) and the AVX2 build against the portable body, with wide heads,
 * both KV types, a window and a soft-cap: the same order of operations,
 * so the same bits. */
static void test_wide_head_attention_builds_agree(void) {
    fp16_init();
    enum { NKV = 2, BSZ = 16, NPOS = 70 };
    int hds[] = {64, 128, 256, 48};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        int hd = hds[hi];
        int32_t table[8] = {3, 0, 5, 1, 7};
        for (int f16 = 0; f16 < 2; f16++) {
            size_t elem = f16 ? 2 : 4, n = (size_t)8 * BSZ * NKV * hd;
            uint8_t *kp = calloc(n, elem), *vp = calloc(n, elem);
            for (size_t i = 0; i < n; i++) {
                float a = frand(), b = frand();
                if (f16) {
                    uint16_t ha = fp16_f32_to_f16(a), hb = fp16_f32_to_f16(b);
                    memcpy(kp + 2 * i, &ha, 2), memcpy(vp + 2 * i, &hb, 2);
                } else {
                    memcpy(kp + 4 * i, &a, 4), memcpy(vp + 4 * i, &b, 4);
                }
            }
            pdl_attn_kv kv = {.k = kp, .v = vp, .kv_is_f16 = f16, .kv_dim = NKV * hd, .block_table = table,
                              .block_size = BSZ};
            float *q = malloc((size_t)hd * sizeof *q), *o0 = malloc((size_t)hd * sizeof *o0);
            float *o1 = malloc((size_t)hd * sizeof *o1), scores[NPOS + 32];
            for (int i = 0; i < hd; i++) q[i] = frand();
            for (int pos = 0; pos < NPOS; pos += 7)
                for (int cfg = 0; cfg < 3; cfg++) {
                    int window = cfg == 1 ? 9 : 0;
                    float cap = cfg == 2 ? 0.5f : 0.0f;
                    const float *qp = q;
                    attn_queries_scalar(&o0, &qp, &pos, 1, hd, 1, 0.2f, cap, NULL, window, &kv, scores);
                    for (int b = 1; b < ATTN_BUILDS; b++) {
                        if (!cpu_isa_supported(attn_builds[b].isa)) continue;
                        attn_builds[b].fn(&o1, &qp, &pos, 1, hd, 1, 0.2f, cap, NULL, window, &kv, scores);
                        CHECK_MSG(memcmp(o0, o1, (size_t)hd * sizeof *o0) == 0, "%s head_dim %d f16=%d pos %d cfg %d differs",
                                  cpu_isa_name(attn_builds[b].isa), hd, f16, pos, cfg);
                    }
                }
            free(q), free(o0), free(o1), free(kp), free(vp);
        }
    }
}

static void test_threadpool_runs_every_share_once(void) {
    for (int n = 1; n <= 4; n++) {
        pdl_threadpool *p = threadpool_new(n);
        REQUIRE(p != NULL);
        CHECK_EQ_INT(threadpool_size(p), n);
        for (int rep = 0; rep < 50; rep++) {
            int hits[4] = {0};
            threadpool_run(p, count_hit, hits);
            for (int i = 0; i < n; i++) CHECK_EQ_INT(hits[i], 1);
        }
        threadpool_free(p);
    }
}

/* Regions of different widths in turn on an oversubscribed pool (4
 * threads on this machine's cores): each region's every share runs exactly
 * once, with the region's own width, and has finished when run_n returns. A
 * worker left out of one region must not take the next region's width or
 * task for the one it skipped (it ran a region's share twice, so run_n
 * returned while a share still ran: wrong matmul results 1-2 times in 200
 * runs of test_kquant, and a crash when the region's task had left the
 * stack). */
typedef struct region_check {
    atomic_int hits[4];
    atomic_int bad_width;
    int width;
} region_check;

static void region_hit(void *p, int ith, int nth) {
    region_check *r = p;
    if (nth != r->width) atomic_fetch_add(&r->bad_width, 1);
    for (volatile int spin = 0; spin < (ith * 37) % 200; spin++) {
    }
    atomic_fetch_add(&r->hits[ith], 1);
}

static void test_threadpool_regions_of_changing_width(void) {
    pdl_threadpool *p = threadpool_new(4);
    REQUIRE(p != NULL);
    long wrong = 0;
    for (int rep = 0; rep < 40000 && wrong < 5; rep++) {
        static const int widths[] = {2, 4, 3, 2, 2, 4};
        region_check r = {.width = widths[rep % 6]};
        for (int i = 0; i < 4; i++) atomic_init(&r.hits[i], 0);
        atomic_init(&r.bad_width, 0);
        threadpool_run_n(p, r.width, region_hit, &r);
        bool ok = atomic_load(&r.bad_width) == 0;
        for (int i = 0; i < 4; i++) ok = ok && atomic_load(&r.hits[i]) == (i < r.width ? 1 : 0);
        if (!ok) wrong++;
    }
    CHECK_MSG(wrong == 0, "%ld regions ran a share twice, with another width, or returned before a share finished",
              wrong);
    threadpool_free(p);
}

static void test_split_range_covers_everything_once(void) {
    for (long n = 0; n < 50; n++)
        for (int nth = 1; nth <= 7; nth++) {
            long next = 0;
            for (int i = 0; i < nth; i++) {
                long b, e;
                threadpool_split_range(n, i, nth, &b, &e);
                CHECK(b == next && e >= b);
                next = e;
            }
            CHECK(next == n);
        }
}

/* The gated delta rule (kernels/delta_rule.h), one value head over 150
 * rows (two 64-position chunks closed, widths 24 so the 8-lane dots have
 * tails): the portable kernel against the recurrence in float64 (within
 * 1e-4 of the largest output: float32 sums over up to 64 rows and 24
 * dimensions, ~1e-6 measured), every family's build equal to it bit for
 * bit (the same sums in the same order, no contraction), and the rows cut
 * into two calls at position 70 (the second reading the first's chunk rows)
 * equal to one call. */
static void run_rule(delta_rule_fn fn, int K, int V, int T, const float *qkv, const float *bg, float *o, int split) {
    enum { C = 64 };
    float *S = calloc((size_t)K * V, sizeof *S), *keys = calloc((size_t)C * K, sizeof *keys);
    float *delta = calloc((size_t)C * V, sizeof *delta), *decay = calloc(C, sizeof *decay);
    float *scratch = malloc(delta_rule_scratch_floats(C, V) * sizeof *scratch);
    int cuts[3] = {0, split, T};
    for (int p = 0; p < 2; p++) {
        int r0 = cuts[p], n = cuts[p + 1] - r0;
        if (n <= 0) continue;
        size_t st = (size_t)(2 * K + V);
        delta_rule_seg g = {.k_dim = K, .v_dim = V, .chunk = C, .S = S, .chunk_keys = keys, .keys_stride = (size_t)K,
                            .chunk_delta = delta, .delta_stride = (size_t)V, .chunk_decay = decay, .decay_stride = 1,
                            .first_pos = r0, .n = n, .q = qkv + r0 * st, .k = qkv + r0 * st + K,
                            .v = qkv + r0 * st + 2 * K, .qkv_stride = st, .beta = bg + 2 * r0, .g = bg + 2 * r0 + 1,
                            .gate_stride = 2, .o = o + (size_t)r0 * V, .o_stride = (size_t)V, .scratch = scratch};
        fn(&g);
        for (int r = r0; r < r0 + n; r++) /* the caller keeps the chunk's keys, as deltanet.c does */
            if (r >= (r0 + n - 1) / C * C) memcpy(keys + (size_t)(r % C) * K, g.k + (size_t)(r - r0) * st, K * sizeof *keys);
    }
    free(S), free(keys), free(delta), free(decay), free(scratch);
}

static void test_delta_rule_builds_agree(void) {
    enum { K = 24, V = 24, T = 150 };
    static float qkv[T][2 * K + V], bg[T][2], o_ref[T * V], o[T * V];
    for (int t = 0; t < T; t++) {
        double nq = 0, nk = 0;
        for (int i = 0; i < 2 * K + V; i++) qkv[t][i] = frand();
        for (int i = 0; i < K; i++) nq += qkv[t][i] * qkv[t][i], nk += qkv[t][K + i] * qkv[t][K + i];
        for (int i = 0; i < K; i++) qkv[t][i] /= (float)(sqrt(nq) * sqrt((double)K)), qkv[t][K + i] /= (float)sqrt(nk);
        bg[t][0] = 0.5f + 0.45f * frand(); /* beta */
        bg[t][1] = -0.5f + 0.45f * frand(); /* log decay, below 0 */
    }
    run_rule(delta_rule_portable, K, V, T, &qkv[0][0], &bg[0][0], o_ref, T);
    /* the recurrence in float64 */
    static double S[K][V];
    double worst = 0, top = 0;
    for (int t = 0; t < T; t++) {
        const float *q = qkv[t], *k = qkv[t] + K, *v = qkv[t] + 2 * K;
        double e = exp((double)bg[t][1]), d[V];
        for (int a = 0; a < K; a++)
            for (int c = 0; c < V; c++) S[a][c] *= e;
        for (int c = 0; c < V; c++) {
            double m = 0;
            for (int a = 0; a < K; a++) m += S[a][c] * k[a];
            d[c] = bg[t][0] * (v[c] - m);
        }
        for (int a = 0; a < K; a++)
            for (int c = 0; c < V; c++) S[a][c] += k[a] * d[c];
        for (int c = 0; c < V; c++) {
            double want = 0;
            for (int a = 0; a < K; a++) want += S[a][c] * q[a];
            worst = fmax(worst, fabs(want - o_ref[t * V + c]));
            top = fmax(top, fabs(want));
        }
    }
    CHECK_MSG(worst < 1e-4 * top, "delta rule: %.3g off the float64 recurrence (largest output %.3g)", worst, top);
    const struct { pdl_isa isa; delta_rule_fn fn; } builds[] = {
        {PDL_ISA_SCALAR, delta_rule_portable},
#if defined(__x86_64__) || defined(__i386__)
        {PDL_ISA_AVX2, delta_rule_avx2}, {PDL_ISA_AVX512, delta_rule_avx512},
#endif
#if defined(__aarch64__)
        {PDL_ISA_NEON, delta_rule_neon},
#endif
    };
    for (size_t bi = 0; bi < sizeof builds / sizeof builds[0]; bi++) {
        if (!cpu_isa_supported(builds[bi].isa)) continue;
        for (int split = 70; split <= T; split += T - 70) {
            memset(o, 0, sizeof o);
            run_rule(builds[bi].fn, K, V, T, &qkv[0][0], &bg[0][0], o, split);
            CHECK_MSG(memcmp(o, o_ref, sizeof o) == 0, "delta rule %s (cut at %d) differs from the portable one",
                      cpu_isa_name(builds[bi].isa), split);
        }
    }
}

int main(void) {
    RUN(test_f16_round_trip_is_exact_for_all_halves);
    RUN(test_f32_to_f16_rounds_to_nearest_even);
    RUN(test_bf16_widens_exactly);
    RUN(test_matmul_matches_float64_for_every_dtype);
    RUN(test_simd_matmul_matches_scalar_on_ragged_shapes);
    RUN(test_q8_0_activation_quantization);
    RUN(test_silu_builds_agree);
    RUN(test_gelu_tanh_builds_agree);
    RUN(test_swiglu_oai_builds_agree);
    RUN(test_delta_rule_builds_agree);
    RUN(test_rmsnorm_matches_definition);
    RUN(test_rope_adjacent_pairs_equal_rotate_half_under_permutation);
    RUN(test_paged_attention_matches_contiguous_reference);
    RUN(test_wide_head_attention_builds_agree);
    RUN(test_threadpool_runs_every_share_once);
    RUN(test_threadpool_regions_of_changing_width);
    RUN(test_split_range_covers_everything_once);
    scratch_free(&scratch);
    return test_summary();
}
