/*
 * gram_match.c - the parser state of one sequence and how it advances.
 *
 * A state is a set of stacks. A stack is its top DFA state plus a chain of
 * return frames kept in a hash-consed pool (equal stacks have equal ids, so
 * sets deduplicate by comparing two integers and grow by one node per call).
 * Advancing by a byte moves each top along its DFA, then closes the set:
 * a state that calls a rule pushes the return frame and continues at the
 * callee's start; a state where its rule may end pops to the frame below.
 * The matcher keeps every state it passed through, so rolling back n tokens
 * is dropping n entries.
 *
 * What it is not for: token masks (gram_mask.c), which reuse the stepping.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

/* ---------------------------------------------------------------------------
 * Hash-consed return frames
 * ------------------------------------------------------------------------- */

static uint32_t frame_hash(int32_t state, int32_t parent) {
    uint64_t k = ((uint64_t)(uint32_t)state << 32) | (uint32_t)parent;
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(k >> 32);
}

void gram_pool_init(gram_pool *p) { memset(p, 0, sizeof *p); }

void gram_pool_free(gram_pool *p) {
    free(p->state);
    free(p->parent);
    free(p->next);
    free(p->bucket);
    memset(p, 0, sizeof *p);
}

/* Rebuilds the buckets; chains keep newer nodes first, which truncation needs. */
static bool pool_rehash(gram_pool *p, uint32_t nb) {
    int32_t *b = malloc(nb * sizeof *b);
    if (!b) return false;
    for (uint32_t i = 0; i < nb; i++) b[i] = -1;
    for (int32_t i = 0; i < p->n; i++) {
        uint32_t h = frame_hash(p->state[i], p->parent[i]) & (nb - 1);
        p->next[i] = b[h];
        b[h] = i;
    }
    free(p->bucket);
    p->bucket = b;
    p->n_buckets = nb;
    return true;
}

int32_t gram_pool_intern(gram_pool *p, int32_t state, int32_t parent) {
    if (p->n_buckets) {
        for (int32_t i = p->bucket[frame_hash(state, parent) & (p->n_buckets - 1)]; i >= 0; i = p->next[i])
            if (p->state[i] == state && p->parent[i] == parent) return i;
    }
    if (p->n == p->cap) {
        int32_t c = p->cap ? p->cap * 2 : 256;
        int32_t *s = realloc(p->state, (size_t)c * sizeof *s);
        if (s) p->state = s;
        int32_t *q = realloc(p->parent, (size_t)c * sizeof *q);
        if (q) p->parent = q;
        int32_t *n = realloc(p->next, (size_t)c * sizeof *n);
        if (n) p->next = n;
        if (!s || !q || !n) return -1;
        p->cap = c;
    }
    if ((uint32_t)p->n + 1 > p->n_buckets && !pool_rehash(p, p->n_buckets ? p->n_buckets * 2 : 256)) return -1;
    int32_t i = p->n++;
    uint32_t h = frame_hash(state, parent) & (p->n_buckets - 1);
    p->state[i] = state;
    p->parent[i] = parent;
    p->next[i] = p->bucket[h];
    p->bucket[h] = i;
    return i;
}

void gram_pool_truncate(gram_pool *p, int32_t n) {
    while (p->n > n) {
        int32_t i = --p->n;
        uint32_t h = frame_hash(p->state[i], p->parent[i]) & (p->n_buckets - 1);
        p->bucket[h] = p->next[i]; /* i heads its chain: it is the newest node */
    }
}

/* ---------------------------------------------------------------------------
 * Sets and stepping
 * ------------------------------------------------------------------------- */

bool gram_elems_reserve(gram_elems *v, int32_t n) {
    if (n <= v->cap) return true;
    int32_t c = v->cap ? v->cap * 2 : 64;
    while (c < n) c *= 2;
    gram_elem *p = realloc(v->e, (size_t)c * sizeof *p);
    if (!p) return false;
    v->e = p;
    v->cap = c;
    return true;
}

void gram_elems_free(gram_elems *v) {
    free(v->e);
    memset(v, 0, sizeof *v);
}

static inline void elems_push(gram_stepper *s, gram_elems *v, int32_t state, int32_t node) {
    if (v->n == v->cap && !gram_elems_reserve(v, v->n + 1)) {
        s->oom = true;
        return;
    }
    v->e[v->n++] = (gram_elem){state, node};
}

void gram_stepper_init(gram_stepper *s, const gram_auto *a, gram_pool *pool) {
    memset(s, 0, sizeof *s);
    s->a = a;
    s->pool = pool;
    s->fuel = GRAM_STEP_FUEL;
    /* allocated up front: an empty result is still a valid array to copy from */
    if (!gram_elems_reserve(&s->res, 64) || !gram_elems_reserve(&s->work, 64)) s->oom = true;
}

void gram_stepper_free(gram_stepper *s) {
    gram_elems_free(&s->res);
    gram_elems_free(&s->work);
    free(s->seen_key);
    free(s->seen_stamp);
    memset(s, 0, sizeof *s);
}

void gram_step_fuel(gram_stepper *s, int64_t fuel) {
    s->fuel = fuel;
    s->too_complex = false;
}

void gram_step_begin(gram_stepper *s) {
    s->res.n = 0;
    s->oom = false; /* each step reports its own failure; callers check after every step */
    s->seen_used = 0;
    if (++s->stamp == 0) {
        if (s->seen_stamp) memset(s->seen_stamp, 0, s->seen_cap * sizeof *s->seen_stamp);
        s->stamp = 1;
    }
}

static inline uint32_t seen_slot(uint64_t key, uint32_t mask) {
    key ^= key >> 29;
    key *= 0xBF58476D1CE4E5B9ULL;
    return (uint32_t)(key >> 32) & mask;
}

/* Marks (state, node) seen in this step; false when it already was, or
 * when the step or the call is out of bounds (s->oom and s->too_complex
 * set). */
static bool seen_add(gram_stepper *s, int32_t state, int32_t node) {
    if (s->seen_used >= GRAM_MAX_STACKS || --s->fuel < 0) {
        s->oom = s->too_complex = true;
        return false;
    }
    uint64_t key = ((uint64_t)(uint32_t)state << 32) | (uint32_t)node;
    if ((s->seen_used + 1) * 2 > s->seen_cap) {
        uint32_t cap = s->seen_cap ? s->seen_cap * 2 : 64;
        uint64_t *k = malloc(cap * sizeof *k);
        uint32_t *st = calloc(cap, sizeof *st);
        if (!k || !st) {
            free(k);
            free(st);
            s->oom = true;
            return false;
        }
        for (uint32_t i = 0; i < s->seen_cap; i++) {
            if (s->seen_stamp[i] != s->stamp) continue;
            uint32_t j = seen_slot(s->seen_key[i], cap - 1);
            while (st[j] == s->stamp) j = (j + 1) & (cap - 1);
            k[j] = s->seen_key[i];
            st[j] = s->stamp;
        }
        free(s->seen_key);
        free(s->seen_stamp);
        s->seen_key = k;
        s->seen_stamp = st;
        s->seen_cap = cap;
    }
    uint32_t i = seen_slot(key, s->seen_cap - 1);
    while (s->seen_stamp[i] == s->stamp) {
        if (s->seen_key[i] == key) return false;
        i = (i + 1) & (s->seen_cap - 1);
    }
    s->seen_key[i] = key;
    s->seen_stamp[i] = s->stamp;
    s->seen_used++;
    return true;
}

void gram_step_close(gram_stepper *s, int32_t state, int32_t node, bool *can_end) {
    const gram_auto *a = s->a;
    if (!seen_add(s, state, node)) return;
    s->work.n = 0;
    elems_push(s, &s->work, state, node);
    while (s->work.n > 0) {
        gram_elem e = s->work.e[--s->work.n];
        uint8_t fl = a->flags[e.state];
        if ((fl & GS_BYTES) || ((fl & GS_FINAL) && e.node == GRAM_NIL)) elems_push(s, &s->res, e.state, e.node);
        if (fl & GS_FINAL) {
            if (e.node == GRAM_BOTTOM) {
                *can_end = true;
            } else if (e.node >= 0) {
                int32_t st = s->pool->state[e.node], par = s->pool->parent[e.node];
                if (seen_add(s, st, par)) elems_push(s, &s->work, st, par);
            }
        }
        if (fl & GS_REFS) {
            for (int32_t k = a->ref_off[e.state]; k < a->ref_off[e.state + 1]; k++) {
                if (s->pool->n >= GRAM_MAX_FRAMES) {
                    s->oom = s->too_complex = true;
                    return;
                }
                int32_t n = gram_pool_intern(s->pool, a->refs[k].ret, e.node);
                if (n < 0) {
                    s->oom = true;
                    return;
                }
                int32_t st = a->rule_start[a->refs[k].rule];
                if (seen_add(s, st, n)) elems_push(s, &s->work, st, n);
            }
        }
    }
}

void gram_step_byte(gram_stepper *s, const gram_elem *in, int32_t n, uint8_t b, bool *can_end) {
    const gram_auto *a = s->a;
    gram_step_begin(s);
    size_t cls = a->byte_class[b];
    for (int32_t i = 0; i < n; i++) {
        int32_t t = a->trans[(size_t)in[i].state * (size_t)a->n_classes + cls];
        if (t >= 0) gram_step_close(s, t, in[i].node, can_end);
    }
}

/* ---------------------------------------------------------------------------
 * The matcher
 * ------------------------------------------------------------------------- */

static bool hist_push(gram_matcher *m, const gram_elem *e, int32_t n, bool ended) {
    if (m->n_hist + 1 >= m->cap_hist) {
        int32_t c = m->cap_hist ? m->cap_hist * 2 : 64;
        int32_t *o = realloc(m->hoff, (size_t)(c + 1) * sizeof *o);
        if (o) m->hoff = o;
        uint8_t *en = realloc(m->hended, (size_t)c);
        if (en) m->hended = en;
        if (!o || !en) return false;
        m->cap_hist = c;
    }
    if (!gram_elems_reserve(&m->hist, m->hist.n + n)) return false;
    memcpy(m->hist.e + m->hist.n, e, (size_t)n * sizeof *e);
    m->hist.n += n;
    m->hended[m->n_hist] = ended;
    m->hoff[++m->n_hist] = m->hist.n;
    return true;
}

const gram_elem *gram_matcher_top(const gram_matcher *m, int32_t *n) {
    *n = m->hoff[m->n_hist] - m->hoff[m->n_hist - 1];
    return m->hist.e + m->hoff[m->n_hist - 1];
}

gram_matcher *gram_matcher_new(gram_grammar *g) {
    gram_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = gram_grammar_ref(g);
    gram_pool_init(&m->pool);
    gram_stepper_init(&m->step, &g->a, &m->pool);
    m->cap_hist = 64;
    m->hoff = malloc((size_t)(m->cap_hist + 1) * sizeof *m->hoff);
    m->hended = malloc((size_t)m->cap_hist);
    if (!m->hoff || !m->hended) goto fail;
    m->hoff[0] = 0;
    m->n_hist = 0;
    bool can_end = false;
    gram_step_fuel(&m->step, GRAM_STEP_FUEL);
    gram_step_begin(&m->step);
    gram_step_close(&m->step, g->a.rule_start[g->a.root], GRAM_NIL, &can_end);
    if (m->step.oom || !hist_push(m, m->step.res.e, m->step.res.n, false)) goto fail;
    m->init_pool_n = m->pool.n;
    return m;
fail:
    gram_matcher_free(m);
    return NULL;
}

void gram_matcher_free(gram_matcher *m) {
    if (!m) return;
    gram_mask_cache_free(m);
    gram_stepper_free(&m->step);
    gram_pool_free(&m->pool);
    gram_elems_free(&m->hist);
    gram_elems_free(&m->tmp);
    gram_elems_free(&m->keybuf);
    gram_levels_free(&m->lv);
    free(m->hoff);
    free(m->hended);
    gram_grammar_free(m->g);
    free(m);
}

gram_grammar *gram_matcher_grammar(const gram_matcher *m) { return m->g; }

void gram_matcher_reset(gram_matcher *m) {
    m->n_hist = 1;
    m->hist.n = m->hoff[1];
    gram_pool_truncate(&m->pool, m->init_pool_n);
    gram_mask_cache_clear(m);
}

/* Advances the elements through bytes; the result is in m->tmp. */
static bool advance(gram_matcher *m, const gram_elem *e, int32_t n, const char *bytes, size_t len) {
    m->tmp.n = 0;
    if (!gram_elems_reserve(&m->tmp, n)) return false;
    memcpy(m->tmp.e, e, (size_t)n * sizeof *e);
    m->tmp.n = n;
    for (size_t i = 0; i < len && m->tmp.n > 0; i++) {
        bool can_end = false;
        gram_step_byte(&m->step, m->tmp.e, m->tmp.n, (uint8_t)bytes[i], &can_end);
        if (m->step.oom) return false;
        if (!gram_elems_reserve(&m->tmp, m->step.res.n)) return false;
        memcpy(m->tmp.e, m->step.res.e, (size_t)m->step.res.n * sizeof *m->tmp.e);
        m->tmp.n = m->step.res.n;
    }
    return m->tmp.n > 0;
}

bool gram_elems_accept(gram_matcher *m, const gram_elem *e, int32_t n, const char *bytes, size_t len) {
    int32_t mark = m->pool.n;
    bool ok = advance(m, e, n, bytes, len);
    gram_pool_truncate(&m->pool, mark);
    return ok;
}

bool gram_matcher_accept_bytes(gram_matcher *m, const char *bytes, size_t len) {
    m->error = NULL;
    if (m->hended[m->n_hist - 1]) return false;
    int32_t n;
    const gram_elem *e = gram_matcher_top(m, &n);
    int32_t mark = m->pool.n;
    gram_step_fuel(&m->step, GRAM_STEP_FUEL);
    bool advanced = advance(m, e, n, bytes, len);
    if (!advanced || !hist_push(m, m->tmp.e, m->tmp.n, false)) {
        if (m->step.too_complex) m->error = GRAM_ERROR_TOO_COMPLEX;
        else if (m->step.oom || advanced) m->error = "out of memory";
        gram_pool_truncate(&m->pool, mark);
        return false;
    }
    return true;
}

const char *gram_matcher_error(const gram_matcher *m) { return m->error; }

bool gram_matcher_accept_token(gram_matcher *m, int32_t id) {
    const gram_grammar *g = m->g;
    const gram_vocab *v = g->vocab;
    m->error = NULL;
    if (id < 0 || id >= v->n_vocab || m->hended[m->n_hist - 1]) return false;
    if (gram_vocab_is_end(v, id)) {
        if (!gram_matcher_is_accepting(m)) return false;
        int32_t n;
        const gram_elem *e = gram_matcher_top(m, &n);
        if (!gram_elems_reserve(&m->tmp, n)) return false;
        memcpy(m->tmp.e, e, (size_t)n * sizeof *e);
        return hist_push(m, m->tmp.e, n, true);
    }
    if (v->kind[id] == GRAM_TOKEN_TEXT) return gram_matcher_accept_bytes(m, v->bytes + v->off[id], v->len[id]);
    for (int32_t i = 0; i < g->n_specials; i++)
        if (g->specials[i].id == id) return gram_matcher_accept_bytes(m, g->specials[i].text, g->specials[i].len);
    return false;
}

int gram_matcher_rollback(gram_matcher *m, int n) {
    int k = n < m->n_hist - 1 ? n : m->n_hist - 1;
    if (k <= 0) return 0;
    m->n_hist -= k;
    m->hist.n = m->hoff[m->n_hist];
    return k;
}

int gram_matcher_history(const gram_matcher *m) { return m->n_hist - 1; }

bool gram_matcher_is_accepting(const gram_matcher *m) {
    if (m->hended[m->n_hist - 1]) return true;
    int32_t n;
    const gram_elem *e = gram_matcher_top(m, &n);
    for (int32_t i = 0; i < n; i++)
        if (e[i].node == GRAM_NIL && (m->g->a.flags[e[i].state] & GS_FINAL)) return true;
    return false;
}

bool gram_matcher_is_terminated(const gram_matcher *m) {
    if (m->hended[m->n_hist - 1]) return true;
    if (!gram_matcher_is_accepting(m)) return false;
    int32_t n;
    const gram_elem *e = gram_matcher_top(m, &n);
    for (int32_t i = 0; i < n; i++)
        if (m->g->a.flags[e[i].state] & GS_BYTES) return false;
    return true;
}

size_t gram_matcher_forced_bytes(gram_matcher *m, char *buf, size_t cap) {
    if (m->hended[m->n_hist - 1] || gram_matcher_is_accepting(m)) return 0;
    const gram_auto *a = &m->g->a;
    int32_t n;
    const gram_elem *e = gram_matcher_top(m, &n);
    int32_t mark = m->pool.n;
    m->tmp.n = 0;
    if (!gram_elems_reserve(&m->tmp, n)) return 0;
    memcpy(m->tmp.e, e, (size_t)n * sizeof *e);
    m->tmp.n = n;
    gram_step_fuel(&m->step, GRAM_STEP_FUEL);
    size_t w = 0;
    while (w < cap) {
        int only = -1;
        bool many = false, accepting = false;
        for (int32_t i = 0; i < m->tmp.n && !many; i++) {
            const gram_elem *x = &m->tmp.e[i];
            if (x->node == GRAM_NIL && (a->flags[x->state] & GS_FINAL)) accepting = true;
            const int32_t *row = a->trans + (size_t)x->state * (size_t)a->n_classes;
            for (int b = 0; b < 256 && !many; b++) {
                if (row[a->byte_class[b]] < 0) continue;
                if (only < 0 || only == b)
                    only = b;
                else
                    many = true;
            }
        }
        if (many || only < 0 || accepting) break;
        bool can_end = false;
        gram_step_byte(&m->step, m->tmp.e, m->tmp.n, (uint8_t)only, &can_end);
        if (m->step.oom || m->step.res.n == 0 || !gram_elems_reserve(&m->tmp, m->step.res.n)) break;
        memcpy(m->tmp.e, m->step.res.e, (size_t)m->step.res.n * sizeof *m->tmp.e);
        m->tmp.n = m->step.res.n;
        buf[w++] = (char)only;
    }
    gram_pool_truncate(&m->pool, mark);
    return w;
}

int gram_matcher_bytes_to_end(gram_matcher *m) {
    if (gram_matcher_is_accepting(m)) return 0;
    const gram_auto *a = &m->g->a;
    int32_t n;
    const gram_elem *e = gram_matcher_top(m, &n);
    int64_t best = INT32_MAX;
    for (int32_t i = 0; i < n; i++) {
        int64_t d = a->dist[e[i].state];
        for (int32_t nd = e[i].node; nd >= 0; nd = m->pool.parent[nd]) d += a->dist[m->pool.state[nd]];
        if (d < best) best = d;
    }
    return best > INT32_MAX ? INT32_MAX : (int)best;
}
