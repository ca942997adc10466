/*
 * test_hybrid_engine.c - the engine on a hybrid model (Qwen3.5: Gated
 * DeltaNet layers with a recurrent state per sequence beside gated full
 * attention), on a tiny random model tests/support/qwen35_writer makes.
 *
 * Without a model: the state pool (live slots, snapshots keyed by a cached
 * block and dropped with it, LRU snapshots giving way to live sequences and
 * never the reverse) and the cap on a hybrid model's drafts. With the
 * model: a request's sampled logits are the same bytes (memcmp: batch
 * invariance is exact, no tolerance) alone, with 7 other requests, at
 * prefill chunk sizes 1, 64, 100 and 512, after preemption and recompute in
 * a tiny pool, after a prefix-cache hit inside and at the end of a long
 * prompt (started from a state snapshot; the cached token count shows the
 * hit) and where a prefix shared by two earlier prompts ends, as the second of n = 2 sequences (the state copied at the fork),
 * next to aborted requests (whose slots are freed), and under n-gram
 * speculative decoding and MTP speculation (its drafts checked against the
 * block's own chain, and under preemption); the KV budget covers blocks and
 * state slots.
 */
#include <string.h>

#include "engine/block_pool.h"
#include "engine/scheduler.h"
#include "engine/spec_decode.h"
#include "engine/state_pool.h"
#include "model/context.h"
#include "model/kv_cache.h"
#include "pagedlm.h"
#include "qwen35_writer.h"
#include "test_util.h"

/* ---- the state pool ----------------------------------------------------------- */

/* A hashed block of pool p (tokens base, base + 1, ...). */
static int32_t cached_block(block_pool *p, int32_t base) {
    int32_t b = bpool_alloc(p), tok[4];
    for (int i = 0; i < 4; i++) tok[i] = base + i;
    bpool_hash h = bpool_block_hash(p, bpool_root_hash(NULL), tok);
    bpool_cache(p, b, h, tok, -1, 0);
    return b;
}

static void test_state_pool_live_slots_take_free_ones_then_drop_snapshots(void) {
    block_pool p;
    state_pool s;
    pdl_error err;
    REQUIRE(bpool_init(&p, 8, 4, true, &err) == 0);
    REQUIRE(spool_init(&s, 3, &p, &err) == 0);
    int32_t b0 = cached_block(&p, 0), b1 = cached_block(&p, 10);
    int32_t s0 = spool_alloc_snapshot(&s, b0), s1 = spool_alloc_snapshot(&s, b1);
    CHECK(s0 >= 0 && s1 >= 0 && s0 != s1);
    CHECK_EQ_INT(spool_alloc_snapshot(&s, b0), -1); /* one snapshot per block */
    CHECK_EQ_INT(spool_snapshot_of(&s, b0), s0);     /* a use: b1's is now the least recent */
    int32_t live = spool_alloc_live(&s);             /* the free slot first */
    CHECK(live >= 0 && live != s0 && live != s1);
    CHECK_EQ_INT(s.n_snapshots, 2);
    int32_t live2 = spool_alloc_live(&s);            /* then the least recently used snapshot */
    CHECK_EQ_INT(live2, s1);
    CHECK_EQ_INT(spool_snapshot_of(&s, b1), -1);
    CHECK_EQ_INT(spool_snapshot_of(&s, b0), s0);
    CHECK_EQ_INT(spool_alloc_live(&s), s0);
    CHECK_EQ_INT(spool_alloc_live(&s), -1);          /* every slot live: a new sequence waits */
    CHECK_EQ_INT(spool_available(&s), 0);
    /* a snapshot never takes a live slot */
    int32_t b2 = cached_block(&p, 20);
    CHECK_EQ_INT(spool_alloc_snapshot(&s, b2), -1);
    spool_release(&s, live);
    CHECK_EQ_INT(s.n_live, 2);
    CHECK_EQ_INT(spool_alloc_snapshot(&s, b2), live);
    spool_free(&s);
    bpool_free(&p);
}

static void test_state_pool_snapshot_leaves_with_its_block(void) {
    block_pool p;
    state_pool s;
    pdl_error err;
    REQUIRE(bpool_init(&p, 2, 4, true, &err) == 0);
    REQUIRE(spool_init(&s, 2, &p, &err) == 0);
    int32_t b = cached_block(&p, 0);
    int32_t plain = bpool_alloc(&p);
    CHECK_EQ_INT(spool_alloc_snapshot(&s, plain), -1); /* only a hashed block carries one */
    int32_t slot = spool_alloc_snapshot(&s, b);
    REQUIRE(slot >= 0);
    bpool_release(&p, b); /* freed, still cached: the snapshot stays */
    CHECK_EQ_INT(spool_snapshot_of(&s, b), slot);
    CHECK_EQ_INT(s.n_snapshots, 1);
    CHECK_EQ_INT(bpool_alloc(&p), b); /* evicted and rewritten: its snapshot goes */
    CHECK_EQ_INT(spool_snapshot_of(&s, b), -1);
    CHECK_EQ_INT(s.n_snapshots, 0);
    CHECK_EQ_INT(s.slots[slot].kind, SPOOL_FREE);
    CHECK_EQ_INT(s.snapshots_dropped, 1);
    spool_free(&s);
    bpool_free(&p);
}

/* ---- the drafts' cap ---------------------------------------------------------------- */

static void test_hybrid_drafts_never_close_a_state_chunk(void) {
    CHECK_EQ_INT(spec_hybrid_cap(100, 8, 0, 0), 8);   /* not hybrid */
    CHECK_EQ_INT(spec_hybrid_cap(10, 8, 64, 28), 8);  /* positions 10 .. 17 */
    CHECK_EQ_INT(spec_hybrid_cap(60, 8, 64, 28), 3);  /* 60, 61, 62: 63 closes the chunk */
    CHECK_EQ_INT(spec_hybrid_cap(63, 8, 64, 28), 0);  /* the first draft would close it */
    CHECK_EQ_INT(spec_hybrid_cap(64, 16, 64, 28), 16);
    CHECK_EQ_INT(spec_hybrid_cap(0, 40, 64, 28), 28); /* at most state_max_rows */
    for (int first = 0; first < 200; first++) {
        int k = spec_hybrid_cap(first, 16, 64, 28);
        for (int p = first; p < first + k; p++) CHECK_MSG(p % 64 != 63, "draft at %d closes a chunk", p);
    }
}

/* ---- the scheduler's align mode, without a model ------------------------------------------ */

/* A sequence of prompt tokens[0, n) as the engine makes one. */
static eng_seq seq_of(eng_request *r, int32_t *tokens, int n, uint64_t arrival) {
    eng_seq q = {.req = r, .tokens = tokens, .n_tokens = n, .cap_tokens = n, .n_prompt = n, .arrival = arrival};
    q.cache.canon_last = -1;
    q.cache.n_cached_prompt = -1;
    q.cache.state_slot = -1;
    return q;
}

/* One step as the engine takes it, without the forward: every entry's
 * rows computed, full blocks offered, snapshots taken. Returns the plan. */
static sched_output sched_step(sched *s) {
    sched_output plan;
    pdl_error err;
    REQUIRE_MSG(sched_schedule(s, &plan, &err) == 0, "%s", err.message);
    for (int k = 0; k < plan.n_entries; k++) {
        eng_seq *q = plan.entries[k].seq;
        q->cache.n_computed = plan.entries[k].start + plan.entries[k].n_new;
        sched_cache_full_blocks(s, q);
        sched_snapshot_after_step(s, q, plan.entries[k].start);
    }
    return plan;
}

/* Blocks of 16, state chunks of 64, snapshots every 128 positions: a
 * prompt of 220 runs in chunks ending at 128, 192 (its last 64-boundary
 * before its end) and 220, and leaves snapshots there; a second prompt
 * sharing 150 positions gets its first 128 from the cache and a state slot
 * while it runs; new sequences take slots from the least recently used
 * snapshots, and one waits while every slot is live. */
static void test_scheduler_cuts_chunks_at_snapshots_and_hits_stop_at_the_last(void) {
    block_pool pool;
    state_pool states;
    pdl_kv_cache kv = {0}; /* no state storage: the copies are no-ops here (the bytes are the model tests') */
    sched s;
    pdl_error err;
    REQUIRE(bpool_init(&pool, 64, 16, true, &err) == 0);
    REQUIRE(spool_init(&states, 4, &pool, &err) == 0);
    sched_config cfg = {.max_num_seqs = 8, .max_num_batched_tokens = 512, .state_chunk = 64,
                        .snapshot_interval = 100}; /* rounded up to 128 */
    REQUIRE(sched_init(&s, &cfg, &pool, &kv, &states, &err) == 0);
    CHECK_EQ_INT(s.cfg.snapshot_interval, 128);
    eng_request r = {.root_hash = bpool_root_hash(NULL)};
    int32_t a[220], b[220], c[40];
    for (int i = 0; i < 220; i++) a[i] = b[i] = 1000 + i;
    for (int i = 150; i < 220; i++) b[i] = 5000 + i;
    for (int i = 0; i < 40; i++) c[i] = 9000 + i;
    eng_seq qa = seq_of(&r, a, 220, 0), qb = seq_of(&r, b, 220, 1), qc = seq_of(&r, c, 40, 2);
    CHECK(sched_snapshot_point(&s, &qa, 128) && sched_snapshot_point(&s, &qa, 192));
    CHECK(!sched_snapshot_point(&s, &qa, 64) && !sched_snapshot_point(&s, &qa, 208));
    REQUIRE(sched_add(&s, &qa, &err) == 0);
    int ends[3], n_steps = 0;
    while (qa.cache.n_computed < 220 && n_steps < 3) {
        sched_output plan = sched_step(&s);
        REQUIRE(plan.n_entries == 1);
        ends[n_steps++] = qa.cache.n_computed;
    }
    CHECK_EQ_INT(n_steps, 3);
    CHECK(ends[0] == 128 && ends[1] == 192 && ends[2] == 220);
    CHECK_EQ_INT(states.n_snapshots, 2);
    CHECK(qa.cache.state_slot >= 0);
    CHECK_EQ_INT(states.n_live, 1);
    /* b: 9 blocks cached (144 positions), the snapshot at 128 */
    REQUIRE(sched_add(&s, &qb, &err) == 0);
    sched_output plan = sched_step(&s);
    CHECK_EQ_INT(qb.cache.n_cached_prompt, 128);
    CHECK(qb.cache.state_slot >= 0 && qb.cache.state_slot != qa.cache.state_slot);
    CHECK_EQ_INT(states.snapshots_restored, 1);
    /* b's chunk from 128 ends at its last boundary, 192 */
    for (int k = 0; k < plan.n_entries; k++)
        if (plan.entries[k].seq == &qb) CHECK_EQ_INT(plan.entries[k].start + plan.entries[k].n_new, 192);
    CHECK_EQ_INT(states.n_live, 2);
    /* b's own snapshot at 192 took the slot of a's (the least recently
     * used: a's at 128 was just restored) */
    CHECK_EQ_INT(states.n_snapshots, 2);
    CHECK(states.snapshots_taken == 3 && states.snapshots_dropped == 1);
    /* new sequences take the snapshots' slots, the least recently used
     * first, and then one waits: every slot is live */
    eng_seq qd = seq_of(&r, c, 40, 3), qe = seq_of(&r, c, 40, 4);
    REQUIRE(sched_add(&s, &qc, &err) == 0);
    sched_step(&s);
    CHECK(qc.cache.state_slot >= 0);
    CHECK_EQ_INT(states.n_live, 3);
    CHECK_EQ_INT(states.n_snapshots, 1);
    REQUIRE(sched_add(&s, &qd, &err) == 0);
    REQUIRE(sched_add(&s, &qe, &err) == 0);
    sched_step(&s);
    CHECK_EQ_INT(states.n_live, 4);
    CHECK_EQ_INT(states.n_snapshots, 0);
    CHECK_EQ_INT(qd.state, SEQ_RUNNING);
    CHECK_EQ_INT(qe.state, SEQ_WAITING);
    CHECK_EQ_INT(qe.cache.state_slot, -1);
    CHECK_EQ_INT(qe.cache.n_blocks, 0);
    /* a finish frees the slot: the waiting one runs */
    sched_remove(&s, &qa);
    CHECK_EQ_INT(qa.cache.state_slot, -1);
    sched_step(&s);
    CHECK_EQ_INT(qe.state, SEQ_RUNNING);
    CHECK(qe.cache.state_slot >= 0);
    eng_seq *rest[] = {&qb, &qc, &qd, &qe};
    for (int i = 0; i < 4; i++) sched_remove(&s, rest[i]);
    CHECK_EQ_INT(states.n_live, 0);
    CHECK_EQ_INT(bpool_used(&pool), 0);
    eng_seq *all[] = {&qa, &qb, &qc, &qd, &qe};
    for (int i = 0; i < 5; i++) free(all[i]->cache.blocks), free(all[i]->cache.block_hashes);
    sched_free(&s);
    spool_free(&states);
    bpool_free(&pool);
}

/* ---- the model ------------------------------------------------------------------------ */

static pdl_model *g_model;    /* NULL when a hybrid model does not load yet */
static int g_vocab;

/* What one sequence of a request produced: every row of logits it sampled
 * from (on_logits) and its tokens. */
typedef struct seq_out {
    float *rows;     /* [cap][vocab] */
    int n_rows, cap;
    int32_t tokens[512];
    int n_tokens;
    int cached;      /* FINISHED's cached_tokens */
    char finish[16];
} seq_out;

typedef struct req_out {
    seq_out seq[2];  /* n <= 2 */
} req_out;

/* Request id -> its output (the engine numbers requests from 1). */
static req_out *g_by_id[64];

static void on_logits(uint64_t id, int index, int position, const float *row, int vocab, void *user) {
    (void)position, (void)user;
    if (id >= 64 || !g_by_id[id] || index > 1) return;
    seq_out *s = &g_by_id[id]->seq[index];
    if (s->n_rows >= s->cap) return;
    memcpy(s->rows + (size_t)s->n_rows * (size_t)vocab, row, (size_t)vocab * sizeof *row);
    s->n_rows++;
}

static void on_event(const pdl_event *ev, void *user) {
    req_out *r = user;
    if (ev->index > 1) return;
    seq_out *s = &r->seq[ev->index];
    if (ev->kind == PDL_EVENT_TOKEN && s->n_tokens < 512) s->tokens[s->n_tokens++] = ev->token;
    if (ev->kind == PDL_EVENT_FINISHED) {
        s->cached = ev->cached_tokens;
        snprintf(s->finish, sizeof s->finish, "%s", ev->finish_reason);
    }
}

static void out_init(req_out *r, int cap) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 2; i++) {
        r->seq[i].cap = cap;
        r->seq[i].rows = malloc((size_t)cap * (size_t)g_vocab * sizeof(float));
        REQUIRE(r->seq[i].rows);
    }
}

static void out_free(req_out *r) {
    for (int i = 0; i < 2; i++) free(r->seq[i].rows);
    memset(r, 0, sizeof *r);
}

/* Engine options of these tests: F32 K/V, blocks of 16, snapshots every
 * 128 positions (two state chunks). */
static pdl_engine_options base_options(void) {
    pdl_engine_options o = {.block_size = 16, .kv_dtype = PDL_KV_F32, .max_num_batched_tokens = 512,
                            .kv_cache_memory = (size_t)64 << 20, .state_snapshot_interval = 128,
                            .on_logits = on_logits};
    return o;
}

static pdl_engine *make_engine(const pdl_engine_options *o) {
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, g_model, o, &err) == 0, "%s", err.message);
    memset(g_by_id, 0, sizeof g_by_id);
    return e;
}

static uint64_t add(pdl_engine *e, const int32_t *prompt, int n, const pdl_request_params *p, req_out *out) {
    uint64_t id;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_add_request(e, prompt, (size_t)n, p, on_event, out, &id, &err) == 0, "%s", err.message);
    REQUIRE(id < 64);
    g_by_id[id] = out;
    return id;
}

static void run(pdl_engine *e) {
    pdl_error err;
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
}

static void prompt_of(int32_t *out, int n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        out[i] = (int32_t)(2 + (x >> 8) % (uint32_t)(g_vocab - 2));
    }
}

static pdl_request_params greedy(int max_tokens) {
    pdl_request_params p = {.max_tokens = max_tokens, .logprobs = -1, .prompt_logprobs = -1, .ignore_eos = true};
    return p;
}

/* got's sequence i is want's sequence j: the same rows of logits (bytes)
 * and tokens. */
static void check_same_seq(const seq_out *want, const seq_out *got, const char *what) {
    CHECK_MSG(got->n_rows == want->n_rows && want->n_rows > 0, "%s: %d rows sampled vs %d", what, got->n_rows,
              want->n_rows);
    int n = got->n_rows < want->n_rows ? got->n_rows : want->n_rows;
    CHECK_MSG(memcmp(got->rows, want->rows, (size_t)n * (size_t)g_vocab * sizeof(float)) == 0,
              "%s: logits differ from the reference run", what);
    CHECK_MSG(got->n_tokens == want->n_tokens &&
                  memcmp(got->tokens, want->tokens, (size_t)want->n_tokens * sizeof(int32_t)) == 0,
              "%s: tokens differ", what);
}

/* The engine's state slots are all free and the blocks all back. */
static void check_nothing_held(pdl_engine *e, const char *what) {
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_MSG(st.state_slots_used == 0, "%s: %d state slots still held", what, st.state_slots_used);
    CHECK_MSG(st.kv_blocks_used == 0, "%s: %d blocks still held", what, st.kv_blocks_used);
}

#define TARGET_LEN 300
#define TARGET_OUT 40

/* The request under test alone in a fresh engine with options o. */
static void run_alone(const pdl_engine_options *o, const int32_t *prompt, int n, int max_tokens, req_out *out) {
    pdl_engine *e = make_engine(o);
    pdl_request_params p = greedy(max_tokens);
    add(e, prompt, n, &p, out);
    run(e);
    check_nothing_held(e, "alone");
    pdl_engine_free(e);
}

static void test_logits_are_the_same_bytes_alone_in_a_batch_and_at_any_chunk_size(void) {
    int32_t target[TARGET_LEN];
    prompt_of(target, TARGET_LEN, 1);
    pdl_engine_options o = base_options();
    o.no_prefix_caching = true; /* every run computes every row */
    req_out ref, got;
    out_init(&ref, TARGET_OUT + 1);
    run_alone(&o, target, TARGET_LEN, TARGET_OUT, &ref);
    CHECK_EQ_INT(ref.seq[0].n_tokens, TARGET_OUT);

    /* with 7 other requests of other lengths, arriving together */
    out_init(&got, TARGET_OUT + 1);
    pdl_engine *e = make_engine(&o);
    req_out others[7];
    int32_t op[7][200];
    for (int k = 0; k < 7; k++) {
        out_init(&others[k], 1);
        others[k].seq[0].cap = 0; /* their rows are not kept */
        prompt_of(op[k], 20 + 25 * k, 100 + (uint32_t)k);
        pdl_request_params p = greedy(10 + 7 * k), pt = greedy(TARGET_OUT);
        if (k == 3) add(e, target, TARGET_LEN, &pt, &got); /* in the middle of the queue */
        add(e, op[k], 20 + 25 * k, &p, &others[k]);
    }
    run(e);
    check_nothing_held(e, "with 7 others");
    pdl_engine_free(e);
    check_same_seq(&ref.seq[0], &got.seq[0], "with 7 other requests");
    for (int k = 0; k < 7; k++) out_free(&others[k]);
    out_free(&got);

    /* prefill chunks of 1, 64, 100 and 512 rows (max_num_batched_tokens
     * too, so that a step holds no more) */
    int chunks[] = {1, 64, 100, 512};
    for (int c = 0; c < 4; c++) {
        pdl_engine_options oc = o;
        oc.max_prefill_chunk = chunks[c];
        oc.max_num_batched_tokens = chunks[c] > 8 ? chunks[c] : 8;
        out_init(&got, TARGET_OUT + 1);
        run_alone(&oc, target, TARGET_LEN, TARGET_OUT, &got);
        char what[64];
        snprintf(what, sizeof what, "prefill chunks of %d", chunks[c]);
        check_same_seq(&ref.seq[0], &got.seq[0], what);
        out_free(&got);
    }
    out_free(&ref);
}

/* A pool far too small for all requests at once: the scheduler preempts
 * (state slots freed) and recomputes from position 0, or with prefix
 * caching from a snapshot of its own prefix, and every request gets the
 * bytes it gets alone. Two live slots in half the budget (and one snapshot
 * slot with caching), the rest blocks; each request needs two thirds of
 * the blocks. */
static void check_preemption(bool caching, bool mtp) {
    enum { N = 4, OUT = 40 };
    pdl_model_info info;
    pdl_model_get_info(g_model, &info);
    size_t block = kv_cache_block_bytes(g_model, PDL_KV_F32, 16, mtp);
    pdl_engine_options o = base_options();
    o.no_prefix_caching = !caching;
    if (mtp) { /* its drafts' blocks are reserved from the same small pool */
        o.spec_method = PDL_SPEC_MTP;
        o.num_speculative_tokens = 3;
        o.spec_no_pause = true;
    }
    o.max_num_seqs = 2;
    o.kv_cache_memory = (caching ? 5 : 4) * info.state_bytes;
    o.state_snapshot_slots = 1;
    int n_blocks = (int)(2 * info.state_bytes / block);
    int len = n_blocks * 16 * 2 / 3 - OUT;
    REQUIRE_MSG(len > 20 && len + OUT < 1024, "blocks of %zu bytes, state slots of %zu: prompts of %d", block,
                info.state_bytes, len);
    int32_t *prompts = malloc((size_t)N * (size_t)len * sizeof *prompts);
    REQUIRE(prompts);
    req_out alone[N], together[N];
    for (int k = 0; k < N; k++) {
        prompt_of(prompts + k * len, len - 5 * k, 500 + (uint32_t)k);
        out_init(&alone[k], OUT + 1);
        pdl_engine_options oa = base_options();
        oa.no_prefix_caching = true;
        run_alone(&oa, prompts + k * len, len - 5 * k, OUT, &alone[k]);
    }
    pdl_engine *e = make_engine(&o);
    for (int k = 0; k < N; k++) {
        out_init(&together[k], OUT + 1);
        pdl_request_params p = greedy(OUT);
        add(e, prompts + k * len, len - 5 * k, &p, &together[k]);
    }
    run(e);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_MSG(st.preemptions > 0, "the pool was meant to force preemption");
    if (mtp) CHECK_MSG(st.spec_draft_tokens > 0, "no MTP drafts were verified");
    CHECK_EQ_INT(st.kv_blocks_total, n_blocks);
    CHECK_EQ_INT(st.state_slots_total, caching ? 3 : 2); /* no snapshots without prefix caching */
    if (caching)
        fprintf(stderr, "  %llu preemptions, %llu restores from a snapshot\n", (unsigned long long)st.preemptions,
                (unsigned long long)st.state_snapshots_restored);
    check_nothing_held(e, "after preemption");
    pdl_engine_free(e);
    for (int k = 0; k < N; k++) {
        char what[64];
        snprintf(what, sizeof what, "request %d after preemption (caching %d, MTP %d)", k, caching, mtp);
        check_same_seq(&alone[k].seq[0], &together[k].seq[0], what);
        out_free(&alone[k]), out_free(&together[k]);
    }
    free(prompts);
}

static void test_preemption_recomputes_and_output_is_unchanged(void) { check_preemption(false, false); }
static void test_preemption_with_prefix_caching_restores_and_output_is_unchanged(void) { check_preemption(true, false); }
/* the same under MTP speculation: its K/V and reserved draft blocks go and
 * come back with the sequence's */
static void test_mtp_preemption_with_prefix_caching_output_is_unchanged(void) { check_preemption(true, true); }

/* A cached prefix starts from the state snapshot at the last cached block
 * that has one: the logits are the bytes of the cold run, and the cached
 * tokens count shows where the hit ended. Snapshots every 128 positions
 * and at the prompt's last 64-position boundary before its end. */
static void test_prefix_hit_inside_and_at_the_end_gives_the_cold_bytes(void) {
    enum { LEN = 220, OUT = 12 };
    int32_t r[LEN], w[LEN];
    prompt_of(r, LEN, 7);
    memcpy(w, r, 150 * sizeof *r); /* shares 150 positions: 9 blocks, a snapshot at 128 */
    prompt_of(w + 150, LEN - 150, 99);
    pdl_engine_options o = base_options();
    req_out cold, got, sink;
    out_init(&cold, OUT + 1);
    run_alone(&o, r, LEN, OUT, &cold);
    CHECK_EQ_INT(cold.seq[0].cached, 0);

    pdl_engine *e = make_engine(&o);
    out_init(&sink, 1);
    sink.seq[0].cap = 0;
    pdl_request_params p = greedy(4);
    add(e, w, LEN, &p, &sink);
    run(e);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_MSG(st.state_snapshots >= 2, "w's snapshots at 128 and 192: %d", st.state_snapshots);
    /* a hit inside the prompt: 9 blocks cached, the snapshot at 128 */
    out_init(&got, OUT + 1);
    p = greedy(OUT);
    add(e, r, LEN, &p, &got);
    run(e);
    CHECK_EQ_INT(got.seq[0].cached, 128);
    check_same_seq(&cold.seq[0], &got.seq[0], "hit inside the prompt (128 of 220)");
    out_free(&got);
    /* the same prompt again: its last boundary before the end (192) */
    out_init(&got, OUT + 1);
    add(e, r, LEN, &p, &got);
    run(e);
    CHECK_EQ_INT(got.seq[0].cached, 192);
    check_same_seq(&cold.seq[0], &got.seq[0], "hit at the prompt's end (192 of 220)");
    pdl_engine_get_stats(e, &st);
    CHECK_MSG(st.state_snapshots_restored == 2, "%llu restores", (unsigned long long)st.state_snapshots_restored);
    CHECK_MSG(st.prefix_cache_hits == 128 + 192, "%llu hit tokens", (unsigned long long)st.prefix_cache_hits);
    check_nothing_held(e, "after the hits");
    pdl_engine_free(e);
    out_free(&got), out_free(&sink), out_free(&cold);
}

/* A prefix shared past the last snapshot (330 positions of a 400-position
 * prompt whose snapshots are at 128, 256 and 384): the second prompt
 * sharing it starts at 256 and keeps the state where the shared blocks end
 * (320), so the third starts there, with the cold run's bytes. */
static void test_a_shared_prefix_gets_a_snapshot_where_it_ends(void) {
    enum { LEN = 400, SHARED = 330, OUT = 8 };
    int32_t y[LEN], z[LEN], z2[LEN];
    prompt_of(y, LEN, 71);
    memcpy(z, y, SHARED * sizeof *y), memcpy(z2, y, SHARED * sizeof *y);
    prompt_of(z + SHARED, LEN - SHARED, 72), prompt_of(z2 + SHARED, LEN - SHARED, 73);
    pdl_engine_options o = base_options();
    req_out cold, a, b, c;
    out_init(&cold, OUT + 1);
    run_alone(&o, z2, LEN, OUT, &cold);
    pdl_engine *e = make_engine(&o);
    out_init(&a, OUT + 1), out_init(&b, OUT + 1), out_init(&c, OUT + 1);
    pdl_request_params p = greedy(OUT);
    add(e, y, LEN, &p, &a);
    run(e);
    add(e, z, LEN, &p, &b);
    run(e);
    CHECK_EQ_INT(b.seq[0].cached, 256);
    add(e, z2, LEN, &p, &c);
    run(e);
    CHECK_EQ_INT(c.seq[0].cached, 320);
    check_same_seq(&cold.seq[0], &c.seq[0], "hit at the end of a shared prefix (320)");
    check_nothing_held(e, "after the shared prefix");
    pdl_engine_free(e);
    out_free(&a), out_free(&b), out_free(&c), out_free(&cold);
}

/* n = 2: the second sequence starts from the parent's state copied at the
 * fork (or, with one state slot, waits and recomputes the prompt), and
 * samples as a request of its own with seed + 1 would. */
static void test_n2_fork_copies_the_state(void) {
    enum { LEN = 100, OUT = 30 };
    int32_t prompt[LEN];
    prompt_of(prompt, LEN, 33);
    pdl_engine_options o = base_options();
    o.no_prefix_caching = true;
    pdl_request_params p = greedy(OUT);
    p.sampling.temperature = 0.8f;
    p.sampling.seed = 5;
    req_out single[2], pair;
    for (int i = 0; i < 2; i++) {
        out_init(&single[i], OUT + 1);
        pdl_engine *e = make_engine(&o);
        pdl_request_params pi = p;
        pi.sampling.seed = 5 + (uint64_t)i;
        add(e, prompt, LEN, &pi, &single[i]);
        run(e);
        pdl_engine_free(e);
    }
    out_init(&pair, OUT + 1);
    pdl_engine *e = make_engine(&o);
    p.n = 2;
    add(e, prompt, LEN, &p, &pair);
    run(e);
    check_nothing_held(e, "after n = 2");
    pdl_engine_free(e);
    check_same_seq(&single[0].seq[0], &pair.seq[0], "n = 2, sequence 0");
    check_same_seq(&single[1].seq[0], &pair.seq[1], "n = 2, sequence 1 (forked state)");
    /* one state slot: the second sequence gets none at the fork, waits
     * for the first to finish and recomputes the prompt */
    out_free(&pair);
    out_init(&pair, OUT + 1);
    pdl_engine_options o1 = o;
    o1.max_num_seqs = 1;
    o1.state_snapshot_slots = -1;
    e = make_engine(&o1);
    add(e, prompt, LEN, &p, &pair);
    run(e);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.state_slots_total, 1);
    check_nothing_held(e, "after n = 2 in one slot");
    pdl_engine_free(e);
    check_same_seq(&single[0].seq[0], &pair.seq[0], "n = 2 in one slot, sequence 0");
    check_same_seq(&single[1].seq[0], &pair.seq[1], "n = 2 in one slot, sequence 1 (recomputed)");
    CHECK_MSG(memcmp(single[0].seq[0].tokens, single[1].seq[0].tokens, OUT * sizeof(int32_t)) != 0,
              "seeds 5 and 6 were meant to sample differently");
    out_free(&single[0]), out_free(&single[1]), out_free(&pair);
}

/* Aborted requests (one in its prefill, one decoding) give their slots back
 * at once; the request beside them is unchanged. */
static void test_aborts_free_their_state_slots(void) {
    enum { LEN = 200, OUT = 20 };
    int32_t a[LEN], b[LEN], c[LEN];
    prompt_of(a, LEN, 61), prompt_of(b, 20, 62), prompt_of(c, LEN, 63);
    pdl_engine_options o = base_options();
    o.no_prefix_caching = true;
    o.max_prefill_chunk = 64;
    req_out ref, outs[3];
    out_init(&ref, OUT + 1);
    run_alone(&o, c, LEN, OUT, &ref);
    pdl_engine *e = make_engine(&o);
    for (int i = 0; i < 3; i++) out_init(&outs[i], OUT + 1);
    pdl_request_params p = greedy(OUT), pl = greedy(400);
    uint64_t ia = add(e, a, LEN, &p, &outs[0]);
    uint64_t ib = add(e, b, 20, &pl, &outs[1]);
    add(e, c, LEN, &p, &outs[2]);
    pdl_error err;
    int active;
    REQUIRE_MSG(pdl_engine_step(e, &active, &err) == 0, "%s", err.message);
    REQUIRE_MSG(pdl_engine_step(e, &active, &err) == 0, "%s", err.message);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.state_slots_used, 3);
    CHECK_EQ_INT(pdl_engine_abort(e, ia), 0); /* in its prefill (64 of 200 rows per step) */
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.state_slots_used, 2);
    for (int i = 0; i < 6; i++) REQUIRE_MSG(pdl_engine_step(e, &active, &err) == 0, "%s", err.message);
    CHECK(outs[1].seq[0].n_tokens > 0); /* b is decoding */
    CHECK_EQ_INT(pdl_engine_abort(e, ib), 0);
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.state_slots_used, st.running);
    CHECK_EQ_INT(strcmp(outs[0].seq[0].finish, "abort"), 0);
    CHECK_EQ_INT(strcmp(outs[1].seq[0].finish, "abort"), 0);
    run(e);
    check_nothing_held(e, "after the aborts");
    pdl_engine_free(e);
    check_same_seq(&ref.seq[0], &outs[2].seq[0], "the request beside the aborted ones");
    for (int i = 0; i < 3; i++) out_free(&outs[i]);
    out_free(&ref);
}

/* n-gram drafts verified over the recurrent state: the same logits bytes
 * and tokens as plain decoding, over many chunk boundaries of the state
 * (the drafts are capped so that rejected rows need no undo). */
static void test_ngram_speculation_equals_plain_decoding(void) {
    enum { LEN = 40, OUT = 200 };
    int32_t prompt[LEN];
    for (int i = 0; i < LEN; i++) prompt[i] = 2 + (i * 7) % 11; /* repetitive: the n-gram lookup finds drafts */
    pdl_engine_options o = base_options();
    req_out plain, spec;
    out_init(&plain, OUT + 1);
    run_alone(&o, prompt, LEN, OUT, &plain);
    out_init(&spec, OUT + 1);
    o.spec_method = PDL_SPEC_NGRAM;
    o.num_speculative_tokens = 8;
    o.spec_no_pause = true;
    pdl_engine *e = make_engine(&o);
    pdl_request_params p = greedy(OUT);
    add(e, prompt, LEN, &p, &spec);
    run(e);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_MSG(st.spec_draft_tokens > 0, "no drafts were verified");
    check_nothing_held(e, "after speculation");
    pdl_engine_free(e);
    check_same_seq(&plain.seq[0], &spec.seq[0], "n-gram speculation");
    out_free(&plain), out_free(&spec);
}

/* ---- the MTP drafter ------------------------------------------------------------ */

/* Drafts the engine proposed: request, first position, tokens. */
typedef struct draft_event {
    uint64_t id;
    int position, n;
    int32_t d[PDL_MAX_SPEC_TOKENS];
} draft_event;
static draft_event g_drafts[256];
static int g_n_drafts;

static void on_drafts(uint64_t id, int index, int position, const int32_t *d, int n, void *user) {
    (void)index, (void)user;
    if (g_n_drafts == 256) return;
    draft_event *ev = &g_drafts[g_n_drafts++];
    ev->id = id, ev->position = position, ev->n = n;
    memcpy(ev->d, d, (size_t)n * sizeof *d);
}

static int32_t first_max(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The MTP block's greedy chain for a sequence of N known tokens, from the
 * model's own calls on a cache of its own: the main stack over tok[0 ..
 * N-1), the block over rows 0 .. N-2 (row p: token tok[p + 1]), draft 1
 * from its output at N - 2, each next draft from one more row fed the
 * previous draft and output. */
static void mtp_chain(const int32_t *tok, int N, int k, int32_t *out) {
    const pdl_model *m = g_model;
    int H = m->cfg.hidden, V = m->cfg.vocab;
    pdl_context *ctx = NULL;
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_context_create(&ctx, m, NULL, &err) == 0, "%s", err.message);
    REQUIRE_MSG(kv_cache_create(&kv, m, PDL_KV_F32, 16, 40, 1, true, &err) == 0, "%s", err.message);
    int rows = N - 1;
    REQUIRE(rows + k <= 40 * 16 && rows <= 512);
    static int32_t pos[512], slot[512], table[40], idx[512];
    for (int i = 0; i < 40; i++) table[i] = i;
    for (int i = 0; i < 512; i++) pos[i] = slot[i] = idx[i] = i;
    const int32_t *tables[1] = {table};
    int32_t cu[2] = {0, rows}, state = 0, last = rows - 1;
    float *hidden = malloc((size_t)rows * H * sizeof *hidden), *logits = malloc((size_t)V * sizeof *logits);
    float *h = malloc((size_t)H * sizeof *h), *h2 = malloc((size_t)H * sizeof *h2);
    pdl_batch b = {.n_tokens = rows, .token_ids = tok, .positions = pos, .slot_mapping = slot, .n_seqs = 1,
                   .cu_seqlens = cu, .block_tables = tables, .n_logits = 1, .logits_indices = &last,
                   .state_slots = &state};
    REQUIRE_MSG(pdl_forward(ctx, kv, &b, logits, &err) == 0, "%s", err.message);
    memcpy(hidden, model_forward_hidden(ctx), (size_t)rows * H * sizeof *hidden);
    b.token_ids = tok + 1; /* the block's rows 0 .. N-2 */
    REQUIRE_MSG(model_forward_mtp(ctx, kv, &b, hidden, true, h, logits, &err) == 0, "%s", err.message);
    out[0] = first_max(logits, V);
    for (int j = 1; j < k; j++) {
        int32_t p = rows - 1 + j, zero = 0, one[2] = {0, 1};
        pdl_batch c = {.n_tokens = 1, .token_ids = &out[j - 1], .positions = &pos[p], .slot_mapping = &slot[p],
                       .n_seqs = 1, .cu_seqlens = one, .block_tables = tables, .n_logits = 1, .logits_indices = &zero,
                       .state_slots = &state};
        REQUIRE_MSG(model_forward_mtp(ctx, kv, &c, h, false, h2, logits, &err) == 0, "%s", err.message);
        memcpy(h, h2, (size_t)H * sizeof *h);
        out[j] = first_max(logits, V);
    }
    free(hidden), free(logits), free(h), free(h2);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
}

/* MTP speculation ({"method": "mtp"}) gives plain decoding's tokens and
 * logits bytes, greedy and sampled with a seed, with three requests
 * decoding together; the drafts are proposed and verified; and every
 * proposal is the block's greedy chain computed with the model's own calls
 * on a cache of its own (so the drafter follows the main model's kept rows:
 * a hidden state or token off by one row, or K/V missed at a chunk or
 * verification boundary, changes the drafts). */
static void test_mtp_speculation_equals_plain_decoding_and_drafts_the_chain(void) {
    enum { N_REQ = 3, LEN = 37, OUT = 48 };
    int32_t prompts[N_REQ][LEN];
    for (int r = 0; r < N_REQ; r++) prompt_of(prompts[r], LEN, 70 + (uint32_t)r);
    pdl_request_params ps[N_REQ];
    for (int r = 0; r < N_REQ; r++) {
        ps[r] = greedy(OUT);
        if (r == 2) ps[r].sampling = (pdl_sampling){.temperature = 0.8f, .top_p = 1.0f, .seed = 5};
    }
    req_out plain[N_REQ], spec[N_REQ];
    pdl_engine_options o = base_options();
    o.no_prefix_caching = true;
    o.max_num_batched_tokens = 24; /* prompts in chunks: the drafter absorbs each */
    for (int mode = 0; mode < 2; mode++) {
        req_out *outs = mode ? spec : plain;
        if (mode) {
            o.spec_method = PDL_SPEC_MTP;
            o.num_speculative_tokens = 3;
            o.spec_no_pause = true;
            o.on_drafts = on_drafts;
            g_n_drafts = 0;
        }
        pdl_engine *e = make_engine(&o);
        for (int r = 0; r < N_REQ; r++) {
            out_init(&outs[r], OUT + 1);
            add(e, prompts[r], LEN, &ps[r], &outs[r]);
        }
        run(e);
        pdl_engine_stats st;
        pdl_engine_get_stats(e, &st);
        if (mode) CHECK_MSG(st.spec_draft_tokens > 0, "no MTP drafts were verified");
        check_nothing_held(e, mode ? "after MTP speculation" : "plain");
        pdl_engine_free(e);
    }
    for (int r = 0; r < N_REQ; r++) check_same_seq(&plain[r].seq[0], &spec[r].seq[0], "MTP speculation");
    CHECK_MSG(g_n_drafts >= 3, "only %d proposals", g_n_drafts);
    int checked = 0;
    for (int i = 0; i < g_n_drafts; i++) {
        const draft_event *ev = &g_drafts[i];
        int r = (int)ev->id - 1; /* the engine numbers requests from 1 */
        REQUIRE(r >= 0 && r < N_REQ);
        int32_t all[LEN + OUT], want[PDL_MAX_SPEC_TOKENS];
        memcpy(all, prompts[r], sizeof prompts[r]);
        memcpy(all + LEN, plain[r].seq[0].tokens, (size_t)plain[r].seq[0].n_tokens * sizeof *all);
        REQUIRE(ev->position <= LEN + plain[r].seq[0].n_tokens);
        mtp_chain(all, ev->position, ev->n, want);
        CHECK_MSG(!memcmp(want, ev->d, (size_t)ev->n * sizeof *want),
                  "request %d at position %d: the engine drafted %d %d.., the block's chain is %d %d..", r,
                  ev->position, ev->d[0], ev->n > 1 ? ev->d[1] : -1, want[0], ev->n > 1 ? want[1] : -1);
        checked++;
    }
    fprintf(stderr, "  %d MTP proposals checked against the chain\n", checked);
    for (int r = 0; r < N_REQ; r++) out_free(&plain[r]), out_free(&spec[r]);
}

/* A model without the block refuses the method at engine creation. */
static void test_mtp_needs_the_block(const pdl_model *without) {
    pdl_engine_options o = base_options();
    o.spec_method = PDL_SPEC_MTP;
    o.num_speculative_tokens = 2;
    pdl_engine *e = NULL;
    pdl_error err;
    CHECK(pdl_engine_create(&e, without, &o, &err) != 0);
    CHECK_MSG(strstr(err.message, "multi-token-prediction block") != NULL, "message: %s", err.message);
}

/* One budget covers the blocks and the state slots, and max_num_seqs is
 * lowered to the live slots half the budget holds. */
static void test_one_budget_covers_blocks_and_state_slots(void) {
    pdl_model_info info;
    pdl_model_get_info(g_model, &info);
    REQUIRE(info.n_recurrent_layers > 0 && info.state_bytes > 0);
    size_t block = pdl_kv_cache_block_bytes(g_model, PDL_KV_F32, 16);
    pdl_engine_options o = base_options();
    o.max_num_seqs = 64;
    o.kv_cache_memory = 9 * info.state_bytes; /* half holds 4 slots, a quarter 2 */
    pdl_engine *e = make_engine(&o);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.state_slot_bytes, info.state_bytes);
    CHECK_EQ_INT(st.kv_block_bytes, block);
    /* live: 4 (half the budget); snapshots: what a quarter holds (2); the
     * rest blocks */
    CHECK_EQ_INT(st.state_slots_total, 6);
    CHECK_MSG((size_t)st.state_slots_total * st.state_slot_bytes + (size_t)st.kv_blocks_total * st.kv_block_bytes <=
                  o.kv_cache_memory, "the pools exceed the budget");
    CHECK_EQ_INT(st.kv_blocks_total, (int)((o.kv_cache_memory - 6 * info.state_bytes) / block));
    /* 6 requests, 4 live slots: never more than 4 run at once */
    int32_t prompt[30];
    req_out outs[6];
    for (int k = 0; k < 6; k++) {
        out_init(&outs[k], 1);
        outs[k].seq[0].cap = 0;
        prompt_of(prompt, 30, 700 + (uint32_t)k);
        pdl_request_params p = greedy(5);
        add(e, prompt, 30, &p, &outs[k]);
    }
    pdl_error err;
    int active = 1, most = 0;
    while (active) {
        REQUIRE_MSG(pdl_engine_step(e, &active, &err) == 0, "%s", err.message);
        pdl_engine_get_stats(e, &st);
        if (st.running > most) most = st.running;
        CHECK(st.state_slots_used == st.running);
    }
    CHECK_EQ_INT(most, 4);
    for (int k = 0; k < 6; k++) {
        CHECK_EQ_INT(outs[k].seq[0].n_tokens, 5);
        out_free(&outs[k]);
    }
    check_nothing_held(e, "after the budget test");
    pdl_engine_free(e);
    /* too small for one live slot */
    o.kv_cache_memory = info.state_bytes;
    pdl_engine *bad = NULL;
    CHECK(pdl_engine_create(&bad, g_model, &o, &err) != 0);
    CHECK_CONTAINS(err.message, "state slot");
}

static void test_moe_logits_are_the_same_bytes_alone_in_a_batch_and_at_any_chunk_size(void) {
    test_logits_are_the_same_bytes_alone_in_a_batch_and_at_any_chunk_size();
}
static void test_moe_prefix_hit_inside_and_at_the_end_gives_the_cold_bytes(void) {
    test_prefix_hit_inside_and_at_the_end_gives_the_cold_bytes();
}
static void test_moe_ngram_speculation_equals_plain_decoding(void) { test_ngram_speculation_equals_plain_decoding(); }
static void test_moe_mtp_speculation_equals_plain_decoding_and_drafts_the_chain(void) {
    test_mtp_speculation_equals_plain_decoding_and_drafts_the_chain();
}

/* ---- setup ---------------------------------------------------------------------------- */

/* The tiny Qwen3.5 (hidden 64, 6 Gated DeltaNet and 2 full-attention
 * layers, vocab 128) with a context long enough for these prompts, as the
 * GGUF llama.cpp's converter writes; moe: Qwen3.5-MoE's experts, as a
 * Hugging Face folder. NULL with
 * the reason when the library cannot load a hybrid model. */
static pdl_model *load_tiny_qwen35(bool moe, bool mtp, pdl_error *err) {
    q35_spec s = q35_tiny_spec(moe);
    s.ctx = 1024;
    s.mtp_layers = mtp ? 1 : 0;
    q35_weights w = q35_make_weights(&s, 35);
    char *path;
    if (moe) { /* as a Hugging Face folder */
        path = test_make_dir("qwen35moe-tiny");
        q35_write_hf(&s, &w, path);
    } else {
        path = test_tmp_path(mtp ? "qwen35-tiny.gguf" : "qwen35-tiny-no-mtp.gguf");
        q35_write_gguf(&s, &w, path);
    }
    q35_free_weights(&s, &w);
    pdl_model *m = NULL;
    pdl_model_options mo = {.n_threads = 2};
    int rc = pdl_model_load(&m, path, &mo, err);
    free(path);
    return rc == 0 ? m : NULL;
}

int main(void) {
    RUN(test_state_pool_live_slots_take_free_ones_then_drop_snapshots);
    RUN(test_state_pool_snapshot_leaves_with_its_block);
    RUN(test_hybrid_drafts_never_close_a_state_chunk);
    RUN(test_scheduler_cuts_chunks_at_snapshots_and_hits_stop_at_the_last);
    pdl_error err;
    g_model = load_tiny_qwen35(false, true, &err);
    if (!g_model) {
        /* until the library runs the Gated DeltaNet forward, the
         * architecture is refused at load and the engine tests wait for it;
         * any other load error fails */
        if (strstr(err.message, "'qwen35' is not supported")) {
            fprintf(stderr, "skipping the engine tests: %s\n", err.message);
            return test_summary();
        }
        fprintf(stderr, "the tiny Qwen3.5 does not load: %s\n", err.message);
        return 1;
    }
    pdl_model_info info;
    pdl_model_get_info(g_model, &info);
    g_vocab = info.vocab;
    RUN(test_one_budget_covers_blocks_and_state_slots);
    RUN(test_logits_are_the_same_bytes_alone_in_a_batch_and_at_any_chunk_size);
    RUN(test_preemption_recomputes_and_output_is_unchanged);
    RUN(test_preemption_with_prefix_caching_restores_and_output_is_unchanged);
    RUN(test_prefix_hit_inside_and_at_the_end_gives_the_cold_bytes);
    RUN(test_a_shared_prefix_gets_a_snapshot_where_it_ends);
    RUN(test_n2_fork_copies_the_state);
    RUN(test_aborts_free_their_state_slots);
    RUN(test_ngram_speculation_equals_plain_decoding);
    RUN(test_mtp_speculation_equals_plain_decoding_and_drafts_the_chain);
    RUN(test_mtp_preemption_with_prefix_caching_output_is_unchanged);
    pdl_model *without = load_tiny_qwen35(false, false, &err);
    REQUIRE_MSG(without != NULL, "%s", err.message);
    test_mtp_needs_the_block(without);
    pdl_model_free(without);
    pdl_model_free(g_model);
    /* the MoE variant: the same engine paths over routed experts */
    g_model = load_tiny_qwen35(true, true, &err);
    if (!g_model) {
        fprintf(stderr, "the tiny Qwen3.5-MoE does not load: %s\n", err.message);
        return 1;
    }
    RUN(test_moe_logits_are_the_same_bytes_alone_in_a_batch_and_at_any_chunk_size);
    RUN(test_moe_prefix_hit_inside_and_at_the_end_gives_the_cold_bytes);
    RUN(test_moe_ngram_speculation_equals_plain_decoding);
    RUN(test_moe_mtp_speculation_equals_plain_decoding_and_drafts_the_chain);
    pdl_model_free(g_model);
    return test_summary();
}
