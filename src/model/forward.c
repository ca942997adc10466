/*
 * forward.c - one forward pass of a Llama-family decoder over a packed batch.
 *
 * Rows of several sequences are processed together: every matmul sees all
 * rows at once; attention reads each row's own sequence from the paged KV
 * cache. The final norm and LM head run only on batch->logits_indices.
 * Architecture differences (QKV bias, q/k norm, RoPE layout, window, norm
 * kind, where a block's norms sit, multipliers, soft-caps, attention sinks,
 * activation, experts, gated attention) are read from pdl_model_config; there is one
 * code path for all of them (a mixture-of-experts MLP is moe.c's, a hybrid
 * model's Gated DeltaNet layers deltanet.c's, in the same block). The MTP
 * block (model_forward_mtp) runs its one layer through the same code.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model/kv_cache.h"
#include "kernels/attention.h"
#include "kernels/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/matmul.h"
#include "model/context.h"
#include "model/lora.h"
#include "model/model.h"
#include "util/error.h"

/* ---- scratch ------------------------------------------------------------ */

/* A scratch buffer of n floats on a cache line (scratch_grow: a heap
 * address 16 mod 64 made the AVX2 BF16 matmul 13% slower). The old
 * contents are not kept: scratch is filled after it is reserved. */
static int grow(float **buf, size_t n) {
    void *p = *buf;
    size_t cap = 0; /* the callers track what each buffer holds */
    if (!scratch_grow(&p, &cap, n * sizeof **buf)) return -1;
    *buf = p;
    return 0;
}

/* Queries per attention call for keys spanning `span` positions: up to 16
 * (each group of keys is loaded once for all of them; measured: 32 is no
 * faster, 64 much slower as their scores leave L2), fewer when their scores
 * (queries x span floats per worker) would pass 4 MiB. In the BF16 order up
 * to 64: its tiles turn the keys and values they read into BF16 pairs once
 * per call (pp512 at depth 4096: 64 measured 1.15x 16, 32 1.08x); in the
 * AMX order up to 128 (ATTN_MAX_QUERIES_PER_CALL; the kernel alone at 4,096
 * keys: 1.1x faster per query-key than 64). */
static int attn_max_queries(int span, pdl_attn_order order) {
    int most = order == PDL_ATTN_AMX ? ATTN_MAX_QUERIES_PER_CALL : order == PDL_ATTN_BF16 ? 64 : 16;
    int q = (1 << 20) / (span > 0 ? span : 1);
    return q < 1 ? 1 : q > most ? most : q;
}

/* The kernels' scratch the matmuls of a layer take for `rows` rows, the
 * largest over every layer (a file may mix dtypes across layers); the
 * experts' are moe.c's, the head's are reserved with the logits rows. */
static size_t layer_matmul_scratch(const pdl_context *ctx, size_t rows) {
    const pdl_model *m = ctx->model;
    size_t most = m->w.mtp_fc.data ? matmul_scratch_bytes(&ctx->kernels, ctx->pool, &m->w.mtp_fc, (int64_t)rows) : 0;
    for (int l = 0; l < model_weight_layers(&m->cfg); l++) {
        const pdl_layer_weights *lw = &m->w.layers[l];
        const pdl_tensor *ws[] = {&lw->wq,    &lw->wk,  &lw->wv,  &lw->wo,    &lw->w_gate, &lw->w_up,  &lw->w_down,
                                  &lw->lin_qkv, &lw->lin_z, &lw->lin_b, &lw->lin_a, &lw->lin_out};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
            if (!ws[i]->data) continue; /* no dense MLP in a MoE layer */
            size_t b = matmul_scratch_bytes(&ctx->kernels, ctx->pool, ws[i], (int64_t)rows);
            most = b > most ? b : most;
        }
    }
    return most;
}

int fwd_kernel_failed(const pdl_context *ctx, int layer, const char *what, pdl_error *err) {
    if (ctx->scratch.kernel.failed == 0) /* matmul_run: no kernel for the weights' dtype */
        return layer < 0 ? err_fail(err, "forward: %s: no kernel multiplies its weights' dtype", what)
                         : err_fail(err, "forward: layer %d: %s: no kernel multiplies its weights' dtype", layer, what);
    if (layer < 0)
        return err_fail(err, "forward: %s: out of memory for %zu bytes of kernel scratch", what, ctx->scratch.kernel.failed);
    return err_fail(err, "forward: layer %d: %s: out of memory for %zu bytes of kernel scratch", layer, what,
                    ctx->scratch.kernel.failed);
}

static int scratch_reserve(pdl_context *ctx, size_t rows, size_t n_logits, int span, pdl_error *err) {
    const pdl_model *m = ctx->model;
    pdl_forward_scratch *s = &ctx->scratch;
    const pdl_model_config *c = &m->cfg;
    if (rows > s->rows_cap) {
        size_t q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
        /* the dense MLP's width, or the shared expert's (experts have their own, moe.c) */
        size_t mlp = c->n_experts > 0 ? (size_t)c->ffn_shared : (size_t)c->ffn;
        if (grow(&s->x, rows * c->hidden) || grow(&s->xn, rows * c->hidden) || grow(&s->q, rows * q_dim) ||
            grow(&s->k, rows * kv_dim) || grow(&s->v, rows * kv_dim) || grow(&s->attn, rows * q_dim) ||
            grow(&s->branch, rows * c->hidden) || grow(&s->gate, rows * mlp + 1) || grow(&s->up, rows * mlp + 1) ||
            grow(&s->rope_cs, rows * (size_t)c->rope_dim) ||
            (m->rope_inv_freq_local && grow(&s->rope_cs_local, rows * (size_t)c->rope_dim)) ||
            (c->mtp_loaded && grow(&s->mtp_in, rows * 2 * (size_t)c->hidden)))
            return err_fail(err, "forward: out of memory for %zu rows", rows);
        if (hybrid_scratch_reserve(ctx, rows, err)) return -1;
        /* the matmuls' scratch for these rows, now rather than in the layers */
        if (scratch_reserve_bytes(&s->kernel, layer_matmul_scratch(ctx, rows)))
            return err_fail(err, "forward: out of memory for %zu bytes of kernel scratch", s->kernel.failed);
        s->rows_cap = rows;
    }
    /* attention scratch for the longest sequence of this batch, grown on
     * demand (a decode step allocates nothing once the context is reached) */
    s->attn_max_q = attn_max_queries(span, ctx->attention.order);
    size_t need_scores = attn_queries_scratch(s->attn_max_q, span, c->head_dim);
    if (need_scores > s->scores_cap) {
        if (grow(&s->scores, need_scores * (size_t)threadpool_size(ctx->pool)))
            return err_fail(err, "forward: out of memory for attention scores");
        s->scores_cap = need_scores;
    }
    if (n_logits > s->logits_cap) {
        if (grow(&s->normed_out, n_logits * c->hidden) ||
            scratch_reserve_bytes(&s->kernel, matmul_scratch_bytes(&ctx->kernels, ctx->pool, &m->w.output,
                                                                   (int64_t)n_logits)))
            return err_fail(err, "forward: out of memory for %zu logits rows", n_logits);
        s->logits_cap = n_logits;
    }
    return 0;
}

/* ---- batch validation --------------------------------------------------- */

static int validate_batch(const pdl_model *m, const pdl_kv_cache *kv, const pdl_batch *b, pdl_error *err) {
    if (b->n_tokens <= 0) return err_fail(err, "forward: batch has no tokens");
    if (b->n_seqs <= 0 || !b->cu_seqlens) return err_fail(err, "forward: batch has no sequences");
    if (b->cu_seqlens[0] != 0 || b->cu_seqlens[b->n_seqs] != b->n_tokens)
        return err_fail(err, "forward: cu_seqlens must run from 0 to n_tokens (%d), got %d .. %d",
                        b->n_tokens, b->cu_seqlens[0], b->cu_seqlens[b->n_seqs]);
    long n_slots = (long)kv->n_blocks * kv->block_size;
    for (int s = 0; s < b->n_seqs; s++) {
        int r0 = b->cu_seqlens[s], r1 = b->cu_seqlens[s + 1];
        if (r1 <= r0) return err_fail(err, "forward: sequence %d has an empty or negative segment [%d, %d)", s, r0, r1);
        for (int r = r0; r < r1; r++) {
            if (b->token_ids[r] < 0 || b->token_ids[r] >= m->cfg.vocab)
                return err_fail(err, "forward: row %d: token id %d out of range [0, %d)", r, b->token_ids[r],
                                m->cfg.vocab);
            if (b->positions[r] < 0 || b->positions[r] >= m->ctx_size)
                return err_fail(err, "forward: row %d: position %d outside the context [0, %d)", r,
                                b->positions[r], m->ctx_size);
            if (r > r0 && b->positions[r] != b->positions[r - 1] + 1)
                return err_fail(err, "forward: row %d: positions inside a segment must be consecutive", r);
            if (b->slot_mapping[r] < 0 || b->slot_mapping[r] >= n_slots)
                return err_fail(err, "forward: row %d: slot %d outside the cache [0, %ld)", r, b->slot_mapping[r],
                                n_slots);
            int32_t expect = b->block_tables[s][b->positions[r] / kv->block_size] * kv->block_size +
                             b->positions[r] % kv->block_size;
            if (b->slot_mapping[r] != expect)
                return err_fail(err, "forward: row %d: slot %d disagrees with the block table (slot %d)", r,
                                b->slot_mapping[r], expect);
        }
    }
    if (!b->span_first != !b->span_last) return err_fail(err, "forward: span_first and span_last come together");
    if (m->cfg.encoder) {
        if (b->n_logits > 0 || b->full_logits)
            return err_fail(err, "forward: %s is an encoder: it has no LM head (embeddings only)", m->cfg.arch->name);
        for (int r = 0; r < b->n_tokens; r++)
            if (b->positions[r] >= m->cfg.n_positions)
                return err_fail(err, "forward: row %d: position %d past the encoder's %d position embeddings", r,
                                b->positions[r], m->cfg.n_positions);
    }
    for (int s = 0; b->span_first && s < b->n_seqs; s++) {
        int r0 = b->cu_seqlens[s], r1 = b->cu_seqlens[s + 1], end = b->positions[r1 - 1];
        for (int r = r0; r < r1; r++)
            if (b->span_first[r] < 0 || b->span_first[r] > b->positions[r] || b->span_last[r] < b->positions[r] ||
                b->span_last[r] > end)
                return err_fail(err, "forward: row %d (position %d): two-way span [%d, %d] must hold the row and end "
                                "in the batch (its segment ends at position %d)", r, b->positions[r], b->span_first[r],
                                b->span_last[r], end);
    }
    if (m->cfg.n_rec_layers > 0) {
        if (!b->state_slots)
            return err_fail(err, "forward: the model has recurrent layers: the batch needs state_slots");
        for (int s = 0; s < b->n_seqs; s++) {
            if (b->state_slots[s] < 0 || b->state_slots[s] >= kv->n_state_slots)
                return err_fail(err, "forward: sequence %d: state slot %d outside the cache's [0, %d)", s,
                                b->state_slots[s], kv->n_state_slots);
            for (int o = 0; o < s; o++)
                if (b->state_slots[o] == b->state_slots[s])
                    return err_fail(err, "forward: sequences %d and %d share state slot %d", o, s, b->state_slots[s]);
        }
    }
    if (b->rope_pos3) {
        if (!(m->cfg.mrope_section[0] + m->cfg.mrope_section[1] + m->cfg.mrope_section[2]))
            return err_fail(err, "forward: rope_pos3 given but the model has no M-RoPE sections (mrope_section)");
        for (int r = 0; r < b->n_tokens; r++)
            for (int k = 0; k < 3; k++)
                if (b->rope_pos3[3 * r + k] < 0)
                    return err_fail(err, "forward: row %d: M-RoPE position %d of component %d is negative", r,
                                    b->rope_pos3[3 * r + k], k);
    }
    for (int s = 0; b->lora && s < b->n_seqs; s++) {
        if (b->lora[s] && b->lora[s]->model != m)
            return err_fail(err, "forward: sequence %d: its LoRA adapter was loaded for another model", s);
        if (b->lora_scale && !isfinite(b->lora_scale[s]))
            return err_fail(err, "forward: sequence %d: LoRA scale is not finite", s);
    }
    for (int j = 0; j < b->n_logits; j++) {
        int32_t r = b->logits_indices[j];
        if (r < 0 || r >= b->n_tokens || (j > 0 && r <= b->logits_indices[j - 1]))
            return err_fail(err, "forward: logits_indices[%d] = %d: must be ascending rows in [0, %d)", j, r,
                            b->n_tokens);
    }
    return 0;
}

/* ---- parallel per-row stages --------------------------------------------- */

typedef struct row_task {
    const pdl_model *m;
    pdl_forward_scratch *s; /* the context's */
    const pdl_attention_table *attn; /* the context's */
    pdl_kv_cache *kv;
    const pdl_batch *b;
    int layer;
    int kv_layer;           /* the layer's K/V in the cache (hybrid models keep K/V of attention layers only) */
    const pdl_tensor *norm; /* for norm_rows and add_branch_rows */
    const pdl_tensor *norm_b; /* add_branch_rows: the post norm's bias (PDL_BLOCK_POST_ADD) */
    const float *src;
    float *dst;
    atomic_long next_task; /* attention_rows: the next task nobody has taken */
} row_task;

static void norm_row_b(const pdl_model_config *c, float *out, const float *x, const float *w, const float *b);

static void embed_rows(void *p, int ith, int nth) {
    row_task *t = p;
    const pdl_model_config *c = &t->m->cfg;
    long r0, r1;
    threadpool_split_range(t->b->n_tokens, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) { /* each row's RoPE angles, shared by every head and layer */
        float *cs = t->s->rope_cs + r * c->rope_dim;
        if (t->b->rope_pos3) /* M-RoPE: each section turned by its own position */
            ops_rope_angles_sections(cs, c->rope_dim, t->b->rope_pos3 + 3 * r, c->mrope_section, t->m->rope_inv_freq);
        else
            ops_rope_angles(cs, c->rope_dim, t->b->positions[r], t->m->rope_inv_freq);
        if (c->rope_mscale != 1.0f) /* LongRoPE: cos and sin scaled, as transformers and llama.cpp do */
            for (int i = 0; i < c->rope_dim; i++) cs[i] *= c->rope_mscale;
        if (t->m->rope_inv_freq_local)
            ops_rope_angles(t->s->rope_cs_local + r * c->rope_dim, c->rope_dim, t->b->positions[r],
                            t->m->rope_inv_freq_local);
    }
    for (long r = r0; r < r1; r++) {
        float *x = t->s->x + r * c->hidden;
        if (t->b->embd && t->b->embd[r]) {
            memcpy(x, t->b->embd[r], (size_t)c->hidden * sizeof *x);
            continue;
        }
        (void)ops_dequant_row(&t->m->w.tok_embd, t->b->token_ids[r], x, c->hidden); /* checked at load */
        if (c->embed_scale != 1.0f)
            for (int i = 0; i < c->hidden; i++) x[i] *= c->embed_scale;
        if (c->encoder) { /* BERT: + position row + token type 0's row, then LayerNorm */
            float *e = t->s->xn + r * c->hidden;
            (void)ops_dequant_row(&t->m->w.pos_embd, t->b->positions[r], e, c->hidden); /* validate_batch */
            for (int i = 0; i < c->hidden; i++) x[i] += e[i];
            (void)ops_dequant_row(&t->m->w.type_embd, 0, e, c->hidden);
            for (int i = 0; i < c->hidden; i++) x[i] += e[i];
            norm_row_b(c, x, x, t->m->w.embd_norm.data, t->m->w.embd_norm_b.data);
        }
    }
}

/* The model's norm (RMS or Layer) of one (hidden) row, plus bias b when
 * not NULL (BERT's LayerNorms). out may be x. */
static void norm_row_b(const pdl_model_config *c, float *out, const float *x, const float *w, const float *b) {
    if (c->norm == PDL_NORM_LAYER) ops_layernorm(out, x, w, c->hidden, c->rms_eps);
    else ops_rmsnorm(out, x, w, c->hidden, c->rms_eps);
    if (b)
        for (int i = 0; i < c->hidden; i++) out[i] += b[i];
}

/* The same without a bias. */
static void norm_row(const pdl_model_config *c, float *out, const float *x, const float *w) {
    norm_row_b(c, out, x, w, NULL);
}

static void norm_rows(void *p, int ith, int nth) {
    row_task *t = p;
    const pdl_model_config *c = &t->m->cfg;
    long r0, r1;
    threadpool_split_range(t->b->n_tokens, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) norm_row(c, t->dst + r * c->hidden, t->src + r * c->hidden, t->norm->data);
}

/* x += residual_scale * post_norm(branch), per row; t->norm may have no data
 * (no post norm). PDL_BLOCK_POST_ADD: x = post_norm(x + branch) + its bias
 * (t->norm_b). */
static void add_branch_rows(void *p, int ith, int nth) {
    row_task *t = p;
    const pdl_model_config *c = &t->m->cfg;
    long r0, r1;
    threadpool_split_range(t->b->n_tokens, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *br = t->s->branch + r * c->hidden, *x = t->s->x + r * c->hidden;
        if (c->block == PDL_BLOCK_POST_ADD) {
            for (int i = 0; i < c->hidden; i++) x[i] += br[i];
            norm_row_b(c, x, x, t->norm->data, t->norm_b->data);
            continue;
        }
        if (t->norm->data) norm_row(c, br, br, t->norm->data);
        if (c->residual_scale != 1.0f)
            for (int i = 0; i < c->hidden; i++) x[i] += br[i] * c->residual_scale;
        else
            for (int i = 0; i < c->hidden; i++) x[i] += br[i];
    }
}

/* s->gate = gelu(s->gate), exact (erf), per row: an ungated MLP
 * (PDL_ACT_GELU_ERF, BERT). */
static void gelu_erf_rows(void *p, int ith, int nth) {
    row_task *t = p;
    const pdl_model_config *c = &t->m->cfg;
    long r0, r1;
    threadpool_split_range(t->b->n_tokens, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *g = t->s->gate + r * c->ffn;
        for (int i = 0; i < c->ffn; i++) g[i] = 0.5f * g[i] * (1.0f + erff(g[i] * 0.70710678118654752f));
    }
}

/* q/k norm, RoPE, and the K/V write into the cache, per row. */
static void qk_rope_store_rows(void *p, int ith, int nth) {
    row_task *t = p;
    const pdl_model *m = t->m;
    pdl_forward_scratch *s = t->s;
    const pdl_model_config *c = &m->cfg;
    const pdl_layer_weights *lw = &m->w.layers[t->layer];
    int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    int neox = c->rope_style == PDL_ROPE_NEOX;
    bool gated = c->attn_out_gate;
    /* this layer's RoPE: windowed layers may have their own base (Gemma 3);
     * global layers may have none (Cohere2) */
    bool windowed = model_layer_windowed(c, t->layer);
    bool rope = c->rope_dim > 0 && (windowed || !c->rope_global_none);
    const float *cs_all = windowed && m->rope_inv_freq_local ? s->rope_cs_local : s->rope_cs;
    pdl_attention_store_fn store =
        attn_table_store_for(t->attn, t->kv->dtype == PDL_KV_F16, t->kv->dtype == PDL_KV_Q8_0,
                             t->kv->dtype == PDL_KV_Q4_0);
    long r0, r1;
    threadpool_split_range(t->b->n_tokens, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *q = s->q + r * q_dim, *k = s->k + r * kv_dim, *v = s->v + r * kv_dim;
        const float *cs = cs_all + r * c->rope_dim;
        if (gated) /* q_proj gave per head its query then its gate */
            for (int h = 0; h < c->n_heads; h++) {
                const float *qg = s->qg + (size_t)r * 2 * q_dim + (size_t)h * 2 * c->head_dim;
                memcpy(q + (size_t)h * c->head_dim, qg, (size_t)c->head_dim * sizeof *q);
                memcpy(s->attn_gate + (size_t)r * q_dim + (size_t)h * c->head_dim, qg + c->head_dim,
                       (size_t)c->head_dim * sizeof *q);
            }
        bool per_head = c->qk_norm == PDL_QK_NORM_HEAD;
        if (c->qk_norm == PDL_QK_NORM_WHOLE) {
            ops_rmsnorm(q, q, lw->q_norm.data, q_dim, c->rms_eps);
            ops_rmsnorm(k, k, lw->k_norm.data, kv_dim, c->rms_eps);
        }
        for (int h = 0; h < c->n_heads; h++) {
            float *qh = q + h * c->head_dim;
            if (per_head) ops_rmsnorm(qh, qh, lw->q_norm.data, c->head_dim, c->rms_eps);
            if (rope) ops_rope_apply(qh, c->rope_dim, cs, neox);
        }
        for (int h = 0; h < c->n_kv_heads; h++) {
            float *kh = k + h * c->head_dim;
            if (per_head) ops_rmsnorm(kh, kh, lw->k_norm.data, c->head_dim, c->rms_eps);
            if (rope) ops_rope_apply(kh, c->rope_dim, cs, neox);
        }
        store(kv_k_pool(t->kv, t->kv_layer), kv_v_pool(t->kv, t->kv_layer), t->kv->dtype == PDL_KV_F16, kv_dim,
              c->head_dim, t->kv->block_size, t->b->slot_mapping[r], k, v);
    }
}

/* One call of the attention kernel: queries over [first, last] when first
 * is given (two-way spans), else causal up to last with the window. */
static void attend(const pdl_attention_table *tab, float *const *outs, const float *const *qs, const int *first,
                   const int *last, int nq, const pdl_model_config *c, int g, const float *sinks, int window,
                   const pdl_attn_kv *akv, float *scratch) {
    if (first)
        tab->ranges(outs, qs, first, last, nq, c->head_dim, g, c->attn_scale, c->attn_softcap, sinks, akv, scratch);
    else
        tab->queries(outs, qs, last, nq, c->head_dim, g, c->attn_scale, c->attn_softcap, sinks, window, akv, scratch);
}

/* Attention tasks are (sequence, block of rows, KV head): the rows of a
 * prefill chunk and the heads of a GQA group share each tile of keys
 * (attn_queries). Each thread takes the next task as it finishes
 * its last, so a prefill's later rows (which read more keys) and a thread
 * slowed by the machine leave their share to the others; each query's
 * result is the same whichever task or thread computes it. */
static void attention_rows(void *p, int ith, int nth) {
    row_task *t = p;
    const pdl_model *m = t->m;
    pdl_forward_scratch *s = t->s;
    const pdl_model_config *c = &m->cfg;
    const pdl_batch *b = t->b;
    int q_dim = c->n_heads * c->head_dim;
    int group = c->n_heads / c->n_kv_heads;
    float *scratch = s->scores + (size_t)ith * s->scores_cap;
    pdl_attn_kv akv = {
        .k = kv_k_pool(t->kv, t->kv_layer),
        .v = kv_v_pool(t->kv, t->kv_layer),
        .kv_is_f16 = t->kv->dtype == PDL_KV_F16,
        .kv_is_q8 = t->kv->dtype == PDL_KV_Q8_0,
        .kv_is_q4 = t->kv->dtype == PDL_KV_Q4_0,
        .kv_dim = t->kv->kv_dim,
        .block_size = t->kv->block_size,
    };
    /* the window of this layer: windowed layers alternate with global ones
     * when the model says so (swa_pattern) */
    int window = model_layer_windowed(c, t->layer) ? c->sliding_window : 0;
    int max_q = s->attn_max_q;
    int rows_per_task = max_q / group > 0 ? max_q / group : 1;
    float *outs[ATTN_MAX_QUERIES_PER_CALL], sinks[ATTN_MAX_QUERIES_PER_CALL];
    const float *qs[ATTN_MAX_QUERIES_PER_CALL];
    int poss[ATTN_MAX_QUERIES_PER_CALL], firsts[ATTN_MAX_QUERIES_PER_CALL];
    /* each query's head's sink logit (attn_sinks), or none */
    const float *head_sinks = c->attn_sinks ? m->w.layers[t->layer].sinks.data : NULL;
    (void)nth;
    long task = 0, mine = atomic_fetch_add_explicit(&t->next_task, 1, memory_order_relaxed);
    /* two-way spans: every query over [first, last] (attn_ranges) */
    bool ranges = b->span_first != NULL;
    for (int sq = 0; sq < b->n_seqs; sq++) {
        akv.block_table = b->block_tables[sq];
        for (int rb = b->cu_seqlens[sq]; rb < b->cu_seqlens[sq + 1]; rb += rows_per_task) {
            int re = rb + rows_per_task < b->cu_seqlens[sq + 1] ? rb + rows_per_task : b->cu_seqlens[sq + 1];
            for (int g = 0; g < c->n_kv_heads; g++, task++) {
                if (task != mine) continue; /* tasks are taken in this order */
                mine = atomic_fetch_add_explicit(&t->next_task, 1, memory_order_relaxed);
                int nq = 0;
                for (int r = rb; r < re; r++)
                    for (int h = g * group; h < (g + 1) * group; h++) {
                        outs[nq] = s->attn + (size_t)r * q_dim + (size_t)h * c->head_dim;
                        qs[nq] = s->q + (size_t)r * q_dim + (size_t)h * c->head_dim;
                        if (head_sinks) sinks[nq] = head_sinks[h];
                        poss[nq] = b->positions[r];
                        if (ranges) {
                            int causal = window > 0 && poss[nq] - window + 1 > 0 ? poss[nq] - window + 1 : 0;
                            firsts[nq] = b->span_first[r] < causal ? b->span_first[r] : causal;
                            poss[nq] = b->span_last[r];
                        }
                        if (++nq == max_q) {
                            attend(t->attn, outs, qs, ranges ? firsts : NULL, poss, nq, c, g,
                                   head_sinks ? sinks : NULL, window, &akv, scratch);
                            nq = 0;
                        }
                    }
                if (nq)
                    attend(t->attn, outs, qs, ranges ? firsts : NULL, poss, nq, c, g, head_sinks ? sinks : NULL,
                           window, &akv, scratch);
            }
        }
    }
}

/* The attention output times sigmoid(gate), per row (cfg.attn_out_gate). */
static void out_gate_rows(void *p, int ith, int nth) {
    row_task *t = p;
    const pdl_model_config *c = &t->m->cfg;
    size_t q_dim = (size_t)c->n_heads * c->head_dim;
    long r0, r1;
    threadpool_split_range(t->b->n_tokens, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *a = t->s->attn + r * q_dim;
        const float *g = t->s->attn_gate + r * q_dim;
        for (size_t i = 0; i < q_dim; i++) a[i] *= 1.0f / (1.0f + expf(-g[i]));
    }
}

/* ---- the head -------------------------------------------------------------- */

/* Architecture-specific changes to the logits after the LM head, the same
 * in both head paths (the load-time probe compares them byte for byte). */
/* The head's scaling and soft-cap over n logits. */
static void head_postprocess_n(const pdl_model_config *c, float *logits, size_t n) {
    if (c->logit_div != 1.0f) /* a divide, as Granite's Hugging Face code does */
        for (size_t i = 0; i < n; i++) logits[i] /= c->logit_div;
    if (c->logit_scale != 1.0f)
        for (size_t i = 0; i < n; i++) logits[i] *= c->logit_scale;
    if (c->final_softcap > 0.0f)
        for (size_t i = 0; i < n; i++) logits[i] = tanhf(logits[i] / c->final_softcap) * c->final_softcap;
}

static void head_postprocess(const pdl_model_config *c, float *logits, int n_rows) {
    head_postprocess_n(c, logits, (size_t)n_rows * c->vocab);
}

int pdl_model_token_logits(const pdl_model *m, const float *h, const int32_t *ids, int n, float *out, pdl_error *err) {
    const pdl_model_config *c = &m->cfg;
    if (c->encoder) return err_fail(err, "%s is an encoder: it has no LM head to score tokens", c->arch->name);
    float *row = malloc((size_t)c->hidden * sizeof *row);
    if (!row) return err_fail(err, "out of memory");
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= c->vocab || ops_dequant_row(&m->w.output, ids[i], row, c->hidden)) {
            free(row);
            return err_fail(err, "token %d: no logit (vocabulary %d)", ids[i], c->vocab);
        }
        double s = 0;
        for (int k = 0; k < c->hidden; k++) s += (double)row[k] * h[k];
        out[i] = (float)s;
    }
    free(row);
    head_postprocess_n(c, out, (size_t)n);
    return 0;
}

/* The full-logits path, kept for measurement and the probe: norm and head
 * over every row into an (n_tokens, vocab) matrix, then the asked rows. */
static int full_head(pdl_context *ctx, const pdl_batch *b, float *logits_out, pdl_error *err) {
    const pdl_model *m = ctx->model;
    const pdl_model_config *c = &m->cfg;
    pdl_forward_scratch *s = &ctx->scratch;
    size_t n = (size_t)b->n_tokens;
    if (n > s->full_cap) {
        if (grow(&s->full_normed, n * c->hidden) || grow(&s->full_logits, n * c->vocab) ||
            scratch_reserve_bytes(&s->kernel, matmul_scratch_bytes(&ctx->kernels, ctx->pool, &m->w.output,
                                                                   (int64_t)n)))
            return err_fail(err, "forward: out of memory for %zu x %d full logits", n, c->vocab);
        s->full_cap = n;
    }
    for (size_t r = 0; r < n; r++)
        norm_row(c, s->full_normed + r * c->hidden, s->x + r * c->hidden, m->w.output_norm.data);
    if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, s->full_logits, c->vocab, s->full_normed, (int64_t)n,
                   &m->w.output, NULL, false))
        return fwd_kernel_failed(ctx, -1, "full logits head", err);
    head_postprocess(c, s->full_logits, (int)n);
    for (int j = 0; j < b->n_logits; j++)
        memcpy(logits_out + (size_t)j * c->vocab, s->full_logits + (size_t)b->logits_indices[j] * c->vocab,
               (size_t)c->vocab * sizeof(float));
    return 0;
}

/* ---- the forward ---------------------------------------------------------- */

/* An attention layer's mixer over the batch's rows of xn: q/k/v
 * projections, q/k norm and RoPE, the K/V write, attention (times the
 * output gate where the model has one), and the output projection into out
 * (added to it when accumulate). */
static int attention_layer(pdl_context *ctx, row_task *t, const float *xn, double attn_work, int row_threads,
                           float *out, bool accumulate, pdl_error *err) {
    const pdl_model_config *c = &ctx->model->cfg;
    const pdl_layer_weights *lw = &ctx->model->w.layers[t->layer];
    pdl_forward_scratch *s = &ctx->scratch;
    int n = t->b->n_tokens, q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    pdl_matmul_out qkv[3] = {
        {.y = c->attn_out_gate ? s->qg : s->q, .ldy = c->attn_out_gate ? 2 * q_dim : q_dim, .w = &lw->wq,
         .bias = lw->bq.data},
        {.y = s->k, .ldy = kv_dim, .w = &lw->wk, .bias = lw->bk.data},
        {.y = s->v, .ldy = kv_dim, .w = &lw->wv, .bias = lw->bv.data},
    };
    if (matmul_shared(&ctx->kernels, ctx->pool, &s->kernel, xn, n, qkv, 3))
        return fwd_kernel_failed(ctx, t->layer, "q/k/v projections", err);
    lora_job qkv_lora[3]; /* LoRA: each sequence's adapter delta on its rows (lora.h) */
    for (int i = 0; i < 3; i++)
        qkv_lora[i] = (lora_job){(lora_module)(LORA_Q + i), xn, c->hidden, qkv[i].y, qkv[i].ldy};
    lora_apply(ctx->pool, ctx->kernels.isa, t->b, t->layer, qkv_lora, 3);
    threadpool_run_n(ctx->pool, row_threads, qk_rope_store_rows, t);
    atomic_store_explicit(&t->next_task, 0, memory_order_relaxed);
    threadpool_run_n(ctx->pool, threadpool_threads_for(ctx->pool, attn_work, 65536.0), attention_rows, t);
    if (c->attn_out_gate) threadpool_run_n(ctx->pool, row_threads, out_gate_rows, t);
    if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, out, c->hidden, s->attn, n, &lw->wo, lw->bo.data, accumulate))
        return fwd_kernel_failed(ctx, t->layer, "attention output", err);
    lora_apply(ctx->pool, ctx->kernels.isa, t->b, t->layer, &(lora_job){LORA_O, s->attn, q_dim, out, c->hidden}, 1);
    return 0;
}


/* The MLP's activation over whole rows: gate = act(gate, up). */
typedef struct gate_task {
    float *gate;
    const float *up;
    int width, rows;
    pdl_gate_fn act;
} gate_task;

static void gate_rows(void *p, int ith, int nth) {
    const gate_task *t = p;
    long r0, r1;
    threadpool_split_range(t->rows, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) t->act(t->gate + r * t->width, t->up + r * t->width, t->width);
}

/* Decoder layer l (its weights m->w.layers[l]; kv_layer its K/V in the
 * cache) over the batch's rows of the residual stream s->x, in place:
 * the token mixer (attention, or a hybrid model's Gated DeltaNet,
 * deltanet.c) and the MLP or experts, each with the model's norms and
 * residual adds. attn_work: the attention's multiply-adds, for threads. */
static int decoder_layer(pdl_context *ctx, pdl_kv_cache *kv, row_task *t, int l, int kv_layer, double attn_work,
                         pdl_error *err) {
    const pdl_model *m = ctx->model;
    const pdl_model_config *c = &m->cfg;
    const pdl_batch *b = t->b;
    pdl_forward_scratch *s = &ctx->scratch;
    int n = b->n_tokens;
    const pdl_layer_weights *lw = &m->w.layers[l];
    t->layer = l;
    t->kv_layer = kv_layer;
    /* element-wise stages: ~16k elements per thread at least */
    int row_threads = threadpool_threads_for(ctx->pool, (double)n * c->hidden, 16384.0);
    /* a branch is added with the matmul's accumulate unless it is scaled or
     * normed first (Granite, Gemma 2, OLMo 2) or comes from the experts: then
     * it goes through `branch` */
    bool pre_norm = c->block != PDL_BLOCK_POST_NORM && c->block != PDL_BLOCK_POST_ADD;
    bool post_norm = c->block == PDL_BLOCK_SANDWICH || c->block == PDL_BLOCK_POST_NORM || c->block == PDL_BLOCK_POST_ADD;
    bool direct_add = !post_norm && c->residual_scale == 1.0f;
    /* without a norm before a branch its input is x itself, read before x
     * changes: the branch is never added directly then (post_norm) */
    const float *branch_in = pre_norm ? s->xn : s->x;

    /* attention block: x += Wo attn(rope(Wq xn), rope(Wk xn), Wv xn) */
    if (pre_norm) {
        t->norm = &lw->attn_norm, t->src = s->x, t->dst = s->xn;
        threadpool_run_n(ctx->pool, row_threads, norm_rows, t);
    }
    /* the token mixer: attention, or a hybrid model's Gated DeltaNet
     * (deltanet.c) in the same block */
    float *mixed = direct_add ? s->x : s->branch;
    if (model_layer_recurrent(c, l) ? deltanet_layer(ctx, kv, b, l, branch_in, mixed, direct_add, err)
                                     : attention_layer(ctx, t, branch_in, attn_work, row_threads, mixed, direct_add,
                                                       err))
        return -1;
    if (!direct_add) {
        t->norm = &lw->post_attn_norm, t->norm_b = &lw->post_attn_norm_b;
        threadpool_run_n(ctx->pool, row_threads, add_branch_rows, t);
    }

    /* MLP block: x += W_down (act(W_gate xn) * W_up xn), or the experts'
     * sum; a parallel block reuses the attention's xn (normed before its
     * add) */
    if (c->block == PDL_BLOCK_PRE_NORM || c->block == PDL_BLOCK_SANDWICH) {
        t->norm = &lw->ffn_norm, t->src = s->x, t->dst = s->xn;
        threadpool_run_n(ctx->pool, row_threads, norm_rows, t);
    }
    if (c->n_experts > 0) {
        if (moe_ffn(ctx, lw, branch_in, n, s->branch, err)) return -1;
        t->norm = &lw->post_ffn_norm, t->norm_b = &lw->post_ffn_norm_b;
        threadpool_run_n(ctx->pool, row_threads, add_branch_rows, t);
        return 0;
    }
    pdl_gate_fn act = c->act == PDL_ACT_GELU_TANH ? ctx->gates.gelu_tanh_mul : ctx->gates.silu_mul;
    if (c->act == PDL_ACT_GELU_ERF) { /* ungated: gelu(W_up x + b_up) (an encoder: no adapters) */
        if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, s->gate, c->ffn, branch_in, n, &lw->w_up,
                       lw->b_up.data, false))
            return fwd_kernel_failed(ctx, l, "MLP up", err);
        threadpool_run_n(ctx->pool, threadpool_threads_for(ctx->pool, (double)n * c->ffn, 16384.0), gelu_erf_rows, t);
    } else if (lora_batch_touches(b, l, LORA_GATE) || lora_batch_touches(b, l, LORA_UP)) {
        /* LoRA on gate or up: the two products, each sequence's deltas, then
         * the activation (what matmul_gated gives, bit for bit, without them) */
        pdl_matmul_out gu[2] = {{.y = s->gate, .ldy = c->ffn, .w = &lw->w_gate},
                                {.y = s->up, .ldy = c->ffn, .w = &lw->w_up}};
        if (matmul_shared(&ctx->kernels, ctx->pool, &s->kernel, branch_in, n, gu, 2))
            return fwd_kernel_failed(ctx, l, "MLP gate/up", err);
        lora_job gu_lora[2] = {{LORA_GATE, branch_in, c->hidden, s->gate, c->ffn},
                               {LORA_UP, branch_in, c->hidden, s->up, c->ffn}};
        lora_apply(ctx->pool, ctx->kernels.isa, b, l, gu_lora, 2);
        gate_task gt = {.gate = s->gate, .up = s->up, .width = c->ffn, .rows = n, .act = act};
        threadpool_run_n(ctx->pool, row_threads, gate_rows, &gt);
    } else if (matmul_gated(&ctx->kernels, ctx->pool, &s->kernel, s->gate, c->ffn, s->up, branch_in, n, &lw->w_gate,
                            &lw->w_up, act)) {
        return fwd_kernel_failed(ctx, l, "MLP gate/up", err);
    }
    if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, direct_add ? s->x : s->branch, c->hidden, s->gate, n,
                   &lw->w_down, lw->b_down.data, direct_add))
        return fwd_kernel_failed(ctx, l, "MLP down", err);
    lora_job down_lora = {LORA_DOWN, s->gate, c->ffn, direct_add ? s->x : s->branch, c->hidden};
    lora_apply(ctx->pool, ctx->kernels.isa, b, l, &down_lora, 1);
    if (!direct_add) {
        t->norm = &lw->post_ffn_norm, t->norm_b = &lw->post_ffn_norm_b;
        threadpool_run_n(ctx->pool, row_threads, add_branch_rows, t);
    }
    return 0;
}

/* What every forward does first: checks the cache (kv_layers attention
 * layers) and the batch, reserves scratch, and puts each row's embedding
 * (or input vector) in s->x and its RoPE angles in place. *attn_work gets
 * the attention's multiply-adds per layer (every row reads its prefix). */
static int forward_begin(pdl_context *ctx, pdl_kv_cache *kv, const pdl_batch *b, int kv_layers, row_task *t,
                         double *attn_work, pdl_error *err) {
    const pdl_model *m = ctx->model;
    const pdl_model_config *c = &m->cfg;
    if (kv->n_layers != kv_layers || kv->kv_dim != c->n_kv_heads * c->head_dim || kv->head_dim != c->head_dim)
        return err_fail(err,
                        "forward: KV cache was made for another model (%d layers x %d in heads of %d, model %d x %d "
                        "in heads of %d)",
                        kv->n_layers, kv->kv_dim, kv->head_dim, kv_layers, c->n_kv_heads * c->head_dim, c->head_dim);
    if (c->n_rec_layers > 0 && (kv->n_rec_layers != c->n_rec_layers ||
                                kv->st_conv_dim != 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim))
        return err_fail(err, "forward: KV cache has no recurrent state slots for this model's %d linear attention "
                        "layers (pdl_kv_cache_create_hybrid)", c->n_rec_layers);
    if (validate_batch(m, kv, b, err)) return -1;
    /* keys the longest sequence reads, rounded up to a power of two so that
     * decoding grows the attention scratch only log(context) times */
    int span = 256;
    for (int r = 0; r < b->n_tokens; r++)
        while (span < b->positions[r] + 1) span *= 2;
    if (scratch_reserve(ctx, (size_t)b->n_tokens, (size_t)b->n_logits, span, err)) return -1;
    *t = (row_task){.m = m, .s = &ctx->scratch, .attn = &ctx->attention, .kv = kv, .b = b};
    /* element-wise stages: ~16k elements per thread at least */
    threadpool_run_n(ctx->pool, threadpool_threads_for(ctx->pool, (double)b->n_tokens * c->hidden, 16384.0),
                     embed_rows, t);
    double work = 0;
    for (int r = 0; r < b->n_tokens; r++) work += (double)(b->positions[r] + 1) * c->n_heads * c->head_dim;
    *attn_work = work;
    return 0;
}

/* The LM head over n rows already normed, into logits (n, vocab). */
static int lm_head(pdl_context *ctx, const float *normed, int n, float *logits, pdl_error *err) {
    const pdl_model *m = ctx->model;
    if (matmul_run(&ctx->kernels, ctx->pool, &ctx->scratch.kernel, logits, m->cfg.vocab, normed, n, &m->w.output,
                   NULL, false))
        return fwd_kernel_failed(ctx, -1, "LM head", err);
    head_postprocess(&m->cfg, logits, n);
    return 0;
}

int pdl_forward(pdl_context *ctx, pdl_kv_cache *kv, const pdl_batch *b, float *logits_out, pdl_error *err) {
    const pdl_model *m = ctx->model;
    const pdl_model_config *c = &m->cfg;
    /* a cache made with the MTP block's layer (kv_cache_create) serves this forward too */
    int kv_layers = c->mtp_loaded && kv->n_layers == c->n_attn_layers + 1 ? kv->n_layers : c->n_attn_layers;
    row_task t;
    double attn_work;
    if (forward_begin(ctx, kv, b, kv_layers, &t, &attn_work, err)) return -1;
    for (int l = 0; l < c->n_layers; l++)
        if (decoder_layer(ctx, kv, &t, l, c->kind_index ? c->kind_index[l] : l, attn_work, err)) return -1;

    if (c->encoder) return 0; /* no head: validate_batch asked for no logits */
    if (b->full_logits) return full_head(ctx, b, logits_out, err);

    /* Final norm and LM head on the sampled rows only. */
    pdl_forward_scratch *s = &ctx->scratch;
    for (int j = 0; j < b->n_logits; j++) {
        int r = b->logits_indices[j];
        norm_row(c, s->normed_out + (size_t)j * c->hidden, s->x + (size_t)r * c->hidden, m->w.output_norm.data);
    }
    return lm_head(ctx, s->normed_out, b->n_logits, logits_out, err);
}

const float *model_forward_hidden(const pdl_context *ctx) { return ctx->scratch.x; }

void model_final_norm_rows(const pdl_model *m, const float *x, int n, float *out) {
    if (m->cfg.encoder) { /* BERT's last layer ends with its own norm */
        memcpy(out, x, (size_t)n * m->cfg.hidden * sizeof *out);
        return;
    }
    for (int r = 0; r < n; r++)
        norm_row(&m->cfg, out + (size_t)r * m->cfg.hidden, x + (size_t)r * m->cfg.hidden, m->w.output_norm.data);
}

/* ---- the MTP block ----------------------------------------------------------- */

typedef struct mtp_input_task {
    const pdl_model *m;
    const float *x;        /* (rows, hidden) the tokens' embeddings */
    const float *hidden;   /* (rows, hidden) the hidden states */
    bool final_norm;       /* hidden is the main stack's, before its final norm */
    float *out;            /* (rows, 2 * hidden) */
    int rows;
} mtp_input_task;

/* Each row's [enorm(embedding), hnorm(hidden)] (the hidden state first
 * through the model's final norm when it is the main stack's). */
static void mtp_input_rows(void *p, int ith, int nth) {
    mtp_input_task *t = p;
    const pdl_model_config *c = &t->m->cfg;
    const pdl_model_weights *w = &t->m->w;
    size_t H = (size_t)c->hidden;
    long r0, r1;
    threadpool_split_range(t->rows, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *e = t->out + (size_t)r * 2 * H, *h = e + H;
        norm_row(c, e, t->x + (size_t)r * H, w->mtp_enorm.data);
        const float *in = t->hidden + (size_t)r * H;
        if (t->final_norm) {
            norm_row(c, h, in, w->output_norm.data);
            in = h;
        }
        norm_row(c, h, in, w->mtp_hnorm.data);
    }
}

int model_forward_mtp(pdl_context *ctx, pdl_kv_cache *kv, const pdl_batch *b, const float *hidden_in,
                      bool hidden_final_norm, float *hidden_out, float *logits_out, pdl_error *err) {
    const pdl_model *m = ctx->model;
    const pdl_model_config *c = &m->cfg;
    if (!c->mtp_loaded) return err_fail(err, "forward: the model has no MTP block");
    if (b->embd || b->full_logits) return err_fail(err, "forward: the MTP block takes token rows and selected logits");
    row_task t;
    double attn_work;
    if (forward_begin(ctx, kv, b, c->n_attn_layers + 1, &t, &attn_work, err)) return -1;
    pdl_forward_scratch *s = &ctx->scratch;
    int n = b->n_tokens;
    mtp_input_task in = {.m = m, .x = s->x, .hidden = hidden_in, .final_norm = hidden_final_norm, .out = s->mtp_in,
                         .rows = n};
    threadpool_run_n(ctx->pool, threadpool_threads_for(ctx->pool, (double)n * 3 * c->hidden, 16384.0),
                     mtp_input_rows, &in);
    if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, s->x, c->hidden, s->mtp_in, n, &m->w.mtp_fc, NULL, false))
        return fwd_kernel_failed(ctx, c->n_layers, "MTP input projection", err);
    /* its layer: slot n_layers of the weights, the cache's last layer */
    if (decoder_layer(ctx, kv, &t, c->n_layers, c->n_attn_layers, attn_work, err)) return -1;
    for (int j = 0; j < b->n_logits; j++) {
        int r = b->logits_indices[j];
        norm_row(c, s->normed_out + (size_t)j * c->hidden, s->x + (size_t)r * c->hidden, m->w.mtp_norm.data);
    }
    if (hidden_out) memcpy(hidden_out, s->normed_out, (size_t)b->n_logits * c->hidden * sizeof *hidden_out);
    return logits_out ? lm_head(ctx, s->normed_out, b->n_logits, logits_out, err) : 0;
}

int model_head_rows(pdl_context *ctx, const float *normed, int n, float *logits_out, pdl_error *err) {
    const pdl_model *m = ctx->model;
    if (scratch_reserve_bytes(&ctx->scratch.kernel,
                              matmul_scratch_bytes(&ctx->kernels, ctx->pool, &m->w.output, (int64_t)n)))
        return err_fail(err, "forward: out of memory for %d logits rows", n);
    return lm_head(ctx, normed, n, logits_out, err);
}
