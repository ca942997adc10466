/*
 * tok_hash.h - the two lookup tables behind the tokenizer.
 *
 * What it is for: piece text -> token id (vocabulary lookups during encode,
 * byte-token lookups, tok_piece_to_id) and (left id, right id) -> merge
 * (rank and result id, for tokenizer.json BPE merges). Both are open
 * addressing with linear probing in a single allocation, sized once when the
 * tokenizer is loaded and read-only afterwards (safe to share across threads).
 * What it is not for: general-purpose maps; there is no delete and no growth.
 */
#ifndef PDL_TOKENIZER_TOK_HASH_H
#define PDL_TOKENIZER_TOK_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Keys are byte strings stored elsewhere (the tokenizer's piece pool); the
 * map keeps only their offsets and lengths. */
typedef struct tok_strmap_slot {
    uint32_t hash;  /* low 32 bits of the key's hash */
    int32_t id;     /* -1: empty slot */
} tok_strmap_slot;

typedef struct tok_strmap {
    tok_strmap_slot *slots;  /* [mask + 1] */
    uint32_t mask;
    const char *pool;        /* piece bytes, indexed by off[id] */
    const uint32_t *off;     /* [n_vocab] */
    const uint32_t *len;     /* [n_vocab] */
} tok_strmap;

uint64_t tok_hash_bytes(const void *data, size_t len);

/* Sizes the table for n keys. Returns false when out of memory. */
bool tok_strmap_init(tok_strmap *m, size_t n, const char *pool, const uint32_t *off,
                     const uint32_t *len);
void tok_strmap_free(tok_strmap *m);
/* Maps the text of id (pool[off[id]], len[id]) to id. When another id had
 * the same text, it is replaced (the last one wins, as in llama.cpp) and
 * returned; otherwise returns -1. */
int32_t tok_strmap_insert(tok_strmap *m, int32_t id);
/* The id whose piece is exactly s[0..n), or -1. */
int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t n);

typedef struct tok_pair_slot {
    int32_t left, right;  /* left == -1: empty slot */
    int32_t rank;         /* merge priority, lower merges first */
    int32_t result;       /* id of the merged piece */
} tok_pair_slot;

typedef struct tok_pairmap {
    tok_pair_slot *slots;  /* [mask + 1], or NULL when there are no merges */
    uint32_t mask;
} tok_pairmap;

bool tok_pairmap_init(tok_pairmap *m, size_t n);
void tok_pairmap_free(tok_pairmap *m);
/* Returns false when (left, right) was already present; its rank and result
 * are then replaced (the last one wins, as in Hugging Face's merge map). */
bool tok_pairmap_insert(tok_pairmap *m, int32_t left, int32_t right, int32_t rank,
                        int32_t result);
const tok_pair_slot *tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right);

#endif
