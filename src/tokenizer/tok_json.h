/*
 * tok_json.h - reading a tokenizer.json quickly.
 *
 * What it is for: a real tokenizer.json is mostly model.vocab (150k keys) and
 * model.merges (150k-300k strings). Building jansson values for those takes
 * longer than the whole load is allowed to (Qwen3's 11 MB file: ~270 ms to
 * parse and free), so one strict scan of the file validates it, decodes
 * those two members straight into flat arrays, and hands only the small
 * rest (added_tokens, normalizer, pre_tokenizer, post_processor, decoder, the
 * model's settings) to jansson. What it is not for: general JSON.
 */
#ifndef PDL_TOKENIZER_TOK_JSON_H
#define PDL_TOKENIZER_TOK_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "pagedlm.h"

typedef struct tok_json_span {
    const char *p;  /* the value's JSON text, NULL when the member is absent */
    size_t n;
} tok_json_span;

typedef struct tok_json_doc {
    char *text;           /* the file, NUL-terminated */
    size_t len;
    json_t *root;         /* the document without model.vocab / model.merges */
    tok_json_span vocab;  /* model.vocab */
    tok_json_span merges; /* model.merges */
} tok_json_doc;

/* Reads and scans path. A syntax error is reported with its line. */
int tok_json_load(tok_json_doc *d, const char *path, pdl_error *err);
void tok_json_free(tok_json_doc *d);

/* model.vocab as decoded keys (in *pool, NUL-terminated) with their ids. */
typedef struct tok_json_vocab_entry {
    uint32_t off, len;  /* the key in the pool */
    int64_t id;         /* the value; INT64_MIN when it is not an integer */
} tok_json_vocab_entry;
int tok_json_vocab(const tok_json_doc *d, const char *path, char **pool,
                   tok_json_vocab_entry **entries, size_t *n, pdl_error *err);

/* model.merges: each "a b" string or ["a", "b"] pair as two pool strings;
 * a = b = UINT32_MAX for an entry that is neither. */
typedef struct tok_json_merge {
    uint32_t a_off, a_len, b_off, b_len;
} tok_json_merge;
int tok_json_merges(const tok_json_doc *d, const char *path, char **pool, tok_json_merge **merges,
                    size_t *n, pdl_error *err);

#endif
