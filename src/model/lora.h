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

/* One module's low-rank pair: A (rank, in) then B (out, rank), row-major F32. */
typedef struct lora_pair {
    const float *a, *b; /* NULL: the module is not changed */
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

/* y[r * ldy + o] += s * sum_k B[o][k] (sum_i A[k][i] x[r * ldx + i]) for
 * every row r of a sequence whose adapter changes module m of layer l,
 * s = the adapter's scale times the sequence's lora_scale. Rows split over
 * the pool's threads; each row's sums in one fixed order (lora_dot), so
 * the result is the same whatever the batch. */
void lora_apply(pdl_threadpool *pool, const pdl_batch *b, int layer, lora_module m, const float *x, int64_t ldx,
                float *y, int64_t ldy);

/* The fixed-order dot product the deltas use: 16 partial sums over
 * i mod 16, then the tail, then a fixed pairwise tree (written so that
 * compilers vectorise it without reordering: the same bits at any width). */
float lora_dot(const float *a, const float *b, int n);

#endif
