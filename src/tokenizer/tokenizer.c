/*
 * tokenizer.c - the model-independent half of the tokenizer: building the
 * tables after a loader filled the pieces, normalization and special tokens
 * around encode, whole and streamed decode.
 *
 * What it is not for: reading GGUF (tok_gguf.c) or tokenizer.json (tok_hf.c),
 * or the merge loop itself (spm.c).
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
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    return t;
}

int tok_set_pieces(tok_tokenizer *t, const char *const *ptrs, const uint32_t *lens,
                   pdl_error *err) {
    size_t total = 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (ptrs[i]) total += (size_t)lens[i] + 1;
        if (total > UINT32_MAX) return pdl_fail(err, "tokenizer: pieces exceed 4 GiB");
    }
    free(t->pool);
    t->pool = malloc(total);
    if (!t->pool) return pdl_fail(err, "tokenizer: out of memory for %zu bytes of pieces", total);
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

int tok_finish(tok_tokenizer *t, pdl_error *err) {
    if (!tok_strmap_init(&t->vocab, (size_t)t->n_vocab, t->pool, t->piece_off, t->piece_len))
        return pdl_fail(err, "tokenizer: out of memory for the vocabulary table");
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] != TOK_TYPE_MISSING) tok_strmap_insert(&t->vocab, i);

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

    t->dec_pool = malloc(t->pool_len ? t->pool_len : 1);
    if (!t->dec_pool) return pdl_fail(err, "tokenizer: out of memory for decode strings");
    uint32_t off = 0;
    t->max_dec_len = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const char *piece = t->pool + t->piece_off[i];
        uint32_t n = t->piece_len[i];
        uint32_t w = 0;
        switch ((tok_type)t->type[i]) {
        case TOK_TYPE_MISSING:
        case TOK_TYPE_UNKNOWN:
        case TOK_TYPE_CONTROL:
            break;  /* skipped, as HF's skip_special_tokens=True */
        case TOK_TYPE_BYTE: {
            int v = tok_parse_byte_piece(piece, n);
            if (v >= 0) {
                t->dec_pool[off] = (char)v;
                w = 1;
                break;
            }
            w = spm_decoded_piece(piece, n, t->dec_pool + off);
            break;
        }
        default:
            w = spm_decoded_piece(piece, n, t->dec_pool + off);
            break;
        }
        t->dec_off[i] = off;
        t->dec_len[i] = w;
        off += w;
        if (w > t->max_dec_len) t->max_dec_len = w;
    }
    return 0;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    tok_strmap_free(&t->vocab);
    tok_pairmap_free(&t->merges);
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

int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece, size_t len) {
    return tok_strmap_get(&t->vocab, piece, len);
}

bool tok_is_control(const tok_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return false;
    return t->type[id] == TOK_TYPE_CONTROL || t->type[id] == TOK_TYPE_UNKNOWN;
}

/* ---------------------------------------------------------------------------
 * Encode
 * ------------------------------------------------------------------------- */

/* SPM normalization: "▁" in front of non-empty text, every " " as "▁".
 * out has room for 3 * (len + 1) bytes. */
static size_t spm_normalize(const tok_tokenizer *t, const char *text, size_t len, char *out) {
    size_t w = 0;
    if (len == 0) return 0;
    if (t->add_space_prefix) {
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

int tok_encode(const tok_tokenizer *t, const char *text, size_t len, bool add_special,
               int32_t **ids, size_t *n_ids, pdl_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (len > UINT32_MAX / 8) return pdl_fail(err, "tokenizer: text of %zu bytes is too long", len);
    char *norm = malloc(3 * (len + 1));
    if (!norm) return pdl_fail(err, "tokenizer: out of memory for %zu bytes of text", len);
    size_t n = spm_normalize(t, text, len, norm);
    int32_t *out = malloc((n + 2) * sizeof *out);
    if (!out) {
        free(norm);
        return pdl_fail(err, "tokenizer: out of memory for %zu bytes of text", len);
    }
    size_t k = 0;
    if (add_special && tok_add_bos(t)) out[k++] = t->bos_id;
    size_t got = 0;
    int rc = 0;
    switch (t->model) {
    case TOK_MODEL_SPM:
        rc = tok_spm_encode(t, norm, n, out + k, &got, err);
        break;
    }
    free(norm);
    if (rc != 0) {
        free(out);
        return -1;
    }
    k += got;
    if (add_special && tok_add_eos(t)) out[k++] = t->eos_id;
    int32_t *shrunk = realloc(out, (k ? k : 1) * sizeof *out);
    *ids = shrunk ? shrunk : out;
    *n_ids = k;
    return 0;
}

/* ---------------------------------------------------------------------------
 * Decode
 * ------------------------------------------------------------------------- */

char *tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, pdl_error *err) {
    return tok_decode_n(t, ids, n_ids, NULL, err);
}

char *tok_decode_n(const tok_tokenizer *t, const int32_t *ids, size_t n_ids, size_t *len,
                   pdl_error *err) {
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            pdl_fail(err, "tokenizer: id %d at position %zu is outside the vocabulary (0..%d)",
                     (int)ids[i], i, t->n_vocab - 1);
            return NULL;
        }
        total += t->dec_len[ids[i]];
    }
    char *out = malloc(3 * total + 1);
    if (!out) {
        pdl_fail(err, "tokenizer: out of memory decoding %zu ids", n_ids);
        return NULL;
    }
    utf8_repair r = {.strip = t->strip_leading_space};
    size_t w = 0;
    for (size_t i = 0; i < n_ids; i++)
        w += repair_feed(&r, out + w, t->dec_pool + t->dec_off[ids[i]], t->dec_len[ids[i]]);
    w += repair_finish(&r, out + w);
    out[w] = '\0';
    if (len) *len = w;
    return out;
}

struct tok_stream {
    const tok_tokenizer *t;
    utf8_repair r;
    char *buf;  /* [cap]: the text of the last push or flush */
    size_t len, cap;
};

tok_stream *tok_stream_new(const tok_tokenizer *t) {
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
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
    if (id >= 0 && id < t->n_vocab)
        w = repair_feed(&s->r, s->buf, t->dec_pool + t->dec_off[id], t->dec_len[id]);
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
