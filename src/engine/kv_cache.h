/*
 * kv_cache.h - the paged key/value store the forward writes and attends over.
 *
 * Memory is one pool of blocks; a block holds block_size token slots for
 * every layer, K and V. Slot s = block * block_size + offset. A sequence
 * owns a list of blocks (its block table, kept by the caller), so its
 * positions need not be contiguous in memory. Layout per layer, F16 or
 * F32: v[layer][slot][kv_dim]; k[layer][block][kv_dim][block_size], each
 * block dimension-major so that one dimension of a block's keys is one
 * vector load (kernels/attention.h, pdl_attn_k_index).
 * Blocks are reference-counted so several sequences (the n samples of one
 * prompt) can share the blocks of their common prefix.
 */
#ifndef PDL_ENGINE_KV_CACHE_H
#define PDL_ENGINE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

struct pdl_kv_cache {
    pdl_kv_dtype dtype;
    int n_layers;
    int kv_dim;          /* n_kv_heads * head_dim */
    int block_size;      /* token slots per block */
    int n_blocks;
    size_t elem_bytes;   /* 2 (F16) or 4 (F32) */
    void *k;             /* [n_layers][n_blocks][kv_dim][block_size] */
    void *v;             /* [n_layers][n_blocks * block_size][kv_dim] */
    int32_t *free_list;  /* [n_blocks] stack of free block ids */
    int n_free;
    int32_t *refs;       /* [n_blocks] holders of each block; 0 = free */
};

/* Address of `layer`'s K pool (blocks laid out as above). */
static inline void *pdl_kv_k_pool(const pdl_kv_cache *kv, int layer) {
    size_t n_slots = (size_t)kv->n_blocks * (size_t)kv->block_size;
    return (char *)kv->k + (size_t)layer * n_slots * (size_t)kv->kv_dim * kv->elem_bytes;
}

/* Address of the V row of `slot` in `layer`. */
static inline void *pdl_kv_v_row(const pdl_kv_cache *kv, int layer, int64_t slot) {
    size_t n_slots = (size_t)kv->n_blocks * (size_t)kv->block_size;
    return (char *)kv->v + (((size_t)layer * n_slots + (size_t)slot) * (size_t)kv->kv_dim) * kv->elem_bytes;
}

/* Address of `layer`'s V pool. */
static inline void *pdl_kv_v_pool(const pdl_kv_cache *kv, int layer) { return pdl_kv_v_row(kv, layer, 0); }

#endif
