/*
 * bpe.c - byte-level BPE (GPT-2 and its descendants): one pre-tokenized word
 * to ids.
 *
 * What it is for: the model step of GPT-2, Llama 3, Qwen, StarCoder, Falcon
 * and MPT tokenizers. A word's bytes are shown as GPT-2's 256 visible
 * characters (printable Latin-1 bytes as themselves, the other 68 as
 * U+0100..U+0143 in byte order); each character starts as its own piece,
 * then the adjacent pair with the lowest merge rank is merged, leftmost first
 * among equal ranks, until no pair has a merge - Hugging Face's BPE
 * (Word::merge_all). With ignore_merges (Llama 3) a word that is a piece of
 * its own is taken whole. A character missing from the vocabulary becomes
 * the unknown id, or is dropped when there is none, as HF does.
 *
 * Speed: words are short, so a word of up to SHORT_WORD characters keeps
 * the rank of each adjacent pair in an array and rescans it per merge
 * (two merge lookups per merge); longer words (runs of spaces, long
 * identifiers) use a heap, O(n log n). Each encode call memoizes word ->
 * ids in a bounded table (prose repeats its words), allocated once per call
 * and cleared when full.
 *
 * What it is not for: splitting text into words (pretok.c).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

#define SHORT_WORD 64
#define CACHE_MAX_WORD 64     /* longer words are not memoized */
#define CACHE_MIN_TEXT 256    /* shorter texts do without a memo */
#define CACHE_MAX_SLOTS (1u << 16)

/* ---------------------------------------------------------------------------
 * GPT-2's byte <-> character map
 * ------------------------------------------------------------------------- */

uint32_t tok_bl_cp(uint8_t b) {
    if (b <= 32) return 256u + b;
    if (b >= 127 && b <= 160) return 289u + (b - 127u);
    if (b == 173) return 323;
    return b;
}

int tok_bl_byte(uint32_t cp) {
    if (cp < 256) {
        if (cp <= 32 || (cp >= 127 && cp <= 160) || cp == 173) return -1;
        return (int)cp;
    }
    if (cp <= 288) return (int)(cp - 256);
    if (cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    return -1;
}

size_t tok_bl_map(const char *s, size_t n, char *out) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = tok_bl_cp((uint8_t)s[i]);
        if (cp < 0x80) {
            out[w++] = (char)cp;
        } else {
            out[w++] = (char)(0xC0 | (cp >> 6));
            out[w++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return w;
}

void tok_bpe_init_bytes(tok_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char ch = (char)b, m[2];
        size_t l = tok_bl_map(&ch, 1, m);
        t->bl_byte_id[b] = tok_strmap_get(&t->vocab, m, l);
    }
}

/* ---------------------------------------------------------------------------
 * The word memo
 * ------------------------------------------------------------------------- */

struct tok_wc_slot {
    uint64_t hash;     /* 0: empty */
    uint32_t key_off;  /* into keys */
    uint32_t ids_off;  /* into ids */
    uint16_t key_len;
    uint16_t n_ids;
};

static bool cache_init(tok_ctx *c) {
    uint32_t slots = 256;
    while (slots < CACHE_MAX_SLOTS && slots < c->text_len / 16) slots *= 2;
    c->cache.slots = calloc(slots, sizeof *c->cache.slots);
    if (!c->cache.slots) return false;
    c->cache.mask = slots - 1;
    return true;
}

static void cache_clear(tok_word_cache *wc) {
    memset(wc->slots, 0, (wc->mask + 1) * sizeof *wc->slots);
    wc->used = 0;
    wc->keys_n = wc->ids_n = 0;
}

static uint64_t word_hash(const char *s, size_t n) {
    uint64_t h = tok_hash_bytes(s, n);
    return h ? h : 1;
}

static const struct tok_wc_slot *cache_get(const tok_word_cache *wc, const char *s, size_t n,
                                           uint64_t h) {
    for (uint32_t i = (uint32_t)h & wc->mask;; i = (i + 1) & wc->mask) {
        const struct tok_wc_slot *sl = &wc->slots[i];
        if (sl->hash == 0) return NULL;
        if (sl->hash == h && sl->key_len == n && memcmp(wc->keys + sl->key_off, s, n) == 0) return sl;
    }
}

static void cache_put(tok_word_cache *wc, const char *s, size_t n, uint64_t h, const int32_t *ids,
                      size_t n_ids) {
    if (wc->used >= (wc->mask + 1) / 2) cache_clear(wc);
    if (wc->keys_n + n > wc->keys_cap) {
        size_t cap = wc->keys_cap ? wc->keys_cap * 2 : 4096;
        while (cap < wc->keys_n + n) cap *= 2;
        char *k = realloc(wc->keys, cap);
        if (!k) return;  /* the memo is only an optimization */
        wc->keys = k;
        wc->keys_cap = cap;
    }
    if (wc->ids_n + n_ids > wc->ids_cap) {
        size_t cap = wc->ids_cap ? wc->ids_cap * 2 : 1024;
        while (cap < wc->ids_n + n_ids) cap *= 2;
        int32_t *p = realloc(wc->ids, cap * sizeof *p);
        if (!p) return;
        wc->ids = p;
        wc->ids_cap = cap;
    }
    if (wc->keys_n + n > UINT32_MAX || wc->ids_n + n_ids > UINT32_MAX) {
        cache_clear(wc);
        return;
    }
    uint32_t i = (uint32_t)h & wc->mask;
    while (wc->slots[i].hash != 0) i = (i + 1) & wc->mask;
    memcpy(wc->keys + wc->keys_n, s, n);
    memcpy(wc->ids + wc->ids_n, ids, n_ids * sizeof *ids);
    wc->slots[i] = (struct tok_wc_slot){h, (uint32_t)wc->keys_n, (uint32_t)wc->ids_n, (uint16_t)n,
                                        (uint16_t)n_ids};
    wc->keys_n += n;
    wc->ids_n += n_ids;
    wc->used++;
}

/* ---------------------------------------------------------------------------
 * Merging
 * ------------------------------------------------------------------------- */

static bool reserve_syms(tok_ctx *c, size_t n) {
    if (n <= c->sym_cap) return true;
    size_t cap = c->sym_cap ? c->sym_cap : 64;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(c->sym_id, cap * sizeof *a);
    if (!a) return false;
    c->sym_id = a;
    int32_t *r = realloc(c->sym_rank, cap * sizeof *r);
    if (!r) return false;
    c->sym_rank = r;
    int32_t *s = realloc(c->sym_res, cap * sizeof *s);
    if (!s) return false;
    c->sym_res = s;
    c->sym_cap = cap;
    return true;
}

/* rank[i] / res[i] for the pair (ids[i], ids[i+1]); INT32_MAX when no merge. */
static void pair_rank(const tok_tokenizer *t, const int32_t *ids, int32_t i, int32_t *rank,
                      int32_t *res) {
    const tok_pair_slot *m = tok_pairmap_get(&t->merges, ids[i], ids[i + 1]);
    rank[i] = m ? m->rank : INT32_MAX;
    res[i] = m ? m->result : -1;
}

/* Merges ids[0..n) in place; returns the new count. */
static size_t merge_short(const tok_tokenizer *t, int32_t *ids, int32_t *rank, int32_t *res, size_t n) {
    if (n < 2) return n;
    for (int32_t i = 0; i + 1 < (int32_t)n; i++) pair_rank(t, ids, i, rank, res);
    for (;;) {
        int32_t best = -1, best_rank = INT32_MAX;
        for (int32_t i = 0; i + 1 < (int32_t)n; i++)
            if (rank[i] < best_rank) best_rank = rank[i], best = i;
        if (best < 0) return n;
        ids[best] = res[best];
        /* drop symbol best+1 and the pair that started at it */
        size_t tail = n - (size_t)best - 2;
        memmove(ids + best + 1, ids + best + 2, tail * sizeof *ids);
        memmove(rank + best + 1, rank + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof *rank);
        memmove(res + best + 1, res + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof *res);
        n--;
        if (best > 0) pair_rank(t, ids, best - 1, rank, res);
        if ((size_t)best + 1 < n) pair_rank(t, ids, best, rank, res);
    }
}

typedef struct long_sym {
    int32_t id, prev, next;
    uint32_t len;  /* characters; 0 when merged away */
} long_sym;

typedef struct long_cand {
    int32_t rank, left, right, result;
    uint32_t size;  /* left.len + right.len when pushed */
} long_cand;

static bool cand_before(const long_cand *a, const long_cand *b) {
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->left < b->left;
}

static bool heap_push(tok_ctx *c, size_t *n, long_cand x) {
    if (*n == c->heap_cap) {
        size_t cap = c->heap_cap ? c->heap_cap * 2 : 256;
        long_cand *h = realloc(c->heap, cap * sizeof *h);
        if (!h) return false;
        c->heap = h;
        c->heap_cap = cap;
    }
    long_cand *h = c->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&x, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = x;
    return true;
}

static long_cand heap_pop(tok_ctx *c, size_t *n) {
    long_cand *h = c->heap;
    long_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && cand_before(&h[child + 1], &h[child])) child++;
        if (!cand_before(&h[child], &last)) break;
        h[i] = h[child];
        i = child;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static bool try_long_pair(tok_ctx *c, size_t *hn, const long_sym *sym, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    const tok_pair_slot *m = tok_pairmap_get(&c->t->merges, sym[l].id, sym[r].id);
    if (!m) return true;
    return heap_push(c, hn, (long_cand){m->rank, l, r, m->result, sym[l].len + sym[r].len});
}

/* The heap version of merge_short for long words. */
static long merge_long(tok_ctx *c, int32_t *ids, size_t n) {
    if (n > c->long_syms_cap) {
        long_sym *s = realloc(c->long_syms, n * sizeof *s);
        if (!s) return -1;
        c->long_syms = s;
        c->long_syms_cap = n;
    }
    long_sym *sym = c->long_syms;
    for (size_t i = 0; i < n; i++)
        sym[i] = (long_sym){ids[i], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 1};
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (!try_long_pair(c, &hn, sym, (int32_t)i, (int32_t)i + 1)) return -1;
    while (hn > 0) {
        long_cand x = heap_pop(c, &hn);
        long_sym *l = &sym[x.left], *r = &sym[x.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != x.size) continue;
        l->id = x.result;
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = x.left;
        r->len = 0;
        if (!try_long_pair(c, &hn, sym, l->prev, x.left) || !try_long_pair(c, &hn, sym, x.left, l->next))
            return -1;
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = sym[i].next) ids[k++] = sym[i].id;
    return (long)k;
}

long tok_bpe_merge(tok_ctx *c, int32_t *ids, size_t n, int path) {
    if (path == 1 || (path == 0 && n <= SHORT_WORD)) {
        if (!reserve_syms(c, n)) return -1;
        return (long)merge_short(c->t, ids, c->sym_rank, c->sym_res, n);
    }
    return merge_long(c, ids, n);
}

/* ---------------------------------------------------------------------------
 * A word
 * ------------------------------------------------------------------------- */

int tok_bpe_word(tok_ctx *c, const char *s, size_t n) {
    const tok_tokenizer *t = c->t;
    tok_word_cache *wc = &c->cache;
    uint64_t h = 0;
    bool memo = n <= CACHE_MAX_WORD && c->text_len >= CACHE_MIN_TEXT;
    if (memo) {
        if (!wc->slots && !cache_init(c)) return err_fail(c->err, "tokenizer: out of memory");
        h = word_hash(s, n);
        const struct tok_wc_slot *sl = cache_get(wc, s, n, h);
        if (sl) return tok_ctx_push(c, wc->ids + sl->ids_off, sl->n_ids) ? 0 : -1;
    }
    if (t->ignore_merges) {
        if (2 * n > c->mapped_cap) {
            char *m = realloc(c->mapped, 2 * n);
            if (!m) return err_fail(c->err, "tokenizer: out of memory");
            c->mapped = m;
            c->mapped_cap = 2 * n;
        }
        size_t ml = tok_bl_map(s, n, c->mapped);
        int32_t id = tok_strmap_get(&t->vocab, c->mapped, ml);
        if (id >= 0) {
            if (memo) cache_put(wc, s, n, h, &id, 1);
            return tok_ctx_push(c, &id, 1) ? 0 : -1;
        }
    }
    if (!reserve_syms(c, n)) return err_fail(c->err, "tokenizer: out of memory");
    int32_t *ids = c->sym_id;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->bl_byte_id[(uint8_t)s[i]];
        if (id < 0) id = t->unk_id;
        if (id >= 0) ids[k++] = id;
    }
    long got = tok_bpe_merge(c, ids, k, 0);
    if (got < 0) return err_fail(c->err, "tokenizer: out of memory");
    k = (size_t)got;
    if (memo) cache_put(wc, s, n, h, ids, k);
    return tok_ctx_push(c, ids, k) ? 0 : -1;
}

void tok_bpe_ctx_free(tok_ctx *c) {
    free(c->sym_id);
    free(c->sym_rank);
    free(c->sym_res);
    free(c->mapped);
    free(c->long_syms);
    free(c->heap);
    free(c->cache.slots);
    free(c->cache.keys);
    free(c->cache.ids);
}
