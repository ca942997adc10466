/*
 * runner.c - packing a step's plan into a pdl_batch and running it.
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
    /* threads as the model was loaded with (pdl_model_options.n_threads) */
    return pdl_context_create(&r->ctx, model, NULL, err);
}

void runner_free(runner *r) {
    free(r->token_ids), free(r->positions), free(r->slot_mapping), free(r->logits_indices);
    free(r->embd);
    free(r->span_first), free(r->span_last), free(r->rope_pos3);
    free(r->cu_seqlens), free(r->logits_cu_seqlens), free(r->block_tables);
    free(r->logits);
    pdl_context_free(r->ctx);
    memset(r, 0, sizeof *r);
}

int runner_logits_rows(const sched_entry *e, int32_t *rows_out) {
    const eng_seq *q = e->seq;
    int end = e->start + e->n_new, n = 0;
    if (e->start == q->n_tokens - 1 && e->n_new > 1) {
        /* a decode with drafts: its last token and every draft predict */
        for (int r = e->start; r < end; r++) rows_out[n++] = r;
        return n;
    }
    if (q->req->params.prompt_logprobs >= 0) {
        /* row r predicts prompt token r + 1 */
        int first = q->prompt_logprobs_next - 1;
        if (first < e->start) first = e->start;
        for (int r = first; r < end && r + 1 < q->n_prompt; r++) rows_out[n++] = r;
    }
    if (end == q->n_tokens && (n == 0 || rows_out[n - 1] != end - 1)) rows_out[n++] = end - 1;
    return n;
}

static int grow_i32(int32_t **p, size_t n) {
    int32_t *q = realloc(*p, (n ? n : 1) * sizeof *q);
    if (!q) return -1;
    *p = q;
    return 0;
}

int runner_pack(runner *r, const sched_output *plan, pdl_error *err) {
    int rows = plan->n_tokens, ents = plan->n_entries;
    if (rows > r->rows_cap) {
        if (grow_i32(&r->token_ids, rows) || grow_i32(&r->positions, rows) || grow_i32(&r->slot_mapping, rows) ||
            grow_i32(&r->logits_indices, rows) || grow_i32(&r->span_first, rows) || grow_i32(&r->span_last, rows) ||
            grow_i32(&r->rope_pos3, (size_t)rows * 3))
            return pdl_fail(err, "runner: out of memory for %d rows", rows);
        const float **em = realloc(r->embd, (size_t)rows * sizeof *em);
        if (!em) return pdl_fail(err, "runner: out of memory for %d rows", rows);
        r->embd = em;
        r->rows_cap = rows;
    }
    if (ents + 1 > r->entries_cap) {
        const int32_t **bt = realloc(r->block_tables, (size_t)(ents + 1) * sizeof *bt);
        if (!bt) return pdl_fail(err, "runner: out of memory");
        r->block_tables = bt;
        if (grow_i32(&r->cu_seqlens, ents + 1) || grow_i32(&r->logits_cu_seqlens, ents + 1))
            return pdl_fail(err, "runner: out of memory");
        r->entries_cap = ents + 1;
    }
    int bs = r->kv->block_size, row = 0, n_logits = 0;
    bool any_embd = false, any_span = false, any_pos3 = false;
    r->cu_seqlens[0] = 0;
    r->logits_cu_seqlens[0] = 0;
    for (int k = 0; k < ents; k++) {
        const sched_entry *e = &plan->entries[k];
        const eng_seq *q = e->seq;
        for (int i = 0; i < e->n_new; i++, row++) {
            int pos = e->start + i;
            /* past the known tokens: speculative drafts */
            r->token_ids[row] = pos < q->n_tokens ? q->tokens[pos] : q->draft[pos - q->n_tokens];
            r->positions[row] = pos;
            r->slot_mapping[row] = q->blocks[pos / bs] * bs + pos % bs;
            /* an image row: its encoded vector instead of the token's embedding */
            r->embd[row] = q->req->row_embd && pos < q->n_prompt ? q->req->row_embd[pos] : NULL;
            any_embd |= r->embd[row] != NULL;
            /* a row of a two-way span (the scheduler keeps the span's rest in this step) */
            bool span = q->req->span_first && pos < q->n_prompt;
            r->span_first[row] = span ? q->req->span_first[pos] : pos;
            r->span_last[row] = span ? q->req->span_last[pos] : pos;
            any_span |= span;
            /* M-RoPE: the prompt's rows as the request laid them out, later
             * rows (decode, drafts) at index + delta in all three */
            int32_t *p3 = r->rope_pos3 + 3 * row;
            if (q->req->rope_pos3 && pos < q->n_prompt) {
                memcpy(p3, q->req->rope_pos3 + 3 * pos, 3 * sizeof *p3);
            } else {
                p3[0] = p3[1] = p3[2] = pos + q->req->rope_delta;
            }
            any_pos3 |= q->req->rope_pos3 != NULL;
        }
        r->cu_seqlens[k + 1] = row;
        r->block_tables[k] = q->blocks;
        /* logits rows of this entry, as batch rows */
        int n = runner_logits_rows(e, r->logits_indices + n_logits);
        for (int j = 0; j < n; j++) r->logits_indices[n_logits + j] += r->cu_seqlens[k] - e->start;
        n_logits += n;
        r->logits_cu_seqlens[k + 1] = n_logits;
    }
    r->batch = (pdl_batch){
        .n_tokens = rows, .token_ids = r->token_ids, .positions = r->positions, .slot_mapping = r->slot_mapping,
        .n_seqs = ents, .cu_seqlens = r->cu_seqlens, .block_tables = r->block_tables,
        .n_logits = n_logits, .logits_indices = r->logits_indices, .full_logits = r->full_logits,
        .embd = any_embd ? r->embd : NULL,
        .span_first = any_span ? r->span_first : NULL, .span_last = any_span ? r->span_last : NULL,
        .rope_pos3 = any_pos3 ? r->rope_pos3 : NULL,
    };
    return 0;
}

int runner_execute(runner *r, const sched_output *plan, pdl_error *err) {
    if (runner_pack(r, plan, err)) return -1;
    size_t need = (size_t)(r->batch.n_logits ? r->batch.n_logits : 1);
    if (need > r->logits_cap) {
        float *l = realloc(r->logits, need * (size_t)r->vocab * sizeof *l);
        if (!l) return pdl_fail(err, "runner: out of memory for %zu logits rows", need);
        r->logits = l;
        r->logits_cap = need;
    }
    return pdl_forward(r->ctx, r->kv, &r->batch, r->logits, err);
}
