/*
 * test_engine.c - the continuous-batching engine: scheduling, packing,
 * selective logits and its probe, preemption, abort, n > 1, stop strings,
 * logprobs, and batch invariance (a request's tokens are the same alone,
 * under load, at any chunk size and block size).
 */
#include <math.h>
#include <string.h>

#include "engine/request.h"
#include "engine/runner.h"
#include "engine/stop_match.h"
#include "model/model.h"
#include "pagedlm.h"
#include "test_util.h"

/* ---- collecting what a request produced ---------------------------------- */

typedef struct collected {
    int32_t tokens[4][512];     /* per sequence index */
    int n_tokens[4];
    char text[4][8192];
    char finish[4][16];
    char stop_string[4][64];    /* FINISHED's stop_string ("" for NULL) */
    int32_t stop_token[4];      /* FINISHED's stop_token */
    size_t text_bytes[4];       /* event text bytes, NULs included */
    int finished;
    float logprob[512];         /* sequence 0 */
    pdl_logprob top[512][4];
    int n_top;
    float prompt_logprob[512];
    int prompt_positions;
} collected;

static void on_event(const pdl_event *ev, void *user) {
    collected *c = user;
    int i = ev->index;
    if (i >= 4) return;
    if (ev->kind == PDL_EVENT_TOKEN) {
        if (i == 0) {
            c->logprob[c->n_tokens[0]] = ev->logprob;
            for (int j = 0; j < ev->n_top && j < 4; j++) c->top[c->n_tokens[0]][j] = ev->top[j];
            c->n_top = ev->n_top;
        }
        c->tokens[i][c->n_tokens[i]++] = ev->token;
    } else if (ev->kind == PDL_EVENT_PROMPT_LOGPROB) {
        c->prompt_logprob[ev->position] = ev->logprob;
        c->prompt_positions++;
    } else {
        snprintf(c->finish[i], sizeof c->finish[i], "%s", ev->finish_reason);
        snprintf(c->stop_string[i], sizeof c->stop_string[i], "%s", ev->stop_string ? ev->stop_string : "");
        c->stop_token[i] = ev->stop_token;
        c->finished++;
    }
    if (ev->text) strncat(c->text[i], ev->text, sizeof c->text[i] - strlen(c->text[i]) - 1);
    if (ev->text) c->text_bytes[i] += ev->text_len;
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

/* The KV dtype of the engines engine() makes (the invariance and
 * preemption tests run again over a Q8_0 cache). */
static pdl_kv_dtype g_kv_dtype = PDL_KV_F32;

static pdl_engine *engine(pdl_model *m, int block_size, int chunk, size_t kv_bytes, pdl_logits_mode mode) {
    pdl_engine_options o = {.block_size = block_size, .max_prefill_chunk = chunk, .kv_cache_memory = kv_bytes,
                            .kv_dtype = g_kv_dtype, .logits_mode = mode, .max_num_batched_tokens = 256};
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, m, &o, &err) == 0, "%s", err.message);
    return e;
}

static void add(pdl_engine *e, const int32_t *prompt, int n, const pdl_request_params *p, collected *c) {
    pdl_error err;
    REQUIRE_MSG(pdl_engine_add_request(e, prompt, (size_t)n, p, on_event, c, NULL, &err) == 0, "%s", err.message);
}

static void run(pdl_engine *e) {
    pdl_error err;
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
}

/* ---- prompts ---------------------------------------------------------------- */

/* The stories reference sequence: 16 different prompts are slices of it. */
static const int32_t STORY[65] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                  401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328,
                                  432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335,
                                  312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, 310};

static void prompt_k(int k, int vocab, int32_t *out, int *n) {
    /* lengths 1..~45, varied starts; ids folded into the vocabulary */
    int len = 1 + (k * 7) % 45, start = (k * 5) % 20;
    for (int i = 0; i < len; i++) out[i] = (STORY[(start + i) % 65] * (k % 3 + 1)) % vocab;
    *n = len;
}

static pdl_request_params params_k(int k) {
    pdl_request_params p = {.max_tokens = 12 + k % 5, .logprobs = -1, .prompt_logprobs = -1};
    if (k % 4 == 3) { /* some sampled, with their own seeds */
        p.sampling.temperature = 0.9f;
        p.sampling.top_k = 40;
        p.sampling.top_p = 0.95f;
        p.sampling.seed = 1000 + (uint64_t)k;
    }
    return p;
}

/* ---- batch invariance -------------------------------------------------------- */

static void check_invariance(const char *model_rel) {
    pdl_model *m = load(model_rel);
    int V = m->cfg.vocab;
    enum { N = 16 };
    static collected alone[N], together[N];
    memset(alone, 0, sizeof alone);
    int32_t prompt[64];
    int n;
    for (int k = 0; k < N; k++) { /* each request alone, one per engine */
        pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
        prompt_k(k, V, prompt, &n);
        pdl_request_params p = params_k(k);
        add(e, prompt, n, &p, &alone[k]);
        run(e);
        pdl_engine_free(e);
        CHECK_EQ_INT(alone[k].n_tokens[0], p.max_tokens);
    }
    int chunks[] = {1, 7, 64}, blocks[] = {16, 32};
    for (int ci = 0; ci < 3; ci++)
        for (int bi = 0; bi < 2; bi++) {
            memset(together, 0, sizeof together);
            pdl_engine *e = engine(m, blocks[bi], chunks[ci], 0, PDL_LOGITS_AUTO);
            for (int k = 0; k < N; k++) {
                prompt_k(k, V, prompt, &n);
                pdl_request_params p = params_k(k);
                add(e, prompt, n, &p, &together[k]);
            }
            run(e);
            pdl_engine_stats st;
            pdl_engine_get_stats(e, &st);
            CHECK_EQ_INT(st.kv_blocks_used, 0);
            pdl_engine_free(e);
            for (int k = 0; k < N; k++) {
                CHECK_MSG(together[k].n_tokens[0] == alone[k].n_tokens[0] &&
                              memcmp(together[k].tokens[0], alone[k].tokens[0],
                                     (size_t)alone[k].n_tokens[0] * sizeof(int32_t)) == 0,
                          "%s: request %d differs under load (chunk %d, block %d)", model_rel, k, chunks[ci],
                          blocks[bi]);
                CHECK(strcmp(together[k].text[0], alone[k].text[0]) == 0);
            }
        }
    pdl_model_free(m);
}

static void test_batch_invariance_stories(void) { check_invariance("models/stories260K/stories260K.gguf"); }
static void test_batch_invariance_qwen3(void) { check_invariance("models/qwen3-tiny/model-f32.gguf"); }
static void test_batch_invariance_q8_0_cache(void) {
    g_kv_dtype = PDL_KV_Q8_0;
    check_invariance("models/stories260K/stories260K.gguf"); /* head_dim 8: one group per head */
    check_invariance("models/qwen3-tiny/model-f32.gguf");
    g_kv_dtype = PDL_KV_F32;
}
static void test_batch_invariance_q4_0_cache(void) {
    g_kv_dtype = PDL_KV_Q4_0;
    check_invariance("models/stories260K/stories260K.gguf"); /* head_dim 8: one group per head */
    check_invariance("models/qwen3-tiny/model-f32.gguf");
    g_kv_dtype = PDL_KV_F32;
}

/* A KV pool far too small for all requests at once: the scheduler preempts
 * and recomputes, and every request still gets the tokens it gets alone. */
static void check_small_pool_preempts(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    enum { N = 8 };
    static collected alone[N], together[N];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    int32_t prompt[64];
    int n;
    for (int k = 0; k < N; k++) {
        pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
        prompt_k(k, 512, prompt, &n);
        pdl_request_params p = params_k(k);
        p.max_tokens = 40;
        add(e, prompt, n, &p, &alone[k]);
        run(e);
        pdl_engine_free(e);
    }
    size_t block_bytes = pdl_kv_cache_block_bytes(m, g_kv_dtype, 16);
    pdl_engine *e = engine(m, 16, 0, block_bytes * 12, PDL_LOGITS_AUTO); /* 12 blocks: ~2 requests at a time */
    for (int k = 0; k < N; k++) {
        prompt_k(k, 512, prompt, &n);
        pdl_request_params p = params_k(k);
        p.max_tokens = 40;
        add(e, prompt, n, &p, &together[k]);
    }
    run(e);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK_MSG(st.preemptions > 0, "the pool was meant to force preemption");
    int prompt_sum = 0;
    for (int k = 0; k < N; k++) prompt_sum += (prompt_k(k, 512, prompt, &n), n);
    CHECK_EQ_INT((int)st.prompt_tokens, prompt_sum); /* recomputed prompts are not counted again */
    CHECK_EQ_INT(st.kv_blocks_total, 12);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    for (int k = 0; k < N; k++) {
        CHECK_EQ_INT(together[k].n_tokens[0], alone[k].n_tokens[0]);
        CHECK_MSG(memcmp(together[k].tokens[0], alone[k].tokens[0], (size_t)alone[k].n_tokens[0] * 4) == 0,
                  "request %d differs after preemption", k);
        CHECK(strcmp(together[k].text[0], alone[k].text[0]) == 0);
    }
    fprintf(stderr, "  %llu preemptions\n", (unsigned long long)st.preemptions);
    pdl_engine_free(e);
    pdl_model_free(m);
}

static void test_small_pool_preempts_and_output_is_unchanged(void) {
    check_small_pool_preempts();
    g_kv_dtype = PDL_KV_Q8_0;
    check_small_pool_preempts();
    g_kv_dtype = PDL_KV_Q4_0;
    check_small_pool_preempts();
    g_kv_dtype = PDL_KV_F32;
}

/* A Q8_0 cache holds (gs + 2) / gs bytes per element where F16 holds 2:
 * the same --kv-cache-memory gives 2 * 32 / 34 = 1.88x the blocks of F16
 * for head_dim 32 (qwen3-tiny; the engine divides the memory by
 * pdl_kv_cache_block_bytes), 1.6x for stories260K's head_dim 8; a Q4_0
 * cache (gs / 2 + 2) / gs: 64 / 18 = 3.56x and 16 / 6 = 2.67x; a head_dim
 * of 48 is refused by both with a clear error, and 7 by Q4_0 (odd). */
static void test_q8_0_cache_holds_more_blocks_in_the_same_memory(void) {
    static const struct {
        const char *model;
        double ratio, ratio_q4;
    } cases[] = {{"models/qwen3-tiny/model-f32.gguf", 64.0 / 34.0, 64.0 / 18.0},
                 {"models/stories260K/stories260K.gguf", 1.6, 16.0 / 6.0}};
    for (int c = 0; c < 2; c++) {
        pdl_model *m = load(cases[c].model);
        int blocks[3];
        for (int q8 = 0; q8 < 3; q8++) { /* F16, Q8_0, Q4_0 (2) */
            pdl_engine_options o = {.block_size = 16, .kv_cache_memory = (size_t)16 << 20,
                                    .kv_dtype = q8 == 2 ? PDL_KV_Q4_0 : q8 ? PDL_KV_Q8_0 : PDL_KV_F16,
                                    .max_num_seqs = 1024};
            pdl_engine *e = NULL;
            pdl_error err;
            REQUIRE_MSG(pdl_engine_create(&e, m, &o, &err) == 0, "%s", err.message);
            pdl_engine_stats st;
            pdl_engine_get_stats(e, &st);
            blocks[q8] = st.kv_blocks_total;
            CHECK_EQ_INT(blocks[q8], (int)(o.kv_cache_memory / pdl_kv_cache_block_bytes(m, o.kv_dtype, 16)));
            pdl_engine_free(e);
        }
        double r = (double)blocks[1] / blocks[0];
        CHECK_MSG(fabs(r - cases[c].ratio) < 0.01, "%s: %d q8_0 blocks vs %d f16: %.3f, want %.3f", cases[c].model,
                  blocks[1], blocks[0], r, cases[c].ratio);
        r = (double)blocks[2] / blocks[0];
        CHECK_MSG(fabs(r - cases[c].ratio_q4) < 0.01, "%s: %d q4_0 blocks vs %d f16: %.3f, want %.3f",
                  cases[c].model, blocks[2], blocks[0], r, cases[c].ratio_q4);
        if (c == 0) { /* a head_dim of 48 (set here on the loaded config): refused at creation */
            int hd = m->cfg.head_dim;
            m->cfg.head_dim = 48;
            pdl_kv_cache *kv = NULL;
            pdl_error err = {0};
            CHECK(pdl_kv_cache_create(&kv, m, PDL_KV_Q8_0, 16, 4, &err) != 0 && kv == NULL);
            CHECK_MSG(strstr(err.message, "multiple of 32") != NULL, "got '%s'", err.message);
            CHECK(pdl_kv_cache_create(&kv, m, PDL_KV_Q4_0, 16, 4, &err) != 0 && kv == NULL);
            CHECK_MSG(strstr(err.message, "q4_0") != NULL, "got '%s'", err.message);
            m->cfg.head_dim = 7;
            CHECK(pdl_kv_cache_create(&kv, m, PDL_KV_Q4_0, 16, 4, &err) != 0 && kv == NULL);
            CHECK(pdl_kv_cache_create(&kv, m, PDL_KV_Q8_0, 16, 4, &err) == 0 && kv != NULL); /* one group of 7 */
            pdl_kv_cache_free(kv);
            m->cfg.head_dim = hd;
        }
        pdl_model_free(m);
    }
}

/* ---- the reference continuation through the engine ------------------------- */

static void test_engine_greedy_matches_llama2c(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
    static collected c;
    memset(&c, 0, sizeof c);
    pdl_request_params p = {.max_tokens = 60, .logprobs = -1, .prompt_logprobs = -1};
    add(e, STORY, 5, &p, &c);
    run(e);
    CHECK_EQ_INT(c.n_tokens[0], 60);
    CHECK(memcmp(c.tokens[0], STORY + 5, 60 * sizeof(int32_t)) == 0);
    CHECK(strcmp(c.finish[0], "length") == 0);
    CHECK(strncmp(c.text[0], ", there was a little girl named Lily.", 37) == 0);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* ---- stop conditions ---------------------------------------------------------- */

static void test_stop_string_split_across_tokens_is_not_emitted(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
    static collected c;
    memset(&c, 0, sizeof c);
    /* " little girl" spans the tokens " little" and " girl" */
    const char *stops[] = {"zzz", " little girl"};
    pdl_request_params p = {.max_tokens = 60, .logprobs = -1, .prompt_logprobs = -1, .stop = stops, .n_stop = 2};
    add(e, STORY, 5, &p, &c);
    run(e);
    CHECK(strcmp(c.text[0], ", there was a") == 0);
    CHECK(strcmp(c.finish[0], "stop") == 0);
    CHECK(strcmp(c.stop_string[0], " little girl") == 0);
    CHECK_EQ_INT(c.stop_token[0], -1);
    /* the text is exactly what precedes the stop string: nothing of it leaked */
    CHECK(strstr(c.text[0], "little") == NULL);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* A stop matcher made beforehand (the server makes it while parsing, off
 * the engine's thread): the engine keeps its own reference, so the caller
 * may drop its one at once, and stops exactly as with the strings alone; a
 * matcher made for another number of strings is refused. */
static void test_a_stop_matcher_made_beforehand_is_used_and_kept(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
    static collected c;
    memset(&c, 0, sizeof c);
    const char *stops[] = {"zzz", " little girl"};
    pdl_stop_matcher *sm = NULL; /* through the public API */
    pdl_error err;
    REQUIRE(pdl_stop_matcher_new(&sm, stops, 2, &err) == 0);
    pdl_request_params p = {.max_tokens = 60, .logprobs = -1, .prompt_logprobs = -1, .stop = stops, .n_stop = 2,
                            .stop_matcher = sm};
    add(e, STORY, 5, &p, &c);
    pdl_stop_matcher_free(sm); /* the engine's reference keeps it */
    run(e);
    CHECK(strcmp(c.text[0], ", there was a") == 0);
    CHECK(strcmp(c.stop_string[0], " little girl") == 0);
    REQUIRE(pdl_stop_matcher_new(&sm, stops, 1, &err) == 0);
    p.stop_matcher = sm;
    CHECK(pdl_engine_add_request(e, STORY, 5, &p, NULL, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "made for 1 stop strings, the request has 2");
    pdl_stop_matcher_free(sm);
    pdl_engine_free(e);
    pdl_model_free(m);
}

static void test_stop_token_ids_and_max_tokens(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
    static collected a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    int32_t stop_id = 426; /* "." : the 11th generated token */
    pdl_request_params p = {.max_tokens = 60, .logprobs = -1, .prompt_logprobs = -1, .stop_ids = &stop_id,
                            .n_stop_ids = 1};
    add(e, STORY, 5, &p, &a);
    pdl_request_params q = {.max_tokens = 3, .logprobs = -1, .prompt_logprobs = -1};
    add(e, STORY, 5, &q, &b);
    run(e);
    CHECK_EQ_INT(a.n_tokens[0], 11);
    CHECK_EQ_INT(a.tokens[0][10], 426);
    CHECK(strcmp(a.finish[0], "stop") == 0);
    CHECK(strcmp(a.text[0], ", there was a little girl named Lily") == 0); /* the stop token's text is not output */
    CHECK_EQ_INT(a.stop_token[0], 426); /* vLLM's stop_reason */
    CHECK(a.stop_string[0][0] == '\0');
    CHECK_EQ_INT(b.n_tokens[0], 3);
    CHECK(strcmp(b.finish[0], "length") == 0);
    CHECK_EQ_INT(b.stop_token[0], -1);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* min_tokens (vLLM's): stop tokens are banned while fewer than min_tokens
 * are out, and a stop string counts only when it completes in a token past
 * min_tokens. Both boundaries are checked one token either side. */
static void test_min_tokens_holds_back_stop_tokens_and_strings(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    int32_t stop_id = 426; /* "." : the 11th generated token */
    for (int min = 10; min <= 11; min++) {
        pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
        static collected c;
        memset(&c, 0, sizeof c);
        pdl_request_params p = {.max_tokens = 30, .min_tokens = min, .logprobs = -1, .prompt_logprobs = -1,
                                .stop_ids = &stop_id, .n_stop_ids = 1};
        add(e, STORY, 5, &p, &c);
        run(e);
        if (min == 10) { /* the 11th token may stop */
            CHECK_EQ_INT(c.n_tokens[0], 11);
            CHECK(strcmp(c.finish[0], "stop") == 0);
        } else { /* banned at the 11th: something else comes, and the output goes on */
            CHECK(c.n_tokens[0] > 11);
            for (int t = 0; t < 11; t++) CHECK_MSG(c.tokens[0][t] != stop_id, "stop token at %d", t);
        }
        pdl_engine_free(e);
    }
    /* " girl" completes with the 8th token (", there was a little" + " g" "ir" "l") */
    const char *stops[] = {" girl"};
    for (int min = 7; min <= 8; min++) {
        pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
        static collected c;
        memset(&c, 0, sizeof c);
        pdl_request_params p = {.max_tokens = 20, .min_tokens = min, .logprobs = -1, .prompt_logprobs = -1,
                                .stop = stops, .n_stop = 1};
        add(e, STORY, 5, &p, &c);
        run(e);
        if (min == 7) {
            CHECK(strcmp(c.text[0], ", there was a little") == 0);
            CHECK(strcmp(c.stop_string[0], " girl") == 0);
        } else {
            CHECK_CONTAINS(c.text[0], ", there was a little girl named Lily");
        }
        pdl_engine_free(e);
    }
    pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
    pdl_error err;
    pdl_request_params bad = {.max_tokens = 4, .min_tokens = 5, .logprobs = -1, .prompt_logprobs = -1};
    CHECK(pdl_engine_add_request(e, STORY, 5, &bad, NULL, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "min_tokens 5 must be in [0, max_tokens = 4]");
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* logit_bias shifts raw logits before anything else: -100 on the greedy
 * choice gives the runner-up; +100 on byte token <0x00> makes the text NUL
 * bytes, which events carry by length. Reported logprobs stay raw. */
static void test_logit_bias_moves_the_choice_and_nul_text_keeps_its_length(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
    static collected plain, down, nul;
    memset(&plain, 0, sizeof plain);
    memset(&down, 0, sizeof down);
    memset(&nul, 0, sizeof nul);
    pdl_request_params p = {.max_tokens = 1, .logprobs = 2, .prompt_logprobs = -1};
    add(e, STORY, 5, &p, &plain);
    pdl_logit_bias away = {.token = STORY[5], .bias = -100.0f};
    pdl_request_params q = p;
    q.sampling.logit_bias = &away;
    q.sampling.n_logit_bias = 1;
    add(e, STORY, 5, &q, &down);
    pdl_logit_bias zero = {.token = 3, .bias = 100.0f}; /* <0x00> */
    pdl_request_params z = {.max_tokens = 4, .logprobs = -1, .prompt_logprobs = -1};
    z.sampling.logit_bias = &zero;
    z.sampling.n_logit_bias = 1;
    add(e, STORY, 5, &z, &nul);
    run(e);
    CHECK_EQ_INT(plain.tokens[0][0], STORY[5]);
    CHECK_EQ_INT(down.tokens[0][0], plain.top[0][1].token); /* the runner-up */
    CHECK(down.logprob[0] == plain.top[0][1].logprob);     /* raw, before the bias */
    for (int t = 0; t < 4; t++) CHECK_EQ_INT(nul.tokens[0][t], 3);
    CHECK_EQ_INT(nul.text_bytes[0], 4); /* four NUL bytes, none lost */
    pdl_logit_bias outside = {.token = 512, .bias = 1.0f};
    pdl_request_params o = {.max_tokens = 1, .logprobs = -1, .prompt_logprobs = -1};
    o.sampling.logit_bias = &outside;
    o.sampling.n_logit_bias = 1;
    pdl_error err;
    CHECK(pdl_engine_add_request(e, STORY, 5, &o, NULL, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "token 512, outside the vocabulary [0, 512)");
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* A max_model_len the KV pool cannot hold is refused at creation with both
 * numbers (vLLM's behaviour); left unset, it is lowered to the pool. */
static void test_max_model_len_must_fit_the_kv_pool(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    size_t bb = pdl_kv_cache_block_bytes(m, PDL_KV_F32, 16);
    pdl_engine_options o = {.block_size = 16, .kv_cache_memory = bb * 4, .kv_dtype = PDL_KV_F32,
                            .max_model_len = 65};
    pdl_engine *e = NULL;
    pdl_error err;
    CHECK(pdl_engine_create(&e, m, &o, &err) != 0);
    CHECK_CONTAINS(err.message, "max seq len (65)");
    CHECK_CONTAINS(err.message, "stored in the KV cache (64:");
    CHECK_CONTAINS(err.message, "--kv-cache-memory");
    o.max_model_len = 64; /* exactly what 4 blocks hold */
    REQUIRE_MSG(pdl_engine_create(&e, m, &o, &err) == 0, "%s", err.message);
    CHECK_EQ_INT(pdl_engine_max_model_len(e), 64);
    static collected c;
    memset(&c, 0, sizeof c);
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1, .ignore_eos = true}; /* up to the length */
    add(e, STORY, 20, &p, &c);
    run(e);
    CHECK_EQ_INT(c.n_tokens[0], 44);
    CHECK(strcmp(c.finish[0], "length") == 0);
    pdl_engine_free(e);
    o.max_model_len = 129; /* beyond the model's context length (128) */
    o.kv_cache_memory = 0;
    CHECK(pdl_engine_create(&e, m, &o, &err) != 0);
    CHECK_CONTAINS(err.message, "exceeds the model's context length 128");
    pdl_model_free(m);
}

/* ---- logprobs ------------------------------------------------------------------- */

static void test_logprobs_and_prompt_logprobs_match_the_forward(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_context *ctx = test_context(m);
    int V = m->cfg.vocab;
    pdl_engine *e = engine(m, 16, 3, 0, PDL_LOGITS_AUTO); /* prompt in chunks of 3 */
    static collected c;
    memset(&c, 0, sizeof c);
    pdl_request_params p = {.max_tokens = 4, .logprobs = 3, .prompt_logprobs = 2};
    add(e, STORY, 9, &p, &c);
    run(e);
    /* reference: all-row logits of prompt + generated tokens in one forward */
    float *all = malloc((size_t)13 * V * sizeof *all);
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 16, 1, &err) == 0);
    int32_t seq[13];
    memcpy(seq, STORY, 9 * sizeof(int32_t));
    memcpy(seq + 9, c.tokens[0], 4 * sizeof(int32_t));
    pdl_seq s = {0};
    REQUIRE(pdl_seq_forward(ctx, kv, &s, seq, NULL, 13, PDL_LOGITS_ALL, all, &err) == 0);
    CHECK_EQ_INT(c.prompt_positions, 8); /* positions 1..8 */
    for (int pos = 1; pos < 9; pos++) {
        float want;
        pdl_logprob top[2];
        pdl_logprobs(all + (size_t)(pos - 1) * V, V, seq[pos], &want, top, 2);
        CHECK_MSG(c.prompt_logprob[pos] == want, "prompt position %d: %g vs %g", pos, c.prompt_logprob[pos], want);
    }
    for (int t = 0; t < 4; t++) {
        float want;
        pdl_logprob top[3];
        pdl_logprobs(all + (size_t)(8 + t) * V, V, seq[9 + t], &want, top, 3);
        CHECK_MSG(c.logprob[t] == want, "token %d: %g vs %g", t, c.logprob[t], want);
        CHECK_EQ_INT(c.top[t][0].token, top[0].token);
        CHECK_EQ_INT(c.top[t][0].token, seq[9 + t]); /* greedy: the chosen token is the most likely */
    }
    CHECK_EQ_INT(c.n_top, 3);
    pdl_seq_release(kv, &s);
    pdl_kv_cache_free(kv);
    free(all);
    pdl_engine_free(e);
    pdl_context_free(ctx);
    pdl_model_free(m);
}

/* ---- n > 1 ------------------------------------------------------------------------ */

/* Sequence i of an n-sample request equals a single request with seed + i,
 * and the samples share the prompt's full blocks. */
static void test_n_samples_share_prompt_blocks(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    static collected many, one[4];
    memset(&many, 0, sizeof many);
    memset(one, 0, sizeof one);
    pdl_request_params p = {.max_tokens = 10, .logprobs = -1, .prompt_logprobs = -1, .n = 4};
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 77;
    pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = STORY[i];
    add(e, prompt, 40, &p, &many); /* 40 tokens: 2 full blocks + 8 in the third */
    pdl_error err;
    int active;
    REQUIRE(pdl_engine_step(e, &active, &err) == 0); /* prefill + fork + first tokens */
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    /* shared: 2 full blocks once + 4 own third blocks, not 4 x 3 */
    CHECK_EQ_INT(st.kv_blocks_used, 2 + 4);
    CHECK_EQ_INT((int)st.prompt_tokens, 40); /* the request's prompt, once, not once per sample */
    run(e);
    pdl_engine_free(e);
    for (int i = 0; i < 4; i++) {
        pdl_engine *e1 = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
        pdl_request_params q = p;
        q.n = 1;
        q.sampling.seed = 77 + (uint64_t)i;
        add(e1, prompt, 40, &q, &one[i]);
        run(e1);
        pdl_engine_free(e1);
        CHECK_EQ_INT(many.n_tokens[i], 10);
        CHECK_MSG(memcmp(many.tokens[i], one[i].tokens[0], 10 * sizeof(int32_t)) == 0, "sample %d", i);
        CHECK(strcmp(many.text[i], one[i].text[0]) == 0);
    }
    CHECK(memcmp(many.tokens[0], many.tokens[1], 10 * sizeof(int32_t)) != 0); /* the samples differ */
    pdl_model_free(m);
}

/* ---- statistics ------------------------------------------------------------------- */

/* prompt_tokens (the server's prompt throughput and vllm:prompt_tokens_total)
 * counts a prompt when its prefill completes, as vLLM does: not when the
 * request arrives, and not piece by piece as chunks run. A 30-token prompt
 * in chunks of 7 completes at the fifth step; a generated token is not a
 * prompt token. */
static void test_prompt_tokens_count_when_the_prefill_completes(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_engine *e = engine(m, 16, 7, 0, PDL_LOGITS_AUTO);
    static collected c;
    memset(&c, 0, sizeof c);
    pdl_request_params p = {.max_tokens = 4, .logprobs = -1, .prompt_logprobs = -1};
    add(e, STORY, 30, &p, &c);
    pdl_engine_stats st;
    pdl_error err;
    int active;
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT((int)st.prompt_tokens, 0);
    for (int step = 1; step <= 5; step++) {
        REQUIRE_MSG(pdl_engine_step(e, &active, &err) == 0, "%s", err.message);
        pdl_engine_get_stats(e, &st);
        CHECK_MSG((int)st.prompt_tokens == (step < 5 ? 0 : 30), "after step %d (%d of 30 rows): %llu prompt tokens",
                  step, step * 7 < 30 ? step * 7 : 30, (unsigned long long)st.prompt_tokens);
        CHECK_EQ_INT((int)st.generation_tokens, step < 5 ? 0 : 1);
    }
    run(e);
    pdl_engine_get_stats(e, &st);
    CHECK_EQ_INT((int)st.prompt_tokens, 30);
    CHECK_EQ_INT((int)st.generation_tokens, 4);
    CHECK_EQ_INT(c.n_tokens[0], 4);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* ---- abort ------------------------------------------------------------------------ */

static void test_abort_frees_blocks_at_once(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_engine *e = engine(m, 16, 0, 0, PDL_LOGITS_AUTO);
    static collected a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    pdl_request_params p = {.max_tokens = 50, .logprobs = -1, .prompt_logprobs = -1};
    uint64_t ida, idb;
    pdl_error err;
    REQUIRE(pdl_engine_add_request(e, STORY, 40, &p, on_event, &a, &ida, &err) == 0);
    REQUIRE(pdl_engine_add_request(e, STORY + 40, 20, &p, on_event, &b, &idb, &err) == 0); /* shares no block */
    int active;
    for (int i = 0; i < 3; i++) REQUIRE(pdl_engine_step(e, &active, &err) == 0);
    pdl_engine_stats before, after;
    pdl_engine_get_stats(e, &before);
    CHECK_EQ_INT(pdl_engine_abort(e, ida), 0);
    pdl_engine_get_stats(e, &after);
    CHECK_EQ_INT(before.kv_blocks_used - after.kv_blocks_used, 3); /* 40 + 2 tokens = 3 blocks */
    CHECK(strcmp(a.finish[0], "abort") == 0);
    CHECK_EQ_INT(after.running, 1);
    CHECK_EQ_INT(pdl_engine_abort(e, ida), -1); /* already gone */
    run(e);
    CHECK(strcmp(b.finish[0], "length") == 0);
    CHECK_EQ_INT(b.n_tokens[0], 50);
    pdl_engine_get_stats(e, &after);
    CHECK_EQ_INT(after.kv_blocks_used, 0);
    pdl_engine_free(e);
    pdl_model_free(m);
}

static void test_requests_that_cannot_run_are_rejected(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    size_t bb = pdl_kv_cache_block_bytes(m, PDL_KV_F32, 16);
    pdl_engine *e = engine(m, 16, 0, bb * 2, PDL_LOGITS_AUTO); /* 32 tokens in all */
    pdl_error err;
    int32_t big[40];
    for (int i = 0; i < 40; i++) big[i] = STORY[i];
    /* the pool holds 32 tokens: the engine's max model length was lowered to it */
    CHECK_EQ_INT(pdl_engine_max_model_len(e), 32);
    CHECK(pdl_engine_add_request(e, big, 40, NULL, NULL, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "exceeds the maximum model length 32");
    CHECK(pdl_engine_add_request(e, big, 31, NULL, NULL, NULL, NULL, &err) == 0);
    CHECK(pdl_engine_add_request(e, big, 32, NULL, NULL, NULL, NULL, &err) != 0);
    CHECK(pdl_engine_add_request(e, big, 0, NULL, NULL, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "empty");
    int32_t bad = 512;
    CHECK(pdl_engine_add_request(e, &bad, 1, NULL, NULL, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "out of range");
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1};
    p.sampling.top_p = 1.5f;
    CHECK(pdl_engine_add_request(e, big, 4, &p, NULL, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "top_p");
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* ---- packing and logits rows --------------------------------------------------- */

static eng_seq fake_seq(eng_request *r, int n_prompt, int n_tokens, int n_computed) {
    eng_seq q = {.req = r, .n_prompt = n_prompt, .n_tokens = n_tokens, .cache.n_computed = n_computed,
                 .logprobs.prompt_next = 1};
    return q;
}

static void test_logits_rows_per_entry(void) {
    eng_request plain = {.params = {.prompt_logprobs = -1}}, wants = {.params = {.prompt_logprobs = 1}};
    int32_t rows[64];
    /* decode: its one row */
    eng_seq d = fake_seq(&plain, 10, 12, 11);
    sched_entry e1 = {&d, 11, 1, false};
    CHECK_EQ_INT(runner_logits_rows(&e1, rows), 1);
    CHECK_EQ_INT(rows[0], 11);
    /* an intermediate prefill chunk: no logits at all */
    eng_seq p = fake_seq(&plain, 30, 30, 0);
    sched_entry e2 = {&p, 0, 7, false};
    CHECK_EQ_INT(runner_logits_rows(&e2, rows), 0);
    /* the chunk that completes the prompt: its last row only */
    sched_entry e3 = {&p, 21, 9, false};
    CHECK_EQ_INT(runner_logits_rows(&e3, rows), 1);
    CHECK_EQ_INT(rows[0], 29);
    /* prompt logprobs: every row of every chunk (the last is also sampled) */
    eng_seq w = fake_seq(&wants, 30, 30, 0);
    sched_entry e4 = {&w, 0, 7, false};
    CHECK_EQ_INT(runner_logits_rows(&e4, rows), 7);
    for (int i = 0; i < 7; i++) CHECK_EQ_INT(rows[i], i);
    w.logprobs.prompt_next = 8;
    sched_entry e5 = {&w, 7, 23, false};
    CHECK_EQ_INT(runner_logits_rows(&e5, rows), 23);
    CHECK_EQ_INT(rows[0], 7);
    CHECK_EQ_INT(rows[22], 29);
}

static void test_runner_packs_decodes_first_with_compacted_logits(void) {
    pdl_model *m = load("models/stories260K/stories260K.gguf");
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 4, 64, &err) == 0);
    runner r;
    REQUIRE(runner_init(&r, m, kv, false, &err) == 0);
    eng_request plain = {.params = {.prompt_logprobs = -1}}, wants = {.params = {.prompt_logprobs = 0}};
    int32_t toks[32], blocks_a[8] = {5, 9, 2}, blocks_b[8] = {7}, blocks_c[8] = {11, 12};
    for (int i = 0; i < 32; i++) toks[i] = i + 3;
    eng_seq a = fake_seq(&plain, 5, 10, 9), b = fake_seq(&plain, 3, 3, 0), c = fake_seq(&wants, 6, 6, 0);
    a.tokens = b.tokens = c.tokens = toks;
    a.cache.blocks = blocks_a, b.cache.blocks = blocks_b, c.cache.blocks = blocks_c;
    sched_entry ents[3] = {{&a, 9, 1, false}, {&b, 0, 3, false}, {&c, 0, 6, false}};
    sched_output plan = {.entries = ents, .n_entries = 3, .n_decode = 1, .n_tokens = 10};
    REQUIRE(runner_pack(&r, &plan, &err) == 0);
    const pdl_batch *bt = &r.batch;
    CHECK_EQ_INT(bt->n_tokens, 10);
    int32_t cu[4] = {0, 1, 4, 10};
    CHECK(memcmp(bt->cu_seqlens, cu, sizeof cu) == 0);
    CHECK_EQ_INT(bt->positions[0], 9);
    CHECK_EQ_INT(bt->slot_mapping[0], 2 * 4 + 1); /* position 9: block_a[2], offset 1 */
    CHECK_EQ_INT(bt->slot_mapping[5], 11 * 4 + 1); /* c's position 1 */
    CHECK_EQ_INT(bt->slot_mapping[8], 12 * 4 + 0); /* c's position 4 */
    /* logits: a's decode row 0, b's last row 3, c's rows 4..9 (prompt logprobs) */
    int32_t li[8] = {0, 3, 4, 5, 6, 7, 8, 9};
    CHECK_EQ_INT(bt->n_logits, 8);
    CHECK(memcmp(bt->logits_indices, li, sizeof li) == 0);
    int32_t lcu[4] = {0, 1, 2, 8};
    CHECK(memcmp(r.bb.logits_cu_seqlens, lcu, sizeof lcu) == 0);
    runner_free(&r);
    pdl_kv_cache_free(kv);
    pdl_model_free(m);
}

/* ---- selective logits and the probe --------------------------------------------- */

static void test_selective_and_full_give_identical_tokens_and_logprobs(void) {
    pdl_model *m = load("models/qwen3-tiny/model-f32.gguf");
    static collected sel, full;
    memset(&sel, 0, sizeof sel);
    memset(&full, 0, sizeof full);
    int32_t prompt[40];
    int n;
    prompt_k(5, m->cfg.vocab, prompt, &n);
    pdl_request_params p = {.max_tokens = 8, .logprobs = 2, .prompt_logprobs = 2};
    pdl_engine *a = engine(m, 16, 7, 0, PDL_LOGITS_SELECTIVE), *b = engine(m, 16, 7, 0, PDL_LOGITS_FULL);
    add(a, prompt, n, &p, &sel);
    add(b, prompt, n, &p, &full);
    run(a);
    run(b);
    CHECK(memcmp(sel.tokens[0], full.tokens[0], 8 * sizeof(int32_t)) == 0);
    CHECK(memcmp(sel.logprob, full.logprob, 8 * sizeof(float)) == 0);
    CHECK(memcmp(sel.prompt_logprob, full.prompt_logprob, sizeof sel.prompt_logprob) == 0);
    pdl_engine_stats st;
    pdl_engine_get_stats(a, &st);
    CHECK(st.selective_logits);
    pdl_engine_get_stats(b, &st);
    CHECK(!st.selective_logits);
    pdl_engine_free(a);
    pdl_engine_free(b);
    pdl_model_free(m);
}

static char probe_log[1024];
static void capture_log(const char *line, void *user) {
    (void)user;
    snprintf(probe_log, sizeof probe_log, "%s", line);
}

/* The rows the probe compares (an inner row and the last of a 12-token
 * sequence), through the full head or the selective one. */
static const int32_t PROBE_ROWS[2] = {6, 11};

static void probe_rows(pdl_model *m, bool full, float *out) {
    pdl_context *ctx = test_context(m);
    int32_t tokens[12], pos[12], slots[12], block0 = 0, cu[2] = {0, 12};
    for (int i = 0; i < 12; i++) tokens[i] = (int32_t)((i * 7919 + 13) % m->cfg.vocab), pos[i] = i, slots[i] = i;
    const int32_t *tables[1] = {&block0};
    pdl_kv_cache *kv = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_kv_cache_create(&kv, m, PDL_KV_F32, 12, 1, &err) == 0, "%s", err.message);
    pdl_batch b = {.n_tokens = 12, .token_ids = tokens, .positions = pos, .slot_mapping = slots, .n_seqs = 1,
                   .cu_seqlens = cu, .block_tables = tables, .n_logits = 2, .logits_indices = PROBE_ROWS,
                   .full_logits = full};
    REQUIRE_MSG(pdl_forward(ctx, kv, &b, out, &err) == 0, "%s", err.message);
    pdl_kv_cache_free(kv);
    pdl_context_free(ctx);
}

/* A port that applies the head's post-processing only in the full path:
 * the selective rows are the unprocessed ones. The probe's comparison must
 * reject them, naming the rows. */
static void expect_probe_rejects_unprocessed_selective(pdl_model *m, const char *what) {
    size_t n = (size_t)2 * m->cfg.vocab;
    float *full = malloc(n * sizeof *full), *sel = malloc(n * sizeof *sel);
    probe_rows(m, true, full);
    pdl_model_config keep = m->cfg;
    m->cfg.logit_div = 1.0f, m->cfg.logit_scale = 1.0f, m->cfg.final_softcap = 0.0f; /* the bug */
    probe_rows(m, false, sel);
    m->cfg = keep;
    bool ok = true;
    char why[512];
    probe_compare(full, sel, 2, m->cfg.vocab, PROBE_ROWS, 12, &ok, why, sizeof why);
    CHECK_MSG(!ok, "%s: a head post-processing in the full path only went unnoticed", what);
    CHECK_CONTAINS(why, "rows 6 and 11 of a 12-token probe");
    CHECK_CONTAINS(why, "full logits");
    /* with the post-processing in both paths the same comparison accepts */
    probe_rows(m, false, sel);
    probe_compare(full, sel, 2, m->cfg.vocab, PROBE_ROWS, 12, &ok, why, sizeof why);
    CHECK_MSG(ok, "%s: %s", what, why);
    free(full), free(sel);
}

/* A head that scales its logits (as Granite's logits_scaling and Cohere's
 * logit_scale do): the probe accepts it scaled in both paths and its
 * comparison rejects it scaled in the full path only; an engine over a
 * model whose probe rejected the selective head uses full logits. */
static void test_probe_rejects_head_scaled_only_in_full_path(void) {
    pdl_model *m = load("models/qwen3-tiny/model-f32.gguf");
    bool ok = false;
    char why[512];
    pdl_error err;
    REQUIRE(pdl_model_probe_selective_logits(m, &ok, why, sizeof why, &err) == 0);
    CHECK(ok); /* the plain model passes */
    m->cfg.logit_scale = 0.5f; /* scaled in both paths: still passes */
    REQUIRE(pdl_model_probe_selective_logits(m, &ok, why, sizeof why, &err) == 0);
    CHECK(ok);
    expect_probe_rejects_unprocessed_selective(m, "qwen3-tiny with logit_scale 0.5");
    m->probe_state = 0; /* as the probe leaves a model it rejected */
    probe_log[0] = '\0';
    pdl_engine_options o = {.kv_dtype = PDL_KV_F32, .log = capture_log};
    pdl_engine *e = NULL;
    REQUIRE(pdl_engine_create(&e, m, &o, &err) == 0);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    CHECK(!st.selective_logits);
    CHECK_CONTAINS(probe_log, "using full logits");
    /* and what it samples is the scaled model's output, as a full-logits engine's */
    static collected c, ref;
    memset(&c, 0, sizeof c);
    memset(&ref, 0, sizeof ref);
    pdl_request_params p = {.max_tokens = 6, .logprobs = 1, .prompt_logprobs = -1};
    add(e, STORY + 1, 6, &p, &c);
    run(e);
    pdl_engine *f = engine(m, 16, 0, 0, PDL_LOGITS_FULL);
    add(f, STORY + 1, 6, &p, &ref);
    run(f);
    CHECK(memcmp(c.logprob, ref.logprob, 6 * sizeof(float)) == 0);
    pdl_engine_free(f);
    pdl_engine_free(e);
    pdl_model_free(m);
}

/* Granite's logits divide, Command-R's logit scale and Gemma 2's final
 * soft-cap are applied in both head paths: the probe accepts them, for both
 * file formats; applied in the full path only, its comparison rejects them. */
static void test_probe_accepts_granite_cohere_gemma2_heads(void) {
    const char *models[] = {"models/granite-tiny/model-f32.gguf", "models/granite-tiny/hf",
                            "models/cohere-tiny/model-f32.gguf", "models/cohere-tiny/hf",
                            "models/gemma2-tiny/model-f32.gguf", "models/gemma2-softcap-tiny/hf"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        pdl_model *m = load(models[i]);
        bool ok = false;
        char why[512];
        pdl_error err;
        REQUIRE(pdl_model_probe_selective_logits(m, &ok, why, sizeof why, &err) == 0);
        CHECK_MSG(ok, "%s: %s", models[i], why);
        expect_probe_rejects_unprocessed_selective(m, models[i]);
        pdl_model_free(m);
    }
}

int main(void) {
    RUN(test_logits_rows_per_entry);
    RUN(test_runner_packs_decodes_first_with_compacted_logits);
    RUN(test_engine_greedy_matches_llama2c);
    RUN(test_stop_string_split_across_tokens_is_not_emitted);
    RUN(test_a_stop_matcher_made_beforehand_is_used_and_kept);
    RUN(test_stop_token_ids_and_max_tokens);
    RUN(test_min_tokens_holds_back_stop_tokens_and_strings);
    RUN(test_logit_bias_moves_the_choice_and_nul_text_keeps_its_length);
    RUN(test_max_model_len_must_fit_the_kv_pool);
    RUN(test_logprobs_and_prompt_logprobs_match_the_forward);
    RUN(test_n_samples_share_prompt_blocks);
    RUN(test_prompt_tokens_count_when_the_prefill_completes);
    RUN(test_abort_frees_blocks_at_once);
    RUN(test_requests_that_cannot_run_are_rejected);
    RUN(test_selective_and_full_give_identical_tokens_and_logprobs);
    RUN(test_probe_rejects_head_scaled_only_in_full_path);
    RUN(test_probe_accepts_granite_cohere_gemma2_heads);
    RUN(test_small_pool_preempts_and_output_is_unchanged);
    RUN(test_batch_invariance_stories);
    RUN(test_batch_invariance_qwen3);
    RUN(test_batch_invariance_q8_0_cache);
    RUN(test_batch_invariance_q4_0_cache);
    RUN(test_q8_0_cache_holds_more_blocks_in_the_same_memory);
    return test_summary();
}
