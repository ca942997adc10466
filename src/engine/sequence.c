/*
 * sequence.c - running one sequence through the packed-batch forward over
 * a KV cache of its own: blocks taken in order, slot mapping and logits
 * rows for a single segment.
 *
 * The engine builds the same pdl_batch for many sequences at once, with
 * blocks from its block pool; this is the one-sequence case of `pagedlm
 * logits` and the tests.
 */
#include <stdlib.h>

#include "model/kv_cache.h"
#include "model/model.h"
#include "util/error.h"

static int seq_reserve(pdl_kv_cache *kv, pdl_seq *seq, int n_positions, pdl_error *err) {
    int need = (n_positions + kv->block_size - 1) / kv->block_size;
    if (need > seq->cap) {
        int cap = seq->cap ? seq->cap : 8;
        while (cap < need) cap *= 2;
        int32_t *bt = realloc(seq->block_table, (size_t)cap * sizeof *bt);
        if (!bt) return pdl_fail(err, "out of memory for a block table of %d blocks", cap);
        seq->block_table = bt;
        seq->cap = cap;
    }
    if (need > kv->n_blocks)
        return pdl_fail(err, "KV cache full: %d positions need %d blocks of %d tokens, %d blocks in the cache",
                        n_positions, need, kv->block_size, kv->n_blocks);
    while (seq->n_blocks < need) seq->block_table[seq->n_blocks] = seq->n_blocks, seq->n_blocks++;
    return 0;
}

void pdl_seq_release(pdl_kv_cache *kv, pdl_seq *seq) {
    (void)kv;
    free(seq->block_table);
    free(seq->scratch);
    seq->block_table = NULL;
    seq->scratch = NULL;
    seq->n_blocks = seq->cap = seq->n_cached = seq->scratch_cap = 0;
}

int pdl_seq_forward(pdl_context *ctx, pdl_kv_cache *kv, pdl_seq *seq, const int32_t *tokens, const pdl_row_inputs *in,
                    int n_tokens, pdl_logits_rows rows, float *logits_out, pdl_error *err) {
    const pdl_model *m = pdl_context_model(ctx);
    static const pdl_row_inputs none;
    if (!in) in = &none;
    if (n_tokens <= 0) return pdl_fail(err, "no tokens to run");
    if (seq->n_cached + n_tokens > m->ctx_size)
        return pdl_fail(err, "%d tokens after %d cached exceed the context size %d", n_tokens, seq->n_cached,
                        m->ctx_size);
    if (seq_reserve(kv, seq, seq->n_cached + n_tokens, err)) return -1;
    if (n_tokens * 3 > seq->scratch_cap) {
        int32_t *nb = realloc(seq->scratch, (size_t)n_tokens * 3 * sizeof *nb);
        if (!nb) return pdl_fail(err, "out of memory");
        seq->scratch = nb;
        seq->scratch_cap = n_tokens * 3;
    }
    int32_t *buf = seq->scratch;
    int32_t *positions = buf, *slots = buf + n_tokens, *logits_idx = buf + 2 * n_tokens;
    for (int i = 0; i < n_tokens; i++) {
        int pos = seq->n_cached + i;
        positions[i] = pos;
        slots[i] = seq->block_table[pos / kv->block_size] * kv->block_size + pos % kv->block_size;
    }
    int n_logits = 0;
    if (rows == PDL_LOGITS_LAST) logits_idx[n_logits++] = n_tokens - 1;
    else if (rows == PDL_LOGITS_ALL)
        for (int i = 0; i < n_tokens; i++) logits_idx[n_logits++] = i;
    int32_t cu[2] = {0, n_tokens};
    const int32_t *tables[1] = {seq->block_table};
    pdl_batch b = {
        .n_tokens = n_tokens, .token_ids = tokens, .positions = positions, .slot_mapping = slots,
        .n_seqs = 1, .cu_seqlens = cu, .block_tables = tables,
        .n_logits = n_logits, .logits_indices = logits_idx, .embd = in->embd,
        .span_first = in->span_first, .span_last = in->span_last, .rope_pos3 = in->rope_pos3,
    };
    int rc = pdl_forward(ctx, kv, &b, logits_out, err);
    if (rc == 0) seq->n_cached += n_tokens;
    return rc;
}
