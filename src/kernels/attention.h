/*
 * attention.h - causal attention of one query row over a paged KV cache.
 *
 * Pure function over plain pointers: the caller passes the layer's K and V
 * pools and the sequence's block table. Keys are read in position order and
 * the softmax is reduced in that order, so the result for a row depends only
 * on that row's query and its sequence's cached keys and values.
 */
#ifndef PDL_KERNELS_ATTENTION_H
#define PDL_KERNELS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

typedef struct pdl_attn_kv {
    const void *k;             /* layer's K pool: [slots][kv_dim] */
    const void *v;             /* layer's V pool: [slots][kv_dim] */
    int kv_is_f16;             /* element type of k and v: F16 or F32 */
    int kv_dim;                /* n_kv_heads * head_dim */
    const int32_t *block_table;/* the sequence's blocks, in position order */
    int block_size;
} pdl_attn_kv;

/*
 * out_h[head_dim] = softmax(cap(q_h K^T * scale)) V for one query head at
 * position pos, reading KV head kv_head, over keys at positions [first, pos],
 * where first = 0 or, with a sliding window W > 0, max(0, pos - W + 1).
 * cap(s) = softcap * tanh(s / softcap) when softcap > 0 (Gemma 2), else s.
 * scores is scratch of at least pos + 1 floats.
 */
void pdl_attention_head(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                        int pos, int window, const pdl_attn_kv *kv, float *scores);

/*
 * Several queries of one sequence against one KV head: out[i] is exactly
 * (bit for bit) what pdl_attention_head gives for query q[i] at position
 * pos[i], but K and V rows are read (and on AVX-512 widened from F16) once
 * per tile of keys for all n_q queries (the rows of a prefill chunk and the
 * heads of a GQA group), so a tile stays in L1 while every query uses it.
 * scratch holds pdl_attention_queries_scratch(n_q, span, head_dim) floats,
 * span = max pos[i] - min first[i] + 1 (first as in pdl_attention_head).
 */
void pdl_attention_queries(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                           int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv, float *scratch);
size_t pdl_attention_queries_scratch(int n_q, int span, int head_dim);
/* The front of that scratch: one tile of 32 keys of up to 256 floats
 * (widened K or V); the queries' scores follow it. */
#define PDL_ATTN_TILE_FLOATS (32 * 256)
void pdl_attention_queries_avx512(float *const *out, const float *const *q, const int *pos, int n_q, int head_dim,
                                  int kv_head, float scale, float softcap, int window, const pdl_attn_kv *kv,
                                  float *scratch);

/* The builds of the same body per instruction set (pdl_attention_head picks
 * the process's); exposed for the tests that compare them. */
void pdl_attention_head_scalar(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                               int pos, int window, const pdl_attn_kv *kv, float *scores);
void pdl_attention_head_avx2(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                             int pos, int window, const pdl_attn_kv *kv, float *scores);
void pdl_attention_head_avx512(float *out_h, const float *q_h, int head_dim, int kv_head, float scale, float softcap,
                               int pos, int window, const pdl_attn_kv *kv, float *scores);

#endif
