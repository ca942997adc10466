/*
 * sequence.c - running one sequence through the packed-batch forward over
 * a KV cache of its own: blocks taken in order, slot mapping and logits
 * rows for a single segment.
 *
 * The engine builds the same pdl_batch for many sequences at once, with
 * blocks from its block pool, through the same packer (batch_builder.h);
 * this is the one-segment case of `pagedlm logits` and the tests.
 */
#include <stdlib.h>

#include "engine/batch_builder.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "util/error.h"

static int seq_reserve(pdl_kv_cache *kv, pdl_seq *seq, int n_positions, pdl_error *err) {
    int need = (n_positions + kv->block_size - 1) / kv->block_size;
    if (need > seq->cap) {
        int cap = seq->cap ? seq->cap : 8;
        while (cap < need) cap *= 2;
        int32_t *bt = realloc(seq->block_table, (size_t)cap * sizeof *bt);
        if (!bt) return err_fail(err, "out of memory for a block table of %d blocks", cap);
        seq->block_table = bt;
        seq->cap = cap;
    }
    if (need > kv->n_blocks)
        return err_fail(err, "KV cache full: %d positions need %d blocks of %d tokens, %d blocks in the cache",
                        n_positions, need, kv->block_size, kv->n_blocks);
    while (seq->n_blocks < need) seq->block_table[seq->n_blocks] = seq->n_blocks, seq->n_blocks++;
    return 0;
}

void pdl_seq_release(pdl_kv_cache *kv, pdl_seq *seq) {
    (void)kv;
    free(seq->block_table);
    if (seq->packer) bb_free(seq->packer);
    free(seq->packer);
    seq->block_table = NULL;
    seq->packer = NULL;
    seq->n_blocks = seq->cap = seq->n_cached = 0;
}

int pdl_seq_forward(pdl_context *ctx, pdl_kv_cache *kv, pdl_seq *seq, const int32_t *tokens, const pdl_row_inputs *in,
                    int n_tokens, pdl_logits_rows rows, float *logits_out, pdl_error *err) {
    const pdl_model *m = pdl_context_model(ctx);
    static const pdl_row_inputs none;
    if (!in) in = &none;
    if (n_tokens <= 0) return err_fail(err, "no tokens to run");
    if (seq->n_cached + n_tokens > m->ctx_size)
        return err_fail(err, "%d tokens after %d cached exceed the context size %d", n_tokens, seq->n_cached,
                        m->ctx_size);
    if (seq_reserve(kv, seq, seq->n_cached + n_tokens, err)) return -1;
    if (!seq->packer) {
        if (!(seq->packer = malloc(sizeof(batch_builder)))) return err_fail(err, "out of memory");
        bb_init(seq->packer, kv->block_size);
    }
    batch_builder *bb = seq->packer;
    if (bb_begin(bb, n_tokens, 1, err)) return -1;
    /* the logits rows, as positions, written where the builder keeps them */
    int32_t *lp = bb->logits_pos;
    int n_logits = 0;
    if (rows == PDL_LOGITS_LAST) lp[n_logits++] = seq->n_cached + n_tokens - 1;
    else if (rows == PDL_LOGITS_ALL)
        for (int i = 0; i < n_tokens; i++) lp[n_logits++] = seq->n_cached + i;
    bb_segment seg = {.block_table = seq->block_table, .start = seq->n_cached, .n = n_tokens, .tokens = tokens,
                      .n_known = n_tokens, .logits_pos = lp, .n_logits = n_logits, .n_inputs = n_tokens,
                      .embd = in->embd, .span_first = in->span_first, .span_last = in->span_last,
                      .rope_pos3 = in->rope_pos3, .mrope = in->rope_pos3 != NULL,
                      /* a hybrid model's cache made by pdl_kv_cache_create has one state slot: this sequence's */
                      .recurrent = kv->n_state_slots > 0, .state_slot = 0,
                      .lora = seq->lora, .lora_scale = seq->lora_scale};
    if (bb_add(bb, &seg, err)) return -1;
    pdl_batch b = *bb_finish(bb, false);
    int rc = pdl_forward(ctx, kv, &b, logits_out, err);
    if (rc == 0) seq->n_cached += n_tokens;
    return rc;
}
