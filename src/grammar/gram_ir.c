/*
 * gram_ir.c - building the intermediate form every front end produces: rules
 * whose bodies are regular expressions over byte sets and rule references,
 * and the Unicode side of it (code point sets -> UTF-8 byte sequences).
 *
 * What it is not for: parsing any input syntax (the front ends) or compiling
 * the rules (gram_compile.c).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

void gram_ir_init(gram_ir *ir) {
    memset(ir, 0, sizeof *ir);
    ir->root = -1;
}

void gram_ir_free(gram_ir *ir) {
    for (int32_t i = 0; i < ir->n_rules; i++) free(ir->rules[i].name);
    for (int32_t i = 0; i < ir->n_specials; i++) free(ir->specials[i]);
    free(ir->specials);
    free(ir->rules);
    free(ir->nodes);
    free(ir->kids);
    free(ir->sets);
    free(ir->set_hash);
    memset(ir, 0, sizeof *ir);
    ir->root = -1;
}

static bool grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > INT32_MAX / 2) return false;
        c *= 2;
    }
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static int32_t new_node(gram_ir *ir, uint8_t kind, int32_t a, int32_t b, int32_t c) {
    if (ir->oom) return -1;
    if (!grow((void **)&ir->nodes, &ir->cap_nodes, ir->n_nodes + 1, sizeof *ir->nodes)) {
        ir->oom = true;
        return -1;
    }
    gx_node *n = &ir->nodes[ir->n_nodes];
    n->kind = kind;
    n->a = a;
    n->b = b;
    n->c = c;
    return ir->n_nodes++;
}

int32_t gx_empty(gram_ir *ir) { return new_node(ir, GX_EMPTY, 0, 0, 0); }
int32_t gx_none(gram_ir *ir) { return new_node(ir, GX_NONE, 0, 0, 0); }

static uint32_t set_hash(const uint8_t *set) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 32; i++) h = (h ^ set[i]) * 16777619u;
    return h;
}

/* The index of an equal set, adding it when new (sets are deduplicated so
 * the compiler's byte classes come from few distinct sets). */
static int32_t intern_set(gram_ir *ir, const uint8_t *set) {
    if (ir->oom) return -1;
    if ((ir->n_sets + 1) * 2 > ir->set_hash_cap) {
        int32_t cap = ir->set_hash_cap ? ir->set_hash_cap * 2 : 256;
        int32_t *h = malloc((size_t)cap * sizeof *h);
        if (!h) {
            ir->oom = true;
            return -1;
        }
        for (int32_t i = 0; i < cap; i++) h[i] = -1;
        for (int32_t i = 0; i < ir->n_sets; i++) {
            uint32_t k = set_hash(ir->sets[i]) & (uint32_t)(cap - 1);
            while (h[k] >= 0) k = (k + 1) & (uint32_t)(cap - 1);
            h[k] = i;
        }
        free(ir->set_hash);
        ir->set_hash = h;
        ir->set_hash_cap = cap;
    }
    uint32_t k = set_hash(set) & (uint32_t)(ir->set_hash_cap - 1);
    while (ir->set_hash[k] >= 0) {
        if (memcmp(ir->sets[ir->set_hash[k]], set, 32) == 0) return ir->set_hash[k];
        k = (k + 1) & (uint32_t)(ir->set_hash_cap - 1);
    }
    if (!grow((void **)&ir->sets, &ir->cap_sets, ir->n_sets + 1, sizeof *ir->sets)) {
        ir->oom = true;
        return -1;
    }
    memcpy(ir->sets[ir->n_sets], set, 32);
    ir->set_hash[k] = ir->n_sets;
    return ir->n_sets++;
}

int32_t gx_byteset(gram_ir *ir, const uint8_t set[32]) {
    bool any = false;
    for (int i = 0; i < 32; i++) any |= set[i] != 0;
    if (!any) return gx_none(ir);
    int32_t s = intern_set(ir, set);
    return s < 0 ? -1 : new_node(ir, GX_BYTES, s, 0, 0);
}

int32_t gx_byte_range(gram_ir *ir, unsigned lo, unsigned hi) {
    uint8_t set[32] = {0};
    for (unsigned b = lo; b <= hi && b < 256; b++) set[b >> 3] |= (uint8_t)(1u << (b & 7));
    return gx_byteset(ir, set);
}

static int32_t list_node(gram_ir *ir, uint8_t kind, const int32_t *kids, int n) {
    if (ir->oom) return -1;
    for (int i = 0; i < n; i++)
        if (kids[i] < 0) return -1;
    if (n == 1) return kids[0];
    if (n == 0) return kind == GX_SEQ ? gx_empty(ir) : gx_none(ir);
    if (!grow((void **)&ir->kids, &ir->cap_kids, ir->n_kids + n, sizeof *ir->kids)) {
        ir->oom = true;
        return -1;
    }
    int32_t first = ir->n_kids;
    memcpy(ir->kids + first, kids, (size_t)n * sizeof *kids);
    ir->n_kids += n;
    return new_node(ir, kind, first, n, 0);
}

bool gx_list_push(gram_ir *ir, gx_list *l, int32_t x) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        int32_t *q = realloc(l->ids, (size_t)cap * sizeof *q);
        if (!q) {
            ir->oom = true;
            return false;
        }
        l->ids = q;
        l->cap = cap;
    }
    l->ids[l->n++] = x;
    return true;
}

int32_t gx_seq(gram_ir *ir, const int32_t *kids, int n) { return list_node(ir, GX_SEQ, kids, n); }
int32_t gx_alt(gram_ir *ir, const int32_t *kids, int n) { return list_node(ir, GX_ALT, kids, n); }

static int32_t list_va(gram_ir *ir, uint8_t kind, va_list ap) {
    int32_t kids[64];
    int n = 0;
    bool bad = false;
    for (int32_t k = va_arg(ap, int32_t); k != GX_END; k = va_arg(ap, int32_t)) {
        if (n < 64)
            kids[n++] = k;
        else
            bad = true;
    }
    if (bad) {
        ir->oom = true; /* a programming error: more than 64 listed kids */
        return -1;
    }
    return list_node(ir, kind, kids, n);
}

int32_t gx_seqv(gram_ir *ir, ...) {
    va_list ap;
    va_start(ap, ir);
    int32_t r = list_va(ir, GX_SEQ, ap);
    va_end(ap);
    return r;
}

int32_t gx_altv(gram_ir *ir, ...) {
    va_list ap;
    va_start(ap, ir);
    int32_t r = list_va(ir, GX_ALT, ap);
    va_end(ap);
    return r;
}

int32_t gx_literal(gram_ir *ir, const char *s, size_t n) {
    if (ir->oom) return -1;
    if (n == 0) return gx_empty(ir);
    int32_t stack_kids[64];
    int32_t *kids = n <= 64 ? stack_kids : malloc(n * sizeof *kids);
    if (!kids) {
        ir->oom = true;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned char)s[i];
        kids[i] = gx_byte_range(ir, b, b);
    }
    int32_t r = list_node(ir, GX_SEQ, kids, (int)n);
    if (kids != stack_kids) free(kids);
    return r;
}

int32_t gx_str(gram_ir *ir, const char *s) { return gx_literal(ir, s, strlen(s)); }

int32_t gx_repeat(gram_ir *ir, int32_t x, int32_t min, int32_t max) {
    if (x < 0) return -1;
    if (min == 1 && max == 1) return x;
    if (max == 0) return gx_empty(ir);
    return new_node(ir, GX_REPEAT, x, min, max);
}

int32_t gx_opt(gram_ir *ir, int32_t x) { return gx_repeat(ir, x, 0, 1); }
int32_t gx_star(gram_ir *ir, int32_t x) { return gx_repeat(ir, x, 0, GX_INF); }

int32_t gx_ref(gram_ir *ir, int32_t rule) {
    if (rule < 0) return -1;
    return new_node(ir, GX_REF, rule, 0, 0);
}

int32_t gram_ir_rule(gram_ir *ir, const char *name, uint32_t flags) {
    if (ir->oom) return -1;
    if (!grow((void **)&ir->rules, &ir->cap_rules, ir->n_rules + 1, sizeof *ir->rules)) {
        ir->oom = true;
        return -1;
    }
    char *copy = strdup(name ? name : "");
    if (!copy) {
        ir->oom = true;
        return -1;
    }
    gx_rule *r = &ir->rules[ir->n_rules];
    r->name = copy;
    r->body = -1;
    r->flags = flags;
    return ir->n_rules++;
}

int32_t gram_ir_rule_def(gram_ir *ir, const char *name, uint32_t flags, int32_t body) {
    if (body < 0) return -1;
    int32_t r = gram_ir_rule(ir, name, flags);
    if (r >= 0) ir->rules[r].body = body;
    return r;
}

int32_t gram_ir_add_special(gram_ir *ir, const char *text) {
    for (int32_t i = 0; i < ir->n_specials; i++)
        if (strcmp(ir->specials[i], text) == 0) return i;
    char **p = realloc(ir->specials, (size_t)(ir->n_specials + 1) * sizeof *p);
    char *copy = strdup(text);
    if (!p || !copy) {
        if (p) ir->specials = p;
        free(copy);
        ir->oom = true;
        return -1;
    }
    ir->specials = p;
    ir->specials[ir->n_specials] = copy;
    return ir->n_specials++;
}

int32_t gx_special(gram_ir *ir, const char *text) {
    int32_t k = gram_ir_add_special(ir, text);
    return k < 0 ? -1 : new_node(ir, GX_SPECIAL, k, 0, 0);
}

int32_t gx_fmt(gram_ir *ir, const char *s) {
    gx_list parts = {0};
    const char *text = s;
    for (const char *p = s; *p;) {
        const char *mark = NULL;
        for (int m = 0; ir->marks && ir->marks[m] && !mark; m++)
            if (strncmp(p, ir->marks[m], strlen(ir->marks[m])) == 0) mark = ir->marks[m];
        if (!mark) {
            p++;
            continue;
        }
        if (p > text) gx_list_push(ir, &parts, gx_literal(ir, text, (size_t)(p - text)));
        gx_list_push(ir, &parts, gx_special(ir, mark));
        p += strlen(mark);
        text = p;
    }
    if (*text) gx_list_push(ir, &parts, gx_literal(ir, text, strlen(text)));
    int32_t r = parts.n == 0 ? gx_empty(ir) : parts.n == 1 ? parts.ids[0] : gx_seq(ir, parts.ids, parts.n);
    free(parts.ids);
    return ir->oom ? -1 : r;
}

/* ---------------------------------------------------------------------------
 * Code point sets
 * ------------------------------------------------------------------------- */

#define CP_MAX 0x10FFFFu

void gram_cpset_add(gram_cpset *s, uint32_t lo, uint32_t hi) {
    if (s->oom || lo > hi) return;
    if (hi > CP_MAX) hi = CP_MAX;
    if (lo > CP_MAX) return;
    if (s->n + 1 > s->cap) {
        int c = s->cap ? s->cap * 2 : 16;
        uint32_t *r = realloc(s->r, (size_t)c * 2 * sizeof *r);
        if (!r) {
            s->oom = true;
            return;
        }
        s->r = r;
        s->cap = c;
    }
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
}

static int cmp_range(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void gram_cpset_normalize(gram_cpset *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, 2 * sizeof *s->r, cmp_range);
    int w = 0;
    for (int i = 1; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        if (lo <= s->r[2 * w + 1] + 1) {
            if (hi > s->r[2 * w + 1]) s->r[2 * w + 1] = hi;
        } else {
            w++;
            s->r[2 * w] = lo;
            s->r[2 * w + 1] = hi;
        }
    }
    s->n = w + 1;
}

void gram_cpset_negate(gram_cpset *s) {
    gram_cpset out = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[2 * i] > next) gram_cpset_add(&out, next, s->r[2 * i] - 1);
        next = s->r[2 * i + 1] + 1;
    }
    if (next <= CP_MAX) gram_cpset_add(&out, next, CP_MAX);
    bool oom = s->oom || out.oom;
    free(s->r);
    *s = out;
    s->oom = oom;
}

void gram_cpset_free(gram_cpset *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}

int gram_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int gram_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) return 0;
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    }
    int len;
    uint32_t c, min;
    if ((u[0] & 0xE0) == 0xC0)
        len = 2, c = u[0] & 0x1F, min = 0x80;
    else if ((u[0] & 0xF0) == 0xE0)
        len = 3, c = u[0] & 0x0F, min = 0x800;
    else if ((u[0] & 0xF8) == 0xF0)
        len = 4, c = u[0] & 0x07, min = 0x10000;
    else
        return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (u[i] & 0x3F);
    }
    if (c < min || c > CP_MAX || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

/* Appends to kids the byte-range sequences encoding lo..hi, all of which
 * have the same UTF-8 length. A range whose low continuation bytes do not
 * span their whole 0x80..0xBF is split until every piece is a product of
 * byte ranges (the classic UTF-8 range-to-automaton construction). */
static void utf8_split(gram_ir *ir, uint32_t lo, uint32_t hi, int32_t **kids, int *n, int *cap) {
    if (ir->oom) return;
    int len = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(ir, lo, lo | m, kids, n, cap);
                utf8_split(ir, (lo | m) + 1, hi, kids, n, cap);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(ir, lo, (hi & ~m) - 1, kids, n, cap);
                utf8_split(ir, hi & ~m, hi, kids, n, cap);
                return;
            }
        }
    }
    char a[4], b[4];
    gram_utf8_encode(lo, a);
    gram_utf8_encode(hi, b);
    int32_t parts[4];
    for (int i = 0; i < len; i++) parts[i] = gx_byte_range(ir, (unsigned char)a[i], (unsigned char)b[i]);
    int32_t seq = gx_seq(ir, parts, len);
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 16;
        int32_t *k = realloc(*kids, (size_t)c * sizeof *k);
        if (!k) {
            ir->oom = true;
            return;
        }
        *kids = k;
        *cap = c;
    }
    (*kids)[(*n)++] = seq;
}

static void utf8_range(gram_ir *ir, uint32_t lo, uint32_t hi, int32_t **kids, int *n, int *cap) {
    static const uint32_t ends[] = {0x7F, 0x7FF, 0xFFFF, CP_MAX};
    for (int k = 0; k < 4 && lo <= hi; k++) {
        if (lo > ends[k]) continue;
        uint32_t top = hi < ends[k] ? hi : ends[k];
        /* surrogates D800..DFFF have no UTF-8 encoding */
        if (k == 2 && lo <= 0xDFFF && top >= 0xD800) {
            if (lo < 0xD800) utf8_split(ir, lo, 0xD7FF, kids, n, cap);
            if (top > 0xDFFF) utf8_split(ir, 0xE000, top, kids, n, cap);
        } else {
            utf8_split(ir, lo, top, kids, n, cap);
        }
        lo = top + 1;
        if (top == CP_MAX) break;
    }
}

int32_t gx_cpset(gram_ir *ir, const gram_cpset *s) {
    if (ir->oom || s->oom) {
        ir->oom = true;
        return -1;
    }
    int32_t *kids = NULL;
    int n = 0, cap = 0;
    /* the one-byte part as a single byte set: fewer nodes, same language */
    uint8_t ascii[32] = {0};
    bool any_ascii = false;
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        for (uint32_t c = lo; c <= hi && c < 0x80; c++) {
            ascii[c >> 3] |= (uint8_t)(1u << (c & 7));
            any_ascii = true;
        }
        if (hi >= 0x80) utf8_range(ir, lo < 0x80 ? 0x80 : lo, hi, &kids, &n, &cap);
    }
    if (any_ascii) {
        int32_t a = gx_byteset(ir, ascii);
        if (n == cap) {
            int c = cap ? cap * 2 : 4;
            int32_t *k = realloc(kids, (size_t)c * sizeof *k);
            if (!k) {
                free(kids);
                ir->oom = true;
                return -1;
            }
            kids = k;
        }
        kids[n++] = a;
    }
    int32_t r = ir->oom ? -1 : gx_alt(ir, kids, n);
    free(kids);
    return r;
}

int32_t gx_cp_range(gram_ir *ir, uint32_t lo, uint32_t hi) {
    gram_cpset s = {0};
    gram_cpset_add(&s, lo, hi);
    int32_t r = gx_cpset(ir, &s);
    gram_cpset_free(&s);
    return r;
}
