/*
 * attention_avx2.c - the attention body (attention_impl.h) built with AVX2,
 * FMA and F16C: the compiler vectorises its loops over neighbouring keys
 * and over dimensions without reordering any sum.
 */
#include "kernels/attention.h"

#if defined(__AVX2__)
#include <immintrin.h>

#define ATTN_QUERIES_FN pdl_attention_queries_avx2
#define ATTN_F16(h) _cvtsh_ss(h)
#include "kernels/attention_impl.h"

/* The F16 cache write with F16C's conversion (round to nearest even: the
 * bits of pdl_f32_to_f16), 8 values at a time. */
void pdl_attention_store_f16c(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int block_size, int64_t slot,
                              const float *k, const float *v) {
    if (!kv_is_f16) {
        pdl_attention_store_scalar(kpool, vpool, kv_is_f16, kv_dim, block_size, slot, k, v);
        return;
    }
    uint16_t *kd = (uint16_t *)kpool + pdl_attn_k_index(slot, block_size, kv_dim, 0);
    uint16_t *vd = (uint16_t *)vpool + (size_t)slot * (size_t)kv_dim;
    int e = 0;
    for (; e + 8 <= kv_dim; e += 8) {
        _mm_storeu_si128((__m128i *)(void *)(vd + e), _mm256_cvtps_ph(_mm256_loadu_ps(v + e), _MM_FROUND_TO_NEAREST_INT));
        uint16_t h[8];
        _mm_storeu_si128((__m128i *)(void *)h, _mm256_cvtps_ph(_mm256_loadu_ps(k + e), _MM_FROUND_TO_NEAREST_INT));
        for (int i = 0; i < 8; i++) kd[(size_t)(e + i) * (size_t)block_size] = h[i]; /* dimension-major */
    }
    for (; e < kv_dim; e++) {
        vd[e] = _cvtss_sh(v[e], _MM_FROUND_TO_NEAREST_INT);
        kd[(size_t)e * (size_t)block_size] = _cvtss_sh(k[e], _MM_FROUND_TO_NEAREST_INT);
    }
}
#else
void pdl_attention_store_f16c(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int block_size, int64_t slot,
                              const float *k, const float *v) {
    pdl_attention_store_scalar(kpool, vpool, kv_is_f16, kv_dim, block_size, slot, k, v);
}
void pdl_attention_queries_avx2(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                                int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                float *scratch) {
    pdl_attention_queries_scalar(out, q, pos, n_q, head_dim, kv_head, scale, softcap, window, kv, scratch);
}
#endif
