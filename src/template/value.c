/*
 * value.c - template values with Python's semantics: truthiness, equality,
 * ordering, hashing, len() and iteration, str() and repr() (including the
 * shortest round-trip float repr), and the insertion-ordered dict.
 *
 * Not here: operators (eval.c), methods and filters (methods.c, filters.c),
 * JSON (json_value.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_internal.h"

/* ---- constructors ---- */

tv tv_none(void) { return (tv){.kind = TV_NONE}; }
tv tv_bool(bool b) { return (tv){.kind = TV_BOOL, .u.b = b}; }
tv tv_int(int64_t i) { return (tv){.kind = TV_INT, .u.i = i}; }
tv tv_float(double f) { return (tv){.kind = TV_FLOAT, .u.f = f}; }
tv tv_str(const char *p, size_t n) { return (tv){.kind = TV_STR, .u.s = {p, n}}; }
tv tv_cstr(const char *s) { return tv_str(s, strlen(s)); }
tv tv_absent(void) { return (tv){.kind = TV_UNDEF, .sub = UNDEF_ABSENT}; }
bool tv_given(tv v) { return !(v.kind == TV_UNDEF && v.sub == UNDEF_ABSENT); }

tv tv_undef_name(const char *name, size_t n) { return (tv){.kind = TV_UNDEF, .sub = UNDEF_NAME, .u.s = {name, n}}; }

tv tv_undef_attr(tv owner, const char *name, size_t n) {
    tv u = {.kind = TV_UNDEF, .sub = UNDEF_ATTR, .u.s = {name, n}};
    u.aux = (uint16_t)(owner.kind | (owner.kind == TV_LIST ? owner.sub << 8 : 0));
    return u;
}

tv tv_undef_msg(rt *r, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    return (tv){.kind = TV_UNDEF, .sub = UNDEF_MSG, .u.s = {rt_strdup(r, buf, (size_t)n), (size_t)n}};
}

tv tv_strdup(rt *r, const char *p, size_t n) { return tv_str(rt_strdup(r, p, n), n); }

tv tv_list_new(rt *r, size_t n, int sub) {
    if (n > SIZE_MAX / sizeof(tv) / 2) rt_fail(r, "list too large");
    tlist *l = rt_alloc(r, sizeof *l);
    l->n = n;
    l->items = n ? rt_alloc(r, n * sizeof(tv)) : NULL;
    return (tv){.kind = TV_LIST, .sub = (uint8_t)sub, .u.l = l};
}

tv tv_dict_new(rt *r, size_t cap, int kind) {
    tdict *d = rt_alloc(r, sizeof *d);
    if (cap) {
        d->keys = rt_alloc(r, cap * sizeof(tv));
        d->vals = rt_alloc(r, cap * sizeof(tv));
        d->cap = cap;
    }
    return (tv){.kind = (uint8_t)kind, .u.d = d};
}

tv tv_func(rt *r, const char *name, tmpl_builtin fn, tv self) {
    tfunc *f = rt_alloc(r, sizeof *f);
    f->name = name;
    f->call = fn;
    f->self = self;
    return (tv){.kind = TV_FUNC, .u.fn = f};
}

/* ---- type names and undefined errors ---- */

static const char *list_type_name(int sub) {
    static const char *const names[] = {"list", "tuple", "generator", "dict_items", "dict_keys", "dict_values", "range"};
    return sub < 7 ? names[sub] : "list";
}

static const char *kind_type_name(int kind, int sub) {
    switch (kind) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return list_type_name(sub);
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_FUNC: return "builtin_function_or_method";
    case TV_MACRO: return "Macro";
    case TV_LOOP: return "LoopContext";
    }
    return "object";
}

const char *tv_type_name(tv v) { return kind_type_name(v.kind, v.sub); }

void tv_undef_fail(rt *r, tv u) {
    switch (u.sub) {
    case UNDEF_ATTR: {
        int kind = u.aux & 0xff, sub = u.aux >> 8;
        if (kind == TV_NONE) rt_fail(r, "'None' has no attribute '%.*s'", (int)u.u.s.n, u.u.s.p);
        const char *t = kind == TV_NS ? "jinja2.utils.Namespace" : kind_type_name(kind, sub);
        rt_fail(r, "'%s object' has no attribute '%.*s'", t, (int)u.u.s.n, u.u.s.p);
    }
    case UNDEF_MSG: rt_fail(r, "%.*s", (int)u.u.s.n, u.u.s.p);
    default: rt_fail(r, "'%.*s' is undefined", (int)u.u.s.n, u.u.s.p);
    }
}

bool tv_is_num(tv v) { return v.kind == TV_INT || v.kind == TV_FLOAT || v.kind == TV_BOOL; }
double tv_num(tv v) { return v.kind == TV_FLOAT ? v.u.f : v.kind == TV_BOOL ? (double)v.u.b : (double)v.u.i; }

/* ---- truth, equality, order, hash ---- */

bool tv_truthy(rt *r, tv v) {
    (void)r;
    switch (v.kind) {
    case TV_UNDEF:
    case TV_NONE: return false;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s.n > 0;
    case TV_LIST: return v.sub == LIST_GEN || v.u.l->n > 0;
    case TV_DICT: return v.u.d->n > 0;
    default: return true;
    }
}

/* int vs float compared exactly, as Python does */
static int cmp_int_float(int64_t i, double f) {
    if (isnan(f)) return 2; /* unordered */
    if (f >= 9223372036854775808.0) return -1;
    if (f < -9223372036854775808.0) return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i < fi) return -1;
    if (i > fi) return 1;
    return fl < f ? -1 : 0;
}

static int cmp_num(tv a, tv b) {
    if (a.kind == TV_FLOAT && b.kind == TV_FLOAT) {
        if (isnan(a.u.f) || isnan(b.u.f)) return 2;
        return a.u.f < b.u.f ? -1 : a.u.f > b.u.f;
    }
    if (a.kind == TV_FLOAT) {
        int c = cmp_int_float(b.kind == TV_BOOL ? b.u.b : b.u.i, a.u.f);
        return c == 2 ? 2 : -c;
    }
    if (b.kind == TV_FLOAT) return cmp_int_float(a.kind == TV_BOOL ? a.u.b : a.u.i, b.u.f);
    int64_t x = a.kind == TV_BOOL ? a.u.b : a.u.i, y = b.kind == TV_BOOL ? b.u.b : b.u.i;
    return x < y ? -1 : x > y;
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn) {
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c) return c < 0 ? -1 : 1;
    return an < bn ? -1 : an > bn;
}

/* Nesting deeper than this compares unequal instead of recursing further
 * (Python would raise RecursionError). */
#define MAX_VALUE_DEPTH 1000

static bool equal_depth(tv a, tv b, int depth);

bool tv_equal(tv a, tv b) { return equal_depth(a, b, 0); }

static bool equal_depth(tv a, tv b, int depth) {
    if (depth > MAX_VALUE_DEPTH) return false;
    if (tv_is_num(a) && tv_is_num(b)) return cmp_num(a, b) == 0;
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case TV_UNDEF:
    case TV_NONE: return true;
    case TV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case TV_LIST: {
        if (a.u.l == b.u.l) return true;
        bool a_tuple = a.sub == LIST_TUPLE, b_tuple = b.sub == LIST_TUPLE;
        if (a.sub == LIST_GEN || b.sub == LIST_GEN || a_tuple != b_tuple) return false;
        if ((a.sub == LIST_PLAIN) != (b.sub == LIST_PLAIN) && !a_tuple) return false;
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_depth(a.u.l->items[i], b.u.l->items[i], depth + 1)) return false;
        return true;
    }
    case TV_DICT: {
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            tv *v = dict_get(b.u.d, a.u.d->keys[i]);
            if (!v || !equal_depth(a.u.d->vals[i], *v, depth + 1)) return false;
        }
        return true;
    }
    case TV_NS: return a.u.d == b.u.d;
    case TV_FUNC: return a.u.fn == b.u.fn;
    case TV_MACRO: return a.u.m == b.u.m;
    case TV_LOOP: return a.u.lp == b.u.lp;
    }
    return false;
}

int tv_compare(rt *r, tv a, tv b, const char *op) {
    if (a.kind == TV_UNDEF) tv_undef_fail(r, a);
    if (b.kind == TV_UNDEF) tv_undef_fail(r, b);
    if (tv_is_num(a) && tv_is_num(b)) {
        int c = cmp_num(a, b);
        return c == 2 ? 2 : c;
    }
    if (a.kind == TV_STR && b.kind == TV_STR) return cmp_bytes(a.u.s.p, a.u.s.n, b.u.s.p, b.u.s.n);
    if (a.kind == TV_LIST && b.kind == TV_LIST && a.sub == b.sub && (a.sub == LIST_PLAIN || a.sub == LIST_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (tv_equal(a.u.l->items[i], b.u.l->items[i])) continue;
            if (++r->depth > r->opt.max_depth) rt_fail(r, "maximum recursion depth exceeded in comparison");
            int c = tv_compare(r, a.u.l->items[i], b.u.l->items[i], op);
            r->depth--;
            return c;
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    rt_fail(r, "'%s' not supported between instances of '%s' and '%s'", op, tv_type_name(a), tv_type_name(b));
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t hash_depth(tv v, int depth);

uint64_t tv_hash(tv v) { return hash_depth(v, 0); }

static uint64_t hash_depth(tv v, int depth) {
    if (depth > MAX_VALUE_DEPTH) return 0;
    switch (v.kind) {
    case TV_STR: {
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < v.u.s.n; i++) h = (h ^ (unsigned char)v.u.s.p[i]) * 1099511628211ULL;
        return h;
    }
    case TV_BOOL: return mix64((uint64_t)v.u.b);
    case TV_INT: return mix64((uint64_t)v.u.i);
    case TV_FLOAT:
        if (v.u.f == floor(v.u.f) && fabs(v.u.f) < 9.2e18) return mix64((uint64_t)(int64_t)v.u.f);
        {
            uint64_t bits;
            memcpy(&bits, &v.u.f, sizeof bits);
            return mix64(bits);
        }
    case TV_LIST: {
        uint64_t h = 0x345678;
        for (size_t i = 0; i < v.u.l->n; i++) h = mix64(h ^ hash_depth(v.u.l->items[i], depth + 1));
        return h;
    }
    case TV_NS: return mix64((uint64_t)(uintptr_t)v.u.d);
    default: return (uint64_t)v.kind * 0x9e3779b97f4a7c15ULL;
    }
}

/* ---- dict ---- */

static bool hashable_depth(tv k, int depth) {
    if (k.kind == TV_LIST) {
        if (k.sub != LIST_TUPLE || depth > MAX_VALUE_DEPTH) return false;
        for (size_t i = 0; i < k.u.l->n; i++)
            if (!hashable_depth(k.u.l->items[i], depth + 1)) return false;
        return true;
    }
    return k.kind != TV_DICT;
}

static bool hashable(tv k) { return hashable_depth(k, 0); }

static void dict_reindex(rt *r, tdict *d) {
    size_t cap = 16;
    while (cap < d->n * 2 + 2) cap *= 2;
    d->index = rt_alloc(r, cap * sizeof *d->index);
    d->index_cap = cap;
    for (size_t i = 0; i < d->n; i++) {
        size_t h = (size_t)tv_hash(d->keys[i]) & (cap - 1);
        while (d->index[h]) h = (h + 1) & (cap - 1);
        d->index[h] = (int32_t)i + 1;
    }
}

static tv *dict_find(const tdict *d, tv key) {
    if (d->index_cap) {
        size_t h = (size_t)tv_hash(key) & (d->index_cap - 1);
        while (d->index[h]) {
            size_t i = (size_t)d->index[h] - 1;
            if (tv_equal(d->keys[i], key)) return &d->vals[i];
            h = (h + 1) & (d->index_cap - 1);
        }
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(d->keys[i], key)) return &d->vals[i];
    return NULL;
}

tv *dict_get(const tdict *d, tv key) { return dict_find(d, key); }

tv *dict_get_str(const tdict *d, const char *k, size_t n) { return dict_find(d, tv_str(k, n)); }

void dict_set(rt *r, tdict *d, tv key, tv val) {
    if (!hashable(key)) rt_fail(r, "unhashable type: '%s'", tv_type_name(key));
    tv *slot = dict_find(d, key);
    if (slot) {
        *slot = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > INT32_MAX) rt_fail(r, "dict too large");
        tv *keys = rt_alloc(r, cap * sizeof(tv)), *vals = rt_alloc(r, cap * sizeof(tv));
        if (d->n) {
            memcpy(keys, d->keys, d->n * sizeof(tv));
            memcpy(vals, d->vals, d->n * sizeof(tv));
        }
        d->keys = keys;
        d->vals = vals;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    if (d->n > 8) {
        if (!d->index_cap || d->n * 2 > d->index_cap) {
            dict_reindex(r, d);
        } else {
            size_t h = (size_t)tv_hash(key) & (d->index_cap - 1);
            while (d->index[h]) h = (h + 1) & (d->index_cap - 1);
            d->index[h] = (int32_t)d->n;
        }
    }
}

/* ---- growable list ---- */

void vec_push(rt *r, tvec *v, tv x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        if (cap > SIZE_MAX / sizeof(tv) / 2) rt_fail(r, "list too large");
        tv *items = rt_alloc(r, cap * sizeof(tv));
        if (v->n) memcpy(items, v->items, v->n * sizeof(tv));
        v->items = items;
        v->cap = cap;
    }
    v->items[v->n++] = x;
}

tv vec_done(rt *r, tvec *v, int sub) {
    tlist *l = rt_alloc(r, sizeof *l);
    l->n = v->n;
    l->items = v->items;
    return (tv){.kind = TV_LIST, .sub = (uint8_t)sub, .u.l = l};
}

/* ---- iteration and len ---- */

tv tv_iterate(rt *r, tv v) {
    switch (v.kind) {
    case TV_LIST: {
        if (v.sub == LIST_PLAIN) return v;
        tv out = v;
        out.sub = LIST_PLAIN;
        return out;
    }
    case TV_STR: {
        size_t n = utf8_count(v.u.s.p, v.u.s.n);
        tv out = tv_list_new(r, n, LIST_PLAIN);
        const char *p = v.u.s.p;
        size_t left = v.u.s.n;
        for (size_t i = 0; i < n; i++) {
            uint32_t cp;
            size_t w = utf8_next(p, left, &cp);
            out.u.l->items[i] = tv_str(p, w);
            p += w;
            left -= w;
        }
        return out;
    }
    case TV_DICT: {
        tv out = tv_list_new(r, v.u.d->n, LIST_PLAIN);
        if (v.u.d->n) memcpy(out.u.l->items, v.u.d->keys, v.u.d->n * sizeof(tv));
        return out;
    }
    case TV_UNDEF: return tv_list_new(r, 0, LIST_PLAIN);
    default: rt_fail(r, "'%s' object is not iterable", tv_type_name(v));
    }
}

int64_t tv_len(rt *r, tv v) {
    switch (v.kind) {
    case TV_STR: return (int64_t)utf8_count(v.u.s.p, v.u.s.n);
    case TV_LIST:
        if (v.sub == LIST_GEN) break;
        return (int64_t)v.u.l->n;
    case TV_DICT: return (int64_t)v.u.d->n;
    case TV_UNDEF: return 0;
    default: break;
    }
    rt_fail(r, "object of type '%s' has no len()", tv_type_name(v));
}

/* ---- string builder ---- */

void sb_put(rt *r, tstrb *b, const char *s, size_t n) {
    if (!n) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n) {
            if (cap > SIZE_MAX / 4) rt_fail(r, "string too large");
            cap *= 2;
        }
        char *p = rt_alloc(r, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void sb_putc(rt *r, tstrb *b, char c) { sb_put(r, b, &c, 1); }

void sb_printf(rt *r, tstrb *b, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(r, b, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

tv sb_done(tstrb *b) { return tv_str(b->p ? b->p : "", b->n); }

/* ---- numbers ---- */

void fmt_float_repr(double f, char *buf, size_t cap) {
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    /* the shortest %.Ne that reads back exactly */
    char e[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* split into sign, digits and exponent */
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    size_t k = 0;
#define PUT(c)                      \
    do {                            \
        if (k + 1 < cap) buf[k++] = (c); \
    } while (0)
    if (neg) PUT('-');
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            PUT('0');
            PUT('.');
            for (int i = 0; i < -exp10 - 1; i++) PUT('0');
            for (int i = 0; i < nd; i++) PUT(digits[i]);
        } else {
            for (int i = 0; i <= exp10; i++) PUT(i < nd ? digits[i] : '0');
            PUT('.');
            if (nd > exp10 + 1) {
                for (int i = exp10 + 1; i < nd; i++) PUT(digits[i]);
            } else {
                PUT('0');
            }
        }
    } else {
        PUT(digits[0]);
        if (nd > 1) {
            PUT('.');
            for (int i = 1; i < nd; i++) PUT(digits[i]);
        }
        PUT('e');
        PUT(exp10 < 0 ? '-' : '+');
        char ex[16];
        snprintf(ex, sizeof ex, "%02d", exp10 < 0 ? -exp10 : exp10);
        for (char *c = ex; *c; c++) PUT(*c);
    }
#undef PUT
    buf[k] = '\0';
}

static bool is_alnum_ascii(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Strips Python whitespace; copies the rest without single underscores
 * between digits. Returns false for misplaced underscores. */
static bool clean_number(const char *p, size_t n, char *buf, size_t cap) {
    size_t a = ws_prefix(p, n);
    size_t b = n - ws_suffix(p + a, n - a);
    if (a >= b || b - a >= cap) return false;
    size_t k = 0;
    for (size_t i = a; i < b; i++) {
        if (p[i] == '_') {
            bool ok = i > a && i + 1 < b && is_alnum_ascii(p[i - 1]) && is_alnum_ascii(p[i + 1]);
            if (!ok) return false;
            continue;
        }
        if (!p[i]) return false;
        buf[k++] = p[i];
    }
    buf[k] = '\0';
    return true;
}

bool parse_py_int(const char *p, size_t n, int base, int64_t *out) {
    char buf[128];
    if (!clean_number(p, n, buf, sizeof buf)) return false;
    char *s = buf;
    bool neg = false;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    if (base == 16 && s[0] == '0' && (s[1] | 32) == 'x') s += 2;
    else if (base == 8 && s[0] == '0' && (s[1] | 32) == 'o') s += 2;
    else if (base == 2 && s[0] == '0' && (s[1] | 32) == 'b') s += 2;
    if (!*s) return false;
    for (char *c = s; *c; c++) {
        int d = *c >= '0' && *c <= '9' ? *c - '0' : (*c | 32) >= 'a' && (*c | 32) <= 'z' ? (*c | 32) - 'a' + 10 : 99;
        if (d >= base) return false;
    }
    errno = 0;
    unsigned long long v = strtoull(s, NULL, base);
    if (errno == ERANGE || v > (unsigned long long)INT64_MAX + (neg ? 1 : 0)) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

bool parse_py_float(const char *p, size_t n, double *out) {
    char buf[128];
    if (!clean_number(p, n, buf, sizeof buf)) return false;
    const char *s = buf;
    if (*s == '+' || *s == '-') s++;
    const char *words[] = {"inf", "infinity", "nan"};
    for (int i = 0; i < 3; i++) {
        size_t wl = strlen(words[i]);
        if (strlen(s) == wl) {
            bool eq = true;
            for (size_t j = 0; j < wl; j++) eq = eq && (s[j] | 32) == words[i][j];
            if (eq) {
                double v = i == 2 ? NAN : INFINITY;
                *out = buf[0] == '-' ? -v : v;
                return true;
            }
        }
    }
    /* digits [. digits] [e [sign] digits], at least one mantissa digit */
    const char *c = s;
    int md = 0;
    while (*c >= '0' && *c <= '9') c++, md++;
    if (*c == '.') {
        c++;
        while (*c >= '0' && *c <= '9') c++, md++;
    }
    if (!md) return false;
    if ((*c | 32) == 'e') {
        c++;
        if (*c == '+' || *c == '-') c++;
        if (!(*c >= '0' && *c <= '9')) return false;
        while (*c >= '0' && *c <= '9') c++;
    }
    if (*c) return false;
    *out = strtod(buf, NULL);
    return true;
}

/* ---- str() and repr() ---- */

static void write_repr_str(rt *r, tstrb *b, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sb_putc(r, b, q);
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t w = utf8_next(p + i, n - i, &cp);
        if (cp == (uint32_t)q || cp == '\\') {
            sb_putc(r, b, '\\');
            sb_putc(r, b, (char)cp);
        } else if (cp == '\n') {
            sb_put(r, b, "\\n", 2);
        } else if (cp == '\r') {
            sb_put(r, b, "\\r", 2);
        } else if (cp == '\t') {
            sb_put(r, b, "\\t", 2);
        } else if (!py_isprintable(cp)) {
            if (cp <= 0xff) sb_printf(r, b, "\\x%02x", cp);
            else if (cp <= 0xffff) sb_printf(r, b, "\\u%04x", cp);
            else sb_printf(r, b, "\\U%08x", cp);
        } else {
            sb_put(r, b, p + i, w);
        }
        i += w;
    }
    sb_putc(r, b, q);
}

static void write_items(rt *r, tstrb *b, const tlist *l, const char *open, const char *close, bool one_comma) {
    sb_put(r, b, open, strlen(open));
    for (size_t i = 0; i < l->n; i++) {
        if (i) sb_put(r, b, ", ", 2);
        tv_write_repr(r, b, l->items[i]);
    }
    if (one_comma && l->n == 1) sb_putc(r, b, ',');
    sb_put(r, b, close, strlen(close));
}

static void write_dict(rt *r, tstrb *b, const tdict *d) {
    sb_putc(r, b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) sb_put(r, b, ", ", 2);
        tv_write_repr(r, b, d->keys[i]);
        sb_put(r, b, ": ", 2);
        tv_write_repr(r, b, d->vals[i]);
    }
    sb_putc(r, b, '}');
}

static void write_value(rt *r, tstrb *b, tv v, bool repr) {
    switch (v.kind) {
    case TV_UNDEF:
        if (repr) sb_put(r, b, "Undefined", 9);
        return;
    case TV_NONE: sb_put(r, b, "None", 4); return;
    case TV_BOOL: sb_put(r, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5); return;
    case TV_INT: sb_printf(r, b, "%" PRId64, v.u.i); return;
    case TV_FLOAT: {
        char buf[48];
        fmt_float_repr(v.u.f, buf, sizeof buf);
        sb_put(r, b, buf, strlen(buf));
        return;
    }
    case TV_STR:
        if (repr) write_repr_str(r, b, v.u.s.p, v.u.s.n);
        else sb_put(r, b, v.u.s.p, v.u.s.n);
        return;
    case TV_LIST:
        switch (v.sub) {
        case LIST_TUPLE: write_items(r, b, v.u.l, "(", ")", true); return;
        case LIST_GEN: sb_put(r, b, "<generator object>", 18); return;
        case LIST_ITEMS: write_items(r, b, v.u.l, "dict_items([", "])", false); return;
        case LIST_KEYS: write_items(r, b, v.u.l, "dict_keys([", "])", false); return;
        case LIST_VALUES: write_items(r, b, v.u.l, "dict_values([", "])", false); return;
        case LIST_RANGE:
            if (v.u.l->range[2] == 1) sb_printf(r, b, "range(%" PRId64 ", %" PRId64 ")", v.u.l->range[0], v.u.l->range[1]);
            else sb_printf(r, b, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ")", v.u.l->range[0], v.u.l->range[1], v.u.l->range[2]);
            return;
        default: write_items(r, b, v.u.l, "[", "]", false); return;
        }
    case TV_DICT: write_dict(r, b, v.u.d); return;
    case TV_NS:
        sb_put(r, b, "<Namespace ", 11);
        write_dict(r, b, v.u.d);
        sb_putc(r, b, '>');
        return;
    case TV_FUNC:
        if (v.u.fn->self.kind != TV_UNDEF)
            sb_printf(r, b, "<built-in method %s of %s object>", v.u.fn->name, tv_type_name(v.u.fn->self));
        else
            sb_printf(r, b, "<built-in function %s>", v.u.fn->name);
        return;
    case TV_MACRO:
        if (v.u.m->def->s) sb_printf(r, b, "<Macro '%.*s'>", (int)v.u.m->def->n, v.u.m->def->s);
        else sb_put(r, b, "<Macro 'caller'>", 16);
        return;
    case TV_LOOP: sb_printf(r, b, "<LoopContext %zu/%zu>", v.u.lp->i + 1, v.u.lp->items->n); return;
    }
}

static void write_guarded(rt *r, tstrb *b, tv v, bool repr) {
    if (++r->depth > r->opt.max_depth) rt_fail(r, "maximum recursion depth exceeded while getting the repr of an object");
    write_value(r, b, v, repr);
    r->depth--;
}

void tv_write_str(rt *r, tstrb *b, tv v) { write_guarded(r, b, v, false); }
void tv_write_repr(rt *r, tstrb *b, tv v) { write_guarded(r, b, v, true); }

tv tv_to_str(rt *r, tv v) {
    if (v.kind == TV_STR) return v;
    if (v.kind == TV_UNDEF) return tv_str("", 0);
    tstrb b = {0};
    tv_write_str(r, &b, v);
    return sb_done(&b);
}

/* ---- slices ---- */

static int64_t slice_arg(rt *r, tv v, int64_t dflt) {
    if (!tv_given(v) || v.kind == TV_NONE) return dflt;
    if (v.kind == TV_INT) return v.u.i;
    if (v.kind == TV_BOOL) return v.u.b;
    rt_fail(r, "slice indices must be integers or None or have an __index__ method");
}

int64_t py_slice_indices(rt *r, int64_t len, tv start, tv stop, tv step, int64_t *out_start, int64_t *out_step) {
    int64_t st = slice_arg(r, step, 1);
    if (st == 0) rt_fail(r, "slice step cannot be zero");
    if (st == INT64_MIN) st = -INT64_MAX;
    int64_t lo, hi;
    if (st > 0) {
        lo = slice_arg(r, start, 0);
        hi = slice_arg(r, stop, len);
    } else {
        lo = slice_arg(r, start, len - 1);
        hi = slice_arg(r, stop, INT64_MIN);
    }
    /* PySlice_AdjustIndices */
    if (lo < 0) {
        lo = lo < -len ? (st < 0 ? -1 : 0) : lo + len;
    } else if (lo >= len) {
        lo = st < 0 ? len - 1 : len;
    }
    if (hi == INT64_MIN) {
        hi = -1;
    } else if (hi < 0) {
        hi = hi < -len ? (st < 0 ? -1 : 0) : hi + len;
    } else if (hi >= len) {
        hi = st < 0 ? len - 1 : len;
    }
    int64_t count = 0;
    if (st < 0) {
        if (hi < lo) count = (lo - hi - 1) / (-st) + 1;
    } else if (lo < hi) {
        count = (hi - lo - 1) / st + 1;
    }
    *out_start = lo;
    *out_step = st;
    return count;
}
