/*
 * tok_hf.c - loading a tokenizer from a Hugging Face folder: tokenizer.json
 * (model, added tokens, normalizer, pre-tokenizer, post-processor, decoder)
 * and, when present, tokenizer_config.json (add_bos_token, add_eos_token,
 * bos_token, eos_token).
 *
 * What it is for: model.type "BPE" in its two shapes:
 *   - SentencePiece-converted files (Llama 2, Mistral, the stories models):
 *     byte_fallback, normalizer Prepend("▁") + Replace(" ", "▁") or a
 *     Metaspace pre-tokenizer, decoder Replace("▁", " ") + ByteFallback +
 *     Fuse + Strip(1);
 *   - byte-level files (GPT-2, Llama 3, Qwen, StarCoder, Falcon...): a
 *     ByteLevel pre-tokenizer, alone or in a Sequence with Split regexes,
 *     Digits and Punctuation; NFC/NFD/NFKC/NFKD normalizers; ByteLevel
 *     decoder; ignore_merges.
 * And model.type "WordPiece" (BERT: BertNormalizer, BertPreTokenizer,
 * WordPiece decoder, TemplateProcessing "[CLS] $A [SEP]" or BertProcessing),
 * or a BERT folder with only vocab.txt and tokenizer_config.json
 * (do_lower_case, strip_accents, tokenize_chinese_chars and the special
 * tokens), as transformers' BertTokenizerFast builds it. Only the single
 * sequence is encoded: a pair template ("$A [SEP] $B [SEP]", cross-encoders)
 * is not done.
 * Added tokens keep their special / lstrip / rstrip / single_word /
 * normalized flags. Any other normalizer, pre-tokenizer or decoder is refused
 * with its name rather than half-supported. model.vocab and model.merges are
 * read by tok_json.c's scanner, the rest through jansson.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <unistd.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_json.h"
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
 * Older files say add_prefix_space, newer ones prepend_scheme ("first": only
 * to the text at the very start, not after an added token). */
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
            return err_fail(err, "%s: normalizer: Sequence without a \"normalizers\" list", path);
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
            return err_fail(err, "%s: normalizer \"%s\" is not supported (only Prepend \"\xe2\x96\x81\""
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
            return err_fail(err, "%s: pre_tokenizer Metaspace with split=true is not supported", path);
        t->escape_spaces = true;
        if (metaspace_prepends(pre)) t->add_space_prefix = true;
        t->space_prefix_first = str_is(json_object_get(pre, "prepend_scheme"), "first");
        t->space_prefix_if_absent = true;
        return 0;
    }
    return err_fail(err, "%s: pre_tokenizer \"%s\" is not supported for a SentencePiece-style BPE",
                    path, json_is_string(type) ? json_string_value(type) : "?");
}

/* Accepts the SPM decoders; sets *byte_fallback when <0xXX> pieces decode to
 * bytes. */
static int parse_decoder(tok_tokenizer *t, const json_t *dec, const char *path, bool *byte_fallback,
                         pdl_error *err) {
    *byte_fallback = false;
    if (!dec || json_is_null(dec))
        return err_fail(err, "%s: no decoder (pieces would be joined with spaces); not supported", path);
    const json_t *steps = dec;
    size_t n = 1;
    bool seq = str_is(json_object_get(dec, "type"), "Sequence");
    if (seq) {
        steps = json_object_get(dec, "decoders");
        if (!json_is_array(steps))
            return err_fail(err, "%s: decoder: Sequence without a \"decoders\" list", path);
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
                return err_fail(err, "%s: decoder Strip(start=%lld, stop=%lld) is not supported", path,
                                (long long)start, (long long)stop);
            t->strip_leading_space = start == 1;
        } else if (str_is(type, "Metaspace") &&
                   str_is(json_object_get(step, "replacement"), TOK_SPM_SPACE)) {
            replaces = true;
            t->strip_leading_space = metaspace_prepends(step);
        } else {
            return err_fail(err, "%s: decoder \"%s\" is not supported for a SentencePiece-style BPE",
                            path, json_is_string(type) ? json_string_value(type) : "?");
        }
    }
    if (!replaces)
        return err_fail(err, "%s: decoder does not turn \"\xe2\x96\x81\" back into spaces; not supported",
                        path);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Byte-level BPE: normalizer, pre-tokenizer, decoder
 * ------------------------------------------------------------------------- */

static const char *type_name(const json_t *step) {
    const json_t *type = json_object_get(step, "type");
    return json_is_string(type) ? json_string_value(type) : "?";
}

static int parse_bl_normalizer(tok_tokenizer *t, const json_t *norm, const char *path, pdl_error *err) {
    if (!norm || json_is_null(norm)) return 0;
    if (str_is(json_object_get(norm, "type"), "Sequence")) {
        const json_t *steps = json_object_get(norm, "normalizers");
        if (!json_is_array(steps))
            return err_fail(err, "%s: normalizer: Sequence without a \"normalizers\" list", path);
        for (size_t i = 0; i < json_array_size(steps); i++)
            if (parse_bl_normalizer(t, json_array_get(steps, i), path, err) != 0) return -1;
        return 0;
    }
    static const struct { const char *name; tok_norm_form form; } forms[] = {
        {"NFC", TOK_NORM_NFC}, {"NFD", TOK_NORM_NFD}, {"NFKC", TOK_NORM_NFKC}, {"NFKD", TOK_NORM_NFKD}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        if (!str_is(json_object_get(norm, "type"), forms[i].name)) continue;
        if (t->norm != TOK_NORM_NONE && t->norm != forms[i].form)
            return err_fail(err, "%s: normalizer: two different Unicode forms in a row are not supported",
                            path);
        t->norm = forms[i].form;
        return 0;
    }
    return err_fail(err, "%s: normalizer \"%s\" is not supported for a byte-level BPE (only NFC, NFD, NFKC, NFKD)",
                    path, type_name(norm));
}

static bool parse_behavior(const json_t *b, tok_split_behavior *out) {
    static const struct { const char *name; tok_split_behavior b; } names[] = {
        {"Isolated", TOK_SPLIT_ISOLATED},          {"Removed", TOK_SPLIT_REMOVED},
        {"MergedWithPrevious", TOK_SPLIT_MERGED_PREV}, {"MergedWithNext", TOK_SPLIT_MERGED_NEXT},
        {"Contiguous", TOK_SPLIT_CONTIGUOUS}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (str_is(b, names[i].name)) {
            *out = names[i].b;
            return true;
        }
    return false;
}

/* Adds the steps of one pre-tokenizer; *mapped is set once a ByteLevel step
 * has turned the text into its byte-level form. */
static int parse_bl_pre(tok_tokenizer *t, const json_t *pre, bool *mapped, bool *byte_level,
                        const char *path, pdl_error *err) {
    const json_t *type = json_object_get(pre, "type");
    int rc = 0;
    if (str_is(type, "Sequence")) {
        const json_t *steps = json_object_get(pre, "pretokenizers");
        if (!json_is_array(steps))
            return err_fail(err, "%s: pre_tokenizer: Sequence without a \"pretokenizers\" list", path);
        for (size_t i = 0; i < json_array_size(steps); i++)
            if (parse_bl_pre(t, json_array_get(steps, i), mapped, byte_level, path, err) != 0) return -1;
        return 0;
    }
    if (str_is(type, "ByteLevel")) {
        const json_t *aps = json_object_get(pre, "add_prefix_space");
        const json_t *regex = json_object_get(pre, "use_regex");
        if ((aps ? json_is_true(aps) : true)) rc = tok_pre_add_prefix_space(t, err);
        if (rc == 0 && (regex ? json_is_true(regex) : true))
            rc = tok_pre_add_split(t, TOK_RE_GPT2, strlen(TOK_RE_GPT2), false, TOK_SPLIT_ISOLATED, false,
                                   *mapped, err);
        *mapped = *byte_level = true;
    } else if (str_is(type, "Split")) {
        const json_t *pat = json_object_get(pre, "pattern");
        const json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        tok_split_behavior b;
        if (!json_is_string(re) && !json_is_string(lit))
            return err_fail(err, "%s: pre_tokenizer Split needs a pattern {\"Regex\": ...} or {\"String\": ...}",
                            path);
        if (!parse_behavior(json_object_get(pre, "behavior"), &b))
            return err_fail(err, "%s: pre_tokenizer Split: unknown behavior", path);
        const json_t *ps = json_is_string(re) ? re : lit;
        rc = tok_pre_add_split(t, json_string_value(ps), json_string_length(ps), !json_is_string(re), b,
                               json_is_true(json_object_get(pre, "invert")), *mapped, err);
    } else if (str_is(type, "Digits")) {
        bool each = json_is_true(json_object_get(pre, "individual_digits"));
        rc = tok_pre_add_split(t, "\\p{N}", 5, false, each ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS, false,
                               *mapped, err);
    } else if (str_is(type, "Punctuation")) {
        tok_split_behavior b = TOK_SPLIT_ISOLATED;
        const json_t *beh = json_object_get(pre, "behavior");
        if (beh && !parse_behavior(beh, &b))
            return err_fail(err, "%s: pre_tokenizer Punctuation: unknown behavior", path);
        rc = tok_pre_add_split(t, TOK_RE_PUNCT, strlen(TOK_RE_PUNCT), false, b, false, *mapped, err);
    } else {
        return err_fail(err, "%s: pre_tokenizer \"%s\" is not supported for a byte-level BPE", path,
                        type_name(pre));
    }
    if (rc != 0) return err_fail_prefix(err, "%s", path);
    return 0;
}

/* Whether a pre-tokenizer (or a Sequence of them) holds ByteLevel. */
static bool has_byte_level(const json_t *pre) {
    if (str_is(json_object_get(pre, "type"), "ByteLevel")) return true;
    const json_t *steps = json_object_get(pre, "pretokenizers");
    for (size_t i = 0; i < json_array_size(steps); i++)
        if (has_byte_level(json_array_get(steps, i))) return true;
    return false;
}

static int check_bl_decoder(const json_t *dec, const char *path, pdl_error *err) {
    bool ok = str_is(json_object_get(dec, "type"), "ByteLevel");
    if (str_is(json_object_get(dec, "type"), "Sequence")) {
        const json_t *steps = json_object_get(dec, "decoders");
        ok = json_array_size(steps) > 0;
        for (size_t i = 0; i < json_array_size(steps); i++) {
            const json_t *st = json_array_get(steps, i);
            if (!str_is(json_object_get(st, "type"), "ByteLevel") && !str_is(json_object_get(st, "type"), "Fuse"))
                ok = false;
        }
    }
    if (!ok)
        return err_fail(err, "%s: decoder \"%s\" is not supported for a byte-level BPE (only ByteLevel)", path,
                        dec ? type_name(dec) : "null");
    return 0;
}

/* ---------------------------------------------------------------------------
 * WordPiece: model settings, normalizer, pre-tokenizer, decoder
 * ------------------------------------------------------------------------- */

/* A boolean member: its value, or def when absent or null. */
static bool bool_or(const json_t *obj, const char *key, bool def) {
    const json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static int set_wp_prefix(tok_tokenizer *t, const json_t *v, const char *what, const char *path,
                         pdl_error *err) {
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v) || json_string_length(v) >= sizeof t->wp_prefix)
        return err_fail(err, "%s: %s must be a string of at most %zu bytes", path, what,
                        sizeof t->wp_prefix - 1);
    memcpy(t->wp_prefix, json_string_value(v), json_string_length(v) + 1);
    t->wp_prefix_len = (uint8_t)json_string_length(v);
    return 0;
}

static int parse_wordpiece(tok_tokenizer *t, const json_t *root, const json_t *model, const char *path,
                           pdl_error *err) {
    tok_wp_defaults(t);
    if (set_wp_prefix(t, json_object_get(model, "continuing_subword_prefix"),
                      "model.continuing_subword_prefix", path, err) != 0)
        return -1;
    const json_t *mx = json_object_get(model, "max_input_chars_per_word");
    if (mx && !json_is_null(mx)) {
        if (!json_is_integer(mx) || json_integer_value(mx) < 0 || json_integer_value(mx) > INT32_MAX)
            return err_fail(err, "%s: model.max_input_chars_per_word is not a count", path);
        t->wp_max_chars = (int32_t)json_integer_value(mx);
    }

    const json_t *norm = json_object_get(root, "normalizer");
    if (!norm || json_is_null(norm)) {
        t->bert_norm = false;
    } else if (str_is(json_object_get(norm, "type"), "BertNormalizer")) {
        t->bert_clean_text = bool_or(norm, "clean_text", true);
        t->bert_chinese = bool_or(norm, "handle_chinese_chars", true);
        t->bert_lowercase = bool_or(norm, "lowercase", true);
        /* strip_accents: null follows lowercase */
        t->bert_strip_accents = bool_or(norm, "strip_accents", t->bert_lowercase);
    } else {
        return err_fail(err, "%s: normalizer \"%s\" is not supported for WordPiece (only BertNormalizer)",
                        path, type_name(norm));
    }

    const json_t *pre = json_object_get(root, "pre_tokenizer");
    if (!str_is(json_object_get(pre, "type"), "BertPreTokenizer"))
        return err_fail(err, "%s: pre_tokenizer \"%s\" is not supported for WordPiece (only BertPreTokenizer)",
                        path, pre && !json_is_null(pre) ? type_name(pre) : "null");

    const json_t *dec = json_object_get(root, "decoder");
    if (!str_is(json_object_get(dec, "type"), "WordPiece"))
        return err_fail(err, "%s: decoder \"%s\" is not supported for WordPiece (only WordPiece)", path,
                        dec && !json_is_null(dec) ? type_name(dec) : "null");
    const json_t *prefix = json_object_get(dec, "prefix");
    if (json_is_string(prefix) && strcmp(json_string_value(prefix), t->wp_prefix) != 0)
        return err_fail(err, "%s: decoder prefix \"%s\" differs from the model's \"%s\"; not supported", path,
                        json_string_value(prefix), t->wp_prefix);
    t->wp_cleanup = bool_or(dec, "cleanup", true);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Post-processor, tokenizer_config.json
 * ------------------------------------------------------------------------- */

/* The special token name of a post-processor template item, or NULL. */
static const char *template_special(const json_t *item) {
    const json_t *st = json_object_get(item, "SpecialToken");
    return st ? json_string_value(json_object_get(st, "id")) : NULL;
}

/* ["<s>", 0] of RobertaProcessing / BertProcessing. */
static int32_t processing_id(const json_t *pair, const tok_tokenizer *t) {
    json_int_t v = json_integer_value(json_array_get(pair, 1));
    if (json_array_size(pair) == 2 && json_is_integer(json_array_get(pair, 1)) && v >= 0 && v < t->n_vocab)
        return (int32_t)v;
    const char *s = json_string_value(json_array_get(pair, 0));
    return s ? tok_strmap_get(&t->vocab, s, strlen(s)) : -1;
}

/* BOS / EOS as the post-processor adds them to a single sequence:
 * TemplateProcessing's "single" template (its first and last items when
 * they are special tokens), RobertaProcessing / BertProcessing (cls, sep),
 * ByteLevel (nothing), or a Sequence of those. */
static void parse_post_processor(const json_t *pp, const tok_tokenizer *t, int32_t *bos,
                                 int32_t *eos) {
    const json_t *type = json_object_get(pp, "type");
    if (str_is(type, "Sequence")) {
        const json_t *steps = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(steps); i++)
            parse_post_processor(json_array_get(steps, i), t, bos, eos);
        return;
    }
    if (str_is(type, "RobertaProcessing") || str_is(type, "BertProcessing")) {
        *bos = processing_id(json_object_get(pp, "cls"), t);
        *eos = processing_id(json_object_get(pp, "sep"), t);
        return;
    }
    if (!str_is(type, "TemplateProcessing")) return;
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
    if (!json_is_string(v)) return err_fail(err, "%s: %s is not a string", path, key);
    const char *s = json_string_value(v);
    *id = tok_strmap_get(&t->vocab, s, strlen(s));
    if (*id < 0) return err_fail(err, "%s: %s \"%s\" is not in the vocabulary", path, key, s);
    return 1;
}

/* ---------------------------------------------------------------------------
 * Vocabulary, merges, added tokens
 * ------------------------------------------------------------------------- */

static int parse_merges(tok_tokenizer *t, const tok_json_doc *doc, const char *path, pdl_error *err) {
    char *pool;
    tok_json_merge *m;
    size_t n;
    if (tok_json_merges(doc, path, &pool, &m, &n, err) != 0) return -1;
    int rc = 0;
    char *joined = NULL;
    size_t joined_cap = 0;
    if (n > HF_MAX_VOCAB * (size_t)4) rc = err_fail(err, "%s: %zu merges is too many", path, n);
    if (rc == 0 && !tok_pairmap_init(&t->merges, n)) rc = err_fail(err, "%s: out of memory for merges", path);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (m[i].a_off == UINT32_MAX) {
            rc = err_fail(err, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
            break;
        }
        const char *a = pool + m[i].a_off, *b = pool + m[i].b_off;
        size_t na = m[i].a_len, nb = m[i].b_len;
        if (na + nb > joined_cap) {
            joined_cap = 2 * (na + nb) + 16;
            char *nj = realloc(joined, joined_cap);
            if (!nj) {
                rc = err_fail(err, "%s: out of memory for merges", path);
                break;
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
            rc = err_fail(err, "%s: model.merges[%zu] (\"%.*s\" + \"%.*s\"): \"%.*s\" is not in the vocabulary",
                          path, i, (int)na, a, (int)nb, b, wn, what);
            break;
        }
        tok_pairmap_insert(&t->merges, ia, ib, (int32_t)i, ir);
    }
    free(joined);
    free(pool);
    free(m);
    return rc;
}

/* Fills pieces from model.vocab and added_tokens. */
static int parse_vocab(tok_tokenizer **out, const tok_json_doc *doc, const json_t *added,
                       const char *path, pdl_error *err) {
    *out = NULL;
    if (!doc->vocab.p || doc->vocab.p[0] != '{')
        return err_fail(err, "%s: model.vocab is missing or not an object", path);
    char *keys;
    tok_json_vocab_entry *e;
    size_t n_entries;
    if (tok_json_vocab(doc, path, &keys, &e, &n_entries, err) != 0) return -1;
    int rc = 0;
    int64_t max_id = -1;
    for (size_t i = 0; i < n_entries; i++) {
        if (e[i].id < 0 || e[i].id >= HF_MAX_VOCAB) {
            rc = err_fail(err, "%s: model.vocab[\"%s\"] is not an id in 0..%d", path, keys + e[i].off,
                          HF_MAX_VOCAB - 1);
            break;
        }
        if (e[i].id > max_id) max_id = e[i].id;
    }
    size_t n_added = json_array_size(added);
    for (size_t i = 0; rc == 0 && i < n_added; i++) {
        const json_t *a = json_array_get(added, i);
        const json_t *id = json_object_get(a, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= HF_MAX_VOCAB || !json_is_string(json_object_get(a, "content"))) {
            rc = err_fail(err, "%s: added_tokens[%zu] needs an \"id\" in 0..%d and a \"content\"", path, i,
                          HF_MAX_VOCAB - 1);
            break;
        }
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (rc == 0 && max_id < 0) rc = err_fail(err, "%s: model.vocab is empty", path);
    if (rc != 0) {
        free(keys);
        free(e);
        return -1;
    }

    int32_t n = (int32_t)max_id + 1;
    tok_tokenizer *t = tok_new(n);
    const char **ptrs = calloc((size_t)n, sizeof *ptrs);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    if (!t || !ptrs || !lens) {
        tok_free(t);
        free(ptrs);
        free(lens);
        free(keys);
        free(e);
        return err_fail(err, "%s: out of memory for %d tokens", path, n);
    }
    for (size_t i = 0; i < n_entries; i++) {
        int32_t id = (int32_t)e[i].id;
        if (ptrs[id]) {
            rc = err_fail(err, "%s: model.vocab gives id %d to both \"%s\" and \"%s\"", path, id, ptrs[id],
                          keys + e[i].off);
            break;
        }
        ptrs[id] = keys + e[i].off;
        lens[id] = e[i].len;
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
    free(keys);
    free(e);
    if (rc != 0) {
        tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

/* added_tokens into the tries: normalized ones are matched on normalized
 * text (byte-level BPE; their content normalized the same way), the rest on
 * the raw text. */
static int add_added_tokens(tok_tokenizer *t, const json_t *added, const char *path, pdl_error *err) {
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        const json_t *content = json_object_get(a, "content");
        bool special = json_is_true(json_object_get(a, "special"));
        const json_t *norm = json_object_get(a, "normalized");
        bool normalized = norm ? json_is_true(norm) : !special;
        uint8_t flags = (special ? TOK_ADDED_SPECIAL : 0) |
                        (json_is_true(json_object_get(a, "lstrip")) ? TOK_ADDED_LSTRIP : 0) |
                        (json_is_true(json_object_get(a, "rstrip")) ? TOK_ADDED_RSTRIP : 0) |
                        (json_is_true(json_object_get(a, "single_word")) ? TOK_ADDED_SINGLE_WORD : 0);
        const char *s = json_string_value(content);
        size_t n = json_string_length(content);
        bool ok;
        if (normalized && (t->model == TOK_MODEL_BPE || (t->model == TOK_MODEL_WORDPIECE && t->bert_norm))) {
            size_t nn;
            char *ns = t->model == TOK_MODEL_WORDPIECE ? tok_wp_normalize_alloc(t, s, n, &nn)
                                                        : tok_normalize_alloc(t->norm, s, n, &nn);
            ok = ns && tok_trie_add(&t->added_norm, ns, nn, id, flags | TOK_ADDED_NORMALIZED);
            free(ns);
        } else {
            /* SPM: matched on the raw text (their "▁" form is not modelled) */
            ok = tok_trie_add(&t->added_raw, s, n, id, flags);
        }
        if (!ok) return err_fail(err, "%s: out of memory for added tokens", path);
    }
    return 0;
}

static int load_tokenizer_json(tok_tokenizer **out, const tok_json_doc *doc, const char *path,
                               pdl_error *err) {
    *out = NULL;
    const json_t *root = doc->root;
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return err_fail(err, "%s: no \"model\" object", path);
    const json_t *mtype = json_object_get(model, "type");
    bool wordpiece = str_is(mtype, "WordPiece");
    if (wordpiece) {
        if (doc->merges.p) return err_fail(err, "%s: a WordPiece model with merges", path);
    } else if (mtype ? !str_is(mtype, "BPE") : !doc->merges.p) {
        return err_fail(err, "%s: model.type \"%s\" is not supported (only BPE and WordPiece)", path,
                        json_is_string(mtype) ? json_string_value(mtype) : "?");
    }
    if (doc->merges.p && doc->merges.p[0] != '[')
        return err_fail(err, "%s: model.merges is not a list", path);
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout))
        return err_fail(err, "%s: BPE dropout is not supported", path);
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; !wordpiece && i < 2; i++) {
        const json_t *v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !str_is(v, ""))
            return err_fail(err, "%s: BPE %s is not supported", path, affixes[i]);
    }
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    bool byte_level = pre && has_byte_level(pre);

    tok_tokenizer *t;
    const json_t *added = json_object_get(root, "added_tokens");
    if (parse_vocab(&t, doc, added, path, err) != 0) return -1;
    if (wordpiece) {
        if (parse_wordpiece(t, root, model, path, err) != 0) goto fail;
        goto finish;
    }
    t->model = byte_level ? TOK_MODEL_BPE : TOK_MODEL_SPM;
    t->merge_by_rank = true;
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    if (byte_level) {
        bool mapped = false, seen = false;
        if (parse_bl_normalizer(t, json_object_get(root, "normalizer"), path, err) != 0 ||
            parse_bl_pre(t, pre, &mapped, &seen, path, err) != 0 ||
            check_bl_decoder(json_object_get(root, "decoder"), path, err) != 0)
            goto fail;
    } else {
        bool dec_bytes = false;
        if (parse_normalizer(t, json_object_get(root, "normalizer"), path, err) != 0 ||
            parse_pre_tokenizer(t, pre, path, err) != 0 ||
            parse_decoder(t, json_object_get(root, "decoder"), path, &dec_bytes, err) != 0)
            goto fail;
        /* HF's ByteFallback decoder turns any piece spelled <0xXX> into its byte */
        if (dec_bytes) {
            for (int32_t i = 0; i < t->n_vocab; i++)
                if (t->type[i] == TOK_TYPE_NORMAL &&
                    tok_parse_byte_piece(t->pool + t->piece_off[i], t->piece_len[i]) >= 0)
                    t->type[i] = TOK_TYPE_BYTE;
        }
    }
finish:
    if (tok_finish(t, err) != 0) goto fail;
    if (doc->merges.p && parse_merges(t, doc, path, err) != 0) goto fail;
    if (add_added_tokens(t, added, path, err) != 0) goto fail;

    const json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        t->unk_id = tok_strmap_get(&t->vocab, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0) {
            err_fail(err, "%s: model.unk_token \"%s\" is not in the vocabulary", path,
                     json_string_value(unk));
            goto fail;
        }
    }
    if (wordpiece && t->unk_id < 0) {
        err_fail(err, "%s: a WordPiece model needs model.unk_token (a word without pieces becomes it)", path);
        goto fail;
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

/* transformers' BertTokenizerFast rebuilds the BertNormalizer from
 * tokenizer_config.json's do_lower_case / strip_accents /
 * tokenize_chinese_chars when they differ from tokenizer.json's; so do we,
 * for the keys the file has (strip_accents null: follow lowercase). */
static void bert_config_overrides(tok_tokenizer *t, const json_t *cfg) {
    const json_t *lower = json_object_get(cfg, "do_lower_case");
    const json_t *strip = json_object_get(cfg, "strip_accents");
    const json_t *cjk = json_object_get(cfg, "tokenize_chinese_chars");
    if (json_is_boolean(lower)) t->bert_lowercase = json_is_true(lower);
    if (json_is_boolean(strip))
        t->bert_strip_accents = json_is_true(strip);
    else if (strip || json_is_boolean(lower))
        t->bert_strip_accents = t->bert_lowercase;
    if (json_is_boolean(cjk)) t->bert_chinese = json_is_true(cjk);
}

/* ---------------------------------------------------------------------------
 * A BERT folder without tokenizer.json: vocab.txt + tokenizer_config.json
 * ------------------------------------------------------------------------- */

/* tokenizer_config.json's token `key` (a string or {"content": ...}), or def. */
static const char *config_str(const json_t *cfg, const char *key, const char *def) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : def;
}

int tok_load_vocab_txt(tok_tokenizer **out, const char *dir, pdl_error *err) {
    *out = NULL;
    size_t plen = strlen(dir) + 32;
    char *path = malloc(plen);
    if (!path) return err_fail(err, "%s: out of memory", dir);
    json_t *cfg = NULL;
    tok_tokenizer *t = NULL;
    const char **ptrs = NULL;
    uint32_t *lens = NULL;
    pdl_file_map map;
    bool mapped = false;
    int rc = -1;

    snprintf(path, plen, "%s/tokenizer_config.json", dir);
    if (access(path, F_OK) == 0 && json_file_load(path, 0, &cfg, err) != 0) goto done;
    snprintf(path, plen, "%s/vocab.txt", dir);
    if (file_map_open(&map, path, err) != 0) goto done;
    mapped = true;
    const char *text = (const char *)map.data;
    size_t len = map.size;
    /* one token a line; the id is the line number; trailing whitespace is
     * not part of the token (HF's load_vocab: trim_end) */
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    if (len > 0 && text[len - 1] != '\n') n_lines++;
    if (n_lines == 0 || n_lines > HF_MAX_VOCAB) {
        err_fail(err, "%s: %zu lines (expected 1..%d tokens)", path, n_lines, HF_MAX_VOCAB);
        goto done;
    }
    t = tok_new((int32_t)n_lines);
    ptrs = calloc(n_lines, sizeof *ptrs);
    lens = calloc(n_lines, sizeof *lens);
    if (!t || !ptrs || !lens) {
        err_fail(err, "%s: out of memory for %zu tokens", path, n_lines);
        goto done;
    }
    size_t id = 0;
    for (size_t i = 0; i < len && id < n_lines; id++) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        size_t k = e;
        while (k > i && (text[k - 1] == ' ' || text[k - 1] == '\t' || text[k - 1] == '\r')) k--;
        ptrs[id] = text + i;
        lens[id] = (uint32_t)(k - i);
        i = e + 1;
    }
    if (tok_set_pieces(t, ptrs, lens, err) != 0) goto done;
    tok_wp_defaults(t);
    bert_config_overrides(t, cfg);
    static const char *const keys[] = {"unk_token", "cls_token", "sep_token", "pad_token", "mask_token"};
    static const char *const defs[] = {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"};
    int32_t ids[5];
    for (int k = 0; k < 5; k++) {
        const char *s = config_str(cfg, keys[k], defs[k]);
        /* the first line holding the token, as HF's vocabulary map keeps the last;
         * BERT vocabularies hold each once */
        ids[k] = -1;
        for (int32_t i = 0; i < t->n_vocab && ids[k] < 0; i++)
            if (t->piece_len[i] == strlen(s) && memcmp(t->pool + t->piece_off[i], s, t->piece_len[i]) == 0)
                ids[k] = i;
        if (ids[k] < 0 && k < 3) {
            err_fail(err, "%s: %s \"%s\" is not in the vocabulary", path, keys[k], s);
            goto done;
        }
        if (ids[k] >= 0) t->type[ids[k]] = TOK_TYPE_CONTROL;
    }
    if (tok_finish(t, err) != 0) goto done;
    for (int k = 0; k < 5; k++)
        if (ids[k] >= 0 && !tok_trie_add(&t->added_raw, t->pool + t->piece_off[ids[k]], t->piece_len[ids[k]],
                                         ids[k], TOK_ADDED_SPECIAL)) {
            err_fail(err, "%s: out of memory for added tokens", path);
            goto done;
        }
    t->unk_id = ids[0];
    t->bos_id = ids[1];
    t->eos_id = ids[2];
    t->add_bos = t->add_eos = true;
    *out = t;
    t = NULL;
    rc = 0;
done:
    tok_free(t);
    free(ptrs);
    free(lens);
    if (mapped) file_map_close(&map);
    json_decref(cfg);
    free(path);
    return rc;
}

int tok_load_hf_dir(tok_tokenizer **out, const char *dir, pdl_error *err) {
    *out = NULL;
    size_t n = strlen(dir) + 32;
    char *path = malloc(n);
    if (!path) return err_fail(err, "%s: out of memory", dir);

    snprintf(path, n, "%s/tokenizer.json", dir);
    if (access(path, F_OK) != 0) {
        snprintf(path, n, "%s/vocab.txt", dir);
        if (access(path, F_OK) == 0) {
            free(path);
            return tok_load_vocab_txt(out, dir, err);
        }
        snprintf(path, n, "%s/tokenizer.json", dir);
    }
    tok_json_doc doc;
    tok_tokenizer *t = NULL;
    if (tok_json_load(&doc, path, err) != 0) goto fail;
    int rc = load_tokenizer_json(&t, &doc, path, err);
    tok_json_free(&doc);
    if (rc != 0) goto fail;

    /* tokenizer_config.json overrides the post-processor's choices (it is what
     * transformers rebuilds the post-processor from). */
    snprintf(path, n, "%s/tokenizer_config.json", dir);
    if (access(path, F_OK) == 0) {
        json_t *cfg;
        if (json_file_load(path, JSON_DECODE_INT_AS_REAL, &cfg, err) != 0) goto fail;
        int32_t id;
        int got = config_token(cfg, "bos_token", t, &id, path, err);
        if (got > 0) t->bos_id = id;
        if (got >= 0) got = config_token(cfg, "eos_token", t, &id, path, err);
        if (got > 0) t->eos_id = id;
        const json_t *ab = json_object_get(cfg, "add_bos_token");
        const json_t *ae = json_object_get(cfg, "add_eos_token");
        if (json_is_boolean(ab)) t->add_bos = json_is_true(ab);
        if (json_is_boolean(ae)) t->add_eos = json_is_true(ae);
        if (t->model == TOK_MODEL_WORDPIECE && t->bert_norm) bert_config_overrides(t, cfg);
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
