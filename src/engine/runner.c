/*
 * runner.c - packing a step's plan into a pdl_batch (one batch_builder
 * segment per entry) and running it; answering for each entry's logits
 * rows afterwards.
 */
#include "engine/runner.h"

#include <stdlib.h>
#include <string.h>

#include "model/kv_cache.h"
#include "util/error.h"

int runner_init(runner *r, const pdl_model *model, pdl_kv_cache *kv, bool full_logits, pdl_error *err) {
    memset(r, 0, sizeof *r);
    r->kv = kv;
    r->full_logits = full_logits;
    pdl_model_info info;
    pdl_model_get_info(model, &info);
    r->vocab = info.vocab;
    bb_init(&r->bb, kv->block_size);
    /* threads as the model was loaded with (pdl_model_options.n_threads) */
    return pdl_context_create(&r->ctx, model, NULL, err);
}

void runner_free(runner *r) {
    bb_free(&r->bb);
    free(r->logits);
    pdl_context_free(r->ctx);
    memset(r, 0, sizeof *r);
}
int runner_logits_rows(const sched_entry *e, int32_t *rows_out) {
    const eng_seq *q = e->seq;
    int end = e->start + e->n_new, n = 0;
    if (q->req->params.pooling != PDL_POOLING_NONE) return 0; /* embeddings: hidden rows only (engine_step.c) */
    if (e->verifies_drafts) {
        /* its last token and every draft predict */
        for (int r = e->start; r < end; r++) rows_out[n++] = r;
        return n;
    }
    if (q->req->params.prompt_logprobs >= 0) {
        /* row r predicts prompt token r + 1 */
        int first = q->logprobs.prompt_next - 1;
        if (first < e->start) first = e->start;
        for (int r = first; r < end && r + 1 < q->n_prompt; r++) rows_out[n++] = r;
    }
    if (end == q->n_tokens && (n == 0 || rows_out[n - 1] != end - 1)) rows_out[n++] = end - 1;
    return n;
}

int runner_pack(runner *r, const sched_output *plan, pdl_error *err) {
    batch_builder *bb = &r->bb;
    if (bb_begin(bb, plan->n_tokens, plan->n_entries, err)) return err_fail_prefix(err, "runner");
    for (int k = 0; k < plan->n_entries; k++) {
        const sched_entry *e = &plan->entries[k];
        const eng_seq *q = e->seq;
        const eng_request *rq = q->req;
        /* rows past the known tokens are speculative drafts; the prompt's
         * rows carry the request's image inputs */
        int known = q->n_tokens - e->start, in = q->n_prompt - e->start;
        int32_t *logits_pos = bb->logits_pos + bb->n_logits; /* written in place: bb_add keeps them there */
        int n_logits = runner_logits_rows(e, logits_pos);
        bb_segment seg = {
            .block_table = q->cache.blocks, .start = e->start, .n = e->n_new,
            .tokens = q->tokens + e->start, .n_known = known < e->n_new ? known : e->n_new, .draft = q->spec.draft,
            .logits_pos = logits_pos, .n_logits = n_logits,
            .n_inputs = in > 0 ? in : 0, .mrope = rq->rope_pos3 != NULL, .rope_delta = rq->rope_delta,
            .recurrent = q->cache.state_slot >= 0, .state_slot = q->cache.state_slot,
            .lora = rq->params.lora, .lora_scale = rq->params.lora_scale,
        };
        if (in > 0) {
            seg.embd = rq->row_embd ? rq->row_embd + e->start : NULL;
            seg.span_first = rq->span_first ? rq->span_first + e->start : NULL;
            seg.span_last = rq->span_last ? rq->span_last + e->start : NULL;
            seg.rope_pos3 = rq->rope_pos3 ? rq->rope_pos3 + 3 * (size_t)e->start : NULL;
        }
        if (bb_add(bb, &seg, err)) return err_fail_prefix(err, "runner");
    }
    r->batch = *bb_finish(bb, r->full_logits);
    return 0;
}

runner_rows runner_entry_rows(const runner *r, int k) {
    int first = r->bb.logits_cu_seqlens[k];
    return (runner_rows){.logits = r->logits + (size_t)first * (size_t)r->vocab,
                         .positions = r->bb.logits_pos + first,
                         .n = r->bb.logits_cu_seqlens[k + 1] - first};
}

int runner_execute(runner *r, const sched_output *plan, pdl_error *err) {
    if (runner_pack(r, plan, err)) return -1;
    size_t need = (size_t)(r->batch.n_logits ? r->batch.n_logits : 1);
    if (need > r->logits_cap) {
        float *l = realloc(r->logits, need * (size_t)r->vocab * sizeof *l);
        if (!l) return err_fail(err, "runner: out of memory for %zu logits rows", need);
        r->logits = l;
        r->logits_cap = need;
    }
    return pdl_forward(r->ctx, r->kv, &r->batch, r->logits, err);
}

