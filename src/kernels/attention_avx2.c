/*
 * attention_avx2.c - the attention body (attention_impl.h) with 8-lane
 * AVX2 + FMA dot products and value accumulation, F16 KV through F16C.
 */
#include "kernels/attention.h"

#if defined(__AVX2__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

/* 8 values from element i (a ragged end zero-padded through a copy). */
static inline __m256 load8(const char *row, int f16, int i, int n) {
    if (n - i >= 8) {
        if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)(const void *)row + i)));
        return _mm256_loadu_ps((const float *)(const void *)row + i);
    }
    float t[8] = {0};
    for (int j = 0; j < n - i; j++) {
        if (f16) {
            uint16_t h;
            memcpy(&h, row + 2 * (size_t)(i + j), 2);
            t[j] = _cvtsh_ss(h);
        } else {
            memcpy(&t[j], row + 4 * (size_t)(i + j), 4);
        }
    }
    return _mm256_loadu_ps(t);
}

static inline float dot8(const float *q, const char *krow, int f16, int n) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(load8((const char *)q, 0, i, n), load8(krow, f16, i, n), acc);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline void axpy8(float *out, float p, const char *vrow, int f16, int n) {
    __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, load8(vrow, f16, i, n), _mm256_loadu_ps(out + i)));
    if (i < n) {
        float t[8];
        _mm256_storeu_ps(t, load8(vrow, f16, i, n));
        for (int j = 0; i + j < n; j++) out[i + j] = fmaf(p, t[j], out[i + j]);
    }
}

#define ATTN_FN pdl_attention_head_avx2
#define ATTN_DOT dot8
#define ATTN_AXPY axpy8
#include "kernels/attention_impl.h"
#else
void pdl_attention_head_avx2(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                             int pos, int window, const pdl_attn_kv *kv, float *scores) {
    pdl_attention_head_scalar(out_h, q_h, head_dim, kv_head, scale, softcap, pos, window, kv, scores);
}
#endif
