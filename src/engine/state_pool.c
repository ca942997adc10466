/*
 * state_pool.c - recurrent state slots: live ones and prefix snapshots
 * (state_pool.h).
 *
 * Slots are few (one per running sequence plus the snapshots: each one is
 * a whole recurrent state, tens of megabytes for a real model), so the
 * free slot and the least recently used snapshot are found by a scan.
 */
#include "engine/state_pool.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* The block pool dropped block's snapshot (evicted or replaced). */
static void drop_from_block(void *user, int32_t slot) {
    state_pool *s = user;
    if (slot < 0 || slot >= s->n_slots || s->slots[slot].kind != SPOOL_SNAPSHOT) return;
    s->slots[slot] = (spool_slot){.kind = SPOOL_FREE, .block = -1};
    s->n_snapshots--;
    s->snapshots_dropped++;
}

int spool_init(state_pool *s, int n_slots, block_pool *blocks, pdl_error *err) {
    memset(s, 0, sizeof *s);
    s->blocks = blocks;
    if (n_slots <= 0) return 0;
    s->slots = calloc((size_t)n_slots, sizeof *s->slots);
    if (!s->slots) return err_fail(err, "state pool: out of memory for %d slots", n_slots);
    s->n_slots = n_slots;
    for (int i = 0; i < n_slots; i++) s->slots[i].block = -1;
    if (blocks) {
        blocks->drop_snapshot = drop_from_block;
        blocks->drop_user = s;
    }
    return 0;
}

void spool_free(state_pool *s) {
    if (s->blocks && s->blocks->drop_user == s) s->blocks->drop_snapshot = NULL, s->blocks->drop_user = NULL;
    free(s->slots);
    memset(s, 0, sizeof *s);
}

/* A free slot, else the least recently used snapshot's (unlinked from its
 * block), else -1. */
static int32_t take_slot(state_pool *s) {
    int32_t lru = -1;
    for (int32_t i = 0; i < s->n_slots; i++) {
        if (s->slots[i].kind == SPOOL_FREE) return i;
        if (s->slots[i].kind == SPOOL_SNAPSHOT && (lru < 0 || s->slots[i].used < s->slots[lru].used)) lru = i;
    }
    if (lru >= 0) {
        int32_t b = s->slots[lru].block;
        if (s->blocks && b >= 0 && s->blocks->blocks[b].snapshot == lru) s->blocks->blocks[b].snapshot = -1;
        s->slots[lru] = (spool_slot){.kind = SPOOL_FREE, .block = -1};
        s->n_snapshots--;
        s->snapshots_dropped++;
    }
    return lru;
}

int32_t spool_alloc_live(state_pool *s) {
    int32_t slot = take_slot(s);
    if (slot < 0) return -1;
    s->slots[slot].kind = SPOOL_LIVE;
    s->n_live++;
    return slot;
}

void spool_release(state_pool *s, int32_t slot) {
    if (slot < 0 || slot >= s->n_slots || s->slots[slot].kind != SPOOL_LIVE) return;
    s->slots[slot] = (spool_slot){.kind = SPOOL_FREE, .block = -1};
    s->n_live--;
}

int32_t spool_alloc_snapshot(state_pool *s, int32_t block) {
    if (!s->blocks || block < 0 || block >= s->blocks->n_blocks) return -1;
    bpool_block *b = &s->blocks->blocks[block];
    if (!b->hashed || b->snapshot >= 0) return -1;
    int32_t slot = take_slot(s);
    if (slot < 0) return -1;
    s->slots[slot] = (spool_slot){.kind = SPOOL_SNAPSHOT, .block = block, .used = ++s->clock};
    b->snapshot = slot;
    s->n_snapshots++;
    s->snapshots_taken++;
    return slot;
}

int32_t spool_snapshot_of(state_pool *s, int32_t block) {
    if (!s->blocks || s->n_slots == 0 || block < 0 || block >= s->blocks->n_blocks) return -1;
    int32_t slot = s->blocks->blocks[block].snapshot;
    if (slot < 0) return -1;
    s->slots[slot].used = ++s->clock;
    return slot;
}
