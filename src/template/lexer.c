/*
 * lexer.c - template source to tokens, with Jinja2's whitespace rules.
 *
 * The source is split into literal text and tags ({{ }}, {% %}, {# #},
 * {% raw %}). Whitespace control is applied here, as Jinja2's lexer does it
 * with Hugging Face's settings: `{%-` / `-%}` strip all whitespace on that
 * side, `{%+` / `+%}` turn the automatic rules off, trim_blocks drops the
 * first newline after a block or comment tag, lstrip_blocks drops the spaces
 * and tabs between the start of a line and a block or comment tag. Newlines
 * are normalized to "\n" and one trailing newline is dropped
 * (keep_trailing_newline=False). Comments produce no tokens.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_internal.h"

typedef struct lexer {
    tparse_state *ps;
    const char *src; /* normalized source */
    size_t len, pos;
    int line;
    ttoken *toks;
    size_t n, cap;
    char brace_stack[256]; /* open ( [ { inside the current tag */
    int depth;
} lexer;

static ttoken *push_tok(lexer *L, tok_type type, int line) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        ttoken *t = parse_alloc(L->ps, cap * sizeof *t);
        if (L->n) memcpy(t, L->toks, L->n * sizeof *t);
        L->toks = t;
        L->cap = cap;
    }
    ttoken *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = line;
    return t;
}

static int count_lines(const char *p, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += p[i] == '\n';
    return c;
}

/* Advances pos to `to`, counting lines. */
static void advance(lexer *L, size_t to) {
    L->line += count_lines(L->src + L->pos, to - L->pos);
    L->pos = to;
}

static const char *find2(const char *p, size_t from, size_t len, char a, char b) {
    for (size_t i = from; i + 1 < len; i++)
        if (p[i] == a && p[i + 1] == b) return p + i;
    return NULL;
}

/* Python `\s+` fullmatch on p[0..n): non-empty and all whitespace. */
static bool all_space(const char *p, size_t n) { return n > 0 && ws_prefix(p, n) == n; }

/* Emits literal text [from, to) with the strip rule of the tag that follows:
 * sign '-' strips all trailing whitespace; lstrip (block and comment tags
 * without '+') strips the indentation of a line holding only the tag. */
static void emit_text(lexer *L, size_t from, size_t to, char sign, bool lstrip_tag) {
    const char *p = L->src + from;
    size_t n = to - from;
    int line = L->line;
    if (sign == '-') {
        n -= ws_suffix(p, n);
    } else if (sign != '+' && lstrip_tag) {
        size_t l_pos = n;
        while (l_pos > 0 && p[l_pos - 1] != '\n') l_pos--;
        bool line_starting = from == 0 || L->src[from - 1] == '\n';
        if ((l_pos > 0 || line_starting) && all_space(p + l_pos, n - l_pos)) n = l_pos;
    }
    if (n) {
        ttoken *t = push_tok(L, T_DATA, line);
        t->s = p;
        t->n = n;
    }
}

/* After a block or comment end: '-' strips following whitespace, '+'
 * nothing, otherwise trim_blocks removes one newline. */
static void after_block_end(lexer *L, char sign) {
    if (sign == '-') {
        advance(L, L->pos + ws_prefix(L->src + L->pos, L->len - L->pos));
    } else if (sign != '+' && L->pos < L->len && L->src[L->pos] == '\n') {
        advance(L, L->pos + 1);
    }
}

/* The tag opener at i: '{{', '{%' or '{#', with its sign char ('-', '+' or 0). */
static char sign_at(const lexer *L, size_t i) {
    if (i < L->len && (L->src[i] == '-' || L->src[i] == '+')) return L->src[i];
    return 0;
}

static size_t skip_ws(const lexer *L, size_t i) { return i + ws_prefix(L->src + i, L->len - i); }

static bool word_at(const lexer *L, size_t i, const char *w) {
    size_t n = strlen(w);
    return i + n <= L->len && memcmp(L->src + i, w, n) == 0;
}

/* `{%(-|+|)\s*raw\s*(-%}\s*|%})` at i: returns the end of the match or 0. */
static size_t match_raw_begin(const lexer *L, size_t i) {
    size_t j = i + 2;
    if (sign_at(L, j)) j++;
    j = skip_ws(L, j);
    if (!word_at(L, j, "raw")) return 0;
    j = skip_ws(L, j + 3);
    if (word_at(L, j, "-%}")) return skip_ws(L, j + 3);
    if (word_at(L, j, "%}")) return j + 2;
    return 0;
}

/* ---- inside tags ---- */

static bool is_name_start(unsigned char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static bool is_name_char(unsigned char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

static bool is_digit_in_base(char c, int base) {
    if (base == 2) return c == '0' || c == '1';
    if (base == 8) return c >= '0' && c <= '7';
    if (base == 16) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f');
    return c >= '0' && c <= '9';
}

/* digits with single underscores between them: (_?d)* after a first digit */
static size_t scan_digits(const lexer *L, size_t i, int base, bool first_may_underscore) {
    size_t j = i;
    for (;;) {
        size_t k = j;
        if (k < L->len && L->src[k] == '_' && (first_may_underscore || k > i)) k++;
        if (k < L->len && is_digit_in_base(L->src[k], base)) {
            j = k + 1;
        } else {
            break;
        }
    }
    return j;
}

static void copy_without_underscores(char *buf, size_t cap, const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        if (p[i] != '_') buf[k++] = p[i];
    buf[k] = '\0';
}

/* Jinja2's float_re and integer_re; returns the end or 0. */
static size_t lex_number(lexer *L, size_t i, int line) {
    const char *s = L->src;
    /* float (not right after a '.'): digits ( (.digits)? e[+-]?digits | .digits ) */
    size_t j = scan_digits(L, i, 10, false);
    if (j > i && !(i > 0 && s[i - 1] == '.')) {
        size_t k = j, end = 0;
        bool frac = false;
        if (k + 1 < L->len && s[k] == '.' && is_digit_in_base(s[k + 1], 10)) {
            k = scan_digits(L, k + 1, 10, false);
            frac = true;
        }
        if (k < L->len && (s[k] | 32) == 'e') {
            size_t e = k + 1;
            if (e < L->len && (s[e] == '+' || s[e] == '-')) e++;
            if (e < L->len && is_digit_in_base(s[e], 10)) end = scan_digits(L, e, 10, false);
        }
        if (!end && frac) end = k;
        if (end) {
            char buf[128];
            copy_without_underscores(buf, sizeof buf, s + i, end - i);
            ttoken *t = push_tok(L, T_FLOAT, line);
            t->f = strtod(buf, NULL);
            return end;
        }
    }
    /* integers: 0b / 0o / 0x, [1-9](_?d)*, 0(_?0)* */
    int base = 10;
    size_t start = i, end;
    if (s[i] == '0' && i + 1 < L->len && s[i + 1] && strchr("bBoOxX", s[i + 1])) {
        char c = (char)(s[i + 1] | 32);
        base = c == 'b' ? 2 : c == 'o' ? 8 : 16;
        end = scan_digits(L, i + 2, base, true);
        if (end == i + 2) base = 10; /* "0x" alone: just the 0 */
        else start = i + 2;
    }
    if (base == 10) {
        if (s[i] == '0') {
            end = i + 1;
            for (;;) {
                size_t k = end;
                if (k < L->len && s[k] == '_') k++;
                if (k < L->len && s[k] == '0') end = k + 1;
                else break;
            }
        } else if (s[i] >= '1' && s[i] <= '9') {
            end = scan_digits(L, i + 1, 10, true);
        } else {
            return 0;
        }
    }
    char buf[128];
    copy_without_underscores(buf, sizeof buf, s + start, end - start);
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, base);
    ttoken *t = push_tok(L, T_INT, line);
    if (errno == ERANGE || v > INT64_MAX) parse_fail(L->ps, line, "integer literal too large: %.*s", (int)(end - i), s + i);
    t->i = (int64_t)v;
    return end;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)(c | 32);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* A quoted string literal with Python's unicode-escape decoding; returns the
 * end or 0 when unterminated. */
static size_t lex_string(lexer *L, size_t i, int line) {
    const char *s = L->src;
    char q = s[i];
    size_t j = i + 1;
    while (j < L->len && s[j] != q) j += (s[j] == '\\' && j + 1 < L->len) ? 2 : 1;
    if (j >= L->len) return 0;
    /* decode [i+1, j) */
    char *out = parse_alloc(L->ps, j - i);
    size_t k = 0;
    for (size_t p = i + 1; p < j;) {
        if (s[p] != '\\') {
            out[k++] = s[p++];
            continue;
        }
        char c = s[p + 1];
        p += 2;
        const char *simple = strchr("\\'\"abfnrtv", c);
        if (c && simple) {
            static const char repl[] = "\\'\"\a\b\f\n\r\t\v";
            out[k++] = repl[simple - "\\'\"abfnrtv"];
        } else if (c == '\n') {
            /* line continuation */
        } else if (c >= '0' && c <= '7') {
            uint32_t v = (uint32_t)(c - '0');
            for (int d = 0; d < 2 && p < j && s[p] >= '0' && s[p] <= '7'; d++) v = v * 8 + (uint32_t)(s[p++] - '0');
            char u[4];
            size_t m = utf8_put(v, u);
            memcpy(out + k, u, m), k += m;
        } else if (c == 'x' || c == 'u' || c == 'U') {
            int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t v = 0;
            int d = 0;
            for (; d < nd && p + (size_t)d < j && hexval(s[p + (size_t)d]) >= 0; d++) v = v * 16 + (uint32_t)hexval(s[p + (size_t)d]);
            if (d < nd) parse_fail(L->ps, line, "(unicode error) 'unicodeescape' codec can't decode bytes: truncated \\%c escape", c);
            if (v > 0x10FFFF) parse_fail(L->ps, line, "(unicode error) 'unicodeescape' codec can't decode bytes: illegal Unicode character");
            p += (size_t)nd;
            char u[4];
            size_t m = utf8_put(v, u);
            memcpy(out + k, u, m), k += m;
        } else {
            /* unknown escapes stay as written */
            out[k++] = '\\';
            p--;
        }
    }
    ttoken *t = push_tok(L, T_STRING, line);
    t->s = out;
    t->n = k;
    return j + 1;
}

static const char *const OPS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                  "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

/* Tokens of one tag until its end; returns the end sign ('-', '+' or 0). */
static char lex_tag(lexer *L, bool is_block) {
    L->depth = 0;
    for (;;) {
        size_t i = L->pos;
        const char *s = L->src;
        if (i >= L->len) return 0; /* the parser reports the missing end */
        if (L->depth == 0) {
            if (is_block) {
                char sign = 0;
                size_t j = i;
                if (s[j] == '-' || s[j] == '+') sign = s[j++];
                if (word_at(L, j, "%}")) {
                    push_tok(L, T_BLOCK_END, L->line);
                    advance(L, j + 2);
                    return sign;
                }
            } else {
                size_t j = i + (s[i] == '-');
                if (word_at(L, j, "}}")) {
                    push_tok(L, T_VAR_END, L->line);
                    advance(L, j + 2);
                    return s[i] == '-' ? '-' : 0;
                }
            }
        }
        uint32_t cp;
        size_t w = utf8_next(s + i, L->len - i, &cp);
        if (py_isspace(cp)) {
            advance(L, i + w);
            continue;
        }
        int line = L->line;
        unsigned char c = (unsigned char)s[i];
        if (c >= '0' && c <= '9') {
            size_t end = lex_number(L, i, line);
            if (end) {
                advance(L, end);
                continue;
            }
        }
        if (is_name_start(c)) {
            size_t j = i + 1;
            while (j < L->len && is_name_char((unsigned char)s[j])) j++;
            ttoken *t = push_tok(L, T_NAME, line);
            t->s = s + i;
            t->n = j - i;
            advance(L, j);
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t end = lex_string(L, i, line);
            if (end) {
                advance(L, end);
                continue;
            }
            if (c == '\'') parse_fail(L->ps, line, "unexpected char \"'\" at %zu", i);
            parse_fail(L->ps, line, "unexpected char '\"' at %zu", i);
        }
        const char *op = NULL;
        for (size_t k = 0; k < sizeof OPS / sizeof *OPS; k++)
            if (OPS[k][0] == s[i] && (OPS[k][1] == '\0' || (i + 1 < L->len && OPS[k][1] == s[i + 1]))) {
                op = OPS[k];
                break;
            }
        if (!op) {
            /* the character as Python's repr() writes it */
            if (c == '\'') parse_fail(L->ps, line, "unexpected char \"'\" at %zu", i);
            if (c == '\\') parse_fail(L->ps, line, "unexpected char '\\\\' at %zu", i);
            if (!py_isprintable(cp)) parse_fail(L->ps, line, "unexpected char '\\x%02x' at %zu", cp & 0xff, i);
            parse_fail(L->ps, line, "unexpected char '%.*s' at %zu", (int)w, s + i, i);
        }
        if (strchr("([{", op[0])) {
            if (L->depth >= (int)sizeof L->brace_stack) parse_fail(L->ps, line, "brackets nested too deeply");
            L->brace_stack[L->depth++] = op[0];
        } else if (strchr(")]}", op[0])) {
            if (L->depth == 0) parse_fail(L->ps, line, "unexpected '%c'", op[0]);
            char open = L->brace_stack[L->depth - 1];
            char want = open == '(' ? ')' : open == '[' ? ']' : '}';
            if (op[0] != want) parse_fail(L->ps, line, "unexpected '%c', expected '%c'", op[0], want);
            L->depth--;
        }
        ttoken *t = push_tok(L, T_OP, line);
        t->s = op;
        t->n = strlen(op);
        advance(L, i + t->n);
    }
}

/* Normalizes \r\n and \r to \n and drops one trailing newline. */
static char *normalize(tparse_state *ps, const char *src, size_t len, size_t *out_len) {
    char *d = parse_alloc(ps, len + 1);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            d[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            d[k++] = src[i];
        }
    }
    if (k && d[k - 1] == '\n') k--;
    d[k] = '\0';
    *out_len = k;
    return d;
}

void tmpl_lex(tparse_state *ps, const char *src, size_t len, tlexed *out) {
    lexer L = {.ps = ps, .line = 1};
    L.src = normalize(ps, src, len, &L.len);
    while (L.pos < L.len) {
        /* the next tag opener */
        size_t i = L.pos;
        const char *hit = NULL;
        for (size_t k = i; k + 1 < L.len; k++)
            if (L.src[k] == '{' && (L.src[k + 1] == '{' || L.src[k + 1] == '%' || L.src[k + 1] == '#')) {
                hit = L.src + k;
                break;
            }
        if (!hit) {
            emit_text(&L, i, L.len, 0, false);
            advance(&L, L.len);
            break;
        }
        size_t at = (size_t)(hit - L.src);
        char kind = hit[1];
        char sign = sign_at(&L, at + 2);
        size_t raw_end = kind == '%' ? match_raw_begin(&L, at) : 0;
        emit_text(&L, i, at, sign, kind != '{');
        advance(&L, at);
        if (raw_end) {
            int line = L.line;
            advance(&L, raw_end);
            /* raw text up to {%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?) */
            size_t from = L.pos;
            for (size_t k = from;; k++) {
                const char *e = find2(L.src, k, L.len, '{', '%');
                if (!e) parse_fail(ps, line, "Missing end of raw directive");
                k = (size_t)(e - L.src);
                size_t j = k + 2;
                char esign = sign_at(&L, j);
                if (esign) j++;
                j = skip_ws(&L, j);
                if (!word_at(&L, j, "endraw")) continue;
                j = skip_ws(&L, j + 6);
                char end_sign = 0;
                if (j < L.len && (L.src[j] == '-' || L.src[j] == '+')) end_sign = L.src[j++];
                if (!word_at(&L, j, "%}")) continue;
                emit_text(&L, from, k, esign, true);
                advance(&L, j + 2);
                after_block_end(&L, end_sign);
                break;
            }
            continue;
        }
        size_t body = at + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *e = find2(L.src, body, L.len, '#', '}');
            if (!e) parse_fail(ps, L.line, "Missing end of comment tag");
            size_t k = (size_t)(e - L.src);
            char end_sign = 0;
            if (k > body && (L.src[k - 1] == '-' || L.src[k - 1] == '+')) end_sign = L.src[k - 1];
            advance(&L, k + 2);
            after_block_end(&L, end_sign);
            continue;
        }
        push_tok(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, L.line);
        advance(&L, body);
        char end_sign = lex_tag(&L, kind == '%');
        if (kind == '%') after_block_end(&L, end_sign);
        else if (end_sign == '-') after_block_end(&L, '-');
    }
    push_tok(&L, T_EOF, L.line);
    out->toks = L.toks;
    out->n = L.n;
}
