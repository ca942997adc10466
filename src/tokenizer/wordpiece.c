/*
 * wordpiece.c - the WordPiece tokenizer of BERT-family models (bge,
 * nomic-embed, all-MiniLM): Hugging Face's BertNormalizer, BertPreTokenizer,
 * WordPiece model and WordPiece decoder.
 *
 * What it is for: text between added tokens -> ids, and the decoded text of
 * each id. What it is not for: loading (tok_hf.c reads tokenizer.json and
 * vocab.txt, tok_gguf.c llama.cpp's "bert" vocabularies), added tokens
 * (added.c) or [CLS]/[SEP] (the encode driver adds them as BOS/EOS).
 *
 * As Hugging Face tokenizers (normalizers/bert.rs, pre_tokenizers/bert.rs,
 * models/wordpiece, decoders/wordpiece.rs) does it:
 *   - normalizer, per character: clean_text drops NUL, U+FFFD and "other"
 *     characters (Cc Cf Cs Co Cn, except \t \n \r) and turns White_Space into
 *     " "; handle_chinese_chars puts " " around CJK ideographs; strip_accents
 *     decomposes (NFD) and drops nonspacing marks (Mn); lowercase is Unicode's
 *     full lowercase mapping (utf8proc's simple one, plus U+0130 -> "i"
 *     U+0307, the one character whose full mapping differs). The
 *     decomposition is per character, without NFD's reordering of
 *     non-starters: only marks that survive (not Mn) could be reordered, and
 *     no two such marks of different classes meet in text.
 *   - pre-tokenizer: words end at White_Space (dropped); every punctuation
 *     character (ASCII 33-47, 58-64, 91-96, 123-126, or Unicode P*) is a word.
 *   - model: a word of more than max_input_chars_per_word characters is the
 *     unknown token; otherwise, from the start, the longest piece in the
 *     vocabulary (after the first, spelled with the "##" prefix) is taken;
 *     when no piece fits at some point the whole word is the unknown token.
 *   - decoder: the first token as it is, each later one with its prefix
 *     removed (continuations) or after a " ", then each through the cleanup
 *     (" ." -> "." and the like). Per id this is a fixed string, so it lives
 *     in the tokenizer's decode table; only the first token differs, and only
 *     for a continuation (tok_decode keeps its prefix there).
 * Nothing is allocated per word or per piece: the per-call tok_ctx holds the
 * scratch.
 */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

void tok_wp_defaults(tok_tokenizer *t) {
    t->model = TOK_MODEL_WORDPIECE;
    memcpy(t->wp_prefix, "##", 3);
    t->wp_prefix_len = 2;
    t->wp_max_chars = 100;
    t->wp_cleanup = true;
    t->bert_norm = true;
    t->bert_clean_text = true;
    t->bert_chinese = true;
    t->bert_lowercase = true;
    t->bert_strip_accents = true;
    t->strip_leading_space = true;  /* the " " before the first piece */
}

/* ---------------------------------------------------------------------------
 * Character classes
 * ------------------------------------------------------------------------- */

/* Rust's char::is_whitespace (Unicode White_Space). */
static bool is_space(uint32_t cp) { return tok_cp_is_space(cp); }

/* HF's is_control for clean_text: Unicode "other" (Cc Cf Cs Co Cn) except
 * \t \n \r, which count as whitespace. */
static bool is_other(uint32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: return true;
    default: return false;
    }
}

/* HF's is_chinese_char: the CJK Unified Ideographs blocks and compatibility
 * ideographs (its 0x2B920 start, not Unicode's 0x2B820, is HF's). */
static bool is_chinese(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool tok_wp_is_punct(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
               (cp >= 123 && cp <= 126);
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
    }
}

/* ---------------------------------------------------------------------------
 * BertNormalizer
 * ------------------------------------------------------------------------- */

static bool put_cp(tok_buf *out, uint32_t cp) {
    if (!tok_buf_reserve(out, out->n + 4)) return false;
    out->n += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out->p + out->n);
    return true;
}

/* Lowercases (when asked) and appends one character that survived the
 * earlier steps. */
static bool put_lower(const tok_tokenizer *t, tok_buf *out, uint32_t cp) {
    if (!t->bert_lowercase) return put_cp(out, cp);
    if (cp == 0x130) return put_cp(out, 'i') && put_cp(out, 0x307); /* İ: full mapping */
    return put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
}

/* strip_accents, then lowercase, of one character. */
static bool put_stripped(const tok_tokenizer *t, tok_buf *out, uint32_t cp) {
    if (!t->bert_strip_accents || cp < 0xC0) return put_lower(t, out, cp);
    utf8proc_int32_t dec[8];
    int last = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cp, dec, 8, UTF8PROC_DECOMPOSE, &last);
    if (n < 0 || n > 8) return put_lower(t, out, cp);
    for (utf8proc_ssize_t i = 0; i < n; i++) {
        if (utf8proc_category(dec[i]) == UTF8PROC_CATEGORY_MN) continue;
        if (!put_lower(t, out, (uint32_t)dec[i])) return false;
    }
    return true;
}

static int bert_normalize(const tok_tokenizer *t, const char *s, size_t n, tok_buf *out, pdl_error *err) {
    out->n = 0;
    if (!tok_buf_reserve(out, n + 1)) return err_fail(err, "tokenizer: out of memory normalizing text");
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        /* ASCII fast path: no accents, no CJK, only case and controls */
        if (u[i] < 0x80) {
            uint8_t b = u[i++];
            if (t->bert_clean_text) {
                if (b == '\t' || b == '\n' || b == '\r' || b == ' ') {
                    b = ' ';
                } else if (b < 0x20 || b == 0x7F) {
                    continue;
                }
            }
            if (t->bert_lowercase && b >= 'A' && b <= 'Z') b = (uint8_t)(b + 32);
            if (!tok_buf_reserve(out, out->n + 1)) return err_fail(err, "tokenizer: out of memory");
            out->p[out->n++] = (char)b;
            continue;
        }
        size_t cl = tok_utf8_char_len(u + i, n - i);
        if (cl == 0) {
            /* invalid UTF-8 (never seen by HF, whose text is a str): as U+FFFD */
            i++;
            if (t->bert_clean_text) continue;
            if (!tok_buf_reserve(out, out->n + 1)) return err_fail(err, "tokenizer: out of memory");
            out->p[out->n++] = (char)u[i - 1];
            continue;
        }
        uint32_t cp = tok_utf8_decode(u + i, cl);
        i += cl;
        bool ok;
        if (t->bert_clean_text && (cp == 0xFFFD || is_other(cp))) continue;
        if (t->bert_clean_text && is_space(cp)) {
            ok = put_cp(out, ' ');
        } else if (t->bert_chinese && is_chinese(cp)) {
            ok = put_cp(out, ' ') && put_stripped(t, out, cp) && put_cp(out, ' ');
        } else {
            ok = put_stripped(t, out, cp);
        }
        if (!ok) return err_fail(err, "tokenizer: out of memory normalizing text");
    }
    return 0;
}

int tok_wp_normalize(tok_ctx *c, const char *s, size_t n, tok_buf *out) {
    return bert_normalize(c->t, s, n, out, c->err);
}

char *tok_wp_normalize_alloc(const tok_tokenizer *t, const char *s, size_t n, size_t *out_len) {
    tok_buf out = {0};
    pdl_error err;
    if (bert_normalize(t, s, n, &out, &err) != 0 || !tok_buf_reserve(&out, out.n + 1)) {
        free(out.p);
        return NULL;
    }
    out.p[out.n] = '\0';
    *out_len = out.n;
    return out.p;
}

/* ---------------------------------------------------------------------------
 * WordPiece
 * ------------------------------------------------------------------------- */

static bool is_cont_byte(uint8_t b) { return (b & 0xC0) == 0x80; }

/* Pieces of one word, or the unknown id. */
static int wp_word(tok_ctx *c, const char *s, size_t n) {
    const tok_tokenizer *t = c->t;
    if (t->unk_id < 0)
        return err_fail(c->err, "tokenizer: WordPiece needs an unknown token and the vocabulary has none");
    size_t chars = 0;
    for (size_t i = 0; i < n; i++) chars += !is_cont_byte((uint8_t)s[i]);
    if (chars > (size_t)t->wp_max_chars) return tok_ctx_push(c, &t->unk_id, 1) ? 0 : -1;

    size_t saved = c->n_out;
    size_t plen = t->wp_prefix_len;
    if (!tok_buf_reserve(&c->wp, plen + n)) return err_fail(c->err, "tokenizer: out of memory");
    memcpy(c->wp.p, t->wp_prefix, plen);
    for (size_t start = 0; start < n;) {
        /* the subject: the rest of the word, spelled with the prefix after
         * the first piece */
        const char *subj = s + start;
        size_t pre = 0;
        if (start > 0) {
            memcpy(c->wp.p + plen, s + start, n - start);
            subj = c->wp.p;
            pre = plen;
        }
        size_t end = n;
        if (pre + (end - start) > t->wp_max_piece) {
            end = start + (t->wp_max_piece > pre ? t->wp_max_piece - pre : 0);
            while (end > start && end < n && is_cont_byte((uint8_t)s[end])) end--;
        }
        int32_t id = -1;
        while (end > start) {
            id = tok_strmap_get(&t->vocab, subj, pre + (end - start));
            if (id >= 0) break;
            do end--;
            while (end > start && is_cont_byte((uint8_t)s[end]));
        }
        if (id < 0) {
            c->n_out = saved;
            return tok_ctx_push(c, &t->unk_id, 1) ? 0 : -1;
        }
        if (!tok_ctx_push(c, &id, 1)) return -1;
        start = end;
    }
    return 0;
}

int tok_wp_run(tok_ctx *c, const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t word = 0;  /* start of the word in progress */
    for (size_t i = 0; i < n;) {
        size_t cl = tok_utf8_char_len(u + i, n - i);
        uint32_t cp = cl ? tok_utf8_decode(u + i, cl) : 0xFFFD;
        if (cl == 0) cl = 1;
        bool space = is_space(cp), punct = !space && tok_wp_is_punct(cp);
        if (space || punct) {
            if (i > word && wp_word(c, s + word, i - word) != 0) return -1;
            if (punct && wp_word(c, s + i, cl) != 0) return -1;
            word = i + cl;
        }
        i += cl;
    }
    if (n > word && wp_word(c, s + word, n - word) != 0) return -1;
    return 0;
}

/* ---------------------------------------------------------------------------
 * Decoding
 * ------------------------------------------------------------------------- */

bool tok_wp_is_continuation(const tok_tokenizer *t, int32_t id) {
    return t->wp_prefix_len > 0 && t->piece_len[id] >= t->wp_prefix_len &&
           memcmp(t->pool + t->piece_off[id], t->wp_prefix, t->wp_prefix_len) == 0;
}

/* s[0..n) with every `from` replaced by `to` (no longer than from), in place. */
static uint32_t replace_all(char *s, uint32_t n, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    uint32_t w = 0;
    for (uint32_t i = 0; i < n;) {
        if (i + fl <= n && memcmp(s + i, from, fl) == 0) {
            memmove(s + w, to, tl);
            w += (uint32_t)tl;
            i += (uint32_t)fl;
        } else {
            s[w++] = s[i++];
        }
    }
    return w;
}

uint32_t tok_wp_decoded_piece(const tok_tokenizer *t, int32_t id, char *out) {
    const char *p = t->pool + t->piece_off[id];
    uint32_t n = t->piece_len[id], w = 0;
    if (tok_wp_is_continuation(t, id)) {
        memcpy(out, p + t->wp_prefix_len, n - t->wp_prefix_len);
        w = n - t->wp_prefix_len;
    } else {
        out[0] = ' ';
        memcpy(out + 1, p, n);
        w = n + 1;
    }
    if (!t->wp_cleanup) return w;
    /* decoders/wordpiece.rs's cleanup, in its order */
    static const char *const pairs[][2] = {
        {" .", "."},     {" ?", "?"},     {" !", "!"},           {" ,", ","},
        {" ' ", "'"},    {" n't", "n't"}, {" 'm", "'m"},         {" do not", " don't"},
        {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) w = replace_all(out, w, pairs[i][0], pairs[i][1]);
    return w;
}
