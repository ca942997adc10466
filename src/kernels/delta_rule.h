/*
 * delta_rule.h - the gated delta rule of a Gated DeltaNet layer (Qwen3.5,
 * Qwen3-Next) over one sequence's rows for one value head, in a form whose
 * every output depends only on absolute positions.
 *
 * Per value head the state is a (k_dim, v_dim) matrix S. The recurrence
 * (transformers' torch_recurrent_gated_delta_rule) is, per row t with an
 * l2-normalised key k, a query q (l2-normalised, times 1/sqrt(k_dim)), a
 * value v, beta in (0, 1) and a log decay g <= 0:
 *     S <- exp(g) S;  delta = beta (v - S^T k);  S <- S + k delta^T;  o = S^T q.
 * Here S is kept only at multiples of PDL_STATE_CHUNK positions (the
 * chunk's start B); a row at position p = B + i is computed from S_B and
 * the chunk's earlier rows (their keys k_j, updates delta_j and cumulative
 * log decays G_j = g_B + ... + g_j):
 *     delta_i = beta_i (v_i - exp(G_i) S_B^T k_i - sum_{j<i} exp(G_i - G_j) (k_i . k_j) delta_j)
 *     o_i     = exp(G_i) S_B^T q_i + sum_{j<=i} exp(G_i - G_j) (q_i . k_j) delta_j
 * (the same numbers as the recurrence, unrolled), and when the chunk's
 * last position is computed S moves to the next boundary:
 *     S_{B+C} = exp(G_{C-1}) S_B + sum_j exp(G_{C-1} - G_j) k_j delta_j^T
 * (a rank-C update: one matrix product). Each sum runs in one fixed order,
 * the same whether the row is one of a 512-row prefill chunk, a decode
 * step or a recomputation after preemption: the bytes of a sequence's
 * outputs never depend on how its rows were batched. Rows taken back
 * (rejected drafts) need no undo unless they closed a chunk: the chunk's
 * rows are kept by position, and the next segment overwrites them.
 *
 * Not for the projections, the convolution or the gated norm around it
 * (model/deltanet.c), nor for where the state lives (model/kv_cache.h).
 * Kernel families: delta_rule_body.h compiled per instruction set (the
 * compiler vectorises its loops over v_dim); a family's results differ from
 * the portable one's by rounding only (fused multiply-adds), never between
 * two runs of one family.
 */
#ifndef PDL_KERNELS_DELTA_RULE_H
#define PDL_KERNELS_DELTA_RULE_H

#include <stddef.h>

#include "kernels/cpu_features.h"

typedef struct delta_rule_seg {
    int k_dim, v_dim;
    int chunk;                 /* PDL_STATE_CHUNK */
    float *S;                  /* [k_dim][v_dim]: the state at the chunk boundary at or before first_pos */
    /* the chunk's rows by index in the chunk (position % chunk); rows before
     * first_pos are read from here, and every row's delta and decay are
     * written here (keys are written by the caller once all heads are done:
     * value heads share them) */
    const float *chunk_keys;   /* + i * keys_stride: k_dim floats */
    size_t keys_stride;
    float *chunk_delta;        /* + i * delta_stride: v_dim floats */
    size_t delta_stride;
    float *chunk_decay;        /* + i * decay_stride: one float, G_i */
    size_t decay_stride;
    /* the segment: n rows at positions first_pos .. first_pos + n - 1 */
    int first_pos, n;
    const float *q, *k, *v;    /* row r at + r * qkv_stride (k_dim, k_dim, v_dim floats) */
    size_t qkv_stride;
    const float *beta, *g;     /* row r at + r * gate_stride */
    size_t gate_stride;
    float *o;                  /* row r at + r * o_stride: v_dim floats out */
    size_t o_stride;
    float *scratch;            /* delta_rule_scratch_floats, the caller's (one per thread) */
} delta_rule_seg;

typedef void (*delta_rule_fn)(const delta_rule_seg *s);

/* The family's kernel (portable when the family has none). */
delta_rule_fn delta_rule_for(pdl_isa isa);

/* Scratch floats delta_rule_seg.scratch needs. */
static inline size_t delta_rule_scratch_floats(int chunk, int v_dim) {
    return 3 * (size_t)chunk + 2 * (size_t)chunk * (size_t)v_dim;
}

void delta_rule_portable(const delta_rule_seg *s);
void delta_rule_avx2(const delta_rule_seg *s);
void delta_rule_avx512(const delta_rule_seg *s);
void delta_rule_neon(const delta_rule_seg *s);

#endif
