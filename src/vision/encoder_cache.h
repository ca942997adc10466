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
 * by the same hash (enc_row_key).
 */
#ifndef PDL_VISION_ENCODER_CACHE_H
#define PDL_VISION_ENCODER_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "pagedlm.h"

/* An image's identity here: the 128-bit hash of the bytes it was decoded
 * from (image.h), so the same bytes under another URL are the same image. */
typedef struct enc_key {
    uint64_t lo, hi;
} enc_key;

enc_key enc_key_of(const pdl_image *img);

/* What the prefix cache hashes for row k of the image with this key in
 * place of a token id: a negative int32 (token ids are not), different per
 * row and per image (vLLM's extra keys). */
int32_t enc_row_key(enc_key key, int k);

typedef struct enc_entry {
    enc_key key;
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
const enc_entry *enc_cache_get(enc_cache *c, enc_key key);

/* Keeps a copy of an image's rows, evicting the least recently used until
 * they fit; rows larger than the whole budget are not kept. -1 when out of
 * memory (nothing changes then but evictions already done). */
int enc_cache_put(enc_cache *c, enc_key key, const float *rows, int n_rows, int width);

#endif
