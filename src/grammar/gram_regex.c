/*
 * gram_regex.c - a regular expression (the ECMAScript subset people write in
 * JSON Schema "pattern" and vLLM's structured_outputs.regex) -> the
 * intermediate form. The whole text must match: a leading '^' and trailing
 * '$' are allowed and change nothing.
 *
 * Supported: literals; '.' (any character but \n \r U+2028 U+2029);
 * classes [...] [^...] with ranges and escapes; \d \D \w \W \s \S (ASCII
 * digits and word characters, ECMAScript's white space set); escapes \n \r
 * \t \f \v \0 \xHH \uHHHH \u{H..} \cX and escaped punctuation; groups (...)
 * (?:...) (?<name>...); alternation; quantifiers * + ? {m} {m,} {m,n}, lazy
 * forms too (the language is the same). Refused with the offset: anchors
 * inside the text, \b \B, back-references, look-around, flags, \p{...}.
 *
 * The JSON-string flavour writes every character as it appears inside a
 * JSON string: '"', '\' and control characters as their escapes (the short
 * ones where JSON has them, else \u00XX), everything else raw. With
 * GRAM_RE_NO_LT no set holds '<' (a value inside a tool-call format whose
 * markers start with '<').
 *
 * What it is not for: matching text (the automaton does that).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

#define RE_MAX_REPEAT 10000

typedef struct re {
    gram_ir *ir;
    const char *s, *p, *end;
    int flavour;
    pdl_error *err;
    bool failed;
    int depth;
} re;

static int32_t re_fail(re *r, const char *at, const char *msg) {
    if (!r->failed) {
        err_fail(r->err, "regex: offset %ld: %s", (long)(at - r->s), msg);
        r->failed = true;
    }
    return -1;
}

/* The expression for one character out of set s, in the parser's flavour. */
static int32_t emit_set(re *r, gram_cpset *s) {
    gram_cpset_normalize(s);
    if (r->flavour & GRAM_RE_NO_LT) {
        /* '<' left out of the set (an empty set then matches nothing) */
        gram_cpset t = {0};
        for (int i = 0; i < s->n; i++) {
            uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
            if (lo < '<') gram_cpset_add(&t, lo, hi < '<' ? hi : '<' - 1);
            if (hi > '<') gram_cpset_add(&t, lo > '<' ? lo : '<' + 1, hi);
        }
        gram_cpset_normalize(&t);
        gram_cpset_free(s);
        *s = t;
    }
    if (!(r->flavour & GRAM_RE_JSON_STRING)) return gx_cpset(r->ir, s);
    gram_cpset raw = {0};
    int32_t kids[40];
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        for (uint32_t c = lo; c <= hi && c < 0x20; c++) {
            char esc[8];
            const char *e = c == '\b' ? "\\b" : c == '\f' ? "\\f" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : NULL;
            if (!e) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                e = esc;
            }
            kids[n++] = gx_str(r->ir, e);
        }
        if (lo <= '"' && '"' <= hi) kids[n++] = gx_str(r->ir, "\\\"");
        if (lo <= '\\' && '\\' <= hi) kids[n++] = gx_str(r->ir, "\\\\");
        /* the raw part: lo..hi without the controls, '"' and '\' */
        uint32_t a = lo < 0x20 ? 0x20 : lo;
        static const uint32_t excluded[] = {'"', '\\'};
        for (int k = 0; k < 2; k++) {
            uint32_t x = excluded[k];
            if (a <= x && x <= hi) {
                if (a < x) gram_cpset_add(&raw, a, x - 1);
                a = x + 1;
            }
        }
        if (a <= hi) gram_cpset_add(&raw, a, hi);
    }
    gram_cpset_normalize(&raw);
    if (raw.n) kids[n++] = gx_cpset(r->ir, &raw);
    gram_cpset_free(&raw);
    return gx_alt(r->ir, kids, n);
}

static int32_t emit_char(re *r, uint32_t c) {
    gram_cpset s = {0};
    gram_cpset_add(&s, c, c);
    int32_t x = emit_set(r, &s);
    gram_cpset_free(&s);
    return x;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void add_class_escape(gram_cpset *s, char k) {
    gram_cpset t = {0};
    switch (k | 0x20) {
    case 'd': gram_cpset_add(&t, '0', '9'); break;
    case 'w':
        gram_cpset_add(&t, '0', '9');
        gram_cpset_add(&t, 'A', 'Z');
        gram_cpset_add(&t, '_', '_');
        gram_cpset_add(&t, 'a', 'z');
        break;
    case 's':
        /* ECMAScript WhiteSpace and LineTerminator */
        gram_cpset_add(&t, '\t', '\r');
        gram_cpset_add(&t, ' ', ' ');
        gram_cpset_add(&t, 0xA0, 0xA0);
        gram_cpset_add(&t, 0x1680, 0x1680);
        gram_cpset_add(&t, 0x2000, 0x200A);
        gram_cpset_add(&t, 0x2028, 0x2029);
        gram_cpset_add(&t, 0x202F, 0x202F);
        gram_cpset_add(&t, 0x205F, 0x205F);
        gram_cpset_add(&t, 0x3000, 0x3000);
        gram_cpset_add(&t, 0xFEFF, 0xFEFF);
        break;
    }
    gram_cpset_normalize(&t);
    if (k >= 'A' && k <= 'Z') gram_cpset_negate(&t);
    for (int i = 0; i < t.n; i++) gram_cpset_add(s, t.r[2 * i], t.r[2 * i + 1]);
    if (t.oom) s->oom = true;
    gram_cpset_free(&t);
}

/* An escape after '\' (r->p at the escape letter). Either a class (*is_set,
 * added to set) or one character (*cp). in_class: \b is a backspace there. */
static bool read_escape(re *r, bool in_class, gram_cpset *set, bool *is_set, uint32_t *cp) {
    const char *at = r->p - 1;
    *is_set = false;
    if (r->p >= r->end) {
        re_fail(r, at, "'\\' at the end of the pattern");
        return false;
    }
    char c = *r->p++;
    switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
        add_class_escape(set, c);
        *is_set = true;
        return true;
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v': *cp = '\v'; return true;
    case '0':
        if (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
            re_fail(r, at, "octal escapes are not supported");
            return false;
        }
        *cp = 0;
        return true;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return true;
        }
        re_fail(r, at, "word boundaries (\\b) are not supported");
        return false;
    case 'B': re_fail(r, at, "\\B is not supported"); return false;
    case 'c':
        if (r->p < r->end && ((*r->p | 0x20) >= 'a' && (*r->p | 0x20) <= 'z')) {
            *cp = (uint32_t)(*r->p++ & 0x1F);
            return true;
        }
        re_fail(r, at, "\\c needs a letter");
        return false;
    case 'x':
    case 'u': {
        uint32_t v = 0;
        if (c == 'u' && r->p < r->end && *r->p == '{') {
            r->p++;
            int nd = 0;
            while (r->p < r->end && hexv(*r->p) >= 0 && nd < 7) v = v * 16 + (uint32_t)hexv(*r->p++), nd++;
            if (nd == 0 || r->p >= r->end || *r->p != '}' || v > 0x10FFFF) {
                re_fail(r, at, "bad \\u{...} escape");
                return false;
            }
            r->p++;
        } else {
            int digits = c == 'x' ? 2 : 4;
            for (int i = 0; i < digits; i++) {
                int h = r->p < r->end ? hexv(*r->p) : -1;
                if (h < 0) {
                    re_fail(r, at, c == 'x' ? "\\x needs two hexadecimal digits" : "\\u needs four hexadecimal digits");
                    return false;
                }
                v = v * 16 + (uint32_t)h;
                r->p++;
            }
            /* a surrogate pair written as two \u escapes */
            if (c == 'u' && v >= 0xD800 && v <= 0xDBFF && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
                uint32_t lo = 0;
                bool okh = true;
                for (int i = 0; i < 4; i++) {
                    int h = hexv(r->p[2 + i]);
                    if (h < 0) okh = false;
                    lo = lo * 16 + (uint32_t)(h < 0 ? 0 : h);
                }
                if (okh && lo >= 0xDC00 && lo <= 0xDFFF) {
                    v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                    r->p += 6;
                }
            }
        }
        if (v >= 0xD800 && v <= 0xDFFF) {
            re_fail(r, at, "a lone surrogate is not a character");
            return false;
        }
        *cp = v;
        return true;
    }
    case 'p':
    case 'P': re_fail(r, at, "Unicode property escapes (\\p{...}) are not supported"); return false;
    case 'k': re_fail(r, at, "named back-references are not supported"); return false;
    default:
        if (c >= '1' && c <= '9') {
            re_fail(r, at, "back-references are not supported");
            return false;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            char msg[48];
            snprintf(msg, sizeof msg, "unknown escape '\\%c'", c);
            re_fail(r, at, msg);
            return false;
        }
        *cp = (uint32_t)(unsigned char)c;
        if ((unsigned char)c >= 0x80) {
            /* an escaped non-ASCII character: itself */
            r->p--;
            int l = gram_utf8_decode(r->p, (size_t)(r->end - r->p), cp);
            if (!l) {
                re_fail(r, at, "invalid UTF-8");
                return false;
            }
            r->p += l;
        }
        return true;
    }
}

static bool read_literal_char(re *r, uint32_t *cp) {
    int l = gram_utf8_decode(r->p, (size_t)(r->end - r->p), cp);
    if (!l) {
        re_fail(r, r->p, "invalid UTF-8");
        return false;
    }
    r->p += l;
    return true;
}

static int32_t parse_class(re *r) {
    const char *open = r->p++;
    gram_cpset set = {0};
    bool negate = false;
    if (r->p < r->end && *r->p == '^') {
        negate = true;
        r->p++;
    }
    while (r->p < r->end && *r->p != ']') {
        uint32_t lo;
        bool is_set = false;
        if (*r->p == '\\') {
            r->p++;
            if (!read_escape(r, true, &set, &is_set, &lo)) goto bad;
        } else if (!read_literal_char(r, &lo)) {
            goto bad;
        }
        if (is_set) continue;
        uint32_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            const char *dash = r->p++;
            bool hi_set = false;
            if (*r->p == '\\') {
                r->p++;
                if (!read_escape(r, true, &set, &hi_set, &hi)) goto bad;
            } else if (!read_literal_char(r, &hi)) {
                goto bad;
            }
            if (hi_set) {
                re_fail(r, dash, "a class escape cannot end a range");
                goto bad;
            }
            if (hi < lo) {
                re_fail(r, dash, "range out of order in character class");
                goto bad;
            }
        }
        gram_cpset_add(&set, lo, hi);
    }
    if (r->p >= r->end) {
        re_fail(r, open, "unterminated character class");
        goto bad;
    }
    r->p++;
    gram_cpset_normalize(&set);
    if (negate) gram_cpset_negate(&set);
    int32_t x = emit_set(r, &set);
    gram_cpset_free(&set);
    return x;
bad:
    gram_cpset_free(&set);
    return -1;
}

static int32_t parse_alt(re *r, bool top);

/* One atom; -2 when the text there cannot start one. */
static int32_t parse_atom(re *r) {
    const char *at = r->p;
    char c = *r->p;
    if (c == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') {
                r->p += 2;
            } else if (r->p + 1 < r->end && r->p[1] == '<' && r->p + 2 < r->end && r->p[2] != '=' && r->p[2] != '!') {
                r->p += 2;
                while (r->p < r->end && *r->p != '>') r->p++;
                if (r->p >= r->end) return re_fail(r, at, "unterminated group name");
                r->p++;
            } else if (r->p + 1 < r->end && (r->p[1] == '=' || r->p[1] == '!' || r->p[1] == '<')) {
                return re_fail(r, at, "look-around assertions are not supported");
            } else {
                return re_fail(r, at, "inline flags and other (?...) groups are not supported");
            }
        }
        if (++r->depth > 200) return re_fail(r, at, "groups nested too deeply");
        int32_t x = parse_alt(r, false);
        r->depth--;
        if (x < 0) return -1;
        if (r->p >= r->end || *r->p != ')') return re_fail(r, at, "unclosed group");
        r->p++;
        return x;
    }
    if (c == '[') return parse_class(r);
    if (c == '.') {
        r->p++;
        gram_cpset s = {0};
        gram_cpset_add(&s, '\n', '\n');
        gram_cpset_add(&s, '\r', '\r');
        gram_cpset_add(&s, 0x2028, 0x2029);
        gram_cpset_normalize(&s);
        gram_cpset_negate(&s);
        int32_t x = emit_set(r, &s);
        gram_cpset_free(&s);
        return x;
    }
    if (c == '\\') {
        r->p++;
        gram_cpset s = {0};
        bool is_set;
        uint32_t cp;
        if (!read_escape(r, false, &s, &is_set, &cp)) {
            gram_cpset_free(&s);
            return -1;
        }
        int32_t x = is_set ? emit_set(r, &s) : emit_char(r, cp);
        gram_cpset_free(&s);
        return x;
    }
    if (c == '*' || c == '+' || c == '?') return re_fail(r, at, "nothing to repeat");
    if (c == '{') {
        /* ECMAScript (without the u flag) reads a '{' that starts no quantifier as itself */
        const char *q = r->p + 1;
        while (q < r->end && *q >= '0' && *q <= '9') q++;
        if (q > r->p + 1) return re_fail(r, at, "nothing to repeat");
    }
    if (c == ')' || c == '|') return -2;
    uint32_t cp;
    if (!read_literal_char(r, &cp)) return -1;
    return emit_char(r, cp);
}

static bool read_num(re *r, int32_t *v) {
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return false;
    int64_t x = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        x = x * 10 + (*r->p++ - '0');
        if (x > RE_MAX_REPEAT + 1) x = RE_MAX_REPEAT + 1;
    }
    *v = (int32_t)x;
    return true;
}

/* A quantifier after an atom, if any: fills min/max; false when none. */
static bool parse_quant(re *r, int32_t *min, int32_t *max) {
    if (r->p >= r->end) return false;
    const char *at = r->p;
    char c = *r->p;
    if (c == '*') *min = 0, *max = GX_INF, r->p++;
    else if (c == '+') *min = 1, *max = GX_INF, r->p++;
    else if (c == '?') *min = 0, *max = 1, r->p++;
    else if (c == '{') {
        const char *save = r->p;
        r->p++;
        if (!read_num(r, min)) {
            r->p = save;
            return false; /* a literal '{' */
        }
        *max = *min;
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            if (!read_num(r, max)) *max = GX_INF;
        }
        if (r->p >= r->end || *r->p != '}') {
            r->p = save;
            return false;
        }
        r->p++;
        if (*max != GX_INF && *max < *min) {
            re_fail(r, at, "numbers out of order in {m,n}");
            return false;
        }
        if (*min > RE_MAX_REPEAT || (*max != GX_INF && *max > RE_MAX_REPEAT)) {
            re_fail(r, at, "repetition count above 10000");
            return false;
        }
    } else {
        return false;
    }
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{')) {
        if (*r->p != '{') {
            re_fail(r, r->p, "nothing to repeat");
            return false;
        }
    }
    return true;
}

static int32_t parse_concat(re *r, bool top) {
    gx_list items = {0};
    bool leading = top;
    while (r->p < r->end && !r->failed) {
        if (*r->p == '^') {
            if (!(leading && items.n == 0)) {
                re_fail(r, r->p, "'^' is only supported at the start of the pattern");
                break;
            }
            r->p++;
            continue;
        }
        if (*r->p == '$') {
            const char *next = r->p + 1;
            if (!(top && (next == r->end || *next == '|'))) {
                re_fail(r, r->p, "'$' is only supported at the end of the pattern");
                break;
            }
            r->p++;
            continue;
        }
        int32_t x = parse_atom(r);
        if (x == -2) break;
        if (x < 0) break;
        int32_t min, max;
        if (parse_quant(r, &min, &max)) x = gx_repeat(r->ir, x, min, max);
        if (r->failed || !gx_list_push(r->ir, &items, x)) break;
    }
    int32_t out = r->failed || r->ir->oom ? -1 : gx_seq(r->ir, items.ids, items.n);
    free(items.ids);
    return out;
}

static int32_t parse_alt(re *r, bool top) {
    gx_list alts = {0};
    for (;;) {
        int32_t x = parse_concat(r, top);
        if (x < 0 || !gx_list_push(r->ir, &alts, x)) {
            free(alts.ids);
            return -1;
        }
        if (r->p < r->end && *r->p == '|') {
            r->p++;
            continue;
        }
        break;
    }
    int32_t out = gx_alt(r->ir, alts.ids, alts.n);
    free(alts.ids);
    return out;
}

int gram_regex_parse(gram_ir *ir, const char *text, size_t len, int flavour, int32_t *out, pdl_error *err) {
    re r = {.ir = ir, .s = text, .p = text, .end = text + len, .flavour = flavour, .err = err};
    int32_t x = parse_alt(&r, true);
    if (r.failed) return -1;
    if (x < 0) return err_fail(err, "regex: out of memory");
    if (r.p < r.end) return re_fail(&r, r.p, "unmatched ')'");
    *out = x;
    return 0;
}
