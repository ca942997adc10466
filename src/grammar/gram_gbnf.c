/*
 * gram_gbnf.c - GBNF (llama.cpp's grammar format) -> the intermediate form.
 *
 * The syntax, as llama.cpp reads it: rules `name ::= alternatives`, names of
 * letters, digits, '-' and '_'; alternatives separated by '|'; sequences of
 * "literals", [character classes] (ranges, ^ negation), rule names,
 * (groups), '.' (any character); postfix * + ? {m} {m,} {m,n} {,n};
 * escapes \xHH \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \]; '#' comments. A rule
 * ends at a newline, except inside parentheses and right after a '|'. The
 * start rule is `root`. Terminals are Unicode code points, matched as UTF-8.
 *
 * Errors give the line and column. Not supported (an error, never ignored):
 * token references <...> / <[id]> / !<...>.
 *
 * What it is not for: anything after parsing (gram_compile.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

typedef struct gbnf {
    gram_ir *ir;
    const char *s, *end;
    const char *p;
    pdl_error *err;
    bool failed;
    int32_t *first_use_line; /* [n_rules] line of the first reference (for "undefined" errors) */
    int32_t cap_use;
} gbnf;

static void where(const gbnf *g, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *q = g->s; q < at && q < g->end; q++) {
        if (*q == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static int32_t fail_at(gbnf *g, const char *at, const char *msg) {
    if (!g->failed) {
        int line, col;
        where(g, at, &line, &col);
        err_fail(g->err, "grammar: line %d, column %d: %s", line, col, msg);
        g->failed = true;
    }
    return -1;
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments, and newlines when newline_ok. */
static void skip_space(gbnf *g, bool newline_ok) {
    while (g->p < g->end) {
        char c = *g->p;
        if (c == ' ' || c == '\t') {
            g->p++;
        } else if (c == '#') {
            while (g->p < g->end && *g->p != '\n' && *g->p != '\r') g->p++;
        } else if (newline_ok && (c == '\n' || c == '\r')) {
            g->p++;
        } else {
            break;
        }
    }
}

static int32_t rule_id(gbnf *g, const char *name, size_t n, bool use) {
    gram_ir *ir = g->ir;
    for (int32_t r = 0; r < ir->n_rules; r++)
        if (strlen(ir->rules[r].name) == n && memcmp(ir->rules[r].name, name, n) == 0) return r;
    char buf[256];
    if (n >= sizeof buf) return fail_at(g, name, "rule name too long");
    memcpy(buf, name, n);
    buf[n] = 0;
    int32_t r = gram_ir_rule(ir, buf, 0);
    if (r < 0) return -1;
    if (r >= g->cap_use) {
        int32_t c = g->cap_use ? g->cap_use * 2 : 64;
        int32_t *u = realloc(g->first_use_line, (size_t)c * sizeof *u);
        if (!u) {
            ir->oom = true;
            return -1;
        }
        g->first_use_line = u;
        g->cap_use = c;
    }
    int line = 0, col;
    if (use) where(g, name, &line, &col);
    g->first_use_line[r] = line;
    return r;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static bool read_char(gbnf *g, uint32_t *cp) {
    if (g->p >= g->end) {
        fail_at(g, g->p, "unexpected end of grammar");
        return false;
    }
    if (*g->p == '\\') {
        const char *at = g->p;
        g->p++;
        if (g->p >= g->end) {
            fail_at(g, at, "unexpected end after '\\'");
            return false;
        }
        char c = *g->p++;
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = g->p < g->end ? hexval(*g->p) : -1;
                if (h < 0) {
                    fail_at(g, at, "expected hexadecimal digits after the escape");
                    return false;
                }
                v = v * 16 + (uint32_t)h;
                g->p++;
            }
            if (v > 0x10FFFF) {
                fail_at(g, at, "escape beyond U+10FFFF");
                return false;
            }
            *cp = v;
            return true;
        }
        switch (c) {
        case 't': *cp = '\t'; return true;
        case 'r': *cp = '\r'; return true;
        case 'n': *cp = '\n'; return true;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/': *cp = (uint32_t)c; return true;
        default: {
            char msg[64];
            snprintf(msg, sizeof msg, "unknown escape '\\%c'", c);
            fail_at(g, at, msg);
            return false;
        }
        }
    }
    int l = gram_utf8_decode(g->p, (size_t)(g->end - g->p), cp);
    if (l == 0) {
        fail_at(g, g->p, "invalid UTF-8");
        return false;
    }
    g->p += l;
    return true;
}

static int32_t parse_alternates(gbnf *g, bool nested);

static int32_t parse_literal(gbnf *g) {
    const char *open = g->p++;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    while (g->p < g->end && *g->p != '"') {
        uint32_t cp;
        if (!read_char(g, &cp)) {
            free(buf);
            return -1;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            free(buf);
            return fail_at(g, g->p, "a surrogate code point is not a character");
        }
        if (n + 4 > cap) {
            cap = cap ? cap * 2 : 64;
            char *q = realloc(buf, cap);
            if (!q) {
                free(buf);
                g->ir->oom = true;
                return -1;
            }
            buf = q;
        }
        n += (size_t)gram_utf8_encode(cp, buf + n);
    }
    if (g->p >= g->end) {
        free(buf);
        return fail_at(g, open, "unterminated string literal");
    }
    g->p++;
    int32_t r = gx_literal(g->ir, buf ? buf : "", n);
    free(buf);
    return r;
}

static int32_t parse_class(gbnf *g) {
    const char *open = g->p++;
    gram_cpset set = {0};
    bool negate = false;
    if (g->p < g->end && *g->p == '^') {
        negate = true;
        g->p++;
    }
    while (g->p < g->end && *g->p != ']') {
        uint32_t lo, hi;
        if (!read_char(g, &lo)) {
            gram_cpset_free(&set);
            return -1;
        }
        hi = lo;
        if (g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
            g->p++;
            if (!read_char(g, &hi)) {
                gram_cpset_free(&set);
                return -1;
            }
            if (hi < lo) {
                gram_cpset_free(&set);
                return fail_at(g, open, "character range with its end before its start");
            }
        }
        gram_cpset_add(&set, lo, hi);
    }
    if (g->p >= g->end) {
        gram_cpset_free(&set);
        return fail_at(g, open, "unterminated character class");
    }
    g->p++;
    gram_cpset_normalize(&set);
    if (negate) gram_cpset_negate(&set);
    int32_t r = gx_cpset(g->ir, &set);
    gram_cpset_free(&set);
    return r;
}

static bool read_int(gbnf *g, int32_t *v) {
    if (g->p >= g->end || *g->p < '0' || *g->p > '9') return false;
    int64_t x = 0;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') {
        x = x * 10 + (*g->p++ - '0');
        if (x > 100000) x = 100001;
    }
    *v = (int32_t)x;
    return true;
}

static int32_t parse_sequence(gbnf *g, bool nested) {
    gx_list items = {0};
    int32_t last = -1;
    while (g->p < g->end && !g->failed) {
        char c = *g->p;
        const char *at = g->p;
        int32_t item = -2; /* -2: not an element start */
        if (c == '"') {
            item = parse_literal(g);
        } else if (c == '[') {
            item = parse_class(g);
        } else if (c == '(') {
            g->p++;
            skip_space(g, true);
            item = parse_alternates(g, true);
            if (item >= 0) {
                skip_space(g, true);
                if (g->p >= g->end || *g->p != ')') item = fail_at(g, at, "expected ')' to close this group");
                else g->p++;
            }
        } else if (c == '.') {
            g->p++;
            item = gx_cp_range(g->ir, 0, 0x10FFFF);
        } else if (c == '<' || c == '!') {
            item = fail_at(g, at, "token references (<...>, <[id]>, !<...>) are not supported");
        } else if (is_word(c)) {
            const char *name = g->p;
            while (g->p < g->end && is_word(*g->p)) g->p++;
            /* `name ::=` starts the next rule: the sequence ended at a newline we were allowed to skip */
            const char *q = g->p;
            while (q < g->end && (*q == ' ' || *q == '\t')) q++;
            if (q + 2 < g->end && q[0] == ':' && q[1] == ':' && q[2] == '=') {
                g->p = name;
                break;
            }
            item = gx_ref(g->ir, rule_id(g, name, (size_t)(g->p - name), true));
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) {
                item = fail_at(g, at, "a repetition operator needs something before it");
            } else {
                int32_t min = 0, max = GX_INF;
                if (c == '*') {
                    g->p++;
                } else if (c == '+') {
                    min = 1;
                    g->p++;
                } else if (c == '?') {
                    max = 1;
                    g->p++;
                } else {
                    g->p++;
                    skip_space(g, false);
                    bool has_min = read_int(g, &min);
                    skip_space(g, false);
                    if (g->p < g->end && *g->p == ',') {
                        g->p++;
                        skip_space(g, false);
                        if (!read_int(g, &max)) max = GX_INF;
                        skip_space(g, false);
                    } else if (has_min) {
                        max = min;
                    } else {
                        item = fail_at(g, at, "expected a number in {m,n}");
                    }
                    if (item == -2 && (g->p >= g->end || *g->p != '}')) item = fail_at(g, at, "expected '}' to end {m,n}");
                    if (item == -2) g->p++;
                    if (item == -2 && max != GX_INF && max < min)
                        item = fail_at(g, at, "{m,n} with n smaller than m");
                    if (item == -2 && (min > 100000 || (max != GX_INF && max > 100000)))
                        item = fail_at(g, at, "repetition count above 100000");
                }
                if (item == -2) {
                    items.ids[items.n - 1] = gx_repeat(g->ir, items.ids[items.n - 1], min, max);
                    last = items.ids[items.n - 1];
                    skip_space(g, nested);
                    continue;
                }
            }
        } else {
            break;
        }
        if (item < 0 || !gx_list_push(g->ir, &items, item)) break;
        last = item;
        skip_space(g, nested);
    }
    int32_t r = g->failed || g->ir->oom ? -1 : gx_seq(g->ir, items.ids, items.n);
    free(items.ids);
    return r;
}

static int32_t parse_alternates(gbnf *g, bool nested) {
    gx_list alts = {0};
    for (;;) {
        int32_t s = parse_sequence(g, nested);
        if (s < 0 || !gx_list_push(g->ir, &alts, s)) {
            free(alts.ids);
            return -1;
        }
        if (g->p < g->end && *g->p == '|') {
            g->p++;
            skip_space(g, true);
            continue;
        }
        break;
    }
    int32_t r = gx_alt(g->ir, alts.ids, alts.n);
    free(alts.ids);
    return r;
}

int gram_gbnf_parse(gram_ir *ir, const char *text, size_t len, pdl_error *err) {
    gbnf g = {.ir = ir, .s = text, .end = text + len, .p = text, .err = err};
    int32_t n_defined_before = ir->n_rules;
    bool *defined = NULL;
    int32_t defined_cap = 0;
    skip_space(&g, true);
    while (g.p < g.end && !g.failed && !ir->oom) {
        const char *name = g.p;
        while (g.p < g.end && is_word(*g.p)) g.p++;
        if (g.p == name) {
            fail_at(&g, name, "expected a rule name");
            break;
        }
        size_t name_len = (size_t)(g.p - name);
        skip_space(&g, false);
        if (g.end - g.p < 3 || memcmp(g.p, "::=", 3) != 0) {
            fail_at(&g, g.p, "expected '::='");
            break;
        }
        g.p += 3;
        int32_t r = rule_id(&g, name, name_len, false);
        if (r < 0) break;
        if (r >= defined_cap) {
            int32_t c = defined_cap ? defined_cap * 2 : 64;
            while (c <= r) c *= 2;
            bool *d = realloc(defined, (size_t)c);
            if (!d) {
                ir->oom = true;
                break;
            }
            memset(d + defined_cap, 0, (size_t)(c - defined_cap));
            defined = d;
            defined_cap = c;
        }
        if (defined[r]) {
            char msg[320];
            snprintf(msg, sizeof msg, "rule '%s' is defined twice", ir->rules[r].name);
            fail_at(&g, name, msg);
            break;
        }
        defined[r] = true;
        skip_space(&g, true);
        int32_t body = parse_alternates(&g, false);
        if (body < 0) break;
        ir->rules[r].body = body;
        skip_space(&g, false);
        if (g.p < g.end && *g.p != '\n' && *g.p != '\r') {
            fail_at(&g, g.p, "expected the end of the line after the rule");
            break;
        }
        skip_space(&g, true);
    }
    int rc = 0;
    if (g.failed) {
        rc = -1;
    } else if (ir->oom) {
        rc = err_fail(err, "grammar: out of memory");
    } else {
        for (int32_t r = n_defined_before; r < ir->n_rules; r++) {
            if (ir->rules[r].body >= 0) continue;
            rc = err_fail(err, "grammar: line %d: rule '%s' is used but never defined", g.first_use_line[r],
                          ir->rules[r].name);
            break;
        }
        if (rc == 0) {
            ir->root = -1;
            for (int32_t r = n_defined_before; r < ir->n_rules; r++)
                if (strcmp(ir->rules[r].name, "root") == 0) ir->root = r;
            if (ir->root < 0) rc = err_fail(err, "grammar: no rule named 'root'");
        }
    }
    free(defined);
    free(g.first_use_line);
    return rc;
}
