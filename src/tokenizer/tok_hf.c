/*
 * tok_hf.c - loading a tokenizer from a Hugging Face folder: tokenizer.json
 * (model, added tokens, normalizer, pre-tokenizer, post-processor, decoder)
 * and, when present, tokenizer_config.json (add_bos_token, add_eos_token,
 * bos_token, eos_token).
 *
 * What it is for: SentencePiece-converted BPE files (Llama 2, Mistral, the
 * stories models): model.type "BPE" with byte_fallback, normalizer
 * Prepend("▁") + Replace(" ", "▁") (or a Metaspace pre-tokenizer), decoder
 * Replace("▁", " ") + ByteFallback + Fuse + Strip(1). Any other normalizer,
 * pre-tokenizer or decoder is refused with its name rather than half-supported.
 * What it is not for: byte-level BPE (GPT-2 style), which comes later.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"
#include "util/file_map.h"
#include "util/json_file.h"

/* Ids beyond this are refused (real vocabularies stay below 1M). */
#define HF_MAX_VOCAB (1 << 24)

static bool str_is(const json_t *v, const char *s) {
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* A Replace step whose pattern is the literal `from` and content `to`. */
static bool is_replace(const json_t *step, const char *from, const char *to) {
    const json_t *pat = json_object_get(step, "pattern");
    return str_is(json_object_get(step, "type"), "Replace") &&
           str_is(json_object_get(pat, "String"), from) &&
           str_is(json_object_get(step, "content"), to);
}

/* Metaspace (pre-tokenizer or decoder): whether it adds / strips the prefix.
 * Older files say add_prefix_space, newer ones prepend_scheme. */
static bool metaspace_prepends(const json_t *m) {
    const json_t *scheme = json_object_get(m, "prepend_scheme");
    if (json_is_string(scheme)) return !str_is(scheme, "never");
    const json_t *aps = json_object_get(m, "add_prefix_space");
    return aps ? json_is_true(aps) : true;
}

static int parse_normalizer(tok_tokenizer *t, const json_t *norm, const char *path,
                            pdl_error *err) {
    if (!norm || json_is_null(norm)) return 0;
    const json_t *steps = norm;
    size_t n = 1;
    bool seq = str_is(json_object_get(norm, "type"), "Sequence");
    if (seq) {
        steps = json_object_get(norm, "normalizers");
        if (!json_is_array(steps))
            return pdl_fail(err, "%s: normalizer: Sequence without a \"normalizers\" list", path);
        n = json_array_size(steps);
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *step = seq ? json_array_get(steps, i) : steps;
        const json_t *type = json_object_get(step, "type");
        if (str_is(type, "Prepend") && str_is(json_object_get(step, "prepend"), TOK_SPM_SPACE)) {
            t->add_space_prefix = true;
        } else if (is_replace(step, " ", TOK_SPM_SPACE)) {
            t->escape_spaces = true;
        } else {
            return pdl_fail(err, "%s: normalizer \"%s\" is not supported (only Prepend \"\xe2\x96\x81\""
                            " and Replace \" \" -> \"\xe2\x96\x81\")",
                            path, json_is_string(type) ? json_string_value(type) : "?");
        }
    }
    return 0;
}

static int parse_pre_tokenizer(tok_tokenizer *t, const json_t *pre, const char *path,
                               pdl_error *err) {
    if (!pre || json_is_null(pre)) return 0;
    const json_t *type = json_object_get(pre, "type");
    if (str_is(type, "Metaspace") && str_is(json_object_get(pre, "replacement"), TOK_SPM_SPACE)) {
        const json_t *split = json_object_get(pre, "split");
        if (split && json_is_true(split))
            return pdl_fail(err, "%s: pre_tokenizer Metaspace with split=true is not supported", path);
        t->escape_spaces = true;
        if (metaspace_prepends(pre)) t->add_space_prefix = true;
        return 0;
    }
    return pdl_fail(err, "%s: pre_tokenizer \"%s\" is not supported for a SentencePiece-style BPE",
                    path, json_is_string(type) ? json_string_value(type) : "?");
}

/* Accepts the SPM decoders; sets *byte_fallback when <0xXX> pieces decode to
 * bytes. */
static int parse_decoder(tok_tokenizer *t, const json_t *dec, const char *path, bool *byte_fallback,
                         pdl_error *err) {
    *byte_fallback = false;
    if (!dec || json_is_null(dec))
        return pdl_fail(err, "%s: no decoder (pieces would be joined with spaces); not supported", path);
    const json_t *steps = dec;
    size_t n = 1;
    bool seq = str_is(json_object_get(dec, "type"), "Sequence");
    if (seq) {
        steps = json_object_get(dec, "decoders");
        if (!json_is_array(steps))
            return pdl_fail(err, "%s: decoder: Sequence without a \"decoders\" list", path);
        n = json_array_size(steps);
    }
    bool replaces = false;
    for (size_t i = 0; i < n; i++) {
        const json_t *step = seq ? json_array_get(steps, i) : steps;
        const json_t *type = json_object_get(step, "type");
        if (is_replace(step, TOK_SPM_SPACE, " ")) {
            replaces = true;
        } else if (str_is(type, "ByteFallback")) {
            *byte_fallback = true;
        } else if (str_is(type, "Fuse")) {
            /* joining the pieces is what decode does anyway */
        } else if (str_is(type, "Strip") && str_is(json_object_get(step, "content"), " ")) {
            json_int_t start = json_integer_value(json_object_get(step, "start"));
            json_int_t stop = json_integer_value(json_object_get(step, "stop"));
            if (start > 1 || stop != 0)
                return pdl_fail(err, "%s: decoder Strip(start=%lld, stop=%lld) is not supported", path,
                                (long long)start, (long long)stop);
            t->strip_leading_space = start == 1;
        } else if (str_is(type, "Metaspace") &&
                   str_is(json_object_get(step, "replacement"), TOK_SPM_SPACE)) {
            replaces = true;
            t->strip_leading_space = metaspace_prepends(step);
        } else {
            return pdl_fail(err, "%s: decoder \"%s\" is not supported for a SentencePiece-style BPE",
                            path, json_is_string(type) ? json_string_value(type) : "?");
        }
    }
    if (!replaces)
        return pdl_fail(err, "%s: decoder does not turn \"\xe2\x96\x81\" back into spaces; not supported",
                        path);
    return 0;
}

/* The special token name of a post-processor template item, or NULL. */
static const char *template_special(const json_t *item) {
    const json_t *st = json_object_get(item, "SpecialToken");
    return st ? json_string_value(json_object_get(st, "id")) : NULL;
}

/* BOS / EOS as TemplateProcessing's "single" template adds them. */
static void parse_post_processor(const json_t *pp, const tok_tokenizer *t, int32_t *bos,
                                 int32_t *eos) {
    *bos = *eos = -1;
    if (!str_is(json_object_get(pp, "type"), "TemplateProcessing")) return;
    const json_t *single = json_object_get(pp, "single");
    const json_t *specials = json_object_get(pp, "special_tokens");
    size_t n = json_array_size(single);
    if (n == 0) return;
    for (int end = 0; end < 2; end++) {
        const char *name = template_special(json_array_get(single, end ? n - 1 : 0));
        if (!name) continue;
        const json_t *ids = json_object_get(json_object_get(specials, name), "ids");
        int32_t id = -1;
        if (json_array_size(ids) == 1) {
            json_int_t v = json_integer_value(json_array_get(ids, 0));
            if (v >= 0 && v < t->n_vocab) id = (int32_t)v;
        } else {
            id = tok_strmap_get(&t->vocab, name, strlen(name));
        }
        *(end ? eos : bos) = id;
    }
}

/* tokenizer_config.json's bos_token / eos_token: a string, an AddedToken
 * object with "content", or null. Returns 1 and the id when set, 0 when the
 * key is absent or null, -1 when the token is not in the vocabulary. */
static int config_token(const json_t *cfg, const char *key, const tok_tokenizer *t,
                        int32_t *id, const char *path, pdl_error *err) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return pdl_fail(err, "%s: %s is not a string", path, key);
    const char *s = json_string_value(v);
    *id = tok_strmap_get(&t->vocab, s, strlen(s));
    if (*id < 0) return pdl_fail(err, "%s: %s \"%s\" is not in the vocabulary", path, key, s);
    return 1;
}

/* Reads "a b" or ["a", "b"]. */
static bool merge_parts(const json_t *m, const char **a, size_t *na, const char **b, size_t *nb) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) return false;
        *a = s;
        *na = (size_t)(sp - s);
        *b = sp + 1;
        *nb = n - *na - 1;
        return true;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *na = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *nb = json_string_length(json_array_get(m, 1));
        return true;
    }
    return false;
}

static int parse_merges(tok_tokenizer *t, const json_t *merges, const char *path, pdl_error *err) {
    size_t n = json_array_size(merges);
    if (n > HF_MAX_VOCAB * (size_t)4) return pdl_fail(err, "%s: %zu merges is too many", path, n);
    if (!tok_pairmap_init(&t->merges, n)) return pdl_fail(err, "%s: out of memory for merges", path);
    char *joined = NULL;
    size_t joined_cap = 0;
    for (size_t i = 0; i < n; i++) {
        const char *a, *b;
        size_t na, nb;
        if (!merge_parts(json_array_get(merges, i), &a, &na, &b, &nb)) {
            free(joined);
            return pdl_fail(err, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
        }
        if (na + nb > joined_cap) {
            joined_cap = 2 * (na + nb) + 16;
            char *nj = realloc(joined, joined_cap);
            if (!nj) {
                free(joined);
                return pdl_fail(err, "%s: out of memory for merges", path);
            }
            joined = nj;
        }
        memcpy(joined, a, na);
        memcpy(joined + na, b, nb);
        int32_t ia = tok_strmap_get(&t->vocab, a, na);
        int32_t ib = tok_strmap_get(&t->vocab, b, nb);
        int32_t ir = tok_strmap_get(&t->vocab, joined, na + nb);
        if (ia < 0 || ib < 0 || ir < 0) {
            const char *what = ia < 0 ? a : ib < 0 ? b : joined;
            int wn = (int)(ia < 0 ? na : ib < 0 ? nb : na + nb);
            pdl_fail(err, "%s: model.merges[%zu] (\"%.*s\" + \"%.*s\"): \"%.*s\" is not in the vocabulary",
                     path, i, (int)na, a, (int)nb, b, wn, what);
            free(joined);
            return -1;
        }
        tok_pairmap_insert(&t->merges, ia, ib, (int32_t)i, ir);
    }
    free(joined);
    return 0;
}

/* Fills pieces from model.vocab and added_tokens. */
static int parse_vocab(tok_tokenizer **out, const json_t *vocab, const json_t *added,
                       const char *path, pdl_error *err) {
    *out = NULL;
    json_int_t max_id = -1;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= HF_MAX_VOCAB)
            return pdl_fail(err, "%s: model.vocab[\"%s\"] is not an id in 0..%d", path, key,
                            HF_MAX_VOCAB - 1);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    size_t n_added = json_array_size(added);
    for (size_t i = 0; i < n_added; i++) {
        const json_t *a = json_array_get(added, i);
        const json_t *id = json_object_get(a, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= HF_MAX_VOCAB || !json_is_string(json_object_get(a, "content")))
            return pdl_fail(err, "%s: added_tokens[%zu] needs an \"id\" in 0..%d and a \"content\"",
                            path, i, HF_MAX_VOCAB - 1);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) return pdl_fail(err, "%s: model.vocab is empty", path);

    int32_t n = (int32_t)max_id + 1;
    tok_tokenizer *t = tok_new(n);
    const char **ptrs = calloc((size_t)n, sizeof *ptrs);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    if (!t || !ptrs || !lens) {
        tok_free(t);
        free(ptrs);
        free(lens);
        return pdl_fail(err, "%s: out of memory for %d tokens", path, n);
    }
    int rc = 0;
    json_object_foreach((json_t *)vocab, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        if (ptrs[id]) {
            rc = pdl_fail(err, "%s: model.vocab gives id %d to both \"%s\" and \"%s\"", path, id,
                          ptrs[id], key);
            break;
        }
        ptrs[id] = key;
        lens[id] = (uint32_t)strlen(key);
    }
    for (size_t i = 0; rc == 0 && i < n_added; i++) {
        const json_t *a = json_array_get(added, i);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        const json_t *content = json_object_get(a, "content");
        ptrs[id] = json_string_value(content);
        lens[id] = (uint32_t)json_string_length(content);
        t->type[id] = json_is_true(json_object_get(a, "special")) ? TOK_TYPE_CONTROL
                                                                   : TOK_TYPE_USER_DEFINED;
    }
    if (rc == 0) rc = tok_set_pieces(t, ptrs, lens, err);
    free(ptrs);
    free(lens);
    if (rc != 0) {
        tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

static int load_tokenizer_json(tok_tokenizer **out, const json_t *root, const char *path,
                               pdl_error *err) {
    *out = NULL;
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return pdl_fail(err, "%s: no \"model\" object", path);
    const json_t *mtype = json_object_get(model, "type");
    const json_t *merges = json_object_get(model, "merges");
    if (mtype ? !str_is(mtype, "BPE") : !merges)
        return pdl_fail(err, "%s: model.type \"%s\" is not supported (only BPE)", path,
                        json_is_string(mtype) ? json_string_value(mtype) : "?");
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return pdl_fail(err, "%s: model.vocab is missing or not an object", path);
    if (merges && !json_is_array(merges)) return pdl_fail(err, "%s: model.merges is not a list", path);
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout))
        return pdl_fail(err, "%s: BPE dropout is not supported", path);
    if (json_is_true(json_object_get(model, "ignore_merges")))
        return pdl_fail(err, "%s: BPE ignore_merges is not supported for a SentencePiece-style BPE", path);
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !str_is(v, ""))
            return pdl_fail(err, "%s: BPE %s is not supported", path, affixes[i]);
    }

    tok_tokenizer *t;
    if (parse_vocab(&t, vocab, json_object_get(root, "added_tokens"), path, err) != 0) return -1;
    t->model = TOK_MODEL_SPM;
    t->merge_by_rank = true;
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    bool dec_bytes = false;
    if (parse_normalizer(t, json_object_get(root, "normalizer"), path, err) != 0 ||
        parse_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), path, err) != 0 ||
        parse_decoder(t, json_object_get(root, "decoder"), path, &dec_bytes, err) != 0)
        goto fail;
    /* HF's ByteFallback decoder turns any piece spelled <0xXX> into its byte */
    if (dec_bytes) {
        for (int32_t i = 0; i < t->n_vocab; i++)
            if (t->type[i] == TOK_TYPE_NORMAL &&
                tok_parse_byte_piece(t->pool + t->piece_off[i], t->piece_len[i]) >= 0)
                t->type[i] = TOK_TYPE_BYTE;
    }
    if (tok_finish(t, err) != 0) goto fail;
    if (merges && parse_merges(t, merges, path, err) != 0) goto fail;

    const json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        t->unk_id = tok_strmap_get(&t->vocab, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0) {
            pdl_fail(err, "%s: model.unk_token \"%s\" is not in the vocabulary", path,
                     json_string_value(unk));
            goto fail;
        }
    }
    parse_post_processor(json_object_get(root, "post_processor"), t, &t->bos_id, &t->eos_id);
    t->add_bos = t->bos_id >= 0;
    t->add_eos = t->eos_id >= 0;
    *out = t;
    return 0;
fail:
    tok_free(t);
    return -1;
}

int tok_load_hf_dir(tok_tokenizer **out, const char *dir, pdl_error *err) {
    *out = NULL;
    size_t n = strlen(dir) + 32;
    char *path = malloc(n);
    if (!path) return pdl_fail(err, "%s: out of memory", dir);

    snprintf(path, n, "%s/tokenizer.json", dir);
    json_t *root;
    tok_tokenizer *t = NULL;
    if (pdl_json_load_file(path, 0, &root, err) != 0) goto fail;
    int rc = load_tokenizer_json(&t, root, path, err);
    json_decref(root);
    if (rc != 0) goto fail;

    /* tokenizer_config.json overrides the post-processor's choices (it is what
     * transformers rebuilds the post-processor from). */
    snprintf(path, n, "%s/tokenizer_config.json", dir);
    FILE *probe = fopen(path, "rb");
    if (probe) {
        fclose(probe);
        json_t *cfg;
        if (pdl_json_load_file(path, JSON_DECODE_INT_AS_REAL, &cfg, err) != 0) goto fail;
        int32_t id;
        int got = config_token(cfg, "bos_token", t, &id, path, err);
        if (got > 0) t->bos_id = id;
        if (got >= 0) got = config_token(cfg, "eos_token", t, &id, path, err);
        if (got > 0) t->eos_id = id;
        const json_t *ab = json_object_get(cfg, "add_bos_token");
        const json_t *ae = json_object_get(cfg, "add_eos_token");
        if (json_is_boolean(ab)) t->add_bos = json_is_true(ab);
        if (json_is_boolean(ae)) t->add_eos = json_is_true(ae);
        json_decref(cfg);
        if (got < 0) goto fail;
    }
    free(path);
    *out = t;
    return 0;
fail:
    tok_free(t);
    free(path);
    return -1;
}
