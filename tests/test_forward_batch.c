/*
 * test_forward_batch.c - the packed-batch contract of pdl_forward: a row's
 * logits do not depend on what else is in the batch, on its place in it, on
 * prefill chunking, on the thread count; logits_indices pick exactly the
 * rows named; bad batches are refused with a message; two contexts over one
 * loaded model run at once and give what one alone gives.
 *
 * Comparisons here are bit-exact (memcmp): batch invariance is a promise of
 * identical bytes, not of closeness.
 */
#include <pthread.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "pagedlm.h"
#include "test_util.h"

static int BS = 4; /* small blocks so sequences span many, interleaved, blocks (16 where a test says) */

static const int32_t QWEN_TOKENS[40] = {538, 149, 641, 786, 1170, 846, 253, 852, 340, 475, 473, 561, 983, 1031,
                                        129, 605, 971, 481, 1081, 772, 632, 718, 1079, 419, 371, 1076, 1060, 487,
                                        1045, 829, 36, 534, 106, 873, 689, 1191, 699, 916, 502, 911};

static pdl_model *load(const char *rel, int threads) {
    char *path = test_data_path(rel);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = threads};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s", err.message);
    free(path);
    return m;
}

static int vocab_of(pdl_model *m) {
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    return info.vocab;
}

/* A sequence as a caller of pdl_forward keeps it. */
typedef struct tseq {
    int32_t blocks[64];
    int n_blocks;
    int n_cached;
} tseq;

/* Blocks of the cache handed out in order (reset when a cache is made):
 * the test is the only holder, as a caller of pdl_forward is. Every cache
 * here has N_BLOCKS blocks. */
#define N_BLOCKS 256
static int32_t next_block;

static void ensure_blocks(tseq *s, int n_positions) {
    while (s->n_blocks * BS < n_positions) {
        int32_t b = next_block++;
        REQUIRE(b < N_BLOCKS && s->n_blocks < 64);
        s->blocks[s->n_blocks++] = b;
    }
}

typedef struct segment {
    tseq *seq;
    const int32_t *tokens;
    int n;
    bool all_logits; /* else the last row only */
} segment;

/* One forward over the given segments, in order; logits rows in order. */
static void run_batch(pdl_model *m, pdl_kv_cache *kv, segment *segs, int n_segs, float *logits) {
    pdl_context *ctx = test_context(m);
    int32_t ids[256], pos[256], slots[256], cu[17], lidx[256];
    const int32_t *tables[16];
    int n = 0, nl = 0;
    cu[0] = 0;
    for (int s = 0; s < n_segs; s++) {
        tseq *q = segs[s].seq;
        ensure_blocks(q, q->n_cached + segs[s].n);
        for (int i = 0; i < segs[s].n; i++, n++) {
            int p = q->n_cached + i;
            ids[n] = segs[s].tokens[i];
            pos[n] = p;
            slots[n] = q->blocks[p / BS] * BS + p % BS;
            if (segs[s].all_logits || i == segs[s].n - 1) lidx[nl++] = n;
        }
        cu[s + 1] = n;
        tables[s] = q->blocks;
    }
    pdl_batch b = {.n_tokens = n, .token_ids = ids, .positions = pos, .slot_mapping = slots, .n_seqs = n_segs,
                   .cu_seqlens = cu, .block_tables = tables, .n_logits = nl, .logits_indices = lidx};
    pdl_error err;
    REQUIRE_MSG(pdl_forward(ctx, kv, &b, logits, &err) == 0, "%s", err.message);
    for (int s = 0; s < n_segs; s++) segs[s].seq->n_cached += segs[s].n;
    pdl_context_free(ctx);
}

static pdl_kv_cache *new_cache(pdl_model *m, pdl_kv_dtype dt) {
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, dt, BS, N_BLOCKS, &err) == 0, "%s", err.message);
    next_block = 0;
    return kv;
}

/* All-row logits of tokens[0..n) run alone, in one forward. */
static float *alone(pdl_model *m, pdl_kv_dtype dt, const int32_t *tokens, int n) {
    int V = vocab_of(m);
    float *out = malloc((size_t)n * V * sizeof *out);
    pdl_kv_cache *kv = new_cache(m, dt);
    tseq s = {0};
    segment seg = {&s, tokens, n, true};
    run_batch(m, kv, &seg, 1, out);
    pdl_kv_cache_free(kv);
    return out;
}

static void check_packed_equals_alone(const char *rel, pdl_kv_dtype dt) {
    pdl_model *m = load(rel, 2);
    int V = vocab_of(m);
    const int32_t *a = QWEN_TOKENS, *b = QWEN_TOKENS + 3, *c = QWEN_TOKENS + 11;
    int na = 5, nb = 17, nc = 29;
    for (int i = 0; i < 40; i++) REQUIRE(QWEN_TOKENS[i] < V || V == 512);
    int32_t tok512[40];
    if (V == 512) { /* stories: map the ids into its vocabulary */
        for (int i = 0; i < 40; i++) tok512[i] = QWEN_TOKENS[i] % 512;
        a = tok512, b = tok512 + 3, c = tok512 + 11;
    }
    float *la = alone(m, dt, a, na), *lb = alone(m, dt, b, nb), *lc = alone(m, dt, c, nc);
    /* the three packed together, in two different orders, with interleaved
     * block allocation from one pool */
    float *packed = malloc((size_t)(na + nb + nc) * V * sizeof *packed);
    for (int order = 0; order < 2; order++) {
        pdl_kv_cache *kv = new_cache(m, dt);
        tseq sa = {0}, sb = {0}, sc = {0};
        segment segs[3];
        if (order == 0) {
            segs[0] = (segment){&sa, a, na, true}, segs[1] = (segment){&sb, b, nb, true}, segs[2] = (segment){&sc, c, nc, true};
        } else {
            segs[0] = (segment){&sc, c, nc, true}, segs[1] = (segment){&sa, a, na, true}, segs[2] = (segment){&sb, b, nb, true};
        }
        run_batch(m, kv, segs, 3, packed);
        size_t off_a = order == 0 ? 0 : (size_t)nc, off_b = order == 0 ? (size_t)na : (size_t)(nc + na),
               off_c = order == 0 ? (size_t)(na + nb) : 0;
        CHECK_MSG(memcmp(packed + off_a * V, la, (size_t)na * V * sizeof(float)) == 0, "%s order %d: seq a", rel, order);
        CHECK_MSG(memcmp(packed + off_b * V, lb, (size_t)nb * V * sizeof(float)) == 0, "%s order %d: seq b", rel, order);
        CHECK_MSG(memcmp(packed + off_c * V, lc, (size_t)nc * V * sizeof(float)) == 0, "%s order %d: seq c", rel, order);
        pdl_kv_cache_free(kv);
    }
    free(packed), free(la), free(lb), free(lc);
    pdl_model_free(m);
}

static void test_packed_sequences_equal_each_alone_qwen3(void) {
    check_packed_equals_alone("models/qwen3-tiny/model-f32.gguf", PDL_KV_F32);
    check_packed_equals_alone("models/qwen3-tiny/hf", PDL_KV_F16);
    check_packed_equals_alone("models/qwen3-tiny/model-f32.gguf", PDL_KV_Q8_0);
    check_packed_equals_alone("models/qwen3-tiny/model-f32.gguf", PDL_KV_Q4_0);
}

static void test_packed_sequences_equal_each_alone_stories(void) {
    check_packed_equals_alone("models/stories260K/stories260K.gguf", PDL_KV_F16);
    check_packed_equals_alone("models/stories260K/stories260K.gguf", PDL_KV_Q8_0); /* head_dim 8: a group per head */
    check_packed_equals_alone("models/stories260K/stories260K.gguf", PDL_KV_Q4_0);
}

/* Prefill in chunks of 1, 7 and 64 rows gives the bytes of one-shot prefill
 * for every row (each chunk asks for all its rows). */
static void test_chunked_prefill_is_bit_identical(void) {
    pdl_model *m = load("models/qwen3-tiny/model-f32.gguf", 2);
    int V = vocab_of(m), n = 40;
    for (int dt = 0; dt < 4; dt++) {
        pdl_kv_dtype kvt = dt == 3 ? PDL_KV_Q4_0 : dt == 2 ? PDL_KV_Q8_0 : dt ? PDL_KV_F32 : PDL_KV_F16;
        float *ref = alone(m, kvt, QWEN_TOKENS, n);
        float *got = malloc((size_t)n * V * sizeof *got);
        int chunks[] = {1, 7, 64};
        for (int ci = 0; ci < 3; ci++) {
            pdl_kv_cache *kv = new_cache(m, kvt);
            tseq s = {0};
            for (int off = 0; off < n; off += chunks[ci]) {
                int len = n - off < chunks[ci] ? n - off : chunks[ci];
                segment seg = {&s, QWEN_TOKENS + off, len, true};
                run_batch(m, kv, &seg, 1, got + (size_t)off * V);
            }
            CHECK_MSG(memcmp(got, ref, (size_t)n * V * sizeof(float)) == 0, "chunk %d, kv %s", chunks[ci],
                      dt == 3 ? "q4_0" : dt == 2 ? "q8_0" : dt ? "f32" : "f16");
            pdl_kv_cache_free(kv);
        }
        free(ref), free(got);
    }
    pdl_model_free(m);
}

/* A decode row next to another sequence's prefill chunk gives the bytes it
 * gives decoding alone. */
static void test_decode_row_beside_prefill_is_unchanged(void) {
    pdl_model *m = load("models/llama31-tiny/model-f32.gguf", 2);
    int V = vocab_of(m);
    float *ref = alone(m, PDL_KV_F32, QWEN_TOKENS, 21); /* row 20 = decode of token 20 after 20 cached */
    pdl_kv_cache *kv = new_cache(m, PDL_KV_F32);
    tseq a = {0}, b = {0};
    float *tmp = malloc((size_t)40 * V * sizeof *tmp);
    segment pre = {&a, QWEN_TOKENS, 20, false};
    run_batch(m, kv, &pre, 1, tmp);
    segment segs[2] = {{&a, QWEN_TOKENS + 20, 1, false}, {&b, QWEN_TOKENS + 5, 30, false}};
    run_batch(m, kv, segs, 2, tmp);
    CHECK(memcmp(tmp, ref + (size_t)20 * V, (size_t)V * sizeof(float)) == 0);
    free(tmp), free(ref);
    pdl_kv_cache_free(kv);
    pdl_model_free(m);
}

static void test_thread_count_does_not_change_bits(void) {
    float *r[3];
    int V = 0;
    for (int t = 1; t <= 3; t++) {
        pdl_model *m = load("models/llama31-tiny/hf", t);
        V = vocab_of(m);
        r[t - 1] = alone(m, PDL_KV_F16, QWEN_TOKENS, 33);
        pdl_model_free(m);
    }
    CHECK(memcmp(r[0], r[1], (size_t)33 * V * sizeof(float)) == 0);
    CHECK(memcmp(r[0], r[2], (size_t)33 * V * sizeof(float)) == 0);
    for (int i = 0; i < 3; i++) free(r[i]);
}

/* logits_indices {2, 5, 9}: output row j is input row idx[j], bit for bit;
 * the neighbours (idx +- 1) are different rows, so an index shifted by one
 * would be caught. */
static void test_logits_indices_select_exact_rows(void) {
    pdl_model *m = load("models/qwen3-tiny/model-f32.gguf", 2);
    pdl_context *ctx = test_context(m);
    int V = vocab_of(m), n = 12;
    float *all = alone(m, PDL_KV_F32, QWEN_TOKENS, n);
    pdl_kv_cache *kv = new_cache(m, PDL_KV_F32);
    tseq s = {0};
    ensure_blocks(&s, n);
    int32_t pos[12], slots[12], cu[2] = {0, n}, idx[3] = {2, 5, 9};
    for (int i = 0; i < n; i++) pos[i] = i, slots[i] = s.blocks[i / BS] * BS + i % BS;
    const int32_t *tables[1] = {s.blocks};
    pdl_batch b = {.n_tokens = n, .token_ids = QWEN_TOKENS, .positions = pos, .slot_mapping = slots, .n_seqs = 1,
                   .cu_seqlens = cu, .block_tables = tables, .n_logits = 3, .logits_indices = idx};
    float *sel = malloc((size_t)3 * V * sizeof *sel);
    pdl_error err;
    REQUIRE_MSG(pdl_forward(ctx, kv, &b, sel, &err) == 0, "%s", err.message);
    for (int j = 0; j < 3; j++) {
        CHECK_MSG(memcmp(sel + (size_t)j * V, all + (size_t)idx[j] * V, (size_t)V * sizeof(float)) == 0,
                  "output row %d is not input row %d", j, idx[j]);
        CHECK_MSG(memcmp(sel + (size_t)j * V, all + (size_t)(idx[j] + 1) * V, (size_t)V * sizeof(float)) != 0,
                  "output row %d equals input row %d", j, idx[j] + 1);
        CHECK_MSG(memcmp(sel + (size_t)j * V, all + (size_t)(idx[j] - 1) * V, (size_t)V * sizeof(float)) != 0,
                  "output row %d equals input row %d", j, idx[j] - 1);
    }
    free(sel), free(all);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    pdl_model_free(m);
}

static void test_bad_batches_are_refused(void) {
    pdl_model *m = load("models/qwen3-tiny/model-f32.gguf", 1);
    pdl_context *ctx = test_context(m);
    int V = vocab_of(m);
    pdl_kv_cache *kv = new_cache(m, PDL_KV_F32);
    tseq s = {0};
    ensure_blocks(&s, 4);
    int32_t ids[4] = {1, 2, 3, 4}, pos[4] = {0, 1, 2, 3}, slots[4], cu[2] = {0, 4}, idx[2] = {1, 3};
    for (int i = 0; i < 4; i++) slots[i] = s.blocks[i / BS] * BS + i % BS;
    const int32_t *tables[1] = {s.blocks};
    float *out = malloc((size_t)4 * V * sizeof *out);
    pdl_error err;
#define BATCH() ((pdl_batch){.n_tokens = 4, .token_ids = ids, .positions = pos, .slot_mapping = slots, .n_seqs = 1, \
                             .cu_seqlens = cu, .block_tables = tables, .n_logits = 2, .logits_indices = idx})
    pdl_batch b = BATCH();
    REQUIRE(pdl_forward(ctx, kv, &b, out, &err) == 0);

    ids[2] = V;
    b = BATCH();
    CHECK(pdl_forward(ctx, kv, &b, out, &err) != 0);
    CHECK_CONTAINS(err.message, "token id");
    ids[2] = 3;

    idx[0] = 3, idx[1] = 1;
    b = BATCH();
    CHECK(pdl_forward(ctx, kv, &b, out, &err) != 0);
    CHECK_CONTAINS(err.message, "logits_indices");
    idx[0] = 1, idx[1] = 4;
    b = BATCH();
    CHECK(pdl_forward(ctx, kv, &b, out, &err) != 0);
    CHECK_CONTAINS(err.message, "logits_indices");
    idx[0] = 1, idx[1] = 3;

    slots[1] += 1;
    b = BATCH();
    CHECK(pdl_forward(ctx, kv, &b, out, &err) != 0);
    CHECK_CONTAINS(err.message, "slot");
    slots[1] -= 1;

    pos[2] = 7;
    b = BATCH();
    CHECK(pdl_forward(ctx, kv, &b, out, &err) != 0);
    CHECK_CONTAINS(err.message, "consecutive");
    pos[2] = 2;

    cu[1] = 3;
    b = BATCH();
    CHECK(pdl_forward(ctx, kv, &b, out, &err) != 0);
    CHECK_CONTAINS(err.message, "cu_seqlens");
#undef BATCH
    free(out);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
    pdl_model_free(m);
}

/* One context's share of test_two_contexts_share_one_model: a 33-token
 * prefill then 8 single-row decode steps over a cache of its own, every
 * row's logits into out (41 x vocab). */
typedef struct ctx_run {
    pdl_context *ctx;
    const int32_t *tokens;
    float *out;
    int rc;
    char message[PDL_ERROR_MAX];
} ctx_run;

static void *run_on_context(void *p) {
    ctx_run *r = p;
    const pdl_model *m = pdl_context_model(r->ctx);
    pdl_model_info info;
    pdl_model_get_info(m, &info);
    pdl_kv_cache *kv = NULL;
    pdl_error err = {{0}};
    pdl_seq seq = {0};
    r->rc = pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 4, &err);
    if (r->rc == 0) r->rc = pdl_seq_forward(r->ctx, kv, &seq, r->tokens, NULL, 33, PDL_LOGITS_ALL, r->out, &err);
    for (int i = 33; r->rc == 0 && i < 41; i++)
        r->rc = pdl_seq_forward(r->ctx, kv, &seq, r->tokens + i, NULL, 1, PDL_LOGITS_ALL,
                                r->out + (size_t)i * info.vocab, &err);
    if (kv) pdl_seq_release(kv, &seq);
    pdl_kv_cache_free(kv);
    memcpy(r->message, err.message, sizeof r->message);
    return NULL;
}

/* The model is not written by a forward (its threads, scratch and counters
 * are a context's): two contexts over one loaded model run forwards on two
 * threads at the same time, on different token sequences, and each gives
 * the bytes that sequence gives on one context alone. */
static void test_two_contexts_share_one_model(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf", 2);
    int V = vocab_of(m);
    int32_t toks[2][41];
    for (int i = 0; i < 41; i++) {
        toks[0][i] = QWEN_TOKENS[i % 40] % V;
        toks[1][i] = (QWEN_TOKENS[(i * 7) % 40] + 3) % V;
    }
    float *alone_out[2], *together[2];
    for (int k = 0; k < 2; k++) {
        alone_out[k] = malloc((size_t)41 * V * sizeof(float));
        together[k] = malloc((size_t)41 * V * sizeof(float));
        REQUIRE(alone_out[k] && together[k]);
        ctx_run r = {.ctx = test_context(m), .tokens = toks[k], .out = alone_out[k]};
        run_on_context(&r);
        REQUIRE_MSG(r.rc == 0, "%s", r.message);
        pdl_context_free(r.ctx);
    }
    for (int round = 0; round < 3; round++) { /* a few times: a race need not show at once */
        ctx_run runs[2];
        pthread_t th[2];
        for (int k = 0; k < 2; k++) {
            runs[k] = (ctx_run){.ctx = test_context(m), .tokens = toks[k], .out = together[k]};
            REQUIRE(pthread_create(&th[k], NULL, run_on_context, &runs[k]) == 0);
        }
        for (int k = 0; k < 2; k++) {
            pthread_join(th[k], NULL);
            CHECK_MSG(runs[k].rc == 0, "%s", runs[k].message);
            CHECK_MSG(memcmp(together[k], alone_out[k], (size_t)41 * V * sizeof(float)) == 0,
                      "round %d: sequence %d on its own context beside another differs from it alone", round, k);
            pdl_context_free(runs[k].ctx);
        }
    }
    for (int k = 0; k < 2; k++) free(alone_out[k]), free(together[k]);
    pdl_model_free(m);
}

/* pdl_set_attention(order's name): 0 where the active family has that
 * order, else -1 with the order it stands in with named; the table a
 * context made now takes. */
static pdl_attention_table set_attention(pdl_attn_order order) {
    pdl_error err;
    int rc = pdl_set_attention(attn_order_name(order), &err);
    pdl_attention_table t; /* AVX2 and NEON keep the F32 order, CPUs without AMX the BF16 one */
    attn_table_for(cpu_isa_active(), order, &t);
    CHECK_MSG(rc == 0 ? t.order == order : strstr(err.message, attn_order_name(t.order)) != NULL,
              "pdl_set_attention(%s): %d (%s) where the %s family takes %s", attn_order_name(order), rc,
              rc ? err.message : "", cpu_isa_name(t.isa), attn_order_name(t.order));
    return t;
}

/* Attention in attention.h's BF16 order (pdl_set_attention("bf16")) and
 * AMX order ("amx") keeps the contract: packed sequences and chunked
 * prefill (chunks of 1, 7 and 64: decode-sized calls take the BF16 tiles'
 * direct path) give each row the bytes it gets alone, over blocks of 4
 * (the portable BF16 order) and of 16 (the AVX-512 BF16 or AMX tiles where
 * the CPU has them); and each order is in effect where the family has it
 * (its logits are not the order before it's) and only there. */
static void check_order_is_batch_invariant(pdl_attn_order order, pdl_attn_order before) {
    BS = 16; /* blocks the tiles take */
    pdl_model *m = load("models/qwen3-tiny/model-f32.gguf", 2);
    int V = vocab_of(m);
    set_attention(before);
    float *before_logits = alone(m, PDL_KV_F16, QWEN_TOKENS, 40);
    pdl_attention_table t = set_attention(order);
    float *logits = alone(m, PDL_KV_F16, QWEN_TOKENS, 40);
    bool same = memcmp(before_logits, logits, (size_t)40 * V * sizeof(float)) == 0;
    CHECK_MSG(same != (t.order == order), "family %s: order %d %s order %d's logits", cpu_isa_name(t.isa),
              (int)order, same ? "gave" : "did not give", (int)before);
    free(before_logits), free(logits);
    pdl_model_free(m);
    for (int bsz = 4; bsz <= 16; bsz += 12) {
        BS = bsz;
        check_packed_equals_alone("models/qwen3-tiny/model-f32.gguf", PDL_KV_F16);
        check_packed_equals_alone("models/qwen3-tiny/model-f32.gguf", PDL_KV_Q4_0);
        test_chunked_prefill_is_bit_identical();
    }
    BS = 4;
    /* names are lower case, and a wrong one changes nothing */
    pdl_error err;
    CHECK_EQ_INT(pdl_set_attention("F32", &err), -1);
    CHECK_EQ_INT((int)attn_order(), (int)order);
    set_attention(PDL_ATTN_F32);
}

static void test_bf16_attention_order_is_batch_invariant(void) {
    check_order_is_batch_invariant(PDL_ATTN_BF16, PDL_ATTN_F32);
    if (!cpu_features_get()->avx512bf16) fprintf(stderr, "  (no AVX512_BF16 on this CPU: the portable order only)\n");
}

static void test_amx_attention_order_is_batch_invariant(void) {
    check_order_is_batch_invariant(PDL_ATTN_AMX, PDL_ATTN_BF16);
    if (!cpu_amx_bf16_ready()) fprintf(stderr, "  (no AMX on this CPU: the BF16 order stands in)\n");
}

int main(void) {
    RUN(test_packed_sequences_equal_each_alone_qwen3);
    RUN(test_packed_sequences_equal_each_alone_stories);
    RUN(test_chunked_prefill_is_bit_identical);
    RUN(test_decode_row_beside_prefill_is_unchanged);
    RUN(test_thread_count_does_not_change_bits);
    RUN(test_logits_indices_select_exact_rows);
    RUN(test_bad_batches_are_refused);
    RUN(test_two_contexts_share_one_model);
    RUN(test_bf16_attention_order_is_batch_invariant);
    RUN(test_amx_attention_order_is_batch_invariant);
    return test_summary();
}
