/*
 * test_grammar_schema.c - JSON Schema -> grammar (src/grammar/gram_schema.c,
 * gram_numrange.c): each supported keyword on chosen strings, the error
 * path (keyword and JSON pointer), numeric ranges against plain numeric
 * comparison, and for 26 schemas random generation under the mask with four
 * real tokenizers, every output parsed and checked by the independent
 * validator in tests/support/json_validate.c.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_test.h"
#include "json_validate.h"
#include "test_util.h"

static gram_vocab *bytes_vocab;

static gram_grammar *schema(const char *text) { return gt_compile(bytes_vocab, GRAM_JSON_SCHEMA, text); }
static bool ok(gram_grammar *g, const char *s) { return gt_accepts(g, s, strlen(s)); }

#define YES(g, s) CHECK_MSG(ok(g, s), "should accept %s", s)
#define NO(g, s) CHECK_MSG(!ok(g, s), "should reject %s", s)

static void test_type_keywords(void) {
    gram_grammar *g = schema("{\"type\": \"string\"}");
    YES(g, "\"\"");
    YES(g, "\"a \\\"q\\\" \\u00e9 \\ud83d\\ude00\"");
    NO(g, "\"\\ud83d\""); /* a lone surrogate escape */
    NO(g, "\"a\nb\"");
    NO(g, "1");
    for (int c = 0; c < 0x20; c++) { /* raw control characters are never JSON */
        char s[4] = {'"', (char)c, '"', 0};
        CHECK_MSG(!gt_accepts(g, s, 3), "control character %d accepted in a string", c);
    }
    YES(g, "\"\x7f\"");
    gram_grammar_free(g);
    g = schema("{\"type\": \"integer\"}");
    YES(g, "0");
    YES(g, "-17");
    NO(g, "-0");
    NO(g, "01");
    NO(g, "1.5");
    gram_grammar_free(g);
    g = schema("{\"type\": \"number\"}");
    YES(g, "-0.5e+10");
    YES(g, "3");
    NO(g, ".5");
    gram_grammar_free(g);
    g = schema("{\"type\": \"boolean\"}");
    YES(g, "true");
    YES(g, "false");
    NO(g, "null");
    gram_grammar_free(g);
    g = schema("{\"type\": \"null\"}");
    YES(g, "null");
    NO(g, "\"null\"");
    gram_grammar_free(g);
    g = schema("{\"type\": [\"integer\", \"null\"]}");
    YES(g, "null");
    YES(g, "5");
    NO(g, "\"5\"");
    gram_grammar_free(g);
    g = schema("{\"type\": \"string\", \"nullable\": true}");
    YES(g, "null");
    YES(g, "\"x\"");
    gram_grammar_free(g);
}

static void test_enum_and_const_take_any_json_value(void) {
    gram_grammar *g = schema("{\"enum\": [\"red\", 1, null, true, {\"a\": [1, 2.5]}, \"q\\\"\"]}");
    YES(g, "\"red\"");
    YES(g, "1");
    YES(g, "null");
    YES(g, "true");
    YES(g, "{\"a\":[1,2.5]}");
    YES(g, "\"q\\\"\"");
    NO(g, "\"blue\"");
    NO(g, "2");
    gram_grammar_free(g);
    g = schema("{\"const\": 0.1}");
    YES(g, "0.1");
    NO(g, "0.10000000000000001");
    gram_grammar_free(g);
    g = schema("{\"type\": \"string\", \"enum\": [\"a\", 1]}"); /* type filters the enum */
    YES(g, "\"a\"");
    NO(g, "1");
    gram_grammar_free(g);
}

static void test_object_properties_required_and_additional(void) {
    gram_grammar *g = schema("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, "
                             "\"b\": {\"type\": \"string\"}, \"c\": {\"type\": \"boolean\"}}, \"required\": [\"b\"]}");
    YES(g, "{\"b\":\"x\"}");
    YES(g, "{\"a\": 1, \"b\": \"x\", \"c\": true}");
    YES(g, "{\n  \"a\": 1,\n  \"b\": \"x\"\n}");
    YES(g, "{\"b\":\"x\",\"c\":false}");
    NO(g, "{\"a\": 1}");                /* b is required */
    NO(g, "{\"b\": \"x\", \"a\": 1}");  /* schema order */
    NO(g, "{\"b\": \"x\", \"d\": 1}");  /* no additional properties unless allowed */
    NO(g, "{\"b\": \"x\",}");
    gram_grammar_free(g);
    g = schema("{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}, \"additionalProperties\": true}");
    YES(g, "{\"id\": 1, \"extra\": [1, {\"k\": null}]}");
    YES(g, "{\"x\": 1}");
    NO(g, "{\"id\": 1, \"id\": 2}"); /* an extra key never repeats a listed one */
    gram_grammar_free(g);
    g = schema("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}}, "
               "\"additionalProperties\": {\"type\": \"number\"}}");
    YES(g, "{\"a\": \"s\", \"b\": 2, \"ab\": 3.5}");
    YES(g, "{\"aa\": 1}");
    NO(g, "{\"b\": \"s\"}");
    NO(g, "{\"a\": 1}");
    gram_grammar_free(g);
    g = schema("{\"type\": \"object\"}"); /* no property described: any object */
    YES(g, "{}");
    YES(g, "{\"x\": [1, {\"y\": null}], \"z\": \"w\"}");
    NO(g, "[]");
    gram_grammar_free(g);
        g = schema("{\"type\": \"object\", \"required\": [\"k\"]}"); /* required, not described: any value */
    YES(g, "{\"k\": [true]}");
    NO(g, "{}");
    gram_grammar_free(g);
}

static void test_array_items_counts_and_tuples(void) {
    gram_grammar *g = schema("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 2, \"maxItems\": 3}");
    YES(g, "[1,2]");
    YES(g, "[ 1 , 2 , 3 ]");
    NO(g, "[1]");
    NO(g, "[1,2,3,4]");
    NO(g, "[1,\"2\"]");
    gram_grammar_free(g);
    g = schema("{\"type\": \"array\", \"maxItems\": 0}");
    YES(g, "[]");
    NO(g, "[1]");
    gram_grammar_free(g);
    g = schema("{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"items\": false}");
    YES(g, "[]");
    YES(g, "[\"a\"]");
    YES(g, "[\"a\", 1]");
    NO(g, "[\"a\", 1, 2]");
    NO(g, "[1]");
    gram_grammar_free(g);
    g = schema("{\"type\": \"array\", \"items\": [{\"type\": \"boolean\"}], \"additionalItems\": {\"type\": \"null\"}, \"minItems\": 2}");
    YES(g, "[true, null]");
    YES(g, "[false, null, null]");
    NO(g, "[true]");
    NO(g, "[true, true]");
    gram_grammar_free(g);
}

static void test_string_lengths_count_characters_not_bytes(void) {
    gram_grammar *g = schema("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}");
    YES(g, "\"ab\"");
    YES(g, "\"\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\""); /* three characters, nine bytes */
    YES(g, "\"\\u001f\\n\"");                           /* escapes are one character each */
    NO(g, "\"\\u00e9\"");  /* in a bounded string only control characters are written as \\u escapes */
    NO(g, "\"a\"");
    NO(g, "\"abcd\"");
    gram_grammar_free(g);
}

static void test_pattern_is_written_with_json_escapes(void) {
    gram_grammar *g = schema("{\"type\": \"string\", \"pattern\": \"^[A-Z]{2}-\\\\d{3}$\"}");
    YES(g, "\"AB-123\"");
    NO(g, "\"AB-12\"");
    NO(g, "\"ab-123\"");
    gram_grammar_free(g);
    /* the pattern a"b\c<newline> must come out as a\"b\\c\n inside the JSON string */
    g = schema("{\"type\": \"string\", \"pattern\": \"a\\\"b\\\\\\\\c\\\\n\"}");
    YES(g, "\"a\\\"b\\\\c\\n\"");
    NO(g, "\"a\"b\\c\n\"");
    gram_grammar_free(g);
}

static void test_string_formats(void) {
    gram_grammar *g = schema("{\"type\": \"string\", \"format\": \"date\"}");
    YES(g, "\"2024-02-29\"");
    YES(g, "\"2000-02-29\"");
    YES(g, "\"1999-12-31\"");
    NO(g, "\"2023-02-29\"");
    NO(g, "\"1900-02-29\"");
    NO(g, "\"2024-04-31\"");
    NO(g, "\"2024-13-01\"");
    gram_grammar_free(g);
    g = schema("{\"type\": \"string\", \"format\": \"date-time\"}");
    YES(g, "\"2024-05-06T07:08:09Z\"");
    YES(g, "\"2024-05-06T23:59:59.123+05:30\"");
    NO(g, "\"2024-05-06T24:00:00Z\"");
    NO(g, "\"2024-05-06 07:08:09Z\"");
    gram_grammar_free(g);
    g = schema("{\"type\": \"string\", \"format\": \"uuid\"}");
    YES(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
    NO(g, "\"123e4567e89b-12d3-a456-426614174000\"");
    gram_grammar_free(g);
    g = schema("{\"type\": \"string\", \"format\": \"email\"}");
    YES(g, "\"first.last+tag@example.co.uk\"");
    NO(g, "\"no-at-sign.example.com\"");
    NO(g, "\"a@-bad.com\"");
    NO(g, "\"a..b@example.com\"");
    gram_grammar_free(g);
    g = schema("{\"type\": \"string\", \"format\": \"time\"}");
    YES(g, "\"00:00:00-12:00\"");
    NO(g, "\"00:60:00Z\"");
    gram_grammar_free(g);
}

static void test_combinators_refs_and_inferred_types(void) {
    gram_grammar *g = schema("{\"anyOf\": [{\"type\": \"string\", \"maxLength\": 1}, {\"type\": \"integer\", \"minimum\": 10}]}");
    YES(g, "\"a\"");
    YES(g, "12");
    NO(g, "9");
    NO(g, "\"ab\"");
    gram_grammar_free(g);
    g = schema("{\"oneOf\": [{\"const\": 1}, {\"const\": 2}], \"description\": \"d\"}");
    YES(g, "2");
    NO(g, "3");
    gram_grammar_free(g);
    g = schema("{\"allOf\": [{\"$ref\": \"#/$defs/p\"}, {\"description\": \"only words\"}], "
               "\"$defs\": {\"p\": {\"type\": \"boolean\"}}}");
    YES(g, "true");
    NO(g, "1");
    gram_grammar_free(g);
    g = schema("{\"$defs\": {\"list\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, "
               "\"next\": {\"anyOf\": [{\"$ref\": \"#/$defs/list\"}, {\"type\": \"null\"}]}}, \"required\": [\"v\", \"next\"]}}, "
               "\"$ref\": \"#/$defs/list\"}");
    YES(g, "{\"v\": 1, \"next\": {\"v\": 2, \"next\": {\"v\": 3, \"next\": null}}}");
    NO(g, "{\"v\": 1, \"next\": {\"v\": 2}}");
    gram_grammar_free(g);
    g = schema("{\"type\": \"object\", \"properties\": {\"child\": {\"$ref\": \"#\"}}}"); /* the root itself */
    YES(g, "{\"child\": {\"child\": {}}}");
    gram_grammar_free(g);
    g = schema("{\"properties\": {\"x\": {\"minimum\": 1, \"maximum\": 3}}, \"required\": [\"x\"]}");
    YES(g, "{\"x\": 2.5}");
    NO(g, "{\"x\": 4}");
    NO(g, "[]");
    gram_grammar_free(g);
    g = schema("{\"title\": \"anything\", \"description\": \"no constraint\"}");
    YES(g, "[1, {\"a\": null}]");
    gram_grammar_free(g);
}

/* ---- numeric ranges against numeric comparison ---- */

static void check_int_range(const char *schema_text, long lo, bool has_lo, long hi, bool has_hi) {
    gram_grammar *g = schema(schema_text);
    int wrong = 0;
    for (long x = -1300; x <= 1300; x++) {
        char s[32];
        snprintf(s, sizeof s, "%ld", x);
        bool want = (!has_lo || x >= lo) && (!has_hi || x <= hi);
        if (ok(g, s) != want && wrong++ < 3) fprintf(stderr, "  %s: %s %s\n", schema_text, s, want ? "rejected" : "accepted");
    }
    CHECK_EQ_INT(wrong, 0);
    gram_grammar_free(g);
}

static void test_integer_ranges_match_numeric_comparison(void) {
    check_int_range("{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}", 0, true, 150, true);
    check_int_range("{\"type\":\"integer\",\"minimum\":-1000,\"maximum\":-10}", -1000, true, -10, true);
    check_int_range("{\"type\":\"integer\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":3}", -2, true, 2, true);
    check_int_range("{\"type\":\"integer\",\"minimum\":7}", 7, true, 0, false);
    check_int_range("{\"type\":\"integer\",\"maximum\":-7}", 0, false, -7, true);
    check_int_range("{\"type\":\"integer\",\"minimum\":-99,\"maximum\":1001}", -99, true, 1001, true);
    check_int_range("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":20.5}", 2, true, 20, true);
    check_int_range("{\"type\":\"integer\",\"minimum\":-20.5,\"exclusiveMaximum\":-1.5}", -20, true, -2, true);
    check_int_range("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":100}", 1, true, 100, true);
    check_int_range("{\"type\":\"integer\",\"minimum\":5,\"maximum\":5}", 5, true, 5, true);
    CHECK_CONTAINS(gt_compile_error(bytes_vocab, GRAM_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}"), "above");
    CHECK_CONTAINS(gt_compile_error(bytes_vocab, GRAM_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":1.2,\"maximum\":1.8}"),
                   "no integer");
}

/* Decimals written with up to three fraction digits (and some with more),
 * compared numerically (exactly: values are k/1000). */
static void check_dec_value(gram_grammar *g, const char *schema_text, long k, long lo, int lo_kind, long hi, int hi_kind,
                            int *wrong) {
    long a = labs(k);
    char s[48];
    for (int form = 0; form < 3; form++) {
        if (form == 0) snprintf(s, sizeof s, "%s%ld.%03ld", k < 0 ? "-" : "", a / 1000, a % 1000);
        else if (form == 1) snprintf(s, sizeof s, "%s%ld.%03ld000", k < 0 ? "-" : "", a / 1000, a % 1000);
        else if (a % 1000 == 0) snprintf(s, sizeof s, "%s%ld", k < 0 ? "-" : "", a / 1000);
        else continue;
        bool want = (lo_kind == 0 || (lo_kind == 1 ? k >= lo : k > lo)) && (hi_kind == 0 || (hi_kind == 1 ? k <= hi : k < hi));
        if (ok(g, s) != want && (*wrong)++ < 3) fprintf(stderr, "  %s: %s %s\n", schema_text, s, want ? "rejected" : "accepted");
    }
}

/* Decimals written with three fraction digits (also padded with zeros, and
 * whole ones without a fraction), compared numerically (exactly: values are
 * k/1000): a grid, and every value within 3/1000 of a bound or of zero. */
static void check_dec_range(const char *schema_text, long lo, int lo_kind, long hi, int hi_kind) {
    /* kind: 0 none, 1 inclusive, 2 exclusive; bounds in thousandths */
    gram_grammar *g = schema(schema_text);
    int wrong = 0;
    for (long k = -3200; k <= 3200; k += 7) check_dec_value(g, schema_text, k, lo, lo_kind, hi, hi_kind, &wrong);
    long centers[3] = {lo, hi, 0};
    for (int c = 0; c < 3; c++)
        for (long d = -3; d <= 3; d++) check_dec_value(g, schema_text, centers[c] + d, lo, lo_kind, hi, hi_kind, &wrong);
    CHECK_EQ_INT(wrong, 0);
    gram_grammar_free(g);
}

static void test_number_ranges_match_numeric_comparison(void) {
    check_dec_range("{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":2.25}", -1500, 1, 2250, 1);
    check_dec_range("{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", 0, 2, 1000, 2);
    check_dec_range("{\"type\":\"number\",\"minimum\":0.125}", 125, 1, 0, 0);
    check_dec_range("{\"type\":\"number\",\"exclusiveMaximum\":-0.25}", 0, 0, -250, 2);
    check_dec_range("{\"type\":\"number\",\"minimum\":-3,\"exclusiveMaximum\":-2.999}", -3000, 1, -2999, 2);
    check_dec_range("{\"type\":\"number\",\"minimum\":1.001,\"maximum\":1.002}", 1001, 1, 1002, 1);
    check_dec_range("{\"type\":\"number\",\"exclusiveMinimum\":-2,\"maximum\":0}", -2000, 2, 0, 1);
    gram_grammar *g = schema("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}");
    NO(g, "-0.0"); /* no negative zero when the range starts at 0 */
    NO(g, "1e0");  /* bounded numbers have no exponent */
    NO(g, "00.5");
    YES(g, "0.999999999999");
    gram_grammar_free(g);
}

/* Generated numbers have at most 16 integer and 16 fraction digits (a
 * random-weight model otherwise writes zeros until max_tokens), except the
 * digits a bound itself needs. */
static void test_number_digits_are_capped(void) {
    const char *d16 = "1234567890123456", *d17 = "12345678901234567";
    char buf[128];
    const char *schemas[] = {"{\"type\":\"number\"}", "{\"type\":\"number\",\"minimum\":0}",
                             "{\"type\":\"integer\"}", "{\"type\":\"integer\",\"minimum\":5}"};
    for (int i = 0; i < 4; i++) {
        gram_grammar *g = schema(schemas[i]);
        bool integer = i >= 2;
        YES(g, d16);
        NO(g, d17);
        if (!integer) {
            snprintf(buf, sizeof buf, "0.%s", d16);
            YES(g, buf);
            snprintf(buf, sizeof buf, "0.%s", d17);
            NO(g, buf);
        }
        gram_grammar_free(g);
    }
    gram_grammar *g = schema("{\"type\":\"number\"}");
    YES(g, "1e308");
    NO(g, "1e3080");
    gram_grammar_free(g);
    /* a bound with 20 fraction digits stays reachable, 16 digits past it too */
    g = schema("{\"type\":\"number\",\"minimum\":0.00000000000000000001,\"maximum\":1}");
    YES(g, "0.00000000000000000001");
    NO(g, "0.00000000000000000000");
    YES(g, "0.000000000000000000011234567890123456");
    NO(g, "0.0000000000000000000112345678901234567");
    gram_grammar_free(g);
}

/* ---- errors ---- */

static void test_unsupported_keywords_are_errors_naming_keyword_and_pointer(void) {
    static const struct {
        const char *schema, *want1, *want2;
    } bad[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{\"type\":\"string\"}}}}", "'not'", "#/properties/a/not"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"multipleOf\":3}}", "'multipleOf'", "#/items/multipleOf"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems", "#/uniqueItems"},
        {"{\"type\":\"string\",\"format\":\"hostname\"}", "'hostname'", "#/format"},
        {"{\"$ref\":\"https://example.com/s.json\"}", "same schema", "#/$ref"},
        {"{\"$ref\":\"#/$defs/missing\"}", "does not exist", "#/$ref"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", "more than one", "#/allOf"},
        {"{\"type\":\"string\",\"anyOf\":[{\"maxLength\":3}]}", "'type' next to", "#/type"},
        {"{\"enum\":[\"a\"],\"minLength\":1}", "'minLength' alongside", "#/minLength"},
        {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", "'patternProperties'", "#/patternProperties"},
        {"{\"$defs\":{\"a\":{\"if\":{}}},\"$ref\":\"#/$defs/a\"}", "'if'", "#/$defs/a/if"},
        {"{\"type\":\"strin\"}", "unknown type 'strin'", "#/type"},
        {"{\"type\":\"string\",\"pattern\":\"(?=x)\"}", "look-around", "#/pattern"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "below", "#/maxItems"},
        {"{\"type\":\"object\",\"properties\":{\"a~b/c\":{\"contains\":{}}}}", "'contains'", "#/properties/a~0b~1c/contains"},
        {"{\"type\": \"object\",, }", "invalid JSON", "line 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *e = gt_compile_error(bytes_vocab, GRAM_JSON_SCHEMA, bad[i].schema);
        CHECK_MSG(e != NULL, "%s should be refused", bad[i].schema);
        CHECK_CONTAINS(e, bad[i].want1);
        CHECK_CONTAINS(e, bad[i].want2);
    }
}

static void test_keywords_that_do_not_constrain_are_accepted(void) {
    gram_grammar *g = schema("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"x\",\"title\":\"T\","
                             "\"description\":\"D\",\"examples\":[1],\"default\":1,\"$comment\":\"c\",\"deprecated\":false,"
                             "\"type\":\"integer\",\"readOnly\":true}");
    YES(g, "42");
    gram_grammar_free(g);
}

/* ---- random generation under the mask, checked by the independent validator ---- */

static const char *const SCHEMAS[] = {
    /* 1 */ "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\",\"age\"]}",
    /* 2 */ "{\"type\":\"object\",\"properties\":{\"person\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},"
            "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"
            "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\",\"zip\"]},"
            "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3}},\"required\":[\"name\",\"address\"]}},\"required\":[\"person\"]}",
    /* 3 */ "{\"enum\":[\"red\",1,null,true,{\"a\":[1,2]},2.5,\"\\u65e5\\u672c\"]}",
    /* 4 */ "{\"const\":\"fixed \\\"quoted\\\" \\\\ value\"}",
    /* 5 */ "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5},\"minItems\":2,\"maxItems\":4}",
    /* 6 */ "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"number\"},{\"type\":\"boolean\"}],\"items\":false,\"minItems\":2}",
    /* 7 */ "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":\"integer\",\"exclusiveMinimum\":10}]}",
    /* 8 */ "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"x\"]},"
            "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},\"required\":[\"kind\",\"y\"]}]}",
    /* 9 */ "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},\"children\":{\"type\":\"array\","
            "\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"value\"]}},\"$ref\":\"#/$defs/node\"}",
    /* 10 */ "{\"type\":[\"string\",\"null\"],\"maxLength\":5}",
    /* 11 */ "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},\"dt\":{\"type\":\"string\",\"format\":\"date-time\"},"
             "\"u\":{\"type\":\"string\",\"format\":\"uuid\"},\"e\":{\"type\":\"string\",\"format\":\"email\"},\"t\":{\"type\":\"string\",\"format\":\"time\"}},"
             "\"required\":[\"d\",\"dt\",\"u\",\"e\",\"t\"]}",
    /* 12 */ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":2.25},\"b\":{\"type\":\"number\","
             "\"exclusiveMinimum\":0,\"exclusiveMaximum\":1},\"c\":{\"type\":\"integer\",\"minimum\":-1000,\"maximum\":-10},\"d\":{\"type\":"
             "\"integer\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":3},\"e\":{\"type\":\"number\",\"minimum\":0.001,\"maximum\":0.002}},"
             "\"required\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
    /* 13 */ "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4},\"minItems\":1,\"maxItems\":3}",
    /* 14 */ "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(-[a-z]+)?$\"}",
    /* 15 */ "{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\c[\\\\n\\\\t]$\"}",
    /* 16 */ "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"],\"additionalProperties\":true}",
    /* 17 */ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"additionalProperties\":{\"type\":\"number\"}}",
    /* 18 */ "{\"allOf\":[{\"$ref\":\"#/$defs/p\"}],\"description\":\"x\",\"$defs\":{\"p\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"boolean\"}},\"required\":[\"q\"]}}}",
    /* 19 */ "{\"type\":\"object\",\"properties\":{\"flag\":{\"type\":\"boolean\"},\"nothing\":{\"type\":\"null\"}},\"required\":[\"flag\",\"nothing\"]}",
    /* 20 */ "{\"properties\":{\"x\":{\"minimum\":1,\"maximum\":3}},\"required\":[\"x\"]}",
    /* 21 */ "{}",
    /* 22 */ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"},"
             "\"d\":{\"type\":\"integer\"},\"e\":{\"type\":\"integer\"}},\"required\":[\"c\"]}",
    /* 23 */ "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"scores\":{\"type\":\"array\","
             "\"items\":{\"type\":\"number\"}}},\"required\":[\"name\",\"scores\"]},\"maxItems\":3}",
    /* 24 */ "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":10,"
             "\"exclusiveMaximum\":true}},\"required\":[\"n\"]}",
    /* 25 */ "{\"type\":\"object\",\"properties\":{\"\\u540d\\u524d\":{\"enum\":[\"\\u6771\\u4eac\",\"\\u5927\\u962a\"]}},\"required\":[\"\\u540d\\u524d\"]}",
    /* 26 */ "{\"type\":\"string\",\"nullable\":true,\"format\":\"uuid\"}",
};

static void generate_and_validate(const char *vocab_name, int seeds, int check_every) {
    const gram_vocab *v = gt_vocab(vocab_name);
    for (size_t i = 0; i < sizeof SCHEMAS / sizeof SCHEMAS[0]; i++) {
        json_t *doc = json_loads(SCHEMAS[i], 0, NULL);
        REQUIRE_MSG(doc, "schema %zu is not JSON", i + 1);
        gram_grammar *g = gt_compile(v, GRAM_JSON_SCHEMA, SCHEMAS[i]);
        for (int s = 1; s <= seeds; s++) {
            size_t len;
            char *out = gt_generate(g, (uint64_t)(s * 1000 + (int)i), 600, check_every, &len);
            CHECK_MSG(jv_syntax_ok(out, len), "%s, schema %zu: output is not JSON: %s", vocab_name, i + 1, out);
            /* integers as doubles: a long integer is still a value (jansson
             * refuses numbers beyond double range; only \"any value\" schemas
             * can produce those, and the syntax check above covers them) */
            json_error_t je;
            json_t *inst = json_loadb(out, len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
            CHECK_MSG(inst || strstr(je.text, "overflow"), "%s, schema %zu: jansson: %s: %s", vocab_name, i + 1, je.text, out);
            char why[512];
            if (inst)
                CHECK_MSG(jv_validate(inst, doc, doc, why, sizeof why), "%s, schema %zu: %s: %s", vocab_name, i + 1, why, out);
            json_decref(inst);
            free(out);
        }
        gram_grammar_free(g);
        json_decref(doc);
    }
}

static void test_generated_json_validates_qwen3(void) { generate_and_validate("qwen3", 3, 25); }
static void test_generated_json_validates_llama3(void) { generate_and_validate("llama3", 2, 0); }
static void test_generated_json_validates_mistral(void) { generate_and_validate("mistral", 2, 25); }
static void test_generated_json_validates_stories260k_byte_fallback(void) { generate_and_validate("stories", 2, 10); }

/* The validator itself, on the formats the grammar writes. */
static void test_validator_format_checks(void) {
    CHECK(jv_is_date("2024-02-29") && !jv_is_date("2023-02-29") && !jv_is_date("2024-2-29"));
    CHECK(jv_is_time("23:59:60.5+01:00") && !jv_is_time("24:00:00Z"));
    CHECK(jv_is_date_time("2024-01-01T00:00:00Z") && !jv_is_date_time("2024-01-01 00:00:00Z"));
    CHECK(jv_is_uuid("123e4567-e89b-12d3-a456-426614174000") && !jv_is_uuid("123e4567-e89b-12d3-a456-42661417400"));
    CHECK(jv_is_email("a.b@c.de") && !jv_is_email("a.@c.de") && !jv_is_email("a@c") && !jv_is_email("a@c-.de"));
}

int main(void) {
    bytes_vocab = gt_byte_vocab(NULL, 0);
    RUN(test_type_keywords);
    RUN(test_enum_and_const_take_any_json_value);
    RUN(test_object_properties_required_and_additional);
    RUN(test_array_items_counts_and_tuples);
    RUN(test_string_lengths_count_characters_not_bytes);
    RUN(test_pattern_is_written_with_json_escapes);
    RUN(test_string_formats);
    RUN(test_combinators_refs_and_inferred_types);
    RUN(test_integer_ranges_match_numeric_comparison);
    RUN(test_number_ranges_match_numeric_comparison);
    RUN(test_number_digits_are_capped);
    RUN(test_unsupported_keywords_are_errors_naming_keyword_and_pointer);
    RUN(test_keywords_that_do_not_constrain_are_accepted);
    RUN(test_validator_format_checks);
    RUN(test_generated_json_validates_qwen3);
    RUN(test_generated_json_validates_llama3);
    RUN(test_generated_json_validates_mistral);
    RUN(test_generated_json_validates_stories260k_byte_fallback);
    gram_vocab_free(bytes_vocab);
    return test_summary();
}
