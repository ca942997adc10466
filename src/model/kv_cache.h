/*
 * kv_cache.h - the paged key/value storage the forward writes and attends
 * over: layout and addresses, nothing else.
 *
 * Memory is one pool of blocks; a block holds block_size token slots for
 * every layer, K and V. Slot s = block * block_size + offset. A sequence's
 * blocks are listed in its block table, so its positions need not be
 * contiguous in memory. Layout per layer, F16 or F32:
 * v[layer][slot][kv_dim]; k[layer][block][kv_dim][block_size], each block
 * dimension-major so that one dimension of a block's keys is one vector
 * load (kernels/attention.h, attn_k_index).
 * What it is not for: deciding who holds which block. The engine's block
 * pool (src/engine/block_pool.h) allocates, shares, caches and evicts
 * blocks; a pdl_seq (one sequence over a cache of its own) takes them in
 * order from block 0.
 */
#ifndef PDL_MODEL_KV_CACHE_H
#define PDL_MODEL_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

struct pdl_kv_cache {
    pdl_kv_dtype dtype;
    int n_layers;
    int kv_dim;          /* n_kv_heads * head_dim */
    int head_dim;
    int block_size;      /* token slots per block */
    int n_blocks;
    size_t elem_bytes;   /* 2 (F16) or 4 (F32) */
    void *k;             /* [n_layers][n_blocks][kv_dim][block_size] */
    void *v;             /* [n_layers][n_blocks][n_kv_heads][block_size][head_dim] */
};

/* Address of `layer`'s K pool (blocks laid out as above). */
static inline void *kv_k_pool(const pdl_kv_cache *kv, int layer) {
    size_t n_slots = (size_t)kv->n_blocks * (size_t)kv->block_size;
    return (char *)kv->k + (size_t)layer * n_slots * (size_t)kv->kv_dim * kv->elem_bytes;
}

/* Address of `layer`'s V pool (blocks laid out as above). */
static inline void *kv_v_pool(const pdl_kv_cache *kv, int layer) {
    size_t n_slots = (size_t)kv->n_blocks * (size_t)kv->block_size;
    return (char *)kv->v + (size_t)layer * n_slots * (size_t)kv->kv_dim * kv->elem_bytes;
}

#endif
