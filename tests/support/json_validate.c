/*
 * json_validate.c - the grammar tests' independent JSON Schema validator
 * (see json_validate.h). Plain recursive checks, one keyword at a time.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "json_validate.h"

#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jv {
    json_t *doc;
    char *why;
    size_t cap;
    int depth;
} jv;

static bool fail(jv *v, const char *path, const char *what) {
    if (v->why && v->why[0] == 0) snprintf(v->why, v->cap, "%s: %s", path[0] ? path : "(root)", what);
    return false;
}

static bool valid(jv *v, json_t *x, json_t *s, const char *path);

/* ---- formats ------------------------------------------------------------ */

static bool digits(const char *s, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

static int num(const char *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) v = v * 10 + (s[i] - '0');
    return v;
}

static bool date_part(const char *s) {
    if (!digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2)) return false;
    int y = num(s, 4), m = num(s + 5, 2), d = num(s + 8, 2);
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return false;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    int max = days[m - 1] + (m == 2 && leap);
    return d <= max;
}

bool jv_is_date(const char *s) { return strlen(s) == 10 && date_part(s); }

bool jv_is_time(const char *s) {
    if (!digits(s, 2) || s[2] != ':' || !digits(s + 3, 2) || s[5] != ':' || !digits(s + 6, 2)) return false;
    if (num(s, 2) > 23 || num(s + 3, 2) > 59 || num(s + 6, 2) > 60) return false;
    const char *p = s + 8;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9') return false;
        while (*p >= '0' && *p <= '9') p++;
    }
    if ((*p == 'Z' || *p == 'z') && p[1] == 0) return true;
    if ((*p == '+' || *p == '-') && digits(p + 1, 2) && p[3] == ':' && digits(p + 4, 2) && p[6] == 0)
        return num(p + 1, 2) <= 23 && num(p + 4, 2) <= 59;
    return false;
}

bool jv_is_date_time(const char *s) {
    return strlen(s) > 11 && date_part(s) && (s[10] == 'T' || s[10] == 't') && jv_is_time(s + 11);
}

bool jv_is_uuid(const char *s) {
    if (strlen(s) != 36) return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        char c = s[i];
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (dash ? c != '-' : !hex) return false;
    }
    return true;
}

bool jv_is_email(const char *s) {
    const char *at = strchr(s, '@');
    if (!at || strchr(at + 1, '@') || at == s) return false;
    /* local part: atoms of allowed characters joined by single dots */
    static const char special[] = "!#$%&'*+/=?^_`{|}~-";
    bool prev_dot = true;
    for (const char *p = s; p < at; p++) {
        char c = *p;
        if (c == '.') {
            if (prev_dot) return false;
            prev_dot = true;
            continue;
        }
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr(special, c);
        if (!ok || c == 0) return false;
        prev_dot = false;
    }
    if (prev_dot) return false;
    /* domain: at least two labels of letters, digits and inner hyphens, 1..63 long */
    int labels = 0;
    const char *p = at + 1;
    for (;;) {
        const char *q = p;
        while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-') q++;
        long len = q - p;
        if (len < 1 || len > 63 || p[0] == '-' || q[-1] == '-') return false;
        labels++;
        if (*q == 0) break;
        if (*q != '.') return false;
        p = q + 1;
    }
    return labels >= 2;
}

/* ---- helpers ------------------------------------------------------------ */

static size_t utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static bool json_equal_num(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_equal_num(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *x;
        json_object_foreach(a, k, x) {
            json_t *y = json_object_get(b, k);
            if (!y || !json_equal_num(x, y)) return false;
        }
        return true;
    }
    return json_equal(a, b);
}

static bool has_type(json_t *x, const char *t) {
    if (!strcmp(t, "null")) return json_is_null(x);
    if (!strcmp(t, "boolean")) return json_is_boolean(x);
    if (!strcmp(t, "string")) return json_is_string(x);
    if (!strcmp(t, "object")) return json_is_object(x);
    if (!strcmp(t, "array")) return json_is_array(x);
    if (!strcmp(t, "number")) return json_is_number(x);
    if (!strcmp(t, "integer"))
        return json_is_integer(x) || (json_is_real(x) && floor(json_real_value(x)) == json_real_value(x));
    return false;
}

static json_t *deref(jv *v, const char *ref) {
    if (strcmp(ref, "#") == 0) return v->doc;
    if (strncmp(ref, "#/", 2) != 0) return NULL;
    json_t *cur = v->doc;
    char seg[512];
    const char *p = ref + 2;
    while (cur && *p) {
        size_t n = 0;
        while (*p && *p != '/' && n < sizeof seg - 1) {
            if (p[0] == '~' && p[1] == '1') seg[n++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0') seg[n++] = '~', p += 2;
            else seg[n++] = *p++;
        }
        seg[n] = 0;
        if (*p == '/') p++;
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)atol(seg)) : json_object_get(cur, seg);
    }
    return cur;
}

static bool pattern_matches(const char *re, const char *s, size_t n) {
    int code;
    PCRE2_SIZE off;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    if (!c) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

static void sub(char *out, size_t cap, const char *path, const char *seg) { snprintf(out, cap, "%s/%s", path, seg); }

/* ---- the keywords ------------------------------------------------------- */

static bool valid(jv *v, json_t *x, json_t *s, const char *path) {
    if (json_is_true(s)) return true;
    if (json_is_false(s)) return fail(v, path, "schema false");
    if (!json_is_object(s)) return fail(v, path, "schema is not an object");
    if (++v->depth > 200) return fail(v, path, "too deep");
    bool ok = true;
    char p2[1024];
    json_t *k;

    if ((k = json_object_get(s, "$ref"))) {
        json_t *t = deref(v, json_string_value(k));
        ok = t ? valid(v, x, t, path) : fail(v, path, "bad $ref");
    }
    if (ok && (k = json_object_get(s, "type"))) {
        bool any = false;
        if (json_is_string(k)) any = has_type(x, json_string_value(k));
        for (size_t i = 0; json_is_array(k) && i < json_array_size(k); i++)
            any |= has_type(x, json_string_value(json_array_get(k, i)));
        if (!any && json_is_true(json_object_get(s, "nullable")) && json_is_null(x)) any = true;
        if (!any) ok = fail(v, path, "wrong type");
    }
    if (ok && (k = json_object_get(s, "enum"))) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(k); i++) any |= json_equal_num(x, json_array_get(k, i));
        if (!any) ok = fail(v, path, "not one of enum");
    }
    if (ok && (k = json_object_get(s, "const")) && !json_equal_num(x, k)) ok = fail(v, path, "not the const");
    if (ok && json_is_string(x)) {
        size_t n = utf8_len(json_string_value(x), json_string_length(x));
        if ((k = json_object_get(s, "minLength")) && (json_int_t)n < json_integer_value(k)) ok = fail(v, path, "too short");
        if (ok && (k = json_object_get(s, "maxLength")) && (json_int_t)n > json_integer_value(k)) ok = fail(v, path, "too long");
        if (ok && (k = json_object_get(s, "pattern")) &&
            !pattern_matches(json_string_value(k), json_string_value(x), json_string_length(x)))
            ok = fail(v, path, "pattern does not match");
        if (ok && (k = json_object_get(s, "format"))) {
            const char *f = json_string_value(k), *t = json_string_value(x);
            bool good = !strcmp(f, "date") ? jv_is_date(t) : !strcmp(f, "time") ? jv_is_time(t)
                      : !strcmp(f, "date-time") ? jv_is_date_time(t) : !strcmp(f, "uuid") ? jv_is_uuid(t)
                      : !strcmp(f, "email") ? jv_is_email(t) : true;
            if (!good || strlen(t) != json_string_length(x)) ok = fail(v, path, "bad format");
        }
    }
    if (ok && json_is_number(x)) {
        double d = json_number_value(x);
        json_t *ex;
        if ((k = json_object_get(s, "minimum"))) {
            ex = json_object_get(s, "exclusiveMinimum");
            if (json_is_true(ex) ? !(d > json_number_value(k)) : !(d >= json_number_value(k))) ok = fail(v, path, "below minimum");
        }
        if (ok && (k = json_object_get(s, "maximum"))) {
            ex = json_object_get(s, "exclusiveMaximum");
            if (json_is_true(ex) ? !(d < json_number_value(k)) : !(d <= json_number_value(k))) ok = fail(v, path, "above maximum");
        }
        if (ok && (k = json_object_get(s, "exclusiveMinimum")) && json_is_number(k) && !(d > json_number_value(k)))
            ok = fail(v, path, "not above exclusiveMinimum");
        if (ok && (k = json_object_get(s, "exclusiveMaximum")) && json_is_number(k) && !(d < json_number_value(k)))
            ok = fail(v, path, "not below exclusiveMaximum");
    }
    if (ok && json_is_array(x)) {
        size_t n = json_array_size(x);
        if ((k = json_object_get(s, "minItems")) && (json_int_t)n < json_integer_value(k)) ok = fail(v, path, "too few items");
        if (ok && (k = json_object_get(s, "maxItems")) && (json_int_t)n > json_integer_value(k)) ok = fail(v, path, "too many items");
        json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
        json_t *rest = items;
        if (json_is_array(items)) {
            prefix = items;
            rest = json_object_get(s, "additionalItems");
        }
        size_t np = prefix ? json_array_size(prefix) : 0;
        for (size_t i = 0; ok && i < n; i++) {
            char idx[32];
            snprintf(idx, sizeof idx, "%zu", i);
            sub(p2, sizeof p2, path, idx);
            json_t *is = i < np ? json_array_get(prefix, i) : rest;
            if (is) ok = valid(v, json_array_get(x, i), is, p2);
        }
    }
    if (ok && json_is_object(x)) {
        json_t *props = json_object_get(s, "properties"), *add = json_object_get(s, "additionalProperties");
        json_t *req = json_object_get(s, "required");
        for (size_t i = 0; ok && req && i < json_array_size(req); i++)
            if (!json_object_get(x, json_string_value(json_array_get(req, i)))) ok = fail(v, path, "missing required property");
        const char *key;
        json_t *val;
        json_object_foreach(x, key, val) {
            if (!ok) break;
            sub(p2, sizeof p2, path, key);
            json_t *ps = props ? json_object_get(props, key) : NULL;
            if (ps) ok = valid(v, val, ps, p2);
            else if (add) ok = valid(v, val, add, p2);
        }
    }
    if (ok && (k = json_object_get(s, "allOf")))
        for (size_t i = 0; ok && i < json_array_size(k); i++) ok = valid(v, x, json_array_get(k, i), path);
    if (ok && (k = json_object_get(s, "anyOf"))) {
        bool any = false;
        for (size_t i = 0; !any && i < json_array_size(k); i++) {
            char *saved = v->why;
            v->why = NULL;
            any = valid(v, x, json_array_get(k, i), path);
            v->why = saved;
        }
        if (!any) ok = fail(v, path, "no anyOf branch matches");
    }
    if (ok && (k = json_object_get(s, "oneOf"))) {
        int cnt = 0;
        for (size_t i = 0; i < json_array_size(k); i++) {
            char *saved = v->why;
            v->why = NULL;
            cnt += valid(v, x, json_array_get(k, i), path);
            v->why = saved;
        }
        if (cnt != 1) ok = fail(v, path, cnt ? "several oneOf branches match" : "no oneOf branch matches");
    }
    v->depth--;
    return ok;
}

bool jv_validate(json_t *instance, json_t *schema, json_t *doc, char *why, size_t why_cap) {
    if (why && why_cap) why[0] = 0;
    jv v = {.doc = doc, .why = why, .cap = why_cap};
    return valid(&v, instance, schema, "");
}

/* ---- syntax ------------------------------------------------------------- */

typedef struct rd {
    const char *p, *end;
    int depth;
} rd;

static void rd_ws(rd *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static bool rd_lit(rd *r, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, s, n) != 0) return false;
    r->p += n;
    return true;
}

static bool rd_digits(rd *r) {
    const char *s = r->p;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    return r->p > s;
}

static bool rd_hex4(rd *r, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        if (r->p >= r->end) return false;
        char c = *r->p++;
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return false;
        *v = *v * 16 + (unsigned)h;
    }
    return true;
}

static bool rd_string(rd *r) {
    if (!rd_lit(r, "\"")) return false;
    while (r->p < r->end) {
        unsigned char c = (unsigned char)*r->p;
        if (c == '"') {
            r->p++;
            return true;
        }
        if (c < 0x20) return false;
        if (c == '\\') {
            r->p++;
            if (r->p >= r->end) return false;
            char e = *r->p++;
            if (e == 'u') {
                unsigned v, w;
                if (!rd_hex4(r, &v)) return false;
                if (v >= 0xDC00 && v <= 0xDFFF) return false;
                if (v >= 0xD800 && v <= 0xDBFF) {
                    if (!rd_lit(r, "\\u") || !rd_hex4(r, &w) || w < 0xDC00 || w > 0xDFFF) return false;
                }
            } else if (!strchr("\"\\/bfnrt", e)) {
                return false;
            }
            continue;
        }
        /* UTF-8: a lead byte and its continuation bytes */
        int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || r->end - r->p < len) return false;
        for (int i = 1; i < len; i++)
            if (((unsigned char)r->p[i] & 0xC0) != 0x80) return false;
        r->p += len;
    }
    return false;
}

static bool rd_value(rd *r) {
    if (r->p >= r->end || ++r->depth > 500) return false;
    bool ok = false;
    char c = *r->p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        r->p++;
        rd_ws(r);
        if (r->p < r->end && *r->p == close) {
            r->p++;
            ok = true;
        } else {
            for (;;) {
                if (c == '{') {
                    if (!rd_string(r)) break;
                    rd_ws(r);
                    if (!rd_lit(r, ":")) break;
                    rd_ws(r);
                }
                if (!rd_value(r)) break;
                rd_ws(r);
                if (rd_lit(r, ",")) {
                    rd_ws(r);
                    continue;
                }
                ok = r->p < r->end && *r->p == close;
                if (ok) r->p++;
                break;
            }
        }
    } else if (c == '"') {
        ok = rd_string(r);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        if (c == '-') r->p++;
        if (r->p < r->end && *r->p == '0') r->p++;
        else if (!rd_digits(r)) return false;
        ok = true;
        if (r->p < r->end && *r->p == '.') {
            r->p++;
            ok = rd_digits(r);
        }
        if (ok && r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
            r->p++;
            if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
            ok = rd_digits(r);
        }
    } else {
        ok = rd_lit(r, "true") || rd_lit(r, "false") || rd_lit(r, "null");
    }
    r->depth--;
    return ok;
}

bool jv_syntax_ok(const char *text, size_t n) {
    rd r = {text, text + n, 0};
    return rd_value(&r) && r.p == r.end;
}
