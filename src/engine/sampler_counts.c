/*
 * sampler_counts.c - the token -> occurrence table behind the penalties
 * (see sampler_counts.h).
 */
#include "engine/sampler_counts.h"

#include <stdlib.h>

static size_t slot_of(const pdl_token_counts *c, int32_t token) {
    /* Fibonacci hashing: the top bits of token * 2^32/phi */
    return (size_t)(((uint32_t)token * 2654435769u) >> c->shift);
}

static int rehash(pdl_token_counts *c, size_t cap) {
    pdl_token_count *slots = malloc(cap * sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < cap; i++) slots[i] = (pdl_token_count){.token = -1};
    pdl_token_counts old = *c;
    unsigned log2 = 0;
    while (((size_t)1 << log2) < cap) log2++;
    c->slots = slots;
    c->cap = cap;
    c->shift = 32 - log2;
    for (size_t i = 0; i < old.cap; i++) {
        if (old.slots[i].token < 0) continue;
        size_t j = slot_of(c, old.slots[i].token);
        while (slots[j].token >= 0) j = (j + 1) & (cap - 1);
        slots[j] = old.slots[i];
    }
    free(old.slots);
    return 0;
}

int token_counts_init(pdl_token_counts *c, size_t cap) {
    *c = (pdl_token_counts){0};
    return rehash(c, cap);
}

void token_counts_free(pdl_token_counts *c) {
    free(c->slots);
    *c = (pdl_token_counts){0};
}

pdl_token_count *token_counts_get(pdl_token_counts *c, int32_t token) {
    if (c->cap) {
        size_t j = slot_of(c, token);
        while (c->slots[j].token >= 0) {
            if (c->slots[j].token == token) return &c->slots[j];
            j = (j + 1) & (c->cap - 1);
        }
    }
    /* new token: keep the table at most half full; when growing fails, go on
     * filling it while one slot stays empty to end the probes */
    if ((c->used + 1) * 2 > c->cap && rehash(c, c->cap ? c->cap * 2 : 64) != 0 && c->used + 2 > c->cap) return NULL;
    size_t j = slot_of(c, token);
    while (c->slots[j].token >= 0) j = (j + 1) & (c->cap - 1);
    c->slots[j] = (pdl_token_count){.token = token};
    c->used++;
    return &c->slots[j];
}
