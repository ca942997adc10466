/*
 * tok_api.c - the tokenizer on its own in the public interface
 * (pdl_tokenizer_*): loaded from a .gguf file's metadata or from a folder
 * with tokenizer.json, without any weights.
 *
 * What it is for: `pagedlm tokenize / detokenize / bench-tokenizer`, and
 * programs that only need text <-> ids. What it is not for: the model's own
 * tokenizer (pdl_tokenize in model_text.c).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

struct pdl_tokenizer {
    tok_tokenizer *tok;
};

int tok_load_path(tok_tokenizer **out, const char *path, pdl_error *err) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return err_fail(err, "%s: no such file or folder", path);
    if (S_ISDIR(st.st_mode)) return tok_load_hf_dir(out, path, err);
    gguf_file *g = NULL;
    if (gguf_open(&g, path, err) != 0) return -1;
    int rc = tok_load_gguf(out, g, err);
    gguf_close(g);
    return rc;
}

int pdl_tokenizer_load(pdl_tokenizer **out, const char *path, pdl_error *err) {
    *out = NULL;
    tok_tokenizer *tok = NULL;
    if (tok_load_path(&tok, path, err) != 0) return -1;
    pdl_tokenizer *t = malloc(sizeof *t);
    if (!t) {
        tok_free(tok);
        return err_fail(err, "%s: out of memory", path);
    }
    t->tok = tok;
    *out = t;
    return 0;
}

void pdl_tokenizer_free(pdl_tokenizer *t) {
    if (!t) return;
    tok_free(t->tok);
    free(t);
}

int pdl_tokenizer_vocab_size(const pdl_tokenizer *t) { return tok_vocab_size(t->tok); }

int pdl_tokenizer_encode(const pdl_tokenizer *t, const char *text, size_t len, unsigned flags,
                         int32_t **ids, size_t *n_ids, pdl_error *err) {
    return tok_encode_ex(t->tok, text, len, (flags & PDL_TOK_ADD_SPECIAL) != 0,
                         (flags & PDL_TOK_PARSE_SPECIAL) != 0, ids, n_ids, err);
}

int pdl_tokenizer_decode(const pdl_tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags,
                         char **text, size_t *len, pdl_error *err) {
    size_t n = 0;
    *text = tok_decode_ex(t->tok, ids, n_ids, (flags & PDL_TOK_KEEP_SPECIAL) != 0, &n, err);
    if (len) *len = n;
    return *text ? 0 : -1;
}
