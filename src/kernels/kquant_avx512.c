/*
 * kquant_avx512.c - the AVX-512BW Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / TQ2_0 / TQ1_0 x Q8_K tiles (for CPUs
 * without AVX512-VNNI; the body is kquant_avx512_body.h) and the AVX-512
 * Q8_K activation quantizer. Compiled with AVX-512 flags (CMakeLists.txt);
 * called only when the CPU has them.
 */
#include "kernels/kquant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define KQ_VNNI 0
#define KQ_NAME(x) kq_bw_##x
#include "kernels/kquant_avx512_body.h"

#include <immintrin.h>
#include <string.h>

/* kquant_quantize_row_q8_k with 16 lanes, the same arithmetic (kquant.c):
 * amax through the bits of |x|, x * (127 / amax) + 1.5 * 2^23 and the low
 * bits, clamped: the same bytes for every input, infinities and NaNs
 * included. */
void kquant_quantize_row_q8_k_avx512(const float *x, int64_t n, pdl_block_q8k *y) {
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), bias = _mm512_set1_epi32(0x4B400000);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    for (int64_t b = 0; b < n / PDL_QK_K; b++, x += PDL_QK_K, y++) {
        __m512i m = _mm512_setzero_si512();
        for (int i = 0; i < PDL_QK_K; i += 16)
            m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(x + i), absmask));
        uint32_t abits = (uint32_t)_mm512_reduce_max_epu32(m);
        float amax;
        memcpy(&amax, &abits, 4);
        if (amax == 0.0f || abits >= 0x7f800000u) { /* zero, or an infinity or NaN in the block */
            memset(y, 0, sizeof *y);
            y->d = amax;
            continue;
        }
        float iscale = 127.0f / amax;
        y->d = amax / 127.0f;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int i = 0; i < PDL_QK_K; i += 16) {
            __m512 f = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), is), magic);
            __m512i q = _mm512_sub_epi32(_mm512_castps_si512(f), bias);
            q = _mm512_max_epi32(_mm512_min_epi32(q, hi), lo);
            _mm_storeu_si128((__m128i *)(y->qs + i), _mm512_cvtepi32_epi8(q));
            /* the 16 values are one bsum16 group */
            y->bsum16[i / 16] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        for (int j = 0; j < 8; j++) y->bsum32[j] = (int16_t)(y->bsum16[2 * j] + y->bsum16[2 * j + 1]);
    }
}

void kquant_tile_q4_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo) {
    kq_bw_tile_q4_k(x, nb, rows, w, w_row_bytes, cols, out, ldo);
}

void kquant_tile_q5_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo) {
    kq_bw_tile_q5_k(x, nb, rows, w, w_row_bytes, cols, out, ldo);
}

void kquant_tile_q6_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo) {
    kq_bw_tile_q6_k(x, nb, rows, w, w_row_bytes, cols, out, ldo);
}

void kquant_tile_q3_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo) {
    kq_bw_tile_q3_k(x, nb, rows, w, w_row_bytes, cols, out, ldo);
}

void kquant_tile_q2_k_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                             int cols, float *out, int64_t ldo) {
    kq_bw_tile_q2_k(x, nb, rows, w, w_row_bytes, cols, out, ldo);
}

void kquant_tile_iq4_xs_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                               int cols, float *out, int64_t ldo) {
    kq_bw_tile_iq4_xs(x, nb, rows, w, w_row_bytes, cols, out, ldo);
}

void kquant_tile_tq2_0_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                              int cols, float *out, int64_t ldo) {
    kq_bw_tile_tq2_0(x, nb, rows, w, w_row_bytes, cols, out, ldo);
}

void kquant_tile_tq1_0_avx512(const pdl_block_q8k *x, int64_t nb, int rows, const uint8_t *w, size_t w_row_bytes,
                              int cols, float *out, int64_t ldo) {
    kq_bw_tile_tq1_0(x, nb, rows, w, w_row_bytes, cols, out, ldo);
}
#endif
