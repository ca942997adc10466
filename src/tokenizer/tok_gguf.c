/*
 * tok_gguf.c - loading a tokenizer from GGUF metadata (tokenizer.ggml.*), as
 * llama.cpp's vocabulary loader reads it.
 *
 * What it is for: tokenizer.ggml.model "llama" (SentencePiece-style BPE:
 * pieces, scores, token types, special ids and the add_* flags with
 * llama.cpp's defaults). What it is not for: model hyperparameters, or the
 * byte-level "gpt2" model, which comes later behind the same interface.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

#define GGUF_MAX_VOCAB (1 << 24)

/* A special id: *id keeps the default when the key is absent. */
static int special_id(const gguf_file *g, const char *key, int32_t n_vocab, int32_t *id,
                      pdl_error *err) {
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v, err);
    if (rc < 0) return -1;
    if (rc == 0) return 0;
    if (v >= (uint32_t)n_vocab)
        return pdl_fail(err, "%s: %s = %u is outside the vocabulary (%d tokens)", gguf_path(g), key,
                        v, n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int get_flag(const gguf_file *g, const char *key, bool *out, pdl_error *err) {
    return gguf_get_bool(g, key, out, err) < 0 ? -1 : 0;
}

int tok_load_gguf(tok_tokenizer **out, const gguf_file *g, pdl_error *err) {
    *out = NULL;
    const char *path = gguf_path(g);
    const char *model;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (rc < 0) return -1;
    if (rc == 0) return pdl_fail(err, "%s: no tokenizer.ggml.model key", path);
    if (strcmp(model, "llama") != 0)
        return pdl_fail(err, "%s: tokenizer.ggml.model \"%s\" is not supported (only \"llama\")", path,
                        model);

    gguf_array toks, scores = {0}, types = {0};
    rc = gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, err);
    if (rc < 0) return -1;
    if (rc == 0) return pdl_fail(err, "%s: no tokenizer.ggml.tokens key", path);
    if (toks.elem_type != GGUF_TYPE_STRING)
        return pdl_fail(err, "%s: tokenizer.ggml.tokens is an array of %s, not of strings", path,
                        gguf_type_name(toks.elem_type));
    if (toks.count == 0 || toks.count > GGUF_MAX_VOCAB)
        return pdl_fail(err, "%s: tokenizer.ggml.tokens has %llu entries (expected 1..%d)", path,
                        (unsigned long long)toks.count, GGUF_MAX_VOCAB);
    int32_t n = (int32_t)toks.count;

    int has_scores = gguf_get_arr(g, "tokenizer.ggml.scores", &scores, err);
    if (has_scores < 0) return -1;
    if (has_scores && (scores.elem_type != GGUF_TYPE_FLOAT32 && scores.elem_type != GGUF_TYPE_FLOAT64))
        return pdl_fail(err, "%s: tokenizer.ggml.scores is an array of %s, not of floats", path,
                        gguf_type_name(scores.elem_type));
    if (has_scores && scores.count != toks.count)
        return pdl_fail(err, "%s: tokenizer.ggml.scores has %llu entries, tokens has %d", path,
                        (unsigned long long)scores.count, n);
    int has_types = gguf_get_arr(g, "tokenizer.ggml.token_type", &types, err);
    if (has_types < 0) return -1;
    if (has_types && (types.elem_type == GGUF_TYPE_STRING || types.elem_type == GGUF_TYPE_BOOL ||
                      types.elem_type == GGUF_TYPE_FLOAT32 || types.elem_type == GGUF_TYPE_FLOAT64))
        return pdl_fail(err, "%s: tokenizer.ggml.token_type is an array of %s, not of integers", path,
                        gguf_type_name(types.elem_type));
    if (has_types && types.count != toks.count)
        return pdl_fail(err, "%s: tokenizer.ggml.token_type has %llu entries, tokens has %d", path,
                        (unsigned long long)types.count, n);

    tok_tokenizer *t = tok_new(n);
    const char **ptrs = calloc((size_t)n, sizeof *ptrs);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    if (t) t->scores = calloc((size_t)n, sizeof *t->scores);
    if (!t || !ptrs || !lens || !t->scores) {
        free(ptrs);
        free(lens);
        tok_free(t);
        return pdl_fail(err, "%s: out of memory for %d tokens", path, n);
    }
    for (int32_t i = 0; i < n; i++) {
        if (toks.strings[i].len > UINT32_MAX / 2) {
            free(ptrs);
            free(lens);
            tok_free(t);
            return pdl_fail(err, "%s: tokenizer.ggml.tokens[%d] is too long", path, i);
        }
        ptrs[i] = toks.strings[i].ptr;
        lens[i] = (uint32_t)toks.strings[i].len;
        if (has_scores) t->scores[i] = (float)gguf_arr_f64(&scores, (uint64_t)i);
        int64_t ty = has_types ? gguf_arr_i64(&types, (uint64_t)i) : TOK_TYPE_NORMAL;
        t->type[i] = ty >= TOK_TYPE_NORMAL && ty <= TOK_TYPE_BYTE ? (uint8_t)ty : TOK_TYPE_NORMAL;
    }
    rc = tok_set_pieces(t, ptrs, lens, err);
    free(ptrs);
    free(lens);
    if (rc != 0) goto fail;

    /* llama.cpp's defaults for a "llama" vocabulary */
    t->model = TOK_MODEL_SPM;
    t->merge_by_rank = false;
    t->bos_id = n > 1 ? 1 : -1;
    t->eos_id = n > 2 ? 2 : -1;
    t->unk_id = 0;
    t->add_bos = true;
    t->add_eos = false;
    t->add_space_prefix = true;
    t->escape_spaces = true;
    if (special_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos_id, err) != 0 ||
        special_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos_id, err) != 0 ||
        special_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk_id, err) != 0 ||
        get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err) != 0 ||
        get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err) != 0 ||
        get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err) != 0)
        goto fail;
    /* llama.cpp drops the leading space on detokenize exactly when it added one */
    t->strip_leading_space = t->add_space_prefix;

    if (!has_types) {
        /* without types: bytes by spelling, specials by their ids */
        for (int32_t i = 0; i < n; i++)
            if (tok_parse_byte_piece(t->pool + t->piece_off[i], t->piece_len[i]) >= 0)
                t->type[i] = TOK_TYPE_BYTE;
        if (t->bos_id >= 0) t->type[t->bos_id] = TOK_TYPE_CONTROL;
        if (t->eos_id >= 0) t->type[t->eos_id] = TOK_TYPE_CONTROL;
        if (t->unk_id >= 0) t->type[t->unk_id] = TOK_TYPE_UNKNOWN;
    }
    if (tok_finish(t, err) != 0) goto fail;
    *out = t;
    return 0;
fail:
    tok_free(t);
    return -1;
}
