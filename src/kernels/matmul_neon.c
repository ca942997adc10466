/*
 * matmul_neon.c - aarch64 Advanced SIMD tiles for F32, F16, BF16, Q8_0,
 * Q4_0, MXFP4, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0 and TQ1_0 weights, and the Q8_0 activation quantizer. NEON is
 * part of the aarch64 base, so this builds with the default flags; the
 * integer-weight tiles with SDOT are in matmul_neon_dotprod.c (same bits;
 * both builds of them in matmul_neon_q_body.h).
 *
 * Float tiles (matmul_float_tile_body.h at 4 lanes): 4 rows x 4 weight rows = 16
 * accumulators (of the 32 vector registers), each element one accumulator
 * carried over k in steps of 4 (F16 widened by FCVTL, BF16 by a 16-bit
 * shift: both exact), reduced by FADDP.
 */
#include "kernels/matmul_table.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

#include "kernels/fp16.h"

#define TR 4
#define TC 4

/* Tiles of fewer than TR rows (decode) stream their weights once per
 * token: every 64 bytes of a weight row also prefetch the same bytes of
 * the row PF_ROWS ahead, as the x86 tiles do. */
#define PF_ROWS 16

static inline float32x4_t w4_f32(const uint8_t *w, int64_t k) { return vld1q_f32((const float *)(const void *)w + k); }
static inline float32x4_t w4_f16(const uint8_t *w, int64_t k) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)w + k)));
}
static inline float32x4_t w4_bf16(const uint8_t *w, int64_t k) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(const void *)w + k), 16));
}

typedef float32x4_t mt_v;
#define MT_W 4
static inline mt_v mt_zero(void) { return vdupq_n_f32(0.0f); }
static inline mt_v mt_loadx(const float *p) { return vld1q_f32(p); }
static inline mt_v mt_fmadd(mt_v a, mt_v b, mt_v c) { return vfmaq_f32(c, a, b); }
static inline float mt_hsum(mt_v v) { return vaddvq_f32(v); }
static inline __attribute__((always_inline)) void mt_prefetch(const uint8_t *p) { __builtin_prefetch(p); }
#include "kernels/matmul_float_tile_body.h"

DEFINE_TILE(tile_f32, w4_f32, float)
DEFINE_TILE(tile_f16, w4_f16, uint16_t)
DEFINE_TILE(tile_bf16, w4_bf16, uint16_t)

/* The 4-sums of a Q8_0 block's products without SDOT: SMULL gives exact
 * int16 products (|w x| <= 128 * 127), SADDLP adds neighbours into int32,
 * ADDP the pairs of those. */
static inline void q_sums(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1, int32x4_t *lo, int32x4_t *hi) {
    int32x4_t a = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
    int32x4_t b = vpaddlq_s16(vmull_high_s8(w0, x0));
    int32x4_t c = vpaddlq_s16(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
    int32x4_t d = vpaddlq_s16(vmull_high_s8(w1, x1));
    *lo = vpaddq_s32(a, b);
    *hi = vpaddq_s32(c, d);
}
#include "kernels/matmul_neon_q_body.h"

const pdl_tile_kernels matmul_tiles_neon = {
    .tile_rows = TR,
    .tile_cols = TC,
    .fn = {[PDL_DTYPE_F32] = tile_f32, [PDL_DTYPE_F16] = tile_f16, [PDL_DTYPE_BF16] = tile_bf16},
    .q8 = tile_q8_0,
    .q4 = tile_q4_0,
    .mxfp4 = tile_mxfp4,
    .iq4nl = tile_iq4_nl,
    .q5_0 = tile_q5_0,
    .q4_1 = tile_q4_1,
    .q5_1 = tile_q5_1,
    .q4k = tile_q4_k,
    .q5k = tile_q5_k,
    .q6k = tile_q6_k,
    .q3k = tile_q3_k,
    .q2k = tile_q2_k,
    .iq4xs = tile_iq4_xs,
    .tq2 = tile_tq2_0,
    .tq1 = tile_tq1_0,
};

/* matmul_quantize_row_q8_0_sums on 4 lanes: the amax (exact in any order;
 * FMAXNM skips NaN as the portable comparison does), the scale and its
 * inverse as the portable code computes them, FCVTNS (nearest, ties to
 * even: lrintf in the default mode), and each block's sum. */
void matmul_quantize_row_q8_0_neon(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float32x4_t v[8], m = vdupq_n_f32(0.0f);
        for (int i = 0; i < 8; i++) {
            v[i] = vld1q_f32(xb + 4 * i);
            m = vmaxnmq_f32(m, vabsq_f32(v[i]));
        }
        float amax = vmaxnmvq_f32(m);
        float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        float32x4_t vi = vdupq_n_f32(inv);
        int8x16_t q[2];
        for (int h = 0; h < 2; h++) {
            int16x8_t a = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[4 * h], vi))),
                                       vmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[4 * h + 1], vi))));
            int16x8_t c = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[4 * h + 2], vi))),
                                       vmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[4 * h + 3], vi))));
            q[h] = vcombine_s8(vmovn_s16(a), vmovn_s16(c));
            vst1q_s8(qs + b * 32 + 16 * h, q[h]);
        }
        d[b] = fp16_f16_to_f32(fp16_f32_to_f16(scale)); /* stored as a half, as GGUF's Q8_0 */
        if (sums) sums[b] = (int32_t)vaddlvq_s8(q[0]) + (int32_t)vaddlvq_s8(q[1]);
    }
}
#else
/* Not built for this target: the family has no kernels. */
const pdl_tile_kernels matmul_tiles_neon = {0};
#endif
