/*
 * sampler_counts.h - how often each token occurred in one request, for the
 * repetition, presence and frequency penalties.
 *
 * A request sees a few thousand distinct tokens out of a vocabulary of ~150k,
 * so this is a small open-addressing table (linear probing, power-of-two
 * capacity, at most half full) rather than a dense array per request.
 * Entries are never removed. Not for: anything needing order; iterate the
 * slots and skip the empty ones.
 */
#ifndef PDL_ENGINE_SAMPLER_COUNTS_H
#define PDL_ENGINE_SAMPLER_COUNTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pdl_token_count {
    int32_t token;      /* -1 = empty slot */
    uint32_t generated; /* occurrences among the generated tokens */
    bool in_prompt;     /* occurs in the prompt */
} pdl_token_count;

typedef struct pdl_token_counts {
    pdl_token_count *slots; /* [cap] */
    size_t cap;             /* a power of two, or 0 before the first entry */
    size_t used;            /* occupied slots */
    unsigned shift;         /* 32 - log2(cap): the hash keeps the top bits */
} pdl_token_counts;

/* Reserves room for about cap/2 tokens (cap a power of two >= 2); -1 when
 * out of memory. A zeroed table is valid too and allocates on first use. */
int token_counts_init(pdl_token_counts *c, size_t cap);
void token_counts_free(pdl_token_counts *c);

/* The entry of token (>= 0), added with zero counts when new. NULL only when
 * the table is full and cannot grow (out of memory). */
pdl_token_count *token_counts_get(pdl_token_counts *c, int32_t token);

#endif
