/*
 * deltanet.c - a Gated DeltaNet layer (Qwen3.5, Qwen3-Next linear
 * attention) over a packed batch: the token mixer of a hybrid model's
 * linear layers, in place of attention.
 *
 * Per row: one projection to q, k, v (conv_dim = 2 * k_heads * k_dim +
 * v_heads * v_dim wide), z (the output gate), b and a (one per value head);
 * a causal depthwise convolution of kernel lin_conv over the q, k, v
 * channels, then SiLU; q and k l2-normalised per key head, q times
 * 1/sqrt(k_dim); beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias).
 * Per sequence and value head: the gated delta rule (kernels/delta_rule.h)
 * on the sequence's state slot. Per row and value head: RMSNorm of the
 * output times the norm's weight times silu(z) (the norm before the gate),
 * then the output projection.
 *
 * The state (kv_cache.h's state slots) is chunk-canonical: the delta-rule
 * matrix at the last multiple of PDL_STATE_CHUNK positions, the chunk's
 * keys, updates and decays by position in the chunk, and the last
 * PDL_STATE_RING convolution inputs by position: every row's output
 * depends only on its sequence's tokens and its position, whatever the
 * batch, the chunking or a cache hit. Not for the attention layers
 * (forward.c) or the state's allocation (the engine's).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kernels/scratch.h"
#include "model/context.h"
#include "model/kv_cache.h"
#include "util/error.h"

static int grow(float **buf, size_t n) {
    void *p = *buf;
    size_t cap = 0;
    if (!scratch_grow(&p, &cap, n * sizeof **buf)) return -1;
    *buf = p;
    return 0;
}

int hybrid_scratch_reserve(pdl_context *ctx, size_t rows, pdl_error *err) {
    const pdl_model_config *c = &ctx->model->cfg;
    pdl_forward_scratch *s = &ctx->scratch;
    if ((!c->attn_out_gate && c->n_rec_layers == 0) || rows <= s->hybrid_rows_cap) return 0;
    size_t q_dim = (size_t)c->n_heads * c->head_dim;
    size_t conv_dim = 2 * (size_t)c->lin_k_heads * c->lin_k_dim + (size_t)c->lin_v_heads * c->lin_v_dim;
    size_t v_total = (size_t)c->lin_v_heads * c->lin_v_dim, nv = (size_t)c->lin_v_heads;
    size_t rule = delta_rule_scratch_floats(PDL_STATE_CHUNK, c->lin_v_dim) * (size_t)threadpool_size(ctx->pool);
    if ((c->attn_out_gate && (grow(&s->qg, rows * 2 * q_dim) || grow(&s->attn_gate, rows * q_dim))) ||
        (c->n_rec_layers > 0 &&
         (grow(&s->lin_mix, rows * conv_dim) || grow(&s->lin_qkv, rows * conv_dim) || grow(&s->lin_z, rows * v_total) ||
          grow(&s->lin_beta, rows * nv) || grow(&s->lin_g, rows * nv) || grow(&s->lin_o, rows * v_total) ||
          grow(&s->lin_rule, rule) || grow(&s->lin_ones, conv_dim > v_total ? conv_dim : v_total))))
        return err_fail(err, "forward: out of memory for %zu rows of linear attention", rows);
    for (size_t i = 0; c->n_rec_layers > 0 && i < (conv_dim > v_total ? conv_dim : v_total); i++) s->lin_ones[i] = 1.0f;
    s->hybrid_rows_cap = rows;
    return 0;
}

void hybrid_scratch_free(pdl_forward_scratch *s) {
    free(s->qg), free(s->attn_gate), free(s->lin_mix), free(s->lin_qkv), free(s->lin_z);
    free(s->lin_beta), free(s->lin_g), free(s->lin_o), free(s->lin_rule), free(s->lin_ones);
}

typedef struct dn_task {
    const pdl_model_config *c;
    const pdl_layer_weights *lw;
    pdl_forward_scratch *s;
    pdl_kv_cache *kv;
    const pdl_batch *b;
    int rec;                /* the layer's index among the recurrent layers (its region of a slot) */
    delta_rule_fn rule;
    pdl_gate_fn silu_mul;   /* the context's SiLU gate: silu(g) * up (times ones here) */
    atomic_long next;       /* rule_tasks: the next (sequence, value head) nobody has taken */
} dn_task;

static inline int conv_dim_of(const pdl_model_config *c) {
    return 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim;
}

/* The key head value head h reads. */
static inline int key_head_of(const pdl_model_config *c, int h) {
    return c->lin_v_tiled ? h % c->lin_k_heads : h / (c->lin_v_heads / c->lin_k_heads);
}

/* torch's softplus (beta 1, threshold 20) */
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* x * rsqrt(sum(x^2) + 1e-6) in place (fla's l2norm, as transformers). */
static void l2norm(float *x, int n) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* Convolution, SiLU, q/k normalisation, beta and g, per row. Inputs before
 * a segment's first position come from its slot's ring (before position 0:
 * zeros). */
static void conv_rows(void *p, int ith, int nth) {
    dn_task *t = p;
    const pdl_model_config *c = t->c;
    const pdl_batch *b = t->b;
    pdl_forward_scratch *s = t->s;
    const int cd = conv_dim_of(c), K = c->lin_conv, kd = c->lin_k_heads * c->lin_k_dim, nv = c->lin_v_heads;
    const float *w = t->lw->lin_conv1d.data, *dt = t->lw->lin_dt_bias.data, *aneg = t->lw->lin_a_neg.data;
    const float qscale = 1.0f / sqrtf((float)c->lin_k_dim);
    long r0, r1;
    threadpool_split_range(b->n_tokens, ith, nth, &r0, &r1);
    int seg = 0;
    for (long r = r0; r < r1; r++) {
        while (b->cu_seqlens[seg + 1] <= r) seg++;
        const int first_row = b->cu_seqlens[seg], p0 = b->positions[first_row], pos = b->positions[r];
        const float *ring = kv_state(t->kv, b->state_slots[seg], t->rec).ring;
        const float *taps[8];
        for (int i = 0; i < K; i++) {
            int at = pos - (K - 1) + i;
            taps[i] = at < 0 ? NULL
                      : at >= p0 ? s->lin_mix + ((size_t)r - (size_t)(pos - at)) * cd
                                 : ring + (size_t)(at % PDL_STATE_RING) * cd;
        }
        float *out = s->lin_qkv + (size_t)r * cd;
        memset(out, 0, (size_t)cd * sizeof *out);
        for (int i = 0; i < K; i++) { /* taps oldest first, as one channel's sum would run */
            if (!taps[i]) continue;
            const float *wi = w + (size_t)i * cd, *x = taps[i];
            for (int ch = 0; ch < cd; ch++) out[ch] += wi[ch] * x[ch];
        }
        t->silu_mul(out, s->lin_ones, cd);
        for (int h = 0; h < c->lin_k_heads; h++) {
            float *q = out + (size_t)h * c->lin_k_dim, *k = out + kd + (size_t)h * c->lin_k_dim;
            l2norm(q, c->lin_k_dim);
            l2norm(k, c->lin_k_dim);
            for (int i = 0; i < c->lin_k_dim; i++) q[i] *= qscale;
        }
        float *beta = s->lin_beta + (size_t)r * nv, *g = s->lin_g + (size_t)r * nv;
        for (int h = 0; h < nv; h++) {
            beta[h] = 1.0f / (1.0f + expf(-beta[h]));
            g[h] = aneg[h] * softplus(g[h] + dt[h]);
        }
    }
}

/* The delta rule: tasks (sequence, value head), taken in turn. */
static void rule_tasks(void *p, int ith, int nth) {
    dn_task *t = p;
    const pdl_model_config *c = t->c;
    const pdl_batch *b = t->b;
    pdl_forward_scratch *s = t->s;
    (void)nth;
    const int cd = conv_dim_of(c), kd = c->lin_k_heads * c->lin_k_dim, nv = c->lin_v_heads;
    const int vt = nv * c->lin_v_dim;
    float *scratch = s->lin_rule + (size_t)ith * delta_rule_scratch_floats(PDL_STATE_CHUNK, c->lin_v_dim);
    long n_tasks = (long)b->n_seqs * nv;
    for (long task; (task = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed)) < n_tasks;) {
        int seg = (int)(task / nv), h = (int)(task % nv), kh = key_head_of(c, h);
        int r0 = b->cu_seqlens[seg];
        kv_state_view st = kv_state(t->kv, b->state_slots[seg], t->rec);
        const float *row0 = s->lin_qkv + (size_t)r0 * cd;
        delta_rule_seg g = {
            .k_dim = c->lin_k_dim, .v_dim = c->lin_v_dim, .chunk = PDL_STATE_CHUNK,
            .S = st.S + (size_t)h * c->lin_k_dim * c->lin_v_dim,
            .chunk_keys = st.keys + (size_t)kh * c->lin_k_dim, .keys_stride = (size_t)kd,
            .chunk_delta = st.delta + (size_t)h * c->lin_v_dim, .delta_stride = (size_t)vt,
            .chunk_decay = st.decay + h, .decay_stride = (size_t)nv,
            .first_pos = b->positions[r0], .n = b->cu_seqlens[seg + 1] - r0,
            .q = row0 + (size_t)kh * c->lin_k_dim, .k = row0 + kd + (size_t)kh * c->lin_k_dim,
            .v = row0 + 2 * (size_t)kd + (size_t)h * c->lin_v_dim, .qkv_stride = (size_t)cd,
            .beta = s->lin_beta + (size_t)r0 * nv + h, .g = s->lin_g + (size_t)r0 * nv + h, .gate_stride = (size_t)nv,
            .o = s->lin_o + (size_t)r0 * vt + (size_t)h * c->lin_v_dim, .o_stride = (size_t)vt,
            .scratch = scratch,
        };
        t->rule(&g);
    }
}

/* After every head: each sequence's keys of its last chunk and its last
 * convolution inputs into its slot, by position (value heads share the
 * keys, so no head writes them while others may still read the old ones). */
static void keep_rows(void *p, int ith, int nth) {
    dn_task *t = p;
    const pdl_model_config *c = t->c;
    const pdl_batch *b = t->b;
    const int cd = conv_dim_of(c), kd = c->lin_k_heads * c->lin_k_dim;
    for (int seg = ith; seg < b->n_seqs; seg += nth) {
        int r0 = b->cu_seqlens[seg], r1 = b->cu_seqlens[seg + 1];
        int last = b->positions[r1 - 1], chunk_start = last - last % PDL_STATE_CHUNK;
        kv_state_view st = kv_state(t->kv, b->state_slots[seg], t->rec);
        for (int r = r0; r < r1; r++) {
            int pos = b->positions[r];
            if (pos >= chunk_start)
                memcpy(st.keys + (size_t)(pos % PDL_STATE_CHUNK) * kd, t->s->lin_qkv + (size_t)r * cd + kd,
                       (size_t)kd * sizeof(float));
            if (r >= r1 - PDL_STATE_RING)
                memcpy(st.ring + (size_t)(pos % PDL_STATE_RING) * cd, t->s->lin_mix + (size_t)r * cd,
                       (size_t)cd * sizeof(float));
        }
    }
}

/* RMSNorm of each value head's output (the norm's weight w, not 1 + w),
 * times silu(z), per row. */
static void gated_norm_rows(void *p, int ith, int nth) {
    dn_task *t = p;
    const pdl_model_config *c = t->c;
    const int vd = c->lin_v_dim, vt = c->lin_v_heads * vd;
    const float *w = t->lw->lin_norm.data;
    long r0, r1;
    threadpool_split_range(t->b->n_tokens, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++)
        for (int h = 0; h < c->lin_v_heads; h++) {
            float *o = t->s->lin_o + (size_t)r * vt + (size_t)h * vd;
            float *z = t->s->lin_z + (size_t)r * vt + (size_t)h * vd;
            t->silu_mul(z, t->s->lin_ones, vd);
            float ss = 0.0f;
            for (int i = 0; i < vd; i++) ss += o[i] * o[i];
            float inv = 1.0f / sqrtf(ss / (float)vd + c->rms_eps);
            for (int i = 0; i < vd; i++) o[i] = w[i] * (o[i] * inv) * z[i];
        }
}

int deltanet_layer(pdl_context *ctx, pdl_kv_cache *kv, const pdl_batch *b, int layer, const float *xn, float *out,
                   bool accumulate, pdl_error *err) {
    const pdl_model_config *c = &ctx->model->cfg;
    const pdl_layer_weights *lw = &ctx->model->w.layers[layer];
    pdl_forward_scratch *s = &ctx->scratch;
    const int n = b->n_tokens, cd = conv_dim_of(c), vt = c->lin_v_heads * c->lin_v_dim;
    pdl_matmul_out proj[4] = {
        {.y = s->lin_mix, .ldy = cd, .w = &lw->lin_qkv},
        {.y = s->lin_z, .ldy = vt, .w = &lw->lin_z},
        {.y = s->lin_beta, .ldy = c->lin_v_heads, .w = &lw->lin_b},
        {.y = s->lin_g, .ldy = c->lin_v_heads, .w = &lw->lin_a},
    };
    if (matmul_shared(&ctx->kernels, ctx->pool, &s->kernel, xn, n, proj, 4))
        return fwd_kernel_failed(ctx, layer, "linear attention projections", err);
    dn_task t = {.c = c, .lw = lw, .s = s, .kv = kv, .b = b, .rec = c->kind_index[layer], .rule = ctx->delta_rule,
                 .silu_mul = ctx->gates.silu_mul};
    int row_threads = threadpool_threads_for(ctx->pool, (double)n * cd, 16384.0);
    threadpool_run_n(ctx->pool, row_threads, conv_rows, &t);
    atomic_store_explicit(&t.next, 0, memory_order_relaxed);
    double rule_work = (double)n * c->lin_v_heads * c->lin_k_dim * c->lin_v_dim * 4.0;
    threadpool_run_n(ctx->pool, threadpool_threads_for(ctx->pool, rule_work, 65536.0), rule_tasks, &t);
    threadpool_run_n(ctx->pool, b->n_seqs < threadpool_size(ctx->pool) ? b->n_seqs : threadpool_size(ctx->pool),
                     keep_rows, &t);
    threadpool_run_n(ctx->pool, threadpool_threads_for(ctx->pool, (double)n * vt, 16384.0), gated_norm_rows, &t);
    if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, out, c->hidden, s->lin_o, n, &lw->lin_out, NULL, accumulate))
        return fwd_kernel_failed(ctx, layer, "linear attention output", err);
    return 0;
}
