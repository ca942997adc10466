/*
 * lora.h - a loaded LoRA adapter as the forward reads it: for each layer
 * and each linear module it changes, A (rank, in) and B (out, rank) in F32
 * and one scale, so that the module's output gains scale * B (A x).
 *
 * lora.c loads it (PEFT folders, llama.cpp LoRA GGUF files) and applies
 * it to a batch's rows, sequence by sequence (Punica's / S-LoRA's segmented
 * delta): the base matmul runs once over every row, each row of a sequence
 * with an adapter then gets its delta, computed in a fixed order per row,
 * so that a row's result never depends on the other rows of the batch.
 * Not for merging adapters into weights.
 */
#ifndef PDL_MODEL_LORA_H
#define PDL_MODEL_LORA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu_features.h"
#include "kernels/threadpool.h"
#include "model/model.h"
#include "pagedlm.h"

/* The linear modules an adapter may change, in pdl_layer_weights' terms. */
typedef enum lora_module {
    LORA_Q = 0, /* wq */
    LORA_K,     /* wk */
    LORA_V,     /* wv */
    LORA_O,     /* wo */
    LORA_GATE,  /* w_gate */
    LORA_UP,    /* w_up */
    LORA_DOWN,  /* w_down */
    LORA_N_MODULES
} lora_module;

/* One module's low-rank pair: A (rank, in) and B transposed, (rank, out),
 * row-major F32 (B^T so that the second product runs along contiguous
 * outputs). */
typedef struct lora_pair {
    const float *a, *bt; /* NULL: the module is not changed */
    int in, out;
} lora_pair;

struct pdl_lora {
    atomic_int refs;
    const pdl_model *model;
    int rank;
    float alpha;
    float scale;             /* alpha / rank, or alpha / sqrt(rank) (rsLoRA) */
    int n_layers;
    lora_pair *pairs;        /* [n_layers][LORA_N_MODULES] */
    unsigned module_mask;    /* bit m: some layer has module m */
    int n_pairs;
    uint64_t key[2];         /* hash of rank, scale and every pair (pdl_lora_info.key) */
    float *data;             /* every A and B, one allocation */
};

/* The pair of module m in layer l, or NULL when the adapter leaves it. */
static inline const lora_pair *lora_pair_at(const pdl_lora *lora, int layer, lora_module m) {
    if (!lora || layer >= lora->n_layers) return NULL;
    const lora_pair *p = &lora->pairs[(size_t)layer * LORA_N_MODULES + m];
    return p->a ? p : NULL;
}

/* Whether some sequence of batch b has an adapter changing module m of
 * layer l. */
bool lora_batch_touches(const pdl_batch *b, int layer, lora_module m);

/* One module's delta of lora_apply: input rows x (ldx apart), output rows
 * y (ldy apart). */
typedef struct lora_job {
    lora_module m;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
} lora_job;

/* For each job: y[r * ldy + o] += sum_k (s t_k) B[o][k], t_k = sum_i A[k][i]
 * x[r * ldx + i] (lora_row_body.h), k ascending, for every row r of a sequence
 * whose adapter changes module m of layer l, s = the adapter's scale times
 * the sequence's lora_scale. One parallel region for all the jobs, rows
 * split over the threads; a row's sums depend on nothing but the row, so
 * the result is the same whatever the batch. */
void lora_apply(pdl_threadpool *pool, pdl_isa isa, const pdl_batch *b, int layer, const lora_job *jobs, int n_jobs);

/* One row's delta: y[o] += sum_k (scale t_k) B[o][k] (lora_row_body.h),
 * one build per instruction set, the same bits from each. */
typedef void (*lora_row_fn)(const lora_pair *pr, int rank, float scale, const float *x, float *y);
void lora_row_portable(const lora_pair *pr, int rank, float scale, const float *x, float *y);
void lora_row_avx2(const lora_pair *pr, int rank, float scale, const float *x, float *y);
void lora_row_avx512(const lora_pair *pr, int rank, float scale, const float *x, float *y);
/* The build for family isa (the portable one for a family without its own:
 * aarch64's NEON is its baseline, which the portable build vectorises for). */
lora_row_fn lora_row_for(pdl_isa isa);

#endif
