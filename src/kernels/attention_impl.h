/*
 * attention_impl.h - the body of pdl_attention_head, written once and
 * compiled once per instruction set: the including file defines
 * ATTN_FN (the function's name; ATTN_STORAGE may make it static), ATTN_DOT(q, krow, f16, n) and
 * ATTN_AXPY(out, p, vrow, f16, n) (out += p * v) for its vector width.
 *
 * Keys are visited in position order, the softmax is reduced in that order,
 * and each value row is added in that order: a row's result depends only on
 * its own query and its sequence's cache.
 */
#include <math.h>
#include <stdint.h>

#include "kernels/fast_exp.h"

static inline const char *attn_kv_row(const void *pool, const pdl_attn_kv *kv, int pos) {
    int64_t slot = (int64_t)kv->block_table[pos / kv->block_size] * kv->block_size + pos % kv->block_size;
    size_t elem = kv->kv_is_f16 ? 2 : 4;
    return (const char *)pool + (size_t)slot * (size_t)kv->kv_dim * elem;
}

#ifndef ATTN_STORAGE
#define ATTN_STORAGE /* external */
#endif

ATTN_STORAGE void ATTN_FN(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap, int pos,
             int window, const pdl_attn_kv *kv, float *scores) {
    int first = (window > 0 && pos - window + 1 > 0) ? pos - window + 1 : 0;
    int f16 = kv->kv_is_f16;
    size_t koff_bytes = (size_t)kv_head * (size_t)head_dim * (f16 ? 2 : 4);
    float max = -INFINITY;
    for (int j = first; j <= pos; j++) {
        float s = ATTN_DOT(q_h, attn_kv_row(kv->k, kv, j) + koff_bytes, f16, head_dim) * scale;
        if (softcap > 0.0f) s = tanhf(s / softcap) * softcap; /* Gemma 2: cap before the mask */
        scores[j - first] = s;
        if (s > max) max = s;
    }
    /* e^(s - max) in a loop the compiler vectorises (same bits on every
     * build: fast_exp.h uses no libm), then summed in key order */
    int n = pos - first + 1;
    for (int j = 0; j < n; j++) scores[j] = pdl_exp_nonpos(scores[j] - max);
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += scores[j];
    float inv = 1.0f / sum;
    for (int i = 0; i < head_dim; i++) out_h[i] = 0.0f;
    for (int j = first; j <= pos; j++)
        ATTN_AXPY(out_h, scores[j - first] * inv, attn_kv_row(kv->v, kv, j) + koff_bytes, f16, head_dim);
}
