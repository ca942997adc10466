/*
 * batch_builder.c - packing a pdl_batch segment by segment (batch_builder.h).
 */
#include "engine/batch_builder.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

void bb_init(batch_builder *b, int block_size) {
    memset(b, 0, sizeof *b);
    b->block_size = block_size;
}

void bb_free(batch_builder *b) {
    free(b->token_ids), free(b->positions), free(b->slot_mapping);
    free(b->embd);
    free(b->span_first), free(b->span_last), free(b->rope_pos3);
    free(b->logits_indices), free(b->logits_pos);
    free(b->cu_seqlens), free(b->logits_cu_seqlens), free(b->block_tables), free(b->state_slots);
    free(b->lora), free(b->lora_scale);
    memset(b, 0, sizeof *b);
}

static int grow_i32(int32_t **p, size_t n) {
    int32_t *q = realloc(*p, (n ? n : 1) * sizeof *q);
    if (!q) return -1;
    *p = q;
    return 0;
}

int bb_begin(batch_builder *b, int max_rows, int max_seqs, pdl_error *err) {
    if (max_rows > b->rows_cap) {
        size_t rows = (size_t)max_rows;
        if (grow_i32(&b->token_ids, rows) || grow_i32(&b->positions, rows) || grow_i32(&b->slot_mapping, rows) ||
            grow_i32(&b->logits_indices, rows) || grow_i32(&b->logits_pos, rows) ||
            grow_i32(&b->span_first, rows) || grow_i32(&b->span_last, rows) || grow_i32(&b->rope_pos3, rows * 3))
            return err_fail(err, "batch: out of memory for %d rows", max_rows);
        const float **em = realloc(b->embd, rows * sizeof *em);
        if (!em) return err_fail(err, "batch: out of memory for %d rows", max_rows);
        b->embd = em;
        b->rows_cap = max_rows;
    }
    if (max_seqs + 1 > b->seqs_cap) {
        size_t n = (size_t)max_seqs + 1;
        const int32_t **bt = realloc(b->block_tables, n * sizeof *bt);
        if (!bt) return err_fail(err, "batch: out of memory for %d sequences", max_seqs);
        b->block_tables = bt;
        const pdl_lora **lo = realloc(b->lora, n * sizeof *lo);
        if (!lo) return err_fail(err, "batch: out of memory for %d sequences", max_seqs);
        b->lora = lo;
        float *ls = realloc(b->lora_scale, n * sizeof *ls);
        if (!ls) return err_fail(err, "batch: out of memory for %d sequences", max_seqs);
        b->lora_scale = ls;
        if (grow_i32(&b->cu_seqlens, n) || grow_i32(&b->logits_cu_seqlens, n) || grow_i32(&b->state_slots, n))
            return err_fail(err, "batch: out of memory for %d sequences", max_seqs);
        b->seqs_cap = max_seqs + 1;
    }
    b->max_rows = max_rows;
    b->max_seqs = max_seqs;
    b->n_rows = b->n_seqs = b->n_logits = 0;
    b->any_embd = b->any_span = b->any_pos3 = b->any_state = b->any_lora = false;
    b->cu_seqlens[0] = 0;
    b->logits_cu_seqlens[0] = 0;
    return 0;
}

int bb_add(batch_builder *b, const bb_segment *s, pdl_error *err) {
    if (b->n_seqs + 1 > b->max_seqs || b->n_rows + s->n > b->max_rows)
        return err_fail(err, "batch: segment %d (%d rows) past the %d rows in %d segments the batch was begun for",
                        b->n_seqs, s->n, b->max_rows, b->max_seqs);
    int bs = b->block_size, row0 = b->n_rows, n_in = s->n_inputs < s->n ? s->n_inputs : s->n;
    for (int i = 0; i < s->n; i++) {
        int row = row0 + i, pos = s->start + i;
        b->token_ids[row] = i < s->n_known ? s->tokens[i] : s->draft[i - s->n_known];
        b->positions[row] = pos;
        b->slot_mapping[row] = s->block_table[pos / bs] * bs + pos % bs;
        /* an image row: its encoded vector instead of the token's embedding */
        b->embd[row] = s->embd && i < n_in ? s->embd[i] : NULL;
        b->any_embd |= b->embd[row] != NULL;
        /* a row of a two-way span (the scheduler keeps the span's rest in this step) */
        bool span = s->span_first && i < n_in;
        b->span_first[row] = span ? s->span_first[i] : pos;
        b->span_last[row] = span ? s->span_last[i] : pos;
        b->any_span |= span;
        /* M-RoPE: the given rows as laid out, later rows (decode, drafts)
         * at position + delta in all three */
        int32_t *p3 = b->rope_pos3 + 3 * row;
        if (s->rope_pos3 && i < n_in) {
            memcpy(p3, s->rope_pos3 + 3 * i, 3 * sizeof *p3);
        } else {
            p3[0] = p3[1] = p3[2] = pos + s->rope_delta;
        }
    }
    b->any_pos3 |= s->mrope || s->rope_pos3 != NULL;
    for (int j = 0; j < s->n_logits; j++) {
        int32_t pos = s->logits_pos[j];
        if (pos < s->start || pos >= s->start + s->n)
            return err_fail(err, "batch: segment %d's logits row at position %d is outside its rows [%d, %d)",
                            b->n_seqs, pos, s->start, s->start + s->n);
        b->logits_pos[b->n_logits] = pos;
        b->logits_indices[b->n_logits++] = row0 + pos - s->start;
    }
    b->n_rows += s->n;
    b->block_tables[b->n_seqs] = s->block_table;
    b->state_slots[b->n_seqs] = s->recurrent ? s->state_slot : -1;
    b->any_state |= s->recurrent;
    b->lora[b->n_seqs] = s->lora;
    b->lora_scale[b->n_seqs] = s->lora_scale == 0.0f ? 1.0f : s->lora_scale;
    b->any_lora |= s->lora != NULL;
    b->n_seqs++;
    b->cu_seqlens[b->n_seqs] = b->n_rows;
    b->logits_cu_seqlens[b->n_seqs] = b->n_logits;
    return 0;
}

const pdl_batch *bb_finish(batch_builder *b, bool full_logits) {
    b->batch = (pdl_batch){
        .n_tokens = b->n_rows, .token_ids = b->token_ids, .positions = b->positions,
        .slot_mapping = b->slot_mapping, .n_seqs = b->n_seqs, .cu_seqlens = b->cu_seqlens,
        .block_tables = b->block_tables, .n_logits = b->n_logits, .logits_indices = b->logits_indices,
        .full_logits = full_logits, .embd = b->any_embd ? b->embd : NULL,
        .span_first = b->any_span ? b->span_first : NULL, .span_last = b->any_span ? b->span_last : NULL,
        .rope_pos3 = b->any_pos3 ? b->rope_pos3 : NULL, .state_slots = b->any_state ? b->state_slots : NULL,
        .lora = b->any_lora ? b->lora : NULL, .lora_scale = b->any_lora ? b->lora_scale : NULL,
    };
    return &b->batch;
}
