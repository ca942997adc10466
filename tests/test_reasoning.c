/*
 * test_reasoning.c - a reasoning model's thinking block (src/engine/
 * reasoning.c and the engine's pdl_reasoning): the text split into
 * reasoning and content, the same whatever the cuts; the markers found in
 * Qwen3's real vocabulary; and in the engine, on stories260K with two of its
 * tokens standing for the markers (and gpt-oss's harmony channels, split
 * by the harmony reader): no grammar inside the block, the start
 * token allowed beside a grammar before it (or banned with a budget of 0),
 * the end token forced when the budget is spent, the grammar applied to the
 * answer after it, and the same tokens under speculative decoding (a
 * draft model, the same model again, whose greedy drafts are accepted
 * inside the block and cut at its forced end).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/reasoning.h"
#include "grammar/grammar.h"
#include "pagedlm.h"
#include "test_util.h"

/* ---- the text split -------------------------------------------------------- */

typedef struct split_out {
    char reasoning[512], content[512];
    int order_ok;     /* no reasoning after content */
    bool seen_content;
} split_out;

static void collect(void *user, bool reasoning, const char *t, size_t n) {
    split_out *o = user;
    char *dst = reasoning ? o->reasoning : o->content;
    size_t have = strlen(dst);
    REQUIRE(have + n < sizeof o->reasoning);
    memcpy(dst + have, t, n);
    dst[have + n] = '\0';
    if (reasoning && o->seen_content) o->order_ok = 0;
    if (!reasoning && n) o->seen_content = true;
}

/* Splits text fed in pieces of `piece` bytes (0: whole). */
static split_out split(const char *fmt, bool inside, const char *text, size_t piece) {
    split_out o = {.order_ok = 1};
    reasoning_split *s = reasoning_split_new(reasoning_format_find(fmt), inside);
    REQUIRE(s);
    size_t n = strlen(text);
    if (!piece) piece = n ? n : 1;
    for (size_t i = 0; i < n; i += piece)
        REQUIRE(reasoning_split_feed(s, text + i, n - i < piece ? n - i : piece, collect, &o) == 0);
    REQUIRE(reasoning_split_finish(s, collect, &o) == 0);
    reasoning_split_free(s);
    return o;
}

static void test_the_split_follows_the_markers_whatever_the_cuts(void) {
    static const struct {
        const char *fmt;
        bool inside;
        const char *text, *reasoning, *content;
    } cases[] = {
        /* Qwen3 opens the block itself */
        {"qwen3", false, "<think>\nLet me see.\n</think>\n\nThe answer is 4.", "Let me see.", "The answer is 4."},
        {"qwen3", false, "  <think>a</think>b", "", "  <think>a</think>b"}, /* only the first token may open it */
        {"qwen3", false, "<think>a</think>b", "a", "b"},
        /* no block: all content, whitespace and near-markers included */
        {"qwen3", false, "The answer.", "", "The answer."},
        {"qwen3", false, "<thinking> is a tag", "", "<thinking> is a tag"},
        {"qwen3", false, "\n\n<thin", "", "\n\n<thin"},
        {"qwen3", false, "<thin", "", "<thin"},
        /* the prompt opened it (DeepSeek-R1's template) */
        {"deepseek_r1", true, "Hmm, 2 + 2.\n</think>\n\n4", "Hmm, 2 + 2.", "4"},
        /* cut inside the block (max_tokens): reasoning to the end, a partial marker with it */
        {"deepseek_r1", true, "still thinking </thi", "still thinking </thi", ""},
        {"qwen3", false, "<think>\nstill \n\n", "still", ""},
        /* a marker-like text inside, and a second start in the answer */
        {"qwen3", false, "<think>a </th b</think>c <think>d</think>", "a </th b", "c <think>d</think>"},
        /* empty block (enable_thinking=false writes one into the prompt; a model may too) */
        {"qwen3", false, "<think>\n\n</think>\n\nHi", "", "Hi"},
        {"qwen3", true, "</think>x", "", "x"},
        /* gpt-oss's harmony (its markers' text fed for its control tokens) */
        {"openai", false, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
         "Think.", "Hi!"},
        {"openai", false, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}", "",
         "[tool call f {\"a\": 1}]"},
        {"openai", false, "No harmony here.", "", "No harmony here."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t piece = 0; piece <= strlen(cases[i].text); piece++) {
            split_out o = split(cases[i].fmt, cases[i].inside, cases[i].text, piece);
            CHECK_MSG(strcmp(o.reasoning, cases[i].reasoning) == 0 && strcmp(o.content, cases[i].content) == 0,
                      "case %zu, pieces of %zu: reasoning '%s' content '%s'", i, piece, o.reasoning, o.content);
            CHECK_MSG(o.order_ok, "case %zu: reasoning after content", i);
        }
}

static void test_a_prompt_that_opens_the_block(void) {
    const reasoning_format *f = reasoning_format_find("deepseek_r1");
    REQUIRE(f);
    const char *yes[] = {"<｜Assistant｜><think>\n", "...<|im_start|>assistant\n<think>", "<think> \n\t"};
    const char *no[] = {"<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n", "think>", ""};
    for (size_t i = 0; i < 3; i++) CHECK_MSG(reasoning_prompt_opens(f, yes[i], strlen(yes[i])), "'%s'", yes[i]);
    for (size_t i = 0; i < 4; i++) CHECK_MSG(!reasoning_prompt_opens(f, no[i], strlen(no[i])), "'%s'", no[i]);
    CHECK(reasoning_format_find("qwen3") && !reasoning_format_find("nope"));
}

/* Qwen3's vocabulary has <think> and </think> as single tokens (151667,
 * 151668); stories260K's has neither, so the engine cannot follow a block
 * there (the split still works on its text). */
static void test_markers_are_tokens_of_qwen3_not_of_stories(void) {
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_model *m = NULL;
    pdl_error err;
    pdl_model_options o = {.n_threads = 1};
    REQUIRE_MSG(pdl_model_load(&m, path, &o, &err) == 0, "%s", err.message);
    free(path);
    pdl_reasoning rp;
    reasoning_params(reasoning_format_find("qwen3"), m, false, -1, &rp);
    CHECK(!rp.enabled);
    CHECK(rp.start_token < 0 && rp.end_token < 0);
    pdl_model_free(m);

    char *dir = test_data_path("tokenizers/qwen3");
    pdl_tokenizer *tok = NULL;
    REQUIRE_MSG(pdl_tokenizer_load(&tok, dir, &err) == 0, "%s", err.message);
    free(dir);
    int32_t *ids = NULL;
    size_t n = 0;
    REQUIRE(pdl_tokenizer_encode(tok, "<think></think>", 15, PDL_TOK_PARSE_SPECIAL, &ids, &n, &err) == 0);
    CHECK(n == 2 && ids[0] == 151667 && ids[1] == 151668);
    free(ids);
    pdl_tokenizer_free(tok);
}

/* ---- the engine ------------------------------------------------------------ */

/* stories260K's greedy continuation of STORY[0..5) is STORY[5..): the
 * reference for what the model picks unconstrained. */
static const int32_t STORY[16] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
/* tokens standing for the markers: END never comes greedily here */
enum { END = 500, BUDGET = 3 };

typedef struct got {
    int32_t tokens[128];
    int n;
    uint64_t accepted; /* speculative drafts accepted */
    char text[1024];
    char finish[16];
} got;

static void on_event(const pdl_event *ev, void *user) {
    got *g = user;
    if (ev->kind == PDL_EVENT_TOKEN && g->n < 128) g->tokens[g->n++] = ev->token;
    if (ev->kind == PDL_EVENT_FINISHED) snprintf(g->finish, sizeof g->finish, "%s", ev->finish_reason);
    if (ev->text) strncat(g->text, ev->text, sizeof g->text - strlen(g->text) - 1);
}

static pdl_model *stories, *draft; /* the draft: the same model again, so its greedy drafts are the target's */
static gram_vocab *stories_vocab;

static void load_stories(void) {
    if (stories) return;
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_error err;
    pdl_model_options o = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&stories, path, &o, &err) == 0, "%s", err.message);
    REQUIRE_MSG(pdl_model_load(&draft, path, &o, &err) == 0, "%s", err.message);
    free(path);
}

static gram_grammar *choice(const char *json) {
    load_stories();
    if (!stories_vocab) {
        pdl_error err;
        REQUIRE_MSG(pdl_model_grammar_vocab(stories, &stories_vocab, &err) == 0, "%s", err.message);
    }
    gram_spec spec = {.kind = GRAM_CHOICE, .text = json};
    gram_grammar *g = NULL;
    pdl_error err;
    REQUIRE_MSG(gram_compile(&g, stories_vocab, &spec, &err) == 0, "%s", err.message);
    return g;
}

static got generate(const pdl_request_params *p, pdl_spec_method spec) {
    load_stories();
    pdl_engine_options eo = {.block_size = 16, .kv_dtype = PDL_KV_F32, .max_num_batched_tokens = 256,
                             .spec_method = spec, .num_speculative_tokens = spec ? 4 : 0, .spec_no_pause = true,
                             .draft_model = spec == PDL_SPEC_DRAFT_MODEL ? draft : NULL};
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE_MSG(pdl_engine_create(&e, stories, &eo, &err) == 0, "%s", err.message);
    got g = {0};
    REQUIRE_MSG(pdl_engine_add_request(e, STORY, 5, p, on_event, &g, NULL, &err) == 0, "%s", err.message);
    REQUIRE_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
    pdl_engine_stats st;
    pdl_engine_get_stats(e, &st);
    g.accepted = st.spec_accepted_tokens;
    pdl_engine_free(e);
    return g;
}

/* The prompt opened the block: BUDGET tokens as the model picks them (the
 * grammar does not apply inside, though it allows none of them), the end
 * token forced, then the grammar's answer. */
static void test_a_budget_forces_the_end_and_the_grammar_takes_the_answer(void) {
    gram_grammar *gr = choice("[\"zzz\"]");
    pdl_request_params p = {.max_tokens = 40, .logprobs = -1, .prompt_logprobs = -1, .grammar = gr,
                            .reasoning = {.enabled = true, .start_token = -1, .end_token = END,
                                          .starts_inside = true, .budget = BUDGET}};
    for (int spec = 0; spec <= 1; spec++) {
        got g = generate(&p, spec ? PDL_SPEC_DRAFT_MODEL : PDL_SPEC_NONE);
        REQUIRE_MSG(g.n > BUDGET + 1, "%d tokens", g.n);
        for (int i = 0; i < BUDGET; i++) CHECK_MSG(g.tokens[i] == STORY[5 + i], "spec %d token %d: %d", spec, i, g.tokens[i]);
        CHECK_MSG(g.tokens[BUDGET] == END, "spec %d: token %d is %d, not the forced end", spec, BUDGET,
                  g.tokens[BUDGET]);
        CHECK_MSG(strlen(g.text) >= 3 && strcmp(g.text + strlen(g.text) - 3, "zzz") == 0, "spec %d: '%s'", spec,
                  g.text);
        CHECK(strcmp(g.finish, "stop") == 0);
    }
    /* without a budget the model thinks on: the grammar never gets a say */
    p.reasoning.budget = -1;
    p.max_tokens = 8;
    got g = generate(&p, PDL_SPEC_NONE);
    for (int i = 0; i < 8; i++) CHECK(g.tokens[i] == STORY[5 + i]);
    CHECK(strcmp(g.finish, "length") == 0);
    gram_grammar_free(gr);
}

/* The model opens the block itself: its greedy first token (STORY[5],
 * standing for <think>) is allowed beside the grammar's tokens; with a
 * budget of 0 it is banned instead, and the answer starts at once. */
static void test_the_start_is_allowed_beside_the_grammar_or_banned_by_a_zero_budget(void) {
    gram_grammar *gr = choice("[\"zzz\"]");
    pdl_request_params p = {.max_tokens = 40, .logprobs = -1, .prompt_logprobs = -1, .grammar = gr,
                            .reasoning = {.enabled = true, .start_token = STORY[5], .end_token = END,
                                          .budget = BUDGET}};
    for (int spec = 0; spec <= 1; spec++) {
        got g = generate(&p, spec ? PDL_SPEC_DRAFT_MODEL : PDL_SPEC_NONE);
        REQUIRE(g.n > BUDGET + 2);
        CHECK_MSG(g.tokens[0] == STORY[5], "spec %d: first token %d: the start was not allowed", spec, g.tokens[0]);
        for (int i = 1; i <= BUDGET; i++) CHECK(g.tokens[i] == STORY[5 + i]);
        CHECK(g.tokens[BUDGET + 1] == END);
        CHECK(strcmp(g.text + strlen(g.text) - 3, "zzz") == 0);
    }
    /* budget 0: no block; the first token is the grammar's */
    p.reasoning.budget = 0;
    got g = generate(&p, PDL_SPEC_NONE);
    CHECK_MSG(strcmp(g.text, "zzz") == 0, "'%s'", g.text);
    /* budget 0 without a grammar: the start token is banned, the rest free */
    p.grammar = NULL;
    p.max_tokens = 4;
    g = generate(&p, PDL_SPEC_NONE);
    CHECK(g.tokens[0] != STORY[5]);
    /* and a start token later is plain text (the block can open only first) */
    p.reasoning.budget = -1;
    p.reasoning.start_token = STORY[6];
    g = generate(&p, PDL_SPEC_NONE);
    for (int i = 0; i < 4; i++) CHECK(g.tokens[i] == STORY[5 + i]);
    gram_grammar_free(gr);
}

/* Speculative decoding verifies k drafts at once: each row is drawn in the
 * block's state after the drafts before it, so the end falls on the same
 * token as without speculation wherever the budget cuts a draft window. */
static void test_speculation_gives_the_same_tokens(void) {
    gram_grammar *gr = choice("[\"zzz\"]");
    uint64_t accepted = 0;
    for (int budget = 2; budget <= 80; budget += 3) {
        pdl_request_params p = {.max_tokens = 120, .logprobs = -1, .prompt_logprobs = -1, .grammar = gr,
                                .reasoning = {.enabled = true, .start_token = STORY[5], .end_token = END,
                                              .budget = budget}};
        got a = generate(&p, PDL_SPEC_NONE), b = generate(&p, PDL_SPEC_DRAFT_MODEL);
        CHECK_MSG(a.n == b.n && memcmp(a.tokens, b.tokens, (size_t)a.n * sizeof *a.tokens) == 0,
                  "budget %d: %d tokens without speculation, %d with", budget, a.n, b.n);
        CHECK(a.n > budget + 1 && a.tokens[budget + 1] == END);
        accepted += b.accepted;
    }
    CHECK_MSG(accepted > 50, "only %llu drafts accepted: speculation was hardly exercised",
              (unsigned long long)accepted);
    gram_grammar_free(gr);
}

static void test_bad_markers_are_refused(void) {
    load_stories();
    pdl_engine_options eo = {.block_size = 16, .kv_dtype = PDL_KV_F32};
    pdl_engine *e = NULL;
    pdl_error err;
    REQUIRE(pdl_engine_create(&e, stories, &eo, &err) == 0);
    pdl_request_params p = {.logprobs = -1, .prompt_logprobs = -1,
                            .reasoning = {.enabled = true, .start_token = -1, .end_token = 99999}};
    CHECK(pdl_engine_add_request(e, STORY, 5, &p, NULL, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.message, "reasoning markers");
    p.reasoning = (pdl_reasoning){.enabled = true, .start_token = -1, .end_token = END}; /* no way in */
    CHECK(pdl_engine_add_request(e, STORY, 5, &p, NULL, NULL, NULL, &err) != 0);
    pdl_engine_free(e);
}

int main(void) {
    RUN(test_the_split_follows_the_markers_whatever_the_cuts);
    RUN(test_a_prompt_that_opens_the_block);
    RUN(test_markers_are_tokens_of_qwen3_not_of_stories);
    RUN(test_a_budget_forces_the_end_and_the_grammar_takes_the_answer);
    RUN(test_the_start_is_allowed_beside_the_grammar_or_banned_by_a_zero_budget);
    RUN(test_speculation_gives_the_same_tokens);
    RUN(test_bad_markers_are_refused);
    gram_vocab_free(stories_vocab);
    pdl_model_free(stories);
    pdl_model_free(draft);
    return test_summary();
}
