/*
 * tokenizer.c - the model-independent half of the tokenizer: building the
 * tables after a loader filled the pieces, the encode driver (added tokens,
 * normalization, then the model's encoder, with the per-call state in a
 * tok_ctx), whole and streamed decode.
 *
 * What it is not for: reading GGUF (tok_gguf.c) or tokenizer.json (tok_hf.c),
 * the text stages themselves (added.c, normalize.c, pretok.c) or the merge
 * loops (spm.c, bpe.c).
 *
 * Decoding turns each id into bytes (tok_tokenizer.dec_*) and repairs the
 * byte stream into valid UTF-8: each maximal invalid subsequence (Unicode's
 * "maximal subpart" rule, as in Python's errors="replace" and Rust's
 * from_utf8_lossy) becomes one U+FFFD. For every valid run of byte tokens this
 * equals Hugging Face's ByteFallback decoder; for invalid runs HF writes one
 * U+FFFD per byte of the whole run, which no streaming decoder can reproduce
 * without holding every byte run to its end. Whole decode and the stream share
 * one state machine, so their outputs agree by construction.
 */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

/* ---------------------------------------------------------------------------
 * UTF-8
 * ------------------------------------------------------------------------- */

/* Total length of the character a lead byte starts, or 0 when it cannot start
 * one (a continuation byte, C0, C1, F5..FF). */
static int utf8_lead_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Whether b may follow at position pos (1..3) of a character led by lead
 * (Unicode Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF). */
static bool utf8_cont_ok(uint8_t lead, int pos, uint8_t b) {
    if (pos == 1) {
        switch (lead) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        default: break;
        }
    }
    return b >= 0x80 && b <= 0xBF;
}

uint32_t tok_utf8_decode(const uint8_t *s, size_t len) {
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

size_t tok_utf8_char_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    int len = utf8_lead_len(s[0]);
    if (len == 0 || (size_t)len > n) return 0;
    for (int i = 1; i < len; i++)
        if (!utf8_cont_ok(s[0], i, s[i])) return 0;
    return (size_t)len;
}

int tok_parse_byte_piece(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

/* The repair state shared by tok_decode and tok_stream. */
typedef struct utf8_repair {
    uint8_t pend[4];   /* bytes of an incomplete but so far valid character */
    int n_pend, need;  /* held bytes, and the character's total length */
    bool started;      /* text has come out: the leading-space strip is over */
    bool strip;        /* drop one " " at the very start */
} utf8_repair;

static size_t repair_emit(utf8_repair *r, char *out, const char *s, size_t n) {
    if (!r->started) {
        r->started = true;
        if (r->strip && s[0] == ' ') {
            s++;
            n--;
        }
    }
    memcpy(out, s, n);
    return n;
}

/* Feeds n bytes; writes at most 3 bytes of output per input byte. */
static size_t repair_feed(utf8_repair *r, char *out, const char *s, size_t n) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        if (r->n_pend > 0) {
            if (utf8_cont_ok(r->pend[0], r->n_pend, b)) {
                r->pend[r->n_pend++] = b;
                if (r->n_pend == r->need) {
                    w += repair_emit(r, out + w, (const char *)r->pend, (size_t)r->need);
                    r->n_pend = 0;
                }
                continue;
            }
            /* the held bytes are a maximal invalid subpart; b starts afresh */
            w += repair_emit(r, out + w, REPLACEMENT, 3);
            r->n_pend = 0;
        }
        int len = utf8_lead_len(b);
        if (len == 1) {
            w += repair_emit(r, out + w, (const char *)&s[i], 1);
        } else if (len == 0) {
            w += repair_emit(r, out + w, REPLACEMENT, 3);
        } else {
            r->pend[0] = b;
            r->n_pend = 1;
            r->need = len;
        }
    }
    return w;
}

/* Held bytes of an incomplete character become one U+FFFD. */
static size_t repair_finish(utf8_repair *r, char *out) {
    if (r->n_pend == 0) return 0;
    r->n_pend = 0;
    return repair_emit(r, out, REPLACEMENT, 3);
}

/* ---------------------------------------------------------------------------
 * Building
 * ------------------------------------------------------------------------- */

tok_tokenizer *tok_new(int32_t n_vocab) {
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->n_vocab = n_vocab;
    size_t n = n_vocab > 0 ? (size_t)n_vocab : 1;
    t->piece_off = calloc(n, sizeof *t->piece_off);
    t->piece_len = calloc(n, sizeof *t->piece_len);
    t->type = calloc(n, sizeof *t->type);
    t->dec_off = calloc(n, sizeof *t->dec_off);
    t->dec_len = calloc(n, sizeof *t->dec_len);
    if (!t->piece_off || !t->piece_len || !t->type || !t->dec_off || !t->dec_len) {
        tok_free(t);
        return NULL;
    }
    t->model = TOK_MODEL_SPM;
    t->bos_id = t->eos_id = t->unk_id = -1;
    for (int i = 0; i < TOK_FIM_COUNT; i++) t->fim[i] = -1;
    for (int i = 0; i < 256; i++) t->byte_id[i] = t->bl_byte_id[i] = -1;
    return t;
}

int tok_set_pieces(tok_tokenizer *t, const char *const *ptrs, const uint32_t *lens,
                   pdl_error *err) {
    size_t total = 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (ptrs[i]) total += (size_t)lens[i] + 1;
        if (total > UINT32_MAX) return err_fail(err, "tokenizer: pieces exceed 4 GiB");
    }
    free(t->pool);
    t->pool = malloc(total);
    if (!t->pool) return err_fail(err, "tokenizer: out of memory for %zu bytes of pieces", total);
    size_t off = 0;
    t->pool[off++] = '\0';  /* holes point at this empty string */
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!ptrs[i]) {
            t->piece_off[i] = 0;
            t->piece_len[i] = 0;
            t->type[i] = TOK_TYPE_MISSING;
            continue;
        }
        t->piece_off[i] = (uint32_t)off;
        t->piece_len[i] = lens[i];
        memcpy(t->pool + off, ptrs[i], lens[i]);
        off += lens[i];
        t->pool[off++] = '\0';
        if (t->type[i] == TOK_TYPE_MISSING) t->type[i] = TOK_TYPE_NORMAL;
    }
    t->pool_len = off;
    return 0;
}

/* Appends the decoded form of piece s (SPM: "▁" -> " ") at out. */
static uint32_t spm_decoded_piece(const char *s, uint32_t n, char *out) {
    uint32_t w = 0;
    for (uint32_t i = 0; i < n;) {
        if (i + TOK_SPM_SPACE_LEN <= n && memcmp(s + i, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN) == 0) {
            out[w++] = ' ';
            i += TOK_SPM_SPACE_LEN;
        } else {
            out[w++] = s[i++];
        }
    }
    return w;
}

/* Whether piece s has a "▁" preceded by something other than "▁". */
static bool spm_space_after_other(const char *s, uint32_t n) {
    uint32_t i = 0;
    while (i + TOK_SPM_SPACE_LEN <= n && memcmp(s + i, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN) == 0)
        i += TOK_SPM_SPACE_LEN;
    for (; i + TOK_SPM_SPACE_LEN <= n; i++)
        if (memcmp(s + i, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN) == 0) return true;
    return false;
}

/* Appends the decoded form of byte-level piece s: its characters mapped
 * back to bytes, or (some character outside the map, e.g. an added token
 * holding a raw space) the piece as it is, as HF's ByteLevel decoder does. */
static uint32_t bl_decoded_piece(const char *s, uint32_t n, char *out) {
    uint32_t w = 0;
    for (uint32_t i = 0; i < n;) {
        size_t cl = tok_utf8_char_len((const uint8_t *)s + i, n - i);
        int b = cl ? tok_bl_byte(tok_utf8_decode((const uint8_t *)s + i, cl)) : -1;
        if (b < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[w++] = (char)b;
        i += (uint32_t)cl;
    }
    return w;
}

int tok_finish(tok_tokenizer *t, pdl_error *err) {
    if (!tok_strmap_init(&t->vocab, (size_t)t->n_vocab, t->pool, t->piece_off, t->piece_len))
        return err_fail(err, "tokenizer: out of memory for the vocabulary table");
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] != TOK_TYPE_MISSING) tok_strmap_insert(&t->vocab, i);
    tok_fim_detect(t);

    if (t->model == TOK_MODEL_SPM) {
        /* Word-by-word merging is exact when "▁" is a piece of its own and no
         * piece holds a "▁" after another character (see spm.c). */
        t->spm_split_words = tok_strmap_get(&t->vocab, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN) >= 0;
        for (int32_t i = 0; t->spm_split_words && i < t->n_vocab; i++)
            if (t->type[i] != TOK_TYPE_MISSING &&
                spm_space_after_other(t->pool + t->piece_off[i], t->piece_len[i]))
                t->spm_split_words = false;
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_id[b] = tok_strmap_get(&t->vocab, name, 6);
        }
    } else if (t->model == TOK_MODEL_BPE) {
        tok_bpe_init_bytes(t);
    } else {
        t->wp_max_piece = 0;
        for (int32_t i = 0; i < t->n_vocab; i++)
            if (t->piece_len[i] > t->wp_max_piece) t->wp_max_piece = t->piece_len[i];
    }

    /* WordPiece adds a " " in front of each word-initial piece */
    size_t dec_cap = t->pool_len + (t->model == TOK_MODEL_WORDPIECE ? (size_t)t->n_vocab : 0);
    if (dec_cap > UINT32_MAX) return err_fail(err, "tokenizer: decode strings exceed 4 GiB");
    t->dec_pool = malloc(dec_cap ? dec_cap : 1);
    if (!t->dec_pool) return err_fail(err, "tokenizer: out of memory for decode strings");
    uint32_t off = 0;
    t->max_dec_len = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const char *piece = t->pool + t->piece_off[i];
        uint32_t n = t->piece_len[i];
        uint32_t w = 0;
        int v;
        if (t->type[i] == TOK_TYPE_MISSING || t->type[i] == TOK_TYPE_UNUSED)
            w = 0;  /* nothing, even when special tokens are kept */
        else if (t->type[i] == TOK_TYPE_BYTE && (v = tok_parse_byte_piece(piece, n)) >= 0)
            t->dec_pool[off] = (char)v, w = 1;
        else if (t->model == TOK_MODEL_BPE)
            w = bl_decoded_piece(piece, n, t->dec_pool + off);
        else if (t->model == TOK_MODEL_WORDPIECE)
            w = tok_wp_decoded_piece(t, i, t->dec_pool + off);
        else
            w = spm_decoded_piece(piece, n, t->dec_pool + off);
        t->dec_off[i] = off;
        t->dec_len[i] = w;
        off += w;
        if (w > t->max_dec_len) t->max_dec_len = w;
        /* a WordPiece continuation in first place decodes as its piece */
        if (t->model == TOK_MODEL_WORDPIECE && n > t->max_dec_len) t->max_dec_len = n;
    }
    return 0;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    tok_strmap_free(&t->vocab);
    tok_pairmap_free(&t->merges);
    tok_trie_free(&t->added_raw);
    tok_trie_free(&t->added_norm);
    tok_pre_free(t);
    free(t->pool);
    free(t->piece_off);
    free(t->piece_len);
    free(t->type);
    free(t->scores);
    free(t->dec_pool);
    free(t->dec_off);
    free(t->dec_len);
    free(t);
}

/* ---------------------------------------------------------------------------
 * Queries
 * ------------------------------------------------------------------------- */

int tok_vocab_size(const tok_tokenizer *t) { return t->n_vocab; }
int32_t tok_bos_id(const tok_tokenizer *t) { return t->bos_id; }
int32_t tok_eos_id(const tok_tokenizer *t) { return t->eos_id; }
int32_t tok_unk_id(const tok_tokenizer *t) { return t->unk_id; }
bool tok_add_bos(const tok_tokenizer *t) { return t->add_bos && t->bos_id >= 0; }
bool tok_add_eos(const tok_tokenizer *t) { return t->add_eos && t->eos_id >= 0; }

const char *tok_id_to_piece(const tok_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || t->type[id] == TOK_TYPE_MISSING) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->piece_len[id];
    return t->pool + t->piece_off[id];
}

const char *tok_id_bytes(const tok_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->dec_len[id];
    return t->dec_pool + t->dec_off[id];
}

int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece, size_t len) {
    return tok_strmap_get(&t->vocab, piece, len);
}

bool tok_is_control(const tok_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return false;
    return t->type[id] == TOK_TYPE_CONTROL || t->type[id] == TOK_TYPE_UNKNOWN;
}

bool tok_skipped_by_default(const tok_tokenizer *t, int32_t id) { return tok_is_control(t, id); }

bool tok_is_byte_level(const tok_tokenizer *t) { return t->model == TOK_MODEL_BPE; }

/* ---------------------------------------------------------------------------
 * Encode
 * ------------------------------------------------------------------------- */

bool tok_buf_reserve(tok_buf *b, size_t n) {
    if (n <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

bool tok_ctx_reserve(tok_ctx *c, size_t more) {
    if (c->n_out + more <= c->out_cap) return true;
    size_t cap = c->out_cap ? c->out_cap : 64;
    while (cap < c->n_out + more) cap *= 2;
    int32_t *p = realloc(c->out, cap * sizeof *p);
    if (!p) {
        err_fail(c->err, "tokenizer: out of memory for %zu ids", cap);
        return false;
    }
    c->out = p;
    c->out_cap = cap;
    return true;
}

bool tok_ctx_push(tok_ctx *c, const int32_t *ids, size_t n) {
    if (!tok_ctx_reserve(c, n)) return false;
    memcpy(c->out + c->n_out, ids, n * sizeof *ids);
    c->n_out += n;
    return true;
}

static void ctx_free(tok_ctx *c) {
    free(c->out);
    free(c->norm.p);
    free(c->spm.p);
    free(c->wp.p);
    free(c->ucs);
    if (c->md) pcre2_match_data_free(c->md);
    for (int i = 0; i < TOK_MAX_PRE_STEPS; i++) {
        free(c->step_buf[i].p);
        free(c->step_back[i]);
        free(c->spans[i]);
    }
    tok_bpe_ctx_free(c);
}

/* SPM normalization of one fragment: "▁" in front (when the tokenizer adds
 * one there), every " " as "▁". out has room for 3 * (len + 1) bytes. */
static size_t spm_normalize(const tok_tokenizer *t, const char *text, size_t len, bool prefix,
                            char *out) {
    size_t w = 0;
    if (len == 0) return 0;
    if (prefix) {
        memcpy(out, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN);
        w += TOK_SPM_SPACE_LEN;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ' && t->escape_spaces) {
            memcpy(out + w, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN);
            w += TOK_SPM_SPACE_LEN;
        } else {
            out[w++] = text[i];
        }
    }
    return w;
}

/* Normalized text between added tokens, into the model. */
static int model_fragment(tok_ctx *c, const char *s, size_t n, size_t offset) {
    (void)offset;
    const tok_tokenizer *t = c->t;
    if (n == 0) return 0;
    if (t->model == TOK_MODEL_BPE) return tok_pre_run(c, s, n);
    if (t->model == TOK_MODEL_WORDPIECE) return tok_wp_run(c, s, n);
    if (t->ignore_merges) {
        int32_t id = tok_strmap_get(&t->vocab, s, n);
        if (id >= 0) return tok_ctx_push(c, &id, 1) ? 0 : -1;
    }
    if (!tok_ctx_reserve(c, n)) return -1;
    size_t got = 0;
    if (tok_spm_encode(t, s, n, c->out + c->n_out, &got, c->err) != 0) return -1;
    c->n_out += got;
    return 0;
}

/* Raw text between added tokens: normalize, then cut out the added tokens
 * that match normalized text. */
static int raw_fragment(tok_ctx *c, const char *s, size_t n, size_t offset) {
    const tok_tokenizer *t = c->t;
    if (t->model == TOK_MODEL_SPM) {
        if (!tok_buf_reserve(&c->spm, 3 * (n + 1))) return err_fail(c->err, "tokenizer: out of memory");
        bool prefix = t->add_space_prefix && (!t->space_prefix_first || offset == 0) &&
                      !(t->space_prefix_if_absent && n > 0 &&
                        ((s[0] == ' ' && t->escape_spaces) ||
                         (n >= TOK_SPM_SPACE_LEN && memcmp(s, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN) == 0)));
        c->spm.n = spm_normalize(t, s, n, prefix, c->spm.p);
        s = c->spm.p;
        n = c->spm.n;
    } else if (t->model == TOK_MODEL_WORDPIECE && t->bert_norm) {
        if (tok_wp_normalize(c, s, n, &c->norm) != 0) return -1;
        s = c->norm.p;
        n = c->norm.n;
    } else if (t->norm != TOK_NORM_NONE) {
        if (tok_normalize(c, t->norm, s, n, &c->norm) != 0) return -1;
        s = c->norm.p;
        n = c->norm.n;
    }
    if (t->added_norm.n_entries > 0)
        return tok_added_split(c, &t->added_norm, s, n, c->parse_special, model_fragment);
    return model_fragment(c, s, n, offset);
}

int tok_encode_ex(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
                  bool parse_special, int32_t **ids, size_t *n_ids, pdl_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (len > UINT32_MAX / 8) return err_fail(err, "tokenizer: text of %zu bytes is too long", len);
    tok_ctx c = {.t = t, .err = err, .parse_special = parse_special, .text_len = len};
    if (t->n_pre > 0) {
        c.md = pcre2_match_data_create(1, NULL);
        if (!c.md) return err_fail(err, "tokenizer: out of memory for regex match data");
    }
    int rc = -1;
    if (!tok_ctx_reserve(&c, len / 2 + 8)) goto done;
    if (add_special && tok_add_bos(t) && !tok_ctx_push(&c, &t->bos_id, 1)) goto done;
    if (tok_added_split(&c, &t->added_raw, text, len, parse_special, raw_fragment) != 0) goto done;
    if (add_special && tok_add_eos(t) && !tok_ctx_push(&c, &t->eos_id, 1)) goto done;
    int32_t *shrunk = realloc(c.out, (c.n_out ? c.n_out : 1) * sizeof *c.out);
    if (shrunk) c.out = shrunk;
    *ids = c.out;
    *n_ids = c.n_out;
    c.out = NULL;
    rc = 0;
done:
    ctx_free(&c);
    return rc;
}

int tok_encode(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
               int32_t **ids, size_t *n_ids, pdl_error *err) {
    return tok_encode_ex(t, text, len, add_special, false, ids, n_ids, err);
}

/* ---------------------------------------------------------------------------
 * Decode
 * ------------------------------------------------------------------------- */

char *tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, pdl_error *err) {
    return tok_decode_ex(t, ids, n_ids, false, NULL, err);
}

char *tok_decode_n(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, size_t *len,
                   pdl_error *err) {
    return tok_decode_ex(t, ids, n_ids, false, len, err);
}

/* The bytes id contributes (before UTF-8 repair). */
static uint32_t dec_len_of(const tok_tokenizer *t, int32_t id, bool keep_special) {
    return !keep_special && tok_skipped_by_default(t, id) ? 0 : t->dec_len[id];
}

/* The bytes id contributes when the output so far is `started` or not:
 * HF's WordPiece decoder leaves the first token as it is, so a continuation
 * there keeps its "##". */
static const char *dec_bytes_of(const tok_tokenizer *t, int32_t id, bool keep_special, bool started,
                                uint32_t *len) {
    *len = dec_len_of(t, id, keep_special);
    if (t->model == TOK_MODEL_WORDPIECE && !started && *len > 0 && tok_wp_is_continuation(t, id)) {
        *len = t->piece_len[id];
        return t->pool + t->piece_off[id];
    }
    return t->dec_pool + t->dec_off[id];
}

char *tok_decode_ex(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, bool keep_special,
                    size_t *len, pdl_error *err) {
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            err_fail(err, "tokenizer: id %d at position %zu is outside the vocabulary (0..%d)",
                     (int)ids[i], i, t->n_vocab - 1);
            return NULL;
        }
        total += dec_len_of(t, ids[i], keep_special);
    }
    total += t->wp_prefix_len;  /* a WordPiece continuation in first place */
    char *out = malloc(3 * total + 1);
    if (!out) {
        err_fail(err, "tokenizer: out of memory decoding %zu ids", n_ids);
        return NULL;
    }
    utf8_repair r = {.strip = t->strip_leading_space};
    size_t w = 0;
    for (size_t i = 0; i < n_ids; i++) {
        uint32_t n;
        const char *p = dec_bytes_of(t, ids[i], keep_special, r.started, &n);
        w += repair_feed(&r, out + w, p, n);
    }
    w += repair_finish(&r, out + w);
    out[w] = '\0';
    if (len) *len = w;
    return out;
}

struct tok_stream {
    const tok_tokenizer *t;
    bool keep_special;
    utf8_repair r;
    char *buf;  /* [cap]: the text of the last push or flush */
    size_t len, cap;
};

tok_stream *tok_stream_new(const tok_tokenizer *t) { return tok_stream_new_ex(t, false); }

tok_stream *tok_stream_new_ex(const tok_tokenizer *t, bool keep_special) {
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->keep_special = keep_special;
    s->r.strip = t->strip_leading_space;
    /* one push: up to 3 output bytes per input byte, plus U+FFFD for bytes
     * held from before */
    s->cap = 3 * (size_t)t->max_dec_len + 3 + 1;
    s->buf = malloc(s->cap);
    if (!s->buf) {
        free(s);
        return NULL;
    }
    s->buf[0] = '\0';
    return s;
}

const char *tok_stream_push(tok_stream *s, int32_t id) {
    const tok_tokenizer *t = s->t;
    size_t w = 0;
    if (id >= 0 && id < t->n_vocab) {
        uint32_t n;
        const char *p = dec_bytes_of(t, id, s->keep_special, s->r.started, &n);
        w = repair_feed(&s->r, s->buf, p, n);
    }
    s->buf[w] = '\0';
    s->len = w;
    return s->buf;
}

void tok_stream_prime(tok_stream *s, const int32_t *ids, size_t n_ids) {
    for (size_t i = 0; i < n_ids; i++) tok_stream_push(s, ids[i]);
    s->buf[0] = '\0';
    s->len = 0;
}

const char *tok_stream_flush(tok_stream *s) {
    size_t w = repair_finish(&s->r, s->buf);
    s->buf[w] = '\0';
    s->len = w;
    return s->buf;
}

size_t tok_stream_len(const tok_stream *s) { return s->len; }

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->buf);
    free(s);
}
