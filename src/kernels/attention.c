/*
 * attention.c - paged causal attention for one query head: the portable
 * reference, and the dispatch to the SIMD builds of the same body
 * (attention_avx512.c, attention_avx2.c) by the process's instruction set.
 */
#include "kernels/attention.h"

#include "kernels/cpu_features.h"
#include "kernels/fp16.h"

static inline float dot_scalar(const float *q, const char *krow, int f16, int n) {
    float s = 0.0f;
    if (f16) {
        const uint16_t *k = (const uint16_t *)(const void *)krow;
        for (int i = 0; i < n; i++) s += q[i] * pdl_f16_to_f32(k[i]);
    } else {
        const float *k = (const float *)(const void *)krow;
        for (int i = 0; i < n; i++) s += q[i] * k[i];
    }
    return s;
}

static inline void axpy_scalar(float *out, float p, const char *vrow, int f16, int n) {
    if (f16) {
        const uint16_t *v = (const uint16_t *)(const void *)vrow;
        for (int i = 0; i < n; i++) out[i] += p * pdl_f16_to_f32(v[i]);
    } else {
        const float *v = (const float *)(const void *)vrow;
        for (int i = 0; i < n; i++) out[i] += p * v[i];
    }
}

#define ATTN_FN pdl_attention_head_scalar
#define ATTN_DOT dot_scalar
#define ATTN_AXPY axpy_scalar
#include "kernels/attention_impl.h"

void pdl_attention_head(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                        int pos, int window, const pdl_attn_kv *kv, float *scores) {
    switch (pdl_isa_active()) {
    case PDL_ISA_AVX512:
        pdl_attention_head_avx512(out_h, q_h, head_dim, kv_head, scale, softcap, pos, window, kv, scores);
        return;
    case PDL_ISA_AVX2:
        pdl_attention_head_avx2(out_h, q_h, head_dim, kv_head, scale, softcap, pos, window, kv, scores);
        return;
    default:
        pdl_attention_head_scalar(out_h, q_h, head_dim, kv_head, scale, softcap, pos, window, kv, scores);
    }
}

size_t pdl_attention_queries_scratch(int n_q, int span, int head_dim) {
    (void)head_dim;
    return (size_t)PDL_ATTN_TILE_FLOATS + (size_t)n_q * (size_t)span;
}

void pdl_attention_queries(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                           int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv, float *scratch) {
    if (pdl_isa_active() == PDL_ISA_AVX512) {
        pdl_attention_queries_avx512(out, q, pos, n_q, head_dim, kv_head, scale, softcap, window, kv, scratch);
        return;
    }
    /* the other builds: one query at a time (same results by definition) */
    for (int i = 0; i < n_q; i++)
        pdl_attention_head(out[i], q[i], head_dim, kv_head, scale, softcap, pos[i], window, kv, scratch);
}
