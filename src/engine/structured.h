/*
 * structured.h - structured output inside the engine: one grammar matcher
 * per sequence, and the masked copy of each row it samples from (also the
 * rows a thinking block's budget forces, engine_step.c).
 *
 * The forward and the rest of the batch never see a grammar: only the rows
 * a sequence samples (its decode row, its completing prefill row, the k + 1
 * rows of a verification) are copied and masked, so a constrained request
 * costs the others nothing and its own logits rows are those of an
 * unconstrained one. The sampler then runs on the masked row with every
 * parameter as usual, and logprobs are computed from it (they are
 * log-probabilities after masking).
 */
#ifndef PDL_ENGINE_STRUCTURED_H
#define PDL_ENGINE_STRUCTURED_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "pagedlm.h"

/* The engine's scratch for masked rows: one per row of a verification. */
typedef struct so_rows {
    float *rows;     /* [PDL_MAX_SPEC_TOKENS + 1][vocab], allocated on first use */
    uint64_t *bits;  /* [mask words] */
    int vocab;
} so_rows;

void so_rows_free(so_rows *s);

/* The tokens m allows next applied to a copy of row, in scratch slot `slot`
 * (0 .. PDL_MAX_SPEC_TOKENS), with token `also` allowed too when >= 0 (a
 * thinking block's start, beside the answer's first tokens). NULL (with
 * err) when out of memory, or when no token may follow: the grammar cannot
 * be continued with this vocabulary. */
const float *so_masked_row(so_rows *s, gram_matcher *m, const float *row, int slot, int32_t also, pdl_error *err);
/* A copy of row (vocab logits) in slot where only tok may be drawn (only),
 * or where tok may not (!only): a thinking budget's forced end, or a start
 * it bans. NULL (with err) when out of memory. */
const float *so_forced_row(so_rows *s, int vocab, const float *row, int32_t tok, bool only, int slot,
                           pdl_error *err);

#endif
