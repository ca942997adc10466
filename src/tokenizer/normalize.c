/*
 * normalize.c - Unicode normalization (NFC, NFD, NFKC, NFKD) of text
 * fragments, on utf8proc.
 *
 * What it is for: the normalizer of a tokenizer.json (Qwen2/3 and GPT-NeoX
 * ask for NFC) applied to the text between added tokens, and to the contents
 * of added tokens that match normalized text. What it is not for: the
 * SentencePiece "▁" rules (tokenizer.c).
 *
 * Only the parts that can change are handed to utf8proc. A character below a
 * threshold - U+0300 for NFC, U+0080 for the other forms - is a starter that
 * no form changes and that never composes with what precedes it, so the text
 * can be cut before it without changing the result: each run of characters
 * at or above the threshold is normalized together with the one character in
 * front of it (which may be its base, "e" + U+0301 -> "é"), and everything
 * else is copied. Prose in Latin script costs a scan. Invalid UTF-8 bytes
 * pass through unchanged and end a run (Hugging Face never sees them: its
 * text is always valid UTF-8).
 */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

static utf8proc_option_t form_options(tok_norm_form form) {
    switch (form) {
    case TOK_NORM_NFC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case TOK_NORM_NFD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case TOK_NORM_NFKC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    case TOK_NORM_NFKD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    default: return 0;
    }
}

static uint32_t form_threshold(tok_norm_form form) { return form == TOK_NORM_NFC ? 0x300 : 0x80; }

/* Appends form(s[0..n)) (valid UTF-8) to out; ucs is scratch. */
static int normalize_run(tok_norm_form form, const char *s, size_t n, tok_buf *out, int32_t **ucs,
                         size_t *ucs_cap, pdl_error *err) {
    utf8proc_option_t opt = form_options(form);
    for (;;) {
        utf8proc_ssize_t got = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n,
                                                  *ucs, (utf8proc_ssize_t)*ucs_cap, opt);
        if (got < 0)
            return err_fail(err, "tokenizer: normalization failed: %s", utf8proc_errmsg(got));
        if ((size_t)got <= *ucs_cap) {
            /* re-encoding writes UTF-8 over the code points: at most 4 bytes each */
            utf8proc_ssize_t bytes = utf8proc_reencode(*ucs, got, opt);
            if (bytes < 0)
                return err_fail(err, "tokenizer: normalization failed: %s", utf8proc_errmsg(bytes));
            if (!tok_buf_reserve(out, out->n + (size_t)bytes))
                return err_fail(err, "tokenizer: out of memory normalizing text");
            memcpy(out->p + out->n, *ucs, (size_t)bytes);
            out->n += (size_t)bytes;
            return 0;
        }
        size_t cap = (size_t)got + 16;
        int32_t *p = realloc(*ucs, cap * sizeof *p);
        if (!p) return err_fail(err, "tokenizer: out of memory normalizing text");
        *ucs = p;
        *ucs_cap = cap;
    }
}

static bool append(tok_buf *out, const char *s, size_t n) {
    if (!tok_buf_reserve(out, out->n + n)) return false;
    memcpy(out->p + out->n, s, n);
    out->n += n;
    return true;
}

static int normalize_into(tok_norm_form form, const char *s, size_t n, tok_buf *out, int32_t **ucs,
                          size_t *ucs_cap, pdl_error *err) {
    out->n = 0;
    if (!tok_buf_reserve(out, n + 1)) return err_fail(err, "tokenizer: out of memory normalizing text");
    if (form == TOK_NORM_NONE) return append(out, s, n) ? 0 : err_fail(err, "tokenizer: out of memory");
    const uint8_t *u = (const uint8_t *)s;
    uint32_t threshold = form_threshold(form);
    size_t copied = 0;      /* s[0..copied) is in out */
    size_t prev = SIZE_MAX; /* start of the valid character before i, or SIZE_MAX */
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            prev = i++;
            continue;
        }
        size_t cl = tok_utf8_char_len(u + i, n - i);
        if (cl == 0) {
            prev = SIZE_MAX;
            i++;
            continue;
        }
        if (tok_utf8_decode(u + i, cl) < threshold) {
            prev = i;
            i += cl;
            continue;
        }
        size_t start = prev != SIZE_MAX ? prev : i;
        size_t end = i + cl;
        while (end < n) {
            size_t l = tok_utf8_char_len(u + end, n - end);
            if (l == 0 || tok_utf8_decode(u + end, l) < threshold) break;
            end += l;
        }
        if (!append(out, s + copied, start - copied))
            return err_fail(err, "tokenizer: out of memory normalizing text");
        if (normalize_run(form, s + start, end - start, out, ucs, ucs_cap, err) != 0) return -1;
        copied = end;
        prev = SIZE_MAX;
        i = end;
    }
    if (!append(out, s + copied, n - copied))
        return err_fail(err, "tokenizer: out of memory normalizing text");
    return 0;
}

int tok_normalize(tok_ctx *c, tok_norm_form form, const char *s, size_t n, tok_buf *out) {
    return normalize_into(form, s, n, out, &c->ucs, &c->ucs_cap, c->err);
}

char *tok_normalize_alloc(tok_norm_form form, const char *s, size_t n, size_t *out_len) {
    tok_buf out = {0};
    int32_t *ucs = NULL;
    size_t ucs_cap = 0;
    pdl_error err;
    int rc = normalize_into(form, s, n, &out, &ucs, &ucs_cap, &err);
    free(ucs);
    if (rc != 0 || !tok_buf_reserve(&out, out.n + 1)) {
        free(out.p);
        return NULL;
    }
    out.p[out.n] = '\0';
    *out_len = out.n;
    return out.p;
}
