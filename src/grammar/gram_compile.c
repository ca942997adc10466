/*
 * gram_compile.c - the intermediate form -> the automaton the matcher runs.
 *
 * Steps: keep the rules reachable from the root; inline every rule that is
 * not recursive (and not marked NOINLINE, and not too large for the number
 * of places that use it), so most grammars become a few large DFAs and the
 * parser stack only moves at real recursion; build a Thompson NFA per kept
 * rule, where a call of rule C is an edge; turn each into a DFA over byte
 * classes (subset construction); then prune states that cannot reach an end,
 * reject left recursion, and compute what the matcher and the mask need:
 * which bytes may follow each rule, and the fewest bytes to each rule's end.
 *
 * Inlining shares tail copies: two uses of C that continue at the same NFA
 * state share one copy of C, so a chain of optional-property rules (each
 * ending in a choice of two rules) stays linear instead of doubling.
 *
 * What it is not for: parsing input syntax (front ends) or running the
 * automaton (gram_match.c).
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "util/error.h"

/* Size limits: beyond them a grammar is refused with a message rather than
 * using unbounded memory (the work budget, gram_budget.c, bounds the time on
 * the way; these bound the arrays whatever the budget is set to). */
#define NFA_MAX_STATES 4000000
/* Transition table cells (states x byte classes): 64 MiB per table. */
#define DFA_MAX_CELLS ((int64_t)16 << 20)
/* A rule whose NFA (times the repetitions around its uses) is larger stays
 * a rule instead of being copied into its callers. */
#define INLINE_MAX_STATES 30000
#define INLINE_REPEATED_MAX 64

/* ---------------------------------------------------------------------------
 * Small growable arrays
 * ------------------------------------------------------------------------- */

typedef struct ivec {
    int32_t *v;
    int32_t n, cap;
} ivec;

static bool ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        int32_t c = a->cap ? a->cap * 2 : 16;
        int32_t *p = realloc(a->v, (size_t)c * sizeof *p);
        if (!p) return false;
        a->v = p;
        a->cap = c;
    }
    a->v[a->n++] = x;
    return true;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------------------
 * NFA
 * ------------------------------------------------------------------------- */

enum { NE_EPS = 0, NE_BYTES = 1, NE_REF = 2 };

typedef struct nfa_edge {
    int32_t from, to;
    int32_t kind, arg; /* BYTES: set index; REF: IR rule */
} nfa_edge;

typedef struct nfa {
    int32_t n_states;
    nfa_edge *e;
    int32_t n_e, cap_e;
    /* tail-sharing memo: (callee, continuation) -> entry state */
    uint64_t *memo_key;
    int32_t *memo_val;
    uint32_t memo_cap, memo_n;
    gram_budget *budget;
    bool oom, too_big;
} nfa;

/* The NFA under construction must stop: out of memory, too big, or out of
 * budget. */
static bool nfa_done(const nfa *f) { return f->oom || f->too_big || f->budget->stop != GRAM_BUDGET_OK; }

typedef struct compiler {
    const gram_ir *ir;
    pdl_error *err;
    bool *reachable;    /* [n_rules] */
    bool *recursive;    /* [n_rules] */
    bool *inlined;      /* [n_rules] */
    int32_t *size;      /* [n_rules] NFA states of the rule built on its own */
    int32_t *mult;      /* [n_rules] largest repetition count around a use of the rule */
    int depth;
} compiler;

static int32_t nfa_state(nfa *f) {
    if (f->n_states >= NFA_MAX_STATES) {
        f->too_big = true;
        return 0;
    }
    gram_spend(f->budget, 1);
    return f->n_states++;
}

static void nfa_edge_add(nfa *f, int32_t from, int32_t to, int32_t kind, int32_t arg) {
    if (nfa_done(f) || !gram_spend(f->budget, 1)) return;
    if (f->n_e == f->cap_e) {
        int32_t c = f->cap_e ? f->cap_e * 2 : 1024;
        nfa_edge *p = realloc(f->e, (size_t)c * sizeof *p);
        if (!p) {
            f->oom = true;
            return;
        }
        f->e = p;
        f->cap_e = c;
    }
    f->e[f->n_e++] = (nfa_edge){from, to, kind, arg};
}

static uint64_t memo_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static int32_t memo_get(nfa *f, int32_t rule, int32_t to) {
    if (!f->memo_cap) return -1;
    uint64_t key = ((uint64_t)(uint32_t)rule << 32) | (uint32_t)to;
    uint32_t i = (uint32_t)memo_hash(key) & (f->memo_cap - 1);
    while (f->memo_val[i] >= 0) {
        if (f->memo_key[i] == key) return f->memo_val[i];
        i = (i + 1) & (f->memo_cap - 1);
    }
    return -1;
}

static void memo_put(nfa *f, int32_t rule, int32_t to, int32_t entry) {
    if ((f->memo_n + 1) * 2 > f->memo_cap) {
        uint32_t cap = f->memo_cap ? f->memo_cap * 2 : 256;
        uint64_t *k = malloc(cap * sizeof *k);
        int32_t *v = malloc(cap * sizeof *v);
        if (!k || !v) {
            free(k);
            free(v);
            f->oom = true;
            return;
        }
        for (uint32_t i = 0; i < cap; i++) v[i] = -1;
        for (uint32_t i = 0; i < f->memo_cap; i++) {
            if (f->memo_val[i] < 0) continue;
            uint32_t j = (uint32_t)memo_hash(f->memo_key[i]) & (cap - 1);
            while (v[j] >= 0) j = (j + 1) & (cap - 1);
            k[j] = f->memo_key[i];
            v[j] = f->memo_val[i];
        }
        free(f->memo_key);
        free(f->memo_val);
        f->memo_key = k;
        f->memo_val = v;
        f->memo_cap = cap;
    }
    uint64_t key = ((uint64_t)(uint32_t)rule << 32) | (uint32_t)to;
    uint32_t i = (uint32_t)memo_hash(key) & (f->memo_cap - 1);
    while (f->memo_val[i] >= 0) i = (i + 1) & (f->memo_cap - 1);
    f->memo_key[i] = key;
    f->memo_val[i] = entry;
    f->memo_n++;
}

static void nfa_free(nfa *f) {
    free(f->e);
    free(f->memo_key);
    free(f->memo_val);
    memset(f, 0, sizeof *f);
}

/* Adds edges so that from --L(node)--> to. Only edges out of `from`, into
 * `to` and among fresh states are added, so siblings may share both ends. */
static void build(compiler *c, nfa *f, int32_t node, int32_t from, int32_t to) {
    if (nfa_done(f)) return;
    const gx_node *n = &c->ir->nodes[node];
    switch (n->kind) {
    case GX_EMPTY: nfa_edge_add(f, from, to, NE_EPS, 0); break;
    case GX_NONE: break;
    case GX_BYTES: nfa_edge_add(f, from, to, NE_BYTES, n->a); break;
    case GX_SEQ: {
        int32_t cur = from;
        for (int32_t i = 0; i < n->b; i++) {
            int32_t nxt = i == n->b - 1 ? to : nfa_state(f);
            build(c, f, c->ir->kids[n->a + i], cur, nxt);
            cur = nxt;
        }
        break;
    }
    case GX_ALT:
        for (int32_t i = 0; i < n->b; i++) build(c, f, c->ir->kids[n->a + i], from, to);
        break;
    case GX_REPEAT: {
        int32_t min = n->b, max = n->c, cur = from;
        for (int32_t i = 0; i < min; i++) {
            int32_t nxt = (i == min - 1 && max == min) ? to : nfa_state(f);
            build(c, f, n->a, cur, nxt);
            cur = nxt;
            if (nfa_done(f)) return;
        }
        if (max == min) {
            if (min == 0) nfa_edge_add(f, from, to, NE_EPS, 0);
            break;
        }
        if (max == GX_INF) {
            int32_t loop = nfa_state(f);
            nfa_edge_add(f, cur, loop, NE_EPS, 0);
            build(c, f, n->a, loop, loop);
            nfa_edge_add(f, loop, to, NE_EPS, 0);
            break;
        }
        for (int32_t i = min; i < max; i++) {
            nfa_edge_add(f, cur, to, NE_EPS, 0);
            int32_t nxt = i == max - 1 ? to : nfa_state(f);
            build(c, f, n->a, cur, nxt);
            cur = nxt;
            if (nfa_done(f)) return;
        }
        break;
    }
    case GX_REF: {
        int32_t r = n->a;
        if (!c->inlined[r]) {
            nfa_edge_add(f, from, to, NE_REF, r);
            break;
        }
        int32_t entry = memo_get(f, r, to);
        if (entry < 0) {
            entry = nfa_state(f);
            memo_put(f, r, to, entry);
            if (++c->depth > 4000) {
                f->too_big = true;
                return;
            }
            build(c, f, c->ir->rules[r].body, entry, to);
            c->depth--;
        }
        nfa_edge_add(f, from, entry, NE_EPS, 0);
        break;
    }
    }
}

/* ---------------------------------------------------------------------------
 * Rule graph: reachability, recursion, inlining decisions
 * ------------------------------------------------------------------------- */

/* Calls fn(rule, multiplicity) for every reference in the expression. */
static void each_ref(const gram_ir *ir, int32_t node, int64_t mult, void (*fn)(void *, int32_t, int64_t),
                     void *user) {
    const gx_node *n = &ir->nodes[node];
    switch (n->kind) {
    case GX_REF: fn(user, n->a, mult); break;
    case GX_SEQ:
    case GX_ALT:
        for (int32_t i = 0; i < n->b; i++) each_ref(ir, ir->kids[n->a + i], mult, fn, user);
        break;
    case GX_REPEAT: {
        int64_t k = n->c == GX_INF ? (int64_t)n->b + 1 : n->c;
        if (k < 1) k = 1;
        int64_t m = mult * k;
        if (m > (int64_t)1 << 40) m = (int64_t)1 << 40;
        each_ref(ir, n->a, m, fn, user);
        break;
    }
    default: break;
    }
}

typedef struct ref_list {
    ivec to;
} ref_list;

static void collect_ref(void *user, int32_t rule, int64_t mult) {
    (void)mult;
    ivec *v = user;
    for (int32_t i = 0; i < v->n; i++)
        if (v->v[i] == rule) return;
    ivec_push(v, rule);
}

typedef struct mult_ctx {
    int32_t *mult;
} mult_ctx;

static void note_mult(void *user, int32_t rule, int64_t m) {
    mult_ctx *mc = user;
    int32_t mm = m > INT32_MAX ? INT32_MAX : (int32_t)m;
    if (mm > mc->mult[rule]) mc->mult[rule] = mm;
}

/* Tarjan's strongly connected components over the reachable rules;
 * recursive[r]: r is on a cycle. */
typedef struct scc_ctx {
    ivec *out;          /* [n_rules] callees */
    int32_t *index, *low;
    bool *on_stack;
    int32_t *stack;
    int32_t sp, counter;
    bool *recursive;
    int32_t *order;     /* rules in completion order (callees first) */
    int32_t n_order;
    int32_t n;          /* rules */
} scc_ctx;

static void scc_visit(scc_ctx *s, int32_t v) {
    /* iterative Tarjan: frames of (rule, next edge) */
    typedef struct {
        int32_t v, i;
    } frame;
    frame *fs = malloc((size_t)(s->n + 1) * sizeof *fs);
    if (!fs) return;
    int32_t top = 0;
    fs[top++] = (frame){v, 0};
    s->index[v] = s->low[v] = s->counter++;
    s->stack[s->sp++] = v;
    s->on_stack[v] = true;
    while (top > 0) {
        frame *f = &fs[top - 1];
        if (f->i < s->out[f->v].n) {
            int32_t w = s->out[f->v].v[f->i++];
            if (s->index[w] < 0) {
                s->index[w] = s->low[w] = s->counter++;
                s->stack[s->sp++] = w;
                s->on_stack[w] = true;
                fs[top++] = (frame){w, 0};
            } else if (s->on_stack[w] && s->index[w] < s->low[f->v]) {
                s->low[f->v] = s->index[w];
            }
            continue;
        }
        int32_t u = f->v;
        top--;
        if (top > 0 && s->low[u] < s->low[fs[top - 1].v]) s->low[fs[top - 1].v] = s->low[u];
        if (s->low[u] == s->index[u]) {
            int32_t cnt = 0, w;
            int32_t start = s->sp;
            do {
                w = s->stack[--s->sp];
                s->on_stack[w] = false;
                cnt++;
            } while (w != u);
            for (int32_t k = s->sp; k < start; k++) {
                int32_t x = s->stack[k];
                if (cnt > 1) s->recursive[x] = true;
                s->order[s->n_order++] = x;
            }
            if (cnt == 1)
                for (int32_t k = 0; k < s->out[u].n; k++)
                    if (s->out[u].v[k] == u) s->recursive[u] = true;
        }
    }
    free(fs);
}

/* ---------------------------------------------------------------------------
 * Subset construction
 * ------------------------------------------------------------------------- */

typedef struct dfa_builder {
    const nfa *f;
    const gram_ir *ir;
    int32_t *out_off;         /* [n_nfa + 1] CSR of edges by source */
    const nfa_edge **out;     /* [n_e] */
    uint32_t *stamp;          /* [n_nfa] */
    uint32_t cur_stamp;
    ivec stack, tmp;
    gram_budget *budget;
    int32_t max_states;       /* the budget's, or fewer when the byte classes are many (DFA_MAX_CELLS) */
    /* DFA state sets */
    int32_t *set_pool;
    int64_t set_pool_n, set_pool_cap;
    int64_t *set_off;         /* [n_dfa + 1] */
    int32_t *hash;            /* [hash_cap] dfa id, -1 */
    uint32_t hash_cap;
    uint32_t *set_h;          /* [n_dfa] */
    /* DFA under construction */
    int32_t n_dfa, cap_dfa, n_classes;
    int32_t *trans;           /* [cap_dfa * n_classes] */
    uint8_t *final;
    int32_t *rule_of;
    ivec ref_rule, ref_ret, ref_from;
    const uint8_t *class_byte;
    bool oom, too_big;
} dfa_builder;

/* set (NFA states, duplicates allowed) -> its epsilon closure, sorted and
 * without duplicates: the identity of a DFA state. */
static void closure(dfa_builder *b, ivec *set) {
    b->cur_stamp++;
    b->stack.n = 0;
    for (int32_t i = 0; i < set->n; i++) {
        if (b->stamp[set->v[i]] == b->cur_stamp) continue; /* two edges into one state: once */
        b->stamp[set->v[i]] = b->cur_stamp;
        if (!ivec_push(&b->stack, set->v[i])) b->oom = true;
    }
    gram_spend(b->budget, set->n);
    set->n = 0;
    while (b->stack.n > 0) {
        int32_t s = b->stack.v[--b->stack.n];
        if (!ivec_push(set, s)) b->oom = true;
        gram_spend(b->budget, 1 + b->out_off[s + 1] - b->out_off[s]);
        for (int32_t k = b->out_off[s]; k < b->out_off[s + 1]; k++) {
            const nfa_edge *e = b->out[k];
            if (e->kind == NE_EPS && b->stamp[e->to] != b->cur_stamp) {
                b->stamp[e->to] = b->cur_stamp;
                if (!ivec_push(&b->stack, e->to)) b->oom = true;
            }
        }
    }
    qsort(set->v, (size_t)set->n, sizeof *set->v, cmp_i32);
    int64_t lg = 1;
    while (((int64_t)1 << lg) < set->n) lg++;
    gram_spend(b->budget, (int64_t)set->n * lg);
}

static uint32_t hash_set(const int32_t *v, int32_t n) {
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)v[i]) * 16777619u;
    return h ? h : 1;
}

/* The DFA state of a closed, sorted NFA set (added when new). */
static int32_t dfa_lookup(dfa_builder *b, const ivec *set, int32_t rule, int32_t accept, bool *added) {
    *added = false;
    gram_spend(b->budget, set->n);
    uint32_t h = hash_set(set->v, set->n);
    if (b->hash_cap && (uint32_t)(b->n_dfa + 1) * 2 <= b->hash_cap) {
        uint32_t i = h & (b->hash_cap - 1);
        while (b->hash[i] >= 0) {
            int32_t d = b->hash[i];
            if (b->set_h[d] == h && b->set_off[d + 1] - b->set_off[d] == set->n &&
                memcmp(b->set_pool + b->set_off[d], set->v, (size_t)set->n * sizeof *set->v) == 0 &&
                b->rule_of[d] == rule)
                return d;
            i = (i + 1) & (b->hash_cap - 1);
        }
    } else {
        uint32_t cap = b->hash_cap ? b->hash_cap * 2 : 1024;
        int32_t *nh = malloc(cap * sizeof *nh);
        if (!nh) {
            b->oom = true;
            return -1;
        }
        for (uint32_t i = 0; i < cap; i++) nh[i] = -1;
        for (int32_t d = 0; d < b->n_dfa; d++) {
            uint32_t i = b->set_h[d] & (cap - 1);
            while (nh[i] >= 0) i = (i + 1) & (cap - 1);
            nh[i] = d;
        }
        free(b->hash);
        b->hash = nh;
        b->hash_cap = cap;
        return dfa_lookup(b, set, rule, accept, added);
    }
    if (b->n_dfa >= b->max_states) {
        b->too_big = true;
        if (b->budget->stop == GRAM_BUDGET_OK) b->budget->stop = GRAM_BUDGET_STATES;
        return -1;
    }
    if (b->n_dfa == b->cap_dfa) {
        int32_t c = b->cap_dfa ? b->cap_dfa * 2 : 256;
        int32_t *t = realloc(b->trans, (size_t)c * (size_t)b->n_classes * sizeof *t);
        if (t) b->trans = t;
        uint8_t *fl = realloc(b->final, (size_t)c);
        if (fl) b->final = fl;
        int32_t *ro = realloc(b->rule_of, (size_t)c * sizeof *ro);
        if (ro) b->rule_of = ro;
        uint32_t *sh = realloc(b->set_h, (size_t)c * sizeof *sh);
        if (sh) b->set_h = sh;
        int64_t *so = realloc(b->set_off, (size_t)(c + 1) * sizeof *so);
        if (so) b->set_off = so;
        if (!t || !fl || !ro || !sh || !so) {
            b->oom = true;
            return -1;
        }
        b->cap_dfa = c;
        if (b->n_dfa == 0) b->set_off[0] = 0;
    }
    if (b->set_pool_n + set->n > b->set_pool_cap) {
        int64_t c = b->set_pool_cap ? b->set_pool_cap * 2 : 4096;
        while (c < b->set_pool_n + set->n) c *= 2;
        int32_t *p = realloc(b->set_pool, (size_t)c * sizeof *p);
        if (!p) {
            b->oom = true;
            return -1;
        }
        b->set_pool = p;
        b->set_pool_cap = c;
    }
    int32_t d = b->n_dfa++;
    memcpy(b->set_pool + b->set_pool_n, set->v, (size_t)set->n * sizeof *set->v);
    b->set_pool_n += set->n;
    b->set_off[d + 1] = b->set_pool_n;
    b->set_h[d] = h;
    b->rule_of[d] = rule;
    b->final[d] = 0;
    for (int32_t i = 0; i < set->n; i++)
        if (set->v[i] == accept) b->final[d] = 1;
    for (int32_t k = 0; k < b->n_classes; k++) b->trans[(size_t)d * (size_t)b->n_classes + (size_t)k] = -1;
    uint32_t i = h & (b->hash_cap - 1);
    while (b->hash[i] >= 0) i = (i + 1) & (b->hash_cap - 1);
    b->hash[i] = d;
    *added = true;
    return d;
}

/* Determinizes the rule whose NFA runs start -> accept; new DFA states get
 * ids from b->n_dfa on. ir_rule tags them. Returns the start state. */
static int32_t determinize(dfa_builder *b, int32_t start, int32_t accept, int32_t rule) {
    ivec set = {0}, edges = {0};
    if (!ivec_push(&set, start)) {
        b->oom = true;
        return -1;
    }
    closure(b, &set);
    bool added;
    int32_t first = b->n_dfa;
    int32_t d0 = dfa_lookup(b, &set, rule, accept, &added);
    for (int32_t d = first; d < b->n_dfa && !b->oom && !b->too_big; d++) {
        if (b->budget->stop != GRAM_BUDGET_OK) break;
        /* the byte and call edges leaving the set */
        edges.n = 0;
        for (int64_t k = b->set_off[d]; k < b->set_off[d + 1]; k++) {
            int32_t s = b->set_pool[k];
            for (int32_t j = b->out_off[s]; j < b->out_off[s + 1]; j++)
                if (b->out[j]->kind != NE_EPS && !ivec_push(&edges, j)) b->oom = true;
        }
        /* each class looks at every edge */
        if (!gram_spend(b->budget, (int64_t)(edges.n + 1) * b->n_classes)) break;
        for (int32_t cl = 0; cl < b->n_classes; cl++) {
            unsigned by = b->class_byte[cl];
            set.n = 0;
            for (int32_t k = 0; k < edges.n; k++) {
                const nfa_edge *e = b->out[edges.v[k]];
                if (e->kind == NE_BYTES && (b->ir->sets[e->arg][by >> 3] >> (by & 7) & 1))
                    if (!ivec_push(&set, e->to)) b->oom = true;
            }
            if (set.n == 0) continue;
            closure(b, &set);
            int32_t t = dfa_lookup(b, &set, rule, accept, &added);
            if (t < 0) break;
            b->trans[(size_t)d * (size_t)b->n_classes + (size_t)cl] = t;
        }
        /* calls, one DFA edge per callee */
        for (int32_t k = 0; k < edges.n; k++) {
            const nfa_edge *e = b->out[edges.v[k]];
            if (e->kind != NE_REF) continue;
            bool seen = false;
            for (int32_t q = 0; q < k && !seen; q++) {
                const nfa_edge *p = b->out[edges.v[q]];
                seen = p->kind == NE_REF && p->arg == e->arg;
            }
            if (seen) continue;
            set.n = 0;
            for (int32_t q = k; q < edges.n; q++) {
                const nfa_edge *p = b->out[edges.v[q]];
                if (p->kind == NE_REF && p->arg == e->arg && !ivec_push(&set, p->to)) b->oom = true;
            }
            closure(b, &set);
            int32_t t = dfa_lookup(b, &set, rule, accept, &added);
            if (t < 0) break;
            if (!ivec_push(&b->ref_from, d) || !ivec_push(&b->ref_rule, e->arg) || !ivec_push(&b->ref_ret, t))
                b->oom = true;
        }
    }
    free(set.v);
    free(edges.v);
    return d0;
}

/* ---------------------------------------------------------------------------
 * Analyses on the DFA
 * ------------------------------------------------------------------------- */

static bool has_byte(const uint8_t *set, unsigned b) { return set[b >> 3] >> (b & 7) & 1; }

/* Drops states that cannot reach their rule's end and calls of rules that
 * derive nothing, so every state the matcher keeps can still be completed. */
static int prune_dead(gram_auto *a, gram_budget *budget, pdl_error *err) {
    int32_t S = a->n_states, C = a->n_classes;
    bool *live = calloc((size_t)S, 1);
    bool *prod = calloc((size_t)a->n_rules, 1);
    if (!live || !prod) {
        free(live);
        free(prod);
        return err_fail(err, "grammar: out of memory");
    }
    for (bool changed = true; changed;) {
        changed = false;
        if (!gram_spend(budget, (int64_t)S * C + a->ref_off[S])) {
            free(live);
            free(prod);
            return gram_budget_fail(budget, err);
        }
        for (int32_t s = S - 1; s >= 0; s--) {
            if (live[s]) continue;
            bool l = a->flags[s] & GS_FINAL;
            for (int32_t k = 0; !l && k < C; k++) {
                int32_t t = a->trans[(size_t)s * C + k];
                l = t >= 0 && live[t];
            }
            for (int32_t k = a->ref_off[s]; !l && k < a->ref_off[s + 1]; k++)
                l = prod[a->refs[k].rule] && live[a->refs[k].ret];
            if (l) {
                live[s] = true;
                changed = true;
                int32_t r = a->state_rule[s];
                if (a->rule_start[r] == s) prod[r] = true;
            }
        }
    }
    int rc = 0;
    if (!prod[a->root]) {
        rc = err_fail(err, "grammar: rule '%s' matches no string at all (every path loops or dead-ends)",
                      a->rule_name[a->root]);
    } else {
        int32_t w = 0;
        int32_t *new_off = a->ref_off;
        for (int32_t s = 0; s < S; s++) {
            for (int32_t k = 0; k < C; k++) {
                int32_t *t = &a->trans[(size_t)s * C + k];
                if (*t >= 0 && !live[*t]) *t = -1;
            }
            int32_t lo = a->ref_off[s], hi = a->ref_off[s + 1];
            new_off[s] = w;
            for (int32_t k = lo; k < hi; k++)
                if (live[s] && prod[a->refs[k].rule] && live[a->refs[k].ret]) a->refs[w++] = a->refs[k];
        }
        new_off[S] = w;
        for (int32_t s = 0; s < S; s++)
            if (!live[s]) a->flags[s] &= (uint8_t)~GS_FINAL;
    }
    free(live);
    free(prod);
    return rc;
}

/* Moore's partition refinement: block[s] ends as the class of s among the
 * states that behave alike for max_rounds steps (a byte or a call each;
 * unbounded: until nothing splits, i.e. the same future). Signature of a
 * state: its class, end flag, rule, the classes its byte classes lead to, and
 * its calls (callee, class of the return state; exact_ret[callee]: the return
 * state itself, for callees that may read nothing, whose return state is
 * then reached within the same step). Returns 1 when max_work (states and
 * edges visited) cut it short (block[] is then unusable), 0 done, -1 out of
 * memory or budget (the budget is charged the same work). */
static int refine(const gram_auto *a, int64_t max_rounds, int64_t max_work, const uint8_t *exact_ret, int32_t *block,
                  int32_t *n_out, gram_budget *budget, pdl_error *err) {
    int32_t S = a->n_states, C = a->n_classes;
    int32_t *next = malloc((size_t)S * sizeof *next);
    int32_t *table = NULL, *table_state = NULL;
    int32_t *row_off = malloc((size_t)(S + 1) * sizeof *row_off);
    int32_t *row_cls = NULL, *row_to = NULL;
    uint32_t cap = 1;
    while (cap < (uint32_t)S * 2) cap *= 2;
    table = malloc(cap * sizeof *table);
    table_state = malloc((size_t)S * sizeof *table_state);
    int rc = 0;
    if (!next || !table || !table_state || !row_off) {
        rc = err_fail(err, "grammar: out of memory");
        goto done;
    }
    /* the transitions that exist, row by row: most states have a few */
    row_off[0] = 0;
    for (int32_t s = 0; s < S; s++) {
        int32_t k = 0;
        for (int32_t c = 0; c < C; c++) k += a->trans[(size_t)s * C + c] >= 0;
        row_off[s + 1] = row_off[s] + k;
    }
    row_cls = malloc((size_t)(row_off[S] ? row_off[S] : 1) * sizeof *row_cls);
    row_to = malloc((size_t)(row_off[S] ? row_off[S] : 1) * sizeof *row_to);
    if (!row_cls || !row_to) {
        rc = err_fail(err, "grammar: out of memory");
        goto done;
    }
    for (int32_t s = 0, w = 0; s < S; s++)
        for (int32_t c = 0; c < C; c++) {
            int32_t t = a->trans[(size_t)s * C + c];
            if (t >= 0) row_cls[w] = c, row_to[w++] = t;
        }
    for (int32_t s = 0; s < S; s++) block[s] = 0;
    int32_t n_blocks = 1;
    int64_t work = 0, per_round = (int64_t)S * 4 + row_off[S] + a->ref_off[S];
    for (int64_t round = 0; round < max_rounds; round++) {
        work += per_round;
        if (work > max_work) {
            rc = 1; /* too much: the caller keeps what it has */
            goto done;
        }
        if (!gram_spend(budget, per_round)) {
            rc = gram_budget_fail(budget, err);
            goto done;
        }
        for (uint32_t i = 0; i < cap; i++) table[i] = -1;
        int32_t n_new = 0;
#define RET_ID(r) (exact_ret && exact_ret[(r).rule] ? S + (r).ret : block[(r).ret])
        for (int32_t s = 0; s < S; s++) {
            uint64_t h = 1469598103934665603ULL;
#define MIX(x) (h = (h ^ (uint32_t)(x)) * 1099511628211ULL)
            MIX(block[s]);
            MIX(a->flags[s] & GS_FINAL);
            MIX(a->state_rule[s]);
            for (int32_t k = row_off[s]; k < row_off[s + 1]; k++) {
                MIX(row_cls[k]);
                MIX(block[row_to[k]]);
            }
            for (int32_t k = a->ref_off[s]; k < a->ref_off[s + 1]; k++) {
                MIX(a->refs[k].rule);
                MIX(RET_ID(a->refs[k]));
            }
#undef MIX
            uint32_t i = (uint32_t)h & (cap - 1);
            int32_t found = -1;
            while (table[i] >= 0) {
                int32_t o = table_state[table[i]];
                bool same = block[o] == block[s] && ((a->flags[o] ^ a->flags[s]) & GS_FINAL) == 0 &&
                            a->state_rule[o] == a->state_rule[s] &&
                            row_off[o + 1] - row_off[o] == row_off[s + 1] - row_off[s] &&
                            a->ref_off[o + 1] - a->ref_off[o] == a->ref_off[s + 1] - a->ref_off[s];
                for (int32_t k = 0; same && k < row_off[s + 1] - row_off[s]; k++)
                    same = row_cls[row_off[o] + k] == row_cls[row_off[s] + k] &&
                           block[row_to[row_off[o] + k]] == block[row_to[row_off[s] + k]];
                for (int32_t k = 0; same && k < a->ref_off[s + 1] - a->ref_off[s]; k++) {
                    const gram_ref *p = &a->refs[a->ref_off[o] + k], *q = &a->refs[a->ref_off[s] + k];
                    same = p->rule == q->rule && RET_ID(*p) == RET_ID(*q);
                }
                if (same) {
                    found = table[i];
                    break;
                }
                i = (i + 1) & (cap - 1);
            }
#undef RET_ID
            if (found < 0) {
                found = n_new++;
                table[i] = found;
                table_state[found] = s;
            }
            next[s] = found;
        }
        memcpy(block, next, (size_t)S * sizeof *block);
        bool stable = n_new == n_blocks;
        n_blocks = n_new;
        if (stable) break;
    }
    *n_out = n_blocks;
done:
    free(next);
    free(table);
    free(table_state);
    free(row_off);
    free(row_cls);
    free(row_to);
    return rc;
}

/* Calls in a canonical order (by callee), so equal states compare equal. */
static void sort_refs(gram_auto *a) {
    for (int32_t s = 0; s < a->n_states; s++)
        for (int32_t k = a->ref_off[s] + 1; k < a->ref_off[s + 1]; k++)
            for (int32_t q = k; q > a->ref_off[s] && a->refs[q - 1].rule > a->refs[q].rule; q--) {
                gram_ref t = a->refs[q];
                a->refs[q] = a->refs[q - 1];
                a->refs[q - 1] = t;
            }
}

/* Merges states with the same future: fewer states, so fewer token
 * classifications to compute (a JSON string's first and later characters,
 * for one). Skipped when the work would exceed a bound. */
static int minimize(gram_auto *a, gram_budget *budget, pdl_error *err) {
    int32_t S = a->n_states, C = a->n_classes;
    sort_refs(a);
    int32_t *block = malloc((size_t)S * sizeof *block), n_blocks = S;
    if (!block) return err_fail(err, "grammar: out of memory");
    int r = refine(a, INT64_MAX, 30000000, NULL, block, &n_blocks, budget, err);
    if (r != 0 || n_blocks == S) {
        free(block);
        return r < 0 ? -1 : 0;
    }
    /* the quotient automaton: each block's smallest state stands for it */
    int32_t *rep = malloc((size_t)n_blocks * sizeof *rep);
    int32_t *trans = malloc((size_t)n_blocks * (size_t)C * sizeof *trans);
    uint8_t *flags = malloc((size_t)n_blocks);
    int32_t *state_rule = malloc((size_t)n_blocks * sizeof *state_rule);
    int32_t *ref_off = malloc((size_t)(n_blocks + 1) * sizeof *ref_off);
    gram_ref *refs = malloc((size_t)(a->ref_off[S] ? a->ref_off[S] : 1) * sizeof *refs);
    if (!rep || !trans || !flags || !state_rule || !ref_off || !refs) {
        free(rep);
        free(trans);
        free(flags);
        free(state_rule);
        free(ref_off);
        free(refs);
        free(block);
        return err_fail(err, "grammar: out of memory");
    }
    for (int32_t s = S - 1; s >= 0; s--) rep[block[s]] = s;
    int32_t w = 0;
    for (int32_t b = 0; b < n_blocks; b++) {
        int32_t s = rep[b];
        for (int32_t c = 0; c < C; c++) {
            int32_t t = a->trans[(size_t)s * C + c];
            trans[(size_t)b * C + c] = t < 0 ? -1 : block[t];
        }
        flags[b] = a->flags[s];
        state_rule[b] = a->state_rule[s];
        ref_off[b] = w;
        for (int32_t k = a->ref_off[s]; k < a->ref_off[s + 1]; k++)
            refs[w++] = (gram_ref){a->refs[k].rule, block[a->refs[k].ret]};
    }
    ref_off[n_blocks] = w;
    for (int32_t r2 = 0; r2 < a->n_rules; r2++) a->rule_start[r2] = block[a->rule_start[r2]];
    free(a->trans);
    free(a->flags);
    free(a->state_rule);
    free(a->ref_off);
    free(a->refs);
    a->trans = trans;
    a->flags = flags;
    a->state_rule = state_rule;
    a->ref_off = ref_off;
    a->refs = refs;
    a->n_states = n_blocks;
    free(rep);
    free(block);
    return 0;
}

int gram_auto_walk_classes(const gram_auto *a, int depth, int32_t *cls, int32_t *n_cls, gram_budget *budget,
                           pdl_error *err) {
    budget->stage = "grouping states that classify tokens alike";
    int r = refine(a, depth, 200000000, a->rule_nullable, cls, n_cls, budget, err);
    if (r < 0) return -1;
    if (r > 0) { /* too much work: every state its own class */
        for (int32_t s = 0; s < a->n_states; s++) cls[s] = s;
        *n_cls = a->n_states;
    }
    return 0;
}

/* nullable[r]: rule r can match the empty string; null_state[s]: from s the
 * rule can end without a byte. */
static bool nullability(const gram_auto *a, bool *nullable, bool *null_state, gram_budget *budget) {
    for (bool changed = true; changed;) {
        changed = false;
        if (!gram_spend(budget, (int64_t)a->n_states + a->ref_off[a->n_states])) return false;
        for (int32_t s = a->n_states - 1; s >= 0; s--) {
            if (null_state[s]) continue;
            bool n = a->flags[s] & GS_FINAL;
            for (int32_t k = a->ref_off[s]; !n && k < a->ref_off[s + 1]; k++)
                n = nullable[a->refs[k].rule] && null_state[a->refs[k].ret];
            if (n) {
                null_state[s] = true;
                changed = true;
                int32_t r = a->state_rule[s];
                if (a->rule_start[r] == s) nullable[r] = true;
            }
        }
    }
    return true;
}

/* A rule that can call itself before reading a byte would grow the stack
 * forever; such grammars are refused, naming the cycle. The calls a rule
 * makes before its first byte are found per rule (a walk over its own
 * states through callees that may read nothing), then a depth-first search
 * looks for a cycle among them: time and memory in the states and calls,
 * never rules squared. */
static int check_left_recursion(const gram_auto *a, const bool *nullable, gram_budget *budget, pdl_error *err) {
    int32_t R = a->n_rules, S = a->n_states;
    uint32_t *seen = calloc((size_t)S, sizeof *seen);
    int32_t *off = calloc((size_t)R + 1, sizeof *off);
    ivec stack = {0}, from = {0}, to = {0};
    int32_t *adj = NULL, *fill = NULL, *path = NULL, *iter = NULL;
    uint8_t *colour = NULL;
    int rc = 0;
    if (!seen || !off) goto oom;
    for (int32_t r = 0; r < R; r++) {
        stack.n = 0;
        if (!ivec_push(&stack, a->rule_start[r])) goto oom;
        seen[a->rule_start[r]] = (uint32_t)r + 1;
        while (stack.n > 0) {
            int32_t s = stack.v[--stack.n];
            if (!gram_spend(budget, 1 + a->ref_off[s + 1] - a->ref_off[s])) {
                rc = gram_budget_fail(budget, err);
                goto done;
            }
            for (int32_t k = a->ref_off[s]; k < a->ref_off[s + 1]; k++) {
                if (!ivec_push(&from, r) || !ivec_push(&to, a->refs[k].rule)) goto oom;
                int32_t t = a->refs[k].ret;
                if (nullable[a->refs[k].rule] && seen[t] != (uint32_t)r + 1) {
                    seen[t] = (uint32_t)r + 1;
                    if (!ivec_push(&stack, t)) goto oom;
                }
            }
        }
    }
    /* the calls by caller (CSR) */
    adj = malloc((size_t)(from.n ? from.n : 1) * sizeof *adj);
    fill = malloc((size_t)R * sizeof *fill);
    colour = calloc((size_t)R, 1);
    path = malloc((size_t)(R + 1) * sizeof *path);
    iter = calloc((size_t)R, sizeof *iter);
    if (!adj || !fill || !colour || !path || !iter) goto oom;
    for (int32_t k = 0; k < from.n; k++) off[from.v[k] + 1]++;
    for (int32_t r = 0; r < R; r++) off[r + 1] += off[r];
    memcpy(fill, off, (size_t)R * sizeof *fill);
    for (int32_t k = 0; k < from.n; k++) adj[fill[from.v[k]]++] = to.v[k];
    /* a cycle: depth-first search with colours */
    for (int32_t r0 = 0; r0 < R && rc == 0; r0++) {
        if (colour[r0]) continue;
        int32_t depth = 0;
        path[depth++] = r0;
        colour[r0] = 1;
        iter[r0] = off[r0];
        while (depth > 0 && rc == 0) {
            int32_t u = path[depth - 1];
            if (iter[u] >= off[u + 1]) {
                colour[u] = 2;
                depth--;
                continue;
            }
            int32_t v = adj[iter[u]++];
            if (colour[v] == 1) {
                char msg[512];
                size_t w = 0;
                int32_t first = 0;
                while (path[first] != v) first++;
                for (int32_t k = first; k < depth && w < sizeof msg - 64; k++)
                    w += (size_t)snprintf(msg + w, sizeof msg - w, "%s -> ", a->rule_name[path[k]]);
                snprintf(msg + w, sizeof msg - w, "%s", a->rule_name[v]);
                rc = err_fail(err, "grammar: left recursion (a rule reaches itself before reading anything): %s",
                              msg);
            } else if (colour[v] == 0) {
                colour[v] = 1;
                iter[v] = off[v];
                path[depth++] = v;
            }
        }
    }
    goto done;
oom:
    rc = err_fail(err, "grammar: out of memory");
done:
    free(seen);
    free(off);
    free(adj);
    free(fill);
    free(colour);
    free(path);
    free(iter);
    free(stack.v);
    free(from.v);
    free(to.v);
    return rc;
}

static bool compute_follow(gram_auto *a, const bool *nullable, const bool *null_state, uint8_t (*first)[32],
                           gram_budget *budget) {
    int32_t S = a->n_states, C = a->n_classes;
    for (int32_t s = 0; s < S; s++) {
        memset(first[s], 0, 32);
        for (int b = 0; b < 256; b++)
            if (a->trans[(size_t)s * C + a->byte_class[b]] >= 0) first[s][b >> 3] |= (uint8_t)(1u << (b & 7));
    }
    if (!gram_spend(budget, (int64_t)S * 256)) return false;
    for (bool changed = true; changed;) {
        changed = false;
        if (!gram_spend(budget, (int64_t)S + a->ref_off[S] * 16)) return false;
        for (int32_t s = S - 1; s >= 0; s--) {
            for (int32_t k = a->ref_off[s]; k < a->ref_off[s + 1]; k++) {
                const uint8_t *src[2] = {first[a->rule_start[a->refs[k].rule]],
                                         nullable[a->refs[k].rule] ? first[a->refs[k].ret] : NULL};
                for (int q = 0; q < 2; q++) {
                    if (!src[q]) continue;
                    for (int i = 0; i < 32; i++) {
                        uint8_t v = first[s][i] | src[q][i];
                        if (v != first[s][i]) {
                            first[s][i] = v;
                            changed = true;
                        }
                    }
                }
            }
        }
    }
    memset(a->follow, 0, (size_t)a->n_rules * 32);
    for (bool changed = true; changed;) {
        changed = false;
        if (!gram_spend(budget, (int64_t)S + a->ref_off[S] * 16)) return false;
        for (int32_t s = 0; s < S; s++) {
            for (int32_t k = a->ref_off[s]; k < a->ref_off[s + 1]; k++) {
                uint8_t *f = a->follow[a->refs[k].rule];
                int32_t t = a->refs[k].ret;
                for (int i = 0; i < 32; i++) {
                    uint8_t v = f[i] | first[t][i] | (null_state[t] ? a->follow[a->state_rule[s]][i] : 0);
                    if (v != f[i]) {
                        f[i] = v;
                        changed = true;
                    }
                }
            }
        }
    }
    return true;
}

/* dist[s]: fewest bytes from s to the end of its rule, calls counted by
 * their callee's shortest string (Bellman-Ford to a fixed point). */
static bool compute_dist(gram_auto *a, gram_budget *budget) {
    int32_t S = a->n_states, C = a->n_classes;
    const int32_t INF = INT32_MAX / 4;
    for (int32_t s = 0; s < S; s++) a->dist[s] = (a->flags[s] & GS_FINAL) ? 0 : INF;
    for (bool changed = true; changed;) {
        changed = false;
        if (!gram_spend(budget, (int64_t)S * C + a->ref_off[S])) return false;
        for (int32_t s = S - 1; s >= 0; s--) {
            int32_t best = a->dist[s];
            for (int32_t k = 0; k < C; k++) {
                int32_t t = a->trans[(size_t)s * C + k];
                if (t >= 0 && a->dist[t] + 1 < best) best = a->dist[t] + 1;
            }
            for (int32_t k = a->ref_off[s]; k < a->ref_off[s + 1]; k++) {
                int32_t d = a->dist[a->rule_start[a->refs[k].rule]] + a->dist[a->refs[k].ret];
                if (d < best) best = d;
            }
            if (best < a->dist[s]) {
                a->dist[s] = best;
                changed = true;
            }
        }
    }
    return true;
}

/* ---------------------------------------------------------------------------
 * The whole compilation
 * ------------------------------------------------------------------------- */

static void rule_refs(void *user, int32_t rule, int64_t mult) { collect_ref(user, rule, mult); }

/* Byte classes: bytes that every byte set of the IR treats alike. */
static int32_t byte_classes(const gram_ir *ir, uint8_t *cls, uint8_t *rep) {
    memset(cls, 0, 256);
    int32_t n = 1;
    for (int32_t s = 0; s < ir->n_sets; s++) {
        int16_t map_in[256], map_out[256];
        for (int i = 0; i < 256; i++) map_in[i] = map_out[i] = -1;
        int32_t next = 0;
        uint8_t out[256];
        for (int b = 0; b < 256; b++) {
            int16_t *m = has_byte(ir->sets[s], (unsigned)b) ? map_in : map_out;
            if (m[cls[b]] < 0) m[cls[b]] = (int16_t)next++;
            out[b] = (uint8_t)m[cls[b]];
        }
        memcpy(cls, out, 256);
        n = next;
    }
    for (int b = 255; b >= 0; b--) rep[cls[b]] = (uint8_t)b;
    return n;
}

int gram_auto_build(gram_auto *a, const gram_ir *ir, gram_budget *budget, pdl_error *err) {
    memset(a, 0, sizeof *a);
    if (ir->oom) return err_fail(err, "grammar: out of memory");
    if (ir->root < 0 || ir->root >= ir->n_rules) return err_fail(err, "grammar: no root rule");
    int32_t R = ir->n_rules;
    for (int32_t r = 0; r < R; r++)
        if (ir->rules[r].body < 0) return err_fail(err, "grammar: rule '%s' is used but not defined", ir->rules[r].name);

    compiler c = {.ir = ir, .err = err};
    ivec *out = calloc((size_t)R, sizeof *out);
    c.reachable = calloc((size_t)R, 1);
    c.recursive = calloc((size_t)R, 1);
    c.inlined = calloc((size_t)R, 1);
    c.size = calloc((size_t)R, sizeof *c.size);
    c.mult = calloc((size_t)R, sizeof *c.mult);
    int32_t *index = malloc((size_t)R * sizeof *index), *low = malloc((size_t)R * sizeof *low);
    bool *on_stack = calloc((size_t)R, 1);
    int32_t *stk = malloc((size_t)R * sizeof *stk), *order = malloc((size_t)R * sizeof *order);
    int32_t *rule_map = malloc((size_t)R * sizeof *rule_map);
    nfa f = {.budget = budget};
    dfa_builder b = {.budget = budget};
    int rc = -1;
    budget->stage = "building the automaton";
    if (!out || !c.reachable || !c.recursive || !c.inlined || !c.size || !c.mult || !index || !low || !on_stack ||
        !stk || !order || !rule_map) {
        err_fail(err, "grammar: out of memory");
        goto done;
    }
    for (int32_t r = 0; r < R; r++) each_ref(ir, ir->rules[r].body, 1, rule_refs, &out[r]);

    /* reachable rules from the root */
    {
        ivec q = {0};
        ivec_push(&q, ir->root);
        c.reachable[ir->root] = true;
        for (int32_t i = 0; i < q.n; i++)
            for (int32_t k = 0; k < out[q.v[i]].n; k++) {
                int32_t t = out[q.v[i]].v[k];
                if (!c.reachable[t]) {
                    c.reachable[t] = true;
                    if (!ivec_push(&q, t)) {
                        free(q.v);
                        err_fail(err, "grammar: out of memory");
                        goto done;
                    }
                }
            }
        free(q.v);
    }

    /* recursion (strongly connected components) and an order with callees first */
    for (int32_t r = 0; r < R; r++) index[r] = -1;
    scc_ctx sc = {.n = R, .out = out, .index = index, .low = low, .on_stack = on_stack, .stack = stk,
                  .recursive = c.recursive, .order = order};
    for (int32_t r = 0; r < R; r++)
        if (c.reachable[r] && index[r] < 0) scc_visit(&sc, r);

    /* multiplicity of each rule's uses */
    {
        mult_ctx mc = {c.mult};
        for (int32_t r = 0; r < R; r++)
            if (c.reachable[r]) each_ref(ir, ir->rules[r].body, 1, note_mult, &mc);
    }

    /* inlining decisions, callees first: build each candidate alone to learn its size */
    for (int32_t i = 0; i < sc.n_order; i++) {
        int32_t r = order[i];
        if (r == ir->root || c.recursive[r] || (ir->rules[r].flags & GX_RULE_NOINLINE)) continue;
        nfa probe = {.budget = budget};
        int32_t s0 = nfa_state(&probe), s1 = nfa_state(&probe);
        build(&c, &probe, ir->rules[r].body, s0, s1);
        bool big = probe.too_big;
        if (probe.oom || budget->stop != GRAM_BUDGET_OK) {
            nfa_free(&probe);
            if (budget->stop != GRAM_BUDGET_OK) gram_budget_fail(budget, err);
            else err_fail(err, "grammar: out of memory");
            goto done;
        }
        c.size[r] = probe.n_states;
        nfa_free(&probe);
        /* a rule repeated by a counted repetition (array items) stays a rule
         * unless tiny: each inlined copy would be its own states, each needing
         * its own token classification */
        int64_t cost = (int64_t)c.size[r] * (c.mult[r] > 0 ? c.mult[r] : 1);
        c.inlined[r] = !big && cost <= INLINE_MAX_STATES && (c.mult[r] <= 1 || c.size[r] <= INLINE_REPEATED_MAX);
    }

    /* the NFA of every kept rule */
    int32_t n_kept = 0;
    for (int32_t r = 0; r < R; r++) rule_map[r] = (c.reachable[r] && !c.inlined[r]) ? n_kept++ : -1;
    int32_t *nfa_start = malloc((size_t)n_kept * sizeof *nfa_start);
    int32_t *nfa_accept = malloc((size_t)n_kept * sizeof *nfa_accept);
    if (!nfa_start || !nfa_accept) {
        free(nfa_start);
        free(nfa_accept);
        err_fail(err, "grammar: out of memory");
        goto done;
    }
    for (int32_t r = 0; r < R; r++) {
        if (rule_map[r] < 0) continue;
        int32_t s0 = nfa_state(&f), s1 = nfa_state(&f);
        nfa_start[rule_map[r]] = s0;
        nfa_accept[rule_map[r]] = s1;
        build(&c, &f, ir->rules[r].body, s0, s1);
        if (budget->stop != GRAM_BUDGET_OK) {
            free(nfa_start);
            free(nfa_accept);
            gram_budget_fail(budget, err);
            goto done;
        }
        if (f.too_big) {
            free(nfa_start);
            free(nfa_accept);
            err_fail(err, "grammar too large: rule '%s' needs more than %d automaton states", ir->rules[r].name,
                     NFA_MAX_STATES);
            goto done;
        }
    }
    if (f.oom) {
        free(nfa_start);
        free(nfa_accept);
        err_fail(err, "grammar: out of memory");
        goto done;
    }

    /* subset construction */
    budget->stage = "determinizing the automaton";
    b.f = &f;
    b.ir = ir;
    if (!gram_spend(budget, (int64_t)ir->n_sets * 256)) {
        free(nfa_start);
        free(nfa_accept);
        gram_budget_fail(budget, err);
        goto done;
    }
    b.n_classes = byte_classes(ir, a->byte_class, a->class_byte);
    b.max_states = budget->max_states;
    if ((int64_t)b.max_states * b.n_classes > DFA_MAX_CELLS) {
        b.max_states = (int32_t)(DFA_MAX_CELLS / b.n_classes);
        budget->max_states = b.max_states; /* the message names the limit that applied */
    }
    b.class_byte = a->class_byte;
    b.out_off = calloc((size_t)f.n_states + 1, sizeof *b.out_off);
    b.out = malloc((size_t)(f.n_e ? f.n_e : 1) * sizeof *b.out);
    b.stamp = calloc((size_t)f.n_states, sizeof *b.stamp);
    if (!b.out_off || !b.out || !b.stamp) {
        free(nfa_start);
        free(nfa_accept);
        err_fail(err, "grammar: out of memory");
        goto done;
    }
    for (int32_t k = 0; k < f.n_e; k++) b.out_off[f.e[k].from + 1]++;
    for (int32_t s = 0; s < f.n_states; s++) b.out_off[s + 1] += b.out_off[s];
    {
        int32_t *fill = malloc((size_t)f.n_states * sizeof *fill);
        if (!fill) {
            free(nfa_start);
            free(nfa_accept);
            err_fail(err, "grammar: out of memory");
            goto done;
        }
        memcpy(fill, b.out_off, (size_t)f.n_states * sizeof *fill);
        for (int32_t k = 0; k < f.n_e; k++) b.out[fill[f.e[k].from]++] = &f.e[k];
        free(fill);
    }
    a->n_rules = n_kept;
    a->rule_start = malloc((size_t)n_kept * sizeof *a->rule_start);
    a->rule_name = calloc((size_t)n_kept, sizeof *a->rule_name);
    if (!a->rule_start || !a->rule_name) {
        free(nfa_start);
        free(nfa_accept);
        err_fail(err, "grammar: out of memory");
        goto done;
    }
    for (int32_t r = 0; r < R; r++) {
        if (rule_map[r] < 0) continue;
        int32_t k = rule_map[r];
        a->rule_name[k] = strdup(ir->rules[r].name);
        a->rule_start[k] = determinize(&b, nfa_start[k], nfa_accept[k], k);
        if (budget->stop != GRAM_BUDGET_OK) {
            free(nfa_start);
            free(nfa_accept);
            gram_budget_fail(budget, err);
            goto done;
        }
        if (b.oom || !a->rule_name[k]) break;
    }
    free(nfa_start);
    free(nfa_accept);
    if (b.oom) {
        err_fail(err, "grammar: out of memory");
        goto done;
    }

    /* the automaton's arrays */
    int32_t S = b.n_dfa, C = b.n_classes;
    a->n_states = S;
    a->n_classes = C;
    a->root = rule_map[ir->root];
    a->trans = b.trans;
    b.trans = NULL;
    a->flags = calloc((size_t)S, 1);
    a->state_rule = b.rule_of;
    b.rule_of = NULL;
    a->ref_off = calloc((size_t)S + 1, sizeof *a->ref_off);
    a->refs = malloc((size_t)(b.ref_from.n ? b.ref_from.n : 1) * sizeof *a->refs);
    a->follow = calloc((size_t)(n_kept ? n_kept : 1), 32);
    a->dist = malloc((size_t)S * sizeof *a->dist);
    if (!a->flags || !a->ref_off || !a->refs || !a->follow || !a->dist) {
        err_fail(err, "grammar: out of memory");
        goto done;
    }
    for (int32_t s = 0; s < S; s++) a->flags[s] = b.final[s] ? GS_FINAL : 0;
    /* refs were appended in order of their source state */
    for (int32_t k = 0; k < b.ref_from.n; k++) a->ref_off[b.ref_from.v[k] + 1]++;
    for (int32_t s = 0; s < S; s++) a->ref_off[s + 1] += a->ref_off[s];
    for (int32_t k = 0; k < b.ref_from.n; k++)
        a->refs[k] = (gram_ref){rule_map[b.ref_rule.v[k]], b.ref_ret.v[k]};

    budget->stage = "minimizing the automaton";
    if (prune_dead(a, budget, err) != 0) goto done;
    if (minimize(a, budget, err) != 0) goto done;
    S = a->n_states;
    budget->stage = "analysing the automaton";

    bool *nullable = calloc((size_t)n_kept, 1), *null_state = calloc((size_t)S, 1);
    uint8_t(*first)[32] = malloc((size_t)S * 32);
    if (!nullable || !null_state || !first) {
        free(nullable);
        free(null_state);
        free(first);
        err_fail(err, "grammar: out of memory");
        goto done;
    }
    bool within = nullability(a, nullable, null_state, budget);
    a->rule_nullable = malloc((size_t)(n_kept ? n_kept : 1));
    if (!within || !a->rule_nullable) {
        free(nullable);
        free(null_state);
        free(first);
        if (!within) gram_budget_fail(budget, err);
        else err_fail(err, "grammar: out of memory");
        goto done;
    }
    for (int32_t r = 0; r < n_kept; r++) a->rule_nullable[r] = nullable[r];
    int lr = check_left_recursion(a, nullable, budget, err);
    if (lr == 0 && !compute_follow(a, nullable, null_state, first, budget)) lr = gram_budget_fail(budget, err);
    free(nullable);
    free(null_state);
    free(first);
    if (lr != 0) goto done;
    if (!compute_dist(a, budget)) {
        gram_budget_fail(budget, err);
        goto done;
    }

    for (int32_t s = 0; s < S; s++) {
        bool bytes = false;
        for (int32_t k = 0; k < C && !bytes; k++) bytes = a->trans[(size_t)s * C + k] >= 0;
        if (bytes) a->flags[s] |= GS_BYTES;
        if (a->ref_off[s + 1] > a->ref_off[s]) a->flags[s] |= GS_REFS;
        if (a->flags[s] == GS_BYTES) a->flags[s] |= GS_SIMPLE;
    }
    a->wtrans = malloc((size_t)S * (size_t)C * sizeof *a->wtrans);
    if (!a->wtrans) {
        err_fail(err, "grammar: out of memory");
        goto done;
    }
    for (size_t k = 0; k < (size_t)S * (size_t)C; k++) {
        int32_t t = a->trans[k];
        a->wtrans[k] = t < 0 ? -1 : (t << 1) | ((a->flags[t] & GS_SIMPLE) ? 1 : 0);
    }
    rc = 0;

done:
    for (int32_t r = 0; out && r < R; r++) free(out[r].v);
    free(out);
    free(c.reachable);
    free(c.recursive);
    free(c.inlined);
    free(c.size);
    free(c.mult);
    free(index);
    free(low);
    free(on_stack);
    free(stk);
    free(order);
    free(rule_map);
    nfa_free(&f);
    free(b.out_off);
    free(b.out);
    free(b.stamp);
    free(b.stack.v);
    free(b.tmp.v);
    free(b.set_pool);
    free(b.set_off);
    free(b.hash);
    free(b.set_h);
    free(b.trans);
    free(b.final);
    free(b.rule_of);
    free(b.ref_rule.v);
    free(b.ref_ret.v);
    free(b.ref_from.v);
    if (rc != 0) gram_auto_free(a);
    return rc;
}

void gram_auto_free(gram_auto *a) {
    free(a->trans);
    free(a->wtrans);
    free(a->flags);
    free(a->ref_off);
    free(a->refs);
    free(a->state_rule);
    free(a->rule_start);
    for (int32_t r = 0; a->rule_name && r < a->n_rules; r++) free(a->rule_name[r]);
    free(a->rule_name);
    free(a->follow);
    free(a->dist);
    free(a->rule_nullable);
    memset(a, 0, sizeof *a);
}
