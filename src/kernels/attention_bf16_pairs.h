/*
 * attention_bf16_pairs.h - the BF16 pairs both AVX-512 BF16 attentions
 * multiply (attention.h's BF16 order in attention_avx512bf16.c, the AMX
 * tiles in attention_amx.c): a group of AT_W keys as dimension pairs, a
 * chunk of V rows as position pairs, each element read from any cache kind
 * (F32, F16, Q8_0 as S * q, Q4_0 as S * (c - 8)) and rounded to BF16 as
 * VCVTNEPS2BF16 rounds it. Included after attention_avx512_ops.h and
 * attention_tiles_body.h (at_load_q8v, at_load_q4v; AT_GS, the quantized
 * caches' group, the only one the tiles take, and AT_CODE_BYTES).
 */
#ifndef PDL_KERNELS_ATTENTION_BF16_PAIRS_H
#define PDL_KERNELS_ATTENTION_BF16_PAIRS_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define BF_CHUNK 64 /* pairs of positions per chunk of V rows */

/* Word l: BF16(a_l) in the low half, BF16(b_l) in the high one. */
static inline __m512i bf_pairs(__m512 a, __m512 b) {
    static const uint16_t interleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                            8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(interleave), (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* Byte offset, from a group's first key, of the keys' element d (KIND: 0
 * F32, 1 F16, 2 Q8_0, 3 Q4_0; step: attention_tiles_body.h's, block_size
 * for the quantized caches), and of their scales for Q8_0 / Q4_0. */
static inline __attribute__((always_inline)) size_t bf_key_at(int d, size_t step, const int KIND) {
    if (KIND <= 1) return (size_t)d * step;
    const int gs = AT_GS, cb = AT_CODE_BYTES(KIND == 3), i = d % gs;
    return (size_t)(d / gs) * (size_t)(cb + 2) * step + (size_t)(i % cb) * step;
}
static inline __attribute__((always_inline)) size_t bf_scale_at(int d, size_t step, const int KIND) {
    const int gs = AT_GS, cb = AT_CODE_BYTES(KIND == 3);
    return (size_t)(d / gs) * (size_t)(cb + 2) * step;
}

/* Element d of AT_W keys as floats (S * q for the quantized caches). */
static inline __attribute__((always_inline)) at_v bf_key(const uint8_t *kp, const uint8_t *ks, int d,
                                                         size_t step, const int KIND) {
    if (KIND <= 1) return at_load_kv(kp + bf_key_at(d, step, KIND), KIND);
    const int gs = AT_GS, cb = AT_CODE_BYTES(KIND == 3);
    at_v S = at_load_kv(ks + bf_scale_at(d, step, KIND), 1);
    const uint8_t *c = kp + bf_key_at(d, step, KIND);
    return at_mul(KIND == 3 ? at_load_u4(c, d % gs >= cb) : at_load_i8(c), S);
}

/* Dimension pair t of AT_W keys (a group's keys at kp, scales at ks). */
static inline __attribute__((always_inline)) __m512i bf_key_pair(const uint8_t *kp, const uint8_t *ks, int t,
                                                                 size_t step, const int KIND) {
    const uint8_t *s = KIND >= 2 ? ks : NULL;
    return bf_pairs(bf_key(kp, s, 2 * t, step, KIND), bf_key(kp, s, 2 * t + 1, step, KIND));
}

/* Prefetches dimension pair t of the next group's keys (pf, its scales
 * pfs); ONCE: non-temporal, keys a decode step reads once. */
static inline __attribute__((always_inline)) void bf_prefetch_pair(const uint8_t *pf, const uint8_t *pfs, int t,
                                                                   size_t step, const int KIND, const int ONCE) {
#define BF_PREFETCH(p) (ONCE ? __builtin_prefetch((p), 0, 0) : __builtin_prefetch((p), 0, 3))
    BF_PREFETCH(pf + bf_key_at(2 * t, step, KIND));
    BF_PREFETCH(pf + bf_key_at(2 * t + 1, step, KIND));
    if (KIND >= 2 && 2 * t % AT_GS == 0) BF_PREFETCH(pfs + bf_scale_at(2 * t, step, KIND));
#undef BF_PREFETCH
}

/* ng groups' keys to dimension pairs: kb[(g * hd / 2 + t) * AT_W + l];
 * pf / pfs (or NULL): the next groups' keys and scales, prefetched. */
static inline __attribute__((always_inline)) void bf_keys(uint32_t *kb, int ng, const uint8_t *const *kp,
                                                          const uint8_t *const *ks, int hd, size_t step,
                                                          const uint8_t *pf, const uint8_t *pfs, const int KIND) {
    for (int t = 0; t < hd / 2; t++) {
        for (int g = 0; g < ng; g++)
            _mm512_storeu_si512(kb + ((size_t)g * (size_t)(hd / 2) + (size_t)t) * AT_W,
                                bf_key_pair(kp[g], KIND >= 2 ? ks[g] : NULL, t, step, KIND));
        if (pf) bf_prefetch_pair(pf, pfs, t, step, KIND, 0);
    }
}

/* bf_keys for a cache of kind `kind`. */
static inline void bf_keys_of(uint32_t *kb, int ng, const uint8_t *const *kp, const uint8_t *const *ks, int hd,
                              size_t step, const uint8_t *pf, const uint8_t *pfs, int kind) {
    switch (kind) {
    case 3: bf_keys(kb, ng, kp, ks, hd, step, pf, pfs, 3); break;
    case 2: bf_keys(kb, ng, kp, ks, hd, step, pf, pfs, 2); break;
    case 1: bf_keys(kb, ng, kp, ks, hd, step, pf, pfs, 1); break;
    default: bf_keys(kb, ng, kp, ks, hd, step, pf, pfs, 0); break;
    }
}

/* Where ng groups of AT_W keys from position g0 are in the K pool of KV
 * head e0 (kind as above): kp[g], and their scales ks[g] for Q8_0 / Q4_0
 * (else NULL); and the group after them, to prefetch (*pf, *pfs), when
 * ng is gmax and it starts before end (else NULL). */
static inline void bf_key_groups(const pdl_attn_kv *kv, int g0, int ng, int gmax, int end, int hd, size_t e0,
                                 int kind, const uint8_t **kp, const uint8_t **ks, const uint8_t **pf,
                                 const uint8_t **pfs) {
    int bs = kv->block_size;
    size_t esize = kind == 1 ? 2 : 4;
    const uint8_t *kpool = kv->k;
    *pf = *pfs = NULL;
    for (int g = 0; g <= ng; g++) {
        int j = g0 + AT_W * g;
        if (g == ng && (g != gmax || j >= end)) break;
        int64_t slot = (int64_t)kv->block_table[j / bs] * bs + j % bs;
        const uint8_t *p, *s = NULL;
        if (kind >= 2) {
            p = kpool + attn_kvq_k_byte(slot, bs, kv->kv_dim, hd, (int)e0, kind == 3);
            s = kpool + attn_kvq_k_scale(slot, bs, kv->kv_dim, hd, (int)e0, kind == 3);
        } else {
            p = kpool + attn_k_index(slot, bs, kv->kv_dim, (int)e0) * esize;
        }
        if (g < ng) kp[g] = p, ks[g] = s;
        else *pf = p, *pfs = s;
    }
}

/* Where the V rows of a chunk are: row[m - c0][h] the row (the head's
 * element 0) of position 2m + h, NULL outside [lo, hi] (those the pass
 * reads: never read); the rows a block further on are prefetched, as the
 * F32 tiles prefetch them. */
typedef struct bf_rows {
    const uint8_t *row[BF_CHUNK][2];
    size_t esize;
} bf_rows;

static inline void bf_find_rows(bf_rows *R, int c0, int c1, int lo, int hi, const pdl_attn_kv *kv, size_t e0,
                                int hd, int kind) {
    int bs = kv->block_size;
    size_t esize = kind == 1 ? 2 : 4, step = (size_t)hd * esize, block_bytes = (size_t)kv->kv_dim * bs * esize;
    const uint8_t *vhead = (const uint8_t *)kv->v + e0 * (size_t)bs * esize;
    R->esize = esize;
    if (kind >= 2) {
        int q4 = kind == 3;
        step = (size_t)(hd / AT_GS) * (size_t)(AT_CODE_BYTES(q4) + 2);
        block_bytes = attn_kvq_block_bytes(bs, kv->kv_dim, hd, q4);
        vhead = (const uint8_t *)kv->v + attn_kvq_v_byte(0, bs, kv->kv_dim, hd, (int)e0, q4);
    }
    for (int m = c0; m <= c1; m++)
        for (int h = 0; h < 2; h++) {
            int j = 2 * m + h;
            R->row[m - c0][h] = j >= lo && j <= hi
                                    ? vhead + (size_t)kv->block_table[j / bs] * block_bytes + (size_t)(j % bs) * step
                                    : NULL;
            if (j + bs <= hi) {
                const uint8_t *nxt = vhead + (size_t)kv->block_table[(j + bs) / bs] * block_bytes +
                                     (size_t)(j % bs) * step;
                for (size_t o = 0; o < step; o += 64) __builtin_prefetch(nxt + o);
            }
        }
}

/* AT_W elements of a V row from element i as floats (zeros for no row). */
static inline __attribute__((always_inline)) at_v bf_vrow(const uint8_t *row, int i, const bf_rows *R,
                                                          const int KIND) {
    if (!row) return at_zero();
    return KIND == 3 ? at_load_q4v(row, i)
           : KIND == 2 ? at_load_q8v(row, i)
                       : at_load_kv(row + (size_t)i * R->esize, KIND == 1);
}

/* Pair m's words of dimensions i .. i + AT_W - 1. */
static inline __attribute__((always_inline)) __m512bh bf_vpair(const bf_rows *R, int c0, int m, int i,
                                                               const int KIND) {
    return (__m512bh)bf_pairs(bf_vrow(R->row[m - c0][0], i, R, KIND), bf_vrow(R->row[m - c0][1], i, R, KIND));
}

/* The chunk's V rows to key pairs: vb[(m - c0) * hd + d]. */
static inline void bf_values(uint32_t *vb, const bf_rows *R, int c0, int c1, int hd, int kind) {
    for (int m = c0; m <= c1; m++) {
        uint32_t *w = vb + (size_t)(m - c0) * (size_t)hd;
        for (int c = 0; c < hd; c += AT_W) {
            __m512bh x = kind == 3   ? bf_vpair(R, c0, m, c, 3)
                         : kind == 2 ? bf_vpair(R, c0, m, c, 2)
                         : kind == 1 ? bf_vpair(R, c0, m, c, 1)
                                     : bf_vpair(R, c0, m, c, 0);
            _mm512_storeu_si512(w + c, (__m512i)x);
        }
    }
}

#endif
