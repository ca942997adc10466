/*
 * runner.h - turning the scheduler's plan into one packed batch and one
 * forward: token ids, positions, cu_seqlens, slot mapping, block tables,
 * logits_indices and logits_cu_seqlens.
 *
 * The runner decides how a step runs; what runs is the scheduler's
 * (sched_output). Buffers grow with the largest step seen and are reused,
 * so a decode step allocates nothing.
 */
#ifndef PDL_ENGINE_RUNNER_H
#define PDL_ENGINE_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/scheduler.h"
#include "pagedlm.h"

typedef struct runner {
    pdl_context *ctx;          /* the engine's run state over its model (owned: runner_init makes it) */
    pdl_kv_cache *kv;
    bool full_logits;          /* measurement/fallback: every row through the head */
    int vocab;

    /* the packed batch (capacities in elements) */
    int32_t *token_ids, *positions, *slot_mapping; /* [rows] */
    int32_t *logits_indices;                       /* [rows] */
    const float **embd;                            /* [rows] image rows' input vectors (NULL: token rows) */
    int32_t *span_first, *span_last;               /* [rows] two-way spans (Gemma 3's images) */
    int32_t *rope_pos3;                            /* [rows][3] M-RoPE positions (Qwen2.5-VL's images) */
    int rows_cap;
    int32_t *cu_seqlens;                           /* [entries + 1] */
    int32_t *logits_cu_seqlens;                    /* [entries + 1]: output rows per entry */
    const int32_t **block_tables;                  /* [entries] */
    int entries_cap;
    pdl_batch batch;

    float *logits;                                 /* [n_logits][vocab] */
    size_t logits_cap;                             /* rows */
} runner;

int runner_init(runner *r, const pdl_model *model, pdl_kv_cache *kv, bool full_logits, pdl_error *err);
void runner_free(runner *r);

/*
 * Which rows of an entry need logits: the last row when the entry completes
 * everything known of its sequence (then the next token is sampled); every
 * row of a decode with speculative drafts (its last token and each draft:
 * k + 1 rows to verify k drafts); and, for a sequence that asked for prompt
 * logprobs, every row r whose next prompt token (r + 1 < n_prompt) still
 * has its logprobs due. Writes the rows (absolute positions, ascending) to
 * rows_out and returns their count.
 */
int runner_logits_rows(const sched_entry *e, int32_t *rows_out);

/* Packs the plan into r->batch (runner_pack) and runs the forward. Logits
 * of entry k are rows logits_cu_seqlens[k] .. logits_cu_seqlens[k+1] of
 * r->logits, in the order runner_logits_rows gives. */
int runner_pack(runner *r, const sched_output *plan, pdl_error *err);
int runner_execute(runner *r, const sched_output *plan, pdl_error *err);

#endif
