/*
 * gram_mask.c - which tokens may come next: the token classification cache
 * and the mask of a matcher's current state.
 *
 * A walk from the stack "DFA state s above an unknown frame" sorts tokens:
 *   accepted:  some path reads all the token's bytes without leaving s's
 *              rule frame (valid whatever the stack below holds),
 *   uncertain: no such path, but one completes s's rule after part of the
 *              token and the next byte may follow the rule (FOLLOW): the
 *              real stack decides,
 *   rejected:  the rest.
 * Short tokens (at most vocab->short_max bytes, nearly all of them) are
 * sorted by one walk over the token trie, shared by every state of a walk
 * class (states alike on every string of that length: the positions of a
 * long length-bounded string, say). The walk prunes a subtree as soon as no
 * path is alive, and while the state is a plain byte state (inside strings,
 * literals) it moves one element along with a single table load per node.
 * The few long tokens are sorted per state by a walk over their list.
 * Both are computed on first use under the grammar's mutex and shared by
 * every matcher of the grammar.
 *
 * A matcher's mask is the union of its stacks' accepted sets, plus the
 * uncertain tokens that a walk with the real stack accepts, plus the
 * grammar's specials and the end tokens when accepting. Masks of recent
 * states are kept per matcher: inside a JSON string every token leads back
 * to the same state.
 *
 * What it is not for: applying the mask inside sampling (the sampler calls
 * gram_mask_apply on the rows it samples).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

static inline bool follow_has(const uint8_t *f, uint8_t b) { return f[b >> 3] >> (b & 7) & 1; }
static inline void set_bit(uint64_t *bits, int32_t id) { bits[id >> 6] |= 1ull << (id & 63); }
static inline bool get_bit(const uint64_t *bits, int32_t id) { return bits[id >> 6] >> (id & 63) & 1; }

bool gram_levels_reserve(gram_levels *l, int32_t depth) {
    if (depth < l->cap) return true;
    int32_t c = l->cap ? l->cap : 64;
    while (c <= depth) c *= 2;
    int32_t *lo = realloc(l->lo, (size_t)c * sizeof *lo);
    if (lo) l->lo = lo;
    int32_t *n = realloc(l->n, (size_t)c * sizeof *n);
    if (n) l->n = n;
    uint8_t *f = realloc(l->flags, (size_t)c);
    if (f) l->flags = f;
    if (!lo || !n || !f) return false;
    l->cap = c;
    return true;
}

void gram_levels_free(gram_levels *l) {
    gram_elems_free(&l->e);
    free(l->lo);
    free(l->n);
    free(l->flags);
    memset(l, 0, sizeof *l);
}

void gram_class_free(gram_class *c) {
    if (!c) return;
    free(c->acc);
    free(c->acc_bits);
    free(c->unc);
    free(c);
}

static bool unc_push(gram_grammar *g, int32_t *n_unc, const int32_t *ids, int32_t n, int32_t max_len) {
    if (*n_unc + n > g->walk_unc_cap) {
        int32_t c = g->walk_unc_cap ? g->walk_unc_cap : 1024;
        while (c < *n_unc + n) c *= 2;
        int32_t *p = realloc(g->walk_unc, (size_t)c * sizeof *p);
        if (!p) return false;
        g->walk_unc = p;
        g->walk_unc_cap = c;
    }
    /* only the tokens this walk sorts (a subtree also holds longer ones) */
    const uint32_t *len = g->vocab->len;
    for (int32_t k = 0; k < n; k++)
        if ((int32_t)len[ids[k]] <= max_len) g->walk_unc[(*n_unc)++] = ids[k];
    return true;
}

enum { LV_SINGLE = 1, LV_UNC = 2, LV_ENDED = 4 };

/* ---------------------------------------------------------------------------
 * Walking a sorted list of tokens (long tokens; uncertain tokens at mask time)
 * ------------------------------------------------------------------------- */

enum { TOK_REJ = 0, TOK_ACC = 1, TOK_UNC = 2 };

typedef void (*tok_result_fn)(void *user, int32_t id, int result);

/* Walks ids[0..n) (in trie order) from the stack `start`, sharing the sets
 * of common prefixes between consecutive tokens. follow: NULL when the stack
 * is real (then a token is accepted or rejected); else the FOLLOW set of the
 * rule above GRAM_BOTTOM (then a token may also be uncertain, as in the trie
 * walk). skip(user, id): a token already decided. */
static bool list_walk(gram_stepper *st, gram_levels *lv, const gram_vocab *v, const int32_t *ids, int32_t n,
                      gram_elem start, const uint8_t *follow, bool (*skip)(void *, int32_t), tok_result_fn out,
                      void *user) {
    if (!gram_levels_reserve(lv, v->max_depth + 1) || !gram_elems_reserve(&lv->e, 64)) return false;
    lv->e.e[0] = start;
    lv->lo[0] = 0;
    lv->n[0] = 1;
    lv->flags[0] = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    int32_t valid = 0;      /* levels 0..valid hold the sets after prev's first bytes */
    int32_t dead_at = -1;   /* prev stopped with an empty set at this depth, */
    int dead_res = TOK_REJ; /* with this result for every token sharing dead_at + 1 bytes */
    for (int32_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        if (skip && skip(user, id)) continue;
        const char *b = v->bytes + v->off[id];
        uint32_t len = v->len[id], l = 0;
        if (prev)
            while (l < prev_len && l < len && prev[l] == b[l]) l++;
        if (dead_at >= 0 && (int32_t)l > dead_at) {
            out(user, id, dead_res);
            continue;
        }
        int32_t d = (int32_t)l < valid ? (int32_t)l : valid;
        int res = TOK_ACC;
        dead_at = -1;
        for (; d < (int32_t)len; d++) {
            uint8_t pf = lv->flags[d], by = (uint8_t)b[d];
            bool u = follow && ((pf & LV_UNC) || ((pf & LV_ENDED) && follow_has(follow, by)));
            bool end_here = false;
            gram_step_byte(st, lv->e.e + lv->lo[d], lv->n[d], by, &end_here);
            int32_t base = lv->lo[d] + lv->n[d];
            if (st->oom || !gram_elems_reserve(&lv->e, base + st->res.n)) return false;
            memcpy(lv->e.e + base, st->res.e, (size_t)st->res.n * sizeof *lv->e.e);
            lv->lo[d + 1] = base;
            lv->n[d + 1] = st->res.n;
            lv->flags[d + 1] = (uint8_t)((u ? LV_UNC : 0) | (end_here && follow ? LV_ENDED : 0));
            if (st->res.n == 0 && d + 1 < (int32_t)len) {
                /* nothing alive: the rest of the token cannot change the result */
                res = u ? TOK_UNC : (end_here && follow && follow_has(follow, (uint8_t)b[d + 1])) ? TOK_UNC : TOK_REJ;
                dead_at = d + 1;
                dead_res = res;
                break;
            }
        }
        if (dead_at < 0) {
            uint8_t f = lv->flags[len];
            res = (lv->n[len] > 0 || (f & LV_ENDED)) ? TOK_ACC : (f & LV_UNC) ? TOK_UNC : TOK_REJ;
            valid = (int32_t)len;
        } else {
            valid = dead_at;
        }
        out(user, id, res);
        prev = b;
        prev_len = len;
    }
    return true;
}

/* ---------------------------------------------------------------------------
 * Classifications
 * ------------------------------------------------------------------------- */

/* Packs the walk's results (g->walk_bits, g->walk_unc) into a class. */
static gram_class *pack_class(gram_grammar *g, int32_t n_acc, int32_t n_unc) {
    const gram_vocab *v = g->vocab;
    uint64_t *bits = g->walk_bits;
    gram_class *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->n_acc = n_acc;
    if (n_acc <= v->n_words / 2) {
        /* sparse: a list is smaller than the bitset and quicker to apply */
        c->acc = malloc((size_t)(n_acc ? n_acc : 1) * sizeof *c->acc);
        if (!c->acc) {
            gram_class_free(c);
            return NULL;
        }
        int32_t w = 0;
        for (int32_t k = 0; k < v->n_words && w < n_acc; k++)
            for (uint64_t x = bits[k]; x; x &= x - 1) c->acc[w++] = k * 64 + __builtin_ctzll(x);
    } else {
        c->acc_bits = malloc((size_t)v->n_words * sizeof *c->acc_bits);
        if (!c->acc_bits) {
            gram_class_free(c);
            return NULL;
        }
        memcpy(c->acc_bits, bits, (size_t)v->n_words * sizeof *bits);
    }
    c->n_unc = n_unc;
    if (n_unc) {
        c->unc = malloc((size_t)n_unc * sizeof *c->unc);
        if (!c->unc) {
            gram_class_free(c);
            return NULL;
        }
        memcpy(c->unc, g->walk_unc, (size_t)n_unc * sizeof *c->unc);
    }
    return c;
}

/* The trie walk over short tokens from (s, GRAM_BOTTOM). Caller holds g->mu.
 * Per depth d the walk keeps the set after the path's first d bytes: one
 * element in st/nd (LV_SINGLE), or several in g->walk_buf[lo .. lo + cnt);
 * LV_UNC: tokens through here with no live path are uncertain; LV_ENDED: a
 * path completed s's rule exactly here. */
static gram_class *classify_short(gram_grammar *g, int32_t s) {
    const gram_vocab *v = g->vocab;
    const gram_auto *a = &g->a;
    const size_t C = (size_t)a->n_classes;
    const uint8_t *follow = a->follow[a->state_rule[s]];
    const int32_t K = v->short_max;
    uint64_t *bits = g->walk_bits;
    memset(bits, 0, (size_t)v->n_words * sizeof *bits);
    int32_t n_acc = 0, n_unc = 0;
    bool ok = true;

    gram_elems *buf = &g->walk_buf;
    gram_stepper *step = &g->walk_step;
    size_t D = (size_t)K + 2;
    int32_t *st = malloc(D * sizeof *st), *nd = malloc(D * sizeof *nd);
    int32_t *lo = malloc(D * sizeof *lo), *cnt = malloc(D * sizeof *cnt), *top = malloc(D * sizeof *top);
    uint8_t *fl = malloc(D);
    if (!st || !nd || !lo || !cnt || !top || !fl) {
        ok = false;
        goto out;
    }
    gram_pool_truncate(&g->walk_pool, 0);
    st[0] = s;
    nd[0] = GRAM_BOTTOM;
    fl[0] = LV_SINGLE;
    top[0] = 0;

    const gram_trie_node *T = v->nodes;
    const int32_t *order = v->order;
    const uint8_t *cls = a->byte_class;
    const int32_t *wtrans = a->wtrans;
    const int32_t N = v->n_nodes;

    for (int32_t i = 1; i < N;) {
        const gram_trie_node *x = &T[i];
        int32_t d = x->depth, p = d - 1;
        if (d > K) { /* only long tokens below */
            i = x->end;
            continue;
        }
        uint8_t b = x->byte, pf = fl[p];
        if (pf == LV_SINGLE) {
            /* the fast path: one stack, a plain byte state */
            int32_t w = wtrans[(size_t)st[p] * C + cls[b]];
            if (w < 0) {
                i = x->end;
                continue;
            }
            if (w & 1) {
                st[d] = w >> 1;
                nd[d] = nd[p];
                fl[d] = LV_SINGLE;
                top[d] = top[p];
                /* the token ending here (if any) without a branch: order[tok]
                 * is always a real token of the subtree, set with a zero mask
                 * when none ends here */
                int32_t id = order[x->tok];
                bits[id >> 6] |= (uint64_t)(x->nend != 0) << (id & 63);
                for (int32_t k = x->tok + 1, e = x->tok + x->nend; k < e; k++) {
                    id = order[k];
                    bits[id >> 6] |= 1ull << (id & 63);
                }
                n_acc += x->nend;
                i++;
                continue;
            }
        }
        bool u = (pf & LV_UNC) || ((pf & LV_ENDED) && follow_has(follow, b));
        bool end_here = false;
        if (pf & LV_SINGLE) {
            gram_elem one = {st[p], nd[p]};
            gram_step_byte(step, &one, 1, b, &end_here);
        } else {
            gram_step_byte(step, buf->e + lo[p], cnt[p], b, &end_here);
        }
        if (step->oom) {
            ok = false;
            break;
        }
        int32_t n_new = step->res.n;

        /* tokens that end at this node */
        int32_t t0 = x->tok, t1 = t0 + x->nend;
        if (n_new > 0 || end_here) {
            for (int32_t k = t0; k < t1; k++) {
                int32_t id = order[k];
                bits[id >> 6] |= 1ull << (id & 63);
            }
            n_acc += t1 - t0;
        } else if (u && !unc_push(g, &n_unc, order + t0, t1 - t0, K)) {
            ok = false;
            break;
        }
        if (n_new == 0) {
            /* nothing alive below: the subtree is uncertain or rejected */
            if (u) {
                if (!unc_push(g, &n_unc, order + t1, T[x->end].tok - t1, K)) {
                    ok = false;
                    break;
                }
            } else if (end_here) {
                for (int32_t c = i + 1; c < x->end; c = T[c].end)
                    if (follow_has(follow, T[c].byte) &&
                        !unc_push(g, &n_unc, order + T[c].tok, T[T[c].end].tok - T[c].tok, K)) {
                        ok = false;
                        break;
                    }
            }
            i = x->end;
            continue;
        }
        uint8_t f = (uint8_t)((u ? LV_UNC : 0) | (end_here ? LV_ENDED : 0));
        if (n_new == 1) {
            st[d] = step->res.e[0].state;
            nd[d] = step->res.e[0].node;
            fl[d] = f | LV_SINGLE;
            top[d] = top[p];
        } else {
            if (!gram_elems_reserve(buf, top[p] + n_new)) {
                ok = false;
                break;
            }
            memcpy(buf->e + top[p], step->res.e, (size_t)n_new * sizeof *buf->e);
            lo[d] = top[p];
            cnt[d] = n_new;
            top[d] = top[p] + n_new;
            fl[d] = f;
        }
        i++;
    }

out:
    free(st);
    free(nd);
    free(lo);
    free(cnt);
    free(top);
    free(fl);
    gram_pool_truncate(&g->walk_pool, 0);
    return ok ? pack_class(g, n_acc, n_unc) : NULL;
}

typedef struct long_sink {
    gram_grammar *g;
    int32_t n_acc, n_unc;
    bool oom;
} long_sink;

static void long_result(void *user, int32_t id, int res) {
    long_sink *k = user;
    if (res == TOK_ACC) {
        set_bit(k->g->walk_bits, id);
        k->n_acc++;
    } else if (res == TOK_UNC && !unc_push(k->g, &k->n_unc, &id, 1, INT32_MAX)) {
        k->oom = true;
    }
}

/* The long tokens from (s, GRAM_BOTTOM). Caller holds g->mu. */
static gram_class *classify_long(gram_grammar *g, int32_t s) {
    const gram_vocab *v = g->vocab;
    memset(g->walk_bits, 0, (size_t)v->n_words * sizeof *g->walk_bits);
    long_sink k = {.g = g};
    gram_pool_truncate(&g->walk_pool, 0);
    bool ok = list_walk(&g->walk_step, &g->walk_lv, v, v->long_ids, v->n_long, (gram_elem){s, GRAM_BOTTOM},
                        g->a.follow[g->a.state_rule[s]], NULL, long_result, &k);
    gram_pool_truncate(&g->walk_pool, 0);
    return ok && !k.oom ? pack_class(g, k.n_acc, k.n_unc) : NULL;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static const gram_class *cached(gram_grammar *g, _Atomic(gram_class *) *slot, int32_t s, bool is_long) {
    gram_class *c = atomic_load_explicit(slot, memory_order_acquire);
    if (c) return c;
    pthread_mutex_lock(&g->mu);
    c = atomic_load_explicit(slot, memory_order_relaxed);
    if (!c && !atomic_load(&g->walk_too_complex)) {
        double t0 = now_ns();
        gram_step_fuel(&g->walk_step, GRAM_WALK_FUEL);
        c = is_long ? classify_long(g, s) : classify_short(g, s);
        if (g->walk_step.too_complex) atomic_store(&g->walk_too_complex, true);
        if (!is_long) atomic_fetch_add(&g->n_class_walks, 1);
        atomic_fetch_add(&g->class_walk_ns, (long)(now_ns() - t0));
        if (c) atomic_store_explicit(slot, c, memory_order_release);
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

const gram_class *gram_class_short(gram_grammar *g, int32_t s) {
    return cached(g, &g->cls[g->walk_class[s]], s, false);
}

const gram_class *gram_class_long(gram_grammar *g, int32_t s) { return cached(g, &g->long_cls[s], s, true); }

/* ---------------------------------------------------------------------------
 * A matcher's mask
 * ------------------------------------------------------------------------- */

typedef struct bits_sink {
    uint64_t *bits;
} bits_sink;

static void bits_result(void *user, int32_t id, int res) {
    if (res == TOK_ACC) set_bit(((bits_sink *)user)->bits, id);
}

static bool bits_skip(void *user, int32_t id) { return get_bit(((bits_sink *)user)->bits, id); }

static uint64_t key_hash(const gram_elem *e, int32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) {
        h ^= ((uint64_t)(uint32_t)e[i].state << 32) | (uint32_t)e[i].node;
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    return h;
}

static int cmp_elem(const void *pa, const void *pb) {
    const gram_elem *a = pa, *b = pb;
    if (a->state != b->state) return a->state < b->state ? -1 : 1;
    return a->node < b->node ? -1 : a->node > b->node;
}

void gram_mask_cache_clear(gram_matcher *m) {
    for (int i = 0; i < GRAM_MASK_CACHE; i++) m->cache[i].n_key = -1;
}

void gram_mask_cache_free(gram_matcher *m) {
    for (int i = 0; i < GRAM_MASK_CACHE; i++) {
        free(m->cache[i].key);
        free(m->cache[i].bits);
        m->cache[i].key = NULL;
        m->cache[i].bits = NULL;
    }
}

#define KEY_ANY_BELOW (-3) /* the stack below does not change the mask */

static void or_class(uint64_t *bits, const gram_class *c, size_t words) {
    if (!c) return;
    if (c->acc_bits) {
        for (size_t k = 0; k < words; k++) bits[k] |= c->acc_bits[k];
    } else {
        for (int32_t k = 0; k < c->n_acc; k++) set_bit(bits, c->acc[k]);
    }
}

int gram_matcher_fill_mask(gram_matcher *m, uint64_t *bits) {
    gram_grammar *g = m->g;
    const gram_vocab *v = g->vocab;
    const gram_auto *a = &g->a;
    size_t words = (size_t)v->n_words;
    m->error = NULL;
    gram_step_fuel(&m->step, GRAM_STEP_FUEL);
    if (m->hended[m->n_hist - 1]) {
        memset(bits, 0, words * sizeof *bits);
        return 0;
    }
    int32_t n;
    const gram_elem *e = gram_matcher_top(m, &n);
    bool ok = true;

    /* the cache key: the elements, with the stack dropped where it cannot matter */
    bool specials = g->n_specials > 0;
    bool key_ok = gram_elems_reserve(&m->keybuf, n);
    bool accepting = false;
    for (int32_t i = 0; i < n; i++) {
        bool reads = a->flags[e[i].state] & GS_BYTES;
        const gram_class *cs = reads ? gram_class_short(g, e[i].state) : NULL;
        const gram_class *cl = reads ? gram_class_long(g, e[i].state) : NULL;
        if (reads && (!cs || !cl)) ok = false;
        bool root_final = e[i].node == GRAM_NIL && (a->flags[e[i].state] & GS_FINAL);
        accepting |= root_final;
        if (key_ok) {
            int32_t node = e[i].node;
            bool stack_free = (!cs || cs->n_unc == 0) && (!cl || cl->n_unc == 0);
            if (!specials && stack_free && !root_final) node = KEY_ANY_BELOW;
            m->keybuf.e[i] = (gram_elem){e[i].state, node};
        }
    }
    uint64_t h = 0;
    if (key_ok) {
        qsort(m->keybuf.e, (size_t)n, sizeof *m->keybuf.e, cmp_elem);
        h = key_hash(m->keybuf.e, n);
        for (int i = 0; i < GRAM_MASK_CACHE; i++) {
            gram_mask_entry *ce = &m->cache[i];
            if (ce->bits && ce->n_key == n && ce->hash == h &&
                memcmp(ce->key, m->keybuf.e, (size_t)n * sizeof *ce->key) == 0) {
                memcpy(bits, ce->bits, words * sizeof *bits);
                ce->tick = ++m->tick;
                m->mask_hits++;
                return 0;
            }
        }
    }
    m->mask_misses++;

    memset(bits, 0, words * sizeof *bits);
    for (int32_t i = 0; i < n; i++) {
        if (!(a->flags[e[i].state] & GS_BYTES)) continue;
        or_class(bits, gram_class_short(g, e[i].state), words);
        or_class(bits, gram_class_long(g, e[i].state), words);
    }
    int32_t mark = m->pool.n;
    bits_sink sink = {bits};
    for (int32_t i = 0; i < n; i++) {
        if (!(a->flags[e[i].state] & GS_BYTES)) continue;
        const gram_class *cs[2] = {gram_class_short(g, e[i].state), gram_class_long(g, e[i].state)};
        for (int q = 0; q < 2; q++)
            if (cs[q] && cs[q]->n_unc &&
                !list_walk(&m->step, &m->lv, v, cs[q]->unc, cs[q]->n_unc, e[i], NULL, bits_skip, bits_result, &sink))
                ok = false;
    }
    gram_pool_truncate(&m->pool, mark);
    for (int32_t i = 0; i < g->n_specials; i++)
        if (gram_elems_accept(m, e, n, g->specials[i].text, g->specials[i].len)) set_bit(bits, g->specials[i].id);
    if (accepting)
        for (int32_t i = 0; i < v->n_end; i++) set_bit(bits, v->end_ids[i]);
    if (!ok) { /* a classification or walk failed: the mask is incomplete */
        m->error = m->step.too_complex || atomic_load(&g->walk_too_complex) ? GRAM_ERROR_TOO_COMPLEX
                                                                             : "out of memory";
        return -1;
    }

    if (!key_ok) return 0;
    gram_mask_entry *slot = &m->cache[0];
    for (int i = 0; i < GRAM_MASK_CACHE; i++) {
        gram_mask_entry *ce = &m->cache[i];
        if (!ce->bits) {
            slot = ce;
            break;
        }
        if (ce->tick < slot->tick) slot = ce;
    }
    if (!slot->bits && !(slot->bits = malloc(words * sizeof *bits))) return 0;
    if (slot->cap_key < n) {
        gram_elem *k = realloc(slot->key, (size_t)n * sizeof *k);
        if (!k) {
            slot->n_key = -1;
            return 0;
        }
        slot->key = k;
        slot->cap_key = n;
    }
    memcpy(slot->key, m->keybuf.e, (size_t)n * sizeof *slot->key);
    memcpy(slot->bits, bits, words * sizeof *bits);
    slot->n_key = n;
    slot->hash = h;
    slot->tick = ++m->tick;
    return 0;
}

void gram_mask_apply(const uint64_t *bits, float *logits, int n_vocab) {
    const float ninf = -__builtin_inff();
    int full = n_vocab / 64;
    for (int w = 0; w < full; w++) {
        uint64_t x = bits[w];
        float *row = logits + (size_t)w * 64;
        if (x == ~0ull) continue;
        if (x == 0) {
            for (int i = 0; i < 64; i++) row[i] = ninf; /* most words of a narrow mask */
            continue;
        }
        for (uint64_t z = ~x; z; z &= z - 1) row[__builtin_ctzll(z)] = ninf;
    }
    for (int i = full * 64; i < n_vocab; i++)
        if (!(bits[full] >> (i - full * 64) & 1)) logits[i] = ninf;
}
