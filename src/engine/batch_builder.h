/*
 * batch_builder.h - packing a pdl_batch one segment (one sequence's new
 * rows) at a time: token ids, positions, slot mapping from the segment's
 * block table, cu_seqlens, logits rows, and the optional row inputs of
 * image rows (input vectors, two-way spans, M-RoPE positions), and a
 * hybrid model's recurrent state slot and a LoRA adapter per segment.
 *
 * The one packer of the engine: the runner packs a step's plan with it and
 * the draft model its proposal steps; a single sequence over its own KV
 * (sequence.c) fits it as one segment. Buffers grow with the largest batch
 * seen and are reused, so packing a decode step allocates nothing.
 *
 * What it is not for: deciding which rows run or which need logits (the
 * scheduler and runner_logits_rows); it checks no limits of the model
 * (pdl_forward's validate_batch does).
 */
#ifndef PDL_ENGINE_BATCH_BUILDER_H
#define PDL_ENGINE_BATCH_BUILDER_H

#include <stdbool.h>
#include <stdint.h>

#include "pagedlm.h"

/* One sequence's rows: positions [start, start + n). */
typedef struct bb_segment {
    const int32_t *block_table; /* the sequence's blocks (position p: block_table[p / block_size]) */
    int start, n;
    /* row i's token: tokens[i] for i < n_known, else draft[i - n_known]
     * (speculative drafts past the sequence's known tokens) */
    const int32_t *tokens;      /* [n_known] */
    int n_known;
    const int32_t *draft;       /* [n - n_known], or NULL when n_known == n */
    /* rows that need logits: absolute positions, ascending, in [start, start + n)
     * (may point at the builder's logits_pos + n_logits, where they go) */
    const int32_t *logits_pos;  /* [n_logits] */
    int n_logits;
    /* Row inputs of the first n_inputs rows (image prompts); each array is
     * NULL or [n_inputs] (rope_pos3: [n_inputs][3]). The rows after them,
     * and rows whose array is NULL, get the defaults: the token's
     * embedding, a span of their own position, M-RoPE positions of
     * (position + rope_delta) in all three. */
    int n_inputs;
    const float *const *embd;
    const int32_t *span_first, *span_last;
    const int32_t *rope_pos3;
    bool mrope;                 /* the sequence turns by M-RoPE positions: the batch carries them (every
                                   row's, given or defaulted), also when rope_pos3 is NULL here (decodes) */
    int32_t rope_delta;
    /* a hybrid model's sequence: its recurrent state slot (pdl_batch's
     * state_slots; the slot holds the state after positions [0, start)) */
    bool recurrent;
    int32_t state_slot;
    /* the sequence's LoRA adapter (NULL: none) and its multiplier */
    const pdl_lora *lora;
    float lora_scale;
} bb_segment;

typedef struct batch_builder {
    int block_size;
    /* rows (capacity rows_cap) */
    int32_t *token_ids, *positions, *slot_mapping;  /* [rows] */
    const float **embd;                             /* [rows] input vectors (NULL: token rows) */
    int32_t *span_first, *span_last;                /* [rows] two-way spans */
    int32_t *rope_pos3;                             /* [rows][3] M-RoPE positions */
    int32_t *logits_indices;                        /* [rows] batch row of each logits row */
    int32_t *logits_pos;                            /* [rows] sequence position of each logits row */
    int rows_cap;
    /* segments (capacity seqs_cap) */
    int32_t *cu_seqlens;                            /* [seqs + 1] */
    int32_t *logits_cu_seqlens;                     /* [seqs + 1] logits rows per segment */
    const int32_t **block_tables;                   /* [seqs] */
    int32_t *state_slots;                           /* [seqs] recurrent state slots (-1: a segment without) */
    const pdl_lora **lora;                          /* [seqs] LoRA adapters (NULL: none) */
    float *lora_scale;                              /* [seqs] their multipliers */
    int seqs_cap;
    /* the batch being built */
    int n_rows, n_seqs, n_logits;
    int max_rows, max_seqs;                         /* what bb_begin was told */
    bool any_embd, any_span, any_pos3, any_state, any_lora;
    pdl_batch batch;
} batch_builder;

void bb_init(batch_builder *b, int block_size);
void bb_free(batch_builder *b);

/* Starts a batch of at most max_rows rows in max_seqs segments (buffers
 * grown to fit). */
int bb_begin(batch_builder *b, int max_rows, int max_seqs, pdl_error *err);

/* Appends a segment; -1 (err set) past what bb_begin was told, or with
 * logits rows outside the segment. */
int bb_add(batch_builder *b, const bb_segment *seg, pdl_error *err);

/* The batch (valid until the next bb_begin): the row inputs only where a
 * segment gave them. */
const pdl_batch *bb_finish(batch_builder *b, bool full_logits);

#endif
