/*
 * test_public_grammar.c - structured output through the public API alone
 * (include/pagedlm.h: pdl_grammar_vocab, pdl_grammar_compile, the request's
 * grammar handle), as an embedder that has no src/ headers sees it: a
 * compiled grammar constrains a generation on stories260K, and a grammar
 * that cannot compile fails with a message saying why and where.
 *
 * What it is not for: the grammar compiler's languages and the engine's
 * masking in depth (test_grammar*.c, test_structured.c).
 */
#include <string.h>

#include "pagedlm.h"
#include "test_util.h"

static pdl_model *g_model;
static pdl_grammar_vocab *g_vocab;

typedef struct output {
    char text[1024];
    size_t len;
    char finish[16];
} output;

static void on_event(const pdl_event *ev, void *user) {
    output *o = user;
    if (ev->text_len && o->len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->len, ev->text, ev->text_len);
        o->len += ev->text_len;
    }
    if (ev->kind == PDL_EVENT_FINISHED) snprintf(o->finish, sizeof o->finish, "%s", ev->finish_reason);
}

/* Runs one request with grammar g (greedy, up to max_tokens) to its end. */
static void generate(pdl_grammar *g, int max_tokens, output *o) {
    pdl_error err;
    pdl_engine *e = NULL;
    pdl_engine_options eo = {.kv_cache_memory = 4u << 20};
    REQUIRE_MSG(pdl_engine_create(&e, g_model, &eo, &err) == 0, "%s", err.message);
    int32_t *ids = NULL;
    size_t n = 0;
    const char *prompt = "Once upon a time";
    REQUIRE_MSG(pdl_tokenize(g_model, prompt, strlen(prompt), true, &ids, &n, &err) == 0, "%s", err.message);
    pdl_request_params p = {.max_tokens = max_tokens, .logprobs = -1, .prompt_logprobs = -1, .grammar = g};
    memset(o, 0, sizeof *o);
    CHECK_MSG(pdl_engine_add_request(e, ids, n, &p, on_event, o, NULL, &err) == 0, "%s", err.message);
    CHECK_MSG(pdl_engine_run_until_idle(e, &err) == 0, "%s", err.message);
    free(ids);
    pdl_engine_free(e);
}

static void test_choice_grammar_makes_the_output_one_of_the_choices(void) {
    pdl_error err;
    pdl_grammar *g = NULL;
    pdl_grammar_spec spec = {.kind = PDL_GRAMMAR_CHOICE, .text = "[\"yes, she did\", \"no\"]"};
    REQUIRE_MSG(pdl_grammar_compile(&g, g_vocab, &spec, NULL, &err) == 0, "%s", err.message);
    output o;
    generate(g, 40, &o);
    CHECK_MSG(strcmp(o.text, "yes, she did") == 0 || strcmp(o.text, "no") == 0, "text \"%s\"", o.text);
    /* complete before max_tokens: the grammar ended it */
    CHECK_MSG(strcmp(o.finish, "stop") == 0, "finish %s", o.finish);
    pdl_grammar_free(g);
}

static void test_regex_grammar_within_explicit_limits_constrains_the_output(void) {
    pdl_error err;
    pdl_grammar *g = NULL;
    pdl_grammar_spec spec = {.kind = PDL_GRAMMAR_REGEX, .text = "[a-z]{1,8} (and|or) [a-z]{1,8}\\."};
    pdl_grammar_limits lim = {.max_work = 10000000, .max_states = 10000, .max_seconds = 10};
    REQUIRE_MSG(pdl_grammar_compile(&g, g_vocab, &spec, &lim, &err) == 0, "%s", err.message);
    output o;
    generate(g, 60, &o);
    /* the regex by hand: a lowercase word, " and " or " or ", a word, "." (at most 22 bytes, so it
     * ends well before max_tokens) */
    const char *s = o.text;
    size_t w1 = strspn(s, "abcdefghijklmnopqrstuvwxyz");
    CHECK_MSG(w1 > 0 && w1 <= 8, "text \"%s\"", o.text);
    s += w1;
    if (strncmp(s, " and ", 5) == 0) s += 5;
    else if (strncmp(s, " or ", 4) == 0) s += 4;
    else CHECK_MSG(false, "no ' and ' / ' or ' in \"%s\"", o.text);
    size_t w2 = strspn(s, "abcdefghijklmnopqrstuvwxyz");
    CHECK_MSG(w2 > 0 && w2 <= 8 && strcmp(s + w2, ".") == 0, "text \"%s\"", o.text);
    CHECK_MSG(strcmp(o.finish, "stop") == 0, "finish %s", o.finish);
    pdl_grammar_free(g);
}

static void test_a_grammar_is_reference_counted(void) {
    pdl_error err;
    pdl_grammar *g = NULL;
    pdl_grammar_spec spec = {.kind = PDL_GRAMMAR_JSON_OBJECT};
    REQUIRE_MSG(pdl_grammar_compile(&g, g_vocab, &spec, NULL, &err) == 0, "%s", err.message);
    CHECK(pdl_grammar_ref(g) == g);
    pdl_grammar_free(g);
    /* one reference left: still usable */
    output o;
    generate(g, 8, &o);
    CHECK_MSG(o.len > 0 && o.text[0] == '{', "text \"%s\"", o.text);
    pdl_grammar_free(g);
    pdl_grammar_free(NULL);
}

/* Compiles spec, which must fail with a message holding `want`. */
static void check_refused(const pdl_grammar_spec *spec, const pdl_grammar_limits *lim, const char *want) {
    pdl_error err = {{0}};
    static char not_a_grammar;
    pdl_grammar *g = (pdl_grammar *)&not_a_grammar; /* not NULL: a failed compile must clear it */
    CHECK(pdl_grammar_compile(&g, g_vocab, spec, lim, &err) == -1);
    CHECK(g == NULL);
    CHECK_CONTAINS(err.message, want);
}

static void test_a_bad_grammar_fails_with_a_message_saying_what_and_where(void) {
    check_refused(&(pdl_grammar_spec){.kind = PDL_GRAMMAR_GBNF, .text = "root ::= \"a\" |\nitem ::= ( \"b\""}, NULL,
                  "line 2");
    check_refused(&(pdl_grammar_spec){.kind = PDL_GRAMMAR_REGEX, .text = "ab(c"}, NULL, "regex");
    check_refused(&(pdl_grammar_spec){.kind = PDL_GRAMMAR_JSON_SCHEMA, .text = "{\"type\": \"object\", \"not\": {}}"},
                  NULL, "not");
    check_refused(&(pdl_grammar_spec){.kind = PDL_GRAMMAR_CHOICE, .text = "[1, 2]"}, NULL, "not a string");
    check_refused(&(pdl_grammar_spec){.kind = (pdl_grammar_kind)99, .text = "x"}, NULL, "unknown kind 99");
    check_refused(&(pdl_grammar_spec){.kind = PDL_GRAMMAR_TOOL_CALL, .text = "[]", .tool_format = "nonesuch"}, NULL,
                  "unknown tool_format 'nonesuch'");
    check_refused(&(pdl_grammar_spec){.kind = PDL_GRAMMAR_TOOL_CALL, .text = "[]"}, NULL, "tool_format");
    check_refused(&(pdl_grammar_spec){.kind = PDL_GRAMMAR_REGEX}, NULL, "text is NULL");
}

static void test_a_grammar_past_its_limits_fails_naming_the_limit(void) {
    pdl_grammar_spec spec = {.kind = PDL_GRAMMAR_REGEX, .text = "(a|b){1,60}c(d|e){1,60}"};
    check_refused(&spec, &(pdl_grammar_limits){.max_states = 20}, "states");
}

int main(void) {
    char *path = test_data_path("models/stories260K/stories260K.gguf");
    pdl_error err;
    pdl_model_options mo = {.n_threads = 2};
    REQUIRE_MSG(pdl_model_load(&g_model, path, &mo, &err) == 0, "%s", err.message);
    free(path);
    REQUIRE_MSG(pdl_model_grammar_vocab(g_model, &g_vocab, &err) == 0, "%s", err.message);
    RUN(test_choice_grammar_makes_the_output_one_of_the_choices);
    RUN(test_regex_grammar_within_explicit_limits_constrains_the_output);
    RUN(test_a_grammar_is_reference_counted);
    RUN(test_a_bad_grammar_fails_with_a_message_saying_what_and_where);
    RUN(test_a_grammar_past_its_limits_fails_naming_the_limit);
    pdl_grammar_vocab_free(g_vocab);
    pdl_model_free(g_model);
    return test_summary();
}
