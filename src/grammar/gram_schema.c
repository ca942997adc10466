/*
 * gram_schema.c - JSON Schema -> the intermediate form: the language of the
 * JSON texts that the schema accepts (or a documented subset of them), so
 * constrained output always validates.
 *
 * Supported keywords:
 *   type (a name or a list: nullable via ["string", "null"]), nullable (OpenAPI)
 *   enum, const (any JSON value; written compactly, as JSON serializes it)
 *   object: properties, required, additionalProperties (false, true, a schema)
 *   array: items (schema, or a list as in draft 4), prefixItems, additionalItems,
 *          minItems, maxItems, uniqueItems: false
 *   string: minLength, maxLength, pattern, format (date-time, date, time,
 *           uuid, email)
 *   integer / number: minimum, maximum, exclusiveMinimum, exclusiveMaximum
 *           (draft 4's boolean form too); integer format int32 / int64
 *   anyOf, oneOf (as anyOf), allOf with one constraining member
 *   $ref to this document ("#", "#/$defs/x", any "#/..." pointer; recursion
 *   allowed), $defs / definitions
 * Keywords that do not constrain (title, description, examples, default,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly, ...) are accepted.
 * Any other keyword is an error naming it and its JSON pointer; nothing is
 * ignored silently.
 *
 * Choices made for generation (all outputs still validate):
 *   - properties come in the schema's order; a property not listed is only
 *     generated when additionalProperties is true or a schema (a key that
 *     differs from every listed name, written without escapes), or when the
 *     object schema names no property at all ({"type": "object"}: any object);
 *   - oneOf is generated like anyOf (valid when its branches do not overlap,
 *     as in discriminated unions);
 *   - pattern must match the whole string (a stricter reading of JSON
 *     Schema's search semantics);
 *   - bounded numbers are written without an exponent; formats are written
 *     in their common forms (date-time with an upper-case T, a seconds
 *     fraction of at most 9 digits).
 *
 * What it is not for: validation (the tests have their own validator).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

#define SCHEMA_MAX_DEPTH 64

typedef struct ref_memo {
    char *ptr;
    int32_t rule;
} ref_memo;

typedef struct sc {
    gram_ir *ir;
    const gram_json_rules *j;
    json_t *doc;
    const char *where;
    pdl_error *err;
    bool failed;
    char path[2048]; /* JSON pointer of the schema being compiled */
    size_t plen;
    ref_memo *refs;
    int n_refs, cap_refs;
    int depth;
    int32_t n_obj_rules;
} sc;

static int32_t sc_fail(sc *c, const char *fmt, const char *a, const char *b) {
    if (!c->failed) {
        char msg[4400]; /* two pointers of up to 2100 bytes and the text */
        snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
        err_fail(c->err, "%s: %s", c->where, msg);
        c->failed = true;
    }
    return -1;
}

/* The pointer of the current schema, or of its keyword key (NULL: itself). */
static const char *ptr_of(sc *c, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "#%s%s%s", c->path, key ? "/" : "", key ? key : "");
    return buf;
}

static size_t path_push(sc *c, const char *seg) {
    size_t old = c->plen;
    if (c->plen + 2 < sizeof c->path) c->path[c->plen++] = '/';
    for (const char *s = seg; *s && c->plen + 3 < sizeof c->path; s++) {
        if (*s == '~') c->path[c->plen++] = '~', c->path[c->plen++] = '0';
        else if (*s == '/') c->path[c->plen++] = '~', c->path[c->plen++] = '1';
        else c->path[c->plen++] = *s;
    }
    c->path[c->plen] = 0;
    return old;
}

static void path_pop(sc *c, size_t old) {
    c->plen = old;
    c->path[old] = 0;
}

static size_t path_push_index(sc *c, const char *key, size_t i) {
    size_t old = path_push(c, key);
    char b[32];
    snprintf(b, sizeof b, "%zu", i);
    path_push(c, b);
    return old;
}

/* Keywords that never change which instances are valid. */
static bool is_annotation(const char *k) {
    static const char *const names[] = {"title", "description", "examples", "default", "$schema", "$id", "$comment",
                                        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "example",
                                        "discriminator", "xml", "externalDocs", "contentMediaType",
                                        "contentEncoding", "$anchor", "strict", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(k, names[i]) == 0) return true;
    return false;
}

static int32_t compile(sc *c, json_t *s);

/* ---------------------------------------------------------------------------
 * Literal JSON values (enum, const)
 * ------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_json_string(sbuf *b, const char *s, size_t n) {
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '"') sb_str(b, "\\\"");
        else if (ch == '\\') sb_str(b, "\\\\");
        else if (ch == '\n') sb_str(b, "\\n");
        else if (ch == '\r') sb_str(b, "\\r");
        else if (ch == '\t') sb_str(b, "\\t");
        else if (ch == '\b') sb_str(b, "\\b");
        else if (ch == '\f') sb_str(b, "\\f");
        else if (ch < 0x20) snprintf(e, sizeof e, "\\u%04x", ch), sb_str(b, e);
        else sb_put(b, (const char *)&s[i], 1);
    }
    sb_put(b, "\"", 1);
}

/* The shortest decimal text that reads back as x. */
static void real_text(double x, char *out, size_t cap) {
    for (int p = 1; p <= 17; p++) {
        snprintf(out, cap, "%.*g", p, x);
        if (strtod(out, NULL) == x) return;
    }
}

/* v as the rules write it (JSON, or Python literals: gram_json_lit). */
static void sb_value(sbuf *b, const gram_json_rules *j, json_t *v) {
    char t[64];
    switch (json_typeof(v)) {
    case JSON_NULL: sb_str(b, gram_json_lit(j, 'n')); break;
    case JSON_TRUE: sb_str(b, gram_json_lit(j, 't')); break;
    case JSON_FALSE: sb_str(b, gram_json_lit(j, 'f')); break;
    case JSON_INTEGER: snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v)); sb_str(b, t); break;
    case JSON_REAL: real_text(json_real_value(v), t, sizeof t); sb_str(b, t); break;
    case JSON_STRING: sb_json_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY: {
        sb_str(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_str(b, ",");
            sb_value(b, j, json_array_get(v, i));
        }
        sb_str(b, "]");
        break;
    }
    case JSON_OBJECT: {
        sb_str(b, "{");
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach(v, k, x) {
            if (!first) sb_str(b, ",");
            first = false;
            sb_json_string(b, k, strlen(k));
            sb_str(b, ":");
            sb_value(b, j, x);
        }
        sb_str(b, "}");
        break;
    }
    }
}

static bool value_has_type(json_t *v, const char *type) {
    if (strcmp(type, "null") == 0) return json_is_null(v);
    if (strcmp(type, "boolean") == 0) return json_is_boolean(v);
    if (strcmp(type, "string") == 0) return json_is_string(v);
    if (strcmp(type, "array") == 0) return json_is_array(v);
    if (strcmp(type, "object") == 0) return json_is_object(v);
    if (strcmp(type, "number") == 0) return json_is_number(v);
    if (strcmp(type, "integer") == 0)
        return json_is_integer(v) || (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    return false;
}

static bool type_allows(json_t *type, json_t *v) {
    if (!type) return true;
    if (json_is_string(type)) return value_has_type(v, json_string_value(type));
    for (size_t i = 0; i < json_array_size(type); i++)
        if (json_is_string(json_array_get(type, i)) && value_has_type(v, json_string_value(json_array_get(type, i))))
            return true;
    return false;
}

static int32_t literal_value(sc *c, json_t *v) {
    sbuf b = {0};
    sb_value(&b, c->j, v);
    if (b.oom) {
        free(b.p);
        c->ir->oom = true;
        return -1;
    }
    int32_t r = gx_literal(c->ir, b.p, b.n);
    free(b.p);
    return r;
}

static int32_t compile_enum(sc *c, json_t *s, json_t *values, const char *kw) {
    char pb[2100];
    const char *k;
    json_t *x;
    json_object_foreach(s, k, x) {
        if (strcmp(k, kw) == 0 || strcmp(k, "type") == 0 || is_annotation(k)) continue;
        return sc_fail(c, "keyword '%s' alongside 'enum'/'const' is not supported (at %s)", k, ptr_of(c, k, pb, sizeof pb));
    }
    json_t *type = json_object_get(s, "type");
    int32_t *kids = malloc((json_array_size(values) + 1) * sizeof *kids);
    if (!kids) {
        c->ir->oom = true;
        return -1;
    }
    int n = 0;
    for (size_t i = 0; i < json_array_size(values); i++) {
        json_t *v = json_array_get(values, i);
        if (!type_allows(type, v)) continue;
        kids[n++] = literal_value(c, v);
    }
    int32_t r = n ? gx_alt(c->ir, kids, n) : sc_fail(c, "no '%s' value has the schema's type (at %s)", kw, ptr_of(c, kw, pb, sizeof pb));
    free(kids);
    return r;
}

/* ---------------------------------------------------------------------------
 * Strings
 * ------------------------------------------------------------------------- */

const char *gram_schema_format_regex(const char *f) {
#define RE_DATE                                                                                                    \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))" \
    "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"
#define RE_TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define RE_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    if (strcmp(f, "date") == 0) return RE_DATE;
    if (strcmp(f, "time") == 0) return RE_TIME;
    if (strcmp(f, "date-time") == 0) return RE_DATE "T" RE_TIME;
    if (strcmp(f, "uuid") == 0) return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
    if (strcmp(f, "email") == 0)
        return "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@" RE_LABEL "(?:\\." RE_LABEL ")+";
    return NULL;
}

static bool get_count(sc *c, json_t *s, const char *key, int64_t *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return false;
    char pb[2100];
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && json_real_value(v) >= 0) {
        *out = (int64_t)json_real_value(v);
    } else if (!json_is_integer(v) || json_integer_value(v) < 0) {
        sc_fail(c, "'%s' must be a non-negative integer (at %s)", key, ptr_of(c, key, pb, sizeof pb));
        return false;
    } else {
        *out = json_integer_value(v);
    }
    return true;
}

static int32_t compile_string(sc *c, json_t *s) {
    char pb[2100];
    json_t *pattern = json_object_get(s, "pattern"), *format = json_object_get(s, "format");
    int64_t min = 0, max = -1;
    bool has_min = get_count(c, s, "minLength", &min), has_max = get_count(c, s, "maxLength", &max);
    if (c->failed) return -1;
    int given = (pattern != NULL) + (format != NULL) + (has_min || has_max);
    if (given > 1)
        return sc_fail(c, "combining 'pattern', 'format' and 'minLength'/'maxLength' is not supported (at %s)%s",
                       ptr_of(c, NULL, pb, sizeof pb), "");
    gram_ir *ir = c->ir;
    int32_t quote = gx_str(ir, "\"");
    int flavour = GRAM_RE_JSON_STRING | (c->j->flags & GRAM_JSON_NO_LT ? GRAM_RE_NO_LT : 0);
    if (pattern) {
        if (!json_is_string(pattern)) return sc_fail(c, "'pattern' must be a string (at %s)%s", ptr_of(c, "pattern", pb, sizeof pb), "");
        int32_t body;
        pdl_error e2;
        if (gram_regex_parse(ir, json_string_value(pattern), json_string_length(pattern), flavour, &body, &e2) != 0)
            return sc_fail(c, "%s (at %s)", e2.message, ptr_of(c, "pattern", pb, sizeof pb));
        return gx_seqv(ir, quote, body, gx_str(ir, "\""), GX_END);
    }
    if (format) {
        const char *re = json_is_string(format) ? gram_schema_format_regex(json_string_value(format)) : NULL;
        if (!re)
            return sc_fail(c, "string format '%s' is not supported (at %s)",
                           json_is_string(format) ? json_string_value(format) : "?", ptr_of(c, "format", pb, sizeof pb));
        int32_t body;
        pdl_error e2;
        if (gram_regex_parse(ir, re, strlen(re), flavour, &body, &e2) != 0)
            return sc_fail(c, "internal format regex: %s%s", e2.message, "");
        return gx_seqv(ir, quote, body, gx_str(ir, "\""), GX_END);
    }
    if (has_min || has_max) {
        if (has_max && max < min)
            return sc_fail(c, "'maxLength' is below 'minLength' (at %s)%s", ptr_of(c, "maxLength", pb, sizeof pb), "");
        if (min > 10000 || max > 10000)
            return sc_fail(c, "string lengths above 10000 are not supported (at %s)%s", ptr_of(c, NULL, pb, sizeof pb), "");
        /* its own rule, shared by equal bounds: the string content stays one cached walk */
        char name[64];
        snprintf(name, sizeof name, "json-string{%lld,%lld}/%u", (long long)min, (long long)max, c->j->flags);
        for (int32_t r = 0; r < ir->n_rules; r++)
            if (strcmp(ir->rules[r].name, name) == 0) return gx_ref(ir, r);
        int32_t body = gx_seqv(ir, quote, gx_repeat(ir, gram_json_char_of(ir, c->j, false), (int32_t)min, has_max ? (int32_t)max : GX_INF),
                               gx_str(ir, "\""), GX_END);
        return gx_ref(ir, gram_ir_rule_def(ir, name, GX_RULE_NOINLINE, body));
    }
    return gx_ref(ir, c->j->string);
}

/* ---------------------------------------------------------------------------
 * Numbers
 * ------------------------------------------------------------------------- */

/* A bound keyword as decimal text; draft 4's boolean exclusive* flags. */
static bool bound_text(sc *c, json_t *s, const char *key, char *out, size_t cap) {
    json_t *v = json_object_get(s, key);
    if (!v || json_is_boolean(v)) return false;
    char pb[2100];
    if (json_is_integer(v)) {
        snprintf(out, cap, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        real_text(json_real_value(v), out, cap);
    } else {
        sc_fail(c, "'%s' must be a number (at %s)", key, ptr_of(c, key, pb, sizeof pb));
        return false;
    }
    return true;
}

static int32_t compile_number(sc *c, json_t *s, bool integer) {
    char pb[2100];
    char lo[64], hi[64];
    bool lo_ex = false, hi_ex = false;
    bool has_lo = bound_text(c, s, "minimum", lo, sizeof lo), has_hi = bound_text(c, s, "maximum", hi, sizeof hi);
    char xlo[64], xhi[64];
    bool has_xlo = bound_text(c, s, "exclusiveMinimum", xlo, sizeof xlo);
    bool has_xhi = bound_text(c, s, "exclusiveMaximum", xhi, sizeof xhi);
    if (c->failed) return -1;
    /* both forms: the tighter bound wins */
    if (has_xlo && (!has_lo || strtod(xlo, NULL) >= strtod(lo, NULL))) {
        strcpy(lo, xlo);
        has_lo = lo_ex = true;
    }
    if (has_xhi && (!has_hi || strtod(xhi, NULL) <= strtod(hi, NULL))) {
        strcpy(hi, xhi);
        has_hi = hi_ex = true;
    }
    if (json_is_true(json_object_get(s, "exclusiveMinimum")) && has_lo) lo_ex = true;
    if (json_is_true(json_object_get(s, "exclusiveMaximum")) && has_hi) hi_ex = true;
    json_t *format = json_object_get(s, "format");
    if (format) {
        const char *f = json_is_string(format) ? json_string_value(format) : "";
        if (integer && strcmp(f, "int32") == 0) {
            if (!has_lo) strcpy(lo, "-2147483648"), has_lo = true, lo_ex = false;
            if (!has_hi) strcpy(hi, "2147483647"), has_hi = true, hi_ex = false;
        } else if (integer && strcmp(f, "int64") == 0) {
            if (!has_lo) strcpy(lo, "-9223372036854775808"), has_lo = true, lo_ex = false;
            if (!has_hi) strcpy(hi, "9223372036854775807"), has_hi = true, hi_ex = false;
        } else if (strcmp(f, "float") != 0 && strcmp(f, "double") != 0 && strcmp(f, "int32") != 0 &&
                   strcmp(f, "int64") != 0) {
            return sc_fail(c, "number format '%s' is not supported (at %s)", f, ptr_of(c, "format", pb, sizeof pb));
        }
    }
    if (!has_lo && !has_hi) {
        if (!integer) return gram_json_any_number(c->ir);
        /* 0, or an optional minus and no leading zero ("-0" is left out); at
         * most GRAM_NUM_MAX_DIGITS digits */
        return gx_altv(c->ir, gx_str(c->ir, "0"),
                       gx_seqv(c->ir, gx_opt(c->ir, gx_str(c->ir, "-")), gx_byte_range(c->ir, '1', '9'),
                               gx_repeat(c->ir, gx_byte_range(c->ir, '0', '9'), 0, GRAM_NUM_MAX_DIGITS - 1), GX_END),
                       GX_END);
    }
    int32_t out;
    pdl_error e2;
    if (gram_json_number_range(c->ir, has_lo ? lo : NULL, lo_ex, has_hi ? hi : NULL, hi_ex, integer, &out, &e2) != 0)
        return sc_fail(c, "%s (at %s)", e2.message, ptr_of(c, NULL, pb, sizeof pb));
    return out;
}

/* ---------------------------------------------------------------------------
 * Arrays
 * ------------------------------------------------------------------------- */

static int32_t compile_sub(sc *c, json_t *s, const char *key, size_t index, bool indexed) {
    size_t old = indexed ? path_push_index(c, key, index) : path_push(c, key);
    int32_t r = compile(c, s);
    path_pop(c, old);
    return r;
}

static int32_t compile_array(sc *c, json_t *s) {
    char pb[2100];
    gram_ir *ir = c->ir;
    int32_t ws = c->j->ws;
    int64_t min = 0, max = -1;
    get_count(c, s, "minItems", &min);
    bool has_max = get_count(c, s, "maxItems", &max);
    if (c->failed) return -1;
    if (has_max && max < min) return sc_fail(c, "'maxItems' is below 'minItems' (at %s)%s", ptr_of(c, "maxItems", pb, sizeof pb), "");
    if (min > 10000 || max > 10000)
        return sc_fail(c, "array sizes above 10000 are not supported (at %s)%s", ptr_of(c, NULL, pb, sizeof pb), "");
    if (json_is_true(json_object_get(s, "uniqueItems")))
        return sc_fail(c, "'uniqueItems': true is not supported (at %s)%s", ptr_of(c, "uniqueItems", pb, sizeof pb), "");

    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *additional = json_object_get(s, "additionalItems");
    const char *prefix_key = "prefixItems";
    if (json_is_array(items)) { /* draft 4 tuple form */
        if (prefix) return sc_fail(c, "'items' as a list together with 'prefixItems' (at %s)%s", ptr_of(c, "items", pb, sizeof pb), "");
        prefix = items;
        prefix_key = "items";
        items = additional;
    } else if (additional && !prefix) {
        additional = NULL; /* additionalItems only applies after a tuple */
    }
    if (prefix && !json_is_array(prefix)) return sc_fail(c, "'prefixItems' must be a list (at %s)%s", ptr_of(c, "prefixItems", pb, sizeof pb), "");
    size_t k = prefix ? json_array_size(prefix) : 0;
    bool items_false = items && json_is_false(items);
    int32_t item = -1;
    if (!items_false) {
        item = items ? compile_sub(c, items, items == additional ? "additionalItems" : "items", 0, false) : gx_ref(ir, c->j->value);
        if (item < 0) return -1;
    }
    if (items_false) {
        if (has_max && (size_t)max > k) max = (int64_t)k;
        if (!has_max) max = (int64_t)k, has_max = true;
        if (min > (int64_t)k) return sc_fail(c, "'minItems' asks for more items than the tuple allows (at %s)%s", ptr_of(c, "minItems", pb, sizeof pb), "");
    }
    int32_t *pre = calloc(k + 1, sizeof *pre);
    if (!pre) {
        ir->oom = true;
        return -1;
    }
    for (size_t i = 0; i < k; i++) {
        pre[i] = compile_sub(c, json_array_get(prefix, i), prefix_key, i, true);
        if (pre[i] < 0) {
            free(pre);
            return -1;
        }
    }
    int32_t sep = gx_seqv(ir, ws, gx_str(ir, ","), ws, GX_END);
    /* elements after the first n: the tail once n items are written */
    int32_t tail;
    {
        int64_t lo = min > (int64_t)k ? min - (int64_t)k : 0;
        int64_t hi = has_max ? max - (int64_t)k : -1;
        if (k == 0) {
            /* the first item is written before the tail */
            lo = lo > 0 ? lo - 1 : 0;
            hi = hi > 0 ? hi - 1 : (hi == 0 ? 0 : -1);
        }
        tail = (hi == 0 || item < 0) ? gx_empty(ir)
                                     : gx_repeat(ir, gx_seqv(ir, sep, item, GX_END), (int32_t)lo, hi < 0 ? GX_INF : (int32_t)hi);
    }
    for (size_t i = k; i-- > 1;) {
        /* after item i (1-based i), item i+1 follows when more are needed or wanted */
        int32_t next = gx_seqv(ir, sep, pre[i], tail, GX_END);
        bool can_stop = (int64_t)i >= min;
        bool may_continue = !has_max || (int64_t)i < max;
        tail = !may_continue ? gx_empty(ir) : can_stop ? gx_opt(ir, next) : next;
    }
    int32_t first = k ? pre[0] : item;
    int32_t body;
    if ((has_max && max == 0) || first < 0) {
        body = gx_empty(ir);
    } else {
        int32_t elems = gx_seqv(ir, first, tail, ws, GX_END);
        body = min == 0 ? gx_opt(ir, elems) : elems;
    }
    free(pre);
    return gx_seqv(ir, gx_str(ir, "["), ws, body, gx_str(ir, "]"), GX_END);
}

/* ---------------------------------------------------------------------------
 * Objects
 * ------------------------------------------------------------------------- */

/* A JSON string key written without escapes that is none of names[0..n). */
typedef struct name_trie {
    uint32_t cp;
    int32_t child, sibling;
    bool terminal;
} name_trie;

static int32_t not_names(sc *c, name_trie *t, int32_t node, const gram_cpset *raw) {
    gram_ir *ir = c->ir;
    int32_t kids[260];
    int n = 0;
    if (!t[node].terminal) kids[n++] = gx_empty(ir);
    gram_cpset others = {0};
    for (int i = 0; i < raw->n; i++) gram_cpset_add(&others, raw->r[2 * i], raw->r[2 * i + 1]);
    gram_cpset_normalize(&others);
    for (int32_t ch = t[node].child; ch >= 0; ch = t[ch].sibling) {
        if (n < 250) kids[n++] = gx_seqv(ir, gx_cp_range(ir, t[ch].cp, t[ch].cp), not_names(c, t, ch, raw), GX_END);
        /* remove t[ch].cp from others */
        gram_cpset rest = {0};
        for (int i = 0; i < others.n; i++) {
            uint32_t lo = others.r[2 * i], hi = others.r[2 * i + 1];
            if (t[ch].cp < lo || t[ch].cp > hi) {
                gram_cpset_add(&rest, lo, hi);
                continue;
            }
            if (lo < t[ch].cp) gram_cpset_add(&rest, lo, t[ch].cp - 1);
            if (t[ch].cp < hi) gram_cpset_add(&rest, t[ch].cp + 1, hi);
        }
        gram_cpset_free(&others);
        others = rest;
    }
    if (others.n) kids[n++] = gx_seqv(ir, gx_cpset(ir, &others), gx_star(ir, gx_cpset(ir, raw)), GX_END);
    gram_cpset_free(&others);
    return gx_alt(ir, kids, n);
}

static int32_t key_not_listed(sc *c, const char *const *names, int n) {
    gram_cpset raw = {0};
    gram_cpset_add(&raw, 0x20, 0x21);
    if (c->j->flags & GRAM_JSON_NO_LT) {
        gram_cpset_add(&raw, 0x23, '<' - 1);
        gram_cpset_add(&raw, '<' + 1, 0x5B);
    } else {
        gram_cpset_add(&raw, 0x23, 0x5B);
    }
    gram_cpset_add(&raw, 0x5D, 0x10FFFF);
    gram_cpset_normalize(&raw);
    size_t cap = 1;
    for (int i = 0; i < n; i++) cap += strlen(names[i]);
    name_trie *t = calloc(cap, sizeof *t);
    if (!t) {
        gram_cpset_free(&raw);
        c->ir->oom = true;
        return -1;
    }
    int32_t nn = 1;
    t[0].child = t[0].sibling = -1;
    for (int i = 0; i < n; i++) {
        const char *s = names[i];
        size_t len = strlen(s), p = 0;
        int32_t node = 0;
        bool escaped = false;
        while (p < len) {
            uint32_t cp;
            int l = gram_utf8_decode(s + p, len - p, &cp);
            if (!l || cp < 0x20 || cp == '"' || cp == '\\') {
                escaped = true; /* such a name needs escapes; raw keys can never equal it */
                break;
            }
            p += (size_t)l;
            int32_t ch = t[node].child;
            while (ch >= 0 && t[ch].cp != cp) ch = t[ch].sibling;
            if (ch < 0) {
                ch = nn++;
                t[ch] = (name_trie){cp, -1, t[node].child, false};
                t[node].child = ch;
            }
            node = ch;
        }
        if (!escaped) t[node].terminal = true;
    }
    int32_t body = not_names(c, t, 0, &raw);
    free(t);
    gram_cpset_free(&raw);
    return gx_seqv(c->ir, gx_str(c->ir, "\""), body, gx_str(c->ir, "\""), GX_END);
}

static int32_t compile_object(sc *c, json_t *s) {
    char pb[2100];
    gram_ir *ir = c->ir;
    int32_t ws = c->j->ws;
    json_t *props = json_object_get(s, "properties"), *required = json_object_get(s, "required");
    json_t *additional = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return sc_fail(c, "'properties' must be an object (at %s)%s", ptr_of(c, "properties", pb, sizeof pb), "");
    /* an object schema that describes no property at all: any object */
    if (!props && !required && !additional) return gx_ref(ir, c->j->object);
    if (required && !json_is_array(required)) return sc_fail(c, "'required' must be a list (at %s)%s", ptr_of(c, "required", pb, sizeof pb), "");
    size_t n_props = props ? json_object_size(props) : 0, n_req = required ? json_array_size(required) : 0;
    size_t cap = n_props + n_req + 1;
    const char **names = calloc(cap, sizeof *names);
    int32_t *vals = calloc(cap, sizeof *vals);
    bool *req = calloc(cap, sizeof *req);
    int32_t *rules = NULL;
    int32_t result = -1;
    if (!names || !vals || !req) {
        ir->oom = true;
        goto done;
    }
    size_t n = 0;
    const char *k;
    json_t *v;
    if (props) {
        json_object_foreach(props, k, v) {
            names[n] = k;
            size_t o1 = path_push(c, "properties");
            vals[n] = compile_sub(c, v, k, 0, false);
            path_pop(c, o1);
            if (vals[n] < 0) goto done;
            n++;
        }
    }
    for (size_t i = 0; i < n_req; i++) {
        json_t *r = json_array_get(required, i);
        if (!json_is_string(r)) {
            sc_fail(c, "'required' must list strings (at %s)%s", ptr_of(c, "required", pb, sizeof pb), "");
            goto done;
        }
        size_t at = n;
        for (size_t q = 0; q < n; q++)
            if (strcmp(names[q], json_string_value(r)) == 0) at = q;
        if (at == n) { /* required but not described: any value */
            names[n] = json_string_value(r);
            vals[n] = gx_ref(ir, c->j->value);
            n++;
        }
        req[at] = true;
    }
    /* additional properties: a key none of the listed ones, then its value */
    int32_t extra = -1;
    if (additional && !json_is_false(additional)) {
        int32_t xval = json_is_true(additional) ? gx_ref(ir, c->j->value) : compile_sub(c, additional, "additionalProperties", 0, false);
        if (xval < 0) goto done;
        extra = gx_seqv(ir, key_not_listed(c, names, (int)n), ws, gx_str(ir, ":"), ws, xval, ws, GX_END);
    }
    /* S[i][e]: properties i.. once e (0/1) of them were written, as rules
     * so both continuations of an optional property share one copy */
    rules = malloc((n + 1) * 2 * sizeof *rules);
    if (!rules) {
        ir->oom = true;
        goto done;
    }
    int32_t obj_id = c->n_obj_rules++;
    for (size_t i = 0; i <= n; i++)
        for (int e = 0; e < 2; e++) {
            char name[96];
            snprintf(name, sizeof name, "object%d-from%zu%s", obj_id, i, e ? "-more" : "");
            rules[i * 2 + e] = gram_ir_rule(ir, name, 0);
        }
    int32_t comma = gx_seqv(ir, gx_str(ir, ","), ws, GX_END);
    for (int e = 0; e < 2; e++) {
        int32_t body;
        if (extra < 0) {
            body = gx_empty(ir);
        } else {
            int32_t more = gx_star(ir, gx_seqv(ir, comma, extra, GX_END));
            body = e ? more : gx_opt(ir, gx_seqv(ir, extra, more, GX_END));
        }
        if (rules[n * 2 + e] >= 0) ir->rules[rules[n * 2 + e]].body = body;
    }
    for (size_t i = n; i-- > 0;) {
        int32_t key = gram_json_string_literal(ir, names[i], strlen(names[i]));
        int32_t kv = gx_seqv(ir, key, ws, gx_str(ir, ":"), ws, vals[i], ws, GX_END);
        for (int e = 0; e < 2; e++) {
            int32_t take = gx_seqv(ir, e ? comma : gx_empty(ir), kv, gx_ref(ir, rules[(i + 1) * 2 + 1]), GX_END);
            int32_t body = req[i] ? take : gx_altv(ir, take, gx_ref(ir, rules[(i + 1) * 2 + e]), GX_END);
            if (rules[i * 2 + e] >= 0 && body >= 0) ir->rules[rules[i * 2 + e]].body = body;
        }
    }
    if (ir->oom) goto done;
    result = gx_seqv(ir, gx_str(ir, "{"), ws, gx_ref(ir, rules[0]), gx_str(ir, "}"), GX_END);
done:
    free(names);
    free(vals);
    free(req);
    free(rules);
    return result;
}

/* ---------------------------------------------------------------------------
 * References
 * ------------------------------------------------------------------------- */

json_t *gram_schema_resolve(json_t *doc, const char *ref) {
    if (strcmp(ref, "#") == 0) return doc;
    if (strncmp(ref, "#/", 2) != 0) return NULL;
    json_t *cur = doc;
    const char *p = ref + 2;
    char seg[1024];
    while (cur) {
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            if (p[0] == '~' && p[1] == '1') seg[n++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0') seg[n++] = '~', p += 2;
            else if (p[0] == '%' && p[1] && p[2]) {
                char h[3] = {p[1], p[2], 0};
                seg[n++] = (char)strtol(h, NULL, 16);
                p += 3;
            } else {
                seg[n++] = *p++;
            }
        }
        seg[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            long i = strtol(seg, &end, 10);
            cur = (*end || i < 0) ? NULL : json_array_get(cur, (size_t)i);
        } else {
            cur = NULL;
        }
        if (!*p) break;
        p++;
    }
    return cur;
}

static int32_t compile_ref(sc *c, json_t *s, const char *ref) {
    char pb[2100];
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (strcmp(k, "$ref") == 0 || is_annotation(k)) continue;
        return sc_fail(c, "keyword '%s' next to '$ref' is not supported (at %s)", k, ptr_of(c, k, pb, sizeof pb));
    }
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ptr, ref) == 0) return gx_ref(c->ir, c->refs[i].rule);
    if (ref[0] != '#') return sc_fail(c, "only references into the same schema ('#/...') are supported, not '%s' (at %s)", ref, ptr_of(c, "$ref", pb, sizeof pb));
    json_t *target = gram_schema_resolve(c->doc, ref);
    if (!target) return sc_fail(c, "'$ref' target '%s' does not exist (at %s)", ref, ptr_of(c, "$ref", pb, sizeof pb));
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? c->cap_refs * 2 : 16;
        ref_memo *r = realloc(c->refs, (size_t)cap * sizeof *r);
        if (!r) {
            c->ir->oom = true;
            return -1;
        }
        c->refs = r;
        c->cap_refs = cap;
    }
    int32_t rule = gram_ir_rule(c->ir, ref, 0);
    char *copy = strdup(ref);
    if (rule < 0 || !copy) {
        free(copy);
        c->ir->oom = true;
        return -1;
    }
    c->refs[c->n_refs++] = (ref_memo){copy, rule};
    /* compile the target where it lives, so its errors name its own pointer */
    char saved[sizeof c->path];
    size_t saved_len = c->plen;
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref + 1);
    c->plen = strlen(c->path);
    int32_t body = compile(c, target);
    memcpy(c->path, saved, sizeof saved);
    c->plen = saved_len;
    if (body < 0) return -1;
    c->ir->rules[rule].body = body;
    return gx_ref(c->ir, rule);
}

/* ---------------------------------------------------------------------------
 * One schema
 * ------------------------------------------------------------------------- */

static const char *const KNOWN_TYPES[] = {"null", "boolean", "object", "array", "string", "number", "integer", NULL};

static bool type_keyword_for(const char *k, const char **type) {
    static const struct {
        const char *kw, *type;
    } map[] = {{"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
               {"items", "array"},       {"prefixItems", "array"}, {"additionalItems", "array"},
               {"minItems", "array"},    {"maxItems", "array"},  {"uniqueItems", "array"},
               {"minLength", "string"},  {"maxLength", "string"}, {"pattern", "string"},
               {"format", NULL},          {"minimum", "number"},  {"maximum", "number"},
               {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"}, {NULL, NULL}};
    for (int i = 0; map[i].kw; i++)
        if (strcmp(map[i].kw, k) == 0) {
            *type = map[i].type;
            return true;
        }
    return false;
}

static int32_t compile_type(sc *c, json_t *s, const char *type) {
    gram_ir *ir = c->ir;
    if (strcmp(type, "null") == 0) return gx_str(ir, gram_json_lit(c->j, 'n'));
    if (strcmp(type, "boolean") == 0)
        return gx_altv(ir, gx_str(ir, gram_json_lit(c->j, 't')), gx_str(ir, gram_json_lit(c->j, 'f')), GX_END);
    if (strcmp(type, "string") == 0) return compile_string(c, s);
    if (strcmp(type, "integer") == 0) return compile_number(c, s, true);
    if (strcmp(type, "number") == 0) return compile_number(c, s, false);
    if (strcmp(type, "array") == 0) return compile_array(c, s);
    if (strcmp(type, "object") == 0) return compile_object(c, s);
    return -1;
}

static int32_t compile_list(sc *c, json_t *s, const char *kw) {
    char pb[2100];
    json_t *list = json_object_get(s, kw);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return sc_fail(c, "'%s' must be a non-empty list (at %s)", kw, ptr_of(c, kw, pb, sizeof pb));
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (strcmp(k, kw) == 0 || is_annotation(k)) continue;
        return sc_fail(c, "keyword '%s' next to 'anyOf'/'oneOf'/'allOf' is not supported (at %s)", k, ptr_of(c, k, pb, sizeof pb));
    }
    size_t n = json_array_size(list);
    if (strcmp(kw, "allOf") == 0) {
        /* one member may constrain; the others must be annotations only */
        size_t pick = n;
        for (size_t i = 0; i < n; i++) {
            json_t *m = json_array_get(list, i);
            bool annot = json_is_true(m) || (json_is_object(m) && json_object_size(m) == 0);
            if (json_is_object(m)) {
                annot = true;
                json_object_foreach(m, k, v) annot = annot && is_annotation(k);
            }
            if (annot) continue;
            if (pick != n) return sc_fail(c, "'allOf' with more than one constraining schema is not supported (at %s)%s", ptr_of(c, kw, pb, sizeof pb), "");
            pick = i;
        }
        if (pick == n) return gx_ref(c->ir, c->j->value);
        return compile_sub(c, json_array_get(list, pick), kw, pick, true);
    }
    int32_t *kids = malloc(n * sizeof *kids);
    if (!kids) {
        c->ir->oom = true;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        kids[i] = compile_sub(c, json_array_get(list, i), kw, i, true);
        if (kids[i] < 0) {
            free(kids);
            return -1;
        }
    }
    int32_t r = gx_alt(c->ir, kids, (int)n);
    free(kids);
    return r;
}

static int32_t compile(sc *c, json_t *s) {
    char pb[2100];
    if (json_is_true(s)) return gx_ref(c->ir, c->j->value);
    if (json_is_false(s)) return sc_fail(c, "schema 'false' allows no value (at %s)%s", ptr_of(c, NULL, pb, sizeof pb), "");
    if (!json_is_object(s)) return sc_fail(c, "a schema must be an object or a boolean (at %s)%s", ptr_of(c, NULL, pb, sizeof pb), "");
    if (++c->depth > SCHEMA_MAX_DEPTH) return sc_fail(c, "schema nested too deeply (at %s)%s", ptr_of(c, NULL, pb, sizeof pb), "");
    int32_t r = -1;
    json_t *ref = json_object_get(s, "$ref");
    const char *k;
    json_t *v;
    if (ref) {
        r = json_is_string(ref) ? compile_ref(c, s, json_string_value(ref))
                                : sc_fail(c, "'$ref' must be a string (at %s)%s", ptr_of(c, "$ref", pb, sizeof pb), "");
        goto out;
    }
    if (json_object_get(s, "enum")) {
        json_t *e = json_object_get(s, "enum");
        r = json_is_array(e) && json_array_size(e) ? compile_enum(c, s, e, "enum")
                                                   : sc_fail(c, "'enum' must be a non-empty list (at %s)%s", ptr_of(c, "enum", pb, sizeof pb), "");
        goto out;
    }
    if (json_object_get(s, "const")) {
        json_t *one = json_array();
        json_array_append(one, json_object_get(s, "const"));
        r = compile_enum(c, s, one, "const");
        json_decref(one);
        goto out;
    }
    if (json_object_get(s, "anyOf")) {
        r = compile_list(c, s, "anyOf");
        goto out;
    }
    if (json_object_get(s, "oneOf")) {
        r = compile_list(c, s, "oneOf");
        goto out;
    }
    if (json_object_get(s, "allOf")) {
        r = compile_list(c, s, "allOf");
        goto out;
    }

    /* the types: given, or implied by the keywords used */
    const char *types[8];
    int n_types = 0;
    json_t *type = json_object_get(s, "type");
    if (type) {
        json_t *list = json_is_array(type) ? type : NULL;
        size_t cnt = list ? json_array_size(list) : 1;
        for (size_t i = 0; i < cnt; i++) {
            json_t *t = list ? json_array_get(list, i) : type;
            const char *name = json_is_string(t) ? json_string_value(t) : "";
            bool known = false;
            for (int q = 0; KNOWN_TYPES[q]; q++) known |= strcmp(KNOWN_TYPES[q], name) == 0;
            if (!known) {
                r = sc_fail(c, "unknown type '%s' (at %s)", name, ptr_of(c, "type", pb, sizeof pb));
                goto out;
            }
            bool dup = false;
            for (int q = 0; q < n_types; q++) dup |= strcmp(types[q], name) == 0;
            if (!dup && n_types < 7) types[n_types++] = name;
        }
        if (n_types == 0) {
            r = sc_fail(c, "'type' lists no type (at %s)%s", ptr_of(c, "type", pb, sizeof pb), "");
            goto out;
        }
    }
    /* every keyword must be known */
    json_object_foreach(s, k, v) {
        const char *implied;
        if (is_annotation(k) || strcmp(k, "type") == 0 || strcmp(k, "nullable") == 0) continue;
        if (type_keyword_for(k, &implied)) {
            if (!type && implied) {
                bool dup = false;
                for (int q = 0; q < n_types; q++) dup |= strcmp(types[q], implied) == 0;
                if (!dup && n_types < 7) types[n_types++] = implied;
            }
            continue;
        }
        r = sc_fail(c, "unsupported keyword '%s' (at %s)", k, ptr_of(c, k, pb, sizeof pb));
        goto out;
    }
    if (!type && json_object_get(s, "format") && n_types == 0) types[n_types++] = "string";
    if (n_types == 0) {
        r = gx_ref(c->ir, c->j->value); /* no constraint: any JSON value */
        goto out;
    }
    if (json_is_true(json_object_get(s, "nullable"))) {
        bool has_null = false;
        for (int q = 0; q < n_types; q++) has_null |= strcmp(types[q], "null") == 0;
        if (!has_null) types[n_types++] = "null";
    }
    int32_t kids[8];
    for (int q = 0; q < n_types; q++) {
        kids[q] = compile_type(c, s, types[q]);
        if (kids[q] < 0) goto out;
    }
    r = gx_alt(c->ir, kids, n_types);
out:
    c->depth--;
    return c->failed ? -1 : r;
}

int gram_schema_compile_sub(gram_ir *ir, const gram_json_rules *j, json_t *doc, json_t *sub, const char *pointer,
                            const char *where, int32_t *out, pdl_error *err) {
    sc c = {.ir = ir, .j = j, .doc = doc, .where = where, .err = err};
    /* the pointer without its "#" is the path messages show after it */
    const char *p = pointer && pointer[0] == '#' ? pointer + 1 : "";
    c.plen = strlen(p) < sizeof c.path ? strlen(p) : sizeof c.path - 1;
    memcpy(c.path, p, c.plen);
    c.path[c.plen] = 0;
    int32_t r = compile(&c, sub);
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ptr);
    free(c.refs);
    if (c.failed) return -1;
    if (r < 0 || ir->oom) return err_fail(err, "%s: out of memory", where);
    *out = r;
    return 0;
}

int gram_schema_compile_json(gram_ir *ir, const gram_json_rules *j, json_t *schema, const char *where, int32_t *out,
                             pdl_error *err) {
    return gram_schema_compile_sub(ir, j, schema, schema, "#", where, out, err);
}

int gram_schema_compile(gram_ir *ir, const gram_json_rules *j, const char *text, size_t len, const char *where,
                        int32_t *out, pdl_error *err) {
    json_error_t je;
    json_t *schema = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!schema)
        return err_fail(err, "%s: invalid JSON at line %d, column %d: %s", where, je.line, je.column, je.text);
    int rc = gram_schema_compile_json(ir, j, schema, where, out, err);
    json_decref(schema);
    return rc;
}
