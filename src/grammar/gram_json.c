/*
 * gram_json.c - the JSON pieces every JSON front end shares: whitespace
 * policy, string characters and escapes, numbers, and the recursive rules of
 * any JSON value, object and array (response_format json_object, schemas
 * that allow anything, additionalProperties: true).
 *
 * Whitespace between JSON tokens is nothing, one space, or a newline and at
 * most GRAM_JSON_MAX_INDENT spaces/tabs: compact, spaced and pretty-printed
 * output are all allowed, but a model cannot run away on whitespace. There
 * is no whitespace before or after the top-level value.
 *
 * Strings exclude what JSON forbids (raw control characters U+0000..U+001F,
 * '"' and '\' unescaped) and lone surrogates in \u escapes (a \uD800-\uDBFF
 * escape must be followed by a \uDC00-\uDFFF one), so every string parses
 * under strict JSON parsers.
 *
 * Two variants serve tool-call formats (gram_json_rules.flags): strings
 * without a raw '<' (GRAM_JSON_NO_LT: JSON inside a format whose markers
 * start with '<', where '<' is still written as \u003c), and Python
 * literals (GRAM_JSON_PYTHON: True/False/None, no "\/" and no surrogate
 * escapes, so that ast.literal_eval reads back the same value).
 *
 * What it is not for: JSON Schema keywords (gram_schema.c) and numeric
 * ranges (gram_numrange.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

static int32_t hex_digit(gram_ir *ir) {
    uint8_t s[32] = {0};
    const char *d = "0123456789abcdefABCDEF";
    for (const char *p = d; *p; p++) s[(unsigned char)*p >> 3] |= (uint8_t)(1u << (*p & 7));
    return gx_byteset(ir, s);
}

static int32_t chars(gram_ir *ir, const char *set) {
    uint8_t s[32] = {0};
    for (const char *p = set; *p; p++) s[(unsigned char)*p >> 3] |= (uint8_t)(1u << (*p & 7));
    return gx_byteset(ir, s);
}

static int32_t json_char(gram_ir *ir, unsigned flags, bool any_unicode_escape) {
    gram_cpset raw = {0};
    gram_cpset_add(&raw, 0x20, 0x21);
    if (flags & GRAM_JSON_NO_LT) {
        gram_cpset_add(&raw, 0x23, '<' - 1);
        gram_cpset_add(&raw, '<' + 1, 0x5B);
    } else {
        gram_cpset_add(&raw, 0x23, 0x5B);
    }
    gram_cpset_add(&raw, 0x5D, 0x10FFFF);
    int32_t r = gx_cpset(ir, &raw);
    gram_cpset_free(&raw);
    int32_t hex = hex_digit(ir);
    int32_t u;
    if (any_unicode_escape && (flags & GRAM_JSON_PYTHON)) {
        /* Python reads \uXXXX one by one: a surrogate pair would stay two
         * lone surrogates, so none is written */
        u = gx_altv(ir, gx_seqv(ir, chars(ir, "0123456789abcABCefEF"), hex, hex, hex, GX_END),
                    gx_seqv(ir, chars(ir, "dD"), chars(ir, "01234567"), hex, hex, GX_END), GX_END);
    } else if (any_unicode_escape) {
        /* \uXXXX outside the surrogates; a high surrogate must pair with a low one */
        int32_t plain = gx_altv(ir, gx_seqv(ir, chars(ir, "0123456789abcABCefEF"), hex, hex, hex, GX_END),
                                gx_seqv(ir, chars(ir, "dD"), chars(ir, "01234567"), hex, hex, GX_END), GX_END);
        int32_t pair = gx_seqv(ir, chars(ir, "dD"), chars(ir, "89abAB"), hex, hex, gx_str(ir, "\\u"), chars(ir, "dD"),
                               chars(ir, "cdefCDEF"), hex, hex, GX_END);
        u = gx_altv(ir, plain, pair, GX_END);
    } else {
        /* control characters only (\u0000-\u001f): everything else is written raw */
        u = gx_seqv(ir, gx_str(ir, "00"), chars(ir, "01"), hex, GX_END);
    }
    /* "\/" is JSON's, not Python's (there it stays a backslash and a slash) */
    const char *simple = flags & GRAM_JSON_PYTHON ? "\"\\bfnrt" : "\"\\/bfnrt";
    int32_t esc = gx_seqv(ir, gx_str(ir, "\\"),
                          gx_altv(ir, chars(ir, simple), gx_seqv(ir, gx_str(ir, "u"), u, GX_END), GX_END), GX_END);
    return gx_altv(ir, r, esc, GX_END);
}

int32_t gram_json_char(gram_ir *ir, bool any_unicode_escape) { return json_char(ir, 0, any_unicode_escape); }

int32_t gram_json_char_of(gram_ir *ir, const gram_json_rules *j, bool any_unicode_escape) {
    return json_char(ir, j->flags, any_unicode_escape);
}

const char *gram_json_lit(const gram_json_rules *j, int which) {
    bool py = j->flags & GRAM_JSON_PYTHON;
    switch (which) {
    case 't': return py ? "True" : "true";
    case 'f': return py ? "False" : "false";
    default: return py ? "None" : "null";
    }
}

/* Appends the JSON escape of one byte (a control character, '"' or '\'). */
static size_t escape_byte(unsigned char c, char *out) {
    switch (c) {
    case '"': return (size_t)snprintf(out, 8, "\\\"");
    case '\\': return (size_t)snprintf(out, 8, "\\\\");
    case '\b': return (size_t)snprintf(out, 8, "\\b");
    case '\f': return (size_t)snprintf(out, 8, "\\f");
    case '\n': return (size_t)snprintf(out, 8, "\\n");
    case '\r': return (size_t)snprintf(out, 8, "\\r");
    case '\t': return (size_t)snprintf(out, 8, "\\t");
    default: return (size_t)snprintf(out, 8, "\\u%04x", c);
    }
}

int32_t gram_json_string_literal(gram_ir *ir, const char *s, size_t n) {
    /* worst case 6 bytes a byte, plus the quotes */
    char stack[512];
    size_t cap = n * 6 + 2;
    char *buf = cap <= sizeof stack ? stack : malloc(cap);
    if (!buf) {
        ir->oom = true;
        return -1;
    }
    size_t w = 0;
    buf[w++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '"' || c == '\\')
            w += escape_byte(c, buf + w);
        else
            buf[w++] = (char)c;
    }
    buf[w++] = '"';
    int32_t r = gx_literal(ir, buf, w);
    if (buf != stack) free(buf);
    return r;
}

/* Generated numbers have at most GRAM_NUM_MAX_DIGITS integer digits and as
 * many fraction digits, and at most 3 exponent digits (llama.cpp's JSON
 * grammars cap them alike): more is never needed for a double, and a model
 * cannot run away on digits (a random-weight model writes zeros forever). */
static int32_t number(gram_ir *ir) {
    int32_t digit = gx_byte_range(ir, '0', '9');
    int32_t integer = gx_altv(ir, gx_str(ir, "0"), gx_seqv(ir, gx_byte_range(ir, '1', '9'),
                              gx_repeat(ir, digit, 0, GRAM_NUM_MAX_DIGITS - 1), GX_END), GX_END);
    int32_t frac = gx_seqv(ir, gx_str(ir, "."), gx_repeat(ir, digit, 1, GRAM_NUM_MAX_DIGITS), GX_END);
    int32_t exp = gx_seqv(ir, chars(ir, "eE"), gx_opt(ir, chars(ir, "+-")), gx_repeat(ir, digit, 1, 3), GX_END);
    return gx_seqv(ir, gx_opt(ir, gx_str(ir, "-")), integer, gx_opt(ir, frac), gx_opt(ir, exp), GX_END);
}

int gram_json_rules_init(gram_ir *ir, gram_json_rules *j) { return gram_json_rules_init_flags(ir, j, 0); }

int gram_json_rules_init_flags(gram_ir *ir, gram_json_rules *j, unsigned flags) {
    j->flags = flags;
    j->ws = gx_altv(ir, gx_empty(ir), gx_str(ir, " "),
                    gx_seqv(ir, gx_str(ir, "\n"), gx_repeat(ir, chars(ir, " \t"), 0, GRAM_JSON_MAX_INDENT), GX_END),
                    GX_END);
    /* a variant's rules are named apart from the plain ones (messages) */
    char name[4][32];
    const char *base[4] = {"json-string", "json-value", "json-object", "json-array"};
    for (int i = 0; i < 4; i++) {
        if (flags) snprintf(name[i], sizeof name[i], "%s/%u", base[i], flags);
        else snprintf(name[i], sizeof name[i], "%s", base[i]);
    }
    j->string = gram_ir_rule_def(ir, name[0], GX_RULE_NOINLINE,
                                 gx_seqv(ir, gx_str(ir, "\""), gx_star(ir, json_char(ir, flags, true)), gx_str(ir, "\""), GX_END));
    j->value = gram_ir_rule(ir, name[1], 0);
    j->object = gram_ir_rule(ir, name[2], 0);
    int32_t array = gram_ir_rule(ir, name[3], 0);
    if (j->value < 0 || j->object < 0 || array < 0 || j->string < 0) return -1;
    int32_t ws = j->ws;
    int32_t member = gx_seqv(ir, gx_ref(ir, j->string), ws, gx_str(ir, ":"), ws, gx_ref(ir, j->value), ws, GX_END);
    int32_t obj = gx_seqv(ir, gx_str(ir, "{"), ws,
                          gx_opt(ir, gx_seqv(ir, member, gx_star(ir, gx_seqv(ir, gx_str(ir, ","), ws, member, GX_END)), GX_END)),
                          gx_str(ir, "}"), GX_END);
    int32_t elem = gx_seqv(ir, gx_ref(ir, j->value), ws, GX_END);
    int32_t arr = gx_seqv(ir, gx_str(ir, "["), ws,
                          gx_opt(ir, gx_seqv(ir, elem, gx_star(ir, gx_seqv(ir, gx_str(ir, ","), ws, elem, GX_END)), GX_END)),
                          gx_str(ir, "]"), GX_END);
    int32_t val = gx_altv(ir, gx_ref(ir, j->object), gx_ref(ir, array), gx_ref(ir, j->string), number(ir),
                          gx_str(ir, gram_json_lit(j, 't')), gx_str(ir, gram_json_lit(j, 'f')),
                          gx_str(ir, gram_json_lit(j, 'n')), GX_END);
    if (obj < 0 || arr < 0 || val < 0) return -1;
    ir->rules[j->object].body = obj;
    ir->rules[array].body = arr;
    ir->rules[j->value].body = val;
    return 0;
}

int32_t gram_json_any_number(gram_ir *ir) { return number(ir); }
