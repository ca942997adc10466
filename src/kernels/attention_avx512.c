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

/* Many queries, one KV head: the same arithmetic per query as
 * attention_head_avx512_fast (each key's score is the same FMA chain over
 * the same values, F16 widening being exact; the softmax and the value sum
 * run in key order), with each tile of TILE keys widened once into `tile`
 * and used by every query while it is in L1. */
#define TILE 32

static void widen_rows(float *dst, const pdl_attn_kv *kv, const void *pool, size_t off, int j0, int n, int hd) {
    int f16 = kv->kv_is_f16;
    for (int t = 0; t < n; t++) {
        const char *row = attn_kv_row(pool, kv, j0 + t) + off;
        for (int i = 0; i < hd; i += 16) _mm512_storeu_ps(dst + (size_t)t * hd + i, row16(row, f16, i));
    }
}

static void attention_queries_avx512_fast(float *const *out, const float *const *q, const int *pos, int n_q, int hd,
                                          int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                          float *scratch) {
    int nv = hd / 16, lo = pos[0], hi = pos[0];
    int first[64], maxq = n_q < 64 ? n_q : 64;
    for (int i = 0; i < maxq; i++) {
        first[i] = (window > 0 && pos[i] - window + 1 > 0) ? pos[i] - window + 1 : 0;
        if (first[i] < lo) lo = first[i];
        if (pos[i] > hi) hi = pos[i];
    }
    int span = hi - lo + 1;
    size_t koff = (size_t)kv_head * (size_t)hd * (kv->kv_is_f16 ? 2 : 4);
    float *tile = scratch, *scores = scratch + 32 * 256;
    float maxs[64];
    for (int i = 0; i < maxq; i++) maxs[i] = -INFINITY;
    /* scores: scores[i * span + (j - lo)] */
    for (int t0 = lo; t0 <= hi; t0 += TILE) {
        int nt = hi - t0 + 1 < TILE ? hi - t0 + 1 : TILE;
        widen_rows(tile, kv, kv->k, koff, t0, nt, hd);
        for (int i = 0; i < maxq; i++) {
            int j0 = first[i] > t0 ? first[i] : t0, j1 = pos[i] < t0 + nt - 1 ? pos[i] : t0 + nt - 1;
            if (j0 > j1) continue;
            __m512 qv[MAXV];
            for (int c = 0; c < nv; c++) qv[c] = _mm512_loadu_ps(q[i] + 16 * c);
            float *sc = scores + (size_t)i * span - lo, mx = maxs[i];
            int j = j0;
            for (; j + KEYS <= j1 + 1; j += KEYS) {
                __m512 acc[KEYS];
                for (int u = 0; u < KEYS; u++) acc[u] = _mm512_setzero_ps();
                for (int c = 0; c < nv; c++)
                    for (int u = 0; u < KEYS; u++)
                        acc[u] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(tile + (size_t)(j + u - t0) * hd + 16 * c), acc[u]);
                for (int u = 0; u < KEYS; u++) {
                    float s = _mm512_reduce_add_ps(acc[u]) * scale;
                    if (softcap > 0.0f) s = tanhf(s / softcap) * softcap;
                    sc[j + u] = s;
                    if (s > mx) mx = s;
                }
            }
            for (; j <= j1; j++) {
                __m512 acc = _mm512_setzero_ps();
                for (int c = 0; c < nv; c++)
                    acc = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(tile + (size_t)(j - t0) * hd + 16 * c), acc);
                float s = _mm512_reduce_add_ps(acc) * scale;
                if (softcap > 0.0f) s = tanhf(s / softcap) * softcap;
                sc[j] = s;
                if (s > mx) mx = s;
            }
            maxs[i] = mx;
        }
    }
    /* softmax per query, in key order; probabilities times 1/sum in place */
    for (int i = 0; i < maxq; i++) {
        float *sc = scores + (size_t)i * span + (first[i] - lo);
        int n = pos[i] - first[i] + 1;
        for (int j = 0; j < n; j++) sc[j] = pdl_exp_nonpos(sc[j] - maxs[i]);
        float sum = 0.0f;
        for (int j = 0; j < n; j++) sum += sc[j];
        float inv = 1.0f / sum;
        maxs[i] = inv;
        for (int c = 0; c < nv; c++) _mm512_storeu_ps(out[i] + 16 * c, _mm512_setzero_ps());
    }
    /* values: out += p_j v_j in key order, one tile of V at a time */
    for (int t0 = lo; t0 <= hi; t0 += TILE) {
        int nt = hi - t0 + 1 < TILE ? hi - t0 + 1 : TILE;
        widen_rows(tile, kv, kv->v, koff, t0, nt, hd);
        for (int i = 0; i < maxq; i++) {
            int j0 = first[i] > t0 ? first[i] : t0, j1 = pos[i] < t0 + nt - 1 ? pos[i] : t0 + nt - 1;
            if (j0 > j1) continue;
            const float *sc = scores + (size_t)i * span - lo;
            float inv = maxs[i];
            __m512 o[MAXV];
            for (int c = 0; c < nv; c++) o[c] = _mm512_loadu_ps(out[i] + 16 * c);
            for (int j = j0; j <= j1; j++) {
                __m512 p = _mm512_set1_ps(sc[j] * inv);
                const float *vr = tile + (size_t)(j - t0) * hd;
                for (int c = 0; c < nv; c++) o[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vr + 16 * c), o[c]);
            }
            for (int c = 0; c < nv; c++) _mm512_storeu_ps(out[i] + 16 * c, o[c]);
        }
    }
    /* beyond 64 queries: the rest in further calls */
    if (n_q > maxq)
        attention_queries_avx512_fast(out + maxq, q + maxq, pos + maxq, n_q - maxq, hd, kv_head, scale, softcap, window,
                                      kv, scratch);
}

void pdl_attention_queries_avx512(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                                  int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                  float *scratch) {
    if (head_dim % 16 == 0 && head_dim <= 16 * MAXV) {
        attention_queries_avx512_fast(out, q, pos, n_q, head_dim, kv_head, scale, softcap, window, kv, scratch);
        return;
    }
    for (int i = 0; i < n_q; i++)
        attention_head_avx512_generic(out[i], q[i], head_dim, kv_head, scale, softcap, pos[i], window, kv, scratch);
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

void pdl_attention_queries_avx512(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                                  int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                  float *scratch) {
    for (int i = 0; i < n_q; i++)
        pdl_attention_head_scalar(out[i], q[i], head_dim, kv_head, scale, softcap, pos[i], window, kv, scratch);
}
#endif
