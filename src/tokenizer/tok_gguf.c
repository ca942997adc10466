/*
 * tok_gguf.c - loading a tokenizer from GGUF metadata (tokenizer.ggml.*), as
 * llama.cpp's vocabulary loader reads it.
 *
 * What it is for: tokenizer.ggml.model "llama" (SentencePiece-style BPE:
 * pieces, scores, token types), "gpt2" (byte-level BPE: pieces, merges,
 * token types, tokenizer.ggml.pre naming the pre-tokenizer) and "bert"
 * (WordPiece, as llama.cpp's convert_hf_to_gguf.py writes it: word-initial
 * pieces spelled "▁piece", continuations without their "##", control tokens
 * as they are; read back into Hugging Face's spelling), with the special
 * ids (fill-in-the-middle ones too) and the add_* flags and llama.cpp's
 * defaults for each (a kimi-k2 vocabulary without merges gets them derived
 * from its ranks, bpe_ranks.c).
 * Control and unknown tokens become special added tokens (matched only with
 * parse_special), user-defined tokens plain added tokens (always matched).
 * What it is not for: model hyperparameters.
 */
#include <ctype.h>
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
        return err_fail(err, "%s: %s = %u is outside the vocabulary (%d tokens)", gguf_path(g), key,
                        v, n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int get_flag(const gguf_file *g, const char *key, bool *out, pdl_error *err) {
    return gguf_get_bool(g, key, out, err) < 0 ? -1 : 0;
}

/* "a b" (split at the first space after the first byte, as llama.cpp does)
 * -> the pair's ids and the merged piece's id. */
static int load_merges(tok_tokenizer *t, const gguf_file *g, const char *pre, pdl_error *err) {
    const char *path = gguf_path(g);
    gguf_array merges;
    int rc = gguf_get_arr(g, "tokenizer.ggml.merges", &merges, err);
    if (rc < 0) return -1;
    /* llama.cpp reads a kimi-k2 file without merges; its ids are tiktoken ranks */
    if (rc == 0 && strcmp(pre, "kimi-k2") == 0) return tok_bpe_merges_from_ranks(t, path, err);
    if (rc == 0) return err_fail(err, "%s: no tokenizer.ggml.merges key (a gpt2 tokenizer needs merges)", path);
    if (merges.elem_type != GGUF_TYPE_STRING)
        return err_fail(err, "%s: tokenizer.ggml.merges is an array of %s, not of strings", path,
                        gguf_type_name(merges.elem_type));
    if (merges.count > (uint64_t)GGUF_MAX_VOCAB * 4)
        return err_fail(err, "%s: tokenizer.ggml.merges has %llu entries", path,
                        (unsigned long long)merges.count);
    if (!tok_pairmap_init(&t->merges, (size_t)merges.count))
        return err_fail(err, "%s: out of memory for merges", path);
    char *joined = NULL;
    size_t cap = 0;
    for (uint64_t i = 0; i < merges.count; i++) {
        const char *m = merges.strings[i].ptr;
        size_t n = merges.strings[i].len;
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp) {
            free(joined);
            return err_fail(err, "%s: tokenizer.ggml.merges[%llu] \"%.*s\" is not \"a b\"", path,
                            (unsigned long long)i, (int)n, m);
        }
        size_t na = (size_t)(sp - m), nb = n - na - 1;
        if (na + nb > cap) {
            cap = 2 * (na + nb) + 16;
            char *nj = realloc(joined, cap);
            if (!nj) {
                free(joined);
                return err_fail(err, "%s: out of memory for merges", path);
            }
            joined = nj;
        }
        memcpy(joined, m, na);
        memcpy(joined + na, sp + 1, nb);
        int32_t ia = tok_strmap_get(&t->vocab, m, na);
        int32_t ib = tok_strmap_get(&t->vocab, sp + 1, nb);
        int32_t ir = tok_strmap_get(&t->vocab, joined, na + nb);
        if (ia < 0 || ib < 0 || ir < 0) {
            err_fail(err, "%s: tokenizer.ggml.merges[%llu] \"%.*s\": \"%.*s\" is not in the vocabulary",
                     path, (unsigned long long)i, (int)n, m, (int)(ia < 0 ? na : ib < 0 ? nb : na + nb),
                     ia < 0 ? m : ib < 0 ? sp + 1 : joined);
            free(joined);
            return -1;
        }
        /* the first rank of a pair counts (llama.cpp's emplace keeps it) */
        if (!tok_pairmap_get(&t->merges, ia, ib)) tok_pairmap_insert(&t->merges, ia, ib, (int32_t)i, ir);
    }
    free(joined);
    return 0;
}

/* Control, unknown and user-defined tokens become added tokens. llama.cpp
 * gives Phi-3's special tokens rstrip by model name (GGUF has no per-token
 * flags); so do we. */
static int add_gguf_added_tokens(tok_tokenizer *t, const gguf_file *g, pdl_error *err) {
    const char *name = NULL;
    char lower[128] = "";
    if (gguf_get_str(g, "general.name", &name, err) < 0) return -1;
    for (size_t i = 0; name && name[i] && i + 1 < sizeof lower; i++) {
        lower[i] = (char)tolower((unsigned char)name[i]);
        lower[i + 1] = '\0';
    }
    bool phi3 = strstr(lower, "phi-3") || strstr(lower, "phi3");
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->type[i];
        if (ty != TOK_TYPE_CONTROL && ty != TOK_TYPE_UNKNOWN && ty != TOK_TYPE_USER_DEFINED) continue;
        const char *p = t->pool + t->piece_off[i];
        uint8_t flags = ty == TOK_TYPE_USER_DEFINED ? 0 : TOK_ADDED_SPECIAL;
        if (phi3 && strcmp(p, "<unk>") != 0 && strcmp(p, "<s>") != 0 && strcmp(p, "<|endoftext|>") != 0)
            flags |= TOK_ADDED_RSTRIP;
        if (!tok_trie_add(&t->added_raw, p, t->piece_len[i], i, flags))
            return err_fail(err, "%s: out of memory for added tokens", gguf_path(g));
    }
    return 0;
}

/* llama.cpp's "bert" spelling back into Hugging Face's: "▁piece" -> "piece",
 * a control token (or, without token types, "[...]": the older converter's
 * rule) as it is, any other piece -> "##piece". Rewrites ptrs/lens to point
 * into the returned pool (the caller frees it after tok_set_pieces). */
static char *wp_respell(const char **ptrs, uint32_t *lens, const uint8_t *type, int32_t n, bool has_types) {
    size_t total = 1;
    for (int32_t i = 0; i < n; i++) total += (size_t)lens[i] + 2;
    char *pool = malloc(total);
    if (!pool) return NULL;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *p = ptrs[i];
        uint32_t len = lens[i];
        bool bracket = len >= 2 && p[0] == '[' && p[len - 1] == ']';
        if ((has_types && type[i] == TOK_TYPE_CONTROL) || (!has_types && bracket)) continue;
        if (len >= TOK_SPM_SPACE_LEN && memcmp(p, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN) == 0) {
            ptrs[i] = p + TOK_SPM_SPACE_LEN;
            lens[i] = len - TOK_SPM_SPACE_LEN;
            continue;
        }
        if (bracket) continue;  /* the older converter kept "[unused0]"-style tokens */
        memcpy(pool + off, "##", 2);
        memcpy(pool + off + 2, p, len);
        ptrs[i] = pool + off;
        lens[i] = len + 2;
        off += (size_t)len + 2;
    }
    return pool;
}

/* A "bert" vocabulary's settings, as llama.cpp reads them: lowercase (default
 * true) and strip_accents (default: lowercase) from
 * tokenizer.ggml.normalizer.*, CLS first (cls_token_id, else bos_token_id,
 * else 101), SEP last (seperator_token_id - llama.cpp's spelling -, else
 * eos_token_id, else 102), [UNK] 100. convert_hf_to_gguf.py writes
 * add_bos/add_eos for "[CLS] $A [SEP]", older files add_sep or nothing: SEP
 * is added unless every key present says no. */
static int load_wpm_settings(tok_tokenizer *t, const gguf_file *g, pdl_error *err) {
    int32_t n = t->n_vocab;
    tok_wp_defaults(t);
    if (get_flag(g, "tokenizer.ggml.normalizer.lowercase", &t->bert_lowercase, err) != 0) return -1;
    t->bert_strip_accents = t->bert_lowercase;
    if (get_flag(g, "tokenizer.ggml.normalizer.strip_accents", &t->bert_strip_accents, err) != 0) return -1;
    t->unk_id = n > 100 ? 100 : -1;
    t->bos_id = n > 101 ? 101 : -1;
    t->eos_id = n > 102 ? 102 : -1;
    if (special_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos_id, err) != 0 ||
        special_id(g, "tokenizer.ggml.cls_token_id", n, &t->bos_id, err) != 0 ||
        special_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos_id, err) != 0 ||
        special_id(g, "tokenizer.ggml.seperator_token_id", n, &t->eos_id, err) != 0)
        return -1;
    bool add_bos = true, add_eos = false, add_sep = false;
    int has_eos = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos, err);
    int has_sep = has_eos < 0 ? -1 : gguf_get_bool(g, "tokenizer.ggml.add_sep_token", &add_sep, err);
    if (has_sep < 0 || get_flag(g, "tokenizer.ggml.add_bos_token", &add_bos, err) != 0) return -1;
    t->add_bos = add_bos;
    t->add_eos = (has_eos == 0 && has_sep == 0) || add_eos || add_sep;
    return 0;
}

int tok_load_gguf(tok_tokenizer **out, const gguf_file *g, pdl_error *err) {
    *out = NULL;
    const char *path = gguf_path(g);
    const char *model;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (rc < 0) return -1;
    if (rc == 0) return err_fail(err, "%s: no tokenizer.ggml.model key", path);
    bool bpe = strcmp(model, "gpt2") == 0;
    bool wpm = strcmp(model, "bert") == 0;
    if (!bpe && !wpm && strcmp(model, "llama") != 0)
        return err_fail(err, "%s: tokenizer.ggml.model \"%s\" is not supported (only \"llama\", \"gpt2\" "
                        "and \"bert\")", path, model);
    gguf_array toks, scores = {0}, types = {0};
    rc = gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, err);
    if (rc < 0) return -1;
    if (rc == 0) return err_fail(err, "%s: no tokenizer.ggml.tokens key", path);
    if (toks.elem_type != GGUF_TYPE_STRING)
        return err_fail(err, "%s: tokenizer.ggml.tokens is an array of %s, not of strings", path,
                        gguf_type_name(toks.elem_type));
    if (toks.count == 0 || toks.count > GGUF_MAX_VOCAB)
        return err_fail(err, "%s: tokenizer.ggml.tokens has %llu entries (expected 1..%d)", path,
                        (unsigned long long)toks.count, GGUF_MAX_VOCAB);
    int32_t n = (int32_t)toks.count;

    int has_scores = gguf_get_arr(g, "tokenizer.ggml.scores", &scores, err);
    if (has_scores < 0) return -1;
    if (has_scores && (scores.elem_type != GGUF_TYPE_FLOAT32 && scores.elem_type != GGUF_TYPE_FLOAT64))
        return err_fail(err, "%s: tokenizer.ggml.scores is an array of %s, not of floats", path,
                        gguf_type_name(scores.elem_type));
    if (has_scores && scores.count != toks.count)
        return err_fail(err, "%s: tokenizer.ggml.scores has %llu entries, tokens has %d", path,
                        (unsigned long long)scores.count, n);
    int has_types = gguf_get_arr(g, "tokenizer.ggml.token_type", &types, err);
    if (has_types < 0) return -1;
    if (has_types && (types.elem_type == GGUF_TYPE_STRING || types.elem_type == GGUF_TYPE_BOOL ||
                      types.elem_type == GGUF_TYPE_FLOAT32 || types.elem_type == GGUF_TYPE_FLOAT64))
        return err_fail(err, "%s: tokenizer.ggml.token_type is an array of %s, not of integers", path,
                        gguf_type_name(types.elem_type));
    if (has_types && types.count != toks.count)
        return err_fail(err, "%s: tokenizer.ggml.token_type has %llu entries, tokens has %d", path,
                        (unsigned long long)types.count, n);

    const char *pre = "default";  /* tokenizer.ggml.pre of a gpt2 vocabulary */
    tok_tokenizer *t = tok_new(n);
    const char **ptrs = calloc((size_t)n, sizeof *ptrs);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    if (t) t->scores = calloc((size_t)n, sizeof *t->scores);
    if (!t || !ptrs || !lens || !t->scores) {
        free(ptrs);
        free(lens);
        tok_free(t);
        return err_fail(err, "%s: out of memory for %d tokens", path, n);
    }
    for (int32_t i = 0; i < n; i++) {
        if (toks.strings[i].len > UINT32_MAX / 2) {
            free(ptrs);
            free(lens);
            tok_free(t);
            return err_fail(err, "%s: tokenizer.ggml.tokens[%d] is too long", path, i);
        }
        ptrs[i] = toks.strings[i].ptr;
        lens[i] = (uint32_t)toks.strings[i].len;
        if (has_scores) t->scores[i] = (float)gguf_arr_f64(&scores, (uint64_t)i);
        int64_t ty = has_types ? gguf_arr_i64(&types, (uint64_t)i) : TOK_TYPE_NORMAL;
        t->type[i] = ty >= TOK_TYPE_NORMAL && ty <= TOK_TYPE_BYTE ? (uint8_t)ty : TOK_TYPE_NORMAL;
    }
    char *wp_pool = NULL;
    if (wpm && !(wp_pool = wp_respell(ptrs, lens, t->type, n, has_types != 0))) {
        free(ptrs);
        free(lens);
        tok_free(t);
        return err_fail(err, "%s: out of memory for %d tokens", path, n);
    }
    rc = tok_set_pieces(t, ptrs, lens, err);
    free(wp_pool);
    free(ptrs);
    free(lens);
    if (rc != 0) goto fail;

    if (wpm) {
        if (load_wpm_settings(t, g, err) != 0) goto fail;
    } else if (bpe) {
        /* llama.cpp's defaults for a "gpt2" vocabulary; the pre-tokenizer
         * decides add_bos (Llama 3: true) and ignore_merges */
        if (gguf_get_str(g, "tokenizer.ggml.pre", &pre, err) < 0) goto fail;
        t->model = TOK_MODEL_BPE;
        t->merge_by_rank = true;
        t->bos_id = n > 11 ? 11 : -1;
        t->eos_id = n > 11 ? 11 : -1;
        t->unk_id = -1;
        t->add_eos = false;
        if (tok_pre_from_gguf(t, pre, &t->add_bos, err) != 0) {
            err_fail_prefix(err, "%s", path);
            goto fail;
        }
    } else {
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
    }
    if ((!wpm && (special_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos_id, err) != 0 ||
                  special_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos_id, err) != 0 ||
                  get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err) != 0 ||
                  get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err) != 0)) ||
        special_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk_id, err) != 0 ||
        (!bpe && !wpm && get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err) != 0))
        goto fail;
    /* fill-in-the-middle tokens named by key (the older prefix/suffix/middle
     * keys win when both are given, as in llama.cpp); tok_finish looks up
     * the rest by their text */
    static const struct {
        const char *key;
        tok_fim which;
    } fim_keys[] = {
        {"tokenizer.ggml.fim_pre_token_id", TOK_FIM_PRE}, {"tokenizer.ggml.fim_suf_token_id", TOK_FIM_SUF},
        {"tokenizer.ggml.fim_mid_token_id", TOK_FIM_MID}, {"tokenizer.ggml.fim_pad_token_id", TOK_FIM_PAD},
        {"tokenizer.ggml.fim_rep_token_id", TOK_FIM_REP}, {"tokenizer.ggml.fim_sep_token_id", TOK_FIM_SEP},
        {"tokenizer.ggml.prefix_token_id", TOK_FIM_PRE},  {"tokenizer.ggml.suffix_token_id", TOK_FIM_SUF},
        {"tokenizer.ggml.middle_token_id", TOK_FIM_MID},
    };
    for (size_t i = 0; i < sizeof fim_keys / sizeof fim_keys[0]; i++)
        if (special_id(g, fim_keys[i].key, n, &t->fim[fim_keys[i].which], err) != 0) goto fail;
    /* llama.cpp drops the leading space on detokenize exactly when it added one */
    if (!wpm) t->strip_leading_space = !bpe && t->add_space_prefix;
    if (wpm && t->unk_id < 0) {
        err_fail(err, "%s: a \"bert\" vocabulary needs an unknown token", path);
        goto fail;
    }

    if (!has_types) {
        /* without types: bytes by spelling, specials by their ids */
        for (int32_t i = 0; i < n; i++)
            if (tok_parse_byte_piece(t->pool + t->piece_off[i], t->piece_len[i]) >= 0)
                t->type[i] = TOK_TYPE_BYTE;
        if (t->bos_id >= 0) t->type[t->bos_id] = TOK_TYPE_CONTROL;
        if (t->eos_id >= 0) t->type[t->eos_id] = TOK_TYPE_CONTROL;
        if (t->unk_id >= 0) t->type[t->unk_id] = TOK_TYPE_UNKNOWN;
    }
    if (tok_finish(t, err) != 0 || (bpe && load_merges(t, g, pre, err) != 0) ||
        add_gguf_added_tokens(t, g, err) != 0)
        goto fail;
    *out = t;
    return 0;
fail:
    tok_free(t);
    return -1;
}
