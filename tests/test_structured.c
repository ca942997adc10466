/*
 * test_structured.c - structured output through the engine (stories260K,
 * its real 512-token vocabulary with byte fallback): sampled output is in
 * the grammar's language and ends when it is complete; a constrained
 * request changes nothing for the others in its batch and the forward's
 * rows stay unmasked; logprobs are those of the masked row; with n-gram
 * speculation the grammar gives k + 1 masks and rolls back, so the output
 * equals plain constrained decoding; a grammar made for another vocabulary
 * is refused.
 */
#include <math.h>
#include <string.h>

#include "grammar/grammar.h"
#include "pagedlm.h"
#include "test_util.h"

typedef struct out {
    int32_t tokens[400];
    int n;
    char text[4096];
    size_t text_len;
    char finish[16];
    float logprob[400];
    int n_top[400];
    int32_t top_ids[400][5];
    float top_lp[400][5];
} out;

static void on_event(const pdl_event *ev, void *user) {
    out *o = (out *)user + ev->index;
    if (ev->kind == PDL_EVENT_TOKEN && o->n < 400) {
        o->logprob[o->n] = ev->logprob;
        o->n_top[o->n] = ev->n_top < 5 ? ev->n_top : 5;
        for (int i = 0; i < o->n_top[o->n]; i++) {
            o->top_ids[o->n][i] = ev->top[i].token;
            o->top_lp[o->n][i] = ev->top[i].logprob;
        }
        o->tokens[o->n++] = ev->token;
    }
    if (ev->kind == PDL_EVENT_FINISHED) snprintf(o->finish, sizeof o->finish, "%s", ev->finish_reason);
    if (ev->text_len && o->text_len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->text_len, ev->text, ev->text_len);
        o->text_len += ev->text_len;
    }
}

/* Counts -inf entries in the rows the forward hands the sampler. */
static long g_masked_entries;
static void on_logits(uint64_t id, int index, int pos, const float *row, int vocab, void *user) {
    (void)id, (void)index, (void)pos, (void)user;
    for (int i = 0; i < vocab; i++) g_masked_entries += isinf(row[i]) && row[i] < 0;
}

static pdl_model *g_model;
static gram_vocab *g_vocab;

static gram_grammar *compile(gram_kind kind, const char *text) {
    gram_grammar *g = NULL;
    pdl_error err;
    gram_spec spec = {.kind = kind, .text = text};
    REQUIRE_MSG(gram_compile(&g, g_vocab, &spec, &err) == 0, "%s", err.message);
    return g;
}

typedef struct run_opts {
    bool ngram;
    bool watch_logits;
} run_opts;

/* Runs the requests together; outs[r * 4 + i] gets request r's sequence i. */
static pdl_engine_stats run_all(const run_opts *ro, int n_req, const int32_t *const *prompts, const int *lens,
                                const pdl_request_params *params, out *outs) {
    pdl_engine_options eo = {.kv_dtype = PDL_KV_F32, .kv_cache_memory = 16u << 20, .spec_max_batch = 64,
                             .spec_no_pause = true /* a tiny model: the cost model would stop speculating */};
    if (ro->ngram) {
        eo.spec_method = PDL_SPEC_NGRAM;
        eo.num_speculative_tokens = 4;
        eo.prompt_lookup_min = 1;
        eo.prompt_lookup_max = 4;
    }
    if (ro->watch_logits) eo.on_logits = on_logits;
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, g_model, &eo, &err) == 0, "%s", err.message);
    for (int r = 0; r < n_req; r++) {
        memset(&outs[r * 4], 0, 4 * sizeof(out));
        REQUIRE_MSG(pdl_engine_add_request(e, prompts[r], (size_t)lens[r], &params[r], on_event, &outs[r * 4], NULL,
                                           &err) == 0,
                    "%s", err.message);
    }
    int active = 1;
    while (active) REQUIRE_MSG(pdl_engine_step(e, &active, &err) == 0, "%s", err.message);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    pdl_engine_free(e);
    return st;
}

static const int32_t ONCE[] = {1, 403, 407, 261, 378}; /* "Once upon a time" */

static pdl_request_params params_for(gram_grammar *g, float temp, uint64_t seed, int max_tokens) {
    pdl_request_params p = {.max_tokens = max_tokens, .logprobs = -1, .prompt_logprobs = -1, .grammar = g};
    p.sampling.temperature = temp;
    p.sampling.seed = seed;
    return p;
}

static bool text_is(const out *o, const char *s) { return o->text_len == strlen(s) && memcmp(o->text, s, o->text_len) == 0; }

/* Choices and a regex, greedy and sampled: the text is in the language and
 * the sequence stops when the grammar is complete. */
static void test_output_is_in_the_language(void) {
    gram_grammar *choice = compile(GRAM_CHOICE, "[\"the cat\", \"the dog\", \"a bird on a tree\"]");
    gram_grammar *re = compile(GRAM_REGEX, "[0-9]{3}-[a-z]{2,4}\\.");
    const int32_t *prompts[8];
    int lens[8];
    pdl_request_params ps[8];
    for (int r = 0; r < 8; r++) {
        prompts[r] = ONCE;
        lens[r] = 5;
        ps[r] = params_for(r < 4 ? choice : re, r % 4 == 0 ? 0.0f : 1.0f, 10 + (uint64_t)r, 60);
    }
    static out outs[8 * 4];
    run_all(&(run_opts){0}, 8, prompts, lens, ps, outs);
    for (int r = 0; r < 8; r++) {
        const out *o = &outs[r * 4];
        CHECK_MSG(strcmp(o->finish, "stop") == 0, "request %d finished with %s", r, o->finish);
        if (r < 4) {
            CHECK_MSG(text_is(o, "the cat") || text_is(o, "the dog") || text_is(o, "a bird on a tree"),
                      "request %d: '%.*s' is not a choice", r, (int)o->text_len, o->text);
        } else {
            bool ok = o->text_len >= 7 && o->text_len <= 9 && o->text[3] == '-' && o->text[o->text_len - 1] == '.';
            for (size_t i = 0; ok && i < 3; i++) ok = o->text[i] >= '0' && o->text[i] <= '9';
            for (size_t i = 4; ok && i + 1 < o->text_len; i++) ok = o->text[i] >= 'a' && o->text[i] <= 'z';
            CHECK_MSG(ok, "request %d: '%.*s' does not match the regex", r, (int)o->text_len, o->text);
        }
    }
    gram_grammar_free(choice);
    gram_grammar_free(re);
}

/* A constrained request between two unconstrained ones: theirs are the
 * tokens they get alone (greedy and seeded), and no row the forward gives
 * the sampler (on_logits, which sees every sampled row) was masked: masks
 * apply to copies of the rows, after it. */
static void test_constrained_request_changes_nothing_for_others(void) {
    gram_grammar *g = compile(GRAM_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                                                "\"b\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"yy\"]},"
                                                "\"maxItems\":6}},\"required\":[\"a\",\"b\"]}");
    const int32_t *prompts[3] = {ONCE, ONCE, ONCE};
    int lens[3] = {5, 4, 3};
    pdl_request_params ps[3] = {params_for(NULL, 0.0f, 0, 40), params_for(g, 1.0f, 3, 120),
                                params_for(NULL, 0.9f, 77, 40)};
    static out together[3 * 4], alone[4];
    g_masked_entries = 0;
    run_all(&(run_opts){.watch_logits = true}, 3, prompts, lens, ps, together);
    CHECK_MSG(g_masked_entries == 0, "%ld -inf logits reached on_logits: a row was masked in place", g_masked_entries);
    CHECK(strcmp(together[4].finish, "stop") == 0);
    CHECK_MSG(together[4].text_len > 0 && together[4].text[0] == '{' && together[4].text[together[4].text_len - 1] == '}',
              "'%.*s'", (int)together[4].text_len, together[4].text);
    for (int r = 0; r < 3; r += 2) {
        run_all(&(run_opts){0}, 1, &prompts[r], &lens[r], &ps[r], alone);
        CHECK_MSG(alone[0].n == together[r * 4].n &&
                      memcmp(alone[0].tokens, together[r * 4].tokens, (size_t)alone[0].n * sizeof(int32_t)) == 0,
                  "request %d: other tokens beside a constrained request", r);
    }
    /* and the constrained one alone: the same tokens as in the batch */
    run_all(&(run_opts){0}, 1, &prompts[1], &lens[1], &ps[1], alone);
    CHECK(alone[0].n == together[4].n && memcmp(alone[0].tokens, together[4].tokens, (size_t)alone[0].n * 4) == 0);
    gram_grammar_free(g);
}

/* Logprobs are reported after masking: every top token is one the grammar
 * allows there, and the allowed tokens' probabilities add up to 1. */
static void test_logprobs_are_of_the_masked_row(void) {
    gram_grammar *g = compile(GRAM_CHOICE, "[\"Lily\", \"Tom\"]");
    pdl_request_params p = params_for(g, 1.0f, 5, 20);
    p.logprobs = 5;
    const int32_t *prompts[1] = {ONCE};
    int lens[1] = {5};
    static out o[4];
    run_all(&(run_opts){0}, 1, prompts, lens, &p, o);
    REQUIRE(o[0].n >= 2);
    gram_matcher *m = gram_matcher_new(g);
    REQUIRE(m);
    uint64_t bits[16];
    REQUIRE(gram_mask_words(g_vocab) <= 16);
    for (int t = 0; t < o[0].n; t++) {
        REQUIRE(gram_matcher_fill_mask(m, bits) == 0);
        double sum = 0;
        for (int i = 0; i < o[0].n_top[t]; i++) {
            int32_t id = o[0].top_ids[t][i];
            bool allowed = (bits[id / 64] >> (id % 64)) & 1;
            if (isfinite(o[0].top_lp[t][i])) {
                CHECK_MSG(allowed, "step %d: top token %d has logprob %g but the grammar forbids it", t, id,
                          o[0].top_lp[t][i]);
                sum += exp((double)o[0].top_lp[t][i]);
            }
        }
        int n_allowed = 0;
        for (size_t w = 0; w < gram_mask_words(g_vocab); w++) n_allowed += __builtin_popcountll(bits[w]);
        if (n_allowed <= o[0].n_top[t]) /* every allowed token is in the top list: they add up to 1 */
            CHECK_MSG(fabs(sum - 1.0) < 1e-4, "step %d: allowed tokens' probabilities add up to %g", t, sum);
        CHECK(isfinite(o[0].logprob[t]));
        REQUIRE(gram_matcher_accept_token(m, o[0].tokens[t]));
    }
    gram_matcher_free(m);
    gram_grammar_free(g);
}

/* n-gram speculation under a grammar whose output repeats (so drafts are
 * made and accepted): the same tokens as plain constrained decoding, greedy
 * and seeded, alone and batched with unconstrained requests. */
static void test_speculation_under_a_grammar_equals_plain_decoding(void) {
    gram_grammar *g = compile(GRAM_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"enum\":[\"the cat\",\"the dog\","
                                                "\"a little bird\"]},\"minItems\":6,\"maxItems\":9}");
    enum { N = 4 };
    const int32_t *prompts[N] = {ONCE, ONCE, ONCE, ONCE};
    int lens[N] = {5, 5, 4, 3};
    pdl_request_params ps[N] = {params_for(g, 0.0f, 0, 380), params_for(g, 0.8f, 21, 380),
                                params_for(NULL, 0.0f, 0, 60), params_for(g, 1.0f, 9, 380)};
    static out plain[N * 4], spec[N * 4];
    run_all(&(run_opts){0}, N, prompts, lens, ps, plain);
    pdl_engine_stats st = run_all(&(run_opts){.ngram = true}, N, prompts, lens, ps, spec);
    CHECK_MSG(st.spec_accepted_tokens > 0, "no draft was accepted: the test does not reach verification");
    for (int r = 0; r < N; r++) {
        const out *a = &plain[r * 4], *b = &spec[r * 4];
        CHECK_MSG(a->n == b->n && memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t)) == 0,
                  "request %d: %d tokens plain, %d with speculation, or other tokens", r, a->n, b->n);
        CHECK_MSG(strcmp(a->finish, b->finish) == 0, "request %d: %s vs %s", r, a->finish, b->finish);
        if (r != 2) CHECK_MSG(strcmp(a->finish, "stop") == 0 && a->text[0] == '[', "request %d: '%.*s' (%s)", r,
                              (int)a->text_len, a->text, a->finish);
    }
    fprintf(stderr, "  n-gram under a grammar: %llu of %llu draft tokens accepted\n",
            (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens);
    gram_grammar_free(g);
}

/* A grammar compiled for another vocabulary is refused with both sizes named. */
static void test_grammar_of_another_vocabulary_is_refused(void) {
    const char *bytes[3] = {"a", "b", "c"};
    uint32_t lens[3] = {1, 1, 1};
    gram_vocab *v = NULL;
    pdl_error err;
    REQUIRE(gram_vocab_new(&v, 3, bytes, lens, NULL, NULL, 0, &err) == 0);
    gram_grammar *g = NULL;
    gram_spec spec = {.kind = GRAM_REGEX, .text = "a+"};
    REQUIRE(gram_compile(&g, v, &spec, &err) == 0);
    pdl_engine *e = NULL;
    pdl_engine_options eo = {.kv_dtype = PDL_KV_F32, .kv_cache_memory = 4u << 20};
    REQUIRE(pdl_engine_create(&e, g_model, &eo, &err) == 0);
    pdl_request_params p = params_for(g, 0.0f, 0, 5);
    static out o[4];
    CHECK(pdl_engine_add_request(e, ONCE, 5, &p, on_event, o, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "3 tokens");
    CHECK_CONTAINS(err.message, "512");
    pdl_engine_free(e);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

int main(void) {
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_error err;
    /* 512: room for long constrained outputs, past the 128 the file declares */
    pdl_model_options mo = {.n_threads = 2, .ctx_size = 512, .allow_long_context = true};
    REQUIRE_MSG(pdl_model_load(&g_model, path, &mo, &err) == 0, "%s", err.message);
    free(path);
    REQUIRE_MSG(pdl_model_grammar_vocab(g_model, &g_vocab, &err) == 0, "%s", err.message);
    RUN(test_output_is_in_the_language);
    RUN(test_constrained_request_changes_nothing_for_others);
    RUN(test_logprobs_are_of_the_masked_row);
    RUN(test_speculation_under_a_grammar_equals_plain_decoding);
    RUN(test_grammar_of_another_vocabulary_is_refused);
    gram_vocab_free(g_vocab);
    pdl_model_free(g_model);
    return test_summary();
}
