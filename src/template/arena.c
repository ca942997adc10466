/*
 * arena.c - the bump allocator behind templates and renders: many small
 * allocations, one free, and a byte limit that turns a runaway template into
 * an error instead of an exhausted machine.
 */
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_internal.h"

#define CHUNK_MIN (64 * 1024)

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *arena_alloc(tmpl_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->limit && (n > a->limit || a->used > a->limit - n)) return NULL;
    struct arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_MIN / 4 ? n : CHUNK_MIN;
        if (cap > SIZE_MAX - sizeof *c) return NULL;
        struct arena_chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) return NULL;
        nc->used = 0;
        nc->cap = cap;
        if (c && cap != CHUNK_MIN) {
            /* a big block: keep filling the current chunk afterwards */
            nc->next = c->next;
            c->next = nc;
            nc->used = n;
            a->used += n;
            memset(nc->data, 0, n);
            return nc->data;
        }
        nc->next = c;
        a->head = c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void arena_release(tmpl_arena *a) {
    struct arena_chunk *c = a->head;
    while (c) {
        struct arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}
