/*
 * moe.c - the MLP of a mixture-of-experts layer over a packed batch:
 * router, top-k, the chosen experts, the shared expert.
 *
 * For n rows of xn (n, hidden):
 *   1. router logits (n, E) = xn W_r^T (+ its bias);
 *   2. each row takes its k best experts, highest logit first, the lower id
 *      on a tie (softmax and sigmoid are increasing, so these are the top k
 *      of either), weighted by softmax over all E logits, over the k chosen
 *      (gpt-oss), or by each one's sigmoid, then optionally renormalized to sum 1 and scaled
 *      (moe_route);
 *   3. the (row, rank) choices are grouped by expert (a counting sort:
 *      experts in id order, rows ascending within one), and every expert
 *      with rows runs once over its gathered rows, y = W_down (act(W_gate x)
 *      * W_up x) (experts with biases or gpt-oss's clamped SwiGLU: gate and up
 *      as two products, biases and activation after, the down bias added
 *      to y), through the matmul entry points: an expert's weights are
 *      read once per step however many rows chose it, and a decode step
 *      reads only its k experts;
 *   4. each row sums its k outputs in rank order (then adds the shared
 *      expert, whose down projection accumulates into the sum).
 *
 * Batch invariance: a matmul's row does not depend on the other rows in the
 * call (matmul.h), and a row's sum runs over its own ranking, never in the
 * order experts or rows arrive, so a row's bytes depend only on the row.
 *
 * What it is not for: the attention half of the layer, norms and the
 * residual add (forward.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_ops.h"
#include "kernels/matmul.h"
#include "model/context.h"
#include "model/model.h"
#include "util/error.h"

void moe_route(const pdl_model_config *c, const float *logits, int32_t *sel, float *w) {
    int E = c->n_experts, k = c->n_experts_used;
    /* top k by insertion: a later expert passes an earlier one only when
     * strictly larger, so ties keep the lower id first */
    for (int j = 0; j < k; j++) sel[j] = -1;
    for (int e = 0; e < E; e++) {
        float v = logits[e];
        int at = k;
        while (at > 0 && (sel[at - 1] < 0 || v > logits[sel[at - 1]])) at--;
        if (at == k) continue;
        for (int j = k - 1; j > at; j--) sel[j] = sel[j - 1];
        sel[at] = e;
    }
    double sum = 0;
    if (c->router == PDL_ROUTER_SOFTMAX_TOPK) { /* over the chosen k only: sel[0] holds their max */
        float mx = logits[sel[0]];
        double chosen = 0;
        for (int j = 0; j < k; j++) chosen += exp((double)logits[sel[j]] - mx);
        for (int j = 0; j < k; j++) sum += (w[j] = (float)(exp((double)logits[sel[j]] - mx) / chosen));
    } else if (c->router == PDL_ROUTER_SOFTMAX) {
        float mx = logits[sel[0]];
        double all = 0;
        for (int e = 0; e < E; e++) all += exp((double)logits[e] - mx);
        for (int j = 0; j < k; j++) sum += (w[j] = (float)(exp((double)logits[sel[j]] - mx) / all));
    } else {
        for (int j = 0; j < k; j++) sum += (w[j] = (float)(1.0 / (1.0 + exp(-(double)logits[sel[j]]))));
    }
    for (int j = 0; j < k; j++) {
        if (c->router_norm) w[j] = (float)(w[j] / sum);
        w[j] *= c->router_scale;
    }
}

/* ---- scratch -------------------------------------------------------------- */

static int grow(void **buf, size_t bytes) {
    size_t cap = 0; /* moe_rows_cap tracks what the buffers hold */
    return scratch_grow(buf, &cap, bytes ? bytes : 1) ? 0 : -1;
}

/* The kernels' scratch a MoE layer's matmuls take for n rows: the router
 * and the shared expert over n, the experts over up to n * k gathered rows
 * (matmul_grouped prepares all of them at once), the largest over
 * every layer and expert. */
static size_t matmul_scratch(const pdl_context *ctx, size_t n) {
    const pdl_model *m = ctx->model;
    const pdl_model_config *c = &m->cfg;
    int64_t rows = (int64_t)n, gathered = rows * c->n_experts_used;
    size_t most = 0;
#define MOST(w, r)                                                                  \
    do {                                                                            \
        size_t b_ = (w)->data ? matmul_scratch_bytes(&ctx->kernels, ctx->pool, (w), (r)) : 0;    \
        most = b_ > most ? b_ : most;                                               \
    } while (0)
    for (int l = 0; l < model_weight_layers(c); l++) {
        const pdl_layer_weights *lw = &m->w.layers[l];
        MOST(&lw->router, rows);
        MOST(&lw->sh_gate, rows);
        MOST(&lw->sh_up, rows);
        MOST(&lw->sh_down, rows);
        for (int e = 0; e < c->n_experts; e++) {
            MOST(&lw->exp_gate[e], gathered);
            MOST(&lw->exp_up[e], gathered);
            MOST(&lw->exp_down[e], gathered);
        }
    }
#undef MOST
    return most;
}

static int reserve(pdl_context *ctx, int n, pdl_error *err) {
    const pdl_model *m = ctx->model;
    pdl_forward_scratch *s = &ctx->scratch;
    const pdl_model_config *c = &m->cfg;
    if (s->exp_start == NULL &&
        grow((void **)&s->exp_start, (size_t)(c->n_experts + 1) * sizeof *s->exp_start))
        return err_fail(err, "forward: out of memory for the experts' groups");
    if ((size_t)n <= s->moe_rows_cap) return 0;
    size_t rows = (size_t)n, k = (size_t)c->n_experts_used;
    if (grow((void **)&s->router, rows * c->n_experts * sizeof(float)) ||
        grow((void **)&s->sel, rows * k * sizeof(int32_t)) || grow((void **)&s->sel_w, rows * k * sizeof(float)) ||
        grow((void **)&s->exp_rows, rows * k * sizeof(int32_t)) ||
        grow((void **)&s->out_at, rows * k * sizeof(int32_t)) ||
        grow((void **)&s->xe, rows * k * c->hidden * sizeof(float)) ||
        grow((void **)&s->he, rows * k * c->ffn_expert * sizeof(float)) ||
        grow((void **)&s->ue, rows * k * c->ffn_expert * sizeof(float)) ||
        grow((void **)&s->ye, rows * k * c->hidden * sizeof(float)) ||
        scratch_reserve_bytes(&s->kernel, matmul_scratch(ctx, rows)))
        return err_fail(err, "forward: out of memory for the experts of %d rows", n);
    s->moe_rows_cap = rows;
    return 0;
}

void moe_scratch_free(pdl_forward_scratch *s) {
    free(s->router), free(s->sel), free(s->sel_w), free(s->exp_start), free(s->exp_rows), free(s->out_at);
    free(s->xe), free(s->he), free(s->ue), free(s->ye);
}

/* ---- the layer ------------------------------------------------------------ */

/* Experts with at most this many rows each run grouped: one parallel region
 * for all gate/up products and one for all down products, instead of two
 * per expert (a decode step's k experts are each too small to be worth a
 * region of their own). More rows per expert run expert by expert, each a
 * balanced region over its gathered rows. */
#define GROUPED_MAX_ROWS 4

/* ---- experts with biases or gpt-oss's clamped SwiGLU ------------------------ */

/* Whether the layer's experts run gate and up as two plain products, then
 * add their biases and take the activation here (expert_act_rows), rather
 * than through the gated matmul's fused activation: experts with biases
 * (gpt-oss), whose bias comes before the activation, and the clamped SwiGLU,
 * which the gate tables do not have. */
static bool experts_split(const pdl_model_config *c, const pdl_layer_weights *lw) {
    return c->act == PDL_ACT_SWIGLU_OAI || lw->exp_gate_b.data || lw->exp_up_b.data || lw->exp_down_b.data;
}

typedef struct act_task {
    const pdl_model_config *c;
    const pdl_layer_weights *lw;
    pdl_forward_scratch *s;
    pdl_gate_fn act;    /* the gate table's activation */
    int a0, a1;         /* the rows of he / ue (or ye) to treat */
    int expert;         /* every row's expert, or -1: row a is assignment a, its expert by exp_start */
    bool down;          /* add the down projection's bias to ye instead */
} act_task;

/* he[a] = act(he[a] + b_gate[e], ue[a] + b_up[e]) for assignments a of
 * expert e (or, with down, ye[a] += b_down[e]); rows split over threads,
 * each row's bytes the same whatever the split (the clamped SwiGLU is
 * ops_swiglu_oai_mul's). */
static void expert_act_rows(void *p, int ith, int nth) {
    act_task *t = p;
    const pdl_model_config *c = t->c;
    const pdl_forward_scratch *s = t->s;
    int F = c->ffn_expert, H = c->hidden;
    long r0, r1;
    threadpool_split_range(t->a1 - t->a0, ith, nth, &r0, &r1);
    int e = t->expert < 0 ? 0 : t->expert;
    for (long r = r0; r < r1; r++) {
        int a = t->a0 + (int)r;
        while (t->expert < 0 && s->exp_start[e + 1] <= a) e++;
        if (t->down) {
            if (!t->lw->exp_down_b.data) return;
            const float *b = (const float *)t->lw->exp_down_b.data + (size_t)e * H;
            float *y = s->ye + (size_t)a * H;
            for (int i = 0; i < H; i++) y[i] += b[i];
            continue;
        }
        float *g = s->he + (size_t)a * F, *u = s->ue + (size_t)a * F;
        const float *bg = t->lw->exp_gate_b.data ? (const float *)t->lw->exp_gate_b.data + (size_t)e * F : NULL;
        const float *bu = t->lw->exp_up_b.data ? (const float *)t->lw->exp_up_b.data + (size_t)e * F : NULL;
        if (bg) for (int i = 0; i < F; i++) g[i] += bg[i];
        if (bu) for (int i = 0; i < F; i++) u[i] += bu[i];
        t->act(g, u, F);
    }
}

/* expert_act_rows over rows [a0, a1), all of expert `expert` (or, -1,
 * each assignment's own). */
static void expert_act(pdl_context *ctx, const pdl_layer_weights *lw, pdl_gate_fn act, int a0, int a1, int expert,
                       bool down) {
    const pdl_model_config *c = &ctx->model->cfg;
    if (a1 <= a0 || (down && !lw->exp_down_b.data)) return;
    act_task t = {.c = c, .lw = lw, .s = &ctx->scratch, .act = act,
                  .a0 = a0, .a1 = a1, .expert = expert, .down = down};
    double work = (double)(a1 - a0) * (down ? c->hidden : 8.0 * c->ffn_expert);
    threadpool_run_n(ctx->pool, threadpool_threads_for(ctx->pool, work, 16384.0), expert_act_rows, &t);
}

/* Every chosen expert of the step through matmul_grouped: the gathered
 * inputs xe (assignment order, n * k rows; a single row's k experts all read
 * xn's one row instead), he = act(gate, up) per assignment, then ye = the
 * down projections of he. */
static int moe_grouped(pdl_context *ctx, const pdl_layer_weights *lw, const float *xn, int n, pdl_gate_fn act) {
    const pdl_model_config *c = &ctx->model->cfg;
    bool split = experts_split(c, lw); /* gate and up as plain products, then expert_act */
    pdl_forward_scratch *s = &ctx->scratch;
    int E = c->n_experts, k = c->n_experts_used, H = c->hidden, F = c->ffn_expert;
    const float *x = xn;
    if (n > 1) {
        for (int a = 0; a < n * k; a++)
            memcpy(s->xe + (size_t)a * H, xn + (size_t)(s->exp_rows[a] / k) * H, (size_t)H * sizeof(float));
        x = s->xe;
    }
    pdl_matmul_group g[PDL_MATMUL_GROUP_MAX];
    for (int pass = 0; pass < 2; pass++) { /* gate and up, then down */
        int ng = 0;
        for (int e = 0; e < E; e++) {
            int a0 = s->exp_start[e], cnt = s->exp_start[e + 1] - a0;
            if (cnt == 0) continue;
            if (pass == 0 && split) {
                g[ng++] = (pdl_matmul_group){.w = &lw->exp_gate[e], .y = s->he + (size_t)a0 * F, .ldy = F,
                                             .r0 = n > 1 ? a0 : 0, .n_rows = cnt};
                g[ng++] = (pdl_matmul_group){.w = &lw->exp_up[e], .y = s->ue + (size_t)a0 * F, .ldy = F,
                                             .r0 = n > 1 ? a0 : 0, .n_rows = cnt};
            } else if (pass == 0)
                g[ng++] = (pdl_matmul_group){.w = &lw->exp_gate[e], .w_up = &lw->exp_up[e], .y = s->he + (size_t)a0 * F,
                                             .ldy = F, .r0 = n > 1 ? a0 : 0, .n_rows = cnt};
            else
                g[ng++] = (pdl_matmul_group){.w = &lw->exp_down[e], .y = s->ye + (size_t)a0 * H, .ldy = H, .r0 = a0,
                                             .n_rows = cnt};
            if (ng >= PDL_MATMUL_GROUP_MAX - 1) { /* room for a split expert's two */
                int rc = pass == 0 ? matmul_grouped(&ctx->kernels, ctx->pool, &s->kernel, x, n > 1 ? n * k : 1, g,
                                                    ng, split ? NULL : act, split ? NULL : s->ue)
                                   : matmul_grouped(&ctx->kernels, ctx->pool, &s->kernel, s->he, n * k, g, ng,
                                                    NULL, NULL);
                if (rc) return -1;
                ng = 0;
            }
        }
        int rc = pass == 0 ? matmul_grouped(&ctx->kernels, ctx->pool, &s->kernel, x, n > 1 ? n * k : 1, g, ng,
                                            split ? NULL : act, split ? NULL : s->ue)
                           : matmul_grouped(&ctx->kernels, ctx->pool, &s->kernel, s->he, n * k, g, ng, NULL, NULL);
        if (rc) return -1;
        if (split) expert_act(ctx, lw, act, 0, n * k, -1, pass == 1);
    }
    return 0;
}

typedef struct combine_task {
    const pdl_model *m;
    const pdl_forward_scratch *s; /* the context's */
    const pdl_layer_weights *lw;
    const float *xn;
    float *out;
    float *shared_gate; /* (n) sigmoid(w . x) per row, or NULL */
    int n;
} combine_task;

/* out[r] = sum over rank j of w[r][j] * ye[out_at[r][j]], j = 0, 1, ..;
 * with a gated shared expert, its gate per row. */
static void combine_rows(void *p, int ith, int nth) {
    combine_task *t = p;
    const pdl_model_config *c = &t->m->cfg;
    const pdl_forward_scratch *s = t->s;
    int H = c->hidden, k = c->n_experts_used;
    long r0, r1;
    threadpool_split_range(t->n, ith, nth, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *o = t->out + (size_t)r * H;
        for (int j = 0; j < k; j++) {
            float w = s->sel_w[r * k + j];
            const float *y = s->ye + (size_t)s->out_at[r * k + j] * H;
            if (j == 0)
                for (int i = 0; i < H; i++) o[i] = w * y[i];
            else
                for (int i = 0; i < H; i++) o[i] += w * y[i];
        }
        if (t->shared_gate) {
            const float *x = t->xn + (size_t)r * H, *g = t->lw->sh_gate_w.data;
            double d = 0;
            for (int i = 0; i < H; i++) d += (double)g[i] * x[i];
            t->shared_gate[r] = (float)(1.0 / (1.0 + exp(-d)));
        }
    }
}

/* The layer's index for the message: lw is one of m->w.layers. */
static int moe_failed(const pdl_context *ctx, const pdl_layer_weights *lw, const char *what, pdl_error *err) {
    return fwd_kernel_failed(ctx, (int)(lw - ctx->model->w.layers), what, err);
}

int moe_ffn(pdl_context *ctx, const pdl_layer_weights *lw, const float *xn, int n, float *out, pdl_error *err) {
    const pdl_model *m = ctx->model;
    const pdl_model_config *c = &m->cfg;
    pdl_forward_scratch *s = &ctx->scratch;
    if (reserve(ctx, n, err)) return -1;
    int E = c->n_experts, k = c->n_experts_used, H = c->hidden;
    pdl_gate_fn act = c->act == PDL_ACT_GELU_TANH    ? ctx->gates.gelu_tanh_mul
                      : c->act == PDL_ACT_SWIGLU_OAI ? ctx->gates.swiglu_oai_mul
                                                     : ctx->gates.silu_mul;
    bool split = experts_split(c, lw);

    if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, s->router, E, xn, n, &lw->router, lw->router_b.data, false))
        return moe_failed(ctx, lw, "router", err);
    for (int r = 0; r < n; r++) moe_route(c, s->router + (size_t)r * E, s->sel + r * k, s->sel_w + r * k);

    /* group the choices by expert, rows ascending within each */
    memset(s->exp_start, 0, (size_t)(E + 1) * sizeof *s->exp_start);
    for (int a = 0; a < n * k; a++) s->exp_start[s->sel[a] + 1]++;
    for (int e = 0; e < E; e++) s->exp_start[e + 1] += s->exp_start[e];
    for (int a = 0; a < n * k; a++) { /* a = row * k + rank, in row order */
        int at = s->exp_start[s->sel[a]]++;
        s->exp_rows[at] = a;
        s->out_at[a] = at;
    }
    for (int e = E; e > 0; e--) s->exp_start[e] = s->exp_start[e - 1]; /* the increments moved each start to the next */
    s->exp_start[0] = 0;

    int max_rows = 0, n_active = 0;
    for (int e = 0; e < E; e++) {
        int cnt = s->exp_start[e + 1] - s->exp_start[e];
        max_rows = cnt > max_rows ? cnt : max_rows;
        n_active += cnt > 0;
    }
    if (max_rows <= GROUPED_MAX_ROWS) {
        /* decode-sized: every chosen expert's gate and up in one parallel
         * region, then every down projection in another (moe_grouped) */
        if (moe_grouped(ctx, lw, xn, n, act)) return moe_failed(ctx, lw, "experts", err);
        ctx->moe_expert_runs += (uint64_t)n_active;
    } else {
        for (int e = 0; e < E; e++) {
            int a0 = s->exp_start[e], cnt = s->exp_start[e + 1] - a0;
            if (cnt == 0) continue;
            for (int i = 0; i < cnt; i++)
                memcpy(s->xe + (size_t)i * H, xn + (size_t)(s->exp_rows[a0 + i] / k) * H, (size_t)H * sizeof(float));
            if (split) { /* he, ue at rows [0, cnt): expert_act's assignments [a0, a0 + cnt) shifted */
                pdl_matmul_out gu[2] = {{.y = s->he, .ldy = c->ffn_expert, .w = &lw->exp_gate[e]},
                                        {.y = s->ue, .ldy = c->ffn_expert, .w = &lw->exp_up[e]}};
                if (matmul_shared(&ctx->kernels, ctx->pool, &s->kernel, s->xe, cnt, gu, 2))
                    return moe_failed(ctx, lw, "experts", err);
                expert_act(ctx, lw, act, 0, cnt, e, false);
            } else if (matmul_gated(&ctx->kernels, ctx->pool, &s->kernel, s->he, c->ffn_expert, s->ue, s->xe, cnt,
                                    &lw->exp_gate[e], &lw->exp_up[e], act))
                return moe_failed(ctx, lw, "experts", err);
            if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, s->ye + (size_t)a0 * H, H, s->he, cnt,
                           &lw->exp_down[e], NULL, false))
                return moe_failed(ctx, lw, "experts", err);
            if (split) expert_act(ctx, lw, act, a0, a0 + cnt, e, true);
            ctx->moe_expert_runs++;
        }
    }

    /* the router's logits are spent: its buffer takes the shared gate of each row */
    combine_task t = {.m = m, .s = s, .lw = lw, .xn = xn, .out = out, .n = n, .shared_gate = c->shared_gate ? s->router : NULL};
    threadpool_run_n(ctx->pool, threadpool_threads_for(ctx->pool, (double)n * H * k, 16384.0), combine_rows, &t);

    if (c->ffn_shared > 0) {
        /* out += W_down (g * act(W_gate x) * W_up x): the gate g scales the
         * activation before the down projection (a linear map), which then
         * accumulates into the routed sum */
        if (matmul_gated(&ctx->kernels, ctx->pool, &s->kernel, s->gate, c->ffn_shared, s->up, xn, n, &lw->sh_gate,
                         &lw->sh_up, act))
            return moe_failed(ctx, lw, "shared expert", err);
        if (t.shared_gate)
            for (int r = 0; r < n; r++) {
                float *h = s->gate + (size_t)r * c->ffn_shared;
                for (int i = 0; i < c->ffn_shared; i++) h[i] *= t.shared_gate[r];
            }
        if (matmul_run(&ctx->kernels, ctx->pool, &s->kernel, out, H, s->gate, n, &lw->sh_down, NULL, true))
            return moe_failed(ctx, lw, "shared expert", err);
    }
    return 0;
}
