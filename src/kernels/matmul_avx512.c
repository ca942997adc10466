/*
 * matmul_avx512.c - AVX-512 tiles for F32, F16 (F16C), BF16 (exact widening)
 * and Q8_0 weights with F32 activations. Compiled with AVX-512 flags (see
 * CMakeLists.txt); called only when the CPU has them.
 *
 * Tile: 4 rows x 4 weight rows = 16 zmm accumulators, each a 16-lane
 * partial sum over k; loads per 16-wide step: 4 activation + 4 weight
 * vectors for 16 FMAs.
 */
#include "kernels/matmul_tiles.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>


#define TR 4
#define TC 4

/* 16 weights from element k of a row, widened to F32. */
static inline __m512 load_f32(const uint8_t *w, int64_t k) { return _mm512_loadu_ps((const float *)w + k); }
static inline __m512 load_f32_m(const uint8_t *w, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)w + k);
}
static inline __m512 load_f16(const uint8_t *w, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k)));
}
static inline __m512 load_f16_m(const uint8_t *w, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k));
}
static inline __m512 widen_bf16(__m256i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}
static inline __m512 load_bf16(const uint8_t *w, int64_t k) {
    return widen_bf16(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k)));
}
static inline __m512 load_bf16_m(const uint8_t *w, int64_t k, __mmask16 m) {
    return widen_bf16(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k));
}

/* The tile body for nr <= TR rows and nc <= TC weight rows, inlined with
 * constant sizes for the common shapes (full tiles; single-row decode) so
 * the accumulators stay in registers. Every element's sequence is the same
 * for any nr, nc. */
#define DEFINE_TILE(NAME, LOAD, LOAD_M)                                                                            \
    static inline __attribute__((always_inline)) void NAME##_body(const float *x, int64_t ldx, int nr,             \
                                                                  const uint8_t *w, size_t wrb, int nc,            \
                                                                  int64_t in, float *out, int64_t ldo) {           \
        int64_t kf = in & ~(int64_t)15;                                                                           \
        __mmask16 tail = (__mmask16)((1u << (in - kf)) - 1);                                                       \
        __m512 acc[TR][TC];                                                                                       \
        for (int r = 0; r < TR; r++)                                                                              \
            for (int c = 0; c < TC; c++) acc[r][c] = _mm512_setzero_ps();                                         \
        for (int64_t k = 0; k < in; k += 16) {                                                                    \
            __m512 v[TC];                                                                                         \
            bool full = k < kf;                                                                                   \
            for (int c = 0; c < nc; c++) v[c] = full ? LOAD(w + c * wrb, k) : LOAD_M(w + c * wrb, k, tail);       \
            for (int r = 0; r < nr; r++) {                                                                        \
                __m512 b = full ? _mm512_loadu_ps(x + r * ldx + k) : _mm512_maskz_loadu_ps(tail, x + r * ldx + k); \
                for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(v[c], b, acc[r][c]);                     \
            }                                                                                                     \
        }                                                                                                         \
        for (int r = 0; r < nr; r++)                                                                              \
            for (int c = 0; c < nc; c++) out[r * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);                      \
    }                                                                                                             \
    static void NAME(const float *x, int64_t ldx, int rows, const uint8_t *w, size_t wrb, int cols, int64_t in,  \
                     float *out, int64_t ldo) {                                                                   \
        if (cols == TC && rows == TR) NAME##_body(x, ldx, TR, w, wrb, TC, in, out, ldo);                          \
        else if (cols == TC && rows == 1) NAME##_body(x, ldx, 1, w, wrb, TC, in, out, ldo);                       \
        else NAME##_body(x, ldx, rows, w, wrb, cols, in, out, ldo);                                               \
    }

DEFINE_TILE(tile_f32, load_f32, load_f32_m)
DEFINE_TILE(tile_f16, load_f16, load_f16_m)
DEFINE_TILE(tile_bf16, load_bf16, load_bf16_m)

/* Q8_0: per 32-block, p = q_lo * x_lo + q_hi * x_hi (one multiply, one FMA),
 * then acc += d * p. */
static inline __m512 q8_half(const int8_t *q) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

static void tile_q8_0(const float *x, int64_t ldx, int rows, const uint8_t *w, size_t wrb, int cols, int64_t in,
                      float *out, int64_t ldo) {
    int64_t nb = in / 32;
    for (int r0 = 0; r0 < rows; r0 += 2) {
        int nr = rows - r0 < 2 ? rows - r0 : 2;
        __m512 acc[2][TC];
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < TC; c++) acc[r][c] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m512 xl[2], xh[2];
            for (int r = 0; r < nr; r++) {
                const float *xr = x + (r0 + r) * ldx + b * 32;
                xl[r] = _mm512_loadu_ps(xr);
                xh[r] = _mm512_loadu_ps(xr + 16);
            }
            for (int c = 0; c < cols; c++) {
                const uint8_t *blk = w + c * wrb + b * 34;
                uint16_t d16;
                memcpy(&d16, blk, 2);
                __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)d16));
                __m512 ql = q8_half((const int8_t *)blk + 2), qh = q8_half((const int8_t *)blk + 18);
                for (int r = 0; r < nr; r++) {
                    __m512 p = _mm512_fmadd_ps(qh, xh[r], _mm512_mul_ps(ql, xl[r]));
                    acc[r][c] = _mm512_fmadd_ps(d, p, acc[r][c]);
                }
            }
        }
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < cols; c++) out[(r0 + r) * ldo + c] = _mm512_reduce_add_ps(acc[r][c]);
    }
}

const pdl_tile_kernels pdl_tiles_avx512 = {
    .tile_rows = TR,
    .tile_cols = TC,
    .fn = {[PDL_DTYPE_F32] = tile_f32, [PDL_DTYPE_F16] = tile_f16, [PDL_DTYPE_BF16] = tile_bf16,
           [PDL_DTYPE_Q8_0] = tile_q8_0},
};
#else
/* Not built for this target: the family has no kernels. */
const pdl_tile_kernels pdl_tiles_avx512 = {0};
#endif
