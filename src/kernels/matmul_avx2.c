/*
 * matmul_avx2.c - AVX2 + FMA + F16C tiles for F32, F16, BF16, Q8_0, Q4_0, MXFP4, IQ4_NL, Q5_0, Q4_1 and Q5_1
 * weights with F32 activations. Compiled with those flags (CMakeLists.txt);
 * called only when the CPU has them.
 *
 * Float tile (matmul_float_tile_body.h at 8 lanes): 4 rows x 2 weight rows = 8
 * ymm accumulators. A ragged end of k goes through a zero-padded copy, the
 * same for every tile shape.
 */
#include "kernels/matmul_table.h"

#if defined(__AVX2__)
#include <immintrin.h>
#include <string.h>

#include "kernels/iq4nl.h"
#include "kernels/legacy_quant.h"
#include "kernels/mxfp4.h"

#define TR 4
#define TC 2

/* Every 64 bytes of a weight row also prefetch the same bytes of the row
 * PF_ROWS ahead in tiles of fewer than TR rows, as the AVX-512 tiles do
 * (see matmul_avx512.c): decode streams each weight once per token.
 * Inlined, or GCC deletes it. */
#define PF_ROWS 16
static inline __attribute__((always_inline)) void prefetch_line(const uint8_t *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}

static inline __m256 w8_f32(const uint8_t *w, int64_t k) { return _mm256_loadu_ps((const float *)w + k); }
static inline __m256 w8_f16(const uint8_t *w, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + k)));
}
static inline __m256 w8_bf16(const uint8_t *w, int64_t k) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

typedef __m256 mt_v;
#define MT_W 8
static inline mt_v mt_zero(void) { return _mm256_setzero_ps(); }
static inline mt_v mt_loadx(const float *p) { return _mm256_loadu_ps(p); }
static inline mt_v mt_fmadd(mt_v a, mt_v b, mt_v c) { return _mm256_fmadd_ps(a, b, c); }
#define mt_hsum hsum8
#define mt_prefetch prefetch_line
#include "kernels/matmul_float_tile_body.h"

DEFINE_TILE(tile_f32, w8_f32, float)
DEFINE_TILE(tile_f16, w8_f16, uint16_t)
DEFINE_TILE(tile_bf16, w8_bf16, uint16_t)

/* Q8_0 x Q8_0, one 32-block per ymm: |w| times x with w's sign through
 * maddubs + madd (8 exact int32 partial sums), converted and scaled by
 * d_w * d_x lane-wise into one accumulator per element. Q4_0 weights take
 * the same path with a block's nibbles unpacked to 32 unsigned bytes
 * (w + 8; pair sums of at most 2 * 15 * 127 do not saturate) and 8 times
 * the activations' 4-sums subtracted: the order of matmul.c's dot_nibbles_q8,
 * which is llama.cpp's. MXFP4 weights (q4 2) take the Q8_0 path with a
 * block's codes turned into their doubled int8 values by VPSHUFB
 * (kernels/mxfp4.h; |w| <= 12) and its E8M0 scale; IQ4_NL weights (q4 3)
 * likewise with kernels/iq4nl.h's values (|w| <= 127: the sign trick keeps
 * a pair within 2 * 127 * 127) and Q4_0's half d. */
static inline __m256i q4_0_nibbles(const uint8_t *qs) { /* the stored 0..15, w + 8 */
    __m128i b = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0xF);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

static inline __attribute__((always_inline)) void q_body(const int8_t *xq, const float *xd, int64_t nb, int rows,
                                                         const uint8_t *w, size_t wrb, int cols, float *out,
                                                         int64_t ldo, int q4) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i code2 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)(q4 == 3 ? iq4nl_values : mxfp4_code2)));
    const size_t bb = q4 == 2 ? 17 : q4 ? 18 : 34;
    for (int r = 0; r < rows; r++) {
        __m256 acc[TC];
        for (int c = 0; c < TC; c++) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (r * nb + b) * 32));
            /* Q4_0: 8 times x's 4-sums, subtracted from the stored nibbles'
             * (w + 8, unsigned) sums: the same exact int32 as (w - 8) * x */
            __m256i x8 = q4 == 1 ? _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), xv), ones)
                            : _mm256_setzero_si256();
            float dx = xd[r * nb + b];
            for (int c = 0; c < cols; c++) {
                const uint8_t *blk = w + c * wrb + b * bb;
                if (rows < TR && r == 0) prefetch_line(blk + PF_ROWS * wrb); /* bb < 64: every line */
                __m256i p;
                float dw;
                if (q4 == 2) {
                    dw = mxfp4_scale_half(blk[0]);
                } else {
                    uint16_t d16;
                    memcpy(&d16, blk, 2);
                    dw = _cvtsh_ss(d16);
                }
                if (q4 >= 2) {
                    __m256i wq = _mm256_shuffle_epi8(code2, q4_0_nibbles(blk + (q4 == 2 ? 1 : 2)));
                    p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(xv, wq)), ones);
                } else if (q4) {
                    p = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(q4_0_nibbles(blk + 2), xv), ones), x8);
                } else {
                    __m256i wq = _mm256_loadu_si256((const __m256i *)(blk + 2));
                    p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(xv, wq)), ones);
                }
                __m256 s = _mm256_set1_ps(dw * dx);
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[c]);
            }
        }
        for (int c = 0; c < cols; c++) out[r * ldo + c] = hsum8(acc[c]);
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
 * order: a block's codes as 32 unsigned bytes (the nibbles, Q5: each
 * plus 16 times its qh bit, spread to bytes by VPSHUFB and a compare) times
 * x by maddubs + madd (pairs at most 2 * 31 * 127: no saturation) into 8
 * exact lane sums; Q5_0 subtracts 16 times x's 4-sums (its codes are w +
 * 16), Q4_1 / Q5_1 add x's 4-sums times m_w * d_x by a second fma. */
static inline __m256i leg_high(const uint8_t *p) { /* byte k: 0x10 where bit k of the u32 at p is set */
    uint32_t qh;
    memcpy(&qh, p, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                            3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

static inline __attribute__((always_inline)) void leg_body(const int8_t *xq, const float *xd, int64_t nb, int rows,
                                                           const uint8_t *w, size_t wrb, int cols, float *out,
                                                           int64_t ldo, pdl_dtype dt) {
    const __m256i ones = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
    const size_t bb = legacy_block_bytes(dt), qs_at = legacy_qs_at(dt), qh_at = legacy_qh_at(dt);
    const bool q5 = dt != PDL_DTYPE_Q4_1, with_min = dt != PDL_DTYPE_Q5_0;
    for (int r = 0; r < rows; r++) {
        __m256 acc[TC];
        for (int c = 0; c < TC; c++) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (r * nb + b) * 32));
            /* x's 4-sums: Q5_0 takes 16 times them off, Q4_1 / Q5_1 scale them by m */
            __m256i xs = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, xv), ones);
            __m256i x16 = _mm256_slli_epi32(xs, 4);
            float dx = xd[r * nb + b];
            for (int c = 0; c < cols; c++) {
                const uint8_t *blk = w + c * wrb + b * bb;
                if (rows < TR && r == 0) prefetch_line(blk + PF_ROWS * wrb); /* bb < 64: every line */
                __m256i code = q4_0_nibbles(blk + qs_at);
                if (q5) code = _mm256_or_si256(code, leg_high(blk + qh_at));
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(code, xv), ones);
                if (!with_min) p = _mm256_sub_epi32(p, x16);
                uint16_t d16;
                memcpy(&d16, blk, 2);
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(_cvtsh_ss(d16) * dx), acc[c]);
                if (with_min) {
                    memcpy(&d16, blk + 2, 2);
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(xs), _mm256_set1_ps(_cvtsh_ss(d16) * dx), acc[c]);
                }
            }
        }
        for (int c = 0; c < cols; c++) out[r * ldo + c] = hsum8(acc[c]);
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

/* Q8_0 activation quantization (matmul.c has the portable one): the same
 * float operations per element (|x| max, amax / 127, 1 / scale, x * inv
 * rounded to nearest even by the default MXCSR mode, the scale through a
 * half and back), 32 at a time: the portable bytes. */
void matmul_quantize_row_q8_0_avx2(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v[4], m;
        for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(xb + 8 * i);
        m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                          _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        __m256 iv = _mm256_set1_ps(inv);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], iv));
        /* int32 -> int8 in element order: packs interleave 128-bit lanes,
         * the permute puts them back */
        __m256i p16 = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
        __m256i p8 = _mm256_packs_epi16(p16, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)(qs + b * 32), p8);
        d[b] = _cvtsh_ss(_cvtss_sh(scale, _MM_FROUND_TO_NEAREST_INT));
        if (sums) {
            __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
            sums[b] = _mm_cvtsi128_si32(s4);
        }
    }
}

const pdl_tile_kernels matmul_tiles_avx2 = {
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
    .q4k = kquant_tile_q4_k_avx2, /* kquant_avx2.c */
    .q5k = kquant_tile_q5_k_avx2,
    .q6k = kquant_tile_q6_k_avx2,
    .q3k = kquant_tile_q3_k_avx2,
    .q2k = kquant_tile_q2_k_avx2,
    .iq4xs = kquant_tile_iq4_xs_avx2,
    .tq2 = kquant_tile_tq2_0_avx2,
    .tq1 = kquant_tile_tq1_0_avx2,
};
#else
/* Not built for this target: the family has no kernels. */
void matmul_quantize_row_q8_0_avx2(const float *x, int64_t n, int8_t *qs, float *d, int32_t *sums) {
    (void)x, (void)n, (void)qs, (void)d, (void)sums;
}
const pdl_tile_kernels matmul_tiles_avx2 = {0};
#endif
