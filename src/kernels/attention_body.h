/*
 * attention_body.h - the portable attention body, in the order attention.h
 * defines, written once and compiled once per instruction set: the
 * including file defines ATTN_QUERIES_FN (the function's name;
 * ATTN_STORAGE may make it static) and ATTN_F16(h) (a half's float value).
 * A Q8_0 or Q4_0 cache's elements are S * q, exact in float (attention.h).
 * Keys are scored a run at a time (up to 16 consecutive slots of a block,
 * which lie side by side in K's layout), so the inner loops run over
 * neighbouring keys and can be vectorised without reordering any sum.
 * With ATTN_COMMON_ONLY defined it gives only the pieces every body shares
 * (the softmax, slots, the first key of a window).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/fast_exp.h"

#ifndef PDL_KERNELS_ATTENTION_BODY_COMMON
#define PDL_KERNELS_ATTENTION_BODY_COMMON
static inline int64_t attn_slot(const pdl_attn_kv *kv, int pos) {
    return (int64_t)kv->block_table[pos / kv->block_size] * kv->block_size + pos % kv->block_size;
}

/* The softmax of n scores in place (attention.h: 16 partial sums, a fixed
 * tree, then each p times 1 / sum), with an attention sink's logit in the
 * denominator unless sink is -INFINITY (none): the max is taken over the
 * scores and the sink, and exp(sink - max) is added after the tree. */
static inline void attn_softmax(float *p, int n, float max, float sink) {
    if (sink > max) max = sink;
    for (int j = 0; j < n; j++) p[j] = fexp_nonpos(p[j] - max);
    float lane[16] = {0};
    int j0 = 0;
    for (; j0 + 16 <= n; j0 += 16) /* a whole vector of lanes per step */
        for (int l = 0; l < 16; l++) lane[l] += p[j0 + l];
    for (int l = 0; j0 + l < n; l++) lane[l] += p[j0 + l];
    float s8[8], s4[4];
    for (int i = 0; i < 8; i++) s8[i] = lane[i] + lane[i + 8];
    for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
    float sum = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    if (sink != -INFINITY) sum += fexp_nonpos(sink - max);
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) p[j] *= inv;
}

/* Query i's sink logit, -INFINITY without sinks. */
static inline float attn_sink(const float *sinks, int i) { return sinks ? sinks[i] : -INFINITY; }

static inline int attn_first(int pos, int window) { return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0; }

static inline uint16_t attn_half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* A quantized cache's code as a float: Q8_0's int8, or Q4_0's low (or,
 * with high, high) nibble minus 8. */
static inline float attn_code(uint8_t b, int q4, int high) {
    return q4 ? (float)(((high ? b >> 4 : b) & 15) - 8) : (float)(int8_t)b;
}
#endif

#ifndef ATTN_COMMON_ONLY /* attention_bf16.c takes only the pieces above */
#ifndef ATTN_STORAGE
#define ATTN_STORAGE /* external */
#endif

#define ATTN_ONE_(fn) fn##_one
#define ATTN_ONE(fn) ATTN_ONE_(fn)
#define ATTN_RANGES_(fn) fn##_ranges
#define ATTN_RANGES(fn) ATTN_RANGES_(fn)

/* One query over keys [first, pos]. */
static void ATTN_ONE(ATTN_QUERIES_FN)(float *out, const float *q, int hd, int kv_head, float scale, float softcap,
                                      float sink, int first, int pos, const pdl_attn_kv *kv, float *scores) {
    int bs = kv->block_size, f16 = kv->kv_is_f16;
    int e0 = kv_head * hd;
    int q4 = kv->kv_is_q4, quant = kv->kv_is_q8 || q4; /* Q8_0 / Q4_0 groups of gs, cb code bytes each */
    int gs = attn_q8_group(hd), cb = attn_kvq_code_bytes(hd, q4);
    float max = -INFINITY;
    for (int j = first; j <= pos;) {
        int run = bs - j % bs; /* keys up to the end of j's block */
        if (run > pos - j + 1) run = pos - j + 1;
        if (run > 16) run = 16;
        float acc[16] = {0};
        if (quant) { /* S * q exactly, then the same fma as a float cache */
            const uint8_t *kb = kv->k;
            int64_t slot = attn_slot(kv, j);
            for (int c = 0; c < hd; c += gs) {
                float sc[16];
                for (int u = 0; u < run; u++)
                    sc[u] = ATTN_F16(attn_half_at(kb + attn_kvq_k_scale(slot + u, bs, kv->kv_dim, hd, e0 + c, q4)));
                for (int d = c; d < c + gs; d++) {
                    const uint8_t *k = kb + attn_kvq_k_byte(slot, bs, kv->kv_dim, hd, e0 + d, q4);
                    for (int u = 0; u < run; u++) acc[u] = fmaf(q[d], sc[u] * attn_code(k[u], q4, d - c >= cb), acc[u]);
                }
            }
        }
        size_t k0 = attn_k_index(attn_slot(kv, j), bs, kv->kv_dim, e0);
        for (int d = 0; d < hd && !quant; d++) {
            size_t at = k0 + (size_t)d * (size_t)bs;
            if (f16) {
                const uint16_t *k = (const uint16_t *)kv->k + at;
                for (int u = 0; u < run; u++) acc[u] = fmaf(q[d], ATTN_F16(k[u]), acc[u]);
            } else {
                const float *k = (const float *)kv->k + at;
                for (int u = 0; u < run; u++) acc[u] = fmaf(q[d], k[u], acc[u]);
            }
        }
        for (int u = 0; u < run; u++) {
            float s = acc[u] * scale;
            if (softcap > 0.0f) s = tanhf(s / softcap) * softcap;
            scores[j - first + u] = s;
            if (s > max) max = s;
        }
        j += run;
    }
    attn_softmax(scores, pos - first + 1, max, sink);
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    for (int j = first; j <= pos; j++) {
        float p = scores[j - first];
        size_t v0 = attn_v_index(attn_slot(kv, j), bs, kv->kv_dim, hd, e0);
        if (quant) {
            const uint8_t *row = (const uint8_t *)kv->v + attn_kvq_v_byte(attn_slot(kv, j), bs, kv->kv_dim, hd, e0, q4);
            for (int c = 0; c < hd; c += gs, row += cb + 2) {
                float S = ATTN_F16(attn_half_at(row));
                const uint8_t *v = row + 2;
                for (int d = 0; d < gs; d++) out[c + d] = fmaf(p, S * attn_code(v[d % cb], q4, d >= cb), out[c + d]);
            }
        } else if (f16) {
            const uint16_t *v = (const uint16_t *)kv->v + v0;
            for (int d = 0; d < hd; d++) out[d] = fmaf(p, ATTN_F16(v[d]), out[d]);
        } else {
            const float *v = (const float *)kv->v + v0;
            for (int d = 0; d < hd; d++) out[d] = fmaf(p, v[d], out[d]);
        }
    }
}

ATTN_STORAGE void ATTN_QUERIES_FN(float *const *out, const float *const *q, const int *pos, int n_q, int hd,
                                  int kv_head, float scale, float softcap, const float *sinks, int window,
                                  const pdl_attn_kv *kv, float *scratch) {
    for (int i = 0; i < n_q; i++)
        ATTN_ONE(ATTN_QUERIES_FN)(out[i], q[i], hd, kv_head, scale, softcap, attn_sink(sinks, i),
                                  attn_first(pos[i], window), pos[i], kv, scratch);
}

ATTN_STORAGE void ATTN_RANGES(ATTN_QUERIES_FN)(float *const *out, const float *const *q, const int *first,
                                               const int *last, int n_q, int hd, int kv_head, float scale,
                                               float softcap, const float *sinks,
                                               const pdl_attn_kv *kv, float *scratch) {
    for (int i = 0; i < n_q; i++)
        ATTN_ONE(ATTN_QUERIES_FN)(out[i], q[i], hd, kv_head, scale, softcap, attn_sink(sinks, i), first[i], last[i],
                                  kv, scratch);
}
#endif /* ATTN_COMMON_ONLY */
