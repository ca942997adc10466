/*
 * test_prefix_cache.c - the block pool (src/engine/block_pool.c) and prefix
 * caching through the engine.
 *
 * The pool: allocation order, a sequence's tail evicted first, hits taking
 * blocks out of the free queue, a hit accepted only when tokens, parent
 * (block and generation) and salt check match (a forced hash collision costs
 * a miss), unreachable entries giving way. The engine: a request's sampled
 * logits are the same bytes (memcmp) with the cache cold, with a hit of one
 * block, of all but the last block, and with the prefix cached by another
 * request batched with others, for stories260K, qwen3-tiny and gemma2-tiny
 * (sliding window of 32 on half its layers, prompts longer than that);
 * cache_salt isolation; hash collisions forced through the hash function;
 * a pool too small for everything (evictions, preemption, n > 1) where every
 * request still gets what it gets alone and nothing leaks.
 */
#include <string.h>

#include "engine/block_pool.h"
#include "engine/engine_hooks.h"
#include "model/model.h"
#include "pagedlm.h"
#include "test_util.h"

/* ---- the pool ------------------------------------------------------------------ */

static void fill_tokens(int32_t *t, int n, int32_t base) {
    for (int i = 0; i < n; i++) t[i] = base + i;
}

static void test_pool_allocates_in_order_and_evicts_a_sequences_tail_first(void) {
    block_pool p;
    pdl_error err;
    REQUIRE(bpool_init(&p, 4, 2, true, &err) == 0);
    int32_t b[4];
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(b[i] = bpool_alloc(&p), i);
    CHECK_EQ_INT(bpool_alloc(&p), -1);
    CHECK_EQ_INT(bpool_used(&p), 4);
    /* blocks 0..2 hashed as a chain, then the sequence is freed */
    int32_t tok[2];
    bpool_hash h[3], parent = bpool_root_hash(NULL);
    int32_t canon = -1;
    for (int i = 0; i < 3; i++) {
        fill_tokens(tok, 2, 10 * i);
        h[i] = bpool_block_hash(&p, parent, tok);
        canon = bpool_cache(&p, b[i], h[i], tok, canon, 0);
        CHECK_EQ_INT(canon, b[i]);
        parent = h[i];
    }
    bpool_release_all(&p, b, 3);
    CHECK_EQ_INT(bpool_used(&p), 1);
    CHECK_EQ_INT(p.n_cached_free, 3);
    /* the tail (block 2) goes first, then 1, then 0 */
    CHECK_EQ_INT(bpool_alloc(&p), 2);
    CHECK_EQ_INT(p.n_cached_free, 2);
    fill_tokens(tok, 2, 0);
    int32_t hit = bpool_take_cached(&p, h[0], tok, -1, 0);
    CHECK_EQ_INT(hit, 0);
    CHECK_EQ_INT(p.n_cached_free, 1);
    fill_tokens(tok, 2, 10);
    CHECK_EQ_INT(bpool_take_cached(&p, h[1], tok, hit, 0), 1);
    fill_tokens(tok, 2, 20); /* block 2 was evicted */
    CHECK_EQ_INT(bpool_take_cached(&p, h[2], tok, 1, 0), -1);
    /* a held block is shared by a second hit */
    fill_tokens(tok, 2, 0);
    CHECK_EQ_INT(bpool_take_cached(&p, h[0], tok, -1, 0), 0);
    CHECK_EQ_INT(p.blocks[0].ref, 2);
    bpool_free(&p);
}

static void test_pool_hit_needs_tokens_parent_and_salt_to_match(void) {
    block_pool p;
    pdl_error err;
    REQUIRE(bpool_init(&p, 8, 2, true, &err) == 0);
    int32_t tok[2] = {5, 6}, other[2] = {5, 7};
    int32_t a = bpool_alloc(&p), c = bpool_alloc(&p);
    bpool_hash h = bpool_block_hash(&p, bpool_root_hash(NULL), tok);
    bpool_cache(&p, a, h, tok, -1, 0);
    /* child of a */
    bpool_hash hc = bpool_block_hash(&p, h, other);
    CHECK_EQ_INT(bpool_cache(&p, c, hc, other, a, 0), c);
    CHECK_EQ_INT(bpool_take_cached(&p, h, other, -1, 0), -1);            /* other tokens under the same hash */
    CHECK_EQ_INT(bpool_take_cached(&p, h, tok, -1, bpool_extra_check("s")), -1); /* a salt */
    CHECK_EQ_INT(bpool_take_cached(&p, hc, other, -1, 0), -1);           /* another parent */
    CHECK_EQ_INT(bpool_take_cached(&p, hc, other, a, 0), c);
    bpool_release(&p, c);
    bpool_release(&p, c);
    /* a evicted and rewritten: c's chain is stale, its hit refused, and a
     * new block with the same hash after a fresh parent takes its place */
    bpool_release(&p, a);
    while (p.head != a) bpool_release(&p, bpool_alloc(&p)); /* rotate until a is next */
    int32_t a2 = bpool_alloc(&p);
    CHECK_EQ_INT(a2, a);
    CHECK(!p.blocks[a].hashed);
    CHECK_EQ_INT(bpool_take_cached(&p, hc, other, a, 0), -1); /* same id, new generation */
    bpool_cache(&p, a2, h, tok, -1, 0);
    int32_t c2 = bpool_alloc(&p);
    CHECK_EQ_INT(bpool_cache(&p, c2, hc, other, a2, 0), c2); /* replaced the stale entry */
    CHECK(!p.blocks[c].hashed);
    CHECK_EQ_INT(bpool_take_cached(&p, hc, other, a2, 0), c2);
    bpool_free(&p);
}

static bpool_hash constant_hash(bpool_hash parent, const int32_t *tokens, int n) {
    (void)parent, (void)tokens, (void)n;
    return (bpool_hash){42, 42};
}

static void test_pool_forced_collision_is_a_miss(void) {
    block_pool p;
    pdl_error err;
    REQUIRE(bpool_init(&p, 4, 2, true, &err) == 0);
    p.hash_fn = constant_hash;
    int32_t t1[2] = {1, 2}, t2[2] = {3, 4};
    int32_t a = bpool_alloc(&p), b = bpool_alloc(&p);
    bpool_hash h1 = bpool_block_hash(&p, bpool_root_hash(NULL), t1), h2 = bpool_block_hash(&p, bpool_root_hash(NULL), t2);
    CHECK(h1.lo == h2.lo && h1.hi == h2.hi);
    CHECK_EQ_INT(bpool_cache(&p, a, h1, t1, -1, 0), a);
    CHECK_EQ_INT(bpool_cache(&p, b, h2, t2, -1, 0), b); /* the hash is taken: b stands for itself */
    CHECK(!p.blocks[b].hashed);
    CHECK_EQ_INT(bpool_take_cached(&p, h2, t2, -1, 0), -1);
    CHECK_EQ_INT(bpool_take_cached(&p, h1, t1, -1, 0), a);
    bpool_free(&p);
}

/* ---- through the engine ------------------------------------------------------------ */

typedef struct capture {
    uint64_t want_id;    /* the request whose rows are kept */
    float *rows;         /* [cap][vocab] */
    int n_rows, cap, vocab;
    int32_t tokens[256];
    int n_tokens;
    int cached;          /* FINISHED's cached_tokens */
    int finished;
} capture;

static void on_logits(uint64_t id, int index, int position, const float *row, int vocab, void *user) {
    (void)position;
    capture *c = user;
    if (id != c->want_id || index != 0 || c->n_rows >= c->cap) return;
    memcpy(c->rows + (size_t)c->n_rows * (size_t)vocab, row, (size_t)vocab * sizeof *row);
    c->vocab = vocab;
    c->n_rows++;
}

static void on_event(const pdl_event *ev, void *user) {
    capture *c = user;
    if (ev->index != 0) return;
    if (ev->kind == PDL_EVENT_TOKEN && c->n_tokens < 256) c->tokens[c->n_tokens++] = ev->token;
    if (ev->kind == PDL_EVENT_FINISHED) {
        c->cached = ev->cached_tokens;
        c->finished = 1;
    }
}

static pdl_model *load(const char *rel) {
    char *path = test_data_path(rel);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s", err.message);
    free(path);
    return m;
}

static capture g_cap; /* the request under test; on_logits writes here */

static pdl_engine *engine(pdl_model *m, size_t kv_bytes, pdl_kv_dtype dt) {
    pdl_engine_options o = {.block_size = 16, .kv_cache_memory = kv_bytes, .kv_dtype = dt,
                            .max_num_batched_tokens = 96, .on_logits = on_logits, .on_logits_user = &g_cap};
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, m, &o, &err) == 0, "%s", err.message);
    return e;
}

static uint64_t add(pdl_engine *e, const int32_t *prompt, int n, int max_tokens, const char *salt, capture *c) {
    pdl_request_params p = {.max_tokens = max_tokens, .logprobs = -1, .prompt_logprobs = -1, .cache_salt = salt,
                            .ignore_eos = true};
    uint64_t id;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_add_request(e, prompt, (size_t)n, &p, on_event, c, &id, &err) == 0, "%s", err.message);
    return id;
}

static void run(pdl_engine *e) {
    pdl_error err;
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
}

static void prompt_of(int32_t *out, int n, int vocab, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        out[i] = (int32_t)(2 + (x >> 8) % (uint32_t)(vocab - 2));
    }
}

static void reset_capture(capture *c, float *rows, int cap) {
    memset(c, 0, sizeof *c);
    c->rows = rows;
    c->cap = cap;
}

/* The request under test (prompt R, 8 tokens out) in engine e, after
 * whatever e saw before; its rows and tokens go to *out. */
static void run_target(pdl_engine *e, const int32_t *r, int n, const char *salt, capture *out, float *rows) {
    reset_capture(&g_cap, rows, 16);
    g_cap.want_id = add(e, r, n, 8, salt, &g_cap);
    run(e);
    *out = g_cap;
}

static void check_same(const capture *cold, const capture *got, const char *what, const char *model) {
    CHECK_MSG(got->n_rows == cold->n_rows && got->n_rows == 8, "%s / %s: %d rows vs %d", model, what, got->n_rows,
              cold->n_rows);
    CHECK_MSG(memcmp(got->rows, cold->rows, (size_t)cold->n_rows * (size_t)cold->vocab * sizeof(float)) == 0,
              "%s / %s: logits differ from the cold run", model, what);
    CHECK_MSG(memcmp(got->tokens, cold->tokens, 8 * sizeof(int32_t)) == 0, "%s / %s: tokens differ", model, what);
}

/* The cache dtype check_model runs over (F16, and Q8_0 and Q4_0 below). */
static pdl_kv_dtype g_dtype = PDL_KV_F16;

static void check_model(const char *rel) {
    pdl_model *m = load(rel);
    int V = m->cfg.vocab;
    enum { N = 70 }; /* 4 full blocks + 6: longer than gemma2-tiny's window of 32 */
    int32_t r[N], w1[N], other[N];
    prompt_of(r, N, V, 7);
    memcpy(w1, r, 16 * sizeof *r); /* shares exactly the first block */
    prompt_of(w1 + 16, N - 16, V, 99);
    float *rows_cold = malloc((size_t)16 * V * sizeof(float)), *rows = malloc((size_t)16 * V * sizeof(float));
    capture cold, got, sink = {0};

    pdl_engine *e = engine(m, 0, g_dtype);
    run_target(e, r, N, NULL, &cold, rows_cold);
    CHECK_EQ_INT(cold.cached, 0);
    pdl_engine_free(e);

    /* a hit of one block */
    e = engine(m, 0, g_dtype);
    add(e, w1, N, 4, NULL, &sink);
    run(e);
    run_target(e, r, N, NULL, &got, rows);
    CHECK_EQ_INT(got.cached, 16);
    check_same(&cold, &got, "one cached block", rel);
    /* all but the last block: the same prompt again (64 of 70 cached; the
     * last token is always computed) */
    run_target(e, r, N, NULL, &got, rows);
    CHECK_EQ_INT(got.cached, 64);
    check_same(&cold, &got, "all but the last block", rel);
    pdl_engine_free(e);

    /* the prefix cached by another request that ran batched with others,
     * and the request itself batched with others */
    e = engine(m, 0, g_dtype);
    memcpy(other, r, 48 * sizeof *r);
    prompt_of(other + 48, N - 48, V, 5);
    capture noise[4];
    for (int k = 0; k < 3; k++) {
        int32_t np[N];
        prompt_of(np, 20 + 11 * k, V, 300 + (uint32_t)k);
        memset(&noise[k], 0, sizeof noise[k]);
        add(e, np, 20 + 11 * k, 6, NULL, &noise[k]);
    }
    add(e, other, N, 5, NULL, &sink);
    run(e);
    reset_capture(&g_cap, rows, 16);
    for (int k = 0; k < 3; k++) {
        int32_t np[N];
        prompt_of(np, 30 + 7 * k, V, 400 + (uint32_t)k);
        add(e, np, 30 + 7 * k, 9, NULL, &noise[k]);
    }
    g_cap.want_id = add(e, r, N, 8, NULL, &g_cap);
    run(e);
    got = g_cap;
    CHECK_EQ_INT(got.cached, 48);
    check_same(&cold, &got, "prefix from another request, in a batch", rel);
    pdl_engine_free(e);
    memset(&g_cap, 0, sizeof g_cap); /* its rows buffer goes now */
    free(rows_cold), free(rows);
    pdl_model_free(m);
}

static void test_logits_are_the_same_bytes_cached_or_not_stories(void) {
    check_model("models/stories260K/stories260K.gguf");
}
static void test_logits_are_the_same_bytes_cached_or_not_qwen3(void) { check_model("models/qwen3-tiny/model-f32.gguf"); }
static void test_logits_are_the_same_bytes_cached_or_not_gemma2_window(void) {
    check_model("models/gemma2-tiny/model-f32.gguf");
}
static void test_logits_are_the_same_bytes_cached_or_not_quantized_caches(void) {
    g_dtype = PDL_KV_Q8_0;
    check_model("models/stories260K/stories260K.gguf");
    check_model("models/qwen3-tiny/model-f32.gguf");
    g_dtype = PDL_KV_Q4_0;
    check_model("models/stories260K/stories260K.gguf");
    check_model("models/qwen3-tiny/model-f32.gguf");
    g_dtype = PDL_KV_F16;
}

/* Requests with different cache_salt values never share blocks; the same
 * salt does; no salt is a salt of its own. */
static void test_cache_salt_isolates_tenants(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    int32_t p[40];
    prompt_of(p, 40, 512, 3);
    pdl_engine *e = engine(m, 0, PDL_KV_F32);
    const char *salts[] = {"tenant-a", "tenant-b", "tenant-a", NULL, NULL};
    int want[] = {0, 0, 32, 0, 32};
    for (int i = 0; i < 5; i++) {
        capture c = {0};
        add(e, p, 40, 2, salts[i], &c);
        run(e);
        CHECK_MSG(c.cached == want[i], "request %d (salt %s): %d cached, expected %d", i, salts[i] ? salts[i] : "none",
                  c.cached, want[i]);
    }
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.prefix_cache_queries, 5 * 40);
    CHECK_EQ_INT(st.prefix_cache_hits, 64);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* Every hash equal (a test hook on the hash function): hits are then
 * refused by the token / parent checks, and outputs stay those of a cold
 * engine. */
static void test_forced_hash_collisions_do_not_change_outputs(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    enum { N = 6 };
    capture alone[N], together[N];
    int32_t p[N][50];
    for (int k = 0; k < N; k++) {
        prompt_of(p[k], 50, 512, 11 + (uint32_t)(k % 3)); /* three prompts, twice each */
        if (k >= 3) p[k][45] = 7;                     /* ... differing in the last block */
    }
    for (int k = 0; k < N; k++) {
        pdl_engine_options o = {.block_size = 16, .kv_dtype = PDL_KV_F32, .no_prefix_caching = true};
        pdl_engine *e;
        pdl_error err;
        REQUIRE(pdl_engine_create(&e, m, &o, &err) == 0);
        memset(&alone[k], 0, sizeof alone[k]);
        add(e, p[k], 50, 10, NULL, &alone[k]);
        run(e);
        pdl_engine_free(e);
    }
    pdl_engine *e = engine(m, 0, PDL_KV_F32);
    eng_block_pool(e)->hash_fn = constant_hash;
    for (int k = 0; k < N; k++) {
        memset(&together[k], 0, sizeof together[k]);
        add(e, p[k], 50, 10, NULL, &together[k]);
        if (k % 2) run(e);
    }
    run(e);
    for (int k = 0; k < N; k++)
        CHECK_MSG(memcmp(together[k].tokens, alone[k].tokens, 10 * sizeof(int32_t)) == 0, "request %d differs", k);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* A pool far too small for everything: blocks are evicted, sequences
 * preempted and recomputed (hitting what survives), n = 3 forks share
 * cached blocks, and every request gets exactly what it gets alone; at idle
 * no block is held and the counters agree. */
static void test_small_pool_evicts_and_outputs_stay_the_same(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    enum { N = 12 };
    static capture alone[N], together[N];
    int32_t p[N][60];
    for (int k = 0; k < N; k++) {
        prompt_of(p[k], 60, 512, 21 + (uint32_t)(k % 4)); /* four shared prefixes ... */
        prompt_of(p[k] + 40, 20, 512, 500 + (uint32_t)k); /* ... and their own tails */
    }
    for (int k = 0; k < N; k++) {
        pdl_engine *e = engine(m, 0, PDL_KV_F32);
        memset(&alone[k], 0, sizeof alone[k]);
        pdl_request_params rp = {.max_tokens = 30, .logprobs = -1, .prompt_logprobs = -1, .ignore_eos = true,
                                 .n = k == 5 ? 3 : 1};
        rp.sampling.temperature = k == 5 ? 1.0f : 0.0f;
        rp.sampling.seed = 9;
        pdl_error err;
        REQUIRE(pdl_engine_add_request(e, p[k], 60, &rp, on_event, &alone[k], NULL, &err) == 0);
        run(e);
        pdl_engine_free(e);
    }
    size_t bb = pdl_kv_cache_block_bytes(m, PDL_KV_F32, 16);
    pdl_engine *e = engine(m, bb * 14, PDL_KV_F32); /* 14 blocks: two or three sequences at a time */
    for (int k = 0; k < N; k++) {
        memset(&together[k], 0, sizeof together[k]);
        pdl_request_params rp = {.max_tokens = 30, .logprobs = -1, .prompt_logprobs = -1, .ignore_eos = true,
                                 .n = k == 5 ? 3 : 1};
        rp.sampling.temperature = k == 5 ? 1.0f : 0.0f;
        rp.sampling.seed = 9;
        pdl_error err;
        REQUIRE(pdl_engine_add_request(e, p[k], 60, &rp, on_event, &together[k], NULL, &err) == 0);
    }
    run(e);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    for (int k = 0; k < N; k++) {
        CHECK_EQ_INT(together[k].n_tokens, 30);
        CHECK_MSG(memcmp(together[k].tokens, alone[k].tokens, 30 * sizeof(int32_t)) == 0, "request %d differs", k);
    }
    CHECK_MSG(st.preemptions > 0, "the pool was meant to force preemption");
    CHECK(st.prefix_cache_hits > 0 && st.prefix_cache_hits <= st.prefix_cache_queries);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK(st.kv_blocks_cached > 0 && st.kv_blocks_cached <= st.kv_blocks_total);
    fprintf(stderr, "  %llu preemptions, %llu of %llu prompt tokens from the cache\n",
            (unsigned long long)st.preemptions, (unsigned long long)st.prefix_cache_hits,
            (unsigned long long)st.prefix_cache_queries);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* Requests that arrive together with one new prefix: the first computes it,
 * the others wait a step and take it from the cache instead of computing it
 * alongside (the engine then computes 64 + 3 x 16 prompt rows, not 4 x 64),
 * and every output is what it is alone. */
static void test_requests_arriving_together_compute_a_shared_prefix_once(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    enum { N = 4 };
    int32_t p[N][72];
    capture alone[N], together[N];
    for (int k = 0; k < N; k++) {
        prompt_of(p[k], 64, 512, 77);             /* the shared 64 tokens */
        prompt_of(p[k] + 64, 8, 512, 600 + (uint32_t)k); /* and 8 of their own */
        pdl_engine *e = engine(m, 0, PDL_KV_F32);
        memset(&alone[k], 0, sizeof alone[k]);
        add(e, p[k], 72, 6, NULL, &alone[k]);
        run(e);
        pdl_engine_free(e);
    }
    pdl_engine *e = engine(m, 0, PDL_KV_F32); /* a step takes 96 rows: all four would fit at once */
    for (int k = 0; k < N; k++) {
        memset(&together[k], 0, sizeof together[k]);
        add(e, p[k], 72, 6, NULL, &together[k]);
    }
    run(e);
    for (int k = 0; k < N; k++) {
        CHECK_MSG(together[k].cached == (k ? 64 : 0), "request %d: %d cached", k, together[k].cached);
        CHECK_MSG(memcmp(together[k].tokens, alone[k].tokens, 6 * sizeof(int32_t)) == 0, "request %d differs", k);
    }
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.prefix_cache_hits, 3 * 64);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* Aborting a request whose prefix blocks another running request shares
 * frees only what was its own: the other goes on to the output it has
 * alone, and at the end no block is held. */
static void test_abort_with_shared_blocks_keeps_the_other_request_whole(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    int32_t p1[48], p2[48];
    prompt_of(p1, 48, 512, 91);
    memcpy(p2, p1, 32 * sizeof *p1);
    prompt_of(p2 + 32, 16, 512, 92);
    capture alone = {0}, a = {0}, b = {0};
    pdl_engine *e = engine(m, 0, PDL_KV_F32);
    add(e, p2, 48, 20, NULL, &alone);
    run(e);
    pdl_engine_free(e);
    e = engine(m, 0, PDL_KV_F32);
    uint64_t ida = add(e, p1, 48, 40, NULL, &a);
    pdl_error err;
    int active;
    REQUIRE(pdl_engine_step(e, &active, &err) == 0);
    add(e, p2, 48, 20, NULL, &b);
    for (int i = 0; i < 3; i++) REQUIRE(pdl_engine_step(e, &active, &err) == 0);
    CHECK_EQ_INT(pdl_engine_abort(e, ida), 0);
    run(e);
    CHECK_EQ_INT(b.cached, 32);
    CHECK_EQ_INT(b.n_tokens, 20);
    CHECK(memcmp(b.tokens, alone.tokens, 20 * sizeof(int32_t)) == 0);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* A prompt of whole blocks: its last block is computed again (the last
 * token's row gives the logits), so 32 tokens give 16 from the cache. */
static void test_the_last_prompt_token_is_always_computed(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    int32_t p[33];
    prompt_of(p, 33, 512, 17);
    pdl_engine *e = engine(m, 0, PDL_KV_F32);
    int lens[] = {32, 32, 33, 17, 16};
    int want[] = {0, 16, 32, 16, 0};
    for (int i = 0; i < 5; i++) {
        capture c = {0};
        add(e, p, lens[i], 1, NULL, &c);
        run(e);
        CHECK_MSG(c.cached == want[i], "prompt of %d tokens: %d cached, expected %d", lens[i], c.cached, want[i]);
    }
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* prompt_logprobs needs every prompt row computed: no cache lookup (and
 * the logprobs equal those of a cold engine). */
static void test_prompt_logprobs_requests_compute_every_row(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    int32_t p[40];
    prompt_of(p, 40, 512, 13);
    pdl_engine *e = engine(m, 0, PDL_KV_F32);
    capture a = {0}, b = {0};
    add(e, p, 40, 2, NULL, &a);
    run(e);
    pdl_request_params rp = {.max_tokens = 2, .logprobs = -1, .prompt_logprobs = 1};
    pdl_error err;
    REQUIRE(pdl_engine_add_request(e, p, 40, &rp, on_event, &b, NULL, &err) == 0);
    run(e);
    CHECK_EQ_INT(b.cached, 0);
    pdl_engine_free(e);
    pdl_model_free(m);
}

int main(void) {
    RUN(test_pool_allocates_in_order_and_evicts_a_sequences_tail_first);
    RUN(test_pool_hit_needs_tokens_parent_and_salt_to_match);
    RUN(test_pool_forced_collision_is_a_miss);
    RUN(test_logits_are_the_same_bytes_cached_or_not_stories);
    RUN(test_logits_are_the_same_bytes_cached_or_not_qwen3);
    RUN(test_logits_are_the_same_bytes_cached_or_not_gemma2_window);
    RUN(test_logits_are_the_same_bytes_cached_or_not_quantized_caches);
    RUN(test_cache_salt_isolates_tenants);
    RUN(test_forced_hash_collisions_do_not_change_outputs);
    RUN(test_small_pool_evicts_and_outputs_stay_the_same);
    RUN(test_requests_arriving_together_compute_a_shared_prefix_once);
    RUN(test_abort_with_shared_blocks_keeps_the_other_request_whole);
    RUN(test_the_last_prompt_token_is_always_computed);
    RUN(test_prompt_logprobs_requests_compute_every_row);
    return test_summary();
}
