/*
 * attention_avx2.c - attention with AVX2, FMA and F16C: the register tiles
 * of attention_tiles_body.h at 8 lanes (6 queries x 2 groups of 8 keys per
 * score tile; 3 queries x 4 vectors per value tile), the portable body
 * (attention_body.h) built here for the shapes they do not take, and the
 * F16 cache write.
 * Same bits as every build.
 */
#include "kernels/attention.h"

#if defined(__AVX2__)
#include <immintrin.h>

#define ATTN_STORAGE static
#define ATTN_QUERIES_FN attention_queries_avx2_generic
#define ATTN_F16(h) _cvtsh_ss(h)
#include "kernels/attention_body.h"

typedef __m256 at_v;
#define AT_W 8
#define AT_SR 6
#define AT_SG 2
#define AT_SG1 4
#define AT_VR 3
#define AT_VACC 12
#define AT_FN attn_queries_avx2
#define AT_GENERIC attention_queries_avx2_generic
static inline at_v at_zero(void) { return _mm256_setzero_ps(); }
static inline at_v at_set1(float x) { return _mm256_set1_ps(x); }
static inline at_v at_fmadd(at_v a, at_v b, at_v c) { return _mm256_fmadd_ps(a, b, c); }
static inline at_v at_mul(at_v a, at_v b) { return _mm256_mul_ps(a, b); }
static inline at_v at_loadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void at_storeu(float *p, at_v v) { _mm256_storeu_ps(p, v); }
static inline at_v at_max(at_v a, at_v b) { return _mm256_max_ps(a, b); }
static inline float at_hmax(at_v v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    float m = t[0];
    for (int i = 1; i < 8; i++) m = t[i] > m ? t[i] : m;
    return m;
}
static inline at_v at_load_kv(const uint8_t *p, int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_loadu_ps((const float *)(const void *)p);
}
static inline at_v at_load_i8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
static inline at_v at_load_u4(const uint8_t *p, int high) {
    __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)p);
    if (high) b = _mm_srli_epi16(b, 4);
    __m256i c = _mm256_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(15)));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(8)));
}
static inline void at_to_f16(const float *src, uint16_t *dst) {
    _mm_storeu_si128((__m128i *)(void *)dst, _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT));
}
#define AT_STORE_FN attn_store_f16c
#include "kernels/attention_tiles_body.h"
#else
void attn_store_f16c(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size,
                     int64_t slot, const float *k, const float *v) {
    attn_store_scalar(kpool, vpool, kv_is_f16, kv_dim, head_dim, block_size, slot, k, v);
}
void attn_queries_avx2(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                       int kv_head, float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                       float *scratch) {
    attn_queries_scalar(out, q, pos, n_q, head_dim, kv_head, scale, softcap, sinks, window, kv, scratch);
}
void attn_queries_avx2_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                     int n_q, int head_dim, int kv_head, float scale, float softcap,
                                     const float *sinks, const pdl_attn_kv *kv, float *scratch) {
    attn_queries_scalar_ranges(out, q, first, last, n_q, head_dim, kv_head, scale, softcap, sinks, kv, scratch);
}
#endif
