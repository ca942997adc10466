/*
 * test_grammar.c - the grammar engine's core (src/grammar/): GBNF grammars
 * written here as fixtures, regexes (checked against PCRE2), choices, the
 * matcher (rollback, end tokens, forced bytes), and the token mask against
 * token-by-token acceptance on real vocabularies, SentencePiece byte
 * fallback and UTF-8 characters split over tokens.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gram_test.h"
#include "test_util.h"

/* A JSON grammar in GBNF, written for these tests. member's leading ws and
 * object's ws overlap on purpose: the matcher must carry both parses. */
static const char JSON_GBNF[] =
    "# JSON, as a test fixture\n"
    "root    ::= value\n"
    "value   ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
    "object  ::= \"{\" ws ( member ( \",\" member )* )? \"}\"\n"
    "member  ::= ws string ws \":\" ws value ws\n"
    "array   ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string  ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "number  ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws      ::= [ \\t\\n]*\n";

/* Arithmetic with precedence, recursion through parentheses. */
static const char ARITH_GBNF[] =
    "root   ::= expr\n"
    "expr   ::= term (ws [-+] ws term)*\n"
    "term   ::= factor (ws [*/] ws factor)*\n"
    "factor ::= number | \"(\" ws expr ws \")\" | \"-\" factor\n"
    "number ::= [0-9]+ (\".\" [0-9]+)?\n"
    "ws     ::= \" \"?\n";

/* A grammar in the layout of llama.cpp's grammar files: bodies over several
 * lines inside parentheses (outside them a newline ends the rule), comments
 * after elements, a rule continued after '|', a right-recursive
 * whitespace rule. */
static const char RECIPE_GBNF[] =
    "# a recipe card\n"
    "root ::= (\n"
    "  \"Title: \" line\n"
    "  \"Serves: \" [1-9] [0-9]? \"\\n\"\n"
    "  (\n"
    "    \"- \" qty ws unit? ws line   # one ingredient per line\n"
    "  )+\n"
    "  step{1,3}\n"
    ")\n"
    "\n"
    "line ::= [^\\n\\x00-\\x1f]+ \"\\n\"\n"
    "qty  ::= [0-9]+ (\"/\" [1-9])? |\n"
    "         \"a pinch of\"\n"
    "unit ::= \"g\" | \"ml\" | \"cup\" \"s\"?\n"
    "step ::= [1-9] \". \" line\n"
    "ws   ::= ([ \\t] ws)?\n";

#define ACCEPTS(g, s) gt_accepts(g, s, strlen(s))

static void test_gbnf_json_fixture_accepts_json_and_rejects_the_rest(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_grammar *g = gt_compile(v, GRAM_GBNF, JSON_GBNF);
    CHECK(ACCEPTS(g, "{\"a\": [1, 2.5e3, \"x\\u00e9\"], \"b\": {}}"));
    CHECK(ACCEPTS(g, "{ \"k\" : null }"));
    CHECK(ACCEPTS(g, "[true,false,-0.5E-2]"));
    CHECK(ACCEPTS(g, "\"caf\xc3\xa9\""));
    CHECK(!ACCEPTS(g, "{\"a\" 1}"));
    CHECK(!ACCEPTS(g, "[1,]"));
    CHECK(!ACCEPTS(g, "01"));
    CHECK(!ACCEPTS(g, "\"a\nb\""));
    CHECK(!ACCEPTS(g, "{\"a\": 1"));
    CHECK(gt_prefix_ok(g, "{\"a\": 1", 7));
    gram_grammar_free(g);
    gram_vocab_free(v);
}

static void test_gbnf_arithmetic_fixture_nests_through_parentheses(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_grammar *g = gt_compile(v, GRAM_GBNF, ARITH_GBNF);
    CHECK(ACCEPTS(g, "1+2*(3-4)/5"));
    CHECK(ACCEPTS(g, "-(-2.5) * ((7))"));
    CHECK(ACCEPTS(g, "((((((((1))))))))"));
    CHECK(!ACCEPTS(g, "1+"));
    CHECK(!ACCEPTS(g, "(1"));
    CHECK(!ACCEPTS(g, "1 + + 2"));
    CHECK(!ACCEPTS(g, "1.+2"));
    gram_grammar_free(g);
    gram_vocab_free(v);
}

static void test_gbnf_file_layout_with_multiline_rules(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_grammar *g = gt_compile(v, GRAM_GBNF, RECIPE_GBNF);
    CHECK(ACCEPTS(g, "Title: Pancakes\nServes: 4\n- 200 g flour\n- 1/2 cup  milk\n- a pinch of salt\n1. Mix.\n2. Fry.\n"));
    CHECK(ACCEPTS(g, "Title: Tea\nServes: 12\n- 1 \t cups water\n1. Boil \xe2\x80\x94 then steep.\n"));
    CHECK(!ACCEPTS(g, "Title: Tea\nServes: 0\n- 1 cup water\n1. Boil.\n"));          /* [1-9] */
    CHECK(!ACCEPTS(g, "Title: Tea\nServes: 1\n1. Boil.\n"));                           /* no ingredient */
    CHECK(!ACCEPTS(g, "Title: Tea\nServes: 1\n- 1 cup x\n1. a\n2. b\n3. c\n4. d\n")); /* step{1,3} */
    gram_stats st;
    gram_grammar_stats(g, &st);
    CHECK(st.n_rules >= 2); /* ws is right-recursive: it stays a rule */
    gram_grammar_free(g);
    gram_vocab_free(v);
}

static void test_gbnf_syntax_repetitions_classes_escapes_and_comments(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    const char *src = "# comment line\n"
                      "root ::= a{2} \"-\" b{1,3} \"-\" c{2,} \"-\" d{,2} \"|\" e # trailing comment\n"
                      "a ::= [\\x41-\\x43]\n"
                      "b ::= [^a-z\\n]\n"
                      "c ::= \"\\u00e9\" | \"\\U0001F600\"\n"
                      "d ::= .\n"
                      "e ::= (\n"
                      "    \"x\" |\n"
                      "    \"\"\n"
                      "  ) \"\\t\"\n";
    gram_grammar *g = gt_compile(v, GRAM_GBNF, src);
    CHECK(ACCEPTS(g, "AB-Z-\xc3\xa9\xc3\xa9-|x\t"));
    CHECK(ACCEPTS(g, "CC-123-\xf0\x9f\x98\x80\xc3\xa9\xc3\xa9-\xe6\x97\xa5\n|\t"));
    CHECK(!ACCEPTS(g, "A-Z-\xc3\xa9\xc3\xa9-|x\t"));       /* a{2} needs two */
    CHECK(!ACCEPTS(g, "AB-1234-\xc3\xa9\xc3\xa9-|x\t"));   /* b{1,3} at most three */
    CHECK(!ACCEPTS(g, "AB-a-\xc3\xa9\xc3\xa9-|x\t"));      /* b excludes a-z */
    CHECK(!ACCEPTS(g, "AB-Z-\xc3\xa9-|x\t"));              /* c{2,} needs two */
    CHECK(!ACCEPTS(g, "AB-Z-\xc3\xa9\xc3\xa9-abc|x\t"));   /* d{,2} at most two */
    gram_grammar_free(g);
    gram_vocab_free(v);
}

/* An inlined rule used twice with different continuations (and once in a
 * loop): each use must continue where it was used. */
static void test_gbnf_rule_used_in_several_places(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_grammar *g = gt_compile(v, GRAM_GBNF, "root ::= ab \"1\" ab \"2\" (ab \",\")* ab\nab ::= \"a\" | \"b\" \"b\"?\n");
    CHECK(ACCEPTS(g, "a1bb2a"));
    CHECK(ACCEPTS(g, "b1a2a,bb,b"));
    CHECK(!ACCEPTS(g, "a1a1a"));
    CHECK(!ACCEPTS(g, "a1a"));
    CHECK(!ACCEPTS(g, "a2a1a"));
    CHECK(!ACCEPTS(g, "a1a2a,"));
    gram_grammar_free(g);
    gram_vocab_free(v);
}

/* Code point classes with boundaries inside UTF-8 lead-byte blocks, checked
 * for every code point of the BMP and a sample beyond: the byte sequences
 * must encode exactly the class. */
static void test_character_classes_match_exactly_their_code_points(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    static const struct {
        const char *gbnf;
        uint32_t ranges[8]; /* lo, hi pairs; 0, 0 ends */
        bool negate;
    } cases[] = {
        {"root ::= [\\u00e9-\\u0151]", {0xE9, 0x151}, false},
        {"root ::= [\\u07fe-\\u0801\\u30a1-\\u30f6]", {0x7FE, 0x801, 0x30A1, 0x30F6}, false},
        {"root ::= [^\\x00-\\x7f\\ud7ff-\\ue001\\U00010000-\\U0001ffff]", {0, 0x7F, 0xD7FF, 0xE001, 0x10000, 0x1FFFF}, true},
        {"root ::= [\\u0fff-\\u1000\\uffc0-\\U00010040]", {0xFFF, 0x1000, 0xFFC0, 0x10040}, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gram_grammar *g = gt_compile(v, GRAM_GBNF, cases[c].gbnf);
        gram_matcher *m = gram_matcher_new(g);
        int wrong = 0;
        for (uint32_t cp = 0; cp <= 0x10FFFF; cp += cp < 0x20000 ? 1 : 97) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            bool in = false;
            for (int k = 0; k < 8 && (cases[c].ranges[k] || cases[c].ranges[k + 1]); k += 2)
                in |= cp >= cases[c].ranges[k] && cp <= cases[c].ranges[k + 1];
            if (cases[c].negate) in = !in && !(cp >= 0xD800 && cp <= 0xDFFF);
            unsigned char b[4];
            int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (n == 1) b[0] = (unsigned char)cp;
            else if (n == 2) b[0] = (unsigned char)(0xC0 | cp >> 6), b[1] = (unsigned char)(0x80 | (cp & 0x3F));
            else if (n == 3)
                b[0] = (unsigned char)(0xE0 | cp >> 12), b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)),
                b[2] = (unsigned char)(0x80 | (cp & 0x3F));
            else
                b[0] = (unsigned char)(0xF0 | cp >> 18), b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F)),
                b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), b[3] = (unsigned char)(0x80 | (cp & 0x3F));
            bool got = gram_matcher_accept_bytes(m, (const char *)b, (size_t)n) && gram_matcher_is_accepting(m);
            gram_matcher_reset(m);
            if (got != in && wrong++ < 3) fprintf(stderr, "  %s: U+%04X %s\n", cases[c].gbnf, cp, in ? "rejected" : "accepted");
        }
        CHECK_EQ_INT(wrong, 0);
        gram_matcher_free(m);
        gram_grammar_free(g);
    }
    gram_vocab_free(v);
}

static void test_gbnf_errors_name_the_line_and_what_is_wrong(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    const char *e;
    e = gt_compile_error(v, GRAM_GBNF, "root ::= a\n\nb ::= \"x\"\nroot2 ::= undefinedthing\n");
    CHECK_CONTAINS(e, "'a'");
    CHECK_CONTAINS(e, "line 1");
    e = gt_compile_error(v, GRAM_GBNF, "root ::= \"x\"\nfoo ::= \"abc\n");
    CHECK_CONTAINS(e, "line 2");
    CHECK_CONTAINS(e, "unterminated");
    e = gt_compile_error(v, GRAM_GBNF, "start ::= \"x\"\n");
    CHECK_CONTAINS(e, "root");
    e = gt_compile_error(v, GRAM_GBNF, "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n");
    CHECK_CONTAINS(e, "left recursion");
    CHECK_CONTAINS(e, "expr");
    e = gt_compile_error(v, GRAM_GBNF, "root ::= <think> \"x\"\n");
    CHECK_CONTAINS(e, "token references");
    e = gt_compile_error(v, GRAM_GBNF, "root ::= \"\\q\"\n");
    CHECK_CONTAINS(e, "unknown escape");
    CHECK_CONTAINS(e, "column 11");
    e = gt_compile_error(v, GRAM_GBNF, "root ::= \"a\"\nroot ::= \"b\"\n");
    CHECK_CONTAINS(e, "defined twice");
    e = gt_compile_error(v, GRAM_GBNF, "root ::= \"a\" loop\nloop ::= \"b\" loop\n");
    CHECK_CONTAINS(e, "matches no string");
    e = gt_compile_error(v, GRAM_GBNF, "root ::= [a-z]{3,1}\n");
    CHECK_CONTAINS(e, "smaller");
    gram_vocab_free(v);
}

/* ---- regex ---- */

typedef struct re_case {
    const char *re;
    const char *yes[4];
    const char *no[4];
} re_case;

static const re_case RE_CASES[] = {
    {"a|b+c", {"a", "bc", "bbbc"}, {"", "ab", "c"}},
    {"[0-9]{3}-[a-z]{2,4}", {"123-ab", "000-abcd"}, {"12-ab", "123-abcde", "123-a"}},
    {"\\d+\\.\\d*", {"1.", "12.34"}, {".5", "1"}},
    {"(foo|bar)?baz", {"baz", "foobaz", "barbaz"}, {"fooba", "foobarbaz"}},
    {"^x\\sy$", {"x y", "x\ty", "x\xc2\xa0y"}, {"xy", "x  y"}},
    {"[^abc]", {"d", "\xc3\xa9", "\n"}, {"a", "", "dd"}},
    {"\\u00e9|\\x41|\\u{1F600}", {"\xc3\xa9", "A", "\xf0\x9f\x98\x80"}, {"e", "a"}},
    {"a{2,}", {"aa", "aaaa"}, {"a", ""}},
    {"[\\-\\]x]+", {"-]x", "x"}, {"", "y"}},
    {".", {"\xc3\xa9", "x"}, {"\n", "\r", ""}},
    {"(?:ab)+c*?", {"ab", "ababcc"}, {"aba", "c"}},
    {"[\\w.-]+@[a-z]+\\.com", {"a.b-c@x.com"}, {"@x.com", "a@x.org"}},
    {"\\(\\d{3}\\) \\d{3}-\\d{4}", {"(555) 123-4567"}, {"555 123-4567"}},
    {"(?<year>\\d{4})-\\d\\d", {"2024-01"}, {"24-01"}},
};

static void test_regex_cases_match_whole_strings(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    for (size_t i = 0; i < sizeof RE_CASES / sizeof RE_CASES[0]; i++) {
        const re_case *c = &RE_CASES[i];
        gram_grammar *g = gt_compile(v, GRAM_REGEX, c->re);
        for (int k = 0; k < 4 && c->yes[k]; k++) CHECK_MSG(ACCEPTS(g, c->yes[k]), "/%s/ should match \"%s\"", c->re, c->yes[k]);
        for (int k = 0; k < 4 && c->no[k]; k++) CHECK_MSG(!ACCEPTS(g, c->no[k]), "/%s/ should not match \"%s\"", c->re, c->no[k]);
        gram_grammar_free(g);
    }
    gram_vocab_free(v);
}

static void test_regex_errors_give_the_offset(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    static const struct {
        const char *re, *want;
    } bad[] = {{"a(?=b)", "look-around"}, {"(a)\\1", "back-references"}, {"\\bfoo", "word boundaries"},
               {"a**", "nothing to repeat"}, {"(ab", "unclosed group"}, {"ab)", "unmatched ')'"},
               {"[a-", "unterminated"}, {"\\p{L}", "property"}, {"x{2,1}", "out of order"},
               {"a^b", "'^'"}, {"a$b", "'$'"}, {"(?i)a", "flags"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *e = gt_compile_error(v, GRAM_REGEX, bad[i].re);
        CHECK_MSG(e != NULL, "/%s/ should be refused", bad[i].re);
        CHECK_CONTAINS(e, bad[i].want);
        CHECK_CONTAINS(e, "offset");
    }
    gram_vocab_free(v);
}

/* Strings generated under the mask must fully match the same regex under
 * PCRE2 (an independent engine). */
static void test_regex_generated_strings_match_under_pcre2(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    static const char *const res[] = {"[a-f]{2,5}(x|yz)*[0-9]?", "(\\d{1,3}\\.){3}\\d{1,3}", "[^\\x00-\\x7f]{1,4}",
                                      "(a|ab|abc)(c|bc)?d", "[A-Z][a-z]*( [A-Z][a-z]*){0,3}", "\\w{3}-\\d{2,}"};
    for (size_t i = 0; i < sizeof res / sizeof res[0]; i++) {
        char anchored[256];
        snprintf(anchored, sizeof anchored, "^(?:%s)$", res[i]);
        int code;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)anchored, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &code, &off, NULL);
        REQUIRE(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        gram_grammar *g = gt_compile(v, GRAM_REGEX, res[i]);
        for (uint64_t seed = 1; seed <= 12; seed++) {
            size_t len;
            char *s = gt_generate(g, seed * 31 + i, 200, 7, &len);
            int rc = pcre2_match(re, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
            CHECK_MSG(rc >= 0, "/%s/ generated \"%s\", which PCRE2 does not match", res[i], s);
            free(s);
        }
        gram_grammar_free(g);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
    }
    gram_vocab_free(v);
}

static void test_choice_allows_exactly_the_listed_strings(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_grammar *g = gt_compile(v, GRAM_CHOICE, "[\"yes\", \"no\", \"maybe so\", \"caf\\u00e9\"]");
    CHECK(ACCEPTS(g, "yes"));
    CHECK(ACCEPTS(g, "maybe so"));
    CHECK(ACCEPTS(g, "caf\xc3\xa9"));
    CHECK(!ACCEPTS(g, "ye"));
    CHECK(!ACCEPTS(g, "yes "));
    CHECK(!ACCEPTS(g, "maybe"));
    gram_grammar_free(g);
    CHECK_CONTAINS(gt_compile_error(v, GRAM_CHOICE, "[]"), "non-empty");
    CHECK_CONTAINS(gt_compile_error(v, GRAM_CHOICE, "[\"a\", 3]"), "element 1");
    gram_vocab_free(v);
}

/* ---- the matcher ---- */

static bool bit(const uint64_t *b, int32_t i) { return b[i >> 6] >> (i & 63) & 1; }

static void test_end_token_is_allowed_only_when_the_text_is_complete(void) {
    const char *extra[] = {"ab", "abc"};
    gram_vocab *v = gt_byte_vocab(extra, 2);
    int32_t end = gram_vocab_size(v) - 1, ab = 256, abc = 257;
    gram_grammar *g = gt_compile(v, GRAM_REGEX, "ab(cd)?");
    gram_matcher *m = gram_matcher_new(g);
    uint64_t bits[8];
    gram_matcher_fill_mask(m, bits);
    CHECK(!bit(bits, end));
    CHECK(bit(bits, 'a') && bit(bits, ab) && bit(bits, abc) && !bit(bits, 'b'));
    CHECK(!gram_matcher_accept_token(m, end));
    CHECK(gram_matcher_accept_token(m, ab));
    gram_matcher_fill_mask(m, bits);
    CHECK(bit(bits, end) && bit(bits, 'c') && !bit(bits, 'd'));
    CHECK(gram_matcher_is_accepting(m) && !gram_matcher_is_terminated(m));
    CHECK(gram_matcher_accept_token(m, 'c'));
    gram_matcher_fill_mask(m, bits);
    CHECK(!bit(bits, end) && bit(bits, 'd'));
    CHECK(gram_matcher_accept_token(m, 'd'));
    CHECK(gram_matcher_is_terminated(m));
    gram_matcher_fill_mask(m, bits);
    CHECK(bit(bits, end));
    for (int i = 0; i < end; i++) CHECK(!bit(bits, i));
    CHECK(gram_matcher_accept_token(m, end));
    CHECK(!gram_matcher_accept_token(m, 'a'));
    gram_matcher_free(m);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

static void test_rollback_restores_the_exact_masks(void) {
    const gram_vocab *v = gt_vocab("qwen3");
    gram_grammar *g = gt_compile(v, GRAM_JSON_VALUE, NULL);
    gram_matcher *m = gram_matcher_new(g);
    size_t words = gram_mask_words(v);
    uint64_t *masks = malloc(8 * words * sizeof *masks), *now = malloc(words * sizeof *now);
    const char *pieces[] = {"{\"", "name", "\":", " [", "1", ",", " \""};
    int32_t ids[7];
    for (int i = 0; i < 7; i++) {
        gram_matcher_fill_mask(m, masks + (size_t)i * words);
        /* the token whose bytes are exactly the piece */
        ids[i] = -1;
        for (int32_t id = 0; id < gram_vocab_size(v) && ids[i] < 0; id++) {
            size_t l;
            const char *b = gram_vocab_token(v, id, &l);
            if (b && l == strlen(pieces[i]) && memcmp(b, pieces[i], l) == 0) ids[i] = id;
        }
        REQUIRE_MSG(ids[i] >= 0, "no token \"%s\"", pieces[i]);
        REQUIRE(bit(masks + (size_t)i * words, ids[i]));
        REQUIRE(gram_matcher_accept_token(m, ids[i]));
    }
    gram_matcher_fill_mask(m, masks + 7 * words);
    CHECK_EQ_INT(gram_matcher_history(m), 7);
    /* roll back three (a rejected draft), then two more */
    CHECK_EQ_INT(gram_matcher_rollback(m, 3), 3);
    gram_matcher_fill_mask(m, now);
    CHECK(memcmp(now, masks + 4 * words, words * sizeof *now) == 0);
    CHECK_EQ_INT(gram_matcher_rollback(m, 2), 2);
    gram_matcher_fill_mask(m, now);
    CHECK(memcmp(now, masks + 2 * words, words * sizeof *now) == 0);
    /* forward again along the same path */
    for (int i = 2; i < 7; i++) CHECK(gram_matcher_accept_token(m, ids[i]));
    gram_matcher_fill_mask(m, now);
    CHECK(memcmp(now, masks + 7 * words, words * sizeof *now) == 0);
    CHECK_EQ_INT(gram_matcher_rollback(m, 100), 7);
    gram_matcher_fill_mask(m, now);
    CHECK(memcmp(now, masks, words * sizeof *now) == 0);
    free(masks);
    free(now);
    gram_matcher_free(m);
    gram_grammar_free(g);
}

static void test_a_rejected_token_leaves_the_state_unchanged(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_grammar *g = gt_compile(v, GRAM_REGEX, "x[0-9]+");
    gram_matcher *m = gram_matcher_new(g);
    CHECK(gram_matcher_accept_token(m, 'x'));
    CHECK(!gram_matcher_accept_token(m, 'y'));
    CHECK_EQ_INT(gram_matcher_history(m), 1);
    CHECK(gram_matcher_accept_token(m, '7'));
    CHECK(gram_matcher_is_accepting(m));
    gram_matcher_free(m);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

static void test_forced_bytes_and_bytes_to_end(void) {
    gram_vocab *v = gt_byte_vocab(NULL, 0);
    gram_grammar *g = gt_compile(v, GRAM_JSON_SCHEMA,
                                 "{\"type\":\"object\",\"properties\":{\"temperature\":{\"type\":\"integer\"}},"
                                 "\"required\":[\"temperature\"]}");
    gram_matcher *m = gram_matcher_new(g);
    char buf[64];
    size_t n = gram_matcher_forced_bytes(m, buf, sizeof buf);
    CHECK(n == 1 && buf[0] == '{');
    CHECK_EQ_INT(gram_matcher_bytes_to_end(m), (int)strlen("{\"temperature\":0}"));
    CHECK(gram_matcher_accept_bytes(m, "{\"te", 4));
    n = gram_matcher_forced_bytes(m, buf, sizeof buf);
    CHECK(n == strlen("mperature\"") && memcmp(buf, "mperature\"", n) == 0);
    CHECK_EQ_INT(gram_matcher_history(m), 1); /* forced_bytes does not advance */
    gram_matcher_free(m);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

/* The mask against accepting every token on its own, along random paths,
 * for grammars with recursion, ambiguity and shared rules. */
static void test_masks_agree_with_token_by_token_acceptance(void) {
    static const char *const names[] = {"qwen3", "llama3", "mistral", "stories"};
    for (int t = 0; t < 4; t++) {
        const gram_vocab *v = gt_vocab(names[t]);
        gram_grammar *gs[3] = {gt_compile(v, GRAM_JSON_VALUE, NULL), gt_compile(v, GRAM_GBNF, JSON_GBNF),
                               gt_compile(v, GRAM_GBNF, ARITH_GBNF)};
        for (int k = 0; k < 3; k++) {
            for (uint64_t seed = 1; seed <= 3; seed++) {
                size_t len;
                char *s = gt_generate(gs[k], seed + 100 * (uint64_t)k, 300, 5, &len);
                CHECK(gt_accepts(gs[k], s, len));
                free(s);
            }
            gram_grammar_free(gs[k]);
        }
    }
}

/* A vocabulary of single bytes and tokens that run across the end of a
 * rule (a string's closing quote and the punctuation after it, a number and
 * the comma after it), sharing prefixes: the mask's uncertain tokens and
 * their prefix-sharing walk, checked against every token at every step. */
static void test_masks_on_tokens_that_cross_rule_ends(void) {
    static const char *const extra[] = {
        "\"}", "\"},", "\"}]", "\"}}", "\"],", "\"]", "\",", "\", \"", "\":", "\": \"", "\":\"", "\": {", "\":[",
        "1,", "1}", "1]", "12,", "0}", "0]}", "5)", "5)*", "2+", "e}", "e,", "l}", "l]", "ll,", "rue}", "alse]",
        "}]", "]}", "},{", "}, {", "],[", "}}", "]]", ",\"", ", \"", "{\"", "[{", "[[", "[\"", "\"a", "\"ab",
        "a\"", "a\",", "a\"}", "ab\":", "\\\"", "\\\"}", "))", ")+", "*(", "(1", "((", "1.5,", "-1}", "null}",
        "null,", "true,", "{}", "[]", "{},", "[],", " \"", " {", " [", " 1", "\n ", "\n  \"", "\t\"",
        /* longer than 16 bytes: sorted per state by the long-token walk */
        "\"}, {\"a\": \"bbbbbbbb", "\"}, {\"a\": \"bbbbbbbbb\"}", "1, 2, 3, 4, 5, 6, 7]", "1, 2, 3, 4, 5, 6, 7],",
        "\"xxxxxxxxxxxxxxxxx\"}", "\"xxxxxxxxxxxxxxxxx\",", "{\"a\": [1, 2], \"b\": \"c\"}", "{\"a\": [1, 2], \"b\": \"c\"}]",
        "))))))))))))))))))", ")))))))))))))))))+", "+1+2+3+4+5+6+7+8+9", "(((((((((((((((((1", "\"aaaaaaaaaaaaaaaaaaaa",
        "nullnullnullnullnull", "null, null, null, null]", "\"xxxxxxxxxxxxxxxxx\"!", "\"xxxxxxxxxxxxxxxxx\"A", "\"xxxxxxxxxxxxxxxxx\"}}",
        "\"xxxxxxxxxxxxxxxxx\"]}",
    };
    gram_vocab *v = gt_byte_vocab(extra, (int)(sizeof extra / sizeof extra[0]));
    gram_grammar *gs[4] = {gt_compile(v, GRAM_JSON_VALUE, NULL), gt_compile(v, GRAM_GBNF, JSON_GBNF),
                           gt_compile(v, GRAM_GBNF, ARITH_GBNF),
                           gt_compile(v, GRAM_JSON_SCHEMA,
                                      "{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}, "
                                      "\"k\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/n\"}}}, "
                                      "\"required\": [\"a\", \"k\"]}}, \"$ref\": \"#/$defs/n\"}")};
    /* nested places, where tokens that close several rules at once fit */
    static const char *const prefixes[] = {"{\"k\":{\"j\":", "{\"k\": [", "[[", "[{\"a\": [1, {\"b\":", "{\"a\":\"x"};
    uint64_t bits[8], rng = 1;
    for (int k = 0; k < 2; k++)
        for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++) {
            gram_matcher *m = gram_matcher_new(gs[k]);
            REQUIRE(gram_matcher_accept_bytes(m, prefixes[p], strlen(prefixes[p])));
            gram_matcher_fill_mask(m, bits);
            CHECK_MSG(gt_check_mask(m, bits, true, &rng) == 0, "after %s", prefixes[p]);
            gram_matcher_free(m);
        }
    for (int k = 0; k < 4; k++) {
        for (uint64_t seed = 1; seed <= 25; seed++) {
            size_t len;
            char *s = gt_generate(gs[k], seed * 7 + (uint64_t)k, 300, 1, &len);
            CHECK(gt_accepts(gs[k], s, len));
            free(s);
        }
        gram_grammar_free(gs[k]);
    }
    gram_vocab_free(v);
}

/* States whose futures differ only after several calls of a rule that may
 * match nothing must not share a classification: after "a" the token "qxy1"
 * fits, after "b" only "qxy2" does (behind three such calls). */
static void test_walk_classes_see_through_empty_calls(void) {
    const char *extra[] = {"qxy1", "qxy2", "q()x"};
    gram_vocab *v = gt_byte_vocab(extra, 3);
    gram_grammar *g =
        gt_compile(v, GRAM_GBNF, "root ::= \"a\" \"q\" n n n \"xy1\" | \"b\" \"q\" n n n \"xy2\"\nn ::= \"\" | \"(\" n \")\"\n");
    gram_matcher *m = gram_matcher_new(g);
    uint64_t bits[5];
    for (int k = 0; k < 2; k++) {
        CHECK(gram_matcher_accept_bytes(m, k ? "b" : "a", 1));
        gram_matcher_fill_mask(m, bits);
        CHECK_EQ_INT(bit(bits, 256), k == 0);
        CHECK_EQ_INT(bit(bits, 257), k == 1);
        CHECK(bit(bits, 258));
        gram_matcher_reset(m);
    }
    for (uint64_t seed = 1; seed <= 10; seed++) {
        size_t len;
        char *s = gt_generate(g, seed, 100, 1, &len);
        free(s);
    }
    gram_matcher_free(m);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

/* stories260K has 512 pieces and <0xNN> byte tokens: a non-ASCII character
 * can only be written byte by byte, and in the middle of one only
 * continuation bytes (and no end token) may follow. */
static void test_byte_fallback_tokens_write_characters_byte_by_byte(void) {
    const gram_vocab *v = gt_vocab("stories");
    gram_grammar *g = gt_compile(v, GRAM_REGEX, "(caf\\u00e9|\\u65e5\\u672c)+");
    int n = gram_vocab_size(v);
    int32_t byte_c3 = -1, byte_a9 = -1;
    for (int32_t id = 0; id < n; id++) {
        size_t l;
        const char *b = gram_vocab_token(v, id, &l);
        if (l == 1 && (unsigned char)b[0] == 0xC3) byte_c3 = id;
        if (l == 1 && (unsigned char)b[0] == 0xA9) byte_a9 = id;
    }
    REQUIRE(byte_c3 >= 0 && byte_a9 >= 0);
    gram_matcher *m = gram_matcher_new(g);
    uint64_t *bits = malloc(gram_mask_words(v) * sizeof *bits);
    CHECK(gram_matcher_accept_bytes(m, "caf", 3));
    gram_matcher_fill_mask(m, bits);
    CHECK(bit(bits, byte_c3));
    CHECK(gram_matcher_accept_token(m, byte_c3));
    gram_matcher_fill_mask(m, bits);
    int allowed = 0;
    for (int32_t id = 0; id < n; id++) allowed += bit(bits, id);
    CHECK_EQ_INT(allowed, 1);
    CHECK(bit(bits, byte_a9));
    CHECK(!gram_matcher_is_accepting(m));
    CHECK(gram_matcher_accept_token(m, byte_a9));
    CHECK(gram_matcher_is_accepting(m));
    for (uint64_t seed = 1; seed <= 5; seed++) {
        size_t len;
        char *s = gt_generate(g, seed, 200, 1, &len);
        CHECK(gt_accepts(g, s, len));
        free(s);
    }
    free(bits);
    gram_matcher_free(m);
    gram_grammar_free(g);
}

/* Byte-level BPE has tokens that hold part of a UTF-8 character (Qwen3's
 * vocabulary has single-byte tokens for every byte): the grammar is over
 * bytes, so a character may be split and the mask follows the split. */
static void test_utf8_character_split_over_byte_level_tokens(void) {
    const gram_vocab *v = gt_vocab("qwen3");
    gram_grammar *g = gt_compile(v, GRAM_REGEX, "\\u65e5\\u672c\\u8a9e!");  /* 日本語! */
    int n = gram_vocab_size(v);
    /* tokens that are a proper prefix of the first character's bytes E6 97 A5 */
    int32_t e6 = -1, e697 = -1;
    for (int32_t id = 0; id < n; id++) {
        size_t l;
        const char *b = gram_vocab_token(v, id, &l);
        if (l == 1 && (unsigned char)b[0] == 0xE6) e6 = id;
        if (l == 2 && (unsigned char)b[0] == 0xE6 && (unsigned char)b[1] == 0x97) e697 = id;
    }
    REQUIRE(e6 >= 0);
    gram_matcher *m = gram_matcher_new(g);
    uint64_t *bits = malloc(gram_mask_words(v) * sizeof *bits);
    gram_matcher_fill_mask(m, bits);
    CHECK(bit(bits, e6));
    if (e697 >= 0) CHECK(bit(bits, e697));
    CHECK(gram_matcher_accept_token(m, e6));
    gram_matcher_fill_mask(m, bits);
    for (int32_t id = 0; id < n; id++) {
        if (!bit(bits, id)) continue;
        size_t l;
        const char *b = gram_vocab_token(v, id, &l);
        /* every allowed token continues E6 with 97 (A5 ...) */
        CHECK_MSG(l >= 1 && (unsigned char)b[0] == 0x97, "token %d allowed after E6", id);
    }
    for (uint64_t seed = 1; seed <= 8; seed++) {
        size_t len;
        char *s = gt_generate(g, seed, 100, 1, &len);
        CHECK(len == 10 && memcmp(s, "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e!", 10) == 0);
        free(s);
    }
    free(bits);
    gram_matcher_free(m);
    gram_grammar_free(g);
}

static void test_vocabulary_leaves_out_special_tokens(void) {
    const gram_vocab *v = gt_vocab("qwen3");
    gram_grammar *g = gt_compile(v, GRAM_JSON_VALUE, NULL);
    gram_matcher *m = gram_matcher_new(g);
    uint64_t *bits = malloc(gram_mask_words(v) * sizeof *bits);
    gram_matcher_fill_mask(m, bits);
    /* <|im_start|> (151644) is a control token: never inside grammar text,
     * even though its text would fit in a JSON string */
    CHECK(gram_matcher_accept_bytes(m, "\"", 1));
    gram_matcher_fill_mask(m, bits);
    CHECK(!bit(bits, 151644));
    CHECK(!gram_matcher_accept_token(m, 151644));
    /* <tool_call> is an added token that is not special: plain text */
    CHECK(bit(bits, 151657));
    free(bits);
    gram_matcher_free(m);
    gram_grammar_free(g);
}

/* Matchers of one grammar on several threads: the grammar's token cache
 * fills under its mutex, and every thread sees the masks a lone matcher sees
 * (compared by a hash of each step's mask along a fixed token path). */
typedef struct replay {
    gram_grammar *g;
    const int32_t *path;
    int n;
    uint64_t hash; /* of every mask along the path */
    bool ok;
} replay;

static void *replay_path(void *arg) {
    replay *r = arg;
    const gram_vocab *v = gram_grammar_vocab(r->g);
    size_t words = gram_mask_words(v);
    uint64_t *bits = malloc(words * sizeof *bits);
    gram_matcher *m = gram_matcher_new(r->g);
    r->ok = bits && m;
    r->hash = 1469598103934665603ULL;
    for (int i = 0; r->ok && i < r->n; i++) {
        gram_matcher_fill_mask(m, bits);
        for (size_t k = 0; k < words; k++) r->hash = (r->hash ^ bits[k]) * 1099511628211ULL;
        r->ok = gram_matcher_accept_token(m, r->path[i]);
    }
    gram_matcher_free(m);
    free(bits);
    return NULL;
}

static void test_matchers_on_several_threads_share_one_grammar(void) {
    const gram_vocab *v = gt_vocab("qwen3");
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\","
                         "\"items\":{\"type\":\"string\",\"maxLength\":30}},\"n\":{\"type\":\"integer\"}},"
                         "\"required\":[\"name\",\"tags\",\"n\"]}";
    /* a path: the tokens of a text that fits, encoded greedily by the matcher's own mask */
    static const char text[] = "{\"name\": \"Ada Lovelace\", \"tags\": [\"math\", \"engines\", \"notes\"], \"n\": 1843}";
    gram_grammar *g0 = gt_compile(v, GRAM_JSON_SCHEMA, schema);
    int32_t path[128];
    int n = 0;
    size_t at = 0, len = strlen(text);
    gram_matcher *m = gram_matcher_new(g0);
    while (at < len && n < 128) {
        /* the longest token that is a prefix of the rest */
        int32_t best = -1;
        size_t best_len = 0;
        for (int32_t id = 0; id < gram_vocab_size(v); id++) {
            size_t l;
            const char *b = gram_vocab_token(v, id, &l);
            if (b && l > best_len && l <= len - at && memcmp(b, text + at, l) == 0) best = id, best_len = l;
        }
        REQUIRE(best >= 0 && gram_matcher_accept_token(m, best));
        path[n++] = best;
        at += best_len;
    }
    gram_matcher_free(m);
    gram_grammar_free(g0);
    /* alone, on a fresh grammar */
    replay alone = {gt_compile(v, GRAM_JSON_SCHEMA, schema), path, n, 0, false};
    replay_path(&alone);
    REQUIRE(alone.ok);
    /* four threads on another fresh grammar (cold cache, filled concurrently) */
    gram_grammar *g = gt_compile(v, GRAM_JSON_SCHEMA, schema);
    replay rs[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        rs[t] = (replay){g, path, n, 0, false};
        pthread_create(&th[t], NULL, replay_path, &rs[t]);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK(rs[t].ok);
        CHECK(rs[t].hash == alone.hash);
    }
    gram_grammar_free(g);
    gram_grammar_free(alone.g);
}

/* The logits row may be longer than the tokenizer (Qwen3: 151936 rows for
 * 151669 tokens): the padding ids are never allowed. */
static void test_padded_vocabulary_never_allows_the_padding(void) {
    gram_vocab *v = NULL;
    pdl_error err;
    REQUIRE(gram_vocab_from_tokenizer(&v, gt_tokenizer("qwen3"), 151936, NULL, 0, &err) == 0);
    CHECK_EQ_INT(gram_vocab_size(v), 151936);
    CHECK_EQ_INT((int)gram_mask_words(v), (151936 + 63) / 64);
    gram_grammar *g = gt_compile(v, GRAM_JSON_VALUE, NULL);
    gram_matcher *m = gram_matcher_new(g);
    uint64_t *bits = malloc(gram_mask_words(v) * sizeof *bits);
    CHECK(gram_matcher_accept_bytes(m, "\"", 1));
    gram_matcher_fill_mask(m, bits);
    int pad_bits = 0;
    for (int32_t id = 151669; id < 151936; id++) pad_bits += bit(bits, id);
    CHECK_EQ_INT(pad_bits, 0);
    CHECK(bit(bits, 151657)); /* <tool_call>, the tokenizer's own, still allowed */
    CHECK(!gram_matcher_accept_token(m, 151700));
    gram_vocab *small = NULL;
    CHECK(gram_vocab_from_tokenizer(&small, gt_tokenizer("qwen3"), 1000, NULL, 0, &err) != 0);
    CHECK_CONTAINS(err.message, "1000 logits");
    free(bits);
    gram_matcher_free(m);
    gram_grammar_free(g);
    gram_vocab_free(v);
}

int main(void) {
    RUN(test_gbnf_json_fixture_accepts_json_and_rejects_the_rest);
    RUN(test_gbnf_arithmetic_fixture_nests_through_parentheses);
    RUN(test_gbnf_file_layout_with_multiline_rules);
    RUN(test_gbnf_syntax_repetitions_classes_escapes_and_comments);
    RUN(test_gbnf_rule_used_in_several_places);
    RUN(test_character_classes_match_exactly_their_code_points);
    RUN(test_gbnf_errors_name_the_line_and_what_is_wrong);
    RUN(test_regex_cases_match_whole_strings);
    RUN(test_regex_errors_give_the_offset);
    RUN(test_regex_generated_strings_match_under_pcre2);
    RUN(test_choice_allows_exactly_the_listed_strings);
    RUN(test_end_token_is_allowed_only_when_the_text_is_complete);
    RUN(test_rollback_restores_the_exact_masks);
    RUN(test_a_rejected_token_leaves_the_state_unchanged);
    RUN(test_forced_bytes_and_bytes_to_end);
    RUN(test_masks_agree_with_token_by_token_acceptance);
    RUN(test_masks_on_tokens_that_cross_rule_ends);
    RUN(test_walk_classes_see_through_empty_calls);
    RUN(test_byte_fallback_tokens_write_characters_byte_by_byte);
    RUN(test_utf8_character_split_over_byte_level_tokens);
    RUN(test_vocabulary_leaves_out_special_tokens);
    RUN(test_padded_vocabulary_never_allows_the_padding);
    RUN(test_matchers_on_several_threads_share_one_grammar);
    return test_summary();
}
