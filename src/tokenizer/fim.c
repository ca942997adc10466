/*
 * fim.c - fill-in-the-middle: which ids of a vocabulary are its FIM tokens,
 * and the prompt a FIM request becomes, as llama.cpp finds and lays them out.
 *
 * Tokens: a GGUF names them in tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}
 * _token_id (or the older tokenizer.ggml.{prefix,suffix,middle}_token_id;
 * tok_gguf.c reads both); whatever is still unknown after that, and every
 * one of a tokenizer.json, is looked up by the token texts llama.cpp's
 * vocabulary loader knows (Qwen2.5-Coder's <|fim_prefix|>, StarCoder's and
 * Granite's <fim_prefix>, DeepSeek-Coder's <｜fim▁begin｜>, CodeLlama's
 * ▁<PRE>, GLM-4.5's <|code_prefix|>, ...), the first of each list that the
 * vocabulary holds.
 *
 * Layout: llama-server's format_infill, prefix-suffix-middle (PSM):
 *
 *     [extra] [BOS] FIM_PRE prefix middle FIM_SUF suffix FIM_MID
 *
 * where extra, for a repository-level request, is
 * FIM_REP "myproject\n" (FIM_SEP "name\n" text)... FIM_SEP "filename\n"
 * (each FIM_* part only when the vocabulary has the token; without FIM_SEP
 * a file's text follows "\n\n--- snippet ---\n\n"), and is placed before BOS
 * as llama.cpp places it. Every text is encoded on its own, without BOS and
 * with special-token text left as text. When asked, the parts are cut as
 * llama.cpp cuts them: the end of the prefix, the start of the suffix and
 * the end of the extra context are kept.
 *
 * What it is not for: deciding which requests are FIM requests, or their
 * limits (the server does; src/server/api_parse.c).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

/* The spellings of each FIM token, in the order they are tried (llama.cpp's
 * llama_vocab::impl::load lists, src/llama-vocab.cpp); DeepSeek-Coder's
 * have full-width bars and "▁" (<｜fim▁begin｜>). */
#define DS_FIM(word) "<\xef\xbd\x9c" "fim\xe2\x96\x81" word "\xef\xbd\x9c>"
static const char *const FIM_TEXTS[TOK_FIM_COUNT][8] = {
    [TOK_FIM_PRE] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", DS_FIM("begin"), "<PRE>", "\xe2\x96\x81<PRE>",
                     "<|code_prefix|>", NULL},
    [TOK_FIM_SUF] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", DS_FIM("hole"), "<SUF>", "\xe2\x96\x81<SUF>",
                     "<|code_suffix|>", NULL},
    [TOK_FIM_MID] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", DS_FIM("end"), "<MID>", "\xe2\x96\x81<MID>",
                     "<|code_middle|>", NULL},
    [TOK_FIM_PAD] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL},
    [TOK_FIM_REP] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    [TOK_FIM_SEP] = {"<|file_sep|>", NULL},
};
#undef DS_FIM

void tok_fim_detect(tok_tokenizer *t) {
    for (int k = 0; k < TOK_FIM_COUNT; k++)
        for (int i = 0; t->fim[k] < 0 && FIM_TEXTS[k][i]; i++)
            t->fim[k] = tok_strmap_get(&t->vocab, FIM_TEXTS[k][i], strlen(FIM_TEXTS[k][i]));
}

int32_t tok_fim_id(const tok_tokenizer *t, tok_fim which) {
    return which >= 0 && which < TOK_FIM_COUNT ? t->fim[which] : -1;
}

bool tok_has_fim(const tok_tokenizer *t) {
    return t->fim[TOK_FIM_PRE] >= 0 && t->fim[TOK_FIM_SUF] >= 0 && t->fim[TOK_FIM_MID] >= 0;
}

/* ---- the prompt ------------------------------------------------------------ */

typedef struct idbuf {
    int32_t *v;
    size_t n, cap;
    bool oom;
} idbuf;

static void put(idbuf *b, const int32_t *ids, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = (b->n + n) * 2 + 16;
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) {
            b->oom = true;
            return;
        }
        b->v = v, b->cap = cap;
    }
    memcpy(b->v + b->n, ids, n * sizeof *ids);
    b->n += n;
}

static void put1(idbuf *b, int32_t id) { put(b, &id, 1); }

/* The ids of text as plain text (no BOS, special-token text not parsed). */
static int put_text(idbuf *b, const tok_tokenizer *t, const char *s, size_t n, pdl_error *err) {
    int32_t *ids = NULL;
    size_t k = 0;
    if (tok_encode_ex(t, s, n, false, false, &ids, &k, err)) return -1;
    put(b, ids, k);
    free(ids);
    return 0;
}

/* The repository-level context before the prefix (format_infill's
 * extra_tokens). */
static int extra_context(idbuf *b, const tok_tokenizer *t, const pdl_fim_input *in, pdl_error *err) {
    int32_t rep = t->fim[TOK_FIM_REP], sep = t->fim[TOK_FIM_SEP];
    if (rep >= 0) {
        put1(b, rep);
        if (put_text(b, t, "myproject\n", 10, err)) return -1;
    }
    for (int i = 0; i < in->n_extra; i++) {
        const pdl_fim_file *f = &in->extra[i];
        if (sep >= 0) {
            /* the name and its newline are one text, as llama.cpp encodes them */
            const char *name = f->name ? f->name : "tmp";
            size_t nl = f->name ? f->name_len : 3;
            char *line = malloc(nl + 1);
            if (!line) return err_fail(err, "fill-in-the-middle: out of memory");
            memcpy(line, name, nl);
            line[nl] = '\n';
            put1(b, sep);
            int rc = put_text(b, t, line, nl + 1, err);
            free(line);
            if (rc) return -1;
        } else if (put_text(b, t, "\n\n--- snippet ---\n\n", 19, err)) {
            return -1;
        }
        if (put_text(b, t, f->text, f->text_len, err)) return -1;
    }
    if (sep >= 0) {
        put1(b, sep);
        if (put_text(b, t, "filename\n", 9, err)) return -1;
    }
    return 0;
}

static size_t min_sz(size_t a, long long b) { return b <= 0 ? 0 : (unsigned long long)b < a ? (size_t)b : a; }

int tok_fim_prompt(const tok_tokenizer *t, const pdl_fim_input *in, int32_t **ids, size_t *n_ids, bool *truncated,
                   pdl_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (truncated) *truncated = false;
    if (!tok_has_fim(t))
        return err_fail(err, "this vocabulary has no fill-in-the-middle tokens (prefix, suffix and middle)");
    idbuf extra = {0};
    if (in->repo_level && (extra_context(&extra, t, in, err) || extra.oom)) {
        free(extra.v);
        return extra.oom ? err_fail(err, "fill-in-the-middle: out of memory") : -1;
    }
    /* what is kept of each part: all, or llama.cpp's cut (prefix:suffix
     * 3:1 within a batch, the rest of the context for the extra files) */
    size_t n_pre = in->n_prefix, n_suf = in->n_suffix, n_extra = extra.n;
    if (in->n_batch > 0) {
        long long nb = in->n_batch;
        n_pre = min_sz(in->n_prefix, 3 * (nb / 4));
        n_suf = min_sz(in->n_suffix, nb / 4 - (2 + (long long)in->n_middle));
        n_extra = min_sz(extra.n, (long long)in->n_ctx - nb - 2 * (long long)in->n_predict);
        if (truncated) *truncated = n_pre < in->n_prefix || n_suf < in->n_suffix || n_extra < extra.n;
    }
    idbuf b = {0};
    if (n_extra) put(&b, extra.v + (extra.n - n_extra), n_extra);
    if (tok_add_bos(t)) put1(&b, t->bos_id);
    put1(&b, t->fim[TOK_FIM_PRE]);
    if (n_pre) put(&b, in->prefix + (in->n_prefix - n_pre), n_pre);
    put(&b, in->middle, in->n_middle);
    put1(&b, t->fim[TOK_FIM_SUF]);
    put(&b, in->suffix, n_suf);
    put1(&b, t->fim[TOK_FIM_MID]);
    free(extra.v);
    if (b.oom) {
        free(b.v);
        return err_fail(err, "fill-in-the-middle: out of memory");
    }
    *ids = b.v;
    *n_ids = b.n;
    return 0;
}
