/*
 * pretok.c - the pre-tokenizer of byte-level BPE: a list of split steps run
 * on PCRE2, and the step lists that GGUF's tokenizer.ggml.pre names stand for.
 *
 * What it is for: cutting normalized text into the words that BPE merges
 * within, as Hugging Face's Split / ByteLevel / Digits / Punctuation
 * pre-tokenizers do. Every step is applied to each piece the steps before it
 * made; a piece is its own regex subject (lookarounds and anchors stop at its
 * ends). Matches are found left to right, each search starting where the last
 * match ended (after an empty match, one character further), as onig's
 * find_iter does; empty pieces are dropped. Pieces are (pointer, length)
 * views into the text or into a per-step scratch buffer: nothing is
 * allocated per piece or per match.
 *
 * Regexes: patterns are compiled with PCRE2_UTF | PCRE2_UCP and JIT.
 * Invalid UTF-8 is allowed (PCRE2_MATCH_INVALID_UTF): an invalid byte never
 * matches any part of a pattern, so it ends up in a gap, which is a piece of
 * its own with the Isolated behaviour, and goes through the byte-level map
 * like any byte. Hugging Face's regexes are Oniguruma's; the one difference
 * for these patterns is \s, which PCRE2 (UCP) also lets match U+180E: \s
 * and \S outside classes and \s inside classes are rewritten to Unicode's
 * White_Space list, which is Oniguruma's.
 *
 * Steps after a ByteLevel step see the byte-level form of the text (HF runs
 * them on "Ġ123", not " 123"); such a step maps its piece, matches, and maps
 * the offsets back, so that words stay raw bytes.
 *
 * What it is not for: merging (bpe.c), added tokens (added.c).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

/* ---------------------------------------------------------------------------
 * The regexes Hugging Face and llama.cpp use
 * ------------------------------------------------------------------------- */

const char TOK_RE_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char TOK_RE_PUNCT[] = "[\\p{P}!-/:-@\\[-`{-~]";
/* llama.cpp's default list (no Hugging Face tokenizer.json corresponds). */
static const char RE_DEFAULT_PUNCT[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char RE_DEFAULT_WORDS[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

typedef struct pre_step_def {
    const char *re;
    uint8_t behavior;
    bool mapped;
} pre_step_def;

typedef struct pre_def {
    const char *names;  /* space-separated tokenizer.ggml.pre values */
    pre_step_def steps[4];
    bool ignore_merges;
    bool add_bos;
} pre_def;

/* The step lists, from each model's tokenizer.json (llama.cpp's
 * llm_tokenizer_bpe has the same regexes, partly rewritten for its own
 * engine). */
static const pre_def PRE_DEFS[] = {
    {"gpt-2 phi-2 mpt olmo jina-es jina-de jina-v1-en jina-v2-es jina-v2-de jina-v2-code roberta-bpe "
     "gigachat exaone4 a.x-4.0 mellum trillion granite-docling jais",
     {{TOK_RE_GPT2, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2",
     {{RE_LLAMA3, TOK_SPLIT_ISOLATED, false}}, true, true},
    {"dbrx smaug-bpe", {{RE_LLAMA3, TOK_SPLIT_ISOLATED, false}}, false, false},
    {"qwen2 deepseek-r1-qwen stablelm2 megrez hunyuan kormo", {{RE_QWEN2, TOK_SPLIT_ISOLATED, false}},
     false, false},
    /* Digits(individual_digits) + ByteLevel(use_regex) */
    {"starcoder refact command-r smollm codeshell exaone minerva-7b",
     {{"\\p{N}", TOK_SPLIT_ISOLATED, false}, {TOK_RE_GPT2, TOK_SPLIT_ISOLATED, false}}, false, false},
    /* Punctuation(contiguous) + ByteLevel(use_regex) + Digits + Split("[0-9][0-9][0-9]") */
    {"falcon",
     {{TOK_RE_PUNCT, TOK_SPLIT_CONTIGUOUS, false},
      {TOK_RE_GPT2, TOK_SPLIT_ISOLATED, false},
      {"\\p{N}", TOK_SPLIT_CONTIGUOUS, true},
      {"[0-9][0-9][0-9]", TOK_SPLIT_ISOLATED, true}},
     false, false},
    {"default",
     {{RE_DEFAULT_PUNCT, TOK_SPLIT_ISOLATED, false},
      {RE_DEFAULT_WORDS, TOK_SPLIT_ISOLATED, false},
      {"\\p{N}+", TOK_SPLIT_ISOLATED, false},
      {"[0-9][0-9][0-9]", TOK_SPLIT_ISOLATED, false}},
     false, false},
};

static bool name_in(const char *names, const char *name) {
    size_t n = strlen(name);
    for (const char *p = names; *p;) {
        const char *sp = strchr(p, ' ');
        size_t len = sp ? (size_t)(sp - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0) return true;
        if (!sp) break;
        p = sp + 1;
    }
    return false;
}

int tok_pre_from_gguf(tok_tokenizer *t, const char *name, bool *add_bos, pdl_error *err) {
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++) {
        const pre_def *d = &PRE_DEFS[i];
        if (!name_in(d->names, name)) continue;
        for (int k = 0; k < 4 && d->steps[k].re; k++)
            if (tok_pre_add_split(t, d->steps[k].re, strlen(d->steps[k].re), false, d->steps[k].behavior,
                                  false, d->steps[k].mapped, err) != 0)
                return -1;
        t->ignore_merges = d->ignore_merges;
        *add_bos = d->add_bos;
        return 0;
    }
    return pdl_fail(err, "tokenizer.ggml.pre \"%s\" is not a known pre-tokenizer", name);
}

/* ---------------------------------------------------------------------------
 * Compiling
 * ------------------------------------------------------------------------- */

/* Unicode White_Space, Oniguruma's \s. */
#define WS_CLASS_BODY "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Rewrites \s / \S as described at the top; *out is malloc'ed. */
static char *rewrite_spaces(const char *p, size_t n, size_t *out_len) {
    size_t cap = n * 4 + 256, w = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        if (w + 128 > cap) {
            cap *= 2;
            char *o = realloc(out, cap);
            if (!o) {
                free(out);
                return NULL;
            }
            out = o;
        }
        char ch = p[i];
        if (ch == '\\' && i + 1 < n) {
            char nx = p[i + 1];
            const char *rep = NULL;
            if (nx == 's') rep = in_class ? WS_CLASS_BODY : "[" WS_CLASS_BODY "]";
            else if (nx == 'S' && !in_class) rep = "[^" WS_CLASS_BODY "]";
            if (rep) {
                size_t rl = strlen(rep);
                memcpy(out + w, rep, rl);
                w += rl;
            } else {
                out[w++] = ch;
                out[w++] = nx;
            }
            i++;
            continue;
        }
        if (!in_class && ch == '[') {
            in_class = true;
            out[w++] = ch;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^') out[w++] = p[++i];
            if (i + 1 < n && p[i + 1] == ']') out[w++] = p[++i];
            continue;
        }
        if (in_class && ch == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:alpha:] inside a class */
            const char *end = strstr(p + i, ":]");
            if (end && (size_t)(end - p) < n) {
                size_t l = (size_t)(end - (p + i)) + 2;
                memcpy(out + w, p + i, l);
                w += l;
                i += l - 1;
                continue;
            }
        }
        if (in_class && ch == ']') in_class = false;
        out[w++] = ch;
    }
    *out_len = w;
    return out;
}

int tok_pre_add_split(tok_tokenizer *t, const char *pattern, size_t len, bool literal,
                      tok_split_behavior behavior, bool invert, bool mapped, pdl_error *err) {
    if (t->n_pre == TOK_MAX_PRE_STEPS)
        return pdl_fail(err, "tokenizer: more than %d pre-tokenizer steps", TOK_MAX_PRE_STEPS);
    char *src = NULL;
    size_t src_len = len;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    if (literal) {
        opts |= PCRE2_LITERAL;
    } else {
        src = rewrite_spaces(pattern, len, &src_len);
        if (!src) return pdl_fail(err, "tokenizer: out of memory compiling a regex");
    }
    int ecode;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pattern : src), src_len, opts, &ecode, &eoff, NULL);
    free(src);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        return pdl_fail(err, "pre-tokenizer regex \"%.*s\": %s", (int)len, pattern, (const char *)msg);
    }
    tok_pre_step *s = &t->pre[t->n_pre++];
    *s = (tok_pre_step){.re = re, .behavior = (uint8_t)behavior, .invert = invert, .mapped = mapped};
    s->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

int tok_pre_add_prefix_space(tok_tokenizer *t, pdl_error *err) {
    if (t->n_pre == TOK_MAX_PRE_STEPS)
        return pdl_fail(err, "tokenizer: more than %d pre-tokenizer steps", TOK_MAX_PRE_STEPS);
    t->pre[t->n_pre++] = (tok_pre_step){.re = NULL};
    return 0;
}

void tok_pre_free(tok_tokenizer *t) {
    for (int i = 0; i < t->n_pre; i++)
        if (t->pre[i].re) pcre2_code_free(t->pre[i].re);
    t->n_pre = 0;
}

/* ---------------------------------------------------------------------------
 * Running
 * ------------------------------------------------------------------------- */

static int run_step(tok_ctx *c, int k, const char *s, size_t n);

static int emit(tok_ctx *c, int k, const char *s, size_t n) {
    if (n == 0) return 0;
    return k + 1 < c->t->n_pre ? run_step(c, k + 1, s, n) : tok_bpe_word(c, s, n);
}

/* The next match at or after *off in s[0..n): 1 and its bounds, 0 when none. */
static int next_match(tok_ctx *c, const tok_pre_step *st, const char *s, size_t n, size_t off,
                      size_t *ms, size_t *me) {
    int rc = st->jit ? pcre2_jit_match(st->re, (PCRE2_SPTR)s, n, off, 0, c->md, NULL)
                     : pcre2_match(st->re, (PCRE2_SPTR)s, n, off, 0, c->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  /* the interpreter keeps its frames on the heap */
        rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_JIT, c->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return pdl_fail(c->err, "tokenizer: pre-tokenizer regex failed: %s", (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* Length of the character (or invalid byte) at s[i]. */
static size_t step_over(const char *s, size_t i, size_t n) {
    size_t cl = tok_utf8_char_len((const uint8_t *)s + i, n - i);
    return cl ? cl : 1;
}

/* Collects the match/gap list of s[0..n) into c->spans[k]. */
static int collect(tok_ctx *c, int k, const tok_pre_step *st, const char *s, size_t n, size_t *count) {
    size_t m = 0, prev = 0, off = 0;
    for (;;) {
        if (m + 2 > c->spans_cap[k]) {
            size_t cap = c->spans_cap[k] ? c->spans_cap[k] * 2 : 64;
            tok_span *p = realloc(c->spans[k], cap * sizeof *p);
            if (!p) return pdl_fail(c->err, "tokenizer: out of memory");
            c->spans[k] = p;
            c->spans_cap[k] = cap;
        }
        size_t ms, me;
        int got = off <= n ? next_match(c, st, s, n, off, &ms, &me) : 0;
        if (got < 0) return -1;
        if (!got) break;
        if (prev < ms) c->spans[k][m++] = (tok_span){(uint32_t)prev, (uint32_t)ms, false};
        c->spans[k][m++] = (tok_span){(uint32_t)ms, (uint32_t)me, true};
        prev = me;
        off = me > ms ? me : me + (me < n ? step_over(s, me, n) : 1);
    }
    if (prev < n) {
        if (m + 1 > c->spans_cap[k]) {
            tok_span *p = realloc(c->spans[k], (m + 1) * sizeof *p);
            if (!p) return pdl_fail(c->err, "tokenizer: out of memory");
            c->spans[k] = p;
            c->spans_cap[k] = m + 1;
        }
        c->spans[k][m++] = (tok_span){(uint32_t)prev, (uint32_t)n, false};
    }
    if (st->invert)
        for (size_t i = 0; i < m; i++) c->spans[k][i].match = !c->spans[k][i].match;
    *count = m;
    return 0;
}

/* Applies the behaviour to the span list in place (HF's split folds). */
static size_t apply_behavior(tok_span *sp, size_t m, tok_split_behavior b) {
    size_t w = 0;
    bool prev_match = false;
    switch (b) {
    case TOK_SPLIT_ISOLATED:
        return m;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < m; i++)
            if (!sp[i].match) sp[w++] = sp[i];
        return w;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < m; i++) {
            if (sp[i].match && !prev_match && w > 0)
                sp[w - 1].end = sp[i].end;
            else
                sp[w++] = sp[i];
            prev_match = sp[i].match;
        }
        return w;
    case TOK_SPLIT_MERGED_NEXT: {
        /* right to left: a match joins the piece after it */
        size_t r = m;
        for (size_t i = m; i-- > 0;) {
            if (sp[i].match && !prev_match && r < m)
                sp[r].start = sp[i].start;
            else
                sp[--r] = sp[i];
            prev_match = sp[i].match;
        }
        memmove(sp, sp + r, (m - r) * sizeof *sp);
        return m - r;
    }
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < m; i++) {
            if (sp[i].match == prev_match && w > 0)
                sp[w - 1].end = sp[i].end;
            else
                sp[w++] = sp[i];
            prev_match = sp[i].match;
        }
        return w;
    }
    return m;
}

/* Prepares the byte-level form of s[0..n) in step k's buffer; back[m] is the
 * raw offset of mapped offset m. */
static bool map_piece(tok_ctx *c, int k, const char *s, size_t n, const char **mapped, size_t *mn) {
    if (!tok_buf_reserve(&c->step_buf[k], 2 * n + 1)) return false;
    if (2 * n + 1 > c->step_back_cap[k]) {
        uint32_t *b = realloc(c->step_back[k], (2 * n + 1) * sizeof *b);
        if (!b) return false;
        c->step_back[k] = b;
        c->step_back_cap[k] = 2 * n + 1;
    }
    char *out = c->step_buf[k].p;
    uint32_t *back = c->step_back[k];
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = tok_bl_map(s + i, 1, out + w);
        for (size_t j = 0; j < l; j++) back[w + j] = (uint32_t)i;
        w += l;
    }
    back[w] = (uint32_t)n;
    *mapped = out;
    *mn = w;
    return true;
}

static int run_step(tok_ctx *c, int k, const char *s, size_t n) {
    const tok_pre_step *st = &c->t->pre[k];
    if (!st->re) {
        /* ByteLevel add_prefix_space */
        if (s[0] == ' ') return emit(c, k, s, n);
        if (!tok_buf_reserve(&c->step_buf[k], n + 1)) return pdl_fail(c->err, "tokenizer: out of memory");
        c->step_buf[k].p[0] = ' ';
        memcpy(c->step_buf[k].p + 1, s, n);
        return emit(c, k, c->step_buf[k].p, n + 1);
    }
    if (st->mapped) {
        const char *ms;
        size_t mn, m;
        if (!map_piece(c, k, s, n, &ms, &mn)) return pdl_fail(c->err, "tokenizer: out of memory");
        if (collect(c, k, st, ms, mn, &m) != 0) return -1;
        m = apply_behavior(c->spans[k], m, (tok_split_behavior)st->behavior);
        const uint32_t *back = c->step_back[k];
        for (size_t i = 0; i < m; i++) {
            size_t a = back[c->spans[k][i].start], b = back[c->spans[k][i].end];
            if (emit(c, k, s + a, b - a) != 0) return -1;
        }
        return 0;
    }
    if (st->behavior == TOK_SPLIT_ISOLATED && !st->invert) {
        /* the common case, streamed: gap, match, gap, match, ... */
        size_t prev = 0, off = 0;
        while (off <= n) {
            size_t ms, me;
            int got = next_match(c, st, s, n, off, &ms, &me);
            if (got < 0) return -1;
            if (!got) break;
            if (emit(c, k, s + prev, ms - prev) != 0 || emit(c, k, s + ms, me - ms) != 0) return -1;
            prev = me;
            off = me > ms ? me : me + (me < n ? step_over(s, me, n) : 1);
        }
        return emit(c, k, s + prev, n - prev);
    }
    size_t m;
    if (collect(c, k, st, s, n, &m) != 0) return -1;
    m = apply_behavior(c->spans[k], m, (tok_split_behavior)st->behavior);
    for (size_t i = 0; i < m; i++)
        if (emit(c, k, s + c->spans[k][i].start, c->spans[k][i].end - c->spans[k][i].start) != 0)
            return -1;
    return 0;
}

int tok_pre_run(tok_ctx *c, const char *s, size_t n) {
    if (n == 0) return 0;
    if (c->t->n_pre == 0) return tok_bpe_word(c, s, n);
    return run_step(c, 0, s, n);
}
