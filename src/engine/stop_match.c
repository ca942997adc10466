/*
 * stop_match.c - the Aho-Corasick automaton over a request's stop strings.
 *
 * Nodes are the trie of the stop strings (node 0 the root, the empty
 * prefix); a node's depth is the length of the prefix it stands for. Each
 * node's edges lie sorted by byte in one flat array (binary search per
 * move); a node's fail link is the longest proper suffix of its prefix that
 * is also a node. Moving on a byte follows fail links until an edge exists,
 * so the depth grows by at most one per byte and every fail link taken
 * shortens it: at most two moves per byte over the whole stream.
 */
#include "engine/stop_match.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

struct pdl_stop_matcher {
    atomic_int refs;
    int n_stops;
    int n_nodes;
    int32_t *depth;       /* [n_nodes] */
    int32_t *fail;        /* [n_nodes] */
    int32_t *out;         /* [n_nodes] the longest stop string ending at this node's prefix, or -1 */
    int32_t *edge_start;  /* [n_nodes + 1] node v's edges: edge_start[v] .. edge_start[v + 1] */
    uint8_t *edge_byte;   /* [n_nodes - 1] sorted within a node */
    int32_t *edge_to;     /* [n_nodes - 1] */
    size_t *len;          /* [n_stops] */
};

/* The child of v on byte c, or -1. */
static int32_t child(const stop_matcher *m, int32_t v, uint8_t c) {
    int32_t lo = m->edge_start[v], hi = m->edge_start[v + 1];
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (m->edge_byte[mid] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->edge_start[v + 1] && m->edge_byte[lo] == c ? m->edge_to[lo] : -1;
}

/* ---- building ---------------------------------------------------------------- */

/* The stop strings in byte order (a shorter one before the strings it
 * begins; equal ones by index), for building the trie in one pass. */
typedef struct sorted_stop {
    const uint8_t *s;
    size_t len;
    int index;
} sorted_stop;

static int stop_cmp(const void *pa, const void *pb) {
    const sorted_stop *a = pa, *b = pb;
    int c = memcmp(a->s, b->s, a->len < b->len ? a->len : b->len);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->index - b->index;
}

typedef struct edge_rec {
    int32_t parent, to;
    uint8_t byte;
} edge_rec;

void stop_matcher_free(stop_matcher *m) {
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    free(m->depth);
    free(m->fail);
    free(m->out);
    free(m->edge_start);
    free(m->edge_byte);
    free(m->edge_to);
    free(m->len);
    free(m);
}

stop_matcher *stop_matcher_ref(stop_matcher *m) {
    atomic_fetch_add(&m->refs, 1);
    return m;
}

int stop_matcher_count(const stop_matcher *m) { return m->n_stops; }

int stop_matcher_new(stop_matcher **out, const char *const *stops, const size_t *lens, int n, pdl_error *err) {
    *out = NULL;
    size_t total = 0, longest = 0;
    for (int i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : strlen(stops[i]);
        if (l == 0) return err_fail(err, "stop string %d is empty", i);
        total += l;
        if (l > longest) longest = l;
    }
    if (total >= INT32_MAX / 2) return err_fail(err, "stop strings: %zu bytes in all is too many", total);
    size_t cap = total + 1;
    stop_matcher *m = calloc(1, sizeof *m);
    sorted_stop *sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    int32_t *path = malloc((longest + 1) * sizeof *path);
    edge_rec *edges = NULL;
    int32_t *queue = NULL;
    if (m) {
        atomic_init(&m->refs, 1);
        m->n_stops = n;
        m->depth = malloc(cap * sizeof *m->depth);
        m->fail = calloc(cap, sizeof *m->fail);
        m->out = malloc(cap * sizeof *m->out);
        m->edge_start = calloc(cap + 1, sizeof *m->edge_start);
        m->edge_byte = malloc(cap * sizeof *m->edge_byte);
        m->edge_to = malloc(cap * sizeof *m->edge_to);
        m->len = malloc((size_t)(n ? n : 1) * sizeof *m->len);
        edges = malloc(cap * sizeof *edges);
        queue = malloc(cap * sizeof *queue);
    }
    if (!m || !sorted || !path || !m->depth || !m->fail || !m->out || !m->edge_start || !m->edge_byte ||
        !m->edge_to || !m->len || !edges || !queue) {
        stop_matcher_free(m);
        free(sorted), free(path), free(edges), free(queue);
        return err_fail(err, "stop strings: out of memory");
    }

    /* the trie, from the strings in order: string i shares its first
     * lcp(i - 1, i) nodes with the string before it (path[] holds that
     * string's nodes by depth) and adds the rest; time linear in the bytes
     * (a hash table of (node, byte) missed the cache on every byte) */
    for (int i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : strlen(stops[i]);
        m->len[i] = l;
        sorted[i] = (sorted_stop){(const uint8_t *)stops[i], l, i};
    }
    qsort(sorted, (size_t)n, sizeof *sorted, stop_cmp);
    m->n_nodes = 1;
    m->depth[0] = 0;
    m->out[0] = -1;
    path[0] = 0;
    for (int i = 0; i < n; i++) {
        const sorted_stop *x = &sorted[i];
        size_t common = 0;
        if (i > 0) {
            const sorted_stop *p = &sorted[i - 1];
            size_t lim = p->len < x->len ? p->len : x->len;
            while (common < lim && p->s[common] == x->s[common]) common++;
        }
        for (size_t k = common; k < x->len; k++) {
            int32_t v = path[k], w = m->n_nodes++;
            m->depth[w] = m->depth[v] + 1;
            m->out[w] = -1;
            edges[w - 1] = (edge_rec){.parent = v, .to = w, .byte = x->s[k]};
            path[k + 1] = w;
        }
        int32_t v = path[x->len];
        if (m->out[v] < 0) m->out[v] = x->index; /* a repeated stop string keeps its first index */
    }
    free(sorted);
    free(path);

    /* edges by node: nodes were made in the strings' order, so a node's
     * children came out in byte order; a stable counting sort by parent
     * keeps it */
    int n_edges = m->n_nodes - 1;
    for (int e = 0; e < n_edges; e++) m->edge_start[edges[e].parent + 1]++;
    for (int v = 0; v < m->n_nodes; v++) m->edge_start[v + 1] += m->edge_start[v];
    for (int e = 0; e < n_edges; e++) {
        int32_t v = edges[e].parent;
        int32_t slot = m->edge_start[v] + m->fail[v]++; /* fail[] counts the edges placed (zeroed; set below) */
        m->edge_byte[slot] = edges[e].byte;
        m->edge_to[slot] = edges[e].to;
    }
    free(edges);

    /* fail links and outputs, breadth first (a fail link is shallower) */
    int head = 0, tail = 0;
    m->fail[0] = 0;
    queue[tail++] = 0;
    while (head < tail) {
        int32_t u = queue[head++];
        for (int32_t e = m->edge_start[u]; e < m->edge_start[u + 1]; e++) {
            int32_t v = m->edge_to[e];
            uint8_t c = m->edge_byte[e];
            int32_t f = 0;
            if (u != 0) {
                f = m->fail[u];
                int32_t w;
                while ((w = child(m, f, c)) < 0 && f != 0) f = m->fail[f];
                f = w >= 0 ? w : 0;
            }
            m->fail[v] = f;
            if (m->out[v] < 0) m->out[v] = m->out[f];
            queue[tail++] = v;
        }
    }
    free(queue);
    *out = m;
    return 0;
}

/* ---- matching ------------------------------------------------------------------ */

bool stop_matcher_feed(const stop_matcher *m, int32_t *state, const char *text, size_t n, stop_hit *hit,
                       uint64_t *steps) {
    int32_t s = *state;
    uint64_t moves = 0;
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)text[i];
        int32_t w;
        while ((w = child(m, s, c)) < 0 && s != 0) {
            s = m->fail[s];
            moves++;
        }
        s = w >= 0 ? w : 0;
        moves++;
        if (m->out[s] >= 0) {
            hit->stop = m->out[s];
            hit->len = m->len[hit->stop];
            hit->end = i + 1;
            found = true;
            break;
        }
    }
    *state = s;
    if (steps) *steps += moves;
    return found;
}

size_t stop_matcher_hold(const stop_matcher *m, int32_t state) { return (size_t)m->depth[state]; }

int pdl_stop_matcher_new(pdl_stop_matcher **out, const char *const *stops, int n, pdl_error *err) {
    return stop_matcher_new(out, stops, NULL, n, err);
}

void pdl_stop_matcher_free(pdl_stop_matcher *m) { stop_matcher_free(m); }
