/*
 * block_pool.c - KV block allocation, sharing, hashing and eviction.
 *
 * The free queue is a doubly linked list through the blocks (O(1) removal
 * when a hit revives a free cached block). The hash map is open addressing
 * over block ids, sized at init for twice the block count (it holds at most
 * one entry per block, so it never grows); removals leave tombstones, and
 * the map is rebuilt when they fill a quarter of it, so a miss never walks
 * far.
 */
#define _POSIX_C_SOURCE 200809L
#include "engine/block_pool.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack (header and library come from one package) */
#include <xxhash.h>

#include "util/error.h"

#define MAP_EMPTY (-1)
#define MAP_GONE (-2)

/* ---- hashing ---------------------------------------------------------------- */

bpool_hash bpool_default_hash(bpool_hash parent, const int32_t *tokens, int n_tokens) {
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, &parent, sizeof parent);
    XXH3_128bits_update(&st, tokens, (size_t)n_tokens * sizeof *tokens);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    return (bpool_hash){h.low64, h.high64};
}

bpool_hash bpool_root_hash(const char *cache_salt) { return bpool_root_hash_keyed(cache_salt, NULL, 0); }

bpool_hash bpool_root_hash_keyed(const char *cache_salt, const void *key, size_t key_len) {
    /* "no salt" and every salt hash apart: the salt's bytes after a tag;
     * a key after a second tag (a salt ends at its NUL, so the two cannot
     * run into each other) */
    static const char tag[] = "pagedlm-prefix-root", key_tag[] = "pagedlm-prefix-key";
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, tag, sizeof tag);
    if (cache_salt) XXH3_128bits_update(&st, cache_salt, strlen(cache_salt) + 1);
    if (key_len) {
        XXH3_128bits_update(&st, key_tag, sizeof key_tag);
        XXH3_128bits_update(&st, key, key_len);
    }
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    return (bpool_hash){h.low64, h.high64};
}

uint64_t bpool_extra_check(const char *cache_salt) { return bpool_extra_check_keyed(cache_salt, NULL, 0); }

uint64_t bpool_extra_check_keyed(const char *cache_salt, const void *key, size_t key_len) {
    uint64_t c = cache_salt ? XXH3_64bits_withSeed(cache_salt, strlen(cache_salt), 0x5a17c0deULL) + 1 : 0;
    if (key_len) c = XXH3_64bits_withSeed(key, key_len, c ^ 0x10a0ada9ULL) | 1; /* never 0 (no salt, no key) */
    return c;
}

static bool same_hash(bpool_hash a, bpool_hash b) { return a.lo == b.lo && a.hi == b.hi; }

/* ---- the map ---------------------------------------------------------------- */

static size_t slot_of(const block_pool *p, bpool_hash h) { return (size_t)(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull)) & (p->map_cap - 1); }

/* The map slot holding `hash`, or (size_t)-1. */
static size_t map_find(const block_pool *p, bpool_hash hash) {
    for (size_t i = slot_of(p, hash), n = 0; n < p->map_cap; i = (i + 1) & (p->map_cap - 1), n++) {
        int32_t b = p->map[i];
        if (b == MAP_EMPTY) return (size_t)-1;
        if (b >= 0 && same_hash(p->blocks[b].hash, hash)) return i;
    }
    return (size_t)-1;
}

static void map_insert(block_pool *p, int32_t block) {
    size_t i = slot_of(p, p->blocks[block].hash);
    while (p->map[i] >= 0) i = (i + 1) & (p->map_cap - 1);
    if (p->map[i] == MAP_GONE) p->map_gone--;
    p->map[i] = block;
}

static void map_rebuild(block_pool *p) {
    for (size_t i = 0; i < p->map_cap; i++) p->map[i] = MAP_EMPTY;
    p->map_gone = 0;
    for (int32_t b = 0; b < p->n_blocks; b++)
        if (p->blocks[b].hashed) map_insert(p, b);
}

/* Makes a block unfindable (it is about to be rewritten, or another block
 * takes its hash). */
static void unhash(block_pool *p, int32_t block) {
    bpool_block *b = &p->blocks[block];
    if (!b->hashed) return;
    size_t i = map_find(p, b->hash);
    if (i != (size_t)-1 && p->map[i] == block) {
        p->map[i] = MAP_GONE;
        p->map_gone++;
    }
    b->hashed = false;
    if (b->ref == 0) p->n_cached_free--;
    if (b->snapshot >= 0) {
        int32_t slot = b->snapshot;
        b->snapshot = -1;
        if (p->drop_snapshot) p->drop_snapshot(p->drop_user, slot);
    }
    if (p->map_gone > p->map_cap / 4) map_rebuild(p);
}

/* ---- the free queue ------------------------------------------------------------ */

static void queue_remove(block_pool *p, int32_t block) {
    bpool_block *b = &p->blocks[block];
    if (b->prev >= 0) p->blocks[b->prev].next = b->next;
    else p->head = b->next;
    if (b->next >= 0) p->blocks[b->next].prev = b->prev;
    else p->tail = b->prev;
    b->prev = b->next = -1;
    p->n_free--;
    if (b->hashed) p->n_cached_free--;
}

static void queue_append(block_pool *p, int32_t block) {
    bpool_block *b = &p->blocks[block];
    b->prev = p->tail;
    b->next = -1;
    if (p->tail >= 0) p->blocks[p->tail].next = block;
    else p->head = block;
    p->tail = block;
    p->n_free++;
    if (b->hashed) p->n_cached_free++;
}

/* ---- the pool -------------------------------------------------------------------- */

int bpool_init(block_pool *p, int n_blocks, int block_size, bool caching, pdl_error *err) {
    memset(p, 0, sizeof *p);
    if (n_blocks <= 0 || block_size <= 0)
        return err_fail(err, "block pool: %d blocks of %d tokens", n_blocks, block_size);
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->caching = caching;
    p->hash_fn = bpool_default_hash;
    p->map_cap = 16;
    while (p->map_cap < (size_t)n_blocks * 2) p->map_cap *= 2;
    p->blocks = calloc((size_t)n_blocks, sizeof *p->blocks);
    p->tokens = caching ? malloc((size_t)n_blocks * (size_t)block_size * sizeof *p->tokens) : NULL;
    p->map = malloc(p->map_cap * sizeof *p->map);
    if (!p->blocks || !p->map || (caching && !p->tokens)) {
        bpool_free(p);
        return err_fail(err, "block pool: out of memory for %d blocks", n_blocks);
    }
    for (size_t i = 0; i < p->map_cap; i++) p->map[i] = MAP_EMPTY;
    p->head = p->tail = -1;
    for (int32_t b = 0; b < n_blocks; b++) { /* low ids are taken first */
        p->blocks[b].prev = p->blocks[b].next = -1;
        p->blocks[b].snapshot = -1;
        queue_append(p, b);
    }
    return 0;
}

void bpool_free(block_pool *p) {
    free(p->blocks);
    free(p->tokens);
    free(p->map);
    memset(p, 0, sizeof *p);
}

int32_t bpool_alloc(block_pool *p) {
    int32_t b = p->head;
    if (b < 0) return -1;
    queue_remove(p, b);
    p->blocks[b].ref = 1;
    unhash(p, b); /* evicted: its contents are about to be overwritten */
    p->blocks[b].gen++;
    return b;
}

void bpool_ref(block_pool *p, int32_t block) {
    if (block >= 0 && block < p->n_blocks && p->blocks[block].ref > 0) p->blocks[block].ref++;
}

void bpool_release(block_pool *p, int32_t block) {
    if (block < 0 || block >= p->n_blocks || p->blocks[block].ref <= 0) return; /* not held */
    if (--p->blocks[block].ref == 0) queue_append(p, block);
}

void bpool_release_all(block_pool *p, const int32_t *blocks, int n) {
    for (int i = n - 1; i >= 0; i--) bpool_release(p, blocks[i]);
}

/* Whether cached block b may stand after `parent` (id, generation) with
 * the given tokens and extra check. */
static bool matches(const block_pool *p, int32_t b, const int32_t *tokens, int32_t parent, uint32_t parent_gen,
                    uint64_t extra) {
    const bpool_block *k = &p->blocks[b];
    if (k->parent != parent || k->extra != extra) return false;
    if (parent >= 0 && k->parent_gen != parent_gen) return false;
    return memcmp(p->tokens + (size_t)b * (size_t)p->block_size, tokens, (size_t)p->block_size * sizeof *tokens) == 0;
}

int32_t bpool_cache(block_pool *p, int32_t block, bpool_hash hash, const int32_t *tokens, int32_t parent,
                    uint64_t extra) {
    if (!p->caching || block < 0 || block >= p->n_blocks) return -1;
    if (p->blocks[block].hashed) return block;
    size_t i = map_find(p, hash);
    if (i != (size_t)-1) {
        /* another block holds this hash: it stays, and stands for this one
         * as the parent of what follows, when it is the same block content
         * after the same parent; one that can no longer be reached (its
         * parent was evicted or rewritten since) gives way */
        int32_t other = p->map[i];
        const bpool_block *o = &p->blocks[other];
        bool stale = o->parent >= 0 && (p->blocks[o->parent].gen != o->parent_gen || !p->blocks[o->parent].hashed);
        if (!stale) {
            uint32_t parent_gen = parent >= 0 ? p->blocks[parent].gen : 0;
            return matches(p, other, tokens, parent, parent_gen, extra) ? other : block;
        }
        unhash(p, other);
    }
    bpool_block *b = &p->blocks[block];
    b->hash = hash;
    b->parent = parent;
    b->parent_gen = parent >= 0 ? p->blocks[parent].gen : 0;
    b->extra = extra;
    memcpy(p->tokens + (size_t)block * (size_t)p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    b->hashed = true;
    if (b->ref == 0) p->n_cached_free++;
    map_insert(p, block);
    return block;
}

int32_t bpool_take_cached(block_pool *p, bpool_hash hash, const int32_t *tokens, int32_t parent, uint64_t extra) {
    if (!p->caching) return -1;
    size_t i = map_find(p, hash);
    if (i == (size_t)-1) return -1;
    int32_t b = p->map[i];
    uint32_t parent_gen = parent >= 0 ? p->blocks[parent].gen : 0;
    if (!matches(p, b, tokens, parent, parent_gen, extra)) return -1; /* a collision, or a stale chain */
    if (p->blocks[b].ref == 0) {
        queue_remove(p, b);
        p->blocks[b].ref = 1;
    } else {
        p->blocks[b].ref++;
    }
    return b;
}

int bpool_table_grow(int32_t **table, int *cap, int n) {
    if (n <= *cap) return 0;
    int c = *cap ? *cap : 8;
    while (c < n) c *= 2;
    int32_t *t = realloc(*table, (size_t)c * sizeof *t);
    if (!t) return -1;
    *table = t;
    *cap = c;
    return 0;
}
