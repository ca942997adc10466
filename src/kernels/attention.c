/*
 * attention.c - paged causal attention for one row, all heads (portable C).
 */
#include "kernels/attention.h"

#include <math.h>

#include "kernels/fp16.h"

static inline const void *kv_row(const void *pool, const pdl_attn_kv *kv, int pos) {
    int64_t slot = (int64_t)kv->block_table[pos / kv->block_size] * kv->block_size + pos % kv->block_size;
    size_t elem = kv->kv_is_f16 ? 2 : 4;
    return (const char *)pool + (size_t)slot * (size_t)kv->kv_dim * elem;
}

static float dot_q_k(const float *q, const void *krow, int kv_is_f16, int n) {
    float s = 0.0f;
    if (kv_is_f16) {
        const uint16_t *k = krow;
        for (int i = 0; i < n; i++) s += q[i] * pdl_f16_to_f32(k[i]);
    } else {
        const float *k = krow;
        for (int i = 0; i < n; i++) s += q[i] * k[i];
    }
    return s;
}

void pdl_attention_head(float *out_h, const float *q_h, int head_dim, int kv_head, float scale,
                        int pos, int window, const pdl_attn_kv *kv, float *scores) {
    int first = (window > 0 && pos - window + 1 > 0) ? pos - window + 1 : 0;
    size_t elem = kv->kv_is_f16 ? 2 : 4;
    size_t koff_bytes = (size_t)kv_head * (size_t)head_dim * elem;
    float max = -INFINITY;
    for (int j = first; j <= pos; j++) {
        const char *kh = (const char *)kv_row(kv->k, kv, j) + koff_bytes;
        float s = dot_q_k(q_h, kh, kv->kv_is_f16, head_dim) * scale;
        scores[j - first] = s;
        if (s > max) max = s;
    }
    float sum = 0.0f;
    for (int j = first; j <= pos; j++) {
        float e = expf(scores[j - first] - max);
        scores[j - first] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < head_dim; i++) out_h[i] = 0.0f;
    for (int j = first; j <= pos; j++) {
        float p = scores[j - first] * inv;
        const char *vh = (const char *)kv_row(kv->v, kv, j) + koff_bytes;
        if (kv->kv_is_f16) {
            const uint16_t *v16 = (const uint16_t *)(const void *)vh;
            for (int i = 0; i < head_dim; i++) out_h[i] += p * pdl_f16_to_f32(v16[i]);
        } else {
            const float *v32 = (const float *)(const void *)vh;
            for (int i = 0; i < head_dim; i++) out_h[i] += p * v32[i];
        }
    }
}
