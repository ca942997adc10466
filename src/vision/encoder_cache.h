/*
 * encoder_cache.h - images' encoded rows kept across requests, by the hash
 * of the image's bytes, within a byte budget, least recently used evicted
 * first (vLLM's encoder / multimodal cache).
 *
 * What it is for: the engine asks it before running the vision tower on a
 * request's image, and gives it what the tower made. A hit is a copy of
 * the rows the same bytes encoded to before (the vision model is the
 * engine's one), so a request's rows are the same whether encoded or found.
 * What it is not for: the prefix cache (KV blocks), which keys image rows
 * by the same hash (engine_input.c's image_row_key).
 */
#ifndef PDL_VISION_ENCODER_CACHE_H
#define PDL_VISION_ENCODER_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct enc_entry {
    uint64_t hash_lo, hash_hi;
    float *rows;                 /* n_rows x width, owned */
    int n_rows, width;
    struct enc_entry *prev, *next; /* the LRU list: head = most recently used */
} enc_entry;

typedef struct enc_cache {
    size_t max_bytes;            /* 0: nothing is kept */
    size_t bytes;                /* rows held now */
    int n_entries;
    enc_entry *head, *tail;
    uint64_t queries, hits, evictions; /* images looked up, found, dropped for room */
} enc_cache;

void enc_cache_init(enc_cache *c, size_t max_bytes);
void enc_cache_free(enc_cache *c);

/* The rows of the image with this hash (most recently used from now on), or
 * NULL; counts a query, and a hit when found. Valid until the next put. */
const enc_entry *enc_cache_get(enc_cache *c, uint64_t hash_lo, uint64_t hash_hi);

/* Keeps a copy of an image's rows, evicting the least recently used until
 * they fit; rows larger than the whole budget are not kept. -1 when out of
 * memory (nothing changes then but evictions already done). */
int enc_cache_put(enc_cache *c, uint64_t hash_lo, uint64_t hash_hi, const float *rows, int n_rows, int width);

#endif
