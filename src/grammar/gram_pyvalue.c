/*
 * gram_pyvalue.c - Python's reading of a value's text, for the tool-call
 * parsers: vLLM's parsers turn a parameter's text into a value with
 * int(), float(), json.loads() or ast.literal_eval() and write the call's
 * arguments with json.dumps(..., ensure_ascii=False). These functions do
 * the same in one step, text in, JSON text out, so that the arguments a
 * client gets are the ones vLLM would send:
 *
 *   ast.literal_eval  strings ('...', "...", triple-quoted, r/u prefixes,
 *                     adjacent ones joined), ints (also 0x/0o/0b and "_"),
 *                     floats, one sign on a number, True/False/None, lists,
 *                     tuples (as lists), dicts; sets, bytes, f-strings and
 *                     complex numbers are refused (json.dumps could not
 *                     write them)
 *   json.loads        JSON, with Python's choices: NaN and Infinity refused
 *                     (json.dumps would write them, but they are not JSON)
 *   json.dumps        ", " and ": " separators, UTF-8 kept, floats as repr
 *                     writes them (shortest round trip: 0.1, 1e-05, 1e+16),
 *                     a repeated dict key keeps its first place and its
 *                     last value
 *
 * A dict key that is not a string is written as json.dumps writes it (1 ->
 * "1", True -> "true", None -> "null"). A lone surrogate (\ud800) is written
 * as its \u escape (Python would write the character, which UTF-8 cannot).
 *
 * What it is not for: reading calls out of text (gram_toolparse.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

#define PY_MAX_DEPTH 64

/* ---------------------------------------------------------------------------
 * Text
 * ------------------------------------------------------------------------- */

bool gram_text_put(gram_text *t, const char *s, size_t n) {
    if (t->oom) return false;
    if (t->n + n + 1 > t->cap) {
        size_t c = t->cap ? t->cap * 2 : 64;
        while (c < t->n + n + 1) c *= 2;
        char *q = realloc(t->p, c);
        if (!q) {
            t->oom = true;
            return false;
        }
        t->p = q;
        t->cap = c;
    }
    if (n) memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
    return true;
}

bool gram_text_byte(gram_text *t, char c) { return gram_text_put(t, &c, 1); }

void gram_text_free(gram_text *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}

static void put_str(gram_text *t, const char *s) { gram_text_put(t, s, strlen(s)); }

/* One code point inside a JSON string, as json.dumps(ensure_ascii=False). */
static void put_cp(gram_text *t, uint32_t cp) {
    char e[8];
    switch (cp) {
    case '"': put_str(t, "\\\""); return;
    case '\\': put_str(t, "\\\\"); return;
    case '\n': put_str(t, "\\n"); return;
    case '\r': put_str(t, "\\r"); return;
    case '\t': put_str(t, "\\t"); return;
    case '\b': put_str(t, "\\b"); return;
    case '\f': put_str(t, "\\f"); return;
    }
    if (cp < 0x20 || (cp >= 0xD800 && cp <= 0xDFFF)) {
        snprintf(e, sizeof e, "\\u%04x", (unsigned)cp);
        put_str(t, e);
        return;
    }
    int l = gram_utf8_encode(cp, e);
    gram_text_put(t, e, (size_t)l);
}

void gram_py_json_string(gram_text *out, const char *s, size_t n) {
    gram_text_byte(out, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            /* UTF-8 as it is (a stray byte too: the text came that way) */
            gram_text_byte(out, (char)c);
            i++;
            continue;
        }
        put_cp(out, c);
        i++;
    }
    gram_text_byte(out, '"');
}

/* repr(x) of a finite double: the shortest digits that read back as x, in
 * fixed notation when the decimal point falls within -4 < point <= 16. */
static void put_float(gram_text *t, double x) {
    if (x == 0) {
        put_str(t, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    const char *q = e;
    if (*q == '-') gram_text_byte(t, *q++);
    char digits[24];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int point = atoi(q + 1) + 1; /* x = 0.DIGITS * 10^point */
    if (point > -4 && point <= 16) {
        if (point <= 0) {
            put_str(t, "0.");
            for (int i = 0; i < -point; i++) gram_text_byte(t, '0');
            gram_text_put(t, digits, (size_t)nd);
        } else if (point >= nd) {
            gram_text_put(t, digits, (size_t)nd);
            for (int i = nd; i < point; i++) gram_text_byte(t, '0');
            put_str(t, ".0");
        } else {
            gram_text_put(t, digits, (size_t)point);
            gram_text_byte(t, '.');
            gram_text_put(t, digits + point, (size_t)(nd - point));
        }
        return;
    }
    gram_text_byte(t, digits[0]);
    if (nd > 1) {
        gram_text_byte(t, '.');
        gram_text_put(t, digits + 1, (size_t)(nd - 1));
    }
    snprintf(e, sizeof e, "e%c%02d", point - 1 < 0 ? '-' : '+', abs(point - 1));
    put_str(t, e);
}

/* A whole double as Python's int(x) writes it (every digit exact). */
static void put_whole(gram_text *t, double x) {
    char e[400];
    snprintf(e, sizeof e, "%.0f", x);
    put_str(t, strcmp(e, "-0") == 0 ? "0" : e);
}

/* Decimal digits (underscores already gone) without leading zeros. */
static void put_int_digits(gram_text *t, bool neg, const char *d, size_t n) {
    while (n > 1 && *d == '0') d++, n--;
    if (neg && !(n == 1 && *d == '0')) gram_text_byte(t, '-');
    gram_text_put(t, d, n);
}

/* ---------------------------------------------------------------------------
 * Values: scalars as their JSON text, lists, dicts (keys as JSON strings)
 * ------------------------------------------------------------------------- */

enum { PV_SCALAR, PV_LIST, PV_DICT };

typedef struct pv pv;
struct pv {
    int kind;
    gram_text text;  /* scalar: its JSON text */
    pv **kids;       /* list items, dict values */
    gram_text *keys; /* dict: the keys' JSON text */
    int n, cap;
};

static void pv_free(pv *v) {
    if (!v) return;
    gram_text_free(&v->text);
    for (int i = 0; i < v->n; i++) {
        pv_free(v->kids[i]);
        if (v->keys) gram_text_free(&v->keys[i]);
    }
    free(v->kids);
    free(v->keys);
    free(v);
}

static pv *pv_new(int kind) {
    pv *v = calloc(1, sizeof *v);
    if (v) v->kind = kind;
    return v;
}

/* Appends kid (taking it); a dict key already there keeps its place and
 * takes the new value. false when out of memory (kid freed). */
static bool pv_add(pv *v, gram_text *key, pv *kid) {
    if (key) {
        for (int i = 0; i < v->n; i++) {
            if (v->keys[i].n == key->n && memcmp(v->keys[i].p, key->p, key->n) == 0) {
                pv_free(v->kids[i]);
                v->kids[i] = kid;
                gram_text_free(key);
                return true;
            }
        }
    }
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        pv **k = realloc(v->kids, (size_t)cap * sizeof *k);
        if (k) v->kids = k;
        gram_text *ks = NULL;
        if (k && key) {
            ks = realloc(v->keys, (size_t)cap * sizeof *ks);
            if (ks) v->keys = ks;
        }
        if (!k || (key && !ks)) {
            pv_free(kid);
            if (key) gram_text_free(key);
            return false;
        }
        v->cap = cap;
    }
    v->kids[v->n] = kid;
    if (key) {
        v->keys[v->n] = *key;
        memset(key, 0, sizeof *key);
    }
    v->n++;
    return true;
}

static void pv_write(const pv *v, gram_text *out) {
    switch (v->kind) {
    case PV_SCALAR: gram_text_put(out, v->text.p, v->text.n); break;
    case PV_LIST:
        gram_text_byte(out, '[');
        for (int i = 0; i < v->n; i++) {
            if (i) put_str(out, ", ");
            pv_write(v->kids[i], out);
        }
        gram_text_byte(out, ']');
        break;
    case PV_DICT:
        gram_text_byte(out, '{');
        for (int i = 0; i < v->n; i++) {
            if (i) put_str(out, ", ");
            gram_text_put(out, v->keys[i].p, v->keys[i].n);
            put_str(out, ": ");
            pv_write(v->kids[i], out);
        }
        gram_text_byte(out, '}');
        break;
    }
}

/* ---------------------------------------------------------------------------
 * The reader both languages share
 * ------------------------------------------------------------------------- */

typedef struct rd {
    const char *s, *end;
    bool python; /* ast.literal_eval, else json.loads */
    int depth;
    bool oom;
} rd;

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || is_digit(c); }

static void skip_ws(rd *r) {
    while (r->s < r->end) {
        char c = *r->s;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            r->s++;
        } else if (r->python && c == '\\' && r->s + 1 < r->end && r->s[1] == '\n') {
            r->s += 2; /* a line continuation */
        } else if (r->python && c == '\f') {
            r->s++;
        } else {
            break;
        }
    }
}

static bool word(rd *r, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(r->end - r->s) < n || memcmp(r->s, w, n) != 0) return false;
    if (r->s + n < r->end && is_ident(r->s[n])) return false;
    r->s += n;
    return true;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool hex_run(const char *s, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int h = hexval(s[i]);
        if (h < 0) return false;
        v = v * 16 + (uint32_t)h;
    }
    *out = v;
    return true;
}

/* A JSON string at r->s ('"'), decoded and written again. */
static bool json_string(rd *r, gram_text *out) {
    r->s++;
    gram_text_byte(out, '"');
    while (r->s < r->end) {
        unsigned char c = (unsigned char)*r->s;
        if (c == '"') {
            r->s++;
            gram_text_byte(out, '"');
            return true;
        }
        if (c < 0x20) return false; /* json.loads is strict about control characters */
        if (c != '\\') {
            if (c >= 0x80) gram_text_byte(out, (char)c);
            else put_cp(out, c);
            r->s++;
            continue;
        }
        if (r->s + 1 >= r->end) return false;
        char k = r->s[1];
        r->s += 2;
        uint32_t cp;
        switch (k) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (r->end - r->s < 4 || !hex_run(r->s, 4, &cp)) return false;
            r->s += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && r->end - r->s >= 6 && r->s[0] == '\\' && r->s[1] == 'u') {
                uint32_t lo;
                if (hex_run(r->s + 2, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    r->s += 6;
                }
            }
            break;
        default: return false;
        }
        put_cp(out, cp);
    }
    return false;
}

/* One Python string literal at r->s (prefix letters included), decoded and
 * appended to out (without quotes). */
static bool py_string_part(rd *r, gram_text *out) {
    bool raw = false;
    while (r->s < r->end && *r->s != '"' && *r->s != '\'') {
        char c = (char)(*r->s | 0x20);
        if (c == 'r') raw = true;
        else if (c != 'u') return false; /* b'' (bytes) and f'' cannot become JSON */
        r->s++;
    }
    if (r->s >= r->end) return false;
    char q = *r->s;
    bool triple = r->end - r->s >= 3 && r->s[1] == q && r->s[2] == q;
    r->s += triple ? 3 : 1;
    while (r->s < r->end) {
        unsigned char c = (unsigned char)*r->s;
        if (c == (unsigned char)q) {
            if (!triple) {
                r->s++;
                return true;
            }
            if (r->end - r->s >= 3 && r->s[1] == q && r->s[2] == q) {
                r->s += 3;
                return true;
            }
        }
        if (c == '\n' && !triple) return false;
        if (c != '\\') {
            if (c >= 0x80) gram_text_byte(out, (char)c);
            else put_cp(out, c);
            r->s++;
            continue;
        }
        if (r->s + 1 >= r->end) return false;
        char k = r->s[1];
        if (raw) {
            /* the backslash stays, and protects the character after it */
            put_cp(out, '\\');
            r->s++;
            if (k == '\n') {
                put_cp(out, '\n');
                r->s++;
            } else if (k == q || k == '\\') {
                put_cp(out, (unsigned char)k);
                r->s++;
            }
            continue;
        }
        r->s += 2;
        uint32_t cp;
        switch (k) {
        case '\n': continue; /* a line continuation */
        case '\\': cp = '\\'; break;
        case '\'': cp = '\''; break;
        case '"': cp = '"'; break;
        case 'a': cp = 7; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'v': cp = 11; break;
        case 'x':
            if (r->end - r->s < 2 || !hex_run(r->s, 2, &cp)) return false;
            r->s += 2;
            break;
        case 'u':
            if (r->end - r->s < 4 || !hex_run(r->s, 4, &cp)) return false;
            r->s += 4;
            break;
        case 'U':
            if (r->end - r->s < 8 || !hex_run(r->s, 8, &cp) || cp > 0x10FFFF) return false;
            r->s += 8;
            break;
        case 'N': return false; /* \N{name}: no name table here */
        default:
            if (k >= '0' && k <= '7') {
                cp = (uint32_t)(k - '0');
                for (int i = 0; i < 2 && r->s < r->end && *r->s >= '0' && *r->s <= '7'; i++) cp = cp * 8 + (uint32_t)(*r->s++ - '0');
                break;
            }
            /* an unknown escape keeps its backslash */
            put_cp(out, '\\');
            r->s--;
            continue;
        }
        put_cp(out, cp);
    }
    return false;
}

static bool starts_py_string(const rd *r) {
    const char *p = r->s;
    for (int i = 0; i < 3 && p < r->end; i++, p++) {
        if (*p == '"' || *p == '\'') return true;
        char c = (char)(*p | 0x20);
        if (c != 'r' && c != 'u' && c != 'b' && c != 'f') return false;
    }
    return false;
}

/* Python strings, adjacent ones joined, as one JSON string. */
static bool py_string(rd *r, gram_text *out) {
    gram_text_byte(out, '"');
    do {
        if (!py_string_part(r, out)) return false;
        const char *save = r->s;
        skip_ws(r);
        if (!starts_py_string(r)) {
            r->s = save;
            break;
        }
    } while (true);
    gram_text_byte(out, '"');
    return true;
}

/* digit (['_'] digit)* when python, else digit+; returns the count read. */
static size_t digit_run(rd *r, gram_text *keep) {
    size_t n = 0;
    while (r->s < r->end) {
        if (is_digit(*r->s)) {
            gram_text_byte(keep, *r->s++);
            n++;
        } else if (r->python && *r->s == '_' && n && r->s + 1 < r->end && is_digit(r->s[1])) {
            r->s++;
        } else {
            break;
        }
    }
    return n;
}

/* A number at r->s (after its sign); neg: a '-' came before it. */
static bool number(rd *r, bool neg, gram_text *out) {
    gram_text d = {0};
    bool ok = false;
    if (r->python && r->end - r->s > 2 && r->s[0] == '0' && r->s[1] && strchr("xXoObB", r->s[1])) {
        int base = (r->s[1] | 0x20) == 'x' ? 16 : (r->s[1] | 0x20) == 'o' ? 8 : 2;
        r->s += 2;
        uint64_t v = 0;
        int n = 0;
        while (r->s < r->end) {
            int h = *r->s == '_' && n ? -2 : hexval(*r->s);
            if (h == -2) {
                r->s++;
                continue;
            }
            if (h < 0 || h >= base) break;
            if (v > (UINT64_MAX - (uint64_t)h) / (uint64_t)base) goto done; /* past 2^64: not here */
            v = v * (uint64_t)base + (uint64_t)h;
            n++;
            r->s++;
        }
        if (!n || (r->s < r->end && is_ident(*r->s))) goto done;
        char t[32];
        snprintf(t, sizeof t, "%llu", (unsigned long long)v);
        put_int_digits(out, neg, t, strlen(t));
        ok = true;
        goto done;
    }
    size_t ni = digit_run(r, &d), nf = 0;
    bool frac = false, exp = false;
    if (!r->python && ni > 1 && d.p[0] == '0') goto done; /* JSON: no leading zero */
    if (r->s < r->end && *r->s == '.') {
        frac = true;
        gram_text_byte(&d, '.');
        r->s++;
        nf = digit_run(r, &d);
        if (!r->python && nf == 0) goto done;
    }
    if (ni + nf == 0) goto done;
    if (r->s < r->end && (*r->s | 0x20) == 'e') {
        exp = true;
        gram_text_byte(&d, 'e');
        r->s++;
        if (r->s < r->end && (*r->s == '+' || *r->s == '-')) gram_text_byte(&d, *r->s++);
        if (!digit_run(r, &d)) goto done;
    }
    if (r->s < r->end && (is_ident(*r->s) || *r->s == '.')) goto done; /* 1j, 1abc, 1.2.3 */
    if (d.oom) goto done;
    if (!frac && !exp) {
        /* Python 3 refuses 007 (but not 000) */
        bool zeros = true;
        for (size_t i = 0; i < d.n; i++) zeros &= d.p[i] == '0';
        if (r->python && d.n > 1 && d.p[0] == '0' && !zeros) goto done;
        put_int_digits(out, neg, d.p, d.n);
    } else {
        errno = 0;
        double x = strtod(d.p, NULL);
        if (isinf(x)) goto done; /* json.dumps would write Infinity, which is not JSON */
        put_float(out, neg ? -x : x);
    }
    ok = true;
done:
    gram_text_free(&d);
    return ok;
}

static pv *value(rd *r);

static pv *scalar(gram_text *t) {
    pv *v = pv_new(PV_SCALAR);
    if (!v) {
        gram_text_free(t);
        return NULL;
    }
    v->text = *t;
    return v;
}

/* The text of a dict key as json.dumps writes it (a string, or a
 * scalar's text in quotes). */
static bool key_text(const pv *k, gram_text *out) {
    if (k->kind != PV_SCALAR || k->text.n == 0) return false;
    if (k->text.p[0] == '"') return gram_text_put(out, k->text.p, k->text.n);
    return gram_text_byte(out, '"') && gram_text_put(out, k->text.p, k->text.n) && gram_text_byte(out, '"');
}

/* The items of a list, tuple or dict after its opening bracket, up to close. */
static pv *items(rd *r, char close, bool dict, pv *first) {
    pv *v = pv_new(dict ? PV_DICT : PV_LIST);
    pv *key = first;
    if (!v) goto fail;
    for (;;) {
        skip_ws(r);
        if (!key) {
            if (r->s < r->end && *r->s == close) {
                r->s++;
                return v;
            }
            if (!(key = value(r))) goto fail;
            skip_ws(r);
        }
        if (dict) {
            if (r->s >= r->end || *r->s != ':') goto fail;
            r->s++;
            gram_text kt = {0};
            if ((!r->python && (key->kind != PV_SCALAR || key->text.p[0] != '"')) || !key_text(key, &kt)) {
                gram_text_free(&kt);
                goto fail;
            }
            pv_free(key);
            key = NULL;
            pv *val = value(r);
            if (!val) {
                gram_text_free(&kt);
                goto fail;
            }
            if (!pv_add(v, &kt, val)) goto oom;
        } else {
            if (!pv_add(v, NULL, key)) {
                key = NULL;
                goto oom;
            }
            key = NULL;
        }
        skip_ws(r);
        if (r->s < r->end && *r->s == ',') {
            r->s++;
            if (!r->python) {
                skip_ws(r);
                if (r->s < r->end && *r->s == close) goto fail; /* JSON has no trailing comma */
            }
            continue;
        }
        if (r->s < r->end && *r->s == close) {
            r->s++;
            return v;
        }
        goto fail;
    }
oom:
    r->oom = true;
fail:
    pv_free(key);
    pv_free(v);
    return NULL;
}

static pv *value(rd *r) {
    if (++r->depth > PY_MAX_DEPTH) return NULL;
    pv *v = NULL;
    gram_text t = {0};
    skip_ws(r);
    if (r->s >= r->end) goto out;
    char c = *r->s;
    if (c == '[') {
        r->s++;
        v = items(r, ']', false, NULL);
    } else if (c == '{') {
        r->s++;
        skip_ws(r);
        if (r->s < r->end && *r->s == '}') {
            r->s++;
            v = pv_new(PV_DICT);
            goto out;
        }
        pv *first = value(r);
        if (!first) goto out;
        skip_ws(r);
        if (r->s >= r->end || *r->s != ':') { /* a set: json.dumps cannot write it */
            pv_free(first);
            goto out;
        }
        v = items(r, '}', true, first);
    } else if (c == '(' && r->python) {
        r->s++;
        skip_ws(r);
        if (r->s < r->end && *r->s == ')') {
            r->s++;
            v = pv_new(PV_LIST);
            goto out;
        }
        pv *first = value(r);
        if (!first) goto out;
        skip_ws(r);
        if (r->s < r->end && *r->s == ')') { /* parentheses around one value */
            r->s++;
            v = first;
            goto out;
        }
        if (r->s >= r->end || *r->s != ',') {
            pv_free(first);
            goto out;
        }
        pv *list = pv_new(PV_LIST);
        if (!list || !pv_add(list, NULL, first)) {
            if (!list) pv_free(first);
            pv_free(list);
            goto out;
        }
        r->s++;
        pv *rest = items(r, ')', false, NULL);
        if (!rest) {
            pv_free(list);
            goto out;
        }
        bool ok = true;
        for (int i = 0; i < rest->n && ok; i++) {
            ok = pv_add(list, NULL, rest->kids[i]);
            rest->kids[i] = NULL;
        }
        rest->n = 0;
        pv_free(rest);
        if (!ok) {
            pv_free(list);
            goto out;
        }
        v = list;
    } else if (!r->python && c == '"') {
        if (json_string(r, &t)) v = scalar(&t);
    } else if (r->python && starts_py_string(r)) {
        if (py_string(r, &t)) v = scalar(&t);
    } else if (c == '-' || (c == '+' && r->python) || is_digit(c) || (c == '.' && r->python)) {
        bool neg = false;
        if (c == '-' || c == '+') {
            neg = c == '-';
            r->s++;
            if (r->python) skip_ws(r);
        }
        if (r->s < r->end && (is_digit(*r->s) || (r->python && *r->s == '.')) && number(r, neg, &t)) v = scalar(&t);
    } else if (word(r, r->python ? "True" : "true")) {
        put_str(&t, "true");
        v = scalar(&t);
    } else if (word(r, r->python ? "False" : "false")) {
        put_str(&t, "false");
        v = scalar(&t);
    } else if (word(r, r->python ? "None" : "null")) {
        put_str(&t, "null");
        v = scalar(&t);
    }
out:
    if (v && v->kind == PV_SCALAR && v->text.oom) {
        pv_free(v);
        v = NULL;
        r->oom = true;
    }
    if (!v) gram_text_free(&t);
    r->depth--;
    return v;
}

static int read_all(const char *s, size_t n, bool python, gram_text *out) {
    rd r = {.s = s, .end = s + n, .python = python};
    pv *v = value(&r);
    if (v) {
        skip_ws(&r);
        if (r.s != r.end) {
            pv_free(v);
            v = NULL;
        }
    }
    if (!v) return -1;
    size_t mark = out->n;
    pv_write(v, out);
    pv_free(v);
    if (out->oom) {
        out->n = mark;
        return -1;
    }
    return 0;
}

int gram_py_literal(const char *s, size_t n, gram_text *out) { return read_all(s, n, true, out); }

int gram_py_json(const char *s, size_t n, gram_text *out) { return read_all(s, n, false, out); }

/* ---------------------------------------------------------------------------
 * int() and float() of a parameter's text
 * ------------------------------------------------------------------------- */

static void strip(const char **s, size_t *n) {
    while (*n && strchr(" \t\n\r\f\v", (*s)[0])) (*s)++, (*n)--;
    while (*n && strchr(" \t\n\r\f\v", (*s)[*n - 1])) (*n)--;
}

int gram_py_int(const char *s, size_t n, gram_text *out) {
    strip(&s, &n);
    bool neg = false;
    if (n && (*s == '+' || *s == '-')) {
        neg = *s == '-';
        s++, n--;
    }
    gram_text d = {0};
    bool ok = n > 0;
    for (size_t i = 0; i < n && ok; i++) {
        if (is_digit(s[i])) gram_text_byte(&d, s[i]);
        else ok = s[i] == '_' && i > 0 && i + 1 < n && is_digit(s[i - 1]) && is_digit(s[i + 1]);
    }
    if (ok && !d.oom) put_int_digits(out, neg, d.p, d.n);
    gram_text_free(&d);
    return ok && !d.oom ? 0 : -1;
}

int gram_py_number(const char *s, size_t n, gram_text *out) {
    strip(&s, &n);
    /* Python's float() grammar: [sign] (digits [. [digits]] | . digits) [e [sign] digits] */
    gram_text d = {0};
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) gram_text_byte(&d, s[i++]);
    size_t nd = 0, nf = 0;
    bool ok = true;
#define DIGITS(count)                                                                             \
    while (i < n && (is_digit(s[i]) || (s[i] == '_' && (count) && i + 1 < n && is_digit(s[i + 1])))) { \
        if (s[i] != '_') gram_text_byte(&d, s[i]), (count)++;                                       \
        i++;                                                                                        \
    }
    DIGITS(nd);
    if (i < n && s[i] == '.') {
        gram_text_byte(&d, s[i++]);
        DIGITS(nf);
    }
    if (nd + nf == 0) ok = false; /* also "inf" and "nan": refused, a number parameter cannot hold them */
    if (ok && i < n && (s[i] | 0x20) == 'e') {
        gram_text_byte(&d, 'e');
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) gram_text_byte(&d, s[i++]);
        size_t ne = 0;
        DIGITS(ne);
        ok = ne > 0;
    }
#undef DIGITS
    ok = ok && i == n && !d.oom;
    double x = ok ? strtod(d.p, NULL) : 0;
    gram_text_free(&d);
    if (!ok || !isfinite(x)) return -1;
    if (x == floor(x)) put_whole(out, x);
    else put_float(out, x);
    return out->oom ? -1 : 0;
}
