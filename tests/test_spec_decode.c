/*
 * test_spec_decode.c - speculative decoding: the n-gram proposer on
 * hand-made sequences (longest match, earliest occurrence, bounds), the
 * packing of verification rows (k + 1 logits rows in a batch mixed with
 * decodes and prefills; a one-row shift fails), the policy (batch limit,
 * back-off after rejections), and through the engine: output identical to
 * plain decoding for n-gram and draft-model proposers, greedy and sampled
 * (seeded), alone and batched, with n > 1 and preemption; the token
 * distribution at a verified position (chi-square against plain decoding);
 * rejected drafts' K/V never read (every uncomputed slot poisoned with NaN
 * after each step); stop strings and max_tokens inside an accepted run.
 */
#include <math.h>
#include <string.h>

#include "engine/engine_hooks.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/spec_decode.h"
#include "model/model.h"
#include "pagedlm.h"
#include "test_util.h"

/* ---- the n-gram proposer ------------------------------------------------------ */

static void test_ngram_prefers_the_longest_match(void) {
    /* the suffix "2 3 4" occurs at 1 (followed by 5 6) and "3 4" also at 8
     * (followed by 9): the 3-gram wins */
    int32_t t[] = {1, 2, 3, 4, 5, 6, 7, 3, 4, 9, 9, 2, 3, 4};
    int32_t out[8];
    int n = spec_ngram_propose(t, 14, 1, 3, 4, out);
    CHECK_EQ_INT(n, 4);
    CHECK(out[0] == 5 && out[1] == 6 && out[2] == 7 && out[3] == 3);
    /* with the longest allowed 2, "3 4" first occurs at 2 too: same place */
    n = spec_ngram_propose(t, 14, 1, 2, 2, out);
    CHECK_EQ_INT(n, 2);
    CHECK(out[0] == 5 && out[1] == 6);
}

static void test_ngram_takes_the_earliest_occurrence(void) {
    int32_t t[] = {7, 8, 1, 7, 8, 2, 7, 8};
    int32_t out[4];
    CHECK_EQ_INT(spec_ngram_propose(t, 8, 2, 2, 1, out), 1);
    CHECK_EQ_INT(out[0], 1); /* after the first "7 8", not the second (2) */
}

static void test_ngram_bounds(void) {
    int32_t t[] = {5, 6, 9, 5, 6};
    int32_t out[8];
    CHECK_EQ_INT(spec_ngram_propose(t, 5, 3, 4, 4, out), 0); /* only a 2-gram matches */
    CHECK_EQ_INT(spec_ngram_propose(t, 5, 2, 4, 4, out), 3); /* 9 5 6: proposals stop at the end */
    CHECK(out[0] == 9 && out[1] == 5 && out[2] == 6);
    CHECK_EQ_INT(spec_ngram_propose(t, 5, 2, 4, 1, out), 1); /* k caps them */
    int32_t u[] = {1, 2, 3};
    CHECK_EQ_INT(spec_ngram_propose(u, 3, 1, 3, 4, out), 0); /* nothing repeats */
    CHECK_EQ_INT(spec_ngram_propose(u, 1, 1, 3, 4, out), 0);
}

/* ---- packing ------------------------------------------------------------------- */

/* Four entries: a decode with 3 drafts, a plain decode, the last chunk of
 * a prompt, and a middle chunk. Every row's token, position and slot, and
 * exactly the rows that need logits. */
static void test_verification_rows_are_packed_with_logits_on_every_draft(void) {
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_model *m = NULL;
    pdl_error err;
    REQUIRE(pdl_model_load(&m, path, NULL, &err) == 0);
    pdl_kv_cache *kv = NULL;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 4, 64, &err) == 0);
    eng_request req = {.params = {.logprobs = -1, .prompt_logprobs = -1}};
    int32_t t_a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, t_b[6] = {1, 5, 5, 5, 5, 5}, t_c[7] = {1, 9, 8, 7, 6, 5, 4},
            t_d[12] = {1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
    int32_t b_a[4] = {10, 11, 12, 13}, b_b[2] = {20, 21}, b_c[2] = {30, 31}, b_d[3] = {40, 41, 42};
    eng_seq a = {.req = &req, .tokens = t_a, .n_tokens = 10, .n_prompt = 4, .cache.n_computed = 9, .cache.blocks = b_a,
                 .cache.n_blocks = 4, .spec.n_draft = 3, .spec.draft = {77, 78, 79}};
    eng_seq b = {.req = &req, .tokens = t_b, .n_tokens = 6, .n_prompt = 3, .cache.n_computed = 5, .cache.blocks = b_b, .cache.n_blocks = 2};
    eng_seq c = {.req = &req, .tokens = t_c, .n_tokens = 7, .n_prompt = 7, .cache.n_computed = 4, .cache.blocks = b_c, .cache.n_blocks = 2};
    eng_seq d = {.req = &req, .tokens = t_d, .n_tokens = 12, .n_prompt = 12, .cache.n_computed = 0, .cache.blocks = b_d,
                 .cache.n_blocks = 3};
    sched_entry ents[4] = {{&a, 9, 4, true}, {&b, 5, 1, false}, {&c, 4, 3, false}, {&d, 0, 8, false}};
    sched_output plan = {.entries = ents, .n_entries = 4, .n_decode = 2, .n_tokens = 16};
    runner r;
    REQUIRE(runner_init(&r, m, kv, false, &err) == 0);
    REQUIRE(runner_pack(&r, &plan, &err) == 0);
    const int32_t want_ids[16] = {10, 77, 78, 79, 5, 6, 5, 4, 1, 3, 3, 3, 3, 3, 3, 3};
    const int32_t want_pos[16] = {9, 10, 11, 12, 5, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 7};
    /* slot = block * 4 + pos % 4 */
    const int32_t want_slot[16] = {12 * 4 + 1, 12 * 4 + 2, 12 * 4 + 3, 13 * 4 + 0, 21 * 4 + 1, 31 * 4 + 0, 31 * 4 + 1,
                                   31 * 4 + 2, 40 * 4 + 0, 40 * 4 + 1, 40 * 4 + 2, 40 * 4 + 3, 41 * 4 + 0, 41 * 4 + 1,
                                   41 * 4 + 2, 41 * 4 + 3};
    CHECK_EQ_INT(r.batch.n_tokens, 16);
    CHECK(memcmp(r.batch.token_ids, want_ids, sizeof want_ids) == 0);
    CHECK(memcmp(r.batch.positions, want_pos, sizeof want_pos) == 0);
    CHECK(memcmp(r.batch.slot_mapping, want_slot, sizeof want_slot) == 0);
    /* logits: the 4 verification rows, the decode row, the prompt's last row; not the middle chunk */
    const int32_t want_logits[6] = {0, 1, 2, 3, 4, 7};
    CHECK_EQ_INT(r.batch.n_logits, 6);
    CHECK(memcmp(r.batch.logits_indices, want_logits, sizeof want_logits) == 0);
    const int32_t want_lcu[5] = {0, 4, 5, 6, 6};
    CHECK(memcmp(r.bb.logits_cu_seqlens, want_lcu, sizeof want_lcu) == 0);
    const int32_t want_cu[5] = {0, 4, 5, 8, 16};
    CHECK(memcmp(r.batch.cu_seqlens, want_cu, sizeof want_cu) == 0);
    runner_free(&r);
    pdl_kv_cache_free(kv);
    pdl_model_free(m);
    free(path);
}

/* ---- the policy ---------------------------------------------------------------- */

static void test_backoff_doubles_after_rejections_and_resets_on_acceptance(void) {
    spec_state s = {.method = PDL_SPEC_NGRAM, .k = 4};
    eng_seq q = {.n_tokens = 10};
    int waits[8];
    for (int i = 0; i < 8; i++) {
        q.spec.n_draft = 4;
        spec_verified(&s, &q, 0);
        waits[i] = q.spec.wait;
    }
    const int want[8] = {1, 2, 4, 8, 16, 32, 32, 32};
    CHECK(memcmp(waits, want, sizeof want) == 0);
    q.spec.n_draft = 4;
    spec_verified(&s, &q, 2);
    CHECK_EQ_INT(q.spec.wait, 0);
    q.spec.n_draft = 4;
    spec_verified(&s, &q, 0);
    CHECK_EQ_INT(q.spec.wait, 1);
    CHECK_EQ_INT(s.drafts, 10);
    CHECK_EQ_INT(s.draft_tokens, 40);
    CHECK_EQ_INT(s.accepted, 2);
    CHECK_EQ_INT(s.accepted_per_pos[0], 1);
    CHECK_EQ_INT(s.accepted_per_pos[1], 1);
    CHECK_EQ_INT(s.accepted_per_pos[2], 0);
}

/* The cost model: decode steps that take 5 times as long with drafts and
 * gain 1.2 tokens do not pay (pause); 1.03 times as long for 2.5 tokens do. */
static void test_speculation_pauses_when_it_does_not_pay(void) {
    spec_state s = {.method = PDL_SPEC_NGRAM, .k = 4};
    for (int i = 0; i < 5; i++) spec_step_done(&s, 1e-3, true, false, 0, 0);
    spec_step_done(&s, 1e-2, false, true, 6, 1); /* a step with prefill rows: not measured */
    for (int i = 0; i < 3; i++) spec_step_done(&s, 1.03e-3, true, true, 5, 2);
    CHECK_EQ_INT(s.pause, 0);
    for (int i = 0; i < 12; i++) spec_step_done(&s, 5e-3, true, true, 6, 5);
    CHECK_EQ_INT(s.pause, 64);
    /* paused: no drafts for 64 steps */
    int32_t toks[6] = {1, 2, 3, 1, 2, 3};
    eng_seq q = {.state = SEQ_RUNNING, .tokens = toks, .n_tokens = 6, .n_prompt = 2, .cache.n_computed = 5};
    eng_seq *ptr = &q;
    int max_len = 100;
    pdl_error err;
    s.lookup_min = 1, s.lookup_max = 3, s.max_batch = 4;
    REQUIRE(spec_propose(&s, &ptr, &max_len, 1, &err) == 0);
    CHECK_EQ_INT(q.spec.n_draft, 0);
    CHECK_EQ_INT(s.pause, 63);
}

static void test_no_drafts_beyond_the_batch_limit(void) {
    spec_state s = {.method = PDL_SPEC_NGRAM, .k = 4, .lookup_min = 1, .lookup_max = 3, .max_batch = 4};
    int32_t toks[6] = {1, 2, 3, 1, 2, 3};
    eng_seq qs[5];
    eng_seq *ptr[5];
    int max_len[5];
    for (int i = 0; i < 5; i++) {
        qs[i] = (eng_seq){.state = SEQ_RUNNING, .tokens = toks, .n_tokens = 6, .n_prompt = 2, .cache.n_computed = 5};
        ptr[i] = &qs[i];
        max_len[i] = 100;
    }
    pdl_error err;
    REQUIRE(spec_propose(&s, ptr, max_len, 4, &err) == 0);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(qs[i].spec.n_draft, 3); /* what followed the first "1 2 3" */
    REQUIRE(spec_propose(&s, ptr, max_len, 5, &err) == 0);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(qs[i].spec.n_draft, 0);
    /* room: nothing past max_len */
    max_len[0] = 7;
    REQUIRE(spec_propose(&s, ptr, max_len, 1, &err) == 0);
    CHECK_EQ_INT(qs[0].spec.n_draft, 0);
}

/* ---- through the engine ------------------------------------------------------------ */

typedef struct out {
    int32_t tokens[600];
    int n;
    char text[8192];
    size_t text_len;
    char finish[16];
} out;

static void on_event(const pdl_event *ev, void *user) {
    out *o = (out *)user + ev->index;
    if (ev->kind == PDL_EVENT_TOKEN && o->n < 600) o->tokens[o->n++] = ev->token;
    if (ev->kind == PDL_EVENT_FINISHED) snprintf(o->finish, sizeof o->finish, "%s", ev->finish_reason);
    if (ev->text_len && o->text_len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->text_len, ev->text, ev->text_len);
        o->text_len += ev->text_len;
    }
}

/* ctx: 0 = the model's; stories260K was trained with 512 positions (its
 * file says 128, so a longer context is allowed explicitly) and repeats its
 * own phrases over that length. */
static pdl_model *load_ctx(const char *rel, int ctx) {
    char *path = test_data_path(rel);
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 2, .ctx_size = ctx, .allow_long_context = true};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s", err.message);
    free(path);
    return m;
}

static pdl_model *load(const char *rel) { return load_ctx(rel, 0); }

typedef struct spec_opts {
    pdl_spec_method method;
    int k;
    int lookup_min, lookup_max; /* 0: 1 and 4 */
    pdl_model *draft;
    size_t kv_bytes;
    bool poison;
} spec_opts;

/* The engines' KV dtype (the output tests run again over Q8_0 and Q4_0 caches). */
static pdl_kv_dtype g_kv_dtype = PDL_KV_F32;

/* Runs the requests (all at once) and returns the engine's statistics. */
static pdl_engine_stats run_all(pdl_model *m, const spec_opts *so, int n_req, int32_t (*prompts)[64],
                                const int *lens, const pdl_request_params *params, out *outs) {
    pdl_engine_options eo = {.kv_dtype = g_kv_dtype, .kv_cache_memory = so->kv_bytes, .spec_method = so->method,
                             .num_speculative_tokens = so->k, .draft_model = so->draft,
                             .prompt_lookup_min = so->lookup_min ? so->lookup_min : 1,
                             .prompt_lookup_max = so->lookup_max ? so->lookup_max : 4, .spec_max_batch = 64,
                             .spec_no_pause = true /* tiny models: the cost model would stop speculating */};
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, m, &eo, &err) == 0, "%s", err.message);
    for (int r = 0; r < n_req; r++) {
        memset(&outs[r * 4], 0, 4 * sizeof(out));
        REQUIRE_MSG(pdl_engine_add_request(e, prompts[r], (size_t)lens[r], &params[r], on_event, &outs[r * 4], NULL,
                                           &err) == 0,
                    "%s", err.message);
    }
    int active = 1;
    while (active) {
        REQUIRE_MSG(pdl_engine_step(e, &active, &err) == 0, "%s", err.message);
        if (so->poison) eng_poison_uncomputed_kv(e);
    }
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    pdl_engine_free(e);
    return st;
}

static void same_outputs(const out *a, const out *b, int n_req, int n_per, const char *what) {
    for (int r = 0; r < n_req; r++)
        for (int i = 0; i < n_per; i++) {
            const out *x = &a[r * 4 + i], *y = &b[r * 4 + i];
            CHECK_MSG(x->n == y->n && memcmp(x->tokens, y->tokens, (size_t)x->n * sizeof(int32_t)) == 0,
                      "%s: request %d sample %d: %d vs %d tokens, or other tokens", what, r, i, x->n, y->n);
            CHECK_MSG(x->text_len == y->text_len && memcmp(x->text, y->text, x->text_len) == 0, "%s: request %d text",
                      what, r);
            CHECK_MSG(strcmp(x->finish, y->finish) == 0, "%s: request %d finish %s vs %s", what, r, x->finish, y->finish);
        }
}

static const int32_t STORY[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};

static void story_prompts(int32_t (*p)[64], int *lens, int n) {
    for (int r = 0; r < n; r++) {
        lens[r] = 5 + r % 8;
        for (int i = 0; i < lens[r]; i++) p[r][i] = STORY[(i + r) % 16];
        p[r][0] = 1;
    }
}

/* Greedy and seeded sampling, one request and six at once (some n = 2),
 * n-gram with k = 4: the same tokens as without speculation; drafts were
 * made and accepted. */
static void test_ngram_output_equals_plain_decoding(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    enum { N = 6 };
    int32_t prompts[N][64];
    int lens[N];
    story_prompts(prompts, lens, N);
    pdl_request_params ps[N];
    for (int r = 0; r < N; r++) {
        ps[r] = (pdl_request_params){.max_tokens = 100, .logprobs = -1, .prompt_logprobs = -1, .n = r % 3 == 2 ? 2 : 1};
        if (r % 2) {
            ps[r].sampling.temperature = 0.8f;
            ps[r].sampling.top_p = 0.95f;
            ps[r].sampling.seed = 100 + (uint64_t)r;
        }
    }
    static out plain[N * 4], spec[N * 4];
    spec_opts none = {0}, ng = {.method = PDL_SPEC_NGRAM, .k = 4, .poison = true};
    run_all(m, &none, N, prompts, lens, ps, plain);
    pdl_engine_stats st = run_all(m, &ng, N, prompts, lens, ps, spec);
    same_outputs(plain, spec, N, 1, "n-gram, batched");
    same_outputs(plain + 8, spec + 8, 1, 2, "n-gram, n = 2");
    CHECK_MSG(st.spec_draft_tokens > 0 && st.spec_accepted_tokens > 0, "no drafts were made or accepted");
    CHECK(st.spec_accepted_tokens <= st.spec_draft_tokens);
    for (int j = 1; j < 4; j++) CHECK(st.spec_accepted_per_pos[j] <= st.spec_accepted_per_pos[j - 1]);
    fprintf(stderr, "  n-gram: %llu drafts, %llu of %llu draft tokens accepted\n", (unsigned long long)st.spec_drafts,
            (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens);
    /* alone */
    static out plain1[4], spec1[4];
    run_all(m, &none, 1, prompts, lens, ps, plain1);
    run_all(m, &ng, 1, prompts, lens, ps, spec1);
    same_outputs(plain1, spec1, 1, 1, "n-gram, alone");
    pdl_model_free(m);
}

/* A draft model with the target's vocabulary: qwen3-tiny's Q8_0 file
 * drafting for its F32 one (high but imperfect agreement), and stories
 * drafting for itself (every draft accepted); outputs equal plain decoding,
 * rejected drafts' K/V poisoned after every step. */
static void test_draft_model_output_equals_plain_decoding(void) {
    const char *pairs[2][2] = {{"models/qwen3-tiny/model-f32.gguf", "models/qwen3-tiny/model-q8_0.gguf"},
                               {"models/stories260K/stories260K.gguf", "models/stories260K/stories260K.gguf"}};
    for (int pi = 0; pi < 2; pi++) {
        pdl_model *m = load(pairs[pi][0]), *d = load(pairs[pi][1]);
        enum { N = 3 };
        int32_t prompts[N][64];
        int lens[N];
        story_prompts(prompts, lens, N);
        for (int r = 0; r < N; r++)
            for (int i = 0; i < lens[r]; i++) prompts[r][i] %= m->cfg.vocab;
        pdl_request_params ps[N];
        for (int r = 0; r < N; r++) {
            ps[r] = (pdl_request_params){.max_tokens = 60, .logprobs = -1, .prompt_logprobs = -1, .ignore_eos = true};
            if (r == 1 && pi == 0) { /* sampled: greedy drafts are then sometimes rejected */
                ps[r].sampling.temperature = 1.0f;
                ps[r].sampling.seed = 5;
            }
        }
        static out plain[N * 4], spec[N * 4];
        spec_opts none = {0}, dm = {.method = PDL_SPEC_DRAFT_MODEL, .k = 3, .draft = d, .poison = true};
        run_all(m, &none, N, prompts, lens, ps, plain);
        pdl_engine_stats st = run_all(m, &dm, N, prompts, lens, ps, spec);
        same_outputs(plain, spec, N, 1, pairs[pi][1]);
        CHECK(st.spec_accepted_tokens > 0);
        if (pi == 1) CHECK_MSG(st.spec_accepted_tokens == st.spec_draft_tokens, "a model drafting for itself: "
                               "%llu of %llu accepted", (unsigned long long)st.spec_accepted_tokens,
                               (unsigned long long)st.spec_draft_tokens);
        fprintf(stderr, "  draft %s: %llu of %llu draft tokens accepted\n", pairs[pi][1],
                (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens);
        pdl_model_free(d);
        pdl_model_free(m);
    }
}

/* The greedy story repeats its own opening ("Once upon a time, there was a
 * little girl named Lily...") after a few hundred tokens; n-gram drafts copy
 * the repeat and are accepted in runs. A stop string that completes inside
 * such a run (it spans the join into the repeat, so it occurs nowhere
 * earlier) and a max_tokens limit inside one: nothing past them is
 * emitted, as without speculation. */
static void test_stops_inside_an_accepted_run(void) {
    pdl_model *m = load_ctx("models/stories260K/stories260K.gguf", 512);
    int32_t prompts[1][64] = {{1, 403, 407, 261, 378}};
    int lens[1] = {5};
    pdl_request_params p = {.max_tokens = 480, .logprobs = -1, .prompt_logprobs = -1};
    static out plain[4], spec[4];
    spec_opts none = {0}, ng = {.method = PDL_SPEC_NGRAM, .k = 4, .lookup_min = 3, .lookup_max = 6, .poison = true};
    run_all(m, &none, 1, prompts, lens, &p, plain);
    plain[0].text[plain[0].text_len] = '\0';
    const char *again = strstr(plain[0].text + 1, "Once upon a time");
    REQUIRE_MSG(again && again - plain[0].text > 8, "the story was meant to start again:\n%s", plain[0].text);
    char stop[32];
    snprintf(stop, sizeof stop, "%.*sOnce upon", 6, again - 6);
    REQUIRE_MSG(strstr(plain[0].text, stop) == again - 6, "'%s' occurs before the repeat", stop);
    /* max_tokens: the token count where the repeat begins, plus 9 */
    int at_tokens = 0;
    {
        pdl_request_params q = {.max_tokens = 480, .logprobs = -1, .prompt_logprobs = -1};
        const char *stops[1] = {"Once upon"};
        q.stop = stops, q.n_stop = 1;
        static out cut[4];
        run_all(m, &none, 1, prompts, lens, &q, cut);
        at_tokens = cut[0].n;
    }
    const char *stops[1] = {stop};
    for (int which = 0; which < 2; which++) {
        pdl_request_params q = {.max_tokens = which ? 480 : at_tokens + 9, .logprobs = -1, .prompt_logprobs = -1,
                                .stop = which ? stops : NULL, .n_stop = which};
        run_all(m, &none, 1, prompts, lens, &q, plain);
        pdl_engine_stats st = run_all(m, &ng, 1, prompts, lens, &q, spec);
        same_outputs(plain, spec, 1, 1, which ? "stop string" : "max_tokens");
        CHECK_MSG(strcmp(spec[0].finish, which ? "stop" : "length") == 0, "finish %s", spec[0].finish);
        CHECK(st.spec_accepted_tokens > 0);
        fprintf(stderr, "  %s: %llu of %llu draft tokens accepted\n", which ? "stop string" : "max_tokens",
                (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens);
    }
    pdl_model_free(m);
}

/* A pool far too small: preemption (the draft state survives it), n = 2
 * forks, speculation; the same outputs as plain decoding with a big pool. */
static void test_speculation_under_preemption(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    enum { N = 6 };
    int32_t prompts[N][64];
    int lens[N];
    story_prompts(prompts, lens, N);
    pdl_request_params ps[N];
    for (int r = 0; r < N; r++) {
        ps[r] = (pdl_request_params){.max_tokens = 60, .logprobs = -1, .prompt_logprobs = -1, .n = r == 3 ? 2 : 1};
        ps[r].sampling.temperature = r % 2 ? 0.7f : 0.0f;
        ps[r].sampling.seed = 9;
    }
    static out plain[N * 4], spec[N * 4];
    spec_opts none = {0};
    spec_opts ng = {.method = PDL_SPEC_NGRAM, .k = 4, .poison = true,
                    .kv_bytes = pdl_kv_cache_block_bytes(m, PDL_KV_F32, 16) * 12};
    run_all(m, &none, N, prompts, lens, ps, plain);
    run_all(m, &ng, N, prompts, lens, ps, spec);
    same_outputs(plain, spec, N, 1, "preemption");
    same_outputs(plain + 12, spec + 12, 1, 2, "preemption, n = 2");
    pdl_model_free(m);
}

/* The token at the first position that speculation decides (after the
 * prompt's first sampled token), over 400 seeds at temperature 1, with and
 * without speculation: a chi-square test of homogeneity at p > 0.01 (the
 * tokens are in fact the same, seed by seed). */
static void test_sampled_tokens_follow_the_target_distribution(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    enum { S = 400 };
    static int count_plain[512], count_spec[512];
    static out o[4];
    int32_t prompts[1][64] = {{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 403, 407, 261, 378}};
    int lens[1] = {15};
    spec_opts none = {0}, ng = {.method = PDL_SPEC_NGRAM, .k = 3};
    uint64_t drafted = 0;
    for (int sd = 0; sd < S; sd++) {
        pdl_request_params p = {.max_tokens = 3, .logprobs = -1, .prompt_logprobs = -1};
        p.sampling.temperature = 1.0f;
        p.sampling.seed = 1000 + (uint64_t)sd;
        run_all(m, &none, 1, prompts, lens, &p, o);
        count_plain[o[0].tokens[1]]++;
        pdl_engine_stats st = run_all(m, &ng, 1, prompts, lens, &p, o);
        count_spec[o[0].tokens[1]]++;
        drafted += st.spec_draft_tokens;
    }
    CHECK_MSG(drafted > 0, "the prompt was meant to make the n-gram proposer draft");
    /* chi-square over the tokens seen, pooling those with small counts */
    double chi = 0;
    int df = -1, small_a = 0, small_b = 0;
    for (int t = 0; t < 512; t++) {
        int a = count_plain[t], b = count_spec[t];
        if (a + b == 0) continue;
        if (a + b < 10) {
            small_a += a, small_b += b;
            continue;
        }
        double e = (a + b) / 2.0;
        chi += (a - e) * (a - e) / e + (b - e) * (b - e) / e;
        df++;
    }
    if (small_a + small_b > 0) {
        double e = (small_a + small_b) / 2.0;
        chi += (small_a - e) * (small_a - e) / e + (small_b - e) * (small_b - e) / e;
        df++;
    }
    /* p > 0.01: chi-square below the 99th percentile, Wilson-Hilferty */
    double z = 2.326, k = df > 0 ? df : 1;
    double limit = k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
    CHECK_MSG(chi < limit, "chi-square %.2f with %d degrees of freedom (limit %.2f)", chi, df, limit);
    fprintf(stderr, "  chi-square %.2f, %d degrees of freedom (p > 0.01 below %.2f)\n", chi, df, limit);
    pdl_model_free(m);
}

int main(void) {
    RUN(test_ngram_prefers_the_longest_match);
    RUN(test_ngram_takes_the_earliest_occurrence);
    RUN(test_ngram_bounds);
    RUN(test_verification_rows_are_packed_with_logits_on_every_draft);
    RUN(test_backoff_doubles_after_rejections_and_resets_on_acceptance);
    RUN(test_no_drafts_beyond_the_batch_limit);
    RUN(test_speculation_pauses_when_it_does_not_pay);
    RUN(test_ngram_output_equals_plain_decoding);
    RUN(test_draft_model_output_equals_plain_decoding);
    RUN(test_stops_inside_an_accepted_run);
    RUN(test_speculation_under_preemption);
    RUN(test_sampled_tokens_follow_the_target_distribution);
    g_kv_dtype = PDL_KV_Q8_0; /* the same over a Q8_0 cache (rejected drafts' scales poisoned with NaN) */
    RUN(test_ngram_output_equals_plain_decoding);
    RUN(test_draft_model_output_equals_plain_decoding);
    RUN(test_speculation_under_preemption);
    g_kv_dtype = PDL_KV_Q4_0; /* and a Q4_0 one */
    RUN(test_ngram_output_equals_plain_decoding);
    RUN(test_draft_model_output_equals_plain_decoding);
    RUN(test_speculation_under_preemption);
    return test_summary();
}
