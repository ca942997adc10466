/*
 * context.c - creating and freeing a pdl_context, the run state of
 * forwards over one loaded model (context.h). The forward itself is
 * forward.c's; not for anything that outlives a context.
 */
#include <stdlib.h>

#include "kernels/cpu_features.h"
#include "model/context.h"
#include "util/error.h"

int pdl_context_create(pdl_context **out, const pdl_model *model, const pdl_context_options *opts, pdl_error *err) {
    *out = NULL;
    if (!model) return err_fail(err, "context: no model");
    pdl_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return err_fail(err, "context: out of memory");
    ctx->model = model;
    /* the model's own family where its options named one, else the one in effect now */
    ctx->kernels = model->kernels_chosen ? model->kernels : *matmul_kernels_active();
    attn_table_for(ctx->kernels.isa, attn_order(), &ctx->attention);
    ops_gate_table_for(ctx->kernels.isa, &ctx->gates);
    ctx->delta_rule = delta_rule_for(ctx->kernels.isa);
    int threads = opts && opts->n_threads > 0 ? opts->n_threads : model->default_threads;
    ctx->pool = threadpool_new(threads);
    if (!ctx->pool) {
        free(ctx);
        return err_fail(err, "context: cannot start %d worker threads", threads);
    }
    *out = ctx;
    return 0;
}

void pdl_context_free(pdl_context *ctx) {
    if (!ctx) return;
    threadpool_free(ctx->pool);
    pdl_forward_scratch *s = &ctx->scratch;
    free(s->x), free(s->xn), free(s->q), free(s->k), free(s->v), free(s->attn), free(s->branch);
    free(s->gate), free(s->up), free(s->scores), free(s->normed_out);
    free(s->full_normed), free(s->full_logits), free(s->rope_cs), free(s->rope_cs_local), free(s->mtp_in);
    moe_scratch_free(s);
    hybrid_scratch_free(s);
    scratch_free(&s->kernel);
    free(ctx);
}

const pdl_model *pdl_context_model(const pdl_context *ctx) { return ctx->model; }

int pdl_context_threads(const pdl_context *ctx) { return threadpool_size(ctx->pool); }

uint64_t pdl_context_expert_runs(const pdl_context *ctx) { return ctx->moe_expert_runs; }
