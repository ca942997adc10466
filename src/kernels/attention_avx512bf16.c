/*
 * attention_avx512bf16.c - attention in attention.h's BF16 order with
 * AVX512_BF16: VDPBF16PS multiplies two BF16 pairs per lane, twice the
 * products per instruction of the F32 tiles (attention_avx512.c); the
 * forward's attention when PAGEDLM_BF16_ATTENTION=bf16 (attn_set_order:
 * opt-in: on the Intel VM measured VDPBF16PS issues at one FMA port's rate
 * and these tiles lose; on the Zen 5 VM they win at prefill, 1.35x over
 * the F32 tiles at 128 queries a call, and lose at decode, 0.6x at two,
 * docs/benchmarks.md). The same bits as the
 * portable reference (attention_bf16.c), which takes the shapes these tiles
 * do not.
 *
 * Each pass of up to AT_MAXQ queries turns what it reads into BF16 pairs
 * once and multiplies them into every query:
 *   queries: each query's elements in order, a pair per 32-bit word
 *            (dimensions 2t and 2t + 1);
 *   keys:    each group of AT_W keys (up to AT_SG1 groups at a time), word
 *            l of pair t holding key l's dimensions 2t and 2t + 1, so a
 *            score tile is attention_tiles_body.h's with one VDPBF16PS per
 *            pair of dimensions instead of two FMAs;
 *   P:       each query's probabilities, rounded in place in its score row,
 *            zero outside its range: word m holds positions 2m and 2m + 1;
 *   values:  BF_CHUNK pairs of positions at a time, word d of pair m
 *            holding dimension d of keys 2m and 2m + 1 (zero past the
 *            keys the pass reads); each value tile adds the chunk into its
 *            outputs, which stay in out between chunks (a store and a load
 *            are exact). A pair with one key outside a query's range has
 *            that key's half of each word masked to zero for that query, so
 *            the key enters as p = 0, v = 0, whatever its value.
 * A call of one or two queries (a decode step) makes its key and value
 * pairs in registers instead: each would be read once, so a buffer only
 * adds a store and a load; its score tiles prefetch every group of keys
 * AT_PF_GROUPS tiles on, non-temporal, as the F32 tiles' decode calls do
 * (with only the next group prefetched, decode at depth 4096 ran 0.78x
 * the F32 tiles' speed; 0.93x now, docs/benchmarks.md). The pairs are
 * made as attention_bf16_pairs.h makes them (shared with the AMX tiles). */
#include "kernels/attention.h"

#if defined(__AVX512BF16__)
#include "kernels/attention_avx512_ops.h"

#define ATTN_COMMON_ONLY
#define ATTN_F16(h) _cvtsh_ss(h)
#include "kernels/attention_body.h"

#define AT_FN attn_queries_avx512bf16
#define AT_GENERIC attn_queries_bf16_scalar
#define AT_BF16
#include "kernels/attention_tiles_body.h"

#include "kernels/attention_bf16_pairs.h"

_Static_assert(AT_MAXQ / 2 + AT_SG1 * AT_W / 2 + BF_CHUNK <= ATTN_BF16_SCRATCH_PER_DIM,
               "attn_queries_scratch holds the BF16 buffers");

/* The 32-bit word at p in every lane. */
static inline __m512bh bf_bcast(const void *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return (__m512bh)_mm512_set1_epi32((int)w);
}

static inline __m512bh bf_load(const uint32_t *p) { return (__m512bh)_mm512_loadu_si512(p); }

/* Scores of NR queries (qw[r]: their dimension pairs) for NG groups of
 * keys, times scale, to sc + r * ld + AT_W g. The key pairs come from the
 * buffer kb (KSRC < 0), or (KSRC = the cache's KIND) are made here from the
 * cache at kp / ks, as bf_keys makes them, pf / pfs prefetched: a call of
 * one or two queries (a decode step) would not read a buffer twice. */
typedef struct bf_key_src {
    const uint32_t *kb;
    const uint8_t *const *kp, *const *ks, *pf, *pfs;
    const uint8_t *const *ahead, *const *ahead_s; /* direct: the groups n_ahead tiles on, non-temporal */
    int n_ahead;
    size_t step;
} bf_key_src;

static inline __attribute__((always_inline)) void bf_score_tile(const int NR, const int NG, const uint32_t *qw,
                                                                int hd, const bf_key_src *src, float scale,
                                                                float *sc, size_t ld, const int KSRC) {
    __m512 acc[8][4];
    int half = hd / 2;
    for (int r = 0; r < NR; r++)
        for (int g = 0; g < NG; g++) acc[r][g] = _mm512_setzero_ps();
    for (int t = 0; t < half; t++) {
        __m512bh k[4];
        for (int g = 0; g < NG; g++)
            k[g] = KSRC < 0 ? bf_load(src->kb + ((size_t)g * (size_t)half + (size_t)t) * AT_W)
                            : (__m512bh)bf_key_pair(src->kp[g], KSRC >= 2 ? src->ks[g] : NULL, t, src->step,
                                                    KSRC < 0 ? 0 : KSRC);
        if (KSRC >= 0 && src->pf) bf_prefetch_pair(src->pf, src->pfs, t, src->step, KSRC < 0 ? 0 : KSRC, 0);
        if (KSRC >= 0)
            for (int g = 0; g < src->n_ahead; g++)
                bf_prefetch_pair(src->ahead[g], src->ahead_s[g], t, src->step, KSRC < 0 ? 0 : KSRC, 1);
        for (int r = 0; r < NR; r++) {
            __m512bh qv = bf_bcast(qw + (size_t)r * (size_t)half + (size_t)t);
            for (int g = 0; g < NG; g++) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], k[g], qv);
        }
    }
    __m512 s = _mm512_set1_ps(scale);
    for (int r = 0; r < NR; r++)
        for (int g = 0; g < NG; g++) _mm512_storeu_ps(sc + r * ld + AT_W * g, _mm512_mul_ps(acc[r][g], s));
}

#define BF_SCORE_NG(NR, KSRC)                                                                                      \
    switch (ng) {                                                                                                  \
    case 4: bf_score_tile(NR, 4, qw, hd, src, scale, sc, ld, KSRC); return;                                       \
    case 3: bf_score_tile(NR, 3, qw, hd, src, scale, sc, ld, KSRC); return;                                       \
    case 2: bf_score_tile(NR, 2, qw, hd, src, scale, sc, ld, KSRC); return;                                       \
    default: bf_score_tile(NR, 1, qw, hd, src, scale, sc, ld, KSRC); return;                                      \
    }

/* The buffered tiles: up to AT_SR queries, AT_SG groups (AT_SG1 for one). */
static void bf_score_tile_any(int nr, int ng, const uint32_t *qw, int hd, const bf_key_src *src, float scale,
                              float *sc, size_t ld) {
    switch (nr) {
    case 8: BF_SCORE_NG(8, -1)
    case 7: BF_SCORE_NG(7, -1)
    case 6: BF_SCORE_NG(6, -1)
    case 5: BF_SCORE_NG(5, -1)
    case 4: BF_SCORE_NG(4, -1)
    case 3: BF_SCORE_NG(3, -1)
    case 2: BF_SCORE_NG(2, -1)
    default: BF_SCORE_NG(1, -1)
    }
}

/* The direct ones, for one or two queries. */
static void bf_score_tile_direct(int nr, int ng, const uint32_t *qw, int hd, const bf_key_src *src, float scale,
                                 float *sc, size_t ld, int kind) {
#define BF_SCORE_KIND(KIND)                                                                                        \
    if (nr == 2) BF_SCORE_NG(2, KIND)                                                                              \
    BF_SCORE_NG(1, KIND)
    switch (kind) {
    case 3: BF_SCORE_KIND(3)
    case 2: BF_SCORE_KIND(2)
    case 1: BF_SCORE_KIND(1)
    default: BF_SCORE_KIND(0)
    }
#undef BF_SCORE_KIND
}
#undef BF_SCORE_NG

/* The halves of pair m's words a query over [a, b] keeps: both, or the one
 * of its key inside. */
static inline __mmask32 bf_pair_mask(int m, int a, int b) {
    __mmask32 k = 0xFFFFFFFFu;
    if (2 * m < a) k &= 0xAAAAAAAAu;
    if (2 * m + 1 > b) k &= 0x55555555u;
    return k;
}

/* out[r][d0 ..] (NC vectors) += the pairs of [c0, c1] that query r's range
 * [a[r], b[r]] meets, in order: p words from pp[r] (pair m at word
 * m - mbase), V words from vb (pair c0 first; VSRC < 0) or (VSRC = the
 * cache's KIND) made here from the rows R, for one or two queries. Pairs
 * every query has are loaded once for all of them. */
static inline __attribute__((always_inline)) void bf_value_tile(const int NR, const int NC, float *const *out, int d0,
                                                                const uint8_t *const *pp, int mbase, const int *a,
                                                                const int *b, int c0, int c1, const uint32_t *vb,
                                                                const bf_rows *R, int hd, const int VSRC) {
#define BF_V(m, c)                                                                                                 \
    (VSRC < 0 ? bf_load(vb + (size_t)((m) - c0) * (size_t)hd + d0 + AT_W * (c)) : bf_vpair(R, c0, (m), d0 + AT_W * (c), VSRC))
    int ra[AT_VR], rb[AT_VR], F = c0, L = c1, any = 0;
    for (int r = 0; r < NR; r++) {
        ra[r] = a[r] / 2 > c0 ? a[r] / 2 : c0;
        rb[r] = b[r] / 2 < c1 ? b[r] / 2 : c1;
        any |= ra[r] <= rb[r];
        if (ra[r] > F) F = ra[r];
        if (rb[r] < L) L = rb[r];
    }
    if (!any) return;
    __m512 acc[AT_VR][4];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = _mm512_loadu_ps(out[r] + d0 + AT_W * c);
    int common = F <= L; /* if not, every query alone */
#define BF_ONE(r, m)                                                                                               \
    do {                                                                                                           \
        __mmask32 k_ = bf_pair_mask((m), a[r], b[r]);                                                              \
        __m512bh p_ = bf_bcast(pp[r] + 4 * (size_t)((m) - mbase));                                                 \
        for (int c = 0; c < NC; c++)                                                                               \
            acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)_mm512_maskz_mov_epi16(k_, (__m512i)BF_V(m, c)), p_); \
    } while (0)
    for (int r = 0; r < NR; r++) /* each query's pairs before the common ones (all if none) */
        for (int m = ra[r], m1 = common ? F - 1 : rb[r]; m <= m1; m++) BF_ONE(r, m);
    for (int m = F; common && m <= L; m++) {
        if (m == F || m == L) { /* a query's first or last pair may be half outside it */
            for (int r = 0; r < NR; r++) BF_ONE(r, m);
            continue;
        }
        __m512bh pb[AT_VR];
        for (int r = 0; r < NR; r++) pb[r] = bf_bcast(pp[r] + 4 * (size_t)(m - mbase));
        for (int c = 0; c < NC; c++) {
            __m512bh v = BF_V(m, c);
            for (int r = 0; r < NR; r++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], v, pb[r]);
        }
    }
    for (int r = 0; common && r < NR; r++) /* and the pairs after them */
        for (int m = L + 1; m <= rb[r]; m++) BF_ONE(r, m);
#undef BF_ONE
#undef BF_V
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(out[r] + d0 + AT_W * c, acc[r][c]);
}

#define BF_VALUE_NC(NR, VSRC)                                                                                      \
    switch (nc) {                                                                                                  \
    case 4: bf_value_tile(NR, 4, out, d0, pp, mbase, a, b, c0, c1, vb, R, hd, VSRC); return;                      \
    case 2: bf_value_tile(NR, 2, out, d0, pp, mbase, a, b, c0, c1, vb, R, hd, VSRC); return;                      \
    default: bf_value_tile(NR, 1, out, d0, pp, mbase, a, b, c0, c1, vb, R, hd, VSRC); return;                     \
    }

/* The buffered tiles, up to AT_VR queries. */
static void bf_value_tile_any(int nr, int nc, float *const *out, int d0, const uint8_t *const *pp, int mbase,
                              const int *a, const int *b, int c0, int c1, const uint32_t *vb, int hd) {
    const bf_rows *R = NULL;
    switch (nr) {
    case 6: BF_VALUE_NC(6, -1)
    case 5: BF_VALUE_NC(5, -1)
    case 4: BF_VALUE_NC(4, -1)
    case 3: BF_VALUE_NC(3, -1)
    case 2: BF_VALUE_NC(2, -1)
    default: BF_VALUE_NC(1, -1)
    }
}

/* The direct ones, for one or two queries. */
static void bf_value_tile_direct(int nr, int nc, float *const *out, int d0, const uint8_t *const *pp, int mbase,
                                 const int *a, const int *b, int c0, int c1, const bf_rows *R, int hd, int kind) {
    const uint32_t *vb = NULL;
#define BF_VALUE_KIND(KIND)                                                                                        \
    if (nr == 2) BF_VALUE_NC(2, KIND)                                                                              \
    BF_VALUE_NC(1, KIND)
    switch (kind) {
    case 3: BF_VALUE_KIND(3)
    case 2: BF_VALUE_KIND(2)
    case 1: BF_VALUE_KIND(1)
    default: BF_VALUE_KIND(0)
    }
#undef BF_VALUE_KIND
}
#undef BF_VALUE_NC

/* Query i's probabilities over [a, b] rounded to BF16 in place, row
 * indexed by position - base (base even): element j - base of the row as
 * 16-bit words, zero outside [a, b] over whole pairs. Each step reads 16
 * floats before it writes 16 halves over the first half of them. */
static void bf_probabilities(float *row, int base, int a, int b) {
    int j0 = (a / 2 * 2 - base) / AT_W * AT_W, j1 = b / 2 * 2 + 1 - base;
    uint16_t *h = (uint16_t *)(void *)row;
    for (int j = j0; j <= j1; j += AT_W) {
        int lo = a - base - j, hi = b - base - j; /* lanes inside [a, b] */
        if (lo < 0) lo = 0;
        if (hi > AT_W - 1) hi = AT_W - 1;
        __mmask16 k = hi < lo ? 0 : (__mmask16)((((uint32_t)1 << (hi + 1)) - 1) & ~(((uint32_t)1 << lo) - 1));
        __m256bh w = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, row + j));
        _mm256_storeu_si256((__m256i *)(void *)(h + j), (__m256i)w);
    }
}

static void at_queries(float *const *out, const float *const *q, const int *first, const int *pos, int n_q, int hd,
                       int kv_head, float scale, float softcap, const float *sinks, const pdl_attn_kv *kv,
                       float *scratch) {
    int kind = kv->kv_is_q4 ? 3 : kv->kv_is_q8 ? 2 : kv->kv_is_f16 ? 1 : 0;
    int bs = kv->block_size, half = hd / 2;
    size_t esize = kind == 1 ? 2 : 4, e0 = (size_t)kv_head * (size_t)hd;
    size_t step = kind >= 2 ? (size_t)bs : (size_t)bs * esize;
    int lo = INT32_MAX, hi = -1;
    for (int i = 0; i < n_q; i++) {
        if (first[i] < lo) lo = first[i];
        if (pos[i] > hi) hi = pos[i];
    }
    int base = lo / AT_W * AT_W, end = (hi / AT_W + 1) * AT_W;
    size_t ld = (size_t)(end - base);
    uint32_t *qw = (uint32_t *)(void *)(scratch + (size_t)n_q * ld); /* [n_q][hd / 2] */
    uint32_t *kb = qw + (size_t)n_q * (size_t)half;                  /* [AT_SG1][hd / 2][AT_W] */
    uint32_t *vb = kb + (size_t)AT_SG1 * (size_t)half * AT_W;        /* [BF_CHUNK][hd] */
    for (int i = 0; i < n_q; i++)
        for (int d = 0; d < hd; d += AT_W)
            _mm256_storeu_si256((__m256i *)(void *)(qw + (size_t)i * (size_t)half + d / 2),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(q[i] + d)));
    /* scores; one or two queries (a decode step) take their key and value
     * pairs straight from the cache, more take them from the buffers */
    int direct = n_q <= 2;
    int gmax = n_q == 1 ? AT_SG1 : AT_SG;
    for (int g0 = base; g0 < end; g0 += AT_W * gmax) {
        int ng = (end - g0) / AT_W < gmax ? (end - g0) / AT_W : gmax;
        int needed = 0; /* a causal prompt's later key groups are past its early rows */
        for (int r = 0; r < n_q; r++) needed |= first[r] < g0 + AT_W * ng && pos[r] >= g0;
        if (!needed) continue;
        const uint8_t *kp[4], *ks[4] = {NULL, NULL, NULL, NULL}, *pf, *pfs; /* and the next group, to prefetch */
        bf_key_groups(kv, g0, ng, gmax, end, hd, e0, kind, kp, ks, &pf, &pfs);
        bf_key_src src = {.kb = kb, .kp = kp, .ks = ks, .pf = pf, .pfs = pfs, .step = step};
        if (direct) {
            /* every group of the tile AT_PF_GROUPS on (the next one near
             * the end), as the F32 tiles' decode calls prefetch them: a
             * decode step reads the whole cache once and waits on memory
             * unless the loads are in flight well ahead */
            const uint8_t *ak[4], *as[4] = {NULL, NULL, NULL, NULL}, *unused, *unused_s;
            int ga = g0 + AT_W * gmax * AT_PF_GROUPS < end ? g0 + AT_W * gmax * AT_PF_GROUPS : g0 + AT_W * gmax;
            int na = ga < end ? ((end - ga) / AT_W < gmax ? (end - ga) / AT_W : gmax) : 0;
            if (na) bf_key_groups(kv, ga, na, na + 1, end, hd, e0, kind, ak, as, &unused, &unused_s);
            src.pf = NULL; /* the groups above include it */
            src.ahead = ak, src.ahead_s = as, src.n_ahead = na;
            bf_score_tile_direct(n_q, ng, qw, hd, &src, scale, scratch + (g0 - base), ld, kind);
            continue;
        }
        bf_keys_of(kb, ng, kp, ks, hd, step, pf, pfs, kind);
        for (int r0 = 0; r0 < n_q; r0 += AT_SR) {
            int nr = n_q - r0 < AT_SR ? n_q - r0 : AT_SR;
            int tile_needed = 0;
            for (int r = r0; r < r0 + nr; r++) tile_needed |= first[r] < g0 + AT_W * ng && pos[r] >= g0;
            if (tile_needed)
                bf_score_tile_any(nr, ng, qw + (size_t)r0 * (size_t)half, hd, &src, scale,
                                  scratch + (size_t)r0 * ld + (g0 - base), ld);
        }
    }
    /* softmax (F32, as the F32 tiles), then P to BF16 in place */
    const uint8_t *pp[AT_MAXQ];
    for (int i = 0; i < n_q; i++) {
        float *row = scratch + (size_t)i * ld;
        at_softmax_scores(row + (first[i] - base), pos[i] - first[i] + 1, softcap, attn_sink(sinks, i));
        bf_probabilities(row, base, first[i], pos[i]);
        pp[i] = (const uint8_t *)row;
    }
    /* values, BF_CHUNK pairs of positions at a time */
    int nc = AT_VACC / AT_VR, nv = hd / AT_W;
    while (nv % nc) nc /= 2;
    for (int i = 0; i < n_q; i++) memset(out[i], 0, (size_t)hd * sizeof(float));
    bf_rows R;
    for (int c0 = lo / 2; c0 <= hi / 2; c0 += BF_CHUNK) {
        int c1 = c0 + BF_CHUNK - 1 < hi / 2 ? c0 + BF_CHUNK - 1 : hi / 2;
        bf_find_rows(&R, c0, c1, lo, hi, kv, e0, hd, kind);
        if (direct) {
            for (int d0 = 0; d0 < hd; d0 += nc * AT_W)
                bf_value_tile_direct(n_q, nc, out, d0, pp, base / 2, first, pos, c0, c1, &R, hd, kind);
            continue;
        }
        bf_values(vb, &R, c0, c1, hd, kind);
        for (int i0 = 0; i0 < n_q; i0 += AT_VR) {
            int nr = n_q - i0 < AT_VR ? n_q - i0 : AT_VR;
            for (int d0 = 0; d0 < hd; d0 += nc * AT_W)
                bf_value_tile_any(nr, nc, out + i0, d0, pp + i0, base / 2, first + i0, pos + i0, c0, c1, vb, hd);
        }
    }
}
#else
void attn_queries_avx512bf16(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                             int kv_head, float scale, float softcap, const float *sinks, int window,
                             const pdl_attn_kv *kv, float *scratch) {
    attn_queries_bf16_scalar(out, q, pos, n_q, head_dim, kv_head, scale, softcap, sinks, window, kv, scratch);
}
void attn_queries_avx512bf16_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                    int n_q, int head_dim, int kv_head, float scale, float softcap,
                                    const float *sinks, const pdl_attn_kv *kv, float *scratch) {
    attn_queries_bf16_scalar_ranges(out, q, first, last, n_q, head_dim, kv_head, scale, softcap, sinks, kv, scratch);
}
#endif
