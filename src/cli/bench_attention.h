/*
 * bench_attention.h - `pagedlm bench --attention-kernel`: the attention
 * kernel alone, as the forward calls it (its family and order, the model's
 * head size, the chosen KV cache dtype), on one thread over a filled cache:
 * nanoseconds per query-key for a decode step's call (a GQA group's heads)
 * and a prefill call's.
 */
#ifndef PDL_CLI_BENCH_ATTENTION_H
#define PDL_CLI_BENCH_ATTENTION_H

#include "kernels/attention.h"
#include "pagedlm.h"

typedef struct bench_attention {
    const char *order;        /* "f32", "bf16" or "amx": the order the kernels kept */
    int head_dim, keys;       /* the head size, and the keys every query reads */
    int queries[2];           /* per call: a decode step's (the GQA group), a prefill call's */
    double ns_per_query_key[2];
} bench_attention;

/* Measures family isa's attention in the order attn_order() asks for
 * (attn_table_for) with the model's head_dim and GQA group over `keys`
 * keys of a `kv` cache of random values: each query count's best of five
 * timed runs of at least 20 ms. 0, or -1 when out of memory. */
int bench_attention_measure(pdl_isa isa, int head_dim, int group, int keys, pdl_kv_dtype kv, bench_attention *out);

#endif
