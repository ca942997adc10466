/*
 * test_grammar_pyvalue.c - Python's reading of parameter text for the tool
 * parsers (src/grammar/gram_pyvalue.c): ast.literal_eval, json.loads,
 * int() and vLLM's float-or-int, each written back as json.dumps(...,
 * ensure_ascii=False) writes it. The expected texts were produced by
 * CPython 3.11 itself (json.dumps(ast.literal_eval(s), ensure_ascii=False,
 * allow_nan=False) and so on; NULL where Python raises), so these are
 * Python's answers, not this module's.
 */
#include <string.h>

#include "grammar/gram_internal.h"
#include "test_util.h"

enum { PY_LIT, PY_JSON, PY_INT, PY_NUM };

static const struct {
    int kind;
    const char *in, *out; /* out NULL: Python raises (the text is not such a value) */
} VECTORS[] = {
    {PY_LIT, "1", "1"},
    {PY_LIT, "-2", "-2"},
    {PY_LIT, "+3", "3"},
    {PY_LIT, "- 4", "-4"},
    {PY_LIT, "007", NULL},
    {PY_LIT, "000", "0"},
    {PY_LIT, "0x1F", "31"},
    {PY_LIT, "0o17", "15"},
    {PY_LIT, "0b101", "5"},
    {PY_LIT, "1_000", "1000"},
    {PY_LIT, "1__0", NULL},
    {PY_LIT, "1.5", "1.5"},
    {PY_LIT, ".5", "0.5"},
    {PY_LIT, "5.", "5.0"},
    {PY_LIT, "1e5", "100000.0"},
    {PY_LIT, "1E-5", "1e-05"},
    {PY_LIT, "2.50", "2.5"},
    {PY_LIT, "1e16", "1e+16"},
    {PY_LIT, "1e15", "1000000000000000.0"},
    {PY_LIT, "123456789.123", "123456789.123"},
    {PY_LIT, "0.1", "0.1"},
    {PY_LIT, "1e400", NULL},
    {PY_LIT, "1j", NULL},
    {PY_LIT, "True", "true"},
    {PY_LIT, "False", "false"},
    {PY_LIT, "None", "null"},
    {PY_LIT, "true", NULL},
    {PY_LIT, "'a'", "\"a\""},
    {PY_LIT, "\"b\"", "\"b\""},
    {PY_LIT, "'''x\"y'''", "\"x\\\"y\""},
    {PY_LIT, "r\"\\d\"", "\"\\\\d\""},
    {PY_LIT, "u'\\u00e9'", "\"\303\251\""},
    {PY_LIT, "b'x'", NULL},
    {PY_LIT, "f'x'", NULL},
    {PY_LIT, "'a' 'b'", "\"ab\""},
    {PY_LIT, "'\\x41\\101\\n'", "\"AA\\n\""},
    {PY_LIT, "'\\q'", "\"\\\\q\""},
    {PY_LIT, "'\\N{DASH}'", NULL},
    {PY_LIT, "[1, 2,]", "[1, 2]"},
    {PY_LIT, "(1,)", "[1]"},
    {PY_LIT, "(1)", "1"},
    {PY_LIT, "()", "[]"},
    {PY_LIT, "{}", "{}"},
    {PY_LIT, "{'a': 1, 'a': 2, 'b': 3}", "{\"a\": 2, \"b\": 3}"},
    {PY_LIT, "{2: 'x', True: 'y', None: 0, 1.5: 2}", "{\"2\": \"x\", \"true\": \"y\", \"null\": 0, \"1.5\": 2}"},
    {PY_LIT, "{1, 2}", NULL},
    {PY_LIT, "[[[]]]", "[[[]]]"},
    {PY_LIT, "{'k': (1, None)}", "{\"k\": [1, null]}"},
    {PY_LIT, "  [1 ,\n 2]  ", "[1, 2]"},
    {PY_LIT, "'tab\\there'", "\"tab\\there\""},
    {PY_LIT, "'\\x7f\\x1f'", "\"\177\\u001f\""},
    {PY_LIT, "abc", NULL},
    {PY_LIT, "1 2", NULL},
    {PY_LIT, "[1", NULL},
    {PY_LIT, "-'a'", NULL},
    {PY_JSON, "1", "1"},
    {PY_JSON, "-0", "0"},
    {PY_JSON, "-0.0", "-0.0"},
    {PY_JSON, "1.0", "1.0"},
    {PY_JSON, "1e5", "100000.0"},
    {PY_JSON, "01", NULL},
    {PY_JSON, "1.", NULL},
    {PY_JSON, ".5", NULL},
    {PY_JSON, "\"a\\u00e9\\ud83d\\ude00\"", "\"a\303\251\360\237\230\200\""},
    {PY_JSON, "\"\\/\"", "\"/\""},
    {PY_JSON, "{\"a\": 1, \"a\": 2}", "{\"a\": 2}"},
    {PY_JSON, "[1, 2,]", NULL},
    {PY_JSON, "NaN", NULL},
    {PY_JSON, "Infinity", NULL},
    {PY_JSON, "true", "true"},
    {PY_JSON, "null", "null"},
    {PY_JSON, "{\"a\": [1, {\"b\": null}]}", "{\"a\": [1, {\"b\": null}]}"},
    {PY_JSON, "\"tab\there\"", NULL},
    {PY_JSON, " [ 1 ] ", "[1]"},
    {PY_JSON, "{1: 2}", NULL},
    {PY_JSON, "'a'", NULL},
    {PY_JSON, "123456789012345678901234567890", "123456789012345678901234567890"},
    {PY_JSON, "1E+2", "100.0"},
    {PY_INT, "12", "12"},
    {PY_INT, " -7 ", "-7"},
    {PY_INT, "+0", "0"},
    {PY_INT, "1_000", "1000"},
    {PY_INT, "1__0", NULL},
    {PY_INT, "_1", NULL},
    {PY_INT, "1_", NULL},
    {PY_INT, "0x10", NULL},
    {PY_INT, "12.0", NULL},
    {PY_INT, "", NULL},
    {PY_INT, "-", NULL},
    {PY_INT, "007", "7"},
    {PY_NUM, "1.5", "1.5"},
    {PY_NUM, "2.0", "2"},
    {PY_NUM, " -3 ", "-3"},
    {PY_NUM, "1e3", "1000"},
    {PY_NUM, "1_0.5", "10.5"},
    {PY_NUM, "inf", NULL},
    {PY_NUM, "nan", NULL},
    {PY_NUM, "1e400", NULL},
    {PY_NUM, ".", NULL},
    {PY_NUM, "1.2.3", NULL},
    {PY_NUM, "0.1", "0.1"},
    {PY_NUM, "-0.0", "0"},
    {PY_NUM, "1e-7", "1e-07"},
    {PY_NUM, "12345678901234567890", "12345678901234567168"},
    {PY_NUM, "abc", NULL},
    {PY_NUM, "1e", NULL},
};

static void test_python_reads_as_cpython(void) {
    for (size_t i = 0; i < sizeof VECTORS / sizeof VECTORS[0]; i++) {
        gram_text out = {0};
        gram_text_put(&out, "~", 1); /* what came before stays */
        const char *in = VECTORS[i].in;
        size_t n = strlen(in);
        int rc = VECTORS[i].kind == PY_LIT    ? gram_py_literal(in, n, &out)
                 : VECTORS[i].kind == PY_JSON ? gram_py_json(in, n, &out)
                 : VECTORS[i].kind == PY_INT  ? gram_py_int(in, n, &out)
                                              : gram_py_number(in, n, &out);
        if (!VECTORS[i].out) {
            CHECK_MSG(rc != 0 && out.n == 1, "#%zu %s: read as %s, Python refuses it", i, in, out.p + 1);
        } else {
            CHECK_MSG(rc == 0 && strcmp(out.p + 1, VECTORS[i].out) == 0, "#%zu %s: got %s, Python writes %s", i, in,
                      rc == 0 ? out.p + 1 : "(refused)", VECTORS[i].out);
        }
        gram_text_free(&out);
    }
}

/* Untrusted nesting is bounded: 64 levels read, 65 refused. */
static void test_nesting_is_bounded(void) {
    char deep[200];
    for (int levels = 64; levels <= 65; levels++) {
        int w = 0;
        for (int i = 0; i < levels; i++) deep[w++] = '[';
        for (int i = 0; i < levels; i++) deep[w++] = ']';
        gram_text out = {0};
        CHECK_EQ_INT(gram_py_literal(deep, (size_t)w, &out) == 0, levels == 64);
        CHECK_EQ_INT(gram_py_json(deep, (size_t)w, &out) == 0, levels == 64);
        gram_text_free(&out);
    }
}

static void test_json_string_as_python_writes_it(void) {
    gram_text out = {0};
    gram_py_json_string(&out, "a\"b\\c\n\t\x01\x7f\xc3\xa9/", 12);
    CHECK_MSG(strcmp(out.p, "\"a\\\"b\\\\c\\n\\t\\u0001\x7f\xc3\xa9/\"") == 0, "%s", out.p);
    gram_text_free(&out);
}

int main(void) {
    RUN(test_python_reads_as_cpython);
    RUN(test_nesting_is_bounded);
    RUN(test_json_string_as_python_writes_it);
    return test_summary();
}
