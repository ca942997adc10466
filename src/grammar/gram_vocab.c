/*
 * gram_vocab.c - a model's vocabulary as the grammar sees it: the bytes each
 * token adds to the text, which tokens end generation, and the token trie
 * (tokens sorted by their bytes, stored in preorder with subtree ends) that
 * the mask computation walks with pruning.
 *
 * What it is not for: tokenizing (src/tokenizer/); a vocabulary is built
 * once per model and shared read-only by every grammar and matcher.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->len);
    free(v->kind);
    free(v->end_ids);
    free(v->order);
    free(v->nodes);
    free(v->long_ids);
    free(v);
}

int gram_vocab_size(const gram_vocab *v) { return v->n_vocab; }
size_t gram_mask_words(const gram_vocab *v) { return (size_t)v->n_words; }
int gram_vocab_trie_nodes(const gram_vocab *v) { return v->n_nodes; }

const char *gram_vocab_token(const gram_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = v->len[id];
    return v->bytes + v->off[id];
}

bool gram_vocab_is_end(const gram_vocab *v, int32_t id) {
    for (int32_t i = 0; i < v->n_end; i++)
        if (v->end_ids[i] == id) return true;
    return false;
}

/* qsort's comparator needs the pool: tokens are sorted through a context. */
static const gram_vocab *sort_vocab;

static int cmp_token_bytes(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    const gram_vocab *v = sort_vocab;
    uint32_t la = v->len[a], lb = v->len[b];
    int c = memcmp(v->bytes + v->off[a], v->bytes + v->off[b], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

/* Sorts the text tokens and lays out the trie in preorder. */
static int build_trie(gram_vocab *v, pdl_error *err) {
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) n += v->kind[i] == GRAM_TOKEN_TEXT;
    v->n_tokens = n;
    v->order = malloc((size_t)(n ? n : 1) * sizeof *v->order);
    if (!v->order) return err_fail(err, "grammar vocabulary: out of memory");
    n = 0;
    for (int32_t i = 0; i < v->n_vocab; i++)
        if (v->kind[i] == GRAM_TOKEN_TEXT) v->order[n++] = i;
    pthread_mutex_lock(&sort_mu);
    sort_vocab = v;
    qsort(v->order, (size_t)n, sizeof *v->order, cmp_token_bytes);
    sort_vocab = NULL;
    pthread_mutex_unlock(&sort_mu);

    /* nodes: one per distinct non-empty prefix, plus the root */
    size_t cap = 1;
    for (int32_t k = 0; k < n; k++) {
        uint32_t l = v->len[v->order[k]];
        if (k == 0) {
            cap += l;
            continue;
        }
        const char *a = v->bytes + v->off[v->order[k - 1]], *b = v->bytes + v->off[v->order[k]];
        uint32_t la = v->len[v->order[k - 1]], m = 0;
        while (m < la && m < l && a[m] == b[m]) m++;
        cap += l - m;
    }
    if (cap > INT32_MAX - 2) return err_fail(err, "grammar vocabulary: trie too large");
    v->n_nodes = (int32_t)cap;
    v->nodes = calloc(cap + 1, sizeof *v->nodes);
    uint32_t maxlen = 0;
    for (int32_t k = 0; k < n; k++)
        if (v->len[v->order[k]] > maxlen) maxlen = v->len[v->order[k]];
    if (maxlen > 60000) return err_fail(err, "grammar vocabulary: a token of %u bytes", maxlen);
    int32_t *path = malloc((size_t)(maxlen + 1) * sizeof *path); /* node at each depth of the current token */
    if (!v->nodes || !path) {
        free(path);
        return err_fail(err, "grammar vocabulary: out of memory");
    }
    gram_trie_node *t = v->nodes;
    int32_t nn = 1, depth = 0; /* nodes so far; depth of the current path */
    path[0] = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = v->order[k];
        const char *b = v->bytes + v->off[id];
        uint32_t l = v->len[id], m = 0;
        while (prev && m < prev_len && m < l && prev[m] == b[m]) m++;
        /* close the nodes deeper than the common prefix */
        while (depth > (int32_t)m) t[path[depth--]].end = nn;
        for (uint32_t d = m; d < l; d++) {
            int32_t node = nn++;
            t[node].byte = (uint8_t)b[d];
            t[node].depth = (uint16_t)(d + 1);
            t[node].tok = k;
            path[++depth] = node;
        }
        t[path[depth]].nend++;
        prev = b;
        prev_len = l;
    }
    while (depth >= 0) t[path[depth--]].end = nn;
    t[nn].tok = n;
    t[nn].end = nn + 1;
    v->max_depth = (int32_t)maxlen;
    free(path);

    /* short_max: the smallest length >= 16 with at most GRAM_LONG_TOKENS longer tokens */
    int32_t *count = calloc((size_t)maxlen + 2, sizeof *count);
    if (!count) return err_fail(err, "grammar vocabulary: out of memory");
    for (int32_t k = 0; k < n; k++) count[v->len[v->order[k]]]++;
    int32_t longer = n, k_max = 0;
    for (k_max = 0; k_max <= (int32_t)maxlen; k_max++) {
        longer -= count[k_max];
        if (k_max >= 16 && longer <= GRAM_LONG_TOKENS) break;
    }
    free(count);
    v->short_max = k_max > (int32_t)maxlen ? (int32_t)maxlen : k_max;
    v->n_long = 0;
    v->long_ids = malloc((size_t)(longer > 0 ? longer : 1) * sizeof *v->long_ids);
    if (!v->long_ids) return err_fail(err, "grammar vocabulary: out of memory");
    for (int32_t k = 0; k < n; k++)
        if ((int32_t)v->len[v->order[k]] > v->short_max) v->long_ids[v->n_long++] = v->order[k];
    return 0;
}

static int vocab_alloc(gram_vocab **out, int n_vocab, size_t pool, pdl_error *err) {
    gram_vocab *v = calloc(1, sizeof *v);
    if (!v) return err_fail(err, "grammar vocabulary: out of memory");
    v->n_vocab = n_vocab;
    v->n_words = (n_vocab + 63) / 64;
    v->bytes = malloc(pool ? pool : 1);
    v->off = calloc((size_t)n_vocab, sizeof *v->off);
    v->len = calloc((size_t)n_vocab, sizeof *v->len);
    v->kind = calloc((size_t)n_vocab, 1);
    if (!v->bytes || !v->off || !v->len || !v->kind) {
        gram_vocab_free(v);
        return err_fail(err, "grammar vocabulary: out of memory");
    }
    *out = v;
    return 0;
}

static int set_end_ids(gram_vocab *v, const int32_t *ids, int n, int32_t eos, pdl_error *err) {
    v->end_ids = malloc((size_t)(n + 1) * sizeof *v->end_ids);
    if (!v->end_ids) return err_fail(err, "grammar vocabulary: out of memory");
    v->n_end = 0;
    for (int i = -1; i < n; i++) {
        int32_t id = i < 0 ? eos : ids[i];
        if (id < 0) continue;
        if (id >= v->n_vocab) return err_fail(err, "grammar vocabulary: end token %d is outside the vocabulary", id);
        if (!gram_vocab_is_end(v, id)) v->end_ids[v->n_end++] = id;
    }
    return 0;
}

/* The end ids (plus tokenizer_eos when >= 0) and the trie of a vocabulary
 * whose bytes are filled in; *out = v, or v is freed on failure. An end
 * token is never text, even when its piece decodes to some. */
static int vocab_finish(gram_vocab *v, const int32_t *end_ids, int n_end_ids, int32_t tokenizer_eos, gram_vocab **out,
                        pdl_error *err) {
    if (set_end_ids(v, end_ids, n_end_ids, tokenizer_eos, err) != 0) {
        gram_vocab_free(v);
        return -1;
    }
    for (int32_t i = 0; i < v->n_end; i++)
        if (v->kind[v->end_ids[i]] == GRAM_TOKEN_TEXT) v->kind[v->end_ids[i]] = GRAM_TOKEN_SPECIAL;
    if (build_trie(v, err) != 0) {
        gram_vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

/* A token's kind: a control token, text, or never allowed (no bytes, or a
 * byte 0xFF: no UTF-8 text holds one, and grammars write 0xFF for their
 * control tokens' places, grammar.c). */
static uint8_t text_kind(const char *b, size_t l, bool control) {
    if (l == 0) return GRAM_TOKEN_NONE;
    if (control) return GRAM_TOKEN_SPECIAL;
    return memchr(b, 0xFF, l) ? GRAM_TOKEN_NONE : GRAM_TOKEN_TEXT;
}

int gram_vocab_new(gram_vocab **out, int n_vocab, const char *const *bytes, const uint32_t *lens,
                   const bool *special, const int32_t *end_ids, int n_end_ids, pdl_error *err) {
    *out = NULL;
    if (n_vocab <= 0) return err_fail(err, "grammar vocabulary: empty");
    size_t pool = 0;
    for (int i = 0; i < n_vocab; i++) pool += bytes[i] ? lens[i] : 0;
    gram_vocab *v;
    if (vocab_alloc(&v, n_vocab, pool, err) != 0) return -1;
    size_t w = 0;
    for (int i = 0; i < n_vocab; i++) {
        uint32_t l = bytes[i] ? lens[i] : 0;
        memcpy(v->bytes + w, bytes[i] ? bytes[i] : "", l);
        v->off[i] = (uint32_t)w;
        v->len[i] = l;
        w += l;
        v->kind[i] = text_kind(bytes[i], l, special && special[i]);
    }
    return vocab_finish(v, end_ids, n_end_ids, -1, out, err);
}

int gram_vocab_from_tokenizer(gram_vocab **out, const struct tok_tokenizer *tok, int n_vocab, const int32_t *end_ids,
                              int n_end_ids, pdl_error *err) {
    *out = NULL;
    int n_tok = tok_vocab_size(tok);
    if (n_vocab <= 0) n_vocab = n_tok;
    if (n_vocab < n_tok)
        return err_fail(err, "grammar vocabulary: %d logits for a tokenizer of %d tokens", n_vocab, n_tok);
    size_t pool = 0;
    for (int32_t i = 0; i < n_tok; i++) {
        size_t l;
        tok_id_bytes(tok, i, &l);
        pool += l;
    }
    gram_vocab *v;
    if (vocab_alloc(&v, n_vocab, pool, err) != 0) return -1;
    size_t w = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t l = 0;
        const char *b = i < n_tok ? tok_id_bytes(tok, i, &l) : "";
        memcpy(v->bytes + w, b, l);
        v->off[i] = (uint32_t)w;
        v->len[i] = (uint32_t)l;
        w += l;
        v->kind[i] = text_kind(b, l, tok_is_control(tok, i));
    }
    return vocab_finish(v, end_ids, n_end_ids, tok_eos_id(tok), out, err);
}
