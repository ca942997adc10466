/*
 * encoder_cache.c - the LRU of encoded image rows (encoder_cache.h): a
 * doubly linked list, most recently used first, searched linearly (a
 * budget holds tens to hundreds of images; a search is nothing next to one
 * tower run).
 */
#include "vision/encoder_cache.h"

#include <stdlib.h>
#include <string.h>

#include "vision/image.h"

enc_key enc_key_of(const pdl_image *img) { return (enc_key){img->hash_lo, img->hash_hi}; }

int32_t enc_row_key(enc_key key, int k) {
    uint64_t h = key.lo ^ (key.hi * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(k + 1) * 0xc2b2ae3d27d4eb4full);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return (int32_t)(0x80000000u | (uint32_t)(h & 0x7fffffffu));
}

static size_t entry_bytes(const enc_entry *e) { return (size_t)e->n_rows * (size_t)e->width * sizeof(float); }

void enc_cache_init(enc_cache *c, size_t max_bytes) {
    memset(c, 0, sizeof *c);
    c->max_bytes = max_bytes;
}

static void unlink_entry(enc_cache *c, enc_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(enc_cache *c, enc_entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static void drop(enc_cache *c, enc_entry *e) {
    unlink_entry(c, e);
    c->bytes -= entry_bytes(e);
    c->n_entries--;
    free(e->rows);
    free(e);
}

void enc_cache_free(enc_cache *c) {
    while (c->head) drop(c, c->head);
    memset(c, 0, sizeof *c);
}

static enc_entry *find(enc_cache *c, enc_key key) {
    for (enc_entry *e = c->head; e; e = e->next)
        if (e->key.lo == key.lo && e->key.hi == key.hi) return e;
    return NULL;
}

const enc_entry *enc_cache_get(enc_cache *c, enc_key key) {
    c->queries++;
    enc_entry *e = find(c, key);
    if (!e) return NULL;
    c->hits++;
    if (e != c->head) {
        unlink_entry(c, e);
        push_front(c, e);
    }
    return e;
}

int enc_cache_put(enc_cache *c, enc_key key, const float *rows, int n_rows, int width) {
    size_t bytes = (size_t)n_rows * (size_t)width * sizeof(float);
    if (n_rows <= 0 || width <= 0 || bytes > c->max_bytes) return 0;
    enc_entry *old = find(c, key);
    if (old) drop(c, old); /* the same image again: the newer copy stands */
    while (c->bytes + bytes > c->max_bytes && c->tail) {
        drop(c, c->tail);
        c->evictions++;
    }
    enc_entry *e = calloc(1, sizeof *e);
    float *copy = malloc(bytes);
    if (!e || !copy) {
        free(e), free(copy);
        return -1;
    }
    memcpy(copy, rows, bytes);
    *e = (enc_entry){.key = key, .rows = copy, .n_rows = n_rows, .width = width};
    push_front(c, e);
    c->bytes += bytes;
    c->n_entries++;
    return 0;
}
