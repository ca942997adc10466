/*
 * state_pool.h - who holds which recurrent state slot of a hybrid model
 * (Qwen3.5's Gated DeltaNet layers): the running sequences' slots and the
 * prefix cache's snapshots, after vLLM v1's hybrid KV cache manager, which
 * keeps the recurrent ("mamba") state in a pool of its own beside the
 * attention blocks.
 *
 * Every slot is free, live (the one slot of a running sequence: the state
 * after the positions it has computed) or a snapshot (a copy of some
 * sequence's state at a cached block's end, so that a later prompt with the
 * same prefix starts there instead of at 0). A snapshot is keyed by the
 * cached block whose end it is (block_pool's bpool_block.snapshot), and
 * goes when that block is evicted or rewritten. Snapshots never keep a
 * live sequence out: a live slot is taken from the free ones first, then
 * from the least recently used snapshot; a snapshot is made only in a free
 * slot or in place of an older snapshot.
 *
 * What it is not for: the state's memory and layout (model/kv_cache.h;
 * pdl_kv_cache_copy_state copies between slots), or which sequence runs
 * (scheduler.h).
 */
#ifndef PDL_ENGINE_STATE_POOL_H
#define PDL_ENGINE_STATE_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/block_pool.h"
#include "pagedlm.h"

typedef enum spool_kind {
    SPOOL_FREE = 0,
    SPOOL_LIVE,       /* a running sequence's state */
    SPOOL_SNAPSHOT,   /* a prefix snapshot at the end of cached block `block` */
} spool_kind;

typedef struct spool_slot {
    uint8_t kind;      /* spool_kind */
    int32_t block;     /* SPOOL_SNAPSHOT: the cached block it belongs to */
    uint64_t used;     /* SPOOL_SNAPSHOT: when it was last made or restored (the LRU order) */
} spool_slot;

typedef struct state_pool {
    int n_slots;               /* 0: not a hybrid model (every function is then a no-op or -1) */
    spool_slot *slots;         /* [n_slots] */
    int n_live, n_snapshots;
    uint64_t clock;            /* bumped at each snapshot use */
    block_pool *blocks;        /* where snapshots are keyed (its blocks' snapshot field) */
    /* statistics */
    uint64_t snapshots_taken, snapshots_restored, snapshots_dropped;
} state_pool;

/* n_slots slots over `blocks` (whose eviction drops snapshots: the pool
 * registers itself there). n_slots 0 makes an inert pool. */
int spool_init(state_pool *s, int n_slots, block_pool *blocks, pdl_error *err);
void spool_free(state_pool *s);

/* A slot for a running sequence: a free one, else the least recently used
 * snapshot's (dropped); -1 when every slot is live. */
int32_t spool_alloc_live(state_pool *s);
/* A running sequence's slot back to the free ones (-1: nothing). */
void spool_release(state_pool *s, int32_t slot);

/* A slot to hold the snapshot at the end of cached block `block` (which
 * must be hashed): a free one, else the least recently used snapshot's;
 * -1 when none (every slot live) or when the block has one already. The
 * caller copies the state into it. */
int32_t spool_alloc_snapshot(state_pool *s, int32_t block);
/* The snapshot slot of cached block `block`, or -1; a use (LRU). */
int32_t spool_snapshot_of(state_pool *s, int32_t block);

/* Slots not live (free or snapshots): what a new sequence can get. */
static inline int spool_available(const state_pool *s) { return s->n_slots - s->n_live; }

#endif
