/*
 * matmul_neon_q_body.h - the integer-weight tile bodies of the NEON families
 * (Q8_0, Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0, TQ1_0), written once and
 * included by matmul_neon.c (integer sums by widening multiplies, Armv8.0) and matmul_neon_dotprod.c
 * (by SDOT, Armv8.2). Both builds compute the same integers, so every
 * build gives the portable bits.
 *
 * Q8_0 / Q4_0 / MXFP4 / IQ4_NL: the order is matmul.c's dot_q8_0_q8 (llama.cpp's): per
 * 32-block, lane j of two 4-lane vectors holds the exact int32 sum of
 * products 4j .. 4j+3; lanes are scaled by d_w * d_x with one fused
 * multiply-add each into 8 accumulators, which are added as
 * (a0+a4 + a2+a6) + (a1+a5 + a3+a7).
 * Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS: kquant.h's order: per super-block, a weight row's 256
 * values are unpacked once to int8 (Q6_K's already minus 32, Q3_K's -4..3) and serve
 * every activation row of the tile; isum = sum over the 16 groups of 16
 * of scale x (exact int32 dot), then one fmaf per term per element.
 * TQ2_0 / TQ1_0: the same with the values c - 1 and no scales (tq_body).
 *
 * The including file defines TR, TC, PF_ROWS and
 *   q_sums(w0, w1, x0, x1, &lo, &hi): the 4-sums of elements 0-15 (lo)
 *   and 16-31 (hi) of a block, w and x as int8x16 halves;
 * and gets tile_q8_0, tile_q4_0, tile_mxfp4, tile_iq4_nl, tile_q5_0, tile_q4_1, tile_q5_1 (pdl_tile_q8_fn), tile_q2_k,
 * tile_q3_k, tile_q4_k, tile_q5_k, tile_q6_k, tile_iq4_xs, tile_tq2_0 and tile_tq1_0 (pdl_tile_kq_fn).
 */
#include <math.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/iq4nl.h"
#include "kernels/kquant.h"
#include "kernels/legacy_quant.h"
#include "kernels/mxfp4.h"

static inline float neon_half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_f16_to_f32_hw(h);
}

/* The accumulators' final tree: s = lo + hi lane-wise (a0+a4, ..., a3+a7),
 * then (s0 + s2) + (s1 + s3). */
static inline float q_reduce(float32x4_t lo, float32x4_t hi) {
    float32x4_t s = vaddq_f32(lo, hi);
    float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

static inline __attribute__((always_inline)) void q_body(const int8_t *xq, const float *xd, int64_t nb, int rows,
                                                         const uint8_t *w, size_t wrb, int cols, float *out,
                                                         int64_t ldo, int q4) {
    /* q4: 0 Q8_0, 1 Q4_0, 2 MXFP4 (doubled E2M1 codes by a table lookup,
     * kernels/mxfp4.h), 3 IQ4_NL (Q4_0's block, its codes' int8 values by
     * a table lookup, kernels/iq4nl.h) */
    const size_t bb = q4 == 2 ? 17 : q4 ? 18 : 34;
    const int8x16_t code2 = vld1q_s8(q4 == 3 ? iq4nl_values : mxfp4_code2);
    for (int r = 0; r < rows; r++) {
        float32x4_t lo_acc[TC], hi_acc[TC];
        for (int c = 0; c < TC; c++) lo_acc[c] = hi_acc[c] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; b++) {
            int8x16_t x0 = vld1q_s8(xq + (r * nb + b) * 32), x1 = vld1q_s8(xq + (r * nb + b) * 32 + 16);
            float dx = xd[r * nb + b];
            for (int c = 0; c < cols; c++) {
                const uint8_t *blk = w + c * wrb + b * bb;
                if (rows < TR && r == 0) __builtin_prefetch(blk + PF_ROWS * wrb); /* bb < 64: every line */
                int8x16_t w0, w1;
                if (q4 >= 2) { /* byte 1 + j (IQ4_NL: 2 + j): element j (low nibble) and j + 16 (high) */
                    uint8x16_t n = vld1q_u8(blk + (q4 == 2 ? 1 : 2));
                    w0 = vqtbl1q_s8(code2, vandq_u8(n, vdupq_n_u8(0xF)));
                    w1 = vqtbl1q_s8(code2, vshrq_n_u8(n, 4));
                } else if (q4) { /* byte j: element j (low nibble) and j + 16 (high), stored + 8 */
                    uint8x16_t n = vld1q_u8(blk + 2);
                    w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(n, vdupq_n_u8(0xF))), vdupq_n_s8(8));
                    w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(n, 4)), vdupq_n_s8(8));
                } else {
                    w0 = vld1q_s8((const int8_t *)(blk + 2));
                    w1 = vld1q_s8((const int8_t *)(blk + 18));
                }
                int32x4_t lo, hi;
                q_sums(w0, w1, x0, x1, &lo, &hi);
                float32x4_t d = vdupq_n_f32((q4 == 2 ? mxfp4_scale_half(blk[0]) : neon_half(blk)) * dx);
                lo_acc[c] = vfmaq_f32(lo_acc[c], vcvtq_f32_s32(lo), d);
                hi_acc[c] = vfmaq_f32(hi_acc[c], vcvtq_f32_s32(hi), d);
            }
        }
        for (int c = 0; c < cols; c++) out[r * ldo + c] = q_reduce(lo_acc[c], hi_acc[c]);
    }
}

static void tile_q8_0(const int8_t *xq, const float *xd, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                      int cols, float *out, int64_t ldo, bool stream) {
    (void)stream; /* these tiles do not prefetch */
    if (cols == TC) q_body(xq, xd, nb, rows, w, wrb, TC, out, ldo, 0);
    else q_body(xq, xd, nb, rows, w, wrb, cols, out, ldo, 0);
}

static void tile_q4_0(const int8_t *xq, const float *xd, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                      int cols, float *out, int64_t ldo, bool stream) {
    (void)stream; /* these tiles do not prefetch */
    if (cols == TC) q_body(xq, xd, nb, rows, w, wrb, TC, out, ldo, 1);
    else q_body(xq, xd, nb, rows, w, wrb, cols, out, ldo, 1);
}

static void tile_mxfp4(const int8_t *xq, const float *xd, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                       int cols, float *out, int64_t ldo, bool stream) {
    (void)stream; /* these tiles do not prefetch */
    if (cols == TC) q_body(xq, xd, nb, rows, w, wrb, TC, out, ldo, 2);
    else q_body(xq, xd, nb, rows, w, wrb, cols, out, ldo, 2);
}

static void tile_iq4_nl(const int8_t *xq, const float *xd, int64_t nb, int rows, const uint8_t *w, size_t wrb,
                        int cols, float *out, int64_t ldo, bool stream) {
    (void)stream; /* these tiles do not prefetch */
    if (cols == TC) q_body(xq, xd, nb, rows, w, wrb, TC, out, ldo, 3);
    else q_body(xq, xd, nb, rows, w, wrb, cols, out, ldo, 3);
}

/* Q5_0, Q4_1 and Q5_1 (kernels/legacy_quant.h) in matmul.c's dot_legacy_q8
 * order: a block's codes as int8 (the nibbles, Q5: each plus 16 times its
 * qh bit, spread to bytes by a table lookup and VTST; Q5_0: minus 16), the
 * lanes' 4-sums by q_sums, one fma per lane; Q4_1 / Q5_1 then add x's
 * 4-sums (q_sums with weights 1) times m_w * d_x by a second fma. */
static inline void leg_high(const uint8_t *p, uint8x16_t *lo, uint8x16_t *hi) {
    uint32_t qh;
    memcpy(&qh, p, 4);
    static const uint8_t idx_lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t idx_hi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t v = vreinterpretq_u8_u32(vdupq_n_u32(qh)), m = vld1q_u8(bits), f = vdupq_n_u8(0x10);
    *lo = vandq_u8(vtstq_u8(vqtbl1q_u8(v, vld1q_u8(idx_lo)), m), f);
    *hi = vandq_u8(vtstq_u8(vqtbl1q_u8(v, vld1q_u8(idx_hi)), m), f);
}

static inline __attribute__((always_inline)) void leg_body(const int8_t *xq, const float *xd, int64_t nb, int rows,
                                                           const uint8_t *w, size_t wrb, int cols, float *out,
                                                           int64_t ldo, pdl_dtype dt) {
    const size_t bb = legacy_block_bytes(dt), qs_at = legacy_qs_at(dt), qh_at = legacy_qh_at(dt);
    const bool q5 = dt != PDL_DTYPE_Q4_1, with_min = dt != PDL_DTYPE_Q5_0;
    const int8x16_t one = vdupq_n_s8(1);
    for (int r = 0; r < rows; r++) {
        float32x4_t lo_acc[TC], hi_acc[TC];
        for (int c = 0; c < TC; c++) lo_acc[c] = hi_acc[c] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; b++) {
            int8x16_t x0 = vld1q_s8(xq + (r * nb + b) * 32), x1 = vld1q_s8(xq + (r * nb + b) * 32 + 16);
            float dx = xd[r * nb + b];
            int32x4_t xs_lo = vdupq_n_s32(0), xs_hi = vdupq_n_s32(0);
            if (with_min) q_sums(one, one, x0, x1, &xs_lo, &xs_hi);
            for (int c = 0; c < cols; c++) {
                const uint8_t *blk = w + c * wrb + b * bb;
                if (rows < TR && r == 0) __builtin_prefetch(blk + PF_ROWS * wrb); /* bb < 64: every line */
                uint8x16_t n = vld1q_u8(blk + qs_at);
                uint8x16_t c0 = vandq_u8(n, vdupq_n_u8(0xF)), c1 = vshrq_n_u8(n, 4);
                if (q5) {
                    uint8x16_t h0, h1;
                    leg_high(blk + qh_at, &h0, &h1);
                    c0 = vorrq_u8(c0, h0), c1 = vorrq_u8(c1, h1);
                }
                int8x16_t w0 = vreinterpretq_s8_u8(c0), w1 = vreinterpretq_s8_u8(c1);
                if (!with_min) w0 = vsubq_s8(w0, vdupq_n_s8(16)), w1 = vsubq_s8(w1, vdupq_n_s8(16));
                int32x4_t lo, hi;
                q_sums(w0, w1, x0, x1, &lo, &hi);
                float32x4_t d = vdupq_n_f32(neon_half(blk) * dx);
                lo_acc[c] = vfmaq_f32(lo_acc[c], vcvtq_f32_s32(lo), d);
                hi_acc[c] = vfmaq_f32(hi_acc[c], vcvtq_f32_s32(hi), d);
                if (with_min) {
                    float32x4_t m = vdupq_n_f32(neon_half(blk + 2) * dx);
                    lo_acc[c] = vfmaq_f32(lo_acc[c], vcvtq_f32_s32(xs_lo), m);
                    hi_acc[c] = vfmaq_f32(hi_acc[c], vcvtq_f32_s32(xs_hi), m);
                }
            }
        }
        for (int c = 0; c < cols; c++) out[r * ldo + c] = q_reduce(lo_acc[c], hi_acc[c]);
    }
}

#define DEFINE_LEGACY_TILE(NAME, DT)                                                                             \
    static void NAME(const int8_t *xq, const float *xd, int64_t nb, int rows, const uint8_t *w, size_t wrb,    \
                     int cols, float *out, int64_t ldo, bool stream) {                                          \
        (void)stream; /* these tiles do not prefetch */                                                         \
        if (cols == TC) leg_body(xq, xd, nb, rows, w, wrb, TC, out, ldo, DT);                                   \
        else leg_body(xq, xd, nb, rows, w, wrb, cols, out, ldo, DT);                                            \
    }
DEFINE_LEGACY_TILE(tile_q5_0, PDL_DTYPE_Q5_0)
DEFINE_LEGACY_TILE(tile_q4_1, PDL_DTYPE_Q4_1)
DEFINE_LEGACY_TILE(tile_q5_1, PDL_DTYPE_Q5_1)

/* sum over g < 16 of sc[g] * (sum of the 16 products of group g), exact:
 * |sum| < 2^31 for Q4_K (|q| < 16, sc < 64), Q5_K (q < 32), Q6_K (|q| <= 32, |sc| <= 128),
 * Q3_K (|q| <= 4, |sc| <= 32), Q2_K (q <= 3, sc < 16) and IQ4_XS (|q| <= 127, |sc| <= 32). */
static inline int32_t kq_isum(const int8_t *wq, const int8_t *xq, const int32_t sc[16]) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int g = 0; g < 16; g += 2) {
        int32x4_t lo, hi;
        q_sums(vld1q_s8(wq + 16 * g), vld1q_s8(wq + 16 * g + 16), vld1q_s8(xq + 16 * g), vld1q_s8(xq + 16 * g + 16),
               &lo, &hi);
        acc = vmlaq_n_s32(acc, lo, sc[g]);
        acc = vmlaq_n_s32(acc, hi, sc[g + 1]);
    }
    return vaddvq_s32(acc);
}

/* A Q4_K block's 256 nibbles as int8 (sub-block j: the low, j even, or
 * high nibbles of qs[32 (j / 2) ..]), its 8 scales per 16-group and mins. */
static inline void q4k_unpack(const uint8_t *blk, int8_t wq[256], int32_t sc[16], int32_t mn[8]) {
    uint64_t s8, m8;
    kquant_q4_k_scales_mins(blk, &s8, &m8);
    for (int j = 0; j < 8; j++) {
        sc[2 * j] = sc[2 * j + 1] = (int32_t)((s8 >> (8 * j)) & 0xFF);
        mn[j] = (int32_t)((m8 >> (8 * j)) & 0xFF);
    }
    const uint8_t *qs = blk + 16;
    for (int i = 0; i < 4; i++)
        for (int h = 0; h < 2; h++) {
            uint8x16_t v = vld1q_u8(qs + 32 * i + 16 * h);
            vst1q_s8(wq + 64 * i + 16 * h, vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0xF))));
            vst1q_s8(wq + 64 * i + 32 + 16 * h, vreinterpretq_s8_u8(vshrq_n_u8(v, 4)));
        }
}

/* A Q5_K block's 256 values 0..31 as int8 (Q4_K's nibbles at qs = blk + 48
 * plus 16 times bit j of qh[l] = blk[16 + l] for element 32 j + l), its
 * scales and mins as q4k_unpack's. */
static inline void q5k_unpack(const uint8_t *blk, int8_t wq[256], int32_t sc[16], int32_t mn[8]) {
    uint64_t s8, m8;
    kquant_q4_k_scales_mins(blk, &s8, &m8);
    for (int j = 0; j < 8; j++) {
        sc[2 * j] = sc[2 * j + 1] = (int32_t)((s8 >> (8 * j)) & 0xFF);
        mn[j] = (int32_t)((m8 >> (8 * j)) & 0xFF);
    }
    const uint8_t *qs = blk + 48;
    for (int h = 0; h < 2; h++) {
        uint8x16_t qh = vld1q_u8(blk + 16 + 16 * h);
        for (int i = 0; i < 4; i++) {
            uint8x16_t v = vld1q_u8(qs + 32 * i + 16 * h);
            uint8x16_t hl = vshlq_n_u8(vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * i))), vdupq_n_u8(1)), 4);
            uint8x16_t hh = vshlq_n_u8(vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * i - 1))), vdupq_n_u8(1)), 4);
            vst1q_s8(wq + 64 * i + 16 * h, vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, vdupq_n_u8(0xF)), hl)));
            vst1q_s8(wq + 64 * i + 32 + 16 * h, vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), hh)));
        }
    }
}

/* A Q6_K block's 256 values minus 32 as int8 (chunk t = 4 h + k: nibble
 * k / 2 of ql[64 h + 32 (k % 2) ..], bits 2k of qh[32 h ..]), its 16 scales. */
static inline void q6k_unpack(const uint8_t *blk, int8_t wq[256], int32_t sc[16]) {
    for (int g = 0; g < 16; g++) sc[g] = ((const int8_t *)(blk + 192))[g];
    for (int t = 0; t < 8; t++) {
        int h = t / 4, k = t % 4;
        for (int half = 0; half < 2; half++) {
            uint8x16_t ql = vld1q_u8(blk + 64 * h + 32 * (k % 2) + 16 * half);
            uint8x16_t qh = vld1q_u8(blk + 128 + 32 * h + 16 * half);
            uint8x16_t lo = k / 2 ? vshrq_n_u8(ql, 4) : vandq_u8(ql, vdupq_n_u8(0xF));
            uint8x16_t top = vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * k))), vdupq_n_u8(3));
            uint8x16_t q = vorrq_u8(lo, vshlq_n_u8(top, 4));
            vst1q_s8(wq + 32 * t + 16 * half, vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(32)));
        }
    }
}

/* A Q3_K block's 256 values -4..3 as int8 (chunk t = 4 h + k: bits 2k of
 * qs[32 h ..] = blk[32 + 32 h ..], minus 4 unless bit t of hmask[l] =
 * blk[l] is set), its 16 scales minus 32. */
static inline void q3k_unpack(const uint8_t *blk, int8_t wq[256], int32_t sc[16]) {
    int8_t s8[16];
    kquant_q3_k_scales(blk + 96, s8);
    for (int g = 0; g < 16; g++) sc[g] = s8[g];
    for (int t = 0; t < 8; t++) {
        int h = t / 4, k = t % 4;
        for (int half = 0; half < 2; half++) {
            uint8x16_t qs = vld1q_u8(blk + 32 + 32 * h + 16 * half);
            uint8x16_t hm = vld1q_u8(blk + 16 * half);
            uint8x16_t lo = vandq_u8(vshlq_u8(qs, vdupq_n_s8((int8_t)(-2 * k))), vdupq_n_u8(3));
            uint8x16_t hb = vandq_u8(vshlq_u8(hm, vdupq_n_s8((int8_t)(-t))), vdupq_n_u8(1));
            uint8x16_t q = vorrq_u8(lo, vshlq_n_u8(hb, 2));
            vst1q_s8(wq + 32 * t + 16 * half, vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(4)));
        }
    }
}

/* A Q2_K block's 256 values 0..3 as int8 (Q3_K's chunks of qs = blk +
 * 16), its 16 scales (low nibbles of blk[0..15]) and mins (high). */
static inline void q2k_unpack(const uint8_t *blk, int8_t wq[256], int32_t sc[16], int32_t mn[16]) {
    for (int g = 0; g < 16; g++) sc[g] = blk[g] & 0xF, mn[g] = blk[g] >> 4;
    for (int t = 0; t < 8; t++) {
        int h = t / 4, k = t % 4;
        for (int half = 0; half < 2; half++) {
            uint8x16_t qs = vld1q_u8(blk + 16 + 32 * h + 16 * half);
            uint8x16_t q = vandq_u8(vshlq_u8(qs, vdupq_n_s8((int8_t)(-2 * k))), vdupq_n_u8(3));
            vst1q_s8(wq + 32 * t + 16 * half, vreinterpretq_s8_u8(q));
        }
    }
}

/* An IQ4_XS block's 256 values as int8 (sub-block j: the low then the high
 * nibbles of the codes at blk + 8 + 16 j through kernels/iq4nl.h's table),
 * its 8 signed scales ls_j - 32 per 16-group. */
static inline void iq4xs_unpack(const uint8_t *blk, int8_t wq[256], int32_t sc[16]) {
    const int8x16_t values = vld1q_s8(iq4nl_values);
    for (int j = 0; j < 8; j++) {
        sc[2 * j] = sc[2 * j + 1] = kquant_iq4_xs_scale(blk, j);
        uint8x16_t v = vld1q_u8(blk + 8 + 16 * j);
        vst1q_s8(wq + 32 * j, vqtbl1q_s8(values, vandq_u8(v, vdupq_n_u8(0xF))));
        vst1q_s8(wq + 32 * j + 16, vqtbl1q_s8(values, vshrq_n_u8(v, 4)));
    }
}

static inline __attribute__((always_inline)) void kq_body(const pdl_block_q8k *x, int64_t nb, int nr,
                                                          const uint8_t *w, size_t wrb, int nc, float *out,
                                                          int64_t ldo, int q6) {
    /* q6: 0 Q4_K, 1 Q6_K, 2 Q5_K, 3 Q3_K, 4 Q2_K, 5 IQ4_XS */
    const size_t bb = q6 == 1 ? 210 : q6 == 2 ? 176 : q6 == 3 ? 110 : q6 == 4 ? 84 : q6 == 5 ? 136 : 144;
    float acc[TR][TC];
    for (int r = 0; r < TR; r++)
        for (int c = 0; c < TC; c++) acc[r][c] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            for (size_t o = 0; o < bb; o += 64) __builtin_prefetch(blk + PF_ROWS * wrb + o);
            int8_t wq[256];
            int32_t sc[16], mn[16];
            float dw, dm = 0.0f;
            if (q6 == 1) {
                q6k_unpack(blk, wq, sc);
                dw = neon_half(blk + 208);
            } else if (q6 == 3) {
                q3k_unpack(blk, wq, sc);
                dw = neon_half(blk + 108);
            } else if (q6 == 4) {
                q2k_unpack(blk, wq, sc, mn);
                dw = neon_half(blk + 80);
                dm = neon_half(blk + 82);
            } else if (q6 == 5) {
                iq4xs_unpack(blk, wq, sc);
                dw = neon_half(blk);
            } else {
                if (q6 == 2) q5k_unpack(blk, wq, sc, mn);
                else q4k_unpack(blk, wq, sc, mn);
                dw = neon_half(blk);
                dm = neon_half(blk + 2);
            }
            for (int r = 0; r < nr; r++) {
                const pdl_block_q8k *xb = x + r * nb + b;
                int32_t isum = kq_isum(wq, xb->qs, sc);
                acc[r][c] = fmaf(dw * xb->d, (float)isum, acc[r][c]);
                if (q6 == 0 || q6 == 2) {
                    int32_t msum = 0;
                    for (int j = 0; j < 8; j++) msum += mn[j] * xb->bsum32[j];
                    acc[r][c] = fmaf(-(dm * xb->d), (float)msum, acc[r][c]);
                } else if (q6 == 4) {
                    int32_t msum = 0;
                    for (int g = 0; g < 16; g++) msum += mn[g] * xb->bsum16[g];
                    acc[r][c] = fmaf(-(dm * xb->d), (float)msum, acc[r][c]);
                }
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r * ldo + c] = acc[r][c];
}

static void tile_q4_k(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                      float *out, int64_t ldo) {
    if (rows == TR && cols == TC) kq_body(x, nb, TR, w, wrb, TC, out, ldo, 0);
    else if (rows == 1 && cols == TC) kq_body(x, nb, 1, w, wrb, TC, out, ldo, 0);
    else kq_body(x, nb, rows, w, wrb, cols, out, ldo, 0);
}

static void tile_q5_k(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                      float *out, int64_t ldo) {
    if (rows == TR && cols == TC) kq_body(x, nb, TR, w, wrb, TC, out, ldo, 2);
    else if (rows == 1 && cols == TC) kq_body(x, nb, 1, w, wrb, TC, out, ldo, 2);
    else kq_body(x, nb, rows, w, wrb, cols, out, ldo, 2);
}

static void tile_q3_k(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                      float *out, int64_t ldo) {
    if (rows == TR && cols == TC) kq_body(x, nb, TR, w, wrb, TC, out, ldo, 3);
    else if (rows == 1 && cols == TC) kq_body(x, nb, 1, w, wrb, TC, out, ldo, 3);
    else kq_body(x, nb, rows, w, wrb, cols, out, ldo, 3);
}

static void tile_q2_k(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                      float *out, int64_t ldo) {
    if (rows == TR && cols == TC) kq_body(x, nb, TR, w, wrb, TC, out, ldo, 4);
    else if (rows == 1 && cols == TC) kq_body(x, nb, 1, w, wrb, TC, out, ldo, 4);
    else kq_body(x, nb, rows, w, wrb, cols, out, ldo, 4);
}

static void tile_q6_k(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                      float *out, int64_t ldo) {
    if (rows == TR && cols == TC) kq_body(x, nb, TR, w, wrb, TC, out, ldo, 1);
    else if (rows == 1 && cols == TC) kq_body(x, nb, 1, w, wrb, TC, out, ldo, 1);
    else kq_body(x, nb, rows, w, wrb, cols, out, ldo, 1);
}

static void tile_iq4_xs(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                        float *out, int64_t ldo) {
    if (rows == TR && cols == TC) kq_body(x, nb, TR, w, wrb, TC, out, ldo, 5);
    else if (rows == 1 && cols == TC) kq_body(x, nb, 1, w, wrb, TC, out, ldo, 5);
    else kq_body(x, nb, rows, w, wrb, cols, out, ldo, 5);
}

/* TQ2_0 / TQ1_0: a block's 256 values c - 1 (-1..1) as int8, unpacked once
 * per column and super-block (TQ2_0: Q2_K's chunks of the 64 code bytes;
 * TQ1_0: trit n of a byte is the top byte of (q 3^n mod 256) times 3, as
 * kquant_tq1_0_trit), then per activation row the exact sum by q_sums over
 * the 8 chunks of 32 and kquant.h's one fmaf. */
static inline void tq2_unpack(const uint8_t *blk, int8_t wq[256]) {
    for (int t = 0; t < 8; t++) {
        int h = t / 4, l = t % 4;
        for (int half = 0; half < 2; half++) {
            uint8x16_t qs = vld1q_u8(blk + 32 * h + 16 * half);
            uint8x16_t q = vandq_u8(vshlq_u8(qs, vdupq_n_s8((int8_t)(-2 * l))), vdupq_n_u8(3));
            vst1q_s8(wq + 32 * t + 16 * half, vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(1)));
        }
    }
}

/* The trits c - 1 of 16 bytes q, byte i's trit chosen by its multiplier m_i = 3^n. */
static inline int8x16_t tq1_trits(uint8x16_t q, uint8x16_t m) {
    uint8x16_t p = vmulq_u8(q, m);
    uint8x16_t t = vcombine_u8(vshrn_n_u16(vmull_u8(vget_low_u8(p), vdup_n_u8(3)), 8),
                               vshrn_n_u16(vmull_high_u8(p, vdupq_n_u8(3)), 8));
    return vsubq_s8(vreinterpretq_s8_u8(t), vdupq_n_s8(1));
}

static inline void tq1_unpack(const uint8_t *blk, int8_t wq[256]) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    static const uint8_t tail_mult[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    uint8x16_t a0 = vld1q_u8(blk), a1 = vld1q_u8(blk + 16), mid = vld1q_u8(blk + 32);
    for (int n = 0; n < 5; n++) {
        uint8x16_t m = vdupq_n_u8(pow3[n]);
        vst1q_s8(wq + 32 * n, tq1_trits(a0, m));
        vst1q_s8(wq + 32 * n + 16, tq1_trits(a1, m));
        vst1q_s8(wq + 160 + 16 * n, tq1_trits(mid, m));
    }
    uint32_t qh;
    memcpy(&qh, blk + 48, 4);
    vst1q_s8(wq + 240, tq1_trits(vreinterpretq_u8_u32(vdupq_n_u32(qh)), vld1q_u8(tail_mult)));
}

static inline __attribute__((always_inline)) void tq_body(const pdl_block_q8k *x, int64_t nb, int nr,
                                                          const uint8_t *w, size_t wrb, int nc, float *out,
                                                          int64_t ldo, const int tq1) {
    const size_t bb = tq1 ? 54 : 66;
    float acc[TR][TC];
    for (int r = 0; r < TR; r++)
        for (int c = 0; c < TC; c++) acc[r][c] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk = w + c * wrb + b * bb;
            for (size_t o = 0; o < bb; o += 64) __builtin_prefetch(blk + PF_ROWS * wrb + o);
            int8_t wq[256];
            if (tq1) tq1_unpack(blk, wq);
            else tq2_unpack(blk, wq);
            float dw = neon_half(blk + bb - 2);
            for (int r = 0; r < nr; r++) {
                const pdl_block_q8k *xb = x + r * nb + b;
                int32x4_t s = vdupq_n_s32(0);
                for (int t = 0; t < 8; t++) {
                    int32x4_t lo, hi;
                    q_sums(vld1q_s8(wq + 32 * t), vld1q_s8(wq + 32 * t + 16), vld1q_s8(xb->qs + 32 * t),
                           vld1q_s8(xb->qs + 32 * t + 16), &lo, &hi);
                    s = vaddq_s32(s, vaddq_s32(lo, hi));
                }
                acc[r][c] = fmaf(dw * xb->d, (float)vaddvq_s32(s), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r * ldo + c] = acc[r][c];
}

static void tile_tq2_0(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                       float *out, int64_t ldo) {
    if (rows == TR && cols == TC) tq_body(x, nb, TR, w, wrb, TC, out, ldo, 0);
    else if (rows == 1 && cols == TC) tq_body(x, nb, 1, w, wrb, TC, out, ldo, 0);
    else tq_body(x, nb, rows, w, wrb, cols, out, ldo, 0);
}

static void tile_tq1_0(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t wrb, int cols,
                       float *out, int64_t ldo) {
    if (rows == TR && cols == TC) tq_body(x, nb, TR, w, wrb, TC, out, ldo, 1);
    else if (rows == 1 && cols == TC) tq_body(x, nb, 1, w, wrb, TC, out, ldo, 1);
    else tq_body(x, nb, rows, w, wrb, cols, out, ldo, 1);
}
