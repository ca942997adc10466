/*
 * attention_avx2.c - the attention body (attention_impl.h) built with AVX2,
 * FMA and F16C: the compiler vectorises its loops over neighbouring keys
 * and over dimensions without reordering any sum.
 */
#include "kernels/attention.h"

#if defined(__AVX2__)
#include <immintrin.h>

#define ATTN_QUERIES_FN pdl_attention_queries_avx2
#define ATTN_F16(h) _cvtsh_ss(h)
#include "kernels/attention_impl.h"
#else
void pdl_attention_queries_avx2(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                                int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                float *scratch) {
    pdl_attention_queries_scalar(out, q, pos, n_q, head_dim, kv_head, scale, softcap, window, kv, scratch);
}
#endif
