/*
 * kv_cache.h - the paged key/value storage the forward writes and attends
 * over: layout and addresses, nothing else.
 *
 * Memory is one pool of blocks; a block holds block_size token slots for
 * every layer, K and V. Slot s = block * block_size + offset. A sequence's
 * blocks are listed in its block table, so its positions need not be
 * contiguous in memory. Layout per layer, F16 or F32:
 * v[layer][block][kv_head][block_size][head_dim];
 * k[layer][block][kv_dim][block_size], each block dimension-major so that
 * one dimension of a block's keys is one vector load (kernels/attention.h,
 * attn_k_index). Q8_0 and Q4_0: the same order in groups of 32 elements
 * (or the head), each with an f16 scale, block_bytes per layer and block
 * (attention.h, attn_kvq_*).
 * What it is not for: deciding who holds which block. The engine's block
 * pool (src/engine/block_pool.h) allocates, shares, caches and evicts
 * blocks; a pdl_seq (one sequence over a cache of its own) takes them in
 * order from block 0.
 */
#ifndef PDL_MODEL_KV_CACHE_H
#define PDL_MODEL_KV_CACHE_H

#include <stdbool.h>
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
    size_t elem_bytes;   /* 2 (F16) or 4 (F32); 1 for Q8_0 and Q4_0, whose blocks carry scales too */
    size_t block_bytes;  /* bytes of one block of one layer's K (as many of V) */
    void *k;             /* [n_layers][n_blocks][kv_dim][block_size] */
    void *v;             /* [n_layers][n_blocks][n_kv_heads][block_size][head_dim] */
    /* Recurrent state slots (hybrid models): n_rec_layers regions of
     * state_layer_floats F32 each per slot, laid out as kv_state_* say. */
    int n_state_slots;
    int n_rec_layers;
    int st_k_heads, st_v_heads, st_k_dim, st_v_dim, st_conv_dim;
    size_t state_layer_floats;
    float *state;        /* [n_state_slots][n_rec_layers][state_layer_floats] */
};

/* The delta-rule state is kept at multiples of PDL_STATE_CHUNK positions
 * (counted from the sequence start); the rows since are kept per position
 * in the chunk. The convolution's inputs are kept in a ring of
 * PDL_STATE_RING positions (position p at p % PDL_STATE_RING). */
#define PDL_STATE_CHUNK 64
#define PDL_STATE_RING 32

/* One recurrent layer's region of one slot:
 *   S     [v_heads][k_dim][v_dim]       the state at the chunk boundary
 *   ring  [PDL_STATE_RING][conv_dim]    convolution inputs by position
 *   keys  [PDL_STATE_CHUNK][k_heads][k_dim]  the chunk's normalized keys
 *   delta [PDL_STATE_CHUNK][v_heads][v_dim]  the chunk's delta-rule updates
 *   decay [PDL_STATE_CHUNK][v_heads]    the chunk's cumulative log decay */
typedef struct kv_state_view {
    float *S, *ring, *keys, *delta, *decay;
} kv_state_view;

static inline kv_state_view kv_state(const pdl_kv_cache *kv, int slot, int rec_layer) {
    float *base = kv->state + ((size_t)slot * (size_t)kv->n_rec_layers + (size_t)rec_layer) * kv->state_layer_floats;
    kv_state_view v;
    v.S = base;
    v.ring = v.S + (size_t)kv->st_v_heads * kv->st_k_dim * kv->st_v_dim;
    v.keys = v.ring + (size_t)PDL_STATE_RING * kv->st_conv_dim;
    v.delta = v.keys + (size_t)PDL_STATE_CHUNK * kv->st_k_heads * kv->st_k_dim;
    v.decay = v.delta + (size_t)PDL_STATE_CHUNK * kv->st_v_heads * kv->st_v_dim;
    return v;
}

/* Address of `layer`'s K pool (blocks laid out as above). */
static inline void *kv_k_pool(const pdl_kv_cache *kv, int layer) {
    return (char *)kv->k + (size_t)layer * (size_t)kv->n_blocks * kv->block_bytes;
}

/* Address of `layer`'s V pool (blocks laid out as above). */
static inline void *kv_v_pool(const pdl_kv_cache *kv, int layer) {
    return (char *)kv->v + (size_t)layer * (size_t)kv->n_blocks * kv->block_bytes;
}

/* pdl_kv_cache_create_hybrid, with one more attention layer for the
 * model's MTP block when with_mtp (its K/V in the same blocks as the main
 * stack's: the block tables, the prefix cache and block copies cover it;
 * model_forward_mtp). pdl_forward runs over such a cache too. */
struct pdl_model;
int kv_cache_create(pdl_kv_cache **out, const struct pdl_model *model, pdl_kv_dtype dtype, int block_size,
                    int n_blocks, int n_state_slots, bool with_mtp, pdl_error *err);

/* Bytes of one block of one layer's K (as many of V) in a cache of dtype. */
size_t kv_layer_block_bytes(pdl_kv_dtype dtype, int kv_dim, int head_dim, int block_size);

/* pdl_kv_cache_block_bytes of such a cache. */
size_t kv_cache_block_bytes(const struct pdl_model *model, pdl_kv_dtype dtype, int block_size, bool with_mtp);

/* Bytes of one recurrent state slot of a model with this config (0 without
 * recurrent layers). */
struct pdl_model_config;
size_t kv_state_slot_bytes(const struct pdl_model_config *c);

#endif
