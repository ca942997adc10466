/*
 * tok_json.c - one strict pass over a tokenizer.json (see tok_json.h).
 *
 * The scanner accepts exactly RFC 8259 JSON with UTF-8 strings (what jansson
 * accepts); on any error the file is handed to jansson for its message, so
 * that errors read the same as for every other JSON file.
 */
#include "tokenizer/tok_json.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"
#include "util/file_map.h"
#include "util/json_file.h"

#define MAX_DEPTH 512

typedef struct scan {
    const char *s;
    size_t n, i;
    const char *err;  /* what went wrong at i */
} scan;

static bool fail(scan *c, const char *what) {
    if (!c->err) c->err = what;
    return false;
}

static void skip_ws(scan *c) {
    while (c->i < c->n) {
        char ch = c->s[c->i];
        if (ch != ' ' && ch != '\n' && ch != '\r' && ch != '\t') return;
        c->i++;
    }
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = p[k];
        int d = ch >= '0' && ch <= '9' ? ch - '0'
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at c->i (the opening quote). With out, its decoded bytes are
 * written there (never more than the escaped length) and *len set. */
static bool read_string(scan *c, char *out, size_t *len) {
    if (c->i >= c->n || c->s[c->i] != '"') return fail(c, "expected a string");
    c->i++;
    size_t w = 0;
    while (c->i < c->n) {
        /* the plain ASCII run */
        size_t start = c->i;
        while (c->i < c->n) {
            unsigned char ch = (unsigned char)c->s[c->i];
            if (ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x80) break;
            c->i++;
        }
        if (out && c->i > start) {
            memcpy(out + w, c->s + start, c->i - start);
        }
        w += c->i - start;
        if (c->i >= c->n) break;
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '"') {
            c->i++;
            if (len) *len = w;
            return true;
        }
        if (ch < 0x20) return fail(c, "control character in a string");
        if (ch >= 0x80) {
            size_t cl = tok_utf8_char_len((const uint8_t *)c->s + c->i, c->n - c->i);
            if (cl == 0) return fail(c, "invalid UTF-8 in a string");
            if (out) memcpy(out + w, c->s + c->i, cl);
            w += cl;
            c->i += cl;
            continue;
        }
        /* an escape */
        if (c->i + 1 >= c->n) break;
        char e = c->s[c->i + 1];
        char lit = 0;
        switch (e) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': break;
        default: return fail(c, "invalid escape in a string");
        }
        if (e != 'u') {
            if (out) out[w] = lit;
            w++;
            c->i += 2;
            continue;
        }
        if (c->i + 6 > c->n) return fail(c, "truncated \\u escape");
        int v = hex4(c->s + c->i + 2);
        if (v < 0) return fail(c, "invalid \\u escape");
        c->i += 6;
        uint32_t cp = (uint32_t)v;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            int lo = c->i + 6 <= c->n && c->s[c->i] == '\\' && c->s[c->i + 1] == 'u'
                         ? hex4(c->s + c->i + 2) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail(c, "invalid Unicode surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            c->i += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail(c, "invalid Unicode surrogate");
        } else if (cp == 0) {
            return fail(c, "\\u0000 in a string");  /* jansson refuses it too */
        }
        char tmp[4];
        size_t l = put_utf8(out ? out + w : tmp, cp);
        w += l;
    }
    return fail(c, "unterminated string");
}

static bool skip_number(scan *c) {
    size_t i = c->i;
    if (i < c->n && c->s[i] == '-') i++;
    if (i >= c->n) return fail(c, "invalid number");
    if (c->s[i] == '0') {
        i++;
    } else if (c->s[i] >= '1' && c->s[i] <= '9') {
        while (i < c->n && c->s[i] >= '0' && c->s[i] <= '9') i++;
    } else {
        return fail(c, "invalid number");
    }
    if (i < c->n && c->s[i] == '.') {
        i++;
        if (i >= c->n || c->s[i] < '0' || c->s[i] > '9') return fail(c, "invalid number");
        while (i < c->n && c->s[i] >= '0' && c->s[i] <= '9') i++;
    }
    if (i < c->n && (c->s[i] == 'e' || c->s[i] == 'E')) {
        i++;
        if (i < c->n && (c->s[i] == '+' || c->s[i] == '-')) i++;
        if (i >= c->n || c->s[i] < '0' || c->s[i] > '9') return fail(c, "invalid number");
        while (i < c->n && c->s[i] >= '0' && c->s[i] <= '9') i++;
    }
    c->i = i;
    return true;
}

static bool skip_value(scan *c, int depth);

static bool skip_literal(scan *c, const char *lit) {
    size_t l = strlen(lit);
    if (c->i + l > c->n || memcmp(c->s + c->i, lit, l) != 0) return fail(c, "invalid value");
    c->i += l;
    return true;
}

/* Calls member(c, key, key_len, user) with c->i at each value of the object
 * at c->i; member must consume the value. key is decoded into keybuf. */
typedef bool (*member_fn)(scan *c, const char *key, size_t key_len, void *user);

static bool scan_object(scan *c, int depth, member_fn member, void *user) {
    if (depth > MAX_DEPTH) return fail(c, "nesting too deep");
    if (c->i >= c->n || c->s[c->i] != '{') return fail(c, "expected an object");
    c->i++;
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == '}') {
        c->i++;
        return true;
    }
    char keybuf[256];
    for (;;) {
        skip_ws(c);
        /* keys longer than keybuf are skipped over and reported as "" */
        size_t save = c->i, klen = 0;
        if (!read_string(c, NULL, &klen)) return false;
        const char *key = "";
        if (klen < sizeof keybuf) {
            scan k = {c->s, c->n, save, NULL};
            read_string(&k, keybuf, &klen);
            keybuf[klen] = '\0';
            key = keybuf;
        } else {
            klen = 0;
        }
        skip_ws(c);
        if (c->i >= c->n || c->s[c->i] != ':') return fail(c, "expected ':'");
        c->i++;
        skip_ws(c);
        if (member ? !member(c, key, klen, user) : !skip_value(c, depth + 1)) return false;
        skip_ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == '}') {
            c->i++;
            return true;
        }
        return fail(c, "expected ',' or '}'");
    }
}

static bool skip_value(scan *c, int depth) {
    if (depth > MAX_DEPTH) return fail(c, "nesting too deep");
    if (c->i >= c->n) return fail(c, "unexpected end of text");
    switch (c->s[c->i]) {
    case '{':
        return scan_object(c, depth, NULL, NULL);
    case '[':
        c->i++;
        skip_ws(c);
        if (c->i < c->n && c->s[c->i] == ']') {
            c->i++;
            return true;
        }
        for (;;) {
            skip_ws(c);
            if (!skip_value(c, depth + 1)) return false;
            skip_ws(c);
            if (c->i < c->n && c->s[c->i] == ',') {
                c->i++;
                continue;
            }
            if (c->i < c->n && c->s[c->i] == ']') {
                c->i++;
                return true;
            }
            return fail(c, "expected ',' or ']'");
        }
    case '"':
        return read_string(c, NULL, NULL);
    case 't':
        return skip_literal(c, "true");
    case 'f':
        return skip_literal(c, "false");
    case 'n':
        return skip_literal(c, "null");
    default:
        return skip_number(c);
    }
}

/* ---------------------------------------------------------------------------
 * The document
 * ------------------------------------------------------------------------- */

typedef struct doc_state {
    tok_json_doc *d;
    json_t *model;       /* model members other than vocab and merges */
    bool model_is_object;
    const char *jerr;    /* a jansson failure on a small member */
} doc_state;

/* Parses s[0..n) with jansson and stores it under key in obj. */
static bool keep_member(scan *c, json_t *obj, const char *key, size_t start, doc_state *st) {
    json_error_t je;
    json_t *v = json_loadb(c->s + start, c->i - start, JSON_DECODE_ANY, &je);
    if (!v) {
        st->jerr = "invalid value";
        return fail(c, "invalid value");
    }
    json_object_set_new(obj, key, v);
    return true;
}

static bool model_member(scan *c, const char *key, size_t klen, void *user) {
    doc_state *st = user;
    size_t start = c->i;
    if (!skip_value(c, 2)) return false;
    if (strcmp(key, "vocab") == 0) {
        st->d->vocab = (tok_json_span){c->s + start, c->i - start};
        return true;
    }
    if (strcmp(key, "merges") == 0) {
        st->d->merges = (tok_json_span){c->s + start, c->i - start};
        return true;
    }
    (void)klen;
    return keep_member(c, st->model, key, start, st);
}

static bool root_member(scan *c, const char *key, size_t klen, void *user) {
    doc_state *st = user;
    (void)klen;
    if (strcmp(key, "model") == 0 && c->i < c->n && c->s[c->i] == '{') {
        st->d->vocab = st->d->merges = (tok_json_span){NULL, 0};
        json_object_clear(st->model);
        st->model_is_object = true;
        return scan_object(c, 1, model_member, st);
    }
    size_t start = c->i;
    if (!skip_value(c, 1)) return false;
    if (strcmp(key, "model") == 0) st->model_is_object = false;
    return keep_member(c, st->d->root, key, start, st);
}

void tok_json_free(tok_json_doc *d) {
    if (d->root) json_decref(d->root);
    free(d->text);
    memset(d, 0, sizeof *d);
}

int tok_json_load(tok_json_doc *d, const char *path, pdl_error *err) {
    memset(d, 0, sizeof *d);
    if (file_read(path, PDL_READ_MAX_TOKENIZER, &d->text, &d->len, err) != 0) return -1;
    d->root = json_object();
    doc_state st = {.d = d, .model = json_object()};
    if (!d->root || !st.model) {
        if (st.model) json_decref(st.model);
        tok_json_free(d);
        return err_fail(err, "%s: out of memory", path);
    }
    scan c = {d->text, d->len, 0, NULL};
    skip_ws(&c);
    bool ok = scan_object(&c, 0, root_member, &st);
    if (ok) {
        skip_ws(&c);
        if (c.i != c.n) ok = fail(&c, "text after the document");
    }
    if (ok && st.model_is_object) json_object_set(d->root, "model", st.model);
    json_decref(st.model);
    if (ok) return 0;
    /* let jansson describe the error, as for any JSON file */
    size_t line = 1;
    for (size_t i = 0; i < c.i && i < c.n; i++) line += d->text[i] == '\n';
    const char *what = c.err ? c.err : "invalid JSON";
    tok_json_free(d);
    json_t *j = NULL;
    if (json_file_load(path, 0, &j, err) != 0) return -1;
    json_decref(j);
    return err_fail(err, "%s: invalid JSON at line %zu: %s", path, line, what);
}

/* ---------------------------------------------------------------------------
 * model.vocab and model.merges
 * ------------------------------------------------------------------------- */

typedef struct vocab_state {
    char *pool;
    size_t pool_n;
    tok_json_vocab_entry *e;
    size_t n, cap;
    bool oom;
} vocab_state;

/* Reads the string at c->i into the pool; returns its offset. */
static bool pool_string(scan *c, char *pool, size_t *pool_n, uint32_t *off, uint32_t *len) {
    size_t l = 0;
    if (!read_string(c, pool + *pool_n, &l)) return false;
    *off = (uint32_t)*pool_n;
    *len = (uint32_t)l;
    pool[*pool_n + l] = '\0';
    *pool_n += l + 1;
    return true;
}

static int64_t read_int(scan *c) {
    size_t start = c->i;
    if (!skip_number(c)) return INT64_MIN;
    bool neg = c->s[start] == '-';
    int64_t v = 0;
    for (size_t i = start + neg; i < c->i; i++) {
        char ch = c->s[i];
        if (ch < '0' || ch > '9' || v > (INT64_MAX - 9) / 10) return INT64_MIN;
        v = v * 10 + (ch - '0');
    }
    return neg ? -v : v;
}

int tok_json_vocab(const tok_json_doc *d, const char *path, char **pool,
                   tok_json_vocab_entry **entries, size_t *n, pdl_error *err) {
    *pool = NULL;
    *entries = NULL;
    *n = 0;
    const tok_json_span *sp = &d->vocab;
    /* decoded keys are never longer than their JSON text */
    vocab_state st = {.pool = malloc(sp->n + 1)};
    if (!st.pool) return err_fail(err, "%s: out of memory for model.vocab", path);
    scan c = {sp->p, sp->n, 1, NULL};
    skip_ws(&c);
    if (c.i < c.n && c.s[c.i] != '}') {
        for (;;) {
            skip_ws(&c);
            if (st.n == st.cap) {
                size_t cap = st.cap ? st.cap * 2 : 1024;
                tok_json_vocab_entry *e = realloc(st.e, cap * sizeof *e);
                if (!e) {
                    free(st.e);
                    free(st.pool);
                    return err_fail(err, "%s: out of memory for model.vocab", path);
                }
                st.e = e;
                st.cap = cap;
            }
            tok_json_vocab_entry *e = &st.e[st.n++];
            if (!pool_string(&c, st.pool, &st.pool_n, &e->off, &e->len)) break;
            skip_ws(&c);
            c.i++; /* ':' (checked by the document scan) */
            skip_ws(&c);
            if (c.i < c.n && (c.s[c.i] == '-' || (c.s[c.i] >= '0' && c.s[c.i] <= '9'))) {
                e->id = read_int(&c); /* INT64_MIN for 1.5, 1e3, overflow */
            } else {
                e->id = INT64_MIN;
                if (!skip_value(&c, 2)) break;
            }
            skip_ws(&c);
            if (c.i < c.n && c.s[c.i] == ',') {
                c.i++;
                continue;
            }
            break;
        }
    }
    if (c.err) {
        free(st.e);
        free(st.pool);
        return err_fail(err, "%s: model.vocab: %s", path, c.err);
    }
    *pool = st.pool;
    *entries = st.e;
    *n = st.n;
    return 0;
}

int tok_json_merges(const tok_json_doc *d, const char *path, char **pool, tok_json_merge **merges,
                    size_t *n, pdl_error *err) {
    *pool = NULL;
    *merges = NULL;
    *n = 0;
    const tok_json_span *sp = &d->merges;
    char *p = malloc(sp->n + 2);
    size_t pn = 0, cap = 0, count = 0;
    tok_json_merge *m = NULL;
    if (!p) return err_fail(err, "%s: out of memory for model.merges", path);
    scan c = {sp->p, sp->n, 1, NULL};
    skip_ws(&c);
    bool ok = true;
    if (c.i < c.n && c.s[c.i] != ']') {
        for (;;) {
            skip_ws(&c);
            if (count == cap) {
                cap = cap ? cap * 2 : 4096;
                tok_json_merge *nm = realloc(m, cap * sizeof *nm);
                if (!nm) {
                    free(m);
                    free(p);
                    return err_fail(err, "%s: out of memory for model.merges", path);
                }
                m = nm;
            }
            tok_json_merge *e = &m[count++];
            *e = (tok_json_merge){UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
            if (c.i < c.n && c.s[c.i] == '"') {
                uint32_t off, len;
                if (!(ok = pool_string(&c, p, &pn, &off, &len))) break;
                /* "a b": exactly one space */
                const char *s = p + off;
                const char *space = memchr(s, ' ', len);
                if (space && !memchr(space + 1, ' ', len - (size_t)(space + 1 - s))) {
                    e->a_off = off;
                    e->a_len = (uint32_t)(space - s);
                    e->b_off = off + e->a_len + 1;
                    e->b_len = len - e->a_len - 1;
                }
            } else if (c.i < c.n && c.s[c.i] == '[') {
                size_t save = c.i;
                c.i++;
                skip_ws(&c);
                uint32_t ao = 0, al = 0, bo = 0, bl = 0;
                bool pair = c.i < c.n && c.s[c.i] == '"' && pool_string(&c, p, &pn, &ao, &al);
                if (pair) {
                    skip_ws(&c);
                    pair = c.i < c.n && c.s[c.i] == ',';
                    c.i++;
                    skip_ws(&c);
                    pair = pair && c.i < c.n && c.s[c.i] == '"' && pool_string(&c, p, &pn, &bo, &bl);
                    skip_ws(&c);
                    pair = pair && c.i < c.n && c.s[c.i] == ']';
                    c.i++;
                }
                if (pair) {
                    *e = (tok_json_merge){ao, al, bo, bl};
                } else {
                    c.i = save;
                    c.err = NULL;
                    if (!(ok = skip_value(&c, 2))) break;
                }
            } else if (!(ok = skip_value(&c, 2))) {
                break;
            }
            skip_ws(&c);
            if (c.i < c.n && c.s[c.i] == ',') {
                c.i++;
                continue;
            }
            break;
        }
    }
    if (!ok || c.err) {
        free(m);
        free(p);
        return err_fail(err, "%s: model.merges: %s", path, c.err ? c.err : "invalid");
    }
    *pool = p;
    *merges = m;
    *n = count;
    return 0;
}
