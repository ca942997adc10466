/*
 * test_grammar_limits.c - what a hostile grammar may cost (src/grammar/
 * gram_budget.c and the matcher's run-time bounds): a few bytes of regex,
 * schema or GBNF must never take the server's memory or a core for long.
 *
 * Compilation: duplicate alternatives such as (a|a)* compile to the small
 * automaton they denote; grammars whose automaton really explodes are
 * refused by the work budget (counted as the compiler goes, so the refusal
 * comes after at most max_work steps whatever the grammar), the state limit,
 * the clock, or the caller's cancel hook, each with a message that says
 * which. Run time: a grammar ambiguous enough for its stacks to double with
 * every byte fails the step with a reason instead of growing without bound.
 */
#include <stdlib.h>
#include <string.h>

#include "gram_test.h"
#include "test_util.h"

static const char *compile_error_within(const gram_vocab *v, gram_kind kind, const char *text, const gram_limits *lim) {
    static pdl_error err;
    gram_spec spec = {.kind = kind, .text = text};
    gram_grammar *g = NULL;
    if (gram_compile_limited(&g, v, &spec, lim, &err) == 0) {
        gram_grammar_free(g);
        return NULL;
    }
    return err.message;
}

/* (a|a)* is a*: the subset construction must not count a state twice when
 * two edges lead into it (each copy doubled the next set, without end). */
static void test_duplicate_alternatives_compile_to_the_small_automaton(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    static const struct {
        gram_kind kind;
        const char *text, *yes[3], *no[3];
    } cases[] = {
        {GRAM_REGEX, "(a|a)*b", {"b", "aab", "aaaaaaaaaaaaaaaaaaaaaaaaaaaab"}, {"", "aa", "ba"}},
        {GRAM_REGEX, "(ab|ab)*", {"", "ab", "ababab"}, {"a", "aba", "b"}},
        {GRAM_REGEX, "((a|a)|(a|a))*", {"", "a", "aaaa"}, {"b", "ab", "ba"}},
        {GRAM_GBNF, "root ::= (\"a\" | \"a\")* \"b\"", {"b", "ab", "aaaab"}, {"", "a", "bb"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gram_grammar *g = gt_compile(v, cases[i].kind, cases[i].text);
        gram_stats st;
        gram_grammar_stats(g, &st);
        CHECK_MSG(st.n_states <= 4, "%s: %d states", cases[i].text, st.n_states);
        CHECK_MSG(st.compile_work < 100000, "%s: %lld steps", cases[i].text, st.compile_work);
        for (int k = 0; k < 3; k++) {
            CHECK_MSG(gt_accepts(g, cases[i].yes[k], strlen(cases[i].yes[k])), "%s refuses '%s'", cases[i].text,
                      cases[i].yes[k]);
            CHECK_MSG(!gt_accepts(g, cases[i].no[k], strlen(cases[i].no[k])), "%s accepts '%s'", cases[i].text,
                      cases[i].no[k]);
        }
        gram_grammar_free(g);
    }
    gram_vocab_free(v);
}

/* Nested counted repetitions ask for about a million NFA states and a
 * subset construction whose sets grow with them: refused once the steps
 * spent pass the limit, during the construction (not after it). */
static void test_explosive_repetitions_are_refused_by_the_work_limit(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_limits lim = {.max_work = 2000000, .max_seconds = -1};
    static const struct {
        gram_kind kind;
        const char *text;
    } cases[] = {
        {GRAM_REGEX, "((a{1,100}){1,100}){1,100}"},
        {GRAM_REGEX, "(a{1,1000}){1,1000}"},
        {GRAM_JSON_SCHEMA, "{\"type\": \"string\", \"pattern\": \"^((a{1,100}){1,100}){1,100}$\"}"},
        {GRAM_GBNF, "root ::= ((\"a\"){1,100}){1,100} \"b\"\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *e = compile_error_within(v, cases[i].kind, cases[i].text, &lim);
        REQUIRE_MSG(e, "%s compiled", cases[i].text);
        CHECK_CONTAINS(e, "grammar too complex");
        CHECK_CONTAINS(e, "more than 2000000 steps");
    }
    /* the same grammars within the default limits: refused too (by work, as
     * the defaults are set), never compiled into hundreds of MB */
    const char *e = gt_compile_error(v, GRAM_REGEX, "((a{1,100}){1,100}){1,100}");
    REQUIRE(e);
    CHECK_CONTAINS(e, "grammar too complex");
    gram_vocab_free(v);
}

/* (a|b)*a(a|b){20} is the textbook DFA of 2^21 states: the state limit. */
static void test_exponential_dfa_is_refused_by_the_state_limit(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_limits lim = {.max_states = 1000, .max_seconds = -1};
    const char *e = compile_error_within(v, GRAM_REGEX, "(a|b)*a(a|b){20}", &lim);
    REQUIRE(e);
    CHECK_CONTAINS(e, "more than 1000 automaton states");
    /* a smaller window of the same shape fits: 2^7 states */
    gram_spec spec = {.kind = GRAM_REGEX, .text = "(a|b)*a(a|b){6}"};
    gram_grammar *g = NULL;
    pdl_error err;
    REQUIRE_MSG(gram_compile_limited(&g, v, &spec, &lim, &err) == 0, "%s", err.message);
    CHECK(gt_accepts(g, "abbbbbb", 7));
    CHECK(!gt_accepts(g, "bbbbbbb", 7));
    gram_grammar_free(g);
    gram_vocab_free(v);
}

typedef struct hook_count {
    int calls, stop_at;
} hook_count;

static bool stop_after(void *user) {
    hook_count *h = user;
    return ++h->calls >= h->stop_at;
}

/* The server's hook says the client has gone: the compilation stops at the
 * next poll (every GRAM_POLL_WORK steps), with "cancelled". */
static void test_the_cancel_hook_stops_a_compilation(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    hook_count h = {.stop_at = 3};
    gram_limits lim = {.max_work = (int64_t)1 << 40, .max_seconds = -1, .cancelled = stop_after, .user = &h};
    const char *e = compile_error_within(v, GRAM_REGEX, "((a{1,100}){1,100}){1,100}", &lim);
    REQUIRE(e);
    CHECK_CONTAINS(e, "cancelled");
    CHECK_MSG(h.calls == 3, "the hook was asked %d times after saying stop", h.calls);
    /* a small grammar never reaches a poll: the hook is not asked */
    h = (hook_count){.stop_at = 1};
    CHECK(compile_error_within(v, GRAM_REGEX, "[a-z]+@[a-z]+", &lim) == NULL);
    CHECK(h.calls == 0);
    gram_vocab_free(v);
}

/* The clock is the backstop of a work limit set too high. */
static void test_the_time_limit_stops_a_compilation(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_limits lim = {.max_work = (int64_t)1 << 40, .max_seconds = 0.05};
    const char *e = compile_error_within(v, GRAM_REGEX, "((a{1,100}){1,100}){1,100}", &lim);
    REQUIRE(e);
    CHECK_CONTAINS(e, "takes longer than 0.05 s");
    gram_vocab_free(v);
}

/* Real grammars sit far below the defaults: a schema with nested objects,
 * arrays, formats and a pattern on Qwen3's vocabulary. */
static void test_real_grammars_stay_far_below_the_limits(void) {
    const gram_vocab *v = gt_vocab("qwen3");
    const char *schema =
        "{\"type\": \"object\", \"properties\": {"
        "\"id\": {\"type\": \"string\", \"format\": \"uuid\"},"
        "\"when\": {\"type\": \"string\", \"format\": \"date-time\"},"
        "\"code\": {\"type\": \"string\", \"pattern\": \"^[A-Z]{3}-[0-9]{4}$\"},"
        "\"items\": {\"type\": \"array\", \"maxItems\": 8, \"items\": {\"type\": \"object\", \"properties\": {"
        "  \"name\": {\"type\": \"string\", \"maxLength\": 40}, \"qty\": {\"type\": \"integer\", \"minimum\": 1, "
        "  \"maximum\": 999}}, \"required\": [\"name\", \"qty\"]}},"
        "\"note\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}},"
        "\"required\": [\"id\", \"when\", \"code\", \"items\"]}";
    gram_grammar *g = gt_compile(v, GRAM_JSON_SCHEMA, schema);
    gram_stats st;
    gram_grammar_stats(g, &st);
    CHECK_MSG(st.compile_work > 0 && st.compile_work < GRAM_DEFAULT_MAX_WORK / 10, "%lld steps", st.compile_work);
    CHECK_MSG(st.n_states < GRAM_DEFAULT_MAX_STATES / 10, "%d states", st.n_states);
    gram_grammar_free(g);
}

/* root ::= a "b"; a ::= "x" a | "x" a a | "" : after n x's the parser
 * tracks about 2^n stacks. The step that would pass GRAM_MAX_STACKS fails
 * with the reason, the matcher keeps its state, and the steps before it
 * were exact. */
static void test_an_ambiguous_grammar_fails_its_step_with_a_reason(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_grammar *g = gt_compile(v, GRAM_GBNF, "root ::= a \"b\"\na ::= \"x\" a | \"x\" a a | \"\"\n");
    gram_matcher *m = gram_matcher_new(g);
    REQUIRE(m);
    int accepted = 0;
    while (accepted < 64 && gram_matcher_accept_token(m, 'x')) accepted++;
    CHECK_MSG(accepted >= 6 && accepted <= 16, "%d bytes before the bound", accepted);
    const char *why = gram_matcher_error(m);
    REQUIRE(why);
    CHECK_CONTAINS(why, "too ambiguous");
    CHECK(gram_matcher_history(m) == accepted);
    /* what was accepted is still a prefix the grammar completes */
    CHECK(gram_matcher_accept_token(m, 'b'));
    CHECK(gram_matcher_error(m) == NULL);
    CHECK(gram_matcher_is_accepting(m));
    gram_matcher_free(m);
    /* a token the grammar does not allow is a refusal, not an error */
    m = gram_matcher_new(g);
    REQUIRE(m);
    CHECK(!gram_matcher_accept_token(m, 'y'));
    CHECK(gram_matcher_error(m) == NULL);
    gram_matcher_free(m);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

/* The same grammar under a mask on a real vocabulary: the mask fails with
 * the reason (the engine ends the request with it) instead of walking
 * millions of stacks per token. */
static void test_an_ambiguous_grammar_fails_its_mask_with_a_reason(void) {
    const gram_vocab *v = gt_vocab("qwen3");
    gram_grammar *g = gt_compile(v, GRAM_GBNF, "root ::= a \"b\"\na ::= \"x\" a | \"x\" a a | \"\"\n");
    gram_matcher *m = gram_matcher_new(g);
    REQUIRE(m);
    uint64_t *bits = malloc(gram_mask_words(v) * sizeof *bits);
    REQUIRE(bits);
    int rc = 0, steps = 0;
    for (; steps < 64 && rc == 0; steps++) {
        rc = gram_matcher_fill_mask(m, bits);
        if (rc == 0 && !gram_matcher_accept_bytes(m, "x", 1)) rc = 1;
    }
    CHECK_MSG(rc != 0, "64 bytes of x and no bound reached");
    REQUIRE(gram_matcher_error(m));
    CHECK_CONTAINS(gram_matcher_error(m), "too ambiguous");
    free(bits);
    gram_matcher_free(m);
    gram_grammar_free(g);
}

int main(void) {
    RUN(test_duplicate_alternatives_compile_to_the_small_automaton);
    RUN(test_explosive_repetitions_are_refused_by_the_work_limit);
    RUN(test_exponential_dfa_is_refused_by_the_state_limit);
    RUN(test_the_cancel_hook_stops_a_compilation);
    RUN(test_the_time_limit_stops_a_compilation);
    RUN(test_real_grammars_stay_far_below_the_limits);
    RUN(test_an_ambiguous_grammar_fails_its_step_with_a_reason);
    RUN(test_an_ambiguous_grammar_fails_its_mask_with_a_reason);
    return test_summary();
}
