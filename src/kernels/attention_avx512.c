/*
 * attention_avx512.c - attention with AVX-512: the register tiles of
 * attention_tiles_body.h at 16 lanes (8 queries x 3 groups of 16 keys per score
 * tile; 6 queries x 4 vectors of dimensions per value tile), and the
 * portable body (attention_body.h)
 * built here for the shapes they do not take. Same bits as every build.
 */
#include "kernels/attention.h"

#if defined(__AVX512F__)
#include "kernels/attention_avx512_ops.h"

#define ATTN_STORAGE static
#define ATTN_QUERIES_FN attention_queries_avx512_generic
#define ATTN_F16(h) _cvtsh_ss(h)
#include "kernels/attention_body.h"

#define AT_FN attn_queries_avx512
#define AT_GENERIC attention_queries_avx512_generic
#include "kernels/attention_tiles_body.h"
#else
void attn_queries_avx512(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                         int kv_head, float scale, float softcap, const float *sinks, int window, const pdl_attn_kv *kv,
                         float *scratch) {
    attn_queries_scalar(out, q, pos, n_q, head_dim, kv_head, scale, softcap, sinks, window, kv, scratch);
}
void attn_queries_avx512_ranges(float *const *out, const float *const *q, const int *first, const int *last,
                                     int n_q, int head_dim, int kv_head, float scale, float softcap,
                                     const float *sinks, const pdl_attn_kv *kv, float *scratch) {
    attn_queries_scalar_ranges(out, q, first, last, n_q, head_dim, kv_head, scale, softcap, sinks, kv, scratch);
}
#endif
