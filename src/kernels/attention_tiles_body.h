/*
 * attention_tiles_body.h - the register-tiled attention (order of operations in
 * attention.h, so the same bits as the portable body), written once for any
 * vector width and included by attention_avx512.c (16 lanes),
 * attention_avx2.c (8 lanes) and attention_neon.c (4 lanes).
 *
 * Scores are a small matrix product: a tile of up to AT_SR queries x AT_SG
 * groups of AT_W keys (AT_SG1 groups for a single query) keeps one
 * accumulator per query and group; each step multiplies one broadcast
 * query element by the same dimension of AT_W keys, which K's block layout
 * stores side by side (F16 widened as it is loaded). No horizontal sums,
 * and each key vector serves every query of the tile. Values: up to AT_VR
 * queries share each loaded V row over the keys they have in common (each
 * query still adds its keys in order), a chunk of dimensions at a time so
 * the accumulators stay in registers.
 *
 * A block of the paged cache is its own few KiB (K: one head's keys of the
 * block dimension-major; V: their rows), and the next block is anywhere,
 * so the hardware prefetchers stop at every block and the first loads of
 * each missed (perf: about 40% of the score tiles' and half of the value
 * tiles' samples on those loads). So both prefetch blocks ahead while they
 * compute: the first score tile of a group of keys fetches every block of
 * the group of keys AT_PF_GROUPS tiles on in a decode call (the next
 * tile's in a prefill call), a line per step, and the value walk
 * fetches each key's row of the block AT_PF_BLOCKS blocks on as it uses
 * this block's. A decode step reads the whole cache once and computes
 * little on it, so it waits on memory unless the loads are in flight well
 * ahead: with only the next group's first block prefetched, Qwen3-0.6B's
 * attention at depth 4096 read 26 GB/s of K/V on a Zen 5 core pair, whose
 * read bandwidth is 62 GB/s; now 34 (docs/benchmarks.md). Few queries
 * (a decode step's GQA group) also take the whole head's dimensions in
 * one value pass where the accumulators allow, so each V row is read
 * once, in order.
 * The including file defines the vector type at_v, AT_W, AT_SR, AT_SG
 * (up to 3), AT_SG1, AT_VR (queries per value tile: 3 or 6), AT_VACC
 * (accumulators a value tile may hold), AT_FN (the
 * function's name), AT_GENERIC (the portable body for the shapes the tiles
 * do not take), and the operations at_zero, at_set1, at_fmadd (a * b + c),
 * at_mul, at_loadu, at_storeu, at_max, at_hmax, at_load_kv (AT_W values
 * of a cache row, F16 or F32), at_load_i8 (AT_W int8 widened to float) and
 * at_load_u4 (the low, or high, nibbles of AT_W bytes minus 8, as float).
 * Q8_0 and Q4_0 caches (attention.h) take the same tiles where their
 * groups are AT_GS (32) dimensions, each element widened and times its
 * scale as it is loaded (at_load_q8v / at_load_q4v for V rows; Q4_0 keys:
 * a group's low nibbles for its first half of dimensions, then its high
 * ones, so dimensions stay in order); the group a constant, a V row's
 * scale is loaded once per group and no offset is divided at run time
 * (with gs a variable, the divisions and reloaded scales made a Q8_0
 * decode call's kernel 2.3x the F16 one's time, Q4_0's 3.4x:
 * docs/benchmarks.md). With AT_STORE_FN (a name) and at_to_f16 (AT_W
 * floats to halves, nearest even) it also gets the F16 cache write.
 * With AT_BF16 the including file gives at_queries itself (attention.h's
 * BF16 order: attention_avx512bf16.c) and takes the rest.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define AT_PF_GROUPS 4 /* a decode call's score tiles prefetch the keys this many tiles of groups ahead */
#define AT_PF_BLOCKS 2 /* the value walk prefetches rows this many blocks ahead */
/* A quantized cache's group of dimensions in the tiles: attn_q8_group of a
 * head_dim of 32 or more (shorter heads take the portable body), a
 * constant so that every group and element offset of a tile is one. */
#define AT_GS 32
_Static_assert(AT_GS / 2 % AT_W == 0, "a Q4_0 group's halves are whole vectors");
/* Code bytes of such a group: AT_GS (Q8_0) or AT_GS / 2 (Q4_0). */
#define AT_CODE_BYTES(Q4) ((Q4) ? AT_GS / 2 : AT_GS)

/* The key groups a score tile prefetches as it computes: their first
 * bytes (as the tile's kp) and, for a quantized cache, their scales (as
 * its ks); once: no other tile of the call reads them (a decode step's few
 * queries), so they are fetched non-temporal and leave the caches first. */
typedef struct {
    int n, once;
    const uint8_t *k[4], *s[4];
} at_prefetch;

/* A prefetch of the line at p for pf's tile. */
static inline __attribute__((always_inline)) void at_prefetch_line(const at_prefetch *pf, const uint8_t *p) {
    if (pf->once) __builtin_prefetch(p, 0, 0);
    else __builtin_prefetch(p, 0, 3);
}

/* Whether a walk reading at `off`, `step` bytes past its last read, has
 * entered a new 64-byte line (so a prefetch of it is not a repeat). */
static inline int at_new_line(size_t off, size_t step) { return off % 64 < step; }

#ifndef AT_MAXQ /* the including file may pass more (attention_amx.c) */
#define AT_MAXQ 64 /* queries per pass */
#endif

/* AT_W elements of a Q8_0 row from element i (a multiple of AT_W): the
 * block of element i at row + (i / AT_GS) * (AT_GS + 2), S * q (exact). */
static inline at_v at_load_q8v(const uint8_t *row, int i) {
    const int gs = AT_GS;
    const uint8_t *b = row + (size_t)(i / gs) * (size_t)(gs + 2);
    uint16_t h;
    memcpy(&h, b, 2);
    return at_mul(at_load_i8(b + 2 + i % gs), at_set1(ATTN_F16(h)));
}

/* The same from a Q4_0 row (blocks of AT_GS / 2 + 2 bytes): S * (code -
 * 8), exact. */
static inline at_v at_load_q4v(const uint8_t *row, int i) {
    const int gs = AT_GS, cb = AT_CODE_BYTES(1), j = i % gs;
    const uint8_t *b = row + (size_t)(i / gs) * (size_t)(cb + 2);
    uint16_t h;
    memcpy(&h, b, 2);
    return at_mul(at_load_u4(b + 2 + j % cb, j >= cb), at_set1(ATTN_F16(h)));
}

/* One query's n scores in place: soft-capped, then attention.h's softmax
 * (sink: its sink logit, or -INFINITY). */
static inline void at_softmax_scores(float *sc, int n, float softcap, float sink) {
    if (softcap > 0.0f)
        for (int j = 0; j < n; j++) sc[j] = tanhf(sc[j] / softcap) * softcap;
    float mx = -INFINITY; /* the max is exact in any order */
    int j = 0;
    if (n >= AT_W) {
        at_v m = at_loadu(sc);
        for (j = AT_W; j + AT_W <= n; j += AT_W) m = at_max(m, at_loadu(sc + j));
        mx = at_hmax(m);
    }
    for (; j < n; j++) mx = sc[j] > mx ? sc[j] : mx;
    attn_softmax(sc, n, mx, sink);
}

#ifdef AT_BF16
/* the including file's, in attention.h's BF16 order */
static void at_queries(float *const *out, const float *const *q, const int *first, const int *pos, int n_q, int hd,
                       int kv_head, float scale, float softcap, const float *sinks, const pdl_attn_kv *kv,
                       float *scratch);
#else
/* Scores of NR queries for NG groups of AT_W keys: kp[g] points at element
 * e0 of group g's keys, dimension d `step` bytes further per d; query r's
 * scores go to sc + r * ld + AT_W g. pf (or NULL): key groups ahead,
 * laid out as kp[0]'s, prefetched a line at a time as the dimensions go. */
static inline __attribute__((always_inline)) void at_score_tile(const int NR, const int NG, const float *const *q,
                                                                int hd, const uint8_t *const *kp, size_t step,
                                                                int f16, float scale, float *sc, size_t ld,
                                                                const at_prefetch *pf) {
    at_v acc[8][4];
    for (int r = 0; r < NR; r++)
        for (int g = 0; g < NG; g++) acc[r][g] = at_zero();
    for (int d = 0; d < hd; d++) {
        at_v k[4];
        for (int g = 0; g < NG; g++) k[g] = at_load_kv(kp[g] + (size_t)d * step, f16);
        if (pf && at_new_line((size_t)d * step, step))
            for (int i = 0; i < pf->n; i++) at_prefetch_line(pf, pf->k[i] + (size_t)d * step);
        for (int r = 0; r < NR; r++) {
            at_v qb = at_set1(q[r][d]);
            for (int g = 0; g < NG; g++) acc[r][g] = at_fmadd(qb, k[g], acc[r][g]);
        }
    }
    at_v s = at_set1(scale);
    for (int r = 0; r < NR; r++)
        for (int g = 0; g < NG; g++) at_storeu(sc + r * ld + AT_W * g, at_mul(acc[r][g], s));
}

/* The same over a Q8_0 (Q4 = 0) or Q4_0 (Q4 = 1) cache (attention.h):
 * kp[g] at group g's code bytes of the head's first dimension, ks[g] at its
 * scales of the head's first group of gs = AT_GS dimensions;
 * code byte row i `bs` bytes further within a group (Q8_0: dimension i;
 * Q4_0: dimensions i and i + gs / 2), group c `gstride` bytes further.
 * Each key element is widened, times its scale (exact), then the same fma
 * as a float cache. pf (or NULL): key groups ahead, their codes and
 * scales prefetched as this tile's are used. */
static inline __attribute__((always_inline)) void at_score_tile_q8(const int NR, const int NG, const float *const *q,
                                                                   int hd, const uint8_t *const *kp,
                                                                   const uint8_t *const *ks, size_t bs,
                                                                   float scale, float *sc, size_t ld,
                                                                   const at_prefetch *pf, const int Q4) {
    at_v acc[8][4];
    const int gs = AT_GS, cb = AT_CODE_BYTES(Q4);
    size_t gstride = (size_t)(cb + 2) * bs;
    for (int r = 0; r < NR; r++)
        for (int g = 0; g < NG; g++) acc[r][g] = at_zero();
    for (int c = 0; c < hd; c += gs) {
        size_t go = (size_t)(c / gs) * gstride;
        at_v S[4];
        for (int g = 0; g < NG; g++) S[g] = at_load_kv(ks[g] + go, 1);
        if (pf)
            for (int i = 0; i < pf->n; i++) at_prefetch_line(pf, pf->s[i] + go);
        for (int d = 0; d < gs; d++) {
            at_v k[4];
            size_t at = go + (size_t)(d % cb) * bs;
            for (int g = 0; g < NG; g++)
                k[g] = at_mul(Q4 ? at_load_u4(kp[g] + at, d >= cb) : at_load_i8(kp[g] + at), S[g]);
            if (pf && d < cb && (d == 0 || at_new_line(at, bs)))
                for (int i = 0; i < pf->n; i++) at_prefetch_line(pf, pf->k[i] + at);
            for (int r = 0; r < NR; r++) {
                at_v qb = at_set1(q[r][c + d]);
                for (int g = 0; g < NG; g++) acc[r][g] = at_fmadd(qb, k[g], acc[r][g]);
            }
        }
    }
    at_v s = at_set1(scale);
    for (int r = 0; r < NR; r++)
        for (int g = 0; g < NG; g++) at_storeu(sc + r * ld + AT_W * g, at_mul(acc[r][g], s));
}

#define AT_SCORE(NR, NG)                                                                                           \
    (ks && q4 ? at_score_tile_q8(NR, NG, q, hd, kp, ks, step, scale, sc, ld, pf, 1)                                 \
     : ks     ? at_score_tile_q8(NR, NG, q, hd, kp, ks, step, scale, sc, ld, pf, 0)                                 \
              : at_score_tile(NR, NG, q, hd, kp, step, f16, scale, sc, ld, pf))

/* ks: NULL for an F16 / F32 cache (f16 says which), else the Q8_0 or
 * (q4) Q4_0 scales (step is then block_size). */
static void at_score_tile_any(int nr, int ng, const float *const *q, int hd, const uint8_t *const *kp,
                              const uint8_t *const *ks, int q4, size_t step, int f16, float scale, float *sc,
                              size_t ld, const at_prefetch *pf) {
    if (nr == 1) {
        switch (ng) {
        case 4: AT_SCORE(1, 4); return;
        case 3: AT_SCORE(1, 3); return;
        case 2: AT_SCORE(1, 2); return;
        default: AT_SCORE(1, 1); return;
        }
    }
#if AT_SG >= 3
    if (ng == 3) {
        switch (nr) {
        case 8: AT_SCORE(8, 3); return;
        case 7: AT_SCORE(7, 3); return;
        case 6: AT_SCORE(6, 3); return;
        case 5: AT_SCORE(5, 3); return;
        case 4: AT_SCORE(4, 3); return;
        case 3: AT_SCORE(3, 3); return;
        default: AT_SCORE(2, 3); return;
        }
    }
#endif
    if (ng == 2) {
        switch (nr) {
        case 8: AT_SCORE(8, 2); return;
        case 7: AT_SCORE(7, 2); return;
        case 6: AT_SCORE(6, 2); return;
        case 5: AT_SCORE(5, 2); return;
        case 4: AT_SCORE(4, 2); return;
        case 3: AT_SCORE(3, 2); return;
        default: AT_SCORE(2, 2); return;
        }
    }
    switch (nr) { /* one group left */
    case 8: AT_SCORE(8, 1); return;
    case 7: AT_SCORE(7, 1); return;
    case 6: AT_SCORE(6, 1); return;
    case 5: AT_SCORE(5, 1); return;
    case 4: AT_SCORE(4, 1); return;
    case 3: AT_SCORE(3, 1); return;
    default: AT_SCORE(2, 1); return;
    }
}
#undef AT_SCORE

/* The V rows of keys [j0, j1] (positions) block by block, in at_value_tile
 * (its vhead, step, block_bytes, bs and chunk): BODY runs for each key j in
 * order with `row` at its V row (the head's element d0); within a block the
 * rows follow each other (attention.h), and the key's row of the block
 * AT_PF_BLOCKS on (the next one near the end; the same offset, `chunk`
 * bytes of it) is prefetched as the key is used, so rows arrive blocks
 * ahead. A block's table entry is read only if one of its keys is walked. */
#define AT_V_ROWS(j0, j1, BODY)                                                                                    \
    for (int j = (j0), jl_ = (j1); j <= jl_;) {                                                                    \
        int blk_ = j / bs, jend_ = (blk_ + 1) * bs - 1 < jl_ ? (blk_ + 1) * bs - 1 : jl_;                           \
        const uint8_t *row = vhead + (size_t)kv->block_table[blk_] * block_bytes + (size_t)(j - blk_ * bs) * step;  \
        int pfb_ = (blk_ + AT_PF_BLOCKS) * bs <= jl_ ? blk_ + AT_PF_BLOCKS : blk_ + 1;                              \
        const uint8_t *nxt = jend_ < jl_ ? vhead + (size_t)kv->block_table[pfb_] * block_bytes +                   \
                                               (size_t)(j - blk_ * bs) * step                                      \
                                         : row; /* nothing after: the row itself, harmless */                      \
        for (; j <= jend_; j++, row += step, nxt += step) {                                                        \
            for (size_t o_ = 0; o_ < chunk; o_ += 64) __builtin_prefetch(nxt + o_);         \
            BODY                                                                                                   \
        }                                                                                                          \
    }

/* out[r][d0 ..] (NC vectors) = sum over j in [a[r], b[r]] of
 * p[r][j - base] v_j[d0 ..], keys in order for each query; the keys all NR
 * queries have, [max a, min b], are read once for all of them. */
static inline __attribute__((always_inline)) void at_value_tile(const int NR, const int NC, float *const *out, int d0,
                                                                const float *const *p, int base, const int *a,
                                                                const int *b, const pdl_attn_kv *kv, size_t e0,
                                                                int hd, const int KIND) {
    /* the head's rows: element d0 of slot 0, a row from row to row (KIND:
     * 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, whose rows start at d0's group and
     * whose elements at_load_v finds) */
    const int f16 = KIND == 1;
    int bs = kv->block_size;
    size_t esize = f16 ? 2 : 4, step = (size_t)hd * esize, block_bytes = (size_t)kv->kv_dim * bs * esize;
    size_t chunk = (size_t)NC * AT_W * esize;
    const uint8_t *vhead = (const uint8_t *)kv->v + (e0 * (size_t)bs + (size_t)d0) * esize;
    /* Q8_0 / Q4_0: d0's place in its group (0 when a chunk is whole
     * groups, d0 being a multiple of the chunk: then every offset below
     * is a constant and a group's scale is loaded once) */
    const int gs = AT_GS;
    int dq = NC * AT_W >= gs ? 0 : d0 % gs;
    if (KIND >= 2) {
        int q4 = KIND == 3, cb = AT_CODE_BYTES(q4);
        step = (size_t)(hd / gs) * (size_t)(cb + 2);
        block_bytes = attn_kvq_block_bytes(bs, kv->kv_dim, hd, q4);
        chunk = (size_t)((dq + NC * AT_W + gs - 1) / gs) * (size_t)(cb + 2);
        vhead = (const uint8_t *)kv->v + attn_kvq_v_byte(0, bs, kv->kv_dim, hd, (int)e0 + d0, q4);
    }
#define at_load_v(row, c)                                                                                          \
    (KIND == 3   ? at_load_q4v((row), dq + AT_W * (c))                                                              \
     : KIND == 2 ? at_load_q8v((row), dq + AT_W * (c))                                                              \
                 : at_load_kv((row) + AT_W * (c) * esize, f16))
    at_v acc[AT_VR][16];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = at_zero();
    int F = a[0], L = b[0];
    for (int r = 1; r < NR; r++) {
        if (a[r] > F) F = a[r];
        if (b[r] < L) L = b[r];
    }
    int common = F <= L; /* if not, every query alone */
    /* each query's keys before the common ones (all of them if none) */
    for (int r = 0; r < NR; r++) {
        int j1 = common ? F - 1 : b[r];
        AT_V_ROWS(a[r], j1, {
            at_v pb = at_set1(p[r][j - base]);
            for (int c = 0; c < NC; c++) acc[r][c] = at_fmadd(pb, at_load_v(row, c), acc[r][c]);
        })
    }
    /* the common keys, each V row loaded once */
    if (common) {
        AT_V_ROWS(F, L, {
            at_v pb[AT_VR];
            for (int r = 0; r < NR; r++) pb[r] = at_set1(p[r][j - base]);
            for (int c = 0; c < NC; c++) {
                at_v vv = at_load_v(row, c);
                for (int r = 0; r < NR; r++) acc[r][c] = at_fmadd(pb[r], vv, acc[r][c]);
            }
        })
    }
    /* and the keys after them */
    for (int r = 0; common && r < NR; r++) {
        AT_V_ROWS(L + 1, b[r], {
            at_v pb = at_set1(p[r][j - base]);
            for (int c = 0; c < NC; c++) acc[r][c] = at_fmadd(pb, at_load_v(row, c), acc[r][c]);
        })
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) at_storeu(out[r] + d0 + AT_W * c, acc[r][c]);
#undef at_load_v
}

/* each shape built for F16 and for F32 caches: its loads and prefetches of
 * constant size */
#define AT_VALUE(NR, NC)                                                                                           \
    (kind == 3   ? at_value_tile(NR, NC, out, d0, p, base, a, b, kv, e0, hd, 3)                                    \
     : kind == 2 ? at_value_tile(NR, NC, out, d0, p, base, a, b, kv, e0, hd, 2)                                    \
     : kind == 1 ? at_value_tile(NR, NC, out, d0, p, base, a, b, kv, e0, hd, 1)                                    \
                 : at_value_tile(NR, NC, out, d0, p, base, a, b, kv, e0, hd, 0))

static void at_value_tile_any(int nr, int nc, float *const *out, int d0, const float *const *p, int base,
                              const int *a, const int *b, const pdl_attn_kv *kv, size_t e0, int hd, int kind) {
#define AT_VALUE_NC(NR)                                                                                            \
    switch (nc) {                                                                                                  \
    case 16: AT_VALUE(NR, 16); return;                                                                             \
    case 8: AT_VALUE(NR, 8); return;                                                                               \
    case 4: AT_VALUE(NR, 4); return;                                                                               \
    case 2: AT_VALUE(NR, 2); return;                                                                               \
    default: AT_VALUE(NR, 1); return;                                                                              \
    }
#if AT_VR >= 6
    if (nr == 6) AT_VALUE_NC(6)
    if (nr == 5) AT_VALUE_NC(5)
    if (nr == 4) AT_VALUE_NC(4)
#endif
    if (nr == 3) AT_VALUE_NC(3)
    if (nr == 2) AT_VALUE_NC(2)
    AT_VALUE_NC(1)
#undef AT_VALUE_NC
}
#undef AT_VALUE

/* Where the AT_W keys from position j (a multiple of AT_W) of kv_head's
 * keys (element e0 on) start: *k at the first dimension's keys (as
 * at_score_tile's kp), and for a quantized cache *s at their scales (as
 * its ks). */
static inline void at_key_group(const pdl_attn_kv *kv, int j, int hd, size_t e0, const uint8_t **k,
                                const uint8_t **s) {
    int bs = kv->block_size, q4 = kv->kv_is_q4;
    const uint8_t *kb = kv->k;
    int64_t slot = (int64_t)kv->block_table[j / bs] * bs + j % bs;
    if (kv->kv_is_q8 || q4) {
        *k = kb + attn_kvq_k_byte(slot, bs, kv->kv_dim, hd, (int)e0, q4);
        *s = kb + attn_kvq_k_scale(slot, bs, kv->kv_dim, hd, (int)e0, q4);
    } else {
        *k = kb + attn_k_index(slot, bs, kv->kv_dim, (int)e0) * (kv->kv_is_f16 ? 2 : 4);
        *s = NULL;
    }
}

/* n_q <= AT_MAXQ queries, query i over keys [first[i], pos[i]]. */
static void at_queries(float *const *out, const float *const *q, const int *first, const int *pos, int n_q, int hd,
                       int kv_head, float scale, float softcap, const float *sinks,
                       const pdl_attn_kv *kv, float *scratch) {
    int q4 = kv->kv_is_q4, q8 = kv->kv_is_q8 || q4; /* q8: either quantized cache */
    int f16 = !q8 && kv->kv_is_f16, bs = kv->block_size, nv = hd / AT_W;
    size_t esize = f16 ? 2 : 4, e0 = (size_t)kv_head * (size_t)hd, step = q8 ? (size_t)bs : (size_t)bs * esize;
    int lo = INT32_MAX, hi = -1;
    for (int i = 0; i < n_q; i++) {
        if (first[i] < lo) lo = first[i];
        if (pos[i] > hi) hi = pos[i];
    }
    /* scores of whole groups of AT_W positions: query i's row starts at base */
    int base = lo / AT_W * AT_W, end = (hi / AT_W + 1) * AT_W;
    size_t ld = (size_t)(end - base);
    int gmax = n_q == 1 ? AT_SG1 : AT_SG;
    for (int g0 = base; g0 < end; g0 += AT_W * gmax) {
        int ng = (end - g0) / AT_W < gmax ? (end - g0) / AT_W : gmax;
        const uint8_t *kp[4], *ksc[4], *const *ks = q8 ? ksc : NULL;
        for (int g = 0; g < ng; g++) at_key_group(kv, g0 + AT_W * g, hd, e0, &kp[g], &ksc[g]);
        /* the groups of the tile AT_PF_GROUPS on (the next one near the end)
         * when one tile of queries reads each group once; the next tile's
         * when several do, whose work on a group gives the next time to
         * arrive and whose caches should not fill with groups ahead */
        at_prefetch ahead = {.once = n_q <= AT_SR};
        int dist = ahead.once ? AT_PF_GROUPS : 1;
        int j_pf = g0 + AT_W * gmax * dist < end ? g0 + AT_W * gmax * dist : g0 + AT_W * gmax;
        for (int j = j_pf; ahead.n < gmax && j < end; j += AT_W, ahead.n++)
            at_key_group(kv, j, hd, e0, &ahead.k[ahead.n], &ahead.s[ahead.n]);
        const at_prefetch *pf = ahead.n ? &ahead : NULL;
        for (int r0 = 0; r0 < n_q; r0 += AT_SR) {
            int nr = n_q - r0 < AT_SR ? n_q - r0 : AT_SR;
            int needed = 0; /* a causal prompt's later key groups are past its early rows */
            for (int r = r0; r < r0 + nr; r++) needed |= first[r] < g0 + AT_W * ng && pos[r] >= g0;
            if (!needed) continue;
            at_score_tile_any(nr, ng, q + r0, hd, kp, ks, q4, step, f16, scale,
                              scratch + (size_t)r0 * ld + (g0 - base), ld, pf);
            pf = NULL; /* the first tile of a group fetches the keys ahead */
        }
    }
    const float *p[AT_MAXQ];
    for (int i = 0; i < n_q; i++) {
        at_softmax_scores(scratch + (size_t)i * ld + (first[i] - base), pos[i] - first[i] + 1, softcap,
                          attn_sink(sinks, i));
        p[i] = scratch + (size_t)i * ld; /* indexed by position - base */
    }
    int vr = AT_VR; /* queries per value tile */
    /* vectors per chunk of dimensions: a power of two dividing nv, as many
     * as the tile's queries leave accumulators for (a decode step's few
     * queries: the whole head at once, so V is read in one pass) */
    int nc = AT_VACC / (n_q < vr ? n_q : vr);
    nc = nc >= 16 ? 16 : nc >= 8 ? 8 : nc >= 4 ? 4 : nc >= 2 ? 2 : 1;
    while (nv % nc) nc /= 2;
    for (int i0 = 0; i0 < n_q; i0 += vr) {
        int nr = n_q - i0 < vr ? n_q - i0 : vr;
        for (int d0 = 0; d0 < hd; d0 += nc * AT_W)
            at_value_tile_any(nr, nc, out + i0, d0, p + i0, base, first + i0, pos + i0, kv, e0, hd,
                              q4 ? 3 : q8 ? 2 : f16);
    }
}

#endif /* AT_BF16 */

/* Shapes the tiles take: whole vectors of dimensions and of a block's
 * slots, and for a quantized cache groups of AT_GS (Q4_0: whole vectors
 * in each half of a group, its V rows' low and high nibbles). */
static inline int at_tiles_take(int head_dim, const pdl_attn_kv *kv) {
    return head_dim % AT_W == 0 && kv->block_size % AT_W == 0 &&
           (!(kv->kv_is_q8 || kv->kv_is_q4) || attn_q8_group(head_dim) == AT_GS);
}

void AT_FN(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim, int kv_head, float scale,
           float softcap, const float *sinks, int window, const pdl_attn_kv *kv, float *scratch) {
    if (!at_tiles_take(head_dim, kv)) {
        AT_GENERIC(out, q, pos, n_q, head_dim, kv_head, scale, softcap, sinks, window, kv, scratch);
        return;
    }
    for (int i0 = 0; i0 < n_q; i0 += AT_MAXQ) { /* the scratch of AT_MAXQ queries is reused */
        int n = n_q - i0 < AT_MAXQ ? n_q - i0 : AT_MAXQ, first[AT_MAXQ];
        for (int i = 0; i < n; i++) first[i] = attn_first(pos[i0 + i], window);
        at_queries(out + i0, q + i0, first, pos + i0, n, head_dim, kv_head, scale, softcap,
                   sinks ? sinks + i0 : NULL, kv, scratch);
    }
}

#define AT_RANGES_(fn) fn##_ranges
#define AT_RANGES(fn) AT_RANGES_(fn)
void AT_RANGES(AT_FN)(float *const *out, const float *const *q, const int *first, const int *last, int n_q,
                      int head_dim, int kv_head, float scale, float softcap, const float *sinks,
                      const pdl_attn_kv *kv, float *scratch) {
    if (!at_tiles_take(head_dim, kv)) {
        AT_RANGES(AT_GENERIC)(out, q, first, last, n_q, head_dim, kv_head, scale, softcap, sinks, kv, scratch);
        return;
    }
    for (int i0 = 0; i0 < n_q; i0 += AT_MAXQ) {
        int n = n_q - i0 < AT_MAXQ ? n_q - i0 : AT_MAXQ;
        at_queries(out + i0, q + i0, first + i0, last + i0, n, head_dim, kv_head, scale, softcap,
                   sinks ? sinks + i0 : NULL, kv, scratch);
    }
}

#ifdef AT_STORE_FN
/* n (up to AT_W) floats to halves at dst, through a padded vector when
 * n < AT_W. */
static inline void at_store_f16(const float *src, uint16_t *dst, int n) {
    if (n == AT_W) {
        at_to_f16(src, dst);
        return;
    }
    float t[AT_W] = {0};
    uint16_t h[AT_W];
    memcpy(t, src, (size_t)n * sizeof(float));
    at_to_f16(t, h);
    memcpy(dst, h, (size_t)n * sizeof(uint16_t));
}

/* The cache write (attention.h's attn_store) with the vector
 * conversion: each head's V row AT_W halves at a time, K elements to their
 * dimension-major places, the last of a run through a padded vector; the
 * bits of fp16_f32_to_f16. F32 caches take the portable copy. */
void AT_STORE_FN(void *kpool, void *vpool, int kv_is_f16, int kv_dim, int head_dim, int block_size, int64_t slot,
                 const float *k, const float *v) {
    if (!kv_is_f16) {
        attn_store_scalar(kpool, vpool, kv_is_f16, kv_dim, head_dim, block_size, slot, k, v);
        return;
    }
    for (int e0 = 0; e0 < kv_dim; e0 += head_dim) {
        uint16_t *vd = (uint16_t *)vpool + attn_v_index(slot, block_size, kv_dim, head_dim, e0);
        for (int d = 0; d < head_dim; d += AT_W)
            at_store_f16(v + e0 + d, vd + d, head_dim - d < AT_W ? head_dim - d : AT_W);
    }
    uint16_t *kd = (uint16_t *)kpool + attn_k_index(slot, block_size, kv_dim, 0), h[AT_W];
    for (int e = 0; e < kv_dim; e += AT_W) {
        int n = kv_dim - e < AT_W ? kv_dim - e : AT_W;
        at_store_f16(k + e, h, n);
        for (int i = 0; i < n; i++) kd[(size_t)(e + i) * (size_t)block_size] = h[i];
    }
}
#endif
