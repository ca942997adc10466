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

/* The sums of 16 vectors, r[k] = sum of a[k]'s lanes, each reduced by the
 * tree _mm512_reduce_add_ps uses: (l + l+8), then (+4), (+2), (+1). So each
 * key's score has the same bits as when reduced alone; the 16 reductions
 * share their shuffles. */
static inline __attribute__((always_inline)) __m512 reduce16(__m512 a[16]) {
    const __m512i i1l = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i i1h = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const __m512i i2l = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i i2h = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    const __m512i i3l = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
    const __m512i i3h = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    const __m512i i4l = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i i4h = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512 b[8], c[4], d[2];
    /* b[k]: key k's (l + l+8) in lanes 0-7, key k+8's in lanes 8-15 */
    for (int k = 0; k < 8; k++)
        b[k] = _mm512_add_ps(_mm512_permutex2var_ps(a[k], i1l, a[k + 8]), _mm512_permutex2var_ps(a[k], i1h, a[k + 8]));
    /* c[k]: 4 lanes each of keys k, k+8, k+4, k+12 */
    for (int k = 0; k < 4; k++)
        c[k] = _mm512_add_ps(_mm512_permutex2var_ps(b[k], i2l, b[k + 4]), _mm512_permutex2var_ps(b[k], i2h, b[k + 4]));
    /* d[k]: 2 lanes each of keys k, k+8, k+4, k+12, k+2, k+10, k+6, k+14 */
    for (int k = 0; k < 2; k++)
        d[k] = _mm512_add_ps(_mm512_permutex2var_ps(c[k], i3l, c[k + 2]), _mm512_permutex2var_ps(c[k], i3h, c[k + 2]));
    /* e: keys 0 8 4 12 2 10 6 14 1 9 5 13 3 11 7 15 */
    __m512 e = _mm512_add_ps(_mm512_permutex2var_ps(d[0], i4l, d[1]), _mm512_permutex2var_ps(d[0], i4h, d[1]));
    const __m512i order = _mm512_setr_epi32(0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15);
    return _mm512_permutexvar_ps(order, e); /* lane k = key k (this order is its own inverse) */
}

/* nv = head_dim / 16, a constant in each caller below, so that q and the
 * output stay in registers without a branch per vector */
static inline __attribute__((always_inline)) void
attention_queries_body(float *const *out, const float *const *q, const int *pos, int n_q, int hd, const int nv,
                       int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv, float *scratch) {
    hd = 16 * nv; /* the same number, but a constant where nv is one */
    int lo = pos[0], hi = pos[0];
    int first[64], maxq = n_q < 64 ? n_q : 64;
    for (int i = 0; i < maxq; i++) {
        first[i] = (window > 0 && pos[i] - window + 1 > 0) ? pos[i] - window + 1 : 0;
        if (first[i] < lo) lo = first[i];
        if (pos[i] > hi) hi = pos[i];
    }
    int span = hi - lo + 1;
    size_t koff = (size_t)kv_head * (size_t)hd * (kv->kv_is_f16 ? 2 : 4);
    float *tile = scratch, *scores = scratch + PDL_ATTN_TILE_FLOATS;
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
            if (nv <= 8) /* 16 keys at a time: 16 FMA chains, one shared reduction */
                for (; j + 16 <= j1 + 1; j += 16) {
                    const float *kt = tile + (size_t)(j - t0) * (16 * nv); /* key u at kt + u * 16 * nv */
                    __m512 acc[16];
                    for (int u = 0; u < 16; u++) acc[u] = _mm512_setzero_ps();
                    for (int c = 0; c < nv; c++)
                        for (int u = 0; u < 16; u++)
                            acc[u] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kt + u * 16 * nv + 16 * c), acc[u]);
                    __m512 r = _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale));
                    _mm512_storeu_ps(sc + j, r);
                    if (softcap > 0.0f) {
                        for (int u = 0; u < 16; u++) {
                            sc[j + u] = tanhf(sc[j + u] / softcap) * softcap;
                            if (sc[j + u] > mx) mx = sc[j + u];
                        }
                    } else { /* the max is exact in any order */
                        float m16 = _mm512_reduce_max_ps(r);
                        if (m16 > mx) mx = m16;
                    }
                }
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
}

static void attention_queries_avx512_fast(float *const *out, const float *const *q, const int *pos, int n_q, int hd,
                                          int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                          float *scratch) {
    for (int i0 = 0; i0 < n_q; i0 += 64) { /* 64 queries per pass at most */
        int n = n_q - i0 < 64 ? n_q - i0 : 64;
        float *const *o = out + i0;
        const float *const *qq = q + i0;
        const int *p = pos + i0;
        switch (hd / 16) {
        case 4: attention_queries_body(o, qq, p, n, hd, 4, kv_head, scale, softcap, window, kv, scratch); break;
        case 8: attention_queries_body(o, qq, p, n, hd, 8, kv_head, scale, softcap, window, kv, scratch); break;
        case 16: attention_queries_body(o, qq, p, n, hd, 16, kv_head, scale, softcap, window, kv, scratch); break;
        default: attention_queries_body(o, qq, p, n, hd, hd / 16, kv_head, scale, softcap, window, kv, scratch);
        }
    }
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
