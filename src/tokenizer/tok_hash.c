/*
 * tok_hash.c - open-addressing tables for piece -> id and pair -> merge.
 *
 * Tables are at most half full, so linear probing stays short; the stored
 * 32-bit hash avoids most string compares on collisions.
 */
#include "tokenizer/tok_hash.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a 64 with a final avalanche, so that the low bits (the slot index)
 * depend on every byte. Pieces are short, a few bytes on average. */
uint64_t tok_hash_bytes(const void *data, size_t len) {
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint32_t table_size(size_t n) {
    uint32_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

bool tok_strmap_init(tok_strmap *m, size_t n, const char *pool, const uint32_t *off,
                     const uint32_t *len) {
    memset(m, 0, sizeof *m);
    if (n > (1u << 30)) return false;
    uint32_t cap = table_size(n);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return false;
    for (uint32_t i = 0; i < cap; i++) {
        m->slots[i].hash = 0;
        m->slots[i].id = -1;
    }
    m->mask = cap - 1;
    m->pool = pool;
    m->off = off;
    m->len = len;
    return true;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static bool key_equals(const tok_strmap *m, int32_t id, const char *s, size_t n) {
    return m->len[id] == n && memcmp(m->pool + m->off[id], s, n) == 0;
}

int32_t tok_strmap_insert(tok_strmap *m, int32_t id) {
    const char *s = m->pool + m->off[id];
    size_t n = m->len[id];
    uint64_t h = tok_hash_bytes(s, n);
    uint32_t i = (uint32_t)h & m->mask;
    for (;;) {
        tok_strmap_slot *slot = &m->slots[i];
        if (slot->id < 0) {
            slot->hash = (uint32_t)h;
            slot->id = id;
            return -1;
        }
        if (slot->hash == (uint32_t)h && key_equals(m, slot->id, s, n)) {
            int32_t old = slot->id;
            slot->id = id;
            return old;
        }
        i = (i + 1) & m->mask;
    }
}

int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t n) {
    if (!m->slots) return -1;
    uint64_t h = tok_hash_bytes(s, n);
    uint32_t i = (uint32_t)h & m->mask;
    for (;;) {
        const tok_strmap_slot *slot = &m->slots[i];
        if (slot->id < 0) return -1;
        if (slot->hash == (uint32_t)h && key_equals(m, slot->id, s, n)) return slot->id;
        i = (i + 1) & m->mask;
    }
}

static uint32_t pair_hash(int32_t left, int32_t right) {
    uint64_t x = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

bool tok_pairmap_init(tok_pairmap *m, size_t n) {
    memset(m, 0, sizeof *m);
    if (n == 0) return true;
    if (n > (1u << 30)) return false;
    uint32_t cap = table_size(n);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return false;
    for (uint32_t i = 0; i < cap; i++) m->slots[i].left = -1;
    m->mask = cap - 1;
    return true;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

bool tok_pairmap_insert(tok_pairmap *m, int32_t left, int32_t right, int32_t rank,
                        int32_t result) {
    uint32_t i = pair_hash(left, right) & m->mask;
    for (;;) {
        tok_pair_slot *slot = &m->slots[i];
        if (slot->left < 0) {
            slot->left = left;
            slot->right = right;
            slot->rank = rank;
            slot->result = result;
            return true;
        }
        if (slot->left == left && slot->right == right) {
            slot->rank = rank;
            slot->result = result;
            return false;
        }
        i = (i + 1) & m->mask;
    }
}

const tok_pair_slot *tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right) {
    if (!m->slots || left < 0 || right < 0) return NULL;
    uint32_t i = pair_hash(left, right) & m->mask;
    for (;;) {
        const tok_pair_slot *slot = &m->slots[i];
        if (slot->left < 0) return NULL;
        if (slot->left == left && slot->right == right) return slot;
        i = (i + 1) & m->mask;
    }
}
