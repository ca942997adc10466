/*
 * test_batch_builder.c - the engine's one batch packer
 * (src/engine/batch_builder.c): segments laid one after another, tokens
 * then drafts, slots from each segment's block table, logits rows as batch
 * rows, image-row inputs only where given (defaults elsewhere, absent from
 * the batch when no segment gave them), and the errors of a segment that
 * does not fit what the batch was begun for. Needs no model.
 */
#include <string.h>

#include "engine/batch_builder.h"
#include "test_util.h"

/* Two segments, block size 4: a decode with two drafts over blocks {7, 3}
 * at positions 5..7, then a prompt chunk over block {9} at 0..2 whose last
 * row needs logits. */
static void test_segments_pack_tokens_drafts_slots_and_logits_rows(void) {
    batch_builder b;
    bb_init(&b, 4);
    pdl_error err;
    REQUIRE(bb_begin(&b, 6, 2, &err) == 0);
    int32_t toks_a[1] = {42}, drafts[2] = {50, 51}, logits_a[3] = {5, 6, 7}, blocks_a[2] = {7, 3};
    bb_segment a = {.block_table = blocks_a, .start = 5, .n = 3, .tokens = toks_a, .n_known = 1, .draft = drafts,
                    .logits_pos = logits_a, .n_logits = 3};
    REQUIRE(bb_add(&b, &a, &err) == 0);
    int32_t toks_b[3] = {1, 2, 3}, logits_b[1] = {2}, blocks_b[1] = {9};
    bb_segment c = {.block_table = blocks_b, .start = 0, .n = 3, .tokens = toks_b, .n_known = 3,
                    .logits_pos = logits_b, .n_logits = 1};
    REQUIRE(bb_add(&b, &c, &err) == 0);
    const pdl_batch *bt = bb_finish(&b, true);
    CHECK_EQ_INT(bt->n_tokens, 6);
    CHECK_EQ_INT(bt->n_seqs, 2);
    const int32_t ids[6] = {42, 50, 51, 1, 2, 3}, pos[6] = {5, 6, 7, 0, 1, 2};
    /* slot = block * 4 + pos % 4: position 5..7 in block_a[1] = 3 */
    const int32_t slots[6] = {3 * 4 + 1, 3 * 4 + 2, 3 * 4 + 3, 9 * 4 + 0, 9 * 4 + 1, 9 * 4 + 2};
    const int32_t cu[3] = {0, 3, 6}, li[4] = {0, 1, 2, 5}, lcu[3] = {0, 3, 4};
    CHECK(memcmp(bt->token_ids, ids, sizeof ids) == 0);
    CHECK(memcmp(bt->positions, pos, sizeof pos) == 0);
    CHECK(memcmp(bt->slot_mapping, slots, sizeof slots) == 0);
    CHECK(memcmp(bt->cu_seqlens, cu, sizeof cu) == 0);
    CHECK_EQ_INT(bt->n_logits, 4);
    CHECK(memcmp(bt->logits_indices, li, sizeof li) == 0);
    CHECK(memcmp(b.logits_cu_seqlens, lcu, sizeof lcu) == 0);
    CHECK_EQ_INT(b.logits_pos[3], 2);
    CHECK(bt->block_tables[0] == blocks_a && bt->block_tables[1] == blocks_b);
    CHECK(bt->full_logits);
    CHECK(bt->embd == NULL && bt->span_first == NULL && bt->span_last == NULL && bt->rope_pos3 == NULL);
    bb_free(&b);
}

/* Row inputs cover the first n_inputs rows; rows after them get the
 * token's embedding, a span of their own position, and M-RoPE positions
 * of position + delta (also a segment with M-RoPE but no given rows). */
static void test_row_inputs_cover_given_rows_and_default_the_rest(void) {
    batch_builder b;
    bb_init(&b, 16);
    pdl_error err;
    REQUIRE(bb_begin(&b, 5, 2, &err) == 0);
    float v0[2] = {1, 2}, v1[2] = {3, 4};
    const float *embd[2] = {v0, v1};
    int32_t first[2] = {0, 0}, last[2] = {1, 1}, p3[6] = {0, 0, 0, 0, 0, 1};
    int32_t toks[3] = {7, 7, 8}, blocks[1] = {0};
    bb_segment s = {.block_table = blocks, .start = 0, .n = 3, .tokens = toks, .n_known = 3, .n_inputs = 2,
                    .embd = embd, .span_first = first, .span_last = last, .rope_pos3 = p3, .mrope = true,
                    .rope_delta = -4};
    REQUIRE(bb_add(&b, &s, &err) == 0);
    /* a decode of another M-RoPE sequence: no given rows */
    int32_t tok2[2] = {9, 9}, blocks2[1] = {1};
    bb_segment d = {.block_table = blocks2, .start = 1, .n = 2, .tokens = tok2, .n_known = 2, .mrope = true,
                    .rope_delta = 10};
    REQUIRE(bb_add(&b, &d, &err) == 0);
    const pdl_batch *bt = bb_finish(&b, false);
    REQUIRE(bt->embd && bt->span_first && bt->span_last && bt->rope_pos3);
    CHECK(bt->embd[0] == v0 && bt->embd[1] == v1 && bt->embd[2] == NULL && bt->embd[3] == NULL);
    const int32_t sf[5] = {0, 0, 2, 1, 2}, sl[5] = {1, 1, 2, 1, 2};
    CHECK(memcmp(bt->span_first, sf, sizeof sf) == 0);
    CHECK(memcmp(bt->span_last, sl, sizeof sl) == 0);
    const int32_t r3[15] = {0, 0, 0, 0, 0, 1, -2, -2, -2, 11, 11, 11, 12, 12, 12};
    CHECK(memcmp(bt->rope_pos3, r3, sizeof r3) == 0);
    CHECK_EQ_INT(bt->n_logits, 0);
    bb_free(&b);
}

/* A segment past the rows or segments the batch was begun for, or with a
 * logits row outside its rows, is an error with a message; the buffers
 * are reused by the next batch. */
static void test_a_segment_that_does_not_fit_is_an_error(void) {
    batch_builder b;
    bb_init(&b, 4);
    pdl_error err;
    REQUIRE(bb_begin(&b, 2, 1, &err) == 0);
    int32_t toks[3] = {1, 2, 3}, blocks[1] = {0}, outside[1] = {3};
    bb_segment s = {.block_table = blocks, .start = 0, .n = 3, .tokens = toks, .n_known = 3};
    CHECK(bb_add(&b, &s, &err) != 0);
    CHECK_CONTAINS(err.message, "rows");
    REQUIRE(bb_begin(&b, 3, 1, &err) == 0);
    s.logits_pos = outside;
    s.n_logits = 1;
    CHECK(bb_add(&b, &s, &err) != 0);
    CHECK_CONTAINS(err.message, "outside");
    REQUIRE(bb_begin(&b, 3, 1, &err) == 0);
    s.n_logits = 0;
    REQUIRE(bb_add(&b, &s, &err) == 0);
    CHECK(bb_add(&b, &s, &err) != 0); /* a second segment: begun for one */
    CHECK_EQ_INT(bb_finish(&b, false)->n_tokens, 3);
    bb_free(&b);
}

/* A hybrid model's segments name their recurrent state slots in
 * pdl_batch.state_slots, one per segment; a batch of segments without
 * slots has none (NULL: what a model without recurrent layers gets). */
static void test_state_slots_one_per_segment_only_when_given(void) {
    batch_builder b;
    bb_init(&b, 4);
    pdl_error err;
    int32_t toks[2] = {1, 2}, blocks[1] = {0}, blocks2[1] = {1};
    bb_segment a = {.block_table = blocks, .start = 0, .n = 2, .tokens = toks, .n_known = 2,
                    .recurrent = true, .state_slot = 5};
    bb_segment c = {.block_table = blocks2, .start = 2, .n = 1, .tokens = toks, .n_known = 1,
                    .recurrent = true, .state_slot = 0};
    REQUIRE(bb_begin(&b, 3, 2, &err) == 0);
    REQUIRE(bb_add(&b, &a, &err) == 0);
    REQUIRE(bb_add(&b, &c, &err) == 0);
    const pdl_batch *batch = bb_finish(&b, false);
    REQUIRE(batch->state_slots != NULL);
    CHECK_EQ_INT(batch->state_slots[0], 5);
    CHECK_EQ_INT(batch->state_slots[1], 0);
    a.recurrent = c.recurrent = false; /* the next batch, reusing the buffers */
    REQUIRE(bb_begin(&b, 3, 2, &err) == 0);
    REQUIRE(bb_add(&b, &a, &err) == 0);
    REQUIRE(bb_add(&b, &c, &err) == 0);
    CHECK(bb_finish(&b, false)->state_slots == NULL);
    bb_free(&b);
}

int main(void) {
    RUN(test_segments_pack_tokens_drafts_slots_and_logits_rows);
    RUN(test_row_inputs_cover_given_rows_and_default_the_rest);
    RUN(test_a_segment_that_does_not_fit_is_an_error);
    RUN(test_state_slots_one_per_segment_only_when_given);
    return test_summary();
}
