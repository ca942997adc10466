/*
 * context.h - the run state of forwards over one loaded model (calm's
 * RunState, llama.cpp's llama_context): the worker threads, the forward's
 * scratch and the counters a forward writes.
 *
 * The model (model.h) is immutable once loaded; everything a forward
 * writes lives here, so two contexts over one model run forwards on two
 * threads at once. One context runs one forward at a time. Not for
 * weights or hyperparameters (model.h), nor for K/V (kv_cache.h: the
 * caller's, per engine or per sequence).
 */
#ifndef PDL_MODEL_CONTEXT_H
#define PDL_MODEL_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/cpu_ops.h"
#include "kernels/delta_rule.h"
#include "kernels/matmul_table.h"
#include "kernels/scratch.h"
#include "kernels/threadpool.h"
#include "model/model.h"

/* Scratch buffers of the forward, grown on demand (never per token). */
typedef struct pdl_forward_scratch {
    size_t rows_cap;   /* rows the buffers below hold */
    size_t logits_cap; /* rows `normed_out` holds */
    float *x;          /* (rows, hidden) residual stream */
    float *xn;         /* (rows, hidden) normed input of a block */
    float *q;          /* (rows, n_heads * head_dim) */
    float *k;          /* (rows, n_kv * head_dim) */
    float *v;          /* (rows, n_kv * head_dim) */
    float *attn;       /* (rows, n_heads * head_dim) attention output */
    float *branch;     /* (rows, hidden) a block's output before a scaled / normed add */
    float *gate;       /* (rows, ffn) */
    float *up;         /* (rows, ffn) */
    float *scores;     /* (n_threads, ctx) attention probabilities per worker */
    size_t scores_cap; /* floats per worker in `scores` */
    int attn_max_q;    /* queries per attention call in this forward (attn_max_queries) */
    float *normed_out; /* (n_logits, hidden) rows gathered for the head */
    size_t full_cap;   /* rows the two full-logits buffers hold */
    float *full_normed;/* (rows, hidden) full-logits path only */
    float *full_logits;/* (rows, vocab) full-logits path only: what selective avoids */
    float *rope_cs;    /* (rows, rope_dim) each row's RoPE cosines then sines */
    float *rope_cs_local; /* (rows, rope_dim) the same for windowed layers' base (Gemma 3) */
    float *mtp_in;     /* (rows, 2 * hidden) the MTP block's normed [embedding, hidden] (cfg.mtp_loaded) */
    /* mixture of experts (moe.c), for moe_rows_cap rows: */
    size_t moe_rows_cap;
    float *router;      /* (rows, n_experts) router logits */
    int32_t *sel;       /* (rows, k) each row's experts, in rank order (best first) */
    float *sel_w;       /* (rows, k) their weights */
    int32_t *exp_start; /* (n_experts + 1) where expert e's assignments begin in exp_rows */
    int32_t *exp_rows;  /* (rows * k) assignments row * k + rank, grouped by expert, rows ascending */
    int32_t *out_at;    /* (rows * k) assignment row * k + rank -> its row in `ye` */
    float *xe;          /* (rows * k, hidden) gathered input rows: one expert's, or every assignment's (grouped) */
    float *he, *ue;     /* (rows * k, ffn_expert) gate (then activation) and up, likewise */
    float *ye;          /* (rows * k, hidden) every expert output, in exp_rows order */
    /* gated attention (cfg.attn_out_gate) and Gated DeltaNet layers
     * (deltanet.c), for hybrid_rows_cap rows: */
    size_t hybrid_rows_cap;
    float *qg;          /* (rows, 2 * n_heads * head_dim) q_proj's output: per head its query, then its gate */
    float *attn_gate;   /* (rows, n_heads * head_dim) the gates */
    float *lin_mix;     /* (rows, conv_dim) q, k, v before the convolution */
    float *lin_qkv;     /* (rows, conv_dim) after it (SiLU; q and k l2-normalised, q scaled) */
    float *lin_z;       /* (rows, v_heads * v_dim) the output gate */
    float *lin_beta;    /* (rows, v_heads) b, then beta = sigmoid(b) */
    float *lin_g;       /* (rows, v_heads) a, then the log decay g */
    float *lin_o;       /* (rows, v_heads * v_dim) the delta rule's output, then normed and gated */
    float *lin_rule;    /* (n_threads, delta_rule_scratch_floats) */
    float *lin_ones;    /* (max(conv_dim, v_heads * v_dim)) ones: SiLU through the gate table's silu(g) * up */
    /* what the matmuls take for the activations they prepare (scratch.h),
     * reserved when the row capacities above grow */
    pdl_scratch kernel;
} pdl_forward_scratch;

struct pdl_context {
    const pdl_model *model;   /* read only; outlives the context */
    pdl_threadpool *pool;     /* the forward's workers (the calling thread is worker 0) */
    pdl_attention_table attention; /* the attention kernels, of the family in effect when the context was made */
    pdl_gate_table gates;          /* the MLP gates, likewise */
    pdl_kernels kernels;           /* the matmul and weight panel kernels, likewise */
    delta_rule_fn delta_rule;      /* Gated DeltaNet's recurrence (hybrid models), likewise */
    pdl_forward_scratch scratch;
    uint64_t moe_expert_runs; /* expert MLPs run (one per expert with rows, per layer and step): a
                               * prefill reads each chosen expert once, a decode step only k */
    /* A hybrid model's recurrent state is not here but in the caller's
     * pdl_kv_cache (state slots, kv_cache.h): it belongs to sequences,
     * which outlive a forward and move between engines' steps like K/V. */
};

/* A matmul of the forward (layer, or -1 for the head) could not have its
 * scratch: the error to return (the forward then reports no logits). */
int fwd_kernel_failed(const pdl_context *ctx, int layer, const char *what, pdl_error *err);

/* The MLP of a mixture-of-experts layer over rows [0, n) of xn (hidden
 * wide): router, top-k, each chosen expert once over its gathered rows,
 * the shared expert; out (n, hidden) = the k outputs summed in rank order
 * (moe.c). */
int moe_ffn(pdl_context *ctx, const pdl_layer_weights *lw, const float *xn, int n, float *out, pdl_error *err);

/* The selective-logits probe (pdl_model_probe_selective_logits) on ctx:
 * pdl_model_load runs it on its load-time context and keeps the verdict. */
int probe_run(pdl_context *ctx, bool *ok, char *reason, size_t reason_len, pdl_error *err);

/* A Gated DeltaNet layer (deltanet.c) over the batch's rows of xn (hidden
 * wide): projections, causal convolution, the delta rule on each
 * sequence's state slot, gated norm, output projection into out (added to
 * it when accumulate). */
int deltanet_layer(pdl_context *ctx, pdl_kv_cache *kv, const pdl_batch *b, int layer, const float *xn, float *out,
                   bool accumulate, pdl_error *err);

/* Grows the gated-attention and Gated DeltaNet scratch to `rows` rows
 * (nothing for other models); frees it. */
int hybrid_scratch_reserve(pdl_context *ctx, size_t rows, pdl_error *err);
void hybrid_scratch_free(pdl_forward_scratch *s);

/* The final hidden states of the last pdl_forward on ctx, before the
 * final norm: (n_tokens, hidden), batch rows in order; valid until the
 * next forward on ctx. */
const float *model_forward_hidden(const pdl_context *ctx);
/* n such rows (hidden wide) through the model's final norm, as the head
 * sees them: the hidden states embeddings pool. */
void model_final_norm_rows(const pdl_model *m, const float *x, int n, float *out);

/* The MTP block (cfg.mtp_loaded) over a packed batch whose row at position
 * p holds token t[p + 1] and, in hidden_in (n_tokens, hidden), the hidden
 * state at p: the main stack's (hidden_final_norm: as model_forward_hidden
 * gives it, before the final norm, which is applied here as vLLM feeds its
 * MTP drafters the normed output) or the MTP block's own hidden_out of
 * position p - 1. Its K/V go to the cache's last layer (kv_cache_create
 * with_mtp). For the batch's logits rows: hidden_out (n_logits, hidden,
 * after the block's final norm; may be NULL) and logits_out (n_logits,
 * vocab: the distribution of t[p + 2]; may be NULL). */
int model_forward_mtp(pdl_context *ctx, pdl_kv_cache *kv, const pdl_batch *b, const float *hidden_in,
                      bool hidden_final_norm, float *hidden_out, float *logits_out, pdl_error *err);

/* The LM head over n normed rows (hidden wide), as the forward's head:
 * logits_out (n, vocab). */
int model_head_rows(pdl_context *ctx, const float *normed, int n, float *logits_out, pdl_error *err);

/* Frees the MoE scratch (pdl_context_free). */
void moe_scratch_free(pdl_forward_scratch *s);

#endif
