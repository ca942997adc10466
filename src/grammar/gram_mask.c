/*
 * gram_mask.c - which tokens may come next: the per-state token
 * classification cache and the mask of a matcher's current state.
 *
 * For a DFA state s, a walk over the token trie starting from the stack
 * "s above an unknown frame" sorts every token into
 *   accepted:  some path reads all its bytes without leaving s's rule frame
 *              (valid whatever the stack below holds),
 *   uncertain: no such path, but one completes s's rule after reading part
 *              of the token and the next byte may follow the rule (FOLLOW),
 *              so the real stack decides,
 *   rejected:  the rest.
 * The walk prunes a whole subtree as soon as no path is alive, and copies
 * one element forward without any set work while the state is a plain byte
 * state (the common case inside strings and literals), so a state costs the
 * number of trie nodes its live prefixes reach. Classifications are computed
 * once per grammar and state (on first use, under the grammar's mutex) and
 * shared by every matcher of the grammar.
 *
 * A matcher's mask is then the union of its stacks' accepted sets, plus the
 * uncertain tokens that a walk with the real stack accepts (a walk over the
 * sorted uncertain list, sharing prefixes), plus the grammar's specials and
 * the end tokens when accepting. Masks of recent states are kept per matcher:
 * inside a JSON string every token leads back to the same state.
 *
 * What it is not for: applying the mask inside sampling (the sampler calls
 * gram_mask_apply on the rows it samples).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

static inline bool follow_has(const uint8_t *f, uint8_t b) { return f[b >> 3] >> (b & 7) & 1; }

bool gram_levels_reserve(gram_levels *l, int32_t depth) {
    if (depth < l->cap) return true;
    int32_t c = l->cap ? l->cap : 64;
    while (c <= depth) c *= 2;
    int32_t *lo = realloc(l->lo, (size_t)c * sizeof *lo);
    if (lo) l->lo = lo;
    int32_t *n = realloc(l->n, (size_t)c * sizeof *n);
    if (n) l->n = n;
    if (!lo || !n) return false;
    l->cap = c;
    return true;
}

void gram_levels_free(gram_levels *l) {
    gram_elems_free(&l->e);
    free(l->lo);
    free(l->n);
    memset(l, 0, sizeof *l);
}

void gram_class_free(gram_class *c) {
    if (!c) return;
    free(c->acc);
    free(c->acc_bits);
    free(c->unc);
    free(c);
}

static bool unc_push_range(gram_grammar *g, int32_t *n_unc, const int32_t *ids, int32_t n) {
    if (*n_unc + n > g->walk_unc_cap) {
        int32_t c = g->walk_unc_cap ? g->walk_unc_cap : 1024;
        while (c < *n_unc + n) c *= 2;
        int32_t *p = realloc(g->walk_unc, (size_t)c * sizeof *p);
        if (!p) return false;
        g->walk_unc = p;
        g->walk_unc_cap = c;
    }
    memcpy(g->walk_unc + *n_unc, ids, (size_t)n * sizeof *ids);
    *n_unc += n;
    return true;
}

enum { LV_SINGLE = 1, LV_UNC = 2, LV_ENDED = 4 };

/* The trie walk described above, from (s, GRAM_BOTTOM). Caller holds g->mu.
 * Per depth d the walk keeps the set after the path's first d bytes: one
 * element in st/nd (LV_SINGLE), or several in g->walk_buf[lo .. lo + cnt);
 * LV_UNC: tokens through here with no live path are uncertain; LV_ENDED: a
 * path completed s's rule exactly here. */
static gram_class *classify(gram_grammar *g, int32_t s) {
    const gram_vocab *v = g->vocab;
    const gram_auto *a = &g->a;
    const size_t C = (size_t)a->n_classes;
    const uint8_t *follow = a->follow[a->state_rule[s]];
    uint64_t *bits = g->walk_bits;
    memset(bits, 0, (size_t)v->n_words * sizeof *bits);
    int32_t n_acc = 0, n_unc = 0;
    bool ok = true;

    gram_elems *buf = &g->walk_buf;
    gram_stepper *step = &g->walk_step;
    size_t D = (size_t)v->max_depth + 2;
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
                for (int32_t k = x->tok, e = x->tok + x->nend; k < e; k++) {
                    int32_t id = order[k];
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
        } else if (u && !unc_push_range(g, &n_unc, order + t0, t1 - t0)) {
            ok = false;
            break;
        }
        if (n_new == 0) {
            /* nothing alive below: the subtree is uncertain or rejected */
            if (u) {
                if (!unc_push_range(g, &n_unc, order + t1, T[x->end].tok - t1)) {
                    ok = false;
                    break;
                }
            } else if (end_here) {
                for (int32_t c = i + 1; c < x->end; c = T[c].end)
                    if (follow_has(follow, T[c].byte) &&
                        !unc_push_range(g, &n_unc, order + T[c].tok, T[T[c].end].tok - T[c].tok)) {
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
    if (!ok) return NULL;
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

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

const gram_class *gram_class_get(gram_grammar *g, int32_t s) {
    gram_class *c = atomic_load_explicit(&g->cls[s], memory_order_acquire);
    if (c) return c;
    pthread_mutex_lock(&g->mu);
    c = atomic_load_explicit(&g->cls[s], memory_order_relaxed);
    if (!c) {
        double t0 = now_ns();
        c = classify(g, s);
        atomic_fetch_add(&g->n_class_walks, 1);
        atomic_fetch_add(&g->class_walk_ns, (long)(now_ns() - t0));
        if (c) atomic_store_explicit(&g->cls[s], c, memory_order_release);
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

int gram_class_all(gram_grammar *g, pdl_error *err) {
    for (int32_t s = 0; s < g->a.n_states; s++)
        if ((g->a.flags[s] & GS_BYTES) && !gram_class_get(g, s))
            return pdl_fail(err, "grammar: out of memory for the token cache");
    return 0;
}

/* ---------------------------------------------------------------------------
 * A matcher's mask
 * ------------------------------------------------------------------------- */

static inline void set_bit(uint64_t *bits, int32_t id) { bits[id >> 6] |= 1ull << (id & 63); }
static inline bool get_bit(const uint64_t *bits, int32_t id) { return bits[id >> 6] >> (id & 63) & 1; }

/* Sets the bits of the uncertain tokens of class c that the stack e really
 * accepts: a walk over the (trie-ordered) list that keeps the sets of the
 * shared prefix of consecutive tokens. */
static void walk_uncertain(gram_matcher *m, const gram_class *c, gram_elem e, uint64_t *bits) {
    const gram_vocab *v = m->g->vocab;
    gram_levels *lv = &m->lv;
    if (!gram_levels_reserve(lv, v->max_depth + 1) || !gram_elems_reserve(&lv->e, 64)) return;
    lv->e.e[0] = e;
    lv->lo[0] = 0;
    lv->n[0] = 1;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    int32_t valid = 0;       /* levels 0..valid hold the sets of prev's first bytes */
    int32_t dead_at = -1;    /* prev died at this depth (its set there was empty) */
    for (int32_t k = 0; k < c->n_unc; k++) {
        int32_t id = c->unc[k];
        if (get_bit(bits, id)) continue;
        const char *b = m->g->vocab->bytes + v->off[id];
        uint32_t len = v->len[id], l = 0;
        if (prev)
            while (l < prev_len && l < len && prev[l] == b[l]) l++;
        if (dead_at >= 0 && (int32_t)l >= dead_at) continue; /* same dead prefix */
        int32_t d = (int32_t)l < valid ? (int32_t)l : valid;
        dead_at = -1;
        for (; d < (int32_t)len; d++) {
            bool can_end = false;
            gram_step_byte(&m->step, lv->e.e + lv->lo[d], lv->n[d], (uint8_t)b[d], &can_end);
            int32_t base = lv->lo[d] + lv->n[d];
            if (m->step.oom || !gram_elems_reserve(&lv->e, base + m->step.res.n)) return;
            memcpy(lv->e.e + base, m->step.res.e, (size_t)m->step.res.n * sizeof *lv->e.e);
            lv->lo[d + 1] = base;
            lv->n[d + 1] = m->step.res.n;
            if (m->step.res.n == 0) {
                dead_at = d + 1;
                break;
            }
        }
        valid = dead_at >= 0 ? dead_at - 1 : (int32_t)len;
        if (dead_at < 0) set_bit(bits, id);
        prev = b;
        prev_len = len;
    }
}

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

void gram_matcher_fill_mask(gram_matcher *m, uint64_t *bits) {
    gram_grammar *g = m->g;
    const gram_vocab *v = g->vocab;
    const gram_auto *a = &g->a;
    size_t words = (size_t)v->n_words;
    if (m->hended[m->n_hist - 1]) {
        memset(bits, 0, words * sizeof *bits);
        return;
    }
    int32_t n;
    const gram_elem *e = gram_matcher_top(m, &n);

    /* the cache key: the elements, with the stack dropped where it cannot matter */
    bool specials = g->n_specials > 0;
    bool key_ok = gram_elems_reserve(&m->keybuf, n);
    bool accepting = false;
    for (int32_t i = 0; i < n; i++) {
        const gram_class *c = (a->flags[e[i].state] & GS_BYTES) ? gram_class_get(g, e[i].state) : NULL;
        bool root_final = e[i].node == GRAM_NIL && (a->flags[e[i].state] & GS_FINAL);
        accepting |= root_final;
        if (key_ok) {
            int32_t node = e[i].node;
            if (!specials && (!c || c->n_unc == 0) && !root_final) node = KEY_ANY_BELOW;
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
                return;
            }
        }
    }
    m->mask_misses++;

    memset(bits, 0, words * sizeof *bits);
    for (int32_t i = 0; i < n; i++) {
        if (!(a->flags[e[i].state] & GS_BYTES)) continue;
        const gram_class *c = gram_class_get(g, e[i].state);
        if (!c) continue;
        if (c->acc_bits) {
            for (size_t k = 0; k < words; k++) bits[k] |= c->acc_bits[k];
        } else {
            for (int32_t k = 0; k < c->n_acc; k++) set_bit(bits, c->acc[k]);
        }
    }
    int32_t mark = m->pool.n;
    for (int32_t i = 0; i < n; i++) {
        if (!(a->flags[e[i].state] & GS_BYTES)) continue;
        const gram_class *c = gram_class_get(g, e[i].state);
        if (c && c->n_unc) walk_uncertain(m, c, e[i], bits);
        e = gram_matcher_top(m, &n); /* (the history does not move, but stay safe) */
    }
    gram_pool_truncate(&m->pool, mark);
    for (int32_t i = 0; i < g->n_specials; i++)
        if (gram_elems_accept(m, e, n, g->specials[i].text, g->specials[i].len)) set_bit(bits, g->specials[i].id);
    if (accepting)
        for (int32_t i = 0; i < v->n_end; i++) set_bit(bits, v->end_ids[i]);

    if (!key_ok) return;
    gram_mask_entry *slot = &m->cache[0];
    for (int i = 0; i < GRAM_MASK_CACHE; i++) {
        gram_mask_entry *ce = &m->cache[i];
        if (!ce->bits) {
            slot = ce;
            break;
        }
        if (ce->tick < slot->tick) slot = ce;
    }
    if (!slot->bits && !(slot->bits = malloc(words * sizeof *bits))) return;
    if (slot->cap_key < n) {
        gram_elem *k = realloc(slot->key, (size_t)n * sizeof *k);
        if (!k) {
            slot->n_key = -1;
            return;
        }
        slot->key = k;
        slot->cap_key = n;
    }
    memcpy(slot->key, m->keybuf.e, (size_t)n * sizeof *slot->key);
    memcpy(slot->bits, bits, words * sizeof *bits);
    slot->n_key = n;
    slot->hash = h;
    slot->tick = ++m->tick;
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
