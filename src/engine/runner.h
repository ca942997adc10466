/*
 * runner.h - turning the scheduler's plan into one packed batch and one
 * forward: token ids, positions, cu_seqlens, slot mapping, block tables,
 * logits_indices and logits_cu_seqlens, and a hybrid model's state slot of
 * each sequence (the scheduler gives every running sequence one).
 *
 * The runner decides how a step runs; what runs is the scheduler's
 * (sched_output). Buffers grow with the largest step seen and are reused,
 * so a decode step allocates nothing.
 */
#ifndef PDL_ENGINE_RUNNER_H
#define PDL_ENGINE_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/batch_builder.h"
#include "engine/scheduler.h"
#include "pagedlm.h"

typedef struct runner {
    pdl_context *ctx;          /* the engine's run state over its model (owned: runner_init makes it) */
    pdl_kv_cache *kv;
    bool full_logits;          /* measurement/fallback: every row through the head */
    int vocab;

    batch_builder bb;          /* the packed batch: one segment per plan entry, in plan order; its
                                  logits_cu_seqlens[k] .. [k + 1] are entry k's logits rows */
    pdl_batch batch;           /* what the last runner_pack built */

    float *logits;             /* [n_logits][vocab] */
    size_t logits_cap;         /* rows */
} runner;

int runner_init(runner *r, const pdl_model *model, pdl_kv_cache *kv, bool full_logits, pdl_error *err);
void runner_free(runner *r);

/*
 * Which rows of an entry need logits: the last row when the entry completes
 * everything known of its sequence (then the next token is sampled); every
 * row of a decode with speculative drafts (e->verifies_drafts: its last
 * token and each draft, k + 1 rows to verify k drafts); and, for a sequence
 * that asked for prompt logprobs, every row r whose next prompt token
 * (r + 1 < n_prompt) still has its logprobs due. Writes the rows (absolute
 * positions, ascending; at most e->n_new) to rows_out and returns their
 * count.
 */
int runner_logits_rows(const sched_entry *e, int32_t *rows_out);

/* Packs the plan into r->batch (runner_pack) and runs the forward. Entry
 * k's logits rows, in the order runner_logits_rows gives, are what
 * runner_entry_rows answers. */
int runner_pack(runner *r, const sched_output *plan, pdl_error *err);
int runner_execute(runner *r, const sched_output *plan, pdl_error *err);

/* The logits rows of one entry of the last step: n rows, each the
 * distribution of the token after positions[j] in the entry's sequence. */
typedef struct runner_rows {
    const float *logits;        /* [n][vocab] */
    const int32_t *positions;   /* [n] ascending */
    int n;
} runner_rows;

/* Entry k's rows of the plan runner_execute last ran (valid until the
 * next step). */
runner_rows runner_entry_rows(const runner *r, int k);

#endif
