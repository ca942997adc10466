/*
 * attention_avx512.c - attention with AVX-512, in the order attention.h
 * defines (the same bits as the portable body).
 *
 * Scores are a small matrix product: a tile of up to 8 queries x 2 groups
 * of 16 keys (4 groups for a single query) keeps one accumulator per query
 * and group; each step multiplies one broadcast query element by the same
 * dimension of 16 keys, which K's block layout stores side by side (F16
 * widened as it is loaded). No horizontal sums, and each key vector serves
 * every query of the tile. Values: up to 4 queries (fewer for wide heads)
 * share each loaded V row over the keys they have in common; each query
 * still adds its keys in order. Block sizes or head sizes that are not a
 * multiple of 16 (or heads over 256) take the portable body, built here.
 */
#include "kernels/attention.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define ATTN_STORAGE static
#define ATTN_QUERIES_FN attention_queries_avx512_generic
#define ATTN_F16(h) _cvtsh_ss(h)
#include "kernels/attention_impl.h"

#define MAXV 16 /* head_dim / 16 at most */
#define SR 8    /* queries per score tile */
#define SG 2    /* groups of 16 keys per score tile; 4 for a single query */
#define MAXQ 64 /* queries per pass */

static inline __m512 load16(const uint8_t *p, int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_loadu_ps((const float *)(const void *)p);
}

/* Scores of NR queries for NG groups of 16 keys: kp[g] points at element
 * e0 of group g's keys, dimension d `step` bytes further per d; query r's
 * scores go to sc + r * ld + 16 g. */
static inline __attribute__((always_inline)) void score_tile(const int NR, const int NG, const float *const *q, int hd,
                                                             const uint8_t *const *kp, size_t step, int f16,
                                                             float scale, float *sc, size_t ld) {
    __m512 acc[SR][4];
    for (int r = 0; r < NR; r++)
        for (int g = 0; g < NG; g++) acc[r][g] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 k[4];
        for (int g = 0; g < NG; g++) k[g] = load16(kp[g] + (size_t)d * step, f16);
        for (int r = 0; r < NR; r++) {
            __m512 qb = _mm512_set1_ps(q[r][d]);
            for (int g = 0; g < NG; g++) acc[r][g] = _mm512_fmadd_ps(qb, k[g], acc[r][g]);
        }
    }
    __m512 s = _mm512_set1_ps(scale);
    for (int r = 0; r < NR; r++)
        for (int g = 0; g < NG; g++) _mm512_storeu_ps(sc + r * ld + 16 * g, _mm512_mul_ps(acc[r][g], s));
}

#define SCORE_CASE(NR, NG) score_tile(NR, NG, q, hd, kp, step, f16, scale, sc, ld)

static void score_tile_any(int nr, int ng, const float *const *q, int hd, const uint8_t *const *kp, size_t step,
                           int f16, float scale, float *sc, size_t ld) {
    if (ng == 2) {
        switch (nr) {
        case 8: SCORE_CASE(8, 2); return;
        case 7: SCORE_CASE(7, 2); return;
        case 6: SCORE_CASE(6, 2); return;
        case 5: SCORE_CASE(5, 2); return;
        case 4: SCORE_CASE(4, 2); return;
        case 3: SCORE_CASE(3, 2); return;
        case 2: SCORE_CASE(2, 2); return;
        default: SCORE_CASE(1, 2); return;
        }
    }
    if (nr == 1) {
        switch (ng) {
        case 4: SCORE_CASE(1, 4); return;
        case 3: SCORE_CASE(1, 3); return;
        default: SCORE_CASE(1, 1); return;
        }
    }
    switch (nr) { /* one group left */
    case 8: SCORE_CASE(8, 1); return;
    case 7: SCORE_CASE(7, 1); return;
    case 6: SCORE_CASE(6, 1); return;
    case 5: SCORE_CASE(5, 1); return;
    case 4: SCORE_CASE(4, 1); return;
    case 3: SCORE_CASE(3, 1); return;
    default: SCORE_CASE(2, 1); return;
    }
}

/* Walks the slots of consecutive positions without a division per key. */
typedef struct slot_walk {
    const pdl_attn_kv *kv;
    int pos, off;
    int64_t slot;
} slot_walk;

static inline void walk_start(slot_walk *w, const pdl_attn_kv *kv, int pos) {
    w->kv = kv;
    w->pos = pos;
    w->off = pos % kv->block_size;
    w->slot = (int64_t)kv->block_table[pos / kv->block_size] * kv->block_size + w->off;
}

static inline void walk_next(slot_walk *w) {
    w->pos++;
    if (++w->off == w->kv->block_size) {
        w->off = 0;
        w->slot = (int64_t)w->kv->block_table[w->pos / w->kv->block_size] * w->kv->block_size;
    } else {
        w->slot++;
    }
}

/* out[r] = sum over j in [a[r], b[r]] of p_r[j - base] v_j, keys in order
 * for each query; the keys all NR queries have, [max a, min b], are read
 * once for all of them. NV = head_dim / 16. */
static inline __attribute__((always_inline)) void value_tile(const int NR, const int NV, float *const *out,
                                                             const float *const *p, int base, const int *a,
                                                             const int *b, const pdl_attn_kv *kv, size_t e0,
                                                             int f16) {
    size_t esize = f16 ? 2 : 4, row = (size_t)kv->kv_dim * esize;
    const uint8_t *vpool = (const uint8_t *)kv->v + e0 * esize;
    __m512 acc[4][MAXV];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
    int F = a[0], L = b[0];
    for (int r = 1; r < NR; r++) {
        if (a[r] > F) F = a[r];
        if (b[r] < L) L = b[r];
    }
    int common = F <= L; /* if not, every query alone */
    slot_walk w;
    /* each query's keys before the common ones */
    for (int r = 0; r < NR; r++) {
        int j1 = common ? F - 1 : b[r];
        if (a[r] > j1) continue;
        walk_start(&w, kv, a[r]);
        for (int j = a[r]; j <= j1; j++, walk_next(&w)) {
            const uint8_t *v = vpool + (size_t)w.slot * row;
            __m512 pb = _mm512_set1_ps(p[r][j - base]);
            for (int c = 0; c < NV; c++) acc[r][c] = _mm512_fmadd_ps(pb, load16(v + 16 * c * esize, f16), acc[r][c]);
        }
    }
    /* the common keys, each V row loaded once */
    if (common) {
        walk_start(&w, kv, F);
        for (int j = F; j <= L; j++, walk_next(&w)) {
            const uint8_t *v = vpool + (size_t)w.slot * row;
            __m512 pb[4];
            for (int r = 0; r < NR; r++) pb[r] = _mm512_set1_ps(p[r][j - base]);
            for (int c = 0; c < NV; c++) {
                __m512 vv = load16(v + 16 * c * esize, f16);
                for (int r = 0; r < NR; r++) acc[r][c] = _mm512_fmadd_ps(pb[r], vv, acc[r][c]);
            }
        }
    }
    /* and the keys after them */
    for (int r = 0; common && r < NR; r++) {
        int j0 = L + 1;
        if (j0 > b[r]) continue;
        walk_start(&w, kv, j0);
        for (int j = j0; j <= b[r]; j++, walk_next(&w)) {
            const uint8_t *v = vpool + (size_t)w.slot * row;
            __m512 pb = _mm512_set1_ps(p[r][j - base]);
            for (int c = 0; c < NV; c++) acc[r][c] = _mm512_fmadd_ps(pb, load16(v + 16 * c * esize, f16), acc[r][c]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NV; c++) _mm512_storeu_ps(out[r] + 16 * c, acc[r][c]);
}

static void queries_fast(float *const *out, const float *const *q, const int *pos, int n_q, int hd, int kv_head,
                         float scale, float softcap, int window, const pdl_attn_kv *kv, float *scratch) {
    int f16 = kv->kv_is_f16, bs = kv->block_size, nv = hd / 16;
    size_t esize = f16 ? 2 : 4, e0 = (size_t)kv_head * (size_t)hd, step = (size_t)bs * esize;
    int first[MAXQ], lo = INT32_MAX, hi = -1;
    for (int i = 0; i < n_q; i++) {
        first[i] = attn_first(pos[i], window);
        if (first[i] < lo) lo = first[i];
        if (pos[i] > hi) hi = pos[i];
    }
    /* scores of whole groups of 16 positions: query i's row starts at base */
    int base = lo & ~15, end = (hi | 15) + 1;
    size_t ld = (size_t)(end - base);
    int gmax = n_q == 1 ? 4 : SG;
    for (int g0 = base; g0 < end; g0 += 16 * gmax) {
        int ng = (end - g0) / 16 < gmax ? (end - g0) / 16 : gmax;
        const uint8_t *kp[4];
        for (int g = 0; g < ng; g++) {
            int j16 = g0 + 16 * g;
            int64_t slot = (int64_t)kv->block_table[j16 / bs] * bs + j16 % bs;
            kp[g] = (const uint8_t *)kv->k + pdl_attn_k_index(slot, bs, kv->kv_dim, (int)e0) * esize;
        }
        for (int r0 = 0; r0 < n_q; r0 += SR) {
            int nr = n_q - r0 < SR ? n_q - r0 : SR;
            int needed = 0; /* a causal prompt's later key groups are past its early rows */
            for (int r = r0; r < r0 + nr; r++) needed |= first[r] < g0 + 16 * ng && pos[r] >= g0;
            if (!needed) continue;
            score_tile_any(nr, ng, q + r0, hd, kp, step, f16, scale, scratch + (size_t)r0 * ld + (g0 - base), ld);
        }
    }
    const float *p[MAXQ];
    for (int i = 0; i < n_q; i++) {
        float *sc = scratch + (size_t)i * ld + (first[i] - base);
        int n = pos[i] - first[i] + 1;
        if (softcap > 0.0f)
            for (int j = 0; j < n; j++) sc[j] = tanhf(sc[j] / softcap) * softcap;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        int j = 0;
        for (; j + 16 <= n; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sc + j));
        if (j < n) mx = _mm512_mask_max_ps(mx, (__mmask16)((1u << (n - j)) - 1), mx, _mm512_loadu_ps(sc + j));
        attn_softmax(sc, n, _mm512_reduce_max_ps(mx));
        p[i] = scratch + (size_t)i * ld; /* indexed by position - base */
    }
    int vr = nv <= 4 ? 4 : nv <= 8 ? 3 : 1;
    for (int i0 = 0; i0 < n_q; i0 += vr) {
        int nr = n_q - i0 < vr ? n_q - i0 : vr;
        const float *const *pp = p + i0;
        const int *a = first + i0, *b = pos + i0;
        float *const *o = out + i0;
#define VALUE_CASE(NR, NV) value_tile(NR, NV, o, pp, base, a, b, kv, e0, f16)
        if (nv == 8 && nr == 3) VALUE_CASE(3, 8);
        else if (nv == 8 && nr == 2) VALUE_CASE(2, 8);
        else if (nv == 8) VALUE_CASE(1, 8);
        else if (nv == 4 && nr == 4) VALUE_CASE(4, 4);
        else if (nv == 4 && nr == 3) VALUE_CASE(3, 4);
        else if (nv == 4 && nr == 2) VALUE_CASE(2, 4);
        else if (nv == 4) VALUE_CASE(1, 4);
        else if (nv == 16) VALUE_CASE(1, 16);
        else {
            for (int r = 0; r < nr; r++) value_tile(1, nv, o + r, pp + r, base, a + r, b + r, kv, e0, f16);
        }
#undef VALUE_CASE
    }
}

void pdl_attention_queries_avx512(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                                  int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                  float *scratch) {
    if (head_dim % 16 != 0 || head_dim > 16 * MAXV || kv->block_size % 16 != 0) {
        attention_queries_avx512_generic(out, q, pos, n_q, head_dim, kv_head, scale, softcap, window, kv, scratch);
        return;
    }
    for (int i0 = 0; i0 < n_q; i0 += MAXQ) { /* the scratch of MAXQ queries is reused */
        int n = n_q - i0 < MAXQ ? n_q - i0 : MAXQ;
        queries_fast(out + i0, q + i0, pos + i0, n, head_dim, kv_head, scale, softcap, window, kv, scratch);
    }
}
#else
void pdl_attention_queries_avx512(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                                  int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                  float *scratch) {
    pdl_attention_queries_scalar(out, q, pos, n_q, head_dim, kv_head, scale, softcap, window, kv, scratch);
}
#endif
