/*
 * spm.c - SentencePiece-style BPE encoding with byte fallback.
 *
 * What it is for: turning normalized text ("▁Hello▁world") into ids the way
 * llama.cpp (GGUF, merge by score) and Hugging Face tokenizers (tokenizer.json,
 * merge by rank) do for Llama 2 / Mistral style vocabularies. What it is not
 * for: normalization (tokenizer.c) or byte-level BPE.
 *
 * The text is split into UTF-8 characters (each invalid byte on its own), then
 * the best adjacent pair is merged until none is left:
 *   - by score: the concatenation must be a vocabulary piece; best = highest
 *     piece score (tokenizer.ggml.scores);
 *   - by rank: the pair must be a tokenizer.json merge; best = lowest rank.
 * Ties go to the leftmost pair. Candidates sit in a binary heap; a candidate
 * whose symbols changed since it was pushed is recognised by its length sum
 * (a symbol only grows by absorbing its right neighbour, which then dies) and
 * dropped, as in llama.cpp. A symbol left without an id becomes its bytes'
 * <0xXX> ids, or the unknown id when those are missing. Everything is
 * allocated once per call: O(n log n) time, O(n) memory.
 *
 * When no vocabulary piece has a "▁" after some other character (true of the
 * Llama 2, Mistral and stories vocabularies; tok_finish checks), no merge can
 * cross the point before a "▁" that follows a non-"▁", so the text is merged
 * word by word there: the same result, with a heap that stays small.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

typedef struct spm_symbol {
    uint32_t start, len;  /* bytes of the text; len 0: merged away */
    int32_t prev, next;   /* neighbours in the list, -1 at the ends */
    int32_t id;           /* vocabulary id of the text, -1 when none */
} spm_symbol;

typedef struct spm_candidate {
    double key;           /* larger merges first: score, or -rank */
    int32_t left, right;  /* symbol indices */
    uint32_t size;        /* left.len + right.len when pushed */
    int32_t result;       /* id of the merged piece */
} spm_candidate;

typedef struct spm_heap {
    spm_candidate *items;
    size_t n, cap;
} spm_heap;

/* a before b: better key, then leftmost. */
static bool cand_before(const spm_candidate *a, const spm_candidate *b) {
    if (a->key != b->key) return a->key > b->key;
    return a->left < b->left;
}

static bool heap_push(spm_heap *h, spm_candidate c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        spm_candidate *items = realloc(h->items, cap * sizeof *items);
        if (!items) return false;
        h->items = items;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &h->items[parent])) break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = c;
    return true;
}

static spm_candidate heap_pop(spm_heap *h) {
    spm_candidate top = h->items[0];
    spm_candidate last = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n) break;
        if (child + 1 < h->n && cand_before(&h->items[child + 1], &h->items[child])) child++;
        if (!cand_before(&h->items[child], &last)) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (h->n > 0) h->items[i] = last;
    return top;
}

/* Pushes the merge of symbols l and r (adjacent) when one exists. */
static bool try_pair(const tok_tokenizer *t, const char *text, const spm_symbol *sym,
                     int32_t l, int32_t r, spm_heap *h) {
    if (l < 0 || r < 0) return true;
    spm_candidate c = {.left = l, .right = r, .size = sym[l].len + sym[r].len};
    if (t->merge_by_rank) {
        const tok_pair_slot *m = tok_pairmap_get(&t->merges, sym[l].id, sym[r].id);
        if (!m) return true;
        c.key = -(double)m->rank;
        c.result = m->result;
    } else {
        int32_t id = tok_strmap_get(&t->vocab, text + sym[l].start, c.size);
        if (id < 0) return true;
        c.key = t->scores ? t->scores[id] : 0.0;
        c.result = id;
    }
    return heap_push(h, c);
}

/* Splits text into symbols. With byte_fallback (tokenizer.json), a character
 * that is not in the vocabulary becomes one symbol per byte carrying its
 * <0xXX> id before any merge, and unknown characters may fuse into one; in
 * score mode it stays one symbol and falls back after merging (llama.cpp). */
static int32_t split_symbols(const tok_tokenizer *t, const char *text, size_t begin, size_t end,
                             spm_symbol *sym) {
    int32_t ns = 0;
    bool prev_unk = false;
    for (size_t i = begin; i < end;) {
        size_t clen = tok_utf8_char_len((const uint8_t *)text + i, end - i);
        if (clen == 0) clen = 1;
        int32_t id = tok_strmap_get(&t->vocab, text + i, clen);
        if (t->merge_by_rank && id < 0) {
            bool have_bytes = t->byte_fallback;
            for (size_t k = 0; have_bytes && k < clen; k++)
                have_bytes = t->byte_id[(uint8_t)text[i + k]] >= 0;
            if (have_bytes) {
                for (size_t k = 0; k < clen; k++) {
                    sym[ns] = (spm_symbol){(uint32_t)(i + k), 1, ns - 1, ns + 1,
                                           t->byte_id[(uint8_t)text[i + k]]};
                    ns++;
                }
                prev_unk = false;
                i += clen;
                continue;
            }
            if (t->fuse_unk && prev_unk) {
                sym[ns - 1].len += (uint32_t)clen;
                i += clen;
                continue;
            }
            id = t->unk_id;
            prev_unk = true;
        } else {
            prev_unk = false;
        }
        sym[ns] = (spm_symbol){(uint32_t)i, (uint32_t)clen, ns - 1, ns + 1, id};
        ns++;
        i += clen;
    }
    if (ns > 0) sym[ns - 1].next = -1;
    return ns;
}

/* The ids of a symbol that is not a vocabulary piece. */
static size_t fallback_ids(const tok_tokenizer *t, const char *s, size_t len, int32_t *out) {
    size_t n = 0;
    for (size_t k = 0; k < len; k++) {
        int32_t id = t->byte_id[(uint8_t)s[k]];
        if (id < 0) {
            /* sentencepiece without byte pieces: the whole symbol is unknown */
            if (t->unk_id < 0) return 0;
            out[0] = t->unk_id;
            return 1;
        }
        out[n++] = id;
    }
    return n;
}

/* Merges the symbols of text[begin..end) and appends their ids to out;
 * returns how many, or -1 when out of memory. sym has room for end - begin. */
static long encode_segment(const tok_tokenizer *t, const char *text, size_t begin, size_t end,
                           spm_symbol *sym, spm_heap *heap, int32_t *out) {
    int32_t ns = split_symbols(t, text, begin, end, sym);
    heap->n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        if (!try_pair(t, text, sym, i, i + 1, heap)) return -1;
    while (heap->n > 0) {
        spm_candidate c = heap_pop(heap);
        spm_symbol *l = &sym[c.left], *r = &sym[c.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != c.size) continue;
        l->len += r->len;
        l->id = c.result;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.left;
        r->len = 0;
        if (!try_pair(t, text, sym, l->prev, c.left, heap) ||
            !try_pair(t, text, sym, c.left, l->next, heap))
            return -1;
    }
    long k = 0;
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
        if (sym[i].id >= 0)
            out[k++] = sym[i].id;
        else
            k += (long)fallback_ids(t, text + sym[i].start, sym[i].len, out + k);
    }
    return k;
}

static bool is_space_at(const char *text, size_t i, size_t n) {
    return i + TOK_SPM_SPACE_LEN <= n && memcmp(text + i, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN) == 0;
}

/* Where the segment starting at begin ends: before the next "▁" that follows
 * something other than "▁" (only when the vocabulary allows it). */
static size_t segment_end(const tok_tokenizer *t, const char *text, size_t begin, size_t n) {
    if (!t->spm_split_words) return n;
    for (size_t i = begin + 1; i < n; i++)
        if ((uint8_t)text[i] == 0xE2 && is_space_at(text, i, n) &&
            !(i >= begin + TOK_SPM_SPACE_LEN && is_space_at(text, i - TOK_SPM_SPACE_LEN, n)))
            return i;
    return n;
}

int tok_spm_encode(const tok_tokenizer *t, const char *text, size_t n, int32_t *out,
                   size_t *n_out, pdl_error *err) {
    *n_out = 0;
    if (n == 0) return 0;
    if (n > UINT32_MAX / 2) return err_fail(err, "tokenizer: text of %zu bytes is too long", n);
    spm_symbol *sym = malloc(n * sizeof *sym);
    spm_heap heap = {0};
    if (!sym) return err_fail(err, "tokenizer: out of memory for %zu bytes of text", n);
    size_t k = 0;
    for (size_t begin = 0; begin < n;) {
        size_t end = segment_end(t, text, begin, n);
        long got = encode_segment(t, text, begin, end, sym, &heap, out + k);
        if (got < 0) {
            free(heap.items);
            free(sym);
            return err_fail(err, "tokenizer: out of memory for %zu bytes of text", n);
        }
        k += (size_t)got;
        begin = end;
    }
    *n_out = k;
    free(heap.items);
    free(sym);
    return 0;
}
