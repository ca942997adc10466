/*
 * kquant.h - Q8_K activations and the dot products of GGUF Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_XS, TQ2_0 and TQ1_0 weights with them: the portable reference
 * (kquant.c) that every SIMD tile (kquant_avx512*.c, kquant_avx2.c)
 * reproduces bit for bit.
 *
 * Activation quantization (Q8_K), per 256-element block: d = amax / 127
 * (amax = max |x|, d = 0 for an all-zero block), q = nearest(x * (127 /
 * amax)) with ties to even, clamped to [-127, 127]; d is kept as a float
 * (not rounded through half precision). A block holding an infinity or a
 * NaN gets q = 0 and d = amax (that infinity or NaN), so it poisons the
 * dot products as the float values would. The block also keeps the exact sums
 * of q per 16 elements (Q6_K's -32 offset, Q3_K's -4, Q2_K's min term)
 * and per 32 elements (Q4_K's min term).
 *
 * Float order of the dots (the reference and every tile): within a 256
 * super-block all work is exact int32 arithmetic,
 *   Q4_K: isum = sum_j sc_j * sum_{i in sub-block j} q_i * x_i,
 *         msum = sum_j m_j * bsum32_j               (j = 0..7),
 *   Q5_K: the same with q_i in 0..31 (the nibble plus 16 times its qh bit),
 *   Q6_K: isum = sum_g sc_g * sum_{i in group g} (q_i - 32) * x_i (g = 0..15),
 *   Q3_K: isum = sum_g (sc_g - 32) * sum_{i in group g} q_i * x_i (g = 0..15,
 *         q_i in -4..3: the 2-bit value minus 4 where its hmask bit is
 *         clear; SIMD tiles sum the unsigned q_i + 4 in 0..7 and take off
 *         4 * bsum16_g, the same integer),
 *   Q2_K: isum = sum_g sc_g * sum_{i in group g} q_i * x_i (q_i in 0..3,
 *         sc_g the low nibble of scale byte g), msum = sum_g m_g *
 *         bsum16_g (m_g its high nibble) (g = 0..15),
 *   IQ4_XS: isum = sum_j (ls_j - 32) * sum_{i in sub-block j} v_i * x_i
 *         (j = 0..7; ls_j the 6-bit scale, v_i kernels/iq4nl.h's int8 value
 *         of code i),
 *   TQ2_0, TQ1_0: isum = sum_i (c_i - 1) * x_i (i = 0..255; c_i the
 *         2-bit code or the trit, kquant_tq2_0_code / kquant_tq1_0_code:
 *         values -1, 0, 1, and TQ2_0's code 3, which writers do not use,
 *         +2 as the dequantizer reads it; SIMD tiles sum the unsigned
 *         c_i * x_i and take off the block's 16 bsum16_g, the same integer),
 * then per super-block, in block order, into one float accumulator:
 *   acc = fmaf(d_w * d_x, (float)isum, acc);
 *   acc = fmaf(-(dmin_w * d_x), (float)msum, acc);   (Q2_K, Q4_K, Q5_K)
 * (Q3_K, Q6_K, IQ4_XS, TQ2_0, TQ1_0: the first only), starting from acc = 0. d_w * d_x and dmin_w *
 * d_x are single float products. So a result depends only on its weight
 * row and activation row.
 */
#ifndef PDL_KERNELS_KQUANT_H
#define PDL_KERNELS_KQUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PDL_QK_K 256

/* One quantized 256-block of an activation row. */
typedef struct pdl_block_q8k {
    int8_t qs[PDL_QK_K];
    int16_t bsum16[16]; /* sum of qs[16 g .. 16 g + 15] */
    int16_t bsum32[8];  /* sum of qs[32 j .. 32 j + 31] */
    float d;
} pdl_block_q8k;

/* A Q4_K block's 8 six-bit scales and 8 six-bit mins (12 bytes at blk + 4),
 * one byte each, sub-block j in byte j of *sc and *mn. */
static inline void kquant_q4_k_scales_mins(const uint8_t *blk, uint64_t *sc, uint64_t *mn) {
    uint32_t u[3];
    memcpy(u, blk + 4, 12);
    *sc = (uint64_t)(u[0] & 0x3f3f3f3f) | (uint64_t)((u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030)) << 32;
    *mn = (uint64_t)(u[1] & 0x3f3f3f3f) | (uint64_t)(((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030)) << 32;
}

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 bytes s:
 * j < 4: s[j] & 63 and s[j + 4] & 63; j >= 4: the low (scale) or high
 * (min) nibble of s[j + 4], with the top 2 bits from s[j - 4] (scale) or
 * s[j] (min) bits 6..7. */
static inline void kquant_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Q3_K: the 16 six-bit scales minus 32 (-32..31) from the 12 bytes s:
 * scale i's low nibble is the low nibble of s[i] (i < 8) or the high one
 * of s[i - 8], its top 2 bits are bits 2 (i / 4) of s[8 + i % 4]. */
static inline void kquant_q3_k_scales(const uint8_t *s, int8_t sc[16]) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? s[i] & 0xF : s[i - 8] >> 4, top = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        sc[i] = (int8_t)((lo | top << 4) - 32);
    }
}

/* x[n] (n a multiple of 256) -> n / 256 blocks. */
void kquant_quantize_row_q8_k(const float *x, int64_t n, pdl_block_q8k *y);

/* dot(weight row w of nb super-blocks, x[nb]) in the order above. */
float kquant_dot_q4_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb);
float kquant_dot_q5_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb);
float kquant_dot_q6_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb);
float kquant_dot_q3_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb);
float kquant_dot_q2_k_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb);
float kquant_dot_iq4_xs_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb);
float kquant_dot_tq2_0_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb);
float kquant_dot_tq1_0_q8_k(const uint8_t *w, const pdl_block_q8k *x, int64_t nb);

/* Ternary blocks (kernels/cpu_ops.c's dequantizers): element e's code c in
 * 0..2, value (c - 1) d.
 * TQ2_0 (66 bytes: 64 code bytes, f16 d): bits 2l of byte 32 h + m for
 * e = 128 h + 32 l + m. */
static inline int kquant_tq2_0_code(const uint8_t *blk, int e) {
    return (blk[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* TQ1_0 (54 bytes: 48 bytes of 5 trits, 4 bytes of 4, f16 d): trit n of a
 * byte q is ((q 3^n mod 256) 3) >> 8 (the byte holds the base-3 fraction
 * 0.t0t1t2t3t4 rounded up to 8 bits). Byte m < 32 holds elements 32 n + m,
 * byte 32 + m (m < 16) elements 160 + 16 n + m, byte 48 + j elements
 * 240 + 4 n + j (n < 4). */
static inline int kquant_tq1_0_trit(uint8_t q, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return (uint8_t)(q * pow3[n]) * 3 >> 8;
}

static inline int kquant_tq1_0_code(const uint8_t *blk, int e) {
    if (e < 160) return kquant_tq1_0_trit(blk[e % 32], e / 32);
    if (e < 240) return kquant_tq1_0_trit(blk[32 + (e - 160) % 16], (e - 160) / 16);
    return kquant_tq1_0_trit(blk[48 + (e - 240) % 4], (e - 240) / 4);
}

/* An IQ4_XS block's sub-block j (0..7) scale minus 32 (-32..31): the low
 * (j even) or high nibble of scales_l[j / 2] (blk + 4), the top 2 bits from
 * bits 2j of the 16-bit scales_h (blk + 2). */
static inline int kquant_iq4_xs_scale(const uint8_t *blk, int j) {
    int sh = blk[2] | blk[3] << 8;
    return (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | ((sh >> (2 * j)) & 3) << 4) - 32;
}

/* A tile: out[r * ldo + c] = dot(weight row c, activation row r) for
 * r < rows, c < cols (at most the family's tile size); activation row r is
 * x + r * nb; weight row c starts at w + c * w_row_bytes. */
typedef void (*pdl_tile_kq_fn)(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w,
                               size_t w_row_bytes, int cols, float *out, int64_t ldo);

/* The SIMD tiles and quantizer (defined only where the compiler targets
 * x86); the quantizer gives kquant_quantize_row_q8_k's bytes. */
void kquant_quantize_row_q8_k_avx512(const float *x, int64_t n, pdl_block_q8k *y);
void kquant_tile_q4_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo);
void kquant_tile_q6_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo);
void kquant_tile_q4_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                           int cols, float *out, int64_t ldo);
void kquant_tile_q5_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo);
void kquant_tile_q5_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                           int cols, float *out, int64_t ldo);
void kquant_tile_q6_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                           int cols, float *out, int64_t ldo);
void kquant_tile_q3_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo);
void kquant_tile_q3_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                           int cols, float *out, int64_t ldo);
void kquant_tile_q2_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo);
void kquant_tile_q2_k_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                           int cols, float *out, int64_t ldo);
void kquant_tile_iq4_xs_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                               int cols, float *out, int64_t ldo);
void kquant_tile_iq4_xs_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo);
void kquant_tile_tq2_0_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                              int cols, float *out, int64_t ldo);
void kquant_tile_tq2_0_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                            int cols, float *out, int64_t ldo);
void kquant_tile_tq1_0_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                              int cols, float *out, int64_t ldo);
void kquant_tile_tq1_0_avx2(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                            int cols, float *out, int64_t ldo);

#endif
