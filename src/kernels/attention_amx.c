/*
 * attention_amx.c - attention with AMX tiles (TDPBF16PS): the scores and
 * the value sums as BF16 matrix products of 16 queries at a time, in
 * attention.h's AMX order; the forward's attention when
 * PAGEDLM_BF16_ATTENTION=amx (attn_set_order(PDL_ATTN_AMX)) on a CPU with
 * AMX-BF16. On one core of the Intel VM measured, TDPBF16PS multiplies
 * about 28 times as fast as the F32 tiles' FMAs; the whole kernel takes
 * about a third of the F32 tiles' time per query-key at 4,096 keys
 * (docs/benchmarks.md).
 *
 * A pass of up to AT_MAXQ queries, in groups of 16 (a tile's rows; fewer
 * rows when the pass has fewer queries, the last group padded with zero
 * queries):
 *   queries: each query's elements rounded to BF16 in order, a row of A;
 *   scores:  each run of up to AT_SG1 groups of AT_W keys is made into
 *            dimension pairs once (attention_bf16_pairs.h, the layout of a
 *            B tile) and every query group multiplies it in, 32 dimensions
 *            per TDPBF16PS, straight into the score rows;
 *   weights: per query, one pass for the max and one for the
 *            exponentials, their sum and their rounding to BF16, written
 *            as A tiles of 32 positions (a tile's rows 64 bytes apart),
 *            zero at every position outside the query's range;
 *   values:  BF_CHUNK pairs of positions at a time as position pairs (the
 *            B layout again; zero outside the keys the pass reads); each
 *            tile of 32 positions (fixed by absolute position) is one
 *            TDPBF16PS per 16 dimensions onto the group's sums, which stay
 *            in a buffer between chunks (a tile store and load are exact);
 *            at the end the sums times 1 / sum.
 * A query's row of a product depends only on its own row of A, so its
 * scores and sums do not depend on the other queries of a pass, with one
 * exception the code closes: a key outside a query's range enters its
 * value sum as w = 0 times the key's value, which is 0 unless that value
 * is infinite or NaN. A tile of values holding such an element is taken
 * once per query with the values outside that query's range zeroed. So the
 * bits depend only on the query and its sequence's cache, as in the other
 * orders, but no portable code gives them (attention.h), so test_attention
 * holds these tiles to a tolerance against float64, and to their own bits
 * across any split of the queries.
 */
#include "kernels/attention.h"

#if defined(__AMX_BF16__) && defined(__AMX_TILE__) && defined(__AVX512BF16__)
const bool attn_amx_built = true;

#include "kernels/attention_avx512_ops.h"

#define ATTN_COMMON_ONLY
#define ATTN_F16(h) _cvtsh_ss(h)
#include "kernels/attention_body.h"

#define AT_FN attn_queries_amx
#define AT_GENERIC attn_queries_avx512bf16 /* shapes the tiles do not take */
#define AT_BF16
#define AT_MAXQ 128 /* queries per pass (at 4,096 keys 1.1-1.2x faster per query-key than 64) */
#include "kernels/attention_tiles_body.h"

#include "kernels/attention_bf16_pairs.h"

#define AMX_ROWS 16 /* queries per tile */
#define AMX_KEYS 32 /* positions per value tile (16 pairs) */

_Static_assert(AT_MAXQ / 2 + AT_SG1 * AT_W / 2 + BF_CHUNK + AT_MAXQ <= ATTN_BF16_SCRATCH_PER_DIM,
               "attn_queries_scratch holds the AMX buffers");
_Static_assert(3 * AMX_ROWS * 64 <= ATTN_AMX_SCRATCH_FIXED, "attn_queries_scratch holds the masked tiles");
_Static_assert(BF_CHUNK % (AMX_KEYS / 2) == 0, "a chunk is whole value tiles");

/* Tiles 0-3: sums (`rows` rows of 16 floats); 4: A (`rows` rows of 32
 * BF16); 5, 6: B (16 rows of 16 pairs). A pass of fewer than 16 queries (a
 * decode step) takes tiles of as many rows: a row's result is the same
 * whatever the tile's height (test_attention: one query at a time against
 * forty), and a shorter tile loads and stores less. */
static void amx_configure(int rows) {
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 7; i++) c.colsb[i] = 64, c.rows[i] = (uint8_t)(i < 5 ? rows : 16);
    _tile_loadconfig(&c);
}

/* Sums tile n += A (tile 4) times B at p (rows `stride` bytes apart),
 * loaded into B tile bt (5 or 6, in turn). Tile numbers are immediates,
 * hence a macro. */
#define AMX_DP(n, bt, p, stride)                                                                                   \
    do {                                                                                                           \
        _tile_loadd(bt, (p), (stride));                                                                            \
        _tile_dpbf16ps(n, 4, bt);                                                                                  \
    } while (0)

/* The raw scores of a group of queries (qa: rows of half words) for ng
 * groups of AT_W keys (kb: bf_keys' layout) into sc (the group's score
 * rows, `stride` bytes apart, from the first key). */
static void amx_scores(int ng, const uint32_t *qa, int half, const uint32_t *kb, float *sc, size_t stride) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int t = 0; t < half; t += 16) {
        _tile_loadd(4, qa + t, half * 4);
        AMX_DP(0, 5, kb + (size_t)t * AT_W, 64);
        if (ng > 1) AMX_DP(1, 6, kb + ((size_t)half + (size_t)t) * AT_W, 64);
        if (ng > 2) AMX_DP(2, 5, kb + (2 * (size_t)half + (size_t)t) * AT_W, 64);
        if (ng > 3) AMX_DP(3, 6, kb + (3 * (size_t)half + (size_t)t) * AT_W, 64);
    }
    _tile_stored(0, sc, stride);
    if (ng > 1) _tile_stored(1, sc + AT_W, stride);
    if (ng > 2) _tile_stored(2, sc + 2 * AT_W, stride);
    if (ng > 3) _tile_stored(3, sc + 3 * AT_W, stride);
}

/* Loads (or stores) nd sums tiles from (to) acc, rows `stride` bytes apart. */
static inline void amx_load_sums(int nd, const float *acc, size_t stride) {
    _tile_loadd(0, acc, stride);
    _tile_loadd(1, acc + 16, stride);
    if (nd > 2) {
        _tile_loadd(2, acc + 32, stride);
        _tile_loadd(3, acc + 48, stride);
    }
}
static inline void amx_store_sums(int nd, float *acc, size_t stride) {
    _tile_stored(0, acc, stride);
    _tile_stored(1, acc + 16, stride);
    if (nd > 2) {
        _tile_stored(2, acc + 32, stride);
        _tile_stored(3, acc + 48, stride);
    }
}

/* Sums tiles 0 .. nd - 1 += A (tile 4) times the value words at vt (16
 * pairs, rows `stride` bytes apart, nd * 16 dimensions). */
static inline void amx_values(int nd, const uint32_t *vt, size_t stride) {
    AMX_DP(0, 5, vt, stride);
    AMX_DP(1, 6, vt + 16, stride);
    if (nd > 2) {
        AMX_DP(2, 5, vt + 32, stride);
        AMX_DP(3, 6, vt + 48, stride);
    }
}

/* The halves of pair m's words a query over [a, b] keeps: the low one
 * (position 2m) when a <= 2m <= b, the high one likewise. */
static inline __mmask32 amx_pair_mask(int m, int a, int b) {
    __mmask32 k = 0;
    if (2 * m >= a && 2 * m <= b) k |= 0x55555555u;
    if (2 * m + 1 >= a && 2 * m + 1 <= b) k |= 0xAAAAAAAAu;
    return k;
}

/* Whether any of n words at w holds an infinite or NaN BF16 half. */
static bool amx_nonfinite(const uint32_t *w, size_t n) {
    const __m512i e = _mm512_set1_epi16(0x7F80);
    __mmask32 any = 0;
    for (size_t i = 0; i < n; i += 16)
        any |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_loadu_si512(w + i), e), e);
    return any != 0;
}

/* A value tile with an infinite or NaN element: the sums at acc (16 rows
 * `stride` bytes apart, nd * 16 dimensions) += A (tile 4) times the words
 * at vt (16 pairs from pair m0, rows vstride bytes apart), each of the nr
 * queries' rows with the values outside its range [a[r], b[r]] zeroed.
 * vm, ct, keep: 16 rows of 64 words or floats each. */
static void amx_values_masked(int nd, float *acc, size_t stride, const uint32_t *vt, size_t vstride, int m0,
                              const int *a, const int *b, int nr, uint32_t *vm, float *ct, float *keep) {
    for (int r = 0; r < nr; r++) {
        for (int k = 0; k < 16; k++) {
            __mmask32 mk = amx_pair_mask(m0 + k, a[r], b[r]);
            const uint32_t *src = (const uint32_t *)(const void *)((const uint8_t *)vt + (size_t)k * vstride);
            for (int c = 0; c < nd; c++)
                _mm512_storeu_si512(vm + k * 64 + 16 * c, _mm512_maskz_mov_epi16(mk, _mm512_loadu_si512(src + 16 * c)));
        }
        amx_load_sums(nd, acc, stride);
        amx_values(nd, vm, 256);
        amx_store_sums(nd, ct, 256);
        memcpy(keep + r * 64, ct + r * 64, (size_t)nd * 16 * sizeof(float));
    }
    for (int r = 0; r < nr; r++)
        memcpy((uint8_t *)acc + (size_t)r * stride, keep + r * 64, (size_t)nd * 16 * sizeof(float));
}

/* e^z to about 3e-6 relative (z <= 0, a rounding above 0 too; below -100
 * as e^-100, NaN as NaN): z = n ln2 + r, e^r by its Taylor series to
 * r^5 in fused steps, times 2^n by VSCALEFPS. Its result is rounded to
 * BF16 (2^-9) before it is used, so the series need not be longer. */
static inline __m512 amx_exp(__m512 z) {
    z = _mm512_max_ps(_mm512_set1_ps(-100.0f), z); /* a NaN z is the second operand: kept */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), z);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 120.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* A query's scores to weights in its row of a group's A tiles (attention.h's
 * AMX order): row holds its raw scores (indexed by position - base, ld
 * positions, its range [a, b] inside). s = raw * scale (soft-capped when
 * softcap > 0), m = max s (and the sink), p = e^(s - m) (amx_exp; for an
 * uncapped row s - m in one rounding, fma(raw, scale, -m)), rounded to
 * BF16 into dst (row r of tile 0; tiles of `rows` rows of 32 positions
 * follow one another), zero at every other position of the row; returns
 * 1 / sum, the sum of the unrounded p in 16 lanes (lane l the positions
 * l mod 16, rising), reduced as attn_softmax reduces its lanes, plus
 * e^(sink - m). The output is the P.V sums times it. Two passes: the max,
 * then the exponentials, the sums and the rounding. */
static float amx_softmax_tiles(float *row, int base, int a, int b, int ld, float scale, float softcap, float sink,
                               uint16_t *dst, int rows) {
    int j0 = (a - base) / AT_W * AT_W, j1 = b - base; /* the vectors holding [a, b] */
    float mx;
    __m512 sv = _mm512_set1_ps(scale);
    if (softcap > 0.0f) { /* Gemma 2: the capped scores in place, then sv = 1 */
        mx = -INFINITY;
        for (int j = a - base; j <= j1; j++) {
            row[j] = tanhf(row[j] * scale / softcap) * softcap;
            mx = row[j] > mx ? row[j] : mx;
        }
        sv = _mm512_set1_ps(1.0f);
    } else {
        __m512 m = _mm512_set1_ps(-INFINITY);
        for (int j = j0; j <= j1; j += AT_W) {
            int lo = a - base - j, hi = b - base - j;
            if (lo < 0) lo = 0;
            if (hi > AT_W - 1) hi = AT_W - 1;
            __mmask16 k = (__mmask16)((((uint32_t)1 << (hi + 1)) - 1) & ~(((uint32_t)1 << lo) - 1));
            m = _mm512_mask_max_ps(m, k, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row + j), sv));
        }
        mx = _mm512_reduce_max_ps(m); /* the max is exact in any order */
    }
    if (sink > mx) mx = sink;
    __m512 mv = _mm512_set1_ps(mx), lanes = _mm512_setzero_ps();
    for (int j = 0; j < ld; j += AT_W) {
        uint16_t *d = dst + (size_t)(j / AMX_KEYS) * (size_t)rows * AMX_KEYS + j % AMX_KEYS;
        if (j < j0 || j > j1) { /* no position of [a, b] */
            _mm256_storeu_si256((__m256i *)(void *)d, _mm256_setzero_si256());
            continue;
        }
        int lo = a - base - j, hi = b - base - j;
        if (lo < 0) lo = 0;
        if (hi > AT_W - 1) hi = AT_W - 1;
        __mmask16 k = (__mmask16)((((uint32_t)1 << (hi + 1)) - 1) & ~(((uint32_t)1 << lo) - 1));
        __m512 p = _mm512_maskz_mov_ps(k, amx_exp(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, row + j), sv, mv)));
        lanes = _mm512_add_ps(lanes, p);
        _mm256_storeu_si256((__m256i *)(void *)d, (__m256i)_mm512_cvtneps_pbh(p));
    }
    float lane[16], s8[8], s4[4];
    _mm512_storeu_ps(lane, lanes);
    for (int i = 0; i < 8; i++) s8[i] = lane[i] + lane[i + 8];
    for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
    float sum = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    if (sink != -INFINITY) sum += _mm512_cvtss_f32(amx_exp(_mm512_set1_ps(sink - mx)));
    return 1.0f / sum;
}

static void at_queries(float *const *out, const float *const *q, const int *first, const int *last, int n_q, int hd,
                       int kv_head, float scale, float softcap, const float *sinks, const pdl_attn_kv *kv,
                       float *scratch) {
    if (hd % 32) { /* a tile row is 32 dimensions */
        attn_queries_avx512bf16_ranges(out, q, first, last, n_q, hd, kv_head, scale, softcap, sinks, kv, scratch);
        return;
    }
    /* every buffer below starts on a cache line (their sizes keep it so):
     * tile rows across two lines load at a fraction of the rate (measured:
     * the whole call 1.4x faster at 4,096 keys) */
    scratch = (float *)(void *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    int kind = kv->kv_is_q4 ? 3 : kv->kv_is_q8 ? 2 : kv->kv_is_f16 ? 1 : 0;
    int bs = kv->block_size, half = hd / 2, groups = (n_q + AMX_ROWS - 1) / AMX_ROWS, nqp = groups * AMX_ROWS;
    int rows = n_q < AMX_ROWS ? n_q : AMX_ROWS; /* a tile's rows: every group but the last is whole */
    size_t esize = kind == 1 ? 2 : 4, e0 = (size_t)kv_head * (size_t)hd;
    size_t step = kind >= 2 ? (size_t)bs : (size_t)bs * esize;
    int lo = INT32_MAX, hi = -1;
    for (int i = 0; i < n_q; i++) {
        if (first[i] < lo) lo = first[i];
        if (last[i] > hi) hi = last[i];
    }
    /* rows of whole value tiles; keys are read in groups of AT_W from the
     * group holding lo to the one holding hi (never past the cache's blocks) */
    int base = lo / AMX_KEYS * AMX_KEYS, end = (hi / AMX_KEYS + 1) * AMX_KEYS, ld = end - base;
    int kbase = lo / AT_W * AT_W, kend = (hi / AT_W + 1) * AT_W;
    uint16_t *pa = (uint16_t *)(void *)(scratch + (size_t)nqp * (size_t)ld); /* [groups][ld / 32][rows][32] */
    uint32_t *qa = (uint32_t *)(void *)(pa + (size_t)nqp * (size_t)ld);      /* [nqp][half] */
    uint32_t *kb = qa + (size_t)nqp * (size_t)half;                        /* [AT_SG1][half][AT_W] */
    uint32_t *vb = kb + (size_t)AT_SG1 * (size_t)half * AT_W;              /* [BF_CHUNK][hd] */
    float *acc = (float *)(void *)(vb + (size_t)BF_CHUNK * (size_t)hd);   /* [nqp][hd] */
    float *ct = acc + (size_t)nqp * (size_t)hd, *keep = ct + AMX_ROWS * 64; /* [16][64] each */
    uint32_t *vm = (uint32_t *)(void *)(keep + AMX_ROWS * 64);              /* [16][64] */
    for (int i = 0; i < nqp; i++)
        for (int d = 0; d < hd; d += AT_W) {
            __m512 x = i < n_q ? _mm512_loadu_ps(q[i] + d) : _mm512_setzero_ps();
            _mm256_storeu_si256((__m256i *)(void *)(qa + (size_t)i * (size_t)half + d / 2),
                                (__m256i)_mm512_cvtneps_pbh(x));
        }
    amx_configure(rows);
    /* scores */
    for (int g0 = kbase; g0 < kend; g0 += AT_W * AT_SG1) {
        int ng = (kend - g0) / AT_W < AT_SG1 ? (kend - g0) / AT_W : AT_SG1;
        int needed = 0; /* a causal prompt's later key groups are past its early rows */
        for (int r = 0; r < n_q; r++) needed |= first[r] < g0 + AT_W * ng && last[r] >= g0;
        if (!needed) continue;
        const uint8_t *kp[4], *ks[4] = {NULL, NULL, NULL, NULL}, *pf, *pfs;
        bf_key_groups(kv, g0, ng, AT_SG1, kend, hd, e0, kind, kp, ks, &pf, &pfs);
        bf_keys_of(kb, ng, kp, ks, hd, step, pf, pfs, kind);
        for (int grp = 0; grp < groups; grp++) {
            int r0 = grp * AMX_ROWS, nr = n_q - r0 < AMX_ROWS ? n_q - r0 : AMX_ROWS, group_needed = 0;
            for (int r = r0; r < r0 + nr; r++) group_needed |= first[r] < g0 + AT_W * ng && last[r] >= g0;
            if (!group_needed) continue;
            amx_scores(ng, qa + (size_t)r0 * (size_t)half, half, kb, scratch + (size_t)r0 * (size_t)ld + (g0 - base),
                       (size_t)ld * sizeof(float));
        }
    }
    float inv[AT_MAXQ];
    /* the weights (amx_softmax_tiles) in BF16, in A tiles of 32 positions
     * one after another, a tile's rows 64 bytes apart */
    for (int i = 0; i < groups * rows; i++) {
        uint16_t *dst = pa + (size_t)(i / rows) * (size_t)rows * (size_t)ld + (size_t)(i % rows) * AMX_KEYS;
        if (i >= n_q) {
            for (int j = 0; j < ld; j += AMX_KEYS) memset(dst + (size_t)j * (size_t)rows, 0, AMX_KEYS * sizeof *dst);
            continue;
        }
        float *row = scratch + (size_t)i * (size_t)ld;
        inv[i] = amx_softmax_tiles(row, base, first[i], last[i], ld, scale, softcap, attn_sink(sinks, i), dst, rows);
    }
    /* values, BF_CHUNK pairs of positions at a time, a tile of AMX_KEYS
     * positions per product */
    memset(acc, 0, (size_t)nqp * (size_t)hd * sizeof(float));
    size_t vstride = (size_t)hd * sizeof(uint32_t);
    size_t astride = (size_t)hd * sizeof(float);
    bf_rows R;
    for (int c0 = base / 2; c0 < end / 2; c0 += BF_CHUNK) {
        int c1 = c0 + BF_CHUNK - 1 < end / 2 - 1 ? c0 + BF_CHUNK - 1 : end / 2 - 1;
        int ntile = (c1 - c0 + 1) / (AMX_KEYS / 2);
        bf_find_rows(&R, c0, c1, lo, hi, kv, e0, hd, kind);
        bf_values(vb, &R, c0, c1, hd, kind);
        unsigned poisoned = 0;
        for (int t = 0; t < ntile; t++)
            if (amx_nonfinite(vb + (size_t)t * (AMX_KEYS / 2) * (size_t)hd, (size_t)(AMX_KEYS / 2) * (size_t)hd))
                poisoned |= 1u << t;
        for (int grp = 0; grp < groups; grp++) {
            int r0 = grp * AMX_ROWS, nr = n_q - r0 < AMX_ROWS ? n_q - r0 : AMX_ROWS;
            unsigned need = 0; /* the tiles some query of the group reaches */
            for (int t = 0; t < ntile; t++) {
                int p0 = 2 * c0 + AMX_KEYS * t;
                for (int r = r0; r < r0 + nr; r++)
                    need |= (unsigned)(first[r] <= p0 + AMX_KEYS - 1 && last[r] >= p0) << t;
            }
            if (!need) continue;
            const uint16_t *ptiles = pa + (size_t)grp * (size_t)rows * (size_t)ld;
            for (int d0 = 0; d0 < hd; d0 += 64) {
                int nd = hd - d0 < 64 ? (hd - d0) / 16 : 4; /* 2 or 4: hd is a multiple of 32 */
                float *a = acc + (size_t)r0 * (size_t)hd + d0;
                amx_load_sums(nd, a, astride);
                for (int t = 0; t < ntile; t++) {
                    if (!(need >> t & 1)) continue;
                    int p0 = 2 * c0 + AMX_KEYS * t;
                    const uint32_t *vt = vb + (size_t)t * (AMX_KEYS / 2) * (size_t)hd + d0;
                    _tile_loadd(4, ptiles + (size_t)(p0 - base) * (size_t)rows, AMX_KEYS * sizeof(uint16_t));
                    if (poisoned >> t & 1) {
                        amx_store_sums(nd, a, astride);
                        amx_values_masked(nd, a, astride, vt, vstride, p0 / 2, first + r0, last + r0, nr, vm, ct,
                                          keep);
                        amx_load_sums(nd, a, astride);
                        continue;
                    }
                    amx_values(nd, vt, vstride);
                }
                amx_store_sums(nd, a, astride);
            }
        }
    }
    _tile_release();
    /* the sums times 1 / sum, + 0: a sum of nothing but zero products is +0
     * whatever the zeros' signs */
    for (int i = 0; i < n_q; i++)
        for (int d = 0; d < hd; d += AT_W)
            _mm512_storeu_ps(out[i] + d, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)i * (size_t)hd + d),
                                                                     _mm512_set1_ps(inv[i])),
                                                       _mm512_setzero_ps()));
}
#else
const bool attn_amx_built = false;

void attn_queries_amx(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim, int kv_head,
                      float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                      float *scratch) {
    attn_queries_avx512bf16(out, q, pos, n_q, head_dim, kv_head, scale, softcap, sinks, window, kv, scratch);
}
void attn_queries_amx_ranges(float *const *out, const float *const *q, const int *first, const int *last, int n_q,
                             int head_dim, int kv_head, float scale, float softcap, const float *sinks,
                             const pdl_attn_kv *kv, float *scratch) {
    attn_queries_avx512bf16_ranges(out, q, first, last, n_q, head_dim, kv_head, scale, softcap, sinks, kv, scratch);
}
#endif
