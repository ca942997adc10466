/*
 * attention_avx512.c - the attention body (attention_impl.h) with 16-lane
 * AVX-512 dot products and value accumulation, F16 KV through F16C.
 */
#include "kernels/attention.h"

#if defined(__AVX512F__)
#include <immintrin.h>

static inline __m512 load16(const char *row, int f16, int i, __mmask16 m) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)(const void *)row + i));
    return _mm512_maskz_loadu_ps(m, (const float *)(const void *)row + i);
}

static inline float dot16(const float *q, const char *krow, int f16, int n) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load16(krow, f16, i, m), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static inline void axpy16(float *out, float p, const char *vrow, int f16, int n) {
    __m512 pv = _mm512_set1_ps(p);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 o = _mm512_maskz_loadu_ps(m, out + i);
        _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(pv, load16(vrow, f16, i, m), o));
    }
}

#define ATTN_FN pdl_attention_head_avx512
#define ATTN_DOT dot16
#define ATTN_AXPY axpy16
#include "kernels/attention_impl.h"
#else
void pdl_attention_head_avx512(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                               int pos, int window, const pdl_attn_kv *kv, float *scores) {
    pdl_attention_head_scalar(out_h, q_h, head_dim, kv_head, scale, softcap, pos, window, kv, scores);
}
#endif
