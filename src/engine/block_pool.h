/*
 * block_pool.h - who holds which KV block: allocation, reference counts,
 * the free queue, block hashes (prefix caching) and eviction, after vLLM
 * v1's KV cache manager.
 *
 * Every block is free (in the free queue) or held (reference count >= 1).
 * A full block of a sequence gets a hash, hash(parent block's hash, its
 * token ids, extra keys), and is then findable by it: a later request whose
 * prompt starts with the same tokens takes the cached block instead of
 * computing it again. Hashed blocks are never written again (only full
 * blocks are hashed, and nobody writes into a full block). A freed block
 * keeps its contents and hash and joins the free queue at the tail;
 * allocation takes the head, evicting whatever was cached there (least
 * recently freed first; a sequence frees its blocks last-first, so its tail
 * goes first). A hash hit is accepted only when the cached block's token ids
 * and parent (block id and generation) match too, so a hash collision costs
 * a miss, never a wrong answer.
 *
 * A hybrid model's hashed block may also carry a snapshot of the recurrent
 * state at its end (state_pool.h); it is dropped with the block's hash.
 *
 * What it is not for: K/V memory (model/kv_cache.h), or deciding which
 * sequence runs (scheduler.h).
 */
#ifndef PDL_ENGINE_BLOCK_POOL_H
#define PDL_ENGINE_BLOCK_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

/* A block's identity in the cache: a 128-bit hash (XXH3-128). */
typedef struct bpool_hash {
    uint64_t lo, hi;
} bpool_hash;

/* The chain value of the first block's parent: the extra keys of a request
 * (its cache_salt) folded in, so that different salts never share. */
bpool_hash bpool_root_hash(const char *cache_salt);
/* The same with more of a request's extra keys (its LoRA adapter's key and
 * scale): key_len bytes at key, none when 0 (then bpool_root_hash's value). */
bpool_hash bpool_root_hash_keyed(const char *cache_salt, const void *key, size_t key_len);

/* The hash function, replaceable by tests (to force collisions). */
typedef bpool_hash (*bpool_hash_fn)(bpool_hash parent, const int32_t *tokens, int n_tokens);
bpool_hash bpool_default_hash(bpool_hash parent, const int32_t *tokens, int n_tokens);

typedef struct bpool_block {
    int32_t ref;           /* holders; 0 = in the free queue */
    int32_t prev, next;    /* free-queue links (-1 = none) */
    uint32_t gen;          /* bumped whenever the block is taken fresh: its contents changed */
    bool hashed;           /* findable by hash */
    bpool_hash hash;
    int32_t parent;        /* the previous block of the sequence when hashed (-1 = first) */
    uint32_t parent_gen;
    uint64_t extra;        /* the salt check of a first block (bpool_extra_check) */
    int32_t snapshot;      /* hybrid models: the state slot holding the recurrent state at this hashed
                              block's end (state_pool.h), -1 = none; dropped when the block is unhashed */
} bpool_block;

typedef struct block_pool {
    int n_blocks, block_size;
    bpool_block *blocks;   /* [n_blocks] */
    int32_t *tokens;       /* [n_blocks][block_size] the token ids of hashed blocks */
    int32_t head, tail;    /* free queue: head is taken next */
    int n_free;            /* blocks in the free queue (cached ones included) */
    int n_cached_free;     /* of those, hashed (reusable by a hit) */
    bool caching;          /* prefix caching on */
    bpool_hash_fn hash_fn;
    /* hash -> block: open addressing, tombstones on removal */
    int32_t *map;          /* [map_cap] block id, -1 empty, -2 removed */
    size_t map_cap, map_gone;
    /* a hashed block's snapshot leaves with its hash (evicted or replaced):
     * the state pool gets its slot back (NULL: no snapshots) */
    void (*drop_snapshot)(void *user, int32_t slot);
    void *drop_user;
    /* statistics, in tokens (vLLM's prefix_cache_queries / hits) */
    uint64_t queries, hits;
} block_pool;

int bpool_init(block_pool *p, int n_blocks, int block_size, bool caching, pdl_error *err);
void bpool_free(block_pool *p);

/* Takes a block (reference 1) from the head of the free queue, evicting
 * its cached contents; -1 when none is free. */
int32_t bpool_alloc(block_pool *p);
/* A block table's room for n blocks: *table (capacity *cap, doubling from
 * 8) grown when it is smaller; -1 when out of memory (the table unchanged).
 * The scheduler's tables and the draft model's grow this way. */
int bpool_table_grow(int32_t **table, int *cap, int n);
/* Whether n blocks could be taken now. */
static inline bool bpool_can_alloc(const block_pool *p, int n) { return n <= p->n_free; }
/* Another holder of a held block (a fork sharing it). */
void bpool_ref(block_pool *p, int32_t block);
/* Drops one reference; at 0 the block joins the free queue's tail (with its
 * contents and hash, if any). */
void bpool_release(block_pool *p, int32_t block);
/* A sequence's blocks, last first (its tail is evicted first). */
void bpool_release_all(block_pool *p, const int32_t *blocks, int n);

/* The chain hash of a full block: hash(parent, tokens[0 .. block_size)). */
static inline bpool_hash bpool_block_hash(const block_pool *p, bpool_hash parent, const int32_t *tokens) {
    return p->hash_fn(parent, tokens, p->block_size);
}

/* Makes full block `block` findable under `hash` (its tokens copied; its
 * parent the block that stands for the previous one of its sequence, -1
 * for the first, whose extra check is `extra`). Returns the block that
 * stands for it from now on, the parent to give the next block: itself, or
 * an equal block cached before under the same hash (which stays); -1 when
 * caching is off. */
int32_t bpool_cache(block_pool *p, int32_t block, bpool_hash hash, const int32_t *tokens, int32_t parent,
                    uint64_t extra);

/* The cached block for `hash` whose tokens, parent (block id and generation)
 * and extra check match, taken (reference + 1, out of the free queue if it
 * was there); -1 on a miss. */
int32_t bpool_take_cached(block_pool *p, bpool_hash hash, const int32_t *tokens, int32_t parent, uint64_t extra);

/* A 64-bit check of a request's cache_salt kept beside a first block: a
 * second, independent hash, so that a collision of the chain hash alone
 * cannot let two salts share. */
uint64_t bpool_extra_check(const char *cache_salt);
/* The same with the extra keys of bpool_root_hash_keyed. */
uint64_t bpool_extra_check_keyed(const char *cache_salt, const void *key, size_t key_len);

/* Held blocks (reference >= 1). */
static inline int bpool_used(const block_pool *p) { return p->n_blocks - p->n_free; }

#endif
