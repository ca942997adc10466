/*
 * attention_avx512_ops.h - the vector operations attention_tiles_body.h
 * asks for, at 16 lanes of AVX-512 (F, BW, F16C, FMA), and the shape of
 * its tiles: included by attention_avx512.c, attention_avx512bf16.c and
 * attention_amx.c, which name their tiles.
 */
#ifndef PDL_KERNELS_ATTENTION_AVX512_OPS_H
#define PDL_KERNELS_ATTENTION_AVX512_OPS_H

#include <immintrin.h>
#include <stdint.h>

typedef __m512 at_v;
#define AT_W 16

/* Scores: 8 queries x 3 groups of 16 keys (4 groups for one query);
 * values: 6 queries a tile, 24 accumulators. */
#define AT_SR 8
#define AT_SG 3
#define AT_SG1 4
#define AT_VR 6
#define AT_VACC 24
static inline at_v at_zero(void) { return _mm512_setzero_ps(); }
static inline at_v at_set1(float x) { return _mm512_set1_ps(x); }
static inline at_v at_fmadd(at_v a, at_v b, at_v c) { return _mm512_fmadd_ps(a, b, c); }
static inline at_v at_mul(at_v a, at_v b) { return _mm512_mul_ps(a, b); }
static inline at_v at_loadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void at_storeu(float *p, at_v v) { _mm512_storeu_ps(p, v); }
static inline at_v at_max(at_v a, at_v b) { return _mm512_max_ps(a, b); }
static inline float at_hmax(at_v v) { return _mm512_reduce_max_ps(v); }
static inline at_v at_load_kv(const uint8_t *p, int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_loadu_ps((const float *)(const void *)p);
}
static inline at_v at_load_i8(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
static inline at_v at_load_u4(const uint8_t *p, int high) {
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p);
    if (high) b = _mm_srli_epi16(b, 4);
    __m512i c = _mm512_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(15)));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(c, _mm512_set1_epi32(8)));
}

#endif
