/*
 * bench_attention.c - the attention kernel alone (bench_attention.h).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "cli/bench_attention.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/fp16.h"
#include "util/clock.h"

#define BLOCK 16              /* the engine's block size */
#define PREFILL_QUERIES 128   /* a prefill call: the most the forward gathers (ATTN_MAX_QUERIES_PER_CALL) */

/* A float in [-1, 1) from a 32-bit LCG. */
static float lcg_unit(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1u << 23) - 1.0f;
}

/* Nanoseconds per query-key of one call of nq queries at the last nq
 * positions before `keys` (best of five runs of at least 20 ms). */
static double time_call(const pdl_attention_table *t, const pdl_attn_kv *kv, int hd, int keys, int nq,
                        const float *q, float *out, float *scratch) {
    const float *qs[PREFILL_QUERIES];
    float *outs[PREFILL_QUERIES];
    int pos[PREFILL_QUERIES];
    for (int i = 0; i < nq; i++)
        qs[i] = q + (size_t)i * hd, outs[i] = out + (size_t)i * hd, pos[i] = keys - nq + i;
    float scale = 1.0f / sqrtf((float)hd);
    t->queries(outs, qs, pos, nq, hd, 0, scale, 0.0f, NULL, 0, kv, scratch); /* warm-up */
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        int calls = 0;
        double t0 = clock_now_s(), el;
        do {
            t->queries(outs, qs, pos, nq, hd, 0, scale, 0.0f, NULL, 0, kv, scratch);
            calls++;
            el = clock_now_s() - t0;
        } while (el < 0.02);
        if (el / calls < best) best = el / calls;
    }
    return best * 1e9 / ((double)nq * (double)keys);
}

int bench_attention_measure(pdl_isa isa, int head_dim, int group, int keys, pdl_kv_dtype kv_dtype,
                            bench_attention *out) {
    fp16_init();
    pdl_attention_table t;
    attn_table_for(isa, attn_order(), &t);
    if (keys < PREFILL_QUERIES) keys = PREFILL_QUERIES; /* every query at a position of its own */
    int hd = head_dim, blocks = keys / BLOCK + 1;
    int f16 = kv_dtype == PDL_KV_F16, q8 = kv_dtype == PDL_KV_Q8_0, q4 = kv_dtype == PDL_KV_Q4_0;
    size_t pool = q8 || q4 ? attn_kvq_block_bytes(BLOCK, hd, hd, q4) * (size_t)blocks
                           : (size_t)blocks * BLOCK * (size_t)hd * (f16 ? 2 : 4);
    int nq[2] = {group < 1 ? 1 : group > PREFILL_QUERIES ? PREFILL_QUERIES : group, PREFILL_QUERIES};
    void *kpool = malloc(pool), *vpool = malloc(pool);
    int32_t *table = malloc((size_t)blocks * sizeof *table);
    float *row = malloc(2 * (size_t)hd * sizeof *row), *q = malloc((size_t)PREFILL_QUERIES * hd * sizeof *q);
    float *o = malloc((size_t)PREFILL_QUERIES * hd * sizeof *o);
    float *scratch = malloc(attn_queries_scratch(PREFILL_QUERIES, keys, hd) * sizeof *scratch);
    int rc = kpool && vpool && table && row && q && o && scratch ? 0 : -1;
    if (!rc) {
        uint32_t s = 12345;
        for (int b = 0; b < blocks; b++) table[b] = (b * 7 + 3) % blocks; /* scattered, as a real cache's */
        if (blocks % 7 == 0)
            for (int b = 0; b < blocks; b++) table[b] = b; /* 7 would not permute them */
        pdl_attention_store_fn store = attn_table_store_for(&t, f16, q8, q4);
        for (int p = 0; p < keys; p++) {
            for (int e = 0; e < 2 * hd; e++) row[e] = lcg_unit(&s);
            int64_t slot = (int64_t)table[p / BLOCK] * BLOCK + p % BLOCK;
            store(kpool, vpool, f16, hd, hd, BLOCK, slot, row, row + hd);
        }
        for (int i = 0; i < PREFILL_QUERIES * hd; i++) q[i] = lcg_unit(&s);
        pdl_attn_kv kv = {.k = kpool, .v = vpool, .kv_is_f16 = f16, .kv_is_q8 = q8, .kv_is_q4 = q4,
                          .kv_dim = hd, .block_table = table, .block_size = BLOCK};
        out->order = attn_order_name(t.order);
        out->head_dim = hd, out->keys = keys;
        for (int k = 0; k < 2; k++) {
            out->queries[k] = nq[k];
            out->ns_per_query_key[k] = time_call(&t, &kv, hd, keys, nq[k], q, o, scratch);
        }
    }
    free(kpool), free(vpool), free(table), free(row), free(q), free(o), free(scratch);
    return rc;
}
