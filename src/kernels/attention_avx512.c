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

#define ATTN_STORAGE static
#define ATTN_FN attention_head_avx512_generic
#define ATTN_DOT dot16
#define ATTN_AXPY axpy16
#include "kernels/attention_impl.h"

/* head_dim a multiple of 16, at most 256 (every model here): q and the
 * output stay in registers; keys are scored four at a time so that four
 * independent FMA chains hide the latency. Same maths as the generic body;
 * each row's result depends only on its own query and cache. */
#define MAXV 16
#define KEYS 4

static inline __m512 row16(const char *row, int f16, int i) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)(const void *)row + i)));
    return _mm512_loadu_ps((const float *)(const void *)row + i);
}

static void attention_head_avx512_fast(float *out_h, const float *q_h, int hd, int kv_head, float scale,
                                       float softcap, int pos, int window, const pdl_attn_kv *kv, float *scores) {
    int first = (window > 0 && pos - window + 1 > 0) ? pos - window + 1 : 0;
    int f16 = kv->kv_is_f16, nv = hd / 16, n = pos - first + 1;
    size_t koff = (size_t)kv_head * (size_t)hd * (f16 ? 2 : 4);
    __m512 qv[MAXV];
    for (int i = 0; i < nv; i++) qv[i] = _mm512_loadu_ps(q_h + 16 * i);
    float max = -INFINITY;
    int j = 0;
    for (; j + KEYS <= n; j += KEYS) {
        const char *k[KEYS];
        __m512 acc[KEYS];
        for (int t = 0; t < KEYS; t++) {
            k[t] = attn_kv_row(kv->k, kv, first + j + t) + koff;
            acc[t] = _mm512_setzero_ps();
        }
        for (int i = 0; i < nv; i++)
            for (int t = 0; t < KEYS; t++) acc[t] = _mm512_fmadd_ps(qv[i], row16(k[t], f16, 16 * i), acc[t]);
        for (int t = 0; t < KEYS; t++) {
            float sc = _mm512_reduce_add_ps(acc[t]) * scale;
            if (softcap > 0.0f) sc = tanhf(sc / softcap) * softcap;
            scores[j + t] = sc;
            if (sc > max) max = sc;
        }
    }
    for (; j < n; j++) {
        const char *k = attn_kv_row(kv->k, kv, first + j) + koff;
        __m512 acc = _mm512_setzero_ps();
        for (int i = 0; i < nv; i++) acc = _mm512_fmadd_ps(qv[i], row16(k, f16, 16 * i), acc);
        float sc = _mm512_reduce_add_ps(acc) * scale;
        if (softcap > 0.0f) sc = tanhf(sc / softcap) * softcap;
        scores[j] = sc;
        if (sc > max) max = sc;
    }
    for (j = 0; j < n; j++) scores[j] = pdl_exp_nonpos(scores[j] - max);
    float sum = 0.0f;
    for (j = 0; j < n; j++) sum += scores[j];
    float inv = 1.0f / sum;
    __m512 o[MAXV];
    for (int i = 0; i < nv; i++) o[i] = _mm512_setzero_ps();
    for (j = 0; j < n; j++) {
        const char *v = attn_kv_row(kv->v, kv, first + j) + koff;
        __m512 p = _mm512_set1_ps(scores[j] * inv);
        for (int i = 0; i < nv; i++) o[i] = _mm512_fmadd_ps(p, row16(v, f16, 16 * i), o[i]);
    }
    for (int i = 0; i < nv; i++) _mm512_storeu_ps(out_h + 16 * i, o[i]);
}

void pdl_attention_head_avx512(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                               int pos, int window, const pdl_attn_kv *kv, float *scores) {
    if (head_dim % 16 == 0 && head_dim <= 16 * MAXV)
        attention_head_avx512_fast(out_h, q_h, head_dim, kv_head, scale, softcap, pos, window, kv, scores);
    else
        attention_head_avx512_generic(out_h, q_h, head_dim, kv_head, scale, softcap, pos, window, kv, scores);
}
#else
void pdl_attention_head_avx512(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                               int pos, int window, const pdl_attn_kv *kv, float *scores) {
    pdl_attention_head_scalar(out_h, q_h, head_dim, kv_head, scale, softcap, pos, window, kv, scores);
}
#endif
